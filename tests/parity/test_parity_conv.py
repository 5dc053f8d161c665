"""Host kernels vs numpy reference: convolution and pooling (NCHW, f32).

Covers conv2d (stride / padding / dilation / groups, depthwise, with and
without bias), conv_transpose2d (incl. output padding, groups), max / avg
pool2d (with padding) and im2col, plus independent numpy loops.

Tolerances: the host accumulates each output in f32 over ``c_in/groups ·
kh · kw`` terms while the reference accumulates in f64; with inputs in
[-1, 1] the f32 rounding error grows like ``sqrt(K)·2^-24·|partial sums|``,
so for the largest reduction here (K = 8·3·3 = 72 taps, |sums| < 10) an
``atol = rtol = 1e-5`` bound still holds; the big-channel case (K = 64·3·3
= 576) uses ``atol = 1e-4``. Pooling and im2col are exact up to the mean's
division (1e-6).
"""

from __future__ import annotations

import numpy as np
import pytest
import rlx
from _harness import check, rand


def _conv_ref(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    stride: tuple[int, int],
    pad: tuple[int, int],
    dil: tuple[int, int],
    groups: int,
) -> np.ndarray:
    """Direct loop-nest convolution (PyTorch semantics), f64."""
    n, ci, h, wd = x.shape
    co, cig, kh, kw = w.shape
    ho = (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (wd + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    xp = np.zeros((n, ci, h + 2 * pad[0], wd + 2 * pad[1]))
    xp[:, :, pad[0] : pad[0] + h, pad[1] : pad[1] + wd] = x
    out = np.zeros((n, co, ho, wo))
    cog = co // groups
    for o in range(co):
        gi = o // cog
        for ky in range(kh):
            for kx in range(kw):
                ys = ky * dil[0]
                xs = kx * dil[1]
                patch = xp[:, gi * cig:(gi + 1) * cig,
                           ys:ys + (ho - 1) * stride[0] + 1:stride[0],
                           xs:xs + (wo - 1) * stride[1] + 1:stride[1]]  # fmt: skip
                out[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, ky, kx])
    if b is not None:
        out += b[None, :, None, None]
    return out


CONV_CASES = [
    # (n, c_in, h, w, c_out, k, stride, pad, dil, groups)
    (1, 3, 7, 7, 5, (3, 3), (1, 1), (0, 0), (1, 1), 1),
    (2, 4, 13, 7, 6, (3, 3), (2, 2), (1, 1), (1, 1), 1),
    (1, 6, 9, 11, 4, (3, 5), (1, 2), (2, 1), (2, 1), 2),
    (2, 8, 7, 7, 8, (3, 3), (1, 1), (1, 1), (1, 1), 8),  # depthwise
    (1, 4, 5, 5, 8, (1, 1), (1, 1), (0, 0), (1, 1), 4),  # grouped 1x1, multiplier 2
    (1, 1, 33, 3, 1, (7, 1), (3, 1), (3, 0), (1, 1), 1),
    (1, 8, 13, 13, 3, (3, 3), (2, 1), (1, 2), (3, 2), 1),
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d(case: tuple, bias: bool) -> None:
    n, ci, h, w, co, k, s, p, d, gr = case
    g = rlx.Graph()
    x = g.input("x", [n, ci, h, w])
    wt = g.param("w", [co, ci // gr, *k])
    bn = g.param("b", [co]) if bias else None
    y = g.conv2d(x, wt, bn, stride=s, padding=p, dilation=d, groups=gr)
    g.outputs(y)
    xv = rand([n, ci, h, w], lo=-1, hi=1, seed=1)
    wv = rand([co, ci // gr, *k], lo=-1, hi=1, seed=2)
    bv = rand([co], lo=-1, hi=1, seed=3)
    params = {"w": wv, **({"b": bv} if bias else {})}
    res = check(g, {"x": xv}, params, expect=["conv2d"])
    want = _conv_ref(xv.astype(np.float64), wv.astype(np.float64), bv if bias else None,
                     s, p, d, gr)  # fmt: skip
    np.testing.assert_allclose(res.host[y.name], want, rtol=1e-5, atol=1e-5)


def test_conv2d_large_reduction() -> None:
    """64 input channels × 3×3 taps = 576-term sums: atol 1e-4 (see module doc)."""
    g = rlx.Graph()
    x = g.input("x", [1, 64, 9, 9])
    wt = g.param("w", [16, 64, 3, 3])
    y = g.conv2d(x, wt, padding=1)
    g.outputs(y)
    check(
        g,
        {"x": rand([1, 64, 9, 9], lo=-1, hi=1, seed=4)},
        {"w": rand([16, 64, 3, 3], lo=-1, hi=1, seed=5)},
        atol=1e-4,
        rtol=1e-5,
    )


TCONV_CASES = [
    # (n, c_in, h, w, c_out, k, stride, pad, dil, out_pad, groups)
    (1, 3, 5, 5, 4, (3, 3), (1, 1), (0, 0), (1, 1), (0, 0), 1),
    (2, 4, 5, 7, 6, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1),
    (1, 4, 3, 5, 6, (3, 2), (2, 3), (0, 1), (2, 1), (1, 2), 2),
    (1, 6, 7, 7, 6, (4, 4), (2, 2), (1, 1), (1, 1), (0, 0), 6),
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("case", TCONV_CASES)
def test_conv_transpose2d(case: tuple, bias: bool) -> None:
    n, ci, h, w, co, k, s, p, d, op, gr = case
    g = rlx.Graph()
    x = g.input("x", [n, ci, h, w])
    wt = g.param("w", [ci, co // gr, *k])
    bn = g.param("b", [co]) if bias else None
    y = g.conv_transpose2d(x, wt, bn, stride=s, padding=p, dilation=d, output_padding=op,
                           groups=gr)  # fmt: skip
    g.outputs(y)
    xv = rand([n, ci, h, w], lo=-1, hi=1, seed=1)
    wv = rand([ci, co // gr, *k], lo=-1, hi=1, seed=2)
    params = {"w": wv, **({"b": rand([co], lo=-1, hi=1, seed=3)} if bias else {})}
    res = check(g, {"x": xv}, params, expect=["conv_transpose2d"])
    # independent scatter formulation
    ho = (h - 1) * s[0] - 2 * p[0] + d[0] * (k[0] - 1) + op[0] + 1
    wo = (w - 1) * s[1] - 2 * p[1] + d[1] * (k[1] - 1) + op[1] + 1
    want = np.zeros((n, co, ho, wo))
    cig, cog = ci // gr, co // gr
    for c in range(ci):
        gi = c // cig
        for oc in range(cog):
            for iy in range(h):
                for ix in range(w):
                    for ky in range(k[0]):
                        for kx in range(k[1]):
                            oy = iy * s[0] - p[0] + ky * d[0]
                            ox = ix * s[1] - p[1] + kx * d[1]
                            if 0 <= oy < ho and 0 <= ox < wo:
                                want[:, gi * cog + oc, oy, ox] += (
                                    xv[:, c, iy, ix].astype(np.float64) * wv[c, oc, ky, kx]
                                )
    if bias:
        want += params["b"][None, :, None, None]
    np.testing.assert_allclose(res.host[y.name], want, rtol=1e-5, atol=1e-5)


POOL_CASES = [
    # (h, w, kernel, stride, pad)
    (7, 7, (2, 2), (2, 2), (0, 0)),
    (13, 9, (3, 3), (2, 2), (1, 1)),
    (5, 7, (3, 2), (1, 3), (1, 1)),
    (1, 33, (1, 3), (1, 1), (0, 1)),
]


@pytest.mark.parametrize("kind", ["max", "mean"])
@pytest.mark.parametrize("case", POOL_CASES)
def test_pool2d(case: tuple, kind: str) -> None:
    h, w, k, s, p = case
    g = rlx.Graph()
    x = g.input("x", [2, 3, h, w])
    y = g.pool2d(x, kind, k, stride=s, padding=p)
    g.outputs(y)
    xv = rand([2, 3, h, w], seed=6)
    res = check(g, {"x": xv}, expect=["pool2d"], atol=1e-6, rtol=1e-6)
    ho = (h + 2 * p[0] - k[0]) // s[0] + 1
    wo = (w + 2 * p[1] - k[1]) // s[1] + 1
    want = np.zeros((2, 3, ho, wo))
    for oy in range(ho):
        for ox in range(wo):
            y0, x0 = oy * s[0] - p[0], ox * s[1] - p[1]
            win = xv[:, :, max(y0, 0) : y0 + k[0], max(x0, 0) : x0 + k[1]].astype(np.float64)
            want[:, :, oy, ox] = win.max((2, 3)) if kind == "max" else win.mean((2, 3))
    np.testing.assert_allclose(res.host[y.name], want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("k", "s", "p", "d"),
    [
        ((3, 3), (1, 1), (1, 1), (1, 1)),
        ((2, 3), (2, 1), (0, 2), (1, 2)),
        ((1, 1), (3, 3), (0, 0), (1, 1)),
    ],  # fmt: skip
)
def test_im2col(
    k: tuple[int, int], s: tuple[int, int], p: tuple[int, int], d: tuple[int, int]
) -> None:
    g = rlx.Graph()
    x = g.input("x", [2, 3, 7, 9])
    y = g.im2col(x, k, stride=s, padding=p, dilation=d)
    g.outputs(y)
    xv = rand([2, 3, 7, 9], seed=7)
    res = check(g, {"x": xv}, expect=["im2col"], atol=0.0, rtol=0.0)
    # im2col · reshaped weights == conv2d
    wv = rand([4, 3, *k], seed=8).astype(np.float64)
    got = np.einsum("ok,nkl->nol", wv.reshape(4, -1), res.host[y.name].astype(np.float64))
    want = _conv_ref(xv.astype(np.float64), wv, None, s, p, d, 1)
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-9, atol=1e-9)
