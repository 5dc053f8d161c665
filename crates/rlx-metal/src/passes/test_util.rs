//! Scaffolding the pass unit tests share.

use super::{run_passes, PassContext, PassEntry, PIPELINE};
use crate::thunk::io::ByteRange;
use crate::thunk::{Thunk, ThunkSchedule};

/// The thunk kinds of a schedule.
pub(crate) fn names(thunks: &[Thunk]) -> Vec<&'static str> {
    thunks.iter().map(Thunk::name).collect()
}

/// Runs only the pass `name` (through the pass manager, so `Nop`s are
/// compacted) with `live_out` as the outputs: the kinds after, its match
/// count and the thunks after.
pub(crate) fn run_only(
    name: &str,
    thunks: Vec<Thunk>,
    live_out: &[ByteRange],
) -> (Vec<&'static str>, usize, Vec<Thunk>) {
    let mut s = ThunkSchedule {
        thunks,
        rng: Default::default(),
    };
    let cx = PassContext {
        live_out: live_out.to_vec(),
    };
    let only: Vec<PassEntry> = PIPELINE
        .iter()
        .copied()
        .filter(|p| p.name == name)
        .collect();
    assert_eq!(only.len(), 1, "{name} is in the pipeline");
    let report = run_passes(&mut s, &cx, &only, &[]);
    (names(&s.thunks), report.passes[0].matches, s.thunks)
}
