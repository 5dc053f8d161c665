"""VJP rules of layout and indexing ops: reshape, transpose, expand,
narrow, concat, reverse, gather (embedding), gather_axis, scatter_add,
2× nearest resize."""

from __future__ import annotations

from typing import Optional

import numpy as np

from rlx.autodiff._core import Ctx, rule
from rlx.node import Node


def _axis(a: int, rank: int) -> int:
    return a + rank if a < 0 else a


@rule("reshape")
def _reshape(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    (x,) = node.inputs
    return [ctx.g.reshape(dy, list(x.shape))]


@rule("transpose")
def _transpose(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    perm = node.attrs["perm"]
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return [ctx.g.transpose(dy, inv)]


@rule("expand")
def _expand(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    (x,) = node.inputs
    return [ctx.sum_to(dy, x.shape)]


@rule("narrow")
def _narrow(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    (x,) = node.inputs
    at = node.attrs
    ax = _axis(at["axis"], x.ndim)
    total = x.shape[ax]
    if not isinstance(total, int):
        raise ctx.fail(node, f"narrow of symbolic dim {total!r}")
    start, ln = at["start"], at["len"]
    parts = []
    if start > 0:
        dims = list(x.shape)
        dims[ax] = start
        parts.append(ctx.zeros(dims, dy.dtype))
    parts.append(dy)
    rest = total - start - ln
    if rest > 0:
        dims = list(x.shape)
        dims[ax] = rest
        parts.append(ctx.zeros(dims, dy.dtype))
    return [parts[0] if len(parts) == 1 else ctx.g.concat(parts, axis=ax)]


@rule("concat")
def _concat(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    ins = node.inputs
    ax = _axis(node.attrs["axis"], node.ndim)
    out: list[Optional[Node]] = []
    start = 0
    for i, x in enumerate(ins):
        ln = x.shape[ax]
        if not isinstance(ln, int):
            raise ctx.fail(node, f"concat along symbolic dim {ln!r}")
        out.append(ctx.g.narrow(dy, ax, start, ln) if ctx.needs(i) else None)
        start += ln
    return out


@rule("reverse")
def _reverse(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    return [ctx.g.reverse(dy, node.attrs["axes"])]


@rule("gather")
def _gather(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    # embedding: table [v, ..] rows idx → scatter-add dy rows back into [v, ..]
    table, idx = node.inputs
    v = table.shape[0]
    if not isinstance(v, int):
        raise ctx.fail(node, f"gather from a table with symbolic rows {v!r}")
    g = ctx.g
    row = list(table.shape[1:])
    flat_dy = g.reshape(dy, [-1, *row])
    flat_idx = g.reshape(idx, [-1]) if idx.ndim != 1 else idx
    return [g.scatter_add(flat_dy, flat_idx, v), None]


@rule("gather_axis")
def _gather_axis(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    x, idx = node.inputs
    ax = _axis(node.attrs["axis"], x.ndim)
    n = x.shape[ax]
    if not isinstance(n, int):
        raise ctx.fail(node, f"gather along symbolic dim {n!r}")
    return [ctx.g.gather_backward(dy, idx, axis=ax, axis_dim=n), None]


@rule("scatter_add")
def _scatter_add(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    _, idx = node.inputs
    return [ctx.g.gather(dy, idx), None]


@rule("resize_nearest2x")
def _resize(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    (x,) = node.inputs
    n, c, h, w = x.shape
    g = ctx.g
    blocks = g.reshape(dy, [n, c, h, 2, w, 2])
    return [g.sum(blocks, [3, 5])]


def _static_dims(ctx: Ctx, node: Node, x: Node) -> list[int]:
    dims = list(x.shape)
    if not all(isinstance(d, int) for d in dims):
        raise ctx.fail(node, f"needs static dims, got {dims}")
    return [int(d) for d in dims]


def _wrap_index(ctx: Ctx, idx: Node, bound: int) -> Node:
    """``idx`` as f32 (index arithmetic runs in f32, exact below 2²⁴; the
    kernels do arithmetic on floats) with negative entries counted from
    ``bound``."""
    g = ctx.g
    i = idx if idx.dtype == "f32" else g.cast(idx, "f32")
    return g.where(g.lt(i, 0.0), i + float(bound), i)


def _flat_index(ctx: Ctx, node: Node, flat: Node, total: int) -> Node:
    if total >= 1 << 24:
        raise ctx.fail(node, f"{total} elements: flat indices past 2^24 are not exact in f32")
    return ctx.g.cast(ctx.g.reshape(flat, [-1]), "i32")


@rule("gather_elements")
def _gather_elements(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    # scatter-add dy into data's flattened positions Σ coord_k·stride_k,
    # where coord_axis = idx and the other coords are the element's own
    g = ctx.g
    data, idx = node.inputs
    dims = _static_dims(ctx, node, data)
    idims = _static_dims(ctx, node, idx)
    rank = len(dims)
    ax = _axis(node.attrs["axis"], rank)
    strides = [int(np.prod(dims[k + 1 :])) for k in range(rank)]
    flat = _wrap_index(ctx, idx, dims[ax]) * float(strides[ax])
    for k in range(rank):
        if k == ax or idims[k] == 1:
            continue
        shape = [1] * rank
        shape[k] = idims[k]
        coord = np.arange(idims[k], dtype=np.float32).reshape(shape) * strides[k]
        flat = flat + g.constant(coord, dtype="f32")
    total = int(np.prod(dims))
    upd = g.reshape(dy, [-1, 1])
    out = g.scatter_add(upd, _flat_index(ctx, node, flat, total), total)
    return [g.reshape(out, dims), None]


@rule("gather_nd")
def _gather_nd(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    g = ctx.g
    data, idx = node.inputs
    if int(node.attrs["batch_dims"]) != 0:
        raise ctx.fail(node, "gather_nd with batch_dims > 0 has no gradient rule")
    dims = _static_dims(ctx, node, data)
    idims = _static_dims(ctx, node, idx)
    q = idims[-1]
    lead, rest = dims[:q], dims[q:]
    strides = [int(np.prod(lead[k + 1 :])) for k in range(q)]
    flat = None
    for k in range(q):
        col = _wrap_index(ctx, g.narrow(idx, -1, k, 1), lead[k]) * float(strides[k])
        flat = col if flat is None else flat + col
    assert flat is not None
    rest_n = int(np.prod(rest)) if rest else 1
    upd = g.reshape(dy, [-1, rest_n])
    n_lead = int(np.prod(lead))
    out = g.scatter_add(upd, _flat_index(ctx, node, flat, n_lead), n_lead)
    return [g.reshape(out, dims), None]


@rule("scatter_nd", "scatter_elements")
def _scatter(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    # replace-scatter: the overwritten positions of data get no gradient;
    # each update gets dy at the position it was written to
    g = ctx.g
    data, idx, upd = node.inputs
    out: list[Optional[Node]] = [None, None, None]
    axis = int(node.attrs.get("axis") or 0)
    if ctx.needs(0):
        zeros = ctx.zeros(list(upd.shape), dy.dtype)
        if node.op == "scatter_nd":
            out[0] = g.scatter_nd(dy, idx, zeros)
        else:
            out[0] = g.scatter_elements(dy, idx, zeros, axis)
    if ctx.needs(2):
        if node.op == "scatter_nd":
            out[2] = g.gather_nd(dy, idx)
        else:
            out[2] = g.gather_elements(dy, idx, axis)
    return out
