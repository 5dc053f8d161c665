"""Data-movement references vs explicit index loops and the ONNX operator
specification's worked examples."""

from __future__ import annotations

import numpy as np
import pytest
from _mem import Arena, npdt, rng


@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_gather(dt: str) -> None:
    vocab, tr = 7, 5
    table = rng(50).normal(size=(vocab, tr)).astype(npdt(dt))
    idx = np.array([6, 0, 3, 3, 1], np.int32)
    a = Arena()
    to, io, do = a.weight(table), a.put(idx), a.out((5, tr), npdt(dt))
    a.run(
        {
            "name": "gather",
            "table": to,
            "idx": io,
            "dst": do,
            "num_idx": 5,
            "trailing": tr,
            "dt": dt,
        }
    )
    want = np.stack([table[int(i)] for i in idx])
    np.testing.assert_array_equal(a.get(do), want)


def test_gather_axis_with_negative_index() -> None:
    o, ad, tr = 3, 5, 2
    table = rng(51).normal(size=(o, ad, tr)).astype(np.float32)
    idx = np.array([4, -1, 0, 2], np.int32)
    a = Arena()
    to, io, do = a.put(table), a.put(idx), a.out((o, 4, tr))
    a.run(
        {
            "name": "gather_axis",
            "table": to,
            "idx": io,
            "dst": do,
            "outer": o,
            "axis_dim": ad,
            "num_idx": 4,
            "trailing": tr,
        }
    )
    want = np.empty((o, 4, tr), np.float32)
    for p in range(o):
        for q, i in enumerate(idx):
            want[p, q] = table[p, i % ad]
    np.testing.assert_array_equal(a.get(do), want)
    bad = a.put(np.array([5], np.int32))
    with pytest.raises(IndexError):
        a.run(
            {
                "name": "gather_axis",
                "table": to,
                "idx": bad,
                "dst": do,
                "outer": o,
                "axis_dim": ad,
                "num_idx": 1,
                "trailing": tr,
            }
        )


@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_narrow_and_split(dt: str) -> None:
    o, sa = 3, 11
    x = rng(52).normal(size=(o, sa)).astype(npdt(dt))
    a = Arena()
    so = a.put(x)
    n1 = a.out((o, 4), npdt(dt))
    segs = [
        (a.out((o, 3), npdt(dt)), 0, 3),
        (a.out((o, 5), npdt(dt)), 3, 5),
        (a.out((o, 3), npdt(dt)), 8, 3),
    ]
    a.run(
        {
            "name": "narrow",
            "src": so,
            "dst": n1,
            "outer": o,
            "src_axis": sa,
            "start": 7,
            "len": 4,
            "dt": dt,
        }
    )
    a.run(
        {"name": "split_lastax", "src": so, "outer": o, "src_axis": sa, "dt": dt, "segments": segs}
    )
    np.testing.assert_array_equal(a.get(n1), [[x[i, j] for j in range(7, 11)] for i in range(o)])
    for off, st, ln in segs:
        np.testing.assert_array_equal(
            a.get(off), [[x[i, j] for j in range(st, st + ln)] for i in range(o)]
        )


@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_copy(dt: str) -> None:
    x = rng(53).normal(size=13).astype(npdt(dt))
    a = Arena()
    so, do = a.put(x), a.out(13, npdt(dt))
    a.run({"name": "copy", "src": so, "dst": do, "len": 13, "dt": dt})
    np.testing.assert_array_equal(a.get(do), x)


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("inner", [1, 3])
def test_concat(inner: int, dt: str) -> None:
    o, lens = 2, [3, 1, 5]
    r = rng(54)
    parts = [r.normal(size=(o, n, inner)).astype(npdt(dt)) for n in lens]
    a = Arena()
    offs = [a.put(p) for p in parts]
    do = a.out((o, sum(lens), inner), npdt(dt))
    a.run(
        {
            "name": "concat",
            "dst": do,
            "outer": o,
            "dst_axis": sum(lens),
            "inner": inner,
            "dt": dt,
            "inputs": list(zip(offs, lens)),
        }
    )
    got = a.get(do)
    pos = 0
    for p, n in zip(parts, lens):
        for i in range(o):
            for j in range(n):
                np.testing.assert_array_equal(got[i, pos + j], p[i, j])
        pos += n


@pytest.mark.parametrize(
    "dims,perm", [([3, 5, 7], [2, 0, 1]), ([2, 3, 4, 5], [0, 2, 3, 1]), ([13], [0])]
)
def test_transpose_permute(dims: list[int], perm: list[int]) -> None:
    x = rng(55).normal(size=dims).astype(np.float32)
    in_str = [int(np.prod(dims[d + 1 :])) for d in range(len(dims))]
    out_dims = [dims[p] for p in perm]
    a = Arena()
    so, do = a.put(x), a.out(out_dims)
    a.run(
        {
            "name": "transpose",
            "src": so,
            "dst": do,
            "total": x.size,
            "out_dims": out_dims,
            "in_strides": [in_str[p] for p in perm],
        }
    )
    got = a.get(do)
    for idx in np.ndindex(*out_dims):
        src_idx = [0] * len(dims)
        for o_ax, p in enumerate(perm):
            src_idx[p] = idx[o_ax]
        assert got[idx] == x[tuple(src_idx)]


def test_transpose_broadcast_stride_zero() -> None:
    x = np.arange(5, dtype=np.float32)
    a = Arena()
    so, do = a.put(x), a.out((3, 5))
    a.run(
        {
            "name": "transpose",
            "src": so,
            "dst": do,
            "total": 15,
            "out_dims": [3, 5],
            "in_strides": [0, 1],
        }
    )
    np.testing.assert_array_equal(a.get(do), [list(range(5))] * 3)


def test_scatter_add_duplicates() -> None:
    nu, od, tr = 6, 4, 3
    upd = rng(56).normal(size=(nu, tr)).astype(np.float32)
    idx = np.array([1, 3, 1, 0, 1, 3], np.int32)
    a = Arena()
    uo, io, do = a.put(upd), a.put(idx), a.out((od, tr))
    a.run(
        {
            "name": "scatter_add",
            "updates": uo,
            "indices": io,
            "dst": do,
            "num_updates": nu,
            "out_dim": od,
            "trailing": tr,
        }
    )
    want = np.zeros((od, tr))
    for u in range(nu):
        for c in range(tr):
            want[idx[u], c] += float(upd[u, c])
    np.testing.assert_allclose(a.get(do), want, atol=1e-6)
    assert (a.get(do)[2] == 0).all()  # untouched row is zero, not poison


@pytest.mark.parametrize("dtype,eb", [(np.uint8, 1), (np.float16, 2), (np.int64, 8)])
@pytest.mark.parametrize("mask", [[True, False, True], [False, True, False], [False] * 3])
def test_reverse(dtype: type, eb: int, mask: list[bool]) -> None:
    dims = [2, 3, 5]
    x = (np.arange(30) * 7 + 1).astype(dtype).reshape(dims)
    a = Arena()
    so, do = a.put(x), a.out(dims, dtype)
    a.run(
        {"name": "reverse", "src": so, "dst": do, "dims": dims, "rev_mask": mask, "elem_bytes": eb}
    )
    got = a.get(do)
    for idx in np.ndindex(*dims):
        src = tuple(dims[d] - 1 - i if mask[d] else i for d, i in enumerate(idx))
        assert got[idx] == x[src]


@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_resize_nearest_2x(dt: str) -> None:
    n, c, h, w = 2, 3, 3, 5
    x = rng(57).normal(size=(n, c, h, w)).astype(npdt(dt))
    a = Arena()
    so, do = a.put(x), a.out((n, c, 2 * h, 2 * w), npdt(dt))
    a.run(
        {
            "name": "resize_nearest_2x",
            "src": so,
            "dst": do,
            "n": n,
            "c": c,
            "h": h,
            "w": w,
            "dt": dt,
        }
    )
    got = a.get(do)
    for idx in np.ndindex(*got.shape):
        assert got[idx] == x[idx[0], idx[1], idx[2] // 2, idx[3] // 2]


# ------------------------------------------------------ ONNX indexing examples


def _indexing(
    kind: str,
    data: np.ndarray,
    indices: np.ndarray,
    out_shape: tuple,
    updates: np.ndarray | None = None,
    **kw: int,
) -> np.ndarray:
    a = Arena()
    do, io = a.put(data), a.put(indices.astype(np.int32))
    uo = a.put(updates.astype(data.dtype)) if updates is not None else 0
    oo = a.out(out_shape, data.dtype)
    dt = {np.dtype(np.float32): "f32", np.dtype(np.int64): "i64"}[data.dtype]
    a.run(
        {
            "name": "cpu_indexing",
            "kind": kind,
            "data": do,
            "indices": io,
            "updates": uo,
            "dst": oo,
            "data_dims": list(data.shape),
            "indices_dims": list(indices.shape),
            "dt": dt,
            **kw,
        }
    )
    return a.get(oo)


def test_scatter_nd_onnx_examples() -> None:
    data = np.arange(1, 9, dtype=np.float32)
    got = _indexing(
        "scatter_nd",
        data,
        np.array([[4], [3], [1], [7]]),
        (8,),
        np.array([9, 10, 11, 12], np.float32),
    )
    np.testing.assert_array_equal(got, [1, 11, 3, 10, 9, 6, 7, 12])
    data = np.array([[[1, 2, 3, 4], [5, 6, 7, 8], [8, 7, 6, 5], [4, 3, 2, 1]]] * 4, np.float32)
    upd = np.array(
        [
            [[5, 5, 5, 5], [6, 6, 6, 6], [7, 7, 7, 7], [8, 8, 8, 8]],
            [[1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3], [4, 4, 4, 4]],
        ],
        np.float32,
    )
    got = _indexing("scatter_nd", data, np.array([[0], [-2]]), (4, 4, 4), upd)
    want = data.copy()
    want[0], want[2] = upd[0], upd[1]
    np.testing.assert_array_equal(got, want)


def test_scatter_elements_onnx_examples() -> None:
    data = np.zeros((3, 3), np.float32)
    got = _indexing(
        "scatter_elements",
        data,
        np.array([[1, 0, 2], [0, 2, 1]]),
        (3, 3),
        np.array([[1.0, 1.1, 1.2], [2.0, 2.1, 2.2]], np.float32),
        axis=0,
    )
    np.testing.assert_allclose(got, [[2.0, 1.1, 0.0], [1.0, 0.0, 2.2], [0.0, 2.1, 1.2]])
    data = np.array([[1, 2, 3, 4, 5]], np.float32)
    got = _indexing(
        "scatter_elements",
        data,
        np.array([[1, 3]]),
        (1, 5),
        np.array([[1.1, 2.1]], np.float32),
        axis=1,
    )
    np.testing.assert_allclose(got, [[1.0, 1.1, 3.0, 2.1, 5.0]])
    got = _indexing(
        "scatter_elements",
        data,
        np.array([[-4, -2]]),
        (1, 5),
        np.array([[1.1, 2.1]], np.float32),
        axis=-1,
    )
    np.testing.assert_allclose(got, [[1.0, 1.1, 3.0, 2.1, 5.0]])


def test_gather_nd_onnx_examples() -> None:
    d = np.array([[0, 1], [2, 3]], np.int64)
    np.testing.assert_array_equal(
        _indexing("gather_nd", d, np.array([[0, 0], [1, 1]]), (2,)), [0, 3]
    )
    np.testing.assert_array_equal(
        _indexing("gather_nd", d, np.array([[1], [0]]), (2, 2)), [[2, 3], [0, 1]]
    )
    d3 = np.array([[[0, 1], [2, 3]], [[4, 5], [6, 7]]], np.float32)
    np.testing.assert_array_equal(
        _indexing("gather_nd", d3, np.array([[[0, 1]], [[1, 0]]]), (2, 1, 2)), [[[2, 3]], [[4, 5]]]
    )
    np.testing.assert_array_equal(
        _indexing("gather_nd", d3, np.array([[1], [0]]), (2, 2), batch_dims=1), [[2, 3], [4, 5]]
    )


def test_gather_elements_onnx_examples() -> None:
    d = np.array([[1, 2], [3, 4]], np.float32)
    np.testing.assert_array_equal(
        _indexing("gather_elements", d, np.array([[0, 0], [1, 0]]), (2, 2), axis=1),
        [[1, 1], [4, 3]],
    )
    d = np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9]], np.float32)
    np.testing.assert_array_equal(
        _indexing("gather_elements", d, np.array([[1, 2, 0], [2, 0, 0]]), (2, 3), axis=0),
        [[4, 8, 3], [7, 2, 3]],
    )
    np.testing.assert_array_equal(
        _indexing("gather_elements", d, np.array([[-1, -2, 0], [2, 0, 0]]), (2, 3), axis=0),
        [[7, 5, 3], [7, 2, 3]],
    )


def test_indexing_out_of_range_raises() -> None:
    with pytest.raises(IndexError):
        _indexing(
            "gather_elements", np.zeros((2, 2), np.float32), np.array([[0, 2]]), (1, 2), axis=1
        )
