//! Convolution family over NCHW: conv2d (im2col + sgemm per group, a
//! direct path for depthwise, no copy for 1×1 stride-1 unpadded), transposed
//! conv2d (gemm + col2im), 2-D max / mean pooling, im2col itself, and the
//! depthwise causal conv1d used by state-space blocks.
//!
//! im2col + gemm was chosen over a direct loop because the gemm crate's
//! packed micro-kernels reach a large fraction of peak while a direct
//! 7-deep loop does not; depthwise convs have no reduction over channels,
//! so for them the direct loop is the fast one. Conv2d kernels are f32;
//! pooling and conv1d are generic over [`Elem`].

use rayon::prelude::*;

use super::elementwise::silu;
use super::matmul::sgemm;
use super::{check_len, invalid, numel, Elem, Result, PAR_MIN};

/// 2-D convolution geometry (shared by conv, transposed conv, pooling and
/// im2col; `c_out`/`groups` unused by pooling and im2col).
#[derive(Debug, Clone, Copy)]
pub struct Conv2d {
    /// Batch.
    pub n: usize,
    /// Input channels.
    pub c_in: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Output channels.
    pub c_out: usize,
    /// Kernel height.
    pub kh: usize,
    /// Kernel width.
    pub kw: usize,
    /// Stride (y, x), each ≥ 1.
    pub stride: (usize, usize),
    /// Zero padding (y, x).
    pub pad: (usize, usize),
    /// Dilation (y, x), each ≥ 1.
    pub dil: (usize, usize),
    /// Groups (divides `c_in` and `c_out`).
    pub groups: usize,
}

impl Conv2d {
    /// Output `(height, width)` of a forward conv / pool, or `None` when
    /// the (dilated) kernel does not fit.
    pub fn out_hw(&self) -> Option<(usize, usize)> {
        let f = |x: usize, k: usize, s: usize, p: usize, d: usize| {
            let span = d.checked_mul(k.checked_sub(1)?)?.checked_add(1)?;
            (x + 2 * p).checked_sub(span).map(|v| v / s + 1)
        };
        Some((
            f(self.h, self.kh, self.stride.0, self.pad.0, self.dil.0)?,
            f(self.w, self.kw, self.stride.1, self.pad.1, self.dil.1)?,
        ))
    }

    fn validate(&self, kernel: &'static str, with_channels: bool) -> Result<(usize, usize)> {
        if self.stride.0 == 0
            || self.stride.1 == 0
            || self.dil.0 == 0
            || self.dil.1 == 0
            || self.kh == 0
            || self.kw == 0
        {
            return Err(invalid(
                kernel,
                format!("kernel/stride/dilation must be >= 1: {self:?}"),
            ));
        }
        if with_channels
            && (self.groups == 0
                || !self.c_in.is_multiple_of(self.groups)
                || !self.c_out.is_multiple_of(self.groups))
        {
            return Err(invalid(
                kernel,
                format!(
                    "groups {} must divide c_in {} and c_out {}",
                    self.groups, self.c_in, self.c_out
                ),
            ));
        }
        self.out_hw().ok_or_else(|| {
            invalid(
                kernel,
                format!("kernel does not fit the padded input: {self:?}"),
            )
        })
    }
}

/// Fills `col [c·kh·kw, ho·wo]` for one image `x [c, h, w]` (zeros where the
/// kernel reads padding).
fn im2col_one(p: &Conv2d, c: usize, x: &[f32], col: &mut [f32], ho: usize, wo: usize) {
    let (kh, kw) = (p.kh, p.kw);
    col.par_chunks_mut(ho * wo)
        .enumerate()
        .with_min_len(8)
        .for_each(|(row, dst)| {
            let (ci, ki, kj) = (row / (kh * kw), (row / kw) % kh, row % kw);
            debug_assert!(ci < c);
            let plane = &x[ci * p.h * p.w..(ci + 1) * p.h * p.w];
            for (oy, drow) in dst.chunks_exact_mut(wo).enumerate() {
                let iy = (oy * p.stride.0 + ki * p.dil.0) as isize - p.pad.0 as isize;
                if iy < 0 || iy as usize >= p.h {
                    drow.fill(0.0);
                    continue;
                }
                let src = &plane[iy as usize * p.w..(iy as usize + 1) * p.w];
                for (ox, d) in drow.iter_mut().enumerate() {
                    let ix = (ox * p.stride.1 + kj * p.dil.1) as isize - p.pad.1 as isize;
                    *d = if ix >= 0 && (ix as usize) < p.w {
                        src[ix as usize]
                    } else {
                        0.0
                    };
                }
            }
        });
}

/// im2col of `x [n, c_in, h, w]` into `out [n, c_in·kh·kw, ho·wo]`
/// (row index `(c·kh + ki)·kw + kj`). Needs `x >= n·c_in·h·w` and
/// `out >= n·c_in·kh·kw·ho·wo`.
pub fn im2col(p: &Conv2d, x: &[f32], out: &mut [f32]) -> Result<()> {
    const K: &str = "im2col";
    let (ho, wo) = p.validate(K, false)?;
    let img = numel(K, &[p.c_in, p.h, p.w])?;
    let per = numel(K, &[p.c_in, p.kh, p.kw, ho, wo])?;
    check_len(K, "x", x.len(), numel(K, &[p.n, img])?)?;
    check_len(K, "out", out.len(), numel(K, &[p.n, per])?)?;
    for b in 0..p.n {
        im2col_one(
            p,
            p.c_in,
            &x[b * img..(b + 1) * img],
            &mut out[b * per..(b + 1) * per],
            ho,
            wo,
        );
    }
    Ok(())
}

/// conv2d NCHW: `x [n, c_in, h, w]`, `weight [c_out, c_in/groups, kh, kw]`,
/// optional `bias [c_out]`, `out [n, c_out, ho, wo]` (see [`Conv2d::out_hw`]).
pub fn conv2d(
    p: &Conv2d,
    x: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
) -> Result<()> {
    const K: &str = "conv2d";
    let (ho, wo) = p.validate(K, true)?;
    let (cig, cog) = (p.c_in / p.groups, p.c_out / p.groups);
    let kk = numel(K, &[cig, p.kh, p.kw])?;
    let (img, opix) = (numel(K, &[p.c_in, p.h, p.w])?, ho * wo);
    check_len(K, "x", x.len(), numel(K, &[p.n, img])?)?;
    check_len(K, "weight", weight.len(), numel(K, &[p.c_out, kk])?)?;
    check_len(K, "out", out.len(), numel(K, &[p.n, p.c_out, opix])?)?;
    if let Some(b) = bias {
        check_len(K, "bias", b.len(), p.c_out)?;
    }
    let oimg = p.c_out * opix;
    if oimg == 0 {
        return Ok(());
    }
    if cig == 1 && cog == 1 {
        // Depthwise: one (image, channel) plane per task.
        out[..p.n * oimg]
            .par_chunks_mut(opix)
            .enumerate()
            .for_each(|(pl, o)| {
                let c = pl % p.c_out;
                let plane = &x[pl * p.h * p.w..(pl + 1) * p.h * p.w];
                let wk = &weight[c * kk..(c + 1) * kk];
                let b0 = bias.map_or(0.0, |b| b[c]);
                for (oy, orow) in o.chunks_exact_mut(wo).enumerate() {
                    for (ox, ov) in orow.iter_mut().enumerate() {
                        let mut s = b0;
                        for ki in 0..p.kh {
                            let iy = (oy * p.stride.0 + ki * p.dil.0) as isize - p.pad.0 as isize;
                            if iy < 0 || iy as usize >= p.h {
                                continue;
                            }
                            for kj in 0..p.kw {
                                let ix =
                                    (ox * p.stride.1 + kj * p.dil.1) as isize - p.pad.1 as isize;
                                if ix >= 0 && (ix as usize) < p.w {
                                    s +=
                                        plane[iy as usize * p.w + ix as usize] * wk[ki * p.kw + kj];
                                }
                            }
                        }
                        *ov = s;
                    }
                }
            });
        return Ok(());
    }
    let pointwise = p.kh == 1 && p.kw == 1 && p.stride == (1, 1) && p.pad == (0, 0);
    let mut col = if pointwise {
        Vec::new()
    } else {
        vec![0f32; kk * opix]
    };
    for b in 0..p.n {
        let xb = &x[b * img..(b + 1) * img];
        let ob = &mut out[b * oimg..(b + 1) * oimg];
        for g in 0..p.groups {
            let xg = &xb[g * cig * p.h * p.w..(g + 1) * cig * p.h * p.w];
            let cols: &[f32] = if pointwise {
                xg
            } else {
                im2col_one(p, cig, xg, &mut col, ho, wo);
                &col
            };
            let wg = &weight[g * cog * kk..(g + 1) * cog * kk];
            sgemm(
                wg,
                cols,
                &mut ob[g * cog * opix..(g + 1) * cog * opix],
                cog,
                kk,
                opix,
            )?;
        }
        if let Some(bias) = bias {
            ob.par_chunks_mut(opix)
                .zip(&bias[..p.c_out])
                .for_each(|(o, &bv)| o.iter_mut().for_each(|v| *v += bv));
        }
    }
    Ok(())
}

/// Transposed conv2d NCHW (PyTorch layout): `x [n, c_in, h, w]`,
/// `weight [c_in, c_out/groups, kh, kw]`, optional `bias [c_out]`,
/// `out [n, c_out, ho, wo]` with
/// `ho = (h-1)·sy − 2·py + dy·(kh−1) + out_pad.0 + 1` (same for width).
pub fn conv_transpose2d(
    p: &Conv2d,
    out_pad: (usize, usize),
    x: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
) -> Result<()> {
    const K: &str = "conv_transpose2d";
    if p.stride.0 == 0
        || p.stride.1 == 0
        || p.dil.0 == 0
        || p.dil.1 == 0
        || p.kh == 0
        || p.kw == 0
        || p.h == 0
        || p.w == 0
    {
        return Err(invalid(K, format!("degenerate geometry {p:?}")));
    }
    if p.groups == 0 || !p.c_in.is_multiple_of(p.groups) || !p.c_out.is_multiple_of(p.groups) {
        return Err(invalid(
            K,
            format!(
                "groups {} must divide c_in {} and c_out {}",
                p.groups, p.c_in, p.c_out
            ),
        ));
    }
    let full =
        |x: usize, s: usize, d: usize, k: usize, op: usize| (x - 1) * s + d * (k - 1) + op + 1;
    let (fh, fw) = (
        full(p.h, p.stride.0, p.dil.0, p.kh, out_pad.0),
        full(p.w, p.stride.1, p.dil.1, p.kw, out_pad.1),
    );
    let (ho, wo) = match (fh.checked_sub(2 * p.pad.0), fw.checked_sub(2 * p.pad.1)) {
        (Some(a), Some(b)) if a > 0 && b > 0 => (a, b),
        _ => {
            return Err(invalid(
                K,
                format!("padding {:?} larger than the output", p.pad),
            ))
        }
    };
    let (cig, cog) = (p.c_in / p.groups, p.c_out / p.groups);
    let (hw, opix) = (p.h * p.w, ho * wo);
    let kk = p.kh * p.kw;
    check_len(K, "x", x.len(), numel(K, &[p.n, p.c_in, hw])?)?;
    check_len(K, "weight", weight.len(), numel(K, &[p.c_in, cog, kk])?)?;
    check_len(K, "out", out.len(), numel(K, &[p.n, p.c_out, opix])?)?;
    if let Some(b) = bias {
        check_len(K, "bias", b.len(), p.c_out)?;
    }
    // Per group: Wᵀ [cog·kk, cig] (transposed once), col = Wᵀ·x_g.
    let rows = cog * kk;
    let mut wt = vec![0f32; p.groups * rows * cig];
    for g in 0..p.groups {
        let src = &weight[g * cig * rows..(g + 1) * cig * rows];
        super::shape::strided_copy(
            src,
            &[1, rows],
            &[rows, cig],
            &mut wt[g * rows * cig..(g + 1) * rows * cig],
        )?;
    }
    let mut col = vec![0f32; rows * hw];
    for b in 0..p.n {
        for g in 0..p.groups {
            let xg = &x[(b * p.c_in + g * cig) * hw..(b * p.c_in + (g + 1) * cig) * hw];
            sgemm(
                &wt[g * rows * cig..(g + 1) * rows * cig],
                xg,
                &mut col,
                rows,
                cig,
                hw,
            )?;
            let og = &mut out[(b * p.c_out + g * cog) * opix..(b * p.c_out + (g + 1) * cog) * opix];
            // col2im: each output channel plane gathers its own kk rows.
            og.par_chunks_mut(opix).enumerate().for_each(|(co, plane)| {
                plane.fill(bias.map_or(0.0, |bv| bv[g * cog + co]));
                for ki in 0..p.kh {
                    for kj in 0..p.kw {
                        let crow = &col[((co * p.kh + ki) * p.kw + kj) * hw..][..hw];
                        for i in 0..p.h {
                            let oy = (i * p.stride.0 + ki * p.dil.0) as isize - p.pad.0 as isize;
                            if oy < 0 || oy as usize >= ho {
                                continue;
                            }
                            for j in 0..p.w {
                                let ox =
                                    (j * p.stride.1 + kj * p.dil.1) as isize - p.pad.1 as isize;
                                if ox >= 0 && (ox as usize) < wo {
                                    plane[oy as usize * wo + ox as usize] += crow[i * p.w + j];
                                }
                            }
                        }
                    }
                }
            });
        }
    }
    Ok(())
}

/// 2-D pooling kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pool {
    /// Maximum over in-bounds taps (padding never wins).
    Max,
    /// Mean over in-bounds taps (divides by their count).
    Mean,
}

/// 2-D pooling of `x [n, c_in, h, w]` into `out [n, c_in, ho, wo]`
/// (`c_out`, `groups` ignored). A window with no in-bounds tap yields
/// `-inf` (max) or NaN (mean).
pub fn pool2d<T: Elem>(p: &Conv2d, kind: Pool, x: &[T], out: &mut [T]) -> Result<()> {
    const K: &str = "pool2d";
    let (ho, wo) = p.validate(K, false)?;
    let planes = numel(K, &[p.n, p.c_in])?;
    check_len(K, "x", x.len(), numel(K, &[planes, p.h, p.w])?)?;
    check_len(K, "out", out.len(), numel(K, &[planes, ho, wo])?)?;
    if planes * ho * wo == 0 {
        return Ok(());
    }
    out[..planes * ho * wo]
        .par_chunks_mut(ho * wo)
        .enumerate()
        .for_each(|(pl, o)| {
            let plane = &x[pl * p.h * p.w..(pl + 1) * p.h * p.w];
            for (t, ov) in o.iter_mut().enumerate() {
                let (oy, ox) = (t / wo, t % wo);
                let (mut acc, mut cnt) = (
                    if kind == Pool::Max {
                        f32::NEG_INFINITY
                    } else {
                        0.0
                    },
                    0u32,
                );
                for ki in 0..p.kh {
                    let iy = (oy * p.stride.0 + ki * p.dil.0) as isize - p.pad.0 as isize;
                    if iy < 0 || iy as usize >= p.h {
                        continue;
                    }
                    for kj in 0..p.kw {
                        let ix = (ox * p.stride.1 + kj * p.dil.1) as isize - p.pad.1 as isize;
                        if ix < 0 || ix as usize >= p.w {
                            continue;
                        }
                        let v = plane[iy as usize * p.w + ix as usize].to_f32();
                        cnt += 1;
                        acc = match kind {
                            Pool::Max if v.is_nan() || v > acc => v,
                            Pool::Max => acc,
                            Pool::Mean => acc + v,
                        };
                    }
                }
                *ov = T::from_f32(if kind == Pool::Mean {
                    acc / cnt as f32
                } else {
                    acc
                });
            }
        });
    Ok(())
}

/// Depthwise causal conv1d over `x [batch, width, channels]` with
/// `weight [channels, k]` and optional `bias [channels]`:
/// `out[b, t, c] = Σ_i x[b, t+i, c]·w[c, i] + bias[c]` for
/// `t < width − k + 1` (the caller left-pads with history), then SiLU if
/// `silu_out`. Needs `1 <= k <= width` and the matching lengths.
#[allow(clippy::too_many_arguments)]
pub fn causal_conv1d<T: Elem>(
    x: &[T],
    weight: &[T],
    bias: Option<&[T]>,
    out: &mut [T],
    batch: usize,
    width: usize,
    channels: usize,
    k: usize,
    silu_out: bool,
) -> Result<()> {
    const K: &str = "causal_conv1d";
    if k == 0 || k > width {
        return Err(invalid(K, format!("kernel {k} with width {width}")));
    }
    let out_seq = width - k + 1;
    check_len(K, "x", x.len(), numel(K, &[batch, width, channels])?)?;
    check_len(K, "weight", weight.len(), numel(K, &[channels, k])?)?;
    check_len(K, "out", out.len(), numel(K, &[batch, out_seq, channels])?)?;
    if let Some(b) = bias {
        check_len(K, "bias", b.len(), channels)?;
    }
    if channels == 0 || batch == 0 {
        return Ok(());
    }
    // Tap-major weights so the channel loop is contiguous.
    let mut wt = vec![0f32; k * channels];
    for c in 0..channels {
        for i in 0..k {
            wt[i * channels + c] = weight[c * k + i].to_f32();
        }
    }
    let b0: Vec<f32> = (0..channels)
        .map(|c| bias.map_or(0.0, |b| b[c].to_f32()))
        .collect();
    let row = |acc: &mut Vec<f32>, (r, o): (usize, &mut [T])| {
        let (b, t) = (r / out_seq, r % out_seq);
        acc.copy_from_slice(&b0);
        for (i, wrow) in wt.chunks_exact(channels).enumerate() {
            let xr = &x[((b * width) + t + i) * channels..][..channels];
            acc.iter_mut()
                .zip(xr)
                .zip(wrow)
                .for_each(|((a, x), w)| *a += x.to_f32() * w);
        }
        for (o, &a) in o.iter_mut().zip(acc.iter()) {
            *o = T::from_f32(if silu_out { silu(a) } else { a });
        }
    };
    let out = &mut out[..batch * out_seq * channels];
    // a decode step's one row (or any small conv) stays on the calling
    // thread: handing it to the pool costs more than the work
    if out.len().saturating_mul(k) < PAR_MIN {
        let mut acc = vec![0f32; channels];
        out.chunks_mut(channels)
            .enumerate()
            .for_each(|ro| row(&mut acc, ro));
    } else {
        out.par_chunks_mut(channels)
            .enumerate()
            .for_each_init(|| vec![0f32; channels], row);
    }
    Ok(())
}

#[cfg(test)]
#[path = "conv_tests.rs"]
mod tests;
