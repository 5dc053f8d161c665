"""Batched decode of several sequences in one step (continuous batching):
:class:`BatchDecoder`.

One KV cache holds ``slots`` sequences of ``ctx`` positions each (states
``k<i>`` / ``v<i>`` ``[slots·ctx, kv_dim]`` of the model's ``kv_dtype``, see
:func:`rlx.models.blocks.build_decoder` with ``batch``). A step runs the
next token of ``B ≤ slots`` sequences as the ``B`` rows of one graph: the
matmuls read every weight once for all of them, RoPE and the cache slot of
each row follow its own position, and attention attends each sequence's own
cache rows up to its own length (``kv_len`` i32 ``[B]``). The ``B`` running
sequences always occupy cache rows ``0..B`` (the graph for ``B`` rows views
the first ``B`` sequences of the cache): a sequence that leaves from the
middle has its place taken by the last one (:meth:`BatchDecoder.move`).

A sequence joins after its prompt ran on a :meth:`DecoderModel.session`
(its own prefill graphs and cache): :meth:`BatchDecoder.load` copies the
prompt's keys / values into the sequence's cache rows. Keys and values are
the same numbers either way, so a sequence's tokens equal those of the
same request decoded alone.

Only attention layers can be batched (the recurrent mixers' states are per
sequence and not laid out per batch row); :func:`batchable` says whether a
model can.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from rlx import trace
from rlx.errors import RlxError, UnsupportedOpError
from rlx.executable import Executable
from rlx.executable import compile as rlx_compile
from rlx.models.blocks import build_decoder

__all__ = ["BatchDecoder", "batchable"]


def batchable(model: Any) -> bool:
    """Whether ``model`` (a :class:`rlx.DecoderModel`) can decode in batches:
    the in-place cache and attention layers only."""
    cfg = getattr(model, "config", None)
    if cfg is None or not getattr(model, "inplace", False):
        return False
    return {cfg.mixer(i) for i in range(cfg.n_layers)} == {"attention"}


class BatchDecoder:
    """Decode steps of up to ``slots`` sequences of at most ``ctx`` positions
    each over one model's weights (see the module doc). Not thread-safe: one
    thread (the server's scheduler) drives it."""

    def __init__(self, model: Any, slots: int, ctx: Optional[int] = None) -> None:
        if not batchable(model):
            raise UnsupportedOpError(
                f"[batch] {model!r}: batched decode needs the in-place cache and "
                "attention layers only"
            )
        if slots < 1:
            raise RlxError(f"[batch] slots must be >= 1, got {slots}")
        cfg = model.config
        self.model = model
        self.slots = slots
        #: positions per sequence (its cache rows)
        self.ctx = min(int(ctx or cfg.ctx), cfg.ctx)
        if self.ctx < 2:
            raise RlxError(f"[batch] a context of {self.ctx} positions per sequence (need >= 2)")
        self._exes: dict[int, Executable] = {}
        #: seconds spent compiling the batched graphs
        self.compile_seconds = 0.0
        rd = cfg.rope_dims
        self._inv_freq = [sc.inv_freq(b, rd) for b, sc in cfg.rope_groups()]

    # ------------------------------------------------------------ graphs
    def exe(self, rows: int) -> Executable:
        """The graph for ``rows`` sequences (compiled on first use; every
        graph shares the cache of the ``slots``-row one)."""
        if not 1 <= rows <= self.slots:
            raise RlxError(f"[batch] {rows} rows (1..{self.slots})")
        exe = self._exes.get(rows)
        if exe is None:
            owner = self._exes.get(self.slots)
            if owner is None and rows != self.slots:
                owner = self.exe(self.slots)
            m = self.model
            t0 = time.perf_counter()
            with m._build_lock, trace.span(f"graph batch={rows} c={self.ctx}", "compile"):
                g = build_decoder(m.config, m.spec, m.weights, rows, self.ctx, True, True,
                                  max_tokens=max(self.slots, 1), batch=self.slots,
                                  kv_dtype=m.kv_dtype)  # fmt: skip
                exe = rlx_compile(g, device=m.device)
                for name in exe.params:
                    exe.bind_param(name, m.weights.values[name])
            if owner is not None:
                exe.share_state(owner)
            self.compile_seconds += time.perf_counter() - t0
            self._exes[rows] = exe
        return exe

    def warm(self) -> None:
        """Compile the graphs for every batch size now (not on first use)."""
        for rows in range(self.slots, 0, -1):
            self.exe(rows)

    def _cache(self, name: str) -> np.ndarray:
        """Writable view of cache state ``name`` ``[slots, ctx, kv_dim]``."""
        exe = self.exe(self.slots)
        view = exe._view(exe.states[name])
        return view.reshape(self.slots, self.ctx, -1)

    @property
    def cache_bytes(self) -> int:
        """Bytes of the batched KV cache."""
        return int(self.exe(self.slots).stats["state_bytes"])

    # ------------------------------------------------------------ moves
    def load(self, row: int, session: Any, n: int) -> None:
        """Copy the first ``n`` cached positions of ``session`` (a
        :class:`rlx.DecoderModel` session after its prefill) into sequence
        ``row``'s cache rows."""
        if not 0 <= row < self.slots or not 0 < n <= self.ctx:
            raise RlxError(f"[batch] load of {n} positions into row {row}")
        owner = session._owners.get(session._cap)
        if owner is None:
            raise RlxError("[batch] the session has no cache (no prefill ran)")
        src = owner.exe
        for i in range(self.model.config.n_layers):
            for kv in ("k", "v"):
                name = f"{kv}{i}"
                self._cache(name)[row, :n] = src._view(src.states[name])[:n]

    def unload(self, row: int, session: Any, n: int) -> None:
        """The reverse of :meth:`load`: sequence ``row``'s first ``n`` cache
        rows into ``session``'s cache (which must hold ``n`` positions), which
        then holds those ``n`` positions, so that the session can decode the
        sequence on alone."""
        owner = session._owners.get(session._cap)
        if not 0 <= row < self.slots or not 0 < n <= min(self.ctx, session._cap) or owner is None:
            raise RlxError(f"[batch] unload of {n} positions from row {row}")
        dst = owner.exe
        for i in range(self.model.config.n_layers):
            for kv in ("k", "v"):
                name = f"{kv}{i}"
                dst._view(dst.states[name])[:n] = self._cache(name)[row, :n]
        session._n = n

    def move(self, src: int, dst: int, n: int) -> None:
        """Sequence ``src``'s first ``n`` cache rows to sequence ``dst``."""
        if src == dst or n == 0:
            return
        for i in range(self.model.config.n_layers):
            for kv in ("k", "v"):
                c = self._cache(f"{kv}{i}")
                c[dst, :n] = c[src, :n]

    # ------------------------------------------------------------- step
    def step(self, tokens: Sequence[int], positions: Sequence[int]) -> np.ndarray:
        """One decode step: token ``tokens[b]`` at position ``positions[b]``
        of sequence ``b`` (cache rows ``0..B``); logits ``[B, vocab]``."""
        rows = len(tokens)
        if rows != len(positions):
            raise RlxError(f"[batch] {rows} tokens but {len(positions)} positions")
        pos = np.asarray(positions, np.int64)
        if rows and (pos.min() < 0 or pos.max() >= self.ctx):
            raise RlxError(f"[batch] a position outside 0..{self.ctx - 1}: {list(positions)}")
        exe = self.exe(rows)
        feeds: dict[str, np.ndarray] = {
            "x": self.model.embed([int(t) for t in tokens])[None].astype(np.float32),
            "slots": (np.arange(rows) * self.ctx + pos).astype(np.int32)[:, None],
            "kv_len": (pos + 1).astype(np.int32),
        }
        ang_pos = pos.astype(np.float64)[:, None]
        for j, inv in enumerate(self._inv_freq):
            ang = ang_pos * inv[None, :]
            feeds[f"cos_{j}"] = np.cos(ang).astype(np.float32)
            feeds[f"sin_{j}"] = np.sin(ang).astype(np.float32)
        feeds = {k: v for k, v in feeds.items() if k in exe.inputs}
        return exe.run(**feeds)["logits"]
