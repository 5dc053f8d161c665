"""Gradients built from ordinary ops where no ``*_backward`` op covers the
case: soft-capped attention (re-expressed as matmuls, ``tanh`` and a
softmax, then differentiated), RoPE rotations the ``rope_backward``
lowering does not pair (interleaved with ``n_rot < head_dim``) and SAM 2's
axial 2-D RoPE (both: the transpose of a rotation by θ is the rotation by
−θ, a forward ``rope`` with ``−sin``), ``gaussian_splat_prepare`` (the
projection, EWA conic and SH colour rebuilt from matmuls and elementwise
ops) and ``gaussian_splat_rasterize`` (a dense, sort-free blend in depth
order with the forward's decisions as masks)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional

import numpy as np

from rlx.autodiff._core import Ctx, rule
from rlx.node import Node

if TYPE_CHECKING:
    from rlx.graph import Graph

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


# ------------------------------------------------------------ splat prepare
#: real SH basis constants (``rlx.reference.splat``: the paper's basis and signs)
_SH_C0 = 0.28209479177387814
_SH_C1 = 0.4886025119029199
_SH_C2 = (1.0925484305920792, -1.0925484305920792, 0.31539156525252005,
          -1.0925484305920792, 0.5462742152960396)  # fmt: skip
_SH_C3 = (-0.5900435899266435, 2.890611442640554, -0.4570457994644658, 0.3731763325901154,
          -0.4570457994644658, 1.445305721320277, -0.5900435899266435)  # fmt: skip


def _sh_basis(x: Node, y: Node, z: Node, n: int) -> list[Node]:
    """The first ``n`` real SH basis functions of unit directions (``[g, 1]`` each)."""
    c2, c3 = _SH_C2, _SH_C3
    xx, yy, zz = x * x, y * y, z * z
    fs = [
        lambda: x * 0.0 + _SH_C0,
        lambda: y * -_SH_C1,
        lambda: z * _SH_C1,
        lambda: x * -_SH_C1,
        lambda: x * y * c2[0],
        lambda: y * z * c2[1],
        lambda: (zz * 2.0 - xx - yy) * c2[2],
        lambda: x * z * c2[3],
        lambda: (xx - yy) * c2[4],
        lambda: y * (xx * 3.0 - yy) * c3[0],
        lambda: x * y * z * c3[1],
        lambda: y * (zz * 4.0 - xx - yy) * c3[2],
        lambda: z * (zz * 2.0 - xx * 3.0 - yy * 3.0) * c3[3],
        lambda: x * (zz * 4.0 - xx - yy) * c3[4],
        lambda: z * (xx - yy) * c3[5],
        lambda: x * (xx - yy * 3.0) * c3[6],
    ]
    return [f() for f in fs[:n]]


def splat_prepare_forward(g: Graph, node: Node) -> Node:
    """``gaussian_splat_prepare``'s ``[g, 16]`` record rebuilt from ordinary ops
    (``rlx.reference.splat``'s formulas), for differentiation: the continuous
    columns (mean, depth, conic, opacity, colour) as functions of the operands,
    the piecewise-constant ones (radius, tiles, valid) zero, and the culled rows
    and colour clamp following the forward's own output ``node`` (its valid
    column, its colour > 0). The camera enters through the same ops, so it
    gets a gradient too (of these formulas as written: the view matrix need
    not stay a rigid motion)."""
    pos, scl, rot, opa, col, sh, cam = node.inputs
    n = pos.shape[0]
    dt = pos.dtype

    def cols(x: Node, k: int) -> list[Node]:
        return [g.narrow(x, 1, i, 1) for i in range(k)]

    valid = g.gt(g.narrow(node, 1, 15, 1), g.constant(0.0, dtype=node.dtype, shape=[]))
    one = g.constant(1.0, dtype=dt, shape=[])
    zero = g.constant(0.0, dtype=dt, shape=[])
    view = g.reshape(g.narrow(cam, 0, 0, 16), [4, 4])
    rv = g.narrow(g.narrow(view, 0, 0, 3), 1, 0, 3)
    tv = g.reshape(g.narrow(g.narrow(view, 0, 0, 3), 1, 3, 1), [1, 3])
    fx, fy, cx, cy = (g.reshape(g.narrow(cam, 0, 16 + i, 1), [1, 1]) for i in range(4))
    t = g.matmul(pos, g.transpose(rv, [1, 0])) + tv
    tx, ty, tz = cols(t, 3)
    # culled rows (zero in the output): finite stand-ins for t_z, det Σ' and
    # the direction length, so their zero cotangents stay zero
    tz = g.where(valid, tz, one)
    u = fx * tx / tz + cx
    v = fy * ty / tz + cy
    # Σ = R S Sᵀ Rᵀ from the normalised quaternion
    qn = g.sqrt(g.sum(rot * rot, 1, keep_dims=True))
    qh = rot / g.where(g.gt(qn, zero), qn, one)
    w, x, y, z = cols(qh, 4)
    r = g.concat(
        [one - (y * y + z * z) * 2.0, (x * y - w * z) * 2.0, (x * z + w * y) * 2.0,
         (x * y + w * z) * 2.0, one - (x * x + z * z) * 2.0, (y * z - w * x) * 2.0,
         (x * z - w * y) * 2.0, (y * z + w * x) * 2.0, one - (x * x + y * y) * 2.0],
        1,
    )  # fmt: skip
    m = g.reshape(r, [n, 3, 3]) * g.reshape(scl, [n, 1, 3])
    sig = g.matmul(m, g.transpose(m, [0, 2, 1]))
    # EWA: Σ' = J W Σ Wᵀ Jᵀ + 0.3 I, conic = Σ'⁻¹
    zc = tx * 0.0
    jac = g.reshape(
        g.concat([fx / tz, zc, fx * tx / (tz * tz) * -1.0,
                  zc, fy / tz, fy * ty / (tz * tz) * -1.0], 1),
        [n, 2, 3],
    )  # fmt: skip
    tm = g.matmul(jac, g.expand(g.reshape(rv, [1, 3, 3]), [n, 3, 3]))
    s2 = g.reshape(g.matmul(g.matmul(tm, sig), g.transpose(tm, [0, 2, 1])), [n, 4])
    a, b, _, c = cols(s2, 4)
    a, c = a + 0.3, c + 0.3
    det = g.where(valid, a * c - b * b, one)
    conic = [c / det, b / det * -1.0, a / det]
    # colour: SH of the viewing direction, max(0.5 + Σ Y·sh, 0), else ``colors``
    k = sh.shape[1] if sh.ndim == 3 else 0
    if k == 0:
        rgb = col
    else:
        used = min(16, math.isqrt(k) ** 2)
        centre = g.matmul(tv, rv) * -1.0  # (−Rᵀt)ᵀ = −tᵀR
        diff = pos - centre
        dist = g.sqrt(g.sum(diff * diff, 1, keep_dims=True))
        dirs = diff / g.where(g.gt(dist, zero), dist, one)
        basis = g.concat(_sh_basis(*cols(dirs, 3), used), 1)
        coef = g.narrow(sh, 1, 0, used)
        raw = g.sum(g.reshape(basis, [n, used, 1]) * coef, 1) + 0.5
        lit = g.gt(g.narrow(node, 1, 8, 3), g.constant(0.0, dtype=node.dtype, shape=[]))
        rgb = g.where(lit, raw, zero)
    zc = g.reshape(opa, [n, 1]) * 0.0
    rec = g.concat([u, v, tz, zc, *conic, g.reshape(opa, [n, 1]), rgb,
                    zc, zc, zc, zc, zc], 1)  # fmt: skip
    return g.where(valid, rec, zero)


@rule("gaussian_splat_prepare")
def _gaussian_splat_prepare(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    from rlx.autodiff._core import grad

    ins = node.inputs
    n = ins[0].shape[0]
    if not isinstance(n, int):
        raise ctx.fail(node, f"needs a static splat count, got {n!r}")
    k = ins[5].shape[1] if ins[5].ndim == 3 else 0
    if not isinstance(k, int):
        raise ctx.fail(node, f"needs a static SH coefficient count, got {k!r}")
    want = [i for i in range(7) if ctx.needs(i)]
    out: list[Optional[Node]] = [None] * len(ins)
    for i in want:
        if (i == 4 and k > 0) or (i == 5 and k == 0):  # operand the colour does not read
            out[i] = ctx.zeros(ins[i].shape, ins[i].dtype)
    live = [i for i in want if out[i] is None]
    if not live:
        return out
    rec = splat_prepare_forward(ctx.g, node)
    for i, gi in zip(live, grad(ctx.g, rec, [ins[i] for i in live], seed=dy)):
        out[i] = gi
    return out


# ---------------------------------------------------------- splat rasterize
def splat_rasterize_forward(g: Graph, node: Node) -> Node:
    """``gaussian_splat_rasterize``'s ``[height, width, 3]`` image rebuilt from
    ordinary ops as a dense ``[pixels, splats]`` computation
    (``rlx.reference.splat.rasterize_fn``'s rules), for differentiation.

    No sort: splat ``j`` is in front of ``i`` when ``depth_j < depth_i`` (ties:
    the lower index), a 0/1 matrix ``M`` from the depth column compared
    pairwise, and the transmittance before ``i`` is ``exp(Σ_j M_ij log(1 − α_pj))``
    over the blended ``j``. Every decision is a mask taken from the values at
    the evaluation point (piecewise constant, so no gradient): the tile
    binning (tile bounds, valid), ``power ≤ 0``, ``α ≥ alpha_cutoff``, the
    early stop (the blended splats are the front-to-back prefix of the kept
    ones whose running product ``Π(1 − α)`` stays ≥ the threshold and, with
    ``max_splat_steps``, that have fewer kept splats in front) and the 0.99
    clamp. The mean, conic, opacity and colour columns get gradients; depth,
    radius, tiles and valid only enter through masks. Assumes no
    ``max_list_entries`` truncation (the rule checks)."""
    prep = node.inputs[0]
    cfg = node.attrs["cfg"]
    W, H, ts = int(cfg["width"]), int(cfg["height"]), int(cfg["tile_size"])
    n = prep.shape[0]
    dt = prep.dtype

    def k(v: float) -> Node:
        return g.constant(float(v), dtype=dt, shape=[])

    def arr(a: np.ndarray) -> Node:
        return g.constant(np.asarray(a, np.float32), dtype=dt)

    one, zero, half = k(1.0), k(0.0), k(0.5)

    def f(cond: Node) -> Node:  # bool mask → 0/1 float
        return g.where(cond, one, zero)

    def row(c: int) -> Node:
        return g.reshape(g.narrow(prep, 1, c, 1), [1, n])

    u, v, depth, ca, cb, cc, opa = (row(c) for c in (0, 1, 2, 4, 5, 6, 7))
    x0, y0, x1, y1, valid = (row(c) for c in range(11, 16))
    ys, xs = np.meshgrid(np.arange(H), np.arange(W), indexing="ij")
    xs, ys = xs.reshape(-1, 1), ys.reshape(-1, 1)
    ptx, pty = arr(xs // ts), arr(ys // ts)
    cover = (f(g.ge(ptx, x0)) * f(g.lt(ptx, x1)) * f(g.ge(pty, y0)) * f(g.lt(pty, y1))
             * f(g.gt(valid, zero)))  # fmt: skip
    dx, dy = u - arr(xs + 0.5), v - arr(ys + 0.5)  # [P, n]
    power = (ca * dx * dx + cc * dy * dy) * -0.5 - cb * dx * dy
    neg = g.le(power, zero)
    e = opa * g.exp(g.where(neg, power, zero))
    alpha = g.where(g.lt(e, k(0.99)), e, k(0.99))
    ok = cover * f(neg) * f(g.ge(alpha, k(float(cfg["alpha_cutoff"]))))
    # front[i, j] = 1 when j is composited before i
    dcol = g.reshape(depth, [n, 1])
    earlier = arr(np.tril(np.ones((n, n)), -1))
    front = f(g.lt(depth, dcol)) + f(g.eq(depth, dcol)) * earlier
    front_t = g.transpose(front, [1, 0])  # [j, i]
    lok = g.log(one - g.where(g.gt(ok, half), alpha, zero))
    run = g.exp(g.matmul(lok, front_t) + lok)  # Π(1 − α) over the kept, up to i
    blend = ok * f(g.ge(run, k(float(cfg["transmittance_threshold"]))))
    steps = int(cfg.get("max_splat_steps", 0))
    if steps > 0:
        blend = blend * f(g.lt(g.matmul(ok, front_t), k(steps)))
    # the blended splats are a prefix of the kept ones, so before a blended i
    # the kept and the blended splats in front are the same
    trans = g.exp(g.matmul(lok, front_t))
    w = g.where(g.gt(blend, half), alpha * trans, zero)
    img = g.matmul(w, g.narrow(prep, 1, 8, 3))
    return g.reshape(img, [H, W, 3])


@rule("gaussian_splat_rasterize")
def _gaussian_splat_rasterize(ctx: Ctx, node: Node, dy: Node) -> list[Optional[Node]]:
    # the camera does not enter the image (rlx.reference.splat.rasterize_fn)
    from rlx.autodiff._core import grad

    prep, cam = node.inputs
    n = prep.shape[0]
    if not isinstance(n, int):
        raise ctx.fail(node, f"needs a static splat count, got {n!r}")
    cfg = node.attrs["cfg"]
    ts = int(cfg["tile_size"])
    tiles = -(-int(cfg["width"]) // ts) * -(-int(cfg["height"]) // ts)
    cap = int(cfg.get("max_list_entries", 0))
    if 0 < cap < n * tiles:
        raise ctx.fail(
            node,
            f"max_list_entries = {cap} may truncate the {n} splats × {tiles} tiles lists "
            "(the dense rebuild assumes no truncation)",
        )
    out: list[Optional[Node]] = [None, None]
    if ctx.needs(1):
        out[1] = ctx.zeros(cam.shape, cam.dtype)
    if ctx.needs(0):
        (out[0],) = grad(ctx.g, splat_rasterize_forward(ctx.g, node), [prep], seed=dy)
    return out
