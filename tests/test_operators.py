"""rlx.Node: properties, operators with nodes and scalars, slicing, dtype spellings."""

from __future__ import annotations

import numpy as np
import pytest
import rlx
from rlx import Graph


def test_node_properties(g: Graph) -> None:
    x = g.input("tokens", [2, "seq", 8], "float16")
    assert x.id == 0 and x.name == "tokens" and x.op == "input"
    assert x.shape == (2, "seq", 8) and x.dtype == "f16" and x.ndim == 3
    assert repr(x) == "<Node %0 input f16[2, seq, 8] 'tokens'>"
    assert x.inputs == []


@pytest.mark.parametrize(
    "fn,kind",
    [
        (lambda a, b: a + b, "add"),
        (lambda a, b: a - b, "sub"),
        (lambda a, b: a * b, "mul"),
        (lambda a, b: a / b, "div"),
        (lambda a, b: a**b, "pow"),
    ],
)
def test_binary_operators(g: Graph, fn: object, kind: str) -> None:
    a = g.input("a", [3, 1])
    b = g.input("b", [4])
    y = fn(a, b)  # type: ignore[operator]
    assert y.op == "binary" and y.attrs == {"kind": kind}
    assert y.shape == (3, 4) and y.dtype == "f32"
    assert [n.id for n in y.inputs] == [a.id, b.id]


def test_scalar_operands_become_constants_of_node_dtype(g: Graph) -> None:
    x = g.input("x", [2, 3], "f16")
    for y in (x * 2.0, 2.0 * x, x + 1, 1 - x, x / 3, 3 / x, x**2, 2**x):
        assert y.shape == (2, 3) and y.dtype == "f16"
        consts = [n for n in y.inputs if n.op == "constant"]
        assert len(consts) == 1 and consts[0].dtype == "f16" and consts[0].shape == ()
    y = 1 - x
    assert y.inputs[0].op == "constant" and y.inputs[1] == x  # operand order kept
    assert y.inputs[0].attrs["values"] == [1.0]
    z = np.float32(3.0) * x  # numpy scalar on the left defers to Node
    assert z.dtype == "f16" and z.op == "binary"
    w = np.ones(3, np.float32) + g.input("v", [2, 3])
    assert w.shape == (2, 3) and w.inputs[0].shape == (3,)


def test_unary_and_matmul_operators(g: Graph) -> None:
    x = g.input("x", [2, 4])
    n = -x
    assert n.op == "activation" and n.attrs == {"kind": "neg"}
    assert abs(x).attrs == {"kind": "abs"}
    assert +x is x
    m = x @ g.param("w", [4, 5])
    assert m.op == "mat_mul" and m.shape == (2, 5)


def test_comparisons(g: Graph) -> None:
    x = g.input("x", [2, 4])
    y = g.input("y", [4])
    for node, kind in ((x < y, "lt"), (x <= 0.0, "le"), (x > y, "gt"), (x >= 1, "ge")):
        assert node.op == "compare" and node.attrs == {"kind": kind}
        assert node.dtype == "bool" and node.shape == (2, 4)
    assert x.eq(y).attrs == {"kind": "eq"} and x.ne(0.0).attrs == {"kind": "ne"}
    # == keeps identity semantics: handles compare by (graph, id) and hash.
    assert (x == x) is True and (x == y) is False and x != y
    assert g.node(x.id) == x and len({x, g.node(0), y}) == 2


def test_t_reshape_astype(g: Graph) -> None:
    x = g.input("x", [3, 5])
    assert x.T.shape == (5, 3) and x.T.op == "transpose"
    assert x.reshape(5, 3).shape == (5, 3)
    assert x.reshape((15,)).shape == (15,)
    assert x.reshape([-1]).shape == (15,)
    c = x.astype(np.int32)
    assert c.op == "cast" and c.dtype == "i32"
    assert x.transpose().shape == (5, 3)
    with pytest.raises(rlx.ShapeError, match=r"\[transpose\].*rank 2"):
        _ = g.input("y", [2, 3, 4]).T


# ------------------------------------------------------------------ slicing
def _narrows(n: rlx.Node) -> list[dict]:
    out = []
    while n.op in ("narrow", "reshape"):
        if n.op == "narrow":
            out.append(n.attrs)
        n = n.inputs[0]
    return out[::-1]


def test_slicing_basic(g: Graph) -> None:
    x = g.input("x", [4, 6, 8])
    a = np.zeros((4, 6, 8))
    y = x[:, 2:5]
    assert y.shape == a[:, 2:5].shape and y.op == "narrow"
    assert y.attrs == {"axis": 1, "start": 2, "len": 3}
    assert x[..., :4].shape == a[..., :4].shape
    assert x[1:3, :, -3:].shape == a[1:3, :, -3:].shape
    assert _narrows(x[1:3, :, -3:]) == [
        {"axis": 0, "start": 1, "len": 2},
        {"axis": 2, "start": 5, "len": 3},
    ]
    assert x[:].shape == (4, 6, 8) and x[:] is x


def test_integer_index_drops_axis(g: Graph) -> None:
    x = g.input("x", [4, 6, 8])
    a = np.zeros((4, 6, 8))
    assert x[1].shape == a[1].shape
    assert x[:, -1].shape == a[:, -1].shape
    assert x[2, 1:3, 0].shape == a[2, 1:3, 0].shape
    assert x[..., 3].shape == a[..., 3].shape
    y = x[:, -1]
    assert y.op == "reshape" and y.inputs[0].attrs == {"axis": 1, "start": 5, "len": 1}
    assert x[None, 0].shape == a[None, 0].shape


def test_slicing_symbolic(g: Graph) -> None:
    x = g.input("x", [2, "seq", 8])
    assert x[:, :, :4].shape == (2, "seq", 4)
    assert x[:, 0:3].shape == (2, 3, 8)
    assert x[:, 0].shape == (2, 8)
    with pytest.raises(rlx.ShapeError, match=r"\[narrow\].*symbolic"):
        _ = x[:, -1]
    with pytest.raises(rlx.ShapeError, match=r"\[narrow\].*symbolic"):
        _ = x[:, 2:]


def test_slicing_errors(g: Graph) -> None:
    x = g.input("x", [4, 6])
    with pytest.raises(rlx.ShapeError, match=r"\[narrow\].*step must be 1"):
        _ = x[::2]
    with pytest.raises(rlx.ShapeError, match=r"\[narrow\] slice 2:10 out of range.*size 6"):
        _ = x[:, 2:10]
    with pytest.raises(rlx.ShapeError, match=r"\[narrow\] index 4 out of range"):
        _ = x[4]
    with pytest.raises(rlx.ShapeError, match=r"\[narrow\] too many indices"):
        _ = x[0, 0, 0]
    with pytest.raises(TypeError, match=r"\[narrow\]"):
        _ = x["a"]
    with pytest.raises(TypeError):
        list(x)


def test_narrow_out_of_range_from_rust(g: Graph) -> None:
    x = g.input("x", [4, 6])
    with pytest.raises(rlx.ShapeError, match=r"^\[narrow\].*\[4, 6\]"):
        g.narrow(x, 1, 4, 3)


# ------------------------------------------------------------------- dtypes
@pytest.mark.parametrize(
    "spelling,name",
    [
        ("f32", "f32"), ("float32", "f32"), ("float", "f32"), ("half", "f16"),
        ("float16", "f16"), ("bf16", "bf16"), ("bfloat16", "bf16"), ("double", "f64"),
        ("int32", "i32"), ("long", "i64"), ("uint8", "u8"), ("bool", "bool"),
        ("torch.float16", "f16"), ("complex64", "c64"),
        (np.float16, "f16"), (np.float32, "f32"), (np.int64, "i64"), (np.bool_, "bool"),
        (np.dtype("int32"), "i32"), (np.dtype("uint32"), "u32"), (np.dtype("int8"), "i8"),
    ],
)  # fmt: skip
def test_dtype_spellings(g: Graph, spelling: object, name: str) -> None:
    assert g.input("x", [2], spelling).dtype == name  # type: ignore[arg-type]
    assert g.constant(1, dtype=spelling).dtype == name  # type: ignore[arg-type]
    assert rlx.dtype_name(spelling) == name  # type: ignore[arg-type]
