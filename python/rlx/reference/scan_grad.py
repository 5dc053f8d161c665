"""``scan_backward`` in numpy: reverse-mode differentiation of a scan body.

The forward is ``Op::Scan`` without ``reverse``: step ``i`` runs the body on
the carries and slice ``i`` of every scanned operand and yields the new
carries and ``y_i``; ``y`` is stacked ``[length, ..]``. ``scan_backward``
takes ``[carry_init.., xs.., dy]`` and returns the gradient of
``Σ dy·y`` w.r.t. every initial carry (``wrt_xs`` false) or every scanned
operand, each flattened and concatenated in operand order.

The body is evaluated forward once per step (values kept), then each step's
vector-Jacobian product runs in reverse node order. Supported body ops
(:data:`VJP`): leaves, constants, binary add / sub / mul / div / max / min
(numpy broadcasting), activations (tanh, sigmoid, exp, log, neg, relu,
silu, sqrt, sin, cos, abs), mat_mul, fma, reshape, transpose, expand, narrow,
reduce sum / mean, cast between floats. Any other op raises ``KeyError``
naming it.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from rlx.reference.hostops import OPS

Vjp = Callable[[dict, list, np.ndarray, np.ndarray], list]


def _unbroadcast(g: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum ``g`` down to ``shape`` (the inverse of numpy broadcasting)."""
    while g.ndim > len(shape):
        g = g.sum(0)
    for ax, n in enumerate(shape):
        if n == 1 and g.shape[ax] != 1:
            g = g.sum(ax, keepdims=True)
    return g


def _binary(op: dict, xs: list, y: np.ndarray, g: np.ndarray) -> list:
    a, b = (np.asarray(v, np.float64) for v in xs)
    k = op["kind"]
    if k == "add":
        ga, gb = g, g
    elif k == "sub":
        ga, gb = g, -g
    elif k == "mul":
        ga, gb = g * b, g * a
    elif k == "div":
        ga, gb = g / b, -g * a / (b * b)
    elif k in ("max", "min"):
        pick = (a >= b) if k == "max" else (a <= b)
        ga, gb = np.where(pick, g, 0.0), np.where(pick, 0.0, g)
    else:
        raise KeyError(f"[scan_backward] no gradient for binary '{k}'")
    return [_unbroadcast(ga, a.shape), _unbroadcast(gb, b.shape)]


_ACT_D: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "tanh": lambda x, y: 1.0 - y * y,
    "sigmoid": lambda x, y: y * (1.0 - y),
    "exp": lambda x, y: y,
    "log": lambda x, y: 1.0 / x,
    "neg": lambda x, y: -np.ones_like(x),
    "relu": lambda x, y: (x > 0).astype(np.float64),
    "silu": lambda x, y: (s := 1.0 / (1.0 + np.exp(-x))) * (1.0 + x * (1.0 - s)),
    "sqrt": lambda x, y: 0.5 / y,
    "sin": lambda x, y: np.cos(x),
    "cos": lambda x, y: -np.sin(x),
    "abs": lambda x, y: np.sign(x),
}


def _activation(op: dict, xs: list, y: np.ndarray, g: np.ndarray) -> list:
    d = _ACT_D.get(op["kind"])
    if d is None:
        raise KeyError(f"[scan_backward] no gradient for activation '{op['kind']}'")
    return [g * d(np.asarray(xs[0], np.float64), y)]


def _matmul(op: dict, xs: list, y: np.ndarray, g: np.ndarray) -> list:
    a, b = (np.asarray(v, np.float64) for v in xs)
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    g2 = g.reshape(np.matmul(a2, b2).shape)
    ga = np.matmul(g2, np.swapaxes(b2, -1, -2))
    gb = np.matmul(np.swapaxes(a2, -1, -2), g2)
    ga = ga.reshape(a.shape) if a.ndim == 1 else _unbroadcast(ga, a.shape)
    gb = gb.reshape(b.shape) if b.ndim == 1 else _unbroadcast(gb, b.shape)
    return [ga, gb]


def _reduce(op: dict, xs: list, y: np.ndarray, g: np.ndarray) -> list:
    x = np.asarray(xs[0])
    axes = tuple(a % x.ndim for a in op["axes"]) or tuple(range(x.ndim))
    if op["kind"] not in ("sum", "mean"):
        raise KeyError(f"[scan_backward] no gradient for reduce '{op['kind']}'")
    if not op["keep_dims"]:
        g = np.expand_dims(g, axes)
    g = np.broadcast_to(g, x.shape)
    if op["kind"] == "mean":
        g = g / int(np.prod([x.shape[a] for a in axes]))
    return [g]


def _narrow(op: dict, xs: list, y: np.ndarray, g: np.ndarray) -> list:
    x = np.asarray(xs[0])
    out = np.zeros(x.shape)
    idx = [slice(None)] * x.ndim
    ax = op["axis"] % x.ndim
    idx[ax] = slice(op["start"], op["start"] + op["len"])
    out[tuple(idx)] = g
    return [out]


VJP: dict[str, Vjp] = {
    "narrow": _narrow,
    "binary": _binary,
    "activation": _activation,
    "mat_mul": _matmul,
    "reduce": _reduce,
    "fma": lambda op, xs, y, g: [
        _unbroadcast(g * xs[1], np.shape(xs[0])),
        _unbroadcast(g * xs[0], np.shape(xs[1])),
        _unbroadcast(g, np.shape(xs[2])),
    ],
    "reshape": lambda op, xs, y, g: [g.reshape(np.shape(xs[0]))],
    "transpose": lambda op, xs, y, g: [np.transpose(g, np.argsort(op["perm"]))],
    "expand": lambda op, xs, y, g: [_unbroadcast(g, np.shape(xs[0]))],
    # a trunc cast is piecewise constant: zero gradient
    "cast": lambda op, xs, y, g: [g * 0.0 if op.get("trunc") else g],
}


def _step(body: dict, args: list) -> list[np.ndarray]:
    """Every node's value of one body evaluation (args bind the leaves in order)."""
    from rlx.reference import misc
    from rlx.reference.interp import eval_op

    vals: list[np.ndarray] = []
    it = iter(args)
    for node in body["nodes"]:
        kind = node["op"]["op"]
        if kind in ("input", "state", "param"):
            vals.append(np.asarray(next(it), np.float64))
        elif kind == "constant":
            v = np.asarray(node["op"]["values"], np.float64)
            dims = misc.static_dims(node["shape"])
            vals.append(np.broadcast_to(v.reshape(()), dims) if v.size == 1 else v.reshape(dims))
        else:
            ins = [vals[i] for i in node["inputs"]]
            vals.append(np.asarray(eval_op(node["op"], ins, node["shape"]), np.float64))
    return vals


def _step_vjp(body: dict, vals: list, out_grads: list) -> list[np.ndarray]:
    """Gradients of the leaves (node order) given the outputs' gradients."""
    grads: list = [None] * len(vals)
    for o, g in zip(body["outputs"], out_grads):
        grads[o] = g if grads[o] is None else grads[o] + g
    leaves = []
    for i in range(len(vals) - 1, -1, -1):
        node = body["nodes"][i]
        kind = node["op"]["op"]
        g = grads[i]
        if kind in ("input", "state", "param"):
            continue
        if g is None or kind == "constant":
            continue
        vjp = VJP.get(kind)
        if vjp is None:
            raise KeyError(f"[scan_backward] no gradient for body op '{kind}'")
        ins = [vals[j] for j in node["inputs"]]
        for j, gj in zip(node["inputs"], vjp(node["op"], ins, vals[i], g)):
            gj = np.asarray(gj, np.float64).reshape(np.shape(vals[j]))
            grads[j] = gj if grads[j] is None else grads[j] + gj
    for i, node in enumerate(body["nodes"]):
        if node["op"]["op"] in ("input", "state", "param"):
            leaves.append(grads[i] if grads[i] is not None else np.zeros(np.shape(vals[i])))
    return leaves


def scan_backward(op: dict, xs: list, shape: dict) -> np.ndarray:
    """``OPS["scan_backward"]``: see the module doc."""
    body, nc, length = op["body"], int(op["num_carry"]), int(op["length"])
    ops = [np.asarray(v, np.float64) for v in xs]
    carries, seqs, dy = ops[:nc], ops[nc:-1], ops[-1]
    steps = []
    for i in range(length):
        vals = _step(body, carries + [x[i] for x in seqs])
        steps.append(vals)
        carries = [vals[o] for o in body["outputs"][:nc]]
    dc = [np.zeros_like(c) for c in ops[:nc]]
    dxs = [np.zeros_like(x) for x in seqs]
    for i in range(length - 1, -1, -1):
        leaves = _step_vjp(body, steps[i], dc + [dy[i]])
        dc = leaves[:nc]
        for x, gx in zip(dxs, leaves[nc:]):
            x[i] = gx
    parts = dxs if op.get("wrt_xs") else dc
    return np.concatenate([p.reshape(-1) for p in parts]) if parts else np.zeros(0)


OPS["scan_backward"] = scan_backward
