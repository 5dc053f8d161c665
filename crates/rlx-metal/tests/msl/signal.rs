//! signal.metal: the Stockham FFT (power-of-two rows, radix 4 and 2 passes,
//! in threadgroup memory), the direct DFT (any length) and log-mel, against
//! a naive f64 DFT / formula written here. Block, real-input and
//! interleaved (c64) rows, forward and inverse with numpy's norms. Welch
//! peaks: the f64 mean power's stable descending arg sort, exact.
//!
//! Tolerances: FFT `1e-6 · max|X|` (f32 twiddles and sums; the DFT's
//! blocked f32 sum measured below 5e-7 up to n = 400, an unblocked sum
//! failed 1e-6), log-mel `1e-5 + 1e-6·|ref|`.

use super::common::{assert_close, lib, uniform};
use msl_sim::Grid;
use rlx_metal::metal::args::{FftArgs, KernelArgs, LogMelArgs, WelchArgs};
use rlx_metal::metal::kernels::Family;

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Naive DFT of complex rows (re, im pairs), f64.
fn dft(z: &[(f64, f64)], n: usize, inverse: bool, scale: f64) -> Vec<(f64, f64)> {
    let sign = if inverse { 1.0 } else { -1.0 };
    let mut out = Vec::with_capacity(z.len());
    for row in z.chunks(n) {
        for k in 0..n {
            let (mut re, mut im) = (0.0, 0.0);
            for (j, &(a, b)) in row.iter().enumerate() {
                let ang = sign * 2.0 * std::f64::consts::PI * ((j * k) % n) as f64 / n as f64;
                re += a * ang.cos() - b * ang.sin();
                im += a * ang.sin() + b * ang.cos();
            }
            out.push((re * scale, im * scale));
        }
    }
    out
}

/// Run one FFT kernel over `outer` rows; returns (got as complex, want).
fn run_fft(kernel: &str, n: u32, layout: u32, inverse: bool) -> (Vec<f32>, Vec<f64>) {
    let outer = 3u32;
    let nn = n as usize;
    let in_w = if layout == 1 { nn } else { 2 * nn };
    let src = uniform(
        n as u64 * 7 + layout as u64,
        outer as usize * in_w,
        -1.0,
        1.0,
    );
    let z: Vec<(f64, f64)> = (0..outer as usize)
        .flat_map(|r| {
            let row = &src[r * in_w..][..in_w];
            (0..nn)
                .map(|j| match layout {
                    1 => (row[j] as f64, 0.0),
                    2 => (row[2 * j] as f64, row[2 * j + 1] as f64),
                    _ => (row[j] as f64, row[nn + j] as f64),
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let scale = if inverse { 1.0 / n as f64 } else { 1.0 };
    let want_c = dft(&z, nn, inverse, scale);
    // expected output rows in the kernel's layout (interleaved stays interleaved)
    let mut want = vec![0.0; outer as usize * 2 * nn];
    for (i, &(re, im)) in want_c.iter().enumerate() {
        let (r, k) = (i / nn, i % nn);
        let row = &mut want[r * 2 * nn..][..2 * nn];
        if layout == 2 {
            row[2 * k] = re;
            row[2 * k + 1] = im;
        } else {
            row[k] = re;
            row[nn + k] = im;
        }
    }
    let args = FftArgs {
        outer,
        n,
        inverse: inverse as u32,
        layout,
        scale: scale as f32,
    };
    let mut sb = bytes(&src);
    let mut out = vec![0u8; want.len() * 4];
    let (grid, tg) = if kernel == "fft_stockham_f32" {
        (Grid::d1(outer, (n / 2).clamp(1, 256)), vec![16 * nn])
    } else {
        let t = n.clamp(1, 64);
        let g = Grid {
            groups: [n.div_ceil(t), outer, 1],
            threads: [t, 1, 1],
        };
        (g, vec![])
    };
    lib(Family::Signal)
        .dispatch(kernel, args.as_bytes(), &mut [&mut sb, &mut out], grid, &tg)
        .unwrap_or_else(|e| panic!("{kernel} n={n}: {e}"));
    (f32s(&out), want)
}

fn check(kernel: &str, n: u32, layout: u32, inverse: bool) {
    let (got, want) = run_fft(kernel, n, layout, inverse);
    let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    assert_close(
        &format!("{kernel} n={n} layout={layout} inverse={inverse}"),
        &got,
        &want,
        1e-6 * scale,
        0.0,
    );
}

#[test]
fn stockham_power_of_two_lengths() {
    // 1 (no pass), 2 (radix 2 only), 8 (4·2), 64 (4·4·4), 2048 (4⁵·2)
    for n in [1u32, 2, 4, 8, 16, 64, 512, 2048] {
        for layout in [0, 1, 2] {
            check("fft_stockham_f32", n, layout, false);
        }
        check("fft_stockham_f32", n, 0, true);
    }
}

#[test]
fn dft_any_length() {
    for n in [1u32, 3, 7, 100, 257, 400] {
        for layout in [0, 1, 2] {
            check("fft_dft_f32", n, layout, layout == 2);
        }
    }
}

#[test]
fn log_mel_matches_formula() {
    let (outer, n_fft, n_bins, n_mels) = (5u32, 40u32, 21u32, 7u32);
    let spec = uniform(3, (outer * 2 * n_fft) as usize, -2.0, 2.0);
    let filters = uniform(4, (n_mels * n_bins) as usize, 0.0, 1.0);
    let mut want = Vec::new();
    for o in 0..outer as usize {
        let row = &spec[o * 2 * n_fft as usize..];
        for m in 0..n_mels as usize {
            let mut s = 0.0f64;
            for k in 0..n_bins as usize {
                let (re, im) = (row[k] as f64, row[n_fft as usize + k] as f64);
                s += filters[m * n_bins as usize + k] as f64 * (re * re + im * im);
            }
            want.push((s + 1e-10).ln());
        }
    }
    let args = LogMelArgs {
        outer,
        n_fft,
        n_bins,
        n_mels,
    };
    let (mut sb, mut fb) = (bytes(&spec), bytes(&filters));
    let mut out = vec![0u8; want.len() * 4];
    let total = outer * n_mels;
    lib(Family::Signal)
        .dispatch(
            "log_mel_f32",
            args.as_bytes(),
            &mut [&mut sb, &mut fb, &mut out],
            Grid::d1(total.div_ceil(16), 16),
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert_close("log_mel_f32", &f32s(&out), &want, 1e-5, 1e-6);
}

/// Welch peaks at odd sizes and thread counts (the reduction halves odd
/// counts), k past the bin count padding with −1; random powers are far
/// apart compared with the f32 sums, so the ranking is exact.
#[test]
fn welch_peaks_rank_the_mean_power() {
    for (n_fft, segs, batch, k, threads) in [
        (32u32, 4u32, 3u32, 5u32, 17u32),
        (7, 1, 2, 6, 4),
        (1000, 3, 2, 9, 256),
        (2, 2, 1, 4, 1),
    ] {
        let (nf, nb) = (n_fft as usize, n_fft as usize / 2 + 1);
        let spec = uniform(n_fft as u64, (batch * segs) as usize * 2 * nf, -1.0, 1.0);
        let mut want = Vec::new();
        for b in 0..batch as usize {
            let mut p = vec![0f64; nb];
            for s in 0..segs as usize {
                let row = &spec[(b * segs as usize + s) * 2 * nf..][..2 * nf];
                for (j, pj) in p.iter_mut().enumerate() {
                    *pj += (row[j] as f64).powi(2) + (row[nf + j] as f64).powi(2);
                }
            }
            let mut idx: Vec<usize> = (0..nb).collect();
            idx.sort_by(|&x, &y| p[y].total_cmp(&p[x]));
            want.extend((0..k as usize).map(|i| idx.get(i).map_or(-1.0, |&x| x as f64)));
        }
        let args = WelchArgs {
            batch,
            n_fft,
            n_segments: segs,
            k,
        };
        let mut sb = bytes(&spec);
        let mut out = vec![0u8; want.len() * 4];
        let tg = [4 * nb, 8 * threads as usize, nb].map(|b| b.div_ceil(16) * 16);
        lib(Family::Signal)
            .dispatch(
                "welch_peaks_f32",
                args.as_bytes(),
                &mut [&mut sb, &mut out],
                Grid::d1(batch, threads),
                &tg,
            )
            .unwrap_or_else(|e| panic!("{e}"));
        let got = f32s(&out);
        let w32: Vec<f32> = want.iter().map(|&x| x as f32).collect();
        assert_eq!(got, w32, "n_fft {n_fft} segs {segs} threads {threads}");
    }
}
