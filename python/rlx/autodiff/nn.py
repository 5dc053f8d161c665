"""VJP rules that emit the IR's ``*_backward`` ops: attention (masks, GQA,
score scale), RoPE, conv2d, max-pool, log-mel, Gaussian splatting.
Soft-capped attention and partial interleaved RoPE, which the backward ops
do not cover, are differentiated through ordinary ops
(:mod:`rlx.autodiff.composite`)."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from rlx.autodiff._core import Ctx, rule
from rlx.autodiff.composite import rotate_back, softcap_attention
from rlx.node import Node


@rule("attention")
def _attention(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    g = ctx.g
    at = node.attrs
    ins = node.inputs
    if at.get("dynamic_kv_len"):
        raise ctx.fail(node, "attention over a run-time kv_len (a decode cache) has no gradient")
    has_mask = at["mask"] in ("custom", "bias")
    if has_mask and ctx.needs(3):
        raise ctx.fail(node, "the mask / bias operand gets no gradient")
    if at.get("softcap") is not None:
        # attention_backward has no soft-capping: ordinary ops
        return softcap_attention(ctx, node, dy)
    q, k, v = ins[:3]
    d = int(at["head_dim"])
    # the backward op scores with 1/√d: fold any other scale into q
    factor = 1.0
    if at.get("score_scale") is not None:
        factor = float(at["score_scale"]) * math.sqrt(d)
    qs = q if factor == 1.0 else q * factor
    base = {
        "op": "attention_backward",
        "heads": at["heads"],
        "head_dim": d,
        "mask": at["mask"],
        "window": at["window"],
        "layout": at["layout"],
    }
    extra = [ins[3]] if has_mask else []
    rep = int(at["heads"]) // int(at["kv_heads"])
    # GQA: the backward runs on k / v repeated to every query head; the
    # k / v gradients are then summed over each group of query heads
    kf, vf = (_repeat_heads(ctx, k, at, rep), _repeat_heads(ctx, v, at, rep)) if rep > 1 else (k, v)
    out: list[Optional[Node]] = []
    for i, wrt in enumerate(("q", "k", "v")):
        if not ctx.needs(i):
            out.append(None)
            continue
        gi = g.apply(dict(base, wrt=wrt), qs, kf, vf, dy, *extra)
        if i == 0 and factor != 1.0:
            gi = gi * factor
        if i > 0 and rep > 1:
            gi = _sum_groups(ctx, gi, at, rep, (k, v)[i - 1])
        out.append(gi)
    return out + [None] * (len(ins) - 3)


def _grouped_dims(x: Node, at: dict, rep: int) -> tuple[list, int]:
    """Dims of ``x`` (k or v) with its kv-head axis split as ``[.., kvh, rep, ..]``
    (size-1 ``rep`` for the input) and the index of the rep axis."""
    d = int(at["head_dim"])
    kvh = int(at["kv_heads"])
    if at["layout"] == "bshd":
        b, s, _ = x.shape
        return [b, s, kvh, rep, d], 3
    b, _, s, _ = x.shape
    return [b, kvh, rep, s, d], 2


def _repeat_heads(ctx: Ctx, x: Node, at: dict, rep: int) -> Node:
    g = ctx.g
    dims, ax = _grouped_dims(x, at, rep)
    one = list(dims)
    one[ax] = 1
    full = g.expand(g.reshape(x, one), dims)
    if at["layout"] == "bshd":
        return g.reshape(full, [dims[0], dims[1], dims[2] * rep * dims[4]])
    return g.reshape(full, [dims[0], dims[1] * rep, dims[3], dims[4]])


def _sum_groups(ctx: Ctx, gx: Node, at: dict, rep: int, x: Node) -> Node:
    g = ctx.g
    dims, ax = _grouped_dims(x, at, rep)
    return g.reshape(g.sum(g.reshape(gx, dims), ax), list(x.shape))


@rule("rope")
def _rope(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    _, cos, sin = node.inputs
    if ctx.needs(1) or ctx.needs(2):
        raise ctx.fail(node, "the cos / sin tables get no gradient")
    at = node.attrs
    if at["kind"] == "interleaved" and at["n_rot"] != at["head_dim"]:
        # rope_backward pairs interleaved dims only over a whole head: the
        # transpose of the rotation is the rotation by −θ (a forward rope)
        return [rotate_back(ctx, dy, cos, sin, at), None, None]
    op = {"op": "rope_backward", "kind": at["kind"], "head_dim": at["head_dim"],
          "n_rot": at["n_rot"]}  # fmt: skip
    return [ctx.g.apply(op, dy, cos, sin), None, None]


#: column widths of the splat backward's packed row, per differentiable operand
_SPLAT_COLS = (3, 3, 4, 1, 3)


@rule("gaussian_splat_render")
def _gaussian_splat_render(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    # one [g, 14 + 3k] row per splat (position, scale, rotation, opacity,
    # colour, SH coefficient-major); d_loss unclipped (a clip past any f32
    # gradient) and every SH band the colour uses live
    g = ctx.g
    ins = node.inputs
    if ctx.needs(6):
        raise ctx.fail(node, "the camera operand gets no gradient")
    sh = ins[5]
    k = sh.shape[1] if sh.ndim == 3 else 0
    if not isinstance(k, int):
        raise ctx.fail(node, f"needs a static SH coefficient count, got {k!r}")
    band = max(0, min(3, math.isqrt(k) - 1))
    op = {"op": "gaussian_splat_render_backward", "cfg": node.attrs["cfg"],
          "loss_grad_clip": 1e38, "sh_band": band, "max_anisotropy": 1e3}  # fmt: skip
    packed = g.apply(op, *ins, dy)
    out: list[Optional[Node]] = [None] * len(ins)
    start = 0
    for i, width in enumerate(_SPLAT_COLS):
        if ctx.needs(i):
            out[i] = g.reshape(g.narrow(packed, 1, start, width), list(ins[i].shape))
        start += width
    if ctx.needs(5):
        if k == 0:
            out[5] = ctx.zeros(sh.shape, sh.dtype)
        else:
            out[5] = g.reshape(g.narrow(packed, 1, start, 3 * k), list(sh.shape))
    return out


@rule("conv2d")
def _conv2d(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    g = ctx.g
    ins = node.inputs
    x, w = ins[0], ins[1]
    at = node.attrs
    common = {k: at[k] for k in ("stride", "padding", "dilation", "groups")}
    out: list[Optional[Node]] = [None] * len(ins)
    if ctx.needs(0):
        hw = x.shape[2:]
        if not all(isinstance(d, int) for d in hw):
            raise ctx.fail(node, f"input gradient needs a static spatial size, got {list(hw)}")
        op = dict(common, op="conv2d_backward_input", input_hw=list(hw))
        out[0] = g.apply(op, dy, w)
    if ctx.needs(1):
        op = dict(common, op="conv2d_backward_weight", kernel=list(w.shape[2:]))
        out[1] = g.apply(op, x, dy)
    if len(ins) > 2 and ctx.needs(2):
        out[2] = g.sum(dy, [0, 2, 3])
    return out


@rule("conv_transpose2d")
def _conv_transpose2d(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    # convT(x, w) is conv2d's input gradient at x: its adjoint in x is conv2d
    # with the same weight, and its weight gradient conv2d's weight gradient
    # with the roles of x and dy swapped
    g = ctx.g
    ins = node.inputs
    x, w = ins[0], ins[1]
    at = node.attrs
    common = {k: at[k] for k in ("stride", "padding", "dilation", "groups")}
    out: list[Optional[Node]] = [None] * len(ins)
    if ctx.needs(0):
        out[0] = g.apply(dict(common, op="conv2d"), dy, w)
    if ctx.needs(1):
        op = dict(common, op="conv2d_backward_weight", kernel=list(w.shape[2:]))
        out[1] = g.apply(op, dy, x)
    if len(ins) > 2 and ctx.needs(2):
        out[2] = g.sum(dy, [0, 2, 3])
    return out


@rule("pool2d")
def _pool2d(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    (x,) = node.inputs
    at = node.attrs
    if at["kind"] == "mean":
        return [_avg_pool_grad(ctx, node, x, dy)]
    if at["kind"] != "max":
        raise ctx.fail(node, f"{at['kind']} pooling has no gradient rule")
    op = {"op": "max_pool2d_backward", "kernel": at["kernel"], "stride": at["stride"],
          "padding": at["padding"]}  # fmt: skip
    return [ctx.g.apply(op, x, dy)]


def _avg_pool_grad(ctx: Ctx, node: Node, x: Node, dy: Node) -> Node:
    """Mean pooling (padding excluded from the divisor): every input takes
    ``dy / count`` of each window it is in — a depthwise transposed conv of
    ``dy / count`` with a ones kernel."""
    g = ctx.g
    at = node.attrs
    (kh, kw), (sh, sw), (ph, pw) = at["kernel"], at["stride"], at["padding"]
    dims = list(x.shape)
    if not all(isinstance(d, int) for d in dims):
        raise ctx.fail(node, f"mean-pool gradient needs static dims, got {dims}")
    _, c, h, w = (int(d) for d in dims)
    ho, wo = int(dy.shape[2]), int(dy.shape[3])

    def count(n_out: int, size: int, k: int, s: int, p: int) -> np.ndarray:
        starts = np.arange(n_out) * s - p
        return np.minimum(starts + k, size) - np.maximum(starts, 0)

    cnt = np.outer(count(ho, h, kh, sh, ph), count(wo, w, kw, sw, pw)).astype(np.float64)
    inv = g.constant((1.0 / cnt).astype(np.float32), dtype=dy.dtype)
    ones = g.constant(1.0, dtype=dy.dtype, shape=[c, 1, kh, kw])
    out_pad = [h + 2 * ph - (ho - 1) * sh - kh, w + 2 * pw - (wo - 1) * sw - kw]
    return g.conv_transpose2d(dy * inv, ones, stride=[sh, sw], padding=[ph, pw],
                              output_padding=out_pad, groups=c)  # fmt: skip


#: the norm whose transform is the adjoint of a transform with this norm
_ADJOINT_NORM = {"backward": "forward", "ortho": "ortho", "forward": "backward"}


@rule("fft")
def _fft(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    # on the real block layout the transform is real-linear; its transpose is
    # the complex adjoint: the opposite direction with the swapped norm
    at = node.attrs
    op = {"op": "fft", "inverse": not at["inverse"], "norm": _ADJOINT_NORM[at["norm"]]}
    return [ctx.g.apply(op, dy)]


@rule("log_mel")
def _log_mel(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    spec, filters = node.inputs
    if ctx.needs(1):
        raise ctx.fail(node, "the mel filter bank gets no gradient")
    op = {"op": "log_mel_backward", "n_fft": node.attrs["n_fft"]}
    return [ctx.g.apply(op, spec, filters, dy), None]


@rule("fused_attention_block")
def _fused_attention_block(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    # recompute as QKV matmul → narrows → NeoX RoPE → attention → output
    # matmul, and differentiate that (its attention uses attention_backward)
    from rlx.autodiff._core import grad

    g = ctx.g
    at = node.attrs
    ins = node.inputs
    x, w_qkv, w_out = ins[:3]
    rope = bool(at["rope"])
    extra = ins[3:]
    for i in range(3, len(ins)):
        if ctx.needs(i):
            raise ctx.fail(node, "the cos / sin tables and the mask get no gradient")
    heads, d = int(at["heads"]), int(at["head_dim"])
    inner = heads * d
    qkv = x @ w_qkv
    q, k, v = (g.narrow(qkv, 2, i * inner, inner) for i in range(3))
    if rope:
        cos, sin = extra[0], extra[1]
        q = g.rope(q, cos, sin, head_dim=d)
        k = g.rope(k, cos, sin, head_dim=d)
    mask_input = extra[2] if rope and len(extra) > 2 else (extra[0] if not rope and extra else None)
    a = g.attention(q, k, v, heads=heads, head_dim=d, mask=at["mask"], mask_input=mask_input)
    y = a @ w_out
    want = [i for i in range(3) if ctx.needs(i)]
    out: list[Optional[Node]] = [None] * len(ins)
    for i, gi in zip(want, grad(g, y, [ins[i] for i in want], seed=dy)):
        out[i] = gi
    return out


@rule("spd")
def _spd(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    # x: spd_backward (the symmetric gradient for the eigen-function ops);
    # BiMap's weight: d(Wᵀ X W) → Σ_b X W dYᵀ + Xᵀ W dY
    g = ctx.g
    at = node.attrs
    ins = node.inputs
    out: list[Optional[Node]] = [None] * len(ins)
    if ctx.needs(0):
        out[0] = g.spd_backward(at["kind"], *ins, dy, eps=at["eps"])
    if len(ins) > 1 and ctx.needs(1):
        if at["kind"] != "bi_map":
            raise ctx.fail(node, f"spd {at['kind']}: its second operand gets no gradient")
        x, w = ins
        xt = g.transpose(x, [0, 2, 1])
        dyt = g.transpose(dy, [0, 2, 1])
        out[1] = g.sum(x @ w @ dyt + xt @ w @ dy, 0)
    return out


@rule("im2_col")
def _im2col(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    # col2im: each column entry (c, ky, kx) goes back to its tap, summed — a
    # grouped transposed conv whose kernel is one-hot at (ky, kx)
    g = ctx.g
    (x,) = node.inputs
    at = node.attrs
    (kh, kw), (sh, sw) = at["kernel"], at["stride"]
    (ph, pw), (dh, dw) = at["padding"], at["dilation"]
    dims = list(x.shape)
    if not all(isinstance(d, int) for d in dims):
        raise ctx.fail(node, f"needs static dims, got {dims}")
    n, c, h, w = (int(d) for d in dims)
    ho = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    wo = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    taps = kh * kw
    onehot = np.zeros((c * taps, 1, kh, kw), np.float32)
    for ch in range(c):
        for t in range(taps):
            onehot[ch * taps + t, 0, t // kw, t % kw] = 1.0
    cols = g.reshape(dy, [n, c * taps, ho, wo])
    out_pad = [h + 2 * ph - dh * (kh - 1) - 1 - (ho - 1) * sh,
               w + 2 * pw - dw * (kw - 1) - 1 - (wo - 1) * sw]  # fmt: skip
    dx = g.conv_transpose2d(cols, g.constant(onehot, dtype=dy.dtype), stride=[sh, sw],
                            padding=[ph, pw], dilation=[dh, dw], output_padding=out_pad,
                            groups=c)  # fmt: skip
    return [dx]
