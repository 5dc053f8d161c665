"""Gated DeltaNet token mixer (``gdn``: Qwen3-Next / Qwen3.5 ``linear_attention``
layers), registered into :data:`rlx.models.mixers.MIXERS`.

Formulas (transformers ``modeling_qwen3_next.py``, ``Qwen3NextGatedDeltaNet``):

* projections: Qwen3-Next ``in_proj_qkvz`` / ``in_proj_ba`` interleave per key
  head ``[q, k, v, z]`` / ``[b, a]`` (``fix_query_key_value_ordering``): the
  weight rows are reordered once at load (:meth:`Weights.linear_rows`) into
  ``[all q, all k, all v, all z]`` / ``[all b, all a]``; Qwen3.5 stores
  ``in_proj_qkv``, ``in_proj_z``, ``in_proj_b``, ``in_proj_a`` separately;
* ``qkv = silu(conv(concat(q, k, v)))`` (causal depthwise, no bias; conv
  ring state ``conv{i}``, :func:`rlx.models.mixers.causal_conv`);
* ``q, k`` L2-normalised per head (``x·rsqrt(Σx² + 1e-6)``), ``q`` scaled by
  ``1/sqrt(head_k_dim)``, both repeated to the value heads
  (``repeat_interleave``); the L2 norm is an RMSNorm:
  ``x·rsqrt(Σx² + ε) = rmsnorm(x, ε/d)/sqrt(d)``, the scales folded into gamma;
* ``β = sigmoid(b)``, ``g = −exp(A_log)·softplus(a + dt_bias)`` (the log decay;
  GGUF files store ``A = −exp(A_log)``);
* GGUF (llama.cpp's converter): Qwen3-Next's ``in_proj_qkvz`` is split into
  ``attn_qkv`` / ``attn_gate`` (rows regrouped), ``in_proj_ba`` kept as
  ``ssm_ba``; Qwen3.5 with fewer key than value heads has its value heads
  reordered to the tiled order (``Config.gdn_v_tiled``): ``q`` / ``k`` are then
  repeated whole instead of interleaved;
* the gated delta rule, state ``gdn{i} [1, v_heads, d, d]`` updated in place
  (:meth:`rlx.graph.Graph.gated_delta_net`; needs ``head_k_dim == head_v_dim``);
* ``y = rmsnorm(o)·w · silu(z)`` per value head (norm before gate: the shape
  ``fuse_gdn_gated_norm`` fuses), ``out_proj``.

The rule folds every row of a call into the state; on a bucket's padded rows
``β`` and ``g`` are zeroed (:func:`rlx.models.mixers.pad_stop`), which leaves
the state as it is (``S ← e⁰·(S − 0) + 0``).
"""

from __future__ import annotations

import math

import numpy as np

from rlx.errors import UnsupportedOpError
from rlx.graph import Graph
from rlx.models.base import Config
from rlx.models.mixers import MIXERS, LayerCtx, MixerKind, causal_conv, pad_stop, scan_feeds
from rlx.models.mixers_ssm import softplus, ssm_a
from rlx.node import Node


def _grouped(parts: list[int], groups: int) -> np.ndarray:
    """Row order that turns ``groups`` blocks of ``[p0, p1, …]`` rows (sizes
    ``parts``) into ``[all p0, all p1, …]``."""
    block = sum(parts)
    starts = np.cumsum([0, *parts[:-1]])
    return np.concatenate(
        [np.arange(gi * block + st, gi * block + st + n) for st, n in zip(starts, parts)
         for gi in range(groups)]
    )  # fmt: skip


def _heads_norm(g: Graph, x: Node, heads: int, d: int, scale: float) -> Node:
    """``scale · x·rsqrt(Σx² + 1e-6)`` per head of ``x [1, S, heads·d]``."""
    s = x.shape[1]
    gamma = g.constant(np.full(d, scale / math.sqrt(d), np.float32))
    y = g.rms_norm(g.reshape(x, [1, s, heads, d]), gamma, eps=1e-6 / d)
    return g.reshape(y, [1, s, heads * d])


def _repeat_heads(g: Graph, x: Node, heads: int, rep: int, d: int, tiled: bool = False) -> Node:
    """``repeat_interleave(rep)`` over the heads of ``x [1, S, heads·d]``
    (``tiled``: ``repeat`` — all heads, ``rep`` times)."""
    if rep == 1:
        return x
    s = x.shape[1]
    if tiled:
        e = g.expand(g.reshape(x, [1, s, 1, heads, d]), [1, s, rep, heads, d])
    else:
        e = g.expand(g.reshape(x, [1, s, heads, 1, d]), [1, s, heads, rep, d])
    return g.reshape(e, [1, s, heads * rep * d])


def gdn(ctx: LayerCtx, i: int, x: Node) -> Node:
    """Gated DeltaNet mixer of layer ``i`` (names ``blk.{i}.ssm_*`` /
    ``blk.{i}.attn_qkv`` …, see the module doc)."""
    g, w, cfg, s = ctx.g, ctx.w, ctx.cfg, ctx.s
    hk, hv, dk, dv = cfg.gdn_k_heads, cfg.gdn_v_heads, cfg.gdn_k_dim, cfg.gdn_v_dim
    if dk != dv:
        raise UnsupportedOpError(
            f"[{cfg.arch}] linear_key_head_dim {dk} != linear_value_head_dim {dv}: rlx's "
            "gated_delta_net keeps a square state per head"
        )
    if hk <= 0 or hv % hk:
        raise UnsupportedOpError(
            f"[{cfg.arch}] linear_num_value_heads {hv} is not a multiple of "
            f"linear_num_key_heads {hk}"
        )
    rep, kd, vd = hv // hk, hk * dk, hv * dv
    p = f"blk.{i}."
    if w.has(p + "ssm_in.weight"):  # Qwen3-Next: interleaved per key head
        qkvz = w.linear_rows(g, x, p + "ssm_in.weight", _grouped([dk, dk, rep * dv, rep * dv], hk))
        qkv, z = g.narrow(qkvz, 2, 0, 2 * kd + vd), g.narrow(qkvz, 2, 2 * kd + vd, vd)
    else:  # Qwen3.5, and Qwen3-Next GGUF (the converter splits in_proj_qkvz)
        qkv = w.linear(g, x, p + "attn_qkv.weight")
        z = w.linear(g, x, p + "attn_gate.weight")
    if w.has(p + "ssm_ba.weight"):  # Qwen3-Next: [b, a] interleaved per key head
        ba = w.linear_rows(g, x, p + "ssm_ba.weight", _grouped([rep, rep], hk))
        b, a = g.narrow(ba, 2, 0, hv), g.narrow(ba, 2, hv, hv)
    else:
        b = w.linear(g, x, p + "ssm_beta.weight")
        a = w.linear(g, x, p + "ssm_alpha.weight")
    qkv = causal_conv(ctx, i, qkv, p + "ssm_conv1d.weight", None, silu=True)
    q = _heads_norm(g, g.narrow(qkv, 2, 0, kd), hk, dk, 1.0 / math.sqrt(dk))
    k = _heads_norm(g, g.narrow(qkv, 2, kd, kd), hk, dk, 1.0)
    v = g.narrow(qkv, 2, 2 * kd, vd)
    tiled = cfg.gdn_v_tiled
    q, k = _repeat_heads(g, q, hk, rep, dk, tiled), _repeat_heads(g, k, hk, rep, dk, tiled)
    beta = pad_stop(ctx, g.sigmoid(b))
    decay = g.mul(ssm_a(g, w, p), softplus(g, g.add(a, w.vector(g, p + "ssm_dt.bias"))))
    decay = pad_stop(ctx, decay)
    o = g.gated_delta_net(q, k, v, decay, beta, g.state(f"gdn{i}", [1, hv, dv, dv]), heads=hv)
    on = g.rms_norm(g.reshape(o, [1, s, hv, dv]), w.vector(g, p + "ssm_norm.weight"), eps=cfg.eps)
    y = g.mul(on, g.silu(g.reshape(z, [1, s, hv, dv])))
    # keep the rule's output alive until the gated norm's exists (as conv_keep
    # in causal_conv; one element of each): else the planner may put the gated
    # norm's output over it, and fuse_gdn_gated_norm must refuse (measured:
    # 2/3 layers fused at S=1); not to the end, where every layer's were alive
    one = [g.narrow(g.narrow(g.reshape(t, [s, vd]), 0, 0, 1), 1, 0, 1) for t in (o, y)]
    ctx.outputs.append(g.add(one[0], one[1], name=f"gdn_keep{i}"))
    return w.linear(g, g.reshape(y, [1, s, vd]), p + "ssm_out.weight")


def _gdn_states(cfg: Config, i: int) -> list[str]:
    return [f"conv{i}", f"gdn{i}"]


MIXERS["gdn"] = MixerKind("gdn", gdn, _gdn_states, scan_feeds)
