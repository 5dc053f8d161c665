"""The host's prefill GEMM for GGUF weights (``dequant_matmul_gguf`` with
m > 8, compiled for "host": on CPUs with AVX-512 VNNI the integer-dot tiles
of ``quant/vnni_gemm.rs``, with AMX-INT8 and m ≥ 16 the tile products of
``quant/amx_gemm.rs``, elsewhere the decode-to-f32 panels).

Oracle: ``x @ gguf.quants.dequantize(W)ᵀ`` in float64 (llama.cpp's own
numpy decoders). Bound per output ``(i, j)``: the two-level activation
rounding ``Σ_e |w_je| · dx_b(e) / 256`` with ``dx_b = max|x_b| / 127`` per
block of 32 of row ``i`` (zero error on the f32 path), plus an f32 slack of
``1e-5 · Σ_e |w_je · x_ie|``. Shapes have odd m and n and odd block counts.
"""

from __future__ import annotations

import numpy as np
import pytest
import rlx
from gguf import GGMLQuantizationType as T
from gguf import quants
from rlx.reference.gguf_blocks import GEOMETRY
from test_parity_quant import packed_weight

TYPES = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"]


def _host_matmul(x: np.ndarray, w: np.ndarray, typ: str, k: int, n: int) -> np.ndarray:
    g = rlx.Graph(f"pp_{typ}")
    xi = g.input("x", list(x.shape), "f32")
    wp = g.param("w", list(w.shape), "u8")
    g.outputs(g.dequant_matmul(xi, wp, scheme=typ, n=n, k=k))
    ex = rlx.compile(g, device="host")
    ex.set_param("w", w)
    assert ex.stats["by_thunk"].get("dequant_matmul_gguf") == 1
    return np.asarray(next(iter(ex.run(x=x).values())), np.float64)


@pytest.mark.parametrize("typ", TYPES)
def test_prefill_gemm_within_two_level_bound(typ: str) -> None:
    rng = np.random.default_rng(23)
    bs = GEOMETRY[typ][0]
    k = 3 * bs if bs == 256 else 19 * bs
    m, n = 21, 37
    w = packed_weight(typ, n, k, rng)
    wd = quants.dequantize(w, T[typ.upper()]).astype(np.float64)
    # activations with an outlier channel, as real hidden states have
    x = rng.standard_normal((m, k)).astype(np.float32)
    x[:, 5] *= 40.0
    got = _host_matmul(x, w, typ, k, n)
    xd = x.astype(np.float64)
    want = xd @ wd.T
    dx = np.abs(xd).reshape(m, k // 32, 32).max(-1) / 127.0
    bound = (np.repeat(dx, 32, axis=1) / 256.0) @ np.abs(wd).T + 1e-5 * (np.abs(xd) @ np.abs(wd).T)
    err = np.abs(got - want)
    worst = float((err / bound).max())
    assert worst <= 1.0, f"{typ}: error reaches {worst:.3f} of the bound"


def test_prefill_gemm_nan_stays_in_its_row() -> None:
    rng = np.random.default_rng(5)
    typ, m, n, k = "q4_k", 12, 9, 512
    w = packed_weight(typ, n, k, rng)
    x = rng.standard_normal((m, k)).astype(np.float32)
    x[4, 17] = np.nan
    got = _host_matmul(x, w, typ, k, n)
    assert np.isnan(got[4]).all()
    assert np.isfinite(np.delete(got, 4, axis=0)).all()


@pytest.mark.parametrize("typ", TYPES)
def test_amx_switch_matches_vnni(typ: str) -> None:
    """AMX tiles on vs off (``rlx.set_amx_prefill_gemm``): the same integer dots
    and scales, so equal up to f32 summation order (≤ 1e-6 of Σ|w·x| per output),
    and both within the two-level bound against the float64 oracle."""
    if not rlx.amx_available():
        pytest.skip("no AMX-INT8 here (or the kernel refused the tile state)")
    rng = np.random.default_rng(31)
    bs = GEOMETRY[typ][0]
    k = 3 * bs if bs == 256 else 19 * bs
    m, n = 33, 37
    w = packed_weight(typ, n, k, rng)
    wd = quants.dequantize(w, T[typ.upper()]).astype(np.float64)
    x = rng.standard_normal((m, k)).astype(np.float32)
    old = rlx.set_amx_prefill_gemm(True)
    try:
        amx = _host_matmul(x, w, typ, k, n)
        rlx.set_amx_prefill_gemm(False)
        vnni = _host_matmul(x, w, typ, k, n)
    finally:
        rlx.set_amx_prefill_gemm(old)
    xd = x.astype(np.float64)
    mag = np.abs(xd) @ np.abs(wd).T
    # the switch changes the path: another summation order, other last bits
    assert not np.array_equal(amx, vnni)
    assert float((np.abs(amx - vnni) / mag).max()) <= 1e-6
    dx = np.abs(xd).reshape(m, k // 32, 32).max(-1) / 127.0
    bound = (np.repeat(dx, 32, axis=1) / 256.0) @ np.abs(wd).T + 1e-5 * mag
    for got in (amx, vnni):
        assert float((np.abs(got - xd @ wd.T) / bound).max()) <= 1.0
