//! `rewrite_dense_binary_broadcast`: a [`BinaryBroadcast`] whose operands
//! are both laid out exactly like its dense output becomes a
//! [`BinaryFull`] (a plain vector loop instead of per-element index math).
//!
//! Pattern: `binary_broadcast(op, lhs, rhs → dst)` with every axis of size
//! above one strided row-major in both operands. Lowering emits these when
//! shapes differ only by size-one axes (`[4, 8] + [1, 4, 8]`), and for the
//! `max(x, x)` materialisation of such an operand. Dispatches: 1 → 1.
//!
//! Preconditions:
//! * `rank`, `out_dims` and both stride lists agree in length, and `len`
//!   is the product of `out_dims`;
//! * in each operand, every axis of size above one has the stride of a
//!   row-major dense array of `out_dims` (a size-one axis is never stepped,
//!   so its stride is free: the seed requires it too, which misses the
//!   leading-one case above);
//! * the element type carries over (`BinaryFull` has f32 and f16 kernels).
//!
//! The rewritten thunk then reads exactly the bytes the broadcast read and
//! writes the same bytes, which is checked against the thunk's ranges in
//! the shared [`Dataflow`]; the def-use of every other thunk is unchanged,
//! so no liveness question arises.

use super::dataflow::Dataflow;
use super::{Pass, PassContext};
use crate::thunk::binary::{BinaryBroadcast, BinaryFull};
use crate::thunk::Thunk;

/// The pass. See the module docs.
pub struct RewriteDenseBinaryBroadcast;

impl Pass for RewriteDenseBinaryBroadcast {
    const NAME: &'static str = "rewrite_dense_binary_broadcast";

    fn run(thunks: &mut [Thunk], cx: &PassContext) -> usize {
        let df = Dataflow::new(thunks, &cx.live_out);
        let mut matches = 0;
        for (i, t) in thunks.iter_mut().enumerate() {
            if let Some(full) = plan(t, &df, i) {
                *t = full;
                matches += 1;
            }
        }
        matches
    }
}

/// True when `strides` step every non-unit axis of `dims` row-major dense.
fn dense(dims: &[u32], strides: &[u32]) -> bool {
    let mut expected: u64 = 1;
    for (&d, &s) in dims.iter().zip(strides).rev() {
        if d > 1 && u64::from(s) != expected {
            return false;
        }
        expected = expected.saturating_mul(u64::from(d));
    }
    true
}

/// The `BinaryFull` for thunk `i`, if it is a dense broadcast.
fn plan(t: &Thunk, df: &Dataflow, i: usize) -> Option<Thunk> {
    let Thunk::BinaryBroadcast(b) = t else {
        return None;
    };
    if !shape_ok(b) {
        return None;
    }
    let full = Thunk::BinaryFull(BinaryFull {
        lhs: b.lhs,
        rhs: b.rhs,
        dst: b.dst,
        len: b.len,
        op: b.op,
        dt: b.dt,
    });
    let (old, new) = (df.io(i), full.io());
    (old.reads == new.reads && old.writes == new.writes).then_some(full)
}

fn shape_ok(b: &BinaryBroadcast) -> bool {
    let rank = b.rank as usize;
    let numel = b
        .out_dims
        .iter()
        .try_fold(1u32, |acc, &d| acc.checked_mul(d));
    b.out_dims.len() == rank
        && b.lhs_strides.len() == rank
        && b.rhs_strides.len() == rank
        && numel == Some(b.len)
        && dense(&b.out_dims, &b.lhs_strides)
        && dense(&b.out_dims, &b.rhs_strides)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::test_util::run_only;
    use crate::thunk::io::ByteRange;
    use crate::thunk::HalfFlag;
    use rlx_ir::op::BinaryOp;

    fn bb(dims: &[u32], ls: &[u32], rs: &[u32], dt: HalfFlag) -> Thunk {
        Thunk::BinaryBroadcast(BinaryBroadcast {
            lhs: 0,
            rhs: 4096,
            dst: 8192,
            len: dims.iter().product(),
            op: BinaryOp::Sub,
            dt,
            rank: dims.len() as u32,
            out_dims: dims.to_vec(),
            lhs_strides: ls.to_vec(),
            rhs_strides: rs.to_vec(),
        })
    }

    fn rewrite(t: Thunk) -> (Vec<&'static str>, usize, Vec<Thunk>) {
        let out = ByteRange::new(8192, 4096);
        run_only(RewriteDenseBinaryBroadcast::NAME, vec![t], &[out])
    }

    #[test]
    fn dense_same_shape_becomes_binary_full() {
        let (n, m, t) = rewrite(bb(&[3, 4, 5], &[20, 5, 1], &[20, 5, 1], HalfFlag::F32));
        assert_eq!((n, m), (vec!["binary"], 1));
        let Thunk::BinaryFull(f) = &t[0] else {
            unreachable!()
        };
        assert_eq!((f.lhs, f.rhs, f.dst, f.len), (0, 4096, 8192, 60));
        assert_eq!((f.op, f.dt), (BinaryOp::Sub, HalfFlag::F32));
    }

    #[test]
    fn leading_unit_axes_with_zero_stride_are_dense() {
        // [4, 8] - [1, 4, 8] lowers with stride 0 on the size-one axis
        let (n, m, _) = rewrite(bb(&[1, 4, 8], &[0, 8, 1], &[32, 8, 1], HalfFlag::F32));
        assert_eq!((n, m), (vec!["binary"], 1));
        let (_, m, _) = rewrite(bb(&[4, 1, 8], &[8, 0, 1], &[8, 8, 1], HalfFlag::F32));
        assert_eq!(m, 1);
    }

    #[test]
    fn f16_keeps_its_element_type() {
        let (_, m, t) = rewrite(bb(&[2, 3], &[3, 1], &[3, 1], HalfFlag::F16));
        assert_eq!(m, 1);
        assert!(matches!(&t[0], Thunk::BinaryFull(f) if f.dt == HalfFlag::F16));
    }

    #[test]
    fn rank_zero_scalar_is_dense() {
        let (_, m, _) = rewrite(bb(&[], &[], &[], HalfFlag::F32));
        assert_eq!(m, 1);
    }

    #[test]
    fn refuses_real_broadcasts() {
        let cases: [(&[u32], &[u32], &[u32]); 4] = [
            (&[3, 4], &[4, 1], &[0, 1]), // row broadcast
            (&[3, 4], &[1, 0], &[4, 1]), // column broadcast
            (&[3, 4], &[1, 3], &[4, 1]), // transposed operand
            (&[3, 4], &[4, 1], &[8, 2]), // strided view
        ];
        for (d, l, r) in cases {
            let (n, m, _) = rewrite(bb(d, l, r, HalfFlag::F32));
            assert_eq!((n, m), (vec!["binary_broadcast"], 0), "{d:?} {l:?} {r:?}");
        }
    }

    #[test]
    fn refuses_mismatched_lengths() {
        let mut t = bb(&[3, 4], &[4, 1], &[4, 1], HalfFlag::F32);
        if let Thunk::BinaryBroadcast(b) = &mut t {
            b.len = 10;
        }
        assert_eq!(rewrite(t).1, 0);
        let mut t = bb(&[3, 4], &[4, 1], &[4, 1], HalfFlag::F32);
        if let Thunk::BinaryBroadcast(b) = &mut t {
            b.rank = 3;
        }
        assert_eq!(rewrite(t).1, 0);
        let t = bb(&[3, 4], &[4, 1], &[1], HalfFlag::F32);
        assert_eq!(rewrite(t).1, 0);
    }

    #[test]
    fn dense_rule() {
        assert!(dense(&[2, 3, 4], &[12, 4, 1]));
        assert!(dense(&[2, 1, 4], &[4, 99, 1]));
        assert!(!dense(&[2, 3, 4], &[12, 4, 2]));
        assert!(!dense(&[2, 3, 4], &[0, 4, 1]));
        assert!(dense(&[], &[]));
    }
}
