"""VJP rules of the recurrent nets (LSTM, GRU, Elman RNN): the IR has no
backward op for them, so the rule unrolls the forward over time with
ordinary ops (the packing of ``Op::Lstm``'s doc) and differentiates that
(backpropagation through time). The graph grows with ``seq · layers ·
directions``: meant for short sequences."""

from __future__ import annotations

from typing import Optional

from rlx.autodiff._core import Ctx, grad, rule
from rlx.node import Node

GATES = {"lstm": 4, "gru": 3, "rnn": 1}


def _slot(ctx: Ctx, t: Node, i: int) -> Node:
    """Row ``i`` of a stacked ``[L·dirs, ..]`` operand."""
    g = ctx.g
    return g.reshape(g.narrow(t, 0, i, 1), list(t.shape[1:]))


def _cell(
    ctx: Ctx,
    kind: str,
    relu: bool,
    xw: Node,
    h: Node,
    c: Optional[Node],
    w_hh: Node,
    b_hh: Optional[Node],
    hidden: int,
) -> tuple[Node, Optional[Node]]:
    """One time step: ``xw`` is ``x_t W_ihᵀ + bias`` ``[b, G·hidden]``."""
    g = ctx.g
    hw = h @ g.transpose(w_hh, [1, 0])
    if kind == "rnn":
        z = xw + hw
        return (g.relu(z) if relu else g.tanh(z)), None
    if kind == "lstm":
        z = xw + hw
        i, f, gg, o = (g.narrow(z, 1, k * hidden, hidden) for k in range(4))
        assert c is not None
        c = g.sigmoid(f) * c + g.sigmoid(i) * g.tanh(gg)
        return g.sigmoid(o) * g.tanh(c), c
    # gru: b_hh stays inside the reset gate's product for n
    assert b_hh is not None
    hw = hw + b_hh
    xr, xz, xn = (g.narrow(xw, 1, k * hidden, hidden) for k in range(3))
    hr, hz, hn = (g.narrow(hw, 1, k * hidden, hidden) for k in range(3))
    r, zg = g.sigmoid(xr + hr), g.sigmoid(xz + hz)
    n = g.tanh(xn + r * hn)
    return (1.0 - zg) * n + zg * h, None


def _unroll(ctx: Ctx, node: Node) -> Node:
    """The net's output recomputed with ordinary ops, with the ``carry``
    rows (each layer's final h, then for the LSTM each layer's final c)
    appended along the sequence axis when the op has them."""
    g = ctx.g
    kind = node.op
    at = node.attrs
    ins = node.inputs
    x = ins[0]
    hidden, layers = int(at["hidden"]), int(at["num_layers"])
    dirs = 2 if at["bidirectional"] else 1
    b, s, n_in = (int(d) for d in x.shape)
    if kind == "lstm":
        w_ih, w_hh, bias, h0, c0 = ins[1:6]
        b_hh = None
    elif kind == "gru":
        w_ih, w_hh, bias, b_hh, h0 = ins[1:6]
        c0 = None
    else:
        w_ih, w_hh, bias, h0 = ins[1:5]
        b_hh = c0 = None
    inp = x
    width = n_in
    final_h: list[Node] = []
    final_c: list[Node] = []
    for layer in range(layers):
        outs = []
        hs: list[Node] = []
        cs: list[Node] = []
        for d in range(dirs):
            sl = layer * dirs + d
            wi = g.narrow(_slot(ctx, w_ih, sl), 1, 0, width)
            xw = g.reshape(g.reshape(inp, [b * s, width]) @ g.transpose(wi, [1, 0]),
                           [b, s, -1]) + _slot(ctx, bias, sl)  # fmt: skip
            wh = _slot(ctx, w_hh, sl)
            bh = _slot(ctx, b_hh, sl) if b_hh is not None else None
            h = _slot(ctx, h0, sl)
            c = _slot(ctx, c0, sl) if c0 is not None else None
            steps: list[Optional[Node]] = [None] * s
            for t in range(s) if d == 0 else range(s - 1, -1, -1):
                xt = g.reshape(g.narrow(xw, 1, t, 1), [b, -1])
                h, c = _cell(ctx, kind, bool(at.get("relu")), xt, h, c, wh, bh, hidden)
                steps[t] = g.reshape(h, [b, 1, hidden])
            outs.append(g.concat([st for st in steps if st is not None], axis=1))
            hs.append(h)
            if c is not None:
                cs.append(c)
        inp = outs[0] if dirs == 1 else g.concat(outs, axis=2)
        width = dirs * hidden
        final_h.append(_row(ctx, hs))
        if cs:
            final_c.append(_row(ctx, cs))
    if not node.attrs.get("carry"):
        return inp
    return g.concat([inp, *final_h, *final_c], axis=1)


def _row(ctx: Ctx, per_dir: list[Node]) -> Node:
    """One carry row ``[b, 1, dirs·hidden]`` from each direction's ``[b, hidden]``."""
    g = ctx.g
    h = per_dir[0] if len(per_dir) == 1 else g.concat(per_dir, axis=1)
    return g.reshape(h, [int(h.shape[0]), 1, int(h.shape[1])])


@rule("lstm", "gru", "rnn")
def _recurrent(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    if not all(isinstance(d, int) for d in node.inputs[0].shape):
        raise ctx.fail(node, "needs a static input shape")
    ins = node.inputs
    want = [i for i in range(len(ins)) if ctx.needs(i)]
    out: list[Optional[Node]] = [None] * len(ins)
    for i, gi in zip(want, grad(ctx.g, _unroll(ctx, node), [ins[i] for i in want], seed=dy)):
        out[i] = gi
    return out
