//! Lowering of attention: SDPA (all mask kinds, GQA, both layouts), the
//! fused attention block (QKV projection, fused RoPE + SDPA core, output
//! projection), RoPE and axial 2-D RoPE.

use super::elementwise::materialize;
use super::{converted, numel, Ctx};
use crate::compile::error::CompileError;
use crate::thunk::attention::{Attention, AxialRope2dHost, FusedAttn, Rope};
use crate::thunk::matmul::Sgemm;
use crate::thunk::HalfFlag;
use rlx_ir::op::{AttnLayout, MaskKind, RopeKind};
use rlx_ir::{DType, Op};

pub(super) fn lower(ctx: &mut Ctx<'_>, op: &Op) -> Result<(), CompileError> {
    match op {
        Op::Attention {
            heads,
            kv_heads,
            head_dim,
            mask,
            window,
            layout,
            score_scale,
            softcap,
        } => {
            let dtype = ctx.out_shape().dtype;
            let dt = ctx.half_flag(dtype, "q")?;
            let (qd, kd) = (ctx.in_dims(0), ctx.in_dims(1));
            let (batch, seq, kv_seq) = match layout {
                AttnLayout::Bhsd => (qd[0], qd[2], kd[2]),
                AttnLayout::Bshd => (qd[0], qd[1], kd[1]),
            };
            let q = converted(ctx, 0, dtype)?;
            let k = converted(ctx, 1, dtype)?;
            let v = converted(ctx, 2, dtype)?;
            let mask_off = if mask.has_input() {
                let md = ctx.in_dims(3);
                let target: Vec<usize> = if *mask == MaskKind::Custom {
                    vec![batch, seq, kv_seq]
                } else {
                    vec![batch, *heads, seq, kv_seq]
                };
                let m = converted(ctx, 3, dtype)?;
                if md == target {
                    m
                } else {
                    materialize(ctx, m, &md, &target, dtype)?
                }
            } else {
                0
            };
            ctx.push(Attention {
                q,
                k,
                v,
                mask: mask_off,
                out: ctx.out(),
                batch: ctx.u32(batch, "batch")?,
                seq: ctx.u32(seq, "seq")?,
                kv_seq: ctx.u32(kv_seq, "kv_seq")?,
                heads: ctx.u32(*heads, "heads")?,
                kv_heads: ctx.u32(*kv_heads, "kv_heads")?,
                head_dim: ctx.u32(*head_dim, "head_dim")?,
                mask_kind: mask.code(),
                window: ctx.u32(*window, "window")?,
                dt,
                bhsd: (*layout == AttnLayout::Bhsd) as u32,
                score_scale: score_scale.unwrap_or(0.0),
                attn_logit_softcap: softcap.unwrap_or(0.0),
            });
            Ok(())
        }
        Op::FusedAttentionBlock {
            heads,
            head_dim,
            mask,
            rope,
        } => {
            if ctx.out_shape().dtype != DType::F32 {
                return Err(ctx.unsupported("the fused attention block is f32 only"));
            }
            let xd = ctx.in_dims(0);
            let (batch, seq, hidden) = (xd[0], xd[1], xd[2]);
            let inner = heads * head_dim;
            let rows = batch * seq;
            let x = converted(ctx, 0, DType::F32)?;
            let w_qkv = converted(ctx, 1, DType::F32)?;
            let w_out = converted(ctx, 2, DType::F32)?;
            let (cos, sin) = if *rope {
                (
                    converted(ctx, 3, DType::F32)?,
                    converted(ctx, 4, DType::F32)?,
                )
            } else {
                (0, 0)
            };
            let mask_off = if *mask == MaskKind::Custom {
                let i = if *rope { 5 } else { 3 };
                let md = ctx.in_dims(i);
                let m = converted(ctx, i, DType::F32)?;
                let target = vec![batch, seq, seq];
                if md == target {
                    m
                } else {
                    materialize(ctx, m, &md, &target, DType::F32)?
                }
            } else {
                0
            };
            let qkv = ctx.scratch(rows * 3 * inner * 4);
            let attn = ctx.scratch(rows * inner * 4);
            let (urows, uhidden, uinner) = (
                ctx.u32(rows, "rows")?,
                ctx.u32(hidden, "hidden")?,
                ctx.u32(inner, "inner")?,
            );
            ctx.push(Sgemm {
                a: x,
                b: w_qkv,
                c: qkv,
                m: urows,
                k: uhidden,
                n: ctx.u32(3 * inner, "3·inner")?,
                dt: HalfFlag::F32,
                b_f16: false,
            });
            ctx.push(FusedAttn {
                qkv,
                mask: mask_off,
                cos,
                sin,
                out: attn,
                batch: ctx.u32(batch, "batch")?,
                seq: ctx.u32(seq, "seq")?,
                heads: ctx.u32(*heads, "heads")?,
                head_dim: ctx.u32(*head_dim, "head_dim")?,
                mask_kind: mask.code(),
                scale_bits: (1.0 / (*head_dim as f32).sqrt()).to_bits(),
                has_rope: *rope as u32,
            });
            ctx.push(Sgemm {
                a: attn,
                b: w_out,
                c: ctx.out(),
                m: urows,
                k: uinner,
                n: uhidden,
                dt: HalfFlag::F32,
                b_f16: false,
            });
            Ok(())
        }
        Op::Rope {
            kind,
            head_dim,
            n_rot,
            per_token,
        } => {
            let dtype = ctx.out_shape().dtype;
            let dt = ctx.half_flag(dtype, "x")?;
            let xd = ctx.in_dims(0);
            let hidden = *xd.last().unwrap_or(&0);
            let (batch, seq) = match xd.len() {
                2 => (1, xd[0]),
                _ => (numel(&xd[..xd.len() - 2]), xd[xd.len() - 2]),
            };
            let src = converted(ctx, 0, dtype)?;
            let cos = converted(ctx, 1, dtype)?;
            let sin = converted(ctx, 2, dtype)?;
            ctx.push(Rope {
                src,
                cos,
                sin,
                dst: ctx.out(),
                batch: ctx.u32(batch, "batch")?,
                seq: ctx.u32(seq, "seq")?,
                hidden: ctx.u32(hidden, "hidden")?,
                head_dim: ctx.u32(*head_dim, "head_dim")?,
                n_rot: ctx.u32(*n_rot, "n_rot")?,
                dt,
                src_row_stride: ctx.u32(hidden, "hidden")?,
                cos_per_token: *per_token,
                interleaved: *kind == RopeKind::Interleaved,
            });
            Ok(())
        }
        Op::AxialRope2d {
            end_x,
            end_y,
            head_dim,
            num_heads,
            theta,
            repeat_factor,
        } => {
            if ctx.out_shape().dtype != DType::F32 {
                return Err(ctx.unsupported("axial 2-D RoPE is f32 only"));
            }
            let xd = ctx.in_dims(0);
            ctx.push(AxialRope2dHost {
                src: ctx.input(0),
                dst: ctx.out(),
                batch: ctx.u32(xd[0], "batch")?,
                seq: ctx.u32(xd[1], "seq")?,
                hidden: ctx.u32(xd[2], "hidden")?,
                end_x: ctx.u32(*end_x, "end_x")?,
                end_y: ctx.u32(*end_y, "end_y")?,
                head_dim: ctx.u32(*head_dim, "head_dim")?,
                num_heads: ctx.u32(*num_heads, "heads")?,
                theta: *theta,
                repeat_factor: ctx.u32(*repeat_factor, "repeat_factor")?,
            });
            Ok(())
        }
        _ => Err(ctx.unsupported("not an attention op")),
    }
}
