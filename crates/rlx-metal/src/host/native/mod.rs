//! Native dispatch: maps each thunk the host runs natively onto the kernel
//! library ([`super::kernels`]), carving typed slices out of the arena with
//! [`Mem`]. A thunk without a native kernel returns `None` and the executor
//! routes it to the fallback (the numpy reference).
//!
//! Operands that overlap the thunk's own output (e.g. `x = x + bias` after
//! in-place rewrites) are copied into a staging buffer first, so a shared
//! and an exclusive slice never alias.

/// Run `$body` with `$T` bound to the element type of a [`HalfFlag`]
/// (`f32` / `f16`): one generic kernel call per flag.
macro_rules! by_dt {
    ($dt:expr, $T:ident => $body:expr) => {
        match $dt {
            HalfFlag::F32 => {
                type $T = f32;
                $body
            }
            HalfFlag::F16 => {
                type $T = half::f16;
                $body
            }
        }
    };
}

/// As `by_dt!`, with `$T` the raw word of the flag's width (`u32` / `u16`):
/// data movement copies bits exactly, NaN payloads included.
macro_rules! by_word {
    ($dt:expr, $T:ident => $body:expr) => {
        match $dt {
            HalfFlag::F32 => {
                type $T = u32;
                $body
            }
            HalfFlag::F16 => {
                type $T = u16;
                $body
            }
        }
    };
}

mod backward;
mod elementwise;
mod fused_mlp;
mod indexing;
mod layout;
mod linalg;
mod misc;
mod quant;
mod quant_formats;
mod scan;
mod sequence;
mod signal;
mod splat;

use super::buffer::{Mem, Plain};
use super::exec::{NativeError, Staging};
use crate::thunk::{HalfFlag, Thunk, ThunkSchedule};

/// Result of one native thunk.
pub(crate) type NResult = Result<(), NativeError>;

/// True when `t` has a native host kernel.
pub fn has_native(t: &Thunk) -> bool {
    elementwise::handles(t)
        || linalg::handles(t)
        || layout::handles(t)
        || quant::handles(t)
        || quant_formats::handles(t)
        || fused_mlp::handles(t)
        || indexing::handles(t)
        || sequence::handles(t)
        || scan::handles(t)
        || misc::handles(t)
        || signal::handles(t)
        || splat::handles(t)
        || backward::handles(t)
}

/// Run `t` natively, or `None` if it has no native kernel.
pub(crate) fn run(t: &Thunk, mem: &Mem, st: &mut Staging, _s: &ThunkSchedule) -> Option<NResult> {
    if elementwise::handles(t) {
        return Some(elementwise::run(t, mem, st));
    }
    if linalg::handles(t) {
        return Some(linalg::run(t, mem));
    }
    if layout::handles(t) {
        return Some(layout::run(t, mem));
    }
    if quant::handles(t) {
        return Some(quant::run(t, mem, st));
    }
    if quant_formats::handles(t) {
        return Some(quant_formats::run(t, mem));
    }
    if fused_mlp::handles(t) {
        return Some(fused_mlp::run(t, mem, st));
    }
    if indexing::handles(t) {
        return Some(indexing::run(t, mem, st));
    }
    if sequence::handles(t) {
        return Some(sequence::run(t, mem));
    }
    if scan::handles(t) {
        return Some(scan::run(t, mem));
    }
    if misc::handles(t) {
        return Some(misc::run(t, mem, st));
    }
    if signal::handles(t) {
        return Some(signal::run(t, mem, st));
    }
    if splat::handles(t) {
        return Some(splat::run(t, mem));
    }
    if backward::handles(t) {
        return Some(backward::run(t, mem));
    }
    None
}

/// True when byte ranges `[a, a+an)` and `[b, b+bn)` intersect.
pub(crate) fn overlap(a: usize, an: usize, b: usize, bn: usize) -> bool {
    an > 0 && bn > 0 && a < b.saturating_add(bn) && b < a.saturating_add(an)
}

/// `n` elements at `off`, copied into `stage` when they overlap the output
/// range `[dst, dst+dst_bytes)`.
pub(crate) fn read_staged<'a, T: Plain>(
    mem: &'a Mem,
    stage: &'a mut Vec<u64>,
    what: &'static str,
    off: usize,
    n: usize,
    dst: usize,
    dst_bytes: usize,
) -> Result<&'a [T], NativeError> {
    let bytes = n * std::mem::size_of::<T>();
    if !overlap(off, bytes, dst, dst_bytes) {
        return Ok(mem.get::<T>(what, off, n)?);
    }
    let src = mem.get::<T>(what, off, n)?;
    stage.clear();
    stage.resize(bytes.div_ceil(8), 0);
    // SAFETY: `stage` holds at least `bytes` bytes, 8-byte aligned (enough for
    // every `Plain` type); `src` is valid for `bytes` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(
            src.as_ptr().cast::<u8>(),
            stage.as_mut_ptr().cast::<u8>(),
            bytes,
        );
        Ok(std::slice::from_raw_parts(stage.as_ptr().cast::<T>(), n))
    }
}

/// Element size of a half flag.
pub(crate) fn esz(dt: HalfFlag) -> usize {
    dt.size()
}

/// `[u32]` dims/strides as `usize` in a fixed array (no allocation).
pub(crate) fn widen<const N: usize>(v: &[u32]) -> Option<([usize; N], usize)> {
    if v.len() > N {
        return None;
    }
    let mut out = [0usize; N];
    for (o, &x) in out.iter_mut().zip(v) {
        *o = x as usize;
    }
    Some((out, v.len()))
}
