"""Attention and rotary-embedding thunks.

* SDPA: ``softmax(scale·QKᵀ + mask)·V`` (Vaswani et al., "Attention Is All
  You Need", arXiv:1706.03762, eq. 1); grouped-query heads per Ainslie et
  al., "GQA", arXiv:2305.13245 (query head ``h`` reads kv head
  ``h // (heads // kv_heads)``); logit soft-capping ``cap·tanh(s/cap)`` as
  in Gemma 2 (arXiv:2408.00118, §2).
* RoPE: Su et al., "RoFormer", arXiv:2104.09864, eq. 34 — pairs rotated by
  ``(a, b) → (a·cos − b·sin, a·sin + b·cos)``; interleaved pairs (2i, 2i+1)
  (GPT-J / llama.cpp) or rotate-half pairs (i, i + n_rot/2) (GPT-NeoX / HF).
* Axial 2-D RoPE: SAM 2 (Ravi et al., arXiv:2408.00714), ``compute_axial_cis``
  / ``apply_rotary_enc`` of its reference implementation.

Scores and softmax are float64; one rounding on store.
"""

from __future__ import annotations

import math
import struct

import numpy as np

from . import Memory, reference
from ._act import store
from ._common import F32, I32, fdt


def _visible(kind: int, seq: int, kv_seq: int, window: int) -> np.ndarray:
    """Boolean ``[seq, kv_seq]`` visibility for mask kinds 0, 1 and 4."""
    abs_q = (kv_seq - seq + np.arange(seq))[:, None]
    j = np.arange(kv_seq)[None, :]
    if kind == 0:
        return np.ones((seq, kv_seq), bool)
    if kind == 1:
        return j <= abs_q
    if kind == 4:
        return (j <= abs_q) & (abs_q - j <= window)
    raise ValueError(f"[attention] mask kind {kind} has no positional mask")


def sdpa(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    scale: float,
    softcap: float,
    visible: np.ndarray | None,
    bias: np.ndarray | None,
) -> np.ndarray:
    """Core over BHSD float64 arrays; k/v may have fewer (kv) heads.

    ``visible`` broadcasts to ``[B, H, S, KV]`` (True = attend), ``bias`` is
    added after scaling and soft-capping. A key whose final score is
    ``-inf`` (masked, or an infinite negative bias) takes no part in the
    row: its value is never read, so a NaN there does not leak. Otherwise
    IEEE rules hold: a NaN score (or ``+inf`` max) makes the row NaN.
    Rows with no visible key give zeros."""
    heads, kvh = q.shape[1], k.shape[1]
    if heads % kvh:
        raise ValueError(f"[attention] heads {heads} not a multiple of kv_heads {kvh}")
    rep = heads // kvh
    kk = np.repeat(k, rep, axis=1)
    vv = np.repeat(v, rep, axis=1)
    with np.errstate(invalid="ignore", over="ignore"):
        s = np.matmul(q, np.swapaxes(kk, -1, -2)) * scale
        if softcap != 0.0:
            s = softcap * np.tanh(s / softcap)
        if bias is not None:
            s = s + bias
        if visible is not None:
            s = np.where(visible, s, -np.inf)
        mx = s.max(axis=-1, keepdims=True)  # NaN when any score is NaN
        dead = np.isneginf(mx)  # every key masked
        e = np.exp(s - np.where(dead, 0.0, mx))
        den = e.sum(axis=-1, keepdims=True)
        p = np.where(dead, 0.0, e / np.where(den > 0, den, 1.0))
        gone = np.isneginf(s)
        if np.isfinite(vv).all() or not gone.any():
            return np.matmul(np.where(gone, 0.0, p), vv)
        # non-finite values behind masked keys: leave them out explicitly
        # (0·NaN would be NaN)
        terms = np.where(gone[..., None], 0.0, p[..., None] * vv[..., None, :, :])
        return terms.sum(axis=-2)


@reference("attention")
def attention(t: dict, mem: Memory) -> None:
    """Scaled dot-product attention with GQA, cached decode and masks.

    Layout ``bhsd=1``: q ``[B, H, S, D]``, k/v ``[B, KVH, KV, D]``; ``bhsd=0``:
    q ``[B, S, H·D]``, k/v ``[B, KV, KVH·D]``; the output has q's layout.
    Query ``i`` sits at absolute position ``L − seq + i`` where ``L`` is
    ``kv_seq``, or the int32 read at offset ``kv_len`` when that field is
    set (then only keys ``0..L`` take part; ``1 ≤ L ≤ kv_seq``; with
    ``kv_len_per_batch`` one int32 per batch entry). ``mask_kind``:
    0 none; 1 causal (``j ≤ abs_q``); 2 custom ``mask [B, S, KV]`` in ``dt``,
    non-zero = visible; 3 additive bias ``[B, H, S, KV]`` in ``dt``; 4 sliding
    window (causal and ``abs_q − j ≤ window``). ``score_scale`` 0 means
    ``1/√D``; ``attn_logit_softcap`` 0 disables, else ``cap·tanh(s/cap)`` is
    applied after scaling and before the bias / mask. ``kv_dt`` (when set)
    is k / v's element type (f16 under an f32 ``dt``: a half KV cache).
    """
    dt = fdt(t)
    # k / v may be f16 under an f32 q (a half KV cache); absent = dt
    kv_dt = fdt(t, "kv_dt") if t.get("kv_dt") is not None else dt
    b, s, kv, h, kvh, d = (
        t[x] for x in ("batch", "seq", "kv_seq", "heads", "kv_heads", "head_dim")
    )
    bhsd = bool(t.get("bhsd", 0))

    def load(key: str, nh: int, length: int, elem: np.dtype) -> np.ndarray:
        if bhsd:
            return mem.view(t[key], (b, nh, length, d), elem).astype(np.float64)
        x = mem.view(t[key], (b, length, nh, d), elem).astype(np.float64)
        return x.transpose(0, 2, 1, 3)

    q, k, v = load("q", h, s, dt), load("k", kvh, kv, kv_dt), load("v", kvh, kv, kv_dt)
    # run-time key length: only keys 0..n take part (the rest of the cache
    # is never read), query i sits at n - s + i; one n for every batch
    # entry, or one per entry (``kv_len_per_batch``)
    lens = [kv] * b
    if t.get("kv_len") is not None:
        per = bool(t.get("kv_len_per_batch", False))
        lens = [int(x) for x in mem.view(t["kv_len"], (b if per else 1,), I32)]
        lens = lens if per else lens * b
        for n in lens:
            if not 1 <= n <= kv:
                raise ValueError(
                    f"[attention] kv_len {n} out of range 1..={kv} (the key/value capacity)"
                )
    kind = t.get("mask_kind", 0)
    scale = float(np.float32(t.get("score_scale", 0.0)))
    if scale == 0.0:
        scale = 1.0 / math.sqrt(d)
    cap = float(np.float32(t.get("attn_logit_softcap", 0.0)))
    parts = []
    for e in range(b):
        n = lens[e]
        visible = bias = None
        if kind == 2:
            visible = (mem.view(t["mask"], (b, s, kv), dt)[e : e + 1, :, :n] != 0)[:, None]
        elif kind == 3:
            bias = mem.view(t["mask"], (b, h, s, kv), dt)[e : e + 1, ..., :n].astype(np.float64)
        elif kind != 0:
            visible = _visible(kind, s, n, t.get("window", 0))
        ke, ve = k[e : e + 1, :, :n], v[e : e + 1, :, :n]
        parts.append(sdpa(q[e : e + 1], ke, ve, scale, cap, visible, bias))
    o = np.concatenate(parts, axis=0) if parts else sdpa(q, k, v, scale, cap, None, None)
    if bhsd:
        store(mem.view(t["out"], (b, h, s, d), dt), o)
    else:
        store(mem.view(t["out"], (b, s, h, d), dt), o.transpose(0, 2, 1, 3))


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, interleaved: bool) -> np.ndarray:
    """Rotate the last axis of ``x`` (length ``2·cos.shape[-1]``) pairwise."""
    half = cos.shape[-1]
    if interleaved:
        a, bb = x[..., 0::2], x[..., 1::2]
    else:
        a, bb = x[..., :half], x[..., half:]
    ra = a * cos - bb * sin
    rb = a * sin + bb * cos
    out = np.empty_like(x)
    if interleaved:
        out[..., 0::2], out[..., 1::2] = ra, rb
    else:
        out[..., :half], out[..., half:] = ra, rb
    return out


@reference("rope")
def rope(t: dict, mem: Memory) -> None:
    """RoPE on ``x [batch, seq, hidden]`` (``hidden = heads·head_dim``) read
    with row stride ``src_row_stride`` elements; dst is dense. In every head
    the first ``n_rot`` dims rotate, the rest are copied. cos/sin are f32
    tables (whatever ``dt``) ``[seq, n_rot/2]``, or ``[batch·seq, n_rot/2]``
    when ``cos_per_token``."""
    dt = fdt(t)
    b, s, hid, hd, nr = t["batch"], t["seq"], t["hidden"], t["head_dim"], t["n_rot"]
    stride = t.get("src_row_stride") or hid
    if hid % hd or nr % 2 or nr > hd:
        raise ValueError(f"[rope] bad geometry hidden={hid} head_dim={hd} n_rot={nr}")
    rows = b * s
    flat = mem.view(t["src"], (rows - 1) * stride + hid if rows else 0, dt)
    idx = np.arange(rows)[:, None] * stride + np.arange(hid)[None, :]
    x = flat[idx].astype(np.float64).reshape(b, s, hid // hd, hd)
    tab = (b * s) if t.get("cos_per_token") else s
    cos = mem.view(t["cos"], (tab, nr // 2), F32).astype(np.float64)
    sin = mem.view(t["sin"], (tab, nr // 2), F32).astype(np.float64)
    shape = (b, s, 1, nr // 2) if t.get("cos_per_token") else (1, s, 1, nr // 2)
    cos, sin = cos.reshape(shape), sin.reshape(shape)
    y = x.copy()
    y[..., :nr] = rotate(x[..., :nr], cos, sin, bool(t.get("interleaved")))
    store(mem.view(t["dst"], (b, s, hid), dt), y.reshape(b, s, hid))


def axial_angles(end_x: int, end_y: int, head_dim: int, theta: float) -> np.ndarray:
    """SAM 2 axial angles ``[end_x·end_y, head_dim/2]`` as float32 values.

    ``freq_i = f32(theta^(−4i/head_dim))`` for ``i < head_dim/4`` (computed in
    float64, rounded to f32); grid position ``p`` has ``x = p mod end_x``,
    ``y = p div end_x``; angles are ``f32(x·freq)`` then ``f32(y·freq)``
    (one f32 product each, as torch's f32 ``outer``)."""
    q = head_dim // 4
    i = np.arange(q, dtype=np.float64)
    freqs = np.power(np.float64(np.float32(theta)), -(4.0 * i) / head_dim).astype(np.float32)
    p = np.arange(end_x * end_y)
    tx = (p % end_x).astype(np.float32)
    ty = (p // end_x).astype(np.float32)
    return np.concatenate([np.outer(tx, freqs), np.outer(ty, freqs)], axis=1).astype(np.float32)


@reference("axial_rope2d_host")
def axial_rope2d_host(t: dict, mem: Memory) -> None:
    """SAM 2 axial RoPE on ``x [batch, seq, num_heads·head_dim]`` (f32).

    Pairs are interleaved ``(2i, 2i+1)``; pair ``i < head_dim/4`` rotates by
    the x-angle, the rest by the y-angle (:func:`axial_angles`; cos/sin of
    the f32 angle evaluated in float64). Token ``s`` uses grid position
    ``s mod (end_x·end_y)`` — ``repeat_factor`` copies of the grid along the
    sequence (SAM 2's ``repeat_freqs_k``)."""
    b, s, hid = t["batch"], t["seq"], t["hidden"]
    hd, nh = t["head_dim"], t["num_heads"]
    if nh * hd != hid or hd % 4:
        raise ValueError(f"[axial_rope2d] hidden {hid} != {nh}×{hd} or head_dim % 4")
    grid = t["end_x"] * t["end_y"]
    if s > grid * max(1, t.get("repeat_factor", 1)):
        raise ValueError(f"[axial_rope2d] seq {s} exceeds grid {grid} × repeat_factor")
    ang = axial_angles(t["end_x"], t["end_y"], hd, t["theta"]).astype(np.float64)
    ang = ang[np.arange(s) % grid][None, :, None, :]
    x = mem.view(t["src"], (b, s, nh, hd), F32).astype(np.float64)
    y = rotate(x, np.cos(ang), np.sin(ang), True)
    store(mem.view(t["dst"], (b, s, hid), F32), y.reshape(b, s, hid))


def _neox_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    return rotate(x, cos, sin, False)


@reference("fused_attn")
def fused_attn(t: dict, mem: Memory) -> None:
    """Fused attention core over packed QKV (f32): ``qkv [B, S, 3·inner]``
    (``inner = heads·head_dim``; q, k, v are consecutive ``inner`` slices,
    heads contiguous inside each) → ``out [B, S, inner]``.

    With ``has_rope``, q and k get NeoX (rotate-half) RoPE over the whole
    head with cos/sin ``[S, head_dim/2]`` f32. Then SDPA with ``heads`` =
    kv heads, ``mask_kind`` 0 none / 1 causal / 2 custom ``mask [B, S, S]``
    f32 (non-zero = visible). ``scale_bits`` is the f32 bit pattern of the
    score scale; 0 means ``1/√head_dim``."""
    b, s, h, d = t["batch"], t["seq"], t["heads"], t["head_dim"]
    inner = h * d
    qkv = mem.view(t["qkv"], (b, s, 3, h, d), F32).astype(np.float64)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    if t.get("has_rope"):
        cos = mem.view(t["cos"], (s, d // 2), F32).astype(np.float64)
        sin = mem.view(t["sin"], (s, d // 2), F32).astype(np.float64)
        q, k = _neox_rope(q, cos, sin), _neox_rope(k, cos, sin)
    bits = int(t.get("scale_bits", 0))
    scale = struct.unpack("<f", struct.pack("<I", bits))[0] if bits else 1.0 / math.sqrt(d)
    kind = t.get("mask_kind", 0)
    if kind == 2:
        visible = (mem.view(t["mask"], (b, s, s), F32) != 0)[:, None]
    elif kind in (0, 1):
        visible = _visible(kind, s, s, 0)
    else:
        raise ValueError(f"[fused_attn] unsupported mask kind {kind}")
    o = sdpa(q, k, v, scale, 0.0, visible, None)
    store(mem.view(t["out"], (b, s, inner), F32), o.transpose(0, 2, 1, 3).reshape(b, s, inner))
