"""Decode speed against context depth: rlx (and optionally an earlier rlx build) beside llama.cpp.

For each model and round, alternating the engines: llama.cpp's ``llama-bench -p 0
-n 64 -d D1,D2,..`` (one repetition, ``OMP_WAIT_POLICY=ACTIVE``, its best setting)
and ``rlx bench MODEL --depth-only --depth D1 D2 .. --repeats 1`` (``tg64@dN``:
64 decode steps after an N-token prompt). With ``--baseline DIR`` a second rlx
runs with ``PYTHONPATH=DIR`` (a ``python/`` tree holding another build's
``_rlx`` module), so a change is measured before / after in the same run — on
a shared, loaded machine the ratio is what means something. Each round's
1-minute load average is recorded. Figures are medians with min–max over
``--rounds``; the Markdown goes into BENCHMARKS.md between the ``depth.py``
markers.

    python bench/depth.py [--models smollm2 ...] [--depths 0 256 1024 2048]
        [--rounds 3] [--threads 2] [--baseline /tmp/base/python] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import BENCHMARKS, MODELS, ROOT, _llama_bench, _machine, _model_path  # noqa: E402

BEGIN, END = "<!-- depth.py:begin -->", "<!-- depth.py:end -->"
TG = 64


def llama_round(bench: str, gguf: Path, threads: int, depths: list[int]) -> dict[int, float]:
    """tokens/s of 64 decode steps per depth, one llama-bench run."""
    cmd = [bench, "-m", str(gguf), "-t", str(threads), "-r", "1", "-o", "json", "-p", "0"]
    cmd += ["-n", str(TG), "-d", ",".join(map(str, depths))]
    env = dict(os.environ, OMP_WAIT_POLICY="ACTIVE")
    out = subprocess.run(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True, env=env
    )
    return {int(r.get("n_depth", 0)): float(r["avg_ts"]) for r in json.loads(out.stdout)}


def rlx_round(
    gguf: Path, threads: int, depths: list[int], pythonpath: Optional[str]
) -> dict[int, float]:
    """tokens/s per depth from one ``rlx bench`` (empty when it fails)."""
    exe = ROOT / ".venv" / "bin" / "rlx"
    cmd = [str(exe), "bench", str(gguf), "--json", "--threads", str(threads)]
    cmd += ["--depth-only", "--repeats", "1", "--depth", *map(str, depths)]
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        print(f"  rlx failed: {out.stderr.strip()[-400:]}")
        return {}
    res = json.loads(out.stdout.strip().splitlines()[-1])
    return {d: float(res[f"tg{TG}@d{d}"]) for d in depths if f"tg{TG}@d{d}" in res}


def cell(xs: list[float]) -> str:
    if not xs:
        return "n/a"
    if len(xs) == 1:
        return f"{xs[0]:.1f}"
    return f"{statistics.median(xs):.1f} ({min(xs):.0f}–{max(xs):.0f})"


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=["smollm2"], choices=list(MODELS))
    ap.add_argument("--depths", nargs="*", type=int, default=[0, 256, 1024, 2048])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--baseline", metavar="DIR", help="PYTHONPATH of an earlier rlx build")
    ap.add_argument("--baseline-name", default="rlx before")
    ap.add_argument("--no-write", action="store_true", help="print, leave BENCHMARKS.md")
    a = ap.parse_args(argv)
    bench = _llama_bench()
    engines: list[tuple[str, Optional[str]]] = [("rlx", None)]
    if a.baseline:
        engines.insert(0, (a.baseline_name, a.baseline))
    names = [*(n for n, _ in engines), *(["llama.cpp"] if bench else [])]
    res: dict[str, dict[str, dict[int, list[float]]]] = {
        m: {e: {d: [] for d in a.depths} for e in names} for m in a.models
    }
    loads: list[float] = []
    for r in range(a.rounds):
        for m in a.models:
            gguf = _model_path(m)
            order = engines if r % 2 == 0 else engines[::-1]
            for name, pp in order:
                for d, v in rlx_round(gguf, a.threads, a.depths, pp).items():
                    res[m][name][d].append(v)
            if bench:
                for d, v in llama_round(bench, gguf, a.threads, a.depths).items():
                    if d in res[m]["llama.cpp"]:
                        res[m]["llama.cpp"][d].append(v)
            loads.append(os.getloadavg()[0])
            print(f"round {r + 1} {m}: load {loads[-1]:.1f}; "
                  + "; ".join(f"{e} " + " ".join(f"{v[-1]:.1f}" if v else "-"
                                                  for v in res[m][e].values())
                              for e in names))  # fmt: skip
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"Measured {now} by `bench/depth.py` ({a.rounds} alternating rounds, medians with "
        f"min–max), {a.threads} threads, tokens/s of {TG} decode steps after a prompt of the "
        "given depth.",
        "",
        f"- Machine: {_machine()}; 1-minute load average per round "
        + ", ".join(f"{x:.1f}" for x in loads),
        "",
        "| model | engine | " + " | ".join(f"d{d}" for d in a.depths) + " | d0 → "
        f"d{a.depths[-1]} |",
        "|---|---|" + "---:|" * (len(a.depths) + 1),
    ]
    for m in a.models:
        for e in names:
            cols = [cell(res[m][e][d]) for d in a.depths]
            meds = [statistics.median(res[m][e][d]) if res[m][e][d] else None for d in a.depths]
            keep = f"{meds[-1] / meds[0]:.2f}×" if meds[0] and meds[-1] else "n/a"
            lines.append(f"| {MODELS[m]} | {e} | " + " | ".join(cols) + f" | {keep} |")
    text = "\n".join(lines)
    print(text)
    if not a.no_write:
        body = f"{BEGIN}\n{text}\n{END}"
        old = BENCHMARKS.read_text() if BENCHMARKS.exists() else "# Benchmarks\n"
        if BEGIN in old and END in old:
            pre, rest = old.split(BEGIN, 1)
            new = pre + body + rest.split(END, 1)[1]
        else:
            new = old.rstrip("\n") + "\n\n## Decode against context depth\n\n" + body + "\n"
        BENCHMARKS.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
