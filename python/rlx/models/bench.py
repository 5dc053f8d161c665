"""``rlx bench MODEL``: load time, prefill and decode throughput, peak RSS.

Prefill ``ppN``: ``N`` random token ids from an empty cache (the graph for
that bucket compiled beforehand, compile time reported apart). Decode
``tgN``: ``N`` single-token steps after a one-token prompt (llama-bench's
``tg`` convention). Each figure is the median of ``repeats`` runs.

``--depth N``: ``tg64@dN``, 64 decode steps after a prompt of ``N`` tokens
(llama-bench's ``-n 64 -d N``); the prompt is fed once and each repeat
rewinds the cache to it.

``--profile`` (or ``RLX_PROFILE=1``): :func:`decode_profile`, where one
decode step's time goes, per thunk kind, plus the executor's and Python's
share between the thunks.
"""

from __future__ import annotations

import random
import resource
import statistics
import sys
import time
from typing import Any, Callable, Optional

from rlx.models.decoder import DecoderModel, load


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, MiB."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / (1024.0 * 1024.0) if sys.platform == "darwin" else r / 1024.0


def _ids(model: DecoderModel, n: int, seed: int) -> list[int]:
    """``n`` pseudo-random token ids below ``min(vocab, 30000)``. Drawn with
    the standard library's ``random`` (already imported): ``numpy.random``
    would load OpenSSL's libcrypto (through ``secrets``), ~4.7 MiB resident
    with its modules, into the process whose peak RSS the bench reports."""
    rng = random.Random(seed)
    hi = min(model.config.vocab, 30000)
    return [rng.randrange(hi) for _ in range(n)]


def prefill_tps(model: DecoderModel, n: int, repeats: int) -> float:
    """Median tokens/s of an ``n``-token prefill."""
    ids = _ids(model, n, 0)
    model.reset(n)
    model._feed(ids)  # compile + warm up
    times = []
    for _ in range(repeats):
        model.reset(n)
        t0 = time.perf_counter()
        model._feed(ids)
        times.append(time.perf_counter() - t0)
    return n / statistics.median(times)


def decode_tps(model: DecoderModel, n: int, repeats: int) -> float:
    """Median tokens/s of ``n`` decode steps after a one-token prompt."""
    ids = _ids(model, n + 1, 1)
    times = []
    for r in range(repeats + 1):
        model.reset(n + 1)
        model._feed(ids[:1])
        t0 = time.perf_counter()
        for t in ids[1:]:
            model._feed([t])
        if r:  # the first round compiles and warms up
            times.append(time.perf_counter() - t0)
    return n / statistics.median(times)


def depth_decode_tps(model: DecoderModel, depth: int, n: int, repeats: int) -> float:
    """Median tokens/s of ``n`` decode steps after a ``depth``-token prompt
    (the prompt is fed once; every round rewinds the cache to it)."""
    ids = _ids(model, depth + n + 1, 2)
    model.reset(depth + n + 1)
    model._feed(ids[: depth + 1])
    times = []
    for r in range(repeats + 1):
        model._n = depth + 1  # rewind: the next steps overwrite the same slots
        t0 = time.perf_counter()
        for t in ids[depth + 1 :]:
            model._feed([t])
        if r:  # the first round compiles and warms up
            times.append(time.perf_counter() - t0)
    return n / statistics.median(times)


#: Thunk kinds of :func:`decode_profile`: first match wins (substrings of
#: the lower-cased thunk name, e.g. ``attention``, ``rms_norm``,
#: ``dequant_matmul_gguf``, ``fused_mlp_down_residual``).
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("attention", ("attention", "attn", "sdpa")),
    ("norm", ("norm",)),
    ("gemv", ("matmul", "gemv", "gemm", "quant", "linear", "mlp", "dense")),
)


def thunk_kind(name: str) -> str:
    """``gemv``, ``attention``, ``norm`` or ``other`` for a thunk name."""
    low = name.lower()
    return next((k for k, keys in KINDS if any(s in low for s in keys)), "other")


def decode_profile(model: DecoderModel, n: int = 64, depth: int = 0) -> dict[str, Any]:
    """Where a decode step's time goes: ``n`` steps after a ``depth``-token
    prompt with the executor's per-thunk clocks on. Milliseconds per token
    by thunk kind (``gemv``, ``attention``, ``norm``, ``other``), then
    ``executor`` (inside ``Executable.run`` but outside the thunks: input
    binding, output copies, FFI, the lock) and ``python`` (the rest of the
    step: embedding lookup, RoPE tables, feeds), ``total`` and each part's
    fraction of it; ``by_thunk`` has ms per token per thunk name. The
    clocks add ~1 µs per thunk.

    ``python_cpu_ms``: the calling thread's CPU time per token outside the
    executor calls (``time.thread_time``): the Python work between tokens
    without the time the thread waited for a core, which the wall-clock
    ``python`` part includes on a loaded machine; ``python_cpu_fraction`` is
    it over ``total``."""
    ids = _ids(model, depth + n + 2, 3)
    model.reset(depth + n + 2)
    model._feed(ids[: depth + 1])
    model._feed(ids[depth + 1 : depth + 2])  # compile + warm the decode graph
    exe = model.compiled(1, decode=True)[2]
    inside = [0.0, 0.0]  # wall, thread CPU
    orig: dict[str, Callable[..., Any]] = {}
    for meth in ("run", "run_active", "run_bound", "run_step"):
        fn = getattr(exe, meth, None)
        if fn is None:
            continue
        orig[meth] = fn

        def timed(*a: Any, _fn: Callable[..., Any] = fn, **kw: Any) -> Any:
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return _fn(*a, **kw)
            finally:
                inside[0] += time.perf_counter() - t0
                inside[1] += time.thread_time() - c0

        setattr(exe, meth, timed)
    try:
        exe.profile(True)
        t0, c0 = time.perf_counter(), time.thread_time()
        for t in ids[depth + 2 :]:
            model._feed([t])
        wall = time.perf_counter() - t0
        cpu = time.thread_time() - c0
        prof = exe.profile(False)
    finally:
        for meth in orig:
            delattr(exe, meth)
    ms = 1e3 / n
    kinds = {k: 0.0 for k in ("gemv", "attention", "norm", "other")}
    by_thunk = {}
    for name, (secs, _calls) in prof.items():
        kinds[thunk_kind(name)] += secs * ms
        by_thunk[name] = round(secs * ms, 4)
    thunks = sum(kinds.values())
    parts = {**kinds, "executor": inside[0] * ms - thunks, "python": (wall - inside[0]) * ms}
    total = wall * ms
    py_cpu = (cpu - inside[1]) * ms
    return {
        "depth": depth,
        "tokens": n,
        "python_cpu_ms": round(py_cpu, 4),
        "python_cpu_fraction": round(py_cpu / total, 4),
        "ms_per_token": {k: round(v, 4) for k, v in parts.items()} | {"total": round(total, 4)},
        "fraction": {k: round(v / total, 4) for k, v in parts.items()},
        "by_thunk": dict(sorted(by_thunk.items(), key=lambda kv: -kv[1])),
    }


def format_profile(p: dict[str, Any]) -> str:
    """A :func:`decode_profile` result as a small table."""
    ms, fr = p["ms_per_token"], p["fraction"]
    lines = [f"decode profile: {p['tokens']} tokens after a {p['depth']}-token prompt, "
             f"{ms['total']:.3f} ms/token ({1e3 / ms['total']:.1f} tok/s)"]  # fmt: skip
    for k in ("gemv", "attention", "norm", "other", "executor", "python"):
        lines.append(f"  {k:10} {ms[k]:8.3f} ms  {100 * fr[k]:5.1f} %")
    cpu, cpu_fr = p["python_cpu_ms"], 100 * p["python_cpu_fraction"]
    lines.append(f"  python CPU {cpu:8.3f} ms  {cpu_fr:5.1f} % (thread time outside the runs)")
    lines.append("  top thunks (ms/token):")
    for name, v in list(p["by_thunk"].items())[:8]:
        lines.append(f"    {name:32} {v:8.3f}")
    return "\n".join(lines)


def run(
    name: str,
    repeats: int = 3,
    depths: tuple[int, ...] = (),
    profile: bool = False,
    standard: bool = True,
    kv_dtype: Optional[str] = None,
) -> dict[str, Any]:
    """All figures for model ``name`` (a packaged name or a path): ``pp64``,
    ``pp256``, ``tg32``, ``tg128`` unless ``standard`` is false; with
    ``depths`` ``tg64@dN`` per depth; with ``profile`` a
    :func:`decode_profile` (after a prompt of the largest depth, else 0)
    under ``"profile"``. ``kv_dtype``: the KV cache's element type
    (:func:`rlx.load`)."""
    t0 = time.perf_counter()
    model = load(name, kv_dtype=kv_dtype)
    out: dict[str, Any] = {"model": name, "load_s": round(time.perf_counter() - t0, 3)}
    for n in (64, 256) if standard else ():
        out[f"pp{n}"] = round(prefill_tps(model, n, repeats), 1)
    for n in (32, 128) if standard else ():
        out[f"tg{n}"] = round(decode_tps(model, n, repeats), 1)
    for d in depths:
        out[f"tg64@d{d}"] = round(depth_decode_tps(model, d, 64, repeats), 1)
    if profile:
        out["profile"] = decode_profile(model, depth=max(depths, default=0))
    out["compile_s"] = round(model.timings["compile"], 3)
    out["peak_rss_mib"] = round(peak_rss_mib(), 1)
    return out
