"""Bad calls raise the specific rlx exception, with a message that starts with
the op in brackets and names the shapes at fault."""

from __future__ import annotations

import subprocess
import sys

import pytest
import rlx
from rlx import Graph, _rlx


def test_hierarchy() -> None:
    for exc in (
        rlx.ShapeError,
        rlx.DTypeError,
        rlx.UnsupportedOpError,
        rlx.WeightFormatError,
        rlx.KernelError,
        rlx.GraphError,
    ):
        assert issubclass(exc, rlx.RlxError) and exc is not rlx.RlxError
    assert issubclass(rlx.RlxError, Exception)
    assert rlx.ShapeError is _rlx.ShapeError
    assert not issubclass(rlx.ShapeError, rlx.DTypeError)


def test_broadcast_error_names_op_and_both_shapes(g: Graph) -> None:
    a = g.input("a", [2, 3])
    b = g.input("b", [4])
    with pytest.raises(rlx.ShapeError) as ei:
        _ = a + b
    msg = str(ei.value)
    assert msg.startswith("[binary] cannot broadcast")
    assert "[2, 3]" in msg and "[4]" in msg


def test_symbolic_broadcast_error(g: Graph) -> None:
    a = g.input("a", [2, "seq"])
    b = g.input("b", [2, 5])
    with pytest.raises(rlx.ShapeError) as ei:
        g.mul(a, b)
    assert str(ei.value).startswith("[binary]")
    assert "[2, seq]" in str(ei.value) and "[2, 5]" in str(ei.value)


def test_matmul_inner_dims(g: Graph) -> None:
    a = g.input("a", [2, 3])
    b = g.input("b", [4, 5])
    with pytest.raises(rlx.ShapeError) as ei:
        _ = a @ b
    msg = str(ei.value)
    assert msg.startswith("[mat_mul]") and "[2, 3]" in msg and "[4, 5]" in msg


def test_unknown_dtype(g: Graph) -> None:
    with pytest.raises(rlx.DTypeError, match=r"^\[dtype\] unknown dtype 'float7'$"):
        g.input("x", [2], "float7")
    with pytest.raises(rlx.DTypeError, match=r"\[dtype\]"):
        g.cast(g.input("y", [2]), "quux")
    with pytest.raises(rlx.DTypeError, match=r"\[dtype\]"):
        rlx.dtype_name(object)  # type: ignore[arg-type]


def test_dtype_mismatch(g: Graph) -> None:
    ids = g.input("ids", [3], "f32")
    table = g.param("emb", [10, 4])
    with pytest.raises(rlx.DTypeError, match=r"^\[gather\]"):
        g.gather(table, ids)


def test_wrong_arity_is_shape_error(g: Graph) -> None:
    x = g.input("x", [2, 3])
    with pytest.raises(rlx.ShapeError, match=r"^\[binary\] expects 2 input\(s\), got 1$"):
        g.apply({"op": "binary", "kind": "add"}, x)
    with pytest.raises(rlx.ShapeError, match=r"^\[layer_norm\] expects 3 input"):
        g.apply({"op": "layer_norm", "eps": 1e-5}, x, x)


def test_axis_out_of_range(g: Graph) -> None:
    x = g.input("x", [2, 3])
    with pytest.raises(rlx.ShapeError, match=r"^\[softmax\] axis 5 out of range for rank 2$"):
        g.softmax(x, axis=5)
    with pytest.raises(rlx.ShapeError, match=r"^\[reduce\] axis -3 out of range for rank 2$"):
        g.sum(x, -3)


def test_norm_gamma_mismatch(g: Graph) -> None:
    x = g.input("x", [2, 8])
    with pytest.raises(rlx.ShapeError) as ei:
        g.rms_norm(x, g.param("g", [7]))
    assert str(ei.value).startswith("[rms_norm]") and "7" in str(ei.value)


def test_attention_head_mismatch(g: Graph) -> None:
    q = g.input("q", [1, 4, 32])
    k = g.input("k", [1, 4, 24])
    with pytest.raises(rlx.ShapeError, match=r"^\[attention\]"):
        g.attention(q, k, k, heads=4, kv_heads=2)


def test_bad_attribute_is_graph_error(g: Graph) -> None:
    x = g.input("x", [2, 3])
    with pytest.raises(rlx.GraphError, match=r"\[graph\] bad op description"):
        g.activation(x, "sinh")
    with pytest.raises(rlx.GraphError, match=r"\[attention\] unknown mask"):
        g.attention(x, x, x, heads=1, mask="diagonal")


def test_unknown_node_id() -> None:
    ng = _rlx.Graph("raw")
    with pytest.raises(rlx.GraphError, match=r"unknown node id 7"):
        ng.shape(7)
    with pytest.raises(rlx.GraphError, match=r"^\[activation\] unknown node id 3"):
        ng.add('{"op": "activation", "kind": "exp"}', [3])


def test_malformed_json_is_graph_error_not_a_crash() -> None:
    ng = _rlx.Graph("raw")
    for bad in ("", "{", "[]", '{"op": "no_such_op"}', '{"op": "narrow", "axis": "x"}', "\x00"):
        with pytest.raises(rlx.GraphError, match=r"^\[graph\] bad op description"):
            ng.add(bad, [])
    with pytest.raises(rlx.GraphError, match=r"^\[serde\]"):
        _rlx.Graph.from_json('{"name": 1}')
    assert len(ng) == 0


def test_no_panic_aborts_the_interpreter() -> None:
    # Hostile inputs in a child interpreter: whatever happens, the process must
    # end normally (exit code 0) having seen only Python exceptions; an abort
    # from a Rust panic would kill it with a signal instead.
    code = r"""
import json, rlx
from rlx import _rlx
g = _rlx.Graph("x")
x = g.add(json.dumps({"op": "input", "shape": {"dims": [2, 3], "dtype": "f32"}}), [])
hostile = [
    ({"op": "narrow", "axis": 1, "start": 2**63, "len": 2**63}, [x]),
    ({"op": "reshape", "dims": [2**62, 2**62]}, [x]),
    ({"op": "transpose", "perm": [5, 5]}, [x]),
    ({"op": "expand", "dims": []}, [x]),
    ({"op": "concat", "axis": -2**63}, [x, x]),
    ({"op": "conv2d", "stride": [0, 0], "padding": [0, 0], "dilation": [0, 0], "groups": 0},
     [x, x]),
    ({"op": "scaled_quant_scale", "fmt": "int8", "layout": {"block": {"size": 0}}}, [x]),
    ({"op": "constant", "shape": {"dims": [2**40, 2**40], "dtype": "f32"}, "values": [1.0]},
     []),
]
seen = 0
for op, ins in hostile:
    try:
        g.add(json.dumps(op), ins)
    except rlx.RlxError:
        seen += 1
    except BaseException as e:  # a PanicException would land here
        print("NON-RLX", type(e).__name__, e)
        raise SystemExit(3)
print("ok", seen, len(hostile))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert r.stdout.startswith("ok"), r.stdout
    _, seen, total = r.stdout.split()
    assert int(seen) == int(total)  # every hostile op is rejected


def test_oversized_constant_rejected(g: Graph) -> None:
    with pytest.raises(rlx.ShapeError, match=r"^\[constant\]"):
        g.constant(1.0, shape=[2**40, 2**40])


def test_exceptions_pickle_across_processes() -> None:
    # multiprocessing / pytest-xdist send exceptions by their import path.
    import pickle

    e = pickle.loads(pickle.dumps(rlx.ShapeError("[binary] x")))
    assert type(e) is rlx.ShapeError and str(e) == "[binary] x"
    assert rlx.GraphError.__module__ == "rlx._rlx"
