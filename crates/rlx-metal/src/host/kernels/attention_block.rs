//! The blocked prefill path of [`super::sdpa`]: attention as two GEMMs per
//! block of query rows.
//!
//! A *task* is one (batch, query head, block of up to [`BLOCK_Q`] query
//! rows). Its key range `[lo, hi)` is the union of what the block's rows
//! see (the first row's start to the last row's end: both grow with the
//! row). Then, on per-thread scratch:
//!
//! 1. `Q_blk` widened to f32 and pre-scaled (as the per-row path does);
//! 2. `S = Q_blk·Kᵀ` over `[lo, hi)` by the `gemm` crate (through
//!    `matmul::strided_gemm`, single-threaded inside the task): K is read
//!    in place with its layout's strides (KV head `h / (heads / kv_heads)`,
//!    never repeated), or, when it is not f32 (an f16 cache), widened once
//!    per task into scratch;
//! 3. per row: soft-cap, then the mask exactly as the per-row path
//!    applies it — keys outside the row's causal / sliding-window range and
//!    custom-masked keys become `-inf` (overwritten, so a NaN key there
//!    does not leak), a bias is added — then the row max, `exp(s − max)`
//!    (`exp_nonpos`) with masked keys weighted exactly `0`, and their sum;
//!    a row with no visible key is written as zeros, a row with a NaN or
//!    `+inf` score as NaN;
//! 4. `O_blk = P·V` by GEMM, each row divided by its sum.
//!
//! A masked key's weight is `0`, and `0·NaN` is NaN, so a non-finite value
//! row would leak into rows that must not see it: calls whose visible V
//! rows are not all finite keep the per-row path, which never reads a
//! masked value. So do calls where some block would see more than
//! [`MAX_KEYS`] keys (the score scratch stays ≤ `BLOCK_Q · MAX_KEYS`
//! floats, 1 MiB; longer contexts use the per-row path rather than an
//! online softmax over key chunks).
//!
//! There is no minimum of query rows or keys besides the decode path's:
//! a row's result does not depend on which other rows share its block (the
//! key range starts at a multiple of 8, so the lane sums see the same
//! keys in the same lanes; zero weights add exact zeros), so a prompt run
//! on a prefix of a padded bucket equals the padded run — a second
//! threshold would send the two to different paths and break that.

use std::any::TypeId;
use std::cell::RefCell;

use gemm::Parallelism;
use half::f16;
use rayon::prelude::*;

use super::sdpa_core::{as_f32, exp_weights, max_and_bad, Job};
use super::{Elem, Layout, Mask, SharedPtr, PAR_MIN};
use crate::host::kernels::matmul::strided_gemm;

/// Most query rows per task.
pub(super) const BLOCK_Q: usize = 64;

/// Most keys one block may see (bounds the score scratch).
pub(super) const MAX_KEYS: usize = 4096;

/// Per-thread buffers of a task (grown once, never shrunk).
#[derive(Default)]
struct Scratch {
    /// The block's queries, widened and pre-scaled (`rows · d`).
    q: Vec<f32>,
    /// Scores, then weights (`rows · n`).
    s: Vec<f32>,
    /// `P·V` (`rows · d`).
    o: Vec<f32>,
    /// Keys widened to f32 when they are not f32 (`n · d`).
    k: Vec<f32>,
    /// Values widened to f32 when they are not f32 (`n · d`).
    v: Vec<f32>,
    /// Per row: the weight sum, `0` for no visible key, NaN if poisoned.
    sums: Vec<f32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Query-row blocks of a sequence of `s` rows: `(count, rows per block)`,
/// the rows spread evenly (197 rows → 4 blocks of 50).
fn blocks(s: usize) -> (usize, usize) {
    let nb = s.div_ceil(BLOCK_Q).max(1);
    (nb, s.div_ceil(nb).max(1))
}

/// Key range `[lo, hi)` seen by query rows `i0..i1` (non-empty), `lo`
/// rounded down to a multiple of 8 (the lanes of the softmax sums).
fn key_range<T: Elem, U: Elem>(job: &Job<'_, T, U>, i0: usize, i1: usize) -> (usize, usize) {
    let lo = job.visible(i0).0 & !7;
    let hi = job.visible(i1 - 1).1;
    (lo, hi.max(lo))
}

/// Whether the call's shape suits the blocked path (every condition in
/// the module doc but the finite-values one).
pub(super) fn shape_fits<T: Elem, U: Elem>(job: &Job<'_, T, U>) -> bool {
    if job.d == 0 {
        return false;
    }
    let (nb, rows) = blocks(job.s);
    (0..nb).all(|b| {
        let (i0, i1) = (b * rows, ((b + 1) * rows).min(job.s));
        i0 >= i1 || {
            let (lo, hi) = key_range(job, i0, i1);
            hi - lo <= MAX_KEYS
        }
    })
}

/// Whether every value row `0..len` of every batch entry and KV head is
/// finite (so a zero weight times a masked value is zero).
pub(super) fn values_finite<T: Elem, U: Elem>(job: &Job<'_, T, U>, batch: usize) -> bool {
    let (d, kvh) = (job.d, job.kv_heads);
    let ranges: Vec<(usize, usize)> = match job.layout {
        Layout::Bshd => (0..batch)
            .map(|bi| (job.key_row(bi, 0, 0), job.len * kvh * d))
            .collect(),
        Layout::Bhsd => (0..batch * kvh)
            .map(|u| (job.key_row(u / kvh, u % kvh, 0), job.len * d))
            .collect(),
    };
    ranges
        .into_iter()
        .all(|(off, n)| all_finite(&job.v[off..off + n]))
}

/// Whether no element of `x` is NaN or infinite.
fn all_finite<U: Elem>(x: &[U]) -> bool {
    if let Some(x) = as_f32(x) {
        // `v·0` is NaN exactly for a non-finite `v`; eight lanes vectorise
        let mut acc = [0f32; 8];
        let chunks = x.chunks_exact(8);
        let rest = chunks.remainder();
        for c in chunks {
            for l in 0..8 {
                acc[l] += c[l] * 0.0;
            }
        }
        return acc.iter().chain(rest).all(|v| v.is_finite());
    }
    if TypeId::of::<U>() == TypeId::of::<f16>() {
        // SAFETY: `U` is `f16`, a plain 2-byte type.
        let h = unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<u16>(), x.len()) };
        return h.iter().all(|&b| b & 0x7c00 != 0x7c00);
    }
    x.iter().all(|v| v.to_f32().is_finite())
}

/// Runs the whole call on the blocked path (`batch` sequences; `out`
/// holds `batch · s · heads · d`).
pub(super) fn run<T: Elem, U: Elem>(job: &Job<'_, T, U>, batch: usize, out: SharedPtr<T>) {
    let (nb, rows) = blocks(job.s);
    let tasks = batch * job.heads * nb;
    #[cfg(target_arch = "x86_64")]
    let avx2 = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
    #[cfg(not(target_arch = "x86_64"))]
    let avx2 = false;
    let task = |t: usize| {
        let (bi, h, b) = (t / (job.heads * nb), (t / nb) % job.heads, t % nb);
        let (i0, i1) = (b * rows, ((b + 1) * rows).min(job.s));
        if i0 < i1 {
            SCRATCH.with(|cell| {
                let sc = &mut cell.borrow_mut();
                #[cfg(target_arch = "x86_64")]
                if avx2 {
                    // SAFETY: `avx2` is only true when the CPU reported AVX2 and FMA.
                    return unsafe { block_avx2(job, bi, h, i0, i1, sc, out) };
                }
                let _ = avx2;
                block(job, bi, h, i0, i1, sc, out)
            });
        }
    };
    let work = (rows * job.len * job.d).max(1);
    if tasks * work < PAR_MIN {
        (0..tasks).for_each(task);
    } else {
        (0..tasks).into_par_iter().for_each(task);
    }
}

/// [`block`] compiled for AVX2 + FMA (the softmax passes 8-wide).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn block_avx2<T: Elem, U: Elem>(
    job: &Job<'_, T, U>,
    bi: usize,
    h: usize,
    i0: usize,
    i1: usize,
    sc: &mut Scratch,
    out: SharedPtr<T>,
) {
    block(job, bi, h, i0, i1, sc, out)
}

/// `x` (K or V rows `lo..lo + n` of KV head `g`) as an f32 operand
/// `(data, row stride)` starting at row `lo`: in place when `U` is f32,
/// else widened into `buf`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn operand<'b, T: Elem, U: Elem>(
    job: &Job<'_, T, U>,
    x: &'b [U],
    bi: usize,
    g: usize,
    lo: usize,
    n: usize,
    buf: &'b mut Vec<f32>,
) -> (&'b [f32], usize) {
    let d = job.d;
    let stride = match job.layout {
        Layout::Bshd => job.kv_heads * d,
        Layout::Bhsd => d,
    };
    let off = job.key_row(bi, g, lo);
    let end = off + (n - 1) * stride + d;
    if let Some(data) = as_f32(x) {
        return (&data[off..end], stride);
    }
    buf.resize(n * d, 0.0);
    for (j, dst) in buf.chunks_exact_mut(d).enumerate() {
        let r = off + j * stride;
        let src = &x[r..r + d];
        #[cfg(target_arch = "x86_64")]
        if job.f16c && TypeId::of::<U>() == TypeId::of::<f16>() {
            // SAFETY: `U` is `f16` (checked), a plain 2-byte type.
            let src = unsafe { std::slice::from_raw_parts(src.as_ptr().cast::<f16>(), d) };
            // SAFETY: `f16c` is only set when the CPU reported F16C and AVX.
            unsafe { super::sdpa_core::widen_f16(src, dst) };
            continue;
        }
        dst.iter_mut().zip(src).for_each(|(o, v)| *o = v.to_f32());
    }
    (&buf[..], d)
}

/// One task: query rows `i0..i1` of head `h` of batch entry `bi`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn block<T: Elem, U: Elem>(
    job: &Job<'_, T, U>,
    bi: usize,
    h: usize,
    i0: usize,
    i1: usize,
    sc: &mut Scratch,
    out: SharedPtr<T>,
) {
    let (d, m, s, kv_s) = (job.d, i1 - i0, job.s, job.kv_s);
    let g = h / job.group;
    let (lo, hi) = key_range(job, i0, i1);
    let n = hi - lo;
    let Scratch {
        q,
        s: sbuf,
        o,
        k: kbuf,
        v: vbuf,
        sums,
    } = sc;
    if n == 0 {
        for i in i0..i1 {
            // SAFETY: row (bi, i, h) is in bounds (q_len was checked against
            // `out`) and belongs to this task alone.
            unsafe { out.range(job.q_row(bi, i, h), d) }.fill(T::from_f32(0.0));
        }
        return;
    }
    q.clear();
    for i in i0..i1 {
        let r = job.q_row(bi, i, h);
        q.extend(job.q[r..r + d].iter().map(|x| x.to_f32() * job.scale));
    }
    sbuf.resize(m * n, 0.0);
    let (kd, ks) = operand(job, job.k, bi, g, lo, n, kbuf);
    // S[m, n] = Q[m, d] · Kᵀ: Kᵀ[p, j] = kd[j·ks + p]
    strided_gemm(
        (&q[..], d, 1),
        (kd, 1, ks),
        (&mut sbuf[..], n),
        m,
        d,
        n,
        1.0f32,
        Parallelism::None,
    );
    sums.clear();
    for (r, srow) in sbuf.chunks_exact_mut(n).enumerate() {
        let i = i0 + r;
        if job.softcap > 0.0 {
            let cap = job.softcap;
            srow.iter_mut().for_each(|x| *x = cap * (*x / cap).tanh());
        }
        match job.mask {
            Mask::Causal | Mask::SlidingWindow(_) => {
                let (vlo, vhi) = job.visible(i);
                let (a, b) = (vlo.saturating_sub(lo).min(n), vhi.saturating_sub(lo).min(n));
                srow[..a].fill(f32::NEG_INFINITY);
                srow[b.max(a)..].fill(f32::NEG_INFINITY);
            }
            Mask::Custom(mk) => {
                let row = &mk[(bi * s + i) * kv_s + lo..(bi * s + i) * kv_s + hi];
                for (x, w) in srow.iter_mut().zip(row) {
                    if w.to_f32() == 0.0 {
                        *x = f32::NEG_INFINITY;
                    }
                }
            }
            Mask::Bias(bias) => {
                let at = ((bi * job.heads + h) * s + i) * kv_s;
                for (x, w) in srow.iter_mut().zip(&bias[at + lo..at + hi]) {
                    *x += w.to_f32();
                }
            }
            Mask::None => {}
        }
        let (max, bad) = max_and_bad(srow);
        if bad || max == f32::NEG_INFINITY {
            sums.push(if bad { f32::NAN } else { 0.0 });
            srow.fill(0.0);
            continue;
        }
        sums.push(exp_weights(srow, max, 0.0));
    }
    o.resize(m * d, 0.0);
    let (vd, vs) = operand(job, job.v, bi, g, lo, n, vbuf);
    // O[m, d] = P[m, n] · V[n, d]
    strided_gemm(
        (&sbuf[..], n, 1),
        (vd, vs, 1),
        (&mut o[..], d),
        m,
        n,
        d,
        1.0f32,
        Parallelism::None,
    );
    for (r, (orow, &sum)) in o.chunks_exact(d).zip(sums.iter()).enumerate() {
        // SAFETY: as for the empty range above.
        let dst = unsafe { out.range(job.q_row(bi, i0 + r, h), d) };
        if sum.is_nan() || sum == 0.0 {
            dst.fill(T::from_f32(sum));
            continue;
        }
        let inv = 1.0 / sum;
        dst.iter_mut()
            .zip(orow)
            .for_each(|(y, x)| *y = T::from_f32(x * inv));
    }
}
