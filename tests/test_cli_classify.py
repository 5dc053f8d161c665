"""``rlx classify MODEL IMAGE [--top N]`` on the ViT fixture
(tests/fixtures/hf/vit-tiny): the printed labels and probabilities are the
softmax of transformers' logits for the fixture image (within 1e-4,
the printed precision), most probable first; a grey + alpha image is
classified as RGB; a ResNet directory without a processor config runs on
ViT's defaults; a non-image file, a directory that is not a model or a decoder
directory is one ``rlx: error:`` line. Each case runs the CLI in a subprocess, as a user does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

VIT = Path(__file__).parent / "fixtures" / "hf" / "vit-tiny"


def _rlx(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlx.cli", *args], capture_output=True, text=True, timeout=120
    )


def _one_line_error(r: subprocess.CompletedProcess[str], needle: str) -> None:
    assert r.returncode == 1, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("rlx: error: "), r.stderr
    assert needle in lines[0], r.stderr


def _parse(out: str) -> list[tuple[str, float]]:
    return [(ln.split()[1], float(ln.split()[0])) for ln in out.splitlines() if ln.strip()]


def test_classify_prints_top_labels_with_probabilities() -> None:
    with np.load(VIT / "expected.npz") as e:
        logits = e["image_logits"][0].astype(np.float64)
    p = np.exp(logits - logits.max())
    p /= p.sum()
    id2label = json.loads((VIT / "config.json").read_text())["id2label"]
    order = np.argsort(-p)
    r = _rlx("classify", str(VIT), str(VIT / "image.png"))
    assert r.returncode == 0, r.stderr
    rows = _parse(r.stdout)
    assert [lab for lab, _ in rows] == [id2label[str(i)] for i in order]
    np.testing.assert_allclose([q for _, q in rows], p[order], rtol=0, atol=1e-4)
    r2 = _rlx("classify", str(VIT), str(VIT / "image.png"), "--top", "2")
    assert _parse(r2.stdout) == rows[:2]


def test_grey_alpha_image_is_converted_to_rgb(tmp_path: Path) -> None:
    from PIL import Image

    grey = np.asarray(Image.open(VIT / "image.png"))[..., 1]
    Image.fromarray(np.stack([grey, np.full_like(grey, 99)], -1), "LA").save(tmp_path / "la.png")
    Image.fromarray(grey, "L").convert("RGB").save(tmp_path / "rgb.png")
    r_la = _rlx("classify", str(VIT), str(tmp_path / "la.png"), "--top", "5")
    r_rgb = _rlx("classify", str(VIT), str(tmp_path / "rgb.png"), "--top", "5")
    assert r_la.returncode == 0, r_la.stderr
    assert r_la.stdout == r_rgb.stdout and len(_parse(r_la.stdout)) == 5


def test_non_image_and_non_model_are_one_line_errors(tmp_path: Path) -> None:
    _one_line_error(_rlx("classify", str(VIT), str(VIT / "config.json")), "not a readable image")
    _one_line_error(_rlx("classify", str(VIT), str(tmp_path / "none.png")), "no such file")
    _one_line_error(_rlx("classify", str(tmp_path), str(VIT / "image.png")), "no config.json")
    llama = VIT.parent / "llama"
    _one_line_error(
        _rlx("classify", str(llama), str(VIT / "image.png")),
        "model_type 'llama' is not an image classifier (supported: resnet, vit)",
    )


def test_resnet_directory_without_processor_config() -> None:
    # no preprocessor_config.json: ViT's defaults (224 x 224, mean / std 0.5)
    r = _rlx("classify", str(VIT.parent / "resnet-tiny"), str(VIT / "image.png"), "--top", "3")
    assert r.returncode == 0, r.stderr
    rows = _parse(r.stdout)
    assert len(rows) == 3 and all(0 < q < 1 for _, q in rows)
    assert [q for _, q in rows] == sorted((q for _, q in rows), reverse=True)
