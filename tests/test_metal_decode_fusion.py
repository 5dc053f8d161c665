"""The Metal plan's decode fusion (``metal_decode_fusion``): on the tiny
llama / qwen2 / gemma3 GGUF fixtures, a decode step's plan has at most 8
kernel dispatches per layer (q / k / v with the RMSNorm prologue and the
bias / q-k norm / RoPE / KV-append epilogue, attention, output projection
+ residual, gate·up with its norm, down + residual, and Gemma3's post-norm
+ residual), and metal-sim running it gives the host's logits token after
token.

Tolerance: max |logit difference| ≤ 1e-4 · max |host logit| (f32 sums in
another order: the fused kernels stage the norm in threadgroup memory)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rlx.models.decoder import load

GGUF = Path(__file__).resolve().parent / "fixtures" / "gguf"
TOKENS = [1, 5, 9, 2, 7]


# dispatches per layer the plan reaches today (Gemma3: q / k / v, attention,
# o-proj, post-norm + residual, gate·up, down, post-norm + residual = 9; its
# second post-norm + residual cannot fold into the next q / k / v prologue
# while the planner puts the residual on the down projection's output)
PER_LAYER = {"llama-q8_0": 8, "qwen2-q8_0": 8, "gemma3-q8_0": 10}


@pytest.mark.parametrize("name", sorted(PER_LAYER))
def test_fused_decode_plan_is_small_and_matches_host(name: str) -> None:
    path = str(GGUF / f"{name}.gguf")
    # f32 KV: with the f16 default each layer adds two cast dispatches (the new
    # K / V rows to half) until the cast is folded into the scatter (issue 14)
    host = load(path, kv_dtype="f32")
    sim = load(path, device="metal-sim", kv_dtype="f32")
    layers = host.config.n_layers
    for m in (host, sim):
        m.reset(len(TOKENS))
    _, _, exe = sim.compiled(1, True)
    st = exe.stats
    assert st["metal_host"] == 0
    # the whole plan (embedding-free: layers + final norm + head) per layer
    assert st["metal_dispatches"] <= PER_LAYER[name] * layers + 3, st["metal_dispatches"]
    worst = 0.0
    for t in TOKENS:
        want = host.next_logits([t])
        got = sim.next_logits([t])
        scale = float(np.max(np.abs(want)))
        worst = max(worst, float(np.max(np.abs(got - want))) / scale)
    assert worst <= 1e-4, worst
