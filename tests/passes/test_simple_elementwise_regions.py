"""rewrite_simple_elementwise_regions on compiled graphs: each chain shape the
pass rewrites gives the thunks it should, and the outputs equal the ones with
the pass off (RLX_DISABLE_PASS) and a float64 numpy evaluation of the chain;
shapes it must leave alone keep the region."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest
import rlx

PASS = "rewrite_simple_elementwise_regions"
SHAPE = (3, 37)  # odd sizes: no vector-width multiple

_BIN: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "max": np.maximum,
    "min": np.minimum,
    "pow": np.power,
}


def _act(name: str, x: np.ndarray) -> np.ndarray:
    from math import erf

    if name == "silu":
        return x / (1.0 + np.exp(-x))
    if name == "gelu":
        return x * 0.5 * (1.0 + np.vectorize(erf)(x / np.sqrt(2.0)))
    if name == "gelu_approx":
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "tanh":
        return np.tanh(x)
    if name == "exp":
        return np.exp(x)
    if name == "neg":
        return -x
    raise AssertionError(name)


def _eval(steps: list[tuple[Any, ...]], xs: list[np.ndarray]) -> np.ndarray:
    """The chain in float64, operands named as in region step shorthands."""
    vals: list[np.ndarray] = []

    def arg(a: str) -> np.ndarray:
        return (xs if a[0] == "x" else vals)[int(a[1:])]

    for head, *rest in steps:
        if head == "cast":
            vals.append(arg(rest[1]).astype(np.float64))
        elif head in _BIN:
            vals.append(_BIN[head](arg(rest[0]), arg(rest[1])))
        else:
            vals.append(_act(head, arg(rest[0])))
    return vals[-1]


def _graph(n_in: int, steps: list[tuple[Any, ...]], shapes: list[tuple[int, ...]]) -> rlx.Graph:
    g = rlx.Graph("region")
    xs = [g.input(f"x{i}", list(shapes[i])) for i in range(n_in)]
    g.outputs(g.elementwise_region(xs, steps, name="out"))
    return g


def _compile(g: rlx.Graph, monkeypatch: pytest.MonkeyPatch, disable: str = "") -> rlx.Executable:
    monkeypatch.setenv("RLX_DISABLE_PASS", disable)
    return rlx.compile(g)


def _inputs(n_in: int, shapes: list[tuple[int, ...]], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    # positive operands keep div / pow / log-free chains finite
    return [rng.uniform(0.5, 2.0, s).astype(np.float32) for s in shapes[:n_in]]


CASES = [
    # (steps, inputs, thunk kinds the region becomes)
    ([("mul", "x0", "x1")], 2, {"binary": 1}),
    ([("div", "x1", "x0")], 2, {"binary": 1}),
    ([("pow", "x0", "x1")], 2, {"binary": 1}),
    ([("sub", "x0", "x1"), ("silu", "s0")], 2, {"fused_binary_activation": 1}),
    ([("add", "x0", "x1"), ("gelu_approx", "s0")], 2, {"fused_binary_activation": 1}),
    ([("mul", "x0", "x1"), ("gelu", "s0")], 2, {"fused_binary_activation": 1}),
    (
        [("add", "x0", "x1"), ("mul", "s0", "x2"), ("tanh", "s1")],
        3,
        {"fused_ternary_activation": 1},
    ),
    ([("max", "x0", "x1"), ("sub", "s0", "x2")], 3, {"binary": 2}),
    ([("add", "x0", "x1"), ("mul", "s0", "x2"), ("min", "s1", "x3")], 4, {"binary": 3}),
    ([("cast", "f32", "x0"), ("add", "s0", "x1")], 2, {"binary": 1}),
    ([("exp", "x0")], 1, {"activation_out": 1}),
    ([("neg", "x0")], 1, {"activation_out": 1}),
]


@pytest.mark.parametrize("steps,n_in,kinds", CASES, ids=lambda c: str(c))
def test_rewrites_and_matches_disabled(
    monkeypatch: pytest.MonkeyPatch, steps: list[tuple[Any, ...]], n_in: int, kinds: dict[str, int]
) -> None:
    shapes = [SHAPE] * n_in
    on = _compile(_graph(n_in, steps, shapes), monkeypatch)
    off = _compile(_graph(n_in, steps, shapes), monkeypatch, PASS)
    assert on.stats["pass_matches"][PASS] == 1
    assert off.stats["pass_matches"][PASS] == -1
    assert off.stats["by_thunk"].get("elementwise_region") == 1
    by = on.stats["by_thunk"]
    assert "elementwise_region" not in by
    for kind, count in kinds.items():
        assert by.get(kind) == count, (kind, by)
    assert on.stats["fallback_thunks"] == 0  # every replacement has a native kernel
    extra = sum(kinds.values()) - 1  # the splits add dispatches
    assert on.stats["dispatches"] == off.stats["dispatches"] + extra
    xs = _inputs(n_in, shapes, seed=len(steps) * 10 + n_in)
    feeds = {f"x{i}": x for i, x in enumerate(xs)}
    y_on = on.run(**feeds)["out"]
    y_off = off.run(**feeds)["out"]
    ref = _eval(steps, [x.astype(np.float64) for x in xs])
    np.testing.assert_allclose(y_off, ref, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(y_on, y_off, rtol=2e-6, atol=1e-7)


def test_f16_input_is_converted_and_still_rewritten(monkeypatch: pytest.MonkeyPatch) -> None:
    # regions compute in f32: an f16 input goes through a cast to f32
    # scratch, after which the chain's cast to f32 is the identity.
    g = rlx.Graph("region_f16")
    a = g.input("a", list(SHAPE), "f16")
    b = g.input("b", list(SHAPE))
    g.outputs(
        g.elementwise_region([a, b], [("cast", "f32", "x0"), ("sub", "s0", "x1")], name="out")
    )
    on = _compile(g, monkeypatch)
    off = _compile(g, monkeypatch, PASS)
    assert on.stats["pass_matches"][PASS] == 1
    assert on.stats["by_thunk"] == {"cast": 1, "binary": 1}
    rng = np.random.default_rng(3)
    xa = rng.standard_normal(SHAPE).astype(np.float16)
    xb = rng.standard_normal(SHAPE).astype(np.float32)
    ref = xa.astype(np.float64) - xb
    y_on, y_off = on.run(a=xa, b=xb)["out"], off.run(a=xa, b=xb)["out"]
    np.testing.assert_allclose(y_off, ref, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(y_on, y_off)


@pytest.mark.parametrize(
    "steps,shapes",
    [
        # a broadcast operand (trailing period / scalar): lengths differ
        ([("add", "x0", "x1"), ("silu", "s0")], [SHAPE, (SHAPE[1],)]),
        ([("mul", "x0", "x1")], [SHAPE, (1,)]),
        # a rounding cast is not an identity
        ([("cast", "f16", "x0"), ("add", "s0", "x1")], [SHAPE, SHAPE]),
        # step result as the right operand of the second step
        ([("add", "x0", "x1"), ("sub", "x1", "s0")], [SHAPE, SHAPE]),
        # four steps
        (
            [("add", "x0", "x1"), ("mul", "s0", "x1"), ("exp", "s1"), ("neg", "s2")],
            [SHAPE, SHAPE],
        ),
    ],
)
def test_keeps_other_regions(
    monkeypatch: pytest.MonkeyPatch, steps: list[tuple[Any, ...]], shapes: list[tuple[int, ...]]
) -> None:
    exe = _compile(_graph(len(shapes), steps, shapes), monkeypatch)
    assert exe.stats["pass_matches"][PASS] == 0
    assert exe.stats["by_thunk"].get("elementwise_region") == 1


def test_rewritten_region_output_feeds_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    # the split pair's result is read by a later op and is also an output
    g = rlx.Graph("chain")
    a, b, c = (g.input(n, list(SHAPE)) for n in "abc")
    r = g.elementwise_region([a, b, c], [("add", "x0", "x1"), ("mul", "s0", "x2")], name="r")
    g.outputs(r, g.sub(r, a, name="after"))
    on = _compile(g, monkeypatch)
    off = _compile(g, monkeypatch, PASS)
    assert on.stats["pass_matches"][PASS] == 1
    rng = np.random.default_rng(7)
    feeds = {n: rng.standard_normal(SHAPE).astype(np.float32) for n in "abc"}
    y_on, y_off = on.run(**feeds), off.run(**feeds)
    x = {k: v.astype(np.float64) for k, v in feeds.items()}
    ref_r = (x["a"] + x["b"]) * x["c"]
    for k, ref in (("r", ref_r), ("after", ref_r - x["a"])):
        np.testing.assert_allclose(y_off[k], ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(y_on[k], y_off[k])
