"""Batched decode GEMVs (``m`` = 1..8 rows, continuous batching) of every
GGUF format with an integer-dot host kernel, against ``gguf``'s own
dequantiser.

* Reference: ``x @ gguf.quants.dequantize(w).T`` in float64 (the ``gguf``
  package's dequantisers, not rlx's). Weights are ``gguf.quants.quantize``
  output where gguf can quantize the type, random valid blocks (finite f16
  scales) otherwise.
* Bound per output ``[i, j]``: the activation rounding of the integer-dot
  kernels, at most ``Σ_e |W[j, e]| · dx[i, e // 32] / 256`` with the default
  two code levels (``dx = max|x| / 127`` per block of 32; the residual level
  has the step ``dx / 256`` and is off by at most half of it, or all of it
  where it clamps), plus ``1e-4 · max|ref|`` for the f32 accumulation.
* A row's result does not depend on the rows batched with it: every row of
  an ``m``-row product equals, bit for bit, the same row run alone
  (``m = 1``, the decode kernel), so a stream served in a batch gives the
  tokens it gives alone. This holds for the integer-dot kernels (CPUs with
  AVX-512 VNNI; elsewhere ``m > 1`` runs the panel GEMM, which sums in
  another order) and is checked where they run.

Shapes: odd ``n`` (so every weight-row tile has a tail) and an odd number of
blocks per row; one larger product splits across the thread team.
"""

from __future__ import annotations

import numpy as np
import pytest
import rlx
from gguf import GGMLQuantizationType as T
from gguf import quants

TOL = 1e-4


def _int_dot_cpu() -> bool:
    """Whether this CPU runs the integer-dot kernels (AVX-512 F/BW/VL/VNNI)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
    except OSError:
        return False
    return {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"} <= set(flags)


INT_DOT = _int_dot_cpu()

#: formats with integer-dot kernels, by gguf type
TYPES = {
    "q4_0": T.Q4_0,
    "q4_1": T.Q4_1,
    "q5_0": T.Q5_0,
    "q5_1": T.Q5_1,
    "q8_0": T.Q8_0,
    "q2_k": T.Q2_K,
    "q3_k": T.Q3_K,
    "q4_k": T.Q4_K,
    "q5_k": T.Q5_K,
    "q6_k": T.Q6_K,
}

#: byte offsets of the f16 super-block scales of the k-quants (random blocks)
SCALE_OFFSETS = {"q2_k": [80, 82], "q3_k": [108], "q4_k": [0, 2], "q5_k": [0, 2], "q6_k": [208]}


def packed(typ: str, n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """``[n, row bytes]`` u8 packed rows of ``typ``."""
    qt = TYPES[typ]
    bs, bb = quants.GGML_QUANT_SIZES[qt]
    if typ not in SCALE_OFFSETS:
        w = rng.standard_normal((n, k)).astype(np.float32)
        return np.ascontiguousarray(quants.quantize(w, qt), np.uint8)
    nb = n * k // bs
    raw = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    for o in SCALE_OFFSETS[typ]:
        s = rng.uniform(0.01, 1.0, nb) * rng.choice([-1, 1], nb)
        raw[:, o : o + 2] = s.astype(np.float16).view(np.uint8).reshape(nb, 2)
    return raw.reshape(n, k // bs * bb)


def host_matmul(typ: str, wq: np.ndarray, xv: np.ndarray, n: int) -> np.ndarray:
    m, k = xv.shape
    g = rlx.Graph(f"bgemv_{typ}_{m}")
    x = g.input("x", [m, k])
    w = g.param("w", list(wq.shape), "u8")
    g.outputs(g.dequant_matmul(x, w, scheme=typ, n=n, k=k))
    ex = rlx.compile(g, device="host")
    ex.set_param("w", wq)
    assert ex.stats["fallback_thunks"] == 0
    return next(iter(ex.run(x=xv).values()))


def check(typ: str, blocks: int, n: int, ms: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    k = blocks * quants.GGML_QUANT_SIZES[TYPES[typ]][0]
    wq = packed(typ, n, k, rng)
    wf = quants.dequantize(wq, TYPES[typ]).astype(np.float64).reshape(n, k)
    assert np.all(np.isfinite(wf))
    xall = rng.standard_normal((max(ms), k)).astype(np.float32)
    alone = [host_matmul(typ, wq, xall[i : i + 1], n)[0] for i in range(max(ms))]
    for m in ms:
        xv = xall[:m]
        got = host_matmul(typ, wq, xv, n).astype(np.float64)
        want = xv.astype(np.float64) @ wf.T
        dx = np.repeat(np.abs(xv.astype(np.float64)).reshape(m, -1, 32).max(axis=2) / 127, 32, 1)
        bound = dx @ np.abs(wf).T / 256 + TOL * np.abs(want).max()
        excess = float(np.max(np.abs(got - want) - bound))
        assert excess <= 0, f"{typ} m={m}: error beyond the bound by {excess:.3g}"
        for i in range(m if INT_DOT else 0):
            np.testing.assert_array_equal(got[i], alone[i], err_msg=f"{typ} m={m} row {i}")


@pytest.mark.parametrize("typ", sorted(TYPES))
def test_every_batch_size_against_gguf(typ: str) -> None:
    blocks = 3 if typ.endswith("_k") else 9
    check(typ, blocks, 13, list(range(1, 9)), seed=len(typ) * 7 + ord(typ[1]))


@pytest.mark.parametrize(("typ", "m"), [("q4_1", 2), ("q8_0", 5), ("q4_k", 8), ("q6_k", 3)])
def test_team_split_against_gguf(typ: str, m: int) -> None:
    # enough work to split across threads; n odd so chunks end in tails
    blocks = 3 if typ.endswith("_k") else 19
    check(typ, blocks, 1003, [m], seed=m)
