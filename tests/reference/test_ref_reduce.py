"""Reduction / sampling references vs per-row Python loops."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _mem import Arena, npdt, rng, tol
from rlx.reference.rng import uniform_at


def _softmax(row: list[float]) -> list[float]:
    m = max(row)
    e = [math.exp(v - m) for v in row]
    s = math.fsum(e)
    return [v / s for v in e]


@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_softmax_in_place(dt: str) -> None:
    rows, cols = 5, 13
    x = (rng(60).normal(size=(rows, cols)) * 4).astype(npdt(dt))
    x[2, 3] = 60.0  # large logit must not overflow
    a = Arena()
    d = a.put(x)
    a.run({"name": "softmax", "data": d, "rows": rows, "cols": cols, "dt": dt})
    want = [_softmax([float(v) for v in r]) for r in x]
    np.testing.assert_allclose(a.get(d).astype(float), want, **tol(dt))


def test_softmax_cross_entropy_dense_and_labels() -> None:
    n, c = 5, 7
    r = rng(61)
    logits = (r.normal(size=(n, c)) * 3).astype(np.float32)
    targets = r.uniform(size=(n, c)).astype(np.float32)
    targets /= targets.sum(axis=1, keepdims=True)
    labels = np.array([0, 6, 3, 3, 1], np.int32)
    a = Arena()
    lo, to, la = a.put(logits), a.put(targets), a.put(labels)
    d1, d2 = a.out(n), a.out(n)
    a.run(
        {
            "name": "softmax_cross_entropy_dense",
            "logits": lo,
            "targets": to,
            "dst": d1,
            "n": n,
            "c": c,
        }
    )
    a.run(
        {
            "name": "softmax_cross_entropy_with_logits",
            "logits": lo,
            "labels": la,
            "dst": d2,
            "n": n,
            "c": c,
        }
    )
    want1, want2 = [], []
    for i in range(n):
        row = [float(v) for v in logits[i]]
        lse = max(row) + math.log(math.fsum(math.exp(v - max(row)) for v in row))
        want1.append(math.fsum(-float(tg) * (v - lse) for tg, v in zip(targets[i], row)))
        want2.append(lse - row[labels[i]])
    np.testing.assert_allclose(a.get(d1), want1, **tol("f32"))
    np.testing.assert_allclose(a.get(d2), want2, **tol("f32"))


@pytest.mark.parametrize("exclusive", [False, True])
def test_cumsum(exclusive: bool) -> None:
    rows, cols = 3, 7
    x = rng(62).normal(size=(rows, cols)).astype(np.float32)
    a = Arena()
    so, do = a.put(x), a.out((rows, cols))
    a.run(
        {"name": "cumsum", "src": so, "dst": do, "rows": rows, "cols": cols, "exclusive": exclusive}
    )
    want = np.zeros((rows, cols))
    for i in range(rows):
        acc = 0.0
        for j in range(cols):
            if exclusive:
                want[i, j] = acc
            acc += float(x[i, j])
            if not exclusive:
                want[i, j] = acc
    np.testing.assert_allclose(a.get(do), want, **tol("f32"))


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("shape", [(3, 5, 7), (1, 13, 1), (5, 1, 3)])
def test_reduce(shape: tuple[int, int, int], op: str, dt: str) -> None:
    o, rr, i = shape
    x = rng(63).uniform(0.5, 1.5, size=shape).astype(npdt(dt))
    a = Arena()
    so, do = a.put(x), a.out((o, i), npdt(dt))
    a.run(
        {
            "name": "reduce",
            "src": so,
            "dst": do,
            "outer": o,
            "reduced": rr,
            "inner": i,
            "op": op,
            "dt": dt,
        }
    )
    fn = {
        "sum": math.fsum,
        "mean": lambda v: math.fsum(v) / len(v),
        "max": max,
        "min": min,
        "prod": math.prod,
    }[op]
    want = [[fn([float(x[p, q, s]) for q in range(rr)]) for s in range(i)] for p in range(o)]
    np.testing.assert_allclose(a.get(do).astype(float), want, **tol(dt))


def test_topk_descending_ties_lower_index_first() -> None:
    x = np.array([[1, 5, 3, 5, 2, 5, 0], [0, -1, -1, 7, 7, 2, 2]], np.float32)
    a = Arena()
    so, do = a.put(x), a.out((2, 4), np.int32)
    a.run({"name": "topk", "src": so, "dst": do, "outer": 2, "axis_dim": 7, "k": 4})
    want = []
    for row in x:
        order = sorted(range(7), key=lambda j, row=row: (-float(row[j]), j))
        want.append(order[:4])
    np.testing.assert_array_equal(a.get(do), want)
    np.testing.assert_array_equal(a.get(do), [[1, 3, 5, 2], [3, 4, 5, 6]])


@pytest.mark.parametrize("is_max", [True, False])
def test_argreduce_first_index(is_max: bool) -> None:
    o, rr, i = 2, 5, 3
    x = rng(64).integers(0, 3, size=(o, rr, i)).astype(np.float32)  # many ties
    a = Arena()
    so, do = a.put(x), a.out((o, i), np.int32)
    a.run(
        {
            "name": "argreduce",
            "src": so,
            "dst": do,
            "outer": o,
            "reduced": rr,
            "inner": i,
            "is_max": is_max,
        }
    )
    want = np.zeros((o, i), np.int32)
    for p in range(o):
        for s in range(i):
            col = [float(x[p, q, s]) for q in range(rr)]
            best = max(col) if is_max else min(col)
            want[p, s] = col.index(best)
    np.testing.assert_array_equal(a.get(do), want)


def _sample_loop(row: list[float], top_k: int, top_p: float, temp: float, u: float) -> int:
    if temp == 0:
        return row.index(max(row))
    z = [v / temp for v in row]
    p = _softmax(z)
    order = sorted(range(len(row)), key=lambda j: (-p[j], j))
    if top_k:
        order = order[:top_k]
    mass = math.fsum(p[j] for j in order)
    q = {j: p[j] / mass for j in order}
    if 0 < top_p < 1:
        acc, kept = 0.0, []
        for j in order:
            kept.append(j)
            acc += q[j]
            if acc >= top_p:
                break
        order = kept
        mass = math.fsum(q[j] for j in order)
        q = {j: q[j] / mass for j in order}
    acc = 0.0
    for j in order:
        acc += q[j]
        if acc > u:
            return j
    return order[-1]


def _run_sample(logits: np.ndarray, **kw: float) -> np.ndarray:
    b, v = logits.shape
    a = Arena()
    lo, do = a.put(logits), a.out(b, np.int32)
    a.run({"name": "sample", "logits": lo, "dst": do, "batch": b, "vocab": v, **kw})
    return a.get(do)


def test_sample_greedy_is_first_argmax() -> None:
    x = np.array([[0, 3, 3, 1], [5, -1, 5, 5]], np.float32)
    got = _run_sample(x, top_k=0, top_p=1.0, temperature=0.0, seed=9)
    np.testing.assert_array_equal(got, [1, 0])


@pytest.mark.parametrize(
    "top_k,top_p,temp", [(0, 1.0, 1.0), (3, 1.0, 0.7), (0, 0.6, 1.3), (4, 0.8, 2.0), (1, 1.0, 1.0)]
)
def test_sample_matches_loop_with_counter_rng(top_k: int, top_p: float, temp: float) -> None:
    b, v, seed = 64, 7, 1234
    logits = rng(65).normal(size=(b, v)).astype(np.float32)
    got = _run_sample(logits, top_k=top_k, top_p=top_p, temperature=temp, seed=seed)
    want = [
        _sample_loop(
            [float(t) for t in logits[r]],
            top_k,
            float(np.float32(top_p)),
            float(np.float32(temp)),
            uniform_at(seed, r),
        )
        for r in range(b)
    ]
    np.testing.assert_array_equal(got, want)
    if top_k == 1:
        np.testing.assert_array_equal(got, logits.argmax(axis=1))


def test_sample_frequencies_follow_probabilities() -> None:
    b, v = 4000, 5
    row = np.array([0.0, 1.0, -1.0, 0.5, 2.0], np.float32)
    got = _run_sample(np.tile(row, (b, 1)), top_k=0, top_p=1.0, temperature=1.0, seed=77)
    p = np.exp(row - row.max())
    p /= p.sum()
    freq = np.bincount(got, minlength=v) / b
    np.testing.assert_allclose(freq, p, atol=0.03)


def test_sample_top_k_excludes_tail() -> None:
    b = 500
    row = np.array([3.0, 2.9, 2.8, -5.0, 2.7], np.float32)
    got = _run_sample(np.tile(row, (b, 1)), top_k=2, top_p=1.0, temperature=1.0, seed=5)
    assert set(got.tolist()) == {0, 1}


def test_topk_ties_on_a_long_row() -> None:
    outer, ad, k = 3, 97, 20
    x = rng(66).integers(0, 4, size=(outer, ad)).astype(np.float32)  # heavy ties
    a = Arena()
    so, do = a.put(x), a.out((outer, k), np.int32)
    a.run({"name": "topk", "src": so, "dst": do, "outer": outer, "axis_dim": ad, "k": k})
    want = [sorted(range(ad), key=lambda j, row=row: (-float(row[j]), j))[:k] for row in x]
    np.testing.assert_array_equal(a.get(do), want)
