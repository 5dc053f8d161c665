"""Host kernels vs numpy reference: layout and indexing.

Covers narrow (thunk and view), concat, gather, gather_axis, transpose,
expand, reverse, scatter_add, resize_nearest_2x and the ONNX indexing ops
(``cpu_indexing``, reference-only on the host: asserted to fall back).
Data movement is bit-exact, so every comparison here is exact (floats
compare with zero tolerance; NaN payloads move as raw words).
"""

from __future__ import annotations

import numpy as np
import pytest
import rlx
from _harness import check, rand

DTS = ["f32", "f16", "i64"]
EXACT = {"atol": 0.0, "rtol": 0.0}


def _data(shape: list[int], dt: str, seed: int = 0) -> np.ndarray:
    return rand(shape, dt, lo=-1000, hi=1000, seed=seed)


# ------------------------------------------------------------------ narrow


@pytest.mark.parametrize("dt", DTS + ["i32"])
@pytest.mark.parametrize(
    ("shape", "axis", "start", "length"),
    [
        ([3, 7, 13], 1, 2, 4),
        ([3, 7, 13], 2, 5, 7),
        ([3, 7, 13], -1, 0, 1),
        ([5, 3], 1, 1, 1),
        ([2, 3, 4, 5], 2, 1, 3),
    ],  # fmt: skip
)
def test_narrow_thunk(shape: list[int], axis: int, start: int, length: int, dt: str) -> None:
    g = rlx.Graph()
    x = g.input("x", shape, dt)
    y = g.narrow(x, axis, start, length)
    g.outputs(y)
    xv = _data(shape, dt)
    res = check(g, {"x": xv}, expect=["narrow"], **EXACT)
    ax = axis % len(shape)
    want = np.take(xv, range(start, start + length), axis=ax)
    np.testing.assert_array_equal(res.host[y.name], want)


@pytest.mark.parametrize(
    ("shape", "axis", "start", "length"),
    [([7, 13], 0, 2, 3), ([1, 7, 13], 1, 3, 4), ([1, 1, 5, 3], 2, 4, 1)],
)
def test_narrow_leading_is_view(shape: list[int], axis: int, start: int, length: int) -> None:
    """A narrow whose leading dims are all 1 aliases its parent: no thunk."""
    g = rlx.Graph()
    x = g.input("x", shape)
    y = g.exp(g.narrow(x, axis, start, length))
    g.outputs(y)
    xv = _data(shape, "f32") / 500
    res = check(g, {"x": xv})
    assert res.by_thunk == {"activation_out": 1}, res.exe.schedule
    want = np.exp(np.take(xv, range(start, start + length), axis=axis).astype(np.float64))
    np.testing.assert_allclose(res.host[y.name], want, rtol=1e-5)


# ------------------------------------------------------------------ concat


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("k", [2, 3, 4])
def test_concat(k: int, axis: int, dt: str) -> None:
    base = [3, 5, 7]
    g = rlx.Graph()
    xs, feeds = [], {}
    for i in range(k):
        s = list(base)
        s[axis % 3] = i + 1 if i % 2 else 2 * i + 1  # odd sizes, all different
        xs.append(g.input(f"x{i}", s, dt))
        feeds[f"x{i}"] = _data(s, dt, seed=i)
    y = g.concat(xs, axis)
    g.outputs(y)
    res = check(g, feeds, expect=["concat"], **EXACT)
    want = np.concatenate([feeds[f"x{i}"] for i in range(k)], axis=axis)
    np.testing.assert_array_equal(res.host[y.name], want)


# ------------------------------------------------------------------ gather


@pytest.mark.parametrize("idt", ["i32", "i64"])
@pytest.mark.parametrize("dt", DTS)
def test_gather(dt: str, idt: str) -> None:
    g = rlx.Graph()
    table = g.param("table", [13, 3, 5], dt)
    idx = g.input("idx", [2, 7], idt)
    y = g.gather(table, idx)
    g.outputs(y)
    tv = _data([13, 3, 5], dt)
    iv = rand([2, 7], idt, lo=0, hi=13, seed=3)
    iv[0, 0], iv[1, 6] = 0, 12
    res = check(g, {"idx": iv}, {"table": tv}, expect=["gather"], **EXACT)
    np.testing.assert_array_equal(res.host[y.name], tv[iv])


@pytest.mark.parametrize("idt", ["i32", "i64"])
@pytest.mark.parametrize("dt", ["f32", "i64", "i32"])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_gather_axis(axis: int, dt: str, idt: str) -> None:
    shape = [3, 7, 5]
    g = rlx.Graph()
    x = g.input("x", shape, dt)
    idx = g.input("idx", [4], idt)
    y = g.gather_axis(x, idx, axis)
    g.outputs(y)
    n = shape[axis]
    iv = np.array([0, n - 1, -1, 1 % n], {"i32": np.int32, "i64": np.int64}[idt])
    xv = _data(shape, dt)
    res = check(g, {"x": xv, "idx": iv}, expect=["gather_axis"], **EXACT)
    np.testing.assert_array_equal(res.host[y.name], np.take(xv, iv, axis=axis))


# --------------------------------------------------------------- transpose


PERMS = [
    ([7, 13], [1, 0]),
    ([3, 5, 7], [2, 0, 1]),
    ([3, 5, 7], [0, 2, 1]),
    ([2, 3, 5, 7], [3, 1, 0, 2]),
    ([2, 3, 1, 5, 3], [4, 2, 0, 3, 1]),
    ([33, 65], [1, 0]),  # large enough for a blocked 2-D path
]


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize(("shape", "perm"), PERMS)
def test_transpose(shape: list[int], perm: list[int], dt: str) -> None:
    g = rlx.Graph()
    x = g.input("x", shape, dt)
    y = g.transpose(x, perm)
    g.outputs(y)
    xv = _data(shape, dt)
    res = check(g, {"x": xv}, **EXACT)
    np.testing.assert_array_equal(res.host[y.name], np.transpose(xv, perm))


# ------------------------------------------------------------------ expand


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize(
    ("src", "dst"),
    [([3, 1, 5], [3, 7, 5]), ([5], [2, 3, 5]), ([1, 1], [7, 13]), ([3, 1], [2, 3, 4])],  # fmt: skip
)
def test_expand(src: list[int], dst: list[int], dt: str) -> None:
    g = rlx.Graph()
    x = g.input("x", src, dt)
    y = g.expand(x, dst)
    g.outputs(y)
    xv = _data(src, dt)
    res = check(g, {"x": xv}, **EXACT)
    np.testing.assert_array_equal(res.host[y.name], np.broadcast_to(xv, dst))


# ----------------------------------------------------------------- reverse


@pytest.mark.parametrize("dt", ["f32", "f16", "i64", "u8", "bool"])
@pytest.mark.parametrize("axes", [[0], [-1], [0, 2], [1], [0, 1, 2]])
def test_reverse(axes: list[int], dt: str) -> None:
    g = rlx.Graph()
    x = g.input("x", [3, 5, 7], dt)
    y = g.reverse(x, axes)
    g.outputs(y)
    xv = rand([3, 5, 7], dt, lo=0, hi=200)
    res = check(g, {"x": xv}, expect=["reverse"], **EXACT)
    np.testing.assert_array_equal(res.host[y.name], np.flip(xv, axis=tuple(axes)))


# ------------------------------------------------------------- scatter_add


@pytest.mark.parametrize("idt", ["i32", "i64"])
def test_scatter_add(idt: str) -> None:
    g = rlx.Graph()
    upd = g.input("u", [13, 3, 5])
    idx = g.input("i", [13], idt)
    y = g.scatter_add(upd, idx, 7)
    g.outputs(y)
    uv = rand([13, 3, 5], seed=1)
    iv = rand([13], idt, lo=0, hi=7, seed=2)
    iv[:3] = 4  # duplicates accumulate
    res = check(g, {"u": uv, "i": iv}, expect=["scatter_add"])
    want = np.zeros((7, 3, 5))
    np.add.at(want, iv, uv.astype(np.float64))
    np.testing.assert_allclose(res.host[y.name], want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------- resize nearest


@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_resize_nearest2x(dt: str) -> None:
    g = rlx.Graph()
    x = g.input("x", [2, 3, 5, 7], dt)
    y = g.resize_nearest2x(x)
    g.outputs(y)
    xv = _data([2, 3, 5, 7], dt)
    res = check(g, {"x": xv}, expect=["resize_nearest_2x"], **EXACT)
    np.testing.assert_array_equal(res.host[y.name], xv.repeat(2, axis=2).repeat(2, axis=3))


# ------------------------------------------------------- ONNX indexing ops


@pytest.mark.parametrize("dt", ["f32", "f16", "i64", "u8"])
def test_onnx_indexing_native(dt: str) -> None:
    """The ONNX indexing family runs natively on the host (1/2/4/8-byte
    words, asserted: no fallback); results equal the reference and numpy
    bit for bit, negative indices counting from the end."""
    g = rlx.Graph()
    data = g.input("data", [4, 5, 3], dt)
    ie = g.input("ie", [2, 5, 3], "i64")
    ue = g.input("ue", [2, 5, 3], dt)
    ind = g.input("ind", [3, 2], "i32")
    und = g.input("und", [3, 3], dt)
    ge = g.gather_elements(data, ie, 0, name="ge")
    se = g.scatter_elements(data, ie, ue, 0, name="se")
    gn = g.gather_nd(data, ind, name="gn")
    sn = g.scatter_nd(data, ind, und, name="sn")
    g.outputs(ge, se, gn, sn)
    lo, hi = (0, 200) if dt in ("u8", "i64") else (-3, 3)
    dv = rand([4, 5, 3], dt, lo=lo, hi=hi, seed=1)
    iev = np.array([[[0, 1, 2]] * 5, [[3, -1, 0]] * 5], np.int64)
    uev = rand([2, 5, 3], dt, lo=lo, hi=hi, seed=2)
    indv = np.array([[0, 1], [3, 4], [2, -5]], np.int32)
    undv = rand([3, 3], dt, lo=lo, hi=hi, seed=3)
    res = check(g, {"data": dv, "ie": iev, "ue": uev, "ind": indv, "und": undv},
                expect={"cpu_indexing"}, **EXACT)  # fmt: skip
    iw = np.where(iev < 0, iev + 4, iev)
    np.testing.assert_array_equal(res.host["ge"], np.take_along_axis(dv, iw, 0))
    want_se = dv.copy()
    np.put_along_axis(want_se, iw, uev, 0)
    np.testing.assert_array_equal(res.host["se"], want_se)
    np.testing.assert_array_equal(res.host["gn"], dv[indv[:, 0], indv[:, 1]])
    want_sn = dv.copy()
    want_sn[indv[:, 0], indv[:, 1]] = undv
    np.testing.assert_array_equal(res.host["sn"], want_sn)
