//! Reductions: row softmax, axis reduce, cumulative sum, top-k, arg
//! max/min, softmax cross-entropy and token sampling.
//!
//! Axis kernels view their input as `[outer, reduced, inner]` so one kernel
//! serves every axis; sums and products accumulate in f64, vectorised
//! across `inner`. Row kernels (softmax, top-k, sampling) work on
//! `[rows, n]` and split rows over rayon.

use std::cmp::Ordering;

use rayon::prelude::*;
use rlx_ir::op::ReduceOp;
use rlx_ir::rng::uniform_at;

use super::attention::exp_nonpos;
use super::{check_len, invalid, numel, rows_per_task, Elem, KernelError, Result};

/// Numerically stable softmax of each row of `x [rows, n]`, in place.
/// A row that is all `-inf` becomes NaN (as in numpy). Needs
/// `x >= rows·n`.
///
/// Each row is widened to f32 and run through `softmax_f32`, compiled
/// three times (AVX-512, AVX2 + FMA, the baseline) and picked at run time:
/// the same operations in the same order (no contraction), so the same
/// bits whichever runs; the wider ones only vectorise more.
pub fn softmax_rows<T: Elem>(x: &mut [T], rows: usize, n: usize) -> Result<()> {
    let total = numel("softmax", &[rows, n])?;
    check_len("softmax", "x", x.len(), total)?;
    if total == 0 {
        return Ok(());
    }
    let per = rows_per_task(rows, n);
    let isa = Isa::detect();
    x[..total].par_chunks_mut(per * n).for_each(|chunk| {
        let mut buf = vec![0f32; n];
        for row in chunk.chunks_exact_mut(n) {
            buf.iter_mut()
                .zip(row.iter())
                .for_each(|(b, v)| *b = v.to_f32());
            isa.softmax(&mut buf);
            row.iter_mut()
                .zip(&buf)
                .for_each(|(o, &v)| *o = T::from_f32(v));
        }
    });
    Ok(())
}

/// The widest vector extension [`softmax_f32`] may use here.
#[derive(Clone, Copy)]
enum Isa {
    #[cfg(target_arch = "x86_64")]
    Avx512,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    Base,
}

impl Isa {
    fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("fma") {
                return Isa::Avx512;
            }
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                return Isa::Avx2;
            }
        }
        Isa::Base
    }

    fn softmax(self, v: &mut [f32]) {
        match self {
            // SAFETY: detect() saw the features each variant enables.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { softmax_avx512(v) },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { softmax_avx2(v) },
            Isa::Base => softmax_f32(v),
        }
    }
}

/// [`softmax_f32`] compiled with AVX-512.
///
/// # Safety
/// The CPU has AVX-512 F and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn softmax_avx512(v: &mut [f32]) {
    softmax_f32(v)
}

/// [`softmax_f32`] compiled with AVX2 + FMA.
///
/// # Safety
/// The CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_avx2(v: &mut [f32]) {
    softmax_f32(v)
}

/// Softmax of one f32 row in place: the max over eight independent lanes
/// (NaN sticks), `e^(x − max)` by the attention kernel's vectorisable exp
/// (exactly 0 below its range, so masked `-inf` scores stay 0), the sum
/// over eight lanes, one scale. A NaN or `+inf` in the row, or a row that
/// is all `-inf`, takes libm's exp for numpy's NaNs.
#[inline(always)]
fn softmax_f32(buf: &mut [f32]) {
    const L: usize = 8;
    let mut mx = [f32::NEG_INFINITY; L];
    let mut bad = [0u32; L];
    let chunks = buf.chunks_exact(L);
    let rest = chunks.remainder();
    for c in chunks {
        for l in 0..L {
            mx[l] = mx[l].max(c[l]);
            bad[l] |= u32::from(c[l].is_nan());
        }
    }
    for (l, &v) in rest.iter().enumerate() {
        mx[l] = mx[l].max(v);
        bad[l] |= u32::from(v.is_nan());
    }
    let m = if bad.iter().any(|&b| b != 0) {
        f32::NAN
    } else {
        mx.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b))
    };
    if m.is_finite() {
        for v in buf.iter_mut() {
            let x = *v - m;
            let y = exp_nonpos(x);
            *v = if x < -87.0 { 0.0 } else { y };
        }
    } else {
        buf.iter_mut().for_each(|v| *v = (*v - m).exp());
    }
    let inv = 1.0 / lane_sum(buf);
    buf.iter_mut().for_each(|v| *v *= inv);
}

/// Sum of `v` in eight interleaved f32 lanes (vectorises; the order
/// differs from a serial sum only by rounding).
#[inline(always)]
fn lane_sum(v: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = v.chunks_exact(8);
    let tail: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for (a, x) in acc.iter_mut().zip(c) {
            *a += x;
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Reduces the middle axis of `x [outer, reduced, inner]` into
/// `out [outer, inner]`. Max/min propagate NaN; an empty reduction yields
/// the identity (0, 1, -inf, +inf; NaN for mean). Needs
/// `x >= outer·reduced·inner`, `out >= outer·inner`.
pub fn reduce<T: Elem>(
    op: ReduceOp,
    x: &[T],
    out: &mut [T],
    outer: usize,
    reduced: usize,
    inner: usize,
) -> Result<()> {
    const K: &str = "reduce";
    check_len(K, "x", x.len(), numel(K, &[outer, reduced, inner])?)?;
    let total = numel(K, &[outer, inner])?;
    check_len(K, "out", out.len(), total)?;
    if total == 0 {
        return Ok(());
    }
    let init = match op {
        ReduceOp::Sum | ReduceOp::Mean => 0.0,
        ReduceOp::Prod => 1.0,
        ReduceOp::Max => f64::NEG_INFINITY,
        ReduceOp::Min => f64::INFINITY,
    };
    out[..total]
        .par_chunks_mut(inner)
        .enumerate()
        .with_min_len(rows_per_task(outer, reduced * inner))
        .for_each(|(o, orow)| {
            let mut acc = vec![init; inner];
            for r in 0..reduced {
                let s = (o * reduced + r) * inner;
                let xr = &x[s..s + inner];
                let it = acc.iter_mut().zip(xr);
                match op {
                    ReduceOp::Sum | ReduceOp::Mean => it.for_each(|(a, v)| *a += v.to_f32() as f64),
                    ReduceOp::Prod => it.for_each(|(a, v)| *a *= v.to_f32() as f64),
                    // Once `a` is NaN no comparison replaces it: NaN is sticky.
                    ReduceOp::Max => it.for_each(|(a, v)| {
                        let v = v.to_f32() as f64;
                        if v.is_nan() || v > *a {
                            *a = v
                        }
                    }),
                    ReduceOp::Min => it.for_each(|(a, v)| {
                        let v = v.to_f32() as f64;
                        if v.is_nan() || v < *a {
                            *a = v
                        }
                    }),
                }
            }
            let div = if op == ReduceOp::Mean {
                reduced as f64
            } else {
                1.0
            };
            orow.iter_mut()
                .zip(&acc)
                .for_each(|(o, a)| *o = T::from_f32((a / div) as f32));
        });
    Ok(())
}

/// Cumulative sum along the last axis of `x [rows, n]` (f64 running sum);
/// `exclusive` shifts by one (first element 0). Needs `x, out >= rows·n`.
pub fn cumsum<T: Elem>(
    x: &[T],
    out: &mut [T],
    rows: usize,
    n: usize,
    exclusive: bool,
) -> Result<()> {
    let total = numel("cumsum", &[rows, n])?;
    check_len("cumsum", "x", x.len(), total)?;
    check_len("cumsum", "out", out.len(), total)?;
    if total == 0 {
        return Ok(());
    }
    out[..total]
        .par_chunks_mut(n)
        .zip(x[..total].par_chunks(n))
        .with_min_len(rows_per_task(rows, n))
        .for_each(|(o, x)| {
            let mut s = 0f64;
            for (o, v) in o.iter_mut().zip(x) {
                let v = v.to_f32() as f64;
                if exclusive {
                    *o = T::from_f32(s as f32);
                    s += v;
                } else {
                    s += v;
                    *o = T::from_f32(s as f32);
                }
            }
        });
    Ok(())
}

/// Descending order with ties broken by lower index; NaN ranks below every
/// number (after `-inf`), as in the numpy reference's `_order_desc`.
#[inline]
fn desc(a: (f64, usize), b: (f64, usize)) -> Ordering {
    match (a.0.is_nan(), b.0.is_nan()) {
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (true, true) => a.1.cmp(&b.1),
        _ => {
            b.0.partial_cmp(&a.0)
                .unwrap_or(Ordering::Equal)
                .then(a.1.cmp(&b.1))
        }
    }
}

/// Indices of the `k` largest entries of each row of `x [rows, n]`,
/// descending (ties → lower index first, NaN ranks below every number), into
/// `out [rows, k]` as i32. Needs `k <= n`, `x >= rows·n`, `out >= rows·k`.
pub fn top_k<T: Elem>(x: &[T], out: &mut [i32], rows: usize, n: usize, k: usize) -> Result<()> {
    const K: &str = "top_k";
    if k > n || n > i32::MAX as usize {
        return Err(invalid(K, format!("k = {k} with row length {n}")));
    }
    check_len(K, "x", x.len(), numel(K, &[rows, n])?)?;
    check_len(K, "out", out.len(), numel(K, &[rows, k])?)?;
    if k == 0 {
        return Ok(());
    }
    out[..rows * k].par_chunks_mut(k).enumerate().for_each_init(
        Vec::new,
        |idx: &mut Vec<(f64, usize)>, (r, o)| {
            idx.clear();
            idx.extend(
                x[r * n..r * n + n]
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (v.to_f32() as f64, i)),
            );
            if k < n {
                idx.select_nth_unstable_by(k - 1, |a, b| desc(*a, *b));
            }
            idx[..k].sort_unstable_by(|a, b| desc(*a, *b));
            o.iter_mut()
                .zip(&idx[..k])
                .for_each(|(o, &(_, i))| *o = i as i32);
        },
    );
    Ok(())
}

/// Index of the first maximum (`max`) or minimum of the middle axis of
/// `x [outer, reduced, inner]` into `out [outer, inner]` (a NaN wins at its
/// first occurrence, as in numpy). Needs `reduced >= 1`.
pub fn arg_reduce<T: Elem>(
    x: &[T],
    out: &mut [i32],
    outer: usize,
    reduced: usize,
    inner: usize,
    max: bool,
) -> Result<()> {
    const K: &str = "arg_reduce";
    if reduced == 0 || reduced > i32::MAX as usize {
        return Err(invalid(
            K,
            format!("cannot take arg over an axis of {reduced}"),
        ));
    }
    check_len(K, "x", x.len(), numel(K, &[outer, reduced, inner])?)?;
    let total = numel(K, &[outer, inner])?;
    check_len(K, "out", out.len(), total)?;
    out[..total]
        .par_iter_mut()
        .enumerate()
        .with_min_len(1024)
        .for_each(|(t, o)| {
            let (oi, ii) = (t / inner, t % inner);
            let at = |r: usize| x[(oi * reduced + r) * inner + ii].to_f32();
            let (mut best, mut bi) = (at(0), 0);
            for r in 1..reduced {
                if best.is_nan() {
                    break;
                }
                let v = at(r);
                if v.is_nan() || (max && v > best) || (!max && v < best) {
                    best = v;
                    bi = r;
                }
            }
            *o = bi as i32;
        });
    Ok(())
}

/// `log Σ exp(row)` in f64.
fn logsumexp<T: Elem>(row: &[T]) -> f64 {
    let m = row.iter().fold(f32::NEG_INFINITY, |a, v| a.max(v.to_f32())) as f64;
    m + row
        .iter()
        .map(|v| (v.to_f32() as f64 - m).exp())
        .sum::<f64>()
        .ln()
}

/// Per-row softmax cross-entropy with integer labels:
/// `loss[r] = logsumexp(x[r]) - x[r, label[r]]`. Every label must lie in
/// `0..n`. Needs `logits >= rows·n`, `labels, loss >= rows`.
pub fn cross_entropy_labels<T: Elem>(
    logits: &[T],
    labels: &[i32],
    loss: &mut [f32],
    rows: usize,
    n: usize,
) -> Result<()> {
    const K: &str = "cross_entropy";
    check_len(K, "logits", logits.len(), numel(K, &[rows, n])?)?;
    check_len(K, "labels", labels.len(), rows)?;
    check_len(K, "loss", loss.len(), rows)?;
    if let Some(&bad) = labels[..rows].iter().find(|&&l| l < 0 || l as usize >= n) {
        return Err(KernelError::Index {
            kernel: K,
            operand: "label",
            index: bad as i64,
            bound: n,
        });
    }
    loss[..rows].par_iter_mut().enumerate().for_each(|(r, l)| {
        let row = &logits[r * n..r * n + n];
        *l = (logsumexp(row) - row[labels[r] as usize].to_f32() as f64) as f32;
    });
    Ok(())
}

/// Per-row softmax cross-entropy with dense targets:
/// `loss[r] = -Σ_j t[r, j]·log_softmax(x[r])_j`. Needs
/// `logits, targets >= rows·n`, `loss >= rows`.
pub fn cross_entropy_dense<T: Elem>(
    logits: &[T],
    targets: &[T],
    loss: &mut [f32],
    rows: usize,
    n: usize,
) -> Result<()> {
    const K: &str = "cross_entropy";
    let total = numel(K, &[rows, n])?;
    check_len(K, "logits", logits.len(), total)?;
    check_len(K, "targets", targets.len(), total)?;
    check_len(K, "loss", loss.len(), rows)?;
    loss[..rows].par_iter_mut().enumerate().for_each(|(r, l)| {
        let row = &logits[r * n..r * n + n];
        let lse = logsumexp(row);
        let t = &targets[r * n..r * n + n];
        *l = -row
            .iter()
            .zip(t)
            .map(|(x, t)| t.to_f32() as f64 * (x.to_f32() as f64 - lse))
            .sum::<f64>() as f32;
    });
    Ok(())
}

/// Token sampling settings.
#[derive(Debug, Clone, Copy)]
pub struct SampleParams {
    /// Softmax temperature; `0.0` means greedy (arg max).
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens (`0` = all).
    pub top_k: usize,
    /// Keep the smallest most-likely prefix whose probability mass, measured
    /// after the top-k cut and renormalisation, reaches `top_p`; values
    /// outside `(0, 1)` keep all.
    pub top_p: f32,
    /// RNG key; row `r` draws `u = uniform_at(seed, r)`.
    pub seed: u64,
}

/// Samples one token per row of `logits [rows, n]` into `out [rows]`,
/// following the numpy reference (`rlx.reference.reduce.sample_row`) step
/// by step, in f64:
/// greedy (first arg max) when `temperature == 0`; otherwise `z =
/// logits/temperature`, tokens ordered by descending `z` (ties → lower id,
/// NaN last), the first `top_k` kept (0 = all), `p = exp(z − z_max)`
/// renormalised; when `0 < top_p < 1` the shortest prefix whose running mass
/// reaches `top_p` is kept and renormalised (Hugging Face's order: top-k,
/// then top-p on the renormalised survivors); the pick is the first kept
/// token whose running probability exceeds `u` (the last kept one if none
/// does). Sums run sequentially in order, as the reference's `cumsum`.
/// Needs `n >= 1`, `logits >= rows·n`, `out >= rows`.
pub fn sample<T: Elem>(
    logits: &[T],
    out: &mut [i32],
    rows: usize,
    n: usize,
    p: SampleParams,
) -> Result<()> {
    const K: &str = "sample";
    if n == 0 || n > i32::MAX as usize {
        return Err(invalid(K, format!("vocabulary of {n}")));
    }
    check_len(K, "logits", logits.len(), numel(K, &[rows, n])?)?;
    check_len(K, "out", out.len(), rows)?;
    if p.temperature == 0.0 {
        return arg_reduce(logits, out, rows, n, 1, true);
    }
    let temp = p.temperature as f64;
    let top_p = p.top_p as f64;
    out[..rows].par_iter_mut().enumerate().for_each_init(
        Vec::new,
        |cand: &mut Vec<(f64, usize)>, (r, o)| {
            cand.clear();
            cand.extend(
                logits[r * n..r * n + n]
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (v.to_f32() as f64 / temp, i)),
            );
            let keep = if p.top_k > 0 && p.top_k < n {
                p.top_k
            } else {
                n
            };
            if keep < n {
                cand.select_nth_unstable_by(keep - 1, |a, b| desc(*a, *b));
                cand.truncate(keep);
            }
            cand.sort_unstable_by(|a, b| desc(*a, *b));
            let z_max = cand[0].0;
            cand.iter_mut().for_each(|c| c.0 = (c.0 - z_max).exp());
            normalise(cand);
            if top_p > 0.0 && top_p < 1.0 {
                let mut mass = 0f64;
                let mut kept = cand.len();
                for (i, c) in cand.iter().enumerate() {
                    mass += c.0;
                    if mass >= top_p {
                        kept = i + 1;
                        break;
                    }
                }
                cand.truncate(kept);
                normalise(cand);
            }
            let u = uniform_at(p.seed, r as u64) as f64;
            let mut cum = 0f64;
            let mut pick = cand[cand.len() - 1].1;
            for c in cand.iter() {
                cum += c.0;
                if cum > u {
                    pick = c.1;
                    break;
                }
            }
            *o = pick as i32;
        },
    );
    Ok(())
}

/// Divide by the sequential (in-order) sum, as `p / cumsum(p)[-1]`.
fn normalise(cand: &mut [(f64, usize)]) {
    let total = cand.iter().fold(0f64, |a, c| a + c.0);
    cand.iter_mut().for_each(|c| c.0 /= total);
}

#[cfg(test)]
#[path = "reduce_tests.rs"]
mod tests;
