"""Learning-rate schedules (:mod:`rlx.optim.schedule`) and gradient
accumulation in compiled training steps.

The schedules are checked against the formulas of transformers'
``get_constant_schedule_with_warmup`` / ``get_linear_schedule_with_warmup``
/ ``get_cosine_schedule_with_warmup`` (``lr_lambda`` of each, written out
below; transformers itself is not a test dependency), both in numpy and as
the IR the compiled step evaluates. A scheduled step is checked against a
numpy AdamW with torch.optim's formulas, and k accumulated micro-batches
against one step over the k× batch.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import rlx
from rlx.optim import (
    MICRO_STATE,
    SGD,
    STEP_STATE,
    AdamW,
    ConstantSchedule,
    CosineSchedule,
    LinearSchedule,
    OptimizerError,
    ScheduleError,
    get_schedule,
    train_step,
)


# transformers/optimization.py, the lr_lambda of each schedule
def hf_constant(step: int, warmup: int) -> float:
    if step < warmup:
        return float(step) / float(max(1.0, warmup))
    return 1.0


def hf_linear(step: int, warmup: int, total: int) -> float:
    if step < warmup:
        return float(step) / float(max(1, warmup))
    return max(0.0, float(total - step) / float(max(1, total - warmup)))


def hf_cosine(step: int, warmup: int, total: int, cycles: float = 0.5) -> float:
    if step < warmup:
        return float(step) / float(max(1, warmup))
    progress = float(step - warmup) / float(max(1, total - warmup))
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(cycles) * 2.0 * progress)))


TOTAL = 23
CASES = [
    (ConstantSchedule(0), lambda t: hf_constant(t, 0)),
    (ConstantSchedule(4), lambda t: hf_constant(t, 4)),
    (LinearSchedule(TOTAL), lambda t: hf_linear(t, 0, TOTAL)),
    (LinearSchedule(TOTAL, 5), lambda t: hf_linear(t, 5, TOTAL)),
    (CosineSchedule(TOTAL), lambda t: hf_cosine(t, 0, TOTAL)),
    (CosineSchedule(TOTAL, 3), lambda t: hf_cosine(t, 3, TOTAL)),
    (CosineSchedule(TOTAL, 3, cycles=1.5), lambda t: hf_cosine(t, 3, TOTAL, 1.5)),
]
STEPS = np.arange(0, TOTAL + 6)  # past the end too: linear / cosine stay at 0


@pytest.mark.parametrize("i", range(len(CASES)))
def test_factor_is_the_transformers_formula(i: int) -> None:
    sched, hf = CASES[i]
    want = np.array([hf(int(t)) for t in STEPS])
    np.testing.assert_allclose(sched.factor(STEPS), want, rtol=1e-12, atol=1e-15)
    assert float(sched.factor(int(STEPS[7]))) == pytest.approx(want[7], rel=1e-12)


def test_compiled_factor_matches_the_formula() -> None:
    """Every schedule's IR in one executable, fed the step at run time (f32:
    1e-6 absolute, the rounding of a cosine argument of up to 3π)."""
    g = rlx.Graph("sched")
    t = g.input("t", [1])
    g.outputs(*[s.node(g, t) for s, _ in CASES])
    exe = rlx.compile(g, device="host")
    for step in STEPS:
        got = [
            float(np.asarray(v).reshape(-1)[0])
            for v in exe.run(t=np.array([step], np.float32)).values()
        ]
        want = [hf(int(step)) for _, hf in CASES]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"step {step}")


def test_get_schedule_and_bad_parameters() -> None:
    assert isinstance(get_schedule("linear", 10, 2), LinearSchedule)
    assert get_schedule("cosine", 10).warmup == 0
    with pytest.raises(ScheduleError, match=r"\[schedule\] unknown schedule 'step'"):
        get_schedule("step", 10)
    with pytest.raises(ScheduleError, match=r"\[linear schedule\] total"):
        LinearSchedule(0)
    with pytest.raises(ScheduleError, match=r"\[constant schedule\] warmup"):
        ConstantSchedule(-1)
    assert issubclass(ScheduleError, rlx.RlxError)
    g = rlx.Graph("bad")
    w = g.state("w", [2])
    with pytest.raises(OptimizerError, match=r"\[train_step\] accumulate"):
        train_step(g, g.sum(w * w), [w], SGD(lr=0.1), accumulate=0)


def test_sgd_steps_by_the_scheduled_rate() -> None:
    """``loss = Σ w·c`` has gradient ``c``: after t updates
    ``w = w0 − lr·c·Σ_{u<t} λ(u)``; one executable runs every step."""
    sched = LinearSchedule(6, warmup=3)
    g = rlx.Graph("sgd")
    c = g.input("c", [3])
    w = g.state("w", [3])
    train_step(g, g.sum(w * c), [w], SGD(lr=0.5), schedule=sched)
    exe = rlx.compile(g, device="host")
    exe.reset_state()
    cv = np.array([1.0, -2.0, 0.25], np.float32)
    for t in range(1, 9):
        exe.run(c=cv)
        lam = sum(hf_linear(u, 3, 6) for u in range(t))
        np.testing.assert_allclose(exe.state("w"), -0.5 * cv * lam, rtol=1e-6, atol=1e-7)
    assert exe.state(STEP_STATE)[0] == 8


def _mlp(g: rlx.Graph, rows: int) -> tuple[rlx.Node, list[rlx.Node]]:
    x, y = g.input("x", [rows, 3]), g.input("y", [rows, 2])
    w1, b1, w2 = g.state("w1", [3, 4]), g.state("b1", [4]), g.state("w2", [4, 2])
    d = g.tanh(x @ w1 + b1) @ w2 - y
    return g.mean(d * d), [w1, b1, w2]


def _init(exe: rlx.Executable) -> None:
    rng = np.random.default_rng(1)
    exe.reset_state()
    for name, shp in (("w1", (3, 4)), ("b1", (4,)), ("w2", (4, 2))):
        exe.set_state(name, rng.standard_normal(shp).astype(np.float32))


def _adamw_reference(xs: np.ndarray, ys: np.ndarray, steps: int, lrs: list[float]) -> dict:
    """torch.optim.AdamW's update (float64) on the MLP, full batch, gradients
    by the chain rule written out."""
    rng = np.random.default_rng(1)
    p = {n: rng.standard_normal(s).astype(np.float32).astype(np.float64)
         for n, s in (("w1", (3, 4)), ("b1", (4,)), ("w2", (4, 2)))}  # fmt: skip
    m = {n: np.zeros_like(v) for n, v in p.items()}
    v = {n: np.zeros_like(a) for n, a in p.items()}
    b1, b2, eps, wd = 0.9, 0.999, 1e-8, 0.05
    for t in range(1, steps + 1):
        h = np.tanh(xs @ p["w1"] + p["b1"])
        d = h @ p["w2"] - ys
        dd = 2.0 * d / d.size
        dh = (dd @ p["w2"].T) * (1.0 - h * h)
        grads = {"w2": h.T @ dd, "w1": xs.T @ dh, "b1": dh.sum(0)}
        lr = lrs[t - 1]
        for n in p:
            p[n] = p[n] * (1.0 - lr * wd)
            m[n] = b1 * m[n] + (1 - b1) * grads[n]
            v[n] = b2 * v[n] + (1 - b2) * grads[n] ** 2
            denom = np.sqrt(v[n]) / math.sqrt(1 - b2**t) + eps
            p[n] = p[n] - lr / (1 - b1**t) * m[n] / denom
    return p


def test_scheduled_adamw_matches_torch_formulas() -> None:
    sched = CosineSchedule(5, warmup=2)
    g = rlx.Graph("fit")
    loss, params = _mlp(g, 8)
    train_step(g, loss, params, AdamW(lr=0.05, weight_decay=0.05), schedule=sched)
    exe = rlx.compile(g, device="host")
    _init(exe)
    rng = np.random.default_rng(2)
    xs, ys = rng.standard_normal((8, 3)), rng.standard_normal((8, 2))
    for _ in range(6):
        exe.run(x=xs.astype(np.float32), y=ys.astype(np.float32))
    lrs = [0.05 * hf_cosine(t, 2, 5) for t in range(6)]
    want = _adamw_reference(xs.astype(np.float32), ys.astype(np.float32), 6, lrs)
    for n, a in want.items():
        np.testing.assert_allclose(exe.state(n), a, rtol=1e-4, atol=1e-6, err_msg=n)


@pytest.mark.parametrize("device", ["host", "reference"])
def test_accumulated_micro_batches_equal_one_big_step(device: str) -> None:
    """k = 4 micro-batches of 2 rows with ``accumulate=4`` (AdamW, clipping,
    warmup + linear decay) = one step over the 8 rows, for 3 updates; runs
    between updates leave the parameters, moments and step unchanged."""
    k, rows = 4, 2
    opt = dict(lr=0.05, weight_decay=0.05)
    sched = LinearSchedule(4, warmup=1)
    big, small = rlx.Graph("big"), rlx.Graph("small")
    lb, pb = _mlp(big, k * rows)
    train_step(big, lb, pb, AdamW(**opt), clip_norm=0.5, schedule=sched)
    ls, ps = _mlp(small, rows)
    added = train_step(small, ls, ps, AdamW(**opt), clip_norm=0.5, schedule=sched, accumulate=k)
    assert MICRO_STATE in added and "w1.grad_acc" in added
    eb, es = rlx.compile(big, device=device), rlx.compile(small, device=device)
    _init(eb)
    _init(es)
    rng = np.random.default_rng(3)
    for step in range(3):
        xs = rng.standard_normal((k * rows, 3)).astype(np.float32)
        ys = rng.standard_normal((k * rows, 2)).astype(np.float32)
        ob = list(eb.run(x=xs, y=ys).values())
        losses = []
        for j in range(k):
            before = {n: es.state(n).copy() for n in es.states if not n.endswith(".grad_acc")}
            before.pop(MICRO_STATE)
            o = list(
                es.run(x=xs[j * rows : (j + 1) * rows], y=ys[j * rows : (j + 1) * rows]).values()
            )
            losses.append(float(np.asarray(o[0]).reshape(-1)[0]))
            if j < k - 1:
                assert es.state(MICRO_STATE)[0] == j + 1
                for n, a in before.items():
                    assert es.state(n).tobytes() == a.tobytes(), (step, j, n)
        # the mean of the micro losses is the big batch's loss; the norm
        # reported on the k-th run is the accumulated gradient's
        assert np.mean(losses) == pytest.approx(float(np.asarray(ob[0]).reshape(-1)[0]), rel=1e-6)
        assert float(np.asarray(o[1]).reshape(-1)[0]) == pytest.approx(
            float(np.asarray(ob[1]).reshape(-1)[0]), rel=1e-5
        )
        assert es.state(MICRO_STATE)[0] == 0 and not es.state("w1.grad_acc").any()
        assert es.state(STEP_STATE)[0] == eb.state(STEP_STATE)[0] == step + 1
        for n in ("w1", "b1", "w2", "w1.exp_avg", "w2.exp_avg_sq"):
            a, b = es.state(n), eb.state(n)
            err = np.abs(a - b).max() / max(np.abs(b).max(), 1e-12)
            assert err <= 1e-6, (step, n, err)
