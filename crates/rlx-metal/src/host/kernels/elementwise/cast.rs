//! Dtype casts: f32 ↔ f16 ↔ bf16 and general numeric casts between f32,
//! f16, f64, i8, i16, i32, i64, u8, u32 and bool.

use half::{bf16, f16};
use rayon::prelude::*;

use crate::host::kernels::{check_len, Elem, Result, PAR_MIN};

/// Float-to-float cast between `f32`, `f16` and `bf16` (round to nearest
/// even). Needs `dst >= src.len()`.
pub fn cast_float<S: Elem, D: Elem>(src: &[S], dst: &mut [D]) -> Result<()> {
    check_len("cast", "dst", dst.len(), src.len())?;
    let n = src.len();
    dst[..n]
        .par_chunks_mut(PAR_MIN)
        .zip(src.par_chunks(PAR_MIN))
        .for_each(|(d, s)| {
            d.iter_mut()
                .zip(s)
                .for_each(|(d, s)| *d = D::from_f32(s.to_f32()))
        });
    Ok(())
}

/// A boolean element as stored in the arena: one byte, 0 or 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(transparent)]
pub struct Bool(pub u8);

/// Element types of the general numeric cast.
pub trait Numeric: Copy + Send + Sync {
    /// True for integer (and bool) types.
    const IS_INT: bool;
    /// Value as f64 (floats).
    fn to_f64(self) -> f64;
    /// Value as i64 (integers; floats truncate).
    fn to_i64(self) -> i64;
    /// From a float: integers truncate toward zero (saturating, NaN → 0),
    /// bool is `v != 0`.
    fn from_f64(v: f64) -> Self;
    /// From an integer: wrapping for narrower integers, bool is `v != 0`.
    fn from_i64(v: i64) -> Self;
}

macro_rules! numeric_int {
    ($($t:ty),*) => {$(
        impl Numeric for $t {
            const IS_INT: bool = true;
            fn to_f64(self) -> f64 { self as f64 }
            fn to_i64(self) -> i64 { self as i64 }
            fn from_f64(v: f64) -> Self { v as $t }
            fn from_i64(v: i64) -> Self { v as $t }
        }
    )*};
}
numeric_int!(i8, i16, i32, i64, u8, u32);

macro_rules! numeric_float {
    ($($t:ty),*) => {$(
        impl Numeric for $t {
            const IS_INT: bool = false;
            fn to_f64(self) -> f64 { self as f64 }
            fn to_i64(self) -> i64 { self as i64 }
            fn from_f64(v: f64) -> Self { v as $t }
            fn from_i64(v: i64) -> Self { v as $t }
        }
    )*};
}
numeric_float!(f32, f64);

impl Numeric for f16 {
    const IS_INT: bool = false;
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    fn to_i64(self) -> i64 {
        f16::to_f64(self) as i64
    }
    /// Rounds once, to nearest even (numpy's `float64 → float16`).
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
    fn from_i64(v: i64) -> Self {
        f16::from_f64(v as f64)
    }
}

impl Numeric for Bool {
    const IS_INT: bool = true;
    fn to_f64(self) -> f64 {
        (self.0 != 0) as u8 as f64
    }
    fn to_i64(self) -> i64 {
        (self.0 != 0) as i64
    }
    fn from_f64(v: f64) -> Self {
        Bool((v != 0.0) as u8)
    }
    fn from_i64(v: i64) -> Self {
        Bool((v != 0) as u8)
    }
}

/// General numeric cast between `f32`, `f16`, `f64`, `i8`, `i16`, `i32`,
/// `i64`, `u8`, `u32` and [`Bool`]: float → int truncates toward zero, int → int wraps, anything
/// → bool is `!= 0`. Needs `dst >= src.len()`.
pub fn cast_numeric<S: Numeric, D: Numeric>(src: &[S], dst: &mut [D]) -> Result<()> {
    check_len("cast", "dst", dst.len(), src.len())?;
    let n = src.len();
    dst[..n]
        .par_chunks_mut(PAR_MIN)
        .zip(src.par_chunks(PAR_MIN))
        .for_each(|(d, s)| {
            for (d, s) in d.iter_mut().zip(s) {
                *d = if S::IS_INT {
                    D::from_i64(s.to_i64())
                } else {
                    D::from_f64(s.to_f64())
                };
            }
        });
    Ok(())
}

/// Convenience wrappers for the three float casts the thunks name.
pub fn cast_f32_to_f16(src: &[f32], dst: &mut [f16]) -> Result<()> {
    cast_float(src, dst)
}

/// `f16 → f32`.
pub fn cast_f16_to_f32(src: &[f16], dst: &mut [f32]) -> Result<()> {
    cast_float(src, dst)
}

/// `f32 → bf16`.
pub fn cast_f32_to_bf16(src: &[f32], dst: &mut [bf16]) -> Result<()> {
    cast_float(src, dst)
}
