"""A small CNN trained on scikit-learn's 8×8 digits (1797 images, 10
classes): conv 3×3 (1→16) → ReLU → max-pool 2 → conv 3×3 (16→32) → ReLU →
max-pool 2 → linear (128→10), the training step compiled once
(:func:`rlx.optim.train_step`: forward, backward through the conv / pool
backward ops, Adam update of the ``State`` weights in place).

:func:`split` is a fixed 80/20 split (seeded permutation); :class:`DigitsCNN`
trains on fixed-size batches and evaluates the test set with a forward-only
executable bound to the trained weights.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import numpy as np

from rlx.graph import Graph
from rlx.node import Node
from rlx.optim import Adam, Optimizer, train_step

#: name → shape of the weights (torch layouts: conv ``[out, in, kh, kw]``)
SHAPES = {
    "conv1.weight": (16, 1, 3, 3),
    "conv1.bias": (16,),
    "conv2.weight": (32, 16, 3, 3),
    "conv2.bias": (32,),
    "fc.weight": (128, 10),
    "fc.bias": (10,),
}


def split(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's digits as ``x [n, 1, 8, 8]`` f32 in [0, 1] and i32
    labels: train (1437 images) and test (360), a seeded permutation."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    y = d.target.astype(np.int32)
    perm = np.random.default_rng(seed).permutation(len(y))
    n_test = len(y) // 5
    te, tr = perm[:n_test], perm[n_test:]
    return x[tr], y[tr], x[te], y[te]


def init_weights(seed: int = 0) -> dict[str, np.ndarray]:
    """torch's default init: uniform in ``±1/√fan_in`` for weights and biases."""
    rng = np.random.default_rng(seed)
    fan = {"conv1": 9, "conv2": 16 * 9, "fc": 128}
    out = {}
    for name, shape in SHAPES.items():
        b = 1.0 / np.sqrt(fan[name.split(".")[0]])
        out[name] = rng.uniform(-b, b, shape).astype(np.float32)
    return out


def forward(g: Graph, x: Node, leaf: Callable[[str, list[int]], Node]) -> Node:
    """Logits ``[n, 10]`` of images ``x [n, 1, 8, 8]``; ``leaf(name, shape)``
    makes each weight (a State to train, a param to evaluate)."""
    w = {k: leaf(k, list(s)) for k, s in SHAPES.items()}
    h = g.relu(g.conv2d(x, w["conv1.weight"], w["conv1.bias"], padding=1))
    h = g.max_pool2d(h, 2)  # [n, 16, 4, 4]
    h = g.relu(g.conv2d(h, w["conv2.weight"], w["conv2.bias"], padding=1))
    h = g.max_pool2d(h, 2)  # [n, 32, 2, 2]
    n = x.shape[0]
    return g.reshape(h, [n, 128]) @ w["fc.weight"] + w["fc.bias"]


class DigitsCNN:
    """The compiled training step (batches of ``batch`` images) and a
    forward-only executable for ``eval_batch`` images."""

    def __init__(
        self,
        batch: int = 32,
        eval_batch: int = 360,
        optimizer: Optional[Optimizer] = None,
        seed: int = 0,
        device: str = "host",
    ) -> None:
        from rlx.executable import compile as rlx_compile

        self.batch, self.eval_batch, self.seed = batch, eval_batch, seed
        self.optimizer = optimizer if optimizer is not None else Adam(lr=3e-3)
        g = Graph("digits_step")
        x, y = g.input("x", [batch, 1, 8, 8]), g.input("y", [batch], "i32")
        states: list[Node] = []

        def state(name: str, shape: list[int]) -> Node:
            states.append(g.state(name, shape))
            return states[-1]

        loss = g.mean(g.softmax_cross_entropy(forward(g, x, state), y))
        train_step(g, loss, states, self.optimizer)
        self.exe = rlx_compile(g, device=device)
        e = Graph("digits_eval")
        ex = e.input("x", [eval_batch, 1, 8, 8])
        e.outputs(forward(e, ex, e.param))
        self.eval_exe = rlx_compile(e, device=device)
        self.reset()

    def reset(self) -> None:
        """Fresh weights (:func:`init_weights`), zero moments and step."""
        self.exe.reset_state()
        for k, v in init_weights(self.seed).items():
            self.exe.set_state(k, v)

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        """One step on a batch; the loss before the update."""
        out = self.exe.run(x=x, y=y)
        return float(np.asarray(next(iter(out.values()))).reshape(-1)[0])

    def epoch(self, x: np.ndarray, y: np.ndarray, epoch: int) -> list[float]:
        """One pass over the full batches of a permutation drawn from
        ``(seed, epoch)`` (the remainder is skipped); the step losses."""
        perm = np.random.default_rng((self.seed, epoch)).permutation(len(y))
        losses = []
        for i in range(len(y) // self.batch):
            idx = perm[i * self.batch : (i + 1) * self.batch]
            losses.append(self.step(x[idx], y[idx]))
        return losses

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Class ids of ``eval_batch`` images with the current weights."""
        for k in SHAPES:
            self.eval_exe.set_param(k, self.exe.state(k))
        out = self.eval_exe.run(x=x)
        return np.asarray(next(iter(out.values()))).argmax(axis=1)
