"""Saved activations of a training graph: the forward values the backward
reads, with their sizes and the memory planner's intervals for them
(``rlx inspect MODEL --train``).

A training graph (:func:`rlx.optim.train_step`) is the forward up to the
loss node, then the backward and the update. A *saved activation* is a
value computed by the forward (not a leaf: input, param, state, constant)
that some backward / update node reads.

Given the compiled :class:`rlx.Executable`, each saved value also carries
where the planner put it (``Executable.value_plan()``, read off the plan the
executable runs): its *steps* — the nodes of the graph the planner lowered,
after the graph fusions, in order — from the one that defines it to its
last read and to the last step its bytes stay taken (a view or in-place
value sharing them can keep them longer), its arena offset and size. The
planner places these values like any other; the figures here are the
intervals it packed into the arena, not a recomputation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from rlx.graph import Graph

LEAVES = frozenset({"input", "param", "state", "constant"})
_BYTES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "u8": 1, "i8": 1, "bool": 1}


@dataclass(frozen=True)
class Planned:
    """Where the memory planner put one value: the planner step (node of
    the fused graph) holding it, its interval ``start..end`` (definition to
    last read), ``held_until`` (last step its bytes stay taken), the arena
    ``offset`` and ``nbytes``, and ``alias_of``: the step whose bytes a
    view / in-place value uses (None for a value with bytes of its own)."""

    step: int
    start: int
    end: int
    held_until: int
    offset: int
    nbytes: int
    alias_of: Optional[int]


@dataclass(frozen=True)
class Saved:
    """One saved activation: node id, op, name, dims, dtype, bytes, its last
    reader ``last_read`` (a node id of the graph), and ``planned``: the
    planner's placement (None without an executable, or when the value is
    not in the arena)."""

    node: int
    op: str
    name: str
    dims: tuple
    dtype: str
    nbytes: int
    last_read: int
    planned: Optional[Planned] = None

    @property
    def span(self) -> int:
        """Nodes between its definition and its last read."""
        return self.last_read - self.node


def value_plan(exe: Any) -> tuple[int, list[Optional[Planned]]]:
    """The planner's step count and, per graph node, its :class:`Planned`
    (None for nodes fused away or outside the arena) from ``exe``."""
    native = getattr(exe, "_native", exe)
    steps, rows = native.value_plan()
    out: list[Optional[Planned]] = []
    for r in rows:
        if r is None:
            out.append(None)
            continue
        step, start, end, held, off, nbytes, alias = r
        out.append(Planned(step, start, end, held, off, nbytes, None if alias < 0 else alias))
    return steps, out


def saved_activations(graph: Graph, loss_id: int, exe: Any = None) -> list[Saved]:
    """The forward values (ids ≤ ``loss_id``) read after the loss, in id
    order; with ``exe`` (``graph`` compiled), each with its placement."""
    g = graph._g
    n = len(graph)
    last: dict[int, int] = {}
    for i in range(loss_id + 1, n):
        for j in g.node(i)[1]:
            if j <= loss_id:
                last[j] = i
    plan = value_plan(exe)[1] if exe is not None else None
    out = []
    for j in sorted(last):
        op, _, name = g.node(j)
        if op in LEAVES:
            continue
        dims, dtype = g.shape(j)
        numel = int(np.prod([d if isinstance(d, int) else 1 for d in dims], dtype=np.int64))
        placed = plan[j] if plan is not None else None
        nbytes = placed.nbytes if placed is not None else numel * _BYTES.get(dtype, 4)
        out.append(Saved(j, op, name, tuple(dims), dtype, nbytes, last[j], placed))
    return out


def live_peak(saved: list[Saved]) -> tuple[int, int]:
    """The largest total of saved bytes live at once, and where: with
    placements, arena bytes held (the union of their byte ranges, so views
    sharing a buffer count once) at a planner step; without, the sum of the
    sizes over node-order lifetimes at a node id."""
    placed = [s.planned for s in saved if s.planned is not None]
    if not placed:
        ev = sorted([(s.node, s.nbytes) for s in saved] + [(s.last_read + 1, -s.nbytes)
                    for s in saved])  # fmt: skip
        cur = peak = at = 0
        for pos, d in ev:
            cur += d
            if cur > peak:
                peak, at = cur, pos
        return peak, at
    peak = at = 0
    for step in sorted({p.start for p in placed}):
        ranges = sorted((p.offset, p.offset + p.nbytes) for p in placed
                        if p.start <= step <= p.held_until)  # fmt: skip
        total, top = 0, -1
        for a, b in ranges:
            if b > top:
                total += b - max(a, top)
                top = b
        if total > peak:
            peak, at = total, step
    return peak, at


def report(graph: Graph, loss_id: int, exe: Any = None, top: int = 12) -> str:
    """A text table: the ``top`` largest saved activations and the totals;
    with ``exe``, the planner's steps and arena offsets for them."""
    saved = saved_activations(graph, loss_id, exe)
    total = sum(s.nbytes for s in saved)
    peak, at = live_peak(saved)
    if exe is None:
        return _report_nodes(graph, loss_id, saved, total, peak, at, top)
    steps, plan = value_plan(exe)
    loss = plan[loss_id]
    fwd = f"forward = steps 0..{loss.step}" if loss is not None else "loss fused away"
    n_placed = sum(s.planned is not None for s in saved)
    lines = [
        f"saved activations: {len(saved)} forward values read by the backward "
        f"({n_placed} in the arena), {total / 2**20:.1f} MiB in all; the planner's "
        f"{steps} steps (nodes after the graph fusions): {fwd}, backward + update "
        f"after; at most {peak / 2**20:.1f} MiB of saved bytes held at once (step {at})",
        f"{'node':>6} {'op':22} {'dims':18} {'MiB':>7} {'steps (def..last read)':>22} "
        f"{'held to':>8} {'offset':>12}  name",
    ]
    for s in sorted(saved, key=lambda s: (-s.nbytes, s.node))[:top]:
        dims = "x".join(str(d) for d in s.dims)
        p = s.planned
        life, held, off = "-", "-", "-"
        if p is not None:
            life, held = f"{p.start}..{p.end}", str(p.held_until)
            off = f"{p.offset:#x}" + ("" if p.alias_of is None else f" (view of step {p.alias_of})")
        lines.append(
            f"{s.node:>6} {s.op:22} {dims:18} {s.nbytes / 2**20:7.2f} {life:>22} {held:>8} "
            f"{off:>12}  {s.name}"
        )
    return "\n".join(lines)


def _report_nodes(graph: Graph, loss_id: int, saved: list[Saved], total: int, peak: int,
                  at: int, top: int) -> str:  # fmt: skip
    lines = [
        f"saved activations: {len(saved)} forward values read by the backward, "
        f"{total / 2**20:.1f} MiB in all; at most {peak / 2**20:.1f} MiB live at once "
        f"(node {at}, program order); forward = nodes 0..{loss_id}, backward + update = "
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
