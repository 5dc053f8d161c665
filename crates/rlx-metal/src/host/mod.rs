//! The host device: a native CPU executor for thunk schedules.
//!
//! `kernels` is its library of pure slice kernels; the executor (thunk
//! decoding, offsets, numpy fallbacks) builds on top of it.

pub mod kernels;
