//! Def-use over a thunk schedule, at byte granularity.
//!
//! Every fusion pass asks the same few questions about a schedule: who last
//! wrote these bytes, who reads the value a thunk wrote before it is
//! overwritten, is that value a graph output. This module answers them from
//! the exact byte ranges of [`Thunk::io`] — partial overlaps included — and
//! has no "opaque thunk" escape: every thunk declares what it touches, so
//! every answer is exact up to the (conservative) ranges `io()` reports.
//!
//! Values are tracked as byte intervals per buffer. A value written at `i`
//! stays live byte by byte until later writes cover those bytes; a read of
//! any still-live byte is a use. Reads are taken to happen before the writes
//! of the same thunk (an in-place update reads the old value).

use crate::thunk::io::{ByteRange, ThunkIo};
use crate::thunk::offsets::raw_offset;
use crate::thunk::Thunk;

/// Which buffer (arena, state, weights segment) a tagged offset points into:
/// the offset with its raw part removed.
fn buffer_key(off: usize) -> usize {
    off - raw_offset(off)
}

/// A set of half-open byte intervals `[start, end)` within one buffer,
/// sorted and disjoint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Intervals {
    key: usize,
    spans: Vec<(usize, usize)>,
}

impl Intervals {
    fn of(r: &ByteRange) -> Self {
        let spans = if r.len == 0 {
            Vec::new()
        } else {
            vec![(r.start(), r.end())]
        };
        Intervals {
            key: buffer_key(r.offset),
            spans,
        }
    }

    fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// True when any byte of `r` is in the set.
    fn hits(&self, r: &ByteRange) -> bool {
        r.len > 0
            && buffer_key(r.offset) == self.key
            && self
                .spans
                .iter()
                .any(|&(s, e)| s < r.end() && r.start() < e)
    }

    /// Remove the bytes of `r`; true when anything was removed.
    fn remove(&mut self, r: &ByteRange) -> bool {
        if !self.hits(r) {
            return false;
        }
        let (rs, re) = (r.start(), r.end());
        let mut out = Vec::with_capacity(self.spans.len() + 1);
        for &(s, e) in &self.spans {
            if e <= rs || re <= s {
                out.push((s, e));
                continue;
            }
            if s < rs {
                out.push((s, rs));
            }
            if re < e {
                out.push((re, e));
            }
        }
        self.spans = out;
        true
    }
}

/// Where the value in a range goes after the thunk that wrote it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Uses {
    /// Thunks (in order) that read at least one byte of the value.
    pub readers: Vec<usize>,
    /// Some byte of the value survives to the end of the schedule inside a
    /// live-out range (a graph output or persistent state).
    pub live_out: bool,
}

/// Where the bytes of a range seen at a point come from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reaching {
    /// Thunks (latest first) whose writes provide at least one byte.
    pub writers: Vec<usize>,
    /// Some bytes were written by no thunk before the point: they come from
    /// the outside (inputs, params, state, constants).
    pub from_entry: bool,
}

/// Def-use facts of one schedule. Build it with [`Dataflow::new`] after the
/// schedule changes; it holds the `io()` of every thunk.
#[derive(Clone, Debug)]
pub struct Dataflow {
    io: Vec<ThunkIo>,
    live_out: Vec<ByteRange>,
}

impl Dataflow {
    /// Facts for `thunks`, with `live_out` the ranges that must hold their
    /// final values after the schedule (graph outputs, state).
    pub fn new(thunks: &[Thunk], live_out: &[ByteRange]) -> Self {
        Self::from_io(thunks.iter().map(Thunk::io).collect(), live_out)
    }

    /// Facts from precomputed `io()` lists (one per thunk).
    pub fn from_io(io: Vec<ThunkIo>, live_out: &[ByteRange]) -> Self {
        Dataflow {
            io,
            live_out: live_out.to_vec(),
        }
    }

    /// Number of thunks.
    pub fn len(&self) -> usize {
        self.io.len()
    }

    /// True for an empty schedule.
    pub fn is_empty(&self) -> bool {
        self.io.is_empty()
    }

    /// The ranges thunk `i` reads and writes.
    pub fn io(&self, i: usize) -> &ThunkIo {
        &self.io[i]
    }

    /// True when any byte of `r` belongs to a live-out range.
    pub fn is_output(&self, r: &ByteRange) -> bool {
        self.live_out.iter().any(|o| o.overlaps(r))
    }

    /// The last thunk before `i` that writes any byte of `r`.
    pub fn last_writer_before(&self, i: usize, r: &ByteRange) -> Option<usize> {
        (0..i.min(self.io.len()))
            .rev()
            .find(|&j| self.io[j].writes.iter().any(|w| w.overlaps(r)))
    }

    /// Every thunk whose write provides some byte of `r` as seen just
    /// before thunk `i` (a later write shadows an earlier one byte by byte).
    pub fn reaching(&self, i: usize, r: &ByteRange) -> Reaching {
        let mut open = Intervals::of(r);
        let mut out = Reaching::default();
        for j in (0..i.min(self.io.len())).rev() {
            if open.is_empty() {
                break;
            }
            let mut hit = false;
            for w in &self.io[j].writes {
                hit |= open.remove(w);
            }
            if hit {
                out.writers.push(j);
            }
        }
        out.from_entry = !open.is_empty();
        out
    }

    /// True when exactly one thunk, `j`, provides every byte of `r` as seen
    /// just before `i`.
    pub fn sole_writer(&self, i: usize, r: &ByteRange) -> Option<usize> {
        let reach = self.reaching(i, r);
        match (reach.writers.as_slice(), reach.from_entry) {
            ([j], false) => Some(*j),
            _ => None,
        }
    }

    /// The uses of the value in `r` as it stands after thunk `i` (for a
    /// value present before the first thunk use [`Dataflow::uses_from`]).
    pub fn uses_after(&self, i: usize, r: &ByteRange) -> Uses {
        self.uses_from(i.saturating_add(1), r)
    }

    /// The uses of the value in `r` as it stands just before thunk `start`.
    pub fn uses_from(&self, start: usize, r: &ByteRange) -> Uses {
        let mut live = Intervals::of(r);
        let mut uses = Uses::default();
        for j in start..self.io.len() {
            if live.is_empty() {
                break;
            }
            let io = &self.io[j];
            if io.reads.iter().any(|rd| live.hits(rd)) {
                uses.readers.push(j);
            }
            for w in &io.writes {
                live.remove(w);
            }
        }
        uses.live_out = self.live_out.iter().any(|o| live.hits(o));
        uses
    }

    /// True when the value in `r` written by (or present after) thunk `i`
    /// is read by no thunk outside `allowed` before it is overwritten, and
    /// is not a live-out value: a pass may then keep it in registers (or
    /// drop it) as long as it serves the `allowed` readers itself.
    pub fn dead_after_except(&self, i: usize, r: &ByteRange, allowed: &[usize]) -> bool {
        let uses = self.uses_after(i, r);
        !uses.live_out && uses.readers.iter().all(|j| allowed.contains(j))
    }

    /// True when some thunk strictly between `a` and `b` writes a byte of
    /// `r` (a clobber that forbids moving a read of `r` from `b` to `a`).
    pub fn written_between(&self, a: usize, b: usize, r: &ByteRange) -> bool {
        let hi = b.min(self.io.len());
        (a.saturating_add(1)..hi).any(|j| self.io[j].writes.iter().any(|w| w.overlaps(r)))
    }

    /// True when some thunk strictly between `a` and `b` reads a byte of `r`.
    pub fn read_between(&self, a: usize, b: usize, r: &ByteRange) -> bool {
        let hi = b.min(self.io.len());
        (a.saturating_add(1)..hi).any(|j| self.io[j].reads.iter().any(|rd| rd.overlaps(r)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thunk::offsets::tag_weight;

    fn df(ios: Vec<ThunkIo>, out: &[ByteRange]) -> Dataflow {
        Dataflow::from_io(ios, out)
    }

    fn r(o: usize, l: usize) -> ByteRange {
        ByteRange::new(o, l)
    }

    #[test]
    fn intervals_remove_splits() {
        let mut s = Intervals::of(&r(0, 100));
        assert!(s.remove(&r(10, 10)));
        assert_eq!(s.spans, vec![(0, 10), (20, 100)]);
        assert!(!s.remove(&r(10, 10)));
        assert!(s.remove(&r(0, 30)));
        assert_eq!(s.spans, vec![(30, 100)]);
        // a weights range never touches an arena set
        assert!(!s.remove(&r(tag_weight(30), 70)));
        assert!(s.remove(&r(0, 1000)));
        assert!(s.is_empty());
    }

    #[test]
    fn chain_uses_and_deadness() {
        // 0: write A; 1: read A write B; 2: read B write C (output)
        let a = r(0, 16);
        let b = r(16, 16);
        let c = r(32, 16);
        let d = df(
            vec![
                ThunkIo::new().write(0, 16),
                ThunkIo::new().read(0, 16).write(16, 16),
                ThunkIo::new().read(16, 16).write(32, 16),
            ],
            &[c],
        );
        assert_eq!(d.uses_after(0, &a).readers, vec![1]);
        assert!(d.dead_after_except(0, &a, &[1]));
        assert!(!d.dead_after_except(0, &a, &[]));
        assert!(d.dead_after_except(1, &b, &[2]));
        let uc = d.uses_after(2, &c);
        assert!(uc.readers.is_empty() && uc.live_out);
        assert!(!d.dead_after_except(2, &c, &[]));
        assert_eq!(d.last_writer_before(2, &b), Some(1));
        assert_eq!(d.sole_writer(2, &b), Some(1));
        assert_eq!(d.last_writer_before(0, &a), None);
    }

    #[test]
    fn partial_overwrite_keeps_rest_live() {
        // 0 writes 32 bytes; 1 overwrites the first half; 2 reads the second
        // half → the value of 0 is still used by 2.
        let d = df(
            vec![
                ThunkIo::new().write(0, 32),
                ThunkIo::new().write(0, 16),
                ThunkIo::new().read(16, 8),
                ThunkIo::new().read(0, 8),
            ],
            &[],
        );
        let u = d.uses_after(0, &r(0, 32));
        assert_eq!(u.readers, vec![2]);
        // reaching writers of [0, 32) before 3: thunk 1 (first half), 0 (rest)
        let reach = d.reaching(3, &r(0, 32));
        assert_eq!(reach.writers, vec![1, 0]);
        assert!(!reach.from_entry);
        assert_eq!(d.sole_writer(3, &r(0, 32)), None);
        assert_eq!(d.sole_writer(3, &r(0, 16)), Some(1));
        assert_eq!(d.sole_writer(3, &r(16, 16)), Some(0));
        // bytes past the written span come from the entry
        assert!(d.reaching(3, &r(0, 64)).from_entry);
    }

    #[test]
    fn full_overwrite_kills() {
        let d = df(
            vec![
                ThunkIo::new().write(0, 16),
                ThunkIo::new().write(0, 16),
                ThunkIo::new().read(0, 16),
            ],
            &[r(0, 4)],
        );
        let u = d.uses_after(0, &r(0, 16));
        assert!(u.readers.is_empty());
        assert!(!u.live_out, "redefined before the end");
        assert!(d.dead_after_except(0, &r(0, 16), &[]));
        let u1 = d.uses_after(1, &r(0, 16));
        assert_eq!(u1.readers, vec![2]);
        assert!(u1.live_out);
    }

    #[test]
    fn in_place_update_reads_old_value() {
        // 1 updates A in place: it reads the value of 0, then redefines it.
        let d = df(
            vec![
                ThunkIo::new().write(0, 16),
                ThunkIo::new().update(0, 16),
                ThunkIo::new().read(0, 16),
            ],
            &[],
        );
        assert_eq!(d.uses_after(0, &r(0, 16)).readers, vec![1]);
        assert_eq!(d.uses_after(1, &r(0, 16)).readers, vec![2]);
    }

    #[test]
    fn clobber_queries() {
        let d = df(
            vec![
                ThunkIo::new().write(0, 8),
                ThunkIo::new().read(0, 4).write(4, 4),
                ThunkIo::new().read(0, 8),
            ],
            &[],
        );
        assert!(d.written_between(0, 2, &r(6, 1)));
        assert!(!d.written_between(0, 2, &r(0, 4)));
        assert!(d.read_between(0, 2, &r(3, 1)));
        assert!(!d.read_between(0, 1, &r(0, 8)));
    }

    #[test]
    fn weights_and_arena_are_apart() {
        let d = df(
            vec![
                ThunkIo::new().write(0, 8),
                ThunkIo::new().read(tag_weight(0), 8),
            ],
            &[],
        );
        assert!(d.uses_after(0, &r(0, 8)).readers.is_empty());
        assert!(d.reaching(1, &r(tag_weight(0), 8)).from_entry);
    }
}
