"""Compiled training steps (:func:`rlx.optim.train_step`) against torch.optim.

The fixture (``scripts/make_optim_fixture.py``, torch 2.x, float32) holds
six steps of a small MLP regression under SGD, SGD with momentum /
dampening / weight decay, Nesterov SGD, Adam with L2 decay, AdamW, and
AdamW after clipping by global norm. Here one compiled executable per
configuration runs each step (forward + backward + update, the parameters
and moments living in State buffers); every loss and every parameter after
every step must match torch's to 1e-4 relative (f32 on both sides).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import rlx
from rlx.optim import SGD, STEP_STATE, Adam, AdamW, OptimizerError, train_step

sys.path.insert(0, str(Path(__file__).parent))
from _gradcheck import evaluate  # noqa: E402

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "optim" / "trajectories.npz"
TOL = 1e-4
PARAMS = ("w1", "b1", "w2")

CONFIGS = {
    "sgd": (SGD(lr=0.1), None),
    "sgd_momentum": (SGD(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01), None),
    "sgd_nesterov": (SGD(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01), None),
    "adam": (Adam(lr=0.01, betas=(0.8, 0.95), weight_decay=0.01), None),
    "adamw": (AdamW(lr=0.01, weight_decay=0.1), None),
    "adamw_clip": (AdamW(lr=0.02, weight_decay=0.05), 0.3),
}


def _mlp_step(opt: rlx.optim.Optimizer, clip: float | None) -> tuple[rlx.Graph, list[str]]:
    g = rlx.Graph("fit")
    x, y = g.input("x", [8, 3]), g.input("y", [8, 2])
    w1, b1, w2 = g.state("w1", [3, 4]), g.state("b1", [4]), g.state("w2", [4, 2])
    d = g.tanh(x @ w1 + b1) @ w2 - y
    added = train_step(g, g.mean(d * d), [w1, b1, w2], opt, clip_norm=clip)
    return g, added


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(float(np.abs(b).max()), 1e-6))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_update_rules_in_float64_match_torch(name: str) -> None:
    """The step graph evaluated in float64 (no compile): the in-place writes'
    values follow torch's f32 trajectory to 1e-6 (torch's own rounding)."""
    fx = np.load(FIX)
    opt, clip = CONFIGS[name]
    g, _ = _mlp_step(opt, clip)
    gj = json.loads(g.to_json())
    nodes = gj["nodes"]
    st = {
        nd["name"]: np.zeros([int(d) for d in nd["shape"]["dims"]])
        for nd in nodes
        if nd["op"]["op"] == "state"
    }
    st.update({p: fx[f"init.{p}"].astype(np.float64) for p in PARAMS})
    for t in range(fx[f"{name}.loss"].shape[0]):
        vals = evaluate(g, {**st, "x": fx["x"], "y": fx["y"]}, every=True)
        want = fx[f"{name}.loss"][t]
        assert abs(vals[gj["outputs"][0]] - want) <= 1e-6 * abs(want)
        for i, nd in enumerate(nodes):
            if nd["op"]["op"] == "scatter_nd":
                st[nodes[nd["inputs"][0]]["name"]] = vals[i]
        for p in PARAMS:
            assert _rel(st[p], fx[f"{name}.{p}"][t]) <= 1e-6, (name, t, p)
    assert st[STEP_STATE][0] == fx[f"{name}.loss"].shape[0]


@pytest.mark.parametrize(
    "name,device",
    [(n, d) for n in CONFIGS for d in ("host", "reference")] + [("adamw_clip", "metal-sim")],
)
def test_matches_torch_optim(name: str, device: str) -> None:
    fx = np.load(FIX)
    opt, clip = CONFIGS[name]
    g, added = _mlp_step(opt, clip)
    assert STEP_STATE in added
    exe = rlx.compile(g, device=device)
    exe.reset_state()
    for p in PARAMS:
        exe.set_state(p, fx[f"init.{p}"])
    steps = fx[f"{name}.loss"].shape[0]
    for t in range(steps):
        out = exe.run(x=fx["x"], y=fx["y"])
        loss = float(next(iter(out.values())))
        assert abs(loss - fx[f"{name}.loss"][t]) <= TOL * abs(fx[f"{name}.loss"][t]), (t, loss)
        for p in PARAMS:
            err = _rel(exe.state(p), fx[f"{name}.{p}"][t])
            assert err <= TOL, f"{name} step {t + 1} {p}: relative error {err:.2e}"
    assert exe.state(STEP_STATE)[0] == steps


def test_step_is_one_executable_with_state_buffers() -> None:
    g, added = _mlp_step(AdamW(lr=0.01), 1.0)
    assert set(added) == {STEP_STATE} | {f"{p}.{s}" for p in PARAMS
                                         for s in ("exp_avg", "exp_avg_sq")}  # fmt: skip
    exe = rlx.compile(g, device="host")
    assert set(exe.states) == set(added) | set(PARAMS)
    assert len(exe.outputs) == 2  # loss and the gradient norm
    # every thunk of the step (the in-place state writes included) runs natively
    assert exe.stats["fallback_thunks"] == 0, exe.stats["fallback_by_thunk"]


def test_params_must_be_states_and_hyper_parameters_checked() -> None:
    g = rlx.Graph("bad")
    w = g.param("w", [2])
    with pytest.raises(OptimizerError, match=r"\[train_step\] 'w' is a param"):
        train_step(g, g.sum(w * w), [w], SGD(lr=0.1))
    with pytest.raises(OptimizerError, match=r"\[sgd\] nesterov needs momentum"):
        SGD(lr=0.1, nesterov=True)
    with pytest.raises(OptimizerError, match=r"\[adamw\] betas"):
        AdamW(betas=(0.9, 1.0))
    assert issubclass(OptimizerError, rlx.RlxError)


def test_state_read_after_its_in_place_write_is_still_rejected() -> None:
    g = rlx.Graph("late")
    w = g.state("w", [2, 2])
    idx = g.constant(np.array([[0], [1]], np.int32))
    g.scatter_nd(w, idx, w * 2.0, name="write")
    late = g.add(w, w, name="late_reader")
    g.outputs(late)
    with pytest.raises(rlx.GraphError, match=r"'write' writes State 'w' in place.*'late_reader'"):
        rlx.compile(g, device="host")


def test_compiled_step_trains_a_classifier() -> None:
    """A 64→256→10 GELU MLP, AdamW + clipping, log-softmax cross-entropy built
    from ordinary ops: 100 compiled steps on one batch drive the loss down by
    more than 100× (every thunk native on host)."""
    g = rlx.Graph("mlp")
    x, y = g.input("x", [64, 64]), g.input("y", [64, 10])
    w1, b1 = g.state("w1", [64, 256]), g.state("b1", [256])
    w2, b2 = g.state("w2", [256, 10]), g.state("b2", [10])
    z = g.gelu(x @ w1 + b1) @ w2 + b2
    z = z - g.max(z, -1, keep_dims=True)
    logp = z - g.log(g.sum(g.exp(z), -1, keep_dims=True))
    loss = -g.mean(g.sum(y * logp, -1))
    train_step(g, loss, [w1, b1, w2, b2], AdamW(lr=1e-2), clip_norm=1.0)
    exe = rlx.compile(g, device="host")
    assert exe.stats["fallback_thunks"] == 0
    rng = np.random.default_rng(0)
    exe.set_state("w1", (rng.standard_normal((64, 256)) * 0.1).astype(np.float32))
    exe.set_state("w2", (rng.standard_normal((256, 10)) * 0.1).astype(np.float32))
    xs = rng.standard_normal((64, 64)).astype(np.float32)
    ys = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 64)]
    first = float(next(iter(exe.run(x=xs, y=ys).values())))
    for _ in range(99):
        last = float(next(iter(exe.run(x=xs, y=ys).values())))
    assert last < first / 100, (first, last)
