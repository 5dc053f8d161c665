"""Learning-rate schedules with linear warmup, as multipliers of the
optimizer's base ``lr``, with the formulas of transformers'
``get_constant_schedule_with_warmup``, ``get_linear_schedule_with_warmup``
and ``get_cosine_schedule_with_warmup``.

The multiplier is a function ``λ(t)`` of ``t``, the number of optimizer
updates already made (``LambdaLR``'s counter: the first update runs with
``λ(0)``, so with warmup it does not move the parameters, as in
transformers). For ``t < warmup`` every schedule is ``t / max(1, warmup)``;
after it:

- constant: ``1``;
- linear: ``max(0, (total − t) / max(1, total − warmup))``;
- cosine: ``max(0, ½(1 + cos(2π·cycles·p)))`` with
  ``p = (t − warmup) / max(1, total − warmup)`` (``cycles = ½`` decays once
  to zero at ``total``).

:func:`rlx.optim.train_step` builds ``λ`` into the compiled step from the
step-count ``State`` (:meth:`Schedule.node`), so the learning rate changes
every update without recompiling and a resumed checkpoint continues the
schedule where it stopped; :meth:`Schedule.factor` is the same formula in
numpy (logging, plots).
"""

from __future__ import annotations

import abc
import math
from typing import TYPE_CHECKING, Union

import numpy as np

from rlx.errors import RlxError

if TYPE_CHECKING:
    from rlx.graph import Graph
    from rlx.node import Node

Steps = Union[int, float, np.ndarray]


class ScheduleError(RlxError):
    """Bad schedule parameters (the message names the schedule)."""


class Schedule(abc.ABC):
    """Base class: linear warmup over ``warmup`` updates, then
    :meth:`_after` (numpy) / :meth:`_after_node` (IR)."""

    #: name used by :func:`get_schedule` and the CLI
    name = ""

    def __init__(self, warmup: int = 0) -> None:
        if int(warmup) != warmup or warmup < 0:
            raise ScheduleError(
                f"[{self.name} schedule] warmup must be an integer >= 0, got {warmup}"
            )
        self.warmup = int(warmup)

    def factor(self, step: Steps) -> np.ndarray:
        """``λ(step)`` in float64 (elementwise over an array of steps)."""
        t = np.asarray(step, np.float64)
        warm = t / max(1, self.warmup)
        return np.where(t < self.warmup, warm, self._after(t))

    def node(self, g: Graph, step: Node) -> Node:
        """``λ(step)`` as IR over ``step`` (a float node, e.g. the step-count
        state)."""
        after = self._after_node(g, step)
        if self.warmup == 0:
            return after
        return g.where(g.lt(step, float(self.warmup)), step * (1.0 / self.warmup), after)

    @abc.abstractmethod
    def _after(self, t: np.ndarray) -> np.ndarray:
        """The multiplier after the warmup (numpy, ``t`` = updates made)."""

    @abc.abstractmethod
    def _after_node(self, g: Graph, step: Node) -> Node:
        """The multiplier after the warmup as IR over ``step``."""

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


class ConstantSchedule(Schedule):
    """Warmup, then ``1``."""

    name = "constant"

    def _after(self, t: np.ndarray) -> np.ndarray:
        return np.ones_like(t)

    def _after_node(self, g: Graph, step: Node) -> Node:
        return g.constant(1.0, dtype=step.dtype, shape=list(step.shape))


class _Decay(Schedule):
    """A schedule that decays over ``total`` updates after the warmup."""

    def __init__(self, total: int, warmup: int = 0) -> None:
        super().__init__(warmup)
        if int(total) != total or total < 1:
            raise ScheduleError(
                f"[{self.name} schedule] total must be an integer >= 1, got {total}"
            )
        self.total = int(total)

    @property
    def _span(self) -> int:
        return max(1, self.total - self.warmup)


class LinearSchedule(_Decay):
    """Warmup, then linear decay to zero at ``total`` updates."""

    name = "linear"

    def _after(self, t: np.ndarray) -> np.ndarray:
        return np.maximum(0.0, (self.total - t) / self._span)

    def _after_node(self, g: Graph, step: Node) -> Node:
        return g.maximum((float(self.total) - step) * (1.0 / self._span), 0.0)


class CosineSchedule(_Decay):
    """Warmup, then a cosine from 1 over ``cycles`` periods of
    ``total − warmup`` updates (½: down to zero at ``total``)."""

    name = "cosine"

    def __init__(self, total: int, warmup: int = 0, cycles: float = 0.5) -> None:
        super().__init__(total, warmup)
        self.cycles = float(cycles)

    def _after(self, t: np.ndarray) -> np.ndarray:
        p = (t - self.warmup) / self._span
        return np.maximum(0.0, 0.5 * (1.0 + np.cos(math.pi * self.cycles * 2.0 * p)))

    def _after_node(self, g: Graph, step: Node) -> Node:
        p = (step - float(self.warmup)) * (1.0 / self._span)
        c = g.cos(p * (math.pi * self.cycles * 2.0))
        return g.maximum((c + 1.0) * 0.5, 0.0)


#: schedule names for :func:`get_schedule` (and ``rlx train --schedule``)
SCHEDULES = ("constant", "linear", "cosine")


def get_schedule(name: str, total: int, warmup: int = 0) -> Schedule:
    """The schedule called ``name`` (:data:`SCHEDULES`) over ``total``
    updates with ``warmup`` warmup updates."""
    if name == "constant":
        return ConstantSchedule(warmup)
    if name == "linear":
        return LinearSchedule(total, warmup)
    if name == "cosine":
        return CosineSchedule(total, warmup)
    raise ScheduleError(f"[schedule] unknown schedule {name!r}; expected one of {SCHEDULES}")
