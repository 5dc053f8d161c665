"""Optimizers as compiled steps.

:func:`train_step` turns a forward graph whose trainable parameters are
``State`` leaves into one training step: forward, backward
(:func:`rlx.grad`), optional clipping by global norm, and the optimizer
update, all in the same graph. The new parameter values, the optimizer's
moments and the step count are written back into their ``State`` buffers
in place, so one ``Executable.run`` is one step and no Python runs per
parameter.

A learning-rate schedule (:mod:`rlx.optim.schedule`) is computed inside the
step from the step count; gradient accumulation (``accumulate=k``) makes
each run one micro-batch: gradients are summed (÷ k) into ``State``
buffers and the update is applied on every k-th run only, so k runs over
k micro-batches equal one step over their concatenation.

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
    Lr,
    Optimizer,
    OptimizerError,
    clip_by_global_norm,
)
from rlx.optim.schedule import (
    SCHEDULES,
    ConstantSchedule,
    CosineSchedule,
    LinearSchedule,
    Schedule,
    ScheduleError,
    get_schedule,
)

if TYPE_CHECKING:
    from rlx.graph import Graph

#: name of the step-count state a training step declares
STEP_STATE = "optim.step"
#: name of the micro-batch counter state of an accumulating step
MICRO_STATE = "optim.micro"


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
    schedule: Optional[Schedule] = None,
    accumulate: int = 1,
) -> list[str]:
    """Append backward + update to ``graph`` and make ``loss`` (a scalar, or
    summed) its output (with ``grad_norm`` too when clipping).

    ``params`` must be ``State`` leaves (they are read by the forward and
    overwritten by the update). Declares, per parameter and optimizer slot,
    a zero-initialised state ``"<param>.<slot>"`` and one step counter
    :data:`STEP_STATE` (``[1]``, the updates made). Returns the names of the
    states it added. ``dense_weights`` goes to :func:`rlx.grad` (the input
    gradient of frozen quantised matmuls through dequantised copies).

    ``schedule`` scales ``optimizer.lr`` by ``λ(updates made)``, computed in
    the step. ``accumulate = k > 1`` declares ``"<param>.grad_acc"`` states
    and the micro-batch counter :data:`MICRO_STATE`: each run adds its
    gradient ÷ k; the k-th run clips and applies the sum, then clears the
    sums (the other runs leave parameters, slots and step untouched; their
    ``grad_norm`` is that of the partial sum).
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
    if int(accumulate) != accumulate or accumulate < 1:
        raise OptimizerError(f"[train_step] accumulate must be an integer >= 1, got {accumulate}")
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
    writes: list[tuple[Node, Node]] = []
    apply: Optional[Node] = None
    if accumulate > 1:
        micro = g.state(MICRO_STATE, [1], dtype)
        added.append(MICRO_STATE)
        sums = []
        for p, gr in zip(params, grads):
            acc = g.state(f"{p.name}.grad_acc", list(p.shape), p.dtype)
            added.append(acc.name)
            sums.append((acc, acc + gr * (1.0 / accumulate)))
        grads = [total for _, total in sums]
        count = micro + 1.0
        apply = g.ge(count, float(accumulate))
        writes += [(acc, g.where(apply, 0.0, total)) for acc, total in sums]
        writes.append((micro, g.where(apply, 0.0, count)))
    outs = [loss_out]
    if clip_norm is not None:
        grads, norm = clip_by_global_norm(g, grads, clip_norm)
        outs.append(norm)
    step = step_state + 1.0
    lr: Lr = optimizer.lr
    if schedule is not None:
        lr = schedule.node(g, step_state) * optimizer.lr
    updates = []
    for p, gr, slots in zip(params, grads, slot_nodes):
        new_p, new_slots = optimizer.update(g, p, gr, slots, step, lr)
        updates.append((p, new_p))
        updates.extend(zip(slots, new_slots))
    updates.append((step_state, step))
    if apply is not None:
        updates = [(state, g.where(apply, value, state)) for state, value in updates]
    # every read of a state happens above; the in-place writes come last
    for state, value in updates + writes:
        _assign(g, state, value)
    g.outputs(*outs)
    return added


__all__ = [
    "MICRO_STATE",
    "SCHEDULES",
    "SGD",
    "STEP_STATE",
    "Adam",
    "AdamW",
    "ConstantSchedule",
    "CosineSchedule",
    "LinearSchedule",
    "Optimizer",
    "OptimizerError",
    "Schedule",
    "ScheduleError",
    "clip_by_global_norm",
    "get_schedule",
    "train_step",
]
