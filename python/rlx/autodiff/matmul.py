"""VJP rules of matrix products: ``mat_mul`` (numpy semantics: batch
broadcasting, rank-1 operands), ``fused_mat_mul_bias_act``, the activation
gradient of a quantised ``dequant_mat_mul`` / ``dequant_grouped_mat_mul``
w.r.t. its input (weights frozen), grouped matmul, and the scale / bias
gradients of the low-precision ``scaled_mat_mul`` / ``scaled_dequantize``, and
the amax gradient of ``scaled_quant_scale``."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from rlx.autodiff._core import Ctx, grad, rule
from rlx.autodiff.elementwise import act_grad
from rlx.node import Node


def _swap(ctx: Ctx, x: Node) -> Node:
    perm = list(range(x.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return ctx.g.transpose(x, perm)


def matmul_grads(
    ctx: Ctx, a: Node, b: Node, dy: Node, need_a: bool, need_b: bool
) -> tuple[Optional[Node], Optional[Node]]:
    """Gradients of ``a @ b`` (numpy matmul) given ``dy``."""
    g = ctx.g
    a2 = g.reshape(a, [1, a.shape[0]]) if a.ndim == 1 else a
    b2 = g.reshape(b, [b.shape[0], 1]) if b.ndim == 1 else b
    # dy with the dims a rank-1 operand dropped put back
    dims = list(dy.shape)
    if a.ndim == 1:
        dims.insert(len(dims) - (0 if b.ndim == 1 else 1), 1)
    if b.ndim == 1:
        dims.append(1)
    dy2 = g.reshape(dy, dims) if dims != list(dy.shape) else dy
    ga: Optional[Node] = None
    gb: Optional[Node] = None
    if need_a:
        ga = ctx.sum_to(g.matmul(dy2, _swap(ctx, b2)), a2.shape)
        ga = g.reshape(ga, list(a.shape)) if a.ndim == 1 else ga
    if need_b:
        if b2.ndim == 2 and a2.ndim > 2:
            # fold a's batch dims into its rows: one [k, m·batch] @ [m·batch, n]
            k, n = a2.shape[-1], dy2.shape[-1]
            flat_a = g.reshape(a2, [-1, k])
            flat_dy = g.reshape(dy2, [-1, n])
            gb = g.matmul(g.transpose(flat_a, [1, 0]), flat_dy)
        else:
            gb = ctx.sum_to(g.matmul(_swap(ctx, a2), dy2), b2.shape)
        gb = g.reshape(gb, list(b.shape)) if b.ndim == 1 else gb
    return ga, gb


@rule("mat_mul")
def _mat_mul(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    a, b = node.inputs
    return list(matmul_grads(ctx, a, b, dy, ctx.needs(0), ctx.needs(1)))


@rule("fused_mat_mul_bias_act")
def _fused_mat_mul_bias_act(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    g = ctx.g
    a, w, bias = node.inputs
    act = node.attrs.get("act")
    dz: Optional[Node] = dy
    if act is not None:
        z = g.matmul(a, w) + bias
        dz = act_grad(ctx, act, z, node, dy, node)
    if dz is None:
        return [None, None, None]
    ga, gw = matmul_grads(ctx, a, w, dz, ctx.needs(0), ctx.needs(1))
    gbias = ctx.sum_to(dz, bias.shape) if ctx.needs(2) else None
    return [ga, gw, gbias]


def _eye(ctx: Ctx, k: int, dtype: str) -> Node:
    """A ``k × k`` identity built from a cumsum and a comparison (no k² constant)."""
    g = ctx.g
    iota = g.cumsum(g.constant(1.0, dtype="f32", shape=[k]), 0)
    eq = g.eq(g.reshape(iota, [k, 1]), g.reshape(iota, [1, k]))
    return g.where(
        eq, g.constant(1.0, dtype=dtype, shape=[]), g.constant(0.0, dtype=dtype, shape=[])
    )


@rule("dequant_mat_mul")
def _dequant_mat_mul(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    # y = x @ W^T with W = dequant(w_q) [n, k]: dx = dy @ W, by (in order of
    # preference) the dense copy the caller gave (grad(dense_weights=)), the
    # transposed product straight from the packed blocks (GGUF formats:
    # dequant_mat_mul_t), or W^T from the op itself applied to the identity
    # (formats with separate scale tensors).
    ins = node.inputs
    for i in range(1, len(ins)):
        if ctx.needs(i):
            raise ctx.fail(node, "quantised weights and their scales are frozen (no gradient)")
    if not ctx.needs(0):
        return [None] * len(ins)
    g = ctx.g
    x = ins[0]
    dyf = dy if dy.dtype == "f32" else g.cast(dy, "f32")
    dense = ctx.dense.get(ins[1].id)
    if dense is not None:
        n, k = node.attrs["n"], node.attrs["k"]
        if list(dense.shape) != [n, k]:
            raise ctx.fail(node, f"dense weight is {list(dense.shape)}, expected {[n, k]}")
        dx = g.matmul(dyf, dense)
        return [dx if x.dtype == "f32" else g.cast(dx, x.dtype)] + [None] * (len(ins) - 1)
    k = node.attrs["k"]
    scheme = node.attrs["scheme"]
    if isinstance(scheme, dict) and "gguf" in scheme and len(ins) == 2:
        dx = g.dequant_matmul_t(dyf, ins[1], scheme=scheme, k=k, n=node.attrs["n"])
        return [dx if x.dtype == "f32" else g.cast(dx, x.dtype), None]
    eye = _eye(ctx, k, "f32")
    wt = g.apply(dict(op="dequant_mat_mul", **node.attrs), eye, *ins[1:])  # [k, n] = W^T
    dx = g.matmul(dyf, g.transpose(wt, [1, 0]))
    return [dx if x.dtype == "f32" else g.cast(dx, x.dtype)] + [None] * (len(ins) - 1)


@rule("dequant_mat_mul_t")
def _dequant_mat_mul_t(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    # z = d @ W with W = dequant(w_q) [n, k] (the transposed product): it is
    # linear in d, and dd = dy @ Wᵀ is dequant_mat_mul itself on the same blocks
    ins = node.inputs
    if ctx.needs(1):
        raise ctx.fail(node, "quantised weights are frozen (no gradient)")
    if not ctx.needs(0):
        return [None, None]
    g = ctx.g
    d = ins[0]
    dyf = dy if dy.dtype == "f32" else g.cast(dy, "f32")
    at = node.attrs
    dd = g.dequant_matmul(dyf, ins[1], scheme=at["scheme"], n=at["n"], k=at["k"])
    return [dd if d.dtype == "f32" else g.cast(dd, d.dtype), None]


@rule("grouped_mat_mul")
def _grouped_mat_mul(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    # y[i] = x[i] @ w[e_i]: dx[i] = dy[i] @ w[e_i]ᵀ; dw[e] = Σ_{e_i = e} x[i]ᵀ dy[i]
    g = ctx.g
    x, w, idx = node.inputs
    dx = dw = None
    if ctx.needs(0):
        dx = g.grouped_matmul(dy, g.transpose(w, [0, 2, 1]), idx)
    if ctx.needs(1):
        experts = w.shape[0]
        if not isinstance(experts, int):
            raise ctx.fail(node, f"symbolic expert count {experts!r}")
        outer = g.unsqueeze(x, 2) * g.unsqueeze(dy, 1)  # [m, k, n]
        dw = g.scatter_add(outer, idx, experts)
    return [dx, dw, None]


@rule("dequant_grouped_mat_mul")
def _dequant_grouped_mat_mul(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    # y[i] = x[i] @ W[e_i]ᵀ with W[e] = dequant(w_q[e]) [n, k], weights frozen:
    # dx[i] = dy[i] @ W[e_i]. Every Wᵀ [e, k, n] comes from the op itself run
    # on stacked identities (row e·k + j selects expert e, column j), then one
    # grouped matmul routes each row's dy through its expert.
    ins = node.inputs
    if ctx.needs(1):
        raise ctx.fail(node, "quantised expert weights are frozen (no gradient)")
    if not ctx.needs(0):
        return [None] * len(ins)
    g = ctx.g
    x, _, idx = ins
    at = node.attrs
    e, k = int(at["num_experts"]), int(at["k"])
    eye = g.expand(g.reshape(_eye(ctx, k, "f32"), [1, k, k]), [e, k, k])
    sel = np.repeat(np.arange(e, dtype=np.int32), k)
    rows = g.apply(dict(at, op="dequant_grouped_mat_mul"), g.reshape(eye, [e * k, k]), ins[1],
                   g.constant(sel, dtype="i32"))  # fmt: skip
    w = g.transpose(g.reshape(rows, [e, k, int(at["n"])]), [0, 2, 1])  # [e, n, k]
    dyf = dy if dy.dtype == "f32" else g.cast(dy, "f32")
    dx = g.grouped_matmul(dyf, w, idx)
    return [dx if x.dtype == "f32" else g.cast(dx, x.dtype), None, None]


def _to_scale(ctx: Ctx, full: Node, layout: Any, node: Node) -> Node:
    """Sum an ``[r, c]`` gradient over the entries each scale of ``layout``
    multiplies: per-tensor ``[1]``, per-row ``[r]``, blocks ``[r, ⌈c/size⌉]``."""
    g = ctx.g
    r, c = full.shape
    if layout == "per_tensor":
        return g.reshape(g.sum(full), [1])
    if layout == "per_row":
        return g.sum(full, [1])
    if not (isinstance(layout, dict) and "block" in layout):
        raise ctx.fail(node, f"unknown scale layout {layout!r}")
    size = int(layout["block"]["size"])
    if not (isinstance(r, int) and isinstance(c, int)):
        raise ctx.fail(node, f"block scales need static dims, got {[r, c]}")
    nb = -(-c // size)
    if nb * size != c:
        full = g.concat([full, ctx.zeros([r, nb * size - c], full.dtype)], axis=1)
    return g.sum(g.reshape(full, [r, nb, size]), [2])


def _decoded(ctx: Ctx, codes: Node, fmt: str, layout: Any, node: Node) -> Node:
    """``decode(codes)`` as f32 (a scaled dequantise by ones)."""
    r, c = codes.shape
    if not (isinstance(r, int) and isinstance(c, int)):
        raise ctx.fail(node, f"needs static code dims, got {[r, c]}")
    if layout == "per_tensor":
        dims = [1]
    elif layout == "per_row":
        dims = [r]
    else:
        dims = [r, -(-c // int(layout["block"]["size"]))]
    return ctx.g.scaled_dequantize(codes, ctx.full(dims, 1.0, "f32"), fmt=fmt, layout=layout)


@rule("scaled_dequantize")
def _scaled_dequantize(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    # y = decode(codes) ⊙ expand(scale): d scale = Σ over each scale's entries
    codes, scale = node.inputs
    at = node.attrs
    full = dy * _decoded(ctx, codes, at["fmt"], at["layout"], node)
    return [None, ctx.like(_to_scale(ctx, full, at["layout"], node), scale)]


@rule("scaled_mat_mul")
def _scaled_mat_mul(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    # y = A Bᵀ (+ bias) with A = decode(lhs) ⊙ S_l, B = decode(rhs) ⊙ S_r: the
    # scales get (dy B) ⊙ decode(lhs) and (dyᵀ A) ⊙ decode(rhs) summed per
    # scale; the u8 codes are not differentiable (integer operands)
    g = ctx.g
    ins = node.inputs
    at = node.attrs
    lay = at["layout"]
    lhs, rhs, s_l, s_r = ins[:4]
    out: list[Optional[Node]] = [None] * len(ins)
    dyf = dy if dy.dtype == "f32" else g.cast(dy, "f32")
    if ctx.needs(2):
        b = g.scaled_dequantize(rhs, s_r, fmt=at["rhs_fmt"], layout=lay)
        full = g.matmul(dyf, b) * _decoded(ctx, lhs, at["lhs_fmt"], lay, node)
        out[2] = ctx.like(_to_scale(ctx, full, lay, node), s_l)
    if ctx.needs(3):
        a = g.scaled_dequantize(lhs, s_l, fmt=at["lhs_fmt"], layout=lay)
        full = g.matmul(g.transpose(dyf, [1, 0]), a) * _decoded(ctx, rhs, at["rhs_fmt"], lay, node)
        out[3] = ctx.like(_to_scale(ctx, full, lay, node), s_r)
    if len(ins) > 4 and ctx.needs(4):
        out[4] = ctx.like(g.sum(dyf, [0]), ins[4])
    return out


def _group_amax(ctx: Ctx, x: Node, layout: Any, node: Node) -> Node:
    """``max |x|`` per scale group of ``layout`` (the scales' dims); a block
    layout pads the last partial block with zeros, which never raise a max."""
    g = ctx.g
    a = g.abs(x)
    if layout == "per_tensor":
        return g.reshape(g.max(a), [1])
    if layout == "per_row":
        return g.max(a, [1])
    r, c = x.shape
    if not (isinstance(layout, dict) and "block" in layout):
        raise ctx.fail(node, f"unknown scale layout {layout!r}")
    if not (isinstance(r, int) and isinstance(c, int)):
        raise ctx.fail(node, f"block scales need static dims, got {[r, c]}")
    size = int(layout["block"]["size"])
    nb = -(-c // size)
    if nb * size != c:
        a = g.concat([a, ctx.zeros([r, nb * size - c], a.dtype)], axis=1)
    return g.max(g.reshape(a, [r, nb, size]), [2])


@rule("scaled_quant_scale")
def _scaled_quant_scale(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    # s = amax / fmt_max per group (1.0 where amax = 0): d s / d amax = s / amax,
    # and amax's gradient goes to the entries that reach it with their sign,
    # ties sharing it evenly (torch.amax); an all-zero group has none
    g = ctx.g
    (x,) = node.inputs
    amax = _group_amax(ctx, x, node.attrs["layout"], node)
    pos = g.gt(amax, ctx.scalar(0.0, amax))
    ratio = g.where(pos, node / g.where(pos, amax, ctx.scalar(1.0, amax)), ctx.scalar(0.0, amax))
    (gx,) = grad(g, amax, [x], seed=dy * ratio)
    return [gx]
