//! Compilation: IR graph → thunk schedule (lowering), memory planning, and
//! the schedule verifier.

pub mod error;
pub mod lower;
pub mod plan;
pub mod verify;

pub use error::CompileError;
pub use lower::{compile, Binding, CompileOptions, Compiled};
