"""``dequant_mat_mul_t`` (``dy @ dequant(W)`` straight from packed GGUF
blocks, the input gradient of a frozen quantised matmul) against numpy on
``gguf.quants.dequantize`` (gguf's own dequantisers), on the reference,
host and metal-sim (quant.metal ``gemm_t_<type>``) devices, for Q4_1, Q4_K,
Q6_K and Q8_0 at odd sizes.

Weights: ``gguf.quants.quantize`` output for Q4_1 / Q8_0; random blocks with
finite f16 scales for Q4_K / Q6_K (gguf cannot quantize k-quants).
Bound: ``max|got − want| ≤ 1e-4 · max|want|`` (f32 accumulation against
an f64 product; only the summation order differs).
"""

from __future__ import annotations

import numpy as np
import pytest
import rlx
from gguf import GGMLQuantizationType as T
from gguf import quants

TYPES = {"q4_1": T.Q4_1, "q8_0": T.Q8_0, "q4_k": T.Q4_K, "q6_k": T.Q6_K}
#: byte offsets of the f16 scale fields of the k-quant blocks
SCALES = {"q4_k": [0, 2], "q6_k": [208]}
TOL = 1e-4


def _packed(typ: str, n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    qt = TYPES[typ]
    if typ not in SCALES:
        w = rng.standard_normal((n, k)).astype(np.float32)
        return np.ascontiguousarray(quants.quantize(w, qt), np.uint8)
    bs, bb = quants.GGML_QUANT_SIZES[qt]
    nb = n * k // bs
    raw = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    for o in SCALES[typ]:
        s = rng.uniform(0.01, 1.0, nb) * rng.choice([-1, 1], nb)
        raw[:, o : o + 2] = s.astype(np.float16).view(np.uint8).reshape(nb, 2)
    return raw.reshape(n, -1)


@pytest.mark.parametrize("device", ["reference", "host", "metal-sim"])
@pytest.mark.parametrize("typ", sorted(TYPES))
@pytest.mark.parametrize(("m", "blocks", "n"), [(1, 3, 37), (9, 5, 19), (33, 1, 7)])
def test_transposed_product_matches_gguf_dequantize(
    device: str, typ: str, m: int, blocks: int, n: int
) -> None:
    rng = np.random.default_rng(100 * m + n)
    k = blocks * quants.GGML_QUANT_SIZES[TYPES[typ]][0]
    wq = _packed(typ, n, k, rng)
    dense = quants.dequantize(wq, TYPES[typ]).astype(np.float64)
    assert dense.shape == (n, k)
    g = rlx.Graph(f"dqt_{typ}")
    dy = g.input("dy", [m, n])
    w = g.param("w", list(wq.shape), "u8")
    g.outputs(g.dequant_matmul_t(dy, w, scheme=typ, k=k))
    dyv = rng.standard_normal((m, n)).astype(np.float32)
    ex = rlx.compile(g, device=device)
    ex.set_param("w", wq)
    got = next(iter(ex.run(dy=dyv).values()))
    if device == "host":
        assert ex.stats["by_thunk"].get("dequant_matmul_gguf_t") == 1
        assert ex.stats["fallback_thunks"] == 0, ex.stats
    if device == "metal-sim":
        # the gemm_t_<type> kernel, not a host command
        assert "dequant_matmul_gguf_t" not in ex.stats["metal_host_by_thunk"], ex.stats
    want = dyv.astype(np.float64) @ dense
    assert got.shape == (m, k) and got.dtype == np.float32
    err = float(np.max(np.abs(got - want)))
    assert err <= TOL * float(np.max(np.abs(want))), err


def test_grad_uses_packed_route_and_matches_dense() -> None:
    """``rlx.grad`` of ``sum(dequant_matmul(x, W) * c)`` w.r.t. ``x`` goes
    through ``dequant_mat_mul_t`` (no identity, no dense copy) and equals
    ``c @ dequant(W)``."""
    rng = np.random.default_rng(3)
    n, k, m = 21, 64, 5
    wq = _packed("q4_1", n, k, rng)
    g = rlx.Graph("dq_grad")
    x = g.input("x", [m, k])
    c = g.input("c", [m, n])
    w = g.param("w", list(wq.shape), "u8")
    loss = g.sum(g.dequant_matmul(x, w, scheme="q4_1") * c)
    (dx,) = rlx.grad(g, loss, [x])
    g.outputs(dx)
    assert [nd.op for nd in g.nodes if nd.op.startswith("dequant_mat_mul")] == [
        "dequant_mat_mul",
        "dequant_mat_mul_t",
    ]
    ex = rlx.compile(g, device="host")
    ex.set_param("w", wq)
    cv = rng.standard_normal((m, n)).astype(np.float32)
    got = next(iter(ex.run(x=rng.standard_normal((m, k)).astype(np.float32), c=cv).values()))
    want = cv.astype(np.float64) @ quants.dequantize(wq, T.Q4_1).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_non_gguf_scheme_is_an_error() -> None:
    g = rlx.Graph("bad")
    dy = g.input("dy", [2, 4])
    w = g.param("w", [4, 32], "u8")
    with pytest.raises(rlx.RlxError, match="dequant_mat_mul_t"):
        g.dequant_matmul_t(dy, w, scheme="int8/32", k=32)
