"""Every gradient thunk against central finite differences (float64) of the
matching forward written here. Thunk buffers are f32, so the comparison is at
rtol 1e-5 / atol 1e-5 (the reference computes in f64 and rounds once)."""

from __future__ import annotations

import numpy as np
import pytest
from _mem2 import Arena, fd_grad
from rlx.reference import run_thunk

R = np.random.default_rng


def f32(x: np.ndarray) -> np.ndarray:
    """Round to f32 and back, so the FD forward sees exactly the thunk's inputs."""
    return np.asarray(x, np.float32).astype(np.float64)


def run(t: dict, a: Arena, out: str, shape: tuple[int, ...]) -> np.ndarray:
    run_thunk(t, a.build())
    return a.read(t[out], shape).astype(np.float64)


def close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- attention
def attn_fwd(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """q [b, h, s, d], k/v [b, h, kv, d], additive mask [.., s, kv]."""
    s = np.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(q.shape[-1]) + mask
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhij,bhjd->bhid", p, v)


@pytest.mark.parametrize("mask_kind", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("bhsd", [0, 1])
def test_attention_bwd(mask_kind: int, bhsd: int) -> None:
    rng = R(mask_kind + 10 * bhsd)
    b, h, s, kv, d, window = 2, 2, 3, 5, 4, 2
    q, k, v, dy = (
        f32(rng.standard_normal(sh))
        for sh in ((b, h, s, d), (b, h, kv, d), (b, h, kv, d), (b, h, s, d))
    )
    custom = f32(rng.standard_normal((b, h, s, kv)))
    if mask_kind == 2:
        custom = (rng.uniform(size=(b, h, s, kv)) > 0.4).astype(np.float64)
        custom[..., 0] = 1.0  # every row keeps one key
    absq = np.arange(s)[:, None] + kv - s
    j = np.arange(kv)[None]
    add = {
        0: np.zeros((s, kv)),
        1: np.where(j <= absq, 0, -np.inf),
        2: np.where(custom != 0, 0, -np.inf),
        3: custom,
        4: np.where((j <= absq) & (absq - j <= window), 0, -np.inf),
    }[mask_kind]

    def lay(x: np.ndarray) -> np.ndarray:
        return x if bhsd else x.transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[2], -1)

    for wrt, name in enumerate("qkv"):
        a = Arena()
        tgt = {"q": q, "k": k, "v": v}[name]
        t = dict(
            name="attention_bwd",
            q=a.put(lay(q).astype(np.float32)),
            k=a.put(lay(k).astype(np.float32)),
            v=a.put(lay(v).astype(np.float32)),
            dy=a.put(lay(dy).astype(np.float32)),
            batch=b,
            seq=s,
            kv_seq=kv,
            heads=h,
            head_dim=d,
            mask_kind=mask_kind,
            window=window,
            wrt=wrt,
            bhsd=bhsd,
        )
        t["mask"] = a.put(custom.astype(np.float32)) if mask_kind in (2, 3) else t["q"]
        t["out"] = a.out(lay(tgt).shape)
        got = run(t, a, "out", lay(tgt).shape)

        def loss(x: np.ndarray, name: str = name) -> float:
            ops = {"q": q, "k": k, "v": v, name: x}
            return float(np.sum(attn_fwd(ops["q"], ops["k"], ops["v"], add) * dy))

        close(got, lay(fd_grad(loss, tgt)))


# ---------------------------------------------------------------- rms norm
def test_rms_norm_backward() -> None:
    rng = R(1)
    rows, h, eps = 4, 7, 1e-5
    x, g, bt, dy = (
        f32(rng.standard_normal((rows, h))),
        f32(rng.standard_normal(h)),
        f32(rng.standard_normal(h)),
        f32(rng.standard_normal((rows, h))),
    )

    def fwd(x: np.ndarray, g: np.ndarray, bt: np.ndarray) -> float:
        y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g + bt
        return float(np.sum(y * dy))

    a = Arena()
    base = dict(
        x=a.put(x.astype(np.float32)),
        gamma=a.put(g.astype(np.float32)),
        beta=a.put(bt.astype(np.float32)),
        dy=a.put(dy.astype(np.float32)),
        rows=rows,
        h=h,
        eps=eps,
    )
    dxo, dgo, dbo = a.out((rows, h)), a.out(h), a.out(h)
    mem = a.build()
    run_thunk(dict(name="rms_norm_backward_input", dx=dxo, **base), mem)
    run_thunk(dict(name="rms_norm_backward_gamma", dgamma=dgo, **base), mem)
    run_thunk(dict(name="rms_norm_backward_beta", dbeta=dbo, **base), mem)
    close(a.read(dxo, (rows, h)), fd_grad(lambda v: fwd(v, g, bt), x))
    close(a.read(dgo, h), fd_grad(lambda v: fwd(x, v, bt), g))
    close(a.read(dbo, h), fd_grad(lambda v: fwd(x, g, v), bt))


# ---------------------------------------------------------------- rope
@pytest.mark.parametrize("per_token", [False, True])
@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_backward(per_token: bool, interleaved: bool) -> None:
    rng = R(2)
    b, s, heads, hd, nr = 2, 3, 2, 6, 4
    rows = b * s if per_token else s + 2  # a longer position table: only the first s rows are used
    ang = rng.uniform(0, 6, (rows, nr // 2))
    cos, sin = f32(np.cos(ang)), f32(np.sin(ang))
    x, dy = (
        f32(rng.standard_normal((b, s, heads * hd))),
        f32(rng.standard_normal((b, s, heads * hd))),
    )

    def fwd(x: np.ndarray) -> float:
        y = x.reshape(b, s, heads, hd).copy()
        xr = x.reshape(b, s, heads, hd)
        for bi in range(b):
            for si in range(s):
                r = bi * s + si if per_token else si
                for i in range(nr // 2):
                    ia, ib = (2 * i, 2 * i + 1) if interleaved else (i, i + nr // 2)
                    xa, xb = xr[bi, si, :, ia], xr[bi, si, :, ib]
                    y[bi, si, :, ia] = xa * cos[r, i] - xb * sin[r, i]
                    y[bi, si, :, ib] = xa * sin[r, i] + xb * cos[r, i]
        return float(np.sum(y.reshape(x.shape) * dy))

    a = Arena()
    t = dict(
        name="rope_backward",
        dy=a.put(dy.astype(np.float32)),
        cos=a.put(cos.astype(np.float32)),
        sin=a.put(sin.astype(np.float32)),
        dx=a.out(x.shape),
        batch=b,
        seq=s,
        hidden=heads * hd,
        head_dim=hd,
        n_rot=nr,
        cos_len=rows * nr // 2,
        interleaved=interleaved,
    )
    close(run(t, a, "dx", x.shape), fd_grad(fwd, x))


# ---------------------------------------------------------------- cumsum / gather
@pytest.mark.parametrize("exclusive", [False, True])
def test_cumsum_backward(exclusive: bool) -> None:
    rng = R(3)
    r, c = 3, 6
    x, dy = f32(rng.standard_normal((r, c))), f32(rng.standard_normal((r, c)))

    def fwd(x: np.ndarray) -> float:
        y = np.cumsum(x, 1)
        return float(np.sum((y - x if exclusive else y) * dy))

    a = Arena()
    t = dict(
        name="cumsum_backward",
        dy=a.put(dy.astype(np.float32)),
        dx=a.out((r, c)),
        rows=r,
        cols=c,
        exclusive=exclusive,
    )
    close(run(t, a, "dx", (r, c)), fd_grad(fwd, x))


def test_gather_backward() -> None:
    rng = R(4)
    outer, axis_dim, tr = 2, 5, 3
    idx = np.array([4, 0, 4, -1, 2, 9], np.int32)  # repeats, a negative and an out-of-range index
    ni = idx.size
    x, dy = (
        f32(rng.standard_normal((outer, axis_dim, tr))),
        f32(rng.standard_normal((outer, ni, tr))),
    )

    def fwd(x: np.ndarray) -> float:
        acc = 0.0
        for o in range(outer):
            for n, i in enumerate(idx):
                i = i + axis_dim if i < 0 else i
                if 0 <= i < axis_dim:
                    acc += float(np.sum(x[o, i] * dy[o, n]))
        return acc

    a = Arena()
    t = dict(
        name="gather_backward",
        dy=a.put(dy.astype(np.float32)),
        indices=a.put(idx),
        dst=a.out(x.shape),
        outer=outer,
        axis_dim=axis_dim,
        num_idx=ni,
        trailing=tr,
    )
    close(run(t, a, "dst", x.shape), fd_grad(fwd, x))


# ---------------------------------------------------------------- pooling / conv
def test_maxpool2d_backward() -> None:
    rng = R(5)
    n, c, h, w, kh, kw, sh, sw, ph, pw = 2, 2, 5, 6, 3, 2, 2, 2, 1, 1
    ho, wo = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    x = f32(rng.permutation(n * c * h * w).reshape(n, c, h, w) * 0.1)  # distinct values: no ties
    dy = f32(rng.standard_normal((n, c, ho, wo)))

    def fwd(x: np.ndarray) -> float:
        xp = np.full((n, c, h + 2 * ph, w + 2 * pw), -np.inf)
        xp[:, :, ph : ph + h, pw : pw + w] = x
        acc = 0.0
        for i in range(ho):
            for j in range(wo):
                acc += float(
                    np.sum(
                        xp[:, :, i * sh : i * sh + kh, j * sw : j * sw + kw].max((2, 3))
                        * dy[:, :, i, j]
                    )
                )
        return acc

    a = Arena()
    t = dict(
        name="maxpool2d_backward",
        x=a.put(x.astype(np.float32)),
        dy=a.put(dy.astype(np.float32)),
        dx=a.out(x.shape),
        n=n,
        c=c,
        h=h,
        w=w,
        h_out=ho,
        w_out=wo,
        kh=kh,
        kw=kw,
        sh=sh,
        sw=sw,
        ph=ph,
        pw=pw,
    )
    close(run(t, a, "dx", x.shape), fd_grad(fwd, x, h=1e-4))


def conv_fwd(x: np.ndarray, w: np.ndarray, st: tuple, pad: tuple, dil: tuple, g: int) -> np.ndarray:
    n, ci, h, wi = x.shape
    co, cig, kh, kw = w.shape
    ho = (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // st[0] + 1
    wo = (wi + 2 * pad[1] - dil[1] * (kw - 1) - 1) // st[1] + 1
    xp = np.zeros((n, ci, h + 2 * pad[0], wi + 2 * pad[1]))
    xp[:, :, pad[0] : pad[0] + h, pad[1] : pad[1] + wi] = x
    y = np.zeros((n, co, ho, wo))
    cog = co // g
    for o in range(co):
        gi = o // cog
        for i in range(ho):
            for j in range(wo):
                for a in range(kh):
                    for b in range(kw):
                        patch = xp[
                            :,
                            gi * cig : (gi + 1) * cig,
                            i * st[0] + a * dil[0],
                            j * st[1] + b * dil[1],
                        ]
                        y[:, o, i, j] += patch @ w[o, :, a, b]
    return y


@pytest.mark.parametrize("groups", [1, 2])
def test_conv2d_backward(groups: int) -> None:
    rng = R(6)
    n, ci, h, wi, co, kh, kw = 2, 4, 6, 5, 6, 3, 2
    st, pad, dil = (2, 1), (1, 2), (1, 2)
    x = f32(rng.standard_normal((n, ci, h, wi)))
    w = f32(rng.standard_normal((co, ci // groups, kh, kw)))
    y = conv_fwd(x, w, st, pad, dil, groups)
    ho, wo = y.shape[2:]
    dy = f32(rng.standard_normal(y.shape))
    geo = dict(
        n=n,
        c_in=ci,
        h=h,
        c_out=co,
        h_out=ho,
        w_out=wo,
        kh=kh,
        kw=kw,
        sh=st[0],
        sw=st[1],
        ph=pad[0],
        pw=pad[1],
        dh=dil[0],
        groups=groups,
    )
    a = Arena()
    dyo = a.put(dy.astype(np.float32))
    ti = dict(
        name="conv2d_backward_input",
        dy=dyo,
        w=a.put(w.astype(np.float32)),
        dx=a.out(x.shape),
        w_in=wi,
        dw=dil[1],
        **geo,
    )
    tw = dict(
        name="conv2d_backward_weight",
        x=a.put(x.astype(np.float32)),
        dy=dyo,
        dw=a.out(w.shape),
        w=wi,
        dw_dil=dil[1],
        **geo,
    )
    mem = a.build()
    run_thunk(ti, mem)
    run_thunk(tw, mem)
    close(
        a.read(ti["dx"], x.shape),
        fd_grad(lambda v: float(np.sum(conv_fwd(v, w, st, pad, dil, groups) * dy)), x),
    )
    close(
        a.read(tw["dw"], w.shape),
        fd_grad(lambda v: float(np.sum(conv_fwd(x, v, st, pad, dil, groups) * dy)), w),
    )


# ---------------------------------------------------------------- DiT modulation
@pytest.mark.parametrize("layer_norm", [True, False])
def test_ada_layer_norm_backward(layer_norm: bool) -> None:
    rng = R(7)
    mods, seq, h, eps = 2, 3, 5, 1e-5
    x, sc, sft, g = (
        f32(rng.standard_normal(s)) for s in ((mods, seq, h), (mods, h), (mods, h), (mods, seq, h))
    )

    def fwd(x: np.ndarray, sc: np.ndarray, sft: np.ndarray) -> float:
        xc = x - x.mean(-1, keepdims=True) if layer_norm else x
        nrm = xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps)
        return float(np.sum((nrm * (1 + sc[:, None]) + sft[:, None]) * g))

    a = Arena()
    total = mods * seq * h + 2 * mods * h
    t = dict(
        name="ada_layer_norm_backward",
        x=a.put(x.astype(np.float32)),
        scale=a.put(sc.astype(np.float32)),
        dy=a.put(g.astype(np.float32)),
        out=a.out(total),
        h=h,
        eps=eps,
        layer_norm=layer_norm,
        seq_per_mod=seq,
        mod_rows=mods,
    )
    got = run(t, a, "out", (total,))
    want = np.concatenate(
        [
            fd_grad(lambda v: fwd(v, sc, sft), x).ravel(),
            fd_grad(lambda v: fwd(x, v, sft), sc).ravel(),
            fd_grad(lambda v: fwd(x, sc, v), sft).ravel(),
        ]
    )
    close(got, want)


def test_gated_residual_backward() -> None:
    rng = R(8)
    mods, seq, h = 2, 3, 4
    x, y, gate, g = (
        f32(rng.standard_normal(s))
        for s in ((mods, seq, h), (mods, seq, h), (mods, h), (mods, seq, h))
    )

    def fwd(x: np.ndarray, y: np.ndarray, gate: np.ndarray) -> float:
        return float(np.sum((x + gate[:, None] * y) * g))

    a = Arena()
    total = 2 * mods * seq * h + mods * h
    t = dict(
        name="gated_residual_backward",
        y=a.put(y.astype(np.float32)),
        gate=a.put(gate.astype(np.float32)),
        dy=a.put(g.astype(np.float32)),
        out=a.out(total),
        h=h,
        seq_per_mod=seq,
        mod_rows=mods,
    )
    got = run(t, a, "out", (total,))
    want = np.concatenate(
        [
            fd_grad(lambda v: fwd(v, y, gate), x).ravel(),
            fd_grad(lambda v: fwd(x, v, gate), y).ravel(),
            fd_grad(lambda v: fwd(x, y, v), gate).ravel(),
        ]
    )
    close(got, want)


# ---------------------------------------------------------------- cross-entropy
def test_softmax_cross_entropy_backward() -> None:
    rng = R(9)
    n, c = 4, 7
    z, dl = f32(rng.standard_normal((n, c))), f32(rng.standard_normal(n))
    lab = np.array([3, 0, -100, 6], np.int32)  # -100: ignored row

    def fwd(z: np.ndarray) -> float:
        acc = 0.0
        for i in range(n):
            if 0 <= lab[i] < c:
                acc += dl[i] * (np.log(np.sum(np.exp(z[i]))) - z[i, lab[i]])
        return acc

    a = Arena()
    t = dict(
        name="softmax_cross_entropy_backward",
        logits=a.put(z.astype(np.float32)),
        labels=a.put(lab),
        d_loss=a.put(dl.astype(np.float32)),
        dlogits=a.out((n, c)),
        n=n,
        c=c,
    )
    close(run(t, a, "dlogits", (n, c)), fd_grad(fwd, z))
