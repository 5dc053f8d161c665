"""Attention and positional encodings: SDPA (GQA, masks, sliding window,
softcap), the fused attention block, RoPE and SAM2's axial 2-D RoPE."""

from __future__ import annotations

from typing import Any, Optional

from rlx.errors import GraphError
from rlx.node import Node
from rlx.ops._base import GraphBase

MASKS = ("none", "causal", "custom", "bias", "sliding_window")


def mask_kind(op: str, mask: Optional[str], window: int, mask_input: Optional[Node]) -> str:
    """Normalise ``mask`` (None → ``"none"``; causal with a window → sliding window)."""
    m = "none" if mask is None else mask.lower()
    if m not in MASKS:
        raise GraphError(f"[{op}] unknown mask {mask!r}; expected one of {', '.join(MASKS)}")
    if m == "causal" and window > 0:
        m = "sliding_window"
    if mask_input is not None and m not in ("custom", "bias"):
        raise GraphError(f"[{op}] mask_input needs mask='custom' or mask='bias', got {m!r}")
    if mask_input is None and m in ("custom", "bias"):
        raise GraphError(f"[{op}] mask={m!r} needs mask_input")
    return m


class AttentionOps(GraphBase):
    """Attention and rotary embeddings."""

    def _head_dim(self, q: Node, heads: int, layout: str, op: str) -> int:
        if layout == "bhsd":
            return self._static(q, -1, op, "head_dim")
        hidden = self._static(q, -1, op, "head_dim")
        if heads <= 0 or hidden % heads:
            raise GraphError(f"[{op}] hidden size {hidden} is not divisible by heads={heads}")
        return hidden // heads

    def attention(
        self,
        q: Node,
        k: Node,
        v: Node,
        *,
        heads: int,
        kv_heads: Optional[int] = None,
        head_dim: Optional[int] = None,
        mask: Optional[str] = "causal",
        window: int = 0,
        layout: str = "bshd",
        score_scale: Optional[float] = None,
        softcap: Optional[float] = None,
        mask_input: Optional[Node] = None,
        kv_len: Optional[Node] = None,
        name: str = "",
    ) -> Node:
        """Scaled dot-product attention; result has q's shape.

        BSHD: q ``[b, s, heads·d]``, k/v ``[b, kv_s, kv_heads·d]``; BHSD:
        q ``[b, heads, s, d]``. ``kv_heads`` defaults to ``heads`` (GQA when
        smaller), ``head_dim`` to q's hidden / heads. ``mask`` is ``"causal"``,
        ``None``/``"none"``, ``"sliding_window"`` (``window`` > 0 with causal
        implies it), or ``"custom"`` / ``"bias"`` with ``mask_input``.

        ``kv_len`` (an int32 ``[1]`` node, e.g. an input) attends only the
        first ``kv_len`` keys of k/v at run time — a KV cache of fixed
        capacity ``kv_s`` filled up to ``kv_len`` rows; query ``i`` then sits
        at absolute position ``kv_len − s + i`` for the causal and sliding
        masks. ``1 ≤ kv_len ≤ kv_s`` is checked at run time (KernelError).
        An int32 ``[b]`` ``kv_len`` gives one length per batch entry (several
        sequences of one cache decoded in one step).
        """
        if head_dim is None:
            head_dim = self._head_dim(q, heads, layout, "attention")
        op: dict[str, Any] = {
            "op": "attention",
            "heads": heads,
            "kv_heads": heads if kv_heads is None else kv_heads,
            "head_dim": head_dim,
            "mask": mask_kind("attention", mask, window, mask_input),
            "window": window,
            "layout": layout,
            "score_scale": score_scale,
            "softcap": softcap,
            "dynamic_kv_len": kv_len is not None,
        }
        ins = [q, k, v] + ([mask_input] if mask_input is not None else [])
        if kv_len is not None:
            ins.append(kv_len)
        return self._add(op, ins, name)

    def fused_attention_block(
        self,
        x: Node,
        w_qkv: Node,
        w_out: Node,
        *,
        heads: int,
        head_dim: Optional[int] = None,
        cos: Optional[Node] = None,
        sin: Optional[Node] = None,
        mask: Optional[str] = "causal",
        mask_input: Optional[Node] = None,
        name: str = "",
    ) -> Node:
        """QKV projection + NeoX RoPE (when cos/sin given) + SDPA + output projection.

        x ``[b, s, hidden]``, w_qkv ``[hidden, 3·heads·d]``, w_out ``[heads·d, hidden]``
        → ``[b, s, hidden]``.
        """
        if (cos is None) != (sin is None):
            raise GraphError("[fused_attention_block] give both cos and sin, or neither")
        if head_dim is None:
            head_dim = self._static(w_out, 0, "fused_attention_block", "head_dim") // max(heads, 1)
        op = {
            "op": "fused_attention_block",
            "heads": heads,
            "head_dim": head_dim,
            "mask": mask_kind("fused_attention_block", mask, 0, mask_input),
            "rope": cos is not None,
        }
        ins = [x, w_qkv, w_out]
        if cos is not None and sin is not None:
            ins += [cos, sin]
        if mask_input is not None:
            ins.append(mask_input)
        return self._add(op, ins, name)

    def rope(
        self,
        x: Node,
        cos: Node,
        sin: Node,
        *,
        head_dim: int,
        n_rot: Optional[int] = None,
        kind: str = "neox",
        per_token: bool = False,
        name: str = "",
    ) -> Node:
        """Rotary embedding on ``[b, s, heads·head_dim]``; cos/sin ``[s, n_rot/2]``
        (``[b·s, n_rot/2]`` when ``per_token``). ``n_rot`` defaults to ``head_dim``;
        ``kind`` is ``"neox"`` (rotate-half) or ``"interleaved"``."""
        op = {
            "op": "rope",
            "kind": kind,
            "head_dim": head_dim,
            "n_rot": head_dim if n_rot is None else n_rot,
            "per_token": per_token,
        }
        return self._add(op, [x, cos, sin], name)

    def axial_rope2d(
        self,
        x: Node,
        *,
        end_x: int,
        end_y: int,
        head_dim: int,
        num_heads: int,
        theta: float = 10000.0,
        repeat_factor: int = 1,
        name: str = "",
    ) -> Node:
        """SAM2 axial 2-D RoPE over an ``end_x × end_y`` grid on ``[b, s, hidden]``."""
        op = {
            "op": "axial_rope2d",
            "end_x": end_x,
            "end_y": end_y,
            "head_dim": head_dim,
            "num_heads": num_heads,
            "theta": theta,
            "repeat_factor": repeat_factor,
        }
        return self._add(op, [x], name)
