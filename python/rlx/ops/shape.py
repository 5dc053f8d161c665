"""Layout and indexing ops: reshape (one ``-1`` allowed), transpose, expand,
narrow, concat, gathers and scatters, reverse, nearest 2× resize."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Optional, Union

from rlx._types import Dim, ShapeLike, dims_list, dims_str
from rlx.errors import ShapeError
from rlx.node import Node
from rlx.ops._base import GraphBase

DimsArg = Union[Dim, Sequence[Dim]]


def infer_reshape(src: Sequence[Dim], dims: Sequence[Dim]) -> list[Dim]:
    """Resolve one ``-1`` in ``dims`` against ``src`` (symbols cancel by name).

    ``[2, seq, 576]`` → ``(2, -1, 8, 72)`` gives ``[2, seq, 8, 72]``.
    """
    holes = [i for i, d in enumerate(dims) if d == -1]
    bad = [d for d in dims if isinstance(d, int) and d < -1]
    if len(holes) > 1 or bad:
        raise ShapeError(
            f"[reshape] at most one -1 and no other negative dims, got {dims_str(dims)}"
        )
    if not holes:
        return list(dims)

    def factor(ds: Sequence[Dim]) -> tuple[int, Counter[str]]:
        n, syms = 1, Counter[str]()
        for d in ds:
            if isinstance(d, str):
                syms[d] += 1
            elif d != -1:
                n *= d
        return n, syms

    (sn, ss), (dn, ds) = factor(src), factor(dims)
    left = ss - ds
    if ds - ss or len(left) > 1 or sum(left.values()) > 1:
        raise ShapeError(f"[reshape] cannot infer -1 reshaping {dims_str(src)} to {dims_str(dims)}")
    if dn == 0 or sn % dn:
        raise ShapeError(
            f"[reshape] cannot infer -1 reshaping {dims_str(src)} to {dims_str(dims)}: "
            f"{sn} elements do not divide by {dn}"
        )
    fill: Dim
    if left:
        if sn // dn != 1:
            raise ShapeError(
                f"[reshape] -1 would be {sn // dn}·{next(iter(left))} reshaping "
                f"{dims_str(src)} to {dims_str(dims)}; symbolic products are not dims"
            )
        fill = next(iter(left))
    else:
        fill = sn // dn
    out = list(dims)
    out[holes[0]] = fill
    return out


def _flatten_dims(dims: tuple[DimsArg, ...]) -> list[Dim]:
    if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
        return list(dims[0])
    out: list[Dim] = []
    for d in dims:
        if not isinstance(d, (int, str)):
            raise TypeError(f"[reshape] give dims spread out or as one list, got {dims!r}")
        out.append(d)
    return out


class ShapeOps(GraphBase):
    """Layout and indexing ops."""

    def reshape(self, x: Node, *dims: DimsArg, name: str = "") -> Node:
        """Same elements, new dims: ``g.reshape(x, 2, -1)`` or ``g.reshape(x, [2, -1])``.

        One dim may be ``-1``; it is inferred from x's dims (symbols cancel by name).
        """
        self._check("reshape", x)
        want = infer_reshape(x.shape, dims_list(_flatten_dims(dims)) if dims else [])
        return self._add({"op": "reshape", "dims": want}, [x], name)

    def transpose(self, x: Node, perm: Optional[Sequence[int]] = None, *, name: str = "") -> Node:
        """Permute axes: output axis i is input axis ``perm[i]`` (default: reversed)."""
        self._check("transpose", x)
        p = list(range(x.ndim))[::-1] if perm is None else [int(a) for a in perm]
        return self._add({"op": "transpose", "perm": p}, [x], name)

    def permute(self, x: Node, *perm: int, name: str = "") -> Node:
        """``g.permute(x, 0, 2, 1)`` — :meth:`transpose` with the perm spread out."""
        return self.transpose(x, list(perm), name=name)

    def expand(self, x: Node, dims: ShapeLike, *, name: str = "") -> Node:
        """Broadcast to ``dims`` (numpy ``broadcast_to``)."""
        return self._add({"op": "expand", "dims": dims_list(dims)}, [x], name)

    def narrow(self, x: Node, axis: int, start: int, length: int, *, name: str = "") -> Node:
        """``x[.., start:start+length, ..]`` along ``axis`` (negative axes count from the end)."""
        return self._add({"op": "narrow", "axis": axis, "start": start, "len": length}, [x], name)

    def concat(self, xs: Sequence[Node], axis: int = 0, *, name: str = "") -> Node:
        """Join along ``axis``; operands agree on every other dim."""
        return self._add({"op": "concat", "axis": axis}, list(xs), name)

    def gather(self, table: Node, idx: Node, *, name: str = "") -> Node:
        """Embedding lookup along axis 0 → ``idx.shape + table.shape[1:]``."""
        return self._add({"op": "gather"}, [table, idx], name)

    def gather_axis(self, x: Node, idx: Node, axis: int = 0, *, name: str = "") -> Node:
        """``index_select``: ``axis`` of x becomes ``len(idx)`` (idx rank 1, int)."""
        return self._add({"op": "gather_axis", "axis": axis}, [x, idx], name)

    def scatter_add(self, updates: Node, idx: Node, out_dim: int, *, name: str = "") -> Node:
        """``out[idx[i]] += updates[i]`` into zeros → ``[out_dim, *updates.shape[1:]]``."""
        return self._add({"op": "scatter_add", "out_dim": out_dim}, [updates, idx], name)

    def reverse(self, x: Node, axes: Union[int, Sequence[int]] = -1, *, name: str = "") -> Node:
        """Flip along ``axes``."""
        ax = [axes] if isinstance(axes, int) else list(axes)
        return self._add({"op": "reverse", "axes": ax}, [x], name)

    def resize_nearest2x(self, x: Node, *, name: str = "") -> Node:
        """Nearest-neighbour 2× upsample of NCHW → ``[n, c, 2h, 2w]``."""
        return self._add({"op": "resize_nearest2x"}, [x], name)

    def scatter_nd(self, data: Node, indices: Node, updates: Node, *, name: str = "") -> Node:
        """ONNX ScatterND → data's shape and dtype. ``updates`` have data's
        dtype, or another of f32 / f16 / bf16 when data is one of them: they
        are converted on write, rounding to nearest even (an f32 row into an
        f16 KV cache needs no cast)."""
        return self._add({"op": "scatter_nd"}, [data, indices, updates], name)

    def scatter_elements(
        self, data: Node, indices: Node, updates: Node, axis: int = 0, *, name: str = ""
    ) -> Node:
        """ONNX ScatterElements (replace) → data's shape."""
        return self._add({"op": "scatter_elements", "axis": axis}, [data, indices, updates], name)

    def gather_nd(self, data: Node, indices: Node, batch_dims: int = 0, *, name: str = "") -> Node:
        """ONNX GatherND (``indices [.., q]``)."""
        return self._add({"op": "gather_nd", "batch_dims": batch_dims}, [data, indices], name)

    def gather_elements(self, data: Node, indices: Node, axis: int = 0, *, name: str = "") -> Node:
        """ONNX GatherElements → indices' dims, data's dtype."""
        return self._add({"op": "gather_elements", "axis": axis}, [data, indices], name)

    # ------------------------------------------------------------ sugar
    def unsqueeze(self, x: Node, axis: int, *, name: str = "") -> Node:
        """Insert a size-1 axis at ``axis`` (a reshape)."""
        self._check("reshape", x)
        dims = list(x.shape)
        a = axis if axis >= 0 else axis + len(dims) + 1
        if not 0 <= a <= len(dims):
            raise ShapeError(f"[reshape] axis {axis} out of range for rank {len(dims)}")
        dims.insert(a, 1)
        return self._add({"op": "reshape", "dims": dims}, [x], name)

    def squeeze(self, x: Node, axis: int, *, name: str = "") -> Node:
        """Drop the size-1 axis ``axis`` (a reshape)."""
        self._check("reshape", x)
        dims = list(x.shape)
        a = axis if axis >= 0 else axis + len(dims)
        if not 0 <= a < len(dims):
            raise ShapeError(f"[reshape] axis {axis} out of range for rank {len(dims)}")
        if dims[a] != 1:
            raise ShapeError(
                f"[reshape] cannot squeeze axis {axis} of size {dims[a]} in {dims_str(dims)}"
            )
        del dims[a]
        return self._add({"op": "reshape", "dims": dims}, [x], name)
