"""rlx against transformers (PyTorch, CPU) on a Whisper of the 'base' size
with random weights (issue 17 point 4).

The model: transformers' ``WhisperConfig`` with base's dimensions (80 mels,
d_model 512, 6 + 6 layers, 8 heads, FFN 2048, 1500 encoder / 448 decoder
positions, 51865 tokens), random-initialised with a fixed seed and saved once
as an HF directory (``--make``, run with the peer python; ~290 MB) — the same
weights for both engines. Per round, each engine in a fresh process
(alternating which goes first), both at ``--threads`` threads
(``torch.set_num_threads``; ``RLX_NUM_THREADS`` / ``RAYON_NUM_THREADS``),
torch under ``OMP_WAIT_POLICY=PASSIVE`` unless ``--omp-active`` (on a loaded
machine libgomp's spin-waiting collapses: 0.4 decode tok/s seen), rlx with its
defaults:

* ``encoder s``: the encoder on 30 s of audio (features of a seeded noise +
  tone waveform, [80, 3000] → [1500, 512]), after one warm-up run; median of
  ``--reps`` runs;
* ``decode tok/s``: after the 4-token prompt (cross-attention keys / values
  computed once), ``--tokens`` single-token steps through the KV cache with
  the full-vocabulary logits each step (rlx: ``decode``; transformers:
  ``model(decoder_input_ids=..., encoder_outputs=..., cache=...)``),
  greedy tokens, after one warm-up step.

Each round's machine load and the CPU the other processes took are recorded
(bench/loadmon.py); the table gives medians (min–max) over the rounds. The
Markdown goes into BENCHMARKS.md between the ``whisper.py`` markers unless
``--no-write``::

    /work/peer-venv/bin/python bench/whisper.py --make      # the model, once
    python bench/whisper.py --rounds 3 --threads 2
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "BENCHMARKS.md"
BEGIN, END = "<!-- whisper.py:begin -->", "<!-- whisper.py:end -->"
MODEL_DIR = Path(os.environ.get("RLX_BENCH_DIR", "/tmp/rlx-bench")) / "whisper-base-random"
PEER_PYTHON = os.environ.get("PEER_PYTHON", "/work/peer-venv/bin/python")
SEED = 17
BASE = {
    "num_mel_bins": 80, "d_model": 512, "encoder_layers": 6, "decoder_layers": 6,
    "encoder_attention_heads": 8, "decoder_attention_heads": 8, "encoder_ffn_dim": 2048,
    "decoder_ffn_dim": 2048, "max_source_positions": 1500, "max_target_positions": 448,
    "vocab_size": 51865, "decoder_start_token_id": 50258, "eos_token_id": 50257,
    "pad_token_id": 50257, "bos_token_id": 50257,
}  # fmt: skip
PROMPT = [50258, 50259, 50359, 50363]  # sot, en, transcribe, notimestamps (base's ids)


def waveform() -> Any:
    import numpy as np

    rng = np.random.default_rng(SEED)
    t = np.arange(30 * 16000) / 16000.0
    return (0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(t.size)).astype(
        np.float32
    )


def make() -> None:
    """The random base-size model directory (peer python: torch + transformers)."""
    import torch
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
    )

    torch.manual_seed(SEED)
    model = WhisperForConditionalGeneration(WhisperConfig(**BASE)).eval()
    model.generation_config = GenerationConfig(
        decoder_start_token_id=50258, eos_token_id=50257, pad_token_id=50257,
        forced_decoder_ids=[[1, 50259], [2, 50359], [3, 50363]],
        no_timestamps_token_id=50363, max_length=448,
    )  # fmt: skip
    MODEL_DIR.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(MODEL_DIR), safe_serialization=True)
    WhisperFeatureExtractor(feature_size=80).save_pretrained(str(MODEL_DIR))
    print(MODEL_DIR)


def _median_time(fn: Any, reps: int) -> float:
    import time

    fn()  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def child_rlx(threads: int, reps: int, tokens: int) -> dict[str, float]:
    import time

    import numpy as np
    import rlx

    t0 = time.perf_counter()
    m = rlx.load(str(MODEL_DIR))
    load_s = time.perf_counter() - t0
    feats = m.features(waveform())
    enc_s = _median_time(lambda: m.encode(feats), reps)
    enc = m.encode(feats)
    m.start(enc)
    row = m.decode(PROMPT)[-1]
    tok = int(np.argmax(row))
    row = m.decode([tok])[-1]  # warm-up step (compiles the 1-token graph)
    t0 = time.perf_counter()
    for _ in range(tokens):
        row = m.decode([int(np.argmax(row))])[-1]
    tps = tokens / (time.perf_counter() - t0)
    return {"load_s": load_s, "encoder_s": enc_s, "decode_tps": tps}


def child_torch(threads: int, reps: int, tokens: int) -> dict[str, float]:
    import time

    import torch
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    model = WhisperForConditionalGeneration.from_pretrained(str(MODEL_DIR)).eval()
    load_s = time.perf_counter() - t0
    fe = WhisperFeatureExtractor.from_pretrained(str(MODEL_DIR))
    x = torch.from_numpy(fe(waveform(), sampling_rate=16000, return_tensors="np")["input_features"])
    with torch.inference_mode():
        enc_s = _median_time(lambda: model.model.encoder(x), reps)
        enc = model.model.encoder(x)
        out = model(encoder_outputs=enc, decoder_input_ids=torch.tensor([PROMPT]), use_cache=True)
        past = out.past_key_values
        tok = out.logits[0, -1].argmax().reshape(1, 1)
        out = model(encoder_outputs=enc, decoder_input_ids=tok, cache=past, use_cache=True)
        past = out.past_key_values
        t0 = time.perf_counter()
        for _ in range(tokens):
            tok = out.logits[0, -1].argmax().reshape(1, 1)
            out = model(encoder_outputs=enc, decoder_input_ids=tok, cache=past, use_cache=True)
            past = out.past_key_values
        tps = tokens / (time.perf_counter() - t0)
    return {"load_s": load_s, "encoder_s": enc_s, "decode_tps": tps}


def _round(engine: str, args: argparse.Namespace) -> tuple[dict[str, float], str]:
    sys.path.insert(0, str(Path(__file__).parent))
    from ssm import run_child

    py = PEER_PYTHON if engine == "torch" else os.environ.get(
        "RLX_PYTHON", str(ROOT / ".venv" / "bin" / "python")
    )  # fmt: skip
    env = dict(os.environ, RLX_NUM_THREADS=str(args.threads), RAYON_NUM_THREADS=str(args.threads))
    env.setdefault("PYTHONWARNINGS", "ignore")
    env["OMP_WAIT_POLICY"] = "ACTIVE" if args.omp_active else "PASSIVE"
    cmd = [py, __file__, "--child", engine, "--threads", str(args.threads)]
    cmd += ["--reps", str(args.reps), "--tokens", str(args.tokens)]
    code, out, err, rss = run_child(cmd, env)
    if code != 0:
        return {}, f"{engine}: " + (err.strip().splitlines() or ["?"])[-1]
    res = json.loads(out.strip().splitlines()[-1])
    return {**res, "rss_mb": rss}, ""


def _cell(vals: list[float], fmt: str) -> str:
    if not vals:
        return "n/a"
    med = statistics.median(vals)
    if len(vals) == 1:
        return format(med, fmt)
    return f"{format(med, fmt)} ({format(min(vals), fmt)}–{format(max(vals), fmt)})"


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--make", action="store_true", help="write the random base model (peer python)")
    p.add_argument("--child", choices=["rlx", "torch"], help=argparse.SUPPRESS)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=2, help="timed encoder runs per round")
    p.add_argument("--tokens", type=int, default=32, help="timed decode steps per round")
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--omp-active", action="store_true", help="torch with OMP_WAIT_POLICY=ACTIVE")
    args = p.parse_args(argv)
    if args.make:
        make()
        return 0
    if args.child:
        fn = child_rlx if args.child == "rlx" else child_torch
        print(json.dumps(fn(args.threads, args.reps, args.tokens)))
        return 0
    if not (MODEL_DIR / "model.safetensors").exists():
        print(f"{MODEL_DIR} missing: {PEER_PYTHON} bench/whisper.py --make")
        return 1
    sys.path.insert(0, str(Path(__file__).parent))
    from harness import machine as _machine
    from harness import rlx_version as _rlx_version
    from loadmon import Monitor

    res: dict[str, list[dict[str, float]]] = {"rlx": [], "torch": []}
    loads, errors = [], []
    for r in range(args.rounds):
        order = ["torch", "rlx"] if r % 2 == 0 else ["rlx", "torch"]
        for engine in order:
            with Monitor() as mon:
                fig, err = _round(engine, args)
            loads.append(f"round {r + 1} {engine}: {mon.load.describe()}")
            print(engine, fig or err, mon.load.describe(), flush=True)
            if fig:
                res[engine].append(fig)
            else:
                errors.append(err)
    head = "| engine | encoder 30 s (s) | decode tok/s | load s | peak RSS MiB |"
    lines = [head, "|---|---:|---:|---:|---:|"]
    names = {"torch": "transformers (PyTorch CPU)", "rlx": "rlx (host)"}
    for engine in ("torch", "rlx"):
        rows = res[engine]
        cells = [
            _cell([f["encoder_s"] for f in rows], ".2f"),
            _cell([f["decode_tps"] for f in rows], ".1f"),
            _cell([f["load_s"] for f in rows], ".1f"),
            _cell([f["rss_mb"] for f in rows], ".0f"),
        ]
        lines.append(f"| {names[engine]} | " + " | ".join(cells) + " |")
    if res["rlx"] and res["torch"]:
        med = {e: {k: statistics.median(f[k] for f in res[e]) for k in res[e][0]} for e in res}
        enc = med["torch"]["encoder_s"] / med["rlx"]["encoder_s"]
        dec = med["rlx"]["decode_tps"] / med["torch"]["decode_tps"]
        lines.append(f"| **rlx speed / transformers** | {enc:.2f}× | {dec:.2f}× | | |")
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    section = [
        BEGIN,
        f"Measured {when} by `bench/whisper.py` ({args.rounds} alternating rounds, medians "
        f"(min–max)), {args.threads} threads; encoder: median of {args.reps} runs per round; "
        f"decode: {args.tokens} one-token steps per round.",
        "",
        f"- Machine: {_machine()}",
        f"- Model: Whisper base dimensions, random weights (seed {SEED}), float32; "
        f"{_rlx_version()}; transformers in {PEER_PYTHON} (torch "
        f"OMP_WAIT_POLICY={'ACTIVE' if args.omp_active else 'PASSIVE'})",
        "",
        *lines,
        "",
        *[f"- {x}" for x in loads + errors],
        END,
    ]
    text = "\n".join(section)
    print(text)
    if not args.no_write:
        old = BENCHMARKS.read_text()
        if BEGIN in old and END in old:
            new = old[: old.index(BEGIN)] + text + old[old.index(END) + len(END) :]
        else:
            new = (
                old.rstrip("\n")
                + "\n\n## Whisper (speech to text) vs transformers\n\n"
                + text
                + "\n"
            )
        BENCHMARKS.write_text(new)
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
