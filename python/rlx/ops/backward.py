"""Gradient ops. Packed results (adaLN, gated residual, splats) are flat
concatenations, as the op docs in ``rlx_ir`` describe."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Optional

from rlx._types import Pair, pair
from rlx.node import Node
from rlx.ops._base import GraphBase
from rlx.ops.attention import mask_kind
from rlx.ops.misc import SplatConfig
from rlx.ops.sequence import body_json

if TYPE_CHECKING:
    from rlx.graph import Graph


class BackwardOps(GraphBase):
    """Backward (gradient) ops."""

    def softmax_cross_entropy_backward(
        self, logits: Node, labels: Node, d_loss: Node, *, name: str = ""
    ) -> Node:
        """d loss / d logits for integer labels → ``[n, c]``."""
        return self._add({"op": "softmax_cross_entropy_backward"}, [logits, labels, d_loss], name)

    def attention_backward(
        self,
        q: Node,
        k: Node,
        v: Node,
        dy: Node,
        *,
        wrt: str,
        heads: int,
        head_dim: Optional[int] = None,
        mask: Optional[str] = "causal",
        window: int = 0,
        layout: str = "bshd",
        mask_input: Optional[Node] = None,
        name: str = "",
    ) -> Node:
        """Attention gradient w.r.t. ``wrt`` (``"q"``, ``"k"`` or ``"v"``) → that operand's
        shape."""
        if head_dim is None:
            if layout == "bhsd":
                head_dim = self._static(q, -1, "attention_backward", "head_dim")
            else:
                head_dim = self._static(q, -1, "attention_backward", "head_dim") // max(heads, 1)
        op = {
            "op": "attention_backward",
            "wrt": wrt,
            "heads": heads,
            "head_dim": head_dim,
            "mask": mask_kind("attention_backward", mask, window, mask_input),
            "window": window,
            "layout": layout,
        }
        ins = [q, k, v, dy] + ([mask_input] if mask_input is not None else [])
        return self._add(op, ins, name)

    def rms_norm_backward(
        self,
        x: Node,
        gamma: Node,
        beta: Node,
        dy: Node,
        *,
        wrt: str = "input",
        eps: float = 1e-6,
        name: str = "",
    ) -> Node:
        """RMSNorm gradient w.r.t. ``"input"`` (x's shape), ``"gamma"`` or ``"beta"`` (``[h]``)."""
        op = {"op": "rms_norm_backward", "eps": eps, "wrt": wrt}
        return self._add(op, [x, gamma, beta, dy], name)

    def rope_backward(
        self,
        dy: Node,
        cos: Node,
        sin: Node,
        *,
        head_dim: int,
        n_rot: Optional[int] = None,
        kind: str = "neox",
        name: str = "",
    ) -> Node:
        """RoPE gradient (the inverse rotation) → dy's shape."""
        op = {
            "op": "rope_backward",
            "kind": kind,
            "head_dim": head_dim,
            "n_rot": head_dim if n_rot is None else n_rot,
        }
        return self._add(op, [dy, cos, sin], name)

    def cumsum_backward(
        self, dy: Node, axis: int = -1, *, exclusive: bool = False, name: str = ""
    ) -> Node:
        """Cumsum gradient (reverse cumsum) → dy's shape."""
        op = {"op": "cumsum_backward", "axis": axis, "exclusive": exclusive}
        return self._add(op, [dy], name)

    def gather_backward(
        self, dy: Node, idx: Node, *, axis: int, axis_dim: int, name: str = ""
    ) -> Node:
        """GatherAxis gradient: dy's dims with ``axis`` set to ``axis_dim``."""
        op = {"op": "gather_backward", "axis": axis, "axis_dim": axis_dim}
        return self._add(op, [dy, idx], name)

    def max_pool2d_backward(
        self,
        x: Node,
        dy: Node,
        kernel: Pair,
        *,
        stride: Optional[Pair] = None,
        padding: Pair = 0,
        name: str = "",
    ) -> Node:
        """Max-pool gradient → x's shape."""
        op = {
            "op": "max_pool2d_backward",
            "kernel": pair(kernel, "kernel"),
            "stride": pair(kernel if stride is None else stride, "stride"),
            "padding": pair(padding, "padding"),
        }
        return self._add(op, [x, dy], name)

    def conv2d_backward_input(
        self,
        dy: Node,
        w: Node,
        *,
        input_hw: Pair,
        stride: Pair = 1,
        padding: Pair = 0,
        dilation: Pair = 1,
        groups: int = 1,
        name: str = "",
    ) -> Node:
        """Conv2d gradient w.r.t. the input → ``[n, c_in, *input_hw]``."""
        op = {
            "op": "conv2d_backward_input",
            "stride": pair(stride, "stride"),
            "padding": pair(padding, "padding"),
            "dilation": pair(dilation, "dilation"),
            "groups": groups,
            "input_hw": pair(input_hw, "input_hw"),
        }
        return self._add(op, [dy, w], name)

    def conv2d_backward_weight(
        self,
        x: Node,
        dy: Node,
        *,
        kernel: Pair,
        stride: Pair = 1,
        padding: Pair = 0,
        dilation: Pair = 1,
        groups: int = 1,
        name: str = "",
    ) -> Node:
        """Conv2d gradient w.r.t. the weight → ``[c_out, c_in/groups, kh, kw]``."""
        op = {
            "op": "conv2d_backward_weight",
            "stride": pair(stride, "stride"),
            "padding": pair(padding, "padding"),
            "dilation": pair(dilation, "dilation"),
            "groups": groups,
            "kernel": pair(kernel, "kernel"),
        }
        return self._add(op, [x, dy], name)

    def ada_layer_norm_backward(
        self,
        x: Node,
        scale: Node,
        dy: Node,
        *,
        eps: float = 1e-6,
        layer_norm: bool = True,
        name: str = "",
    ) -> Node:
        """adaLN gradient, packed ``[dx ∥ dscale ∥ dshift]`` flat."""
        op = {"op": "ada_layer_norm_backward", "eps": eps, "layer_norm": layer_norm}
        return self._add(op, [x, scale, dy], name)

    def gated_residual_backward(self, y: Node, gate: Node, dy: Node, *, name: str = "") -> Node:
        """Gated-residual gradient, packed ``[dx ∥ dy ∥ dgate]`` flat."""
        return self._add({"op": "gated_residual_backward"}, [y, gate, dy], name)

    def log_mel_backward(
        self, spec: Node, filters: Node, dy: Node, *, n_fft: int, name: str = ""
    ) -> Node:
        """Log-mel gradient w.r.t. the spectrum → spec's shape."""
        return self._add({"op": "log_mel_backward", "n_fft": n_fft}, [spec, filters, dy], name)

    def gaussian_splat_render_backward(
        self,
        positions: Node,
        scales: Node,
        rotations: Node,
        opacities: Node,
        colors: Node,
        sh: Node,
        camera: Node,
        d_loss: Node,
        *,
        cfg: SplatConfig,
        loss_grad_clip: float = 1e3,
        sh_band: int = 0,
        max_anisotropy: float = 1e3,
        name: str = "",
    ) -> Node:
        """Gradient of ``Σ d_loss ⊙ gaussian_splat_render(...)`` → ``[g, 14 + 3k]``, one
        row per splat: position (3), scale (3), rotation (4), opacity (1), colour
        (3, zero when ``sh`` is used), SH coefficients (``3k``, coefficient-major).
        ``d_loss`` is clipped to ``±loss_grad_clip``; SH bands above ``sh_band``
        get a zero gradient (frozen); ``max_anisotropy`` is accepted and unused.
        Tile assignment, culling, the stopping rule and the clamps are treated
        as constants."""
        op = {
            "op": "gaussian_splat_render_backward",
            "cfg": cfg.to_json(),
            "loss_grad_clip": loss_grad_clip,
            "sh_band": sh_band,
            "max_anisotropy": max_anisotropy,
        }
        ins = [positions, scales, rotations, opacities, colors, sh, camera, d_loss]
        return self._add(op, ins, name)

    def spd_backward(self, kind: str, *operands: Node, eps: float = 1e-4, name: str = "") -> Node:
        """SPD-op gradient: the forward's operands then ``dy`` → the first operand's shape."""
        return self._add({"op": "spd_backward", "kind": kind, "eps": eps}, list(operands), name)

    def scan_backward(
        self,
        body: Graph,
        carry_init: Sequence[Node],
        xs: Sequence[Node],
        dy: Node,
        *,
        length: Optional[int] = None,
        wrt_xs: bool = False,
        name: str = "",
    ) -> Node:
        """Scan gradient w.r.t. the initial carries (or ``xs`` when ``wrt_xs``), packed flat."""
        if length is None:
            length = self._static(xs[0], 0, "scan_backward", "length") if xs else 0
        op = {
            "op": "scan_backward",
            "body": body_json(body),
            "num_carry": len(carry_init),
            "length": length,
            "wrt_xs": wrt_xs,
        }
        return self._add(op, [*carry_init, *xs, dy], name)
