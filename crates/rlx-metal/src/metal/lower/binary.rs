//! Same-shape and broadcasting binary ops → `binary.metal`.

use super::{aliased, elementwise, kernel, suffix, Lowered};
use crate::metal::args::{binary_code, BinaryArgs, BroadcastArgs, MAX_RANK};
use crate::metal::kernels::Family;
use crate::thunk::Thunk;

/// `binary_*` for `BinaryFull`, `binary_broadcast_*` for `BinaryBroadcast`
/// up to rank [`MAX_RANK`] (not in place).
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
                && !aliased(t) =>
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
