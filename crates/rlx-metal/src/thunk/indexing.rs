//! Indexing thunks: embedding gather, axis gather, scatter-add and the
//! host ONNX-style ScatterND / ScatterElements / GatherND / GatherElements.
//!
//! Index buffers are i32. Which table rows a gather touches is a run-time
//! fact, so gathers report the whole table read.

use super::io::{bytes, nbytes, ThunkIo, F32, IDX};
use super::offsets::Off;
use super::{HalfFlag, ThunkOp};
use rlx_ir::DType;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Embedding lookup along axis 0: `dst[i, :] = table[idx[i], :]`.
///
/// `table_rows` is not in the seed: the seed's thunk does not record the
/// table's leading dim, which `io()` needs to report the table read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gather {
    /// Table `[table_rows, trailing]`.
    pub table: usize,
    /// Indices i32 `[num_idx]`.
    pub idx: usize,
    /// Output `[num_idx, trailing]`.
    pub dst: usize,
    /// Indices.
    pub num_idx: u32,
    /// Elements per table row.
    pub trailing: u32,
    /// Element type of table and output.
    pub dt: HalfFlag,
    /// Rows of the table (vocabulary size).
    pub table_rows: u32,
}

impl ThunkOp for Gather {
    const NAME: &'static str = "gather";
    fn io(&self) -> ThunkIo {
        let es = self.dt.size();
        ThunkIo::new()
            .read(self.table, bytes(&[self.table_rows, self.trailing], es))
            .read(self.idx, bytes(&[self.num_idx], IDX))
            .write(self.dst, bytes(&[self.num_idx, self.trailing], es))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (t, i, d) = (Off(self.table), Off(self.idx), Off(self.dst));
        write!(
            f,
            "rows={} trailing={} num_idx={} {} table={t} idx={i} dst={d}",
            self.table_rows, self.trailing, self.num_idx, self.dt
        )
    }
}

/// `index_select` along a middle axis, f32: `dst [outer, num_idx,
/// trailing] = table [outer, axis_dim, trailing][:, idx, :]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GatherAxis {
    /// Table `[outer, axis_dim, trailing]`.
    pub table: usize,
    /// Indices i32 `[num_idx]`.
    pub idx: usize,
    /// Output `[outer, num_idx, trailing]`.
    pub dst: usize,
    /// Product of dims before the axis.
    pub outer: u32,
    /// Length of the gathered axis.
    pub axis_dim: u32,
    /// Indices.
    pub num_idx: u32,
    /// Product of dims after the axis.
    pub trailing: u32,
}

impl ThunkOp for GatherAxis {
    const NAME: &'static str = "gather_axis";
    fn io(&self) -> ThunkIo {
        ThunkIo::new()
            .read(
                self.table,
                bytes(&[self.outer, self.axis_dim, self.trailing], F32),
            )
            .read(self.idx, bytes(&[self.num_idx], IDX))
            .write(
                self.dst,
                bytes(&[self.outer, self.num_idx, self.trailing], F32),
            )
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (t, i, d) = (Off(self.table), Off(self.idx), Off(self.dst));
        write!(
            f,
            "outer={} axis={} num_idx={} trailing={} table={t} idx={i} dst={d}",
            self.outer, self.axis_dim, self.num_idx, self.trailing
        )
    }
}

/// `dst = zeros; dst[indices[i], :] += updates[i, :]`, f32. The output is
/// zeroed by the thunk itself, so it is written, not read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScatterAdd {
    /// Updates `[num_updates, trailing]`.
    pub updates: usize,
    /// Indices i32 `[num_updates]`.
    pub indices: usize,
    /// Output `[out_dim, trailing]`.
    pub dst: usize,
    /// Update rows.
    pub num_updates: u32,
    /// Output rows.
    pub out_dim: u32,
    /// Elements per row.
    pub trailing: u32,
}

impl ThunkOp for ScatterAdd {
    const NAME: &'static str = "scatter_add";
    fn io(&self) -> ThunkIo {
        ThunkIo::new()
            .read(self.updates, bytes(&[self.num_updates, self.trailing], F32))
            .read(self.indices, bytes(&[self.num_updates], IDX))
            .write(self.dst, bytes(&[self.out_dim, self.trailing], F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (u, i, d) = (Off(self.updates), Off(self.indices), Off(self.dst));
        write!(
            f,
            "updates={} out_dim={} trailing={} upd={u} idx={i} dst={d}",
            self.num_updates, self.out_dim, self.trailing
        )
    }
}

/// A host ONNX indexing op. `data` / `updates` / the output use `dtype`;
/// `indices` are i32. Scatters write a full copy of `data` (updated) to
/// `dst`, or, when `dst == data` (a scatter into a State leaf), update it in
/// place: then `data` is not reported read (the rows not addressed keep
/// their bytes; no copy of the whole tensor is made).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum IndexingThunk {
    /// ONNX ScatterND: `indices [.., q]` address `data` prefixes; `updates`
    /// is `indices_dims[..r-1] ++ data_dims[q..]`.
    ScatterNd {
        /// Data.
        data: usize,
        /// Indices.
        indices: usize,
        /// Updates.
        updates: usize,
        /// Output (data's shape).
        dst: usize,
        /// Data dims.
        data_dims: Vec<usize>,
        /// Indices dims (last = q).
        indices_dims: Vec<usize>,
        /// Element type of data / output.
        dtype: DType,
        /// Element type of updates: `dtype`, or another float among f32 /
        /// f16 / bf16, converted on write (round to nearest even), so an
        /// f32 K / V row lands in an f16 KV cache without a cast thunk.
        upd_dtype: DType,
    },
    /// ONNX ScatterElements (replace): `updates` has indices' dims.
    ScatterElements {
        /// Data.
        data: usize,
        /// Indices.
        indices: usize,
        /// Updates (indices' dims).
        updates: usize,
        /// Output (data's shape).
        dst: usize,
        /// Data dims.
        data_dims: Vec<usize>,
        /// Indices dims.
        indices_dims: Vec<usize>,
        /// Axis (non-negative).
        axis: usize,
        /// Element type.
        dtype: DType,
    },
    /// ONNX GatherND: output `indices_dims[..r-1] ++ data_dims[batch_dims + q..]`.
    GatherNd {
        /// Data.
        data: usize,
        /// Indices.
        indices: usize,
        /// Output.
        dst: usize,
        /// Data dims.
        data_dims: Vec<usize>,
        /// Indices dims (last = q).
        indices_dims: Vec<usize>,
        /// Leading batch dims shared by data and indices.
        batch_dims: usize,
        /// Element type.
        dtype: DType,
    },
    /// ONNX GatherElements: output has indices' dims.
    GatherElements {
        /// Data.
        data: usize,
        /// Indices.
        indices: usize,
        /// Output (indices' dims).
        dst: usize,
        /// Data dims.
        data_dims: Vec<usize>,
        /// Indices dims.
        indices_dims: Vec<usize>,
        /// Axis (non-negative).
        axis: usize,
        /// Element type.
        dtype: DType,
    },
}

/// Saturating product of a dims slice.
fn prod(dims: &[usize]) -> usize {
    dims.iter().fold(1usize, |a, &d| a.saturating_mul(d))
}

/// `indices_dims[..r-1]` and `q = indices_dims[r-1]` (empty / 0 for rank 0).
fn split_q(indices_dims: &[usize]) -> (&[usize], usize) {
    match indices_dims.split_last() {
        Some((&q, lead)) => (lead, q),
        None => (&[], 0),
    }
}

impl IndexingThunk {
    /// Short name of the op.
    pub fn kind(&self) -> &'static str {
        match self {
            IndexingThunk::ScatterNd { .. } => "scatter_nd",
            IndexingThunk::ScatterElements { .. } => "scatter_elements",
            IndexingThunk::GatherNd { .. } => "gather_nd",
            IndexingThunk::GatherElements { .. } => "gather_elements",
        }
    }

    /// Exact byte ranges read and written.
    pub fn io(&self) -> ThunkIo {
        match self {
            IndexingThunk::ScatterNd {
                data,
                indices,
                updates,
                dst,
                data_dims,
                indices_dims,
                dtype,
                upd_dtype,
            } => {
                let es = dtype.size_bytes();
                let (lead, q) = split_q(indices_dims);
                let upd = prod(lead).saturating_mul(prod(data_dims.get(q..).unwrap_or(&[])));
                let d = nbytes(prod(data_dims), es);
                ThunkIo::new()
                    .read_if(data != dst, *data, d)
                    .read(*indices, nbytes(prod(indices_dims), IDX))
                    .read(*updates, nbytes(upd, upd_dtype.size_bytes()))
                    .write(*dst, d)
            }
            IndexingThunk::ScatterElements {
                data,
                indices,
                updates,
                dst,
                data_dims,
                indices_dims,
                dtype,
                ..
            } => {
                let es = dtype.size_bytes();
                let d = nbytes(prod(data_dims), es);
                let n_idx = prod(indices_dims);
                ThunkIo::new()
                    .read_if(data != dst, *data, d)
                    .read(*indices, nbytes(n_idx, IDX))
                    .read(*updates, nbytes(n_idx, es))
                    .write(*dst, d)
            }
            IndexingThunk::GatherNd {
                data,
                indices,
                dst,
                data_dims,
                indices_dims,
                batch_dims,
                dtype,
            } => {
                let es = dtype.size_bytes();
                let (lead, q) = split_q(indices_dims);
                let tail = data_dims.get(batch_dims.saturating_add(q)..).unwrap_or(&[]);
                let out = prod(lead).saturating_mul(prod(tail));
                ThunkIo::new()
                    .read(*data, nbytes(prod(data_dims), es))
                    .read(*indices, nbytes(prod(indices_dims), IDX))
                    .write(*dst, nbytes(out, es))
            }
            IndexingThunk::GatherElements {
                data,
                indices,
                dst,
                data_dims,
                indices_dims,
                dtype,
                ..
            } => {
                let es = dtype.size_bytes();
                let n_idx = prod(indices_dims);
                ThunkIo::new()
                    .read(*data, nbytes(prod(data_dims), es))
                    .read(*indices, nbytes(n_idx, IDX))
                    .write(*dst, nbytes(n_idx, es))
            }
        }
    }
}

/// Host ScatterND / ScatterElements / GatherND / GatherElements.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuIndexing {
    /// The op and its operands.
    pub thunk: IndexingThunk,
}

impl ThunkOp for CpuIndexing {
    const NAME: &'static str = "cpu_indexing";
    fn io(&self) -> ThunkIo {
        self.thunk.io()
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.thunk;
        let (data_dims, indices_dims, dtype, data, dst) = match t {
            IndexingThunk::ScatterNd {
                data_dims,
                indices_dims,
                dtype,
                data,
                dst,
                ..
            }
            | IndexingThunk::ScatterElements {
                data_dims,
                indices_dims,
                dtype,
                data,
                dst,
                ..
            }
            | IndexingThunk::GatherNd {
                data_dims,
                indices_dims,
                dtype,
                data,
                dst,
                ..
            }
            | IndexingThunk::GatherElements {
                data_dims,
                indices_dims,
                dtype,
                data,
                dst,
                ..
            } => (data_dims, indices_dims, dtype, data, dst),
        };
        write!(
            f,
            "{} data={data_dims:?} indices={indices_dims:?} {dtype}",
            t.kind()
        )?;
        if let IndexingThunk::ScatterNd { upd_dtype, .. } = t {
            if upd_dtype != dtype {
                write!(f, " updates={upd_dtype}")?;
            }
        }
        write!(f, " data={} dst={}", Off(*data), Off(*dst))
    }
}
