//! Sample ops of the families whose inference is written in another branch
//! (elementwise, matmul, norm, attention, shape, reduce).

use rlx_ir::op::*;
use rlx_ir::{DType, Dim, GgmlType, Op, QuantScheme, ScaleLayout, ScaledFormat};

/// One op of every variant whose inference is owned by another branch.
pub fn foreign_ops() -> Vec<Op> {
    use rlx_ir::op::Activation as Act;
    let eps = 1e-5;
    vec![
        Op::Activation { kind: Act::Gelu },
        Op::Binary {
            kind: BinaryOp::Add,
        },
        Op::Compare { kind: CmpOp::Lt },
        Op::Where,
        Op::Cast {
            to: DType::F16,
            trunc: false,
        },
        Op::Fma,
        Op::ElementwiseRegion {
            steps: vec![
                RegionStep::Binary {
                    kind: BinaryOp::Mul,
                    a: RegionOperand::Input(0),
                    b: RegionOperand::Input(1),
                },
                RegionStep::Unary {
                    act: Act::Silu,
                    a: RegionOperand::Step(0),
                },
                RegionStep::Cast {
                    to: DType::F16,
                    a: RegionOperand::Step(1),
                },
            ],
        },
        Op::FusedSwiGLU { gate_first: true },
        Op::MatMul,
        Op::FusedMatMulBiasAct {
            act: Some(Act::Relu),
        },
        Op::DequantMatMul {
            scheme: QuantScheme::Gguf(GgmlType::Q4K),
            n: 64,
            k: 256,
        },
        Op::DequantMatMulT {
            scheme: QuantScheme::Gguf(GgmlType::Q6K),
            n: 48,
            k: 256,
        },
        Op::GroupedMatMul,
        Op::DequantGroupedMatMul {
            scheme: QuantScheme::Int4 {
                block_size: 32,
                asymmetric: true,
            },
            num_experts: 8,
            n: 64,
            k: 128,
        },
        Op::ScaledMatMul {
            lhs_fmt: ScaledFormat::Fp8E4m3,
            rhs_fmt: ScaledFormat::Fp8E5m2,
            layout: ScaleLayout::Block { size: 32 },
        },
        Op::ScaledQuantize {
            fmt: ScaledFormat::Int8,
            layout: ScaleLayout::PerRow,
        },
        Op::ScaledDequantize {
            fmt: ScaledFormat::Fp8E4m3,
            layout: ScaleLayout::PerTensor,
        },
        Op::ScaledQuantScale {
            fmt: ScaledFormat::Fp8E5m2,
            layout: ScaleLayout::Block { size: 16 },
        },
        Op::LayerNorm { eps },
        Op::RmsNorm { eps: 1e-6 },
        Op::GroupNorm { num_groups: 4, eps },
        Op::LayerNorm2d { eps },
        Op::FusedResidualLN {
            eps,
            has_bias: true,
        },
        Op::FusedResidualRmsNorm {
            eps,
            has_bias: false,
        },
        Op::AdaLayerNorm {
            eps,
            layer_norm: false,
        },
        Op::GatedResidual,
        Op::Attention {
            heads: 8,
            kv_heads: 2,
            head_dim: 64,
            mask: MaskKind::SlidingWindow,
            window: 128,
            layout: AttnLayout::Bshd,
            score_scale: Some(0.125),
            softcap: Some(50.0),
            dynamic_kv_len: false,
        },
        Op::FusedAttentionBlock {
            heads: 4,
            head_dim: 16,
            mask: MaskKind::Causal,
            rope: true,
        },
        Op::Rope {
            kind: RopeKind::Interleaved,
            head_dim: 64,
            n_rot: 32,
            per_token: true,
        },
        Op::AxialRope2d {
            end_x: 8,
            end_y: 8,
            head_dim: 32,
            num_heads: 2,
            theta: 10000.0,
            repeat_factor: 1,
        },
        Op::Reshape {
            dims: vec![Dim::from("b"), Dim::Static(6)],
        },
        Op::Transpose {
            perm: vec![1, 0, 2],
        },
        Op::Expand {
            dims: vec![Dim::Static(4), Dim::from("s")],
        },
        Op::Narrow {
            axis: -1,
            start: 2,
            len: 3,
        },
        Op::Concat { axis: 0 },
        Op::Gather,
        Op::GatherAxis { axis: 1 },
        Op::ScatterAdd { out_dim: 10 },
        Op::Reverse { axes: vec![0, -1] },
        Op::ResizeNearest2x,
        Op::ScatterNd,
        Op::ScatterElements { axis: 1 },
        Op::GatherNd { batch_dims: 1 },
        Op::GatherElements { axis: 0 },
        Op::Reduce {
            kind: ReduceOp::Max,
            axes: vec![-1],
            keep_dims: true,
        },
        Op::Softmax { axis: -1 },
        Op::SoftmaxCrossEntropy,
        Op::Cumsum {
            axis: 0,
            exclusive: false,
        },
        Op::TopK { k: 5, axis: -1 },
        Op::ArgMax {
            axis: 1,
            keep_dims: false,
        },
        Op::ArgMin {
            axis: 0,
            keep_dims: true,
        },
        Op::Sample {
            temperature: 0.7,
            top_k: 40,
            top_p: 0.9,
            seed: 42,
        },
    ]
}
