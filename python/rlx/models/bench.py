"""``rlx bench MODEL``: load time, prefill and decode throughput, peak RSS.

Prefill ``ppN``: ``N`` random token ids from an empty cache (the graph for
that bucket compiled beforehand, compile time reported apart). Decode
``tgN``: ``N`` single-token steps after a one-token prompt (llama-bench's
``tg`` convention). Each figure is the median of ``repeats`` runs.
"""

from __future__ import annotations

import resource
import statistics
import sys
import time
from typing import Any

import numpy as np

from rlx.models.decoder import DecoderModel, load


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, MiB."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / (1024.0 * 1024.0) if sys.platform == "darwin" else r / 1024.0


def _ids(model: DecoderModel, n: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(0, min(model.config.vocab, 30000), n)]


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


def run(name: str, repeats: int = 3) -> dict[str, Any]:
    """All figures for model ``name`` (a packaged name or a path)."""
    t0 = time.perf_counter()
    model = load(name)
    out: dict[str, Any] = {"model": name, "load_s": round(time.perf_counter() - t0, 3)}
    for n in (64, 256):
        out[f"pp{n}"] = round(prefill_tps(model, n, repeats), 1)
    for n in (32, 128):
        out[f"tg{n}"] = round(decode_tps(model, n, repeats), 1)
    out["compile_s"] = round(model.timings["compile"], 3)
    out["peak_rss_mib"] = round(peak_rss_mib(), 1)
    return out
