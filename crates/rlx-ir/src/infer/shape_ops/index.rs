//! Shape inference for the indexing ops: embedding gather, `index_select`,
//! scatter-add, and the ONNX GatherND / ScatterND / GatherElements /
//! ScatterElements. Index operands must have an integer dtype.
//!
//! ScatterND may write float updates into data of another float type
//! among f32, f16 and bf16 (converted on write, rounding to nearest even:
//! an f32 K / V row appended to an f16 KV cache needs no separate cast).
//! Every other pair of differing dtypes is an error.

use super::super::common::*;
use crate::dtype::DType;
use crate::error::{IrError, Result};
use crate::op::Op;
use crate::shape::{dims_string, Dim, Shape};

pub(super) fn infer(op: &Op, inputs: &[&Shape]) -> Result<Shape> {
    match op {
        Op::Gather => {
            arity(op, inputs, 2)?;
            let (table, idx) = (inputs[0], inputs[1]);
            rank_at_least(op, table, 1, "table")?;
            int_dtype(op, idx, "idx")?;
            let mut dims = idx.dims.clone();
            dims.extend_from_slice(&table.dims[1..]);
            Ok(table.with_dims(dims))
        }
        Op::GatherAxis { axis } => {
            arity(op, inputs, 2)?;
            let (x, idx) = (inputs[0], inputs[1]);
            let a = x.axis(op.name(), *axis)?;
            int_dtype(op, idx, "idx")?;
            rank_is(op, idx, 1, "idx")?;
            let mut dims = x.dims.clone();
            dims[a] = idx.dim(0).clone();
            Ok(x.with_dims(dims))
        }
        Op::ScatterAdd { out_dim } => {
            arity(op, inputs, 2)?;
            let (upd, idx) = (inputs[0], inputs[1]);
            rank_at_least(op, upd, 1, "updates")?;
            if upd.dtype == DType::Bool {
                return Err(IrError::dtype(
                    op.name(),
                    format!("updates must be numeric, got {upd}"),
                ));
            }
            int_dtype(op, idx, "idx")?;
            expect_vector(op, idx, upd.dim(0), "idx")?;
            let mut dims = upd.dims.clone();
            dims[0] = Dim::Static(*out_dim);
            Ok(upd.with_dims(dims))
        }
        Op::ScatterNd => {
            arity(op, inputs, 3)?;
            let (data, idx, upd) = (inputs[0], inputs[1], inputs[2]);
            rank_at_least(op, data, 1, "data")?;
            int_dtype(op, idx, "indices")?;
            let k = index_depth(op, idx)?;
            if k > data.rank() {
                return Err(IrError::shape(
                    op.name(),
                    format!("index depth {k} exceeds the rank of data {data}"),
                ));
            }
            converting_write(op, data, upd)?;
            let mut want = idx.dims[..idx.rank() - 1].to_vec();
            want.extend_from_slice(&data.dims[k..]);
            expect_dims(op, upd, &want, "updates")?;
            Ok(data.clone())
        }
        Op::ScatterElements { axis } => {
            arity(op, inputs, 3)?;
            let (data, idx, upd) = (inputs[0], inputs[1], inputs[2]);
            let a = data.axis(op.name(), *axis)?;
            int_dtype(op, idx, "indices")?;
            elementwise_indices(op, data, idx, a)?;
            same_dtype(op, data, upd)?;
            expect_dims(op, upd, &idx.dims, "updates")?;
            Ok(data.clone())
        }
        Op::GatherNd { batch_dims } => {
            arity(op, inputs, 2)?;
            let (data, idx) = (inputs[0], inputs[1]);
            rank_at_least(op, data, 1, "data")?;
            int_dtype(op, idx, "indices")?;
            let k = index_depth(op, idx)?;
            let b = *batch_dims;
            if b >= data.rank().min(idx.rank()) {
                return Err(IrError::attr(
                    op.name(),
                    format!("batch_dims {b} must be below the ranks of {data} and {idx}"),
                ));
            }
            if data.dims[..b] != idx.dims[..b] {
                return Err(IrError::shape(
                    op.name(),
                    format!("batch dims differ: {data} vs {idx}"),
                ));
            }
            if k == 0 || k > data.rank() - b {
                return Err(IrError::shape(
                    op.name(),
                    format!(
                        "index depth must be in 1..={}, got {k} ({idx} into {data})",
                        data.rank() - b
                    ),
                ));
            }
            let mut dims = idx.dims[..idx.rank() - 1].to_vec();
            dims.extend_from_slice(&data.dims[b + k..]);
            Ok(data.with_dims(dims))
        }
        Op::GatherElements { axis } => {
            arity(op, inputs, 2)?;
            let (data, idx) = (inputs[0], inputs[1]);
            let a = data.axis(op.name(), *axis)?;
            int_dtype(op, idx, "indices")?;
            elementwise_indices(op, data, idx, a)?;
            Ok(data.with_dims(idx.dims.clone()))
        }
        _ => Err(IrError::Unsupported {
            op: op.name().into(),
            msg: "not an indexing op".into(),
        }),
    }
}

/// The static last dim of an ND index tensor (the index depth `q`).
fn index_depth(op: &Op, idx: &Shape) -> Result<usize> {
    rank_at_least(op, idx, 1, "indices")?;
    static_dim(op, idx.last(op.name())?, "last dim of indices")
}

/// GatherElements / ScatterElements indices: same rank as data, and off the
/// axis no larger than data where both sizes are known (a symbol must match
/// a symbol by name).
fn elementwise_indices(op: &Op, data: &Shape, idx: &Shape, axis: usize) -> Result<()> {
    let fits = idx.rank() == data.rank()
        && idx
            .dims
            .iter()
            .zip(&data.dims)
            .enumerate()
            .all(|(i, (di, dd))| {
                i == axis
                    || di == dd
                    || matches!((di, dd), (Dim::Static(x), Dim::Static(y)) if x <= y)
            });
    if !fits {
        return Err(IrError::shape(
            op.name(),
            format!(
                "indices {} must have the rank of data {} and fit in it off axis {axis}",
                dims_string(&idx.dims),
                dims_string(&data.dims)
            ),
        ));
    }
    Ok(())
}

/// ScatterND's `updates` must have `data`'s dtype, or both must be floats
/// it converts between ([`DType::converts_on_write`]).
fn converting_write(op: &Op, data: &Shape, upd: &Shape) -> Result<()> {
    if data.dtype == upd.dtype || (data.dtype.converts_on_write() && upd.dtype.converts_on_write())
    {
        return Ok(());
    }
    Err(IrError::dtype(
        op.name(),
        format!(
            "updates {upd} cannot be written into data {data}: the dtypes must match, \
             or both be f32 / f16 / bf16 (converted on write)"
        ),
    ))
}
