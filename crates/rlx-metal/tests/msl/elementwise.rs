//! elementwise.metal: every activation (f32 / f16) and both casts.
//!
//! Tolerances: f32 `1e-6 + 2e-6·|ref|` (f32 math vs an f64 reference; exact
//! GELU's erf approximation is within 1.5e-7); f16 `1e-5 + 2^-10·|ref|`
//! (f32 math rounded once to f16: at most half an ulp, plus slack).
//! Casts are exact (round to nearest even).

use super::common::{assert_close, lib, uniform, Dt, DTS};
use msl_sim::{Binding, Grid};
use rlx_ir::op::{Activation, ALL_ACTIVATIONS};
use rlx_metal::metal::args::{act_code, CastArgs, KernelArgs, UnaryArgs};
use rlx_metal::metal::kernels::Family;

const SIZES: [usize; 5] = [1, 31, 33, 100, 1000];

fn erf(x: f64) -> f64 {
    // Abramowitz & Stegun 7.1.28 would be coarse; use the series / continued
    // fraction split for a reference accurate to ~1e-15.
    if x.abs() < 2.5 {
        let (mut term, mut sum, x2) = (x, x, x * x);
        for n in 1..60 {
            term *= -x2 / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // erfc continued fraction (Lentz), fine for |x| >= 2.5
        let z = x.abs();
        let mut f = z;
        for k in (1..80).rev() {
            f = z + (k as f64 / 2.0) / f;
        }
        let erfc = (-z * z).exp() / (f * std::f64::consts::PI.sqrt());
        (1.0 - erfc).copysign(x)
    }
}

/// f64 reference of an activation (shared with the matmul and region tests).
pub fn reference(a: Activation, x: f64) -> f64 {
    use Activation::*;
    match a {
        Gelu => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
        GeluApprox => {
            0.5 * x
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
        }
        Silu => x / (1.0 + (-x).exp()),
        Relu => x.max(0.0),
        Sigmoid => 1.0 / (1.0 + (-x).exp()),
        Tanh => x.tanh(),
        Exp => x.exp(),
        Log => x.ln(),
        Sqrt => x.sqrt(),
        Rsqrt => 1.0 / x.sqrt(),
        Neg => -x,
        Abs => x.abs(),
        Sin => x.sin(),
        Cos => x.cos(),
        Tan => x.tan(),
        Atan => x.atan(),
        Round => x.round_ties_even(),
    }
}

/// Inputs inside an activation's domain (shared with the region tests).
pub fn inputs(a: Activation, n: usize, seed: u64) -> Vec<f32> {
    use Activation::*;
    match a {
        Log | Sqrt | Rsqrt => uniform(seed, n, 0.05, 6.0),
        Tan => uniform(seed, n, -1.3, 1.3),
        // multiples of 0.5 hit the ties of round-half-to-even
        Round => uniform(seed, n, -8.0, 8.0)
            .iter()
            .map(|x| (x * 2.0).round() / 2.0)
            .collect(),
        _ => uniform(seed, n, -5.0, 5.0),
    }
}

#[test]
fn unary_activations_match_reference() {
    let lib = lib(Family::Elementwise);
    for dt in DTS {
        let kernel = format!("unary_{}", dt.suffix());
        let (atol, rtol) = match dt {
            Dt::F32 => (1e-6, 2e-6),
            Dt::F16 => (1e-5, 1.0 / 1024.0),
        };
        for a in ALL_ACTIVATIONS {
            for (k, &n) in SIZES.iter().enumerate() {
                let x = dt.round(&inputs(a, n, 7 + k as u64));
                let args = UnaryArgs {
                    len: n as u32,
                    op: act_code(a),
                };
                let mut src = dt.encode(&x);
                let mut dst = vec![0u8; src.len()];
                let tpg = [64u32, 32, 256][k % 3];
                let groups = (n as u32).div_ceil(tpg);
                lib.dispatch(
                    &kernel,
                    args.as_bytes(),
                    &mut [&mut src, &mut dst],
                    Grid::d1(groups, tpg),
                    &[],
                )
                .unwrap_or_else(|e| panic!("{e}"));
                let want: Vec<f64> = x.iter().map(|&v| reference(a, v as f64)).collect();
                let got = dt.decode(&dst);
                assert_close(
                    &format!("{kernel} {} n={n}", a.name()),
                    &got,
                    &want,
                    atol,
                    rtol,
                );
            }
        }
    }
}

#[test]
fn unary_in_place_through_arena_views() {
    // the in-place thunk binds one arena range as both src and dst (a
    // MetalPlan binding is buffer + offset); NaN passes through relu
    let lib = lib(Family::Elementwise);
    let n = 33usize;
    let mut x = uniform(5, n, -2.0, 2.0);
    x[3] = f32::NAN;
    let mut arena = vec![0x5Au8; 64];
    arena.extend(Dt::F32.encode(&x));
    arena.extend([0x5Au8; 36]);
    let args = UnaryArgs {
        len: n as u32,
        op: act_code(Activation::Relu),
    };
    let mut bindings = [
        Binding::Bytes(args.as_bytes()),
        Binding::View {
            region: 0,
            offset: 64,
        },
        Binding::View {
            region: 0,
            offset: 64,
        },
    ];
    lib.dispatch_views(
        "unary_f32",
        &mut bindings,
        &mut [&mut arena],
        Grid::d1(2, 32),
        &[],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let got = Dt::F32.decode(&arena[64..64 + 4 * n]);
    for (i, (&g, &v)) in got.iter().zip(&x).enumerate() {
        if i == 3 {
            assert!(g.is_nan());
        } else {
            assert_eq!(g, v.max(0.0), "[{i}]");
        }
    }
    assert!(arena[..64]
        .iter()
        .chain(&arena[64 + 4 * n..])
        .all(|&b| b == 0x5A));
}

#[test]
fn casts_round_to_nearest_even() {
    let lib = lib(Family::Elementwise);
    for &n in &SIZES {
        let mut x = uniform(n as u64, n, -70000.0, 70000.0);
        // ties and extremes: 1 + 2^-11 is a tie between two f16s, 65520 overflows
        x[0] = 1.0 + 1.0 / 2048.0;
        if n > 2 {
            x[1] = 65520.0;
            x[2] = 1e-8;
        }
        let args = CastArgs { len: n as u32 };
        let mut src = Dt::F32.encode(&x);
        let mut h = vec![0u8; n * 2];
        let groups = (n as u32).div_ceil(128);
        lib.dispatch(
            "cast_f32_f16",
            args.as_bytes(),
            &mut [&mut src, &mut h],
            Grid::d1(groups, 128),
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let want: Vec<u8> = x
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect();
        assert_eq!(h, want, "cast_f32_f16 n={n}");
        let mut back = vec![0u8; n * 4];
        lib.dispatch(
            "cast_f16_f32",
            args.as_bytes(),
            &mut [&mut h, &mut back],
            Grid::d1(groups, 128),
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let want: Vec<f32> = Dt::F16.round(&x);
        let got = Dt::F32.decode(&back);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "cast_f16_f32 n={n} [{i}]");
        }
    }
}

/// `cast_trunc_f32` against Rust's `f32::trunc` bit for bit: odd sizes,
/// halves and near-integers of both signs, signed zeros, values past 2^24
/// (already integral), ±inf and NaN (kept, unlike an integer round trip).
#[test]
fn trunc_cast_rounds_toward_zero() {
    let lib = lib(Family::Elementwise);
    for &n in &SIZES {
        let mut x = uniform(7 + n as u64, n, -1000.0, 1000.0);
        let special = [
            2.5,
            -2.5,
            0.999_999_9,
            -0.999_999_9,
            -0.0,
            3e9,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ];
        for (v, s) in x.iter_mut().zip(special) {
            *v = s;
        }
        let args = CastArgs { len: n as u32 };
        let mut src = Dt::F32.encode(&x);
        let mut dst = vec![0u8; n * 4];
        lib.dispatch(
            "cast_trunc_f32",
            args.as_bytes(),
            &mut [&mut src, &mut dst],
            Grid::d1((n as u32).div_ceil(128), 128),
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        for (i, (g, v)) in Dt::F32.decode(&dst).iter().zip(&x).enumerate() {
            let w = v.trunc();
            let same = g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan());
            assert!(
                same,
                "cast_trunc_f32 n={n} [{i}]: trunc({v}) = {g}, want {w}"
            );
        }
    }
}
