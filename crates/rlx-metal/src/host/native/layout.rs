//! Native glue for reductions, layout / indexing moves, convolution and
//! numeric casts. Pure data movement works on raw 2- or 4-byte words, so
//! values (NaN payloads included) move bit-exactly.

use super::NResult;
use crate::host::buffer::Mem;
use crate::host::kernels::conv::{self as cv, Conv2d, Pool};
use crate::host::kernels::elementwise::{cast_numeric, Bool, Numeric};
use crate::host::kernels::reduce::{self as rd, SampleParams};
use crate::host::kernels::shape as sh;
use crate::host::kernels::KernelError;
use crate::thunk::elementwise::CastHost;
use crate::thunk::{HalfFlag, Thunk};
use half::f16;
use rlx_ir::op::ReduceOp;
use rlx_ir::DType;

pub(super) fn handles(t: &Thunk) -> bool {
    use Thunk::*;
    match t {
        Pool2D(p) => matches!(p.kind, ReduceOp::Max | ReduceOp::Mean),
        Reverse(r) => matches!(r.elem_bytes, 1 | 2 | 4 | 8),
        ConvTranspose2d(c) => c.dt == HalfFlag::F32,
        Softmax(_)
        | Cumsum(_)
        | Reduce(_)
        | TopK(_)
        | ArgReduce(_)
        | SoftmaxCrossEntropyDense(_)
        | SoftmaxCrossEntropyWithLogits(_)
        | Sample(_)
        | Gather(_)
        | GatherAxis(_)
        | Narrow(_)
        | SplitLastAxis(_)
        | Copy(_)
        | Concat(_)
        | Transpose(_)
        | ScatterAdd(_)
        | Conv2D(_)
        | Im2Col(_)
        | ResizeNearest2x(_)
        | FusedDepthwiseConv1dBsc(_) => true,
        _ => false,
    }
}

fn invalid(kernel: &'static str, msg: impl Into<String>) -> KernelError {
    KernelError::Invalid {
        kernel,
        msg: msg.into(),
    }
}

#[allow(clippy::too_many_arguments)]
fn conv_params(
    n: u32,
    c_in: u32,
    h: u32,
    w: u32,
    c_out: u32,
    k: (u32, u32),
    s: (u32, u32),
    p: (u32, u32),
    d: (u32, u32),
    groups: u32,
) -> Conv2d {
    let u = |x: u32| x as usize;
    Conv2d {
        n: u(n),
        c_in: u(c_in),
        h: u(h),
        w: u(w),
        c_out: u(c_out),
        kh: u(k.0),
        kw: u(k.1),
        stride: (u(s.0), u(s.1)),
        pad: (u(p.0), u(p.1)),
        dil: (u(d.0), u(d.1)),
        groups: u(groups).max(1),
    }
}

pub(super) fn run(t: &Thunk, mem: &Mem) -> NResult {
    use Thunk::*;
    match t {
        Softmax(s) => by_dt!(s.dt, T => {
            let (r, c) = (s.rows as usize, s.cols as usize);
            Ok(rd::softmax_rows(mem.get_mut::<T>("data", s.data, r * c)?, r, c)?)
        }),
        Cumsum(c) => {
            let (r, n) = (c.rows as usize, c.cols as usize);
            Ok(rd::cumsum(
                mem.get::<f32>("src", c.src, r * n)?,
                mem.get_mut::<f32>("dst", c.dst, r * n)?,
                r,
                n,
                c.exclusive,
            )?)
        }
        Reduce(r) => by_dt!(r.dt, T => {
            let (o, m, i) = (r.outer as usize, r.reduced as usize, r.inner as usize);
            Ok(rd::reduce(r.op, mem.get::<T>("src", r.src, o * m * i)?, mem.get_mut::<T>("dst", r.dst, o * i)?, o, m, i)?)
        }),
        TopK(k) => {
            let (o, n, kk) = (k.outer as usize, k.axis_dim as usize, k.k as usize);
            Ok(rd::top_k(
                mem.get::<f32>("src", k.src, o * n)?,
                mem.get_mut::<i32>("dst", k.dst, o * kk)?,
                o,
                n,
                kk,
            )?)
        }
        ArgReduce(a) => {
            let (o, m, i) = (a.outer as usize, a.reduced as usize, a.inner as usize);
            Ok(rd::arg_reduce(
                mem.get::<f32>("src", a.src, o * m * i)?,
                mem.get_mut::<i32>("dst", a.dst, o * i)?,
                o,
                m,
                i,
                a.is_max,
            )?)
        }
        SoftmaxCrossEntropyWithLogits(s) => {
            let (n, c) = (s.n as usize, s.c as usize);
            Ok(rd::cross_entropy_labels(
                mem.get::<f32>("logits", s.logits, n * c)?,
                mem.get::<i32>("labels", s.labels, n)?,
                mem.get_mut::<f32>("dst", s.dst, n)?,
                n,
                c,
            )?)
        }
        SoftmaxCrossEntropyDense(s) => {
            let (n, c) = (s.n as usize, s.c as usize);
            Ok(rd::cross_entropy_dense(
                mem.get::<f32>("logits", s.logits, n * c)?,
                mem.get::<f32>("targets", s.targets, n * c)?,
                mem.get_mut::<f32>("dst", s.dst, n)?,
                n,
                c,
            )?)
        }
        Sample(s) => {
            let (b, v) = (s.batch as usize, s.vocab as usize);
            let p = SampleParams {
                temperature: s.temperature,
                top_k: s.top_k as usize,
                top_p: s.top_p,
                seed: s.seed,
            };
            Ok(rd::sample(
                mem.get::<f32>("logits", s.logits, b * v)?,
                mem.get_mut::<i32>("dst", s.dst, b)?,
                b,
                v,
                p,
            )?)
        }
        Gather(g) => by_word!(g.dt, W => {
            let (n, dim, rows) = (g.num_idx as usize, g.trailing as usize, g.table_rows as usize);
            let table = mem.get::<W>("table", g.table, rows * dim)?;
            Ok(sh::gather_rows(table, mem.get::<i32>("idx", g.idx, n)?, mem.get_mut::<W>("dst", g.dst, n * dim)?, n, rows, dim)?)
        }),
        GatherAxis(g) => {
            let (o, a, tr, ni) = (
                g.outer as usize,
                g.axis_dim as usize,
                g.trailing as usize,
                g.num_idx as usize,
            );
            let x = mem.get::<u32>("table", g.table, o * a * tr)?;
            Ok(sh::gather_axis(
                x,
                mem.get::<i32>("idx", g.idx, ni)?,
                mem.get_mut::<u32>("dst", g.dst, o * ni * tr)?,
                o,
                a,
                tr,
                ni,
            )?)
        }
        Narrow(nw) => by_word!(nw.dt, W => {
            let (rows, n, start, len) = (nw.outer as usize, nw.src_axis as usize, nw.start as usize, nw.len as usize);
            Ok(sh::narrow_last(mem.get::<W>("src", nw.src, rows * n)?, mem.get_mut::<W>("dst", nw.dst, rows * len)?, rows, n, start, len)?)
        }),
        SplitLastAxis(s) => by_word!(s.dt, W => {
            let (rows, n) = (s.outer as usize, s.src_axis as usize);
            let x = mem.get::<W>("src", s.src, rows * n)?;
            for &(dst, start, len) in &s.segments {
                let len = len as usize;
                sh::narrow_last(x, mem.get_mut::<W>("segment", dst, rows * len)?, rows, n, start as usize, len)?;
            }
            Ok(())
        }),
        Copy(c) => by_word!(c.dt, W => {
            let n = c.len as usize;
            if c.src == c.dst {
                return Ok(());
            }
            Ok(sh::copy(mem.get::<W>("src", c.src, n)?, mem.get_mut::<W>("dst", c.dst, n)?, n)?)
        }),
        Concat(c) => by_word!(c.dt, W => {
            let (outer, inner) = (c.outer as usize, c.inner as usize);
            let mut pieces: Vec<&[W]> = Vec::with_capacity(c.inputs.len());
            let mut sizes: Vec<usize> = Vec::with_capacity(c.inputs.len());
            for &(off, a) in &c.inputs {
                pieces.push(mem.get::<W>("input", off, outer * a as usize * inner)?);
                sizes.push(a as usize);
            }
            let out = mem.get_mut::<W>("dst", c.dst, outer * c.dst_axis as usize * inner)?;
            Ok(sh::concat(&pieces, &sizes, out, outer, inner)?)
        }),
        Transpose(tr) => {
            let (dims, r) = super::widen::<16>(&tr.out_dims)
                .ok_or_else(|| invalid("transpose", "rank above 16"))?;
            let (strides, _) = super::widen::<16>(&tr.in_strides)
                .ok_or_else(|| invalid("transpose", "rank above 16"))?;
            let extent = 1 + dims[..r]
                .iter()
                .zip(&strides[..r])
                .map(|(&d, &s)| d.saturating_sub(1) * s)
                .sum::<usize>();
            let total = tr.total as usize;
            let x = mem.get::<u32>("src", tr.src, if total == 0 { 0 } else { extent })?;
            Ok(sh::strided_copy(
                x,
                &strides[..r],
                &dims[..r],
                mem.get_mut::<u32>("dst", tr.dst, total)?,
            )?)
        }
        Reverse(r) => {
            let (dims, rank) =
                super::widen::<16>(&r.dims).ok_or_else(|| invalid("reverse", "rank above 16"))?;
            let dims = &dims[..rank];
            let n: usize = dims.iter().product();
            macro_rules! rev {
                ($W:ty) => {
                    Ok(sh::reverse(
                        mem.get::<$W>("src", r.src, n)?,
                        &dims,
                        &r.rev_mask,
                        mem.get_mut::<$W>("dst", r.dst, n)?,
                    )?)
                };
            }
            match r.elem_bytes {
                1 => rev!(u8),
                2 => rev!(u16),
                4 => rev!(u32),
                _ => rev!(u64),
            }
        }
        ScatterAdd(s) => {
            let (u, od, tr) = (
                s.num_updates as usize,
                s.out_dim as usize,
                s.trailing as usize,
            );
            let dst = mem.get_mut::<f32>("dst", s.dst, od * tr)?;
            dst.fill(0.0);
            Ok(sh::scatter_add(
                dst,
                mem.get::<i32>("indices", s.indices, u)?,
                mem.get::<f32>("updates", s.updates, u * tr)?,
                u,
                tr,
                od,
            )?)
        }
        Conv2D(c) => {
            let p = conv_params(
                c.n,
                c.c_in,
                c.h,
                c.w,
                c.c_out,
                (c.kh, c.kw),
                (c.sh, c.sw),
                (c.ph, c.pw),
                (c.dh, c.dw),
                c.groups,
            );
            let x = mem.get::<f32>("src", c.src, p.n * p.c_in * p.h * p.w)?;
            let w = mem.get::<f32>(
                "weight",
                c.weight,
                p.c_out * (p.c_in / p.groups) * p.kh * p.kw,
            )?;
            let out =
                mem.get_mut::<f32>("dst", c.dst, p.n * p.c_out * (c.h_out * c.w_out) as usize)?;
            Ok(cv::conv2d(&p, x, w, None, out)?)
        }
        ConvTranspose2d(c) => {
            if c.dt != HalfFlag::F32 {
                return Err(invalid("conv_transpose2d", "f16 runs on the reference").into());
            }
            let p = conv_params(
                c.n,
                c.c_in,
                c.h,
                c.w_in,
                c.c_out,
                (c.kh, c.kw),
                (c.sh, c.sw),
                (c.ph, c.pw),
                (c.dh, c.dw),
                c.groups,
            );
            let base = |x: u32, k: u32, s: u32, pd: u32, d: u32| {
                ((x as i64 - 1) * s as i64 - 2 * pd as i64 + d as i64 * (k as i64 - 1) + 1).max(0)
                    as usize
            };
            let out_pad = (
                (c.h_out as usize).saturating_sub(base(c.h, c.kh, c.sh, c.ph, c.dh)),
                (c.w_out as usize).saturating_sub(base(c.w_in, c.kw, c.sw, c.pw, c.dw)),
            );
            let x = mem.get::<f32>("src", c.src, p.n * p.c_in * p.h * p.w)?;
            let w = mem.get::<f32>(
                "weight",
                c.weight,
                p.c_in * (p.c_out / p.groups) * p.kh * p.kw,
            )?;
            let out =
                mem.get_mut::<f32>("dst", c.dst, p.n * p.c_out * (c.h_out * c.w_out) as usize)?;
            Ok(cv::conv_transpose2d(&p, out_pad, x, w, None, out)?)
        }
        Pool2D(c) => {
            let p = conv_params(
                c.n,
                c.c,
                c.h,
                c.w,
                c.c,
                (c.kh, c.kw),
                (c.sh, c.sw),
                (c.ph, c.pw),
                (1, 1),
                1,
            );
            let kind = if c.kind == ReduceOp::Max {
                Pool::Max
            } else {
                Pool::Mean
            };
            let x = mem.get::<f32>("src", c.src, p.n * p.c_in * p.h * p.w)?;
            let out =
                mem.get_mut::<f32>("dst", c.dst, p.n * p.c_in * (c.h_out * c.w_out) as usize)?;
            Ok(cv::pool2d(&p, kind, x, out)?)
        }
        Im2Col(c) => {
            let p = conv_params(
                c.n,
                c.c_in,
                c.h,
                c.w,
                c.c_in,
                (c.kh, c.kw),
                (c.sh, c.sw),
                (c.ph, c.pw),
                (c.dh, c.dw_dil),
                1,
            );
            let x = mem.get::<f32>("x", c.x, p.n * p.c_in * p.h * p.w)?;
            let cols = p.n * p.c_in * p.kh * p.kw * (c.h_out * c.w_out) as usize;
            Ok(cv::im2col(&p, x, mem.get_mut::<f32>("col", c.col, cols)?)?)
        }
        ResizeNearest2x(r) => by_word!(r.dt, W => {
            let (planes, h, w) = ((r.n * r.c) as usize, r.h as usize, r.w as usize);
            Ok(sh::resize_nearest2x(mem.get::<W>("src", r.src, planes * h * w)?, mem.get_mut::<W>("dst", r.dst, planes * 4 * h * w)?, planes, h, w)?)
        }),
        FusedDepthwiseConv1dBsc(c) => {
            let (b, w, ch, k) = (
                c.batch as usize,
                c.width as usize,
                c.channels as usize,
                c.k as usize,
            );
            if c.out_seq as usize + k != w + 1 {
                return Err(invalid(
                    "fused_depthwise_conv1d_bsc",
                    "out_seq must be width - k + 1",
                )
                .into());
            }
            let x = mem.get::<f32>("src", c.src, b * w * ch)?;
            let wt = mem.get::<f32>("weight", c.weight, ch * k)?;
            let out = mem.get_mut::<f32>("dst", c.dst, b * c.out_seq as usize * ch)?;
            Ok(cv::causal_conv1d(x, wt, None, out, b, w, ch, k, c.silu)?)
        }
        _ => Err(invalid("native", format!("no layout kernel for {}", t.name())).into()),
    }
}

/// Numeric casts between f32, f16, f64, i8, i16, i32, i64, u8, u32 and bool
/// (bf16 and c64 go to the reference; see [`cast_host_native`]).
pub(super) fn cast_host(c: &CastHost, mem: &Mem) -> NResult {
    let n = c.len as usize;
    fn go<S: Numeric + crate::host::buffer::Plain, D: Numeric + crate::host::buffer::Plain>(
        mem: &Mem,
        src: usize,
        dst: usize,
        n: usize,
    ) -> NResult {
        Ok(cast_numeric(
            mem.get::<S>("src", src, n)?,
            mem.get_mut::<D>("dst", dst, n)?,
        )?)
    }
    macro_rules! to {
        ($S:ty) => {
            match c.dst_dt {
                DType::F32 => go::<$S, f32>(mem, c.src, c.dst, n),
                DType::F16 => go::<$S, f16>(mem, c.src, c.dst, n),
                DType::F64 => go::<$S, f64>(mem, c.src, c.dst, n),
                DType::I8 => go::<$S, i8>(mem, c.src, c.dst, n),
                DType::I16 => go::<$S, i16>(mem, c.src, c.dst, n),
                DType::I32 => go::<$S, i32>(mem, c.src, c.dst, n),
                DType::I64 => go::<$S, i64>(mem, c.src, c.dst, n),
                DType::U8 => go::<$S, u8>(mem, c.src, c.dst, n),
                DType::U32 => go::<$S, u32>(mem, c.src, c.dst, n),
                DType::Bool => go::<$S, Bool>(mem, c.src, c.dst, n),
                d => Err(invalid("cast_host", format!("to {d}")).into()),
            }
        };
    }
    match c.src_dt {
        DType::F32 => to!(f32),
        DType::F16 => to!(f16),
        DType::F64 => to!(f64),
        DType::I8 => to!(i8),
        DType::I16 => to!(i16),
        DType::I32 => to!(i32),
        DType::I64 => to!(i64),
        DType::U8 => to!(u8),
        DType::U32 => to!(u32),
        DType::Bool => to!(Bool),
        d => Err(invalid("cast_host", format!("from {d}")).into()),
    }
}

/// True when [`cast_host`] converts `d` natively (every real dtype but bf16).
pub(crate) fn cast_host_native(d: DType) -> bool {
    !matches!(d, DType::C64 | DType::BF16)
}
