"""Micro-benchmark: the fused decode gate/up GEMV (``fuse_decode_mlp`` on:
one ``fused_mlp_gate_up_swiglu`` per layer) against the unfused schedule
(two GEMVs and the SiLU·mul region), interleaved in one process.

Builds ``--layers`` independent ``silu(gate(x)) · up(x)`` blocks (each with
its own packed weights, so the working set exceeds the caches the way a
model's does), compiles the graph with the pass on and off, and times the
two schedules alternately, ``--reps`` times each; prints the medians per
layer and their ratio. The unfused figure includes the SiLU·mul dispatch
(``n`` elements, well under a microsecond).

    python bench/fused_gate_up.py [--typ q4_1] [--k 576] [--n 1536] [--layers 30] [--reps 400]

Timings are not asserted anywhere; machines are noisy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import rlx
from quant_gemv import packed


def build(typ: str, k: int, n: int, layers: int, disable: str) -> rlx.Executable:
    rng = np.random.default_rng(0)
    g = rlx.Graph("gate_up")
    x = g.input("x", [1, 1, k])
    outs, params = [], {}
    for i in range(layers):
        wg, wu = packed(typ, n, k, rng), packed(typ, n, k, rng)
        params[f"g{i}"], params[f"u{i}"] = wg, wu
        gate = g.dequant_matmul(x, g.param(f"g{i}", list(wg.shape), "u8"), scheme=typ, n=n, k=k)
        up = g.dequant_matmul(x, g.param(f"u{i}", list(wu.shape), "u8"), scheme=typ, n=n, k=k)
        outs.append(g.mul(g.silu(gate), up))
    g.outputs(*outs)
    os.environ["RLX_DISABLE_PASS"] = disable
    try:
        ex = rlx.compile(g, device="host")
    finally:
        del os.environ["RLX_DISABLE_PASS"]
    for name, w in params.items():
        ex.set_param(name, w)
    ex.run(x=np.random.default_rng(1).standard_normal((1, 1, k)).astype(np.float32))
    assert ex.stats["fallback_thunks"] == 0, ex.stats
    return ex


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--typ", default="q4_1")
    ap.add_argument("--k", type=int, default=576)
    ap.add_argument("--n", type=int, default=1536)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--reps", type=int, default=400)
    a = ap.parse_args()
    on = build(a.typ, a.k, a.n, a.layers, "")
    off = build(a.typ, a.k, a.n, a.layers, "fuse_decode_mlp")
    assert on.stats["pass_matches"]["fuse_decode_mlp"] == a.layers
    assert "fused_mlp" not in off.schedule
    times: dict[str, list[float]] = {"fused": [], "unfused": []}
    for _ in range(a.reps):
        for name, ex in (("fused", on), ("unfused", off)):
            t0 = time.perf_counter()
            ex._native.run(ex._fallback)
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) / a.layers * 1e6 for k, v in times.items()}
    print(
        f"{a.typ} k={a.k} n={a.n} layers={a.layers} reps={a.reps}: "
        f"fused {med['fused']:.2f} us/layer, unfused {med['unfused']:.2f} us/layer, "
        f"fused/unfused {med['fused'] / med['unfused']:.3f}"
    )


if __name__ == "__main__":
    main()
