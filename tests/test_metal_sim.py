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
    g.outputs(s, g.tanh(s @ w))
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


def _figures(exe: rlx.Executable) -> tuple[int, int, int]:
    s = exe.stats
    return s["metal_dispatches"], s["metal_barriers"], s["metal_host"]


def test_plan_figures_in_stats_and_report() -> None:
    # every graph fusion on: gelu + add become an elementwise region and
    # tanh(s @ w) a fused matmul (zero bias, tanh epilogue). Schedule:
    # rms_norm, region, copy, softmax, fused_mm_bias_act, every one a kernel
    # (no host command) and each reading what the one before wrote, so:
    # D B D B D B D B D
    exe = rlx.compile(_graph(3, 37, "f32"), device="metal-sim")
    assert _figures(exe) == (5, 4, 0)
    d, b, h = _figures(exe)
    assert (
        f"metal plan: {d} dispatches, {b} barriers, {h} host commands"
    ) in exe.report().splitlines()
    host = rlx.compile(_graph(3, 37, "f32"), device="host").stats
    assert host["metal_dispatches"] == d


def test_active_rows_run_the_scaled_plan() -> None:
    # a row-wise chain compiled for 16 rows, run on its first `a` rows: the
    # metal-sim plan is rebuilt from the scaled thunks (grids of `a` rows)
    # and gives the host's prefix rows; rows past `a` are not computed
    h = 24
    g = rlx.Graph("rows")
    x = g.input("x", [16, h], "f32")
    n = g.rms_norm(x, g.param("gamma", [h], "f32"))
    g.outputs(g.softmax(g.gelu(n) * 2.0, axis=-1))
    rng = np.random.default_rng(5)
    xv = rng.standard_normal((16, h)).astype(np.float32)
    gamma = rng.standard_normal(h).astype(np.float32)
    full = {}
    for device in ("host", "metal-sim"):
        exe = rlx.compile(g, device=device)
        exe.set_param("gamma", gamma)
        assert exe.set_active_extent(16, ["x"]) > 0
        full[device] = exe.run(x=xv)
        for a in (1, 5, 16):
            got = np.asarray(list(exe.run_active(a, x=xv).values())[0])
            ref = np.asarray(list(full["host"].values())[0])
            np.testing.assert_allclose(got[:a], ref[:a], atol=1e-5, rtol=1e-5)


def test_per_op_kernels_without_the_fusions(monkeypatch: pytest.MonkeyPatch) -> None:
    # the per-op kernels: rms_norm, gelu, add, copy, softmax, sgemm, tanh,
    # each a dispatch after a barrier: D B D B D B D B D B D B D
    monkeypatch.setenv("RLX_DISABLE_PASS", "ir_elementwise_region,ir_fuse_matmul_bias_act")
    exe = rlx.compile(_graph(3, 37, "f32"), device="metal-sim")
    assert _figures(exe) == (7, 6, 0)
    x = np.linspace(-1.0, 1.0, 3 * 37, dtype=np.float32).reshape(3, 37)
    outs = []
    for device in ("host", "metal-sim"):
        exe = rlx.compile(_graph(3, 37, "f32"), device=device)
        exe.set_param("gamma", np.ones(37, np.float32))
        exe.set_param("w", np.eye(37, dtype=np.float32))
        outs.append([np.asarray(v) for v in exe.run(x=x, y=x[::-1].copy()).values()])
    for host, sim in zip(*outs):
        np.testing.assert_allclose(sim, host, atol=1e-5, rtol=1e-5)


def test_numeric_casts_are_kernels() -> None:
    # a mask (bool → f32), index arithmetic (i32 → f32) and a truncation
    # (f32 → i32 of NaN, ±inf, values past i32's range and halves): every
    # cast is a cast_host_* dispatch, no host command, and the outputs equal
    # the host's bit for bit
    n = 1037
    g = rlx.Graph("casts")
    x = g.input("x", [n], "f32")
    i = g.input("i", [n], "i32")
    mask = g.cast(x > 0.0, "f32")
    idx = g.cast(i, "f32")
    xi = g.cast(x, "i32")
    g.outputs(mask * idx, xi, g.cast(xi, "f32") + idx)
    rng = np.random.default_rng(3)
    xv = (rng.standard_normal(n) * 300.0).astype(np.float32)
    xv[:10] = [np.nan, np.inf, -np.inf, 3e9, -3e9, 2.5, -2.5, -0.0, 0.5, 2147483520.0]
    iv = rng.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)
    iv[:3] = [2**24 + 1, -(2**31), 2**31 - 1]
    outs = {}
    for device in ("host", "metal-sim"):
        exe = rlx.compile(g, device=device)
        if device == "metal-sim":
            st = exe.stats
            assert st["by_thunk"].get("cast_host", 0) >= 3, st["by_thunk"]
            assert st["metal_host"] == 0, st["metal_host_by_thunk"]
        outs[device] = [np.asarray(v) for v in exe.run(x=xv, i=iv).values()]
    for host, sim in zip(outs["host"], outs["metal-sim"]):
        assert host.dtype == sim.dtype
        np.testing.assert_array_equal(sim.view(np.uint8), host.view(np.uint8))
    # f32 → i32 truncates toward zero and saturates, NaN → 0 (Rust's `as`;
    # numpy leaves out-of-range and NaN undefined, so written out here)
    want = np.clip(np.trunc(np.nan_to_num(xv.astype(np.float64), nan=0.0)), -(2**31), 2**31 - 1)
    np.testing.assert_array_equal(outs["metal-sim"][1], want.astype(np.int32))
    # i32 → f32 rounds to nearest even (2^24 + 1 → 2^24), bool → f32 is 0 / 1
    idx_f = iv.astype(np.float32)
    np.testing.assert_array_equal(outs["metal-sim"][0], np.where(xv > 0, idx_f, 0.0))
    np.testing.assert_array_equal(outs["metal-sim"][2], want.astype(np.float32) + idx_f)
