"""A user Metal kernel in an rlx graph: ``rlx.register_gpu_op``.

The op ``scaled_add`` computes ``a + alpha * b`` (``alpha`` a graph
attribute would need an args buffer; here it is baked into the source).
On ``metal-sim`` the MSL below is compiled and run by msl-sim with the same
checks as rlx's own kernels (writes past a buffer, divergent barriers,
deadlocks); on Metal the encoder compiles it once and dispatches it; on the
host and reference devices the Python ``fallback`` runs instead.

Binding convention: input ``i`` at ``[[buffer(i)]]``, the output after the
inputs, then the output's element count as a ``constant uint&``. The grid
defaults to one thread per output element (threadgroups rounded up), so the
kernel must guard ``i < n``.

Run: ``python examples/custom_gpu_op.py [--device host|reference|metal-sim]``.
It checks the result against numpy and prints the largest difference.
"""

from __future__ import annotations

import argparse

import numpy as np
import rlx

ALPHA = 2.5

SCALED_ADD_MSL = """
#include <metal_stdlib>
using namespace metal;

kernel void scaled_add(device const float* a [[buffer(0)]],
                       device const float* b [[buffer(1)]],
                       device float* out [[buffer(2)]],
                       constant uint& n [[buffer(3)]],
                       uint i [[thread_position_in_grid]]) {
    if (i < n) {
        out[i] = a[i] + 2.5f * b[i];
    }
}
"""


def scaled_add_fallback(inputs: list[np.ndarray], out: np.ndarray) -> None:
    """The host path: the same formula in numpy, written into ``out``."""
    out[...] = inputs[0] + np.float32(ALPHA) * inputs[1]


def build(n: int) -> rlx.Graph:
    """``y = relu(scaled_add(a, b))``: the user op between built-in ops."""
    rlx.register_gpu_op(
        "scaled_add",
        SCALED_ADD_MSL,
        kernel="scaled_add",
        threadgroup=64,
        fallback=scaled_add_fallback,
    )
    g = rlx.Graph("custom_gpu_op")
    a = g.input("a", [n])
    b = g.input("b", [n])
    g.outputs(g.relu(g.custom_op("scaled_add", a, b), name="y"))
    return g


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="metal-sim", choices=["host", "reference", "metal-sim"])
    ap.add_argument("-n", type=int, default=1000)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    a = rng.standard_normal(args.n).astype(np.float32)
    b = rng.standard_normal(args.n).astype(np.float32)
    exe = rlx.compile(build(args.n), device=args.device)
    y = np.asarray(exe.run(a=a, b=b)["y"])
    want = np.maximum(a + np.float32(ALPHA) * b, 0)
    err = float(np.max(np.abs(y - want)))
    print(f"{args.device}: thunks {exe.stats['by_thunk']}, max |y - numpy| = {err:.3g}")
    if err > 1e-5:
        raise SystemExit(f"mismatch: {err}")


if __name__ == "__main__":
    main()
