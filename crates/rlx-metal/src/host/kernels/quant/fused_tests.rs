//! The fused decode-MLP GEMVs ([`gate_up_gemv`], [`down_residual_gemv`])
//! against the naive f64 dequantise-then-dot oracle of `tests`, within the
//! same activation-rounding bound as the unfused integer-dot path
//! (`½ Σ_e |w_je|·max|x_b|/127` per output, zero where that path is not
//! used), and bit for bit against the unfused kernels they replace.

use super::tests::{naive_matmul, rand_rows, rounding_bound};
use super::*;
use crate::host::kernels::elementwise::{gelu_approx, silu};
use crate::host::kernels::testutil::rand_vec;
use rlx_ir::quant::ALL_GGML_TYPES;

/// Largest `|d act / dg|` of the gatings: SiLU ≈ 1.0998, GELU (tanh)
/// ≈ 1.1289; a Lipschitz constant for the bound below.
const LIP: f64 = 1.13;
/// f32 accumulation vs the f64 oracle, relative to the output scale.
const TOL: f64 = 1e-5;

fn gating_f64(g: Gating, v: f64) -> f64 {
    match g {
        Gating::Silu => v / (1.0 + (-v).exp()),
        Gating::GeluTanh => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * v * (1.0 + (c * (v + 0.044_715 * v * v * v)).tanh())
        }
    }
}

fn max_abs(v: &[f64]) -> f64 {
    v.iter().fold(0f64, |a, &b| a.max(b.abs()))
}

fn k_for(ty: GgmlType, blocks: usize) -> usize {
    match ty.block_size() {
        1 => 37 * blocks,
        bs => blocks * bs,
    }
}

/// `gate_up_gemv` vs the oracle: with `εg, εu` the gate / up errors
/// (rounding bound + f32 tolerance), `|act(g')·u' − act(g)·u| ≤
/// LIP·εg·(|u| + εu) + |act(g)|·εu`.
fn check_gate_up(ty: GgmlType, k: usize, n: usize, gating: Gating, seed: u64) {
    let (wg, wu) = (rand_rows(ty, n, k, seed), rand_rows(ty, n, k, seed + 1));
    let x = rand_vec(k, seed + 2);
    let mut out = vec![f32::NAN; n];
    gate_up_gemv(ty, Act::F32(&x), &wg, &wu, Out::F32(&mut out), k, n, gating).unwrap();
    let (g, u) = (
        naive_matmul(ty, &x, &wg, 1, k, n),
        naive_matmul(ty, &x, &wu, 1, k, n),
    );
    let (bg, bu) = (
        rounding_bound(ty, &x, &wg, 1, k, n),
        rounding_bound(ty, &x, &wu, 1, k, n),
    );
    let (sg, su) = (TOL * max_abs(&g), TOL * max_abs(&u));
    let want: Vec<f64> = g
        .iter()
        .zip(&u)
        .map(|(&g, &u)| gating_f64(gating, g) * u)
        .collect();
    let sw = TOL * max_abs(&want);
    for j in 0..n {
        let (eg, eu) = (bg[j] + sg, bu[j] + su);
        let bound = LIP * eg * (u[j].abs() + eu) + gating_f64(gating, g[j]).abs() * eu + sw;
        let err = (f64::from(out[j]) - want[j]).abs();
        assert!(
            err <= bound,
            "{} {gating:?} k={k} n={n} [{j}]: got {}, want {} (err {err}, bound {bound})",
            ty.name(),
            out[j],
            want[j]
        );
    }
    // bit for bit the unfused GEMVs followed by the elementwise gating
    let (mut ug, mut uu) = (vec![0f32; n], vec![0f32; n]);
    dequant_matmul(ty, Act::F32(&x), &wg, Out::F32(&mut ug), 1, k, n).unwrap();
    dequant_matmul(ty, Act::F32(&x), &wu, Out::F32(&mut uu), 1, k, n).unwrap();
    let act = |v: f32| match gating {
        Gating::Silu => silu(v),
        Gating::GeluTanh => gelu_approx(v),
    };
    let unfused: Vec<f32> = ug.iter().zip(&uu).map(|(&g, &u)| act(g) * u).collect();
    assert_eq!(
        out,
        unfused,
        "{} {gating:?} k={k} n={n}: fused != unfused",
        ty.name()
    );
}

/// `down_residual_gemv` vs `res + oracle`, within the rounding bound.
fn check_down(ty: GgmlType, k: usize, n: usize, seed: u64) {
    let w = rand_rows(ty, n, k, seed);
    let x = rand_vec(k, seed + 3);
    let res = rand_vec(n, seed + 4);
    let mut out = vec![f32::NAN; n];
    down_residual_gemv(
        ty,
        Act::F32(&x),
        &w,
        Act::F32(&res),
        Out::F32(&mut out),
        k,
        n,
    )
    .unwrap();
    let d = naive_matmul(ty, &x, &w, 1, k, n);
    let b = rounding_bound(ty, &x, &w, 1, k, n);
    let scale = TOL * (max_abs(&d) + 1.0);
    for j in 0..n {
        let want = f64::from(res[j]) + d[j];
        let err = (f64::from(out[j]) - want).abs();
        assert!(
            err <= b[j] + scale,
            "{} down k={k} n={n} [{j}]: got {}, want {want} (err {err})",
            ty.name(),
            out[j]
        );
    }
    let mut unf = vec![0f32; n];
    dequant_matmul(ty, Act::F32(&x), &w, Out::F32(&mut unf), 1, k, n).unwrap();
    let unf: Vec<f32> = unf.iter().zip(&res).map(|(&d, &r)| r + d).collect();
    assert_eq!(out, unf, "{} down k={k} n={n}: fused != unfused", ty.name());
}

#[test]
fn gate_up_every_type_small_shapes() {
    for (t, &ty) in ALL_GGML_TYPES.iter().enumerate() {
        for (s, n) in [1usize, 7, 133].into_iter().enumerate() {
            let seed = 100 * t as u64 + s as u64;
            check_gate_up(ty, k_for(ty, 3), n, Gating::Silu, seed);
            check_gate_up(ty, k_for(ty, 2), n, Gating::GeluTanh, seed + 50);
        }
    }
}

#[test]
fn down_residual_every_type_small_shapes() {
    for (t, &ty) in ALL_GGML_TYPES.iter().enumerate() {
        for n in [1usize, 5, 131] {
            check_down(ty, k_for(ty, 3), n, 7 * t as u64 + n as u64);
        }
    }
}

#[test]
fn parallel_shapes_of_real_decode_mlps() {
    use GgmlType::*;
    // k = hidden, n = intermediate: over 1 MiB of packed rows, so the row
    // split runs on the pool.
    for (ty, k, n) in [
        (Q4_1, 576, 1536),
        (Q8_0, 512, 2048),
        (Q4K, 512, 2816),
        (Q6K, 512, 2304),
    ] {
        check_gate_up(ty, k, n, Gating::Silu, 5);
        check_gate_up(ty, k, n, Gating::GeluTanh, 6);
        check_down(ty, n, k, 7);
    }
    check_gate_up(F16, 200, 4000, Gating::Silu, 8);
    check_down(F32, 300, 2000, 9);
}

#[test]
fn f16_operands_round_once_at_the_store() {
    let (ty, k, n) = (GgmlType::Q4K, 512, 300);
    let (wg, wu) = (rand_rows(ty, n, k, 1), rand_rows(ty, n, k, 2));
    let xh: Vec<f16> = rand_vec(k, 3).iter().map(|&v| f16::from_f32(v)).collect();
    let xr: Vec<f32> = xh.iter().map(|v| v.to_f32()).collect();
    let mut o32 = vec![0f32; n];
    gate_up_gemv(
        ty,
        Act::F32(&xr),
        &wg,
        &wu,
        Out::F32(&mut o32),
        k,
        n,
        Gating::Silu,
    )
    .unwrap();
    let mut oh = vec![f16::ZERO; n];
    gate_up_gemv(
        ty,
        Act::F16(&xh),
        &wg,
        &wu,
        Out::F16(&mut oh),
        k,
        n,
        Gating::Silu,
    )
    .unwrap();
    let want: Vec<f16> = o32.iter().map(|&v| f16::from_f32(v)).collect();
    assert_eq!(oh, want);
    let rh: Vec<f16> = rand_vec(n, 4).iter().map(|&v| f16::from_f32(v)).collect();
    let rr: Vec<f32> = rh.iter().map(|v| v.to_f32()).collect();
    let wd = rand_rows(ty, n, k, 5);
    down_residual_gemv(
        ty,
        Act::F32(&xr),
        &wd,
        Act::F32(&rr),
        Out::F32(&mut o32),
        k,
        n,
    )
    .unwrap();
    down_residual_gemv(
        ty,
        Act::F16(&xh),
        &wd,
        Act::F16(&rh),
        Out::F16(&mut oh),
        k,
        n,
    )
    .unwrap();
    let want: Vec<f16> = o32.iter().map(|&v| f16::from_f32(v)).collect();
    assert_eq!(oh, want);
}

#[test]
fn bad_operands_are_errors() {
    let ty = GgmlType::Q8_0;
    let (k, n) = (64, 4);
    let w = rand_rows(ty, n, k, 1);
    let x = rand_vec(k, 2);
    let mut out = vec![0f32; n];
    let short = &w[..w.len() - 1];
    let e = gate_up_gemv(
        ty,
        Act::F32(&x),
        &w,
        short,
        Out::F32(&mut out),
        k,
        n,
        Gating::Silu,
    );
    assert!(e.unwrap_err().to_string().contains("up_w"));
    let e = gate_up_gemv(
        ty,
        Act::F32(&x),
        &w,
        &w,
        Out::F32(&mut out),
        48,
        n,
        Gating::Silu,
    );
    assert!(e.is_err(), "k not whole blocks");
    let e = down_residual_gemv(
        ty,
        Act::F32(&x),
        &w,
        Act::F32(&x[..3]),
        Out::F32(&mut out),
        k,
        n,
    );
    assert!(e.unwrap_err().to_string().contains("res"));
    let e = down_residual_gemv(
        ty,
        Act::F32(&x[..10]),
        &w,
        Act::F32(&x),
        Out::F32(&mut out),
        k,
        n,
    );
    assert!(e.unwrap_err().to_string().contains("x"));
}

#[test]
fn empty_reduction_gives_the_gating_of_zero() {
    let mut out = vec![f32::NAN; 3];
    let res = [1.0f32, 2.0, 3.0];
    down_residual_gemv(
        GgmlType::F32,
        Act::F32(&[]),
        &[],
        Act::F32(&res),
        Out::F32(&mut out),
        0,
        3,
    )
    .unwrap();
    assert_eq!(out, res);
    gate_up_gemv(
        GgmlType::F32,
        Act::F32(&[]),
        &[],
        &[],
        Out::F32(&mut out),
        0,
        3,
        Gating::Silu,
    )
    .unwrap();
    assert_eq!(out, [0.0; 3]);
}
