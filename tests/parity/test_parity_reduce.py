"""Host kernels vs numpy reference: reductions.

Covers reduce (sum / mean / max / min / prod over contiguous and
non-contiguous axes, keep_dims), softmax (last and non-last axis), cumsum
(inclusive / exclusive, any axis), top-k, arg max / min, softmax
cross-entropy (int labels and dense targets) and sampling (greedy,
temperature, top-k, top-p, seeded).

Tolerances: f32 ``atol = rtol = 1e-5`` (both sides accumulate sums in f64
and round once; softmax / cross-entropy exponentiate in f32 on the host);
f16 ``1e-2``. Indices (top-k, arg max, sampled ids) compare exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
import rlx
from _harness import check, rand

KINDS = ("sum", "mean", "max", "min", "prod")
NP_REDUCE = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod}


def _reduce_input(kind: str, shape: list[int], dt: str) -> np.ndarray:
    if kind == "prod":
        return rand(shape, dt, lo=0.7, hi=1.3, seed=7)
    return rand(shape, dt, seed=7)


AXES = [None, [0], [1], [-1], [1, 2], [0, 2], [0, 3], [0, 1, 3], [2, 0]]


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("kind", KINDS)
def test_reduce(kind: str, dt: str) -> None:
    shape = [3, 5, 7, 2]
    g = rlx.Graph()
    x = g.input("x", shape, dt)
    outs = []
    for i, ax in enumerate(AXES):
        for keep in (False, True):
            outs.append(g.reduce(x, kind, ax, keep_dims=keep, name=f"r{i}_{int(keep)}"))
    g.outputs(*outs)
    xv = _reduce_input(kind, shape, dt)
    res = check(g, {"x": xv}, expect=["reduce"])
    tol = 1e-5 if dt == "f32" else 1e-2
    for i, ax in enumerate(AXES):
        for keep in (False, True):
            axis = None if ax is None else tuple(ax)
            want = NP_REDUCE[kind](xv.astype(np.float64), axis=axis, keepdims=keep)
            got = res.host[f"r{i}_{int(keep)}"]
            assert got.shape == np.shape(want), (ax, keep, got.shape)
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_reduce_nan_and_large() -> None:
    """NaN propagates through max / min / sum; a long row (4099) keeps f64 accuracy."""
    xv = rand([3, 4099], seed=3)
    xv[1, 17] = np.nan
    g = rlx.Graph()
    x = g.input("x", [3, 4099])
    g.outputs(*[g.reduce(x, k, -1, name=k) for k in ("sum", "mean", "max", "min")])
    res = check(g, {"x": xv})
    assert np.isnan(res.host["max"][1]) and np.isnan(res.host["min"][1])


# ----------------------------------------------------------------- softmax


@pytest.mark.parametrize("axis", [-1, 0, 1, 2])
def test_softmax_f32(axis: int) -> None:
    g = rlx.Graph()
    x = g.input("x", [3, 13, 7])
    y = g.softmax(x, axis)
    g.outputs(y)
    xv = rand([3, 13, 7], lo=-8, hi=8, seed=1)
    res = check(g, {"x": xv}, expect=["softmax"])
    e = np.exp(xv - xv.max(axis=axis, keepdims=True))
    np.testing.assert_allclose(
        res.host[y.name], e / e.sum(axis=axis, keepdims=True), rtol=1e-5, atol=1e-6
    )


def test_softmax_f16_last_axis() -> None:
    g = rlx.Graph()
    x = g.input("x", [7, 33], "f16")
    g.outputs(g.softmax(x, -1))
    check(g, {"x": rand([7, 33], "f16", lo=-6, hi=6)}, expect=["softmax"])


def test_softmax_inf_row() -> None:
    xv = rand([3, 7], seed=2)
    xv[0, :] = -np.inf  # all -inf: NaN on both sides
    xv[1, 3] = -np.inf  # a masked entry: probability 0
    g = rlx.Graph()
    x = g.input("x", [3, 7])
    g.outputs(g.softmax(x))
    check(g, {"x": xv})


# ------------------------------------------------------------------ cumsum


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_cumsum(axis: int, exclusive: bool) -> None:
    g = rlx.Graph()
    x = g.input("x", [3, 13, 5])
    y = g.cumsum(x, axis, exclusive=exclusive)
    g.outputs(y)
    xv = rand([3, 13, 5], seed=4)
    res = check(g, {"x": xv}, expect=["cumsum"])
    want = np.cumsum(xv.astype(np.float64), axis=axis)
    if exclusive:
        want = want - xv
    np.testing.assert_allclose(res.host[y.name], want, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------- top-k / arg max/min


@pytest.mark.parametrize("k", [1, 3, 13])
def test_topk(k: int) -> None:
    g = rlx.Graph()
    x = g.input("x", [5, 13])
    y = g.topk(x, k)
    g.outputs(y)
    xv = np.round(rand([5, 13], seed=5), 0)  # many ties: lower index first
    res = check(g, {"x": xv}, expect=["topk"])
    want = np.argsort(-xv.astype(np.float64), axis=-1, kind="stable")[:, :k]
    np.testing.assert_array_equal(res.host[y.name], want)


@pytest.mark.parametrize("axis", [0, 1])
def test_topk_non_last_axis(axis: int) -> None:
    g = rlx.Graph()
    x = g.input("x", [7, 5, 3])
    y = g.topk(x, 2, axis)
    g.outputs(y)
    xv = np.round(rand([7, 5, 3], seed=15))
    res = check(g, {"x": xv}, expect=["topk", "transpose"])
    want = np.argsort(-xv.astype(np.float64), axis=axis, kind="stable")
    want = np.take(want, [0, 1], axis=axis)
    np.testing.assert_array_equal(res.host[y.name], want)


def test_topk_nan() -> None:
    """NaN ranks below every number (the reference's documented order)."""
    xv = rand([2, 7], seed=6)
    xv[0, 2] = np.nan
    xv[1, :] = np.nan
    xv[1, 4] = 0.0
    g = rlx.Graph()
    x = g.input("x", [2, 7])
    y = g.topk(x, 3)
    g.outputs(y)
    res = check(g, {"x": xv})
    assert 2 not in res.host[y.name][0]
    assert res.host[y.name][1, 0] == 4


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_argmax_argmin(axis: int, keep: bool, dt: str) -> None:
    g = rlx.Graph()
    x = g.input("x", [3, 13, 7], dt)
    a = g.argmax(x, axis, keep_dims=keep, name="amax")
    b = g.argmin(x, axis, keep_dims=keep, name="amin")
    g.outputs(a, b)
    xv = np.round(rand([3, 13, 7], dt, seed=8))  # ties: first index wins
    xv[0, 0, 0] = np.nan
    res = check(g, {"x": xv}, expect=["argreduce"])
    np.testing.assert_array_equal(res.host["amax"], np.argmax(xv, axis=axis, keepdims=keep))
    np.testing.assert_array_equal(res.host["amin"], np.argmin(xv, axis=axis, keepdims=keep))


# ------------------------------------------------------ softmax cross-entropy


@pytest.mark.parametrize("ldt", ["i32", "i64"])
def test_cross_entropy_labels(ldt: str) -> None:
    g = rlx.Graph()
    x = g.input("x", [7, 33])
    lab = g.input("lab", [7], ldt)
    y = g.softmax_cross_entropy(x, lab)
    g.outputs(y)
    xv = rand([7, 33], lo=-5, hi=5, seed=9)
    lv = rand([7], ldt, lo=0, hi=33, seed=10)
    res = check(g, {"x": xv, "lab": lv}, expect=["softmax_cross_entropy_with_logits"])
    x64 = xv.astype(np.float64)
    lse = np.log(np.exp(x64).sum(-1))
    np.testing.assert_allclose(res.host[y.name], lse - x64[np.arange(7), lv], rtol=1e-5)


def test_cross_entropy_dense() -> None:
    g = rlx.Graph()
    x = g.input("x", [7, 13])
    t = g.input("t", [7, 13])
    y = g.softmax_cross_entropy(x, t)
    g.outputs(y)
    xv = rand([7, 13], lo=-5, hi=5, seed=11)
    tv = rand([7, 13], lo=0, hi=1, seed=12)
    tv /= tv.sum(-1, keepdims=True)
    res = check(g, {"x": xv, "t": tv}, expect=["softmax_cross_entropy_dense"])
    x64 = xv.astype(np.float64)
    lsm = x64 - np.log(np.exp(x64).sum(-1, keepdims=True))
    np.testing.assert_allclose(res.host[y.name], -(tv * lsm).sum(-1), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ sample


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"),
    [
        (0.0, 0, 1.0),
        (1.0, 0, 1.0),
        (0.7, 0, 1.0),
        (1.3, 5, 1.0),
        (1.0, 0, 0.6),
        (1.0, 8, 0.5),
        (0.8, 3, 0.9),
        (1.0, 1, 1.0),
        (2.0, 13, 0.3),
    ],  # fmt: skip
)
def test_sample(temperature: float, top_k: int, top_p: float) -> None:
    rows, vocab = 64, 33
    logits = rand([rows, vocab], lo=-3, hi=3, seed=13)
    outs = []
    g = rlx.Graph()
    x = g.input("x", [rows, vocab])
    for seed in (0, 1, 12345):
        outs.append(g.sample(x, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                             name=f"s{seed}"))  # fmt: skip
    g.outputs(*outs)
    res = check(g, {"x": logits}, expect=["sample"])
    order = np.argsort(-logits.astype(np.float64), axis=-1, kind="stable")
    for seed in (0, 1, 12345):
        got = res.host[f"s{seed}"]
        if temperature == 0.0:
            np.testing.assert_array_equal(got, np.argmax(logits, -1))
        elif top_k:
            for r in range(rows):
                assert got[r] in order[r, :top_k]
    if temperature != 0.0 and top_k != 1:
        assert not np.array_equal(res.host["s0"], res.host["s1"]), "seeds must matter"


def test_sample_topk_then_topp_order() -> None:
    """top-p mass is measured after renormalising the top-k survivors
    (Hugging Face's order). Probabilities ~[.38, .28, .19, .09] + a tail:
    top_k=2 renormalises the first two to [.57, .43], so top_p=0.55 keeps
    only token 0; measuring the mass on the full softmax (.38 < .55) would
    keep tokens 0 and 1."""
    tail = np.full(29, np.log(0.002), np.float32)
    row = np.concatenate([np.log(np.array([0.4, 0.3, 0.2, 0.1], np.float32)), tail])
    logits = np.tile(row, (256, 1)).astype(np.float32)
    g = rlx.Graph()
    x = g.input("x", list(logits.shape))
    y = g.sample(x, temperature=1.0, top_k=2, top_p=0.55, seed=7)
    g.outputs(y)
    res = check(g, {"x": logits})
    got = res.host[y.name]
    assert set(np.unique(got)) == {0}
