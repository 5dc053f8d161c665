"""Gradient thunks (training). All f32 buffers, float64 arithmetic.

Each function states the forward it differentiates; the tests check every
one against central finite differences of that forward.
"""

from __future__ import annotations

import numpy as np

from rlx.reference import Memory, reference


def _rd(mem: Memory, off: int, shape: tuple | int) -> np.ndarray:
    return mem.view(off, shape, np.float32).astype(np.float64)


def _wr(mem: Memory, off: int, val: np.ndarray) -> None:
    mem.view(off, val.shape, np.float32)[...] = val


# ---------------------------------------------------------------- attention


def attention_mask(
    mask_kind: int, seq: int, kv_seq: int, window: int, custom: np.ndarray | None = None
) -> np.ndarray:
    """Additive score mask ``[.., seq, kv_seq]`` (0 or −inf, or the bias itself).

    Query ``i`` sits at absolute position ``kv_seq − seq + i``. 1 causal: key
    ``j`` visible iff ``j ≤ abs_i``; 2 custom: ``custom != 0`` visible;
    3 bias: ``custom`` added; 4 sliding window: causal and ``abs_i − j ≤ window``."""
    abs_i = np.arange(seq)[:, None] + (kv_seq - seq)
    j = np.arange(kv_seq)[None, :]
    if mask_kind == 0:
        return np.zeros((seq, kv_seq))
    if mask_kind == 1:
        return np.where(j <= abs_i, 0.0, -np.inf)
    if mask_kind == 4:
        return np.where((j <= abs_i) & (abs_i - j <= window), 0.0, -np.inf)
    if mask_kind == 2:
        return np.where(np.asarray(custom) != 0, 0.0, -np.inf)
    if mask_kind == 3:
        return np.asarray(custom, np.float64)
    raise ValueError(f"[attention_bwd] unknown mask_kind {mask_kind}")


def attention_fwd_parts(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, add_mask: np.ndarray, scale: float
) -> tuple[np.ndarray, np.ndarray]:
    """Softmax probabilities ``P`` and output for ``[b, h, s, d]`` operands. A row
    with every key masked has ``P = 0`` (and output 0)."""
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale + add_mask
    mx = np.max(s, axis=-1, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0.0)
    e = np.exp(s - mx)
    den = e.sum(-1, keepdims=True)
    p = np.where(den > 0, e / np.where(den > 0, den, 1.0), 0.0)
    return p, np.einsum("bhij,bhjd->bhid", p, v)


def attention_backward_fn(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, dy: np.ndarray, add_mask: np.ndarray, wrt: int
) -> np.ndarray:
    """Gradient of ``softmax(q kᵀ/√d + mask) v`` w.r.t. q (wrt 0), k (1) or v (2);
    operands ``[b, h, s, d]`` (kv_heads == heads)."""
    scale = 1.0 / np.sqrt(q.shape[-1])
    p, _ = attention_fwd_parts(q, k, v, add_mask, scale)
    if wrt == 2:
        return np.einsum("bhij,bhid->bhjd", p, dy)
    dp = np.einsum("bhid,bhjd->bhij", dy, v)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) * scale
    if wrt == 0:
        return np.einsum("bhij,bhjd->bhid", ds, k)
    return np.einsum("bhij,bhid->bhjd", ds, q)


@reference("attention_bwd")
def attention_bwd(t: dict, mem: Memory) -> None:
    """Attention gradient. ``wrt``: 0 = dq, 1 = dk, 2 = dv. ``bhsd = 1``: operands
    ``[b, h, s, d]``, else ``[b, s, h·d]``; K/V have ``heads`` heads. Masks as
    :func:`attention_mask`; ``mask == q`` means "no mask buffer". A mask
    buffer (kinds 2, 3) is f32 of dims ``t.get("mask_dims", [b, h, s, kv_s])``,
    broadcast numpy-style to ``[b, h, s, kv_s]``."""
    b, s, kvs, h, d = t["batch"], t["seq"], t["kv_seq"], t["heads"], t["head_dim"]
    bhsd = bool(t["bhsd"])

    def load(off: int, L: int) -> np.ndarray:
        if bhsd:
            return _rd(mem, off, (b, h, L, d))
        return _rd(mem, off, (b, L, h, d)).transpose(0, 2, 1, 3)

    q, k, v, dy = load(t["q"], s), load(t["k"], kvs), load(t["v"], kvs), load(t["dy"], s)
    kind = int(t["mask_kind"])
    custom = None
    if kind in (2, 3):
        dims = tuple(t.get("mask_dims", (b, h, s, kvs)))
        custom = np.broadcast_to(_rd(mem, t["mask"], dims), (b, h, s, kvs))
    add = attention_mask(kind, s, kvs, int(t.get("window", 0)), custom)
    wrt = int(t["wrt"])
    g = attention_backward_fn(q, k, v, dy, add, wrt)
    if not bhsd:
        g = g.transpose(0, 2, 1, 3)
    _wr(mem, t["out"], np.ascontiguousarray(g))


# ---------------------------------------------------------------- rms norm


def rms_norm_backward_fn(
    x: np.ndarray, gamma: np.ndarray, dy: np.ndarray, eps: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For ``y = x·r·γ + β`` with ``r = 1/√(mean(x²) + eps)`` per row:
    returns ``(dx, dγ, dβ)``."""
    h = x.shape[-1]
    r = 1.0 / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    xh = x * r
    gdy = dy * gamma
    dx = r * (gdy - xh * (gdy * xh).sum(-1, keepdims=True) / h)
    return dx, (dy * xh).sum(0), dy.sum(0)


def _rms_parts(t: dict, mem: Memory):
    rows, h = t["rows"], t["h"]
    x = _rd(mem, t["x"], (rows, h))
    return rms_norm_backward_fn(x, _rd(mem, t["gamma"], h), _rd(mem, t["dy"], (rows, h)), t["eps"])


@reference("rms_norm_backward_input")
def rms_norm_backward_input(t: dict, mem: Memory) -> None:
    """``dx`` of RMSNorm (see :func:`rms_norm_backward_fn`)."""
    _wr(mem, t["dx"], _rms_parts(t, mem)[0])


@reference("rms_norm_backward_gamma")
def rms_norm_backward_gamma(t: dict, mem: Memory) -> None:
    """``dγ = Σ_rows dy · x̂``."""
    _wr(mem, t["dgamma"], _rms_parts(t, mem)[1])


@reference("rms_norm_backward_beta")
def rms_norm_backward_beta(t: dict, mem: Memory) -> None:
    """``dβ = Σ_rows dy``."""
    _wr(mem, t["dbeta"], _rms_parts(t, mem)[2])


# ---------------------------------------------------------------- rope


def rope_backward_fn(
    dy: np.ndarray,
    cos: np.ndarray,
    sin: np.ndarray,
    head_dim: int,
    n_rot: int,
    interleaved: bool = False,
) -> np.ndarray:
    """Transpose of the rotation. Forward on each rotated pair ``(a, b)``:
    ``a' = a cos − b sin``, ``b' = a sin + b cos``; pairs are ``(i, i + n_rot/2)``
    (NeoX) or ``(2i, 2i+1)`` (interleaved); dims ≥ n_rot pass through.
    dy ``[rows, heads, head_dim]``, cos/sin ``[rows, n_rot/2]`` (already per row)."""
    dx = dy.copy()
    half = n_rot // 2
    if interleaved:
        ia, ib = np.arange(0, n_rot, 2), np.arange(1, n_rot, 2)
    else:
        ia, ib = np.arange(half), np.arange(half, n_rot)
    c, s = cos[:, None, :], sin[:, None, :]
    da, db = dy[..., ia], dy[..., ib]
    dx[..., ia] = da * c + db * s
    dx[..., ib] = -da * s + db * c
    return dx


@reference("rope_backward")
def rope_backward(t: dict, mem: Memory) -> None:
    """RoPE gradient on ``[batch, seq, hidden]``. ``cos_len`` is the element count of
    the cos (and sin) table, ``rows·n_rot/2``: ``rows == batch·seq`` means one row
    per token, otherwise row ``p`` serves sequence position ``p`` (``rows ≥ seq``).
    NeoX pairing unless ``t["interleaved"]`` (the seed's thunk has no flag)."""
    b, s, hid, hd, nr = t["batch"], t["seq"], t["hidden"], t["head_dim"], t["n_rot"]
    half = nr // 2
    rows = t["cos_len"] // max(half, 1)
    cos, sin = _rd(mem, t["cos"], (rows, half)), _rd(mem, t["sin"], (rows, half))
    if rows == b * s:
        c, sn = cos, sin
    else:
        c, sn = np.tile(cos[:s], (b, 1)), np.tile(sin[:s], (b, 1))
    dy = _rd(mem, t["dy"], (b * s, hid // hd, hd))
    dx = rope_backward_fn(dy, c, sn, hd, nr, bool(t.get("interleaved", False)))
    _wr(mem, t["dx"], dx.reshape(b, s, hid))


# ---------------------------------------------------------------- cumsum / gather


@reference("cumsum_backward")
def cumsum_backward(t: dict, mem: Memory) -> None:
    """Reverse cumulative sum: inclusive ``dx_i = Σ_{j≥i} dy_j``, exclusive ``Σ_{j>i}``."""
    r, c = t["rows"], t["cols"]
    dy = _rd(mem, t["dy"], (r, c))
    rev = np.cumsum(dy[:, ::-1], axis=1)[:, ::-1]
    if t["exclusive"]:
        rev = rev - dy
    _wr(mem, t["dx"], rev)


@reference("gather_backward")
def gather_backward(t: dict, mem: Memory) -> None:
    """Scatter-add of ``dy [outer, num_idx, trailing]`` into zeros ``[outer, axis_dim,
    trailing]`` at ``indices`` (int32; negative counts from the end; still out of
    range contributes nothing)."""
    o, a, ni, tr = t["outer"], t["axis_dim"], t["num_idx"], t["trailing"]
    dy = _rd(mem, t["dy"], (o, ni, tr))
    idx = mem.view(t["indices"], ni, np.int32).astype(np.int64)
    idx = np.where(idx < 0, idx + a, idx)
    ok = (idx >= 0) & (idx < a)
    out = np.zeros((o, a, tr))
    np.add.at(out, (slice(None), idx[ok]), dy[:, ok])
    _wr(mem, t["dst"], out)


# ---------------------------------------------------------------- pooling / conv


def maxpool2d_backward_fn(
    x: np.ndarray, dy: np.ndarray, kernel: tuple, stride: tuple, padding: tuple
) -> np.ndarray:
    """Max-pool gradient (NCHW, any float dtype): each window's ``dy`` goes to
    the first maximum in row-major window order; padding is −inf (never
    selected)."""
    n, c, h, w = x.shape
    ho, wo = dy.shape[2], dy.shape[3]
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    xp = np.full((n, c, h + 2 * ph + kh, w + 2 * pw + kw), -np.inf)
    xp[:, :, ph : ph + h, pw : pw + w] = x
    dxp = np.zeros_like(xp)
    for i in range(ho):
        for j in range(wo):
            win = xp[:, :, i * sh : i * sh + kh, j * sw : j * sw + kw].reshape(n, c, kh * kw)
            am = np.argmax(win, axis=-1)
            ii, jj = i * sh + am // kw, j * sw + am % kw
            nn_, cc = np.meshgrid(np.arange(n), np.arange(c), indexing="ij")
            np.add.at(dxp, (nn_, cc, ii, jj), dy[:, :, i, j])
    return dxp[:, :, ph : ph + h, pw : pw + w]


@reference("maxpool2d_backward")
def maxpool2d_backward(t: dict, mem: Memory) -> None:
    """:func:`maxpool2d_backward_fn` on f32 buffers."""
    n, c, h, w = t["n"], t["c"], t["h"], t["w"]
    x = _rd(mem, t["x"], (n, c, h, w))
    dy = _rd(mem, t["dy"], (n, c, t["h_out"], t["w_out"]))
    geom = ((t["kh"], t["kw"]), (t["sh"], t["sw"]), (t["ph"], t["pw"]))
    _wr(mem, t["dx"], maxpool2d_backward_fn(x, dy, *geom))


def conv2d_backward_input_fn(
    dy: np.ndarray, w: np.ndarray, hw: tuple, stride: tuple, padding: tuple, dilation: tuple,
    groups: int,
) -> np.ndarray:  # fmt: skip
    """``dx`` of ``y = conv2d(x, w)`` (NCHW, w ``[c_out, c_in/g, kh, kw]``, zero
    padding, stride, dilation, groups; ``hw`` is x's spatial size):
    ``dx[n, ci, ih, iw] += dy[n, co, oh, ow]·w[co, ci', a, b]``."""
    n, co, ho, wo = dy.shape
    _, cig, kh, kw = w.shape
    (h, wi), (sh, sw), (ph, pw), (dh, dw) = hw, stride, padding, dilation
    ci, cog = cig * groups, co // groups
    dxp = np.zeros((n, ci, h + 2 * ph + dh * kh, wi + 2 * pw + dw * kw))
    for gi in range(groups):
        dyg = dy[:, gi * cog : (gi + 1) * cog]
        wg = w[gi * cog : (gi + 1) * cog]
        for a in range(kh):
            for bb in range(kw):
                contrib = np.einsum("nohw,oc->nchw", dyg, wg[:, :, a, bb])
                r0, c0 = a * dh, bb * dw
                dxp[
                    :, gi * cig : (gi + 1) * cig, r0 : r0 + sh * ho : sh, c0 : c0 + sw * wo : sw
                ] += contrib
    return dxp[:, :, ph : ph + h, pw : pw + wi]


def _conv_geom(t: dict, dil_w_field: str) -> tuple:
    return ((t["sh"], t["sw"]), (t["ph"], t["pw"]), (t["dh"], t[dil_w_field]), t["groups"])


@reference("conv2d_backward_input")
def conv2d_backward_input(t: dict, mem: Memory) -> None:
    """:func:`conv2d_backward_input_fn` on f32 buffers."""
    n, ci, h, wi, co, ho, wo = (t[f] for f in ("n", "c_in", "h", "w_in", "c_out", "h_out", "w_out"))
    g = t["groups"]
    dy = _rd(mem, t["dy"], (n, co, ho, wo))
    w = _rd(mem, t["w"], (co, ci // g, t["kh"], t["kw"]))
    _wr(mem, t["dx"], conv2d_backward_input_fn(dy, w, (h, wi), *_conv_geom(t, "dw")))


def conv2d_backward_weight_fn(
    x: np.ndarray, dy: np.ndarray, kernel: tuple, stride: tuple, padding: tuple,
    dilation: tuple, groups: int,
) -> np.ndarray:  # fmt: skip
    """``dw`` of ``y = conv2d(x, w)``: ``dw[co, ci', a, b] = Σ dy[n, co, oh, ow]·
    x_pad[n, ci, oh·sh + a·dh, ow·sw + b·dw]``."""
    n, ci, h, wi = x.shape
    co, ho, wo = dy.shape[1], dy.shape[2], dy.shape[3]
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    xp = np.zeros((n, ci, h + 2 * ph + dh * kh + sh * ho, wi + 2 * pw + dw * kw + sw * wo))
    xp[:, :, ph : ph + h, pw : pw + wi] = x
    cig, cog = ci // groups, co // groups
    out = np.zeros((co, cig, kh, kw))
    for gi in range(groups):
        for a in range(kh):
            for bb in range(kw):
                xs = xp[
                    :,
                    gi * cig : (gi + 1) * cig,
                    a * dh : a * dh + sh * ho : sh,
                    bb * dw : bb * dw + sw * wo : sw,
                ]
                out[gi * cog : (gi + 1) * cog, :, a, bb] = np.einsum(
                    "nohw,nchw->oc", dy[:, gi * cog : (gi + 1) * cog], xs
                )
    return out


@reference("conv2d_backward_weight")
def conv2d_backward_weight(t: dict, mem: Memory) -> None:
    """:func:`conv2d_backward_weight_fn` on f32 buffers; ``dw_dil`` is the width
    dilation."""
    n, ci, h, wi, co, ho, wo = (t[f] for f in ("n", "c_in", "h", "w", "c_out", "h_out", "w_out"))
    x = _rd(mem, t["x"], (n, ci, h, wi))
    dy = _rd(mem, t["dy"], (n, co, ho, wo))
    dw = conv2d_backward_weight_fn(x, dy, (t["kh"], t["kw"]), *_conv_geom(t, "dw_dil"))
    _wr(mem, t["dw"], dw)


# ---------------------------------------------------------------- DiT modulation


def ada_layer_norm_backward_fn(
    x: np.ndarray, scale: np.ndarray, dy: np.ndarray, eps: float, layer_norm: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Forward ``out = norm(x)·(1 + scale) + shift`` where ``x [mods, seq, h]`` and
    ``scale, shift [mods, h]`` (row ``m·seq + s`` uses modulation row ``m``);
    ``norm`` is LayerNorm or RMSNorm without affine. Returns ``(dx, dscale, dshift)``."""
    h = x.shape[-1]
    if layer_norm:
        xc = x - x.mean(-1, keepdims=True)
    else:
        xc = x
    r = 1.0 / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps)
    xh = xc * r
    dxh = dy * (1.0 + scale[:, None, :])
    dx = r * (dxh - xh * (dxh * xh).sum(-1, keepdims=True) / h)
    if layer_norm:
        dx = dx - dx.mean(-1, keepdims=True)
    return dx, (dy * xh).sum(1), dy.sum(1)


@reference("ada_layer_norm_backward")
def ada_layer_norm_backward(t: dict, mem: Memory) -> None:
    """Packed ``[dx (mod_rows·seq_per_mod·h) ∥ dscale (mod_rows·h) ∥ dshift (mod_rows·h)]``."""
    h, m, sp = t["h"], t["mod_rows"], t["seq_per_mod"]
    x = _rd(mem, t["x"], (m, sp, h))
    dx, ds, dsh = ada_layer_norm_backward_fn(
        x, _rd(mem, t["scale"], (m, h)), _rd(mem, t["dy"], (m, sp, h)), t["eps"], t["layer_norm"]
    )
    _wr(mem, t["out"], np.concatenate([dx.ravel(), ds.ravel(), dsh.ravel()]))


def gated_residual_backward_fn(y: np.ndarray, gate: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Forward ``out = x + gate·y`` with ``y [mods, seq, h]``, ``gate [mods, h]``
    broadcast over the ``seq`` rows, ``g`` the upstream gradient. Packed
    ``[dx = g ∥ dy = gate·g ∥ dgate = Σ_seq y·g]`` (flat)."""
    return np.concatenate([g.ravel(), (gate[:, None] * g).ravel(), (y * g).sum(1).ravel()])


@reference("gated_residual_backward")
def gated_residual_backward(t: dict, mem: Memory) -> None:
    """:func:`gated_residual_backward_fn` on f32 buffers (the upstream gradient
    is the thunk's ``dy`` field)."""
    h, m, sp = t["h"], t["mod_rows"], t["seq_per_mod"]
    y = _rd(mem, t["y"], (m, sp, h))
    gate = _rd(mem, t["gate"], (m, h))
    _wr(mem, t["out"], gated_residual_backward_fn(y, gate, _rd(mem, t["dy"], (m, sp, h))))


# ---------------------------------------------------------------- cross-entropy


@reference("softmax_cross_entropy_backward")
def softmax_cross_entropy_backward(t: dict, mem: Memory) -> None:
    """``dlogits = (softmax(logits) − onehot(label))·d_loss`` per row; a label outside
    ``[0, c)`` (e.g. −100) marks an ignored row: zero gradient."""
    n, c = t["n"], t["c"]
    z = _rd(mem, t["logits"], (n, c))
    lab = mem.view(t["labels"], n, np.int32).astype(np.int64)
    dl = _rd(mem, t["d_loss"], n)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    ok = (lab >= 0) & (lab < c)
    p[np.arange(n)[ok], lab[ok]] -= 1.0
    _wr(mem, t["dlogits"], np.where(ok[:, None], p * dl[:, None], 0.0))
