//! vision.metal: conv2d, transposed conv2d, im2col, max / mean pooling,
//! the max-pool argmax and gradient, nearest 2× upsample and LayerNorm2d,
//! f32 and f16, on odd sizes (7×9 images, 3 / 4 / 5 / 6 / 9 channels,
//! groups 1 / 3 / depthwise, stride 2, dilation 2, padding 1 and 2,
//! partial threadgroups) against f64 references written from PyTorch's
//! definitions (the transposed conv by scattering, the kernel gathers); and
//! the lowering's GEMM path (im2col, then the matmul family's GEMM) against
//! the same conv reference.
//!
//! Tolerances `atol + rtol·|ref|`: f32 `2e-5 + 1e-5` (at most 36 f32
//! products per output summed in another order than f64); f16 `2e-3 +
//! 2^-10` (one f16 rounding of the stored result, inputs rounded to f16
//! first). Pooling, im2col, resize and the argmax are exact.

use super::common::{assert_close, lib, uniform, Dt, DTS};
use msl_sim::Grid;
use rlx_metal::metal::args::{
    Conv2dArgs, KernelArgs, LayerNorm2dArgs, MatmulArgs, Pool2dArgs, Resize2xArgs,
};
use rlx_metal::metal::kernels::Family;

const THREADS: u32 = 64;

fn tolerance(dt: Dt) -> (f64, f64) {
    match dt {
        Dt::F32 => (2e-5, 1e-5),
        Dt::F16 => (2e-3, 1.0 / 1024.0),
    }
}

fn run(kernel: &str, args: &[u8], bufs: &mut [&mut [u8]], total: u32) {
    lib(Family::Vision)
        .dispatch(
            kernel,
            args,
            bufs,
            Grid::d1(total.div_ceil(THREADS), THREADS),
            &[],
        )
        .unwrap_or_else(|e| panic!("{kernel}: {e}"));
}

/// (n, c_in, h, w, c_out, kh, kw, sh, sw, ph, pw, dh, dw, groups)
type Geo = [u32; 14];

const CONVS: [Geo; 7] = [
    [1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1],
    [1, 3, 7, 9, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1],
    [2, 3, 7, 9, 6, 3, 3, 2, 2, 1, 1, 1, 1, 3],
    [1, 5, 9, 7, 5, 3, 3, 1, 1, 2, 2, 2, 2, 5],
    [1, 6, 7, 9, 3, 5, 3, 2, 1, 1, 0, 2, 1, 3],
    [2, 5, 7, 9, 4, 2, 3, 2, 2, 1, 1, 1, 2, 1],
    [2, 4, 7, 9, 9, 3, 3, 2, 1, 1, 0, 1, 2, 1],
];

fn out_len(len: u32, k: u32, s: u32, p: u32, d: u32) -> u32 {
    (len + 2 * p - d * (k - 1) - 1) / s + 1
}

fn conv_args(g: &Geo, h_out: u32, w_out: u32) -> Conv2dArgs {
    let [n, c_in, h, w, c_out, kh, kw, sh, sw, ph, pw, dh, dw, groups] = *g;
    Conv2dArgs {
        n,
        c_in,
        h,
        w,
        c_out,
        h_out,
        w_out,
        kh,
        kw,
        sh,
        sw,
        ph,
        pw,
        dh,
        dw,
        groups,
    }
}

/// PyTorch's conv2d of `x` by `wt` (geometry `g`) in f64, with its output
/// height and width.
fn conv_ref(g: &Geo, x: &[f32], wt: &[f32]) -> (Vec<f64>, usize, usize) {
    let [n, ci, h, w, co, kh, kw, sh, sw, ph, pw, dh, dw, groups] = g.map(|v| v as usize);
    let ho = out_len(h as u32, kh as u32, sh as u32, ph as u32, dh as u32) as usize;
    let wo = out_len(w as u32, kw as u32, sw as u32, pw as u32, dw as u32) as usize;
    let (cig, cog) = (ci / groups, co / groups);
    let mut want = vec![0.0f64; n * co * ho * wo];
    for b in 0..n {
        for o in 0..co {
            for oy in 0..ho {
                for ox in 0..wo {
                    let mut s = 0.0;
                    for c in 0..cig {
                        let cin = (o / cog) * cig + c;
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let iy = (oy * sh + ky * dh) as isize - ph as isize;
                                let ix = (ox * sw + kx * dw) as isize - pw as isize;
                                if iy < 0 || ix < 0 || iy as usize >= h || ix as usize >= w {
                                    continue;
                                }
                                let xv = x[((b * ci + cin) * h + iy as usize) * w + ix as usize];
                                let wv = wt[((o * cig + c) * kh + ky) * kw + kx];
                                s += xv as f64 * wv as f64;
                            }
                        }
                    }
                    want[((b * co + o) * ho + oy) * wo + ox] = s;
                }
            }
        }
    }
    (want, ho, wo)
}

/// Deterministic input and weight of conv case `case`, rounded to `dt`.
fn conv_inputs(dt: Dt, case: usize, g: &Geo) -> (Vec<f32>, Vec<f32>) {
    let [n, ci, h, w, co, kh, kw, .., groups] = g.map(|v| v as usize);
    let x = dt.round(&uniform(case as u64 + 1, n * ci * h * w, -2.0, 2.0));
    let wt = dt.round(&uniform(
        case as u64 + 2,
        co * (ci / groups) * kh * kw,
        -1.0,
        1.0,
    ));
    (x, wt)
}

#[test]
fn conv2d_matches_reference() {
    for dt in DTS {
        let kernel = format!("conv2d_{}", dt.suffix());
        for (case, g) in CONVS.iter().enumerate() {
            let (x, wt) = conv_inputs(dt, case, g);
            let (want, ho, wo) = conv_ref(g, &x, &wt);
            let args = conv_args(g, ho as u32, wo as u32);
            let mut dst = dt.encode(&vec![0.0; want.len()]);
            run(
                &kernel,
                args.as_bytes(),
                &mut [&mut dt.encode(&x), &mut dt.encode(&wt), &mut dst],
                want.len() as u32,
            );
            let (atol, rtol) = tolerance(dt);
            let what = format!("{kernel} case {case}");
            assert_close(&what, &dt.decode(&dst), &want, atol, rtol);
        }
    }
}

/// The lowering's GEMM path: `im2col_*` into a column matrix, then the
/// matmul family's `gemm_sg_*` (`gemm_*` below 8 output channels) with the
/// weight `[c_out, c_in·kh·kw]` broadcast over the batch, against the same
/// f64 conv reference (ungrouped cases).
#[test]
fn im2col_then_gemm_is_the_conv() {
    for dt in DTS {
        for (case, g) in CONVS.iter().enumerate().filter(|(_, g)| g[13] == 1) {
            let (x, wt) = conv_inputs(dt, case, g);
            let (want, ho, wo) = conv_ref(g, &x, &wt);
            let [n, ci, _, _, co, kh, kw, ..] = *g;
            let (k, hw) = (ci * kh * kw, (ho * wo) as u32);
            let args = conv_args(g, ho as u32, wo as u32);
            let mut col = dt.encode(&vec![0.0; (n * k * hw) as usize]);
            run(
                &format!("im2col_{}", dt.suffix()),
                args.as_bytes(),
                &mut [&mut dt.encode(&x), &mut col],
                n * k * hw,
            );
            let mm = MatmulArgs {
                m: co,
                k,
                n: hw,
                batch: n,
                a_batch_stride: 0,
                b_batch_stride: k * hw,
                ..Default::default()
            };
            let (kind, tile, threads) = if co >= 8 {
                ("gemm_sg", 32, 128)
            } else {
                ("gemm", 64, 256)
            };
            let name = format!("{kind}_{}", dt.suffix());
            let mut w = dt.encode(&wt);
            let mut bias = w.clone();
            let mut dst = dt.encode(&vec![0.0; want.len()]);
            lib(Family::Matmul)
                .dispatch(
                    &name,
                    mm.as_bytes(),
                    &mut [&mut w, &mut col, &mut bias, &mut dst],
                    Grid {
                        groups: [hw.div_ceil(tile), co.div_ceil(tile), n],
                        threads: [threads, 1, 1],
                    },
                    &[],
                )
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let (atol, rtol) = tolerance(dt);
            let what = format!("im2col + {name} case {case}");
            assert_close(&what, &dt.decode(&dst), &want, atol, rtol);
        }
    }
}

#[test]
fn conv_transpose2d_matches_reference() {
    // (geometry with c_out meaning the total output channels, output padding)
    let cases: [(Geo, [u32; 2]); 4] = [
        ([1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1], [0, 0]),
        ([1, 3, 7, 9, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1], [1, 0]),
        ([2, 6, 4, 5, 3, 3, 2, 2, 1, 1, 0, 2, 1, 3], [1, 0]),
        ([1, 5, 5, 3, 5, 4, 4, 2, 2, 1, 1, 1, 1, 5], [0, 1]),
    ];
    for dt in DTS {
        let kernel = format!("conv_transpose2d_{}", dt.suffix());
        for (case, (g, op)) in cases.iter().enumerate() {
            let [n, ci, h, w, co, kh, kw, sh, sw, ph, pw, dh, dw, groups] = g.map(|v| v as usize);
            let ho = (h - 1) * sh + dh * (kh - 1) + op[0] as usize + 1 - 2 * ph;
            let wo = (w - 1) * sw + dw * (kw - 1) + op[1] as usize + 1 - 2 * pw;
            let (cig, cog) = (ci / groups, co / groups);
            let x = dt.round(&uniform(case as u64 + 11, n * ci * h * w, -2.0, 2.0));
            let wt = dt.round(&uniform(case as u64 + 12, ci * cog * kh * kw, -1.0, 1.0));
            let mut want = vec![0.0f64; n * co * ho * wo];
            for b in 0..n {
                for c in 0..ci {
                    let grp = c / cig;
                    for iy in 0..h {
                        for ix in 0..w {
                            let xv = x[((b * ci + c) * h + iy) * w + ix] as f64;
                            for o in 0..cog {
                                for ky in 0..kh {
                                    for kx in 0..kw {
                                        let oy = (iy * sh + ky * dh) as isize - ph as isize;
                                        let ox = (ix * sw + kx * dw) as isize - pw as isize;
                                        if oy < 0
                                            || ox < 0
                                            || oy as usize >= ho
                                            || ox as usize >= wo
                                        {
                                            continue;
                                        }
                                        let wv = wt[((c * cog + o) * kh + ky) * kw + kx] as f64;
                                        let oc = grp * cog + o;
                                        want[((b * co + oc) * ho + oy as usize) * wo
                                            + ox as usize] += xv * wv;
                                    }
                                }
                            }
                        }
                    }
                }
            }
            let args = conv_args(g, ho as u32, wo as u32);
            let mut dst = dt.encode(&vec![0.0; want.len()]);
            run(
                &kernel,
                args.as_bytes(),
                &mut [&mut dt.encode(&x), &mut dt.encode(&wt), &mut dst],
                want.len() as u32,
            );
            let (atol, rtol) = tolerance(dt);
            let what = format!("{kernel} case {case}");
            assert_close(&what, &dt.decode(&dst), &want, atol, rtol);
        }
    }
}

#[test]
fn im2col_matches_reference() {
    for dt in DTS {
        let kernel = format!("im2col_{}", dt.suffix());
        for (case, g) in CONVS.iter().enumerate() {
            let [n, ci, h, w, _, kh, kw, sh, sw, ph, pw, dh, dw, _] = g.map(|v| v as usize);
            let ho = out_len(h as u32, kh as u32, sh as u32, ph as u32, dh as u32) as usize;
            let wo = out_len(w as u32, kw as u32, sw as u32, pw as u32, dw as u32) as usize;
            let x = dt.round(&uniform(case as u64 + 21, n * ci * h * w, -2.0, 2.0));
            let mut want = Vec::new();
            for b in 0..n {
                for c in 0..ci {
                    for ky in 0..kh {
                        for kx in 0..kw {
                            for oy in 0..ho {
                                for ox in 0..wo {
                                    let iy = (oy * sh + ky * dh) as isize - ph as isize;
                                    let ix = (ox * sw + kx * dw) as isize - pw as isize;
                                    let inside = iy >= 0
                                        && ix >= 0
                                        && (iy as usize) < h
                                        && (ix as usize) < w;
                                    want.push(if inside {
                                        x[((b * ci + c) * h + iy as usize) * w + ix as usize] as f64
                                    } else {
                                        0.0
                                    });
                                }
                            }
                        }
                    }
                }
            }
            let args = conv_args(g, ho as u32, wo as u32);
            let mut col = dt.encode(&vec![f32::NAN; want.len()]);
            run(
                &kernel,
                args.as_bytes(),
                &mut [&mut dt.encode(&x), &mut col],
                want.len() as u32,
            );
            let what = format!("{kernel} case {case}");
            assert_close(&what, &dt.decode(&col), &want, 0.0, 0.0);
        }
    }
}

/// (n, c, h, w, kh, kw, sh, sw, ph, pw)
const POOLS: [[u32; 10]; 5] = [
    [1, 1, 1, 1, 1, 1, 1, 1, 0, 0],
    [1, 3, 7, 9, 3, 3, 2, 2, 1, 1],
    [2, 5, 9, 7, 2, 3, 1, 2, 0, 1],
    [1, 3, 5, 5, 5, 5, 1, 1, 2, 2],
    [1, 2, 7, 9, 2, 2, 3, 3, 1, 1],
];

/// Pool geometry and output size of one case.
fn pool_args(p: &[u32; 10]) -> Pool2dArgs {
    let [n, c, h, w, kh, kw, sh, sw, ph, pw] = *p;
    Pool2dArgs {
        n,
        c,
        h,
        w,
        h_out: out_len(h, kh, sh, ph, 1),
        w_out: out_len(w, kw, sw, pw, 1),
        kh,
        kw,
        sh,
        sw,
        ph,
        pw,
    }
}

/// The taps of window (oy, ox) inside the input, row-major.
fn taps(a: &Pool2dArgs, oy: usize, ox: usize) -> Vec<usize> {
    let mut v = Vec::new();
    for ky in 0..a.kh as usize {
        for kx in 0..a.kw as usize {
            let iy = (oy * a.sh as usize + ky) as isize - a.ph as isize;
            let ix = (ox * a.sw as usize + kx) as isize - a.pw as isize;
            if iy >= 0 && ix >= 0 && (iy as u32) < a.h && (ix as u32) < a.w {
                v.push(iy as usize * a.w as usize + ix as usize);
            }
        }
    }
    v
}

/// PyTorch's max-pool winner: the first NaN, else the first maximum, in
/// row-major window order; `None` for a window wholly in the padding.
fn winner(plane: &[f32], taps: &[usize]) -> Option<usize> {
    if let Some(&t) = taps.iter().find(|&&t| plane[t].is_nan()) {
        return Some(t);
    }
    let mut best: Option<usize> = None;
    for &t in taps {
        if best.is_none_or(|b| plane[t] > plane[b]) {
            best = Some(t);
        }
    }
    best
}

/// Inputs on a 0.5 grid (many ties) with a NaN in case 2.
fn pool_input(dt: Dt, case: usize, len: usize) -> Vec<f32> {
    let mut x: Vec<f32> = uniform(case as u64 + 31, len, -2.0, 2.0)
        .iter()
        .map(|v| (v * 2.0).round() / 2.0)
        .collect();
    if case == 2 {
        x[len / 3] = f32::NAN;
    }
    dt.round(&x)
}

#[test]
fn pool2d_and_argmax_match_reference() {
    for dt in DTS {
        for (case, p) in POOLS.iter().enumerate() {
            let a = pool_args(p);
            let (hw, plane) = ((a.h * a.w) as usize, (a.h_out * a.w_out) as usize);
            let planes = (a.n * a.c) as usize;
            let x = pool_input(dt, case, planes * hw);
            let (mut want_max, mut want_mean, mut want_arg) = (vec![], vec![], vec![]);
            for pl in 0..planes {
                let xs = &x[pl * hw..(pl + 1) * hw];
                for oy in 0..a.h_out as usize {
                    for ox in 0..a.w_out as usize {
                        let t = taps(&a, oy, ox);
                        let win = winner(xs, &t);
                        want_max.push(win.map_or(f64::NEG_INFINITY, |i| xs[i] as f64));
                        want_arg.push(win.map_or(-1.0, |i| i as f64));
                        let s: f64 = t.iter().map(|&i| xs[i] as f64).sum();
                        want_mean.push(s / t.len() as f64);
                    }
                }
            }
            let total = (planes * plane) as u32;
            let sfx = dt.suffix();
            let (atol, rtol) = tolerance(dt);
            let mut dst = dt.encode(&vec![0.0; planes * plane]);
            let mut idx = vec![0u8; 4 * planes * plane];
            let k = format!("max_pool2d_argmax_{sfx}");
            run(
                &k,
                a.as_bytes(),
                &mut [&mut dt.encode(&x), &mut dst, &mut idx],
                total,
            );
            assert_close(
                &format!("{k} {case}"),
                &dt.decode(&dst),
                &want_max,
                0.0,
                0.0,
            );
            let got: Vec<f32> = idx
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap()) as f32)
                .collect();
            assert_close(&format!("{k} {case} argmax"), &got, &want_arg, 0.0, 0.0);
            let k = format!("pool2d_max_{sfx}");
            let mut dst = dt.encode(&vec![0.0; planes * plane]);
            run(&k, a.as_bytes(), &mut [&mut dt.encode(&x), &mut dst], total);
            assert_close(
                &format!("{k} {case}"),
                &dt.decode(&dst),
                &want_max,
                0.0,
                0.0,
            );
            let k = format!("pool2d_mean_{sfx}");
            let mut dst = dt.encode(&vec![0.0; planes * plane]);
            run(&k, a.as_bytes(), &mut [&mut dt.encode(&x), &mut dst], total);
            assert_close(
                &format!("{k} {case}"),
                &dt.decode(&dst),
                &want_mean,
                atol,
                rtol,
            );
        }
    }
}

#[test]
fn max_pool2d_backward_routes_by_the_argmax() {
    for dt in DTS {
        let k = format!("max_pool2d_backward_{}", dt.suffix());
        for (case, p) in POOLS.iter().enumerate() {
            let a = pool_args(p);
            let (hw, plane) = ((a.h * a.w) as usize, (a.h_out * a.w_out) as usize);
            let planes = (a.n * a.c) as usize;
            let x = pool_input(dt, case, planes * hw);
            let dy = dt.round(&uniform(case as u64 + 41, planes * plane, -1.0, 1.0));
            let mut want = vec![0.0f64; planes * hw];
            for pl in 0..planes {
                let xs = &x[pl * hw..(pl + 1) * hw];
                for oy in 0..a.h_out as usize {
                    for ox in 0..a.w_out as usize {
                        if let Some(i) = winner(xs, &taps(&a, oy, ox)) {
                            want[pl * hw + i] += dy[pl * plane + oy * a.w_out as usize + ox] as f64;
                        }
                    }
                }
            }
            let mut dx = dt.encode(&vec![f32::NAN; planes * hw]);
            run(
                &k,
                a.as_bytes(),
                &mut [&mut dt.encode(&x), &mut dt.encode(&dy), &mut dx],
                (planes * hw) as u32,
            );
            let (atol, rtol) = tolerance(dt);
            assert_close(&format!("{k} {case}"), &dt.decode(&dx), &want, atol, rtol);
        }
    }
}

#[test]
fn resize_nearest2x_matches_reference() {
    for dt in DTS {
        let k = format!("resize_nearest2x_{}", dt.suffix());
        for (case, &(planes, h, w)) in [(1u32, 1u32, 1u32), (6, 7, 9), (5, 3, 33)]
            .iter()
            .enumerate()
        {
            let (p, h, w) = (planes as usize, h as usize, w as usize);
            let x = dt.round(&uniform(case as u64 + 51, p * h * w, -2.0, 2.0));
            let mut want = Vec::new();
            for pl in 0..p {
                for y in 0..2 * h {
                    for xx in 0..2 * w {
                        want.push(x[(pl * h + y / 2) * w + xx / 2] as f64);
                    }
                }
            }
            let a = Resize2xArgs {
                planes,
                h: h as u32,
                w: w as u32,
            };
            let mut dst = dt.encode(&vec![0.0; want.len()]);
            run(
                &k,
                a.as_bytes(),
                &mut [&mut dt.encode(&x), &mut dst],
                want.len() as u32,
            );
            assert_close(&format!("{k} {case}"), &dt.decode(&dst), &want, 0.0, 0.0);
        }
    }
}

#[test]
fn layer_norm2d_matches_reference() {
    for dt in DTS {
        let k = format!("layer_norm2d_{}", dt.suffix());
        for (case, &(n, c, hw)) in [(1u32, 1u32, 1u32), (2, 3, 63), (1, 5, 70), (3, 96, 5)]
            .iter()
            .enumerate()
        {
            let (nn, cc, pp) = (n as usize, c as usize, hw as usize);
            let x = dt.round(&uniform(case as u64 + 61, nn * cc * pp, -2.0, 3.0));
            let g = dt.round(&uniform(case as u64 + 62, cc, 0.5, 1.5));
            let b = dt.round(&uniform(case as u64 + 63, cc, -0.5, 0.5));
            let eps = 1e-6f32;
            let mut want = vec![0.0f64; x.len()];
            for s in 0..nn {
                for p in 0..pp {
                    let at = |ch: usize| (s * cc + ch) * pp + p;
                    let mean = (0..cc).map(|ch| x[at(ch)] as f64).sum::<f64>() / cc as f64;
                    let var = (0..cc)
                        .map(|ch| (x[at(ch)] as f64 - mean).powi(2))
                        .sum::<f64>()
                        / cc as f64;
                    let inv = 1.0 / (var + eps as f64).sqrt();
                    for ch in 0..cc {
                        want[at(ch)] =
                            (x[at(ch)] as f64 - mean) * inv * g[ch] as f64 + b[ch] as f64;
                    }
                }
            }
            let a = LayerNorm2dArgs { n, c, hw, eps };
            let mut dst = dt.encode(&vec![0.0; x.len()]);
            run(
                &k,
                a.as_bytes(),
                &mut [
                    &mut dt.encode(&x),
                    &mut dt.encode(&g),
                    &mut dt.encode(&b),
                    &mut dst,
                ],
                n * hw,
            );
            let (atol, rtol) = tolerance(dt);
            assert_close(&format!("{k} {case}"), &dt.decode(&dst), &want, atol, rtol);
        }
    }
}
