"""Philox 4x32-10 random fills (``rng_uniform`` / ``rng_normal``).

* Known answers: Random123's published kat_vectors for Philox4x32-10 (zero,
  all-ones and pi-digit counters / keys) against our numpy Philox
  (:mod:`rlx.reference.rng`), and through the graph API: a fill seeded
  ``s`` is the stream with key ``s``, so its first uniforms are the top 24
  bits of the published words.
* Devices: host (native kernel), reference (numpy) and metal-sim
  (rng.metal through msl-sim) give bit-identical uniforms and normals for
  several seeds, offsets and lengths, in f32, f16 and bf16 (Box–Muller uses
  an explicit float32 log / cos, ``rlx_ir::rng::{log_f32, cos_turn24}``,
  evaluated in the same operation order everywhere; no library log / cos).
  The numpy log / cos give the same bits as the Rust ones (checksums over
  every 13th of their 2^24 inputs, the constants of the Rust test
  ``log_and_cos_checksums``) and are accurate against float64 numpy on all
  2^24 inputs (log ≤ 0.85 ulp, cos ≤ 1.7·2^-24 absolute).
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
from rlx.reference.rng import (
    cos_turn24,
    log_f32,
    philox4x32_10,
    philox_normal,
    philox_uniform,
)

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


def _fill(
    kind: str,
    n: int,
    device: str,
    seed: int | None = 7,
    offset: int = 0,
    dtype: str = "f32",
    **kw: float,
) -> np.ndarray:
    g = rlx.Graph("rng")
    if kind == "uniform":
        g.outputs(g.rng_uniform([n], seed=seed, dtype=dtype, **kw))
    else:
        g.outputs(g.rng_normal([n], seed=seed, dtype=dtype, **kw))
    exe = rlx.compile(g, device=device, rng_offset=offset)
    if device == "metal-sim":
        # the fill is a dispatch; a cast to bf16 has no kernel (cast_host)
        host = {"cast_host": 1} if dtype == "bf16" else {}
        assert exe.stats.get("metal_host_by_thunk", {}) == host, exe.report()
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


DEVICES = ("host", "reference", "metal-sim")


@pytest.mark.parametrize(
    "seed,offset,n",
    [(7, 0, 1), (7, 0, 4099), (0, 3, 6), (0x299F31D0A4093822, 1 << 40, 1001), (2**64 - 1, 9, 515)],
)
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_devices_agree_bit_for_bit(seed: int, offset: int, n: int, dtype: str) -> None:
    for kind, kw in (("uniform", dict(low=-1.5, high=2.5)), ("normal", dict(mean=0.5, scale=2.0))):
        got = {d: _fill(kind, n, d, seed=seed, offset=offset, dtype=dtype, **kw) for d in DEVICES}
        bits = {d: v.view(f"u{v.dtype.itemsize}") for d, v in got.items()}
        for d in ("reference", "metal-sim"):
            assert got[d].dtype == got["host"].dtype and got[d].shape == (n,)
            np.testing.assert_array_equal(bits[d], bits["host"], err_msg=f"{kind} {d}")
    # the reference's f32 normals are the numpy Box–Muller itself
    z = _fill("normal", n, "reference", seed=seed, offset=offset, mean=0.5, scale=2.0)
    want = np.float32(0.5) + np.float32(2.0) * philox_normal(seed, offset, n)
    np.testing.assert_array_equal(z, want)


def _checksum(v: np.ndarray) -> int:
    """``Σ bits_i · (2i + 1) mod 2^64`` (the Rust test's checksum)."""
    b = v.view(np.uint32).astype(np.uint64)
    i = np.arange(b.size, dtype=np.uint64)
    return int((b * (np.uint64(2) * i + np.uint64(1))).sum(dtype=np.uint64))


def test_log_and_cos_are_the_rust_bits() -> None:
    # rlx_ir::rng tests::log_and_cos_checksums: k = 1, 14, 27, ... ≤ 2^24
    k = np.arange(1, 2**24 + 1, 13, dtype=np.int64)
    x = (k.astype(np.float64) / 2**24).astype(np.float32)
    assert _checksum(log_f32(x)) == 0xA6BB_A4FB_2FD9_DB4E
    assert _checksum(cos_turn24(k)) == 0x577C_E323_71E6_1A01


def test_log_and_cos_accuracy_on_every_input() -> None:
    k = np.arange(1, 2**24 + 1, dtype=np.int64)
    x = (k.astype(np.float64) / 2**24).astype(np.float32)
    want = np.log(x.astype(np.float64))
    got = log_f32(x).astype(np.float64)
    nz = want != 0
    ulp = np.spacing(np.abs(want[nz]).astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(got[nz] - want[nz]) / ulp) <= 0.85
    assert np.all(got[~nz] == 0)
    kc = k % 2**24
    err = np.abs(cos_turn24(kc).astype(np.float64) - np.cos(2 * np.pi * kc / 2**24))
    assert err.max() <= 1.7 * 2.0**-24
    np.testing.assert_array_equal(cos_turn24(np.array([0, 2**22, 2**23, 3 * 2**22])), [1, 0, -1, 0])


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
