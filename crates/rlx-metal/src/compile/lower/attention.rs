//! Lowering of attention: SDPA (all mask kinds, GQA, both layouts), the
//! fused attention block (QKV projection, fused RoPE + SDPA core, output
//! projection), RoPE and axial 2-D RoPE.

use super::elementwise::{materialize, push_cast};
use super::{converted, numel, Ctx};
use crate::compile::error::CompileError;
use crate::thunk::attention::{Attention, AxialRope2dHost, FusedAttn, Rope};
use crate::thunk::binary::Where;
use crate::thunk::matmul::Sgemm;
use crate::thunk::HalfFlag;
use rlx_ir::op::{AttnLayout, MaskKind, RopeKind};
use rlx_ir::{DType, Op};

/// Dims of a mask operand left-padded with 1s to the score rank
/// `[batch, heads, seq, kv_seq]` (the IR broadcasts masks against it).
fn score_dims(md: &[usize]) -> [usize; 4] {
    let mut p = [1usize; 4];
    let skip = md.len().saturating_sub(4);
    let tail = &md[skip..];
    p[4 - tail.len()..].copy_from_slice(tail);
    p
}

/// A binary mask operand `i` in the thunks' shared-by-all-heads form
/// `[batch, seq, kv_seq]` in `dtype`, or `None` when the mask differs per
/// head (its head axis is not 1).
fn shared_mask(
    ctx: &mut Ctx<'_>,
    i: usize,
    target: [usize; 3],
    dtype: DType,
) -> Result<Option<usize>, CompileError> {
    let p = score_dims(&ctx.in_dims(i));
    if p[1] != 1 {
        return Ok(None);
    }
    // dropping the size-1 head axis keeps the bytes: [b, 1, s, kv] ≡ [b, s, kv]
    let from = [p[0], p[2], p[3]];
    let m = converted(ctx, i, dtype)?;
    if from == target {
        Ok(Some(m))
    } else {
        materialize(ctx, m, &from, &target, dtype).map(Some)
    }
}

/// A per-head binary mask operand `i` turned into the additive bias
/// `[batch, heads, seq, kv_seq]` in `dtype` that the attention thunk takes:
/// 0 where the mask is nonzero, `-inf` where it is zero.
fn mask_as_bias(
    ctx: &mut Ctx<'_>,
    i: usize,
    full: [usize; 4],
    dtype: DType,
) -> Result<usize, CompileError> {
    let md = ctx.in_dims(i);
    let m = converted(ctx, i, DType::F32)?;
    let m = if md.as_slice() == full.as_slice() {
        m
    } else {
        materialize(ctx, m, &md, &full, DType::F32)?
    };
    let n = numel(&full);
    let len = ctx.u32(n, "mask elements")?;
    let bias = ctx.scratch(n * 4);
    ctx.push(Where {
        cond: m,
        on_true: ctx.zeros(),
        on_false: ctx.neg_inf(),
        dst: bias,
        len,
        cond_scalar: false,
        true_scalar: true,
        false_scalar: true,
    });
    if dtype == DType::F32 {
        return Ok(bias);
    }
    let out = ctx.scratch(n * dtype.size_bytes());
    push_cast(ctx, bias, DType::F32, out, dtype, len);
    Ok(out)
}

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
            dynamic_kv_len,
        } => {
            let dtype = ctx.out_shape().dtype;
            let dt = ctx.half_flag(dtype, "q")?;
            let (qd, kd) = (ctx.in_dims(0), ctx.in_dims(1));
            let (batch, seq, kv_seq) = match layout {
                AttnLayout::Bhsd => (qd[0], qd[2], kd[2]),
                AttnLayout::Bshd => (qd[0], qd[1], kd[1]),
            };
            let q = converted(ctx, 0, dtype)?;
            // a half KV cache under f32 queries is read as it is (the kernel
            // widens it on load); any other k / v dtype is converted to q's
            let half_kv = dtype == DType::F32
                && ctx.in_shape(1).dtype == DType::F16
                && ctx.in_shape(2).dtype == DType::F16;
            let kv_dtype = if half_kv { DType::F16 } else { dtype };
            let k = converted(ctx, 1, kv_dtype)?;
            let v = converted(ctx, 2, kv_dtype)?;
            let full = [batch, *heads, seq, kv_seq];
            let (mask_off, mask_kind) = match mask {
                MaskKind::Custom => match shared_mask(ctx, 3, [batch, seq, kv_seq], dtype)? {
                    Some(m) => (m, MaskKind::Custom),
                    None => (mask_as_bias(ctx, 3, full, dtype)?, MaskKind::Bias),
                },
                MaskKind::Bias => {
                    let md = ctx.in_dims(3);
                    let m = converted(ctx, 3, dtype)?;
                    if md == full {
                        (m, MaskKind::Bias)
                    } else {
                        (materialize(ctx, m, &md, &full, dtype)?, MaskKind::Bias)
                    }
                }
                other => (0, *other),
            };
            // the kv_len operand (i32 [1] or [batch], checked by shape
            // inference) is last
            let kv_len = dynamic_kv_len.then(|| ctx.input(ctx.arity() - 1));
            let kv_len_per_batch =
                *dynamic_kv_len && ctx.in_dims(ctx.arity() - 1) != [1usize].as_slice();
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
                mask_kind: mask_kind.code(),
                window: ctx.u32(*window, "window")?,
                dt,
                bhsd: (*layout == AttnLayout::Bhsd) as u32,
                score_scale: score_scale.unwrap_or(0.0),
                attn_logit_softcap: softcap.unwrap_or(0.0),
                kv_len,
                kv_len_per_batch,
                kv_dt: half_kv.then_some(HalfFlag::F16),
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
                shared_mask(ctx, i, [batch, seq, seq], DType::F32)?.ok_or_else(|| {
                    ctx.unsupported(
                        "the fused attention block takes a mask shared by all heads \
                         (head axis 1); use attention for per-head masks",
                    )
                })?
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
            // the cos/sin tables are f32 whatever x's dtype (angle precision)
            let cos = converted(ctx, 1, DType::F32)?;
            let sin = converted(ctx, 2, DType::F32)?;
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
