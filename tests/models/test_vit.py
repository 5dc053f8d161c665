"""ViT (patch conv, CLS token, position embeddings, pre-LN encoder) from the
transformers fixture ``tests/fixtures/hf/vit-tiny`` (scripts/make_vit_fixture.py:
a tiny random-initialised ``ViTForImageClassification``, image 32, patch 8,
hidden 32, 2 layers, 4 heads, 5 labels, noise on every 1-D parameter, the CLS
token and the position embeddings), and the image processor against
transformers' ``ViTImageProcessorPil`` / ``ConvNextImageProcessorPil`` output
for the fixture's ``image.png``.

Tolerances: logits within 1e-4 of the largest |logit| of transformers' on the
host, the reference executor and metal-sim (the metal-sim plan has no host
command); pixel values within 1e-5 (absolute) of the HF processor's."""

from __future__ import annotations

import json

import numpy as np
import pytest
import rlx
from hf_util import expected, fixture
from rlx.models.image_processor import ImageError, ImageProcessor, top_labels
from rlx.models.vit import ViTClassifier

TOL = 1e-4
PIX_TOL = 1e-5


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    assert got.shape == want.shape
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


@pytest.mark.parametrize("device", ["host", "reference", "metal-sim"])
def test_logits_match_transformers(device: str) -> None:
    d = fixture("vit-tiny")
    e = expected(d)
    model = rlx.load(str(d), device=device)
    assert isinstance(model, ViTClassifier)
    err = _rel_err(model.logits(e["pixel_values"]), e["logits"])
    assert err <= TOL, f"{device}: max err {err} of max|logit|"
    # one image (rank 3) through a batch-1 graph
    err1 = _rel_err(model.logits(e["image_pixel_values"][0])[0], e["image_logits"][0])
    assert err1 <= TOL, f"{device}: image max err {err1}"
    if device == "metal-sim":
        exe = model.compiled(2)
        assert exe.stats["metal_host"] == 0, exe.report()


def test_every_weight_is_a_bound_param() -> None:
    model = rlx.load(str(fixture("vit-tiny")))
    exe = model.compiled(1)
    assert set(exe.params) == set(model._values)
    # the stride-8 patch conv lowers to im2col + GEMM
    for name in ("im2col", "batched_sgemm", "attention", "layer_norm"):
        assert name in exe.schedule, name


def test_processor_matches_hf_vit_and_convnext() -> None:
    d = fixture("vit-tiny")
    e = expected(d)
    vit = ImageProcessor.from_dir(d)
    assert vit.resample == 2 and vit.size == {"height": 32, "width": 32}
    got = vit(d / "image.png")
    np.testing.assert_allclose(got, e["image_pixel_values"], rtol=0, atol=PIX_TOL)
    cfg = json.loads((d / "convnext_preprocessor_config.json").read_text())
    cnx = ImageProcessor.from_dict(cfg)
    assert cnx.resample == 3 and cnx.crop_pct == 0.875
    got = cnx(str(d / "image.png"))
    np.testing.assert_allclose(got, e["convnext_pixel_values"], rtol=0, atol=PIX_TOL)
    # a wrong filter or a wrong crop does not pass the tolerance
    wrong = ImageProcessor.from_dict({**cfg, "resample": 2})(d / "image.png")
    assert np.abs(wrong - e["convnext_pixel_values"]).max() > 100 * PIX_TOL


def test_channels_are_converted_to_rgb(tmp_path: object) -> None:
    from PIL import Image

    d = fixture("vit-tiny")
    proc = ImageProcessor.from_dir(d)
    rgb = np.asarray(Image.open(d / "image.png"))
    grey = rgb[..., 0]
    la = np.stack([grey, np.full_like(grey, 200)], axis=-1)  # grey + alpha
    want = proc(np.repeat(grey[..., None], 3, axis=-1))
    np.testing.assert_array_equal(proc(la), want)
    np.testing.assert_array_equal(proc(grey), want)
    assert proc([la, rgb]).shape == (2, 3, 32, 32)
    with pytest.raises(rlx.ShapeError, match=r"\[image\] image array must be .* got shape"):
        proc(np.zeros((8, 8, 5), np.uint8))
    with pytest.raises(rlx.ShapeError, match=r"must be uint8"):
        proc(np.zeros((8, 8, 3), np.float32))


def test_not_an_image_is_an_rlx_error() -> None:
    d = fixture("vit-tiny")
    proc = ImageProcessor.from_dir(d)
    with pytest.raises(ImageError, match=r"\[image\] .*config.json: not a readable image"):
        proc(d / "config.json")
    assert issubclass(ImageError, rlx.RlxError)


def test_top_labels_are_softmax_order() -> None:
    got = top_labels(np.array([0.0, 2.0, 1.0]), {"0": "a", "1": "b"}, top=2)
    p = np.exp([0.0, 2.0, 1.0]) / np.exp([0.0, 2.0, 1.0]).sum()
    assert [x[0] for x in got] == ["b", "LABEL_2"]
    np.testing.assert_allclose([x[1] for x in got], [p[1], p[2]], rtol=1e-12)


def test_bad_pixel_values_name_the_parameter() -> None:
    model = rlx.load(str(fixture("vit-tiny")))
    with pytest.raises(rlx.ShapeError, match=r"\[vit\] pixel_values has 4 channels"):
        model.logits(np.zeros((1, 4, 32, 32), np.float32))
    with pytest.raises(rlx.ShapeError, match=r"\[vit\] pixel_values is 30x32"):
        model.logits(np.zeros((1, 3, 30, 32), np.float32))
    with pytest.raises(rlx.ShapeError, match=r"\[vit\] pixel_values must be"):
        model.logits(np.zeros((32, 32), np.float32))
    with pytest.raises(rlx.DTypeError, match=r"\[vit\] pixel_values must be floating"):
        model.logits(np.zeros((1, 3, 32, 32), np.int32))
