"""Normalisation references vs per-row loops with ``math.fsum`` statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _mem import Arena, npdt, rng, tol

EPS = 1e-5


def _ln_row(x: list[float], eps: float) -> list[float]:
    mu = math.fsum(x) / len(x)
    var = math.fsum((v - mu) ** 2 for v in x) / len(x)
    return [(v - mu) / math.sqrt(var + eps) for v in x]


def _rms_row(x: list[float], eps: float) -> list[float]:
    ms = math.fsum(v * v for v in x) / len(x)
    return [v / math.sqrt(ms + eps) for v in x]


def _silu(v: float) -> float:
    return v / (1 + math.exp(-v))


def _f(a: np.ndarray) -> list:
    return a.astype(np.float64).tolist()


def _setup(dt: str, rows: int, h: int, seed: int) -> tuple:
    r = rng(seed)
    x = (r.normal(size=(rows, h)) * 2 + 0.5).astype(npdt(dt))
    g = r.normal(size=h).astype(npdt(dt))
    b = r.normal(size=h).astype(npdt(dt))
    return x, g, b


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
def test_row_norms(kind: str, dt: str) -> None:
    rows, h = 5, 13
    x, g, b = _setup(dt, rows, h, 30)
    a = Arena()
    so, go, bo, do = a.put(x), a.weight(g), a.weight(b), a.out((rows, h), npdt(dt))
    a.run(
        {
            "name": kind,
            "src": so,
            "g": go,
            "b": bo,
            "dst": do,
            "rows": rows,
            "h": h,
            "eps": EPS,
            "dt": dt,
        }
    )
    norm = _ln_row if kind == "layer_norm" else _rms_row
    want = [[v * gg + bb for v, gg, bb in zip(norm(row, EPS), _f(g), _f(b))] for row in _f(x)]
    np.testing.assert_allclose(a.get(do).astype(float), want, **tol(dt))


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("kind", ["fused_residual_ln", "fused_residual_rms_norm"])
@pytest.mark.parametrize("has_bias", [False, True])
def test_fused_residual_norms(kind: str, has_bias: bool, dt: str) -> None:
    rows, h = 3, 7
    x, g, b = _setup(dt, rows, h, 31)
    res = rng(32).normal(size=(rows, h)).astype(npdt(dt))
    bias = rng(33).normal(size=h).astype(npdt(dt))
    a = Arena()
    xo, ro, bio, go, bo = a.put(x), a.put(res), a.weight(bias), a.weight(g), a.weight(b)
    oo = a.out((rows, h), npdt(dt))
    a.run(
        {
            "name": kind,
            "x": xo,
            "res": ro,
            "bias": bio if has_bias else 0,
            "g": go,
            "b": bo,
            "out": oo,
            "rows": rows,
            "h": h,
            "eps": EPS,
            "has_bias": has_bias,
            "dt": dt,
        }
    )
    norm = _ln_row if kind == "fused_residual_ln" else _rms_row
    want = []
    for xr, rr in zip(_f(x), _f(res)):
        s = [p + q + (c if has_bias else 0.0) for p, q, c in zip(xr, rr, _f(bias))]
        want.append([v * gg + bb for v, gg, bb in zip(norm(s, EPS), _f(g), _f(b))])
    np.testing.assert_allclose(a.get(oo).astype(float), want, **tol(dt))


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("groups", [1, 3, 6])
def test_group_norm(groups: int, dt: str) -> None:
    n, c, h, w = 2, 6, 3, 5
    r = rng(34)
    x = r.normal(size=(n, c, h, w)).astype(npdt(dt))
    g, b = r.normal(size=c).astype(npdt(dt)), r.normal(size=c).astype(npdt(dt))
    a = Arena()
    so, go, bo, do = a.put(x), a.weight(g), a.weight(b), a.out((n, c, h, w), npdt(dt))
    a.run(
        {
            "name": "group_norm",
            "src": so,
            "g": go,
            "b": bo,
            "dst": do,
            "n": n,
            "c": c,
            "h": h,
            "w": w,
            "num_groups": groups,
            "eps": EPS,
            "dt": dt,
        }
    )
    want = np.empty((n, c, h, w))
    cg = c // groups
    for i in range(n):
        for gr in range(groups):
            vals = [float(v) for v in x[i, gr * cg : (gr + 1) * cg].reshape(-1)]
            y = np.array(_ln_row(vals, EPS)).reshape(cg, h, w)
            for j in range(cg):
                ch = gr * cg + j
                want[i, ch] = y[j] * float(g[ch]) + float(b[ch])
    np.testing.assert_allclose(a.get(do).astype(float), want, **tol(dt))


@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_layer_norm2d(dt: str) -> None:
    n, c, h, w = 2, 5, 3, 3
    r = rng(35)
    x = r.normal(size=(n, c, h, w)).astype(npdt(dt))
    g, b = r.normal(size=c).astype(npdt(dt)), r.normal(size=c).astype(npdt(dt))
    a = Arena()
    so, go, bo, do = a.put(x), a.weight(g), a.weight(b), a.out((n, c, h, w), npdt(dt))
    a.run(
        {
            "name": "layer_norm2d",
            "src": so,
            "g": go,
            "b": bo,
            "dst": do,
            "n": n,
            "c": c,
            "h": h,
            "w": w,
            "eps": EPS,
            "dt": dt,
        }
    )
    want = np.empty((n, c, h, w))
    for i in range(n):
        for yy in range(h):
            for xx in range(w):
                col = _ln_row([float(v) for v in x[i, :, yy, xx]], EPS)
                want[i, :, yy, xx] = [v * float(gg) + float(bb) for v, gg, bb in zip(col, g, b)]
    np.testing.assert_allclose(a.get(do).astype(float), want, **tol(dt))


def _pack(x_lead: list[int], mod_lead: list[int]) -> list[int]:
    r = len(x_lead)
    return [r, *x_lead, *[0] * (8 - r), *mod_lead, *[0] * (8 - r)]


CASES = [([2, 5], [2, 1]), ([2, 5], [1, 1]), ([3], [3]), ([2, 3, 2], [1, 3, 1])]


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("layer_norm", [True, False])
@pytest.mark.parametrize("x_lead,mod_lead", CASES)
def test_ada_layer_norm(x_lead: list[int], mod_lead: list[int], layer_norm: bool, dt: str) -> None:
    h = 7
    rows = int(np.prod(x_lead))
    r = rng(36)
    x = r.normal(size=(rows, h)).astype(npdt(dt))
    sc = (r.normal(size=[*mod_lead, h]) * 0.5).astype(npdt(dt))
    sh = r.normal(size=[*mod_lead, h]).astype(npdt(dt))
    a = Arena()
    xo, sco, sho, oo = a.put(x), a.put(sc), a.put(sh), a.out((rows, h), npdt(dt))
    a.run(
        {
            "name": "ada_layer_norm",
            "x": xo,
            "scale": sco,
            "shift": sho,
            "out": oo,
            "rows": rows,
            "h": h,
            "eps": EPS,
            "layer_norm": layer_norm,
            "lead_pack": _pack(x_lead, mod_lead),
            "dt": dt,
        }
    )
    norm = _ln_row if layer_norm else _rms_row
    want = []
    for ri, idx in enumerate(np.ndindex(*x_lead)):
        midx = tuple(i if d > 1 else 0 for i, d in zip(idx, mod_lead))
        y = norm(_f(x[ri]), EPS)
        want.append([v * (1 + s) + t for v, s, t in zip(y, _f(sc[midx]), _f(sh[midx]))])
    np.testing.assert_allclose(a.get(oo).astype(float), want, **tol(dt))


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("x_lead,mod_lead", CASES)
def test_gated_residual(x_lead: list[int], mod_lead: list[int], dt: str) -> None:
    h = 5
    rows = int(np.prod(x_lead))
    r = rng(37)
    x = r.normal(size=(rows, h)).astype(npdt(dt))
    y = r.normal(size=(rows, h)).astype(npdt(dt))
    gate = r.normal(size=[*mod_lead, h]).astype(npdt(dt))
    a = Arena()
    xo, yo, go, oo = a.put(x), a.put(y), a.put(gate), a.out((rows, h), npdt(dt))
    a.run(
        {
            "name": "gated_residual",
            "x": xo,
            "y": yo,
            "gate": go,
            "out": oo,
            "rows": rows,
            "h": h,
            "lead_pack": _pack(x_lead, mod_lead),
            "dt": dt,
        }
    )
    want = []
    for ri, idx in enumerate(np.ndindex(*x_lead)):
        midx = tuple(i if d > 1 else 0 for i, d in zip(idx, mod_lead))
        want.append([p + gg * q for p, q, gg in zip(_f(x[ri]), _f(y[ri]), _f(gate[midx]))])
    np.testing.assert_allclose(a.get(oo).astype(float), want, **tol(dt))


@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_fused_rms_norm_mul_silu(dt: str) -> None:
    rows, h = 3, 11
    x, g, b = _setup(dt, rows, h, 38)
    z = rng(39).normal(size=(rows, h)).astype(npdt(dt))
    a = Arena()
    xo, go, bo, zo, oo = a.put(x), a.weight(g), a.weight(b), a.put(z), a.out((rows, h), npdt(dt))
    a.run(
        {
            "name": "fused_rms_norm_mul_silu",
            "x": xo,
            "g": go,
            "b": bo,
            "z": zo,
            "out": oo,
            "rows": rows,
            "h": h,
            "eps": EPS,
            "dt": dt,
        }
    )
    want = [
        [(v * gg + bb) * _silu(zz) for v, gg, bb, zz in zip(_rms_row(xr, EPS), _f(g), _f(b), zr)]
        for xr, zr in zip(_f(x), _f(z))
    ]
    np.testing.assert_allclose(a.get(oo).astype(float), want, **tol(dt))
