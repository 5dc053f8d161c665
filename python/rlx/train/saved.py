"""Saved activations of a training graph: the forward values the backward
reads, with their sizes and lifetimes (``rlx inspect MODEL --train``).

A training graph (:func:`rlx.optim.train_step`) is the forward up to the
loss node, then the backward and the update. A *saved activation* is a
value computed by the forward (not a leaf: input, param, state, constant)
that some backward / update node reads; it stays live from the forward
node that makes it to its last reader in the backward. Positions are node
indices in program order (the order the planner schedules before its
fusion passes); the planner treats these values like any other, so their
lifetimes are what it packs into the arena.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlx.graph import Graph

LEAVES = frozenset({"input", "param", "state", "constant"})
_BYTES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "u8": 1, "i8": 1, "bool": 1}


@dataclass(frozen=True)
class Saved:
    """One saved activation: node id, op, name, dims, dtype, bytes, and its
    lifetime ``[node, last_read]`` in program order."""

    node: int
    op: str
    name: str
    dims: tuple
    dtype: str
    nbytes: int
    last_read: int

    @property
    def span(self) -> int:
        """Nodes between its definition and its last read."""
        return self.last_read - self.node


def saved_activations(graph: Graph, loss_id: int) -> list[Saved]:
    """The forward values (ids ≤ ``loss_id``) read after the loss, in id order."""
    g = graph._g
    n = len(graph)
    last: dict[int, int] = {}
    for i in range(loss_id + 1, n):
        for j in g.node(i)[1]:
            if j <= loss_id:
                last[j] = i
    out = []
    for j in sorted(last):
        op, _, name = g.node(j)
        if op in LEAVES:
            continue
        dims, dtype = g.shape(j)
        numel = int(np.prod([d if isinstance(d, int) else 1 for d in dims], dtype=np.int64))
        out.append(Saved(j, op, name, tuple(dims), dtype, numel * _BYTES.get(dtype, 4), last[j]))
    return out


def live_peak(saved: list[Saved]) -> tuple[int, int]:
    """The largest total of saved bytes live at once, and the node where."""
    events = sorted([(s.node, s.nbytes) for s in saved] + [(s.last_read + 1, -s.nbytes)
                    for s in saved])  # fmt: skip
    cur = peak = at = 0
    for pos, d in events:
        cur += d
        if cur > peak:
            peak, at = cur, pos
    return peak, at


def report(graph: Graph, loss_id: int, top: int = 12) -> str:
    """A text table: the ``top`` largest saved activations and the totals."""
    saved = saved_activations(graph, loss_id)
    total = sum(s.nbytes for s in saved)
    peak, at = live_peak(saved)
    lines = [
        f"saved activations: {len(saved)} forward values read by the backward, "
        f"{total / 2**20:.1f} MiB in all; at most {peak / 2**20:.1f} MiB live at once "
        f"(node {at}); forward = nodes 0..{loss_id}, backward + update = "
        f"{loss_id + 1}..{len(graph) - 1}",
        f"{'node':>6} {'op':24} {'dims':22} {'MiB':>8} {'lifetime (nodes)':>18}  name",
    ]
    for s in sorted(saved, key=lambda s: (-s.nbytes, s.node))[:top]:
        dims = "x".join(str(d) for d in s.dims)
        life = f"{s.node}..{s.last_read}"
        lines.append(
            f"{s.node:>6} {s.op:24} {dims:22} {s.nbytes / 2**20:8.2f} {life:>18}  {s.name}"
        )
    return "\n".join(lines)
