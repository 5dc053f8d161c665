//! rlx-metal: lowers an rlx-ir graph to a thunk schedule over byte offsets,
//! plans memory, runs fusion passes and executes schedules (host CPU,
//! numpy reference, Metal, and the MSL-on-CPU simulator).

pub mod compile;
pub mod host;
pub mod metal;
pub mod passes;
pub mod thunk;
