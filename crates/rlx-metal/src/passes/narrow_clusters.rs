//! `fuse_narrow_clusters`: last-axis narrows that split one source into
//! pieces become one [`SplitLastAxis`].
//!
//! Pattern: `narrow(P → d₀, [s₀..+l₀])`, …, `narrow(P → dₖ, [sₖ..+lₖ])`
//! (k ≥ 1) with the same source offset, rows, row width and element type,
//! whose windows partition the row exactly (no gap, no overlap: the
//! concat-VJP / QKV / gate-up split). Dispatches: k + 1 → 1.
//!
//! The split runs at the first narrow's slot, so every later narrow `j`
//! moves up; preconditions, all from the shared dataflow:
//! * `P`'s rows are not written between the first narrow and `j` (the
//!   narrows see one value of `P`; a later write starts a new cluster);
//! * nothing between the first narrow and `j` reads or writes `dⱼ` (the
//!   piece now appears earlier);
//! * no piece overlaps `P`'s rows or another piece (the split writes each
//!   piece while it still reads `P`);
//! * f32 only, as the seed's split kernel.

use super::dataflow::Dataflow;
use super::rewrite::{rewrite_each, Rewrite};
use super::{Pass, PassContext};
use crate::thunk::io::ByteRange;
use crate::thunk::shape::Narrow;
use crate::thunk::shape::SplitLastAxis;
use crate::thunk::{HalfFlag, Thunk};

/// The pass. See the module docs.
pub struct FuseNarrowClusters;

impl Pass for FuseNarrowClusters {
    const NAME: &'static str = "fuse_narrow_clusters";

    fn run(thunks: &mut [Thunk], cx: &PassContext) -> usize {
        rewrite_each(thunks, cx, |t: &[Thunk], df: &Dataflow, i| {
            let (split, dead) = plan(t, df, i)?;
            let fused = Thunk::SplitLastAxis(split);
            Some(Rewrite { at: i, fused, dead })
        })
    }
}

fn same_source(a: &Narrow, b: &Narrow) -> bool {
    a.src == b.src && a.outer == b.outer && a.src_axis == b.src_axis && a.dt == b.dt
}

/// True when the `(start, len)` windows tile `0..axis` exactly.
fn partitions(axis: u32, windows: &[(u32, u32)]) -> bool {
    let mut w = windows.to_vec();
    w.sort_unstable();
    let mut end = 0u32;
    for (start, len) in w {
        if start != end || len == 0 {
            return false;
        }
        let Some(e) = end.checked_add(len) else {
            return false;
        };
        end = e;
    }
    end == axis
}

/// The split for the cluster whose first narrow sits at `i` and the later
/// narrow slots it replaces.
fn plan(thunks: &[Thunk], df: &Dataflow, i: usize) -> Option<(SplitLastAxis, Vec<usize>)> {
    let Thunk::Narrow(first) = &thunks[i] else {
        return None;
    };
    if first.dt != HalfFlag::F32 {
        return None;
    }
    let es = first.dt.size();
    let row = (first.src_axis as usize).checked_mul(es)?;
    let parent = ByteRange::new(first.src, row.checked_mul(first.outer as usize)?);
    let piece = |n: &Narrow| -> Option<ByteRange> {
        let b = (n.outer as usize)
            .checked_mul(n.len as usize)?
            .checked_mul(es)?;
        Some(ByteRange::new(n.dst, b))
    };
    // collect the members that see the value of P the first narrow sees
    let mut members = vec![(i, first)];
    for (j, t) in thunks.iter().enumerate().skip(i + 1) {
        if df.written_between(i, j, &parent) {
            break;
        }
        if let Thunk::Narrow(n) = t {
            if same_source(first, n) {
                members.push((j, n));
            }
        }
    }
    if members.len() < 2 {
        return None;
    }
    let windows: Vec<(u32, u32)> = members.iter().map(|(_, n)| (n.start, n.len)).collect();
    if !partitions(first.src_axis, &windows) {
        return None;
    }
    let pieces = members
        .iter()
        .map(|(_, n)| piece(n))
        .collect::<Option<Vec<_>>>()?;
    for (a, pa) in pieces.iter().enumerate() {
        if pa.overlaps(&parent) || pieces[a + 1..].iter().any(|pb| pa.overlaps(pb)) {
            return None;
        }
    }
    for ((j, _), p) in members.iter().zip(&pieces).skip(1) {
        if df.read_between(i, *j, p) || df.written_between(i, *j, p) {
            return None;
        }
    }
    let split = SplitLastAxis {
        src: first.src,
        outer: first.outer,
        src_axis: first.src_axis,
        dt: first.dt,
        segments: members
            .iter()
            .map(|(_, n)| (n.dst, n.start, n.len))
            .collect(),
    };
    Some((split, members[1..].iter().map(|(j, _)| *j).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::test_util::{names, run_only};
    use crate::thunk::shape::Copy;

    const P: usize = 0;
    const BIG: usize = 4096;

    fn narrow_of(src: usize, axis: u32, start: u32, len: u32, dst: usize) -> Thunk {
        Thunk::Narrow(Narrow {
            src,
            dst,
            outer: 2,
            src_axis: axis,
            start,
            len,
            dt: HalfFlag::F32,
        })
    }

    fn narrow(start: u32, len: u32, dst: usize) -> Thunk {
        narrow_of(P, 12, start, len, dst)
    }

    fn copy(src: usize, dst: usize) -> Thunk {
        Thunk::Copy(Copy {
            src,
            dst,
            len: 4,
            dt: HalfFlag::F32,
        })
    }

    fn fuse(thunks: Vec<Thunk>, live_out: &[ByteRange]) -> (Vec<Thunk>, usize) {
        let (_, m, t) = run_only(FuseNarrowClusters::NAME, thunks, live_out);
        (t, m)
    }

    fn outs() -> Vec<ByteRange> {
        (0..4).map(|k| ByteRange::new(BIG + k * 256, 256)).collect()
    }

    #[test]
    fn three_way_split() {
        let (t, m) = fuse(
            vec![
                narrow(0, 4, BIG),
                copy(BIG, BIG + 768),
                narrow(4, 6, BIG + 256),
                narrow(10, 2, BIG + 512),
            ],
            &outs(),
        );
        assert_eq!(m, 1);
        assert_eq!(names(&t), vec!["split_lastax", "copy"]);
        let Thunk::SplitLastAxis(s) = &t[0] else {
            unreachable!()
        };
        assert_eq!(
            s.segments,
            vec![(BIG, 0, 4), (BIG + 256, 4, 6), (BIG + 512, 10, 2)]
        );
    }

    #[test]
    fn refuses_a_gap() {
        let (t, m) = fuse(vec![narrow(0, 4, BIG), narrow(6, 6, BIG + 256)], &outs());
        assert_eq!(m, 0);
        assert_eq!(names(&t), vec!["narrow", "narrow"]);
    }

    #[test]
    fn refuses_an_overlap() {
        let (_, m) = fuse(
            vec![
                narrow(0, 6, BIG),
                narrow(4, 4, BIG + 256),
                narrow(8, 4, BIG + 512),
            ],
            &outs(),
        );
        assert_eq!(m, 0);
    }

    #[test]
    fn refuses_a_leading_axis_narrow() {
        // Narrow of the same offset viewed with a different row shape
        // (another axis of the same buffer) never joins the cluster
        let (_, m) = fuse(
            vec![
                narrow_of(P, 12, 0, 4, BIG),
                narrow_of(P, 24, 4, 20, BIG + 256),
            ],
            &outs(),
        );
        assert_eq!(m, 0);
    }

    #[test]
    fn refuses_source_rewritten_between() {
        let (t, m) = fuse(
            vec![
                narrow(0, 4, BIG),
                copy(BIG + 1024, P),
                narrow(4, 8, BIG + 256),
            ],
            &outs(),
        );
        assert_eq!(m, 0);
        assert_eq!(names(&t), vec!["narrow", "copy", "narrow"]);
    }

    #[test]
    fn refuses_piece_read_before_its_narrow() {
        // the old value of the second piece is read between the narrows
        let (_, m) = fuse(
            vec![
                narrow(0, 4, BIG),
                copy(BIG + 256, BIG + 768),
                narrow(4, 8, BIG + 256),
            ],
            &outs(),
        );
        assert_eq!(m, 0);
    }

    #[test]
    fn refuses_f16() {
        let mk = |start, len, dst| {
            Thunk::Narrow(Narrow {
                src: P,
                dst,
                outer: 2,
                src_axis: 12,
                start,
                len,
                dt: HalfFlag::F16,
            })
        };
        let (_, m) = fuse(vec![mk(0, 4, BIG), mk(4, 8, BIG + 256)], &outs());
        assert_eq!(m, 0);
    }

    #[test]
    fn partition_check() {
        assert!(partitions(10, &[(4, 6), (0, 4)]));
        assert!(!partitions(10, &[(0, 4), (4, 5)]));
        assert!(!partitions(10, &[(0, 0), (0, 10)]));
        assert!(!partitions(10, &[(0, 6), (4, 6)]));
    }
}
