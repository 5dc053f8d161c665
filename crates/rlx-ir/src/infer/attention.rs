//! Shape inference for the attention family: scaled dot-product attention in
//! both layouts (with GQA), the fused attention block, RoPE and SAM2's axial
//! 2-D RoPE. Every op returns the shape of its first operand.

use super::common::*;
use crate::dtype::DType;
use crate::error::{IrError, Result};
use crate::op::{AttnLayout, MaskKind, Op};
use crate::shape::{dims_string, Dim, Shape};

/// K / V element types of attention: both q's dtype, or both f16 under an
/// f32 q (a half-precision KV cache: keys and values are widened on load,
/// scores, softmax and accumulation stay f32, the output is f32).
fn kv_dtype(op: &Op, q: &Shape, k: &Shape, v: &Shape) -> Result<()> {
    same_dtype(op, k, v)?;
    if k.dtype == q.dtype || (q.dtype == DType::F32 && k.dtype == DType::F16) {
        return Ok(());
    }
    Err(IrError::dtype(
        op.name(),
        format!(
            "k / v must have q's dtype, or be f16 under an f32 q (half KV cache): \
             q {q}, k {k}"
        ),
    ))
}

pub(super) fn infer(op: &Op, inputs: &[&Shape]) -> Result<Shape> {
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
            nonzero_attr(op, *heads, "heads")?;
            nonzero_attr(op, *kv_heads, "kv_heads")?;
            nonzero_attr(op, *head_dim, "head_dim")?;
            if heads % kv_heads != 0 {
                return Err(IrError::attr(
                    op.name(),
                    format!("heads ({heads}) must be a multiple of kv_heads ({kv_heads})"),
                ));
            }
            if *mask == MaskKind::SlidingWindow && *window == 0 {
                return Err(IrError::attr(
                    op.name(),
                    "sliding_window mask needs window > 0",
                ));
            }
            if let Some(s) = score_scale {
                if !s.is_finite() {
                    return Err(IrError::attr(
                        op.name(),
                        format!("score_scale must be finite, got {s}"),
                    ));
                }
            }
            if let Some(c) = softcap {
                if !(c.is_finite() && *c > 0.0) {
                    return Err(IrError::attr(
                        op.name(),
                        format!("softcap must be finite and > 0, got {c}"),
                    ));
                }
            }
            let n_mask = mask.has_input() as usize;
            arity(op, inputs, 3 + n_mask + *dynamic_kv_len as usize)?;
            let (q, k, v) = (inputs[0], inputs[1], inputs[2]);
            if *dynamic_kv_len {
                // one length for every batch entry, or one per entry
                let kl = inputs[3 + n_mask];
                let (b, _) = batch_seq(*layout, q);
                let per_batch = kl.rank() == 1 && kl.dims[0] == b;
                if kl.dtype != DType::I32 || !(kl.dims == [Dim::Static(1)] || per_batch) {
                    return Err(IrError::shape(
                        op.name(),
                        format!("kv_len must be i32 [1] or i32 [batch] ([{b}]), got {kl}"),
                    ));
                }
            }
            float_dtype(op, q, "q")?;
            kv_dtype(op, q, k, v)?;
            let hd = Dim::Static(*head_dim);
            let rows = |h: usize, s: &Shape| -> Result<Vec<Dim>> {
                layout_dims(op, *layout, q.rank(), s, h, &hd)
            };
            let want_q = rows(*heads, q)?;
            expect_dims(op, q, &want_q, "q")?;
            if k.rank() != q.rank() || v.rank() != q.rank() {
                return Err(IrError::shape(
                    op.name(),
                    format!("q, k and v must have the same rank: {q}, {k}, {v}"),
                ));
            }
            // k/v share q's batch; their sequence length is their own.
            let mut want_k = rows(*kv_heads, k)?;
            if let (Some(kb), Some(qb)) = (want_k.first_mut(), q.dims.first()) {
                *kb = qb.clone();
            }
            expect_dims(op, k, &want_k, "k")?;
            expect_dims(op, v, &want_k, "v")?;
            let (b, s) = batch_seq(*layout, q);
            let (_, kv_s) = batch_seq(*layout, k);
            if n_mask == 1 {
                let m = inputs[3];
                mask_operand(op, *mask, m, &[b, Dim::Static(*heads), s, kv_s])?;
            }
            Ok(q.clone())
        }
        Op::FusedAttentionBlock {
            heads,
            head_dim,
            mask,
            rope,
        } => {
            nonzero_attr(op, *heads, "heads")?;
            nonzero_attr(op, *head_dim, "head_dim")?;
            if !matches!(mask, MaskKind::None | MaskKind::Causal | MaskKind::Custom) {
                return Err(IrError::attr(
                    op.name(),
                    format!("mask must be none, causal or custom, got {mask:?}"),
                ));
            }
            if *rope && head_dim % 2 != 0 {
                return Err(IrError::attr(
                    op.name(),
                    format!("rope needs an even head_dim, got {head_dim}"),
                ));
            }
            let n_rope = 2 * (*rope as usize);
            arity(op, inputs, 3 + n_rope + mask.has_input() as usize)?;
            let (x, w_qkv, w_out) = (inputs[0], inputs[1], inputs[2]);
            rank_is(op, x, 3, "x")?;
            float_dtype(op, x, "x")?;
            let (b, s, hidden) = (x.dim(0), x.dim(1), x.dim(2));
            let inner = mul_attr(op, *heads, *head_dim, "heads * head_dim")?;
            let qkv = mul_attr(op, inner, 3, "3 * heads * head_dim")?;
            float_dtype(op, w_qkv, "w_qkv")?;
            expect_dims(op, w_qkv, &[hidden.clone(), Dim::Static(qkv)], "w_qkv")?;
            float_dtype(op, w_out, "w_out")?;
            expect_dims(op, w_out, &[Dim::Static(inner), hidden.clone()], "w_out")?;
            if *rope {
                let want = [s.clone(), Dim::Static(head_dim / 2)];
                for (t, what) in inputs[3..5].iter().zip(["cos", "sin"]) {
                    float_dtype(op, t, what)?;
                    expect_dims(op, t, &want, what)?;
                }
            }
            if let Some(m) = inputs.get(3 + n_rope) {
                let full = [b.clone(), Dim::Static(*heads), s.clone(), s.clone()];
                mask_operand(op, *mask, m, &full)?;
            }
            Ok(x.clone())
        }
        Op::Rope {
            head_dim,
            n_rot,
            per_token,
            ..
        } => {
            nonzero_attr(op, *head_dim, "head_dim")?;
            if *n_rot == 0 || n_rot % 2 != 0 || n_rot > head_dim {
                return Err(IrError::attr(
                    op.name(),
                    format!("n_rot must be even and in 2..={head_dim}, got {n_rot}"),
                ));
            }
            arity(op, inputs, 3)?;
            let x = inputs[0];
            rank_is(op, x, 3, "x")?;
            float_dtype(op, x, "x")?;
            heads_of(op, x.dim(2), *head_dim)?;
            let rows = if *per_token {
                dim_mul(op, x.dim(0), x.dim(1), "rows").map_err(|_| {
                    IrError::shape(
                        op.name(),
                        format!("per-token cos/sin need batch or seq static, got {x}"),
                    )
                })?
            } else {
                x.dim(1).clone()
            };
            let want = [rows, Dim::Static(n_rot / 2)];
            for (t, what) in inputs[1..].iter().zip(["cos", "sin"]) {
                float_dtype(op, t, what)?;
                expect_dims(op, t, &want, what)?;
            }
            Ok(x.clone())
        }
        Op::AxialRope2d {
            end_x,
            end_y,
            head_dim,
            num_heads,
            theta,
            repeat_factor,
        } => {
            nonzero_attr(op, *end_x, "end_x")?;
            nonzero_attr(op, *end_y, "end_y")?;
            nonzero_attr(op, *num_heads, "num_heads")?;
            nonzero_attr(op, *repeat_factor, "repeat_factor")?;
            if *head_dim == 0 || head_dim % 4 != 0 {
                return Err(IrError::attr(
                    op.name(),
                    format!("head_dim must be a positive multiple of 4, got {head_dim}"),
                ));
            }
            if !(theta.is_finite() && *theta > 0.0) {
                return Err(IrError::attr(
                    op.name(),
                    format!("theta must be finite and > 0, got {theta}"),
                ));
            }
            arity(op, inputs, 1)?;
            let x = inputs[0];
            rank_is(op, x, 3, "x")?;
            float_dtype(op, x, "x")?;
            let hidden = mul_attr(op, *num_heads, *head_dim, "num_heads * head_dim")?;
            dims_equal(
                op,
                x.dim(2),
                &Dim::Static(hidden),
                "hidden must be num_heads * head_dim",
            )?;
            let grid = mul_attr(op, *end_x, *end_y, "end_x * end_y")?;
            let seq = mul_attr(op, grid, *repeat_factor, "grid * repeat_factor")?;
            if let Some(s) = x.dim(1).as_static() {
                if s != seq {
                    return Err(IrError::shape(
                        op.name(),
                        format!("seq must be end_x * end_y * repeat_factor = {seq}, got {x}"),
                    ));
                }
            }
            Ok(x.clone())
        }
        _ => Err(IrError::Unsupported {
            op: op.name().into(),
            msg: "not an attention op".into(),
        }),
    }
}

/// The dims an attention operand must have given its batch and sequence dims
/// (read from `s` itself) and `h` heads of `d`; `rank` is q's rank (BSHD
/// allows 3 or 4, BHSD needs 4).
fn layout_dims(
    op: &Op,
    layout: AttnLayout,
    rank: usize,
    s: &Shape,
    h: usize,
    d: &Dim,
) -> Result<Vec<Dim>> {
    let ok_rank = match layout {
        AttnLayout::Bhsd => rank == 4,
        AttnLayout::Bshd => rank == 3 || rank == 4,
    };
    if !ok_rank || s.rank() != rank {
        let want = match layout {
            AttnLayout::Bhsd => "[b, heads, s, d]",
            AttnLayout::Bshd => "[b, s, heads*d] or [b, s, heads, d]",
        };
        return Err(IrError::shape(
            op.name(),
            format!("{layout:?} operands must be {want}, got {s}"),
        ));
    }
    let (b, seq) = batch_seq(layout, s);
    let hs = Dim::Static(h);
    Ok(match (layout, rank) {
        (AttnLayout::Bhsd, _) => vec![b, hs, seq, d.clone()],
        (AttnLayout::Bshd, 4) => vec![b, seq, hs, d.clone()],
        (AttnLayout::Bshd, _) => {
            let hd = d
                .as_static()
                .and_then(|d| d.checked_mul(h))
                .ok_or_else(|| IrError::attr(op.name(), "heads * head_dim overflows"))?;
            vec![b, seq, Dim::Static(hd)]
        }
    })
}

/// Batch and sequence dims of an operand whose rank was already checked.
fn batch_seq(layout: AttnLayout, s: &Shape) -> (Dim, Dim) {
    let seq_axis = match layout {
        AttnLayout::Bhsd => 2,
        AttnLayout::Bshd => 1,
    };
    let get = |i: usize| s.dims.get(i).cloned().unwrap_or(Dim::Static(1));
    (get(0), get(seq_axis))
}

/// A custom (binary) mask or additive bias must broadcast to the full score
/// shape `[b, heads, s, kv_s]`; bias must be float, a mask bool or numeric.
fn mask_operand(op: &Op, kind: MaskKind, m: &Shape, full: &[Dim]) -> Result<()> {
    match kind {
        MaskKind::Bias => float_dtype(op, m, "bias")?,
        _ => {
            if m.dtype.is_complex() {
                return Err(IrError::dtype(
                    op.name(),
                    format!("mask must be bool or numeric, got {m}"),
                ));
            }
        }
    }
    broadcast_to(op, m, full, "mask")
}

/// `hidden / head_dim`, requiring a static `hidden` that divides evenly.
fn heads_of(op: &Op, hidden: &Dim, head_dim: usize) -> Result<usize> {
    let h = static_dim(op, hidden, "hidden")?;
    if h % head_dim != 0 {
        return Err(IrError::shape(
            op.name(),
            format!(
                "hidden {} is not a multiple of head_dim {head_dim}",
                dims_string(std::slice::from_ref(hidden))
            ),
        ));
    }
    Ok(h / head_dim)
}

#[cfg(test)]
mod tests;
