"""LoRA fine-tuning of the real SmolLM2-135M (issue 18 point 5), not just the
tiny fixture of ``tests/train/test_lora.py``: rank-8 adapters on q / v of
every layer, the base weights frozen and still packed Q4_1 blocks, the
corpus ``rlx.train`` generates from the standard library's docstrings; the
loss falls over 16 AdamW steps (lr 2e-3) cycling over four 32-token
windows (mean of the first four steps 4.59, of the last four 2.39 seen;
required: below 0.7× the first)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rlx.optim import AdamW
from rlx.train import LoraConfig, LoraTrainer
from rlx.train.corpus import stdlib_corpus


def test_smollm2_lora_loss_falls(smollm2_path: Path) -> None:
    tr = LoraTrainer(
        smollm2_path, 32, LoraConfig(rank=8, alpha=16.0), AdamW(lr=2e-3, weight_decay=0.0)
    )
    layers = len(tr.adapters) // 4
    assert layers >= 30 and sorted(tr.adapters) == sorted(
        f"blk.{i}.{p}.lora_{ab}" for i in range(layers) for p in ("attn_q", "attn_v") for ab in "ab"
    )
    assert tr.exe.state("blk.0.attn_q.lora_a").shape == (8, tr.config.hidden)
    proj = ("attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight")
    packed = [n for n in tr.exe.params if n.endswith(proj)]
    assert len(packed) == 4 * layers and all(tr.exe.params[n].dtype == "u8" for n in packed)
    toks = np.asarray(tr.tokenizer.encode(stdlib_corpus()), np.int64)[:1024]
    windows = [tr.batch(toks, i) for i in range(4)]
    losses = [tr.step(windows[i % 4])["loss"] for i in range(16)]
    assert np.isfinite(losses).all()
    first, last = np.mean(losses[:4]), np.mean(losses[-4:])
    print(f"smollm2 lora: mean loss of the first 4 steps {first:.3f}, last 4 {last:.3f}")
    assert last < 0.7 * first, losses
