"""device="metal-sim" for the signal ops: FFT rows through signal.metal's
Stockham kernel (power-of-two lengths) and direct DFT kernel (others), c64
rows, the fused log-mel kernel, Welch peak picking, and Whisper's whole feature graph — each
plan without a host command — against numpy.fft, the host device and
transformers' Whisper extractor (fixture).

Tolerances: FFT ``3e-6 · max|X|`` (f32 twiddles and sums); fused log-mel
1e-4 absolute vs the host (natural log of f32 sums); Whisper features
``WHISPER_TOL`` absolute vs transformers (the direct 400-point DFT sums in
f32, so bins near the clamp floor, 8 decades below the loudest, carry a
larger relative error than the host's rustfft)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rlx

FIXTURE = Path(__file__).parent / "fixtures/signal/whisper_features.npz"
WHISPER_TOL = 3e-5  # measured 1.7e-5 (waveform 0), 4.2e-7 (waveform 1)


def _sim(g: rlx.Graph, **inputs: np.ndarray) -> list[np.ndarray]:
    exe = rlx.compile(g, device="metal-sim")
    assert exe.stats["metal_host"] == 0, exe.report()
    assert exe.stats["metal_dispatches"] >= 1
    return list(exe.run(**inputs).values())


@pytest.mark.parametrize("n", [1, 2, 7, 64, 100, 257, 1024])
def test_fft_block_rows(n: int) -> None:
    rng = np.random.default_rng(n)
    z = rng.standard_normal((3, n)) + 1j * rng.standard_normal((3, n))
    block = np.concatenate([z.real, z.imag], 1).astype(np.float32)
    g = rlx.Graph("fft")
    x = g.input("x", block.shape, "f32")
    g.outputs(g.fft(x), g.ifft(x, norm="ortho"))
    fwd, inv = _sim(g, x=block)
    zz = block[:, :n].astype(np.float64) + 1j * block[:, n:]
    for got, want in ((fwd, np.fft.fft(zz)), (inv, np.fft.ifft(zz, norm="ortho"))):
        wb = np.concatenate([want.real, want.imag], 1)
        assert np.abs(got - wb).max() <= 3e-6 * np.abs(wb).max()


@pytest.mark.parametrize("n", [16, 100])
def test_fft_c64_rows(n: int) -> None:
    rng = np.random.default_rng(n)
    z = (rng.standard_normal((2, n)) + 1j * rng.standard_normal((2, n))).astype(np.complex64)
    g = rlx.Graph("fft")
    x = g.input("x", z.shape, "c64")
    g.outputs(g.fft(x, norm="forward"))
    (got,) = _sim(g, x=z)
    want = np.fft.fft(z.astype(np.complex128), norm="forward")
    assert np.abs(got - want).max() <= 3e-6 * np.abs(want).max()


def test_fused_log_mel_matches_host() -> None:
    rng = np.random.default_rng(2)
    wave = rng.standard_normal(900).astype(np.float32)
    outs = {}
    for device in ("host", "metal-sim"):
        g = rlx.Graph("mel")
        x = g.input("wave", wave.shape, "f32")
        g.outputs(g.log_mel_spectrogram(x, sample_rate=8000, n_fft=128, hop=32, n_mels=20))
        exe = rlx.compile(g, device=device)
        if device == "metal-sim":
            assert exe.stats["metal_host"] == 0, exe.report()
        outs[device] = list(exe.run(wave=wave).values())[0]
    assert np.abs(outs["metal-sim"] - outs["host"]).max() <= 1e-4


@pytest.mark.parametrize(
    ("n_fft", "segs", "batch", "k"), [(32, 4, 3, 5), (7, 1, 2, 4), (1000, 3, 2, 9), (2, 2, 1, 2)]
)
def test_welch_peaks(n_fft: int, segs: int, batch: int, k: int) -> None:
    # numpy's stable arg sort of the float64 mean power (k up to all n_fft/2 + 1
    # bins). Random spectra keep neighbouring powers ~1e-3 apart, far above the
    # f32 rounding of the kernel's sums.
    rng = np.random.default_rng(n_fft)
    spec = rng.standard_normal((batch * segs, 2 * n_fft)).astype(np.float32)
    g = rlx.Graph("welch")
    x = g.input("spec", spec.shape, "f32")
    g.outputs(g.welch_peaks(x, n_fft=n_fft, n_segments=segs, k=k))
    (got,) = _sim(g, spec=spec)
    nb = n_fft // 2 + 1
    s = spec.astype(np.float64)
    p = (s[:, :nb] ** 2 + s[:, n_fft : n_fft + nb] ** 2).reshape(batch, segs, nb).mean(1)
    want = np.argsort(-p, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_welch_peaks_ties_and_nan_order_as_host() -> None:
    # equal powers go to the lower bin; a NaN bin ranks above every number
    # (the host's total order), on both devices
    spec = np.zeros((2, 16), np.float32)
    spec[0, [1, 3, 5]] = 2.0
    spec[0, 2] = np.nan
    spec[1, [0, 4]] = 1.0
    outs = []
    for device in ("host", "metal-sim"):
        g = rlx.Graph("welch")
        x = g.input("spec", spec.shape, "f32")
        g.outputs(g.welch_peaks(x, n_fft=8, n_segments=1, k=5))
        outs.append(list(rlx.compile(g, device=device).run(spec=spec).values())[0])
    np.testing.assert_array_equal(outs[0], [[2, 1, 3, 0, 4], [0, 4, 1, 2, 3]])
    np.testing.assert_array_equal(outs[1], outs[0])


@pytest.mark.parametrize("i", [0, 1])
def test_whisper_features(i: int) -> None:
    fx = np.load(FIXTURE)
    wave, want = fx[f"waveform_{i}"], fx[f"features_{i}"]
    g = rlx.Graph("whisper")
    x = g.input("wave", wave.shape, "f32")
    g.outputs(g.whisper_log_mel(x))
    (got,) = _sim(g, wave=wave)
    assert np.abs(got - want).max() <= WHISPER_TOL
