"""Arena builder for reference tests: place arrays at aligned offsets in a
uint8 arena (or the weights buffer), reserve poisoned output slots, and hand
back a :class:`rlx.reference.Memory`."""

from __future__ import annotations

import numpy as np
from rlx.reference import WEIGHT_TAG, Memory, run_thunk

#: Byte pattern of unwritten output slots (f32 0x7F7F7F7F ≈ 3.4e38), so a
#: reference that forgets to write shows up as a huge value.
POISON = 0x7F


class Arena:
    """Collects arrays, then builds a Memory. ``arena.put(x)`` returns the
    offset of a copy of ``x``; ``arena.out(shape, dtype)`` a poisoned slot;
    ``arena.weight(x)`` a bit-63-tagged offset into the weights buffer."""

    def __init__(self, align: int = 16, gap: int = 8) -> None:
        self.align, self.gap = align, gap
        self._parts: list[tuple[int, bytes]] = []
        self._wparts: list[tuple[int, bytes]] = []
        self._size = gap
        self._wsize = 0
        self.mem: Memory | None = None
        self._shapes: dict[int, tuple[tuple[int, ...], np.dtype]] = {}

    def _place(self, raw: bytes, weights: bool) -> int:
        size = self._wsize if weights else self._size
        off = -(-size // self.align) * self.align
        (self._wparts if weights else self._parts).append((off, raw))
        end = off + len(raw) + self.gap
        if weights:
            self._wsize = end
        else:
            self._size = end
        return off

    def put(self, x: np.ndarray, dtype: np.dtype | str | None = None) -> int:
        arr = np.ascontiguousarray(x, dtype=dtype)
        off = self._place(arr.tobytes(), False)
        self._shapes[off] = (arr.shape, arr.dtype)
        return off

    def weight(self, x: np.ndarray, dtype: np.dtype | str | None = None) -> int:
        arr = np.ascontiguousarray(x, dtype=dtype)
        return self._place(arr.tobytes(), True) | WEIGHT_TAG

    def out(self, shape: tuple[int, ...] | int, dtype: np.dtype | str = np.float32) -> int:
        shp = (shape,) if isinstance(shape, int) else tuple(shape)
        dt = np.dtype(dtype)
        n = int(np.prod(shp, dtype=np.int64)) * dt.itemsize
        off = self._place(bytes([POISON]) * n, False)
        self._shapes[off] = (shp, dt)
        return off

    def memory(self) -> Memory:
        arena = np.full(self._size + self.gap, POISON, np.uint8)
        for off, raw in self._parts:
            arena[off : off + len(raw)] = np.frombuffer(raw, np.uint8)
        weights = np.zeros(self._wsize, np.uint8)
        for off, raw in self._wparts:
            weights[off : off + len(raw)] = np.frombuffer(raw, np.uint8)
        self.mem = Memory(arena, weights)
        return self.mem

    def get(self, off: int) -> np.ndarray:
        """Copy of the array at ``off`` (shape/dtype as placed or reserved)."""
        assert self.mem is not None
        shp, dt = self._shapes[off]
        return self.mem.view(off, shp, dt).copy()

    def run(self, t: dict) -> Memory:
        """Build memory (once) and run ``t`` through its reference."""
        mem = self.mem if self.mem is not None else self.memory()
        run_thunk(t, mem)
        return mem


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def tol(dt: str) -> dict:
    """Stated tolerances: f32 1e-5 (atol and rtol), f16 1e-2."""
    return {"atol": 1e-2, "rtol": 1e-2} if dt == "f16" else {"atol": 1e-5, "rtol": 1e-5}


def npdt(dt: str) -> np.dtype:
    return np.dtype(np.float16) if dt == "f16" else np.dtype(np.float32)
