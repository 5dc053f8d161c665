"""ResNet (bottleneck, BatchNorm folded at load) from the transformers fixture
``tests/fixtures/hf/resnet-tiny`` (scripts/make_resnet_fixture.py: a tiny
random-initialised ``ResNetForImageClassification`` with noise on every 1-D
parameter and on the BatchNorm running statistics, a 29×27 image batch of 2).

Tolerance: logits within 1e-4 of the largest |logit| of transformers' on the
host, the reference executor and metal-sim; the metal-sim plan has no host
command. Bad inputs raise errors naming the model and the parameter."""

from __future__ import annotations

import numpy as np
import pytest
import rlx
from hf_util import expected, fixture
from rlx.models.resnet import ResNetClassifier

TOL = 1e-4


@pytest.mark.parametrize("device", ["host", "reference", "metal-sim"])
def test_logits_match_transformers(device: str) -> None:
    d = fixture("resnet-tiny")
    e = expected(d)
    model = rlx.load(str(d), device=device)
    assert isinstance(model, ResNetClassifier)
    got = model.logits(e["pixel_values"])
    want = e["logits"]
    scale = float(np.abs(want).max())
    assert got.shape == want.shape
    err = float(np.abs(got.astype(np.float64) - want).max())
    assert err <= TOL * scale, f"{device}: max err {err} vs scale {scale}"
    if device == "metal-sim":
        exe = model.compiled(*e["pixel_values"].shape[:1], *e["pixel_values"].shape[2:])
        assert exe.stats["metal_host"] == 0, exe.report()


def test_batchnorm_is_folded_and_convs_take_every_path() -> None:
    model = rlx.load(str(fixture("resnet-tiny")))
    exe = model.compiled(1, 29, 27)
    # every param is a folded conv weight / bias or the classifier's
    assert exe.params and all(p.endswith((".w", ".b", ".wT")) for p in exe.params)
    # direct convs, im2col + GEMM and 1x1 GEMMs (conv lowering rule) all present
    for name in ("conv2d", "im2col", "batched_sgemm", "pool2d"):
        assert name in exe.schedule, name


def test_bad_pixel_values_name_the_parameter() -> None:
    model = rlx.load(str(fixture("resnet-tiny")))
    with pytest.raises(rlx.ShapeError, match=r"\[resnet\] pixel_values has 4 channels"):
        model.logits(np.zeros((1, 4, 29, 27), np.float32))
    with pytest.raises(rlx.ShapeError, match=r"\[resnet\] pixel_values must be"):
        model.logits(np.zeros((29, 27), np.float32))
    with pytest.raises(rlx.DTypeError, match=r"\[resnet\] pixel_values must be floating"):
        model.logits(np.zeros((1, 3, 29, 27), np.int32))
