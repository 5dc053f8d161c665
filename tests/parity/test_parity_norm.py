"""Norm family, host vs reference and numpy: LayerNorm, RMSNorm (± beta),
GroupNorm, LayerNorm2d, fused residual LN / RMS (± bias), adaLN (LN and RMS,
modulation broadcast over leading dims), gated residual; f32 and f16."""

from __future__ import annotations

from typing import Optional

import numpy as np
import pytest
import rlx
from _harness2 import check, rand

DTS = {"f32": np.float32, "f16": np.float16}


def _ln(x: np.ndarray, eps: float, axis: int = -1) -> np.ndarray:
    x = x.astype(np.float64)
    mu = x.mean(axis=axis, keepdims=True)
    var = x.var(axis=axis, keepdims=True)
    return (x - mu) / np.sqrt(var + eps)


def _rms(x: np.ndarray, eps: float) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)


def _f64(*xs: np.ndarray) -> list[np.ndarray]:
    return [x.astype(np.float64) for x in xs]


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("shape", [[1, 1], [3, 7], [2, 5, 33], [4, 257]])
def test_layer_norm(dt: str, shape: list[int]) -> None:
    rng = np.random.default_rng(len(shape) * 10 + shape[-1])
    h = shape[-1]
    g = rlx.Graph("ln")
    x = g.input("x", shape, dt)
    gm, bt = g.param("g", [h], dt), g.param("b", [h], dt)
    g.outputs(g.layer_norm(x, gm, bt, eps=1e-5, name="y"))
    xv = rand(rng, shape, DTS[dt], 3.0) + DTS[dt](1.5)
    gv, bv = rand(rng, [h], DTS[dt]), rand(rng, [h], DTS[dt])
    want = _ln(xv, 1e-5) * gv.astype(np.float64) + bv.astype(np.float64)
    check(g, {"x": xv}, {"g": gv, "b": bv}, native=["layer_norm"], expect=want)


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("beta", [False, True])
@pytest.mark.parametrize("shape", [[1, 3], [5, 17], [2, 3, 64], [2, 1000]])
def test_rms_norm(dt: str, beta: bool, shape: list[int]) -> None:
    rng = np.random.default_rng(shape[-1])
    h = shape[-1]
    g = rlx.Graph("rms")
    x = g.input("x", shape, dt)
    gm = g.param("g", [h], dt)
    bt = g.param("b", [h], dt) if beta else None
    g.outputs(g.rms_norm(x, gm, bt, eps=1e-6, name="y"))
    xv, gv, bv = rand(rng, shape, DTS[dt]), rand(rng, [h], DTS[dt]), rand(rng, [h], DTS[dt])
    want = _rms(xv, 1e-6) * gv.astype(np.float64) + (bv.astype(np.float64) if beta else 0.0)
    params = {"g": gv, "b": bv} if beta else {"g": gv}
    check(g, {"x": xv}, params, native=["rms_norm"], expect=want)


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize(
    "n,c,h,w,groups", [(1, 4, 3, 5, 2), (2, 6, 7, 3, 3), (1, 5, 1, 1, 5), (2, 8, 4, 4, 1)]
)
def test_group_norm(dt: str, n: int, c: int, h: int, w: int, groups: int) -> None:
    rng = np.random.default_rng(c * 7 + groups)
    g = rlx.Graph("gn")
    x = g.input("x", [n, c, h, w], dt)
    gm, bt = g.param("g", [c], dt), g.param("b", [c], dt)
    g.outputs(g.group_norm(x, gm, bt, num_groups=groups, eps=1e-5, name="y"))
    xv = rand(rng, [n, c, h, w], DTS[dt], 2.0)
    gv, bv = rand(rng, [c], DTS[dt]), rand(rng, [c], DTS[dt])
    xg = xv.astype(np.float64).reshape(n, groups, -1)
    want = (
        _ln(xg, 1e-5).reshape(n, c, h, w) * gv.astype(np.float64)[:, None, None]
        + bv.astype(np.float64)[:, None, None]
    )
    check(g, {"x": xv}, {"g": gv, "b": bv}, native=["group_norm"], expect=want)


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("n,c,h,w", [(1, 3, 2, 5), (2, 7, 3, 3), (1, 1, 4, 4)])
def test_layer_norm2d(dt: str, n: int, c: int, h: int, w: int) -> None:
    rng = np.random.default_rng(c * 13 + h)
    g = rlx.Graph("ln2d")
    x = g.input("x", [n, c, h, w], dt)
    gm, bt = g.param("g", [c], dt), g.param("b", [c], dt)
    g.outputs(g.layer_norm2d(x, gm, bt, eps=1e-6, name="y"))
    xv = rand(rng, [n, c, h, w], DTS[dt])
    gv, bv = rand(rng, [c], DTS[dt]), rand(rng, [c], DTS[dt])
    want = (
        _ln(xv, 1e-6, axis=1) * gv.astype(np.float64)[:, None, None]
        + bv.astype(np.float64)[:, None, None]
    )
    check(g, {"x": xv}, {"g": gv, "b": bv}, native=["layer_norm2d"], expect=want)


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("kind", ["ln", "rms", "rms_beta"])
@pytest.mark.parametrize("bias", [False, True])
def test_residual_norm(dt: str, kind: str, bias: bool) -> None:
    rng = np.random.default_rng(3)
    shape, h = [2, 5, 19], 19
    g = rlx.Graph("resnorm")
    x, r = g.input("x", shape, dt), g.input("r", shape, dt)
    gm = g.param("g", [h], dt)
    bs = g.param("bias", [h], dt) if bias else None
    params = {"g": rand(rng, [h], DTS[dt])}
    if bias:
        params["bias"] = rand(rng, [h], DTS[dt])
    xv, rv = rand(rng, shape, DTS[dt]), rand(rng, shape, DTS[dt])
    s = xv.astype(np.float64) + rv.astype(np.float64)
    if bias:
        s = s + params["bias"].astype(np.float64)
    if kind == "ln":
        bt = g.param("b", [h], dt)
        params["b"] = rand(rng, [h], DTS[dt])
        y = g.residual_layer_norm(x, r, gm, bt, bs, eps=1e-5, name="y")
        want = _ln(s, 1e-5) * params["g"].astype(np.float64) + params["b"]
        thunk = "fused_residual_ln"
    else:
        bt2: Optional[rlx.Node] = None
        want = _rms(s, 1e-6) * params["g"].astype(np.float64)
        if kind == "rms_beta":
            bt2 = g.param("b", [h], dt)
            params["b"] = rand(rng, [h], DTS[dt])
            want = want + params["b"]
        y = g.residual_rms_norm(x, r, gm, bt2, bs, eps=1e-6, name="y")
        thunk = "fused_residual_rms_norm"
    g.outputs(y)
    check(g, {"x": xv, "r": rv}, params, native=[thunk], expect=want)


# (x shape, modulation shape): modulation broadcast over x's leading dims
MOD_SHAPES = [
    ([3, 8], [8]),
    ([3, 8], [3, 8]),
    ([2, 5, 8], [2, 1, 8]),  # per-batch (DiT: [b, 1, h])
    ([2, 5, 8], [1, 5, 8]),  # shared over the batch, per position
    ([2, 5, 8], [5, 8]),  # same, lower rank
    ([2, 5, 8], [1, 1, 8]),
    ([2, 5, 8], [2, 5, 8]),
    ([2, 3, 4, 6], [2, 1, 4, 6]),  # broadcast in the middle
    ([2, 3, 4, 6], [1, 3, 1, 6]),
]


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("layer_norm", [True, False])
@pytest.mark.parametrize("shapes", MOD_SHAPES)
def test_ada_layer_norm(dt: str, layer_norm: bool, shapes: tuple[list[int], list[int]]) -> None:
    rng = np.random.default_rng(11)
    xs, ms = shapes
    g = rlx.Graph("adaln")
    x = g.input("x", xs, dt)
    sc, sh = g.input("scale", ms, dt), g.input("shift", ms, dt)
    g.outputs(g.ada_layer_norm(x, sc, sh, eps=1e-6, layer_norm=layer_norm, name="y"))
    xv = rand(rng, xs, DTS[dt])
    scv, shv = rand(rng, ms, DTS[dt], 0.5), rand(rng, ms, DTS[dt])
    nrm = _ln(xv, 1e-6) if layer_norm else _rms(xv, 1e-6)
    sc64, sh64 = _f64(scv, shv)
    want = nrm * (1 + sc64) + sh64
    check(g, {"x": xv, "scale": scv, "shift": shv}, native=["ada_layer_norm"], expect=want)


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("shapes", MOD_SHAPES)
def test_gated_residual(dt: str, shapes: tuple[list[int], list[int]]) -> None:
    rng = np.random.default_rng(12)
    xs, ms = shapes
    g = rlx.Graph("gres")
    x, y = g.input("x", xs, dt), g.input("y", xs, dt)
    gate = g.input("gate", ms, dt)
    g.outputs(g.gated_residual(x, y, gate, name="out"))
    xv, yv, gv = rand(rng, xs, DTS[dt]), rand(rng, xs, DTS[dt]), rand(rng, ms, DTS[dt])
    x64, y64, g64 = _f64(xv, yv, gv)
    check(g, {"x": xv, "y": yv, "gate": gv}, native=["gated_residual"], expect=x64 + g64 * y64)


def test_layer_norm_long_row() -> None:
    # h = 4099 f32: host sums in f64 lanes (norm kernel), so 1e-5 holds.
    rng = np.random.default_rng(9)
    g = rlx.Graph("lnlong")
    x = g.input("x", [3, 4099])
    gm, bt = g.param("g", [4099]), g.param("b", [4099])
    g.outputs(g.layer_norm(x, gm, bt, name="y"))
    xv = rand(rng, [3, 4099], scale=5.0) + np.float32(100.0)  # large mean
    gv, bv = rand(rng, [4099]), rand(rng, [4099])
    want = _ln(xv, 1e-5) * gv.astype(np.float64) + bv
    check(g, {"x": xv}, {"g": gv, "b": bv}, native=["layer_norm"], expect=want)
