"""`rlx.Node`: a handle to one node of a graph, with numpy-like operators.

Arithmetic with Python / numpy scalars (``x * 2.0``) turns the scalar into a
constant of the node's dtype. ``==`` keeps identity semantics (nodes are
hashable handles); use :meth:`Node.eq` / :meth:`Node.ne` for elementwise
comparisons. ``<``, ``<=``, ``>``, ``>=`` build comparison nodes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Union

import numpy as np

from rlx._types import Dim, DTypeLike, dims_str
from rlx.errors import ShapeError

if TYPE_CHECKING:
    from rlx.graph import Graph

#: A node, or a value that becomes a constant when mixed with nodes.
Operand = Union["Node", float, int, bool, "np.ndarray[Any, Any]", "np.generic"]


class Node:
    """A handle to node ``id`` of ``graph``. Build nodes with :class:`rlx.Graph` methods."""

    # Numpy must defer to our reflected operators (``np.float32(2) * x``).
    __array_ufunc__ = None
    __slots__ = ("graph", "id", "_shape", "_dtype")

    def __init__(self, graph: Graph, id: int) -> None:
        self.graph = graph
        self.id = id
        dims, dtype = graph._g.shape(id)
        self._shape: tuple[Dim, ...] = tuple(dims)
        self._dtype: str = dtype

    # ------------------------------------------------------------ properties
    @property
    def shape(self) -> tuple[Dim, ...]:
        """Dimensions: ints, or symbol names for dynamic dims."""
        return self._shape

    @property
    def dtype(self) -> str:
        """Element type, rlx's short name (``"f32"``)."""
        return self._dtype

    @property
    def ndim(self) -> int:
        """Rank."""
        return len(self._shape)

    @property
    def name(self) -> str:
        """The node's name (``"<op>_<id>"`` unless one was given)."""
        return self.graph._g.node(self.id)[2]

    @property
    def op(self) -> str:
        """The op's snake-case name (``"binary"``, ``"mat_mul"``)."""
        return self.graph._g.node(self.id)[0]

    @property
    def inputs(self) -> list[Node]:
        """Operand nodes."""
        return [self.graph.node(i) for i in self.graph._g.node(self.id)[1]]

    @property
    def attrs(self) -> dict[str, Any]:
        """The op's attributes (its JSON form without the ``"op"`` tag)."""
        import json

        d: dict[str, Any] = json.loads(self.graph._g.op_json(self.id))
        d.pop("op", None)
        return d

    @property
    def T(self) -> Node:  # noqa: N802 - numpy spelling
        """Transpose of a rank-2 node."""
        if self.ndim != 2:
            raise ShapeError(
                f"[transpose] .T needs rank 2, got {self._dtype}{dims_str(self._shape)}"
            )
        return self.graph.transpose(self, [1, 0])

    # ------------------------------------------------------------- identity
    def __eq__(self, other: object) -> bool:
        return isinstance(other, Node) and other.graph is self.graph and other.id == self.id

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash((id(self.graph), self.id))

    def __repr__(self) -> str:
        return f"<Node %{self.id} {self.op} {self._dtype}{dims_str(self._shape)} {self.name!r}>"

    def __iter__(self) -> Any:
        raise TypeError("rlx.Node is not iterable; index or narrow it explicitly")

    # ------------------------------------------------------------ arithmetic
    def __add__(self, o: Operand) -> Node:
        return self.graph.add(self, o)

    def __radd__(self, o: Operand) -> Node:
        return self.graph.add(o, self)

    def __sub__(self, o: Operand) -> Node:
        return self.graph.sub(self, o)

    def __rsub__(self, o: Operand) -> Node:
        return self.graph.sub(o, self)

    def __mul__(self, o: Operand) -> Node:
        return self.graph.mul(self, o)

    def __rmul__(self, o: Operand) -> Node:
        return self.graph.mul(o, self)

    def __truediv__(self, o: Operand) -> Node:
        return self.graph.div(self, o)

    def __rtruediv__(self, o: Operand) -> Node:
        return self.graph.div(o, self)

    def __pow__(self, o: Operand) -> Node:
        return self.graph.pow(self, o)

    def __rpow__(self, o: Operand) -> Node:
        return self.graph.pow(o, self)

    def __matmul__(self, o: Operand) -> Node:
        return self.graph.matmul(self, o)

    def __rmatmul__(self, o: Operand) -> Node:
        return self.graph.matmul(o, self)

    def __neg__(self) -> Node:
        return self.graph.neg(self)

    def __pos__(self) -> Node:
        return self

    def __abs__(self) -> Node:
        return self.graph.abs(self)

    def __lt__(self, o: Operand) -> Node:
        return self.graph.lt(self, o)

    def __le__(self, o: Operand) -> Node:
        return self.graph.le(self, o)

    def __gt__(self, o: Operand) -> Node:
        return self.graph.gt(self, o)

    def __ge__(self, o: Operand) -> Node:
        return self.graph.ge(self, o)

    # --------------------------------------------------- elementwise compare
    def eq(self, o: Operand) -> Node:
        """Elementwise ``self == o`` → bool node."""
        return self.graph.eq(self, o)

    def ne(self, o: Operand) -> Node:
        """Elementwise ``self != o`` → bool node."""
        return self.graph.ne(self, o)

    def lt(self, o: Operand) -> Node:
        """Elementwise ``self < o`` → bool node."""
        return self.graph.lt(self, o)

    def le(self, o: Operand) -> Node:
        """Elementwise ``self <= o`` → bool node."""
        return self.graph.le(self, o)

    def gt(self, o: Operand) -> Node:
        """Elementwise ``self > o`` → bool node."""
        return self.graph.gt(self, o)

    def ge(self, o: Operand) -> Node:
        """Elementwise ``self >= o`` → bool node."""
        return self.graph.ge(self, o)

    # ---------------------------------------------------------------- layout
    def reshape(self, *dims: Dim | list[Dim] | tuple[Dim, ...]) -> Node:
        """Reshape; one dim may be ``-1`` (inferred). ``x.reshape(2, -1)`` or ``x.reshape((2,
        -1))``."""
        return self.graph.reshape(self, *dims)

    def transpose(self, *perm: int) -> Node:
        """Permute axes (reverse them when no ``perm`` is given)."""
        return self.graph.transpose(self, list(perm) if perm else None)

    def permute(self, *perm: int) -> Node:
        """Permute axes: ``x.permute(0, 2, 1)``."""
        return self.graph.transpose(self, list(perm))

    def astype(self, dtype: DTypeLike) -> Node:
        """Cast to ``dtype``."""
        return self.graph.cast(self, dtype)

    def __getitem__(self, index: Any) -> Node:
        from rlx.ops.indexing import getitem

        return getitem(self, index)
