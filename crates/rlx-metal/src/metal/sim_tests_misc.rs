//! metal-sim vs host for `rng.metal`, `vq.metal` and `axial_rope2d_f32`
//! (`spd.metal`: `sim_tests_spd.rs`): the fills and the assignments must be
//! bit-identical (same Philox words, same f32 operation order), axial RoPE
//! within `assert_same`'s f32 tolerance (the host evaluates cos / sin in
//! f64).

use super::tests::{assert_same, compiled, node, run_host, run_sim};
use super::*;
use rlx_ir::op::VqMetric;
use rlx_ir::{DType, Graph, Op, Shape};

/// The plan runs `kernel` for the graph's only thunk and no host command.
pub(super) fn only_dispatch(plan: &MetalPlan, family: Family) {
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
