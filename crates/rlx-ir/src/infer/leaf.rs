//! Leaves carry their own shape; constants are checked against their values.

use super::common::arity;
use crate::error::{IrError, Result};
use crate::op::Op;
use crate::shape::Shape;

pub(super) fn infer(op: &Op, inputs: &[&Shape]) -> Result<Shape> {
    arity(op, inputs, 0)?;
    match op {
        Op::Input { shape } | Op::Param { shape } | Op::State { shape } => Ok(shape.clone()),
        Op::Constant { shape, values } => {
            let dims = shape.static_dims().ok_or_else(|| {
                IrError::shape(
                    "constant",
                    format!("constant shape must be static, got {shape}"),
                )
            })?;
            let n = dims
                .iter()
                .try_fold(1usize, |acc, &d| acc.checked_mul(d))
                .filter(|n| n.checked_mul(shape.dtype.size_bytes()).is_some())
                .ok_or_else(|| {
                    IrError::shape(
                        "constant",
                        format!("{shape} has more elements than memory can address"),
                    )
                })?;
            if values.len() != 1 && values.len() != n {
                return Err(IrError::shape(
                    "constant",
                    format!(
                        "{} values for shape {shape} ({n} elements); give 1 or {n}",
                        values.len()
                    ),
                ));
            }
            Ok(shape.clone())
        }
        _ => Err(IrError::Unsupported {
            op: op.name().into(),
            msg: "not a leaf".into(),
        }),
    }
}
