"""Attention family, host vs reference and an independent numpy SDPA:
BSHD / BHSD, GQA ratios 1–4, odd head counts and head dims, every mask kind
(causal, none, custom, additive bias, sliding window shorter and longer than
the sequence), cached decode, score scale, softcap, f16; the fused attention
block; RoPE (NeoX / interleaved, partial, per-token tables)."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import pytest
import rlx
from _harness2 import check, rand

DTS = {"f32": np.float32, "f16": np.float16}


def np_sdpa(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    allowed: Optional[np.ndarray] = None,
    bias: Optional[np.ndarray] = None,
    softcap: Optional[float] = None,
) -> np.ndarray:
    """Plain SDPA over BHSD float64 arrays (kv heads repeated for GQA);
    ``allowed`` / ``bias`` broadcast to ``[b, h, s, kv]``; rows with no
    visible key give zeros."""
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    if softcap:
        s = softcap * np.tanh(s / softcap)
    if bias is not None:
        s = s + bias
    if allowed is not None:
        s = np.where(allowed, s, -np.inf)
    out = np.zeros(q.shape)
    for idx in np.ndindex(*s.shape[:3]):
        row = s[idx]
        if np.isneginf(row).all():
            continue
        p = np.exp(row - row.max())
        out[idx] = (p / p.sum()) @ v[idx[0], idx[1]]
    return out


def positions(seq: int, kv: int) -> tuple[np.ndarray, np.ndarray]:
    """Absolute query positions (cached decode) and key positions."""
    return (kv - seq + np.arange(seq))[:, None], np.arange(kv)[None, :]


def _attn_case(
    *,
    b: int = 2,
    s: int = 5,
    kv: Optional[int] = None,
    h: int = 4,
    kvh: Optional[int] = None,
    d: int = 8,
    layout: str = "bshd",
    mask: Optional[str] = "causal",
    window: int = 0,
    dt: str = "f32",
    score_scale: Optional[float] = None,
    softcap: Optional[float] = None,
    mask_shape: Optional[list[int]] = None,
    seed: int = 0,
) -> None:
    rng = np.random.default_rng(seed)
    kv = s if kv is None else kv
    kvh = h if kvh is None else kvh
    npdt = DTS[dt]
    if layout == "bshd":
        qs, ks = [b, s, h * d], [b, kv, kvh * d]
    else:
        qs, ks = [b, h, s, d], [b, kvh, kv, d]
    g = rlx.Graph("attn")
    q, k, v = g.input("q", qs, dt), g.input("k", ks, dt), g.input("v", ks, dt)
    qv, kvv, vv = rand(rng, qs, npdt), rand(rng, ks, npdt), rand(rng, ks, npdt)
    feeds = {"q": qv, "k": kvv, "v": vv}
    mnode = None
    allowed = bias = None
    if mask in ("custom", "bias"):
        mshape = mask_shape or ([b, 1, s, kv] if mask == "custom" else [b, h, s, kv])
        mnode = g.input("m", mshape, dt)
        if mask == "custom":
            mv = (rng.random(mshape) < 0.6).astype(npdt)
            allowed = np.broadcast_to(
                mv.reshape([1] * (4 - len(mshape)) + mshape) != 0, (b, h, s, kv)
            )
        else:
            mv = rand(rng, mshape, npdt)
            bias = mv.astype(np.float64)
        feeds["m"] = mv
    y = g.attention(
        q,
        k,
        v,
        heads=h,
        kv_heads=kvh,
        head_dim=d,
        mask=mask,
        window=window,
        layout=layout,
        score_scale=score_scale,
        softcap=softcap,
        mask_input=mnode,
        name="y",
    )
    g.outputs(y)
    qp, kp = positions(s, kv)
    if mask == "causal" and window == 0:
        allowed = kp <= qp
    elif mask in ("causal", "sliding_window"):
        allowed = (kp <= qp) & (qp - kp <= window)

    def bhsd(x: np.ndarray, nh: int) -> np.ndarray:
        x = x.astype(np.float64)
        if layout == "bhsd":
            return x
        return x.reshape(x.shape[0], x.shape[1], nh, d).transpose(0, 2, 1, 3)

    scale = score_scale if score_scale is not None else 1 / math.sqrt(d)
    o = np_sdpa(
        bhsd(qv, h),
        bhsd(kvv, kvh),
        bhsd(vv, kvh),
        scale=scale,
        allowed=allowed,
        bias=bias,
        softcap=softcap,
    )
    want = o if layout == "bhsd" else o.transpose(0, 2, 1, 3).reshape(qs)
    check(g, feeds, native=["attention"], expect=want)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("mask", ["causal", "none"])
def test_attention_layouts(layout: str, dt: str, mask: str) -> None:
    _attn_case(layout=layout, dt=dt, mask=mask)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("h,kvh", [(3, 3), (4, 2), (6, 2), (12, 3), (8, 2), (5, 1)])
def test_attention_gqa(layout: str, h: int, kvh: int) -> None:
    _attn_case(layout=layout, h=h, kvh=kvh, d=6, s=7, seed=h * 10 + kvh)


@pytest.mark.parametrize("d", [1, 3, 5, 13, 64, 80])
def test_attention_head_dims(d: int) -> None:
    _attn_case(d=d, h=3, s=6, seed=d)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("mask_shape", [None, [5, 7], [1, 5, 7], [1, 1, 5, 7], [2, 1, 1, 7]])
def test_attention_custom_mask(layout: str, mask_shape: Optional[list[int]]) -> None:
    _attn_case(layout=layout, mask="custom", s=5, kv=7, mask_shape=mask_shape, seed=3)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("mask_shape", [[2, 4, 5, 7], [4, 5, 7], [1, 4, 1, 7]])
def test_attention_custom_mask_per_head(layout: str, dt: str, mask_shape: list[int]) -> None:
    # a mask whose head axis is not 1 (right-aligned against [b, heads, s, kv])
    _attn_case(layout=layout, mask="custom", s=5, kv=7, h=4, kvh=2, mask_shape=mask_shape, dt=dt)


def test_attention_custom_mask_bool() -> None:
    rng = np.random.default_rng(8)
    b, s, h, d = 1, 4, 2, 4
    g = rlx.Graph("boolmask")
    q = g.input("q", [b, s, h * d])
    m = g.input("m", [s, s], "bool")
    g.outputs(g.attention(q, q, q, heads=h, mask="custom", mask_input=m, name="y"))
    qv = rand(rng, [b, s, h * d])
    mv = np.tril(np.ones((s, s), bool)) & (rng.random((s, s)) < 0.7)
    x = qv.astype(np.float64).reshape(b, s, h, d).transpose(0, 2, 1, 3)
    want = np_sdpa(x, x, x, scale=1 / math.sqrt(d), allowed=mv)
    check(
        g,
        {"q": qv, "m": mv},
        native=["attention"],
        expect=want.transpose(0, 2, 1, 3).reshape(b, s, h * d),
    )


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("mask_shape", [None, [1, 4, 5, 7], [5, 7], [2, 1, 5, 7]])
def test_attention_bias(dt: str, mask_shape: Optional[list[int]]) -> None:
    _attn_case(mask="bias", s=5, kv=7, dt=dt, mask_shape=mask_shape, seed=4)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("window", [1, 3, 6, 20])  # shorter and longer than the sequence
@pytest.mark.parametrize("kv", [9, 14])
def test_attention_sliding_window(layout: str, window: int, kv: int) -> None:
    _attn_case(layout=layout, mask="sliding_window", window=window, s=9, kv=kv, seed=window)


def test_attention_causal_window_alias() -> None:
    # mask="causal" with window > 0 is the sliding window
    _attn_case(mask="causal", window=2, s=6)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("mask", ["causal", "none", "sliding_window"])
@pytest.mark.parametrize("s,kv", [(1, 9), (3, 11)])
def test_attention_cached_decode(layout: str, mask: str, s: int, kv: int) -> None:
    _attn_case(layout=layout, mask=mask, s=s, kv=kv, window=4 if mask != "none" else 0, h=6, kvh=2)


@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_attention_score_scale_softcap(dt: str) -> None:
    _attn_case(dt=dt, score_scale=0.7, softcap=3.0, s=6, h=4, kvh=2)
    _attn_case(dt=dt, score_scale=0.05, s=6)
    _attn_case(dt=dt, softcap=1.5, mask="bias", s=4, kv=6)


def test_attention_f16_gqa_bhsd_window() -> None:
    _attn_case(
        dt="f16", layout="bhsd", h=6, kvh=3, d=10, s=7, kv=12, mask="sliding_window", window=3
    )


# ------------------------------------------------------------------ fused block
def _rope_neox(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    half = cos.shape[-1]
    a, c = x[..., :half], x[..., half : 2 * half]
    out = x.copy()
    out[..., :half] = a * cos - c * sin
    out[..., half : 2 * half] = a * sin + c * cos
    return out


@pytest.mark.parametrize("rope", [False, True])
@pytest.mark.parametrize("mask", ["causal", "none", "custom"])
def test_fused_attention_block(rope: bool, mask: str) -> None:
    rng = np.random.default_rng(7)
    b, s, hid, h, d = 2, 5, 12, 3, 6
    inner = h * d
    g = rlx.Graph("fab")
    x = g.input("x", [b, s, hid])
    wq, wo = g.param("w_qkv", [hid, 3 * inner]), g.param("w_out", [inner, hid])
    cos = sin = m = None
    feeds = {"x": rand(rng, [b, s, hid])}
    ang = rng.random((s, d // 2)) * 3
    if rope:
        cos, sin = g.input("cos", [s, d // 2]), g.input("sin", [s, d // 2])
        feeds["cos"], feeds["sin"] = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    if mask == "custom":
        m = g.input("m", [b, 1, s, s])
        feeds["m"] = (rng.random((b, 1, s, s)) < 0.5).astype(np.float32)
    g.outputs(
        g.fused_attention_block(
            x, wq, wo, heads=h, head_dim=d, cos=cos, sin=sin, mask=mask, mask_input=m, name="y"
        )
    )
    params = {
        "w_qkv": rand(rng, [hid, 3 * inner], scale=0.3),
        "w_out": rand(rng, [inner, hid], scale=0.3),
    }
    qkv = feeds["x"].astype(np.float64) @ params["w_qkv"].astype(np.float64)
    qkv = qkv.reshape(b, s, 3, h, d).transpose(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    if rope:
        c64, s64 = feeds["cos"].astype(np.float64), feeds["sin"].astype(np.float64)
        q, k = _rope_neox(q, c64, s64), _rope_neox(k, c64, s64)
    qp, kp = positions(s, s)
    allowed = {"causal": kp <= qp, "none": None, "custom": feeds.get("m", np.ones(1)) != 0}[mask]
    o = np_sdpa(q, k, v, scale=1 / math.sqrt(d), allowed=allowed)
    want = o.transpose(0, 2, 1, 3).reshape(b, s, inner) @ params["w_out"].astype(np.float64)
    check(g, feeds, params, native=["sgemm", "fused_attn"], expect=want)


# ------------------------------------------------------------------------ rope
@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("kind", ["neox", "interleaved"])
@pytest.mark.parametrize("d,n_rot", [(8, 8), (10, 4), (6, 2), (16, 10)])
@pytest.mark.parametrize("per_token", [False, True])
def test_rope(dt: str, kind: str, d: int, n_rot: int, per_token: bool) -> None:
    rng = np.random.default_rng(d * 100 + n_rot)
    b, s, h = 2, 5, 3
    g = rlx.Graph("rope")
    x = g.input("x", [b, s, h * d], dt)
    rows = b * s if per_token else s
    cos, sin = g.input("cos", [rows, n_rot // 2], dt), g.input("sin", [rows, n_rot // 2], dt)
    g.outputs(
        g.rope(x, cos, sin, head_dim=d, n_rot=n_rot, kind=kind, per_token=per_token, name="y")
    )
    xv = rand(rng, [b, s, h * d], DTS[dt])
    ang = rng.random((rows, n_rot // 2)) * 6
    cv, sv = np.cos(ang).astype(DTS[dt]), np.sin(ang).astype(DTS[dt])
    # independent formula: complex rotation of each pair
    xx = xv.astype(np.float64).reshape(b, s, h, d)
    c = cv.astype(np.float64).reshape((b, s, 1, -1) if per_token else (1, s, 1, -1))
    sn = sv.astype(np.float64).reshape(c.shape)
    half = n_rot // 2
    if kind == "neox":
        z = xx[..., :half] + 1j * xx[..., half:n_rot]
    else:
        z = xx[..., 0:n_rot:2] + 1j * xx[..., 1:n_rot:2]
    z = z * (c + 1j * sn)
    want = xx.copy()
    if kind == "neox":
        want[..., :half], want[..., half:n_rot] = z.real, z.imag
    else:
        want[..., 0:n_rot:2], want[..., 1:n_rot:2] = z.real, z.imag
    check(g, {"x": xv, "cos": cv, "sin": sv}, native=["rope"], expect=want.reshape(b, s, h * d))
