"""Gaussian-splat cases of scripts/make_op_grad_fixtures.py: 3-D Gaussian
splatting (Kerbl, Kopanas, Leimkühler & Drettakis, SIGGRAPH 2023) written in
torch from the documented math (``rlx.ops.misc.MiscOps.gaussian_splat_render``
and the module doc of ``python/rlx/reference/splat.py``): EWA projection
(Zwicker et al. 2002), ``conic = Σ'^{-1}`` by ``torch.linalg.inv``, the
paper's real SH colours (its ``eval_sh`` constants), tile binning, and a
front-to-back blend of the depth-sorted splats per pixel.

The piecewise-constant parts (radius, tile range, valid flag, the depth
order, the α cut-off, the transmittance stop, ``max_splat_steps``) are
decisions taken on the forward's values, as the op documents its gradient;
every scene asserts that it stays clear of them (radius / tile edges not
within 1e-3 of an integer, α and the transmittance test not within 0.1 %
of their thresholds, colours clear of the clamp at 0, distinct depths) so
that rlx's f32 forward takes the same decisions as torch's float64 one.
"""

from __future__ import annotations

import math
from types import ModuleType

import numpy as np
import torch

# tests/autodiff is on sys.path: make_op_grad_fixtures.py puts it there
# before it imports this module
from _splat_scene import splat_scene

T = torch.Tensor
D = dict[str, T]
#: the operands, in the op's order
NAMES = ["pos", "scl", "rot", "opa", "col", "sh", "cam"]
#: image 12 × 10 in 4-pixel tiles (3 × 3 tiles, the last row partial)
BASE = dict(width=12, height=10, tile_size=4, radius_scale=3.0, alpha_cutoff=1.0 / 255.0,
            max_splat_steps=1024, transmittance_threshold=1e-4)  # fmt: skip
#: the real SH basis constants of the paper's code (sh_utils.eval_sh)
SH_C0 = 0.28209479177387814
SH_C1 = 0.4886025119029199
SH_C2 = [1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792,
         0.5462742152960396]  # fmt: skip
SH_C3 = [-0.5900435899266435, 2.890611442640554, -0.4570457994644658, 0.3731763325901154,
         -0.4570457994644658, 1.445305721320277, -0.5900435899266435]  # fmt: skip


def f32(v: float) -> float:
    """A config value as the op holds it (f32)."""
    return float(np.float32(v))


def away_int(v: T, margin: float, what: str) -> None:
    """Assert the values stay ``margin`` away from integers (floor / ceil edges)."""
    gap = float((v - v.round()).abs().min()) if v.numel() else 1.0
    assert gap > margin, f"{what}: {gap:.2e} from an integer"


def away_rel(v: T, at: float, margin: float, what: str) -> None:
    """Assert ``|v / at − 1| > margin`` (a threshold test)."""
    gap = float((v / at - 1).abs().min()) if v.numel() else 1.0
    assert gap > margin, f"{what}: {gap:.2e} relative from {at}"


def quat_to_rot(q: T) -> T:
    """Rotation matrices of unit quaternions ``(w, x, y, z)``."""
    w, x, y, z = q.unbind(1)
    return torch.stack([
        torch.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
        torch.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
        torch.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
    ], 1)  # fmt: skip


def eval_sh(deg: int, sh: T, dirs: T) -> T:
    """The paper's ``eval_sh``: ``Σ Y_j(dir) sh_j`` over bands ≤ ``deg``, ``sh [g, K, 3]``."""
    res = SH_C0 * sh[:, 0]
    if deg > 0:
        x, y, z = (dirs[:, i : i + 1] for i in range(3))
        res = res - SH_C1 * y * sh[:, 1] + SH_C1 * z * sh[:, 2] - SH_C1 * x * sh[:, 3]
        if deg > 1:
            xx, yy, zz, xy, yz, xz = x * x, y * y, z * z, x * y, y * z, x * z
            res = (res + SH_C2[0] * xy * sh[:, 4] + SH_C2[1] * yz * sh[:, 5]
                   + SH_C2[2] * (2 * zz - xx - yy) * sh[:, 6] + SH_C2[3] * xz * sh[:, 7]
                   + SH_C2[4] * (xx - yy) * sh[:, 8])  # fmt: skip
            if deg > 2:
                res = (res + SH_C3[0] * y * (3 * xx - yy) * sh[:, 9]
                       + SH_C3[1] * xy * z * sh[:, 10]
                       + SH_C3[2] * y * (4 * zz - xx - yy) * sh[:, 11]
                       + SH_C3[3] * z * (2 * zz - 3 * xx - 3 * yy) * sh[:, 12]
                       + SH_C3[4] * x * (4 * zz - xx - yy) * sh[:, 13]
                       + SH_C3[5] * z * (xx - yy) * sh[:, 14]
                       + SH_C3[6] * x * (xx - 3 * yy) * sh[:, 15])  # fmt: skip
    return res


def prepare(d: D, cfg: dict) -> T:
    """The ``[g, 16]`` records: ``u, v, depth, radius, conic a b c, opacity,
    r g b, tile x0 y0 x1 y1 (exclusive), valid``; culled rows all zero."""
    pos, scl, rot, opa, col, sh, cam = (d[k] for k in NAMES)
    view = cam[:16].reshape(4, 4)
    rv, tv = view[:3, :3], view[:3, 3]
    fx, fy, cx, cy = cam[16:20].unbind(0)
    t = pos @ rv.T + tv
    tx, ty, tz = t.unbind(1)
    # Σ = R S Sᵀ Rᵀ; Σ' = J W Σ Wᵀ Jᵀ + 0.3·I with J the projection's Jacobian
    ms = quat_to_rot(rot / rot.norm(dim=1, keepdim=True)) * scl[:, None, :]
    z0 = torch.zeros_like(tz)
    jac = torch.stack([torch.stack([fx / tz, z0, -fx * tx / tz**2], -1),
                       torch.stack([z0, fy / tz, -fy * ty / tz**2], -1)], 1)  # fmt: skip
    tm = jac @ rv
    s2 = tm @ ms @ ms.transpose(1, 2) @ tm.transpose(1, 2) + 0.3 * torch.eye(2, dtype=t.dtype)
    conic = torch.linalg.inv(s2)
    det = torch.linalg.det(s2).detach()
    u, v = fx * tx / tz + cx, fy * ty / tz + cy
    # radius and tiles: piecewise constant (no gradient)
    a, c = s2[:, 0, 0].detach(), s2[:, 1, 1].detach()
    mid = 0.5 * (a + c)
    ext = cfg["radius_scale"] * torch.sqrt(mid + torch.sqrt(torch.clamp(mid * mid - det, min=0.1)))
    rad = torch.ceil(ext)
    ts = cfg["tile_size"]
    ntx, nty = -(-cfg["width"] // ts), -(-cfg["height"] // ts)
    ud, vd = u.detach(), v.detach()
    edges = [(ud - rad) / ts, (vd - rad) / ts, (ud + rad + ts - 1) / ts, (vd + rad + ts - 1) / ts]
    x0, y0, x1, y1 = (torch.clamp(torch.floor(e), 0, n) for e, n in zip(edges, [ntx, nty] * 2))
    valid = (tz.detach() > 0.2) & (det > 0) & (x1 > x0) & (y1 > y0)
    k = sh.shape[1]
    if k:
        centre = -rv.T @ tv
        diff = pos - centre
        dirs = diff / diff.norm(dim=1, keepdim=True)
        raw = 0.5 + eval_sh(min(3, math.isqrt(k) - 1), sh, dirs)
        assert float(raw[valid].detach().min()) > 1e-2, "an SH colour near the clamp at 0"
        col = torch.clamp(raw, min=0.0)
    # the scene stays clear of the decisions
    vt = valid.detach()
    assert float((tz.detach() - 0.2).abs().min()) > 0.1
    away_int(ext[vt], 1e-3, "radius")
    away_int(torch.stack(edges, 1)[vt], 1e-3, "tile edge")
    dep = tz.detach()[vt]
    assert dep.numel() < 2 or float(torch.diff(torch.sort(dep).values).min()) > 1e-3
    rec = torch.cat([torch.stack([u, v, tz, rad], -1), conic[:, 0, :], conic[:, 1, 1:],
                     opa[:, None], col, torch.stack([x0, y0, x1, y1, torch.ones_like(x0)], -1)],
                    1)  # fmt: skip
    return torch.where(valid[:, None], rec, torch.zeros_like(rec))


def rasterize(prep: T, cfg: dict) -> T:
    """``[height, width, 3]``: each pixel centre walks the splats whose tiles
    cover it, front to back (depth, then index): ``power = −½(A dx² + C dy²)
    − B dx dy`` (``d = mean − pixel``), skipped if > 0; ``α = min(0.99,
    o·e^power)``, skipped if below the cut-off; stop when ``T(1 − α)`` falls
    below the threshold (that splat unblended) or after ``max_splat_steps``
    blended ones; ``C += α T c``, ``T ← T(1 − α)``; black background."""
    w, h, ts = cfg["width"], cfg["height"], cfg["tile_size"]
    cut, thr = f32(cfg["alpha_cutoff"]), f32(cfg["transmittance_threshold"])
    pd = prep.detach()
    ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    ys, xs = ys.reshape(-1), xs.reshape(-1)
    px, py = xs.double() + 0.5, ys.double() + 0.5
    tpx, tpy = xs // ts, ys // ts
    tr = torch.ones(px.shape, dtype=prep.dtype)
    img = torch.zeros(px.shape + (3,), dtype=prep.dtype)
    live = torch.ones(px.shape, dtype=torch.bool)
    count = torch.zeros(px.shape, dtype=torch.long)
    order = np.argsort(pd[:, 2].numpy(), kind="stable")
    for i in (int(j) for j in order if pd[j, 15] > 0):
        x0, y0, x1, y1 = pd[i, 11:15]
        cover = (tpx >= x0) & (tpx < x1) & (tpy >= y0) & (tpy < y1)
        u, v, a, b, c, o = prep[i, 0], prep[i, 1], prep[i, 4], prep[i, 5], prep[i, 6], prep[i, 7]
        dx, dy = u - px, v - py
        power = -0.5 * (a * dx * dx + c * dy * dy) - b * dx * dy
        raw = o * torch.exp(power)
        alpha = torch.clamp(raw, max=0.99)
        pw, ad = power.detach(), alpha.detach()
        seen = live & cover & (pw <= 0)
        away_rel(ad[seen], cut, 1e-3, "α vs the cut-off")
        away_rel(raw.detach()[seen], 0.99, 1e-3, "α vs the 0.99 clamp")
        ok = seen & (ad >= cut)
        test = tr.detach() * (1 - ad)
        away_rel(test[ok], thr, 1e-3, "transmittance vs the threshold")
        stop = ok & (test < thr)
        live = live & ~stop
        blend = ok & ~stop
        img = img + torch.where(blend, alpha * tr, 0.0)[:, None] * prep[i, 8:11]
        tr = torch.where(blend, tr * (1 - alpha), tr)
        count = count + blend.long()
        if cfg["max_splat_steps"] > 0:
            live = live & (count < cfg["max_splat_steps"])
    return img.reshape(h, w, 3)


def scene(g: int, k: int, seed: int, culled: bool = False, opa: float = 0.0) -> dict:
    """``splat_scene`` (tests/autodiff/_splat_scene.py) for the 12 × 10 image
    in float32: ``g`` splats (when ``culled`` the last one behind the
    camera), ``opa`` > 0 sets every opacity (to make pixels stop early)."""
    out = splat_scene(g, k, seed, width=BASE["width"], height=BASE["height"], culled=culled,
                      opa=opa)  # fmt: skip
    return {n: v.astype(np.float32) for n, v in out.items()}


#: per case: scene (splats, SH coefficients, seed, culled, opacity), config
#: changes, the operands differentiated; shared with the test
CASES: dict[str, tuple[tuple, dict, list[str]]] = {
    "gaussian_splat_prepare_sh16": ((5, 16, 11, True, 0.0), {},
                                    ["pos", "scl", "rot", "opa", "sh", "cam"]),
    "gaussian_splat_prepare_rgb": ((4, 0, 12, False, 0.0), {},
                                   ["pos", "scl", "rot", "opa", "col", "cam"]),
    "gaussian_splat_rasterize_stop": ((5, 0, 13, True, 0.9), {"transmittance_threshold": 0.3},
                                      ["prep"]),
    "gaussian_splat_render_rgb": ((5, 0, 14, True, 0.0), {}, ["pos", "scl", "rot", "opa", "col"]),
    "gaussian_splat_render_sh9_steps": ((5, 9, 15, False, 0.9), {"max_splat_steps": 2},
                                        ["pos", "scl", "rot", "opa", "sh"]),
}  # fmt: skip


def register(m: ModuleType) -> None:
    """Register the splat cases with the main script ``m``."""
    for name, (sc, change, wrt) in CASES.items():
        cfg = {**BASE, **change}
        s = scene(*sc)
        if "rasterize" in name:
            with torch.no_grad():
                prep = prepare({k: torch.tensor(v, dtype=torch.float64) for k, v in s.items()},
                               cfg).numpy().astype(np.float32)  # fmt: skip
            ins = {"prep": prep, "cam": s["cam"]}
            fwd = lambda d, c=cfg: rasterize(d["prep"], c)  # noqa: E731
        elif "prepare" in name:
            ins, fwd = s, lambda d, c=cfg: prepare(d, c)  # noqa: E731
        else:
            ins, fwd = s, lambda d, c=cfg: rasterize(prepare(d, c), c)  # noqa: E731
        m.case(name, {k: (list(v.shape), v) for k, v in ins.items()}, wrt)(fwd)
