"""The Metal plan's decode fusion (``metal_decode_fusion``): on the tiny
llama / qwen2 / gemma3 GGUF fixtures, a decode step's plan has at most 8
kernel dispatches per layer (q / k / v with the RMSNorm prologue and the
bias / q-k norm / RoPE / KV-append epilogue, attention, output projection
+ residual, gate·up with its norm, down + residual, and Gemma3's post-norm
+ residual), and metal-sim running it gives the host's logits token after
token — with the default f16 KV cache (the k / v dispatches round the new
rows to half as they append them) and with an f32 one.

Tolerance: max |logit difference| ≤ 1e-4 · max |host logit| (f32 sums in
another order: the fused kernels stage the norm in threadgroup memory;
measured ≤ 5e-7). The host runs with its int8-activation GEMVs off
(``rlx.set_int8_activations``), as in test_metal_sim_decoder.py: the Metal
kernels dot f32 activations, and the int8 rounding (≈ 5e-5 of the logit
range here) would otherwise be what is measured — with an f16 cache a K / V
value that differs by that much can land on the other f16 neighbour."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
import rlx
from rlx.models.decoder import load

GGUF = Path(__file__).resolve().parent / "fixtures" / "gguf"
TOKENS = [1, 5, 9, 2, 7]


# dispatches per layer the plan reaches today (Gemma3: q / k / v, attention,
# o-proj, post-norm + residual, gate·up, down, post-norm + residual = 9; its
# second post-norm + residual cannot fold into the next q / k / v prologue
# while the planner puts the residual on the down projection's output)
PER_LAYER = {"llama-q8_0": 8, "qwen2-q8_0": 8, "gemma3-q8_0": 10}


@pytest.fixture(autouse=True)
def _exact_host_matmuls() -> Iterator[None]:
    before = rlx.set_int8_activations(False)
    yield
    rlx.set_int8_activations(before)


@pytest.mark.parametrize("kv_dtype", [None, "f32"], ids=["kv-default", "kv-f32"])
@pytest.mark.parametrize("name", sorted(PER_LAYER))
def test_fused_decode_plan_is_small_and_matches_host(name: str, kv_dtype: Optional[str]) -> None:
    path = str(GGUF / f"{name}.gguf")
    # the default KV cache of a GGUF model is f16: the k / v dispatches round
    # their rows to half as they append them (no cast dispatch)
    host = load(path, kv_dtype=kv_dtype)
    sim = load(path, device="metal-sim", kv_dtype=kv_dtype)
    assert host.kv_dtype == (kv_dtype or "f16")
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
