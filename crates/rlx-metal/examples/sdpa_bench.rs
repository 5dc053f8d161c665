//! Timing of the host SDPA forward ([`sdpa`]): milliseconds per call.
//!
//! ```text
//! cargo run --release -p rlx-metal --example sdpa_bench -- [SPEC ...]
//! SPEC = SEQ:HEADS:KV_HEADS:HEAD_DIM[:causal|:none]   e.g. 197:12:12:64:none
//! ```
//!
//! Without specs it runs a ViT-B/16 attention (197 tokens, 12 heads of
//! 64, no mask) and an LLM prefill (512 tokens, 9 query / 3 KV heads of 64,
//! causal), one sequence, BSHD, f32 and f16 K / V. Each figure is the
//! median of `RLX_BENCH_REPS` (default 9) calls after one warm-up call,
//! wall time on rayon's pool (`RAYON_NUM_THREADS` sets its size). Not
//! asserted anywhere.

mod common;

use common::{rand_vec, time};
use half::f16;
use rlx_metal::host::kernels::attention::{sdpa, AttnDims, AttnOpts, Layout, Mask};

fn main() {
    let reps = common::reps();
    let mut specs: Vec<String> = std::env::args().skip(1).collect();
    if specs.is_empty() {
        specs = vec!["197:12:12:64:none".into(), "512:9:3:64:causal".into()];
    }
    for spec in specs {
        let f: Vec<&str> = spec.split(':').collect();
        let num = |i: usize| f.get(i).and_then(|s| s.parse::<usize>().ok());
        let (Some(s), Some(h), Some(kvh), Some(hd)) = (num(0), num(1), num(2), num(3)) else {
            eprintln!("bad spec {spec:?}: want SEQ:HEADS:KV_HEADS:HEAD_DIM[:causal|:none]");
            std::process::exit(2);
        };
        let causal = f.get(4).is_none_or(|m| *m != "none");
        let dm = AttnDims {
            batch: 1,
            seq: s,
            kv_seq: s,
            heads: h,
            kv_heads: kvh,
            head_dim: hd,
        };
        let (n, kn) = (s * h * hd, s * kvh * hd);
        let (q, k, v) = (rand_vec(n, 1), rand_vec(kn, 2), rand_vec(kn, 3));
        let (kh, vh): (Vec<f16>, Vec<f16>) = (
            k.iter().map(|&x| f16::from_f32(x)).collect(),
            v.iter().map(|&x| f16::from_f32(x)).collect(),
        );
        let mask = if causal { Mask::Causal } else { Mask::None };
        let mut out = vec![0f32; n];
        let opts = AttnOpts::default();
        let t32 = time(reps, || {
            sdpa(&dm, Layout::Bshd, mask, opts, &q, &k, &v, &mut out).expect("sdpa");
        });
        let t16 = time(reps, || {
            sdpa(&dm, Layout::Bshd, mask, opts, &q, &kh, &vh, &mut out).expect("sdpa");
        });
        let flops = 4.0 * (s * s * h * hd) as f64 / if causal { 2.0 } else { 1.0 };
        println!(
            "s={s} heads={h}/{kvh} d={hd} {}: f32 kv {t32:.3} ms ({:.1} GFLOP/s)  f16 kv {t16:.3} ms",
            if causal { "causal" } else { "none" },
            flops / t32 / 1e6,
        );
    }
}
