//! Shape inference for the matmul family: dense matmul (numpy semantics),
//! the fused bias/activation matmul, quantised and grouped (MoE) matmuls, and
//! the scaled low-precision GEMM with its quantise / dequantise / scale ops.

use super::common::*;
use crate::dtype::DType;
use crate::error::{IrError, Result};
use crate::op::Op;
use crate::quant::{QuantScheme, ScaleLayout};
use crate::shape::{broadcast_dims, Dim, Shape};

pub(super) fn infer(op: &Op, inputs: &[&Shape]) -> Result<Shape> {
    match op {
        Op::MatMul => {
            arity(op, inputs, 2)?;
            matmul(op, inputs[0], inputs[1])
        }
        Op::FusedMatMulBiasAct { act } => {
            arity(op, inputs, 3)?;
            let (a, w, bias) = (inputs[0], inputs[1], inputs[2]);
            rank_at_least(op, a, 1, "a")?;
            rank_is(op, w, 2, "w")?;
            let k = a.last(op.name())?;
            if k != w.dim(0) {
                return Err(inner_mismatch(op, a, w));
            }
            let n = w.dim(1);
            expect_vector(op, bias, n, "bias")?;
            let dt = promote_all(inputs);
            if let Some(act) = act {
                if act.needs_float() && !dt.is_inexact() {
                    return Err(IrError::dtype(
                        op.name(),
                        format!("{} epilogue needs a float dtype, got {dt}", act.name()),
                    ));
                }
            }
            Ok(Shape::new(with_last(&a.dims, n.clone()), dt))
        }
        Op::DequantMatMul { scheme, n, k } => dequant_matmul(op, *scheme, *n, *k, inputs),
        Op::DequantMatMulT { scheme, n, k } => dequant_matmul_t(op, *scheme, *n, *k, inputs),
        Op::GroupedMatMul => {
            arity(op, inputs, 3)?;
            let (x, w, idx) = (inputs[0], inputs[1], inputs[2]);
            rank_is(op, x, 2, "x")?;
            rank_is(op, w, 3, "w")?;
            int_dtype(op, idx, "expert_idx")?;
            if x.dim(1) != w.dim(1) {
                return Err(inner_mismatch(op, x, w));
            }
            expect_vector(op, idx, x.dim(0), "expert_idx")?;
            Ok(Shape::new(
                vec![x.dim(0).clone(), w.dim(2).clone()],
                x.dtype.promote(w.dtype),
            ))
        }
        Op::DequantGroupedMatMul {
            scheme,
            num_experts,
            n,
            k,
        } => {
            arity(op, inputs, 3)?;
            if !matches!(scheme, QuantScheme::Gguf(_)) {
                return Err(IrError::attr(
                    op.name(),
                    format!("expert weights must use a GGUF scheme, got {scheme}"),
                ));
            }
            nonzero_attr(op, *num_experts, "num_experts")?;
            let row_bytes = packed_row_bytes(op, *scheme, *n, *k)?;
            let (x, w, idx) = (inputs[0], inputs[1], inputs[2]);
            rank_is(op, x, 2, "x")?;
            float_dtype(op, x, "x")?;
            dims_equal(op, x.dim(1), &Dim::Static(*k), "last dim of x must equal k")?;
            dtype_is(op, w, DType::U8, "w_q")?;
            let want: Vec<Dim> = [*num_experts, *n, row_bytes].map(Dim::Static).into();
            expect_dims(op, w, &want, "w_q")?;
            int_dtype(op, idx, "expert_idx")?;
            expect_vector(op, idx, x.dim(0), "expert_idx")?;
            Ok(Shape::new(
                vec![x.dim(0).clone(), Dim::Static(*n)],
                DType::F32,
            ))
        }
        Op::ScaledMatMul { layout, .. } => {
            arity_range(op, inputs, 4, 5)?;
            let (lhs, rhs) = (inputs[0], inputs[1]);
            let (m, k) = codes_2d(op, lhs, "lhs")?;
            let (n, k2) = codes_2d(op, rhs, "rhs")?;
            if k != k2 {
                return Err(IrError::shape(
                    op.name(),
                    format!("inner dims differ: {lhs} @ {rhs}ᵀ"),
                ));
            }
            scale_operand(op, *layout, inputs[2], m, k, "lhs_scale")?;
            scale_operand(op, *layout, inputs[3], n, k, "rhs_scale")?;
            if let Some(bias) = inputs.get(4) {
                float_dtype(op, bias, "bias")?;
                expect_vector(op, bias, n, "bias")?;
            }
            Ok(Shape::new(vec![m.clone(), n.clone()], DType::F32))
        }
        Op::ScaledQuantize { layout, .. } => {
            arity(op, inputs, 2)?;
            let x = inputs[0];
            rank_is(op, x, 2, "x")?;
            float_dtype(op, x, "x")?;
            scale_operand(op, *layout, inputs[1], x.dim(0), x.dim(1), "scale")?;
            Ok(x.with_dtype(DType::U8))
        }
        Op::ScaledDequantize { layout, .. } => {
            arity(op, inputs, 2)?;
            let codes = inputs[0];
            let (r, c) = codes_2d(op, codes, "codes")?;
            scale_operand(op, *layout, inputs[1], r, c, "scale")?;
            Ok(codes.with_dtype(DType::F32))
        }
        Op::ScaledQuantScale { layout, .. } => {
            arity(op, inputs, 1)?;
            let x = inputs[0];
            rank_is(op, x, 2, "x")?;
            float_dtype(op, x, "x")?;
            let dims = scale_dims(op, *layout, x.dim(0), x.dim(1))?;
            Ok(Shape::new(dims, DType::F32))
        }
        _ => Err(IrError::Unsupported {
            op: op.name().into(),
            msg: "not a matmul op".into(),
        }),
    }
}

/// `[mat_mul] inner dims differ: f32[2, 3] @ f32[4, 5]`.
fn inner_mismatch(op: &Op, a: &Shape, b: &Shape) -> IrError {
    IrError::shape(op.name(), format!("inner dims differ: {a} @ {b}"))
}

/// `dims` with the last one replaced by `last` (`dims` must be non-empty).
fn with_last(dims: &[Dim], last: Dim) -> Vec<Dim> {
    let mut out = dims.to_vec();
    match out.last_mut() {
        Some(d) => *d = last,
        None => out.push(last),
    }
    out
}

/// numpy `matmul`: rank-1 operands are promoted (`[k]` → `[1, k]` on the
/// left, `[k, 1]` on the right) and the added dim dropped from the result;
/// batch dims broadcast.
fn matmul(op: &Op, a: &Shape, b: &Shape) -> Result<Shape> {
    if a.rank() == 0 || b.rank() == 0 {
        return Err(IrError::shape(
            op.name(),
            format!("operands must have rank >= 1: {a} @ {b}"),
        ));
    }
    let (ar, br) = (a.rank(), b.rank());
    // (batch, m, k) of the left operand; m is None for a vector.
    let (a_batch, m, k) = if ar == 1 {
        (&a.dims[..0], None, &a.dims[0])
    } else {
        (&a.dims[..ar - 2], Some(&a.dims[ar - 2]), &a.dims[ar - 1])
    };
    let (b_batch, k2, n) = if br == 1 {
        (&b.dims[..0], &b.dims[0], None)
    } else {
        (&b.dims[..br - 2], &b.dims[br - 2], Some(&b.dims[br - 1]))
    };
    if k != k2 {
        return Err(inner_mismatch(op, a, b));
    }
    let mut dims = broadcast_dims(a_batch, b_batch).map_err(|_| {
        IrError::shape(op.name(), format!("batch dims do not broadcast: {a} @ {b}"))
    })?;
    dims.extend(m.cloned());
    dims.extend(n.cloned());
    Ok(Shape::new(dims, a.dtype.promote(b.dtype)))
}

/// Bytes per packed weight row, checking `n`, `k` and the block geometry.
fn packed_row_bytes(op: &Op, scheme: QuantScheme, n: usize, k: usize) -> Result<usize> {
    nonzero_attr(op, n, "n")?;
    nonzero_attr(op, k, "k")?;
    let block = scheme.block_size();
    if block == 0 || !k.is_multiple_of(block) {
        return Err(IrError::attr(
            op.name(),
            format!("k = {k} is not a multiple of the {scheme} block size {block}"),
        ));
    }
    // Same value as `QuantScheme::row_bytes`, without overflow on absurd k.
    mul_attr(op, k / block, scheme.block_bytes(), "packed row bytes")
}

/// `dy [.., n] @ dequant(w_q)` → `[.., k]` f32 (GGUF blocks only).
fn dequant_matmul_t(
    op: &Op,
    scheme: QuantScheme,
    n: usize,
    k: usize,
    inputs: &[&Shape],
) -> Result<Shape> {
    if !matches!(scheme, QuantScheme::Gguf(_)) {
        return Err(IrError::attr(
            op.name(),
            format!("only GGUF block formats are supported, got {scheme}"),
        ));
    }
    arity(op, inputs, 2)?;
    let row_bytes = packed_row_bytes(op, scheme, n, k)?;
    let (x, w) = (inputs[0], inputs[1]);
    rank_at_least(op, x, 1, "dy")?;
    float_dtype(op, x, "dy")?;
    if x.last(op.name())? != &Dim::Static(n) {
        return Err(IrError::shape(
            op.name(),
            format!("last dim of dy must equal n = {n}, got {x}"),
        ));
    }
    dtype_is(op, w, DType::U8, "w_q")?;
    expect_dims(op, w, &[Dim::Static(n), Dim::Static(row_bytes)], "w_q")?;
    Ok(Shape::new(with_last(&x.dims, Dim::Static(k)), DType::F32))
}

/// `x @ dequant(w_q)ᵀ` with the scheme's auxiliary tensors.
///
/// Aux element counts (checked when static; their layout is the lowering's):
/// Int8/Int4 scales and zero points one per block (`n · k / block`), FP8 one
/// scale per row (`n`) or one per tensor (`1`), NVFP4 block scales (`n · k / 16`, u8 E4M3 codes or
/// float) then one global scale.
fn dequant_matmul(
    op: &Op,
    scheme: QuantScheme,
    n: usize,
    k: usize,
    inputs: &[&Shape],
) -> Result<Shape> {
    arity(op, inputs, 2 + scheme.aux_inputs())?;
    let row_bytes = packed_row_bytes(op, scheme, n, k)?;
    let (x, w) = (inputs[0], inputs[1]);
    rank_at_least(op, x, 1, "x")?;
    float_dtype(op, x, "x")?;
    if x.last(op.name())? != &Dim::Static(k) {
        return Err(IrError::shape(
            op.name(),
            format!("last dim of x must equal k = {k}, got {x}"),
        ));
    }
    dtype_is(op, w, DType::U8, "w_q")?;
    expect_dims(op, w, &[Dim::Static(n), Dim::Static(row_bytes)], "w_q")?;
    let blocks = mul_attr(op, n, k / scheme.block_size().max(1), "scale blocks")?;
    let aux_counts: Vec<(usize, &str)> = match scheme {
        QuantScheme::Gguf(_) => vec![],
        QuantScheme::Int8 { .. } | QuantScheme::Int4 { .. } => {
            vec![(blocks, "scale"), (blocks, "zero point")]
        }
        QuantScheme::Fp8E4m3 | QuantScheme::Fp8E5m2 => vec![(n, "scale")],
        QuantScheme::Nvfp4 => vec![(blocks, "block scale"), (1, "global scale")],
    };
    for (s, (count, what)) in inputs[2..].iter().zip(aux_counts) {
        if s.dtype.is_complex() || s.dtype == DType::Bool {
            return Err(IrError::dtype(
                op.name(),
                format!("{what} must be numeric, got {s}"),
            ));
        }
        if let Some(got) = s.numel() {
            // FP8 takes one scale per output row or one for the whole tensor
            let per_tensor_fp8 =
                got == 1 && matches!(scheme, QuantScheme::Fp8E4m3 | QuantScheme::Fp8E5m2);
            if got != count && !per_tensor_fp8 {
                return Err(IrError::shape(
                    op.name(),
                    format!("{what} must hold {count} element(s) for {scheme}, got {s}"),
                ));
            }
        }
    }
    Ok(Shape::new(with_last(&x.dims, Dim::Static(n)), DType::F32))
}

/// A `[rows, cols]` u8 code operand; returns its two dims.
fn codes_2d<'a>(op: &Op, s: &'a Shape, what: &str) -> Result<(&'a Dim, &'a Dim)> {
    rank_is(op, s, 2, what)?;
    dtype_is(op, s, DType::U8, what)?;
    Ok((s.dim(0), s.dim(1)))
}

/// A float scale tensor laid out per `layout` for a `[rows, cols]` operand.
fn scale_operand(
    op: &Op,
    layout: ScaleLayout,
    s: &Shape,
    rows: &Dim,
    cols: &Dim,
    what: &str,
) -> Result<()> {
    float_dtype(op, s, what)?;
    let want = scale_dims(op, layout, rows, cols)?;
    expect_dims(op, s, &want, what)
}

#[cfg(test)]
mod tests;
