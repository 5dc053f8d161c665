//! Read bandwidth of this machine: `membw [MIB] [THREADS] [REPS]`.
//!
//! Allocates one buffer of `MIB` MiB (default 2048), writes every page once,
//! then splits it into `THREADS` equal contiguous slices (default 2), one per
//! thread; each repetition every thread reads its whole slice (sums it with
//! 32 independent `u64` accumulators: explicit 512-bit loads where the CPU
//! has AVX-512, the auto-vectorised scalar loop elsewhere), the threads meeting at a barrier
//! before and after. A repetition's figure is the buffer's bytes divided by the
//! wall time between the two barriers. Prints one JSON line: `mib`, `threads`,
//! `reps`, `gbs` (every repetition, GB/s = 1e9 bytes/s), `median_gbs`, `max_gbs`.
//!
//! Built and run by `bench/harness.py` (`rustc -O -C target-cpu=native -C
//! target-feature=-prefer-256-bit`: 512-bit loads on AVX-512 CPUs); it is
//! not part of the cargo workspace.

use std::sync::{Arc, Barrier};
use std::time::Instant;

fn arg(i: usize, default: usize) -> usize {
    std::env::args()
        .nth(i)
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Sum of `xs` with 32 independent accumulators (no loop-carried chain).
///
/// On x86-64 with AVX-512 the loop is written with explicit 512-bit loads:
/// left to the auto-vectoriser, LLVM turns the 32 lanes into gathers on
/// `znver4` (AMD Zen 4), which read at a fifth of the memory's speed.
fn read_all(xs: &[u64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512 F (checked just above).
            return unsafe { read_all_avx512(xs) };
        }
    }
    read_all_scalar(xs)
}

fn read_all_scalar(xs: &[u64]) -> u64 {
    let mut acc = [0u64; 32];
    let mut chunks = xs.chunks_exact(32);
    for c in &mut chunks {
        for j in 0..32 {
            acc[j] = acc[j].wrapping_add(c[j]);
        }
    }
    let tail: u64 = chunks.remainder().iter().fold(0, |a, &x| a.wrapping_add(x));
    acc.iter().fold(tail, |a, &x| a.wrapping_add(x))
}

/// Four 512-bit accumulators, one 256-byte block (four cache lines) per step.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn read_all_avx512(xs: &[u64]) -> u64 {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_setzero_si512(); 4];
    let mut chunks = xs.chunks_exact(32);
    for c in &mut chunks {
        let p = c.as_ptr();
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: `c` holds 32 u64, so p + 8k .. p + 8k + 8 is in bounds.
            let v = unsafe { _mm512_loadu_si512(p.add(8 * k).cast()) };
            *a = _mm512_add_epi64(*a, v);
        }
    }
    let tail: u64 = chunks.remainder().iter().fold(0, |a, &x| a.wrapping_add(x));
    let all = _mm512_add_epi64(_mm512_add_epi64(acc[0], acc[1]), _mm512_add_epi64(acc[2], acc[3]));
    tail.wrapping_add(_mm512_reduce_add_epi64(all) as u64)
}

fn main() {
    let mib = arg(1, 2048).max(1);
    let threads = arg(2, 2).max(1);
    let reps = arg(3, 10).max(1);
    let words = mib * (1 << 20) / 8;
    let buf: Arc<Vec<u64>> = Arc::new((0..words as u64).collect());
    let per = words / threads;
    let start = Arc::new(Barrier::new(threads + 1));
    let done = Arc::new(Barrier::new(threads + 1));
    let mut handles = Vec::new();
    for t in 0..threads {
        let (buf, start, done) = (Arc::clone(&buf), Arc::clone(&start), Arc::clone(&done));
        handles.push(std::thread::spawn(move || {
            let slice = &buf[t * per..(t + 1) * per];
            let mut sink = 0u64;
            for _ in 0..reps + 1 {
                start.wait();
                sink = sink.wrapping_add(read_all(std::hint::black_box(slice)));
                done.wait();
            }
            sink
        }));
    }
    let bytes = (per * threads * 8) as f64;
    let mut gbs = Vec::new();
    for r in 0..reps + 1 {
        start.wait();
        let t0 = Instant::now();
        done.wait();
        let secs = t0.elapsed().as_secs_f64();
        if r > 0 {
            // repetition 0 warms the TLB and the caches' state
            gbs.push(bytes / secs / 1e9);
        }
    }
    let sink = handles
        .into_iter()
        .fold(0u64, |a, h| a.wrapping_add(h.join().unwrap_or(0)));
    let mut sorted = gbs.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let median = sorted[sorted.len() / 2];
    let max = sorted[sorted.len() - 1];
    let list: Vec<String> = gbs.iter().map(|g| format!("{g:.2}")).collect();
    println!(
        "{{\"mib\": {mib}, \"threads\": {threads}, \"reps\": {reps}, \"gbs\": [{}], \
         \"median_gbs\": {median:.2}, \"max_gbs\": {max:.2}, \"sink\": {}}}",
        list.join(", "),
        sink % 2
    );
}
