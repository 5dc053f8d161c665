"""Counter-based random numbers, bit-exact with ``crates/rlx-ir/src/rng.rs``.

SplitMix64 (Steele, Lea & Flood, OOPSLA 2014) in numpy ``uint64`` arithmetic
(numpy wraps on overflow, which is exactly Rust's ``wrapping_*``). Element
``i`` of a fill keyed ``key`` is a pure function of ``(key, i)``; every
function here is vectorised over ``i``.

``rng_normal`` / ``rng_uniform`` thunks: the key is ``t["key"]`` (the
lowering's ``RngOptions::key_for(node id)``) when ``op_seed`` is null. A
per-op seed pins the stream independently of the graph seed and the run
counter: ``key = splitmix64(u64(op_seed))``, where ``u64`` truncates toward
zero and saturates (Rust's ``as u64``: negative and NaN -> 0).
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


def normal_at(key: int, i: object) -> np.ndarray:
    """float32 standard normals: Box–Muller (cos branch) on uniforms ``2i``, ``2i + 1``, in f64."""
    i = np.asarray(i, dtype=np.uint64)
    u1 = uniform_at(key, np.uint64(2) * i).astype(np.float64)
    u2 = uniform_at(key, np.uint64(2) * i + np.uint64(1)).astype(np.float64)
    r = np.sqrt(-2.0 * np.log(1.0 - u1))
    return (r * np.cos(2.0 * np.pi * u2)).astype(np.float32)


def thunk_key(t: dict) -> int:
    """The stream key of an rng thunk (see the module doc)."""
    seed = t.get("op_seed")
    if seed is None:
        return int(t["key"]) & 0xFFFF_FFFF_FFFF_FFFF
    s = float(seed)
    u = 0 if not (s > 0) else min(int(s), 0xFFFF_FFFF_FFFF_FFFF)
    return int(splitmix64(np.uint64(u)))


@reference("rng_normal")
def rng_normal(t: dict, mem: Memory) -> None:
    """``dst[i] = mean + scale · normal_at(key, i)`` (f32 arithmetic on the f32 normal)."""
    n = int(t["len"])
    z = normal_at(thunk_key(t), np.arange(n, dtype=np.uint64))
    mem.view(t["dst"], n, np.float32)[:] = np.float32(t["mean"]) + np.float32(t["scale"]) * z


@reference("rng_uniform")
def rng_uniform(t: dict, mem: Memory) -> None:
    """``dst[i] = low + (high − low) · uniform_at(key, i)`` in f32."""
    n = int(t["len"])
    u = uniform_at(thunk_key(t), np.arange(n, dtype=np.uint64))
    lo, hi = np.float32(t["low"]), np.float32(t["high"])
    mem.view(t["dst"], n, np.float32)[:] = lo + (hi - lo) * u
