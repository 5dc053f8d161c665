"""Counter-based RNG of ``rlx_ir`` (``crates/rlx-ir/src/rng.rs``), bit-exact.

SplitMix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number
generators", OOPSLA 2014) on Python ints masked to 64 bits, so wraparound
matches Rust's ``wrapping_*`` arithmetic.
"""

from __future__ import annotations

_MASK = (1 << 64) - 1


def splitmix64(x: int) -> int:
    """One SplitMix64 finalisation step of the 64-bit value ``x``."""
    z = (x + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def uniform_at(key: int, i: int) -> float:
    """Uniform in ``[0, 1)`` for element ``i``: the top 24 bits of the mix,
    as an exact float32 value (returned as a Python float)."""
    bits = splitmix64((key & _MASK) ^ ((i * 0xD1B54A32D192ED03) & _MASK)) >> 40
    return bits * (1.0 / 16_777_216.0)
