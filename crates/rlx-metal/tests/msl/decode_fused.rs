//! The Metal plan's fused decode-layer kernels (`metal::fuse`):
//! `qkv_head_<type>` and `norm_gate_up_<type>` of quant.metal for every GGUF
//! type, and `norm_residual_f32` of norm_fused.metal, against an f64
//! reference (weights decoded by the independent decoder of `quant.rs`),
//! on odd sizes and every prologue / epilogue combination in turn. (The
//! in-place forms the plan uses run in the whole-model metal-sim tests.)
//!
//! Tolerance: `1e-5 · (1 + max |ref|)` over each output — f32 sums of at
//! most a few hundred products of values ≤ 3 in magnitude, with two rsqrt
//! (≤ 2 ulp) and one cos / sin product on the way.

use super::common::{lib, uniform};
use super::quant::{dequant, random_weights};
use msl_sim::Grid;
use rlx_ir::quant::ALL_GGML_TYPES;
use rlx_ir::GgmlType;
use rlx_metal::metal::args::{HeadGemvArgs, KernelArgs};
use rlx_metal::metal::args::{
    HG_BIAS, HG_CACHE, HG_HNORM, HG_INTERLEAVED, HG_NORM, HG_POST, HG_RAW, HG_ROPE, HG_WRITE_S,
};
use rlx_metal::metal::kernels::Family;

fn enc(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn dec(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
        .collect()
}

fn k_for(ty: GgmlType) -> usize {
    match ty.block_size() {
        1 => 37,
        32 => 96,
        bs => bs,
    }
}

fn rms(v: &[f64], g: &[f32], b: &[f32], eps: f32) -> Vec<f64> {
    let ms = v.iter().map(|x| x * x).sum::<f64>() / v.len() as f64;
    let s = 1.0 / (ms + eps as f64).sqrt();
    v.iter()
        .zip(g.iter().zip(b))
        .map(|(x, (&g, &b))| x * s * g as f64 + b as f64)
        .collect()
}

fn close(what: &str, got: &[f64], want: &[f64]) {
    let top = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let tol = 1e-5 * (1.0 + top);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol,
            "{what} [{i}]: got {g}, want {w} (tol {tol:e})"
        );
    }
}

/// Prologue inputs and the staged GEMV input they give.
struct Pro {
    x: Vec<f32>,
    g: Vec<f32>,
    b: Vec<f32>,
    y: Vec<f32>,
    pg: Vec<f32>,
    pb: Vec<f32>,
    /// The residual after the post-norm add (HG_POST).
    s: Vec<f64>,
    /// The GEMV input.
    xs: Vec<f64>,
}

impl Pro {
    /// The six prologue operands (x, g, b, y, pg, pb) as f32 buffers, in
    /// kernel binding order.
    fn bufs(&self) -> Vec<Vec<u8>> {
        [&self.x, &self.g, &self.b, &self.y, &self.pg, &self.pb]
            .map(|v| enc(v))
            .to_vec()
    }
}

fn prologue(k: usize, flags: u32, seed: u64) -> Pro {
    let x = uniform(seed, k, -3.0, 3.0);
    let g = uniform(seed + 1, k, 0.5, 1.5);
    let b = uniform(seed + 2, k, -0.1, 0.1);
    let y = uniform(seed + 3, k, -2.0, 2.0);
    let pg = uniform(seed + 4, k, 0.5, 1.5);
    let pb = uniform(seed + 5, k, -0.1, 0.1);
    let mut s: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    if flags & HG_POST != 0 && flags & HG_RAW != 0 {
        s = s.iter().zip(&y).map(|(a, &b)| a + b as f64).collect();
    } else if flags & HG_POST != 0 {
        let yn = rms(
            &y.iter().map(|&v| v as f64).collect::<Vec<_>>(),
            &pg,
            &pb,
            1e-6,
        );
        s = s.iter().zip(&yn).map(|(a, b)| a + b).collect();
    }
    let xs = if flags & HG_NORM != 0 {
        rms(&s, &g, &b, 1e-5)
    } else {
        s.clone()
    };
    Pro {
        x,
        g,
        b,
        y,
        pg,
        pb,
        s,
        xs,
    }
}

/// The flag combinations tried in turn (type `t` takes combination `t % 8`).
const COMBOS: [u32; 9] = [
    HG_NORM | HG_ROPE,
    HG_NORM | HG_ROPE | HG_INTERLEAVED | HG_CACHE,
    HG_NORM | HG_CACHE,
    HG_NORM | HG_BIAS | HG_ROPE,
    HG_POST | HG_NORM | HG_HNORM | HG_ROPE,
    HG_POST | HG_NORM | HG_HNORM | HG_ROPE | HG_CACHE,
    HG_BIAS | HG_ROPE | HG_INTERLEAVED,
    HG_NORM,
    HG_POST | HG_RAW | HG_NORM | HG_ROPE,
];

#[test]
fn qkv_head_matches_reference_for_every_type_and_epilogue() {
    let (heads, d, n_rot, rows) = (3usize, 10usize, 6usize, 5usize);
    let n = heads * d;
    for (t, ty) in ALL_GGML_TYPES.into_iter().enumerate() {
        let name = format!("qkv_head_{}", ty.name().to_lowercase());
        // one dispatch of those sharing a prologue writes the residual
        // stream (HG_WRITE_S); the others must leave it alone
        let flags = COMBOS[t % COMBOS.len()];
        let flags = if flags & HG_POST != 0 && t % 2 == 0 {
            flags | HG_WRITE_S
        } else {
            flags
        };
        let k = k_for(ty);
        let p = prologue(k, flags, 100 + t as u64);
        let w = random_weights(ty, n, k, 7 + t as u64);
        let wd = dequant(ty, &w, n, k);
        let bias = uniform(30 + t as u64, n, -0.5, 0.5);
        let (hg, hb) = (uniform(31, d, 0.5, 1.5), uniform(32, d, -0.1, 0.1));
        let (cs, sn) = (
            uniform(33, n_rot / 2, -1.0, 1.0),
            uniform(34, n_rot / 2, -1.0, 1.0),
        );
        let row = 3i32 - 5 * (t as i32 % 2); // 3, or -2 (= rows - 2)
                                             // reference
        let mut want = vec![0.0f64; n];
        for j in 0..n {
            let dot: f64 = wd[j * k..(j + 1) * k]
                .iter()
                .zip(&p.xs)
                .map(|(a, b)| a * b)
                .sum();
            want[j] = dot
                + if flags & HG_BIAS != 0 {
                    bias[j] as f64
                } else {
                    0.0
                };
        }
        for h in 0..heads {
            let head = &mut want[h * d..(h + 1) * d];
            if flags & HG_HNORM != 0 {
                let v = rms(head, &hg, &hb, 1e-6);
                head.copy_from_slice(&v);
            }
            if flags & HG_ROPE != 0 {
                let src = head.to_vec();
                for (c, out) in head.iter_mut().enumerate().take(n_rot) {
                    let (pair, first, a, b) = if flags & HG_INTERLEAVED != 0 {
                        let f = c % 2 == 0;
                        let a0 = if f { c } else { c - 1 };
                        (c / 2, f, src[a0], src[a0 + 1])
                    } else {
                        let f = c < n_rot / 2;
                        let a0 = if f { c } else { c - n_rot / 2 };
                        (a0, f, src[a0], src[a0 + n_rot / 2])
                    };
                    let (co, si) = (cs[pair] as f64, sn[pair] as f64);
                    *out = if first {
                        a * co - b * si
                    } else {
                        a * si + b * co
                    };
                }
            }
        }
        let a = HeadGemvArgs {
            k: k as u32,
            n: n as u32,
            head_dim: d as u32,
            row_bytes: ty.row_bytes(k).unwrap() as u32,
            flags,
            n_rot: n_rot as u32,
            cache_rows: rows as u32,
            cache_row: n as u32,
            eps: 1e-5,
            head_eps: 1e-6,
            post_eps: 1e-6,
            ..HeadGemvArgs::default()
        };
        let cache = flags & HG_CACHE != 0;
        let sentinel = 7.5f32;
        let mut dst = enc(&vec![sentinel; if cache { rows * n } else { n }]);
        let mut s_out = enc(&vec![sentinel; k]);
        let mut bufs = p.bufs();
        let (mut wb, mut bb, mut hgb, mut hbb) = (w.clone(), enc(&bias), enc(&hg), enc(&hb));
        let (mut csb, mut snb, mut idx) = (enc(&cs), enc(&sn), row.to_le_bytes().to_vec());
        let [b0, b1, b2, b3, b4, b5] = &mut bufs[..] else {
            unreachable!()
        };
        lib(Family::Quant)
            .dispatch(
                &name,
                a.as_bytes(),
                &mut [
                    b0, b1, b2, b3, b4, b5, &mut s_out, &mut wb, &mut bb, &mut hgb, &mut hbb,
                    &mut csb, &mut snb, &mut idx, &mut dst,
                ],
                Grid::d1(heads as u32, 256),
                &[],
            )
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let got = dec(&dst);
        if cache {
            let r = row.rem_euclid(rows as i32) as usize;
            close(&name, &got[r * n..(r + 1) * n], &want);
            let mut others = got.iter().enumerate().filter(|(i, _)| i / n != r);
            assert!(
                others.all(|(_, &v)| v == sentinel as f64),
                "{name}: other cache rows"
            );
        } else {
            close(&name, &got, &want);
        }
        let s_got = dec(&s_out);
        if flags & HG_WRITE_S != 0 {
            close(&format!("{name} residual"), &s_got, &p.s);
        } else {
            assert!(
                s_got.iter().all(|&v| v == sentinel as f64),
                "{name}: s_out written"
            );
        }
    }
}

#[test]
fn qkv_head_skips_an_out_of_range_cache_row() {
    let ty = GgmlType::Q8_0;
    let (k, n) = (64usize, 32usize);
    let a = HeadGemvArgs {
        k: k as u32,
        n: n as u32,
        head_dim: n as u32,
        row_bytes: ty.row_bytes(k).unwrap() as u32,
        flags: HG_CACHE,
        cache_rows: 2,
        cache_row: n as u32,
        ..HeadGemvArgs::default()
    };
    let x = enc(&uniform(1, k, -1.0, 1.0));
    let mut bufs: Vec<Vec<u8>> = (0..7).map(|_| x.clone()).collect();
    let mut w = random_weights(ty, n, k, 2);
    let mut f = x.clone();
    let (mut f2, mut f3, mut f4, mut f5) = (f.clone(), f.clone(), f.clone(), f.clone());
    let mut idx = 2i32.to_le_bytes().to_vec();
    let mut dst = enc(&vec![1.0; 2 * n]);
    let [b0, b1, b2, b3, b4, b5, b6] = &mut bufs[..] else {
        unreachable!()
    };
    lib(Family::Quant)
        .dispatch(
            "qkv_head_q8_0",
            a.as_bytes(),
            &mut [
                b0, b1, b2, b3, b4, b5, b6, &mut w, &mut f, &mut f2, &mut f3, &mut f4, &mut f5,
                &mut idx, &mut dst,
            ],
            Grid::d1(1, 256),
            &[],
        )
        .unwrap();
    assert!(dec(&dst).iter().all(|&v| v == 1.0));
}

#[test]
fn norm_gate_up_matches_reference_for_every_type() {
    for (t, ty) in ALL_GGML_TYPES.into_iter().enumerate() {
        let name = format!("norm_gate_up_{}", ty.name().to_lowercase());
        let flags = [HG_NORM, HG_NORM | HG_POST, HG_NORM | HG_POST | HG_RAW][t % 3];
        let flags = if flags & HG_POST != 0 && (t / 3) % 2 == 0 {
            flags | HG_WRITE_S
        } else {
            flags
        };
        let op = (t % 3 == 1) as u32;
        let (k, n) = (k_for(ty), if t % 2 == 0 { 37 } else { 70 });
        let p = prologue(k, flags, 200 + t as u64);
        let (gw, uw) = (
            random_weights(ty, n, k, 3 + t as u64),
            random_weights(ty, n, k, 50 + t as u64),
        );
        let (gd, ud) = (dequant(ty, &gw, n, k), dequant(ty, &uw, n, k));
        let want: Vec<f64> = (0..n)
            .map(|j| {
                let dot = |w: &[f64]| -> f64 {
                    w[j * k..(j + 1) * k]
                        .iter()
                        .zip(&p.xs)
                        .map(|(a, b)| a * b)
                        .sum()
                };
                let (g, u) = (dot(&gd), dot(&ud));
                let act = if op == 0 {
                    g / (1.0 + (-g).exp())
                } else {
                    let c = (2.0 / std::f64::consts::PI).sqrt();
                    0.5 * g * (1.0 + (c * (g + 0.044715 * g * g * g)).tanh())
                };
                act * u
            })
            .collect();
        let a = HeadGemvArgs {
            k: k as u32,
            n: n as u32,
            row_bytes: ty.row_bytes(k).unwrap() as u32,
            flags,
            op,
            eps: 1e-5,
            post_eps: 1e-6,
            ..HeadGemvArgs::default()
        };
        let mut bufs = p.bufs();
        bufs.extend([enc(&vec![0.0; k]), gw, uw, enc(&vec![0.0; n])]);
        let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
        lib(Family::Quant)
            .dispatch(
                &name,
                a.as_bytes(),
                &mut refs,
                Grid::d1(n.div_ceil(32) as u32, 256),
                &[],
            )
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        close(&name, &dec(&bufs[9]), &want);
        if flags & HG_WRITE_S != 0 {
            close(&format!("{name} residual"), &dec(&bufs[6]), &p.s);
        } else {
            assert!(
                dec(&bufs[6]).iter().all(|&v| v == 0.0),
                "{name}: s_out written without HG_WRITE_S"
            );
        }
    }
}

#[test]
fn norm_residual_matches_reference() {
    let (rows, h) = (3usize, 77usize);
    let y = uniform(1, rows * h, -2.0, 2.0);
    let res = uniform(2, rows * h, -3.0, 3.0);
    let (g, b) = (uniform(3, h, 0.5, 1.5), uniform(4, h, -0.1, 0.1));
    let mut want = Vec::new();
    for r in 0..rows {
        let yr: Vec<f64> = y[r * h..(r + 1) * h].iter().map(|&v| v as f64).collect();
        let n = rms(&yr, &g, &b, 1e-6);
        want.extend(n.iter().zip(&res[r * h..]).map(|(a, &b)| a + b as f64));
    }
    let a = HeadGemvArgs {
        k: h as u32,
        post_eps: 1e-6,
        ..HeadGemvArgs::default()
    };
    let (mut yb, mut rb, mut gb, mut bb) = (enc(&y), enc(&res), enc(&g), enc(&b));
    let mut out = enc(&vec![0.0; rows * h]);
    lib(Family::NormFused)
        .dispatch(
            "norm_residual_f32",
            a.as_bytes(),
            &mut [&mut yb, &mut rb, &mut gb, &mut bb, &mut out],
            Grid::d1(rows as u32, 96),
            &[],
        )
        .unwrap();
    close("norm_residual", &dec(&out), &want);
}
