"""rlx against transformers (PyTorch, CPU) on a Whisper of the 'base' size
with random weights (issue 17 point 4).

The model: transformers' ``WhisperConfig`` with base's dimensions (80 mels,
d_model 512, 6 + 6 layers, 8 heads, FFN 2048, 1500 encoder / 448 decoder
positions, 51865 tokens), random-initialised with a fixed seed and saved once
as an HF directory (``--make``, run with the peer python; ~290 MB) — the same
weights for both engines. Per round, each engine in a fresh process
(alternating which goes first), both at ``--threads`` threads
(``torch.set_num_threads``; ``RLX_NUM_THREADS`` / ``RAYON_NUM_THREADS``),
torch under ``OMP_WAIT_POLICY=PASSIVE`` unless ``--omp ACTIVE`` (on a loaded
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

MODEL_DIR = bench_dir("whisper-base-random")
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


def child_rlx(threads: int, reps: int, tokens: int) -> dict[str, float]:
    import numpy as np
    import rlx

    t0 = time.perf_counter()
    m = rlx.load(str(MODEL_DIR))
    load_s = time.perf_counter() - t0
    feats = m.features(waveform())
    enc_s = median_time(lambda: m.encode(feats), reps)
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
    import torch
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    model = WhisperForConditionalGeneration.from_pretrained(str(MODEL_DIR)).eval()
    load_s = time.perf_counter() - t0
    fe = WhisperFeatureExtractor.from_pretrained(str(MODEL_DIR))
    x = torch.from_numpy(fe(waveform(), sampling_rate=16000, return_tensors="np")["input_features"])
    with torch.inference_mode():
        enc_s = median_time(lambda: model.model.encoder(x), reps)
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


def _round(engine: str, args: argparse.Namespace) -> tuple[Figures, str]:
    child = ["--reps", str(args.reps), "--tokens", str(args.tokens)]
    return engine_child(engine, __file__, args.threads, child, {"OMP_WAIT_POLICY": args.omp})


def main(argv: Optional[list[str]] = None) -> int:
    p = engine_parser(__doc__, "PASSIVE")
    p.add_argument("--make", action="store_true", help="write the random base model (peer python)")
    p.add_argument("--reps", type=int, default=2, help="timed encoder runs per round")
    p.add_argument("--tokens", type=int, default=32, help="timed decode steps per round")
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
    engines = ["torch", "rlx"]
    sides = alternate(
        args.rounds, {e: (lambda e=e: _round(e, args)) for e in engines}, "whisper",
        args.max_others,
    )  # fmt: skip
    lines = ["| engine | encoder 30 s (s) | decode tok/s | load s | peak RSS MiB |"]
    lines.append("|---|---:|---:|---:|---:|")
    names = {"torch": "transformers (PyTorch CPU)", "rlx": "rlx (host)"}
    med: dict[str, dict[str, Optional[float]]] = {e: {} for e in engines}
    for engine in engines:
        cells = []
        for key, digits in (("encoder_s", 2), ("decode_tps", 1), ("load_s", 1), ("rss_mb", 0)):
            med[engine][key], text = summarise(sides[engine], key, digits)
            cells.append(text)
        lines.append(f"| {names[engine]} | " + " | ".join(cells) + " |")
    enc = ratio(med["torch"]["encoder_s"], med["rlx"]["encoder_s"])
    dec = ratio(med["rlx"]["decode_tps"], med["torch"]["decode_tps"])
    lines.append(f"| **rlx speed / transformers** | {enc} | {dec} | | |")
    section = [
        f"Measured {now()} by `bench/whisper.py` ({args.rounds} alternating rounds, medians "
        f"(min–max) of the kept rounds), {args.threads} threads; encoder: median of "
        f"{args.reps} runs per round; decode: {args.tokens} one-token steps per round.",
        "",
        f"- Machine: {machine()}",
        f"- Model: Whisper base dimensions, random weights (seed {SEED}), float32; "
        f"{rlx_version()}; transformers in {PEER_PYTHON} (torch OMP_WAIT_POLICY={args.omp})",
        "",
        *lines,
    ]
    heading = "Whisper (speech to text) vs transformers"
    publish("whisper.py", heading, "whisper", sides, engines, section, not args.no_write)
    return 0 if kept(sides["rlx"]) and kept(sides["torch"]) else 1


if __name__ == "__main__":
    sys.exit(main())
