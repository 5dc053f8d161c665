"""Locks that make executables and models safe to call from several threads.

rlx serialises rather than runs in parallel: one :class:`rlx.Executable` has
one activation arena and at most one state buffer, so two runs of it cannot
overlap, and a :class:`rlx.DecoderModel` holds one sequence (its KV cache and
position) at a time. The kernels of one run already use every core.

* :class:`GroupLock` — the lock of an executable (``Executable._hold()``). Executables that share a
  state buffer (:meth:`rlx.Executable.share_state`) share one lock, so runs
  touching the same KV cache never overlap either. Re-entrant (a host
  callback may call back into the executable on the running thread).
* :class:`SequenceLock` — the lock of a model. A plain call (``logits``,
  ``next_logits``) holds it for the call; a generator holds it from its first
  step until it is exhausted, closed or garbage-collected, so generations from
  several threads run one after the other, each on an intact cache. Within one
  thread nothing waits (that would deadlock a consumer that interleaves two
  generators): a newer call or generator takes the model over, and the
  generator it displaced raises :class:`SequenceInterrupted` at its next step
  instead of continuing on a cache that is no longer its own.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Optional, TypeVar

from rlx.errors import RlxError

T = TypeVar("T")


class SequenceInterrupted(RlxError):
    """A generator's model ran another sequence (a newer generation or a
    ``logits`` call from the same thread) before the generator finished."""


class GroupLock:
    """A re-entrant lock that several executables can share, and that an
    executable trades for another's when it starts sharing that one's state:
    ``with owner.hold():`` re-checks after acquiring that the lock it waited
    for is still the owner's."""

    def __init__(self) -> None:
        self._lock = threading.RLock()

    def acquire(self) -> None:
        """Acquire (re-entrant)."""
        self._lock.acquire()

    def release(self) -> None:
        """Release."""
        self._lock.release()


class _Holder:
    """Who holds a :class:`SequenceLock`: a thread's plain call or a generator."""

    __slots__ = ("active", "depth", "interrupted", "thread", "took")

    def __init__(self, thread: int, active: bool) -> None:
        #: the thread it runs (a generator: the thread of its latest step)
        self.thread = thread
        #: running now (a plain call always; a generator during a step)
        self.active = active
        #: nesting depth of a thread's plain calls
        self.depth = 0
        #: whether it holds the lock (False: nested in this thread's holder)
        self.took = False
        #: a generator displaced by a newer call of its thread
        self.interrupted = False


class SequenceLock:
    """The per-model lock described in the module doc."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._holder: Optional[_Holder] = None
        self._calls: dict[int, _Holder] = {}

    def _take(self, me: _Holder) -> bool:
        """Under ``self._cond``: wait until ``me`` may run. Returns True when
        ``me`` now holds the lock, False when it runs nested inside the
        running holder of its own thread."""
        while True:
            h = self._holder
            if h is None or h is me:
                self._holder = me
                return True
            if h.thread == me.thread:
                if h.active:
                    return False
                h.interrupted = True  # a suspended generator of this thread
                self._holder = me
                return True
            self._cond.wait()

    def _release(self, me: _Holder) -> None:
        if self._holder is me:
            self._holder = None
            self._cond.notify_all()

    def __enter__(self) -> None:
        tid = threading.get_ident()
        with self._cond:
            me = self._calls.get(tid)
            if me is None:
                me = self._calls[tid] = _Holder(tid, active=True)
                me.took = self._take(me)
            me.depth += 1

    def __exit__(self, *exc: object) -> None:
        tid = threading.get_ident()
        with self._cond:
            me = self._calls[tid]
            me.depth -= 1
            if me.depth == 0:
                del self._calls[tid]
                if me.took:
                    self._release(me)

    def generator(self, gen: Iterator[T], what: str = "generate") -> Iterator[T]:
        """Wrap ``gen`` so that it holds this lock from its first step to its
        end (see the module doc)."""
        me = _Holder(threading.get_ident(), active=False)
        try:
            while True:
                with self._cond:
                    if me.interrupted:
                        raise SequenceInterrupted(
                            f"[{what}] interrupted: another generation or logits call on "
                            "this model ran in this thread before this generator finished "
                            "(finish or close a generator before starting the next one)"
                        )
                    me.thread = threading.get_ident()
                    self._take(me)
                    me.active = True
                try:
                    item = next(gen)
                except StopIteration:
                    return
                finally:
                    with self._cond:
                        me.active = False
                yield item
        finally:
            gen.close()
            with self._cond:
                self._release(me)
