//! Native kernel library of the host executor.
//!
//! Every function here is a pure, safe Rust kernel over slices: it knows
//! dims, slices and scalars, never thunks, byte offsets or Python. The host
//! executor decodes a thunk, carves typed slices out of the arena and calls
//! one of these.
//!
//! Conventions shared by all families:
//! - Operands are row-major and dense unless a stride argument says
//!   otherwise. Each function documents the minimum length of every slice;
//!   longer slices are accepted and only their prefix is used. A violated
//!   precondition returns [`KernelError`] instead of panicking.
//! - Floating kernels are generic over [`Elem`] (`f32`, `f16`, `bf16`):
//!   values are widened to `f32` on load and narrowed on store, so the
//!   arithmetic is always `f32` (the `f32` instantiation compiles to plain
//!   loads and stores). Data-movement kernels are generic over any `Copy`.
//! - Parallel loops use rayon's global pool; small problems stay on the
//!   calling thread (see [`PAR_MIN`]).

use half::{bf16, f16};
use thiserror::Error;

pub mod attention;
pub mod backward;
pub mod backward_attn;
pub mod backward_conv;
pub mod conv;
pub mod elementwise;
pub mod indexing;
pub mod matmul;
pub mod misc;
pub mod norm;
pub mod quant;
pub mod reduce;
pub mod sequence;
pub mod sequence_gdn;
pub mod sequence_rnn;
pub mod sequence_step;
pub mod shape;
pub mod signal;
pub mod spd;
pub mod splat;
pub mod splat_backward;

/// Errors from kernel precondition checks. Messages start with the kernel
/// name in brackets.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum KernelError {
    /// A slice is shorter than the dims require.
    #[error("[{kernel}] {operand} has {got} elements, needs at least {need}")]
    Length {
        /// Kernel name.
        kernel: &'static str,
        /// Operand name.
        operand: &'static str,
        /// Required element count.
        need: usize,
        /// Actual element count.
        got: usize,
    },
    /// An index operand points outside its axis.
    #[error("[{kernel}] {operand} index {index} out of range 0..{bound}")]
    Index {
        /// Kernel name.
        kernel: &'static str,
        /// Operand name.
        operand: &'static str,
        /// Offending index.
        index: i64,
        /// Exclusive upper bound.
        bound: usize,
    },
    /// Inconsistent dims or scalar arguments.
    #[error("[{kernel}] {msg}")]
    Invalid {
        /// Kernel name.
        kernel: &'static str,
        /// What is wrong.
        msg: String,
    },
}

/// Kernel result.
pub type Result<T> = std::result::Result<T, KernelError>;

/// Minimum number of elements of work before a kernel splits across
/// threads; below it rayon's scheduling costs more than it saves.
pub const PAR_MIN: usize = 1 << 15;

/// Checks `got >= need` for operand `operand` of `kernel`.
#[inline]
pub(crate) fn check_len(
    kernel: &'static str,
    operand: &'static str,
    got: usize,
    need: usize,
) -> Result<()> {
    if got < need {
        Err(KernelError::Length {
            kernel,
            operand,
            need,
            got,
        })
    } else {
        Ok(())
    }
}

/// Builds an [`KernelError::Invalid`].
pub(crate) fn invalid(kernel: &'static str, msg: impl Into<String>) -> KernelError {
    KernelError::Invalid {
        kernel,
        msg: msg.into(),
    }
}

/// Product of `dims`, failing on overflow.
pub(crate) fn numel(kernel: &'static str, dims: &[usize]) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| invalid(kernel, format!("element count of {dims:?} overflows")))
}

/// The element count of `dims` (failing on overflow), after checking
/// that every `(name, len)` operand in `ops` holds that many elements.
pub(crate) fn check_dense(
    kernel: &'static str,
    dims: &[usize],
    ops: &[(&'static str, usize)],
) -> Result<usize> {
    let total = numel(kernel, dims)?;
    for &(name, len) in ops {
        check_len(kernel, name, len, total)?;
    }
    Ok(total)
}

/// Rows per parallel task so that each task has about [`PAR_MIN`]
/// elements (at least one row); `usize::MAX`-like when work is tiny so the
/// loop runs as a single task.
#[inline]
pub(crate) fn rows_per_task(rows: usize, row_len: usize) -> usize {
    let row_len = row_len.max(1);
    if rows.saturating_mul(row_len) < PAR_MIN {
        rows.max(1)
    } else {
        (PAR_MIN / row_len).max(1)
    }
}

/// A floating element type stored in the arena: computed in `f32`.
pub trait Elem: Copy + Send + Sync + Default + PartialEq + std::fmt::Debug + 'static {
    /// Widens to `f32`.
    fn to_f32(self) -> f32;
    /// Narrows from `f32` (round to nearest even).
    fn from_f32(v: f32) -> Self;
}

impl Elem for f32 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v
    }
}

impl Elem for f16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
}

impl Elem for bf16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    //! Deterministic test data and comparison helpers.

    use super::Elem;

    /// Deterministic pseudo-random values in `[-1, 1)` (xorshift).
    pub fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// Converts to element type `T`.
    pub fn to<T: Elem>(v: &[f32]) -> Vec<T> {
        v.iter().map(|&x| T::from_f32(x)).collect()
    }

    /// Converts back to `f32`.
    pub fn back<T: Elem>(v: &[T]) -> Vec<f32> {
        v.iter().map(|x| x.to_f32()).collect()
    }

    /// Asserts `|a - b| <= tol · max(1, |b|)` elementwise, NaN matching NaN.
    #[track_caller]
    pub fn assert_close(a: &[f32], b: &[f32], tol: f32) {
        assert_eq!(a.len(), b.len(), "length mismatch");
        for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
            if x.is_nan() && y.is_nan() {
                continue;
            }
            if x == y {
                continue;
            }
            let err = (x - y).abs();
            assert!(
                err <= tol * y.abs().max(1.0),
                "mismatch at {i}: got {x}, want {y} (tol {tol})"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_name_the_kernel() {
        let e = check_len("matmul", "a", 3, 4).unwrap_err();
        assert_eq!(e.to_string(), "[matmul] a has 3 elements, needs at least 4");
        assert!(numel("x", &[usize::MAX, 2]).is_err());
        assert_eq!(numel("x", &[3, 0, 7]).unwrap(), 0);
    }

    #[test]
    fn elem_round_trip() {
        assert_eq!(<f16 as Elem>::from_f32(1.5).to_f32(), 1.5);
        assert_eq!(<bf16 as Elem>::from_f32(-2.0).to_f32(), -2.0);
        assert!(<f16 as Elem>::from_f32(f32::NAN).to_f32().is_nan());
    }
}
