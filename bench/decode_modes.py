"""Decode tokens/s of the host's activation modes for the quantised GEMVs,
alternated in one process (a loaded machine drifts between runs; the
median over rounds, min–max beside it).

Modes: ``int8x2`` (the default: int8 activations on two code levels),
``int8x1`` (one level, as llama.cpp rounds them) and ``f32``
(``rlx.set_int8_activations(False)``: f32 activations against weights
decoded in registers). Each round feeds ``--tokens`` tokens of the
model's accuracy-fixture passage one at a time after a 16-token prompt.

    RLX_NUM_THREADS=2 python bench/decode_modes.py --models smollm2 gemma3-270m --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any, Optional

import rlx
from rlx.io.models import ensure_model

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
MODELS = ("smollm2", "gemma3-270m", "qwen2.5-0.5b")
MODES = ("int8x1", "int8x2", "f32")


def _set_mode(mode: str) -> None:
    rlx.set_int8_activations(mode != "f32")
    rlx.set_int8_activation_levels(2 if mode == "int8x2" else 1)


def _decode_tps(m: Any, ids: list[int], n: int) -> float:
    m.reset(16 + n)
    m.next_logits(ids[:16])
    t0 = time.perf_counter()
    for t in ids[16 : 16 + n]:
        m.next_logits([t])
    return n / (time.perf_counter() - t0)


def main(argv: Optional[list[str]] = None) -> int:
    """Print a median tokens/s table per model and mode."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--modes", nargs="*", default=list(MODES), choices=list(MODES))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64)
    a = ap.parse_args(argv)
    for name in a.models:
        fx = json.loads((FIXTURES / f"llm_{name}.json").read_text())
        ids = [int(t) for t in fx["passage"]["ids"]]
        m = rlx.load(str(ensure_model(name)))
        _set_mode("int8x2")
        _decode_tps(m, ids, 8)  # compile the decode graph, warm the caches
        got: dict[str, list[float]] = {k: [] for k in a.modes}
        for r in range(a.rounds):
            order = a.modes if r % 2 == 0 else a.modes[::-1]
            for mode in order:
                _set_mode(mode)
                got[mode].append(_decode_tps(m, ids, a.tokens))
        _set_mode("int8x2")
        cells = [
            f"{k} {statistics.median(v):6.1f} ({min(v):.1f}–{max(v):.1f})" for k, v in got.items()
        ]
        print(f"{name:14s} tok/s: " + " | ".join(cells), flush=True)
        del m
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
