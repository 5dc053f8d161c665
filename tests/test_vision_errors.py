"""Unsupported convolution / pooling configurations are rejected when the graph
is built (rlx-ir shape inference), with an error rooted at ``rlx.RlxError``
whose message starts with the op in brackets and names the parameter."""

from __future__ import annotations

import pytest
import rlx


def _x(g: rlx.Graph, c: int = 5, h: int = 7, w: int = 9) -> rlx.Node:
    return g.input("x", [1, c, h, w], "f32")


@pytest.mark.parametrize(
    "wshape,kw,match",
    [
        # 5 input channels in 2 groups
        ([4, 2, 3, 3], {"groups": 2}, r"\[conv2d\] input channels 5 are not divisible by groups 2"),
        # 6 output channels in 5 groups (the 5 input channels divide)
        ([6, 1, 3, 3], {"groups": 5}, r"\[conv2d\] output channels 6 must be a positive multiple"),
        # a 9-tall kernel on 7 unpadded rows
        ([4, 5, 9, 3], {}, r"\[conv2d\] output height: kernel span 9 .* padded size 7"),
        # dilation 5: a 3-tall kernel spans 11 rows
        ([4, 5, 3, 3], {"dilation": 5}, r"\[conv2d\] output height: kernel span 11"),
        ([4, 5, 3, 3], {"stride": 0}, r"\[conv2d\] .*stride"),
        # weight channels disagree with the input's
        ([4, 3, 3, 3], {}, r"\[conv2d\] weight .* must be \[c_out, 5, kh, kw\]"),
    ],
)
def test_bad_conv2d_names_op_and_parameter(wshape: list[int], kw: dict, match: str) -> None:
    g = rlx.Graph("bad")
    x = _x(g)
    with pytest.raises(rlx.RlxError, match=match):
        g.conv2d(x, g.param("w", wshape, "f32"), **kw)


def test_bad_pool_and_conv_transpose() -> None:
    g = rlx.Graph("bad")
    x = _x(g)
    with pytest.raises(rlx.RlxError, match=r"\[pool2d\] padding \[2, 2\] must be at most half"):
        g.max_pool2d(x, 3, stride=2, padding=2)
    with pytest.raises(rlx.RlxError, match=r"\[pool2d\] output height: kernel span 8"):
        g.avg_pool2d(x, 8, stride=1)
    bad_groups = r"\[conv_transpose2d\] input channels 5 are not divisible by groups 2"
    with pytest.raises(rlx.RlxError, match=bad_groups):
        g.conv_transpose2d(x, g.param("wt", [5, 2, 3, 3], "f32"), groups=2)
