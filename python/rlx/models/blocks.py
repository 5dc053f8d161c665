"""The decoder graph every architecture shares (:func:`build_decoder`): a
stack of pre-norm layers, each ``norm → mixer → [post norm] → +residual →
norm → gated MLP → [post norm] → +residual`` (the MLP is the mixture of
experts of :mod:`rlx.models.moe` on the layers ``cfg.moe`` names), where the
mixer is the one of the layer's kind (``cfg.mixer(i)``: attention, short conv, … from
:mod:`rlx.models.mixers`).

One graph runs ``S`` new tokens against ``C`` cached ones:

* inputs ``x`` f32 ``[1, S, hidden]`` (token embeddings, already scaled),
  ``cos_<j>`` / ``sin_<j>`` ``[S, rope_dims/2]`` (the RoPE rows of the new
  tokens' positions, one pair per RoPE group ``cfg.rope_groups()``), ``mask_<w>`` f32
  ``[1, S, C + S]`` (non-zero = visible, one per distinct sliding window; the
  caller encodes causality, padding and windows) and, unless ``all_rows``,
  ``row`` i32 ``[1]`` (which row's logits to compute: the vocab matmul is the
  most expensive one for Gemma's 262k vocabulary);
* states ``k<i>`` / ``v<i>`` ``[C, kv_dim]`` per layer (when ``C > 0``):
  the cache, written by the caller; f32, or f16 with ``kv_dtype="f16"``
  (the new rows are cast to f16 — round to nearest even — before the
  concat / scatter, and attention reads the half cache under f32 queries:
  keys and values widened on load, f32 scores, softmax and sums);
* outputs ``logits`` (``[1, vocab]`` or ``[S, vocab]``) and the new rows'
  post-RoPE keys / values ``knew<i>`` / ``vnew<i>`` ``[1, S, kv_dim]``,
  which the caller stores in the cache.

Keys seen by attention are the ``C`` cache slots followed by the ``S`` new
rows (a concat); the mask hides unused slots.

``inplace=True`` builds the in-place cache instead (needs the executor's
in-place ``scatter_nd`` on a State leaf and ``attention(kv_len=)``): inputs
``slots`` i32 ``[S, 1]`` (the cache slot of each new row) and ``kv_len`` i32
``[1]`` (cached + new rows) replace the masks; each layer scatters its new
keys / values into states ``k<i>`` / ``v<i>`` ``[C, kv_dim]`` and attends to
slots ``0..kv_len`` causally (sliding windows through the mask kind); the only
output is ``logits``. Non-attention mixers add their own inputs and states
(the short conv: ``conv_slots``, ``conv_rows``, state ``conv<i>``).

``batch=N`` (in-place, attention-only models) builds the batched decode
graph: the ``S ≤ N`` rows of ``x`` are the next tokens of ``S`` different
sequences; states ``k<i>`` / ``v<i>`` are ``[N·C, kv_dim]`` (sequence ``b``
owns slots ``b·C .. b·C + C``), ``slots`` ``[S, 1]`` holds ``b·C + position``
of each row, ``kv_len`` is i32 ``[S]`` (each sequence's own length), the RoPE
rows are each row's own position, and the logits are ``[S, vocab]``
(``all_rows``). The weights are read once per step for all ``S`` sequences.
"""

from __future__ import annotations

import numpy as np

from rlx.errors import UnsupportedOpError
from rlx.graph import Graph
from rlx.models import mixers_gdn, mixers_ssm  # noqa: F401  (register their mixers)
from rlx.models.base import ArchSpec, Config, Weights
from rlx.models.mixers import MIXERS, LayerCtx
from rlx.models.moe import moe_ffn
from rlx.node import Node

#: most new tokens one graph takes (the largest prompt bucket); sizes the
#: short-conv state rings, so every graph of a model declares the same states
MAX_TOKENS = 256


def _scaled(g: Graph, x: Node, m: float) -> Node:
    """``x·m`` (``x`` itself when ``m`` is 1)."""
    return x if m == 1.0 else g.mul(x, g.constant(np.float32(m)))


def build_decoder(
    cfg: Config,
    spec: ArchSpec,
    w: Weights,
    s: int,
    c: int,
    all_rows: bool = False,
    inplace: bool = False,
    max_tokens: int = MAX_TOKENS,
    batch: int = 0,
    kv_dtype: str = "f32",
) -> Graph:
    """The decoder graph for ``s`` new tokens after ``c`` cache slots; with
    ``batch`` (in-place, attention layers only) the batched decode graph:
    ``s`` sequences of a ``batch``-sequence cache, one token each (see the
    module doc). ``kv_dtype`` ``"f16"`` keeps the KV cache states in half
    precision (families that build their own graph keep f32)."""
    own = spec.build_graph(cfg, w, s, c, all_rows, inplace, max_tokens)
    if own is not None:
        if batch:
            raise UnsupportedOpError(
                f"[{cfg.arch}] batched decode: this family builds its own graph"
            )
        return own
    if s > max_tokens:
        raise UnsupportedOpError(f"[{cfg.arch}] {s} new tokens in one graph (max {max_tokens})")
    if batch:
        kinds = {cfg.mixer(i) for i in range(cfg.n_layers)}
        if not inplace or kinds != {"attention"} or s > batch:
            raise UnsupportedOpError(
                f"[{cfg.arch}] batched decode needs the in-place cache and attention layers "
                f"only (layers: {', '.join(sorted(kinds))}) and at most {batch} rows"
            )
    tag = f"_b{batch}" if batch else ""
    g = Graph(f"{cfg.arch}_s{s}_c{c}{'_inplace' if inplace else ''}{tag}")
    h = g.input("x", [1, s, cfg.hidden])
    ctx = LayerCtx(g, w, cfg, spec, s, c, inplace, max_tokens, batch, kv_dtype)
    for i in range(cfg.n_layers):
        kind = MIXERS.get(cfg.mixer(i))
        if kind is None:
            raise UnsupportedOpError(
                f"[{cfg.arch}] layer {i}: mixer {cfg.mixer(i)!r} is not implemented "
                f"(rlx: {', '.join(sorted(MIXERS))})"
            )
        p = f"blk.{i}."
        x = g.rms_norm(h, w.vector(g, p + "attn_norm.weight"), eps=cfg.eps)
        a = kind.build(ctx, i, x)
        if spec.post_norms:
            a = g.rms_norm(a, w.vector(g, p + "post_attention_norm.weight"), eps=cfg.eps)
        h = g.add(h, _scaled(g, a, spec.residual_scale))
        if not spec.mlp:
            continue
        x = g.rms_norm(h, w.vector(g, p + "ffn_norm.weight"), eps=cfg.eps)
        if cfg.moe is not None and cfg.moe.is_moe(i):
            f = moe_ffn(g, w, x, p, cfg.moe)
        else:
            if spec.mlp_gate_up:
                gu = w.linear(g, x, p + "ffn_gate_up.weight")
                gate, up = g.narrow(gu, 2, 0, cfg.ffn), g.narrow(gu, 2, cfg.ffn, cfg.ffn)
            else:
                gate = w.linear(g, x, p + "ffn_gate.weight")
                up = w.linear(g, x, p + "ffn_up.weight")
            gate = _scaled(g, gate, spec.mlp_mults[0])
            act = g.gelu_approx(gate) if spec.act == "gelu_approx" else g.silu(gate)
            f = _scaled(g, w.linear(g, g.mul(act, up), p + "ffn_down.weight"), spec.mlp_mults[1])
        if spec.post_norms:
            f = g.rms_norm(f, w.vector(g, p + "post_ffw_norm.weight"), eps=cfg.eps)
        h = g.add(h, _scaled(g, f, spec.residual_scale))
    rows = g.reshape(h, [s, cfg.hidden])
    if not all_rows:
        rows = g.gather(rows, g.input("row", [1], "i32"))
    x = g.rms_norm(rows, w.vector(g, "output_norm.weight"), eps=cfg.eps)
    out_name = "token_embd.weight" if cfg.tied_output else "output.weight"
    out = _scaled(g, w.linear(g, x, out_name), spec.logit_scale)
    logits = g.apply({"op": "reshape", "dims": [rows.shape[0], cfg.vocab]}, out, name="logits")
    g.outputs(logits, *ctx.outputs)
    return g
