"""Decode speed against context depth: rlx (and optionally an earlier rlx build) beside llama.cpp.

Per model and round, alternating the engines (bench/harness.py ``alternate``):
llama.cpp's ``llama-bench -p 0 -n 64 -d D1,D2,..`` (one repetition,
``OMP_WAIT_POLICY=ACTIVE``, its best setting; ``--omp-passive`` for the other,
labelled) and a fresh rlx process running ``rlx.models.bench.depth_decode_tps``
per depth (64 decode steps after a D-token prompt, the prompt fed once; the
first pass compiles and warms up). Depths beyond the model's context (GGUF
``<arch>.context_length``, less the 65 decoded tokens) are skipped. With
``--baseline DIR`` a second rlx runs with ``PYTHONPATH=DIR`` (a ``python/`` tree
holding another build's ``_rlx`` module), so a change is measured before /
after in the same run.

Rounds follow compare.py's rules (bench/harness.py): each engine-round records
the 1-minute load and the other processes' CPU, rounds where others took more
than ``--max-others`` cores (default 0.10) are discarded, the notes say how many
were kept; figures are medians (min–max) over the kept rounds. The Markdown goes
into BENCHMARKS.md between the ``depth.py`` markers unless ``--no-write``.

    python bench/depth.py [--models smollm2 ...] [--depths 0 256 1024 2048 4096]
        [--rounds 6] [--threads 2] [--baseline /tmp/base/python] [--no-write]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import (  # noqa: E402
    MAX_OTHERS,
    MODELS,
    PASSIVE_HELP,
    Figures,
    alternate,
    context_length,
    llama_bench,
    llama_bench_rows,
    machine,
    model_path,
    now,
    rlx_child,
    rlx_version,
    round_log,
    round_notes,
    summarise,
    write_section,
)

TG = 64

_RLX_ROUND = """
import json, sys
import rlx
from rlx.models.bench import depth_decode_tps
model = rlx.load(sys.argv[1])
print(json.dumps({f"d{d}": depth_decode_tps(model, int(d), int(sys.argv[3]), 1)
                  for d in sys.argv[2].split(",")}))
"""


def llama_round(bench: str, gguf: Path, threads: int, depths: list[int],
                omp: str) -> tuple[Figures, str]:  # fmt: skip
    """tokens/s of 64 decode steps per depth (``dN``), one llama-bench run."""
    args = ["-p", "0", "-n", str(TG), "-d", ",".join(map(str, depths))]
    rows, rss, err = llama_bench_rows(bench, gguf, threads, args, omp)
    if err:
        return {}, err
    return {f"d{int(r.get('n_depth', 0))}": float(r["avg_ts"]) for r in rows}, ""


def rlx_round(gguf: Path, threads: int, depths: list[int],
              pythonpath: Optional[str]) -> tuple[Figures, str]:  # fmt: skip
    """tokens/s per depth from one fresh rlx process."""
    env = {"PYTHONPATH": pythonpath} if pythonpath else None
    args = [str(gguf), ",".join(map(str, depths)), str(TG)]
    fig, err = rlx_child(_RLX_ROUND, args, threads, env)
    fig.pop("rss_mb", None)
    return fig, err


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--depths", nargs="*", type=int, default=[0, 256, 1024, 2048, 4096])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-others", type=float, default=MAX_OTHERS,
                    help="discard rounds where other processes took more cores")  # fmt: skip
    ap.add_argument("--omp-passive", action="store_true", help=PASSIVE_HELP)
    ap.add_argument("--baseline", metavar="DIR", help="PYTHONPATH of an earlier rlx build")
    ap.add_argument("--baseline-name", default="rlx before")
    ap.add_argument("--no-write", action="store_true", help="print, leave BENCHMARKS.md")
    a = ap.parse_args(argv)
    omp = "PASSIVE" if a.omp_passive else "ACTIVE"
    bench = llama_bench()
    if bench is None:
        print("no llama-bench binary: WITH_LLAMA_BENCH=1 bash scripts/setup_peers.sh")
        return 1
    names: list[str] = []
    results: dict[str, dict[str, Any]] = {}
    depths_of: dict[str, list[int]] = {}
    for m in a.models:
        gguf = model_path(m)
        ctx = context_length(gguf)
        ds = [d for d in a.depths if ctx is None or d + TG + 1 <= ctx]
        depths_of[m] = ds
        engines: dict[str, Callable[[], tuple[Figures, str]]] = {}
        if a.baseline:
            engines[a.baseline_name] = lambda g=gguf, ds=ds: rlx_round(g, a.threads, ds, a.baseline)
        engines["rlx"] = lambda g=gguf, ds=ds: rlx_round(g, a.threads, ds, None)
        engines["llama.cpp"] = lambda g=gguf, ds=ds: llama_round(bench, g, a.threads, ds, omp)
        names = list(engines)
        results[m] = alternate(a.rounds, engines, m, a.max_others)
    label = "" if omp == "ACTIVE" else " — NOT the issue-14 setting (ACTIVE)"
    lines = [
        f"Measured {now()} by `bench/depth.py` ({a.rounds} alternating rounds, medians "
        f"(min–max) over the rounds in which other processes took ≤ {a.max_others} cores; "
        f"† = all rounds contaminated, all used), {a.threads} threads, tokens/s of {TG} "
        "decode steps after a prompt of the given depth (– = beyond the model's context).",
        "",
        f"- Machine: {machine()}",
        f"- llama.cpp: llama-bench `-p 0 -n {TG} -d …`, OMP_WAIT_POLICY={omp}{label}; "
        f"{rlx_version()}: `rlx.models.bench.depth_decode_tps`",
    ]
    for m in a.models:
        lines += round_notes(MODELS[m], results[m], names)
    last = a.depths[-1]
    lines += [
        "",
        "| model | engine | " + " | ".join(f"d{d}" for d in a.depths)
        + f" | d0 → d{min(2048, last)} |",
        "|---|---|" + "---:|" * (len(a.depths) + 1),
    ]  # fmt: skip
    for m in a.models:
        for e in names:
            cols, meds = [], {}
            for d in a.depths:
                if d not in depths_of[m]:
                    cols.append("–")
                    continue
                meds[d], text = summarise(results[m][e], f"d{d}")
                cols.append(text)
            ref = min(2048, last)
            lo, hi = meds.get(0), meds.get(ref)
            keep = f"{hi / lo:.2f}×" if lo and hi else "n/a"
            lines.append(f"| {MODELS[m]} | {e} | " + " | ".join(cols) + f" | {keep} |")
    for m in a.models:
        lines += ["", *round_log(MODELS[m], results[m], names)]
    print("\n".join(lines))
    if not a.no_write:
        write_section("depth.py", lines, "Decode against context depth")
    return 0


if __name__ == "__main__":
    sys.exit(main())
