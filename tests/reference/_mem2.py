"""Arena helper for the part-2 reference tests: place arrays at aligned offsets."""

from __future__ import annotations

import numpy as np
from rlx.reference import WEIGHT_TAG, Memory

ALIGN = 64
#: Byte pattern of unwritten output space (0x7F7F7F7F is a huge f32 / NaN f16),
#: so a reference that forgets to write an output fails the comparison.
GARBAGE = 0x7F


class Arena:
    """Collects arrays (inputs) and reserved spans (outputs), then builds a :class:`Memory`.

    ``put(arr)`` / ``out(shape, dtype)`` return arena offsets; ``weight(arr)``
    returns a tagged offset into the weights buffer."""

    def __init__(self) -> None:
        self._arena: list[tuple[int, bytes | int]] = []
        self._weights: list[tuple[int, bytes]] = []
        self._size = 0
        self._wsize = 0
        self.mem: Memory | None = None

    @staticmethod
    def _align(n: int) -> int:
        return (n + ALIGN - 1) // ALIGN * ALIGN

    def put(self, arr: np.ndarray) -> int:
        off = self._size
        data = np.ascontiguousarray(arr).tobytes()
        self._arena.append((off, data))
        self._size = self._align(off + len(data) + 1)
        return off

    def out(self, shape: tuple[int, ...] | int, dtype: np.dtype | str = np.float32) -> int:
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        off = self._size
        self._arena.append((off, n))
        self._size = self._align(off + n + 1)
        return off

    def weight(self, arr: np.ndarray) -> int:
        off = self._wsize
        data = np.ascontiguousarray(arr).tobytes()
        self._weights.append((off, data))
        self._wsize = self._align(off + len(data) + 1)
        return off | WEIGHT_TAG

    def build(self) -> Memory:
        arena = np.full(self._size + ALIGN, GARBAGE, np.uint8)
        for off, d in self._arena:
            if isinstance(d, bytes):
                arena[off : off + len(d)] = np.frombuffer(d, np.uint8)
        weights = np.full(self._wsize + ALIGN, GARBAGE, np.uint8)
        for off, d in self._weights:
            weights[off : off + len(d)] = np.frombuffer(d, np.uint8)
        self.mem = Memory(arena, weights)
        return self.mem

    def read(
        self, off: int, shape: tuple[int, ...] | int, dtype: np.dtype | str = np.float32
    ) -> np.ndarray:
        assert self.mem is not None, "build() first"
        return self.mem.view(off, shape, dtype).copy()


def fd_grad(f, x: np.ndarray, h: float = 1e-6) -> np.ndarray:  # noqa: ANN001
    """Central finite-difference gradient of the scalar ``f`` at ``x`` (float64)."""
    x = np.array(x, np.float64)
    g = np.zeros_like(x)
    flat, gf = x.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + h
        fp = f(x)
        flat[i] = old - h
        fm = f(x)
        flat[i] = old
        gf[i] = (fp - fm) / (2 * h)
    return g
