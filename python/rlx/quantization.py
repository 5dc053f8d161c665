"""Quantise float weights into the layouts ``Graph.dequant_matmul`` takes.

:func:`quantize` turns an ``[n, k]`` float matrix (``n`` output rows, ``k``
the reduction axis, the HF / GGUF layout) into packed codes plus scales:

=================  ==========================================================
scheme             storage (``w_q`` u8 ``[n, row_bytes]`` + ``aux``)
=================  ==========================================================
``int8``           per-channel symmetric: int8 codes, f32 scale ``[n, 1]``
``int8/G``         per-group (``G`` elements of a row) symmetric, scale ``[n, k/G]``
``int8/Ga``        per-group asymmetric: + f32 zero points ``[n, k/G]``
``int4/G[a]``      two codes per byte (low nibble first), group ``G``
                   (32 / 64 / 128 …); symmetric codes −8..7, asymmetric 0..15
                   with zero points; ``int4`` alone is ``int4/32``
``fp8_e4m3``       OCP E4M3 codes, f32 scale per output row ``[n]``
``fp8_e5m2``       OCP E5M2 codes, scale per row; ``/tensor``: one scale ``[1]``
``nvfp4``          E2M1 codes (two per byte), E4M3 scale byte per 16
                   elements ``[n, k/16]``, f32 global scale ``[1]``
``q8_0`` …         GGUF types gguf's quantiser produces (q4_0, q4_1, q5_0,
                   q5_1, q8_0, bf16) and ``f16`` / ``f32`` (no aux)
=================  ==========================================================

Scales map each group's ``max|w|`` onto the format's largest code (int8: 127,
int4: 7, E4M3: 448, E5M2: 57344); asymmetric groups map ``[min, max]`` onto
the whole code range with an f32 zero point. Values are rounded to the
nearest code, ties to even, saturating. NVFP4 follows NVIDIA's two-level
recipe: global scale ``amax / (6 · 448)``, each block's scale the E4M3
code nearest ``block_amax / (6 · global)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlx.errors import RlxError
from rlx.reference import quant as rq

#: GGUF types :func:`quantize` can produce (gguf's quantiser, or numpy).
GGUF_TYPES = ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "bf16", "f16", "f32")
#: E2M1 magnitudes by code (codes 0..7; bit 3 is the sign).
_E2M1 = rq.E2M1[:8]


class QuantizeError(RlxError):
    """A scheme rlx cannot produce, or a matrix it does not fit."""


@dataclass(frozen=True)
class Quantized:
    """A quantised ``[n, k]`` matrix in the layout ``dequant_matmul`` reads:
    ``g.dequant_matmul(x, w_q, *aux, scheme=q.scheme, n=q.n, k=q.k)``."""

    #: the scheme as ``Graph.dequant_matmul`` takes it
    scheme: Any
    #: the scheme's name (``int8/32a``, ``fp8_e4m3/tensor``, ``q8_0``)
    name: str
    #: packed codes, u8 ``[n, row_bytes]``
    w_q: np.ndarray
    #: scales / zero points / global scale, in operand order
    aux: tuple[np.ndarray, ...]
    n: int
    k: int

    def dequantize(self) -> np.ndarray:
        """The float32 ``[n, k]`` matrix the codes stand for (the numpy
        reference decoders of :mod:`rlx.reference.quant`)."""
        return dequantize(self)

    def rel_error(self, w: np.ndarray) -> float:
        """``‖dequant − w‖_F / ‖w‖_F`` (0 for an all-zero ``w``)."""
        w64 = np.asarray(w, np.float64)
        den = float(np.linalg.norm(w64))
        err = float(np.linalg.norm(self.dequantize().astype(np.float64) - w64))
        return err / den if den else err


def _parse(scheme: str) -> tuple[str, int, bool, bool]:
    """``(family, group, asymmetric, per_tensor)`` of a scheme name."""
    t = scheme.strip().lower()
    m = re.fullmatch(r"(int8|int4)(?:/(\d+)(a?))?", t)
    if m:
        group = int(m.group(2)) if m.group(2) else 0
        return m.group(1), group, bool(m.group(3)), False
    m = re.fullmatch(r"(fp8_e4m3|fp8_e5m2)(/tensor|/channel)?", t)
    if m:
        return m.group(1), 0, False, m.group(2) == "/tensor"
    if t == "nvfp4" or t in GGUF_TYPES:
        return t, 0, False, False
    raise QuantizeError(
        f"[quantize] unknown scheme {scheme!r}; expected int8[/G[a]], int4[/G[a]], "
        f"fp8_e4m3[/tensor], fp8_e5m2[/tensor], nvfp4 or one of {', '.join(GGUF_TYPES)}"
    )


def _groups(w: np.ndarray, g: int, what: str) -> np.ndarray:
    n, k = w.shape
    if g <= 0 or k % g:
        raise QuantizeError(f"[quantize] {what}: group size {g} must divide the row length k = {k}")
    return w.reshape(n, k // g, g)


def _int(w: np.ndarray, bits: int, g: int, asym: bool) -> tuple[np.ndarray, list[np.ndarray]]:
    """Block int codes (int8 two's complement or unpacked int4 nibbles),
    scales and zero points."""
    blocks = _groups(w, g, f"int{bits}")
    if asym:
        lo_code, hi_code = (-128, 127) if bits == 8 else (0, 15)
        lo, hi = blocks.min(axis=2), blocks.max(axis=2)
        lo, hi = np.minimum(lo, 0.0), np.maximum(hi, 0.0)  # zero stays exact
        span = hi - lo
        scale = np.where(span > 0, span / (hi_code - lo_code), 1.0)
        zp = lo_code - lo / scale
        q = np.rint(blocks / scale[..., None] + zp[..., None])
        q = np.clip(q, lo_code, hi_code)
        aux = [scale.astype(np.float32), zp.astype(np.float32)]
    else:
        top = 127 if bits == 8 else 7
        amax = np.abs(blocks).max(axis=2)
        scale = np.where(amax > 0, amax / top, 1.0)
        q = np.clip(np.rint(blocks / scale[..., None]), -top - (bits == 4), top)
        aux = [scale.astype(np.float32)]
    codes = q.reshape(w.shape).astype(np.int16)
    if bits == 8:
        return codes.astype(np.int8).view(np.uint8), aux
    nib = (codes & 0xF).astype(np.uint8)
    return (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8), aux


def _e2m1_encode(v: np.ndarray) -> np.ndarray:
    """Nearest E2M1 code (ties to the even code), saturating at ±6."""
    a = np.minimum(np.abs(v), 6.0)
    hi = np.clip(np.searchsorted(_E2M1, a), 0, 7)
    lo = np.maximum(hi - 1, 0)
    dlo, dhi = a - _E2M1[lo], _E2M1[hi] - a
    pick = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    return (pick | np.where(np.signbit(v), 8, 0)).astype(np.uint8)


def _nvfp4(w: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    blocks = _groups(w, 16, "nvfp4")
    amax = float(np.abs(w).max())
    glob = np.float32(amax / (6.0 * 448.0) if amax > 0 else 1.0)
    bamax = np.abs(blocks).max(axis=2)
    bs = rq.encode_scaled((bamax / (6.0 * float(glob))).astype(np.float32), "fp8_e4m3")
    eff = rq.FP8_E4M3[bs] * float(glob)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where(eff[..., None] > 0, blocks / eff[..., None], 0.0)
    codes = _e2m1_encode(v).reshape(w.shape)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    return packed, [bs.astype(np.uint8), np.array([glob], np.float32)]


def _gguf(w: np.ndarray, t: str) -> np.ndarray:
    if t == "f32":
        return np.ascontiguousarray(w, np.float32).view(np.uint8)
    if t == "f16":
        return np.ascontiguousarray(w.astype(np.float16)).view(np.uint8)
    from gguf import GGMLQuantizationType
    from gguf import quants as gq

    _groups(w, 32, t)
    q = gq.quantize(np.ascontiguousarray(w, np.float32), GGMLQuantizationType[t.upper()])
    return np.ascontiguousarray(q, np.uint8).reshape(w.shape[0], -1)


def quantize(array: Any, scheme: str) -> Quantized:
    """Quantise a float ``[n, k]`` matrix (rows are output features) under
    ``scheme`` (see the module doc). Raises :class:`QuantizeError` for an
    unknown scheme, a group size that does not divide ``k``, or a non-finite
    or non-2-D input."""
    w = np.asarray(array)
    if w.ndim != 2 or not np.issubdtype(w.dtype, np.floating):
        raise QuantizeError(f"[quantize] need a 2-D float matrix, got {w.dtype}{list(w.shape)}")
    w = w.astype(np.float64)
    if not np.isfinite(w).all():
        raise QuantizeError("[quantize] the matrix holds NaN or inf")
    n, k = w.shape
    fam, g, asym, per_tensor = _parse(scheme)
    if fam in ("int8", "int4"):
        g = g or (k if fam == "int8" else 32)
        if fam == "int4" and g % 2:
            raise QuantizeError(f"[quantize] int4 group size {g} must be even")
        codes, aux = _int(w, 8 if fam == "int8" else 4, g, asym)
        spec = {fam: {"block_size": g, "asymmetric": asym}}
        name = f"{fam}/{g}{'a' if asym else ''}"
        aux = [a.reshape(n, k // g) for a in aux]
        return Quantized(spec, name, codes, tuple(aux), n, k)
    if fam.startswith("fp8"):
        fmt_max = rq.FORMAT_MAX[fam]
        amax = np.abs(w).max(keepdims=True) if per_tensor else np.abs(w).max(axis=1, keepdims=True)
        scale = np.where(amax > 0, amax / fmt_max, 1.0).astype(np.float32)
        codes = rq.encode_scaled((w / scale).astype(np.float32), fam)
        name = fam + ("/tensor" if per_tensor else "")
        return Quantized(fam, name, codes, (scale.reshape(-1),), n, k)
    if fam == "nvfp4":
        packed, aux = _nvfp4(w)
        return Quantized("nvfp4", "nvfp4", packed, tuple(aux), n, k)
    return Quantized({"gguf": fam}, fam, _gguf(w, fam), (), n, k)


def dequantize(q: Quantized) -> np.ndarray:
    """float32 ``[n, k]`` of a :class:`Quantized` (reference decoders)."""
    k = q.k
    if isinstance(q.scheme, dict) and ("int8" in q.scheme or "int4" in q.scheme):
        fam = "int8" if "int8" in q.scheme else "int4"
        bs = q.scheme[fam]["block_size"]
        asym = q.scheme[fam]["asymmetric"]
        if fam == "int8":
            codes = q.w_q.view(np.int8)
        else:
            codes = rq.unpack_int4(q.w_q, k, signed=not asym)
        zp = q.aux[1] if asym else None
        return rq.int_block_weight(codes, q.aux[0], zp, k, bs).astype(np.float32)
    if q.scheme in ("fp8_e4m3", "fp8_e5m2"):
        table = rq.FP8_E4M3 if q.scheme == "fp8_e4m3" else rq.FP8_E5M2
        s = q.aux[0].reshape(-1, 1).astype(np.float64)
        return (table[q.w_q] * s).astype(np.float32)
    if q.scheme == "nvfp4":
        return rq.nvfp4_weight(q.w_q, q.aux[0], float(q.aux[1][0]), k).astype(np.float32)
    from rlx.reference.gguf_blocks import dequantize_rows

    return np.asarray(dequantize_rows(q.w_q, q.scheme["gguf"], k), np.float32)
