"""Reductions along an axis: softmax, cross-entropy, cumsum, Reduce, top-k,
arg-max/min and token sampling. Sums in float64; one rounding on store."""

from __future__ import annotations

import numpy as np

from . import Memory, reference
from ._act import store
from ._common import F32, I32, fdt
from .rng import uniform_at


def softmax_rows(x: np.ndarray) -> np.ndarray:
    """Numerically stable softmax over the last axis (float64)."""
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore"):  # an all -inf row gives NaN
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


@reference("softmax")
def softmax(t: dict, mem: Memory) -> None:
    """In-place softmax over the columns of ``data [rows, cols]``."""
    x = mem.view(t["data"], (t["rows"], t["cols"]), fdt(t))
    store(x, softmax_rows(x))


@reference("softmax_cross_entropy_dense")
def softmax_cross_entropy_dense(t: dict, mem: Memory) -> None:
    """Soft-label CE: ``loss[r] = −Σ_c targets[r, c]·log_softmax(logits[r])[c]`` (f32)."""
    n, c = t["n"], t["c"]
    lsm = _log_softmax(mem.view(t["logits"], (n, c), F32))
    tg = mem.view(t["targets"], (n, c), F32).astype(np.float64)
    store(mem.view(t["dst"], n, F32), -(tg * lsm).sum(axis=-1))


@reference("softmax_cross_entropy_with_logits")
def softmax_cross_entropy_with_logits(t: dict, mem: Memory) -> None:
    """``loss[r] = logsumexp(logits[r]) − logits[r, labels[r]]`` (f32; labels
    int32 in ``[0, c)``)."""
    n, c = t["n"], t["c"]
    lab = mem.view(t["labels"], n, I32).astype(np.int64)
    if n and (lab.min() < 0 or lab.max() >= c):
        raise IndexError(f"[softmax_cross_entropy_with_logits] label out of range [0, {c})")
    lsm = _log_softmax(mem.view(t["logits"], (n, c), F32))
    store(mem.view(t["dst"], n, F32), -lsm[np.arange(n), lab])


@reference("cumsum")
def cumsum(t: dict, mem: Memory) -> None:
    """Cumulative sum along the last axis of ``[rows, cols]`` (f32);
    ``exclusive`` shifts right by one (first column 0)."""
    r, c = t["rows"], t["cols"]
    x = mem.view(t["src"], (r, c), F32).astype(np.float64)
    cs = np.cumsum(x, axis=1)
    if t.get("exclusive"):
        cs = np.concatenate([np.zeros((r, 1)), cs[:, :-1]], axis=1)[:, :c]
    store(mem.view(t["dst"], (r, c), F32), cs)


_REDUCE = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod}


@reference("reduce")
def reduce(t: dict, mem: Memory) -> None:
    """``[outer, reduced, inner]`` → ``[outer, inner]`` with ``op`` sum / mean
    / max / min / prod (max / min propagate NaN)."""
    dt, o, r, i = fdt(t), t["outer"], t["reduced"], t["inner"]
    fn = _REDUCE.get(t["op"])
    if fn is None:
        raise ValueError(f"[reduce] unknown op '{t['op']}'")
    x = mem.view(t["src"], (o, r, i), dt).astype(np.float64)
    store(mem.view(t["dst"], (o, i), dt), fn(x, axis=1))


def _order_desc(x: np.ndarray) -> np.ndarray:
    """Indices sorting each row descending, ties → lower index first
    (NaN sorts last, after ``-inf``)."""
    x = np.asarray(x, np.float64)
    nan = np.isnan(x)
    # lexsort is stable; its last key is the primary one
    return np.lexsort((np.where(nan, 0.0, -x), nan), axis=-1)


@reference("topk")
def topk(t: dict, mem: Memory) -> None:
    """int32 indices of the ``k`` largest of each row of ``src [outer,
    axis_dim]`` (f32), descending; ties → lower index first; NaN ranks below
    every number."""
    o, ad, k = t["outer"], t["axis_dim"], t["k"]
    if k > ad:
        raise ValueError(f"[topk] k={k} > axis {ad}")
    x = mem.view(t["src"], (o, ad), F32)
    mem.view(t["dst"], (o, k), I32)[...] = _order_desc(x)[:, :k]


@reference("argreduce")
def argreduce(t: dict, mem: Memory) -> None:
    """First index of the max (``is_max``) or min over the middle axis of
    ``src [outer, reduced, inner]`` (f32) → int32 ``[outer, inner]``; a NaN
    counts as the extremum (the first NaN wins, as numpy)."""
    o, r, i = t["outer"], t["reduced"], t["inner"]
    x = mem.view(t["src"], (o, r, i), F32)
    fn = np.argmax if t.get("is_max", True) else np.argmin
    mem.view(t["dst"], (o, i), I32)[...] = fn(x, axis=1)


def sample_row(logits: np.ndarray, top_k: int, top_p: float, temperature: float, u: float) -> int:
    """Draw one token id from one row of logits with uniform ``u``.

    temperature 0 → greedy (first max). Else: ``p = softmax(logits/T)``
    (float64), tokens ordered by descending ``p`` (ties → lower id), the first
    ``top_k`` kept (0 = all), renormalised; when ``0 < top_p < 1`` the
    shortest prefix whose mass ≥ ``top_p`` is kept and renormalised; the
    result is the first kept token whose running sum (sequential, float64)
    exceeds ``u`` (the last kept one if none does)."""
    x = np.asarray(logits, np.float64)
    if temperature == 0.0:
        return int(np.argmax(x))
    z = x / np.float64(np.float32(temperature))
    order = _order_desc(z)
    e = np.exp(z[order] - z[order[0]])
    if top_k > 0:
        e = e[:top_k]
    p = e / np.cumsum(e)[-1]
    if 0.0 < top_p < 1.0:
        cum = np.cumsum(p)
        keep = int(np.searchsorted(cum >= np.float64(np.float32(top_p)), True)) + 1
        p = p[: min(keep, p.size)]
        p = p / np.cumsum(p)[-1]
    cum = np.cumsum(p)
    hit = np.nonzero(cum > u)[0]
    j = int(hit[0]) if hit.size else p.size - 1
    return int(order[j])


@reference("sample")
def sample(t: dict, mem: Memory) -> None:
    """Sample one int32 token per row of ``logits [batch, vocab]`` (f32); row
    ``r`` uses ``u = uniform_at(seed, r)`` of rlx's counter RNG
    (:mod:`rlx.reference.rng`). See :func:`sample_row`."""
    b, v = t["batch"], t["vocab"]
    logits = mem.view(t["logits"], (b, v), F32)
    dst = mem.view(t["dst"], b, I32)
    temp = float(np.float32(t.get("temperature", 0.0)))
    for r in range(b):
        u = float(uniform_at(int(t.get("seed", 0)), r))
        dst[r] = sample_row(logits[r], int(t.get("top_k", 0)), float(t.get("top_p", 1.0)), temp, u)
