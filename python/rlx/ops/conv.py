"""Convolution and pooling (NCHW, PyTorch weight layouts)."""

from __future__ import annotations

from typing import Optional

from rlx._types import Pair, pair
from rlx.node import Node
from rlx.ops._base import GraphBase


class ConvOps(GraphBase):
    """2-D convolution, transposed convolution, pooling and im2col."""

    def conv2d(
        self,
        x: Node,
        w: Node,
        bias: Optional[Node] = None,
        *,
        stride: Pair = 1,
        padding: Pair = 0,
        dilation: Pair = 1,
        groups: int = 1,
        name: str = "",
    ) -> Node:
        """x ``[n, c_in, h, w]`` ⊛ w ``[c_out, c_in/groups, kh, kw]`` (+ bias ``[c_out]``)."""
        op = {
            "op": "conv2d",
            "stride": pair(stride, "stride"),
            "padding": pair(padding, "padding"),
            "dilation": pair(dilation, "dilation"),
            "groups": groups,
        }
        return self._add(op, [x, w] + ([bias] if bias is not None else []), name)

    def conv_transpose2d(
        self,
        x: Node,
        w: Node,
        bias: Optional[Node] = None,
        *,
        stride: Pair = 1,
        padding: Pair = 0,
        dilation: Pair = 1,
        output_padding: Pair = 0,
        groups: int = 1,
        name: str = "",
    ) -> Node:
        """Transposed conv: x ``[n, c_in, h, w]``, w ``[c_in, c_out/groups, kh, kw]``."""
        op = {
            "op": "conv_transpose2d",
            "stride": pair(stride, "stride"),
            "padding": pair(padding, "padding"),
            "dilation": pair(dilation, "dilation"),
            "output_padding": pair(output_padding, "output_padding"),
            "groups": groups,
        }
        return self._add(op, [x, w] + ([bias] if bias is not None else []), name)

    def pool2d(
        self,
        x: Node,
        kind: str,
        kernel: Pair,
        *,
        stride: Optional[Pair] = None,
        padding: Pair = 0,
        name: str = "",
    ) -> Node:
        """Max (``kind="max"``) or average (``"mean"``) pooling; stride defaults to the kernel."""
        op = {
            "op": "pool2d",
            "kind": kind,
            "kernel": pair(kernel, "kernel"),
            "stride": pair(kernel if stride is None else stride, "stride"),
            "padding": pair(padding, "padding"),
        }
        return self._add(op, [x], name)

    def max_pool2d(
        self,
        x: Node,
        kernel: Pair,
        *,
        stride: Optional[Pair] = None,
        padding: Pair = 0,
        name: str = "",
    ) -> Node:
        """Max pooling on NCHW."""
        return self.pool2d(x, "max", kernel, stride=stride, padding=padding, name=name)

    def avg_pool2d(
        self,
        x: Node,
        kernel: Pair,
        *,
        stride: Optional[Pair] = None,
        padding: Pair = 0,
        name: str = "",
    ) -> Node:
        """Average pooling on NCHW (padding excluded from the count)."""
        return self.pool2d(x, "mean", kernel, stride=stride, padding=padding, name=name)

    def im2col(
        self,
        x: Node,
        kernel: Pair,
        *,
        stride: Pair = 1,
        padding: Pair = 0,
        dilation: Pair = 1,
        name: str = "",
    ) -> Node:
        """``[n, c, h, w]`` → ``[n, c·kh·kw, h_out·w_out]``."""
        op = {
            "op": "im2_col",
            "kernel": pair(kernel, "kernel"),
            "stride": pair(stride, "stride"),
            "padding": pair(padding, "padding"),
            "dilation": pair(dilation, "dilation"),
        }
        return self._add(op, [x], name)
