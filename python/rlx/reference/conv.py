"""Convolution-family thunks on NCHW tensors with PyTorch semantics
(``torch.nn.functional.conv2d`` / ``conv_transpose2d`` / ``max_pool2d`` /
``avg_pool2d`` / ``unfold``): output ``(oy, ox)`` of tap ``(ky, kx)`` reads
input row ``oy·sh − ph + ky·dh``, column ``ox·sw − pw + kx·dw``; cells
outside the input are zero padding. f32 unless the thunk has a ``dt``;
float64 accumulation."""

from __future__ import annotations

import numpy as np

from . import Memory, reference
from ._act import silu, store
from ._common import F32, fdt


def _patches(
    x: np.ndarray,
    kh: int,
    kw: int,
    h_out: int,
    w_out: int,
    sh: int,
    sw: int,
    ph: int,
    pw: int,
    dh: int,
    dw: int,
    fill: float = 0.0,
) -> np.ndarray:
    """``[n, c, kh, kw, h_out, w_out]`` input taps (``fill`` outside)."""
    n, c, h, w = x.shape
    need_h = (h_out - 1) * sh + (kh - 1) * dh + 1
    need_w = (w_out - 1) * sw + (kw - 1) * dw + 1
    hp = max(h + ph, need_h)
    wp = max(w + pw, need_w)
    pad = np.full((n, c, hp, wp), fill, np.float64)
    pad[:, :, ph : ph + h, pw : pw + w] = x
    out = np.empty((n, c, kh, kw, h_out, w_out), np.float64)
    for ky in range(kh):
        for kx in range(kw):
            y0, x0 = ky * dh, kx * dw
            out[:, :, ky, kx] = pad[
                :, :, y0 : y0 + (h_out - 1) * sh + 1 : sh, x0 : x0 + (w_out - 1) * sw + 1 : sw
            ]
    return out


@reference("conv2d")
def conv2d(t: dict, mem: Memory) -> None:
    """``dst [n, c_out, h_out, w_out]`` = grouped cross-correlation of ``src
    [n, c_in, h, w]`` with ``weight [c_out, c_in/groups, kh, kw]`` (no bias)."""
    n, ci, h, w, co = t["n"], t["c_in"], t["h"], t["w"], t["c_out"]
    ho, wo, kh, kw, g = t["h_out"], t["w_out"], t["kh"], t["kw"], t.get("groups", 1) or 1
    if ci % g or co % g:
        raise ValueError(f"[conv2d] channels {ci}->{co} not divisible by groups {g}")
    x = mem.view(t["src"], (n, ci, h, w), F32).astype(np.float64)
    wt = mem.view(t["weight"], (co, ci // g, kh, kw), F32).astype(np.float64)
    p = _patches(
        x,
        kh,
        kw,
        ho,
        wo,
        t["sh"],
        t["sw"],
        t["ph"],
        t["pw"],
        t.get("dh", 1) or 1,
        t.get("dw", 1) or 1,
    )
    p = p.reshape(n, g, ci // g, kh, kw, ho, wo)
    wg = wt.reshape(g, co // g, ci // g, kh, kw)
    out = np.einsum("ngcyxhw,gocyx->ngohw", p, wg, optimize=True).reshape(n, co, ho, wo)
    store(mem.view(t["dst"], (n, co, ho, wo), F32), out)


@reference("conv_transpose2d")
def conv_transpose2d(t: dict, mem: Memory) -> None:
    """Transposed conv: ``src [n, c_in, h, w_in]``, ``weight [c_in, c_out/groups,
    kh, kw]``; input ``(iy, ix)`` tap ``(ky, kx)`` adds into output row
    ``iy·sh − ph + ky·dh``, column ``ix·sw − pw + kx·dw``; contributions
    outside ``[h_out, w_out]`` are dropped (output padding = the extra
    ``h_out``). No bias."""
    dt = fdt(t)
    n, ci, h, wi, co = t["n"], t["c_in"], t["h"], t["w_in"], t["c_out"]
    ho, wo, kh, kw, g = t["h_out"], t["w_out"], t["kh"], t["kw"], t.get("groups", 1) or 1
    sh, sw, ph, pw = t["sh"], t["sw"], t["ph"], t["pw"]
    dh, dw = t.get("dh", 1) or 1, t.get("dw", 1) or 1
    if ci % g or co % g:
        raise ValueError(f"[conv_transpose2d] channels {ci}->{co} not divisible by {g}")
    x = mem.view(t["src"], (n, g, ci // g, h, wi), dt).astype(np.float64)
    wt = mem.view(t["weight"], (g, ci // g, co // g, kh, kw), dt).astype(np.float64)
    # contrib[n, g, o, ky, kx, iy, ix]
    contrib = np.einsum("ngchw,gcoyx->ngoyxhw", x, wt, optimize=True)
    full_h = (h - 1) * sh + (kh - 1) * dh + 1
    full_w = (wi - 1) * sw + (kw - 1) * dw + 1
    big = np.zeros((n, g, co // g, max(full_h, ho + ph), max(full_w, wo + pw)), np.float64)
    for ky in range(kh):
        for kx in range(kw):
            y0, x0 = ky * dh, kx * dw
            big[:, :, :, y0 : y0 + (h - 1) * sh + 1 : sh, x0 : x0 + (wi - 1) * sw + 1 : sw] += (
                contrib[:, :, :, ky, kx]
            )
    out = big[:, :, :, ph : ph + ho, pw : pw + wo].reshape(n, co, ho, wo)
    store(mem.view(t["dst"], (n, co, ho, wo), dt), out)


@reference("pool2d")
def pool2d(t: dict, mem: Memory) -> None:
    """Max / mean pooling (``kind`` ``"max"`` / ``"mean"``), f32, no dilation.
    Max ignores padding cells; mean divides by the number of in-bounds cells
    (PyTorch ``count_include_pad=False``). A window with no in-bounds cell
    gives −inf (max) or 0 (mean)."""
    n, c, h, w, ho, wo = t["n"], t["c"], t["h"], t["w"], t["h_out"], t["w_out"]
    kh, kw, sh, sw, ph, pw = t["kh"], t["kw"], t["sh"], t["sw"], t["ph"], t["pw"]
    x = mem.view(t["src"], (n, c, h, w), F32).astype(np.float64)
    ones = np.ones((1, 1, h, w))
    cnt = _patches(ones, kh, kw, ho, wo, sh, sw, ph, pw, 1, 1).sum(axis=(2, 3))
    if t["kind"] == "max":
        out = _patches(x, kh, kw, ho, wo, sh, sw, ph, pw, 1, 1, fill=-np.inf).max(axis=(2, 3))
    elif t["kind"] == "mean":
        s = _patches(x, kh, kw, ho, wo, sh, sw, ph, pw, 1, 1).sum(axis=(2, 3))
        out = np.where(cnt > 0, s / np.maximum(cnt, 1), 0.0)
    else:
        raise ValueError(f"[pool2d] unsupported kind '{t['kind']}'")
    store(mem.view(t["dst"], (n, c, ho, wo), F32), out)


@reference("im2col")
def im2col(t: dict, mem: Memory) -> None:
    """``col [n, c_in·kh·kw, h_out·w_out]`` (f32): row ``ci·kh·kw + ky·kw + kx``,
    column ``oy·w_out + ox`` holds the input tap (0 in the padding)."""
    n, ci, h, w, ho, wo = t["n"], t["c_in"], t["h"], t["w"], t["h_out"], t["w_out"]
    kh, kw = t["kh"], t["kw"]
    x = mem.view(t["x"], (n, ci, h, w), F32).astype(np.float64)
    p = _patches(
        x,
        kh,
        kw,
        ho,
        wo,
        t["sh"],
        t["sw"],
        t["ph"],
        t["pw"],
        t.get("dh", 1) or 1,
        t.get("dw_dil", 1) or 1,
    )
    store(mem.view(t["col"], (n, ci * kh * kw, ho * wo), F32), p.reshape(n, ci * kh * kw, -1))


@reference("fused_depthwise_conv1d_bsc")
def fused_depthwise_conv1d_bsc(t: dict, mem: Memory) -> None:
    """Depthwise 1-D conv on ``src [batch, width, channels]`` (f32) with
    ``weight [channels, k]``: ``dst[b, s, c] = Σ_j src[b, s + j, c]·w[c, j]``
    for ``s < out_seq`` (``out_seq ≤ width − k + 1``; causal padding is
    already in ``src``), then SiLU when ``silu``."""
    b, wd, os_, c, k = t["batch"], t["width"], t["out_seq"], t["channels"], t["k"]
    if os_ > wd - k + 1:
        raise ValueError(f"[fused_depthwise_conv1d_bsc] out_seq {os_} > width-k+1")
    x = mem.view(t["src"], (b, wd, c), F32).astype(np.float64)
    wt = mem.view(t["weight"], (c, k), F32).astype(np.float64)
    out = np.zeros((b, os_, c))
    for j in range(k):
        out += x[:, j : j + os_, :] * wt[:, j]
    if t.get("silu"):
        out = silu(out)
    store(mem.view(t["dst"], (b, os_, c), F32), out)
