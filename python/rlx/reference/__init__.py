"""The numpy reference: one function per thunk variant, keyed by the thunk's
``name()`` (the seed's strings: ``"sgemm"``, ``"rms_norm"``, ``"split_lastax"``...).

This is rlx's semantic oracle. ``device="reference"`` runs whole schedules
through it, the host executor calls it for thunks without a native kernel,
and the parity tests compare every native kernel against it.

Protocol
--------
A reference function has the signature ``fn(t: dict, mem: Memory) -> None``.

* ``t`` holds the thunk's scalar fields under the seed's field names (``m``,
  ``k``, ``n``, ``eps``, ``heads``...), offsets as ints (tagged by buffer:
  weights offsets carry bit 63 and a segment index, state offsets bit 62,
  see :data:`WEIGHT_TAG`, :data:`STATE_TAG`), enum fields as rlx's snake_case strings
  (``act="silu"``, ``op="add"``, ``dt="f32"`` or ``"f16"``, ``scheme={"gguf":
  "q4_k"}``), tuples as lists. ``t["name"]`` is the thunk name.
* ``mem`` resolves offsets to zero-copy numpy views over the arena, the
  state buffer or a weights segment (:meth:`Memory.view`). The function reads its operands
  through views and writes its outputs in place; it returns nothing.

Index buffers (gather indices, top-k / argmax / sample outputs, labels,
expert ids) are 4-byte ``int32``. ``dt="f16"`` buffers are ``float16``;
computation happens in float32 (float64 where stated) and is rounded once
on store.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

#: Bit 63 marks an offset into a weights segment rather than the arena.
WEIGHT_TAG = 1 << 63
#: Bit 62 (with bit 63 clear) marks an offset into the state buffer.
STATE_TAG = 1 << 62
#: A weights offset's segment index starts at this bit (bits 40..=62).
SEGMENT_SHIFT = 40
_SEGMENT_OFFSET_MASK = (1 << SEGMENT_SHIFT) - 1
_SEGMENT_MASK = (1 << (63 - SEGMENT_SHIFT)) - 1
_RAW_MASK = STATE_TAG - 1


def tag_segment(segment: int, offset: int) -> int:
    """The tagged offset of byte ``offset`` in weights segment ``segment``."""
    return WEIGHT_TAG | (segment << SEGMENT_SHIFT) | offset


def decode_offset(offset: int) -> tuple[str, int, int]:
    """``(buffer, segment, raw offset)`` of a tagged offset; ``buffer`` is
    ``"weights"``, ``"state"`` or ``"arena"`` (segment 0 unless weights)."""
    if offset & WEIGHT_TAG:
        seg = (offset >> SEGMENT_SHIFT) & _SEGMENT_MASK
        return "weights", seg, offset & _SEGMENT_OFFSET_MASK
    if offset & STATE_TAG:
        return "state", 0, offset & _RAW_MASK
    return "arena", 0, offset


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


_EMPTY = np.zeros(0, np.uint8)


class Memory:
    """Byte buffers a schedule runs over: the activation arena, the state
    buffer and the weights segments (segment 0 = the compiler's constants,
    segment ``1 + i`` = param ``i``). All are 1-D ``uint8`` arrays; views
    into them are zero-copy. ``weights`` alone is segment 0 (the layout of
    hand-built test schedules). Weights segments may be read-only arrays."""

    def __init__(
        self,
        arena: np.ndarray,
        weights: np.ndarray | None = None,
        *,
        segments: list[np.ndarray | None] | None = None,
        state: np.ndarray | None = None,
    ) -> None:
        if arena.dtype != np.uint8 or arena.ndim != 1:
            raise TypeError("[reference] arena must be a 1-D uint8 array")
        self.arena = arena
        if segments is None:
            segments = [weights if weights is not None else _EMPTY]
        elif weights is not None:
            raise TypeError("[reference] give either weights or segments, not both")
        #: Weights segments (``None`` = not given yet).
        self.segments: list[np.ndarray | None] = list(segments)
        self.state = state if state is not None else _EMPTY

    @property
    def weights(self) -> np.ndarray:
        """Weights segment 0 (the compiler's constants)."""
        seg = self.segments[0] if self.segments else None
        return seg if seg is not None else _EMPTY

    def buffer(self, offset: int) -> tuple[np.ndarray, int]:
        """The buffer a (tagged) offset points into, and the raw offset."""
        kind, seg, raw = decode_offset(offset)
        if kind == "arena":
            return self.arena, raw
        if kind == "state":
            return self.state, raw
        if seg >= len(self.segments):
            raise IndexError(
                f"[reference] offset names weights segment {seg}; there are {len(self.segments)}"
            )
        buf = self.segments[seg]
        if buf is None:
            raise IndexError(f"[reference] weights segment {seg} is not set")
        return buf, raw

    def view(self, offset: int, shape: tuple[int, ...] | int, dtype: np.dtype | str) -> np.ndarray:
        """A zero-copy view of ``shape`` elements of ``dtype`` at ``offset``
        (writable unless it lies in a read-only weights segment)."""
        buf, off = self.buffer(offset)
        dt = np.dtype(dtype)
        shp = (shape,) if isinstance(shape, int) else tuple(shape)
        count = int(np.prod(shp, dtype=np.int64)) if shp else 1
        nbytes = count * dt.itemsize
        if off < 0 or off + nbytes > buf.size:
            kind, seg, _ = decode_offset(offset)
            where = f"weights segment {seg}" if kind == "weights" else kind
            raise IndexError(
                f"[reference] view of {nbytes} bytes at offset {off} exceeds {where} "
                f"buffer of {buf.size}"
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
from rlx.reference import scan_grad as _scan_grad  # noqa: E402,F401
from rlx.reference import sequence as _sequence  # noqa: E402,F401
from rlx.reference import signal as _signal  # noqa: E402,F401
from rlx.reference import splat as _splat  # noqa: E402,F401
from rlx.reference.misc import CUSTOM_OPS  # noqa: E402,F401
