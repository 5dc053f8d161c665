//! Misc family lowering: random fills, vector-quantiser assignment,
//! SPD-manifold ops (forward and backward) and user custom ops.
//!
//! * `RngNormal` / `RngUniform` → one fill thunk. The Philox key is the
//!   op's own seed when it has one (so a seeded fill is the same stream in
//!   every graph), else [`rlx_ir::RngOptions::key_for`] of the node id; the
//!   stream offset is the options' counter. Both come from
//!   [`super::CompileOptions::rng`].
//! * `VqAssign` → [`VqAssign`] over f32 operands (other float dtypes are
//!   converted into scratch first), i32 result.
//! * `Spd` / `SpdBackward` → [`SpdHost`] with every operand's real shape
//!   (the kernel computes in f64 whatever the arena dtype).
//! * `Custom` → the custom-op lowering in [`super::shape`].
//! * Gaussian splats → [`super::splat`].

use super::{numel, CompileError, Ctx};
use crate::thunk::host::{RngNormal, RngUniform, SpdHost, VqAssign};
use rlx_ir::op::VqMetric;
use rlx_ir::{DType, Op};

/// The Philox key of a fill: the op's seed, else one derived from the
/// graph seed and the node id.
fn fill_key(ctx: &Ctx<'_>, seed: Option<u64>) -> u64 {
    seed.unwrap_or_else(|| ctx.rng.key_for(ctx.node as u64))
}

/// Lower one misc-family op (or `SpdBackward`, whose thunk is the
/// forward's).
pub(super) fn lower(ctx: &mut Ctx<'_>, op: &Op) -> Result<(), CompileError> {
    match op {
        Op::Custom { .. } => super::shape::lower_custom(ctx, op),
        Op::GaussianSplatRender { .. }
        | Op::GaussianSplatPrepare { .. }
        | Op::GaussianSplatRasterize { .. } => super::splat::lower(ctx, op),
        Op::RngNormal {
            mean, scale, seed, ..
        } => {
            let len = ctx.u32(numel(&ctx.out_dims()), "elements")?;
            ctx.push(RngNormal {
                dst: ctx.out(),
                len,
                mean: *mean,
                scale: *scale,
                key: fill_key(ctx, *seed),
                offset: ctx.rng.counter,
                op_seed: None,
            });
            Ok(())
        }
        Op::RngUniform {
            low, high, seed, ..
        } => {
            let len = ctx.u32(numel(&ctx.out_dims()), "elements")?;
            ctx.push(RngUniform {
                dst: ctx.out(),
                len,
                low: *low,
                high: *high,
                key: fill_key(ctx, *seed),
                offset: ctx.rng.counter,
                op_seed: None,
            });
            Ok(())
        }
        Op::VqAssign { metric } => {
            let xd = ctx.in_dims(0);
            let cd = ctx.in_dims(1);
            let x = super::converted(ctx, 0, DType::F32)?;
            let cb = super::converted(ctx, 1, DType::F32)?;
            ctx.push(VqAssign {
                x,
                cb,
                out: ctx.out(),
                n: ctx.u32(xd[0], "rows")?,
                d: ctx.u32(xd[1], "dim")?,
                k: ctx.u32(cd[0], "codebook rows")?,
                metric: match metric {
                    VqMetric::L2 => 0,
                    VqMetric::Dot => 1,
                    VqMetric::Cosine => 2,
                },
            });
            Ok(())
        }
        Op::Spd { .. } | Op::SpdBackward { .. } => {
            let operand = |ctx: &Ctx<'_>, off: usize, shape: &rlx_ir::Shape| {
                let n = numel(&super::static_dims(shape));
                ctx.u32(n, "elements").map(|n| (off, n, shape.clone()))
            };
            let inputs = (0..ctx.arity())
                .map(|i| operand(ctx, ctx.input(i), ctx.in_shape(i)))
                .collect::<Result<Vec<_>, _>>()?;
            let output = operand(ctx, ctx.out(), ctx.out_shape())?;
            ctx.push(SpdHost {
                op: op.clone(),
                inputs,
                output,
            });
            Ok(())
        }
        _ => Err(ctx.unsupported(format!(
            "lowering of the {:?} family op is not implemented yet",
            op.family()
        ))),
    }
}
