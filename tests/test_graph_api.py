"""One accepted call per rlx.Graph method, asserting the result shape and
dtype against what numpy (or the op's documented semantics) gives."""

from __future__ import annotations

import json

import numpy as np
import pytest
import rlx
from rlx import Graph, Node

ACTS = [
    "gelu", "gelu_approx", "silu", "relu", "sigmoid", "tanh", "exp", "log", "sqrt",
    "rsqrt", "neg", "abs", "sin", "cos", "tan", "atan", "round",
]  # fmt: skip


def check(n: Node, shape: tuple, dtype: str) -> None:
    assert isinstance(n, Node)
    assert n.shape == shape, (n, shape)
    assert n.dtype == dtype, (n, dtype)


def np_shape(*shapes: tuple) -> tuple:
    return np.broadcast_shapes(*shapes)


# ------------------------------------------------------------------ leaves
def test_leaves(g: Graph) -> None:
    x = g.input("x", [2, "seq", 8])
    check(x, (2, "seq", 8), "f32")
    assert x.op == "input" and x.name == "x"
    p = g.param("w", (8, 4), "f16")
    check(p, (8, 4), "f16")
    assert p.op == "param"
    s = g.state("kv", [1, 16], np.int32)
    check(s, (1, 16), "i32")
    assert s.op == "state"


def test_constant(g: Graph) -> None:
    check(g.constant(1.5), (), "f32")
    check(g.constant([1, 2, 3]), (3,), "i32")
    check(g.constant([True, False]), (2,), "bool")
    check(g.constant(np.zeros((2, 3), np.float16)), (2, 3), "f16")
    check(g.constant(0.0, dtype="bf16", shape=[4, 4]), (4, 4), "bf16")
    c = g.constant([[1.0, 2.0], [3.0, 4.0]], dtype=np.float64)
    check(c, (2, 2), "f64")
    assert c.attrs["values"] == [1.0, 2.0, 3.0, 4.0]
    with pytest.raises(rlx.ShapeError, match=r"\[constant\]"):
        g.constant([1.0, 2.0, 3.0], shape=[2, 2])
    with pytest.raises(rlx.GraphError, match=r"\[constant\]"):
        g.constant([1.0, float("nan")])


# ------------------------------------------------------------- elementwise
@pytest.mark.parametrize("act", ACTS)
def test_activation_methods(g: Graph, act: str) -> None:
    x = g.input("x", [2, "seq", 8], "f16")
    y = getattr(g, act)(x)
    check(y, (2, "seq", 8), "f16")
    assert y.op == "activation" and y.attrs == {"kind": act}


@pytest.mark.parametrize(
    "method,kind",
    [("add", "add"), ("sub", "sub"), ("mul", "mul"), ("div", "div"),
     ("maximum", "max"), ("minimum", "min"), ("pow", "pow")],
)  # fmt: skip
def test_binary_methods(g: Graph, method: str, kind: str) -> None:
    a = g.input("a", [2, 1, 4])
    b = g.input("b", [3, 1])
    y = getattr(g, method)(a, b)
    check(y, np_shape((2, 1, 4), (3, 1)), "f32")
    assert y.attrs == {"kind": kind}


def test_binary_promotes_dtype(g: Graph) -> None:
    a = g.input("a", [4], "f16")
    b = g.input("b", [4], "i32")
    check(g.add(a, b), (4,), "f16")
    check(g.add(a, g.input("c", [4], "bf16")), (4,), "f32")


@pytest.mark.parametrize("kind", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_compare_methods(g: Graph, kind: str) -> None:
    a = g.input("a", [5, 1])
    b = g.input("b", [1, 6])
    y = getattr(g, kind)(a, b)
    check(y, (5, 6), "bool")
    assert y.op == "compare" and y.attrs == {"kind": kind}
    check(getattr(a, kind)(0.5), (5, 1), "bool")


def test_where_cast_fma(g: Graph) -> None:
    c = g.input("c", [3, 1], "bool")
    a = g.input("a", [1, 4], "f16")
    b = g.input("b", [4], "f32")
    check(g.where(c, a, b), (3, 4), "f32")
    check(g.where(c, a, 0.0), (3, 4), "f16")
    check(g.cast(a, "int32"), (1, 4), "i32")
    check(g.cast(a, np.float64), (1, 4), "f64")
    check(g.fma(a, b, g.input("d", [2, 1, 1], "f16")), (2, 1, 4), "f32")


def test_elementwise_region(g: Graph) -> None:
    a = g.input("a", [2, 8])
    b = g.input("b", [8])
    y = g.elementwise_region([a, b], [("mul", "x0", "x1"), ("exp", "s0"), ("cast", "f16", "s1")])
    check(y, (2, 8), "f16")
    assert y.attrs["steps"][0] == {
        "step": "binary", "kind": "mul", "a": {"input": 0}, "b": {"input": 1}
    }  # fmt: skip
    z = g.elementwise_region([a], [{"step": "unary", "act": "tanh", "a": {"input": 0}}])
    check(z, (2, 8), "f32")


def test_swiglu(g: Graph) -> None:
    x = g.input("x", [2, "seq", 16])
    check(g.swiglu(x), (2, "seq", 8), "f32")
    check(g.swiglu(x, gate_first=True), (2, "seq", 8), "f32")


# ------------------------------------------------------------------ matmul
def test_matmul(g: Graph) -> None:
    a = g.input("a", [5, 1, 3, 4])
    b = g.input("b", [2, 4, 6])
    check(g.matmul(a, b), np.matmul(np.zeros((5, 1, 3, 4)), np.zeros((2, 4, 6))).shape, "f32")
    check(g.matmul(g.input("m", [3, 4]), g.input("v", [4])), (3,), "f32")
    s = g.input("s", [1, "seq", 4])
    check(s @ g.param("w", [4, 7]), (1, "seq", 7), "f32")


def test_matmul_bias_act(g: Graph) -> None:
    a = g.input("a", [2, "seq", 8])
    w = g.param("w", [8, 16])
    bias = g.param("bias", [16])
    y = g.matmul_bias_act(a, w, bias, act="gelu")
    check(y, (2, "seq", 16), "f32")
    assert y.attrs == {"act": "gelu"}
    check(g.matmul_bias_act(a, w, bias), (2, "seq", 16), "f32")


def test_dequant_matmul(g: Graph) -> None:
    x = g.input("x", [1, "seq", 256])
    wq = g.param("wq", [32, 144], "u8")  # q4_k: 144 bytes per 256 elements
    y = g.dequant_matmul(x, wq, scheme="q4_k")
    check(y, (1, "seq", 32), "f32")
    assert y.attrs == {"scheme": {"gguf": "q4_k"}, "n": 32, "k": 256}
    w8 = g.param("w8", [16, 64], "u8")
    sc = g.param("sc", [16, 2])
    y8 = g.dequant_matmul(g.input("x8", [3, 64]), w8, sc, scheme="int8/32")
    check(y8, (3, 16), "f32")
    assert y8.attrs["scheme"] == {"int8": {"block_size": 32, "asymmetric": False}}


def test_grouped_matmul(g: Graph) -> None:
    x = g.input("x", [6, 8])
    w = g.param("w", [4, 8, 5])
    idx = g.input("idx", [6], "i32")
    check(g.grouped_matmul(x, w, idx), (6, 5), "f32")


def test_dequant_grouped_matmul(g: Graph) -> None:
    x = g.input("x", [6, 64])
    wq = g.param("wq", [4, 10, 68], "u8")  # q8_0: 34 bytes per 32 elements
    idx = g.input("idx", [6], "i32")
    y = g.dequant_grouped_matmul(x, wq, idx, scheme="q8_0")
    check(y, (6, 10), "f32")
    assert y.attrs == {"scheme": {"gguf": "q8_0"}, "num_experts": 4, "n": 10, "k": 64}


def test_scaled_family(g: Graph) -> None:
    lhs = g.input("lhs", [8, 32], "u8")
    rhs = g.param("rhs", [16, 32], "u8")
    ls = g.input("ls", [1])
    rs = g.param("rs", [1])
    check(g.scaled_matmul(lhs, rhs, ls, rs), (8, 16), "f32")
    check(g.scaled_matmul(lhs, rhs, ls, rs, g.param("b", [16])), (8, 16), "f32")
    x = g.input("x", [8, 32])
    s_row = g.scaled_quant_scale(x, layout="per_row")
    check(s_row, (8,), "f32")
    s_blk = g.scaled_quant_scale(x, fmt="int8", layout=16)
    check(s_blk, (8, 2), "f32")
    assert s_blk.attrs["layout"] == {"block": {"size": 16}}
    q = g.scaled_quantize(x, s_row, layout="per_row")
    check(q, (8, 32), "u8")
    check(g.scaled_dequantize(q, s_row, layout="per_row"), (8, 32), "f32")


# ------------------------------------------------------------------- norms
def test_norms(g: Graph) -> None:
    x = g.input("x", [2, "seq", 8])
    gamma, beta = g.param("g", [8]), g.param("b", [8])
    check(g.layer_norm(x, gamma, beta), (2, "seq", 8), "f32")
    check(g.rms_norm(x, gamma), (2, "seq", 8), "f32")
    check(g.rms_norm(x, gamma, beta, eps=1e-5), (2, "seq", 8), "f32")
    res = g.input("res", [2, "seq", 8])
    check(g.residual_layer_norm(x, res, gamma, beta), (2, "seq", 8), "f32")
    check(g.residual_layer_norm(x, res, gamma, beta, g.param("bias", [8])), (2, "seq", 8), "f32")
    check(g.residual_rms_norm(x, res, gamma), (2, "seq", 8), "f32")
    scale, shift = g.input("sc", [2, 1, 8]), g.input("sh", [2, 1, 8])
    check(g.ada_layer_norm(x, scale, shift), (2, "seq", 8), "f32")
    check(g.ada_layer_norm(x, scale, shift, layer_norm=False), (2, "seq", 8), "f32")
    check(g.gated_residual(x, res, g.input("gate", [2, 1, 8])), (2, "seq", 8), "f32")


def test_nchw_norms(g: Graph) -> None:
    x = g.input("x", [2, 8, 5, 5])
    gamma, beta = g.param("g", [8]), g.param("b", [8])
    check(g.group_norm(x, gamma, beta, num_groups=4), (2, 8, 5, 5), "f32")
    check(g.layer_norm2d(x, gamma, beta), (2, 8, 5, 5), "f32")


# --------------------------------------------------------------- attention
def test_attention_bshd_gqa(g: Graph) -> None:
    q = g.input("q", [1, "seq", 4 * 16])
    k = g.input("k", [1, "seq", 2 * 16])
    v = g.input("v", [1, "seq", 2 * 16])
    y = g.attention(q, k, v, heads=4, kv_heads=2)
    check(y, (1, "seq", 64), "f32")
    assert y.attrs["head_dim"] == 16 and y.attrs["mask"] == "causal"
    y2 = g.attention(q, k, v, heads=4, kv_heads=2, window=8)
    assert y2.attrs["mask"] == "sliding_window" and y2.attrs["window"] == 8
    y3 = g.attention(q, k, v, heads=4, kv_heads=2, mask=None, softcap=30.0, score_scale=0.1)
    assert y3.attrs["mask"] == "none" and y3.attrs["softcap"] == 30.0


def test_attention_bhsd_with_mask(g: Graph) -> None:
    q = g.input("q", [2, 4, 5, 8])
    kv = g.input("kv", [2, 4, 7, 8])
    m = g.input("m", [2, 1, 5, 7])
    y = g.attention(q, kv, kv, heads=4, layout="bhsd", mask="bias", mask_input=m)
    check(y, (2, 4, 5, 8), "f32")
    with pytest.raises(rlx.GraphError, match=r"\[attention\] mask_input"):
        g.attention(q, kv, kv, heads=4, layout="bhsd", mask_input=m)


def test_fused_attention_block(g: Graph) -> None:
    x = g.input("x", [1, 6, 32])
    wqkv = g.param("wqkv", [32, 3 * 32])
    wout = g.param("wout", [32, 32])
    cos, sin = g.input("cos", [6, 4]), g.input("sin", [6, 4])
    y = g.fused_attention_block(x, wqkv, wout, heads=4, cos=cos, sin=sin)
    check(y, (1, 6, 32), "f32")
    assert y.attrs == {"heads": 4, "head_dim": 8, "mask": "causal", "rope": True}
    check(g.fused_attention_block(x, wqkv, wout, heads=4, mask=None), (1, 6, 32), "f32")


def test_rope(g: Graph) -> None:
    x = g.input("x", [1, "seq", 4 * 16])
    cos, sin = g.input("cos", ["seq", 8]), g.input("sin", ["seq", 8])
    check(g.rope(x, cos, sin, head_dim=16), (1, "seq", 64), "f32")
    c2, s2 = g.input("c2", ["seq", 4]), g.input("s2", ["seq", 4])
    y = g.rope(x, c2, s2, head_dim=16, n_rot=8, kind="interleaved")
    check(y, (1, "seq", 64), "f32")


def test_axial_rope2d(g: Graph) -> None:
    x = g.input("x", [1, 16, 2 * 8])
    y = g.axial_rope2d(x, end_x=4, end_y=4, head_dim=8, num_heads=2)
    check(y, (1, 16, 16), "f32")


# ------------------------------------------------------------------- shape
def test_reshape_and_minus_one(g: Graph) -> None:
    x = g.input("x", [2, 3, 4])
    check(g.reshape(x, 6, 4), (6, 4), "f32")
    check(g.reshape(x, [-1, 12]), (2, 12), "f32")
    check(x.reshape(4, -1), (4, 6), "f32")
    s = g.input("s", [2, "seq", 576])
    check(s.reshape(2, -1, 8, 72), (2, "seq", 8, 72), "f32")
    check(s.reshape(-1, "seq", 576), (2, "seq", 576), "f32")
    with pytest.raises(rlx.ShapeError, match=r"\[reshape\]"):
        x.reshape(5, -1)
    with pytest.raises(rlx.ShapeError, match=r"\[reshape\]"):
        x.reshape(-1, -1)


def test_transpose_permute(g: Graph) -> None:
    x = g.input("x", [2, 3, 4])
    check(g.transpose(x, [2, 0, 1]), np.zeros((2, 3, 4)).transpose(2, 0, 1).shape, "f32")
    check(g.transpose(x), (4, 3, 2), "f32")
    check(g.permute(x, 0, 2, 1), (2, 4, 3), "f32")
    check(x.permute(1, 0, 2), (3, 2, 4), "f32")


def test_expand_narrow_concat(g: Graph) -> None:
    x = g.input("x", [3, 1])
    check(g.expand(x, [2, 3, 5]), (2, 3, 5), "f32")
    y = g.input("y", [4, 10])
    n = g.narrow(y, -1, 2, 5)
    check(n, (4, 5), "f32")
    assert n.attrs == {"axis": -1, "start": 2, "len": 5}
    check(g.concat([y, g.input("z", [4, 3])], axis=1), (4, 13), "f32")
    check(g.concat([y, y, y]), (12, 10), "f32")


def test_gathers_and_scatters(g: Graph) -> None:
    table = g.param("emb", [100, 16])
    ids = g.input("ids", [2, "seq"], "i32")
    check(g.gather(table, ids), (2, "seq", 16), "f32")
    x = g.input("x", [5, 6, 7])
    idx = g.input("idx", [3], "i32")
    check(g.gather_axis(x, idx, axis=1), (5, 3, 7), "f32")
    upd = g.input("upd", [3, 7])
    check(g.scatter_add(upd, idx, out_dim=10), (10, 7), "f32")
    check(g.reverse(x, [0, 2]), (5, 6, 7), "f32")
    data = g.input("data", [4, 5, 6])
    ind = g.input("ind", [3, 2], "i64")
    check(g.gather_nd(data, ind), (3, 6), "f32")
    check(g.scatter_nd(data, ind, g.input("u", [3, 6])), (4, 5, 6), "f32")
    ei = g.input("ei", [4, 2, 6], "i32")
    check(g.gather_elements(data, ei, axis=1), (4, 2, 6), "f32")
    check(g.scatter_elements(data, ei, g.input("eu", [4, 2, 6]), axis=1), (4, 5, 6), "f32")


def test_resize_squeeze_unsqueeze(g: Graph) -> None:
    x = g.input("x", [1, 3, 4, 5])
    check(g.resize_nearest2x(x), (1, 3, 8, 10), "f32")
    check(g.squeeze(x, 0), (3, 4, 5), "f32")
    check(g.unsqueeze(x, -1), (1, 3, 4, 5, 1), "f32")


# -------------------------------------------------------------- reductions
@pytest.mark.parametrize("kind", ["sum", "mean", "max", "min", "prod"])
def test_reductions(g: Graph, kind: str) -> None:
    x = g.input("x", [2, 3, 4])
    a = np.zeros((2, 3, 4))
    f = getattr(np, kind)
    check(getattr(g, kind)(x), f(a).shape, "f32")
    check(getattr(g, kind)(x, 1), f(a, axis=1).shape, "f32")
    check(getattr(g, kind)(x, (0, -1), keep_dims=True), f(a, axis=(0, 2), keepdims=True).shape,
          "f32")  # fmt: skip
    check(g.reduce(x, kind, -1), f(a, axis=-1).shape, "f32")


def test_softmax_family(g: Graph) -> None:
    x = g.input("x", [4, 10])
    check(g.softmax(x), (4, 10), "f32")
    check(g.softmax(x, axis=0), (4, 10), "f32")
    labels = g.input("labels", [4], "i32")
    check(g.softmax_cross_entropy(x, labels), (4,), "f32")
    check(g.cumsum(x), (4, 10), "f32")
    check(g.cumsum(x, axis=0, exclusive=True), (4, 10), "f32")


def test_topk_arg_sample(g: Graph) -> None:
    x = g.input("x", [4, 10])
    check(g.topk(x, 3), (4, 3), "i32")
    check(g.argmax(x), np.argmax(np.zeros((4, 10)), axis=-1).shape, "i32")
    check(g.argmin(x, axis=0, keep_dims=True), (1, 10), "i32")
    y = g.sample(x, temperature=0.7, top_k=5, top_p=0.9, seed=1)
    check(y, (4,), "i32")


# -------------------------------------------------------------------- conv
def test_conv2d(g: Graph) -> None:
    x = g.input("x", [2, 4, 9, 9])
    w = g.param("w", [8, 4, 3, 3])
    check(g.conv2d(x, w), (2, 8, 7, 7), "f32")
    check(g.conv2d(x, w, g.param("b", [8]), stride=2, padding=1), (2, 8, 5, 5), "f32")
    wg = g.param("wg", [8, 2, 3, 3])
    check(g.conv2d(x, wg, groups=2, dilation=2), (2, 8, 5, 5), "f32")


def test_conv_transpose2d(g: Graph) -> None:
    x = g.input("x", [1, 4, 5, 5])
    w = g.param("w", [4, 6, 3, 3])
    # torch: (h-1)*s - 2p + d*(k-1) + op + 1 = 4*2 - 2 + 2 + 1 + 1 = 10
    y = g.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1)
    check(y, (1, 6, 10, 10), "f32")


def test_pooling_im2col(g: Graph) -> None:
    x = g.input("x", [1, 3, 8, 8])
    check(g.max_pool2d(x, 2), (1, 3, 4, 4), "f32")
    check(g.avg_pool2d(x, 3, stride=1, padding=1), (1, 3, 8, 8), "f32")
    check(g.pool2d(x, "max", (2, 4)), (1, 3, 4, 2), "f32")
    check(g.im2col(x, 3), (1, 3 * 9, 6 * 6), "f32")


# ---------------------------------------------------------------- sequence
def test_selective_scan_mamba2(g: Graph) -> None:
    x = g.input("x", [2, 7, 16])
    delta = g.input("dt", [2, 7, 16])
    a = g.param("a", [16, 4])
    b, c = g.input("b", [2, 7, 4]), g.input("c", [2, 7, 4])
    check(g.selective_scan(x, delta, a, b, c), (2, 7, 16), "f32")
    dt2 = g.input("dt2", [2, 7, 4])
    a2 = g.param("a2", [4])
    y = g.mamba2(x, dt2, a2, b, c, heads=4)
    check(y, (2, 7, 16), "f32")
    assert y.attrs == {"heads": 4, "head_dim": 4, "state_size": 4}


def test_gated_delta_net(g: Graph) -> None:
    q = g.input("q", [1, 5, 2 * 8])
    gate, beta = g.input("g", [1, 5, 2]), g.input("beta", [1, 5, 2])
    st = g.state("st", [1, 2, 8, 8])
    check(g.gated_delta_net(q, q, q, gate, beta, st, heads=2), (1, 5, 16), "f32")


def test_rnns(g: Graph) -> None:
    # Weights are stacked per (layer, direction): w_ih [L·dirs, gates·h, in].
    x = g.input("x", [2, 5, 3])
    h = 4
    w_ih4, w_hh4 = g.param("wi4", [1, 4 * h, 3]), g.param("wh4", [1, 4 * h, h])
    b4 = g.param("b4", [1, 4 * h])
    h0, c0 = g.input("h0", [1, 2, h]), g.input("c0", [1, 2, h])
    y = g.lstm(x, w_ih4, w_hh4, b4, h0, c0)
    check(y, (2, 5, h), "f32")
    assert y.attrs["hidden"] == h
    check(g.lstm(x, w_ih4, w_hh4, b4, h0, c0, carry=True), (2, 5 + 2, h), "f32")
    w_ih3, w_hh3 = g.param("wi3", [1, 3 * h, 3]), g.param("wh3", [1, 3 * h, h])
    b3a, b3b = g.param("b3a", [1, 3 * h]), g.param("b3b", [1, 3 * h])
    check(g.gru(x, w_ih3, w_hh3, b3a, b3b, h0), (2, 5, h), "f32")
    w_ih, w_hh, b = g.param("wi", [1, h, 3]), g.param("wh", [1, h, h]), g.param("b", [1, h])
    check(g.rnn(x, w_ih, w_hh, b, h0, relu=True), (2, 5, h), "f32")
    w2_ih, w2_hh = g.param("w2i", [2, h, 3]), g.param("w2h", [2, h, h])
    h02 = g.input("h02", [2, 2, h])
    y2 = g.rnn(x, w2_ih, w2_hh, g.param("b2", [2, h]), h02, bidirectional=True)
    check(y2, (2, 5, 2 * h), "f32")


def test_scan(g: Graph) -> None:
    body = Graph("body")
    carry = body.input("carry", [4])
    xt = body.input("x_t", [4])
    new = carry + xt
    body.outputs(new, new * 2.0)
    c0 = g.input("c0", [4])
    xs = g.input("xs", [6, 4])
    y = g.scan(body, [c0], [xs])
    check(y, (6, 4), "f32")
    assert y.attrs["length"] == 6 and y.attrs["num_carry"] == 1


# ------------------------------------------------------------------ signal
def test_signal(g: Graph) -> None:
    x = g.input("x", [3, 2 * 16])
    check(g.fft(x), (3, 32), "f32")
    check(g.ifft(x, norm="ortho"), (3, 32), "f32")
    filters = g.param("mel", [5, 9])  # n_bins = n_fft/2 + 1 = 9
    check(g.log_mel(x, filters, n_fft=16), (3, 5), "f32")
    spec = g.input("spec", [2 * 4, 2 * 16])
    check(g.welch_peaks(spec, n_fft=16, n_segments=4, k=3), (2, 3), "f32")


# -------------------------------------------------------------------- misc
def test_rng(g: Graph) -> None:
    check(g.rng_normal([2, "seq"], seed=3), (2, "seq"), "f32")
    check(g.rng_uniform([4], low=-1.0, high=1.0), (4,), "f32")


def test_vq_spd(g: Graph) -> None:
    x = g.input("x", [10, 8])
    cb = g.param("cb", [32, 8])
    check(g.vq_assign(x, cb, metric="cosine"), (10,), "i32")
    s = g.input("s", [3, 5, 5])
    check(g.spd("bi_map", s, g.param("w", [5, 2])), (3, 2, 2), "f32")
    check(g.spd("re_eig", s), (3, 5, 5), "f32")
    check(g.spd("karcher_mean", s), (5, 5), "f32")


def _splat_inputs(g: Graph, n: int = 10) -> list[Node]:
    return [
        g.input("pos", [n, 3]), g.input("scl", [n, 3]), g.input("rot", [n, 4]),
        g.input("opa", [n]), g.input("col", [n, 3]), g.input("sh", [n, 4, 3]),
        g.input("cam", [20]),
    ]  # fmt: skip


def test_gaussian_splats(g: Graph) -> None:
    cfg = rlx.SplatConfig(width=32, height=24)
    ins = _splat_inputs(g)
    check(g.gaussian_splat_render(*ins, cfg=cfg), (24, 32, 3), "f32")
    prep = g.gaussian_splat_prepare(*ins, cfg=cfg)
    check(prep, (10, 16), "f32")
    check(g.gaussian_splat_rasterize(prep, ins[-1], cfg=cfg), (24, 32, 3), "f32")


def test_custom(g: Graph) -> None:
    x = g.input("x", [3, 4])
    y = g.custom("my_op", [x], [3, 2], "f16", attrs={"alpha": 2})
    check(y, (3, 2), "f16")
    assert y.attrs["attrs"] == {"alpha": 2} and y.attrs["name"] == "my_op"


def test_apply_raw_op(g: Graph) -> None:
    x = g.input("x", [3])
    check(g.apply({"op": "activation", "kind": "exp"}, x), (3,), "f32")


# ---------------------------------------------------------------- backward
def test_backward_simple(g: Graph) -> None:
    logits = g.input("logits", [4, 10])
    labels = g.input("labels", [4], "i32")
    dl = g.input("dl", [4])
    check(g.softmax_cross_entropy_backward(logits, labels, dl), (4, 10), "f32")
    check(g.cumsum_backward(logits, axis=1), (4, 10), "f32")
    idx = g.input("idx", [3], "i32")
    check(g.gather_backward(g.input("dy", [3, 10]), idx, axis=0, axis_dim=7), (7, 10), "f32")


def test_attention_backward(g: Graph) -> None:
    q = g.input("q", [1, 6, 4 * 8])
    kv = g.input("kv", [1, 6, 2 * 8])
    dy = g.input("dy", [1, 6, 32])
    check(g.attention_backward(q, kv, kv, dy, wrt="q", heads=4), (1, 6, 32), "f32")
    check(g.attention_backward(q, kv, kv, dy, wrt="k", heads=4), (1, 6, 16), "f32")


def test_norm_rope_backward(g: Graph) -> None:
    x = g.input("x", [2, 5, 8])
    gamma, beta = g.param("g", [8]), g.param("b", [8])
    check(g.rms_norm_backward(x, gamma, beta, x), (2, 5, 8), "f32")
    check(g.rms_norm_backward(x, gamma, beta, x, wrt="gamma"), (8,), "f32")
    cos, sin = g.input("cos", [5, 2]), g.input("sin", [5, 2])
    check(g.rope_backward(x, cos, sin, head_dim=4), (2, 5, 8), "f32")
    scale = g.input("scale", [2, 1, 8])
    # packed flat [dx ∥ dscale ∥ dshift]: x's elements + 2 × scale's elements
    check(g.ada_layer_norm_backward(x, scale, x), (2 * 5 * 8 + 2 * (2 * 8),), "f32")
    # packed flat [dx ∥ dy ∥ dgate]
    check(g.gated_residual_backward(x, scale, x), (2 * 2 * 5 * 8 + 2 * 8,), "f32")


def test_conv_backward(g: Graph) -> None:
    x = g.input("x", [2, 4, 9, 9])
    w = g.param("w", [8, 4, 3, 3])
    dy = g.input("dy", [2, 8, 7, 7])
    check(g.conv2d_backward_input(dy, w, input_hw=9), (2, 4, 9, 9), "f32")
    check(g.conv2d_backward_weight(x, dy, kernel=3), (8, 4, 3, 3), "f32")
    p = g.input("p", [1, 3, 8, 8])
    check(g.max_pool2d_backward(p, g.input("pdy", [1, 3, 4, 4]), 2), (1, 3, 8, 8), "f32")


def test_signal_spd_backward(g: Graph) -> None:
    spec = g.input("spec", [3, 32])
    filters = g.param("mel", [5, 9])
    check(g.log_mel_backward(spec, filters, g.input("dy", [3, 5]), n_fft=16), (3, 32), "f32")
    s = g.input("s", [3, 5, 5])
    check(g.spd_backward("re_eig", s, g.input("ds", [3, 5, 5])), (3, 5, 5), "f32")


def test_splat_backward(g: Graph) -> None:
    cfg = rlx.SplatConfig(width=8, height=6)
    ins = _splat_inputs(g)
    d = g.input("dloss", [6, 8, 3])
    y = g.gaussian_splat_render_backward(*ins, d, cfg=cfg)
    # one row of packed gradients per splat: pos 3, scale 3, rot 4, opacity 1,
    # colour 3, sh 4·3
    check(y, (10, 3 + 3 + 4 + 1 + 3 + 4 * 3), "f32")


def test_scan_backward(g: Graph) -> None:
    body = Graph("body")
    carry = body.input("carry", [4])
    xt = body.input("x_t", [4])
    new = carry * xt
    body.outputs(new, new)
    c0 = g.input("c0", [4])
    xs = g.input("xs", [6, 4])
    dy = g.input("dy", [6, 4])
    check(g.scan_backward(body, [c0], [xs], dy), (4,), "f32")
    # gradients of the chosen operands, packed flat
    check(g.scan_backward(body, [c0], [xs], dy, wrt_xs=True), (6 * 4,), "f32")


# ------------------------------------------------------- graph-level API
def test_outputs_len_print_json_verify(g: Graph) -> None:
    x = g.input("x", [2, "seq", 4])
    y = g.softmax(x * 2.0, name="probs")
    assert g.outputs(y) == [y]
    assert g.outputs() == [y]
    assert len(g) == 4
    text = str(g)
    assert "%3 = softmax{axis=-1}(%2) : f32[2, seq, 4]  # probs -> out" in text
    assert "= binary{kind=mul}(%0, %1) : f32[2, seq, 4]  # binary_2" in text
    assert "%1 = constant{values=[2.0]}() : f32[]" in text
    plain = g.format(attrs=False).splitlines()
    assert plain[4] == "  %3 = softmax(%2) : f32[2, seq, 4]  # probs -> out"
    g.verify()
    g2 = Graph.from_json(g.to_json())
    assert len(g2) == len(g) and g2.outputs()[0].shape == (2, "seq", 4)
    assert json.loads(g2.to_json()) == json.loads(g.to_json())
    assert g.node(3).name == "probs" and g.node(3).inputs[0].op == "binary"
    assert [n.id for n in g] == [0, 1, 2, 3]


def test_nodes_of_other_graph_rejected(g: Graph) -> None:
    other = Graph("other")
    a = other.input("a", [3])
    b = g.input("b", [3])
    with pytest.raises(rlx.GraphError, match=r"\[binary\].*another graph"):
        g.add(a, b)


def test_generic_binary_compare_reduce(g: Graph) -> None:
    a = g.input("a", [2, 3], "i32")
    b = g.input("b", [3], "i64")
    y = g.binary(a, b, "mul")
    assert y.shape == (2, 3) and y.dtype == "i64" and y.attrs == {"kind": "mul"}
    c = g.compare(a, 1, "ge")
    assert c.shape == (2, 3) and c.dtype == "bool" and c.inputs[1].dtype == "i32"
    assert g.activation(g.input("f", [2]), "silu").attrs == {"kind": "silu"}


def test_from_json_verifies(g: Graph) -> None:
    x = g.input("x", [3])
    g.outputs(g.exp(x))
    doc = json.loads(g.to_json())
    doc["nodes"][1]["inputs"] = [5]  # operand id past the node itself
    with pytest.raises(rlx.GraphError, match=r"^\[verify\] node 1 \(activation\)"):
        Graph.from_json(json.dumps(doc))
    doc = json.loads(g.to_json())
    doc["nodes"][1]["shape"]["dims"] = [4]  # declared shape disagrees with inference
    with pytest.raises(rlx.RlxError, match=r"^\[verify\] node 1"):
        Graph.from_json(json.dumps(doc))


def test_fft_complex(g: Graph) -> None:
    z = g.input("z", [3, "n"], "c64")
    check(g.fft(z), (3, "n"), "c64")
