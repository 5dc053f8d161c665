//! Lowering of convolution and pooling (NCHW): conv2d and transposed conv2d
//! (bias added by a channel-broadcast binary op), pooling, im2col.

use super::{converted, Ctx};
use crate::compile::error::CompileError;
use crate::thunk::binary::BinaryBroadcast;
use crate::thunk::conv::{Conv2D, ConvTranspose2d, Im2Col, Pool2D};
use rlx_ir::op::BinaryOp;
use rlx_ir::{DType, Op};

/// `dst = src + bias[c]` over NCHW `dims`, in place when `src == dst`.
fn add_channel_bias(ctx: &mut Ctx<'_>, bias: usize, dims: &[usize]) -> Result<(), CompileError> {
    let out = ctx.out();
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

pub(super) fn lower(ctx: &mut Ctx<'_>, op: &Op) -> Result<(), CompileError> {
    if ctx.out_shape().dtype != DType::F32 {
        return Err(ctx.unsupported("convolution and pooling run in f32 only"));
    }
    let xd = ctx.in_dims(0);
    let od = ctx.out_dims();
    let x = converted(ctx, 0, DType::F32)?;
    let u = |ctx: &Ctx<'_>, v: usize, w: &str| ctx.u32(v, w);
    match op {
        Op::Conv2d {
            stride,
            padding,
            dilation,
            groups,
        } => {
            let wd = ctx.in_dims(1);
            let weight = converted(ctx, 1, DType::F32)?;
            ctx.push(Conv2D {
                src: x,
                weight,
                dst: ctx.out(),
                n: u(ctx, xd[0], "n")?,
                c_in: u(ctx, xd[1], "c_in")?,
                h: u(ctx, xd[2], "h")?,
                w: u(ctx, xd[3], "w")?,
                c_out: u(ctx, od[1], "c_out")?,
                h_out: u(ctx, od[2], "h_out")?,
                w_out: u(ctx, od[3], "w_out")?,
                kh: u(ctx, wd[2], "kh")?,
                kw: u(ctx, wd[3], "kw")?,
                sh: u(ctx, stride[0], "stride")?,
                sw: u(ctx, stride[1], "stride")?,
                ph: u(ctx, padding[0], "padding")?,
                pw: u(ctx, padding[1], "padding")?,
                dh: u(ctx, dilation[0], "dilation")?,
                dw: u(ctx, dilation[1], "dilation")?,
                groups: u(ctx, *groups, "groups")?,
            });
            if ctx.arity() > 2 {
                let b = converted(ctx, 2, DType::F32)?;
                add_channel_bias(ctx, b, &od)?;
            }
            Ok(())
        }
        Op::ConvTranspose2d {
            stride,
            padding,
            dilation,
            groups,
            ..
        } => {
            let wd = ctx.in_dims(1);
            let weight = converted(ctx, 1, DType::F32)?;
            ctx.push(ConvTranspose2d {
                src: x,
                weight,
                dst: ctx.out(),
                n: u(ctx, xd[0], "n")?,
                c_in: u(ctx, xd[1], "c_in")?,
                h: u(ctx, xd[2], "h")?,
                w_in: u(ctx, xd[3], "w")?,
                c_out: u(ctx, od[1], "c_out")?,
                h_out: u(ctx, od[2], "h_out")?,
                w_out: u(ctx, od[3], "w_out")?,
                kh: u(ctx, wd[2], "kh")?,
                kw: u(ctx, wd[3], "kw")?,
                sh: u(ctx, stride[0], "stride")?,
                sw: u(ctx, stride[1], "stride")?,
                ph: u(ctx, padding[0], "padding")?,
                pw: u(ctx, padding[1], "padding")?,
                dh: u(ctx, dilation[0], "dilation")?,
                dw: u(ctx, dilation[1], "dilation")?,
                groups: u(ctx, *groups, "groups")?,
                dt: crate::thunk::HalfFlag::F32,
            });
            if ctx.arity() > 2 {
                let b = converted(ctx, 2, DType::F32)?;
                add_channel_bias(ctx, b, &od)?;
            }
            Ok(())
        }
        Op::Pool2d {
            kind,
            kernel,
            stride,
            padding,
        } => {
            ctx.push(Pool2D {
                src: x,
                dst: ctx.out(),
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
            kernel,
            stride,
            padding,
            dilation,
        } => {
            let (kh, kw) = (kernel[0], kernel[1]);
            let h_out = (xd[2] + 2 * padding[0] - dilation[0] * (kh - 1) - 1) / stride[0] + 1;
            let w_out = (xd[3] + 2 * padding[1] - dilation[1] * (kw - 1) - 1) / stride[1] + 1;
            ctx.push(Im2Col {
                x,
                col: ctx.out(),
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
