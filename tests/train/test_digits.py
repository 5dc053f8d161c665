"""A CNN trained with compiled steps on scikit-learn's digits reaches
≥ 95 % test accuracy (the labels are scikit-learn's, not ours); the
training run is deterministic and resumes bit for bit from a checkpoint."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import sklearn.datasets  # noqa: F401  (a test dependency: the README test command installs it)
from rlx.train import load_checkpoint, save_checkpoint
from rlx.train.digits import DigitsCNN, split

EPOCHS = 12


def test_digits_cnn_reaches_95_percent() -> None:
    xtr, ytr, xte, yte = split()
    m = DigitsCNN(eval_batch=len(yte))
    t0 = time.perf_counter()
    losses = []
    for ep in range(EPOCHS):
        losses += m.epoch(xtr, ytr, ep)
    took = time.perf_counter() - t0
    acc = float((m.predict(xte) == yte).mean())
    print(
        f"digits: {EPOCHS} epochs {took:.1f}s, loss {losses[0]:.3f} -> {losses[-1]:.3f}, "
        f"test accuracy {acc:.4f}"
    )
    assert losses[0] > 2.0 and np.mean(losses[-20:]) < 0.3
    assert acc >= 0.95


def test_digits_resume_bit_exact(tmp_path: Path) -> None:
    xtr, ytr, _, _ = split()
    a = DigitsCNN()
    for ep in range(2):
        a.epoch(xtr, ytr, ep)
    b = DigitsCNN()
    b.epoch(xtr, ytr, 0)
    save_checkpoint(b.exe, tmp_path / "cnn.safetensors")
    c = DigitsCNN()
    load_checkpoint(c.exe, tmp_path / "cnn.safetensors")
    c.epoch(xtr, ytr, 1)
    for name in a.exe.states:
        assert a.exe.state(name).tobytes() == c.exe.state(name).tobytes(), name
