//! The schedule verifier: every byte range a thunk touches lies inside its
//! buffer (the arena, the state buffer, or its own weights segment); no
//! thunk writes weights; every arena byte a thunk reads was written earlier
//! or is initialised before the run (inputs; the state buffer and weights
//! are always initialised); and inside one dispatch
//! group (thunks the device may run concurrently) no thunk reads bytes a
//! later thunk of the group writes. It relies on `Thunk::io()` being exact.

use super::error::CompileError;
use crate::thunk::{buffer_of, is_arena, raw_offset, Buf, ThunkSchedule};
use std::collections::BTreeMap;
use std::ops::Range;

/// A set of byte intervals, merged on insert.
#[derive(Debug, Default, Clone)]
pub struct ByteSet {
    spans: BTreeMap<usize, usize>, // start -> end (exclusive)
}

impl ByteSet {
    /// Add `[start, end)`.
    pub fn insert(&mut self, start: usize, end: usize) {
        if start >= end {
            return;
        }
        let (mut s, mut e) = (start, end);
        // merge with a span that starts before and reaches s
        if let Some((&ps, &pe)) = self.spans.range(..=s).next_back() {
            if pe >= s {
                s = ps;
                e = e.max(pe);
                self.spans.remove(&ps);
            }
        }
        let overlapping: Vec<(usize, usize)> =
            self.spans.range(s..=e).map(|(&a, &b)| (a, b)).collect();
        for (a, b) in overlapping {
            e = e.max(b);
            self.spans.remove(&a);
        }
        self.spans.insert(s, e);
    }

    /// The first byte of `[start, end)` not in the set, if any.
    pub fn first_gap(&self, start: usize, end: usize) -> Option<usize> {
        let mut pos = start;
        while pos < end {
            match self.spans.range(..=pos).next_back() {
                Some((_, &e)) if e > pos => pos = e,
                _ => return Some(pos),
            }
        }
        None
    }
}

/// What the verifier needs to know besides the thunks.
#[derive(Debug, Clone, Default)]
pub struct VerifyContext {
    /// Arena size in bytes.
    pub arena_bytes: usize,
    /// State-buffer size in bytes.
    pub state_bytes: usize,
    /// Size in bytes of every weights segment (segment 0 first).
    pub segment_bytes: Vec<usize>,
    /// Arena ranges valid before the first thunk (inputs).
    pub initialized: Vec<Range<usize>>,
    /// Dispatch groups (index ranges of thunks that may run together);
    /// empty means every thunk is its own group.
    pub groups: Vec<Range<usize>>,
}

/// Check `schedule`; the first problem found names the thunk index.
pub fn verify_schedule(schedule: &ThunkSchedule, cx: &VerifyContext) -> Result<(), CompileError> {
    let err = |i: usize, msg: String| CompileError::Verify {
        index: i,
        thunk: schedule.thunks[i].name().to_string(),
        msg,
    };
    let mut written = ByteSet::default();
    for r in &cx.initialized {
        written.insert(r.start, r.end);
    }
    for (i, t) in schedule.thunks.iter().enumerate() {
        let io = t.io();
        for (kind, ranges) in [("reads", &io.reads), ("writes", &io.writes)] {
            for r in ranges.iter() {
                let buf = buffer_of(r.offset);
                let raw = raw_offset(r.offset);
                let limit = match buf {
                    Buf::Arena => cx.arena_bytes,
                    Buf::State => cx.state_bytes,
                    Buf::Weights(s) => match cx.segment_bytes.get(s) {
                        Some(&b) => b,
                        None => {
                            return Err(err(
                                i,
                                format!(
                                    "{kind} weights segment {s}, but the schedule has {}",
                                    cx.segment_bytes.len()
                                ),
                            ))
                        }
                    },
                };
                let end = raw.saturating_add(r.len);
                if end > limit {
                    return Err(err(
                        i,
                        format!("{kind} {buf} bytes {raw}..{end}, beyond the {buf} size {limit}"),
                    ));
                }
                if kind == "writes" && matches!(buf, Buf::Weights(_)) {
                    return Err(err(
                        i,
                        format!("writes the read-only {buf} at {raw}..{end}"),
                    ));
                }
            }
        }
        for r in &io.reads {
            if !is_arena(r.offset) {
                continue;
            }
            if let Some(gap) = written.first_gap(r.offset, r.offset + r.len) {
                return Err(err(
                    i,
                    format!(
                        "reads arena byte {gap} (range {}..{}) before anything writes it",
                        r.offset,
                        r.offset + r.len
                    ),
                ));
            }
        }
        for w in &io.writes {
            written.insert(w.offset, w.offset + w.len);
        }
    }
    for g in &cx.groups {
        for i in g.clone() {
            let Some(ti) = schedule.thunks.get(i) else {
                continue;
            };
            let reads = ti.io().reads;
            for j in i + 1..g.end.min(schedule.thunks.len()) {
                for w in &schedule.thunks[j].io().writes {
                    if let Some(r) = reads.iter().find(|r| r.overlaps(w)) {
                        return Err(err(
                            i,
                            format!(
                                "reads {}..{} which thunk {j} ({}) of the same dispatch group writes",
                                r.offset,
                                r.offset + r.len,
                                schedule.thunks[j].name()
                            ),
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byteset_merges_and_finds_gaps() {
        let mut s = ByteSet::default();
        s.insert(0, 10);
        s.insert(20, 30);
        assert_eq!(s.first_gap(0, 10), None);
        assert_eq!(s.first_gap(5, 25), Some(10));
        s.insert(8, 22);
        assert_eq!(s.first_gap(0, 30), None);
        assert_eq!(s.first_gap(0, 31), Some(30));
    }
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
mod schedule_tests {
    use super::*;
    use crate::thunk::binary::BinaryFull;
    use crate::thunk::shape::Copy;
    use crate::thunk::{tag_segment, tag_state, tag_weight, HalfFlag, Thunk};
    use rlx_ir::op::BinaryOp;

    fn add(lhs: usize, rhs: usize, dst: usize, len: u32) -> Thunk {
        BinaryFull {
            lhs,
            rhs,
            dst,
            len,
            op: BinaryOp::Add,
            dt: HalfFlag::F32,
        }
        .into()
    }

    fn cx(arena: usize, init: Vec<Range<usize>>) -> VerifyContext {
        VerifyContext {
            arena_bytes: arena,
            state_bytes: 128,
            segment_bytes: vec![256, 32],
            initialized: init,
            groups: vec![],
        }
    }

    fn sched(thunks: Vec<Thunk>) -> ThunkSchedule {
        ThunkSchedule {
            thunks,
            rng: Default::default(),
        }
    }

    #[test]
    fn accepts_a_well_formed_chain() {
        let s = sched(vec![add(0, 64, 128, 16), add(128, tag_weight(0), 192, 16)]);
        verify_schedule(&s, &cx(256, vec![0..128])).unwrap();
    }

    #[test]
    fn rejects_read_before_write_naming_the_thunk() {
        let s = sched(vec![add(0, 64, 128, 16), add(128, 192, 0, 16)]);
        let e = verify_schedule(&s, &cx(256, vec![0..128]))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("[verify] thunk 1 (binary): reads arena byte 192"),
            "{e}"
        );
    }

    #[test]
    fn rejects_out_of_bounds_and_weight_writes() {
        let s = sched(vec![Copy {
            src: 0,
            dst: 1000,
            len: 16,
            dt: HalfFlag::F32,
        }
        .into()]);
        let e = verify_schedule(&s, &cx(1024, vec![0..64]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("thunk 0 (copy)") && e.contains("1000..1064"),
            "{e}"
        );
        let s = sched(vec![Copy {
            src: tag_weight(0),
            dst: tag_weight(64),
            len: 4,
            dt: HalfFlag::F32,
        }
        .into()]);
        let e = verify_schedule(&s, &cx(1024, vec![]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("read-only weights segment 0"), "{e}");
        let s = sched(vec![add(0, tag_weight(250), 64, 4)]);
        let e = verify_schedule(&s, &cx(1024, vec![0..64]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("beyond the weights segment 0 size 256"), "{e}");
    }

    #[test]
    fn bounds_are_per_segment_and_state() {
        // segment 1 is 32 bytes: 16 f32 elements at 0 fit in segment 0 but not in 1
        let ok = sched(vec![add(0, tag_segment(1, 0), 64, 8)]);
        verify_schedule(&ok, &cx(1024, vec![0..64])).unwrap();
        let s = sched(vec![add(0, tag_segment(1, 0), 64, 16)]);
        let e = verify_schedule(&s, &cx(1024, vec![0..64]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("weights segment 1 bytes 0..64"), "{e}");
        let s = sched(vec![add(0, tag_segment(2, 0), 64, 1)]);
        let e = verify_schedule(&s, &cx(1024, vec![0..64]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("weights segment 2, but the schedule has 2"),
            "{e}"
        );
        // state is initialised (no read-before-write) and writable, but bounded
        let s = sched(vec![add(tag_state(0), tag_state(64), tag_state(0), 16)]);
        verify_schedule(&s, &cx(64, vec![])).unwrap();
        let s = sched(vec![add(tag_state(0), tag_state(100), 0, 16)]);
        let e = verify_schedule(&s, &cx(64, vec![]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("state bytes 100..164"), "{e}");
    }

    #[test]
    fn rejects_hazards_inside_a_dispatch_group() {
        // thunk 0 reads 64..128, thunk 1 of the same group writes it
        let s = sched(vec![add(0, 64, 128, 16), add(0, 0, 64, 16)]);
        let mut c = cx(256, vec![0..128]);
        verify_schedule(&s, &c).unwrap();
        c.groups = vec![0..2];
        let e = verify_schedule(&s, &c).unwrap_err().to_string();
        assert!(
            e.contains("thunk 0 (binary)") && e.contains("thunk 1 (binary)"),
            "{e}"
        );
    }
}
