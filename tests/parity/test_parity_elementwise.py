"""Host kernels vs numpy reference: the elementwise family.

Covers activation_out (17 activations, f32 and f16), binary / bias_add /
binary_broadcast (7 ops, singletons, scalars, rank 1..5, f16, promotion),
compare, where, cast / cast_host, fma, elementwise_region and fused_swiglu,
plus NaN / inf propagation and a few whole graphs against plain numpy.

Tolerances: f32 ``atol = rtol = 1e-5``; f16 ``1e-2`` (host kernels compute
in f32 and round once, the reference in f64 and rounds once, so f16 results
differ by at most one f16 ulp). Casts, compares and selects are exact.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import rlx
from _harness import check, rand

ACTS = (
    "gelu", "gelu_approx", "silu", "relu", "sigmoid", "tanh", "exp", "log", "sqrt",
    "rsqrt", "neg", "abs", "sin", "cos", "tan", "atan", "round",
)  # fmt: skip
BINARY = ("add", "sub", "mul", "div", "max", "min", "pow")
COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")

#: Input ranges inside each activation's domain (log / sqrt / rsqrt need
#: positive inputs; tan stays away from its poles).
RANGES: dict[str, tuple[float, float]] = {
    "log": (0.05, 6.0),
    "sqrt": (0.0, 6.0),
    "rsqrt": (0.05, 6.0),
    "tan": (-1.4, 1.4),
    "exp": (-6.0, 6.0),
}

NP_DT = {"f32": np.float32, "f16": np.float16}


def _act_input(act: str, n: int, dt: str) -> np.ndarray:
    if act == "round":
        # exact halves exercise ties-to-even
        return (np.arange(n) - n // 2).astype(NP_DT[dt]) / 2
    lo, hi = RANGES.get(act, (-5.0, 5.0))
    return rand([n], dt, lo=lo, hi=hi, seed=len(act))


# ------------------------------------------------------------- activations


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("act", ACTS)
def test_activation(act: str, dt: str) -> None:
    n = 33 * 7
    g = rlx.Graph()
    x = g.input("x", [33, 7], dt)
    g.outputs(g.activation(x, act))
    # the f32 tanh GELU has the seed's own thunk
    thunk = "gelu_approx_out" if (act, dt) == ("gelu_approx", "f32") else "activation_out"
    check(g, {"x": _act_input(act, n, dt).reshape(33, 7)}, expect=[thunk])


@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_activation_nan_inf(dt: str) -> None:
    special = np.array(
        [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 100.0, -100.0, 0.5], NP_DT[dt]
    )
    g = rlx.Graph()
    x = g.input("x", [special.size], dt)
    g.outputs(*[g.activation(x, a, name=a) for a in ACTS])
    check(g, {"x": special}, expect=["activation_out"])


# ----------------------------------------------------------------- binary


def _binary_inputs(op: str, sa: list[int], sb: list[int], dt: str) -> dict[str, np.ndarray]:
    if op == "pow":
        return {"a": rand(sa, dt, lo=0.1, hi=3.0, seed=1), "b": rand(sb, dt, lo=-2, hi=2, seed=2)}
    b = rand(sb, dt, seed=2)
    if op == "div":
        b = np.where(np.abs(b) < 0.25, 0.5, b).astype(b.dtype)
    return {"a": rand(sa, dt, seed=1), "b": b}


SHAPES = [
    ([13], [13]),  # rank 1, dense
    ([7, 33], [7, 33]),
    ([3, 7], [7]),  # trailing (bias-add for add)
    ([7], [3, 7]),  # trailing on the left
    ([3, 1, 5], [3, 7, 5]),  # mid-shape singleton
    ([3, 7, 1], [1, 7, 5]),  # both broadcast
    ([1], [3, 7]),  # scalar-like
    ([2, 3, 1, 5], [3, 7, 1]),  # rank 4, both broadcast
    ([2, 1, 3, 1, 5], [1, 7, 1, 4, 5]),  # rank 5
    ([2, 3, 4, 5, 6], [2, 3, 4, 5, 6]),  # rank 5 dense
]


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("op", BINARY)
def test_binary_shapes(op: str, dt: str) -> None:
    g = rlx.Graph()
    outs = []
    feeds: dict[str, np.ndarray] = {}
    for i, (sa, sb) in enumerate(SHAPES):
        a = g.input(f"a{i}", sa, dt)
        b = g.input(f"b{i}", sb, dt)
        outs.append(g.binary(a, b, op, name=f"o{i}"))
        f = _binary_inputs(op, sa, sb, dt)
        feeds[f"a{i}"], feeds[f"b{i}"] = f["a"], f["b"]
    g.outputs(*outs)
    res = check(g, feeds, expect=["binary", "binary_broadcast"])
    if op == "add":
        assert res.by_thunk.get("bias_add", 0) >= 2, res.exe.schedule
    for i in range(len(SHAPES)):
        want = {
            "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
            "max": np.maximum, "min": np.minimum, "pow": np.power,
        }[op](feeds[f"a{i}"].astype(np.float64), feeds[f"b{i}"].astype(np.float64))  # fmt: skip
        tol = 1e-5 if dt == "f32" else 1e-2
        np.testing.assert_allclose(res.host[f"o{i}"], want, rtol=tol, atol=tol)


@pytest.mark.parametrize("op", BINARY)
def test_binary_scalar_constant(op: str) -> None:
    g = rlx.Graph()
    x = g.input("x", [7, 13])
    g.outputs(g.binary(x, 1.5, op, name="xs"), g.binary(2.5, x, op, name="sx"))
    feeds = {"x": rand([7, 13], lo=0.1, hi=3.0)}
    check(g, feeds)


@pytest.mark.parametrize(
    ("da", "db"), [("f16", "f32"), ("f32", "f16"), ("i32", "f32"), ("f32", "i64"), ("u8", "f16")]
)
def test_binary_promotion(da: str, db: str) -> None:
    g = rlx.Graph()
    a = g.input("a", [3, 7], da)
    b = g.input("b", [7], db)
    g.outputs(g.add(a, b, name="s"), g.mul(a, b, name="p"))
    feeds = {"a": rand([3, 7], da, lo=0, hi=9, seed=1), "b": rand([7], db, lo=-4, hi=4, seed=2)}
    res = check(g, feeds)
    want = feeds["a"].astype(np.float64) + feeds["b"].astype(np.float64)
    np.testing.assert_allclose(res.host["s"], want, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_binary_nan_inf(dt: str) -> None:
    vals = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -2.0, 0.5], NP_DT[dt])
    a = np.repeat(vals, vals.size)
    b = np.tile(vals, vals.size)
    g = rlx.Graph()
    x = g.input("a", [a.size], dt)
    y = g.input("b", [b.size], dt)
    row = g.input("row", [vals.size], dt)
    mat = g.input("mat", [vals.size, vals.size], dt)
    outs = [g.binary(x, y, op, name=op) for op in BINARY]
    outs += [g.binary(mat, row, op, name=f"bc_{op}") for op in BINARY]
    g.outputs(*outs)
    check(g, {"a": a, "b": b, "row": vals, "mat": a.reshape(vals.size, vals.size)})


# ---------------------------------------------------------- compare / where


@pytest.mark.parametrize("dt", ["f32", "f16", "i32"])
@pytest.mark.parametrize("op", COMPARE)
def test_compare(op: str, dt: str) -> None:
    g = rlx.Graph()
    a = g.input("a", [3, 13], dt)
    b = g.input("b", [3, 13], dt)
    r = g.input("r", [13], dt)
    g.outputs(
        g.compare(a, b, op, name="full"),
        g.compare(a, r, op, name="bcast"),
        g.compare(a, 0.0 if dt != "i32" else 0, op, name="scalar"),
    )
    av = rand([3, 13], dt, lo=-3, hi=3, seed=1)
    bv = av.copy()
    bv[1] = rand([13], dt, lo=-3, hi=3, seed=2)  # some equal, some not
    if dt != "i32":
        av[0, :3] = np.nan
    res = check(g, {"a": av, "b": bv, "r": bv[1]}, expect=["compare"])
    fn = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
          "gt": np.greater, "ge": np.greater_equal}[op]  # fmt: skip
    np.testing.assert_array_equal(res.host["full"], fn(av, bv))
    np.testing.assert_array_equal(res.host["bcast"], fn(av, bv[1]))
    assert res.host["full"].dtype == np.bool_


@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_where(dt: str) -> None:
    g = rlx.Graph()
    c = g.input("c", [3, 1, 13], "bool")
    a = g.input("a", [3, 7, 13], dt)
    b = g.input("b", [13], dt)
    g.outputs(
        g.where(c, a, b, name="bc"),
        g.where(c, a, 2.0, name="scalar"),
    )
    feeds = {"c": rand([3, 1, 13], "bool"), "a": rand([3, 7, 13], dt, seed=1),
             "b": rand([13], dt, seed=2)}  # fmt: skip
    feeds["a"][0, 0, 0] = np.nan
    res = check(g, feeds, expect=["where"])
    np.testing.assert_array_equal(res.host["bc"], np.where(feeds["c"], feeds["a"], feeds["b"]))


# ------------------------------------------------------------------- casts

CASTS = ["f32", "f16", "f64", "i32", "i64", "u8", "bool"]


def _cast_src(dt: str) -> np.ndarray:
    if dt in ("f32", "f16", "f64"):
        v = np.array([0.0, -0.0, 1.5, -1.5, 2.7, -2.7, 255.9, 300.0, -300.0, 1e-3, 7.0,
                      np.nan, np.inf, -np.inf, 100000.0], np.float64)  # fmt: skip
        with np.errstate(over="ignore"):
            return v.astype(NP_DT.get(dt, np.float64))
    if dt == "bool":
        return np.array([True, False, True] * 5)
    if dt == "u8":
        return np.arange(0, 255, 17, dtype=np.uint8)
    v = np.array([0, 1, -1, 2, 127, 128, 255, 256, -129, 65504, 65505, 1 << 24, (1 << 24) + 1,
                  -(1 << 30), 7], np.int64)  # fmt: skip
    return v.astype(np.int32 if dt == "i32" else np.int64)


@pytest.mark.parametrize("src", CASTS)
@pytest.mark.parametrize("dst", CASTS)
def test_cast(src: str, dst: str) -> None:
    if src == dst:
        pytest.skip("identity cast is a view (tested below)")
    x = _cast_src(src)
    g = rlx.Graph()
    xi = g.input("x", [x.size], src)
    g.outputs(g.cast(xi, dst))
    res = check(g, {"x": x})
    assert set(res.by_thunk) <= {"cast", "cast_host"}, res.by_thunk


def test_cast_identity_is_view() -> None:
    g = rlx.Graph()
    x = g.input("x", [7])
    g.outputs(g.exp(g.cast(x, "f32")))
    res = check(g, {"x": rand([7])})
    assert res.by_thunk == {"activation_out": 1}


# --------------------------------------------------------------------- fma


@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_fma(dt: str) -> None:
    g = rlx.Graph()
    a = g.input("a", [7, 13], dt)
    b = g.input("b", [13], dt)
    c = g.input("c", [7, 1], dt)
    g.outputs(g.fma(a, b, c, name="bc"), g.fma(a, a, a, name="dense"))
    feeds = {"a": rand([7, 13], dt, seed=1), "b": rand([13], dt, seed=2),
             "c": rand([7, 1], dt, seed=3)}  # fmt: skip
    res = check(g, feeds, expect=["fma"])
    want = feeds["a"].astype(np.float64) * feeds["b"] + feeds["c"]
    tol = 1e-5 if dt == "f32" else 1e-2
    np.testing.assert_allclose(res.host["bc"], want, rtol=tol, atol=tol)


# ----------------------------------------------------------------- regions


def test_region_chain() -> None:
    g = rlx.Graph()
    x0 = g.input("x0", [7, 13])
    x1 = g.input("x1", [7, 13])
    x2 = g.input("x2", [13])  # trailing broadcast
    x3 = g.input("x3", [1])  # scalar
    steps = [
        ("mul", "x0", "x1"),
        ("add", "s0", "x2"),
        ("silu", "s1"),
        ("sub", "s2", "x3"),
        ("cast", "f16", "s3"),
        ("max", "s4", "x0"),
        ("exp", "s5"),
        ("div", "s6", "x1"),
        ("cast", "f32", "s7"),
    ]
    g.outputs(g.elementwise_region([x0, x1, x2, x3], steps))
    feeds = {"x0": rand([7, 13], seed=1, lo=-2, hi=2), "x1": rand([7, 13], seed=2, lo=0.5, hi=2),
             "x2": rand([13], seed=3), "x3": rand([1], seed=4)}  # fmt: skip
    res = check(g, feeds, expect=["elementwise_region"])
    a = feeds["x0"] * feeds["x1"] + feeds["x2"]
    a = a / (1 + np.exp(-a)) - feeds["x3"]
    a = np.maximum(a.astype(np.float16).astype(np.float32), feeds["x0"])
    want = np.exp(a) / feeds["x1"]
    np.testing.assert_allclose(res.host[g.outputs()[0].name], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("act", ACTS)
def test_region_every_activation(act: str) -> None:
    g = rlx.Graph()
    x = g.input("x", [33])
    y = g.input("y", [1])
    g.outputs(g.elementwise_region([x, y], [(act, "x0"), ("mul", "s0", "x1")]))
    check(
        g,
        {"x": _act_input(act, 33, "f32"), "y": np.array([1.5], np.float32)},
        expect=["elementwise_region"],
    )


@pytest.mark.parametrize("op", BINARY)
def test_region_every_binary(op: str) -> None:
    g = rlx.Graph()
    x = g.input("x", [3, 13])
    y = g.input("y", [13])
    steps = [(op, "x0", "x1"), ("cast", "bf16", "s0"), ("cast", "i32", "s1"),
             ("cast", "f32", "s2")]  # fmt: skip
    g.outputs(g.elementwise_region([x, y], steps))
    f = _binary_inputs(op, [3, 13], [13], "f32")
    check(g, {"x": f["a"] * 4, "y": f["b"]}, expect=["elementwise_region"])


def test_region_f16_inputs_and_mid_broadcast(monkeypatch: pytest.MonkeyPatch) -> None:
    # the region kernel itself (rewrite_simple_elementwise_regions would turn
    # these short chains into binary / fused-activation thunks)
    monkeypatch.setenv("RLX_DISABLE_PASS", "rewrite_simple_elementwise_regions")
    g = rlx.Graph()
    x = g.input("x", [3, 7, 5], "f16")
    y = g.input("y", [3, 1, 5])  # not a trailing broadcast: materialised
    g.outputs(g.elementwise_region([x, y], [("add", "x0", "x1"), ("tanh", "s0")]))
    check(
        g,
        {"x": rand([3, 7, 5], "f16", seed=1), "y": rand([3, 1, 5], seed=2)},
        expect=["elementwise_region"],
    )


def test_region_nan_inf(monkeypatch: pytest.MonkeyPatch) -> None:
    # the region kernel itself (rewrite_simple_elementwise_regions would turn
    # these short chains into binary / fused-activation thunks)
    monkeypatch.setenv("RLX_DISABLE_PASS", "rewrite_simple_elementwise_regions")
    vals = np.array([np.nan, np.inf, -np.inf, 0.0, 1.0, -1.0], np.float32)
    g = rlx.Graph()
    x = g.input("x", [36])
    y = g.input("y", [36])
    g.outputs(g.elementwise_region([x, y], [("div", "x0", "x1"), ("max", "s0", "x1"),
                                            ("sqrt", "s1")]))  # fmt: skip
    check(g, {"x": np.repeat(vals, 6), "y": np.tile(vals, 6)}, expect=["elementwise_region"])


# ------------------------------------------------------------------ swiglu


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("gate_first", [False, True])
def test_swiglu(gate_first: bool, dt: str) -> None:
    g = rlx.Graph()
    x = g.input("x", [3, 7, 2 * 13], dt)
    g.outputs(g.swiglu(x, gate_first=gate_first))
    xv = rand([3, 7, 26], dt, seed=5)
    res = check(g, {"x": xv}, expect=["fused_swiglu"])
    a, b = xv[..., :13].astype(np.float64), xv[..., 13:].astype(np.float64)

    def silu(v: np.ndarray) -> np.ndarray:
        return v / (1 + np.exp(-v))

    want = silu(a) * b if gate_first else a * silu(b)
    tol = 1e-5 if dt == "f32" else 1e-2
    np.testing.assert_allclose(res.host[g.outputs()[0].name], want, rtol=tol, atol=tol)


# ---------------------------------------------- whole graphs vs plain numpy


def test_graph_mlp_formula() -> None:
    """``gelu(x·w + b)`` style elementwise tail and a GELU-tanh vs the formula."""
    g = rlx.Graph()
    x = g.input("x", [5, 13])
    b = g.param("b", [13])
    h = g.add(x, b)
    y = g.mul(g.gelu(h), g.sigmoid(g.neg(h)))
    z = g.gelu_approx(x)
    g.outputs(y, z)
    xv, bv = rand([5, 13], seed=1), rand([13], seed=2)
    res = check(g, {"x": xv}, {"b": bv})
    hv = xv.astype(np.float64) + bv
    erf = np.vectorize(math.erf)
    want_y = 0.5 * hv * (1 + erf(hv / math.sqrt(2))) / (1 + np.exp(hv))
    want_z = 0.5 * xv * (1 + np.tanh(math.sqrt(2 / math.pi) * (xv + 0.044715 * xv.astype(
        np.float64) ** 3)))  # fmt: skip
    np.testing.assert_allclose(res.host[y.name], want_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(res.host[z.name], want_z, rtol=1e-5, atol=1e-5)


def test_graph_masked_select_formula() -> None:
    """``where(x > t, log(x), rsqrt(x)·2)`` vs numpy."""
    g = rlx.Graph()
    x = g.input("x", [3, 33])
    t = g.input("t", [1])
    y = g.where(g.gt(x, t), g.log(x), g.mul(g.rsqrt(x), 2.0))
    g.outputs(y)
    xv = rand([3, 33], lo=0.1, hi=4, seed=3)
    tv = np.array([1.0], np.float32)
    res = check(g, {"x": xv, "t": tv})
    want = np.where(xv > tv, np.log(xv.astype(np.float64)), 2 / np.sqrt(xv.astype(np.float64)))
    np.testing.assert_allclose(res.host[y.name], want, rtol=1e-5, atol=1e-5)
