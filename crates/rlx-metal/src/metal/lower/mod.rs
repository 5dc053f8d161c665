//! Thunk → Metal command lowering, one file per kernel family: each
//! family's `lower` claims the thunks its kernels cover (a [`Dispatch`],
//! or `Skip` for an empty one) and returns `None` for the rest; a thunk no
//! family claims runs on the host. The shared dispatch shapes (1-D
//! elementwise grids, one threadgroup per row) live here.

mod attention;
mod backward;
mod binary;
mod conv;
mod elementwise;
mod indexing;
mod matmul;
mod misc;
mod moe;
mod norm;
mod norm_fused;
mod quant;
mod quant_formats;
mod reduce;
mod region;
mod sequence;
mod shape;
mod signal;
mod softmax;
mod splat;
mod vision;

use super::args::KernelArgs;
use super::kernels::Family;
use super::plan::{BufferBinding, Dispatch, KernelRef};
use crate::thunk::{HalfFlag, Thunk};

/// Threads per threadgroup of the 1-D elementwise kernels.
pub const ELEMENTWISE_THREADS: u32 = 256;

/// Threads per threadgroup of the row kernels: `n` rounded up to 32,
/// at most 1024.
pub fn row_threads(n: u32) -> u32 {
    n.div_ceil(32).clamp(1, 32) * 32
}

/// What a thunk becomes.
pub(crate) enum Lowered {
    /// A kernel dispatch.
    Dispatch(Dispatch),
    /// A validating kernel's dispatch and the status check after it.
    Checked(Dispatch, super::check::StatusCheck),
    /// A host command (no kernel covers the thunk).
    Host,
    /// Nothing (a `Nop` or an empty thunk).
    Skip,
    /// A user kernel (`CustomGpuOp`).
    User(super::plan::UserDispatch),
}

/// The `_f32` / `_f16` suffix of a kernel name.
pub(crate) fn suffix(dt: HalfFlag) -> &'static str {
    match dt {
        HalfFlag::F32 => "f32",
        HalfFlag::F16 => "f16",
    }
}

/// A kernel of `family` named `function`.
pub(crate) fn kernel(family: Family, function: String) -> KernelRef {
    KernelRef { family, function }
}

/// A 1-D elementwise dispatch over `len` elements.
pub(crate) fn elementwise(
    thunk: usize,
    k: KernelRef,
    args: &impl KernelArgs,
    offs: &[usize],
    len: u32,
) -> Dispatch {
    Dispatch {
        thunk,
        kernel: k,
        args: args.as_bytes().to_vec(),
        bindings: offs.iter().map(|&o| BufferBinding::of(o)).collect(),
        grid: [len.div_ceil(ELEMENTWISE_THREADS), 1, 1],
        threadgroup: [ELEMENTWISE_THREADS, 1, 1],
        threadgroup_memory: Vec::new(),
    }
}

/// A one-threadgroup-per-row dispatch over rows of `n` elements.
pub(crate) fn rows(
    thunk: usize,
    k: KernelRef,
    args: &impl KernelArgs,
    offs: &[usize],
    rows: u32,
    n: u32,
) -> Dispatch {
    Dispatch {
        thunk,
        kernel: k,
        args: args.as_bytes().to_vec(),
        bindings: offs.iter().map(|&o| BufferBinding::of(o)).collect(),
        grid: [rows, 1, 1],
        threadgroup: [row_threads(n), 1, 1],
        threadgroup_memory: Vec::new(),
    }
}

/// True when some read range overlaps some write range without being the
/// very same range (the kernels handle exact in-place aliasing only).
fn partially_aliased(t: &Thunk) -> bool {
    let io = t.io();
    io.reads.iter().any(|r| {
        io.writes
            .iter()
            .any(|w| r.overlaps(w) && (r.offset != w.offset || r.len != w.len))
    })
}

/// True when any read overlaps any write (for kernels that cannot run in
/// place at all).
pub(crate) fn aliased(t: &Thunk) -> bool {
    let io = t.io();
    io.reads
        .iter()
        .any(|r| io.writes.iter().any(|w| r.overlaps(w)))
}

/// The families' lowerings, tried in order.
const FAMILIES: &[fn(usize, &Thunk) -> Option<Lowered>] = &[
    elementwise::lower,
    binary::lower,
    norm::lower,
    softmax::lower,
    quant::lower,
    moe::lower,
    quant_formats::lower,
    matmul::lower,
    region::lower,
    attention::lower,
    shape::lower,
    indexing::lower,
    reduce::lower,
    norm_fused::lower,
    conv::lower,
    sequence::lower,
    vision::lower,
    misc::lower,
    signal::lower,
    splat::lower,
    backward::lower,
];

/// The command of thunk `i`: a dispatch, `Host` when no kernel covers it,
/// `Skip` for a `Nop` or an empty thunk.
pub(crate) fn lower(i: usize, t: &Thunk) -> Lowered {
    if matches!(t, Thunk::Nop) {
        return Lowered::Skip;
    }
    if partially_aliased(t) {
        return Lowered::Host;
    }
    FAMILIES
        .iter()
        .find_map(|f| f(i, t))
        .unwrap_or(Lowered::Host)
}
