//! Compilation: graph fusions (IR → IR), IR graph → thunk schedule
//! (lowering), memory planning, the thunk-level fusion passes, and the
//! schedule verifier. [`compile`] runs them in that order.

pub mod active;
pub mod error;
pub mod fuse;
pub mod lower;
pub mod plan;
pub mod verify;

pub use error::CompileError;
pub use lower::{lower, lower_with, Binding, CompileOptions, Compiled, Placement};

use crate::passes::{disabled_from_env, pass_names, run_passes, PassContext, PIPELINE};
use rlx_ir::Graph;

/// Every pass name `RLX_DISABLE_PASS` accepts: the graph fusions
/// ([`fuse::FUSIONS`]), the in-place planning of activations
/// ([`lower::in_place`]), then the thunk passes, each in running order.
pub fn all_pass_names() -> Vec<&'static str> {
    let mut names = fuse::fusion_names();
    names.push(lower::in_place::NAME);
    names.extend(pass_names());
    names.push(crate::metal::fuse::NAME);
    names
}

/// Run the graph fusions, lower and plan the result, then run the thunk
/// passes (all fusions and passes but the ones `RLX_DISABLE_PASS` names; an
/// unknown name there is an error, so a typo cannot silently leave a pass
/// on). The report of both lands in [`Compiled::passes`].
pub fn compile(graph: &Graph, opts: &CompileOptions) -> Result<Compiled, CompileError> {
    compile_without(graph, opts, &disabled_from_env())
}

/// [`compile`] with the fusions and passes named in `disabled` switched off
/// (instead of reading `RLX_DISABLE_PASS`).
pub fn compile_without(
    graph: &Graph,
    opts: &CompileOptions,
    disabled: &[String],
) -> Result<Compiled, CompileError> {
    let known = all_pass_names();
    if let Some(bad) = disabled.iter().find(|d| !known.contains(&d.as_str())) {
        return Err(CompileError::UnknownPass {
            name: bad.clone(),
            known: known.join(", "),
        });
    }
    let t0 = std::time::Instant::now();
    let mut stages = Vec::with_capacity(4);
    let mut stage = |name: &'static str, from: std::time::Instant| {
        let start = from.duration_since(t0).as_secs_f64();
        stages.push((name, start, from.elapsed().as_secs_f64()));
        std::time::Instant::now()
    };
    check_compilable(graph, opts)?;
    let t = stage("check", t0);
    let (fused, graph_passes, node_map) = fuse::run_fusions_mapped(graph, &opts.dims, disabled)?;
    let t = stage("fuse", t);
    let in_place = !disabled.iter().any(|d| d == lower::in_place::NAME);
    let (mut c, n_in_place) = lower_with(&fused, opts, in_place)?;
    c.node_map = node_map;
    let t = stage("lower + plan", t);
    let cx = PassContext {
        live_out: c.live_out(),
    };
    c.passes = run_passes(&mut c.schedule, &cx, PIPELINE, disabled);
    c.passes.graph_passes = graph_passes;
    // the in-place planning, reported after the graph fusions (its node
    // counts are the fused graph's, which it keeps)
    c.passes.graph_passes.push(crate::passes::PassStat {
        name: lower::in_place::NAME.to_string(),
        enabled: in_place,
        matches: n_in_place,
        thunks_before: fused.len(),
        thunks_after: fused.len(),
    });
    stage("passes", t);
    c.stages = stages;
    Ok(c)
}

/// What compiling needs beyond a verified graph: every node's shape, with
/// the symbols bound by `opts`, fits [`rlx_ir::shape::MAX_TENSOR_BYTES`]
/// (checked arithmetic; the error names the node and the dim), so lowering
/// and planning never see a size that overflows; and no two outputs share a
/// name (a run returns its outputs by name). Scan bodies may repeat an
/// output (carry and result), so the latter is checked here, not by the IR.
fn check_compilable(graph: &Graph, opts: &CompileOptions) -> Result<(), CompileError> {
    let bind = |s: &str| opts.dims.get(s).copied();
    for node in &graph.nodes {
        node.shape
            .check_bytes("compile", &format!("node '{}'", node.name), &bind)?;
    }
    for (k, &o) in graph.outputs.iter().enumerate() {
        let name = &graph.node_checked("compile", o)?.name;
        let earlier = &graph.outputs[..k];
        if earlier
            .iter()
            .any(|&j| graph.nodes.get(j).is_some_and(|n| n.name == *name))
        {
            return Err(rlx_ir::IrError::attr(
                "compile",
                format!("two outputs are named '{name}': a run returns its outputs by name"),
            )
            .into());
        }
    }
    Ok(())
}
