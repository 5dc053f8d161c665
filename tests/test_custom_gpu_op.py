"""``rlx.register_gpu_op``: a user Metal kernel (``custom_gpu_op`` thunk).

On metal-sim the user's MSL runs through msl-sim; on the host the Python
fallback runs. The kernels here are checked against numpy formulas written
independently of both (tolerance: f32, 1e-6 relative + 1e-6 absolute — the
kernel and numpy both compute ``a + s * b`` with one f32 rounding each, so
they agree to an ulp or two). Error cases: a write past the output's end,
a barrier only half the threadgroup reaches, MSL that does not compile, a
kernel name the library lacks — each an ``rlx.RlxError`` naming the op.
``examples/custom_gpu_op.py`` runs as a subprocess on host, reference and
metal-sim (its printed thunks and error are checked), and its graph is
compiled here to check that on metal-sim the user kernel is a dispatch and
that ``relu(a + 2.5 b)`` comes out."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import rlx

SCALED_ADD = """
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

# writes one element past the output (no bounds check, grid rounded up)
OOB = SCALED_ADD.replace("if (i < n) {", "if (i <= n) {")

# row sums with threadgroup memory and barriers (one threadgroup per row)
ROW_SUM = """
#include <metal_stdlib>
using namespace metal;

kernel void row_sum(device const float* x [[buffer(0)]],
                    device float* out [[buffer(1)]],
                    constant uint& rows [[buffer(2)]],
                    uint row [[threadgroup_position_in_grid]],
                    uint t [[thread_position_in_threadgroup]]) {
    threadgroup float part[32];
    float s = 0.0f;
    for (uint j = t; j < 100; j += 32) {
        s += x[row * 100 + j];
    }
    part[t] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (t == 0) {
        float total = 0.0f;
        for (uint k = 0; k < 32; ++k) {
            total += part[k];
        }
        out[row] = total;
    }
}
"""


def _scaled_add_fallback(inputs: list[np.ndarray], out: np.ndarray) -> None:
    out[...] = inputs[0] + np.float32(2.5) * inputs[1]


def _register(name: str, source: str, kernel: str = "scaled_add") -> None:
    rlx.register_gpu_op(name, source, kernel=kernel, threadgroup=32, fallback=_scaled_add_fallback)


def _graph(op: str, n: int) -> rlx.Graph:
    g = rlx.Graph(op)
    a = g.input("a", [n])
    b = g.input("b", [n])
    g.outputs(g.custom_op(op, a, b))
    return g


def _feeds(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(n)
    return {
        "a": rng.standard_normal(n).astype(np.float32),
        "b": rng.standard_normal(n).astype(np.float32),
    }


@pytest.mark.parametrize("n", [1, 100, 1000])
def test_scaled_add_metal_sim_equals_host_fallback(n: int) -> None:
    _register("test_scaled_add", SCALED_ADD)
    feeds = _feeds(n)
    want = feeds["a"] + np.float32(2.5) * feeds["b"]
    sim = rlx.compile(_graph("test_scaled_add", n), device="metal-sim")
    host = rlx.compile(_graph("test_scaled_add", n), device="host")
    assert sim.stats["by_thunk"] == {"custom_gpu_op": 1}
    assert sim.stats["metal_host_by_thunk"] == {}, "the kernel is a dispatch, not a host command"
    got_sim = np.asarray(next(iter(sim.run(**feeds).values())))
    got_host = np.asarray(next(iter(host.run(**feeds).values())))
    np.testing.assert_allclose(got_sim, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got_host, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got_sim, got_host, rtol=1e-6, atol=1e-6)


def test_threadgroup_kernel_with_barrier_and_custom_grid() -> None:
    def fallback(inputs: list[np.ndarray], out: np.ndarray) -> None:
        out[...] = inputs[0].sum(axis=1)

    rlx.register_gpu_op(
        "test_row_sum",
        ROW_SUM,
        kernel="row_sum",
        threadgroup=(32, 1, 1),
        grid=lambda rows: (rows, 1, 1),
        outputs=lambda x: ((x[0][0],), x[1]),
        fallback=fallback,
    )
    g = rlx.Graph("rows")
    x = g.input("x", [5, 100])
    g.outputs(g.custom_op("test_row_sum", x))
    xs = np.random.default_rng(3).standard_normal((5, 100)).astype(np.float32)
    want = xs.astype(np.float64).sum(axis=1)
    for device in ("metal-sim", "host"):
        got = np.asarray(next(iter(rlx.compile(g, device=device).run(x=xs).values())))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_out_of_bounds_write_is_a_named_error() -> None:
    _register("test_oob_add", OOB)
    exe = rlx.compile(_graph("test_oob_add", 60), device="metal-sim")
    with pytest.raises(rlx.RlxError, match=r"(?s)custom_gpu_op.*scaled_add.*(past|end|bounds)"):
        exe.run(**_feeds(60))
    # the host runs the (correct) fallback
    out = rlx.compile(_graph("test_oob_add", 60), device="host").run(**_feeds(60))
    assert np.all(np.isfinite(np.asarray(next(iter(out.values())))))


# half the threadgroup waits at a barrier the other half never reaches
DEADLOCK = ROW_SUM.replace(
    "    part[t] = s;\n    threadgroup_barrier(mem_flags::mem_threadgroup);",
    "    part[t] = s;\n    if (t < 16) {\n"
    "        threadgroup_barrier(mem_flags::mem_threadgroup);\n    }",
)


def test_divergent_barrier_is_a_named_error_not_a_hang() -> None:
    """A barrier only some lanes reach (undefined on a GPU, a hang on many) is
    reported by msl-sim as an error naming the op and kernel."""
    assert DEADLOCK != ROW_SUM
    rlx.register_gpu_op(
        "test_deadlock",
        DEADLOCK,
        kernel="row_sum",
        threadgroup=(32, 1, 1),
        grid=lambda rows: (rows, 1, 1),
        outputs=lambda x: ((x[0][0],), x[1]),
        fallback=lambda inputs, out: out.__setitem__(..., inputs[0].sum(axis=1)),
    )
    g = rlx.Graph("rows")
    x = g.input("x", [2, 100])
    g.outputs(g.custom_op("test_deadlock", x))
    exe = rlx.compile(g, device="metal-sim")
    with pytest.raises(
        rlx.RlxError, match=r"(?s)custom_gpu_op.*row_sum.*(barrier|deadlock|timed out)"
    ):
        exe.run(x=np.ones((2, 100), np.float32))


def test_bad_msl_source_is_a_named_error() -> None:
    _register("test_bad_msl", SCALED_ADD.replace("out[i] =", "out[i] = undeclared +"))
    exe = rlx.compile(_graph("test_bad_msl", 8), device="metal-sim")
    with pytest.raises(rlx.RlxError, match=r"(?s)test_bad_msl\.metal.*compile.*undeclared"):
        exe.run(**_feeds(8))


def test_missing_kernel_function_is_a_named_error() -> None:
    _register("test_no_fn", SCALED_ADD, kernel="not_there")
    exe = rlx.compile(_graph("test_no_fn", 8), device="metal-sim")
    with pytest.raises(rlx.RlxError, match=r"(?s)not_there.*no such kernel.*scaled_add"):
        exe.run(**_feeds(8))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"threadgroup": 0}, "threadgroup"),
        ({"grid": (1, 2, 3, 4)}, "grid"),
        ({"fallback": None}, "fallback"),
    ],
)
def test_register_gpu_op_checks_its_arguments(kwargs: dict, match: str) -> None:
    args = {"fallback": _scaled_add_fallback, **kwargs}
    with pytest.raises(rlx.RlxError, match=match):
        rlx.register_gpu_op("test_bad_args", SCALED_ADD, **args)
    with pytest.raises(ValueError, match="msl_source"):
        rlx.register_gpu_op("test_bad_args", "  ", fallback=_scaled_add_fallback)


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "custom_gpu_op.py"


@pytest.mark.parametrize("device", ["host", "reference", "metal-sim"])
@pytest.mark.parametrize("n", [77, 1000])
def test_example_runs_and_reports(device: str, n: int) -> None:
    r = subprocess.run(
        [sys.executable, str(EXAMPLE), "--device", device, "-n", str(n)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip()
    pat = rf"{re.escape(device)}: thunks (\{{.*\}}), max \|y - numpy\| = (\S+)"
    m = re.fullmatch(pat, line)
    assert m, line
    assert m.group(1) == "{'custom_gpu_op': 1, 'activation': 1}", line
    assert float(m.group(2)) <= 1e-6, line


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("custom_gpu_op_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_example_graph_is_a_dispatch_on_metal_sim() -> None:
    n = 301
    feeds = _feeds(n)
    want = np.maximum(feeds["a"] + np.float32(2.5) * feeds["b"], 0)
    ex = _example()
    outs = {}
    for device in ("host", "metal-sim"):
        exe = rlx.compile(ex.build(n), device=device)
        if device == "metal-sim":
            assert exe.stats["metal_host"] == 0, exe.report()
            assert exe.stats["metal_dispatches"] >= 2, exe.report()
        outs[device] = np.asarray(exe.run(**feeds)["y"])
        np.testing.assert_allclose(outs[device], want, rtol=1e-6, atol=1e-6, err_msg=device)
