"""The decoder graph every architecture shares (:func:`build_decoder`).

One graph runs ``S`` new tokens against ``C`` cached ones:

* inputs ``x`` f32 ``[1, S, hidden]`` (token embeddings, already scaled),
  ``cos_<j>`` / ``sin_<j>`` ``[S, rope_dims/2]`` (the RoPE rows of the new
  tokens' positions, one pair per distinct RoPE base), ``mask_<w>`` f32
  ``[1, S, C + S]`` (non-zero = visible, one per distinct sliding window; the
  caller encodes causality, padding and windows) and, unless ``all_rows``,
  ``row`` i32 ``[1]`` (which row's logits to compute: the vocab matmul is the
  most expensive one for Gemma's 262k vocabulary);
* states ``k<i>`` / ``v<i>`` f32 ``[C, kv_dim]`` per layer (when ``C > 0``):
  the cache, written by the caller;
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
output is ``logits``.
"""

from __future__ import annotations

from rlx.errors import UnsupportedOpError
from rlx.graph import Graph
from rlx.models.base import ArchSpec, Config, Weights
from rlx.node import Node


def _head_norm(g: Graph, w: Weights, x: Node, name: str, heads: int, cfg: Config) -> Node:
    """RMSNorm over each head of ``x [1, S, heads·head_dim]``."""
    s = x.shape[1]
    xh = g.reshape(x, [1, s, heads, cfg.head_dim])
    y = g.rms_norm(xh, w.vector(g, name), eps=cfg.eps)
    return g.reshape(y, [1, s, heads * cfg.head_dim])


def _rope(g: Graph, x: Node, cos: Node, sin: Node, cfg: Config) -> Node:
    return g.rope(x, cos, sin, head_dim=cfg.head_dim, n_rot=cfg.rope_dims, kind=cfg.rope_kind)


def _with_cache(g: Graph, new: Node, name: str, c: int, cfg: Config) -> Node:
    if c == 0:
        return new
    cache = g.reshape(g.state(name, [c, cfg.kv_dim]), [1, c, cfg.kv_dim])
    return g.concat([cache, new], axis=1)


def _scatter_cache(g: Graph, new: Node, name: str, slots: Node, c: int, cfg: Config) -> Node:
    """Write ``new [1, S, kv_dim]`` into state ``name [C, kv_dim]`` at ``slots``
    (in place) and return the whole cache as ``[1, C, kv_dim]``."""
    s = new.shape[1]
    upd = g.reshape(new, [s, cfg.kv_dim])
    full = g.scatter_nd(g.state(name, [c, cfg.kv_dim]), slots, upd)
    return g.reshape(full, [1, c, cfg.kv_dim])


def build_decoder(
    cfg: Config,
    spec: ArchSpec,
    w: Weights,
    s: int,
    c: int,
    all_rows: bool = False,
    inplace: bool = False,
) -> Graph:
    """The decoder graph for ``s`` new tokens after ``c`` cache slots."""
    g = Graph(f"{cfg.arch}_s{s}_c{c}{'_inplace' if inplace else ''}")
    h = g.input("x", [1, s, cfg.hidden])
    bases = sorted(set(cfg.rope_bases))
    half = cfg.rope_dims // 2
    ropes = {b: (g.input(f"cos_{j}", [s, half]), g.input(f"sin_{j}", [s, half]))
             for j, b in enumerate(bases)}  # fmt: skip
    kv_out: list[Node] = []
    if inplace:
        slots = g.input("slots", [s, 1], "i32")
        kv_len = g.input("kv_len", [1], "i32")
    else:
        masks = {win: g.input(f"mask_{win}", [1, s, c + s]) for win in sorted(set(cfg.windows))}
    for i in range(cfg.n_layers):
        p = f"blk.{i}."
        x = g.rms_norm(h, w.vector(g, p + "attn_norm.weight"), eps=cfg.eps)
        q = w.linear(g, x, p + "attn_q.weight")
        k = w.linear(g, x, p + "attn_k.weight")
        v = w.linear(g, x, p + "attn_v.weight")
        if spec.qkv_bias:
            q = g.add(q, w.vector(g, p + "attn_q.bias"))
            k = g.add(k, w.vector(g, p + "attn_k.bias"))
            v = g.add(v, w.vector(g, p + "attn_v.bias"))
        if spec.qk_norm:
            q = _head_norm(g, w, q, p + "attn_q_norm.weight", cfg.heads, cfg)
            k = _head_norm(g, w, k, p + "attn_k_norm.weight", cfg.kv_heads, cfg)
        cos, sin = ropes[cfg.rope_bases[i]]
        q = _rope(g, q, cos, sin, cfg)
        k = g.apply({"op": "reshape", "dims": [1, s, cfg.kv_dim]}, _rope(g, k, cos, sin, cfg),
                    name=f"knew{i}")  # fmt: skip
        v = g.apply({"op": "reshape", "dims": [1, s, cfg.kv_dim]}, v, name=f"vnew{i}")
        kv_out += [k, v]
        if inplace:
            win = cfg.windows[i]
            if win == 1:
                raise UnsupportedOpError(
                    f"[{cfg.arch}] layer {i}: a sliding window of 1 key has no in-place "
                    "mask (the kernel's window keeps q − j <= w); load with inplace=False"
                )
            a = g.attention(
                q,
                _scatter_cache(g, k, f"k{i}", slots, c, cfg),
                _scatter_cache(g, v, f"v{i}", slots, c, cfg),
                heads=cfg.heads,
                kv_heads=cfg.kv_heads,
                head_dim=cfg.head_dim,
                mask="causal",
                # rlx's window keeps q − j <= window; HF / llama.cpp keep q − j < W
                window=max(win - 1, 0) if win else 0,
                score_scale=cfg.score_scale,
                kv_len=kv_len,  # type: ignore[call-arg]
            )
        else:
            a = g.attention(
                q,
                _with_cache(g, k, f"k{i}", c, cfg),
                _with_cache(g, v, f"v{i}", c, cfg),
                heads=cfg.heads,
                kv_heads=cfg.kv_heads,
                head_dim=cfg.head_dim,
                mask="custom",
                mask_input=masks[cfg.windows[i]],
                score_scale=cfg.score_scale,
            )
        a = w.linear(g, a, p + "attn_output.weight")
        if spec.post_norms:
            a = g.rms_norm(a, w.vector(g, p + "post_attention_norm.weight"), eps=cfg.eps)
        h = g.add(h, a)
        x = g.rms_norm(h, w.vector(g, p + "ffn_norm.weight"), eps=cfg.eps)
        gate = w.linear(g, x, p + "ffn_gate.weight")
        up = w.linear(g, x, p + "ffn_up.weight")
        act = g.gelu_approx(gate) if spec.act == "gelu_approx" else g.silu(gate)
        f = w.linear(g, g.mul(act, up), p + "ffn_down.weight")
        if spec.post_norms:
            f = g.rms_norm(f, w.vector(g, p + "post_ffw_norm.weight"), eps=cfg.eps)
        h = g.add(h, f)
    rows = g.reshape(h, [s, cfg.hidden])
    if not all_rows:
        rows = g.gather(rows, g.input("row", [1], "i32"))
    x = g.rms_norm(rows, w.vector(g, "output_norm.weight"), eps=cfg.eps)
    out_name = "token_embd.weight" if cfg.tied_output else "output.weight"
    logits = g.apply({"op": "reshape", "dims": [rows.shape[0], cfg.vocab]},
                     w.linear(g, x, out_name), name="logits")  # fmt: skip
    g.outputs(logits, *([] if inplace else kv_out))
    return g
