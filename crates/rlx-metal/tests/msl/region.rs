//! region.metal: the region interpreter (every step kind and code, scalar
//! and modulus inputs, the longest chain over the most inputs, batched
//! slices with a strided output), fused binary / ternary activations, fma,
//! compare, where and SwiGLU.
//!
//! Reference: f64 evaluation of the same chain from the kernel's exact
//! inputs (cast steps round an input, so f16 / bf16 / trunc are exact).
//! Tolerances: f32 `1e-5 + 1e-5·|ref|` for short chains (f32 math, exp /
//! log / pow within a few ulps, exact GELU's erf within 1.5e-7), `1e-4 +
//! 1e-4·|ref|` for the 32-step chain (32 roundings of bounded values);
//! f16 results `1e-4 + 2^-10·|ref|` (one rounding to f16). Compare, where
//! and the cast steps are exact.

use super::binary::reference as bin_ref;
use super::common::{assert_close, lib, uniform, Dt, DTS};
use super::elementwise::{inputs as act_inputs, reference as act_ref};
use msl_sim::Grid;
use rlx_ir::op::{Activation, BinaryOp, CmpOp, ALL_ACTIVATIONS, ALL_BINARY_OPS};
use rlx_metal::metal::args::{
    act_code, binary_code, cmp_code, CompareArgs, FusedActArgs, KernelArgs, RegionArgs, SwigluArgs,
    WhereArgs,
};
use rlx_metal::metal::kernels::Family;
use rlx_metal::thunk::region::STEP_OPERAND;

/// A step operand naming an earlier step.
const fn st(s: u32) -> u32 {
    STEP_OPERAND | s
}

/// How a region input is read.
#[derive(Clone, Copy)]
enum In {
    Dense,
    Scalar,
    Modulus(u32),
}

/// f64 evaluation of `chain` at element `g` of slice `slice`.
fn eval(chain: &[[u32; 4]], ins: &[Vec<f32>], kinds: &[In], g: usize) -> f64 {
    let load = |i: usize| -> f64 {
        let idx = match kinds[i] {
            In::Dense => g,
            In::Scalar => 0,
            In::Modulus(m) => g % m as usize,
        };
        ins[i][idx] as f64
    };
    let mut regs: Vec<f64> = Vec::new();
    for &[kind, sub, a, b] in chain {
        let opnd = |w: u32| {
            if w & STEP_OPERAND != 0 {
                regs[(w & !STEP_OPERAND) as usize]
            } else {
                load(w as usize)
            }
        };
        let x = opnd(a);
        let v = match kind {
            0 => act_ref(ALL_ACTIVATIONS[sub as usize], x),
            1 => match sub {
                1 => half::f16::from_f64(x).to_f64(),
                2 => half::bf16::from_f64(x).to_f64(),
                3 => x.trunc(),
                _ => x,
            },
            _ => bin_ref(ALL_BINARY_OPS[sub as usize], x, opnd(b)),
        };
        regs.push(v);
    }
    regs[regs.len() - 1]
}

/// Runs `chain` over `slices` slices of `len` elements (output stride
/// `stride`) with per-slice inputs `ins[s][i]`; returns the output slices.
fn run_region(
    chain: &[[u32; 4]],
    ins: &[Vec<Vec<f32>>],
    kinds: &[In],
    len: u32,
    stride: u32,
) -> Vec<f32> {
    let slices = ins.len();
    let n_in = kinds.len();
    let mut args = RegionArgs {
        slice_len: len,
        num_batch: slices as u32,
        num_steps: chain.len() as u32,
        n_in: n_in as u32,
        slice_elems: stride,
        ..Default::default()
    };
    for (i, k) in kinds.iter().enumerate() {
        match *k {
            In::Scalar => args.scalar_mask |= 1 << i,
            In::Modulus(m) => args.modulus[i] = m,
            In::Dense => {}
        }
    }
    for (s, step) in chain.iter().enumerate() {
        args.chain[4 * s..4 * s + 4].copy_from_slice(step);
    }
    // the arena: a few guard floats, then every input of every slice
    let mut arena = vec![f32::NAN; 3];
    for (s, slice) in ins.iter().enumerate() {
        for (i, x) in slice.iter().enumerate() {
            args.input_offs[s * n_in + i] = arena.len() as u32;
            arena.extend_from_slice(x);
        }
    }
    let mut ab = Dt::F32.encode(&arena);
    let mut out = Dt::F32.encode(&vec![-7.0; slices * stride as usize]);
    lib(Family::Region)
        .dispatch(
            "region_f32",
            args.as_bytes(),
            &mut [&mut ab, &mut out],
            Grid {
                groups: [len.div_ceil(64), slices as u32, 1],
                threads: [64, 1, 1],
            },
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
    Dt::F32.decode(&out)
}

/// Inputs of one slice: dense ones `len` long, scalars 1, modulus `m`.
fn slice_inputs(kinds: &[In], len: usize, seed: u64, lo: f32, hi: f32) -> Vec<Vec<f32>> {
    kinds
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let n = match *k {
                In::Dense => len,
                In::Scalar => 1,
                In::Modulus(m) => m as usize,
            };
            uniform(seed * 31 + i as u64, n, lo, hi)
        })
        .collect()
}

fn check_region(
    what: &str,
    chain: &[[u32; 4]],
    ins: Vec<Vec<f32>>,
    kinds: &[In],
    len: u32,
    tol: f64,
) {
    let got = run_region(chain, std::slice::from_ref(&ins), kinds, len, len);
    let want: Vec<f64> = (0..len as usize)
        .map(|g| eval(chain, &ins, kinds, g))
        .collect();
    assert_close(what, &got, &want, tol, tol);
}

#[test]
fn region_every_step_kind_with_scalar_and_modulus_inputs() {
    let kinds = [In::Dense, In::Scalar, In::Modulus(7)];
    for len in [1u32, 33, 300] {
        for a in ALL_ACTIVATIONS {
            // act(in0) then add the scalar, times the modulus input
            let chain = [[0, act_code(a), 0, 0], [2, 0, st(0), 1], [2, 2, st(1), 2]];
            let mut ins = slice_inputs(&kinds, len as usize, len as u64, -1.0, 1.0);
            ins[0] = act_inputs(a, len as usize, 3);
            check_region(
                &format!("region {} len={len}", a.name()),
                &chain,
                ins,
                &kinds,
                len,
                1e-5,
            );
        }
        for op in ALL_BINARY_OPS {
            // op(in0, modulus input), then op(scalar, step 0)
            let chain = [[2, binary_code(op), 0, 2], [2, binary_code(op), 1, st(0)]];
            let ins = slice_inputs(&kinds, len as usize, 5, 0.5, 1.5);
            check_region(
                &format!("region {} len={len}", op.name()),
                &chain,
                ins,
                &kinds,
                len,
                1e-5,
            );
        }
        for sub in 0..4 {
            // cast(in0) - in0: exposes the rounding exactly
            let chain = [[1, sub, 0, 0], [2, 1, st(0), 0]];
            let mut ins = slice_inputs(&kinds, len as usize, 9, -1.0, 1.0);
            ins[0] = uniform(11, len as usize, -300.0, 300.0);
            check_region(
                &format!("region cast {sub} len={len}"),
                &chain,
                ins,
                &kinds,
                len,
                0.0,
            );
        }
    }
}

#[test]
fn region_longest_chain_over_sixteen_inputs() {
    let mut kinds = [In::Dense; 16];
    kinds[3] = In::Scalar;
    kinds[9] = In::Scalar;
    kinds[5] = In::Modulus(5);
    kinds[12] = In::Modulus(33);
    let mut chain = vec![[2, 0, 0, 1]];
    for s in 1..32u32 {
        chain.push(match s % 4 {
            0 => [0, act_code(Activation::Tanh), st(s - 1), 0],
            1 => [2, binary_code(BinaryOp::Mul), st(s - 1), s % 16],
            2 => [2, binary_code(BinaryOp::Add), (s * 7) % 16, st(s - 1)],
            _ => [2, binary_code(BinaryOp::Max), st(s - 1), st(s - 3)],
        });
    }
    for len in [1u32, 65, 257] {
        let ins = slice_inputs(&kinds, len as usize, 17, -1.0, 1.0);
        check_region(
            &format!("32-step chain len={len}"),
            &chain,
            ins,
            &kinds,
            len,
            1e-4,
        );
    }
}

#[test]
fn batched_region_slices_with_strided_output() {
    let kinds = [In::Dense, In::Scalar, In::Modulus(4)];
    let chain = [
        [2, binary_code(BinaryOp::Sub), 0, 1],
        [0, act_code(Activation::Silu), st(0), 0],
        [2, binary_code(BinaryOp::Mul), st(1), 2],
    ];
    let (len, stride) = (37u32, 40u32);
    let ins: Vec<Vec<Vec<f32>>> = (0..3)
        .map(|s| slice_inputs(&kinds, len as usize, 40 + s, -2.0, 2.0))
        .collect();
    let got = run_region(&chain, &ins, &kinds, len, stride);
    for (s, slice) in ins.iter().enumerate() {
        let base = s * stride as usize;
        let want: Vec<f64> = (0..len as usize)
            .map(|g| eval(&chain, slice, &kinds, g))
            .collect();
        assert_close(
            &format!("slice {s}"),
            &got[base..base + len as usize],
            &want,
            1e-5,
            1e-5,
        );
        // the gap between slices is not written
        assert!(got[base + len as usize..base + stride as usize]
            .iter()
            .all(|&v| v == -7.0));
    }
}

fn tol(dt: Dt) -> (f64, f64) {
    match dt {
        Dt::F32 => (1e-5, 1e-5),
        Dt::F16 => (1e-4, 1.0 / 1024.0),
    }
}

fn dispatch(kernel: &str, args: &[u8], bufs: &mut [&mut [u8]], len: u32) {
    lib(Family::Region)
        .dispatch(kernel, args, bufs, Grid::d1(len.div_ceil(64), 64), &[])
        .unwrap_or_else(|e| panic!("{kernel}: {e}"));
}

#[test]
fn binary_and_ternary_activation_and_fma() {
    let acts = [
        Activation::Relu,
        Activation::Silu,
        Activation::Tanh,
        Activation::Gelu,
    ];
    for dt in DTS {
        let (atol, rtol) = tol(dt);
        for len in [1u32, 33, 300] {
            for (o, op) in ALL_BINARY_OPS.into_iter().enumerate() {
                let act = acts[o % acts.len()];
                let op1 = ALL_BINARY_OPS[(o + 2) % 4];
                let x = dt.round(&uniform(o as u64, len as usize, 0.5, 1.5));
                let y = dt.round(&uniform(o as u64 + 1, len as usize, 0.5, 1.5));
                let z = dt.round(&uniform(o as u64 + 2, len as usize, -1.0, 1.0));
                let bin = |i: usize| bin_ref(op, x[i] as f64, y[i] as f64);
                let out_len = len as usize * if dt == Dt::F32 { 4 } else { 2 };
                let mut bufs = [
                    dt.encode(&x),
                    dt.encode(&y),
                    dt.encode(&z),
                    vec![0u8; out_len],
                ];
                let [xb, yb, zb, ob] = &mut bufs;
                let mut args = FusedActArgs {
                    len,
                    op0: binary_code(op),
                    op1: binary_code(op1),
                    has_act: 1,
                    act: act_code(act),
                };
                let k = format!("binary_act_{}", dt.suffix());
                dispatch(
                    &k,
                    args.as_bytes(),
                    &mut [&mut xb[..], &mut yb[..], &mut ob[..]],
                    len,
                );
                let want: Vec<f64> = (0..len as usize).map(|i| act_ref(act, bin(i))).collect();
                assert_close(
                    &format!("{k} {}", op.name()),
                    &dt.decode(ob),
                    &want,
                    atol,
                    rtol,
                );
                let k = format!("ternary_act_{}", dt.suffix());
                for has_act in [1, 0] {
                    args.has_act = has_act;
                    dispatch(
                        &k,
                        args.as_bytes(),
                        &mut [&mut xb[..], &mut yb[..], &mut zb[..], &mut ob[..]],
                        len,
                    );
                    let want: Vec<f64> = (0..len as usize)
                        .map(|i| {
                            let v = bin_ref(op1, bin(i), z[i] as f64);
                            if has_act == 1 {
                                act_ref(act, v)
                            } else {
                                v
                            }
                        })
                        .collect();
                    let what = format!("{k} {} {} act={has_act}", op.name(), op1.name());
                    assert_close(&what, &dt.decode(ob), &want, atol, rtol);
                }
            }
        }
    }
}

#[test]
fn compare_and_where_with_scalar_operands() {
    let len = 70u32;
    // small integers make ties common; one NaN compares false (true for ne)
    let mut x: Vec<f32> = uniform(1, len as usize, -3.0, 3.0)
        .iter()
        .map(|v| v.round())
        .collect();
    let y: Vec<f32> = uniform(2, len as usize, -3.0, 3.0)
        .iter()
        .map(|v| v.round())
        .collect();
    x[5] = f32::NAN;
    let ops = [
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Ge,
    ];
    for op in ops {
        for (ls, rs) in [(false, false), (true, false), (false, true)] {
            let (mut xb, mut yb) = (Dt::F32.encode(&x), Dt::F32.encode(&y));
            let mut out = vec![0u8; len as usize * 4];
            let args = CompareArgs {
                len,
                op: cmp_code(op),
                lhs_scalar: ls as u32,
                rhs_scalar: rs as u32,
            };
            dispatch(
                "compare_f32",
                args.as_bytes(),
                &mut [&mut xb, &mut yb, &mut out],
                len,
            );
            let want: Vec<f64> = (0..len as usize)
                .map(|i| {
                    let a = x[if ls { 0 } else { i }];
                    let b = y[if rs { 0 } else { i }];
                    let hit = match op {
                        CmpOp::Eq => a == b,
                        CmpOp::Ne => a != b,
                        CmpOp::Lt => a < b,
                        CmpOp::Le => a <= b,
                        CmpOp::Gt => a > b,
                        CmpOp::Ge => a >= b,
                    };
                    hit as u32 as f64
                })
                .collect();
            let what = format!("compare {} scalars {ls}/{rs}", op.name());
            assert_close(&what, &Dt::F32.decode(&out), &want, 0.0, 0.0);
        }
    }
    let cond: Vec<f32> = (0..len)
        .map(|i| [0.0, 1.0, -2.0, 0.0, f32::NAN][i as usize % 5])
        .collect();
    for flags in 0..8u32 {
        let sc = |b: u32| flags & (1 << b) != 0;
        let (mut cb, mut tb, mut fb) = (
            Dt::F32.encode(&cond),
            Dt::F32.encode(&x),
            Dt::F32.encode(&y),
        );
        let mut out = vec![0u8; len as usize * 4];
        let args = WhereArgs {
            len,
            cond_scalar: sc(0) as u32,
            true_scalar: sc(1) as u32,
            false_scalar: sc(2) as u32,
        };
        dispatch(
            "where_f32",
            args.as_bytes(),
            &mut [&mut cb, &mut tb, &mut fb, &mut out],
            len,
        );
        let pick = |v: &[f32], s: bool, i: usize| v[if s { 0 } else { i }] as f64;
        let want: Vec<f64> = (0..len as usize)
            .map(|i| {
                if pick(&cond, sc(0), i) != 0.0 {
                    pick(&x, sc(1), i)
                } else {
                    pick(&y, sc(2), i)
                }
            })
            .collect();
        assert_close(
            &format!("where flags={flags:03b}"),
            &Dt::F32.decode(&out),
            &want,
            0.0,
            0.0,
        );
    }
}

#[test]
fn swiglu_both_gate_orders() {
    for dt in DTS {
        let (atol, rtol) = tol(dt);
        for (rows, nh) in [(1u32, 1u32), (3, 33), (2, 100)] {
            for gate_first in [false, true] {
                let total = rows * nh;
                let x = dt.round(&uniform(rows as u64, 2 * total as usize, -4.0, 4.0));
                let mut xb = dt.encode(&x);
                let mut out = vec![0u8; total as usize * if dt == Dt::F32 { 4 } else { 2 }];
                let args = SwigluArgs {
                    total,
                    n_half: nh,
                    gate_first: gate_first as u32,
                };
                let k = format!("swiglu_{}", dt.suffix());
                dispatch(&k, args.as_bytes(), &mut [&mut xb, &mut out], total);
                let (nh, mut want) = (nh as usize, Vec::new());
                for r in 0..rows as usize {
                    for j in 0..nh {
                        let (l, rr) = (x[r * 2 * nh + j] as f64, x[r * 2 * nh + nh + j] as f64);
                        let (v, g) = if gate_first { (rr, l) } else { (l, rr) };
                        want.push(v * g / (1.0 + (-g).exp()));
                    }
                }
                let what = format!("{k} rows={rows} n_half={nh} gate_first={gate_first}");
                assert_close(&what, &dt.decode(&out), &want, atol, rtol);
            }
        }
    }
}
