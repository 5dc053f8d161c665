//! Unquantised weight rows: F32, F16 and BF16 (little-endian), any `k`.
//!
//! Rows are read from bytes (the weights buffer gives no alignment promise
//! for these types) in runs of 32 elements widened into a stack buffer.

use super::{dot_acc, RowFmt};
use half::f16;

/// f32 rows.
pub(crate) struct F32Row;
/// f16 rows.
pub(crate) struct F16Row;
/// bf16 rows.
pub(crate) struct Bf16Row;

/// Element width and widening of one float row format.
trait Widen {
    const SIZE: usize;
    fn widen(b: &[u8], out: &mut [f32]);
}

impl Widen for F32Row {
    const SIZE: usize = 4;
    #[inline(always)]
    fn widen(b: &[u8], out: &mut [f32]) {
        for (o, c) in out.iter_mut().zip(b.chunks_exact(4)) {
            *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
    }
}

impl Widen for F16Row {
    const SIZE: usize = 2;
    #[inline(always)]
    fn widen(b: &[u8], out: &mut [f32]) {
        for (o, c) in out.iter_mut().zip(b.chunks_exact(2)) {
            *o = f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
        }
    }
}

impl Widen for Bf16Row {
    const SIZE: usize = 2;
    #[inline(always)]
    fn widen(b: &[u8], out: &mut [f32]) {
        for (o, c) in out.iter_mut().zip(b.chunks_exact(2)) {
            *o = f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16);
        }
    }
}

/// `Σ widen(row)·x` over `min(row elements, x.len())` elements.
#[inline(always)]
fn dot_float<W: Widen>(row: &[u8], x: &[f32]) -> f32 {
    let mut acc = [[0f32; 8]; 4];
    let mut buf = [0f32; 32];
    let full = (row.len() / W::SIZE).min(x.len()) / 32 * 32;
    let (xb, xt) = x.split_at(full);
    let (rb, rt) = row.split_at(full * W::SIZE);
    for (r, xc) in rb.chunks_exact(32 * W::SIZE).zip(xb.chunks_exact(32)) {
        W::widen(r, &mut buf);
        dot_acc(&mut acc, &buf, xc);
    }
    let mut tail = 0f32;
    for (r, &xv) in rt.chunks_exact(W::SIZE).zip(xt) {
        let mut one = [0f32; 1];
        W::widen(r, &mut one);
        tail += one[0] * xv;
    }
    super::hsum(&acc) + tail
}

macro_rules! float_row {
    ($t:ty, avx2) => {
        float_row!($t, {
            #[cfg(target_arch = "x86_64")]
            #[inline(always)]
            unsafe fn dot_row_avx2(row: &[u8], x: &[f32], _xsum: &[f32]) -> f32 {
                // SAFETY: forwarded from the caller (AVX2 + FMA present).
                unsafe { super::avx2::f32_row(row, x) }
            }
        });
    };
    ($t:ty) => {
        float_row!($t, {});
    };
    ($t:ty, { $($extra:item)* }) => {
        impl RowFmt for $t {
            const SUB: usize = 0;
            #[inline(always)]
            fn dot_row(row: &[u8], x: &[f32], _xsum: &[f32]) -> f32 {
                dot_float::<$t>(row, x)
            }
            #[inline(always)]
            fn decode_row(row: &[u8], out: &mut [f32]) {
                <$t as Widen>::widen(row, out);
            }
            $($extra)*
        }
    };
}

float_row!(F32Row, avx2);
float_row!(F16Row);
float_row!(Bf16Row);
