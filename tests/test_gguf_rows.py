"""``rlx._rlx.gguf_dequantize_rows``: embedding lookups on packed GGUF rows
through the host's native row decoders.

Oracle: ``gguf.quants.dequantize`` (an independent numpy implementation) on
the selected rows. Data are random blocks with finite f16 scales (the f16
fields of each format set to ±[0.01, 2]), so every code path of a block
decoder is exercised. Decoders are exact f32 formulas: tolerance 1e-6
relative (one f32 rounding of differently ordered products).
"""

from __future__ import annotations

import numpy as np
import pytest
import rlx
from gguf import GGMLQuantizationType as T
from gguf import quants
from rlx._rlx import gguf_dequantize_rows

# f16 scale fields (byte offsets within a block)
SCALES = {"Q8_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q4_K": [0, 2], "Q6_K": [208]}


def packed(name: str, n_rows: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Random ``[n_rows, row_bytes]`` uint8 rows of GGUF type ``name``."""
    typ = T[name]
    bs, bb = quants.GGML_QUANT_SIZES[typ]
    if name == "F32":
        return rng.standard_normal((n_rows, k)).astype(np.float32).view(np.uint8)
    if name == "F16":
        return rng.standard_normal((n_rows, k)).astype(np.float16).view(np.uint8)
    nb = n_rows * k // bs
    raw = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    for o in SCALES[name]:
        s = rng.uniform(0.01, 2.0, nb) * rng.choice([-1, 1], nb)
        raw[:, o : o + 2] = s.astype(np.float16).view(np.uint8).reshape(nb, 2)
    return raw.reshape(n_rows, -1)


@pytest.mark.parametrize("name", ["Q8_0", "Q4_K", "Q6_K", "Q5_0", "Q4_1", "F16", "F32"])
def test_rows_match_gguf(name: str) -> None:
    rng = np.random.default_rng(len(name) * 7 + ord(name[1]))
    n_rows, k = 40, 512
    data = packed(name, n_rows, k, rng)
    rows = np.array([3, 0, 39, 3, 17], np.int64)
    out = np.full((len(rows), k), np.nan, np.float32)
    gguf_dequantize_rows(int(T[name]), data, rows, k, out)
    want = quants.dequantize(data[rows], T[name]).reshape(len(rows), k)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
    # a big lookup runs the parallel path
    many = rng.integers(0, n_rows, 300)
    out2 = np.empty((300, k), np.float32)
    gguf_dequantize_rows(int(T[name]), data, many.tolist(), k, out2)
    np.testing.assert_allclose(
        out2, quants.dequantize(data[many], T[name]).reshape(300, k), rtol=1e-6, atol=1e-6
    )


def test_bad_rows_and_shapes() -> None:
    rng = np.random.default_rng(0)
    data = packed("Q4_K", 4, 256, rng)
    out = np.zeros((1, 256), np.float32)
    with pytest.raises(rlx.KernelError, match=r"Q4_K row 4 \(rows\[0\]\) out of range 0\.\.4"):
        gguf_dequantize_rows(int(T.Q4_K), data, [4], 256, out)
    with pytest.raises(rlx.KernelError, match=r"Q4_K row -1"):
        gguf_dequantize_rows(int(T.Q4_K), data, [-1], 256, out)
    with pytest.raises(rlx.ShapeError, match="block size"):
        gguf_dequantize_rows(int(T.Q4_K), data, [0], 100, np.zeros((1, 100), np.float32))
    with pytest.raises(rlx.ShapeError, match=r"out must be \[2, 256\]"):
        gguf_dequantize_rows(int(T.Q4_K), data, [0, 1], 256, out)
    with pytest.raises(rlx.ShapeError, match="dtype"):
        gguf_dequantize_rows(int(T.Q4_K), data, [0], 256, np.zeros((1, 256)))
    with pytest.raises(rlx.WeightFormatError, match="unknown ggml type 99"):
        gguf_dequantize_rows(99, data, [0], 256, out)
