//! Axis reductions, arg max / min and cumulative sums → `reduce.metal`.
//!
//! `inner == 1` (the reduced axis is contiguous) runs one threadgroup per
//! row; otherwise one thread per output walks the axis. Arg reductions over
//! an empty axis (a host error) and in-place or aliased operands stay on
//! the host. TopK runs k selection rounds over the row, so only k up to
//! [`TOPK_MAX_K`] is claimed (larger k and k > n, a host error, stay on
//! the host).

use super::shape::u32_of;
use super::{aliased, elementwise, kernel, rows, suffix, Lowered};
use crate::metal::args::{reduce_code, ArgReduceArgs, CumsumArgs, ReduceArgs, TopKArgs};
use crate::metal::kernels::Family;
use crate::thunk::Thunk;

/// Largest k `topk_f32` is used for.
pub const TOPK_MAX_K: u32 = 64;

/// `reduce_{rows,cols}_*`, `argreduce_{rows,cols}_f32`, `cumsum_f32`,
/// `topk_f32`.
pub(super) fn lower(i: usize, t: &Thunk) -> Option<Lowered> {
    if !matches!(
        t,
        Thunk::Reduce(_) | Thunk::ArgReduce(_) | Thunk::Cumsum(_) | Thunk::TopK(_)
    ) {
        return None;
    }
    if t.io().writes.is_empty() {
        return Some(Lowered::Skip);
    }
    if aliased(t) {
        return None;
    }
    let d = match t {
        Thunk::Reduce(r) => {
            let args = ReduceArgs {
                outer: r.outer,
                reduced: r.reduced,
                inner: r.inner,
                op: reduce_code(r.op),
            };
            let dt = suffix(r.dt);
            let offs = [r.src, r.dst];
            if r.inner == 1 {
                let k = kernel(Family::Reduce, format!("reduce_rows_{dt}"));
                rows(i, k, &args, &offs, r.outer, r.reduced)
            } else {
                let k = kernel(Family::Reduce, format!("reduce_cols_{dt}"));
                let total = u32_of(r.outer as u64 * r.inner as u64)?;
                elementwise(i, k, &args, &offs, total)
            }
        }
        Thunk::ArgReduce(a) if a.reduced > 0 => {
            let args = ArgReduceArgs {
                outer: a.outer,
                reduced: a.reduced,
                inner: a.inner,
                is_max: a.is_max as u32,
            };
            let offs = [a.src, a.dst];
            if a.inner == 1 {
                let k = kernel(Family::Reduce, "argreduce_rows_f32".into());
                rows(i, k, &args, &offs, a.outer, a.reduced)
            } else {
                let k = kernel(Family::Reduce, "argreduce_cols_f32".into());
                let total = u32_of(a.outer as u64 * a.inner as u64)?;
                elementwise(i, k, &args, &offs, total)
            }
        }
        Thunk::Cumsum(c) => {
            let args = CumsumArgs {
                rows: c.rows,
                cols: c.cols,
                exclusive: c.exclusive as u32,
            };
            let k = kernel(Family::Reduce, "cumsum_f32".into());
            rows(i, k, &args, &[c.src, c.dst], c.rows, c.cols)
        }
        Thunk::TopK(tk) if tk.k <= tk.axis_dim && tk.k <= TOPK_MAX_K => {
            let args = TopKArgs {
                outer: tk.outer,
                n: tk.axis_dim,
                k: tk.k,
            };
            let k = kernel(Family::Reduce, "topk_f32".into());
            rows(i, k, &args, &[tk.src, tk.dst], tk.outer, tk.axis_dim)
        }
        _ => return None,
    };
    Some(Lowered::Dispatch(d))
}
