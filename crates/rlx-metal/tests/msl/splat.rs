//! splat.metal against the host kernels (host/kernels/splat*.rs, f64
//! inside): `splat_prepare_f32`, `splat_rasterize_f32` and
//! `splat_render_backward_f32` on odd image sizes (not multiples of the
//! tile), a rotated camera, culled splats, few and many overlapping
//! splats, SH degrees 0 / 1 / 3, a list-capacity cut, a step limit, a
//! `d_loss` clip and a frozen SH band; and sparse scenes of more than 2048
//! splats (most behind the camera or off screen, the visible ones spread
//! over the whole index range) with the backward dispatched over many
//! threadgroups of odd size.
//!
//! Tolerances (f32 kernels vs f64 host): records and image `1e-4 +
//! 1e-4·|host|`; gradients `1e-5·max|host| + 1e-4·|host|` per case (sums
//! over up to a few hundred pixels in f32 and the chain through the conic
//! inverse).

use super::common::{assert_close, lib, uniform};
use msl_sim::Grid;
use rlx_metal::host::kernels::splat::{prepare, rasterize, SplatDims, SplatParams};
use rlx_metal::host::kernels::splat_backward::{packed_width, render_backward, BackwardOpts};
use rlx_metal::metal::args::{KernelArgs, SplatArgs, SplatBwdArgs};
use rlx_metal::metal::kernels::Family;

#[derive(Clone, Copy, Debug)]
struct Case {
    width: usize,
    height: usize,
    tile: usize,
    splats: usize,
    k: usize,
    max_list_entries: usize,
    max_splat_steps: usize,
    clip: f32,
    sh_band: u32,
    /// Only every `sparse`-th splat in view (0: the dense scene).
    sparse: usize,
}

struct Scene {
    pos: Vec<f32>,
    scl: Vec<f32>,
    rot: Vec<f32>,
    opa: Vec<f32>,
    col: Vec<f32>,
    sh: Vec<f32>,
    cam: Vec<f32>,
}

fn scene(c: &Case, seed: u64) -> Scene {
    let g = c.splats;
    let mut pos = Vec::with_capacity(g * 3);
    let xy = uniform(seed, g * 2, -1.2, 1.2);
    let z = uniform(seed + 1, g, 1.5, 5.0);
    for i in 0..g {
        if c.sparse > 0 && i % c.sparse != 0 {
            // out of view: mostly behind the camera, every 4th far off
            // to the side (culled by its tile rectangle)
            let p = if i % 4 == 0 {
                [40.0 * z[i], xy[2 * i], z[i]]
            } else {
                [xy[2 * i], xy[2 * i + 1], -z[i]]
            };
            pos.extend(p);
            continue;
        }
        // every 7th splat behind the near plane (culled)
        let zi = if i % 7 == 6 { 0.1 } else { z[i] };
        pos.extend([xy[2 * i] * zi / 2.0, xy[2 * i + 1] * zi / 2.0, zi]);
    }
    // camera: a small rotation about y and a shift
    let (s, co) = (0.15f32.sin(), 0.15f32.cos());
    let (w, h) = (c.width as f32, c.height as f32);
    let cam = vec![
        co,
        0.0,
        s,
        0.1,
        0.0,
        1.0,
        0.0,
        -0.05,
        -s,
        0.0,
        co,
        0.3,
        0.0,
        0.0,
        0.0,
        1.0,
        w,
        h,
        w / 2.0,
        h / 2.0,
    ];
    Scene {
        pos,
        scl: uniform(seed + 2, g * 3, 0.03, 0.3),
        rot: uniform(seed + 3, g * 4, -1.0, 1.0),
        opa: uniform(seed + 4, g, 0.2, 0.95),
        col: uniform(seed + 5, g * 3, 0.0, 1.0),
        sh: uniform(seed + 6, g * c.k * 3, -0.6, 0.6),
        cam,
    }
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn dims(c: &Case) -> SplatDims {
    SplatDims {
        splats: c.splats,
        sh_coeffs: c.k,
        width: c.width,
        height: c.height,
        tile_size: c.tile,
        radius_scale: 3.0,
        alpha_cutoff: 1.0 / 255.0,
        max_splat_steps: c.max_splat_steps,
        transmittance_threshold: 1e-4,
        max_list_entries: c.max_list_entries,
    }
}

fn args(c: &Case) -> SplatArgs {
    let d = dims(c);
    let (tx, ty) = d.tiles();
    SplatArgs {
        count: c.splats as u32,
        sh_coeffs: c.k as u32,
        width: c.width as u32,
        height: c.height as u32,
        tile_size: c.tile as u32,
        tiles_x: tx as u32,
        tiles_y: ty as u32,
        max_splat_steps: c.max_splat_steps as u32,
        max_list_entries: c.max_list_entries as u32,
        radius_scale: d.radius_scale,
        alpha_cutoff: d.alpha_cutoff,
        transmittance_threshold: d.transmittance_threshold,
    }
}

fn widen(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// Threads per threadgroup of the backward dispatch (odd, so that the
/// last threadgroup is partial).
const BWD_LANES: u32 = 48;

fn run(c: &Case, seed: u64) {
    let sc = scene(c, seed);
    let p = SplatParams {
        positions: &sc.pos,
        scales: &sc.scl,
        rotations: &sc.rot,
        opacities: &sc.opa,
        colors: &sc.col,
        sh: &sc.sh,
    };
    let d = dims(c);
    let a = args(c);
    let g = c.splats;
    let l = lib(Family::Splat);
    // prepare
    let mut want_prep = vec![0.0f32; g * 16];
    prepare(&p, &sc.cam, &d, &mut want_prep).unwrap();
    let mut bufs: Vec<Vec<u8>> = [&sc.pos, &sc.scl, &sc.rot, &sc.opa, &sc.col, &sc.sh, &sc.cam]
        .iter()
        .map(|v| bytes(v))
        .collect();
    let mut prep = bytes(&vec![7.0f32; g * 16]);
    {
        let mut io: Vec<&mut [u8]> = bufs.iter_mut().map(|v| v.as_mut_slice()).collect();
        io.push(prep.as_mut_slice());
        l.dispatch(
            "splat_prepare_f32",
            a.as_bytes(),
            &mut io,
            Grid::d1((g as u32).div_ceil(64), 64),
            &[],
        )
        .unwrap_or_else(|e| panic!("prepare {c:?}: {e}"));
    }
    let got_prep = floats(&prep);
    assert_close(
        &format!("prepare {c:?}"),
        &got_prep,
        &widen(&want_prep),
        1e-4,
        1e-4,
    );
    // rasterize the host's records
    let n_img = c.width * c.height * 3;
    let mut want_img = vec![0.0f32; n_img];
    rasterize(&want_prep, &d, &mut want_img).unwrap();
    let mut rec = bytes(&want_prep);
    let mut img = bytes(&vec![7.0f32; n_img]);
    l.dispatch(
        "splat_rasterize_f32",
        a.as_bytes(),
        &mut [&mut rec, &mut img],
        Grid::d1(((c.width * c.height) as u32).div_ceil(64), 64),
        &[],
    )
    .unwrap_or_else(|e| panic!("rasterize {c:?}: {e}"));
    assert_close(
        &format!("rasterize {c:?}"),
        &floats(&img),
        &widen(&want_img),
        1e-4,
        1e-4,
    );
    // backward
    let dl = uniform(seed + 9, n_img, -1.0, 1.0);
    let opts = BackwardOpts {
        loss_grad_clip: c.clip,
        sh_band: c.sh_band,
    };
    let wdt = packed_width(c.k).unwrap();
    let mut want = vec![0.0f32; g * wdt];
    render_backward(&p, &sc.cam, &dl, &d, opts, &mut want).unwrap();
    let b = SplatBwdArgs {
        s: a,
        loss_grad_clip: c.clip,
        sh_band: c.sh_band,
    };
    let mut dlb = bytes(&dl);
    let mut packed = bytes(&vec![7.0f32; g * wdt]);
    {
        let mut io: Vec<&mut [u8]> = bufs.iter_mut().map(|v| v.as_mut_slice()).collect();
        io.push(dlb.as_mut_slice());
        io.push(packed.as_mut_slice());
        l.dispatch(
            "splat_render_backward_f32",
            b.as_bytes(),
            &mut io,
            Grid::d1((g as u32).div_ceil(BWD_LANES), BWD_LANES),
            &[],
        )
        .unwrap_or_else(|e| panic!("backward {c:?}: {e}"));
    }
    let got = floats(&packed);
    let scale = want.iter().fold(0.0f64, |m, &v| m.max((v as f64).abs()));
    assert!(scale > 0.0, "backward {c:?}: all-zero gradient");
    assert_close(
        &format!("backward {c:?}"),
        &got,
        &widen(&want),
        1e-5 * scale,
        1e-4,
    );
}

#[test]
fn splat_kernels_match_host() {
    let base = Case {
        width: 13,
        height: 11,
        tile: 4,
        splats: 3,
        k: 0,
        max_list_entries: 0,
        max_splat_steps: 0,
        clip: 0.0,
        sh_band: 3,
        sparse: 0,
    };
    let cases = [
        base,
        Case {
            width: 21,
            height: 17,
            tile: 8,
            splats: 40,
            k: 16,
            clip: 0.5,
            sh_band: 2,
            ..base
        },
        Case {
            width: 9,
            height: 14,
            tile: 5,
            splats: 300,
            k: 4,
            max_list_entries: 1000,
            max_splat_steps: 6,
            ..base
        },
    ];
    for (n, c) in cases.iter().enumerate() {
        run(c, 11 + n as u64 * 100);
    }
}

#[test]
fn splat_backward_over_2048_splats_matches_host() {
    let base = Case {
        width: 10,
        height: 7,
        tile: 4,
        splats: 2101,
        k: 4,
        max_list_entries: 0,
        max_splat_steps: 0,
        clip: 0.0,
        sh_band: 3,
        sparse: 50,
    };
    let cases = [
        base,
        Case {
            width: 9,
            height: 6,
            splats: 2311,
            k: 0,
            max_list_entries: 90,
            max_splat_steps: 5,
            clip: 0.5,
            sparse: 37,
            ..base
        },
    ];
    for (n, c) in cases.iter().enumerate() {
        run(c, 7 + n as u64 * 100);
    }
}
