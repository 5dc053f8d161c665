//! Shape-inference tests for the conv, sequence, signal, misc and backward
//! families: accepted cases check the inferred shape, rejected cases check
//! that the message starts with `[<op name>]` and names the problem.

mod backward;
mod conv;
mod misc;
mod robust;
mod sequence;
mod signal;

use rlx_ir::infer::infer_shape;
use rlx_ir::{DType, Dim, Op, Shape};

/// A static f32 shape.
pub fn f32s(dims: &[usize]) -> Shape {
    Shape::of(dims, DType::F32)
}

/// A shape of `dtype` from mixed dims: numbers are static, strings symbols.
pub fn shp(dims: &[Dim], dtype: DType) -> Shape {
    Shape::new(dims.to_vec(), dtype)
}

/// A symbolic dim.
pub fn sym(name: &str) -> Dim {
    Dim::from(name)
}

/// A static dim.
pub fn st(n: usize) -> Dim {
    Dim::Static(n)
}

/// Inference that must succeed.
pub fn ok(op: &Op, inputs: &[Shape]) -> Shape {
    let refs: Vec<&Shape> = inputs.iter().collect();
    infer_shape(op, &refs).unwrap_or_else(|e| panic!("{} rejected: {e}", op.name()))
}

/// Inference that must fail with a message starting with `[<op>]` and
/// containing `needle`.
pub fn err(op: &Op, inputs: &[Shape], needle: &str) {
    let refs: Vec<&Shape> = inputs.iter().collect();
    let e = match infer_shape(op, &refs) {
        Ok(s) => panic!(
            "{} accepted {inputs:?} as {s}; expected '{needle}'",
            op.name()
        ),
        Err(e) => e.to_string(),
    };
    let tag = format!("[{}]", op.name());
    assert!(e.starts_with(&tag), "'{e}' does not start with {tag}");
    assert!(e.contains(needle), "'{e}' does not mention '{needle}'");
}
