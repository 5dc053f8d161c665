"""Signal ops end to end (graph → compile → run) on the host (native kernels:
rustfft, log-mel, Welch) and the reference device (numpy), checked against
references we did not write: ``numpy.fft``, transformers' numpy Whisper
feature extractor and ``mel_filter_bank`` (fixture from
``scripts/gen_signal_fixtures.py``), and float64 numpy formulas written here
from the definitions (HTK / Slaney mel, librosa's ``power_to_db``).

Tolerances: FFT f32 ``2e-6 · max|X|`` (an f32 FFT's error grows like
``log n · eps · max|X|``), f64 ``1e-12 · max|X|``; Whisper features 1e-5
absolute (features are O(1)); mel filters 1e-12 (both float64); dB
spectrogram 1e-3 dB absolute (f32 FFT, values span 80 dB).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import pytest
import rlx

DEVICES = ["host", "reference"]
FIXTURE = Path(__file__).parent / "fixtures/signal/whisper_features.npz"


def _run(g: rlx.Graph, device: str, **inputs: np.ndarray) -> list[np.ndarray]:
    exe = rlx.compile(g, device=device)
    return list(exe.run(**inputs).values())


# ---------------------------------------------------------------- FFT
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [1, 2, 7, 64, 100, 257, 1024])
@pytest.mark.parametrize("real", [False, True])
def test_fft_matches_numpy(device: str, n: int, real: bool) -> None:
    rng = np.random.default_rng(n)
    z = rng.standard_normal((3, n)) + (0 if real else 1j) * rng.standard_normal((3, n))
    block = np.concatenate([z.real, z.imag], 1).astype(np.float32)
    g = rlx.Graph("fft")
    x = g.input("x", block.shape, "f32")
    g.outputs(g.fft(x), g.ifft(x, norm="ortho"))
    fwd, inv = _run(g, device, x=block)
    zz = block[:, :n].astype(np.float64) + 1j * block[:, n:]
    for got, want in ((fwd, np.fft.fft(zz)), (inv, np.fft.ifft(zz, norm="ortho"))):
        want_b = np.concatenate([want.real, want.imag], 1)
        scale = np.abs(want_b).max()
        assert np.abs(got - want_b).max() <= 2e-6 * scale


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [7, 100, 1024])
def test_fft_c64_and_f64(device: str, n: int) -> None:
    rng = np.random.default_rng(n + 1)
    z = (rng.standard_normal((2, n)) + 1j * rng.standard_normal((2, n))).astype(np.complex64)
    g = rlx.Graph("fft")
    x = g.input("x", z.shape, "c64")
    g.outputs(g.fft(x, norm="forward"))
    (got,) = _run(g, device, x=z)
    want = np.fft.fft(z.astype(np.complex128), norm="forward")
    assert got.dtype == np.complex64
    assert np.abs(got - want).max() <= 2e-6 * np.abs(want).max()

    b = np.concatenate([z.real, z.imag], 1).astype(np.float64)
    g = rlx.Graph("fft64")
    x = g.input("x", b.shape, "f64")
    g.outputs(g.ifft(x))
    (got,) = _run(g, device, x=b)
    w = np.fft.ifft(b[:, :n] + 1j * b[:, n:])
    want = np.concatenate([w.real, w.imag], 1)
    assert np.abs(got - want).max() <= 1e-12 * np.abs(want).max()


# ----------------------------------------------------------- Whisper
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("i", [0, 1])
def test_whisper_features_match_transformers(device: str, i: int) -> None:
    fx = np.load(FIXTURE)
    wave, want = fx[f"waveform_{i}"], fx[f"features_{i}"]
    g = rlx.Graph("whisper")
    x = g.input("wave", wave.shape, "f32")
    g.outputs(g.whisper_log_mel(x))
    (got,) = _run(g, device, wave=wave)
    assert got.shape == want.shape
    err = np.abs(got - want).max()
    assert err <= 1e-5, err


def test_whisper_batch_clamps_per_waveform() -> None:
    fx = np.load(FIXTURE)
    a = fx["waveform_1"]
    b = 0.01 * a[::-1].copy()
    g = rlx.Graph("whisper")
    x = g.input("wave", (2, a.size), "f32")
    g.outputs(g.whisper_log_mel(x))
    (got,) = _run(g, "host", wave=np.stack([a, b]))
    assert got.shape == (2, 80, 25)
    assert np.abs(got[0] - fx["features_1"]).max() <= 1e-5
    single = rlx.Graph("one")
    y = single.input("wave", (a.size,), "f32")
    single.outputs(single.whisper_log_mel(y))
    (one,) = _run(single, "host", wave=b)
    assert np.abs(got[1] - one).max() <= 1e-6


# ------------------------------------------------------- mel formulas
def _mel_htk(f: np.ndarray) -> np.ndarray:
    return 2595.0 * np.log10(1.0 + f / 700.0)


def _mel_htk_inv(m: np.ndarray) -> np.ndarray:
    return 700.0 * (10.0 ** (m / 2595.0) - 1.0)


def _mel_slaney(f: np.ndarray) -> np.ndarray:
    f = np.asarray(f, np.float64)
    out = f / (200.0 / 3.0)
    big = f >= 1000.0
    out[big] = 15.0 + np.log(f[big] / 1000.0) / (np.log(6.4) / 27.0)
    return out


def _mel_slaney_inv(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, np.float64)
    out = m * (200.0 / 3.0)
    big = m >= 15.0
    out[big] = 1000.0 * np.exp((np.log(6.4) / 27.0) * (m[big] - 15.0))
    return out


def _filters(
    sr: float, n_fft: int, n_mels: int, fmin: float, fmax: float, htk: bool, area: bool
) -> np.ndarray:
    """librosa.filters.mel written out: triangles on mel-spaced edges."""
    fwd, inv = (_mel_htk, _mel_htk_inv) if htk else (_mel_slaney, _mel_slaney_inv)
    edges = inv(np.linspace(fwd(np.array([fmin]))[0], fwd(np.array([fmax]))[0], n_mels + 2))
    freqs = np.fft.rfftfreq(n_fft, 1.0 / sr)
    fb = np.zeros((n_mels, freqs.size))
    for m in range(n_mels):
        lo, c, hi = edges[m], edges[m + 1], edges[m + 2]
        up = (freqs - lo) / (c - lo)
        down = (hi - freqs) / (hi - c)
        fb[m] = np.maximum(0.0, np.minimum(up, down))
        if area:
            fb[m] *= 2.0 / (hi - lo)
    return fb


@pytest.mark.parametrize("scale", ["slaney", "htk"])
@pytest.mark.parametrize("norm", ["slaney", None])
def test_filter_bank_matches_transformers_and_formula(scale: str, norm: Optional[str]) -> None:
    from rlx.audio import mel_filter_bank

    fx = np.load(FIXTURE)
    ours = mel_filter_bank(512, 40, 16000, fmin=30.0, fmax=7000.0, mel_scale=scale, norm=norm)
    np.testing.assert_allclose(ours, fx[f"filters_{scale}_{norm or 'none'}"], atol=1e-12)
    mine = _filters(16000, 512, 40, 30.0, 7000.0, scale == "htk", norm == "slaney")
    np.testing.assert_allclose(ours, mine, atol=1e-12)


def _stft_power(wave: np.ndarray, n_fft: int, hop: int, win: np.ndarray) -> np.ndarray:
    pad = np.pad(wave.astype(np.float64), n_fft // 2, mode="reflect")
    frames = 1 + (pad.size - n_fft) // hop
    x = np.stack([pad[i * hop : i * hop + n_fft] for i in range(frames)]) * win
    return np.abs(np.fft.rfft(x, axis=1)) ** 2  # [frames, bins]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("scale", ["slaney", "htk"])
def test_db_mel_spectrogram_matches_librosa_formula(device: str, scale: str) -> None:
    rng = np.random.default_rng(5)
    sr, n_fft, hop, n_mels = 22050, 512, 128, 32
    t = np.arange(3000) / sr
    wave = (np.sin(2 * np.pi * 660 * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)
    g = rlx.Graph("db")
    x = g.input("wave", wave.shape, "f32")
    g.outputs(
        g.log_mel_spectrogram(
            x,
            sample_rate=sr,
            n_fft=n_fft,
            hop=hop,
            n_mels=n_mels,
            mel_scale=scale,
            window="hamming",
            log="db",
            floor_mode="max",
            dynamic_range=80.0,
        )
    )
    (got,) = _run(g, device, wave=wave)
    k = np.arange(n_fft)
    win = 0.54 - 0.46 * np.cos(2 * np.pi * k / n_fft)
    fb = _filters(sr, n_fft, n_mels, 0.0, sr / 2, scale == "htk", True)
    mel = fb @ _stft_power(wave, n_fft, hop, win).T  # [n_mels, frames]
    db = 10.0 * np.log10(np.maximum(mel, 1e-10))
    want = np.maximum(db, db.max() - 80.0)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-3


@pytest.mark.parametrize("device", DEVICES)
def test_fused_log_mel_path_and_power_one(device: str) -> None:
    rng = np.random.default_rng(9)
    wave = rng.standard_normal(1000).astype(np.float32)
    sr, n_fft, hop, n_mels = 8000, 64, 20, 12
    g = rlx.Graph("ln")
    x = g.input("wave", wave.shape, "f32")
    common = dict(sample_rate=sr, n_fft=n_fft, hop=hop, n_mels=n_mels, mel_scale="htk")
    g.outputs(
        g.log_mel_spectrogram(x, **common),  # ln(mel + 1e-10): the log_mel op
        g.log_mel_spectrogram(x, power=1.0, log=None, center=False, mel_norm=None, **common),
    )
    fused, mag = _run(g, device, wave=wave)
    win = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    fb = _filters(sr, n_fft, n_mels, 0.0, sr / 2, True, True)
    want = np.log(fb @ _stft_power(wave, n_fft, hop, win).T + 1e-10)
    assert np.abs(fused - want).max() <= 1e-4
    frames = 1 + (wave.size - n_fft) // hop
    xf = np.stack([wave[i * hop : i * hop + n_fft] for i in range(frames)]).astype(np.float64)
    fb1 = _filters(sr, n_fft, n_mels, 0.0, sr / 2, True, False)
    want = fb1 @ np.abs(np.fft.rfft(xf * win, axis=1)).T
    assert np.abs(mag - want).max() <= 1e-5 * np.abs(want).max()


# ------------------------------------------------------------ Welch
@pytest.mark.parametrize("device", DEVICES)
def test_welch_peaks(device: str) -> None:
    rng = np.random.default_rng(3)
    n_fft, segs, batch, k = 32, 4, 3, 5
    spec = rng.standard_normal((batch * segs, 2 * n_fft)).astype(np.float32)
    g = rlx.Graph("welch")
    x = g.input("spec", spec.shape, "f32")
    g.outputs(g.welch_peaks(x, n_fft=n_fft, n_segments=segs, k=k))
    (got,) = _run(g, device, spec=spec)
    s = spec.astype(np.float64)
    p = (s[:, : n_fft // 2 + 1] ** 2 + s[:, n_fft : n_fft + n_fft // 2 + 1] ** 2).reshape(
        batch, segs, -1
    )
    want = np.argsort(-p.mean(1), axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(got, want.astype(np.float32))


# ------------------------------------------------------------ errors
def test_bad_waveforms_name_op_and_parameter() -> None:
    g = rlx.Graph("bad")
    w3 = g.input("w3", (1, 2, 400), "f32")
    with pytest.raises(rlx.ShapeError, match=r"\[log_mel_spectrogram\] waveform must be"):
        g.whisper_log_mel(w3)
    wi = g.input("wi", (1000,), "i32")
    with pytest.raises(rlx.DTypeError, match=r"\[log_mel_spectrogram\] waveform must be a float"):
        g.whisper_log_mel(wi)
    w = g.input("w", (100,), "f32")
    with pytest.raises(rlx.ShapeError, match=r"\[log_mel_spectrogram\] n_fft 400 exceeds"):
        g.log_mel_spectrogram(w, sample_rate=16000, n_fft=400, hop=160, n_mels=8, center=False)
    with pytest.raises(rlx.GraphError, match=r"\[log_mel_spectrogram\] hop must be"):
        g.log_mel_spectrogram(w, sample_rate=16000, n_fft=64, hop=0, n_mels=8)
    with pytest.raises(rlx.GraphError, match=r"\[mel_filter_bank\] mel_scale"):
        g.log_mel_spectrogram(w, sample_rate=16000, n_fft=64, hop=16, n_mels=8, mel_scale="x")
    with pytest.raises(rlx.ShapeError, match=r"\[fft\]"):
        g.fft(g.input("odd", (3, 5), "f32"))
    for e in (rlx.ShapeError, rlx.DTypeError, rlx.GraphError):
        assert issubclass(e, rlx.RlxError)
