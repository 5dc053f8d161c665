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

mod common;

use common::{rand_vec, time};
use rlx_metal::host::kernels::backward_attn::{
    attention_grad, AttnGradDims, AttnGradMask, AttnWrt,
};

fn main() {
    let reps = common::reps();
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
            let ms = time(reps, || {
                attention_grad(&q, &k, &v, &dy, mask, wrt, &mut out, d).expect("attention_grad");
            });
            line += &format!("  {name} {ms:.3} ms");
        }
        println!("{line}");
    }
}
