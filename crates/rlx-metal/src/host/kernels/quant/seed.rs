//! The seed's own 128-element formats (not in ggml): Q1_0 and Q2_0.
//!
//! - Q1_0 (18 B): f16 `d`, 16 bytes of sign bits; element `i` reads bit
//!   `i % 8` of byte `i / 8` (LSB first): `+d` when set, `−d` when clear.
//! - Q2_0 (34 B): f16 `d`, 32 bytes of 2-bit codes, four per byte, low bits
//!   first (element `i` is bits `2·(i % 4)` of byte `i / 4`);
//!   `w = d·(code − 1.5)`.

use super::{arr, f16_at, Block, MAX_BS, MAX_SUB};

/// Q1_0 blocks.
pub(crate) struct Q1_0;
/// Q2_0 blocks.
pub(crate) struct Q2_0;

impl Block for Q1_0 {
    const BS: usize = 128;
    const BB: usize = 18;
    const SUB: usize = 128;
    const HAS_MIN: bool = false;
    #[inline(always)]
    fn unpack(b: &[u8], w: &mut [f32; MAX_BS], _mins: &mut [f32; MAX_SUB]) {
        let d = f16_at(b, 0);
        let bits: &[u8; 16] = arr(b, 2);
        for (o, &byte) in w[..128].chunks_exact_mut(8).zip(bits) {
            for (t, v) in o.iter_mut().enumerate() {
                *v = if (byte >> t) & 1 == 1 { d } else { -d };
            }
        }
    }
}

impl Block for Q2_0 {
    const BS: usize = 128;
    const BB: usize = 34;
    const SUB: usize = 128;
    const HAS_MIN: bool = false;
    #[inline(always)]
    fn unpack(b: &[u8], w: &mut [f32; MAX_BS], _mins: &mut [f32; MAX_SUB]) {
        let d = f16_at(b, 0);
        let codes: &[u8; 32] = arr(b, 2);
        for (o, &byte) in w[..128].chunks_exact_mut(4).zip(codes) {
            for (t, v) in o.iter_mut().enumerate() {
                *v = d * (f32::from((byte >> (2 * t)) & 3) - 1.5);
            }
        }
    }
}
