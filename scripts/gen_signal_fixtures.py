"""Generate tests/fixtures/signal/whisper_features.npz with transformers'
numpy Whisper feature extractor (``WhisperFeatureExtractor.
_np_extract_fbank_features``) and its ``mel_filter_bank`` (Slaney and HTK).

Run by hand with the peer venv (transformers is not a CI dependency):

    /work/peer-venv/bin/python scripts/gen_signal_fixtures.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from transformers import WhisperFeatureExtractor
from transformers.audio_utils import mel_filter_bank

OUT = Path(__file__).resolve().parent.parent / "tests/fixtures/signal/whisper_features.npz"


def waveforms() -> list[np.ndarray]:
    """Two deterministic test signals: a chirp with a tone and noise (1.3 s),
    and a short burst of noise with a decaying tone (0.25 s)."""
    rng = np.random.default_rng(17)
    sr = 16000
    t = np.arange(int(1.3 * sr)) / sr
    chirp = 0.4 * np.sin(2 * np.pi * (200 * t + 1500 * t**2))
    tone = 0.2 * np.sin(2 * np.pi * 440 * t)
    a = chirp + tone + 0.01 * rng.standard_normal(t.size)
    t2 = np.arange(4000) / sr
    b = 0.3 * rng.standard_normal(t2.size) * np.exp(-8 * t2) + 0.1 * np.sin(2 * np.pi * 3000 * t2)
    return [a.astype(np.float32), b.astype(np.float32)]


def main() -> None:
    fe = WhisperFeatureExtractor(feature_size=80, sampling_rate=16000, hop_length=160, n_fft=400)
    out: dict[str, np.ndarray] = {}
    for i, w in enumerate(waveforms()):
        out[f"waveform_{i}"] = w
        out[f"features_{i}"] = fe._np_extract_fbank_features(w[None, :], "cpu")[0].astype(
            np.float32
        )
    for scale in ("slaney", "htk"):
        for norm in ("slaney", None):
            fb = mel_filter_bank(
                num_frequency_bins=257,
                num_mel_filters=40,
                min_frequency=30.0,
                max_frequency=7000.0,
                sampling_rate=16000,
                norm=norm,
                mel_scale=scale,
            )
            out[f"filters_{scale}_{norm or 'none'}"] = fb.T.astype(np.float64)
    np.savez_compressed(OUT, **out)
    print(OUT, {k: v.shape for k, v in out.items()})


if __name__ == "__main__":
    main()
