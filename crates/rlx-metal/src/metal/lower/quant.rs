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
//!
//! The transposed product `DequantMatMulGgufT` (`dst[m, k] = x[m, n] @
//! dequant(w)`, f32) takes `gemm_t_<type>` for every type, a thread per
//! 16-column chunk of `QTT_M` = 4 rows (threadgroups of 64 along the
//! chunks), under the same rules (`x` apart from `dst`, both 4-byte
//! aligned, `k` whole blocks); `n = 0` still dispatches (the kernel writes
//! zeros).
//!
//! The fused decode-MLP thunks (`FusedMlpGateUpSwiGLU`, `FusedMlpGateUpGelu`,
//! `FusedMlpDownResidual`) take `gate_up_<type>` / `down_residual_<type>`,
//! the GEMV skeleton with the gating or the residual add as epilogue, under
//! the same rules. An `x` overlapping `dst` stays on the host: the host
//! stages `x` first, a kernel cannot (other simdgroups would overwrite `x`
//! while it is read). `fuse_decode_mlp` moves the product off `x` (and off
//! the tail's sum) where the planner had put it there, so on real layers
//! (Qwen2.5, Granite) both thunks lower to kernels. The
//! residual may be `dst` itself (the usual in-place residual stream): each
//! output reads `res[j]` then writes `dst[j]` in the same lane.

use super::{aliased, kernel, Lowered};
use crate::metal::args::{KernelArgs, MlpArgs, QuantArgs};
use crate::metal::kernels::Family;
use crate::metal::plan::{BufferBinding, Dispatch};
use crate::thunk::quant::{DequantMatMulGguf, DequantMatMulGgufT};
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
    let d = match t {
        Thunk::DequantMatMulGguf(d) => d,
        Thunk::DequantMatMulGgufT(d) => return gemm_t(i, t, d),
        Thunk::FusedMlpGateUpSwiGLU(f) => {
            let m = Mlp::gate_up(f.scheme, f.k, f.n, (f.x_f16, f.dst_f16), 0);
            return m.lower(i, t, [f.x, f.gate_w, f.up_w, f.dst]);
        }
        Thunk::FusedMlpGateUpGelu(f) => {
            let m = Mlp::gate_up(f.scheme, f.k, f.n, (false, false), 1);
            return m.lower(i, t, [f.x, f.gate_w, f.up_w, f.dst]);
        }
        Thunk::FusedMlpDownResidual(f) => {
            let m = Mlp {
                scheme: f.scheme,
                k: f.k,
                n: f.n,
                f16: [f.x_f16, f.dst_f16, f.res_f16],
                op: 0,
                down: true,
            };
            return m.lower(i, t, [f.x, f.w, f.res, f.dst]);
        }
        _ => return None,
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

/// Rows of `x` per `gemm_t_*` thread (`QTT_M`) and threads per threadgroup.
const GEMM_T_ROWS: u32 = 4;
const GEMM_T_THREADS: u32 = 64;

/// `DequantMatMulGgufT` → `gemm_t_<type>` (see the module docs).
fn gemm_t(i: usize, t: &Thunk, d: &DequantMatMulGgufT) -> Option<Lowered> {
    let QuantScheme::Gguf(ty) = d.scheme else {
        return None;
    };
    if !(d.k as usize).is_multiple_of(ty.block_size()) {
        return None;
    }
    if d.m == 0 || d.k == 0 {
        return Some(Lowered::Skip);
    }
    let aligned = |off: usize| raw_offset(off).is_multiple_of(4);
    if aliased(t) || !aligned(d.x) || !aligned(d.dst) {
        return None;
    }
    let args = QuantArgs {
        m: d.m,
        k: d.k,
        n: d.n,
        row_bytes: u32::try_from(ty.row_bytes(d.k as usize)?).ok()?,
        x_f16: 0,
        dst_f16: 0,
    };
    let chunks = d.k.div_ceil(16);
    Some(Lowered::Dispatch(Dispatch {
        thunk: i,
        kernel: kernel(
            Family::Quant,
            format!("gemm_t_{}", ty.name().to_lowercase()),
        ),
        args: args.as_bytes().to_vec(),
        bindings: [d.x, d.w_q, d.dst].map(BufferBinding::of).to_vec(),
        grid: [
            chunks.div_ceil(GEMM_T_THREADS),
            d.m.div_ceil(GEMM_T_ROWS),
            1,
        ],
        threadgroup: [GEMM_T_THREADS, 1, 1],
        threadgroup_memory: Vec::new(),
    }))
}

/// A fused decode-MLP GEMV (see the module docs).
struct Mlp {
    scheme: QuantScheme,
    k: u32,
    n: u32,
    /// x, dst, res are f16.
    f16: [bool; 3],
    op: u32,
    down: bool,
}

impl Mlp {
    fn gate_up(scheme: QuantScheme, k: u32, n: u32, (x, dst): (bool, bool), op: u32) -> Self {
        let f16 = [x, dst, false];
        Mlp {
            scheme,
            k,
            n,
            f16,
            op,
            down: false,
        }
    }

    /// `offs`: x, the weight(s) / res, dst (bound in that order).
    fn lower(&self, i: usize, t: &Thunk, offs: [usize; 4]) -> Option<Lowered> {
        let QuantScheme::Gguf(ty) = self.scheme else {
            return None;
        };
        if !(self.k as usize).is_multiple_of(ty.block_size()) {
            return None;
        }
        if self.n == 0 {
            return Some(Lowered::Skip);
        }
        let [x_f16, dst_f16, res_f16] = self.f16;
        let io = t.io();
        let (x, dst) = (io.reads.first()?, io.writes.first()?);
        if x.overlaps(dst) {
            return None;
        }
        let elem = |f16: bool| if f16 { 2 } else { 4 };
        let aligned = |off: usize, f16: bool| raw_offset(off).is_multiple_of(elem(f16));
        let res_ok = !self.down || aligned(offs[2], res_f16);
        if !aligned(offs[0], x_f16) || !aligned(offs[3], dst_f16) || !res_ok {
            return None;
        }
        let row_bytes = u32::try_from(ty.row_bytes(self.k as usize)?).ok()?;
        let args = MlpArgs {
            k: self.k,
            n: self.n,
            row_bytes,
            x_f16: x_f16 as u32,
            dst_f16: dst_f16 as u32,
            res_f16: res_f16 as u32,
            op: self.op,
        };
        let path = if self.down {
            "down_residual"
        } else {
            "gate_up"
        };
        let name = format!("{path}_{}", ty.name().to_lowercase());
        Some(Lowered::Dispatch(Dispatch {
            thunk: i,
            kernel: kernel(Family::Quant, name),
            args: args.as_bytes().to_vec(),
            bindings: offs.map(BufferBinding::of).to_vec(),
            grid: [self.n.div_ceil(GEMV_SIMDGROUPS), 1, 1],
            threadgroup: [GEMV_SIMDGROUPS * 32, 1, 1],
            threadgroup_memory: Vec::new(),
        }))
    }
}
