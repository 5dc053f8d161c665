"""VJP rules of reductions, softmax, softmax cross-entropy and cumsum."""

from __future__ import annotations

from typing import Optional

from rlx.autodiff._core import Ctx, rule
from rlx.node import Node


def _norm_axes(axes: list[int], rank: int) -> list[int]:
    return sorted({a + rank if a < 0 else a for a in axes}) if axes else list(range(rank))


def keep_dims_of(ctx: Ctx, y: Node, x: Node, axes: list[int], keep: bool) -> Node:
    """``y`` (a reduction of ``x`` over ``axes``) reshaped with the reduced axes as 1s."""
    if keep:
        return y
    dims = [1 if i in axes else d for i, d in enumerate(x.shape)]
    return ctx.g.reshape(y, dims)


def _mean_scale(ctx: Ctx, x: Node, axes: list[int]) -> Node:
    """``1 / count`` of the reduced elements: a constant, or computed at run
    time when a reduced dim is symbolic."""
    g = ctx.g
    n = 1
    for a in axes:
        d = x.shape[a]
        if not isinstance(d, int):
            ones = g.expand(ctx.scalar(1.0, x), list(x.shape))
            return 1.0 / g.sum(ones, axes, keep_dims=True)
        n *= d
    return ctx.scalar(1.0 / n, x)


@rule("reduce")
def _reduce(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    g = ctx.g
    (x,) = node.inputs
    at = node.attrs
    axes = _norm_axes(at["axes"], x.ndim)
    keep = bool(at["keep_dims"])
    dyk = keep_dims_of(ctx, dy, x, axes, keep)
    kind = at["kind"]
    if kind == "sum":
        return [g.expand(dyk, list(x.shape))]
    if kind == "mean":
        return [g.expand(dyk * _mean_scale(ctx, x, axes), list(x.shape))]
    yk = keep_dims_of(ctx, node, x, axes, keep)
    if kind in ("max", "min"):
        # ties share the gradient evenly (torch.amax / amin)
        hit = ctx.select(g.eq(x, yk), 1.0, 0.0, x)
        cnt = g.sum(hit, axes, keep_dims=True)
        return [hit * (dyk / cnt)]
    if kind == "prod":
        return [dyk * yk / x]
    raise ctx.fail(node, f"no gradient for reduce '{kind}'")


@rule("softmax")
def _softmax(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    g = ctx.g
    ax = node.attrs["axis"]
    s = g.sum(dy * node, ax, keep_dims=True)
    return [node * (dy - s)]


@rule("softmax_cross_entropy")
def _softmax_ce(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    g = ctx.g
    logits, labels = node.inputs
    d = dy if dy.dtype == logits.dtype else g.cast(dy, logits.dtype)
    if labels.dtype not in ("f16", "bf16", "f32", "f64"):
        if not ctx.needs(0):
            return [None, None]
        return [g.softmax_cross_entropy_backward(logits, labels, d), None]
    # soft targets t: loss = -Σ t·log_softmax(z); dz = dy·(softmax(z)·Σt − t)
    dcol = g.reshape(d, [d.shape[0], 1])
    gl = gt = None
    if ctx.needs(0):
        p = g.softmax(logits, -1)
        tsum = g.sum(labels, -1, keep_dims=True)
        gl = dcol * (p * tsum - labels)
    if ctx.needs(1):
        z = logits - g.max(logits, -1, keep_dims=True)
        lse = g.log(g.sum(g.exp(z), -1, keep_dims=True))
        gt = -(dcol * (z - lse))
    return [gl, gt]


@rule("cumsum")
def _cumsum(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    at = node.attrs
    return [ctx.g.cumsum_backward(dy, at["axis"], exclusive=bool(at["exclusive"]))]
