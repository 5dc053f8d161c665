//! metal-sim vs host for `norm_fused.metal`: `x + r → LayerNorm` (fused
//! into FusedResidualLN) and `rms_norm(x) · silu(z)` (fused into
//! FusedRmsNormMulSilu, f32 only as the pass), and AdaLayerNorm →
//! GatedResidual with broadcast modulation rows, and GroupNorm, with `assert_same`'s
//! tolerances (f32 statistics vs the host's f64).

use super::tests::{assert_same, compiled, leaf, node};
use super::*;
use rlx_ir::op::{Activation, BinaryOp};
use rlx_ir::{DType, Graph, Op};

/// Compiles `g`, asserts thunk `kind` exists and is a NormFused dispatch.
fn check(g: &Graph, kind: &str, dt: DType) {
    let c = compiled(g);
    let plan = MetalPlan::build(&c.schedule);
    let idx: Vec<usize> = (c.schedule.thunks.iter().enumerate())
        .filter(|(_, t)| t.name() == kind)
        .map(|(i, _)| i)
        .collect();
    assert!(!idx.is_empty(), "no {kind} thunk in\n{}", c.schedule);
    for i in idx {
        let d = plan.commands.iter().any(|cmd| {
            matches!(cmd, Command::Dispatch(d) if d.thunk == i && d.kernel.family == Family::NormFused)
        });
        assert!(d, "thunk {i} ({kind}) is not a norm_fused dispatch\n{plan}");
    }
    assert_eq!(plan.stats().host, 0, "{plan}");
    assert_same(&c, &plan, dt);
}

#[test]
fn residual_layer_norm_matches_host() {
    for dt in [DType::F32, DType::F16] {
        for (rows, h) in [(3, 37), (2, 1000)] {
            let mut g = Graph::new("res_ln");
            let x = leaf(&mut g, &[rows, h], dt, false);
            let r = leaf(&mut g, &[rows, h], dt, false);
            let gm = leaf(&mut g, &[h], dt, true);
            let bt = leaf(&mut g, &[h], dt, true);
            let add = Op::Binary {
                kind: BinaryOp::Add,
            };
            let s = node(&mut g, add, &[x, r]);
            let n = node(&mut g, Op::LayerNorm { eps: 1e-5 }, &[s, gm, bt]);
            g.set_outputs(&[n]).unwrap();
            check(&g, "fused_residual_ln", dt);
        }
    }
}

#[test]
fn gated_rms_norm_matches_host() {
    for (rows, h) in [(3, 37), (2, 300)] {
        let dt = DType::F32;
        let mut g = Graph::new("gdn");
        let x = leaf(&mut g, &[rows, h], dt, false);
        let z = leaf(&mut g, &[rows, h], dt, false);
        let gm = leaf(&mut g, &[h], dt, true);
        let n = node(&mut g, Op::RmsNorm { eps: 1e-6 }, &[x, gm]);
        let act = Op::Activation {
            kind: Activation::Silu,
        };
        let s = node(&mut g, act, &[z]);
        let mul = Op::Binary {
            kind: BinaryOp::Mul,
        };
        let o = node(&mut g, mul, &[n, s]);
        // x and z stay live (read again afterwards), so no thunk of the
        // chain reuses their bytes and the pass may fuse it
        let neg = Op::Activation {
            kind: Activation::Neg,
        };
        let xz = node(
            &mut g,
            Op::Binary {
                kind: BinaryOp::Sub,
            },
            &[x, z],
        );
        let xz = node(&mut g, neg, &[xz]);
        g.set_outputs(&[o, xz]).unwrap();
        check(&g, "fused_rms_norm_mul_silu", dt);
    }
}

#[test]
fn ada_layer_norm_and_gated_residual_match_host() {
    // modulation [2, 1, h] broadcast over x [2, 3, h], and [2, 3, h] as is
    for dt in [DType::F32, DType::F16] {
        for (mid, layer_norm) in [(1, true), (3, false)] {
            let h = 37;
            let mut g = Graph::new("dit");
            let x = leaf(&mut g, &[2, 3, h], dt, false);
            let y = leaf(&mut g, &[2, 3, h], dt, false);
            let sc = leaf(&mut g, &[2, mid, h], dt, true);
            let sh = leaf(&mut g, &[2, mid, h], dt, true);
            let op = Op::AdaLayerNorm {
                eps: 1e-6,
                layer_norm,
            };
            let n = node(&mut g, op, &[x, sc, sh]);
            let o = node(&mut g, Op::GatedResidual, &[n, y, sc]);
            g.set_outputs(&[o]).unwrap();
            check(&g, "ada_layer_norm", dt);
            check(&g, "gated_residual", dt);
        }
    }
}

#[test]
fn group_norm_matches_host() {
    for dt in [DType::F32, DType::F16] {
        let mut g = Graph::new("gn");
        let x = leaf(&mut g, &[2, 6, 5, 7], dt, false);
        let gm = leaf(&mut g, &[6], dt, true);
        let bt = leaf(&mut g, &[6], dt, true);
        let op = Op::GroupNorm {
            num_groups: 3,
            eps: 1e-5,
        };
        let o = node(&mut g, op, &[x, gm, bt]);
        g.set_outputs(&[o]).unwrap();
        check(&g, "group_norm", dt);
    }
}
