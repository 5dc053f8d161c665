"""Compiled graphs: ``rlx.compile(graph, device=...)`` → :class:`Executable`.

The native side owns the schedule, the activation arena, the weights
segments (segment 0 = compiler constants, one per param) and the state
buffer; this wrapper checks inputs, moves numpy data in and out through
zero-copy views of those buffers, and routes thunks without a native kernel
to the numpy reference (:mod:`rlx.reference`).

Weights reach the executor either copied (:meth:`Executable.set_param`) or
zero-copy (:meth:`Executable.bind_param`: the param's segment points at the
caller's array, e.g. an ``np.memmap`` of a model file). Executables declaring
the same states can share one state buffer (:meth:`Executable.share_state`),
e.g. a prefill and a decode graph over one KV cache.

Threads: an executable may be used from several threads; its runs (and
every call that reads or writes its buffers) are serialised by a re-entrant
lock, shared by all executables sharing one state buffer, so two runs over
one KV cache never overlap (see :mod:`rlx.concurrency`). The GIL is released
while a schedule runs, so other Python threads (and other executables) keep
going meanwhile.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Optional

import numpy as np

from rlx import _rlx, reference
from rlx import trace as _trace
from rlx._types import check_dim
from rlx.concurrency import GroupLock
from rlx.errors import (
    DeviceError,
    DimTypeError,
    DTypeError,
    RlxError,
    ShapeError,
    UnknownNameError,
    WeightFormatError,
)

DEVICES = ("host", "reference", "metal-sim")


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


def _check_dims(dims: Optional[dict[str, Any]]) -> Optional[dict[str, int]]:
    """Symbol bindings for compile: str → non-negative int, else an
    :class:`RlxError` subclass naming the symbol."""
    if dims is None:
        return None
    if not isinstance(dims, dict):
        raise DimTypeError(f"[compile] dims must be a dict of symbol → int, got {dims!r}")
    out = {}
    for name, value in dims.items():
        if not isinstance(name, str):
            raise DimTypeError(f"[compile] dims: symbol {name!r} is not a str")
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise DimTypeError(f"[compile] dims: '{name}' = {value!r} is not an int")
        out[name] = check_dim(int(value), f"dims: '{name}' =")
    return out


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

    def __init__(
        self,
        graph: Any,
        device: str = "host",
        dims: dict[str, int] | None = None,
        *,
        rng_seed: int = 0,
        rng_offset: int = 0,
    ):
        if device not in DEVICES:
            raise DeviceError(f"[compile] unknown device '{device}'; expected one of {DEVICES}")
        native_graph = getattr(graph, "_g", graph)
        dims = _check_dims(dims)
        self.device = device
        #: serialises runs and buffer access; shared with the executables
        #: sharing this one's state buffer (see the module doc)
        self._lock = GroupLock()
        #: the graph's name (trace slices carry it)
        self.name = str(getattr(graph, "name", "graph"))
        t0 = time.perf_counter()
        native = _rlx.Executable(native_graph, device, dims, rng_seed, rng_offset)
        if _trace.TRACER is not None:
            _trace.TRACER.compiled(native, self.name, t0, time.perf_counter())
        self._attach(native)

    def _attach(self, native: Any) -> None:
        """Views of ``native``'s buffers and its binding table."""
        self._native = native
        self._arena = np.frombuffer(self._native.arena_view(), dtype=np.uint8)
        segments = [self._segment_array(i) for i in range(self._native.segment_count())]
        state = np.frombuffer(self._native.state_view(), dtype=np.uint8)
        self._mem = reference.Memory(self._arena, segments=segments, state=state)
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
        #: cached arena views of the input / output slots (:meth:`_io_view`)
        self._io: dict[tuple[str, str], np.ndarray] = {}
        #: params bound zero-copy → the array they point into (kept alive here too)
        self._bound: dict[str, np.ndarray] = {}

    # ------------------------------------------------------------- buffers
    @contextmanager
    def _hold(self) -> Iterator[None]:
        """Hold this executable's lock (the one of its state-sharing group)."""
        while True:
            lock = self._lock
            lock.acquire()
            if lock is self._lock:
                break
            lock.release()  # share_state swapped it while we waited
        try:
            yield
        finally:
            lock.release()

    @contextmanager
    def _hold_pair(self, other: Executable) -> Iterator[None]:
        """Hold both executables' locks, taken in a fixed order (no deadlock
        with a concurrent call the other way round)."""
        while True:
            mine, theirs = self._lock, other._lock
            locks = sorted({id(mine): mine, id(theirs): theirs}.items())
            for _, lock in locks:
                lock.acquire()
            if mine is self._lock and theirs is other._lock:
                break
            for _, lock in reversed(locks):
                lock.release()
        try:
            yield
        finally:
            for _, lock in reversed(locks):
                lock.release()

    def _view(self, slot: _Slot) -> np.ndarray:
        return self._mem.view(slot.offset, slot.shape, slot.np_dtype)

    def _io_view(self, slot: _Slot) -> np.ndarray:
        """:meth:`_view` of an input or output slot, made once: they live in
        the arena, which stays where it is for the executable's life."""
        key = (slot.kind, slot.name)
        v = self._io.get(key)
        if v is None:
            v = self._io[key] = self._view(slot)
        return v

    def _segment_array(self, i: int) -> np.ndarray | None:
        mv = self._native.segment_view(i)
        return None if mv is None else np.frombuffer(mv, dtype=np.uint8)

    def _param_slot(self, name: str, what: str) -> _Slot:
        slot = self.params.get(name)
        if slot is None:
            raise UnknownNameError(
                f"[{what}] no param named '{name}'; params: {sorted(self.params)}"
            )
        return slot

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
        """Copy a weight into the param's own weights segment (checked against
        its declared shape; same-kind dtypes are converted). Replaces an
        earlier :meth:`bind_param` of the same param."""
        with self._hold():
            slot = self._param_slot(name, "set_param")
            arr = self._check(slot, value, "set_param")
            seg = reference.decode_offset(slot.offset)[1]
            if name in self._bound or self._mem.segments[seg] is None:
                self._mem.segments[seg] = np.frombuffer(self._native.own_segment(seg), np.uint8)
                self._io.clear()
                self._bound.pop(name, None)
            self._view(slot)[...] = arr
            self._set.add(name)

    def bind_param(self, name: str, array: Any) -> None:
        """Point the param at ``array``'s memory without copying.

        ``array`` is any C-contiguous buffer (numpy arrays including
        read-only ``np.memmap`` views of a file, or an object with the buffer
        protocol) of exactly the param's dtype and shape (``uint8`` for packed
        quantised weights declared ``u8``), aligned to its element size. The
        executable keeps a reference, so the memory stays alive. Contract:
        weights are read-only to rlx; the caller must not mutate the array
        while a run is in progress (mutations between runs are seen by the
        next run). A later :meth:`set_param` switches the param back to an
        owned copy.
        """
        with self._hold():
            slot = self._param_slot(name, "bind_param")
            arr = array if isinstance(array, np.ndarray) else np.asarray(array)
            if arr.dtype != slot.np_dtype:
                raise DTypeError(
                    f"[bind_param] '{name}' expects dtype {slot.dtype} ({slot.np_dtype}) exactly, "
                    f"got {arr.dtype}; bind_param never converts (set_param does)"
                )
            if tuple(arr.shape) != slot.shape:
                raise ShapeError(
                    f"[bind_param] '{name}' expects shape {list(slot.shape)}, got {list(arr.shape)}"
                )
            if not arr.flags.c_contiguous:
                raise WeightFormatError(
                    f"[bind_param] '{name}' must be C-contiguous to bind without a copy"
                )
            address = int(arr.__array_interface__["data"][0])
            align = slot.np_dtype.alignment
            if arr.nbytes and address % align:
                raise WeightFormatError(
                    f"[bind_param] '{name}': data at {address:#x} is not aligned to its "
                    f"{align}-byte elements ({slot.dtype}); copy it or use set_param"
                )
            seg = reference.decode_offset(slot.offset)[1]
            self._native.bind_segment(seg, arr, address, arr.nbytes, align)
            self._bound[name] = arr
            self._mem.segments[seg] = arr.reshape(-1).view(np.uint8)
            self._io.clear()
            self._set.add(name)

    def set_state(self, name: str, value: Any) -> None:
        """Overwrite a state tensor (e.g. reset a KV cache)."""
        with self._hold():
            slot = self.states.get(name)
            if slot is None:
                raise UnknownNameError(
                    f"[set_state] no state named '{name}'; states: {sorted(self.states)}"
                )
            self._view(slot)[...] = self._check(slot, value, "set_state")

    def state(self, name: str) -> np.ndarray:
        """A copy of a state tensor."""
        with self._hold():
            slot = self.states.get(name)
            if slot is None:
                raise UnknownNameError(
                    f"[state] no state named '{name}'; states: {sorted(self.states)}"
                )
            return self._view(slot).copy()

    def reset_state(self) -> None:
        """Zero every state tensor (the whole state buffer, shared or not)."""
        with self._hold():
            self._native.reset_state()

    def share_state(self, other: Executable) -> None:
        """Use ``other``'s state buffer from now on (e.g. a decode graph
        sharing a prefill graph's KV cache): writes by either are seen by
        both. Both must declare identical states (names, dtypes, shapes, in
        the same order, hence the same layout), else :class:`RlxError`. This
        executable's previous state contents are dropped."""
        if not isinstance(other, Executable):
            raise TypeError(f"[share_state] expects an rlx.Executable, got {type(other).__name__}")
        if other is self:
            return
        with self._hold_pair(other):
            self._native.share_state(other._native)
            self._mem.state = np.frombuffer(self._native.state_view(), dtype=np.uint8)
            self._io.clear()  # an output may be a state
            self._lock = other._lock  # one lock per shared state buffer

    def instance(self, share_state_with: Optional[Executable] = None) -> Executable:
        """Another executable running this one's compiled plan, without
        compiling again: same schedule and weights (params bound zero-copy
        point at the same memory, copied ones are copied), its own zeroed
        arena and state buffer (e.g. a KV cache per concurrent sequence) and
        its own lock, so it runs independently of this one. The active-extent
        plan set so far carries over; state sharing does not: the instance
        has its own state, or ``share_state_with``'s from the start (as
        :meth:`share_state`, without allocating one first)."""
        other = share_state_with
        if other is not None and not isinstance(other, Executable):
            raise TypeError(f"[instance] expects an rlx.Executable, got {type(other).__name__}")
        with self._hold() if other is None else self._hold_pair(other):
            native = self._native.instance(None if other is None else other._native)
            out = object.__new__(Executable)
            out.device = self.device
            out._lock = GroupLock() if other is None else other._lock
            out.name = self.name
            out._attach(native)
            out._set = set(self._set)
            out._bound = dict(self._bound)
            return out

    def shares_plan_with(self, other: Executable) -> bool:
        """True when both run one compiled plan (see :meth:`instance`)."""
        if other is self:
            return True
        with self._hold_pair(other):
            return bool(self._native.shares_plan_with(other._native))

    def shares_state_with(self, other: Executable) -> bool:
        """True when both executables use one state buffer."""
        if other is self:
            return True
        with self._hold_pair(other):
            return bool(self._native.shares_state_with(other._native))

    # ---------------------------------------------------------------- run
    def _fallback(self, index: int, thunk_json: str) -> None:
        reference.run_thunk(json.loads(thunk_json), self._mem)

    def run(self, **inputs: Any) -> dict[str, np.ndarray]:
        """Run once; returns a dict of output name → numpy array (copies)."""
        return self._run(None, inputs)

    def set_active_extent(self, rows: int, token_inputs: list[str]) -> int:
        """Allow :meth:`run_active` on this graph, compiled for ``rows`` token
        rows: ``token_inputs`` are the inputs whose leading axis is the token
        axis. Returns how many thunks scale with the active row count; raises
        :class:`RlxError` naming the first thunk that reads token rows but
        cannot run on a prefix of them."""
        with self._hold():
            return int(self._native.set_active_extent(int(rows), list(token_inputs)))

    def run_active(self, rows: int, **inputs: Any) -> dict[str, np.ndarray]:
        """Run on the first ``rows`` token rows only (after
        :meth:`set_active_extent`): inputs keep their compiled shapes, rows past
        ``rows`` are ignored, and token-major outputs hold unspecified values
        past ``rows``."""
        return self._run(int(rows), inputs)

    def _run(self, active: Optional[int], inputs: dict[str, Any]) -> dict[str, np.ndarray]:
        with self._hold():
            self._check_params()
            if inputs.keys() != self.inputs.keys():
                unknown = sorted(set(inputs) - set(self.inputs))
                if unknown:
                    raise ShapeError(
                        f"[run] unknown input(s) {unknown}; "
                        f"the graph's inputs are {sorted(self.inputs)}"
                    )
                raise ShapeError(f"[run] missing input(s) {sorted(set(self.inputs) - set(inputs))}")
            for name, value in inputs.items():
                slot = self.inputs[name]
                self._io_view(slot)[...] = self._check(slot, value, "run")
            self._run_native(active)
            return {slot.name: self._io_view(slot).copy() for slot in self.outputs}

    def _check_params(self) -> None:
        if len(self._set) != len(self.params):
            missing = sorted(set(self.params) - self._set)
            if missing:
                raise RlxError(f"[run] params not set: {', '.join(missing)}")

    def _run_native(self, active: Optional[int]) -> None:
        if _trace.TRACER is None:
            self._native.run(self._fallback, active)
        else:
            _trace.TRACER.run(self, lambda: self._native.run(self._fallback, active), active)

    def io_views(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Zero-copy views of the inputs and outputs in the arena, for
        :meth:`run_bound`: ``(inputs, outputs)`` by name. The arena reuses
        input bytes for intermediates, so every input must be written again
        before each :meth:`run_bound`; outputs hold the last run's values until
        the next run (copy what must outlive it)."""
        with self._hold():
            ins = {name: self._io_view(slot) for name, slot in self.inputs.items()}
            return ins, {slot.name: self._io_view(slot) for slot in self.outputs}

    def run_step(self, step: Any, token: int, pos: int) -> None:
        """Run a native decode step (``_rlx.DecodeStep``, laid out on this
        executable's arena): it writes token ``token``'s inputs at position
        ``pos`` and runs, under this executable's lock."""
        lock = self._lock  # ``_hold`` inlined: this is the per-token path
        lock.acquire()
        if lock is not self._lock:  # share_state swapped it while we waited
            lock.release()
            with self._hold():
                self._step_native(step, token, pos)
            return
        try:
            self._step_native(step, token, pos)
        finally:
            lock.release()

    def _step_native(self, step: Any, token: int, pos: int) -> None:
        self._check_params()
        if _trace.TRACER is None:
            step.run(self._native, self._fallback, token, pos)
        else:
            run = lambda: step.run(self._native, self._fallback, token, pos)  # noqa: E731
            _trace.TRACER.run(self, run, None)

    def arena_offset(self, slot: _Slot) -> Optional[int]:
        """Byte offset of ``slot`` in the arena, None when it lives elsewhere."""
        kind, _, raw = reference.decode_offset(slot.offset)
        return raw if kind == "arena" else None

    def run_bound(self, active: Optional[int] = None) -> None:
        """Run on the inputs already written through :meth:`io_views` (no
        input checks or copies, no output copies): the per-token path of a
        decode loop. ``active`` as in :meth:`run_active`."""
        lock = self._lock  # ``_hold`` inlined: this is the per-token path
        lock.acquire()
        if lock is not self._lock:  # share_state swapped it while we waited
            lock.release()
            with self._hold():
                self._check_params()
                self._run_native(None if active is None else int(active))
            return
        try:
            self._check_params()
            self._run_native(None if active is None else int(active))
        finally:
            lock.release()

    # -------------------------------------------------------------- info
    @property
    def schedule(self) -> str:
        """The thunk list, one per line with its offsets."""
        with self._hold():
            return self._native.schedule()

    @property
    def metal_plan(self) -> str:
        """The Metal plan of the schedule, one command per line
        (``dispatch #3 rms_norm_f32 grid=... tg=... @0 W1@0``, ``barrier``,
        ``host #4``, ``check #5 @64``), whatever the device."""
        with self._hold():
            return self._native.metal_plan()

    @property
    def arena_bytes(self) -> int:
        """Bytes of the activation arena (states live in their own buffer)."""
        return int(self.stats["arena_bytes"])

    @property
    def stats(self) -> dict[str, Any]:
        """Compile figures: arena vs naive bytes, ``state_bytes``, weights bytes
        (``weights_bytes`` declared, ``weights_bytes_owned`` held in owned
        segments, ``weights_bytes_external`` bound zero-copy), thunk counts,
        native vs fallback; ``by_thunk`` counts thunks per name,
        ``fallback_by_thunk`` those of them that run through the numpy reference;
        ``dispatches_lowered`` / ``dispatches`` before and after the passes,
        ``pass_matches`` per pass (-1 = disabled) and ``passes``, one dict per
        pass in pipeline order (name, enabled, matches, thunks_before/after,
        ``made`` / ``removed``: thunk kinds it put in / took out, counted),
        ``graph_passes`` the graph fusions as (name, enabled, matches, nodes
        before, nodes after);
        the Metal plan's ``metal_dispatches``, ``metal_barriers``,
        ``metal_host`` and ``metal_host_by_thunk`` (host commands per thunk
        name: the thunks without an MSL kernel)."""
        with self._hold():
            return dict(self._native.stats())

    def profile(self, on: bool | None = None) -> dict[str, tuple[float, int]]:
        """Per-thunk-name timing of runs: ``profile(True)`` starts (clearing
        earlier figures), ``profile(False)`` returns the figures and stops; the result maps a thunk
        name to (seconds, calls) summed over every thunk of that name."""
        with self._hold():
            if on:
                self._native.set_profiling(True)
            out: dict[str, tuple[float, int]] = {}
            for _i, name, secs, calls in self._native.profile():
                s, c = out.get(name, (0.0, 0))
                out[name] = (s + secs, c + calls)
            if on is False:
                self._native.set_profiling(False)
            return out

    def report(self) -> str:
        """What the fusion passes did: per pass its matches and the thunk count
        before and after, then the dispatches of the lowered and final schedule.
        ``stats["pass_matches"]`` has the same per pass (-1 = disabled)."""
        with self._hold():
            return str(self._native.pass_report())

    def verify(self) -> None:
        """Run the schedule verifier."""
        with self._hold():
            self._native.verify()

    def __repr__(self) -> str:
        s = self.stats
        return (
            f"<rlx.Executable device={self.device} thunks={s['thunks']} "
            f"arena={s['arena_bytes']}B naive={s['naive_bytes']}B>"
        )


def compile(
    graph: Any,
    device: str = "host",
    dims: dict[str, int] | None = None,
    *,
    rng_seed: int = 0,
    rng_offset: int = 0,
) -> Executable:
    """Compile ``graph`` for ``device`` (``"host"``, ``"reference"`` or
    ``"metal-sim"``: the Metal plan's kernels through msl-sim on the CPU, needs clang++).

    ``dims`` binds symbolic dimensions (``{"seq": 128}``). ``rng_seed`` keys the
    random fills that have no seed of their own (mixed with their node id);
    ``rng_offset`` is the Philox stream offset (counter words 2-3) of every fill.
    """
    return Executable(graph, device=device, dims=dims, rng_seed=rng_seed, rng_offset=rng_offset)
