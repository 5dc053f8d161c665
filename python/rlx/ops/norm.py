"""Normalisations: LayerNorm, RMSNorm, GroupNorm, LayerNorm2d, fused residual
norms, adaLN and gated residuals."""

from __future__ import annotations

from typing import Optional

from rlx.node import Node
from rlx.ops._base import GraphBase


class NormOps(GraphBase):
    """Normalisation ops (all over the last axis unless stated)."""

    def layer_norm(
        self, x: Node, gamma: Node, beta: Node, *, eps: float = 1e-5, name: str = ""
    ) -> Node:
        """LayerNorm over the last axis; gamma / beta ``[h]``."""
        return self._add({"op": "layer_norm", "eps": eps}, [x, gamma, beta], name)

    def rms_norm(
        self,
        x: Node,
        gamma: Node,
        beta: Optional[Node] = None,
        *,
        eps: float = 1e-6,
        name: str = "",
    ) -> Node:
        """``x / sqrt(mean(x²) + eps) * gamma (+ beta)`` over the last axis."""
        ins = [x, gamma] + ([beta] if beta is not None else [])
        return self._add({"op": "rms_norm", "eps": eps}, ins, name)

    def group_norm(
        self,
        x: Node,
        gamma: Node,
        beta: Node,
        *,
        num_groups: int,
        eps: float = 1e-5,
        name: str = "",
    ) -> Node:
        """GroupNorm on NCHW ``x``; gamma / beta ``[c]``; ``num_groups`` divides c."""
        op = {"op": "group_norm", "num_groups": num_groups, "eps": eps}
        return self._add(op, [x, gamma, beta], name)

    def layer_norm2d(
        self, x: Node, gamma: Node, beta: Node, *, eps: float = 1e-6, name: str = ""
    ) -> Node:
        """LayerNorm across channels at each position of NCHW ``x``."""
        return self._add({"op": "layer_norm2d", "eps": eps}, [x, gamma, beta], name)

    def residual_layer_norm(
        self,
        x: Node,
        res: Node,
        gamma: Node,
        beta: Node,
        bias: Optional[Node] = None,
        *,
        eps: float = 1e-5,
        name: str = "",
    ) -> Node:
        """``LayerNorm(x + res (+ bias))`` (op ``fused_residual_ln``)."""
        ins = [x, res] + ([bias] if bias is not None else []) + [gamma, beta]
        op = {"op": "fused_residual_ln", "eps": eps, "has_bias": bias is not None}
        return self._add(op, ins, name)

    def residual_rms_norm(
        self,
        x: Node,
        res: Node,
        gamma: Node,
        beta: Optional[Node] = None,
        bias: Optional[Node] = None,
        *,
        eps: float = 1e-6,
        name: str = "",
    ) -> Node:
        """``RmsNorm(x + res (+ bias))`` (op ``fused_residual_rms_norm``)."""
        ins = [x, res] + ([bias] if bias is not None else []) + [gamma]
        ins += [beta] if beta is not None else []
        op = {"op": "fused_residual_rms_norm", "eps": eps, "has_bias": bias is not None}
        return self._add(op, ins, name)

    def ada_layer_norm(
        self,
        x: Node,
        scale: Node,
        shift: Node,
        *,
        eps: float = 1e-6,
        layer_norm: bool = True,
        name: str = "",
    ) -> Node:
        """DiT adaLN ``norm(x)·(1 + scale) + shift`` (RMSNorm when ``layer_norm=False``)."""
        op = {"op": "ada_layer_norm", "eps": eps, "layer_norm": layer_norm}
        return self._add(op, [x, scale, shift], name)

    def gated_residual(self, x: Node, y: Node, gate: Node, *, name: str = "") -> Node:
        """DiT gated residual ``x + gate·y`` (gate broadcast)."""
        return self._add({"op": "gated_residual"}, [x, y, gate], name)
