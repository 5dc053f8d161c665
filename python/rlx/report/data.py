"""What the HTML report (:mod:`rlx.report.html`) draws, gathered from a
compiled :class:`rlx.Executable`: the thunks with the layer each belongs to
and the pass that made it, the arena buffers with their lifetimes, and the
Metal plan.

Sources, all from the native module: ``thunk_rows()`` (per thunk its name,
its one-line text, the byte ranges it reads and writes from ``Thunk::io()``
named by buffer, and the pass that made it), ``metal_commands()`` (the
Metal plan), ``stats()`` / ``pass_report()`` (the pass report) and
``bindings()`` (the graph outputs, which live to the end).

Layers: a thunk that touches a param or state whose name holds a number
(``blk.3.attn_q.weight``, ``layers.3.k_cache``) belongs to that layer; a
thunk touching none takes the layer of the thunk before it; thunks before
the first layer are ``input``, after the last ``output``.

Arena buffers are derived from the final schedule (after the passes), not
from the planner's values (which the passes rewrite): a write to arena
bytes starts a buffer, reads of any of its bytes extend its lifetime, and a
later write over its bytes ends it, unless the same thunk also reads it
(an in-place update, which extends it). Arena bytes read before any write
are run inputs (a buffer from thunk 0); buffers holding graph outputs live
to the last thunk. No two buffers with overlapping lifetimes share bytes
(:func:`overlaps` checks; tests assert it) except at an in-place handoff,
where a thunk reads one buffer and writes the next over it.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from typing import Any, Optional

__all__ = [
    "Buffer",
    "Command",
    "GraphData",
    "ThunkRow",
    "arena_buffers",
    "collect",
    "layer_of_name",
    "overlaps",
]

Range = tuple[str, int, int]

_LAYER = re.compile(r"(?:^|[._])(\d+)(?=[._]|$)")

_DTYPE_BYTES = {
    "f64": 8,
    "f32": 4,
    "f16": 2,
    "bf16": 2,
    "i64": 8,
    "i32": 4,
    "u32": 4,
    "i16": 2,
    "i8": 1,
    "u8": 1,
    "bool": 1,
}


@dataclasses.dataclass
class ThunkRow:
    """One thunk of the final schedule."""

    index: int
    name: str
    text: str
    reads: list[Range]
    writes: list[Range]
    made_by: Optional[str]
    layer: str = ""


@dataclasses.dataclass
class Buffer:
    """An arena buffer: ``size`` bytes at ``offset``, written by thunk
    ``first`` (0 for a run input) and last read by thunk ``last``."""

    offset: int
    size: int
    first: int
    last: int
    writer: str
    layer: str
    output: bool = False

    @property
    def end(self) -> int:
        """One past its last byte."""
        return self.offset + self.size


@dataclasses.dataclass
class Command:
    """One Metal command (``dispatch`` / ``user`` / ``host`` / ``barrier`` / ``check``)."""

    kind: str
    thunk: int
    kernel: str
    grid: tuple[int, ...]
    threadgroup: tuple[int, ...]


@dataclasses.dataclass
class GraphData:
    """Everything the report shows about one compiled graph."""

    title: str
    thunks: list[ThunkRow]
    buffers: list[Buffer]
    commands: list[Command]
    stats: dict[str, Any]
    pass_text: str
    layers: list[str]


def layer_of_name(name: str) -> Optional[int]:
    """The layer number in a param / state name (its first all-digit dotted
    or underscored component), or ``None``."""
    m = _LAYER.search(name)
    return int(m.group(1)) if m else None


def _assign_layers(rows: list[ThunkRow]) -> list[str]:
    direct: list[Optional[int]] = []
    for r in rows:
        found = [layer_of_name(b) for b, _, _ in r.reads + r.writes if b not in ("arena", "const")]
        nums = [n for n in found if n is not None]
        direct.append(min(nums) if nums else None)
    known = [i for i, n in enumerate(direct) if n is not None]
    if not known:
        for r in rows:
            r.layer = "graph"
        return ["graph"] if rows else []
    first, last = known[0], known[-1]
    current = direct[first]
    for i, r in enumerate(rows):
        if i < first:
            r.layer = "input"
            continue
        if i > last:
            r.layer = "output"
            continue
        n = direct[i]
        if n is not None:
            current = n
        r.layer = f"layer {current}"
    order: list[str] = []
    for r in rows:
        if r.layer not in order:
            order.append(r.layer)
    return order


def arena_buffers(rows: list[ThunkRow], outputs: Sequence[tuple[int, int]] = ()) -> list[Buffer]:
    """The arena buffers of a schedule (see the module doc); ``outputs`` are
    the ``(offset, bytes)`` of the graph outputs in the arena."""
    live: list[Buffer] = []
    done: list[Buffer] = []

    def hits(b: Buffer, off: int, n: int) -> bool:
        return n > 0 and b.offset < off + n and off < b.end

    for r in rows:
        i = r.index
        read_bufs: list[Buffer] = []
        for buf, off, n in r.reads:
            if buf != "arena" or n == 0:
                continue
            hit = [b for b in live if hits(b, off, n)]
            if not hit:  # read before any write: a run input
                b = Buffer(off, n, 0, i, "input", "input")
                live.append(b)
                hit = [b]
            for b in hit:
                b.last = max(b.last, i)
                read_bufs.append(b)
        for buf, off, n in r.writes:
            if buf != "arena" or n == 0:
                continue
            same = next((b for b in live if b.offset == off and b.size == n), None)
            if same is not None and any(same is b for b in read_bufs):
                same.last = i  # in place
                continue
            for b in [b for b in live if hits(b, off, n)]:
                live.remove(b)
                done.append(b)
            live.append(Buffer(off, n, i, i, r.name, r.layer))
    end = rows[-1].index if rows else 0
    for b in live:
        if any(hits(b, off, n) for off, n in outputs):
            b.last, b.output = end, True
    out = done + live
    out.sort(key=lambda b: (b.first, b.offset))
    return out


def overlaps(buffers: list[Buffer]) -> list[tuple[Buffer, Buffer]]:
    """Pairs of buffers sharing bytes while both live (an in-place handoff,
    one ending at the thunk where the other starts, is not counted)."""
    bad = []
    by_first = sorted(buffers, key=lambda b: b.first)
    for k, a in enumerate(by_first):
        for b in by_first[k + 1 :]:
            if b.first > a.last:
                break
            if b.first == a.last:
                continue
            if a.offset < b.end and b.offset < a.end:
                bad.append((a, b))
    return bad


def _outputs(native: Any, arena_bytes: int) -> list[tuple[int, int]]:
    out = []
    for kind, _name, _node, offset, dims, dtype in native.bindings():
        if kind != "output" or offset >= arena_bytes:
            continue
        out.append((int(offset), math.prod(dims) * _DTYPE_BYTES.get(dtype, 4)))
    return out


def collect(exe: Any, title: str) -> GraphData:
    """Gather the report data of ``exe`` (an :class:`rlx.Executable`)."""
    with exe._hold():
        native = exe._native
        raw_rows = native.thunk_rows()
        raw_cmds = native.metal_commands()
        stats = dict(native.stats())
        text = str(native.pass_report())
        outputs = _outputs(native, int(stats["arena_bytes"]))
    rows = [
        ThunkRow(i, name, line.strip(), list(reads), list(writes), by)
        for i, (name, line, reads, writes, by) in enumerate(raw_rows)
    ]
    layers = _assign_layers(rows)
    cmds = [Command(k, t, kern, tuple(g), tuple(tg)) for k, t, kern, g, tg in raw_cmds]
    return GraphData(title, rows, arena_buffers(rows, outputs), cmds, stats, text, layers)
