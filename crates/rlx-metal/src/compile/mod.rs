//! Compilation: IR graph → thunk schedule (lowering), memory planning, and
//! the schedule verifier.

pub mod plan;
