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
from rlx.cli_inspect import metal_per_layer
from rlx.models.decoder import load

GGUF = Path(__file__).resolve().parent / "fixtures" / "gguf"
TOKENS = [1, 5, 9, 2, 7]


# dispatches per layer (at most): q / k / v with the norm prologue and the
# bias / q-k norm / RoPE / KV-append epilogue (3 sharing one barrier
# interval), attention, o-proj (+ residual), gate·up with its norm, down (+
# residual) = 7. Gemma3 folds its post-attention norm + residual into the
# gate·up prologue and its post-FFN norm + residual into the next layer's
# q / k / v prologue (the planner keeps their inputs off the sums / results,
# see keep_post_norm_inputs); only the last layer keeps its post-FFN
# norm_residual dispatch (the final norm sits behind the last-token gather)
PER_LAYER = {"llama-q8_0": 8, "qwen2-q8_0": 8, "gemma3-q8_0": 8}
# Gemma3, layer by layer (rlx inspect's count: a barrier belongs to the
# layer of the command after it): 7 dispatches and 5 barriers (before q / k
# / v, attention, o-proj, gate·up, down; the first layer has none before
# q / k / v), 8 and 6 in the last layer (+ norm_residual)
GEMMA3_LAYERS = {"dispatches": [7, 7, 8], "barriers": [4, 5, 6]}


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
    if name.startswith("gemma3"):
        per = metal_per_layer(exe, layers)
        assert {k: per[k] for k in GEMMA3_LAYERS} == GEMMA3_LAYERS, per
    worst = 0.0
    for t in TOKENS:
        want = host.next_logits([t])
        got = sim.next_logits([t])
        scale = float(np.max(np.abs(want)))
        worst = max(worst, float(np.max(np.abs(got - want))) / scale)
    assert worst <= 1e-4, worst
