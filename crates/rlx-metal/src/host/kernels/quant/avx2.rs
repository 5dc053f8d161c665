//! AVX2 + FMA fused block dots for the formats real models use (Q4_0,
//! Q4_1, Q5_0, Q8_0, Q4_K, Q6_K): codes are split with byte-wide integer
//! ops, widened 8 at a time to f32 and multiplied into `x` without going
//! through a decoded buffer. LLVM does not vectorise the portable unpack
//! loops (it fully unrolls them and scalarises the stack buffer), hence
//! the intrinsics.
//!
//! Every function here is `unsafe`: it must only run on a CPU with AVX2 and
//! FMA (the driver checks), and it reads exactly one block of `b` (`BB`
//! bytes) and `BS` elements of `x` through raw pointers, so callers pass
//! slices at least that long (the functions re-check and return `false`
//! otherwise). Each adds `Σ (w − min)·x` into `acc` and the min terms
//! (`b · Σx` per sub-block, from `xs`) into `macc`.

use std::arch::x86_64::*;

use super::{arr, f16_at, kquants::k4_scales};

/// `acc + f32(q) · x[0..8]`.
#[inline(always)]
unsafe fn fma8(q: __m256i, x: *const f32, acc: __m256) -> __m256 {
    // SAFETY: the caller guarantees 8 readable f32 at `x` and AVX2 + FMA.
    unsafe { _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), _mm256_loadu_ps(x), acc) }
}

/// `acc + Σ f32(bytes) · x[0..16]` for 16 signed (`SIGNED`) or unsigned bytes.
#[inline(always)]
unsafe fn fma16<const SIGNED: bool>(v: __m128i, x: *const f32, acc: __m256) -> __m256 {
    // SAFETY: as `fma8`, 16 f32 at `x`.
    unsafe {
        let hi = _mm_srli_si128(v, 8);
        let (a, b) = if SIGNED {
            (_mm256_cvtepi8_epi32(v), _mm256_cvtepi8_epi32(hi))
        } else {
            (_mm256_cvtepu8_epi32(v), _mm256_cvtepu8_epi32(hi))
        };
        fma8(b, x.add(8), fma8(a, x, acc))
    }
}

/// Low and high nibbles of 16 bytes.
#[inline(always)]
unsafe fn split16(qs: &[u8; 16]) -> (__m128i, __m128i) {
    // SAFETY: 16 readable bytes; SSE2 is baseline.
    unsafe {
        let v = _mm_loadu_si128(qs.as_ptr().cast());
        let m = _mm_set1_epi8(0x0F);
        (_mm_and_si128(v, m), _mm_and_si128(_mm_srli_epi16(v, 4), m))
    }
}

/// Q4_0: `d · Σ (q − 8)·x`.
#[inline(always)]
pub(super) unsafe fn q4_0(b: &[u8], x: &[f32], acc: &mut __m256) -> bool {
    if b.len() < 18 || x.len() < 32 {
        return false;
    }
    // SAFETY: lengths checked above; features guaranteed by the caller.
    unsafe {
        let (lo, hi) = split16(arr(b, 2));
        let eight = _mm_set1_epi8(8);
        let z = _mm256_setzero_ps();
        let s = fma16::<true>(_mm_sub_epi8(lo, eight), x.as_ptr(), z);
        let s = fma16::<true>(_mm_sub_epi8(hi, eight), x.as_ptr().add(16), s);
        *acc = _mm256_fmadd_ps(_mm256_set1_ps(f16_at(b, 0)), s, *acc);
    }
    true
}

/// Q4_1: `d · Σ q·x`, min `m · Σx`.
#[inline(always)]
pub(super) unsafe fn q4_1(
    b: &[u8],
    x: &[f32],
    xs: &[f32],
    acc: &mut __m256,
    macc: &mut f32,
) -> bool {
    if b.len() < 20 || x.len() < 32 || xs.is_empty() {
        return false;
    }
    // SAFETY: lengths checked above; features guaranteed by the caller.
    unsafe {
        let (lo, hi) = split16(arr(b, 4));
        let z = _mm256_setzero_ps();
        let s = fma16::<false>(lo, x.as_ptr(), z);
        let s = fma16::<false>(hi, x.as_ptr().add(16), s);
        *acc = _mm256_fmadd_ps(_mm256_set1_ps(f16_at(b, 0)), s, *acc);
    }
    *macc += f16_at(b, 2) * xs[0];
    true
}

/// Q8_0: `d · Σ q·x` (int8 codes at byte `at`).
#[inline(always)]
pub(super) unsafe fn q8(b: &[u8], at: usize, x: &[f32], acc: &mut __m256) -> bool {
    if b.len() < at + 32 || x.len() < 32 {
        return false;
    }
    // SAFETY: lengths checked above; features guaranteed by the caller.
    unsafe {
        let p = b.as_ptr().add(at);
        let v0 = _mm_loadu_si128(p.cast());
        let v1 = _mm_loadu_si128(p.add(16).cast());
        let z = _mm256_setzero_ps();
        let s = fma16::<true>(v0, x.as_ptr(), z);
        let s = fma16::<true>(v1, x.as_ptr().add(16), s);
        *acc = _mm256_fmadd_ps(_mm256_set1_ps(f16_at(b, 0)), s, *acc);
    }
    true
}

/// Eight i32 lanes holding bit `j` of `bits` (lane j) times 16.
#[inline(always)]
unsafe fn fifth_bits(bits: u32) -> __m256i {
    // SAFETY: AVX2 guaranteed by the caller.
    unsafe {
        let sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
        let on = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(bits as i32), sel), sel);
        _mm256_and_si256(on, _mm256_set1_epi32(16))
    }
}

/// Q5_0: `d · Σ (q − 16)·x`, q = nibble | fifth bit.
#[inline(always)]
pub(super) unsafe fn q5_0(b: &[u8], x: &[f32], acc: &mut __m256) -> bool {
    if b.len() < 22 || x.len() < 32 {
        return false;
    }
    let qh = u32::from_le_bytes(*arr(b, 2));
    // SAFETY: lengths checked above; features guaranteed by the caller.
    unsafe {
        let (lo, hi) = split16(arr(b, 6));
        let sixteen = _mm256_set1_epi32(16);
        let mut s = _mm256_setzero_ps();
        for (c, half) in [lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)]
            .into_iter()
            .enumerate()
        {
            let q = _mm256_or_si256(_mm256_cvtepu8_epi32(half), fifth_bits(qh >> (8 * c)));
            s = fma8(_mm256_sub_epi32(q, sixteen), x.as_ptr().add(8 * c), s);
        }
        *acc = _mm256_fmadd_ps(_mm256_set1_ps(f16_at(b, 0)), s, *acc);
    }
    true
}

/// `acc + Σ f32(bytes) · x[0..32]` for 32 unsigned (or signed) bytes.
#[inline(always)]
unsafe fn fma32<const SIGNED: bool>(v: __m256i, x: *const f32, acc: __m256) -> __m256 {
    // SAFETY: as `fma8`, 32 f32 at `x`.
    unsafe {
        let lo = _mm256_castsi256_si128(v);
        let hi = _mm256_extracti128_si256(v, 1);
        fma16::<SIGNED>(hi, x.add(16), fma16::<SIGNED>(lo, x, acc))
    }
}

/// Q4_K: 8 sub-blocks of 32, `d·s_j · Σ q·x − dmin·m_j · Σx`.
#[inline(always)]
pub(super) unsafe fn q4_k(
    b: &[u8],
    x: &[f32],
    xs: &[f32],
    acc: &mut __m256,
    macc: &mut f32,
) -> bool {
    if b.len() < 144 || x.len() < 256 || xs.len() < 8 {
        return false;
    }
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let (s, m) = k4_scales(arr(b, 4));
    for j in 0..8 {
        *macc -= dmin * m[j] * xs[j];
    }
    // SAFETY: lengths checked above; features guaranteed by the caller.
    unsafe {
        let mask = _mm256_set1_epi8(0x0F);
        for c in 0..4 {
            let v = _mm256_loadu_si256(b.as_ptr().add(16 + 32 * c).cast());
            let lo = _mm256_and_si256(v, mask);
            let hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
            let z = _mm256_setzero_ps();
            let xp = x.as_ptr().add(64 * c);
            let sl = fma32::<false>(lo, xp, z);
            let sh = fma32::<false>(hi, xp.add(32), z);
            *acc = _mm256_fmadd_ps(_mm256_set1_ps(d * s[2 * c]), sl, *acc);
            *acc = _mm256_fmadd_ps(_mm256_set1_ps(d * s[2 * c + 1]), sh, *acc);
        }
    }
    true
}

/// Q6_K: 16 sub-blocks of 16 with int8 scales, `d·sc · Σ (q − 32)·x`.
#[inline(always)]
pub(super) unsafe fn q6_k(b: &[u8], x: &[f32], acc: &mut __m256) -> bool {
    if b.len() < 210 || x.len() < 256 {
        return false;
    }
    let d = f16_at(b, 208);
    // SAFETY: lengths checked above; features guaranteed by the caller.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0F);
        let m2 = _mm256_set1_epi8(3);
        let m32 = _mm256_set1_epi8(32);
        for n in 0..2 {
            let qh = _mm256_loadu_si256(b.as_ptr().add(128 + 32 * n).cast());
            for r in 0..4 {
                let ql = _mm256_loadu_si256(b.as_ptr().add(64 * n + 32 * (r & 1)).cast());
                let low = if r < 2 { ql } else { _mm256_srli_epi16(ql, 4) };
                let low = _mm256_and_si256(low, m4);
                let high = match r {
                    0 => qh,
                    1 => _mm256_srli_epi16(qh, 2),
                    2 => _mm256_srli_epi16(qh, 4),
                    _ => _mm256_srli_epi16(qh, 6),
                };
                let high = _mm256_slli_epi16(_mm256_and_si256(high, m2), 4);
                let q = _mm256_sub_epi8(_mm256_or_si256(low, high), m32);
                let xp = x.as_ptr().add(128 * n + 32 * r);
                let z = _mm256_setzero_ps();
                let s0 = fma16::<true>(_mm256_castsi256_si128(q), xp, z);
                let s1 = fma16::<true>(_mm256_extracti128_si256(q, 1), xp.add(16), z);
                let sub = 8 * n + 2 * r;
                let a0 = d * f32::from(b[192 + sub] as i8);
                let a1 = d * f32::from(b[193 + sub] as i8);
                *acc = _mm256_fmadd_ps(_mm256_set1_ps(a0), s0, *acc);
                *acc = _mm256_fmadd_ps(_mm256_set1_ps(a1), s1, *acc);
            }
        }
    }
    true
}

/// Horizontal sum of 8 lanes.
#[inline(always)]
pub(super) unsafe fn hsum8(v: __m256) -> f32 {
    // SAFETY: AVX guaranteed by the caller.
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }
}

/// `Σ x·w` for f32 rows read as bytes: 32 per step, 4 accumulators.
#[inline(always)]
pub(super) unsafe fn f32_row(row: &[u8], x: &[f32]) -> f32 {
    let n = (row.len() / 4).min(x.len());
    let full = n / 32 * 32;
    // SAFETY: every load reads below `full ≤ n` elements of both operands.
    let mut total = unsafe {
        let mut a = [_mm256_setzero_ps(); 4];
        let (wp, xp) = (row.as_ptr().cast::<f32>(), x.as_ptr());
        for i in (0..full).step_by(32) {
            for (t, at) in a.iter_mut().enumerate() {
                let w = _mm256_loadu_ps(wp.add(i + 8 * t));
                *at = _mm256_fmadd_ps(w, _mm256_loadu_ps(xp.add(i + 8 * t)), *at);
            }
        }
        hsum8(_mm256_add_ps(
            _mm256_add_ps(a[0], a[1]),
            _mm256_add_ps(a[2], a[3]),
        ))
    };
    for (c, &xv) in row[full * 4..].chunks_exact(4).zip(&x[full..n]) {
        total += f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * xv;
    }
    total
}
