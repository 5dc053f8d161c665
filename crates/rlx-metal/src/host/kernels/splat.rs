//! 3-D Gaussian splatting on the host: per-splat projection ("prepare"),
//! tile binning with a depth sort, front-to-back alpha compositing
//! ("rasterize"), and the gradient of the render ([`super::splat_backward`]).
//!
//! The maths follows Kerbl, Kopanas, Leimkühler & Drettakis, "3D Gaussian
//! Splatting for Real-Time Radiance Field Rendering" (SIGGRAPH 2023) and the
//! EWA splatting of Zwicker, Pfister, van Baar & Gross (2002); the exact
//! conventions (camera block, record layout, cut-offs) are the ones the
//! numpy reference `python/rlx/reference/splat.py` documents:
//!
//! * camera `[20]`: a row-major 4×4 world→camera matrix (OpenCV axes), then
//!   `fx, fy, cx, cy` in pixels;
//! * `Σ = R S Sᵀ Rᵀ` from the (normalised, `w x y z`) quaternion and the
//!   scales; `Σ' = J W Σ Wᵀ Jᵀ + 0.3 I` with `J` the perspective Jacobian;
//!   the conic is `Σ'⁻¹`; splats with `t_z ≤ 0.2` or `det Σ' ≤ 0` are culled;
//! * colour: with `k ≥ 1` SH coefficients per splat, degree
//!   `min(3, ⌊√k⌋ − 1)` real spherical harmonics of the viewing direction
//!   (splat centre minus camera centre), `max(0, 0.5 + Σ Y·sh)`; with `k = 0`
//!   the `colors` operand;
//! * record `[16]`: `u, v, depth, radius, conic a b c, opacity, r g b,
//!   tile x0 y0 x1 y1 (exclusive), valid`; culled rows are zero;
//! * entries `(tile, depth, index)` sorted and cut to `max_list_entries`;
//!   each pixel (sampled at its centre) blends its tile's list front to
//!   back until the transmittance would fall below the threshold or
//!   `max_splat_steps` splats are blended.
//!
//! Everything is computed in f64 (inputs and outputs are f32). Work is
//! split across rayon's pool by splat (prepare) and by row of tiles
//! (rasterize), so results do not depend on the thread count.

use super::{check_len, invalid, Result};
use rayon::prelude::*;

/// f32 elements of the camera block.
pub const CAMERA_LEN: usize = 20;
/// f32 elements of one prepared record.
pub const PREP_WIDTH: usize = 16;
/// Splats closer than this (camera z) are culled.
pub(crate) const NEAR: f64 = 0.2;
/// Low-pass filter added to the screen covariance (pixels²).
pub(crate) const BLUR: f64 = 0.3;
/// Largest alpha a splat can reach.
pub(crate) const ALPHA_MAX: f64 = 0.99;
/// `C0` of the degree-0 spherical harmonic.
pub(crate) const SH_C0: f64 = 0.282_094_791_773_878_14;
const SH_C1: f64 = 0.488_602_511_902_919_9;
const SH_C2: [f64; 5] = [
    1.092_548_430_592_079_2,
    -1.092_548_430_592_079_2,
    0.315_391_565_252_520_05,
    -1.092_548_430_592_079_2,
    0.546_274_215_296_039_6,
];
const SH_C3: [f64; 7] = [
    -0.590_043_589_926_643_5,
    2.890_611_442_640_554,
    -0.457_045_799_464_465_8,
    0.373_176_332_590_115_4,
    -0.457_045_799_464_465_8,
    1.445_305_721_320_277,
    -0.590_043_589_926_643_5,
];

/// Sizes and settings of a splat kernel call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SplatDims {
    /// Number of splats `g`.
    pub splats: usize,
    /// SH coefficients per splat `k` (0 = use `colors`).
    pub sh_coeffs: usize,
    /// Image width.
    pub width: usize,
    /// Image height.
    pub height: usize,
    /// Tile edge in pixels.
    pub tile_size: usize,
    /// Splat extent in standard deviations.
    pub radius_scale: f32,
    /// Minimum alpha that contributes.
    pub alpha_cutoff: f32,
    /// Most splats blended per pixel (0 = unlimited).
    pub max_splat_steps: usize,
    /// Stop before the transmittance falls below this.
    pub transmittance_threshold: f32,
    /// Capacity of the sorted entry list (0 = unlimited).
    pub max_list_entries: usize,
}

impl SplatDims {
    /// Tiles across and down.
    pub fn tiles(&self) -> (usize, usize) {
        let ts = self.tile_size.max(1);
        (self.width.div_ceil(ts), self.height.div_ceil(ts))
    }

    /// Pixels × 3 of the image, checked.
    pub(crate) fn image_len(&self, kernel: &'static str) -> Result<usize> {
        self.width
            .checked_mul(self.height)
            .and_then(|n| n.checked_mul(3))
            .ok_or_else(|| invalid(kernel, "image size overflows"))
    }

    fn check(&self, kernel: &'static str) -> Result<()> {
        if self.width == 0 || self.height == 0 || self.tile_size == 0 {
            return Err(invalid(kernel, "width, height and tile_size must be > 0"));
        }
        self.image_len(kernel).map(|_| ())
    }
}

/// The per-splat operands (f32, row-major): positions `[g, 3]`, scales
/// `[g, 3]`, rotations `[g, 4]`, opacities `[g]`, colors `[g, 3]`, sh
/// `[g, k, 3]`.
#[derive(Clone, Copy, Debug)]
pub struct SplatParams<'a> {
    /// Means.
    pub positions: &'a [f32],
    /// Per-axis standard deviations.
    pub scales: &'a [f32],
    /// Quaternions `w, x, y, z` (any norm).
    pub rotations: &'a [f32],
    /// Opacities.
    pub opacities: &'a [f32],
    /// Colours (used when `k = 0`).
    pub colors: &'a [f32],
    /// SH coefficients, coefficient-major per splat.
    pub sh: &'a [f32],
}

impl SplatParams<'_> {
    /// Check every operand against `d`.
    pub(crate) fn check(&self, kernel: &'static str, d: &SplatDims) -> Result<()> {
        let g = d.splats;
        let m = |n: usize| {
            g.checked_mul(n)
                .ok_or_else(|| invalid(kernel, "operand size overflows"))
        };
        check_len(kernel, "positions", self.positions.len(), m(3)?)?;
        check_len(kernel, "scales", self.scales.len(), m(3)?)?;
        check_len(kernel, "rotations", self.rotations.len(), m(4)?)?;
        check_len(kernel, "opacities", self.opacities.len(), g)?;
        check_len(kernel, "colors", self.colors.len(), m(3)?)?;
        let k3 = d
            .sh_coeffs
            .checked_mul(3)
            .ok_or_else(|| invalid(kernel, "sh size overflows"))?;
        check_len(kernel, "sh", self.sh.len(), m(k3)?)
    }

    fn row<const N: usize>(s: &[f32], i: usize) -> [f64; N] {
        std::array::from_fn(|c| s[i * N + c] as f64)
    }
}

/// The camera block decoded.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Camera {
    /// World→camera rotation part.
    pub w: [[f64; 3]; 3],
    /// World→camera translation.
    pub t: [f64; 3],
    pub fx: f64,
    pub fy: f64,
    pub cx: f64,
    pub cy: f64,
    /// Camera centre in world coordinates (`-Wᵀ t`).
    pub centre: [f64; 3],
}

impl Camera {
    pub(crate) fn new(kernel: &'static str, meta: &[f32]) -> Result<Self> {
        check_len(kernel, "camera", meta.len(), CAMERA_LEN)?;
        let m = |i: usize| meta[i] as f64;
        let w = [[m(0), m(1), m(2)], [m(4), m(5), m(6)], [m(8), m(9), m(10)]];
        let t = [m(3), m(7), m(11)];
        let centre = std::array::from_fn(|c| -(0..3).map(|r| w[r][c] * t[r]).sum::<f64>());
        Ok(Camera {
            w,
            t,
            fx: m(16),
            fy: m(17),
            cx: m(18),
            cy: m(19),
            centre,
        })
    }
}

pub(crate) type M3 = [[f64; 3]; 3];

/// Rotation matrix of a unit quaternion `w, x, y, z`.
pub(crate) fn quat_rot(q: [f64; 4]) -> M3 {
    let [w, x, y, z] = q;
    [
        [
            1.0 - 2.0 * (y * y + z * z),
            2.0 * (x * y - w * z),
            2.0 * (x * z + w * y),
        ],
        [
            2.0 * (x * y + w * z),
            1.0 - 2.0 * (x * x + z * z),
            2.0 * (y * z - w * x),
        ],
        [
            2.0 * (x * z - w * y),
            2.0 * (y * z + w * x),
            1.0 - 2.0 * (x * x + y * y),
        ],
    ]
}

/// Real SH basis (the 3DGS sign convention) of unit direction `d`, up to
/// degree 3: 16 values, `l² + l + m` ordered.
pub(crate) fn sh_basis(d: [f64; 3]) -> [f64; 16] {
    let [x, y, z] = d;
    let (xx, yy, zz) = (x * x, y * y, z * z);
    [
        SH_C0,
        -SH_C1 * y,
        SH_C1 * z,
        -SH_C1 * x,
        SH_C2[0] * x * y,
        SH_C2[1] * y * z,
        SH_C2[2] * (2.0 * zz - xx - yy),
        SH_C2[3] * x * z,
        SH_C2[4] * (xx - yy),
        SH_C3[0] * y * (3.0 * xx - yy),
        SH_C3[1] * x * y * z,
        SH_C3[2] * y * (4.0 * zz - xx - yy),
        SH_C3[3] * z * (2.0 * zz - 3.0 * xx - 3.0 * yy),
        SH_C3[4] * x * (4.0 * zz - xx - yy),
        SH_C3[5] * z * (xx - yy),
        SH_C3[6] * x * (xx - 3.0 * yy),
    ]
}

/// `∂ sh_basis(d)[j] / ∂ d` (the polynomials' gradients, `d` not
/// renormalised).
pub(crate) fn sh_basis_grad(d: [f64; 3]) -> [[f64; 3]; 16] {
    let [x, y, z] = d;
    let (xx, yy, zz) = (x * x, y * y, z * z);
    [
        [0.0; 3],
        [0.0, -SH_C1, 0.0],
        [0.0, 0.0, SH_C1],
        [-SH_C1, 0.0, 0.0],
        [SH_C2[0] * y, SH_C2[0] * x, 0.0],
        [0.0, SH_C2[1] * z, SH_C2[1] * y],
        [-2.0 * SH_C2[2] * x, -2.0 * SH_C2[2] * y, 4.0 * SH_C2[2] * z],
        [SH_C2[3] * z, 0.0, SH_C2[3] * x],
        [2.0 * SH_C2[4] * x, -2.0 * SH_C2[4] * y, 0.0],
        [
            SH_C3[0] * 6.0 * x * y,
            SH_C3[0] * (3.0 * xx - 3.0 * yy),
            0.0,
        ],
        [SH_C3[1] * y * z, SH_C3[1] * x * z, SH_C3[1] * x * y],
        [
            SH_C3[2] * -2.0 * x * y,
            SH_C3[2] * (4.0 * zz - xx - 3.0 * yy),
            SH_C3[2] * 8.0 * y * z,
        ],
        [
            SH_C3[3] * -6.0 * x * z,
            SH_C3[3] * -6.0 * y * z,
            SH_C3[3] * (6.0 * zz - 3.0 * xx - 3.0 * yy),
        ],
        [
            SH_C3[4] * (4.0 * zz - 3.0 * xx - yy),
            SH_C3[4] * -2.0 * x * y,
            SH_C3[4] * 8.0 * x * z,
        ],
        [
            SH_C3[5] * 2.0 * x * z,
            SH_C3[5] * -2.0 * y * z,
            SH_C3[5] * (xx - yy),
        ],
        [
            SH_C3[6] * (3.0 * xx - 3.0 * yy),
            SH_C3[6] * -6.0 * x * y,
            0.0,
        ],
    ]
}

/// Number of SH basis functions the forward uses for `k` coefficients:
/// `(deg + 1)²` with `deg = min(3, ⌊√k⌋ − 1)`; 0 when `k = 0`.
pub fn sh_used(k: usize) -> usize {
    match k {
        0 => 0,
        1..=3 => 1,
        4..=8 => 4,
        9..=15 => 9,
        _ => 16,
    }
}

/// One splat projected, with the intermediates the gradient needs.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Projected {
    /// Camera-space centre.
    pub t: [f64; 3],
    /// Normalised quaternion and the input's norm.
    pub qn: [f64; 4],
    pub qnorm: f64,
    /// Rotation and `M = R S`.
    pub r: M3,
    pub m: M3,
    /// World covariance.
    pub sigma: M3,
    /// `J W` (2×3).
    pub jw: [[f64; 3]; 2],
    /// Conic `a, b, c`.
    pub conic: [f64; 3],
    /// Screen centre.
    pub u: f64,
    pub v: f64,
    pub radius: f64,
    /// Viewing direction (unit) and the distance it was normalised by.
    pub dir: [f64; 3],
    pub dist: f64,
    /// Colour before the clamp at 0 (the `k ≥ 1` case).
    pub raw_rgb: [f64; 3],
    /// Colour.
    pub rgb: [f64; 3],
    /// Tile rectangle `x0, y0, x1, y1` (exclusive ends).
    pub rect: [usize; 4],
}

/// Project splat `i`; `None` when it is culled.
pub(crate) fn project(
    p: &SplatParams<'_>,
    cam: &Camera,
    d: &SplatDims,
    i: usize,
) -> Option<Projected> {
    let pos: [f64; 3] = SplatParams::row(p.positions, i);
    let scale: [f64; 3] = SplatParams::row(p.scales, i);
    let q: [f64; 4] = SplatParams::row(p.rotations, i);
    let t: [f64; 3] =
        std::array::from_fn(|r| (0..3).map(|c| cam.w[r][c] * pos[c]).sum::<f64>() + cam.t[r]);
    if t[2].is_nan() || t[2] <= NEAR {
        return None;
    }
    let qnorm = q.iter().map(|v| v * v).sum::<f64>().sqrt();
    let qn = if qnorm > 0.0 { q.map(|v| v / qnorm) } else { q };
    let r = quat_rot(qn);
    let m: M3 = std::array::from_fn(|a| std::array::from_fn(|b| r[a][b] * scale[b]));
    let sigma: M3 =
        std::array::from_fn(|a| std::array::from_fn(|b| (0..3).map(|k| m[a][k] * m[b][k]).sum()));
    let tz = t[2];
    let j = [
        [cam.fx / tz, 0.0, -cam.fx * t[0] / (tz * tz)],
        [0.0, cam.fy / tz, -cam.fy * t[1] / (tz * tz)],
    ];
    let jw: [[f64; 3]; 2] = std::array::from_fn(|a| {
        std::array::from_fn(|b| (0..3).map(|k| j[a][k] * cam.w[k][b]).sum())
    });
    let mut s2 = [[0.0f64; 2]; 2];
    for (a, row) in s2.iter_mut().enumerate() {
        for (b, e) in row.iter_mut().enumerate() {
            let mut acc = 0.0;
            for k in 0..3 {
                for l in 0..3 {
                    acc += jw[a][k] * sigma[k][l] * jw[b][l];
                }
            }
            *e = acc + if a == b { BLUR } else { 0.0 };
        }
    }
    let (a, b, c) = (s2[0][0], s2[0][1], s2[1][1]);
    let det = a * c - b * b;
    if det.is_nan() || det <= 0.0 {
        return None;
    }
    let conic = [c / det, -b / det, a / det];
    let mid = 0.5 * (a + c);
    let lambda = mid + (mid * mid - det).max(0.1).sqrt();
    let radius = (d.radius_scale as f64 * lambda.sqrt()).ceil();
    let u = cam.fx * t[0] / tz + cam.cx;
    let v = cam.fy * t[1] / tz + cam.cy;
    let ts = d.tile_size as f64;
    let (tx, ty) = d.tiles();
    let clampt = |x: f64, hi: usize| x.clamp(0.0, hi as f64) as usize;
    let rect = [
        clampt(((u - radius) / ts).floor(), tx),
        clampt(((v - radius) / ts).floor(), ty),
        clampt(((u + radius + ts - 1.0) / ts).floor(), tx),
        clampt(((v + radius + ts - 1.0) / ts).floor(), ty),
    ];
    if rect[2] <= rect[0] || rect[3] <= rect[1] || !radius.is_finite() {
        return None;
    }
    let mut out = Projected {
        t,
        qn,
        qnorm,
        r,
        m,
        sigma,
        jw,
        conic,
        u,
        v,
        radius,
        rect,
        ..Default::default()
    };
    let used = sh_used(d.sh_coeffs);
    if used == 0 {
        out.rgb = SplatParams::row(p.colors, i);
        out.raw_rgb = out.rgb;
    } else {
        let diff: [f64; 3] = std::array::from_fn(|c| pos[c] - cam.centre[c]);
        let dist = diff.iter().map(|v| v * v).sum::<f64>().sqrt();
        out.dist = dist;
        out.dir = if dist > 0.0 {
            diff.map(|v| v / dist)
        } else {
            [0.0, 0.0, 1.0]
        };
        let basis = sh_basis(out.dir);
        let base = i * d.sh_coeffs * 3;
        for (ch, (raw, rgb)) in out.raw_rgb.iter_mut().zip(&mut out.rgb).enumerate() {
            let s: f64 = basis[..used]
                .iter()
                .enumerate()
                .map(|(jj, b)| b * p.sh[base + jj * 3 + ch] as f64)
                .sum();
            *raw = 0.5 + s;
            *rgb = raw.max(0.0);
        }
    }
    Some(out)
}

/// The record of a projected splat (layout in the module doc).
pub(crate) fn record(pr: &Projected, opacity: f64) -> [f64; PREP_WIDTH] {
    [
        pr.u,
        pr.v,
        pr.t[2],
        pr.radius,
        pr.conic[0],
        pr.conic[1],
        pr.conic[2],
        opacity,
        pr.rgb[0],
        pr.rgb[1],
        pr.rgb[2],
        pr.rect[0] as f64,
        pr.rect[1] as f64,
        pr.rect[2] as f64,
        pr.rect[3] as f64,
        1.0,
    ]
}

/// f64 records of every splat (zeros for culled ones).
pub(crate) fn prepare_f64(
    kernel: &'static str,
    p: &SplatParams<'_>,
    meta: &[f32],
    d: &SplatDims,
) -> Result<Vec<[f64; PREP_WIDTH]>> {
    d.check(kernel)?;
    p.check(kernel, d)?;
    let cam = Camera::new(kernel, meta)?;
    Ok((0..d.splats)
        .into_par_iter()
        .with_min_len(64)
        .map(|i| match project(p, &cam, d, i) {
            Some(pr) => record(&pr, p.opacities[i] as f64),
            None => [0.0; PREP_WIDTH],
        })
        .collect())
}

/// Prepare: `prep[g, 16]` records of every splat.
pub fn prepare(p: &SplatParams<'_>, meta: &[f32], d: &SplatDims, prep: &mut [f32]) -> Result<()> {
    const K: &str = "gaussian_splat_prepare";
    let need = d
        .splats
        .checked_mul(PREP_WIDTH)
        .ok_or_else(|| invalid(K, "prep size overflows"))?;
    check_len(K, "prep", prep.len(), need)?;
    let recs = prepare_f64(K, p, meta, d)?;
    for (dst, r) in prep.chunks_exact_mut(PREP_WIDTH).zip(&recs) {
        for (o, v) in dst.iter_mut().zip(r) {
            *o = *v as f32;
        }
    }
    Ok(())
}

/// Per-tile lists of splat indices, front to back, after the capacity cut.
pub(crate) struct TileLists {
    /// `starts[t]..starts[t] + lens[t]` indexes `ids` for tile `t`.
    pub starts: Vec<usize>,
    pub lens: Vec<usize>,
    pub ids: Vec<u32>,
}

/// The tile rectangle of a record, or `None` when the record is not valid
/// (records may come from a user tensor: anything non-finite is invalid,
/// coordinates are clamped to the grid).
fn rect_of(r: &[f64; PREP_WIDTH], tiles: (usize, usize)) -> Option<[usize; 4]> {
    if r[15].is_nan() || r[15] <= 0.0 {
        return None;
    }
    let c = |x: f64, hi: usize| -> Option<usize> {
        x.is_finite().then(|| x.clamp(0.0, hi as f64) as usize)
    };
    let rect = [
        c(r[11], tiles.0)?,
        c(r[12], tiles.1)?,
        c(r[13], tiles.0)?,
        c(r[14], tiles.1)?,
    ];
    (rect[2] > rect[0] && rect[3] > rect[1]).then_some(rect)
}

/// Bin records into tiles and sort each tile by `(depth, index)`; the
/// global order `(tile, depth, index)` is cut after `max_list_entries`.
pub(crate) fn tile_lists(
    kernel: &'static str,
    recs: &[[f64; PREP_WIDTH]],
    d: &SplatDims,
) -> Result<TileLists> {
    let tiles = d.tiles();
    let n_tiles = tiles
        .0
        .checked_mul(tiles.1)
        .ok_or_else(|| invalid(kernel, "tile count overflows"))?;
    if recs.len() > u32::MAX as usize {
        return Err(invalid(kernel, "more than 2^32 splats"));
    }
    let rects: Vec<Option<[usize; 4]>> = recs.iter().map(|r| rect_of(r, tiles)).collect();
    let mut counts = vec![0usize; n_tiles];
    for rc in rects.iter().flatten() {
        for ty in rc[1]..rc[3] {
            for tx in rc[0]..rc[2] {
                counts[ty * tiles.0 + tx] += 1;
            }
        }
    }
    let mut starts = Vec::with_capacity(n_tiles);
    let mut total = 0usize;
    for &c in &counts {
        starts.push(total);
        total = total
            .checked_add(c)
            .ok_or_else(|| invalid(kernel, "entry count overflows"))?;
    }
    let mut ids = vec![0u32; total];
    let mut fill = starts.clone();
    for (i, rc) in rects.iter().enumerate() {
        if let Some(rc) = rc {
            for ty in rc[1]..rc[3] {
                for tx in rc[0]..rc[2] {
                    let t = ty * tiles.0 + tx;
                    ids[fill[t]] = i as u32;
                    fill[t] += 1;
                }
            }
        }
    }
    // sort each tile's slice by (depth, index); slices are disjoint
    let mut slices = Vec::with_capacity(n_tiles);
    let mut rest = ids.as_mut_slice();
    for &c in &counts {
        let (head, tail) = rest.split_at_mut(c);
        slices.push(head);
        rest = tail;
    }
    slices.into_par_iter().for_each(|s| {
        s.sort_unstable_by(|&a, &b| {
            recs[a as usize][2]
                .total_cmp(&recs[b as usize][2])
                .then(a.cmp(&b))
        });
    });
    let cap = if d.max_list_entries == 0 {
        usize::MAX
    } else {
        d.max_list_entries
    };
    let lens = starts
        .iter()
        .zip(&counts)
        .map(|(&s, &c)| c.min(cap.saturating_sub(s)))
        .collect();
    Ok(TileLists { starts, lens, ids })
}

/// One blended step of a pixel's walk.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Step {
    /// Position in the tile's list.
    pub pos: usize,
    /// Splat index.
    pub splat: usize,
    pub alpha: f64,
    /// Transmittance before this splat.
    pub t_before: f64,
    /// `o·G < 0.99` (the alpha is not clamped).
    pub unclamped: bool,
    /// `mean − pixel centre`.
    pub dx: f64,
    pub dy: f64,
    /// The Gaussian `exp(power)`.
    pub gauss: f64,
}

/// Walk `list` front to back for the pixel centred at `(px, py)`, calling
/// `on` for every blended splat; returns the colour.
pub(crate) fn walk(
    recs: &[[f64; PREP_WIDTH]],
    list: &[u32],
    px: f64,
    py: f64,
    d: &SplatDims,
    mut on: impl FnMut(Step),
) -> [f64; 3] {
    let cut = d.alpha_cutoff as f64;
    let thr = d.transmittance_threshold as f64;
    let mut t = 1.0f64;
    let mut rgb = [0.0f64; 3];
    let mut blended = 0usize;
    for (pos, &id) in list.iter().enumerate() {
        if d.max_splat_steps > 0 && blended >= d.max_splat_steps {
            break;
        }
        let r = &recs[id as usize];
        let (dx, dy) = (r[0] - px, r[1] - py);
        let power = -0.5 * (r[4] * dx * dx + r[6] * dy * dy) - r[5] * dx * dy;
        if power > 0.0 {
            continue;
        }
        let gauss = power.exp();
        let raw = r[7] * gauss;
        let alpha = raw.min(ALPHA_MAX);
        if alpha.is_nan() || alpha < cut {
            continue;
        }
        let next = t * (1.0 - alpha);
        if next < thr {
            break;
        }
        for (c, o) in rgb.iter_mut().enumerate() {
            *o += alpha * t * r[8 + c];
        }
        on(Step {
            pos,
            splat: id as usize,
            alpha,
            t_before: t,
            unclamped: raw < ALPHA_MAX,
            dx,
            dy,
            gauss,
        });
        t = next;
        blended += 1;
    }
    rgb
}

/// Composite `recs` into `dst [height, width, 3]` (black background).
pub(crate) fn rasterize_f64(
    kernel: &'static str,
    recs: &[[f64; PREP_WIDTH]],
    d: &SplatDims,
    dst: &mut [f32],
) -> Result<()> {
    d.check(kernel)?;
    let n = d.image_len(kernel)?;
    check_len(kernel, "dst", dst.len(), n)?;
    let lists = tile_lists(kernel, recs, d)?;
    let (tx, _) = d.tiles();
    let (w, ts) = (d.width, d.tile_size);
    let band = ts
        .checked_mul(w * 3)
        .ok_or_else(|| invalid(kernel, "tile band overflows"))?;
    dst[..n]
        .par_chunks_mut(band)
        .enumerate()
        .for_each(|(ty, rows)| {
            let h = rows.len() / (w * 3);
            for tile_x in 0..tx {
                let t = ty * tx + tile_x;
                let list = &lists.ids[lists.starts[t]..lists.starts[t] + lists.lens[t]];
                for ly in 0..h {
                    for x in tile_x * ts..((tile_x + 1) * ts).min(w) {
                        let py = (ty * ts + ly) as f64 + 0.5;
                        let rgb = walk(recs, list, x as f64 + 0.5, py, d, |_| {});
                        let o = (ly * w + x) * 3;
                        for (d, s) in rows[o..o + 3].iter_mut().zip(rgb) {
                            *d = s as f32;
                        }
                    }
                }
            }
        });
    Ok(())
}

/// Rasterize `count = d.splats` f32 records `prep [g, 16]` into `dst`.
pub fn rasterize(prep: &[f32], d: &SplatDims, dst: &mut [f32]) -> Result<()> {
    const K: &str = "gaussian_splat_rasterize";
    let need = d
        .splats
        .checked_mul(PREP_WIDTH)
        .ok_or_else(|| invalid(K, "prep size overflows"))?;
    check_len(K, "prep", prep.len(), need)?;
    let recs: Vec<[f64; PREP_WIDTH]> = prep[..need]
        .chunks_exact(PREP_WIDTH)
        .map(|r| std::array::from_fn(|c| r[c] as f64))
        .collect();
    rasterize_f64(K, &recs, d, dst)
}

/// Render: prepare then rasterize, the records kept in f64.
pub fn render(p: &SplatParams<'_>, meta: &[f32], d: &SplatDims, dst: &mut [f32]) -> Result<()> {
    const K: &str = "gaussian_splat_render";
    let recs = prepare_f64(K, p, meta, d)?;
    rasterize_f64(K, &recs, d, dst)
}

#[cfg(test)]
#[path = "splat_tests.rs"]
mod tests;
