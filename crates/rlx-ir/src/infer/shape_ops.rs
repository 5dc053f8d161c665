//! Shape inference for the shape_ops family (placeholder until filled in).

use crate::error::{IrError, Result};
use crate::op::Op;
use crate::shape::Shape;

pub(super) fn infer(op: &Op, _inputs: &[&Shape]) -> Result<Shape> {
    Err(IrError::Unsupported {
        op: op.name().into(),
        msg: "shape inference not written yet".into(),
    })
}
