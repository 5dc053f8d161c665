"""Element-wise references vs per-element Python (``math``) formulations."""

from __future__ import annotations

import math
import operator

import numpy as np
import pytest
from _mem import Arena, npdt, rng, tol

ACT = {
    "gelu": lambda x: 0.5 * x * (1 + math.erf(x / math.sqrt(2))),
    "gelu_approx": lambda x: (
        0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    ),
    "silu": lambda x: x / (1 + math.exp(-x)),
    "relu": lambda x: x if x > 0 else 0.0,
    "sigmoid": lambda x: 1 / (1 + math.exp(-x)),
    "tanh": math.tanh,
    "exp": math.exp,
    "log": math.log,
    "sqrt": math.sqrt,
    "rsqrt": lambda x: 1 / math.sqrt(x),
    "neg": lambda x: -x,
    "abs": abs,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "atan": math.atan,
    "round": lambda x: float(round(x)),  # Python rounds half to even
}
POSITIVE = {"log", "sqrt", "rsqrt"}
BIN = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.truediv,
    "max": max,
    "min": min,
    "pow": math.pow,
}


def _input(name: str, n: int, seed: int) -> np.ndarray:
    x = rng(seed).uniform(-3, 3, n)
    if name in POSITIVE:
        x = np.abs(x) + 0.1
    if name == "round":
        x = np.concatenate([[0.5, 1.5, 2.5, -0.5, -2.5, 3.49], x[6:]])
    return x


def _loop(fn, xs: np.ndarray) -> np.ndarray:  # noqa: ANN001
    return np.array([fn(float(v)) for v in xs])


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("act", sorted(ACT))
def test_activation_out_and_in_place(act: str, dt: str) -> None:
    n = 13
    x = _input(act, n, 1).astype(npdt(dt))
    want = _loop(ACT[act], x.astype(np.float64))
    a = Arena()
    src, dst = a.put(x), a.out(n, npdt(dt))
    data = a.put(x)
    a.run({"name": "activation_out", "src": src, "dst": dst, "len": n, "act": act, "dt": dt})
    a.run({"name": "activation", "data": data, "len": n, "act": act, "dt": dt})
    np.testing.assert_allclose(a.get(dst).astype(np.float64), want, **tol(dt))
    np.testing.assert_array_equal(a.get(data), a.get(dst))
    np.testing.assert_array_equal(a.get(src), x)  # out-of-place leaves src alone


def test_round_is_half_to_even() -> None:
    a = Arena()
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4999], np.float32)
    d = a.put(x)
    a.run({"name": "activation", "data": d, "len": 6, "act": "round", "dt": "f32"})
    np.testing.assert_array_equal(a.get(d), [0, 2, 2, -0.0, -2, 2])


@pytest.mark.parametrize("name", ["gelu_approx_out", "gelu_approx_host"])
def test_gelu_approx_out(name: str) -> None:
    x = rng(2).normal(size=7).astype(np.float32) * 3
    a = Arena()
    s, d = a.put(x), a.out(7)
    a.run({"name": name, "src": s, "dst": d, "len": 7})
    np.testing.assert_allclose(a.get(d), _loop(ACT["gelu_approx"], x.astype(float)), **tol("f32"))


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("op", sorted(BIN))
def test_binary(op: str, dt: str) -> None:
    n = 11
    r = rng(3)
    lhs = r.uniform(0.5, 2.0, n).astype(npdt(dt))
    rhs = r.uniform(-2.0, 2.0, n).astype(npdt(dt))
    rhs[rhs == 0] = 1
    a = Arena()
    lo, ro, do = a.put(lhs), a.put(rhs), a.out(n, npdt(dt))
    a.run({"name": "binary", "lhs": lo, "rhs": ro, "dst": do, "len": n, "op": op, "dt": dt})
    want = [BIN[op](float(p), float(q)) for p, q in zip(lhs, rhs)]
    np.testing.assert_allclose(a.get(do).astype(float), want, **tol(dt))


def test_binary_max_propagates_nan_and_div_by_zero_is_inf() -> None:
    a = Arena()
    lo = a.put(np.array([np.nan, 1.0, 1.0], np.float32))
    ro = a.put(np.array([1.0, np.nan, 0.0], np.float32))
    d1, d2 = a.out(3), a.out(3)
    a.run({"name": "binary", "lhs": lo, "rhs": ro, "dst": d1, "len": 3, "op": "max", "dt": "f32"})
    a.run({"name": "binary", "lhs": lo, "rhs": ro, "dst": d2, "len": 3, "op": "div", "dt": "f32"})
    assert np.isnan(a.get(d1)[:2]).all()
    assert a.get(d2)[2] == np.inf


@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_fused_binary_and_ternary_activation(dt: str) -> None:
    n = 9
    r = rng(4)
    x, y, z = (r.uniform(-2, 2, n).astype(npdt(dt)) for _ in range(3))
    a = Arena()
    xo, yo, zo, d2, d3 = a.put(x), a.put(y), a.put(z), a.out(n, npdt(dt)), a.out(n, npdt(dt))
    a.run(
        {
            "name": "fused_binary_activation",
            "lhs": xo,
            "rhs": yo,
            "dst": d2,
            "len": n,
            "op": "mul",
            "act": "silu",
            "dt": dt,
        }
    )
    a.run(
        {
            "name": "fused_ternary_activation",
            "lhs": xo,
            "rhs0": yo,
            "rhs1": zo,
            "dst": d3,
            "len": n,
            "op0": "sub",
            "op1": "max",
            "act": "gelu",
            "dt": dt,
        }
    )
    f = [float(v) for v in x], [float(v) for v in y], [float(v) for v in z]
    want2 = [ACT["silu"](p * q) for p, q in zip(f[0], f[1])]
    want3 = [ACT["gelu"](max(p - q, s)) for p, q, s in zip(*f)]
    np.testing.assert_allclose(a.get(d2).astype(float), want2, **tol(dt))
    np.testing.assert_allclose(a.get(d3).astype(float), want3, **tol(dt))


def _bstrides(in_dims: list[int], out_dims: list[int]) -> list[int]:
    pad = [1] * (len(out_dims) - len(in_dims)) + in_dims
    strides, acc = [0] * len(out_dims), 1
    for d in range(len(out_dims) - 1, -1, -1):
        strides[d] = 0 if pad[d] == 1 else acc
        acc *= pad[d]
    return strides


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize(
    "ls,rs",
    [([3, 1, 5], [7, 1]), ([2, 3, 4, 5], [3, 1, 5]), ([1], [5, 3]), ([3, 5, 1, 7], [3, 5, 7, 7])],
)
def test_binary_broadcast(ls: list[int], rs: list[int], dt: str) -> None:
    out = list(np.broadcast_shapes(tuple(ls), tuple(rs)))
    r = rng(5)
    lhs = r.normal(size=ls).astype(npdt(dt))
    rhs = r.normal(size=rs).astype(npdt(dt))
    a = Arena()
    lo, ro, do = a.put(lhs), a.put(rhs), a.out(out, npdt(dt))
    a.run(
        {
            "name": "binary_broadcast",
            "lhs": lo,
            "rhs": ro,
            "dst": do,
            "len": int(np.prod(out)),
            "op": "sub",
            "dt": dt,
            "rank": len(out),
            "out_dims": out,
            "lhs_strides": _bstrides(ls, out),
            "rhs_strides": _bstrides(rs, out),
        }
    )
    want = np.zeros(out)
    for idx in np.ndindex(*out):
        li = tuple(i if d > 1 else 0 for i, d in zip(idx[len(out) - len(ls) :], ls))
        ri = tuple(i if d > 1 else 0 for i, d in zip(idx[len(out) - len(rs) :], rs))
        want[idx] = float(lhs[li]) - float(rhs[ri])
    np.testing.assert_allclose(a.get(do).astype(float), want, **tol(dt))


@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_bias_add(dt: str) -> None:
    m, n = 5, 7
    x = rng(6).normal(size=(m, n)).astype(npdt(dt))
    b = rng(7).normal(size=n).astype(npdt(dt))
    a = Arena()
    xo, bo, do = a.put(x), a.weight(b), a.out((m, n), npdt(dt))
    a.run({"name": "bias_add", "src": xo, "bias": bo, "dst": do, "m": m, "n": n, "dt": dt})
    want = [[float(x[i, j]) + float(b[j]) for j in range(n)] for i in range(m)]
    np.testing.assert_allclose(a.get(do).astype(float), want, **tol(dt))


@pytest.mark.parametrize(
    "op,fn",
    [
        ("eq", operator.eq),
        ("ne", operator.ne),
        ("lt", operator.lt),
        ("le", operator.le),
        ("gt", operator.gt),
        ("ge", operator.ge),
    ],
)
@pytest.mark.parametrize("scal", [(False, False), (True, False), (False, True)])
def test_compare(op: str, fn, scal: tuple[bool, bool]) -> None:  # noqa: ANN001
    n = 7
    lhs = np.array([0, 1, 2, 2, -1, np.nan, 3], np.float32)
    rhs = np.array([0, 2, 1, 2, -1, 1, np.nan], np.float32)
    lhs_in = lhs[:1] if scal[0] else lhs
    rhs_in = rhs[3:4] if scal[1] else rhs
    a = Arena()
    lo, ro, do = a.put(lhs_in), a.put(rhs_in), a.out(n)
    a.run(
        {
            "name": "compare",
            "lhs": lo,
            "rhs": ro,
            "dst": do,
            "len": n,
            "op": op,
            "lhs_scalar": scal[0],
            "rhs_scalar": scal[1],
        }
    )
    want = [
        1.0 if fn(float(lhs_in[0 if scal[0] else i]), float(rhs_in[0 if scal[1] else i])) else 0.0
        for i in range(n)
    ]
    np.testing.assert_array_equal(a.get(do), want)


@pytest.mark.parametrize(
    "flags", [(False, False, False), (True, False, True), (False, True, False), (False, True, True)]
)
def test_where(flags: tuple[bool, bool, bool]) -> None:
    n = 6
    cond = np.array([0, 1, -2, 0, np.nan, 0.5], np.float32)
    x = np.arange(n, dtype=np.float32) + 10
    y = -np.arange(n, dtype=np.float32)
    ins = [cond[1:2] if flags[0] else cond, x[:1] if flags[1] else x, y[2:3] if flags[2] else y]
    a = Arena()
    co, to, fo, do = a.put(ins[0]), a.put(ins[1]), a.put(ins[2]), a.out(n)
    a.run(
        {
            "name": "where",
            "cond": co,
            "on_true": to,
            "on_false": fo,
            "dst": do,
            "len": n,
            "cond_scalar": flags[0],
            "true_scalar": flags[1],
            "false_scalar": flags[2],
        }
    )
    pick = [lambda arr, i, f=f: arr[0] if f else arr[i] for f in flags]
    want = [pick[1](ins[1], i) if pick[0](ins[0], i) != 0 else pick[2](ins[2], i) for i in range(n)]
    np.testing.assert_array_equal(a.get(do), want)


def test_fma() -> None:
    n = 13
    r = rng(8)
    x, y, z = (r.normal(size=n).astype(np.float32) for _ in range(3))
    a = Arena()
    xo, yo, zo, do = a.put(x), a.put(y), a.put(z), a.out(n)
    a.run({"name": "fma", "a": xo, "b": yo, "c": zo, "dst": do, "len": n})
    want = [float(p) * float(q) + float(s) for p, q, s in zip(x, y, z)]
    np.testing.assert_allclose(a.get(do), want, **tol("f32"))


@pytest.mark.parametrize("src_dt,dst_dt", [("f32", "f16"), ("f16", "f32"), ("f32", "f32")])
def test_cast(src_dt: str, dst_dt: str) -> None:
    with np.errstate(over="ignore"):  # 70000 overflows f16 to inf on purpose
        x = np.array([1.0, 1 / 3, 65504.0, 1e-8, -2.5, 70000.0], np.float32).astype(npdt(src_dt))
    a = Arena()
    s, d = a.put(x), a.out(6, npdt(dst_dt))
    a.run({"name": "cast", "src": s, "dst": d, "len": 6, "src_dt": src_dt, "dst_dt": dst_dt})
    with np.errstate(over="ignore"):
        want = [npdt(dst_dt).type(float(v)) for v in x]
    np.testing.assert_array_equal(a.get(d), np.array(want, npdt(dst_dt)))


def test_cast_trunc_f32() -> None:
    x = np.array([1.7, -1.7, 0.2, -0.2, 3.0, -1e9 - 0.5], np.float32)
    a = Arena()
    s, d = a.put(x), a.out(6)
    a.run({"name": "cast_trunc_f32", "src": s, "dst": d, "len": 6})
    np.testing.assert_array_equal(a.get(d), [math.trunc(float(v)) for v in x])


def _cast_host(x: np.ndarray, sdt: str, ddt: str, np_out: np.dtype) -> np.ndarray:
    a = Arena()
    s, d = a.put(x), a.out(x.size, np_out)
    a.run({"name": "cast_host", "src": s, "dst": d, "len": x.size, "src_dt": sdt, "dst_dt": ddt})
    return a.get(d)


def test_cast_host_float_to_int_truncates_and_saturates() -> None:
    x = np.array([1.9, -1.9, 0.5, -0.5, 300.0, -300.0, np.nan, np.inf], np.float32)
    np.testing.assert_array_equal(
        _cast_host(x, "f32", "i32", np.dtype(np.int32)), [1, -1, 0, 0, 300, -300, 0, 2**31 - 1]
    )
    np.testing.assert_array_equal(
        _cast_host(x, "f32", "i8", np.dtype(np.int8)), [1, -1, 0, 0, 127, -128, 0, 127]
    )
    big = np.array([1e19, -1e19, 2.5], np.float64)
    np.testing.assert_array_equal(
        _cast_host(big, "f64", "i64", np.dtype(np.int64)), [2**63 - 1, -(2**63), 2]
    )
    np.testing.assert_array_equal(
        _cast_host(x[:6], "f32", "u8", np.dtype(np.uint8)), [1, 0, 0, 0, 255, 0]
    )


def test_cast_host_int_wraps_and_bool() -> None:
    x = np.array([1, -1, 300, 2**40, 0], np.int64)
    np.testing.assert_array_equal(
        _cast_host(x, "i64", "i8", np.dtype(np.int8)),
        [v & 0xFF if v & 0xFF < 128 else (v & 0xFF) - 256 for v in x],
    )
    np.testing.assert_array_equal(
        _cast_host(x, "i64", "bool", np.dtype(np.bool_)), [True, True, True, True, False]
    )
    np.testing.assert_array_equal(
        _cast_host(x, "i64", "f32", np.dtype(np.float32)), [1, -1, 300, 2.0**40, 0]
    )
    b = np.array([True, False, True])
    np.testing.assert_array_equal(_cast_host(b, "bool", "f16", np.dtype(np.float16)), [1, 0, 1])
    f = np.array([0.0, -0.0, 0.1, np.nan], np.float32)
    np.testing.assert_array_equal(
        _cast_host(f, "f32", "bool", np.dtype(np.bool_)), [False, False, True, True]
    )


def test_cast_host_bf16_round_trip() -> None:
    # bf16 keeps the top 16 bits of f32 with round-to-nearest-even
    x = np.array([1.0, 1.00390625, 1.01171875, 3.14159, -2.0e-3, 1e38], np.float32)
    bits = _cast_host(x, "f32", "bf16", np.dtype(np.uint16))
    want = []
    for v in x:
        u = int(np.float32(v).view(np.uint32))
        lower, upper = u & 0xFFFF, u >> 16
        if lower > 0x8000 or (lower == 0x8000 and upper & 1):
            upper += 1
        want.append(upper)
    np.testing.assert_array_equal(bits, want)
    back = _cast_host(bits, "bf16", "f32", np.dtype(np.float32))
    np.testing.assert_array_equal(back, [np.uint32(w << 16).view(np.float32) for w in want])


def test_cast_host_complex() -> None:
    z = np.array([1 + 2j, -3.5 - 1j], np.complex64)
    np.testing.assert_array_equal(_cast_host(z, "c64", "f32", np.dtype(np.float32)), [1, -3.5])
    x = np.array([2, -7], np.int32)
    np.testing.assert_array_equal(
        _cast_host(x, "i32", "c64", np.dtype(np.complex64)), [2 + 0j, -7 + 0j]
    )


# -------------------------------------------------------------- regions

STEP = 0x8000_0000


def _chain(*steps: tuple[int, int, int, int]) -> list[int]:
    flat = [w for s in steps for w in s]
    return flat + [0] * (128 - len(flat))


def test_elementwise_region_chain_with_scalar_and_modulus() -> None:
    # out = max(silu(x0 * x1) + s2, 0.25) then round-through-f16, then gelu_approx
    n, mod = 15, 5
    r = rng(9)
    x0 = r.normal(size=n).astype(np.float32)
    x1 = r.normal(size=mod).astype(np.float32)
    s2 = np.array([0.3], np.float32)
    q = np.array([0.25], np.float32)
    a = Arena(align=4)
    offs = [a.put(x0), a.put(x1), a.put(s2), a.put(q)]
    dst = a.out(n)
    chain = _chain(
        (2, 2, 0, 1),
        (0, 2, STEP | 0, 0),
        (2, 0, STEP | 1, 2),
        (2, 4, STEP | 2, 3),
        (1, 1, STEP | 3, 0),
        (0, 1, STEP | 4, 0),
    )
    a.run(
        {
            "name": "elementwise_region",
            "len": n,
            "num_inputs": 4,
            "num_steps": 6,
            "dst": dst,
            "input_offs": [o // 4 for o in offs] + [0] * 12,
            "chain": chain,
            "scalar_input_mask": 0b1100,
            "input_modulus": [0, mod] + [0] * 14,
            "prologue": 0,
            "out_n": 0,
            "out_c": 0,
            "out_h": 0,
            "out_w": 0,
            "prologue_input": 0,
        }
    )
    want = []
    for g in range(n):
        v = max(ACT["silu"](float(x0[g]) * float(x1[g % mod])) + float(s2[0]), float(q[0]))
        v = float(np.float16(np.float32(v)))
        want.append(ACT["gelu_approx"](v))
    np.testing.assert_allclose(a.get(dst), want, **tol("f32"))


@pytest.mark.parametrize(
    "sub,fn", [(0, lambda v: v), (1, lambda v: float(np.float16(v))), (3, math.trunc)]
)
def test_elementwise_region_cast_steps(sub: int, fn) -> None:  # noqa: ANN001
    x = np.array([1.2345678, -2.7, 1000.1, 0.33333], np.float32)
    a = Arena(align=4)
    xo, d = a.put(x), a.out(4)
    a.run(
        {
            "name": "elementwise_region",
            "len": 4,
            "num_inputs": 1,
            "num_steps": 1,
            "dst": d,
            "input_offs": [xo // 4] + [0] * 15,
            "chain": _chain((1, sub, 0, 0)),
            "scalar_input_mask": 0,
            "input_modulus": [0] * 16,
            "prologue": 0,
        }
    )
    np.testing.assert_array_equal(a.get(d), np.array([fn(float(v)) for v in x], np.float32))


def test_elementwise_region_bf16_cast_step() -> None:
    x = np.array([1.00390625, 1.01171875, 3.0e-3], np.float32)
    a = Arena(align=4)
    xo, d = a.put(x), a.out(3)
    a.run(
        {
            "name": "elementwise_region",
            "len": 3,
            "num_inputs": 1,
            "num_steps": 1,
            "dst": d,
            "input_offs": [xo // 4] + [0] * 15,
            "chain": _chain((1, 2, 0, 0)),
            "scalar_input_mask": 0,
            "input_modulus": [0] * 16,
            "prologue": 0,
        }
    )
    got = a.get(d)
    assert got[0] == 1.0 and got[1] == 1.015625  # ties to even, then round up
    assert int(got[2:].view(np.uint32)[0]) & 0xFFFF == 0


def test_elementwise_region_resize_prologue() -> None:
    n_, c, h, w = 2, 3, 3, 5  # source spatial; output is 6 x 10
    r = rng(10)
    src = r.normal(size=(n_, c, h, w)).astype(np.float32)
    other = r.normal(size=(n_, c, 2 * h, 2 * w)).astype(np.float32)
    a = Arena(align=4)
    oo, so = a.put(other), a.put(src)
    total = n_ * c * 4 * h * w
    d = a.out(total)
    a.run(
        {
            "name": "elementwise_region",
            "len": total,
            "num_inputs": 2,
            "num_steps": 1,
            "dst": d,
            "input_offs": [oo // 4, so // 4] + [0] * 14,
            "chain": _chain((2, 0, 0, 1)),
            "scalar_input_mask": 0,
            "input_modulus": [0] * 16,
            "prologue": 1,
            "out_n": n_,
            "out_c": c,
            "out_h": 2 * h,
            "out_w": 2 * w,
            "prologue_input": 1,
        }
    )
    want = np.empty((n_, c, 2 * h, 2 * w), np.float32)
    for i, j, y, x in np.ndindex(*want.shape):
        want[i, j, y, x] = other[i, j, y, x] + src[i, j, y // 2, x // 2]
    np.testing.assert_array_equal(a.get(d).reshape(want.shape), want)


def test_batch_elementwise_region() -> None:
    nb, slen, selems = 3, 7, 9  # slices strided 9 apart, 7 computed each
    r = rng(11)
    a = Arena(align=4)
    xs = [r.normal(size=slen).astype(np.float32) for _ in range(nb)]
    ys = [r.normal(size=1).astype(np.float32) for _ in range(nb)]
    offs = []
    for x, y in zip(xs, ys):
        offs += [a.put(x) // 4, a.put(y) // 4]
    base = a.out(nb * selems)
    a.run(
        {
            "name": "batch_elementwise_region",
            "slice_len": slen,
            "num_batch": nb,
            "num_steps": 2,
            "base_dst": base,
            "slice_elems": selems,
            "batch_input_offs": offs + [0] * (64 - len(offs)),
            "chain": _chain((2, 3, 0, 1), (0, 5, STEP | 0, 0)),
            "scalar_input_mask": 0b10,
            "input_modulus": [0] * 16,
        }
    )
    got = a.get(base).reshape(nb, selems)
    for b in range(nb):
        want = [math.tanh(float(v) / float(ys[b][0])) for v in xs[b]]
        np.testing.assert_allclose(got[b, :slen], want, **tol("f32"))
        assert (got[b, slen:].view(np.uint32) == 0x7F7F7F7F).all()  # gap untouched


@pytest.mark.parametrize("gate_first", [False, True])
@pytest.mark.parametrize("src_dt,dst_dt", [("f32", "f32"), ("f16", "f16"), ("f16", "f32")])
def test_fused_swiglu(gate_first: bool, src_dt: str, dst_dt: str) -> None:
    rows, nh = 3, 5
    x = rng(12).normal(size=(rows, 2 * nh)).astype(npdt(src_dt))
    a = Arena()
    s, d = a.put(x), a.out((rows, nh), npdt(dst_dt))
    a.run(
        {
            "name": "fused_swiglu",
            "src": s,
            "dst": d,
            "n_half": nh,
            "total": rows * nh,
            "src_dt": src_dt,
            "dst_dt": dst_dt,
            "gate_first": gate_first,
        }
    )
    want = np.empty((rows, nh))
    for i in range(rows):
        for j in range(nh):
            u, v = float(x[i, j]), float(x[i, nh + j])
            want[i, j] = ACT["silu"](u) * v if gate_first else u * ACT["silu"](v)
    np.testing.assert_allclose(
        a.get(d).astype(float), want, **tol(src_dt if src_dt == "f16" else dst_dt)
    )
