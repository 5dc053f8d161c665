//! Tests for the normalisation kernels against naive f64 loops.

use super::*;
use crate::host::kernels::testutil::{assert_close, back, rand_vec, to};
use half::f16;

/// Naive f64 normalisation of one slice.
fn naive_norm(kind: NormKind, v: &[f64], eps: f64) -> Vec<f64> {
    let h = v.len() as f64;
    let mean = if kind == NormKind::Layer {
        v.iter().sum::<f64>() / h
    } else {
        0.0
    };
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / h;
    v.iter().map(|x| (x - mean) / (var + eps).sqrt()).collect()
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

const SHAPES: [(usize, usize); 5] = [(1, 1), (3, 7), (13, 33), (7, 13), (40, 1025)];

#[test]
fn layer_and_rms_norm_match_naive() {
    for kind in [NormKind::Layer, NormKind::Rms] {
        for &(rows, h) in &SHAPES {
            // Offset the data so a naive one-pass variance would cancel.
            let x: Vec<f32> = rand_vec(rows * h, 1).iter().map(|v| v + 3.0).collect();
            let (g, b) = (rand_vec(h, 2), rand_vec(h, 3));
            let mut want = vec![0f32; rows * h];
            for r in 0..rows {
                let n = naive_norm(kind, &f64s(&x[r * h..(r + 1) * h]), 1e-5);
                for j in 0..h {
                    want[r * h + j] = (n[j] * g[j] as f64 + b[j] as f64) as f32;
                }
            }
            let mut out = vec![0f32; rows * h];
            let aff = Affine {
                gamma: Some(&g[..]),
                beta: Some(&b[..]),
            };
            norm_rows(kind, &x, aff, &mut out, rows, h, 1e-5).unwrap();
            assert_close(&out, &want, 1e-4);

            let (xh, gh, bh): (Vec<f16>, Vec<f16>, Vec<f16>) = (to(&x), to(&g), to(&b));
            let mut oh = vec![f16::ZERO; rows * h];
            let affh = Affine {
                gamma: Some(&gh[..]),
                beta: Some(&bh[..]),
            };
            norm_rows(kind, &xh, affh, &mut oh, rows, h, 1e-5).unwrap();
            assert_close(&back(&oh), &want, 3e-2);
        }
    }
    // rms with gamma only
    let x = rand_vec(21, 4);
    let g = rand_vec(7, 5);
    let mut out = vec![0f32; 21];
    rms_norm(
        &x,
        Affine {
            gamma: Some(&g),
            beta: None,
        },
        &mut out,
        3,
        7,
        1e-6,
    )
    .unwrap();
    let n = naive_norm(NormKind::Rms, &f64s(&x[7..14]), 1e-6);
    assert!((out[7 + 2] as f64 - n[2] * g[2] as f64).abs() < 1e-5);
    assert!(layer_norm(
        &x,
        Affine {
            gamma: Some(&g[..3]),
            beta: None
        },
        &mut out,
        3,
        7,
        1e-6
    )
    .is_err());
}

#[test]
fn residual_norm_with_bias_and_sum() {
    let (rows, h) = (7, 33);
    let (x, res, bias) = (rand_vec(rows * h, 1), rand_vec(rows * h, 2), rand_vec(h, 3));
    let g = rand_vec(h, 4);
    for kind in [NormKind::Layer, NormKind::Rms] {
        let mut out = vec![0f32; rows * h];
        let mut sum = vec![0f32; rows * h];
        residual_norm(
            kind,
            &x,
            &res,
            Some(&bias),
            Affine {
                gamma: Some(&g),
                beta: None,
            },
            Some(&mut sum),
            &mut out,
            rows,
            h,
            1e-5,
        )
        .unwrap();
        let mut out2 = vec![0f32; rows * h];
        residual_norm(
            kind,
            &x,
            &res,
            Some(&bias),
            Affine {
                gamma: Some(&g),
                beta: None,
            },
            None,
            &mut out2,
            rows,
            h,
            1e-5,
        )
        .unwrap();
        assert_eq!(out, out2);
        for r in 0..rows {
            let s: Vec<f64> = (0..h)
                .map(|j| x[r * h + j] as f64 + res[r * h + j] as f64 + bias[j] as f64)
                .collect();
            let n = naive_norm(kind, &s, 1e-5);
            for j in 0..h {
                assert!((sum[r * h + j] as f64 - s[j]).abs() < 1e-5);
                assert!((out[r * h + j] as f64 - n[j] * g[j] as f64).abs() < 1e-4);
            }
        }
    }
}

#[test]
fn group_norm_and_layer_norm2d() {
    for &(n, c, hw, groups) in &[
        (1usize, 1usize, 1usize, 1usize),
        (2, 6, 7, 3),
        (3, 4, 13, 1),
        (1, 8, 33, 8),
    ] {
        let x = rand_vec(n * c * hw, 6);
        let (g, b) = (rand_vec(c, 7), rand_vec(c, 8));
        let aff = Affine {
            gamma: Some(&g[..]),
            beta: Some(&b[..]),
        };
        let mut out = vec![0f32; x.len()];
        group_norm(&x, aff, &mut out, n, c, hw, groups, 1e-5).unwrap();
        let cg = c / groups;
        for ni in 0..n {
            for gi in 0..groups {
                let s = (ni * c + gi * cg) * hw;
                let nv = naive_norm(NormKind::Layer, &f64s(&x[s..s + cg * hw]), 1e-5);
                for (i, v) in nv.iter().enumerate() {
                    let ch = gi * cg + i / hw;
                    let want = v * g[ch] as f64 + b[ch] as f64;
                    assert!(
                        (out[s + i] as f64 - want).abs() < 1e-4,
                        "group_norm {n} {c} {hw} {groups}"
                    );
                }
            }
        }
        layer_norm2d(&x, aff, &mut out, n, c, hw, 1e-5).unwrap();
        for ni in 0..n {
            for p in 0..hw {
                let col: Vec<f64> = (0..c).map(|ci| x[(ni * c + ci) * hw + p] as f64).collect();
                let nv = naive_norm(NormKind::Layer, &col, 1e-5);
                for ci in 0..c {
                    let want = nv[ci] * g[ci] as f64 + b[ci] as f64;
                    assert!(
                        (out[(ni * c + ci) * hw + p] as f64 - want).abs() < 1e-4,
                        "ln2d"
                    );
                }
            }
        }
    }
    assert!(group_norm(&[0f32; 6], Affine::NONE, &mut [0f32; 6], 1, 6, 1, 4, 1e-5).is_err());
}

#[test]
fn ada_norm_gated_residual_gated_rms() {
    let (b, s, h) = (3, 5, 7);
    let rows = b * s;
    let x = rand_vec(rows * h, 1);
    let (scale, shift) = (rand_vec(b * h, 2), rand_vec(b * h, 3));
    let mut out = vec![0f32; rows * h];
    let idx: Vec<usize> = (0..rows).map(|r| r / s).collect();
    for map in [RowMap::Period(s), RowMap::Index(&idx)] {
        ada_layer_norm(
            NormKind::Layer,
            &x,
            &scale,
            &shift,
            map,
            &mut out,
            rows,
            h,
            1e-6,
        )
        .unwrap();
        for r in 0..rows {
            let n = naive_norm(NormKind::Layer, &f64s(&x[r * h..(r + 1) * h]), 1e-6);
            let m = r / s;
            for j in 0..h {
                let want = n[j] * (1.0 + scale[m * h + j] as f64) + shift[m * h + j] as f64;
                assert!((out[r * h + j] as f64 - want).abs() < 1e-4);
            }
        }
    }
    assert!(ada_layer_norm(
        NormKind::Layer,
        &x,
        &scale,
        &shift,
        RowMap::Same,
        &mut out,
        rows,
        h,
        1e-6
    )
    .is_err());
    assert!(ada_layer_norm(
        NormKind::Layer,
        &x,
        &scale,
        &shift,
        RowMap::Period(0),
        &mut out,
        rows,
        h,
        1e-6
    )
    .is_err());

    let y = rand_vec(rows * h, 4);
    let gate = rand_vec(h, 5);
    gated_residual(&x, &gate, RowMap::One, &y, &mut out, rows, h).unwrap();
    for i in 0..rows * h {
        assert!((out[i] - (x[i] + gate[i % h] * y[i])).abs() < 1e-6);
    }

    let z = rand_vec(rows * h, 6);
    let g = rand_vec(h, 7);
    rms_norm_gated(&x, &z, Some(&g), &mut out, rows, h, 1e-5).unwrap();
    for r in 0..rows {
        let n = naive_norm(NormKind::Rms, &f64s(&x[r * h..(r + 1) * h]), 1e-5);
        for j in 0..h {
            let zz = z[r * h + j] as f64;
            let want = n[j] * g[j] as f64 * zz / (1.0 + (-zz).exp());
            assert!((out[r * h + j] as f64 - want).abs() < 1e-5);
        }
    }
}
