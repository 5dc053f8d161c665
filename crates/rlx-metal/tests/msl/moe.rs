//! moe.metal: `grouped_gemv_*` / `grouped_gemm_*` for the f32 `[E, k, n]`
//! expert stack and every GGUF type the host's `dequant_grouped_matmul`
//! accepts, against an f64 reference (the GGUF weights dequantised by the
//! independent block decoder of `quant.rs`, written from ggml's
//! definitions).
//!
//! Shapes are odd: m ∈ {1, 3, 8, 17, 40} rows (the GEMV path for m ≤ 8,
//! also run through the GEMM kernel; 40 rows > one 32-row batch of an
//! expert), n ∈ {5, 33, 37, 257} (partial simdgroups, tiles and f32 GEMV
//! threadgroups), k one block, an odd number of blocks, several blocks
//! (f32: 1, 37, 100). Routing: random experts, expert 1 never chosen and
//! filled with NaN bytes (any read of it would make NaNs), and two rows
//! with an out-of-range id (−1 and E), whose dst row must be zero.
//!
//! Tolerance per output: `1e-5 · S + 1e-6` with `S = Σ_e |w_e · x_e|`
//! (f32 decode, one rounding per weight, f32 accumulation chains of at most
//! k additions: ≈ 100 · 2^-24 · S = 6e-6 · S at k = 100; the GGUF chains
//! are shorter, k / 16 + 40).

use super::common::{lib, uniform};
use super::quant::{dequant, random_weights};
use msl_sim::Grid;
use rlx_ir::GgmlType;
use rlx_metal::metal::args::{KernelArgs, MoeArgs};
use rlx_metal::metal::kernels::Family;

/// The expert no row chooses (filled with NaN).
const UNUSED: usize = 1;

/// (m, index into the k list, n, experts).
const CASES: [(usize, usize, usize, usize); 5] = [
    (1, 0, 33, 3),
    (3, 2, 257, 4),
    (8, 1, 5, 3),
    (17, 0, 37, 5),
    (40, 2, 33, 3),
];

/// Expert ids for `m` rows of `e` experts: random, never [`UNUSED`]; rows
/// 1 and 2 (when m > 4) out of range.
fn routing(m: usize, e: usize, seed: u64) -> Vec<i32> {
    let r = uniform(seed, m, 0.0, (e - 1) as f32);
    let mut idx: Vec<i32> = r
        .iter()
        .map(|&v| {
            let i = v as usize;
            (if i >= UNUSED { i + 1 } else { i }).min(e - 1) as i32
        })
        .collect();
    if m > 4 {
        idx[1] = -1;
        idx[2] = e as i32;
    }
    idx
}

/// `(ref, S)` per output; `wd(e, j, kk)` is expert e's weight of output j.
fn reference(
    wd: impl Fn(usize, usize, usize) -> f64,
    x: &[f32],
    idx: &[i32],
    (m, k, n, e): (usize, usize, usize, usize),
) -> (Vec<f64>, Vec<f64>) {
    let (mut r, mut s) = (vec![0f64; m * n], vec![0f64; m * n]);
    for i in 0..m {
        if idx[i] < 0 || idx[i] as usize >= e {
            continue;
        }
        for j in 0..n {
            for kk in 0..k {
                let p = wd(idx[i] as usize, j, kk) * x[i * k + kk] as f64;
                r[i * n + j] += p;
                s[i * n + j] += p.abs();
            }
        }
    }
    (r, s)
}

fn run(kernel: &str, a: MoeArgs, x: &[f32], w: &[u8], idx: &[i32], gemm: bool) -> Vec<f32> {
    let grid = if gemm {
        Grid {
            groups: [a.n.div_ceil(32), a.num_experts, 1],
            threads: [128, 1, 1],
        }
    } else if a.row_bytes == 0 {
        Grid {
            groups: [a.n.div_ceil(256), a.m, 1],
            threads: [256, 1, 1],
        }
    } else {
        Grid {
            groups: [a.n.div_ceil(4), a.m, 1],
            threads: [128, 1, 1],
        }
    };
    let mut xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut ib: Vec<u8> = idx.iter().flat_map(|v| v.to_le_bytes()).collect();
    // dst starts as garbage: zero rows must be written, not left
    let mut dst = vec![0x7Fu8; (a.m * a.n) as usize * 4];
    let mut wb = w.to_vec();
    lib(Family::Moe)
        .dispatch(
            kernel,
            a.as_bytes(),
            &mut [&mut xb, &mut wb, &mut ib, &mut dst],
            grid,
            &[],
        )
        .unwrap_or_else(|e| panic!("{kernel}: {e}"));
    dst.chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Runs the GEMV (m ≤ 8) and GEMM kernels of `stem` on one case.
fn check(stem: &str, a: MoeArgs, x: &[f32], w: &[u8], idx: &[i32], want: &(Vec<f64>, Vec<f64>)) {
    let paths: &[bool] = if a.m <= 8 { &[false, true] } else { &[true] };
    for &gemm in paths {
        let kernel = format!("grouped_{}_{stem}", if gemm { "gemm" } else { "gemv" });
        let got = run(&kernel, a, x, w, idx, gemm);
        for (o, ((&g, &r), &s)) in got.iter().zip(&want.0).zip(&want.1).enumerate() {
            let tol = 1e-5 * s + 1e-6;
            assert!(
                (g as f64 - r).abs() <= tol,
                "{kernel} {a:?} [{}, {}] (expert {}): got {g}, want {r} (tol {tol:e})",
                o / a.n as usize,
                o % a.n as usize,
                idx[o / a.n as usize]
            );
        }
    }
}

#[test]
fn grouped_f32() {
    for (c, &(m, ki, n, e)) in CASES.iter().enumerate() {
        let k = [1, 37, 100][ki];
        let mut w = uniform(10 + c as u64, e * k * n, -1.0, 1.0); // [E, k, n]
        w[UNUSED * k * n..(UNUSED + 1) * k * n].fill(f32::NAN);
        let x = uniform(20 + c as u64, m * k, -1.0, 1.0);
        let idx = routing(m, e, 30 + c as u64);
        let want = reference(
            |ex, j, kk| w[(ex * k + kk) * n + j] as f64,
            &x,
            &idx,
            (m, k, n, e),
        );
        let a = MoeArgs {
            m: m as u32,
            k: k as u32,
            n: n as u32,
            num_experts: e as u32,
            row_bytes: 0,
        };
        let wb: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        check("f32", a, &x, &wb, &idx, &want);
    }
}

fn ks(ty: GgmlType) -> [usize; 3] {
    match ty.block_size() {
        1 => [1, 37, 100],
        bs => [bs, 3 * bs, if bs == 32 { 5 * bs } else { 2 * bs }],
    }
}

fn check_type(ty: GgmlType) {
    let name = ty.name().to_lowercase();
    let stem = match ty.block_size() {
        1 => format!("gguf_{name}"), // the float row types
        _ => name,
    };
    for (c, &(m, ki, n, e)) in CASES.iter().enumerate() {
        let k = ks(ty)[ki];
        let rb = ty.row_bytes(k).unwrap();
        let mut w = random_weights(ty, e * n, k, 40 + c as u64); // [E·n, k] rows
        let wd = dequant(ty, &w, e * n, k);
        w[UNUSED * n * rb..(UNUSED + 1) * n * rb].fill(0xFF); // NaN scales / values
        let x = uniform(50 + c as u64, m * k, -1.0, 1.0);
        let idx = routing(m, e, 60 + c as u64);
        let want = reference(
            |ex, j, kk| wd[(ex * n + j) * k + kk],
            &x,
            &idx,
            (m, k, n, e),
        );
        let a = MoeArgs {
            m: m as u32,
            k: k as u32,
            n: n as u32,
            num_experts: e as u32,
            row_bytes: rb as u32,
        };
        check(&stem, a, &x, &w, &idx, &want);
    }
}

crate::ggml_type_tests! {
    gguf_f32_rows => F32,
    gguf_f16_rows => F16,
    gguf_bf16_rows => BF16,
    gguf_q4_0 => Q4_0,
    gguf_q4_1 => Q4_1,
    gguf_q5_0 => Q5_0,
    gguf_q5_1 => Q5_1,
    gguf_q8_0 => Q8_0,
    gguf_q8_1 => Q8_1,
    gguf_q2_k => Q2K,
    gguf_q3_k => Q3K,
    gguf_q4_k => Q4K,
    gguf_q5_k => Q5K,
    gguf_q6_k => Q6K,
    gguf_q8_k => Q8K,
    gguf_q1_0 => Q1_0,
    gguf_q2_0 => Q2_0,
}
