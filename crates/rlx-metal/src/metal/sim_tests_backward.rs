//! metal-sim vs host for the training gradients (`backward.metal`): every
//! gradient thunk on odd sizes — attention (causal GQA in BSHD, sliding
//! window and per-head bias in BHSD, a binary mask), RMSNorm (input /
//! gamma / beta), RoPE (NeoX, per-token tables, interleaved), cumsum
//! (inner and outer axis, exclusive), gather (negative and out-of-range
//! indices), max-pool with ties (rounded inputs), conv2d input / weight
//! gradients (stride, padding, dilation, groups), adaLN (LayerNorm and
//! RMSNorm, f32 and f16), gated residual, log-mel and softmax
//! cross-entropy (forward and gradient). No gradient thunk may run as a
//! host command.
//!
//! Tolerances: f32 `2e-5 + 1e-4·|host|` (the host accumulates in f64, the
//! kernels in f32 in another order); f16 the shared `2e-3 + 2^-9·|host|`.

use super::tests::{assert_close, assert_same, compiled, input, node};
use super::*;
use crate::metal::plan::Command;
use rlx_ir::op::{Activation, AttnLayout, MaskKind, RopeKind, Wrt};
use rlx_ir::op::{ConvGeom, Window};
use rlx_ir::{DType, Graph, NodeId, Op, Shape};

/// Labels in {0, 1} (`|u| ∈ [0, 2)` truncated) from a float input.
fn labels(g: &mut Graph, n: usize) -> NodeId {
    let u = input(g, &[n], DType::F32);
    let a = node(
        g,
        Op::Activation {
            kind: Activation::Abs,
        },
        &[u],
    );
    node(
        g,
        Op::Cast {
            to: DType::I32,
            trunc: false,
        },
        &[a],
    )
}

/// Compile `g`, check that no thunk named in `names` is a host command and
/// that each of them ran as a dispatch (`backward.metal`, max-pool's in
/// `vision.metal`), then compare
/// metal-sim with the host.
fn check(g: &Graph, names: &[&str], dt: DType) {
    let c = compiled(g);
    let plan = MetalPlan::build(&c.schedule);
    let mut seen = Vec::new();
    for cmd in &plan.commands {
        match cmd {
            Command::Host { thunk } => {
                let name = c.schedule.thunks[*thunk].name();
                assert!(!names.contains(&name), "{name} on the host\n{plan}");
            }
            Command::Dispatch(d) => {
                seen.push(c.schedule.thunks[d.thunk].name());
            }
            _ => {}
        }
    }
    for n in names {
        assert!(seen.contains(n), "{n} not dispatched\n{plan}");
    }
    match dt {
        DType::F16 => assert_same(&c, &plan, dt),
        _ => assert_close(&c, &plan, 2e-5, 1e-4),
    }
}

fn attn(
    g: &mut Graph,
    ins: &[NodeId],
    wrt: Wrt,
    heads: usize,
    mask: MaskKind,
    window: usize,
    layout: AttnLayout,
) -> NodeId {
    let op = Op::AttentionBackward {
        wrt,
        heads,
        head_dim: 3,
        mask,
        window,
        layout,
    };
    node(g, op, ins)
}

#[test]
fn attention_gradients_match_host() {
    let f = DType::F32;
    // BSHD, causal, GQA 4 query heads over 2 kv heads, s 5 < kv 7
    let mut g = Graph::new("attn_bwd");
    let q = input(&mut g, &[2, 5, 12], f);
    let k = input(&mut g, &[2, 7, 6], f);
    let v = input(&mut g, &[2, 7, 6], f);
    let dy = input(&mut g, &[2, 5, 12], f);
    let mut outs = Vec::new();
    for w in [Wrt::Q, Wrt::K, Wrt::V] {
        let bshd = AttnLayout::Bshd;
        outs.push(attn(
            &mut g,
            &[q, k, v, dy],
            w,
            4,
            MaskKind::Causal,
            0,
            bshd,
        ));
    }
    // BHSD: sliding window 2, a per-head bias, a binary mask shared by heads
    let qb = input(&mut g, &[1, 2, 5, 3], f);
    let kb = input(&mut g, &[1, 2, 7, 3], f);
    let vb = input(&mut g, &[1, 2, 7, 3], f);
    let dyb = input(&mut g, &[1, 2, 5, 3], f);
    let bias = input(&mut g, &[1, 2, 5, 7], f);
    let m = input(&mut g, &[5, 7], f);
    let mask = node(
        &mut g,
        Op::Activation {
            kind: Activation::Round,
        },
        &[m],
    );
    let bhsd = AttnLayout::Bhsd;
    for w in [Wrt::Q, Wrt::K, Wrt::V] {
        let ins = [qb, kb, vb, dyb];
        outs.push(attn(&mut g, &ins, w, 2, MaskKind::SlidingWindow, 2, bhsd));
        let ins = [qb, kb, vb, dyb, bias];
        outs.push(attn(&mut g, &ins, w, 2, MaskKind::Bias, 0, bhsd));
        let ins = [qb, kb, vb, dyb, mask];
        outs.push(attn(&mut g, &ins, w, 2, MaskKind::Custom, 0, bhsd));
    }
    g.set_outputs(&outs).unwrap();
    check(&g, &["attention_bwd"], f);
}

#[test]
fn norm_rope_scan_and_index_gradients_match_host() {
    let f = DType::F32;
    let mut g = Graph::new("misc_bwd");
    let x = input(&mut g, &[5, 13], f);
    let gamma = input(&mut g, &[13], f);
    let beta = input(&mut g, &[13], f);
    let dy = input(&mut g, &[5, 13], f);
    let mut outs = Vec::new();
    for wrt in [Wrt::Input, Wrt::Gamma, Wrt::Beta] {
        let op = Op::RmsNormBackward { eps: 1e-5, wrt };
        outs.push(node(&mut g, op, &[x, gamma, beta, dy]));
    }
    // RoPE: 3 heads of 6, NeoX partial (n_rot 4) with per-position tables,
    // then interleaved full rotation with per-token tables
    let ry = input(&mut g, &[2, 3, 18], f);
    let (c4, s4) = (input(&mut g, &[3, 2], f), input(&mut g, &[3, 2], f));
    let (c6, s6) = (input(&mut g, &[6, 3], f), input(&mut g, &[6, 3], f));
    let neox = Op::RopeBackward {
        kind: RopeKind::Neox,
        head_dim: 6,
        n_rot: 4,
    };
    outs.push(node(&mut g, neox, &[ry, c4, s4]));
    let inter = Op::RopeBackward {
        kind: RopeKind::Interleaved,
        head_dim: 6,
        n_rot: 6,
    };
    outs.push(node(&mut g, inter, &[ry, c6, s6]));
    let cy = input(&mut g, &[3, 7, 5], f);
    for (axis, exclusive) in [(-1, false), (1, true)] {
        let op = Op::CumsumBackward { axis, exclusive };
        outs.push(node(&mut g, op, &[cy]));
    }
    // gather: indices 2, -1, 0, 7 (out of range), 2 over an axis of 4
    let gy = input(&mut g, &[3, 5, 2], f);
    let vals = vec![2.0, -1.0, 0.0, 7.0, 2.0];
    let shape = Shape::of(&[5], DType::I32);
    let idx = node(
        &mut g,
        Op::Constant {
            shape,
            values: vals,
        },
        &[],
    );
    let op = Op::GatherBackward {
        axis: 1,
        axis_dim: 4,
    };
    outs.push(node(&mut g, op, &[gy, idx]));
    g.set_outputs(&outs).unwrap();
    check(
        &g,
        &[
            "rms_norm_backward_input",
            "rms_norm_backward_gamma",
            "rms_norm_backward_beta",
            "rope_backward",
            "cumsum_backward",
            "gather_backward",
        ],
        f,
    );
}

#[test]
fn pool_and_conv_gradients_match_host() {
    let f = DType::F32;
    let mut g = Graph::new("conv_bwd");
    // max-pool 3×3 stride 2 pad 1 on rounded inputs: many tied maxima
    let u = input(&mut g, &[2, 3, 7, 9], f);
    let x = node(
        &mut g,
        Op::Activation {
            kind: Activation::Round,
        },
        &[u],
    );
    let pdy = input(&mut g, &[2, 3, 4, 5], f);
    let pool = Op::MaxPool2dBackward {
        win: Window {
            kernel: [3, 3],
            stride: [2, 2],
            padding: [1, 1],
        },
    };
    let dxp = node(&mut g, pool, &[x, pdy]);
    // conv: c_in 4, c_out 6, groups 2, kernel 3×2, stride (2, 1), padding
    // (1, 2), dilation (1, 2) on 7×9 → [2, 6, 4, 11]
    let cx = input(&mut g, &[2, 4, 7, 9], f);
    let w = input(&mut g, &[6, 2, 3, 2], f);
    let cdy = input(&mut g, &[2, 6, 4, 11], f);
    let (stride, padding, dilation, groups) = ([2, 1], [1, 2], [1, 2], 2);
    let bi = Op::Conv2dBackwardInput {
        geom: ConvGeom {
            stride,
            padding,
            dilation,
            groups,
        },
        input_hw: [7, 9],
    };
    let dx = node(&mut g, bi, &[cdy, w]);
    let bw = Op::Conv2dBackwardWeight {
        geom: ConvGeom {
            stride,
            padding,
            dilation,
            groups,
        },
        kernel: [3, 2],
    };
    let dw = node(&mut g, bw, &[cx, cdy]);
    g.set_outputs(&[dxp, dx, dw]).unwrap();
    check(
        &g,
        &[
            "maxpool2d_backward",
            "conv2d_backward_input",
            "conv2d_backward_weight",
        ],
        f,
    );
}

fn modulation(dt: DType) -> Graph {
    let mut g = Graph::new("mod_bwd");
    let x = input(&mut g, &[2, 3, 11], dt);
    let s = input(&mut g, &[2, 1, 11], dt);
    let dy = input(&mut g, &[2, 3, 11], dt);
    let mut outs = Vec::new();
    for layer_norm in [true, false] {
        let op = Op::AdaLayerNormBackward {
            eps: 1e-5,
            layer_norm,
        };
        outs.push(node(&mut g, op, &[x, s, dy]));
    }
    outs.push(node(&mut g, Op::GatedResidualBackward, &[x, s, dy]));
    g.set_outputs(&outs).unwrap();
    g
}

#[test]
fn modulation_gradients_match_host_f32_and_f16() {
    let names = ["ada_layer_norm_backward", "gated_residual_backward"];
    check(&modulation(DType::F32), &names, DType::F32);
    check(&modulation(DType::F16), &names, DType::F16);
}

#[test]
fn log_mel_and_cross_entropy_match_host() {
    let f = DType::F32;
    let mut g = Graph::new("loss_bwd");
    // log-mel: n_fft 8, 5 bins used, 3 mels; power floor keeps mel > 0
    let spec = input(&mut g, &[3, 16], f);
    let fl = input(&mut g, &[3, 5], f);
    let filt = node(
        &mut g,
        Op::Activation {
            kind: Activation::Abs,
        },
        &[fl],
    );
    let mdy = input(&mut g, &[3, 3], f);
    let lm = node(&mut g, Op::LogMelBackward { n_fft: 8 }, &[spec, filt, mdy]);
    let z = input(&mut g, &[5, 7], f);
    let lab = labels(&mut g, 5);
    let dl = input(&mut g, &[5], f);
    let dz = node(&mut g, Op::SoftmaxCrossEntropyBackward, &[z, lab, dl]);
    let loss = node(&mut g, Op::SoftmaxCrossEntropy, &[z, lab]);
    // soft labels: any real targets (the loss is linear in them)
    let soft = input(&mut g, &[5, 7], f);
    let dense = node(&mut g, Op::SoftmaxCrossEntropy, &[z, soft]);
    g.set_outputs(&[lm, dz, loss, dense]).unwrap();
    check(
        &g,
        &[
            "log_mel_backward",
            "softmax_cross_entropy_backward",
            "softmax_cross_entropy_with_logits",
            "softmax_cross_entropy_dense",
        ],
        f,
    );
}
