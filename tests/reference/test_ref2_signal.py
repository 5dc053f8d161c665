"""FFT (vs ``np.fft``), log-mel (vs the formula; backward vs finite differences)
and Welch peaks (vs a loop). f32 rtol/atol 1e-5 scaled by the magnitude (an FFT
sums n terms), f64 1e-12."""

from __future__ import annotations

import numpy as np
import pytest
from _mem2 import Arena, fd_grad
from rlx.reference import run_thunk


@pytest.mark.parametrize("n", [1, 7, 12, 16])
@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("norm_tag,norm", [(0, "backward"), (1, "ortho"), (2, "forward")])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_fft1d(n: int, inverse: bool, norm_tag: int, norm: str, dtype: str) -> None:
    rng = np.random.default_rng(n)
    outer = 3
    npdt = np.float64 if dtype == "f64" else np.float32
    z = rng.standard_normal((outer, n)) + 1j * rng.standard_normal((outer, n))
    src = np.concatenate([z.real, z.imag], 1).astype(npdt)
    zz = src[:, :n].astype(np.float64) + 1j * src[:, n:].astype(np.float64)
    want = (np.fft.ifft if inverse else np.fft.fft)(zz, axis=1, norm=norm)
    a = Arena()
    t = dict(
        name="fft1d",
        src=a.put(src),
        dst=a.out((outer, 2 * n), npdt),
        outer=outer,
        n_complex=n,
        inverse=inverse,
        norm_tag=norm_tag,
        dtype=dtype,
        real_input=False,
    )
    run_thunk(t, a.build())
    got = a.read(t["dst"], (outer, 2 * n), npdt)
    tol = 1e-12 if dtype == "f64" else 1e-5
    scale = np.abs(want).max()
    np.testing.assert_allclose(got[:, :n], want.real, rtol=tol, atol=tol * scale)
    np.testing.assert_allclose(got[:, n:], want.imag, rtol=tol, atol=tol * scale)


def test_fft1d_real_input() -> None:
    rng = np.random.default_rng(9)
    outer, n = 2, 10
    x = rng.standard_normal((outer, n)).astype(np.float32)
    a = Arena()
    t = dict(
        name="fft1d",
        src=a.put(x),
        dst=a.out((outer, 2 * n)),
        outer=outer,
        n_complex=n,
        inverse=False,
        norm_tag=0,
        dtype="f32",
        real_input=True,
    )
    run_thunk(t, a.build())
    want = np.fft.fft(x.astype(np.float64), axis=1)
    got = a.read(t["dst"], (outer, 2 * n))
    np.testing.assert_allclose(got[:, :n] + 1j * got[:, n:], want, rtol=1e-5, atol=1e-5)


def _logmel(spec: np.ndarray, f: np.ndarray, n_fft: int) -> np.ndarray:
    nb = f.shape[1]
    out = np.zeros((spec.shape[0], f.shape[0]))
    for o in range(spec.shape[0]):
        for m in range(f.shape[0]):
            acc = sum(f[m, k] * (spec[o, k] ** 2 + spec[o, n_fft + k] ** 2) for k in range(nb))
            out[o, m] = np.log(acc + 1e-10)
    return out


def test_log_mel_and_backward() -> None:
    rng = np.random.default_rng(2)
    outer, n_fft, n_bins, n_mels = 3, 8, 5, 4
    spec = rng.standard_normal((outer, 2 * n_fft)).astype(np.float32)
    f = rng.uniform(0, 1, (n_mels, n_bins)).astype(np.float32)
    dy = rng.standard_normal((outer, n_mels)).astype(np.float32)
    a = Arena()
    so, fo, dyo = a.put(spec), a.put(f), a.put(dy)
    t = dict(outer=outer, n_fft=n_fft, n_bins=n_bins, n_mels=n_mels, spec=so, filters=fo)
    lo, go = a.out((outer, n_mels)), a.out((outer, 2 * n_fft))
    mem = a.build()
    run_thunk(dict(name="log_mel", dst=lo, **t), mem)
    run_thunk(dict(name="log_mel_backward", dy=dyo, dst=go, **t), mem)
    f64, s64 = f.astype(np.float64), spec.astype(np.float64)
    np.testing.assert_allclose(
        a.read(lo, (outer, n_mels)), _logmel(s64, f64, n_fft), rtol=1e-5, atol=1e-5
    )
    fd = fd_grad(lambda s: float(np.sum(_logmel(s, f64, n_fft) * dy)), s64)
    np.testing.assert_allclose(a.read(go, (outer, 2 * n_fft)), fd, rtol=1e-5, atol=1e-5)
    assert np.all(a.read(go, (outer, 2 * n_fft))[:, n_bins:n_fft] == 0)


def test_welch_peaks() -> None:
    rng = np.random.default_rng(3)
    batch, n_fft, nseg, k = 2, 10, 3, 4
    spec = rng.standard_normal((batch * nseg, 2 * n_fft)).astype(np.float32)
    a = Arena()
    t = dict(
        name="welch_peaks",
        spec=a.put(spec),
        dst=a.out((batch, k)),
        welch_batch=batch,
        n_fft=n_fft,
        n_segments=nseg,
        k=k,
    )
    run_thunk(t, a.build())
    got = a.read(t["dst"], (batch, k))
    for bi in range(batch):
        p = []
        for f in range(n_fft // 2 + 1):
            acc = 0.0
            for sgi in range(nseg):
                row = spec[bi * nseg + sgi].astype(np.float64)
                acc += row[f] ** 2 + row[n_fft + f] ** 2
            p.append((acc / nseg, f))
        best = sorted(p, key=lambda pf: (-pf[0], pf[1]))[:k]
        assert list(got[bi]) == [float(f) for _, f in best]
