"""Host quantised matmuls vs the numpy reference, for every GGUF type.

Graphs use ``g.dequant_matmul`` / ``g.dequant_grouped_matmul`` with packed
weights as u8 params: built with ``gguf.quants.quantize`` where gguf can
quantize the type (Q4_0/1, Q5_0/1, Q8_0, BF16; F32/F16 via numpy), random
valid blocks (finite f16 scales) otherwise. Each graph is compiled for
"host" and "reference"; the host must run the thunk natively (no fallback).

Bound: ``max|host − ref| ≤ 1e-4 · max|ref|`` — the host accumulates in f32,
the reference in f64, so only the summation order differs — plus, for the
formats with integer-dot kernels (``INT_DOT_TYPES``; used on CPUs with
AVX-512 VNNI, for every ``m``: ``m > 8`` is the prefill GEMM), the
activation rounding: those round each block of
32 activations to ``round(x / dx)`` with ``dx = max|x| / 127``, which moves
output ``[i, j]`` by at most ``½ Σ_e |W[j, e]| · dx[i, e // 32]`` (added per
element; on Gaussian data about 0.5 % of the output scale).
"""

from __future__ import annotations

import numpy as np
import pytest
import rlx
from gguf import GGMLQuantizationType as T
from gguf import quants
from rlx.reference.gguf_blocks import GEOMETRY, dequantize_rows, row_bytes

TOL = 1e-4

#: formats whose host kernels may round activations to 8-bit blocks (any m)
INT_DOT_TYPES = {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"}

#: types gguf can quantize (real quantizer output rather than random bytes)
GGUF_QUANTIZE = {
    "q4_0": T.Q4_0,
    "q4_1": T.Q4_1,
    "q5_0": T.Q5_0,
    "q5_1": T.Q5_1,
    "q8_0": T.Q8_0,
    "bf16": T.BF16,
}

#: byte offsets of f16 scale fields, set to finite values in random blocks
SCALE_OFFSETS = {
    "q8_1": [0, 2],
    "q2_k": [80, 82],
    "q3_k": [108],
    "q4_k": [0, 2],
    "q5_k": [0, 2],
    "q6_k": [208],
    "q1_0": [0],
    "q2_0": [0],
}

ALL_TYPES = list(GEOMETRY)


def typ_params(types: list[str]) -> list:
    return list(types)


def packed_weight(typ: str, n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """``[n, row_bytes(k)]`` u8 packed rows of ``typ``."""
    w = rng.standard_normal((n, k)).astype(np.float32)
    if typ == "f32":
        return w.view(np.uint8).reshape(n, -1)
    if typ == "f16":
        return w.astype(np.float16).view(np.uint8).reshape(n, -1)
    if typ in GGUF_QUANTIZE:
        return np.ascontiguousarray(quants.quantize(w, GGUF_QUANTIZE[typ]), np.uint8)
    bs, bb = GEOMETRY[typ]
    nb = n * k // bs
    raw = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    for o in SCALE_OFFSETS.get(typ, []):
        s = rng.uniform(0.01, 1.0, nb) * rng.choice([-1, 1], nb)
        raw[:, o : o + 2] = s.astype(np.float16).view(np.uint8).reshape(nb, 2)
    if typ == "q8_k":
        raw[:, 0:4] = rng.uniform(0.01, 1.0, nb).astype(np.float32).view(np.uint8).reshape(nb, 4)
    return raw.reshape(n, row_bytes(typ, k))


def small_k(typ: str) -> int:
    bs = GEOMETRY[typ][0]
    return 37 if bs == 1 else 3 * bs


def run_both(g: rlx.Graph, params: dict, inputs: dict) -> tuple[np.ndarray, np.ndarray, dict]:
    outs = []
    stats = {}
    for dev in ("host", "reference"):
        ex = rlx.compile(g, device=dev)
        for name, val in params.items():
            ex.set_param(name, val)
        outs.append(next(iter(ex.run(**inputs).values())))
        if dev == "host":
            stats = ex.stats
    return outs[0], outs[1], stats


def assert_scaled(got: np.ndarray, want: np.ndarray, bound: np.ndarray | float = 0.0) -> None:
    assert got.shape == want.shape
    assert np.all(np.isfinite(want))
    scale = float(np.max(np.abs(want.astype(np.float64))))
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    excess = float(np.max(err - bound))
    assert excess <= TOL * scale, f"max err beyond bound {excess:.3g} > {TOL} * {scale:.3g}"


def rounding_bound(typ: str, wq: np.ndarray, xv: np.ndarray, k: int) -> np.ndarray | float:
    """Per-output bound of the 8-bit activation rounding (module docstring)."""
    m = xv.shape[0]
    if typ not in INT_DOT_TYPES:
        return 0.0
    wf = np.abs(dequantize_rows(wq, typ, k).astype(np.float64))
    xa = np.abs(xv.astype(np.float64)).reshape(m, k // 32, 32)
    dx = np.repeat(xa.max(axis=2) / 127.0, 32, axis=1)
    return 0.5 * dx @ wf.T


def check_dense(typ: str, m: int, k: int, n: int, x_dtype: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    wq = packed_weight(typ, n, k, rng)
    g = rlx.Graph(f"dq_{typ}")
    x = g.input("x", [m, k], x_dtype)
    w = g.param("w", list(wq.shape), "u8")
    g.outputs(g.dequant_matmul(x, w, scheme=typ, n=n, k=k))
    xv = rng.standard_normal((m, k)).astype(np.float16 if x_dtype == "f16" else np.float32)
    host, ref, stats = run_both(g, {"w": wq}, {"x": xv})
    assert stats["by_thunk"].get("dequant_matmul_gguf") == 1
    assert stats["fallback_thunks"] == 0, stats
    assert_scaled(host, ref, rounding_bound(typ, wq, xv, k))


@pytest.mark.parametrize("typ", sorted(INT_DOT_TYPES))
@pytest.mark.parametrize(("m", "blocks", "n"), [(1, 1, 1), (2, 3, 37), (5, 5, 19), (8, 7, 3)])
def test_dense_integer_dot_shapes(typ: str, m: int, blocks: int, n: int) -> None:
    # every row group size (4 + remainder), odd n, an odd number of blocks
    check_dense(typ, m, blocks * GEOMETRY[typ][0], n, "f32", seed=1000 + 31 * m + n)


@pytest.mark.parametrize("typ", typ_params(ALL_TYPES))
@pytest.mark.parametrize("m", [1, 3, 17])
def test_dense_every_type(typ: str, m: int) -> None:
    check_dense(typ, m, small_k(typ), 45, "f32", seed=ALL_TYPES.index(typ) * 7 + m)


@pytest.mark.parametrize("typ", ["q4_1", "q8_0", "q4_k", "q6_k", "q5_0", "f16"])
@pytest.mark.parametrize("m", [1, 17])
def test_dense_parallel_shapes(typ: str, m: int) -> None:
    # n·k large enough that the host splits rows / panels over threads
    check_dense(typ, m, 1024, 131, "f32", seed=100 + m)


@pytest.mark.parametrize("typ", typ_params(["q4_0", "q4_k", "q2_0", "bf16"]))
def test_dense_f16_activations(typ: str) -> None:
    check_dense(typ, 5, small_k(typ) * 2 if typ != "bf16" else 64, 33, "f16", seed=7)


@pytest.mark.parametrize("typ", ["q4_1", "q5_k", "q1_0", "f32"])
def test_grouped(typ: str) -> None:
    rng = np.random.default_rng(3)
    e, n, k = 3, 9, small_k(typ)
    wq = packed_weight(typ, e * n, k, rng).reshape(e, n, -1)
    ids = np.array([2, 0, 7, -1, 1, 2, 0], np.int32)  # 7 and -1: zero rows
    m = len(ids)
    g = rlx.Graph(f"dqg_{typ}")
    x = g.input("x", [m, k])
    idx = g.input("idx", [m], "i32")
    w = g.param("w", list(wq.shape), "u8")
    g.outputs(g.dequant_grouped_matmul(x, w, idx, scheme=typ))
    xv = rng.standard_normal((m, k)).astype(np.float32)
    host, ref, stats = run_both(g, {"w": wq}, {"x": xv, "idx": ids})
    assert stats["by_thunk"].get("dequant_grouped_matmul_gguf") == 1
    assert stats["fallback_thunks"] == 0, stats
    assert np.all(host[2] == 0) and np.all(host[3] == 0)
    assert_scaled(host, ref)
