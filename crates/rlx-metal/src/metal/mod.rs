//! Platform-free parts of the Metal backend: the kernel sources
//! (`kernels/*.metal`, one file per family, with the shared `args.h`) and
//! the `#[repr(C)]` argument structs that mirror `args.h`. Nothing here
//! knows the `metal` crate; the encoder and `MetalPlan` build on these.
//! The kernels are tested on Linux through the `msl-sim` crate
//! (`tests/msl.rs`).

pub mod args;
pub mod kernels;
