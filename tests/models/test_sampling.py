"""Sampling: exact distributions for temperature / top-k / top-p, greedy,
seeded reproducibility and empirical frequencies."""

from __future__ import annotations

import numpy as np
import pytest
import rlx
from rlx.sampling import SamplingParams, distribution, sample

LOGITS = np.log(np.array([0.1, 0.4, 0.2, 0.3]))


def test_greedy_is_argmax_lowest_id_on_ties() -> None:
    assert sample(np.array([1.0, 3.0, 3.0, 0.0]), SamplingParams()) == 1
    d = distribution(np.array([1.0, 3.0, 3.0]), SamplingParams())
    assert d.tolist() == [0.0, 1.0, 0.0]


def test_temperature_one_is_softmax() -> None:
    d = distribution(LOGITS, SamplingParams(temperature=1.0))
    np.testing.assert_allclose(d, [0.1, 0.4, 0.2, 0.3], rtol=1e-12)


def test_temperature_sharpens() -> None:
    d = distribution(LOGITS, SamplingParams(temperature=0.5))
    p = np.array([0.1, 0.4, 0.2, 0.3]) ** 2
    np.testing.assert_allclose(d, p / p.sum(), rtol=1e-12)


def test_top_k() -> None:
    d = distribution(LOGITS, SamplingParams(temperature=1.0, top_k=2))
    np.testing.assert_allclose(d, [0.0, 0.4 / 0.7, 0.0, 0.3 / 0.7], rtol=1e-12)


@pytest.mark.parametrize(
    ("top_p", "kept"),
    [(0.35, [1]), (0.45, [1, 3]), (0.65, [1, 3]), (0.75, [1, 3, 2]), (1.0, [0, 1, 2, 3])],
)
def test_top_p_smallest_prefix_reaching_mass(top_p: float, kept: list[int]) -> None:
    d = distribution(LOGITS, SamplingParams(temperature=1.0, top_p=top_p))
    base = np.array([0.1, 0.4, 0.2, 0.3])
    want = np.zeros(4)
    want[kept] = base[kept] / base[kept].sum()
    np.testing.assert_allclose(d, want, rtol=1e-9, atol=1e-12)


def test_top_k_then_top_p() -> None:
    d = distribution(LOGITS, SamplingParams(temperature=1.0, top_k=3, top_p=0.6))
    # top-3 renormalised: 0.4/0.9, 0.3/0.9, 0.2/0.9 → 0.444 < 0.6 ≤ 0.778: two kept
    np.testing.assert_allclose(d, [0.0, 4 / 7, 0.0, 3 / 7], rtol=1e-9)


def test_seeded_draws_reproduce_and_follow_the_distribution() -> None:
    p = SamplingParams(temperature=1.0)
    a = [sample(LOGITS, p, np.random.default_rng(3)) for _ in range(5)]
    b = [sample(LOGITS, p, np.random.default_rng(3)) for _ in range(5)]
    assert a == b
    rng = np.random.default_rng(0)
    n = 20000
    counts = np.bincount([sample(LOGITS, p, rng) for _ in range(n)], minlength=4) / n
    # 4.5 sigma of a binomial at n = 20000 is below 0.016
    np.testing.assert_allclose(counts, [0.1, 0.4, 0.2, 0.3], atol=0.016)


@pytest.mark.parametrize(
    "params",
    [SamplingParams(temperature=-1), SamplingParams(top_k=-1), SamplingParams(top_p=0.0)],
)
def test_bad_params(params: SamplingParams) -> None:
    with pytest.raises(rlx.RlxError, match=r"\[sampling\]"):
        distribution(LOGITS, params)
