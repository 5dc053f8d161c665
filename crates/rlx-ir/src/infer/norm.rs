//! Shape inference for the normalisation family: LayerNorm / RMSNorm over the
//! last axis, GroupNorm and LayerNorm2d over NCHW channels, the fused
//! residual variants, and the DiT adaLN / gated-residual ops.
//!
//! All of them return the shape of `x`. Per-feature parameters (gamma, beta,
//! bias) must be `[h]`, where `h` is the normalised size: the last dim, or the
//! channel dim `c` for the NCHW ops. `eps` must be finite and positive.

use super::common::*;
use crate::error::{IrError, Result};
use crate::op::Op;
use crate::shape::{Dim, Shape};

pub(super) fn infer(op: &Op, inputs: &[&Shape]) -> Result<Shape> {
    match op {
        Op::LayerNorm { eps } => {
            positive_eps(op, *eps)?;
            arity(op, inputs, 3)?;
            let h = last_axis_input(op, inputs[0])?;
            params(op, &inputs[1..], h, &["gamma", "beta"])?;
            Ok(inputs[0].clone())
        }
        Op::RmsNorm { eps } => {
            positive_eps(op, *eps)?;
            arity_range(op, inputs, 2, 3)?;
            let h = last_axis_input(op, inputs[0])?;
            params(op, &inputs[1..], h, &["gamma", "beta"])?;
            Ok(inputs[0].clone())
        }
        Op::GroupNorm { num_groups, eps } => {
            positive_eps(op, *eps)?;
            nonzero_attr(op, *num_groups, "num_groups")?;
            arity(op, inputs, 3)?;
            let c = nchw_input(op, inputs[0])?;
            let cs = static_dim(op, c, "channel dim of x")?;
            if cs % num_groups != 0 {
                return Err(IrError::shape(
                    op.name(),
                    format!(
                        "channels must divide into {num_groups} groups, got {}",
                        inputs[0]
                    ),
                ));
            }
            params(op, &inputs[1..], c, &["gamma", "beta"])?;
            Ok(inputs[0].clone())
        }
        Op::LayerNorm2d { eps } => {
            positive_eps(op, *eps)?;
            arity(op, inputs, 3)?;
            let c = nchw_input(op, inputs[0])?;
            params(op, &inputs[1..], c, &["gamma", "beta"])?;
            Ok(inputs[0].clone())
        }
        Op::FusedResidualLN { eps, has_bias } => {
            positive_eps(op, *eps)?;
            let hb = *has_bias as usize;
            arity(op, inputs, 4 + hb)?;
            fused_residual(op, inputs, *has_bias)
        }
        Op::FusedResidualRmsNorm { eps, has_bias } => {
            positive_eps(op, *eps)?;
            let hb = *has_bias as usize;
            arity_range(op, inputs, 3 + hb, 4 + hb)?;
            fused_residual(op, inputs, *has_bias)
        }
        Op::AdaLayerNorm { eps, .. } => {
            positive_eps(op, *eps)?;
            arity(op, inputs, 3)?;
            let x = inputs[0];
            last_axis_input(op, x)?;
            for (s, what) in inputs[1..].iter().zip(["scale", "shift"]) {
                float_dtype(op, s, what)?;
                broadcast_to(op, s, &x.dims, what)?;
            }
            Ok(x.clone())
        }
        Op::GatedResidual => {
            arity(op, inputs, 3)?;
            let x = inputs[0];
            float_dtype(op, x, "x")?;
            for (s, what) in inputs[1..].iter().zip(["y", "gate"]) {
                float_dtype(op, s, what)?;
                broadcast_to(op, s, &x.dims, what)?;
            }
            Ok(x.clone())
        }
        _ => Err(IrError::Unsupported {
            op: op.name().into(),
            msg: "not a norm op".into(),
        }),
    }
}

/// A float input of rank ≥ 1 normalised over its last axis; returns `h`.
fn last_axis_input<'a>(op: &Op, x: &'a Shape) -> Result<&'a Dim> {
    float_dtype(op, x, "x")?;
    x.last(op.name())
}

/// A float NCHW input; returns the channel dim.
fn nchw_input<'a>(op: &Op, x: &'a Shape) -> Result<&'a Dim> {
    float_dtype(op, x, "x")?;
    rank_is(op, x, 4, "x (NCHW)")?;
    Ok(x.dim(1))
}

/// Each parameter must be a float vector `[h]`; `names` labels them in order.
fn params(op: &Op, ps: &[&Shape], h: &Dim, names: &[&str]) -> Result<()> {
    for (p, what) in ps.iter().zip(names) {
        float_dtype(op, p, what)?;
        expect_vector(op, p, h, what)?;
    }
    Ok(())
}

/// `[x, res, (bias), gamma, (beta)]`: `res` matches `x` exactly (same dims
/// and dtype), the rest are `[h]` vectors. Arity is checked by the caller.
fn fused_residual(op: &Op, inputs: &[&Shape], has_bias: bool) -> Result<Shape> {
    let (x, res) = (inputs[0], inputs[1]);
    let h = last_axis_input(op, x)?;
    same_dtype(op, x, res)?;
    if x.dims != res.dims {
        return Err(IrError::shape(
            op.name(),
            format!("residual must match x: {x} vs {res}"),
        ));
    }
    let names: &[&str] = if has_bias {
        &["bias", "gamma", "beta"]
    } else {
        &["gamma", "beta"]
    };
    params(op, &inputs[2..], h, names)?;
    Ok(x.clone())
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::{err, ok};
    use super::*;

    #[test]
    fn layer_and_rms_norm() {
        let ln = Op::LayerNorm { eps: 1e-5 };
        ok(&ln, &["f16[b, s, 8]", "f32[8]", "f32[8]"], "f16[b, s, 8]");
        err(
            &ln,
            &["f16[b, s, 8]", "f32[7]", "f32[8]"],
            "gamma must be [8]",
        );
        err(
            &ln,
            &["f16[b, s, 8]", "f32[8]", "f32[1, 8]"],
            "beta must be [8]",
        );
        err(&ln, &["i32[8]", "f32[8]", "f32[8]"], "float");
        err(&ln, &["f32[]", "f32[1]", "f32[1]"], "rank");
        err(&ln, &["f32[8]", "f32[8]"], "expects 3");
        err(
            &Op::LayerNorm { eps: 0.0 },
            &["f32[8]", "f32[8]", "f32[8]"],
            "eps",
        );
        err(
            &Op::LayerNorm { eps: f32::NAN },
            &["f32[8]", "f32[8]", "f32[8]"],
            "eps",
        );
        let rms = Op::RmsNorm { eps: 1e-6 };
        ok(&rms, &["f32[s, h]", "f32[h]"], "f32[s, h]");
        ok(&rms, &["f32[s, 4]", "f32[4]", "f32[4]"], "f32[s, 4]");
        err(&rms, &["f32[s, 4]"], "2 to 3");
        err(&rms, &["f32[s, 4]", "i8[4]"], "gamma must be a float");
    }

    #[test]
    fn nchw_norms() {
        let gn = Op::GroupNorm {
            num_groups: 4,
            eps: 1e-5,
        };
        ok(
            &gn,
            &["f32[n, 8, h, w]", "f32[8]", "f32[8]"],
            "f32[n, 8, h, w]",
        );
        err(&gn, &["f32[n, 6, h, w]", "f32[6]", "f32[6]"], "4 groups");
        err(&gn, &["f32[n, c, h, w]", "f32[c]", "f32[c]"], "static");
        err(&gn, &["f32[8, 4, 4]", "f32[8]", "f32[8]"], "rank 4");
        let gn0 = Op::GroupNorm {
            num_groups: 0,
            eps: 1e-5,
        };
        err(&gn0, &["f32[1, 8, 2, 2]", "f32[8]", "f32[8]"], "num_groups");
        let ln2 = Op::LayerNorm2d { eps: 1e-6 };
        ok(
            &ln2,
            &["f16[1, c, 4, 4]", "f16[c]", "f16[c]"],
            "f16[1, c, 4, 4]",
        );
        err(
            &ln2,
            &["f16[1, 3, 4, 4]", "f16[4]", "f16[3]"],
            "gamma must be [3]",
        );
    }

    #[test]
    fn fused_residuals() {
        let ln = Op::FusedResidualLN {
            eps: 1e-5,
            has_bias: true,
        };
        ok(
            &ln,
            &["f32[s, 4]", "f32[s, 4]", "f32[4]", "f32[4]", "f32[4]"],
            "f32[s, 4]",
        );
        err(
            &ln,
            &["f32[s, 4]", "f32[s, 4]", "f32[4]", "f32[4]"],
            "expects 5",
        );
        err(
            &ln,
            &["f32[s, 4]", "f32[1, 4]", "f32[4]", "f32[4]", "f32[4]"],
            "residual must match",
        );
        err(
            &ln,
            &["f32[s, 4]", "f16[s, 4]", "f32[4]", "f32[4]", "f32[4]"],
            "dtypes differ",
        );
        err(
            &ln,
            &["f32[s, 4]", "f32[s, 4]", "f32[3]", "f32[4]", "f32[4]"],
            "bias must be [4]",
        );
        let rms = Op::FusedResidualRmsNorm {
            eps: 1e-5,
            has_bias: false,
        };
        ok(&rms, &["f32[s, 4]", "f32[s, 4]", "f32[4]"], "f32[s, 4]");
        ok(
            &rms,
            &["f32[s, 4]", "f32[s, 4]", "f32[4]", "f32[4]"],
            "f32[s, 4]",
        );
        err(&rms, &["f32[s, 4]", "f32[s, 4]"], "3 to 4");
        let rms_b = Op::FusedResidualRmsNorm {
            eps: 1e-5,
            has_bias: true,
        };
        ok(
            &rms_b,
            &["f32[s, 4]", "f32[s, 4]", "f32[4]", "f32[4]"],
            "f32[s, 4]",
        );
        err(&rms_b, &["f32[s, 4]", "f32[s, 4]", "f32[4]"], "4 to 5");
        err(
            &rms_b,
            &["f32[s, 4]", "f32[s, 4]", "f32[4]", "f32[5]"],
            "gamma must be [4]",
        );
    }

    #[test]
    fn ada_and_gated() {
        let ada = Op::AdaLayerNorm {
            eps: 1e-6,
            layer_norm: true,
        };
        ok(
            &ada,
            &["f32[b, s, 8]", "f32[b, 1, 8]", "f32[8]"],
            "f32[b, s, 8]",
        );
        err(
            &ada,
            &["f32[b, s, 8]", "f32[2, 1, 8]", "f32[8]"],
            "scale f32[2, 1, 8] does not broadcast to [b, s, 8]",
        );
        err(
            &ada,
            &["f32[b, s, 8]", "f32[8]", "f32[1, b, s, 8]"],
            "shift",
        );
        err(&ada, &["f32[b, s, 8]", "f32[8]"], "expects 3");
        let g = Op::GatedResidual;
        ok(
            &g,
            &["f32[b, s, 8]", "f32[b, s, 8]", "f32[b, 1, 8]"],
            "f32[b, s, 8]",
        );
        err(
            &g,
            &["f32[b, s, 8]", "f32[b, s, 4]", "f32[8]"],
            "y f32[b, s, 4]",
        );
        err(
            &g,
            &["f32[b, s, 8]", "f32[b, s, 8]", "i32[8]"],
            "gate must be a float",
        );
    }
}
