"""fuse_depthwise_conv1d_bsc on compiled graphs: the GDN ``ssm_conv1d``
transpose → depthwise conv2d → transpose (→ SiLU) chain on ``[1, seq, C]``
becomes one thunk; outputs with the pass on equal the outputs with it off
(RLX_DISABLE_PASS) and numpy's; it refuses when an intermediate stays live."""

from __future__ import annotations

import numpy as np
import pytest
import rlx

PASS = "fuse_depthwise_conv1d_bsc"


def _compile(g: rlx.Graph, monkeypatch: pytest.MonkeyPatch, disable: str = "") -> rlx.Executable:
    monkeypatch.setenv("RLX_DISABLE_PASS", disable)
    return rlx.compile(g)


def _graph(w: int, c: int, k: int, silu: bool = True, conv_out: bool = False) -> rlx.Graph:
    """x [1, w, c] → conv over w (valid, depthwise, k taps) → [1, w-k+1, c]."""
    s = w - k + 1
    g = rlx.Graph("conv1d")
    x = g.input("x", [1, w, c])
    bcw = g.reshape(g.transpose(x, [0, 2, 1]), [1, c, 1, w])
    y = g.conv2d(bcw, g.param("w", [c, 1, 1, k]), groups=c, name="conv")
    bsc = g.transpose(g.reshape(y, [1, c, s]), [0, 2, 1])
    out = g.silu(bsc, name="out") if silu else g.mul(bsc, 1.0, name="out")
    # x read again afterwards: the planner cannot put the output on x's
    # slot, which the fused kernel would read while writing
    g.outputs(out, g.mul(x, 2.0, name="x2"), *([y] if conv_out else []))
    return g


def _ref(x: np.ndarray, wt: np.ndarray, silu: bool) -> np.ndarray:
    w, k = x.shape[1], wt.shape[-1]
    taps = wt.reshape(-1, k).astype(np.float64)  # [c, k]
    y = np.stack(
        [(x[0, t : t + k, :].astype(np.float64) * taps.T).sum(0) for t in range(w - k + 1)]
    )[None]
    return y / (1 + np.exp(-y)) if silu else y


@pytest.mark.parametrize(
    "w,c,k,silu", [(4, 16, 4, True), (3, 5, 3, True), (9, 8, 4, True), (6, 4, 2, False)]
)
def test_fires_and_matches(
    monkeypatch: pytest.MonkeyPatch, w: int, c: int, k: int, silu: bool
) -> None:
    rng = np.random.default_rng(w * 100 + c)
    x = rng.standard_normal((1, w, c)).astype(np.float32)
    wt = rng.standard_normal((c, 1, 1, k)).astype(np.float32)
    outs = []
    for disable in ("", PASS):
        exe = _compile(_graph(w, c, k, silu), monkeypatch, disable)
        exe.set_param("w", wt)
        outs.append((exe, exe.run(x=x)["out"]))
    (on, y_on), (off, y_off) = outs
    assert on.stats["pass_matches"][PASS] == 1
    assert "fused_depthwise_conv1d_bsc" in on.schedule and "conv2d" not in on.schedule
    assert on.stats["dispatches"] == off.stats["dispatches"] - (3 if silu else 2)
    np.testing.assert_allclose(y_off, _ref(x, wt, silu), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y_on, y_off, rtol=1e-5, atol=1e-6)


def test_refuses_conv_output_that_is_an_output(monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _compile(_graph(4, 8, 4, conv_out=True), monkeypatch)
    assert exe.stats["pass_matches"][PASS] == 0
    assert "conv2d" in exe.schedule


def test_refuses_output_on_the_source_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    # x dies at the first transpose; the planner reuses its slot for the
    # SiLU output, which a fused kernel would write while reading x
    g = rlx.Graph("conv1d_reuse")
    x = g.input("x", [1, 4, 8])
    y = g.conv2d(
        g.reshape(g.transpose(x, [0, 2, 1]), [1, 8, 1, 4]), g.param("w", [8, 1, 1, 4]), groups=8
    )
    g.outputs(g.silu(g.transpose(g.reshape(y, [1, 8, 1]), [0, 2, 1]), name="out"))
    exe = _compile(g, monkeypatch)
    if exe.stats["pass_matches"][PASS] == 0:
        assert "conv2d" in exe.schedule
    else:  # a planner that keeps the slots apart lets it fire
        assert "dst=@0 " not in exe.schedule.splitlines()[0]
