//! rlx-metal: lowers an rlx-ir graph to a thunk schedule over byte offsets,
//! plans memory, runs fusion passes and executes schedules (host CPU,
//! numpy reference, Metal, and the MSL-on-CPU simulator).
//!
//! So far: the thunk set ([`thunk`]), with exact byte-range I/O per thunk.

pub mod thunk;
