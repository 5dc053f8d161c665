"""``scan_host`` and ``host_op``: a small numpy interpreter for IR ops and graphs.

IR ops arrive as their serde JSON (``{"op": "binary", "kind": "add"}``);
graphs as ``Graph`` JSON (``{"name", "nodes": [{"op", "inputs", "shape",
"name"}], "outputs"}``).

``host_op``: ``t = {"op": <IR op>, "inputs": [[off, len, shape]...],
"output": [off, len, shape]}``. The op is evaluated on the operand views and
the result stored in the output's dtype. ``gated_delta_net`` also writes its
final state back into the state operand.

``scan_host``: ``t = {"body": <Graph>, "num_carry", "length", "reverse",
"inputs": [carry_init.., xs..], "output": y}``. The body's ``input`` /
``state`` / ``param`` nodes bind, in node order, to the carries then one
slice (along axis 0) of each ``xs``; its outputs are the new carries then
``y``. ``y`` is stacked ``[length, ..]`` in step order's position (with
``reverse``, step ``i`` reads and writes slot ``length − 1 − i``).

Supported ops (:data:`OPS`): leaves, activation, binary, compare, where,
cast, fma, elementwise_region, fused_swiglu, mat_mul, fused_mat_mul_bias_act,
reshape, transpose, expand, narrow, concat, reduce, softmax, cumsum, gather,
gather_axis, and the ops of this part's thunk families: dequant_mat_mul
(GGUF), scaled_quantize / dequantize / quant_scale, selective_scan, mamba2,
gated_delta_net, lstm, gru, rnn, scan, fft, log_mel, log_mel_backward,
welch_peaks, rng_normal / rng_uniform (per-op seed required), vq_assign, spd,
spd_backward, custom, softmax_cross_entropy_backward, rms_norm_backward,
cumsum_backward, gather_backward.
Anything else raises ``KeyError`` naming the op. Not covered:
``scan_backward`` (needs autodiff of the body).
"""

from __future__ import annotations

import math

import numpy as np

from rlx.reference import Memory, misc, quant, reference, rng, sequence, signal
from rlx.reference import backward as bwd
from rlx.reference.gguf_blocks import dequantize_rows

_ACT = {
    "gelu": lambda x: 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0))),
    "gelu_approx": quant.gelu_tanh,
    "silu": quant.silu,
    "relu": lambda x: np.maximum(x, 0),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "neg": np.negative,
    "abs": np.abs,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "atan": np.arctan,
    "round": np.rint,
}
_BIN = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": lambda a, b: (
        np.trunc(a / b).astype(np.result_type(a, b))
        if np.issubdtype(np.result_type(a, b), np.integer)
        else a / b
    ),
    "max": np.maximum,
    "min": np.minimum,
    "pow": np.power,
}
_CMP = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}
_RED = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod}


def _dims(shape: dict) -> tuple[int, ...]:
    return misc.static_dims(shape)


def _axis(a: int, rank: int) -> int:
    return a + rank if a < 0 else a


def _region(op: dict, xs: list, shape: dict):
    vals: list[np.ndarray] = []
    get = lambda o: xs[o["input"]] if "input" in o else vals[o["step"]]  # noqa: E731
    for st in op["steps"]:
        if st["step"] == "unary":
            vals.append(_ACT[st["act"]](get(st["a"])))
        elif st["step"] == "binary":
            vals.append(_BIN[st["kind"]](get(st["a"]), get(st["b"])))
        else:
            vals.append(np.asarray(get(st["a"])).astype(misc.np_dtype(st["to"])))
    return vals[-1]


def _swiglu(op: dict, xs: list, shape: dict):
    x = xs[0]
    n = x.shape[-1] // 2
    a, b = x[..., :n], x[..., n:]
    return quant.silu(a) * b if op["gate_first"] else a * quant.silu(b)


def _reduce(op: dict, xs: list, shape: dict):
    x = xs[0]
    axes = tuple(_axis(a, x.ndim) for a in op["axes"]) or None
    return _RED[op["kind"]](x, axis=axes, keepdims=op["keep_dims"])


def _softmax(op: dict, xs: list, shape: dict):
    x = xs[0]
    e = np.exp(x - x.max(axis=op["axis"], keepdims=True))
    return e / e.sum(axis=op["axis"], keepdims=True)


def _cumsum(op: dict, xs: list, shape: dict):
    c = np.cumsum(xs[0], axis=op["axis"])
    return c - xs[0] if op["exclusive"] else c


def _narrow(op: dict, xs: list, shape: dict):
    x = xs[0]
    ax = _axis(op["axis"], x.ndim)
    return np.take(x, np.arange(op["start"], op["start"] + op["len"]), axis=ax)


def _gather_backward(op: dict, xs: list, shape: dict):
    dy, idx = xs
    ax = _axis(op["axis"], dy.ndim)
    out = np.zeros(_dims(shape))
    i = np.asarray(idx, np.int64)
    i = np.where(i < 0, i + op["axis_dim"], i)
    np.add.at(out, (slice(None),) * ax + (i,), dy)
    return out


def _recurrent(kind: str):
    def f(op: dict, xs: list, shape: dict):
        x = xs[0]
        if kind == "gru":
            x, w_ih, w_hh, b_ih, b_hh, h0 = xs
            c0 = None
        else:
            x, w_ih, w_hh, b_ih, h0 = xs[:5]
            b_hh, c0 = None, (xs[5] if kind == "lstm" else None)
        L, H = op["num_layers"], op["hidden"]
        D = 2 if op["bidirectional"] else 1
        h0 = np.asarray(h0).reshape(L * D, x.shape[0], H)
        c0 = None if c0 is None else np.asarray(c0).reshape(L * D, x.shape[0], H)
        return sequence.recurrent_fn(
            kind,
            x,
            np.ravel(w_ih),
            np.asarray(w_hh).reshape(L * D, -1, H),
            np.asarray(b_ih).reshape(L * D, -1),
            None if b_hh is None else np.asarray(b_hh).reshape(L * D, -1),
            h0,
            c0,
            H,
            L,
            op["bidirectional"],
            op["carry"],
            op.get("relu", False),
        )

    return f


def _rng(kind: str):
    def f(op: dict, xs: list, shape: dict):
        if op.get("seed") is None:
            raise KeyError(
                f"[host_op] {kind} without a per-op seed needs the graph key; lower it to its thunk"
            )
        key = int(rng.splitmix64(np.uint64(op["seed"])))
        n = int(np.prod(_dims(shape), dtype=np.int64))
        i = np.arange(n, dtype=np.uint64)
        if kind == "rng_normal":
            v = np.float32(op["mean"]) + np.float32(op["scale"]) * rng.normal_at(key, i)
        else:
            v = np.float32(op["low"]) + (
                np.float32(op["high"]) - np.float32(op["low"])
            ) * rng.uniform_at(key, i)
        return v.reshape(_dims(shape))

    return f


def _dequant_mm(op: dict, xs: list, shape: dict):
    sch = op["scheme"]
    w = dequantize_rows(
        np.asarray(xs[1], np.uint8).reshape(op["n"], -1), quant.gguf_type(sch), op["k"]
    )
    return np.asarray(xs[0], np.float64) @ w.astype(np.float64).T


def _scaled(kind: str):
    def f(op: dict, xs: list, shape: dict):
        lay, fmt = op["layout"], op["fmt"]
        x = xs[0]
        r, c = x.shape[0], x.shape[1]
        if kind == "scaled_quant_scale":
            a = np.abs(np.asarray(x, np.float64))
            if lay == "per_tensor":
                amax = a.max().reshape(1)
            elif lay == "per_row":
                amax = a.max(1)
            else:
                size = int(lay["block"]["size"])
                nb = -(-c // size)
                p = np.zeros((r, nb * size))
                p[:, :c] = a
                amax = p.reshape(r, nb, size).max(2)
            return np.where(amax == 0, 1.0, amax / quant.FORMAT_MAX[fmt])
        s = quant.expand_scale(xs[1], lay, r, c).astype(np.float32)
        if kind == "scaled_quantize":
            with np.errstate(divide="ignore", invalid="ignore"):
                return quant.encode_scaled((np.asarray(x, np.float32) / s).astype(np.float32), fmt)
        return quant.decode_scaled(x, fmt).astype(np.float32) * s

    return f


def _custom(op: dict, xs: list, shape: dict):
    fn = misc.CUSTOM_OPS.get(op["name"])
    if fn is None:
        raise KeyError(f"[host_op] no custom op registered under '{op['name']}'")
    out = np.zeros(_dims(op["out"]), misc.np_dtype(op["out"]["dtype"]))
    fn(list(xs), out, b"")
    return out


def _scan(op: dict, xs: list, shape: dict):
    nc = op["num_carry"]
    ys = run_scan(
        op["body"], nc, op["length"], op.get("reverse", False), list(xs[:nc]), list(xs[nc:])
    )
    return ys


def _sce_backward(op: dict, xs: list, shape: dict):
    z, lab, dl = (np.asarray(v) for v in xs)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    lab = lab.astype(np.int64)
    ok = (lab >= 0) & (lab < z.shape[1])
    p[np.nonzero(ok)[0], lab[ok]] -= 1.0
    return np.where(ok[:, None], p * dl[:, None], 0.0)


OPS = {
    "activation": lambda op, xs, s: _ACT[op["kind"]](xs[0]),
    "binary": lambda op, xs, s: _BIN[op["kind"]](xs[0], xs[1]),
    "compare": lambda op, xs, s: _CMP[op["kind"]](xs[0], xs[1]),
    "where": lambda op, xs, s: np.where(np.asarray(xs[0]) != 0, xs[1], xs[2]),
    "cast": lambda op, xs, s: (
        np.trunc(xs[0]).astype(misc.np_dtype(op["to"]))
        if op["to"][0] in "iub" and np.issubdtype(np.asarray(xs[0]).dtype, np.floating)
        else np.asarray(xs[0]).astype(misc.np_dtype(op["to"]))
    ),
    "fma": lambda op, xs, s: xs[0] * xs[1] + xs[2],
    "elementwise_region": _region,
    "fused_swiglu": _swiglu,
    "mat_mul": lambda op, xs, s: np.matmul(xs[0], xs[1]),
    "fused_mat_mul_bias_act": lambda op, xs, s: (
        _ACT[op["act"]] if op.get("act") else (lambda v: v)
    )(np.matmul(xs[0], xs[1]) + xs[2]),
    "reshape": lambda op, xs, s: np.reshape(xs[0], _dims(s)),
    "transpose": lambda op, xs, s: np.transpose(xs[0], op["perm"]),
    "expand": lambda op, xs, s: np.broadcast_to(xs[0], _dims(s)),
    "narrow": _narrow,
    "concat": lambda op, xs, s: np.concatenate(xs, axis=op["axis"]),
    "reduce": _reduce,
    "softmax": _softmax,
    "cumsum": _cumsum,
    "gather": lambda op, xs, s: np.take(xs[0], np.asarray(xs[1], np.int64), axis=0),
    "gather_axis": lambda op, xs, s: np.take(xs[0], np.asarray(xs[1], np.int64), axis=op["axis"]),
    "dequant_mat_mul": _dequant_mm,
    "scaled_quantize": _scaled("scaled_quantize"),
    "scaled_dequantize": _scaled("scaled_dequantize"),
    "scaled_quant_scale": _scaled("scaled_quant_scale"),
    "selective_scan": lambda op, xs, s: sequence.selective_scan_fn(
        *(np.asarray(v, np.float64) for v in xs)
    ),
    "mamba2": lambda op, xs, s: sequence.mamba2_fn(
        *(np.asarray(v, np.float64) for v in xs), op["heads"], op["head_dim"]
    ),
    "lstm": _recurrent("lstm"),
    "gru": _recurrent("gru"),
    "rnn": _recurrent("rnn"),
    "scan": _scan,
    "fft": lambda op, xs, s: signal.fft_block_fn(
        np.asarray(xs[0]).reshape(-1, xs[0].shape[-1]),
        xs[0].shape[-1] // 2,
        op["inverse"],
        {"backward": 0, "ortho": 1, "forward": 2}[op["norm"]],
        False,
    ).reshape(xs[0].shape),
    "log_mel": lambda op, xs, s: signal.log_mel_fn(xs[0], xs[1], op["n_fft"]),
    "log_mel_backward": lambda op, xs, s: signal.log_mel_backward_fn(
        xs[0], xs[1], xs[2], op["n_fft"]
    ),
    "welch_peaks": lambda op, xs, s: signal.welch_peaks_fn(
        xs[0], op["n_fft"], op["n_segments"], op["k"]
    ),
    "rng_normal": _rng("rng_normal"),
    "rng_uniform": _rng("rng_uniform"),
    "vq_assign": lambda op, xs, s: misc.vq_assign_fn(
        xs[0], xs[1], {"l2": 0, "dot": 1, "cosine": 2}[op["metric"]]
    ),
    "spd": lambda op, xs, s: misc.spd_forward(op["kind"], float(op.get("eps", 0.0)), list(xs)),
    "spd_backward": lambda op, xs, s: misc.spd_backward(
        op["kind"], float(op.get("eps", 0.0)), list(xs[:-1]), xs[-1]
    ),
    "custom": _custom,
    "softmax_cross_entropy_backward": _sce_backward,
    "rms_norm_backward": lambda op, xs, s: bwd.rms_norm_backward_fn(
        np.asarray(xs[0], np.float64).reshape(-1, xs[0].shape[-1]),
        np.asarray(xs[1], np.float64),
        np.asarray(xs[-1], np.float64).reshape(-1, xs[0].shape[-1]),
        op["eps"],
    )[{"input": 0, "gamma": 1, "beta": 2}[op["wrt"]]],
    "cumsum_backward": lambda op, xs, s: np.flip(
        _cumsum(op, [np.flip(xs[0], op["axis"])], s), op["axis"]
    ),
    "gather_backward": _gather_backward,
}


def _gdn(op: dict, xs: list, s: dict):
    o, _ = sequence.gated_delta_net_fn(
        *(np.asarray(v, np.float64) for v in xs[:5]), np.asarray(xs[5], np.float64), op["heads"]
    )
    return o


OPS["gated_delta_net"] = _gdn


def eval_op(op: dict, xs: list[np.ndarray], shape: dict) -> np.ndarray:
    """Evaluate one IR op on numpy operands; result shaped by ``shape``."""
    name = op["op"]
    fn = OPS.get(name)
    if fn is None:
        raise KeyError(f"[host_op] no numpy evaluation for IR op '{name}'")
    out = np.asarray(fn(op, xs, shape))
    return (
        out.reshape(_dims(shape)) if out.size == int(np.prod(_dims(shape), dtype=np.int64)) else out
    )


def eval_graph(graph: dict, args: list[np.ndarray]) -> list[np.ndarray]:
    """Run a graph: ``input`` / ``state`` / ``param`` nodes bind ``args`` in node order."""
    vals: list[np.ndarray] = []
    it = iter(args)
    for node in graph["nodes"]:
        op = node["op"]
        kind = op["op"]
        if kind in ("input", "state", "param"):
            vals.append(np.asarray(next(it)))
        elif kind == "constant":
            v = np.asarray(op["values"], np.float64).astype(misc.np_dtype(node["shape"]["dtype"]))
            vals.append(
                np.broadcast_to(v, _dims(node["shape"]))
                if v.size == 1
                else v.reshape(_dims(node["shape"]))
            )
        else:
            vals.append(eval_op(op, [vals[i] for i in node["inputs"]], node["shape"]))
    return [vals[i] for i in graph["outputs"]]


def run_scan(
    body: dict, num_carry: int, length: int, reverse: bool, carries: list, xs: list
) -> np.ndarray:
    """Loop ``body`` ``length`` times; returns ``y`` stacked ``[length, ..]``."""
    ys: list[np.ndarray | None] = [None] * length
    for i in range(length):
        slot = length - 1 - i if reverse else i
        outs = eval_graph(body, list(carries) + [np.asarray(x)[slot] for x in xs])
        carries = outs[:num_carry]
        ys[slot] = outs[num_carry]
    return np.stack(ys) if length else np.zeros((0,))


@reference("host_op")
def host_op(t: dict, mem: Memory) -> None:
    """One IR op evaluated in numpy on the operand views (see the module doc)."""
    xs = [misc.operand_view(mem, e) for e in t["inputs"]]
    out = misc.operand_view(mem, t["output"])
    op = t["op"]
    if op["op"] == "gated_delta_net":
        o, st = sequence.gated_delta_net_fn(*(v.astype(np.float64) for v in xs[:6]), op["heads"])
        xs[5][...] = st
        out[...] = o.reshape(out.shape)
        return
    out[...] = eval_op(op, xs, t["output"][2]).reshape(out.shape)


@reference("scan_host")
def scan_host(t: dict, mem: Memory) -> None:
    """``Op::Scan`` with its body interpreted by :func:`eval_graph`."""
    views = [misc.operand_view(mem, e) for e in t["inputs"]]
    xs = [v.astype(np.float64) if v.dtype.kind == "f" else v for v in views]
    nc = int(t["num_carry"])
    y = run_scan(t["body"], nc, int(t["length"]), bool(t.get("reverse", False)), xs[:nc], xs[nc:])
    out = misc.operand_view(mem, t["output"])
    out[...] = y.reshape(out.shape)
