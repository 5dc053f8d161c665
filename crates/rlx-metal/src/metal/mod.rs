//! Platform-free parts of the Metal backend: the kernel sources
//! (`kernels/*.metal`, one file per family, with the shared `args.h`), the
//! `#[repr(C)]` argument structs that mirror `args.h`, and [`plan`], a
//! schedule as Metal commands. Nothing here but `device` knows the `metal`
//! crate. The kernels and whole plans are tested on Linux through the
//! `msl-sim` crate (`tests/msl.rs`, `sim`).

pub mod args;
pub mod check;
#[cfg(feature = "metal")]
pub mod device;
pub(crate) mod fuse;
mod fuse_check;
pub mod kernels;
pub mod lower;
pub mod plan;
#[cfg(any(test, feature = "metal-sim"))]
pub mod sim;
