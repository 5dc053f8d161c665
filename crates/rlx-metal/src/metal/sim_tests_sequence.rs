//! MetalPlans of the recurrences (`gdn.metal`, `ssm.metal`,
//! `recurrent.metal`): which thunks become dispatches and which stay on
//! the host (`lower/sequence.rs`), their grids, and a whole plan run
//! through msl-sim where the state buffer carries a gated DeltaNet across
//! two thunks: the split run must equal one thunk over the whole sequence
//! (to f32 rounding, `1e-6 + 1e-5·|x|`: both sides run the same
//! arithmetic, so the bound only covers the simdgroup reduction order).
//! The numeric checks of every kernel are in `tests/msl/{gdn,ssm,recurrent}.rs`.

use super::tests::{decode, encode, uniform};
use super::*;
use crate::thunk::sequence::{GatedDeltaNet, Gru, Lstm, Mamba2, Rnn, SelectiveScan};
use crate::thunk::{tag_segment, tag_state, ThunkSchedule};

fn gdn(q: usize, state: usize, dst: usize, seq: u32, n: u32) -> Thunk {
    // q, k, v, g, beta back to back from `q`, each sized for `seq`
    let qkv = (2 * seq * 3 * n * 4) as usize;
    let gate = (2 * seq * 3 * 4) as usize;
    GatedDeltaNet {
        q,
        k: q + qkv,
        v: q + 2 * qkv,
        g: q + 3 * qkv,
        beta: q + 3 * qkv + gate,
        state,
        dst,
        batch: 2,
        seq,
        heads: 3,
        state_size: n,
        f16: false,
    }
    .into()
}

/// Mamba-2 over batch 2, 3 heads of `p`, n 16; x, dt, a, B, C back to back
/// from `x`, each sized for `seq`.
fn mamba2(x: usize, state: usize, dst: usize, seq: u32, p: u32) -> Mamba2 {
    let xs = (2 * seq * 3 * p * 4) as usize;
    let dts = (2 * seq * 3 * 4) as usize;
    let bcs = (2 * seq * 16 * 4) as usize;
    Mamba2 {
        x,
        dt: x + xs,
        a: x + xs + dts,
        b: x + xs + dts + 12,
        c: x + xs + dts + 12 + bcs,
        state: Some(state),
        dst,
        batch: 2,
        seq,
        heads: 3,
        head_dim: p,
        state_size: 16,
    }
}

fn lstm(layers: u32, bidirectional: bool, carry: bool, hidden: u32) -> Thunk {
    Lstm {
        x: 0,
        w_ih: tag_segment(1, 0),
        w_hh: tag_segment(2, 0),
        bias: tag_segment(3, 0),
        h0: tag_segment(4, 0),
        c0: tag_segment(5, 0),
        dst: 1 << 20,
        batch: 2,
        seq: 7,
        input_size: 5,
        hidden,
        num_layers: layers,
        bidirectional,
        carry,
    }
    .into()
}

fn plan_of(thunks: Vec<Thunk>) -> (ThunkSchedule, MetalPlan) {
    let s = ThunkSchedule {
        thunks,
        ..Default::default()
    };
    let p = MetalPlan::build(&s);
    (s, p)
}

/// The kernel of the only command, or `None` for a host command.
fn only_kernel(t: Thunk) -> Option<(String, [u32; 3], [u32; 3])> {
    let (_, p) = plan_of(vec![t]);
    assert_eq!(p.commands.len(), 1, "{p}");
    match &p.commands[0] {
        Command::Dispatch(d) => Some((d.kernel.function.clone(), d.grid, d.threadgroup)),
        Command::Host { .. } => None,
        Command::Barrier | Command::User(_) | Command::Check(_) => panic!("{p}"),
    }
}

#[test]
fn recurrences_lower_to_their_kernels() {
    let st = tag_state(0);
    let k = only_kernel(gdn(0, st, 1 << 20, 7, 16));
    assert_eq!(
        k,
        Some(("gated_delta_net_f32".into(), [4, 3, 2], [128, 1, 1]))
    );
    let mut half = gdn(0, st, 1 << 20, 7, 5);
    if let Thunk::GatedDeltaNet(g) = &mut half {
        g.f16 = true;
    }
    let k = only_kernel(half.clone());
    assert_eq!(
        k,
        Some(("gated_delta_net_f16".into(), [2, 3, 2], [128, 1, 1]))
    );
    // prefill from the host's CHUNKED_FROM: the chunked form, one
    // threadgroup per (batch, head), min(n, 8) simdgroups
    let k = only_kernel(gdn(0, st, 1 << 20, 16, 16));
    assert_eq!(
        k,
        Some(("gated_delta_net_chunked_f32".into(), [1, 3, 2], [256, 1, 1]))
    );
    if let Thunk::GatedDeltaNet(g) = &mut half {
        g.seq = 80;
    }
    assert_eq!(
        only_kernel(half),
        Some(("gated_delta_net_chunked_f16".into(), [1, 3, 2], [160, 1, 1]))
    );
    let k = only_kernel(gdn(0, st, 1 << 20, 15, 16));
    assert_eq!(k.map(|k| k.0), Some("gated_delta_net_f32".into()));
    let scan = SelectiveScan {
        x: 0,
        delta: 4096,
        a: 8192,
        b: 12288,
        c: 16384,
        state: None,
        dst: 20480,
        batch: 2,
        seq: 7,
        hidden: 13,
        state_size: 16,
    };
    let k = only_kernel(scan.into());
    assert_eq!(
        k,
        Some(("selective_scan_f32".into(), [4, 2, 1], [128, 1, 1]))
    );
    let m2 = Mamba2 {
        x: 0,
        dt: 4096,
        a: 8192,
        b: 12288,
        c: 16384,
        state: Some(tag_state(0)),
        dst: 20480,
        batch: 2,
        seq: 7,
        heads: 3,
        head_dim: 5,
        state_size: 64,
    };
    let k = only_kernel(m2.clone().into());
    assert_eq!(k, Some(("mamba2_f32".into(), [2, 3, 2], [128, 1, 1])));
    // prefill from CHUNKED_FROM: the chunked SSD form, min(p, 8)
    // simdgroups of 8 rows each per threadgroup
    let k = only_kernel(mamba2(0, tag_state(0), 1 << 22, 16, 5).into());
    assert_eq!(
        k,
        Some(("mamba2_chunked_f32".into(), [1, 3, 2], [160, 1, 1]))
    );
    let k = only_kernel(mamba2(0, tag_state(0), 1 << 22, 80, 70).into());
    assert_eq!(
        k,
        Some(("mamba2_chunked_f32".into(), [2, 3, 2], [256, 1, 1]))
    );
    let k = only_kernel(mamba2(0, tag_state(0), 1 << 22, 15, 70).into());
    assert_eq!(k.map(|k| k.0), Some("mamba2_f32".into()));
    let k = only_kernel(lstm(1, true, true, 13));
    assert_eq!(k, Some(("lstm_f32".into(), [2, 2, 1], [32, 1, 1])));
    let k = only_kernel(lstm(3, false, true, 100));
    assert_eq!(k, Some(("lstm_f32".into(), [2, 1, 1], [128, 1, 1])));
    let gru = Gru {
        x: 0,
        w_ih: tag_segment(1, 0),
        w_hh: tag_segment(2, 0),
        b_ih: tag_segment(3, 0),
        b_hh: tag_segment(4, 0),
        h0: tag_segment(5, 0),
        dst: 1 << 20,
        batch: 3,
        seq: 4,
        input_size: 5,
        hidden: 40,
        num_layers: 1,
        bidirectional: false,
        carry: true,
    };
    let k = only_kernel(gru.into());
    assert_eq!(k, Some(("gru_f32".into(), [3, 1, 1], [64, 1, 1])));
    let rnn = Rnn {
        x: 0,
        w_ih: tag_segment(1, 0),
        w_hh: tag_segment(2, 0),
        bias: tag_segment(3, 0),
        h0: tag_segment(4, 0),
        dst: 1 << 20,
        batch: 1,
        seq: 4,
        input_size: 5,
        hidden: 7,
        num_layers: 1,
        bidirectional: true,
        carry: false,
        relu: true,
    };
    let k = only_kernel(rnn.into());
    assert_eq!(k, Some(("rnn_f32".into(), [1, 2, 1], [32, 1, 1])));
}

#[test]
fn unsupported_recurrences_stay_on_the_host() {
    let st = tag_state(0);
    // state wider than 128
    assert_eq!(only_kernel(gdn(0, st, 1 << 24, 2, 129)), None);
    // output over an input (dst = q)
    assert_eq!(only_kernel(gdn(0, st, 0, 2, 16)), None);
    // hidden past the threadgroup arrays; stacked + bidirectional
    assert_eq!(only_kernel(lstm(1, false, false, 1025)), None);
    assert_eq!(only_kernel(lstm(2, true, false, 13)), None);
}

#[test]
fn gdn_state_carries_across_thunks_like_one_scan() {
    // one thunk over seq 7 vs two thunks (3 then 4 steps): recurrent only
    gdn_carry(7, 3);
}

#[test]
fn gdn_chunked_prefill_then_recurrent_like_one_scan() {
    // one chunked thunk over seq 80 (past one chunk) vs a chunked 70-token
    // prefill then a 10-token recurrent run on the state it left
    gdn_carry(80, 70);
}

/// One thunk over `s` tokens vs two thunks (`split` then `s − split`
/// tokens) sharing the state buffer: the same operands, laid out per thunk.
fn gdn_carry(s: usize, split: usize) {
    let (b, h, n) = (2usize, 3usize, 16usize);
    let q = uniform(1, b * s * h * n, -0.3, 0.3);
    let k = uniform(2, b * s * h * n, -0.3, 0.3);
    let v = uniform(3, b * s * h * n, -1.0, 1.0);
    let g = uniform(4, b * s * h, -1.0, -0.1);
    let beta = uniform(5, b * s * h, 0.1, 0.9);
    let st0 = uniform(6, b * h * n * n, -0.5, 0.5);
    // rows [t0, t1) of a [b, s, w] tensor
    let part = |x: &[f32], w: usize, t0: usize, t1: usize| -> Vec<f32> {
        (0..b)
            .flat_map(|bi| x[(bi * s + t0) * w..(bi * s + t1) * w].to_vec())
            .collect()
    };
    let run = |pieces: &[(usize, usize)]| -> (Vec<f32>, Vec<f32>) {
        let mut arena = Vec::new();
        let mut thunks = Vec::new();
        let mut dsts = Vec::new();
        for &(t0, t1) in pieces {
            let base = arena.len();
            for (x, w) in [(&q, h * n), (&k, h * n), (&v, h * n), (&g, h), (&beta, h)] {
                arena.extend(encode(rlx_ir::DType::F32, &part(x, w, t0, t1)));
            }
            let dst = arena.len();
            arena.resize(dst + b * (t1 - t0) * h * n * 4, 0);
            thunks.push(gdn(base, tag_state(0), dst, (t1 - t0) as u32, n as u32));
            dsts.push((dst, t0, t1));
        }
        let (sched, plan) = plan_of(thunks);
        let st = plan.stats();
        assert_eq!(st.host, 0, "{plan}");
        // the second thunk reads the state the first wrote
        assert_eq!(st.barriers, pieces.len() - 1, "{plan}");
        let mut state = encode(rlx_ir::DType::F32, &st0);
        let bufs = SimBuffers {
            arena: &mut arena,
            state: &mut state,
            segments: &[],
        };
        SimExecutor::new()
            .run(&plan, &sched, bufs, &mut super::tests::no_fallback)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut out = vec![0.0f32; b * s * h * n];
        for (dst, t0, t1) in dsts {
            let w = h * n;
            let got = decode(rlx_ir::DType::F32, &arena[dst..dst + b * (t1 - t0) * w * 4]);
            for bi in 0..b {
                let rows = &got[bi * (t1 - t0) * w..(bi + 1) * (t1 - t0) * w];
                out[(bi * s + t0) * w..(bi * s + t1) * w].copy_from_slice(rows);
            }
        }
        (out, decode(rlx_ir::DType::F32, &state))
    };
    let (one_o, one_s) = run(&[(0, s)]);
    let (two_o, two_s) = run(&[(0, split), (split, s)]);
    for (what, a, b) in [("out", &one_o, &two_o), ("state", &one_s, &two_s)] {
        for (i, (x, y)) in a.iter().zip(b.iter()).enumerate() {
            assert!(
                (x - y).abs() <= 1e-6 + 1e-5 * x.abs(),
                "{what}[{i}]: {x} vs {y}"
            );
        }
    }
    // and the state moved
    assert!(one_s.iter().zip(&st0).any(|(a, b)| (a - b).abs() > 1e-3));
}

#[test]
fn mamba2_chunked_prefill_then_recurrent_like_one_scan() {
    // one chunked thunk over seq 80 (past one chunk) vs a chunked 70-token
    // prefill then ten one-token (recurrent) steps on the state it left
    let (b, h, p, n, s) = (2usize, 3usize, 5usize, 16usize, 80usize);
    let x = uniform(1, b * s * h * p, -1.0, 1.0);
    let dt = uniform(2, b * s * h, 0.01, 0.5);
    let a = uniform(3, h, -2.0, -0.1);
    let bm = uniform(4, b * s * n, -1.0, 1.0);
    let cm = uniform(5, b * s * n, -1.0, 1.0);
    let st0 = uniform(6, b * h * p * n, -0.5, 0.5);
    let part = |v: &[f32], w: usize, t0: usize, t1: usize| -> Vec<f32> {
        (0..b)
            .flat_map(|bi| v[(bi * s + t0) * w..(bi * s + t1) * w].to_vec())
            .collect()
    };
    let run = |pieces: &[(usize, usize)]| -> (Vec<f32>, Vec<f32>, Vec<String>) {
        let mut arena = Vec::new();
        let mut thunks = Vec::new();
        let mut dsts = Vec::new();
        for &(t0, t1) in pieces {
            let base = arena.len();
            arena.extend(encode(rlx_ir::DType::F32, &part(&x, h * p, t0, t1)));
            arena.extend(encode(rlx_ir::DType::F32, &part(&dt, h, t0, t1)));
            arena.extend(encode(rlx_ir::DType::F32, &a));
            arena.extend(encode(rlx_ir::DType::F32, &part(&bm, n, t0, t1)));
            arena.extend(encode(rlx_ir::DType::F32, &part(&cm, n, t0, t1)));
            let dst = arena.len();
            arena.resize(dst + b * (t1 - t0) * h * p * 4, 0);
            let m = mamba2(base, tag_state(0), dst, (t1 - t0) as u32, p as u32);
            assert_eq!(m.c + b * (t1 - t0) * n * 4, dst);
            thunks.push(m.into());
            dsts.push((dst, t0, t1));
        }
        let (sched, plan) = plan_of(thunks);
        assert_eq!(plan.stats().host, 0, "{plan}");
        let kernels = plan
            .commands
            .iter()
            .filter_map(|c| match c {
                Command::Dispatch(d) => Some(d.kernel.function.clone()),
                _ => None,
            })
            .collect();
        let mut state = encode(rlx_ir::DType::F32, &st0);
        let bufs = SimBuffers {
            arena: &mut arena,
            state: &mut state,
            segments: &[],
        };
        SimExecutor::new()
            .run(&plan, &sched, bufs, &mut super::tests::no_fallback)
            .unwrap_or_else(|e| panic!("{e}"));
        let w = h * p;
        let mut out = vec![0.0f32; b * s * w];
        for (dst, t0, t1) in dsts {
            let got = decode(rlx_ir::DType::F32, &arena[dst..dst + b * (t1 - t0) * w * 4]);
            for bi in 0..b {
                let rows = &got[bi * (t1 - t0) * w..(bi + 1) * (t1 - t0) * w];
                out[(bi * s + t0) * w..(bi * s + t1) * w].copy_from_slice(rows);
            }
        }
        (out, decode(rlx_ir::DType::F32, &state), kernels)
    };
    let (one_o, one_s, k1) = run(&[(0, s)]);
    let mut pieces = vec![(0, 70)];
    pieces.extend((70..s).map(|t| (t, t + 1)));
    let (two_o, two_s, k2) = run(&pieces);
    assert_eq!(k1, ["mamba2_chunked_f32"]);
    assert_eq!(k2[0], "mamba2_chunked_f32");
    assert!(k2[1..].iter().all(|k| k == "mamba2_f32"), "{k2:?}");
    for (what, a, b) in [("out", &one_o, &two_o), ("state", &one_s, &two_s)] {
        for (i, (x, y)) in a.iter().zip(b.iter()).enumerate() {
            assert!(
                (x - y).abs() <= 2e-6 + 1e-5 * x.abs(),
                "{what}[{i}]: {x} vs {y}"
            );
        }
    }
    assert!(one_s.iter().zip(&st0).any(|(a, b)| (a - b).abs() > 1e-3));
}
