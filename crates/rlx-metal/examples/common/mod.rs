//! Helpers shared by the timing examples (`attn_bwd_bench`, `sdpa_bench`,
//! `gemv_bench`):
//! deterministic inputs, the repetition count and median timing. A
//! directory module without a `main.rs`, so cargo does not build it as an
//! example of its own.

// each example compiles its own copy of this module and uses a subset
#![allow(dead_code)]

use std::time::Instant;

/// Deterministic values in `[-1, 1)` (xorshift).
pub fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// The middle value of `v` (the upper one of an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `RLX_BENCH_REPS` (default 9, at least 1).
pub fn reps() -> usize {
    std::env::var("RLX_BENCH_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(9)
        .max(1)
}

/// Median milliseconds of `f` over `reps` calls after a warm-up.
pub fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    let times: Vec<f64> = (0..=reps)
        .map(|_| {
            let t0 = Instant::now();
            f();
            t0.elapsed().as_secs_f64() * 1e3
        })
        .skip(1)
        .collect();
    median(times)
}
