//! Timing of the native attention gradient (`attention_bwd`'s host kernel,
//! [`attention_grad`]): milliseconds per call for dq, dk and dv.
//!
//! ```text
//! cargo run --release -p rlx-metal --example attn_bwd_bench -- [SPEC ...]
//! SPEC = SEQ:HEADS:HEAD_DIM[:causal|:none]   e.g. 64:9:64  256:9:64:none
//! ```
//!
//! Without specs it runs SmolLM2-135M's shapes (9 heads of 64, k / v
//! repeated to every query head as the lowering does) at 64 and 256 tokens,
//! causal, one sequence, BSHD. Each figure is the median of
//! `RLX_BENCH_REPS` (default 9) calls after one warm-up call, wall time on
//! rayon's pool (`RAYON_NUM_THREADS` sets its size). Not asserted anywhere.

use std::time::Instant;

use rlx_metal::host::kernels::backward_attn::{
    attention_grad, AttnGradDims, AttnGradMask, AttnWrt,
};

/// Deterministic values in `[-1, 1)` (xorshift).
fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let reps: usize = std::env::var("RLX_BENCH_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(9)
        .max(1);
    let mut specs: Vec<String> = std::env::args().skip(1).collect();
    if specs.is_empty() {
        specs = vec!["64:9:64".into(), "256:9:64".into()];
    }
    for spec in specs {
        let f: Vec<&str> = spec.split(':').collect();
        let num = |i: usize| f.get(i).and_then(|s| s.parse::<usize>().ok());
        let (Some(s), Some(h), Some(hd)) = (num(0), num(1), num(2)) else {
            eprintln!("bad spec {spec:?}: want SEQ:HEADS:HEAD_DIM[:causal|:none]");
            std::process::exit(2);
        };
        let causal = f.get(3).is_none_or(|m| *m != "none");
        let d = AttnGradDims {
            batch: 1,
            seq: s,
            kv_seq: s,
            heads: h,
            kv_heads: h,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
            bhsd: false,
        };
        let n = s * h * hd;
        let (q, k, v, dy) = (
            rand_vec(n, 1),
            rand_vec(n, 2),
            rand_vec(n, 3),
            rand_vec(n, 4),
        );
        let mask = if causal {
            AttnGradMask::Causal
        } else {
            AttnGradMask::None
        };
        let mut out = vec![0f32; n];
        let mut line = format!(
            "s={s} heads={h} d={hd} {}:",
            if causal { "causal" } else { "none" }
        );
        for (name, wrt) in [("dq", AttnWrt::Q), ("dk", AttnWrt::K), ("dv", AttnWrt::V)] {
            let times: Vec<f64> = (0..=reps)
                .map(|_| {
                    let t0 = Instant::now();
                    attention_grad(&q, &k, &v, &dy, mask, wrt, &mut out, d)
                        .expect("attention_grad");
                    t0.elapsed().as_secs_f64() * 1e3
                })
                .skip(1)
                .collect();
            line += &format!("  {name} {:.3} ms", median(times));
        }
        println!("{line}");
    }
}
