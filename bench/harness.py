"""Shared machinery of the benchmarks (compare.py, depth.py, moe.py, ssm.py, vit.py, ...).

* Engines run as child processes (:func:`run_child`): exit code, output, wall time
  and peak RSS (the child's own ``VmHWM`` high-water mark, polled; not ``wait4``,
  whose Linux figure includes the parent's size at fork).
* Rounds alternate the engines (:func:`alternate`: the first engine leads in odd
  rounds, the last in even ones). Each engine-round runs inside a
  :class:`loadmon.Monitor`, which records the 1-minute load and the CPU the *other*
  processes of the machine took during it (``/proc/stat`` minus this process's and
  its waited-for children's CPU time; the busiest other processes from
  ``/proc/[pid]/stat``). **Contamination rule:** a round in which other processes
  took more than :data:`MAX_OTHERS` cores (``--max-others``) is discarded from the
  medians; the notes say how many rounds were kept. If every round of a cell was
  contaminated, all are used and the cell is marked ``†``.
* Figures are medians with min–max over the kept rounds (:func:`summarise`).
* llama.cpp runs as ``llama-bench`` under ``OMP_WAIT_POLICY=ACTIVE`` (its best
  setting on a quiet machine, issue 14); ``PASSIVE`` only when asked, and labelled.
* :func:`read_bandwidth` runs bench/membw.rs (built once with ``rustc -O -C
  target-cpu=native``, 512-bit loads), :func:`decode_bytes` reads a GGUF's tensor table.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadmon import Monitor, RoundLoad  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PEER_VENV = Path(os.environ.get("RLX_PEER_VENV", "/work/peer-venv"))
BENCHMARKS = ROOT / "BENCHMARKS.md"
RLX_PYTHON = os.environ.get("RLX_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
PEER_PYTHON = os.environ.get("PEER_PYTHON", str(PEER_VENV / "bin" / "python"))
MODELS = {
    "smollm2": "SmolLM2-135M Q4_1",
    "gemma3-270m": "Gemma3-270M Q4_K_M",
    "qwen2.5-0.5b": "Qwen2.5-0.5B Q4_K_M",
}
#: Flags the peer llama.cpp is built with (scripts/setup_peers.sh).
LLAMA_FLAGS = "AVX2+FMA+F16C+BMI2+AVX512(F,VNNI,BF16), AMX off, GGML_NATIVE off, OpenMP"
#: Rounds in which other processes took more than this many cores are discarded.
MAX_OTHERS = 0.10
PASSIVE_HELP = "llama.cpp at OMP_WAIT_POLICY=PASSIVE (labelled: not the issue-14 setting)"

Figures = dict[str, Optional[float]]
Rounds = list[tuple[Figures, RoundLoad]]


# ------------------------------------------------------------------ children
@dataclass
class Child:
    """A finished child process."""

    code: int
    out: str
    err: str
    rss_mib: float
    wall_s: float


def run_child(cmd: list[str], env: Optional[dict[str, str]] = None) -> Child:
    """Run ``cmd`` to completion; its output, wall time and peak RSS.

    Peak RSS is the child's own ``VmHWM`` (``/proc/PID/status``), polled every
    10 ms until it exits; the largest value read is kept (VmHWM only grows, so
    at most the last 10 ms are missed). ``wait4``'s ``ru_maxrss`` is *not* used on
    Linux: the kernel carries the parent's resident size at fork / exec into the
    child's figure (a child of a 700 MiB bench process reports ≥ 700 MiB even for
    ``/bin/true``), which made every engine look as big as the harness itself.
    """
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, text=True)
        hwm_kib = 0.0
        status_path = f"/proc/{proc.pid}/status"
        while True:
            hwm_kib = max(hwm_kib, _vm_hwm_kib(status_path))
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid != 0:
                break
            time.sleep(0.01)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if not sys.platform.startswith("linux"):  # no /proc: ru_maxrss (bytes on macOS)
            hwm_kib = usage.ru_maxrss / (1024.0 if sys.platform == "darwin" else 1.0)
        return Child(proc.returncode, out.read(), err.read(), hwm_kib / 1024.0, wall)


def _vm_hwm_kib(status_path: str) -> float:
    """``VmHWM`` (kiB) from a ``/proc/PID/status`` file; 0 when gone or not there."""
    try:
        with open(status_path) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return float(line.split()[1])
    except OSError:
        pass
    return 0.0


def last_json(text: str) -> Optional[dict[str, Any]]:
    """The last line of ``text`` that parses as a JSON object."""
    for line in reversed(text.strip().splitlines()):
        if line.lstrip().startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                return obj
    return None


def rlx_env(threads: int, extra: Optional[dict[str, str]] = None) -> dict[str, str]:
    """Environment of an rlx child: ``RLX_NUM_THREADS`` = ``RAYON_NUM_THREADS`` = threads."""
    env = dict(os.environ, RLX_NUM_THREADS=str(threads), RAYON_NUM_THREADS=str(threads))
    return {**env, **(extra or {})}


def rlx_child(script: str, args: list[str], threads: int,
              extra_env: Optional[dict[str, str]] = None) -> tuple[Figures, str]:  # fmt: skip
    """Run ``script`` in a fresh ``RLX_PYTHON``; its last JSON line + ``rss_mb``, or an error."""
    try:
        ch = run_child([RLX_PYTHON, "-c", script, *args], rlx_env(threads, extra_env))
    except OSError as e:
        return {}, f"rlx: {e}"
    res = last_json(ch.out) if ch.code == 0 else None
    if res is None:
        return {}, f"rlx ({ch.code}): " + (ch.err.strip().splitlines() or ["no JSON"])[-1][-300:]
    return {**{k: float(v) for k, v in res.items() if _is_num(v)}, "rss_mb": ch.rss_mib}, ""


def engine_child(engine: str, script: str, threads: int, args: list[str],
                 extra_env: Optional[dict[str, str]] = None,
                 raw: Optional[dict[str, Any]] = None) -> tuple[Figures, str]:  # fmt: skip
    """One engine-round of a script that runs itself as the child: ``script --child ENGINE
    --threads N *args`` in :data:`PEER_PYTHON` (engine ``torch``) or :data:`RLX_PYTHON`,
    with ``PYTHONWARNINGS=ignore`` and ``extra_env``. Its last JSON line's numbers +
    ``rss_mb``, or an error line; ``raw`` (when given) receives the whole JSON object."""
    py = PEER_PYTHON if engine == "torch" else RLX_PYTHON
    extra = {"PYTHONWARNINGS": "ignore", **(extra_env or {})}
    cmd = [py, script, "--child", engine, "--threads", str(threads), *args]
    ch = run_child(cmd, rlx_env(threads, extra))
    res = last_json(ch.out) if ch.code == 0 else None
    if res is None:
        return {}, f"{engine}: " + (ch.err.strip().splitlines() or ["?"])[-1][-300:]
    if raw is not None:
        raw.update(res)
    return {**{k: float(v) for k, v in res.items() if _is_num(v)}, "rss_mb": ch.rss_mib}, ""


def engine_parser(doc: str, omp: Optional[str], omp_help: Optional[str] = None,
                  ) -> argparse.ArgumentParser:  # fmt: skip
    """The options every rlx-vs-peer script shares (``--child`` is the hidden child mode;
    ``--omp`` the peer's ``OMP_WAIT_POLICY``, default ``omp``); the script adds its own."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--child", choices=["rlx", "torch"], help=argparse.SUPPRESS)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--omp", choices=["ACTIVE", "PASSIVE"], default=omp, help=omp_help)
    p.add_argument("--max-others", type=float, default=MAX_OTHERS)
    p.add_argument("--no-write", action="store_true")
    return p


def bench_dir(name: str) -> Path:
    """``name`` under ``$RLX_BENCH_DIR`` (default ``/tmp/rlx-bench``): a generated model's home."""
    return Path(os.environ.get("RLX_BENCH_DIR", "/tmp/rlx-bench")) / name


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


# ----------------------------------------------------------------- llama.cpp
def llama_bench() -> Optional[str]:
    """``$LLAMA_BENCH``, the peer venv's ``llama-bench`` or one on ``PATH``."""
    for cand in (os.environ.get("LLAMA_BENCH"), str(PEER_VENV / "bin" / "llama-bench")):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return cand
    return shutil.which("llama-bench")


def llama_completion() -> Optional[str]:
    """The ``llama-completion`` binary next to llama-bench (load / first-token timing)."""
    bench = llama_bench()
    cand = Path(bench).with_name("llama-completion") if bench else None
    if cand is not None and cand.is_file():
        return str(cand)
    return shutil.which("llama-completion")


def llama_env(omp: str) -> dict[str, str]:
    """The environment llama.cpp runs in: ``OMP_WAIT_POLICY=omp`` (ACTIVE or PASSIVE)."""
    return dict(os.environ, OMP_WAIT_POLICY=omp)


def llama_bench_rows(bench: str, gguf: Path, threads: int, args: list[str],
                     omp: str) -> tuple[list[dict[str, Any]], float, str]:  # fmt: skip
    """One ``llama-bench -r 1 -o json ARGS`` run: its rows, peak RSS (MiB), error text."""
    cmd = [bench, "-m", str(gguf), "-t", str(threads), "-r", "1", "-o", "json", *args]
    ch = run_child(cmd, llama_env(omp))
    if ch.code != 0:
        return [], ch.rss_mib, f"llama-bench ({ch.code}): {ch.err.strip()[-300:]}"
    try:
        return json.loads(ch.out), ch.rss_mib, ""
    except json.JSONDecodeError:
        return [], ch.rss_mib, "llama-bench printed no JSON"


def llama_pp_tg(bench: str, gguf: Path, threads: int, pp: list[int], tg: list[int],
                omp: str) -> tuple[Figures, str]:  # fmt: skip
    """``ppN`` / ``tgN`` tokens/s of one llama-bench run, with ``rss_mb``."""
    args = ["-p", ",".join(map(str, pp)), "-n", ",".join(map(str, tg))]
    rows, rss, err = llama_bench_rows(bench, gguf, threads, args, omp)
    if err:
        return {}, err
    res: Figures = {"rss_mb": rss}
    for row in rows:
        key = f"pp{row['n_prompt']}" if row["n_gen"] == 0 else f"tg{row['n_gen']}"
        res[key] = float(row["avg_ts"])
    return res, ""


# -------------------------------------------------------------------- rounds
def alternate(rounds: int, engines: dict[str, Callable[[], tuple[Figures, str]]],
              label: str, max_others: float = MAX_OTHERS) -> dict[str, Any]:  # fmt: skip
    """Run every engine once per round, order reversed every other round, each under a
    :class:`Monitor`. Returns ``{engine: [(figures, load)], engine + "-errors": [..]}``."""
    res: dict[str, Any] = {}
    for name in engines:
        res[name], res[f"{name}-errors"] = [], []
    names = list(engines)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            with Monitor(max_others) as mon:
                fig, err = engines[name]()
            if err:
                res[f"{name}-errors"].append(err)
            else:
                res[name].append((fig, mon.load))
            shown = {k: round(v, 1) for k, v in fig.items() if v is not None}
            print(f"  {label} round {r + 1} {name}: {shown or err} [{mon.load.describe()}]",
                  flush=True)  # fmt: skip
    return res


def kept(rounds: Rounds) -> Rounds:
    """The rounds not contaminated (all of them if every one was)."""
    quiet = [(f, ld) for f, ld in rounds if not ld.busy]
    return quiet or rounds


def summarise(rounds: Rounds, key: str, digits: int = 1) -> tuple[Optional[float], str]:
    """Median and ``median (min–max)`` text of ``key`` over the kept rounds."""
    mark = "" if any(not ld.busy for _, ld in rounds) or not rounds else "†"
    vals = [f[key] for f, _ in kept(rounds) if f.get(key) is not None]
    if not vals:
        return None, "n/a"
    med = statistics.median(vals)  # type: ignore[type-var]
    lo, hi = min(vals), max(vals)  # type: ignore[type-var]
    text = cell(med, digits)
    if len(vals) > 1:
        text += f" ({cell(lo, digits)}–{cell(hi, digits)})"
    return med, text + mark


def round_notes(label: str, sides: dict[str, Any], engines: list[str]) -> list[str]:
    """``- label, engine: k of n rounds kept, load a–b, others' CPU c–d cores; errors``."""
    out = []
    for side in engines:
        rounds: Rounds = sides.get(side, [])
        busy = sum(ld.busy for _, ld in rounds)
        if rounds and busy == len(rounds):
            what = f"all {len(rounds)} rounds contaminated, all used (†)"
        else:
            what = f"{len(rounds) - busy} of {len(rounds)} rounds kept"
        loads = [ld.load1_end for _, ld in rounds if ld.load1_end is not None]
        others = [ld.others_cores for _, ld in rounds if ld.others_cores is not None]
        span = f", 1-min load {min(loads):.1f}–{max(loads):.1f}" if loads else ""
        span += f", others' CPU {min(others):.2f}–{max(others):.2f} cores" if others else ""
        errs = sorted(set(sides.get(f"{side}-errors", [])))
        err = f"; errors: {' / '.join(errs)}" if errs else ""
        out.append(f"- {label}, {side}: {what}{span}{err}")
    return out


def round_log(label: str, sides: dict[str, Any], engines: list[str]) -> list[str]:
    """Every engine-round's load line (``<details>`` block for BENCHMARKS.md)."""
    out = [f"<details><summary>{label}: load and other processes' CPU per round</summary>", ""]
    for side in engines:
        for i, (_, ld) in enumerate(sides.get(side, [])):
            out.append(f"- {side} run {i + 1}: {ld.describe()}")
    return [*out, "", "</details>"]


def median_time(
    fn: Callable[[], object],
    runs: int,
    clock: Callable[[], float] = time.perf_counter,
    warmups: int = 1,
) -> float:
    """Median seconds (by ``clock``, default wall) of ``runs`` calls of ``fn`` after
    ``warmups`` untimed calls."""
    for _ in range(warmups):
        fn()
    times = []
    for _ in range(runs):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return statistics.median(times)


def cell(x: Optional[float], digits: int = 1) -> str:
    """``x`` with ``digits`` decimals, ``n/a`` for None."""
    return "n/a" if x is None else f"{x:.{digits}f}"


def ratio(a: Optional[float], b: Optional[float]) -> str:
    """``a / b`` as ``1.23×``, ``n/a`` when either is missing."""
    if a is None or b is None or b == 0:
        return "n/a"
    return f"{a / b:.2f}×"


# ------------------------------------------------------------- environment
def model_path(model: str) -> Path:
    """The GGUF file of ``model`` via rlx's ``ensure_model`` (in ``RLX_PYTHON``)."""
    code = "import sys; from rlx.io.models import ensure_model; print(ensure_model(sys.argv[1]))"
    out = subprocess.run([RLX_PYTHON, "-c", code, model], stdout=subprocess.PIPE, check=True)
    return Path(out.stdout.decode().strip().splitlines()[-1])


def machine() -> str:
    """CPU, its vector ISA, CPU count, kernel and the load average now."""
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
        f"load average at the end {load}"
    )


def rlx_version() -> str:
    """``rlx at <git describe>``."""
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


def now() -> str:
    """The UTC time, ``YYYY-MM-DD HH:MM UTC``."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def publish(name: str, heading: str, label: str, sides: dict[str, Any], engines: list[str],
            lines: list[str], write: bool = True) -> None:  # fmt: skip
    """Print ``lines`` followed by the rounds' notes and load log (``label``), and, when
    ``write``, store the whole section in BENCHMARKS.md as :func:`write_section` ``name``."""
    notes = round_notes(label, sides, engines)
    section = [*lines, "", *notes, "", *round_log(label, sides, engines)]
    print("\n".join(section))
    if write:
        write_section(name, section, heading)


def write_section(name: str, lines: list[str], heading: str = "") -> None:
    """Replace the text between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` in
    BENCHMARKS.md (append it, under ``heading``, when the markers are absent)."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    body = "\n".join([begin, *lines, end])
    text = BENCHMARKS.read_text() if BENCHMARKS.exists() else "# Benchmarks\n"
    if begin in text and end in text:
        pre, rest = text.split(begin, 1)
        BENCHMARKS.write_text(pre + body + rest.split(end, 1)[1])
    else:
        head = f"## {heading}\n\n" if heading else ""
        BENCHMARKS.write_text(text.rstrip("\n") + "\n\n" + head + body + "\n")


# --------------------------------------------------------- bandwidth limit
def _membw_binary() -> Path:
    """bench/membw.rs compiled (once per source version) with ``-O -C target-cpu=native
    -C target-feature=-prefer-256-bit`` (512-bit vector loads where the CPU has them)."""
    src = Path(__file__).resolve().parent / "membw.rs"
    tag = hashlib.sha256(src.read_bytes()).hexdigest()[:12]
    exe = Path(tempfile.gettempdir()) / f"rlx-membw-{tag}"
    if not exe.exists():
        tmp = exe.with_suffix(".tmp")
        cmd = ["rustc", "-O", "-C", "target-cpu=native", "-C", "target-feature=-prefer-256-bit"]
        cmd += [str(src), "-o", str(tmp)]
        built = subprocess.run(cmd, capture_output=True, text=True)  # warns: unstable feature
        if built.returncode != 0:
            raise RuntimeError(f"[membw] rustc failed: {built.stderr.strip()[-500:]}")
        tmp.rename(exe)
    return exe


def read_bandwidth(mib: int, threads: int, reps: int = 10) -> dict[str, Any]:
    """bench/membw.rs: GB/s reading a ``mib``-MiB buffer with ``threads`` threads."""
    out = subprocess.run(
        [str(_membw_binary()), str(mib), str(threads), str(reps)],
        stdout=subprocess.PIPE, text=True, check=True,
    )  # fmt: skip
    res = last_json(out.stdout)
    if res is None:
        raise RuntimeError("membw printed no JSON")
    return res


def decode_bytes(gguf: Path) -> dict[str, float]:
    """Bytes of weights one decode token reads, from the GGUF tensor table.

    Every tensor except ``token_embd.weight`` is read once per token (all the
    layers' matrices, norms and biases, and ``output.weight``); of the embedding
    only the token's row is gathered (counted: one row). When the file has no
    ``output.weight`` the embedding is the tied output head and is counted whole.
    Keys: ``total``, ``head`` (output head bytes), ``tied`` (1.0 / 0.0)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf))
    sizes = {t.name: int(t.n_bytes) for t in reader.tensors}
    emb = next(t for t in reader.tensors if t.name == "token_embd.weight")
    rows = int(emb.shape[-1]) if len(emb.shape) > 1 else 1  # GGUF shape: [k, n_vocab]
    tied = "output.weight" not in sizes
    head = sizes["token_embd.weight"] if tied else sizes["output.weight"]
    body = sum(v for k, v in sizes.items() if k not in ("token_embd.weight", "output.weight"))
    row = sizes["token_embd.weight"] // max(rows, 1)
    return {"total": float(body + head + row), "head": float(head), "tied": float(tied)}


def context_length(gguf: Path) -> Optional[int]:
    """The model's context (``<arch>.context_length`` of the GGUF), None if absent."""
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf))
    arch_field = reader.fields.get("general.architecture")
    if arch_field is None:
        return None
    arch = bytes(arch_field.parts[arch_field.data[0]]).decode()
    ctx = reader.fields.get(f"{arch}.context_length")
    return None if ctx is None else int(ctx.parts[ctx.data[0]][0])
