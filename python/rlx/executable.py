"""Compiled graphs: ``rlx.compile(graph, device=...)`` → :class:`Executable`.

The native side owns the schedule, the activation arena and the weights
buffer; this wrapper checks inputs, moves numpy data in and out through
zero-copy views of those buffers, and routes thunks without a native kernel
to the numpy reference (:mod:`rlx.reference`).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from rlx import _rlx, reference
from rlx.errors import DTypeError, RlxError, ShapeError

_WEIGHT_TAG = reference.WEIGHT_TAG

DEVICES = ("host", "reference")


def _np_dtype(name: str) -> np.dtype:
    if name == "bf16":
        return np.dtype(np.uint16)  # bf16 bits; numpy has no bfloat16
    table = {
        "f32": np.float32,
        "f16": np.float16,
        "f64": np.float64,
        "i8": np.int8,
        "i16": np.int16,
        "i32": np.int32,
        "i64": np.int64,
        "u8": np.uint8,
        "u32": np.uint32,
        "bool": np.bool_,
        "c64": np.complex64,
    }
    return np.dtype(table[name])


class _Slot:
    """Where one input / param / state / output lives."""

    def __init__(self, kind: str, name: str, node: int, offset: int, dims: list[int], dtype: str):
        self.kind = kind
        self.name = name
        self.node = node
        self.offset = offset
        self.shape = tuple(dims)
        self.dtype = dtype
        self.np_dtype = _np_dtype(dtype)


class Executable:
    """A graph compiled for one device. Create with :func:`rlx.compile`."""

    def __init__(self, graph: Any, device: str = "host", dims: dict[str, int] | None = None):
        if device not in DEVICES:
            raise ValueError(f"[compile] unknown device '{device}'; expected one of {DEVICES}")
        native_graph = getattr(graph, "_g", graph)
        self.device = device
        self._native = _rlx.Executable(native_graph, device, dims)
        self._arena = np.frombuffer(self._native.arena_view(), dtype=np.uint8)
        self._weights = np.frombuffer(self._native.weights_view(), dtype=np.uint8)
        self._mem = reference.Memory(self._arena, self._weights)
        self.inputs: dict[str, _Slot] = {}
        self.params: dict[str, _Slot] = {}
        self.states: dict[str, _Slot] = {}
        self.outputs: list[_Slot] = []
        for row in self._native.bindings():
            slot = _Slot(*row)
            if slot.kind == "input":
                self.inputs[slot.name] = slot
            elif slot.kind == "param":
                self.params[slot.name] = slot
            elif slot.kind == "state":
                self.states[slot.name] = slot
            else:
                self.outputs.append(slot)
        self._set: set[str] = set()

    # ------------------------------------------------------------- buffers
    def _view(self, slot: _Slot) -> np.ndarray:
        return self._mem.view(slot.offset, slot.shape, slot.np_dtype)

    def _check(self, slot: _Slot, value: Any, what: str) -> np.ndarray:
        arr = np.asarray(value)
        if arr.dtype != slot.np_dtype:
            same_kind = np.can_cast(arr.dtype, slot.np_dtype, casting="same_kind")
            if not same_kind:
                raise DTypeError(
                    f"[{what}] '{slot.name}' expects dtype {slot.dtype}, got {arr.dtype}"
                )
        if tuple(arr.shape) != slot.shape:
            raise ShapeError(
                f"[{what}] '{slot.name}' expects shape {list(slot.shape)}, got {list(arr.shape)}"
            )
        return arr

    def set_param(self, name: str, value: Any) -> None:
        """Copy a weight into the weights buffer (checked against its declared shape)."""
        slot = self.params.get(name)
        if slot is None:
            raise KeyError(f"[set_param] no param named '{name}'; params: {sorted(self.params)}")
        arr = self._check(slot, value, "set_param")
        self._view(slot)[...] = arr
        self._set.add(name)

    def set_state(self, name: str, value: Any) -> None:
        """Overwrite a state tensor (e.g. reset a KV cache)."""
        slot = self.states.get(name)
        if slot is None:
            raise KeyError(f"[set_state] no state named '{name}'; states: {sorted(self.states)}")
        self._view(slot)[...] = self._check(slot, value, "set_state")

    def state(self, name: str) -> np.ndarray:
        """A copy of a state tensor."""
        return self._view(self.states[name]).copy()

    # ---------------------------------------------------------------- run
    def _fallback(self, index: int, thunk_json: str) -> None:
        reference.run_thunk(json.loads(thunk_json), self._mem)

    def run(self, **inputs: Any) -> dict[str, np.ndarray]:
        """Run once; returns a dict of output name → numpy array (copies)."""
        missing = sorted(set(self.params) - self._set)
        if missing:
            raise RlxError(f"[run] params not set: {', '.join(missing)}")
        unknown = sorted(set(inputs) - set(self.inputs))
        if unknown:
            raise ShapeError(
                f"[run] unknown input(s) {unknown}; the graph's inputs are {sorted(self.inputs)}"
            )
        absent = sorted(set(self.inputs) - set(inputs))
        if absent:
            raise ShapeError(f"[run] missing input(s) {absent}")
        for name, value in inputs.items():
            slot = self.inputs[name]
            self._view(slot)[...] = self._check(slot, value, "run")
        self._native.run(self._fallback)
        out: dict[str, np.ndarray] = {}
        for slot in self.outputs:
            out[slot.name] = self._view(slot).copy()
        return out

    # -------------------------------------------------------------- info
    @property
    def schedule(self) -> str:
        """The thunk list, one per line with its offsets."""
        return self._native.schedule()

    @property
    def arena_bytes(self) -> int:
        """Bytes of the activation arena (state region included)."""
        return int(self.stats["arena_bytes"])

    @property
    def stats(self) -> dict[str, Any]:
        """Compile figures: arena vs naive bytes, thunk counts, native vs fallback;
        ``by_thunk`` counts thunks per name, ``fallback_by_thunk`` those of them
        that run through the numpy reference."""
        return dict(self._native.stats())

    def verify(self) -> None:
        """Run the schedule verifier."""
        self._native.verify()

    def __repr__(self) -> str:
        s = self.stats
        return (
            f"<rlx.Executable device={self.device} thunks={s['thunks']} "
            f"arena={s['arena_bytes']}B naive={s['naive_bytes']}B>"
        )


def compile(graph: Any, device: str = "host", dims: dict[str, int] | None = None) -> Executable:
    """Compile ``graph`` for ``device`` (``"host"`` or ``"reference"``).

    ``dims`` binds symbolic dimensions (``{"seq": 128}``).
    """
    return Executable(graph, device=device, dims=dims)
