"""Convolution-family references vs direct nested loops (PyTorch index math)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _mem import Arena, npdt, rng, tol


def _out(size: int, k: int, s: int, p: int, d: int) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


CONV = [  # n, c_in, h, w, c_out, kh, kw, sh, sw, ph, pw, dh, dw, groups
    (1, 3, 5, 7, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1),
    (2, 4, 7, 5, 6, 3, 2, 2, 1, 0, 1, 1, 2, 2),
    (1, 3, 6, 6, 3, 3, 3, 2, 2, 2, 1, 2, 1, 3),  # depthwise
    (2, 2, 4, 3, 5, 1, 1, 1, 1, 0, 0, 1, 1, 1),
]


@pytest.mark.parametrize("cfg", CONV)
def test_conv2d(cfg: tuple) -> None:
    n, ci, h, w, co, kh, kw, sh, sw, ph, pw, dh, dw, g = cfg
    ho, wo = _out(h, kh, sh, ph, dh), _out(w, kw, sw, pw, dw)
    r = rng(70)
    x = r.normal(size=(n, ci, h, w)).astype(np.float32)
    wt = r.normal(size=(co, ci // g, kh, kw)).astype(np.float32)
    a = Arena()
    so, wo_, do = a.put(x), a.weight(wt), a.out((n, co, ho, wo))
    a.run(
        {
            "name": "conv2d",
            "src": so,
            "weight": wo_,
            "dst": do,
            "n": n,
            "c_in": ci,
            "h": h,
            "w": w,
            "c_out": co,
            "h_out": ho,
            "w_out": wo,
            "kh": kh,
            "kw": kw,
            "sh": sh,
            "sw": sw,
            "ph": ph,
            "pw": pw,
            "dh": dh,
            "dw": dw,
            "groups": g,
        }
    )
    want = np.zeros((n, co, ho, wo))
    cig, cog = ci // g, co // g
    for b in range(n):
        for oc in range(co):
            grp = oc // cog
            for oy in range(ho):
                for ox in range(wo):
                    acc = []
                    for ic in range(cig):
                        for ky in range(kh):
                            for kx in range(kw):
                                iy, ix = oy * sh - ph + ky * dh, ox * sw - pw + kx * dw
                                if 0 <= iy < h and 0 <= ix < w:
                                    acc.append(
                                        float(x[b, grp * cig + ic, iy, ix])
                                        * float(wt[oc, ic, ky, kx])
                                    )
                    want[b, oc, oy, ox] = math.fsum(acc)
    np.testing.assert_allclose(a.get(do), want, **tol("f32"))


TCONV = [  # n, c_in, h, w, c_out, kh, kw, sh, sw, ph, pw, dh, dw, groups, out_pad
    (1, 2, 3, 4, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1),
    (2, 4, 3, 3, 2, 2, 3, 1, 2, 0, 1, 2, 1, 2, 0),
    (1, 3, 2, 5, 3, 4, 4, 2, 3, 1, 0, 1, 1, 3, 1),
]


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("cfg", TCONV)
def test_conv_transpose2d(cfg: tuple, dt: str) -> None:
    n, ci, h, w, co, kh, kw, sh, sw, ph, pw, dh, dw, g, op = cfg
    ho = (h - 1) * sh - 2 * ph + dh * (kh - 1) + 1 + op
    wo = (w - 1) * sw - 2 * pw + dw * (kw - 1) + 1 + op
    r = rng(71)
    x = r.normal(size=(n, ci, h, w)).astype(npdt(dt))
    wt = r.normal(size=(ci, co // g, kh, kw)).astype(npdt(dt))
    a = Arena()
    so, wo_, do = a.put(x), a.weight(wt), a.out((n, co, ho, wo), npdt(dt))
    a.run(
        {
            "name": "conv_transpose2d",
            "src": so,
            "weight": wo_,
            "dst": do,
            "n": n,
            "c_in": ci,
            "h": h,
            "w_in": w,
            "c_out": co,
            "h_out": ho,
            "w_out": wo,
            "kh": kh,
            "kw": kw,
            "sh": sh,
            "sw": sw,
            "ph": ph,
            "pw": pw,
            "dh": dh,
            "dw": dw,
            "groups": g,
            "dt": dt,
        }
    )
    # gather form: out[oy] collects inputs iy with oy = iy*sh - ph + ky*dh
    want = np.zeros((n, co, ho, wo))
    cig, cog = ci // g, co // g
    for b in range(n):
        for oc in range(co):
            grp, o_in = oc // cog, oc % cog
            for oy in range(ho):
                for ox in range(wo):
                    acc = 0.0
                    for ic in range(grp * cig, (grp + 1) * cig):
                        for ky in range(kh):
                            ny = oy + ph - ky * dh
                            if ny % sh or not 0 <= ny // sh < h:
                                continue
                            for kx in range(kw):
                                nx = ox + pw - kx * dw
                                if nx % sw or not 0 <= nx // sw < w:
                                    continue
                                acc += float(x[b, ic, ny // sh, nx // sw]) * float(
                                    wt[ic, o_in, ky, kx]
                                )
                    want[b, oc, oy, ox] = acc
    np.testing.assert_allclose(a.get(do).astype(float), want, **tol(dt))


POOL = [(3, 3, 2, 2, 1, 1), (2, 2, 2, 2, 0, 0), (3, 2, 1, 2, 1, 1)]


@pytest.mark.parametrize("kind", ["max", "mean"])
@pytest.mark.parametrize("cfg", POOL)
def test_pool2d(cfg: tuple, kind: str) -> None:
    kh, kw, sh, sw, ph, pw = cfg
    n, c, h, w = 2, 3, 5, 7
    ho, wo = _out(h, kh, sh, ph, 1), _out(w, kw, sw, pw, 1)
    x = rng(72).normal(size=(n, c, h, w)).astype(np.float32) - 2.0  # negative: pad ≠ 0 wins
    a = Arena()
    so, do = a.put(x), a.out((n, c, ho, wo))
    a.run(
        {
            "name": "pool2d",
            "src": so,
            "dst": do,
            "n": n,
            "c": c,
            "h": h,
            "w": w,
            "h_out": ho,
            "w_out": wo,
            "kh": kh,
            "kw": kw,
            "sh": sh,
            "sw": sw,
            "ph": ph,
            "pw": pw,
            "kind": kind,
        }
    )
    want = np.zeros((n, c, ho, wo))
    for b, ch, oy, ox in np.ndindex(n, c, ho, wo):
        cells = [
            float(x[b, ch, oy * sh - ph + ky, ox * sw - pw + kx])
            for ky in range(kh)
            for kx in range(kw)
            if 0 <= oy * sh - ph + ky < h and 0 <= ox * sw - pw + kx < w
        ]
        want[b, ch, oy, ox] = max(cells) if kind == "max" else math.fsum(cells) / len(cells)
    np.testing.assert_allclose(a.get(do), want, **tol("f32"))


@pytest.mark.parametrize("cfg", [(3, 3, 1, 1, 1, 1, 1, 1), (2, 3, 2, 1, 0, 1, 2, 1)])
def test_im2col(cfg: tuple) -> None:
    kh, kw, sh, sw, ph, pw, dh, dw = cfg
    n, ci, h, w = 2, 3, 5, 4
    ho, wo = _out(h, kh, sh, ph, dh), _out(w, kw, sw, pw, dw)
    x = rng(73).normal(size=(n, ci, h, w)).astype(np.float32)
    a = Arena()
    xo, co = a.put(x), a.out((n, ci * kh * kw, ho * wo))
    a.run(
        {
            "name": "im2col",
            "x": xo,
            "col": co,
            "n": n,
            "c_in": ci,
            "h": h,
            "w": w,
            "h_out": ho,
            "w_out": wo,
            "kh": kh,
            "kw": kw,
            "sh": sh,
            "sw": sw,
            "ph": ph,
            "pw": pw,
            "dh": dh,
            "dw_dil": dw,
        }
    )
    want = np.zeros((n, ci * kh * kw, ho * wo))
    for b, c, ky, kx, oy, ox in np.ndindex(n, ci, kh, kw, ho, wo):
        iy, ix = oy * sh - ph + ky * dh, ox * sw - pw + kx * dw
        if 0 <= iy < h and 0 <= ix < w:
            want[b, (c * kh + ky) * kw + kx, oy * wo + ox] = x[b, c, iy, ix]
    np.testing.assert_array_equal(a.get(co), want.astype(np.float32))


@pytest.mark.parametrize("silu", [False, True])
@pytest.mark.parametrize("k", [1, 3, 4])
def test_fused_depthwise_conv1d_bsc(k: int, silu: bool) -> None:
    b, width, ch = 2, 9, 5
    os_ = width - k + 1
    r = rng(74)
    x = r.normal(size=(b, width, ch)).astype(np.float32)
    wt = r.normal(size=(ch, k)).astype(np.float32)
    a = Arena()
    so, wo, do = a.put(x), a.weight(wt), a.out((b, os_, ch))
    a.run(
        {
            "name": "fused_depthwise_conv1d_bsc",
            "src": so,
            "weight": wo,
            "dst": do,
            "batch": b,
            "width": width,
            "out_seq": os_,
            "channels": ch,
            "k": k,
            "silu": silu,
        }
    )
    want = np.zeros((b, os_, ch))
    for bb, t, c in np.ndindex(b, os_, ch):
        v = math.fsum(float(x[bb, t + j, c]) * float(wt[c, j]) for j in range(k))
        want[bb, t, c] = v / (1 + math.exp(-v)) if silu else v
    np.testing.assert_allclose(a.get(do), want, **tol("f32"))
