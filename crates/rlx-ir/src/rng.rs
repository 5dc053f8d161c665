//! Counter-based random numbers, reproducible on every device.
//!
//! Element `i` of a fill is a pure function of `(key, offset, i)`, so the
//! host kernels, the Metal kernels and the numpy reference produce the same
//! bits regardless of how the work is split (thread count, threadgroups).
//!
//! * Random fills (`rng_normal` / `rng_uniform`) use Philox 4x32-10 (Salmon,
//!   Moraes, Dror & Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3",
//!   SC 2011): word `i` of the stream is lane `i mod 4` of the block with
//!   counter `[lo(i/4), hi(i/4), lo(offset), hi(offset)]` and key
//!   `[lo(key), hi(key)]`. Uniforms are the top 24 bits of a word times
//!   2^-24 (exact in f32, in `[0, 1)`); normals use the Box–Muller
//!   transform (cos branch) on the uniforms at `2i` and `2i + 1`, with an
//!   explicit f32 log and cos ([`log_f32`], [`cos_turn24`]) that the Metal
//!   kernel and the numpy reference evaluate in the same operation order,
//!   so normals are bit-identical too (no platform libm involved).
//! * The sampler (`Sample`) keeps its SplitMix64 stream (Steele, Lea &
//!   Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014).

use serde::{Deserialize, Serialize};

/// Graph-wide random-number settings: the base seed (which, with the
/// node id, gives each fill its Philox key) and the counter (the upper 64
/// bits of every Philox counter, the "offset" of the stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RngOptions {
    /// Base seed.
    pub seed: u64,
    /// Stream offset: counter words 2 and 3 of every Philox block.
    pub counter: u64,
}

impl RngOptions {
    /// Philox key of a fill without its own seed: mixes the base seed and
    /// the op's id (node index), so two fills of one graph differ.
    pub fn key_for(&self, op_id: u64) -> u64 {
        splitmix64(splitmix64(self.seed ^ 0x9E37_79B9_7F4A_7C15) ^ op_id)
    }
}

/// Philox 4x32 multipliers (Salmon et al. 2011, table 2).
const PHILOX_M: [u32; 2] = [0xD251_1F53, 0xCD9E_8D57];
/// Philox 4x32 Weyl key increments (golden ratio, sqrt(3) - 1).
const PHILOX_W: [u32; 2] = [0x9E37_79B9, 0xBB67_AE85];

/// Philox 4x32-10: ten rounds of the Philox S-box over counter `ctr` with
/// key `key` (the key is bumped by the Weyl constants between rounds).
pub fn philox4x32_10(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let [mut c0, mut c1, mut c2, mut c3] = ctr;
    let [mut k0, mut k1] = key;
    for round in 0..10 {
        if round > 0 {
            k0 = k0.wrapping_add(PHILOX_W[0]);
            k1 = k1.wrapping_add(PHILOX_W[1]);
        }
        let p0 = u64::from(PHILOX_M[0]) * u64::from(c0);
        let p1 = u64::from(PHILOX_M[1]) * u64::from(c2);
        let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
        let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
        (c0, c1, c2, c3) = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0);
    }
    [c0, c1, c2, c3]
}

/// The Philox block holding stream word `4·block .. 4·block + 3`.
pub fn philox_block(key: u64, offset: u64, block: u64) -> [u32; 4] {
    philox4x32_10(
        [
            block as u32,
            (block >> 32) as u32,
            offset as u32,
            (offset >> 32) as u32,
        ],
        [key as u32, (key >> 32) as u32],
    )
}

/// Word `i` of the Philox stream `(key, offset)`.
pub fn philox_word(key: u64, offset: u64, i: u64) -> u32 {
    philox_block(key, offset, i / 4)[(i % 4) as usize]
}

/// A stream word as a uniform f32 in `[0, 1)`: its top 24 bits · 2^-24.
pub fn word_to_uniform(w: u32) -> f32 {
    (w >> 8) as f32 * (1.0 / 16_777_216.0)
}

/// Coefficients of `P` in `ln(1 + f) ≈ f − f²/2 + f³·P(f)` on
/// `[√½ − 1, √2 − 1]` (degree 8, fitted to the relative error of `ln(1 + f)`
/// by reweighted least squares, ≤ 7.5e-10 before rounding to f32).
const LOG_P: [f32; 9] = [
    3.333_331_3e-1,
    -2.500_001e-1,
    2.000_211_9e-1,
    -1.666_799_6e-1,
    1.421_955_1e-1,
    -1.240_559_15e-1,
    1.188_817_5e-1,
    -1.167_564_1e-1,
    6.746_601e-2,
];
/// `ln 2` split: the high part (0.693359375) has 9 significant bits, so
/// `e · LN2_HI` is exact for every f32 exponent `e`.
const LN2_HI: f32 = 355.0 / 512.0;
/// `ln 2 − LN2_HI`, rounded to f32.
const LN2_LO: f32 = -2.121_944_4e-4;
/// Taylor coefficients `(−1)^k / (2k + 1)!` of `sin t / t − 1` in `t²`.
const SIN_P: [f32; 4] = [-1.666_666_7e-1, 8.333_334e-3, -1.984_127e-4, 2.755_731_9e-6];
/// Taylor coefficients `(−1)^k / (2k)!`, `k ≥ 1`, of `(cos t − 1) / t²` in `t²`.
const COS_P: [f32; 5] = [
    -5.0e-1,
    4.166_666_8e-2,
    -1.388_888_9e-3,
    2.480_158_8e-5,
    -2.755_732e-7,
];
/// `2π / 2^24` rounded to f32: one step of a 24-bit angle.
const ANGLE_STEP: f32 = 3.745_070_4e-7;

/// Natural log of a positive normal f32, as an explicit f32 polynomial
/// evaluated in a fixed operation order (no fused multiply-add), so that
/// the host, the Metal kernel (`rng.metal`) and the numpy reference
/// (`rlx.reference.rng`) round identically. `x = 2^e · m` with
/// `m ∈ [√½, √2)` (exact bit manipulation), `f = m − 1` (exact), then
/// `((f·f²)·P(f) + e·LN2_LO − ½f²) + f + e·LN2_HI`; within 0.85 ulp of
/// `ln x` on every input of [`box_muller`] (`k · 2^-24`, `1 ≤ k ≤ 2^24`).
pub fn log_f32(x: f32) -> f32 {
    let b = x.to_bits();
    let mut e = (b >> 23) as i32 - 127;
    let mut m = f32::from_bits((b & 0x007F_FFFF) | 0x3F80_0000);
    if m > core::f32::consts::SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    let f = m - 1.0;
    let ef = e as f32;
    let mut p = LOG_P[8];
    for c in LOG_P[..8].iter().rev() {
        p = p * f + c;
    }
    let z = f * f;
    let mut y = f * z * p;
    y += ef * LN2_LO;
    y -= 0.5 * z;
    let r = f + y;
    r + ef * LN2_HI
}

/// `cos(2π k / 2^24)` for a 24-bit `k` (higher bits are ignored), in f32 with an exact range
/// reduction: `q = round(k / 2^22)` (the quadrant), `t = (k − q·2^22) ·
/// ANGLE_STEP ∈ [−π/4, π/4]`, then `cos t`, `−sin t`, `−cos t` or `sin t`
/// for `q mod 4` from Taylor polynomials (Horner, no fused multiply-add).
/// Absolute error ≤ 1.7 · 2^-24 over all `2^24` inputs; exact at the
/// quarter turns.
pub fn cos_turn24(k: u32) -> f32 {
    let k = k & 0x00FF_FFFF;
    let q = (k + (1 << 21)) >> 22;
    let r = k as i32 - (q << 22) as i32;
    let t = r as f32 * ANGLE_STEP;
    let z = t * t;
    let mut s = SIN_P[3];
    for c in SIN_P[..3].iter().rev() {
        s = s * z + c;
    }
    let sin = t + t * z * s;
    let mut c = COS_P[4];
    for k in COS_P[..4].iter().rev() {
        c = c * z + k;
    }
    let cos = 1.0 + z * c;
    match q & 3 {
        0 => cos,
        1 => -sin,
        2 => -cos,
        _ => sin,
    }
}

/// Box–Muller (cos branch) in f32: `sqrt(−2 ln(1 − u1)) · cos(2π u2)` with
/// [`log_f32`] and [`cos_turn24`] (`u2 = k · 2^-24`, so `2π u2` is reduced
/// exactly). `1 − u1` is exact and in `(0, 1]`, so the log is finite.
pub fn box_muller(u1: f32, u2: f32) -> f32 {
    let r = (-2.0f32 * log_f32(1.0f32 - u1)).sqrt();
    // u2 is a 24-bit integer times 2^-24: the product is exact
    r * cos_turn24((u2 * 16_777_216.0) as u32)
}

/// Uniform element `i` of the Philox stream `(key, offset)`.
pub fn philox_uniform(key: u64, offset: u64, i: u64) -> f32 {
    word_to_uniform(philox_word(key, offset, i))
}

/// Standard-normal element `i`: Box–Muller on stream words `2i`, `2i + 1`
/// (lanes `2(i mod 2)`, `2(i mod 2) + 1` of block `i / 2`).
pub fn philox_normal(key: u64, offset: u64, i: u64) -> f32 {
    let b = philox_block(key, offset, i / 2);
    let lane = 2 * (i % 2) as usize;
    box_muller(word_to_uniform(b[lane]), word_to_uniform(b[lane + 1]))
}

/// One SplitMix64 finalisation step.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Uniform f32 in `[0, 1)` for element `i`: the top 24 bits of the mix.
pub fn uniform_at(key: u64, i: u64) -> f32 {
    let bits = splitmix64(key ^ i.wrapping_mul(0xD1B5_4A32_D192_ED03)) >> 40;
    bits as f32 * (1.0 / 16_777_216.0)
}

/// Standard normal for element `i` (Box–Muller on uniforms `2i`, `2i + 1`).
pub fn normal_at(key: u64, i: u64) -> f32 {
    let u1 = uniform_at(key, 2 * i) as f64;
    let u2 = uniform_at(key, 2 * i + 1) as f64;
    let r = (-2.0 * (1.0 - u1).ln()).sqrt();
    (r * (std::f64::consts::TAU * u2).cos()) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// See `log_and_cos_checksums` (and `tests/test_rng.py`).
    const LOG_CHECKSUM: u64 = 0xa6bb_a4fb_2fd9_db4e;
    const COS_CHECKSUM: u64 = 0x577c_e323_71e6_1a01;

    /// Random123's published known-answer vectors for Philox4x32-10
    /// (kat_vectors: zero, all-ones, and the digits of pi).
    #[test]
    fn philox_known_answers() {
        let kat = [
            (
                [0; 4],
                [0; 2],
                [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8],
            ),
            (
                [u32::MAX; 4],
                [u32::MAX; 2],
                [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd],
            ),
            (
                [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
                [0xa409_3822, 0x299f_31d0],
                [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1],
            ),
        ];
        for (ctr, key, want) in kat {
            assert_eq!(philox4x32_10(ctr, key), want, "ctr {ctr:x?} key {key:x?}");
        }
        // the stream layout: block counter low words first, offset high
        assert_eq!(philox_word(0, 0, 2), 0xbc57_ac4c);
        let pi_key = 0x299f_31d0_a409_3822;
        let pi_block = 0x85a3_08d3_243f_6a88;
        let pi_off = 0x0370_7344_1319_8a2e;
        assert_eq!(philox_block(pi_key, pi_off, pi_block)[3], 0x2412_6ea1);
    }

    /// The same vectors through [`philox_block`]: counter words 0, 1 are
    /// the block index, words 2, 3 the offset, the key words the key.
    #[test]
    fn philox_block_known_answers() {
        let w = |lo: u32, hi: u32| u64::from(lo) | (u64::from(hi) << 32);
        let kat: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
            (
                [0; 4],
                [0; 2],
                [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8],
            ),
            (
                [u32::MAX; 4],
                [u32::MAX; 2],
                [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd],
            ),
            (
                [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
                [0xa409_3822, 0x299f_31d0],
                [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1],
            ),
        ];
        for (c, k, want) in kat {
            let got = philox_block(w(k[0], k[1]), w(c[2], c[3]), w(c[0], c[1]));
            assert_eq!(got, want, "ctr {c:x?} key {k:x?}");
            // the stream words of the block, where its index is addressable
            for (lane, word) in (0u64..).zip(want) {
                if let Some(i) = w(c[0], c[1]).checked_mul(4).map(|b| b + lane) {
                    assert_eq!(philox_word(w(k[0], k[1]), w(c[2], c[3]), i), word);
                }
            }
        }
    }

    /// The explicit log / cos against f64 libm on a stride of their whole
    /// input sets (every `k · 2^-24`), plus the ends.
    #[test]
    fn log_and_cos_accuracy() {
        let ulp = |v: f64| {
            let a = v.abs() as f32;
            f64::from(f32::from_bits(a.to_bits() + 1)) - f64::from(a)
        };
        let mut worst_log = 0.0f64;
        let mut worst_cos = 0.0f64;
        let ks = (1u32..=1 << 24)
            .step_by(97)
            .chain([1, 2, 3, (1 << 24) - 1, 1 << 24]);
        for k in ks {
            let x = k as f32 / 16_777_216.0;
            let want = f64::from(x).ln();
            if want != 0.0 {
                let e = (f64::from(log_f32(x)) - want).abs() / ulp(want);
                worst_log = worst_log.max(e);
            } else {
                assert_eq!(log_f32(x), 0.0);
            }
            let kc = k & 0x00FF_FFFF;
            let wc = (std::f64::consts::TAU * f64::from(kc) / 16_777_216.0).cos();
            worst_cos = worst_cos.max((f64::from(cos_turn24(kc)) - wc).abs());
        }
        assert!(worst_log <= 0.9, "log {worst_log} ulp");
        assert!(worst_cos <= 1.7 / 16_777_216.0, "cos {worst_cos}");
        assert_eq!(
            [0, 1 << 22, 2 << 22, 3 << 22].map(cos_turn24),
            [1.0, -0.0, -1.0, 0.0]
        );
    }

    /// A checksum of the bits of [`log_f32`] on `k · 2^-24` and of
    /// [`cos_turn24`] on `k` for every 13th `k` (`1 ≤ k ≤ 2^24`; 1.3 M
    /// inputs each, all residues of the low bits): `Σ bits_i · (2i + 1)
    /// mod 2^64`. tests/test_rng.py checks the numpy reference against the
    /// same two constants, so the two agree bit for bit on those inputs.
    #[test]
    fn log_and_cos_checksums() {
        let sum = |bits: &mut dyn Iterator<Item = u32>| {
            (0u64..).zip(bits).fold(0u64, |h, (i, b)| {
                h.wrapping_add(u64::from(b).wrapping_mul(2 * i + 1))
            })
        };
        let ks = || (1u32..=1 << 24).step_by(13);
        let log = sum(&mut ks().map(|k| log_f32(k as f32 / 16_777_216.0).to_bits()));
        let cos = sum(&mut ks().map(|k| cos_turn24(k).to_bits()));
        assert_eq!(
            (log, cos),
            (LOG_CHECKSUM, COS_CHECKSUM),
            "{log:#x} {cos:#x}"
        );
    }

    #[test]
    fn philox_moments() {
        let n = 100_000u64;
        let us: Vec<f64> = (0..n).map(|i| philox_uniform(5, 0, i) as f64).collect();
        let mean = us.iter().sum::<f64>() / n as f64;
        assert!((mean - 0.5).abs() < 0.005, "{mean}");
        assert!(us.iter().all(|u| (0.0..1.0).contains(u)));
        let zs: Vec<f64> = (0..n).map(|i| philox_normal(5, 1, i) as f64).collect();
        let m = zs.iter().sum::<f64>() / n as f64;
        let v = zs.iter().map(|z| (z - m) * (z - m)).sum::<f64>() / n as f64;
        assert!(m.abs() < 0.02 && (v - 1.0).abs() < 0.03, "{m} {v}");
    }

    #[test]
    fn uniform_moments() {
        let n = 100_000u64;
        let mean: f64 = (0..n).map(|i| uniform_at(7, i) as f64).sum::<f64>() / n as f64;
        assert!((mean - 0.5).abs() < 0.01, "{mean}");
        assert!((0..n).all(|i| (0.0..1.0).contains(&uniform_at(7, i))));
    }

    #[test]
    fn normal_moments() {
        let n = 100_000u64;
        let xs: Vec<f64> = (0..n).map(|i| normal_at(3, i) as f64).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
        assert!(
            mean.abs() < 0.02 && (var - 1.0).abs() < 0.03,
            "{mean} {var}"
        );
    }
}
