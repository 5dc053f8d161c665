"""Quantised matmuls and scaled (low-precision) formats.

Shared conventions
------------------
* Weights are ``[n, k]`` (output rows along the reduction axis, "TN"):
  ``dst[m, n] = x[m, k] @ dequant(W)[n, k]ᵀ``.
* Weights are decoded exactly to float32 (the block decoders in
  :mod:`rlx.reference.gguf_blocks` and the FP8 / E2M1 tables here); the
  product is accumulated in float64 and rounded once on store (to f32, or to
  f16 when the thunk's ``dst_f16`` flag is set). ``x_f16`` / ``res_f16`` read
  float16 operands and widen them exactly.
* Legacy block Int8 / Int4 (``dequant_matmul_int8/int4``): codes ``[n, k]``
  (int4: ``ceil(k/2)`` bytes per row, element ``2j`` in the low nibble of byte
  ``j``, ``2j+1`` in the high nibble), f32 ``scale[n, ceil(k/bs)]``, f32
  ``zp[n, ceil(k/bs)]`` when asymmetric; ``w = (q − zp)·scale``. Symmetric
  codes are signed (int8 two's complement; int4 −8..7), asymmetric int8 codes
  stay signed int8 and asymmetric int4 codes are unsigned 0..15.
* FP8 (``dequant_matmul_fp8``): one byte per weight, f32 scale per output row
  ``[n]``. E4M3: bias 7, no infinities, ``S.1111.111`` is NaN, max 448.
  E5M2: IEEE-like, bias 15, max 57344, ``S.11111.00`` = ±inf, other
  ``S.11111.xx`` NaN.
* NVFP4 (``dequant_matmul_nvfp4``): E2M1 codes, two per byte (low nibble
  first), ``k/2`` bytes per row; values ``±{0, .5, 1, 1.5, 2, 3, 4, 6}``
  (bit 3 is the sign); one E4M3 scale byte per 16-element block
  (``[n, k/16]``) and one f32 global scale:
  ``w = e2m1(code)·e4m3(block_scale)·global``.
* Scaled formats: ``fp8_e4m3`` / ``fp8_e5m2`` / ``int8`` (symmetric, codes
  −127..127). Layouts ``per_tensor`` (scale ``[1]``), ``per_row``
  (``[rows]``), ``{"block": {"size": s}}`` (``[rows, ceil(cols/s)]``).
  ``scaled_quantize`` computes ``q = encode(f32(x / scale))`` with
  round-to-nearest-even onto the representable values and saturation to
  ±max (±inf saturates too); NaN encodes as NaN (``0x7F`` / ``0xFF`` for FP8)
  and as 0 for int8.
"""

from __future__ import annotations

import numpy as np

from rlx.reference import Memory, reference
from rlx.reference.gguf_blocks import dequantize_rows, row_bytes

# --------------------------------------------------------------------- tables


def _fp8_table(e5m2: bool) -> np.ndarray:
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    if e5m2:
        e, m, bias, mbits = (codes >> 2) & 0x1F, codes & 3, 15, 2
    else:
        e, m, bias, mbits = (codes >> 3) & 0x0F, codes & 7, 7, 3
    frac = m / float(1 << mbits)
    val = np.where(e == 0, frac * 2.0 ** (1 - bias), (1.0 + frac) * 2.0 ** (e - bias))
    val = sign * val
    if e5m2:
        val = np.where(e == 31, np.where(m == 0, sign * np.inf, np.nan), val)
    else:
        val = np.where((e == 15) & (m == 7), np.nan, val)
    return val.astype(np.float64)


#: 256-entry decode tables (float64; every value is exact in float32).
FP8_E4M3 = _fp8_table(False)
FP8_E5M2 = _fp8_table(True)
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float64)

FORMAT_MAX = {"fp8_e4m3": 448.0, "fp8_e5m2": 57344.0, "int8": 127.0}


def decode_scaled(codes: np.ndarray, fmt: str) -> np.ndarray:
    """Scaled-format codes (uint8) -> float64 values."""
    codes = np.asarray(codes, np.uint8)
    if fmt == "fp8_e4m3":
        return FP8_E4M3[codes]
    if fmt == "fp8_e5m2":
        return FP8_E5M2[codes]
    if fmt == "int8":
        return codes.view(np.int8).astype(np.float64)
    raise KeyError(f"[scaled] unknown format '{fmt}'")


def encode_scaled(x: np.ndarray, fmt: str) -> np.ndarray:
    """Values -> codes (uint8): nearest representable, ties to even code, saturating."""
    x = np.asarray(x, np.float64)
    if fmt == "int8":
        q = np.clip(np.rint(np.nan_to_num(x, nan=0.0)), -127, 127)
        return q.astype(np.int8).view(np.uint8)
    table = FP8_E4M3 if fmt == "fp8_e4m3" else FP8_E5M2
    top = 0x7E if fmt == "fp8_e4m3" else 0x7B  # largest finite positive code
    pos = table[: top + 1]  # increasing in the code
    a = np.minimum(np.abs(x), pos[-1])
    hi = np.clip(np.searchsorted(pos, a), 0, top)
    lo = np.maximum(hi - 1, 0)
    dlo, dhi = a - pos[lo], pos[hi] - a
    pick = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    code = pick.astype(np.uint8) | np.where(np.signbit(x), 0x80, 0).astype(np.uint8)
    return np.where(np.isnan(x), np.uint8(0x7F) | code & 0x80, code).astype(np.uint8)


def expand_scale(scale: np.ndarray, layout: object, rows: int, cols: int) -> np.ndarray:
    """A layout's scale tensor broadcast to ``[rows, cols]`` (float64)."""
    s = np.asarray(scale, np.float64)
    if layout == "per_tensor":
        return np.broadcast_to(s.reshape(-1)[0], (rows, cols))
    if layout == "per_row":
        return np.broadcast_to(s.reshape(rows, 1), (rows, cols))
    size = int(layout["block"]["size"])
    nb = -(-cols // size)
    return np.repeat(s.reshape(rows, nb), size, axis=1)[:, :cols]


def scale_dims(layout: object, rows: int, cols: int) -> tuple[int, ...]:
    """Dims of a layout's scale tensor (``ScaleLayout::scale_dims``)."""
    if layout == "per_tensor":
        return (1,)
    if layout == "per_row":
        return (rows,)
    size = max(int(layout["block"]["size"]), 1)
    return (rows, -(-cols // size))


# ----------------------------------------------------------- weight decoders


def gguf_type(scheme: object) -> str:
    if not (isinstance(scheme, dict) and "gguf" in scheme):
        raise ValueError(f"[dequant] expected a GGUF scheme, got {scheme!r}")
    return scheme["gguf"]


def gguf_weight(mem: Memory, off: int, scheme: object, n: int, k: int) -> np.ndarray:
    """Decode an ``[n, row_bytes(k)]`` packed GGUF weight to float32 ``[n, k]``."""
    typ = gguf_type(scheme)
    rb = row_bytes(typ, k)
    return dequantize_rows(mem.bytes(off, n * rb).reshape(n, rb), typ, k)


def int_block_weight(
    codes: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, k: int, bs: int
) -> np.ndarray:
    """``(q − zp)·scale`` with per-block scale / zero point; codes ``[n, k]`` numeric."""
    blk = np.arange(k) // bs
    w = codes.astype(np.float32)
    if zp is not None:
        w = w - zp[:, blk]
    return w * scale[:, blk]


def unpack_int4(packed: np.ndarray, k: int, signed: bool) -> np.ndarray:
    """``[n, ceil(k/2)]`` bytes -> ``[n, k]`` int8 codes (low nibble first)."""
    lo, hi = packed & 0x0F, packed >> 4
    q = np.stack([lo, hi], axis=-1).reshape(packed.shape[0], -1)[:, :k].astype(np.int8)
    return np.where(q >= 8, q - 16, q).astype(np.int8) if signed else q


def _x(t: dict, mem: Memory, off: int, m: int, k: int) -> np.ndarray:
    dt = np.float16 if t.get("x_f16") else np.float32
    return mem.view(off, (m, k), dt).astype(np.float64)


def _store(mem: Memory, off: int, val: np.ndarray, f16: bool) -> None:
    dt = np.float16 if f16 else np.float32
    mem.view(off, val.shape, dt)[...] = val.astype(dt)


def _mm(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) @ w.astype(np.float64).T


# -------------------------------------------------------------------- thunks


@reference("dequant_matmul_gguf")
def dequant_matmul_gguf(t: dict, mem: Memory) -> None:
    """``dst[m, n] = x[m, k] @ dequant(w_q)[n, k]ᵀ``; w_q rows are packed GGUF blocks."""
    m, k, n = t["m"], t["k"], t["n"]
    w = gguf_weight(mem, t["w_q"], t["scheme"], n, k)
    _store(mem, t["dst"], _mm(_x(t, mem, t["x"], m, k), w), t.get("dst_f16", False))


@reference("dequant_matmul_gguf_t")
def dequant_matmul_gguf_t(t: dict, mem: Memory) -> None:
    """``dst[m, k] = x[m, n] @ dequant(w_q)[n, k]`` (the transposed product)."""
    m, k, n = t["m"], t["k"], t["n"]
    w = gguf_weight(mem, t["w_q"], t["scheme"], n, k)
    x = mem.view(t["x"], (m, n), np.float32).astype(np.float64)
    mem.view(t["dst"], (m, k), np.float32)[...] = x @ w.astype(np.float64)


@reference("dequant_grouped_matmul_gguf")
def dequant_grouped_matmul_gguf(t: dict, mem: Memory) -> None:
    """Row ``i`` uses expert ``expert_idx[i]`` of the ``[num_experts, n, row_bytes]``
    packed stack. An expert id outside ``[0, num_experts)`` gives a zero row."""
    m, k, n, e = t["m"], t["k_dim"], t["n"], t["num_experts"]
    typ = gguf_type(t["scheme"])
    rb = row_bytes(typ, k)
    stack = mem.bytes(t["w_q"], e * n * rb).reshape(e, n, rb)
    x = mem.view(t["input"], (m, k), np.float32).astype(np.float64)
    idx = mem.view(t["expert_idx"], m, np.int32)
    out = np.zeros((m, n), np.float64)
    for ex in np.unique(idx):
        if 0 <= ex < e:
            rows = idx == ex
            out[rows] = _mm(x[rows], dequantize_rows(stack[ex], typ, k))
    mem.view(t["dst"], (m, n), np.float32)[...] = out


def _int_matmul(t: dict, mem: Memory, four_bit: bool) -> None:
    m, k, n, bs = t["m"], t["k"], t["n"], t["block_size"]
    asym = bool(t["is_asymmetric"])
    nb = -(-k // bs)
    if four_bit:
        codes = unpack_int4(mem.bytes(t["w_q"], n * ((k + 1) // 2)).reshape(n, -1), k, not asym)
    else:
        codes = mem.view(t["w_q"], (n, k), np.int8)
    scale = mem.view(t["scale"], (n, nb), np.float32)
    zp = mem.view(t["zp"], (n, nb), np.float32) if asym else None
    w = int_block_weight(codes, scale, zp, k, bs)
    x = mem.view(t["x"], (m, k), np.float32)
    mem.view(t["dst"], (m, n), np.float32)[...] = _mm(x, w)


@reference("dequant_matmul_int8")
def dequant_matmul_int8(t: dict, mem: Memory) -> None:
    """Block int8: ``w = (q − zp)·scale`` per ``block_size`` elements of a row."""
    _int_matmul(t, mem, four_bit=False)


@reference("dequant_matmul_int4")
def dequant_matmul_int4(t: dict, mem: Memory) -> None:
    """Block int4 (two per byte, low nibble first): ``w = (q − zp)·scale``."""
    _int_matmul(t, mem, four_bit=True)


@reference("dequant_matmul_fp8")
def dequant_matmul_fp8(t: dict, mem: Memory) -> None:
    """FP8 codes ``[n, k]`` times an f32 scale per output row ``[n]``."""
    m, k, n = t["m"], t["k"], t["n"]
    table = FP8_E5M2 if t["e5m2"] else FP8_E4M3
    w = table[mem.bytes(t["w_q"], n * k).reshape(n, k)] * mem.view(t["scale"], (n, 1), np.float32)
    x = mem.view(t["x"], (m, k), np.float32)
    mem.view(t["dst"], (m, n), np.float32)[...] = _mm(x, w)


def nvfp4_weight(packed: np.ndarray, scales: np.ndarray, global_scale: float, k: int) -> np.ndarray:
    """``[n, k/2]`` E2M1 bytes + ``[n, k/16]`` E4M3 scale bytes -> float64 ``[n, k]``."""
    n = packed.shape[0]
    codes = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(n, k)
    blk = FP8_E4M3[scales][:, np.arange(k) // 16]
    return E2M1[codes] * blk * np.float64(global_scale)


@reference("dequant_matmul_nvfp4")
def dequant_matmul_nvfp4(t: dict, mem: Memory) -> None:
    """NVFP4 weights (see the module doc); ``k`` is a multiple of 16."""
    m, k, n = t["m"], t["k"], t["n"]
    packed = mem.bytes(t["w_q"], n * k // 2).reshape(n, k // 2)
    scales = mem.bytes(t["scale"], n * (k // 16)).reshape(n, k // 16)
    g = float(mem.view(t["global_scale"], 1, np.float32)[0])
    x = mem.view(t["x"], (m, k), np.float32)
    mem.view(t["dst"], (m, n), np.float32)[...] = _mm(x, nvfp4_weight(packed, scales, g, k))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """Tanh-approximated GELU: ``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))``."""
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def _gate_up(t: dict, mem: Memory) -> tuple[np.ndarray, np.ndarray]:
    k, n = t["k"], t["n"]
    x = _x(t, mem, t["x"], 1, k)
    gate = _mm(x, gguf_weight(mem, t["gate_w"], t["scheme"], n, k))[0]
    up = _mm(x, gguf_weight(mem, t["up_w"], t["scheme"], n, k))[0]
    return gate, up


@reference("fused_mlp_gate_up_swiglu")
def fused_mlp_gate_up_swiglu(t: dict, mem: Memory) -> None:
    """Decode MLP (m = 1): ``dst = silu(x @ Wgᵀ) · (x @ Wuᵀ)``, GGUF weights."""
    gate, up = _gate_up(t, mem)
    _store(mem, t["dst"], silu(gate) * up, t.get("dst_f16", False))


@reference("fused_mlp_gate_up_gelu")
def fused_mlp_gate_up_gelu(t: dict, mem: Memory) -> None:
    """Decode MLP (m = 1): ``dst = gelu_tanh(x @ Wgᵀ) · (x @ Wuᵀ)``."""
    gate, up = _gate_up(t, mem)
    _store(mem, t["dst"], gelu_tanh(gate) * up, t.get("dst_f16", False))


@reference("fused_mlp_down_residual")
def fused_mlp_down_residual(t: dict, mem: Memory) -> None:
    """Decode MLP tail (m = 1): ``dst = res + x @ Wᵀ``."""
    k, n = t["k"], t["n"]
    x = _x(t, mem, t["x"], 1, k)
    res_dt = np.float16 if t.get("res_f16") else np.float32
    res = mem.view(t["res"], n, res_dt).astype(np.float64)
    out = res + _mm(x, gguf_weight(mem, t["w"], t["scheme"], n, k))[0]
    _store(mem, t["dst"], out, t.get("dst_f16", False))


@reference("scaled_matmul")
def scaled_matmul(t: dict, mem: Memory) -> None:
    """TN low-precision GEMM: ``(dec(lhs)·s_l) @ (dec(rhs)·s_r)ᵀ (+ bias[n])``;
    lhs ``[m, k]``, rhs ``[n, k]`` codes, both scaled under ``layout``."""
    m, k, n, lay = t["m"], t["k"], t["n"], t["layout"]
    a = decode_scaled(mem.bytes(t["lhs"], m * k).reshape(m, k), t["lhs_fmt"])
    b = decode_scaled(mem.bytes(t["rhs"], n * k).reshape(n, k), t["rhs_fmt"])
    a = a * expand_scale(mem.view(t["lhs_scale"], scale_dims(lay, m, k), np.float32), lay, m, k)
    b = b * expand_scale(mem.view(t["rhs_scale"], scale_dims(lay, n, k), np.float32), lay, n, k)
    out = a @ b.T
    if t.get("has_bias"):
        out = out + mem.view(t["bias"], n, np.float32)
    mem.view(t["dst"], (m, n), np.float32)[...] = out


def _rows_cols_scale(t: dict, mem: Memory) -> tuple[int, int, np.ndarray]:
    r, c = t["rows"], t["cols"]
    s = mem.view(t["scale"], scale_dims(t["layout"], r, c), np.float32)
    return r, c, expand_scale(s, t["layout"], r, c).astype(np.float32)


@reference("scaled_quantize")
def scaled_quantize(t: dict, mem: Memory) -> None:
    """``codes = encode(f32(x / scale))`` (nearest-even, saturating)."""
    r, c, s = _rows_cols_scale(t, mem)
    x = mem.view(t["x"], (r, c), np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = (x / s).astype(np.float32)
    mem.bytes(t["dst"], r * c).reshape(r, c)[...] = encode_scaled(q, t["fmt"])


@reference("scaled_dequantize")
def scaled_dequantize(t: dict, mem: Memory) -> None:
    """``dst = decode(codes) · scale`` in f32."""
    r, c, s = _rows_cols_scale(t, mem)
    codes = mem.bytes(t["codes"], r * c).reshape(r, c)
    mem.view(t["dst"], (r, c), np.float32)[...] = (
        decode_scaled(codes, t["fmt"]).astype(np.float32) * s
    )


@reference("scaled_quant_scale")
def scaled_quant_scale(t: dict, mem: Memory) -> None:
    """Per scale group: ``amax / fmt_max``, or 1.0 where ``amax == 0``."""
    r, c, lay = t["rows"], t["cols"], t["layout"]
    a = np.abs(mem.view(t["x"], (r, c), np.float32).astype(np.float64))
    if lay == "per_tensor":
        amax = a.max(keepdims=True).reshape(1)
    elif lay == "per_row":
        amax = a.max(axis=1)
    else:
        size = int(lay["block"]["size"])
        nb = -(-c // size)
        pad = np.zeros((r, nb * size))
        pad[:, :c] = a
        amax = pad.reshape(r, nb, size).max(axis=2)
    s = np.where(amax == 0, 1.0, amax / FORMAT_MAX[t["fmt"]])
    mem.view(t["dst"], s.shape, np.float32)[...] = s.astype(np.float32)
