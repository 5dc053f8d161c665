//! The AMX prefill GEMM against the VNNI GEMM (same activation codes and
//! scales: equal up to f32 summation order, checked to `1e-6 · Σ_e |w_je ·
//! x_ie|` per output) and against the f64 product of the naive dequantised
//! weights (`tests::naive_row`, independent of the kernels) within the
//! two-level rounding bound of `vnni_gemm_tests`; the instruction
//! encodings against GNU as's output for the same instructions.

use super::*;
use crate::host::kernels::quant::tests::{naive_row, rand_rows};
use crate::host::kernels::quant::{dequant_matmul, vnni_gemm, Act};
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

/// Per output: the f64 product, the two-level rounding bound (plus the
/// f32 slack of `vnni_gemm_tests`) and `Σ_e |w_je · x_ie|`.
fn reference(ty: GgmlType, x: &[f32], w: &[u8], m: usize, k: usize, n: usize) -> Vec<[f64; 3]> {
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
            out.push([want, round + 1e-5 * mag + 1e-30, mag]);
        }
    }
    out
}

/// The AMX GEMM directly, the VNNI GEMM directly and `dequant_matmul`.
fn three(
    ty: GgmlType,
    x: &[f32],
    w: &[u8],
    (m, k, n): (usize, usize, usize),
    tasks: usize,
) -> [Vec<f32>; 3] {
    let rb = ty.row_bytes(k).unwrap();
    let mut amx = vec![f32::NAN; m * n];
    assert!(run_typed(
        ty,
        x,
        w,
        rb,
        &mut Out::F32(&mut amx),
        m,
        k,
        n,
        tasks
    ));
    let mut vnni = vec![f32::NAN; m * n];
    assert!(vnni_gemm::run_typed(
        ty,
        x,
        w,
        rb,
        &mut Out::F32(&mut vnni),
        m,
        k,
        n,
        tasks
    ));
    let mut disp = vec![f32::NAN; m * n];
    dequant_matmul(ty, Act::F32(x), w, Out::F32(&mut disp), m, k, n).unwrap();
    [amx, vnni, disp]
}

#[test]
fn encodings_match_the_assembler() {
    // `as` (binutils 2.40) on the Intel-syntax mnemonics, bytes from
    // `objdump -d`; `pack` stores them little-endian
    let bytes = |v: u64, len: usize| v.to_le_bytes()[..len].to_vec();
    assert_eq!(bytes(LDTILECFG_RAX, 5), [0xc4, 0xe2, 0x78, 0x49, 0x00]);
    assert_eq!(bytes(TILERELEASE, 5), [0xc4, 0xe2, 0x78, 0x49, 0xc0]);
    assert_eq!(bytes(tilezero(3), 5), [0xc4, 0xe2, 0x7b, 0x49, 0xd8]);
    let want = [0xc4, 0xe2, 0x7b, 0x4b, 0x24, 0x08];
    assert_eq!(bytes(tileloadd(4, RAX, RCX), 6), want);
    let want = [0xc4, 0xe2, 0x7b, 0x4b, 0x34, 0x3e];
    assert_eq!(bytes(tileloadd(6, RSI, RDI), 6), want);
    let want = [0xc4, 0xe2, 0x7a, 0x4b, 0x0c, 0x3a];
    assert_eq!(bytes(tilestored(1, RDX, RDI), 6), want);
    assert_eq!(bytes(tdpbssd(1, 4, 6), 5), [0xc4, 0xe2, 0x4b, 0x5e, 0xcc]);
    assert_eq!(bytes(tdpbusd(2, 4, 5), 5), [0xc4, 0xe2, 0x51, 0x5e, 0xd4]);
}

#[test]
fn every_type_matches_vnni_and_the_reference() {
    if !ready() || !super::super::vnni::available() {
        return;
    }
    let mut worst_vs_vnni = 0f64;
    for (t, &ty) in TYPES.iter().enumerate() {
        let bs = ty.block_size();
        // odd block counts, odd m (a partial activation group) and odd n
        // (a partial weight group, several panels with two tasks)
        let ks = if bs == 32 { [96, 608] } else { [256, 768] };
        for (s, (&k, (m, n))) in ks.iter().zip([(17, 7), (35, 133)]).enumerate() {
            let seed = 300 + 10 * t as u64 + s as u64;
            let w = rand_rows(ty, n, k, seed);
            let x: Vec<f32> = rand_vec(m * k, seed + 1).iter().map(|v| 3.0 * v).collect();
            let refs = reference(ty, &x, &w, m, k, n);
            for tasks in [1, 2] {
                let [amx, vnni, disp] = three(ty, &x, &w, (m, k, n), tasks);
                for (e, &[want, bound, mag]) in refs.iter().enumerate() {
                    let (a, v) = (f64::from(amx[e]), f64::from(vnni[e]));
                    let d = (a - v).abs() / mag.max(1e-30);
                    worst_vs_vnni = worst_vs_vnni.max(d);
                    assert!(
                        d <= 1e-6,
                        "{} m={m} k={k} n={n} tasks={tasks} [{e}]: amx {a}, vnni {v} ({d:e} of Σ|wx|)",
                        ty.name()
                    );
                    for (what, g) in [("amx", a), ("dispatch", f64::from(disp[e]))] {
                        assert!(
                            (g - want).abs() <= bound,
                            "{} {what} m={m} k={k} n={n} [{e}]: got {g}, want {want}, bound {bound}",
                            ty.name()
                        );
                    }
                }
            }
        }
    }
    println!("largest |amx − vnni| / Σ|wx|: {worst_vs_vnni:e}");
}

#[test]
fn non_finite_activations_poison_only_their_row() {
    if !ready() || !super::super::vnni::available() {
        return;
    }
    for ty in [GgmlType::Q4K, GgmlType::Q8_0, GgmlType::Q6K, GgmlType::Q4_1] {
        let (m, k, n) = (19, 512, 21);
        let w = rand_rows(ty, n, k, 8);
        let mut x = rand_vec(m * k, 9);
        x[3 * k + 70] = f32::NAN;
        x[17 * k + 300] = f32::INFINITY;
        let refs = reference(ty, &x, &w, m, k, n);
        let [amx, ..] = three(ty, &x, &w, (m, k, n), 2);
        for i in 0..m {
            for j in 0..n {
                let g = amx[i * n + j];
                if i == 3 || i == 17 {
                    assert!(g.is_nan(), "{} row {i} col {j}: {g}", ty.name());
                } else {
                    let [want, bound, _] = refs[i * n + j];
                    let err = (f64::from(g) - want).abs();
                    assert!(err <= bound, "{} ({i},{j})", ty.name());
                }
            }
        }
    }
}

#[test]
fn f16_output_rounds_the_f32_result() {
    if !ready() || !super::super::vnni::available() {
        return;
    }
    let (ty, m, k, n) = (GgmlType::Q6K, 20, 512, 23);
    let rb = ty.row_bytes(k).unwrap();
    let w = rand_rows(ty, n, k, 11);
    let x = rand_vec(m * k, 12);
    let mut f = vec![0f32; m * n];
    assert!(run_typed(ty, &x, &w, rb, &mut Out::F32(&mut f), m, k, n, 1));
    let mut h = vec![half::f16::ZERO; m * n];
    assert!(run_typed(ty, &x, &w, rb, &mut Out::F16(&mut h), m, k, n, 1));
    for (a, b) in f.iter().zip(&h) {
        assert_eq!(half::f16::from_f32(*a), *b);
    }
}

#[test]
fn declines_below_one_tile_and_when_switched_off() {
    let (ty, k, n) = (GgmlType::Q8_0, 64, 5);
    let rb = ty.row_bytes(k).unwrap();
    let w = rand_rows(ty, n, k, 3);
    let x = rand_vec(16 * k, 4);
    let mut o = vec![0f32; 16 * n];
    // 15 rows: too few for a tile whatever the hardware
    assert!(!run_typed(
        ty,
        &x[..15 * k],
        &w,
        rb,
        &mut Out::F32(&mut o),
        15,
        k,
        n,
        1
    ));
    // an unsupported type
    assert!(!run_typed(
        GgmlType::Q8_1,
        &x,
        &w,
        rb,
        &mut Out::F32(&mut o),
        16,
        k,
        n,
        1
    ));
    let was = set_enabled(false);
    let off = try_run(ty, &x, &w, rb, &mut Out::F32(&mut o), 16, k, n, 1);
    set_enabled(was);
    assert!(!off);
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
fn amx_timing_probe() {
    // AMX against the VNNI GEMM on one thread, alternating, 3 rounds,
    // GFLOP per CPU-second (other processes' load does not count, cache
    // and memory contention still does)
    if !ready() {
        println!("no AMX here");
        return;
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    // SmolLM2's FFN up (Q4_1), Qwen2.5's FFN down (Q4_K / Q6_K) and up
    // (Q8_0 in its tensors of k = 896)
    let shapes = [
        (GgmlType::Q4K, 4864usize, 896usize),
        (GgmlType::Q6K, 4864, 896),
        (GgmlType::Q8_0, 896, 4864),
        (GgmlType::Q4_1, 576, 1536),
    ];
    pool.install(|| {
        for &(ty, k, n) in &shapes {
            for m in [16, 64, 256] {
                let rb = ty.row_bytes(k).unwrap();
                let w = rand_rows(ty, n, k, 1);
                let x = rand_vec(m * k, 2);
                let mut o = vec![0f32; m * n];
                let flop = 2.0 * (m * n * k) as f64;
                let reps = (2e10 / flop).ceil() as usize;
                let (mut vn, mut am) = (0f64, 0f64);
                for _ in 0..3 {
                    let t = cpu_secs();
                    for _ in 0..reps {
                        vnni_gemm::run_typed(ty, &x, &w, rb, &mut Out::F32(&mut o), m, k, n, 1);
                    }
                    vn += cpu_secs() - t;
                    let t = cpu_secs();
                    for _ in 0..reps {
                        run_typed(ty, &x, &w, rb, &mut Out::F32(&mut o), m, k, n, 1);
                    }
                    am += cpu_secs() - t;
                }
                let tot = 3.0 * reps as f64 * flop / 1e9;
                println!(
                    "{:5} m={m:3} k={k:4} n={n:4}: vnni {:6.1} GFLOP/cpu-s, amx {:6.1} ({:.2}x)",
                    ty.name(),
                    tot / vn,
                    tot / am,
                    vn / am
                );
            }
        }
    });
}
