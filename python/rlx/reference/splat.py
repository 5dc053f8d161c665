"""3-D Gaussian splatting (Kerbl, Kopanas, Leimkühler & Drettakis, "3D Gaussian
Splatting for Real-Time Radiance Field Rendering", SIGGRAPH 2023).

Operands (f32): positions ``[g, 3]``, scales ``[g, 3]`` (linear, already
activated), rotations ``[g, 4]`` quaternions ``(w, x, y, z)`` (normalised
here), opacities ``[g]`` (in [0, 1], already activated), colors ``[g, 3]``,
sh ``[g, K, 3]`` and the camera ``meta [20]``.

* ``meta``: ``view[16]`` (row-major 4×4 world→camera, OpenCV axes: x right,
  y down, z forward), then ``fx, fy, cx, cy`` in pixels.
* Colour: when ``sh`` holds ``K ≥ 1`` coefficients per splat, real spherical
  harmonics of degree ``min(3, ⌊√K⌋ − 1)`` (the paper's basis and signs) of
  the viewing direction ``normalise(p − c)`` (``c = −Rᵀt`` the camera centre),
  ``max(0.5 + Σ Y·sh, 0)`` per channel with ``Y₀ = C0 = 0.28209479177387814``;
  otherwise ``colors``.
* Projection (EWA splatting, Zwicker et al. 2002): ``t = V p``; a splat with
  ``t_z ≤ 0.2`` is culled. Mean ``u = fx·t_x/t_z + cx``, ``v = fy·t_y/t_z + cy``;
  ``Σ = R S Sᵀ Rᵀ``; ``Σ' = J W Σ Wᵀ Jᵀ + 0.3·I`` with ``W`` the view rotation and
  ``J`` the projection Jacobian at ``t`` (no frustum clamp); conic ``= Σ'^{-1}``
  (culled when ``det Σ' ≤ 0``); radius ``= ceil(radius_scale·√λ_max(Σ'))`` where
  ``λ_max = mid + √max(0.1, mid² − det)``.
* Tiles: ``tile_size`` squares; a splat covers tiles ``[floor((u − r)/ts),
  floor((u + r + ts − 1)/ts))`` (clamped to the grid, likewise in y; empty =
  culled). Entries ``(tile, depth, index)`` are sorted and truncated to
  ``max_list_entries`` (0 = unlimited).
* Blending: pixel ``(x, y)`` is sampled at its centre ``(x + ½, y + ½)`` and
  walks its tile's list front to back: ``power = −½(A dx² + C dy²) − B dx dy``
  (``d = mean − pixel``), skipped if ``> 0``; ``α = min(0.99, o·e^power)``,
  skipped if ``α < alpha_cutoff``; stop when ``T(1 − α) < transmittance_threshold``
  (that splat is not blended) or after ``max_splat_steps`` blended splats
  (0 = unlimited); ``C += α T c``, ``T ← T(1 − α)``. Black background.
  Output ``[height, width, 3]``.
* Prepare layout ``[g, 16]``: ``u, v, depth, radius, conic_a, conic_b, conic_c,
  opacity, r, g, b, tile_x0, tile_y0, tile_x1, tile_y1 (exclusive), valid``;
  culled rows are all zero (valid = 0).
* Backward packing ``[g, 14 + 3K]``, one row per splat: ``d position (3),
  d scale (3), d rotation (4), d opacity (1), d colour (3), d sh (3K,
  coefficient-major)``; ``d colour`` is zero when SH is used, and SH
  coefficients of bands above ``sh_band`` get zero (the colour still uses
  every band). ``loss_grad_clip > 0`` clamps ``d_loss`` elementwise to ±clip
  first. The gradient ignores the (piecewise constant) radius/tile
  assignment, the stopping rule and the clamps' kinks (a clamped alpha
  passes nothing to opacity / shape); ``max_anisotropy`` is accepted and does
  not change it.
"""

from __future__ import annotations

import numpy as np

from rlx.reference import Memory, reference

C0 = 0.28209479177387814
NEAR = 0.2


def quat_to_rot(q: np.ndarray) -> np.ndarray:
    """Unit quaternions ``[g, 4]`` (w, x, y, z) -> rotation matrices ``[g, 3, 3]``."""
    w, x, y, z = q[:, 0], q[:, 1], q[:, 2], q[:, 3]
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
            np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
            np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
        ],
        axis=1,
    )


C1 = 0.4886025119029199
C2 = (
    1.0925484305920792,
    -1.0925484305920792,
    0.31539156525252005,
    -1.0925484305920792,
    0.5462742152960396,
)
C3 = (
    -0.5900435899266435,
    2.890611442640554,
    -0.4570457994644658,
    0.3731763325901154,
    -0.4570457994644658,
    1.445305721320277,
    -0.5900435899266435,
)


def sh_basis(d: np.ndarray) -> np.ndarray:
    """Real SH basis (the paper's signs) of unit directions ``[g, 3]`` → ``[g, 16]``."""
    x, y, z = d[:, 0], d[:, 1], d[:, 2]
    xx, yy, zz = x * x, y * y, z * z
    return np.stack(
        [
            np.full_like(x, C0),
            -C1 * y,
            C1 * z,
            -C1 * x,
            C2[0] * x * y,
            C2[1] * y * z,
            C2[2] * (2 * zz - xx - yy),
            C2[3] * x * z,
            C2[4] * (xx - yy),
            C3[0] * y * (3 * xx - yy),
            C3[1] * x * y * z,
            C3[2] * y * (4 * zz - xx - yy),
            C3[3] * z * (2 * zz - 3 * xx - 3 * yy),
            C3[4] * x * (4 * zz - xx - yy),
            C3[5] * z * (xx - yy),
            C3[6] * x * (xx - 3 * yy),
        ],
        -1,
    )


def sh_basis_grad(d: np.ndarray) -> np.ndarray:
    """``∂ sh_basis / ∂ d`` (polynomial gradients) → ``[g, 16, 3]``."""
    x, y, z = d[:, 0], d[:, 1], d[:, 2]
    xx, yy, zz = x * x, y * y, z * z
    o = np.zeros_like(x)
    rows = [
        (o, o, o),
        (o, o - C1, o),
        (o, o, o + C1),
        (o - C1, o, o),
        (C2[0] * y, C2[0] * x, o),
        (o, C2[1] * z, C2[1] * y),
        (-2 * C2[2] * x, -2 * C2[2] * y, 4 * C2[2] * z),
        (C2[3] * z, o, C2[3] * x),
        (2 * C2[4] * x, -2 * C2[4] * y, o),
        (6 * C3[0] * x * y, C3[0] * (3 * xx - 3 * yy), o),
        (C3[1] * y * z, C3[1] * x * z, C3[1] * x * y),
        (-2 * C3[2] * x * y, C3[2] * (4 * zz - xx - 3 * yy), 8 * C3[2] * y * z),
        (-6 * C3[3] * x * z, -6 * C3[3] * y * z, C3[3] * (6 * zz - 3 * xx - 3 * yy)),
        (C3[4] * (4 * zz - 3 * xx - yy), -2 * C3[4] * x * y, 8 * C3[4] * x * z),
        (2 * C3[5] * x * z, -2 * C3[5] * y * z, C3[5] * (xx - yy)),
        (C3[6] * (3 * xx - 3 * yy), -6 * C3[6] * x * y, o),
    ]
    return np.stack([np.stack(r, -1) for r in rows], 1)


def sh_used(k: int) -> int:
    """Basis functions the forward uses for ``k`` coefficients: ``(deg+1)²``."""
    return 0 if k == 0 else min(16, (int(np.sqrt(k)) ** 2))


def _colors(pos: np.ndarray, colors: np.ndarray, sh: np.ndarray | None, meta: np.ndarray):
    """``(rgb, raw, dir, dist, k)``: the splat colours, before the clamp, the
    viewing directions, their lengths and the SH coefficients per splat."""
    g = colors.shape[0]
    k = sh.size // (3 * g) if (sh is not None and g > 0) else 0
    if k == 0:
        return colors, colors, None, None, 0
    view = meta[:16].reshape(4, 4)
    centre = -view[:3, :3].T @ view[:3, 3]
    diff = pos - centre
    dist = np.linalg.norm(diff, axis=1)
    dirs = np.where(
        dist[:, None] > 0, diff / np.where(dist > 0, dist, 1.0)[:, None], np.array([0.0, 0.0, 1.0])
    )
    n = sh_used(k)
    raw = 0.5 + np.einsum("gj,gjc->gc", sh_basis(dirs)[:, :n], sh.reshape(g, k, 3)[:, :n])
    return np.maximum(raw, 0.0), raw, dirs, dist, k


def _project(pos: np.ndarray, scales: np.ndarray, rots: np.ndarray, meta: np.ndarray):
    """Shared projection; returns a dict of intermediates (all float64)."""
    view = meta[:16].reshape(4, 4)
    fx, fy, cx, cy = meta[16:20]
    rv, tv = view[:3, :3], view[:3, 3]
    t = pos @ rv.T + tv
    tz = np.where(np.abs(t[:, 2]) > 1e-12, t[:, 2], 1e-12)
    qn = np.linalg.norm(rots, axis=1, keepdims=True)
    qh = rots / np.where(qn > 0, qn, 1.0)
    r = quat_to_rot(qh)
    m = r * scales[:, None, :]
    sig = m @ np.swapaxes(m, 1, 2)
    g = pos.shape[0]
    jac = np.zeros((g, 2, 3))
    jac[:, 0, 0] = fx / tz
    jac[:, 0, 2] = -fx * t[:, 0] / tz**2
    jac[:, 1, 1] = fy / tz
    jac[:, 1, 2] = -fy * t[:, 1] / tz**2
    tm = jac @ rv
    s2 = tm @ sig @ np.swapaxes(tm, 1, 2) + 0.3 * np.eye(2)
    a, b, c = s2[:, 0, 0], s2[:, 0, 1], s2[:, 1, 1]
    det = a * c - b * b
    sd = np.where(det > 0, det, 1.0)
    conic = np.stack([c / sd, -b / sd, a / sd], -1)
    mid = 0.5 * (a + c)
    lam = mid + np.sqrt(np.maximum(0.1, mid * mid - det))
    return dict(
        t=t,
        tz=tz,
        rv=rv,
        fx=fx,
        fy=fy,
        qh=qh,
        qn=qn,
        r=r,
        m=m,
        sig=sig,
        tm=tm,
        s2=s2,
        det=det,
        conic=conic,
        lam=lam,
        u=fx * t[:, 0] / tz + cx,
        v=fy * t[:, 1] / tz + cy,
    )


def prepare_fn(
    pos: np.ndarray,
    scales: np.ndarray,
    rots: np.ndarray,
    opac: np.ndarray,
    colors: np.ndarray,
    sh: np.ndarray,
    meta: np.ndarray,
    cfg: dict,
) -> np.ndarray:
    """Per-splat screen-space record ``[g, 16]`` (layout in the module doc)."""
    p = _project(pos, scales, rots, meta)
    ts = int(cfg["tile_size"])
    tx, ty = -(-int(cfg["width"]) // ts), -(-int(cfg["height"]) // ts)
    rad = np.ceil(float(cfg["radius_scale"]) * np.sqrt(p["lam"]))
    x0 = np.clip(np.floor((p["u"] - rad) / ts), 0, tx)
    x1 = np.clip(np.floor((p["u"] + rad + ts - 1) / ts), 0, tx)
    y0 = np.clip(np.floor((p["v"] - rad) / ts), 0, ty)
    y1 = np.clip(np.floor((p["v"] + rad + ts - 1) / ts), 0, ty)
    valid = (p["t"][:, 2] > NEAR) & (p["det"] > 0) & (x1 > x0) & (y1 > y0)
    col = _colors(pos, colors, sh, meta)[0]
    rec = np.concatenate(
        [
            np.stack([p["u"], p["v"], p["t"][:, 2], rad], -1),
            p["conic"],
            opac[:, None],
            col,
            np.stack([x0, y0, x1, y1, np.ones_like(x0)], -1),
        ],
        axis=1,
    )
    return np.where(valid[:, None], rec, 0.0)


def _tile_lists(prep: np.ndarray, cfg: dict):
    """``{tile id: [splat indices front to back]}`` after the capacity cut."""
    ts = int(cfg["tile_size"])
    tx = -(-int(cfg["width"]) // ts)
    entries = []
    for i in np.nonzero(prep[:, 15] > 0)[0]:
        x0, y0, x1, y1 = (int(v) for v in prep[i, 11:15])
        for ty_ in range(y0, y1):
            for tx_ in range(x0, x1):
                entries.append((ty_ * tx + tx_, prep[i, 2], int(i)))
    entries.sort()
    cap = int(cfg.get("max_list_entries", 0))
    if cap > 0:
        entries = entries[:cap]
    lists: dict[int, list[int]] = {}
    for tile, _, i in entries:
        lists.setdefault(tile, []).append(i)
    return lists


def rasterize_fn(
    prep: np.ndarray, cfg: dict, record: bool = False
) -> np.ndarray | tuple[np.ndarray, list]:
    """Blend prepared splats into ``[height, width, 3]``. With ``record`` also return, per
    tile, the pixel coords and per-step (splat, α, T_before, blended) arrays."""
    W, H, ts = int(cfg["width"]), int(cfg["height"]), int(cfg["tile_size"])
    tx = -(-W // ts)
    cut, thr = float(cfg["alpha_cutoff"]), float(cfg["transmittance_threshold"])
    steps_max = int(cfg.get("max_splat_steps", 0))
    img = np.zeros((H, W, 3))
    recs = []
    for tile, ids in _tile_lists(prep, cfg).items():
        ty_, tx_ = divmod(tile, tx)
        ys, xs = np.meshgrid(
            np.arange(ty_ * ts, min((ty_ + 1) * ts, H)),
            np.arange(tx_ * ts, min((tx_ + 1) * ts, W)),
            indexing="ij",
        )
        px, py = xs.ravel() + 0.5, ys.ravel() + 0.5
        T = np.ones(px.size)
        C = np.zeros((px.size, 3))
        live = np.ones(px.size, bool)
        count = np.zeros(px.size, int)
        steps = []
        for i in ids:
            u, v, _, _, A, B, Cc, o = prep[i, :8]
            dx, dy = u - px, v - py
            power = -0.5 * (A * dx * dx + Cc * dy * dy) - B * dx * dy
            alpha = np.minimum(0.99, o * np.exp(np.minimum(power, 0.0)))
            ok = live & (power <= 0) & (alpha >= cut)
            test = T * (1.0 - alpha)
            stop = ok & (test < thr)
            live &= ~stop
            blend = ok & ~stop
            steps.append((i, alpha, T.copy(), blend, dx, dy))
            C += np.where(blend, alpha * T, 0.0)[:, None] * prep[i, 8:11]
            T = np.where(blend, test, T)
            count += blend
            if steps_max > 0:
                live &= count < steps_max
        img[ys.ravel(), xs.ravel()] = C
        recs.append((ys.ravel(), xs.ravel(), steps))
    return (img, recs) if record else img


def render_fn(
    pos: np.ndarray,
    scales: np.ndarray,
    rots: np.ndarray,
    opac: np.ndarray,
    colors: np.ndarray,
    sh: np.ndarray,
    meta: np.ndarray,
    cfg: dict,
) -> np.ndarray:
    """Forward render = rasterize(prepare(...))."""
    return rasterize_fn(prepare_fn(pos, scales, rots, opac, colors, sh, meta, cfg), cfg)


def _drot_dq(q: np.ndarray):
    """``∂R/∂q̂_c`` for each component c: ``[g, 4, 3, 3]``."""
    w, x, y, z = q[:, 0], q[:, 1], q[:, 2], q[:, 3]
    o = np.zeros_like(w)
    mk = lambda rows: np.stack([np.stack(r, -1) for r in rows], 1)  # noqa: E731
    dw = mk([[o, -2 * z, 2 * y], [2 * z, o, -2 * x], [-2 * y, 2 * x, o]])
    dx = mk([[o, 2 * y, 2 * z], [2 * y, -4 * x, -2 * w], [2 * z, 2 * w, -4 * x]])
    dy = mk([[-4 * y, 2 * x, 2 * w], [2 * x, o, 2 * z], [-2 * w, 2 * z, -4 * y]])
    dz = mk([[-4 * z, -2 * w, 2 * x], [2 * w, -4 * z, 2 * y], [2 * x, 2 * y, o]])
    return np.stack([dw, dx, dy, dz], 1)


def render_backward_fn(
    pos: np.ndarray,
    scales: np.ndarray,
    rots: np.ndarray,
    opac: np.ndarray,
    colors: np.ndarray,
    sh: np.ndarray,
    meta: np.ndarray,
    cfg: dict,
    d_img: np.ndarray,
    clip: float = 0.0,
    sh_band: int = 3,
) -> np.ndarray:
    """Analytic gradient of ``Σ d_img ⊙ render(...)``; returns ``[g, 14 + 3K]``."""
    g = pos.shape[0]
    if clip > 0:
        d_img = np.clip(d_img, -clip, clip)
    prep = prepare_fn(pos, scales, rots, opac, colors, sh, meta, cfg)
    _, recs = rasterize_fn(prep, cfg, record=True)
    gu, gv, gA, gB, gC, go = (np.zeros(g) for _ in range(6))
    gcol = np.zeros((g, 3))
    for ys, xs, steps in recs:
        dC = d_img[ys, xs]  # [P, 3]
        suffix = np.zeros(ys.size)  # Σ_{j later} α_j T_j (c_j · dC)
        for i, alpha, T, blend, dx, dy in reversed(steps):
            col = prep[i, 8:11]
            cd = dC @ col
            w = np.where(blend, alpha * T, 0.0)
            gcol[i] += w @ dC
            dalpha = np.where(blend, T * cd - suffix / (1.0 - alpha), 0.0)
            suffix = suffix + w * cd
            o = prep[i, 7]
            G = np.exp(
                np.minimum(
                    -0.5 * (prep[i, 4] * dx * dx + prep[i, 6] * dy * dy) - prep[i, 5] * dx * dy, 0.0
                )
            )
            unclamped = o * G < 0.99
            da = np.where(unclamped, dalpha, 0.0)
            go[i] += np.sum(da * G)
            dpow = da * o * G
            A, B, Cc = prep[i, 4:7]
            gA[i] += np.sum(dpow * -0.5 * dx * dx)
            gC[i] += np.sum(dpow * -0.5 * dy * dy)
            gB[i] += np.sum(dpow * -dx * dy)
            gu[i] += np.sum(dpow * (-A * dx - B * dy))
            gv[i] += np.sum(dpow * (-Cc * dy - B * dx))
    p = _project(pos, scales, rots, meta)
    valid = prep[:, 15] > 0
    # conic = inv(Σ'): dΣ' = −K gK K with gK the symmetric-matrix gradient
    K = np.stack(
        [
            np.stack([p["conic"][:, 0], p["conic"][:, 1]], -1),
            np.stack([p["conic"][:, 1], p["conic"][:, 2]], -1),
        ],
        1,
    )
    gK = np.stack([np.stack([gA, 0.5 * gB], -1), np.stack([0.5 * gB, gC], -1)], 1)
    gS2 = -K @ gK @ K
    tm, sig = p["tm"], p["sig"]
    gsig = np.swapaxes(tm, 1, 2) @ gS2 @ tm
    gtm = 2.0 * gS2 @ tm @ sig
    gJ = gtm @ p["rv"].T
    t, tz, fx, fy = p["t"], p["tz"], p["fx"], p["fy"]
    gt = np.zeros((g, 3))
    gt[:, 0] = gJ[:, 0, 2] * (-fx / tz**2) + gu * fx / tz
    gt[:, 1] = gJ[:, 1, 2] * (-fy / tz**2) + gv * fy / tz
    gt[:, 2] = (
        gJ[:, 0, 0] * (-fx / tz**2)
        + gJ[:, 0, 2] * (2 * fx * t[:, 0] / tz**3)
        + gJ[:, 1, 1] * (-fy / tz**2)
        + gJ[:, 1, 2] * (2 * fy * t[:, 1] / tz**3)
        - gu * fx * t[:, 0] / tz**2
        - gv * fy * t[:, 1] / tz**2
    )
    gpos = gt @ p["rv"]
    gm = 2.0 * gsig @ p["m"]
    gscale = np.einsum("gik,gik->gk", gm, p["r"])
    gr = gm * scales[:, None, :]
    gqh = np.einsum("gij,gcij->gc", gr, _drot_dq(p["qh"]))
    gq = (gqh - p["qh"] * np.sum(p["qh"] * gqh, 1, keepdims=True)) / np.where(
        p["qn"] > 0, p["qn"], 1.0
    )
    rgb, raw, dirs, dist, k = _colors(pos, colors, sh, meta)
    gsh = np.zeros((g, k, 3))
    gcolors = np.zeros((g, 3))
    if k >= 1:
        n = sh_used(k)
        gc = gcol * (raw > 0)
        live = min(n, (int(sh_band) + 1) ** 2)
        gsh[:, :live] = sh_basis(dirs)[:, :live, None] * gc[:, None, :]
        if n > 1:
            # colour_c = 0.5 + Σ_j Y_j(d) sh_jc, d = (p − centre) / |p − centre|
            w = np.einsum("gc,gjc->gj", gc, sh.reshape(g, k, 3)[:, :n])
            gdir = np.einsum("gj,gja->ga", w, sh_basis_grad(dirs)[:, :n])
            along = np.sum(gdir * dirs, 1, keepdims=True)
            gpos = gpos + (gdir - dirs * along) / np.where(dist > 0, dist, 1.0)[:, None]
    else:
        gcolors = gcol
    parts = [gpos, gscale, gq, go[:, None], gcolors, gsh.reshape(g, 3 * k)]
    return np.where(valid[:, None], np.concatenate(parts, 1), 0.0)


# ---------------------------------------------------------------- thunks


def _operands(t: dict, mem: Memory):
    def rd(name: str, cols: int) -> np.ndarray:
        n = int(t[f"{name}_len"])
        if n == 0:
            return np.zeros((0, cols)) if cols else np.zeros(0)
        v = mem.view(t[f"{name}_off"], n, np.float32).astype(np.float64)
        return v.reshape(-1, cols) if cols else v

    pos = rd("positions", 3)
    sh = rd("sh_coeffs", 0)
    meta = mem.view(t["meta_off"], 20, np.float32).astype(np.float64)
    return pos, rd("scales", 3), rd("rotations", 4), rd("opacities", 0), rd("colors", 3), sh, meta


@reference("gaussian_splat_prepare")
def gaussian_splat_prepare(t: dict, mem: Memory) -> None:
    """Writes the ``[g, 16]`` prepare records."""
    rec = prepare_fn(*_operands(t, mem), t)
    mem.view(t["prep_off"], rec.shape, np.float32)[...] = rec


@reference("gaussian_splat_rasterize")
def gaussian_splat_rasterize(t: dict, mem: Memory) -> None:
    """Blends ``count`` prepared records into ``[height, width, 3]``."""
    prep = mem.view(t["prep_off"], (int(t["count"]), 16), np.float32).astype(np.float64)
    img = rasterize_fn(prep, t)
    mem.view(t["dst_off"], img.shape, np.float32)[...] = img


@reference("gaussian_splat_render")
def gaussian_splat_render(t: dict, mem: Memory) -> None:
    """Forward render into ``[height, width, 3]`` f32."""
    img = render_fn(*_operands(t, mem), t)
    mem.view(t["dst_off"], img.shape, np.float32)[...] = img


@reference("gaussian_splat_render_backward")
def gaussian_splat_render_backward(t: dict, mem: Memory) -> None:
    """Packed per-splat gradients (layout in the module doc)."""
    ops = _operands(t, mem)
    d = mem.view(t["d_loss_off"], (int(t["height"]), int(t["width"]), 3), np.float32).astype(
        np.float64
    )
    packed = render_backward_fn(
        *ops, t, d, float(t.get("loss_grad_clip", 0.0)), int(t.get("sh_band", 3))
    )
    mem.view(t["packed_off"], packed.shape, np.float32)[...] = packed
