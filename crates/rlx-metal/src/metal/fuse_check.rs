//! The soundness check of the Metal plan's decode fusion (`super::fuse`):
//! a fused group runs all its member thunks at once, at its first member's
//! place, and writes only its outputs (the intermediates between members
//! stay unwritten). That is the schedule's meaning exactly when every read
//! — of a thunk left alone, or a group's read from outside the group —
//! sees the same writes as in the schedule, and memory ends the same.
//!
//! [`Flow`] checks that by value numbering: memory is an interval map from
//! byte ranges to the `(thunk, write slot)` that last wrote them, run once
//! over the schedule and once over the fused order; a read is the list of
//! `(range, writer)` pieces it covers. It knows no op semantics, so it can
//! only reject: a group whose intermediate is read elsewhere, whose inputs
//! are overwritten between its anchor and a later member, or whose outputs
//! land early on bytes that others still read, all fail it.

use crate::thunk::{ByteRange, Thunk};
use std::collections::BTreeMap;

/// Who wrote a byte: `thunk << 8 | slot`, 0 for "before the schedule".
type Val = u64;

fn val(thunk: usize, slot: usize) -> Val {
    ((thunk as u64 + 1) << 8) | slot as u64
}

fn writer(v: Val) -> Option<usize> {
    (v >> 8).checked_sub(1).map(|t| t as usize)
}

/// Disjoint `[start, end) → writer` pieces, keyed by tagged start offset.
#[derive(Default, Clone, PartialEq)]
struct Mem(BTreeMap<usize, (usize, Val)>);

impl Mem {
    /// The pieces of `r` (gaps are the initial value 0).
    fn get(&self, r: &ByteRange) -> Vec<(usize, usize, Val)> {
        let (s, e) = (r.offset, r.offset.saturating_add(r.len));
        let mut out = Vec::new();
        let mut at = s;
        let first = self.0.range(..=s).next_back().map(|(&k, _)| k).unwrap_or(s);
        for (&ks, &(ke, v)) in self.0.range(first..e) {
            if ke <= at {
                continue;
            }
            if ks > at {
                out.push((at, ks.min(e), 0));
            }
            let (ps, pe) = (ks.max(at), ke.min(e));
            if ps < pe {
                out.push((ps, pe, v));
                at = pe;
            }
        }
        if at < e {
            out.push((at, e, 0));
        }
        out
    }

    fn set(&mut self, r: &ByteRange, v: Val) {
        let (s, e) = (r.offset, r.offset.saturating_add(r.len));
        if s >= e {
            return;
        }
        // split the pieces straddling s and e, then drop those inside
        if let Some((&ks, &(ke, kv))) = self.0.range(..s).next_back() {
            if ke > s {
                self.0.insert(ks, (s, kv));
                if ke > e {
                    self.0.insert(e, (ke, kv));
                }
            }
        }
        if let Some((_, &(ke, kv))) = self.0.range(s..e).next_back() {
            if ke > e {
                self.0.insert(e, (ke, kv));
            }
        }
        let inside: Vec<usize> = self.0.range(s..e).map(|(&k, _)| k).collect();
        for k in inside {
            self.0.remove(&k);
        }
        self.0.insert(s, (e, v));
    }

    /// The pieces, adjacent equal writers merged.
    fn canonical(&self) -> Vec<(usize, usize, Val)> {
        let mut out: Vec<(usize, usize, Val)> = Vec::new();
        for (&s, &(e, v)) in &self.0 {
            match out.last_mut() {
                Some(l) if l.1 == s && l.2 == v => l.1 = e,
                _ => out.push((s, e, v)),
            }
        }
        out
    }
}

/// A fused group as the check sees it.
pub(crate) struct GroupFlow<'a> {
    /// Member thunks, ascending; the first is the anchor.
    pub members: &'a [usize],
    /// `(member, write slot)` pairs the group writes.
    pub outputs: &'a [(usize, usize)],
}

/// The schedule's own reads and final memory, for comparison.
pub(crate) struct Flow {
    reads: Vec<Vec<Vec<(usize, usize, Val)>>>,
    end: Vec<(usize, usize, Val)>,
}

impl Flow {
    /// Run the schedule once.
    pub fn new(thunks: &[Thunk]) -> Flow {
        let mut mem = Mem::default();
        let mut reads = Vec::with_capacity(thunks.len());
        for (i, t) in thunks.iter().enumerate() {
            let io = t.io();
            reads.push(io.reads.iter().map(|r| mem.get(r)).collect());
            for (w, r) in io.writes.iter().enumerate() {
                mem.set(r, val(i, w));
            }
        }
        Flow {
            reads,
            end: mem.canonical(),
        }
    }

    /// The thunks reading what `thunk` wrote in write slot `slot`.
    pub fn readers(&self, thunk: usize, slot: usize) -> Vec<usize> {
        let v = val(thunk, slot);
        let hit = |r: &Vec<Vec<(usize, usize, Val)>>| r.iter().flatten().any(|p| p.2 == v);
        (thunk + 1..self.reads.len())
            .filter(|&j| hit(&self.reads[j]))
            .collect()
    }

    /// The thunks whose writes read slot `slot` of `thunk` sees (`None`
    /// for bytes from before the schedule).
    pub fn producers(&self, thunk: usize, slot: usize) -> Vec<Option<usize>> {
        let mut out: Vec<Option<usize>> = Vec::new();
        for p in self
            .reads
            .get(thunk)
            .and_then(|r| r.get(slot))
            .into_iter()
            .flatten()
        {
            let w = writer(p.2);
            if !out.contains(&w) {
                out.push(w);
            }
        }
        out
    }

    /// The reads of `members` that come from outside the group.
    pub fn external_reads(&self, thunks: &[Thunk], members: &[usize]) -> Vec<ByteRange> {
        let inside = |v: &Val| writer(*v).is_some_and(|w| members.contains(&w));
        let mut out = Vec::new();
        for &m in members {
            let io = thunks[m].io();
            for (r, pieces) in io.reads.iter().zip(&self.reads[m]) {
                if pieces.is_empty() || !pieces.iter().all(|p| inside(&p.2)) {
                    out.push(*r);
                }
            }
        }
        out
    }

    /// True when running `groups` fused (each at its anchor, in the given
    /// order among equal anchors) and every other thunk as it is leaves
    /// every outside read and the final memory as the schedule has them.
    pub fn fused_ok(&self, thunks: &[Thunk], groups: &[GroupFlow<'_>]) -> bool {
        // members may be shared (one pre-norm folded into q, k and v)
        let mut fused = vec![false; thunks.len()];
        for g in groups {
            for &m in g.members {
                match fused.get_mut(m) {
                    Some(f) => *f = true,
                    None => return false,
                }
            }
        }
        let mut mem = Mem::default();
        for (i, t) in thunks.iter().enumerate() {
            for g in groups.iter().filter(|g| g.members.first() == Some(&i)) {
                if !self.group_step(thunks, g, &mut mem) {
                    return false;
                }
            }
            if fused[i] {
                continue;
            }
            let io = t.io();
            for (r, want) in io.reads.iter().zip(&self.reads[i]) {
                if mem.get(r) != *want {
                    return false;
                }
            }
            for (w, r) in io.writes.iter().enumerate() {
                mem.set(r, val(i, w));
            }
        }
        mem.canonical() == self.end
    }

    fn group_step(&self, thunks: &[Thunk], g: &GroupFlow<'_>, mem: &mut Mem) -> bool {
        let inside = |v: &Val| writer(*v).is_some_and(|w| g.members.contains(&w));
        for &m in g.members {
            let io = thunks[m].io();
            for (r, want) in io.reads.iter().zip(&self.reads[m]) {
                let internal = want.iter().filter(|p| inside(&p.2)).count();
                if internal == want.len() && !want.is_empty() {
                    continue;
                }
                if internal != 0 || mem.get(r) != *want {
                    return false;
                }
            }
        }
        for &(m, slot) in g.outputs {
            let io = thunks[m].io();
            let Some(r) = io.writes.get(slot) else {
                return false;
            };
            mem.set(r, val(m, slot));
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thunk::binary::BinaryFull;
    use crate::thunk::HalfFlag;
    use rlx_ir::op::BinaryOp;

    fn add(lhs: usize, rhs: usize, dst: usize) -> Thunk {
        Thunk::BinaryFull(BinaryFull {
            lhs,
            rhs,
            dst,
            len: 4,
            op: BinaryOp::Add,
            dt: HalfFlag::F32,
        })
    }

    fn ok(thunks: &[Thunk], members: &[usize], outputs: &[(usize, usize)]) -> bool {
        let g = GroupFlow { members, outputs };
        Flow::new(thunks).fused_ok(thunks, &[g])
    }

    #[test]
    fn a_group_is_kept_only_when_its_intermediate_is_dead() {
        // 0: c = a + b; 1: d = c + a; 2: c = d + d (c overwritten: dead)
        let dead = [add(0, 16, 32), add(32, 0, 48), add(48, 48, 32)];
        assert!(ok(&dead, &[0, 1], &[(1, 0)]));
        // 2 reads c instead: the fused pair never writes it
        let live = [add(0, 16, 32), add(32, 0, 48), add(32, 48, 64)];
        assert!(!ok(&live, &[0, 1], &[(1, 0)]));
        // c is never overwritten: memory would end differently
        let kept = [add(0, 16, 32), add(32, 0, 48)];
        assert!(!ok(&kept, &[0, 1], &[(1, 0)]));
    }

    #[test]
    fn a_group_may_not_move_reads_past_a_write() {
        // 1 overwrites a between the group's members 0 and 2
        let t = [
            add(0, 16, 32),
            add(16, 16, 0),
            add(32, 0, 48),
            add(48, 48, 32),
        ];
        assert!(!ok(&t, &[0, 2], &[(2, 0)]));
        // ... or output early onto bytes another thunk still reads
        let t = [
            add(0, 16, 32),
            add(48, 16, 64),
            add(32, 0, 48),
            add(48, 48, 32),
        ];
        assert!(!ok(&t, &[0, 2], &[(2, 0)]));
    }

    #[test]
    fn mem_pieces_split_and_merge() {
        let mut m = Mem::default();
        m.set(&ByteRange::new(0, 100), 5);
        m.set(&ByteRange::new(40, 20), 6);
        assert_eq!(
            m.get(&ByteRange::new(30, 40)),
            vec![(30, 40, 5), (40, 60, 6), (60, 70, 5)]
        );
        assert_eq!(
            m.get(&ByteRange::new(90, 20)),
            vec![(90, 100, 5), (100, 110, 0)]
        );
        m.set(&ByteRange::new(40, 20), 5);
        assert_eq!(m.canonical(), vec![(0, 100, 5)]);
    }
}
