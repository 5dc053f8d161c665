"""``rlx train``: the LoRA run on the tiny Llama fixture writes its loss
curve (PNG), checkpoint and summary, and ``--resume`` continues from the
checkpoint's step; ``rlx train digits`` runs one epoch."""

from __future__ import annotations

import json
from pathlib import Path

from rlx.cli import main

GGUF = Path(__file__).resolve().parent.parent / "fixtures" / "gguf" / "llama-q8_0.gguf"
PNG = b"\x89PNG\r\n\x1a\n"


def test_train_lora_writes_png_checkpoint_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    base = ["train", "lora", str(GGUF), "--seq", "16", "--rank", "2", "--out", str(out)]
    assert main([*base, "--steps", "2"]) == 0
    assert (out / "loss.png").read_bytes()[:8] == PNG
    first = json.loads((out / "summary.json").read_text())
    assert first["steps"] == 2 and first["loss_first"] > 0
    ck = tmp_path / "ck.safetensors"
    (out / "lora.safetensors").rename(ck)
    assert main([*base, "--steps", "4", "--resume", str(ck)]) == 0
    again = json.loads((out / "summary.json").read_text())
    assert again["steps"] == 4


def test_train_lora_schedule_and_accumulation(tmp_path: Path) -> None:
    args = ["train", "lora", str(GGUF), "--seq", "8", "--rank", "2", "--steps", "2"]
    args += ["--schedule", "linear", "--warmup", "1", "--accumulate", "2", "--out", str(tmp_path)]
    assert main(args) == 0
    s = json.loads((tmp_path / "summary.json").read_text())
    assert (s["steps"], s["accumulate"], s["schedule"], s["warmup"]) == (2, 2, "linear", 1)


def test_train_digits_one_epoch(tmp_path: Path) -> None:
    assert main(["train", "digits", "--epochs", "1", "--out", str(tmp_path)]) == 0
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["epochs"] == 1 and s["test_accuracy"] > 0.5
    assert (tmp_path / "loss.png").read_bytes()[:8] == PNG
    assert (tmp_path / "digits.safetensors").stat().st_size > 0
