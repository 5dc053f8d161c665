"""Optimizers as compiled steps.

:func:`train_step` turns a forward graph whose trainable parameters are
``State`` leaves into one training step: forward, backward
(:func:`rlx.grad`), optional clipping by global norm, and the optimizer
update, all in the same graph. The new parameter values, the optimizer's
moments and the step count are written back into their ``State`` buffers
in place, so one ``Executable.run`` is one step and no Python runs per
parameter.

>>> g = rlx.Graph("fit")
>>> x, y = g.input("x", [8, 3]), g.input("y", [8, 1])
>>> w = g.state("w", [3, 1])
>>> d = x @ w - y
>>> loss = g.mean(d * d)
>>> train_step(g, loss, [w], AdamW(lr=1e-2))
>>> exe = rlx.compile(g); exe.set_state("w", w0)
>>> exe.run(x=xs, y=ys)["loss"]   # one step; exe.state("w") is updated
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Optional

import numpy as np

from rlx.autodiff import grad as _grad
from rlx.node import Node
from rlx.optim.optimizers import (
    SGD,
    Adam,
    AdamW,
    Optimizer,
    OptimizerError,
    clip_by_global_norm,
)

if TYPE_CHECKING:
    from rlx.graph import Graph

#: name of the step-count state a training step declares
STEP_STATE = "optim.step"


def _assign(g: Graph, state: Node, value: Node) -> Node:
    """Write ``value`` over the whole of ``state`` in place (a ScatterND of
    every leading row into the State leaf)."""
    rows = state.shape[0]
    if not isinstance(rows, int):
        raise OptimizerError(f"[train_step] state '{state.name}' needs a static leading dim")
    idx = g.constant(np.arange(rows, dtype=np.int32).reshape(rows, 1), dtype="i32")
    if value.dtype != state.dtype:
        value = g.cast(value, state.dtype)
    return g.scatter_nd(state, idx, value, name=f"{state.name}.assign")


def train_step(
    graph: Graph,
    loss: Node,
    params: Sequence[Node],
    optimizer: Optimizer,
    *,
    clip_norm: Optional[float] = None,
    dense_weights: Optional[Mapping[Node, Node]] = None,
) -> list[str]:
    """Append backward + update to ``graph`` and make ``loss`` (a scalar, or
    summed) its output (with ``grad_norm`` too when clipping).

    ``params`` must be ``State`` leaves (they are read by the forward and
    overwritten by the update). Declares, per parameter and optimizer slot,
    a zero-initialised state ``"<param>.<slot>"`` and one step counter
    :data:`STEP_STATE` (``[1]``). Returns the names of the states it added.
    ``dense_weights`` goes to :func:`rlx.grad` (the input gradient of frozen
    quantised matmuls through dequantised copies).
    """
    params = list(params)
    for p in params:
        if p.op != "state":
            raise OptimizerError(
                f"[train_step] '{p.name}' is a {p.op}: trainable parameters must be "
                "State leaves (updated in place)"
            )
    if not params:
        raise OptimizerError("[train_step] no parameters to train")
    g = graph
    dtype = params[0].dtype
    step_state = g.state(STEP_STATE, [1], dtype)
    added = [STEP_STATE]
    slot_nodes = []
    for p in params:
        row = []
        for s in optimizer.slots:
            name = f"{p.name}.{s}"
            row.append(g.state(name, list(p.shape), p.dtype))
            added.append(name)
        slot_nodes.append(row)
    loss_out = loss if loss.ndim == 0 else g.sum(loss)
    grads = _grad(g, loss_out, params, dense_weights=dense_weights)
    outs = [loss_out]
    if clip_norm is not None:
        grads, norm = clip_by_global_norm(g, grads, clip_norm)
        outs.append(norm)
    step = step_state + 1.0
    writes = []
    for p, gr, slots in zip(params, grads, slot_nodes):
        new_p, new_slots = optimizer.update(g, p, gr, slots, step)
        writes.append((p, new_p))
        writes.extend(zip(slots, new_slots))
    writes.append((step_state, step))
    # every read of a state happens above; the in-place writes come last
    for state, value in writes:
        _assign(g, state, value)
    g.outputs(*outs)
    return added


__all__ = [
    "SGD",
    "STEP_STATE",
    "Adam",
    "AdamW",
    "Optimizer",
    "OptimizerError",
    "clip_by_global_norm",
    "train_step",
]
