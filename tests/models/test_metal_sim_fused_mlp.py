"""The fused decode MLP of the Granite-4 hybrid GGUF files on metal-sim:
every plan (prefill and the one-token decode) is kernel dispatches only.

Granite's decode schedule has the planner's tightest layout: the gated
product placed over the dead MLP input ``x`` and the residual sum over the
dead product. ``fuse_decode_mlp`` moves the product into the bytes of the
removed gate / up GEMV output, so ``fused_mlp_gate_up_swiglu`` and
``fused_mlp_down_residual`` never read their ``x`` where they write (the
Metal GEMV kernels cannot stage ``x``; those thunks used to run on the host,
6 host commands per decode token on the MoE file, 3 on the dense one).

Oracle: the host executor on the same file (f32 activations: the host's
int8-activation GEMVs are switched off), a 8-token prefill then 4 decode
steps; tolerance max |metal-sim − host| ≤ 1e-4 of the largest |logit|
(f32 summation order only; measured ≲ 1e-6).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rlx
from hf_util import expected, fixture, rel

GGUF = Path(__file__).resolve().parent.parent / "fixtures" / "gguf"
TOL = 1e-4


@pytest.fixture
def no_int8() -> Any:
    before = rlx.set_int8_activations(False)
    yield
    rlx.set_int8_activations(before)


def _run(model: rlx.DecoderModel, ids: list[int]) -> np.ndarray:
    model.reset(len(ids))
    pre = model._feed(ids[:8], all_rows=True)
    dec = [model.next_logits([t]) for t in ids[8:]]
    return np.concatenate([pre, np.stack(dec)])


@pytest.mark.parametrize(
    ("name", "tails"), [("granitemoehybrid", 3), ("granitemoehybrid_dense", 0)]
)
def test_granite_decode_mlp_runs_as_kernels(name: str, tails: int, no_int8: None) -> None:
    path = GGUF / f"{name}-q8_0.gguf"
    ids = [int(t) for t in expected(fixture(name))["ids24"][:12]]
    host = _run(rlx.load(str(path)), ids)
    sim = rlx.load(str(path), device="metal-sim")
    got = _run(sim, ids)
    assert rel(got, host) < TOL, rel(got, host)
    assert any(k[0] == 1 for k in sim._runners) and any(k[0] > 1 for k in sim._runners)
    for key, r in sim._runners.items():
        st = r.exe.stats
        assert (st["metal_host"], st["metal_host_by_thunk"]) == (0, {}), (key, r.exe.report())
        if key[0] == 1:
            # the fusion still fires on every layer (3): only the layout moved
            by = st["by_thunk"]
            assert by.get("fused_mlp_gate_up_swiglu") == 3, by
            # the MoE file's shared MLP adds into the expert sum (a tail);
            # the dense file scales the MLP output first (no tail)
            assert by.get("fused_mlp_down_residual", 0) == tails, by
