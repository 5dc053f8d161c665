"""Matmul family: dense, bias+activation, quantised, grouped (MoE) and
scaled low-precision matmuls."""

from __future__ import annotations

import re
from typing import Any, Optional, Union

from rlx.errors import GraphError
from rlx.node import Node, Operand
from rlx.ops._base import GraphBase

#: A weight format: a GGUF type name (``"q4_k"``, ``"Q8_0"``), ``"fp8_e4m3"``,
#: ``"fp8_e5m2"``, ``"nvfp4"``, ``"int8/32"`` / ``"int4/32a"`` (block size,
#: ``a`` = asymmetric), or the serde dict (``{"gguf": "q4_k"}``).
SchemeLike = Union[str, dict[str, Any]]
#: A scale layout: ``"per_tensor"``, ``"per_row"``, an int block size, or
#: ``"block:32"``, or the serde dict (``{"block": {"size": 32}}``).
LayoutLike = Union[str, int, dict[str, Any]]

_UNIT_SCHEMES = ("fp8_e4m3", "fp8_e5m2", "nvfp4")


def quant_scheme(s: SchemeLike) -> Any:
    """Normalise a weight format to the serde form of ``rlx_ir::QuantScheme``."""
    if isinstance(s, dict):
        return s
    t = s.strip().lower()
    if t in _UNIT_SCHEMES:
        return t
    m = re.fullmatch(r"(int8|int4)/(\d+)(a?)", t)
    if m:
        return {m.group(1): {"block_size": int(m.group(2)), "asymmetric": bool(m.group(3))}}
    if t in ("int8", "int4"):
        raise GraphError(f"[quant] {t} needs a block size: '{t}/32' or '{t}/32a'")
    return {"gguf": t}


def scale_layout(layout: LayoutLike) -> Any:
    """Normalise a scale layout to the serde form of ``rlx_ir::ScaleLayout``."""
    if isinstance(layout, dict):
        return layout
    if isinstance(layout, int) and not isinstance(layout, bool):
        return {"block": {"size": layout}}
    if isinstance(layout, str):
        m = re.fullmatch(r"block[:/]?(\d+)", layout.strip().lower())
        if m:
            return {"block": {"size": int(m.group(1))}}
        return layout.strip().lower()
    raise GraphError(f"[scaled] bad scale layout {layout!r}")


class MatMulOps(GraphBase):
    """Dense, fused, quantised, grouped and scaled matmuls."""

    def matmul(self, a: Operand, b: Operand, *, name: str = "") -> Node:
        """numpy ``a @ b`` (rank >= 2 with batch broadcasting; rank-1 rhs is a vector)."""
        na, nb = self._operands("mat_mul", a, b)
        return self._add({"op": "mat_mul"}, [na, nb], name)

    def matmul_bias_act(
        self,
        a: Node,
        w: Node,
        bias: Node,
        *,
        act: Optional[str] = None,
        name: str = "",
    ) -> Node:
        """``act(a @ w + bias)``: a ``[.., k]``, w ``[k, n]``, bias ``[n]``."""
        return self._add({"op": "fused_mat_mul_bias_act", "act": act}, [a, w, bias], name)

    def dequant_matmul(
        self,
        x: Node,
        w_q: Node,
        *aux: Node,
        scheme: SchemeLike,
        n: Optional[int] = None,
        k: Optional[int] = None,
        name: str = "",
    ) -> Node:
        """``x @ dequant(w_q)ᵀ`` → f32 ``[.., n]``.

        ``w_q`` is u8 ``[n, row_bytes]``; ``aux`` are the scheme's scales / zero
        points. ``n`` defaults to ``w_q``'s rows, ``k`` to ``x``'s last dim.
        """
        if n is None:
            n = self._static(w_q, 0, "dequant_mat_mul", "n")
        if k is None:
            k = self._static(x, -1, "dequant_mat_mul", "k")
        op = {"op": "dequant_mat_mul", "scheme": quant_scheme(scheme), "n": n, "k": k}
        return self._add(op, [x, w_q, *aux], name)

    def dequant_matmul_t(
        self,
        dy: Node,
        w_q: Node,
        *,
        scheme: SchemeLike,
        k: int,
        n: Optional[int] = None,
        name: str = "",
    ) -> Node:
        """``dy @ dequant(w_q)`` → f32 ``[.., k]``: the transposed product of
        :meth:`dequant_matmul` (its input gradient), computed from the packed
        GGUF blocks without a dense copy of the weight.

        ``w_q`` is u8 ``[n, row_bytes(k)]`` (GGUF block formats only); ``n``
        defaults to ``w_q``'s rows.
        """
        if n is None:
            n = self._static(w_q, 0, "dequant_mat_mul_t", "n")
        op = {"op": "dequant_mat_mul_t", "scheme": quant_scheme(scheme), "n": n, "k": k}
        return self._add(op, [dy, w_q], name)

    def grouped_matmul(self, x: Node, w: Node, expert_idx: Node, *, name: str = "") -> Node:
        """MoE matmul: row i of x ``[m, k]`` times ``w[expert_idx[i]]`` (w ``[e, k, n]``) →
        ``[m, n]``."""
        return self._add({"op": "grouped_mat_mul"}, [x, w, expert_idx], name)

    def dequant_grouped_matmul(
        self,
        x: Node,
        w_q: Node,
        expert_idx: Node,
        *,
        scheme: SchemeLike,
        num_experts: Optional[int] = None,
        n: Optional[int] = None,
        k: Optional[int] = None,
        name: str = "",
    ) -> Node:
        """Grouped matmul on packed GGUF experts ``w_q`` u8 ``[experts, n, row_bytes]`` → f32
        ``[m, n]``."""
        op_name = "dequant_grouped_mat_mul"
        if num_experts is None:
            num_experts = self._static(w_q, 0, op_name, "num_experts")
        if n is None:
            n = self._static(w_q, 1, op_name, "n")
        if k is None:
            k = self._static(x, -1, op_name, "k")
        op = {
            "op": op_name,
            "scheme": quant_scheme(scheme),
            "num_experts": num_experts,
            "n": n,
            "k": k,
        }
        return self._add(op, [x, w_q, expert_idx], name)

    def scaled_matmul(
        self,
        lhs: Node,
        rhs: Node,
        lhs_scale: Node,
        rhs_scale: Node,
        bias: Optional[Node] = None,
        *,
        lhs_fmt: str = "fp8_e4m3",
        rhs_fmt: str = "fp8_e4m3",
        layout: LayoutLike = "per_tensor",
        name: str = "",
    ) -> Node:
        """Low-precision TN GEMM ``(lhs·s_l) @ (rhs·s_r)ᵀ (+ bias)``: u8 ``[m, k]``, ``[n, k]``
        → f32 ``[m, n]``."""
        op = {
            "op": "scaled_mat_mul",
            "lhs_fmt": lhs_fmt,
            "rhs_fmt": rhs_fmt,
            "layout": scale_layout(layout),
        }
        ins = [lhs, rhs, lhs_scale, rhs_scale] + ([bias] if bias is not None else [])
        return self._add(op, ins, name)

    def scaled_quantize(
        self,
        x: Node,
        scale: Node,
        *,
        fmt: str = "fp8_e4m3",
        layout: LayoutLike = "per_tensor",
        name: str = "",
    ) -> Node:
        """f32 ``[r, c]`` → u8 codes ``round_to_fmt(x / scale)``."""
        op = {"op": "scaled_quantize", "fmt": fmt, "layout": scale_layout(layout)}
        return self._add(op, [x, scale], name)

    def scaled_dequantize(
        self,
        codes: Node,
        scale: Node,
        *,
        fmt: str = "fp8_e4m3",
        layout: LayoutLike = "per_tensor",
        name: str = "",
    ) -> Node:
        """u8 codes ``[r, c]`` → f32 ``decode(codes) * scale``."""
        op = {"op": "scaled_dequantize", "fmt": fmt, "layout": scale_layout(layout)}
        return self._add(op, [codes, scale], name)

    def scaled_quant_scale(
        self,
        x: Node,
        *,
        fmt: str = "fp8_e4m3",
        layout: LayoutLike = "per_tensor",
        name: str = "",
    ) -> Node:
        """Scales mapping each group's ``max|x|`` to the format's max → f32
        ``layout.scale_dims(r, c)``."""
        op = {"op": "scaled_quant_scale", "fmt": fmt, "layout": scale_layout(layout)}
        return self._add(op, [x], name)
