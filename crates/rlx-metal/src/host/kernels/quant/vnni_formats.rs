//! The weight formats of the integer-dot kernels ([`super`]): each GGUF
//! type as runs of 32 codes with per-half affine scales ([`VFmt`]), and the
//! byte-level unpacking helpers they share.

#![allow(clippy::incompatible_msrv)]

use std::arch::x86_64::*;

/// f16 at `p` (unaligned) widened with F16C.
#[inline(always)]
unsafe fn h2f(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees 2 readable bytes and F16C.
    unsafe {
        let bits = i32::from(p.cast::<u16>().read_unaligned());
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)))
    }
}

/// 16 bytes at `p` as 32 nibble codes: low nibbles (elements 0..16) then
/// high nibbles (16..32).
#[inline(always)]
unsafe fn nib32(p: *const u8) -> __m256i {
    // SAFETY: 16 readable bytes at `p`; AVX2 present.
    unsafe {
        let v = _mm_loadu_si128(p.cast());
        let both = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
        _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
    }
}

/// `16` in each byte whose bit is set in the 32-bit mask at `p`.
#[inline(always)]
unsafe fn bit5(p: *const u8) -> __m256i {
    // SAFETY: 4 readable bytes at `p`; AVX-512 BW + VL present.
    unsafe {
        let m = p.cast::<u32>().read_unaligned();
        _mm256_maskz_set1_epi8(m, 16)
    }
}

/// A weight format as runs of 32 unsigned codes with per-half affine
/// scales (see the module docs).
pub(crate) trait VFmt: 'static {
    /// Bytes per block.
    const BB: usize;
    /// Runs of 32 elements per block (1 or 8).
    const RUNS: usize;
    /// Whether both halves of every run share `a` and `c`.
    const UNIFORM: bool;
    /// Whether the codes are signed bytes with no offset (`c = 0`): then
    /// the dot runs as `|q| · (sign(q)·qx)`, which is exact for
    /// `q ∈ −128..=127`, and no `c · Σqx` term is needed.
    const SIGNED: bool = false;
    /// Writes the half scales `a[..2·RUNS]` and offsets `c[..2·RUNS]` of the
    /// block at `p` (only the even entries when `UNIFORM`).
    ///
    /// # Safety
    /// `BB` readable bytes at `p`; AVX-512 F/BW/VL, F16C present.
    unsafe fn scales(p: *const u8, a: &mut [f32; 16], c: &mut [f32; 16]);
    /// The codes of run `r` of the block at `p`.
    ///
    /// # Safety
    /// As [`VFmt::scales`], and `r < RUNS`.
    unsafe fn codes(p: *const u8, r: usize) -> __m256i;
}

/// Q4_0: signed codes `q − 8`, `w = d·(q − 8)`.
pub(crate) struct VQ4_0;
/// Q4_1: `w = d·q + m`.
pub(crate) struct VQ4_1;
/// Q5_0: signed codes `q − 16`.
pub(crate) struct VQ5_0;
/// Q5_1: `w = d·q + m`.
pub(crate) struct VQ5_1;
/// Q8_0: the int8 codes as they are, `w = d·q`.
pub(crate) struct VQ8_0;
/// Q2_K: `w = d·sc·q − dmin·m` per half.
pub(crate) struct VQ2K;
/// Q3_K: signed codes `low − 4·(1 − high)`, `w = d·sc·q`.
pub(crate) struct VQ3K;
/// Q4_K: `w = d·sc·q − dmin·m` per run.
pub(crate) struct VQ4K;
/// Q5_K: as Q4_K with a fifth bit.
pub(crate) struct VQ5K;
/// Q6_K: signed codes `q − 32`, `w = d·sc·q` per half.
pub(crate) struct VQ6K;

impl VFmt for VQ4_0 {
    const SIGNED: bool = true;
    const BB: usize = 18;
    const RUNS: usize = 1;
    const UNIFORM: bool = true;
    #[inline(always)]
    unsafe fn scales(p: *const u8, a: &mut [f32; 16], c: &mut [f32; 16]) {
        // SAFETY: forwarded.
        (a[0], c[0]) = (unsafe { h2f(p) }, 0.0);
    }
    #[inline(always)]
    unsafe fn codes(p: *const u8, _r: usize) -> __m256i {
        // SAFETY: forwarded.
        unsafe { _mm256_sub_epi8(nib32(p.add(2)), _mm256_set1_epi8(8)) }
    }
}

impl VFmt for VQ4_1 {
    const BB: usize = 20;
    const RUNS: usize = 1;
    const UNIFORM: bool = true;
    #[inline(always)]
    unsafe fn scales(p: *const u8, a: &mut [f32; 16], c: &mut [f32; 16]) {
        // SAFETY: forwarded.
        unsafe { (a[0], c[0]) = (h2f(p), h2f(p.add(2))) };
    }
    #[inline(always)]
    unsafe fn codes(p: *const u8, _r: usize) -> __m256i {
        // SAFETY: forwarded.
        unsafe { nib32(p.add(4)) }
    }
}

impl VFmt for VQ5_0 {
    const SIGNED: bool = true;
    const BB: usize = 22;
    const RUNS: usize = 1;
    const UNIFORM: bool = true;
    #[inline(always)]
    unsafe fn scales(p: *const u8, a: &mut [f32; 16], c: &mut [f32; 16]) {
        // SAFETY: forwarded.
        (a[0], c[0]) = (unsafe { h2f(p) }, 0.0);
    }
    #[inline(always)]
    unsafe fn codes(p: *const u8, _r: usize) -> __m256i {
        // SAFETY: forwarded.
        unsafe {
            let q = _mm256_or_si256(nib32(p.add(6)), bit5(p.add(2)));
            _mm256_sub_epi8(q, _mm256_set1_epi8(16))
        }
    }
}

impl VFmt for VQ5_1 {
    const BB: usize = 24;
    const RUNS: usize = 1;
    const UNIFORM: bool = true;
    #[inline(always)]
    unsafe fn scales(p: *const u8, a: &mut [f32; 16], c: &mut [f32; 16]) {
        // SAFETY: forwarded.
        unsafe { (a[0], c[0]) = (h2f(p), h2f(p.add(2))) };
    }
    #[inline(always)]
    unsafe fn codes(p: *const u8, _r: usize) -> __m256i {
        // SAFETY: forwarded.
        unsafe { _mm256_or_si256(nib32(p.add(8)), bit5(p.add(4))) }
    }
}

impl VFmt for VQ8_0 {
    const SIGNED: bool = true;
    const BB: usize = 34;
    const RUNS: usize = 1;
    const UNIFORM: bool = true;
    #[inline(always)]
    unsafe fn scales(p: *const u8, a: &mut [f32; 16], c: &mut [f32; 16]) {
        // SAFETY: forwarded.
        (a[0], c[0]) = (unsafe { h2f(p) }, 0.0);
    }
    #[inline(always)]
    unsafe fn codes(p: *const u8, _r: usize) -> __m256i {
        // SAFETY: forwarded (32 code bytes after the scale).
        unsafe { _mm256_loadu_si256(p.add(2).cast()) }
    }
}

/// Two-bit codes of run `r` (`n = r / 4`, `j = r % 4`) from `qs` at `p`.
#[inline(always)]
unsafe fn two_bits(p: *const u8, r: usize) -> __m256i {
    // SAFETY: 64 readable bytes at `p`; AVX2 present.
    unsafe {
        let v = _mm256_loadu_si256(p.add(32 * (r / 4)).cast());
        let sh = _mm_cvtsi32_si128(2 * (r % 4) as i32);
        _mm256_and_si256(_mm256_srl_epi16(v, sh), _mm256_set1_epi8(3))
    }
}

impl VFmt for VQ2K {
    const BB: usize = 84;
    const RUNS: usize = 8;
    const UNIFORM: bool = false;
    #[inline(always)]
    unsafe fn scales(p: *const u8, a: &mut [f32; 16], c: &mut [f32; 16]) {
        // SAFETY: forwarded.
        let (d, dmin) = unsafe { (h2f(p.add(80)), h2f(p.add(82))) };
        for h in 0..16 {
            // SAFETY: h < 16 ≤ BB.
            let sc = unsafe { *p.add(h) };
            a[h] = d * f32::from(sc & 0x0F);
            c[h] = -dmin * f32::from(sc >> 4);
        }
    }
    #[inline(always)]
    unsafe fn codes(p: *const u8, r: usize) -> __m256i {
        // SAFETY: forwarded.
        unsafe { two_bits(p.add(16), r) }
    }
}

impl VFmt for VQ3K {
    const BB: usize = 110;
    const RUNS: usize = 8;
    const UNIFORM: bool = false;
    const SIGNED: bool = true;
    #[inline(always)]
    unsafe fn scales(p: *const u8, a: &mut [f32; 16], c: &mut [f32; 16]) {
        // SAFETY: forwarded.
        let (sc, d) = unsafe { (&*p.add(96).cast::<[u8; 12]>(), h2f(p.add(108))) };
        for h in 0..16 {
            let low = if h < 8 { sc[h] & 0x0F } else { sc[h - 8] >> 4 };
            let high = (sc[8 + h % 4] >> (2 * (h / 4))) & 3;
            let s = d * (f32::from(low | (high << 4)) - 32.0);
            (a[h], c[h]) = (s, 0.0);
        }
    }
    #[inline(always)]
    unsafe fn codes(p: *const u8, r: usize) -> __m256i {
        // SAFETY: forwarded (hmask at 0, qs at 32).
        unsafe {
            let low = two_bits(p.add(32), r);
            let hm = _mm256_loadu_si256(p.cast());
            let bit = _mm256_set1_epi8(1 << r);
            let on = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
            _mm256_sub_epi8(low, _mm256_andnot_si256(on, _mm256_set1_epi8(4)))
        }
    }
}

/// Q4_K / Q5_K scales: run `r` has `a = d·s_r`, `c = −dmin·m_r`.
#[inline(always)]
unsafe fn k4_scales(p: *const u8, a: &mut [f32; 16], c: &mut [f32; 16]) {
    // SAFETY: 16 readable bytes at `p`; F16C present.
    let (d, dmin, sc) = unsafe { (h2f(p), h2f(p.add(2)), &*p.add(4).cast::<[u8; 12]>()) };
    let (s, m) = super::super::kquants::k4_scales(sc);
    for r in 0..8 {
        a[2 * r] = d * s[r];
        c[2 * r] = -dmin * m[r];
    }
}

/// Nibbles of run `r` (`r / 2` selects 32 bytes, `r % 2` the nibble).
#[inline(always)]
unsafe fn k4_nibbles(qs: *const u8, r: usize) -> __m256i {
    // SAFETY: 128 readable bytes at `qs`; AVX2 present.
    unsafe {
        let v = _mm256_loadu_si256(qs.add(32 * (r / 2)).cast());
        let v = if r.is_multiple_of(2) {
            v
        } else {
            _mm256_srli_epi16(v, 4)
        };
        _mm256_and_si256(v, _mm256_set1_epi8(0x0F))
    }
}

impl VFmt for VQ4K {
    const BB: usize = 144;
    const RUNS: usize = 8;
    const UNIFORM: bool = true;
    #[inline(always)]
    unsafe fn scales(p: *const u8, a: &mut [f32; 16], c: &mut [f32; 16]) {
        // SAFETY: forwarded.
        unsafe { k4_scales(p, a, c) }
    }
    #[inline(always)]
    unsafe fn codes(p: *const u8, r: usize) -> __m256i {
        // SAFETY: forwarded.
        unsafe { k4_nibbles(p.add(16), r) }
    }
}

impl VFmt for VQ5K {
    const BB: usize = 176;
    const RUNS: usize = 8;
    const UNIFORM: bool = true;
    #[inline(always)]
    unsafe fn scales(p: *const u8, a: &mut [f32; 16], c: &mut [f32; 16]) {
        // SAFETY: forwarded.
        unsafe { k4_scales(p, a, c) }
    }
    #[inline(always)]
    unsafe fn codes(p: *const u8, r: usize) -> __m256i {
        // SAFETY: forwarded (qh at 16, qs at 48).
        unsafe {
            let qh = _mm256_loadu_si256(p.add(16).cast());
            let bit = _mm256_set1_epi8(1 << r);
            let on = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
            _mm256_or_si256(
                k4_nibbles(p.add(48), r),
                _mm256_and_si256(on, _mm256_set1_epi8(16)),
            )
        }
    }
}

impl VFmt for VQ6K {
    const BB: usize = 210;
    const RUNS: usize = 8;
    const UNIFORM: bool = false;
    const SIGNED: bool = true;
    #[inline(always)]
    unsafe fn scales(p: *const u8, a: &mut [f32; 16], c: &mut [f32; 16]) {
        // SAFETY: forwarded (int8 scales at 192, d at 208).
        let d = unsafe { h2f(p.add(208)) };
        for h in 0..16 {
            // SAFETY: 192 + h < BB.
            let s = d * f32::from(unsafe { *p.add(192 + h) } as i8);
            (a[h], c[h]) = (s, 0.0);
        }
    }
    #[inline(always)]
    unsafe fn codes(p: *const u8, r: usize) -> __m256i {
        // SAFETY: forwarded (ql at 0, qh at 128).
        unsafe {
            let (n, rr) = (r / 4, r % 4);
            let ql = _mm256_loadu_si256(p.add(64 * n + 32 * (rr & 1)).cast());
            let low = if rr < 2 { ql } else { _mm256_srli_epi16(ql, 4) };
            let low = _mm256_and_si256(low, _mm256_set1_epi8(0x0F));
            let qh = _mm256_loadu_si256(p.add(128 + 32 * n).cast());
            let high = _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * rr as i32));
            let high = _mm256_slli_epi16(_mm256_and_si256(high, _mm256_set1_epi8(3)), 4);
            _mm256_sub_epi8(_mm256_or_si256(low, high), _mm256_set1_epi8(32))
        }
    }
}
