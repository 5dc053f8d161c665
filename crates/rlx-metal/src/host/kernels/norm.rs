//! Normalisation kernels: layer norm, RMS norm, fused residual (+ bias)
//! norms, group norm and channel layer norm over NCHW, adaptive layer norm,
//! gated residual and gated RMS norm.
//!
//! Accumulation: the data is widened to f32, but the row statistics
//! (sum, sum of squares) accumulate in f64 over eight independent lanes.
//! That keeps the mean and variance exact to f32 precision even for hidden
//! sizes of 10⁵+ (an f32 running sum loses ~log2(h) bits), while the lanes
//! still vectorise; the variance is computed in a second, mean-centred pass
//! so that large means do not cancel. Rows run in parallel on rayon.

use rayon::prelude::*;

use super::elementwise::silu;
use super::{check_dense, check_len, invalid, rows_per_task, Elem, Result};

/// Which normalisation a fused kernel applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormKind {
    /// `(x - mean) / sqrt(var + eps)`.
    Layer,
    /// `x / sqrt(mean(x²) + eps)`.
    Rms,
}

/// Optional per-feature affine `y·gamma + beta`, each `[h]` (or `[c]` for
/// the NCHW kernels).
#[derive(Debug, Clone, Copy)]
pub struct Affine<'a, T> {
    /// Scale (`None` = 1).
    pub gamma: Option<&'a [T]>,
    /// Shift (`None` = 0).
    pub beta: Option<&'a [T]>,
}

impl<T: 'static> Affine<'_, T> {
    /// No scale, no shift.
    pub const NONE: Affine<'static, T> = Affine {
        gamma: None,
        beta: None,
    };

    fn check(&self, kernel: &'static str, n: usize) -> Result<()> {
        if let Some(g) = self.gamma {
            check_len(kernel, "gamma", g.len(), n)?;
        }
        if let Some(b) = self.beta {
            check_len(kernel, "beta", b.len(), n)?;
        }
        Ok(())
    }
}

impl<T: Elem> Affine<'_, T> {
    /// `(gamma[i], beta[i])` as f32, 1 and 0 where absent.
    fn at(&self, i: usize) -> (f32, f32) {
        (
            self.gamma.map_or(1.0, |g| g[i].to_f32()),
            self.beta.map_or(0.0, |b| b[i].to_f32()),
        )
    }
}

/// Which row of a modulation tensor (scale / shift / gate) row `r` of the
/// input uses.
#[derive(Debug, Clone, Copy)]
pub enum RowMap<'a> {
    /// Row `r` (same shape as the input).
    Same,
    /// Row 0 for every row (one `[h]` vector).
    One,
    /// Row `r / period` (e.g. `[b, s, h]` input with `[b, h]` modulation:
    /// period `s`).
    Period(usize),
    /// Row `idx[r]` (precomputed map).
    Index(&'a [usize]),
}

impl RowMap<'_> {
    #[inline]
    fn row(&self, r: usize) -> usize {
        match *self {
            RowMap::Same => r,
            RowMap::One => 0,
            RowMap::Period(p) => r / p,
            RowMap::Index(ix) => ix[r],
        }
    }

    /// Checks that every mapped row of `rows` lies inside a modulation
    /// tensor of `len` elements with rows of `h`.
    fn check(
        &self,
        kernel: &'static str,
        operand: &'static str,
        rows: usize,
        h: usize,
        len: usize,
    ) -> Result<()> {
        if let RowMap::Period(0) = self {
            return Err(invalid(kernel, "row map period is 0"));
        }
        if let RowMap::Index(ix) = self {
            check_len(kernel, "row map", ix.len(), rows)?;
        }
        let max_row = match *self {
            _ if rows == 0 => return Ok(()),
            RowMap::Index(ix) => ix[..rows].iter().copied().max().unwrap_or(0),
            _ => self.row(rows - 1),
        };
        check_len(kernel, operand, len, (max_row + 1) * h)
    }
}

/// Sum and sum of squares of `v` (f64, eight lanes).
#[inline]
fn sums(v: &[f32], center: f32) -> (f64, f64) {
    let mut s = [0f64; 8];
    let mut q = [0f64; 8];
    let mut it = v.chunks_exact(8);
    for c in &mut it {
        for l in 0..8 {
            let d = (c[l] - center) as f64;
            s[l] += d;
            q[l] += d * d;
        }
    }
    let (mut s0, mut q0) = (s.iter().sum::<f64>(), q.iter().sum::<f64>());
    for &x in it.remainder() {
        let d = (x - center) as f64;
        s0 += d;
        q0 += d * d;
    }
    (s0, q0)
}

/// `(mean, 1/std)` of a row for `kind`.
#[inline]
fn row_stats(kind: NormKind, v: &[f32], eps: f32) -> (f32, f32) {
    let h = v.len().max(1) as f64;
    match kind {
        NormKind::Rms => {
            let (_, q) = sums(v, 0.0);
            (0.0, (1.0 / (q / h + eps as f64).sqrt()) as f32)
        }
        NormKind::Layer => {
            let (s, _) = sums(v, 0.0);
            let mean = (s / h) as f32;
            let (s2, q2) = sums(v, mean);
            // Centred second pass; subtract the tiny residual mean too.
            let var = (q2 / h - (s2 / h) * (s2 / h)).max(0.0);
            (mean, (1.0 / (var + eps as f64).sqrt()) as f32)
        }
    }
}

/// Writes `((v - mean)·inv·gamma + beta)·(1 + scale) + shift` into `out`.
#[inline]
fn write_row<T: Elem>(v: &[f32], (mean, inv): (f32, f32), aff: &Affine<'_, T>, out: &mut [T]) {
    match (aff.gamma, aff.beta) {
        (None, None) => out
            .iter_mut()
            .zip(v)
            .for_each(|(o, &x)| *o = T::from_f32((x - mean) * inv)),
        (Some(g), None) => {
            for ((o, &x), g) in out.iter_mut().zip(v).zip(g) {
                *o = T::from_f32((x - mean) * inv * g.to_f32());
            }
        }
        (g, Some(b)) => {
            for (j, ((o, &x), b)) in out.iter_mut().zip(v).zip(b).enumerate() {
                let g = g.map_or(1.0, |g| g[j].to_f32());
                *o = T::from_f32((x - mean) * inv * g + b.to_f32());
            }
        }
    }
}

/// Runs `f(row_index, out_row, scratch)` over `[rows, h]` rows in parallel.
fn for_rows<T: Elem>(
    out: &mut [T],
    rows: usize,
    h: usize,
    f: impl Fn(usize, &mut [T], &mut Vec<f32>) + Sync,
) {
    let per = rows_per_task(rows, h);
    out[..rows * h]
        .par_chunks_mut(per * h)
        .enumerate()
        .for_each(|(t, chunk)| {
            let mut buf = Vec::with_capacity(h);
            for (i, orow) in chunk.chunks_exact_mut(h).enumerate() {
                f(t * per + i, orow, &mut buf);
            }
        });
}

fn load<T: Elem>(buf: &mut Vec<f32>, src: &[T]) {
    buf.clear();
    buf.extend(src.iter().map(|x| x.to_f32()));
}

/// Row normalisation of `x [rows, h]` into `out`, then the affine.
/// Needs `x, out >= rows·h`, `gamma, beta >= h`.
#[allow(clippy::too_many_arguments)]
pub fn norm_rows<T: Elem>(
    kind: NormKind,
    x: &[T],
    aff: Affine<'_, T>,
    out: &mut [T],
    rows: usize,
    h: usize,
    eps: f32,
) -> Result<()> {
    const K: &str = "norm";
    let total = check_dense(K, &[rows, h], &[("x", x.len()), ("out", out.len())])?;
    aff.check(K, h)?;
    if total == 0 {
        return Ok(());
    }
    for_rows(out, rows, h, |r, o, buf| {
        load(buf, &x[r * h..r * h + h]);
        write_row(buf, row_stats(kind, buf, eps), &aff, o);
    });
    Ok(())
}

/// Layer norm over the last axis of `x [rows, h]`. See [`norm_rows`].
pub fn layer_norm<T: Elem>(
    x: &[T],
    aff: Affine<'_, T>,
    out: &mut [T],
    rows: usize,
    h: usize,
    eps: f32,
) -> Result<()> {
    norm_rows(NormKind::Layer, x, aff, out, rows, h, eps)
}

/// RMS norm `x / sqrt(mean(x²) + eps)·g + b`. See [`norm_rows`].
pub fn rms_norm<T: Elem>(
    x: &[T],
    aff: Affine<'_, T>,
    out: &mut [T],
    rows: usize,
    h: usize,
    eps: f32,
) -> Result<()> {
    norm_rows(NormKind::Rms, x, aff, out, rows, h, eps)
}

/// Fused residual norm: `s = x + residual (+ bias[h])`, optionally stored
/// to `sum_out`, and `out = norm(s)·gamma + beta`. Needs `x, residual, out,
/// sum_out >= rows·h`, `bias, gamma, beta >= h`.
#[allow(clippy::too_many_arguments)]
pub fn residual_norm<T: Elem>(
    kind: NormKind,
    x: &[T],
    residual: &[T],
    bias: Option<&[T]>,
    aff: Affine<'_, T>,
    sum_out: Option<&mut [T]>,
    out: &mut [T],
    rows: usize,
    h: usize,
    eps: f32,
) -> Result<()> {
    const K: &str = "residual_norm";
    let total = check_dense(
        K,
        &[rows, h],
        &[
            ("x", x.len()),
            ("residual", residual.len()),
            ("out", out.len()),
        ],
    )?;
    if let Some(b) = bias {
        check_len(K, "bias", b.len(), h)?;
    }
    aff.check(K, h)?;
    if total == 0 {
        return Ok(());
    }
    let sum_row = |r: usize, buf: &mut Vec<f32>| {
        buf.clear();
        let (xr, rr) = (&x[r * h..r * h + h], &residual[r * h..r * h + h]);
        buf.extend(xr.iter().zip(rr).map(|(a, b)| a.to_f32() + b.to_f32()));
        if let Some(b) = bias {
            buf.iter_mut()
                .zip(&b[..h])
                .for_each(|(s, b)| *s += b.to_f32());
        }
    };
    match sum_out {
        None => for_rows(out, rows, h, |r, o, buf| {
            sum_row(r, buf);
            write_row(buf, row_stats(kind, buf, eps), &aff, o);
        }),
        Some(so) => {
            check_len(K, "sum_out", so.len(), total)?;
            let per = rows_per_task(rows, h);
            out[..total]
                .par_chunks_mut(per * h)
                .zip(so[..total].par_chunks_mut(per * h))
                .enumerate()
                .for_each(|(t, (oc, sc))| {
                    let mut buf = Vec::with_capacity(h);
                    for (i, (o, s)) in oc
                        .chunks_exact_mut(h)
                        .zip(sc.chunks_exact_mut(h))
                        .enumerate()
                    {
                        sum_row(t * per + i, &mut buf);
                        s.iter_mut()
                            .zip(&buf)
                            .for_each(|(s, v)| *s = T::from_f32(*v));
                        write_row(&buf, row_stats(kind, &buf, eps), &aff, o);
                    }
                });
        }
    }
    Ok(())
}

/// Group norm over NCHW `x [n, c, hw]`: statistics per (sample, group of
/// `c / groups` channels), affine per channel. Needs `x, out >= n·c·hw`,
/// `gamma, beta >= c`, `groups` dividing `c`.
#[allow(clippy::too_many_arguments)]
pub fn group_norm<T: Elem>(
    x: &[T],
    aff: Affine<'_, T>,
    out: &mut [T],
    n: usize,
    c: usize,
    hw: usize,
    groups: usize,
    eps: f32,
) -> Result<()> {
    const K: &str = "group_norm";
    if groups == 0 || !c.is_multiple_of(groups) {
        return Err(invalid(
            K,
            format!("{c} channels not divisible into {groups} groups"),
        ));
    }
    let total = check_dense(K, &[n, c, hw], &[("x", x.len()), ("out", out.len())])?;
    aff.check(K, c)?;
    let cg = c / groups;
    let glen = cg * hw;
    if total == 0 {
        return Ok(());
    }
    out[..total]
        .par_chunks_mut(glen)
        .enumerate()
        .for_each(|(gi, o)| {
            let mut buf = Vec::with_capacity(glen);
            load(&mut buf, &x[gi * glen..gi * glen + glen]);
            let st = row_stats(NormKind::Layer, &buf, eps);
            let c0 = (gi % groups) * cg;
            for (ci, (orow, vrow)) in o.chunks_exact_mut(hw).zip(buf.chunks_exact(hw)).enumerate() {
                let (g, b) = aff.at(c0 + ci);
                // centre first: folding the mean into the shift
                // (`v·scale + (b − mean·scale)`) cancels catastrophically
                // when the group's variance is small next to its mean.
                let (mean, scale) = (st.0, st.1 * g);
                orow.iter_mut()
                    .zip(vrow)
                    .for_each(|(o, &v)| *o = T::from_f32((v - mean) * scale + b));
            }
        });
    Ok(())
}

/// Channel layer norm over NCHW `x [n, c, hw]`: at every (sample,
/// position) normalise the `c` values, affine per channel. Needs
/// `x, out >= n·c·hw`, `gamma, beta >= c`.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm2d<T: Elem>(
    x: &[T],
    aff: Affine<'_, T>,
    out: &mut [T],
    n: usize,
    c: usize,
    hw: usize,
    eps: f32,
) -> Result<()> {
    const K: &str = "layer_norm2d";
    let total = check_dense(K, &[n, c, hw], &[("x", x.len()), ("out", out.len())])?;
    aff.check(K, c)?;
    if total == 0 {
        return Ok(());
    }
    // Phase 1: per-position (mean, inv) with channel loops outermost so the
    // position loop is contiguous and vectorises.
    let mut stats = vec![(0f32, 0f32); n * hw];
    stats.par_chunks_mut(hw).enumerate().for_each(|(ni, st)| {
        let xs = &x[ni * c * hw..(ni + 1) * c * hw];
        let mut s = vec![0f64; hw];
        for row in xs.chunks_exact(hw) {
            s.iter_mut()
                .zip(row)
                .for_each(|(s, v)| *s += v.to_f32() as f64);
        }
        let mean: Vec<f64> = s.iter().map(|s| s / c as f64).collect();
        let mut q = vec![0f64; hw];
        for row in xs.chunks_exact(hw) {
            for ((q, v), m) in q.iter_mut().zip(row).zip(&mean) {
                let d = v.to_f32() as f64 - m;
                *q += d * d;
            }
        }
        for ((st, m), q) in st.iter_mut().zip(&mean).zip(&q) {
            *st = (*m as f32, (1.0 / (q / c as f64 + eps as f64).sqrt()) as f32);
        }
    });
    // Phase 2: one (sample, channel) row of positions per task item.
    out[..total]
        .par_chunks_mut(hw)
        .enumerate()
        .for_each(|(row, o)| {
            let (ni, ci) = (row / c, row % c);
            let (g, b) = aff.at(ci);
            let xs = &x[row * hw..row * hw + hw];
            for ((o, v), (m, inv)) in o.iter_mut().zip(xs).zip(&stats[ni * hw..ni * hw + hw]) {
                *o = T::from_f32((v.to_f32() - m) * inv * g + b);
            }
        });
    Ok(())
}

/// Adaptive norm (DiT / AdaLN): `norm(x)·(1 + scale[map(r)]) + shift[map(r)]`
/// for `x [rows, h]`; `scale`/`shift` rows of `h` chosen by `map`. Needs
/// `x, out >= rows·h` and every mapped row inside `scale` and `shift`.
#[allow(clippy::too_many_arguments)]
pub fn ada_layer_norm<T: Elem>(
    kind: NormKind,
    x: &[T],
    scale: &[T],
    shift: &[T],
    map: RowMap<'_>,
    out: &mut [T],
    rows: usize,
    h: usize,
    eps: f32,
) -> Result<()> {
    const K: &str = "ada_layer_norm";
    let total = check_dense(K, &[rows, h], &[("x", x.len()), ("out", out.len())])?;
    map.check(K, "scale", rows, h, scale.len())?;
    map.check(K, "shift", rows, h, shift.len())?;
    if total == 0 {
        return Ok(());
    }
    for_rows(out, rows, h, |r, o, buf| {
        load(buf, &x[r * h..r * h + h]);
        let (mean, inv) = row_stats(kind, buf, eps);
        let m = map.row(r) * h;
        let (sc, sh) = (&scale[m..m + h], &shift[m..m + h]);
        for (((o, &v), s), t) in o.iter_mut().zip(buf.iter()).zip(sc).zip(sh) {
            *o = T::from_f32((v - mean) * inv * (1.0 + s.to_f32()) + t.to_f32());
        }
    });
    Ok(())
}

/// Gated residual `out = x + gate[map(r)]·y` for `[rows, h]` operands.
/// Needs `x, y, out >= rows·h` and every mapped row inside `gate`.
#[allow(clippy::too_many_arguments)]
pub fn gated_residual<T: Elem>(
    x: &[T],
    gate: &[T],
    map: RowMap<'_>,
    y: &[T],
    out: &mut [T],
    rows: usize,
    h: usize,
) -> Result<()> {
    const K: &str = "gated_residual";
    let total = check_dense(
        K,
        &[rows, h],
        &[("x", x.len()), ("y", y.len()), ("out", out.len())],
    )?;
    map.check(K, "gate", rows, h, gate.len())?;
    if total == 0 {
        return Ok(());
    }
    for_rows(out, rows, h, |r, o, _| {
        let m = map.row(r) * h;
        let (xr, yr, gr) = (&x[r * h..r * h + h], &y[r * h..r * h + h], &gate[m..m + h]);
        for (((o, x), y), g) in o.iter_mut().zip(xr).zip(yr).zip(gr) {
            *o = T::from_f32(x.to_f32() + g.to_f32() * y.to_f32());
        }
    });
    Ok(())
}

/// Gated RMS norm (Mamba-2): `rms_norm(x)·gamma·silu(z)` for `[rows, h]`.
/// Needs `x, z, out >= rows·h`, `gamma >= h` (when given).
#[allow(clippy::too_many_arguments)]
pub fn rms_norm_gated<T: Elem>(
    x: &[T],
    z: &[T],
    gamma: Option<&[T]>,
    out: &mut [T],
    rows: usize,
    h: usize,
    eps: f32,
) -> Result<()> {
    const K: &str = "rms_norm_gated";
    let total = check_dense(
        K,
        &[rows, h],
        &[("x", x.len()), ("z", z.len()), ("out", out.len())],
    )?;
    Affine { gamma, beta: None }.check(K, h)?;
    if total == 0 {
        return Ok(());
    }
    for_rows(out, rows, h, |r, o, buf| {
        load(buf, &x[r * h..r * h + h]);
        let (_, inv) = row_stats(NormKind::Rms, buf, eps);
        let zr = &z[r * h..r * h + h];
        for (j, ((o, &v), zv)) in o.iter_mut().zip(buf.iter()).zip(zr).enumerate() {
            let g = gamma.map_or(1.0, |g| g[j].to_f32());
            *o = T::from_f32(v * inv * g * silu(zv.to_f32()));
        }
    });
    Ok(())
}

#[cfg(test)]
#[path = "norm_tests.rs"]
mod tests;
