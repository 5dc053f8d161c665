"""Optimizer update rules as IR ops, following ``torch.optim`` exactly
(SGD with momentum / dampening / Nesterov, Adam with L2 weight decay, AdamW
with decoupled weight decay; bias correction as torch's single-tensor
path). Each optimizer names the per-parameter state it keeps; the training
step (:func:`rlx.optim.train_step`) declares those as ``State`` leaves."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Union

from rlx.errors import RlxError
from rlx.node import Node

#: a learning rate: a number baked into the step, or a node (a schedule's
#: ``base_lr · λ(step)``) computed in it
Lr = Union[float, Node]

if TYPE_CHECKING:
    from rlx.graph import Graph


class OptimizerError(RlxError):
    """Bad optimizer hyper-parameters (the message names the optimizer)."""


class Optimizer:
    """Base class: ``slots`` names the per-parameter states (each shaped like
    its parameter, zero-initialised); :meth:`update` builds one parameter's
    update given its gradient, its slot values, the new step count and the
    learning rate of this update (``self.lr``, or a schedule's node)."""

    #: per-parameter state names (suffixes: ``"<param>.<slot>"``)
    slots: Sequence[str] = ()

    lr: float = 0.0

    def update(
        self, g: Graph, p: Node, grad: Node, slots: list[Node], step: Node, lr: Lr
    ) -> tuple[Node, list[Node]]:
        """The new parameter value and new slot values; ``step`` is the step
        count after this update (1 on the first call), ``[1]`` of p's dtype;
        ``lr`` the learning rate to apply (a float, or a ``[1]`` node)."""
        raise NotImplementedError


def _check(name: str, **vals: float) -> None:
    for k, v in vals.items():
        if not v >= 0.0:
            raise OptimizerError(f"[{name}] {k} must be >= 0, got {v}")


class SGD(Optimizer):
    """``torch.optim.SGD``: ``g = grad + wd·p``; with momentum the buffer is
    ``g`` on the first step and ``μ·buf + (1 − dampening)·g`` after;
    Nesterov steps along ``g + μ·buf``; ``p −= lr·step``."""

    def __init__(
        self,
        lr: float,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ) -> None:
        _check("sgd", lr=lr, momentum=momentum, weight_decay=weight_decay)
        if nesterov and (momentum <= 0.0 or dampening != 0.0):
            raise OptimizerError("[sgd] nesterov needs momentum > 0 and zero dampening")
        self.lr, self.momentum, self.dampening = lr, momentum, dampening
        self.weight_decay, self.nesterov = weight_decay, nesterov
        self.slots = ("momentum_buffer",) if momentum != 0.0 else ()

    def update(
        self, g: Graph, p: Node, grad: Node, slots: list[Node], step: Node, lr: Lr
    ) -> tuple[Node, list[Node]]:
        d = grad + p * self.weight_decay if self.weight_decay else grad
        new_slots: list[Node] = []
        if self.momentum != 0.0:
            (buf,) = slots
            later = buf * self.momentum + d * (1.0 - self.dampening)
            buf = g.where(g.eq(step, 1.0), d, later)
            new_slots.append(buf)
            d = d + buf * self.momentum if self.nesterov else buf
        return p - d * lr, new_slots


class Adam(Optimizer):
    """``torch.optim.Adam`` (``amsgrad=False``): L2 weight decay added to the
    gradient, ``m ← β₁m + (1−β₁)g``, ``v ← β₂v + (1−β₂)g²``,
    ``p −= lr/(1−β₁ᵗ) · m / (√v/√(1−β₂ᵗ) + ε)``."""

    slots = ("exp_avg", "exp_avg_sq")
    decoupled = False

    def __init__(
        self,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        name = "adamw" if self.decoupled else "adam"
        _check(name, lr=lr, eps=eps, weight_decay=weight_decay)
        if not all(0.0 <= b < 1.0 for b in betas):
            raise OptimizerError(f"[{name}] betas must be in [0, 1), got {betas}")
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay

    def update(
        self, g: Graph, p: Node, grad: Node, slots: list[Node], step: Node, lr: Lr
    ) -> tuple[Node, list[Node]]:
        b1, b2 = self.betas
        m, v = slots
        if self.weight_decay and self.decoupled:
            p = p * (1.0 - lr * self.weight_decay)
        elif self.weight_decay:
            grad = grad + p * self.weight_decay
        m = m + (grad - m) * (1.0 - b1)  # torch: exp_avg.lerp_(grad, 1 - beta1)
        v = v * b2 + grad * grad * (1.0 - b2)
        one = g.constant(1.0, dtype=p.dtype, shape=[])
        bc1 = one - g.pow(g.constant(b1, dtype=p.dtype, shape=[]), step)
        bc2 = one - g.pow(g.constant(b2, dtype=p.dtype, shape=[]), step)
        step_size = (one / bc1) * lr
        denom = g.sqrt(v) / g.sqrt(bc2) + self.eps
        return p - (m / denom) * step_size, [m, v]


class AdamW(Adam):
    """``torch.optim.AdamW``: Adam with decoupled weight decay
    (``p ← p·(1 − lr·wd)`` before the Adam step); default ``wd = 0.01``."""

    decoupled = True

    def __init__(
        self,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        super().__init__(lr, betas, eps, weight_decay)


def clip_by_global_norm(g: Graph, grads: list[Node], max_norm: float) -> tuple[list[Node], Node]:
    """``torch.nn.utils.clip_grad_norm_``: scale every gradient by
    ``min(1, max_norm / (‖g‖₂ + 1e-6))`` where ``‖g‖₂`` is the norm of all
    of them together. Returns the clipped gradients and the total norm."""
    if not max_norm > 0.0:
        raise OptimizerError(f"[clip_grad_norm] max_norm must be > 0, got {max_norm}")
    total = None
    for gr in grads:
        sq = g.sum(gr * gr)
        total = sq if total is None else total + sq
    if total is None:
        raise OptimizerError("[clip_grad_norm] no gradients")
    norm = g.sqrt(total)
    coef = g.minimum(g.constant(max_norm, dtype=norm.dtype, shape=[]) / (norm + 1e-6), 1.0)
    return [gr * coef for gr in grads], norm
