"""MoE decode / prefill against llama.cpp on a realistic-size random Mixtral-style GGUF.

Builds (once, cached under ``--out``) an HF directory with random weights —
8 experts, top-2, hidden 1024, expert FFN 2048, 8 layers, 16 heads / 8 KV
heads, the 512-token tokenizer of tests/fixtures/hf/mixtral — converts it to
GGUF (``Q8_0`` by default) the way llama.cpp does (tests/models/hf_util.py
``hf_to_gguf``: experts stacked ``ffn_*_exps``, architecture ``llama``,
pre-tokenizer ``gpt-2``, a name llama.cpp accepts), then runs both engines on
that one file, alternating round by round with compare.py's rules
(bench/harness.py: ``OMP_WAIT_POLICY=ACTIVE`` for llama-bench, each round's
load and other processes' CPU recorded, contaminated rounds discarded, medians
with min–max): llama-bench ``-p 64,256,512 -n 32,128`` + llama-completion's load
time against a fresh rlx process (``rlx.load``, ``rlx.models.bench``). Printed
with it: the bytes of expert weights a decode token reads. The kernels run only
the chosen experts, so that is ``top_k`` experts × 3 matrices per layer (the
minimum) — checked by tests/models/test_hf_moe.py
``test_grouped_matmul_reads_only_chosen_experts``.

The Markdown goes into BENCHMARKS.md between the ``moe.py`` markers unless
``--no-write``.

    .venv/bin/python bench/moe.py [--qtype Q8_0] [--threads 2] [--rounds 6] [--no-write]
    .venv/bin/python bench/moe.py --rounds 1 --quick     # harness check (pp64 / tg32)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Optional

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "models"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import ENGINES, PP, TG, llama_round, rlx_round, speed_table  # noqa: E402
from harness import (  # noqa: E402
    LLAMA_FLAGS,
    MAX_OTHERS,
    alternate,
    llama_bench,
    machine,
    now,
    rlx_version,
    round_log,
    round_notes,
    write_section,
)

HIDDEN, FFN, LAYERS, EXPERTS, TOP_K, HEADS, KV = 1024, 2048, 8, 8, 2, 16, 8


def make_hf(dst: Path) -> Path:
    """A random Mixtral HF directory (float32 safetensors, per-expert tensors)."""
    from hf_util import FIXTURES, write_safetensors

    src = FIXTURES / "mixtral"
    dst.mkdir(parents=True, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(src / f, dst / f)
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(
        hidden_size=HIDDEN,
        intermediate_size=FFN,
        num_hidden_layers=LAYERS,
        num_local_experts=EXPERTS,
        num_experts_per_tok=TOP_K,
        num_attention_heads=HEADS,
        num_key_value_heads=KV,
        head_dim=HIDDEN // HEADS,
        max_position_embeddings=1024,
    )
    (dst / "config.json").write_text(json.dumps(cfg))
    rng = np.random.default_rng(0)
    hd, vocab = HIDDEN // HEADS, cfg["vocab_size"]

    def mat(n: int, k: int) -> tuple[str, np.ndarray]:
        return "F32", (rng.standard_normal((n, k), np.float32) / np.sqrt(k)).astype(np.float32)

    t = {"model.embed_tokens.weight": mat(vocab, HIDDEN),
         "model.norm.weight": ("F32", np.ones(HIDDEN, np.float32))}  # fmt: skip
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = ("F32", np.ones(HIDDEN, np.float32))
        t[p + "post_attention_layernorm.weight"] = ("F32", np.ones(HIDDEN, np.float32))
        t[p + "self_attn.q_proj.weight"] = mat(HEADS * hd, HIDDEN)
        t[p + "self_attn.k_proj.weight"] = mat(KV * hd, HIDDEN)
        t[p + "self_attn.v_proj.weight"] = mat(KV * hd, HIDDEN)
        t[p + "self_attn.o_proj.weight"] = mat(HIDDEN, HEADS * hd)
        t[p + "block_sparse_moe.gate.weight"] = mat(EXPERTS, HIDDEN)
        for e in range(EXPERTS):
            q = f"{p}block_sparse_moe.experts.{e}."
            t[q + "w1.weight"], t[q + "w3.weight"] = mat(FFN, HIDDEN), mat(FFN, HIDDEN)
            t[q + "w2.weight"] = mat(HIDDEN, FFN)
    write_safetensors(dst / "model.safetensors", t)
    return dst


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--qtype", default="Q8_0")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--max-others", type=float, default=MAX_OTHERS,
                    help="discard rounds where other processes took more cores")  # fmt: skip
    ap.add_argument("--out", type=Path, default=Path("/tmp/rlx-moe-bench"))
    ap.add_argument("--no-write", action="store_true", help="print, leave BENCHMARKS.md")
    ap.add_argument("--quick", action="store_true",
                    help="pp64 / tg32 only, no write: a check that the harness runs")  # fmt: skip
    args = ap.parse_args(argv)
    pp, tg = ([64], [32]) if args.quick else (PP, TG)
    import gguf
    from hf_util import hf_to_gguf

    path = args.out / f"mixtral-8x-{HIDDEN}-{args.qtype.lower()}.gguf"
    if not path.exists():
        hf = make_hf(args.out / "hf")
        hf_to_gguf(hf, path, args.qtype)
        shutil.rmtree(hf)
    bench = llama_bench()
    if bench is None:
        print("no llama-bench binary: WITH_LLAMA_BENCH=1 bash scripts/setup_peers.sh")
        return 1
    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[args.qtype]]
    per_expert = 3 * FFN * HIDDEN // block * size  # gate + up + down of one expert
    read, every = TOP_K * per_expert * LAYERS, EXPERTS * per_expert * LAYERS
    engines = {
        "llama.cpp": lambda: llama_round(bench, path, args.threads, "ACTIVE", pp, tg),
        "rlx": lambda: rlx_round(path, args.threads, pp, tg),
    }
    key = f"moe-{args.qtype.lower()}"
    names = {key: f"Mixtral-style 8×top-2, hidden {HIDDEN}, {LAYERS} layers, {args.qtype}"}
    results = {key: alternate(args.rounds, engines, key, args.max_others)}
    section = [
        f"Measured {now()} by `bench/moe.py` ({args.rounds} alternating rounds, medians "
        f"(min–max) over the rounds in which other processes took ≤ {args.max_others} cores; "
        f"† = all rounds contaminated), {args.threads} threads, same GGUF for both engines "
        f"({path.stat().st_size / 2**20:.0f} MiB, random weights).",
        "",
        f"- Machine: {machine()}",
        f"- llama.cpp: llama-bench, OMP_WAIT_POLICY=ACTIVE, built with {LLAMA_FLAGS}; "
        f"{rlx_version()}",
        f"- Expert weights read per decode token: {read / 1e6:.1f} MB = top-{TOP_K} of "
        f"{EXPERTS} experts × 3 matrices × {LAYERS} layers, the minimum "
        f"(all experts: {every / 1e6:.1f} MB)",
        *round_notes(names[key], results[key], ENGINES),
        "",
        *speed_table(results, names, pp, tg),
        "",
        *round_log(names[key], results[key], ENGINES),
    ]
    if not (args.no_write or args.quick):
        write_section("moe.py", section, "Mixture of experts (issue 16 point 2)")
    print("\n".join(section))
    return 0


if __name__ == "__main__":
    sys.exit(main())
