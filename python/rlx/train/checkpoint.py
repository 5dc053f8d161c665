"""Training checkpoints as safetensors: every ``State`` of a training
executable (trainable weights or adapters, the optimizer's moments and its
step count) written with its exact bytes, and read back into a freshly
compiled executable of the same graph, so training resumes bit for bit.

The file is plain safetensors (8-byte little-endian header length, the JSON
header, the tensor bytes); ``__metadata__`` carries string → string pairs
(the trainer's step counter, its config), read back by
:func:`load_checkpoint`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Union

import numpy as np

from rlx.errors import RlxError
from rlx.io.safetensors import open_safetensors

if TYPE_CHECKING:
    from rlx.executable import Executable

PathLike = Union[str, "os.PathLike[str]"]

_CODES = {
    np.dtype(np.float64): "F64",
    np.dtype(np.float32): "F32",
    np.dtype(np.float16): "F16",
    np.dtype(np.int64): "I64",
    np.dtype(np.int32): "I32",
    np.dtype(np.int16): "I16",
    np.dtype(np.int8): "I8",
    np.dtype(np.uint8): "U8",
    np.dtype(np.bool_): "BOOL",
}


class CheckpointError(RlxError):
    """A checkpoint cannot be written or does not fit the executable."""


def write_safetensors(
    path: PathLike, tensors: Mapping[str, np.ndarray], metadata: Optional[Mapping[str, str]] = None
) -> None:
    """Write ``tensors`` (name → array, stored in name order) to ``path``
    atomically (a temporary file renamed over it)."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name])
        code = _CODES.get(arr.dtype)
        if code is None:
            raise CheckpointError(f"[checkpoint] tensor {name!r}: dtype {arr.dtype} not storable")
        header[name] = {
            "dtype": code,
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + arr.nbytes],
        }
        blobs.append(arr)
        offset += arr.nbytes
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # keep the data 8-byte aligned
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(len(head).to_bytes(8, "little"))
        f.write(head)
        for arr in blobs:
            f.write(arr.tobytes())
    os.replace(tmp, path)


def save_checkpoint(
    exe: Executable,
    path: PathLike,
    names: Optional[Iterable[str]] = None,
    metadata: Optional[Mapping[str, str]] = None,
) -> list[str]:
    """Save the states ``names`` (default: every state of ``exe``) of a
    training executable to ``path``; returns the names written."""
    chosen = sorted(exe.states) if names is None else list(names)
    missing = [n for n in chosen if n not in exe.states]
    if missing:
        raise CheckpointError(f"[checkpoint] no state named {missing[0]!r} in the executable")
    write_safetensors(path, {n: exe.state(n) for n in chosen}, metadata)
    return chosen


def load_checkpoint(exe: Executable, path: PathLike, strict: bool = True) -> dict[str, str]:
    """Load the states saved by :func:`save_checkpoint` into ``exe`` (same
    names, shapes and dtypes); ``strict`` also requires every state of
    ``exe`` to be in the file. Returns the file's metadata."""
    st = open_safetensors(path)
    keys = set(st.keys())
    if strict:
        absent = sorted(set(exe.states) - keys)
        if absent:
            raise CheckpointError(f"[checkpoint] {path}: state {absent[0]!r} is not in the file")
    for name in sorted(keys):
        if name not in exe.states:
            raise CheckpointError(f"[checkpoint] {path}: {name!r} is not a state of the executable")
        slot = exe.states[name]
        arr = np.asarray(st.tensor(name))
        if tuple(arr.shape) != tuple(slot.shape) or arr.dtype != slot.np_dtype:
            raise CheckpointError(
                f"[checkpoint] {path}: {name!r} is {arr.dtype}{list(arr.shape)}, the "
                f"executable's state is {slot.np_dtype}{list(slot.shape)}"
            )
        exe.set_state(name, arr)
    return dict(st.metadata or {})
