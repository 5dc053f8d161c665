//! Counter-based random numbers, reproducible on every device.
//!
//! Element `i` of a fill with key `key` is a pure function of `(key, i)`, so
//! the host kernels, the Metal kernels and the numpy reference produce the
//! same bits regardless of how the work is split. The mixer is SplitMix64
//! (Steele, Lea & Flood, "Fast splittable pseudorandom number generators",
//! OOPSLA 2014); normals use the Box–Muller transform on the uniforms at
//! `2i` and `2i + 1`.

use serde::{Deserialize, Serialize};

/// Graph-wide random-number settings: the base seed and a counter that
/// advances every run so that repeated runs draw fresh numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RngOptions {
    /// Base seed.
    pub seed: u64,
    /// Number of runs so far (mixed into each op's key).
    pub counter: u64,
}

impl RngOptions {
    /// Key for one op: mixes the base seed, the run counter and the op's
    /// own id (node index or user seed).
    pub fn key_for(&self, op_id: u64) -> u64 {
        splitmix64(
            splitmix64(self.seed ^ 0x9E37_79B9_7F4A_7C15) ^ self.counter.rotate_left(32) ^ op_id,
        )
    }
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
