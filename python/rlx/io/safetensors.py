"""A zero-copy safetensors reader: the header is parsed here and every tensor
is a numpy view of one read-only memmap of the file (the ``safetensors``
package copies into numpy arrays, which would double a model's memory).

Format: 8 bytes little-endian header length N, N bytes of JSON mapping each
tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets
relative to the byte after the header) plus an optional ``__metadata__``.
Every problem raises :class:`rlx.WeightFormatError` naming the file and the
tensor or key at fault. Validated up front: a JSON object without duplicate
keys (nesting bounded by json's recursion limit, then by the types: nothing
valid nests more than 3 deep), ``__metadata__`` a string →
string map, every shape and offset a non-negative JSON integer (not a float,
not ``1e400``, not a bool), byte counts computed exactly, every tensor inside
the data area and no two tensors overlapping.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import numpy as np

from rlx.errors import WeightFormatError
from rlx.io.mapped import MapStamp

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
#: Most dims a tensor may have (numpy 1.x's limit).
MAX_DIMS = 32
#: Largest dim (and element count) accepted: numpy's ``intp`` maximum.
MAX_DIM = (1 << 63) - 1


class _Duplicate(Exception):
    """A JSON object repeats a key."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _Duplicate(k)
        out[k] = v
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


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
            st = os.stat(self.path)
            self._mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        except (OSError, ValueError) as e:
            raise WeightFormatError(f"[safetensors] {self.path}: cannot map the file: {e}") from e
        self._stamp = MapStamp(self.path, "safetensors", st, self._mm)
        size = self._mm.size
        if size < 8:
            raise self._fail(f"file of {size} bytes is shorter than the 8-byte header length")
        n = int(np.frombuffer(self._mm[:8].tobytes(), "<u8")[0])
        if n > MAX_HEADER or 8 + n > size:
            raise self._fail(f"header length {n} does not fit the file of {size} bytes")
        raw = self._mm[8 : 8 + n].tobytes()
        try:
            header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
        except _Duplicate as e:
            raise self._fail(f"header repeats the key {e.args[0]!r}") from None
        except RecursionError:
            # json's C scanner bounds its recursion; nothing valid nests > 3 deep
            raise self._fail("header JSON nests too deeply") from None
        except (UnicodeDecodeError, ValueError) as e:
            # ValueError: bad JSON, or an integer of more than 4300 digits
            raise self._fail(f"header is not valid JSON ({e})") from None
        if not isinstance(header, dict):
            raise self._fail("header is not a JSON object")
        meta = header.pop("__metadata__", None)
        if meta is None:
            meta = {}
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise self._fail("__metadata__ is not a map of strings to strings")
        self.metadata: dict[str, Any] = meta
        base = 8 + n
        self._tensors: dict[str, SafeTensor] = {}
        for name, e in header.items():
            self._tensors[name] = self._entry(name, e, base, size)
        spans = sorted((t.begin, t.end, t.name) for t in self._tensors.values() if t.end > t.begin)
        for (_, end, a), (begin, _, b) in zip(spans, spans[1:]):
            if begin < end:
                raise self._fail(f"tensors {a!r} and {b!r} overlap in the data area")

    def _fail(self, what: str) -> WeightFormatError:
        return WeightFormatError(f"[safetensors] {self.path}: {what}")

    def _entry(self, name: str, e: Any, base: int, size: int) -> SafeTensor:
        if not isinstance(e, dict):
            raise self._fail(f"tensor {name!r}: malformed entry: not a JSON object")
        dtype, shape_v, offs = e.get("dtype"), e.get("shape"), e.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in _DTYPES:
            raise self._fail(
                f"tensor {name!r}: unknown dtype {dtype!r}; supported: {', '.join(_DTYPES)}"
            )
        if not isinstance(shape_v, list) or len(shape_v) > MAX_DIMS:
            raise self._fail(
                f"tensor {name!r}: malformed entry: shape is not a list of at most {MAX_DIMS} dims"
            )
        if not all(_is_int(d) and 0 <= d <= MAX_DIM for d in shape_v):
            raise self._fail(
                f"tensor {name!r}: malformed entry: shape {shape_v!r} is not a list of "
                f"integers in [0, 2^63)"
            )
        if not (isinstance(offs, list) and len(offs) == 2 and all(_is_int(o) for o in offs)):
            raise self._fail(
                f"tensor {name!r}: malformed entry: data_offsets {offs!r} is not two integers"
            )
        shape = tuple(shape_v)
        itemsize = np.dtype(_DTYPES[dtype]).itemsize
        if math.prod(d for d in shape if d) * itemsize > MAX_DIM:  # numpy's size limit
            raise self._fail(
                f"tensor {name!r}: shape {list(shape)} exceeds 2^63 bytes (numpy's limit), "
                "even with a zero dim"
            )
        b, t = offs
        nbytes = math.prod(shape) * itemsize  # exact, no wrap
        if b < 0 or t - b != nbytes or base + t > size:
            raise self._fail(
                f"tensor {name!r}: data_offsets [{b}, {t}] do not hold {dtype}{list(shape)} "
                f"inside the file of {size} bytes (truncated or corrupted?)"
            )
        return SafeTensor(name, dtype, shape, base + b, base + t)

    def check_unchanged(self) -> None:
        """Raise :class:`rlx.WeightFormatError` when the file was truncated or
        rewritten since it was opened (see :mod:`rlx.io.mapped`)."""
        self._stamp.check()

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
        row = t.shape[1] * np.dtype(_DTYPES[t.dtype]).itemsize  # exact even for 0 rows
        return self._mm[t.begin : t.end].reshape(t.shape[0], row)


def open_safetensors(path: PathLike) -> SafetensorsFile:
    """Open ``path`` (see :class:`SafetensorsFile`)."""
    return SafetensorsFile(path)
