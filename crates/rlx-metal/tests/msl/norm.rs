//! norm.metal: rms_norm, layer_norm and the fused residual RMSNorm, f32 /
//! f16, over odd row lengths and threadgroup sizes that leave partial
//! simdgroups.
//!
//! Tolerances: f32 `1e-5 + 1e-5·|ref|` (f32 row sums vs f64); f16
//! `1e-4 + 2^-10·|ref|` (statistics in f32, one rounding to f16).

use super::common::{assert_close, lib, row_threads, uniform, Dt, DTS};
use msl_sim::Grid;
use rlx_metal::metal::args::{KernelArgs, RowNormArgs};
use rlx_metal::metal::kernels::Family;

/// (rows, h, threads per threadgroup; 0 = the host's choice).
const SHAPES: [(u32, u32, u32); 7] = [
    (1, 1, 0),
    (3, 31, 0),
    (2, 33, 0),
    (5, 100, 0),
    (2, 1000, 0),
    (3, 100, 48), // 1.5 simdgroups
    (2, 1000, 1), // a single lane
];

fn tolerance(dt: Dt) -> (f64, f64) {
    match dt {
        Dt::F32 => (1e-5, 1e-5),
        Dt::F16 => (1e-4, 1.0 / 1024.0),
    }
}

fn reference(x: &[f32], g: &[f32], b: &[f32], h: usize, eps: f32, layer: bool) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(h) {
        let v: Vec<f64> = row.iter().map(|&t| t as f64).collect();
        let mean = if layer {
            v.iter().sum::<f64>() / h as f64
        } else {
            0.0
        };
        let var = v.iter().map(|t| (t - mean) * (t - mean)).sum::<f64>() / h as f64;
        let scale = 1.0 / (var + eps as f64).sqrt();
        for i in 0..h {
            out.push((v[i] - mean) * scale * g[i] as f64 + b[i] as f64);
        }
    }
    out
}

fn run(kernel: &str, args: RowNormArgs, bufs: &mut [&mut [u8]], tpg: u32) {
    let t = if tpg == 0 { row_threads(args.h) } else { tpg };
    lib(Family::Norm)
        .dispatch(kernel, args.as_bytes(), bufs, Grid::d1(args.rows, t), &[])
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn rms_and_layer_norm_match_reference() {
    for dt in DTS {
        let (atol, rtol) = tolerance(dt);
        for layer in [false, true] {
            let kernel = format!(
                "{}_{}",
                if layer { "layer_norm" } else { "rms_norm" },
                dt.suffix()
            );
            for (k, &(rows, h, tpg)) in SHAPES.iter().enumerate() {
                let n = (rows * h) as usize;
                // an offset mean makes the two-pass variance matter
                let x = dt.round(&uniform(k as u64, n, 1.0, 5.0));
                let g = dt.round(&uniform(k as u64 + 50, h as usize, 0.5, 1.5));
                let b = dt.round(&uniform(k as u64 + 90, h as usize, -0.5, 0.5));
                let args = RowNormArgs {
                    rows,
                    h,
                    eps: 1e-5,
                    has_bias: 0,
                };
                let (mut xb, mut gb, mut bb) = (dt.encode(&x), dt.encode(&g), dt.encode(&b));
                let mut out = vec![0u8; xb.len()];
                run(
                    &kernel,
                    args,
                    &mut [&mut xb, &mut gb, &mut bb, &mut out],
                    tpg,
                );
                let want = reference(&x, &g, &b, h as usize, 1e-5, layer);
                let what = format!("{kernel} rows={rows} h={h} tpg={tpg}");
                assert_close(&what, &dt.decode(&out), &want, atol, rtol);
            }
        }
    }
}

#[test]
fn residual_rms_norm_matches_reference() {
    for dt in DTS {
        let (atol, rtol) = tolerance(dt);
        let kernel = format!("residual_rms_norm_{}", dt.suffix());
        for (k, &(rows, h, tpg)) in SHAPES.iter().enumerate() {
            for has_bias in [false, true] {
                let n = (rows * h) as usize;
                let x = dt.round(&uniform(k as u64 + 1, n, -3.0, 3.0));
                let r = dt.round(&uniform(k as u64 + 2, n, -3.0, 3.0));
                let bias = dt.round(&uniform(k as u64 + 3, h as usize, -1.0, 1.0));
                let g = dt.round(&uniform(k as u64 + 4, h as usize, 0.5, 1.5));
                let b = dt.round(&uniform(k as u64 + 5, h as usize, -0.5, 0.5));
                let args = RowNormArgs {
                    rows,
                    h,
                    eps: 1e-6,
                    has_bias: has_bias as u32,
                };
                let mut bufs: Vec<Vec<u8>> = [&x, &r, &bias, &g, &b]
                    .iter()
                    .map(|v| dt.encode(v))
                    .collect();
                bufs.push(vec![0u8; bufs[0].len()]);
                let mut views: Vec<&mut [u8]> = bufs.iter_mut().map(|v| v.as_mut_slice()).collect();
                run(&kernel, args, &mut views, tpg);
                // the sum as f64 of the exact inputs (the kernel adds in f32)
                let s: Vec<f32> = (0..n)
                    .map(|i| {
                        let extra = if has_bias { bias[i % h as usize] } else { 0.0 };
                        (x[i] as f64 + r[i] as f64 + extra as f64) as f32
                    })
                    .collect();
                let want = reference(&s, &g, &b, h as usize, 1e-6, false);
                let what = format!("{kernel} rows={rows} h={h} tpg={tpg} bias={has_bias}");
                assert_close(&what, &dt.decode(&bufs[5]), &want, atol, rtol);
            }
        }
    }
}
