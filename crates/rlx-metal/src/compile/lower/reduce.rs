//! Lowering of reductions: reduce (any axes, one axis at a time when they
//! are not contiguous), softmax and cumsum (any axis: non-last axes move to
//! the end through a transpose), cross-entropy, top-k (any axis, the same
//! way), arg max/min, sampling.

use super::{converted, index_i32, numel, Ctx};
use crate::compile::error::CompileError;
use crate::thunk::reduce::{
    ArgReduce, Cumsum, Reduce, Sample, Softmax, SoftmaxCrossEntropyDense,
    SoftmaxCrossEntropyWithLogits, TopK,
};
use crate::thunk::shape::{Copy, Transpose};
use rlx_ir::{DType, Op};

/// Split dims around axis `ax`: (outer, axis, inner).
fn around(d: &[usize], ax: usize) -> (usize, usize, usize) {
    (numel(&d[..ax]), d[ax], numel(&d[ax + 1..]))
}

/// Transpose f32 `[outer, axis, inner]` ↔ `[outer, inner, axis]`.
fn swap_last(
    ctx: &mut Ctx<'_>,
    src: usize,
    dst: usize,
    o: usize,
    a: usize,
    i: usize,
    back: bool,
) -> Result<(), CompileError> {
    // out dims and the element strides that read them from src
    let (out_dims, strides) = if back {
        // src is [o, i, a] → dst [o, a, i]
        (vec![o, a, i], vec![(i * a) as u32, 1, a as u32])
    } else {
        // src is [o, a, i] → dst [o, i, a]
        (vec![o, i, a], vec![(a * i) as u32, 1, i as u32])
    };
    ctx.push(Transpose {
        src,
        dst,
        total: ctx.u32(o * a * i, "elements")?,
        out_dims: out_dims.iter().map(|&x| x as u32).collect(),
        in_strides: strides,
    });
    Ok(())
}

pub(super) fn lower(ctx: &mut Ctx<'_>, op: &Op) -> Result<(), CompileError> {
    let in_dims = ctx.in_dims(0);
    match op {
        Op::Reduce { kind, axes, .. } => {
            let dtype = ctx.out_shape().dtype;
            let dt = ctx.half_flag(dtype, "input")?;
            let mut ax: Vec<usize> = if axes.is_empty() {
                (0..in_dims.len()).collect()
            } else {
                axes.iter()
                    .map(|&a| ctx.in_shape(0).axis("reduce", a))
                    .collect::<Result<_, _>>()?
            };
            ax.sort_unstable();
            let contiguous = ax.windows(2).all(|w| w[1] == w[0] + 1);
            let src = converted(ctx, 0, dtype)?;
            if ax.is_empty() {
                let len = ctx.u32(numel(&in_dims), "elements")?;
                ctx.push(Copy {
                    src,
                    dst: ctx.out(),
                    len,
                    dt,
                });
                return Ok(());
            }
            if contiguous {
                let (first, last) = (ax[0], ax[ax.len() - 1]);
                ctx.push(Reduce {
                    src,
                    dst: ctx.out(),
                    outer: ctx.u32(numel(&in_dims[..first]), "outer")?,
                    reduced: ctx.u32(numel(&in_dims[first..=last]), "reduced")?,
                    inner: ctx.u32(numel(&in_dims[last + 1..]), "inner")?,
                    op: *kind,
                    dt,
                });
                return Ok(());
            }
            // one axis at a time, last axis first, through scratch
            let mut cur = src;
            let mut dims = in_dims.clone();
            for (step, &a) in ax.iter().rev().enumerate() {
                let (o, r, i) = around(&dims, a);
                dims[a] = 1;
                let dst = if step + 1 == ax.len() {
                    ctx.out()
                } else {
                    ctx.scratch(o * i * dtype.size_bytes())
                };
                ctx.push(Reduce {
                    src: cur,
                    dst,
                    outer: ctx.u32(o, "outer")?,
                    reduced: ctx.u32(r, "reduced")?,
                    inner: ctx.u32(i, "inner")?,
                    op: *kind,
                    dt,
                });
                cur = dst;
            }
            Ok(())
        }
        Op::Softmax { axis } | Op::Cumsum { axis, .. } => {
            let dtype = ctx.out_shape().dtype;
            let ax = ctx.in_shape(0).axis(op.name(), *axis)?;
            let (o, a, i) = around(&in_dims, ax);
            let is_softmax = matches!(op, Op::Softmax { .. });
            if !is_softmax && dtype != DType::F32 {
                return Err(ctx.unsupported("cumsum runs in f32 only"));
            }
            if i != 1 && dtype != DType::F32 {
                return Err(ctx.unsupported("softmax over a non-last axis runs in f32 only"));
            }
            let dt = ctx.half_flag(dtype, "input")?;
            let esz = dtype.size_bytes();
            let src = converted(ctx, 0, dtype)?;
            let (work_in, work_out) = if i == 1 {
                (src, ctx.out())
            } else {
                let t = ctx.scratch(o * a * i * esz);
                swap_last(ctx, src, t, o, a, i, false)?;
                let t2 = ctx.scratch(o * a * i * esz);
                (t, t2)
            };
            let rows = ctx.u32(o * i, "rows")?;
            let cols = ctx.u32(a, "cols")?;
            match op {
                Op::Softmax { .. } => {
                    let len = ctx.u32(o * a * i, "elements")?;
                    ctx.push(Copy {
                        src: work_in,
                        dst: work_out,
                        len,
                        dt,
                    });
                    ctx.push(Softmax {
                        data: work_out,
                        rows,
                        cols,
                        dt,
                    });
                }
                Op::Cumsum { exclusive, .. } => {
                    ctx.push(Cumsum {
                        src: work_in,
                        dst: work_out,
                        rows,
                        cols,
                        exclusive: *exclusive,
                    });
                }
                _ => {}
            }
            if i != 1 {
                swap_last(ctx, work_out, ctx.out(), o, a, i, true)?;
            }
            Ok(())
        }
        Op::SoftmaxCrossEntropy => {
            let logits = converted(ctx, 0, DType::F32)?;
            let (n, c) = (in_dims[0], in_dims[1]);
            let (un, uc) = (ctx.u32(n, "n")?, ctx.u32(c, "c")?);
            if ctx.in_shape(1).dtype.is_int() {
                let labels = index_i32(ctx, 1)?;
                ctx.push(SoftmaxCrossEntropyWithLogits {
                    logits,
                    labels,
                    dst: ctx.out(),
                    n: un,
                    c: uc,
                });
            } else {
                let targets = converted(ctx, 1, DType::F32)?;
                ctx.push(SoftmaxCrossEntropyDense {
                    logits,
                    targets,
                    dst: ctx.out(),
                    n: un,
                    c: uc,
                });
            }
            Ok(())
        }
        Op::TopK { k, axis } => {
            // A non-last axis moves to the end and the i32 result moves back.
            let ax = ctx.in_shape(0).axis("top_k", *axis)?;
            let src = converted(ctx, 0, DType::F32)?;
            let (o, a, i) = around(&in_dims, ax);
            let (rows_src, rows_dst) = if i == 1 {
                (src, ctx.out())
            } else {
                let t = ctx.scratch(o * a * i * 4);
                swap_last(ctx, src, t, o, a, i, false)?;
                (t, ctx.scratch(o * i * k * 4))
            };
            ctx.push(TopK {
                src: rows_src,
                dst: rows_dst,
                outer: ctx.u32(o * i, "outer")?,
                axis_dim: ctx.u32(a, "axis")?,
                k: ctx.u32(*k, "k")?,
            });
            if i != 1 {
                swap_last(ctx, rows_dst, ctx.out(), o, *k, i, true)?;
            }
            Ok(())
        }
        Op::ArgMax { axis, .. } | Op::ArgMin { axis, .. } => {
            let ax = ctx.in_shape(0).axis(op.name(), *axis)?;
            let src = converted(ctx, 0, DType::F32)?;
            let (o, r, i) = around(&in_dims, ax);
            ctx.push(ArgReduce {
                src,
                dst: ctx.out(),
                outer: ctx.u32(o, "outer")?,
                reduced: ctx.u32(r, "reduced")?,
                inner: ctx.u32(i, "inner")?,
                is_max: matches!(op, Op::ArgMax { .. }),
            });
            Ok(())
        }
        Op::Sample {
            temperature,
            top_k,
            top_p,
            seed,
        } => {
            let logits = converted(ctx, 0, DType::F32)?;
            ctx.push(Sample {
                logits,
                dst: ctx.out(),
                batch: ctx.u32(in_dims[0], "batch")?,
                vocab: ctx.u32(in_dims[1], "vocab")?,
                top_k: ctx.u32(*top_k, "top_k")?,
                top_p: *top_p,
                temperature: *temperature,
                seed: *seed,
            });
            Ok(())
        }
        _ => Err(ctx.unsupported("not a reduction")),
    }
}
