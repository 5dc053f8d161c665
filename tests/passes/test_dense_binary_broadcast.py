"""rewrite_dense_binary_broadcast on compiled graphs: a broadcast binary op
whose operands only differ from the output by size-one axes runs as a plain
binary op, with outputs equal to the pass off (RLX_DISABLE_PASS) and to
numpy; real broadcasts keep the broadcast thunk."""

from __future__ import annotations

import numpy as np
import pytest
import rlx

PASS = "rewrite_dense_binary_broadcast"


def _compile(g: rlx.Graph, monkeypatch: pytest.MonkeyPatch, disable: str = "") -> rlx.Executable:
    monkeypatch.setenv("RLX_DISABLE_PASS", disable)
    return rlx.compile(g)


def _graph(op: str, a: list[int], b: list[int], dtype: str) -> rlx.Graph:
    g = rlx.Graph("bb")
    x = g.input("a", a, dtype)
    y = g.input("b", b, dtype)
    g.outputs(g.binary(x, y, op, name="out"))
    return g


TOL = {"f32": (1e-6, 1e-7), "f16": (1e-3, 1e-3)}


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize(
    "op,a,b",
    [
        ("sub", [5, 7], [1, 5, 7]),
        ("mul", [1, 1, 9, 3], [9, 3]),
        ("div", [4, 1, 6], [4, 1, 6]),  # same shape: already a plain binary op
        ("max", [2, 1, 11], [1, 2, 1, 11]),
    ],
)
def test_dense_broadcast_becomes_binary(
    monkeypatch: pytest.MonkeyPatch, op: str, a: list[int], b: list[int], dtype: str
) -> None:
    on = _compile(_graph(op, a, b, dtype), monkeypatch)
    off = _compile(_graph(op, a, b, dtype), monkeypatch, PASS)
    lowered_bb = off.stats["by_thunk"].get("binary_broadcast", 0)
    assert on.stats["pass_matches"][PASS] == lowered_bb
    assert "binary_broadcast" not in on.stats["by_thunk"]
    assert on.stats["by_thunk"].get("binary") == 1
    assert on.stats["fallback_thunks"] == 0
    if a != b:
        assert lowered_bb == 1
    rng = np.random.default_rng(len(a) * 7 + len(b))
    np_dt = np.float16 if dtype == "f16" else np.float32
    xa = rng.uniform(0.5, 2.0, a).astype(np_dt)
    xb = rng.uniform(0.5, 2.0, b).astype(np_dt)
    y_on = on.run(a=xa, b=xb)["out"]
    y_off = off.run(a=xa, b=xb)["out"]
    fn = {"sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum}[op]
    ref = fn(xa.astype(np.float64), xb.astype(np.float64))
    assert y_on.shape == ref.shape and y_on.dtype == np_dt
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(y_off.astype(np.float64), ref, rtol=rtol, atol=atol)
    np.testing.assert_array_equal(y_on, y_off)


@pytest.mark.parametrize(
    "a,b",
    [([3, 4], [4]), ([3, 4], [3, 1]), ([2, 1, 5], [1, 3, 5])],
)
def test_real_broadcast_is_kept(
    monkeypatch: pytest.MonkeyPatch, a: list[int], b: list[int]
) -> None:
    exe = _compile(_graph("sub", a, b, "f32"), monkeypatch)
    assert exe.stats["pass_matches"][PASS] == 0
    assert exe.stats["by_thunk"].get("binary_broadcast") == 1
    rng = np.random.default_rng(1)
    xa = rng.standard_normal(a).astype(np.float32)
    xb = rng.standard_normal(b).astype(np.float32)
    np.testing.assert_allclose(exe.run(a=xa, b=xb)["out"], xa - xb, rtol=1e-6, atol=1e-7)


def test_materialised_operand_becomes_a_plain_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    # fma converts an operand of dims [8] for output [1, 8] through a
    # max(x, x) broadcast into scratch: dense, so a plain binary op.
    g = rlx.Graph("fma")
    a = g.input("a", [8])
    b = g.input("b", [1, 8])
    c = g.input("c", [1, 8])
    g.outputs(g.fma(a, b, c, name="out"))
    on = _compile(g, monkeypatch)
    off = _compile(g, monkeypatch, PASS)
    assert on.stats["pass_matches"][PASS] == 1
    assert off.stats["by_thunk"].get("binary_broadcast") == 1
    assert "binary_broadcast" not in on.stats["by_thunk"]
    rng = np.random.default_rng(2)
    feeds = {"a": rng.standard_normal(8), "b": rng.standard_normal((1, 8))}
    feeds["c"] = rng.standard_normal((1, 8))
    f32 = {k: v.astype(np.float32) for k, v in feeds.items()}
    ref = feeds["a"] * feeds["b"] + feeds["c"]
    y_on, y_off = on.run(**f32)["out"], off.run(**f32)["out"]
    np.testing.assert_allclose(y_off, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(y_on, y_off)
