//! Shape inference for the reduction family: reductions over axes, softmax,
//! softmax cross-entropy, cumulative sums, top-k, arg-max/min and sampling.
//! Index-producing ops (top-k, arg-max/min, sample) return `i32`.

use super::common::*;
use crate::dtype::DType;
use crate::error::{IrError, Result};
use crate::op::{Op, ReduceOp};
use crate::shape::{Dim, Shape};

pub(super) fn infer(op: &Op, inputs: &[&Shape]) -> Result<Shape> {
    match op {
        Op::Reduce {
            kind,
            axes,
            keep_dims,
        } => {
            arity(op, inputs, 1)?;
            let x = inputs[0];
            match kind {
                ReduceOp::Mean if !x.dtype.is_inexact() => {
                    return Err(IrError::dtype(
                        op.name(),
                        format!("mean needs a float input, got {x}"),
                    ))
                }
                ReduceOp::Max | ReduceOp::Min => ordered_dtype(op, x, "x")?,
                _ => {}
            }
            let mut reduced = vec![axes.is_empty(); x.rank()];
            for a in distinct_axes(op, x, axes)? {
                reduced[a] = true;
            }
            let dims = x
                .dims
                .iter()
                .zip(&reduced)
                .filter_map(|(d, &r)| match (r, keep_dims) {
                    (false, _) => Some(d.clone()),
                    (true, true) => Some(Dim::Static(1)),
                    (true, false) => None,
                })
                .collect();
            Ok(x.with_dims(dims))
        }
        Op::Softmax { axis } => {
            arity(op, inputs, 1)?;
            let x = inputs[0];
            x.axis(op.name(), *axis)?;
            float_dtype(op, x, "x")?;
            Ok(x.clone())
        }
        Op::SoftmaxCrossEntropy => {
            arity(op, inputs, 2)?;
            let (logits, labels) = (inputs[0], inputs[1]);
            rank_is(op, logits, 2, "logits")?;
            float_dtype(op, logits, "logits")?;
            let n = logits.dim(0);
            if labels.dtype.is_int() {
                expect_vector(op, labels, n, "integer labels")?;
            } else if labels.dtype.is_float() {
                expect_dims(op, labels, &logits.dims, "soft targets")?;
            } else {
                return Err(IrError::dtype(
                    op.name(),
                    format!("labels must be integer class ids or float targets, got {labels}"),
                ));
            }
            Ok(Shape::new(vec![n.clone()], DType::F32))
        }
        Op::Cumsum { axis, .. } => {
            arity(op, inputs, 1)?;
            let x = inputs[0];
            x.axis(op.name(), *axis)?;
            if x.dtype == DType::Bool {
                return Err(IrError::dtype(
                    op.name(),
                    format!("x must be numeric, got {x}"),
                ));
            }
            Ok(x.clone())
        }
        Op::TopK { k, axis } => {
            arity(op, inputs, 1)?;
            let x = inputs[0];
            let a = x.axis(op.name(), *axis)?;
            ordered_dtype(op, x, "x")?;
            nonzero_attr(op, *k, "k")?;
            if let Some(d) = x.dim(a).as_static() {
                if *k > d {
                    return Err(IrError::shape(
                        op.name(),
                        format!("k = {k} exceeds dim {a} of {x}"),
                    ));
                }
            }
            let mut dims = x.dims.clone();
            dims[a] = Dim::Static(*k);
            Ok(Shape::new(dims, DType::I32))
        }
        Op::ArgMax { axis, keep_dims } | Op::ArgMin { axis, keep_dims } => {
            arity(op, inputs, 1)?;
            let x = inputs[0];
            let a = x.axis(op.name(), *axis)?;
            ordered_dtype(op, x, "x")?;
            let mut dims = x.dims.clone();
            if *keep_dims {
                dims[a] = Dim::Static(1);
            } else {
                dims.remove(a);
            }
            Ok(Shape::new(dims, DType::I32))
        }
        Op::Sample {
            temperature, top_p, ..
        } => {
            if !(temperature.is_finite() && *temperature >= 0.0) {
                return Err(IrError::attr(
                    op.name(),
                    format!("temperature must be finite and >= 0, got {temperature}"),
                ));
            }
            if !(*top_p > 0.0 && *top_p <= 1.0) {
                return Err(IrError::attr(
                    op.name(),
                    format!("top_p must be in (0, 1], got {top_p}"),
                ));
            }
            arity(op, inputs, 1)?;
            let logits = inputs[0];
            rank_is(op, logits, 2, "logits")?;
            float_dtype(op, logits, "logits")?;
            Ok(Shape::new(vec![logits.dim(0).clone()], DType::I32))
        }
        _ => Err(IrError::Unsupported {
            op: op.name().into(),
            msg: "not a reduction op".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::{err, ok};
    use super::*;

    fn red(kind: ReduceOp, axes: &[i64], keep_dims: bool) -> Op {
        Op::Reduce {
            kind,
            axes: axes.to_vec(),
            keep_dims,
        }
    }

    #[test]
    fn reduce() {
        use ReduceOp::*;
        ok(&red(Sum, &[], false), &["f32[2, s, 4]"], "f32[]");
        ok(&red(Sum, &[], true), &["f32[2, s, 4]"], "f32[1, 1, 1]");
        ok(&red(Max, &[-1, 0], false), &["i32[2, s, 4]"], "i32[s]");
        ok(&red(Mean, &[1], true), &["f16[2, s, 4]"], "f16[2, 1, 4]");
        ok(&red(Prod, &[], false), &["f32[]"], "f32[]");
        err(&red(Sum, &[1, -2], false), &["f32[2, s, 4]"], "repeated");
        err(
            &red(Sum, &[3], false),
            &["f32[2, s, 4]"],
            "axis 3 out of range for rank 3",
        );
        err(
            &red(Sum, &[0], false),
            &["f32[]"],
            "out of range for rank 0",
        );
        err(&red(Mean, &[0], false), &["i32[4]"], "mean needs a float");
        err(&red(Min, &[0], false), &["c64[4]"], "ordered");
        err(&red(Sum, &[0], false), &["f32[4]", "f32[4]"], "expects 1");
    }

    #[test]
    fn softmax_and_cross_entropy() {
        let sm = |axis| Op::Softmax { axis };
        ok(&sm(-1), &["f16[b, 8]"], "f16[b, 8]");
        err(&sm(2), &["f16[b, 8]"], "axis 2 out of range");
        err(&sm(0), &["i32[b, 8]"], "float");
        let ce = Op::SoftmaxCrossEntropy;
        ok(&ce, &["f16[n, 10]", "i64[n]"], "f32[n]");
        ok(&ce, &["f32[n, 10]", "f32[n, 10]"], "f32[n]");
        err(&ce, &["f32[n, 10]", "i64[m]"], "integer labels must be [n]");
        err(
            &ce,
            &["f32[n, 10]", "f32[n, 9]"],
            "soft targets must be [n, 10]",
        );
        err(&ce, &["f32[n, 10]", "bool[n]"], "labels must be");
        err(&ce, &["f32[10]", "i32[1]"], "rank 2");
        err(&ce, &["f32[n, 10]"], "expects 2");
    }

    #[test]
    fn cumsum_topk_arg() {
        let cs = |axis| Op::Cumsum {
            axis,
            exclusive: false,
        };
        ok(&cs(-1), &["i64[s, 3]"], "i64[s, 3]");
        err(&cs(-3), &["i64[s, 3]"], "axis -3 out of range");
        err(&cs(0), &["bool[s]"], "numeric");

        let tk = |k, axis| Op::TopK { k, axis };
        ok(&tk(2, -1), &["f32[b, 5]"], "i32[b, 2]");
        ok(&tk(5, 1), &["f32[b, 5]"], "i32[b, 5]");
        ok(&tk(7, 0), &["f32[b, 5]"], "i32[7, 5]");
        err(&tk(6, 1), &["f32[b, 5]"], "k = 6 exceeds");
        err(&tk(0, 1), &["f32[b, 5]"], "k must be > 0");
        err(&tk(1, 2), &["f32[b, 5]"], "axis 2 out of range");

        for keep in [false, true] {
            for op in [
                Op::ArgMax {
                    axis: 1,
                    keep_dims: keep,
                },
                Op::ArgMin {
                    axis: 1,
                    keep_dims: keep,
                },
            ] {
                let want = if keep { "i32[b, 1, 4]" } else { "i32[b, 4]" };
                ok(&op, &["f16[b, s, 4]"], want);
                err(&op, &["f16[b]"], "axis 1 out of range for rank 1");
                err(&op, &["c64[b, 2]"], "ordered");
            }
        }
    }

    #[test]
    fn sample() {
        let s = |temperature, top_p| Op::Sample {
            temperature,
            top_k: 40,
            top_p,
            seed: 7,
        };
        ok(&s(0.0, 1.0), &["f32[b, 32000]"], "i32[b]");
        ok(&s(0.8, 0.95), &["f16[1, 10]"], "i32[1]");
        err(&s(-0.1, 1.0), &["f32[b, 10]"], "temperature");
        err(&s(f32::NAN, 1.0), &["f32[b, 10]"], "temperature");
        err(&s(1.0, 0.0), &["f32[b, 10]"], "top_p");
        err(&s(1.0, 1.5), &["f32[b, 10]"], "top_p");
        err(&s(1.0, f32::NAN), &["f32[b, 10]"], "top_p");
        err(&s(1.0, 1.0), &["f32[10]"], "rank 2");
        err(&s(1.0, 1.0), &["i32[b, 10]"], "float");
        err(&s(1.0, 1.0), &[], "expects 1");
    }
}
