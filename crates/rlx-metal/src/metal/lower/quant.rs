//! Packed-GGUF matmuls (`DequantMatMulGguf`) → `quant.metal`.
//!
//! `m ≤ GEMV_MAX_M` (decode) takes `gemv_<type>`: one simdgroup per output
//! column, four per threadgroup. Larger `m` (prefill) takes `gemm_<type>`:
//! 32 × 32 output tiles, 128 threads each. Every GGUF type of the host
//! kernel is covered (`F32`, `F16`, `BF16`, the legacy 32-element blocks,
//! the k-quants and the seed's `Q1_0` / `Q2_0`).
//!
//! Stays on the host (`None`):
//! - a scheme that is not GGUF (the host rejects it too);
//! - `k` not a whole number of blocks (the host reports the error);
//! - `x` or `dst` at a byte offset that is not a multiple of its element
//!   size: the kernels read / write them as `half` / `float` arrays. The
//!   weight needs no alignment: the kernels read its bytes one at a time,
//!   since ggml blocks (18, 22, 110 … bytes) leave wider fields unaligned
//!   anyway;
//! - `x` overlapping `dst` (the host stages `x` first): other threadgroups
//!   would overwrite `x` while it is still being read;
//! - a packed row longer than `u32::MAX` bytes.

use super::{aliased, kernel, Lowered};
use crate::metal::args::{KernelArgs, QuantArgs};
use crate::metal::kernels::Family;
use crate::metal::plan::{BufferBinding, Dispatch};
use crate::thunk::quant::DequantMatMulGguf;
use crate::thunk::{raw_offset, Thunk};
use rlx_ir::{GgmlType, QuantScheme};

/// Largest `m` that takes the GEMV kernels.
pub(crate) const GEMV_MAX_M: u32 = 8;
/// Simdgroups (output columns) per GEMV threadgroup (`QG_SG`).
const GEMV_SIMDGROUPS: u32 = 4;
/// GEMM output tile (`QT_M` × `QT_N`) and threads per threadgroup.
const GEMM_TILE: u32 = 32;
const GEMM_THREADS: u32 = 128;

/// The `gemv_*` (`m ≤ 8`) or `gemm_*` kernel name for `ty`.
pub(crate) fn kernel_name(ty: GgmlType, m: u32) -> String {
    let path = if m <= GEMV_MAX_M { "gemv" } else { "gemm" };
    format!("{path}_{}", ty.name().to_lowercase())
}

pub(super) fn lower(i: usize, t: &Thunk) -> Option<Lowered> {
    let Thunk::DequantMatMulGguf(d) = t else {
        return None;
    };
    let QuantScheme::Gguf(ty) = d.scheme else {
        return None;
    };
    if !(d.k as usize).is_multiple_of(ty.block_size()) {
        return None;
    }
    if d.m == 0 || d.n == 0 {
        return Some(Lowered::Skip);
    }
    if aliased(t) {
        return None;
    }
    dispatch(i, d, ty).map(Lowered::Dispatch)
}

/// The dispatch, or `None` when an operand's alignment or size rules the
/// kernels out.
fn dispatch(i: usize, d: &DequantMatMulGguf, ty: GgmlType) -> Option<Dispatch> {
    let elem = |f16: bool| if f16 { 2 } else { 4 };
    let aligned = |off: usize, f16: bool| raw_offset(off).is_multiple_of(elem(f16));
    if !aligned(d.x, d.x_f16) || !aligned(d.dst, d.dst_f16) {
        return None;
    }
    let row_bytes = u32::try_from(ty.row_bytes(d.k as usize)?).ok()?;
    let args = QuantArgs {
        m: d.m,
        k: d.k,
        n: d.n,
        row_bytes,
        x_f16: d.x_f16 as u32,
        dst_f16: d.dst_f16 as u32,
    };
    let (grid, threads) = if d.m <= GEMV_MAX_M {
        ([d.n.div_ceil(GEMV_SIMDGROUPS), 1, 1], GEMV_SIMDGROUPS * 32)
    } else {
        let g = [d.n.div_ceil(GEMM_TILE), d.m.div_ceil(GEMM_TILE), 1];
        (g, GEMM_THREADS)
    };
    Some(Dispatch {
        thunk: i,
        kernel: kernel(Family::Quant, kernel_name(ty, d.m)),
        args: args.as_bytes().to_vec(),
        bindings: [d.x, d.w_q, d.dst].map(BufferBinding::of).to_vec(),
        grid,
        threadgroup: [threads, 1, 1],
        threadgroup_memory: Vec::new(),
    })
}
