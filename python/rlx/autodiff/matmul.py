"""VJP rules of matrix products: ``mat_mul`` (numpy semantics: batch
broadcasting, rank-1 operands), ``fused_mat_mul_bias_act`` and the
activation gradient of a quantised ``dequant_mat_mul`` w.r.t. its input."""

from __future__ import annotations

from typing import Optional

from rlx.autodiff._core import Ctx, rule
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
