//! Lowering of the matmul family: dense (`Sgemm`, `BatchedSgemm` with
//! broadcast batch, materialising partial batch broadcasts), fused
//! matmul + bias + activation, GGUF-quantised and grouped (MoE) matmuls.
//! The other weight formats and the scaled ops are in `quant_formats`.

use super::elementwise::materialize;
use super::{converted, index_i32, numel, Ctx};
use crate::compile::error::CompileError;
use crate::thunk::matmul::{BatchedSgemm, FusedMmBiasAct, GroupedMatMul, Sgemm};
use crate::thunk::quant::{DequantGroupedMatMulGguf, DequantMatMulGguf, DequantMatMulGgufT};
use rlx_ir::quant::QuantScheme;
use rlx_ir::shape::broadcast_dims;
use rlx_ir::{DType, Dim, Op};

pub(super) fn lower(ctx: &mut Ctx<'_>, op: &Op) -> Result<(), CompileError> {
    match op {
        Op::MatMul => matmul(ctx),
        Op::FusedMatMulBiasAct { act } => {
            let out = ctx.out_shape().dtype;
            let dt = ctx.half_flag(out, "result")?;
            let a = converted(ctx, 0, out)?;
            let w = converted(ctx, 1, out)?;
            let bias = converted(ctx, 2, out)?;
            let ad = ctx.in_dims(0);
            let wd = ctx.in_dims(1);
            let k = *ad.last().unwrap_or(&0);
            let n = *wd.last().unwrap_or(&0);
            ctx.push(FusedMmBiasAct {
                a,
                w,
                bias,
                c: ctx.out(),
                m: ctx.u32(numel(&ad) / k.max(1), "m")?,
                k: ctx.u32(k, "k")?,
                n: ctx.u32(n, "n")?,
                act: *act,
                dt,
            });
            Ok(())
        }
        Op::DequantMatMul { scheme, n, k } => {
            let QuantScheme::Gguf(_) = scheme else {
                return super::quant_formats::dequant_matmul(ctx, *scheme, *n, *k);
            };
            let xd = ctx.in_dims(0);
            let x_dt = ctx.in_shape(0).dtype;
            let x = if x_dt == DType::F16 {
                ctx.input(0)
            } else {
                converted(ctx, 0, DType::F32)?
            };
            ctx.push(DequantMatMulGguf {
                x,
                w_q: ctx.input(1),
                dst: ctx.out(),
                m: ctx.u32(numel(&xd) / (*k).max(1), "m")?,
                k: ctx.u32(*k, "k")?,
                n: ctx.u32(*n, "n")?,
                scheme: *scheme,
                x_f16: x_dt == DType::F16,
                dst_f16: ctx.out_shape().dtype == DType::F16,
            });
            Ok(())
        }
        Op::DequantMatMulT { scheme, n, k } => {
            let x = converted(ctx, 0, DType::F32)?;
            let xd = ctx.in_dims(0);
            ctx.push(DequantMatMulGgufT {
                x,
                w_q: ctx.input(1),
                dst: ctx.out(),
                m: ctx.u32(numel(&xd) / (*n).max(1), "m")?,
                k: ctx.u32(*k, "k")?,
                n: ctx.u32(*n, "n")?,
                scheme: *scheme,
            });
            Ok(())
        }
        Op::GroupedMatMul => {
            let x = converted(ctx, 0, DType::F32)?;
            let w = converted(ctx, 1, DType::F32)?;
            let idx = index_i32(ctx, 2)?;
            let xd = ctx.in_dims(0);
            let wd = ctx.in_dims(1);
            ctx.push(GroupedMatMul {
                input: x,
                weight: w,
                expert_idx: idx,
                dst: ctx.out(),
                m: ctx.u32(xd[0], "m")?,
                k_dim: ctx.u32(xd[1], "k")?,
                n: ctx.u32(wd[2], "n")?,
                num_experts: ctx.u32(wd[0], "experts")?,
            });
            Ok(())
        }
        Op::DequantGroupedMatMul {
            scheme,
            num_experts,
            n,
            k,
        } => {
            let x = converted(ctx, 0, DType::F32)?;
            let idx = index_i32(ctx, 2)?;
            let xd = ctx.in_dims(0);
            ctx.push(DequantGroupedMatMulGguf {
                input: x,
                w_q: ctx.input(1),
                expert_idx: idx,
                dst: ctx.out(),
                m: ctx.u32(xd[0], "m")?,
                k_dim: ctx.u32(*k, "k")?,
                n: ctx.u32(*n, "n")?,
                num_experts: ctx.u32(*num_experts, "experts")?,
                scheme: *scheme,
            });
            Ok(())
        }
        _ => super::quant_formats::lower_scaled(ctx, op),
    }
}

fn matmul(ctx: &mut Ctx<'_>) -> Result<(), CompileError> {
    let out_dt = ctx.out_shape().dtype;
    let dt = ctx.half_flag(out_dt, "result")?;
    let (mut ad, mut bd) = (ctx.in_dims(0), ctx.in_dims(1));
    if ad.len() == 1 {
        ad.insert(0, 1);
    }
    if bd.len() == 1 {
        bd.push(1);
    }
    let (m, k) = (ad[ad.len() - 2], ad[ad.len() - 1]);
    let n = bd[bd.len() - 1];
    let batch_a = &ad[..ad.len() - 2];
    let batch_b = &bd[..bd.len() - 2];
    let a_dt = ctx.in_shape(0).dtype;
    let b_dt = ctx.in_shape(1).dtype;
    let (um, uk, un) = (ctx.u32(m, "m")?, ctx.u32(k, "k")?, ctx.u32(n, "n")?);

    if numel(batch_b) == 1 {
        // rhs is one matrix: flatten the lhs batch into rows.
        let b_f16 = out_dt == DType::F32 && a_dt == DType::F32 && b_dt == DType::F16;
        let a = converted(ctx, 0, out_dt)?;
        let b = if b_f16 {
            ctx.input(1)
        } else {
            converted(ctx, 1, out_dt)?
        };
        ctx.push(Sgemm {
            a,
            b,
            c: ctx.out(),
            m: ctx.u32(numel(batch_a) * m, "m")?,
            k: uk,
            n: un,
            dt,
            b_f16,
        });
        return Ok(());
    }
    let mut a = converted(ctx, 0, out_dt)?;
    let mut b = converted(ctx, 1, out_dt)?;
    let to_dims = |d: &[usize]| d.iter().map(|&x| Dim::Static(x)).collect::<Vec<_>>();
    let batch_out: Vec<usize> = broadcast_dims(&to_dims(batch_a), &to_dims(batch_b))
        .map_err(|e| ctx.unsupported(e))?
        .iter()
        .map(|d| d.as_static().unwrap_or(0))
        .collect();
    let nb = numel(&batch_out);
    let same = |x: &[usize]| {
        numel(x) == nb
            && x.iter()
                .rev()
                .zip(batch_out.iter().rev())
                .all(|(p, q)| p == q)
    };
    let (mut a_bcast, mut b_bcast) = (numel(batch_a) == 1, false);
    if !a_bcast && !same(batch_a) {
        let mut from = batch_a.to_vec();
        from.extend([m, k]);
        let mut to = batch_out.clone();
        to.extend([m, k]);
        a = materialize(ctx, a, &from, &to, out_dt)?;
        a_bcast = false;
    }
    if !same(batch_b) {
        if numel(batch_b) == 1 {
            b_bcast = true;
        } else {
            let mut from = batch_b.to_vec();
            from.extend([k, n]);
            let mut to = batch_out.clone();
            to.extend([k, n]);
            b = materialize(ctx, b, &from, &to, out_dt)?;
        }
    }
    ctx.push(BatchedSgemm {
        a,
        b,
        c: ctx.out(),
        batch: ctx.u32(nb, "batch")?,
        m: um,
        k: uk,
        n: un,
        dt,
        a_bcast,
        b_bcast,
    });
    Ok(())
}
