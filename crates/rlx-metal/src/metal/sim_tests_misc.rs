//! metal-sim vs host for `rng.metal`, `vq.metal`, `axial_rope2d_f32` and `spd.metal`:
//! the fills and the assignments must be bit-identical (same Philox words,
//! same f32 operation order), axial RoPE within `assert_same`'s f32
//! tolerance (the host evaluates cos / sin in f64); the `re_eig` /
//! `log_eig` gradients of `spd.metal` (f32 Jacobi) within `5e-5·max|host|
//! + 1e-4·|host|` of the host's f64 eigendecomposition.

use super::tests::{assert_same, compiled, node, run_host, run_sim};
use super::*;
use rlx_ir::op::VqMetric;
use rlx_ir::{DType, Graph, Op, Shape};

/// The plan runs `kernel` for the graph's only thunk and no host command.
fn only_dispatch(plan: &MetalPlan, family: Family) {
    let mut kinds = plan.commands.iter().filter_map(|c| match c {
        Command::Dispatch(d) => Some(d.kernel.family),
        _ => None,
    });
    assert!(kinds.any(|f| f == family), "{plan}");
    assert!(
        !plan
            .commands
            .iter()
            .any(|c| matches!(c, Command::Host { .. })),
        "{plan}"
    );
}

fn bits_equal(c: &crate::compile::Compiled, plan: &MetalPlan) {
    let host = run_host(c);
    let sim = run_sim(c, plan);
    for (h, s) in host.iter().zip(&sim) {
        let hb: Vec<u32> = h.iter().map(|v| v.to_bits()).collect();
        let sb: Vec<u32> = s.iter().map(|v| v.to_bits()).collect();
        assert_eq!(hb, sb);
    }
}

#[test]
fn rng_fills_are_bit_identical() {
    for n in [1usize, 5, 4099] {
        let mut g = Graph::new("rng");
        let u = node(
            &mut g,
            Op::RngUniform {
                dims: vec![n.into()],
                low: -2.0,
                high: 3.0,
                seed: Some(0xDEAD_BEEF_0123),
            },
            &[],
        );
        let z = node(
            &mut g,
            Op::RngNormal {
                dims: vec![n.into()],
                mean: 1.0,
                scale: 0.25,
                seed: None,
            },
            &[],
        );
        g.set_outputs(&[u, z]).unwrap();
        let c = compiled(&g);
        let plan = MetalPlan::build(&c.schedule);
        only_dispatch(&plan, Family::Rng);
        bits_equal(&c, &plan);
    }
}

#[test]
fn vq_assign_is_identical() {
    for metric in [VqMetric::L2, VqMetric::Dot, VqMetric::Cosine] {
        for (n, d, k) in [(1, 1, 1), (13, 5, 7), (9, 33, 130)] {
            let mut g = Graph::new("vq");
            let f32s = |d: &[usize]| Shape::of(d, DType::F32);
            let x = node(
                &mut g,
                Op::Input {
                    shape: f32s(&[n, d]),
                },
                &[],
            );
            let cb = node(
                &mut g,
                Op::Param {
                    shape: f32s(&[k, d]),
                },
                &[],
            );
            let y = node(&mut g, Op::VqAssign { metric }, &[x, cb]);
            g.set_outputs(&[y]).unwrap();
            let c = compiled(&g);
            let plan = MetalPlan::build(&c.schedule);
            only_dispatch(&plan, Family::Vq);
            bits_equal(&c, &plan);
        }
    }
}

#[test]
fn axial_rope2d_matches_host() {
    for (b, s, heads, hd, ex, ey, rep) in [(1, 16, 2, 8, 4, 4, 1), (2, 12, 3, 4, 3, 2, 2)] {
        let mut g = Graph::new("axial");
        let x = node(
            &mut g,
            Op::Input {
                shape: Shape::of(&[b, s, heads * hd], DType::F32),
            },
            &[],
        );
        let op = Op::AxialRope2d {
            end_x: ex,
            end_y: ey,
            head_dim: hd,
            num_heads: heads,
            theta: 100.0,
            repeat_factor: rep,
        };
        let y = node(&mut g, op, &[x]);
        g.set_outputs(&[y]).unwrap();
        let c = compiled(&g);
        let plan = MetalPlan::build(&c.schedule);
        only_dispatch(&plan, Family::Rope);
        assert_same(&c, &plan, DType::F32);
    }
}

/// SPD matrices `[batch, n, n]` as f32 bytes: `Q diag(λ) Qᵀ`, `Q` the
/// orthogonal factor of a deterministic matrix, `λ = 0.3, 0.75, 1.2, ..`.
fn spd_bytes(batch: usize, n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(batch * n * n * 4);
    for b in 0..batch {
        let m = nalgebra::DMatrix::from_fn(n, n, |i, j| {
            (((b * 31 + i * 7 + j * 3) % 11) as f64 - 5.0) / 5.0 + if i == j { 2.0 } else { 0.0 }
        });
        let q = m.qr().q();
        let lam = nalgebra::DVector::from_fn(n, |k, _| 0.3 + 0.45 * k as f64);
        let x = &q * nalgebra::DMatrix::from_diagonal(&lam) * q.transpose();
        for i in 0..n {
            for j in 0..n {
                out.extend((x[(i, j)] as f32).to_le_bytes());
            }
        }
    }
    out
}

#[test]
fn spd_eig_backward_runs_on_the_gpu() {
    use rlx_ir::op::SpdOp;
    // eps 0.9 lies between eigenvalues 0.75 and 1.2 (re_eig's floor)
    for (kind, eps) in [(SpdOp::LogEig, 1e-4), (SpdOp::ReEig, 0.9)] {
        for (batch, n) in [(1usize, 1usize), (3, 5), (2, 16)] {
            let mut g = Graph::new("spd_bwd");
            let f32s = |d: &[usize]| Shape::of(d, DType::F32);
            let x = node(
                &mut g,
                Op::Param {
                    shape: f32s(&[batch, n, n]),
                },
                &[],
            );
            let dy = node(
                &mut g,
                Op::Input {
                    shape: f32s(&[batch, n, n]),
                },
                &[],
            );
            let y = node(&mut g, Op::SpdBackward { kind, eps }, &[x, dy]);
            g.set_outputs(&[y]).unwrap();
            let c = compiled(&g);
            let plan = MetalPlan::build(&c.schedule);
            only_dispatch(&plan, Family::Spd);
            let bufs = || super::tests::fill_params(&c, |_, _| spd_bytes(batch, n));
            let host = super::tests::run_host_on(&c, bufs());
            let sim = super::tests::run_sim_on(&c, &plan, bufs());
            let big = host[0].iter().fold(0.0f32, |a, v| a.max(v.abs()));
            // (re_eig of the 1×1 [0.3] is below the floor: gradient 0)
            assert!(big > 0.1 || n == 1, "{:?}", host[0]);
            for (k, (h, s)) in host[0].iter().zip(&sim[0]).enumerate() {
                let tol = 5e-5 * big + 1e-4 * h.abs();
                assert!(
                    (h - s).abs() <= tol,
                    "{kind:?} n {n} [{k}]: host {h}, sim {s}"
                );
            }
        }
    }
}
