"""Graph-level fusions (crates/rlx-metal/src/compile/fuse) on hand-built
graphs: each fires where its pattern holds (report and schedule show it),
outputs with every pass on equal the outputs with every pass off
(RLX_DISABLE_PASS = all of rlx.pass_names()), and each refuses its
must-not-fire cases.

Tolerances: f32 rtol = atol = 1e-5 (the fused kernels reassociate nothing
but may pick another matmul / reduction path); f16 rtol = atol = 1e-2.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import rlx

ALL = ",".join(rlx.pass_names())
F32_TOL = {"rtol": 1e-5, "atol": 1e-5}


def _compile(
    g: rlx.Graph, monkeypatch: pytest.MonkeyPatch, disable: str = "", **kw: Any
) -> rlx.Executable:
    monkeypatch.setenv("RLX_DISABLE_PASS", disable)
    return rlx.compile(g, **kw)


def _run(exe: rlx.Executable, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    for name in exe.params:
        exe.set_param(name, feed[name])
    return exe.run(**{k: v for k, v in feed.items() if k in exe.inputs})


def _feed(g: rlx.Graph, seed: int, dims: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for n in g:
        if n.op not in ("input", "param"):
            continue
        shape = tuple(dims[d] if isinstance(d, str) and dims else d for d in n.shape)
        out[n.name] = rng.standard_normal(shape).astype(np.dtype(n.dtype.replace("f", "float")))
    return out


def _on_off(
    g: rlx.Graph,
    monkeypatch: pytest.MonkeyPatch,
    seed: int = 0,
    tol: dict[str, float] = F32_TOL,
    **kw: Any,
) -> rlx.Executable:
    """Compile with all passes on and all off, check equal outputs, return the on one."""
    on = _compile(g, monkeypatch, **kw)
    off = _compile(g, monkeypatch, ALL, **kw)
    assert all(v == -1 for v in off.stats["pass_matches"].values())
    feed = _feed(g, seed, kw.get("dims"))
    a, b = _run(on, feed), _run(off, feed)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], err_msg=k, **tol)
    return on


def _matches(exe: rlx.Executable, name: str) -> int:
    return int(exe.stats["pass_matches"][name])


def test_pass_names_cover_graph_fusions() -> None:
    names = rlx.pass_names()
    assert len(names) == len(set(names))
    for n in (
        "ir_fuse_attention_block",
        "ir_fuse_matmul_bias_act",
        "ir_fuse_residual_layer_norm",
        "ir_fuse_residual_rms_norm",
        "ir_fuse_swiglu",
        "ir_elementwise_region",
    ):
        assert n in names
    assert names.index("ir_elementwise_region") < names.index("fuse_residual_rms_norm")


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_matmul_bias_act(monkeypatch: pytest.MonkeyPatch, dtype: str) -> None:
    g = rlx.Graph("mlp")
    x = g.input("x", [5, 12], dtype)
    w = g.param("w", [12, 7], dtype)
    b = g.param("b", [7], dtype)
    g.outputs(g.gelu(x @ w + b, name="y"))
    tol = F32_TOL if dtype == "f32" else {"rtol": 1e-2, "atol": 1e-2}
    on = _on_off(g, monkeypatch, tol=tol)
    assert _matches(on, "ir_fuse_matmul_bias_act") == 1
    assert "fused_mm_bias_act" in on.schedule
    assert on.stats["dispatches"] == 1
    assert "ir_fuse_matmul_bias_act [nodes]" in on.report()


def test_matmul_refuses_live_product(monkeypatch: pytest.MonkeyPatch) -> None:
    g = rlx.Graph("mlp")
    x = g.input("x", [5, 12])
    m = x @ g.param("w", [12, 7])
    g.outputs(g.relu(m + g.param("b", [7])), m)
    on = _on_off(g, monkeypatch)
    assert _matches(on, "ir_fuse_matmul_bias_act") == 0
    assert "fused_mm_bias_act" not in on.schedule


@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_residual_norms(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    g = rlx.Graph("res")
    x = g.input("x", [3, 40])
    r = g.input("r", [3, 40])
    gamma, beta = g.param("gamma", [40]), g.param("beta", [40])
    s = x + r
    y = g.layer_norm(s, gamma, beta) if kind == "layer" else g.rms_norm(s, gamma)
    g.outputs(y)
    on = _on_off(g, monkeypatch)
    name = f"ir_fuse_residual_{'layer' if kind == 'layer' else 'rms'}_norm"
    assert _matches(on, name) == 1
    assert ("fused_residual_ln" if kind == "layer" else "fused_residual_rms_norm") in on.schedule


def test_residual_layer_norm_with_bias(monkeypatch: pytest.MonkeyPatch) -> None:
    g = rlx.Graph("resb")
    x = g.input("x", [4, 16])
    r = g.input("r", [4, 16])
    b = g.param("b", [16])
    g.outputs(g.layer_norm(r + (x + b), g.param("gamma", [16]), g.param("beta", [16])))
    on = _on_off(g, monkeypatch)
    assert _matches(on, "ir_fuse_residual_layer_norm") == 1
    assert on.stats["dispatches"] == 1


def test_residual_refuses_live_sum(monkeypatch: pytest.MonkeyPatch) -> None:
    g = rlx.Graph("post_attn")
    x = g.input("x", [2, 32])
    a = g.input("a", [2, 32])
    h = x + a
    g.outputs(h + g.rms_norm(h, g.param("gamma", [32])))
    on = _on_off(g, monkeypatch)
    assert _matches(on, "ir_fuse_residual_rms_norm") == 0
    assert "fused_residual" not in on.schedule


def test_swiglu(monkeypatch: pytest.MonkeyPatch) -> None:
    g = rlx.Graph("swiglu")
    x = g.input("x", [3, 10])
    h = x @ g.param("w13", [10, 16])
    gate, up = g.narrow(h, -1, 0, 8), g.narrow(h, -1, 8, 8)
    g.outputs(g.silu(gate) * up)
    on = _on_off(g, monkeypatch)
    assert _matches(on, "ir_fuse_swiglu") == 1
    assert "fused_swiglu" in on.schedule


def test_elementwise_region(monkeypatch: pytest.MonkeyPatch) -> None:
    g = rlx.Graph("region")
    a = g.input("a", [6, 9])
    b = g.input("b", [6, 9])
    c = g.param("c", [9])
    d = g.input("d", [6, 1])
    ab = a * b
    y = (g.tanh(ab) + g.sigmoid(ab)) * c - d
    g.outputs(g.maximum(y, g.neg(y)))
    on = _on_off(g, monkeypatch)
    assert _matches(on, "ir_elementwise_region") == 1
    assert on.stats["by_thunk"].get("elementwise_region") == 1
    # no elementwise thunk is left outside the region (the param copy and
    # the [6, 1] broadcast that the region lowering adds are casts / copies)
    assert not {"activation_out", "binary", "binary_full", "bias_add"} & set(on.stats["by_thunk"])


def test_region_keeps_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    g = rlx.Graph("region_out")
    a = g.input("a", [4, 4])
    t = g.exp(g.tanh(a), name="t")
    g.outputs(g.neg(g.abs(t)), t)
    on = _on_off(g, monkeypatch)
    assert _matches(on, "ir_elementwise_region") == 2
    assert set(_run(on, _feed(g, 0))) == {"t", g.outputs()[0].name}


def _attention_graph(seq: int | str, rope: bool) -> rlx.Graph:
    heads, d, hidden = 2, 8, 12
    inner = heads * d
    g = rlx.Graph("attn")
    x = g.input("x", [1, seq, hidden])
    qkv = x @ g.param("w_qkv", [hidden, 3 * inner])
    q, k, v = (g.narrow(qkv, -1, i * inner, inner) for i in range(3))
    if rope:
        cos, sin = g.input("cos", [seq, d // 2]), g.input("sin", [seq, d // 2])
        q, k = (g.rope(t, cos, sin, head_dim=d) for t in (q, k))
    a = g.attention(q, k, v, heads=heads, mask="causal")
    g.outputs(g.matmul(a, g.param("w_out", [inner, hidden]), name="y"))
    return g


@pytest.mark.parametrize("rope", [False, True])
def test_attention_block(monkeypatch: pytest.MonkeyPatch, rope: bool) -> None:
    g = _attention_graph("seq", rope)
    on = _on_off(g, monkeypatch, dims={"seq": 7})
    assert _matches(on, "ir_fuse_attention_block") == 1
    assert "fused_attn" in on.schedule
    # the fused block on the numpy reference device agrees too
    ref = _compile(g, monkeypatch, device="reference", dims={"seq": 7})
    feed = _feed(g, 0, {"seq": 7})
    np.testing.assert_allclose(_run(ref, feed)["y"], _run(on, feed)["y"], rtol=1e-4, atol=1e-5)
    long = _compile(g, monkeypatch, dims={"seq": 65})
    assert _matches(long, "ir_fuse_attention_block") == 0
