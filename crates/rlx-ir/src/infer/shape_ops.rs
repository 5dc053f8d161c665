//! Shape inference for the layout family: reshape, transpose, expand,
//! narrow, concat, reverse and the 2× nearest upsample. The indexing ops
//! (gathers and scatters) live in [`index`].
//!
//! Symbolic dims flow through wherever the result can be named without
//! arithmetic on symbols; where it cannot (a concat of two symbolic lengths,
//! doubling a symbolic height) the op is refused rather than guessed.

mod index;

use super::common::*;
use crate::error::{IrError, Result};
use crate::op::Op;
use crate::shape::{dims_string, Dim, Shape};

pub(super) fn infer(op: &Op, inputs: &[&Shape]) -> Result<Shape> {
    match op {
        Op::Reshape { dims } => {
            arity(op, inputs, 1)?;
            reshape(op, inputs[0], dims)
        }
        Op::Transpose { perm } => {
            arity(op, inputs, 1)?;
            let x = inputs[0];
            if perm.len() != x.rank() {
                return Err(IrError::shape(
                    op.name(),
                    format!("perm {perm:?} has {} entries for {x}", perm.len()),
                ));
            }
            let mut seen = vec![false; perm.len()];
            let mut dims = Vec::with_capacity(perm.len());
            for &p in perm {
                match seen.get_mut(p) {
                    Some(s) if !*s => *s = true,
                    _ => {
                        return Err(IrError::shape(
                            op.name(),
                            format!("perm {perm:?} is not a permutation of 0..{}", x.rank()),
                        ))
                    }
                }
                dims.push(x.dim(p).clone());
            }
            Ok(x.with_dims(dims))
        }
        Op::Expand { dims } => {
            arity(op, inputs, 1)?;
            broadcast_to(op, inputs[0], dims, "x")?;
            Ok(inputs[0].with_dims(dims.clone()))
        }
        Op::Narrow { axis, start, len } => {
            arity(op, inputs, 1)?;
            let x = inputs[0];
            let a = x.axis(op.name(), *axis)?;
            if let Some(d) = x.dim(a).as_static() {
                if !matches!(start.checked_add(*len), Some(end) if end <= d) {
                    return Err(IrError::shape(
                        op.name(),
                        format!("range {start}..{start}+{len} exceeds dim {a} of {x}"),
                    ));
                }
            }
            let mut dims = x.dims.clone();
            dims[a] = Dim::Static(*len);
            Ok(x.with_dims(dims))
        }
        Op::Concat { axis } => concat(op, *axis, inputs),
        Op::Reverse { axes } => {
            arity(op, inputs, 1)?;
            let x = inputs[0];
            distinct_axes(op, x, axes)?;
            Ok(x.clone())
        }
        Op::ResizeNearest2x => {
            arity(op, inputs, 1)?;
            let x = inputs[0];
            rank_is(op, x, 4, "x (NCHW)")?;
            let mut dims = x.dims.clone();
            for (i, what) in [(2, "height"), (3, "width")] {
                let d = static_dim(op, x.dim(i), what)?;
                let d2 = d.checked_mul(2).ok_or_else(|| {
                    IrError::shape(op.name(), format!("{what} overflows when doubled: {x}"))
                })?;
                dims[i] = Dim::Static(d2);
            }
            Ok(x.with_dims(dims))
        }
        Op::Gather
        | Op::GatherAxis { .. }
        | Op::ScatterAdd { .. }
        | Op::ScatterNd
        | Op::ScatterElements { .. }
        | Op::GatherNd { .. }
        | Op::GatherElements { .. } => index::infer(op, inputs),
        _ => Err(IrError::Unsupported {
            op: op.name().into(),
            msg: "not a shape op".into(),
        }),
    }
}

/// Reshape: equal element counts when everything is static; with symbols,
/// the symbols must match as a multiset and the static parts' products must
/// agree (an empty tensor on both sides is always fine).
fn reshape(op: &Op, x: &Shape, dims: &[Dim]) -> Result<Shape> {
    let split = |ds: &[Dim]| -> (Option<usize>, Vec<String>) {
        let prod = checked_product(ds.iter().filter_map(Dim::as_static));
        let mut syms: Vec<String> = ds
            .iter()
            .filter_map(|d| match d {
                Dim::Sym(s) => Some(s.clone()),
                Dim::Static(_) => None,
            })
            .collect();
        syms.sort();
        (prod, syms)
    };
    let (p_in, s_in) = split(&x.dims);
    let (p_out, s_out) = split(dims);
    let (Some(p_in), Some(p_out)) = (p_in, p_out) else {
        return Err(IrError::shape(
            op.name(),
            format!("element count overflows: {x} to {}", dims_string(dims)),
        ));
    };
    let both_empty = p_in == 0 && p_out == 0;
    if p_in != p_out || (s_in != s_out && !both_empty) {
        let why = if s_in.is_empty() && s_out.is_empty() {
            format!("{p_in} vs {p_out} elements")
        } else {
            "symbolic dims must match and static products agree".to_string()
        };
        return Err(IrError::shape(
            op.name(),
            format!("cannot reshape {x} to {} ({why})", dims_string(dims)),
        ));
    }
    Ok(x.with_dims(dims.to_vec()))
}

/// Concat: same rank and dtype, dims equal but along `axis`, where lengths
/// add up (they must be static unless there is a single operand).
fn concat(op: &Op, axis: i64, inputs: &[&Shape]) -> Result<Shape> {
    arity_range(op, inputs, 1, usize::MAX)?;
    let first = inputs[0];
    let a = first.axis(op.name(), axis)?;
    let mut total: usize = 0;
    let mut symbolic = false;
    for s in inputs {
        same_dtype(op, first, s)?;
        let fits = s.rank() == first.rank()
            && s.dims
                .iter()
                .zip(&first.dims)
                .enumerate()
                .all(|(i, (d, f))| i == a || d == f);
        if !fits {
            return Err(IrError::shape(
                op.name(),
                format!("operands differ off axis {a}: {first} vs {s}"),
            ));
        }
        match s.dim(a).as_static() {
            Some(n) => {
                total = total
                    .checked_add(n)
                    .ok_or_else(|| IrError::shape(op.name(), "concatenated length overflows"))?
            }
            None => symbolic = true,
        }
    }
    if inputs.len() == 1 {
        return Ok(first.clone());
    }
    if symbolic {
        let lens: Vec<String> = inputs.iter().map(|s| s.dim(a).to_string()).collect();
        return Err(IrError::shape(
            op.name(),
            format!(
                "cannot add symbolic lengths along axis {a}: {}",
                lens.join(" + ")
            ),
        ));
    }
    let mut dims = first.dims.clone();
    dims[a] = Dim::Static(total);
    Ok(first.with_dims(dims))
}

#[cfg(test)]
mod tests;
