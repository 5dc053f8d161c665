"""API behaviour of compiled executables: input / param checks, IEEE
specials, errors raised inside Python callbacks, custom ops, RLX_VERIFY,
unsupported ops, symbolic dims and the schedule printout."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import rlx

DEVICES = ["host", "reference"]


def _mlp() -> rlx.Graph:
    g = rlx.Graph("mlp")
    x = g.input("x", [2, 3])
    w = g.param("w", [3, 4])
    b = g.param("b", [4])
    g.outputs(g.matmul_bias_act(x, w, b, act="relu", name="y"))
    return g


def _bound(device: str = "host") -> rlx.Executable:
    exe = rlx.compile(_mlp(), device=device)
    exe.set_param("w", np.ones((3, 4), np.float32))
    exe.set_param("b", np.zeros(4, np.float32))
    return exe


# ------------------------------------------------------------------ inputs
@pytest.mark.parametrize("device", DEVICES)
def test_wrong_input_name(device: str) -> None:
    exe = _bound(device)
    with pytest.raises(rlx.ShapeError, match=r"unknown input.*'z'.*'x'"):
        exe.run(z=np.zeros((2, 3), np.float32))


@pytest.mark.parametrize("device", DEVICES)
def test_missing_input(device: str) -> None:
    exe = _bound(device)
    with pytest.raises(rlx.ShapeError, match=r"missing input.*'x'"):
        exe.run()


@pytest.mark.parametrize("device", DEVICES)
def test_wrong_input_shape(device: str) -> None:
    exe = _bound(device)
    with pytest.raises(rlx.ShapeError) as e:
        exe.run(x=np.zeros((3, 2), np.float32))
    msg = str(e.value)
    assert "'x'" in msg and "[2, 3]" in msg and "[3, 2]" in msg


@pytest.mark.parametrize("device", DEVICES)
def test_wrong_input_dtype(device: str) -> None:
    exe = _bound(device)
    with pytest.raises(rlx.DTypeError) as e:
        exe.run(x=np.zeros((2, 3), np.complex64))
    msg = str(e.value)
    assert "'x'" in msg and "f32" in msg and "complex64" in msg
    g = rlx.Graph("idx")
    x = g.input("x", [2, 3])
    w = g.param("w", [2, 3, 4])
    i = g.input("i", [2], "i32")
    g.outputs(g.grouped_matmul(x, w, i))
    exe = rlx.compile(g, device=device)
    exe.set_param("w", np.zeros((2, 3, 4), np.float32))
    with pytest.raises(rlx.DTypeError, match=r"'i'.*i32.*float32"):
        exe.run(x=np.zeros((2, 3), np.float32), i=np.zeros(2, np.float32))


def test_input_same_kind_cast_is_accepted() -> None:
    exe = _bound()
    x = np.arange(6, dtype=np.float64).reshape(2, 3)
    np.testing.assert_array_equal(exe.run(x=x)["y"], np.repeat(x.sum(1, keepdims=True), 4, 1))


def test_errors_form_a_hierarchy() -> None:
    for cls in (rlx.ShapeError, rlx.DTypeError, rlx.UnsupportedOpError, rlx.KernelError):
        assert issubclass(cls, rlx.RlxError)


# ------------------------------------------------------------------ params
@pytest.mark.parametrize("device", DEVICES)
def test_missing_params_are_listed(device: str) -> None:
    exe = rlx.compile(_mlp(), device=device)
    with pytest.raises(rlx.RlxError, match=r"params not set: b, w"):
        exe.run(x=np.zeros((2, 3), np.float32))
    exe.set_param("w", np.ones((3, 4), np.float32))
    with pytest.raises(rlx.RlxError, match=r"params not set: b$"):
        exe.run(x=np.zeros((2, 3), np.float32))


def test_set_param_checks() -> None:
    exe = rlx.compile(_mlp())
    with pytest.raises(KeyError, match="no param named 'nope'"):
        exe.set_param("nope", np.zeros(1))
    with pytest.raises(rlx.ShapeError, match=r"'w'.*\[3, 4\].*\[4, 3\]"):
        exe.set_param("w", np.zeros((4, 3), np.float32))


# ------------------------------------------------------------ IEEE specials
@pytest.mark.parametrize("device", DEVICES)
def test_nan_and_inf_propagate(device: str) -> None:
    g = rlx.Graph("ieee")
    x = g.input("x", [2, 4])
    w = g.param("w", [4, 3])
    e = g.exp(x, name="e")
    y = g.matmul(x, w, name="y")
    g.outputs(e, y)
    exe = rlx.compile(g, device=device)
    wv = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 0]], np.float32)
    exe.set_param("w", wv)
    xv = np.array([[np.nan, np.inf, -np.inf, 0.0], [1.0, -1.0, 2.0, np.inf]], np.float32)
    out = exe.run(x=xv)
    with np.errstate(all="ignore"):
        # same NaN / ±inf positions, finite values to f32 rounding
        np.testing.assert_allclose(out["e"], np.exp(xv), rtol=1e-6)
        # inf·0 = NaN (IEEE), so the all-zero row of w still meets x's inf
        want = xv.astype(np.float64) @ wv.astype(np.float64)
    np.testing.assert_array_equal(out["y"], want.astype(np.float32))
    assert np.isnan(out["y"][0]).all() and np.isnan(out["y"][1]).all()


@pytest.mark.parametrize("device", DEVICES)
def test_nan_through_norm_and_attention(device: str) -> None:
    g = rlx.Graph("ieee2")
    x = g.input("x", [1, 3, 4])
    gm, bt = g.param("g", [4]), g.param("b", [4])
    n = g.layer_norm(x, gm, bt, name="n")
    a = g.attention(x, x, x, heads=2, mask="causal", name="a")
    g.outputs(n, a)
    exe = rlx.compile(g, device=device)
    exe.set_param("g", np.ones(4, np.float32))
    exe.set_param("b", np.zeros(4, np.float32))
    xv = np.ones((1, 3, 4), np.float32)
    xv[0, 1, 2] = np.nan  # row 1 poisoned; row 0 is clean
    out = exe.run(x=xv)
    assert np.isnan(out["n"][0, 1]).all()
    assert np.isfinite(out["n"][0, [0, 2]]).all()
    # causal: query 0 sees only key 0 (clean); query 1 and 2 see the NaN key in head 1
    assert np.isfinite(out["a"][0, 0]).all()
    assert np.isnan(out["a"][0, 1, 2:]).all() and np.isnan(out["a"][0, 2, 2:]).all()
    assert np.isfinite(out["a"][0, 2, :2]).all()  # head 0 never touches the NaN


# ------------------------------------------------------------- custom ops
def _shape_same(x: Any) -> Any:
    return x


def _register_picky() -> None:
    def host(inputs: list[np.ndarray], out: np.ndarray, *, scale: float) -> None:
        if (inputs[0] < 0).any():
            raise ValueError("picky_op: negative input")
        out[...] = np.sqrt(inputs[0]) * scale

    rlx.register_op("picky_op", lambda x, **_: x, host)


@pytest.mark.parametrize("device", DEVICES)
def test_custom_op_round_trip(device: str) -> None:
    def shape(a: Any, b: Any, **_: Any) -> Any:
        return ([a[0][0], b[0][1]], "f32")

    def host(inputs: list[np.ndarray], out: np.ndarray, *, power: int) -> None:
        out[...] = (inputs[0] @ inputs[1]) ** power

    rlx.register_op("mm_pow", shape, host)
    g = rlx.Graph("custom")
    a = g.input("a", [2, 3])
    b = g.input("b", [3, 5])
    c = g.custom_op("mm_pow", g.exp(a), b, power=2, name="c")
    g.outputs(g.neg(c, name="y"))
    exe = rlx.compile(g, device=device)
    exe.verify()
    rng = np.random.default_rng(0)
    av, bv = (
        rng.standard_normal((2, 3)).astype(np.float32),
        rng.standard_normal((3, 5)).astype(np.float32),
    )
    want = -((np.exp(av.astype(np.float64)) @ bv) ** 2)
    np.testing.assert_allclose(exe.run(a=av, b=bv)["y"], want, rtol=1e-5, atol=1e-5)
    assert exe.stats["by_thunk"]["custom_op"] == 1


@pytest.mark.parametrize("device", DEVICES)
def test_callback_exception_surfaces_and_executable_survives(device: str) -> None:
    _register_picky()
    g = rlx.Graph("picky")
    x = g.input("x", [4])
    y = g.custom_op("picky_op", x, scale=2.0, name="p")
    g.outputs(g.exp(y, name="y"))
    exe = rlx.compile(g, device=device)
    with pytest.raises(rlx.RlxError) as e:
        exe.run(x=np.array([1, -1, 4, 9], np.float32))
    assert "custom_op" in str(e.value)
    assert isinstance(e.value.__cause__, ValueError)
    assert "negative input" in str(e.value.__cause__)
    out = exe.run(x=np.array([1, 0, 4, 9], np.float32))
    np.testing.assert_allclose(out["y"], np.exp(2 * np.sqrt([1, 0, 4, 9])), rtol=1e-6)


def test_custom_op_unknown_name() -> None:
    g = rlx.Graph("nope")
    x = g.input("x", [2])
    with pytest.raises(KeyError, match="no op registered under 'never_registered'"):
        g.custom_op("never_registered", x)


# ---------------------------------------------------------- verify / compile
def test_rlx_verify_runs_at_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLX_VERIFY", raising=False)
    assert rlx.compile(_mlp()).stats["verified_at_compile"] is False
    monkeypatch.setenv("RLX_VERIFY", "1")
    assert rlx.compile(_mlp()).stats["verified_at_compile"] is True
    exe = rlx.compile(_mlp(), device="reference")
    assert exe.stats["verified_at_compile"] is True
    exe.verify()


def test_unsupported_op_names_the_op() -> None:
    g = rlx.Graph("half_cumsum")
    x = g.input("x", [2, 8], "f16")
    g.outputs(g.cumsum(x, name="running_total"))
    with pytest.raises(rlx.UnsupportedOpError, match=r"\[cumsum\]") as e:
        rlx.compile(g)
    assert "running_total" in str(e.value)


def test_unbound_symbolic_dim() -> None:
    g = rlx.Graph("sym")
    x = g.input("x", ["seq", 4])
    g.outputs(g.exp(x, name="y"))
    with pytest.raises(rlx.ShapeError, match="seq"):
        rlx.compile(g)
    for n in (1, 5):
        exe = rlx.compile(g, dims={"seq": n})
        assert exe.inputs["x"].shape == (n, 4)
        xv = np.linspace(-1, 1, 4 * n, dtype=np.float32).reshape(n, 4)
        np.testing.assert_allclose(exe.run(x=xv)["y"], np.exp(xv), rtol=1e-6)


def test_schedule_lists_offsets() -> None:
    exe = rlx.compile(_mlp())
    lines = exe.schedule.strip().splitlines()
    assert len(lines) == exe.stats["thunks"] == 1
    line = lines[0]
    assert line.startswith("0 fused_mm_bias_act")
    offs = re.findall(r"(\w+)=(W\d+|S|)@(\d+)", line)
    fields = {k: (w, int(o)) for k, w, o in offs}
    assert {"a", "w", "bias", "c"} <= fields.keys()
    # each param in its own weights segment (1 + declaration index), at offset 0
    assert fields["w"] == ("W1", 0) and fields["bias"] == ("W2", 0)
    assert fields["a"][0] == "" and fields["c"][0] == ""
    assert fields["a"][1] != fields["c"][1]
    assert "m=2 k=3 n=4" in line


def test_repr_and_stats() -> None:
    exe = _bound()
    s = exe.stats
    assert s["native_thunks"] + s["fallback_thunks"] == s["thunks"]
    assert s["fallback_by_thunk"] == {}
    assert repr(exe).startswith("<rlx.Executable device=host thunks=1")
    ref = _bound("reference")
    assert ref.stats["fallback_by_thunk"] == {"fused_mm_bias_act": 1}
    with pytest.raises(ValueError, match="unknown device"):
        rlx.compile(_mlp(), device="gpu")
