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
cumsum_backward, gather_backward, attention_backward, rope_backward,
max_pool2d_backward, conv2d_backward_input / weight, ada_layer_norm_backward,
gated_residual_backward (x rows grouped contiguously per modulation row),
scaled_mat_mul, dequant_grouped_mat_mul and the four gaussian_splat ops.
Anything else raises ``KeyError`` naming the op. ``scan_backward`` is
evaluated by :mod:`rlx.reference.scan_grad`.
"""

from __future__ import annotations

import numpy as np

from rlx.reference import Memory, misc, reference, sequence
from rlx.reference.hostops import OPS


def _scan(op: dict, xs: list, shape: dict):
    nc = op["num_carry"]
    ys = run_scan(
        op["body"], nc, op["length"], op.get("reverse", False), list(xs[:nc]), list(xs[nc:])
    )
    return ys


OPS["scan"] = _scan


def eval_op(op: dict, xs: list[np.ndarray], shape: dict) -> np.ndarray:
    """Evaluate one IR op on numpy operands; result shaped by ``shape``."""
    name = op["op"]
    fn = OPS.get(name)
    if fn is None:
        raise KeyError(f"[host_op] no numpy evaluation for IR op '{name}'")
    out = np.asarray(fn(op, xs, shape))
    return (
        out.reshape(misc.static_dims(shape))
        if out.size == int(np.prod(misc.static_dims(shape), dtype=np.int64))
        else out
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
                np.broadcast_to(v.reshape(()), misc.static_dims(node["shape"]))
                if v.size == 1
                else v.reshape(misc.static_dims(node["shape"]))
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
    """One IR op evaluated in numpy on the operand views (see the module doc).
    Takes the flat form or the thunk's serde form (``desc`` holding ``op``,
    ``inputs`` and ``output`` as ``(offset, shape)`` pairs)."""
    t = t.get("desc", t)
    xs = [misc.operand_view(mem, e) for e in t["inputs"]]
    out = misc.operand_view(mem, t["output"])
    op = t["op"]
    if op["op"] == "gated_delta_net":
        o, st = sequence.gated_delta_net_fn(*(v.astype(np.float64) for v in xs[:6]), op["heads"])
        xs[5][...] = st
        out[...] = o.reshape(out.shape)
        return
    out[...] = eval_op(op, xs, t["output"][-1]).reshape(out.shape)


@reference("scan_host")
def scan_host(t: dict, mem: Memory) -> None:
    """``Op::Scan`` with its body interpreted by :func:`eval_graph`. Takes the
    thunk's serde form (``desc`` holding ``operands``) or the flat one
    (``inputs`` at the top level)."""
    t = t.get("desc", t)
    views = [misc.operand_view(mem, e) for e in t.get("operands", t.get("inputs", []))]
    xs = [v.astype(np.float64) if v.dtype.kind == "f" else v for v in views]
    nc = int(t["num_carry"])
    y = run_scan(t["body"], nc, int(t["length"]), bool(t.get("reverse", False)), xs[:nc], xs[nc:])
    out = misc.operand_view(mem, t["output"])
    out[...] = y.reshape(out.shape)
