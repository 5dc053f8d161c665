//! Gathers, scatter-add and the in-place ScatterND → `indexing.metal`.
//!
//! Gathers move the widest word dividing the row and the offsets (as the
//! layout moves do). GatherElements (the MoE router's gather of the chosen
//! probabilities) moves one element per thread, for 1-, 2-, 4- and 8-byte
//! elements at offsets aligned to their size; shapes the host rejects stay
//! on the host (it reports them). ScatterND is claimed only in place (`data == dst`, a
//! write into a State leaf: the decoders' KV-cache row write); the
//! out-of-place form, which first copies all of `data`, stays on the host,
//! as do the other ONNX indexing kinds. f32 updates into f16 data (an f16
//! KV cache) and f16 into f32 convert on write (`scatter_nd_f32_f16` /
//! `scatter_nd_f16_f32`, one element per thread, round to nearest even);
//! the bf16 conversions stay on the host. On an out-of-range index the host
//! fails the run while the kernels stay memory-safe (see `indexing.metal`):
//! the schedules rlx builds index with in-range token ids and cache slots.

use super::shape::{u32_of, word};
use super::{aliased, elementwise, kernel, rows, Lowered};
use crate::metal::args::{GatherArgs, GatherElemArgs, ScatterAddArgs, ScatterNdArgs, MAX_RANK};
use crate::metal::kernels::Family;
use crate::thunk::indexing::IndexingThunk;
use crate::thunk::{raw_offset, Thunk};
use rlx_ir::DType;

/// `gather_*` dispatch over `[outer, num_idx, trailing_bytes]`.
#[allow(clippy::too_many_arguments)]
fn gather(
    i: usize,
    offs: [usize; 3],
    outer: u32,
    axis_dim: u32,
    num_idx: u32,
    trailing_bytes: u64,
    signed: bool,
) -> Option<Lowered> {
    let (w, sfx) = word(&[trailing_bytes], &[offs[0], offs[2]]);
    let args = GatherArgs {
        outer,
        axis_dim,
        num_idx,
        trailing: u32_of(trailing_bytes / w)?,
        signed_idx: signed as u32,
        ..Default::default()
    };
    let total = u32_of(outer as u64 * num_idx as u64 * args.trailing as u64)?;
    let k = kernel(Family::Indexing, format!("gather_{sfx}"));
    Some(Lowered::Dispatch(elementwise(i, k, &args, &offs, total)))
}

/// `gather_*`, `scatter_add_f32`, `scatter_nd_*` (in place).
pub(super) fn lower(i: usize, t: &Thunk) -> Option<Lowered> {
    let nd_in_place = matches!(t, Thunk::CpuIndexing(c)
        if matches!(&c.thunk, IndexingThunk::ScatterNd { data, dst, .. } if data == dst));
    if let Thunk::CpuIndexing(c) = t {
        if let IndexingThunk::GatherElements { .. } = c.thunk {
            return gather_elements(i, t, &c.thunk);
        }
    }
    if !matches!(
        t,
        Thunk::Gather(_) | Thunk::GatherAxis(_) | Thunk::ScatterAdd(_)
    ) && !nd_in_place
    {
        return None;
    }
    if t.io().writes.is_empty() {
        return Some(Lowered::Skip);
    }
    if aliased(t) {
        return None;
    }
    match t {
        Thunk::Gather(g) => {
            let row = g.trailing as u64 * g.dt.size() as u64;
            let offs = [g.table, g.idx, g.dst];
            gather(i, offs, 1, g.table_rows, g.num_idx, row, false)
        }
        Thunk::GatherAxis(g) => {
            let row = g.trailing as u64 * 4;
            let offs = [g.table, g.idx, g.dst];
            gather(i, offs, g.outer, g.axis_dim, g.num_idx, row, true)
        }
        Thunk::ScatterAdd(s) => {
            let args = ScatterAddArgs {
                num: s.num_updates,
                out_dim: s.out_dim,
                trailing: s.trailing,
            };
            let total = u32_of(s.out_dim as u64 * s.trailing as u64)?;
            let k = kernel(Family::Indexing, "scatter_add_f32".into());
            let offs = [s.updates, s.indices, s.dst];
            Some(Lowered::Dispatch(elementwise(i, k, &args, &offs, total)))
        }
        Thunk::CpuIndexing(c) => {
            let IndexingThunk::ScatterNd {
                indices,
                updates,
                dst,
                data_dims,
                indices_dims,
                dtype,
                upd_dtype,
                ..
            } = &c.thunk
            else {
                return None;
            };
            let (&q, lead) = indices_dims.split_last()?;
            if q > data_dims.len() || q > MAX_RANK || !matches!(dtype.size_bytes(), 1 | 2 | 4 | 8) {
                return None;
            }
            let convert = match (upd_dtype, dtype) {
                (u, d) if u == d => None,
                (DType::F32, DType::F16) => Some("f32_f16"),
                (DType::F16, DType::F32) => Some("f16_f32"),
                _ => return None,
            };
            let tuples = lead
                .iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d as u64))?;
            let block = data_dims[q..]
                .iter()
                .try_fold(dtype.size_bytes() as u64, |a, &d| a.checked_mul(d as u64))?;
            if tuples == 0 || block == 0 {
                return Some(Lowered::Skip);
            }
            let (w, sfx) = match convert {
                // element by element: the block counts elements of either type
                Some(sfx) => {
                    let aligned = raw_offset(*updates).is_multiple_of(upd_dtype.size_bytes())
                        && raw_offset(*dst).is_multiple_of(dtype.size_bytes());
                    if !aligned {
                        return None;
                    }
                    (dtype.size_bytes() as u64, sfx)
                }
                None => word(&[block], &[*updates, *dst]),
            };
            let mut args = ScatterNdArgs {
                tuples: u32_of(tuples)?,
                q: q as u32,
                block: u32_of(block / w)?,
                ..Default::default()
            };
            for (a, &d) in args.dims.iter_mut().zip(&data_dims[..q]) {
                *a = u32::try_from(d).ok()?;
            }
            let k = kernel(Family::Indexing, format!("scatter_nd_{sfx}"));
            let offs = [*indices, *updates, *dst];
            Some(Lowered::Dispatch(rows(
                i,
                k,
                &args,
                &offs,
                args.tuples,
                args.block,
            )))
        }
        _ => None,
    }
}

/// `gather_elements_*` (see the module docs), `None` for what the host
/// must check or report.
fn gather_elements(i: usize, t: &Thunk, g: &IndexingThunk) -> Option<Lowered> {
    let IndexingThunk::GatherElements {
        data,
        indices,
        dst,
        data_dims,
        indices_dims,
        axis,
        dtype,
    } = g
    else {
        return None;
    };
    let (r, es) = (data_dims.len(), dtype.size_bytes());
    let fits = indices_dims.len() == r
        && (1..=MAX_RANK).contains(&r)
        && *axis < r
        && (0..r).all(|d| d == *axis || indices_dims[d] <= data_dims[d]);
    if !fits || aliased(t) {
        return None;
    }
    let sfx = match es {
        1 => "u8",
        2 => "u16",
        4 => "u32",
        8 => "u64",
        _ => return None,
    };
    let len = indices_dims
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d as u64))?;
    if len == 0 {
        return Some(Lowered::Skip);
    }
    let aligned = |off: usize, n: usize| raw_offset(off).is_multiple_of(n);
    if !aligned(*data, es) || !aligned(*dst, es) || !aligned(*indices, 4) {
        return None;
    }
    let mut args = GatherElemArgs {
        len: u32_of(len)?,
        rank: r as u32,
        axis: *axis as u32,
        axis_dim: u32::try_from(data_dims[*axis]).ok()?,
        ..Default::default()
    };
    let mut stride = 1u64;
    for d in (0..r).rev() {
        args.idx_dims[d] = u32::try_from(indices_dims[d]).ok()?;
        args.data_strides[d] = u32_of(stride)?;
        stride = stride.checked_mul(data_dims[d] as u64)?;
    }
    u32_of(stride)?; // every data offset fits the kernel's u32 strides
    let k = kernel(Family::Indexing, format!("gather_elements_{sfx}"));
    let offs = [*data, *indices, *dst];
    Some(Lowered::Dispatch(elementwise(i, k, &args, &offs, args.len)))
}
