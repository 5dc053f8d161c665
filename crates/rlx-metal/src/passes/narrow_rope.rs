//! `fuse_narrow_rope`: a last-axis narrow feeding a RoPE disappears; the
//! [`Rope`] reads the wider parent directly through `src_row_stride`.
//!
//! Pattern: `narrow(P [outer, axis] → n [outer, len])` then
//! `rope(n → out)` with `rope.hidden == len` and `batch · seq == outer`
//! (the Q or K column window of a fused QKV projection). Dispatches: 2 → 1.
//!
//! Preconditions, all from the shared dataflow:
//! * the rope reads `n` densely (`src_row_stride` 0 or `hidden`), with the
//!   narrow's element type, and the narrow alone provides every byte of it;
//! * `n` is read by nothing but the rope before it is overwritten and is
//!   not a graph output or state — otherwise the narrow stays (and then
//!   rewriting the rope would save nothing);
//! * the narrowed window of `P` is not written between the narrow and the
//!   rope (the rope now reads it at its own slot);
//! * the rope's output does not overlap `P`'s rows at all (a strided read
//!   of row `r + 1` would otherwise see row `r`'s result).
//!
//! The rewritten rope starts at `P + start` and steps `axis` elements per
//! row; f32 and f16 are both fine (the rope kernel is generic).

use super::dataflow::Dataflow;
use super::rewrite::{rewrite_each, Rewrite};
use super::{Pass, PassContext};
use crate::thunk::attention::Rope;
use crate::thunk::io::ByteRange;
use crate::thunk::offsets::offset_add;
use crate::thunk::Thunk;

/// The pass. See the module docs.
pub struct FuseNarrowRope;

impl Pass for FuseNarrowRope {
    const NAME: &'static str = "fuse_narrow_rope";

    fn run(thunks: &mut [Thunk], cx: &PassContext) -> usize {
        rewrite_each(thunks, cx, |t: &[Thunk], df: &Dataflow, i| {
            let (rope, dead) = plan(t, df, i)?;
            let fused = Thunk::Rope(rope);
            Some(Rewrite {
                at: i,
                fused,
                dead: vec![dead],
            })
        })
    }
}

/// The rewritten rope at `i` and the narrow slot it replaces, if the
/// pattern and every precondition hold.
fn plan(thunks: &[Thunk], df: &Dataflow, i: usize) -> Option<(Rope, usize)> {
    let Thunk::Rope(rope) = &thunks[i] else {
        return None;
    };
    if rope.src_row_stride != 0 && rope.src_row_stride != rope.hidden {
        return None;
    }
    let es = rope.dt.size();
    let rows = (rope.batch as usize).checked_mul(rope.seq as usize)?;
    let row_bytes = (rope.hidden as usize).checked_mul(es)?;
    let span = rows.checked_mul(row_bytes)?;
    if span == 0 {
        return None;
    }
    let n = ByteRange::new(rope.src, span);
    let at = df.sole_writer(i, &n)?;
    let Thunk::Narrow(nw) = &thunks[at] else {
        return None;
    };
    if nw.dst != rope.src
        || nw.dt != rope.dt
        || nw.len != rope.hidden
        || nw.outer as usize != rows
        || nw.start.checked_add(nw.len)? > nw.src_axis
    {
        return None;
    }
    if !df.dead_after_except(at, &n, &[i]) {
        return None;
    }
    // what the narrow read must still be there at the rope's slot
    if df.io(at).reads.iter().any(|r| df.written_between(at, i, r)) {
        return None;
    }
    let parent_rows = (nw.src_axis as usize).checked_mul(es)?.checked_mul(rows)?;
    let parent = ByteRange::new(nw.src, parent_rows);
    let out = ByteRange::new(rope.dst, span);
    if out.overlaps(&parent) {
        return None;
    }
    let start = (nw.start as usize).checked_mul(es)?;
    Some((
        Rope {
            src: offset_add(nw.src, start),
            src_row_stride: nw.src_axis,
            ..rope.clone()
        },
        at,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::test_util::{names, run_only};
    use crate::thunk::shape::{Copy, Narrow};
    use crate::thunk::{tag_weight, HalfFlag};

    // QKV [2 rows, 48]: q = cols 0..16 (2 heads of 8), k = 16..32, v = 32..48
    const ROWS: u32 = 2;
    const AXIS: u32 = 48;
    const QKV: usize = 0;
    const BIG: usize = 4096;

    fn narrow(start: u32, len: u32, dst: usize, dt: HalfFlag) -> Thunk {
        Thunk::Narrow(Narrow {
            src: QKV,
            dst,
            outer: ROWS,
            src_axis: AXIS,
            start,
            len,
            dt,
        })
    }

    fn rope(src: usize, dst: usize, hidden: u32, dt: HalfFlag) -> Thunk {
        Thunk::Rope(Rope {
            src,
            cos: tag_weight(0),
            sin: tag_weight(256),
            dst,
            batch: 1,
            seq: ROWS,
            hidden,
            head_dim: 8,
            n_rot: 8,
            dt,
            src_row_stride: hidden,
            cos_per_token: false,
            interleaved: false,
        })
    }

    fn copy(src: usize, dst: usize, len: u32) -> Thunk {
        Thunk::Copy(Copy {
            src,
            dst,
            len,
            dt: HalfFlag::F32,
        })
    }

    fn fuse(thunks: Vec<Thunk>, live_out: &[ByteRange]) -> (Vec<Thunk>, usize) {
        let (_, m, t) = run_only(FuseNarrowRope::NAME, thunks, live_out);
        (t, m)
    }

    fn out(o: usize) -> ByteRange {
        ByteRange::new(o, 256)
    }

    #[test]
    fn q_and_k_read_the_parent() {
        let f32 = HalfFlag::F32;
        let (t, m) = fuse(
            vec![
                narrow(0, 16, BIG, f32),
                rope(BIG, BIG + 256, 16, f32),
                narrow(16, 16, BIG + 512, f32),
                rope(BIG + 512, BIG + 768, 16, f32),
                narrow(32, 16, BIG + 1024, f32),
            ],
            &[out(BIG + 256), out(BIG + 768), out(BIG + 1024)],
        );
        assert_eq!(m, 2);
        assert_eq!(names(&t), vec!["rope", "rope", "narrow"]);
        let Thunk::Rope(k) = &t[1] else {
            unreachable!()
        };
        assert_eq!(
            (k.src, k.src_row_stride, k.dst),
            (QKV + 64, AXIS, BIG + 768)
        );
    }

    #[test]
    fn f16_fires_with_half_byte_offsets() {
        let f16 = HalfFlag::F16;
        let (t, m) = fuse(
            vec![narrow(16, 16, BIG, f16), rope(BIG, BIG + 256, 16, f16)],
            &[out(BIG + 256)],
        );
        assert_eq!(m, 1);
        let Thunk::Rope(r) = &t[0] else {
            unreachable!()
        };
        assert_eq!(r.src, QKV + 32);
    }

    #[test]
    fn refuses_narrow_output_read_later() {
        let f32 = HalfFlag::F32;
        let (t, m) = fuse(
            vec![
                narrow(0, 16, BIG, f32),
                rope(BIG, BIG + 256, 16, f32),
                copy(BIG, BIG + 512, 32),
            ],
            &[out(BIG + 256), out(BIG + 512)],
        );
        assert_eq!(m, 0);
        assert_eq!(names(&t), vec!["narrow", "rope", "copy"]);
    }

    #[test]
    fn refuses_narrow_output_that_is_an_output() {
        let f32 = HalfFlag::F32;
        let (_, m) = fuse(
            vec![narrow(0, 16, BIG, f32), rope(BIG, BIG + 256, 16, f32)],
            &[out(BIG + 256), ByteRange::new(BIG + 8, 4)],
        );
        assert_eq!(m, 0);
    }

    #[test]
    fn refuses_parent_written_between() {
        let f32 = HalfFlag::F32;
        let (_, m) = fuse(
            vec![
                narrow(0, 16, BIG, f32),
                copy(BIG + 2048, QKV + 4, 1),
                rope(BIG, BIG + 256, 16, f32),
            ],
            &[out(BIG + 256), out(QKV)],
        );
        assert_eq!(m, 0);
    }

    #[test]
    fn refuses_rope_reading_part_of_the_narrow() {
        // the rope's rows are 8 wide, the narrow's 16: not the same tensor
        let f32 = HalfFlag::F32;
        let (_, m) = fuse(
            vec![narrow(0, 16, BIG, f32), rope(BIG, BIG + 256, 8, f32)],
            &[out(BIG + 256)],
        );
        assert_eq!(m, 0);
    }

    #[test]
    fn refuses_output_over_the_parent() {
        let f32 = HalfFlag::F32;
        let (_, m) = fuse(
            vec![narrow(0, 16, BIG, f32), rope(BIG, QKV + 64, 16, f32)],
            &[out(QKV)],
        );
        assert_eq!(m, 0);
    }

    #[test]
    fn refuses_mixed_precision() {
        let (_, m) = fuse(
            vec![
                narrow(0, 16, BIG, HalfFlag::F16),
                rope(BIG, BIG + 256, 16, HalfFlag::F32),
            ],
            &[out(BIG + 256)],
        );
        assert_eq!(m, 0);
    }
}
