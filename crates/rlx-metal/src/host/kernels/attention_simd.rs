//! Block kernels of the SDPA task body: query·key scores and the weighted
//! sum of value rows over a block of at most a few dozen key rows (a block
//! of K or V stays in L1 while every query head of the GQA group passes
//! over it).
//!
//! `FMA = true` is only ever instantiated from the AVX2 + FMA build of the
//! task body, which runs only on CPUs that reported AVX2, FMA and F16C; there
//! the head dims that are a multiple of 8 take hand-written AVX2 kernels
//! (four key rows per pass of the query row for the scores, a 64-float
//! accumulator tile held in eight registers for the values). Those kernels
//! also read f16 rows directly ([`qk_f16`], [`pv_f16`]: an f16 KV cache
//! widened in registers by `vcvtph2ps` as it is loaded, with no f32 copy
//! of the block written and read back). Everything else takes the
//! portable loops, which the compiler vectorises.

use half::f16;

/// `n` rows of `d` elements (f32, or f16 for [`qk_f16`] / [`pv_f16`]):
/// row `j` is `data[off + j·stride..][..d]`.
#[derive(Clone, Copy)]
pub(super) struct Rows<'a, E = f32> {
    pub data: &'a [E],
    pub off: usize,
    pub stride: usize,
    pub n: usize,
}

impl<E> Rows<'_, E> {
    /// True when every row lies inside `data`.
    fn fits(&self, d: usize) -> bool {
        self.n == 0
            || (self.n - 1)
                .checked_mul(self.stride)
                .and_then(|x| x.checked_add(self.off + d))
                .is_some_and(|end| end <= self.data.len())
    }

    #[inline(always)]
    fn row(&self, j: usize, d: usize) -> &[E] {
        let o = self.off + j * self.stride;
        &self.data[o..o + d]
    }
}

/// `a·b + c`, fused when `FMA`.
#[inline(always)]
pub(super) fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// f32 dot product over 32 independent lanes.
#[inline(always)]
pub(super) fn dot<const FMA: bool>(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; 32];
    let (ac, bc) = (a.chunks_exact(32), b.chunks_exact(32));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for l in 0..32 {
            acc[l] = madd::<FMA>(x[l], y[l], acc[l]);
        }
    }
    let (ac, bc) = (ar.chunks_exact(8), br.chunks_exact(8));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] = madd::<FMA>(x[l], y[l], acc[l]);
        }
    }
    let mut s8 = [0f32; 8];
    for l in 0..8 {
        s8[l] = (acc[l] + acc[l + 8]) + (acc[l + 16] + acc[l + 24]);
    }
    let mut s = ((s8[0] + s8[4]) + (s8[1] + s8[5])) + ((s8[2] + s8[6]) + (s8[3] + s8[7]));
    for (x, y) in ar.iter().zip(br) {
        s += x * y;
    }
    s
}

/// `scores[t·sn + col + j] = q_t · k_j` for every head `t` of `q`
/// (`gs · d` floats) and row `j` of `k`.
#[inline(always)]
pub(super) fn qk<const FMA: bool>(
    q: &[f32],
    d: usize,
    k: Rows<'_>,
    scores: &mut [f32],
    sn: usize,
    col: usize,
) {
    let gs = q.len() / d;
    assert!(k.fits(d) && col + k.n <= sn && gs * sn <= scores.len());
    #[cfg(target_arch = "x86_64")]
    if FMA && d.is_multiple_of(8) {
        // SAFETY: FMA builds run only on AVX2 + FMA + F16C CPUs (module doc); the
        // bounds were checked above.
        return unsafe { x86::qk::<f32>(q, d, k, scores, sn, col) };
    }
    for (t, qt) in q.chunks_exact(d).enumerate() {
        for j in 0..k.n {
            scores[t * sn + col + j] = dot::<FMA>(qt, k.row(j, d));
        }
    }
}

/// `acc_t += w[t·sn + col + j] · v_j` over the rows whose weight is not
/// negative (a negative weight marks a masked key, whose row is not read);
/// head `t`'s accumulator is `part[t·(d + 2) + 2..][..d]`.
#[inline(always)]
pub(super) fn pv<const FMA: bool>(
    w: &[f32],
    sn: usize,
    col: usize,
    d: usize,
    v: Rows<'_>,
    part: &mut [f32],
) {
    let gs = part.len() / (d + 2);
    assert!(v.fits(d) && col + v.n <= sn && gs * sn <= w.len());
    #[cfg(target_arch = "x86_64")]
    if FMA && d.is_multiple_of(8) {
        // SAFETY: as in `qk`.
        return unsafe { x86::pv::<f32>(w, sn, col, d, v, part) };
    }
    for (t, p) in part.chunks_exact_mut(d + 2).enumerate() {
        for j in 0..v.n {
            let wj = w[t * sn + col + j];
            if wj < 0.0 {
                continue;
            }
            p[2..]
                .iter_mut()
                .zip(v.row(j, d))
                .for_each(|(a, x)| *a = madd::<FMA>(wj, *x, *a));
        }
    }
}

/// [`qk`] over f16 key rows, widened in registers.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C, and `d % 8 == 0`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn qk_f16(
    q: &[f32],
    d: usize,
    k: Rows<'_, f16>,
    scores: &mut [f32],
    sn: usize,
    col: usize,
) {
    let gs = q.len() / d;
    assert!(d.is_multiple_of(8) && k.fits(d) && col + k.n <= sn && gs * sn <= scores.len());
    // SAFETY: the caller's CPU contract; bounds checked above.
    unsafe { x86::qk::<f16>(q, d, k, scores, sn, col) }
}

/// [`pv`] over f16 value rows, widened in registers.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C, and `d % 8 == 0`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn pv_f16(
    w: &[f32],
    sn: usize,
    col: usize,
    d: usize,
    v: Rows<'_, f16>,
    part: &mut [f32],
) {
    let gs = part.len() / (d + 2);
    assert!(d.is_multiple_of(8) && v.fits(d) && col + v.n <= sn && gs * sn <= w.len());
    // SAFETY: the caller's CPU contract; bounds checked above.
    unsafe { x86::pv::<f16>(w, sn, col, d, v, part) }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Rows;
    use half::f16;
    use std::any::TypeId;
    use std::arch::x86_64::*;

    /// Eight consecutive elements at `p` as f32 lanes: a plain load for
    /// f32, `vcvtph2ps` (exact) for f16. `E` is one of the two.
    #[inline(always)]
    unsafe fn ld<E: 'static>(p: *const E) -> __m256 {
        // SAFETY: the caller reads 8 elements inside its slice; F16C is
        // enabled in every kernel below.
        unsafe {
            if TypeId::of::<E>() == TypeId::of::<f16>() {
                _mm256_cvtph_ps(_mm_loadu_si128(p.cast::<__m128i>()))
            } else {
                _mm256_loadu_ps(p.cast::<f32>())
            }
        }
    }

    /// Horizontal sum of one vector.
    #[inline(always)]
    unsafe fn hsum(a: __m256) -> f32 {
        // SAFETY: register-only intrinsics; the caller runs on an AVX2 CPU.
        unsafe {
            let s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
        }
    }

    /// [`super::qk`] for `d % 8 == 0`, over f32 or f16 rows.
    ///
    /// # Safety
    /// AVX2 + FMA + F16C CPU; bounds as checked by the caller.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn qk<E: 'static>(
        q: &[f32],
        d: usize,
        k: Rows<'_, E>,
        scores: &mut [f32],
        sn: usize,
        col: usize,
    ) {
        // SAFETY: every pointer stays inside `q`, `scores` (sizes checked by
        // `super::qk`) and the rows of `k`; the CPU has AVX2 + FMA.
        unsafe {
            let gs = q.len() / d;
            let kp = k.data.as_ptr().add(k.off);
            let st = k.stride;
            for t in 0..gs {
                let qp = q.as_ptr().add(t * d);
                let out = scores.as_mut_ptr().add(t * sn + col);
                let mut j = 0;
                while j + 4 <= k.n {
                    let r = kp.add(j * st);
                    let (mut a0, mut a1, mut a2, mut a3) = (
                        _mm256_setzero_ps(),
                        _mm256_setzero_ps(),
                        _mm256_setzero_ps(),
                        _mm256_setzero_ps(),
                    );
                    let mut c = 0;
                    while c < d {
                        let qv = _mm256_loadu_ps(qp.add(c));
                        a0 = _mm256_fmadd_ps(qv, ld(r.add(c)), a0);
                        a1 = _mm256_fmadd_ps(qv, ld(r.add(st + c)), a1);
                        a2 = _mm256_fmadd_ps(qv, ld(r.add(2 * st + c)), a2);
                        a3 = _mm256_fmadd_ps(qv, ld(r.add(3 * st + c)), a3);
                        c += 8;
                    }
                    // [a0 a1 a2 a3] sums: pairwise adds within each 128-bit
                    // half, then the two halves
                    let s = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
                    let s = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
                    _mm_storeu_ps(out.add(j), s);
                    j += 4;
                }
                while j < k.n {
                    let r = kp.add(j * st);
                    let mut a = _mm256_setzero_ps();
                    let mut c = 0;
                    while c < d {
                        a = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(c)), ld(r.add(c)), a);
                        c += 8;
                    }
                    *out.add(j) = hsum(a);
                    j += 1;
                }
            }
        }
    }

    /// [`super::pv`] for `d % 8 == 0`, over f32 or f16 rows.
    ///
    /// # Safety
    /// AVX2 + FMA + F16C CPU; bounds as checked by the caller.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn pv<E: 'static>(
        w: &[f32],
        sn: usize,
        col: usize,
        d: usize,
        v: Rows<'_, E>,
        part: &mut [f32],
    ) {
        // SAFETY: every pointer stays inside `part` and the rows of `v` (checked by
        // `super::pv`); the CPU has AVX2 + FMA.
        unsafe {
            let gs = part.len() / (d + 2);
            let vp = v.data.as_ptr().add(v.off);
            let st = v.stride;
            for t in 0..gs {
                let wr = &w[t * sn + col..t * sn + col + v.n];
                let acc = part.as_mut_ptr().add(t * (d + 2) + 2);
                let mut c0 = 0;
                while c0 + 64 <= d {
                    let mut a = [_mm256_setzero_ps(); 8];
                    for (i, ai) in a.iter_mut().enumerate() {
                        *ai = _mm256_loadu_ps(acc.add(c0 + 8 * i));
                    }
                    for (j, &wj) in wr.iter().enumerate() {
                        if wj < 0.0 {
                            continue;
                        }
                        let wv = _mm256_set1_ps(wj);
                        let r = vp.add(j * st + c0);
                        for (i, ai) in a.iter_mut().enumerate() {
                            *ai = _mm256_fmadd_ps(wv, ld(r.add(8 * i)), *ai);
                        }
                    }
                    for (i, ai) in a.iter().enumerate() {
                        _mm256_storeu_ps(acc.add(c0 + 8 * i), *ai);
                    }
                    c0 += 64;
                }
                while c0 < d {
                    let mut a = _mm256_loadu_ps(acc.add(c0));
                    for (j, &wj) in wr.iter().enumerate() {
                        if wj >= 0.0 {
                            let r = vp.add(j * st + c0);
                            a = _mm256_fmadd_ps(_mm256_set1_ps(wj), ld(r), a);
                        }
                    }
                    _mm256_storeu_ps(acc.add(c0), a);
                    c0 += 8;
                }
            }
        }
    }
}
