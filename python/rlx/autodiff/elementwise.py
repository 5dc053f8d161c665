"""VJP rules of the elementwise family: activations, binary ops, where,
cast, fma, SwiGLU. Broadcast operands get their gradient summed back over
the broadcast axes (:meth:`Ctx.sum_to`)."""

from __future__ import annotations

import math
from typing import Optional

from rlx.autodiff._core import Ctx, is_float, rule
from rlx.node import Node

_SQRT_2PI = math.sqrt(2.0 * math.pi)
_GELU_C = math.sqrt(2.0 / math.pi)


def act_grad(ctx: Ctx, kind: str, x: Node, y: Node, dy: Node, node: Node) -> Optional[Node]:
    """``dy · act'(x)`` for activation ``kind`` with ``y = act(x)``; ``None`` for
    ``round`` (zero almost everywhere)."""
    g = ctx.g
    if kind == "relu":
        return g.where(x > 0.0, dy, 0.0)
    if kind == "neg":
        return -dy
    if kind == "abs":
        sign = ctx.select(x > 0.0, 1.0, 0.0, x) - ctx.select(x < 0.0, 1.0, 0.0, x)
        return dy * sign
    if kind == "round":
        return None
    if kind == "sigmoid":
        return dy * y * (1.0 - y)
    if kind == "tanh":
        return dy * (1.0 - y * y)
    if kind == "exp":
        return dy * y
    if kind == "log":
        return dy / x
    if kind == "sqrt":
        return dy * 0.5 / y
    if kind == "rsqrt":
        return dy * (-0.5) * y * y * y
    if kind == "sin":
        return dy * g.cos(x)
    if kind == "cos":
        return -(dy * g.sin(x))
    if kind == "tan":
        return dy * (1.0 + y * y)
    if kind == "atan":
        return dy / (1.0 + x * x)
    if kind == "silu":
        s = g.sigmoid(x)
        return dy * s * (1.0 + x * (1.0 - s))
    if kind == "gelu":
        # gelu(x) = x·Φ(x): Φ(x) = gelu(x)/x (½ at 0), φ(x) = exp(-x²/2)/√(2π)
        is0 = g.eq(x, 0.0)
        cdf = g.where(is0, ctx.scalar(0.5, x), y / g.where(is0, ctx.scalar(1.0, x), x))
        pdf = g.exp(x * x * (-0.5)) * (1.0 / _SQRT_2PI)
        return dy * (cdf + x * pdf)
    if kind == "gelu_approx":
        t = g.tanh((x + x * x * x * 0.044715) * _GELU_C)
        inner = (1.0 + x * x * (3.0 * 0.044715)) * _GELU_C
        return dy * ((1.0 + t) * 0.5 + x * 0.5 * (1.0 - t * t) * inner)
    raise ctx.fail(node, f"no gradient for activation '{kind}'")


@rule("activation")
def _activation(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    (x,) = node.inputs
    return [act_grad(ctx, node.attrs["kind"], x, node, dy, node)]


@rule("binary")
def _binary(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    g = ctx.g
    a, b = node.inputs
    kind = node.attrs["kind"]
    ga: Optional[Node] = None
    gb: Optional[Node] = None
    na, nb = ctx.needs(0), ctx.needs(1)
    if kind == "add":
        ga, gb = (dy if na else None), (dy if nb else None)
    elif kind == "sub":
        ga, gb = (dy if na else None), (-dy if nb else None)
    elif kind == "mul":
        ga = dy * b if na else None
        gb = dy * a if nb else None
    elif kind == "div":
        ga = dy / b if na else None
        gb = -(dy * node / b) if nb else None
    elif kind in ("max", "min"):
        # ties split the gradient evenly (torch.maximum / minimum)
        win = g.gt(a, b) if kind == "max" else g.lt(a, b)
        tie = ctx.select(g.eq(a, b), 0.5, 0.0, dy)
        wa = g.where(win, ctx.scalar(1.0, dy), tie)
        ga = dy * wa if na else None
        gb = dy * (1.0 - wa) if nb else None
    elif kind == "pow":
        if na:
            ga = dy * b * g.pow(a, b - 1.0)
        if nb:
            pos = g.gt(a, 0.0)
            loga = g.where(pos, g.log(g.where(pos, a, 1.0)), 0.0)
            gb = dy * node * loga
    else:
        raise ctx.fail(node, f"no gradient for binary '{kind}'")
    return [
        ctx.like(ga, a) if ga is not None and is_float(a) else None,
        ctx.like(gb, b) if gb is not None and is_float(b) else None,
    ]


@rule("where")
def _where(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    g = ctx.g
    cond, a, b = node.inputs
    ga = ctx.like(g.where(cond, dy, 0.0), a) if ctx.needs(1) else None
    gb = ctx.like(g.where(cond, 0.0, dy), b) if ctx.needs(2) else None
    return [None, ga, gb]


@rule("cast")
def _cast(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    (x,) = node.inputs
    if node.attrs.get("trunc"):
        # rounding toward zero is piecewise constant: zero almost everywhere
        return [ctx.like(dy * 0.0, x)]
    return [dy if dy.dtype == x.dtype else ctx.g.cast(dy, x.dtype)]


@rule("fma")
def _fma(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    a, b, c = node.inputs
    return [
        ctx.like(dy * b, a) if ctx.needs(0) else None,
        ctx.like(dy * a, b) if ctx.needs(1) else None,
        ctx.like(dy, c) if ctx.needs(2) else None,
    ]


@rule("fused_swiglu")
def _swiglu(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    g = ctx.g
    (x,) = node.inputs
    n = x.shape[-1]
    if not isinstance(n, int):
        raise ctx.fail(node, "needs a static last dim")
    half = n // 2
    lo, hi = g.narrow(x, -1, 0, half), g.narrow(x, -1, half, half)
    gate, val = (lo, hi) if node.attrs["gate_first"] else (hi, lo)
    s = g.sigmoid(gate)
    d_val = dy * gate * s
    d_gate = dy * val * s * (1.0 + gate * (1.0 - s))
    parts = [d_gate, d_val] if node.attrs["gate_first"] else [d_val, d_gate]
    return [g.concat(parts, axis=-1)]


@rule("elementwise_region")
def _region(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    # recompute the chain with ordinary ops, then differentiate that chain
    from rlx.autodiff._core import grad

    g = ctx.g
    ins = node.inputs
    vals: list[Node] = []

    def operand(a: dict[str, int]) -> Node:
        return ins[a["input"]] if "input" in a else vals[a["step"]]

    for st in node.attrs["steps"]:
        kind = st["step"]
        if kind == "unary":
            vals.append(g.activation(operand(st["a"]), st["act"]))
        elif kind == "binary":
            vals.append(g.binary(operand(st["a"]), operand(st["b"]), st["kind"]))
        else:
            vals.append(g.cast(operand(st["a"]), st["to"]))
    want = [i for i in range(len(ins)) if ctx.needs(i)]
    grads = grad(g, vals[-1], [ins[i] for i in want], seed=dy)
    out: list[Optional[Node]] = [None] * len(ins)
    for i, gi in zip(want, grads):
        out[i] = gi
    return out
