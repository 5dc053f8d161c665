"""Chrome / Perfetto traces of a run: ``RLX_TRACE=trace.json`` (or ``rlx
generate --trace trace.json``) writes a trace-event JSON file that opens in
ui.perfetto.dev or chrome://tracing.

What it records, on the track of the thread that did the work:

* ``compile`` slices: one per graph compile, holding the Rust compile stages
  (``check``, ``fuse``, ``lower``, ``passes``) as child slices, and, for a
  decoder model, the Python graph build around it (``graph s=.. c=..``);
* ``run`` slices: one per executable run, holding one slice per thunk that
  ran (name = the thunk's name; args: index, bytes read / written from the
  thunk's ``io()``, ``native`` = true for a native kernel, false for the
  numpy fallback) — host and reference devices; a ``metal-sim`` run is one
  slice without thunk children;
* ``generate`` spans: ``prefill`` (the prompt, up to the first token) and one
  ``token`` slice per generated token (its decode step and sampling).

Cost: nothing when tracing is off (one ``None`` check per run, no per-thunk
clock reads in the executor); when on, the executor reads the clock twice per
thunk and keeps the slices until the run ends.

The file is the JSON-object form of the trace-event format: ``{"traceEvents":
[...], "displayTimeUnit": "ms", "otherData": {...}}``, complete events
(``"ph": "X"``, ``ts`` / ``dur`` in microseconds since the trace started)
plus ``"ph": "M"`` metadata naming the process and threads. It is written
when :func:`stop` is called (the CLI does at the end of a command) or, for
``RLX_TRACE``, when the interpreter exits.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional, TypeVar

T = TypeVar("T")

__all__ = ["Tracer", "current", "span", "start", "stop", "tokens"]


class Tracer:
    """Collects trace events in memory (thread-safe) and writes them out."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._t0 = time.perf_counter()
        self._pid = os.getpid()
        self._tids: dict[int, int] = {}

    # ------------------------------------------------------------ events
    def _tid(self) -> int:
        """A small stable id for the calling thread (Perfetto draws one track each)."""
        ident = threading.get_ident()
        tid = self._tids.get(ident)
        if tid is None:
            name = threading.current_thread().name
            with self._lock:
                tid = self._tids[ident] = len(self._tids) + 1
                meta = {"ph": "M", "name": "thread_name", "pid": self._pid, "tid": tid}
                self.events.append({**meta, "args": {"name": name}})
        return tid

    def _add(self, ev: dict[str, Any]) -> None:
        with self._lock:
            self.events.append(ev)

    def us(self, t: float) -> float:
        """``time.perf_counter()`` value ``t`` as microseconds since the start."""
        return round((t - self._t0) * 1e6, 3)

    def complete(
        self, name: str, cat: str, start: float, end: float, args: Optional[dict[str, Any]] = None
    ) -> None:
        """A complete (``X``) slice from ``start`` to ``end`` (perf_counter
        seconds) on the calling thread's track."""
        ev: dict[str, Any] = {
            "name": name,
            "cat": cat,
            "ph": "X",
            "ts": self.us(start),
            "dur": round(max(end - start, 0.0) * 1e6, 3),
            "pid": self._pid,
            "tid": self._tid(),
        }
        if args:
            ev["args"] = args
        self._add(ev)

    # ------------------------------------------------- executable hooks
    def compiled(self, native: Any, name: str, start: float, end: float) -> None:
        """A compile slice with the Rust compile stages as children."""
        self.complete(f"compile {name}", "compile", start, end)
        for stage, off, secs in native.compile_stages():
            self.complete(stage, "compile", start + off, start + off + secs)

    def run(self, exe: Any, call: Any, active: Optional[int]) -> None:
        """Run ``call`` (the native run of ``exe``) with thunk timing on and
        record the run slice and one slice per thunk."""
        native = exe._native
        # per thunk (name, bytes read, bytes written, native), kept on the executable
        table = getattr(exe, "_trace_table", None)
        if table is None:
            table = exe._trace_table = list(native.thunk_table())
        native.set_tracing(True)
        t0 = time.perf_counter()
        try:
            call()
        finally:
            t1 = time.perf_counter()
            slices = native.take_trace()
            native.set_tracing(False)
            args: dict[str, Any] = {"device": exe.device, "thunks": len(slices)}
            if active is not None:
                args["active_rows"] = active
            self.complete(f"run {getattr(exe, 'name', 'graph')}", "run", t0, t1, args)
            for index, off, secs in slices:
                name, read, written, is_native = table[index]
                self.complete(
                    name,
                    "thunk",
                    t0 + off,
                    t0 + off + secs,
                    {
                        "index": index,
                        "bytes_read": read,
                        "bytes_written": written,
                        "native": is_native,
                    },
                )

    # -------------------------------------------------------------- file
    def document(self) -> dict[str, Any]:
        """The trace as the JSON object that :meth:`write` saves."""
        with self._lock:
            events = list(self.events)
        meta = {
            "ph": "M",
            "name": "process_name",
            "pid": self._pid,
            "tid": 0,
            "args": {"name": "rlx"},
        }
        return {
            "traceEvents": [meta, *events],
            "displayTimeUnit": "ms",
            "otherData": {"producer": "rlx", "clock": "perf_counter, µs since trace start"},
        }

    def write(self) -> Path:
        """Write the trace file (parent directories must exist)."""
        with open(self.path, "w", encoding="utf-8") as fh:
            json.dump(self.document(), fh, separators=(",", ":"))
        return self.path


#: the running tracer (None = tracing off)
TRACER: Optional[Tracer] = None


def current() -> Optional[Tracer]:
    """The running tracer, or None."""
    return TRACER


def start(path: str | os.PathLike[str]) -> Tracer:
    """Start tracing into ``path`` (replacing a running tracer, unsaved)."""
    global TRACER
    TRACER = Tracer(path)
    return TRACER


def stop() -> Optional[Path]:
    """Stop tracing and write the file; its path, or None when tracing was off."""
    global TRACER
    tr, TRACER = TRACER, None
    return tr.write() if tr is not None else None


@contextmanager
def span(name: str, cat: str = "rlx", **args: Any) -> Iterator[None]:
    """A slice around the ``with`` body when tracing is on (else nothing)."""
    tr = TRACER
    if tr is None:
        yield
        return
    t0 = time.perf_counter()
    try:
        yield
    finally:
        tr.complete(name, cat, t0, time.perf_counter(), args or None)


def tokens(gen: Iterator[T], prompt_tokens: int) -> Iterator[T]:
    """``gen`` (a generation's token ids) with ``prefill`` / ``token`` slices
    around each step when tracing is on; ``gen`` itself when off."""
    if TRACER is None:
        return gen
    return _traced_tokens(gen, prompt_tokens)


def _traced_tokens(gen: Iterator[T], prompt_tokens: int) -> Iterator[T]:
    i = 0
    t_start = time.perf_counter()
    try:
        while True:
            t0 = time.perf_counter()
            try:
                tok = next(gen)
            except StopIteration:
                return
            tr = TRACER
            if tr is not None:
                name = "prefill" if i == 0 else "token"
                args = {"prompt_tokens": prompt_tokens} if i == 0 else {"index": i}
                tr.complete(name, "generate", t0, time.perf_counter(), {**args, "token": tok})
            i += 1
            yield tok
    finally:
        close = getattr(gen, "close", None)
        if close is not None:
            close()
        tr = TRACER
        if tr is not None:
            tr.complete(
                "generate",
                "generate",
                t_start,
                time.perf_counter(),
                {"prompt_tokens": prompt_tokens, "tokens": i},
            )


def _start_from_env() -> None:
    """``RLX_TRACE=path``: trace the whole process, written at exit."""
    path = os.environ.get("RLX_TRACE", "").strip()
    if path and TRACER is None:
        start(path)
        atexit.register(_write_at_exit)


def _write_at_exit() -> None:
    try:
        stop()
    except OSError as e:  # an unwritable path: say so, do not traceback at exit
        print(f"rlx: warning: RLX_TRACE: cannot write {e.filename}: {e.strerror}", file=sys.stderr)


_start_from_env()
