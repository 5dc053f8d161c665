//! Training-gradient kernels: RMSNorm (input / gamma / beta), RoPE,
//! reverse cumsum, gather scatter-add, adaLN / gated residual (packed),
//! log-mel and softmax cross-entropy. Attention's gradient lives in
//! [`super::backward_attn`], max-pool and conv2d gradients in
//! [`super::backward_conv`].
//!
//! Every kernel differentiates the forward stated on it; the formulas are
//! the ones of `python/rlx/reference/backward.py` (the oracle). Sums are
//! accumulated in f64 and rounded once, so results agree with the f64
//! reference to f32 rounding.

use super::{check_len, invalid, numel, rows_per_task, Elem, Result};
use rayon::prelude::*;

// ------------------------------------------------------------- RMSNorm

/// Which RMSNorm gradient to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RmsWrt {
    /// `dx [rows, h]`.
    Input,
    /// `dγ [h]`.
    Gamma,
    /// `dβ [h]`.
    Beta,
}

/// Gradient of `y = x·r·γ + β`, `r = 1/√(mean(x²) + eps)` per row of `h`:
/// `dx = r·(γdy − x̂·Σ(γdy·x̂)/h)`, `dγ = Σ_rows dy·x̂`, `dβ = Σ_rows dy`.
#[allow(clippy::too_many_arguments)]
pub fn rms_norm_backward(
    x: &[f32],
    gamma: &[f32],
    dy: &[f32],
    out: &mut [f32],
    rows: usize,
    h: usize,
    eps: f32,
    wrt: RmsWrt,
) -> Result<()> {
    const K: &str = "rms_norm_backward";
    let n = numel(K, &[rows, h])?;
    check_len(K, "x", x.len(), n)?;
    check_len(K, "dy", dy.len(), n)?;
    check_len(K, "gamma", gamma.len(), h)?;
    let rstd = |xr: &[f32]| {
        let ms: f64 = xr.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / h as f64;
        1.0 / (ms + f64::from(eps)).sqrt()
    };
    match wrt {
        RmsWrt::Input => {
            check_len(K, "dx", out.len(), n)?;
            if h == 0 {
                return Ok(());
            }
            let chunk = rows_per_task(rows, h);
            out[..n]
                .par_chunks_mut(chunk * h)
                .enumerate()
                .for_each(|(ci, o)| {
                    for (r, orow) in o.chunks_mut(h).enumerate() {
                        let base = (ci * chunk + r) * h;
                        let (xr, dr) = (&x[base..base + h], &dy[base..base + h]);
                        let rs = rstd(xr);
                        let dot: f64 = (0..h)
                            .map(|c| f64::from(dr[c]) * f64::from(gamma[c]) * f64::from(xr[c]) * rs)
                            .sum();
                        for c in 0..h {
                            let xh = f64::from(xr[c]) * rs;
                            let gdy = f64::from(dr[c]) * f64::from(gamma[c]);
                            orow[c] = (rs * (gdy - xh * dot / h as f64)) as f32;
                        }
                    }
                });
        }
        RmsWrt::Gamma | RmsWrt::Beta => {
            check_len(K, "out", out.len(), h)?;
            let mut acc = vec![0f64; h];
            for r in 0..rows {
                let (xr, dr) = (&x[r * h..(r + 1) * h], &dy[r * h..(r + 1) * h]);
                let rs = if wrt == RmsWrt::Gamma { rstd(xr) } else { 1.0 };
                for c in 0..h {
                    let f = if wrt == RmsWrt::Gamma {
                        f64::from(xr[c]) * rs
                    } else {
                        1.0
                    };
                    acc[c] += f64::from(dr[c]) * f;
                }
            }
            out[..h]
                .iter_mut()
                .zip(&acc)
                .for_each(|(o, &a)| *o = a as f32);
        }
    }
    Ok(())
}

// ------------------------------------------------------------- RoPE

/// Geometry of a RoPE gradient on `[batch, seq, hidden]`.
#[derive(Debug, Clone, Copy)]
pub struct RopeBwdDims {
    /// Batch.
    pub batch: usize,
    /// Sequence.
    pub seq: usize,
    /// Row width (`heads·head_dim`).
    pub hidden: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// Rotated dims per head (even).
    pub n_rot: usize,
    /// Elements of cos (and sin): `rows·n_rot/2`, rows = `batch·seq`
    /// (one per token) or ≥ `seq` (row `p` for position `p`).
    pub cos_len: usize,
}

/// Transpose of the NeoX rotation (pairs `(i, i + n_rot/2)`):
/// `dx_a = dy_a·c + dy_b·s`, `dx_b = −dy_a·s + dy_b·c`; other dims copy.
pub fn rope_backward(
    dy: &[f32],
    cos: &[f32],
    sin: &[f32],
    dx: &mut [f32],
    d: RopeBwdDims,
) -> Result<()> {
    const K: &str = "rope_backward";
    let n = numel(K, &[d.batch, d.seq, d.hidden])?;
    check_len(K, "dy", dy.len(), n)?;
    check_len(K, "dx", dx.len(), n)?;
    check_len(K, "cos", cos.len(), d.cos_len)?;
    check_len(K, "sin", sin.len(), d.cos_len)?;
    let half = d.n_rot / 2;
    if d.head_dim == 0 || d.n_rot > d.head_dim || !d.hidden.is_multiple_of(d.head_dim) || half == 0
    {
        return Err(invalid(K, format!("bad geometry {d:?}")));
    }
    let table_rows = d.cos_len / half;
    let tokens = d.batch * d.seq;
    if table_rows != tokens && table_rows < d.seq {
        return Err(invalid(
            K,
            format!("{table_rows} table rows for seq {}", d.seq),
        ));
    }
    if d.hidden == 0 {
        return Ok(());
    }
    dx[..n]
        .par_chunks_mut(d.hidden)
        .enumerate()
        .for_each(|(p, orow)| {
            let t = if table_rows == tokens { p } else { p % d.seq };
            let (c, s) = (&cos[t * half..][..half], &sin[t * half..][..half]);
            let irow = &dy[p * d.hidden..][..d.hidden];
            for (oh, ih) in orow.chunks_mut(d.head_dim).zip(irow.chunks(d.head_dim)) {
                oh.copy_from_slice(ih);
                for i in 0..half {
                    let (a, b) = (ih[i], ih[i + half]);
                    oh[i] = a * c[i] + b * s[i];
                    oh[i + half] = -a * s[i] + b * c[i];
                }
            }
        });
    Ok(())
}

// ------------------------------------------------------------- cumsum / gather

/// Reverse prefix sum per row of `cols`: inclusive `dx_i = Σ_{j≥i} dy_j`,
/// exclusive `Σ_{j>i} dy_j`.
pub fn cumsum_backward(
    dy: &[f32],
    dx: &mut [f32],
    rows: usize,
    cols: usize,
    exclusive: bool,
) -> Result<()> {
    const K: &str = "cumsum_backward";
    let n = numel(K, &[rows, cols])?;
    check_len(K, "dy", dy.len(), n)?;
    check_len(K, "dx", dx.len(), n)?;
    if cols == 0 {
        return Ok(());
    }
    dx[..n]
        .par_chunks_mut(cols)
        .zip(dy[..n].par_chunks(cols))
        .for_each(|(o, i)| {
            let mut acc = 0f64;
            for c in (0..cols).rev() {
                let y = f64::from(i[c]);
                if exclusive {
                    o[c] = acc as f32;
                    acc += y;
                } else {
                    acc += y;
                    o[c] = acc as f32;
                }
            }
        });
    Ok(())
}

/// Scatter-add of `dy [outer, num_idx, trailing]` into zeroed `dst [outer,
/// axis_dim, trailing]` at i32 `indices` (negative counts from the end; an
/// index still out of range contributes nothing, as the forward gather's
/// zero fill).
pub fn gather_backward(
    dy: &[f32],
    indices: &[i32],
    dst: &mut [f32],
    dims: [usize; 4],
) -> Result<()> {
    const K: &str = "gather_backward";
    let [outer, axis_dim, num_idx, trailing] = dims;
    check_len(K, "dy", dy.len(), numel(K, &[outer, num_idx, trailing])?)?;
    check_len(K, "indices", indices.len(), num_idx)?;
    let n = numel(K, &[outer, axis_dim, trailing])?;
    check_len(K, "dst", dst.len(), n)?;
    if axis_dim == 0 || trailing == 0 {
        dst[..n].fill(0.0);
        return Ok(());
    }
    let block = axis_dim * trailing;
    dst[..n]
        .par_chunks_mut(block)
        .enumerate()
        .for_each(|(o, out)| {
            let mut acc = vec![0f64; block];
            for (i, &ix) in indices[..num_idx].iter().enumerate() {
                let ix = i64::from(ix);
                let ix = if ix < 0 { ix + axis_dim as i64 } else { ix };
                if ix < 0 || ix >= axis_dim as i64 {
                    continue;
                }
                let src = &dy[(o * num_idx + i) * trailing..][..trailing];
                let a = &mut acc[ix as usize * trailing..][..trailing];
                a.iter_mut().zip(src).for_each(|(x, &y)| *x += f64::from(y));
            }
            out.iter_mut().zip(&acc).for_each(|(o, &a)| *o = a as f32);
        });
    Ok(())
}

// ------------------------------------------------------------- DiT modulation

/// Geometry of adaLN / gated-residual gradients: `mod_rows` modulation rows,
/// each covering `seq_per_mod` consecutive rows of `h`.
#[derive(Debug, Clone, Copy)]
pub struct ModDims {
    /// Features per row.
    pub h: usize,
    /// Rows per modulation row.
    pub seq_per_mod: usize,
    /// Modulation rows.
    pub mod_rows: usize,
}

fn mod_sizes(k: &'static str, d: ModDims) -> Result<(usize, usize)> {
    Ok((
        numel(k, &[d.mod_rows, d.seq_per_mod, d.h])?,
        numel(k, &[d.mod_rows, d.h])?,
    ))
}

/// Gradient of `out = norm(x)·(1 + scale) + shift` (norm: LayerNorm or
/// RMSNorm without affine). `out` packed `[dx ∥ dscale ∥ dshift]`.
pub fn ada_layer_norm_backward<T: Elem>(
    x: &[T],
    scale: &[T],
    dy: &[T],
    out: &mut [T],
    d: ModDims,
    eps: f32,
    layer_norm: bool,
) -> Result<()> {
    const K: &str = "ada_layer_norm_backward";
    let (nx, nm) = mod_sizes(K, d)?;
    check_len(K, "x", x.len(), nx)?;
    check_len(K, "dy", dy.len(), nx)?;
    check_len(K, "scale", scale.len(), nm)?;
    check_len(K, "out", out.len(), nx + 2 * nm)?;
    let h = d.h;
    if h == 0 {
        return Ok(());
    }
    let (dx, rest) = out.split_at_mut(nx);
    let (dscale, dshift) = rest.split_at_mut(nm);
    let span = d.seq_per_mod * h;
    dx[..nx]
        .par_chunks_mut(span.max(1))
        .zip(
            dscale[..nm]
                .par_chunks_mut(h)
                .zip(dshift[..nm].par_chunks_mut(h)),
        )
        .enumerate()
        .for_each(|(m, (dxm, (dsm, dshm)))| {
            let sc = &scale[m * h..][..h];
            let (mut ds, mut dsh) = (vec![0f64; h], vec![0f64; h]);
            let mut xh = vec![0f64; h];
            let mut g = vec![0f64; h];
            for (r, orow) in dxm.chunks_mut(h).enumerate() {
                let base = m * span + r * h;
                let (xr, dr) = (&x[base..base + h], &dy[base..base + h]);
                let mean = if layer_norm {
                    xr.iter().map(|v| f64::from(v.to_f32())).sum::<f64>() / h as f64
                } else {
                    0.0
                };
                let var = xr
                    .iter()
                    .map(|v| (f64::from(v.to_f32()) - mean).powi(2))
                    .sum::<f64>()
                    / h as f64;
                let rs = 1.0 / (var + f64::from(eps)).sqrt();
                let mut dot = 0.0;
                for c in 0..h {
                    xh[c] = (f64::from(xr[c].to_f32()) - mean) * rs;
                    let y = f64::from(dr[c].to_f32());
                    g[c] = y * (1.0 + f64::from(sc[c].to_f32()));
                    dot += g[c] * xh[c];
                    ds[c] += y * xh[c];
                    dsh[c] += y;
                }
                let mut dmean = 0.0;
                for c in 0..h {
                    g[c] = rs * (g[c] - xh[c] * dot / h as f64);
                    dmean += g[c];
                }
                dmean = if layer_norm { dmean / h as f64 } else { 0.0 };
                for c in 0..h {
                    orow[c] = T::from_f32((g[c] - dmean) as f32);
                }
            }
            for c in 0..h {
                dsm[c] = T::from_f32(ds[c] as f32);
                dshm[c] = T::from_f32(dsh[c] as f32);
            }
        });
    Ok(())
}

/// Gradient of `out = x + gate·y` (gate broadcast over `seq_per_mod` rows):
/// `out` packed `[dx = g ∥ dy = gate·g ∥ dgate = Σ_rows y·g]`, `g` the
/// upstream gradient.
pub fn gated_residual_backward<T: Elem>(
    y: &[T],
    gate: &[T],
    g: &[T],
    out: &mut [T],
    d: ModDims,
) -> Result<()> {
    const K: &str = "gated_residual_backward";
    let (nx, nm) = mod_sizes(K, d)?;
    check_len(K, "y", y.len(), nx)?;
    check_len(K, "dy", g.len(), nx)?;
    check_len(K, "gate", gate.len(), nm)?;
    check_len(K, "out", out.len(), 2 * nx + nm)?;
    let h = d.h;
    if h == 0 {
        return Ok(());
    }
    let (dx, rest) = out.split_at_mut(nx);
    let (dyb, dgate) = rest.split_at_mut(nx);
    dx.copy_from_slice(&g[..nx]);
    let span = d.seq_per_mod * h;
    for m in 0..d.mod_rows {
        let gt = &gate[m * h..][..h];
        let mut acc = vec![0f64; h];
        for r in 0..d.seq_per_mod {
            let base = m * span + r * h;
            for c in 0..h {
                let gv = g[base + c].to_f32();
                dyb[base + c] = T::from_f32(gt[c].to_f32() * gv);
                acc[c] += f64::from(y[base + c].to_f32()) * f64::from(gv);
            }
        }
        for c in 0..h {
            dgate[m * h + c] = T::from_f32(acc[c] as f32);
        }
    }
    Ok(())
}

// ------------------------------------------------------------- log-mel / cross-entropy

/// Gradient of `log(F·|spec|² + ε)` w.r.t. the block spectrum rows `[re
/// (n_fft) ∥ im (n_fft)]`: `d re_k = 2 re_k Σ_m dy_m F_mk / mel_m` (same
/// for im) for `k < n_bins`, 0 elsewhere.
pub fn log_mel_backward(
    spec: &[f32],
    filters: &[f32],
    dy: &[f32],
    dst: &mut [f32],
    dims: [usize; 4],
) -> Result<()> {
    const K: &str = "log_mel_backward";
    let [outer, n_fft, n_bins, n_mels] = dims;
    if n_bins > n_fft {
        return Err(invalid(K, format!("{n_bins} bins exceed n_fft {n_fft}")));
    }
    let width = numel(K, &[2, n_fft])?;
    let n = numel(K, &[outer, width])?;
    check_len(K, "spec", spec.len(), n)?;
    check_len(K, "filters", filters.len(), numel(K, &[n_mels, n_bins])?)?;
    check_len(K, "dy", dy.len(), numel(K, &[outer, n_mels])?)?;
    check_len(K, "dst", dst.len(), n)?;
    if width == 0 {
        return Ok(());
    }
    dst[..n]
        .par_chunks_mut(width)
        .enumerate()
        .for_each(|(r, o)| {
            let row = &spec[r * width..][..width];
            let p: Vec<f64> = (0..n_bins)
                .map(|k| f64::from(row[k] * row[k] + row[n_fft + k] * row[n_fft + k]))
                .collect();
            let mut dp = vec![0f64; n_bins];
            for m in 0..n_mels {
                let f = &filters[m * n_bins..][..n_bins];
                let mel: f64 = f
                    .iter()
                    .zip(&p)
                    .map(|(&w, &pk)| f64::from(w) * pk)
                    .sum::<f64>()
                    + super::signal::LOG_MEL_EPS;
                let w = f64::from(dy[r * n_mels + m]) / mel;
                dp.iter_mut()
                    .zip(f)
                    .for_each(|(a, &fk)| *a += w * f64::from(fk));
            }
            o.fill(0.0);
            for k in 0..n_bins {
                o[k] = (2.0 * f64::from(row[k]) * dp[k]) as f32;
                o[n_fft + k] = (2.0 * f64::from(row[n_fft + k]) * dp[k]) as f32;
            }
        });
    Ok(())
}

/// `dlogits = (softmax(logits) − onehot(label))·d_loss` per row of `c`; a
/// label outside `[0, c)` (−100) marks an ignored row: zero gradient.
pub fn softmax_ce_backward(
    logits: &[f32],
    labels: &[i32],
    d_loss: &[f32],
    dlogits: &mut [f32],
    n: usize,
    c: usize,
) -> Result<()> {
    const K: &str = "softmax_cross_entropy_backward";
    let total = numel(K, &[n, c])?;
    check_len(K, "logits", logits.len(), total)?;
    check_len(K, "labels", labels.len(), n)?;
    check_len(K, "d_loss", d_loss.len(), n)?;
    check_len(K, "dlogits", dlogits.len(), total)?;
    if c == 0 {
        return Ok(());
    }
    dlogits[..total]
        .par_chunks_mut(c)
        .enumerate()
        .for_each(|(r, o)| {
            let lab = labels[r];
            if lab < 0 || lab as usize >= c {
                o.fill(0.0);
                return;
            }
            let z = &logits[r * c..][..c];
            let mx = z
                .iter()
                .fold(f64::NEG_INFINITY, |a, &v| a.max(f64::from(v)));
            let den: f64 = z.iter().map(|&v| (f64::from(v) - mx).exp()).sum();
            let dl = f64::from(d_loss[r]);
            for (k, ok) in o.iter_mut().enumerate() {
                let p = (f64::from(z[k]) - mx).exp() / den;
                let hot = if k == lab as usize { 1.0 } else { 0.0 };
                *ok = ((p - hot) * dl) as f32;
            }
        });
    Ok(())
}
