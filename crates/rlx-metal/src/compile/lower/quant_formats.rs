//! Lowering of the non-GGUF weight formats of `dequant_mat_mul` (block
//! int8 / int4, FP8 E4M3 / E5M2, NVFP4) and of the four `scaled_*` ops onto
//! their seed thunks (`DequantMatMulInt8` / `Int4` / `Fp8` / `Nvfp4`,
//! `ScaledMatMul`, `ScaledQuantize`, `ScaledDequantize`, `ScaledQuantScale`).
//!
//! Operands the thunks read as f32 (activations, scales, zero points, bias)
//! are converted into scratch when the graph holds them in another dtype; a
//! per-tensor FP8 scale (`[1]`) is broadcast to one per output row, the
//! layout the thunk reads. Parameter combinations the kernels cannot run are
//! [`CompileError::BadParam`] errors naming the op and the parameter.

use super::elementwise::materialize;
use super::{converted, numel, Ctx};
use crate::compile::error::CompileError;
use crate::thunk::matmul::{ScaledDequantize, ScaledMatMul, ScaledQuantScale, ScaledQuantize};
use crate::thunk::quant::{
    DequantMatMulFp8, DequantMatMulInt4, DequantMatMulInt8, DequantMatMulNvfp4,
};
use rlx_ir::quant::QuantScheme;
use rlx_ir::{DType, Op};

/// Operand `i` (a scale, zero point or bias) as f32, converted into scratch
/// when stored in another numeric dtype.
fn aux_f32(ctx: &mut Ctx<'_>, i: usize, what: &str) -> Result<usize, CompileError> {
    let dt = ctx.in_shape(i).dtype;
    if dt == DType::Bool || dt.is_complex() {
        return Err(ctx.bad_param(what, format!("dtype {dt}; a real number type is needed")));
    }
    converted(ctx, i, DType::F32)
}

/// `x @ dequant(w_q)ᵀ` for every non-GGUF scheme.
pub(super) fn dequant_matmul(
    ctx: &mut Ctx<'_>,
    scheme: QuantScheme,
    n: usize,
    k: usize,
) -> Result<(), CompileError> {
    let m = numel(&ctx.in_dims(0)) / k.max(1);
    let (um, uk, un) = (ctx.u32(m, "m")?, ctx.u32(k, "k")?, ctx.u32(n, "n")?);
    let x = converted(ctx, 0, DType::F32)?;
    let w_q = ctx.input(1);
    let dst = ctx.out();
    match scheme {
        QuantScheme::Int8 {
            block_size,
            asymmetric,
        }
        | QuantScheme::Int4 {
            block_size,
            asymmetric,
        } => {
            let four = matches!(scheme, QuantScheme::Int4 { .. });
            if four && block_size % 2 != 0 {
                // the IR's packed row (k / bs blocks of ceil(bs / 2) bytes)
                // would then differ from the kernel's ceil(k / 2) bytes
                return Err(ctx.bad_param(
                    "block_size",
                    format!("int4 block_size = {block_size} must be even (blocks are whole bytes)"),
                ));
            }
            let scale = aux_f32(ctx, 2, "scale")?;
            let zp = if asymmetric {
                aux_f32(ctx, 3, "zero point")?
            } else {
                ctx.zeros()
            };
            if four {
                ctx.push(DequantMatMulInt4 {
                    x,
                    w_q,
                    scale,
                    zp,
                    dst,
                    m: um,
                    k: uk,
                    n: un,
                    block_size,
                    is_asymmetric: asymmetric,
                });
            } else {
                ctx.push(DequantMatMulInt8 {
                    x,
                    w_q,
                    scale,
                    zp,
                    dst,
                    m: um,
                    k: uk,
                    n: un,
                    block_size,
                    is_asymmetric: asymmetric,
                });
            }
        }
        QuantScheme::Fp8E4m3 | QuantScheme::Fp8E5m2 => {
            let mut scale = aux_f32(ctx, 2, "scale")?;
            if numel(&ctx.in_dims(2)) != n {
                // per-tensor scale: one per output row for the kernel
                scale = materialize(ctx, scale, &[1], &[n], DType::F32)?;
            }
            ctx.push(DequantMatMulFp8 {
                x,
                w_q,
                scale,
                dst,
                m: um,
                k: uk,
                n: un,
                e5m2: scheme == QuantScheme::Fp8E5m2,
            });
        }
        QuantScheme::Nvfp4 => {
            let bdt = ctx.in_shape(2).dtype;
            if bdt != DType::U8 {
                return Err(ctx.bad_param(
                    "block scale",
                    format!("NVFP4 block scales must be u8 E4M3 codes, got {bdt}"),
                ));
            }
            let scale = ctx.input(2);
            let global_scale = aux_f32(ctx, 3, "global scale")?;
            ctx.push(DequantMatMulNvfp4 {
                x,
                w_q,
                scale,
                global_scale,
                dst,
                m: um,
                k: uk,
                n: un,
            });
        }
        QuantScheme::Gguf(_) => {
            return Err(ctx.unsupported("GGUF schemes lower through DequantMatMulGguf"));
        }
    }
    Ok(())
}

/// The four `scaled_*` ops.
pub(super) fn lower_scaled(ctx: &mut Ctx<'_>, op: &Op) -> Result<(), CompileError> {
    match *op {
        Op::ScaledMatMul {
            lhs_fmt,
            rhs_fmt,
            layout,
        } => {
            let (ld, rd) = (ctx.in_dims(0), ctx.in_dims(1));
            let (m, k, n) = (ld[0], ld[1], rd[0]);
            let lhs_scale = aux_f32(ctx, 2, "lhs_scale")?;
            let rhs_scale = aux_f32(ctx, 3, "rhs_scale")?;
            let has_bias = ctx.arity() > 4;
            let bias = if has_bias {
                aux_f32(ctx, 4, "bias")?
            } else {
                ctx.zeros()
            };
            ctx.push(ScaledMatMul {
                lhs: ctx.input(0),
                rhs: ctx.input(1),
                lhs_scale,
                rhs_scale,
                bias,
                dst: ctx.out(),
                m: ctx.u32(m, "m")?,
                k: ctx.u32(k, "k")?,
                n: ctx.u32(n, "n")?,
                lhs_fmt,
                rhs_fmt,
                layout,
                has_bias,
            });
        }
        Op::ScaledQuantize { fmt, layout } => {
            let d = ctx.in_dims(0);
            let x = converted(ctx, 0, DType::F32)?;
            let scale = aux_f32(ctx, 1, "scale")?;
            ctx.push(ScaledQuantize {
                x,
                scale,
                dst: ctx.out(),
                rows: ctx.u32(d[0], "rows")?,
                cols: ctx.u32(d[1], "cols")?,
                fmt,
                layout,
            });
        }
        Op::ScaledDequantize { fmt, layout } => {
            let d = ctx.in_dims(0);
            let scale = aux_f32(ctx, 1, "scale")?;
            ctx.push(ScaledDequantize {
                codes: ctx.input(0),
                scale,
                dst: ctx.out(),
                rows: ctx.u32(d[0], "rows")?,
                cols: ctx.u32(d[1], "cols")?,
                fmt,
                layout,
            });
        }
        Op::ScaledQuantScale { fmt, layout } => {
            let d = ctx.in_dims(0);
            let x = converted(ctx, 0, DType::F32)?;
            ctx.push(ScaledQuantScale {
                x,
                dst: ctx.out(),
                rows: ctx.u32(d[0], "rows")?,
                cols: ctx.u32(d[1], "cols")?,
                fmt,
                layout,
            });
        }
        _ => return Err(ctx.unsupported("not a matmul-family op")),
    }
    Ok(())
}
