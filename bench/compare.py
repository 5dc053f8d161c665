"""Side-by-side benchmark: rlx against llama.cpp on the same GGUF files, same thread count.

For each model (SmolLM2-135M Q4_1, Gemma3-270M Q4_K_M, Qwen2.5-0.5B Q4_K_M) the two
engines alternate round by round in one run (llama.cpp first in odd rounds, rlx first
in even ones; ``--rounds``, default 6):

* llama.cpp: ``llama-bench -t N -r 1 -p 64,256,512 -n 32,128 -o json`` (it warms up
  each test itself) under ``OMP_WAIT_POLICY=ACTIVE`` — its best setting on a quiet
  machine (issue 14; ``--omp-passive`` measures the other one, labelled in the
  output). Then ``llama-completion -p Hello -n 1 -c 512`` for the load time.
* rlx: a fresh ``$RLX_PYTHON`` (default ``<repo>/.venv/bin/python``) process with
  ``RLX_NUM_THREADS=RAYON_NUM_THREADS=N``: ``rlx.load``, one forward of a 2-token
  prompt (the load time ends there), then ``rlx.models.bench``'s ``prefill_tps`` /
  ``decode_tps`` once per figure (each compiles and warms up first, as llama-bench's
  warm-up run does).

Figures: ``ppN`` = tokens/s of an N-token prompt in one batch from an empty cache;
``tgN`` = tokens/s of N one-token decode steps after a one-token prompt (llama-bench's
conventions). **Peak RSS** is each engine process's own high-water mark (``VmHWM``) over
the same workload (load, every prefill and decode test of the round). **Load** is
file → first token possible: llama.cpp's own ``load time`` (``common_perf_print``;
llama.cpp restarts that clock at the model's load and stops it at the end of the
first evaluation, its warm-up run, so mmap page faults and graph set-up count);
rlx's is the same span, ``rlx.load()`` to the logits of a first 2-token prompt
(compile included). Neither counts process start-up (rlx's Python import is
reported apart, ``import_s`` in the per-round log).

Each round records the machine's 1-minute load and the CPU the other processes
took (bench/harness.py, bench/loadmon.py); a round in which other processes took
more than ``--max-others`` cores (default 0.10) is discarded, and the notes say how
many rounds were kept. Tables give medians (min–max) over the kept rounds.

**Bandwidth limit.** bench/membw.rs (built with ``rustc -O -C target-cpu=native``,
512-bit loads)
reads a 2 GiB buffer (far beyond the caches) with N threads, 10 repetitions;
it runs before the first and after the last model, and the limit is the best
repetition median. The bytes of weights a decode token reads come from each
GGUF's tensor table (harness.decode_bytes: every tensor but the token embedding,
whose one gathered row is negligible, plus the output head — the tied embedding
counted as the head). Limit = bandwidth ÷ bytes per token; each engine's
fraction = its tg tokens/s ÷ the limit. The KV cache a token reads is left out
(tg128, f32 K/V: about 3 % of SmolLM2's weight bytes, 1 % of Gemma3's, 0.4 % of
Qwen2.5's).

The Markdown goes into BENCHMARKS.md between the ``compare.py`` markers unless
``--no-write``. The peers live outside the repo: ``WITH_LLAMA_BENCH=1 bash
scripts/setup_peers.sh`` first.

    python bench/compare.py [--models smollm2 ...] [--rounds 6] [--threads 2]
        [--max-others 0.1] [--omp-passive] [--no-write]
    python bench/compare.py --models smollm2 --rounds 1 --quick   # harness check
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import (  # noqa: E402
    LLAMA_FLAGS,
    MAX_OTHERS,
    MODELS,
    PASSIVE_HELP,
    Figures,
    alternate,
    decode_bytes,
    llama_bench,
    llama_completion,
    llama_env,
    llama_pp_tg,
    machine,
    model_path,
    now,
    ratio,
    read_bandwidth,
    rlx_child,
    rlx_version,
    round_log,
    round_notes,
    run_child,
    summarise,
    write_section,
)

PP = [64, 256, 512]
TG = [32, 128]
BW_MIB = 2048

_RLX_ROUND = """
import json, sys, time
t0 = time.perf_counter()
import rlx
from rlx.models.bench import decode_tps, prefill_tps
t1 = time.perf_counter()
model = rlx.load(sys.argv[1])
model.next_logits([1, 2])
out = {"import_s": t1 - t0, "load_s": time.perf_counter() - t1}
for n in map(int, filter(None, sys.argv[2].split(","))):
    out[f"pp{n}"] = prefill_tps(model, n, 1)
for n in map(int, filter(None, sys.argv[3].split(","))):
    out[f"tg{n}"] = decode_tps(model, n, 1)
print(json.dumps(out))
"""

_LOAD_RE = re.compile(r"\bload time\s*=\s*([0-9.]+)\s*ms")


def llama_load_s(gguf: Path, threads: int, omp: str) -> tuple[Optional[float], str]:
    """llama.cpp's own load time (s) from a ``llama-completion`` run of one token."""
    exe = llama_completion()
    if exe is None:
        return None, "no llama-completion binary"
    cmd = [exe, "-m", str(gguf), "-t", str(threads), "-p", "Hello", "-n", "1", "-c", "512"]
    # llama.cpp logs from a worker thread; on a busy machine the process can exit
    # before the timing lines are written, so one missing line earns a second run
    for _ in range(2):
        ch = run_child([*cmd, "-no-cnv", "--temp", "0"], llama_env(omp))
        found = _LOAD_RE.findall(ch.err + ch.out)
        if ch.code == 0 and found:
            return float(found[-1]) / 1e3, ""
    return None, f"llama-completion ({ch.code}) printed no load time: {ch.err.strip()[-200:]}"


def llama_round(bench: str, gguf: Path, threads: int, omp: str, pp: list[int] = PP,
                tg: list[int] = TG) -> tuple[Figures, str]:  # fmt: skip
    """One llama.cpp round: llama-bench's figures, then its load time."""
    fig, err = llama_pp_tg(bench, gguf, threads, pp, tg, omp)
    if err:
        return fig, err
    fig["load_s"], err = llama_load_s(gguf, threads, omp)
    if err:
        print(f"  (load time n/a: {err})")
    return fig, ""


def rlx_round(gguf: Path, threads: int, pp: list[int] = PP,
              tg: list[int] = TG) -> tuple[Figures, str]:  # fmt: skip
    """One fresh rlx process: load, first forward, each figure once."""
    args = [str(gguf), ",".join(map(str, pp)), ",".join(map(str, tg))]
    return rlx_child(_RLX_ROUND, args, threads)


def bandwidth(threads: int, samples: list[dict[str, Any]]) -> None:
    """One bench/membw.rs reading (appended to ``samples``), printed."""
    res = read_bandwidth(BW_MIB, threads)
    samples.append(res)
    print(f"read bandwidth, {BW_MIB} MiB, {threads} threads: median {res['median_gbs']} GB/s "
          f"(max {res['max_gbs']})", flush=True)  # fmt: skip


ENGINES = ["llama.cpp", "rlx"]


def keys(pp: list[int], tg: list[int]) -> list[str]:
    """``pp64 .. tg128`` column keys."""
    return [f"pp{n}" for n in pp] + [f"tg{n}" for n in tg]


def speed_table(results: dict[str, dict[str, Any]], names: dict[str, str] = MODELS,
                cols_pp: list[int] = PP, cols_tg: list[int] = TG) -> list[str]:  # fmt: skip
    """Per model: llama.cpp, rlx and rlx / llama.cpp rows (``names``: model labels)."""
    ks = keys(cols_pp, cols_tg)
    head = "| model | engine | " + " | ".join(f"{k} t/s" for k in ks)
    lines = [head + " | peak RSS MiB | load s |", "|---|---|" + "---:|" * (len(ks) + 2)]
    cols = [*ks, "rss_mb", "load_s"]
    for model, sides in results.items():
        meds: dict[str, dict[str, Optional[float]]] = {}
        for side in ENGINES:
            cells, meds[side] = [], {}
            for k in cols:
                med, text = summarise(sides[side], k, 2 if k == "load_s" else 1)
                meds[side][k] = med
                cells.append(text)
            lines.append(f"| {names[model]} | {side} | " + " | ".join(cells) + " |")
        ratios = [ratio(meds["rlx"][k], meds["llama.cpp"][k]) for k in cols]
        lines.append(f"| {names[model]} | **rlx / llama.cpp** | " + " | ".join(ratios) + " |")
    return lines


def limit_table(results: dict[str, dict[str, Any]], bw: float, tgs: list[int] = TG) -> list[str]:
    """Per model: bytes per token, the limit, each engine's fraction of it at tg32 / tg128."""
    lines = [
        "| model | weights read / token MB | of which output head MB | limit tok/s | "
        + " | ".join(f"{e} tg{n} % of limit" for e in ENGINES for n in tgs)
        + " |",
        "|---|---:|---:|---:|" + "---:|" * (len(ENGINES) * len(tgs)),
    ]
    for model, sides in results.items():
        nb = sides["bytes"]
        limit = bw * 1e9 / nb["total"]
        cells = []
        for e in ENGINES:
            for n in tgs:
                med, _ = summarise(sides[e], f"tg{n}")
                cells.append("n/a" if med is None else f"{100 * med / limit:.0f} %")
        head = f"{nb['head'] / 1e6:.1f}" + (" (tied embedding)" if nb["tied"] else "")
        lines.append(f"| {MODELS[model]} | {nb['total'] / 1e6:.1f} | {head} | {limit:.0f} | "
                     + " | ".join(cells) + " |")  # fmt: skip
    return lines


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-others", type=float, default=MAX_OTHERS,
                    help="discard rounds where other processes took more cores")  # fmt: skip
    ap.add_argument("--omp-passive", action="store_true", help=PASSIVE_HELP)
    ap.add_argument("--no-write", action="store_true", help="print, leave BENCHMARKS.md")
    ap.add_argument("--quick", action="store_true",
                    help="pp64 / tg32 only, no write: a check that the harness runs")  # fmt: skip
    args = ap.parse_args(argv)
    pp, tg = ([64], [32]) if args.quick else (PP, TG)
    omp = "PASSIVE" if args.omp_passive else "ACTIVE"
    bench = llama_bench()
    if bench is None:
        print("no llama-bench binary: WITH_LLAMA_BENCH=1 bash scripts/setup_peers.sh")
        return 1
    print(f"llama.cpp: {bench} (OMP_WAIT_POLICY={omp})")
    bw_samples: list[dict[str, Any]] = []
    bandwidth(args.threads, bw_samples)
    results: dict[str, dict[str, Any]] = {}
    for model in args.models:
        gguf = model_path(model)
        engines = {
            "llama.cpp": lambda g=gguf: llama_round(bench, g, args.threads, omp, pp, tg),
            "rlx": lambda g=gguf: rlx_round(g, args.threads, pp, tg),
        }
        results[model] = alternate(args.rounds, engines, model, args.max_others)
        results[model]["bytes"] = decode_bytes(gguf)
    bandwidth(args.threads, bw_samples)
    bw = max(s["median_gbs"] for s in bw_samples)

    label = "" if omp == "ACTIVE" else " — NOT the issue-14 setting (ACTIVE)"
    section = [
        f"Measured {now()} by `bench/compare.py` ({args.rounds} alternating rounds, medians "
        f"(min–max) over the rounds in which other processes took ≤ {args.max_others} cores; "
        "† = every round of that engine was contaminated, all used), "
        f"{args.threads} threads, same GGUF for both engines.",
        "",
        f"- Machine: {machine()}",
        f"- llama.cpp: llama-bench, OMP_WAIT_POLICY={omp}{label}, built with {LLAMA_FLAGS}",
        f"- {rlx_version()}: fresh `{Path(sys.executable).name}` process per round, "
        "`rlx.load` + `rlx.models.bench` prefill_tps / decode_tps",
        f"- Read bandwidth ({BW_MIB} MiB buffer, {args.threads} threads, bench/membw.rs): "
        + ", ".join(f"{s['median_gbs']:.1f}" for s in bw_samples)
        + f" GB/s (median of 10 reads, before / after the models); limit uses {bw:.1f} GB/s",
    ]
    for model, sides in results.items():
        section += round_notes(MODELS[model], sides, ENGINES)
    section += ["", *speed_table(results, MODELS, pp, tg), "", *limit_table(results, bw, tg)]
    for model, sides in results.items():
        section += ["", *round_log(MODELS[model], sides, ENGINES)]
    if not (args.no_write or args.quick):
        write_section("compare.py", section)
    print("\n".join(section))
    return 0


if __name__ == "__main__":
    sys.exit(main())
