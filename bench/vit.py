"""Image classification throughput of a ViT-B/16-size model: rlx against
transformers (PyTorch, CPU) (issue 17 point 4).

The model: transformers' ``ViTConfig`` with ViT-B/16's dimensions (224 × 224
images, 16 × 16 patches → 196 + 1 tokens, hidden 768, 12 layers, 12 heads,
MLP 3072, 1000 labels; 86.6 M parameters), random-initialised with a fixed
seed and saved once as an HF directory (``--make``, run with the peer python;
~330 MB) — the same float32 weights for both engines. The images: seeded
random pixel values already normalised (``[batch, 3, 224, 224]``), the same
on both sides.

Per round each engine runs in a fresh process (alternating which goes first;
bench/harness.py records the machine's load and discards rounds in which
other processes took CPU) at ``--threads`` threads: rlx's
``ViTClassifier.logits`` (one compiled executable per batch size) and
``ViTForImageClassification(pixel_values).logits`` under
``torch.inference_mode()``. For each batch size in ``--batches``: one
warm-up call, then the median of ``--reps`` timed calls → images/s. The
first image's logits of both engines are compared (max |difference| over
max |logit|) as a cross-check that both ran the same model.

torch's thread pool waits under ``OMP_WAIT_POLICY`` (``--omp``, default
ACTIVE: libgomp's spinning is its faster setting on a quiet machine; on a
loaded one PASSIVE is fairer to it — say which was used).

    /work/peer-venv/bin/python bench/vit.py --make      # the model, once
    python bench/vit.py --rounds 3 --threads 2          # writes BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import (  # noqa: E402
    PEER_PYTHON,
    Figures,
    alternate,
    bench_dir,
    engine_child,
    engine_parser,
    kept,
    machine,
    median_time,
    now,
    publish,
    ratio,
    rlx_version,
    summarise,
)

MODEL_DIR = bench_dir("vit-b16-random")
SEED = 23
B16 = {
    "image_size": 224, "patch_size": 16, "num_channels": 3, "hidden_size": 768,
    "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
    "hidden_act": "gelu", "layer_norm_eps": 1e-12, "qkv_bias": True,
}  # fmt: skip
LABELS = 1000


def make() -> None:
    """The random ViT-B/16-size directory (peer python: torch + transformers)."""
    import torch
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(SEED)
    cfg = ViTConfig(**B16, num_labels=LABELS)
    model = ViTForImageClassification(cfg).eval()
    MODEL_DIR.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(MODEL_DIR), safe_serialization=True)
    # ViTImageProcessor itself needs Pillow + torchvision (not in the peer venv)
    proc = {
        "image_processor_type": "ViTImageProcessor", "do_resize": True, "do_rescale": True,
        "do_normalize": True, "size": {"height": 224, "width": 224}, "resample": 2,
        "rescale_factor": 1 / 255, "image_mean": [0.5] * 3, "image_std": [0.5] * 3,
    }  # fmt: skip
    (MODEL_DIR / "preprocessor_config.json").write_text(json.dumps(proc, indent=2))
    print(MODEL_DIR)


def images(batch: int) -> Any:
    import numpy as np

    rng = np.random.default_rng(SEED + batch)
    return rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)


def child_rlx(args: argparse.Namespace) -> dict[str, Any]:
    import rlx

    t0 = time.perf_counter()
    m = rlx.load(str(MODEL_DIR))
    out: dict[str, Any] = {"load_s": time.perf_counter() - t0}
    for b in args.batches:
        x = images(b)
        out[f"ips{b}"] = b / median_time(lambda x=x: m.logits(x), args.reps)
    out["first"] = [float(v) for v in m.logits(images(1))[0]]
    return out


def child_torch(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from transformers import ViTForImageClassification

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    model = ViTForImageClassification.from_pretrained(
        str(MODEL_DIR), attn_implementation="sdpa"
    ).eval()
    out: dict[str, Any] = {"load_s": time.perf_counter() - t0}
    with torch.inference_mode():
        for b in args.batches:
            x = torch.from_numpy(images(b))
            out[f"ips{b}"] = b / median_time(lambda x=x: model(pixel_values=x), args.reps)
        out["first"] = model(pixel_values=torch.from_numpy(images(1))).logits[0].tolist()
    return out


def _round(engine: str, args: argparse.Namespace) -> tuple[Figures, str]:
    raw: dict[str, Any] = {}
    child = ["--reps", str(args.reps), "--batches", *map(str, args.batches)]
    fig, err = engine_child(
        engine, __file__, args.threads, child, {"OMP_WAIT_POLICY": args.omp}, raw
    )
    if not err:
        FIRST[engine] = raw["first"]
    return fig, err


#: the first image's logits of each engine's latest round (the cross-check)
FIRST: dict[str, list[float]] = {}


def _agreement() -> str:
    if set(FIRST) != {"rlx", "torch"}:
        return "n/a"
    a, b = FIRST["rlx"], FIRST["torch"]
    top = max(abs(v) for v in b) or 1.0
    diff = max(abs(x - y) for x, y in zip(a, b)) / top
    same = max(range(len(a)), key=a.__getitem__) == max(range(len(b)), key=b.__getitem__)
    return f"{diff:.1e} of max |logit|, top-1 {'equal' if same else 'DIFFERENT'}"


def main(argv: Optional[list[str]] = None) -> int:
    p = engine_parser(__doc__, "ACTIVE")
    p.add_argument("--make", action="store_true", help="write the random model (peer python)")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    p.add_argument("--reps", type=int, default=3, help="timed calls per batch size per round")
    args = p.parse_args(argv)
    if args.make:
        make()
        return 0
    if args.child:
        fn = child_rlx if args.child == "rlx" else child_torch
        print(json.dumps(fn(args)))
        return 0
    if not (MODEL_DIR / "model.safetensors").exists():
        print(f"{MODEL_DIR} missing: {PEER_PYTHON} bench/vit.py --make")
        return 1
    engines = ["torch", "rlx"]
    sides = alternate(
        args.rounds, {e: (lambda e=e: _round(e, args)) for e in engines}, "vit", args.max_others
    )
    cols = [f"batch {b} images/s" for b in args.batches]
    lines = ["| engine | " + " | ".join(cols) + " | load s | peak RSS MiB |"]
    lines.append("|---|" + "---:|" * (len(cols) + 2))
    names = {"torch": "transformers (PyTorch CPU, sdpa)", "rlx": "rlx (host)"}
    med: dict[str, dict[int, Optional[float]]] = {e: {} for e in engines}
    for engine in engines:
        rows = sides[engine]
        cells = []
        for b in args.batches:
            med[engine][b], text = summarise(rows, f"ips{b}", 1)
            cells.append(text)
        cells += [summarise(rows, "load_s", 2)[1], summarise(rows, "rss_mb", 0)[1]]
        lines.append(f"| {names[engine]} | " + " | ".join(cells) + " |")
    ratios = [ratio(med["rlx"][b], med["torch"][b]) for b in args.batches]
    lines.append("| **rlx / transformers** | " + " | ".join(ratios) + " | | |")
    section = [
        f"Measured {now()} by `bench/vit.py` ({args.rounds} alternating rounds, medians "
        f"(min–max) of the kept rounds), {args.threads} threads, median of {args.reps} "
        "timed calls per batch size after one warm-up.",
        "",
        f"- Machine: {machine()}",
        f"- Model: ViT-B/16 dimensions, random weights (seed {SEED}), float32; "
        f"{rlx_version()}; transformers in {PEER_PYTHON}, torch at "
        f"OMP_WAIT_POLICY={args.omp}",
        f"- First image's logits, rlx vs transformers: {_agreement()}",
        "",
        *lines,
    ]
    heading = "ViT-B/16 image classification (bench/vit.py)"
    publish("vit.py", heading, "vit", sides, engines, section, not args.no_write)
    return 0 if kept(sides["rlx"]) and kept(sides["torch"]) else 1


if __name__ == "__main__":
    sys.exit(main())
