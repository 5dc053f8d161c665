"""The generation engine behind the server: a fixed number of *slots*, each an
independent :meth:`rlx.DecoderModel.session` (its own compiled graphs and
KV cache, weights shared zero-copy), run by one worker thread each.

* A request waits (FIFO) for a free slot; at most ``max_queue`` wait, more
  get HTTP 503. Up to ``slots`` requests generate at once; their runs release
  the GIL, so they overlap on the cores. Every slot has its own cache, so a
  stream's tokens do not depend on what the other slots do (greedy output
  equals the same request served alone).
* The worker streams text pieces back to the event loop; stop strings are
  cut out on the worker (text that could begin a stop string is held back
  until it cannot), so a client never sees a stop string.
* Cancellation: when the consumer goes away (client disconnect, the request
  task cancelled) the worker sees a flag before its next decode step and ends
  the generation; the slot returns to the pool when the worker has stopped
  touching its session, never earlier.

Decode steps of different slots are separate runs here (m = 1 each);
:class:`rlx.serve.batching.BatchEngine` batches them into one m > 1 step
(continuous batching).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

import numpy as np

from rlx.sampling import SamplingParams
from rlx.serve.errors import APIError


@dataclass
class Piece:
    """Text produced so far (``tokens``: tokens generated up to here)."""

    text: str
    tokens: int


@dataclass
class Done:
    """The end of a generation: ``reason`` is ``"stop"`` (EOS / end of turn
    or a stop string) or ``"length"`` (the token budget ran out)."""

    reason: str
    tokens: int


@dataclass
class Failed:
    """The worker raised (re-raised in the consumer)."""

    error: BaseException


Event = Union[Piece, Done, Failed]


class StopText:
    """Incremental detokenisation that cuts the text before the first stop
    string and holds back any tail that could still become one."""

    def __init__(self, tokenizer: Any, stop: Sequence[str]) -> None:
        self._dec = tokenizer.stream()
        self._stop = [s for s in stop if s]
        self._pending = ""

    def push(self, token: int) -> tuple[str, bool]:
        """Text that is now safe to emit, and whether a stop string was hit."""
        self._pending += self._dec.push(token)
        return self._drain(final=False)

    def flush(self) -> tuple[str, bool]:
        """The rest at the end of the generation."""
        self._pending += self._dec.flush()
        return self._drain(final=True)

    def _drain(self, final: bool) -> tuple[str, bool]:
        p = self._pending
        hits = [p.find(s) for s in self._stop if s in p]
        if hits:
            self._pending = ""
            return p[: min(hits)], True
        keep = 0
        if not final:
            keep = max(
                (k for s in self._stop for k in range(1, len(s)) if p.endswith(s[:k])), default=0
            )
        self._pending = p[len(p) - keep :]
        return p[: len(p) - keep], False


@dataclass
class Job:
    """One generation: prompt ids, token budget and sampling settings."""

    ids: list[int]
    budget: int
    params: SamplingParams
    seed: Optional[int] = None
    stop: Sequence[str] = ()
    ignore_eos: bool = False


class Engine:
    """Slots over one decoder model (see the module doc).

    ``model`` needs ``session()`` returning objects with ``generate_ids`` and
    ``tokenizer`` (a :class:`rlx.DecoderModel` has both)."""

    def __init__(self, model: Any, slots: int = 4, max_queue: int = 64) -> None:
        if slots < 1:
            raise ValueError(f"[serve] slots must be >= 1, got {slots}")
        self.model = model
        self.slots = slots
        self.max_queue = max_queue
        self._sessions: list[Any] = [None] * slots
        self._free: Optional[asyncio.Queue[int]] = None
        self._pool = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="rlx-slot")
        self._cancels: set[threading.Event] = set()
        #: requests generating now / waiting for a slot
        self.active = 0
        self.queued = 0
        #: finished generations / generations ended by their consumer
        self.served = 0
        self.cancelled = 0
        #: tokens generated since start
        self.tokens = 0

    def stats(self) -> dict[str, int]:
        """Slot figures for ``/health``."""
        return {
            "slots": self.slots,
            "active": self.active,
            "queued": self.queued,
            "served": self.served,
            "cancelled": self.cancelled,
            "tokens": self.tokens,
        }

    def _queue(self) -> asyncio.Queue[int]:
        if self._free is None:  # created in the event loop (asyncio objects bind to it)
            self._free = asyncio.Queue()
            for i in range(self.slots):
                self._free.put_nowait(i)
        return self._free

    def _session(self, slot: int) -> Any:
        """Slot ``slot``'s session, made on its first use (on its worker)."""
        s = self._sessions[slot]
        if s is None:
            s = self._sessions[slot] = self.model.session()
        return s

    async def generate(self, job: Job) -> AsyncIterator[Event]:
        """Wait for a slot, then yield :class:`Piece` events and one final
        :class:`Done`; raises what the worker raised. Closing the iterator
        early (or cancelling the task awaiting it) cancels the generation."""
        free = self._queue()
        if free.empty() and self.queued >= self.max_queue:
            raise APIError(
                503,
                f"The server is busy ({self.queued} requests waiting for "
                f"{self.slots} slots); retry later",
                "server_error",
                code="server_busy",
            )
        self.queued += 1
        try:
            slot = await free.get()
        finally:
            self.queued -= 1
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Event] = asyncio.Queue()
        cancel = threading.Event()

        def emit(ev: Event) -> None:
            try:
                loop.call_soon_threadsafe(events.put_nowait, ev)
            except RuntimeError:  # the loop is closed: nobody is listening
                cancel.set()

        self.active += 1
        self._cancels.add(cancel)
        try:
            self._launch(loop, slot, job, cancel, emit)
        except RuntimeError:  # the pool is shut down (server stopping)
            self._finish(slot, cancel, None)
            raise APIError(
                503, "The server is shutting down", "server_error", code="server_busy"
            ) from None
        try:
            while True:
                ev = await events.get()
                if isinstance(ev, Failed):
                    raise ev.error
                yield ev
                if isinstance(ev, Done):
                    self.tokens += ev.tokens
                    return
        finally:
            cancel.set()  # a no-op once the worker has finished

    def _launch(
        self,
        loop: asyncio.AbstractEventLoop,
        slot: int,
        job: Job,
        cancel: threading.Event,
        emit: Callable[[Event], None],
    ) -> None:
        """Start the generation on the slot's worker thread (raises
        RuntimeError when the pool is shut down); :meth:`_finish` runs on the
        loop when it is over."""
        fut = loop.run_in_executor(self._pool, self._work, slot, job, cancel, emit)
        fut.add_done_callback(functools.partial(self._release, slot, cancel))

    def _release(self, slot: int, cancel: threading.Event, fut: asyncio.Future[str]) -> None:
        """The worker future's done-callback."""
        outcome = None
        if not fut.cancelled() and fut.exception() is None:
            outcome = fut.result()
        self._finish(slot, cancel, outcome)

    def _finish(self, slot: int, cancel: threading.Event, outcome: Optional[str]) -> None:
        """Back to the pool once the worker is done with the slot's session
        (on the event loop); ``outcome`` as :meth:`_work` returns it."""
        self.active -= 1
        self._cancels.discard(cancel)
        if outcome == "cancelled":
            self.cancelled += 1
        elif outcome is not None:
            self.served += 1
        self._queue().put_nowait(slot)

    def _work(
        self, slot: int, job: Job, cancel: threading.Event, emit: Callable[[Event], None]
    ) -> str:
        """On the slot's worker thread: generate, emitting events; returns the
        outcome (``stop`` / ``length`` / ``cancelled`` / ``failed``)."""
        n = 0
        try:
            session = self._session(slot)
            tokens = session.generate_ids(
                job.ids, job.budget, job.params, job.seed, ignore_eos=job.ignore_eos
            )
            text = StopText(session.tokenizer, job.stop)
            hit = False
            try:
                for tok in tokens:
                    if cancel.is_set():
                        return "cancelled"
                    n += 1
                    piece, hit = text.push(tok)
                    if piece:
                        emit(Piece(piece, n))
                    if hit:
                        break
            finally:
                tokens.close()
            if cancel.is_set():
                return "cancelled"
            if not hit:
                piece, hit = text.flush()
                if piece:
                    emit(Piece(piece, n))
            reason = "length" if n >= job.budget and not hit else "stop"
            emit(Done(reason, n))
            return reason
        except BaseException as e:  # handed to the consumer, which maps it to an HTTP error
            emit(Failed(e))
            return "failed"

    def close(self) -> None:
        """Cancel every generation and stop the workers (server shutdown)."""
        for c in list(self._cancels):
            c.set()
        self._pool.shutdown(wait=False, cancel_futures=True)


class Embedder:
    """Sentence embeddings of an encoder model (``embed`` / ``encode``), run on
    one worker thread (the encoder's compiled graphs are not shared across
    threads)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlx-embed")

    def _run(self, texts: list[str]) -> tuple[np.ndarray, int]:
        vecs = np.asarray(self.model.embed(texts), np.float32)
        used = sum(len(self.model.encode(t)) for t in texts)
        return vecs, used

    async def embed(self, texts: list[str]) -> tuple[np.ndarray, int]:
        """The vectors of ``texts`` and the tokens they took."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._run, texts)

    def close(self) -> None:
        """Stop the worker."""
        self._pool.shutdown(wait=False, cancel_futures=True)
