"""The ``*_backward`` IR ops compiled to their gradient thunks, on odd sizes.

Three checks per op (and per ``wrt``):

1. The numpy forward written here (float64) is the rlx forward op: it
   matches ``g.<forward>`` run on the host (max error ≤ 1e-5·max|y|), so the
   finite differences below are those of the op rlx runs.
2. The gradient op on ``device="reference"`` equals central finite
   differences (step 1e-6, float64) of that forward, contracted with a
   random upstream gradient: ``max|got − fd| ≤ 1e-6·max|fd|``. Inputs are
   f32 values, the reference computes in f64 and rounds its result to f32
   once (the ops' thunks are f32), so the bound holds with margin.
3. host (native kernels) and metal-sim (backward.metal through msl-sim)
   against the reference: ``max|got − ref| ≤ 1e-4·max|ref|``; the gradient
   thunk is native on the host and a Metal dispatch, never a host command.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pytest
import rlx

R = np.random.default_rng
F32 = np.float32
A = np.ndarray


def f32(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, F32)


def run(g: rlx.Graph, device: str, feeds: dict) -> np.ndarray:
    exe = rlx.compile(g, device=device)
    if device == "metal-sim":
        bad = {k for k in exe.stats["metal_host_by_thunk"] if k.endswith("backward") or "bwd" in k}
        assert not bad, exe.report()
    if device == "host":
        bad = {k for k in exe.stats["fallback_by_thunk"] if "backward" in k or "bwd" in k}
        assert not bad, exe.report()
    (out,) = exe.run(**{k: v for k, v in feeds.items() if k in exe.inputs}).values()
    return np.asarray(out, np.float64)


def fd_grad(f: Callable[[np.ndarray], np.ndarray], x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """Central differences of ``Σ dy·f(x)`` w.r.t. every element of ``x`` (f64)."""
    x = np.asarray(x, np.float64)
    g = np.zeros(x.size)
    h = 1e-6
    flat = x.reshape(-1)
    for i in range(x.size):
        p, m = flat.copy(), flat.copy()
        p[i] += h
        m[i] -= h
        g[i] = ((f(p.reshape(x.shape)) - f(m.reshape(x.shape))) * dy).sum() / (2 * h)
    return g.reshape(x.shape)


def check(
    build_fwd: Callable[[rlx.Graph], rlx.Node] | None,
    build_bwd: Callable[[rlx.Graph], rlx.Node],
    feeds: dict,
    fwd_np: Callable[..., np.ndarray],
    wrt: list[str],
    dy: np.ndarray,
    fd: bool = True,
) -> None:
    """``feeds`` holds every input (f32 / int32); ``fwd_np(**feeds)`` the f64 forward;
    the gradient op's result is the packed concatenation of the gradients of
    ``wrt`` (flattened) when there are several."""
    args = {
        k: (np.asarray(v, np.float64) if v.dtype == F32 else v)
        for k, v in feeds.items()
        if k != "dy"
    }
    if build_fwd is not None:
        g = rlx.Graph("fwd")
        g.outputs(build_fwd(g))
        y = run(g, "host", feeds)
        want = fwd_np(**args)
        assert np.abs(y - want).max() <= 1e-5 * max(np.abs(want).max(), 1.0)
    g = rlx.Graph("bwd")
    g.outputs(build_bwd(g))
    ref = run(g, "reference", feeds)
    if fd:
        parts = []
        for name in wrt:

            def f(v: np.ndarray, name: str = name) -> np.ndarray:
                return fwd_np(**{**args, name: v})

            parts.append(fd_grad(f, args[name], dy).reshape(-1))
        want = np.concatenate(parts)
        got = ref.reshape(-1)
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err <= 1e-6, err
    for device in ("host", "metal-sim"):
        got = run(g, device, feeds)
        assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max(), device


# ---------------------------------------------------------------- attention


def attn_np(q: A, k: A, v: A, mask_add: A, heads: int, kv_heads: int, d: int, bhsd: bool) -> A:
    """softmax(q kᵀ/√d + mask) v, query head h reading kv head h // (heads/kv_heads)."""

    def split(x: np.ndarray, nh: int) -> np.ndarray:
        if bhsd:
            return x
        b, s, _ = x.shape
        return x.reshape(b, s, nh, d).transpose(0, 2, 1, 3)

    qh, kh, vh = split(q, heads), split(k, kv_heads), split(v, kv_heads)
    rep = heads // kv_heads
    kh, vh = np.repeat(kh, rep, axis=1), np.repeat(vh, rep, axis=1)
    s = np.einsum("bhid,bhjd->bhij", qh, kh) / np.sqrt(d) + mask_add
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(-1, keepdims=True)
    o = np.einsum("bhij,bhjd->bhid", p, vh)
    if bhsd:
        return o
    b, h, s_, _ = o.shape
    return o.transpose(0, 2, 1, 3).reshape(b, s_, h * d)


def causal(s: int, kv: int, window: int = 0) -> np.ndarray:
    i = np.arange(s)[:, None] + kv - s
    j = np.arange(kv)[None]
    keep = j <= i
    if window:
        keep &= i - j <= window
    return np.where(keep, 0.0, -np.inf)


ATTN_CASES = {
    # name: (layout, heads, kv_heads, s, kv, mask, window)
    "bshd_causal_gqa": ("bshd", 4, 2, 5, 7, "causal", 0),
    "bhsd_window": ("bhsd", 2, 2, 5, 7, "sliding_window", 2),
    "bhsd_bias_gqa": ("bhsd", 3, 1, 4, 6, "bias", 0),
    "bshd_custom": ("bshd", 2, 2, 5, 5, "custom", 0),
}


@pytest.mark.parametrize("case", sorted(ATTN_CASES))
@pytest.mark.parametrize("wrt", ["q", "k", "v"])
def test_attention_backward(case: str, wrt: str) -> None:
    layout, h, kvh, s, kv, mask, window = ATTN_CASES[case]
    d, b = 3, 2
    rng = R(len(case) * 7 + ord(wrt))
    bhsd = layout == "bhsd"
    shp = (lambda n, L: (b, n, L, d)) if bhsd else (lambda n, L: (b, L, n * d))
    feeds = {
        "q": f32(rng.standard_normal(shp(h, s))),
        "k": f32(rng.standard_normal(shp(kvh, kv))),
        "v": f32(rng.standard_normal(shp(kvh, kv))),
    }
    dy = f32(rng.standard_normal(shp(h, s)))
    if mask == "bias":
        feeds["m"] = f32(rng.standard_normal((b, h, s, kv)))
        add = lambda m: m  # noqa: E731
    elif mask == "custom":
        mk = (rng.uniform(size=(b, 1, s, kv)) > 0.4).astype(F32)
        mk[..., 0] = 1.0  # every query keeps a key
        feeds["m"] = mk
        add = lambda m: np.where(m != 0, 0.0, -np.inf)  # noqa: E731
    else:
        cm = causal(s, kv, window)
        add = lambda m: cm  # noqa: E731

    def fwd_np(q: A, k: A, v: A, m: A | None = None) -> A:
        return attn_np(q, k, v, add(m), h, kvh, d, bhsd)

    def nodes(g: rlx.Graph) -> list:
        ins = [g.input(n, a.shape, "f32") for n, a in feeds.items() if n != "m"]
        m = g.input("m", feeds["m"].shape, "f32") if "m" in feeds else None
        return ins + [m]

    def fwd(g: rlx.Graph) -> rlx.Node:
        q, k, v, m = nodes(g)
        return g.attention(
            q,
            k,
            v,
            heads=h,
            kv_heads=kvh,
            head_dim=d,
            mask=mask,
            window=window,
            layout=layout,
            mask_input=m,
        )

    def bwd(g: rlx.Graph) -> rlx.Node:
        q, k, v, m = nodes(g)
        gy = g.input("dy", dy.shape, "f32")
        return g.attention_backward(
            q,
            k,
            v,
            gy,
            wrt=wrt,
            heads=h,
            head_dim=d,
            mask=mask,
            window=window,
            layout=layout,
            mask_input=m,
        )

    check(fwd, bwd, {**feeds, "dy": dy}, fwd_np, [wrt], dy)


# ---------------------------------------------------------------- norms


@pytest.mark.parametrize("wrt", ["input", "gamma", "beta"])
def test_rms_norm_backward(wrt: str) -> None:
    rng = R(3)
    x, gm, bt, dy = (f32(rng.standard_normal(s)) for s in ((5, 13), (13,), (13,), (5, 13)))
    eps = 1e-5

    def fwd_np(x: A, gamma: A, beta: A) -> A:
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * gamma + beta

    def ins(g: rlx.Graph) -> list:
        return [g.input("x", x.shape), g.input("gamma", (13,)), g.input("beta", (13,))]

    def fwd(g: rlx.Graph) -> rlx.Node:
        return g.rms_norm(*ins(g), eps=eps)

    def bwd(g: rlx.Graph) -> rlx.Node:
        return g.rms_norm_backward(*ins(g), g.input("dy", dy.shape), wrt=wrt, eps=eps)

    name = {"input": "x"}.get(wrt, wrt)
    check(fwd, bwd, {"x": x, "gamma": gm, "beta": bt, "dy": dy}, fwd_np, [name], dy)


@pytest.mark.parametrize("layer_norm", [True, False])
def test_ada_layer_norm_backward(layer_norm: bool) -> None:
    rng = R(4 + layer_norm)
    x, sc, sh, dy = (
        f32(rng.standard_normal(s)) for s in ((2, 3, 11), (2, 1, 11), (2, 1, 11), (2, 3, 11))
    )
    eps = 1e-5

    def fwd_np(x: A, scale: A, shift: A) -> A:
        xc = x - x.mean(-1, keepdims=True) if layer_norm else x
        xh = xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps)
        return xh * (1 + scale) + shift

    def fwd(g: rlx.Graph) -> rlx.Node:
        return g.ada_layer_norm(
            g.input("x", x.shape),
            g.input("scale", sc.shape),
            g.input("shift", sh.shape),
            eps=eps,
            layer_norm=layer_norm,
        )

    def bwd(g: rlx.Graph) -> rlx.Node:
        return g.ada_layer_norm_backward(
            g.input("x", x.shape),
            g.input("scale", sc.shape),
            g.input("dy", dy.shape),
            eps=eps,
            layer_norm=layer_norm,
        )

    # packed [dx ∥ dscale ∥ dshift]
    feeds = {"x": x, "scale": sc, "shift": sh, "dy": dy}
    check(fwd, bwd, feeds, fwd_np, ["x", "scale", "shift"], dy)


def test_gated_residual_backward() -> None:
    rng = R(6)
    x, y, gt, dy = (
        f32(rng.standard_normal(s)) for s in ((2, 3, 11), (2, 3, 11), (2, 1, 11), (2, 3, 11))
    )

    def fwd(g: rlx.Graph) -> rlx.Node:
        return g.gated_residual(
            g.input("x", x.shape), g.input("y", y.shape), g.input("gate", gt.shape)
        )

    def bwd(g: rlx.Graph) -> rlx.Node:
        return g.gated_residual_backward(
            g.input("y", y.shape), g.input("gate", gt.shape), g.input("dy", dy.shape)
        )

    # packed [dx ∥ dy ∥ dgate]
    feeds = {"x": x, "y": y, "gate": gt, "dy": dy}
    check(fwd, bwd, feeds, lambda x, y, gate: x + gate * y, ["x", "y", "gate"], dy)


# ---------------------------------------------------------------- rope


def rope_np(x: A, cos: A, sin: A, head_dim: int, n_rot: int, interleaved: bool) -> A:
    b, s, hid = x.shape
    xh = x.reshape(b * s, hid // head_dim, head_dim).copy()
    rows = cos.shape[0]
    c = cos if rows == b * s else np.tile(cos[:s], (b, 1))
    sn = sin if rows == b * s else np.tile(sin[:s], (b, 1))
    c, sn = c[:, None, :], sn[:, None, :]
    half = n_rot // 2
    ia = np.arange(0, n_rot, 2) if interleaved else np.arange(half)
    ib = ia + 1 if interleaved else ia + half
    a, bb = xh[..., ia].copy(), xh[..., ib].copy()
    xh[..., ia] = a * c - bb * sn
    xh[..., ib] = a * sn + bb * c
    return xh.reshape(b, s, hid)


@pytest.mark.parametrize(
    "kind,n_rot,per_token", [("neox", 4, False), ("interleaved", 6, True), ("neox", 6, True)]
)
def test_rope_backward(kind: str, n_rot: int, per_token: bool) -> None:
    rng = R(n_rot + per_token)
    b, s, hd = 2, 3, 6
    rows = b * s if per_token else s
    x, dy = f32(rng.standard_normal((b, s, 3 * hd))), f32(rng.standard_normal((b, s, 3 * hd)))
    ang = rng.uniform(0, 6, (rows, n_rot // 2))
    cos, sin = f32(np.cos(ang)), f32(np.sin(ang))

    def fwd_np(x: A, cos: A, sin: A) -> A:
        return rope_np(x, cos, sin, hd, n_rot, kind == "interleaved")

    def tables(g: rlx.Graph) -> list:
        return [g.input("cos", cos.shape), g.input("sin", sin.shape)]

    def fwd(g: rlx.Graph) -> rlx.Node:
        return g.rope(
            g.input("x", x.shape),
            *tables(g),
            head_dim=hd,
            n_rot=n_rot,
            kind=kind,
            per_token=per_token,
        )

    def bwd(g: rlx.Graph) -> rlx.Node:
        return g.rope_backward(
            g.input("dy", dy.shape), *tables(g), head_dim=hd, n_rot=n_rot, kind=kind
        )

    check(fwd, bwd, {"x": x, "cos": cos, "sin": sin, "dy": dy}, fwd_np, ["x"], dy)


# ---------------------------------------------------------------- cumsum / gather


@pytest.mark.parametrize("axis,exclusive", [(-1, False), (1, True), (0, False)])
def test_cumsum_backward(axis: int, exclusive: bool) -> None:
    rng = R(axis + 5)
    x, dy = f32(rng.standard_normal((3, 7, 5))), f32(rng.standard_normal((3, 7, 5)))

    def fwd_np(x: A) -> A:
        c = np.cumsum(x, axis=axis)
        return c - x if exclusive else c

    def fwd(g: rlx.Graph) -> rlx.Node:
        return g.cumsum(g.input("x", x.shape), axis, exclusive=exclusive)

    def bwd(g: rlx.Graph) -> rlx.Node:
        return g.cumsum_backward(g.input("dy", dy.shape), axis, exclusive=exclusive)

    check(fwd, bwd, {"x": x, "dy": dy}, fwd_np, ["x"], dy)


def test_gather_backward() -> None:
    rng = R(8)
    x = f32(rng.standard_normal((3, 4, 2)))
    idx = np.array([2, 3, 0, 3, 2], np.int32)  # repeats accumulate; row 1 unused
    dy = f32(rng.standard_normal((3, 5, 2)))

    def fwd(g: rlx.Graph) -> rlx.Node:
        return g.gather_axis(g.input("x", x.shape), g.input("idx", idx.shape, "i32"), axis=1)

    def bwd(g: rlx.Graph) -> rlx.Node:
        return g.gather_backward(
            g.input("dy", dy.shape), g.input("idx", idx.shape, "i32"), axis=1, axis_dim=4
        )

    check(fwd, bwd, {"x": x, "idx": idx, "dy": dy}, lambda x, idx: x[:, idx], ["x"], dy)


def test_gather_backward_negative_and_out_of_range_indices() -> None:
    rng = R(9)
    dy = f32(rng.standard_normal((3, 5, 2)))
    idx = np.array([2, -1, 0, 7, -9], np.int32)

    def bwd(g: rlx.Graph) -> rlx.Node:
        return g.gather_backward(
            g.input("dy", dy.shape), g.input("idx", idx.shape, "i32"), axis=1, axis_dim=4
        )

    g = rlx.Graph("bwd")
    g.outputs(bwd(g))
    want = np.zeros((3, 4, 2))
    for i, j in enumerate(idx):
        j = j + 4 if j < 0 else j
        if 0 <= j < 4:
            want[:, j] += dy[:, i]
    for device in ("reference", "host", "metal-sim"):
        np.testing.assert_allclose(
            run(g, device, {"dy": dy, "idx": idx}), want, rtol=1e-6, atol=1e-6
        )


# ---------------------------------------------------------------- pooling / conv


def pool_np(x: A, k: int, st: int, pad: int) -> A:
    n, c, h, w = x.shape
    ho, wo = (h + 2 * pad - k) // st + 1, (w + 2 * pad - k) // st + 1
    xp = np.full((n, c, h + 2 * pad, w + 2 * pad), -np.inf)
    xp[:, :, pad : pad + h, pad : pad + w] = x
    out = np.empty((n, c, ho, wo))
    for i in range(ho):
        for j in range(wo):
            out[:, :, i, j] = xp[:, :, i * st : i * st + k, j * st : j * st + k].max((2, 3))
    return out


@pytest.mark.parametrize("ties", [False, True])
def test_max_pool2d_backward(ties: bool) -> None:
    rng = R(10 + ties)
    x = rng.standard_normal((2, 3, 7, 9))
    x = f32(np.round(x) if ties else x)  # rounded: many tied maxima (not differentiable)
    dy = f32(rng.standard_normal((2, 3, 4, 5)))

    def fwd(g: rlx.Graph) -> rlx.Node:
        return g.max_pool2d(g.input("x", x.shape), 3, stride=2, padding=1)

    def bwd(g: rlx.Graph) -> rlx.Node:
        return g.max_pool2d_backward(
            g.input("x", x.shape), g.input("dy", dy.shape), 3, stride=2, padding=1
        )

    check(fwd, bwd, {"x": x, "dy": dy}, lambda x: pool_np(x, 3, 2, 1), ["x"], dy, fd=not ties)


def conv_np(x: A, w: A, stride: tuple, pad: tuple, dil: tuple, groups: int) -> A:
    n, ci, h, wd = x.shape
    co, cig, kh, kw = w.shape
    ho = (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (wd + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    xp = np.zeros((n, ci, h + 2 * pad[0], wd + 2 * pad[1]))
    xp[:, :, pad[0] : pad[0] + h, pad[1] : pad[1] + wd] = x
    out = np.zeros((n, co, ho, wo))
    cog = co // groups
    for gi in range(groups):
        for a in range(kh):
            for b in range(kw):
                r0, c0 = a * dil[0], b * dil[1]
                xs = xp[
                    :,
                    gi * cig : (gi + 1) * cig,
                    r0 : r0 + stride[0] * (ho - 1) + 1 : stride[0],
                    c0 : c0 + stride[1] * (wo - 1) + 1 : stride[1],
                ]
                out[:, gi * cog : (gi + 1) * cog] += np.einsum(
                    "nchw,oc->nohw", xs, w[gi * cog : (gi + 1) * cog, :, a, b]
                )
    return out


CONV = dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2)


@pytest.mark.parametrize("wrt", ["x", "w"])
def test_conv2d_backward(wrt: str) -> None:
    rng = R(12 + (wrt == "w"))
    x = f32(rng.standard_normal((2, 4, 7, 9)))
    w = f32(rng.standard_normal((6, 2, 3, 2)))
    dy = f32(rng.standard_normal((2, 6, 4, 11)))
    geom = (CONV["stride"], CONV["padding"], CONV["dilation"], CONV["groups"])

    def fwd(g: rlx.Graph) -> rlx.Node:
        return g.conv2d(g.input("x", x.shape), g.input("w", w.shape), **CONV)

    def bwd(g: rlx.Graph) -> rlx.Node:
        gy = g.input("dy", dy.shape)
        if wrt == "x":
            return g.conv2d_backward_input(gy, g.input("w", w.shape), input_hw=(7, 9), **CONV)
        return g.conv2d_backward_weight(g.input("x", x.shape), gy, kernel=(3, 2), **CONV)

    check(fwd, bwd, {"x": x, "w": w, "dy": dy}, lambda x, w: conv_np(x, w, *geom), [wrt], dy)


# ---------------------------------------------------------------- log-mel / cross-entropy


def test_log_mel_backward() -> None:
    rng = R(14)
    n_fft = 8
    spec = f32(rng.standard_normal((3, 2 * n_fft)))
    filt = f32(rng.uniform(0.1, 1.0, (4, 5)))
    dy = f32(rng.standard_normal((3, 4)))

    def fwd_np(spec: A, filters: A) -> A:
        p = spec[:, :5] ** 2 + spec[:, n_fft : n_fft + 5] ** 2
        return np.log(p @ filters.T + 1e-10)

    def ins(g: rlx.Graph) -> list:
        return [g.input("spec", spec.shape), g.input("filters", filt.shape)]

    def fwd(g: rlx.Graph) -> rlx.Node:
        return g.log_mel(*ins(g), n_fft=n_fft)

    def bwd(g: rlx.Graph) -> rlx.Node:
        return g.log_mel_backward(*ins(g), g.input("dy", dy.shape), n_fft=n_fft)

    check(fwd, bwd, {"spec": spec, "filters": filt, "dy": dy}, fwd_np, ["spec"], dy)


def sce_np(logits: A, labels: A) -> A:
    z = logits - logits.max(1, keepdims=True)
    lse = np.log(np.exp(z).sum(1))
    return lse - z[np.arange(len(labels)), labels]


def test_softmax_cross_entropy_backward() -> None:
    rng = R(15)
    z = f32(rng.standard_normal((5, 7)))
    lab = np.array([3, 0, 6, 2, 2], np.int32)
    dy = f32(rng.standard_normal(5))

    def ins(g: rlx.Graph) -> list:
        return [g.input("logits", z.shape), g.input("labels", (5,), "i32")]

    def fwd(g: rlx.Graph) -> rlx.Node:
        return g.softmax_cross_entropy(*ins(g))

    def bwd(g: rlx.Graph) -> rlx.Node:
        return g.softmax_cross_entropy_backward(*ins(g), g.input("dy", (5,)))

    check(fwd, bwd, {"logits": z, "labels": lab, "dy": dy}, sce_np, ["logits"], dy)


def test_softmax_cross_entropy_ignored_rows_and_metal_forward() -> None:
    rng = R(16)
    z = f32(rng.standard_normal((5, 7)))
    lab = np.array([3, -100, 6, 7, 2], np.int32)
    dy = f32(rng.standard_normal(5))
    g = rlx.Graph("bwd")
    g.outputs(
        g.softmax_cross_entropy_backward(
            g.input("logits", z.shape), g.input("labels", (5,), "i32"), g.input("dy", (5,))
        )
    )
    feeds = {"logits": z, "labels": lab, "dy": dy}
    ref = run(g, "reference", feeds)
    assert np.all(ref[[1, 3]] == 0)
    for device in ("host", "metal-sim"):
        assert np.abs(run(g, device, feeds) - ref).max() <= 1e-4 * np.abs(ref).max()
    # the integer-label loss itself runs as a Metal kernel
    good = np.array([3, 0, 6, 1, 2], np.int32)
    g = rlx.Graph("fwd")
    g.outputs(g.softmax_cross_entropy(g.input("logits", z.shape), g.input("labels", (5,), "i32")))
    exe = rlx.compile(g, device="metal-sim")
    assert "softmax_cross_entropy_with_logits" not in exe.stats["metal_host_by_thunk"]
    got = exe.run(logits=z, labels=good)
    (loss,) = got.values()
    np.testing.assert_allclose(loss, sce_np(z.astype(np.float64), good), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- scan


@pytest.mark.parametrize("wrt_xs", [False, True])
def test_scan_backward_host_op(wrt_xs: bool) -> None:
    """scan_backward lowers to a host op evaluated by rlx.reference.scan_grad on
    reference, host and metal-sim (there a host command of the plan)."""
    rng = R(17 + wrt_xs)
    c0, xs, dy = (f32(rng.standard_normal(s)) for s in ((3,), (5, 3), (5, 3)))

    def body() -> rlx.Graph:
        b = rlx.Graph("body")
        c, x = b.input("c", [3]), b.input("x", [3])
        n = b.tanh(b.add(b.mul(c, x), c))
        b.outputs(n, b.sigmoid(n))
        return b

    def fwd_np(c0: A, xs: A) -> A:
        c, ys = c0, []
        for x in xs:
            c = np.tanh(c * x + c)
            ys.append(1 / (1 + np.exp(-c)))
        return np.stack(ys)

    def fwd(g: rlx.Graph) -> rlx.Node:
        return g.scan(body(), [g.input("c0", [3])], [g.input("xs", [5, 3])])

    g = rlx.Graph("bwd")
    g.outputs(
        g.scan_backward(
            body(),
            [g.input("c0", [3])],
            [g.input("xs", [5, 3])],
            g.input("dy", [5, 3]),
            wrt_xs=wrt_xs,
        )
    )
    feeds = {"c0": c0, "xs": xs, "dy": dy}
    args = {"c0": c0.astype(np.float64), "xs": xs.astype(np.float64)}
    gf = rlx.Graph("fwd")
    gf.outputs(fwd(gf))
    assert np.abs(run(gf, "host", feeds) - fwd_np(**args)).max() <= 1e-5
    name = "xs" if wrt_xs else "c0"
    want = fd_grad(lambda v: fwd_np(**{**args, name: v}), args[name], dy).reshape(-1)
    for device in ("reference", "host", "metal-sim"):
        exe = rlx.compile(g, device=device)
        assert "host_op" in exe.stats["by_thunk"]
        if device == "metal-sim":
            assert "host_op" in exe.stats["metal_host_by_thunk"]
        (got,) = exe.run(**feeds).values()
        assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max(), device
