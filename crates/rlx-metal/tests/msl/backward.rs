//! backward.metal: every training-gradient kernel (RMSNorm input / gamma /
//! beta, RoPE, cumsum, gather, conv2d input / weight, adaLN and gated
//! residual f32 + f16, log-mel, softmax cross-entropy gradient, label loss
//! and soft-label loss) against f64 references written from the forward
//! definitions alone: each gradient is the vector-Jacobian product
//! `Jᵀ·dy` of an f64 forward taken by central differences
//! ([`vjp`]; exact up to rounding for the linear ops), never from a
//! backward formula and never from our host kernels. The attention
//! gradients are in `backward_attention.rs`. Odd sizes throughout (rows and
//! widths 1 / 3 / 5 / 7 / 33, partial threadgroups of 32), negative and
//! repeated gather indices, grouped / strided / dilated / padded convs,
//! out-of-range labels.
//!
//! Every output buffer starts as all-ones bytes (NaN in f32 and f16), so an
//! element a kernel fails to write fails the check.
//!
//! Tolerances `atol + rtol·|ref|`: f32 `2e-5 + 1e-4` (f32 sums of at most a
//! few hundred terms against f64; the central differences are accurate to
//! ~1e-9); f16 `2e-3 + 2e-3` (f16 inputs are rounded first, so the only
//! f16 error is the stored result's rounding, 2^-11 relative).

use super::common::{assert_close, lib, uniform, Dt, DTS};
use msl_sim::Grid;
use rlx_metal::metal::args::{
    Conv2dArgs, CumsumBwdArgs, GatherBwdArgs, KernelArgs, LogMelArgs, ModBwdArgs, RmsBwdArgs,
    RopeBwdArgs, SceArgs,
};
use rlx_metal::metal::kernels::Family;

/// Threads per threadgroup (odd totals leave partial groups).
pub const THREADS: u32 = 32;

/// f32 tolerance `(atol, rtol)`.
pub const F32_TOL: (f64, f64) = (2e-5, 1e-4);

fn tolerance(dt: Dt) -> (f64, f64) {
    match dt {
        Dt::F32 => F32_TOL,
        Dt::F16 => (2e-3, 2e-3),
    }
}

/// Dispatches `kernel` of backward.metal over `threads` threads with
/// `inputs` at buffers 1.. and an `out_bytes`-byte output (prefilled with
/// 0xFF: NaN) after them; returns the output bytes.
pub fn run(
    kernel: &str,
    args: &[u8],
    inputs: &[Vec<u8>],
    out_bytes: usize,
    threads: u32,
) -> Vec<u8> {
    let mut bufs: Vec<Vec<u8>> = inputs.to_vec();
    bufs.push(vec![0xFF; out_bytes]);
    let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
    let grid = Grid::d1(threads.max(1).div_ceil(THREADS), THREADS);
    lib(Family::Backward)
        .dispatch(kernel, args, &mut refs, grid, &[])
        .unwrap_or_else(|e| panic!("{kernel}: {e}"));
    bufs.pop().unwrap()
}

/// `Jᵀ·dy` of `f` at `x` by central differences in f64 (step `1e-5`
/// scaled by `|x|`): the gradient of `⟨f(x), dy⟩`.
pub fn vjp(f: &dyn Fn(&[f64]) -> Vec<f64>, x: &[f64], dy: &[f64]) -> Vec<f64> {
    let dot = |y: Vec<f64>| -> f64 {
        assert_eq!(y.len(), dy.len(), "forward length vs dy");
        y.iter().zip(dy).map(|(a, b)| a * b).sum()
    };
    let mut xp = x.to_vec();
    (0..x.len())
        .map(|i| {
            let h = 1e-5 * x[i].abs().max(1.0);
            xp[i] = x[i] + h;
            let up = dot(f(&xp));
            xp[i] = x[i] - h;
            let down = dot(f(&xp));
            xp[i] = x[i];
            (up - down) / (2.0 * h)
        })
        .collect()
}

/// `v` widened to f64.
pub fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    Dt::F32.encode(v)
}

fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

// ------------------------------------------------------------- RMSNorm

/// `y = x·rstd(x)·gamma + beta` per row of `h`.
fn rms_forward(x: &[f64], gamma: &[f64], beta: &[f64], h: usize, eps: f64) -> Vec<f64> {
    let mut y = Vec::with_capacity(x.len());
    for row in x.chunks(h) {
        let r = 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / h as f64 + eps).sqrt();
        y.extend((0..h).map(|c| row[c] * r * gamma[c] + beta[c]));
    }
    y
}

#[test]
fn rms_norm_bwd_input_gamma_beta() {
    for (case, &(rows, h)) in [(1usize, 1usize), (5, 7), (3, 33), (4, 64)]
        .iter()
        .enumerate()
    {
        let seed = 100 + case as u64 * 10;
        let x = uniform(seed, rows * h, -2.0, 2.0);
        let gamma = uniform(seed + 1, h, 0.5, 1.5);
        let beta = uniform(seed + 2, h, -1.0, 1.0);
        let dy = uniform(seed + 3, rows * h, -1.0, 1.0);
        let (xd, gd, bd, dyd) = (f64s(&x), f64s(&gamma), f64s(&beta), f64s(&dy));
        let eps = 1e-5f32;
        let e = f64::from(eps);
        let wants = [
            vjp(&|v| rms_forward(v, &gd, &bd, h, e), &xd, &dyd),
            vjp(&|v| rms_forward(&xd, v, &bd, h, e), &gd, &dyd),
            vjp(&|v| rms_forward(&xd, &gd, v, h, e), &bd, &dyd),
        ];
        for (wrt, want) in wants.iter().enumerate() {
            let a = RmsBwdArgs {
                rows: rows as u32,
                h: h as u32,
                eps,
                wrt: wrt as u32,
            };
            let threads = if wrt == 0 { rows } else { h } as u32;
            let ins = [f32_bytes(&x), f32_bytes(&gamma), f32_bytes(&dy)];
            let got = run(
                "rms_norm_bwd_f32",
                a.as_bytes(),
                &ins,
                want.len() * 4,
                threads,
            );
            let (at, rt) = F32_TOL;
            let what = format!("rms_norm_bwd wrt {wrt} rows {rows} h {h}");
            assert_close(&what, &Dt::F32.decode(&got), want, at, rt);
        }
    }
}

// ------------------------------------------------------------- RoPE

/// NeoX RoPE of `x [batch, seq, hidden]` (heads of `head_dim`, the first
/// `n_rot` dims rotated in pairs `(i, i + n_rot/2)`); `cos` / `sin` are
/// `[rows, n_rot/2]` with `rows` = `seq` (shared over the batch) or
/// `batch·seq`.
fn rope_forward(x: &[f64], cs: &[f64], sn: &[f64], g: [usize; 5]) -> Vec<f64> {
    let [batch, seq, hidden, head_dim, n_rot] = g;
    let half = n_rot / 2;
    let rows = cs.len() / half;
    let mut y = x.to_vec();
    for p in 0..batch * seq {
        let t = if rows == batch * seq { p } else { p % seq };
        for head in 0..hidden / head_dim {
            let base = p * hidden + head * head_dim;
            for i in 0..half {
                let (c, s) = (cs[t * half + i], sn[t * half + i]);
                let (a, b) = (x[base + i], x[base + i + half]);
                y[base + i] = a * c - b * s;
                y[base + i + half] = a * s + b * c;
            }
        }
    }
    y
}

#[test]
fn rope_bwd() {
    // [batch, seq, hidden, head_dim, n_rot], cos per batch·seq row?
    let cases: [([usize; 5], bool); 4] = [
        ([1, 1, 2, 2, 2], false),
        ([2, 3, 12, 6, 4], false),
        ([2, 5, 14, 7, 6], true),
        ([3, 3, 20, 10, 10], true),
    ];
    for (case, &(g, per_batch)) in cases.iter().enumerate() {
        let [batch, seq, hidden, head_dim, n_rot] = g;
        let rows = if per_batch { batch * seq } else { seq };
        let seed = 200 + case as u64 * 10;
        let dy = uniform(seed, batch * seq * hidden, -1.0, 1.0);
        let ang = uniform(seed + 1, rows * n_rot / 2, -3.0, 3.0);
        let cs: Vec<f32> = ang.iter().map(|a| a.cos()).collect();
        let sn: Vec<f32> = ang.iter().map(|a| a.sin()).collect();
        let (csd, snd) = (f64s(&cs), f64s(&sn));
        let x0 = vec![0.0; dy.len()];
        let want = vjp(&|v| rope_forward(v, &csd, &snd, g), &x0, &f64s(&dy));
        let a = RopeBwdArgs {
            batch: batch as u32,
            seq: seq as u32,
            hidden: hidden as u32,
            head_dim: head_dim as u32,
            n_rot: n_rot as u32,
            cos_len: cs.len() as u32,
        };
        let ins = [f32_bytes(&dy), f32_bytes(&cs), f32_bytes(&sn)];
        let got = run(
            "rope_bwd_f32",
            a.as_bytes(),
            &ins,
            dy.len() * 4,
            dy.len() as u32,
        );
        let (at, rt) = F32_TOL;
        assert_close(
            &format!("rope_bwd {g:?}"),
            &Dt::F32.decode(&got),
            &want,
            at,
            rt,
        );
    }
}

// ------------------------------------------------------------- cumsum / gather

#[test]
fn cumsum_bwd() {
    for (case, &(rows, cols)) in [(1usize, 1usize), (3, 7), (5, 33)].iter().enumerate() {
        for exclusive in [false, true] {
            let dy = uniform(300 + case as u64, rows * cols, -1.0, 1.0);
            let fwd = |x: &[f64]| -> Vec<f64> {
                let mut y = Vec::with_capacity(x.len());
                for row in x.chunks(cols) {
                    let mut acc = 0.0;
                    for &v in row {
                        if exclusive {
                            y.push(acc);
                            acc += v;
                        } else {
                            acc += v;
                            y.push(acc);
                        }
                    }
                }
                y
            };
            let want = vjp(&fwd, &vec![0.0; dy.len()], &f64s(&dy));
            let a = CumsumBwdArgs {
                rows: rows as u32,
                cols: cols as u32,
                exclusive: u32::from(exclusive),
            };
            let got = run(
                "cumsum_bwd_f32",
                a.as_bytes(),
                &[f32_bytes(&dy)],
                dy.len() * 4,
                rows as u32,
            );
            let what = format!("cumsum_bwd {rows}x{cols} exclusive {exclusive}");
            assert_close(&what, &Dt::F32.decode(&got), &want, F32_TOL.0, F32_TOL.1);
        }
    }
}

#[test]
fn gather_bwd() {
    // (outer, axis_dim, trailing, indices): negatives wrap, repeats add
    let cases: [(usize, usize, usize, &[i32]); 4] = [
        (1, 1, 1, &[0]),
        (2, 5, 3, &[4, -1, 0, 2, 4]),
        (3, 7, 1, &[6, -7, 3, 3, -2, 0, 1]),
        (1, 9, 33, &[8, 1]),
    ];
    for (case, &(outer, axis, trailing, idx)) in cases.iter().enumerate() {
        let dy = uniform(400 + case as u64, outer * idx.len() * trailing, -1.0, 1.0);
        let fwd = |table: &[f64]| -> Vec<f64> {
            let mut y = Vec::with_capacity(dy.len());
            for o in 0..outer {
                for &i in idx {
                    let r = if i < 0 { i + axis as i32 } else { i } as usize;
                    y.extend_from_slice(&table[(o * axis + r) * trailing..][..trailing]);
                }
            }
            y
        };
        let n = outer * axis * trailing;
        let want = vjp(&fwd, &vec![0.0; n], &f64s(&dy));
        let a = GatherBwdArgs {
            outer: outer as u32,
            axis_dim: axis as u32,
            num_idx: idx.len() as u32,
            trailing: trailing as u32,
        };
        let ins = [f32_bytes(&dy), i32_bytes(idx)];
        let got = run("gather_bwd_f32", a.as_bytes(), &ins, n * 4, n as u32);
        let what = format!("gather_bwd case {case}");
        assert_close(&what, &Dt::F32.decode(&got), &want, F32_TOL.0, F32_TOL.1);
    }
}

// ------------------------------------------------------------- conv2d

/// (n, c_in, h, w, c_out, kh, kw, sh, sw, ph, pw, dh, dw, groups)
type Geo = [usize; 14];

fn out_len(len: usize, k: usize, s: usize, p: usize, d: usize) -> usize {
    (len + 2 * p - d * (k - 1) - 1) / s + 1
}

/// PyTorch's conv2d (NCHW, OIHW weights, groups), no bias, in f64.
fn conv_forward(g: &Geo, x: &[f64], wt: &[f64]) -> Vec<f64> {
    let [n, ci, h, w, co, kh, kw, sh, sw, ph, pw, dh, dw, groups] = *g;
    let (ho, wo) = (out_len(h, kh, sh, ph, dh), out_len(w, kw, sw, pw, dw));
    let (cig, cog) = (ci / groups, co / groups);
    let mut y = vec![0.0; n * co * ho * wo];
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
                                s += x[((b * ci + cin) * h + iy as usize) * w + ix as usize]
                                    * wt[((o * cig + c) * kh + ky) * kw + kx];
                            }
                        }
                    }
                    y[((b * co + o) * ho + oy) * wo + ox] = s;
                }
            }
        }
    }
    y
}

#[test]
fn conv2d_bwd_input_and_weight() {
    let geos: [Geo; 5] = [
        [1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1],
        [1, 3, 7, 9, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1],
        [2, 3, 7, 5, 6, 3, 3, 2, 2, 1, 1, 1, 1, 3],
        [1, 4, 7, 6, 4, 3, 2, 1, 2, 2, 1, 2, 1, 4],
        [2, 4, 5, 7, 2, 2, 3, 2, 1, 0, 1, 1, 2, 2],
    ];
    for (case, g) in geos.iter().enumerate() {
        let [n, ci, h, w, co, kh, kw, sh, sw, ph, pw, dh, dw, groups] = *g;
        let (ho, wo) = (out_len(h, kh, sh, ph, dh), out_len(w, kw, sw, pw, dw));
        let seed = 500 + case as u64 * 10;
        let x = uniform(seed, n * ci * h * w, -1.0, 1.0);
        let wt = uniform(seed + 1, co * (ci / groups) * kh * kw, -1.0, 1.0);
        let dy = uniform(seed + 2, n * co * ho * wo, -1.0, 1.0);
        let (xd, wd, dyd) = (f64s(&x), f64s(&wt), f64s(&dy));
        let want_dx = vjp(&|v| conv_forward(g, v, &wd), &xd, &dyd);
        let want_dw = vjp(&|v| conv_forward(g, &xd, v), &wd, &dyd);
        let u = |v: usize| v as u32;
        let a = Conv2dArgs {
            n: u(n),
            c_in: u(ci),
            h: u(h),
            w: u(w),
            c_out: u(co),
            h_out: u(ho),
            w_out: u(wo),
            kh: u(kh),
            kw: u(kw),
            sh: u(sh),
            sw: u(sw),
            ph: u(ph),
            pw: u(pw),
            dh: u(dh),
            dw: u(dw),
            groups: u(groups),
        };
        let (at, rt) = F32_TOL;
        let ins = [f32_bytes(&dy), f32_bytes(&wt)];
        let got = run(
            "conv2d_bwd_input_f32",
            a.as_bytes(),
            &ins,
            x.len() * 4,
            u(x.len()),
        );
        let what = format!("conv2d_bwd_input {g:?}");
        assert_close(&what, &Dt::F32.decode(&got), &want_dx, at, rt);
        let ins = [f32_bytes(&x), f32_bytes(&dy)];
        let got = run(
            "conv2d_bwd_weight_f32",
            a.as_bytes(),
            &ins,
            wt.len() * 4,
            u(wt.len()),
        );
        let what = format!("conv2d_bwd_weight {g:?}");
        assert_close(&what, &Dt::F32.decode(&got), &want_dw, at, rt);
    }
}

// ------------------------------------------------------------- DiT modulation

/// adaLN: `norm(x)·(1 + scale[m]) + shift[m]` with `norm` a LayerNorm
/// without affine (or RMSNorm), row `r` modulated by row `r / seq_per_mod`.
fn ada_forward(
    x: &[f64],
    scale: &[f64],
    shift: &[f64],
    h: usize,
    spm: usize,
    ln: bool,
    eps: f64,
) -> Vec<f64> {
    let mut y = Vec::with_capacity(x.len());
    for (r, row) in x.chunks(h).enumerate() {
        let m = r / spm;
        let mu = if ln {
            row.iter().sum::<f64>() / h as f64
        } else {
            0.0
        };
        let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / h as f64;
        let rs = 1.0 / (var + eps).sqrt();
        y.extend((0..h).map(|c| (row[c] - mu) * rs * (1.0 + scale[m * h + c]) + shift[m * h + c]));
    }
    y
}

#[test]
fn ada_ln_bwd() {
    // (h, seq_per_mod, mod_rows)
    for (case, &(h, spm, mods)) in [(1usize, 1usize, 1usize), (7, 3, 2), (33, 2, 3)]
        .iter()
        .enumerate()
    {
        for ln in [true, false] {
            for dt in DTS {
                let seed = 600 + case as u64 * 10;
                let rows = spm * mods;
                let x = dt.round(&uniform(seed, rows * h, -2.0, 2.0));
                let scale = dt.round(&uniform(seed + 1, mods * h, -0.5, 0.5));
                let shift = dt.round(&uniform(seed + 2, mods * h, -0.5, 0.5));
                let dy = dt.round(&uniform(seed + 3, rows * h, -1.0, 1.0));
                let (xd, sd, shd, dyd) = (f64s(&x), f64s(&scale), f64s(&shift), f64s(&dy));
                let eps = 1e-6f32;
                let e = f64::from(eps);
                let mut want = vjp(&|v| ada_forward(v, &sd, &shd, h, spm, ln, e), &xd, &dyd);
                want.extend(vjp(
                    &|v| ada_forward(&xd, v, &shd, h, spm, ln, e),
                    &sd,
                    &dyd,
                ));
                want.extend(vjp(
                    &|v| ada_forward(&xd, &sd, v, h, spm, ln, e),
                    &shd,
                    &dyd,
                ));
                let a = ModBwdArgs {
                    h: h as u32,
                    seq_per_mod: spm as u32,
                    mod_rows: mods as u32,
                    eps,
                    layer_norm: u32::from(ln),
                };
                let ins = [dt.encode(&x), dt.encode(&scale), dt.encode(&dy)];
                let bytes = want.len() * if dt == Dt::F32 { 4 } else { 2 };
                let threads = (rows + mods * h) as u32;
                let name = format!("ada_ln_bwd_{}", dt.suffix());
                let got = run(&name, a.as_bytes(), &ins, bytes, threads);
                let (at, rt) = tolerance(dt);
                let what = format!("{name} h {h} spm {spm} mods {mods} ln {ln}");
                assert_close(&what, &dt.decode(&got), &want, at, rt);
            }
        }
    }
}

/// Gated residual: `x + gate[m] ⊙ y`, row `r` gated by row `r / seq_per_mod`.
fn gated_forward(x: &[f64], y: &[f64], gate: &[f64], h: usize, spm: usize) -> Vec<f64> {
    (0..x.len())
        .map(|e| x[e] + gate[(e / (spm * h)) * h + e % h] * y[e])
        .collect()
}

#[test]
fn gated_residual_bwd() {
    for (case, &(h, spm, mods)) in [(1usize, 1usize, 1usize), (7, 3, 2), (33, 2, 3)]
        .iter()
        .enumerate()
    {
        for dt in DTS {
            let seed = 700 + case as u64 * 10;
            let n = spm * mods * h;
            let x = dt.round(&uniform(seed, n, -2.0, 2.0));
            let y = dt.round(&uniform(seed + 1, n, -2.0, 2.0));
            let gate = dt.round(&uniform(seed + 2, mods * h, -1.0, 1.0));
            let g = dt.round(&uniform(seed + 3, n, -1.0, 1.0));
            let (xd, yd, gd, dd) = (f64s(&x), f64s(&y), f64s(&gate), f64s(&g));
            let mut want = vjp(&|v| gated_forward(v, &yd, &gd, h, spm), &xd, &dd);
            want.extend(vjp(&|v| gated_forward(&xd, v, &gd, h, spm), &yd, &dd));
            want.extend(vjp(&|v| gated_forward(&xd, &yd, v, h, spm), &gd, &dd));
            let a = ModBwdArgs {
                h: h as u32,
                seq_per_mod: spm as u32,
                mod_rows: mods as u32,
                eps: 0.0,
                layer_norm: 0,
            };
            let ins = [dt.encode(&y), dt.encode(&gate), dt.encode(&g)];
            let bytes = want.len() * if dt == Dt::F32 { 4 } else { 2 };
            let name = format!("gated_residual_bwd_{}", dt.suffix());
            let got = run(&name, a.as_bytes(), &ins, bytes, want.len() as u32);
            let (at, rt) = tolerance(dt);
            let what = format!("{name} h {h} spm {spm} mods {mods}");
            assert_close(&what, &dt.decode(&got), &want, at, rt);
        }
    }
}

// ------------------------------------------------------------- log-mel

#[test]
fn log_mel_bwd() {
    // (outer, n_fft, n_bins, n_mels)
    for (case, &(outer, nf, nb, nm)) in
        [(1usize, 1usize, 1usize, 1usize), (3, 8, 5, 3), (2, 9, 9, 7)]
            .iter()
            .enumerate()
    {
        let seed = 800 + case as u64 * 10;
        let spec = uniform(seed, outer * 2 * nf, -1.0, 1.0);
        let filters = uniform(seed + 1, nm * nb, 0.0, 1.0);
        let dy = uniform(seed + 2, outer * nm, -1.0, 1.0);
        let fd = f64s(&filters);
        // log(filters · |spec|² + 1e-10) per row, |·|² of (re, im) = (spec[k], spec[n_fft + k])
        let fwd = |s: &[f64]| -> Vec<f64> {
            let mut y = Vec::with_capacity(outer * nm);
            for row in s.chunks(2 * nf) {
                for m in 0..nm {
                    let mel: f64 = (0..nb)
                        .map(|k| fd[m * nb + k] * (row[k] * row[k] + row[nf + k] * row[nf + k]))
                        .sum();
                    y.push((mel + 1e-10).ln());
                }
            }
            y
        };
        let want = vjp(&fwd, &f64s(&spec), &f64s(&dy));
        let a = LogMelArgs {
            outer: outer as u32,
            n_fft: nf as u32,
            n_bins: nb as u32,
            n_mels: nm as u32,
        };
        let ins = [f32_bytes(&spec), f32_bytes(&filters), f32_bytes(&dy)];
        let got = run(
            "log_mel_bwd_f32",
            a.as_bytes(),
            &ins,
            spec.len() * 4,
            spec.len() as u32,
        );
        let what = format!("log_mel_bwd {outer} {nf} {nb} {nm}");
        assert_close(&what, &Dt::F32.decode(&got), &want, F32_TOL.0, F32_TOL.1);
    }
}

// ------------------------------------------------------------- cross-entropy

/// `logsumexp(z) − z[label]` of one row in f64.
fn ce_row(z: &[f64], label: usize) -> f64 {
    let mx = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    mx + z.iter().map(|v| (v - mx).exp()).sum::<f64>().ln() - z[label]
}

/// (n, c, labels) with out-of-range labels in the larger cases.
const SCE_CASES: [(usize, usize, &[i32]); 3] = [
    (1, 1, &[0]),
    (3, 7, &[6, 0, 3]),
    (5, 33, &[32, -1, 17, 33, 0]),
];

#[test]
fn softmax_ce_bwd() {
    for (case, &(n, c, labels)) in SCE_CASES.iter().enumerate() {
        let seed = 900 + case as u64 * 10;
        let z = uniform(seed, n * c, -4.0, 4.0);
        let dl = uniform(seed + 1, n, -1.0, 2.0);
        // per-row loss, 0 for an out-of-range label (ignored row)
        let fwd = |zz: &[f64]| -> Vec<f64> {
            zz.chunks(c)
                .zip(labels)
                .map(|(row, &l)| {
                    if l < 0 || l as usize >= c {
                        0.0
                    } else {
                        ce_row(row, l as usize)
                    }
                })
                .collect()
        };
        let want = vjp(&fwd, &f64s(&z), &f64s(&dl));
        let a = SceArgs {
            n: n as u32,
            c: c as u32,
        };
        let ins = [f32_bytes(&z), i32_bytes(labels), f32_bytes(&dl)];
        let got = run(
            "softmax_ce_bwd_f32",
            a.as_bytes(),
            &ins,
            z.len() * 4,
            n as u32,
        );
        let what = format!("softmax_ce_bwd {n}x{c}");
        assert_close(&what, &Dt::F32.decode(&got), &want, F32_TOL.0, F32_TOL.1);
    }
}

#[test]
fn softmax_ce_label_and_dense_loss() {
    for (case, &(n, c, labels)) in SCE_CASES.iter().enumerate() {
        let seed = 950 + case as u64 * 10;
        let z = uniform(seed, n * c, -4.0, 4.0);
        let zd = f64s(&z);
        let a = SceArgs {
            n: n as u32,
            c: c as u32,
        };
        let want: Vec<f64> = zd
            .chunks(c)
            .zip(labels)
            .map(|(row, &l)| {
                if l < 0 || l as usize >= c {
                    f64::NAN
                } else {
                    ce_row(row, l as usize)
                }
            })
            .collect();
        let ins = [f32_bytes(&z), i32_bytes(labels)];
        let got = run("softmax_ce_labels_f32", a.as_bytes(), &ins, n * 4, n as u32);
        let what = format!("softmax_ce_labels {n}x{c}");
        assert_close(&what, &Dt::F32.decode(&got), &want, F32_TOL.0, F32_TOL.1);
        // soft targets: rows of a distribution, −Σ t·log softmax(z)
        let raw = uniform(seed + 1, n * c, 0.0, 1.0);
        let mut t = Vec::with_capacity(n * c);
        for row in raw.chunks(c) {
            let s: f32 = row.iter().sum();
            t.extend(row.iter().map(|v| v / s));
        }
        let want: Vec<f64> = zd
            .chunks(c)
            .zip(f64s(&t).chunks(c))
            .map(|(row, tr)| (0..c).map(|k| tr[k] * ce_row(row, k)).sum())
            .collect();
        let ins = [f32_bytes(&z), f32_bytes(&t)];
        let got = run("softmax_ce_dense_f32", a.as_bytes(), &ins, n * 4, n as u32);
        let what = format!("softmax_ce_dense {n}x{c}");
        assert_close(&what, &Dt::F32.decode(&got), &want, F32_TOL.0, F32_TOL.1);
    }
}
