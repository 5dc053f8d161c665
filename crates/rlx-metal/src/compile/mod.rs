//! Compilation: IR graph → thunk schedule (lowering), memory planning, the
//! fusion passes, and the schedule verifier. [`compile`] runs them in that
//! order.

pub mod active;
pub mod error;
pub mod lower;
pub mod plan;
pub mod verify;

pub use error::CompileError;
pub use lower::{lower, Binding, CompileOptions, Compiled};

use crate::passes::{disabled_from_env, pass_names, run_passes, PassContext, PIPELINE};
use rlx_ir::Graph;

/// Lower and plan `graph`, then run the fusion passes (all of them but the
/// ones `RLX_DISABLE_PASS` names; an unknown name there is an error, so a
/// typo cannot silently leave a pass on). The pass report lands in
/// [`Compiled::passes`].
pub fn compile(graph: &Graph, opts: &CompileOptions) -> Result<Compiled, CompileError> {
    let disabled = disabled_from_env();
    let known = pass_names();
    if let Some(bad) = disabled.iter().find(|d| !known.contains(&d.as_str())) {
        return Err(CompileError::UnknownPass {
            name: bad.clone(),
            known: known.join(", "),
        });
    }
    let mut c = lower(graph, opts)?;
    let cx = PassContext {
        live_out: c.live_out(),
    };
    c.passes = run_passes(&mut c.schedule, &cx, PIPELINE, &disabled);
    Ok(c)
}
