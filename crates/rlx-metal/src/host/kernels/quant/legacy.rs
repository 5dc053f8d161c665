//! The 32-element ggml block formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.
//!
//! Layouts (little-endian, f16 scales):
//! - Q4_0 (18 B): `d`, 16 bytes of nibbles; element `j < 16` is the low
//!   nibble of byte `j`, element `16 + j` its high nibble; `w = d·(q − 8)`.
//! - Q4_1 (20 B): `d`, `m`, 16 nibble bytes; `w = d·q + m`.
//! - Q5_0 (22 B): `d`, 4 bytes of fifth bits (bit `j` ↔ element `j`),
//!   16 nibble bytes; `w = d·(q − 16)`.
//! - Q5_1 (24 B): `d`, `m`, 4 high-bit bytes, 16 nibble bytes; `w = d·q + m`.
//! - Q8_0 (34 B): `d`, 32 int8; `w = d·q`.
//! - Q8_1 (36 B): `d`, `s` (a sum used by ggml's dot products only), 32
//!   int8; `w = d·q`.

use super::{arr, f16_at, Block, MAX_BS, MAX_SUB};
#[cfg(target_arch = "x86_64")]
use {super::avx2, std::arch::x86_64::__m256};

/// Splits 16 nibble bytes into 32 codes minus `bias`, scaled by `d`:
/// low nibbles first, then high nibbles.
#[inline(always)]
fn nibbles(qs: &[u8; 16], d: f32, bias: f32, w: &mut [f32; MAX_BS]) {
    let (lo, hi) = w[..32].split_at_mut(16);
    for ((l, h), &b) in lo.iter_mut().zip(hi.iter_mut()).zip(qs) {
        *l = d * (f32::from(b & 0x0F) - bias);
        *h = d * (f32::from(b >> 4) - bias);
    }
}

/// As [`nibbles`] with a fifth bit per element from the 32-bit mask `qh`.
#[inline(always)]
fn nibbles5(qs: &[u8; 16], qh: u32, d: f32, bias: f32, w: &mut [f32; MAX_BS]) {
    let (lo, hi) = w[..32].split_at_mut(16);
    for (j, ((l, h), &b)) in lo.iter_mut().zip(hi.iter_mut()).zip(qs).enumerate() {
        let bl = ((qh >> j) & 1) << 4;
        let bh = ((qh >> (j + 16)) & 1) << 4;
        *l = d * ((u32::from(b & 0x0F) | bl) as f32 - bias);
        *h = d * ((u32::from(b >> 4) | bh) as f32 - bias);
    }
}

/// 32 int8 codes scaled by `d`.
#[inline(always)]
fn int8s(qs: &[u8; 32], d: f32, w: &mut [f32; MAX_BS]) {
    for (o, &b) in w[..32].iter_mut().zip(qs) {
        *o = d * f32::from(b as i8);
    }
}

/// Q4_0 blocks.
pub(crate) struct Q4_0;
/// Q4_1 blocks.
pub(crate) struct Q4_1;
/// Q5_0 blocks.
pub(crate) struct Q5_0;
/// Q5_1 blocks.
pub(crate) struct Q5_1;
/// Q8_0 blocks.
pub(crate) struct Q8_0;
/// Q8_1 blocks.
pub(crate) struct Q8_1;

impl Block for Q4_0 {
    const BS: usize = 32;
    const BB: usize = 18;
    const SUB: usize = 32;
    const HAS_MIN: bool = false;
    #[inline(always)]
    fn unpack(b: &[u8], w: &mut [f32; MAX_BS], _mins: &mut [f32; MAX_SUB]) {
        nibbles(arr(b, 2), f16_at(b, 0), 8.0, w);
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn dot_avx2(b: &[u8], x: &[f32], xs: &[f32], acc: &mut __m256, macc: &mut f32) -> bool {
        let _ = (&xs, &macc);
        // SAFETY: forwarded from the caller (AVX2 + FMA present).
        unsafe { avx2::q4_0(b, x, acc) }
    }
}

impl Block for Q4_1 {
    const BS: usize = 32;
    const BB: usize = 20;
    const SUB: usize = 32;
    const HAS_MIN: bool = true;
    #[inline(always)]
    fn unpack(b: &[u8], w: &mut [f32; MAX_BS], mins: &mut [f32; MAX_SUB]) {
        nibbles(arr(b, 4), f16_at(b, 0), 0.0, w);
        mins[0] = f16_at(b, 2);
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn dot_avx2(b: &[u8], x: &[f32], xs: &[f32], acc: &mut __m256, macc: &mut f32) -> bool {
        let _ = (&xs, &macc);
        // SAFETY: forwarded from the caller (AVX2 + FMA present).
        unsafe { avx2::q4_1(b, x, xs, acc, macc) }
    }
}

impl Block for Q5_0 {
    const BS: usize = 32;
    const BB: usize = 22;
    const SUB: usize = 32;
    const HAS_MIN: bool = false;
    #[inline(always)]
    fn unpack(b: &[u8], w: &mut [f32; MAX_BS], _mins: &mut [f32; MAX_SUB]) {
        let qh = u32::from_le_bytes(*arr(b, 2));
        nibbles5(arr(b, 6), qh, f16_at(b, 0), 16.0, w);
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn dot_avx2(b: &[u8], x: &[f32], xs: &[f32], acc: &mut __m256, macc: &mut f32) -> bool {
        let _ = (&xs, &macc);
        // SAFETY: forwarded from the caller (AVX2 + FMA present).
        unsafe { avx2::q5_0(b, x, acc) }
    }
}

impl Block for Q5_1 {
    const BS: usize = 32;
    const BB: usize = 24;
    const SUB: usize = 32;
    const HAS_MIN: bool = true;
    #[inline(always)]
    fn unpack(b: &[u8], w: &mut [f32; MAX_BS], mins: &mut [f32; MAX_SUB]) {
        let qh = u32::from_le_bytes(*arr(b, 4));
        nibbles5(arr(b, 8), qh, f16_at(b, 0), 0.0, w);
        mins[0] = f16_at(b, 2);
    }
}

impl Block for Q8_0 {
    const BS: usize = 32;
    const BB: usize = 34;
    const SUB: usize = 32;
    const HAS_MIN: bool = false;
    #[inline(always)]
    fn unpack(b: &[u8], w: &mut [f32; MAX_BS], _mins: &mut [f32; MAX_SUB]) {
        int8s(arr(b, 2), f16_at(b, 0), w);
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn dot_avx2(b: &[u8], x: &[f32], xs: &[f32], acc: &mut __m256, macc: &mut f32) -> bool {
        let _ = (&xs, &macc);
        // SAFETY: forwarded from the caller (AVX2 + FMA present).
        unsafe { avx2::q8(b, 2, x, acc) }
    }
}

impl Block for Q8_1 {
    const BS: usize = 32;
    const BB: usize = 36;
    const SUB: usize = 32;
    const HAS_MIN: bool = false;
    #[inline(always)]
    fn unpack(b: &[u8], w: &mut [f32; MAX_BS], _mins: &mut [f32; MAX_SUB]) {
        int8s(arr(b, 4), f16_at(b, 0), w);
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn dot_avx2(b: &[u8], x: &[f32], xs: &[f32], acc: &mut __m256, macc: &mut f32) -> bool {
        let _ = (&xs, &macc);
        // SAFETY: forwarded from the caller (AVX2 + FMA present).
        unsafe { avx2::q8(b, 4, x, acc) }
    }
}
