//! Same-shape and broadcasting binary ops → `binary.metal`.

use super::{aliased, elementwise, kernel, suffix, Lowered};
use crate::metal::args::{binary_code, BinaryArgs, BroadcastArgs, MAX_RANK};
use crate::metal::kernels::Family;
use crate::thunk::Thunk;

/// True when `b` updates `lhs` in place elementwise (`dst == lhs`, `lhs`
/// dense in `out_dims`) and `rhs` does not overlap it: each thread then
/// reads and writes only its own word (e.g. a conv's channel bias add).
fn dense_in_place(t: &Thunk, b: &crate::thunk::binary::BinaryBroadcast) -> bool {
    let mut stride = 1u64;
    let mut dense = true;
    for (&d, &s) in b.out_dims.iter().zip(&b.lhs_strides).rev() {
        dense &= d == 1 || s as u64 == stride;
        stride = stride.saturating_mul(d as u64);
    }
    let io = t.io();
    let rhs_clear = match (io.reads.get(1), io.writes.first()) {
        (Some(r), Some(w)) => !r.overlaps(w),
        _ => false,
    };
    b.lhs == b.dst && dense && rhs_clear
}

/// `binary_*` for `BinaryFull`, `binary_broadcast_*` for `BinaryBroadcast`
/// up to rank [`MAX_RANK`] (not in place, except an elementwise update of
/// a dense `lhs`).
pub(super) fn lower(i: usize, t: &Thunk) -> Option<Lowered> {
    Some(match t {
        Thunk::BinaryFull(b) if b.len > 0 => {
            let args = BinaryArgs {
                len: b.len,
                op: binary_code(b.op),
            };
            let k = kernel(Family::Binary, format!("binary_{}", suffix(b.dt)));
            Lowered::Dispatch(elementwise(i, k, &args, &[b.lhs, b.rhs, b.dst], b.len))
        }
        Thunk::BinaryBroadcast(b)
            if b.len > 0
                && (b.rank as usize) <= MAX_RANK
                && b.out_dims.len() == b.rank as usize
                && b.lhs_strides.len() == b.rank as usize
                && b.rhs_strides.len() == b.rank as usize
                && (!aliased(t) || dense_in_place(t, b)) =>
        {
            let r = b.rank as usize;
            let mut args = BroadcastArgs {
                len: b.len,
                op: binary_code(b.op),
                rank: b.rank,
                ..Default::default()
            };
            args.out_dims[..r].copy_from_slice(&b.out_dims);
            args.lhs_strides[..r].copy_from_slice(&b.lhs_strides);
            args.rhs_strides[..r].copy_from_slice(&b.rhs_strides);
            let k = kernel(Family::Binary, format!("binary_broadcast_{}", suffix(b.dt)));
            Lowered::Dispatch(elementwise(i, k, &args, &[b.lhs, b.rhs, b.dst], b.len))
        }
        Thunk::BinaryFull(_) | Thunk::BinaryBroadcast(_) if t.io().writes.is_empty() => {
            Lowered::Skip
        }
        _ => return None,
    })
}
