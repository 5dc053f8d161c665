"""Legacy Int8/Int4/FP8/NVFP4 matmuls and the scaled formats.

FP8 decoding is checked bit-exactly against independent facts (E5M2 is the top
byte of an IEEE f16; E4M3 by the explicit formula and spot values); matmuls
against per-weight loops at f32 rtol/atol 1e-5.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from _mem2 import Arena
from rlx.reference import run_thunk
from rlx.reference.quant import E2M1, FP8_E4M3, FP8_E5M2, decode_scaled, encode_scaled


def test_e5m2_is_f16_top_byte() -> None:
    f16 = (np.arange(256, dtype=np.uint16) << 8).view(np.float16).astype(np.float64)
    np.testing.assert_array_equal(np.isnan(FP8_E5M2), np.isnan(f16))
    ok = ~np.isnan(f16)
    np.testing.assert_array_equal(FP8_E5M2[ok], f16[ok])
    assert FP8_E5M2[0x7B] == 57344.0 and FP8_E5M2[0x7C] == np.inf


def test_e4m3_values() -> None:
    for c in range(256):
        s = -1.0 if c & 0x80 else 1.0
        e, m = (c >> 3) & 15, c & 7
        if e == 15 and m == 7:
            assert np.isnan(FP8_E4M3[c])
            continue
        v = s * (m / 8 * 2.0**-6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
        assert FP8_E4M3[c] == v, c
    assert FP8_E4M3[0x7E] == 448.0 and FP8_E4M3[0x01] == 2.0**-9 and FP8_E4M3[0x08] == 2.0**-6


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_encode_nearest_even_saturating(fmt: str) -> None:
    table = FP8_E4M3 if fmt == "fp8_e4m3" else FP8_E5M2
    finite = np.isfinite(table)
    codes = np.arange(256)[finite]
    # every finite code round-trips (−0 keeps its sign bit)
    np.testing.assert_array_equal(encode_scaled(table[codes], fmt), codes.astype(np.uint8))
    rng = np.random.default_rng(0)
    mx = 448.0 if fmt == "fp8_e4m3" else 57344.0
    x = np.concatenate(
        [
            rng.uniform(-mx * 1.2, mx * 1.2, 500),
            rng.standard_normal(500) * 0.05,
            [np.inf, -np.inf, 1e9],
        ]
    )
    got = decode_scaled(encode_scaled(x, fmt), fmt)
    vals = table[finite]
    for xi, gi in zip(x, got):
        a = np.clip(xi, -mx, mx)
        d = np.abs(vals - a)
        best = vals[d == d.min()]
        assert gi in best, (xi, gi, best)
    # ties go to the even code: midpoint of 1.0 (code 0x38 in E4M3) and the next value
    if fmt == "fp8_e4m3":
        assert encode_scaled(np.array([1.0625]), fmt)[0] == 0x38
        assert encode_scaled(np.array([1.1875]), fmt)[0] == 0x3A
    assert np.isnan(decode_scaled(encode_scaled(np.array([np.nan]), fmt), fmt)[0])


def test_int8_scaled_codes() -> None:
    x = np.array([0.5, 1.5, -2.5, 300.0, -300.0, np.nan])
    np.testing.assert_array_equal(
        decode_scaled(encode_scaled(x, "int8"), "int8"), [0, 2, -2, 127, -127, 0]
    )


def _mm_case(name: str, m: int, k: int, n: int, fields: dict, arrays: dict, w: np.ndarray) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((m, k)).astype(np.float32)
    a = Arena()
    t = dict(name=name, m=m, k=k, n=n, x=a.put(x), **fields)
    for key, arr in arrays.items():
        t[key] = a.put(arr)
    t["dst"] = a.out((m, n))
    mem = a.build()
    run_thunk(t, mem)
    np.testing.assert_allclose(
        a.read(t["dst"], (m, n)), x.astype(np.float64) @ w.T, rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("asym", [False, True])
@pytest.mark.parametrize("bits", [8, 4])
def test_int_block_matmul(bits: int, asym: bool) -> None:
    rng = np.random.default_rng(2)
    m, k, n, bs = 3, 40, 5, 16  # k not a multiple of the block: last block is partial
    nb = 3
    if bits == 8:
        q = rng.integers(-128, 128, (n, k)).astype(np.int8)
        packed = q
    else:
        q = rng.integers(0, 16, (n, k)) if asym else rng.integers(-8, 8, (n, k))
        nib = (q & 0xF).astype(np.uint8)
        packed = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)
    scale = rng.uniform(0.01, 0.1, (n, nb)).astype(np.float32)
    zp = rng.uniform(-3, 3, (n, nb)).astype(np.float32)
    w = np.zeros((n, k))
    for i, j in itertools.product(range(n), range(k)):
        z = zp[i, j // bs] if asym else 0.0
        w[i, j] = (float(q[i, j]) - float(z)) * float(scale[i, j // bs])
    arrays = {"w_q": packed, "scale": scale, "zp": zp}
    _mm_case(
        f"dequant_matmul_int{bits}", m, k, n, dict(block_size=bs, is_asymmetric=asym), arrays, w
    )


@pytest.mark.parametrize("e5m2", [False, True])
def test_fp8_matmul(e5m2: bool) -> None:
    rng = np.random.default_rng(3)
    m, k, n = 2, 33, 4
    codes = rng.integers(0, 256, (n, k)).astype(np.uint8)
    codes[(codes & 0x7F) >= (0x7C if e5m2 else 0x7F)] = 0x11  # keep weights finite
    # E5M2 reaches 57344: shrink its row scales so the products stay moderate
    scale = (rng.uniform(0.5, 2, n) * (1e-3 if e5m2 else 1.0)).astype(np.float32)
    table = FP8_E5M2 if e5m2 else FP8_E4M3
    w = np.array([[table[c] * float(scale[i]) for c in row] for i, row in enumerate(codes)])
    _mm_case("dequant_matmul_fp8", m, k, n, dict(e5m2=e5m2), {"w_q": codes, "scale": scale}, w)


def test_nvfp4_matmul() -> None:
    rng = np.random.default_rng(4)
    m, k, n = 3, 48, 5
    codes = rng.integers(0, 16, (n, k)).astype(np.uint8)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    sc = rng.integers(0x20, 0x48, (n, k // 16)).astype(np.uint8)  # E4M3 scales, finite
    g = np.array([0.37], np.float32)
    mag = [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    w = np.zeros((n, k))
    for i, j in itertools.product(range(n), range(k)):
        c = int(codes[i, j])
        v = (-1 if c & 8 else 1) * mag[c & 7]
        w[i, j] = v * FP8_E4M3[sc[i, j // 16]] * float(g[0])
    assert E2M1[9] == -0.5
    _mm_case(
        "dequant_matmul_nvfp4", m, k, n, {}, {"w_q": packed, "scale": sc, "global_scale": g}, w
    )


LAYOUTS = ["per_tensor", "per_row", {"block": {"size": 8}}]


def _scale_for(layout: object, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    if layout == "per_tensor":
        return rng.uniform(0.5, 2, 1).astype(np.float32)
    if layout == "per_row":
        return rng.uniform(0.5, 2, rows).astype(np.float32)
    return rng.uniform(0.5, 2, (rows, -(-cols // 8))).astype(np.float32)


def _scale_at(s: np.ndarray, layout: object, i: int, j: int) -> float:
    if layout == "per_tensor":
        return float(s[0])
    if layout == "per_row":
        return float(s[i])
    return float(s[i, j // 8])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fmts", [("fp8_e4m3", "fp8_e4m3"), ("fp8_e5m2", "int8")])
def test_scaled_matmul(layout: object, fmts: tuple[str, str]) -> None:
    rng = np.random.default_rng(5)
    m, k, n = 3, 19, 4
    lhs = rng.integers(0, 256, (m, k)).astype(np.uint8)
    rhs = rng.integers(0, 256, (n, k)).astype(np.uint8)
    for arr, f in ((lhs, fmts[0]), (rhs, fmts[1])):
        if f != "int8":
            arr[~np.isfinite(decode_scaled(arr, f))] = 0x22
            arr[np.abs(decode_scaled(arr, f)) > 100] = 0x31
    sl, sr = _scale_for(layout, m, k, rng), _scale_for(layout, n, k, rng)
    bias = rng.standard_normal(n).astype(np.float32)
    dl, dr = decode_scaled(lhs, fmts[0]), decode_scaled(rhs, fmts[1])
    want = np.zeros((m, n))
    for i, j in itertools.product(range(m), range(n)):
        want[i, j] = (
            sum(
                dl[i, kk] * _scale_at(sl, layout, i, kk) * dr[j, kk] * _scale_at(sr, layout, j, kk)
                for kk in range(k)
            )
            + bias[j]
        )
    a = Arena()
    t = dict(
        name="scaled_matmul",
        lhs=a.put(lhs),
        rhs=a.put(rhs),
        lhs_scale=a.put(sl),
        rhs_scale=a.put(sr),
        bias=a.put(bias),
        dst=a.out((m, n)),
        m=m,
        k=k,
        n=n,
        lhs_fmt=fmts[0],
        rhs_fmt=fmts[1],
        layout=layout,
        has_bias=True,
    )
    mem = a.build()
    run_thunk(t, mem)
    np.testing.assert_allclose(a.read(t["dst"], (m, n)), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2", "int8"])
def test_scaled_quantize_dequantize_scale(layout: object, fmt: str) -> None:
    rng = np.random.default_rng(6)
    r, c = 4, 21
    x = (rng.standard_normal((r, c)) * 3).astype(np.float32)
    x[1] = 0.0  # an all-zero row: its scale is 1.0
    a = Arena()
    xo = a.put(x)
    sdims = (1,) if layout == "per_tensor" else ((r,) if layout == "per_row" else (r, 3))
    so, qo, do = a.out(sdims), a.out((r, c), np.uint8), a.out((r, c))
    mem = a.build()
    base = dict(rows=r, cols=c, fmt=fmt, layout=layout)
    run_thunk(dict(name="scaled_quant_scale", x=xo, dst=so, **base), mem)
    run_thunk(dict(name="scaled_quantize", x=xo, scale=so, dst=qo, **base), mem)
    run_thunk(dict(name="scaled_dequantize", codes=qo, scale=so, dst=do, **base), mem)
    s = a.read(so, sdims)
    fmax = {"fp8_e4m3": 448.0, "fp8_e5m2": 57344.0, "int8": 127.0}[fmt]
    codes = a.read(qo, (r, c), np.uint8)
    deq = a.read(do, (r, c))
    for i, j in itertools.product(range(r), range(c)):
        if layout == "per_tensor":
            grp = np.abs(x)
        elif layout == "per_row":
            grp = np.abs(x[i])
        else:
            grp = np.abs(x[i, (j // 8) * 8 : (j // 8) * 8 + 8])
        amax = float(grp.max())
        want_s = np.float32(amax / fmax) if amax > 0 else np.float32(1.0)
        si = _scale_at(s, layout, i, j)
        assert si == want_s
        q = np.float32(x[i, j] / np.float32(si))
        assert codes[i, j] == encode_scaled(np.array([q]), fmt)[0]
        assert deq[i, j] == np.float32(decode_scaled(codes[i : i + 1, j], fmt)[0]) * np.float32(si)
    # the quantisation error is within half a step of the format at the group's scale
    rel = 2.0**-4 if fmt == "fp8_e4m3" else (2.0**-3 if fmt == "fp8_e5m2" else 0.5 / 127)
    assert np.all(np.abs(deq - x) <= rel * np.abs(x) + 1e-2 * np.abs(x).max())
