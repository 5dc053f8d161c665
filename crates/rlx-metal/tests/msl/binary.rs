//! binary.metal: every op, same-shape and broadcasting, f32 / f16.
//!
//! Tolerances: f32 `1e-6·|ref|` + 1e-7 (one f32 rounding of the f64 result;
//! pow goes through exp/log); f16 `2^-10·|ref|` + 1e-5. max / min must
//! propagate NaN like numpy.

use super::common::{assert_close, lib, uniform, Dt, DTS};
use msl_sim::Grid;
use rlx_ir::op::{BinaryOp, ALL_BINARY_OPS};
use rlx_metal::metal::args::{binary_code, BinaryArgs, BroadcastArgs, KernelArgs, MAX_RANK};
use rlx_metal::metal::kernels::Family;

/// f64 reference of a binary op (shared with the region tests).
pub fn reference(op: BinaryOp, a: f64, b: f64) -> f64 {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Max if a.is_nan() || b.is_nan() => f64::NAN,
        BinaryOp::Min if a.is_nan() || b.is_nan() => f64::NAN,
        BinaryOp::Max => a.max(b),
        BinaryOp::Min => a.min(b),
        BinaryOp::Pow => a.powf(b),
    }
}

/// Operands for an op: division away from zero, pow with positive bases
/// except where the exponent is an integer.
fn operands(op: BinaryOp, n: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let mut a = uniform(seed, n, -4.0, 4.0);
    let mut b = uniform(seed + 99, n, -4.0, 4.0);
    match op {
        BinaryOp::Div => {
            for v in &mut b {
                *v = if *v < 0.0 { *v - 0.5 } else { *v + 0.5 };
            }
        }
        BinaryOp::Pow => {
            for (i, (x, y)) in a.iter_mut().zip(&mut b).enumerate() {
                if i % 3 == 0 {
                    // negative base allowed with an integral exponent
                    *x = x.signum() * (x.abs() + 0.5);
                    *y = y.round();
                } else {
                    *x = x.abs() + 0.1;
                    *y *= 0.75;
                }
            }
        }
        BinaryOp::Max | BinaryOp::Min if n > 3 => {
            a[1] = f32::NAN;
            b[2] = f32::NAN;
        }
        _ => {}
    }
    (a, b)
}

fn tolerance(dt: Dt) -> (f64, f64) {
    match dt {
        Dt::F32 => (1e-7, 1e-6),
        Dt::F16 => (1e-5, 1.0 / 1024.0),
    }
}

#[test]
fn binary_full_matches_reference() {
    let lib = lib(Family::Binary);
    for dt in DTS {
        let kernel = format!("binary_{}", dt.suffix());
        let (atol, rtol) = tolerance(dt);
        for op in ALL_BINARY_OPS {
            for (k, n) in [1usize, 31, 33, 100, 1000].into_iter().enumerate() {
                let (a, b) = operands(op, n, 3 + k as u64);
                let (a, b) = (dt.round(&a), dt.round(&b));
                let args = BinaryArgs {
                    len: n as u32,
                    op: binary_code(op),
                };
                let (mut l, mut r) = (dt.encode(&a), dt.encode(&b));
                let mut d = vec![0u8; l.len()];
                let tpg = [32u32, 64, 96][k % 3];
                lib.dispatch(
                    &kernel,
                    args.as_bytes(),
                    &mut [&mut l, &mut r, &mut d],
                    Grid::d1((n as u32).div_ceil(tpg), tpg),
                    &[],
                )
                .unwrap_or_else(|e| panic!("{e}"));
                let want: Vec<f64> = a
                    .iter()
                    .zip(&b)
                    .map(|(&x, &y)| reference(op, x as f64, y as f64))
                    .collect();
                let what = format!("{kernel} {} n={n}", op.name());
                assert_close(&what, &dt.decode(&d), &want, atol, rtol);
            }
        }
    }
}

/// numpy broadcasting of `lhs` and `rhs` shapes: output dims and per-axis
/// element strides (0 on broadcast axes) of each input.
fn broadcast(lhs: &[u32], rhs: &[u32]) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let rank = lhs.len().max(rhs.len());
    let pad = |s: &[u32]| {
        let mut v = vec![1u32; rank - s.len()];
        v.extend_from_slice(s);
        v
    };
    let (l, r) = (pad(lhs), pad(rhs));
    let out: Vec<u32> = l.iter().zip(&r).map(|(&a, &b)| a.max(b)).collect();
    let strides = |s: &[u32]| {
        let mut st = vec![0u32; rank];
        let mut acc = 1u32;
        for k in (0..rank).rev() {
            st[k] = if s[k] == 1 { 0 } else { acc };
            acc *= s[k];
        }
        st
    };
    (out, strides(&l), strides(&r))
}

#[test]
fn binary_broadcast_matches_reference() {
    let lib = lib(Family::Binary);
    let cases: [(&[u32], &[u32]); 6] = [
        (&[2, 3, 4], &[4]),
        (&[5, 1], &[1, 7]),
        (&[1], &[33]),
        (&[2, 3, 5, 7], &[3, 1, 7]),
        (&[31, 1, 3], &[1, 11, 1]),
        (&[1, 1, 1, 1, 1, 2, 3, 5], &[5]),
    ];
    for dt in DTS {
        let kernel = format!("binary_broadcast_{}", dt.suffix());
        let (atol, rtol) = tolerance(dt);
        for op in ALL_BINARY_OPS {
            for (k, (ls, rs)) in cases.iter().enumerate() {
                let (out, lst, rst) = broadcast(ls, rs);
                let len: u32 = out.iter().product();
                let nl: usize = ls.iter().product::<u32>() as usize;
                let nr: usize = rs.iter().product::<u32>() as usize;
                let (a, _) = operands(op, nl, 40 + k as u64);
                let (_, b) = operands(op, nr, 80 + k as u64);
                let (a, b) = (dt.round(&a), dt.round(&b));
                let mut args = BroadcastArgs {
                    len,
                    op: binary_code(op),
                    rank: out.len() as u32,
                    ..Default::default()
                };
                args.out_dims[..out.len()].copy_from_slice(&out);
                args.lhs_strides[..out.len()].copy_from_slice(&lst);
                args.rhs_strides[..out.len()].copy_from_slice(&rst);
                assert!(out.len() <= MAX_RANK);
                let (mut l, mut r) = (dt.encode(&a), dt.encode(&b));
                let mut d = vec![0u8; len as usize * dt.encode(&[0.0]).len()];
                lib.dispatch(
                    &kernel,
                    args.as_bytes(),
                    &mut [&mut l, &mut r, &mut d],
                    Grid::d1(len.div_ceil(64), 64),
                    &[],
                )
                .unwrap_or_else(|e| panic!("{e}"));
                // reference: numpy indexing from the shapes (not the strides)
                let rank = out.len();
                let padded = |s: &[u32]| {
                    let mut v = vec![1u32; rank - s.len()];
                    v.extend_from_slice(s);
                    v
                };
                let (lp, rp) = (padded(ls), padded(rs));
                let index = |shape: &[u32], coord: &[u32]| {
                    shape
                        .iter()
                        .zip(coord)
                        .fold(0u32, |acc, (&d, &c)| acc * d + if d == 1 { 0 } else { c })
                        as usize
                };
                let want: Vec<f64> = (0..len)
                    .map(|g| {
                        let mut coord = vec![0u32; rank];
                        let mut rest = g;
                        for ax in (0..rank).rev() {
                            coord[ax] = rest % out[ax];
                            rest /= out[ax];
                        }
                        let (x, y) = (a[index(&lp, &coord)], b[index(&rp, &coord)]);
                        reference(op, x as f64, y as f64)
                    })
                    .collect();
                let what = format!("{kernel} {} {ls:?} vs {rs:?}", op.name());
                assert_close(&what, &dt.decode(&d), &want, atol, rtol);
            }
        }
    }
}
