"""``Node.__getitem__``: basic slicing lowered to ``narrow`` (+ ``reshape``).

Supported: ints (the axis is dropped), slices with step 1, ``...`` and
``None`` (a new size-1 axis). Bounds are not clamped as numpy does: a slice
that runs past a static dim is an error, so a typo cannot silently shrink a
tensor. A symbolic dim can only be sliced with ``:`` or non-negative
explicit bounds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlx._types import Dim, dims_str
from rlx.errors import ShapeError
from rlx.node import Node


def _int(v: Any) -> int:
    return int(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else -(1 << 62)


def getitem(x: Node, index: Any) -> Node:
    """``x[index]`` as narrow / reshape nodes (see the module doc)."""
    g = x.graph
    items = list(index) if isinstance(index, tuple) else [index]
    n_ell = sum(1 for it in items if it is Ellipsis)
    if n_ell > 1:
        raise ShapeError("[narrow] an index can only have a single ellipsis ('...')")
    n_real = sum(1 for it in items if it is not None and it is not Ellipsis)
    if n_real > x.ndim:
        raise ShapeError(
            f"[narrow] too many indices ({n_real}) for {x.dtype}{dims_str(x.shape)} "
            f"of rank {x.ndim}"
        )
    if n_ell:
        at = items.index(Ellipsis)
        items[at : at + 1] = [slice(None)] * (x.ndim - n_real)
    else:
        items += [slice(None)] * (x.ndim - n_real)

    out: Node = x
    final: list[Dim] = []  # dims after dropping int axes and inserting None axes
    axis = 0  # axis of `out` (narrow keeps rank)
    changed_rank = False
    for it in items:
        if it is None:
            final.append(1)
            changed_rank = True
            continue
        dim = out.shape[axis]
        where = f"axis {axis} of {x.dtype}{dims_str(x.shape)}"
        if isinstance(it, slice):
            if it.step not in (None, 1):
                raise ShapeError(f"[narrow] slice step must be 1, got {it.step} ({where})")
            if it.start in (None, 0) and it.stop is None:
                final.append(dim)
                axis += 1
                continue
            start = 0 if it.start is None else _int(it.start)
            stop = dim if it.stop is None else _int(it.stop)
            if start == -(1 << 62) or stop == -(1 << 62):
                raise TypeError(f"[narrow] slice bounds must be ints, got {it!r}")
            if isinstance(dim, str):
                if it.stop is None or start < 0 or (isinstance(stop, int) and stop < 0):
                    raise ShapeError(
                        f"[narrow] cannot slice symbolic dim {dim!r} with "
                        f"{it.start}:{it.stop} ({where}); give explicit non-negative bounds"
                    )
                if isinstance(stop, int) and stop < start:
                    raise ShapeError(f"[narrow] empty or reversed slice {start}:{stop} ({where})")
            else:
                if start < 0:
                    start += dim
                if isinstance(stop, int) and stop < 0:
                    stop += dim
                if not (0 <= start <= dim and isinstance(stop, int) and start <= stop <= dim):
                    raise ShapeError(
                        f"[narrow] slice {it.start}:{it.stop} out of range for {where} (size {dim})"
                    )
            assert isinstance(stop, int)
            length = stop - start
            out = g.narrow(out, axis, start, length)
            final.append(length)
            axis += 1
        elif isinstance(it, (int, np.integer)) and not isinstance(it, bool):
            i = int(it)
            if isinstance(dim, int):
                if i < 0:
                    i += dim
                if not 0 <= i < dim:
                    raise ShapeError(f"[narrow] index {int(it)} out of range for {where}")
            elif i < 0:
                raise ShapeError(f"[narrow] negative index {i} on symbolic dim {dim!r} ({where})")
            out = g.narrow(out, axis, i, 1)
            changed_rank = True
            axis += 1
        else:
            raise TypeError(f"[narrow] unsupported index {it!r}: use ints, slices, '...' or None")
    if changed_rank:
        out = g.reshape(out, final)
    return out
