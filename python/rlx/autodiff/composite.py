"""Gradients built from ordinary ops where no ``*_backward`` op covers the
case: soft-capped attention (re-expressed as matmuls, ``tanh`` and a
softmax, then differentiated), RoPE rotations the ``rope_backward``
lowering does not pair (interleaved with ``n_rot < head_dim``) and SAM 2's
axial 2-D RoPE (both: the transpose of a rotation by θ is the rotation by
−θ, a forward ``rope`` with ``−sin``)."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from rlx.autodiff._core import Ctx, rule
from rlx.node import Node

#: the additive score of a masked key: exp(s − max) underflows to exactly 0
#: in f32 and f64, as with −inf, while staying finite in the IR
_MASKED = -1e30


def _bhsd(ctx: Ctx, x: Node, nh: int, d: int, bshd: bool) -> Node:
    """``[b, s, nh·d]`` → ``[b, nh, s, d]`` (BHSD operands unchanged)."""
    if not bshd:
        return x
    b, s, _ = x.shape
    return ctx.g.transpose(ctx.g.reshape(x, [b, s, nh, d]), [0, 2, 1, 3])


def _positional_bias(ctx: Ctx, at: dict, seq: int, kv: int, dtype: str) -> Optional[Node]:
    """The additive ``[seq, kv]`` score mask of a causal / sliding-window mask
    (query ``i`` at absolute position ``kv − seq + i``), or None."""
    kind = at["mask"]
    if kind not in ("causal", "sliding_window"):
        return None
    i = np.arange(seq)[:, None] + (kv - seq)
    j = np.arange(kv)[None, :]
    visible = j <= i
    if kind == "sliding_window":
        visible &= i - j <= int(at["window"])
    return ctx.g.constant(np.where(visible, 0.0, _MASKED).astype(np.float32), dtype=dtype)


def softcap_attention(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    """Gradients of ``softmax(c·tanh(scale·q kᵀ / c) + mask) v`` w.r.t. q, k, v.

    The forward is rebuilt from matmuls, ``tanh`` and a softmax (GQA: k / v
    repeated to every query head) and differentiated by :func:`grad`; the
    soft-cap's derivative ``1 − tanh²(s/c)`` comes from the tanh rule."""
    from rlx.autodiff._core import grad

    g = ctx.g
    at = node.attrs
    ins = node.inputs
    q, k, v = ins[:3]
    h, kvh, d = int(at["heads"]), int(at["kv_heads"]), int(at["head_dim"])
    bshd = at["layout"] == "bshd"
    seq, kv = (q.shape[1], k.shape[1]) if bshd else (q.shape[2], k.shape[2])
    if not (isinstance(seq, int) and isinstance(kv, int)):
        raise ctx.fail(node, f"soft-capped attention needs static lengths, got {seq!r}, {kv!r}")
    qh, kh, vh = _bhsd(ctx, q, h, d, bshd), _bhsd(ctx, k, kvh, d, bshd), _bhsd(ctx, v, kvh, d, bshd)
    rep = h // kvh
    if rep > 1:

        def repeat(x: Node) -> Node:
            b = x.shape[0]
            full = g.expand(g.reshape(x, [b, kvh, 1, kv, d]), [b, kvh, rep, kv, d])
            return g.reshape(full, [b, h, kv, d])

        kh, vh = repeat(kh), repeat(vh)
    scale = at["score_scale"] if at.get("score_scale") is not None else 1.0 / math.sqrt(d)
    cap = float(at["softcap"])
    s = g.matmul(qh, g.transpose(kh, [0, 1, 3, 2])) * float(scale)
    s = g.tanh(s * (1.0 / cap)) * cap
    if at["mask"] == "bias":
        s = s + ins[3]
    elif at["mask"] == "custom":
        dead = g.eq(ins[3], ctx.scalar(0.0, ins[3]))
        s = s + ctx.select(dead, _MASKED, 0.0, s)
    else:
        pos = _positional_bias(ctx, at, seq, kv, s.dtype)
        if pos is not None:
            s = s + pos
    o = g.matmul(g.softmax(s, -1), vh)
    if bshd:
        b = q.shape[0]
        o = g.reshape(g.transpose(o, [0, 2, 1, 3]), [b, seq, h * d])
    want = [i for i in range(3) if ctx.needs(i)]
    out: list[Optional[Node]] = [None] * len(ins)
    for i, gi in zip(want, grad(g, o, [ins[i] for i in want], seed=dy)):
        out[i] = gi
    return out


def rotate_back(ctx: Ctx, dy: Node, cos: Node, sin: Node, at: dict) -> Node:
    """The transpose of ``rope(·, cos, sin)`` applied to ``dy``: the same RoPE
    with ``−sin`` (rotation by −θ; the dims past ``n_rot`` pass through)."""
    g = ctx.g
    return g.rope(dy, cos, g.neg(sin), head_dim=int(at["head_dim"]), n_rot=int(at["n_rot"]),
                  kind=at["kind"], per_token=bool(at.get("per_token", False)))  # fmt: skip


def _axial_angles(end_x: int, end_y: int, head_dim: int, theta: float) -> np.ndarray:
    """SAM 2's ``compute_axial_cis`` angles ``[end_x·end_y, head_dim/2]``: pair
    ``i < head_dim/4`` turns by ``x·θ^(−4i/head_dim)``, the rest by the same
    frequencies times ``y``, at grid position ``p = y·end_x + x`` (f32
    frequencies and products, as SAM 2 computes them in f32)."""
    quarter = head_dim // 4
    freqs = (float(np.float32(theta)) ** (-4.0 * np.arange(quarter) / head_dim)).astype(np.float32)
    p = np.arange(end_x * end_y)
    xs, ys = (p % end_x).astype(np.float32), (p // end_x).astype(np.float32)
    return np.concatenate([np.outer(xs, freqs), np.outer(ys, freqs)], axis=1).astype(np.float32)


@rule("axial_rope2d")
def _axial_rope2d(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    # interleaved pairs over the whole head, token s at grid position
    # s mod (end_x·end_y): rotate dy back by the same angles
    at = node.attrs
    (x,) = node.inputs
    seq = x.shape[1]
    if not isinstance(seq, int):
        raise ctx.fail(node, f"needs a static sequence length, got {seq!r}")
    d = int(at["head_dim"])
    ang = _axial_angles(int(at["end_x"]), int(at["end_y"]), d, float(at["theta"]))
    ang = ang[np.arange(seq) % ang.shape[0]].astype(np.float64)
    cos = ctx.g.constant(np.cos(ang).astype(np.float32), dtype="f32")
    sin = ctx.g.constant(np.sin(ang).astype(np.float32), dtype="f32")
    rope = {"head_dim": d, "n_rot": d, "kind": "interleaved"}
    return [rotate_back(ctx, dy, cos, sin, rope)]
