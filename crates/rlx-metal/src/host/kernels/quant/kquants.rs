//! The 256-element "k-quant" super-block formats: Q2_K, Q3_K, Q4_K, Q5_K,
//! Q6_K, Q8_K.
//!
//! Each block is split into sub-blocks of 16 or 32 elements with their own
//! scale (and for Q2_K / Q4_K / Q5_K a min); `unpack` folds the super-block
//! scale into the sub-block scale (`a = d·sc`, `b = −dmin·m`) exactly as the
//! reference does, then `w = a·q` per element and `b` per sub-block.
//!
//! Layouts (little-endian, f16 `d` / `dmin` unless stated), with element
//! `e` of the block:
//! - Q2_K (84 B): scales\[16] (low nibble scale, high nibble min), qs\[64],
//!   d, dmin. `e = 128n + 32j + l`: `q = (qs[32n + l] >> 2j) & 3`, sub-block
//!   `e / 16`.
//! - Q3_K (110 B): hmask\[32], qs\[64], scales\[12] (16 packed 6-bit signed
//!   scales, minus 32), d. Low bits as Q2_K; `q −= 4` unless bit `4n + j`
//!   of `hmask[l]` is set.
//! - Q4_K (144 B): d, dmin, scales\[12] (8 packed 6-bit scale/min pairs),
//!   qs\[128]. `e = 64c + 32h + l`: nibble `h` of `qs[32c + l]`, pair
//!   `2c + h`.
//! - Q5_K (176 B): as Q4_K with qh\[32] before qs: fifth bit is bit `2c + h`
//!   of `qh[l]`.
//! - Q6_K (210 B): ql\[128], qh\[64], int8 scales\[16], d. `e = 128n + 32r +
//!   l`: nibble `r >> 1` of `ql[64n + 32(r & 1) + l]`, high bits
//!   `(qh[32n + l] >> 2r) & 3`, `q − 32`, sub-block `e / 16`.
//! - Q8_K (292 B): f32 d, int8 qs\[256], int16 bsums\[16] (unused here).

use super::{arr, f16_at, Block, MAX_BS, MAX_SUB};
#[cfg(target_arch = "x86_64")]
use {super::avx2, std::arch::x86_64::__m256};

/// Q2_K blocks.
pub(crate) struct Q2K;
/// Q3_K blocks.
pub(crate) struct Q3K;
/// Q4_K blocks.
pub(crate) struct Q4K;
/// Q5_K blocks.
pub(crate) struct Q5K;
/// Q6_K blocks.
pub(crate) struct Q6K;
/// Q8_K blocks.
pub(crate) struct Q8K;

/// Writes 32 elements `w[e0..e0 + 32]` from 32 two-bit codes shifted by
/// `shift`, with scale `a0` for the first 16 and `a1` for the second 16,
/// minus `off[l]` (Q3_K's high-bit offset; zeros for Q2_K).
#[inline(always)]
fn two_bit_run(qs: &[u8; 32], shift: u32, a: [f32; 2], off: &[f32; 32], w: &mut [f32]) {
    for (l, (o, (&b, &f))) in w[..32].iter_mut().zip(qs.iter().zip(off)).enumerate() {
        let q = f32::from((b >> shift) & 3) - f;
        *o = a[l / 16] * q;
    }
}

impl Block for Q2K {
    const BS: usize = 256;
    const BB: usize = 84;
    const SUB: usize = 16;
    const HAS_MIN: bool = true;
    #[inline(always)]
    fn unpack(b: &[u8], w: &mut [f32; MAX_BS], mins: &mut [f32; MAX_SUB]) {
        let sc: &[u8; 16] = arr(b, 0);
        let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
        for (s, m) in sc.iter().zip(mins.iter_mut()) {
            *m = -(dmin * f32::from(s >> 4));
        }
        const ZERO: [f32; 32] = [0.0; 32];
        for n in 0..2 {
            let qs: &[u8; 32] = arr(b, 16 + 32 * n);
            for j in 0..4 {
                let sub = 8 * n + 2 * j;
                let a = [
                    d * f32::from(sc[sub] & 0x0F),
                    d * f32::from(sc[sub + 1] & 0x0F),
                ];
                let e0 = 128 * n + 32 * j;
                two_bit_run(qs, 2 * j as u32, a, &ZERO, &mut w[e0..e0 + 32]);
            }
        }
    }
}

/// Q3_K's 16 signed scales from their 12-byte packing.
#[inline(always)]
fn q3k_scales(sc: &[u8; 12]) -> [f32; 16] {
    let mut out = [0f32; 16];
    for (i, o) in out.iter_mut().enumerate() {
        let low = if i < 8 { sc[i] & 0x0F } else { sc[i - 8] >> 4 };
        let high = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
        *o = f32::from(low | (high << 4)) - 32.0;
    }
    out
}

impl Block for Q3K {
    const BS: usize = 256;
    const BB: usize = 110;
    const SUB: usize = 16;
    const HAS_MIN: bool = false;
    #[inline(always)]
    fn unpack(b: &[u8], w: &mut [f32; MAX_BS], _mins: &mut [f32; MAX_SUB]) {
        let hm: &[u8; 32] = arr(b, 0);
        let scales = q3k_scales(arr(b, 96));
        let d = f16_at(b, 108);
        for n in 0..2 {
            let qs: &[u8; 32] = arr(b, 32 + 32 * n);
            for j in 0..4 {
                let bit = 4 * n + j;
                let mut off = [0f32; 32];
                for (o, &h) in off.iter_mut().zip(hm) {
                    *o = if (h >> bit) & 1 == 1 { 0.0 } else { 4.0 };
                }
                let sub = 8 * n + 2 * j;
                let a = [d * scales[sub], d * scales[sub + 1]];
                let e0 = 128 * n + 32 * j;
                two_bit_run(qs, 2 * j as u32, a, &off, &mut w[e0..e0 + 32]);
            }
        }
    }
}

/// Q4_K / Q5_K's 8 (scale, min) pairs from their 12-byte packing.
#[inline(always)]
pub(crate) fn k4_scales(sc: &[u8; 12]) -> ([f32; 8], [f32; 8]) {
    let (mut s, mut m) = ([0f32; 8], [0f32; 8]);
    for j in 0..8 {
        let (sv, mv) = if j < 4 {
            (sc[j] & 63, sc[j + 4] & 63)
        } else {
            (
                (sc[j + 4] & 0x0F) | ((sc[j - 4] >> 6) << 4),
                (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4),
            )
        };
        s[j] = f32::from(sv);
        m[j] = f32::from(mv);
    }
    (s, m)
}

/// Shared Q4_K / Q5_K body; `qh` is the fifth-bit plane (Q5_K) or `None`.
#[inline(always)]
fn k4_unpack(
    b: &[u8],
    qs_at: usize,
    qh: Option<&[u8; 32]>,
    w: &mut [f32; MAX_BS],
    mins: &mut [f32; MAX_SUB],
) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let (s, m) = k4_scales(arr(b, 4));
    for (j, mn) in mins[..8].iter_mut().enumerate() {
        *mn = -(dmin * m[j]);
    }
    for c in 0..4 {
        let qs: &[u8; 32] = arr(b, qs_at + 32 * c);
        let (a_lo, a_hi) = (d * s[2 * c], d * s[2 * c + 1]);
        let (lo, hi) = w[64 * c..64 * c + 64].split_at_mut(32);
        match qh {
            None => {
                for ((l, h), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(qs) {
                    *l = a_lo * f32::from(q & 0x0F);
                    *h = a_hi * f32::from(q >> 4);
                }
            }
            Some(qh) => {
                let (bl, bh) = (2 * c, 2 * c + 1);
                for (((l, h), &q), &hb) in lo.iter_mut().zip(hi.iter_mut()).zip(qs).zip(qh) {
                    *l = a_lo * f32::from((q & 0x0F) | (((hb >> bl) & 1) << 4));
                    *h = a_hi * f32::from((q >> 4) | (((hb >> bh) & 1) << 4));
                }
            }
        }
    }
}

impl Block for Q4K {
    const BS: usize = 256;
    const BB: usize = 144;
    const SUB: usize = 32;
    const HAS_MIN: bool = true;
    #[inline(always)]
    fn unpack(b: &[u8], w: &mut [f32; MAX_BS], mins: &mut [f32; MAX_SUB]) {
        k4_unpack(b, 16, None, w, mins);
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn dot_avx2(b: &[u8], x: &[f32], xs: &[f32], acc: &mut __m256, macc: &mut f32) -> bool {
        let _ = (&xs, &macc);
        // SAFETY: forwarded from the caller (AVX2 + FMA present).
        unsafe { avx2::q4_k(b, x, xs, acc, macc) }
    }
}

impl Block for Q5K {
    const BS: usize = 256;
    const BB: usize = 176;
    const SUB: usize = 32;
    const HAS_MIN: bool = true;
    #[inline(always)]
    fn unpack(b: &[u8], w: &mut [f32; MAX_BS], mins: &mut [f32; MAX_SUB]) {
        k4_unpack(b, 48, Some(arr(b, 16)), w, mins);
    }
}

impl Block for Q6K {
    const BS: usize = 256;
    const BB: usize = 210;
    const SUB: usize = 16;
    const HAS_MIN: bool = false;
    #[inline(always)]
    fn unpack(b: &[u8], w: &mut [f32; MAX_BS], _mins: &mut [f32; MAX_SUB]) {
        let sc: &[u8; 16] = arr(b, 192);
        let d = f16_at(b, 208);
        for n in 0..2 {
            let qh: &[u8; 32] = arr(b, 128 + 32 * n);
            for r in 0..4 {
                let ql: &[u8; 32] = arr(b, 64 * n + 32 * (r & 1));
                let nib = 4 * (r >> 1) as u32;
                let sub = 8 * n + 2 * r;
                let a = [
                    d * f32::from(sc[sub] as i8),
                    d * f32::from(sc[sub + 1] as i8),
                ];
                let e0 = 128 * n + 32 * r;
                let out = &mut w[e0..e0 + 32];
                for (l, (o, (&lb, &hb))) in out.iter_mut().zip(ql.iter().zip(qh)).enumerate() {
                    let q = ((lb >> nib) & 0x0F) | (((hb >> (2 * r)) & 3) << 4);
                    *o = a[l / 16] * (f32::from(q) - 32.0);
                }
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn dot_avx2(b: &[u8], x: &[f32], xs: &[f32], acc: &mut __m256, macc: &mut f32) -> bool {
        let _ = (&xs, &macc);
        // SAFETY: forwarded from the caller (AVX2 + FMA present).
        unsafe { avx2::q6_k(b, x, acc) }
    }
}

impl Block for Q8K {
    const BS: usize = 256;
    const BB: usize = 292;
    const SUB: usize = 256;
    const HAS_MIN: bool = false;
    #[inline(always)]
    fn unpack(b: &[u8], w: &mut [f32; MAX_BS], _mins: &mut [f32; MAX_SUB]) {
        let d = f32::from_le_bytes(*arr(b, 0));
        let qs: &[u8; 256] = arr(b, 4);
        for (o, &q) in w.iter_mut().zip(qs) {
            *o = d * f32::from(q as i8);
        }
    }
}
