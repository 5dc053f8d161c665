//! Shape inference for the elementwise family: activations, binary ops,
//! comparisons, `where`, casts, `fma`, elementwise regions and SwiGLU.
//!
//! Operands broadcast with numpy rules (see [`crate::shape`]); binary results
//! take the promoted dtype ([`DType::promote`]).

use super::common::*;
use crate::dtype::DType;
use crate::error::{IrError, Result};
use crate::op::{
    Activation, BinaryOp, CmpOp, Op, RegionOperand, RegionStep, MAX_REGION_INPUTS, MAX_REGION_STEPS,
};
use crate::shape::{Dim, Shape};

pub(super) fn infer(op: &Op, inputs: &[&Shape]) -> Result<Shape> {
    match op {
        Op::Activation { kind } => {
            arity(op, inputs, 1)?;
            activation_dtype(op, *kind, inputs[0].dtype, "x")?;
            Ok(inputs[0].clone())
        }
        Op::Binary { kind } => {
            arity(op, inputs, 2)?;
            binary_dtype(op, *kind, inputs[0].dtype, inputs[1].dtype)?;
            let dims = broadcast_shapes(op, inputs)?;
            Ok(Shape::new(dims, promote_all(inputs)))
        }
        Op::Compare { kind } => {
            arity(op, inputs, 2)?;
            if !matches!(kind, CmpOp::Eq | CmpOp::Ne) {
                ordered_dtype(op, inputs[0], "a")?;
                ordered_dtype(op, inputs[1], "b")?;
            }
            let dims = broadcast_shapes(op, inputs)?;
            Ok(Shape::new(dims, DType::Bool))
        }
        Op::Where => {
            arity(op, inputs, 3)?;
            let c = inputs[0];
            if !(c.dtype == DType::Bool || c.dtype.is_int() || c.dtype.is_float()) {
                return Err(IrError::dtype(
                    op.name(),
                    format!("cond must be bool or numeric, got {c}"),
                ));
            }
            let dims = broadcast_shapes(op, inputs)?;
            Ok(Shape::new(dims, inputs[1].dtype.promote(inputs[2].dtype)))
        }
        Op::Cast { to, trunc } => {
            arity(op, inputs, 1)?;
            if *trunc && !(inputs[0].dtype.is_float() && to.is_float()) {
                return Err(IrError::dtype(
                    op.name(),
                    format!(
                        "a trunc cast goes from a float to a float dtype, got {} -> {to}",
                        inputs[0].dtype
                    ),
                ));
            }
            Ok(inputs[0].with_dtype(*to))
        }
        Op::Fma => {
            arity(op, inputs, 3)?;
            let dims = broadcast_shapes(op, inputs)?;
            Ok(Shape::new(dims, promote_all(inputs)))
        }
        Op::ElementwiseRegion { steps } => region(op, steps, inputs),
        Op::FusedSwiGLU { .. } => {
            arity(op, inputs, 1)?;
            let x = inputs[0];
            float_dtype(op, x, "x")?;
            let last = static_dim(op, x.last(op.name())?, "last dim of x")?;
            if last % 2 != 0 {
                return Err(IrError::shape(
                    op.name(),
                    format!("last dim of x must be even (gate ∥ up), got {x}"),
                ));
            }
            let mut dims = x.dims.clone();
            if let Some(d) = dims.last_mut() {
                *d = Dim::Static(last / 2);
            }
            Ok(x.with_dims(dims))
        }
        _ => Err(IrError::Unsupported {
            op: op.name().into(),
            msg: "not an elementwise op".into(),
        }),
    }
}

/// Check that `act` is defined on `dt`: bool never, float-only functions
/// need an inexact dtype, and `relu` needs an ordered one.
fn activation_dtype(op: &Op, act: Activation, dt: DType, what: &str) -> Result<()> {
    let ok = if dt == DType::Bool {
        false
    } else if act.needs_float() {
        dt.is_inexact()
    } else {
        !(act == Activation::Relu && dt.is_complex())
    };
    if !ok {
        return Err(IrError::dtype(
            op.name(),
            format!("{} is not defined on {what} of dtype {dt}", act.name()),
        ));
    }
    Ok(())
}

/// Check that a binary op is defined on the pair: `max`/`min` need an
/// ordering, so complex operands are refused.
fn binary_dtype(op: &Op, kind: BinaryOp, a: DType, b: DType) -> Result<()> {
    if matches!(kind, BinaryOp::Max | BinaryOp::Min) && (a.is_complex() || b.is_complex()) {
        return Err(IrError::dtype(
            op.name(),
            format!(
                "{} is not defined on complex operands ({a}, {b})",
                kind.name()
            ),
        ));
    }
    Ok(())
}

/// An elementwise region: check the step list and compute the dtype the chain
/// yields; the dims are the broadcast of all inputs.
fn region(op: &Op, steps: &[RegionStep], inputs: &[&Shape]) -> Result<Shape> {
    arity_range(op, inputs, 1, MAX_REGION_INPUTS)?;
    if steps.is_empty() || steps.len() > MAX_REGION_STEPS {
        return Err(IrError::attr(
            op.name(),
            format!(
                "a region needs 1 to {MAX_REGION_STEPS} steps, got {}",
                steps.len()
            ),
        ));
    }
    let mut step_dtypes: Vec<DType> = Vec::with_capacity(steps.len());
    for (i, step) in steps.iter().enumerate() {
        let read = |o: RegionOperand| -> Result<DType> {
            let found = match o {
                RegionOperand::Input(j) => inputs.get(j as usize).map(|s| s.dtype),
                RegionOperand::Step(j) => step_dtypes.get(j as usize).copied(),
            };
            found.ok_or_else(|| {
                IrError::attr(
                    op.name(),
                    format!(
                        "step {i} reads {o:?}, but only {} input(s) and {i} earlier step(s) exist",
                        inputs.len()
                    ),
                )
            })
        };
        let dt = match *step {
            RegionStep::Unary { act, a } => {
                let da = read(a)?;
                activation_dtype(op, act, da, &format!("step {i} operand"))?;
                da
            }
            RegionStep::Binary { kind, a, b } => {
                let (da, db) = (read(a)?, read(b)?);
                binary_dtype(op, kind, da, db)?;
                da.promote(db)
            }
            RegionStep::Cast { to, a } => {
                read(a)?;
                to
            }
        };
        step_dtypes.push(dt);
    }
    let dims = broadcast_shapes(op, inputs)?;
    // `steps` is non-empty, so there is a last dtype.
    let dt = step_dtypes.last().copied().unwrap_or(DType::F32);
    Ok(Shape::new(dims, dt))
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::{err, ok};
    use super::*;
    use crate::op::ALL_ACTIVATIONS;

    #[test]
    fn activation() {
        for act in ALL_ACTIVATIONS {
            let op = Op::Activation { kind: act };
            ok(&op, &["f16[2, seq]"], "f16[2, seq]");
            if act.needs_float() {
                err(&op, &["i32[2]"], "not defined");
            } else {
                ok(&op, &["i32[2]"], "i32[2]");
            }
            err(&op, &["bool[2]"], "not defined");
            err(&op, &[], "expects 1 input");
        }
        err(
            &Op::Activation {
                kind: Activation::Relu,
            },
            &["c64[2]"],
            "relu",
        );
    }

    #[test]
    fn binary_broadcast_and_promote() {
        let add = Op::Binary {
            kind: BinaryOp::Add,
        };
        ok(&add, &["f32[2, 1, 4]", "f16[3, 1]"], "f32[2, 3, 4]");
        ok(&add, &["f16[seq, 1]", "bf16[1, 8]"], "f32[seq, 8]");
        ok(&add, &["i32[]", "u8[5]"], "i32[5]");
        err(&add, &["f32[2, 3]", "f32[4, 3]"], "[2, 3]");
        err(&add, &["f32[seq, 3]", "f32[4, 3]"], "[4, 3]");
        err(&add, &["f32[2]"], "expects 2 input");
        let max = Op::Binary {
            kind: BinaryOp::Max,
        };
        err(&max, &["c64[2]", "f32[2]"], "complex");
    }

    #[test]
    fn compare_where_cast_fma() {
        let lt = Op::Compare { kind: CmpOp::Lt };
        ok(&lt, &["f32[2, 3]", "i32[3]"], "bool[2, 3]");
        err(&lt, &["c64[2]", "c64[2]"], "ordered");
        ok(
            &Op::Compare { kind: CmpOp::Eq },
            &["c64[2]", "c64[2]"],
            "bool[2]",
        );
        err(&lt, &["f32[2]", "f32[3]"], "broadcast");

        ok(&Op::Where, &["bool[4, 1]", "f16[3]", "f32[1]"], "f32[4, 3]");
        ok(&Op::Where, &["u8[3]", "i8[3]", "i8[3]"], "i8[3]");
        err(&Op::Where, &["c64[3]", "f32[3]", "f32[3]"], "cond");
        err(&Op::Where, &["bool[2]", "f32[3]", "f32[3]"], "broadcast");
        err(&Op::Where, &["bool[3]", "f32[3]"], "expects 3");

        ok(
            &Op::Cast {
                to: DType::I8,
                trunc: false,
            },
            &["f32[a, 2]"],
            "i8[a, 2]",
        );
        let trunc = Op::Cast {
            to: DType::F32,
            trunc: true,
        };
        ok(&trunc, &["f64[3]"], "f32[3]");
        err(&trunc, &["i32[3]"], "float to a float");
        err(
            &Op::Cast {
                to: DType::I8,
                trunc: false,
            },
            &["f32[2]", "f32[2]"],
            "expects 1",
        );

        ok(&Op::Fma, &["f16[2, 1]", "f16[3]", "f32[]"], "f32[2, 3]");
        err(&Op::Fma, &["f32[2]", "f32[3]", "f32[2]"], "broadcast");
    }

    fn inp(i: u32) -> RegionOperand {
        RegionOperand::Input(i)
    }

    #[test]
    fn region_dtype_chain() {
        // exp(cast_f32(a) * b) with a: f16, b: i32  -> f32, broadcast dims
        let op = Op::ElementwiseRegion {
            steps: vec![
                RegionStep::Cast {
                    to: DType::F32,
                    a: inp(0),
                },
                RegionStep::Binary {
                    kind: BinaryOp::Mul,
                    a: RegionOperand::Step(0),
                    b: inp(1),
                },
                RegionStep::Unary {
                    act: Activation::Exp,
                    a: RegionOperand::Step(1),
                },
            ],
        };
        ok(&op, &["f16[4, 1]", "i32[5]", "u8[1, 1]"], "f32[4, 5]");
        err(&op, &["f16[4]", "i32[5]"], "broadcast");
        err(&op, &["f16[4]"], "step 1 reads Input(1)");
        // a step may not read itself or a later step
        let bad = Op::ElementwiseRegion {
            steps: vec![RegionStep::Unary {
                act: Activation::Neg,
                a: RegionOperand::Step(0),
            }],
        };
        err(&bad, &["f32[2]"], "step 0 reads Step(0)");
        // float-only function on an int chain value
        let bad = Op::ElementwiseRegion {
            steps: vec![RegionStep::Unary {
                act: Activation::Exp,
                a: inp(0),
            }],
        };
        err(&bad, &["i32[2]"], "exp");
        let empty = Op::ElementwiseRegion { steps: vec![] };
        err(&empty, &["f32[2]"], "1 to 32 steps");
        let neg = RegionStep::Unary {
            act: Activation::Neg,
            a: inp(0),
        };
        let long = Op::ElementwiseRegion {
            steps: vec![neg; 33],
        };
        err(&long, &["f32[2]"], "got 33");
        let one = Op::ElementwiseRegion { steps: vec![neg] };
        ok(&one, &["i32[2]"], "i32[2]");
        let many: Vec<&str> = vec!["f32[2]"; 17];
        err(&one, &many, "1 to 16");
        err(&one, &[], "1 to 16");
    }

    #[test]
    fn swiglu() {
        let op = Op::FusedSwiGLU { gate_first: true };
        ok(&op, &["f16[seq, 8]"], "f16[seq, 4]");
        err(&op, &["f16[seq, 7]"], "even");
        err(&op, &["f16[8, h]"], "static");
        err(&op, &["i32[8]"], "float");
        err(&op, &["f32[]"], "rank");
    }
}
