//! Gathers, scatter-add and the in-place ScatterND → `indexing.metal`.
//!
//! Gathers move the widest word dividing the row and the offsets (as the
//! layout moves do). ScatterND is claimed only in place (`data == dst`, a
//! write into a State leaf: the decoders' KV-cache row write); the
//! out-of-place form, which first copies all of `data`, stays on the host,
//! as do the other ONNX indexing kinds. On an out-of-range index the host
//! fails the run while the kernels stay memory-safe (see `indexing.metal`):
//! the schedules rlx builds index with in-range token ids and cache slots.

use super::shape::{u32_of, word};
use super::{aliased, elementwise, kernel, rows, Lowered};
use crate::metal::args::{GatherArgs, ScatterAddArgs, ScatterNdArgs, MAX_RANK};
use crate::metal::kernels::Family;
use crate::thunk::indexing::IndexingThunk;
use crate::thunk::Thunk;

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
                ..
            } = &c.thunk
            else {
                return None;
            };
            let (&q, lead) = indices_dims.split_last()?;
            if q > data_dims.len() || q > MAX_RANK || !matches!(dtype.size_bytes(), 1 | 2 | 4 | 8) {
                return None;
            }
            let tuples = lead
                .iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d as u64))?;
            let block = data_dims[q..]
                .iter()
                .try_fold(dtype.size_bytes() as u64, |a, &d| a.checked_mul(d as u64))?;
            if tuples == 0 || block == 0 {
                return Some(Lowered::Skip);
            }
            let (w, sfx) = word(&[block], &[*updates, *dst]);
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
