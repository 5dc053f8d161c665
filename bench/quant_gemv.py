"""Micro-benchmark: the host's native quantised GEMV (and a prefill GEMM).

For SmolLM2- / Gemma3-like shapes, builds one graph holding ``--layers``
independent ``dequant_matmul`` nodes (each with its own packed weight, so
the working set exceeds the caches the way a model's does), runs it on the
host and reports the median time per matmul and the GB/s of packed weight
bytes read. For comparison the same products are done by numpy on
dequantised f32 matrices (``x @ W.T``; its GB/s counts the f32 bytes).

    python bench/quant_gemv.py [--runs 30] [--layers 16] [--m 64]
    RLX_NUM_THREADS=2 python bench/quant_gemv.py --models   # the three models' shapes

Timings are not asserted anywhere; machines are noisy.
"""

from __future__ import annotations

import argparse

import numpy as np
import rlx
from gguf import GGMLQuantizationType as T
from gguf import quants
from harness import median_time
from rlx.reference.gguf_blocks import GEOMETRY, dequantize_rows, row_bytes

SHAPES = [
    ("q4_1", 576, 1536),
    ("q4_1", 1536, 576),
    ("q8_0", 576, 1536),
    ("q8_0", 1536, 576),
    ("q4_0", 576, 1536),
    ("q5_0", 640, 2048),
    ("q4_k", 768, 2048),
    ("q4_k", 2048, 768),
    ("q6_k", 768, 2048),
    ("q2_k", 768, 2048),
    ("f16", 576, 1536),
]

#: the matmuls of the three models (model, type, k, n). k-quants need k a
#: multiple of 256, so the 640- and 896-wide inputs of Gemma3 / Qwen2.5 are
#: Q5_0 / Q8_0 in those files; the huge output projections run with one
#: weight per graph.
MODEL_SHAPES = [
    ("smollm2", "q4_1", 576, 1536),
    ("smollm2", "q4_1", 1536, 576),
    ("smollm2", "q8_0", 576, 49152),
    ("gemma3", "q5_0", 640, 2048),
    ("gemma3", "q8_0", 640, 2048),
    ("gemma3", "q6_k", 2048, 640),
    ("gemma3", "q5_0", 2048, 640),
    ("gemma3", "q8_0", 640, 262144),
    ("qwen2.5", "q5_0", 896, 4864),
    ("qwen2.5", "q8_0", 896, 4864),
    ("qwen2.5", "q4_k", 4864, 896),
    ("qwen2.5", "q6_k", 4864, 896),
    ("qwen2.5", "q8_0", 896, 151936),
]

GGUF_QUANTIZE = {"q4_0": T.Q4_0, "q4_1": T.Q4_1, "q5_0": T.Q5_0, "q8_0": T.Q8_0}


def packed(typ: str, n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    if typ == "f16":
        w = rng.standard_normal((n, k)).astype(np.float32)
        return w.astype(np.float16).view(np.uint8).reshape(n, -1)
    if typ in GGUF_QUANTIZE and n * k <= 1 << 24:
        w = rng.standard_normal((n, k)).astype(np.float32)
        return np.ascontiguousarray(quants.quantize(w, GGUF_QUANTIZE[typ]), np.uint8)
    # random valid blocks (finite scales): as fast as real ones to multiply
    bs, bb = GEOMETRY[typ]
    nb = n * k // bs
    raw = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    f16_fields = {
        "q4_0": [0],
        "q4_1": [0, 2],
        "q5_0": [0],
        "q8_0": [0],
        "q4_k": [0, 2],
        "q6_k": [208],
        "q2_k": [80, 82],
    }[typ]
    for o in f16_fields:
        raw[:, o : o + 2] = rng.uniform(0.01, 0.1, (nb, 1)).astype(np.float16).view(np.uint8)
    return raw.reshape(n, row_bytes(typ, k))


def bench(typ: str, k: int, n: int, m: int, layers: int, runs: int, numpy: bool = True) -> dict:
    rng = np.random.default_rng(0)
    ws = [packed(typ, n, k, rng) for _ in range(layers)]
    g = rlx.Graph("bench")
    x = g.input("x", [m, k])
    outs = []
    for i, wq in enumerate(ws):
        w = g.param(f"w{i}", list(wq.shape), "u8")
        outs.append(g.dequant_matmul(x, w, scheme=typ, n=n, k=k))
    g.outputs(*outs)
    ex = rlx.compile(g, device="host")
    for i, wq in enumerate(ws):
        ex.set_param(f"w{i}", wq)
    xv = rng.standard_normal((m, k)).astype(np.float32)
    ex.run(x=xv)
    assert ex.stats["fallback_thunks"] == 0, ex.stats
    # time the schedule itself (inputs already in the arena)
    t_host = median_time(lambda: ex._native.run(ex._fallback), runs) / layers
    t_np = float("nan")
    if numpy:
        wf = [dequantize_rows(wq, typ, k) for wq in ws]
        t_np = median_time(lambda: [xv @ w.T for w in wf], runs) / layers
    pbytes = ws[0].nbytes
    return {
        "typ": typ,
        "k": k,
        "n": n,
        "m": m,
        "kib": pbytes / 1024,
        "host_us": t_host * 1e6,
        "host_gbs": pbytes / t_host / 1e9,
        "host_gflops": 2 * m * n * k / t_host / 1e9,
        "np_us": t_np * 1e6,
        "np_gbs": n * k * 4 / t_np / 1e9,
        "np_gflops": 2 * m * n * k / t_np / 1e9,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--m", type=int, default=64, help="rows for the prefill table (0: skip)")
    ap.add_argument(
        "--models", action="store_true", help="only the three models' shapes (m = 1, 4, --m)"
    )
    a = ap.parse_args()
    if a.models:
        models(a)
        return
    print(f"GEMV (m = 1), median of {a.runs} runs, {a.layers} weights per graph")
    print(
        f"{'type':6} {'k':>5} {'n':>5} {'KiB':>7} | {'host µs':>8} {'GB/s':>6} | "
        f"{'numpy µs':>8} {'f32 GB/s':>8} | {'speedup':>7}"
    )
    for typ, k, n in SHAPES:
        r = bench(typ, k, n, 1, a.layers, a.runs)
        print(
            f"{typ:6} {k:5} {n:5} {r['kib']:7.0f} | {r['host_us']:8.1f} {r['host_gbs']:6.1f} | "
            f"{r['np_us']:8.1f} {r['np_gbs']:8.1f} | {r['np_us'] / r['host_us']:6.2f}x"
        )
    if a.m <= 0:
        return
    print(f"\nPrefill GEMM (m = {a.m}), GFLOP/s")
    print(
        f"{'type':6} {'k':>5} {'n':>5} | {'host µs':>8} {'GFLOP/s':>8} | "
        f"{'numpy µs':>8} {'GFLOP/s':>8}"
    )
    for typ, k, n in SHAPES[::2]:
        r = bench(typ, k, n, a.m, max(a.layers // 4, 2), max(a.runs // 3, 5))
        print(
            f"{typ:6} {k:5} {n:5} | {r['host_us']:8.1f} {r['host_gflops']:8.1f} | "
            f"{r['np_us']:8.1f} {r['np_gflops']:8.1f}"
        )


def models(a: argparse.Namespace) -> None:
    """GEMV (m = 1), small batch (m = 4) and prefill (m = --m) at the models' shapes."""
    print(f"median of {a.runs} runs (prefill: {max(a.runs // 3, 5)}); GB/s of packed bytes")
    print(
        f"{'model':8} {'type':5} {'k':>5} {'n':>6} {'MiB':>6} | {'m=1 µs':>8} {'GB/s':>5} | "
        f"{'m=4 µs':>8} {'GB/s':>5} | {f'm={a.m} µs':>9} {'GFLOP/s':>7}"
    )
    for model, typ, k, n in MODEL_SHAPES:
        big = n * k > 1 << 24
        layers = 1 if big else a.layers
        r1 = bench(typ, k, n, 1, layers, a.runs, numpy=False)
        r4 = bench(typ, k, n, 4, layers, a.runs, numpy=False)
        line = (
            f"{model:8} {typ:5} {k:5} {n:6} {r1['kib'] / 1024:6.1f} | "
            f"{r1['host_us']:8.1f} {r1['host_gbs']:5.1f} | "
            f"{r4['host_us']:8.1f} {r4['host_gbs']:5.1f} | "
        )
        if a.m > 0 and not big:
            rp = bench(typ, k, n, a.m, max(a.layers // 4, 2), max(a.runs // 3, 5), numpy=False)
            line += f"{rp['host_us']:9.1f} {rp['host_gflops']:7.1f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
