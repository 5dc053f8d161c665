//! Lowering of the training-gradient ops (the `Backward` family) to the
//! seed's gradient thunks: attention (all masks, GQA, both layouts), RMSNorm
//! (input / gamma / beta), RoPE, cumsum, gather, max-pool, conv2d (input /
//! weight), adaLN, gated residual, log-mel and softmax cross-entropy.
//!
//! The thunks compute on f32 (adaLN and the gated residual also on f16);
//! other float operands are converted into f32 scratch and the result cast
//! back. Shapes the thunks cannot express are rewritten around them:
//! - GQA attention: k and v are broadcast to every query head (head `h`
//!   reads key/value head `h / (heads / kv_heads)`), and the k / v gradient
//!   of the expanded heads is summed back per key/value head.
//! - A custom (binary) attention mask becomes the additive bias
//!   `[b, heads, s, kv_s]` (0 where kept, −inf where masked).
//! - Cumsum over a non-last axis runs between two transposes.
//! - Interleaved RoPE with `n_rot == head_dim` runs NeoX pairing between
//!   two transposes of each head (`[half, 2] ↔ [2, half]`).

use super::conv::conv_dims;
use super::elementwise::{materialize, push_cast};
use super::{converted, index_i32, numel, Ctx};
use crate::compile::error::CompileError;
use crate::thunk::attention::AttentionBackward;
use crate::thunk::backward::{
    AdaLayerNormBackward, Conv2dBackwardInput, Conv2dBackwardWeight, CumsumBackward,
    GatedResidualBackward, GatherBackward, MaxPool2dBackward, RmsNormBackwardBeta,
    RmsNormBackwardGamma, RmsNormBackwardInput, RopeBackward,
};
use crate::thunk::binary::Where;
use crate::thunk::host::{HostOp, HostOpDesc};
use crate::thunk::reduce::{Reduce, SoftmaxCrossEntropyBackward};
use crate::thunk::shape::Transpose;
use crate::thunk::signal::LogMelBackward;
use crate::thunk::HalfFlag;
use rlx_ir::op::{AttnLayout, MaskKind, ReduceOp, RopeKind, Wrt};
use rlx_ir::op::{ConvGeom, Window};
use rlx_ir::{DType, Op};

pub(super) fn lower(ctx: &mut Ctx<'_>, op: &Op) -> Result<(), CompileError> {
    match op {
        Op::AttentionBackward {
            wrt,
            heads,
            head_dim,
            mask,
            window,
            layout,
        } => attention(ctx, *wrt, [*heads, *head_dim, *window], *mask, *layout),
        Op::RmsNormBackward { eps, wrt } => rms_norm(ctx, *eps, *wrt),
        Op::RopeBackward {
            kind,
            head_dim,
            n_rot,
        } => rope(ctx, *kind, *head_dim, *n_rot),
        Op::CumsumBackward { axis, exclusive } => cumsum(ctx, *axis, *exclusive),
        Op::GatherBackward { axis, axis_dim } => gather(ctx, *axis, *axis_dim),
        Op::MaxPool2dBackward {
            win:
                Window {
                    kernel,
                    stride,
                    padding,
                },
        } => max_pool(ctx, *kernel, *stride, *padding),
        Op::Conv2dBackwardInput { geom, .. } => conv_input(ctx, geom),
        Op::Conv2dBackwardWeight { geom, kernel } => conv_weight(ctx, geom, *kernel),
        Op::AdaLayerNormBackward { eps, layer_norm } => modulated(ctx, Some((*eps, *layer_norm))),
        Op::GatedResidualBackward => modulated(ctx, None),
        Op::LogMelBackward { n_fft } => log_mel(ctx, *n_fft),
        Op::SoftmaxCrossEntropyBackward => softmax_ce(ctx),
        Op::ScanBackward { .. } => host_op(ctx, op),
        other => Err(ctx.unsupported(format!("{} has no gradient thunk lowering", other.name()))),
    }
}

/// Bytes of `n` elements of `es` bytes, or a `TooLarge` error.
fn nbytes(ctx: &Ctx<'_>, n: usize, es: usize) -> Result<usize, CompileError> {
    n.checked_mul(es).ok_or_else(|| CompileError::TooLarge {
        op: ctx.node().op.name().to_string(),
        msg: format!("{n} elements of {es} bytes overflow"),
        node: ctx.node,
    })
}

/// Product of `dims`, or a `TooLarge` error.
fn count(ctx: &Ctx<'_>, dims: &[usize]) -> Result<usize, CompileError> {
    dims.iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| CompileError::TooLarge {
            op: ctx.node().op.name().to_string(),
            msg: format!("element count of {dims:?} overflows"),
            node: ctx.node,
        })
}

/// Where an f32 thunk writes: the node's value when it is f32, else scratch
/// that [`finish_f32`] casts into it.
fn f32_target(ctx: &mut Ctx<'_>) -> Result<usize, CompileError> {
    if ctx.out_shape().dtype == DType::F32 {
        return Ok(ctx.out());
    }
    let n = count(ctx, &ctx.out_dims())?;
    let b = nbytes(ctx, n, 4)?;
    Ok(ctx.scratch(b))
}

fn finish_f32(ctx: &mut Ctx<'_>, tmp: usize) -> Result<(), CompileError> {
    let out = ctx.out_shape().dtype;
    if out != DType::F32 {
        let len = ctx.u32(numel(&ctx.out_dims()), "elements")?;
        push_cast(ctx, tmp, DType::F32, ctx.out(), out, len);
    }
    Ok(())
}

/// Push a transpose of dense f32 `[o, a, i]` at `src` into `[o, i, a]` at `dst`.
fn swap_axes(ctx: &mut Ctx<'_>, src: usize, dst: usize, d: [usize; 3]) -> Result<(), CompileError> {
    let [o, a, i] = d;
    let total = count(ctx, &d)?;
    ctx.push(Transpose {
        src,
        dst,
        total: ctx.u32(total, "elements")?,
        out_dims: vec![
            ctx.u32(o, "outer")?,
            ctx.u32(i, "inner")?,
            ctx.u32(a, "axis")?,
        ],
        in_strides: vec![
            ctx.u32(total / o.max(1), "stride")?,
            1,
            ctx.u32(i, "stride")?,
        ],
    });
    Ok(())
}

// ------------------------------------------------------------- attention

fn attention(
    ctx: &mut Ctx<'_>,
    wrt: Wrt,
    geom: [usize; 3],
    mask: MaskKind,
    layout: AttnLayout,
) -> Result<(), CompileError> {
    let [heads, head_dim, window] = geom;
    let (qd, kd) = (ctx.in_dims(0), ctx.in_dims(1));
    let bhsd = layout == AttnLayout::Bhsd;
    let (batch, seq, kv_seq, kv_heads) = if bhsd {
        (qd[0], qd[2], kd[2], kd[1])
    } else {
        (qd[0], qd[1], kd[1], kd[2] / head_dim.max(1))
    };
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Err(ctx.bad_param(
            "heads",
            format!("{kv_heads} kv heads do not divide {heads}"),
        ));
    }
    let group = heads / kv_heads;
    let wrt_code = match wrt {
        Wrt::Q => 0,
        Wrt::K => 1,
        Wrt::V => 2,
        other => return Err(ctx.bad_param("wrt", format!("{other:?} is not q, k or v"))),
    };
    let q = converted(ctx, 0, DType::F32)?;
    let dy = converted(ctx, 3, DType::F32)?;
    let mut k = converted(ctx, 1, DType::F32)?;
    let mut v = converted(ctx, 2, DType::F32)?;
    // k / v as [b, kv_s, kvh, 1, d] (bshd) or [b, kvh, 1, kv_s, d] (bhsd),
    // broadcast over the group axis to every query head
    let (grouped_in, grouped) = if bhsd {
        (
            [batch, kv_heads, 1, kv_seq, head_dim],
            [batch, kv_heads, group, kv_seq, head_dim],
        )
    } else {
        (
            [batch, kv_seq, kv_heads, 1, head_dim],
            [batch, kv_seq, kv_heads, group, head_dim],
        )
    };
    if group > 1 {
        count(ctx, &grouped)?;
        k = materialize(ctx, k, &grouped_in, &grouped, DType::F32)?;
        v = materialize(ctx, v, &grouped_in, &grouped, DType::F32)?;
    }
    let full = [batch, heads, seq, kv_seq];
    let mask_off = match mask {
        MaskKind::Custom | MaskKind::Bias => additive_mask(ctx, mask, full)?,
        _ => 0,
    };
    let mask_code = match mask {
        MaskKind::Custom => MaskKind::Bias.code(),
        m => m.code(),
    };
    let out = f32_target(ctx)?;
    // the k / v gradient of every expanded head, summed per group below
    let thunk_out = if group > 1 && wrt_code != 0 {
        let n = count(ctx, &grouped)?;
        let b = nbytes(ctx, n, 4)?;
        ctx.scratch(b)
    } else {
        out
    };
    ctx.push(AttentionBackward {
        q,
        k,
        v,
        dy,
        mask: mask_off,
        out: thunk_out,
        batch: ctx.u32(batch, "batch")?,
        seq: ctx.u32(seq, "seq")?,
        kv_seq: ctx.u32(kv_seq, "kv_seq")?,
        heads: ctx.u32(heads, "heads")?,
        head_dim: ctx.u32(head_dim, "head_dim")?,
        mask_kind: mask_code,
        window: ctx.u32(window, "window")?,
        wrt: wrt_code,
        bhsd: bhsd as u32,
    });
    if thunk_out != out {
        let (outer, inner) = if bhsd {
            (batch * kv_heads, kv_seq * head_dim)
        } else {
            (batch * kv_seq * kv_heads, head_dim)
        };
        ctx.push(Reduce {
            src: thunk_out,
            dst: out,
            outer: ctx.u32(outer, "outer")?,
            reduced: ctx.u32(group, "group")?,
            inner: ctx.u32(inner, "inner")?,
            op: ReduceOp::Sum,
            dt: HalfFlag::F32,
        });
    }
    finish_f32(ctx, out)
}

/// The mask operand (index 4) as the f32 additive bias `[b, heads, s, kv_s]`:
/// a bias is broadcast as is; a binary mask becomes 0 (kept) / −inf (masked).
fn additive_mask(
    ctx: &mut Ctx<'_>,
    kind: MaskKind,
    full: [usize; 4],
) -> Result<usize, CompileError> {
    let md = ctx.in_dims(4);
    let m = converted(ctx, 4, DType::F32)?;
    let n = count(ctx, &full)?;
    let m = if md.as_slice() == full.as_slice() {
        m
    } else {
        materialize(ctx, m, &md, &full, DType::F32)?
    };
    if kind == MaskKind::Bias {
        return Ok(m);
    }
    let bias = ctx.scratch(nbytes(ctx, n, 4)?);
    ctx.push(Where {
        cond: m,
        on_true: ctx.zeros(),
        on_false: ctx.neg_inf(),
        dst: bias,
        len: ctx.u32(n, "mask elements")?,
        cond_scalar: false,
        true_scalar: true,
        false_scalar: true,
    });
    Ok(bias)
}

// ------------------------------------------------------------- norms

fn rms_norm(ctx: &mut Ctx<'_>, eps: f32, wrt: Wrt) -> Result<(), CompileError> {
    let xd = ctx.in_dims(0);
    let h = *xd.last().ok_or_else(|| ctx.bad_param("x", "rank 0"))?;
    let rows = count(ctx, &xd)? / h.max(1);
    let x = converted(ctx, 0, DType::F32)?;
    let gamma = converted(ctx, 1, DType::F32)?;
    let (beta, dy) = if ctx.arity() == 4 {
        (
            converted(ctx, 2, DType::F32)?,
            converted(ctx, 3, DType::F32)?,
        )
    } else {
        // the shared zeros block is at least 8 bytes per element of any row
        (ctx.zeros(), converted(ctx, 2, DType::F32)?)
    };
    let out = f32_target(ctx)?;
    let (rows, h) = (ctx.u32(rows, "rows")?, ctx.u32(h, "h")?);
    match wrt {
        Wrt::Input => ctx.push(RmsNormBackwardInput {
            x,
            gamma,
            beta,
            dy,
            dx: out,
            rows,
            h,
            eps,
        }),
        Wrt::Gamma => ctx.push(RmsNormBackwardGamma {
            x,
            gamma,
            beta,
            dy,
            dgamma: out,
            rows,
            h,
            eps,
        }),
        Wrt::Beta => ctx.push(RmsNormBackwardBeta {
            x,
            gamma,
            beta,
            dy,
            dbeta: out,
            rows,
            h,
            eps,
        }),
        other => return Err(ctx.bad_param("wrt", format!("{other:?} is not input, gamma or beta"))),
    }
    finish_f32(ctx, out)
}

/// adaLN (`norm = Some((eps, layer_norm))`) or gated residual (`None`):
/// operands `[x | y, scale | gate, dy]`, packed flat result.
fn modulated(ctx: &mut Ctx<'_>, norm: Option<(f32, bool)>) -> Result<(), CompileError> {
    let (xd, md) = (ctx.in_dims(0), ctx.in_dims(1));
    let h = *xd.last().ok_or_else(|| ctx.bad_param("x", "rank 0"))?;
    let (nx, nm) = (count(ctx, &xd)?, count(ctx, &md)?);
    let mod_rows = nm / h.max(1);
    let seq_per_mod = (nx / h.max(1)).checked_div(mod_rows).unwrap_or(0);
    let dtype = ctx.out_shape().dtype;
    let (work, dt) = match dtype {
        DType::F16 => (DType::F16, HalfFlag::F16),
        _ => (DType::F32, HalfFlag::F32),
    };
    let x = converted(ctx, 0, work)?;
    let m = converted(ctx, 1, work)?;
    let dy = converted(ctx, 2, work)?;
    let out = if dtype == work {
        ctx.out()
    } else {
        let n = count(ctx, &ctx.out_dims())?;
        let b = nbytes(ctx, n, 4)?;
        ctx.scratch(b)
    };
    let (hh, spm, mr) = (
        ctx.u32(h, "h")?,
        ctx.u32(seq_per_mod, "seq_per_mod")?,
        ctx.u32(mod_rows, "mod_rows")?,
    );
    match norm {
        Some((eps, layer_norm)) => ctx.push(AdaLayerNormBackward {
            x,
            scale: m,
            dy,
            out,
            h: hh,
            eps,
            layer_norm,
            seq_per_mod: spm,
            mod_rows: mr,
            dt,
        }),
        None => ctx.push(GatedResidualBackward {
            y: x,
            gate: m,
            dy,
            out,
            h: hh,
            seq_per_mod: spm,
            mod_rows: mr,
            dt,
        }),
    }
    if dtype != work {
        finish_f32(ctx, out)?;
    }
    Ok(())
}

// ------------------------------------------------------------- rope / scans / indexing

fn rope(
    ctx: &mut Ctx<'_>,
    kind: RopeKind,
    head_dim: usize,
    n_rot: usize,
) -> Result<(), CompileError> {
    let dd = ctx.in_dims(0);
    let (batch, seq, hidden) = (dd[0], dd[1], dd[2]);
    let cos_len = count(ctx, &ctx.in_dims(1))?;
    let n = count(ctx, &dd)?;
    let half = n_rot / 2;
    if kind == RopeKind::Interleaved && n_rot != head_dim {
        return Err(ctx.bad_param(
            "kind",
            format!("interleaved pairing needs n_rot == head_dim ({n_rot} != {head_dim})"),
        ));
    }
    let mut dy = converted(ctx, 0, DType::F32)?;
    let cos = converted(ctx, 1, DType::F32)?;
    let sin = converted(ctx, 2, DType::F32)?;
    let heads_rows = n / head_dim.max(1);
    if kind == RopeKind::Interleaved {
        // pairs (2i, 2i+1) → (i, i + half): [rows·heads, half, 2] → [.., 2, half]
        let t = ctx.scratch(nbytes(ctx, n, 4)?);
        swap_axes(ctx, dy, t, [heads_rows, half, 2])?;
        dy = t;
    }
    let out = f32_target(ctx)?;
    let dst = if kind == RopeKind::Interleaved {
        ctx.scratch(nbytes(ctx, n, 4)?)
    } else {
        out
    };
    ctx.push(RopeBackward {
        dy,
        cos,
        sin,
        dx: dst,
        batch: ctx.u32(batch, "batch")?,
        seq: ctx.u32(seq, "seq")?,
        hidden: ctx.u32(hidden, "hidden")?,
        head_dim: ctx.u32(head_dim, "head_dim")?,
        n_rot: ctx.u32(n_rot, "n_rot")?,
        cos_len: ctx.u32(cos_len, "cos elements")?,
    });
    if kind == RopeKind::Interleaved {
        swap_axes(ctx, dst, out, [heads_rows, 2, half])?;
    }
    finish_f32(ctx, out)
}

fn cumsum(ctx: &mut Ctx<'_>, axis: i64, exclusive: bool) -> Result<(), CompileError> {
    let d = ctx.in_dims(0);
    let ax = ctx.in_shape(0).axis("cumsum_backward", axis)?;
    let (o, a, i) = (count(ctx, &d[..ax])?, d[ax], count(ctx, &d[ax + 1..])?);
    let n = count(ctx, &d)?;
    let mut src = converted(ctx, 0, DType::F32)?;
    let out = f32_target(ctx)?;
    if i != 1 {
        let t = ctx.scratch(nbytes(ctx, n, 4)?);
        swap_axes(ctx, src, t, [o, a, i])?;
        src = t;
    }
    let dst = if i != 1 {
        ctx.scratch(nbytes(ctx, n, 4)?)
    } else {
        out
    };
    ctx.push(CumsumBackward {
        dy: src,
        dx: dst,
        rows: ctx.u32(o * i, "rows")?,
        cols: ctx.u32(a, "cols")?,
        exclusive,
    });
    if i != 1 {
        swap_axes(ctx, dst, out, [o, i, a])?;
    }
    finish_f32(ctx, out)
}

fn gather(ctx: &mut Ctx<'_>, axis: i64, axis_dim: usize) -> Result<(), CompileError> {
    let d = ctx.in_dims(0);
    let ax = ctx.in_shape(0).axis("gather_backward", axis)?;
    let (outer, num_idx, trailing) = (count(ctx, &d[..ax])?, d[ax], count(ctx, &d[ax + 1..])?);
    count(ctx, &[outer, axis_dim, trailing])?;
    let dy = converted(ctx, 0, DType::F32)?;
    let indices = index_i32(ctx, 1)?;
    let dst = f32_target(ctx)?;
    ctx.push(GatherBackward {
        dy,
        indices,
        dst,
        outer: ctx.u32(outer, "outer")?,
        axis_dim: ctx.u32(axis_dim, "axis_dim")?,
        num_idx: ctx.u32(num_idx, "indices")?,
        trailing: ctx.u32(trailing, "trailing")?,
    });
    finish_f32(ctx, dst)
}

// ------------------------------------------------------------- pooling / conv

fn max_pool(
    ctx: &mut Ctx<'_>,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
) -> Result<(), CompileError> {
    let (xd, yd) = (ctx.in_dims(0), ctx.in_dims(1));
    if padding[0] >= kernel[0] || padding[1] >= kernel[1] {
        return Err(ctx.bad_param(
            "padding",
            format!("padding {padding:?} must be smaller than the window {kernel:?}"),
        ));
    }
    let x = converted(ctx, 0, DType::F32)?;
    let dy = converted(ctx, 1, DType::F32)?;
    let dx = f32_target(ctx)?;
    let u = |v: usize, w: &str| ctx.u32(v, w);
    let t = MaxPool2dBackward {
        x,
        dy,
        dx,
        n: u(xd[0], "n")?,
        c: u(xd[1], "c")?,
        h: u(xd[2], "h")?,
        w: u(xd[3], "w")?,
        h_out: u(yd[2], "h_out")?,
        w_out: u(yd[3], "w_out")?,
        kh: u(kernel[0], "kernel")?,
        kw: u(kernel[1], "kernel")?,
        sh: u(stride[0], "stride")?,
        sw: u(stride[1], "stride")?,
        ph: u(padding[0], "padding")?,
        pw: u(padding[1], "padding")?,
    };
    ctx.push(t);
    finish_f32(ctx, dx)
}

/// Conv geometry `[n, c_in, h, w, c_out, h_out, w_out, kh, kw]` checked to fit u32.
fn conv_input(ctx: &mut Ctx<'_>, geom: &ConvGeom) -> Result<(), CompileError> {
    let (yd, wd, xd) = (ctx.in_dims(0), ctx.in_dims(1), ctx.out_dims());
    let groups = geom.groups;
    if groups == 0 || yd[1] % groups != 0 {
        return Err(ctx.bad_param(
            "groups",
            format!("{groups} does not divide c_out {}", yd[1]),
        ));
    }
    count(ctx, &xd)?;
    let d = conv_dims(ctx, &xd, &yd, [wd[2], wd[3]], geom)?;
    let dy = converted(ctx, 0, DType::F32)?;
    let wt = converted(ctx, 1, DType::F32)?;
    let dx = f32_target(ctx)?;
    ctx.push(Conv2dBackwardInput::from_dims([dy, wt, dx], d));
    finish_f32(ctx, dx)
}

fn conv_weight(ctx: &mut Ctx<'_>, geom: &ConvGeom, kernel: [usize; 2]) -> Result<(), CompileError> {
    let (xd, yd) = (ctx.in_dims(0), ctx.in_dims(1));
    let groups = geom.groups;
    if groups == 0 || xd[1] % groups != 0 || yd[1] % groups != 0 {
        return Err(ctx.bad_param(
            "groups",
            format!("{groups} must divide c_in {} and c_out {}", xd[1], yd[1]),
        ));
    }
    let d = conv_dims(ctx, &xd, &yd, kernel, geom)?;
    let x = converted(ctx, 0, DType::F32)?;
    let dy = converted(ctx, 1, DType::F32)?;
    let dw = f32_target(ctx)?;
    ctx.push(Conv2dBackwardWeight::from_dims([x, dy, dw], d));
    finish_f32(ctx, dw)
}

// ------------------------------------------------------------- signal / loss / host

fn log_mel(ctx: &mut Ctx<'_>, n_fft: usize) -> Result<(), CompileError> {
    let (sd, fd) = (ctx.in_dims(0), ctx.in_dims(1));
    let width = n_fft
        .checked_mul(2)
        .ok_or_else(|| ctx.bad_param("n_fft", "overflows"))?;
    if fd[1] > n_fft {
        return Err(ctx.bad_param("n_fft", format!("{} bins exceed n_fft {n_fft}", fd[1])));
    }
    let outer = count(ctx, &sd)? / width.max(1);
    let spec = converted(ctx, 0, DType::F32)?;
    let filters = converted(ctx, 1, DType::F32)?;
    let dy = converted(ctx, 2, DType::F32)?;
    let dst = f32_target(ctx)?;
    ctx.push(LogMelBackward {
        spec,
        filters,
        dy,
        dst,
        outer: ctx.u32(outer, "rows")?,
        n_fft: ctx.u32(n_fft, "n_fft")?,
        n_bins: ctx.u32(fd[1], "n_bins")?,
        n_mels: ctx.u32(fd[0], "n_mels")?,
    });
    finish_f32(ctx, dst)
}

fn softmax_ce(ctx: &mut Ctx<'_>) -> Result<(), CompileError> {
    let d = ctx.in_dims(0);
    let logits = converted(ctx, 0, DType::F32)?;
    let labels = index_i32(ctx, 1)?;
    let d_loss = converted(ctx, 2, DType::F32)?;
    let dlogits = f32_target(ctx)?;
    ctx.push(SoftmaxCrossEntropyBackward {
        logits,
        labels,
        d_loss,
        dlogits,
        n: ctx.u32(d[0], "rows")?,
        c: ctx.u32(d[1], "classes")?,
    });
    finish_f32(ctx, dlogits)
}

/// An op with no thunk of its own (scan's gradient) as a host op over its
/// operands: evaluated by the host executor's numpy bridge.
fn host_op(ctx: &mut Ctx<'_>, op: &Op) -> Result<(), CompileError> {
    let inputs = (0..ctx.arity())
        .map(|i| (ctx.input(i), ctx.in_shape(i).clone()))
        .collect();
    ctx.push(HostOp {
        desc: HostOpDesc {
            op: op.clone(),
            inputs,
            output: (ctx.out(), ctx.out_shape().clone()),
        },
    });
    Ok(())
}

#[cfg(test)]
#[path = "backward_tests.rs"]
mod tests;
