"""The non-GGUF weight formats (int8 / int4 / FP8 / NVFP4) and the scaled ops:
decoders checked against ``ml_dtypes`` (an independent implementation of the
OCP FP8 and E2M1 formats), host kernels against the numpy reference,
``rlx.quantize`` round trips, and the compile-time parameter errors.

Oracles: ``ml_dtypes.float8_e4m3fn`` / ``float8_e5m2`` / ``float4_e2m1fn``
(every code decoded; encoding of edge values: subnormals, ties, the largest
finite value, ±inf and NaN). ml_dtypes' float → fp8 cast overflows to NaN /
inf where the scaled ops saturate (OCP's saturating conversion), so
out-of-range inputs are checked against ±max instead.

Tolerances: host vs reference matmuls ``max|host − ref| ≤ 1e-5 · max|ref|``
(the host accumulates in f32 with the same decoded weights, the reference in
f64); decoders, encoders and the quantise / dequantise / scale ops are exact.
"""

from __future__ import annotations

import numpy as np
import pytest
import rlx
from rlx.reference import quant as rq

ml_dtypes = pytest.importorskip("ml_dtypes")

FP8 = {"fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2}
TOL = 1e-5


def _same_values(a: np.ndarray, b: np.ndarray) -> None:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert np.array_equal(np.isnan(a), np.isnan(b))
    ok = ~np.isnan(a)
    assert np.array_equal(a[ok], b[ok])
    # signed zeros too
    assert np.array_equal(np.signbit(a[ok]), np.signbit(b[ok]))


def _run(g: rlx.Graph, device: str, params: dict, inputs: dict) -> dict:
    ex = rlx.compile(g, device=device)
    for k, v in params.items():
        ex.set_param(k, v)
    out = ex.run(**inputs)
    if device == "host":
        assert ex.stats["fallback_thunks"] == 0, ex.stats
    return out


@pytest.mark.parametrize("fmt", sorted(FP8))
def test_fp8_tables_and_host_decoder_match_ml_dtypes(fmt: str) -> None:
    codes = np.arange(256, dtype=np.uint8)
    want = codes.view(FP8[fmt]).astype(np.float64)
    _same_values(rq.decode_scaled(codes, fmt), want)
    # the host kernel: scaled_dequantize of every code with scale 1
    g = rlx.Graph("dq")
    c = g.input("c", [16, 16], "u8")
    s = g.input("s", [1], "f32")
    g.outputs(g.scaled_dequantize(c, s, fmt=fmt, layout="per_tensor"))
    for dev in ("host", "reference"):
        out = _run(g, dev, {}, {"c": codes.reshape(16, 16), "s": np.ones(1, np.float32)})
        _same_values(next(iter(out.values())).reshape(-1), want)


def test_e2m1_table_matches_ml_dtypes() -> None:
    codes = np.arange(16, dtype=np.uint8)
    want = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    _same_values(rq.E2M1, want)


def _edge_values(fmt: str) -> np.ndarray:
    """Subnormals, ties between neighbours, values near the top, random."""
    tab = rq.decode_scaled(np.arange(256, dtype=np.uint8), fmt)
    fin = np.sort(np.unique(tab[np.isfinite(tab)]))
    mids = (fin[1:] + fin[:-1]) / 2  # exact ties (f32-representable)
    rng = np.random.default_rng(0)
    rand = rng.standard_normal(2000) * fin[-1] / 8
    tiny = fin[fin > 0][:4]
    return np.concatenate([fin, mids, rand, tiny / 3, -tiny / 3, [0.0, -0.0]]).astype(np.float32)


@pytest.mark.parametrize("fmt", sorted(FP8))
def test_scaled_quantize_rounds_like_ml_dtypes_and_saturates(fmt: str) -> None:
    top = rq.FORMAT_MAX[fmt]
    vals = _edge_values(fmt)
    vals = vals[np.abs(vals) <= top]
    extra = np.array([top * 1.5, -top * 4, np.inf, -np.inf, np.nan], np.float32)
    x = np.concatenate([vals, extra])
    pad = (-len(x)) % 8
    x = np.concatenate([x, np.zeros(pad, np.float32)]).reshape(-1, 8)
    g = rlx.Graph("q")
    xi = g.input("x", list(x.shape), "f32")
    s = g.input("s", [1], "f32")
    g.outputs(g.scaled_quantize(xi, s, fmt=fmt, layout="per_tensor"))
    want_in = vals.astype(FP8[fmt]).view(np.uint8)
    for dev in ("host", "reference"):
        got = next(iter(_run(g, dev, {}, {"x": x, "s": np.ones(1, np.float32)}).values()))
        got = got.reshape(-1)
        assert np.array_equal(got[: len(vals)], want_in), dev
        dec = rq.decode_scaled(got[len(vals) : len(vals) + 5], fmt)
        assert list(dec[:4]) == [top, -top, top, -top], dev
        assert np.isnan(dec[4]), dev


def _graph_dqmm(scheme: object, q: rlx.Quantized, m: int) -> rlx.Graph:
    g = rlx.Graph("dqmm")
    x = g.input("x", [m, q.k], "f32")
    w = g.param("w", list(q.w_q.shape), "u8")
    aux = [
        g.param(f"a{i}", list(a.shape), "u8" if a.dtype == np.uint8 else "f32")
        for i, a in enumerate(q.aux)
    ]
    g.outputs(g.dequant_matmul(x, w, *aux, scheme=scheme, n=q.n, k=q.k))
    return g


SCHEMES = [
    "int8", "int8/32", "int8/32a", "int4/32", "int4/64a", "int4/128a",
    "fp8_e4m3", "fp8_e5m2", "fp8_e4m3/tensor", "nvfp4",
]  # fmt: skip
THUNKS = {"int8": "dequant_matmul_int8", "int4": "dequant_matmul_int4",
          "fp8": "dequant_matmul_fp8", "nvfp4": "dequant_matmul_nvfp4"}  # fmt: skip


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("m", [1, 5])
def test_dequant_matmul_host_matches_reference(scheme: str, m: int) -> None:
    rng = np.random.default_rng(7)
    n, k = 19, 256
    w = rng.standard_normal((n, k)).astype(np.float32)
    q = rlx.quantize(w, scheme)
    g = _graph_dqmm(q.scheme, q, m)
    params = {"w": q.w_q, **{f"a{i}": a for i, a in enumerate(q.aux)}}
    x = rng.standard_normal((m, k)).astype(np.float32)
    ex = rlx.compile(g, device="host")
    thunk = THUNKS[scheme.split("_")[0].split("/")[0]]
    assert ex.stats["by_thunk"].get(thunk) == 1, ex.stats["by_thunk"]
    host = next(iter(_run(g, "host", params, {"x": x}).values()))
    ref = next(iter(_run(g, "reference", params, {"x": x}).values()))
    big = float(np.abs(ref).max())
    assert float(np.abs(host - ref).max()) <= TOL * big
    # and both equal x @ dequantize(w)ᵀ (the Python decoder of rlx.quantize)
    direct = x.astype(np.float64) @ q.dequantize().astype(np.float64).T
    assert float(np.abs(ref - direct).max()) <= TOL * big


@pytest.mark.parametrize(
    ("scheme", "bound"),
    [("int8", 0.01), ("int8/32a", 0.01), ("int4/32", 0.15), ("int4/32a", 0.12),
     ("fp8_e4m3", 0.04), ("fp8_e5m2", 0.08), ("nvfp4", 0.12), ("q8_0", 0.01)],
)  # fmt: skip
def test_quantize_error_is_that_of_the_format(scheme: str, bound: float) -> None:
    # Gaussian weights: relative Frobenius error of the format's rounding
    w = np.random.default_rng(3).standard_normal((64, 128)).astype(np.float32)
    q = rlx.quantize(w, scheme)
    assert 0 < q.rel_error(w) < bound
    # an exactly representable matrix round-trips (int8: codes · scale)
    if scheme == "int8":
        exact = q.dequantize()
        assert rlx.quantize(exact, "int8").rel_error(exact) < 1e-6


def test_quantize_rejects_what_it_cannot_produce() -> None:
    w = np.ones((4, 48), np.float32)
    with pytest.raises(rlx.QuantizeError, match="group size 32 must divide the row length k = 48"):
        rlx.quantize(w, "int4/32")
    with pytest.raises(rlx.QuantizeError, match="unknown scheme 'int3'"):
        rlx.quantize(w, "int3")
    with pytest.raises(rlx.QuantizeError, match="NaN"):
        rlx.quantize(np.full((2, 32), np.nan, np.float32), "int8")
    with pytest.raises(rlx.QuantizeError, match="2-D"):
        rlx.quantize(np.ones(32, np.float32), "int8")


def test_unsupported_parameters_fail_at_compile_naming_op_and_parameter() -> None:
    # NVFP4 block scales must be E4M3 bytes
    g = rlx.Graph("bad")
    x = g.input("x", [2, 32], "f32")
    w = g.param("w", [4, 16], "u8")
    bs = g.param("bs", [4, 2], "f32")
    gs = g.param("gs", [1], "f32")
    g.outputs(g.dequant_matmul(x, w, bs, gs, scheme="nvfp4", n=4, k=32))
    bad_scale = r"\[dequant_mat_mul\] unsupported block scale"
    with pytest.raises(rlx.UnsupportedOpError, match=bad_scale):
        rlx.compile(g, device="host")
    # an odd int4 group cannot be packed in whole bytes
    g = rlx.Graph("bad4")
    x = g.input("x", [2, 6], "f32")
    w = g.param("w", [2, 4], "u8")
    s = g.param("s", [4], "f32")
    g.outputs(g.dequant_matmul(x, w, s, scheme="int4/3", n=2, k=6))
    with pytest.raises(rlx.UnsupportedOpError, match=r"\[dequant_mat_mul\] unsupported block_size"):
        rlx.compile(g, device="host")
    # a group size that does not divide k is a shape error when the graph is built
    g = rlx.Graph("bad8")
    x = g.input("x", [2, 48], "f32")
    w = g.param("w", [2, 48], "u8")
    s = g.param("s", [2], "f32")
    with pytest.raises(rlx.RlxError, match=r"dequant_mat_mul.*k = 48 is not a multiple"):
        g.dequant_matmul(x, w, s, scheme="int8/32", n=2, k=48)


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2", "int8"])
@pytest.mark.parametrize("layout", ["per_tensor", "per_row", "block:16"])
def test_scaled_ops_host_match_reference(fmt: str, layout: str) -> None:
    rng = np.random.default_rng(11)
    r, c, n = 5, 40, 6
    g = rlx.Graph("scaled")
    x = g.input("x", [r, c], "f32")
    y = g.input("y", [n, c], "f32")
    b = g.input("b", [n], "f32")
    sx = g.scaled_quant_scale(x, fmt=fmt, layout=layout)
    sy = g.scaled_quant_scale(y, fmt=fmt, layout=layout)
    qx = g.scaled_quantize(x, sx, fmt=fmt, layout=layout)
    qy = g.scaled_quantize(y, sy, fmt=fmt, layout=layout)
    dx = g.scaled_dequantize(qx, sx, fmt=fmt, layout=layout)
    mm = g.scaled_matmul(qx, qy, sx, sy, b, lhs_fmt=fmt, rhs_fmt=fmt, layout=layout)
    g.outputs(sx, dx, mm)
    ins = {
        "x": rng.standard_normal((r, c)).astype(np.float32) * 3,
        "y": rng.standard_normal((n, c)).astype(np.float32),
        "b": rng.standard_normal(n).astype(np.float32),
    }
    host = list(_run(g, "host", {}, ins).values())
    ref = list(_run(g, "reference", {}, ins).values())
    np.testing.assert_array_equal(host[0], ref[0])
    np.testing.assert_array_equal(host[1], ref[1])
    big = float(np.abs(ref[2]).max())
    assert float(np.abs(host[2] - ref[2]).max()) <= TOL * big
