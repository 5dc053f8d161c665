//! metal-sim vs host for attention graphs: `Attention` (every mask kind,
//! BSHD / BHSD, GQA, softcap, score scale, a run-time `kv_len`, one per
//! batch entry, f16 K / V under f32 q), `Rope`
//! (NeoX / interleaved, partial, per token), a llama-style block (RoPE on q
//! and k, causal GQA attention) and the fused attention block
//! (`FusedAttn` between two host matmuls). Each graph must lower its
//! attention / rope thunks to dispatches (no host command for them).
//!
//! Tolerances: f32 `2e-5 + 1e-4·|host|` (the kernels' online softmax
//! rescales partial sums the host computes in one pass); f16 the shared
//! `2e-3 + 2^-9·|host|`.

use super::tests::{assert_close, assert_same, compiled, input, node};
use super::*;
use crate::compile::Compiled;
use crate::metal::plan::Command;
use rlx_ir::op::{AttnLayout, MaskKind, RopeKind};
use rlx_ir::{DType, Graph, Op, Shape};

/// The plan of `c`, asserting that every thunk named `names` is a
/// dispatch and returning how many dispatches run `family` kernels.
fn plan_of(c: &Compiled, names: &[&str], family: Family) -> (MetalPlan, usize) {
    let plan = MetalPlan::build(&c.schedule);
    let mut n = 0;
    for cmd in &plan.commands {
        match cmd {
            Command::Host { thunk } => {
                let name = c.schedule.thunks[*thunk].name();
                assert!(!names.contains(&name), "{name} on the host\n{plan}");
            }
            Command::Dispatch(d) if d.kernel.family == family => n += 1,
            _ => {}
        }
    }
    (plan, n)
}

fn check(c: &Compiled, plan: &MetalPlan, dt: DType) {
    match dt {
        DType::F16 => assert_same(c, plan, dt),
        _ => assert_close(c, plan, 2e-5, 1e-4),
    }
}

/// One attention op with the given mask, layout and options.
#[derive(Clone, Copy, Debug)]
struct Attn {
    b: usize,
    s: usize,
    kv: usize,
    heads: usize,
    kvh: usize,
    d: usize,
    mask: MaskKind,
    layout: AttnLayout,
    softcap: Option<f32>,
    scale: Option<f32>,
    kv_len: Option<usize>,
    /// One key length per batch entry (replaces `kv_len`).
    lens: Option<&'static [usize]>,
}

fn attention_graph(a: &Attn, dt: DType) -> Graph {
    attention_graph_kv(a, dt, dt)
}

/// [`attention_graph`] with k / v of `kv_dt` (f16 under f32: a half KV cache).
fn attention_graph_kv(a: &Attn, dt: DType, kv_dt: DType) -> Graph {
    let mut g = Graph::new("attn");
    let (qd, kd) = match a.layout {
        AttnLayout::Bshd => (vec![a.b, a.s, a.heads * a.d], vec![a.b, a.kv, a.kvh * a.d]),
        AttnLayout::Bhsd => (vec![a.b, a.heads, a.s, a.d], vec![a.b, a.kvh, a.kv, a.d]),
    };
    let q = input(&mut g, &qd, dt);
    let k = input(&mut g, &kd, kv_dt);
    let v = input(&mut g, &kd, kv_dt);
    let mut ins = vec![q, k, v];
    match a.mask {
        // shared by all heads: stays a custom mask
        MaskKind::Custom => ins.push(input(&mut g, &[a.b, 1, a.s, a.kv], dt)),
        MaskKind::Bias => ins.push(input(&mut g, &[a.b, a.heads, a.s, a.kv], dt)),
        _ => {}
    }
    let lens: Option<Vec<f64>> = match (a.lens, a.kv_len) {
        (Some(ls), _) => Some(ls.iter().map(|&l| l as f64).collect()),
        (None, Some(l)) => Some(vec![l as f64]),
        (None, None) => None,
    };
    if let Some(values) = lens {
        let len = node(
            &mut g,
            Op::Constant {
                shape: Shape::of(&[values.len()], DType::I32),
                values,
            },
            &[],
        );
        ins.push(len);
    }
    let o = node(
        &mut g,
        Op::Attention {
            heads: a.heads,
            kv_heads: a.kvh,
            head_dim: a.d,
            mask: a.mask,
            window: if a.mask == MaskKind::SlidingWindow {
                5
            } else {
                0
            },
            layout: a.layout,
            score_scale: a.scale,
            softcap: a.softcap,
            dynamic_kv_len: a.kv_len.is_some() || a.lens.is_some(),
        },
        &ins,
    );
    g.set_outputs(&[o]).unwrap();
    g
}

#[test]
fn attention_matches_host() {
    let pre = Attn {
        b: 2,
        s: 17,
        kv: 17,
        heads: 4,
        kvh: 2,
        d: 40,
        mask: MaskKind::Causal,
        layout: AttnLayout::Bshd,
        softcap: None,
        scale: None,
        kv_len: None,
        lens: None,
    };
    let dec = Attn {
        b: 1,
        s: 1,
        kv: 33,
        d: 64,
        ..pre
    };
    let cases = [
        pre,
        Attn {
            mask: MaskKind::None,
            layout: AttnLayout::Bhsd,
            softcap: Some(1.5),
            ..pre
        },
        Attn {
            mask: MaskKind::Custom,
            kvh: 4,
            ..pre
        },
        Attn {
            mask: MaskKind::Bias,
            kvh: 1,
            scale: Some(0.25),
            ..pre
        },
        Attn {
            mask: MaskKind::SlidingWindow,
            kv: 33,
            kv_len: Some(25),
            ..pre
        },
        dec,
        Attn {
            kv_len: Some(20),
            layout: AttnLayout::Bhsd,
            ..dec
        },
        Attn {
            mask: MaskKind::Bias,
            kvh: 1,
            ..dec
        },
        // batched decode: one key length per sequence
        Attn {
            b: 3,
            lens: Some(&[33, 1, 17]),
            ..dec
        },
        Attn {
            b: 3,
            mask: MaskKind::SlidingWindow,
            layout: AttnLayout::Bhsd,
            lens: Some(&[9, 30, 2]),
            ..dec
        },
    ];
    for dt in [DType::F32, DType::F16] {
        for a in &cases {
            let c = compiled(&attention_graph(a, dt));
            let (plan, n) = plan_of(&c, &["attention"], Family::Attention);
            assert_eq!(n, 1, "{a:?}\n{plan}");
            check(&c, &plan, dt);
        }
    }
    // a half KV cache under f32 queries: one `_kvf16` dispatch, no cast of
    // the cache, f32 agreement with the host
    for a in &cases {
        let c = compiled(&attention_graph_kv(a, DType::F32, DType::F16));
        let (plan, n) = plan_of(&c, &["attention"], Family::Attention);
        assert_eq!(n, 1, "{a:?}\n{plan}");
        assert_eq!(
            plan.stats().dispatches,
            1,
            "{a:?}: the cache was converted\n{plan}"
        );
        assert!(plan.to_string().contains("_kvf16"), "{plan}");
        check(&c, &plan, DType::F32);
    }
}

#[test]
fn rope_matches_host() {
    let (b, s, heads, d) = (2, 5, 3, 12);
    for dt in [DType::F32, DType::F16] {
        for (kind, n_rot, per_token) in [
            (RopeKind::Neox, 12, false),
            (RopeKind::Interleaved, 12, false),
            (RopeKind::Neox, 8, true),
            (RopeKind::Interleaved, 4, false),
        ] {
            let mut g = Graph::new("rope");
            let x = input(&mut g, &[b, s, heads * d], dt);
            let trows = if per_token { b * s } else { s };
            let cos = input(&mut g, &[trows, n_rot / 2], DType::F32);
            let sin = input(&mut g, &[trows, n_rot / 2], DType::F32);
            let r = node(
                &mut g,
                Op::Rope {
                    kind,
                    head_dim: d,
                    n_rot,
                    per_token,
                },
                &[x, cos, sin],
            );
            g.set_outputs(&[r]).unwrap();
            let c = compiled(&g);
            let (plan, n) = plan_of(&c, &["rope"], Family::Rope);
            assert_eq!(n, 1, "{kind:?} {n_rot}\n{plan}");
            check(&c, &plan, dt);
        }
    }
}

/// Llama-style: RoPE (NeoX) on q and k, causal GQA attention, BSHD.
#[test]
fn llama_block_matches_host() {
    let (b, s, heads, kvh, d) = (1, 9, 4, 2, 32);
    for dt in [DType::F32, DType::F16] {
        let mut g = Graph::new("llama");
        let q = input(&mut g, &[b, s, heads * d], dt);
        let k = input(&mut g, &[b, s, kvh * d], dt);
        let v = input(&mut g, &[b, s, kvh * d], dt);
        let cos = input(&mut g, &[s, d / 2], DType::F32);
        let sin = input(&mut g, &[s, d / 2], DType::F32);
        let rope = Op::Rope {
            kind: RopeKind::Neox,
            head_dim: d,
            n_rot: d,
            per_token: false,
        };
        let qr = node(&mut g, rope.clone(), &[q, cos, sin]);
        let kr = node(&mut g, rope, &[k, cos, sin]);
        let o = node(
            &mut g,
            Op::Attention {
                heads,
                kv_heads: kvh,
                head_dim: d,
                mask: MaskKind::Causal,
                window: 0,
                layout: AttnLayout::Bshd,
                score_scale: None,
                softcap: None,
                dynamic_kv_len: false,
            },
            &[qr, kr, v],
        );
        g.set_outputs(&[o]).unwrap();
        let c = compiled(&g);
        let (plan, n) = plan_of(&c, &["rope", "attention"], Family::Attention);
        assert_eq!(n, 1, "{plan}");
        assert_eq!(plan.stats().host, 0, "{plan}");
        check(&c, &plan, dt);
    }
}

/// The fused attention block: QKV matmul (host), FusedAttn (NeoX RoPE +
/// SDPA on the packed rows, a dispatch), output matmul (host).
#[test]
fn fused_attention_block_matches_host() {
    let (b, s, hidden, heads, d) = (2, 7, 24, 2, 16);
    for (mask, rope) in [
        (MaskKind::Causal, true),
        (MaskKind::None, false),
        (MaskKind::Custom, true),
    ] {
        let mut g = Graph::new("fused");
        let x = input(&mut g, &[b, s, hidden], DType::F32);
        let w = |g: &mut Graph, dims: &[usize]| {
            node(
                g,
                Op::Param {
                    shape: Shape::of(dims, DType::F32),
                },
                &[],
            )
        };
        let wqkv = w(&mut g, &[hidden, 3 * heads * d]);
        let wout = w(&mut g, &[heads * d, hidden]);
        let mut ins = vec![x, wqkv, wout];
        if rope {
            ins.push(input(&mut g, &[s, d / 2], DType::F32));
            ins.push(input(&mut g, &[s, d / 2], DType::F32));
        }
        if mask == MaskKind::Custom {
            ins.push(input(&mut g, &[b, 1, s, s], DType::F32));
        }
        let o = node(
            &mut g,
            Op::FusedAttentionBlock {
                heads,
                head_dim: d,
                mask,
                rope,
            },
            &ins,
        );
        g.set_outputs(&[o]).unwrap();
        let c = compiled(&g);
        let (plan, n) = plan_of(&c, &["fused_attn"], Family::Attention);
        assert_eq!(n, 1, "{mask:?} rope={rope}\n{}\n{plan}", c.schedule);
        // outputs pass through a hidden-wide matmul: scale the tolerance
        assert_close(&c, &plan, 1e-4, 1e-4);
    }
}
