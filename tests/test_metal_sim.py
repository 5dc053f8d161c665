"""device="metal-sim": the Metal plan's kernels run through msl-sim (needs
clang++, installed by scripts/setup.sh) give the host's outputs, and the
compile report counts the plan's dispatches, barriers and host commands.

Tolerances: f32 1e-5 (abs and rel) against the host; f16 2e-3 abs + 2^-9 rel
(a one-ulp difference of an intermediate f16 value passes)."""

from __future__ import annotations

import numpy as np
import pytest
import rlx


def _graph(rows: int, h: int, dt: str) -> rlx.Graph:
    g = rlx.Graph("chain")
    x = g.input("x", [rows, h], dt)
    y = g.input("y", [rows, h], dt)
    w = g.param("w", [h, h], dt)
    n = g.rms_norm(x, g.param("gamma", [h], dt))
    s = g.softmax(g.gelu(n) + y, axis=-1)
    g.outputs(s, g.tanh(s @ w))  # the matmul has no kernel: a host command
    return g


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("rows,h", [(3, 37), (2, 1000)])
def test_metal_sim_matches_host(dt: str, rows: int, h: int) -> None:
    rng = np.random.default_rng(rows * 7 + h)
    np_dt = np.float32 if dt == "f32" else np.float16
    x = rng.standard_normal((rows, h)).astype(np_dt)
    y = rng.standard_normal((rows, h)).astype(np_dt)
    gamma = rng.standard_normal(h).astype(np_dt)
    w = (rng.standard_normal((h, h)) / np.sqrt(h)).astype(np_dt)
    outs = []
    for device in ("host", "metal-sim"):
        exe = rlx.compile(_graph(rows, h, dt), device=device)
        exe.set_param("gamma", gamma)
        exe.set_param("w", w)
        outs.append([np.asarray(v, np.float64) for v in exe.run(x=x, y=y).values()])
    atol, rtol = (1e-5, 1e-5) if dt == "f32" else (2e-3, 2.0**-9)
    for host, sim in zip(*outs):
        np.testing.assert_allclose(sim, host, atol=atol, rtol=rtol)


def test_plan_figures_in_stats_and_report(monkeypatch: pytest.MonkeyPatch) -> None:
    # the per-op kernels: without the graph-level fusions that would merge
    # gelu + add into an elementwise region and sgemm + tanh into a fused
    # matmul (neither has an MSL kernel yet)
    monkeypatch.setenv("RLX_DISABLE_PASS", "ir_elementwise_region,ir_fuse_matmul_bias_act")
    exe = rlx.compile(_graph(3, 37, "f32"), device="metal-sim")
    s = exe.stats
    # schedule: rms_norm, gelu, add, copy, softmax, sgemm, tanh. The sgemm
    # has no kernel (a host command, a sync point); each dispatch reads what
    # the one before wrote, so: D B D B D B D B D H D
    assert (s["metal_dispatches"], s["metal_barriers"], s["metal_host"]) == (6, 4, 1)
    assert (
        f"metal plan: {s['metal_dispatches']} dispatches, {s['metal_barriers']} barriers, "
        f"{s['metal_host']} host commands"
    ) in exe.report().splitlines()
    host = rlx.compile(_graph(3, 37, "f32"), device="host").stats
    assert host["metal_dispatches"] == s["metal_dispatches"]
