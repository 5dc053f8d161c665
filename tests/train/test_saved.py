"""Saved activations of a training graph (:mod:`rlx.train.saved`) and
``rlx inspect MODEL --train``."""

from __future__ import annotations

from pathlib import Path

import pytest
import rlx
from rlx.cli import main
from rlx.train.saved import Planned, live_peak, saved_activations, value_plan

GGUF = Path(__file__).resolve().parent.parent / "fixtures" / "gguf" / "llama-q8_0.gguf"


def test_tanh_output_is_saved_until_its_gradient() -> None:
    g = rlx.Graph("mlp")
    x, w = g.input("x", [4, 8]), g.param("w", [8, 3])
    z = x @ w
    y = g.tanh(z)
    loss = g.sum(y)
    (dw,) = rlx.grad(g, loss, [w])
    saved = saved_activations(g, loss.id)
    ids = {s.node for s in saved}
    # d tanh = 1 - y²: the backward reads y; x and w are leaves (not counted)
    assert y.id in ids and x.id not in ids and w.id not in ids
    sy = next(s for s in saved if s.node == y.id)
    assert sy.nbytes == 4 * 3 * 4 and loss.id < sy.last_read <= dw.id
    peak, _ = live_peak(saved)
    assert peak >= sy.nbytes


def _fused_mlp() -> tuple[rlx.Graph, rlx.Node, rlx.Node, rlx.Node, rlx.Node]:
    """x @ w + b → gelu (one fused node after ir_fuse_matmul_bias_act) → tanh
    → loss; the backward reads the gelu output (tanh') and its input."""
    g = rlx.Graph("mlp")
    x, w, b = g.input("x", [4, 8]), g.param("w", [8, 16]), g.param("b", [16])
    h = g.gelu(x @ w + b)
    y = g.tanh(h)
    loss = g.sum(y * y)
    (dw,) = rlx.grad(g, loss, [w])
    g.outputs(loss, dw)
    return g, h, y, loss, dw


def test_saved_values_carry_the_planner_intervals() -> None:
    g, h, y, loss, dw = _fused_mlp()
    exe = rlx.compile(g, device="host")
    steps, plan = value_plan(exe)
    # the matmul and the bias add were fused into h's node: no value of
    # their own, and the planner's steps are fewer than the graph's nodes
    assert steps < len(g)
    assert plan[3] is None and g.nodes[3].op == "mat_mul"
    saved = {s.node: s for s in saved_activations(g, loss.id, exe)}
    assert h.id in saved and y.id in saved
    ph, py, pl = saved[h.id].planned, saved[y.id].planned, plan[loss.id]
    assert ph is not None and py is not None and pl is not None
    # saved: defined in the forward, last read after the loss step
    for p in (ph, py):
        assert p.start <= pl.step < p.end <= p.held_until < steps
    assert ph.step < py.step < pl.step and ph.start == ph.step and py.start == py.step
    # held at once, so in disjoint bytes
    assert ph.offset + ph.nbytes <= py.offset or py.offset + py.nbytes <= ph.offset
    _check_against_schedule(exe, ph, pl)
    _check_against_schedule(exe, py, pl)
    peak, at = live_peak(list(saved.values()))
    assert peak >= ph.nbytes + py.nbytes and ph.start <= at <= pl.step


def _check_against_schedule(exe: rlx.Executable, p: Planned, loss: Planned) -> None:
    """The compiled schedule keeps the value where the planner says: a thunk
    writes exactly its bytes, and before any later thunk writes over them, a
    thunk after the loss's (the backward) reads them."""
    rows = exe._native.thunk_rows()
    lo, hi = p.offset, p.offset + p.nbytes

    def touches(rs: list) -> bool:
        return any(b == "arena" and o < hi and lo < o + n for b, o, n in rs)

    def writer(q: Planned) -> int:
        return next(i for i, r in enumerate(rows) if ("arena", q.offset, q.nbytes) in r[3])

    first, at_loss = writer(p), writer(loss)
    over = next((i for i in range(first + 1, len(rows)) if touches(rows[i][3])), len(rows))
    assert first < at_loss
    assert any(touches(rows[i][2]) for i in range(at_loss + 1, min(over + 1, len(rows))))


def test_inspect_train_prints_saved_activations(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(GGUF), "--train", "--seq", "16"]) == 0
    out = capsys.readouterr().out
    assert "saved activations:" in out and "planner: arena" in out
    assert "steps (def..last read)" in out and "held to" in out and "offset" in out
