//! No panics: every op of these families, with ordinary, zero and extreme
//! attributes, against arbitrary operand lists. Inference must return, and
//! every error must name the op in brackets.

use super::*;
use proptest::prelude::*;
use rlx_ir::op::{
    AttnLayout, FftNorm, MaskKind, ReduceOp, RopeKind, SpdOp, SplatConfig, VqMetric, Wrt,
};
use rlx_ir::op::{ConvGeom, Recurrent, ScanLoop, Window};
use rlx_ir::Graph;

/// Ops of the five families with every size attribute set to `v`.
fn ops(v: usize) -> Vec<Op> {
    let a2 = [v, v];
    let u = v as u32;
    let cfg = SplatConfig {
        width: u,
        height: u,
        tile_size: u,
        radius_scale: v as f32,
        alpha_cutoff: 0.5,
        max_splat_steps: u,
        transmittance_threshold: 0.5,
        max_list_entries: u,
    };
    let mut body = Graph::new("b");
    let i = body.add(Op::Input { shape: f32s(&[2]) }, &[], "i").unwrap();
    body.set_outputs(&[i, i]).unwrap();
    let body = Box::new(body);
    vec![
        Op::Conv2d {
            geom: ConvGeom {
                stride: a2,
                padding: a2,
                dilation: a2,
                groups: v,
            },
        },
        Op::ConvTranspose2d {
            geom: ConvGeom {
                stride: a2,
                padding: a2,
                dilation: a2,
                groups: v,
            },
            output_padding: [0, 0],
        },
        Op::Pool2d {
            win: Window {
                kernel: a2,
                stride: a2,
                padding: [0, 0],
            },
            kind: ReduceOp::Max,
        },
        Op::Im2Col {
            win: Window {
                kernel: a2,
                stride: a2,
                padding: a2,
            },
            dilation: a2,
        },
        Op::SelectiveScan,
        Op::Mamba2 {
            heads: v,
            head_dim: v,
            state_size: v,
        },
        Op::GatedDeltaNet {
            heads: v,
            state_size: v,
        },
        Op::Lstm {
            net: Recurrent {
                hidden: v,
                num_layers: v,
                bidirectional: true,
                carry: true,
            },
        },
        Op::Gru {
            net: Recurrent {
                hidden: v,
                num_layers: v,
                bidirectional: false,
                carry: true,
            },
        },
        Op::Rnn {
            net: Recurrent {
                hidden: v,
                num_layers: v,
                bidirectional: true,
                carry: false,
            },
            relu: false,
        },
        Op::Scan {
            scan: ScanLoop {
                body: body.clone(),
                num_carry: v,
                length: v,
            },
            reverse: false,
        },
        Op::Fft {
            inverse: false,
            norm: FftNorm::Backward,
        },
        Op::LogMel { n_fft: v },
        Op::WelchPeaks {
            n_fft: v,
            n_segments: v,
            k: v,
        },
        Op::RngNormal {
            dims: vec![Dim::Static(v)],
            mean: 0.0,
            scale: 1.0,
            seed: None,
        },
        Op::VqAssign {
            metric: VqMetric::Dot,
        },
        Op::Spd {
            kind: SpdOp::BiMap,
            eps: v as f32,
        },
        Op::Spd {
            kind: SpdOp::KarcherMean,
            eps: v as f32,
        },
        Op::GaussianSplatRender { cfg },
        Op::GaussianSplatRasterize { cfg },
        Op::SoftmaxCrossEntropyBackward,
        Op::AttentionBackward {
            wrt: Wrt::Q,
            heads: v,
            head_dim: v,
            mask: MaskKind::Bias,
            window: v,
            layout: AttnLayout::Bshd,
        },
        Op::AttentionBackward {
            wrt: Wrt::V,
            heads: v,
            head_dim: v,
            mask: MaskKind::None,
            window: 0,
            layout: AttnLayout::Bhsd,
        },
        Op::RmsNormBackward {
            eps: 1e-6,
            wrt: Wrt::Beta,
        },
        Op::RopeBackward {
            kind: RopeKind::Neox,
            head_dim: v,
            n_rot: v,
        },
        Op::CumsumBackward {
            axis: v as i64,
            exclusive: false,
        },
        Op::GatherBackward {
            axis: -(v as i64),
            axis_dim: v,
        },
        Op::MaxPool2dBackward {
            win: Window {
                kernel: a2,
                stride: a2,
                padding: [0, 0],
            },
        },
        Op::Conv2dBackwardInput {
            geom: ConvGeom {
                stride: a2,
                padding: a2,
                dilation: a2,
                groups: v,
            },
            input_hw: a2,
        },
        Op::Conv2dBackwardWeight {
            geom: ConvGeom {
                stride: a2,
                padding: a2,
                dilation: a2,
                groups: v,
            },
            kernel: a2,
        },
        Op::AdaLayerNormBackward {
            eps: 1e-6,
            layer_norm: true,
        },
        Op::GatedResidualBackward,
        Op::LogMelBackward { n_fft: v },
        Op::GaussianSplatRenderBackward {
            cfg,
            loss_grad_clip: 1.0,
            sh_band: u,
            max_anisotropy: 2.0,
        },
        Op::SpdBackward {
            kind: SpdOp::BatchNorm,
            eps: 0.1,
        },
        Op::ScanBackward {
            scan: ScanLoop {
                body,
                num_carry: v,
                length: v,
            },
            wrt_xs: v.is_multiple_of(2),
        },
    ]
}

fn dim() -> impl Strategy<Value = Dim> {
    prop_oneof![
        (0usize..5).prop_map(Dim::Static),
        Just(Dim::Static(8)),
        Just(Dim::Static(16)),
        Just(Dim::Static(usize::MAX)),
        Just(Dim::Static(usize::MAX / 2 + 1)),
        Just(Dim::from("s")),
    ]
}

fn shape() -> impl Strategy<Value = Shape> {
    let dtype = prop_oneof![
        Just(DType::F32),
        Just(DType::F16),
        Just(DType::I32),
        Just(DType::C64),
        Just(DType::Bool)
    ];
    (prop::collection::vec(dim(), 0..5), dtype).prop_map(|(d, t)| Shape::new(d, t))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn inference_never_panics(
        v in prop_oneof![Just(0usize), Just(1), Just(2), Just(3), Just(usize::MAX)],
        which in 0usize..36,
        inputs in prop::collection::vec(shape(), 0..9),
    ) {
        let all = ops(v);
        let op = &all[which % all.len()];
        let refs: Vec<&Shape> = inputs.iter().collect();
        if let Err(e) = infer_shape(op, &refs) {
            let msg = e.to_string();
            prop_assert!(msg.starts_with(&format!("[{}]", op.name())), "{}", msg);
        }
    }
}

/// Valid (op, operands) pairs whose operands the next test perturbs.
fn valid_cases() -> Vec<(Op, Vec<Shape>)> {
    let conv = |groups| Op::Conv2d {
        geom: ConvGeom {
            stride: [2, 1],
            padding: [1, 0],
            dilation: [1, 2],
            groups,
        },
    };
    let bw = Op::Conv2dBackwardWeight {
        geom: ConvGeom {
            stride: [1, 1],
            padding: [1, 1],
            dilation: [1, 1],
            groups: 1,
        },
        kernel: [3, 3],
    };
    let mut splat = super::misc::splat_inputs(st(5));
    splat.push(f32s(&[24, 32, 3]));
    vec![
        (
            conv(2),
            vec![f32s(&[1, 4, 9, 9]), f32s(&[6, 2, 3, 3]), f32s(&[6])],
        ),
        (
            Op::ConvTranspose2d {
                geom: ConvGeom {
                    stride: [2, 2],
                    padding: [1, 1],
                    dilation: [1, 1],
                    groups: 1,
                },
                output_padding: [1, 1],
            },
            vec![f32s(&[1, 4, 5, 5]), f32s(&[4, 3, 3, 3])],
        ),
        (
            Op::Im2Col {
                win: Window {
                    kernel: [3, 3],
                    stride: [1, 1],
                    padding: [1, 1],
                },
                dilation: [1, 1],
            },
            vec![f32s(&[2, 3, 6, 6])],
        ),
        (
            Op::Lstm {
                net: Recurrent {
                    hidden: 5,
                    num_layers: 2,
                    bidirectional: true,
                    carry: true,
                },
            },
            vec![
                f32s(&[2, 7, 3]),
                f32s(&[4, 20, 10]),
                f32s(&[4, 20, 5]),
                f32s(&[4, 20]),
                f32s(&[4, 2, 5]),
                f32s(&[4, 2, 5]),
            ],
        ),
        (
            Op::WelchPeaks {
                n_fft: 8,
                n_segments: 3,
                k: 2,
            },
            vec![f32s(&[6, 16])],
        ),
        (bw, vec![f32s(&[2, 4, 9, 9]), f32s(&[2, 8, 9, 9])]),
        (
            Op::AdaLayerNormBackward {
                eps: 1e-6,
                layer_norm: true,
            },
            vec![f32s(&[2, 5, 8]), f32s(&[2, 1, 8]), f32s(&[2, 5, 8])],
        ),
        (
            Op::GaussianSplatRenderBackward {
                cfg: super::misc::cfg(),
                loss_grad_clip: 1.0,
                sh_band: 1,
                max_anisotropy: 4.0,
            },
            splat,
        ),
        (
            Op::SpdBackward {
                kind: SpdOp::BiMap,
                eps: 0.0,
            },
            vec![f32s(&[2, 4, 4]), f32s(&[4, 3]), f32s(&[2, 3, 3])],
        ),
    ]
}

#[test]
fn valid_cases_are_valid() {
    for (op, ins) in valid_cases() {
        ok(&op, &ins);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]
    #[test]
    fn perturbed_operands_never_panic(
        case in 0usize..9,
        operand in 0usize..8,
        axis in 0usize..4,
        d in dim(),
    ) {
        let cases = valid_cases();
        let (op, mut ins) = cases[case % cases.len()].clone();
        let n = ins.len();
        let s = &mut ins[operand % n];
        if !s.dims.is_empty() {
            let r = s.dims.len();
            s.dims[axis % r] = d;
        }
        let refs: Vec<&Shape> = ins.iter().collect();
        if let Err(e) = infer_shape(&op, &refs) {
            let msg = e.to_string();
            prop_assert!(msg.starts_with(&format!("[{}]", op.name())), "{}", msg);
        }
    }
}
