//! Random fills (Philox 4x32-10), vector-quantiser assignment and SAM 2
//! axial 2-D RoPE.
//!
//! * Fills: element `i` is a pure function of `(key, offset, i)`
//!   ([`rlx_ir::rng`]), so the result does not depend on how the work is
//!   split; chunks start on Philox block boundaries so each block is
//!   computed once. Uniforms and normals are bit-exact with the Metal
//!   kernel and the numpy reference (Box–Muller with the explicit f32 log /
//!   cos of [`rlx_ir::rng`], no library log / cos).
//! * `vq_assign`: per row, the codebook row with the best score, summed in
//!   f32 in dimension order (the Metal kernel's order): L2 = smallest
//!   `Σ (x − c)²`, dot = largest `Σ x·c`, cosine = largest
//!   `x·c / max(‖x‖, 1e-12) / max(‖c‖, 1e-12)`. Ties (and NaN scores) keep
//!   the lowest index.
//! * `axial_rope2d`: SAM 2's `compute_axial_cis` / `apply_rotary_enc`
//!   (Ravi et al., arXiv:2408.00714): interleaved pairs, pair `p < d/4`
//!   rotated by `x·θ^(−4p/d)`, pair `d/4 + p` by `y·θ^(−4p/d)`, grid
//!   position `s mod (end_x·end_y)` with `x = pos mod end_x`,
//!   `y = pos div end_x`. Frequencies are rounded to f32, each angle is
//!   one f32 product, its cos / sin and the rotation are evaluated in f64.

use super::{check_len, invalid, numel, Result, PAR_MIN};
use rayon::prelude::*;
use rlx_ir::rng::{box_muller, philox_block, word_to_uniform};

/// Elements per parallel task of the fills (a multiple of 4 and of 2, so
/// every task starts on a Philox block boundary for both fills).
const FILL_CHUNK: usize = 1 << 14;

/// `out[i] = low + (high − low) · uniform(key, offset, i)` (f32).
pub fn rng_uniform(out: &mut [f32], low: f32, high: f32, key: u64, offset: u64) {
    let span = high - low;
    let fill = |(c, chunk): (usize, &mut [f32])| {
        let base = (c * FILL_CHUNK) as u64;
        for (j, quad) in chunk.chunks_mut(4).enumerate() {
            let words = philox_block(key, offset, base / 4 + j as u64);
            for (o, w) in quad.iter_mut().zip(words) {
                *o = low + span * word_to_uniform(w);
            }
        }
    };
    if out.len() < PAR_MIN {
        out.chunks_mut(FILL_CHUNK).enumerate().for_each(fill);
    } else {
        out.par_chunks_mut(FILL_CHUNK).enumerate().for_each(fill);
    }
}

/// `out[i] = mean + scale · normal(key, offset, i)` (f32; Box–Muller on
/// the two word pairs of Philox block `i / 2`).
pub fn rng_normal(out: &mut [f32], mean: f32, scale: f32, key: u64, offset: u64) {
    let fill = |(c, chunk): (usize, &mut [f32])| {
        let base = (c * FILL_CHUNK) as u64;
        for (j, pair) in chunk.chunks_mut(2).enumerate() {
            let w = philox_block(key, offset, base / 2 + j as u64);
            let u = w.map(word_to_uniform);
            for (o, lane) in pair.iter_mut().zip([0, 2]) {
                *o = mean + scale * box_muller(u[lane], u[lane + 1]);
            }
        }
    };
    if out.len() < PAR_MIN {
        out.chunks_mut(FILL_CHUNK).enumerate().for_each(fill);
    } else {
        out.par_chunks_mut(FILL_CHUNK).enumerate().for_each(fill);
    }
}

/// Vector-quantiser metric codes of the thunk.
pub const VQ_L2: u32 = 0;
/// Dot-product metric.
pub const VQ_DOT: u32 = 1;
/// Cosine metric.
pub const VQ_COSINE: u32 = 2;

/// Euclidean norm clamped below at 1e-12 (cosine metric), f32.
fn norm_floor(v: &[f32]) -> f32 {
    v.iter().map(|a| a * a).sum::<f32>().sqrt().max(1e-12)
}

/// Nearest codebook row: `x [n, d]`, `cb [k, d]` → `out [n]` (i32).
pub fn vq_assign(
    x: &[f32],
    cb: &[f32],
    out: &mut [i32],
    (n, d, k): (usize, usize, usize),
    metric: u32,
) -> Result<()> {
    const K: &str = "vq_assign";
    check_len(K, "x", x.len(), numel(K, &[n, d])?)?;
    check_len(K, "codebook", cb.len(), numel(K, &[k, d])?)?;
    check_len(K, "out", out.len(), n)?;
    if metric > VQ_COSINE {
        return Err(invalid(K, format!("unknown metric code {metric}")));
    }
    if k == 0 && n > 0 {
        return Err(invalid(K, "empty codebook"));
    }
    if i32::try_from(k).is_err() {
        return Err(invalid(
            K,
            format!("codebook of {k} rows exceeds i32 indices"),
        ));
    }
    let cnorm: Vec<f32> = if metric == VQ_COSINE {
        (0..k)
            .map(|j| norm_floor(&cb[j * d..(j + 1) * d]))
            .collect()
    } else {
        Vec::new()
    };
    let row = |(i, o): (usize, &mut i32)| {
        let xi = &x[i * d..(i + 1) * d];
        let xn = if metric == VQ_COSINE {
            norm_floor(xi)
        } else {
            1.0
        };
        let mut best = 0usize;
        let mut best_s = f32::INFINITY;
        for j in 0..k {
            let c = &cb[j * d..(j + 1) * d];
            // a smaller score is better: distance, or the negated similarity
            let s = match metric {
                VQ_L2 => xi
                    .iter()
                    .zip(c)
                    .map(|(a, b)| (a - b) * (a - b))
                    .sum::<f32>(),
                VQ_DOT => -xi.iter().zip(c).map(|(a, b)| a * b).sum::<f32>(),
                _ => -(xi.iter().zip(c).map(|(a, b)| a * b).sum::<f32>() / xn / cnorm[j]),
            };
            if s < best_s {
                best_s = s;
                best = j;
            }
        }
        *o = best as i32;
    };
    let out = &mut out[..n];
    if n.saturating_mul(k).saturating_mul(d) < PAR_MIN {
        out.iter_mut().enumerate().for_each(row);
    } else {
        out.par_iter_mut().enumerate().for_each(row);
    }
    Ok(())
}

/// Dims of an axial RoPE call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AxialRope {
    /// Batch.
    pub batch: usize,
    /// Tokens.
    pub seq: usize,
    /// Heads.
    pub heads: usize,
    /// Head dim (a multiple of 4).
    pub head_dim: usize,
    /// Grid width.
    pub end_x: usize,
    /// Grid height.
    pub end_y: usize,
    /// Frequency base.
    pub theta: f32,
    /// Copies of the grid along the sequence.
    pub repeat_factor: usize,
}

/// SAM 2 frequencies `f32(θ^(−4p/d))`, `p < d/4`.
pub fn axial_freqs(head_dim: usize, theta: f32) -> Vec<f32> {
    (0..head_dim / 4)
        .map(|p| (theta as f64).powf(-(4.0 * p as f64) / head_dim as f64) as f32)
        .collect()
}

/// Axial 2-D RoPE of `src [batch, seq, heads·head_dim]` into `dst`.
pub fn axial_rope2d(src: &[f32], dst: &mut [f32], a: &AxialRope) -> Result<()> {
    const K: &str = "axial_rope2d";
    let hidden = a
        .heads
        .checked_mul(a.head_dim)
        .ok_or_else(|| invalid(K, "heads × head_dim overflows"))?;
    if !a.head_dim.is_multiple_of(4) || a.head_dim == 0 {
        return Err(invalid(
            K,
            format!("head_dim {} is not a positive multiple of 4", a.head_dim),
        ));
    }
    let grid = a
        .end_x
        .checked_mul(a.end_y)
        .filter(|&g| g > 0)
        .ok_or_else(|| {
            invalid(
                K,
                format!("grid {}x{} is empty or overflows", a.end_x, a.end_y),
            )
        })?;
    if a.seq > grid.saturating_mul(a.repeat_factor.max(1)) {
        return Err(invalid(
            K,
            format!(
                "seq {} exceeds grid {grid} × repeat_factor {}",
                a.seq, a.repeat_factor
            ),
        ));
    }
    let total = numel(K, &[a.batch, a.seq, hidden])?;
    check_len(K, "src", src.len(), total)?;
    check_len(K, "dst", dst.len(), total)?;
    let freqs = axial_freqs(a.head_dim, a.theta);
    let q = a.head_dim / 4;
    let row = |(r, out): (usize, &mut [f32])| {
        let pos = (r % a.seq) % grid;
        let (gx, gy) = ((pos % a.end_x) as f32, (pos / a.end_x) as f32);
        let x = &src[r * hidden..(r + 1) * hidden];
        for h in 0..a.heads {
            for p in 0..a.head_dim / 2 {
                let ang = if p < q {
                    gx * freqs[p]
                } else {
                    gy * freqs[p - q]
                } as f64;
                let (s, c) = ang.sin_cos();
                let i = h * a.head_dim + 2 * p;
                let (x0, x1) = (x[i] as f64, x[i + 1] as f64);
                out[i] = (x0 * c - x1 * s) as f32;
                out[i + 1] = (x0 * s + x1 * c) as f32;
            }
        }
    };
    let dst = &mut dst[..total];
    if hidden == 0 {
        return Ok(());
    }
    if total < PAR_MIN {
        dst.chunks_mut(hidden).enumerate().for_each(row);
    } else {
        dst.par_chunks_mut(hidden).enumerate().for_each(row);
    }
    Ok(())
}

#[cfg(test)]
#[path = "misc_tests.rs"]
mod tests;
