//! quant.metal: `gemv_<type>` and `gemm_<type>` for every GGUF type the
//! host's `dequant_matmul_gguf` accepts, against an f64 reference that
//! dequantises with the independent decoder below (written from the ggml
//! `dequantize_row_*` definitions, whole blocks at a time, not from the
//! host's or the kernels' per-chunk code).
//!
//! Weights are random bytes with the scale fields (`d`, `dmin`, `m`)
//! overwritten by f16 values of magnitude 0.004 … 0.05, so every block is
//! valid and finite; float weights are encoded random values. Shapes:
//! m ∈ {1, 3, 8, 17, 40}, k = one block, an odd number of blocks and
//! several blocks (float types: k = 1, 37, 100 … not multiples of 16),
//! n odd (5, 33, 37, partial simdgroup rows and GEMM tiles); f32 and f16 x
//! and dst. The GEMV shapes (m ≤ 8) also run through the GEMM kernel.
//!
//! Tolerance per output: `1e-5 · S + 1e-6` with `S = Σ_e |w_e · x_e|`
//! (f32 decode, one rounding per weight, and f32 accumulation in chains
//! of at most k / 16 + 40 additions: worst case ≈ 50 · 2^-24 · S =
//! 3e-6 · S), plus `2^-11 · |ref|` when dst is f16 (one rounding on
//! store). x in f16 is rounded before the reference sees it, so it adds
//! nothing.

use super::common::{lib, uniform};
use half::f16;
use msl_sim::Grid;
use rlx_ir::GgmlType;
use rlx_metal::metal::args::{KernelArgs, QuantArgs};
use rlx_metal::metal::kernels::Family;

fn h(b: &[u8], at: usize) -> f64 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f64()
}

/// ggml's `get_scale_min_k4`.
fn scale_min_k4(j: usize, q: &[u8]) -> (f64, f64) {
    if j < 4 {
        ((q[j] & 63) as f64, (q[j + 4] & 63) as f64)
    } else {
        let d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        let m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
        (d as f64, m as f64)
    }
}

/// One block of `ty` dequantised (the ggml reference loops, kept index
/// for index).
#[allow(clippy::needless_range_loop)]
fn dequant_block(ty: GgmlType, b: &[u8]) -> Vec<f64> {
    use GgmlType as G;
    let mut y = vec![0f64; ty.block_size()];
    match ty {
        G::F32 => y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
        G::F16 => y[0] = h(b, 0),
        G::BF16 => y[0] = f32::from_bits((u32::from(b[1]) << 24) | (u32::from(b[0]) << 16)) as f64,
        G::Q4_0 | G::Q4_1 => {
            let (d, m, qs) = if ty == G::Q4_0 {
                (h(b, 0), -8.0 * h(b, 0), &b[2..18])
            } else {
                (h(b, 0), h(b, 2), &b[4..20])
            };
            for j in 0..16 {
                y[j] = (qs[j] & 0xF) as f64 * d + m;
                y[j + 16] = (qs[j] >> 4) as f64 * d + m;
            }
        }
        G::Q5_0 | G::Q5_1 => {
            let (d, m, qh, qs) = if ty == G::Q5_0 {
                (h(b, 0), -16.0 * h(b, 0), &b[2..6], &b[6..22])
            } else {
                (h(b, 0), h(b, 2), &b[4..8], &b[8..24])
            };
            let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
            for j in 0..16 {
                let h0 = ((qh >> j) << 4) & 0x10;
                let h1 = (qh >> (j + 12)) & 0x10;
                y[j] = ((qs[j] as u32 & 0xF) | h0) as f64 * d + m;
                y[j + 16] = ((qs[j] as u32 >> 4) | h1) as f64 * d + m;
            }
        }
        G::Q8_0 | G::Q8_1 => {
            let qs = if ty == G::Q8_0 { &b[2..34] } else { &b[4..36] };
            for j in 0..32 {
                y[j] = h(b, 0) * (qs[j] as i8) as f64;
            }
        }
        G::Q8K => {
            let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64;
            for j in 0..256 {
                y[j] = d * (b[4 + j] as i8) as f64;
            }
        }
        G::Q2K => {
            let (sc, d, dmin) = (&b[0..16], h(b, 80), h(b, 82));
            let (mut is, mut o) = (0, 0);
            for n in 0..2 {
                let q = &b[16 + 32 * n..48 + 32 * n];
                for shift in [0, 2, 4, 6] {
                    for half in 0..2 {
                        let s = sc[is];
                        is += 1;
                        let (dl, ml) = (d * (s & 0xF) as f64, dmin * (s >> 4) as f64);
                        for l in 16 * half..16 * half + 16 {
                            y[o] = dl * ((q[l] >> shift) & 3) as f64 - ml;
                            o += 1;
                        }
                    }
                }
            }
        }
        G::Q3K => {
            let (hm, sc, d) = (&b[0..32], &b[96..108], h(b, 108));
            let scale = |i: usize| {
                let lo = if i < 8 { sc[i] & 0xF } else { sc[i - 8] >> 4 };
                let hi = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
                (lo | (hi << 4)) as f64 - 32.0
            };
            let (mut is, mut o, mut mask) = (0, 0, 1u8);
            for n in 0..2 {
                let q = &b[32 + 32 * n..64 + 32 * n];
                for shift in [0, 2, 4, 6] {
                    for half in 0..2 {
                        let dl = d * scale(is);
                        is += 1;
                        for l in 16 * half..16 * half + 16 {
                            let sub = if hm[l] & mask != 0 { 0 } else { 4 };
                            y[o] = dl * (((q[l] >> shift) & 3) as i32 - sub) as f64;
                            o += 1;
                        }
                    }
                    mask <<= 1;
                }
            }
        }
        G::Q4K | G::Q5K => {
            let (d, dmin, sc) = (h(b, 0), h(b, 2), &b[4..16]);
            let (qh, qs) = if ty == G::Q5K {
                (Some(&b[16..48]), &b[48..176])
            } else {
                (None, &b[16..144])
            };
            let (mut u1, mut u2) = (1u8, 2u8);
            for c in 0..4 {
                let (s1, m1) = scale_min_k4(2 * c, sc);
                let (s2, m2) = scale_min_k4(2 * c + 1, sc);
                let q = &qs[32 * c..32 * c + 32];
                for l in 0..32 {
                    let (hb1, hb2) = match qh {
                        Some(qh) => (
                            if qh[l] & u1 != 0 { 16 } else { 0 },
                            if qh[l] & u2 != 0 { 16 } else { 0 },
                        ),
                        None => (0, 0),
                    };
                    y[64 * c + l] = d * s1 * ((q[l] & 0xF) + hb1) as f64 - dmin * m1;
                    y[64 * c + 32 + l] = d * s2 * ((q[l] >> 4) + hb2) as f64 - dmin * m2;
                }
                u1 <<= 2;
                u2 <<= 2;
            }
        }
        G::Q6K => {
            let d = h(b, 208);
            for n in 0..2 {
                let (ql, qh) = (&b[64 * n..64 * n + 64], &b[128 + 32 * n..160 + 32 * n]);
                let sc = |i: usize| (b[192 + 8 * n + i] as i8) as f64;
                for l in 0..32 {
                    let is = l / 16;
                    let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                    let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                    let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                    let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                    y[128 * n + l] = d * sc(is) * q1 as f64;
                    y[128 * n + l + 32] = d * sc(is + 2) * q2 as f64;
                    y[128 * n + l + 64] = d * sc(is + 4) * q3 as f64;
                    y[128 * n + l + 96] = d * sc(is + 6) * q4 as f64;
                }
            }
        }
        G::Q1_0 => {
            for e in 0..128 {
                let bit = (b[2 + e / 8] >> (e % 8)) & 1;
                y[e] = if bit == 1 { h(b, 0) } else { -h(b, 0) };
            }
        }
        G::Q2_0 => {
            for e in 0..128 {
                let q = (b[2 + e / 4] >> (2 * (e % 4))) & 3;
                y[e] = h(b, 0) * (q as f64 - 1.5);
            }
        }
    }
    y
}

/// Byte offsets of the f16 scale fields of a block (f32 `d` for Q8_K).
fn scale_fields(ty: GgmlType) -> &'static [usize] {
    use GgmlType as G;
    match ty {
        G::F32 | G::F16 | G::BF16 | G::Q8K => &[],
        G::Q4_0 | G::Q5_0 | G::Q8_0 | G::Q1_0 | G::Q2_0 => &[0],
        G::Q4_1 | G::Q5_1 | G::Q8_1 | G::Q4K | G::Q5K => &[0, 2],
        G::Q2K => &[80, 82],
        G::Q3K => &[108],
        G::Q6K => &[208],
    }
}

/// `n` rows of `k` elements of valid `ty` data (see the module docs).
pub fn random_weights(ty: GgmlType, n: usize, k: usize, seed: u64) -> Vec<u8> {
    use GgmlType as G;
    let vals = uniform(seed, n * k, -1.0, 1.0);
    match ty {
        G::F32 => return vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        G::F16 => {
            return vals
                .iter()
                .flat_map(|&v| f16::from_f32(v).to_le_bytes())
                .collect()
        }
        G::BF16 => {
            return vals
                .iter()
                .flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes())
                .collect()
        }
        _ => {}
    }
    let blocks = n * k / ty.block_size();
    let bb = ty.block_bytes();
    let raw = uniform(seed ^ 0x5a5a, blocks * bb, 0.0, 256.0);
    let mut w: Vec<u8> = raw.iter().map(|&v| v as u8).collect();
    let scales = uniform(seed ^ 0xa5a5, blocks * 2, 0.004, 0.05);
    for (i, blk) in w.chunks_exact_mut(bb).enumerate() {
        for (f, &at) in scale_fields(ty).iter().enumerate() {
            let s = scales[2 * i + f] * if (i + f) % 3 == 0 { -1.0 } else { 1.0 };
            blk[at..at + 2].copy_from_slice(&f16::from_f32(s).to_le_bytes());
        }
        if ty == G::Q8K {
            blk[0..4].copy_from_slice(&(scales[2 * i] * 0.1).to_le_bytes());
        }
    }
    w
}

/// The whole `[n, k]` weight dequantised by [`dequant_block`].
pub fn dequant(ty: GgmlType, w: &[u8], n: usize, k: usize) -> Vec<f64> {
    let out: Vec<f64> = w
        .chunks_exact(ty.block_bytes())
        .flat_map(|b| dequant_block(ty, b))
        .collect();
    assert_eq!(out.len(), n * k);
    out
}

/// `(ref, S)` per output: `Σ w·x` in f64 and `Σ |w·x|`.
fn reference(wd: &[f64], x: &[f32], m: usize, k: usize, n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut r = Vec::with_capacity(m * n);
    let mut s = Vec::with_capacity(m * n);
    for i in 0..m {
        for j in 0..n {
            let (mut a, mut b) = (0f64, 0f64);
            for e in 0..k {
                let p = wd[j * k + e] * x[i * k + e] as f64;
                a += p;
                b += p.abs();
            }
            r.push(a);
            s.push(b);
        }
    }
    (r, s)
}

fn ks(ty: GgmlType) -> [usize; 3] {
    match ty.block_size() {
        1 => [1, 37, 100],
        bs => [bs, 3 * bs, if bs == 32 { 10 * bs } else { 2 * bs }],
    }
}

/// (m, index into `ks`, n, x_f16, dst_f16).
const CASES: [(usize, usize, usize, bool, bool); 6] = [
    (1, 0, 33, false, false),
    (3, 1, 5, true, false),
    (8, 2, 33, false, true),
    (17, 1, 33, false, false),
    (17, 0, 5, true, true),
    (40, 2, 37, false, false),
];

fn run(kernel: &str, a: QuantArgs, x: &[u8], w: &[u8], gemm: bool) -> Vec<u8> {
    let mut dst = vec![0u8; (a.m * a.n) as usize * if a.dst_f16 == 1 { 2 } else { 4 }];
    let grid = if gemm {
        Grid {
            groups: [a.n.div_ceil(32), a.m.div_ceil(32), 1],
            threads: [128, 1, 1],
        }
    } else {
        Grid::d1(a.n.div_ceil(4), 128)
    };
    let (mut xb, mut wb) = (x.to_vec(), w.to_vec());
    lib(Family::Quant)
        .dispatch(
            kernel,
            a.as_bytes(),
            &mut [&mut xb, &mut wb, &mut dst],
            grid,
            &[],
        )
        .unwrap_or_else(|e| panic!("{kernel}: {e}"));
    dst
}

fn check_type(ty: GgmlType) {
    let name = ty.name().to_lowercase();
    for (c, &(m, ki, n, x_f16, dst_f16)) in CASES.iter().enumerate() {
        let k = ks(ty)[ki];
        let w = random_weights(ty, n, k, 7 + c as u64);
        let wd = dequant(ty, &w, n, k);
        let mut x = uniform(100 + c as u64, m * k, -1.0, 1.0);
        if x_f16 {
            x = x.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
        }
        let xb: Vec<u8> = if x_f16 {
            x.iter()
                .flat_map(|&v| f16::from_f32(v).to_le_bytes())
                .collect()
        } else {
            x.iter().flat_map(|v| v.to_le_bytes()).collect()
        };
        let (want, mag) = reference(&wd, &x, m, k, n);
        let a = QuantArgs {
            m: m as u32,
            k: k as u32,
            n: n as u32,
            row_bytes: ty.row_bytes(k).unwrap() as u32,
            x_f16: x_f16 as u32,
            dst_f16: dst_f16 as u32,
        };
        let paths: &[bool] = if m <= 8 { &[false, true] } else { &[true] };
        for &gemm in paths {
            let kernel = format!("{}_{name}", if gemm { "gemm" } else { "gemv" });
            let out = run(&kernel, a, &xb, &w, gemm);
            let got: Vec<f64> = if dst_f16 {
                out.chunks_exact(2)
                    .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f64())
                    .collect()
            } else {
                out.chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64)
                    .collect()
            };
            for (e, ((&g, &r), &s)) in got.iter().zip(&want).zip(&mag).enumerate() {
                let rel16 = if dst_f16 { r.abs() / 2048.0 } else { 0.0 };
                let tol = 1e-5 * s + 1e-6 + rel16;
                assert!(
                    (g - r).abs() <= tol,
                    "{kernel} m={m} k={k} n={n} x_f16={x_f16} dst_f16={dst_f16} \
                     [{}, {}]: got {g}, want {r} (tol {tol:e})",
                    e / n,
                    e % n
                );
            }
        }
    }
}

crate::ggml_type_tests! {
    f32_rows => F32,
    f16_rows => F16,
    bf16_rows => BF16,
    q4_0 => Q4_0,
    q4_1 => Q4_1,
    q5_0 => Q5_0,
    q5_1 => Q5_1,
    q8_0 => Q8_0,
    q8_1 => Q8_1,
    q2_k => Q2K,
    q3_k => Q3K,
    q4_k => Q4K,
    q5_k => Q5K,
    q6_k => Q6K,
    q8_k => Q8K,
    q1_0 => Q1_0,
    q2_0 => Q2_0,
}

/// The decoder agrees with gguf's layout on a hand-built Q4_0 block
/// (scale 0.5, codes 0..15 then 15..0): w = 0.5·(q − 8).
#[test]
fn decoder_reads_a_known_q4_0_block() {
    let mut b = vec![0u8; 18];
    b[0..2].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
    for j in 0..16 {
        b[2 + j] = (j as u8) | ((15 - j as u8) << 4);
    }
    let y = dequant_block(GgmlType::Q4_0, &b);
    for j in 0..16 {
        assert_eq!(y[j], 0.5 * (j as f64 - 8.0));
        assert_eq!(y[16 + j], 0.5 * (7.0 - j as f64));
    }
}

/// The reference decoder and the host's row decoder
/// (`rlx_metal::host::kernels::quant::dequantize_rows`) agree on every
/// type (to f32 rounding of the host's products), so the kernels, the
/// host and this file read the same format.
#[test]
fn decoder_agrees_with_the_host_decoder() {
    use rlx_ir::quant::ALL_GGML_TYPES;
    for ty in ALL_GGML_TYPES {
        let (n, k) = (3, ks(ty)[1]);
        let w = random_weights(ty, n, k, 99);
        let mine = dequant(ty, &w, n, k);
        let mut host = vec![0f32; n * k];
        rlx_metal::host::kernels::quant::dequantize_rows(ty, &w, n, &[0, 1, 2], k, &mut host)
            .unwrap();
        for (e, (&a, &b)) in mine.iter().zip(&host).enumerate() {
            assert!(
                (a - b as f64).abs() <= 1e-6 * (1.0 + a.abs()),
                "{ty:?}[{e}]: {a} vs {b}"
            );
        }
    }
}
