"""Attention / RoPE references vs explicit per-query loops with mask
matrices built from absolute positions."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from _mem import Arena, npdt, rng, tol


def _ref_attn(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    allowed: np.ndarray,
    scale: float,
    cap: float = 0.0,
    bias: np.ndarray | None = None,
) -> np.ndarray:
    """q [B,H,S,D], k/v [B,KVH,KV,D], allowed [B,H,S,KV] → [B,H,S,D] by loops."""
    b_, h_, s_, d_ = q.shape
    kvh = k.shape[1]
    out = np.zeros(q.shape)
    for b in range(b_):
        for h in range(h_):
            g = h // (h_ // kvh)
            for i in range(s_):
                sc = []
                for j in range(k.shape[2]):
                    z = (
                        math.fsum(float(q[b, h, i, e]) * float(k[b, g, j, e]) for e in range(d_))
                        * scale
                    )
                    if cap:
                        z = cap * math.tanh(z / cap)
                    if bias is not None:
                        z += float(bias[b, h, i, j])
                    sc.append(z if allowed[b, h, i, j] else None)
                live = [z for z in sc if z is not None]
                if not live:
                    continue
                m = max(live)
                w = [math.exp(z - m) if z is not None else 0.0 for z in sc]
                tot = math.fsum(w)
                for e in range(d_):
                    out[b, h, i, e] = (
                        math.fsum(w[j] * float(v[b, g, j, e]) for j in range(len(w))) / tot
                    )
    return out


def _allowed(kind: int, b: int, h: int, s: int, kv: int, window: int) -> np.ndarray:
    m = np.ones((b, h, s, kv), bool)
    for i in range(s):
        pos = kv - s + i
        for j in range(kv):
            if kind == 1:
                m[..., i, j] = j <= pos
            elif kind == 4:
                m[..., i, j] = j <= pos and pos - j <= window
    return m


def _place(a: Arena, x: np.ndarray, bhsd: bool) -> int:
    """x is BHSD; store it in the requested layout."""
    if bhsd:
        return a.put(x)
    b, h, s, d = x.shape
    return a.put(x.transpose(0, 2, 1, 3).reshape(b, s, h * d))


def _run(
    dt: str,
    b: int,
    s: int,
    kv: int,
    h: int,
    kvh: int,
    d: int,
    kind: int,
    bhsd: bool,
    window: int = 0,
    scale: float = 0.0,
    cap: float = 0.0,
    mask: np.ndarray | None = None,
    seed: int = 40,
) -> tuple[np.ndarray, np.ndarray]:
    r = rng(seed)
    q = r.normal(size=(b, h, s, d)).astype(npdt(dt))
    k = r.normal(size=(b, kvh, kv, d)).astype(npdt(dt))
    v = r.normal(size=(b, kvh, kv, d)).astype(npdt(dt))
    a = Arena()
    qo, ko, vo = _place(a, q, bhsd), _place(a, k, bhsd), _place(a, v, bhsd)
    mo = a.put(mask.astype(npdt(dt))) if mask is not None else 0
    oo = a.out(b * h * s * d, npdt(dt))
    a.run(
        {
            "name": "attention",
            "q": qo,
            "k": ko,
            "v": vo,
            "mask": mo,
            "out": oo,
            "batch": b,
            "seq": s,
            "kv_seq": kv,
            "heads": h,
            "kv_heads": kvh,
            "head_dim": d,
            "mask_kind": kind,
            "window": window,
            "dt": dt,
            "bhsd": int(bhsd),
            "score_scale": scale,
            "attn_logit_softcap": cap,
        }
    )
    got = a.get(oo).astype(np.float64)
    got = got.reshape(b, h, s, d) if bhsd else got.reshape(b, s, h, d).transpose(0, 2, 1, 3)
    eff = scale if scale else 1 / math.sqrt(d)
    if kind == 2:
        allowed = np.broadcast_to((mask != 0)[:, None], (b, h, s, kv))
        want = _ref_attn(q, k, v, allowed, eff, cap)
    elif kind == 3:
        want = _ref_attn(
            q, k, v, np.ones((b, h, s, kv), bool), eff, cap, bias=mask.astype(npdt(dt))
        )
    else:
        want = _ref_attn(q, k, v, _allowed(kind, b, h, s, kv, window), eff, cap)
    return got, want


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("bhsd", [False, True])
@pytest.mark.parametrize("h,kvh", [(3, 3), (6, 3), (4, 1), (12, 3)])  # GQA 1, 2, 4, 4
@pytest.mark.parametrize("kind", [0, 1])
def test_attention_prefill(kind: int, h: int, kvh: int, bhsd: bool, dt: str) -> None:
    got, want = _run(dt, 2, 5, 5, h, kvh, 3, kind, bhsd)
    np.testing.assert_allclose(got, want, **tol(dt))


@pytest.mark.parametrize("bhsd", [False, True])
@pytest.mark.parametrize("s,kv", [(1, 7), (3, 7), (2, 13)])
@pytest.mark.parametrize("kind", [1, 4])
def test_attention_cached_decode(kind: int, s: int, kv: int, bhsd: bool) -> None:
    got, want = _run("f32", 2, s, kv, 4, 2, 5, kind, bhsd, window=3)
    np.testing.assert_allclose(got, want, **tol("f32"))


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("window", [0, 2, 4, 20])  # shorter than and longer than seq=7
def test_attention_sliding_window(window: int, dt: str) -> None:
    got, want = _run(dt, 1, 7, 7, 2, 1, 3, 4, False, window=window)
    np.testing.assert_allclose(got, want, **tol(dt))
    if window >= 7:  # a window past the sequence is plain causal
        causal, _ = _run(dt, 1, 7, 7, 2, 1, 3, 1, False)
        np.testing.assert_array_equal(got, causal)


def test_sliding_window_differs_from_causal() -> None:
    got, _ = _run("f32", 1, 7, 7, 2, 1, 3, 4, False, window=2)
    causal, _ = _run("f32", 1, 7, 7, 2, 1, 3, 1, False)
    assert not np.allclose(got[..., 3:, :], causal[..., 3:, :])
    np.testing.assert_allclose(got[..., :3, :], causal[..., :3, :], atol=1e-6)


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("bhsd", [False, True])
def test_attention_custom_mask_with_fully_masked_row(bhsd: bool, dt: str) -> None:
    b, s, kv = 2, 3, 5
    mask = (rng(41).uniform(size=(b, s, kv)) > 0.4).astype(np.float32)
    mask[1, 2, :] = 0  # fully masked query row → zeros
    mask[0, 0, :] = 0
    mask[0, 0, 4] = 1
    got, want = _run(dt, b, s, kv, 4, 2, 3, 2, bhsd, mask=mask)
    np.testing.assert_allclose(got, want, **tol(dt))
    assert (got[1, :, 2, :] == 0).all()


@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_attention_bias(dt: str) -> None:
    b, h, s, kv = 2, 3, 3, 4
    bias = rng(42).normal(size=(b, h, s, kv)).astype(np.float32)
    bias[0, 1, 2, 1] = -np.inf
    got, want = _run(dt, b, s, kv, h, 3, 5, 3, True, mask=bias)
    np.testing.assert_allclose(got, want, **tol(dt))


@pytest.mark.parametrize("scale,cap", [(1.0, 0.0), (0.0, 2.0), (0.7, 1.5)])
def test_attention_scale_and_softcap(scale: float, cap: float) -> None:
    got, want = _run("f32", 1, 4, 6, 2, 2, 8, 1, False, scale=scale, cap=cap, seed=43)
    np.testing.assert_allclose(got, want, **tol("f32"))


# ------------------------------------------------------------------ rope


def _rope_loop(
    x: np.ndarray,
    cos: np.ndarray,
    sin: np.ndarray,
    heads: int,
    hd: int,
    n_rot: int,
    interleaved: bool,
    per_token: bool,
) -> np.ndarray:
    b_, s_, _ = x.shape
    out = x.astype(np.float64).copy()
    half = n_rot // 2
    for b in range(b_):
        for s in range(s_):
            row = b * s_ + s if per_token else s
            for h in range(heads):
                base = h * hd
                for i in range(half):
                    ia, ib = (
                        (base + 2 * i, base + 2 * i + 1)
                        if interleaved
                        else (base + i, base + i + half)
                    )
                    c, sn = float(cos[row, i]), float(sin[row, i])
                    p, q = float(x[b, s, ia]), float(x[b, s, ib])
                    out[b, s, ia] = p * c - q * sn
                    out[b, s, ib] = p * sn + q * c
    return out


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize(
    "n_rot,per_token,extra", [(6, False, 0), (4, False, 5), (6, True, 0), (2, True, 3)]
)
def test_rope(n_rot: int, per_token: bool, extra: int, interleaved: bool, dt: str) -> None:
    b, s, heads, hd = 2, 3, 3, 6
    hid = heads * hd
    stride = hid + extra  # rows read out of a wider parent (e.g. fused QKV)
    r = rng(44)
    parent = r.normal(size=(b, s, stride)).astype(npdt(dt))
    rows = b * s if per_token else s
    ang = r.uniform(-3, 3, size=(rows, n_rot // 2))
    # tables are f32 whatever dt (thunk doc of Rope)
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    a = Arena()
    so, co, sio = a.put(parent), a.put(cos), a.put(sin)
    do = a.out((b, s, hid), npdt(dt))
    a.run(
        {
            "name": "rope",
            "src": so,
            "cos": co,
            "sin": sio,
            "dst": do,
            "batch": b,
            "seq": s,
            "hidden": hid,
            "head_dim": hd,
            "n_rot": n_rot,
            "dt": dt,
            "src_row_stride": stride,
            "cos_per_token": per_token,
            "interleaved": interleaved,
        }
    )
    want = _rope_loop(parent[:, :, :hid], cos, sin, heads, hd, n_rot, interleaved, per_token)
    np.testing.assert_allclose(a.get(do).astype(float), want, **tol(dt))


def test_axial_rope2d_matches_sam2_complex_form() -> None:
    b, heads, hd, ex, ey, rep = 2, 2, 8, 3, 2, 2
    s = ex * ey * rep
    theta = 10000.0
    x = rng(45).normal(size=(b, s, heads * hd)).astype(np.float32)
    a = Arena()
    so, do = a.put(x), a.out((b, s, heads * hd))
    a.run(
        {
            "name": "axial_rope2d_host",
            "src": so,
            "dst": do,
            "batch": b,
            "seq": s,
            "hidden": heads * hd,
            "end_x": ex,
            "end_y": ey,
            "head_dim": hd,
            "num_heads": heads,
            "theta": theta,
            "repeat_factor": rep,
        }
    )
    # SAM 2 compute_axial_cis: freqs over arange(0, dim, 4)[:dim//4]; t_x = i % end_x,
    # t_y = i // end_x; cis = cat(polar(outer(t_x, f)), polar(outer(t_y, f))); keys
    # repeat the table `rep` times; applied as complex multiply on (even, odd) pairs.
    freqs = 1.0 / (theta ** (np.arange(0, hd, 4)[: hd // 4].astype(np.float64) / hd))
    pos = np.arange(ex * ey)
    cis = np.concatenate(
        [np.exp(1j * np.outer(pos % ex, freqs)), np.exp(1j * np.outer(pos // ex, freqs))], axis=1
    )
    cis = np.tile(cis, (rep, 1))
    xc = x.astype(np.float64).reshape(b, s, heads, hd // 2, 2)
    z = (xc[..., 0] + 1j * xc[..., 1]) * cis[None, :, None, :]
    want = np.stack([z.real, z.imag], -1).reshape(b, s, heads * hd)
    np.testing.assert_allclose(a.get(do), want, **tol("f32"))


@pytest.mark.parametrize("has_rope", [0, 1])
@pytest.mark.parametrize("mask_kind", [0, 1, 2])
@pytest.mark.parametrize("scale", [0.0, 0.5])
def test_fused_attn(has_rope: int, mask_kind: int, scale: float) -> None:
    b, s, h, d = 2, 5, 3, 4
    inner = h * d
    r = rng(46)
    qkv = r.normal(size=(b, s, 3 * inner)).astype(np.float32)
    ang = r.uniform(-2, 2, size=(s, d // 2))
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    mask = (r.uniform(size=(b, s, s)) > 0.3).astype(np.float32)
    a = Arena()
    qo, mo, co, sio, oo = a.put(qkv), a.put(mask), a.put(cos), a.put(sin), a.out((b, s, inner))
    bits = struct.unpack("<I", struct.pack("<f", scale))[0]
    a.run(
        {
            "name": "fused_attn",
            "qkv": qo,
            "mask": mo,
            "cos": co,
            "sin": sio,
            "out": oo,
            "batch": b,
            "seq": s,
            "heads": h,
            "head_dim": d,
            "mask_kind": mask_kind,
            "scale_bits": bits,
            "has_rope": has_rope,
        }
    )
    q, k, v = qkv[..., :inner], qkv[..., inner : 2 * inner], qkv[..., 2 * inner :]
    if has_rope:
        q = _rope_loop(q, cos, sin, h, d, d, False, False)
        k = _rope_loop(k, cos, sin, h, d, d, False, False)

    def bhsd(x: np.ndarray) -> np.ndarray:
        return x.reshape(b, s, h, d).transpose(0, 2, 1, 3)

    if mask_kind == 2:
        allowed = np.broadcast_to((mask != 0)[:, None], (b, h, s, s))
    else:
        allowed = _allowed(mask_kind, b, h, s, s, 0)
    want = _ref_attn(bhsd(q), bhsd(k), bhsd(v), allowed, scale or 1 / math.sqrt(d))
    want = want.transpose(0, 2, 1, 3).reshape(b, s, inner)
    np.testing.assert_allclose(a.get(oo), want, **tol("f32"))
