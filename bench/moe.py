"""MoE decode / prefill figures on a realistic-size random Mixtral-style GGUF.

Builds (once, cached under ``--out``) an HF directory with random weights —
8 experts, top-2, hidden 1024, expert FFN 2048, 8 layers, 16 heads / 8 KV
heads, the 512-token tokenizer of tests/fixtures/hf/mixtral — converts it to
GGUF (``Q8_0`` by default) the way llama.cpp does (tests/models/hf_util.py
``hf_to_gguf``: experts stacked ``ffn_*_exps``, architecture ``llama``),
then runs ``rlx bench``'s figures (peak RSS includes building the file when
it is not cached yet) (``rlx.models.bench.run``) and prints them
with the bytes of expert weights a decode token reads: the kernels run only
the chosen experts, so that is ``top_k`` experts × 3 matrices per layer (the
minimum) — checked by tests/models/test_hf_moe.py
``test_grouped_matmul_reads_only_chosen_experts``.

    .venv/bin/python bench/moe.py [--qtype Q8_0] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "models"))

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--qtype", default="Q8_0")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("/tmp/rlx-moe-bench"))
    args = ap.parse_args()
    os.environ.setdefault("RAYON_NUM_THREADS", str(args.threads))
    import gguf
    from hf_util import hf_to_gguf

    path = args.out / f"mixtral-8x-{HIDDEN}-{args.qtype.lower()}.gguf"
    if not path.exists():
        hf = make_hf(args.out / "hf")
        hf_to_gguf(hf, path, args.qtype)
        shutil.rmtree(hf)
    from rlx.models.bench import run

    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[args.qtype]]
    per_expert = 3 * FFN * HIDDEN // block * size  # gate + up + down of one expert
    fig = run(str(path))
    fig.update(
        # top_k experts per layer: the minimum, which the kernels read (see the doc)
        expert_bytes_per_decode_token=TOP_K * per_expert * LAYERS,
        expert_bytes_all=EXPERTS * per_expert * LAYERS,
        gguf_bytes=path.stat().st_size,
    )
    print(json.dumps(fig))


if __name__ == "__main__":
    main()
