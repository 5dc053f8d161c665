"""`rlx.Graph`: build a computation graph one op at a time.

Each method adds a node through the native builder (``rlx._rlx.Graph``),
which infers and checks the result shape; a bad call raises the
:class:`rlx.RlxError` subclass that fits (``ShapeError``, ``DTypeError``...),
with a message that starts with the op in brackets. The op methods live in
per-family mixins under :mod:`rlx.ops`.

>>> g = Graph("mlp")
>>> x = g.input("x", [2, "seq", 64])
>>> w = g.param("w", [64, 128], "f16")
>>> y = g.gelu(x.astype("f16") @ w)
>>> y.shape
(2, 'seq', 128)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from rlx import _rlx
from rlx._types import DTypeLike, ShapeLike
from rlx.node import Node
from rlx.ops._base import shape_json
from rlx.ops.attention import AttentionOps
from rlx.ops.backward import BackwardOps
from rlx.ops.conv import ConvOps
from rlx.ops.elementwise import ElementwiseOps
from rlx.ops.matmul import MatMulOps
from rlx.ops.misc import MiscOps, SplatConfig
from rlx.ops.norm import NormOps
from rlx.ops.reduce import ReduceOps
from rlx.ops.sequence import SequenceOps
from rlx.ops.shape import ShapeOps
from rlx.ops.signal import SignalOps

__all__ = ["Graph", "Node", "SplatConfig"]

# Attributes too bulky to print inline.
_BULKY = {"body", "steps", "values", "attrs"}


def _fmt_attr(k: str, v: Any) -> str:
    if k == "body" and isinstance(v, dict):
        return f"body=<graph {len(v.get('nodes', []))} nodes>"
    if k == "values" and isinstance(v, list):
        return f"values={v}" if len(v) <= 4 else f"values=<{len(v)} values>"
    if k == "steps" and isinstance(v, list):
        return f"steps=<{len(v)}>"
    if isinstance(v, str):
        return f"{k}={v}"
    return f"{k}={json.dumps(v, separators=(',', ':'))}"


class Graph(
    ElementwiseOps,
    MatMulOps,
    NormOps,
    AttentionOps,
    ShapeOps,
    ReduceOps,
    ConvOps,
    SequenceOps,
    SignalOps,
    MiscOps,
    BackwardOps,
):
    """A computation graph; every method checks shapes as the node is added.

    Nodes are appended in topological order. ``print(g)`` shows one line per
    node with its key attributes; ``g.to_json()`` / ``Graph.from_json()``
    round-trip it.
    """

    def __init__(self, name: str = "graph") -> None:
        self._g = _rlx.Graph(name)

    @classmethod
    def _wrap(cls, native: _rlx.Graph) -> Graph:
        g = cls.__new__(cls)
        g._g = native
        return g

    # ---------------------------------------------------------------- leaves
    def input(self, name: str, shape: ShapeLike, dtype: DTypeLike = "f32") -> Node:
        """A run-time input; dims are ints or symbols (``[1, "seq"]``)."""
        return self._add({"op": "input", "shape": shape_json(shape, dtype)}, [], name)

    def param(self, name: str, shape: ShapeLike, dtype: DTypeLike = "f32") -> Node:
        """A weight, bound once after compile."""
        return self._add({"op": "param", "shape": shape_json(shape, dtype)}, [], name)

    def state(self, name: str, shape: ShapeLike, dtype: DTypeLike = "f32") -> Node:
        """Persistent state (KV cache, recurrent state), kept across runs."""
        return self._add({"op": "state", "shape": shape_json(shape, dtype)}, [], name)

    # --------------------------------------------------------------- outputs
    def outputs(self, *nodes: Node) -> list[Node]:
        """Declare ``nodes`` as the outputs (replacing earlier ones) and return
        them; with no arguments, return the declared outputs."""
        if nodes:
            self._g.set_outputs([self._check("outputs", n) for n in nodes])
        return [Node(self, i) for i in self._g.outputs()]

    # ----------------------------------------------------------- inspection
    @property
    def name(self) -> str:
        """Graph name."""
        return self._g.name

    @property
    def nodes(self) -> list[Node]:
        """Every node, in topological order."""
        return [Node(self, i) for i in range(len(self._g))]

    def __len__(self) -> int:
        return len(self._g)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def verify(self) -> None:
        """Run the IR verifier; raises :class:`rlx.GraphError` on a malformed graph."""
        self._g.verify()

    def to_json(self) -> str:
        """Serialise (serde JSON of ``rlx_ir::Graph``)."""
        return self._g.to_json()

    @classmethod
    def from_json(cls, s: str) -> Graph:
        """Parse and verify a graph serialised by :meth:`to_json`."""
        return cls._wrap(_rlx.Graph.from_json(s))

    def format(self, attrs: bool = True) -> str:
        """Readable listing, one node per line:
        ``%3 = binary{kind=add}(%1, %2) : f32[2, 3]  # add_3``."""
        if not attrs:
            return str(self._g).rstrip("\n")
        outs = set(self._g.outputs())
        lines = [f"graph {self.name} ({len(self)} nodes)"]
        for i in range(len(self._g)):
            op, ins, nm = self._g.node(i)
            dims, dt = self._g.shape(i)
            d: dict[str, Any] = json.loads(self._g.op_json(i))
            d.pop("op", None)
            if op in ("input", "param", "state"):
                d.pop("shape", None)
            if op == "constant":
                d.pop("shape", None)
            parts = [_fmt_attr(k, v) for k, v in d.items() if v is not None]
            a = "{" + ", ".join(parts) + "}" if parts else ""
            args = ", ".join(f"%{j}" for j in ins)
            mark = " -> out" if i in outs else ""
            shape = f"{dt}[{', '.join(str(x) for x in dims)}]"
            lines.append(f"  %{i} = {op}{a}({args}) : {shape}  # {nm}{mark}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()

    def __repr__(self) -> str:
        return f"<rlx.Graph {self.name!r} with {len(self)} nodes>"
