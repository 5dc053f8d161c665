"""``rlx transcribe MODEL AUDIO`` on the Whisper fixture
(tests/fixtures/hf/whisper-tiny) and the audio reader behind it
(:mod:`rlx.audio_io`): PCM WAV of 8 / 16 / 24 / 32 bits through the standard
library decode to the written integers over 2^(bits-1) (exactly), stereo is
averaged, and a 22.05 kHz / 44.1 kHz / 8 kHz tone resampled to 16 kHz matches
the analytic sine at 16 kHz within 5e-3 away from the ends (scipy's default
Kaiser filter ripples ~1.5e-3 on the 8 kHz upsampling; a nearest-sample
resampler is off by ~0.1). The CLI runs in a subprocess, as a user does; its
text equals :meth:`WhisperModel.transcribe` on the same 16-bit samples."""

from __future__ import annotations

import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest
import rlx
from rlx.audio_io import AudioError, load_audio, read_audio, resample

WHISPER = Path(__file__).parent / "fixtures" / "hf" / "whisper-tiny"


def _rlx(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlx.cli", *args], capture_output=True, text=True, timeout=120
    )


def _write_wav(path: Path, ints: np.ndarray, width: int, rate: int, channels: int = 1) -> None:
    if width == 1:
        raw = (ints + 128).astype(np.uint8).tobytes()
    elif width == 3:
        u = ints.astype(np.int64) & 0xFFFFFF
        raw = np.stack([u & 0xFF, (u >> 8) & 0xFF, u >> 16], axis=-1).astype(np.uint8).tobytes()
    else:
        raw = ints.astype(f"<i{width}").tobytes()
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(raw)


@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_pcm_wav_decodes_exactly(tmp_path: Path, width: int) -> None:
    rng = np.random.default_rng(width)
    top = 1 << (8 * width - 1)
    ints = rng.integers(-top, top, size=(50, 2), dtype=np.int64)
    _write_wav(tmp_path / "a.wav", ints.reshape(-1), width, 12345, channels=2)
    x, rate = read_audio(tmp_path / "a.wav")
    assert rate == 12345 and x.dtype == np.float32 and x.shape == (50,)
    want = ints.astype(np.float64).mean(axis=1) / top
    np.testing.assert_allclose(x, want, rtol=0, atol=1e-7)


@pytest.mark.parametrize("rate", [8000, 22050, 44100])
def test_resampled_tone_is_the_tone_at_16k(rate: int) -> None:
    f = 440.0
    x = np.sin(2 * np.pi * f * np.arange(rate) / rate)  # 1 s
    y = resample(x, rate, 16000)
    assert y.shape == (16000,)
    want = np.sin(2 * np.pi * f * np.arange(16000) / 16000)
    err = np.abs(y - want)[800:-800].max()  # away from the filter's edge effects
    assert err < 5e-3, err
    # nearest-sample picking is far off at 22.05 / 44.1 kHz
    if rate % 16000:
        near = x[np.minimum(np.round(np.arange(16000) * rate / 16000).astype(int), rate - 1)]
        assert np.abs(near - want)[800:-800].max() > 10 * err


def test_cli_transcribes_a_wav_file(tmp_path: Path) -> None:
    with np.load(WHISPER / "expected.npz") as e:
        wave16 = e["waveform"]
    ints = np.clip(np.round(wave16 * 32767), -32768, 32767).astype(np.int16)
    _write_wav(tmp_path / "speech.wav", ints, 2, 16000)
    model = rlx.load(str(WHISPER))
    assert np.array_equal(load_audio(tmp_path / "speech.wav"), ints / np.float32(32768))
    want = model.transcribe(ints / np.float32(32768), max_new_tokens=8).strip()
    r = _rlx("transcribe", str(WHISPER), str(tmp_path / "speech.wav"), "--max-new-tokens", "8")
    assert r.returncode == 0, r.stderr
    assert r.stdout == want + "\n"
    # the same audio at 8 kHz goes through the resampler first
    x8 = resample(ints / 32768.0, 16000, 8000)
    _write_wav(tmp_path / "s8.wav", np.round(x8 * 32767).astype(np.int16), 2, 8000)
    r8 = _rlx("transcribe", str(WHISPER), str(tmp_path / "s8.wav"), "--max-new-tokens", "2")
    assert r8.returncode == 0 and r8.stdout.strip(), r8.stderr


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "x.flac").write_bytes(b"fLaC")
    (tmp_path / "bad.wav").write_bytes(b"RIFF0000WAVEjunk")
    cases = [
        ((str(WHISPER), str(tmp_path / "none.wav")), "no such file"),
        ((str(WHISPER), str(tmp_path / "bad.wav")), "not a readable PCM WAV"),
        ((str(tmp_path), str(tmp_path / "bad.wav")), "no config.json"),
        ((str(WHISPER), str(WHISPER / "config.json")), "only PCM WAV"),
    ]
    try:
        import soundfile  # noqa: F401
    except ImportError:
        cases.append(((str(WHISPER), str(tmp_path / "x.flac")), "soundfile"))
    for args, needle in cases:
        r = _rlx("transcribe", *args)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode == 1 and len(lines) == 1, (args, r.stderr)
        assert lines[0].startswith("rlx: error: ") and needle in lines[0], (args, r.stderr)
    assert issubclass(AudioError, rlx.RlxError)
