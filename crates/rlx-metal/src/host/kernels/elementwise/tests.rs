//! Tests for the elementwise kernels against naive f64 loops.

use super::*;
use crate::host::kernels::testutil::{assert_close, back, rand_vec, to};
use crate::host::kernels::KernelError;
use half::{bf16, f16};
use rlx_ir::op::{ALL_ACTIVATIONS, ALL_BINARY_OPS};

/// Naive f64 activation, written from the textbook formulas.
fn naive_act(act: Activation, x: f32) -> f32 {
    let x = x as f64;
    let y = match act {
        Activation::Gelu => 0.5 * x * (1.0 + libm::erf(x / 2f64.sqrt())),
        Activation::GeluApprox => {
            0.5 * x
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
        }
        Activation::Silu => x * (1.0 / (1.0 + (-x).exp())),
        Activation::Relu => {
            if x.is_nan() {
                x
            } else {
                x.max(0.0)
            }
        }
        Activation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        Activation::Tanh => x.tanh(),
        Activation::Exp => x.exp(),
        Activation::Log => x.ln(),
        Activation::Sqrt => x.sqrt(),
        Activation::Rsqrt => 1.0 / x.sqrt(),
        Activation::Neg => -x,
        Activation::Abs => x.abs(),
        Activation::Sin => x.sin(),
        Activation::Cos => x.cos(),
        Activation::Tan => x.tan(),
        Activation::Atan => x.atan(),
        Activation::Round => {
            let r = x.round();
            if (x - x.trunc()).abs() == 0.5 {
                2.0 * (x / 2.0).round()
            } else {
                r
            }
        }
    };
    y as f32
}

fn naive_bin(op: BinaryOp, a: f32, b: f32) -> f32 {
    let (a, b) = (a as f64, b as f64);
    let y = match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Max | BinaryOp::Min if a.is_nan() || b.is_nan() => f64::NAN,
        BinaryOp::Max => a.max(b),
        BinaryOp::Min => a.min(b),
        BinaryOp::Pow => a.powf(b),
    };
    y as f32
}

fn act_inputs(act: Activation, n: usize) -> Vec<f32> {
    let mut v: Vec<f32> = rand_vec(n, 3).iter().map(|x| x * 4.0).collect();
    if matches!(act, Activation::Log | Activation::Sqrt | Activation::Rsqrt) {
        v.iter_mut().for_each(|x| *x = x.abs() + 0.01);
    }
    if act == Activation::Round {
        v.extend([0.5, 1.5, 2.5, -0.5, -2.5, 3.4999]);
    }
    v
}

#[test]
fn erf_is_accurate() {
    for &(x, want) in &[
        (0.5f64, 0.520_499_877_813_046_5),
        (1.0, 0.842_700_792_949_714_9),
        (-2.0, -0.995_322_265_018_952_7),
        (0.01, 0.011_283_415_555_849_6),
    ] {
        let got = erf(x as f32) as f64;
        assert!(((got - want) / want).abs() < 1e-7, "erf({x}) = {got}");
    }
}

#[test]
fn activations_match_naive_f32_and_f16() {
    for &act in &ALL_ACTIVATIONS {
        for &n in &[1usize, 3, 7, 13, 33, 70_001] {
            let x = act_inputs(act, n);
            let want: Vec<f32> = x.iter().map(|&v| naive_act(act, v)).collect();
            let mut out = vec![0f32; x.len()];
            unary(act, &x, &mut out, x.len()).unwrap();
            assert_close(&out, &want, 1e-5);
            let mut inplace = x.clone();
            unary_inplace(act, &mut inplace);
            assert_close(&inplace, &want, 1e-5);

            let xh: Vec<f16> = to(&x);
            let want_h: Vec<f32> = back(&xh).iter().map(|&v| naive_act(act, v)).collect();
            let mut oh = vec![f16::ZERO; x.len()];
            unary(act, &xh, &mut oh, x.len()).unwrap();
            assert_close(&back(&oh), &want_h, 1e-2);
        }
    }
}

#[test]
fn activations_propagate_nan_and_inf() {
    for &act in &ALL_ACTIVATIONS {
        let x = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
        let mut out = [0f32; 3];
        unary(act, &x, &mut out, 3).unwrap();
        assert!(out[0].is_nan(), "{act:?}(NaN) = {}", out[0]);
        for i in 1..3 {
            let want = naive_act(act, x[i]);
            assert!(
                (want.is_nan() && out[i].is_nan()) || want == out[i],
                "{act:?}({}) = {} want {want}",
                x[i],
                out[i]
            );
        }
    }
}

/// GELU (tanh form), SiLU and the sigmoid through the fused kernels' vector
/// loop (`act_f32`, here via `bias_act_inplace`) over their whole range:
/// within 1e-6 of the f64 formulas (relative above 1, absolute below), the
/// same bits as the scalar form, and the f64 results at ±inf, NaN and the
/// ends of `exp`'s range.
#[test]
fn vector_activations_match_f64_over_the_range() {
    let mut x: Vec<f32> = (-20_000..=20_000).map(|i| i as f32 * 0.005).collect();
    x.extend((-300..=300).map(|i| i as f32 * 0.5));
    x.extend([
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        88.72,
        88.73,
        -87.2,
        -87.4,
        -104.0,
        1e-30,
        -1e-30,
        0.0,
        -0.0,
        1e20,
        -1e20,
    ]);
    for act in [
        Activation::GeluApprox,
        Activation::Silu,
        Activation::Sigmoid,
    ] {
        let want: Vec<f32> = x.iter().map(|&v| naive_act(act, v)).collect();
        let mut got = x.clone();
        bias_act_inplace(&mut got, None, Some(act), 1, x.len()).unwrap();
        assert_close(&got, &want, 1e-6);
        for (i, (&g, &v)) in got.iter().zip(&x).enumerate() {
            let s = activate(act, v);
            assert!(
                g.to_bits() == s.to_bits() || (g.is_nan() && s.is_nan()),
                "{act:?}({v}) at {i}: vector {g}, scalar {s}"
            );
            let w = want[i];
            if !w.is_finite() || !v.is_finite() {
                assert!(
                    (w.is_nan() && g.is_nan()) || w == g,
                    "{act:?}({v}) = {g} want {w}"
                );
            }
        }
    }
}

#[test]
fn binary_dense_matches_naive_with_nan() {
    for &op in &ALL_BINARY_OPS {
        for &n in &[1usize, 3, 7, 13, 33, 40_000] {
            let a = rand_vec(n, 1);
            let mut b: Vec<f32> = rand_vec(n, 2).iter().map(|x| x + 1.5).collect();
            b[0] = f32::NAN;
            let want: Vec<f32> = a
                .iter()
                .zip(&b)
                .map(|(&x, &y)| naive_bin(op, x, y))
                .collect();
            let mut out = vec![0f32; n];
            binary(op, &a, &b, &mut out, n).unwrap();
            assert_close(&out, &want, 1e-5);
            assert!(out[0].is_nan(), "{op:?} dropped NaN");
        }
    }
}

/// Naive numpy broadcasting from shapes (not strides).
fn naive_broadcast(
    op: BinaryOp,
    a: &[f32],
    ad: &[usize],
    b: &[f32],
    bd: &[usize],
    od: &[usize],
) -> Vec<f32> {
    let n: usize = od.iter().product();
    let idx = |d: &[usize], coords: &[usize]| {
        let off = od.len() - d.len();
        let mut i = 0;
        for (k, &dk) in d.iter().enumerate() {
            i = i * dk + if dk == 1 { 0 } else { coords[off + k] };
        }
        i
    };
    (0..n)
        .map(|mut flat| {
            let mut coords = vec![0; od.len()];
            for k in (0..od.len()).rev() {
                coords[k] = flat % od[k];
                flat /= od[k];
            }
            naive_bin(op, a[idx(ad, &coords)], b[idx(bd, &coords)])
        })
        .collect()
}

fn strides_for(d: &[usize], od: &[usize]) -> Vec<usize> {
    let mut s = vec![0; od.len()];
    let off = od.len() - d.len();
    let mut acc = 1;
    for k in (0..d.len()).rev() {
        s[off + k] = if d[k] == 1 { 0 } else { acc };
        acc *= d[k];
    }
    s
}

#[test]
fn binary_broadcast_matches_naive() {
    let cases: &[(&[usize], &[usize], &[usize])] = &[
        (&[3, 7], &[7], &[3, 7]),
        (&[3, 1], &[1, 13], &[3, 13]),
        (&[1], &[33], &[33]),
        (&[2, 1, 5], &[3, 1], &[2, 3, 5]),
        (&[7, 1], &[1], &[7, 1]),
        (&[], &[], &[]),
        (&[200, 1], &[1, 333], &[200, 333]),
    ];
    for &(ad, bd, od) in cases {
        let a = rand_vec(ad.iter().product(), 5);
        let b = rand_vec(bd.iter().product(), 6);
        for &op in &[BinaryOp::Add, BinaryOp::Div, BinaryOp::Max] {
            let want = naive_broadcast(op, &a, ad, &b, bd, od);
            let (sa, sb) = (strides_for(ad, od), strides_for(bd, od));
            let bc = Broadcast {
                out_dims: od,
                lhs_strides: &sa,
                rhs_strides: &sb,
            };
            let mut out = vec![0f32; want.len()];
            binary_broadcast(op, None, &bc, &a, &b, &mut out).unwrap();
            assert_close(&out, &want, 1e-5);
            // Fused with an activation.
            binary_broadcast(op, Some(Activation::Tanh), &bc, &a, &b, &mut out).unwrap();
            let want_t: Vec<f32> = want
                .iter()
                .map(|&v| naive_act(Activation::Tanh, v))
                .collect();
            assert_close(&out, &want_t, 1e-5);
        }
    }
}

#[test]
fn broadcast_transposed_strides_and_short_operand() {
    // lhs read transposed: out[i, j] = a[j, i] + b[i, j].
    let (r, c) = (3, 5);
    let a = rand_vec(r * c, 8);
    let b = rand_vec(r * c, 9);
    let bc = Broadcast {
        out_dims: &[r, c],
        lhs_strides: &[1, r],
        rhs_strides: &[c, 1],
    };
    let mut out = vec![0f32; r * c];
    binary_broadcast(BinaryOp::Sub, None, &bc, &a, &b, &mut out).unwrap();
    for i in 0..r {
        for j in 0..c {
            assert_eq!(out[i * c + j], a[j * r + i] - b[i * c + j]);
        }
    }
    let err = binary_broadcast(BinaryOp::Add, None, &bc, &a[..4], &b, &mut out).unwrap_err();
    assert!(
        matches!(err, KernelError::Length { operand: "lhs", .. }),
        "{err}"
    );
}

#[test]
fn bias_add_binary_act_ternary_fma() {
    let (rows, n) = (7, 13);
    let x = rand_vec(rows * n, 1);
    let bias = rand_vec(n, 2);
    let mut out = vec![0f32; rows * n];
    bias_add(&x, &bias, &mut out, rows, n).unwrap();
    for r in 0..rows {
        for j in 0..n {
            assert_eq!(out[r * n + j], x[r * n + j] + bias[j]);
        }
    }
    for &m in &[1usize, 33, 5000] {
        let (a, b, c) = (rand_vec(m, 3), rand_vec(m, 4), rand_vec(m, 5));
        let mut o = vec![0f32; m];
        binary_act(BinaryOp::Mul, Activation::Silu, &a, &b, &mut o, m).unwrap();
        let want: Vec<f32> = (0..m)
            .map(|i| naive_act(Activation::Silu, a[i] * b[i]))
            .collect();
        assert_close(&o, &want, 1e-5);
        ternary(
            BinaryOp::Sub,
            BinaryOp::Mul,
            Some(Activation::Gelu),
            &a,
            &b,
            &c,
            &mut o,
            m,
        )
        .unwrap();
        let want: Vec<f32> = (0..m)
            .map(|i| naive_act(Activation::Gelu, (a[i] - b[i]) * c[i]))
            .collect();
        assert_close(&o, &want, 1e-5);
        fma(&a, &b, &c, &mut o, m).unwrap();
        let want: Vec<f32> = (0..m).map(|i| a[i] * b[i] + c[i]).collect();
        assert_close(&o, &want, 1e-6);
        // f16
        let (ah, bh, ch): (Vec<f16>, Vec<f16>, Vec<f16>) = (to(&a), to(&b), to(&c));
        let mut oh = vec![f16::ZERO; m];
        ternary(
            BinaryOp::Add,
            BinaryOp::Max,
            None,
            &ah,
            &bh,
            &ch,
            &mut oh,
            m,
        )
        .unwrap();
        let want: Vec<f32> = (0..m).map(|i| (a[i] + b[i]).max(c[i])).collect();
        assert_close(&back(&oh), &want, 1e-2);
    }
}

#[test]
fn compare_and_where_with_scalar_flags() {
    let a = [1.0f32, 2.0, f32::NAN, 4.0];
    let b = [2.0f32];
    let mut out = [9f32; 4];
    compare(CmpOp::Lt, &a, false, &b, true, &mut out, 4).unwrap();
    assert_eq!(out, [1.0, 0.0, 0.0, 0.0]);
    compare(CmpOp::Ne, &a, false, &b, true, &mut out, 4).unwrap();
    assert_eq!(out, [1.0, 0.0, 1.0, 1.0]);
    compare(CmpOp::Ge, &b, true, &a, false, &mut out, 4).unwrap();
    assert_eq!(out, [1.0, 1.0, 0.0, 0.0]);
    assert!(compare(CmpOp::Eq, &a, false, &b, false, &mut out, 4).is_err());

    let cond = [0.0f32, 1.0, -2.0, 0.0];
    where_select(&cond, &a, &b, [false, false, true], &mut out, 4).unwrap();
    assert_eq!(&out[..2], &[2.0, 2.0]);
    assert!(out[2].is_nan());
    assert_eq!(out[3], 2.0);
    where_select(&[1.0], &b, &a, [true, true, false], &mut out, 4).unwrap();
    assert_eq!(out, [2.0; 4]);
}

#[test]
fn swiglu_both_orders() {
    for &(rows, n) in &[(1usize, 1usize), (3, 7), (13, 33), (40, 1000)] {
        let x = rand_vec(rows * 2 * n, 7);
        let mut out = vec![0f32; rows * n];
        for gate_first in [false, true] {
            swiglu(&x, &mut out, rows, n, gate_first).unwrap();
            for r in 0..rows {
                for j in 0..n {
                    let (l, rr) = (x[r * 2 * n + j], x[r * 2 * n + n + j]);
                    let want = if gate_first {
                        naive_act(Activation::Silu, l) * rr
                    } else {
                        l * naive_act(Activation::Silu, rr)
                    };
                    assert!((out[r * n + j] - want).abs() < 1e-5);
                }
            }
        }
    }
}

#[test]
fn casts() {
    let x = [1.0f32, -2.5, 65504.0, 1e-8, f32::NAN, 0.1];
    let mut h = [f16::ZERO; 6];
    cast_f32_to_f16(&x, &mut h).unwrap();
    let mut back32 = [0f32; 6];
    cast_f16_to_f32(&h, &mut back32).unwrap();
    assert_eq!(&back32[..3], &x[..3]);
    assert!(back32[4].is_nan());
    assert!((back32[5] - 0.1).abs() < 1e-4);
    let mut b = [bf16::ZERO; 6];
    cast_f32_to_bf16(&x, &mut b).unwrap();
    assert_eq!(b[1].to_f32(), -2.5);
    let mut hb = [bf16::ZERO; 6];
    cast_float(&h, &mut hb).unwrap();
    assert_eq!(hb[0].to_f32(), 1.0);

    let f = [1.9f32, -1.9, 0.0, 300.7, -0.5];
    let mut i = [0i32; 5];
    cast_numeric(&f, &mut i).unwrap();
    assert_eq!(i, [1, -1, 0, 300, 0]);
    let mut u = [0u8; 5];
    cast_numeric(&i, &mut u).unwrap();
    assert_eq!(u, [1, 255, 0, 44, 0]);
    let mut bo = [Bool(7); 5];
    cast_numeric(&f, &mut bo).unwrap();
    assert_eq!(bo.map(|b| b.0), [1, 1, 0, 1, 1]);
    let mut d = [0f64; 5];
    cast_numeric(&bo, &mut d).unwrap();
    assert_eq!(d, [1.0, 1.0, 0.0, 1.0, 1.0]);
    let big = [i64::MAX];
    let mut bi = [0i64];
    cast_numeric(&big, &mut bi).unwrap();
    assert_eq!(bi, big, "int → int must not round-trip through f64");
    assert!(cast_numeric(&f, &mut [0i64; 2]).is_err());
}

#[test]
fn region_program_matches_step_by_step() {
    // exp(silu(x0·x1 + x2) − x3) over 3000 elements (several chunks), x2
    // periodic (13), x3 scalar, with an f16 rounding and a truncation step.
    let n = 3000;
    let x0 = rand_vec(n, 1);
    let x1 = rand_vec(n, 2);
    let x2 = rand_vec(13, 3);
    let steps = [
        RegionStep {
            op: RegionOp::Binary(BinaryOp::Mul),
            a: RegionArg::Input(0),
            b: RegionArg::Input(1),
        },
        RegionStep {
            op: RegionOp::Binary(BinaryOp::Add),
            a: RegionArg::Step(0),
            b: RegionArg::Input(2),
        },
        RegionStep {
            op: RegionOp::Unary(Activation::Silu),
            a: RegionArg::Step(1),
            b: RegionArg::Step(1),
        },
        RegionStep {
            op: RegionOp::Binary(BinaryOp::Sub),
            a: RegionArg::Step(2),
            b: RegionArg::Input(3),
        },
        RegionStep {
            op: RegionOp::Cast(RegionCast::F16),
            a: RegionArg::Step(3),
            b: RegionArg::Step(3),
        },
        RegionStep {
            op: RegionOp::Unary(Activation::Exp),
            a: RegionArg::Step(4),
            b: RegionArg::Step(4),
        },
        RegionStep {
            op: RegionOp::Cast(RegionCast::Trunc),
            a: RegionArg::Step(5),
            b: RegionArg::Step(5),
        },
    ];
    let inputs = [
        RegionInput::Dense(&x0),
        RegionInput::Dense(&x1),
        RegionInput::Periodic(&x2),
        RegionInput::Scalar(0.25),
    ];
    let mut out = vec![0f32; n];
    region(&steps, &inputs, &mut out).unwrap();
    for g in 0..n {
        let v = x0[g] * x1[g] + x2[g % 13];
        let v = f16::from_f32(silu(v) - 0.25).to_f32();
        assert_eq!(out[g], v.exp().trunc(), "element {g}");
    }
    // A step may only read earlier steps and existing inputs.
    let bad = [RegionStep {
        op: RegionOp::Unary(Activation::Exp),
        a: RegionArg::Step(0),
        b: RegionArg::Step(0),
    }];
    assert!(region(&bad, &inputs, &mut out).is_err());
    let bad_in = [RegionStep {
        op: RegionOp::Unary(Activation::Exp),
        a: RegionArg::Input(4),
        b: RegionArg::Input(4),
    }];
    assert!(region(&bad_in, &inputs, &mut out).is_err());
    assert!(region(&[], &inputs, &mut out).is_err());
}
