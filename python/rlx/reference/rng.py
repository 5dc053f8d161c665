"""Counter-based random numbers, bit-exact with ``crates/rlx-ir/src/rng.rs``.

Random fills (``rng_normal`` / ``rng_uniform`` thunks) use Philox 4x32-10
(Salmon, Moraes, Dror & Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3",
SC 2011), written here from the paper's definition in numpy ``uint64``
arithmetic: ten rounds of ``(c0, c1, c2, c3) -> (hi(M1·c2) ^ c1 ^ k0,
lo(M1·c2), hi(M0·c0) ^ c3 ^ k1, lo(M0·c0))`` with the key bumped by the Weyl
constants between rounds. Word ``i`` of the stream ``(key, offset)`` is lane
``i mod 4`` of the block with counter ``[lo(i/4), hi(i/4), lo(offset),
hi(offset)]`` and key ``[lo(key), hi(key)]``; uniforms are the top 24 bits of
a word times 2^-24 (exact); normals are Box–Muller (cos branch, float32
arithmetic as the host and Metal kernels) on the uniforms of words ``2i``,
``2i + 1``. The thunk's key is ``t["key"]``, or ``u64(op_seed)`` (truncated
toward zero, saturating, as Rust's ``as u64``) when ``op_seed`` is set; the
offset is ``t["offset"]`` (0 when absent).

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


def box_muller(u1: np.ndarray, u2: np.ndarray) -> np.ndarray:
    """``sqrt(-2 ln(1 - u1)) · cos(2π u2)`` in float32 arithmetic (cos branch)."""
    one, two = np.float32(1.0), np.float32(-2.0)
    r = np.sqrt(two * np.log(one - u1.astype(np.float32)))
    return (r * np.cos(np.float32(2.0 * np.pi) * u2.astype(np.float32))).astype(np.float32)


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
