//! Lowering of convolution and pooling (NCHW): conv2d and transposed conv2d
//! (bias added by a channel-broadcast binary op), pooling, im2col.
//!
//! Direct conv or im2col + GEMM ([`gemm_plan`]): an ungrouped conv whose
//! GEMM is big enough for tiles to pay (`c_out >= 16` rows and a
//! reduction `c_in·kh·kw >= 32`) becomes `Im2Col` into scratch and one
//! batched GEMM `weight [c_out, K] @ col[b] [K, h_out·w_out]` (a 1×1,
//! stride-1, unpadded conv skips the im2col: the input already is the
//! column matrix), unless the column matrix would exceed
//! [`IM2COL_MAX_BYTES`]. Grouped and depthwise convs, and small ones, stay
//! one `Conv2D` thunk (a direct kernel: one thread per output, no scratch).

use super::{converted, elementwise, numel, Ctx};
use crate::compile::error::CompileError;
use crate::thunk::binary::BinaryBroadcast;
use crate::thunk::conv::{Conv2D, ConvDims, ConvTranspose2d, Im2Col, Pool2D};
use crate::thunk::matmul::BatchedSgemm;
use crate::thunk::HalfFlag;
use rlx_ir::op::BinaryOp;
use rlx_ir::op::{ConvGeom, Window};
use rlx_ir::{DType, Op};

/// `out += bias[c]` over NCHW `dims`, in place.
fn add_channel_bias(
    ctx: &mut Ctx<'_>,
    out: usize,
    bias: usize,
    dims: &[usize],
) -> Result<(), CompileError> {
    let (c, hw) = (dims[1], dims[2] * dims[3]);
    ctx.push(BinaryBroadcast {
        lhs: out,
        rhs: bias,
        dst: out,
        len: ctx.u32(dims.iter().product(), "elements")?,
        op: BinaryOp::Add,
        dt: crate::thunk::HalfFlag::F32,
        rank: 4,
        out_dims: dims.iter().map(|&d| d as u32).collect(),
        lhs_strides: vec![(c * hw) as u32, hw as u32, dims[3] as u32, 1],
        rhs_strides: vec![0, 1, 0, 0],
    });
    Ok(())
}

/// Largest im2col column matrix (bytes) the GEMM path allocates.
pub const IM2COL_MAX_BYTES: usize = 64 << 20;
/// Least output channels (GEMM rows) for the GEMM path.
pub const GEMM_MIN_C_OUT: u32 = 16;
/// Least reduction length `c_in·kh·kw` for the GEMM path.
pub const GEMM_MIN_K: u64 = 32;

/// How a `Conv2D` runs: `None` for the direct kernel, else the column
/// matrix's scratch bytes (0 for a 1×1 conv that reads its input as is).
pub(crate) fn gemm_plan(c: &Conv2D) -> Option<usize> {
    let k = c.c_in as u64 * c.kh as u64 * c.kw as u64;
    if c.groups > 1 || c.c_out < GEMM_MIN_C_OUT || k < GEMM_MIN_K {
        return None;
    }
    let pointwise = c.kh == 1
        && c.kw == 1
        && c.sh == 1
        && c.sw == 1
        && c.ph == 0
        && c.pw == 0
        && c.h_out == c.h
        && c.w_out == c.w;
    if pointwise {
        return Some(0);
    }
    let bytes = (c.n as u64)
        .checked_mul(k)?
        .checked_mul(c.h_out as u64 * c.w_out as u64)?
        .checked_mul(4)?;
    usize::try_from(bytes)
        .ok()
        .filter(|&b| b <= IM2COL_MAX_BYTES)
}

/// Push `c` as the direct `Conv2D` or as (`Im2Col` +) `BatchedSgemm`.
fn push_conv(ctx: &mut Ctx<'_>, c: Conv2D) -> Result<(), CompileError> {
    let Some(bytes) = gemm_plan(&c) else {
        ctx.push(c);
        return Ok(());
    };
    let k = ctx.u32(
        c.c_in as usize * c.kh as usize * c.kw as usize,
        "c_in * kh * kw",
    )?;
    let hw = ctx.u32(c.h_out as usize * c.w_out as usize, "h_out * w_out")?;
    let col = if bytes == 0 {
        c.src
    } else {
        let col = ctx.scratch(bytes);
        ctx.push(Im2Col::from_dims([c.src, col], c.dims()));
        col
    };
    ctx.push(BatchedSgemm {
        a: c.weight,
        b: col,
        c: c.dst,
        batch: c.n,
        m: c.c_out,
        k,
        n: hw,
        dt: HalfFlag::F32,
        a_bcast: true,
        b_bcast: false,
    });
    Ok(())
}

/// The [`ConvDims`] of input dims `x` `[n, c_in, h, w]`, output dims `y`
/// `[n, c_out, h_out, w_out]`, kernel `k` and `geom`, each checked to fit
/// in u32.
pub(super) fn conv_dims(
    ctx: &Ctx<'_>,
    x: &[usize],
    y: &[usize],
    [kh, kw]: [usize; 2],
    geom: &ConvGeom,
) -> Result<ConvDims, CompileError> {
    let u = |v: usize, what: &str| ctx.u32(v, what);
    let ConvGeom {
        stride,
        padding,
        dilation,
        groups,
    } = geom;
    Ok(ConvDims {
        n: u(x[0], "n")?,
        c_in: u(x[1], "c_in")?,
        h: u(x[2], "h")?,
        w: u(x[3], "w")?,
        c_out: u(y[1], "c_out")?,
        h_out: u(y[2], "h_out")?,
        w_out: u(y[3], "w_out")?,
        kh: u(kh, "kh")?,
        kw: u(kw, "kw")?,
        sh: u(stride[0], "stride")?,
        sw: u(stride[1], "stride")?,
        ph: u(padding[0], "padding")?,
        pw: u(padding[1], "padding")?,
        dh: u(dilation[0], "dilation")?,
        dw: u(dilation[1], "dilation")?,
        groups: u(*groups, "groups")?,
    })
}

/// An f32 result goes straight to the node's output; an f16 one is
/// computed in f32 into scratch (f16 operands converted first) and cast.
pub(super) fn lower(ctx: &mut Ctx<'_>, op: &Op) -> Result<(), CompileError> {
    match ctx.out_shape().dtype {
        DType::F32 => lower_f32(ctx, op, ctx.out()),
        DType::F16 => {
            let n = numel(&ctx.out_dims());
            let len = ctx.u32(n, "elements")?;
            let tmp = ctx.scratch(n * 4);
            lower_f32(ctx, op, tmp)?;
            elementwise::push_cast(ctx, tmp, DType::F32, ctx.out(), DType::F16, len);
            Ok(())
        }
        other => Err(ctx.unsupported(format!(
            "input dtype {other}: convolution and pooling run in f32 and f16 only"
        ))),
    }
}

/// The op's thunks with an f32 result at `dst`.
fn lower_f32(ctx: &mut Ctx<'_>, op: &Op, dst: usize) -> Result<(), CompileError> {
    let xd = ctx.in_dims(0);
    let od = ctx.out_dims();
    let x = converted(ctx, 0, DType::F32)?;
    let u = |ctx: &Ctx<'_>, v: usize, w: &str| ctx.u32(v, w);
    match op {
        Op::Conv2d { geom } | Op::ConvTranspose2d { geom, .. } => {
            let wd = ctx.in_dims(1);
            let weight = converted(ctx, 1, DType::F32)?;
            let d = conv_dims(ctx, &xd, &od, [wd[2], wd[3]], geom)?;
            let ops = [x, weight, dst];
            if matches!(op, Op::Conv2d { .. }) {
                push_conv(ctx, Conv2D::from_dims(ops, d))?;
            } else {
                ctx.push(ConvTranspose2d::from_dims(ops, d));
            }
            if ctx.arity() > 2 {
                let b = converted(ctx, 2, DType::F32)?;
                add_channel_bias(ctx, dst, b, &od)?;
            }
            Ok(())
        }
        Op::Pool2d {
            win:
                Window {
                    kernel,
                    stride,
                    padding,
                },
            kind,
        } => {
            ctx.push(Pool2D {
                src: x,
                dst,
                n: u(ctx, xd[0], "n")?,
                c: u(ctx, xd[1], "c")?,
                h: u(ctx, xd[2], "h")?,
                w: u(ctx, xd[3], "w")?,
                h_out: u(ctx, od[2], "h_out")?,
                w_out: u(ctx, od[3], "w_out")?,
                kh: u(ctx, kernel[0], "kernel")?,
                kw: u(ctx, kernel[1], "kernel")?,
                sh: u(ctx, stride[0], "stride")?,
                sw: u(ctx, stride[1], "stride")?,
                ph: u(ctx, padding[0], "padding")?,
                pw: u(ctx, padding[1], "padding")?,
                kind: *kind,
            });
            Ok(())
        }
        Op::Im2Col {
            win:
                Window {
                    kernel,
                    stride,
                    padding,
                },
            dilation,
        } => {
            let (kh, kw) = (kernel[0], kernel[1]);
            let h_out = (xd[2] + 2 * padding[0] - dilation[0] * (kh - 1) - 1) / stride[0] + 1;
            let w_out = (xd[3] + 2 * padding[1] - dilation[1] * (kw - 1) - 1) / stride[1] + 1;
            ctx.push(Im2Col {
                x,
                col: dst,
                n: u(ctx, xd[0], "n")?,
                c_in: u(ctx, xd[1], "c_in")?,
                h: u(ctx, xd[2], "h")?,
                w: u(ctx, xd[3], "w")?,
                h_out: u(ctx, h_out, "h_out")?,
                w_out: u(ctx, w_out, "w_out")?,
                kh: u(ctx, kh, "kernel")?,
                kw: u(ctx, kw, "kernel")?,
                sh: u(ctx, stride[0], "stride")?,
                sw: u(ctx, stride[1], "stride")?,
                ph: u(ctx, padding[0], "padding")?,
                pw: u(ctx, padding[1], "padding")?,
                dh: u(ctx, dilation[0], "dilation")?,
                dw_dil: u(ctx, dilation[1], "dilation")?,
            });
            Ok(())
        }
        _ => Err(ctx.unsupported("not a conv op")),
    }
}
