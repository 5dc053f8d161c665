"""Reductions, softmax, cross-entropy, cumsum, top-k, arg-max/min, sampling."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

from rlx.node import Node
from rlx.ops._base import GraphBase

#: Reduction axes: one axis, several, or ``None`` for all.
Axes = Union[int, Sequence[int], None]


def _axes(axis: Axes) -> list[int]:
    if axis is None:
        return []
    return [axis] if isinstance(axis, int) else [int(a) for a in axis]


class ReduceOps(GraphBase):
    """Reductions and their relatives."""

    def reduce(
        self, x: Node, kind: str, axis: Axes = None, *, keep_dims: bool = False, name: str = ""
    ) -> Node:
        """Reduce with ``kind`` (``sum``/``mean``/``max``/``min``/``prod``) over
        ``axis`` (``None`` = all axes)."""
        op = {"op": "reduce", "kind": kind, "axes": _axes(axis), "keep_dims": keep_dims}
        return self._add(op, [x], name)

    def sum(self, x: Node, axis: Axes = None, *, keep_dims: bool = False, name: str = "") -> Node:
        """Sum over ``axis`` (all when None)."""
        return self.reduce(x, "sum", axis, keep_dims=keep_dims, name=name)

    def mean(self, x: Node, axis: Axes = None, *, keep_dims: bool = False, name: str = "") -> Node:
        """Mean over ``axis``."""
        return self.reduce(x, "mean", axis, keep_dims=keep_dims, name=name)

    def max(self, x: Node, axis: Axes = None, *, keep_dims: bool = False, name: str = "") -> Node:
        """Maximum over ``axis`` (for the elementwise maximum use :meth:`maximum`)."""
        return self.reduce(x, "max", axis, keep_dims=keep_dims, name=name)

    def min(self, x: Node, axis: Axes = None, *, keep_dims: bool = False, name: str = "") -> Node:
        """Minimum over ``axis`` (for the elementwise minimum use :meth:`minimum`)."""
        return self.reduce(x, "min", axis, keep_dims=keep_dims, name=name)

    def prod(self, x: Node, axis: Axes = None, *, keep_dims: bool = False, name: str = "") -> Node:
        """Product over ``axis``."""
        return self.reduce(x, "prod", axis, keep_dims=keep_dims, name=name)

    def softmax(self, x: Node, axis: int = -1, *, name: str = "") -> Node:
        """Softmax along ``axis``."""
        return self._add({"op": "softmax", "axis": axis}, [x], name)

    def softmax_cross_entropy(self, logits: Node, labels: Node, *, name: str = "") -> Node:
        """Per-row loss: logits ``[n, c]``, labels int ``[n]`` or soft ``[n, c]`` → f32 ``[n]``."""
        return self._add({"op": "softmax_cross_entropy"}, [logits, labels], name)

    def cumsum(self, x: Node, axis: int = -1, *, exclusive: bool = False, name: str = "") -> Node:
        """Inclusive (or exclusive) prefix sum along ``axis``."""
        return self._add({"op": "cumsum", "axis": axis, "exclusive": exclusive}, [x], name)

    def topk(self, x: Node, k: int, axis: int = -1, *, name: str = "") -> Node:
        """Indices (i32) of the ``k`` largest along ``axis``, descending."""
        return self._add({"op": "top_k", "k": k, "axis": axis}, [x], name)

    def argmax(self, x: Node, axis: int = -1, *, keep_dims: bool = False, name: str = "") -> Node:
        """Index (i32) of the maximum along ``axis``."""
        return self._add({"op": "arg_max", "axis": axis, "keep_dims": keep_dims}, [x], name)

    def argmin(self, x: Node, axis: int = -1, *, keep_dims: bool = False, name: str = "") -> Node:
        """Index (i32) of the minimum along ``axis``."""
        return self._add({"op": "arg_min", "axis": axis, "keep_dims": keep_dims}, [x], name)

    def sample(
        self,
        logits: Node,
        *,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        name: str = "",
    ) -> Node:
        """Draw one token per row of ``[b, vocab]`` logits → i32 ``[b]``
        (``temperature=0`` is greedy; ``top_k=0`` and ``top_p=1`` disable filtering)."""
        op = {
            "op": "sample",
            "temperature": temperature,
            "top_k": top_k,
            "top_p": top_p,
            "seed": seed,
        }
        return self._add(op, [logits], name)
