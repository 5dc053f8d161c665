"""Property test for every fusion pass, present and future: random DAGs of
elementwise, broadcast binary, matmul (+ bias, + activation), norm (with
and without a residual add), narrow, concat and SwiGLU-shaped ops, built with
the Python graph API, give the same outputs

* with all passes on and with ``RLX_DISABLE_PASS`` = every name in
  ``rlx.pass_names()`` (host executor), and
* on the numpy reference device with all passes on (every ``CASES_REF``-th
  case: the reference runs each thunk in Python, so it is slower).

Tolerance (f32 throughout): rtol = atol = 1e-4. The generator keeps values
bounded (inputs ~N(0, 1), activations that cannot overflow, divisors kept
away from zero), so a real miscompile shows up as O(1) differences.

Graphs are seeded (case index), so a failure names a reproducible case.
Some intermediates are also made outputs, so the must-not-fire paths run.
"""

from __future__ import annotations

import os
from typing import Callable

import numpy as np
import pytest
import rlx

CASES = 400
CASES_REF = 5  # one reference run per this many cases
ROWS = 3
TOL = {"rtol": 1e-4, "atol": 1e-4}
ALL = ",".join(rlx.pass_names())

SAFE_ACTS = [
    "gelu",
    "gelu_approx",
    "silu",
    "relu",
    "sigmoid",
    "tanh",
    "neg",
    "abs",
    "sin",
    "cos",
    "atan",
]
BINS = ["add", "sub", "mul", "max", "min"]


class Builder:
    """A random graph: a pool of values (node, trailing dims) to draw operands from."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.g = rlx.Graph(f"rand{seed}")
        self.pool: list[rlx.Node] = []
        self.feed: dict[str, np.ndarray] = {}
        self.n_leaf = 0

    def leaf(self, shape: list[int], param: bool = False) -> rlx.Node:
        name = f"{'p' if param else 'x'}{self.n_leaf}"
        self.n_leaf += 1
        node = (self.g.param if param else self.g.input)(name, shape)
        self.feed[name] = self.rng.standard_normal(shape).astype(np.float32)
        return node

    def pick(self, pred: Callable[[rlx.Node], bool] = lambda n: True) -> rlx.Node | None:
        cands = [n for n in self.pool if pred(n)]
        if not cands:
            return None
        # prefer recent values: deeper chains
        w = np.arange(1, len(cands) + 1, dtype=np.float64) ** 2
        return cands[int(self.rng.choice(len(cands), p=w / w.sum()))]

    def cols(self) -> int:
        return int(self.rng.integers(1, 10))

    def step(self) -> None:
        g, r = self.g, self.rng
        kind = r.choice(
            ["act", "bin", "bin", "bcast", "div", "mm", "norm", "narrow", "concat", "swiglu"]
        )
        mat = lambda n: len(n.shape) == 2  # noqa: E731
        x = self.pick(mat)
        assert x is not None
        c = int(x.shape[1])
        if kind == "act":
            out = g.activation(x, str(r.choice(SAFE_ACTS)))
        elif kind == "bin":
            y = self.pick(lambda n: tuple(n.shape) == tuple(x.shape)) or self.leaf([ROWS, c])
            out = g.binary(x, y, str(r.choice(BINS)))
        elif kind == "bcast":
            shape = [[c], [1, c], [ROWS, 1], [1, 1]][int(r.integers(4))]
            y = self.leaf(shape, param=bool(r.integers(2)))
            a, b = (x, y) if r.integers(2) else (y, x)
            out = g.binary(a, b, str(r.choice(BINS)))
        elif kind == "div":
            y = self.pick(lambda n: tuple(n.shape) == tuple(x.shape)) or x
            out = g.div(x, g.add(g.abs(y), 1.0))
        elif kind == "mm":
            n = self.cols()
            out = x @ self.leaf([c, n], param=True)
            if r.integers(3):
                b = self.leaf([n], param=True)
                out = out + b if r.integers(2) else b + out
            if r.integers(2):
                out = g.activation(out, str(r.choice(SAFE_ACTS)))
        elif kind == "norm":
            if r.integers(2):
                y = self.pick(lambda n: tuple(n.shape) == tuple(x.shape)) or self.leaf([ROWS, c])
                x = x + y
                if r.integers(3) == 0:
                    x = x + self.leaf([c], param=True)
            gamma = self.leaf([c], param=True)
            if r.integers(2):
                out = g.layer_norm(x, gamma, self.leaf([c], param=True))
            else:
                out = g.rms_norm(x, gamma)
        elif kind == "narrow":
            if c < 2:
                return
            start = int(r.integers(0, c - 1))
            out = g.narrow(x, -1, start, int(r.integers(1, c - start + 1)))
        elif kind == "concat":
            y = self.pick(mat) or x
            out = g.concat([x, y], axis=-1)
        else:  # swiglu-shaped: the two halves of one tensor
            h = 2 * int(r.integers(1, 6))
            t = x @ self.leaf([c, h], param=True)
            gate, up = g.narrow(t, -1, 0, h // 2), g.narrow(t, -1, h // 2, h // 2)
            if r.integers(2):
                gate, up = up, gate
            out = g.silu(gate) * up if r.integers(2) else up * g.silu(gate)
        self.pool.append(out)

    def build(self, steps: int) -> rlx.Graph:
        for _ in range(int(self.rng.integers(1, 3))):
            self.pool.append(self.leaf([ROWS, self.cols()]))
        for _ in range(steps):
            self.step()
        outs = [self.pool[-1]]
        # sometimes also an intermediate (exercises the must-not-fire paths)
        for n in self.pool[:-1]:
            if n.op not in ("input", "param") and self.rng.random() < 0.15 and n not in outs:
                outs.append(n)
        self.g.outputs(*outs)
        return self.g


def _run(
    g: rlx.Graph, feed: dict[str, np.ndarray], disable: str, device: str = "host"
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    os.environ["RLX_DISABLE_PASS"] = disable
    try:
        exe = rlx.compile(g, device=device)
    finally:
        del os.environ["RLX_DISABLE_PASS"]
    for name in exe.params:
        exe.set_param(name, feed[name])
    return exe.run(**{k: v for k, v in feed.items() if k in exe.inputs}), exe.stats["pass_matches"]


def test_random_graphs_all_passes_on_vs_off() -> None:
    fired: dict[str, int] = {}
    for case in range(CASES):
        b = Builder(case)
        g = b.build(int(b.rng.integers(3, 12)))
        on, matches = _run(g, b.feed, "")
        off, _ = _run(g, b.feed, ALL)
        for k, v in matches.items():
            fired[k] = fired.get(k, 0) + max(v, 0)
        assert on.keys() == off.keys()
        for k in on:
            np.testing.assert_allclose(on[k], off[k], err_msg=f"case {case} output {k}\n{g}", **TOL)
        if case % CASES_REF == 0:
            ref, _ = _run(g, b.feed, "", device="reference")
            for k in on:
                np.testing.assert_allclose(
                    ref[k], on[k], err_msg=f"case {case} (reference) {k}\n{g}", **TOL
                )
    # the generator reaches every fusion it is meant to exercise
    for name in (
        "ir_fuse_matmul_bias_act",
        "ir_fuse_residual_layer_norm",
        "ir_fuse_residual_rms_norm",
        "ir_fuse_swiglu",
        "ir_elementwise_region",
    ):
        assert fired.get(name, 0) > 0, (name, fired)


@pytest.fixture(autouse=True)
def _no_stray_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLX_DISABLE_PASS", raising=False)
