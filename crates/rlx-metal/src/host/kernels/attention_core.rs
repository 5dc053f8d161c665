//! The task body of [`super::sdpa`], shared by its prefill and decode paths.
//!
//! A *unit* is one (batch, query position, KV head): the `group` query heads
//! of that KV head's GQA group against the keys the position sees. A unit
//! may be cut into `splits` *pieces* of its visible key range (flash
//! decoding): each piece leaves, per query head, a partial softmax state
//! `[max, sum, acc[d]]` — the running max of its scores, the sum of
//! `exp(score − max)` and the `exp(score − max)`-weighted sum of value rows
//! — and [`finish`] rescales the pieces to their common max and divides:
//! `out = Σ_c acc_c·e^{m_c−M} / Σ_c sum_c·e^{m_c−M}` with `M = max_c m_c`.
//! With one piece the factor is `e^0 = 1` exactly, so the prefill path is
//! the plain two-pass softmax.
//!
//! Per piece the keys are read in blocks of [`block_rows`] rows (widened to f32
//! once unless they are f32 already — an f16 KV cache 8 lanes at a time with
//! F16C on x86-64, or, in the AVX2 build with `d % 8 == 0`, read as f16 by
//! the block kernels and widened in registers; the next block is
//! prefetched meanwhile); every query head of the group passes
//! over a block while it is in L1 (`attention_simd`), then the values the
//! same way. Scores are kept head-major so the max / exp passes run over
//! contiguous rows.
//!
//! Markers inside a head's partial: `max = NaN` means a NaN or `+inf`
//! score poisoned the head (its output row becomes NaN, as IEEE softmax
//! would give); `max = -inf` means the piece saw no visible key. A key whose
//! final score is `-inf` gets weight marker `-1` and its value row is never
//! read, so a NaN stored in a masked value does not leak.

use std::any::TypeId;

use half::f16;

use super::sdpa_simd::{pv, qk, Rows};
#[cfg(target_arch = "x86_64")]
use super::sdpa_simd::{pv_f16, qk_f16};
use super::{Elem, Layout, Mask};
use crate::host::kernels::elementwise::exp_parts;

/// Most key rows per block.
const BLOCK: usize = 64;

/// f32 elements of one block (16 KiB), so that it stays in L1 while every
/// query head of the group (and every accumulator tile of the values)
/// passes over it.
const BLOCK_ELEMS: usize = 4096;

/// Key rows per block for head dim `d`: [`BLOCK`] up to `d = 64`, fewer
/// for wider heads (16 at `d = 256`) so the block fits [`BLOCK_ELEMS`].
/// The blocking does not change any sum's order (each score is one row's
/// dot product; the values are accumulated key by key in order).
#[inline(always)]
fn block_rows(d: usize) -> usize {
    (BLOCK_ELEMS / d.max(1)).clamp(8, BLOCK)
}

/// `x` itself when `T` is `f32` (no widening copy needed).
#[inline(always)]
pub(super) fn as_f32<T: Elem>(x: &[T]) -> Option<&[f32]> {
    if TypeId::of::<T>() == TypeId::of::<f32>() {
        // SAFETY: `T` is `f32`, so the slice has exactly this type.
        Some(unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<f32>(), x.len()) })
    } else {
        None
    }
}

/// `x` itself when `T` is `f16` (read directly by the AVX2 kernels).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn as_f16<T: Elem>(x: &[T]) -> Option<&[f16]> {
    if TypeId::of::<T>() == TypeId::of::<f16>() {
        // SAFETY: `T` is `f16`, so the slice has exactly this type.
        Some(unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<f16>(), x.len()) })
    } else {
        None
    }
}

/// `e^x` for `x ≤ 0` (scores minus their row max), vectorisable through
/// the elementwise kernels' [`exp_parts`]; inputs below -87 give ~1e-38
/// instead of underflowing.
#[inline(always)]
pub(crate) fn exp_nonpos(x: f32) -> f32 {
    let (y, n) = exp_parts(x.max(-87.0));
    y * f32::from_bits((n.wrapping_add(127) as u32) << 23)
}

/// Lanes of the vectorised row reductions below.
const LANES: usize = 8;

/// Row max of `x` (`-inf` for an empty or fully masked row) and whether any
/// score is NaN or `+inf` (which poisons the head). Eight independent
/// lanes, so the loop vectorises; the max is exact whatever the order.
#[inline(always)]
pub(super) fn max_and_bad(x: &[f32]) -> (f32, bool) {
    let mut m = [f32::NEG_INFINITY; LANES];
    let mut bad = [0u32; LANES];
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for l in 0..LANES {
            m[l] = m[l].max(c[l]);
            bad[l] |= u32::from(c[l].is_nan() | (c[l] == f32::INFINITY));
        }
    }
    for (l, &v) in rest.iter().enumerate() {
        m[l] = m[l].max(v);
        bad[l] |= u32::from(v.is_nan() | (v == f32::INFINITY));
    }
    let max = m.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    (max, bad.iter().any(|&b| b != 0))
}

/// Replaces each score `x` of a row whose max is `max` (finite) by its
/// weight `e^(x − max)`, or by `marker` (`-1`: a masked key, never read;
/// `0`: a masked key of the blocked path's P·V product) when `x` is
/// `-inf`, and returns the sum of the weights. The exps run in one
/// vectorisable pass, the sum over [`LANES`] lanes in a second.
#[inline(always)]
pub(super) fn exp_weights(x: &mut [f32], max: f32, marker: f32) -> f32 {
    debug_assert!(marker <= 0.0);
    for v in x.iter_mut() {
        let masked = *v == f32::NEG_INFINITY;
        let e = exp_nonpos(*v - max);
        *v = if masked { marker } else { e };
    }
    let mut acc = [0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for l in 0..LANES {
            acc[l] += c[l].max(0.0);
        }
    }
    for (l, &v) in rest.iter().enumerate() {
        acc[l] += v.max(0.0);
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// Per-thread reusable buffers of a piece (grown once, never shrunk, so a
/// warm decode loop allocates nothing).
#[derive(Default)]
pub(super) struct Scratch {
    /// The group's queries, widened to f32 and pre-scaled (`group · d`).
    qf: Vec<f32>,
    /// A block of key / value rows widened to f32 when they are not f32
    /// already (`block_rows(d) · d`).
    block: Vec<f32>,
    /// Scores, then weights, head-major (`group · n`).
    scores: Vec<f32>,
    /// The partial of a prefill unit (`group · (d + 2)`).
    pub(super) part: Vec<f32>,
}

/// Everything a piece needs: q, the mask and the output are `T`, k and v
/// `U` (`T` itself, or f16 under f32 q: a half KV cache).
pub(super) struct Job<'a, T, U> {
    pub layout: Layout,
    pub mask: Mask<'a, T>,
    pub softcap: f32,
    pub scale: f32,
    pub q: &'a [T],
    pub k: &'a [U],
    pub v: &'a [U],
    pub s: usize,
    pub kv_s: usize,
    pub len: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub d: usize,
    pub group: usize,
    /// Pieces per unit.
    pub splits: usize,
    /// The CPU converts f16 with F16C (widen f16 K / V blocks 8 at a time).
    pub f16c: bool,
}

impl<T: Elem, U: Elem> Job<'_, T, U> {
    /// Row offset of query (and output) `(bi, i, h)`.
    #[inline(always)]
    pub fn q_row(&self, bi: usize, i: usize, h: usize) -> usize {
        match self.layout {
            Layout::Bshd => ((bi * self.s + i) * self.heads + h) * self.d,
            Layout::Bhsd => ((bi * self.heads + h) * self.s + i) * self.d,
        }
    }

    /// Row offset of key / value `(bi, g, j)`.
    #[inline(always)]
    pub(super) fn key_row(&self, bi: usize, g: usize, j: usize) -> usize {
        match self.layout {
            Layout::Bshd => ((bi * self.kv_s + j) * self.kv_heads + g) * self.d,
            Layout::Bhsd => ((bi * self.kv_heads + g) * self.kv_s + j) * self.d,
        }
    }

    /// `(batch, position, kv head)` of `unit`.
    #[inline(always)]
    pub fn unit_coords(&self, unit: usize) -> (usize, usize, usize) {
        let g = unit % self.kv_heads;
        let i = (unit / self.kv_heads) % self.s;
        (unit / (self.kv_heads * self.s), i, g)
    }

    /// Floats of one piece's partial (`group · (d + 2)`).
    pub fn part_len(&self) -> usize {
        self.group * (self.d + 2)
    }

    /// Keys `[lo, hi)` query position `i` may see.
    #[inline(always)]
    pub(super) fn visible(&self, i: usize) -> (usize, usize) {
        let len = self.len;
        let abs = len as isize - self.s as isize + i as isize;
        match self.mask {
            Mask::Causal => (0, (abs + 1).clamp(0, len as isize) as usize),
            Mask::SlidingWindow(w) => {
                let hi = (abs + 1).clamp(0, len as isize) as usize;
                let lo = (abs - w.min(isize::MAX as usize) as isize).clamp(0, hi as isize) as usize;
                (lo, hi)
            }
            _ => (0, len),
        }
    }

    /// Piece `c` of `unit` into `part` (`part_len()` floats).
    #[inline(always)]
    pub fn partial<const FMA: bool>(
        &self,
        unit: usize,
        c: usize,
        sc: &mut Scratch,
        part: &mut [f32],
    ) {
        let (d, gs, s) = (self.d, self.group, self.s);
        let (bi, i, g) = self.unit_coords(unit);
        let (lo, hi) = self.visible(i);
        let all = hi - lo;
        let (a, b) = (lo + all * c / self.splits, lo + all * (c + 1) / self.splits);
        let n = b - a;
        let Scratch {
            qf, block, scores, ..
        } = sc;
        qf.clear();
        for t in 0..gs {
            let r = self.q_row(bi, i, g * gs + t);
            qf.extend(self.q[r..r + d].iter().map(|x| x.to_f32() * self.scale));
        }
        scores.resize(n * gs, 0.0);
        // pass 1: every key block once, for all the group's heads
        let br = block_rows(d);
        // f16 K / V read directly by the AVX2 kernels (widened in registers)
        #[cfg(target_arch = "x86_64")]
        let direct = if FMA && self.f16c && d.is_multiple_of(8) {
            as_f16(self.k).zip(as_f16(self.v))
        } else {
            None
        };
        for col in (0..n).step_by(br) {
            let nb = br.min(n - col);
            let ahead = br.min(n - col - nb);
            #[cfg(target_arch = "x86_64")]
            if let Some((k, _)) = direct {
                let rows = self.rows_f16(k, bi, g, a + col, nb, ahead);
                // SAFETY: `FMA` builds run only on AVX2 + FMA + F16C CPUs
                // (`attention_simd`'s module doc); `d % 8 == 0` above.
                unsafe { qk_f16(qf, d, rows, scores, n, col) };
                continue;
            }
            let rows = self.rows(self.k, bi, g, a + col, nb, ahead, block);
            qk::<FMA>(qf, d, rows, scores, n, col);
        }
        let elementwise = matches!(self.mask, Mask::Custom(_) | Mask::Bias(_));
        if self.softcap > 0.0 || elementwise {
            for t in 0..gs {
                for (jj, j) in (a..b).enumerate() {
                    let x = &mut scores[t * n + jj];
                    if self.softcap > 0.0 {
                        *x = self.softcap * (*x / self.softcap).tanh();
                    }
                    match self.mask {
                        Mask::Custom(m) if m[(bi * s + i) * self.kv_s + j].to_f32() == 0.0 => {
                            *x = f32::NEG_INFINITY
                        }
                        Mask::Bias(m) => {
                            *x +=
                                m[((bi * self.heads + g * gs + t) * s + i) * self.kv_s + j].to_f32()
                        }
                        _ => {}
                    }
                }
            }
        }
        // weights per head, in place; -1 marks a key that is never read
        for (t, p) in part.chunks_exact_mut(d + 2).enumerate().take(gs) {
            let srow = &mut scores[t * n..(t + 1) * n];
            let (max, bad) = max_and_bad(srow);
            if bad || max == f32::NEG_INFINITY {
                p[0] = if bad { f32::NAN } else { f32::NEG_INFINITY };
                p[1] = 0.0;
                srow.fill(-1.0);
                continue;
            }
            p[0] = max;
            p[1] = exp_weights(srow, max, -1.0);
        }
        // pass 2: every value block once
        for p in part.chunks_exact_mut(d + 2).take(gs) {
            p[2..].fill(0.0);
        }
        for col in (0..n).step_by(br) {
            let nb = br.min(n - col);
            let ahead = br.min(n - col - nb);
            #[cfg(target_arch = "x86_64")]
            if let Some((_, v)) = direct {
                let rows = self.rows_f16(v, bi, g, a + col, nb, ahead);
                // SAFETY: as for the keys.
                unsafe { pv_f16(scores, n, col, d, rows, &mut part[..gs * (d + 2)]) };
                continue;
            }
            let rows = self.rows(self.v, bi, g, a + col, nb, ahead, block);
            pv::<FMA>(scores, n, col, d, rows, &mut part[..gs * (d + 2)]);
        }
    }

    /// Rows `j0..j0 + nb` of KV head `g` of an f16 `x` (K or V), in place;
    /// the `ahead` rows after them are prefetched.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn rows_f16<'b>(
        &self,
        x: &'b [f16],
        bi: usize,
        g: usize,
        j0: usize,
        nb: usize,
        ahead: usize,
    ) -> Rows<'b, f16> {
        let stride = match self.layout {
            Layout::Bshd => self.kv_heads * self.d,
            Layout::Bhsd => self.d,
        };
        let off = self.key_row(bi, g, j0);
        prefetch_rows(x, off + nb * stride, stride, ahead, self.d);
        Rows {
            data: x,
            off,
            stride,
            n: nb,
        }
    }

    /// Rows `j0..j0 + nb` of KV head `g` of `x` (K or V) as f32: in place
    /// when `U` is f32, else widened into `buf` (f16 through F16C when the
    /// CPU has it). The `ahead` rows after them (the next block) are
    /// prefetched, so their loads overlap this block's work.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn rows<'b>(
        &self,
        x: &'b [U],
        bi: usize,
        g: usize,
        j0: usize,
        nb: usize,
        ahead: usize,
        buf: &'b mut Vec<f32>,
    ) -> Rows<'b> {
        let d = self.d;
        let stride = match self.layout {
            Layout::Bshd => self.kv_heads * d,
            Layout::Bhsd => d,
        };
        let off = self.key_row(bi, g, j0);
        if let Some(data) = as_f32(x) {
            #[cfg(target_arch = "x86_64")]
            prefetch_rows(x, off + nb * stride, stride, ahead, d);
            return Rows {
                data,
                off,
                stride,
                n: nb,
            };
        }
        // grown once, never cleared: every element read is written below
        if buf.len() < nb * d {
            buf.resize(nb * d, 0.0);
        }
        let buf = &mut buf[..nb * d];
        #[cfg(target_arch = "x86_64")]
        prefetch_rows(x, off + nb * stride, stride, ahead, d);
        #[cfg(target_arch = "x86_64")]
        if self.f16c && TypeId::of::<U>() == TypeId::of::<f16>() {
            for (j, dst) in buf.chunks_exact_mut(d).enumerate() {
                let r = off + j * stride;
                // SAFETY: `U` is `f16` (checked above), a plain 2-byte type.
                let src =
                    unsafe { std::slice::from_raw_parts(x[r..r + d].as_ptr().cast::<f16>(), d) };
                // SAFETY: `f16c` is only set when the CPU reported F16C and AVX.
                unsafe { widen_f16(src, dst) };
            }
            return Rows {
                data: buf,
                off: 0,
                stride: d,
                n: nb,
            };
        }
        for (j, dst) in buf.chunks_exact_mut(d).enumerate() {
            let r = off + j * stride;
            dst.iter_mut()
                .zip(&x[r..r + d])
                .for_each(|(o, v)| *o = v.to_f32());
        }
        Rows {
            data: buf,
            off: 0,
            stride: d,
            n: nb,
        }
    }
}

/// Prefetches rows `first, first + stride, …` (`n` of them, `d` elements
/// each) of `x` into L1, every cache line of each row; rows past the end
/// of `x` are skipped.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_rows<U>(x: &[U], first: usize, stride: usize, n: usize, d: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    let row_bytes = d * std::mem::size_of::<U>();
    for j in 0..n {
        let r = first + j * stride;
        if r + d > x.len() {
            break;
        }
        let p = x[r..].as_ptr().cast::<i8>();
        let mut b = 0;
        while b < row_bytes {
            // SAFETY: `p + b` lies inside row `r` (checked above); a
            // prefetch never faults and changes no state.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.add(b)) };
            b += 64;
        }
    }
}

/// `dst[i] = src[i]` widened from f16, 8 lanes per `vcvtph2ps` (exact:
/// every f16 is an f32).
///
/// # Safety
/// The CPU must support F16C and AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
pub(super) unsafe fn widen_f16(src: &[f16], dst: &mut [f32]) {
    use std::arch::x86_64::{__m128i, _mm256_cvtph_ps, _mm256_storeu_ps, _mm_loadu_si128};
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: elements i..i + 8 lie inside both slices.
        unsafe {
            let h = _mm_loadu_si128(src.as_ptr().add(i).cast::<__m128i>());
            _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        }
        i += 8;
    }
    for (o, x) in dst[i..n].iter_mut().zip(&src[i..n]) {
        *o = x.to_f32();
    }
}

/// Output row of head `t` from the `splits` pieces of its unit (`parts`
/// holds them piece-major, `stride` floats apart; piece 0's accumulator is
/// reused as the sum). No visible key gives zeros, a poisoned head NaN.
#[inline(always)]
pub(super) fn finish<T: Elem>(
    parts: &mut [f32],
    stride: usize,
    splits: usize,
    t: usize,
    d: usize,
    out: &mut [T],
) {
    let at = |c: usize| c * stride + t * (d + 2);
    let mut m = f32::NEG_INFINITY;
    for c in 0..splits {
        let x = parts[at(c)];
        if x.is_nan() {
            out.fill(T::from_f32(f32::NAN));
            return;
        }
        m = m.max(x);
    }
    if m == f32::NEG_INFINITY {
        out.fill(T::from_f32(0.0));
        return;
    }
    let (head, rest) = parts.split_at_mut(stride);
    let p0 = &mut head[at(0)..at(0) + d + 2];
    let f0 = exp_nonpos(p0[0] - m);
    let mut sum = p0[1] * f0;
    if f0 != 1.0 {
        p0[2..].iter_mut().for_each(|a| *a *= f0);
    }
    for c in 1..splits {
        let pc = &rest[at(c) - stride..at(c) - stride + d + 2];
        if pc[0] == f32::NEG_INFINITY {
            continue;
        }
        let f = exp_nonpos(pc[0] - m);
        sum += pc[1] * f;
        p0[2..]
            .iter_mut()
            .zip(&pc[2..])
            .for_each(|(a, x)| *a += f * x);
    }
    let inv = 1.0 / sum;
    out.iter_mut()
        .zip(&p0[2..])
        .for_each(|(o, a)| *o = T::from_f32(a * inv));
}
