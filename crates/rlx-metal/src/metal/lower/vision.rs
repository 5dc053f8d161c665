//! NCHW image thunks → `vision.metal`: `Conv2D` (direct), `ConvTranspose2d`,
//! `Im2Col`, `Pool2D` (max / mean), `MaxPool2dBackward`,
//! `ResizeNearest2x`, `LayerNorm2d`, one thread per output element.
//!
//! Which convolutions reach the direct kernel is decided earlier, when the
//! graph is lowered to thunks (`compile::lower::conv`): an ungrouped conv
//! with a large enough reduction becomes `Im2Col` + a batched GEMM (the
//! matmul family), the rest stay `Conv2D` and run here.
//!
//! Stay on the host: geometry the host rejects (zero stride / dilation /
//! kernel, groups not dividing the channels), outputs overlapping an input
//! (except `LayerNorm2d`'s exact in place), and any tensor of 2³¹ elements
//! or more (the kernels index planes in 32-bit `int`).

use super::{aliased, elementwise, kernel, suffix, Lowered};
use crate::metal::args::{Conv2dArgs, LayerNorm2dArgs, Pool2dArgs, Resize2xArgs};
use crate::metal::kernels::Family;
use crate::thunk::conv::ConvDims;
use crate::thunk::{HalfFlag, Thunk};
use rlx_ir::op::ReduceOp;

/// The [`Conv2dArgs`] of conv-like geometry, a zero group count read as
/// one.
fn conv_args(d: ConvDims) -> Conv2dArgs {
    Conv2dArgs {
        groups: d.groups.max(1),
        ..d.into()
    }
}

/// The [`Pool2dArgs`] of `Pool2D` / `MaxPool2dBackward` `$p` (same fields).
macro_rules! pool_args {
    ($p:expr) => {
        Pool2dArgs {
            n: $p.n,
            c: $p.c,
            h: $p.h,
            w: $p.w,
            h_out: $p.h_out,
            w_out: $p.w_out,
            kh: $p.kh,
            kw: $p.kw,
            sh: $p.sh,
            sw: $p.sw,
            ph: $p.ph,
            pw: $p.pw,
        }
    };
}

/// The element count of `dims` when it is below 2³¹.
fn count(dims: &[u32]) -> Option<u32> {
    let n = dims
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d as u64))?;
    (n < 1 << 31).then_some(n as u32)
}

/// A 1-D dispatch of `kernel` over `total` outputs (`Skip` when empty).
fn launch(
    i: usize,
    name: &str,
    dt: HalfFlag,
    args: &impl crate::metal::args::KernelArgs,
    offs: &[usize],
    total: u32,
) -> Lowered {
    if total == 0 {
        return Lowered::Skip;
    }
    let k = kernel(Family::Vision, format!("{name}_{}", suffix(dt)));
    Lowered::Dispatch(elementwise(i, k, args, offs, total))
}

/// Stride, dilation and kernel all non-zero, `groups` dividing both
/// channel counts.
fn valid(a: &Conv2dArgs) -> bool {
    [a.kh, a.kw, a.sh, a.sw, a.dh, a.dw, a.groups]
        .iter()
        .all(|&v| v > 0)
        && a.c_in.is_multiple_of(a.groups)
        && a.c_out.is_multiple_of(a.groups)
}

/// The vision thunks; `None` for everything else and for what stays on
/// the host (module doc).
pub(super) fn lower(i: usize, t: &Thunk) -> Option<Lowered> {
    let in_place_ok = matches!(t, Thunk::LayerNorm2d(_));
    let ours = matches!(
        t,
        Thunk::Conv2D(_)
            | Thunk::ConvTranspose2d(_)
            | Thunk::Im2Col(_)
            | Thunk::Pool2D(_)
            | Thunk::MaxPool2dBackward(_)
            | Thunk::ResizeNearest2x(_)
            | Thunk::LayerNorm2d(_)
    );
    if !ours || (!in_place_ok && aliased(t)) {
        return None;
    }
    match t {
        Thunk::Conv2D(c) => {
            let a = conv_args(c.dims());
            count(&[c.n, c.c_in, c.h, c.w])?;
            count(&[c.c_out, c.c_in, c.kh, c.kw])?;
            let total = count(&[c.n, c.c_out, c.h_out, c.w_out])?;
            valid(&a).then(|| {
                let offs = [c.src, c.weight, c.dst];
                launch(i, "conv2d", HalfFlag::F32, &a, &offs, total)
            })
        }
        Thunk::ConvTranspose2d(c) => {
            let a = conv_args(c.dims());
            count(&[c.n, c.c_in, c.h, c.w_in])?;
            count(&[c.c_in, c.c_out, c.kh, c.kw])?;
            let total = count(&[c.n, c.c_out, c.h_out, c.w_out])?;
            valid(&a).then(|| {
                let offs = [c.src, c.weight, c.dst];
                launch(i, "conv_transpose2d", c.dt, &a, &offs, total)
            })
        }
        Thunk::Im2Col(c) => {
            let a = conv_args(c.dims());
            count(&[c.n, c.c_in, c.h, c.w])?;
            let total = count(&[c.n, c.c_in, c.kh, c.kw, c.h_out, c.w_out])?;
            valid(&a).then(|| launch(i, "im2col", HalfFlag::F32, &a, &[c.x, c.col], total))
        }
        Thunk::Pool2D(p) => {
            let a = pool_args!(p);
            let name = match p.kind {
                ReduceOp::Max => "pool2d_max",
                ReduceOp::Mean => "pool2d_mean",
                _ => return None,
            };
            count(&[p.n, p.c, p.h, p.w])?;
            let total = count(&[p.n, p.c, p.h_out, p.w_out])?;
            let ok = [p.kh, p.kw, p.sh, p.sw].iter().all(|&v| v > 0);
            ok.then(|| launch(i, name, HalfFlag::F32, &a, &[p.src, p.dst], total))
        }
        Thunk::MaxPool2dBackward(p) => {
            let a = pool_args!(p);
            count(&[p.n, p.c, p.h_out, p.w_out])?;
            let total = count(&[p.n, p.c, p.h, p.w])?;
            let ok = [p.kh, p.kw, p.sh, p.sw].iter().all(|&v| v > 0);
            let offs = [p.x, p.dy, p.dx];
            ok.then(|| launch(i, "max_pool2d_backward", HalfFlag::F32, &a, &offs, total))
        }
        Thunk::ResizeNearest2x(r) => {
            let planes = count(&[r.n, r.c])?;
            let a = Resize2xArgs {
                planes,
                h: r.h,
                w: r.w,
            };
            let total = count(&[planes, 4, r.h, r.w])?;
            Some(launch(
                i,
                "resize_nearest2x",
                r.dt,
                &a,
                &[r.src, r.dst],
                total,
            ))
        }
        Thunk::LayerNorm2d(l) => {
            let hw = count(&[l.h, l.w])?;
            count(&[l.n, l.c, hw])?;
            let a = LayerNorm2dArgs {
                n: l.n,
                c: l.c,
                hw,
                eps: l.eps,
            };
            let total = if l.c == 0 { 0 } else { count(&[l.n, hw])? };
            let offs = [l.src, l.g, l.b, l.dst];
            Some(launch(i, "layer_norm2d", l.dt, &a, &offs, total))
        }
        _ => None,
    }
}
