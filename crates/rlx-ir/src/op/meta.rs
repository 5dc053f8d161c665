//! Per-op metadata: the snake-case name (also the serde tag) and the family
//! that owns its shape inference and lowering.

use super::Op;
use serde::{Deserialize, Serialize};

/// Families of ops; each has its own shape-inference module and (later) its
/// own lowering and kernel module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpFamily {
    /// Graph leaves: inputs, params, state, constants.
    Leaf,
    /// Elementwise and elementwise regions.
    Elementwise,
    /// Dense, quantised, grouped and scaled matmuls.
    MatMul,
    /// Normalisations.
    Norm,
    /// Attention and positional encodings.
    Attention,
    /// Layout and indexing ops.
    Shape,
    /// Reductions, softmax, sampling.
    Reduce,
    /// Convolution and pooling.
    Conv,
    /// Recurrences and scans.
    Sequence,
    /// FFT and audio features.
    Signal,
    /// Random fills, VQ, SPD, splats, custom ops.
    Misc,
    /// Gradients.
    Backward,
}

impl Op {
    /// Snake-case name, as serialised and as printed in errors.
    pub fn name(&self) -> &'static str {
        use Op::*;
        match self {
            Input { .. } => "input",
            Param { .. } => "param",
            State { .. } => "state",
            Constant { .. } => "constant",
            Activation { .. } => "activation",
            Binary { .. } => "binary",
            Compare { .. } => "compare",
            Where => "where",
            Cast { .. } => "cast",
            Fma => "fma",
            ElementwiseRegion { .. } => "elementwise_region",
            FusedSwiGLU { .. } => "fused_swiglu",
            MatMul => "mat_mul",
            FusedMatMulBiasAct { .. } => "fused_mat_mul_bias_act",
            DequantMatMul { .. } => "dequant_mat_mul",
            DequantMatMulT { .. } => "dequant_mat_mul_t",
            GroupedMatMul => "grouped_mat_mul",
            DequantGroupedMatMul { .. } => "dequant_grouped_mat_mul",
            ScaledMatMul { .. } => "scaled_mat_mul",
            ScaledQuantize { .. } => "scaled_quantize",
            ScaledDequantize { .. } => "scaled_dequantize",
            ScaledQuantScale { .. } => "scaled_quant_scale",
            LayerNorm { .. } => "layer_norm",
            RmsNorm { .. } => "rms_norm",
            GroupNorm { .. } => "group_norm",
            LayerNorm2d { .. } => "layer_norm2d",
            FusedResidualLN { .. } => "fused_residual_ln",
            FusedResidualRmsNorm { .. } => "fused_residual_rms_norm",
            AdaLayerNorm { .. } => "ada_layer_norm",
            GatedResidual => "gated_residual",
            Attention { .. } => "attention",
            FusedAttentionBlock { .. } => "fused_attention_block",
            Rope { .. } => "rope",
            AxialRope2d { .. } => "axial_rope2d",
            Reshape { .. } => "reshape",
            Transpose { .. } => "transpose",
            Expand { .. } => "expand",
            Narrow { .. } => "narrow",
            Concat { .. } => "concat",
            Gather => "gather",
            GatherAxis { .. } => "gather_axis",
            ScatterAdd { .. } => "scatter_add",
            Reverse { .. } => "reverse",
            ResizeNearest2x => "resize_nearest2x",
            ScatterNd => "scatter_nd",
            ScatterElements { .. } => "scatter_elements",
            GatherNd { .. } => "gather_nd",
            GatherElements { .. } => "gather_elements",
            Reduce { .. } => "reduce",
            Softmax { .. } => "softmax",
            SoftmaxCrossEntropy => "softmax_cross_entropy",
            SoftmaxCrossEntropyBackward => "softmax_cross_entropy_backward",
            Cumsum { .. } => "cumsum",
            TopK { .. } => "top_k",
            ArgMax { .. } => "arg_max",
            ArgMin { .. } => "arg_min",
            Sample { .. } => "sample",
            Conv2d { .. } => "conv2d",
            ConvTranspose2d { .. } => "conv_transpose2d",
            Pool2d { .. } => "pool2d",
            Im2Col { .. } => "im2_col",
            SelectiveScan => "selective_scan",
            Mamba2 { .. } => "mamba2",
            GatedDeltaNet { .. } => "gated_delta_net",
            Lstm { .. } => "lstm",
            Gru { .. } => "gru",
            Rnn { .. } => "rnn",
            Scan { .. } => "scan",
            Fft { .. } => "fft",
            LogMel { .. } => "log_mel",
            WelchPeaks { .. } => "welch_peaks",
            RngNormal { .. } => "rng_normal",
            RngUniform { .. } => "rng_uniform",
            VqAssign { .. } => "vq_assign",
            Spd { .. } => "spd",
            GaussianSplatRender { .. } => "gaussian_splat_render",
            GaussianSplatPrepare { .. } => "gaussian_splat_prepare",
            GaussianSplatRasterize { .. } => "gaussian_splat_rasterize",
            Custom { .. } => "custom",
            AttentionBackward { .. } => "attention_backward",
            RmsNormBackward { .. } => "rms_norm_backward",
            RopeBackward { .. } => "rope_backward",
            CumsumBackward { .. } => "cumsum_backward",
            GatherBackward { .. } => "gather_backward",
            MaxPool2dBackward { .. } => "max_pool2d_backward",
            Conv2dBackwardInput { .. } => "conv2d_backward_input",
            Conv2dBackwardWeight { .. } => "conv2d_backward_weight",
            AdaLayerNormBackward { .. } => "ada_layer_norm_backward",
            GatedResidualBackward => "gated_residual_backward",
            LogMelBackward { .. } => "log_mel_backward",
            GaussianSplatRenderBackward { .. } => "gaussian_splat_render_backward",
            SpdBackward { .. } => "spd_backward",
            ScanBackward { .. } => "scan_backward",
        }
    }

    /// The op's family.
    pub fn family(&self) -> OpFamily {
        use Op::*;
        match self {
            Input { .. } | Param { .. } | State { .. } | Constant { .. } => OpFamily::Leaf,
            Activation { .. }
            | Binary { .. }
            | Compare { .. }
            | Where
            | Cast { .. }
            | Fma
            | ElementwiseRegion { .. }
            | FusedSwiGLU { .. } => OpFamily::Elementwise,
            MatMul
            | FusedMatMulBiasAct { .. }
            | DequantMatMul { .. }
            | DequantMatMulT { .. }
            | GroupedMatMul
            | DequantGroupedMatMul { .. }
            | ScaledMatMul { .. }
            | ScaledQuantize { .. }
            | ScaledDequantize { .. }
            | ScaledQuantScale { .. } => OpFamily::MatMul,
            LayerNorm { .. }
            | RmsNorm { .. }
            | GroupNorm { .. }
            | LayerNorm2d { .. }
            | FusedResidualLN { .. }
            | FusedResidualRmsNorm { .. }
            | AdaLayerNorm { .. }
            | GatedResidual => OpFamily::Norm,
            Attention { .. } | FusedAttentionBlock { .. } | Rope { .. } | AxialRope2d { .. } => {
                OpFamily::Attention
            }
            Reshape { .. }
            | Transpose { .. }
            | Expand { .. }
            | Narrow { .. }
            | Concat { .. }
            | Gather
            | GatherAxis { .. }
            | ScatterAdd { .. }
            | Reverse { .. }
            | ResizeNearest2x
            | ScatterNd
            | ScatterElements { .. }
            | GatherNd { .. }
            | GatherElements { .. } => OpFamily::Shape,
            Reduce { .. }
            | Softmax { .. }
            | SoftmaxCrossEntropy
            | Cumsum { .. }
            | TopK { .. }
            | ArgMax { .. }
            | ArgMin { .. }
            | Sample { .. } => OpFamily::Reduce,
            Conv2d { .. } | ConvTranspose2d { .. } | Pool2d { .. } | Im2Col { .. } => {
                OpFamily::Conv
            }
            SelectiveScan
            | Mamba2 { .. }
            | GatedDeltaNet { .. }
            | Lstm { .. }
            | Gru { .. }
            | Rnn { .. }
            | Scan { .. } => OpFamily::Sequence,
            Fft { .. } | LogMel { .. } | WelchPeaks { .. } => OpFamily::Signal,
            RngNormal { .. }
            | RngUniform { .. }
            | VqAssign { .. }
            | Spd { .. }
            | GaussianSplatRender { .. }
            | GaussianSplatPrepare { .. }
            | GaussianSplatRasterize { .. }
            | Custom { .. } => OpFamily::Misc,
            SoftmaxCrossEntropyBackward
            | AttentionBackward { .. }
            | RmsNormBackward { .. }
            | RopeBackward { .. }
            | CumsumBackward { .. }
            | GatherBackward { .. }
            | MaxPool2dBackward { .. }
            | Conv2dBackwardInput { .. }
            | Conv2dBackwardWeight { .. }
            | AdaLayerNormBackward { .. }
            | GatedResidualBackward
            | LogMelBackward { .. }
            | GaussianSplatRenderBackward { .. }
            | SpdBackward { .. }
            | ScanBackward { .. } => OpFamily::Backward,
        }
    }

    /// True for graph leaves (no operands).
    pub fn is_leaf(&self) -> bool {
        self.family() == OpFamily::Leaf
    }
}
