"""Conv / pool graphs on host, reference and metal-sim against a numpy f64
reference written from PyTorch's definitions, in f32 and f16 (f16 convs and
pools compute in f32 between casts): a grouped strided conv (direct kernel),
a dilated ungrouped conv (im2col + GEMM) and max / mean pooling on a 7×9
image; the metal-sim plan has no host command.

Tolerances ``atol + rtol·|ref|``: f32 ``1e-5 + 1e-5``; f16 ``2e-3 + 2^-9``
(one f16 rounding of each stored result, inputs rounded to f16 first)."""

from __future__ import annotations

import numpy as np
import pytest
import rlx


def _conv(
    x: np.ndarray, w: np.ndarray, b: np.ndarray, s: int, p: int, d: int, g: int
) -> np.ndarray:
    n, ci, h, wd = x.shape
    co, cig, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    ho = (h + 2 * p - d * (kh - 1) - 1) // s + 1
    wo = (wd + 2 * p - d * (kw - 1) - 1) // s + 1
    out = np.zeros((n, co, ho, wo))
    cog = co // g
    for o in range(co):
        grp = o // cog
        for ky in range(kh):
            for kx in range(kw):
                patch = xp[:, grp * cig : (grp + 1) * cig, ky * d : ky * d + s * ho : s,
                           kx * d : kx * d + s * wo : s]  # fmt: skip
                out[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, ky, kx])
    return out + b[None, :, None, None]


def _pool(x: np.ndarray, kind: str, k: int, s: int, p: int) -> np.ndarray:
    n, c, h, w = x.shape
    ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    out = np.zeros((n, c, ho, wo))
    for oy in range(ho):
        for ox in range(wo):
            y0, x0 = oy * s - p, ox * s - p
            win = x[:, :, max(y0, 0) : min(y0 + k, h), max(x0, 0) : min(x0 + k, w)]
            out[:, :, oy, ox] = win.max(axis=(2, 3)) if kind == "max" else win.mean(axis=(2, 3))
    return out


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("device", ["host", "reference", "metal-sim"])
def test_conv_pool_match_numpy(dt: str, device: str) -> None:
    np_dt = np.float32 if dt == "f32" else np.float16
    rng = np.random.default_rng(7)
    vals = {
        "x": rng.uniform(-2, 2, (2, 3, 7, 9)),
        "w1": rng.uniform(-1, 1, (6, 1, 3, 3)),
        "b1": rng.uniform(-1, 1, 6),
        "w2": rng.uniform(-0.5, 0.5, (16, 6, 3, 3)),
        "b2": rng.uniform(-1, 1, 16),
    }
    vals = {k: v.astype(np_dt) for k, v in vals.items()}
    g = rlx.Graph("vision")
    x = g.input("x", [2, 3, 7, 9], dt)
    p = {k: g.param(k, list(v.shape), dt) for k, v in vals.items() if k != "x"}
    a = g.conv2d(x, p["w1"], p["b1"], stride=2, padding=1, groups=3)
    c = g.conv2d(a, p["w2"], p["b2"], padding=2, dilation=2)
    g.outputs(c, g.max_pool2d(c, 3, stride=2, padding=1), g.avg_pool2d(a, 2, stride=1))
    exe = rlx.compile(g, device=device)
    for k, v in vals.items():
        if k != "x":
            exe.set_param(k, v)
    got = [np.asarray(v, np.float64) for v in exe.run(x=vals["x"]).values()]
    f = {k: v.astype(np.float64) for k, v in vals.items()}
    ra = _conv(f["x"], f["w1"], f["b1"], 2, 1, 1, 3)
    if dt == "f16":
        ra = ra.astype(np.float16).astype(np.float64)  # `a` is stored in f16
    rc = _conv(ra, f["w2"], f["b2"], 1, 2, 2, 1)
    want = [rc, _pool(rc, "max", 3, 2, 1), _pool(ra, "mean", 2, 1, 0)]
    atol, rtol = (1e-5, 1e-5) if dt == "f32" else (2e-3, 2.0**-9)
    for w, v in zip(want, got):
        np.testing.assert_allclose(v, w, atol=atol, rtol=rtol)
    if device == "metal-sim":
        assert exe.stats["metal_host"] == 0, exe.report()
    assert "im2col" in exe.schedule and "conv2d" in exe.schedule
