"""rlx against llama.cpp on realistic-size random LFM2 and Mamba2 GGUFs (issue 13 point 8).

The models are scripts/make_bench_models.py's (LFM2-350M and Mamba2-370m shapes,
random weights, one Q8_0 GGUF per model from llama.cpp's converter, the same file for
both engines; build them first with the peer python). Per model, alternating the
engines round by round (llama.cpp first in odd rounds, rlx first in even ones):

* llama.cpp: ``llama-bench -t N -r 1 -p 64,512 -n 32,128 -o json`` (it warms up each
  test itself) under ``OMP_WAIT_POLICY=ACTIVE``, llama.cpp's best setting on a quiet
  machine (issue 14; ``--omp-passive`` for the other one).
* rlx: a fresh ``$RLX_PYTHON`` (default ``<repo>/.venv/bin/python``) process with
  ``RLX_NUM_THREADS=RAYON_NUM_THREADS=N`` that loads the GGUF with ``rlx.load`` and
  runs ``rlx.models.bench``'s ``prefill_tps`` / ``decode_tps`` once per figure (each
  compiles and warms up first): ``ppN`` = an N-token prompt in one batch from an
  empty state, ``tgN`` = N one-token steps after a one-token prompt (llama-bench's
  conventions).

Peak RSS is each engine process's own (its ``VmHWM``, harness.run_child: load and
every test of the round).

Both GGUFs load in rlx (the ``gpt-2`` pre-tokenizer and the ``mamba2`` architecture
are read since the issue-13 GGUF work); a model rlx cannot load reads n/a, with rlx's
error in the notes. ``--models`` rewrites the whole section: run both models.

Each round's machine load and the CPU the *other* processes took during it are
recorded (bench/loadmon.py); rounds where others took more than 0.2 cores are dropped
from the medians (all are kept, and the table says so, if every round was busy).
Figures are medians with min–max over the kept rounds, plus rlx / llama.cpp ratios.
The Markdown goes into BENCHMARKS.md between the ``ssm.py`` markers unless
``--no-write`` or ``--quick`` (pp64 / tg32 only, 2 rounds: a check that the harness
runs, not a measurement).

    python bench/ssm.py --rounds 6 --threads 2          # the measurement (quiet machine)
    python bench/ssm.py --quick                         # harness check
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

from harness import LLAMA_FLAGS, write_section
from harness import cell as _cell
from harness import llama_bench as _llama_bench
from harness import machine as _machine
from harness import ratio as _ratio
from harness import rlx_version as _rlx_version
from harness import run_child as _run_child
from loadmon import BUSY_CORES, Monitor, RoundLoad

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
BENCHMARKS = ROOT / "BENCHMARKS.md"
BEGIN, END = "<!-- ssm.py:begin -->", "<!-- ssm.py:end -->"
MODELS = {
    "lfm2": "LFM2 (350M shape, random) Q8_0",
    "mamba2": "Mamba2 (370m shape, random) Q8_0",
}
Figures = dict[str, Optional[float]]

_RLX_ROUND = """
import json, sys, time
t0 = time.perf_counter()
import rlx
from rlx.models.bench import decode_tps, prefill_tps
model = rlx.load(sys.argv[1])
out = {"load_s": time.perf_counter() - t0}
for n in map(int, sys.argv[2].split(",")):
    out[f"pp{n}"] = prefill_tps(model, n, 1)
for n in map(int, sys.argv[3].split(",")):
    out[f"tg{n}"] = decode_tps(model, n, 1)
print(json.dumps(out))
"""


def run_child(cmd: list[str], env: dict[str, str]) -> tuple[int, str, str, float]:
    """Run ``cmd``; its exit code, stdout, stderr and peak RSS in MiB (harness.run_child)."""
    ch = _run_child(cmd, env)
    return ch.code, ch.out, ch.err, ch.rss_mib


def llama_round(
    bench: str, gguf: Path, threads: int, pp: list[int], tg: list[int], omp: str
) -> tuple[Figures, str]:
    """One llama-bench run: its tokens/s per test, or an error text."""
    cmd = [bench, "-m", str(gguf), "-t", str(threads), "-r", "1", "-o", "json"]
    cmd += ["-p", ",".join(map(str, pp)), "-n", ",".join(map(str, tg))]
    env = dict(os.environ, OMP_WAIT_POLICY=omp)
    code, out, err, rss = run_child(cmd, env)
    if code != 0:
        return {}, f"llama-bench failed ({code}): {err.strip()[-300:]}"
    res: Figures = {"rss_mb": rss}
    for row in json.loads(out):
        key = f"pp{row['n_prompt']}" if row["n_gen"] == 0 else f"tg{row['n_gen']}"
        res[key] = float(row["avg_ts"])
    return res, ""


def rlx_round(gguf: Path, threads: int, pp: list[int], tg: list[int]) -> tuple[Figures, str]:
    """One fresh rlx process: load + each figure once; its figures, or an error text."""
    py = os.environ.get("RLX_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
    env = dict(os.environ, RLX_NUM_THREADS=str(threads), RAYON_NUM_THREADS=str(threads))
    cmd = [py, "-c", _RLX_ROUND, str(gguf), ",".join(map(str, pp)), ",".join(map(str, tg))]
    try:
        code, out, err, rss = run_child(cmd, env)
    except OSError as e:
        return {}, f"rlx: {e}"
    if code != 0:
        return {}, "rlx: " + (err.strip().splitlines() or ["?"])[-1]
    res = json.loads(out.strip().splitlines()[-1])
    return {**{k: float(v) for k, v in res.items()}, "rss_mb": rss}, ""


def summarise(rounds: list[tuple[Figures, RoundLoad]], key: str) -> tuple[Optional[float], str]:
    """Median and ``median (min–max)`` text of ``key`` over the quiet rounds (all if none)."""
    quiet = [f[key] for f, ld in rounds if not ld.busy and f.get(key) is not None]
    vals = quiet or [f[key] for f, _ in rounds if f.get(key) is not None]
    if not vals:
        return None, "n/a"
    med = statistics.median(vals)  # type: ignore[type-var]
    lo, hi = min(vals), max(vals)  # type: ignore[type-var]
    if len(vals) == 1:
        return med, _cell(med)
    return med, f"{_cell(med)} ({_cell(lo)}–{_cell(hi)})"


def table(results: dict[str, dict[str, Any]], keys: list[str]) -> list[str]:
    """Markdown rows: per model llama.cpp, rlx and the ratio."""
    head = "| model | engine | " + " | ".join(f"{k} t/s" for k in keys) + " | peak RSS MiB |"
    lines = [head, "|---|---|" + "---:|" * (len(keys) + 1)]
    for model, sides in results.items():
        name = MODELS[model]
        meds: dict[str, dict[str, Optional[float]]] = {}
        for side in ("llama.cpp", "rlx"):
            rounds = sides[side]
            cells, meds[side] = [], {}
            for k in [*keys, "rss_mb"]:
                med, text = summarise(rounds, k)
                meds[side][k] = med
                cells.append(text)
            lines.append(f"| {name} | {side} | " + " | ".join(cells) + " |")
        ratios = [_ratio(meds["rlx"][k], meds["llama.cpp"][k]) for k in [*keys, "rss_mb"]]
        lines.append(f"| {name} | **rlx / llama.cpp** | " + " | ".join(ratios) + " |")
    return lines


def notes(results: dict[str, dict[str, Any]]) -> list[str]:
    """Per model and engine: rounds kept, load seen, errors."""
    out = []
    for model, sides in results.items():
        for side in ("llama.cpp", "rlx"):
            rounds: list[tuple[Figures, RoundLoad]] = sides[side]
            busy = sum(ld.busy for _, ld in rounds)
            others = [ld.others_cores for _, ld in rounds if ld.others_cores is not None]
            kept = (
                "all rounds busy, all kept"
                if rounds and busy == len(rounds)
                else (f"{len(rounds) - busy} of {len(rounds)} rounds kept")
            )
            span = f", others' CPU {min(others):.2f}–{max(others):.2f} cores" if others else ""
            errs = sorted(set(sides.get(f"{side}-errors", [])))
            err = f"; errors: {' / '.join(errs)}" if errs else ""
            out.append(f"- {MODELS[model]}, {side}: {kept}{span}{err}")
    return out


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point (see the module docstring)."""
    from make_bench_models import gguf_path

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="pp64 / tg32, 2 rounds, no write")
    ap.add_argument("--no-write", action="store_true", help="print, leave BENCHMARKS.md")
    ap.add_argument("--omp-passive", action="store_true", help="llama.cpp at OMP PASSIVE")
    args = ap.parse_args(argv)
    pp, tg = ([64], [32]) if args.quick else ([64, 512], [32, 128])
    rounds = 2 if args.quick else args.rounds
    keys = [f"pp{n}" for n in pp] + [f"tg{n}" for n in tg]
    omp = "PASSIVE" if args.omp_passive else "ACTIVE"
    bench = _llama_bench()
    if bench is None:
        print("no llama-bench binary: WITH_LLAMA_BENCH=1 bash scripts/setup_peers.sh")
        return 1
    print(f"llama.cpp: {bench} (OMP_WAIT_POLICY={omp})")
    results: dict[str, dict[str, Any]] = {}
    for model in args.models:
        gguf = gguf_path(model)
        if not gguf.exists():
            print(f"{gguf} missing: /work/peer-venv/bin/python scripts/make_bench_models.py")
            return 1
        sides: dict[str, Any] = {"llama.cpp": [], "rlx": [], "llama.cpp-errors": [],
                                 "rlx-errors": []}  # fmt: skip
        for r in range(rounds):
            order = ["llama.cpp", "rlx"] if r % 2 == 0 else ["rlx", "llama.cpp"]
            for side in order:
                with Monitor() as mon:
                    if side == "llama.cpp":
                        fig, err = llama_round(bench, gguf, args.threads, pp, tg, omp)
                    else:
                        fig, err = rlx_round(gguf, args.threads, pp, tg)
                if err:
                    sides[f"{side}-errors"].append(err)
                else:
                    sides[side].append((fig, mon.load))
                shown = {k: round(v, 1) for k, v in fig.items() if v is not None}
                print(f"  {model} round {r + 1} {side}: {shown or err} [{mon.load.describe()}]")
        results[model] = sides

    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    section = [
        f"Measured {when} by `bench/ssm.py` ({rounds} alternating rounds, medians "
        f"(min–max) over the rounds where other processes took ≤ {BUSY_CORES} cores), "
        f"{args.threads} threads; same Q8_0 GGUF for both engines "
        "(scripts/make_bench_models.py: random weights at the real models' shapes).",
        "",
        f"- Machine: {_machine()}",
        f"- llama.cpp: llama-bench, OMP_WAIT_POLICY={omp}, built with {LLAMA_FLAGS}",
        f"- {_rlx_version()}: `rlx.load` + `rlx.models.bench` prefill_tps / decode_tps",
        *notes(results),
        "",
        *table(results, keys),
    ]
    if not (args.no_write or args.quick):
        write_section("ssm.py", section)
    print("\n".join(section))
    return 0


if __name__ == "__main__":
    sys.exit(main())
