"""Counter-based random numbers, bit-exact with ``crates/rlx-ir/src/rng.rs``.

Random fills (``rng_normal`` / ``rng_uniform`` thunks) use Philox 4x32-10
(Salmon, Moraes, Dror & Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3",
SC 2011), written here from the paper's definition in numpy ``uint64``
arithmetic: ten rounds of ``(c0, c1, c2, c3) -> (hi(M1·c2) ^ c1 ^ k0,
lo(M1·c2), hi(M0·c0) ^ c3 ^ k1, lo(M0·c0))`` with the key bumped by the Weyl
constants between rounds. Word ``i`` of the stream ``(key, offset)`` is lane
``i mod 4`` of the block with counter ``[lo(i/4), hi(i/4), lo(offset),
hi(offset)]`` and key ``[lo(key), hi(key)]``; uniforms are the top 24 bits of
a word times 2^-24 (exact); normals are Box–Muller (cos branch) on the
uniforms of words ``2i``, ``2i + 1`` with the explicit float32 log / cos of
``rlx_ir::rng`` (:func:`log_f32`, :func:`cos_turn24`: same constants, same
operation order, no library log / cos), so they are bit-exact too. The
thunk's key is ``t["key"]``, or ``u64(op_seed)`` (truncated toward zero,
saturating, as Rust's ``as u64``) when ``op_seed`` is set; the offset is
``t["offset"]`` (0 when absent).

The sampler keeps SplitMix64 (Steele, Lea & Flood, OOPSLA 2014):
:func:`splitmix64` / :func:`uniform_at`.
"""

from __future__ import annotations

import numpy as np

from rlx.reference import Memory, reference

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_STREAM = np.uint64(0xD1B54A32D192ED03)


def splitmix64(x: object) -> np.ndarray:
    """One SplitMix64 finalisation step (scalar or array, returns uint64)."""
    with np.errstate(over="ignore"):
        z = np.asarray(x, dtype=np.uint64) + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def uniform_at(key: int, i: object) -> np.ndarray:
    """float32 uniforms in ``[0, 1)``: the top 24 bits of ``splitmix64(key ^ i·C)``."""
    with np.errstate(over="ignore"):
        idx = np.asarray(i, dtype=np.uint64) * _STREAM
        bits = splitmix64(np.uint64(key) ^ idx) >> np.uint64(40)
    # 24-bit integers are exact in f32; the scale is a power of two: exact.
    return bits.astype(np.float32) * np.float32(1.0 / 16_777_216.0)


_PHILOX_M = (np.uint64(0xD2511F53), np.uint64(0xCD9E8D57))
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)
_LO = np.uint64(0xFFFFFFFF)
_SH = np.uint64(32)


def philox4x32_10(ctr: tuple, key: tuple) -> tuple[np.ndarray, ...]:
    """Philox 4x32-10 on counter words ``ctr`` (4 arrays or ints) and key ``(k0, k1)``
    (ints); returns the 4 output words as uint64 arrays holding 32-bit values."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) & _LO for c in ctr)
    k0, k1 = int(key[0]) & 0xFFFFFFFF, int(key[1]) & 0xFFFFFFFF
    for r in range(10):
        if r:
            k0 = (k0 + _PHILOX_W[0]) & 0xFFFFFFFF
            k1 = (k1 + _PHILOX_W[1]) & 0xFFFFFFFF
        p0 = _PHILOX_M[0] * c0  # < 2^64: exact in uint64
        p1 = _PHILOX_M[1] * c2
        c0, c1, c2, c3 = (
            (p1 >> _SH) ^ c1 ^ np.uint64(k0),
            p1 & _LO,
            (p0 >> _SH) ^ c3 ^ np.uint64(k1),
            p0 & _LO,
        )
    return c0, c1, c2, c3


def philox_blocks(key: int, offset: int, blocks: np.ndarray) -> np.ndarray:
    """Words ``[len(blocks), 4]`` (uint32) of the given blocks of stream ``(key, offset)``."""
    b = np.asarray(blocks, dtype=np.uint64)
    ctr = (b & _LO, b >> _SH, offset & 0xFFFFFFFF, (offset >> 32) & 0xFFFFFFFF)
    words = philox4x32_10(ctr, (key & 0xFFFFFFFF, (key >> 32) & 0xFFFFFFFF))
    return np.stack(words, axis=-1).astype(np.uint32)


def words_to_uniform(w: np.ndarray) -> np.ndarray:
    """float32 uniforms in ``[0, 1)``: the top 24 bits of each word times 2^-24 (exact)."""
    return (np.asarray(w, np.uint32) >> np.uint32(8)).astype(np.float32) * np.float32(
        1.0 / 16_777_216.0
    )


def philox_uniform(key: int, offset: int, n: int) -> np.ndarray:
    """The first ``n`` uniforms of stream ``(key, offset)`` (float32)."""
    w = philox_blocks(key, offset, np.arange((n + 3) // 4, dtype=np.uint64)).reshape(-1)
    return words_to_uniform(w[:n])


_F = np.float32
# ln(1 + f) ≈ f − f²/2 + f³·P(f) on [√½ − 1, √2 − 1] (rlx_ir::rng::LOG_P)
_LOG_P = tuple(
    _F(c)
    for c in (
        "3.3333313e-1",
        "-2.500001e-1",
        "2.0002119e-1",
        "-1.6667996e-1",
        "1.4219551e-1",
        "-1.24055915e-1",
        "1.1888175e-1",
        "-1.1675641e-1",
        "6.746601e-2",
    )
)
_LN2_HI, _LN2_LO = _F("0.693359375"), _F("-2.1219444e-4")
_SQRT2 = _F("1.41421354")
# Taylor coefficients of (sin t / t − 1) / t² and (cos t − 1) / t² in t²
_SIN_P = tuple(_F(c) for c in ("-1.6666667e-1", "8.333334e-3", "-1.984127e-4", "2.7557319e-6"))
_COS_P = tuple(
    _F(c) for c in ("-5.0e-1", "4.1666668e-2", "-1.3888889e-3", "2.4801588e-5", "-2.755732e-7")
)
_ANGLE_STEP = _F("3.7450704e-7")  # 2π / 2^24


def log_f32(x: np.ndarray) -> np.ndarray:
    """Natural log of positive normal float32 values, the explicit polynomial of
    ``rlx_ir::rng::log_f32`` in the same float32 operation order: ``x = 2^e·m``,
    ``m ∈ [√½, √2)``, ``f = m − 1`` (exact), ``((f·f²)·P(f) + e·ln2_lo − ½f²) + f +
    e·ln2_hi``. numpy's float32 ``+ − ×`` round like the host's, so the bits match."""
    x = np.asarray(x, np.float32)
    b = x.view(np.uint32)
    e = (b >> np.uint32(23)).astype(np.int32) - np.int32(127)
    m = ((b & np.uint32(0x007FFFFF)) | np.uint32(0x3F800000)).view(np.float32)
    big = m > _SQRT2
    m = np.where(big, m * _F(0.5), m)
    ef = (e + big.astype(np.int32)).astype(np.float32)
    f = m - _F(1.0)
    p = np.full_like(f, _LOG_P[8])
    for c in _LOG_P[7::-1]:
        p = p * f + c
    z = f * f
    y = f * z * p
    y = y + ef * _LN2_LO
    y = y - _F(0.5) * z
    r = f + y
    return r + ef * _LN2_HI


def cos_turn24(k: np.ndarray) -> np.ndarray:
    """``cos(2π k / 2^24)`` for 24-bit integers ``k`` (``rlx_ir::rng::cos_turn24``):
    exact quadrant reduction in integers, ``t = r·(2π/2^24) ∈ [−π/4, π/4]``, Taylor
    sin / cos of ``t`` in float32 in the host's operation order."""
    k = np.asarray(k, np.int64) & 0x00FFFFFF
    q = (k + (1 << 21)) >> 22
    t = (k - (q << 22)).astype(np.float32) * _ANGLE_STEP
    z = t * t
    s = np.full_like(z, _SIN_P[3])
    for c in _SIN_P[2::-1]:
        s = s * z + c
    sin = t + t * z * s
    c = np.full_like(z, _COS_P[4])
    for cc in _COS_P[3::-1]:
        c = c * z + cc
    cos = _F(1.0) + z * c
    quad = q & 3
    out = np.where(quad == 0, cos, np.where(quad == 1, -sin, np.where(quad == 2, -cos, sin)))
    return out.astype(np.float32)


def box_muller(u1: np.ndarray, u2: np.ndarray) -> np.ndarray:
    """``sqrt(−2 ln(1 − u1)) · cos(2π u2)`` in float32 arithmetic (cos branch) with
    :func:`log_f32` and :func:`cos_turn24` (``u2 = k·2^-24``, so ``k`` is exact)."""
    r = np.sqrt(_F(-2.0) * log_f32(_F(1.0) - np.asarray(u1, np.float32)))
    k = (np.asarray(u2, np.float32) * _F(16_777_216.0)).astype(np.int64)
    return (r * cos_turn24(k)).astype(np.float32)


def philox_normal(key: int, offset: int, n: int) -> np.ndarray:
    """The first ``n`` standard normals of stream ``(key, offset)`` (float32)."""
    u = words_to_uniform(
        philox_blocks(key, offset, np.arange((n + 1) // 2, dtype=np.uint64)).reshape(-1)
    )
    return box_muller(u[0::2], u[1::2])[:n]


def thunk_key(t: dict) -> int:
    """The Philox key of an rng thunk (see the module doc)."""
    seed = t.get("op_seed")
    if seed is None:
        return int(t["key"]) & 0xFFFF_FFFF_FFFF_FFFF
    s = float(seed)
    return 0 if not (s > 0) else min(int(s), 0xFFFF_FFFF_FFFF_FFFF)


@reference("rng_normal")
def rng_normal(t: dict, mem: Memory) -> None:
    """``dst[i] = mean + scale · z_i`` in float32 (``z`` = :func:`philox_normal`)."""
    n = int(t["len"])
    z = philox_normal(thunk_key(t), int(t.get("offset", 0)), n)
    mem.view(t["dst"], n, np.float32)[:] = np.float32(t["mean"]) + np.float32(t["scale"]) * z


@reference("rng_uniform")
def rng_uniform(t: dict, mem: Memory) -> None:
    """``dst[i] = low + (high − low) · u_i`` in float32 (``u`` = :func:`philox_uniform`)."""
    n = int(t["len"])
    u = philox_uniform(thunk_key(t), int(t.get("offset", 0)), n)
    lo, hi = np.float32(t["low"]), np.float32(t["high"])
    mem.view(t["dst"], n, np.float32)[:] = lo + (hi - lo) * u
