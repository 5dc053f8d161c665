"""Reading audio files for the speech models: WAV through the standard
library's :mod:`wave` (PCM 8 / 16 / 24 / 32-bit), any format libsndfile reads
(FLAC, OGG, float WAV …) through ``soundfile`` when it is installed, mixed
down to mono and resampled to the model's rate with a polyphase filter
(``scipy.signal.resample_poly``, a Kaiser-windowed FIR low-pass: no
nearest-sample picking)."""

from __future__ import annotations

import wave
from math import gcd
from pathlib import Path
from typing import Union

import numpy as np

from rlx.errors import RlxError, UnsupportedOpError


class AudioError(RlxError):
    """An audio file that cannot be read or resampled."""


def read_audio(path: Union[str, Path]) -> tuple[np.ndarray, int]:
    """``(samples, rate)``: float32 mono in [-1, 1] and the file's sample rate."""
    p = Path(path)
    if not p.is_file():
        raise AudioError(f"[audio] {p}: no such file")
    try:
        import soundfile  # type: ignore[import-not-found]
    except ImportError:
        return _read_wav(p)
    try:
        data, rate = soundfile.read(str(p), dtype="float32", always_2d=True)
    except Exception as e:  # soundfile raises its own LibsndfileError / RuntimeError
        raise AudioError(f"[audio] {p}: cannot read ({e})") from e
    return np.ascontiguousarray(data.mean(axis=1), np.float32), int(rate)


def _read_wav(p: Path) -> tuple[np.ndarray, int]:
    """PCM WAV by the standard library (no soundfile)."""
    if p.suffix.lower() not in (".wav", ".wave"):
        raise UnsupportedOpError(
            f"[audio] {p}: only PCM WAV is readable without the soundfile package "
            "(pip install soundfile for FLAC / OGG / float WAV)"
        )
    try:
        with wave.open(str(p), "rb") as w:
            channels, width, rate = w.getnchannels(), w.getsampwidth(), w.getframerate()
            raw = w.readframes(w.getnframes())
    except (wave.Error, EOFError, OSError) as e:
        raise AudioError(f"[audio] {p}: not a readable PCM WAV file ({e})") from e
    if width == 1:
        x = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width in (2, 4):
        x = np.frombuffer(raw, f"<i{width}").astype(np.float32) / float(2 ** (8 * width - 1))
    elif width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        x = (np.where(v >= 1 << 23, v - (1 << 24), v)).astype(np.float32) / float(1 << 23)
    else:
        raise AudioError(f"[audio] {p}: {8 * width}-bit samples are not supported")
    if channels > 1:
        x = x[: len(x) - len(x) % channels].reshape(-1, channels).mean(axis=1)
    return np.ascontiguousarray(x, np.float32), int(rate)


def resample(x: np.ndarray, rate: int, target: int) -> np.ndarray:
    """``x`` at ``rate`` Hz resampled to ``target`` Hz (polyphase FIR, scipy)."""
    if rate <= 0 or target <= 0:
        raise AudioError(f"[audio] sample rates must be positive, got {rate} -> {target}")
    if rate == target:
        return np.asarray(x, np.float32)
    try:
        from scipy.signal import resample_poly  # type: ignore[import-untyped]
    except ImportError as e:
        raise AudioError(
            f"[audio] resampling {rate} Hz to {target} Hz needs scipy (pip install scipy)"
        ) from e
    g = gcd(int(rate), int(target))
    y = resample_poly(np.asarray(x, np.float64), target // g, rate // g)
    return np.asarray(y, np.float32)


def load_audio(path: Union[str, Path], rate: int = 16000) -> np.ndarray:
    """A file's samples as float32 mono at ``rate`` Hz."""
    x, r = read_audio(path)
    return resample(x, r, rate)
