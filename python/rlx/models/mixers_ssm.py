"""State-space token mixers: ``mamba2`` (Mamba-2 SSD) and ``mamba`` (Mamba-1
selective scan), registered into :data:`rlx.models.mixers.MIXERS`.

Both start with a causal depthwise conv (+ SiLU) over part of the input
projection, continued across calls by the shared conv ring
(:func:`rlx.models.mixers.causal_conv`, state ``conv{i}``), then run the
scan op with a recurrent State leaf the op updates in place (``ssm{i}``;
Mamba-2 with ``n_groups > 1``: ``ssm{i}_{j}`` per B/C group). The scans fold
every row of a call into their state; a prompt padded to its bucket has its
step sizes zeroed on the padded rows (:func:`rlx.models.mixers.pad_stop`),
where the state then stays as it is, so one compiled graph per bucket serves
every prompt length.

Formulas (transformers ``modeling_mamba2.py`` / ``modeling_mamba.py``):

* Mamba-2: ``z, xBC, dt = in_proj(x)``; ``xBC = silu(conv(xBC))``;
  ``x, B, C = xBC``; ``dt = softplus(dt + dt_bias)``; ``A = −exp(A_log)``
  (GGUF stores ``A``: :func:`ssm_a`); ``h = exp(dt·A)·h + dt·x⊗B``,
  ``y = h·C + D·x`` (heads of group ``j`` read B / C of group ``j``);
  ``y = rmsnorm_groups(y·silu(z))·w``; ``out_proj``.
* Mamba-1: ``x, z = in_proj(x)``; ``x = silu(conv(x))``; ``dt, B, C =
  x_proj(x)``; ``dt = softplus(dt_proj(dt))`` (with bias); ``A = −exp(A_log)``
  ``[inner, state]``; selective scan ``+ D·x``; ``y·silu(z)``; ``out_proj``.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from rlx.errors import UnsupportedOpError, WeightFormatError
from rlx.graph import Graph
from rlx.models.base import Config, Weights
from rlx.models.mixers import MIXERS, LayerCtx, MixerKind, causal_conv, pad_stop, scan_feeds
from rlx.models.source import to_f32
from rlx.node import Node


def softplus(g: Graph, x: Node) -> Node:
    """``log(1 + exp(x))`` computed as ``max(x, 0) + log(1 + exp(−|x|))``
    (no overflow; torch's threshold-20 linear branch differs by < 3e-9)."""
    one = g.constant(np.float32(1.0))
    return g.add(g.relu(x), g.log(g.add(one, g.exp(g.neg(g.abs(x))))))


def neg_exp(g: Graph, t: Node) -> Node:
    """``A = −exp(A_log)``."""
    return g.neg(g.exp(t))


def ssm_a(g: Graph, w: Weights, p: str, shape: Optional[list[int]] = None) -> Node:
    """``A`` of the layer with prefix ``p``: a GGUF file stores it as
    ``{p}ssm_a`` (llama.cpp's converter writes ``−exp(A_log)``), an HF
    checkpoint as ``A_log`` (builder name ``{p}ssm_a_log``). ``shape``: read
    as an f32 matrix of that shape (Mamba-1), else as a vector."""

    def read(name: str) -> Node:
        return w.vector(g, name) if shape is None else matrix_f32(g, w, name, shape)

    if w.has(p + "ssm_a"):
        return read(p + "ssm_a")
    return neg_exp(g, read(p + "ssm_a_log"))


def matrix_f32(g: Graph, w: Weights, name: str, shape: list[int]) -> Node:
    """A small float tensor of ``prod(shape)`` elements (e.g. Mamba's
    ``A_log [inner, state]``) as an f32 param of ``shape``."""
    m = w.src.meta(name)
    if m.kind not in ("F32", "F16", "BF16") or int(np.prod(m.shape)) != int(np.prod(shape)):
        raise WeightFormatError(
            f"[weights] {w.path}: tensor {name!r} is {m.kind}{list(m.shape)}; expected "
            f"{shape} F32/F16/BF16"
        )
    if name not in w.values:
        arr = to_f32(w.src.array(name), m.kind).reshape(shape)
        w.values[name] = np.ascontiguousarray(arr, np.float32)
    return g.param(name, shape)


def _lin(ctx: LayerCtx, x: Node, name: str, scale: float = 1.0) -> Node:
    """``scale·(x @ Wᵀ) (+ bias when the source has one)``."""
    g = ctx.g
    y = ctx.w.linear(g, x, name + ".weight")
    if scale != 1.0:
        y = g.mul(y, g.constant(np.float32(scale)))
    return g.add(y, ctx.w.vector(g, name + ".bias")) if ctx.w.has(name + ".bias") else y


def gated_group_norm(g: Graph, w: Weights, y: Node, name: str, groups: int, eps: float) -> Node:
    """RMSNorm over ``groups`` equal slices of the last axis of ``y
    [1, S, n]``, times weight ``name [n]``."""
    s, n = y.shape[1], y.shape[2]
    if groups == 1:
        return g.rms_norm(y, w.vector(g, name), eps=eps)
    ones = g.constant(np.ones(n // groups, np.float32))
    yn = g.rms_norm(g.reshape(y, [1, s, groups, n // groups]), ones, eps=eps)
    return g.mul(g.reshape(yn, [1, s, n]), w.vector(g, name))


# ---------------------------------------------------------------- Mamba-2
def mamba2(ctx: LayerCtx, i: int, x: Node) -> Node:
    """Mamba-2 mixer of layer ``i`` (names ``blk.{i}.ssm_*``)."""
    g, w, cfg, s = ctx.g, ctx.w, ctx.cfg, ctx.s
    inner, n, heads, hg = cfg.ssm_inner, cfg.ssm_state, cfg.ssm_heads, cfg.ssm_groups
    p_dim = cfg.ssm_head_dim
    if heads * p_dim != inner or heads % hg:
        raise UnsupportedOpError(
            f"[{cfg.arch}] num_heads {heads} x head_dim {p_dim} != intermediate {inner}, "
            f"or n_groups {hg} does not divide the heads"
        )
    p = f"blk.{i}."
    conv_dim = inner + 2 * hg * n
    zxbcdt = _lin(ctx, x, p + "ssm_in", cfg.ssm_in_mult)
    if cfg.ssm_mults:  # Falcon-H1's muP multipliers of z, x, B, C, dt
        m = cfg.ssm_mults
        parts = [(inner, m[0]), (inner, m[1]), (hg * n, m[2]), (hg * n, m[3]), (heads, m[4])]
        mup = np.concatenate([np.full(k, v, np.float32) for k, v in parts])
        zxbcdt = g.mul(zxbcdt, g.constant(mup))
    z = g.narrow(zxbcdt, 2, 0, inner)
    xbc = g.narrow(zxbcdt, 2, inner, conv_dim)
    dt = g.narrow(zxbcdt, 2, inner + conv_dim, heads)
    bias = p + "ssm_conv1d.bias" if cfg.conv_bias else None
    xbc = causal_conv(ctx, i, xbc, p + "ssm_conv1d.weight", bias, silu=True)
    xs = g.narrow(xbc, 2, 0, inner)
    dt = pad_stop(ctx, softplus(g, g.add(dt, w.vector(g, p + "ssm_dt.bias"))))
    a = ssm_a(g, w, p)
    per = heads // hg
    outs = []
    for j in range(hg):
        bj = g.narrow(xbc, 2, inner + j * n, n)
        cj = g.narrow(xbc, 2, inner + hg * n + j * n, n)
        name = f"ssm{i}" if hg == 1 else f"ssm{i}_{j}"
        st = g.state(name, [1, per, p_dim, n])
        xj = xs if hg == 1 else g.narrow(xs, 2, j * per * p_dim, per * p_dim)
        dtj = dt if hg == 1 else g.narrow(dt, 2, j * per, per)
        aj = a if hg == 1 else g.narrow(a, 0, j * per, per)
        outs.append(g.mamba2(xj, dtj, aj, bj, cj, heads=per, state=st))
    y = outs[0] if hg == 1 else g.concat(outs, axis=2)
    d = g.reshape(w.vector(g, p + "ssm_d"), [heads, 1])
    skip = g.mul(g.reshape(xs, [1, s, heads, p_dim]), d)
    y = g.add(y, g.reshape(skip, [1, s, inner]))
    if cfg.ssm_norm == "gate_first":  # Mamba-2: norm(y·silu(z))·w
        y = gated_group_norm(g, w, g.mul(y, g.silu(z)), p + "ssm_norm.weight", hg, cfg.eps)
    elif cfg.ssm_norm == "norm_first":  # Falcon-H1 norm_before_gate: norm(y)·w·silu(z)
        y = g.mul(gated_group_norm(g, w, y, p + "ssm_norm.weight", hg, cfg.eps), g.silu(z))
    else:  # no norm (Falcon-H1 mamba_rms_norm false)
        y = g.mul(y, g.silu(z))
    return _lin(ctx, y, p + "ssm_out")


def _mamba2_states(cfg: Config, i: int) -> list[str]:
    ssm = [f"ssm{i}"] if cfg.ssm_groups == 1 else [f"ssm{i}_{j}" for j in range(cfg.ssm_groups)]
    return [f"conv{i}", *ssm]


MIXERS["mamba2"] = MixerKind("mamba2", mamba2, _mamba2_states, scan_feeds)


# ---------------------------------------------------------------- Mamba-1
def mamba(ctx: LayerCtx, i: int, x: Node) -> Node:
    """Mamba-1 mixer of layer ``i`` (names ``blk.{i}.ssm_*``)."""
    g, w, cfg = ctx.g, ctx.w, ctx.cfg
    inner, n, rank = cfg.ssm_inner, cfg.ssm_state, cfg.ssm_dt_rank
    p = f"blk.{i}."
    xz = _lin(ctx, x, p + "ssm_in")
    xs, z = g.narrow(xz, 2, 0, inner), g.narrow(xz, 2, inner, inner)
    bias = p + "ssm_conv1d.bias" if cfg.conv_bias else None
    xs = causal_conv(ctx, i, xs, p + "ssm_conv1d.weight", bias, silu=True)
    dbc = w.linear(g, xs, p + "ssm_x.weight")
    dt, b, c = g.narrow(dbc, 2, 0, rank), g.narrow(dbc, 2, rank, n), g.narrow(dbc, 2, rank + n, n)
    if w.has(p + "ssm_dt_norm.weight"):  # Jamba: RMSNorms on dt, B, C
        dt, b, c = (g.rms_norm(t, w.vector(g, f"{p}ssm_{k}_norm.weight"), eps=cfg.eps)
                    for t, k in ((dt, "dt"), (b, "b"), (c, "c")))  # fmt: skip
    dt = w.linear(g, dt, p + "ssm_dt.weight")
    dt = pad_stop(ctx, softplus(g, g.add(dt, w.vector(g, p + "ssm_dt.bias"))))
    a = ssm_a(g, w, p, [inner, n])
    st = g.state(f"ssm{i}", [1, inner, n])
    y = g.selective_scan(xs, dt, a, b, c, state=st)
    y = g.add(y, g.mul(xs, w.vector(g, p + "ssm_d")))
    return _lin(ctx, g.mul(y, g.silu(z)), p + "ssm_out")


MIXERS["mamba"] = MixerKind("mamba", mamba, lambda cfg, i: [f"conv{i}", f"ssm{i}"], scan_feeds)


# ------------------------------------------------- Falcon-H1 parallel hybrid
def mamba2_attention(ctx: LayerCtx, i: int, x: Node) -> Node:
    """Falcon-H1 layer mixer: Mamba-2 and attention side by side on the same
    normed input, ``ssm_out·mamba2(x) + attn_out·attention(attn_in·x)``
    (``cfg.parallel_mults = (attn_in, attn_out, ssm_out)``)."""
    from rlx.models.mixers import attention

    g = ctx.g
    attn_in, attn_out, ssm_out = ctx.cfg.parallel_mults

    def scaled(t: Node, m: float) -> Node:
        return t if m == 1.0 else g.mul(t, g.constant(np.float32(m)))

    a = scaled(attention(ctx, i, scaled(x, attn_in)), attn_out)
    return g.add(scaled(mamba2(ctx, i, x), ssm_out), a)


MIXERS["mamba2_attention"] = MixerKind(
    "mamba2_attention", mamba2_attention, _mamba2_states, scan_feeds
)
