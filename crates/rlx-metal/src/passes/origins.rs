//! Which pass made each thunk of a schedule, and what each pass replaced.
//!
//! The pass manager ([`super::run_passes`]) snapshots the schedule before
//! each pass and compares slot by slot afterwards: the rewrite driver
//! ([`super::rewrite`]) replaces slots in place (the fused thunk takes one
//! slot, the fused-away slots become `Nop`), so a slot that changed holds a
//! thunk the pass made and held one it removed. A pass that changed the
//! schedule's length is compared as multisets of thunk names instead (its
//! thunks then count as made by it, but no slot is attributed). This is
//! what `rlx inspect --html` highlights as fused groups.

use crate::thunk::Thunk;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What one pass replaced: thunk names with their counts, sorted by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassChange {
    /// Thunks the pass put in the schedule.
    pub made: Vec<(String, usize)>,
    /// Thunks the pass took out of it (fused away or replaced).
    pub removed: Vec<(String, usize)>,
}

/// Per slot of the schedule being rewritten: the index (into the pass
/// list) of the pass that made the thunk there, if any.
#[derive(Clone, Debug, Default)]
pub(crate) struct Origins {
    made_by: Vec<Option<usize>>,
}

fn counted<'a>(names: impl Iterator<Item = &'a str>) -> BTreeMap<&'a str, usize> {
    let mut m = BTreeMap::new();
    for n in names {
        *m.entry(n).or_insert(0) += 1;
    }
    m
}

fn listed(m: BTreeMap<&str, usize>) -> Vec<(String, usize)> {
    m.into_iter()
        .filter(|&(_, c)| c > 0)
        .map(|(n, c)| (n.to_string(), c))
        .collect()
}

impl Origins {
    /// A schedule of `n` thunks straight out of lowering.
    pub(crate) fn new(n: usize) -> Self {
        Origins {
            made_by: vec![None; n],
        }
    }

    /// Pass `pass` turned `before` into `after` (`Nop`s not yet removed).
    pub(crate) fn record(&mut self, pass: usize, before: &[Thunk], after: &[Thunk]) -> PassChange {
        let live = |t: &&Thunk| !matches!(t, Thunk::Nop);
        if before.len() != after.len() || self.made_by.len() != after.len() {
            let (b, a) = (
                counted(before.iter().filter(live).map(Thunk::name)),
                counted(after.iter().filter(live).map(Thunk::name)),
            );
            let less = |x: &BTreeMap<&'static str, usize>, y: &BTreeMap<&'static str, usize>| {
                let m = x
                    .iter()
                    .map(|(&n, &c)| (n, c.saturating_sub(y.get(n).copied().unwrap_or(0))))
                    .collect();
                listed(m)
            };
            self.made_by = vec![None; after.len()];
            return PassChange {
                made: less(&a, &b),
                removed: less(&b, &a),
            };
        }
        let changed: Vec<usize> = (0..after.len())
            .filter(|&i| before[i] != after[i])
            .collect();
        for &i in &changed {
            self.made_by[i] = (!matches!(after[i], Thunk::Nop)).then_some(pass);
        }
        let names = |ts: &[Thunk]| {
            let picked = changed.iter().map(|&i| &ts[i]);
            listed(counted(picked.filter(live).map(Thunk::name)))
        };
        PassChange {
            made: names(after),
            removed: names(before),
        }
    }

    /// Drop the slots of `thunks` that are `Nop` (call before removing them
    /// from the schedule itself).
    pub(crate) fn retain(&mut self, thunks: &[Thunk]) {
        if self.made_by.len() != thunks.len() {
            self.made_by = vec![None; thunks.len()];
        }
        let mut keep = thunks.iter().map(|t| !matches!(t, Thunk::Nop));
        self.made_by.retain(|_| keep.next().unwrap_or(false));
    }

    /// The final per-thunk answer.
    pub(crate) fn into_vec(self) -> Vec<Option<usize>> {
        self.made_by
    }
}

#[cfg(test)]
mod tests {
    use crate::passes::{run_passes, PassContext, PIPELINE};
    use crate::thunk::binary::BinaryFull;
    use crate::thunk::io::ByteRange;
    use crate::thunk::norm::RmsNorm;
    use crate::thunk::{tag_weight, HalfFlag, Thunk, ThunkSchedule};
    use rlx_ir::op::BinaryOp;

    const H: u32 = 8;
    const B: usize = (H as usize) * 4;

    /// `x + r` into `2B`, then RMSNorm of it into `3B` (the output).
    fn residual_then_norm() -> (ThunkSchedule, PassContext) {
        let add = Thunk::BinaryFull(BinaryFull {
            lhs: 0,
            rhs: B,
            dst: 2 * B,
            len: H,
            op: BinaryOp::Add,
            dt: HalfFlag::F32,
        });
        let rms = Thunk::RmsNorm(RmsNorm {
            src: 2 * B,
            g: tag_weight(0),
            b: tag_weight(64),
            dst: 3 * B,
            rows: 1,
            h: H,
            eps: 1e-6,
            dt: HalfFlag::F32,
        });
        let s = ThunkSchedule {
            thunks: vec![add, rms],
            rng: Default::default(),
        };
        let cx = PassContext {
            live_out: vec![ByteRange::new(3 * B, B)],
        };
        (s, cx)
    }

    /// The residual pass fuses both into one thunk, which the report
    /// attributes to it, with the two it removed.
    #[test]
    fn residual_rms_norm_is_attributed() {
        let (mut s, cx) = residual_then_norm();
        let r = run_passes(&mut s, &cx, PIPELINE, &[]);
        let k = r
            .passes
            .iter()
            .position(|p| p.name == "fuse_residual_rms_norm")
            .expect("the pass runs");
        assert_eq!(s.thunks.len(), 1);
        assert_eq!(r.made_by, vec![Some(k)]);
        assert_eq!(r.changes.len(), r.passes.len());
        let ch = &r.changes[k];
        assert_eq!(ch.made, vec![(s.thunks[0].name().to_string(), 1)]);
        let removed: Vec<&str> = ch.removed.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(removed.len(), 2, "{removed:?}");
        assert!(removed.contains(&"rms_norm"), "{removed:?}");
    }

    /// With every pass off nothing is attributed.
    #[test]
    fn nothing_made_when_disabled() {
        let (mut s, cx) = residual_then_norm();
        let off: Vec<String> = PIPELINE.iter().map(|p| p.name.to_string()).collect();
        let r = run_passes(&mut s, &cx, PIPELINE, &off);
        assert_eq!(r.made_by, vec![None, None]);
        assert!(r
            .changes
            .iter()
            .all(|c| c.made.is_empty() && c.removed.is_empty()));
    }
}
