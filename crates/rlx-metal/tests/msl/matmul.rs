//! matmul.metal: gemm / gemv (f32, f32 with an f16 weight, f16), batched
//! with shared operands, the bias + activation epilogue, and bias_add.
//! Shapes mix m, k, n in {1, 7, 33, 65, 130}: partial 64x64 (gemm) and
//! 32x32 (gemm_sg, simdgroup matrices) tiles and partial 16-deep k steps;
//! gemv also runs with 1 and 3 simdgroups.
//!
//! Reference: f64 products of the kernel's exact (f16-rounded where the
//! kernel reads f16) inputs. Tolerances: f32 results `1e-5·k + 1e-5·|ref|`
//! (f32 accumulation of k terms of magnitude <= 1); f16 results add
//! `2^-10·|ref| + 1e-3` (one rounding to f16 of an f32 sum).

use super::common::{assert_close, lib, uniform, Dt};
use super::elementwise::reference as act_ref;
use msl_sim::Grid;
use rlx_ir::op::Activation;
use rlx_metal::metal::args::{act_code, BiasAddArgs, KernelArgs, MatmulArgs};
use rlx_metal::metal::kernels::Family;

/// (a/c element type, b element type, kernel suffix).
const VARIANTS: [(Dt, Dt, &str); 3] = [
    (Dt::F32, Dt::F32, "f32"),
    (Dt::F32, Dt::F16, "f32_w16"),
    (Dt::F16, Dt::F16, "f16"),
];

fn tolerance(dt: Dt, k: u32) -> (f64, f64) {
    let atol = 1e-5 * k.max(1) as f64;
    match dt {
        Dt::F32 => (atol, 1e-5),
        Dt::F16 => (atol + 1e-3, 1.0 / 1024.0),
    }
}

/// One problem: `c[z] = act(a[z] @ b[z] + bias)`.
struct Case {
    batch: u32,
    m: u32,
    k: u32,
    n: u32,
    a_bcast: bool,
    b_bcast: bool,
    bias: bool,
    act: Option<Activation>,
}

impl Case {
    fn plain(m: u32, k: u32, n: u32) -> Case {
        Case {
            batch: 1,
            m,
            k,
            n,
            a_bcast: false,
            b_bcast: false,
            bias: false,
            act: None,
        }
    }
}

/// Runs `case` through `gemm_*` / `gemv_*` (`threads` per threadgroup;
/// 0 = `gemm_sg_*` with its 128) and checks it against the f64 reference.
fn check(case: &Case, (dt, bt, sfx): (Dt, Dt, &str), threads: u32, seed: u64) {
    let (m, k, n) = (case.m as usize, case.k as usize, case.n as usize);
    let nb = |bc: bool| if bc { 1 } else { case.batch as usize };
    let a = dt.round(&uniform(seed, nb(case.a_bcast) * m * k, -1.0, 1.0));
    let b = bt.round(&uniform(seed + 1, nb(case.b_bcast) * k * n, -1.0, 1.0));
    let bias = dt.round(&uniform(seed + 2, n, -1.0, 1.0));
    let args = MatmulArgs {
        m: case.m,
        k: case.k,
        n: case.n,
        batch: case.batch,
        a_batch_stride: if case.a_bcast { 0 } else { case.m * case.k },
        b_batch_stride: if case.b_bcast { 0 } else { case.k * case.n },
        has_bias: case.bias as u32,
        has_act: case.act.is_some() as u32,
        act: case.act.map_or(0, act_code),
    };
    let (kind, tile, threads) = match (m, threads) {
        (_, 0) => ("gemm_sg", 32, 128),
        (1, t) => ("gemv", 64, t),
        (_, t) => ("gemm", 64, t),
    };
    let name = format!("{kind}_{sfx}");
    let rows = if kind == "gemv" {
        1
    } else {
        case.m.div_ceil(tile)
    };
    let grid = Grid {
        groups: [case.n.div_ceil(tile), rows, case.batch],
        threads: [threads, 1, 1],
    };
    let (mut ab, mut bb, mut biasb) = (dt.encode(&a), bt.encode(&b), dt.encode(&bias));
    let mut cb = vec![0xFFu8; case.batch as usize * m * n * if dt == Dt::F32 { 4 } else { 2 }];
    lib(Family::Matmul)
        .dispatch(
            &name,
            args.as_bytes(),
            &mut [&mut ab, &mut bb, &mut biasb, &mut cb],
            grid,
            &[],
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut want = Vec::with_capacity(case.batch as usize * m * n);
    for z in 0..case.batch as usize {
        let az = if case.a_bcast { 0 } else { z * m * k };
        let bz = if case.b_bcast { 0 } else { z * k * n };
        for i in 0..m {
            for j in 0..n {
                let mut s: f64 = (0..k)
                    .map(|p| a[az + i * k + p] as f64 * b[bz + p * n + j] as f64)
                    .sum();
                if case.bias {
                    s += bias[j] as f64;
                }
                want.push(case.act.map_or(s, |f| act_ref(f, s)));
            }
        }
    }
    let (atol, rtol) = tolerance(dt, case.k);
    let what = format!(
        "{name} batch={} m={m} k={k} n={n} bcast={}/{} bias={} act={:?} threads={threads}",
        case.batch, case.a_bcast, case.b_bcast, case.bias, case.act
    );
    assert_close(&what, &dt.decode(&cb), &want, atol, rtol);
}

#[test]
fn gemm_matches_reference_on_odd_shapes() {
    const SHAPES: [(u32, u32, u32); 9] = [
        (7, 7, 7),
        (7, 33, 65),
        (65, 7, 33),
        (33, 65, 7),
        (65, 65, 65),
        (2, 1, 1),
        (7, 1, 33),
        (130, 17, 3),
        (3, 130, 70),
    ];
    for (v, variant) in VARIANTS.into_iter().enumerate() {
        for (s, &(m, k, n)) in SHAPES.iter().enumerate() {
            check(&Case::plain(m, k, n), variant, 256, (v * 100 + s) as u64);
        }
    }
}

#[test]
fn simdgroup_matrix_gemm_matches_reference() {
    const SHAPES: [(u32, u32, u32); 6] = [
        (8, 8, 8),
        (7, 33, 65),
        (65, 7, 33),
        (33, 65, 7),
        (2, 1, 1),
        (40, 17, 70),
    ];
    for (v, variant) in VARIANTS.into_iter().enumerate() {
        for (s, &(m, k, n)) in SHAPES.iter().enumerate() {
            check(&Case::plain(m, k, n), variant, 0, (v * 100 + s) as u64);
        }
        let batched = Case {
            batch: 3,
            b_bcast: true,
            bias: true,
            act: Some(Activation::Gelu),
            ..Case::plain(33, 20, 9)
        };
        check(&batched, variant, 0, v as u64);
    }
}

#[test]
fn gemv_matches_reference_with_any_simdgroup_count() {
    const SHAPES: [(u32, u32); 5] = [(1, 1), (7, 33), (65, 65), (33, 130), (130, 7)];
    for (v, variant) in VARIANTS.into_iter().enumerate() {
        for (s, &(k, n)) in SHAPES.iter().enumerate() {
            for threads in [256, 96, 32] {
                check(
                    &Case::plain(1, k, n),
                    variant,
                    threads,
                    (v * 100 + s) as u64,
                );
            }
        }
    }
}

#[test]
fn batched_with_shared_operands() {
    for (v, variant) in VARIANTS.into_iter().enumerate() {
        for (s, (m, k, n)) in [(7, 33, 65), (1, 65, 33), (33, 7, 1)]
            .into_iter()
            .enumerate()
        {
            for (a_bcast, b_bcast) in [(false, false), (true, false), (false, true)] {
                let case = Case {
                    batch: 3,
                    a_bcast,
                    b_bcast,
                    ..Case::plain(m, k, n)
                };
                check(&case, variant, 256, (v * 100 + s) as u64);
            }
        }
    }
}

#[test]
fn bias_and_activation_epilogue() {
    let acts = [
        None,
        Some(Activation::Relu),
        Some(Activation::Gelu),
        Some(Activation::Silu),
        Some(Activation::GeluApprox),
    ];
    for (v, variant) in VARIANTS.into_iter().enumerate() {
        for (s, act) in acts.into_iter().enumerate() {
            for (m, k, n) in [(33, 65, 7), (1, 33, 65), (7, 0, 7)] {
                let case = Case {
                    bias: true,
                    act,
                    ..Case::plain(m, k, n)
                };
                check(&case, variant, 256, (v * 100 + s) as u64);
            }
        }
    }
}

#[test]
fn bias_add_matches_reference() {
    for dt in [Dt::F32, Dt::F16] {
        for (m, n) in [(1, 1), (7, 33), (33, 65), (3, 1000)] {
            let x = dt.round(&uniform(m as u64, (m * n) as usize, -4.0, 4.0));
            let bias = dt.round(&uniform(n as u64, n as usize, -4.0, 4.0));
            let (mut xb, mut bb) = (dt.encode(&x), dt.encode(&bias));
            let mut out = vec![0u8; xb.len()];
            let name = format!("bias_add_{}", dt.suffix());
            lib(Family::Matmul)
                .dispatch(
                    &name,
                    BiasAddArgs { m, n }.as_bytes(),
                    &mut [&mut xb, &mut bb, &mut out],
                    Grid::d1((m * n).div_ceil(256), 256),
                    &[],
                )
                .unwrap_or_else(|e| panic!("{e}"));
            let want: Vec<f64> = x
                .iter()
                .enumerate()
                .map(|(i, &v)| v as f64 + bias[i % n as usize] as f64)
                .collect();
            let (atol, rtol) = match dt {
                Dt::F32 => (1e-6, 1e-6),
                Dt::F16 => (1e-3, 1.0 / 1024.0),
            };
            assert_close(
                &format!("{name} m={m} n={n}"),
                &dt.decode(&out),
                &want,
                atol,
                rtol,
            );
        }
    }
}
