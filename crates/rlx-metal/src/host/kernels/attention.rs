//! Attention kernels: scaled dot-product attention (BSHD and BHSD layouts,
//! grouped-query heads, five mask kinds, logit soft-capping) and rotary
//! position embedding.
//!
//! SDPA works one query row (one batch, position, head) at a time with a
//! two-pass softmax: scores for the visible key range, their max, then
//! `exp(s - max)` weights accumulated against V in f32. Rows are
//! independent, so rayon splits the flat list of output rows; causal and
//! sliding-window masks shrink the key range instead of masking scores.
//! GQA maps query head `h` to KV head `h / (heads / kv_heads)` by index —
//! K and V are never repeated.

use rayon::prelude::*;

use super::{check_len, invalid, numel, Elem, Result, PAR_MIN};

/// Memory layout of q / k / v / out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `q, out [b, s, heads·d]`, `k, v [b, kv_s, kv_heads·d]`.
    Bshd,
    /// `q, out [b, heads, s, d]`, `k, v [b, kv_heads, kv_s, d]`.
    Bhsd,
}

/// SDPA problem dims.
#[derive(Debug, Clone, Copy)]
pub struct AttnDims {
    /// Batch size.
    pub batch: usize,
    /// Query positions (`s`).
    pub seq: usize,
    /// Key / value positions (`kv_s`; larger than `s` when decoding
    /// against a cache).
    pub kv_seq: usize,
    /// Query heads.
    pub heads: usize,
    /// Key / value heads (divides `heads`).
    pub kv_heads: usize,
    /// Head dim `d`.
    pub head_dim: usize,
}

/// Which keys a query row sees. Query `i` sits at absolute position
/// `abs = kv_s - s + i`.
#[derive(Debug, Clone, Copy)]
pub enum Mask<'a, T> {
    /// Every key.
    None,
    /// Keys `j <= abs`.
    Causal,
    /// `[b, s, kv_s]`; a nonzero entry makes the key visible.
    Custom(&'a [T]),
    /// Additive `[b, heads, s, kv_s]` bias on the (scaled, capped) scores.
    Bias(&'a [T]),
    /// Causal and `abs - j <= window`.
    SlidingWindow(usize),
}

/// Scalar options of SDPA.
#[derive(Debug, Clone, Copy, Default)]
pub struct AttnOpts {
    /// Score scale; `0.0` means `1/sqrt(d)`.
    pub scale: f32,
    /// Logit soft-cap: `cap·tanh(x/cap)` after scaling, before masking;
    /// `0.0` disables it.
    pub softcap: f32,
}

/// f32 dot product over eight independent lanes (vectorises).
#[inline]
fn dot<T: Elem>(a: &[f32], b: &[T]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] += x[l] * y[l].to_f32();
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ar.iter().zip(br) {
        s += x * y.to_f32();
    }
    s
}

/// Scaled dot-product attention `out = softmax(mask(cap(q·kᵀ·scale)))·v`.
/// Needs `q, out >= b·s·heads·d`, `k, v >= b·kv_s·kv_heads·d`, a custom
/// mask `>= b·s·kv_s` and a bias `>= b·heads·s·kv_s`. A query row with no
/// visible key is written as zeros. A key whose final score is `-inf`
/// (masked) is skipped, so a NaN in its value does not leak; a NaN score
/// makes the whole row NaN, as IEEE softmax would.
#[allow(clippy::too_many_arguments)]
pub fn sdpa<T: Elem>(
    dims: &AttnDims,
    layout: Layout,
    mask: Mask<'_, T>,
    opts: AttnOpts,
    q: &[T],
    k: &[T],
    v: &[T],
    out: &mut [T],
) -> Result<()> {
    const K: &str = "sdpa";
    let AttnDims {
        batch,
        seq: s,
        kv_seq: kv_s,
        heads,
        kv_heads,
        head_dim: d,
    } = *dims;
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Err(invalid(
            K,
            format!("{heads} heads not divisible by {kv_heads} kv heads"),
        ));
    }
    let q_len = numel(K, &[batch, s, heads, d])?;
    let kv_len = numel(K, &[batch, kv_s, kv_heads, d])?;
    check_len(K, "q", q.len(), q_len)?;
    check_len(K, "out", out.len(), q_len)?;
    check_len(K, "k", k.len(), kv_len)?;
    check_len(K, "v", v.len(), kv_len)?;
    match mask {
        Mask::Custom(m) => check_len(K, "mask", m.len(), numel(K, &[batch, s, kv_s])?)?,
        Mask::Bias(m) => check_len(K, "bias", m.len(), numel(K, &[batch, heads, s, kv_s])?)?,
        _ => {}
    }
    if q_len == 0 {
        return Ok(());
    }
    let scale = if opts.scale == 0.0 {
        1.0 / (d as f32).sqrt()
    } else {
        opts.scale
    };
    let group = heads / kv_heads;
    let min_rows = (PAR_MIN / (kv_s * d).max(1)).max(1);
    out[..q_len]
        .par_chunks_mut(d)
        .enumerate()
        .with_min_len(min_rows)
        .for_each_init(
            || {
                (
                    Vec::with_capacity(d),
                    Vec::with_capacity(kv_s),
                    vec![0f32; d],
                )
            },
            |(qf, scores, acc): &mut (Vec<f32>, Vec<f32>, Vec<f32>), (r, o)| {
                let (bi, i, h) = match layout {
                    Layout::Bshd => (r / (heads * s), (r / heads) % s, r % heads),
                    Layout::Bhsd => (r / (heads * s), r % s, (r / s) % heads),
                };
                let g = h / group;
                let key_row = |j: usize| match layout {
                    Layout::Bshd => ((bi * kv_s + j) * kv_heads + g) * d,
                    Layout::Bhsd => ((bi * kv_heads + g) * kv_s + j) * d,
                };
                let abs = kv_s as isize - s as isize + i as isize;
                let (lo, hi) = match mask {
                    Mask::Causal => (0, (abs + 1).clamp(0, kv_s as isize) as usize),
                    Mask::SlidingWindow(w) => {
                        let hi = (abs + 1).clamp(0, kv_s as isize) as usize;
                        let lo = (abs - w.min(isize::MAX as usize) as isize).clamp(0, hi as isize)
                            as usize;
                        (lo, hi)
                    }
                    _ => (0, kv_s),
                };
                qf.clear();
                qf.extend(q[r * d..r * d + d].iter().map(|x| x.to_f32()));
                scores.clear();
                let mut max = f32::NEG_INFINITY;
                let mut nan = false;
                for j in lo..hi {
                    let kr = key_row(j);
                    let mut sc = dot(qf, &k[kr..kr + d]) * scale;
                    if opts.softcap > 0.0 {
                        sc = opts.softcap * (sc / opts.softcap).tanh();
                    }
                    match mask {
                        Mask::Custom(m) if m[(bi * s + i) * kv_s + j].to_f32() == 0.0 => {
                            sc = f32::NEG_INFINITY
                        }
                        Mask::Bias(m) => sc += m[((bi * heads + h) * s + i) * kv_s + j].to_f32(),
                        _ => {}
                    }
                    // f32::max ignores NaN: track it separately
                    nan |= sc.is_nan();
                    max = max.max(sc);
                    scores.push(sc);
                }
                if nan || max == f32::NEG_INFINITY {
                    let fill = if nan { f32::NAN } else { 0.0 };
                    o.iter_mut().for_each(|o| *o = T::from_f32(fill));
                    return;
                }
                acc.iter_mut().for_each(|a| *a = 0.0);
                let mut sum = 0f32;
                for (j, &sc) in (lo..hi).zip(scores.iter()) {
                    if sc == f32::NEG_INFINITY {
                        continue; // masked: its value is never read
                    }
                    let p = (sc - max).exp();
                    sum += p;
                    let vr = key_row(j);
                    acc.iter_mut()
                        .zip(&v[vr..vr + d])
                        .for_each(|(a, x)| *a += p * x.to_f32());
                }
                let inv = 1.0 / sum;
                o.iter_mut()
                    .zip(acc.iter())
                    .for_each(|(o, a)| *o = T::from_f32(a * inv));
            },
        );
    Ok(())
}

/// Rotary embedding geometry.
#[derive(Debug, Clone, Copy)]
pub struct RopeDims {
    /// Batch size.
    pub batch: usize,
    /// Positions per sequence.
    pub seq: usize,
    /// Elements per token row written to `out` (`heads · head_dim`).
    pub hidden: usize,
    /// Elements between consecutive token rows of `x` (≥ `hidden` when `x`
    /// is a slice of a wider fused projection).
    pub src_row_stride: usize,
    /// Head dim; `hidden` is a multiple of it.
    pub head_dim: usize,
    /// Leading dims of each head that rotate (even, ≤ `head_dim`).
    pub n_rot: usize,
    /// NeoX pairs `(i, i + n_rot/2)`; otherwise interleaved `(2i, 2i+1)`.
    pub neox: bool,
    /// `cos`/`sin` are per token `[b·s, n_rot/2]` instead of `[s, n_rot/2]`.
    pub per_token: bool,
}

/// Rotary position embedding of `x` into dense `out [b·s, hidden]`:
/// for each pair `(a, b)` with angle row `t`, `out_a = a·cos − b·sin`,
/// `out_b = a·sin + b·cos`; dims past `n_rot` are copied. Needs
/// `x >= (b·s − 1)·src_row_stride + hidden`, `out >= b·s·hidden`,
/// `cos, sin >= rows·n_rot/2` (rows = `s`, or `b·s` per token).
pub fn rope<T: Elem, C: Elem>(
    p: &RopeDims,
    x: &[T],
    cos: &[C],
    sin: &[C],
    out: &mut [T],
) -> Result<()> {
    const K: &str = "rope";
    let RopeDims {
        batch,
        seq,
        hidden,
        src_row_stride,
        head_dim,
        n_rot,
        neox,
        per_token,
    } = *p;
    if head_dim == 0 || hidden % head_dim != 0 {
        return Err(invalid(
            K,
            format!("hidden {hidden} is not a multiple of head_dim {head_dim}"),
        ));
    }
    if n_rot % 2 != 0 || n_rot > head_dim {
        return Err(invalid(
            K,
            format!("n_rot {n_rot} must be even and <= head_dim {head_dim}"),
        ));
    }
    let tokens = numel(K, &[batch, seq])?;
    let total = numel(K, &[tokens, hidden])?;
    check_len(K, "out", out.len(), total)?;
    if total == 0 {
        return Ok(());
    }
    check_len(
        K,
        "x",
        x.len(),
        numel(K, &[tokens - 1, src_row_stride])? + hidden,
    )?;
    let half = n_rot / 2;
    let trows = if per_token { tokens } else { seq };
    check_len(K, "cos", cos.len(), trows * half)?;
    check_len(K, "sin", sin.len(), trows * half)?;
    let min_rows = (PAR_MIN / hidden).max(1);
    out[..total]
        .par_chunks_mut(hidden)
        .enumerate()
        .with_min_len(min_rows)
        .for_each(|(t, orow)| {
            let xrow = &x[t * src_row_stride..t * src_row_stride + hidden];
            let tr = if per_token { t } else { t % seq };
            let (c, sn) = (
                &cos[tr * half..tr * half + half],
                &sin[tr * half..tr * half + half],
            );
            for (oh, xh) in orow
                .chunks_exact_mut(head_dim)
                .zip(xrow.chunks_exact(head_dim))
            {
                if neox {
                    let (xa, xrest) = xh.split_at(half);
                    let (oa, orest) = oh.split_at_mut(half);
                    let (xb, xtail) = xrest.split_at(half);
                    let (ob, otail) = orest.split_at_mut(half);
                    for (((((oa, ob), a), b), c), s) in oa
                        .iter_mut()
                        .zip(ob.iter_mut())
                        .zip(xa)
                        .zip(xb)
                        .zip(c)
                        .zip(sn)
                    {
                        let (a, b, c, s) = (a.to_f32(), b.to_f32(), c.to_f32(), s.to_f32());
                        *oa = T::from_f32(a * c - b * s);
                        *ob = T::from_f32(a * s + b * c);
                    }
                    otail.copy_from_slice(xtail);
                } else {
                    let (xr, xtail) = xh.split_at(n_rot);
                    let (or, otail) = oh.split_at_mut(n_rot);
                    for (((o2, x2), c), s) in or
                        .chunks_exact_mut(2)
                        .zip(xr.chunks_exact(2))
                        .zip(c)
                        .zip(sn)
                    {
                        let (a, b, c, s) = (x2[0].to_f32(), x2[1].to_f32(), c.to_f32(), s.to_f32());
                        o2[0] = T::from_f32(a * c - b * s);
                        o2[1] = T::from_f32(a * s + b * c);
                    }
                    otail.copy_from_slice(xtail);
                }
            }
        });
    Ok(())
}

#[cfg(test)]
#[path = "attention_tests.rs"]
mod tests;
