//! Dense matmuls and the bias add → `matmul.metal`.

use super::{aliased, elementwise, kernel, suffix, Lowered};
use crate::metal::args::{act_code, BiasAddArgs, KernelArgs, MatmulArgs};
use crate::metal::kernels::Family;
use crate::metal::plan::{BufferBinding, Dispatch};
use crate::thunk::{HalfFlag, Thunk};
use rlx_ir::op::Activation;

/// Output tile edge of `gemm_*` (rows and columns) and columns per
/// threadgroup of `gemv_*`.
pub const MATMUL_TILE: u32 = 64;
/// Threads per threadgroup of `gemm_*` / `gemv_*`.
pub const MATMUL_THREADS: u32 = 256;

/// Output tile edge of `gemm_sg_*` (simdgroup matrices).
pub const SG_TILE: u32 = 32;
/// Threads per threadgroup of `gemm_sg_*` (4 simdgroups).
pub const SG_THREADS: u32 = 128;
/// Least `m` that runs `gemm_sg_*` (below it most of an 8-row simdgroup
/// matrix would be padding).
pub const SG_MIN_ROWS: u32 = 8;

/// One matmul dispatch's geometry and operands.
struct Gemm {
    a: usize,
    b: usize,
    bias: Option<usize>,
    c: usize,
    m: u32,
    k: u32,
    n: u32,
    batch: u32,
    a_bcast: bool,
    b_bcast: bool,
    dt: HalfFlag,
    b_f16: bool,
    act: Option<Activation>,
}

/// `gemv_*` when `m == 1`, `gemm_*` for `m < 8`, else `gemm_sg_*`;
/// `None` when a batch stride does not fit the kernel's `u32`.
fn gemm(i: usize, g: Gemm) -> Option<Lowered> {
    let stride = |bcast: bool, r: u32, c: u32| -> Option<u32> {
        if bcast || g.batch <= 1 {
            Some(0)
        } else {
            r.checked_mul(c)
        }
    };
    let args = MatmulArgs {
        m: g.m,
        k: g.k,
        n: g.n,
        batch: g.batch,
        a_batch_stride: stride(g.a_bcast, g.m, g.k)?,
        b_batch_stride: stride(g.b_bcast, g.k, g.n)?,
        has_bias: g.bias.is_some() as u32,
        has_act: g.act.is_some() as u32,
        act: g.act.map_or(0, act_code),
    };
    let ty = match (g.dt, g.b_f16) {
        (HalfFlag::F16, _) => "f16",
        (HalfFlag::F32, true) => "f32_w16",
        (HalfFlag::F32, false) => suffix(HalfFlag::F32),
    };
    // m = 1: gemv; small m: the 64x64 register tiles; else simdgroup
    // matrices on 32x32 tiles
    let (name, rows, cols, threads) = if g.m == 1 {
        ("gemv", 1, g.n.div_ceil(MATMUL_TILE), MATMUL_THREADS)
    } else if g.m < SG_MIN_ROWS {
        (
            "gemm",
            g.m.div_ceil(MATMUL_TILE),
            g.n.div_ceil(MATMUL_TILE),
            MATMUL_THREADS,
        )
    } else {
        (
            "gemm_sg",
            g.m.div_ceil(SG_TILE),
            g.n.div_ceil(SG_TILE),
            SG_THREADS,
        )
    };
    // without a bias the kernel never reads buffer(3); bind `a` there
    let bias = g.bias.unwrap_or(g.a);
    Some(Lowered::Dispatch(Dispatch {
        thunk: i,
        kernel: kernel(Family::Matmul, format!("{name}_{ty}")),
        args: args.as_bytes().to_vec(),
        bindings: [g.a, g.b, bias, g.c]
            .iter()
            .map(|&o| BufferBinding::of(o))
            .collect(),
        grid: [cols, rows, g.batch],
        threadgroup: [threads, 1, 1],
        threadgroup_memory: Vec::new(),
    }))
}

/// `Sgemm`, `BatchedSgemm`, `FusedMmBiasAct` (not in place) and `BiasAdd`.
pub(super) fn lower(i: usize, t: &Thunk) -> Option<Lowered> {
    let empty = t.io().writes.is_empty();
    let is_mm = matches!(
        t,
        Thunk::Sgemm(_) | Thunk::BatchedSgemm(_) | Thunk::FusedMmBiasAct(_)
    );
    if is_mm && empty {
        return Some(Lowered::Skip);
    }
    if is_mm && aliased(t) {
        return None;
    }
    match t {
        Thunk::Sgemm(s) => gemm(
            i,
            Gemm {
                a: s.a,
                b: s.b,
                bias: None,
                c: s.c,
                m: s.m,
                k: s.k,
                n: s.n,
                batch: 1,
                a_bcast: false,
                b_bcast: false,
                dt: s.dt,
                b_f16: s.b_f16,
                act: None,
            },
        ),
        Thunk::BatchedSgemm(s) => gemm(
            i,
            Gemm {
                a: s.a,
                b: s.b,
                bias: None,
                c: s.c,
                m: s.m,
                k: s.k,
                n: s.n,
                batch: s.batch,
                a_bcast: s.a_bcast,
                b_bcast: s.b_bcast,
                dt: s.dt,
                b_f16: false,
                act: None,
            },
        ),
        Thunk::FusedMmBiasAct(s) => gemm(
            i,
            Gemm {
                a: s.a,
                b: s.w,
                bias: Some(s.bias),
                c: s.c,
                m: s.m,
                k: s.k,
                n: s.n,
                batch: 1,
                a_bcast: false,
                b_bcast: false,
                dt: s.dt,
                b_f16: false,
                act: s.act,
            },
        ),
        Thunk::BiasAdd(b) => {
            if empty {
                return Some(Lowered::Skip);
            }
            let len = b.m.checked_mul(b.n)?;
            let args = BiasAddArgs { m: b.m, n: b.n };
            let k = kernel(Family::Matmul, format!("bias_add_{}", suffix(b.dt)));
            Some(Lowered::Dispatch(elementwise(
                i,
                k,
                &args,
                &[b.src, b.bias, b.dst],
                len,
            )))
        }
        _ => None,
    }
}
