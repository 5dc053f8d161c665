"""The plumbing every op mixin shares: adding nodes, turning scalars into
constants, and reading static dims for defaults."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from rlx import _rlx
from rlx._types import Dim, DTypeLike, ShapeLike, check_dim, dims_list, dims_str, dtype_name
from rlx.errors import GraphError, ShapeError
from rlx.node import Node, Operand


class GraphBase:
    """State and helpers shared by the op mixins (see :class:`rlx.Graph`)."""

    _g: _rlx.Graph

    # ----------------------------------------------------------------- nodes
    def node(self, id: int) -> Node:
        """The node with id ``id``."""
        if not 0 <= id < len(self._g):
            raise GraphError(f"[graph] unknown node id {id} (graph has {len(self._g)} nodes)")
        return Node(self, id)  # type: ignore[arg-type]

    def _check(self, op: str, n: Node) -> int:
        if not isinstance(n, Node):
            raise TypeError(f"[{op}] expected an rlx.Node, got {type(n).__name__}")
        if n.graph is not self:
            raise GraphError(f"[{op}] node %{n.id} belongs to another graph")
        return n.id

    def _add(self, op: dict[str, Any], inputs: Sequence[Node], name: str = "") -> Node:
        """Add ``op`` (its serde dict) applied to ``inputs``; shape checked in Rust."""
        ids = [self._check(str(op.get("op")), n) for n in inputs]
        try:
            text = json.dumps(op, allow_nan=False)
        except ValueError:
            raise GraphError(
                f"[{op.get('op')}] non-finite attribute values (nan/inf) cannot be serialised"
            ) from None
        return Node(self, self._g.add(text, ids, name))  # type: ignore[arg-type]

    def apply(self, op: dict[str, Any], *inputs: Node, name: str = "") -> Node:
        """Escape hatch: add a raw op dict (``{"op": "binary", "kind": "add"}``)."""
        return self._add(op, list(inputs), name)

    # ------------------------------------------------------------- constants
    def constant(
        self,
        values: Any,
        dtype: Optional[DTypeLike] = None,
        shape: Optional[ShapeLike] = None,
        *,
        name: str = "",
    ) -> Node:
        """A constant from a scalar, nested list or numpy array.

        ``dtype`` defaults to the array's dtype for numpy inputs, and for
        Python values to ``bool`` / ``i32`` / ``f32`` (bools / ints / floats).
        With ``shape`` given, a single value is splatted over it; otherwise the
        value count must match. NaN / inf cannot be represented (the op's
        values travel as JSON numbers) and raise :class:`rlx.GraphError`.
        """
        is_numpy = isinstance(values, (np.ndarray, np.generic))
        arr = np.asarray(values)
        if dtype is None:
            if is_numpy:
                dt = dtype_name(arr.dtype)
            elif arr.dtype == np.bool_:
                dt = "bool"
            elif np.issubdtype(arr.dtype, np.integer):
                dt = "i32"
            else:
                dt = "f32"
        else:
            dt = dtype_name(dtype)
        if arr.dtype.kind in "OUS":
            raise TypeError(f"[constant] values must be numeric, got {arr.dtype}")
        flat = [float(v) for v in arr.astype(np.float64).reshape(-1)]
        if not all(math.isfinite(v) for v in flat):
            raise GraphError("[constant] nan/inf values cannot be serialised as JSON numbers")
        dims = dims_list(shape) if shape is not None else [int(d) for d in arr.shape]
        op = {"op": "constant", "shape": {"dims": dims, "dtype": dt}, "values": flat}
        return self._add(op, [], name)

    def _operand(self, x: Operand, like: Optional[Node], op: str) -> Node:
        """``x`` itself if it is a node, else a constant of ``like``'s dtype."""
        if isinstance(x, Node):
            self._check(op, x)
            return x
        if isinstance(x, (bool, int, float, np.generic, np.ndarray, list, tuple)):
            return self.constant(x, dtype=like.dtype if like is not None else None)
        raise TypeError(f"[{op}] cannot use {type(x).__name__} as an operand")

    def _operands(self, op: str, *xs: Operand) -> list[Node]:
        """Coerce scalars among ``xs`` to constants of the first node's dtype."""
        like = next((x for x in xs if isinstance(x, Node)), None)
        return [self._operand(x, like, op) for x in xs]

    # ---------------------------------------------------------------- helpers
    @staticmethod
    def _static(n: Node, axis: int, op: str, what: str) -> int:
        """Static size of ``n``'s ``axis`` (for attribute defaults)."""
        try:
            d = n.shape[axis]
        except IndexError:
            raise ShapeError(
                f"[{op}] cannot infer {what}: operand {n.dtype}{dims_str(n.shape)} "
                f"has no axis {axis}"
            ) from None
        if not isinstance(d, int):
            raise ShapeError(
                f"[{op}] cannot infer {what} from symbolic dim {d!r} of "
                f"{n.dtype}{dims_str(n.shape)}; pass {what}= explicitly"
            )
        return d


def shape_json(dims: ShapeLike, dtype: DTypeLike) -> dict[str, Any]:
    """The serde form of an ``rlx_ir::Shape``."""
    out: list[Dim] = [
        d if isinstance(d, str) else check_dim(d, "dimension") for d in dims_list(dims)
    ]
    return {"dims": out, "dtype": dtype_name(dtype)}
