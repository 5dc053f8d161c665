//! The driver the one-pattern passes share: plan a rewrite at each slot,
//! apply it (fused-away slots become [`Thunk::Nop`], the fused thunk takes
//! one slot), and rebuild the [`Dataflow`] so the next plan sees the
//! rewritten schedule.

use super::dataflow::Dataflow;
use super::PassContext;
use crate::thunk::Thunk;

/// A planned rewrite: `fused` replaces slot `at`, the `dead` slots become
/// `Nop`.
pub struct Rewrite {
    /// Slot of the fused thunk.
    pub at: usize,
    /// The fused thunk.
    pub fused: Thunk,
    /// Slots the rewrite removes.
    pub dead: Vec<usize>,
}

impl Rewrite {
    /// Writes the rewrite into `thunks`.
    pub fn apply(self, thunks: &mut [Thunk]) {
        for d in self.dead {
            thunks[d] = Thunk::Nop;
        }
        thunks[self.at] = self.fused;
    }
}

/// A planner: the rewrite anchored at slot `i`, if the pattern and its
/// preconditions hold there.
pub trait Plan: FnMut(&[Thunk], &Dataflow, usize) -> Option<Rewrite> {}
impl<F: FnMut(&[Thunk], &Dataflow, usize) -> Option<Rewrite>> Plan for F {}

/// Tries `plan` at every slot in order and applies each rewrite it returns;
/// returns the number of rewrites.
pub fn rewrite_each(thunks: &mut [Thunk], cx: &PassContext, plan: impl Plan) -> usize {
    rewrite_each_then(thunks, cx, plan, |_: &[Thunk], _: &Dataflow, _: usize| None)
}

/// [`rewrite_each`], and after each rewrite anchored at `i` tries `then`
/// once at `i` (a follow-up fusion of the fused thunk, e.g. the decode
/// MLP's down tail), applying it too. Counts the `plan` rewrites only.
pub fn rewrite_each_then(
    thunks: &mut [Thunk],
    cx: &PassContext,
    mut plan: impl Plan,
    mut then: impl Plan,
) -> usize {
    let mut matches = 0;
    let mut df = Dataflow::new(thunks, &cx.live_out);
    for i in 0..thunks.len() {
        let Some(rw) = plan(thunks, &df, i) else {
            continue;
        };
        rw.apply(thunks);
        matches += 1;
        df = Dataflow::new(thunks, &cx.live_out);
        if let Some(rw) = then(thunks, &df, i) {
            rw.apply(thunks);
            df = Dataflow::new(thunks, &cx.live_out);
        }
    }
    matches
}
