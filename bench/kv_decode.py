"""Micro-benchmark: decode attention over a KV cache on the host.

For the decoder shapes of issue 4 (SmolLM2: 9 heads / 3 KV heads, d 64;
Qwen2.5-0.5B: 14 / 2, d 64; Gemma3-270M: 4 / 1, d 256, sliding window 512)
builds one graph holding ``--layers`` decode steps (s = 1), each with its own
f32 State caches ``[C, kv_heads·d]``: ``scatter_nd`` writes the new row in
place, attention reads the first ``kv_len`` rows. Reports the median time per
layer of the whole step and of attention alone (a second graph without the
writes), and the GB/s of K/V bytes attention reads.

    python bench/kv_decode.py [--cap 2048] [--kv-len 1024] [--layers 16] [--runs 50] [--cpu]
        [--kv-dtype f16]

``--cpu`` times with the process's CPU clock instead of the wall clock: on a
machine shared with other work (load above the core count) wall time mostly
measures the scheduler; with ``RLX_NUM_THREADS=1`` CPU time is the kernel's
cost.

Timings are not asserted anywhere; machines are noisy.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import rlx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import median_time  # noqa: E402

SHAPES = [("smollm2", 9, 3, 64, 0), ("qwen2.5", 14, 2, 64, 0), ("gemma3", 4, 1, 256, 512)]


def graph(
    h: int, kvh: int, d: int, window: int, cap: int, layers: int, write: bool, kv_dtype: str
) -> rlx.Graph:
    kvd = kvh * d
    g = rlx.Graph("decode")
    n = g.input("n", [1], "i32")
    pos = g.input("pos", [1, 1], "i32")
    q = g.input("q", [1, 1, h * d])
    new = g.input("new", [1, kvd], kv_dtype)
    outs = []
    for i in range(layers):
        kc, vc = g.state(f"k{i}", [cap, kvd], kv_dtype), g.state(f"v{i}", [cap, kvd], kv_dtype)
        if write:
            kc, vc = g.scatter_nd(kc, pos, new), g.scatter_nd(vc, pos, new)
        kv = [g.reshape(c, [1, cap, kvd]) for c in (kc, vc)]
        outs.append(
            g.attention(
                q,
                kv[0],
                kv[1],
                heads=h,
                kv_heads=kvh,
                head_dim=d,
                mask="causal",
                window=window,
                kv_len=n,
            )
        )
    g.outputs(*outs)
    return g


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cap", type=int, default=2048)
    ap.add_argument("--kv-len", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--cpu", action="store_true", help="process CPU time, not wall time")
    ap.add_argument("--kv-dtype", choices=("f32", "f16"), default="f32", help="cache element type")
    a = ap.parse_args()
    clock = time.process_time if a.cpu else time.perf_counter
    rng = np.random.default_rng(0)
    print(
        f"decode attention, C={a.cap}, kv_len={a.kv_len}, {a.kv_dtype} cache, "
        f"{'CPU' if a.cpu else 'wall'} time, "
        f"median of {a.runs} runs / {a.layers} layers"
    )
    print(
        f"{'model':8} {'heads':>5} {'kv':>3} {'d':>4} {'win':>4} | "
        f"{'attn µs':>8} {'GB/s':>6} | {'write+attn µs':>13}"
    )
    for name, h, kvh, d, win in SHAPES:
        res = []
        for write in (False, True):
            ex = rlx.compile(
                graph(h, kvh, d, win, a.cap, a.layers, write, a.kv_dtype), device="host"
            )
            kv_np = np.float16 if a.kv_dtype == "f16" else np.float32
            for i in range(a.layers):
                for c in "kv":
                    ex.set_state(
                        f"{c}{i}", rng.standard_normal((a.cap, kvh * d), np.float32).astype(kv_np)
                    )
            ex.run(
                n=np.array([a.kv_len], np.int32),
                pos=np.array([[a.kv_len - 1]], np.int32),
                q=rng.standard_normal((1, 1, h * d), np.float32),
                new=rng.standard_normal((1, kvh * d), np.float32).astype(kv_np),
            )
            assert ex.stats["fallback_thunks"] == 0, ex.stats
            run = ex._native.run
            fb = ex._fallback
            res.append(median_time(lambda run=run, fb=fb: run(fb), a.runs, clock) / a.layers)
        seen = min(a.kv_len, win + 1) if win else a.kv_len
        kv_bytes = 2 * seen * kvh * d * (2 if a.kv_dtype == "f16" else 4)
        print(
            f"{name:8} {h:5} {kvh:3} {d:4} {win:4} | {res[0] * 1e6:8.1f} "
            f"{kv_bytes / res[0] / 1e9:6.1f} | {res[1] * 1e6:13.1f}"
        )


if __name__ == "__main__":
    main()
