"""Regenerate the ResNet oracle fixture ``tests/fixtures/hf/resnet-tiny/`` from
transformers (no model hub: a tiny random-initialised
``ResNetForImageClassification`` built from transformers' own ``ResNetConfig``).

The model: bottleneck layers, embedding 16, stages of 32 and 64 channels (depths
1 and 2), 5 labels, float32, eval mode. Every 1-D parameter gets noise
(``NOISE``), and so do the BatchNorm running statistics (mean + noise, variance
drawn from [0.5, 1.5]), so a BatchNorm folded with the wrong statistics or the
wrong epsilon cannot go unnoticed. Seeded: a re-run writes the same numbers.

Channel counts are chosen so that rlx's conv lowering takes each of its paths
(direct, 1×1 GEMM on the input, im2col + GEMM; see
``crates/rlx-metal/src/compile/lower/conv.rs``), and the image (29×27) is odd.

Writes ``config.json`` + ``model.safetensors`` (``save_pretrained``),
``expected.npz`` (``pixel_values`` [2, 3, 29, 27] float32, ``logits`` [2, 5]
float32) and ``meta.json`` (versions, config, figures). Run with the peer python::

    /work/peer-venv/bin/python scripts/make_resnet_fixture.py
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "hf" / "resnet-tiny"
SEED = 1234
NOISE = 0.1
CONFIG = {
    "num_channels": 3,
    "embedding_size": 16,
    "hidden_sizes": [32, 64],
    "depths": [1, 2],
    "layer_type": "bottleneck",
    "hidden_act": "relu",
    "downsample_in_first_stage": False,
    "num_labels": 5,
}


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers
    from transformers import ResNetConfig, ResNetForImageClassification

    torch.set_num_threads(2)
    torch.manual_seed(SEED)
    model = ResNetForImageClassification(ResNetConfig(**CONFIG)).eval()
    gen = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(NOISE * torch.randn(p.shape, generator=gen))
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.add_(NOISE * torch.randn(b.shape, generator=gen))
            elif name.endswith("running_var"):
                b.copy_(0.5 + torch.rand(b.shape, generator=gen))
        x = torch.randn((2, 3, 29, 27), generator=gen)
        logits = model(pixel_values=x).logits
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    model.save_pretrained(str(OUT), safe_serialization=True)
    lg = logits.numpy().astype(np.float32)
    assert np.isfinite(lg).all()
    spread = float(lg.std(axis=-1).min())
    assert spread > 1e-2, f"logits nearly constant (min row std {spread})"
    np.savez(OUT / "expected.npz", pixel_values=x.numpy().astype(np.float32), logits=lg)
    meta = {
        "name": "resnet-tiny",
        "config_kwargs": CONFIG,
        "config": json.loads((OUT / "config.json").read_text()),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "seed": SEED,
        "noise_on_1d_params_and_running_mean": NOISE,
        "running_var": "uniform [0.5, 1.5)",
        "n_params": sum(p.numel() for p in model.parameters()),
        "max_abs_logit": float(np.abs(lg).max()),
        "min_row_std_logits": spread,
    }
    (OUT / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    print(json.dumps({k: meta[k] for k in ("n_params", "max_abs_logit")}))


if __name__ == "__main__":
    main()
