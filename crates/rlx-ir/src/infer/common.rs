//! Checks shared by the family modules.

use crate::dtype::DType;
use crate::error::{IrError, Result};
use crate::shape::{Dim, Shape};

/// Fail unless exactly `n` operands were given.
pub fn arity(op: &Op, inputs: &[&Shape], n: usize) -> Result<()> {
    if inputs.len() != n {
        return Err(IrError::Arity {
            op: op.name().to_string(),
            expected: n.to_string(),
            got: inputs.len(),
        });
    }
    Ok(())
}

/// Fail unless the operand count lies in `lo..=hi`.
pub fn arity_range(op: &Op, inputs: &[&Shape], lo: usize, hi: usize) -> Result<()> {
    if inputs.len() < lo || inputs.len() > hi {
        let expected = if hi == usize::MAX {
            format!("at least {lo}")
        } else {
            format!("{lo} to {hi}")
        };
        return Err(IrError::Arity {
            op: op.name().to_string(),
            expected,
            got: inputs.len(),
        });
    }
    Ok(())
}

/// Fail unless `s` has rank `r`; `what` names the operand.
pub fn rank_is(op: &Op, s: &Shape, r: usize, what: &str) -> Result<()> {
    if s.rank() != r {
        return Err(IrError::shape(
            op.name(),
            format!("{what} must have rank {r}, got {s}"),
        ));
    }
    Ok(())
}

/// Fail unless `s` has rank ≥ `r`.
pub fn rank_at_least(op: &Op, s: &Shape, r: usize, what: &str) -> Result<()> {
    if s.rank() < r {
        return Err(IrError::shape(
            op.name(),
            format!("{what} must have rank >= {r}, got {s}"),
        ));
    }
    Ok(())
}

/// Fail unless `s` is a floating-point dtype.
pub fn float_dtype(op: &Op, s: &Shape, what: &str) -> Result<()> {
    if !s.dtype.is_float() {
        return Err(IrError::dtype(
            op.name(),
            format!("{what} must be a float dtype, got {s}"),
        ));
    }
    Ok(())
}

/// Fail unless `s` is an integer dtype.
pub fn int_dtype(op: &Op, s: &Shape, what: &str) -> Result<()> {
    if !s.dtype.is_int() {
        return Err(IrError::dtype(
            op.name(),
            format!("{what} must be an integer dtype, got {s}"),
        ));
    }
    Ok(())
}

/// Fail unless `a` and `b` have the same dtype.
pub fn same_dtype(op: &Op, a: &Shape, b: &Shape) -> Result<()> {
    if a.dtype != b.dtype {
        return Err(IrError::dtype(
            op.name(),
            format!("dtypes differ: {a} vs {b}"),
        ));
    }
    Ok(())
}

/// Fail unless dims `a` and `b` are equal (symbols must match by name).
pub fn dims_equal(op: &Op, a: &Dim, b: &Dim, what: &str) -> Result<()> {
    if a != b {
        return Err(IrError::shape(op.name(), format!("{what}: {a} vs {b}")));
    }
    Ok(())
}

/// The static value of `d`, or an error naming `what`.
pub fn static_dim(op: &Op, d: &Dim, what: &str) -> Result<usize> {
    d.as_static().ok_or_else(|| {
        IrError::shape(
            op.name(),
            format!("{what} must be a static size, got symbol '{d}'"),
        )
    })
}

/// All dims of `s` static, or an error naming `what`.
pub fn static_dims(op: &Op, s: &Shape, what: &str) -> Result<Vec<usize>> {
    s.static_dims()
        .ok_or_else(|| IrError::shape(op.name(), format!("{what} must have static dims, got {s}")))
}

/// Shorthand: a shape from static dims.
pub fn shape_of(dims: &[usize], dtype: DType) -> Shape {
    Shape::of(dims, dtype)
}

use crate::op::Op;
