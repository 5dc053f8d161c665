//! Thunk-level fusion passes and the pass manager.
//!
//! A pass rewrites a lowered schedule into one with fewer dispatches and the
//! same results. Every pass is one file with a [`Pass::NAME`], a doc comment
//! giving its pattern, preconditions and dispatches before → after, and it
//! asks its liveness questions of the shared [`dataflow::Dataflow`] only.
//! The one-pattern passes plan a [`rewrite::Rewrite`] per slot and let
//! [`rewrite::rewrite_each`] apply them.
//!
//! Passes never delete slots while they run: a fused-away thunk becomes
//! [`Thunk::Nop`], so indices a pass holds stay valid; the manager compacts
//! the `Nop`s after each pass. [`run_passes`] applies them in the fixed
//! order of [`PIPELINE`], skipping the names listed in `RLX_DISABLE_PASS`,
//! and returns a [`PassReport`] (matches and thunk counts per pass,
//! dispatches before and after) for the compile report.

pub mod batch_elementwise_regions;
pub mod dataflow;
pub mod decode_mlp;
pub mod decode_mlp_combined;
pub mod dense_binary_broadcast;
pub mod depthwise_conv1d_bsc;
pub mod gdn_gated_norm;
pub mod narrow_clusters;
pub mod narrow_rope;
pub mod origins;
pub mod residual_rms_norm;
pub mod rewrite;
pub mod simple_elementwise_regions;
#[cfg(test)]
pub(crate) mod test_util;

use crate::thunk::{ByteRange, Thunk, ThunkSchedule};
use serde::{Deserialize, Serialize};

/// What every pass sees besides the schedule.
#[derive(Clone, Debug, Default)]
pub struct PassContext {
    /// Ranges that must hold their final values after the schedule: graph
    /// outputs and persistent state.
    pub live_out: Vec<ByteRange>,
}

/// One rewrite over a schedule.
pub trait Pass {
    /// Name used by `RLX_DISABLE_PASS` and the report.
    const NAME: &'static str;
    /// Rewrite `thunks` in place (fused-away slots become `Nop`); returns
    /// the number of matches rewritten.
    fn run(thunks: &mut [Thunk], cx: &PassContext) -> usize;
    /// Rewrite a whole schedule; the manager calls this. A pass that must
    /// insert thunks (one slot becoming several) overrides it; the default
    /// runs [`Pass::run`].
    fn run_schedule(thunks: &mut Vec<Thunk>, cx: &PassContext) -> usize {
        Self::run(thunks, cx)
    }
}

/// A pass as the manager stores it.
#[derive(Clone, Copy)]
pub struct PassEntry {
    /// The pass's name.
    pub name: &'static str,
    /// The pass's entry point ([`Pass::run_schedule`]).
    pub run: fn(&mut Vec<Thunk>, &PassContext) -> usize,
}

const fn entry<P: Pass>() -> PassEntry {
    PassEntry {
        name: P::NAME,
        run: P::run_schedule,
    }
}

/// The passes, in the seed's order: the two one-thunk rewrites first (their
/// `BinaryFull`s feed the fusions after them) with the batching of the
/// regions the first one leaves between them, then the decode-MLP fusions
/// (before the residual norm, whose add they may absorb), then the norm,
/// conv and narrow fusions. Narrow→RoPE runs before the narrow clusters so
/// that Q and K read a fused QKV in place and only the remaining narrows
/// are split.
pub const PIPELINE: &[PassEntry] = &[
    entry::<simple_elementwise_regions::RewriteSimpleElementwiseRegions>(),
    entry::<batch_elementwise_regions::BatchElementwiseRegions>(),
    entry::<dense_binary_broadcast::RewriteDenseBinaryBroadcast>(),
    entry::<decode_mlp_combined::FuseDecodeMlpCombinedGateUp>(),
    entry::<decode_mlp::FuseDecodeMlp>(),
    entry::<residual_rms_norm::FuseResidualRmsNorm>(),
    entry::<gdn_gated_norm::FuseGdnGatedNorm>(),
    entry::<depthwise_conv1d_bsc::FuseDepthwiseConv1dBsc>(),
    entry::<narrow_rope::FuseNarrowRope>(),
    entry::<narrow_clusters::FuseNarrowClusters>(),
];

/// The names of every pass, in pipeline order.
pub fn pass_names() -> Vec<&'static str> {
    PIPELINE.iter().map(|p| p.name).collect()
}

/// What one pass did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassStat {
    /// The pass.
    pub name: String,
    /// False when switched off by `RLX_DISABLE_PASS`.
    pub enabled: bool,
    /// Matches rewritten.
    pub matches: usize,
    /// Thunks (excluding `Nop`) before the pass.
    pub thunks_before: usize,
    /// Thunks (excluding `Nop`) after the pass.
    pub thunks_after: usize,
}

/// What the pass manager did to one schedule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassReport {
    /// The graph-level fusions run before lowering (`compile::fuse`), in
    /// order; their `thunks_before` / `thunks_after` count graph nodes.
    #[serde(default)]
    pub graph_passes: Vec<PassStat>,
    /// One entry per pass, in pipeline order.
    pub passes: Vec<PassStat>,
    /// Dispatches (non-`Nop` thunks) of the lowered schedule.
    pub dispatches_before: usize,
    /// Dispatches after all passes.
    pub dispatches_after: usize,
    /// Per thunk of the final schedule: the index in `passes` of the pass
    /// that made it, `None` when it comes straight from lowering
    /// ([`origins`]).
    #[serde(default)]
    pub made_by: Vec<Option<usize>>,
    /// Per entry of `passes`: the thunks it made and removed.
    #[serde(default)]
    pub changes: Vec<origins::PassChange>,
}

/// Dispatches of a thunk list: every thunk but `Nop`.
pub fn dispatches(thunks: &[Thunk]) -> usize {
    thunks.iter().filter(|t| !matches!(t, Thunk::Nop)).count()
}

/// The pass names switched off by `RLX_DISABLE_PASS`.
pub fn disabled_from_env() -> Vec<String> {
    rlx_ir::env::list("RLX_DISABLE_PASS")
}

/// Run `pipeline` over `schedule` in order, skipping the passes named in
/// `disabled`. `Nop`s are removed after each pass.
pub fn run_passes(
    schedule: &mut ThunkSchedule,
    cx: &PassContext,
    pipeline: &[PassEntry],
    disabled: &[String],
) -> PassReport {
    schedule.thunks.retain(|t| !matches!(t, Thunk::Nop));
    let mut report = PassReport {
        dispatches_before: schedule.thunks.len(),
        ..PassReport::default()
    };
    let mut origins = origins::Origins::new(schedule.thunks.len());
    for (k, p) in pipeline.iter().enumerate() {
        let before = schedule.thunks.len();
        let enabled = !disabled.iter().any(|d| d == p.name);
        let (matches, change) = if enabled {
            let snapshot = schedule.thunks.clone();
            let m = (p.run)(&mut schedule.thunks, cx);
            (m, origins.record(k, &snapshot, &schedule.thunks))
        } else {
            (0, origins::PassChange::default())
        };
        report.changes.push(change);
        origins.retain(&schedule.thunks);
        schedule.thunks.retain(|t| !matches!(t, Thunk::Nop));
        report.passes.push(PassStat {
            name: p.name.to_string(),
            enabled,
            matches,
            thunks_before: before,
            thunks_after: schedule.thunks.len(),
        });
    }
    report.dispatches_after = schedule.thunks.len();
    report.made_by = origins.into_vec();
    report
}

impl std::fmt::Display for PassReport {
    /// A table: one line per pass, then the dispatch totals.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{:<40} {:>7} {:>8} {:>8}",
            "pass", "matches", "before", "after"
        )?;
        let graph = self.graph_passes.iter().map(|p| (p, " [nodes]"));
        for (p, unit) in graph.chain(self.passes.iter().map(|p| (p, ""))) {
            let name = if p.enabled {
                format!("{}{unit}", p.name)
            } else {
                format!("{}{unit} (disabled)", p.name)
            };
            writeln!(
                f,
                "{name:<40} {:>7} {:>8} {:>8}",
                p.matches, p.thunks_before, p.thunks_after
            )?;
        }
        write!(
            f,
            "dispatches: {} → {}",
            self.dispatches_before, self.dispatches_after
        )
    }
}
