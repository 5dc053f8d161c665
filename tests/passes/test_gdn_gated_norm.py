"""fuse_gdn_gated_norm on compiled graphs: ``rms_norm(x) · silu(z)`` becomes
one thunk; outputs with the pass on equal the outputs with it off
(RLX_DISABLE_PASS) and numpy's; it refuses when the norm stays live or the
data is f16."""

from __future__ import annotations

import numpy as np
import pytest
import rlx

PASS = "fuse_gdn_gated_norm"


def _compile(g: rlx.Graph, monkeypatch: pytest.MonkeyPatch, disable: str = "") -> rlx.Executable:
    monkeypatch.setenv("RLX_DISABLE_PASS", disable)
    return rlx.compile(g)


def _graph(
    rows: int, h: int, beta: bool = False, norm_out: bool = False, dtype: str = "f32"
) -> rlx.Graph:
    g = rlx.Graph("gated_norm")
    x = g.input("x", [rows, h], dtype)
    z = g.input("z", [rows, h], dtype)
    b = g.param("beta", [h], dtype) if beta else None
    n = g.rms_norm(x, g.param("gamma", [h], dtype), b, eps=1e-6, name="n")
    out = g.mul(n, g.silu(z), name="out")
    # x and z read again afterwards: the planner cannot put the output on
    # their slots, which the fused kernel reads while writing
    g.outputs(out, g.add(x, z, name="xz"), *([n] if norm_out else []))
    return g


def _ref(x: np.ndarray, z: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    x64, z64 = x.astype(np.float64), z.astype(np.float64)
    n = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-6) * gamma + beta
    return n * z64 / (1 + np.exp(-z64))


@pytest.mark.parametrize("rows,h,beta", [(1, 128, False), (4, 33, True), (16, 64, False)])
def test_fires_and_matches(monkeypatch: pytest.MonkeyPatch, rows: int, h: int, beta: bool) -> None:
    rng = np.random.default_rng(rows * 100 + h)
    x = rng.standard_normal((rows, h)).astype(np.float32)
    z = (3 * rng.standard_normal((rows, h))).astype(np.float32)
    gamma = rng.standard_normal(h).astype(np.float32)
    b = rng.standard_normal(h).astype(np.float32) if beta else np.zeros(h, np.float32)
    outs = []
    for disable in ("", PASS):
        exe = _compile(_graph(rows, h, beta), monkeypatch, disable)
        exe.set_param("gamma", gamma)
        if beta:
            exe.set_param("beta", b)
        outs.append((exe, exe.run(x=x, z=z)["out"]))
    (on, y_on), (off, y_off) = outs
    assert on.stats["pass_matches"][PASS] == 1
    assert off.stats["pass_matches"][PASS] == -1
    # rms_norm and the silu · mul region the graph fusions make of the gate → 1
    assert on.stats["dispatches"] == off.stats["dispatches"] - 1
    assert "fused_rms_norm_mul_silu" in on.schedule
    np.testing.assert_allclose(y_off, _ref(x, z, gamma, b), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y_on, y_off, rtol=1e-5, atol=1e-6)


def test_refuses_norm_that_is_an_output(monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _compile(_graph(2, 16, norm_out=True), monkeypatch)
    assert exe.stats["pass_matches"][PASS] == 0
    assert "fused_rms_norm_mul_silu" not in exe.schedule


def test_refuses_f16(monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _compile(_graph(2, 16, dtype="f16"), monkeypatch)
    assert exe.stats["pass_matches"][PASS] == 0


def test_refuses_output_on_the_gate_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    # z dies at the SiLU, so the planner puts the product on z's slot
    g = rlx.Graph("gated_norm_reuse")
    x, z = g.input("x", [4, 33]), g.input("z", [4, 33])
    g.outputs(g.mul(g.rms_norm(x, g.param("gamma", [33])), g.silu(z), name="out"))
    exe = _compile(g, monkeypatch)
    assert exe.stats["pass_matches"][PASS] == 0
    assert "fused_rms_norm_mul_silu" not in exe.schedule
