//! quant.metal `gemm_t_<type>`: `dst[m, k] = x[m, n] @ dequant(w)` (the
//! transposed product of `DequantMatMulGgufT`) for every GGUF type the host
//! accepts, against an f64 reference over the independent block decoder of
//! [`super::quant`] (written from ggml's `dequantize_row_*`).
//!
//! Shapes are odd: m ∈ {1, 5, 9} (partial 4-row thread blocks), n ∈ {1, 7,
//! 33} weight rows (the reduction), k = one block, an odd number of blocks
//! and several blocks (float types: k = 1, 37, 100, not multiples of 16, so
//! the last 16-column chunk is partial); k / 16 chunks leave most of the
//! 64-thread threadgroup idle. `n = 0` writes zeros.
//!
//! Tolerance per output: `1e-5 · S + 1e-6` with `S = Σ_j |x_ij · w_jc|`:
//! f32 decode (one rounding per weight) and one f32 chain of n ≤ 33
//! additions, ≈ 34 · 2^-24 · S = 2e-6 · S at worst.

use super::common::{lib, uniform};
use super::quant::{dequant, random_weights};
use msl_sim::Grid;
use rlx_ir::GgmlType;
use rlx_metal::metal::args::{KernelArgs, QuantArgs};
use rlx_metal::metal::kernels::Family;

fn run(kernel: &str, a: QuantArgs, x: &[f32], w: &[u8]) -> Vec<f32> {
    let mut dst = vec![0xffu8; (a.m * a.k) as usize * 4];
    let grid = Grid {
        groups: [a.k.div_ceil(16).div_ceil(64), a.m.div_ceil(4), 1],
        threads: [64, 1, 1],
    };
    let mut xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    if xb.is_empty() {
        xb = vec![0; 4];
    }
    let mut wb = if w.is_empty() { vec![0; 4] } else { w.to_vec() };
    lib(Family::Quant)
        .dispatch(
            kernel,
            a.as_bytes(),
            &mut [&mut xb, &mut wb, &mut dst],
            grid,
            &[],
        )
        .unwrap_or_else(|e| panic!("{kernel}: {e}"));
    dst.chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn ks(ty: GgmlType) -> [usize; 3] {
    match ty.block_size() {
        1 => [1, 37, 100],
        bs => [bs, 3 * bs, if bs == 32 { 9 * bs } else { 2 * bs }],
    }
}

/// (m, index into `ks`, n).
const CASES: [(usize, usize, usize); 5] = [(1, 0, 7), (5, 1, 33), (9, 2, 1), (4, 1, 7), (9, 0, 0)];

fn check_type(ty: GgmlType) {
    let kernel = format!("gemm_t_{}", ty.name().to_lowercase());
    for (c, &(m, ki, n)) in CASES.iter().enumerate() {
        let k = ks(ty)[ki];
        let w = random_weights(ty, n, k, 31 + c as u64);
        let wd = dequant(ty, &w, n, k);
        let x = uniform(200 + c as u64, m * n, -1.0, 1.0);
        let a = QuantArgs {
            m: m as u32,
            k: k as u32,
            n: n as u32,
            row_bytes: ty.row_bytes(k).unwrap() as u32,
            x_f16: 0,
            dst_f16: 0,
        };
        let got = run(&kernel, a, &x, &w);
        for i in 0..m {
            for col in 0..k {
                let (mut want, mut s) = (0f64, 0f64);
                for j in 0..n {
                    let p = x[i * n + j] as f64 * wd[j * k + col];
                    want += p;
                    s += p.abs();
                }
                let g = got[i * k + col] as f64;
                let tol = 1e-5 * s + 1e-6;
                assert!(
                    (g - want).abs() <= tol,
                    "{kernel} m={m} k={k} n={n} [{i}, {col}]: got {g}, want {want} (tol {tol:e})"
                );
            }
        }
    }
}

crate::ggml_type_tests! {
    t_f32_rows => F32,
    t_f16_rows => F16,
    t_bf16_rows => BF16,
    t_q4_0 => Q4_0,
    t_q4_1 => Q4_1,
    t_q5_0 => Q5_0,
    t_q5_1 => Q5_1,
    t_q8_0 => Q8_0,
    t_q8_1 => Q8_1,
    t_q2_k => Q2K,
    t_q3_k => Q3K,
    t_q4_k => Q4K,
    t_q5_k => Q5K,
    t_q6_k => Q6K,
    t_q8_k => Q8K,
    t_q1_0 => Q1_0,
    t_q2_0 => Q2_0,
}

/// A hand-worked Q8_0 case: one block with d = 0.5 and codes 1..=32,
/// two weight rows (the second negated), x = [[2, 1]]:
/// dst[c] = 2 · 0.5 (c + 1) − 0.5 (c + 1) = 0.5 (c + 1).
#[test]
fn t_known_q8_0_block() {
    let mut w = vec![0u8; 68];
    for (r, row) in w.chunks_exact_mut(34).enumerate() {
        row[..2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
        for c in 0..32 {
            let q = (c as i8 + 1) * if r == 0 { 1 } else { -1 };
            row[2 + c] = q as u8;
        }
    }
    let a = QuantArgs {
        m: 1,
        k: 32,
        n: 2,
        row_bytes: 34,
        x_f16: 0,
        dst_f16: 0,
    };
    let got = run("gemm_t_q8_0", a, &[2.0, 1.0], &w);
    let want: Vec<f32> = (0..32).map(|c| 0.5 * (c as f32 + 1.0)).collect();
    assert_eq!(got, want);
}
