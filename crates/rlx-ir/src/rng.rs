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
//!   transform (cos branch) on the uniforms at `2i` and `2i + 1`, evaluated
//!   in f32 exactly as the Metal kernel does.
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

/// Box–Muller (cos branch) in f32: `sqrt(-2 ln(1 - u1)) · cos(2π u2)`.
/// `1 - u1` is exact and in `(0, 1]`, so the log is finite.
pub fn box_muller(u1: f32, u2: f32) -> f32 {
    let r = (-2.0f32 * (1.0f32 - u1).ln()).sqrt();
    r * (std::f32::consts::TAU * u2).cos()
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
