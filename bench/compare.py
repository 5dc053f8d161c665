"""Side-by-side benchmark: rlx against llama.cpp on the same GGUF files, same thread count.

For each model (SmolLM2-135M Q4_1, Gemma3-270M Q4_K_M, Qwen2.5-0.5B Q4_K_M) it
measures, alternating the two engines round by round in one run:

* llama.cpp: the ``llama-bench`` binary when one is found (``$LLAMA_BENCH``,
  ``$RLX_PEER_VENV/bin/llama-bench``), one repetition per round (llama-bench warms
  up itself); else ``llama-cpp-python`` in the peer python (a warm-up, then
  prefill of 64 / 256 tokens in one batch and decode of 32 / 128 single tokens).
  Its peak RSS (load + 64 prompt tokens) is measured in a child process.
* rlx: ``<repo>/.venv/bin/rlx bench GGUF --json --threads N``, whose JSON has
  ``load_s``, ``pp64``, ``pp256``, ``tg32``, ``tg128`` (tokens/s) and
  ``peak_rss_mib``; missing or failing, its cells read "n/a".

Figures are medians over ``--rounds`` (default 3). The Markdown table goes into
BENCHMARKS.md between the ``compare.py`` markers (the rest of the file is kept).
The peers live outside the repo: ``bash scripts/setup_peers.sh`` first.

    python bench/compare.py [--models smollm2 ...] [--rounds 3] [--threads 2] [--no-rlx]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
PEER_VENV = Path(os.environ.get("RLX_PEER_VENV", "/work/peer-venv"))
BENCHMARKS = ROOT / "BENCHMARKS.md"
BEGIN, END = "<!-- compare.py:begin -->", "<!-- compare.py:end -->"
MODELS = {
    "smollm2": "SmolLM2-135M Q4_1",
    "gemma3-270m": "Gemma3-270M Q4_K_M",
    "qwen2.5-0.5b": "Qwen2.5-0.5B Q4_K_M",
}
PP = (64, 256)
TG = (32, 128)
#: Flags the peer llama.cpp is built with (scripts/setup_peers.sh).
LLAMA_FLAGS = "AVX2+FMA+F16C+BMI2+AVX512(F,VNNI,BF16), AMX off, GGML_NATIVE off"

#: libgomp's default active spin-wait at llama.cpp's per-op barriers collapses its
#: throughput 5-50x when other processes share the cores (measured here: SmolLM2 tg32
#: 2.4 vs 33 tok/s on a loaded 2-core machine); passive waiting is the fair setting.
OMP_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}

Figures = dict[str, Optional[float]]  # keys pp64 pp256 tg32 tg128 rss_mb load_s
KEYS = [f"pp{n}" for n in PP] + [f"tg{n}" for n in TG] + ["rss_mb"]


# --------------------------------------------------------------- llama.cpp
def _llama_bench() -> Optional[str]:
    for cand in (os.environ.get("LLAMA_BENCH"), str(PEER_VENV / "bin" / "llama-bench")):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return cand
    return shutil.which("llama-bench")


def _child_peak_rss_mb(cmd: list[str]) -> Optional[float]:
    """Runs ``cmd`` and returns its peak RSS (MiB) from ``wait4``; None if it failed."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_llama_env()
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        return None
    return usage.ru_maxrss / 1024.0  # KiB on Linux


def _llama_env() -> dict[str, str]:
    return dict(os.environ, **OMP_ENV)


def _llama_round(bench: Optional[str], gguf: Path, threads: int) -> Figures:
    """One round of llama.cpp throughput figures (tokens/s)."""
    if bench is not None:
        cmd = [bench, "-m", str(gguf), "-t", str(threads), "-r", "1", "-o", "json"]
        cmd += ["-p", ",".join(map(str, PP)), "-n", ",".join(map(str, TG))]
        out = subprocess.run(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True, env=_llama_env()
        )
        res: Figures = {}
        for row in json.loads(out.stdout):
            key = f"pp{row['n_prompt']}" if row["n_gen"] == 0 else f"tg{row['n_gen']}"
            res[key] = float(row["avg_ts"])
        return res
    py = str(PEER_VENV / "bin" / "python")
    cmd = [py, __file__, "--llama-cpp-python", str(gguf), "--threads", str(threads)]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, check=True, text=True, env=_llama_env())
    return json.loads(out.stdout.strip().splitlines()[-1])


def _llama_rss_mb(bench: Optional[str], gguf: Path, threads: int) -> Optional[float]:
    """Peak RSS of a process that loads the model and runs a 64-token prompt."""
    if bench is not None:
        cmd = [bench, "-m", str(gguf), "-t", str(threads), "-r", "1", "-p", "64", "-n", "0"]
        return _child_peak_rss_mb([*cmd, "--no-warmup"])
    py = str(PEER_VENV / "bin" / "python")
    return _child_peak_rss_mb([py, __file__, "--llama-cpp-python-rss", str(gguf)])


def _llama_cpp_python(gguf: str, threads: int) -> Figures:
    """(runs in the peer python) prefill / decode tokens/s with llama-cpp-python."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=gguf, n_ctx=512, n_batch=512, n_threads=threads, verbose=False)
    vocab = llm.n_vocab()
    tokens = [(7919 * i + 13) % (vocab - 1000) + 500 for i in range(max(PP) + max(TG))]
    llm.reset()
    llm.eval(tokens[:16])  # warm-up
    res: Figures = {}
    for n in PP:
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(tokens[:n])
        res[f"pp{n}"] = n / (time.perf_counter() - t0)
    for n in TG:
        llm.reset()
        llm.eval(tokens[:1])
        t0 = time.perf_counter()
        for tok in tokens[1 : n + 1]:
            llm.eval([tok])
        res[f"tg{n}"] = n / (time.perf_counter() - t0)
    return res


def _llama_cpp_python_rss(gguf: str) -> None:
    """(runs in the peer python) load the model and evaluate 64 tokens."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=gguf, n_ctx=512, n_batch=512, n_threads=2, verbose=False)
    llm.eval([(7919 * i + 13) % 30000 + 500 for i in range(64)])
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)


def _llama_version(bench: Optional[str]) -> str:
    py = str(PEER_VENV / "bin" / "python")
    try:
        out = subprocess.run(
            [py, "-c", "import llama_cpp; print(llama_cpp.__version__)"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            check=True,
        )
        ver = f"llama.cpp vendored in llama-cpp-python {out.stdout.strip()}"
    except (OSError, subprocess.CalledProcessError):
        ver = "llama.cpp"
    how = "llama-bench binary" if bench else "llama-cpp-python eval() timing"
    if OMP_ENV:
        how += ", " + " ".join(f"{k}={v}" for k, v in OMP_ENV.items())
    return f"{ver}, {how}, built with {LLAMA_FLAGS}"


# --------------------------------------------------------------------- rlx
def _rlx_round(gguf: Path, threads: int) -> Optional[dict[str, Any]]:
    """One ``rlx bench`` run, or None when the command is missing or fails."""
    exe = ROOT / ".venv" / "bin" / "rlx"
    if not exe.exists():
        return None
    cmd = [str(exe), "bench", str(gguf), "--json", "--threads", str(threads)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True)
    except OSError:
        return None
    if out.returncode != 0:
        print(f"  rlx bench failed ({out.returncode}): {out.stderr.strip()[-300:]}")
        return None
    for line in reversed(out.stdout.strip().splitlines()):
        if line.lstrip().startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                break
    try:
        return json.loads(out.stdout)
    except json.JSONDecodeError:
        print("  rlx bench printed no JSON")
        return None


def _rlx_figures(res: dict[str, Any]) -> Figures:
    fig: Figures = {}
    # `rlx bench --json` prints flat keys (pp64, tg32, peak_rss_mib); the
    # nested form ({"prefill_tps": {"64": ..}}) is accepted too.
    for n in PP:
        fig[f"pp{n}"] = _num(res.get(f"pp{n}", res.get("prefill_tps", {}).get(str(n))))
    for n in TG:
        fig[f"tg{n}"] = _num(res.get(f"tg{n}", res.get("decode_tps", {}).get(str(n))))
    fig["rss_mb"] = _num(res.get("peak_rss_mib", res.get("peak_rss_mb")))
    fig["load_s"] = _num(res.get("load_s"))
    return fig


def _num(x: Any) -> Optional[float]:
    return float(x) if isinstance(x, (int, float)) else None


# ------------------------------------------------------------------ driver
def _model_path(model: str) -> Path:
    """The GGUF file of ``model`` via rlx's ``ensure_model`` (repo's .venv if needed)."""
    try:
        from rlx.io.models import ensure_model

        return ensure_model(model)
    except ImportError:
        py = os.environ.get("RLX_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
        code = (
            "import sys; from rlx.io.models import ensure_model; print(ensure_model(sys.argv[1]))"
        )
        out = subprocess.run([py, "-c", code, model], stdout=subprocess.PIPE, check=True)
        return Path(out.stdout.decode().strip().splitlines()[-1])


def _median(samples: list[Figures], key: str) -> Optional[float]:
    vals = [s[key] for s in samples if s.get(key) is not None]
    return statistics.median(vals) if vals else None  # type: ignore[type-var]


def _cell(x: Optional[float], digits: int = 1) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _ratio(a: Optional[float], b: Optional[float]) -> str:
    if a is None or b is None or b == 0:
        return "n/a"
    return f"{a / b:.2f}×"


def _machine() -> str:
    cpu = platform.processor() or "?"
    try:
        out = subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()
        flags = [ln for ln in out.splitlines() if ln.startswith("Flags:")]
        isa = [
            f
            for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")
            if flags and f" {f}" in flags[0]
        ]
        cpu += f" ({', '.join(isa)})"
    except (OSError, subprocess.CalledProcessError):
        pass
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{cpu}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}; "
        f"load average at the end {load} (shared machine: figures are noisy)"
    )


def _rlx_version() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
            stdout=subprocess.PIPE,
            text=True,
            check=True,
        )
        return f"rlx at {out.stdout.strip()}"
    except (OSError, subprocess.CalledProcessError):
        return "rlx"


def _table(results: dict[str, dict[str, Figures]]) -> list[str]:
    head = "| model | engine | pp64 t/s | pp256 t/s | tg32 t/s | tg128 t/s | peak RSS MiB |"
    lines = [head, "|---|---|---:|---:|---:|---:|---:|"]
    for model, sides in results.items():
        lc, rx = sides["llama.cpp"], sides["rlx"]
        name = MODELS[model]
        lines.append(f"| {name} | llama.cpp | " + " | ".join(_cell(lc.get(k)) for k in KEYS) + " |")
        lines.append(f"| {name} | rlx | " + " | ".join(_cell(rx.get(k)) for k in KEYS) + " |")
        ratios = [_ratio(rx.get(k), lc.get(k)) for k in KEYS]
        lines.append(f"| {name} | **rlx / llama.cpp** | " + " | ".join(ratios) + " |")
    return lines


def _write_markdown(section: list[str]) -> None:
    body = "\n".join([BEGIN, *section, END])
    if BENCHMARKS.exists():
        text = BENCHMARKS.read_text()
        if BEGIN in text and END in text:
            pre, rest = text.split(BEGIN, 1)
            post = rest.split(END, 1)[1]
            BENCHMARKS.write_text(pre + body + post)
            return
        BENCHMARKS.write_text(text.rstrip("\n") + "\n\n" + body + "\n")
        return
    intro = (
        "# Benchmarks\n\n"
        "rlx against llama.cpp on the same GGUF files and the same thread count, measured side\n"
        "by side in one run of `bench/compare.py` (peers: `scripts/setup_peers.sh`).\n"
        "Throughput in tokens/s (higher is better): ppN = prefill of an N-token prompt in one\n"
        "batch, tgN = decode of N tokens one at a time. Peak RSS: llama.cpp's is a process\n"
        "that loads the model and runs a 64-token prompt; rlx's is the one its `rlx bench`\n"
        "reports. Ratios are rlx / llama.cpp (above 1× = rlx faster; for RSS, above 1× = rlx\n"
        "uses more memory).\n\n"
    )
    BENCHMARKS.write_text(intro + body + "\n")


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-rlx", action="store_true", help="measure llama.cpp only")
    ap.add_argument("--no-write", action="store_true", help="print, leave BENCHMARKS.md")
    ap.add_argument("--omp-active", action="store_true", help="keep libgomp's default spin-waiting")
    ap.add_argument("--llama-cpp-python", metavar="GGUF", help=argparse.SUPPRESS)
    ap.add_argument("--llama-cpp-python-rss", metavar="GGUF", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.llama_cpp_python:
        print(json.dumps(_llama_cpp_python(args.llama_cpp_python, args.threads)))
        return 0
    if args.llama_cpp_python_rss:
        _llama_cpp_python_rss(args.llama_cpp_python_rss)
        return 0

    if args.omp_active:
        OMP_ENV.clear()
    bench = _llama_bench()
    print(f"llama.cpp: {bench or 'llama-cpp-python (no llama-bench binary found)'}")
    results: dict[str, dict[str, Figures]] = {}
    for model in args.models:
        gguf = _model_path(model)
        lc_rounds: list[Figures] = []
        rx_rounds: list[Figures] = []
        for r in range(args.rounds):
            order = ["llama.cpp", "rlx"] if r % 2 == 0 else ["rlx", "llama.cpp"]
            for side in order:
                if side == "llama.cpp":
                    lc_rounds.append(_llama_round(bench, gguf, args.threads))
                    print(f"  {model} round {r + 1} llama.cpp {lc_rounds[-1]}")
                elif not args.no_rlx:
                    res = _rlx_round(gguf, args.threads)
                    if res is not None:
                        rx_rounds.append(_rlx_figures(res))
                        print(f"  {model} round {r + 1} rlx {rx_rounds[-1]}")
        lc = {k: _median(lc_rounds, k) for k in KEYS if k != "rss_mb"}
        lc["rss_mb"] = _llama_rss_mb(bench, gguf, args.threads)
        rx = {k: _median(rx_rounds, k) for k in [*KEYS, "load_s"]}
        results[model] = {"llama.cpp": lc, "rlx": rx}
        print(f"{model}: llama.cpp {lc}\n{model}: rlx {rx}")

    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    section = [
        f"Measured {when} by `bench/compare.py` ({args.rounds} alternating rounds, medians), "
        f"{args.threads} threads.",
        "",
        f"- Machine: {_machine()}",
        f"- llama.cpp: {_llama_version(bench)}",
        f"- {_rlx_version()}: `.venv/bin/rlx bench MODEL --json --threads {args.threads}`",
        "",
        *_table(results),
    ]
    if not args.no_write:
        _write_markdown(section)
    print("\n".join(section))
    return 0


if __name__ == "__main__":
    sys.exit(main())
