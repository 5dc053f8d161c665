"""Data-movement thunks: gathers, slices, concat, transpose, scatter,
reverse, nearest upsample and the ONNX indexing family. Values move
bit-exactly (no arithmetic except ``scatter_add``)."""

from __future__ import annotations

import numpy as np

from . import Memory, reference
from ._act import bf16_bits_to_f32, f32_to_bf16_bits
from ._common import DTYPES, F32, I32, fdt, strided_index


def _check_idx(name: str, idx: np.ndarray, bound: int, allow_negative: bool) -> np.ndarray:
    """Validate int32 indices against ``bound``; wrap negatives if allowed."""
    idx = idx.astype(np.int64)
    lo = -bound if allow_negative else 0
    if idx.size and (idx.min() < lo or idx.max() >= bound):
        raise IndexError(f"[{name}] index out of range [{lo}, {bound})")
    return np.where(idx < 0, idx + bound, idx)


@reference("gather")
def gather(t: dict, mem: Memory) -> None:
    """Embedding lookup: ``dst[i, :] = table[idx[i], :]`` with ``trailing``
    elements per row; idx int32 ``[num_idx]``, non-negative (the table's row
    count is not part of the thunk; the view extends to the largest index)."""
    dt, ni, tr = fdt(t), t["num_idx"], t["trailing"]
    idx = mem.view(t["idx"], ni, I32).astype(np.int64)
    if ni and idx.min() < 0:
        raise IndexError("[gather] negative index")
    rows = int(idx.max()) + 1 if ni else 0
    table = mem.view(t["table"], (rows, tr), dt)
    mem.view(t["dst"], (ni, tr), dt)[...] = table[idx]


@reference("gather_axis")
def gather_axis(t: dict, mem: Memory) -> None:
    """``table [outer, axis_dim, trailing]`` → ``dst [outer, num_idx, trailing]``
    (f32) with ``dst[o, i, :] = table[o, idx[i], :]``; idx int32, negative
    values count from the end (ONNX Gather)."""
    o, ad, ni, tr = t["outer"], t["axis_dim"], t["num_idx"], t["trailing"]
    idx = _check_idx("gather_axis", mem.view(t["idx"], ni, I32), ad, True)
    table = mem.view(t["table"], (o, ad, tr), F32)
    mem.view(t["dst"], (o, ni, tr), F32)[...] = table[:, idx, :]


@reference("narrow")
def narrow(t: dict, mem: Memory) -> None:
    """``dst [outer, len] = src [outer, src_axis][:, start:start+len]``."""
    dt, o, sa, st, ln = fdt(t), t["outer"], t["src_axis"], t["start"], t["len"]
    if st + ln > sa:
        raise IndexError(f"[narrow] {st}+{ln} > axis {sa}")
    mem.view(t["dst"], (o, ln), dt)[...] = mem.view(t["src"], (o, sa), dt)[:, st : st + ln]


@reference("split_lastax")
def split_lastax(t: dict, mem: Memory) -> None:
    """Several last-axis narrows of ``src [outer, src_axis]``; ``segments`` are
    ``(dst_offset, start, len)``, each writing a dense ``[outer, len]``."""
    dt, o, sa = fdt(t), t["outer"], t["src_axis"]
    src = mem.view(t["src"], (o, sa), dt).copy()  # segments may alias src
    for dst, st, ln in t["segments"]:
        if st + ln > sa:
            raise IndexError(f"[split_lastax] {st}+{ln} > axis {sa}")
        mem.view(dst, (o, ln), dt)[...] = src[:, st : st + ln]


@reference("copy")
def copy(t: dict, mem: Memory) -> None:
    """Copy ``len`` elements of ``dt``."""
    n, dt = t["len"], fdt(t)
    mem.view(t["dst"], n, dt)[...] = mem.view(t["src"], n, dt).copy()


@reference("concat")
def concat(t: dict, mem: Memory) -> None:
    """Inputs ``(src_offset, axis_len)``, each ``[outer, axis_len, inner]``,
    placed consecutively along the middle axis of ``dst [outer, dst_axis,
    inner]``."""
    dt, o, da, inner = fdt(t), t["outer"], t["dst_axis"], t["inner"]
    parts = [mem.view(off, (o, ln, inner), dt).copy() for off, ln in t["inputs"]]
    if sum(p.shape[1] for p in parts) != da:
        raise ValueError(f"[concat] input axis lengths do not sum to {da}")
    mem.view(t["dst"], (o, da, inner), dt)[...] = np.concatenate(parts, axis=1)


@reference("transpose")
def transpose(t: dict, mem: Memory) -> None:
    """General permute / broadcast (f32): output element at multi-index ``i``
    over ``out_dims`` reads ``src[Σ i_d·in_strides[d]]`` (stride 0 repeats)."""
    idx = strided_index(t["out_dims"], t["in_strides"])
    if idx.size != t["total"]:
        raise ValueError(f"[transpose] out_dims hold {idx.size} elements, total={t['total']}")
    src = mem.view(t["src"], int(idx.max()) + 1 if idx.size else 0, F32)
    mem.view(t["dst"], idx.size, F32)[...] = src[idx]


@reference("scatter_add")
def scatter_add(t: dict, mem: Memory) -> None:
    """``dst = zeros [out_dim, trailing]``; ``dst[indices[u], :] +=
    updates[u, :]`` in update order (f32; indices int32 in ``[0, out_dim)``)."""
    nu, od, tr = t["num_updates"], t["out_dim"], t["trailing"]
    idx = _check_idx("scatter_add", mem.view(t["indices"], nu, I32), od, False)
    acc = np.zeros((od, tr), np.float32)
    np.add.at(acc, idx, mem.view(t["updates"], (nu, tr), F32))
    mem.view(t["dst"], (od, tr), F32)[...] = acc


@reference("reverse")
def reverse(t: dict, mem: Memory) -> None:
    """Flip the axes of ``dims`` whose ``rev_mask`` is true; elements are
    ``elem_bytes`` raw bytes."""
    dims = [int(d) for d in t["dims"]]
    eb = int(t["elem_bytes"])
    n = int(np.prod(dims, dtype=np.int64)) * eb
    src = mem.bytes(t["src"], n).reshape([*dims, eb])
    axes = tuple(i for i, r in enumerate(t["rev_mask"]) if r)
    mem.bytes(t["dst"], n).reshape([*dims, eb])[...] = np.flip(src, axis=axes).copy()


@reference("resize_nearest_2x")
def resize_nearest_2x(t: dict, mem: Memory) -> None:
    """``dst [n, c, 2h, 2w]``, ``dst[.., y, x] = src[.., y//2, x//2]``."""
    dt, n, c, h, w = fdt(t), t["n"], t["c"], t["h"], t["w"]
    src = mem.view(t["src"], (n, c, h, w), dt)
    mem.view(t["dst"], (n, c, 2 * h, 2 * w), dt)[...] = src.repeat(2, axis=2).repeat(2, axis=3)


# ------------------------------------------------------------- ONNX indexing


def _wrap(idx: np.ndarray, bound: np.ndarray | int, what: str) -> np.ndarray:
    idx = idx.astype(np.int64)
    if idx.size and (np.any(idx < -np.asarray(bound)) or np.any(idx >= bound)):
        raise IndexError(f"[cpu_indexing] {what} index out of range")
    return np.where(idx < 0, idx + bound, idx)


_CONVERTS = ("f32", "f16", "bf16")


def _convert_float(x: np.ndarray, src: str, dst: str) -> np.ndarray:
    """ScatterND's converting write: ``x`` (``src`` floats, bf16 as raw
    bits) as ``dst`` floats, rounded once to nearest even (numpy's
    ``astype``; bf16 through its bit pattern)."""
    if src == dst:
        return x
    if src not in _CONVERTS or dst not in _CONVERTS:
        raise ValueError(f"[cpu_indexing] scatter_nd: cannot write {src} updates into {dst} data")
    wide = bf16_bits_to_f32(x) if src == "bf16" else x.astype(np.float32)
    if dst == "bf16":
        return f32_to_bf16_bits(wide)
    with np.errstate(over="ignore"):
        return wide.astype(DTYPES[dst])


@reference("cpu_indexing")
def cpu_indexing(t: dict, mem: Memory) -> None:
    """ONNX ScatterND / ScatterElements / GatherND / GatherElements.

    Fields (rlx's layout of the indexing thunk): ``kind`` one of
    ``"scatter_nd" | "scatter_elements" | "gather_nd" | "gather_elements"``;
    ``data`` / ``indices`` / ``updates`` / ``dst`` offsets; ``data_dims``,
    ``indices_dims`` (updates have indices' dims for ScatterElements and
    ``indices.dims[:-1] + data.dims[q:]`` for ScatterND); ``axis`` (elements
    kinds, negative counts from the end); ``batch_dims`` (GatherND); ``dt``
    the data dtype (rlx DType string, default ``"f32"``); ``upd_dt`` ScatterND's
    updates dtype (default ``dt``; f32 / f16 / bf16 updates into data of another
    of the three are converted on write, rounded to nearest even). Indices are int32;
    negative indices count from the end of their axis (ONNX). Scatters copy
    ``data`` then assign updates in order (later duplicates win); the output
    has data's dims. GatherND writes ``indices.dims[:-1] + data.dims[batch_dims
    + q:]`` (with q = ``indices.dims[-1]``); GatherElements writes indices'
    dims. When ``data == dst`` (a scatter into a State leaf) the scatter
    works in place: only the addressed entries are written.
    """
    kind = t["kind"]
    dt = DTYPES[t.get("dt", "f32")]
    ddims = [int(d) for d in t["data_dims"]]
    idims = [int(d) for d in t["indices_dims"]]
    # data == dst: a scatter into a State leaf, updated in place (only the
    # addressed entries change; every index is checked before any write)
    in_place = t["data"] == t["dst"] and kind.startswith("scatter")
    data = mem.view(t["data"], ddims, dt)
    if not in_place:
        data = data.copy()
    idx = mem.view(t["indices"], idims, I32).astype(np.int64)
    rank = len(ddims)
    if kind in ("scatter_elements", "gather_elements"):
        axis = int(t.get("axis", 0))
        axis = axis + rank if axis < 0 else axis
        idx = _wrap(idx, ddims[axis], kind)
        grids = list(np.indices(idims, sparse=True))
        grids[axis] = idx
        if kind == "gather_elements":
            mem.view(t["dst"], idims, dt)[...] = data[tuple(grids)]
            return
        upd = mem.view(t["updates"], idims, dt)
        coords = np.stack([np.broadcast_to(g, idims) for g in grids], -1).reshape(-1, rank)
        flat = np.ravel_multi_index(tuple(coords.T), ddims) if coords.size else coords[:, 0]
        out = data.reshape(-1)
        for f, u in zip(flat, upd.reshape(-1)):
            out[f] = u
        if not in_place:
            mem.view(t["dst"], ddims, dt)[...] = out.reshape(ddims)
        return
    q = idims[-1]
    if kind == "gather_nd":
        bd = int(t.get("batch_dims", 0))
        if ddims[:bd] != idims[:bd] or bd + q > rank:
            raise ValueError("[cpu_indexing] gather_nd: batch dims / q do not fit data")
        idx = _wrap(idx, np.asarray(ddims[bd : bd + q]), kind)
        bshape = ddims[:bd]
        nb = int(np.prod(bshape, dtype=np.int64))
        d2 = data.reshape([nb, *ddims[bd:]])
        i2 = idx.reshape(nb, -1, q)
        tail = ddims[bd + q :]
        out = np.stack([d2[b][tuple(i2[b].T)] for b in range(nb)]) if nb else np.zeros(0, dt)
        mem.view(t["dst"], [*idims[:-1], *tail], dt)[...] = out.reshape([*idims[:-1], *tail])
        return
    if kind == "scatter_nd":
        if q > rank:
            raise ValueError("[cpu_indexing] scatter_nd: index depth exceeds data rank")
        idx = _wrap(idx, np.asarray(ddims[:q]), kind).reshape(-1, q)
        udims = [*idims[:-1], *ddims[q:]]
        udt = t.get("upd_dt", t.get("dt", "f32"))
        upd = mem.view(t["updates"], udims, DTYPES[udt]).reshape([idx.shape[0], *ddims[q:]])
        upd = _convert_float(upd, udt, t.get("dt", "f32"))
        for r in range(idx.shape[0]):
            data[tuple(idx[r])] = upd[r]
        if not in_place:
            mem.view(t["dst"], ddims, dt)[...] = data
        return
    raise ValueError(f"[cpu_indexing] unknown kind '{kind}'")
