"""Per-kernel micro-benchmark: rlx's GGUF matmuls at the three models' real shapes, beside
llama.cpp's and the machine's read bandwidth (issue 14 point 2).

Shapes and data: every (type, k, n) of a weight matrix in the three GGUFs (SmolLM2
Q4_1, Gemma3 and Qwen2.5 Q4_K_M: Q4_1, Q5_0, Q8_0, Q4_K, Q6_K; the output head,
tied embedding included), with the files' own bytes; Q4_0 and Q5_K, which these
files do not use, at Qwen2.5's FFN shapes with random valid blocks.

rlx: one host graph of ``dequant_matmul`` nodes (the op a model's GGUF projection
lowers to, so the same kernels and threads as a model: ``RLX_NUM_THREADS`` =
``--threads``), timed over the compiled schedule alone (inputs bound once), per
matmul:

* ``m=1 stream``: one node per tensor of that shape in the model (each its own
  weight, e.g. 60 × 0.5 MB for SmolLM2's FFN up/gate), so the weights stream from
  memory as in decode; GB/s = weight bytes ÷ time.
* ``m=1 hot``: 16 nodes sharing the first tensor (its own input each), so the
  weight stays in cache — the setting llama.cpp's test-backend-ops measures.
* ``m=64`` / ``m=256``: prefill GEMMs, GFLOP/s = 2·m·n·k ÷ time (hot).

Decode's fused kernels (gate+up+SwiGLU, down+residual) are not in this table.

llama.cpp: ``test-backend-ops perf`` (built by scripts/build_llama_kernel_bench.sh
from the peer llama.cpp sources with the llama-bench build's libraries and flags;
``$LLAMA_TBO``, default /tmp/tbo/test-backend-ops) on MUL_MAT test cases written
for the same shapes (``--test-file``), ``--threads`` threads, ``OMP_WAIT_POLICY=
ACTIVE``; it repeats one op on one weight (hot) with random data, and without
llama.cpp's load-time repacking of weights (its CPU "extra" buffer types), so its
figure is the generic kernel's. Missing binary: the llama.cpp columns read n/a.

Bandwidth: bench/membw.rs at 2 GiB (memory) and 32 MiB (cache-resident), same
threads. The Markdown goes into BENCHMARKS.md between the ``gguf_kernels.py``
markers unless ``--no-write``.

    python bench/gguf_kernels.py [--threads 2] [--runs 20] [--m 1 64 256] [--no-write]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import (  # noqa: E402
    LLAMA_FLAGS,
    PEER_VENV,
    machine,
    median_time,
    model_path,
    now,
    read_bandwidth,
    rlx_version,
    run_child,
    write_section,
)

MODEL_KEYS = {"smollm2": "SmolLM2", "gemma3-270m": "Gemma3", "qwen2.5-0.5b": "Qwen2.5"}
#: GGML type ids and (block elements, block bytes) of the types benchmarked
GGML = {"q4_0": (2, 32, 18), "q4_1": (3, 32, 20), "q5_0": (6, 32, 22), "q8_0": (8, 32, 34),
        "q4_k": (12, 256, 144), "q5_k": (13, 256, 176), "q6_k": (14, 256, 210)}  # fmt: skip
#: offsets of the f16 scale fields in a block (kept finite in random blocks)
F16_FIELDS = {"q4_0": [0], "q4_1": [0, 2], "q5_0": [0], "q8_0": [0], "q4_k": [0, 2],
              "q5_k": [0, 2], "q6_k": [208]}  # fmt: skip
GGML_OP_MUL_MAT = 29
HOT = 16
MAX_STREAM_BYTES = 256 << 20


class Shape:
    """One (type, k, n) of a model, with its weights (u8 ``[n, row_bytes]`` each)."""

    def __init__(self, model: str, typ: str, k: int, n: int, names: list[str]) -> None:
        self.model, self.typ, self.k, self.n, self.names = model, typ, k, n, names
        self.weights: list[Any] = []

    @property
    def label(self) -> str:
        uses = sorted({nm.split(".")[-2] if nm.startswith("blk.") else nm for nm in self.names})
        return f"{self.model} {'/'.join(uses)}"


def model_shapes() -> list[Shape]:
    """Every (type, k, n) of the three models' matrices, with their data; plus Q4_0 / Q5_K."""
    import numpy as np
    from gguf import GGUFReader

    shapes: list[Shape] = []
    for key, label in MODEL_KEYS.items():
        reader = GGUFReader(str(model_path(key)))
        names = {t.name for t in reader.tensors}
        tied = "output.weight" not in names
        groups: dict[tuple[str, int, int], Shape] = {}
        for t in reader.tensors:
            typ = t.tensor_type.name.lower()
            if len(t.shape) != 2 or typ not in GGML:
                continue
            if t.name == "token_embd.weight" and not tied:
                continue  # gathered rows only
            k, n = int(t.shape[0]), int(t.shape[1])
            sh = groups.setdefault((typ, k, n), Shape(label, typ, k, n, []))
            sh.names.append(t.name)
            if sum(w.nbytes for w in sh.weights) < MAX_STREAM_BYTES:
                sh.weights.append(np.asarray(t.data, dtype=np.uint8).reshape(n, -1))
        shapes += sorted(groups.values(), key=lambda s: (s.typ, s.k, s.n))
    rng = np.random.default_rng(0)
    for typ, k, n in (("q4_0", 896, 4864), ("q5_k", 4864, 896)):
        sh = Shape("(random)", typ, k, n, [f"{typ} at Qwen2.5's FFN shape"])
        _, bs, bb = GGML[typ]
        for _ in range(24):
            raw = rng.integers(0, 256, size=(n * k // bs, bb), dtype=np.uint8)
            for o in F16_FIELDS[typ]:
                scale = rng.uniform(0.01, 0.1, (raw.shape[0], 1)).astype(np.float16)
                raw[:, o : o + 2] = scale.view(np.uint8)
            sh.weights.append(raw.reshape(n, -1))
        shapes.append(sh)
    return shapes


def rlx_time(sh: Shape, m: int, weights: list[Any], nodes: int, runs: int) -> float:
    """Seconds per matmul: ``nodes`` dequant_matmul nodes over ``weights`` (cycled)."""
    import numpy as np
    import rlx

    g = rlx.Graph("kernels")
    params = [g.param(f"w{i}", list(w.shape), "u8") for i, w in enumerate(weights)]
    xs, outs = [], []
    for j in range(nodes):
        xs.append(g.input(f"x{j}", [m, sh.k]))
        outs.append(g.dequant_matmul(xs[-1], params[j % len(params)], scheme=sh.typ, n=sh.n,
                                     k=sh.k))  # fmt: skip
    g.outputs(*outs)
    ex = rlx.compile(g, device="host")
    for i, w in enumerate(weights):
        ex.set_param(f"w{i}", w)
    x = np.random.default_rng(1).standard_normal((m, sh.k)).astype(np.float32)
    ex.run(**{f"x{j}": x for j in range(nodes)})
    if ex.stats.get("fallback_thunks", 0):
        raise RuntimeError(f"[kernels] {sh.typ} {sh.k}x{sh.n}: fallback thunks {ex.stats}")
    if ex.stats.get("thunks", nodes) < nodes:  # a pass merged matmuls: per-node time is wrong
        raise RuntimeError(f"[kernels] {nodes} matmuls became {ex.stats['thunks']} thunks")
    return median_time(lambda: ex._native.run(ex._fallback, None), runs) / nodes


def llama_times(shapes: list[Shape], ms: list[int], threads: int) -> dict[str, float]:
    """``test-backend-ops perf`` µs per MUL_MAT per ``typ_k_n_m`` name (empty if unavailable)."""
    exe = os.environ.get("LLAMA_TBO", "/tmp/tbo/test-backend-ops")
    if not Path(exe).is_file():
        print(f"no {exe}: bash scripts/build_llama_kernel_bench.sh (llama.cpp columns n/a)")
        return {}
    lines = []
    for sh in shapes:
        tid, bs, bb = GGML[sh.typ]
        row = sh.k // bs * bb
        for m in ms:
            name = f"{sh.typ}_{sh.k}_{sh.n}_{m}"
            src0 = f"{tid} {sh.k} {sh.n} 1 1 {bb} {row} {row * sh.n} {row * sh.n}"
            src1 = f"0 {sh.k} {m} 1 1 4 {4 * sh.k} {4 * sh.k * m} {4 * sh.k * m}"
            lines.append(f"{GGML_OP_MUL_MAT} 0 {sh.n} {m} 1 1 0 2 {src0} {src1} {name}")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(dict.fromkeys(lines)) + "\n")
    env = dict(os.environ, TBO_THREADS=str(threads), OMP_WAIT_POLICY="ACTIVE")
    ch = run_child([exe, "perf", "-b", "CPU", "--test-file", f.name], env)
    os.unlink(f.name)
    found = re.findall(r"name=(\w+),.*?([0-9.]+) us/run", ch.out)
    if ch.code != 0 or not found:
        print(f"test-backend-ops failed ({ch.code}): {ch.err.strip()[-300:]}")
    return {name: float(us) * 1e-6 for name, us in found}


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--m", nargs="*", type=int, default=[1, 64, 256])
    ap.add_argument("--types", nargs="*", help="only these types (q4_k ...)")
    ap.add_argument("--no-llama", action="store_true", help="rlx and bandwidth only")
    ap.add_argument("--no-write", action="store_true", help="print, leave BENCHMARKS.md")
    a = ap.parse_args(argv)
    os.environ["RLX_NUM_THREADS"] = os.environ["RAYON_NUM_THREADS"] = str(a.threads)
    bw = {mib: read_bandwidth(mib, a.threads) for mib in (2048, 32)}
    print("read bandwidth:", {k: v["median_gbs"] for k, v in bw.items()}, flush=True)
    shapes = [s for s in model_shapes() if not a.types or s.typ in a.types]
    gemm = [m for m in a.m if m > 1]
    llama = {} if a.no_llama else llama_times(shapes, a.m, a.threads)
    head = ("| shape (model, tensors) | type | k × n | MiB × tensors | m=1 stream GB/s | "
            "m=1 hot GB/s rlx / llama.cpp | "
            + " | ".join(f"m={m} GFLOP/s rlx / llama.cpp" for m in gemm) + " |")  # fmt: skip
    rows = [head, "|---|---|---|---:|---:|---:|" + "---:|" * len(gemm)]
    for sh in shapes:
        mib = sh.weights[0].nbytes / 2**20
        count = max(len(sh.names), len(sh.weights))
        cells = [f"{sh.label}", sh.typ.upper(), f"{sh.k} × {sh.n}", f"{mib:.2f} × {count}"]
        if 1 in a.m:
            t = rlx_time(sh, 1, sh.weights, len(sh.weights), a.runs)
            cells.append(f"{sh.weights[0].nbytes / t / 1e9:.1f}")
            t = rlx_time(sh, 1, sh.weights[:1], HOT, a.runs)
            lt = llama.get(f"{sh.typ}_{sh.k}_{sh.n}_1")
            lc = f"{sh.weights[0].nbytes / lt / 1e9:.1f}" if lt else "n/a"
            cells.append(f"{sh.weights[0].nbytes / t / 1e9:.1f} / {lc}")
        else:
            cells += ["", ""]
        for m in gemm:
            flops = 2.0 * m * sh.n * sh.k
            big = sh.weights[0].nbytes > 64 << 20
            t = rlx_time(sh, m, sh.weights[:1], 1 if big else 4, max(a.runs // 4, 3))
            lt = llama.get(f"{sh.typ}_{sh.k}_{sh.n}_{m}")
            lc = f"{flops / lt / 1e9:.0f}" if lt else "n/a"
            cells.append(f"{flops / t / 1e9:.0f} / {lc}")
        rows.append("| " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
    section = [
        f"Measured {now()} by `bench/gguf_kernels.py`, {a.threads} threads, median of {a.runs} "
        "runs per figure (GEMM: a quarter of that).",
        "",
        f"- Machine: {machine()}",
        f"- Read bandwidth (bench/membw.rs, {a.threads} threads): "
        f"{bw[2048]['median_gbs']:.1f} GB/s over a 2 GiB buffer (memory), "
        f"{bw[32]['median_gbs']:.1f} GB/s over 32 MiB (cache-resident)",
        f"- {rlx_version()}: host `dequant_matmul` graphs; llama.cpp: test-backend-ops perf, "
        f"MUL_MAT, OMP_WAIT_POLICY=ACTIVE, built with {LLAMA_FLAGS}, no weight repacking "
        f"({'found' if llama else 'not available: n/a'}; peer {PEER_VENV})",
        "",
        *rows,
    ]
    if not a.no_write:
        write_section("gguf_kernels.py", section, "Kernels: GB/s per GGUF type (issue 14 point 2)")
    print("\n".join(section))
    return 0


if __name__ == "__main__":
    sys.exit(main())
