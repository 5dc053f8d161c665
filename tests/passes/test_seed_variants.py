"""Seed thunks produced by lowering (issue 19 point 1): ``gelu_approx`` (f32)
→ ``gelu_approx_out``.

Outputs against a numpy formula (float64), host and metal-sim; tolerance
2e-6 relative + 2e-6 absolute (f32 tanh differs from float64 by a few ulp)."""

from __future__ import annotations

import numpy as np
import pytest
import rlx

TOL = {"rtol": 2e-6, "atol": 2e-6}


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


@pytest.mark.parametrize("device", ["host", "metal-sim"])
def test_gelu_approx_lowers_to_gelu_approx_out(device: str) -> None:
    g = rlx.Graph("gelu")
    x = g.input("x", [3, 37])
    g.outputs(g.gelu_approx(x, name="y"))
    exe = rlx.compile(g, device=device)
    assert exe.stats["by_thunk"] == {"gelu_approx_out": 1}
    assert exe.stats["fallback_by_thunk"] == {} and exe.stats["metal_host_by_thunk"] == {}
    xs = np.random.default_rng(0).standard_normal((3, 37)).astype(np.float32) * 4
    np.testing.assert_allclose(np.asarray(exe.run(x=xs)["y"]), _gelu_tanh(xs), **TOL)
