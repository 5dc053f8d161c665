"""Reverse-mode automatic differentiation over the rlx IR.

:func:`grad` appends the backward graph to the forward one: each op's
vector-Jacobian rule (one module per op family) emits ordinary IR ops, or
the IR's ``*_backward`` ops where one exists (attention, RMSNorm, RoPE,
cumsum, gather_axis, max-pool, conv2d, adaLN, gated residual, softmax
cross-entropy, log-mel, Gaussian splat rendering); soft-capped attention,
Gaussian splat preparation and the rotations no backward op covers are
built from ordinary ops
(:mod:`rlx.autodiff.composite`).

>>> g = rlx.Graph("mlp")
>>> x = g.input("x", [4, 8]); w = g.param("w", [8, 2])
>>> loss = g.sum(g.tanh(x @ w))
>>> (dw,) = rlx.grad(g, loss, [w])
"""

from rlx.autodiff import (  # noqa: F401
    composite,
    elementwise,
    matmul,
    nn,
    norm,
    recurrent,
    reduce,
    scan,
    shape,
)
from rlx.autodiff._core import RULES, GradError, NotDifferentiableError, grad


def differentiable_ops() -> list[str]:
    """The IR ops (serde names) that have a gradient rule."""
    return sorted(RULES)


__all__ = ["GradError", "NotDifferentiableError", "differentiable_ops", "grad"]
