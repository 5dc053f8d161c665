"""VJP rule of the generic ``scan``: backpropagation through time written as
two more ``scan`` ops, so the gradient runs wherever a forward scan runs
(on the host, the native ``scan_host`` kernel compiles each body once and
runs it per step, when every thunk of the body is native).

For ``y = scan(body, carry_init, xs)`` (``length`` steps) and the cotangent
``dy``:

1. A *recording* scan: the body with its ``y`` replaced by the step's
   incoming carries, flattened and concatenated → ``[length, C]``: the
   carries every step saw, as saved activations.
2. A scan in the opposite direction whose carries are the carry cotangents
   (zeros at the start) and whose scanned operands are the saved carries,
   the ``xs`` and ``dy``. Its body recomputes the original body from the
   saved carries and applies the body's vector-Jacobian product, built by
   :func:`rlx.autodiff.grad` with ``seed=`` (the concatenated outputs
   seeded with the concatenated carry cotangents and ``dy``). Its new carries are
   the cotangents of the incoming carries; its ``y`` is the requested
   ``xs`` cotangents then the incoming-carry cotangents, flattened and
   concatenated. A scan returns only its stacked ``y``, so the gradient of
   ``carry_init`` is read from the slot of the last step processed (slot 0,
   or ``length − 1`` for a reversed scan).

Cost: the body's forward runs three times per step (the forward scan, the
recording, the recomputation inside the VJP); the saved carries take
``length · C`` values.

Where this cannot be expressed (see :func:`_bptt`), the rule falls back to
the ``scan_backward`` op (a numpy ``HostOp``), which stays as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from rlx._types import Dim
from rlx.autodiff._core import Ctx, NotDifferentiableError, grad, rule
from rlx.graph import Graph
from rlx.node import Node


def _numel(dims: Sequence[Dim]) -> Optional[int]:
    """Element count of static ``dims``; ``None`` if one is symbolic."""
    n = 1
    for d in dims:
        if not isinstance(d, int):
            return None
        n *= d
    return n


def _ancestors(body: dict[str, Any], roots: Sequence[int]) -> set[int]:
    """Body node ids the nodes ``roots`` depend on (themselves included)."""
    seen = set(roots)
    stack = list(roots)
    while stack:
        for j in body["nodes"][stack.pop()]["inputs"]:
            if j not in seen:
                seen.add(j)
                stack.append(j)
    return seen


def _inline(
    dst: Graph, body: dict[str, Any], leaves: Sequence[Node], roots: Sequence[int]
) -> dict[int, Node]:
    """Copy the body nodes ``roots`` depend on into ``dst``, its ``input``
    leaves bound in node order to ``leaves``; returns body id → node."""
    keep = _ancestors(body, roots)
    vals: dict[int, Node] = {}
    it = iter(leaves)
    for i, n in enumerate(body["nodes"]):
        if n["op"]["op"] == "input":
            vals[i] = next(it)
        elif i in keep:
            vals[i] = dst._add(n["op"], [vals[j] for j in n["inputs"]], n["name"])
    return vals


def _flat(g: Graph, parts: Sequence[Node]) -> Node:
    """``parts`` flattened and concatenated (one rank-1 node)."""
    flat = [p if p.ndim == 1 else g.reshape(p, [_numel(p.shape)]) for p in parts]
    return flat[0] if len(flat) == 1 else g.concat(flat, 0)


def _outputs(g: Graph, nodes: Sequence[Node]) -> None:
    """Declare ``nodes`` the outputs of body ``g``, a repeated node replaced by
    a same-shape reshape of it: the native ``scan_host`` does not take one
    node bound to two outputs (e.g. ``add``'s rule hands both operands the
    same cotangent)."""
    seen: set[int] = set()
    outs = []
    for n in nodes:
        outs.append(g.reshape(n, list(n.shape)) if n.id in seen else n)
        seen.add(n.id)
    g.outputs(*outs)


def _unflat(
    g: Graph, x: Node, axis: int, shapes: Sequence[Sequence[Dim]], start: int = 0
) -> list[Node]:
    """The inverse of :func:`_flat` along ``axis`` of ``x`` from ``start``
    (leading axes of ``x`` kept in front of each shape)."""
    lead = list(x.shape[:axis])
    out = []
    for s in shapes:
        n = _numel(s)
        assert n is not None
        part = x if n == x.shape[axis] else g.narrow(x, axis, start, n)
        out.append(part if list(s) == [n] and axis == 0 else g.reshape(part, lead + list(s)))
        start += n
    return out


def _bptt(ctx: Ctx, node: Node, dy: Node) -> Optional[list[Optional[Node]]]:
    """The gradient as a recording scan and a reverse scan (module doc), or
    ``None`` where that form does not apply and the rule falls back to
    ``scan_backward``:

    - a carry, a scanned operand that needs a gradient, or ``y`` differ in
      dtype (the saved carries and the packed cotangents are one
      concatenation each), or a carry is not a float;
    - an operand, ``y`` or a body value has a symbolic dim (the fallback
      then raises its error as before);
    - the body has ``param`` / ``state`` leaves (no scan operand binds them).

    A body whose own gradient needs an op without a VJP rule raises
    :class:`NotDifferentiableError` here rather than falling back: the
    ``scan_backward`` numpy VJP covers a subset of the ops rlx's rules
    cover (tests/autodiff/test_grad_rules.py checks it), so the fallback
    would only defer the same failure from ``grad`` to the first run.
    """
    g = ctx.g
    at = node.attrs
    body = at["body"]
    nc, length, rev = int(at["num_carry"]), int(at["length"]), bool(at.get("reverse"))
    ins = node.inputs
    carries, xs = ins[:nc], ins[nc:]
    need_x = [j for j in range(len(xs)) if ctx.needs(nc + j)]
    need_c = any(ctx.needs(k) for k in range(nc))
    dt = node.dtype
    if any(x.dtype != dt for x in [*carries, *(xs[j] for j in need_x)]):
        return None
    if any(_numel(n["shape"]["dims"]) is None for n in body["nodes"]):
        return None
    if any(_numel(x.shape) is None for x in ins) or _numel(node.shape) is None:
        return None
    if any(n["op"]["op"] in ("param", "state") for n in body["nodes"]):
        return None
    c_shapes = [list(c.shape) for c in carries]
    x_shapes = [list(x.shape[1:]) for x in xs]
    outs = body["outputs"]
    base = node.name or f"scan_{node.id}"

    # 1. the carries each step saw
    rec = None
    if nc:
        rb = Graph(f"{base}_record")
        leaves = [rb.input(f"c{k}", s, dt) for k, s in enumerate(c_shapes)]
        leaves += [rb.input(f"x{j}", s, x.dtype) for j, (s, x) in enumerate(zip(x_shapes, xs))]
        vals = _inline(rb, body, leaves, outs[:nc])
        _outputs(rb, [*(vals[o] for o in outs[:nc]), _flat(rb, leaves[:nc])])
        rec = g.scan(rb, carries, xs, length=length, reverse=rev, name=f"{base}_record")

    # 2. the body's VJP, run backwards over the steps
    vb = Graph(f"{base}_vjp")
    dcs = [vb.input(f"dc{k}", s, dt) for k, s in enumerate(c_shapes)]
    saved = vb.input("carries", [_numel(rec.shape[1:])], dt) if rec is not None else None
    x_in = [vb.input(f"x{j}", s, x.dtype) for j, (s, x) in enumerate(zip(x_shapes, xs))]
    dy_in = vb.input("dy", list(node.shape[1:]), dt)
    cs = _unflat(vb, saved, 0, c_shapes) if saved is not None else []
    vals = _inline(vb, body, cs + x_in, outs)
    wrt = cs + [x_in[j] for j in need_x]
    try:
        gs = grad(vb, _flat(vb, [vals[o] for o in outs]), wrt, seed=_flat(vb, [*dcs, dy_in]))
    except NotDifferentiableError as e:
        raise ctx.fail(node, f"its body is not differentiable: {e}") from None
    d_c, d_x = gs[:nc], gs[nc:]
    _outputs(vb, [*d_c, _flat(vb, d_x + (d_c if need_c else []))])
    zeros = [ctx.zeros(s, dt) for s in c_shapes]
    scanned = ([rec] if rec is not None else []) + list(xs) + [dy]
    ys = g.scan(vb, zeros, scanned, length=length, reverse=not rev, name=f"{base}_vjp")

    out: list[Optional[Node]] = [None] * len(ins)
    for j, gx in zip(need_x, _unflat(g, ys, 1, [x_shapes[j] for j in need_x])):
        out[nc + j] = gx
    if need_c:
        start = sum(_numel(x_shapes[j]) or 0 for j in need_x)
        last = g.reshape(g.narrow(ys, 0, length - 1 if rev else 0, 1), list(ys.shape[1:]))
        for k, gc in enumerate(_unflat(g, last, 0, c_shapes, start)):
            out[k] = gc if ctx.needs(k) else None
    return out


def _via_scan_backward(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    """``scan_backward`` once for the carries and once for the scanned
    operands (each only when needed); each result is a flat concatenation,
    split back here. A reversed scan (step ``i`` reads and writes slot
    ``length − 1 − i``) is the forward scan of the operands flipped along
    axis 0 with ``y`` flipped back, so its gradient is ``scan_backward`` over
    the flipped operands and the flipped ``dy``, the operands' gradients
    flipped back."""
    g = ctx.g
    at = node.attrs
    ins = list(node.inputs)
    nc = int(at["num_carry"])
    rev = bool(at.get("reverse"))
    if rev:
        ins[nc:] = [g.reverse(x, 0) for x in ins[nc:]]
        dy = g.reverse(dy, 0)
    out: list[Optional[Node]] = [None] * len(ins)
    for wrt_xs, span in ((False, range(nc)), (True, range(nc, len(ins)))):
        if not any(ctx.needs(i) for i in span):
            continue
        op = {"op": "scan_backward", "body": at["body"], "num_carry": nc,
              "length": at["length"], "wrt_xs": wrt_xs}  # fmt: skip
        packed = g.apply(op, *ins, dy)
        start = 0
        for i in span:
            x = ins[i]
            n = _numel(x.shape)
            if n is None:
                d = next(d for d in x.shape if not isinstance(d, int))
                raise ctx.fail(node, f"scan operand with symbolic dim {d!r}")
            if ctx.needs(i):
                gi = g.reshape(g.narrow(packed, 0, start, n), list(x.shape))
                out[i] = g.reverse(gi, 0) if rev and i >= nc else gi
            start += n
    return out


@rule("scan")
def _scan(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    """Backpropagation through time as two scans (module doc); the
    ``scan_backward`` op where :func:`_bptt` does not apply."""
    out = _bptt(ctx, node, dy)
    return out if out is not None else _via_scan_backward(ctx, node, dy)
