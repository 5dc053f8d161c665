"""Regenerate the ViT oracle fixture ``tests/fixtures/hf/vit-tiny/`` from
transformers (no model hub: a tiny random-initialised
``ViTForImageClassification`` built from transformers' own ``ViTConfig``), and
the image-processor oracle for :mod:`rlx.vision.preprocess`.

The model: image 32, patch 8 (16 patches + CLS), hidden 32, 2 layers, 4 heads,
MLP 64, 5 labels, float32, eval mode. Every 1-D parameter gets noise
(``NOISE``), and so do the CLS token and the position embeddings (their init is
small, a wrong position row must show). Seeded: a re-run writes the same numbers.

The processors (Pillow backends, ``ViTImageProcessorPil`` and
``ConvNextImageProcessorPil``) run on ``image.png``, a deterministic 45×37 RGB
image made here (smooth gradients + seeded noise), with non-default mean / std.

Writes ``config.json`` + ``model.safetensors`` (``save_pretrained``),
``preprocessor_config.json`` (the ViT processor), ``convnext_preprocessor_config.json``
(a ResNet-style processor: shortest edge 32, crop_pct 0.875), ``image.png``,
``expected.npz`` (``pixel_values`` [2, 3, 32, 32] float32 random, ``logits`` [2, 5],
``image_pixel_values`` [1, 3, 32, 32] (ViT processor on image.png),
``image_logits`` [1, 5], ``convnext_pixel_values`` [1, 3, 32, 32]) and ``meta.json``.
Run with the peer python (Pillow from a private target dir is fine)::

    PYTHONPATH=/tmp/vit-pil /work/peer-venv/bin/python scripts/make_vit_fixture.py
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "hf" / "vit-tiny"
SEED = 4321
NOISE = 0.1
CONFIG = {
    "image_size": 32,
    "patch_size": 8,
    "num_channels": 3,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "hidden_act": "gelu",
    "layer_norm_eps": 1e-12,
    "qkv_bias": True,
    "num_labels": 5,
    "id2label": {str(i): name for i, name in enumerate(["cat", "dog", "fox", "owl", "eel"])},
}
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def test_image() -> np.ndarray:
    """45×37 (w×h) uint8 RGB: gradients plus seeded noise."""
    h, w = 37, 45
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    rng = np.random.default_rng(SEED)
    img = np.stack([xx / (w - 1) * 255, yy / (h - 1) * 255, (xx + yy) % 64 * 4], axis=-1)
    img = img + rng.normal(0, 20, img.shape)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers
    from PIL import Image
    from transformers import ViTConfig, ViTForImageClassification
    from transformers.models.convnext import ConvNextImageProcessorPil
    from transformers.models.vit import ViTImageProcessorPil

    torch.set_num_threads(2)
    torch.manual_seed(SEED)
    cfg = ViTConfig(**CONFIG)
    cfg.label2id = {v: int(k) for k, v in CONFIG["id2label"].items()}
    model = ViTForImageClassification(cfg).eval()
    gen = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 or name.endswith(("cls_token", "position_embeddings")):
                p.add_(NOISE * torch.randn(p.shape, generator=gen))
        x = torch.randn((2, 3, 32, 32), generator=gen)
        logits = model(pixel_values=x).logits

    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    model.save_pretrained(str(OUT), safe_serialization=True)
    img = test_image()
    Image.fromarray(img, "RGB").save(OUT / "image.png")
    pil = Image.open(OUT / "image.png")
    vit_proc = ViTImageProcessorPil(
        size={"height": 32, "width": 32}, image_mean=MEAN, image_std=STD
    )
    vit_proc.save_pretrained(str(OUT))
    pv = vit_proc(images=pil, return_tensors="np")["pixel_values"].astype(np.float32)
    cnx = ConvNextImageProcessorPil(
        size={"shortest_edge": 32}, crop_pct=0.875, image_mean=MEAN, image_std=STD
    )
    cnx_dict = cnx.to_dict()
    (OUT / "convnext_preprocessor_config.json").write_text(
        json.dumps(cnx_dict, indent=2, sort_keys=True, default=int) + "\n"
    )
    cpv = cnx(images=pil, return_tensors="np")["pixel_values"].astype(np.float32)
    with torch.no_grad():
        img_logits = model(pixel_values=torch.from_numpy(pv)).logits.numpy()

    lg = logits.numpy().astype(np.float32)
    assert np.isfinite(lg).all()
    spread = float(lg.std(axis=-1).min())
    assert spread > 1e-2, f"logits nearly constant (min row std {spread})"
    np.savez(
        OUT / "expected.npz",
        pixel_values=x.numpy().astype(np.float32),
        logits=lg,
        image_pixel_values=pv,
        image_logits=img_logits.astype(np.float32),
        convnext_pixel_values=cpv,
    )
    meta = {
        "name": "vit-tiny",
        "config_kwargs": CONFIG,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "seed": SEED,
        "noise_on_1d_params_cls_and_position": NOISE,
        "n_params": sum(p.numel() for p in model.parameters()),
        "max_abs_logit": float(np.abs(lg).max()),
        "min_row_std_logits": spread,
        "image_pixel_values_shape": list(pv.shape),
        "convnext_pixel_values_shape": list(cpv.shape),
    }
    (OUT / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    print(json.dumps({k: meta[k] for k in ("n_params", "max_abs_logit")}))


if __name__ == "__main__":
    main()
