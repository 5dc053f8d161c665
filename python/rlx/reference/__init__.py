"""The numpy reference: one function per thunk variant, keyed by the thunk's
``name()`` (the seed's strings: ``"sgemm"``, ``"rms_norm"``, ``"split_lastax"``...).

This is rlx's semantic oracle. ``device="reference"`` runs whole schedules
through it, the host executor calls it for thunks without a native kernel,
and the parity tests compare every native kernel against it.

Protocol
--------
A reference function has the signature ``fn(t: dict, mem: Memory) -> None``.

* ``t`` holds the thunk's scalar fields under the seed's field names (``m``,
  ``k``, ``n``, ``eps``, ``heads``...), offsets as ints (weight offsets carry
  bit 63, see :data:`WEIGHT_TAG`), enum fields as rlx's snake_case strings
  (``act="silu"``, ``op="add"``, ``dt="f32"`` or ``"f16"``, ``scheme={"gguf":
  "q4_k"}``), tuples as lists. ``t["name"]`` is the thunk name.
* ``mem`` resolves offsets to zero-copy numpy views over the arena or the
  weights buffer (:meth:`Memory.view`). The function reads its operands
  through views and writes its outputs in place; it returns nothing.

Index buffers (gather indices, top-k / argmax / sample outputs, labels,
expert ids) are 4-byte ``int32``. ``dt="f16"`` buffers are ``float16``;
computation happens in float32 (float64 where stated) and is rounded once
on store.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

#: Bit 63 marks an offset into the weights buffer rather than the arena.
WEIGHT_TAG = 1 << 63

RefFn = Callable[[dict, "Memory"], None]

#: name -> reference function; filled by the family modules on import.
REGISTRY: dict[str, RefFn] = {}


def reference(name: str) -> Callable[[RefFn], RefFn]:
    """Register ``fn`` as the reference of the thunk called ``name``."""

    def deco(fn: RefFn) -> RefFn:
        if name in REGISTRY:
            raise ValueError(f"[reference] duplicate reference for thunk '{name}'")
        REGISTRY[name] = fn
        return fn

    return deco


class Memory:
    """Byte buffers a schedule runs over: the activation arena (which also
    holds the state region) and the weights buffer. Both are 1-D ``uint8``
    arrays; views into them are zero-copy."""

    def __init__(self, arena: np.ndarray, weights: np.ndarray | None = None) -> None:
        if arena.dtype != np.uint8 or arena.ndim != 1:
            raise TypeError("[reference] arena must be a 1-D uint8 array")
        self.arena = arena
        self.weights = weights if weights is not None else np.zeros(0, np.uint8)

    def buffer(self, offset: int) -> tuple[np.ndarray, int]:
        """The buffer an (optionally tagged) offset points into, and the raw offset."""
        if offset & WEIGHT_TAG:
            return self.weights, offset & ~WEIGHT_TAG
        return self.arena, offset

    def view(self, offset: int, shape: tuple[int, ...] | int, dtype: np.dtype | str) -> np.ndarray:
        """A writable zero-copy view of ``shape`` elements of ``dtype`` at ``offset``."""
        buf, off = self.buffer(offset)
        dt = np.dtype(dtype)
        shp = (shape,) if isinstance(shape, int) else tuple(shape)
        count = int(np.prod(shp, dtype=np.int64)) if shp else 1
        nbytes = count * dt.itemsize
        if off < 0 or off + nbytes > buf.size:
            raise IndexError(
                f"[reference] view of {nbytes} bytes at offset {off} exceeds buffer of {buf.size}"
            )
        return buf[off : off + nbytes].view(dt).reshape(shp)

    def bytes(self, offset: int, nbytes: int) -> np.ndarray:
        """A raw ``uint8`` view (packed quantised blocks)."""
        return self.view(offset, nbytes, np.uint8)


def float_dtype(dt: str) -> np.dtype:
    """numpy dtype of a ``HalfFlag`` string (``"f32"`` / ``"f16"``)."""
    return np.dtype(np.float16) if dt == "f16" else np.dtype(np.float32)


def run_thunk(t: dict, mem: Memory) -> None:
    """Run one thunk through its reference."""
    name = t["name"]
    fn = REGISTRY.get(name)
    if fn is None:
        raise KeyError(f"[{name}] no numpy reference registered")
    fn(t, mem)


# --- families (part 1) ---
# Imported by name so the module ``shape`` does not shadow the parameter
# names above for linters; each import registers its references.
import importlib as _importlib  # noqa: E402

for _family in ("elementwise", "matmul", "norm", "attention", "shape", "reduce", "conv"):
    _importlib.import_module(f"{__name__}.{_family}")

# --- families (part 2) ---
# quant, sequence, signal, misc, backward (+ gguf_blocks, rng, splat, interp).
from rlx.reference import backward as _backward  # noqa: E402,F401
from rlx.reference import interp as _interp  # noqa: E402,F401
from rlx.reference import misc as _misc  # noqa: E402,F401
from rlx.reference import quant as _quant  # noqa: E402,F401
from rlx.reference import rng as _rng  # noqa: E402,F401
from rlx.reference import sequence as _sequence  # noqa: E402,F401
from rlx.reference import signal as _signal  # noqa: E402,F401
from rlx.reference import splat as _splat  # noqa: E402,F401
from rlx.reference.misc import CUSTOM_OPS  # noqa: E402,F401
