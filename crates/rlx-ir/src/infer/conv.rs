//! Shape inference for convolution and pooling on NCHW tensors.
//!
//! Window arithmetic follows PyTorch (`torch.nn.Conv2d`, `ConvTranspose2d`,
//! `MaxPool2d` / `AvgPool2d`, `Unfold`):
//!
//! * forward window: `out = floor((len + 2·pad − dil·(k − 1) − 1) / stride) + 1`
//! * transposed:     `out = (len − 1)·stride − 2·pad + dil·(k − 1) + out_pad + 1`
//!
//! Both must give at least 1. Channel counts and kernel sizes must be static
//! (weights are static); batch may be symbolic, and a symbolic spatial size
//! passes through only a window that provably preserves it (stride 1 and the
//! padding exactly cancelling the kernel span), because [`Dim`] cannot carry
//! arithmetic on symbols.

use super::common::*;
use crate::error::{IrError, Result};
use crate::op::{ConvGeom, Op, ReduceOp, Window};
use crate::shape::{Dim, Shape};

pub(super) fn infer(op: &Op, inputs: &[&Shape]) -> Result<Shape> {
    match op {
        Op::Conv2d { geom } => conv2d(op, inputs, geom),
        Op::ConvTranspose2d {
            geom,
            output_padding,
        } => conv_transpose2d(op, inputs, geom, *output_padding),
        Op::Pool2d { kind, win } => pool2d(op, inputs, *kind, win),
        Op::Im2Col { win, dilation } => im2col(op, inputs, win, *dilation),
        _ => Err(wrong_family(op, "conv")),
    }
}

/// `(height, width)` of NCHW `x` after a forward window `kernel` with
/// `stride`, `padding` and `dilation` (per axis, [`window_out`]).
fn spatial_out(
    op: &Op,
    x: &Shape,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
) -> Result<(Dim, Dim)> {
    let axis = |i: usize, what: &str| {
        window_out(
            op,
            &x.dims[2 + i],
            kernel[i],
            stride[i],
            padding[i],
            dilation[i],
            what,
        )
    };
    Ok((axis(0, "output height")?, axis(1, "output width")?))
}

/// Length of one spatial axis after a forward window (conv, pool, im2col);
/// see the module doc for the formula and the rule on symbols.
pub(super) fn window_out(
    op: &Op,
    len: &Dim,
    k: usize,
    stride: usize,
    pad: usize,
    dil: usize,
    what: &str,
) -> Result<Dim> {
    if k == 0 || stride == 0 || dil == 0 {
        return Err(IrError::attr(
            op.name(),
            format!("{what}: kernel, stride and dilation must be >= 1 (got {k}, {stride}, {dil})"),
        ));
    }
    // Span of the dilated kernel, dil·(k − 1) + 1.
    let span = checked_mul(op, dil, k - 1, what)?
        .checked_add(1)
        .ok_or_else(|| IrError::shape(op.name(), format!("{what}: kernel span overflows")))?;
    let two_pad = checked_mul(op, pad, 2, what)?;
    match len {
        Dim::Sym(_) => {
            if stride == 1 && two_pad == span - 1 {
                Ok(len.clone())
            } else {
                Err(IrError::shape(
                    op.name(),
                    format!(
                        "{what}: symbolic size {len} needs a length-preserving window \
                         (stride 1, 2·padding = dilation·(kernel − 1)); got kernel {k}, \
                         stride {stride}, padding {pad}, dilation {dil}"
                    ),
                ))
            }
        }
        Dim::Static(n) => {
            let padded = n.checked_add(two_pad).ok_or_else(|| {
                IrError::shape(op.name(), format!("{what}: padded size overflows"))
            })?;
            if padded < span {
                return Err(IrError::shape(
                    op.name(),
                    format!(
                        "{what}: kernel span {span} (kernel {k}, dilation {dil}) exceeds the \
                         padded size {padded} ({n} + 2·{pad}); output would be empty"
                    ),
                ));
            }
            Ok(Dim::Static((padded - span) / stride + 1))
        }
    }
}

/// One axis of a window: kernel, stride, padding, dilation.
#[derive(Clone, Copy)]
struct Win {
    k: usize,
    stride: usize,
    pad: usize,
    dil: usize,
}

/// Length of one spatial axis after a transposed window (module doc).
fn transposed_out(op: &Op, len: &Dim, w: Win, out_pad: usize, what: &str) -> Result<Dim> {
    let Win {
        k,
        stride,
        pad,
        dil,
    } = w;
    let overflow = || IrError::shape(op.name(), format!("{what}: output size overflows"));
    // dil·(k − 1) + out_pad + 1: what the window adds beyond the strided input.
    let grow = checked_mul(op, dil, k.saturating_sub(1), what)?
        .checked_add(out_pad)
        .and_then(|v| v.checked_add(1))
        .ok_or_else(overflow)?;
    let two_pad = checked_mul(op, pad, 2, what)?;
    match len {
        Dim::Sym(_) => {
            if stride == 1 && grow == two_pad + 1 {
                Ok(len.clone())
            } else {
                Err(IrError::shape(
                    op.name(),
                    format!(
                        "{what}: symbolic size {len} needs a length-preserving transposed window \
                         (stride 1, dilation·(kernel − 1) + output_padding = 2·padding)"
                    ),
                ))
            }
        }
        Dim::Static(n) => {
            if *n == 0 {
                return Err(IrError::shape(
                    op.name(),
                    format!("{what}: input size must be >= 1"),
                ));
            }
            let full = checked_mul(op, n - 1, stride, what)?
                .checked_add(grow)
                .ok_or_else(overflow)?;
            if full <= two_pad {
                return Err(IrError::shape(
                    op.name(),
                    format!(
                        "{what}: padding 2·{pad} removes the whole output ({full} before padding)"
                    ),
                ));
            }
            Ok(Dim::Static(full - two_pad))
        }
    }
}

/// Check an optional bias operand: rank 1, `[c_out]`, the input's dtype.
fn bias(op: &Op, b: Option<&&Shape>, c_out: usize, x: &Shape) -> Result<()> {
    if let Some(b) = b {
        rank_is(op, b, 1, "bias")?;
        same_dtype(op, x, b)?;
        dim_is(op, &b.dims[0], c_out, "bias length (output channels)")?;
    }
    Ok(())
}

/// The static channel count of an NCHW operand (dim 1), at least 1.
fn channels(op: &Op, x: &Shape, what: &str) -> Result<usize> {
    let c = static_dim(op, &x.dims[1], what)?;
    positive(op, c, what)?;
    Ok(c)
}

/// `Conv2d` inference; also used by the conv backward ops (which pass their
/// own `op` so that errors carry their name).
pub(super) fn conv2d(op: &Op, inputs: &[&Shape], geom: &ConvGeom) -> Result<Shape> {
    let ConvGeom {
        stride,
        padding,
        dilation,
        groups,
    } = *geom;
    arity_range(op, inputs, 2, 3)?;
    let (x, w) = (inputs[0], inputs[1]);
    all_positive(op, &stride, "stride")?;
    all_positive(op, &dilation, "dilation")?;
    positive(op, groups, "groups")?;
    rank_is(op, x, 4, "input")?;
    float_dtype(op, x, "input")?;
    rank_is(op, w, 4, "weight")?;
    same_dtype(op, x, w)?;
    let c_in = channels(op, x, "input channels")?;
    let wd = static_dims(op, w, "weight")?;
    let (c_out, c_per_group, kh, kw) = (wd[0], wd[1], wd[2], wd[3]);
    if c_in % groups != 0 {
        return Err(IrError::shape(
            op.name(),
            format!("input channels {c_in} are not divisible by groups {groups}"),
        ));
    }
    if c_per_group != c_in / groups {
        return Err(IrError::shape(
            op.name(),
            format!(
                "weight {w} must be [c_out, {}, kh, kw] for {c_in} input channels in {groups} group(s)",
                c_in / groups
            ),
        ));
    }
    if c_out == 0 || c_out % groups != 0 {
        return Err(IrError::shape(
            op.name(),
            format!("output channels {c_out} must be a positive multiple of groups {groups}"),
        ));
    }
    all_positive(op, &[kh, kw], "kernel (weight dims 2, 3)")?;
    bias(op, inputs.get(2), c_out, x)?;
    let (oh, ow) = spatial_out(op, x, [kh, kw], stride, padding, dilation)?;
    Ok(Shape::new(
        vec![x.dims[0].clone(), Dim::Static(c_out), oh, ow],
        x.dtype,
    ))
}

fn conv_transpose2d(
    op: &Op,
    inputs: &[&Shape],
    geom: &ConvGeom,
    output_padding: [usize; 2],
) -> Result<Shape> {
    let ConvGeom {
        stride,
        padding,
        dilation,
        groups,
    } = *geom;
    arity_range(op, inputs, 2, 3)?;
    let (x, w) = (inputs[0], inputs[1]);
    all_positive(op, &stride, "stride")?;
    all_positive(op, &dilation, "dilation")?;
    positive(op, groups, "groups")?;
    for i in 0..2 {
        if output_padding[i] >= stride[i].max(dilation[i]) {
            return Err(IrError::attr(
                op.name(),
                format!(
                    "output_padding {output_padding:?} must be smaller than max(stride, dilation) \
                     on each axis (stride {stride:?}, dilation {dilation:?})"
                ),
            ));
        }
    }
    rank_is(op, x, 4, "input")?;
    float_dtype(op, x, "input")?;
    rank_is(op, w, 4, "weight")?;
    same_dtype(op, x, w)?;
    let c_in = channels(op, x, "input channels")?;
    let wd = static_dims(op, w, "weight")?;
    let (w_in, c_out_per_group, kh, kw) = (wd[0], wd[1], wd[2], wd[3]);
    if c_in % groups != 0 {
        return Err(IrError::shape(
            op.name(),
            format!("input channels {c_in} are not divisible by groups {groups}"),
        ));
    }
    if w_in != c_in {
        return Err(IrError::shape(
            op.name(),
            format!("weight {w} must be [c_in = {c_in}, c_out/groups, kh, kw]"),
        ));
    }
    positive(
        op,
        c_out_per_group,
        "output channels per group (weight dim 1)",
    )?;
    all_positive(op, &[kh, kw], "kernel (weight dims 2, 3)")?;
    let c_out = checked_mul(op, c_out_per_group, groups, "output channels")?;
    bias(op, inputs.get(2), c_out, x)?;
    let win = |i: usize, k: usize| Win {
        k,
        stride: stride[i],
        pad: padding[i],
        dil: dilation[i],
    };
    let oh = transposed_out(
        op,
        &x.dims[2],
        win(0, kh),
        output_padding[0],
        "output height",
    )?;
    let ow = transposed_out(
        op,
        &x.dims[3],
        win(1, kw),
        output_padding[1],
        "output width",
    )?;
    Ok(Shape::new(
        vec![x.dims[0].clone(), Dim::Static(c_out), oh, ow],
        x.dtype,
    ))
}

/// `Pool2d` inference; also used by `MaxPool2dBackward` (with its own `op`).
pub(super) fn pool2d(op: &Op, inputs: &[&Shape], kind: ReduceOp, win: &Window) -> Result<Shape> {
    let Window {
        kernel,
        stride,
        padding,
    } = *win;
    arity(op, inputs, 1)?;
    if !matches!(kind, ReduceOp::Max | ReduceOp::Mean) {
        return Err(IrError::attr(
            op.name(),
            format!("pooling kind must be max or mean, got {}", kind.name()),
        ));
    }
    all_positive(op, &kernel, "kernel")?;
    all_positive(op, &stride, "stride")?;
    if padding[0] > kernel[0] / 2 || padding[1] > kernel[1] / 2 {
        return Err(IrError::attr(
            op.name(),
            format!("padding {padding:?} must be at most half the kernel {kernel:?}"),
        ));
    }
    let x = inputs[0];
    rank_is(op, x, 4, "input")?;
    float_dtype(op, x, "input")?;
    let (oh, ow) = spatial_out(op, x, kernel, stride, padding, [1, 1])?;
    Ok(x.with_dims(vec![x.dims[0].clone(), x.dims[1].clone(), oh, ow]))
}

fn im2col(op: &Op, inputs: &[&Shape], win: &Window, dilation: [usize; 2]) -> Result<Shape> {
    let Window {
        kernel,
        stride,
        padding,
    } = *win;
    arity(op, inputs, 1)?;
    all_positive(op, &kernel, "kernel")?;
    all_positive(op, &stride, "stride")?;
    all_positive(op, &dilation, "dilation")?;
    let x = inputs[0];
    rank_is(op, x, 4, "input")?;
    let (oh, ow) = spatial_out(op, x, kernel, stride, padding, dilation)?;
    let taps = checked_mul(op, kernel[0], kernel[1], "kernel taps")?;
    let rows = dim_mul(op, &x.dims[1], &Dim::Static(taps), "c·kh·kw")?;
    let cols = dim_mul(op, &oh, &ow, "h_out·w_out")?;
    Ok(x.with_dims(vec![x.dims[0].clone(), rows, cols]))
}
