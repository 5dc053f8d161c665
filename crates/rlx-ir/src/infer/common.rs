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

// ------------------------------------------------------------------------
// Helpers added for the conv / sequence / signal / misc / backward families.

/// The error for an op handed to a family module it does not belong to
/// (a dispatch bug, never a user error, but reported rather than panicking).
pub fn wrong_family(op: &Op, family: &str) -> IrError {
    IrError::Unsupported {
        op: op.name().to_string(),
        msg: format!("not an op of the {family} family"),
    }
}

/// Fail unless `d` is the static size `n`.
pub fn dim_is(op: &Op, d: &Dim, n: usize, what: &str) -> Result<()> {
    if d.as_static() != Some(n) {
        return Err(IrError::shape(
            op.name(),
            format!("{what} must be {n}, got {d}"),
        ));
    }
    Ok(())
}

/// Fail unless `a` and `b` have equal dims and dtype; `what` names the pair.
pub fn same_shape(op: &Op, a: &Shape, b: &Shape, what: &str) -> Result<()> {
    if a != b {
        return Err(IrError::shape(op.name(), format!("{what}: {a} vs {b}")));
    }
    Ok(())
}

/// `a · b` on dims: the static product, or the other dim when one side is the
/// static size 1. A product involving a symbol and any other size cannot be
/// written as a [`Dim`] and is refused.
pub fn dim_mul(op: &Op, a: &Dim, b: &Dim, what: &str) -> Result<Dim> {
    match (a, b) {
        (Dim::Static(x), Dim::Static(y)) => x
            .checked_mul(*y)
            .map(Dim::Static)
            .ok_or_else(|| IrError::shape(op.name(), format!("{what}: {x} * {y} overflows"))),
        (d, o) | (o, d) if o.is_one() => Ok(d.clone()),
        _ => Err(IrError::shape(
            op.name(),
            format!("{what}: cannot multiply {a} by {b} (a product with a symbol must be static)"),
        )),
    }
}

/// `a · b` on sizes, or an error naming `what` on overflow.
pub fn checked_mul(op: &Op, a: usize, b: usize, what: &str) -> Result<usize> {
    a.checked_mul(b)
        .ok_or_else(|| IrError::shape(op.name(), format!("{what}: {a} * {b} overflows")))
}

/// Fail unless every entry of a per-axis attribute is at least 1.
pub fn all_positive(op: &Op, v: &[usize], what: &str) -> Result<()> {
    if v.contains(&0) {
        return Err(IrError::attr(
            op.name(),
            format!("{what} must be >= 1 on every axis, got {v:?}"),
        ));
    }
    Ok(())
}

/// Fail unless the scalar attribute `v` is at least 1.
pub fn positive(op: &Op, v: usize, what: &str) -> Result<()> {
    if v == 0 {
        return Err(IrError::attr(
            op.name(),
            format!("{what} must be >= 1, got 0"),
        ));
    }
    Ok(())
}

/// Fail unless the float attribute `v` is finite.
pub fn finite(op: &Op, v: f32, what: &str) -> Result<()> {
    if !v.is_finite() {
        return Err(IrError::attr(
            op.name(),
            format!("{what} must be finite, got {v}"),
        ));
    }
    Ok(())
}
