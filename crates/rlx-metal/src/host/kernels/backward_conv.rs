//! Max-pool and conv2d gradients (NCHW, f32, f64 accumulation).
//!
//! Both conv gradients gather (one output element per task, no atomics):
//! `dx[n, ci, y, x] = Σ dy[n, co, oy, ox]·w[co, ci', a, b]` over the taps
//! with `y = oy·sh − ph + a·dh` (and the same along x), and
//! `dw[co, ci', a, b] = Σ_{n, oy, ox} dy[n, co, oy, ox]·x[n, ci, y, x]`.

use super::{check_len, invalid, numel, Result};
use rayon::prelude::*;

/// Geometry of a 2-D window op: input `[n, c, h, w]`, output `[n, c_out,
/// h_out, w_out]`, window `kh × kw`, stride, zero padding, dilation,
/// groups (pooling: `c_out == c`, dilation 1, groups 1).
#[derive(Debug, Clone, Copy)]
pub struct Window2d {
    /// Batch.
    pub n: usize,
    /// Input channels.
    pub c: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Output channels.
    pub c_out: usize,
    /// Output height.
    pub h_out: usize,
    /// Output width.
    pub w_out: usize,
    /// Window `[kh, kw]`.
    pub k: [usize; 2],
    /// Stride.
    pub s: [usize; 2],
    /// Padding.
    pub p: [usize; 2],
    /// Dilation.
    pub d: [usize; 2],
    /// Groups.
    pub groups: usize,
}

impl Window2d {
    /// The output index `o` with `o·s − p + a·d == y`, if any (one axis).
    fn source(&self, axis: usize, y: usize, a: usize, out_len: usize) -> Option<usize> {
        let t = (y + self.p[axis]).checked_sub(a * self.d[axis])?;
        if t % self.s[axis] != 0 {
            return None;
        }
        let o = t / self.s[axis];
        (o < out_len).then_some(o)
    }

    fn check(&self, k: &'static str) -> Result<()> {
        if self.s.contains(&0) || self.d.contains(&0) || self.groups == 0 {
            return Err(invalid(
                k,
                format!("stride, dilation and groups must be ≥ 1: {self:?}"),
            ));
        }
        if !self.c.is_multiple_of(self.groups) || !self.c_out.is_multiple_of(self.groups) {
            return Err(invalid(
                k,
                format!("groups {} must divide the channels", self.groups),
            ));
        }
        Ok(())
    }
}

/// Max-pool gradient: each window's `dy` goes to its first maximum in
/// row-major window order (padding is −inf, never selected). Windows of
/// different outputs may share their maximum: their gradients add.
pub fn maxpool2d_backward(x: &[f32], dy: &[f32], dx: &mut [f32], g: Window2d) -> Result<()> {
    const K: &str = "maxpool2d_backward";
    g.check(K)?;
    let plane = numel(K, &[g.h, g.w])?;
    let nx = numel(K, &[g.n, g.c, plane])?;
    let oplane = numel(K, &[g.h_out, g.w_out])?;
    check_len(K, "x", x.len(), nx)?;
    check_len(K, "dy", dy.len(), numel(K, &[g.n, g.c, oplane])?)?;
    check_len(K, "dx", dx.len(), nx)?;
    if plane == 0 {
        return Ok(());
    }
    dx[..nx]
        .par_chunks_mut(plane)
        .enumerate()
        .for_each(|(nc, o)| {
            let xp = &x[nc * plane..][..plane];
            let dp = &dy[nc * oplane..][..oplane];
            let mut acc = vec![0f64; plane];
            for oy in 0..g.h_out {
                for ox in 0..g.w_out {
                    let mut best: Option<(usize, f32)> = None;
                    for a in 0..g.k[0] {
                        let Some(y) = (oy * g.s[0] + a).checked_sub(g.p[0]).filter(|&y| y < g.h)
                        else {
                            continue;
                        };
                        for b in 0..g.k[1] {
                            let Some(xx) =
                                (ox * g.s[1] + b).checked_sub(g.p[1]).filter(|&v| v < g.w)
                            else {
                                continue;
                            };
                            let v = xp[y * g.w + xx];
                            if best.is_none_or(|(_, m)| v > m) {
                                best = Some((y * g.w + xx, v));
                            }
                        }
                    }
                    if let Some((i, _)) = best {
                        acc[i] += f64::from(dp[oy * g.w_out + ox]);
                    }
                }
            }
            o.iter_mut().zip(&acc).for_each(|(d, &a)| *d = a as f32);
        });
    Ok(())
}

/// Conv2d gradient w.r.t. the input: dy `[n, c_out, h_out, w_out]`, weight
/// `[c_out, c/groups, kh, kw]` → dx `[n, c, h, w]`.
pub fn conv2d_backward_input(dy: &[f32], w: &[f32], dx: &mut [f32], g: Window2d) -> Result<()> {
    const K: &str = "conv2d_backward_input";
    g.check(K)?;
    let (cig, cog) = (g.c / g.groups, g.c_out / g.groups);
    let plane = numel(K, &[g.h, g.w])?;
    let nx = numel(K, &[g.n, g.c, plane])?;
    let oplane = numel(K, &[g.h_out, g.w_out])?;
    check_len(K, "dy", dy.len(), numel(K, &[g.n, g.c_out, oplane])?)?;
    check_len(K, "w", w.len(), numel(K, &[g.c_out, cig, g.k[0], g.k[1]])?)?;
    check_len(K, "dx", dx.len(), nx)?;
    if plane == 0 {
        return Ok(());
    }
    let ksz = g.k[0] * g.k[1];
    dx[..nx]
        .par_chunks_mut(plane)
        .enumerate()
        .for_each(|(nc, o)| {
            let (bn, ci) = (nc / g.c, nc % g.c);
            let (grp, cl) = (ci / cig, ci % cig);
            for y in 0..g.h {
                for xx in 0..g.w {
                    let mut acc = 0f64;
                    for a in 0..g.k[0] {
                        let Some(oy) = g.source(0, y, a, g.h_out) else {
                            continue;
                        };
                        for b in 0..g.k[1] {
                            let Some(ox) = g.source(1, xx, b, g.w_out) else {
                                continue;
                            };
                            for co in grp * cog..(grp + 1) * cog {
                                let wv = w[(co * cig + cl) * ksz + a * g.k[1] + b];
                                let dv = dy[(bn * g.c_out + co) * oplane + oy * g.w_out + ox];
                                acc += f64::from(wv) * f64::from(dv);
                            }
                        }
                    }
                    o[y * g.w + xx] = acc as f32;
                }
            }
        });
    Ok(())
}

/// Conv2d gradient w.r.t. the weight: x `[n, c, h, w]`, dy `[n, c_out,
/// h_out, w_out]` → dw `[c_out, c/groups, kh, kw]`.
pub fn conv2d_backward_weight(x: &[f32], dy: &[f32], dw: &mut [f32], g: Window2d) -> Result<()> {
    const K: &str = "conv2d_backward_weight";
    g.check(K)?;
    let (cig, cog) = (g.c / g.groups, g.c_out / g.groups);
    let plane = numel(K, &[g.h, g.w])?;
    let oplane = numel(K, &[g.h_out, g.w_out])?;
    check_len(K, "x", x.len(), numel(K, &[g.n, g.c, plane])?)?;
    check_len(K, "dy", dy.len(), numel(K, &[g.n, g.c_out, oplane])?)?;
    let per_out = numel(K, &[cig, g.k[0], g.k[1]])?;
    let nw = numel(K, &[g.c_out, per_out])?;
    check_len(K, "dw", dw.len(), nw)?;
    if per_out == 0 {
        return Ok(());
    }
    dw[..nw]
        .par_chunks_mut(per_out)
        .enumerate()
        .for_each(|(co, o)| {
            let grp = co / cog.max(1);
            for (t, ov) in o.iter_mut().enumerate() {
                let (cl, a, b) = (t / (g.k[0] * g.k[1]), (t / g.k[1]) % g.k[0], t % g.k[1]);
                let ci = grp * cig + cl;
                let mut acc = 0f64;
                for bn in 0..g.n {
                    let xp = &x[(bn * g.c + ci) * plane..][..plane];
                    let dp = &dy[(bn * g.c_out + co) * oplane..][..oplane];
                    for oy in 0..g.h_out {
                        let Some(y) = (oy * g.s[0] + a * g.d[0])
                            .checked_sub(g.p[0])
                            .filter(|&y| y < g.h)
                        else {
                            continue;
                        };
                        for ox in 0..g.w_out {
                            let Some(xx) = (ox * g.s[1] + b * g.d[1])
                                .checked_sub(g.p[1])
                                .filter(|&v| v < g.w)
                            else {
                                continue;
                            };
                            acc += f64::from(dp[oy * g.w_out + ox]) * f64::from(xp[y * g.w + xx]);
                        }
                    }
                }
                *ov = acc as f32;
            }
        });
    Ok(())
}
