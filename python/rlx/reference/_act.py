"""Shared scalar formulas for the numpy reference: activations, binary ops,
comparisons and the rounding helpers every family uses.

All functions take and return float64 arrays; callers round once to the
output dtype on store. Formulas:

* ``gelu``: exact GELU ``x·Φ(x) = x/2·(1 + erf(x/√2))`` (Hendrycks & Gimpel,
  "Gaussian Error Linear Units", arXiv:1606.08415, eq. 1), erf evaluated by
  :func:`math.erf` element by element (float64).
* ``gelu_approx``: the tanh form ``x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³)))``
  of the same paper (section 2).
* ``silu``: ``x·σ(x)`` (Elfwing et al., arXiv:1702.03118; Ramachandran et
  al. "Swish", arXiv:1710.05941).
* ``round``: half to even (IEEE 754 roundTiesToEven, numpy ``rint``).
* ``rsqrt``: ``1/√x``.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def erf(x: np.ndarray) -> np.ndarray:
    """Element-wise float64 erf."""
    x = np.asarray(x, np.float64)
    if x.size == 0:
        return x.copy()
    return _erf(x)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function, computed without overflow warnings for large |x|."""
    x = np.asarray(x, np.float64)
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    ex = np.exp(x[~pos])
    out[~pos] = ex / (1.0 + ex)
    return out


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact (erf) GELU."""
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def gelu_approx(x: np.ndarray) -> np.ndarray:
    """Tanh-approximated GELU."""
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x**3)))


def silu(x: np.ndarray) -> np.ndarray:
    """SiLU / swish-1."""
    x = np.asarray(x, np.float64)
    return x * sigmoid(x)


ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "gelu": gelu,
    "gelu_approx": gelu_approx,
    "silu": silu,
    "relu": lambda x: np.maximum(x, 0.0),
    "sigmoid": sigmoid,
    "tanh": np.tanh,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "neg": np.negative,
    "abs": np.abs,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "atan": np.arctan,
    "round": np.rint,
}

#: ElementwiseRegion chain activation sub-codes (kind 0), in code order.
REGION_ACTIVATIONS: tuple[str, ...] = (
    "gelu",
    "gelu_approx",
    "silu",
    "relu",
    "sigmoid",
    "tanh",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "neg",
    "abs",
    "sin",
    "cos",
    "tan",
    "atan",
    "round",
)

#: ElementwiseRegion chain binary sub-codes (kind 2), in code order.
REGION_BINARY: tuple[str, ...] = ("add", "sub", "mul", "div", "max", "min", "pow")


def activate(name: str | None, x: np.ndarray) -> np.ndarray:
    """Apply activation ``name`` (``None`` = identity) in float64."""
    x = np.asarray(x, np.float64)
    if name is None or name == "none":
        return x
    fn = ACTIVATIONS.get(name)
    if fn is None:
        raise ValueError(f"[activation] unknown activation '{name}'")
    with np.errstate(all="ignore"):
        return np.asarray(fn(x), np.float64)


_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "max": np.maximum,  # NaN-propagating
    "min": np.minimum,  # NaN-propagating
    "pow": np.power,
}


def binary(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Float binary op ``a op b`` in float64 (IEEE results for /0, pow domain)."""
    fn = _BINARY.get(op)
    if fn is None:
        raise ValueError(f"[binary] unknown op '{op}'")
    with np.errstate(all="ignore"):
        return fn(np.asarray(a, np.float64), np.asarray(b, np.float64))


_COMPARE: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}


def compare(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Boolean ``a op b`` (IEEE: every comparison with NaN is false but ``ne``)."""
    fn = _COMPARE.get(op)
    if fn is None:
        raise ValueError(f"[compare] unknown op '{op}'")
    return fn(np.asarray(a, np.float64), np.asarray(b, np.float64))


def round_bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 precision (nearest, ties to even),
    returned as float32. NaN stays NaN."""
    x = np.ascontiguousarray(x, np.float32)
    return bf16_bits_to_f32(f32_to_bf16_bits(x))


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 → bfloat16 bit patterns (uint16), round to nearest even."""
    x = np.ascontiguousarray(x, np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    out = rounded.astype(np.uint16)
    nan = np.isnan(x)
    out[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)  # keep NaN quiet
    return out


def bf16_bits_to_f32(b: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) → float32 (exact)."""
    return (np.asarray(b, np.uint16).astype(np.uint32) << 16).view(np.float32)


def store(dst: np.ndarray, value: np.ndarray) -> None:
    """Write ``value`` into the view ``dst``, rounding once to its dtype."""
    with np.errstate(all="ignore"):
        dst[...] = np.asarray(value).astype(dst.dtype, copy=False).reshape(dst.shape)
