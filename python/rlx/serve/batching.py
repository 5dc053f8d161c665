"""Continuous batching for ``rlx serve --batch``: :class:`BatchEngine`.

The slots, the FIFO queue, the 503 beyond it and the events are those of
:class:`rlx.serve.engine.Engine`; what differs is who runs the tokens. One
scheduler thread loops:

1. new requests join: each one's prompt runs on its slot's
   :meth:`rlx.DecoderModel.session` (its own prefill graphs), its first
   token is sampled, and its keys / values are copied into the next free
   row of the batched cache (:class:`rlx.models.batch.BatchDecoder`);
2. one decode step for every running stream at once (B rows in one graph:
   the weights are read once per step, not once per stream). A stream that
   runs alone decodes on its own session instead (the single-sequence fast
   path, faster than a batched step of one row): its keys / values move
   into the batched cache only when a second stream joins, and back to the
   session when it is alone again;
3. each stream samples its token (its own sampling settings and seeded
   generator), cuts stop strings, and leaves when it is done, cancelled
   (client gone) or failed; the last row moves into its place.

A stream's tokens equal those of the same request served alone (the same
prefill, the same keys / values, per-row attention over its own cache).
Requests whose prompt + budget do not fit a batch row (``ctx`` positions)
run on their slot's thread as :class:`Engine` runs them. The scheduler waits
on a condition variable when there is nothing to do (no polling).
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from rlx.models.batch import BatchDecoder
from rlx.sampling import sample
from rlx.serve.engine import Done, Engine, Event, Failed, Job, Piece, StopText

__all__ = ["BatchEngine"]


@dataclass
class _Stream:
    """One request in the batch (scheduler-thread state)."""

    slot: int
    job: Job
    cancel: threading.Event
    emit: Callable[[Event], None]
    finish: Callable[[Optional[str]], None]
    session: Any = None
    text: Optional[StopText] = None
    rng: Any = None
    #: tokens generated (emitted) so far
    n: int = 0
    #: the token to feed next and its position
    tok: int = 0
    pos: int = 0
    #: whether its keys / values are current in its session's cache (True)
    #: or in its row of the batched cache (False)
    alone: bool = True
    logits: Optional[np.ndarray] = field(default=None, repr=False)


class BatchEngine(Engine):
    """:class:`Engine` whose slots decode together in one batched step (see
    the module doc). ``ctx``: positions per batch row (default: the model's
    context, at most 2048)."""

    def __init__(
        self, model: Any, slots: int = 4, max_queue: int = 64, ctx: Optional[int] = None
    ) -> None:
        super().__init__(model, slots, max_queue)
        self.batch = BatchDecoder(model, slots, ctx or min(model.config.ctx, 2048))
        self._cv = threading.Condition()
        self._incoming: list[_Stream] = []
        self._closed = False
        self._thread: Optional[threading.Thread] = None
        #: batched decode steps run / stream-tokens they produced
        self.steps = 0
        self.batched_tokens = 0
        #: tokens decoded by a lone stream on its own session
        self.solo_tokens = 0

    def stats(self) -> dict[str, int]:
        out = super().stats()
        out["batch_steps"] = self.steps
        out["solo_tokens"] = self.solo_tokens
        return out

    def warm(self) -> None:
        """Compile the batched graphs now (else on the first steps)."""
        self.batch.warm()

    def _launch(
        self,
        loop: asyncio.AbstractEventLoop,
        slot: int,
        job: Job,
        cancel: threading.Event,
        emit: Callable[[Event], None],
    ) -> None:
        if len(job.ids) + max(job.budget, 1) - 1 > self.batch.ctx or self._closed:
            super()._launch(loop, slot, job, cancel, emit)  # does not fit a batch row
            return

        def finish(outcome: Optional[str]) -> None:
            try:
                loop.call_soon_threadsafe(self._finish, slot, cancel, outcome)
            except RuntimeError:  # the loop is closed
                pass

        st = _Stream(slot, job, cancel, emit, finish)
        with self._cv:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="rlx-batch", daemon=True)
                self._thread.start()
            self._incoming.append(st)
            self._cv.notify()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        super().close()

    # ------------------------------------------------- scheduler thread
    def _loop(self) -> None:
        running: list[_Stream] = []
        while True:
            with self._cv:
                while not self._incoming and not running and not self._closed:
                    self._cv.wait()
                if self._closed:
                    for st in running + self._incoming:
                        st.finish("cancelled")
                    self._incoming.clear()
                    return
                new, self._incoming = self._incoming, []
            for st in new:
                if self._admit(st, len(running)):
                    running.append(st)
            if running:
                running = self._step(running)

    def _end(self, st: _Stream, outcome: str) -> None:
        st.finish(outcome)

    def _admit(self, st: _Stream, row: int) -> bool:
        """Prefill ``st`` on its session, take its first token; True when it
        joins the batch (at cache row ``row``)."""
        try:
            if st.cancel.is_set():
                self._end(st, "cancelled")
                return False
            st.session = self._session(st.slot)
            job = st.job
            job.params.check()
            st.text = StopText(st.session.tokenizer, job.stop)
            st.rng = np.random.default_rng(job.seed)
            prompt = [int(t) for t in job.ids]
            s = st.session
            with s._lock:
                s.reset(len(prompt) + job.budget)  # as generate_ids sizes it
                logits = s._feed(prompt)
                outcome = self._advance(st, logits)
                if outcome is None:
                    st.pos = len(prompt)  # its cache: the session's, until it batches
        except BaseException as e:  # handed to the consumer (an HTTP error)
            st.emit(Failed(e))
            self._end(st, "failed")
            return False
        if outcome is not None:
            self._end(st, outcome)
            return False
        return True

    def _advance(self, st: _Stream, logits: np.ndarray) -> Optional[str]:
        """Sample ``st``'s next token from ``logits`` and emit its text; the
        outcome when the stream is over (else None: ``st.tok`` is to be fed)."""
        job = st.job
        assert st.text is not None
        if st.cancel.is_set():
            return "cancelled"
        if st.n >= job.budget:
            return self._done(st, hit=False)
        tok = sample(logits, job.params, st.rng)
        if tok in st.session.tokenizer.eos_ids and not job.ignore_eos:
            return self._done(st, hit=False, eos=True)
        st.n += 1
        piece, hit = st.text.push(tok)
        if piece:
            st.emit(Piece(piece, st.n))
        if hit or st.n >= job.budget:
            return self._done(st, hit)
        st.tok = tok
        return None

    def _done(self, st: _Stream, hit: bool, eos: bool = False) -> str:
        assert st.text is not None
        if not hit:
            piece, hit = st.text.flush()
            if piece:
                st.emit(Piece(piece, st.n))
        reason = "length" if st.n >= st.job.budget and not hit and not eos else "stop"
        st.emit(Done(reason, st.n))
        return reason

    def _step(self, running: list[_Stream]) -> list[_Stream]:
        """One batched decode step; returns the streams still running (the
        cache rows compacted: a leaving stream's row gets the last one)."""
        live: list[_Stream] = []
        for st in running:  # a cancelled stream leaves before the step
            if st.cancel.is_set():
                self._end(st, "cancelled")
            else:
                live.append(st)
        running = self._compact(running, live)
        if not running:
            return running
        try:
            logits = self._logits(running)
        except BaseException as e:
            for st in running:
                st.emit(Failed(e))
                self._end(st, "failed")
            return []
        stay: list[_Stream] = []
        for b, st in enumerate(running):
            st.pos += 1
            outcome = self._advance(st, logits[b])
            if outcome is None:
                stay.append(st)
            else:
                self._end(st, outcome)
        return self._compact(running, stay)

    def _logits(self, running: list[_Stream]) -> np.ndarray:
        """Logits ``[B, vocab]`` of every running stream's next token: on
        its session when one stream runs alone, else one batched step (the
        cache rows ``0..B`` hold each stream's keys / values: a stream whose
        cache is its session's copies it into its row first)."""
        if len(running) == 1:
            st = running[0]
            s = st.session
            with s._lock:
                if not st.alone:  # back from the batch: its rows into the session
                    self.batch.unload(0, s, st.pos)
                    st.alone = True
                out = s._feed([st.tok])
            self.solo_tokens += 1
            return out[None]
        for row, st in enumerate(running):
            if st.alone:
                self.batch.load(row, st.session, st.pos)
                st.alone = False
        self.steps += 1
        self.batched_tokens += len(running)
        return self.batch.step([st.tok for st in running], [st.pos for st in running])

    def _compact(self, rows: list[_Stream], stay: list[_Stream]) -> list[_Stream]:
        """``stay`` (a subset of ``rows``, whose index is the cache row) moved
        to cache rows ``0..len(stay)``: each one past the end takes a free
        row below, keeping the others in place."""
        if len(stay) == len(rows):
            return rows
        keep = set(map(id, stay))
        out = list(rows)
        free = [i for i, st in enumerate(rows) if id(st) not in keep]
        n = len(stay)
        movers = [i for i in range(n, len(rows)) if id(rows[i]) in keep]
        holes = [i for i in free if i < n]
        for src, dst in zip(movers, holes):
            st = rows[src]
            if not st.alone:  # a session-cached stream is copied when it batches
                self.batch.move(src, dst, st.pos)
            out[dst] = st
        return out[:n]
