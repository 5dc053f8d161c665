//! Lowering of layout and indexing ops. Views (reshape, contiguous narrow,
//! identity transpose) need no thunk: the planner aliases them. Pure data
//! movement is dtype-agnostic: sizes are expressed in 4- or 2-byte units
//! (`HalfFlag` F32 / F16) that divide the moved blocks, so i64, u8, bool...
//! move through the same thunks as floats.

use super::{index_i32, numel, Ctx};
use crate::compile::error::CompileError;
use crate::thunk::binary::BinaryBroadcast;
use crate::thunk::conv::ResizeNearest2x;
use crate::thunk::host::{CustomGpuOp, CustomOp, GPU_KERNEL_KEY};
use crate::thunk::indexing::{CpuIndexing, Gather, GatherAxis, IndexingThunk, ScatterAdd};
use crate::thunk::shape::{Concat, Narrow, Reverse, Transpose};
use crate::thunk::HalfFlag;
use rlx_ir::op::BinaryOp;
use rlx_ir::{DType, Graph, NodeId, Op};

/// True when node `id` is a ScatterND whose data operand is a `State` leaf:
/// its value aliases the state and the scatter writes the state in place
/// (a KV-cache row write; no copy of the whole cache).
pub(super) fn scatters_into_state(g: &Graph, id: NodeId) -> bool {
    let n = g.node(id);
    matches!(n.op, Op::ScatterNd)
        && n.inputs
            .first()
            .is_some_and(|&d| matches!(g.node(d).op, Op::State { .. }))
}

/// An in-place scatter is only sound when every other read of the state
/// leaf happens before it: thunks run in node order, so each other
/// consumer (and, through view-like ops that may alias the state, each of
/// their consumers) must come earlier in the graph than the scatter, none
/// may be a graph output, and the scatter's own indices / updates may not
/// read the state. That allows a training step to read a parameter kept in
/// a `State` and write its update back at the end.
fn check_sole_consumer(ctx: &Ctx<'_>) -> Result<(), CompileError> {
    let g = ctx.graph;
    let state = ctx.node().inputs[0];
    let aliases = |n: &Op| {
        matches!(
            n,
            Op::Reshape { .. }
                | Op::Cast { .. }
                | Op::Expand { .. }
                | Op::Transpose { .. }
                | Op::Narrow { .. }
        )
    };
    let mut who: Vec<String> = Vec::new();
    // values whose bytes may be the state's: the leaf and its view-like users
    let mut stack = vec![state];
    let mut seen = vec![state];
    while let Some(v) = stack.pop() {
        if g.outputs.contains(&v) {
            who.push(format!("a graph output (node {v})"));
        }
        for (i, n) in g.nodes.iter().enumerate() {
            if !n.inputs.contains(&v) || (i == ctx.node && v == state) {
                continue;
            }
            if i >= ctx.node {
                who.push(format!("node {i} '{}' ({})", n.name, n.op.name()));
            } else if aliases(&n.op) && !seen.contains(&i) {
                seen.push(i);
                stack.push(i);
            }
        }
    }
    if ctx.node().inputs[1..].contains(&state) {
        who.push("another operand of this scatter".into());
    }
    if who.is_empty() {
        return Ok(());
    }
    Err(CompileError::Ir(rlx_ir::IrError::Verify {
        node: ctx.node,
        op: ctx.node().op.name().to_string(),
        msg: format!(
            "'{}' writes State '{}' in place, so every other read of the state must come \
             before it; it is also read by {}",
            ctx.node().name,
            g.node(state).name,
            who.join(", ")
        ),
    }))
}

/// The largest data-movement unit (4 or 2 bytes) dividing every byte count.
fn unit(bytes: &[usize]) -> Option<(HalfFlag, usize)> {
    if bytes.iter().all(|b| b % 4 == 0) {
        Some((HalfFlag::F32, 4))
    } else if bytes.iter().all(|b| b % 2 == 0) {
        Some((HalfFlag::F16, 2))
    } else {
        None
    }
}

fn unit_or_err(ctx: &Ctx<'_>, bytes: &[usize]) -> Result<(HalfFlag, usize), CompileError> {
    unit(bytes).ok_or_else(|| {
        ctx.unsupported(format!(
            "moves blocks of {bytes:?} bytes; odd byte blocks of 1-byte dtypes are not supported yet"
        ))
    })
}

/// Copy `src` (dims `in_dims`, element strides `strides`) to dense
/// `out_dims` at `dst`.
fn strided_copy(
    ctx: &mut Ctx<'_>,
    src: usize,
    dst: usize,
    out_dims: &[usize],
    strides: Vec<u32>,
    dtype: DType,
) -> Result<(), CompileError> {
    let total = ctx.u32(numel(out_dims), "elements")?;
    let dims32: Vec<u32> = out_dims.iter().map(|&d| d as u32).collect();
    match dtype.size_bytes() {
        4 => ctx.push(Transpose {
            src,
            dst,
            total,
            out_dims: dims32,
            in_strides: strides,
        }),
        2 => ctx.push(BinaryBroadcast {
            lhs: src,
            rhs: src,
            dst,
            len: total,
            op: BinaryOp::Max,
            dt: HalfFlag::F16,
            rank: dims32.len() as u32,
            out_dims: dims32,
            lhs_strides: strides.clone(),
            rhs_strides: strides,
        }),
        8 => {
            // two 4-byte words per element: add a trailing axis of 2
            let mut d = dims32;
            d.push(2);
            let mut s: Vec<u32> = strides.iter().map(|&x| x * 2).collect();
            s.push(1);
            ctx.push(Transpose {
                src,
                dst,
                total: total.saturating_mul(2),
                out_dims: d,
                in_strides: s,
            });
        }
        _ => {
            return Err(ctx.unsupported(format!(
                "strided copies of 1-byte {dtype} elements are not supported yet"
            )))
        }
    }
    Ok(())
}

fn row_major_strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

pub(super) fn lower(ctx: &mut Ctx<'_>, op: &Op) -> Result<(), CompileError> {
    let dtype = ctx.out_shape().dtype;
    let esz = dtype.size_bytes();
    let out_dims = ctx.out_dims();
    match op {
        Op::Reshape { .. } => Ok(()), // always placed as a view
        Op::Transpose { perm } => {
            let in_dims = ctx.in_dims(0);
            let rs = row_major_strides(&in_dims);
            let strides = perm.iter().map(|&p| rs[p] as u32).collect();
            strided_copy(ctx, ctx.input(0), ctx.out(), &out_dims, strides, dtype)
        }
        Op::Expand { .. } => {
            let in_dims = ctx.in_dims(0);
            let strides = super::elementwise::broadcast_strides(&in_dims, &out_dims);
            strided_copy(ctx, ctx.input(0), ctx.out(), &out_dims, strides, dtype)
        }
        Op::Narrow { axis, start, len } => {
            let in_dims = ctx.in_dims(0);
            let ax = ctx.in_shape(0).axis("narrow", *axis)?;
            let inner: usize = in_dims[ax + 1..].iter().product::<usize>() * esz;
            let (dt, u) = unit_or_err(ctx, &[inner])?;
            let iu = inner / u;
            ctx.push(Narrow {
                src: ctx.input(0),
                dst: ctx.out(),
                outer: ctx.u32(numel(&in_dims[..ax]), "outer")?,
                src_axis: ctx.u32(in_dims[ax] * iu, "axis")?,
                start: ctx.u32(start * iu, "start")?,
                len: ctx.u32(len * iu, "len")?,
                dt,
            });
            Ok(())
        }
        Op::Concat { axis } => {
            let ax = ctx.out_shape().axis("concat", *axis)?;
            let inner_b: usize = out_dims[ax + 1..].iter().product::<usize>() * esz;
            let (dt, u) = unit_or_err(ctx, &[inner_b])?;
            let mut inputs = Vec::with_capacity(ctx.arity());
            for i in 0..ctx.arity() {
                let off = super::converted(ctx, i, dtype)?;
                inputs.push((off, ctx.u32(ctx.in_dims(i)[ax], "axis")?));
            }
            ctx.push(Concat {
                dst: ctx.out(),
                outer: ctx.u32(numel(&out_dims[..ax]), "outer")?,
                dst_axis: ctx.u32(out_dims[ax], "axis")?,
                inner: ctx.u32(inner_b / u, "inner")?,
                dt,
                inputs,
            });
            Ok(())
        }
        Op::Gather => {
            let td = ctx.in_dims(0);
            let row_b = numel(&td[1..]) * esz;
            let (dt, u) = unit_or_err(ctx, &[row_b])?;
            let idx = index_i32(ctx, 1)?;
            ctx.push(Gather {
                table: ctx.input(0),
                idx,
                dst: ctx.out(),
                num_idx: ctx.u32(numel(&ctx.in_dims(1)), "indices")?,
                trailing: ctx.u32(row_b / u, "row")?,
                dt,
                table_rows: ctx.u32(td[0], "rows")?,
            });
            Ok(())
        }
        Op::GatherAxis { axis } => {
            let td = ctx.in_dims(0);
            let ax = ctx.in_shape(0).axis("gather_axis", *axis)?;
            let trailing_b = numel(&td[ax + 1..]) * esz;
            if !trailing_b.is_multiple_of(4) {
                return Err(ctx.unsupported(
                    "gather_axis moves 4-byte units; trailing block is not a multiple of 4 bytes",
                ));
            }
            let idx = index_i32(ctx, 1)?;
            ctx.push(GatherAxis {
                table: ctx.input(0),
                idx,
                dst: ctx.out(),
                outer: ctx.u32(numel(&td[..ax]), "outer")?,
                axis_dim: ctx.u32(td[ax], "axis")?,
                num_idx: ctx.u32(numel(&ctx.in_dims(1)), "indices")?,
                trailing: ctx.u32(trailing_b / 4, "trailing")?,
            });
            Ok(())
        }
        Op::ScatterAdd { out_dim } => {
            if dtype != DType::F32 {
                return Err(ctx.unsupported("scatter_add accumulates in f32 only"));
            }
            let ud = ctx.in_dims(0);
            let idx = index_i32(ctx, 1)?;
            ctx.push(ScatterAdd {
                updates: ctx.input(0),
                indices: idx,
                dst: ctx.out(),
                num_updates: ctx.u32(ud[0], "updates")?,
                out_dim: ctx.u32(*out_dim, "out_dim")?,
                trailing: ctx.u32(numel(&ud[1..]), "trailing")?,
            });
            Ok(())
        }
        Op::Reverse { axes } => {
            let in_dims = ctx.in_dims(0);
            let mut mask = vec![false; in_dims.len()];
            for &a in axes {
                mask[ctx.in_shape(0).axis("reverse", a)?] = true;
            }
            ctx.push(Reverse {
                src: ctx.input(0),
                dst: ctx.out(),
                dims: in_dims.iter().map(|&d| d as u32).collect(),
                rev_mask: mask,
                elem_bytes: esz as u8,
            });
            Ok(())
        }
        Op::ResizeNearest2x => {
            let d = ctx.in_dims(0);
            let dt = ctx.half_flag(dtype, "input")?;
            ctx.push(ResizeNearest2x {
                src: ctx.input(0),
                dst: ctx.out(),
                n: ctx.u32(d[0], "n")?,
                c: ctx.u32(d[1], "c")?,
                h: ctx.u32(d[2], "h")?,
                w: ctx.u32(d[3], "w")?,
                dt,
            });
            Ok(())
        }
        Op::ScatterNd
        | Op::ScatterElements { .. }
        | Op::GatherNd { .. }
        | Op::GatherElements { .. } => {
            let in_place = scatters_into_state(ctx.graph, ctx.node);
            if in_place {
                check_sole_consumer(ctx)?;
            }
            let data = ctx.input(0);
            let indices = index_i32(ctx, 1)?;
            let data_dims = ctx.in_dims(0);
            let indices_dims = ctx.in_dims(1);
            let dst = ctx.out();
            let thunk = match op {
                Op::ScatterNd => IndexingThunk::ScatterNd {
                    data,
                    indices,
                    updates: ctx.input(2),
                    dst,
                    data_dims,
                    indices_dims,
                    dtype,
                    upd_dtype: ctx.in_shape(2).dtype,
                },
                Op::ScatterElements { axis } => IndexingThunk::ScatterElements {
                    data,
                    indices,
                    updates: ctx.input(2),
                    dst,
                    axis: ctx.in_shape(0).axis("scatter_elements", *axis)?,
                    data_dims,
                    indices_dims,
                    dtype,
                },
                Op::GatherNd { batch_dims } => IndexingThunk::GatherNd {
                    data,
                    indices,
                    dst,
                    data_dims,
                    indices_dims,
                    batch_dims: *batch_dims,
                    dtype,
                },
                Op::GatherElements { axis } => IndexingThunk::GatherElements {
                    data,
                    indices,
                    dst,
                    axis: ctx.in_shape(0).axis("gather_elements", *axis)?,
                    data_dims,
                    indices_dims,
                    dtype,
                },
                _ => return Err(ctx.unsupported("not an indexing op")),
            };
            ctx.push(CpuIndexing { thunk });
            Ok(())
        }
        _ => Err(ctx.unsupported("not a shape op")),
    }
}

/// True when a custom op's attributes hold a raw-GPU kernel.
fn op_attrs_have_kernel(op: &Op) -> bool {
    matches!(op, Op::Custom { attrs, .. } if attrs.get(GPU_KERNEL_KEY).is_some())
}

/// A user op registered from Python: its operands and result as (offset,
/// elements, shape), attributes as JSON bytes.
pub(super) fn lower_custom(ctx: &mut Ctx<'_>, op: &Op) -> Result<(), CompileError> {
    let Op::Custom { name, attrs, .. } = op else {
        return Err(ctx.unsupported("not a custom op"));
    };
    let mut inputs = Vec::with_capacity(ctx.arity());
    for i in 0..ctx.arity() {
        let s = ctx.in_shape(i).clone();
        inputs.push((
            ctx.input(i),
            ctx.u32(numel(&ctx.in_dims(i)), "elements")?,
            s,
        ));
    }
    let out_shape = ctx.out_shape().clone();
    let output = (
        ctx.out(),
        ctx.u32(numel(&ctx.out_dims()), "elements")?,
        out_shape,
    );
    let (name, attrs) = (name.clone(), attrs.to_string().into_bytes());
    // `rlx.register_gpu_op` ops carry their MSL kernel in the attributes
    if op_attrs_have_kernel(op) {
        ctx.push(CustomGpuOp {
            name,
            inputs,
            output,
            attrs,
        });
    } else {
        ctx.push(CustomOp {
            name,
            inputs,
            output,
            attrs,
        });
    }
    Ok(())
}
