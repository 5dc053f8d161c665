//! metal-sim vs host for `rng.metal`, `vq.metal`, `axial_rope2d_f32` and
//! the `cast_host_*` kernels of `elementwise.metal` (`spd.metal`:
//! `sim_tests_spd.rs`): the fills, the assignments and the casts must be
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

/// Params of a cast graph, in declaration order: bool bytes (0 / 1 and a
/// non-canonical 0xff), i32 values past f32's 2^24, f32 values with NaN,
/// ±inf, halves and values past i32 / u8's ranges.
fn cast_param_bytes(i: usize, n: usize) -> Vec<u8> {
    let w = super::tests::uniform(40 + i as u64, n, 0.0, 1.0);
    match i {
        0 => w
            .iter()
            .map(|&u| [0u8, 1, 1, 0xff][(u * 4.0) as usize])
            .collect(),
        1 => w
            .iter()
            .enumerate()
            .flat_map(|(k, &u)| {
                let v = if k % 2 == 0 {
                    ((u - 0.5) * 1e9) as i32
                } else {
                    (1 << 24) + 1 + 2 * k as i32
                };
                v.to_le_bytes()
            })
            .collect(),
        _ => {
            let edges = [
                f32::NAN,
                f32::INFINITY,
                f32::NEG_INFINITY,
                -0.0,
                2.5,
                -2.5,
                3e9,
                -3e9,
                255.5,
                -0.5,
            ];
            w.iter()
                .enumerate()
                .flat_map(|(k, &u)| {
                    edges
                        .get(k)
                        .copied()
                        .unwrap_or((u - 0.5) * 700.0)
                        .to_le_bytes()
                })
                .collect()
        }
    }
}

/// A mask (bool → f32), index arithmetic (i32 → f32, f32 → i32 → f32) and
/// f32 → u8 → f16 run as `cast_host_*` dispatches, no host command, and
/// give the host's outputs bit for bit.
#[test]
fn numeric_casts_run_as_dispatches() {
    let n = 1037usize;
    let mut g = Graph::new("casts");
    let p = |g: &mut Graph, dt| {
        node(
            g,
            Op::Param {
                shape: Shape::of(&[n], dt),
            },
            &[],
        )
    };
    let mask = p(&mut g, DType::Bool);
    let idx = p(&mut g, DType::I32);
    let x = p(&mut g, DType::F32);
    let cast = |g: &mut Graph, to, v| node(g, Op::Cast { to, trunc: false }, &[v]);
    let a = cast(&mut g, DType::F32, mask);
    let b = cast(&mut g, DType::F32, idx);
    let xi = cast(&mut g, DType::I32, x);
    let c = cast(&mut g, DType::F32, xi);
    let xu = cast(&mut g, DType::U8, x);
    let d = cast(&mut g, DType::F16, xu);
    g.set_outputs(&[a, b, c, d]).unwrap();
    let c = compiled(&g);
    let plan = MetalPlan::build(&c.schedule);
    assert_eq!(plan.stats().host, 0, "{plan}");
    let text = plan.to_string();
    for k in ["bool_f32", "i32_f32", "f32_i32", "f32_u8", "u8_f16"] {
        assert!(text.contains(&format!("cast_host_{k}")), "{k}\n{plan}");
    }
    let bufs = || super::tests::fill_params(&c, |i, _| cast_param_bytes(i, n));
    let host = super::tests::run_host_on(&c, bufs());
    let sim = super::tests::run_sim_on(&c, &plan, bufs());
    assert!(host[1].iter().any(|&v| v > 1.6e7), "{:?}", &host[1][..8]);
    for (k, (h, s)) in host.iter().zip(&sim).enumerate() {
        let hb: Vec<u32> = h.iter().map(|v| v.to_bits()).collect();
        let sb: Vec<u32> = s.iter().map(|v| v.to_bits()).collect();
        assert_eq!(hb, sb, "output {k}");
    }
    // the saturations reached the outputs: NaN → 0, +inf → i32::MAX, 3e9 → i32::MAX
    assert_eq!(&host[2][..3], &[0.0, 2147483648.0, -2147483648.0]);
    assert_eq!(&host[3][..3], &[0.0, 255.0, 0.0]);
}
