//! norm_fused.metal: residual LayerNorm (with and without bias), the DiT
//! AdaLayerNorm / gated residual (identity, trailing, full and middle
//! broadcast of the modulation rows), GroupNorm and the
//! gated RMSNorm·SiLU (zero and non-zero beta), f32 / f16, odd row lengths,
//! partial simdgroups, against f64 references.
//!
//! Tolerances: f32 `1e-5 + 1e-5·|ref|` (f32 row statistics vs f64); f16
//! `2e-3 + 2^-9·|ref|` (f32 math, up to two roundings to f16 in the gated
//! form, whose values reach |x·g·silu(z)| ≈ 8).

use super::common::{assert_close, lib, row_threads, run_dense, uniform, Dt, DTS};
use msl_sim::Grid;
use rlx_metal::metal::args::{GroupNormArgs, KernelArgs, ModNormArgs, RowNormArgs};
use rlx_metal::metal::kernels::Family;

/// (rows, h, threads per threadgroup; 0 = the host's choice).
const SHAPES: [(u32, u32, u32); 6] = [
    (1, 1, 0),
    (3, 31, 0),
    (2, 33, 0),
    (2, 1000, 0),
    (3, 100, 48),
    (2, 37, 1),
];

fn tolerance(dt: Dt) -> (f64, f64) {
    match dt {
        Dt::F32 => (1e-5, 1e-5),
        Dt::F16 => (2e-3, 1.0 / 512.0),
    }
}

fn silu(z: f64) -> f64 {
    z / (1.0 + (-z).exp())
}

#[test]
fn residual_layer_norm_matches_reference() {
    let lib = lib(Family::NormFused);
    for dt in DTS {
        let kernel = format!("residual_layer_norm_{}", dt.suffix());
        for (k, &(rows, h, tpg)) in SHAPES.iter().enumerate() {
            for has_bias in [false, true] {
                let n = (rows * h) as usize;
                let seed = k as u64 * 10;
                let x = dt.round(&uniform(seed + 1, n, -2.0, 2.0));
                let r = dt.round(&uniform(seed + 2, n, -2.0, 2.0));
                let bias = dt.round(&uniform(seed + 3, h as usize, -1.0, 1.0));
                let g = dt.round(&uniform(seed + 4, h as usize, 0.5, 1.5));
                let b = dt.round(&uniform(seed + 5, h as usize, -0.5, 0.5));
                let args = RowNormArgs {
                    rows,
                    h,
                    eps: 1e-5,
                    has_bias: has_bias as u32,
                };
                let t = if tpg == 0 { row_threads(h) } else { tpg };
                let out = run_dense(
                    &lib,
                    &kernel,
                    args.as_bytes(),
                    dt,
                    &[&x, &r, &bias, &g, &b],
                    n,
                    Grid::d1(rows, t),
                );
                let mut want = Vec::with_capacity(n);
                for row in 0..rows as usize {
                    let s: Vec<f64> = (0..h as usize)
                        .map(|j| {
                            let i = row * h as usize + j;
                            x[i] as f64 + r[i] as f64 + if has_bias { bias[j] as f64 } else { 0.0 }
                        })
                        .collect();
                    let mean = s.iter().sum::<f64>() / h as f64;
                    let var = s.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / h as f64;
                    let inv = 1.0 / (var + 1e-5).sqrt();
                    want.extend(
                        s.iter()
                            .enumerate()
                            .map(|(j, v)| (v - mean) * inv * g[j] as f64 + b[j] as f64),
                    );
                }
                let (atol, rtol) = tolerance(dt);
                assert_close(
                    &format!("{kernel} {rows}x{h} tpg={t} bias={has_bias}"),
                    &out,
                    &want,
                    atol,
                    rtol,
                );
            }
        }
    }
}

#[test]
fn rms_norm_mul_silu_matches_reference() {
    let lib = lib(Family::NormFused);
    for dt in DTS {
        let kernel = format!("rms_norm_mul_silu_{}", dt.suffix());
        for (k, &(rows, h, tpg)) in SHAPES.iter().enumerate() {
            for zero_beta in [true, false] {
                let n = (rows * h) as usize;
                let seed = k as u64 * 10 + 100;
                let x = dt.round(&uniform(seed + 1, n, -2.0, 2.0));
                let z = dt.round(&uniform(seed + 2, n, -4.0, 4.0));
                let g = dt.round(&uniform(seed + 4, h as usize, 0.5, 1.5));
                let b = if zero_beta {
                    vec![0.0; h as usize]
                } else {
                    dt.round(&uniform(seed + 5, h as usize, -0.5, 0.5))
                };
                let args = RowNormArgs {
                    rows,
                    h,
                    eps: 1e-6,
                    has_bias: 0,
                };
                let t = if tpg == 0 { row_threads(h) } else { tpg };
                let out = run_dense(
                    &lib,
                    &kernel,
                    args.as_bytes(),
                    dt,
                    &[&x, &g, &b, &z],
                    n,
                    Grid::d1(rows, t),
                );
                let mut want = Vec::with_capacity(n);
                for row in x.chunks(h as usize).zip(z.chunks(h as usize)) {
                    let ms = row.0.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / h as f64;
                    let inv = 1.0 / (ms + 1e-6).sqrt();
                    for j in 0..h as usize {
                        let a = silu(row.1[j] as f64);
                        want.push((row.0[j] as f64 * inv * g[j] as f64 + b[j] as f64) * a);
                    }
                }
                let (atol, rtol) = tolerance(dt);
                assert_close(
                    &format!("{kernel} {rows}x{h} tpg={t} zero_beta={zero_beta}"),
                    &out,
                    &want,
                    atol,
                    rtol,
                );
            }
        }
    }
}

/// `(x lead dims, modulation lead dims)` cases: identity, trailing
/// broadcast, all broadcast, middle broadcast.
const LEADS: [(&[u32], &[u32]); 4] = [
    (&[2, 3], &[2, 3]),
    (&[2, 3], &[2, 1]),
    (&[3, 5], &[1, 1]),
    (&[2, 3, 2], &[2, 1, 2]),
];

/// ModNormArgs for a lead case and the reference row map (multi-index of
/// x's row with broadcast dims zeroed, row-major over the modulation dims).
fn mod_case(x: &[u32], m: &[u32], h: u32, eps: f32) -> (ModNormArgs, Vec<usize>) {
    let rows: u32 = x.iter().product();
    let r = x.len();
    let mut a = ModNormArgs {
        rows,
        h,
        eps,
        rank: r as u32,
        same: (x == m) as u32,
        ..Default::default()
    };
    let mut acc = 1;
    for i in (0..r).rev() {
        a.x_lead[i] = x[i];
        a.mod_stride[i] = if m[i] != 1 { acc } else { 0 };
        acc *= m[i];
    }
    let map = (0..rows as usize)
        .map(|row| {
            let (mut rest, mut idx) = (row, vec![0usize; r]);
            for i in (0..r).rev() {
                idx[i] = rest % x[i] as usize;
                rest /= x[i] as usize;
            }
            idx.iter().zip(m).fold(0, |at, (&j, &d)| {
                at * d as usize + if d == 1 { 0 } else { j }
            })
        })
        .collect();
    (a, map)
}

#[test]
fn ada_layer_norm_and_gated_residual_match_reference() {
    let lib = lib(Family::NormFused);
    for dt in DTS {
        for (k, &(xl, ml)) in LEADS.iter().enumerate() {
            for (h, layer) in [(37u32, true), (100, false)] {
                let (mut args, map) = mod_case(xl, ml, h, 1e-5);
                args.layer_norm = layer as u32;
                let (rows, hu) = (args.rows as usize, h as usize);
                let mrows: usize = ml.iter().map(|&d| d as usize).product();
                let seed = k as u64 * 7 + 300;
                let x = dt.round(&uniform(seed, rows * hu, -2.0, 2.0));
                let y = dt.round(&uniform(seed + 1, rows * hu, -2.0, 2.0));
                let sc = dt.round(&uniform(seed + 2, mrows * hu, -0.5, 0.5));
                let sh = dt.round(&uniform(seed + 3, mrows * hu, -0.5, 0.5));
                let (atol, rtol) = tolerance(dt);
                // ada_layer_norm
                let kernel = format!("ada_layer_norm_{}", dt.suffix());
                let out = run_dense(
                    &lib,
                    &kernel,
                    args.as_bytes(),
                    dt,
                    &[&x, &sc, &sh],
                    rows * hu,
                    Grid::d1(rows as u32, row_threads(h)),
                );
                let mut want = Vec::new();
                for (r, row) in x.chunks(hu).enumerate() {
                    let v: Vec<f64> = row.iter().map(|&t| t as f64).collect();
                    let mean = if layer {
                        v.iter().sum::<f64>() / h as f64
                    } else {
                        0.0
                    };
                    let var = v.iter().map(|t| (t - mean) * (t - mean)).sum::<f64>() / h as f64;
                    let inv = 1.0 / (var + 1e-5).sqrt();
                    let m = map[r] * hu;
                    want.extend((0..hu).map(|j| {
                        (v[j] - mean) * inv * (1.0 + sc[m + j] as f64) + sh[m + j] as f64
                    }));
                }
                assert_close(&format!("{kernel} case {k} h={h}"), &out, &want, atol, rtol);
                // gated_residual (gate = the scale tensor)
                let kernel = format!("gated_residual_{}", dt.suffix());
                let total = (rows * hu) as u32;
                let out = run_dense(
                    &lib,
                    &kernel,
                    args.as_bytes(),
                    dt,
                    &[&x, &y, &sc],
                    rows * hu,
                    Grid::d1(total.div_ceil(64), 64),
                );
                let want: Vec<f64> = (0..rows * hu)
                    .map(|e| {
                        let (r, j) = (e / hu, e % hu);
                        x[e] as f64 + sc[map[r] * hu + j] as f64 * y[e] as f64
                    })
                    .collect();
                assert_close(&format!("{kernel} case {k} h={h}"), &out, &want, atol, rtol);
            }
        }
    }
}

#[test]
fn group_norm_matches_reference() {
    let lib = lib(Family::NormFused);
    // (n, c, hw, groups)
    for dt in DTS {
        let kernel = format!("group_norm_{}", dt.suffix());
        for (k, &(n, c, hw, groups)) in [
            (1u32, 4u32, 9u32, 2u32),
            (2, 6, 31, 3),
            (1, 8, 100, 1),
            (2, 5, 7, 5),
        ]
        .iter()
        .enumerate()
        {
            let total = (n * c * hw) as usize;
            let x = dt.round(&uniform(k as u64 + 500, total, -2.0, 2.0));
            let g = dt.round(&uniform(k as u64 + 501, c as usize, 0.5, 1.5));
            let b = dt.round(&uniform(k as u64 + 502, c as usize, -0.5, 0.5));
            let cg = c / groups;
            let args = GroupNormArgs {
                count: n * groups,
                groups,
                cg,
                hw,
                eps: 1e-5,
            };
            let out = run_dense(
                &lib,
                &kernel,
                args.as_bytes(),
                dt,
                &[&x, &g, &b],
                total,
                Grid::d1(n * groups, row_threads(cg * hw)),
            );
            let glen = (cg * hw) as usize;
            let mut want = Vec::new();
            for (gi, blk) in x.chunks(glen).enumerate() {
                let mean = blk.iter().map(|&v| v as f64).sum::<f64>() / glen as f64;
                let var = blk.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / glen as f64;
                let inv = 1.0 / (var + 1e-5).sqrt();
                let c0 = (gi % groups as usize) * cg as usize;
                for (i, &v) in blk.iter().enumerate() {
                    let ch = c0 + i / hw as usize;
                    want.push((v as f64 - mean) * inv * g[ch] as f64 + b[ch] as f64);
                }
            }
            let (atol, rtol) = tolerance(dt);
            assert_close(&format!("{kernel} case {k}"), &out, &want, atol, rtol);
        }
    }
}
