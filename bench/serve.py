"""Aggregate generation throughput of ``rlx serve`` vs ``llama-server`` at 1, 2
and 4 concurrent streams (issue 20 point 2).

Each engine serves the same GGUF with the same number of slots and threads;
``N`` clients post ``/v1/completions`` at once (greedy, ``ignore_eos``, a fixed
token budget, a different prompt each) and the figure is all streams' completion
tokens divided by the wall time from the first request to the last answer
(prefill included, as a client sees it). Servers run one at a time (started,
warmed up with one request, measured, stopped) and the engines alternate per
round; the median over rounds is reported. llama.cpp spins between ops
(``OMP_WAIT_POLICY=ACTIVE``) and rlx with its decode team, so only one server
is alive at any moment.

    python bench/serve.py [MODEL.gguf] --rounds 2 --tokens 64 [--write]

``--write`` puts the table into BENCHMARKS.md between the ``serve.py`` markers.
``llama-server``: ``$LLAMA_SERVER``, ``$RLX_PEER_VENV/bin/llama-server`` or on
``PATH``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

import httpx

ROOT = Path(__file__).resolve().parent.parent
PEER_VENV = Path(os.environ.get("RLX_PEER_VENV", "/work/peer-venv"))
PROMPTS = [
    "The history of the bicycle begins",
    "Write a short story about a lighthouse keeper who",
    "In mathematics, a prime number is",
    "The best way to cook rice is",
]
LEVELS = (1, 2, 4)
#: table labels of the engines (``--engines`` keys)
LABELS = {"rlx": "rlx serve --batch", "rlx-nobatch": "rlx serve", "llama.cpp": "llama-server"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def llama_server() -> Optional[str]:
    """Path of the llama-server binary, if any."""
    for cand in (os.environ.get("LLAMA_SERVER"), str(PEER_VENV / "bin" / "llama-server"),
                 "/tmp/llama-server-build/bin/llama-server"):  # fmt: skip
        if cand and Path(cand).is_file():
            return cand
    return shutil.which("llama-server")


class Server:
    """One server process on a free loopback port."""

    def __init__(self, engine: str, gguf: Path, slots: int, threads: int, ctx: int,
                 batch: bool = True) -> None:  # fmt: skip
        self.engine = engine
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ)
        if engine == "rlx":
            rlx = str(Path(sys.executable).parent / "rlx")
            cmd = [rlx, "serve", f"model={gguf}", "--port", str(self.port), "--slots",
                   str(slots), "--threads", str(threads), "--batch-ctx", str(ctx)]  # fmt: skip
            if batch:
                cmd.append("--batch")
            self.model = "model"
        else:
            bin_ = llama_server()
            if bin_ is None:
                raise SystemExit("llama-server not found (set LLAMA_SERVER)")
            env["OMP_WAIT_POLICY"] = "ACTIVE"
            cmd = [bin_, "-m", str(gguf), "--port", str(self.port), "-np", str(slots),
                   "-c", str(ctx * slots), "-t", str(threads), "-tb", str(threads),
                   "--no-webui", "-a", "model", "--log-disable"]  # fmt: skip
            self.model = "model"
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)  # fmt: skip
        deadline = time.monotonic() + 300
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"{engine} server exited with {self.proc.returncode}: {cmd}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"{engine} server did not start")
            time.sleep(0.2)

    def complete(self, prompt: str, tokens: int) -> int:
        body = {"model": self.model, "prompt": prompt, "max_tokens": tokens,
                "temperature": 0, "ignore_eos": True}  # fmt: skip
        r = httpx.post(self.url + "/v1/completions", json=body, timeout=600)
        r.raise_for_status()
        return int(r.json()["usage"]["completion_tokens"])

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def measure(srv: Server, n: int, tokens: int) -> float:
    """Aggregate completion tokens/s of ``n`` concurrent streams."""
    got = [0] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            got[i] = srv.complete(PROMPTS[i % len(PROMPTS)], tokens)
        except BaseException as e:  # reported after the join
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return sum(got) / wall


def _loadavg() -> str:
    try:
        return ", ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", default=None, help="GGUF file (default: SmolLM2 Q4_1)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64, help="completion tokens per stream")
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=512, help="context per slot")
    ap.add_argument("--engines", default="rlx,rlx-nobatch,llama.cpp")
    ap.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = ap.parse_args(argv)
    if args.model is None:
        from rlx.io.models import ensure_model

        args.model = str(ensure_model("smollm2"))
    gguf = Path(args.model)
    engines = args.engines.split(",")
    figs: dict[str, dict[int, list[float]]] = {e: {n: [] for n in LEVELS} for e in engines}
    for rnd in range(args.rounds):
        order = engines if rnd % 2 == 0 else engines[::-1]
        for eng in order:
            kind = "llama" if eng == "llama.cpp" else "rlx"
            srv = Server(kind, gguf, args.slots, args.threads, args.ctx, batch=eng == "rlx")
            try:
                srv.complete(PROMPTS[0], 8)  # warm-up (compiles rlx's graphs)
                for n in LEVELS:
                    tps = measure(srv, n, args.tokens)
                    figs[eng][n].append(tps)
                    print(f"round {rnd} {eng:13s} {n} streams: {tps:7.1f} tok/s "
                          f"(load {_loadavg()})", flush=True)  # fmt: skip
            finally:
                srv.stop()
    lines = _table(figs, engines, args, gguf)
    print("\n".join(lines))
    if args.write:
        _write(lines)
    return 0


def _table(figs: dict[str, dict[int, list[float]]], engines: list[str], args: Any,
           gguf: Path) -> list[str]:  # fmt: skip
    med = {e: {n: statistics.median(v) for n, v in d.items() if v} for e, d in figs.items()}
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out = [
        f"Measured {when} by `bench/serve.py` ({args.rounds} alternating rounds, medians): "
        f"{gguf.name}, {args.slots} slots, {args.threads} threads, {args.tokens} greedy "
        f"tokens per stream, aggregate completion tokens/s (prefill included). "
        f"Load average at the end {_loadavg()} (the per-round loads are in the "
        "script's output; above ~2 on this 2-core machine the figures are noisy).",
        "",
        "| engine | " + " | ".join(f"{n} stream{'s' if n > 1 else ''} t/s" for n in LEVELS) + " |",
        "|---|" + "---:|" * len(LEVELS),
    ]
    for e in engines:
        cells = " | ".join(f"{med[e].get(n, 0):.1f}" for n in LEVELS)
        out.append(f"| {LABELS.get(e, e)} | {cells} |")
    if "llama.cpp" in engines:
        for e in engines:
            if e == "llama.cpp":
                continue
            cells = []
            for n in LEVELS:
                a, b = med[e].get(n), med["llama.cpp"].get(n)
                cells.append(f"{a / b:.2f}×" if a and b else "–")
            out.append(f"| **{LABELS.get(e, e)} / llama-server** | " + " | ".join(cells) + " |")
    return out


def _write(lines: list[str]) -> None:
    path = ROOT / "BENCHMARKS.md"
    text = path.read_text()
    begin, end = "<!-- serve.py:begin -->", "<!-- serve.py:end -->"
    block = begin + "\n" + "\n".join(lines) + "\n" + end
    if begin in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text += (
            "\n## Serving: concurrent streams vs llama-server (issue 20 point 2)\n\n" + block + "\n"
        )
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
