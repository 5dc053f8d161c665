//! Shape inference for gradient ops.
//!
//! Where a gradient mirrors a forward op of this crate, the forward's
//! inference is re-run on the forward operands (passing the backward `op`,
//! so that errors carry the backward op's name) and the incoming gradient
//! must have exactly the forward result's shape. Packed results (adaLN,
//! gated residual, splats, scan) are laid out as documented on each variant
//! in `op/mod.rs`.

use super::common::*;
use super::{conv, misc, sequence, signal};
use crate::error::{IrError, Result};
use crate::op::{AttnLayout, MaskKind, Op, ReduceOp, Wrt};
use crate::shape::{broadcast_dims, Dim, Shape};

pub(super) fn infer(op: &Op, inputs: &[&Shape]) -> Result<Shape> {
    match op {
        Op::SoftmaxCrossEntropyBackward => softmax_ce_backward(op, inputs),
        Op::AttentionBackward {
            wrt,
            heads,
            head_dim,
            mask,
            window,
            layout,
        } => attention_backward(
            op,
            inputs,
            *wrt,
            [*heads, *head_dim, *window],
            *mask,
            *layout,
        ),
        Op::RmsNormBackward { eps, wrt } => rms_norm_backward(op, inputs, *eps, *wrt),
        Op::RopeBackward {
            head_dim, n_rot, ..
        } => rope_backward(op, inputs, *head_dim, *n_rot),
        Op::CumsumBackward { axis, .. } => {
            arity(op, inputs, 1)?;
            let dy = inputs[0];
            float_dtype(op, dy, "dy")?;
            dy.axis(op.name(), *axis)?;
            Ok(dy.clone())
        }
        Op::GatherBackward { axis, axis_dim } => {
            arity(op, inputs, 2)?;
            let (dy, idx) = (inputs[0], inputs[1]);
            float_dtype(op, dy, "dy")?;
            rank_is(op, idx, 1, "idx")?;
            int_dtype(op, idx, "idx")?;
            positive(op, *axis_dim, "axis_dim")?;
            let a = dy.axis(op.name(), *axis)?;
            dims_equal(op, &dy.dims[a], &idx.dims[0], "dy axis vs index count")?;
            let mut dims = dy.dims.clone();
            dims[a] = Dim::Static(*axis_dim);
            Ok(dy.with_dims(dims))
        }
        Op::MaxPool2dBackward { win } => {
            arity(op, inputs, 2)?;
            let (x, dy) = (inputs[0], inputs[1]);
            let y = conv::pool2d(op, &[x], ReduceOp::Max, win)?;
            same_shape(op, dy, &y, "dy vs pooled output")?;
            Ok(x.clone())
        }
        Op::Conv2dBackwardInput { geom, input_hw } => {
            let groups = &geom.groups;
            arity(op, inputs, 2)?;
            let (dy, w) = (inputs[0], inputs[1]);
            rank_is(op, dy, 4, "dy")?;
            rank_is(op, w, 4, "weight")?;
            positive(op, *groups, "groups")?;
            all_positive(op, input_hw, "input_hw")?;
            let per_group = static_dim(op, &w.dims[1], "weight dim 1 (c_in/groups)")?;
            let c_in = checked_mul(op, per_group, *groups, "input channels")?;
            let x = dy.with_dims(vec![
                dy.dims[0].clone(),
                Dim::Static(c_in),
                Dim::Static(input_hw[0]),
                Dim::Static(input_hw[1]),
            ]);
            let y = conv::conv2d(op, &[&x, w], geom)?;
            same_shape(op, dy, &y, "dy vs forward conv output")?;
            Ok(x)
        }
        Op::Conv2dBackwardWeight { geom, kernel } => {
            let groups = &geom.groups;
            arity(op, inputs, 2)?;
            let (x, dy) = (inputs[0], inputs[1]);
            rank_is(op, x, 4, "input")?;
            rank_is(op, dy, 4, "dy")?;
            positive(op, *groups, "groups")?;
            all_positive(op, kernel, "kernel")?;
            let c_in = static_dim(op, &x.dims[1], "input channels")?;
            let c_out = static_dim(op, &dy.dims[1], "dy channels")?;
            let w = x.with_dims(vec![
                Dim::Static(c_out),
                Dim::Static(c_in / groups),
                Dim::Static(kernel[0]),
                Dim::Static(kernel[1]),
            ]);
            let y = conv::conv2d(op, &[x, &w], geom)?;
            same_shape(op, dy, &y, "dy vs forward conv output")?;
            Ok(w)
        }
        Op::AdaLayerNormBackward { eps, .. } => {
            arity(op, inputs, 3)?;
            finite(op, *eps, "eps")?;
            let (x, scale, dy) = (inputs[0], inputs[1], inputs[2]);
            let (nx, ns) = modulated(op, x, scale, "scale")?;
            same_shape(op, dy, x, "dy vs x")?;
            let total = ns
                .checked_mul(2)
                .and_then(|v| v.checked_add(nx))
                .ok_or_else(|| IrError::shape(op.name(), "packed gradient size overflows"))?;
            Ok(Shape::of(&[total], x.dtype))
        }
        Op::GatedResidualBackward => {
            arity(op, inputs, 3)?;
            let (y, gate, d_out) = (inputs[0], inputs[1], inputs[2]);
            let (ny, ng) = modulated(op, y, gate, "gate")?;
            same_shape(op, d_out, y, "d_out vs y")?;
            let total = ny
                .checked_mul(2)
                .and_then(|v| v.checked_add(ng))
                .ok_or_else(|| IrError::shape(op.name(), "packed gradient size overflows"))?;
            Ok(Shape::of(&[total], y.dtype))
        }
        Op::LogMelBackward { n_fft } => {
            arity(op, inputs, 3)?;
            let y = signal::log_mel(op, &inputs[..2], *n_fft)?;
            same_shape(op, inputs[2], &y, "dy vs log-mel output")?;
            Ok(inputs[0].clone())
        }
        Op::GaussianSplatRenderBackward {
            cfg,
            loss_grad_clip,
            sh_band,
            max_anisotropy,
        } => {
            arity(op, inputs, 8)?;
            let k = misc::splat_operands(op, &inputs[..7], cfg)?;
            finite(op, *loss_grad_clip, "loss_grad_clip")?;
            finite(op, *max_anisotropy, "max_anisotropy")?;
            if *loss_grad_clip <= 0.0 || *max_anisotropy < 1.0 {
                return Err(IrError::attr(
                    op.name(),
                    format!(
                        "loss_grad_clip must be > 0 and max_anisotropy >= 1, got \
                         {loss_grad_clip} and {max_anisotropy}"
                    ),
                ));
            }
            // Checked before squaring so that a huge band cannot overflow;
            // k = 0 (colours, no SH) takes band 0.
            if *sh_band > 3 || (*sh_band as usize + 1).pow(2) > k.max(1) {
                return Err(IrError::attr(
                    op.name(),
                    format!(
                        "sh_band {sh_band} needs <= 3 and (band+1)² <= {k} SH coefficients \
                         (band 0 without SH)"
                    ),
                ));
            }
            let pos = inputs[0];
            let image = Shape::of(&[cfg.height as usize, cfg.width as usize, 3], pos.dtype);
            same_shape(op, inputs[7], &image, "d_loss vs rendered image")?;
            let width = checked_mul(op, k, 3, "sh gradient width")?
                .checked_add(14)
                .ok_or_else(|| IrError::shape(op.name(), "gradient width overflows"))?;
            Ok(pos.with_dims(vec![pos.dims[0].clone(), Dim::Static(width)]))
        }
        Op::SpdBackward { kind, eps } => {
            arity(op, inputs, misc::spd_arity(*kind) + 1)?;
            let (fwd, dy) = inputs.split_at(inputs.len() - 1);
            let y = misc::spd(op, fwd, *kind, *eps)?;
            same_shape(op, dy[0], &y, "dy vs forward output")?;
            Ok(fwd[0].clone())
        }
        Op::ScanBackward { scan: s, wrt_xs } => {
            scan_backward(op, inputs, &s.body, s.num_carry, s.length, *wrt_xs)
        }
        _ => Err(wrong_family(op, "backward")),
    }
}

fn softmax_ce_backward(op: &Op, inputs: &[&Shape]) -> Result<Shape> {
    arity(op, inputs, 3)?;
    let (logits, labels, d_loss) = (inputs[0], inputs[1], inputs[2]);
    rank_is(op, logits, 2, "logits")?;
    float_dtype(op, logits, "logits")?;
    rank_is(op, labels, 1, "labels")?;
    int_dtype(op, labels, "labels")?;
    rank_is(op, d_loss, 1, "d_loss")?;
    same_dtype(op, logits, d_loss)?;
    dims_equal(
        op,
        &labels.dims[0],
        &logits.dims[0],
        "labels rows vs logits rows",
    )?;
    dims_equal(
        op,
        &d_loss.dims[0],
        &logits.dims[0],
        "d_loss rows vs logits rows",
    )?;
    Ok(logits.clone())
}

/// Attention gradient. `geom` is `[heads, head_dim, window]`.
fn attention_backward(
    op: &Op,
    inputs: &[&Shape],
    wrt: Wrt,
    geom: [usize; 3],
    mask: MaskKind,
    layout: AttnLayout,
) -> Result<Shape> {
    let [heads, head_dim, window] = geom;
    arity(op, inputs, 4 + usize::from(mask.has_input()))?;
    positive(op, heads, "heads")?;
    positive(op, head_dim, "head_dim")?;
    match (mask, window) {
        (MaskKind::SlidingWindow, 0) => {
            return Err(IrError::attr(op.name(), "sliding_window needs window >= 1"))
        }
        (MaskKind::SlidingWindow, _) | (_, 0) => {}
        _ => {
            return Err(IrError::attr(
                op.name(),
                format!("window {window} is only meaningful with sliding_window masking"),
            ))
        }
    }
    let (q, k, v, dy) = (inputs[0], inputs[1], inputs[2], inputs[3]);
    float_dtype(op, q, "q")?;
    for s in [k, v, dy] {
        same_dtype(op, q, s)?;
    }
    same_shape(op, v, k, "v vs k")?;
    same_shape(op, dy, q, "dy vs q")?;
    let (b, s, kv_s, kv_heads) = match layout {
        AttnLayout::Bshd => {
            rank_is(op, q, 3, "q (bshd)")?;
            rank_is(op, k, 3, "k (bshd)")?;
            let inner = checked_mul(op, heads, head_dim, "heads·head_dim")?;
            dim_is(op, &q.dims[2], inner, "q last dim (heads·head_dim)")?;
            let kv_inner = static_dim(op, &k.dims[2], "k last dim")?;
            if kv_inner % head_dim != 0 {
                return Err(IrError::shape(
                    op.name(),
                    format!("k {k} last dim is not a multiple of head_dim {head_dim}"),
                ));
            }
            (&q.dims[0], &q.dims[1], &k.dims[1], kv_inner / head_dim)
        }
        AttnLayout::Bhsd => {
            rank_is(op, q, 4, "q (bhsd)")?;
            rank_is(op, k, 4, "k (bhsd)")?;
            dim_is(op, &q.dims[1], heads, "q dim 1 (heads)")?;
            dim_is(op, &q.dims[3], head_dim, "q dim 3 (head_dim)")?;
            dim_is(op, &k.dims[3], head_dim, "k dim 3 (head_dim)")?;
            let kv_heads = static_dim(op, &k.dims[1], "k dim 1 (kv heads)")?;
            (&q.dims[0], &q.dims[2], &k.dims[2], kv_heads)
        }
    };
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Err(IrError::shape(
            op.name(),
            format!("{kv_heads} key/value heads must divide {heads} query heads (k {k})"),
        ));
    }
    dims_equal(op, &k.dims[0], b, "k batch vs q batch")?;
    if let Some(m) = inputs.get(4) {
        if mask == MaskKind::Bias {
            float_dtype(op, m, "bias")?;
        }
        rank_at_least(op, m, 2, "mask")?;
        let target = [b.clone(), Dim::Static(heads), s.clone(), kv_s.clone()];
        if broadcast_dims(&m.dims, &target).ok().as_deref() != Some(&target[..]) {
            return Err(IrError::shape(
                op.name(),
                format!(
                    "mask {m} does not broadcast to [batch, heads, seq, kv_seq] = {}",
                    crate::shape::dims_string(&target)
                ),
            ));
        }
    }
    match wrt {
        Wrt::Q => Ok(q.clone()),
        Wrt::K => Ok(k.clone()),
        Wrt::V => Ok(v.clone()),
        other => Err(IrError::attr(
            op.name(),
            format!("wrt must be q, k or v, got {other:?}"),
        )),
    }
}

fn rms_norm_backward(op: &Op, inputs: &[&Shape], eps: f32, wrt: Wrt) -> Result<Shape> {
    arity_range(op, inputs, 3, 4)?;
    finite(op, eps, "eps")?;
    let x = inputs[0];
    float_dtype(op, x, "x")?;
    let h = x.last(op.name())?;
    let (params, dy) = inputs[1..].split_at(inputs.len() - 2);
    for (p, what) in params.iter().zip(["gamma", "beta"]) {
        rank_is(op, p, 1, what)?;
        same_dtype(op, x, p)?;
        dims_equal(op, &p.dims[0], h, &format!("{what} length vs hidden size"))?;
    }
    same_shape(op, dy[0], x, "dy vs x")?;
    match wrt {
        Wrt::Input => Ok(x.clone()),
        Wrt::Gamma => Ok(params[0].clone()),
        Wrt::Beta => params.get(1).map(|b| (*b).clone()).ok_or_else(|| {
            IrError::attr(op.name(), "wrt beta needs the [x, gamma, beta, dy] form")
        }),
        other => Err(IrError::attr(
            op.name(),
            format!("wrt must be input, gamma or beta, got {other:?}"),
        )),
    }
}

fn rope_backward(op: &Op, inputs: &[&Shape], head_dim: usize, n_rot: usize) -> Result<Shape> {
    arity(op, inputs, 3)?;
    positive(op, head_dim, "head_dim")?;
    if n_rot == 0 || !n_rot.is_multiple_of(2) || n_rot > head_dim {
        return Err(IrError::attr(
            op.name(),
            format!("n_rot {n_rot} must be even and in 2..={head_dim}"),
        ));
    }
    let (dy, cos, sin) = (inputs[0], inputs[1], inputs[2]);
    rank_is(op, dy, 3, "dy")?;
    float_dtype(op, dy, "dy")?;
    let hidden = static_dim(op, &dy.dims[2], "dy hidden size")?;
    if hidden % head_dim != 0 {
        return Err(IrError::shape(
            op.name(),
            format!("dy {dy} hidden size is not a multiple of head_dim {head_dim}"),
        ));
    }
    rank_is(op, cos, 2, "cos")?;
    same_dtype(op, dy, cos)?;
    same_shape(op, sin, cos, "sin vs cos")?;
    dim_is(op, &cos.dims[1], n_rot / 2, "cos dim 1 (n_rot/2)")?;
    let rows = &cos.dims[0];
    let per_token = match (dy.dims[0].as_static(), dy.dims[1].as_static()) {
        (Some(b), Some(s)) => b.checked_mul(s).map(Dim::Static),
        _ => None,
    };
    if rows != &dy.dims[1] && per_token.as_ref() != Some(rows) {
        return Err(IrError::shape(
            op.name(),
            format!("cos {cos} must have seq ({}) or batch·seq rows", dy.dims[1]),
        ));
    }
    Ok(dy.clone())
}

/// Check that `m` modulates `x` (adaLN scale, gated-residual gate): equal
/// rank, equal last dim, and leading dims that equal a prefix of `x`'s
/// leading dims followed only by 1s, so that each row of `m` covers one
/// contiguous run of `x` rows. Both must be static float tensors of one
/// dtype. Returns `(numel(x), numel(m))`.
fn modulated(op: &Op, x: &Shape, m: &Shape, what: &str) -> Result<(usize, usize)> {
    rank_at_least(op, x, 1, "x")?;
    float_dtype(op, x, "x")?;
    same_dtype(op, x, m)?;
    let xd = static_dims(op, x, "x")?;
    let md = static_dims(op, m, what)?;
    let lead = xd.len() - 1;
    let prefix_then_ones = md.len() == xd.len() && md[lead] == xd[lead] && {
        let split = (0..lead).find(|&i| md[i] != xd[i]).unwrap_or(lead);
        md[split..lead].iter().all(|&d| d == 1)
    };
    if !prefix_then_ones {
        return Err(IrError::shape(
            op.name(),
            format!(
                "{what} {m} must have x's rank and last dim, and leading dims equal to a \
                 prefix of x's followed by 1s (x {x})"
            ),
        ));
    }
    let numel = |d: &[usize]| {
        d.iter()
            .try_fold(1usize, |acc, &n| acc.checked_mul(n))
            .ok_or_else(|| IrError::shape(op.name(), "element count overflows"))
    };
    Ok((numel(&xd)?, numel(&md)?))
}

fn scan_backward(
    op: &Op,
    inputs: &[&Shape],
    body: &crate::graph::Graph,
    num_carry: usize,
    length: usize,
    wrt_xs: bool,
) -> Result<Shape> {
    arity_range(op, inputs, num_carry.saturating_add(1), usize::MAX)?;
    let (fwd, dy) = inputs.split_at(inputs.len() - 1);
    let y = sequence::scan(op, fwd, body, num_carry, length)?;
    same_shape(op, dy[0], &y, "dy vs stacked y")?;
    let targets = if wrt_xs {
        &fwd[num_carry..]
    } else {
        &fwd[..num_carry]
    };
    let Some(first) = targets.first() else {
        return Err(IrError::attr(
            op.name(),
            format!(
                "nothing to differentiate: no {}",
                if wrt_xs {
                    "scanned operands"
                } else {
                    "carries"
                }
            ),
        ));
    };
    let mut total = 0usize;
    for (i, t) in targets.iter().enumerate() {
        let what = format!("gradient target {i}");
        float_dtype(op, t, &what)?;
        same_dtype(op, first, t)?;
        let n = t
            .numel()
            .ok_or_else(|| IrError::shape(op.name(), format!("{what} {t} must be static")))?;
        total = total
            .checked_add(n)
            .ok_or_else(|| IrError::shape(op.name(), "packed gradient size overflows"))?;
    }
    Ok(Shape::of(&[total], first.dtype))
}
