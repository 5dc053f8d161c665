"""Vectorised numpy decoders for every GGUF / ggml block type rlx knows.

Each decoder maps an ``[nblocks, block_bytes]`` uint8 array to an
``[nblocks, block_size]`` float32 array. They are written from the published
block layouts (ggml's ``block_q*`` structs, little-endian, f16 scales) and
are checked against ``gguf.quants.dequantize`` in the tests. Scales are
widened to float32 first and every product is formed in float32, as ggml's
own reference dequantisers do.

Two formats are the seed's own (not in ggml); rlx defines them as:

* ``Q1_0`` — 128 weights in 18 bytes: f16 ``d``, then 16 bytes of sign bits.
  Weight ``i`` of the block reads byte ``i // 8``, bit ``i % 8`` (LSB first):
  ``+d`` when the bit is set, ``-d`` when clear.
* ``Q2_0`` — 128 weights in 34 bytes: f16 ``d``, then 32 bytes of 2-bit codes,
  four per byte, low bits first (weight ``i`` is byte ``i // 4``, bits
  ``2·(i % 4)``..``+1``). Weight = ``d · (code − 1.5)``, i.e. the symmetric
  levels ``{−1.5, −0.5, 0.5, 1.5}·d``.
"""

from __future__ import annotations

import numpy as np

#: type name -> (elements per block, bytes per block); mirrors rlx-ir's quant.rs.
GEOMETRY: dict[str, tuple[int, int]] = {
    "f32": (1, 4),
    "f16": (1, 2),
    "bf16": (1, 2),
    "q4_0": (32, 18),
    "q4_1": (32, 20),
    "q5_0": (32, 22),
    "q5_1": (32, 24),
    "q8_0": (32, 34),
    "q8_1": (32, 36),
    "q2_k": (256, 84),
    "q3_k": (256, 110),
    "q4_k": (256, 144),
    "q5_k": (256, 176),
    "q6_k": (256, 210),
    "q8_k": (256, 292),
    "q1_0": (128, 18),
    "q2_0": (128, 34),
}


def row_bytes(typ: str, k: int) -> int:
    """Bytes of one packed row of ``k`` elements (``k`` a multiple of the block size)."""
    bs, bb = GEOMETRY[typ]
    if k % bs:
        raise ValueError(f"[gguf] k={k} is not a multiple of the {typ} block size {bs}")
    return k // bs * bb


def _f16(b: np.ndarray, off: int) -> np.ndarray:
    """f16 at byte ``off`` of every block, as float32 ``[nb, 1]``."""
    return np.ascontiguousarray(b[:, off : off + 2]).view(np.float16).astype(np.float32)


def _f32(b: np.ndarray, off: int) -> np.ndarray:
    return np.ascontiguousarray(b[:, off : off + 4]).view(np.float32).astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """``[nb, 16]`` bytes -> ``[nb, 32]``: low nibbles (elements 0..15) then high (16..31)."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _bits32(b: np.ndarray, off: int) -> np.ndarray:
    """4 bytes at ``off`` as a little-endian bit vector ``[nb, 32]`` (bit j = element j)."""
    return np.unpackbits(b[:, off : off + 4], axis=1, bitorder="little")


def _q4_0(b: np.ndarray):
    d = _f16(b, 0)
    return d * (_nibbles(b[:, 2:18]).astype(np.float32) - 8.0)


def _q4_1(b: np.ndarray):
    d, m = _f16(b, 0), _f16(b, 2)
    return d * _nibbles(b[:, 4:20]).astype(np.float32) + m


def _q5_0(b: np.ndarray):
    d = _f16(b, 0)
    q = _nibbles(b[:, 6:22]) | (_bits32(b, 2) << 4)
    return d * (q.astype(np.float32) - 16.0)


def _q5_1(b: np.ndarray):
    d, m = _f16(b, 0), _f16(b, 2)
    q = _nibbles(b[:, 8:24]) | (_bits32(b, 4) << 4)
    return d * q.astype(np.float32) + m


def _q8_0(b: np.ndarray):
    return _f16(b, 0) * b[:, 2:34].view(np.int8).astype(np.float32)


def _q8_1(b: np.ndarray):
    # d, then s = d * sum(qs) (used by dot products only), then 32 int8.
    return _f16(b, 0) * b[:, 4:36].view(np.int8).astype(np.float32)


def _q2_k(b: np.ndarray):
    # scales[16] | qs[64] | d | dmin. Element 128n + 32j + l uses byte qs[32n + l],
    # bits 2j..2j+1, and scale byte 8n + 2j + l // 16 (low nibble scale, high nibble min).
    nb = b.shape[0]
    sc = b[:, 0:16]
    qs = b[:, 16:80].reshape(nb, 2, 1, 32)
    d, dmin = _f16(b, 80), _f16(b, 82)
    shifts = np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)
    q = ((qs >> shifts) & 3).reshape(nb, 256).astype(np.float32)
    sidx = np.arange(256) // 16  # 8n + 2j + l//16 == element // 16
    s = sc[:, sidx]
    return d * (s & 0x0F).astype(np.float32) * q - dmin * (s >> 4).astype(np.float32)


def _q3_k_scales(sc: np.ndarray) -> np.ndarray:
    """12 bytes -> 16 signed 6-bit scales (already minus 32), ``[nb, 16]`` float32."""
    i = np.arange(16)
    low = np.where(i < 8, sc[:, i % 8] & 0x0F, sc[:, i % 8] >> 4)
    high = (sc[:, 8 + i % 4] >> (2 * (i // 4)).astype(np.uint8)) & 3
    return (low | (high << 4)).astype(np.float32) - 32.0


def _q3_k(b: np.ndarray):
    # hmask[32] | qs[64] | scales[12] | d. Element 128n + 32j + l: low bits from
    # qs[32n + l] >> 2j, high bit = hmask[l] bit (4n + j) (set = no offset, clear = -4),
    # scale 8n + 2j + l // 16.
    nb = b.shape[0]
    hm = b[:, 0:32].reshape(nb, 1, 1, 32)
    qs = b[:, 32:96].reshape(nb, 2, 1, 32)
    scales = _q3_k_scales(b[:, 96:108])
    d = _f16(b, 108)
    j = np.arange(4, dtype=np.uint8).reshape(1, 1, 4, 1)
    n = np.arange(2, dtype=np.uint8).reshape(1, 2, 1, 1)
    low = (qs >> (2 * j)) & 3
    hbit = (hm >> (4 * n + j)) & 1
    q = (low.astype(np.int16) - np.where(hbit == 1, 0, 4)).reshape(nb, 256)
    return d * scales[:, np.arange(256) // 16] * q.astype(np.float32)


def _k4_scales(sc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K / Q5_K packed 6-bit (scale, min) pairs: 12 bytes -> two ``[nb, 8]`` float32."""
    j = np.arange(8)
    lo = j < 4
    jj = np.where(lo, j, j - 4)  # index helper for j >= 4
    s_lo = sc[:, j % 4] & 63
    m_lo = sc[:, j % 4 + 4] & 63
    s_hi = (sc[:, jj + 8] & 0x0F) | ((sc[:, jj] >> 6) << 4)
    m_hi = (sc[:, jj + 8] >> 4) | ((sc[:, jj + 4] >> 6) << 4)
    s = np.where(lo, s_lo, s_hi).astype(np.float32)
    m = np.where(lo, m_lo, m_hi).astype(np.float32)
    return s, m


def _q4_k(b: np.ndarray):
    # d | dmin | scales[12] | qs[128]. Element 64c + l: qs[32c + l] & 15 with pair 2c;
    # element 64c + 32 + l: qs[32c + l] >> 4 with pair 2c + 1.
    nb = b.shape[0]
    d, dmin = _f16(b, 0), _f16(b, 2)
    s, m = _k4_scales(b[:, 4:16])
    qs = b[:, 16:144].reshape(nb, 4, 1, 32)
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=2).reshape(nb, 256).astype(np.float32)
    sub = np.arange(256) // 32
    return d * s[:, sub] * q - dmin * m[:, sub]


def _q5_k(b: np.ndarray):
    # d | dmin | scales[12] | qh[32] | qs[128]; as Q4_K plus a fifth bit:
    # element 64c + l takes qh[l] bit 2c, element 64c + 32 + l takes bit 2c + 1.
    nb = b.shape[0]
    d, dmin = _f16(b, 0), _f16(b, 2)
    s, m = _k4_scales(b[:, 4:16])
    qh = b[:, 16:48].reshape(nb, 1, 1, 32)
    qs = b[:, 48:176].reshape(nb, 4, 1, 32)
    low = np.concatenate([qs & 0x0F, qs >> 4], axis=2)  # [nb, 4, 2, 32]
    bit = (2 * np.arange(4).reshape(1, 4, 1, 1) + np.arange(2).reshape(1, 1, 2, 1)).astype(np.uint8)
    high = (qh >> bit) & 1
    q = (low | (high << 4)).reshape(nb, 256).astype(np.float32)
    sub = np.arange(256) // 32
    return d * s[:, sub] * q - dmin * m[:, sub]


def _q6_k(b: np.ndarray):
    # ql[128] | qh[64] | scales[16] int8 | d. In half n (128 elements), for l < 32:
    # element 32r + l (r = 0..3) takes ql[64n + l + 32·(r & 1)] nibble (r >> 1),
    # high two bits qh[32n + l] >> 2r, scale 8n + 2r + l // 16; value - 32.
    nb = b.shape[0]
    ql = b[:, 0:128].reshape(nb, 2, 2, 32)  # [n, r&1, l]
    qh = b[:, 128:192].reshape(nb, 2, 1, 32)
    sc = b[:, 192:208].view(np.int8).astype(np.float32)
    d = _f16(b, 208)
    low = np.stack(
        [ql[:, :, 0] & 0x0F, ql[:, :, 1] & 0x0F, ql[:, :, 0] >> 4, ql[:, :, 1] >> 4], axis=2
    )
    shifts = (2 * np.arange(4)).astype(np.uint8).reshape(1, 1, 4, 1)
    high = (qh >> shifts) & 3
    q = (low | (high << 4)).astype(np.int16).reshape(nb, 256) - 32
    return d * sc[:, np.arange(256) // 16] * q.astype(np.float32)


def _q8_k(b: np.ndarray):
    # f32 d | qs[256] int8 | bsums[16] int16 (sums, not needed to decode).
    return _f32(b, 0) * b[:, 4:260].view(np.int8).astype(np.float32)


def _q1_0(b: np.ndarray):
    d = _f16(b, 0)
    bits = np.unpackbits(b[:, 2:18], axis=1, bitorder="little").astype(np.float32)
    return d * (2.0 * bits - 1.0)


def _q2_0(b: np.ndarray):
    d = _f16(b, 0)
    qs = b[:, 2:34, None]
    codes = ((qs >> np.array([0, 2, 4, 6], np.uint8)) & 3).reshape(b.shape[0], 128)
    return d * (codes.astype(np.float32) - 1.5)


def _f32_blk(b: np.ndarray):
    return b.view(np.float32).astype(np.float32)


def _f16_blk(b: np.ndarray):
    return b.view(np.float16).astype(np.float32)


def _bf16_blk(b: np.ndarray):
    return (b.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


DECODERS = {
    "f32": _f32_blk,
    "f16": _f16_blk,
    "bf16": _bf16_blk,
    "q4_0": _q4_0,
    "q4_1": _q4_1,
    "q5_0": _q5_0,
    "q5_1": _q5_1,
    "q8_0": _q8_0,
    "q8_1": _q8_1,
    "q2_k": _q2_k,
    "q3_k": _q3_k,
    "q4_k": _q4_k,
    "q5_k": _q5_k,
    "q6_k": _q6_k,
    "q8_k": _q8_k,
    "q1_0": _q1_0,
    "q2_0": _q2_0,
}


def dequantize_blocks(raw: np.ndarray, typ: str) -> np.ndarray:
    """Decode a flat run of whole blocks of ``typ``; returns float32 ``[nblocks·block_size]``."""
    if typ not in DECODERS:
        raise KeyError(f"[gguf] unknown ggml type '{typ}'")
    bs, bb = GEOMETRY[typ]
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    if raw.size % bb:
        raise ValueError(f"[gguf] {raw.size} bytes is not a whole number of {typ} blocks")
    return DECODERS[typ](raw.reshape(-1, bb)).reshape(-1).astype(np.float32, copy=False)


def dequantize_rows(raw: np.ndarray, typ: str, k: int) -> np.ndarray:
    """Decode packed rows ``[..., row_bytes(k)]`` into float32 ``[..., k]``."""
    rb = row_bytes(typ, k)
    raw = np.asarray(raw, dtype=np.uint8)
    lead = raw.shape[:-1] if raw.ndim > 1 else (raw.size // rb,)
    return dequantize_blocks(raw, typ).reshape(*lead, k)
