"""fuse_residual_rms_norm on compiled graphs: outputs with the pass on equal
the outputs with it off (RLX_DISABLE_PASS), it fires where the residual sum
dies at the norm and refuses where the sum stays live."""

from __future__ import annotations

import numpy as np
import pytest
import rlx

PASS = "fuse_residual_rms_norm"
# the graph-level twin runs before lowering and would take the pattern first
IR_TWIN = "ir_fuse_residual_rms_norm"


def _compile(
    g: rlx.Graph, monkeypatch: pytest.MonkeyPatch, disable: str = "", ir_twin: bool = False
) -> rlx.Executable:
    names = [disable] if disable else []
    if not ir_twin:
        names.append(IR_TWIN)
    monkeypatch.setenv("RLX_DISABLE_PASS", ",".join(names))
    return rlx.compile(g)


def _final_norm_graph(rows: int, h: int) -> rlx.Graph:
    g = rlx.Graph("final_norm")
    x = g.input("x", [rows, h])
    r = g.input("r", [rows, h])
    s = g.add(x, r, name="sum")
    g.outputs(g.rms_norm(s, g.param("gamma", [h]), name="out"))
    return g


def _post_attention_graph(rows: int, h: int) -> rlx.Graph:
    # h2 = x + a; n = rms(h2); out = h2 + n  (the sum stays live)
    g = rlx.Graph("post_attn")
    x = g.input("x", [rows, h])
    a = g.input("a", [rows, h])
    h2 = g.add(x, a, name="h2")
    n = g.rms_norm(h2, g.param("gamma", [h]), name="n")
    g.outputs(g.add(h2, n, name="out"))
    return g


def _run(exe: rlx.Executable, gamma: np.ndarray, **inputs: np.ndarray) -> np.ndarray:
    exe.set_param("gamma", gamma)
    return next(iter(exe.run(**inputs).values()))


@pytest.mark.parametrize("rows,h", [(1, 576), (3, 7), (16, 640)])
def test_fires_and_matches_disabled(monkeypatch: pytest.MonkeyPatch, rows: int, h: int) -> None:
    rng = np.random.default_rng(rows * 1000 + h)
    x = rng.standard_normal((rows, h)).astype(np.float32)
    r = rng.standard_normal((rows, h)).astype(np.float32)
    gamma = rng.standard_normal(h).astype(np.float32)
    on = _compile(_final_norm_graph(rows, h), monkeypatch)
    off = _compile(_final_norm_graph(rows, h), monkeypatch, PASS)
    assert on.stats["pass_matches"][PASS] == 1
    assert off.stats["pass_matches"][PASS] == -1
    assert on.stats["dispatches"] == off.stats["dispatches"] - 1
    assert "fused_residual_rms_norm" in on.schedule
    assert "fused_residual_rms_norm" not in off.schedule
    y_on = _run(on, gamma, x=x, r=r)
    y_off = _run(off, gamma, x=x, r=r)
    s = x.astype(np.float64) + r
    ref = s / np.sqrt((s * s).mean(-1, keepdims=True) + 1e-6) * gamma
    np.testing.assert_allclose(y_off, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y_on, y_off, rtol=1e-5, atol=1e-6)
    assert PASS in on.report() and "dispatches" in on.report()


def test_graph_level_twin_takes_it_first(monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _compile(_final_norm_graph(2, 16), monkeypatch, ir_twin=True)
    assert exe.stats["pass_matches"][IR_TWIN] == 1
    assert exe.stats["pass_matches"][PASS] == 0
    assert "fused_residual_rms_norm" in exe.schedule


def test_refuses_live_sum(monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _compile(_post_attention_graph(2, 32), monkeypatch)
    assert exe.stats["pass_matches"][PASS] == 0
    assert "fused_residual_rms_norm" not in exe.schedule


def test_unknown_pass_name_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(rlx.RlxError, match="unknown pass 'fuse_nothing'"):
        _compile(_final_norm_graph(1, 8), monkeypatch, "fuse_nothing")
