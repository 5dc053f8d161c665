//! `fuse_residual_rms_norm`: a residual add feeding an RMSNorm becomes one
//! [`FusedResidualRmsNorm`].
//!
//! Pattern: `binary(add, x, res → s)`, optionally `copy(s → s')`, then
//! `rms_norm(s or s' → out)`. Dispatches: 2 (3 with the copy) → 1.
//!
//! Preconditions, all from the shared dataflow:
//! * the add (and the copy) alone provides every byte the norm reads, with
//!   the same element count and element type;
//! * the sum is read by nothing but the norm (or the copy) before it is
//!   overwritten, and is not a graph output or state — the post-attention
//!   pattern `h += attn; n = rms(h); h += mlp(n)` keeps `h` live and must
//!   not fuse, since the fused thunk never writes the sum;
//! * neither `x` nor `res` is written between the add and the norm (the
//!   fused thunk reads them at the norm's slot);
//! * the norm's output either is exactly `x` or `res` (each row is read in
//!   full before the same row is written) or does not overlap them at all —
//!   a shifted overlap would let one row read bytes another row wrote.

use super::dataflow::Dataflow;
use super::rewrite::{rewrite_each, Rewrite};
use super::{Pass, PassContext};
use crate::thunk::io::ByteRange;
use crate::thunk::norm::FusedResidualRmsNorm;
use crate::thunk::{tag_weight, Thunk};
use rlx_ir::op::BinaryOp;

/// The pass. See the module docs.
pub struct FuseResidualRmsNorm;

impl Pass for FuseResidualRmsNorm {
    const NAME: &'static str = "fuse_residual_rms_norm";

    fn run(thunks: &mut [Thunk], cx: &PassContext) -> usize {
        rewrite_each(thunks, cx, |t: &[Thunk], df: &Dataflow, i| {
            let (fused, dead) = plan(t, df, i)?;
            let fused = Thunk::FusedResidualRmsNorm(fused);
            Some(Rewrite { at: i, fused, dead })
        })
    }
}

/// The fused thunk for the norm at `i` and the slots it replaces, if the
/// pattern and every precondition hold.
fn plan(thunks: &[Thunk], df: &Dataflow, i: usize) -> Option<(FusedResidualRmsNorm, Vec<usize>)> {
    let Thunk::RmsNorm(norm) = &thunks[i] else {
        return None;
    };
    let es = norm.dt.size();
    let len = (norm.rows as usize).checked_mul(norm.h as usize)?;
    let span = len.checked_mul(es)?;
    if span == 0 {
        return None;
    }
    let src = ByteRange::new(norm.src, span);
    let mut dead = Vec::new();
    // Optional copy between the add and the norm.
    let mut at = df.sole_writer(i, &src)?;
    let mut sum = src;
    let mut readers = vec![i];
    if let Thunk::Copy(c) = &thunks[at] {
        if c.dst != norm.src || c.dt != norm.dt || c.len as usize != len {
            return None;
        }
        if !df.dead_after_except(at, &src, &[i]) {
            return None;
        }
        dead.push(at);
        readers = vec![at];
        sum = ByteRange::new(c.src, span);
        at = df.sole_writer(at, &sum)?;
    }
    let Thunk::BinaryFull(add) = &thunks[at] else {
        return None;
    };
    if add.op != BinaryOp::Add
        || add.dt != norm.dt
        || add.len as usize != len
        || add.dst != sum.offset
    {
        return None;
    }
    if !df.dead_after_except(at, &sum, &readers) {
        return None;
    }
    let x = ByteRange::new(add.lhs, span);
    let res = ByteRange::new(add.rhs, span);
    if df.written_between(at, i, &x) || df.written_between(at, i, &res) {
        return None;
    }
    let out = ByteRange::new(norm.dst, span);
    let clash = |r: &ByteRange| out.overlaps(r) && out != *r;
    if clash(&x) || clash(&res) {
        return None;
    }
    dead.push(at);
    Some((
        FusedResidualRmsNorm {
            x: add.lhs,
            res: add.rhs,
            bias: tag_weight(0),
            g: norm.g,
            b: norm.b,
            out: norm.dst,
            rows: norm.rows,
            h: norm.h,
            eps: norm.eps,
            has_bias: false,
            dt: norm.dt,
        },
        dead,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::test_util::run_only;
    use crate::passes::{run_passes, PIPELINE};
    use crate::thunk::binary::BinaryFull;
    use crate::thunk::norm::RmsNorm;
    use crate::thunk::shape::Copy;
    use crate::thunk::{HalfFlag, ThunkSchedule};

    const H: u32 = 8;
    const B: usize = (H as usize) * 4;

    fn add(lhs: usize, rhs: usize, dst: usize) -> Thunk {
        Thunk::BinaryFull(BinaryFull {
            lhs,
            rhs,
            dst,
            len: H,
            op: BinaryOp::Add,
            dt: HalfFlag::F32,
        })
    }

    fn rms(src: usize, dst: usize) -> Thunk {
        Thunk::RmsNorm(RmsNorm {
            src,
            g: tag_weight(0),
            b: tag_weight(64),
            dst,
            rows: 1,
            h: H,
            eps: 1e-6,
            dt: HalfFlag::F32,
        })
    }

    fn copy(src: usize, dst: usize) -> Thunk {
        Thunk::Copy(Copy {
            src,
            dst,
            len: H,
            dt: HalfFlag::F32,
        })
    }

    fn reader(src: usize, dst: usize) -> Thunk {
        copy(src, dst)
    }

    fn fuse(thunks: Vec<Thunk>, live_out: &[ByteRange]) -> (Vec<&'static str>, usize) {
        let (n, m, _) = run_only(FuseResidualRmsNorm::NAME, thunks, live_out);
        (n, m)
    }

    fn out(o: usize) -> ByteRange {
        ByteRange::new(o, B)
    }

    #[test]
    fn fires_when_sum_dies_at_the_norm() {
        let (n, m) = fuse(vec![add(0, B, 2 * B), rms(2 * B, 3 * B)], &[out(3 * B)]);
        assert_eq!(m, 1);
        assert_eq!(n, vec!["fused_residual_rms_norm"]);
    }

    #[test]
    fn fires_through_a_copy() {
        let (n, m) = fuse(
            vec![add(0, B, 2 * B), copy(2 * B, 4 * B), rms(4 * B, 3 * B)],
            &[out(3 * B)],
        );
        assert_eq!(m, 1);
        assert_eq!(n, vec!["fused_residual_rms_norm"]);
    }

    #[test]
    fn refuses_post_attention_residual() {
        // h2 = h + a; n = rms(h2); h3 = h2 + n: the sum stays live.
        let (n, m) = fuse(
            vec![
                add(0, B, 2 * B),
                rms(2 * B, 3 * B),
                add(2 * B, 3 * B, 4 * B),
            ],
            &[out(4 * B)],
        );
        assert_eq!(m, 0);
        assert_eq!(n, vec!["binary", "rms_norm", "binary"]);
    }

    #[test]
    fn refuses_sum_that_is_an_output() {
        let (_, m) = fuse(vec![add(0, B, 2 * B), rms(2 * B, 3 * B)], &[out(2 * B)]);
        assert_eq!(m, 0);
    }

    #[test]
    fn refuses_partial_overlap_read_of_the_sum() {
        // a later thunk reads half of the sum's bytes
        let (_, m) = fuse(
            vec![
                add(0, B, 2 * B),
                rms(2 * B, 3 * B),
                Thunk::Copy(Copy {
                    src: 2 * B + 8,
                    dst: 5 * B,
                    len: 2,
                    dt: HalfFlag::F32,
                }),
            ],
            &[out(3 * B), ByteRange::new(5 * B, 8)],
        );
        assert_eq!(m, 0);
    }

    #[test]
    fn refuses_operand_clobbered_between() {
        // x is overwritten between the add and the norm
        let (_, m) = fuse(
            vec![add(0, B, 2 * B), reader(6 * B, 0), rms(2 * B, 3 * B)],
            &[out(3 * B), out(0)],
        );
        assert_eq!(m, 0);
    }

    #[test]
    fn refuses_output_shifted_over_an_operand() {
        let (_, m) = fuse(vec![add(0, B, 2 * B), rms(2 * B, 8)], &[out(8)]);
        assert_eq!(m, 0);
    }

    #[test]
    fn fires_with_output_exactly_on_an_operand() {
        let (n, m) = fuse(vec![add(0, B, 2 * B), rms(2 * B, 0)], &[out(0)]);
        assert_eq!(m, 1);
        assert_eq!(n, vec!["fused_residual_rms_norm"]);
    }

    #[test]
    fn refuses_mixed_precision() {
        let mut a = add(0, B, 2 * B);
        if let Thunk::BinaryFull(b) = &mut a {
            b.dt = HalfFlag::F16;
        }
        let (_, m) = fuse(vec![a, rms(2 * B, 3 * B)], &[out(3 * B)]);
        assert_eq!(m, 0);
    }

    #[test]
    fn disabled_by_name() {
        let mut s = ThunkSchedule {
            thunks: vec![add(0, B, 2 * B), rms(2 * B, 3 * B)],
            rng: Default::default(),
        };
        let cx = PassContext {
            live_out: vec![out(3 * B)],
        };
        let r = run_passes(
            &mut s,
            &cx,
            PIPELINE,
            &[FuseResidualRmsNorm::NAME.to_string()],
        );
        assert_eq!(s.thunks.len(), 2);
        let stat = r
            .passes
            .iter()
            .find(|p| p.name == FuseResidualRmsNorm::NAME);
        assert!(stat.is_some_and(|p| !p.enabled));
        assert_eq!((r.dispatches_before, r.dispatches_after), (2, 2));
    }
}
