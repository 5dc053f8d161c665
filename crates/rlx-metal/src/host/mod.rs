//! The host device: a native CPU executor for thunk schedules.
//!
//! `kernels` is its library of pure slice kernels; `native` maps thunks onto
//! them; `exec` runs a schedule, sending thunks without a native kernel to a
//! fallback (the numpy reference, through the Python bindings); `buffer`
//! holds the aligned arena / weights buffers and typed access to them;
//! `team` runs the fine-grained parallel loops of a decode step.

pub mod buffer;
pub mod exec;
pub mod kernels;
pub mod native;
pub mod team;
