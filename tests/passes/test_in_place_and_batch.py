"""The planner / pass / op paths that make the last seed elementwise thunks
(issue 19): ``in_place_activation`` (``ActivationInPlace``: an activation
whose operand dies there runs on the operand's bytes), the
``batch_elementwise_regions`` pass (``BatchElementwiseRegion``: same-chain
regions in one launch), the large-arena GELU (``GeluApproxHost``) and the
trunc cast (``CastTruncF32``).

Each is checked against a float64 numpy evaluation and against the compile
with the step switched off, on the host and on metal-sim."""

from __future__ import annotations

import numpy as np
import pytest
import rlx

SHAPE = [24, 40]


def _softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _chain_graph() -> rlx.Graph:
    """softmax → tanh → transpose → sigmoid → softmax → silu: each
    activation's operand dies at it (the transposes and softmaxes keep the
    graph fusions from folding the activations into regions)."""
    g = rlx.Graph("in_place_chain")
    x = g.input("x", SHAPE)
    h = g.tanh(g.softmax(x))
    h = g.sigmoid(g.transpose(h))
    h = g.silu(g.softmax(h))
    g.outputs(h)
    return g


def _chain_ref(x: np.ndarray) -> np.ndarray:
    h = np.tanh(_softmax(x.astype(np.float64)))
    h = 1.0 / (1.0 + np.exp(-h.T))
    h = _softmax(h)
    return h / (1.0 + np.exp(-h))


def _x() -> np.ndarray:
    return np.random.default_rng(3).uniform(-3, 3, SHAPE).astype(np.float32)


def _widen_graph() -> rlx.Graph:
    """x [1, 1024] → concat ×4 → tanh → sum: the tanh step is the peak
    (its operand and result, 16 KiB each) unless it runs in place."""
    g = rlx.Graph("widen")
    x = g.input("x", [1, 1024])
    g.outputs(g.sum(g.tanh(g.concat([x, x, x, x], axis=0)), 0))
    return g


def test_in_place_activation_shrinks_the_arena(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(4).uniform(-2, 2, [1, 1024]).astype(np.float32)
    on = rlx.compile(_widen_graph())
    monkeypatch.setenv("RLX_DISABLE_PASS", "in_place_activation")
    off = rlx.compile(_widen_graph())
    assert on.stats["naive_bytes"] == off.stats["naive_bytes"] == 40960
    # x + the concat (4 + 16 KiB) against concat + tanh (2 × 16 KiB) + x
    assert (on.stats["arena_bytes"], off.stats["arena_bytes"]) == (20480, 36864)
    (k,) = on.run(x=x)
    np.testing.assert_array_equal(on.run(x=x)[k], off.run(x=x)[k])
    np.testing.assert_allclose(on.run(x=x)[k], 4 * np.tanh(x[0].astype(np.float64)), rtol=1e-5)


@pytest.mark.parametrize("device", ["host", "metal-sim"])
def test_in_place_activation_chain(monkeypatch: pytest.MonkeyPatch, device: str) -> None:
    x = _x()
    on = rlx.compile(_chain_graph(), device=device)
    monkeypatch.setenv("RLX_DISABLE_PASS", "in_place_activation")
    off = rlx.compile(_chain_graph(), device=device)
    # all three activations run in place; with the step off, none
    assert on.stats["by_thunk"].get("activation") == 3, on.stats["by_thunk"]
    assert "activation_out" not in on.stats["by_thunk"]
    assert off.stats["by_thunk"].get("activation_out") == 3
    assert "activation" not in off.stats["by_thunk"]
    assert on.stats["pass_matches"]["in_place_activation"] == 3
    assert off.stats["pass_matches"]["in_place_activation"] == -1
    assert on.stats["naive_bytes"] == off.stats["naive_bytes"]
    a, b = on.run(x=x), off.run(x=x)
    (ka,) = a
    np.testing.assert_array_equal(a[ka], b[ka])
    np.testing.assert_allclose(a[ka], _chain_ref(x), rtol=1e-5, atol=1e-6)


def test_run_inputs_and_live_operands_are_not_overwritten() -> None:
    g = rlx.Graph("keep")
    x = g.input("x", SHAPE)
    s = g.softmax(x)
    # tanh(x): x is a run input; sigmoid(s): s is read again by the add
    g.outputs(g.tanh(x), g.add(g.sigmoid(s), s))
    exe = rlx.compile(g)
    assert "activation" not in exe.stats["by_thunk"], exe.stats["by_thunk"]
    xv = _x()
    out = exe.run(x=xv)
    np.testing.assert_array_equal(xv, _x())  # the caller's array is untouched
    sm = _softmax(xv.astype(np.float64))
    got = sorted(out.values(), key=lambda v: float(np.asarray(v).sum()))
    want = sorted(
        [np.tanh(xv.astype(np.float64)), 1 / (1 + np.exp(-sm)) + sm], key=lambda v: float(v.sum())
    )
    for gv, wv in zip(got, want):
        np.testing.assert_allclose(gv, wv, rtol=1e-5, atol=1e-6)


def _batch_graph(k: int) -> rlx.Graph:
    """k regions with one chain; the concat keeps every input alive to the
    end, so no region output is planned on another region's inputs."""
    g = rlx.Graph("batch")
    outs, ins = [], []
    for i in range(k):
        a, b = g.input(f"a{i}", SHAPE), g.input(f"b{i}", SHAPE)
        ins += [a, b]
        outs.append(g.exp(g.sin(a) * b))
    g.outputs(*outs, g.concat(ins, axis=0))
    return g


@pytest.mark.parametrize("device", ["host", "metal-sim"])
def test_batch_elementwise_regions(monkeypatch: pytest.MonkeyPatch, device: str) -> None:
    k = 3
    rng = np.random.default_rng(5)
    feeds = {
        f"{n}{i}": rng.uniform(-1, 1, SHAPE).astype(np.float32) for i in range(k) for n in "ab"
    }
    on = rlx.compile(_batch_graph(k), device=device)
    assert on.stats["by_thunk"]["batch_elementwise_region"] == 1, on.stats["by_thunk"]
    assert "elementwise_region" not in on.stats["by_thunk"]
    assert on.stats["pass_matches"]["batch_elementwise_regions"] == 1
    assert "batch_elementwise_region" not in on.stats.get("fallback_by_thunk", {})
    assert "batch_elementwise_region" not in on.stats["metal_host_by_thunk"]
    monkeypatch.setenv("RLX_DISABLE_PASS", "batch_elementwise_regions")
    off = rlx.compile(_batch_graph(k), device=device)
    assert off.stats["by_thunk"]["elementwise_region"] == k
    a, b = on.run(**feeds), off.run(**feeds)
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    for i, name in enumerate(list(a)[:k]):
        want = np.exp(np.sin(feeds[f"a{i}"].astype(np.float64)) * feeds[f"b{i}"])
        np.testing.assert_allclose(a[name], want, rtol=1e-5, atol=1e-6)


def test_dependent_regions_are_not_batched() -> None:
    # the second region reads the first one's output
    g = rlx.Graph("dep")
    a, b, d = g.input("a", SHAPE), g.input("b", SHAPE), g.input("d", SHAPE)
    r1 = g.exp(g.sin(a) * b)
    g.outputs(r1, g.exp(g.sin(r1) * d), g.concat([a, b, d], axis=0))
    exe = rlx.compile(g)
    assert "batch_elementwise_region" not in exe.stats["by_thunk"], exe.stats["by_thunk"]
    # the second output is planned on the first region's dead inputs: the
    # two cannot run at once either
    g = rlx.Graph("reuse")
    ins = [g.input(n, SHAPE) for n in "abcd"]
    g.outputs(g.exp(g.sin(ins[0]) * ins[1]), g.exp(g.sin(ins[2]) * ins[3]))
    exe = rlx.compile(g)
    assert exe.stats["by_thunk"] == {"elementwise_region": 2}, exe.schedule


@pytest.mark.parametrize("device", ["host", "metal-sim"])
def test_gelu_host_past_the_arena_threshold(monkeypatch: pytest.MonkeyPatch, device: str) -> None:
    g = rlx.Graph("gelu")
    g.outputs(g.gelu_approx(g.input("x", SHAPE)))
    x = _x()
    small = rlx.compile(g, device=device)
    assert "gelu_approx_out" in small.stats["by_thunk"]
    monkeypatch.setenv("RLX_GELU_HOST_ARENA_BYTES", str(small.stats["arena_bytes"] - 1))
    big = rlx.compile(g, device=device)
    assert big.stats["by_thunk"] == {"gelu_approx_host": 1}
    # the seed's unified-memory host path: a host command in the Metal plan
    assert big.stats["metal_host_by_thunk"] == {"gelu_approx_host": 1}
    (k,) = small.run(x=x)
    a, b = small.run(x=x)[k], big.run(x=x)[k]
    if device == "host":
        np.testing.assert_array_equal(a, b)  # one host formula for both thunks
    else:
        # the Metal kernel's tanh form against the host's x·σ(2u) form
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7)
    x64 = x.astype(np.float64)
    want = 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64**3)))
    np.testing.assert_allclose(b, want, rtol=1e-5, atol=1e-6)


_SPECIAL = [2.5, -2.5, 0.9999999, -0.9999999, -0.0, 3e9, np.inf, -np.inf, np.nan]


@pytest.mark.parametrize("device", ["reference", "host", "metal-sim"])
@pytest.mark.parametrize(("src", "dst"), [("f32", "f32"), ("f16", "f32"), ("f32", "f16")])
def test_trunc_cast(device: str, src: str, dst: str) -> None:
    np_dt = {"f32": np.float32, "f16": np.float16}
    x = np.random.default_rng(8).uniform(-300, 300, 37).astype(np_dt[src])
    with np.errstate(over="ignore"):
        x[: len(_SPECIAL)] = np.asarray(_SPECIAL).astype(np_dt[src])
    g = rlx.Graph("trunc")
    g.outputs(g.cast(g.input("x", [37], src), dst, trunc=True))
    exe = rlx.compile(g, device=device)
    if device != "reference":
        assert exe.stats["by_thunk"].get("cast_trunc_f32") == 1, exe.stats["by_thunk"]
        assert "cast_trunc_f32" not in exe.stats.get("fallback_by_thunk", {})
        assert "cast_trunc_f32" not in exe.stats["metal_host_by_thunk"]
    (got,) = exe.run(x=x).values()
    with np.errstate(over="ignore"):
        want = np.trunc(x.astype(np.float64)).astype(np_dt[dst])
    assert got.dtype == np_dt[dst]
    # bit for bit: signed zeros, infinities and NaN kept
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(got, want)


def test_trunc_cast_errors_and_gradient() -> None:
    g = rlx.Graph("bad")
    with pytest.raises(rlx.RlxError, match=r"\[cast\].*float to a float"):
        g.cast(g.input("i", [3], "i32"), "f32", trunc=True)
    g = rlx.Graph("f64")
    g.outputs(g.cast(g.input("x", [3], "f64"), "f32", trunc=True))
    with pytest.raises(rlx.RlxError, match="cast.*trunc cast computes in f32"):
        rlx.compile(g)
    # piecewise constant: zero gradient
    g = rlx.Graph("grad")
    x = g.input("x", [5])
    (dx,) = rlx.grad(g, g.sum(g.cast(x, "f32", trunc=True) * x), [x])
    g.outputs(dx)
    xv = np.array([0.5, 1.5, -2.7, 3.0, 9.9], np.float32)
    (got,) = rlx.compile(g).run(x=xv).values()
    np.testing.assert_array_equal(got, np.trunc(xv))
