//! metal-sim vs host for the matmul and region families: graphs whose
//! matmuls compile to `FusedMmBiasAct`, `Sgemm` (also with an f16 weight)
//! and `BatchedSgemm` (shared operands too), elementwise chains that
//! `ir_elementwise_region` turns into regions (scalar and trailing
//! broadcast inputs), SwiGLU, and the same graphs with the fusions off
//! (bias add, binary / activation kernels).
//!
//! Tolerances: f32 `1e-4·(1 + |host|)` (the host's gemm sums k products
//! in another order and blocking); f16 `3e-2 + 2^-7·|host|` for matmuls
//! (the host's f16 gemm was seen 9 f16 ulps away from the kernel, which
//! accumulates in f32 and matches an f64 reference in tests/msl/matmul.rs,
//! at m = 1, k = 65), else those of `assert_same`.

use super::tests::{assert_close, assert_same, input, node, param};
use super::*;
use crate::compile::{compile_without, CompileOptions, Compiled};
use rlx_ir::op::{Activation, BinaryOp};
use rlx_ir::{DType, Graph, NodeId, Op};

fn bin(g: &mut Graph, kind: BinaryOp, a: NodeId, b: NodeId) -> NodeId {
    node(g, Op::Binary { kind }, &[a, b])
}

fn act(g: &mut Graph, kind: Activation, x: NodeId) -> NodeId {
    node(g, Op::Activation { kind }, &[x])
}

/// Compiles with the fusions named in `off` disabled.
fn compile(g: &Graph, off: &[&str]) -> Compiled {
    let off: Vec<String> = off.iter().map(|s| s.to_string()).collect();
    compile_without(g, &CompileOptions::default(), &off).unwrap_or_else(|e| panic!("{e}"))
}

/// Names of the dispatched thunks; asserts the plan has no host command.
fn dispatched(c: &Compiled, plan: &MetalPlan) -> Vec<&'static str> {
    let s = &c.schedule;
    assert_eq!(
        plan.stats().host,
        0,
        "host commands left:\n{plan}\nschedule:\n{s}"
    );
    plan.commands
        .iter()
        .filter_map(|cmd| match cmd {
            Command::Dispatch(d) => Some(c.schedule.thunks[d.thunk].name()),
            _ => None,
        })
        .collect()
}

fn check(c: &Compiled, plan: &MetalPlan, dt: DType) {
    let matmul = c
        .schedule
        .thunks
        .iter()
        .any(|t| t.name().contains("sgemm") || t.name() == "fused_mm_bias_act");
    match dt {
        DType::F16 if matmul => assert_close(c, plan, 3e-2, 1.0 / 128.0),
        DType::F16 => assert_same(c, plan, dt),
        _ => assert_close(c, plan, 1e-4, 1e-4),
    }
}

/// `act(x [rows, k] @ w [k, n] + bias [n])`.
fn mlp(dt: DType, rows: usize, k: usize, n: usize, a: Option<Activation>) -> Graph {
    let mut g = Graph::new("mlp");
    let x = input(&mut g, &[rows, k], dt);
    let w = param(&mut g, &[k, n], dt);
    let b = param(&mut g, &[n], dt);
    let mm = node(&mut g, Op::MatMul, &[x, w]);
    let mut y = bin(&mut g, BinaryOp::Add, mm, b);
    if let Some(a) = a {
        y = act(&mut g, a, y);
    }
    g.set_outputs(&[y]).unwrap();
    g
}

#[test]
fn matmul_bias_act_runs_as_one_fused_kernel() {
    for dt in [DType::F32, DType::F16] {
        for (rows, k, n, a) in [
            (1, 33, 65, Some(Activation::Gelu)),
            (7, 65, 33, Some(Activation::Relu)),
            (33, 7, 1, None),
        ] {
            let c = compile(&mlp(dt, rows, k, n, a), &[]);
            let plan = MetalPlan::build(&c.schedule);
            let names = dispatched(&c, &plan);
            assert!(names.contains(&"fused_mm_bias_act"), "{names:?}\n{plan}");
            // m = 1: gemv; m < 8: register tiles; else simdgroup matrices
            let kernel = match rows {
                1 => "gemv_",
                r if r < 8 => "gemm_f",
                _ => "gemm_sg_",
            };
            assert!(plan.to_string().contains(kernel), "{kernel}\n{plan}");
            check(&c, &plan, dt);
        }
    }
}

#[test]
fn unfused_matmul_bias_and_activation_kernels() {
    for dt in [DType::F32, DType::F16] {
        let g = mlp(dt, 7, 33, 65, Some(Activation::Silu));
        let c = compile(&g, &["ir_fuse_matmul_bias_act", "ir_elementwise_region"]);
        let plan = MetalPlan::build(&c.schedule);
        let names = dispatched(&c, &plan);
        assert!(names.contains(&"sgemm"), "{names:?}\n{plan}");
        assert!(!names.contains(&"fused_mm_bias_act"), "{names:?}");
        check(&c, &plan, dt);
    }
}

#[test]
fn sgemm_with_an_f16_weight_and_batched_matmuls() {
    // f32 x @ f16 w: Sgemm reading the weight as f16
    let mut g = Graph::new("w16");
    let x = input(&mut g, &[2, 7, 33], DType::F32);
    let w = param(&mut g, &[33, 9], DType::F16);
    let y = node(&mut g, Op::MatMul, &[x, w]);
    g.set_outputs(&[y]).unwrap();
    let c = compile(&g, &[]);
    let plan = MetalPlan::build(&c.schedule);
    assert!(dispatched(&c, &plan).contains(&"sgemm"));
    check(&c, &plan, DType::F32);
    // batched: both operands batched, and a shared lhs
    for dt in [DType::F32, DType::F16] {
        for (ad, bd) in [
            (vec![3, 7, 33], vec![3, 33, 5]),
            (vec![1, 65], vec![2, 65, 7]),
            (vec![7, 9], vec![2, 9, 33]),
        ] {
            let mut g = Graph::new("bmm");
            let a = input(&mut g, &ad, dt);
            let b = input(&mut g, &bd, dt);
            let y = node(&mut g, Op::MatMul, &[a, b]);
            g.set_outputs(&[y]).unwrap();
            let c = compile(&g, &[]);
            let plan = MetalPlan::build(&c.schedule);
            let names = dispatched(&c, &plan);
            assert!(names.contains(&"batched_sgemm"), "{ad:?} {bd:?}: {names:?}");
            check(&c, &plan, dt);
        }
    }
}

/// `sigmoid(max(tanh(x * s + b) - y, x))` with `s [1]` a scalar and
/// `b [h]` a trailing broadcast, over `[rows, h]`. (`b` is an input: a
/// param would be staged into the arena by an f32 → f32 cast, which has
/// no kernel, since region inputs live in the arena.)
fn chain(rows: usize, h: usize) -> Graph {
    let mut g = Graph::new("region");
    let x = input(&mut g, &[rows, h], DType::F32);
    let y = input(&mut g, &[rows, h], DType::F32);
    let s = input(&mut g, &[1], DType::F32);
    let b = input(&mut g, &[h], DType::F32);
    let t = bin(&mut g, BinaryOp::Mul, x, s);
    let t = bin(&mut g, BinaryOp::Add, t, b);
    let t = act(&mut g, Activation::Tanh, t);
    let t = bin(&mut g, BinaryOp::Sub, t, y);
    let t = bin(&mut g, BinaryOp::Max, t, x);
    let t = act(&mut g, Activation::Sigmoid, t);
    g.set_outputs(&[t]).unwrap();
    g
}

#[test]
fn elementwise_chains_run_as_region_kernels() {
    for (rows, h) in [(1, 1), (3, 37), (5, 300)] {
        let c = compile(&chain(rows, h), &[]);
        let plan = MetalPlan::build(&c.schedule);
        let names = dispatched(&c, &plan);
        assert_eq!(names, ["elementwise_region"], "{plan}");
        check(&c, &plan, DType::F32);
        // the same chain op by op
        let c = compile(&chain(rows, h), &["ir_elementwise_region"]);
        let plan = MetalPlan::build(&c.schedule);
        let names = dispatched(&c, &plan);
        assert!(
            names.len() >= 5 && !names.contains(&"elementwise_region"),
            "{names:?}"
        );
        check(&c, &plan, DType::F32);
    }
}

#[test]
fn swiglu_of_one_projection() {
    for dt in [DType::F32, DType::F16] {
        for gate_first in [true, false] {
            let (rows, nh) = (5, 33);
            let mut g = Graph::new("swiglu");
            let x = input(&mut g, &[rows, 2 * nh], dt);
            let narrow = |g: &mut Graph, start| {
                node(
                    g,
                    Op::Narrow {
                        axis: -1,
                        start,
                        len: nh,
                    },
                    &[x],
                )
            };
            let (g0, u0) = if gate_first { (0, nh) } else { (nh, 0) };
            let gate = narrow(&mut g, g0);
            let up = narrow(&mut g, u0);
            let s = act(&mut g, Activation::Silu, gate);
            let y = bin(&mut g, BinaryOp::Mul, s, up);
            g.set_outputs(&[y]).unwrap();
            let c = compile(&g, &[]);
            let plan = MetalPlan::build(&c.schedule);
            let names = dispatched(&c, &plan);
            assert!(names.contains(&"fused_swiglu"), "{names:?}\n{plan}");
            check(&c, &plan, dt);
        }
    }
}
