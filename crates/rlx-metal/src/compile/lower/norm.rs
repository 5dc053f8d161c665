//! Lowering of normalisations: LayerNorm, RMSNorm, GroupNorm, LayerNorm2d,
//! fused residual LN / RMS, adaLN and gated residual.

use super::{converted, numel, Ctx};
use crate::compile::error::CompileError;
use crate::thunk::norm::{
    AdaLayerNorm, FusedResidualLN, FusedResidualRmsNorm, GatedResidual, GroupNorm, LayerNorm,
    LayerNorm2d, RmsNorm,
};
use rlx_ir::Op;

/// `[lead_rank, x_lead[0..8], mod_lead[0..8]]`: leading dims (all but the
/// last) of x and of a modulation tensor left-padded with 1s.
pub(crate) fn lead_pack(x: &[usize], m: &[usize]) -> Option<[u32; 17]> {
    let xr = x.len().checked_sub(1)?;
    if xr > 8 {
        return None;
    }
    let mr = m.len().saturating_sub(1);
    let mut p = [1u32; 17];
    p[0] = xr as u32;
    for i in 0..xr {
        p[1 + i] = x[i] as u32;
        p[9 + i] = if i + mr >= xr {
            m[i + mr - xr] as u32
        } else {
            1
        };
    }
    Some(p)
}

pub(super) fn lower(ctx: &mut Ctx<'_>, op: &Op) -> Result<(), CompileError> {
    let dtype = ctx.out_shape().dtype;
    let dt = ctx.half_flag(dtype, "operand")?;
    let xd = ctx.in_dims(0);
    let h = *xd.last().unwrap_or(&1);
    let rows = ctx.u32(numel(&xd) / h.max(1), "rows")?;
    let uh = ctx.u32(h, "h")?;
    match op {
        Op::LayerNorm { eps } => {
            let (g, b) = (converted(ctx, 1, dtype)?, converted(ctx, 2, dtype)?);
            let src = converted(ctx, 0, dtype)?;
            ctx.push(LayerNorm {
                src,
                g,
                b,
                dst: ctx.out(),
                rows,
                h: uh,
                eps: *eps,
                dt,
            });
        }
        Op::RmsNorm { eps } => {
            let src = converted(ctx, 0, dtype)?;
            let g = converted(ctx, 1, dtype)?;
            let b = if ctx.arity() > 2 {
                converted(ctx, 2, dtype)?
            } else {
                ctx.zeros()
            };
            ctx.push(RmsNorm {
                src,
                g,
                b,
                dst: ctx.out(),
                rows,
                h: uh,
                eps: *eps,
                dt,
            });
        }
        Op::GroupNorm { num_groups, eps } => {
            let src = converted(ctx, 0, dtype)?;
            let (g, b) = (converted(ctx, 1, dtype)?, converted(ctx, 2, dtype)?);
            ctx.push(GroupNorm {
                src,
                g,
                b,
                dst: ctx.out(),
                n: ctx.u32(xd[0], "n")?,
                c: ctx.u32(xd[1], "c")?,
                h: ctx.u32(xd[2], "h")?,
                w: ctx.u32(xd[3], "w")?,
                num_groups: ctx.u32(*num_groups, "groups")?,
                eps: *eps,
                dt,
            });
        }
        Op::LayerNorm2d { eps } => {
            let src = converted(ctx, 0, dtype)?;
            let (g, b) = (converted(ctx, 1, dtype)?, converted(ctx, 2, dtype)?);
            ctx.push(LayerNorm2d {
                src,
                g,
                b,
                dst: ctx.out(),
                n: ctx.u32(xd[0], "n")?,
                c: ctx.u32(xd[1], "c")?,
                h: ctx.u32(xd[2], "h")?,
                w: ctx.u32(xd[3], "w")?,
                eps: *eps,
                dt,
            });
        }
        Op::FusedResidualLN { eps, has_bias } | Op::FusedResidualRmsNorm { eps, has_bias } => {
            let x = converted(ctx, 0, dtype)?;
            let res = converted(ctx, 1, dtype)?;
            let mut next = 2;
            let bias = if *has_bias {
                next += 1;
                converted(ctx, 2, dtype)?
            } else {
                ctx.zeros()
            };
            let g = converted(ctx, next, dtype)?;
            let b = if ctx.arity() > next + 1 {
                converted(ctx, next + 1, dtype)?
            } else {
                ctx.zeros()
            };
            let out = ctx.out();
            if matches!(op, Op::FusedResidualLN { .. }) {
                ctx.push(FusedResidualLN {
                    x,
                    res,
                    bias,
                    g,
                    b,
                    out,
                    rows,
                    h: uh,
                    eps: *eps,
                    has_bias: *has_bias,
                    dt,
                });
            } else {
                ctx.push(FusedResidualRmsNorm {
                    x,
                    res,
                    bias,
                    g,
                    b,
                    out,
                    rows,
                    h: uh,
                    eps: *eps,
                    has_bias: *has_bias,
                    dt,
                });
            }
        }
        Op::AdaLayerNorm { eps, layer_norm } => {
            let pack = lead_pack(&xd, &ctx.in_dims(1))
                .ok_or_else(|| ctx.unsupported("ada_layer_norm supports at most 8 leading dims"))?;
            let x = converted(ctx, 0, dtype)?;
            let scale = converted(ctx, 1, dtype)?;
            let shift = converted(ctx, 2, dtype)?;
            ctx.push(AdaLayerNorm {
                x,
                scale,
                shift,
                out: ctx.out(),
                rows,
                h: uh,
                eps: *eps,
                layer_norm: *layer_norm,
                lead_pack: pack,
                dt,
            });
        }
        Op::GatedResidual => {
            let pack = lead_pack(&xd, &ctx.in_dims(2))
                .ok_or_else(|| ctx.unsupported("gated_residual supports at most 8 leading dims"))?;
            let x = converted(ctx, 0, dtype)?;
            let y = converted(ctx, 1, dtype)?;
            let gate = converted(ctx, 2, dtype)?;
            ctx.push(GatedResidual {
                x,
                y,
                gate,
                out: ctx.out(),
                rows,
                h: uh,
                lead_pack: pack,
                dt,
            });
        }
        _ => return Err(ctx.unsupported("not a norm op")),
    }
    Ok(())
}
