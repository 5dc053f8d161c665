//! Mixture-of-experts matmuls (`GroupedMatMul`, `DequantGroupedMatMulGguf`)
//! → `moe.metal`.
//!
//! `m ≤ GEMV_MAX_M` (a decode step's `top_k` rows) takes `grouped_gemv_*`:
//! one thread (f32) or simdgroup (GGUF) per output, reading only the chosen
//! experts. Larger `m` (prefill) takes `grouped_gemm_*`: one threadgroup
//! column per (32 outputs, expert), each collecting the rows routed to its
//! expert and running one tiled GEMM over them. Every GGUF type of the host
//! kernel is covered (the float rows, the legacy blocks, the k-quants, the
//! seed's `Q1_0` / `Q2_0`); the GGUF kernels of the float row types are
//! `grouped_*_gguf_{f32,f16,bf16}`.
//!
//! Stays on the host (`None`):
//! - a scheme that is not GGUF;
//! - `k` not a whole number of blocks, or no experts at all (the host
//!   reports the error);
//! - an input overlapping `dst` (the host stages the inputs first): other
//!   threadgroups would overwrite them while they are still being read;
//! - `x`, `idx`, `dst` (and the f32 stack) at a byte offset that is not a
//!   multiple of 4 (the kernels read them as `float` / `int` arrays);
//! - a packed row longer than `u32::MAX` bytes.
//!
//! An expert id outside `0 .. num_experts` gives a zero row (the GGUF host
//! kernel does the same; the f32 host kernel fails the run, which a kernel
//! cannot).

use super::quant::GEMV_MAX_M;
use super::{aliased, kernel, Lowered};
use crate::metal::args::{KernelArgs, MoeArgs};
use crate::metal::kernels::Family;
use crate::metal::plan::{BufferBinding, Dispatch};
use crate::thunk::{raw_offset, Thunk};
use rlx_ir::{GgmlType, QuantScheme};

/// Outputs per f32 GEMV threadgroup (`MV_THREADS`).
const GEMV_F32_THREADS: u32 = 256;
/// Simdgroups (outputs) per GGUF GEMV threadgroup (`MG_SG`).
const GEMV_SIMDGROUPS: u32 = 4;
/// GEMM output columns per threadgroup (`MT_N`) and threads (`MT_THREADS`).
const GEMM_TILE: u32 = 32;
const GEMM_THREADS: u32 = 128;

/// The kernel-name stem of a GGUF type (`q4_k`, `gguf_f16` …).
pub(crate) fn type_stem(ty: GgmlType) -> String {
    let name = ty.name().to_lowercase();
    match ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => format!("gguf_{name}"),
        _ => name,
    }
}

/// The `grouped_gemv_*` (`m ≤ 8`) or `grouped_gemm_*` kernel name; `ty`
/// `None` for the f32 `[E, k, n]` stack.
pub(crate) fn kernel_name(ty: Option<GgmlType>, m: u32) -> String {
    let path = if m <= GEMV_MAX_M { "gemv" } else { "gemm" };
    let stem = ty.map_or_else(|| "f32".to_string(), type_stem);
    format!("grouped_{path}_{stem}")
}

/// One grouped matmul's operands (offsets) and sizes.
struct Grouped {
    x: usize,
    w: usize,
    idx: usize,
    dst: usize,
    m: u32,
    k: u32,
    n: u32,
    experts: u32,
}

pub(super) fn lower(i: usize, t: &Thunk) -> Option<Lowered> {
    let (g, ty) = match t {
        Thunk::GroupedMatMul(g) => {
            let grouped = Grouped {
                x: g.input,
                w: g.weight,
                idx: g.expert_idx,
                dst: g.dst,
                m: g.m,
                k: g.k_dim,
                n: g.n,
                experts: g.num_experts,
            };
            (grouped, None)
        }
        Thunk::DequantGroupedMatMulGguf(d) => {
            let QuantScheme::Gguf(ty) = d.scheme else {
                return None;
            };
            if !(d.k_dim as usize).is_multiple_of(ty.block_size()) {
                return None;
            }
            let grouped = Grouped {
                x: d.input,
                w: d.w_q,
                idx: d.expert_idx,
                dst: d.dst,
                m: d.m,
                k: d.k_dim,
                n: d.n,
                experts: d.num_experts,
            };
            (grouped, Some(ty))
        }
        _ => return None,
    };
    if g.m == 0 || g.n == 0 {
        return Some(Lowered::Skip);
    }
    if g.experts == 0 || aliased(t) {
        return None;
    }
    let word = |off: usize| raw_offset(off).is_multiple_of(4);
    let w_ok = ty.is_some() || word(g.w);
    if !word(g.x) || !word(g.idx) || !word(g.dst) || !w_ok {
        return None;
    }
    let row_bytes = match ty {
        Some(ty) => u32::try_from(ty.row_bytes(g.k as usize)?).ok()?,
        None => 0,
    };
    let args = MoeArgs {
        m: g.m,
        k: g.k,
        n: g.n,
        num_experts: g.experts,
        row_bytes,
    };
    let (grid, threads) = match (g.m <= GEMV_MAX_M, ty) {
        (true, None) => ([g.n.div_ceil(GEMV_F32_THREADS), g.m, 1], GEMV_F32_THREADS),
        (true, Some(_)) => (
            [g.n.div_ceil(GEMV_SIMDGROUPS), g.m, 1],
            GEMV_SIMDGROUPS * 32,
        ),
        (false, _) => ([g.n.div_ceil(GEMM_TILE), g.experts, 1], GEMM_THREADS),
    };
    Some(Lowered::Dispatch(Dispatch {
        thunk: i,
        kernel: kernel(Family::Moe, kernel_name(ty, g.m)),
        args: args.as_bytes().to_vec(),
        bindings: [g.x, g.w, g.idx, g.dst].map(BufferBinding::of).to_vec(),
        grid,
        threadgroup: [threads, 1, 1],
        threadgroup_memory: Vec::new(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thunk::matmul::GroupedMatMul;
    use crate::thunk::quant::DequantGroupedMatMulGguf;

    fn f32_thunk(m: u32, x: usize) -> Thunk {
        Thunk::GroupedMatMul(GroupedMatMul {
            input: x,
            weight: 1 << 20,
            expert_idx: 2 << 20,
            dst: 3 << 20,
            m,
            k_dim: 37,
            n: 70,
            num_experts: 5,
        })
    }

    fn gguf_thunk(m: u32, k: u32, scheme: QuantScheme, experts: u32) -> Thunk {
        Thunk::DequantGroupedMatMulGguf(DequantGroupedMatMulGguf {
            input: 0,
            w_q: (1 << 20) + 3, // packed rows need no alignment
            expert_idx: 2 << 20,
            dst: 3 << 20,
            m,
            k_dim: k,
            n: 33,
            num_experts: experts,
            scheme,
        })
    }

    fn dispatch(l: Option<Lowered>) -> Dispatch {
        match l {
            Some(Lowered::Dispatch(d)) => d,
            _ => panic!("not a dispatch"),
        }
    }

    #[test]
    fn decode_takes_the_gemv_and_prefill_the_per_expert_gemm() {
        let d = dispatch(lower(0, &f32_thunk(2, 0)));
        assert_eq!(d.kernel.function, "grouped_gemv_f32");
        assert_eq!((d.grid, d.threadgroup), ([1, 2, 1], [256, 1, 1]));
        let d = dispatch(lower(0, &f32_thunk(40, 0)));
        assert_eq!(d.kernel.function, "grouped_gemm_f32");
        assert_eq!((d.grid, d.threadgroup), ([3, 5, 1], [128, 1, 1]));
        let q4k = QuantScheme::Gguf(GgmlType::Q4K);
        let d = dispatch(lower(0, &gguf_thunk(1, 512, q4k, 4)));
        assert_eq!(d.kernel.function, "grouped_gemv_q4_k");
        assert_eq!(d.grid, [9, 1, 1]);
        let want = MoeArgs {
            m: 1,
            k: 512,
            n: 33,
            num_experts: 4,
            row_bytes: 288,
        };
        assert_eq!(d.args, want.as_bytes());
        let f16 = QuantScheme::Gguf(GgmlType::F16);
        let d = dispatch(lower(0, &gguf_thunk(9, 7, f16, 4)));
        assert_eq!(d.kernel.function, "grouped_gemm_gguf_f16");
    }

    #[test]
    fn what_the_kernels_cannot_do_stays_on_the_host() {
        assert!(lower(0, &f32_thunk(2, 2)).is_none(), "misaligned x");
        let q8 = QuantScheme::Gguf(GgmlType::Q8_0);
        assert!(
            lower(0, &gguf_thunk(2, 48, q8, 4)).is_none(),
            "partial block"
        );
        assert!(lower(0, &gguf_thunk(2, 64, q8, 0)).is_none(), "no experts");
        assert!(matches!(
            lower(0, &gguf_thunk(0, 64, q8, 4)),
            Some(Lowered::Skip)
        ));
    }
}
