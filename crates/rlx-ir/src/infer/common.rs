//! Checks shared by the family modules.

use crate::dtype::DType;
use crate::error::{IrError, Result};
use crate::op::Op;
use crate::quant::ScaleLayout;
use crate::shape::{dims_string, Dim, Shape};

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

/// Fail unless `s` has exactly the dims `dims`; `what` names the operand.
pub fn expect_dims(op: &Op, s: &Shape, dims: &[Dim], what: &str) -> Result<()> {
    if s.dims != dims {
        return Err(IrError::shape(
            op.name(),
            format!("{what} must be {}, got {s}", dims_string(dims)),
        ));
    }
    Ok(())
}

/// Fail unless `s` is the vector `[len]` (a gamma, beta or bias).
pub fn expect_vector(op: &Op, s: &Shape, len: &Dim, what: &str) -> Result<()> {
    expect_dims(op, s, std::slice::from_ref(len), what)
}

/// Fail unless `s` broadcasts to `target` under numpy `broadcast_to` rules:
/// rank no larger, and each trailing-aligned dim equal or the static size 1.
pub fn broadcast_to(op: &Op, s: &Shape, target: &[Dim], what: &str) -> Result<()> {
    let fits = s.rank() <= target.len()
        && s.dims
            .iter()
            .rev()
            .zip(target.iter().rev())
            .all(|(d, t)| d == t || d.is_one());
    if !fits {
        return Err(IrError::shape(
            op.name(),
            format!("{what} {s} does not broadcast to {}", dims_string(target)),
        ));
    }
    Ok(())
}

/// Numpy broadcast of all operands' dims (error names the op and the shapes).
pub fn broadcast_shapes(op: &Op, shapes: &[&Shape]) -> Result<Vec<Dim>> {
    crate::shape::broadcast_all(op.name(), shapes)
}

/// The promotion of all operands' dtypes (`DType::promote` folded left).
/// `shapes` must not be empty; an empty list gives `f32`.
pub fn promote_all(shapes: &[&Shape]) -> DType {
    let mut it = shapes.iter().map(|s| s.dtype);
    let first = it.next().unwrap_or(DType::F32);
    it.fold(first, DType::promote)
}

/// Fail unless `s` is an integer or float dtype (no bool, no complex).
pub fn numeric_dtype(op: &Op, s: &Shape, what: &str) -> Result<()> {
    if !(s.dtype.is_int() || s.dtype.is_float()) {
        return Err(IrError::dtype(
            op.name(),
            format!("{what} must be an integer or float dtype, got {s}"),
        ));
    }
    Ok(())
}

/// Fail for complex dtypes, which have no ordering (max, argmax, top-k...).
pub fn ordered_dtype(op: &Op, s: &Shape, what: &str) -> Result<()> {
    if s.dtype.is_complex() {
        return Err(IrError::dtype(
            op.name(),
            format!("{what} must have an ordered dtype, got complex {s}"),
        ));
    }
    Ok(())
}

/// Fail unless `s` has dtype `dt` exactly.
pub fn dtype_is(op: &Op, s: &Shape, dt: DType, what: &str) -> Result<()> {
    if s.dtype != dt {
        return Err(IrError::dtype(
            op.name(),
            format!("{what} must be {dt}, got {s}"),
        ));
    }
    Ok(())
}

/// Fail unless the epsilon attribute is finite and positive.
pub fn positive_eps(op: &Op, eps: f32) -> Result<()> {
    if !(eps.is_finite() && eps > 0.0) {
        return Err(IrError::attr(
            op.name(),
            format!("eps must be finite and > 0, got {eps}"),
        ));
    }
    Ok(())
}

/// Fail when a size attribute is zero.
pub fn nonzero_attr(op: &Op, v: usize, what: &str) -> Result<()> {
    if v == 0 {
        return Err(IrError::attr(op.name(), format!("{what} must be > 0")));
    }
    Ok(())
}

/// `a * b` for attribute sizes, failing (instead of wrapping) on overflow.
pub fn mul_attr(op: &Op, a: usize, b: usize, what: &str) -> Result<usize> {
    a.checked_mul(b)
        .ok_or_else(|| IrError::attr(op.name(), format!("{what} overflows: {a} * {b}")))
}

/// Product of static dims with overflow checking; `None` on overflow.
pub fn checked_product(dims: impl IntoIterator<Item = usize>) -> Option<usize> {
    dims.into_iter()
        .try_fold(1usize, |acc, d| acc.checked_mul(d))
}

/// The scale-tensor dims of `layout` for a `[rows, cols]` operand, symbol
/// aware: `PerTensor` needs nothing static, `PerRow` carries `rows` through
/// (static or symbolic), `Block` needs a static `cols`. A zero block size is
/// an attribute error.
pub fn scale_dims(op: &Op, layout: ScaleLayout, rows: &Dim, cols: &Dim) -> Result<Vec<Dim>> {
    Ok(match layout {
        ScaleLayout::PerTensor => vec![Dim::Static(1)],
        ScaleLayout::PerRow => vec![rows.clone()],
        ScaleLayout::Block { size } => {
            if size == 0 {
                return Err(IrError::attr(op.name(), "scale block size must be > 0"));
            }
            let c = static_dim(op, cols, "columns of a block-scaled operand")?;
            vec![rows.clone(), Dim::Static(c.div_ceil(size as usize))]
        }
    })
}

/// Normalise `axes` against `x`, rejecting out-of-range and repeated axes.
pub fn distinct_axes(op: &Op, x: &Shape, axes: &[i64]) -> Result<Vec<usize>> {
    let mut out: Vec<usize> = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = x.axis(op.name(), a)?;
        if out.contains(&n) {
            return Err(IrError::shape(
                op.name(),
                format!("axis {a} repeated in {axes:?} for {x}"),
            ));
        }
        out.push(n);
    }
    Ok(out)
}

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

/// Helpers for the family modules' unit tests: shapes from strings like
/// `"f32[2, seq, 8]"` and assertions on inference results.
#[cfg(test)]
pub(crate) mod testutil {
    use super::super::infer_shape;
    use crate::dtype::DType;
    use crate::error::IrError;
    use crate::op::Op;
    use crate::shape::{Dim, Shape};

    /// Parse `"f32[2, seq]"` (numbers are static dims, words are symbols).
    pub fn sh(spec: &str) -> Shape {
        let (dt, rest) = spec.split_once('[').expect("shape spec needs '['");
        let body = rest.strip_suffix(']').expect("shape spec needs ']'");
        let dims = body
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| match t.parse::<usize>() {
                Ok(n) => Dim::Static(n),
                Err(_) => Dim::Sym(t.to_string()),
            })
            .collect();
        Shape::new(dims, DType::parse(dt).expect("dtype"))
    }

    fn run(op: &Op, ins: &[&str]) -> Result<Shape, IrError> {
        let shapes: Vec<Shape> = ins.iter().map(|s| sh(s)).collect();
        let refs: Vec<&Shape> = shapes.iter().collect();
        infer_shape(op, &refs)
    }

    /// Assert inference succeeds with result `want` (a shape spec).
    pub fn ok(op: &Op, ins: &[&str], want: &str) {
        match run(op, ins) {
            Ok(s) => assert_eq!(s, sh(want), "{} on {ins:?}", op.name()),
            Err(e) => panic!("{} on {ins:?} failed: {e}", op.name()),
        }
    }

    /// Assert inference fails with a message that starts with `[<op>]` and
    /// contains `needle`; returns the error.
    pub fn err(op: &Op, ins: &[&str], needle: &str) -> IrError {
        match run(op, ins) {
            Ok(s) => panic!("{} on {ins:?} should fail, gave {s}", op.name()),
            Err(e) => {
                let m = e.to_string();
                let prefix = format!("[{}] ", op.name());
                assert!(m.starts_with(&prefix), "{m:?} should start with {prefix:?}");
                assert!(m.contains(needle), "{m:?} should contain {needle:?}");
                e
            }
        }
    }
}
