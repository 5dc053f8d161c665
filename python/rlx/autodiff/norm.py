"""VJP rules of the normalisations: LayerNorm (ordinary ops), RMSNorm
(``rms_norm_backward``), the fused residual norms, adaLN
(``ada_layer_norm_backward``) and the gated residual
(``gated_residual_backward``)."""

from __future__ import annotations

from typing import Optional

from rlx.autodiff._core import Ctx, rule
from rlx.node import Node


def layer_norm_grads(
    ctx: Ctx, x: Node, gamma: Node, eps: float, dy: Node, need: tuple[bool, bool, bool]
) -> list[Optional[Node]]:
    """Gradients of ``LayerNorm(x)·gamma + beta`` over the last axis w.r.t.
    (x, gamma, beta), each built only when ``need`` says so."""
    g = ctx.g
    mu = g.mean(x, -1, keep_dims=True)
    xc = x - mu
    rstd = g.rsqrt(g.mean(xc * xc, -1, keep_dims=True) + eps)
    xhat = xc * rstd
    gx = gg = gb = None
    if need[0]:
        gh = dy * gamma
        m1 = g.mean(gh, -1, keep_dims=True)
        m2 = g.mean(gh * xhat, -1, keep_dims=True)
        gx = rstd * (gh - m1 - xhat * m2)
    if need[1]:
        gg = ctx.sum_to(dy * xhat, gamma.shape)
    if need[2]:
        gb = ctx.sum_to(dy, gamma.shape)
    return [gx, gg, gb]


@rule("layer_norm")
def _layer_norm(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    x, gamma, _ = node.inputs
    need = (ctx.needs(0), ctx.needs(1), ctx.needs(2))
    return layer_norm_grads(ctx, x, gamma, node.attrs["eps"], dy, need)


def rms_norm_grads(
    ctx: Ctx, x: Node, gamma: Node, beta: Optional[Node], eps: float, dy: Node,
    need: tuple[bool, bool, bool],
) -> list[Optional[Node]]:  # fmt: skip
    """``rms_norm_backward`` ops for (x, gamma, beta) as ``need`` says."""
    g = ctx.g
    ops = [x, gamma] + ([beta] if beta is not None else [])
    out: list[Optional[Node]] = []
    for want, wrt in zip(need, ("input", "gamma", "beta")):
        if want:
            out.append(g.apply({"op": "rms_norm_backward", "eps": eps, "wrt": wrt}, *ops, dy))
        else:
            out.append(None)
    return out


@rule("rms_norm")
def _rms_norm(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    ins = node.inputs
    beta = ins[2] if len(ins) > 2 else None
    need = (ctx.needs(0), ctx.needs(1), ctx.needs(2))
    return rms_norm_grads(ctx, ins[0], ins[1], beta, node.attrs["eps"], dy, need)[: len(ins)]


def _residual_sum(ctx: Ctx, node: Node) -> tuple[Node, list[Node], int]:
    """``x + res (+ bias)`` recomputed, the summands, and where gamma sits."""
    ins = node.inputs
    has_bias = bool(node.attrs["has_bias"])
    h = ins[0] + ins[1]
    if has_bias:
        h = h + ins[2]
    return h, ins[: 3 if has_bias else 2], 3 if has_bias else 2


def _spread(ctx: Ctx, summands: list[Node], dh: Optional[Node]) -> list[Optional[Node]]:
    return [ctx.like(dh, s) if dh is not None and ctx.needs(i) else None
            for i, s in enumerate(summands)]  # fmt: skip


@rule("fused_residual_ln")
def _residual_ln(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    h, summands, gi = _residual_sum(ctx, node)
    ins = node.inputs
    need_h = any(ctx.needs(i) for i in range(gi))
    dh, dg, db = layer_norm_grads(
        ctx, h, ins[gi], node.attrs["eps"], dy, (need_h, ctx.needs(gi), ctx.needs(gi + 1))
    )
    return _spread(ctx, summands, dh) + [dg, db]


@rule("fused_residual_rms_norm")
def _residual_rms(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    h, summands, gi = _residual_sum(ctx, node)
    ins = node.inputs
    beta = ins[gi + 1] if len(ins) > gi + 1 else None
    need_h = any(ctx.needs(i) for i in range(gi))
    need = (need_h, ctx.needs(gi), ctx.needs(gi + 1))
    dh, dg, db = rms_norm_grads(ctx, h, ins[gi], beta, node.attrs["eps"], dy, need)
    return _spread(ctx, summands, dh) + [dg] + ([db] if beta is not None else [])


def _numel(ctx: Ctx, node: Node, n: Node) -> int:
    out = 1
    for d in n.shape:
        if not isinstance(d, int):
            raise ctx.fail(node, f"needs static shapes, got symbolic {d!r}")
        out *= d
    return out


def _unpack(ctx: Ctx, node: Node, packed: Node, parts: list[Node]) -> list[Node]:
    """Split a flat packed gradient into pieces shaped like ``parts``."""
    g = ctx.g
    out, at = [], 0
    for p in parts:
        n = _numel(ctx, node, p)
        out.append(g.reshape(g.narrow(packed, 0, at, n), list(p.shape)))
        at += n
    return out


@rule("ada_layer_norm")
def _ada_ln(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    x, scale, shift = node.inputs
    at = node.attrs
    op = {"op": "ada_layer_norm_backward", "eps": at["eps"], "layer_norm": at["layer_norm"]}
    packed = ctx.g.apply(op, x, scale, dy)
    dx, dscale, dshift = _unpack(ctx, node, packed, [x, scale, scale])
    return [dx, dscale, ctx.like(dshift, shift)]


@rule("gated_residual")
def _gated_residual(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    x, y, gate = node.inputs
    packed = ctx.g.gated_residual_backward(y, gate, dy)
    dx, dyy, dgate = _unpack(ctx, node, packed, [y, y, gate])
    return [ctx.like(dx, x), dyy, dgate]


def _normalized_grad(ctx: Ctx, xr: Node, eps: float, dxh: Node) -> tuple[Node, Node]:
    """For ``x̂ = (x − μ)/σ`` over the last axis of ``xr``: ``dL/dx`` given
    ``dL/dx̂``, and ``x̂`` itself."""
    g = ctx.g
    mu = g.mean(xr, -1, keep_dims=True)
    xc = xr - mu
    rstd = g.rsqrt(g.mean(xc * xc, -1, keep_dims=True) + eps)
    xhat = xc * rstd
    m1 = g.mean(dxh, -1, keep_dims=True)
    m2 = g.mean(dxh * xhat, -1, keep_dims=True)
    return rstd * (dxh - m1 - xhat * m2), xhat


@rule("group_norm")
def _group_norm(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    g = ctx.g
    x, gamma, beta = node.inputs
    n, c = x.shape[0], x.shape[1]
    groups = int(node.attrs["num_groups"])
    dims = list(x.shape)
    gam = g.reshape(gamma, [1, c, 1, 1])
    dxh = g.reshape(dy * gam, [n, groups, -1])
    dxr, xhat = _normalized_grad(ctx, g.reshape(x, [n, groups, -1]), node.attrs["eps"], dxh)
    out: list[Optional[Node]] = [g.reshape(dxr, dims) if ctx.needs(0) else None, None, None]
    if ctx.needs(1):
        out[1] = g.sum(dy * g.reshape(xhat, dims), [0, 2, 3])
    if ctx.needs(2):
        out[2] = g.sum(dy, [0, 2, 3])
    return out


@rule("layer_norm2d")
def _layer_norm2d(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    g = ctx.g
    x, gamma, _ = node.inputs
    to_last, back = [0, 2, 3, 1], [0, 3, 1, 2]
    need = (ctx.needs(0), ctx.needs(1), ctx.needs(2))
    xl, dyl = g.transpose(x, to_last), g.transpose(dy, to_last)
    gx, gg, gb = layer_norm_grads(ctx, xl, gamma, node.attrs["eps"], dyl, need)
    return [g.transpose(gx, back) if gx is not None else None, gg, gb]
