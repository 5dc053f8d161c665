"""The token mixers every decoder builder shares, one per layer kind:
``attention`` (GQA with optional Q/K/V biases, per-head Q/K RMSNorm, RoPE,
sliding windows, KV cache) and ``short_conv`` (LFM2's gated causal depthwise
convolution). The next families (GDN, Mamba, Mamba-2) add theirs to
:data:`MIXERS`; :func:`rlx.models.blocks.build_decoder` calls the mixer of
each layer's kind and :class:`rlx.models.decoder.DecoderModel` asks the
mixers present for their run-time inputs (:attr:`MixerKind.feeds`) and the
states a reset must zero (:attr:`MixerKind.recurrent`).

All state lives in graph States shared by every compiled graph of a model
(see /work/notes/models-design.md and DESIGN.md): ``k{i}`` / ``v{i}`` for
attention (f32, or f16 with ``LayerCtx.kv_dtype = "f16"``: the scatter
rounds the new f32 rows to f16 as it stores them and attention widens the
cache on load), ``conv{i}`` for the short conv. An in-place ``scatter_nd`` on a
State leaf must be the leaf's only consumer (the compiler refuses other
readers), so a mixer reads its state *through* the scatter's result.

Short conv state: a ring of ``R = max_tokens + L - 1`` rows plus one zero
row (index ``R``) per layer. A graph of ``S`` new tokens at positions
``n..n+S-1`` scatters its ``B·x`` rows into ring slots ``(n + j) mod R``
(input ``conv_slots``), then gathers positions ``n-L+1 .. n+S-1`` from the
updated ring (input ``conv_rows``; positions before 0 read the zero row) and
convolves them (transpose → depthwise conv2d → transpose: the shape
``fuse_depthwise_conv1d_bsc`` turns into one thunk). Padded rows (a prompt
shorter than its bucket) land after the real ones; the next call overwrites
their slots before anything reads them, and ``R >= S + L - 1`` keeps the
window of a call intact while its own rows are written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from rlx.errors import UnsupportedOpError
from rlx.graph import Graph
from rlx.models.base import ArchSpec, Config, Weights
from rlx.node import Node


class LayerCtx:
    """What a mixer needs while one graph is built: the graph, weights,
    config, block spec, ``s`` new tokens, ``c`` cache slots, the cache mode,
    run-time inputs created once per graph, extra outputs."""

    def __init__(
        self, g: Graph, w: Weights, cfg: Config, spec: ArchSpec, s: int, c: int,
        inplace: bool, max_tokens: int, batch: int = 0, kv_dtype: str = "f32",
    ) -> None:  # fmt: skip
        self.g, self.w, self.cfg, self.spec = g, w, cfg, spec
        self.s, self.c, self.inplace, self.max_tokens = s, c, inplace, max_tokens
        #: batched decode (0: off): the ``s`` rows are ``s`` sequences, one
        #: token each, over a cache of ``batch`` sequences × ``c`` slots
        self.batch = batch
        #: element type of the KV cache states (``"f32"`` or ``"f16"``)
        self.kv_dtype = kv_dtype
        self._inputs: dict[str, Node] = {}
        #: outputs besides the logits (the copy-mode KV rows)
        self.outputs: list[Node] = []

    def input(self, name: str, dims: list[int], dtype: str = "f32") -> Node:
        """Run-time input ``name`` (created on first use)."""
        node = self._inputs.get(name)
        if node is None:
            node = self._inputs[name] = self.g.input(name, dims, dtype)
        return node

    def rope(self, i: int) -> tuple[Node, Node]:
        """``cos_j`` / ``sin_j`` ``[S, rope_dims/2]`` of layer ``i``'s RoPE group."""
        j = self.cfg.rope_groups().index(self.cfg.rope_key(i))
        half = self.cfg.rope_dims // 2
        return self.input(f"cos_{j}", [self.s, half]), self.input(f"sin_{j}", [self.s, half])


@dataclass(frozen=True)
class MixerKind:
    """One kind of token mixer (see the module doc)."""

    name: str
    #: ``(ctx, layer, normed x [1, S, hidden]) → [1, S, hidden]``
    build: Callable[[LayerCtx, int, Node], Node]
    #: ``(cfg, layer) →`` names of states :meth:`DecoderModel.reset` zeroes
    recurrent: Callable[[Config, int], list[str]]
    #: ``(cfg, n cached, n new, S, max_tokens) →`` run-time inputs this kind reads
    feeds: Callable[[Config, int, int, int, int], dict[str, np.ndarray]]
    #: False: the runtime never pads a prompt to a bucket for this kind
    pads_ok: bool = True
    #: whether the copy (non-in-place) cache mode can run it
    copy_mode: bool = False


# ------------------------------------------------------------- attention
def head_norm(g: Graph, w: Weights, x: Node, name: str, heads: int, cfg: Config) -> Node:
    """RMSNorm over each head of ``x [1, S, heads·head_dim]``."""
    s = x.shape[1]
    xh = g.reshape(x, [1, s, heads, cfg.head_dim])
    y = g.rms_norm(xh, w.vector(g, name), eps=cfg.eps)
    return g.reshape(y, [1, s, heads * cfg.head_dim])


def _with_cache(g: Graph, new: Node, name: str, c: int, cfg: Config, kv_dtype: str) -> Node:
    """``[cache state ; new rows]`` along the token axis (the copy-out
    cache: nothing is written to the state here). The new f32 rows are cast
    to ``kv_dtype`` (f16: rounded to nearest even, as numpy's
    ``astype(float16)``) so that the concat has one element type and they
    are attended as they will be stored."""
    if kv_dtype != "f32":
        new = g.cast(new, kv_dtype)
    if c == 0:
        return new
    cache = g.reshape(g.state(name, [c, cfg.kv_dim], kv_dtype), [1, c, cfg.kv_dim])
    return g.concat([cache, new], axis=1)


def _scatter_cache(g: Graph, new: Node, name: str, slots: Node, c: int, cfg: Config,
                   kv_dtype: str) -> Node:  # fmt: skip
    """Write ``new [1, S, kv_dim]`` into state ``name [C, kv_dim]`` (of
    ``kv_dtype``) at ``slots`` (in place) and return the whole cache as
    ``[1, C, kv_dim]``. The f32 rows convert on write into an f16 cache
    (ScatterND rounds to nearest even: no cast node, no extra thunk)."""
    s = new.shape[1]
    upd = g.reshape(new, [s, cfg.kv_dim])
    full = g.scatter_nd(g.state(name, [c, cfg.kv_dim], kv_dtype), slots, upd)
    return g.reshape(full, [1, c, cfg.kv_dim])


def attention(ctx: LayerCtx, i: int, x: Node) -> Node:
    """GQA self-attention of layer ``i`` (names ``blk.{i}.attn_*``)."""
    g, w, cfg, spec, s, c = ctx.g, ctx.w, ctx.cfg, ctx.spec, ctx.s, ctx.c
    p = f"blk.{i}."
    gate = None
    if spec.attn_gate:  # rows per head: query, then gate → all queries, all gates
        hd, nh = cfg.head_dim, cfg.heads
        perm = (np.arange(nh)[None, :, None] * 2 * hd + np.arange(2)[:, None, None] * hd
                + np.arange(hd)[None, None, :]).reshape(-1)  # fmt: skip
        qg = w.linear_rows(g, x, p + "attn_q.weight", perm)
        q, gate = g.narrow(qg, 2, 0, cfg.q_dim), g.narrow(qg, 2, cfg.q_dim, cfg.q_dim)
    else:
        q = w.linear(g, x, p + "attn_q.weight")
    k = w.linear(g, x, p + "attn_k.weight")
    v = w.linear(g, x, p + "attn_v.weight")
    if spec.qkv_bias:
        q = g.add(q, w.vector(g, p + "attn_q.bias"))
        k = g.add(k, w.vector(g, p + "attn_k.bias"))
        v = g.add(v, w.vector(g, p + "attn_v.bias"))
    if spec.qk_norm:
        q = head_norm(g, w, q, p + "attn_q_norm.weight", cfg.heads, cfg)
        k = head_norm(g, w, k, p + "attn_k_norm.weight", cfg.kv_heads, cfg)
    elif spec.qk_norm_full:
        q = g.rms_norm(q, w.vector(g, p + "attn_q_norm.weight"), eps=cfg.eps)
        k = g.rms_norm(k, w.vector(g, p + "attn_k_norm.weight"), eps=cfg.eps)
    cos, sin = ctx.rope(i) if spec.rope else (None, None)

    def rope(t: Node) -> Node:
        if cos is None:
            return t
        return g.rope(t, cos, sin, head_dim=cfg.head_dim, n_rot=cfg.rope_dims, kind=cfg.rope_kind)

    q = rope(q)
    k = g.apply({"op": "reshape", "dims": [1, s, cfg.kv_dim]}, rope(k), name=f"knew{i}")
    v = g.apply({"op": "reshape", "dims": [1, s, cfg.kv_dim]}, v, name=f"vnew{i}")
    win = cfg.windows[i]
    if ctx.inplace:
        if win == 1:
            raise UnsupportedOpError(
                f"[{cfg.arch}] layer {i}: a sliding window of 1 key has no in-place "
                "mask (the kernel's window keeps q − j <= w); load with inplace=False"
            )
        slots = ctx.input("slots", [s, 1], "i32")
        if ctx.batch:
            a = _batched_attention(ctx, i, q, k, v, slots, win)
            if gate is not None:
                a = g.mul(a, g.sigmoid(gate))
            return w.linear(g, a, p + "attn_output.weight")
        a = g.attention(
            q,
            _scatter_cache(g, k, f"k{i}", slots, c, cfg, ctx.kv_dtype),
            _scatter_cache(g, v, f"v{i}", slots, c, cfg, ctx.kv_dtype),
            heads=cfg.heads,
            kv_heads=cfg.kv_heads,
            head_dim=cfg.head_dim,
            mask="causal",
            # rlx's window keeps q − j <= window; HF / llama.cpp keep q − j < W
            window=max(win - 1, 0) if win else 0,
            score_scale=cfg.score_scale,
            kv_len=ctx.input("kv_len", [1], "i32"),  # type: ignore[call-arg]
        )
    else:
        ctx.outputs += [k, v]
        a = g.attention(
            q,
            _with_cache(g, k, f"k{i}", c, cfg, ctx.kv_dtype),
            _with_cache(g, v, f"v{i}", c, cfg, ctx.kv_dtype),
            heads=cfg.heads,
            kv_heads=cfg.kv_heads,
            head_dim=cfg.head_dim,
            mask="custom",
            mask_input=ctx.input(f"mask_{win}", [1, s, c + s]),
            score_scale=cfg.score_scale,
        )
    if gate is not None:
        a = g.mul(a, g.sigmoid(gate))
    return w.linear(g, a, p + "attn_output.weight")


def _batched_attention(ctx: LayerCtx, i: int, q: Node, k: Node, v: Node, slots: Node,
                       win: int) -> Node:  # fmt: skip
    """Batched decode: row ``b`` of ``q / k / v [1, B, ·]`` is the next token
    of sequence ``b``, whose cache is slots ``b·C .. b·C + C`` of states
    ``k{i} / v{i} [batch·C, kv_dim]``. The new rows are scattered at
    ``slots`` (``b·C + position``), then each sequence attends its own
    ``C`` slots up to its own length (``kv_len`` i32 ``[B]``: one per
    sequence), so every row equals that sequence decoded alone."""
    g, cfg, b, c = ctx.g, ctx.cfg, ctx.s, ctx.c
    kv_len = ctx.input("kv_len", [b], "i32")

    def cache(new: Node, name: str) -> Node:
        upd = g.reshape(new, [b, cfg.kv_dim])  # converted on write (f16 cache)
        full = g.scatter_nd(g.state(name, [ctx.batch * c, cfg.kv_dim], ctx.kv_dtype), slots, upd)
        if b < ctx.batch:  # the first B sequences (a leading-axis view)
            full = g.narrow(full, 0, 0, b * c)
        return g.reshape(full, [b, c, cfg.kv_dim])

    a = g.attention(
        g.reshape(q, [b, 1, cfg.q_dim]),
        cache(k, f"k{i}"),
        cache(v, f"v{i}"),
        heads=cfg.heads,
        kv_heads=cfg.kv_heads,
        head_dim=cfg.head_dim,
        mask="causal",
        window=max(win - 1, 0) if win else 0,
        score_scale=cfg.score_scale,
        kv_len=kv_len,  # type: ignore[call-arg]
    )
    return g.reshape(a, [1, b, cfg.q_dim])


def _no_feeds(cfg: Config, n: int, n_new: int, s: int, max_tokens: int) -> dict:
    """Attention's inputs (rope, slots / kv_len or masks) are the runtime's
    own: they depend on the cache mode and the active extent."""
    return {}


# ------------------------------------------------------------ short conv
def conv_ring(cfg: Config, max_tokens: int) -> int:
    """Ring rows ``R`` of a short-conv state (one more row, index R, is zero)."""
    return max_tokens + cfg.conv_kernel - 1


def short_conv(ctx: LayerCtx, i: int, x: Node) -> Node:
    """LFM2 short conv of layer ``i`` (names ``blk.{i}.shortconv.*``):
    ``B, C, x = in_proj(x)``; ``y = C · conv(B · x)``; ``out_proj(y)``."""
    g, w, cfg = ctx.g, ctx.w, ctx.cfg
    h = cfg.hidden
    p = f"blk.{i}.shortconv."

    def lin(t: Node, name: str) -> Node:
        y = w.linear(g, t, p + name + ".weight")
        return g.add(y, w.vector(g, p + name + ".bias")) if cfg.conv_bias else y

    bcx = lin(x, "in_proj")
    b, gate, xx = (g.narrow(bcx, 2, j * h, h) for j in range(3))
    conv = causal_conv(ctx, i, g.mul(b, xx), p + "conv.weight",
                       p + "conv.bias" if cfg.conv_bias else None)  # fmt: skip
    return lin(g.mul(gate, conv), "out_proj")


def causal_conv(
    ctx: LayerCtx, i: int, x: Node, weight: str, bias: Optional[str], silu: bool = False
) -> Node:
    """Causal depthwise conv of ``cfg.conv_kernel`` taps over ``x [1, S, ch]``
    (``→ [1, S, ch]``, bias added) continuing the rows before
    (state ``conv{i}``: ring of :func:`conv_ring` rows + one zero row; inputs
    ``conv_slots`` / ``conv_rows`` from :func:`conv_feeds`), then a SiLU when
    ``silu``. Shared by the short conv and the SSM / GDN mixers.

    The window (``s + taps − 1`` rows) is kept alive until the conv's result
    exists (output ``conv_keep{i}``, one element reading both): else the
    planner may put the conv's output on the window's slot, and
    fuse_depthwise_conv1d_bsc must refuse a fused kernel writing its source.
    Only until then: a window alive to the end of the graph held every
    layer's at once (48 × 2.4 MB of Mamba2-370m's 256-token arena)."""
    g, w, cfg, s = ctx.g, ctx.w, ctx.cfg, ctx.s
    if not ctx.inplace:
        raise UnsupportedOpError(
            f"[{cfg.arch}] layer {i}: the conv state needs the in-place cache "
            "(load with inplace=True)"
        )
    taps, h = cfg.conv_kernel, x.shape[2]
    if taps < 2:
        raise UnsupportedOpError(f"[{cfg.arch}] conv kernel of {taps} taps (need >= 2)")
    ring = conv_ring(cfg, ctx.max_tokens)
    full = g.scatter_nd(
        g.state(f"conv{i}", [ring + 1, h]),
        ctx.input("conv_slots", [s, 1], "i32"),
        g.reshape(x, [s, h]),
    )
    width = s + taps - 1
    win = g.gather(full, ctx.input("conv_rows", [width], "i32"))
    bcw = g.reshape(g.transpose(g.reshape(win, [1, width, h]), [0, 2, 1]), [1, h, 1, width])
    y = g.conv2d(bcw, w.conv_taps(g, weight, h, taps), groups=h)
    conv = g.transpose(g.reshape(y, [1, h, s]), [0, 2, 1])
    out = conv if bias is None else g.add(conv, w.vector(g, bias))
    if silu:
        out = g.silu(out)
    first = g.narrow(g.narrow(g.reshape(out, [s, h]), 0, 0, 1), 1, 0, 1)
    src = g.narrow(g.narrow(win, 0, 0, 1), 1, 0, 1)
    ctx.outputs.append(g.add(src, first, name=f"conv_keep{i}"))
    return out


def conv_feeds(cfg: Config, n: int, n_new: int, s: int, max_tokens: int) -> dict:
    """``conv_slots`` / ``conv_rows`` of :func:`causal_conv` (every conv layer
    of a model shares them: one kernel length per model)."""
    ring = conv_ring(cfg, max_tokens)
    pos = n - (cfg.conv_kernel - 1) + np.arange(s + cfg.conv_kernel - 1)
    rows = np.where(pos < 0, ring, pos % ring).astype(np.int32)
    slots = ((n + np.arange(s)) % ring).astype(np.int32)[:, None]
    return {"conv_slots": slots, "conv_rows": rows}


def pad_stop(ctx: LayerCtx, x: Node) -> Node:
    """``x [1, S, k]`` with a bucket's padded rows zeroed: times run-time
    input ``x_valid [1, S, 1]`` (1 on the prompt's rows, 0 on the padding
    after them; :func:`scan_feeds`). A scan whose step size (Mamba's ``dt``)
    or gate and log-decay (GDN's ``β``, ``g``) pass through it leaves its
    state exactly as it is on a padded row (decay ``e⁰ = 1``, update 0), so
    a prompt padded to its bucket leaves the state the exact-length prompt
    leaves. Graphs of one token per row (decode, batched decode) have no
    padding: ``x`` unchanged."""
    if ctx.s == 1 or ctx.batch:
        return x
    return ctx.g.mul(x, ctx.input("x_valid", [1, ctx.s, 1]))


def scan_feeds(cfg: Config, n: int, n_new: int, s: int, max_tokens: int) -> dict:
    """:func:`conv_feeds` plus ``x_valid`` of :func:`pad_stop`."""
    valid = (np.arange(s) < n_new).astype(np.float32).reshape(1, s, 1)
    return {**conv_feeds(cfg, n, n_new, s, max_tokens), "x_valid": valid}


MIXERS: dict[str, MixerKind] = {
    "attention": MixerKind("attention", attention, lambda cfg, i: [], _no_feeds, copy_mode=True),
    "short_conv": MixerKind("short_conv", short_conv, lambda cfg, i: [f"conv{i}"], conv_feeds),
}
