"""Shared type aliases and dtype normalisation for the graph builder."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Union

import numpy as np

from rlx import _rlx
from rlx.errors import DimTypeError, DTypeError, ShapeError

#: the largest dimension value the native side takes (an unsigned 64-bit
#: size; byte sizes are checked there against 2^48)
MAX_DIM = 2**64 - 1

#: One dimension: a static size or a symbol (``"seq"``) bound at run time.
Dim = Union[int, str]
#: A list of dimensions.
ShapeLike = Sequence[Dim]
#: Anything naming a dtype: a string any spelling ``rlx._rlx.dtype_name``
#: accepts (``"f32"``, ``"float16"``, ``"half"``, ``"bf16"`` ...), a numpy
#: dtype, or a numpy scalar type (``np.float16``).
DTypeLike = Union[str, "np.dtype[Any]", type]
#: A pair of sizes (h, w); a single int means (n, n).
Pair = Union[int, Sequence[int]]


def dtype_name(dtype: DTypeLike) -> str:
    """Normalise ``dtype`` to rlx's short name (``"f32"``, ``"bf16"``, ``"i32"``...).

    Raises :class:`rlx.DTypeError` (``[dtype] unknown dtype '...'``) for
    anything rlx has no type for.
    """
    if isinstance(dtype, str):
        return _rlx.dtype_name(dtype)
    try:
        nd = np.dtype(dtype)
    except TypeError:
        raise DTypeError(f"[dtype] unknown dtype {dtype!r}") from None
    # ml_dtypes' bfloat16 reports the name "bfloat16", which dtype_name accepts.
    return _rlx.dtype_name(nd.name)


def pair(v: Pair, what: str = "value") -> list[int]:
    """``3`` → ``[3, 3]``; ``(2, 1)`` → ``[2, 1]``."""
    if isinstance(v, (int, np.integer)):
        return [int(v), int(v)]
    vals = [int(x) for x in v]
    if len(vals) != 2:
        raise ValueError(f"{what} must be an int or a pair of ints, got {v!r}")
    return vals


def check_dim(n: int, what: str, minus_one: bool = False) -> int:
    """``n`` when it is a valid dimension size (or ``-1`` with ``minus_one``:
    "the rest", as reshape takes), else :class:`rlx.ShapeError` naming
    ``what``."""
    if n < 0 and not (minus_one and n == -1):
        raise ShapeError(f"[shape] {what} {n} is negative")
    if n > MAX_DIM:
        raise ShapeError(f"[shape] {what} {n} does not fit 64 bits")
    return n


def dims_list(shape: ShapeLike | int | str) -> list[Dim]:
    """Normalise a shape argument to a JSON-ready list of ints / symbols."""
    if isinstance(shape, (int, np.integer, str)):
        shape = [shape]
    out: list[Dim] = []
    for d in shape:
        if isinstance(d, str):
            out.append(d)
        elif isinstance(d, (int, np.integer)) and not isinstance(d, bool):
            out.append(check_dim(int(d), "dimension", minus_one=True))
        else:
            raise DimTypeError(f"[shape] a dimension must be an int or a symbol name, got {d!r}")
    return out


def dims_str(dims: Sequence[Dim]) -> str:
    """``[2, seq, 576]`` — the same spelling the Rust errors use."""
    return "[" + ", ".join(str(d) for d in dims) + "]"
