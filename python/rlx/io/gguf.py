"""Reading GGUF files: metadata, tensor infos and zero-copy tensor views.

The file is memory-mapped; the header is parsed here. The names and block
geometry of the types rlx runs come from the native module's type table
(``_rlx.ggml_types``, i.e. ``GgmlType`` in crates/rlx-ir/src/quant.rs;
checked against the ``gguf`` package's ``GGML_QUANT_SIZES`` in the tests); other type ids are
looked up in the ``gguf`` package, imported only then (the import costs
tens of milliseconds and ~5 MiB of resident memory at every load).
``gguf.GGUFReader`` is the independent oracle the tests compare against. On
top of the format this module gives rlx:

* typed metadata accessors that fail with :class:`rlx.WeightFormatError`
  naming the file and the key (missing key, wrong type);
* tensor infos in rlx's conventions: type names as in
  ``crates/rlx-ir/src/quant.rs`` (``Q4_K``, ``F32`` …) and dims in row-major
  order (GGUF lists dims fastest-first, so a GGUF ``[k, n]`` matmul weight is
  ``[n, k]`` here: ``n`` rows of ``k`` elements);
* views of each tensor's bytes that alias the memory map (never a copy);
* every malformed file (wrong magic, truncated, unknown tensor type, …)
  reported as :class:`rlx.WeightFormatError` naming the file and the problem.

Validated up front, before any tensor is viewed: 1 to :data:`MAX_DIMS` dims
per tensor, each ≥ 1, element and byte counts in exact (Python) integers
below 2^63, every tensor aligned to ``general.alignment`` and inside the
file, no two tensors overlapping, no duplicate metadata key or tensor name,
metadata arrays nested at most :data:`MAX_NESTING` deep and no count larger
than the file could hold. The file's size and mtime are recorded at open;
:meth:`GGUFFile.check_unchanged` raises when the file was truncated or
rewritten under the memory map (:mod:`rlx.io.mapped`).
"""

from __future__ import annotations

import math
import os
import stat
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from rlx import _rlx
from rlx.errors import WeightFormatError
from rlx.io.mapped import MapStamp

__all__ = ["GGUFFile", "TensorInfo", "open_gguf", "RLX_TYPE_NAMES", "MAX_DIMS", "MAX_NESTING"]

#: Most dims a GGUF tensor may have (``GGML_MAX_DIMS``).
MAX_DIMS = 4
#: Deepest nesting of metadata arrays accepted (arrays of arrays of …).
MAX_NESTING = 8
#: Element / byte counts must stay below this (ggml's ``int64_t`` sizes).
_I64_MAX = (1 << 63) - 1

_TYPES = _rlx.ggml_types()
#: GGML type id → rlx type name (``GgmlType::name`` in crates/rlx-ir/src/quant.rs).
RLX_TYPE_NAMES: dict[int, str] = {i: name for i, (name, _, _) in _TYPES.items()}
#: GGML type id → (elements per block, bytes per block) of the
#: :data:`RLX_TYPE_NAMES` types but Q8_1, whose size the ``gguf`` package and
#: ggml state differently (40 / 36 bytes; no model file stores it): that one is
#: still looked up in the package.
BLOCK_SIZES: dict[int, tuple[int, int]] = {
    i: (block, size) for i, (_, block, size) in _TYPES.items() if i != 9
}

_MAGIC = b"GGUF"
_INTS = ("UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "UINT64", "INT64")
_MISSING: Any = object()
PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF file.

    ``shape`` is row-major (slowest axis first); ``ggml_type`` is the rlx name
    of its storage type; ``supported`` is False for GGUF types rlx has no
    kernels for (the IQ family, integer tensors, …: they can still be read as
    bytes). ``offset`` is the absolute byte offset in the file.
    """

    name: str
    ggml_type: str
    type_id: int
    shape: tuple[int, ...]
    n_elements: int
    n_bytes: int
    offset: int
    supported: bool

    @property
    def row_bytes(self) -> int:
        """Bytes of one row (the last, fastest axis), packed blocks included."""
        rows = self.n_elements // self.shape[-1] if self.shape and self.shape[-1] else 1
        return self.n_bytes // max(rows, 1)


def _fail(path: Path, what: str) -> WeightFormatError:
    return WeightFormatError(f"[gguf] {path}: {what}")


class _Truncated(Exception):
    """The header parser ran past the end of the file."""


# GGUF metadata value types (gguf.GGUFValueType): id -> (name, struct code).
_SCALARS: dict[int, tuple[str, str]] = {
    0: ("UINT8", "B"),
    1: ("INT8", "b"),
    2: ("UINT16", "H"),
    3: ("INT16", "h"),
    4: ("UINT32", "I"),
    5: ("INT32", "i"),
    6: ("FLOAT32", "f"),
    7: ("BOOL", "?"),
    10: ("UINT64", "Q"),
    11: ("INT64", "q"),
    12: ("FLOAT64", "d"),
}
_STRING, _ARRAY = 8, 9


@dataclass
class _Value:
    """One metadata value. ``types`` is like gguf's (``["ARRAY", "STRING"]``);
    scalars carry ``value``; arrays carry where their items start and how many
    there are, and are decoded only when asked for (vocabularies are big)."""

    types: list[str]
    value: Any = None
    offset: int = 0
    count: int = 0
    end: int = 0


class _Cursor:
    """Reads little- or big-endian GGUF primitives from the memory map with
    bounds checks (a truncated file raises :class:`_Truncated`)."""

    def __init__(self, buf: np.ndarray, endian: str, pos: int) -> None:
        self.buf, self.end, self.e, self.pos = buf, len(buf), endian, pos
        self._u64 = struct.Struct(endian + "Q")
        self._u32 = struct.Struct(endian + "I")

    def need(self, n: int) -> None:
        if n < 0 or self.pos + n > self.end:
            raise _Truncated(f"needs {n} bytes at offset {self.pos}, the file has {self.end}")

    def unpack(self, code: str) -> Any:
        st = struct.Struct(self.e + code)
        self.need(st.size)
        v = st.unpack_from(self.buf, self.pos)[0]
        self.pos += st.size
        return v

    def u32(self) -> int:
        self.need(4)
        v = self._u32.unpack_from(self.buf, self.pos)[0]
        self.pos += 4
        return v

    def u64(self) -> int:
        self.need(8)
        v = self._u64.unpack_from(self.buf, self.pos)[0]
        self.pos += 8
        return v

    def string(self) -> str:
        n = self.u64()
        self.need(n)
        raw = self.buf[self.pos : self.pos + n].tobytes()
        self.pos += n
        return raw.decode("utf-8")

    def skip_strings(self, count: int) -> None:
        offs = string_offsets(self.buf, self.pos, count, self.e)
        self.pos = int(offs[-1])
        self.need(0)


def string_offsets(buf: np.ndarray, start: int, count: int, endian: str) -> np.ndarray:
    """uint64 ``[count + 1]``: where each of the ``count`` items of the ARRAY of
    STRING starting at ``start`` of ``buf`` begins, then where the array ends
    (native: a Python loop over a 262k vocabulary took tens of ms). Raises
    :class:`_Truncated` when the items run past the end of ``buf``."""
    out = np.empty(count + 1, dtype=np.uint64)
    done = _rlx.gguf_string_offsets(buf, start, count, endian == ">", out)
    if done < count:
        at = int(out[done])
        raise _Truncated(f"string {done} of {count} at offset {at} runs past the end ({len(buf)})")
    return out


class GGUFFile:
    """An open GGUF file (memory-mapped, read-only).

    The header (metadata and tensor table) is parsed here with the type tables
    of the ``gguf`` package; ``gguf.GGUFReader`` itself materialises one numpy
    view per vocabulary entry and takes tens of seconds on a 262k-token vocab,
    so it serves as the tests' independent oracle instead.

    >>> f = GGUFFile(path)               # doctest: +SKIP
    >>> f.architecture, f.arch_int("block_count")
    ('llama', 30)
    >>> f.tensor_bytes("blk.0.attn_q.weight")   # a uint8 view over the mmap
    """

    def __init__(self, path: PathLike) -> None:
        self.path = Path(path)
        try:
            st = self.path.stat()
        except FileNotFoundError:
            raise  # stays Python's own (and rlx's callers name the path)
        except OSError as e:
            raise _fail(self.path, f"cannot stat the file ({e})") from None
        if not stat.S_ISREG(st.st_mode):
            raise _fail(self.path, "not a regular file")
        size = st.st_size
        if size < 24:
            raise _fail(self.path, f"file is {size} bytes, too short for a GGUF header")
        try:
            self._mmap = np.memmap(self.path, dtype=np.uint8, mode="r")
        except (OSError, ValueError) as e:
            raise _fail(self.path, f"cannot map the file ({e})") from None
        magic = self._mmap[:4].tobytes()
        if magic != _MAGIC:
            raise _fail(self.path, f"wrong magic {magic!r}, expected {_MAGIC!r}: not a GGUF file")
        self.size = size = len(self._mmap)
        if size < 24:
            raise _fail(self.path, f"file is {size} bytes, too short for a GGUF header")
        self._stamp = MapStamp(self.path, "gguf", st, self._mmap)
        self._fields: dict[str, _Value] = {}
        self._tensors: dict[str, TensorInfo] = {}
        self._what = "the header"
        try:
            self._parse()
        except _Truncated as e:
            what = f"truncated or corrupt while reading {self._what}: {e}"
            raise _fail(self.path, what) from None
        except UnicodeDecodeError as e:
            raise _fail(self.path, f"{self._what} is not valid UTF-8 ({e})") from None

    def check_unchanged(self) -> None:
        """Raise :class:`rlx.WeightFormatError` when the file was truncated or
        rewritten since it was opened (see :mod:`rlx.io.mapped`); the
        decoder calls it before every run."""
        self._stamp.check()

    # ------------------------------------------------------------------ parse
    def _parse(self) -> None:
        buf = self._mmap
        version = struct.unpack_from("<I", buf, 4)[0]
        endian = "<"
        if version & 0xFFFF == 0 and version != 0:  # a big-endian file read as little
            endian, version = ">", struct.unpack_from(">I", buf, 4)[0]
        if version not in (2, 3):
            raise _fail(self.path, f"unsupported GGUF version {version} (rlx reads 2 and 3)")
        self.version = version
        self.byte_order = endian
        cur = _Cursor(buf, endian, 8)
        n_tensors, n_kv = cur.u64(), cur.u64()
        if n_tensors > self.size // 8 or n_kv > self.size // 8:
            raise _fail(self.path, f"corrupt header: {n_tensors} tensors, {n_kv} metadata keys")
        for i in range(n_kv):
            self._what = f"metadata entry {i}"
            key = cur.string()
            self._what = f"metadata key {key!r}"
            if key in self._fields:
                raise _fail(self.path, f"metadata key {key!r} appears twice")
            self._fields[key] = self._read_value(cur, cur.u32(), key)
        alignment = self.get_int("general.alignment", 32)
        if alignment <= 0 or alignment & (alignment - 1):
            raise _fail(self.path, f"general.alignment {alignment} is not a power of two")
        infos = []
        for i in range(n_tensors):
            self._what = f"tensor info {i}"
            name = cur.string()
            self._what = f"tensor info {name!r}"
            n_dims = cur.u32()
            if not 1 <= n_dims <= MAX_DIMS:
                raise _fail(
                    self.path,
                    f"tensor {name!r} has {n_dims} dims; GGUF tensors have 1 to {MAX_DIMS}",
                )
            dims = [cur.u64() for _ in range(n_dims)]
            for j, d in enumerate(dims):
                if d == 0 or d > _I64_MAX:
                    raise _fail(self.path, f"tensor {name!r}: dim {j} = {d} is out of range")
            infos.append((name, dims, cur.u32(), cur.u64()))
        data_start = -(-cur.pos // alignment) * alignment
        spans: list[tuple[int, int, str]] = []
        for name, dims, type_id, rel in infos:
            type_name, block, type_size = self._type_geometry(name, type_id)
            n_el = math.prod(dims)  # exact: no int64 wrap-around
            if n_el > _I64_MAX:
                raise _fail(
                    self.path,
                    f"tensor {name!r}: dims {dims} hold {n_el} elements, more than 2^63",
                )
            if rel % alignment:
                raise _fail(
                    self.path,
                    f"tensor {name!r}: data offset {rel} is not a multiple of the "
                    f"alignment {alignment}",
                )
            if dims[0] % block:
                raise _fail(
                    self.path,
                    f"tensor {name!r} ({type_name}) has a row of {dims[0]} elements, "
                    f"not a multiple of the block size {block}",
                )
            n_bytes = n_el // block * type_size
            offset = data_start + rel
            if offset + n_bytes > self.size:
                raise _fail(
                    self.path,
                    f"truncated: tensor {name!r} needs bytes [{offset}, {offset + n_bytes}) "
                    f"but the file has {self.size}",
                )
            if name in self._tensors:
                raise _fail(self.path, f"tensor {name!r} appears twice")
            spans.append((offset, offset + n_bytes, name))
            self._tensors[name] = TensorInfo(
                name=name,
                ggml_type=type_name,
                type_id=type_id,
                shape=tuple(int(d) for d in reversed(dims)),
                n_elements=n_el,
                n_bytes=n_bytes,
                offset=offset,
                supported=type_id in RLX_TYPE_NAMES,
            )
        spans.sort()
        for (_, end, a), (begin, _, b) in zip(spans, spans[1:]):
            if begin < end:
                raise _fail(self.path, f"tensors {a!r} and {b!r} overlap in the file")
        self.data_offset = data_start

    def _type_geometry(self, name: str, type_id: int) -> tuple[str, int, int]:
        """Type name, elements and bytes per block of tensor ``name``'s type id
        (rlx's table; the ``gguf`` package for the types rlx does not run)."""
        known = BLOCK_SIZES.get(type_id)
        if known is not None:
            return RLX_TYPE_NAMES[type_id], known[0], known[1]
        import gguf

        try:
            qtype = gguf.GGMLQuantizationType(type_id)
            block, type_size = gguf.GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError):
            what = f"tensor {name!r} has unknown tensor type id {type_id}"
            raise _fail(self.path, what) from None
        return qtype.name, int(block), int(type_size)

    def _read_value(self, cur: _Cursor, vtype: int, key: str, depth: int = 0) -> _Value:
        if vtype in _SCALARS:
            name, code = _SCALARS[vtype]
            return _Value([name], cur.unpack(code))
        if vtype == _STRING:
            return _Value(["STRING"], cur.string())
        if vtype != _ARRAY:
            raise _fail(self.path, f"metadata key {key!r} has unknown value type id {vtype}")
        itype, count = cur.u32(), cur.u64()
        if count > self.size:
            raise _fail(self.path, f"metadata key {key!r}: array of {count} items (corrupt)")
        start = cur.pos
        if itype in _SCALARS:
            name, code = _SCALARS[itype]
            cur.need(struct.calcsize(code) * count)
            cur.pos += struct.calcsize(code) * count
            return _Value(["ARRAY", name], offset=start, count=count)
        if itype == _STRING:
            cur.need(8 * count)  # every item has its 8-byte length at least
            cur.skip_strings(count)
            return _Value(["ARRAY", "STRING"], offset=start, count=count, end=cur.pos)
        if itype == _ARRAY:  # nested arrays: rare and small, decoded eagerly
            if depth >= MAX_NESTING:
                raise _fail(
                    self.path, f"metadata key {key!r}: arrays nested deeper than {MAX_NESTING}"
                )
            items = [self._read_value(cur, _ARRAY, key, depth + 1) for _ in range(count)]
            return _Value(["ARRAY", "ARRAY"], value=items, offset=start, count=count)
        raise _fail(self.path, f"metadata key {key!r} has unknown array item type id {itype}")

    # -------------------------------------------------------------- metadata
    @property
    def mmap(self) -> np.memmap:
        """The whole file as a read-only uint8 memory map."""
        return self._mmap

    @property
    def architecture(self) -> str:
        """``general.architecture`` (``llama``, ``gemma3``, ``qwen2`` …)."""
        return self.get_str("general.architecture")

    def keys(self) -> list[str]:
        """Every metadata key, in file order."""
        return list(self._fields)

    def __contains__(self, key: str) -> bool:
        return key in self._fields

    def value_types(self, key: str) -> list[str]:
        """The GGUF value type of ``key``, e.g. ``["UINT32"]`` or ``["ARRAY", "STRING"]``."""
        return list(self._field(key, _MISSING).types)

    def _field(self, key: str, default: Any) -> Optional[_Value]:
        f = self._fields.get(key)
        if f is None and default is _MISSING:
            raise _fail(self.path, f"metadata key {key!r} is missing")
        return f

    def _wrong(self, key: str, f: _Value, what: str) -> WeightFormatError:
        return _fail(self.path, f"metadata key {key!r} is {'/'.join(f.types)}, expected {what}")

    def _scalar(self, key: str, default: Any, kinds: tuple[str, ...], what: str) -> Any:
        f = self._field(key, default)
        if f is None:
            return default
        if len(f.types) != 1 or f.types[0] not in kinds:
            raise self._wrong(key, f, what)
        return f.value

    def get_str(self, key: str, default: Any = _MISSING) -> str:
        """A STRING value."""
        return self._scalar(key, default, ("STRING",), "a string")

    def get_int(self, key: str, default: Any = _MISSING) -> int:
        """An integer value (any of the signed / unsigned widths)."""
        v = self._scalar(key, default, _INTS, "an integer")
        return v if v is default else int(v)

    def get_float(self, key: str, default: Any = _MISSING) -> float:
        """A float value (FLOAT32 / FLOAT64; integers are accepted and widened)."""
        v = self._scalar(key, default, ("FLOAT32", "FLOAT64", *_INTS), "a float")
        return v if v is default else float(v)

    def get_bool(self, key: str, default: Any = _MISSING) -> bool:
        """A BOOL value."""
        v = self._scalar(key, default, ("BOOL",), "a bool")
        return v if v is default else bool(v)

    def _array(self, key: str, default: Any, kinds: tuple[str, ...], what: str) -> Any:
        f = self._field(key, default)
        if f is None:
            return None
        if f.types[0] != "ARRAY" or (f.count and f.types[-1] not in kinds):
            raise self._wrong(key, f, what)
        return f

    def get_str_list(self, key: str, default: Any = _MISSING) -> list[str]:
        """An ARRAY of STRING as a Python list (decoded on each call)."""
        f = self._array(key, default, ("STRING",), "an array of strings")
        if f is None:
            return default
        # One bytes copy of the region (a few MB at most) is far faster than a
        # numpy slice per item.
        buf = self._mmap[f.offset : f.end].tobytes()
        u64 = struct.Struct(self.byte_order + "Q")
        out: list[str] = []
        pos = 0
        try:
            for _ in range(f.count):
                n = u64.unpack_from(buf, pos)[0]
                out.append(buf[pos + 8 : pos + 8 + n].decode("utf-8"))
                pos += 8 + n
        except UnicodeDecodeError as e:
            what = f"metadata key {key!r} item {len(out)}: bad UTF-8 ({e})"
            raise _fail(self.path, what) from None
        return out

    def str_list_len(self, key: str, default: Any = _MISSING) -> int:
        """The number of items of an ARRAY of STRING (none decoded)."""
        f = self._array(key, default, ("STRING",), "an array of strings")
        return default if f is None else int(f.count)

    def find_strs(self, key: str, texts: Iterable[str]) -> dict[str, int]:
        """The index of each of ``texts`` in the ARRAY of STRING ``key`` (the
        last one of a text listed twice; texts not found are left out),
        without decoding the other items: looking up a few special tokens in
        a 262k vocabulary costs neither the time nor the memory of
        :meth:`get_str_list`."""
        f = self._array(key, _MISSING, ("STRING",), "an array of strings")
        want = {t.encode("utf-8"): t for t in texts}
        offs = string_offsets(self._mmap, f.offset, f.count, self.byte_order).astype(np.int64)
        sizes = np.diff(offs) - 8
        # candidates: items of a wanted length and first byte (vectorised), then
        # compared whole in one bytes copy of the array (a few MB)
        hit = np.isin(sizes, [len(b) for b in want])
        firsts = np.zeros(f.count, dtype=np.int16)
        nonempty = sizes > 0
        firsts[nonempty] = self._mmap[offs[:-1][nonempty] + 8]
        firsts[~nonempty] = -1
        hit &= np.isin(firsts, [b[0] if b else -1 for b in want])
        region = self._mmap[f.offset : f.end].tobytes()
        out: dict[str, int] = {}
        for i in np.flatnonzero(hit).tolist():
            t = want.get(region[offs[i] + 8 - f.offset : offs[i + 1] - f.offset])
            if t is not None:
                out[t] = i
        return out

    def get_array(self, key: str, default: Any = _MISSING) -> np.ndarray:
        """A numeric ARRAY as a 1-D numpy array viewing the memory map (no copy)."""
        f = self._array(key, default, tuple(n for n, _ in _SCALARS.values()), "a numeric array")
        if f is None:
            return default
        if not f.count:
            return np.zeros(0, dtype=np.float32)
        code = next(c for n, c in _SCALARS.values() if n == f.types[-1])
        dtype = np.dtype(code).newbyteorder(self.byte_order)
        return self._mmap[f.offset : f.offset + dtype.itemsize * f.count].view(dtype)

    def get(self, key: str, default: Any = None) -> Any:
        """Any value as plain Python (arrays as lists; slow on big vocabularies)."""
        f = self._fields.get(key)
        if f is None:
            return default
        return self._plain(key, f)

    def _plain(self, key: str, f: _Value) -> Any:
        if f.types[0] != "ARRAY":
            return f.value
        if f.types[-1] == "STRING":
            return self.get_str_list(key)
        if f.types[-1] == "ARRAY":
            return [self._plain(key, v) for v in f.value]
        return self.get_array(key).tolist()

    def metadata(self) -> dict[str, Any]:
        """All metadata as plain Python values (long arrays included: slow on big vocabs)."""
        return {k: self._plain(k, f) for k, f in self._fields.items()}

    def arch_int(self, suffix: str, default: Any = _MISSING) -> int:
        """``get_int(f"{architecture}.{suffix}")``, e.g. ``arch_int("block_count")``."""
        return self.get_int(f"{self.architecture}.{suffix}", default)

    def arch_float(self, suffix: str, default: Any = _MISSING) -> float:
        """``get_float(f"{architecture}.{suffix}")``, e.g. ``arch_float("rope.freq_base")``."""
        return self.get_float(f"{self.architecture}.{suffix}", default)

    # --------------------------------------------------------------- tensors
    @property
    def tensors(self) -> list[TensorInfo]:
        """Every tensor, in file order."""
        return list(self._tensors.values())

    def tensor(self, name: str) -> TensorInfo:
        """The info of tensor ``name``."""
        try:
            return self._tensors[name]
        except KeyError:
            raise _fail(self.path, f"no tensor named {name!r}") from None

    def __len__(self) -> int:
        return len(self._tensors)

    def type_census(self) -> dict[str, int]:
        """How many tensors of each type, e.g. ``{"Q4_1": 210, "F32": 61, "Q8_0": 1}``."""
        out: dict[str, int] = {}
        for t in self._tensors.values():
            out[t.ggml_type] = out.get(t.ggml_type, 0) + 1
        return out

    def tensor_bytes(self, name: str) -> np.ndarray:
        """The raw bytes of tensor ``name`` as a 1-D uint8 view of the memory map."""
        t = self.tensor(name)
        return self.mmap[t.offset : t.offset + t.n_bytes]

    def tensor_rows(self, name: str) -> np.ndarray:
        """Tensor ``name`` as a uint8 view shaped ``[*shape[:-1], row_bytes]`` (packed
        blocks kept packed: the layout quantized kernels read)."""
        t = self.tensor(name)
        return self.tensor_bytes(name).reshape(*t.shape[:-1], t.row_bytes)

    def tensor_array(self, name: str) -> np.ndarray:
        """Tensor ``name`` as a typed row-major view when its type is a plain float
        (F32, F16; BF16 as uint16); packed types raise (use :meth:`tensor_rows`)."""
        t = self.tensor(name)
        dtypes = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}
        dt = dtypes.get(t.ggml_type)
        if dt is None:
            raise _fail(self.path, f"tensor {name!r} is {t.ggml_type}, not a plain float type")
        dtype = np.dtype(dt)
        dtype = dtype.newbyteorder(self.byte_order)
        return self.tensor_bytes(name).view(dtype).reshape(t.shape)

    def __repr__(self) -> str:
        arch = self.get_str("general.architecture", "?")
        return f"GGUFFile({str(self.path)!r}, arch={arch}, tensors={len(self)})"


def open_gguf(path: PathLike, expect_arch: Optional[str] = None) -> GGUFFile:
    """Open a GGUF file; with ``expect_arch``, check ``general.architecture``."""
    f = GGUFFile(path)
    if expect_arch is not None and f.architecture != expect_arch:
        raise _fail(f.path, f"architecture is {f.architecture!r}, expected {expect_arch!r}")
    return f
