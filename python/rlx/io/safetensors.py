"""A zero-copy safetensors reader: the header is parsed here and every tensor
is a numpy view of one read-only memmap of the file (the ``safetensors``
package copies into numpy arrays, which would double a model's memory).

Format: 8 bytes little-endian header length N, N bytes of JSON mapping each
tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets
relative to the byte after the header) plus an optional ``__metadata__``.
Every problem raises :class:`rlx.WeightFormatError` naming the file and the
tensor or key at fault.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import numpy as np

from rlx.errors import WeightFormatError

PathLike = Union[str, "os.PathLike[str]"]

_DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "BF16": np.uint16,  # raw bf16 bits
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
}

#: Largest header accepted (the format's own limit is 100 MB).
MAX_HEADER = 100 * 1024 * 1024


@dataclass(frozen=True)
class SafeTensor:
    """One tensor's entry: dtype name, shape and absolute byte span."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


class SafetensorsFile:
    """An opened ``.safetensors`` file; ``tensor(name)`` is a zero-copy view."""

    def __init__(self, path: PathLike) -> None:
        self.path = Path(path)
        try:
            self._mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        except (OSError, ValueError) as e:
            raise WeightFormatError(f"[safetensors] {self.path}: cannot map the file: {e}") from e
        size = self._mm.size
        if size < 8:
            raise self._fail(f"file of {size} bytes is shorter than the 8-byte header length")
        n = int(np.frombuffer(self._mm[:8].tobytes(), "<u8")[0])
        if n > MAX_HEADER or 8 + n > size:
            raise self._fail(f"header length {n} does not fit the file of {size} bytes")
        try:
            header = json.loads(self._mm[8 : 8 + n].tobytes())
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise self._fail(f"header is not valid JSON ({e})") from e
        if not isinstance(header, dict):
            raise self._fail("header is not a JSON object")
        self.metadata: dict[str, Any] = header.pop("__metadata__", None) or {}
        base = 8 + n
        self._tensors: dict[str, SafeTensor] = {}
        for name, e in header.items():
            self._tensors[name] = self._entry(name, e, base, size)

    def _fail(self, what: str) -> WeightFormatError:
        return WeightFormatError(f"[safetensors] {self.path}: {what}")

    def _entry(self, name: str, e: Any, base: int, size: int) -> SafeTensor:
        try:
            dtype = str(e["dtype"])
            shape = tuple(int(d) for d in e["shape"])
            b, t = (int(o) for o in e["data_offsets"])
        except (KeyError, TypeError, ValueError) as err:
            raise self._fail(f"tensor {name!r}: malformed entry {e!r} ({err})") from err
        if dtype not in _DTYPES:
            raise self._fail(
                f"tensor {name!r}: unknown dtype {dtype}; supported: {', '.join(_DTYPES)}"
            )
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(_DTYPES[dtype]).itemsize
        if any(d < 0 for d in shape) or b < 0 or t - b != nbytes or base + t > size:
            raise self._fail(
                f"tensor {name!r}: data_offsets [{b}, {t}] do not hold {dtype}{list(shape)} "
                f"inside the file of {size} bytes (truncated or corrupted?)"
            )
        return SafeTensor(name, dtype, shape, base + b, base + t)

    def keys(self) -> list[str]:
        """Tensor names in file order."""
        return list(self._tensors)

    def __contains__(self, name: str) -> bool:
        return name in self._tensors

    def info(self, name: str) -> SafeTensor:
        """The entry of ``name`` (WeightFormatError naming it when absent)."""
        t = self._tensors.get(name)
        if t is None:
            raise self._fail(f"missing tensor {name!r}")
        return t

    def tensor(self, name: str) -> np.ndarray:
        """Zero-copy read-only view of tensor ``name``."""
        t = self.info(name)
        raw = self._mm[t.begin : t.end]
        return raw.view(_DTYPES[t.dtype]).reshape(t.shape)

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes as a uint8 view ``[rows, row_bytes]`` (2-D tensors)."""
        t = self.info(name)
        if len(t.shape) != 2:
            raise self._fail(f"tensor {name!r} has shape {list(t.shape)}, expected 2-D")
        return self._mm[t.begin : t.end].reshape(t.shape[0], -1)


def open_safetensors(path: PathLike) -> SafetensorsFile:
    """Open ``path`` (see :class:`SafetensorsFile`)."""
    return SafetensorsFile(path)
