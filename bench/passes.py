"""Fusion passes on vs off, side by side: decode and prefill tokens/s of
``rlx bench`` and dispatches per decode token of ``rlx inspect``, with every
pass enabled and with ``RLX_DISABLE_PASS`` naming all of them (graph-level
fusions included), in alternating rounds; medians go into BENCHMARKS.md
between the ``passes.py`` markers.

    python bench/passes.py [--models smollm2 ...] [--rounds 3] [--threads 2] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

import rlx

ROOT = Path(__file__).resolve().parent.parent
BENCH_MD = ROOT / "BENCHMARKS.md"
BEGIN, END = "<!-- passes.py:begin -->", "<!-- passes.py:end -->"
MODELS = {
    "smollm2": "SmolLM2-135M Q4_1",
    "gemma3-270m": "Gemma3-270M Q4_K_M",
    "qwen2.5-0.5b": "Qwen2.5-0.5B Q4_K_M",
}
KEYS = ("pp64", "tg32", "tg128")
RLX = str(Path(sys.executable).with_name("rlx"))


def _env(off: bool, threads: int) -> dict[str, str]:
    env = dict(os.environ, RLX_NUM_THREADS=str(threads))
    env["RLX_DISABLE_PASS"] = ",".join(rlx.pass_names()) if off else ""
    return env


def _json(cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run(cmd, stdout=subprocess.PIPE, check=True, env=env, text=True).stdout
    return json.loads(out[out.index("{") :])


def _bench(model: str, off: bool, threads: int) -> dict[str, float]:
    res = _json([RLX, "bench", model, "--json", "--threads", str(threads)], _env(off, threads))
    return {k: float(res[k]) for k in KEYS}


def _dispatches(model: str, off: bool, threads: int) -> tuple[int, int]:
    """Host-schedule dispatches and Metal-plan kernel dispatches per decode token."""
    res = _json([RLX, "inspect", model, "--json"], _env(off, threads))
    decode = next(g for g in res["graphs"] if g["graph"] == "decode")
    return int(decode["dispatches_after"]), int(decode["metal_dispatches"])


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-write", action="store_true", help="print, leave BENCHMARKS.md")
    args = ap.parse_args(argv)
    rows = []
    for model in args.models:
        runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
        for r in range(args.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            for off in order:
                runs[off].append(_bench(model, off, args.threads))
                print(f"  {model} round {r + 1} passes {'off' if off else 'on'}: {runs[off][-1]}")
        disp = {off: _dispatches(model, off, args.threads) for off in (False, True)}
        med = {off: {k: _median([x[k] for x in runs[off]]) for k in KEYS} for off in runs}
        rows.append((model, disp, med))
    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `bench/passes.py` "
        f"({args.rounds} alternating rounds, medians), {args.threads} threads; "
        '"off" = `RLX_DISABLE_PASS` naming every pass, graph-level fusions included.',
        "",
        "| model | passes | decode dispatches / token | Metal kernel dispatches / token "
        "| pp64 t/s | tg32 t/s | tg128 t/s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for model, disp, med in rows:
        for off in (True, False):
            cells = " | ".join(f"{med[off][k]:.1f}" for k in KEYS)
            d, m = disp[off]
            lines.append(f"| {MODELS[model]} | {'off' if off else 'on'} | {d} | {m} | {cells} |")
        ratio = " | ".join(f"{med[False][k] / med[True][k]:.2f}×" for k in KEYS)
        share = disp[False][0] / disp[True][0]
        mshare = disp[False][1] / max(disp[True][1], 1)
        lines.append(f"| {MODELS[model]} | **on / off** | {share:.2f}× | {mshare:.2f}× | {ratio} |")
    print("\n".join(lines))
    if not args.no_write:
        text = BENCH_MD.read_text() if BENCH_MD.exists() else "# Benchmarks\n"
        body = "\n".join([BEGIN, *lines, END])
        if BEGIN in text and END in text:
            head, rest = text.split(BEGIN, 1)
            text = head + body + rest.split(END, 1)[1]
        else:
            text = text.rstrip("\n") + "\n\n## Fusion passes on vs off\n\n" + body + "\n"
        BENCH_MD.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
