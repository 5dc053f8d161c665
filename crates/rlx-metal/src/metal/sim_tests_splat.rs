//! metal-sim vs host for the Gaussian-splat render backward compiled from
//! the IR: a scene of more than 2048 splats (most behind the camera or off
//! screen, the visible ones spread over the whole index range, SH degree 1,
//! a `d_loss` clip) on a 10×7 image. The Metal plan must have no host command at all (the
//! backward runs as `splat_render_backward_f32`, one thread per splat), and
//! the packed gradients agree with the host kernel (f64 inside) within
//! `1e-5·max|host| + 1e-4·|host|` (sums over the pixels in f32 and the chain
//! through the conic inverse).

use super::tests::{fill, node, run_host_on, run_sim_on, uniform, Bufs};
use super::*;
use crate::compile::{compile_without, CompileOptions, Compiled};
use crate::metal::plan::Command;
use crate::thunk::raw_offset;
use rlx_ir::op::SplatConfig;
use rlx_ir::{DType, Graph, Op, Shape};

const SPLATS: usize = 2117;
const K: usize = 4;
const W: usize = 10;
const H: usize = 7;

fn graph() -> Graph {
    let mut g = Graph::new("splat_bwd");
    let dims: [&[usize]; 8] = [
        &[SPLATS, 3],
        &[SPLATS, 3],
        &[SPLATS, 4],
        &[SPLATS],
        &[SPLATS, 3],
        &[SPLATS, K, 3],
        &[20],
        &[H, W, 3],
    ];
    let ins: Vec<_> = dims
        .iter()
        .map(|d| {
            let shape = Shape::of(d, DType::F32);
            node(&mut g, Op::Input { shape }, &[])
        })
        .collect();
    let cfg = SplatConfig {
        width: W as u32,
        height: H as u32,
        tile_size: 4,
        radius_scale: 3.0,
        alpha_cutoff: 1.0 / 255.0,
        max_splat_steps: 64,
        transmittance_threshold: 1e-4,
        max_list_entries: 4096,
    };
    let op = Op::GaussianSplatRenderBackward {
        cfg,
        loss_grad_clip: 0.75,
        sh_band: 1,
        max_anisotropy: 100.0,
    };
    let y = node(&mut g, op, &ins);
    g.set_outputs(&[y]).unwrap();
    g
}

/// The scene's operands in input order: every 23rd splat in view.
fn scene() -> Vec<Vec<f32>> {
    let xy = uniform(1, SPLATS * 2, -1.0, 1.0);
    let z = uniform(2, SPLATS, 1.5, 4.0);
    let mut pos = Vec::with_capacity(SPLATS * 3);
    for i in 0..SPLATS {
        let p = match (i % 23, i % 4) {
            (0, _) => [xy[2 * i] * z[i] / 2.0, xy[2 * i + 1] * z[i] / 2.0, z[i]],
            (_, 0) => [30.0 * z[i], xy[2 * i], z[i]],
            _ => [xy[2 * i], xy[2 * i + 1], -z[i]],
        };
        pos.extend(p);
    }
    let (w, h) = (W as f32, H as f32);
    let cam = vec![
        1.0,
        0.0,
        0.0,
        0.05,
        0.0,
        1.0,
        0.0,
        -0.05,
        0.0,
        0.0,
        1.0,
        0.2,
        0.0,
        0.0,
        0.0,
        1.0,
        w,
        h,
        w / 2.0,
        h / 2.0,
    ];
    vec![
        pos,
        uniform(3, SPLATS * 3, 0.05, 0.3),
        uniform(4, SPLATS * 4, -1.0, 1.0),
        uniform(5, SPLATS, 0.2, 0.95),
        uniform(6, SPLATS * 3, 0.0, 1.0),
        uniform(7, SPLATS * K * 3, -0.5, 0.5),
        cam,
        uniform(8, H * W * 3, -1.0, 1.0),
    ]
}

fn bufs(c: &Compiled) -> Bufs {
    let mut b = fill(c);
    for (input, v) in c.inputs.iter().zip(scene()) {
        let o = raw_offset(input.offset);
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        b.arena.as_mut_slice()[o..o + bytes.len()].copy_from_slice(&bytes);
    }
    b
}

#[test]
fn splat_backward_past_2048_splats_runs_on_metal() {
    let g = graph();
    let c = compile_without(&g, &CompileOptions::default(), &[]).unwrap();
    assert_eq!(c.inputs.len(), 8);
    let plan = MetalPlan::build(&c.schedule);
    let mut dispatched = false;
    for cmd in &plan.commands {
        match cmd {
            Command::Host { thunk } => {
                panic!("{} on the host\n{plan}", c.schedule.thunks[*thunk].name())
            }
            Command::Dispatch(d) if d.kernel.function == "splat_render_backward_f32" => {
                assert!(d.grid[0] > 1, "one threadgroup\n{plan}");
                dispatched = true;
            }
            _ => {}
        }
    }
    assert!(dispatched, "no backward dispatch\n{plan}");
    let host = run_host_on(&c, bufs(&c));
    let sim = run_sim_on(&c, &plan, bufs(&c));
    let (h, s) = (&host[0], &sim[0]);
    let w = 14 + 3 * K;
    assert_eq!(h.len(), SPLATS * w);
    let scale = h.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    // gradients reach the splats in view past 2048 (2070, 2093, 2116)
    let late = (2048..SPLATS).filter(|i| h[i * w..(i + 1) * w].iter().any(|&v| v != 0.0));
    assert!(late.count() >= 2, "no gradient past splat 2048");
    for (i, (&hv, &sv)) in h.iter().zip(s).enumerate() {
        assert!(
            (hv - sv).abs() <= 1e-5 * scale + 1e-4 * hv.abs(),
            "splat {} column {}: host {hv}, metal-sim {sv}",
            i / w,
            i % w
        );
    }
}
