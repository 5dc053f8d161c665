//! Tests for the convolution family against direct naive loops.

use super::*;
use crate::host::kernels::testutil::{assert_close, back, rand_vec, to};
use half::f16;

#[allow(clippy::too_many_arguments)]
fn geom(
    n: usize,
    c_in: usize,
    h: usize,
    w: usize,
    c_out: usize,
    k: (usize, usize),
    s: usize,
    pad: usize,
    d: usize,
    g: usize,
) -> Conv2d {
    Conv2d {
        n,
        c_in,
        h,
        w,
        c_out,
        kh: k.0,
        kw: k.1,
        stride: (s, s),
        pad: (pad, pad),
        dil: (d, d),
        groups: g,
    }
}

/// Direct conv, f64 accumulation.
fn naive_conv(p: &Conv2d, x: &[f32], wt: &[f32], bias: Option<&[f32]>) -> Vec<f32> {
    let (ho, wo) = p.out_hw().unwrap();
    let (cig, cog) = (p.c_in / p.groups, p.c_out / p.groups);
    let mut out = vec![0f32; p.n * p.c_out * ho * wo];
    for b in 0..p.n {
        for co in 0..p.c_out {
            let g = co / cog;
            for oy in 0..ho {
                for ox in 0..wo {
                    let mut s = bias.map_or(0.0, |bb| bb[co] as f64);
                    for ci in 0..cig {
                        for ki in 0..p.kh {
                            for kj in 0..p.kw {
                                let iy = (oy * p.stride.0 + ki * p.dil.0) as i64 - p.pad.0 as i64;
                                let ix = (ox * p.stride.1 + kj * p.dil.1) as i64 - p.pad.1 as i64;
                                if iy < 0 || ix < 0 || iy >= p.h as i64 || ix >= p.w as i64 {
                                    continue;
                                }
                                let xv = x[((b * p.c_in + g * cig + ci) * p.h + iy as usize) * p.w
                                    + ix as usize];
                                s += xv as f64
                                    * wt[((co * cig + ci) * p.kh + ki) * p.kw + kj] as f64;
                            }
                        }
                    }
                    out[((b * p.c_out + co) * ho + oy) * wo + ox] = s as f32;
                }
            }
        }
    }
    out
}

#[test]
fn conv2d_matches_naive() {
    let cases = [
        geom(1, 1, 1, 1, 1, (1, 1), 1, 0, 1, 1),
        geom(2, 3, 7, 13, 5, (3, 3), 1, 1, 1, 1),
        geom(1, 4, 13, 7, 6, (3, 2), 2, 1, 2, 2),
        geom(2, 6, 9, 9, 6, (3, 3), 1, 1, 1, 6),
        geom(1, 6, 7, 7, 12, (5, 5), 2, 2, 1, 6),
        geom(1, 8, 5, 3, 4, (1, 1), 1, 0, 1, 1),
        geom(2, 4, 5, 3, 6, (1, 1), 1, 0, 1, 2),
        geom(1, 3, 33, 17, 2, (7, 3), 3, 3, 1, 1),
    ];
    for p in &cases {
        let (ho, wo) = p.out_hw().unwrap();
        let x = rand_vec(p.n * p.c_in * p.h * p.w, 1);
        let wt = rand_vec(p.c_out * p.c_in / p.groups * p.kh * p.kw, 2);
        let bias = rand_vec(p.c_out, 3);
        for b in [None, Some(&bias[..])] {
            let want = naive_conv(p, &x, &wt, b);
            let mut out = vec![f32::NAN; p.n * p.c_out * ho * wo];
            conv2d(p, &x, &wt, b, &mut out).unwrap();
            assert_close(&out, &want, 1e-5);
        }
    }
    let bad = geom(1, 3, 2, 2, 3, (3, 3), 1, 0, 1, 1);
    assert!(conv2d(&bad, &[0.0; 12], &[0.0; 81], None, &mut [0.0; 10]).is_err());
}

#[test]
fn im2col_layout() {
    let p = geom(2, 2, 4, 5, 1, (2, 3), 1, 1, 1, 1);
    let (ho, wo) = p.out_hw().unwrap();
    let x = rand_vec(2 * 2 * 4 * 5, 4);
    let mut col = vec![0f32; 2 * 2 * 6 * ho * wo];
    im2col(&p, &x, &mut col).unwrap();
    for b in 0..2 {
        for c in 0..2 {
            for ki in 0..2 {
                for kj in 0..3 {
                    for oy in 0..ho {
                        for ox in 0..wo {
                            let (iy, ix) = (oy as i64 + ki as i64 - 1, ox as i64 + kj as i64 - 1);
                            let want = if iy < 0 || ix < 0 || iy >= 4 || ix >= 5 {
                                0.0
                            } else {
                                x[((b * 2 + c) * 4 + iy as usize) * 5 + ix as usize]
                            };
                            let row = (c * 2 + ki) * 3 + kj;
                            assert_eq!(col[((b * 12 + row) * ho + oy) * wo + ox], want);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn conv_transpose_matches_scatter_definition() {
    for &(p, op) in &[
        (geom(1, 2, 3, 4, 3, (3, 3), 2, 1, 1, 1), (1usize, 0usize)),
        (geom(2, 4, 5, 5, 2, (2, 2), 2, 0, 1, 2), (0, 0)),
        (geom(1, 3, 7, 2, 3, (3, 1), 1, 0, 2, 3), (0, 0)),
        (geom(1, 2, 5, 4, 4, (3, 3), 2, 2, 2, 1), (1, 1)),
        (geom(1, 1, 1, 1, 1, (1, 1), 1, 0, 1, 1), (0, 0)),
    ] {
        let x = rand_vec(p.n * p.c_in * p.h * p.w, 5);
        let (cig, cog) = (p.c_in / p.groups, p.c_out / p.groups);
        let wt = rand_vec(p.c_in * cog * p.kh * p.kw, 6);
        let bias = rand_vec(p.c_out, 7);
        let ho = (p.h - 1) * p.stride.0 + p.dil.0 * (p.kh - 1) + op.0 + 1 - 2 * p.pad.0;
        let wo = (p.w - 1) * p.stride.1 + p.dil.1 * (p.kw - 1) + op.1 + 1 - 2 * p.pad.1;
        let mut want = vec![0f64; p.n * p.c_out * ho * wo];
        for b in 0..p.n {
            for ci in 0..p.c_in {
                let g = ci / cig;
                for i in 0..p.h {
                    for j in 0..p.w {
                        for c in 0..cog {
                            for ki in 0..p.kh {
                                for kj in 0..p.kw {
                                    let oy =
                                        (i * p.stride.0 + ki * p.dil.0) as i64 - p.pad.0 as i64;
                                    let ox =
                                        (j * p.stride.1 + kj * p.dil.1) as i64 - p.pad.1 as i64;
                                    if oy < 0 || ox < 0 || oy >= ho as i64 || ox >= wo as i64 {
                                        continue;
                                    }
                                    let co = g * cog + c;
                                    want[((b * p.c_out + co) * ho + oy as usize) * wo
                                        + ox as usize] += x[((b * p.c_in + ci) * p.h + i) * p.w + j]
                                        as f64
                                        * wt[((ci * cog + c) * p.kh + ki) * p.kw + kj] as f64;
                                }
                            }
                        }
                    }
                }
            }
        }
        let want: Vec<f32> = want
            .iter()
            .enumerate()
            .map(|(t, v)| (v + bias[(t / (ho * wo)) % p.c_out] as f64) as f32)
            .collect();
        let mut out = vec![f32::NAN; want.len()];
        conv_transpose2d(&p, op, &x, &wt, Some(&bias), &mut out).unwrap();
        assert_close(&out, &want, 1e-5);
    }
}

#[test]
fn pooling() {
    let p = geom(2, 3, 7, 5, 0, (3, 2), 2, 1, 1, 1);
    let (ho, wo) = p.out_hw().unwrap();
    let x = rand_vec(2 * 3 * 7 * 5, 8);
    for kind in [Pool::Max, Pool::Mean] {
        let mut out = vec![0f32; 6 * ho * wo];
        pool2d(&p, kind, &x, &mut out).unwrap();
        for pl in 0..6 {
            for oy in 0..ho {
                for ox in 0..wo {
                    let mut vals = vec![];
                    for ki in 0..3 {
                        for kj in 0..2 {
                            let (iy, ix) = ((oy * 2 + ki) as i64 - 1, (ox * 2 + kj) as i64 - 1);
                            if iy >= 0 && ix >= 0 && iy < 7 && ix < 5 {
                                vals.push(x[(pl * 7 + iy as usize) * 5 + ix as usize]);
                            }
                        }
                    }
                    let want = match kind {
                        Pool::Max => vals.iter().cloned().fold(f32::NEG_INFINITY, f32::max),
                        Pool::Mean => vals.iter().sum::<f32>() / vals.len() as f32,
                    };
                    assert!((out[(pl * ho + oy) * wo + ox] - want).abs() < 1e-6);
                }
            }
        }
        let xh: Vec<f16> = to(&x);
        let mut oh = vec![f16::ZERO; 6 * ho * wo];
        pool2d(&p, kind, &xh, &mut oh).unwrap();
        assert_close(&back(&oh), &out, 1e-2);
    }
}

#[test]
fn causal_conv1d_matches_naive() {
    for &(batch, width, ch, k) in &[
        (1usize, 1usize, 1usize, 1usize),
        (2, 7, 13, 4),
        (3, 33, 7, 3),
        // out · k ≥ PAR_MIN: the parallel path
        (2, 40, 301, 4),
    ] {
        let x = rand_vec(batch * width * ch, 9);
        let w = rand_vec(ch * k, 10);
        let bias = rand_vec(ch, 11);
        let os = width - k + 1;
        for silu_out in [false, true] {
            let mut out = vec![0f32; batch * os * ch];
            causal_conv1d(&x, &w, Some(&bias), &mut out, batch, width, ch, k, silu_out).unwrap();
            for b in 0..batch {
                for t in 0..os {
                    for c in 0..ch {
                        let mut s = bias[c] as f64;
                        for i in 0..k {
                            s += x[(b * width + t + i) * ch + c] as f64 * w[c * k + i] as f64;
                        }
                        if silu_out {
                            s /= 1.0 + (-s).exp();
                        }
                        assert!((out[(b * os + t) * ch + c] as f64 - s).abs() < 1e-5);
                    }
                }
            }
        }
    }
    assert!(causal_conv1d(
        &[0f32; 3],
        &[0f32; 4],
        None,
        &mut [0f32; 3],
        1,
        3,
        1,
        4,
        false
    )
    .is_err());
}
