"""Graph builder (minimal; the full per-op API is being written)."""

from __future__ import annotations

import json
from typing import Any

from rlx import _rlx


class Node:
    """A handle to one node of a :class:`Graph`."""

    def __init__(self, graph: Graph, id: int) -> None:
        self.graph = graph
        self.id = id


class Graph:
    """A computation graph; every method checks shapes as the node is added."""

    def __init__(self, name: str = "graph") -> None:
        self._g = _rlx.Graph(name)

    def _add(self, op: dict[str, Any], inputs: list[Node], name: str = "") -> Node:
        return Node(self, self._g.add(json.dumps(op), [n.id for n in inputs], name))

    def __str__(self) -> str:
        return str(self._g)
