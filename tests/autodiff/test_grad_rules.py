"""Every VJP rule of :mod:`rlx.autodiff` against central finite differences.

Each case builds a forward ``f(inputs)``, projects it on a fixed random
tensor (``loss = Σ f·r``) and compares ``rlx.grad`` with central
differences (h = 1e-6), both evaluated in float64 by the numpy evaluator of
``_gradcheck`` (the ``*_backward`` ops too): every rule agrees to 1e-6
relative. The same gradients compiled for host and reference (f32) agree
with the float64 ones to 1e-4.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import rlx
from rlx.autodiff import GradError, NotDifferentiableError, differentiable_ops, grad
from rlx.reference import scan_grad

sys.path.insert(0, str(Path(__file__).parent))
from _gradcheck import HOST, TIGHT, _rng, check, evaluate, fd_grad, rel_err  # noqa: E402

ACTS = ["gelu", "gelu_approx", "silu", "relu", "sigmoid", "tanh", "exp", "sin", "cos",
        "atan", "neg", "abs"]  # fmt: skip


@pytest.mark.parametrize("kind", ACTS)
def test_activation(kind: str) -> None:
    check(lambda g, n: g.activation(n["x"], kind), {"x": [3, 5]}, ["x"])


@pytest.mark.parametrize("kind", ["log", "sqrt", "rsqrt", "tan"])
def test_activation_positive_domain(kind: str) -> None:
    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        return g.activation(n["x"] * 0.5 if kind == "tan" else n["x"], kind)

    check(build, {"x": [4, 3]}, ["x"], positive=("x",))


@pytest.mark.parametrize("kind", ["add", "sub", "mul", "div", "max", "min"])
def test_binary_broadcast(kind: str) -> None:
    # b broadcasts over a's leading axis and its own size-1 axis
    check(lambda g, n: g.binary(n["a"], n["b"], kind), {"a": [2, 3, 4], "b": [3, 1]},
          ["a", "b"], positive=("b",) if kind == "div" else ())  # fmt: skip


def test_pow_both_operands() -> None:
    check(lambda g, n: g.pow(n["a"], n["b"]), {"a": [3, 4], "b": [4]}, ["a", "b"],
          positive=("a",))  # fmt: skip


def test_where_fma_cast() -> None:
    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        w = g.where(n["a"] > 0.0, n["a"] * n["b"], n["b"])
        return g.cast(g.fma(w, n["a"], n["b"]), "f32")

    check(build, {"a": [3, 4], "b": [3, 4]}, ["a", "b"])


def test_elementwise_region() -> None:
    steps = [("mul", "x0", "x1"), ("tanh", "s0"), ("add", "s1", "x0"), ("exp", "s2"),
             ("div", "s3", "x1")]  # fmt: skip
    check(lambda g, n: g.elementwise_region([n["a"], n["b"]], steps), {"a": [3, 4], "b": [4]},
          ["a", "b"], positive=("b",))  # fmt: skip


@pytest.mark.parametrize("gate_first", [False, True])
def test_swiglu(gate_first: bool) -> None:
    check(lambda g, n: g.swiglu(n["x"], gate_first=gate_first), {"x": [3, 8]}, ["x"])


@pytest.mark.parametrize("sa,sb", [([3, 4], [4, 5]), ([2, 3, 4], [4, 5]), ([2, 3, 4], [2, 4, 5]),
                                   ([2, 1, 3, 4], [3, 4, 2]), ([4], [4, 5]), ([3, 4], [4]),
                                   ([4], [4])])  # fmt: skip
def test_matmul(sa: list[int], sb: list[int]) -> None:
    check(lambda g, n: n["a"] @ n["b"], {"a": sa, "b": sb}, ["a", "b"])


def test_matmul_transposed_operand_and_bias_act() -> None:
    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        return g.matmul_bias_act(n["a"], g.transpose(n["w"], [1, 0]), n["b"], act="gelu")

    check(build, {"a": [3, 4], "w": [5, 4], "b": [5]}, ["a", "w", "b"])


@pytest.mark.parametrize("scheme", ["f32", "q8_0"])
def test_dequant_matmul_input_gradient(scheme: str) -> None:
    # frozen quantised weights (LoRA's base): only x gets a gradient
    w = np.random.default_rng(3).standard_normal((5, 32)).astype(np.float32)
    codes = rlx.quantize(w, scheme) if scheme != "f32" else None

    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        if codes is None:
            wq = g.constant(w.view(np.uint8), dtype="u8")
            return g.dequant_matmul(n["x"], wq, scheme="f32", n=5, k=32)
        wq = g.constant(codes.w_q, dtype="u8")
        aux = [g.constant(a) for a in codes.aux]
        return g.dequant_matmul(n["x"], wq, *aux, scheme=codes.scheme, n=codes.n, k=codes.k)

    check(build, {"x": [3, 32]}, ["x"])


@pytest.mark.parametrize("scheme", ["q8_0", "q4_0"])
def test_dequant_matmul_t_gradient(scheme: str) -> None:
    # the transposed product d @ dequant(W) (LoRA's input gradient) is itself
    # differentiable in d: a second-order step through frozen packed weights
    w = np.random.default_rng(4).standard_normal((5, 64)).astype(np.float32)
    codes = rlx.quantize(w, scheme)

    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        wq = g.constant(codes.w_q, dtype="u8")
        return g.dequant_matmul_t(n["d"], wq, scheme=codes.scheme, k=codes.k, n=codes.n)

    check(build, {"d": [3, 5]}, ["d"])


@pytest.mark.parametrize("kind", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("axes,keep", [(None, False), ([1], False), ([0, 2], True), ([-1], True)])
def test_reduce(kind: str, axes: list[int] | None, keep: bool) -> None:
    check(lambda g, n: g.reduce(n["x"], kind, axes, keep_dims=keep), {"x": [2, 3, 4]}, ["x"])


def test_softmax_and_log_softmax_composite() -> None:
    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        x = n["x"]
        z = x - g.max(x, -1, keep_dims=True)
        logsm = z - g.log(g.sum(g.exp(z), -1, keep_dims=True))
        return g.softmax(x, 1) + logsm

    check(build, {"x": [3, 5]}, ["x"])


def test_soft_target_cross_entropy() -> None:
    check(lambda g, n: g.softmax_cross_entropy(n["z"], g.softmax(n["t"], -1)),
          {"z": [4, 6], "t": [4, 6]}, ["z", "t"])  # fmt: skip


def test_integer_label_cross_entropy_uses_backward_op() -> None:
    lab = np.array([0, 5, 2, 3], np.int32)
    check(lambda g, n: g.softmax_cross_entropy(n["z"], n["lab"]), {"z": [4, 6]}, ["z"],
          feeds_extra={"lab": lab})  # fmt: skip


def test_layer_norm_and_fused_residual_norms() -> None:
    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        a = g.layer_norm(n["x"], n["gm"], n["bt"], eps=1e-5)
        b = g.residual_layer_norm(n["x"], n["r2"], n["gm"], n["bt"], n["bs"])
        return a + b

    check(build, {"x": [2, 3, 6], "r2": [2, 3, 6], "gm": [6], "bt": [6], "bs": [6]},
          ["x", "r2", "gm", "bt", "bs"])  # fmt: skip


def test_group_norm_and_layer_norm2d() -> None:
    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        a = g.group_norm(n["x"], n["gm"], n["bt"], num_groups=2)
        return a + g.layer_norm2d(n["x"], n["gm"], n["bt"])

    check(build, {"x": [2, 4, 3, 2], "gm": [4], "bt": [4]}, ["x", "gm", "bt"])


def test_shape_ops() -> None:
    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        x = n["x"]  # [2, 3, 4]
        t = g.transpose(g.reshape(x, [6, 4]), [1, 0])  # [4, 6]
        e = g.expand(g.narrow(t, 0, 1, 2), [3, 2, 6])  # [3, 2, 6]
        c = g.concat([g.narrow(x, 2, 0, 2), g.reverse(x, 1)], axis=2)  # [2, 3, 6]
        return g.sum(e, 0) + g.sum(c, 1)  # [2, 6]

    check(build, {"x": [2, 3, 4]}, ["x"])


def test_embedding_gather_accumulates_repeated_rows() -> None:
    idx = np.array([[1, 3, 1], [0, 1, 4]], np.int32)
    check(lambda g, n: g.gather(n["tab"], n["idx"]) * 2.0, {"tab": [5, 3]}, ["tab"],
          feeds_extra={"idx": idx})  # fmt: skip


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(axis: int) -> None:
    idx = np.array([[[1, -1], [0, 2], [2, 2]], [[0, 0], [1, 1], [-2, 0]]], np.int32)
    if axis == 0:
        idx = np.clip(idx, -2, 1)
    check(lambda g, n: g.gather_elements(n["x"], n["idx"], axis), {"x": [2, 3, 3]}, ["x"],
          feeds_extra={"idx": idx})  # fmt: skip


def test_gather_nd() -> None:
    idx = np.array([[[0, 2], [1, -1]], [[0, 2], [1, 0]]], np.int32)
    check(lambda g, n: g.gather_nd(n["x"], n["idx"]), {"x": [2, 3, 4]}, ["x"],
          feeds_extra={"idx": idx})  # fmt: skip


def test_replace_scatters() -> None:
    nd_idx = np.array([[2], [0]], np.int32)
    el_idx = np.array(
        [[1, 0, 2], [2, 0, 1]], np.int32
    )  # no duplicates: replace order is unspecified

    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        a = g.scatter_nd(n["x"], n["ndi"], n["u"])  # rows 2 and 0 of x replaced
        return g.scatter_elements(a, n["eli"], n["v"], 1)

    check(build, {"x": [3, 3], "u": [2, 3], "v": [2, 3]}, ["x", "u", "v"],
          feeds_extra={"ndi": nd_idx, "eli": el_idx})  # fmt: skip


def test_scatter_add_and_resize() -> None:
    idx = np.array([2, 0, 2], np.int32)

    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        s = g.scatter_add(n["u"], n["idx"], 4)  # [4, 2, 2, 3]
        return g.resize_nearest2x(s)

    check(build, {"u": [3, 2, 2, 3]}, ["u"], feeds_extra={"idx": idx})


def test_param_used_twice_gets_the_sum() -> None:
    check(lambda g, n: g.tanh(n["w"] @ n["w"]) + n["w"] * n["w"], {"w": [3, 3]}, ["w"])


# ------------------------------------------------------- backward-op rules
def test_gather_axis_backward_op() -> None:
    idx = np.array([2, 0, 2, 1], np.int32)
    check(lambda g, n: g.gather_axis(n["x"], n["idx"], 1), {"x": [2, 3, 2]}, ["x"],
          feeds_extra={"idx": idx})  # fmt: skip


def test_cumsum_backward_op() -> None:
    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        return g.cumsum(n["x"], 1) + g.cumsum(n["x"], -1, exclusive=True)

    check(build, {"x": [2, 4, 3]}, ["x"])


def test_rms_norm_backward_op() -> None:
    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        return g.rms_norm(n["x"], n["gm"], eps=1e-5) + g.rms_norm(n["x"], n["gm"], n["bt"])

    check(build, {"x": [2, 3, 8], "gm": [8], "bt": [8]}, ["x", "gm", "bt"])


ATTN_CASES = [
    ("causal", 2, None),
    ("none", 1, None),
    ("sliding_window", 2, 0.3),
    ("causal", 4, None),
]


@pytest.mark.parametrize("mask,kvh,scale", ATTN_CASES)
def test_attention_backward_op(mask: str, kvh: int, scale: float | None) -> None:
    heads, d = 4, 4

    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        win = 2 if mask == "sliding_window" else 0
        return g.attention(n["q"], n["k"], n["v"], heads=heads, kv_heads=kvh, mask=mask,
                           window=win, score_scale=scale)  # fmt: skip

    check(build, {"q": [1, 5, heads * d], "k": [1, 5, kvh * d], "v": [1, 5, kvh * d]},
          ["q", "k", "v"])  # fmt: skip


def test_fused_attention_block_with_rope() -> None:
    ang = _rng().uniform(0, 3, (4, 2))
    extra = {"cos": np.cos(ang).astype(np.float32), "sin": np.sin(ang).astype(np.float32)}

    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        return g.fused_attention_block(n["x"], n["wqkv"], n["wo"], heads=2, cos=n["cos"],
                                       sin=n["sin"])  # fmt: skip

    check(build, {"x": [1, 4, 6], "wqkv": [6, 24], "wo": [8, 6]}, ["x", "wqkv", "wo"],
          feeds_extra=extra)  # fmt: skip


def test_rope_backward_op() -> None:
    rng = _rng()
    ang = rng.uniform(0, 3, (4, 2))
    extra = {"cos": np.cos(ang).astype(np.float32), "sin": np.sin(ang).astype(np.float32)}

    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        return g.rope(n["x"], n["cos"], n["sin"], head_dim=4)

    check(build, {"x": [1, 4, 8]}, ["x"], feeds_extra=extra)


def test_conv2d_and_max_pool_backward_ops() -> None:
    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        y = g.conv2d(n["x"], n["w"], n["b"], stride=1, padding=1)
        return g.max_pool2d(y, 2)

    check(build, {"x": [1, 2, 4, 4], "w": [3, 2, 3, 3], "b": [3]}, ["x", "w", "b"])  # fmt: skip


@pytest.mark.parametrize("kernel,stride,pad", [(2, 2, 0), (3, 2, 1), (3, 1, 1)])
def test_avg_pool2d(kernel: int, stride: int, pad: int) -> None:
    check(lambda g, n: g.avg_pool2d(n["x"], kernel, stride=stride, padding=pad),
          {"x": [1, 2, 5, 4]}, ["x"])  # fmt: skip


@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
def test_fft(inverse: bool, norm: str) -> None:
    check(lambda g, n: g.fft(n["x"], inverse=inverse, norm=norm), {"x": [2, 8]}, ["x"])


def test_log_mel_backward_op() -> None:
    filt = np.abs(np.random.default_rng(2).standard_normal((3, 5))).astype(np.float32)
    check(lambda g, n: g.log_mel(n["spec"], n["filt"], n_fft=8), {"spec": [2, 16]}, ["spec"],
          feeds_extra={"filt": filt})  # fmt: skip


def test_spd_bi_map() -> None:
    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        xs = (n["x"] + g.transpose(n["x"], [0, 2, 1])) * 0.5  # the op checks symmetry
        return g.spd("bi_map", xs, n["w"])

    check(build, {"x": [2, 3, 3], "w": [3, 2]}, ["x", "w"])


def test_spd_log_eig_directional() -> None:
    """Eigen-function ops see only symmetric inputs: compare ⟨∇, V⟩ with the
    central difference along a symmetric direction V."""
    rng = _rng()
    a = rng.standard_normal((2, 3, 3))
    x0 = a @ a.transpose(0, 2, 1) + 3 * np.eye(3)
    v = rng.standard_normal((2, 3, 3))
    v = v + v.transpose(0, 2, 1)
    r = rng.standard_normal((2, 3, 3))
    g = rlx.Graph("spd")
    x, rr = g.input("x", [2, 3, 3]), g.input("r", [2, 3, 3])
    loss = g.sum(g.spd("log_eig", x) * rr)
    (dx,) = grad(g, loss, [x])
    g.outputs(loss, dx)
    got = float((evaluate(g, {"x": x0, "r": r})[1] * v).sum())
    h = 1e-6
    fp = float(evaluate(g, {"x": x0 + h * v, "r": r})[0])
    fm = float(evaluate(g, {"x": x0 - h * v, "r": r})[0])
    want = (fp - fm) / (2 * h)
    assert abs(got - want) <= TIGHT * max(abs(want), 1.0)


@pytest.mark.parametrize("kernel,stride,pad,dil", [(2, 1, 0, 1), (3, 2, 1, 1), (2, 1, 1, 2)])
def test_im2col(kernel: int, stride: int, pad: int, dil: int) -> None:
    check(lambda g, n: g.im2col(n["x"], kernel, stride=stride, padding=pad, dilation=dil),
          {"x": [1, 2, 5, 4]}, ["x"])  # fmt: skip


def test_grouped_matmul() -> None:
    e = np.array([1, 0, 2, 1], np.int32)
    check(lambda g, n: g.grouped_matmul(n["x"], n["w"], n["e"]), {"x": [4, 3], "w": [3, 3, 2]},
          ["x", "w"], feeds_extra={"e": e})  # fmt: skip


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn"])
@pytest.mark.parametrize("layers,bidir,carry", [(1, False, False), (2, True, False),
                                                (1, False, True), (2, True, True)])  # fmt: skip
def test_recurrent_unrolled(kind: str, layers: int, bidir: bool, carry: bool) -> None:
    """With ``carry`` the loss also reads the final h (and c) rows."""
    hid, n_in, dirs = 3, 2, 2 if bidir else 1
    gates = {"lstm": 4, "gru": 3, "rnn": 1}[kind]
    in_w = n_in if layers == 1 else max(n_in, dirs * hid)
    ld = layers * dirs
    shapes = {"x": [2, 3, n_in], "wi": [ld, gates * hid, in_w], "wh": [ld, gates * hid, hid],
              "b": [ld, gates * hid], "h0": [ld, 2, hid]}  # fmt: skip
    if kind == "lstm":
        shapes["c0"] = [ld, 2, hid]
    if kind == "gru":
        shapes["bh"] = [ld, gates * hid]

    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        kw = dict(hidden=hid, num_layers=layers, bidirectional=bidir, carry=carry)
        if kind == "lstm":
            return g.lstm(n["x"], n["wi"], n["wh"], n["b"], n["h0"], n["c0"], **kw)
        if kind == "gru":
            return g.gru(n["x"], n["wi"], n["wh"], n["b"], n["bh"], n["h0"], **kw)
        return g.rnn(n["x"], n["wi"], n["wh"], n["b"], n["h0"], **kw)

    check(build, shapes, list(shapes), directional=True)


def test_conv_transpose2d() -> None:
    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        return g.conv_transpose2d(n["x"], n["w"], n["b"], stride=2, padding=1, output_padding=1,
                                  groups=2)  # fmt: skip

    check(build, {"x": [1, 4, 3, 3], "w": [4, 1, 3, 3], "b": [2]}, ["x", "w", "b"])  # fmt: skip


def test_gated_residual_and_ada_layer_norm_backward_ops() -> None:
    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        a = g.ada_layer_norm(n["x"], n["sc"], n["sh"])
        return g.gated_residual(a, n["y"], n["gt"])

    shapes = {"x": [2, 3, 4], "sc": [2, 1, 4], "sh": [2, 1, 4], "y": [2, 3, 4], "gt": [2, 1, 4]}
    check(build, shapes, list(shapes))


def _sym_graph(seq: int | str) -> rlx.Graph:
    g = rlx.Graph("sym")
    x = g.input("x", [seq, 8])
    w, b, gm = g.param("w", [8, 4]), g.param("b", [4]), g.param("gm", [4])
    h = g.layer_norm(g.gelu(x @ w + b), gm, b)
    y = g.softmax(h, -1) * g.reshape(g.narrow(h, 1, 1, 3), [-1, 3])[:, 0:1]
    loss = g.mean(g.sum(y, -1) * g.rsqrt(g.sum(x * x, -1) + 1.0))
    g.outputs(loss, *grad(g, loss, [w, b, gm, x]))
    return g


def test_symbolic_dims_compile() -> None:
    """A backward graph over a symbolic ``seq`` (the mean over it divides by a
    run-time count) compiled for seq = 5 matches the static graph in float64."""
    rng = _rng()
    p = {"w": rng.standard_normal((8, 4)), "b": rng.standard_normal(4),
         "gm": rng.standard_normal(4)}  # fmt: skip
    x = rng.random((5, 8))
    exe = rlx.compile(_sym_graph("seq"), device="host", dims={"seq": 5})
    for k, v in p.items():
        exe.set_param(k, v.astype(np.float32))
    got = list(exe.run(x=x.astype(np.float32)).values())
    want = evaluate(_sym_graph(5), {**p, "x": x})
    for a, b in zip(got, want):
        assert rel_err(a, b) <= HOST


def test_scan_values() -> None:
    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        body = rlx.Graph("body")
        c, x = body.input("c", [2]), body.input("x", [2])
        nc = body.tanh(c * 0.5 + x)
        body.outputs(nc, nc * x)
        return g.scan(body, [n["c0"]], [n["xs"]])

    check(build, {"c0": [2], "xs": [3, 2]}, ["c0", "xs"])


def test_reversed_scan_values() -> None:
    """A reversed scan (from the last slot) with two scanned operands."""

    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        body = rlx.Graph("body")
        c, x, w = body.input("c", [2]), body.input("x", [2]), body.input("w", [2])
        nc = body.tanh(c * w + x)
        body.outputs(nc, nc * x + c)
        return g.scan(body, [n["c0"]], [n["xs"], n["ws"]], reverse=True)

    check(build, {"c0": [2], "xs": [4, 2], "ws": [4, 2]}, ["c0", "xs", "ws"])


# Backpropagation through time as scans (rlx.autodiff.scan): each case
# against float64 central differences of a numpy forward written out here
def _scan_np(nc: int, rev: bool, v: dict) -> np.ndarray:
    """The scans of :func:`_scan_graph` in numpy (float64)."""
    cs = [v["c0"]] + ([v["m0"]] if nc == 2 else [])
    steps = len(v["xs"])
    ys: list = [None] * steps
    for i in range(steps - 1, -1, -1) if rev else range(steps):
        x = v["xs"][i]
        if nc == 1:
            (c,) = cs
            h = np.tanh(0.5 * c + np.sin(x))
            cs, ys[i] = [h], np.outer(h, x)
        else:
            c, m = cs
            h = np.tanh(c * x + 0.25 * m.sum(0))
            m = 0.75 * m + np.outer(v["ws"][i], h)
            cs, ys[i] = [h, m], m * x
    return np.stack(ys)


def _scan_graph(g: rlx.Graph, n: dict, nc: int, rev: bool) -> rlx.Node:
    """One carry (``y`` an outer product ``[3, 3]``) or two of different
    ranks over two scanned operands (``y`` ``[2, 3]``)."""
    b = rlx.Graph("body")
    c = b.input("c", [3])
    if nc == 1:
        x = b.input("x", [3])
        h = b.tanh(c * 0.5 + b.sin(x))
        b.outputs(h, b.reshape(h, [3, 1]) * b.reshape(x, [1, 3]))
        return g.scan(b, [n["c0"]], [n["xs"]], reverse=rev)
    m, x, w = b.input("m", [2, 3]), b.input("x", [3]), b.input("w", [2])
    h = b.tanh(c * x + b.sum(m, 0) * 0.25)
    m2 = m * 0.75 + b.reshape(w, [2, 1]) * b.reshape(h, [1, 3])
    b.outputs(h, m2, m2 * x)
    return g.scan(b, [n["c0"], n["m0"]], [n["xs"], n["ws"]], reverse=rev)


def _old_scan_grads(g: rlx.Graph, y: rlx.Node, dy: rlx.Node, wrt: list[rlx.Node]) -> list:
    """The same gradients through ``scan_backward``, built as the rule did
    before (reversed scans as forward scans of flipped operands)."""
    at, ins = y.attrs, list(y.inputs)
    nc, rev = at["num_carry"], at["reverse"]
    if rev:
        ins[nc:], dy = [g.reverse(x, 0) for x in ins[nc:]], g.reverse(dy, 0)
    out = {}
    for wrt_xs, span in ((False, range(nc)), (True, range(nc, len(ins)))):
        op = {"op": "scan_backward", "body": at["body"], "num_carry": nc,
              "length": at["length"], "wrt_xs": wrt_xs}  # fmt: skip
        packed, start = g.apply(op, *ins, dy), 0
        for i in span:
            n = int(np.prod(ins[i].shape))
            gi = g.reshape(g.narrow(packed, 0, start, n), list(ins[i].shape))
            out[y.inputs[i].id] = g.reverse(gi, 0) if rev and i >= nc else gi
            start += n
    return [out[w.id] for w in wrt]


def _scan_grads(nc: int, rev: bool, wrt: list[str], old: bool = False) -> rlx.Graph:
    shapes = {"c0": [3], "xs": [4, 3]}
    if nc == 2:
        shapes.update(m0=[2, 3], ws=[4, 2])
    g = rlx.Graph("scan_grad")
    n = {k: g.input(k, s) for k, s in shapes.items()}
    y = _scan_graph(g, n, nc, rev)
    r = g.input("r", list(y.shape))
    wn = [n[k] for k in wrt]
    g.outputs(*(_old_scan_grads(g, y, r, wn) if old else grad(g, g.sum(y * r), wn)))
    return g


@pytest.mark.parametrize("wrt", ["carries", "xs", "both"])
@pytest.mark.parametrize("rev", [False, True])
@pytest.mark.parametrize("nc", [1, 2])
def test_scan_bptt(nc: int, rev: bool, wrt: str) -> None:
    """The gradient on device="reference" (f32 buffers, bodies in float64)
    within 1e-6 of central differences in float64 at the same (f32) inputs;
    the host's within 1e-5 of it, with no thunk on the numpy fallback; the
    old ``scan_backward`` route within 1e-6 of it."""
    carries = ["c0", "m0"][:nc]
    names = {"carries": carries, "xs": ["xs", "ws"][:nc], "both": carries + ["xs"]}[wrt]
    g = _scan_grads(nc, rev, names)
    assert not [x for x in g.nodes if x.op == "scan_backward"]
    rng = _rng()
    feeds = {x.name: rng.standard_normal(x.shape).astype(np.float32) for x in g.nodes
             if x.op == "input"}  # fmt: skip
    v64 = {k: a.astype(np.float64) for k, a in feeds.items()}
    ref = list(rlx.compile(g, device="reference").run(**feeds).values())
    for name, got in zip(names, ref):
        want = fd_grad(lambda a, k=name: float((_scan_np(nc, rev, {**v64, k: a}) * v64["r"]).sum()),
                       v64[name])  # fmt: skip
        assert rel_err(got, want) <= TIGHT, (name, rel_err(got, want))
    exe = rlx.compile(g, device="host")
    host = list(exe.run(**feeds).values())
    assert exe.stats["fallback_by_thunk"] == {}, exe.stats["fallback_by_thunk"]
    assert exe.stats["by_thunk"]["scan_host"] == 3  # forward, recording, reverse
    old = list(rlx.compile(_scan_grads(nc, rev, names, old=True), device="reference")
               .run(**feeds).values())  # fmt: skip
    for name, a, h, o in zip(names, ref, host, old):
        assert rel_err(h, a) <= 1e-5, (name, rel_err(h, a))
        assert rel_err(o, a) <= TIGHT, (name, rel_err(o, a))


def _native_grads(build: Callable, shapes: dict, wrt: list[str]) -> None:
    """``check`` (float64 differences, host / reference), then the host
    gradient graph runs without a numpy fallback."""
    check(build, shapes, wrt)
    g = rlx.Graph("n")
    n = {k: g.input(k, s) for k, s in shapes.items()}
    y = build(g, n)
    g.outputs(*grad(g, g.sum(y * y), [n[k] for k in wrt]))
    exe = rlx.compile(g, device="host")
    exe.run(**{k: _rng().standard_normal(s).astype(np.float32) for k, s in shapes.items()})
    assert exe.stats["fallback_by_thunk"] == {}, exe.stats["fallback_by_thunk"]


def test_scan_bptt_without_carries_and_shared_cotangents() -> None:
    """No carry: one reverse scan; ``add`` handing both carries the same
    cotangent node (bound once per body output); a rank-0 carry."""

    def no_carry(g: rlx.Graph, n: dict) -> rlx.Node:
        b = rlx.Graph("b")
        x = b.input("x", [2, 3])
        b.outputs(b.tanh(x) * b.sum(x, -1, keep_dims=True))
        return g.scan(b, [], [n["xs"]])

    def shared(g: rlx.Graph, n: dict) -> rlx.Node:
        b = rlx.Graph("b")
        c, d, s, x = b.input("c", [2]), b.input("d", [2]), b.input("s", []), b.input("x", [2])
        t = c + d
        b.outputs(b.tanh(t), t * x, s * 0.5 + b.sum(t), b.sin(t) * s)
        return g.scan(b, [n["c0"], n["d0"], n["s0"]], [n["xs"]], reverse=True)

    _native_grads(no_carry, {"xs": [3, 2, 3]}, ["xs"])
    _native_grads(shared, {"c0": [2], "d0": [2], "s0": [], "xs": [4, 2]},
                  ["c0", "d0", "s0", "xs"])  # fmt: skip


def test_scan_bptt_falls_back_to_scan_backward() -> None:
    """An integer carry (a step counter) cannot join the saved float
    carries: the rule emits ``scan_backward``, still right."""

    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        b = rlx.Graph("b")
        c, k, x = b.input("c", [2]), b.input("k", [], "i32"), b.input("x", [2])
        h = b.tanh(c + x * b.cast(k, "f32") * 0.5)
        b.outputs(h, k + 1, h * x)
        return g.scan(b, [n["c0"], n["k0"]], [n["xs"]])

    check(build, {"c0": [2], "xs": [3, 2]}, ["xs"], feeds_extra={"k0": np.array(1, np.int32)})
    g = rlx.Graph("f")
    xs = g.input("xs", [3, 2])
    y = build(g, {"c0": g.input("c0", [2]), "k0": g.input("k0", [], "i32"), "xs": xs})
    grad(g, g.sum(y), [xs])
    assert [x.attrs["wrt_xs"] for x in g.nodes if x.op == "scan_backward"] == [True]


def test_scan_body_without_rule_is_named() -> None:
    """Every op the numpy ``scan_backward`` differentiates has an rlx rule, so
    a body rlx cannot differentiate raises at ``grad`` (no fallback)."""
    assert set(scan_grad.VJP) <= set(differentiable_ops())
    b = rlx.Graph("b")
    c, x = b.input("c", [1, 3, 2]), b.input("x", [1, 3, 2])
    h = b.selective_scan(c, x, b.constant(np.ones((2, 2), np.float32)), x, x)
    b.outputs(h, h * x)
    g = rlx.Graph("e")
    c0 = g.input("c0", [1, 3, 2])
    y = g.scan(b, [c0], [g.input("xs", [2, 1, 3, 2])])
    with pytest.raises(NotDifferentiableError,
                       match=r"\[grad\] scan \(node %2 .*body.*selective_scan"):  # fmt: skip
        grad(g, g.sum(y), [c0])


# ------------------------------------------------------------------ errors
def test_integer_wrt_is_a_grad_error() -> None:
    g = rlx.Graph("e")
    i = g.input("i", [3], "i32")
    x = g.input("x", [3])
    loss = g.sum(x * g.cast(i, "f32"))
    with pytest.raises(GradError, match=r"\[grad\] wrt %0 'i' \(input\) is i32"):
        grad(g, loss, [i])
    assert isinstance(GradError("x"), rlx.RlxError)


def test_op_without_rule_is_named() -> None:
    g = rlx.Graph("e")
    x = g.input("x", [1, 2, 4, 4])
    loss = g.sum(g.reduce(x, "min", [1]) * 2.0 + g.cast(g.argmin(x, 1), "f32"))
    grad(g, loss, [x])  # argmin is an integer path: no error
    g2 = rlx.Graph("e2")
    x2 = g2.input("x", [1, 3, 2])
    ins = [g2.input(n, sh) for n, sh in (("d", [1, 3, 2]), ("a", [2, 2]), ("b", [1, 3, 2]),
                                          ("c", [1, 3, 2]))]  # fmt: skip
    loss2 = g2.sum(g2.selective_scan(x2, *ins))
    with pytest.raises(NotDifferentiableError, match=r"\[grad\] selective_scan \(node %5"):
        grad(g2, loss2, [x2])


def test_integer_paths_carry_no_gradient_and_unused_wrt_is_zero() -> None:
    g = rlx.Graph("z")
    x = g.input("x", [4])
    u = g.input("u", [2, 2])
    top = g.cast(g.argmax(x, 0), "f32")  # an integer path: no gradient, no error
    loss = g.sum(x * x) + top
    dx, du = grad(g, loss, [x, u])
    g.outputs(dx, du)
    xv = np.array([1.0, -2.0, 3.0, 0.5])
    got = evaluate(g, {"x": xv, "u": np.ones((2, 2))})
    np.testing.assert_allclose(got[0], 2 * xv, rtol=1e-12)
    np.testing.assert_array_equal(got[1], np.zeros((2, 2)))


def test_seed_and_intermediate_wrt() -> None:
    g = rlx.Graph("seed")
    x = g.input("x", [3])
    h = g.tanh(x)
    y = h * h
    s = g.input("s", [3])
    dx, dh = grad(g, y, [x, h], seed=s)
    g.outputs(dx, dh)
    xv, sv = np.array([0.3, -1.0, 2.0]), np.array([1.0, 2.0, -0.5])
    got = evaluate(g, {"x": xv, "s": sv})
    t = np.tanh(xv)
    np.testing.assert_allclose(got[1], 2 * t * sv, rtol=1e-12)
    np.testing.assert_allclose(got[0], 2 * t * (1 - t * t) * sv, rtol=1e-12)
    with pytest.raises(GradError, match="seed shape"):
        grad(g, y, [x], seed=g.input("bad", [2]))


def test_rule_table_covers_the_families() -> None:
    ops = set(differentiable_ops())
    for op in ["activation", "binary", "mat_mul", "reduce", "softmax", "softmax_cross_entropy",
               "layer_norm", "rms_norm", "attention", "rope", "conv2d", "pool2d", "gather",
               "gather_axis", "cumsum", "concat", "narrow", "transpose", "reshape",
               "gaussian_splat_render", "gaussian_splat_prepare", "gaussian_splat_rasterize",
               "axial_rope2d", "scaled_mat_mul", "scaled_quant_scale",
               "scaled_dequantize", "dequant_grouped_mat_mul"]:  # fmt: skip
        assert op in ops
