"""Saved activations of a training graph (:mod:`rlx.train.saved`) and
``rlx inspect MODEL --train``."""

from __future__ import annotations

from pathlib import Path

import pytest
import rlx
from rlx.cli import main
from rlx.train.saved import live_peak, saved_activations

GGUF = Path(__file__).resolve().parent.parent / "fixtures" / "gguf" / "llama-q8_0.gguf"


def test_tanh_output_is_saved_until_its_gradient() -> None:
    g = rlx.Graph("mlp")
    x, w = g.input("x", [4, 8]), g.param("w", [8, 3])
    z = x @ w
    y = g.tanh(z)
    loss = g.sum(y)
    (dw,) = rlx.grad(g, loss, [w])
    saved = saved_activations(g, loss.id)
    ids = {s.node for s in saved}
    # d tanh = 1 - y²: the backward reads y; x and w are leaves (not counted)
    assert y.id in ids and x.id not in ids and w.id not in ids
    sy = next(s for s in saved if s.node == y.id)
    assert sy.nbytes == 4 * 3 * 4 and loss.id < sy.last_read <= dw.id
    peak, _ = live_peak(saved)
    assert peak >= sy.nbytes


def test_inspect_train_prints_saved_activations(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(GGUF), "--train", "--seq", "16"]) == 0
    out = capsys.readouterr().out
    assert "saved activations:" in out and "lifetime" in out and "planner: arena" in out
