"""Micro-benchmark: one batched decode step (continuous batching, issue 20
point 2) at ``m`` = 1, 2, 4, 8 rows against the single-stream decode step.

Loads a GGUF decoder (default SmolLM2-135M-Instruct Q4_1), builds a
:class:`rlx.models.batch.BatchDecoder` with ``max(--rows)`` slots and times
:meth:`~rlx.models.batch.BatchDecoder.step` with every row at ``--pos``
(cache contents do not change the cost), and the model's own ``m = 1`` decode
step (its fused decode graph) at the same position. Prints the median step
time, the time per token and its ratio to the ``m = 1`` decode step, and with
``--profile`` the per-thunk-name time of each batched graph. ``--cpu`` times
with the process CPU clock: on a loaded machine (load above the core count)
wall time mostly measures the scheduler; with ``RLX_NUM_THREADS=1`` CPU time
is the step's cost.

    python bench/batch_step.py [MODEL.gguf] [--rows 1 2 4 8] [--runs 30] [--profile]

Timings are not asserted anywhere; machines are noisy (note the load).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import rlx
from rlx.io.models import ensure_model
from rlx.models.batch import BatchDecoder

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import median_time  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default=None, help="GGUF file (default: SmolLM2 Q4_1)")
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--pos", type=int, default=64, help="position of every row")
    ap.add_argument("--profile", action="store_true", help="per-thunk times per batch size")
    ap.add_argument("--cpu", action="store_true",
                    help="time with the process CPU clock (use with RLX_NUM_THREADS=1 on a "
                         "loaded machine)")  # fmt: skip
    args = ap.parse_args()
    clock = time.process_time if args.cpu else time.perf_counter
    path = args.model or str(ensure_model("smollm2"))
    model = rlx.load(path)
    slots = max(args.rows)
    bd = BatchDecoder(model, slots, ctx=max(256, args.pos + 8))
    bd.warm()

    # the single-stream decode step (its own graph and fused passes)
    sess = model.session()
    ids = list(range(10, 10 + args.pos))
    sess.reset(args.pos + 64)
    sess._feed(ids)
    tok = 42

    def single() -> None:
        sess._n = args.pos
        sess._feed([tok])

    t1 = median_time(single, args.runs, clock, warmups=2)
    print(f"threads={os.environ.get('RLX_NUM_THREADS', 'default')} load={os.getloadavg()[0]:.2f}")
    print(f"m=1 decode step (fused graph): {t1 * 1e3:7.3f} ms")
    print(f"{'rows':>4} {'step ms':>8} {'ms/token':>9} {'vs m=1':>7}")
    profiles = {}
    for rows in args.rows:
        toks = [tok + i for i in range(rows)]
        pos = [args.pos] * rows
        t = median_time(lambda toks=toks, pos=pos: bd.step(toks, pos), args.runs, clock, warmups=2)
        print(f"{rows:>4} {t * 1e3:8.3f} {t * 1e3 / rows:9.3f} {t / rows / t1:7.2f}")
        if args.profile:
            exe = bd.exe(rows)
            exe.profile(True)
            for _ in range(args.runs):
                bd.step(toks, pos)
            profiles[rows] = exe.profile(False)
    for rows, prof in profiles.items():
        total = sum(s for s, _ in prof.values())
        print(f"\nrows={rows}: {total / args.runs * 1e3:.3f} ms of thunks per step")
        for name, (secs, calls) in sorted(prof.items(), key=lambda kv: -kv[1][0])[:12]:
            per = secs / args.runs * 1e3
            print(f"  {name:<34} {per:8.3f} ms/step  {calls // args.runs:4d} calls/step")


if __name__ == "__main__":
    main()
