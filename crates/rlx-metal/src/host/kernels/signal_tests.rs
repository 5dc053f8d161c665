//! Tests for the signal kernels against naive f64 DFT / power formulas
//! written here from the definitions (the Python suite checks numpy.fft).

use super::*;
use crate::host::kernels::testutil::rand_vec;

/// Naive DFT of block rows, f64, with numpy's scaling.
fn naive_fft(x: &[f64], outer: usize, n: usize, inverse: bool, norm: u32) -> Vec<f64> {
    let sign = if inverse { 1.0 } else { -1.0 };
    let s = fft_scale(n, inverse, norm);
    let mut out = vec![0.0; outer * 2 * n];
    for r in 0..outer {
        let row = &x[r * 2 * n..][..2 * n];
        for k in 0..n {
            let (mut re, mut im) = (0.0, 0.0);
            for j in 0..n {
                let a = sign * 2.0 * std::f64::consts::PI * ((j * k) % n) as f64 / n as f64;
                let (c, sn) = (a.cos(), a.sin());
                re += row[j] * c - row[n + j] * sn;
                im += row[j] * sn + row[n + j] * c;
            }
            out[r * 2 * n + k] = re * s;
            out[r * 2 * n + n + k] = im * s;
        }
    }
    out
}

fn max_err(a: &[f64], b: &[f64]) -> f64 {
    let scale = b.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
        / scale
}

#[test]
fn fft_any_length_matches_naive_dft() {
    for &n in &[1usize, 2, 7, 64, 100, 257] {
        for (inverse, norm) in [(false, 0), (true, 0), (false, 1), (true, 2)] {
            let outer = 3;
            let x = rand_vec(outer * 2 * n, n as u64 + 7);
            let mut y = vec![0f32; x.len()];
            let d = FftDims {
                outer,
                n,
                inverse,
                norm_tag: norm,
                layout: FftLayout::Block,
            };
            fft(&x, &mut y, d).unwrap();
            let xd: Vec<f64> = x.iter().map(|&v| v as f64).collect();
            let want = naive_fft(&xd, outer, n, inverse, norm);
            let got: Vec<f64> = y.iter().map(|&v| v as f64).collect();
            let e = max_err(&got, &want);
            assert!(e < 2e-6, "n={n} inverse={inverse} norm={norm}: rel err {e}");
            // f64 rows are exact to ~1e-13
            let mut y64 = vec![0f64; xd.len()];
            fft(&xd, &mut y64, d).unwrap();
            let e = max_err(&y64, &want);
            assert!(e < 1e-12, "f64 n={n}: rel err {e}");
        }
    }
}

#[test]
fn fft_real_and_interleaved_layouts() {
    let (outer, n) = (2, 100);
    let real = rand_vec(outer * n, 3);
    let mut block = vec![0f32; outer * 2 * n];
    for r in 0..outer {
        block[r * 2 * n..][..n].copy_from_slice(&real[r * n..][..n]);
    }
    let d = |layout| FftDims {
        outer,
        n,
        inverse: false,
        norm_tag: 0,
        layout,
    };
    let mut a = vec![0f32; outer * 2 * n];
    let mut b = vec![0f32; outer * 2 * n];
    fft(&real, &mut a, d(FftLayout::Real)).unwrap();
    fft(&block, &mut b, d(FftLayout::Block)).unwrap();
    assert_eq!(a, b);
    // interleaved: same values, pairs instead of blocks
    let mut inter = vec![0f32; outer * 2 * n];
    for r in 0..outer {
        for j in 0..n {
            inter[r * 2 * n + 2 * j] = block[r * 2 * n + j];
        }
    }
    let mut c = vec![0f32; outer * 2 * n];
    fft(&inter, &mut c, d(FftLayout::Interleaved)).unwrap();
    for r in 0..outer {
        for j in 0..n {
            assert_eq!(c[r * 2 * n + 2 * j], b[r * 2 * n + j]);
            assert_eq!(c[r * 2 * n + 2 * j + 1], b[r * 2 * n + n + j]);
        }
    }
}

#[test]
fn log_mel_matches_formula() {
    let (outer, n_fft, n_bins, n_mels) = (3, 16, 9, 4);
    let spec = rand_vec(outer * 2 * n_fft, 11);
    let filters: Vec<f32> = rand_vec(n_mels * n_bins, 12)
        .iter()
        .map(|v| v.abs())
        .collect();
    let mut out = vec![0f32; outer * n_mels];
    let d = MelDims {
        outer,
        n_fft,
        n_bins,
        n_mels,
    };
    log_mel(&spec, &filters, &mut out, d).unwrap();
    for o in 0..outer {
        for m in 0..n_mels {
            let mut s = 0f64;
            for k in 0..n_bins {
                let re = spec[o * 2 * n_fft + k] as f64;
                let im = spec[o * 2 * n_fft + n_fft + k] as f64;
                s += filters[m * n_bins + k] as f64 * (re * re + im * im);
            }
            let want = (s + 1e-10).ln();
            assert!((out[o * n_mels + m] as f64 - want).abs() < 1e-5);
        }
    }
    let bad = MelDims { n_bins: 10, ..d };
    let e = log_mel(&spec, &filters, &mut out, bad).unwrap_err();
    assert!(e.to_string().starts_with("[log_mel] n_bins 10"), "{e}");
}

#[test]
fn welch_peaks_orders_mean_power() {
    // one batch row, two segments: bins 3 and 1 dominate
    let n_fft = 8;
    let mut spec = vec![0f32; 2 * 2 * n_fft];
    spec[3] = 2.0; // segment 0, re of bin 3
    spec[2 * n_fft + n_fft + 1] = 1.5; // segment 1, im of bin 1
    spec[2 * n_fft + 4] = 0.5; // segment 1, re of bin 4
    let mut out = vec![0f32; 6];
    let d = WelchDims {
        batch: 1,
        n_fft,
        n_segments: 2,
        k: 6,
    };
    welch_peaks(&spec, &mut out, d).unwrap();
    // bins 0..=4; power ties (0) keep bin order; k past 5 bins pads -1
    assert_eq!(out, vec![3.0, 1.0, 4.0, 0.0, 2.0, -1.0]);
}

#[test]
fn short_slices_are_errors() {
    let d = FftDims {
        outer: 2,
        n: 4,
        inverse: false,
        norm_tag: 0,
        layout: FftLayout::Block,
    };
    let e = fft(&[0f32; 15], &mut [0f32; 16], d).unwrap_err();
    assert!(e.to_string().starts_with("[fft] src"), "{e}");
    let e = fft(&[0f32; 0], &mut [0f32; 0], FftDims { n: 0, ..d }).unwrap_err();
    assert!(e.to_string().contains("n (points per row)"), "{e}");
}
