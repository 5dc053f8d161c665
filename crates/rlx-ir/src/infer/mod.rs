//! Shape inference: one module per op family. Each family's `infer` checks
//! arity, dtypes, attributes and shapes of its ops, and returns the result
//! shape or an error naming the op and the shapes at fault.

mod attention;
mod backward;
mod common;
mod conv;
mod elementwise;
mod leaf;
mod matmul;
mod misc;
mod norm;
mod reduce;
mod sequence;
mod shape_ops;
mod signal;

pub use common::*;

use crate::error::Result;
use crate::op::{Op, OpFamily};
use crate::shape::Shape;

/// Infer the result shape of `op` applied to operands of shapes `inputs`.
pub fn infer_shape(op: &Op, inputs: &[&Shape]) -> Result<Shape> {
    match op.family() {
        OpFamily::Leaf => leaf::infer(op, inputs),
        OpFamily::Elementwise => elementwise::infer(op, inputs),
        OpFamily::MatMul => matmul::infer(op, inputs),
        OpFamily::Norm => norm::infer(op, inputs),
        OpFamily::Attention => attention::infer(op, inputs),
        OpFamily::Shape => shape_ops::infer(op, inputs),
        OpFamily::Reduce => reduce::infer(op, inputs),
        OpFamily::Conv => conv::infer(op, inputs),
        OpFamily::Sequence => sequence::infer(op, inputs),
        OpFamily::Signal => signal::infer(op, inputs),
        OpFamily::Misc => misc::infer(op, inputs),
        OpFamily::Backward => backward::infer(op, inputs),
    }
}
