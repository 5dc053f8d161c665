//! The prefill integer-dot GEMM against the f64 product of the naive
//! dequantised weights (`tests::naive_row`, decoded element by element
//! from the block layouts, independent of the kernels), with the module's
//! activation-rounding bound `Σ_e |w_je| · dx_b(e) / 256` per output plus
//! an f32 slack of `1e-5 · Σ_e |w_je · x_ie|`.

use super::*;
use crate::host::kernels::quant::tests::{naive_row, rand_rows};
use crate::host::kernels::quant::{dequant_matmul, Act};
use crate::host::kernels::testutil::rand_vec;

const TYPES: [GgmlType; 10] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2K,
    GgmlType::Q3K,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
];

/// `(want, bound)` per output: the f64 product and the error bound.
fn reference(ty: GgmlType, x: &[f32], w: &[u8], m: usize, k: usize, n: usize) -> Vec<(f64, f64)> {
    let rows: Vec<Vec<f64>> = (0..n).map(|j| naive_row(ty, w, j, k)).collect();
    let mut out = Vec::with_capacity(m * n);
    for i in 0..m {
        let xi = &x[i * k..(i + 1) * k];
        let dx: Vec<f64> = xi
            .chunks_exact(32)
            .map(|b| f64::from(b.iter().fold(0f32, |a, v| a.max(v.abs()))) / 127.0)
            .collect();
        for r in &rows {
            let (mut want, mut round, mut mag) = (0f64, 0f64, 0f64);
            for (e, (&wv, &xv)) in r.iter().zip(xi).enumerate() {
                want += wv * f64::from(xv);
                round += wv.abs() * dx[e / 32] / 256.0;
                mag += (wv * f64::from(xv)).abs();
            }
            out.push((want, round + 1e-5 * mag + 1e-30));
        }
    }
    out
}

/// Runs the GEMM directly (`tasks` threads) and through `dequant_matmul`
/// (which takes it only when switched on; the f32 path is within the bound
/// too).
fn both(
    ty: GgmlType,
    x: &[f32],
    w: &[u8],
    m: usize,
    k: usize,
    n: usize,
    tasks: usize,
) -> [Vec<f32>; 2] {
    let rb = ty.row_bytes(k).unwrap();
    let mut direct = vec![f32::NAN; m * n];
    assert!(run_typed(
        ty,
        x,
        w,
        rb,
        &mut Out::F32(&mut direct),
        m,
        k,
        n,
        tasks
    ));
    let mut disp = vec![f32::NAN; m * n];
    dequant_matmul(ty, Act::F32(x), w, Out::F32(&mut disp), m, k, n).unwrap();
    [direct, disp]
}

#[test]
fn every_type_within_the_rounding_bound() {
    if !super::super::vnni::available() {
        return;
    }
    for (t, &ty) in TYPES.iter().enumerate() {
        let bs = ty.block_size();
        // odd block counts (and for 32-blocks an odd count of runs, so
        // the last 64-element step is half padding), odd m and n with
        // tails in both tile directions and several panels
        let ks = if bs == 32 { [96, 608] } else { [256, 768] };
        for (s, (&k, (m, n))) in ks.iter().zip([(9, 7), (13, 133)]).enumerate() {
            let seed = 100 + 10 * t as u64 + s as u64;
            let w = rand_rows(ty, n, k, seed);
            let x: Vec<f32> = rand_vec(m * k, seed + 1).iter().map(|v| 3.0 * v).collect();
            let refs = reference(ty, &x, &w, m, k, n);
            for tasks in [1, 2] {
                for got in both(ty, &x, &w, m, k, n, tasks) {
                    for (e, (&g, &(want, bound))) in got.iter().zip(&refs).enumerate() {
                        let err = (f64::from(g) - want).abs();
                        assert!(
                            err <= bound,
                            "{} m={m} k={k} n={n} tasks={tasks} [{e}]: got {g}, want {want}, err {err} > {bound}",
                            ty.name()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn simd_quantiser_equals_the_scalar_statement() {
    if !super::super::vnni::available() {
        return;
    }
    let k = 320;
    let mut x: Vec<f32> = rand_vec(k, 21).iter().map(|v| 5.0 * v).collect();
    x[32..64].fill(0.0); // a zero block: dx = 0, codes 0
    x[64] = 127.0 * 0.5; // a tie on the first level once dx = 1
    x[65] = -127.0;
    x[100] = f32::NAN; // a non-finite block: NaN scale
    x[200] = 1e-30;
    let dm = Dims::new(k);
    let bufs = || {
        (
            vec![1i8; dm.kp],
            vec![1i8; dm.kp],
            vec![1f32; dm.kp / 4],
            vec![1f32; dm.hp],
        )
    };
    let (mut a, mut b) = (bufs(), bufs());
    quantize_row(&x, &mut a.0, &mut a.1, &mut a.2, &mut a.3);
    // SAFETY: `available()` checked above.
    unsafe { quantize_row_simd(&x, &mut b.0, &mut b.1, &mut b.2, &mut b.3) };
    assert_eq!(a.0, b.0);
    assert_eq!(a.1, b.1);
    let bits = |v: &[f32]| {
        v.iter()
            .map(|f| if f.is_nan() { u32::MAX } else { f.to_bits() })
            .collect::<Vec<_>>()
    };
    assert_eq!(bits(&a.2), bits(&b.2));
    assert_eq!(bits(&a.3), bits(&b.3));
    assert!(a.2[8 * 3].is_nan() && a.2[8 * 2] == 1.0 / 256.0);
}

#[test]
fn bound_is_tight_enough_to_catch_one_level() {
    // the same data rounded on one level only would break the bound: the
    // test can tell the two-level scheme from llama.cpp's one level
    if !super::super::vnni::available() {
        return;
    }
    let (ty, m, k, n) = (GgmlType::Q8_0, 9, 256, 16);
    let w = rand_rows(ty, n, k, 5);
    let x = rand_vec(m * k, 6);
    let refs = reference(ty, &x, &w, m, k, n);
    let rows: Vec<Vec<f64>> = (0..n).map(|j| naive_row(ty, &w, j, k)).collect();
    let mut worst = 0f64;
    for i in 0..m {
        for (j, r) in rows.iter().enumerate() {
            let mut one = 0f64;
            for (b, xb) in x[i * k..(i + 1) * k].chunks_exact(32).enumerate() {
                let dx = xb.iter().fold(0f32, |a, v| a.max(v.abs())) / 127.0;
                for (e, &v) in xb.iter().enumerate() {
                    let q = (v / dx).round_ties_even();
                    one += r[32 * b + e] * f64::from(dx * q);
                }
            }
            let (want, bound) = refs[i * n + j];
            worst = worst.max((one - want).abs() / bound);
        }
    }
    assert!(
        worst > 1.0,
        "one-level rounding stays within the bound ({worst})"
    );
}

#[test]
fn non_finite_activations_poison_only_their_row() {
    if !super::super::vnni::available() {
        return;
    }
    for ty in [GgmlType::Q4K, GgmlType::Q8_0, GgmlType::Q6K] {
        let (m, k, n) = (11, 512, 9);
        let w = rand_rows(ty, n, k, 8);
        let mut x = rand_vec(m * k, 9);
        x[3 * k + 70] = f32::NAN;
        x[7 * k + 300] = f32::INFINITY;
        let refs = reference(ty, &x, &w, m, k, n);
        for got in both(ty, &x, &w, m, k, n, 2) {
            for i in 0..m {
                for j in 0..n {
                    let g = got[i * n + j];
                    if i == 3 || i == 7 {
                        assert!(g.is_nan(), "{} row {i} col {j}: {g}", ty.name());
                    } else {
                        let (want, bound) = refs[i * n + j];
                        assert!(
                            (f64::from(g) - want).abs() <= bound,
                            "{} ({i},{j})",
                            ty.name()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn f16_output_rounds_the_f32_result() {
    if !super::super::vnni::available() {
        return;
    }
    let (ty, m, k, n) = (GgmlType::Q5_0, 10, 640, 20);
    let rb = ty.row_bytes(k).unwrap();
    let w = rand_rows(ty, n, k, 11);
    let x = rand_vec(m * k, 12);
    let [f, _] = both(ty, &x, &w, m, k, n, 1);
    let mut h = vec![half::f16::ZERO; m * n];
    assert!(run_typed(ty, &x, &w, rb, &mut Out::F16(&mut h), m, k, n, 1));
    for (a, b) in f.iter().zip(&h) {
        assert_eq!(half::f16::from_f32(*a), *b);
    }
}

/// CPU seconds used by this process so far (all threads; /proc/self/stat,
/// clock ticks of 10 ms): timings that hold on a loaded machine.
fn cpu_secs() -> f64 {
    let st = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let f: Vec<&str> = st
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (t(11) + t(12)) / 100.0
}

#[test]
#[ignore = "timing probe; run with --release --ignored --nocapture"]
fn gemm_timing_probe() {
    use crate::host::kernels::quant::{driver, kquants, legacy, Blocks};
    // the models' prefill shapes on one thread: this GEMM against the
    // decode-to-f32 panels + `gemm` crate path, alternating, GFLOP per
    // CPU-second (so that other processes' load does not count)
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    macro_rules! ab {
        ($ty:expr, $B:ty, $m:expr, $k:expr, $n:expr) => {{
            let (ty, m, k, n) = ($ty, $m, $k, $n);
            let rb = ty.row_bytes(k).unwrap();
            let w = rand_rows(ty, n, k, 1);
            let x = rand_vec(m * k, 2);
            let mut o = vec![0f32; m * n];
            let flop = 2.0 * (m * n * k) as f64;
            let reps = (4e9 / flop).ceil() as usize;
            let (mut old, mut new) = (0f64, 0f64);
            for _ in 0..2 {
                let t = cpu_secs();
                for _ in 0..reps {
                    driver::run::<Blocks<$B>, f32>(&x, &w, rb, &mut o, m, k, n);
                }
                old += cpu_secs() - t;
                let t = cpu_secs();
                for _ in 0..reps {
                    run_typed(ty, &x, &w, rb, &mut Out::F32(&mut o), m, k, n, 1);
                }
                new += cpu_secs() - t;
            }
            let tot = 2.0 * reps as f64 * flop / 1e9;
            println!(
                "{:5} m={m:3} k={k:4} n={n:5}: f32 panels {:6.1} GFLOP/cpu-s, int8 tiles {:6.1} ({:.2}x)",
                ty.name(),
                tot / old,
                tot / new,
                old / new
            );
        }};
    }
    pool.install(|| {
        for m in [64, 512] {
            ab!(GgmlType::Q5_0, legacy::Q5_0, m, 640, 2048);
            ab!(GgmlType::Q8_0, legacy::Q8_0, m, 640, 2048);
            ab!(GgmlType::Q6K, kquants::Q6K, m, 2048, 640);
            ab!(GgmlType::Q5_0, legacy::Q5_0, m, 896, 4864);
            ab!(GgmlType::Q8_0, legacy::Q8_0, m, 896, 4864);
            ab!(GgmlType::Q4K, kquants::Q4K, m, 4864, 896);
            ab!(GgmlType::Q6K, kquants::Q6K, m, 4864, 896);
            ab!(GgmlType::Q4_0, legacy::Q4_0, m, 576, 1536);
            ab!(GgmlType::Q4_1, legacy::Q4_1, m, 576, 1536);
            ab!(GgmlType::Q5K, kquants::Q5K, m, 2048, 640);
        }
    });
}
