"""Prefill tokens/s with the host's AMX tile GEMM on and off
(``rlx.set_amx_prefill_gemm``), alternated in one process (a loaded machine
drifts between runs; the median over rounds, min–max beside it).

Each round prefills the first ``pp`` tokens of the model's accuracy-fixture
passage into a fresh cache, once per mode, in alternating order; the graphs
are compiled and the caches warmed by one untimed prefill per size first.

    RLX_NUM_THREADS=2 python bench/amx_prefill.py --model smollm2 --pp 64 256 --rounds 6
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


def _prefill_tps(m: Any, ids: list[int]) -> float:
    m.reset(len(ids) + 1)
    t0 = time.perf_counter()
    m.next_logits(ids)
    return len(ids) / (time.perf_counter() - t0)


def main(argv: Optional[list[str]] = None) -> int:
    """Print a median tokens/s line per prompt length and mode."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--pp", nargs="*", type=int, default=[64, 256])
    ap.add_argument("--rounds", type=int, default=6)
    a = ap.parse_args(argv)
    if not rlx.amx_available():
        print("no AMX on this machine (or the kernel refused the tile state)")
        return 0
    fx = json.loads((FIXTURES / f"llm_{a.model}.json").read_text())
    ids = [int(t) for t in fx["passage"]["ids"]]
    m = rlx.load(str(ensure_model(a.model)))
    for pp in a.pp:
        if pp > len(ids):
            raise SystemExit(f"--pp {pp}: the passage has {len(ids)} tokens")
        _prefill_tps(m, ids[:pp])
        got: dict[str, list[float]] = {"amx": [], "vnni": []}
        for r in range(a.rounds):
            order = ["amx", "vnni"] if r % 2 == 0 else ["vnni", "amx"]
            for mode in order:
                rlx.set_amx_prefill_gemm(mode == "amx")
                got[mode].append(_prefill_tps(m, ids[:pp]))
        rlx.set_amx_prefill_gemm(True)
        cells = [
            f"{k} {statistics.median(v):6.1f} ({min(v):.1f}–{max(v):.1f})" for k, v in got.items()
        ]
        ratio = statistics.median(got["amx"]) / statistics.median(got["vnni"])
        print(f"{a.model} pp{pp} tok/s: " + " | ".join(cells) + f" | {ratio:.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
