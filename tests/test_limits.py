"""Hostile sizes, names and environment values: every one an RlxError (or a
warning naming the variable), never a panic, an abort or a hang."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import rlx
from rlx.errors import DeviceError, DimTypeError, UnknownNameError


@pytest.mark.parametrize(
    "dims, dim",
    [([2**62, 4], "dim 0 (4611686018427387904)"), ([2**32, 2**32, 16], "dim 1 (4294967296)")],
)
def test_overflowing_dims_are_shape_errors(dims: list[int], dim: str) -> None:
    with pytest.raises(rlx.ShapeError, match=r"^\[input\] 'x' .*" + dim.replace("(", r"\(")
                       .replace(")", r"\)")):  # fmt: skip
        rlx.Graph("big").input("x", dims)


def _sym_graph() -> rlx.Graph:
    g = rlx.Graph("sym")
    x = g.input("x", ["seq", 4])
    g.outputs(g.add(x, x))
    return g


def test_symbol_bound_past_the_limit_at_compile() -> None:
    with pytest.raises(rlx.ShapeError, match=r"\[compile\] node 'x'.*'seq' = 4611686018427387904"):
        rlx.compile(_sym_graph(), dims={"seq": 2**62})


@pytest.mark.parametrize("value", [-1, 2**64])
def test_out_of_range_symbol_values(value: int) -> None:
    with pytest.raises(rlx.ShapeError, match="'seq'"):
        rlx.compile(_sym_graph(), dims={"seq": value})


def test_arena_the_machine_cannot_allocate() -> None:
    """2^47 bytes (128 TiB), within the per-tensor limit but past any
    machine (and the 47-bit user address space): an RlxError, not SIGABRT."""
    g = rlx.Graph("huge")
    x = g.input("x", [2**27, 2**20], "u8")
    g.outputs(g.reshape(x, [2**47]))
    with pytest.raises(rlx.RlxError, match="cannot allocate"):
        rlx.compile(g)


def test_negative_and_float_dims() -> None:
    g = rlx.Graph("d")
    with pytest.raises(rlx.ShapeError, match="-3 is negative"):
        g.input("x", [-3, 2])
    with pytest.raises(DimTypeError, match="2.5") as e:
        g.input("y", [2.5])
    assert isinstance(e.value, TypeError) and isinstance(e.value, rlx.RlxError)
    with pytest.raises(DimTypeError, match="'seq' = 2.0"):
        rlx.compile(_sym_graph(), dims={"seq": 2.0})


@pytest.mark.parametrize("kind", ["input", "param", "state"])
def test_duplicate_leaf_names(kind: str) -> None:
    g = rlx.Graph("dup")
    getattr(g, kind)("a", [4])
    with pytest.raises(rlx.GraphError, match=f"duplicate {kind} name 'a'"):
        getattr(g, kind)("a", [4])


def test_duplicate_output_names_at_compile() -> None:
    g = rlx.Graph("dup")
    x = g.input("x", [4])
    g.outputs(g.add(x, x, name="y"), g.mul(x, x, name="y"))
    with pytest.raises(rlx.GraphError, match="two outputs are named 'y'"):
        rlx.compile(g)


def test_unknown_names_and_devices_are_rlx_errors() -> None:
    g = rlx.Graph("n")
    x = g.input("x", [4])
    g.outputs(g.add(x, g.param("w", [4])))
    exe = rlx.compile(g)
    for call in (exe.set_param, exe.bind_param):
        with pytest.raises(UnknownNameError, match=r"no param named 'nope'; params: \['w'\]") as e:
            call("nope", np.zeros(4, np.float32))
        # still a KeyError for code written before, with a readable message
        assert isinstance(e.value, KeyError) and str(e.value).startswith("[")
    with pytest.raises(UnknownNameError, match="no state named"):
        exe.state("nope")
    with pytest.raises(DeviceError, match="unknown device 'cuda'") as d:
        rlx.compile(g, device="cuda")
    assert isinstance(d.value, ValueError) and isinstance(d.value, rlx.RlxError)


def _child(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


RUN_ONCE = (
    "import numpy as np, rlx\n"
    "g = rlx.Graph('t'); x = g.input('x', [64, 64]); g.outputs(g.matmul(x, x))\n"
    "e = rlx.compile(g); e.run(x=np.ones((64, 64), np.float32)); print('ran')\n"
)


def test_huge_thread_count_is_clamped_quickly() -> None:
    t0 = time.perf_counter()
    r = _child(RUN_ONCE, RLX_NUM_THREADS="20000")
    assert r.returncode == 0 and "ran" in r.stdout, r.stderr
    assert "RLX_NUM_THREADS" in r.stderr and "above the maximum" in r.stderr, r.stderr
    assert r.stderr.count("RLX_NUM_THREADS") == 1  # once per process
    assert time.perf_counter() - t0 < 60


@pytest.mark.parametrize(
    "var, value, needle",
    [
        ("RLX_SPIN_US", "99999999", "above the maximum of 10000"),
        ("RLX_NUM_THREADS", "many", "not a non-negative integer"),
        ("RLX_VERIFY", "maybe", "not a flag"),
    ],
)
def test_garbage_env_values_warn(
    var: str, value: str, needle: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    pytest.importorskip("gguf")
    sys.path.insert(0, str(Path(__file__).parent / "models"))
    from tiny_gguf import write_tiny

    # a Q8_0 decode step: the quantised matmuls start the worker team, the
    # reader of RLX_SPIN_US and RLX_NUM_THREADS
    path = tmp_path_factory.getbasetemp() / "limits_q8.gguf"
    if not path.exists():
        write_tiny(path, "llama", "Q8_0")
    code = RUN_ONCE + (
        f"m = rlx.load({str(path)!r}); m.logits([1, 2]); m.next_logits([3]); print('decoded')\n"
    )
    r = _child(code, **{var: value})
    assert "decoded" in r.stdout, r.stderr
    assert r.returncode == 0 and "ran" in r.stdout, r.stderr
    assert f"rlx: warning: {var}={value!r}".replace("'", '"') in r.stderr, r.stderr
    assert needle in r.stderr, r.stderr
