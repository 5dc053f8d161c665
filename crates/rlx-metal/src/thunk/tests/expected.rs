//! Hand-computed io() and active-extent answers for every sample in
//! `samples.rs`. The match is exhaustive: a new variant does not compile
//! until it has an expectation here (and a sample there, which the name
//! test checks).
//!
//! Sizes are written as products of the sample's dims times the element
//! size, so each number can be checked by eye against the struct docs.

use super::*;
use crate::thunk::Thunk;

/// Expected `(offset, len)` reads and writes, and the active-extent answer.
pub(super) struct Expect {
    pub reads: Vec<(usize, usize)>,
    pub writes: Vec<(usize, usize)>,
    pub safe: bool,
}

fn e(reads: &[(usize, usize)], writes: &[(usize, usize)], safe: bool) -> Expect {
    Expect {
        reads: reads.to_vec(),
        writes: writes.to_vec(),
        safe,
    }
}

#[rustfmt::skip]
pub(super) fn expect(t: &Thunk) -> Expect {
    use Thunk as T;
    match t {
        T::Nop => e(&[], &[], true),
        // ---- elementwise
        T::Cast(_) => e(&[(X0, 10 * 4)], &[(X1, 10 * 2)], true),
        T::CastHost(_) => e(&[(X0, 10 * 8)], &[(X1, 10 * 4)], true),
        T::CastTruncF32(_) => e(&[(X0, 7 * 4)], &[(X1, 7 * 4)], true),
        T::ActivationInPlace(_) => e(&[(X0, 9 * 2)], &[(X0, 9 * 2)], true),
        T::ActivationOut(_) => e(&[(X0, 9 * 4)], &[(X1, 9 * 4)], true),
        T::GeluApproxOut(_) | T::GeluApproxHost(_) => e(&[(X0, 20)], &[(X1, 20)], true),
        T::FusedBinaryActivation(_) => e(&[(X0, 12), (X1, 12)], &[(X2, 12)], true),
        T::FusedTernaryActivation(_) => e(&[(X0, 24), (X1, 24), (X2, 24)], &[(X3, 24)], true),
        T::BinaryFull(_) => e(&[(X0, 1536 * 4), (X1, 1536 * 4)], &[(X2, 1536 * 4)], false),
        // lhs dense [2,3,4] f16, rhs [1,3,1] f16
        T::BinaryBroadcast(_) => e(&[(X0, 24 * 2), (X1, 3 * 2)], &[(X2, 24 * 2)], false),
        T::BiasAdd(_) => e(&[(X0, 4 * 8 * 4), (W0, 8 * 4)], &[(X1, 4 * 8 * 4)], true),
        T::Compare(_) => e(&[(X0, 40), (X1, 4)], &[(X2, 40)], true),
        T::Where(_) => e(&[(X0, 40), (X1, 4), (X2, 40)], &[(X3, 40)], true),
        T::Fma(_) => e(&[(X0, 12), (X1, 12), (X2, 12)], &[(X3, 12)], false),
        T::FusedSwiGLU(_) => e(&[(X0, 2 * 1536 * 4)], &[(X1, 1536 * 2)], true),
        // inputs at element indices 0, 5000 (scalar), 1.5e9 (modulus 10)
        T::ElementwiseRegion(_) => e(
            &[(0, 1000 * 4), (5000 * 4, 4), (6_000_000_000, 10 * 4)],
            &[(X3, 1000 * 4)],
            true,
        ),
        // 3 slices x 2 inputs of 8 f32, slices back to back
        T::BatchElementwiseRegion(_) => e(
            &[(0, 32), (400, 32), (800, 32), (1200, 32), (1600, 32), (2000, 32)],
            &[(X4, 3 * 8 * 4)],
            true,
        ),
        // ---- matmul
        T::Sgemm(_) => e(&[(X0, 576 * 4), (W0, 576 * 1536 * 4)], &[(X1, 1536 * 4)], true),
        T::BatchedSgemm(_) => e(&[(X0, 3 * 5 * 2), (X1, 4 * 5 * 7 * 2)], &[(X2, 4 * 3 * 7 * 2)], true),
        T::FusedMmBiasAct(_) => e(
            &[(X0, 2 * 64 * 4), (W0, 64 * 96 * 4), (W1, 96 * 4)],
            &[(X1, 2 * 96 * 4)],
            true,
        ),
        T::GroupedMatMul(_) => e(&[(X0, 5 * 16 * 4), (W0, 4 * 16 * 8 * 4), (X1, 5 * 4)], &[(X2, 5 * 8 * 4)], true),
        // block scales: [4, 2] and [8, 2] f32; no bias
        T::ScaledMatMul(_) => e(&[(X0, 4 * 64), (W0, 8 * 64), (X1, 8 * 4), (W1, 16 * 4)], &[(X2, 4 * 8 * 4)], false),
        T::ScaledQuantize(_) => e(&[(X0, 30 * 4), (X1, 3 * 4)], &[(X2, 30)], false),
        T::ScaledDequantize(_) => e(&[(X0, 30), (X1, 4)], &[(X2, 30 * 4)], false),
        T::ScaledQuantScale(_) => e(&[(X0, 30 * 4)], &[(X1, 3 * 3 * 4)], false),
        // ---- quant: Q4_K rows of 512 = 2 blocks of 144 bytes
        T::DequantMatMulGguf(_) => e(&[(X0, 512 * 4), (W0, 1536 * 288)], &[(X1, 1536 * 4)], true),
        // Q4_K k=512 (288 bytes/row), n=48 rows, m=3: x [3, 48], dst [3, 512]
        T::DequantMatMulGgufT(_) => e(&[(X0, 3 * 48 * 4), (W0, 48 * 288)], &[(X1, 3 * 512 * 4)], true),
        // Q6_K rows of 256 = 210 bytes, 8 experts x 32 rows
        T::DequantGroupedMatMulGguf(_) => e(
            &[(X0, 3 * 256 * 4), (W0, 8 * 32 * 210), (X1, 3 * 4)],
            &[(X2, 3 * 32 * 4)],
            true,
        ),
        // k=100, block 32 -> 4 blocks/row, 6 rows
        T::DequantMatMulInt8(_) => e(
            &[(X0, 2 * 100 * 4), (W0, 6 * 100), (W1, 24 * 4), (W2, 24 * 4)],
            &[(X1, 2 * 6 * 4)],
            true,
        ),
        // k=101: 51 bytes/row; symmetric: no zero points
        T::DequantMatMulInt4(_) => e(&[(X0, 2 * 101 * 4), (W0, 6 * 51), (W1, 24 * 4)], &[(X1, 48)], true),
        T::DequantMatMulFp8(_) => e(&[(X0, 2 * 16 * 4), (W0, 6 * 16), (W1, 6 * 4)], &[(X1, 48)], true),
        // k=40: 20 code bytes, 3 scale bytes per row
        T::DequantMatMulNvfp4(_) => e(&[(X0, 2 * 40 * 4), (W0, 6 * 20), (W1, 6 * 3), (W2, 4)], &[(X1, 48)], true),
        // ---- fused decode MLP
        T::FusedMlpGateUpSwiGLU(_) => e(
            &[(X0, 512 * 4), (W0, 1536 * 288), (W1, 1536 * 288)],
            &[(X1, 1536 * 2)],
            true,
        ),
        // Q8_0 rows of 64 = 2 blocks of 34 bytes
        T::FusedMlpGateUpGelu(_) => e(&[(X0, 256), (W0, 128 * 68), (W1, 128 * 68)], &[(X1, 128 * 4)], true),
        // Q6_K rows of 1536 = 6 blocks of 210; dst aliases res
        T::FusedMlpDownResidual(_) => e(
            &[(X0, 1536 * 4), (W0, 512 * 6 * 210), (X1, 512 * 4)],
            &[(X1, 512 * 4)],
            true,
        ),
        // ---- norms
        T::LayerNorm(_) => e(&[(X0, 3 * 576 * 4), (W0, 576 * 4), (W1, 576 * 4)], &[(X1, 3 * 576 * 4)], true),
        T::RmsNorm(_) => e(&[(X0, 576 * 2), (W0, 576 * 2), (W1, 576 * 2)], &[(X1, 576 * 2)], true),
        T::GroupNorm(_) => e(&[(X0, 240 * 4), (W0, 32), (W1, 32)], &[(X1, 240 * 4)], false),
        T::LayerNorm2d(_) => e(&[(X0, 240 * 2), (W0, 16), (W1, 16)], &[(X1, 240 * 2)], false),
        T::FusedResidualLN(_) => e(&[(X0, 64), (X1, 64), (W0, 32), (W1, 32), (W2, 32)], &[(X2, 64)], true),
        T::FusedResidualRmsNorm(_) => e(&[(X0, 64), (X1, 64), (W1, 32), (W2, 32)], &[(X2, 64)], true),
        // mod lead [2, 1] -> 2 modulation rows
        T::AdaLayerNorm(_) => e(&[(X0, 12 * 8 * 4), (X1, 2 * 8 * 4), (X2, 2 * 8 * 4)], &[(X3, 12 * 8 * 4)], true),
        T::GatedResidual(_) => e(&[(X0, 12 * 8 * 2), (X1, 12 * 8 * 2), (X2, 8 * 2)], &[(X0, 12 * 8 * 2)], true),
        T::FusedRmsNormMulSilu(_) => e(&[(X0, 256), (W0, 64), (W1, 64), (X1, 256)], &[(X2, 256)], true),
        // ---- attention: GQA 9 q heads / 3 kv heads, causal (no mask read)
        T::Attention(_) => e(
            &[(X0, 7 * 9 * 64 * 4), (X1, 7 * 3 * 64 * 4), (X2, 7 * 3 * 64 * 4)],
            &[(X4, 7 * 9 * 64 * 4)],
            true,
        ),
        // custom mask [1, 5, 5]; cos/sin [5, 8]
        T::FusedAttn(_) => e(
            &[(X0, 3 * 5 * 64 * 4), (X1, 25 * 4), (W0, 5 * 8 * 4), (W1, 5 * 8 * 4)],
            &[(X2, 5 * 64 * 4)],
            false,
        ),
        T::Rope(_) => e(&[(X0, 3 * 576 * 4), (W0, 3 * 32 * 4), (W1, 3 * 32 * 4)], &[(X1, 3 * 576 * 4)], true),
        T::AxialRope2dHost(_) => e(&[(X0, 16 * 32 * 4)], &[(X1, 16 * 32 * 4)], false),
        // ---- shape: columns 3..7 of two rows of 10
        T::Narrow(_) => e(&[(X0 + 12, 16), (X0 + 40 + 12, 16)], &[(X1, 2 * 4 * 4)], true),
        T::SplitLastAxis(_) => e(&[(X0, 2 * 6 * 2)], &[(X1, 2 * 2 * 2), (X2, 2 * 4 * 2)], true),
        T::Copy(_) => e(&[(X0, 200)], &[(X1, 200)], true),
        T::Concat(_) => e(&[(X0, 3 * 2 * 4), (X1, 3 * 3 * 4)], &[(X2, 3 * 5 * 4)], true),
        T::Transpose(_) => e(&[(X0, 24 * 4)], &[(X1, 24 * 4)], false),
        T::Reverse(_) => e(&[(X0, 30)], &[(X1, 30)], true),
        // ---- indexing
        T::Gather(_) => e(&[(W0, 49152 * 576 * 4), (X0, 3 * 4)], &[(X1, 3 * 576 * 4)], true),
        T::GatherAxis(_) => e(&[(X0, 2 * 5 * 4 * 4), (X1, 12)], &[(X2, 2 * 3 * 4 * 4)], true),
        T::ScatterAdd(_) => e(&[(X0, 3 * 4 * 4), (X1, 12)], &[(X2, 10 * 4 * 4)], true),
        // data [4,5,6], indices [3,2] -> updates [3, 6]
        // in place (dst == data): only indices and updates are read
        T::CpuIndexing(_) => e(&[(X1, 6 * 4), (X2, 18 * 4)], &[(X0, 120 * 4)], false),
        // ---- reduce
        T::Softmax(_) => e(&[(X0, 160)], &[(X0, 160)], true),
        T::SoftmaxCrossEntropyDense(_) => e(&[(X0, 60), (X1, 60)], &[(X2, 12)], true),
        T::SoftmaxCrossEntropyWithLogits(_) => e(&[(X0, 60), (X1, 12)], &[(X2, 12)], false),
        T::SoftmaxCrossEntropyBackward(_) => e(&[(X0, 60), (X1, 12), (X2, 12)], &[(X3, 60)], false),
        T::Cumsum(_) => e(&[(X0, 56)], &[(X1, 56)], true),
        T::Reduce(_) => e(&[(X0, 24 * 2)], &[(X1, 8 * 2)], true),
        T::TopK(_) => e(&[(X0, 80)], &[(X1, 24)], true),
        T::ArgReduce(_) => e(&[(X0, 30 * 4)], &[(X1, 6 * 4)], true),
        T::Sample(_) => e(&[(X0, 2 * 49152 * 4)], &[(X1, 8)], true),
        // ---- conv (groups 2: weight [6, 2, 3, 3])
        T::Conv2D(_) => e(&[(X0, 256 * 4), (W0, 108 * 4)], &[(X1, 96 * 4)], true),
        T::ConvTranspose2d(_) => e(&[(X0, 64 * 2), (W0, 96 * 2)], &[(X1, 384 * 2)], false),
        T::Pool2D(_) => e(&[(X0, 48 * 4)], &[(X1, 12 * 4)], true),
        T::Im2Col(_) => e(&[(X0, 32 * 4)], &[(X1, 2 * 4 * 9 * 4)], false),
        T::ResizeNearest2x(_) => e(&[(X0, 24 * 4)], &[(X1, 96 * 4)], false),
        T::FusedDepthwiseConv1dBsc(_) => e(&[(X0, 56 * 4), (W0, 32 * 4)], &[(X1, 32 * 4)], true),
        // ---- sequence
        T::GatedDeltaNet(_) => e(
            &[(X0, 256), (X1, 256), (X2, 256), (X3, 32), (X4, 32), (X5, 4 * 64 * 4)],
            &[(X5, 4 * 64 * 4), (X6, 256)],
            true,
        ),
        // with the state [1, 8, 4] read and written in place
        T::SelectiveScan(_) => e(
            &[(X0, 96), (X1, 96), (W0, 128), (X2, 48), (X3, 48), (X5, 128)],
            &[(X5, 128), (X4, 96)],
            true,
        ),
        T::Mamba2(_) => e(&[(X0, 96), (X1, 24), (W0, 8), (X2, 60), (X3, 60)], &[(X4, 96)], true),
        // H=4, 4 gates, in=5, 1 layer, batch 2
        T::Lstm(_) => e(
            &[(X0, 30 * 4), (W0, 16 * 5 * 4), (W1, 16 * 4 * 4), (W2, 16 * 4), (X1, 8 * 4), (X2, 8 * 4)],
            &[(X3, 2 * 3 * 4 * 4)],
            true,
        ),
        // H=2, 3 gates, 2 layers, bidir, carry: w_ih [4, 6, max(3, 4)], w_hh 2*2*6*2,
        // bias 2*2*6, output seq 2 + 2 carry rows
        T::Gru(_) => e(
            &[(X0, 6 * 4), (W0, 96 * 4), (W1, 48 * 4), (W2, 24 * 4), (W3, 24 * 4), (X1, 8 * 4)],
            &[(X2, 4 * 4 * 4)],
            true,
        ),
        T::Rnn(_) => e(&[(X0, 12 * 4), (W0, 15 * 4), (W1, 25 * 4), (W2, 5 * 4), (X1, 5 * 4)], &[(X2, 5 * 5 * 4)], true),
        // ---- signal
        T::Fft1d(_) => e(&[(X0, 2 * 16 * 4)], &[(X1, 2 * 16 * 4)], false),
        // rows of 16 f32; bins 0..5 of re and im
        T::LogMel(_) => e(
            &[(X0, 20), (X0 + 32, 20), (X0 + 64, 20), (X0 + 96, 20), (W0, 15 * 4)],
            &[(X1, 6 * 4)],
            false,
        ),
        T::LogMelBackward(_) => e(&[(X0, 32), (W0, 32), (X1, 8)], &[(X2, 32)], false),
        T::WelchPeaks(_) => e(&[(X0, 6 * 16 * 4)], &[(X1, 8 * 4)], false),
        // ---- backward (bias mask [1, 2, 4, 6]; wrt k)
        T::AttentionBackward(_) => e(
            &[(X0, 256), (X1, 384), (X2, 384), (X3, 256), (X4, 48 * 4)],
            &[(X5, 384)],
            true,
        ),
        T::AdaLayerNormBackward(_) => e(&[(X0, 192), (X1, 64), (X2, 192)], &[(X3, 192 + 2 * 64)], true),
        T::GatedResidualBackward(_) => e(&[(X0, 96), (X1, 32), (X2, 96)], &[(X3, 2 * 96 + 32)], true),
        T::RmsNormBackwardInput(_) => e(&[(X0, 96), (W0, 32), (W1, 32), (X1, 96)], &[(X2, 96)], true),
        T::RmsNormBackwardGamma(_) | T::RmsNormBackwardBeta(_) => {
            e(&[(X0, 96), (W0, 32), (W1, 32), (X1, 96)], &[(X2, 32)], true)
        }
        T::RopeBackward(_) => e(&[(X0, 192), (W0, 48), (W1, 48)], &[(X1, 192)], true),
        T::CumsumBackward(_) => e(&[(X0, 24)], &[(X1, 24)], true),
        T::GatherBackward(_) => e(&[(X0, 96), (X1, 12)], &[(X2, 320)], true),
        T::MaxPool2dBackward(_) => e(&[(X0, 128), (X1, 32)], &[(X2, 128)], true),
        T::Conv2dBackwardInput(_) => e(&[(X0, 96 * 4), (W0, 108 * 4)], &[(X1, 256 * 4)], true),
        T::Conv2dBackwardWeight(_) => e(&[(X0, 256 * 4), (X1, 96 * 4)], &[(X2, 6 * 4 * 9 * 4)], true),
        // ---- splats (lengths are f32 elements; camera 20 f32)
        T::GaussianSplatRender(_) => e(
            &[(X0, 120), (X1, 120), (X2, 160), (X3, 40), (X4, 120), (X5, 360), (X6, 80)],
            &[(X7, 288)],
            false,
        ),
        T::GaussianSplatRenderBackward(_) => e(
            &[(X0, 120), (X1, 120), (X2, 160), (X3, 40), (X4, 120), (X5, 360), (X6, 80), (X7, 288)],
            &[(X8, 1000)],
            false,
        ),
        T::GaussianSplatPrepare(_) => e(
            &[(X0, 120), (X1, 120), (X2, 160), (X3, 40), (X4, 120), (X5, 360), (X6, 80)],
            &[(X7, 640)],
            false,
        ),
        T::GaussianSplatRasterize(_) => e(&[(X0, 640), (X1, 80)], &[(X2, 288)], false),
        // ---- host: f32 [2,3], i64 [3] -> f16 [2,3]
        T::CustomOp(_) | T::CustomGpuOp(_) => e(&[(X0, 24), (X1, 24)], &[(X2, 12)], false),
        // 32 elements stored as f32 in the arena
        T::SpdHost(_) => e(&[(X0, 256)], &[(X1, 256)], false),
        T::ScanHost(_) => e(&[(X0, 16), (X1, 80)], &[(X2, 80)], false),
        T::HostOp(_) => e(&[(X0, 48)], &[(X1, 24)], false),
        T::RngNormal(_) | T::RngUniform(_) => e(&[], &[(X0, 40)], false),
        T::VqAssign(_) => e(&[(X0, 160), (W0, 512)], &[(X1, 20)], false),
    }
}
