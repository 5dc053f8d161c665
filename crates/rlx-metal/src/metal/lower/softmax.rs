//! Softmax over the last axis → `softmax.metal`.

use super::{kernel, rows, suffix, Lowered};
use crate::metal::args::SoftmaxArgs;
use crate::metal::kernels::Family;
use crate::thunk::Thunk;

/// `softmax_*` in place, one threadgroup per row.
pub(super) fn lower(i: usize, t: &Thunk) -> Option<Lowered> {
    Some(match t {
        Thunk::Softmax(s) if s.rows > 0 && s.cols > 0 => {
            let args = SoftmaxArgs {
                rows: s.rows,
                cols: s.cols,
            };
            let k = kernel(Family::Softmax, format!("softmax_{}", suffix(s.dt)));
            Lowered::Dispatch(rows(i, k, &args, &[s.data], s.rows, s.cols))
        }
        Thunk::Softmax(_) if t.io().writes.is_empty() => Lowered::Skip,
        _ => return None,
    })
}
