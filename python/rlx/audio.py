"""Audio front-end helpers in numpy: mel filter banks (Slaney and HTK
scales), analysis windows and STFT frame indices.

These build the constants that :meth:`rlx.Graph.log_mel_spectrogram` puts
into a graph; they follow the published definitions:

* HTK mel scale: ``m = 2595 · log10(1 + f / 700)``.
* Slaney mel scale (Auditory Toolbox, librosa's default, Whisper's): linear
  ``m = 3 f / 200`` below 1 kHz, logarithmic above,
  ``m = 15 + 27 · ln(f / 1000) / ln(6.4)``.
* Triangular filters between consecutive points of ``n_mels + 2`` mel-spaced
  frequencies, evaluated at the FFT bin frequencies ``k · sr / n_fft``;
  ``norm="slaney"`` scales filter ``m`` by ``2 / (f_{m+2} − f_m)`` (equal
  area).
* Windows are periodic (the STFT convention of librosa, scipy's
  ``fftbins=True`` and Whisper): Hann ``0.5 − 0.5 cos(2πk/n)``, Hamming
  ``0.54 − 0.46 cos(2πk/n)``.
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np

from rlx.errors import GraphError, ShapeError

_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = 15.0  # 3 · 1000 / 200
_LOG_STEP = np.log(6.4) / 27.0


def hz_to_mel(f: Union[float, np.ndarray], scale: str = "slaney") -> np.ndarray:
    """Frequency in Hz → mel on the ``"slaney"`` or ``"htk"`` scale."""
    f = np.asarray(f, np.float64)
    if scale == "htk":
        return 2595.0 * np.log10(1.0 + f / 700.0)
    _check_scale(scale)
    lin = 3.0 * f / 200.0
    log = _MIN_LOG_MEL + np.log(np.maximum(f, _MIN_LOG_HZ) / _MIN_LOG_HZ) / _LOG_STEP
    return np.where(f >= _MIN_LOG_HZ, log, lin)


def mel_to_hz(m: Union[float, np.ndarray], scale: str = "slaney") -> np.ndarray:
    """Inverse of :func:`hz_to_mel`."""
    m = np.asarray(m, np.float64)
    if scale == "htk":
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)
    _check_scale(scale)
    lin = 200.0 * m / 3.0
    log = _MIN_LOG_HZ * np.exp(_LOG_STEP * (m - _MIN_LOG_MEL))
    return np.where(m >= _MIN_LOG_MEL, log, lin)


def _check_scale(scale: str) -> None:
    if scale not in ("slaney", "htk"):
        raise GraphError(f"[mel_filter_bank] mel_scale must be 'slaney' or 'htk', got {scale!r}")


def mel_filter_bank(
    n_fft: int,
    n_mels: int,
    sample_rate: float,
    *,
    fmin: float = 0.0,
    fmax: Optional[float] = None,
    mel_scale: str = "slaney",
    norm: Optional[str] = "slaney",
) -> np.ndarray:
    """Triangular mel filters ``[n_mels, n_fft // 2 + 1]`` (float64).

    ``fmax`` defaults to ``sample_rate / 2``. ``norm`` is ``"slaney"``
    (equal-area filters, librosa's and Whisper's default) or ``None`` (peak 1)."""
    if n_fft < 1 or n_mels < 1:
        raise GraphError(f"[mel_filter_bank] n_fft and n_mels must be >= 1, got {n_fft}, {n_mels}")
    if sample_rate <= 0:
        raise GraphError(f"[mel_filter_bank] sample_rate must be > 0, got {sample_rate}")
    top = sample_rate / 2.0 if fmax is None else float(fmax)
    if not 0.0 <= fmin < top:
        raise GraphError(f"[mel_filter_bank] need 0 <= fmin < fmax, got fmin={fmin}, fmax={top}")
    if norm not in (None, "slaney"):
        raise GraphError(f"[mel_filter_bank] norm must be 'slaney' or None, got {norm!r}")
    bins = np.arange(n_fft // 2 + 1, dtype=np.float64) * sample_rate / n_fft
    mels = np.linspace(hz_to_mel(fmin, mel_scale), hz_to_mel(top, mel_scale), n_mels + 2)
    edges = mel_to_hz(mels, mel_scale)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (bins[None, :] - lo) / (mid - lo)
    falling = (hi - bins[None, :]) / (hi - mid)
    fb = np.maximum(0.0, np.minimum(rising, falling))
    if norm == "slaney":
        fb *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return fb


def window(kind: Union[str, np.ndarray, None], n: int) -> np.ndarray:
    """Periodic analysis window of length ``n`` (float64): ``"hann"``,
    ``"hamming"``, ``"ones"`` / ``None`` (rectangular) or an explicit array."""
    if kind is None or (isinstance(kind, str) and kind in ("ones", "boxcar", "rect")):
        return np.ones(n)
    if isinstance(kind, str):
        k = np.arange(n, dtype=np.float64)
        c = np.cos(2.0 * np.pi * k / n)
        if kind == "hann":
            return 0.5 - 0.5 * c
        if kind == "hamming":
            return 0.54 - 0.46 * c
        raise GraphError(f"[window] unknown window {kind!r} (hann, hamming, ones or an array)")
    w = np.asarray(kind, np.float64)
    if w.shape != (n,):
        raise ShapeError(f"[window] window must have shape ({n},) (n_fft), got {w.shape}")
    return w


def frame_count(length: int, n_fft: int, hop: int, center: bool) -> int:
    """Number of STFT frames of a ``length``-sample signal."""
    padded = length + 2 * (n_fft // 2) if center else length
    if padded < n_fft:
        raise ShapeError(
            f"[log_mel_spectrogram] n_fft {n_fft} exceeds the waveform length {length}"
            + (" (after centre padding)" if center else "")
        )
    return 1 + (padded - n_fft) // hop


def frame_indices(
    length: int, n_fft: int, hop: int, *, center: bool = True, pad_mode: str = "reflect"
) -> np.ndarray:
    """``[frames, n_fft]`` sample indices of each STFT frame (int64).

    With ``center`` the signal is padded by ``n_fft // 2`` on both sides,
    ``"reflect"`` mirroring without repeating the edge sample (numpy's
    ``np.pad(mode="reflect")``) or ``"constant"`` with zeros, which map to
    index ``length`` (the caller appends one zero sample)."""
    if pad_mode not in ("reflect", "constant"):
        raise GraphError(
            f"[log_mel_spectrogram] pad_mode must be 'reflect' or 'constant', got {pad_mode!r}"
        )
    frames = frame_count(length, n_fft, hop, center)
    pad = n_fft // 2 if center else 0
    pos = np.arange(frames)[:, None] * hop + np.arange(n_fft)[None, :] - pad
    if pad_mode == "constant":
        return np.where((pos < 0) | (pos >= length), length, pos).astype(np.int64)
    return reflect_indices(pos, length)


def reflect_indices(pos: np.ndarray, length: int) -> np.ndarray:
    """Map positions outside ``[0, length)`` into it by mirroring at the
    end samples without repeating them (numpy's ``mode="reflect"``)."""
    pos = np.asarray(pos, np.int64)
    if length == 1:
        return np.zeros_like(pos)
    period = 2 * (length - 1)
    m = np.mod(pos, period)
    return np.where(m >= length, period - m, m).astype(np.int64)
