//! Gradient of the Gaussian-splat render ([`super::splat::render`]) w.r.t.
//! every per-splat operand, packed one row per splat:
//! `[g, 14 + 3k]` = position (3), scale (3), rotation (4), opacity (1),
//! colour (3), SH coefficients (`3k`, coefficient-major).
//!
//! Two stages, as in the paper's backward pass:
//!
//! 1. per pixel, the blended splats are walked again front to back and
//!    then back to front: with `S_i = Σ_{j>i} α_j T_j (c_j · ∂L/∂C)`,
//!    `∂L/∂α_i = T_i (c_i · ∂L/∂C) − S_i / (1 − α_i)` and
//!    `∂L/∂c_i = α_i T_i ∂L/∂C`; through `α = o·exp(power)` this gives the
//!    gradients of the 2-D mean, the conic and the opacity. They are summed
//!    per list entry (tiles in parallel, each owning its entries), then per
//!    splat in entry order, so the result does not depend on threads;
//! 2. per splat, the chain back through `conic = Σ'⁻¹`, `Σ' = JWΣWᵀJᵀ`,
//!    the perspective Jacobian and projection, `Σ = RSSᵀRᵀ`, the quaternion
//!    normalisation and the SH colour (its clamp at 0 and its viewing
//!    direction).
//!
//! Piecewise-constant parts have no gradient: the tile rectangles, the
//! culling, the stopping rule, the 0.99 alpha clamp (a clamped splat passes
//! no gradient to its opacity / shape) and the colour clamp. `d_loss` is
//! clipped to `±loss_grad_clip` first. SH coefficients of bands above
//! `sh_band` get a zero gradient (frozen, as in the paper's band-by-band
//! schedule); the colour still uses every band the forward uses.

use super::splat::{
    project, sh_basis, sh_basis_grad, sh_used, tile_lists, walk, Camera, SplatDims, SplatParams,
    Step, M3, PREP_WIDTH,
};
use super::{check_len, invalid, Result};
use rayon::prelude::*;

const K: &str = "gaussian_splat_render_backward";

/// Per-entry 2-D gradient: `u, v, conic a, b, c, opacity, r, g, b`.
type G2 = [f64; 9];

/// Width of a packed gradient row for `k` SH coefficients.
pub fn packed_width(k: usize) -> Option<usize> {
    k.checked_mul(3)?.checked_add(14)
}

/// Settings of the gradient beyond the render's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BackwardOpts {
    /// Clip on `|d_loss|` (≤ 0: no clip).
    pub loss_grad_clip: f32,
    /// Highest SH band that receives a gradient.
    pub sh_band: u32,
}

/// The gradient of `Σ d_loss ⊙ render(...)`, into `packed [g, 14 + 3k]`.
pub fn render_backward(
    p: &SplatParams<'_>,
    meta: &[f32],
    d_loss: &[f32],
    d: &SplatDims,
    opts: BackwardOpts,
    packed: &mut [f32],
) -> Result<()> {
    let width = packed_width(d.sh_coeffs).ok_or_else(|| invalid(K, "row width overflows"))?;
    let need = d
        .splats
        .checked_mul(width)
        .ok_or_else(|| invalid(K, "packed size overflows"))?;
    check_len(K, "packed", packed.len(), need)?;
    let n_img = d.image_len(K)?;
    check_len(K, "d_loss", d_loss.len(), n_img)?;
    let recs = super::splat::prepare_f64(K, p, meta, d)?;
    let g2 = pixel_stage(&recs, d_loss, d, opts)?;
    let cam = Camera::new(K, meta)?;
    packed[..need]
        .par_chunks_mut(width.max(1))
        .enumerate()
        .with_min_len(64)
        .for_each(|(i, row)| {
            row.fill(0.0);
            if let Some(pr) = project(p, &cam, d, i) {
                chain(p, &cam, d, opts, i, &pr, &g2[i], row);
            }
        });
    Ok(())
}

/// Stage 1: per-splat sums of the 2-D gradients.
fn pixel_stage(
    recs: &[[f64; PREP_WIDTH]],
    d_loss: &[f32],
    d: &SplatDims,
    opts: BackwardOpts,
) -> Result<Vec<G2>> {
    let lists = tile_lists(K, recs, d)?;
    let (tx, ty) = d.tiles();
    let mut acc = vec![[0.0f64; 9]; lists.ids.len()];
    // one band of entries per row of tiles (tile ids are row-major)
    let mut bands = Vec::with_capacity(ty);
    let mut rest = acc.as_mut_slice();
    let mut consumed = 0usize;
    for row in 0..ty {
        let end = if row + 1 < ty {
            lists.starts[(row + 1) * tx]
        } else {
            lists.ids.len()
        };
        let (head, tail) = rest.split_at_mut(end - consumed);
        bands.push((row, consumed, head));
        consumed = end;
        rest = tail;
    }
    let clip = if opts.loss_grad_clip > 0.0 {
        opts.loss_grad_clip as f64
    } else {
        f64::INFINITY
    };
    let (w, ts) = (d.width, d.tile_size);
    bands.into_par_iter().for_each(|(row, base, band)| {
        let mut steps: Vec<Step> = Vec::new();
        for tile_x in 0..tx {
            let t = row * tx + tile_x;
            let start = lists.starts[t];
            let list = &lists.ids[start..start + lists.lens[t]];
            let local = &mut band[start - base..start - base + list.len()];
            for y in row * ts..((row + 1) * ts).min(d.height) {
                for x in tile_x * ts..((tile_x + 1) * ts).min(w) {
                    steps.clear();
                    let (px, py) = (x as f64 + 0.5, y as f64 + 0.5);
                    walk(recs, list, px, py, d, |s| steps.push(s));
                    let o = (y * w + x) * 3;
                    let dc: [f64; 3] =
                        std::array::from_fn(|c| (d_loss[o + c] as f64).clamp(-clip, clip));
                    pixel_backward(recs, &steps, dc, local);
                }
            }
        }
    });
    let mut g2 = vec![[0.0f64; 9]; recs.len()];
    for t in 0..lists.starts.len() {
        let s = lists.starts[t];
        for e in s..s + lists.lens[t] {
            let dst = &mut g2[lists.ids[e] as usize];
            for (a, b) in dst.iter_mut().zip(&acc[e]) {
                *a += b;
            }
        }
    }
    Ok(g2)
}

/// Back-to-front pass over one pixel's blended steps.
fn pixel_backward(recs: &[[f64; PREP_WIDTH]], steps: &[Step], dc: [f64; 3], acc: &mut [G2]) {
    let mut suffix = 0.0f64;
    for s in steps.iter().rev() {
        let r = &recs[s.splat];
        let cd = r[8] * dc[0] + r[9] * dc[1] + r[10] * dc[2];
        let w = s.alpha * s.t_before;
        let e = &mut acc[s.pos];
        for (a, d) in e[6..9].iter_mut().zip(dc) {
            *a += w * d;
        }
        let dalpha = s.t_before * cd - suffix / (1.0 - s.alpha);
        suffix += w * cd;
        if !s.unclamped {
            continue;
        }
        e[5] += dalpha * s.gauss;
        let dpow = dalpha * s.alpha;
        let (a, b, c) = (r[4], r[5], r[6]);
        let (dx, dy) = (s.dx, s.dy);
        e[0] += dpow * (-a * dx - b * dy);
        e[1] += dpow * (-c * dy - b * dx);
        e[2] += dpow * (-0.5 * dx * dx);
        e[3] += dpow * (-dx * dy);
        e[4] += dpow * (-0.5 * dy * dy);
    }
}

fn mat_mul<const A: usize, const B: usize, const C: usize>(
    x: &[[f64; B]; A],
    y: &[[f64; C]; B],
) -> [[f64; C]; A] {
    std::array::from_fn(|i| std::array::from_fn(|j| (0..B).map(|k| x[i][k] * y[k][j]).sum()))
}

fn transpose<const A: usize, const B: usize>(x: &[[f64; B]; A]) -> [[f64; A]; B] {
    std::array::from_fn(|i| std::array::from_fn(|j| x[j][i]))
}

/// `∂L/∂q̂` from `∂L/∂R` for unit quaternion `q̂ = (w, x, y, z)`.
fn quat_grad(q: [f64; 4], gr: &M3) -> [f64; 4] {
    let [w, x, y, z] = q;
    let g = |i: usize, j: usize| gr[i][j];
    [
        2.0 * (-z * g(0, 1) + y * g(0, 2) + z * g(1, 0) - x * g(1, 2) - y * g(2, 0) + x * g(2, 1)),
        2.0 * (y * g(0, 1) + z * g(0, 2) + y * g(1, 0) - 2.0 * x * g(1, 1) - w * g(1, 2)
            + z * g(2, 0)
            + w * g(2, 1)
            - 2.0 * x * g(2, 2)),
        2.0 * (-2.0 * y * g(0, 0) + x * g(0, 1) + w * g(0, 2) + x * g(1, 0) + z * g(1, 2)
            - w * g(2, 0)
            + z * g(2, 1)
            - 2.0 * y * g(2, 2)),
        2.0 * (-2.0 * z * g(0, 0) - w * g(0, 1) + x * g(0, 2) + w * g(1, 0) - 2.0 * z * g(1, 1)
            + y * g(1, 2)
            + x * g(2, 0)
            + y * g(2, 1)),
    ]
}

/// Stage 2 for splat `i`: the 2-D gradient `g` back to the operands.
#[allow(clippy::too_many_arguments)]
fn chain(
    p: &SplatParams<'_>,
    cam: &Camera,
    d: &SplatDims,
    opts: BackwardOpts,
    i: usize,
    pr: &super::splat::Projected,
    g: &G2,
    row: &mut [f32],
) {
    let [gu, gv, ga, gb, gc, go] = [g[0], g[1], g[2], g[3], g[4], g[5]];
    // conic K = Σ'⁻¹: dΣ' = −K dK K (dK symmetric; b appears twice in K)
    let kk = [[pr.conic[0], pr.conic[1]], [pr.conic[1], pr.conic[2]]];
    let gk = [[ga, 0.5 * gb], [0.5 * gb, gc]];
    let gs2 = mat_mul(&mat_mul(&kk, &gk), &kk).map(|r| r.map(|v| -v));
    // Σ' = (JW) Σ (JW)ᵀ
    let jwt = transpose(&pr.jw);
    let gsig = mat_mul(&mat_mul(&jwt, &gs2), &pr.jw);
    let gjw = mat_mul(&mat_mul(&gs2, &pr.jw), &pr.sigma).map(|r| r.map(|v| 2.0 * v));
    let gj = mat_mul(&gjw, &transpose(&cam.w));
    let [tx, ty, tz] = pr.t;
    let (fx, fy) = (cam.fx, cam.fy);
    let tz2 = tz * tz;
    let tz3 = tz2 * tz;
    let gt = [
        gj[0][2] * (-fx / tz2) + gu * fx / tz,
        gj[1][2] * (-fy / tz2) + gv * fy / tz,
        gj[0][0] * (-fx / tz2)
            + gj[0][2] * (2.0 * fx * tx / tz3)
            + gj[1][1] * (-fy / tz2)
            + gj[1][2] * (2.0 * fy * ty / tz3)
            - gu * fx * tx / tz2
            - gv * fy * ty / tz2,
    ];
    let mut gpos: [f64; 3] = std::array::from_fn(|c| (0..3).map(|r| gt[r] * cam.w[r][c]).sum());
    // Σ = M Mᵀ, M = R S
    let gm = mat_mul(&gsig, &pr.m).map(|r| r.map(|v| 2.0 * v));
    let scale: [f64; 3] = std::array::from_fn(|c| p.scales[i * 3 + c] as f64);
    let gscale: [f64; 3] = std::array::from_fn(|k| (0..3).map(|a| gm[a][k] * pr.r[a][k]).sum());
    let gr: M3 = std::array::from_fn(|a| std::array::from_fn(|k| gm[a][k] * scale[k]));
    let gqh = quat_grad(pr.qn, &gr);
    let dot: f64 = (0..4).map(|c| pr.qn[c] * gqh[c]).sum();
    let inv = if pr.qnorm > 0.0 { 1.0 / pr.qnorm } else { 1.0 };
    let gq: [f64; 4] = std::array::from_fn(|c| (gqh[c] - pr.qn[c] * dot) * inv);
    // colour
    let k = d.sh_coeffs;
    let used = sh_used(k);
    let mut gcolors = [0.0f64; 3];
    if used == 0 {
        gcolors = [g[6], g[7], g[8]];
    } else {
        let gcol: [f64; 3] =
            std::array::from_fn(|c| if pr.raw_rgb[c] > 0.0 { g[6 + c] } else { 0.0 });
        let basis = sh_basis(pr.dir);
        let live = used.min((opts.sh_band as usize + 1).pow(2));
        let base = i * k * 3;
        for (j, b) in basis.iter().enumerate().take(live) {
            for (o, gc) in row[14 + j * 3..17 + j * 3].iter_mut().zip(gcol) {
                *o = (b * gc) as f32;
            }
        }
        if used > 1 && pr.dist > 0.0 {
            let bg = sh_basis_grad(pr.dir);
            let mut gdir = [0.0f64; 3];
            for (j, bgj) in bg.iter().enumerate().take(used).skip(1) {
                let w: f64 = (0..3)
                    .map(|c| gcol[c] * p.sh[base + j * 3 + c] as f64)
                    .sum();
                for (gd, b) in gdir.iter_mut().zip(bgj) {
                    *gd += w * b;
                }
            }
            let along: f64 = (0..3).map(|a| gdir[a] * pr.dir[a]).sum();
            for ((gp, gd), dr) in gpos.iter_mut().zip(gdir).zip(pr.dir) {
                *gp += (gd - dr * along) / pr.dist;
            }
        }
    }
    let head = gpos
        .iter()
        .chain(&gscale)
        .chain(&gq)
        .chain(std::iter::once(&go))
        .chain(&gcolors);
    for (o, v) in row.iter_mut().zip(head) {
        *o = *v as f32;
    }
}
