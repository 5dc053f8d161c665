"""The two training runs of ``rlx train`` (and ``examples/train_*.py``):
``lora`` (LoRA on a decoder LLM over :func:`~rlx.train.corpus.stdlib_corpus`)
and ``digits`` (the CNN of :mod:`rlx.train.digits`). Each prints one line
per step / epoch, writes a loss-curve PNG and a safetensors checkpoint into
``out``, and can resume from such a checkpoint."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from rlx.optim import SCHEDULES, Adam, AdamW, get_schedule


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``train`` subcommand's arguments."""
    sub = p.add_subparsers(dest="task", required=True)
    lo = sub.add_parser("lora", help="LoRA fine-tuning of a Llama-style GGUF / HF model")
    lo.add_argument("model", nargs="?", default="smollm2", help="GGUF, HF dir or packaged name")
    lo.add_argument("--seq", type=int, default=128, help="tokens per step")
    lo.add_argument("--steps", type=int, default=40)
    lo.add_argument("--rank", type=int, default=8)
    lo.add_argument("--alpha", type=float, default=16.0)
    lo.add_argument("--targets", default="q,v", help="projections to adapt (q,k,v,o,gate,up,down)")
    lo.add_argument("--lr", type=float, default=1e-3, help="base (peak) learning rate")
    lo.add_argument(
        "--schedule",
        choices=SCHEDULES,
        default="constant",
        help="learning-rate schedule over --steps updates, after --warmup",
    )
    lo.add_argument("--warmup", type=int, default=0, help="linear warmup updates")
    lo.add_argument(
        "--accumulate",
        type=int,
        default=1,
        help="windows per update (gradient accumulation; --seq tokens each)",
    )
    lo.add_argument(
        "--corpus-tokens", type=int, default=0, help="train on the first N corpus tokens only"
    )
    lo.add_argument("--clip", type=float, default=1.0, help="clip by global norm (0 = off)")
    lo.add_argument(
        "--dense-backward",
        action="store_true",
        help="input gradients through f32 copies of the weights (default: packed blocks)",
    )
    di = sub.add_parser("digits", help="a small CNN on scikit-learn's digits")
    di.add_argument("--epochs", type=int, default=12)
    di.add_argument("--lr", type=float, default=3e-3)
    di.add_argument("--batch", type=int, default=32)
    for q in (lo, di):
        q.add_argument("--out", default="rlx-train", help="directory for the PNG and checkpoint")
        q.add_argument("--resume", default=None, help="a checkpoint to continue from")
        q.add_argument("--seed", type=int, default=0)
        q.add_argument("--device", default="host")


def run(args: argparse.Namespace, log: Callable[[str], Any] = print) -> dict[str, Any]:
    """Run ``args.task``; returns its summary (also written as ``summary.json``)."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = (_lora if args.task == "lora" else _digits)(args, out, log)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _lora(args: argparse.Namespace, out: Path, log: Callable[[str], Any]) -> dict[str, Any]:
    from rlx.train.corpus import stdlib_corpus
    from rlx.train.lora import LoraConfig, LoraTrainer
    from rlx.train.plot import loss_curve

    cfg = LoraConfig(args.rank, args.alpha, tuple(args.targets.split(",")), args.seed)
    t0 = time.perf_counter()
    tr = LoraTrainer(
        args.model,
        args.seq,
        cfg,
        AdamW(lr=args.lr, weight_decay=0.0),
        clip_norm=args.clip or None,
        dense_backward=args.dense_backward,
        schedule=get_schedule(args.schedule, args.steps, args.warmup),
        accumulate=args.accumulate,
        device=args.device,
    )
    build = time.perf_counter() - t0
    toks = np.asarray(tr.tokenizer.encode(stdlib_corpus()), np.int64)
    if args.corpus_tokens:
        toks = toks[: args.corpus_tokens]
    if args.resume:
        tr.load(args.resume)
    log(
        f"lora: {len(tr.adapters)} adapters, {toks.size} corpus tokens, seq {args.seq}, "
        f"built + compiled in {build:.1f}s, arena {tr.exe.arena_bytes / 2**20:.0f} MiB"
    )
    losses, times = [], []
    tokens_per_step = args.seq * args.accumulate
    for i in range(tr.step_count, args.steps):
        lr = tr.lr()
        s0 = time.perf_counter()
        r = tr.step(tr.batch(toks, i, args.seed))
        times.append(time.perf_counter() - s0)
        losses.append(r["loss"])
        log(
            f"step {i + 1:4d}  loss {r['loss']:.4f}  |g| {r['grad_norm']:.3f}  lr {lr:.3g}  "
            f"{times[-1]:.2f}s  {tokens_per_step / times[-1]:.0f} tok/s"
        )
    tr.save(out / "lora.safetensors")
    if losses:
        loss_curve(out / "loss.png", losses, f"LoRA r={args.rank} on {Path(str(args.model)).name}")
    return {
        "task": "lora",
        "model": str(args.model),
        "corpus_tokens": int(toks.size),
        "seq": args.seq,
        "accumulate": args.accumulate,
        "schedule": args.schedule,
        "warmup": args.warmup,
        "steps": tr.step_count,
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "loss_first5_mean": float(np.mean(losses[:5])) if losses else None,
        "loss_last5_mean": float(np.mean(losses[-5:])) if losses else None,
        "median_step_s": float(np.median(times)) if times else None,
        "arena_bytes": tr.exe.arena_bytes,
    }


def _digits(args: argparse.Namespace, out: Path, log: Callable[[str], Any]) -> dict[str, Any]:
    from rlx.train.checkpoint import load_checkpoint, save_checkpoint
    from rlx.train.digits import DigitsCNN, split
    from rlx.train.plot import loss_curve

    xtr, ytr, xte, yte = split(args.seed)
    m = DigitsCNN(args.batch, len(yte), Adam(lr=args.lr), args.seed, args.device)
    first = 0
    if args.resume:
        meta = load_checkpoint(m.exe, args.resume)
        first = int(meta.get("epoch", 0))
    losses: list[float] = []
    t0 = time.perf_counter()
    acc = float("nan")
    for ep in range(first, args.epochs):
        ls = m.epoch(xtr, ytr, ep)
        losses += ls
        acc = float((m.predict(xte) == yte).mean())
        log(f"epoch {ep + 1:3d}  loss {np.mean(ls):.4f}  test accuracy {acc:.4f}")
    took = time.perf_counter() - t0
    save_checkpoint(m.exe, out / "digits.safetensors", metadata={"epoch": str(args.epochs)})
    if losses:
        loss_curve(out / "loss.png", losses, "digits CNN (scikit-learn)")
    steps = max(len(losses), 1)
    return {
        "task": "digits",
        "epochs": args.epochs,
        "test_accuracy": acc,
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "train_s": took,
        "step_ms": 1e3 * took / steps,
    }
