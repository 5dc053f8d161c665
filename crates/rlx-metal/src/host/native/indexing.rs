//! Native glue for the host ONNX indexing thunk ([`CpuIndexing`]): all four
//! kinds on raw 1/2/4/8-byte words. A scatter whose `data` is its `dst`
//! (a write into a State leaf) runs in place: only the addressed rows move.
//! A ScatterND whose updates are another float type than its data (f32 /
//! f16 / bf16) converts each block on write, rounding to nearest even
//! (`half`'s slice conversions: F16C eight at a time where the CPU has it),
//! bit for bit what a separate cast thunk would store.

use super::{read_staged, NResult};
use crate::host::buffer::{Mem, Plain};
use crate::host::exec::Staging;
use crate::host::kernels::indexing as ix;
use crate::host::kernels::KernelError;
use crate::thunk::indexing::{CpuIndexing, IndexingThunk};
use crate::thunk::Thunk;
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rlx_ir::DType;

pub(super) fn handles(t: &Thunk) -> bool {
    match t {
        Thunk::CpuIndexing(c) => match converting(&c.thunk) {
            Some((d, u)) => d.converts_on_write() && u.converts_on_write(),
            None => matches!(dtype_of(&c.thunk).size_bytes(), 1 | 2 | 4 | 8),
        },
        _ => false,
    }
}

/// `(data dtype, updates dtype)` of a ScatterND whose updates convert on write.
fn converting(t: &IndexingThunk) -> Option<(DType, DType)> {
    match t {
        IndexingThunk::ScatterNd {
            dtype, upd_dtype, ..
        } if dtype != upd_dtype => Some((*dtype, *upd_dtype)),
        _ => None,
    }
}

fn dtype_of(t: &IndexingThunk) -> DType {
    match t {
        IndexingThunk::ScatterNd { dtype, .. }
        | IndexingThunk::ScatterElements { dtype, .. }
        | IndexingThunk::GatherNd { dtype, .. }
        | IndexingThunk::GatherElements { dtype, .. } => *dtype,
    }
}

fn prod(d: &[usize]) -> usize {
    d.iter().product()
}

pub(super) fn run(t: &Thunk, mem: &Mem, st: &mut Staging) -> NResult {
    let Thunk::CpuIndexing(c) = t else {
        return Err(KernelError::Invalid {
            kernel: "native",
            msg: format!("no indexing kernel for {}", t.name()),
        }
        .into());
    };
    if let Some(pair) = converting(&c.thunk) {
        return match pair {
            (DType::F16, DType::F32) => {
                convert::<f16, f32>(c, mem, st, |d, u| d.convert_from_f32_slice(u))
            }
            (DType::BF16, DType::F32) => {
                convert::<bf16, f32>(c, mem, st, |d, u| d.convert_from_f32_slice(u))
            }
            (DType::F32, DType::F16) => {
                convert::<f32, f16>(c, mem, st, |d, u| u.convert_to_f32_slice(d))
            }
            (DType::F32, DType::BF16) => {
                convert::<f32, bf16>(c, mem, st, |d, u| u.convert_to_f32_slice(d))
            }
            (DType::F16, DType::BF16) => convert::<f16, bf16>(c, mem, st, |d, u| {
                d.iter_mut()
                    .zip(u)
                    .for_each(|(d, u)| *d = f16::from_f32(u.to_f32()))
            }),
            (DType::BF16, DType::F16) => convert::<bf16, f16>(c, mem, st, |d, u| {
                d.iter_mut()
                    .zip(u)
                    .for_each(|(d, u)| *d = bf16::from_f32(u.to_f32()))
            }),
            (d, u) => Err(KernelError::Invalid {
                kernel: "scatter_nd",
                msg: format!("cannot write {u} updates into {d} data"),
            }
            .into()),
        };
    }
    match dtype_of(&c.thunk).size_bytes() {
        1 => words::<u8>(c, mem, st),
        2 => words::<u16>(c, mem, st),
        4 => words::<u32>(c, mem, st),
        8 => words::<u64>(c, mem, st),
        n => Err(KernelError::Invalid {
            kernel: "cpu_indexing",
            msg: format!("no kernel for {n}-byte elements"),
        }
        .into()),
    }
}

/// ScatterND of `U` updates into `D` data, `put` converting each block.
fn convert<D: Plain, U: Plain>(
    c: &CpuIndexing,
    mem: &Mem,
    st: &mut Staging,
    put: impl Fn(&mut [D], &[U]),
) -> NResult {
    let IndexingThunk::ScatterNd {
        data,
        indices,
        updates,
        dst,
        data_dims,
        indices_dims,
        ..
    } = &c.thunk
    else {
        return Err(KernelError::Invalid {
            kernel: "cpu_indexing",
            msg: format!("only scatter_nd converts dtypes, not {}", c.thunk.kind()),
        }
        .into());
    };
    let total = prod(data_dims);
    let (lead, q) = indices_dims.split_at(indices_dims.len().saturating_sub(1));
    let q = q.first().copied().unwrap_or(0);
    let n_upd = prod(lead) * prod(data_dims.get(q..).unwrap_or(&[]));
    let db = total * std::mem::size_of::<D>();
    let n_idx = prod(indices_dims);
    let idx = read_staged::<i32>(mem, &mut st.a, "indices", *indices, n_idx, *dst, db)?;
    let upd = read_staged::<U>(mem, &mut st.b, "updates", *updates, n_upd, *dst, db)?;
    let src = if data == dst {
        None
    } else {
        Some(read_staged::<D>(
            mem, &mut st.c, "data", *data, total, *dst, db,
        )?)
    };
    let out = mem.get_mut::<D>("dst", *dst, total)?;
    Ok(ix::scatter_nd_with(
        src,
        idx,
        upd,
        out,
        data_dims,
        indices_dims,
        put,
    )?)
}

fn words<W: Plain>(c: &CpuIndexing, mem: &Mem, st: &mut Staging) -> NResult {
    let es = std::mem::size_of::<W>();
    match &c.thunk {
        IndexingThunk::ScatterNd { .. } => convert::<W, W>(c, mem, st, |d, u| d.copy_from_slice(u)),
        IndexingThunk::ScatterElements {
            data,
            indices,
            updates,
            dst,
            data_dims,
            indices_dims,
            axis,
            ..
        } => {
            let total = prod(data_dims);
            let n_idx = prod(indices_dims);
            let db = total * es;
            let idx = read_staged::<i32>(mem, &mut st.a, "indices", *indices, n_idx, *dst, db)?;
            let upd = read_staged::<W>(mem, &mut st.b, "updates", *updates, n_idx, *dst, db)?;
            let src = if data == dst {
                None
            } else {
                Some(read_staged::<W>(
                    mem, &mut st.c, "data", *data, total, *dst, db,
                )?)
            };
            let out = mem.get_mut::<W>("dst", *dst, total)?;
            Ok(ix::scatter_elements(
                src,
                idx,
                upd,
                out,
                data_dims,
                indices_dims,
                *axis,
            )?)
        }
        IndexingThunk::GatherNd {
            data,
            indices,
            dst,
            data_dims,
            indices_dims,
            batch_dims,
            ..
        } => {
            let (lead, q) = indices_dims.split_at(indices_dims.len().saturating_sub(1));
            let q = q.first().copied().unwrap_or(0);
            let tail = data_dims.get(batch_dims.saturating_add(q)..).unwrap_or(&[]);
            let n_out = prod(lead) * prod(tail);
            let ob = n_out * es;
            let idx = read_staged::<i32>(
                mem,
                &mut st.a,
                "indices",
                *indices,
                prod(indices_dims),
                *dst,
                ob,
            )?;
            let src = read_staged::<W>(mem, &mut st.b, "data", *data, prod(data_dims), *dst, ob)?;
            let out = mem.get_mut::<W>("dst", *dst, n_out)?;
            Ok(ix::gather_nd(
                src,
                idx,
                out,
                data_dims,
                indices_dims,
                *batch_dims,
            )?)
        }
        IndexingThunk::GatherElements {
            data,
            indices,
            dst,
            data_dims,
            indices_dims,
            axis,
            ..
        } => {
            let n = prod(indices_dims);
            let ob = n * es;
            let idx = read_staged::<i32>(mem, &mut st.a, "indices", *indices, n, *dst, ob)?;
            let src = read_staged::<W>(mem, &mut st.b, "data", *data, prod(data_dims), *dst, ob)?;
            let out = mem.get_mut::<W>("dst", *dst, n)?;
            Ok(ix::gather_elements(
                src,
                idx,
                out,
                data_dims,
                indices_dims,
                *axis,
            )?)
        }
    }
}
