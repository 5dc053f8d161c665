"""Small helpers shared by the family modules: dtype strings, strided index
maps and views sized by what a stride pattern can reach."""

from __future__ import annotations

import numpy as np

from . import Memory, float_dtype

#: rlx ``DType`` name → numpy dtype. ``bf16`` is carried as raw ``uint16``
#: bit patterns (numpy has no bfloat16); callers convert explicitly.
DTYPES: dict[str, np.dtype] = {
    "f32": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(np.uint16),
    "f64": np.dtype(np.float64),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8),
    "u32": np.dtype(np.uint32),
    "bool": np.dtype(np.bool_),
    "c64": np.dtype(np.complex64),
}

F32 = np.dtype(np.float32)
I32 = np.dtype(np.int32)


def fdt(t: dict, key: str = "dt") -> np.dtype:
    """Float storage dtype of a ``HalfFlag`` field (absent = f32)."""
    return float_dtype(t.get(key, "f32"))


def strided_index(dims: list[int], strides: list[int]) -> np.ndarray:
    """Flat source index of every element of a row-major ``dims`` output when
    axis ``d`` advances the source by ``strides[d]`` elements (0 = broadcast)."""
    idx = np.zeros((), np.int64)
    for d, s in zip(dims, strides):
        idx = idx[..., None] + np.arange(int(d), dtype=np.int64) * int(s)
    return idx.reshape(-1)


def strided_read(
    mem: Memory, off: int, dims: list[int], strides: list[int], dtype: np.dtype
) -> np.ndarray:
    """Gather the ``dims``-shaped strided pattern at ``off`` (flattened copy)."""
    idx = strided_index(dims, strides)
    if idx.size == 0:
        return np.zeros(0, dtype)
    src = mem.view(off, int(idx.max()) + 1, dtype)
    return src[idx]


def mod_rows(lead_pack: list[int]) -> tuple[list[int], list[int]]:
    """Decode an adaLN ``lead_pack`` ``[lead_rank, x_lead[8], mod_lead[8]]``
    into ``(x_lead, mod_lead)`` (each ``lead_rank`` long, mod dims aligned with
    x's leading dims, size 1 = broadcast)."""
    r = int(lead_pack[0])
    if r > 8:
        raise ValueError(f"[ada_layer_norm] lead_rank {r} > 8")
    x_lead = [int(v) for v in lead_pack[1 : 1 + r]]
    m_lead = [int(v) for v in lead_pack[9 : 9 + r]]
    for xd, md in zip(x_lead, m_lead):
        if md not in (1, xd):
            raise ValueError(f"[ada_layer_norm] modulation dim {md} vs x dim {xd}")
    return x_lead, m_lead
