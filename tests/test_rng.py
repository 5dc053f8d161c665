"""Philox 4x32-10 random fills (``rng_uniform`` / ``rng_normal``).

* Known answers: Random123's published kat_vectors for Philox4x32-10 (zero,
  all-ones and pi-digit counters / keys) against our numpy Philox
  (:mod:`rlx.reference.rng`), and through the graph API: a fill seeded
  ``s`` is the stream with key ``s``, so its first uniforms are the top 24
  bits of the published words.
* Devices: host (native kernel), reference (numpy) and metal-sim
  (rng.metal through msl-sim) give bit-identical uniforms; normals are
  bit-identical between host and metal-sim; the reference's standard
  normals are within 4 float32 ulp of max(|z|, 1) of the host's (numpy's
  float32 log / cos round differently from libm near cos = 0).
  The host result does not depend on ``RLX_NUM_THREADS`` (a subprocess
  with one thread produces the same bytes).
* Statistics (fixed seeds, 200_000 draws): mean / variance / skewness /
  kurtosis within 5 standard errors, and Kolmogorov–Smirnov against
  scipy.stats (uniform on [low, high), normal(mean, scale)) with p > 1e-3.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import rlx
import scipy.stats as scipy_stats
from rlx.reference.rng import philox4x32_10, philox_normal, philox_uniform

KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


@pytest.mark.parametrize("ctr,key,want", KAT)
def test_numpy_philox_known_answers(ctr: tuple, key: tuple, want: tuple) -> None:
    assert tuple(int(w) for w in philox4x32_10(ctr, key)) == want


def _fill(kind: str, n: int, device: str, seed: int | None = 7, **kw: float) -> np.ndarray:
    g = rlx.Graph("rng")
    if kind == "uniform":
        g.outputs(g.rng_uniform([n], seed=seed, **kw))
    else:
        g.outputs(g.rng_normal([n], seed=seed, **kw))
    exe = rlx.compile(g, device=device)
    if device == "metal-sim":
        assert exe.stats["metal_host"] == 0, exe.report()
    return np.asarray(next(iter(exe.run().values())))


@pytest.mark.parametrize("device", ["host", "reference", "metal-sim"])
def test_graph_fill_is_the_published_stream(device: str) -> None:
    # seed 0 → key 0, offset 0: uniforms 0..3 are block 0 = the zero KAT vector
    u = _fill("uniform", 6, device, seed=0)
    want = [(w >> 8) / 2.0**24 for w in KAT[0][2]]
    np.testing.assert_array_equal(u[:4], np.float32(want))
    # the all-ones key: its block 0 is not a KAT input, but the numpy Philox is checked
    key = 0x299F31D0A4093822
    u = _fill("uniform", 9, device, seed=key)
    np.testing.assert_array_equal(u, philox_uniform(key, 0, 9))


@pytest.mark.parametrize("n", [1, 4099])
def test_devices_agree(n: int) -> None:
    kw_u = dict(low=-1.5, high=2.5)
    us = {d: _fill("uniform", n, d, **kw_u) for d in ("host", "reference", "metal-sim")}
    for d in ("reference", "metal-sim"):
        np.testing.assert_array_equal(us[d], us["host"], err_msg=d)
    kw_n = dict(mean=0.5, scale=2.0)
    zs = {d: _fill("normal", n, d, **kw_n) for d in ("host", "reference", "metal-sim")}
    np.testing.assert_array_equal(zs["metal-sim"], zs["host"])
    # |dz| <= 4 ulp of max(|z|, 1) (numpy's float32 log / cos vs libm), times
    # the scale 2, plus the rounding of the sum
    z = np.maximum(np.abs(zs["host"] - np.float32(0.5)) / 2, 1).astype(np.float32)
    tol = 2 * 4 * np.spacing(z) + np.spacing(np.abs(zs["host"]))
    assert np.all(np.abs(zs["reference"] - zs["host"]) <= tol)
    want = np.float32(0.5) + np.float32(2.0) * philox_normal(7, 0, n)
    np.testing.assert_array_equal(zs["reference"], want)


def test_unseeded_fills_differ_and_repeat() -> None:
    g = rlx.Graph("rng")
    g.outputs(g.rng_normal([64]), g.rng_normal([64]))
    a, b = rlx.compile(g).run().values()
    assert not np.array_equal(a, b)
    a2, _ = rlx.compile(g).run().values()
    np.testing.assert_array_equal(a, a2)


def test_host_is_independent_of_thread_count() -> None:
    code = (
        "import numpy as np, rlx, sys\n"
        "g = rlx.Graph('r'); g.outputs(g.rng_normal([70001], seed=11))\n"
        "sys.stdout.write(np.asarray(next(iter(rlx.compile(g).run().values()))).tobytes().hex())\n"
    )
    outs = []
    for threads in ("1", "2"):
        env = dict(os.environ, RLX_NUM_THREADS=threads)
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout)
    assert outs[0] == outs[1] and len(outs[0]) == 70001 * 8


def _moments_ok(x: np.ndarray, mean: float, var: float, skew: float, kurt: float) -> None:
    n = x.size
    x = x.astype(np.float64)
    m, v = x.mean(), x.var()
    assert abs(m - mean) < 5 * np.sqrt(var / n), m
    # standard errors of the sample variance / skewness / excess kurtosis
    assert abs(v - var) < 5 * var * np.sqrt((kurt + 2) / n), v
    s = scipy_stats.skew(x)
    k = scipy_stats.kurtosis(x)
    assert abs(s - skew) < 5 * np.sqrt(6 / n), s
    assert abs(k - kurt) < 5 * np.sqrt(24 / n) + 0.05, k


def test_statistics_uniform() -> None:
    lo, hi = -1.0, 3.0
    u = _fill("uniform", 200_000, "host", seed=2024, low=lo, high=hi)
    assert u.min() >= lo and u.max() < hi
    _moments_ok(u, (lo + hi) / 2, (hi - lo) ** 2 / 12, 0.0, -1.2)
    p = scipy_stats.kstest(u, scipy_stats.uniform(loc=lo, scale=hi - lo).cdf).pvalue
    assert p > 1e-3, p


def test_statistics_normal() -> None:
    z = _fill("normal", 200_000, "host", seed=2025, mean=1.0, scale=0.5)
    _moments_ok(z, 1.0, 0.25, 0.0, 0.0)
    p = scipy_stats.kstest(z, scipy_stats.norm(loc=1.0, scale=0.5).cdf).pvalue
    assert p > 1e-3, p
    # a different seed is a different stream, equally normal
    z2 = _fill("normal", 200_000, "host", seed=2026, mean=1.0, scale=0.5)
    assert not np.array_equal(z, z2)
    assert scipy_stats.kstest(z2, scipy_stats.norm(loc=1.0, scale=0.5).cdf).pvalue > 1e-3


def test_compile_rng_options_and_dtype() -> None:
    """``rng_offset`` is the Philox counter's upper words; ``rng_seed`` keys the
    unseeded fills only; ``dtype`` casts the f32 draw."""
    g = rlx.Graph("rng")
    g.outputs(
        g.rng_uniform([8], seed=5), g.rng_uniform([8]), g.rng_normal([8], seed=5, dtype="f16")
    )
    runs = {
        (s, o): list(rlx.compile(g, rng_seed=s, rng_offset=o).run().values())
        for s, o in ((0, 0), (1, 0), (0, 3))
    }
    seeded, unseeded, half = runs[(0, 0)]
    np.testing.assert_array_equal(seeded, philox_uniform(5, 0, 8))
    np.testing.assert_array_equal(runs[(0, 3)][0], philox_uniform(5, 3, 8))
    np.testing.assert_array_equal(runs[(1, 0)][0], seeded)  # a seeded fill ignores rng_seed
    assert not np.array_equal(runs[(1, 0)][1], unseeded)
    assert half.dtype == np.float16
    ref = list(rlx.compile(g, device="reference", rng_offset=3).run().values())
    np.testing.assert_array_equal(ref[0], runs[(0, 3)][0])
