//! Backward family: every gradient op.

use super::misc::{cfg, splat_inputs};
use super::*;
use rlx_ir::op::{AttnLayout, MaskKind, RopeKind, SpdOp, Wrt};
use rlx_ir::op::{ConvGeom, ScanLoop, Window};
use rlx_ir::Graph;

#[test]
fn softmax_cross_entropy_backward() {
    let op = Op::SoftmaxCrossEntropyBackward;
    let logits = shp(&[sym("n"), st(10)], DType::F32);
    let rows = shp(&[sym("n")], DType::F32);
    let labels = shp(&[sym("n")], DType::I32);
    assert_eq!(
        ok(&op, &[logits.clone(), labels.clone(), rows.clone()]),
        logits
    );
    err(
        &op,
        &[logits.clone(), rows.clone(), rows.clone()],
        "labels must be an integer",
    );
    err(
        &op,
        &[logits, labels, f32s(&[3])],
        "d_loss rows vs logits rows",
    );
}

fn attn_bwd(wrt: Wrt, mask: MaskKind, window: usize, layout: AttnLayout) -> Op {
    Op::AttentionBackward {
        wrt,
        heads: 4,
        head_dim: 8,
        mask,
        window,
        layout,
    }
}

#[test]
fn attention_backward_bshd_gqa() {
    let q = shp(&[st(2), sym("s"), st(32)], DType::F16);
    let k = shp(&[st(2), sym("kv"), st(16)], DType::F16);
    let ins = [q.clone(), k.clone(), k.clone(), q.clone()];
    for (wrt, want) in [(Wrt::Q, &q), (Wrt::K, &k), (Wrt::V, &k)] {
        let op = attn_bwd(wrt, MaskKind::Causal, 0, AttnLayout::Bshd);
        assert_eq!(&ok(&op, &ins), want);
    }
    let op = attn_bwd(Wrt::Gamma, MaskKind::Causal, 0, AttnLayout::Bshd);
    err(&op, &ins, "wrt must be q, k or v");
    let op = attn_bwd(Wrt::Q, MaskKind::Causal, 3, AttnLayout::Bshd);
    err(&op, &ins, "only meaningful with sliding_window");
    let op = attn_bwd(Wrt::Q, MaskKind::SlidingWindow, 0, AttnLayout::Bshd);
    err(&op, &ins, "needs window >= 1");
    let k3 = shp(&[st(2), sym("kv"), st(24)], DType::F16);
    let op = attn_bwd(Wrt::Q, MaskKind::None, 0, AttnLayout::Bshd);
    err(
        &op,
        &[q.clone(), k3.clone(), k3, q.clone()],
        "must divide 4 query heads",
    );
    err(&op, &[q.clone(), k.clone(), k.clone(), k], "dy vs q");
}

#[test]
fn attention_backward_bhsd_with_mask() {
    let q = f32s(&[2, 4, 5, 8]);
    let k = f32s(&[2, 2, 7, 8]);
    let op = attn_bwd(Wrt::K, MaskKind::Bias, 0, AttnLayout::Bhsd);
    let ins = [
        q.clone(),
        k.clone(),
        k.clone(),
        q.clone(),
        f32s(&[1, 4, 5, 7]),
    ];
    assert_eq!(ok(&op, &ins), k);
    let mut bad = ins.clone();
    bad[4] = f32s(&[5, 6]);
    err(
        &op,
        &bad,
        "does not broadcast to [batch, heads, seq, kv_seq]",
    );
    let custom = attn_bwd(Wrt::V, MaskKind::Custom, 0, AttnLayout::Bhsd);
    let mut ins2 = ins.clone();
    ins2[4] = Shape::of(&[5, 7], DType::Bool);
    assert_eq!(ok(&custom, &ins2), k);
    err(&custom, &ins[..4], "expects 5 input(s), got 4");
}

#[test]
fn rms_norm_backward() {
    let x = shp(&[sym("t"), st(16)], DType::F32);
    let g = f32s(&[16]);
    let op = |wrt| Op::RmsNormBackward { eps: 1e-6, wrt };
    assert_eq!(ok(&op(Wrt::Input), &[x.clone(), g.clone(), x.clone()]), x);
    assert_eq!(ok(&op(Wrt::Gamma), &[x.clone(), g.clone(), x.clone()]), g);
    assert_eq!(
        ok(
            &op(Wrt::Beta),
            &[x.clone(), g.clone(), g.clone(), x.clone()]
        ),
        g
    );
    err(
        &op(Wrt::Beta),
        &[x.clone(), g.clone(), x.clone()],
        "wrt beta needs",
    );
    err(
        &op(Wrt::Q),
        &[x.clone(), g.clone(), x.clone()],
        "wrt must be input",
    );
    err(
        &op(Wrt::Input),
        &[x.clone(), f32s(&[8]), x.clone()],
        "gamma length",
    );
    err(&op(Wrt::Input), &[x.clone(), g, f32s(&[2, 16])], "dy vs x");
}

#[test]
fn rope_backward() {
    let op = |n_rot| Op::RopeBackward {
        kind: RopeKind::Neox,
        head_dim: 8,
        n_rot,
    };
    let dy = f32s(&[2, 5, 32]);
    assert_eq!(ok(&op(8), &[dy.clone(), f32s(&[5, 4]), f32s(&[5, 4])]), dy);
    // per-token tables: batch·seq rows
    assert_eq!(
        ok(&op(4), &[dy.clone(), f32s(&[10, 2]), f32s(&[10, 2])]),
        dy
    );
    err(
        &op(8),
        &[dy.clone(), f32s(&[6, 4]), f32s(&[6, 4])],
        "seq (5) or batch·seq rows",
    );
    err(
        &op(3),
        &[dy.clone(), f32s(&[5, 1]), f32s(&[5, 1])],
        "must be even",
    );
    err(
        &op(8),
        &[dy.clone(), f32s(&[5, 4]), f32s(&[5, 3])],
        "sin vs cos",
    );
    err(
        &op(8),
        &[f32s(&[2, 5, 30]), f32s(&[5, 4]), f32s(&[5, 4])],
        "multiple of head_dim",
    );
}

#[test]
fn cumsum_and_gather_backward() {
    let dy = shp(&[st(3), sym("s")], DType::F32);
    let op = Op::CumsumBackward {
        axis: -1,
        exclusive: true,
    };
    assert_eq!(ok(&op, std::slice::from_ref(&dy)), dy);
    let op = Op::CumsumBackward {
        axis: 2,
        exclusive: false,
    };
    err(&op, &[dy], "axis 2 out of range for rank 2");
    let op = Op::GatherBackward {
        axis: 0,
        axis_dim: 50,
    };
    let dy = f32s(&[7, 4]);
    let idx = Shape::of(&[7], DType::I64);
    assert_eq!(ok(&op, &[dy.clone(), idx.clone()]), f32s(&[50, 4]));
    err(
        &op,
        &[dy.clone(), Shape::of(&[6], DType::I64)],
        "dy axis vs index count",
    );
    err(&op, &[dy, f32s(&[7])], "idx must be an integer");
}

#[test]
fn max_pool_backward() {
    let op = Op::MaxPool2dBackward {
        win: Window {
            kernel: [2, 2],
            stride: [2, 2],
            padding: [0, 0],
        },
    };
    let x = f32s(&[1, 3, 8, 8]);
    assert_eq!(ok(&op, &[x.clone(), f32s(&[1, 3, 4, 4])]), x);
    err(
        &op,
        &[x.clone(), f32s(&[1, 3, 3, 3])],
        "dy vs pooled output",
    );
    err(&op, &[x], "expects 2 input(s), got 1");
}

#[test]
fn conv_backward() {
    let geo = ([2, 2], [1, 1], [1, 1], 2);
    let bi = Op::Conv2dBackwardInput {
        geom: ConvGeom {
            stride: geo.0,
            padding: geo.1,
            dilation: geo.2,
            groups: geo.3,
        },
        input_hw: [9, 9],
    };
    let w = f32s(&[8, 2, 3, 3]);
    let dy = f32s(&[2, 8, 5, 5]);
    assert_eq!(ok(&bi, &[dy.clone(), w.clone()]), f32s(&[2, 4, 9, 9]));
    err(
        &bi,
        &[f32s(&[2, 8, 4, 4]), w.clone()],
        "dy vs forward conv output",
    );
    let bw = Op::Conv2dBackwardWeight {
        geom: ConvGeom {
            stride: geo.0,
            padding: geo.1,
            dilation: geo.2,
            groups: geo.3,
        },
        kernel: [3, 3],
    };
    assert_eq!(ok(&bw, &[f32s(&[2, 4, 9, 9]), dy.clone()]), w);
    err(
        &bw,
        &[f32s(&[2, 4, 9, 9]), f32s(&[2, 8, 5, 4])],
        "dy vs forward conv output",
    );
    err(&bw, &[f32s(&[2, 3, 9, 9]), dy], "not divisible by groups");
}

#[test]
fn packed_norm_grads() {
    let op = Op::AdaLayerNormBackward {
        eps: 1e-6,
        layer_norm: true,
    };
    let x = f32s(&[2, 5, 8]);
    // one modulation row per batch item: 80 + 2·16
    assert_eq!(
        ok(&op, &[x.clone(), f32s(&[2, 1, 8]), x.clone()]),
        f32s(&[112])
    );
    assert_eq!(
        ok(&op, &[x.clone(), f32s(&[1, 1, 8]), x.clone()]),
        f32s(&[96])
    );
    assert_eq!(ok(&op, &[x.clone(), x.clone(), x.clone()]), f32s(&[240]));
    err(
        &op,
        &[x.clone(), f32s(&[1, 5, 8]), x.clone()],
        "prefix of x's followed by 1s",
    );
    err(
        &op,
        &[x.clone(), f32s(&[2, 8]), x.clone()],
        "x's rank and last dim",
    );
    err(
        &op,
        &[x.clone(), f32s(&[2, 1, 8]), f32s(&[2, 5, 7])],
        "dy vs x",
    );
    let op = Op::GatedResidualBackward;
    assert_eq!(
        ok(&op, &[x.clone(), f32s(&[2, 1, 8]), x.clone()]),
        f32s(&[176])
    );
    let sym_x = shp(&[st(2), sym("s"), st(8)], DType::F32);
    err(
        &op,
        &[sym_x.clone(), f32s(&[2, 1, 8]), sym_x],
        "x must have static dims",
    );
}

#[test]
fn log_mel_backward() {
    let op = Op::LogMelBackward { n_fft: 8 };
    let spec = f32s(&[10, 16]);
    assert_eq!(
        ok(&op, &[spec.clone(), f32s(&[4, 5]), f32s(&[10, 4])]),
        spec
    );
    err(
        &op,
        &[spec.clone(), f32s(&[4, 5]), f32s(&[10, 5])],
        "dy vs log-mel output",
    );
    err(
        &op,
        &[f32s(&[10, 12]), f32s(&[4, 5]), f32s(&[10, 4])],
        "must be 16",
    );
}

#[test]
fn splat_backward() {
    let op = |sh_band, clip| Op::GaussianSplatRenderBackward {
        cfg: cfg(),
        loss_grad_clip: clip,
        sh_band,
        max_anisotropy: 10.0,
    };
    let mut ins = splat_inputs(sym("g"));
    ins.push(f32s(&[24, 32, 3]));
    // 14 fixed + 3·4 SH
    assert_eq!(ok(&op(1, 1.0), &ins), shp(&[sym("g"), st(26)], DType::F32));
    err(&op(2, 1.0), &ins, "sh_band 2 needs");
    err(&op(1, 0.0), &ins, "loss_grad_clip must be > 0");
    let mut bad = ins.clone();
    bad[7] = f32s(&[32, 24, 3]);
    err(&op(1, 1.0), &bad, "d_loss vs rendered image");
}

#[test]
fn spd_backward() {
    let op = |kind| Op::SpdBackward { kind, eps: 1e-4 };
    let x = f32s(&[2, 4, 4]);
    assert_eq!(
        ok(
            &op(SpdOp::BiMap),
            &[x.clone(), f32s(&[4, 3]), f32s(&[2, 3, 3])]
        ),
        x
    );
    err(
        &op(SpdOp::BiMap),
        &[x.clone(), f32s(&[4, 3]), x.clone()],
        "dy vs forward output",
    );
    assert_eq!(ok(&op(SpdOp::KarcherMean), &[x.clone(), f32s(&[4, 4])]), x);
    err(
        &op(SpdOp::ReEig),
        std::slice::from_ref(&x),
        "expects 2 input(s), got 1",
    );
}

/// Body: carries a [3], b [2] i32; slice x [4] → (a, b, custom : [5]).
fn scan_body() -> Graph {
    let mut g = Graph::new("body");
    let a = g.add(Op::Input { shape: f32s(&[3]) }, &[], "a").unwrap();
    let b = g
        .add(
            Op::Input {
                shape: Shape::of(&[2], DType::I32),
            },
            &[],
            "b",
        )
        .unwrap();
    let x = g.add(Op::Input { shape: f32s(&[4]) }, &[], "x").unwrap();
    let op = Op::Custom {
        name: "f".into(),
        attrs: serde_json::Value::Null,
        out: f32s(&[5]),
    };
    let y = g.add(op, &[a, x], "y").unwrap();
    g.set_outputs(&[a, b, y]).unwrap();
    g
}

#[test]
fn scan_backward() {
    let op = |wrt_xs| Op::ScanBackward {
        scan: ScanLoop {
            body: Box::new(scan_body()),
            num_carry: 2,
            length: 6,
        },
        wrt_xs,
    };
    let ins = [
        f32s(&[3]),
        Shape::of(&[2], DType::I32),
        f32s(&[6, 4]),
        f32s(&[6, 5]),
    ];
    assert_eq!(ok(&op(true), &ins), f32s(&[24]));
    // the integer carry makes the carry gradient undefined
    err(&op(false), &ins, "gradient target 1 must be a float");
    err(
        &op(true),
        &[
            ins[0].clone(),
            ins[1].clone(),
            ins[2].clone(),
            f32s(&[6, 4]),
        ],
        "dy vs stacked y",
    );
    err(&op(true), &ins[..2], "expects at least 3");
}
