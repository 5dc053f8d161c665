//! Micro-benchmark of the decode GEMVs (`m = 1 … 8`) over packed GGUF rows:
//! GB/s of packed weight bytes streamed per call, beside a plain read of
//! the same number of bytes (the machine's streaming bandwidth with the
//! decode team's threads).
//!
//! ```text
//! cargo run --release -p rlx-metal --example gemv_bench -- [SPEC ...]
//! SPEC = TYPE:K:N[:m|:gateup|:down]   e.g. q4_k:4864:896:down  q8_0:640:262144
//! ```
//!
//! Without specs it runs the three bench models' decode shapes. Each shape
//! cycles over enough copies of its weight (≥ `RLX_BENCH_MB`, default 256
//! MiB) that the bytes come from memory as in a model, not from the caches.
//! Timings are medians of `RLX_BENCH_REPS` (default 7) passes, the 256-bit
//! and the 512-bit integer-dot kernels alternating pass by pass; with
//! `RLX_NUM_THREADS=1` they are the thread's CPU time (so other processes
//! on a shared machine do not count), else wall time. Not asserted anywhere.

mod common;

use common::median;
use std::time::Instant;

use half::f16;
use rlx_ir::GgmlType;
use rlx_metal::host::kernels::quant::{
    dequant_matmul, down_residual_gemv, gate_up_gemv, set_wide_int_dots, Act, Gating, Out,
};
use rlx_metal::host::team;

/// Deterministic bytes (xorshift).
fn rand_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 32) as u8
        })
        .collect()
}

/// Packed rows with random codes and small finite f16 scales.
fn rand_rows(ty: GgmlType, rows: usize, k: usize, seed: u64) -> Vec<u8> {
    use GgmlType::*;
    let bb = ty.block_bytes();
    let nb = rows * k / ty.block_size();
    let mut b = rand_bytes(nb * bb, seed);
    let fields: &[usize] = match ty {
        Q4_0 | Q5_0 | Q8_0 => &[0],
        Q4_1 | Q5_1 | Q8_1 | Q4K | Q5K => &[0, 2],
        Q2K => &[80, 82],
        Q3K => &[108],
        Q6K => &[208],
        _ => &[],
    };
    for blk in b.chunks_exact_mut(bb) {
        for &at in fields {
            blk[at..at + 2].copy_from_slice(&f16::from_f32(0.01).to_le_bytes());
        }
    }
    b
}

fn parse_ty(s: &str) -> Option<GgmlType> {
    use GgmlType::*;
    Some(match s {
        "q4_0" => Q4_0,
        "q4_1" => Q4_1,
        "q5_0" => Q5_0,
        "q5_1" => Q5_1,
        "q8_0" => Q8_0,
        "q2_k" => Q2K,
        "q3_k" => Q3K,
        "q4_k" => Q4K,
        "q5_k" => Q5K,
        "q6_k" => Q6K,
        "f16" => F16,
        _ => return None,
    })
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// This thread's CPU time in seconds (`/proc/thread-self/schedstat`), or
/// `None` where it cannot be read.
fn thread_cpu() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: f64 = s.split_whitespace().next()?.parse().ok()?;
    Some(ns * 1e-9)
}

/// Seconds now: this thread's CPU time when `cpu` (single-threaded runs on
/// a shared machine), else wall time.
fn now(cpu: bool, t0: Instant) -> f64 {
    if cpu {
        thread_cpu().unwrap_or_else(|| t0.elapsed().as_secs_f64())
    } else {
        t0.elapsed().as_secs_f64()
    }
}

/// Median seconds of one pass of `f` over every copy, with the 256-bit
/// (`false`) and 512-bit (`true`) integer-dot kernels in alternation.
fn time_passes(reps: usize, copies: usize, cpu: bool, mut f: impl FnMut(usize)) -> [f64; 2] {
    let t0 = Instant::now();
    (0..copies).for_each(&mut f);
    let mut v = [Vec::new(), Vec::new()];
    for _ in 0..reps {
        for (wide, times) in v.iter_mut().enumerate() {
            set_wide_int_dots(wide == 1);
            let t = now(cpu, t0);
            (0..copies).for_each(&mut f);
            times.push((now(cpu, t0) - t) / copies as f64);
        }
    }
    set_wide_int_dots(true);
    let [a, b] = v;
    [median(a), median(b)]
}

/// Streaming read bandwidth (GB/s) over `bytes` with the decode team.
fn read_bandwidth(bytes: usize, reps: usize, cpu: bool) -> f64 {
    let buf = rand_bytes(bytes, 3);
    let chunk = 64 << 10;
    let chunks = bytes / chunk;
    let sink = std::sync::atomic::AtomicU64::new(0);
    let [secs, _] = time_passes(reps, 1, cpu, |_| {
        team::for_each(chunks, &|c| {
            let s = &buf[c * chunk..(c + 1) * chunk];
            let mut acc = [0u64; 8];
            for w in s.chunks_exact(64) {
                for (a, b) in acc.iter_mut().zip(w.chunks_exact(8)) {
                    *a ^= u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
                }
            }
            sink.fetch_xor(
                acc.iter().fold(0, |x, &y| x ^ y),
                std::sync::atomic::Ordering::Relaxed,
            );
        })
    });
    std::hint::black_box(sink.load(std::sync::atomic::Ordering::Relaxed));
    bytes as f64 / secs / 1e9
}

fn bench(spec: &str, mb: usize, reps: usize, cpu: bool) {
    let parts: Vec<&str> = spec.split(':').collect();
    let (Some(ty), Some(k), Some(n)) = (
        parts.first().and_then(|s| parse_ty(s)),
        parts.get(1).and_then(|s| s.parse::<usize>().ok()),
        parts.get(2).and_then(|s| s.parse::<usize>().ok()),
    ) else {
        eprintln!("bad spec {spec}");
        return;
    };
    let mode = parts.get(3).copied().unwrap_or("1");
    let Some(rb) = ty.row_bytes(k) else {
        eprintln!("{spec}: k not whole blocks");
        return;
    };
    let mats = if mode == "gateup" { 2 } else { 1 };
    let bytes = n * rb * mats;
    let copies = (mb << 20).div_ceil(bytes).max(1);
    let ws: Vec<Vec<u8>> = (0..copies * mats)
        .map(|c| rand_rows(ty, n, k, 11 + c as u64))
        .collect();
    let m = mode.parse::<usize>().unwrap_or(1);
    let x: Vec<f32> = rand_bytes(m * k * 4, 5)
        .chunks_exact(4)
        .map(|b| f32::from(b[0]) / 128.0 - 1.0)
        .collect();
    let res = vec![0.5f32; n];
    let mut out = vec![0f32; m * n];
    let [old, new] = time_passes(reps, copies, cpu, |c| match mode {
        "gateup" => gate_up_gemv(
            ty,
            Act::F32(&x),
            &ws[2 * c],
            &ws[2 * c + 1],
            Out::F32(&mut out),
            k,
            n,
            Gating::Silu,
        )
        .unwrap_or(()),
        "down" => down_residual_gemv(
            ty,
            Act::F32(&x),
            &ws[c],
            Act::F32(&res),
            Out::F32(&mut out),
            k,
            n,
        )
        .unwrap_or(()),
        _ => dequant_matmul(ty, Act::F32(&x), &ws[c], Out::F32(&mut out), m, k, n).unwrap_or(()),
    });
    let gbs = |t: f64| bytes as f64 / t / 1e9;
    println!(
        "{spec:<24} {:>6.2} MB  256-bit {:>8.1} us {:>6.2} GB/s | 512-bit {:>8.1} us {:>6.2} GB/s | x{:.2}",
        bytes as f64 / 1e6,
        old * 1e6,
        gbs(old),
        new * 1e6,
        gbs(new),
        old / new
    );
}

const MODEL_SPECS: &[&str] = &[
    // SmolLM2-135M Q4_1 (head Q8_0)
    "q4_1:576:576",
    "q4_1:576:192",
    "q4_1:576:1536:gateup",
    "q4_1:1536:576:down",
    "q8_0:576:49152",
    // Gemma3-270M Q4_K_M
    "q5_0:640:1024",
    "q8_0:640:256",
    "q4_k:1024:640",
    "q5_0:640:2048:gateup",
    "q8_0:640:2048:gateup",
    "q6_k:2048:640:down",
    "q4_k:2048:640:down",
    "q8_0:640:262144",
    // Qwen2.5-0.5B Q4_K_M
    "q5_0:896:896",
    "q8_0:896:128",
    "q5_0:896:4864:gateup",
    "q8_0:896:4864:gateup",
    "q4_k:4864:896:down",
    "q6_k:4864:896:down",
    "q8_0:896:151936",
    // batched decode
    "q4_k:1024:4864:4",
    "q8_0:896:4864:8",
];

fn main() {
    let mb = env_usize("RLX_BENCH_MB", 256);
    let reps = env_usize("RLX_BENCH_REPS", 7);
    let args: Vec<String> = std::env::args().skip(1).collect();
    // single-threaded runs time this thread's CPU, not the wall clock
    let cpu = team::threads() == 1 && std::env::var("RLX_BENCH_WALL").is_err();
    println!(
        "team threads {}; plain read {:.2} GB/s",
        team::threads(),
        read_bandwidth(mb << 20, reps, cpu)
    );
    if args.is_empty() {
        MODEL_SPECS.iter().for_each(|s| bench(s, mb, reps, cpu));
    } else {
        args.iter().for_each(|s| bench(s, mb, reps, cpu));
    }
}
