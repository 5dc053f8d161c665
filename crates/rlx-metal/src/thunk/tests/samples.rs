//! One sample of every thunk variant, with distinct small dims so that a
//! wrong size formula shows up as a wrong byte count.

use super::*;
use crate::thunk::attention::*;
use crate::thunk::backward::*;
use crate::thunk::binary::*;
use crate::thunk::conv::*;
use crate::thunk::elementwise::*;
use crate::thunk::fused::*;
use crate::thunk::host::*;
use crate::thunk::indexing::*;
use crate::thunk::matmul::*;
use crate::thunk::norm::*;
use crate::thunk::quant::*;
use crate::thunk::reduce::*;
use crate::thunk::region::*;
use crate::thunk::sequence::*;
use crate::thunk::shape::*;
use crate::thunk::signal::*;
use crate::thunk::splat::*;
use crate::thunk::{HalfFlag::*, Thunk};
use rlx_ir::op::{Activation, BinaryOp, CmpOp, ReduceOp, SpdOp};
use rlx_ir::{DType, GgmlType, Graph, Op, QuantScheme, ScaleLayout, ScaledFormat, Shape};

/// Every variant once (108 with `Nop`).
pub(super) fn samples() -> Vec<Thunk> {
    let mut v: Vec<Thunk> = vec![Thunk::Nop];
    v.extend(elementwise());
    v.extend(matmul_quant());
    v.extend(norm_attention());
    v.extend(shape_reduce_conv());
    v.extend(sequence_signal_backward());
    v.extend(splat_host());
    v
}

#[rustfmt::skip]
fn elementwise() -> Vec<Thunk> {
    let mut chain = [0u32; 128];
    chain[..4].copy_from_slice(&[2, 0, 0, 1]); // add(in0, in1)
    let mut region_chain = chain;
    region_chain[4..8].copy_from_slice(&[2, 2, STEP_OPERAND, 2]); // mul(step0, in2)
    let mut input_offs = [0u32; 16];
    input_offs[..3].copy_from_slice(&[0, 5000, 1_500_000_000]);
    let mut modulus = [0u32; 16];
    modulus[2] = 10;
    let mut batch_offs = [0u32; 64];
    batch_offs[..6].copy_from_slice(&[0, 100, 200, 300, 400, 500]);
    vec![
        Cast { src: X0, dst: X1, len: 10, src_dt: F32, dst_dt: F16 }.into(),
        CastHost { src: X0, dst: X1, len: 10, src_dt: DType::I64, dst_dt: DType::I32 }.into(),
        CastTruncF32 { src: X0, dst: X1, len: 7 }.into(),
        ActivationInPlace { data: X0, len: 9, act: Activation::Silu, dt: F16 }.into(),
        ActivationOut { src: X0, dst: X1, len: 9, act: Activation::Relu, dt: F32 }.into(),
        GeluApproxOut { src: X0, dst: X1, len: 5 }.into(),
        GeluApproxHost { src: X0, dst: X1, len: 5 }.into(),
        FusedBinaryActivation { lhs: X0, rhs: X1, dst: X2, len: 6, op: BinaryOp::Mul, act: Activation::Silu, dt: F16 }.into(),
        FusedTernaryActivation {
            lhs: X0, rhs0: X1, rhs1: X2, dst: X3, len: 6,
            op0: BinaryOp::Add, op1: BinaryOp::Mul, act: Activation::Relu, dt: F32,
        }.into(),
        BinaryFull { lhs: X0, rhs: X1, dst: X2, len: 1536, op: BinaryOp::Add, dt: F32 }.into(),
        BinaryBroadcast {
            lhs: X0, rhs: X1, dst: X2, len: 24, op: BinaryOp::Sub, dt: F16, rank: 3,
            out_dims: vec![2, 3, 4], lhs_strides: vec![12, 4, 1], rhs_strides: vec![0, 1, 0],
        }.into(),
        BiasAdd { src: X0, bias: W0, dst: X1, m: 4, n: 8, dt: F32 }.into(),
        Compare { lhs: X0, rhs: X1, dst: X2, len: 10, op: CmpOp::Lt, lhs_scalar: false, rhs_scalar: true }.into(),
        Where {
            cond: X0, on_true: X1, on_false: X2, dst: X3, len: 10,
            cond_scalar: false, true_scalar: true, false_scalar: false,
        }.into(),
        Fma { a: X0, b: X1, c: X2, dst: X3, len: 3 }.into(),
        FusedSwiGLU { src: X0, dst: X1, n_half: 1536, total: 1536, src_dt: F32, dst_dt: F16, gate_first: false }.into(),
        ElementwiseRegion {
            len: 1000, num_inputs: 3, num_steps: 2, dst: X3, input_offs, chain: region_chain,
            scalar_input_mask: 0b10, input_modulus: modulus,
            prologue: 0, out_n: 0, out_c: 0, out_h: 0, out_w: 0, prologue_input: 0,
        }.into(),
        BatchElementwiseRegion {
            slice_len: 8, num_batch: 3, num_steps: 1, base_dst: X4, slice_elems: 8,
            batch_input_offs: batch_offs, chain, scalar_input_mask: 0, input_modulus: [0; 16],
        }.into(),
    ]
}

pub(super) const Q4K: QuantScheme = QuantScheme::Gguf(GgmlType::Q4K);

#[rustfmt::skip]
fn matmul_quant() -> Vec<Thunk> {
    let e4 = ScaledFormat::Fp8E4m3;
    vec![
        Sgemm { a: X0, b: W0, c: X1, m: 1, k: 576, n: 1536, dt: F32, b_f16: false }.into(),
        BatchedSgemm { a: X0, b: X1, c: X2, batch: 4, m: 3, k: 5, n: 7, dt: F16, a_bcast: true, b_bcast: false }.into(),
        FusedMmBiasAct { a: X0, w: W0, bias: W1, c: X1, m: 2, k: 64, n: 96, act: Some(Activation::Gelu), dt: F32 }.into(),
        GroupedMatMul { input: X0, weight: W0, expert_idx: X1, dst: X2, m: 5, k_dim: 16, n: 8, num_experts: 4 }.into(),
        ScaledMatMul {
            lhs: X0, rhs: W0, lhs_scale: X1, rhs_scale: W1, bias: W2, dst: X2, m: 4, k: 64, n: 8,
            lhs_fmt: e4, rhs_fmt: e4, layout: ScaleLayout::Block { size: 32 }, has_bias: false,
        }.into(),
        ScaledQuantize { x: X0, scale: X1, dst: X2, rows: 3, cols: 10, fmt: ScaledFormat::Int8, layout: ScaleLayout::PerRow }.into(),
        ScaledDequantize {
            codes: X0, scale: X1, dst: X2, rows: 3, cols: 10, fmt: ScaledFormat::Fp8E5m2, layout: ScaleLayout::PerTensor,
        }.into(),
        ScaledQuantScale { x: X0, dst: X1, rows: 3, cols: 10, fmt: e4, layout: ScaleLayout::Block { size: 4 } }.into(),
        DequantMatMulGguf { x: X0, w_q: W0, dst: X1, m: 1, k: 512, n: 1536, scheme: Q4K, x_f16: false, dst_f16: false }.into(),
        DequantMatMulGgufT { x: X0, w_q: W0, dst: X1, m: 3, k: 512, n: 48, scheme: Q4K }.into(),
        DequantGroupedMatMulGguf {
            input: X0, w_q: W0, expert_idx: X1, dst: X2, m: 3, k_dim: 256, n: 32, num_experts: 8,
            scheme: QuantScheme::Gguf(GgmlType::Q6K),
        }.into(),
        DequantMatMulInt8 { x: X0, w_q: W0, scale: W1, zp: W2, dst: X1, m: 2, k: 100, n: 6, block_size: 32, is_asymmetric: true }.into(),
        DequantMatMulInt4 { x: X0, w_q: W0, scale: W1, zp: W2, dst: X1, m: 2, k: 101, n: 6, block_size: 32, is_asymmetric: false }.into(),
        DequantMatMulFp8 { x: X0, w_q: W0, scale: W1, dst: X1, m: 2, k: 16, n: 6, e5m2: true }.into(),
        DequantMatMulNvfp4 { x: X0, w_q: W0, scale: W1, global_scale: W2, dst: X1, m: 2, k: 40, n: 6 }.into(),
        FusedMlpGateUpSwiGLU { x: X0, gate_w: W0, up_w: W1, dst: X1, k: 512, n: 1536, scheme: Q4K, x_f16: false, dst_f16: true }.into(),
        FusedMlpGateUpGelu { x: X0, gate_w: W0, up_w: W1, dst: X1, k: 64, n: 128, scheme: QuantScheme::Gguf(GgmlType::Q8_0) }.into(),
        FusedMlpDownResidual {
            x: X0, w: W0, res: X1, dst: X1, k: 1536, n: 512, scheme: QuantScheme::Gguf(GgmlType::Q6K),
            x_f16: false, dst_f16: false, res_f16: false,
        }.into(),
    ]
}

/// `[lead_rank, x_lead[8], mod_lead[8]]`.
pub(super) fn lead_pack(x_lead: &[u32], mod_lead: &[u32]) -> [u32; 17] {
    let mut p = [0u32; 17];
    p[0] = x_lead.len() as u32;
    p[1..1 + x_lead.len()].copy_from_slice(x_lead);
    p[9..9 + mod_lead.len()].copy_from_slice(mod_lead);
    p
}

/// A GQA attention sample (BSHD, causal) that tests tweak.
#[rustfmt::skip]
pub(super) fn attention() -> Attention {
    Attention {
        q: X0, k: X1, v: X2, mask: X3, out: X4, batch: 1, seq: 7, kv_seq: 7, heads: 9, kv_heads: 3,
        head_dim: 64, mask_kind: 1, window: 0, dt: F32, bhsd: 0, score_scale: 0.0, attn_logit_softcap: 0.0, kv_len: None, kv_len_per_batch: false, kv_dt: None,
    }
}

/// A contiguous RoPE sample that tests tweak.
#[rustfmt::skip]
pub(super) fn rope() -> Rope {
    Rope {
        src: X0, cos: W0, sin: W1, dst: X1, batch: 1, seq: 3, hidden: 576, head_dim: 64, n_rot: 64, dt: F32,
        src_row_stride: 0, cos_per_token: false, interleaved: false,
    }
}

#[rustfmt::skip]
fn norm_attention() -> Vec<Thunk> {
    vec![
        LayerNorm { src: X0, g: W0, b: W1, dst: X1, rows: 3, h: 576, eps: 1e-5, dt: F32 }.into(),
        RmsNorm { src: X0, g: W0, b: W1, dst: X1, rows: 1, h: 576, eps: 1e-6, dt: F16 }.into(),
        GroupNorm { src: X0, g: W0, b: W1, dst: X1, n: 2, c: 8, h: 3, w: 5, num_groups: 4, eps: 1e-5, dt: F32 }.into(),
        LayerNorm2d { src: X0, g: W0, b: W1, dst: X1, n: 2, c: 8, h: 3, w: 5, eps: 1e-6, dt: F16 }.into(),
        FusedResidualLN {
            x: X0, res: X1, bias: W0, g: W1, b: W2, out: X2, rows: 2, h: 8, eps: 1e-5, has_bias: true, dt: F32,
        }.into(),
        FusedResidualRmsNorm {
            x: X0, res: X1, bias: W0, g: W1, b: W2, out: X2, rows: 2, h: 8, eps: 1e-5, has_bias: false, dt: F32,
        }.into(),
        AdaLayerNorm {
            x: X0, scale: X1, shift: X2, out: X3, rows: 12, h: 8, eps: 1e-6, layer_norm: true,
            lead_pack: lead_pack(&[2, 6], &[2, 1]), dt: F32,
        }.into(),
        GatedResidual { x: X0, y: X1, gate: X2, out: X0, rows: 12, h: 8, lead_pack: lead_pack(&[12], &[1]), dt: F16 }.into(),
        FusedRmsNormMulSilu { x: X0, g: W0, b: W1, z: X1, out: X2, rows: 4, h: 16, eps: 1e-6, dt: F32 }.into(),
        attention().into(),
        FusedAttn {
            qkv: X0, mask: X1, cos: W0, sin: W1, out: X2, batch: 1, seq: 5, heads: 4, head_dim: 16,
            mask_kind: 2, scale_bits: 0.25f32.to_bits(), has_rope: 1,
        }.into(),
        rope().into(),
        AxialRope2dHost {
            src: X0, dst: X1, batch: 1, seq: 16, hidden: 32, end_x: 4, end_y: 4, head_dim: 16, num_heads: 2,
            theta: 10000.0, repeat_factor: 1,
        }.into(),
    ]
}

/// A permuting transpose of a dense `[2, 3, 4]`: perm (2, 0, 1).
#[rustfmt::skip]
pub(super) fn transpose_permuting() -> Transpose {
    Transpose { src: X0, dst: X1, total: 24, out_dims: vec![4, 2, 3], in_strides: vec![1, 12, 4] }
}

#[rustfmt::skip]
fn shape_reduce_conv() -> Vec<Thunk> {
    vec![
        Narrow { src: X0, dst: X1, outer: 2, src_axis: 10, start: 3, len: 4, dt: F32 }.into(),
        SplitLastAxis { src: X0, outer: 2, src_axis: 6, dt: F16, segments: vec![(X1, 0, 2), (X2, 2, 4)] }.into(),
        Copy { src: X0, dst: X1, len: 100, dt: F16 }.into(),
        Concat { dst: X2, outer: 3, dst_axis: 5, inner: 1, dt: F32, inputs: vec![(X0, 2), (X1, 3)] }.into(),
        transpose_permuting().into(),
        Reverse { src: X0, dst: X1, dims: vec![3, 5], rev_mask: vec![false, true], elem_bytes: 2 }.into(),
        Gather { table: W0, idx: X0, dst: X1, num_idx: 3, trailing: 576, dt: F32, table_rows: 49152 }.into(),
        GatherAxis { table: X0, idx: X1, dst: X2, outer: 2, axis_dim: 5, num_idx: 3, trailing: 4 }.into(),
        ScatterAdd { updates: X0, indices: X1, dst: X2, num_updates: 3, out_dim: 10, trailing: 4 }.into(),
        CpuIndexing {
            thunk: IndexingThunk::ScatterNd {
                data: X0, indices: X1, updates: X2, dst: X0, data_dims: vec![4, 5, 6], indices_dims: vec![3, 2],
                dtype: DType::F32, upd_dtype: DType::F32,
            },
        }.into(),
        Softmax { data: X0, rows: 4, cols: 10, dt: F32 }.into(),
        SoftmaxCrossEntropyDense { logits: X0, targets: X1, dst: X2, n: 3, c: 5 }.into(),
        SoftmaxCrossEntropyWithLogits { logits: X0, labels: X1, dst: X2, n: 3, c: 5 }.into(),
        SoftmaxCrossEntropyBackward { logits: X0, labels: X1, d_loss: X2, dlogits: X3, n: 3, c: 5 }.into(),
        Cumsum { src: X0, dst: X1, rows: 2, cols: 7, exclusive: false }.into(),
        Reduce { src: X0, dst: X1, outer: 2, reduced: 3, inner: 4, op: ReduceOp::Sum, dt: F16 }.into(),
        TopK { src: X0, dst: X1, outer: 2, axis_dim: 10, k: 3 }.into(),
        ArgReduce { src: X0, dst: X1, outer: 2, reduced: 5, inner: 3, is_max: true }.into(),
        Sample { logits: X0, dst: X1, batch: 2, vocab: 49152, top_k: 40, top_p: 0.9, temperature: 0.7, seed: 7 }.into(),
        Conv2D {
            src: X0, weight: W0, dst: X1, n: 1, c_in: 4, h: 8, w: 8, c_out: 6, h_out: 4, w_out: 4,
            kh: 3, kw: 3, sh: 2, sw: 2, ph: 1, pw: 1, dh: 1, dw: 1, groups: 2,
        }.into(),
        ConvTranspose2d {
            src: X0, weight: W0, dst: X1, n: 1, c_in: 4, h: 4, w_in: 4, c_out: 6, h_out: 8, w_out: 8,
            kh: 2, kw: 2, sh: 2, sw: 2, ph: 0, pw: 0, dh: 1, dw: 1, groups: 1, dt: F16,
        }.into(),
        Pool2D {
            src: X0, dst: X1, n: 1, c: 3, h: 4, w: 4, h_out: 2, w_out: 2, kh: 2, kw: 2, sh: 2, sw: 2, ph: 0, pw: 0,
            kind: ReduceOp::Max,
        }.into(),
        Im2Col {
            x: X0, col: X1, n: 1, c_in: 2, h: 4, w: 4, h_out: 3, w_out: 3, kh: 2, kw: 2, sh: 1, sw: 1, ph: 0, pw: 0,
            dh: 1, dw_dil: 1,
        }.into(),
        ResizeNearest2x { src: X0, dst: X1, n: 1, c: 2, h: 3, w: 4, dt: F32 }.into(),
        FusedDepthwiseConv1dBsc { src: X0, weight: W0, dst: X1, batch: 1, width: 7, out_seq: 4, channels: 8, k: 4, silu: true }.into(),
    ]
}

#[rustfmt::skip]
fn sequence_signal_backward() -> Vec<Thunk> {
    vec![
        GatedDeltaNet {
            q: X0, k: X1, v: X2, g: X3, beta: X4, state: X5, dst: X6, batch: 1, seq: 2, heads: 4, state_size: 8, f16: false,
        }.into(),
        SelectiveScan { x: X0, delta: X1, a: W0, b: X2, c: X3, state: Some(X5), dst: X4, batch: 1, seq: 3, hidden: 8, state_size: 4 }.into(),
        Mamba2 { x: X0, dt: X1, a: W0, b: X2, c: X3, state: None, dst: X4, batch: 1, seq: 3, heads: 2, head_dim: 4, state_size: 5 }.into(),
        Lstm {
            x: X0, w_ih: W0, w_hh: W1, bias: W2, h0: X1, c0: X2, dst: X3, batch: 2, seq: 3, input_size: 5, hidden: 4,
            num_layers: 1, bidirectional: false, carry: false,
        }.into(),
        Gru {
            x: X0, w_ih: W0, w_hh: W1, b_ih: W2, b_hh: W3, h0: X1, dst: X2, batch: 1, seq: 2, input_size: 3, hidden: 2,
            num_layers: 2, bidirectional: true, carry: true,
        }.into(),
        Rnn {
            x: X0, w_ih: W0, w_hh: W1, bias: W2, h0: X1, dst: X2, batch: 1, seq: 4, input_size: 3, hidden: 5,
            num_layers: 1, bidirectional: false, carry: true, relu: true,
        }.into(),
        Fft1d { src: X0, dst: X1, outer: 2, n_complex: 8, inverse: false, norm_tag: 0, dtype: DType::F32, real_input: false }.into(),
        LogMel { spec: X0, filters: W0, dst: X1, outer: 2, n_fft: 8, n_bins: 5, n_mels: 3 }.into(),
        LogMelBackward { spec: X0, filters: W0, dy: X1, dst: X2, outer: 1, n_fft: 4, n_bins: 4, n_mels: 2 }.into(),
        WelchPeaks { spec: X0, dst: X1, welch_batch: 2, n_fft: 8, n_segments: 3, k: 4 }.into(),
        AttentionBackward {
            q: X0, k: X1, v: X2, dy: X3, mask: X4, out: X5, batch: 1, seq: 4, kv_seq: 6, heads: 2, head_dim: 8,
            mask_kind: 3, window: 0, wrt: 1, bhsd: 0,
        }.into(),
        AdaLayerNormBackward {
            x: X0, scale: X1, dy: X2, out: X3, h: 8, eps: 1e-6, layer_norm: true, seq_per_mod: 3, mod_rows: 2, dt: F32,
        }.into(),
        GatedResidualBackward { y: X0, gate: X1, dy: X2, out: X3, h: 8, seq_per_mod: 3, mod_rows: 2, dt: F16 }.into(),
        RmsNormBackwardInput { x: X0, gamma: W0, beta: W1, dy: X1, dx: X2, rows: 3, h: 8, eps: 1e-6 }.into(),
        RmsNormBackwardGamma { x: X0, gamma: W0, beta: W1, dy: X1, dgamma: X2, rows: 3, h: 8, eps: 1e-6 }.into(),
        RmsNormBackwardBeta { x: X0, gamma: W0, beta: W1, dy: X1, dbeta: X2, rows: 3, h: 8, eps: 1e-6 }.into(),
        RopeBackward { dy: X0, cos: W0, sin: W1, dx: X1, batch: 1, seq: 3, hidden: 16, head_dim: 8, n_rot: 8, cos_len: 12 }.into(),
        CumsumBackward { dy: X0, dx: X1, rows: 2, cols: 3, exclusive: true }.into(),
        GatherBackward { dy: X0, indices: X1, dst: X2, outer: 2, axis_dim: 10, num_idx: 3, trailing: 4 }.into(),
        MaxPool2dBackward {
            x: X0, dy: X1, dx: X2, n: 1, c: 2, h: 4, w: 4, h_out: 2, w_out: 2, kh: 2, kw: 2, sh: 2, sw: 2, ph: 0, pw: 0,
        }.into(),
        Conv2dBackwardInput {
            dy: X0, w: W0, dx: X1, n: 1, c_in: 4, h: 8, w_in: 8, c_out: 6, h_out: 4, w_out: 4, kh: 3, kw: 3,
            sh: 2, sw: 2, ph: 1, pw: 1, dh: 1, dw: 1, groups: 2,
        }.into(),
        Conv2dBackwardWeight {
            x: X0, dy: X1, dw: X2, n: 1, c_in: 4, h: 8, w: 8, c_out: 6, h_out: 4, w_out: 4, kh: 3, kw: 3,
            sh: 2, sw: 2, ph: 1, pw: 1, dh: 1, dw_dil: 1, groups: 1,
        }.into(),
    ]
}

#[rustfmt::skip]
fn splat_host() -> Vec<Thunk> {
    let f32s = |d: &[usize]| Shape::of(d, DType::F32);
    let custom_in = vec![(X0, 6, f32s(&[2, 3])), (X1, 3, Shape::of(&[3], DType::I64))];
    let custom_out = (X2, 6, Shape::of(&[2, 3], DType::F16));
    vec![
        GaussianSplatRender {
            positions_off: X0, positions_len: 30, scales_off: X1, scales_len: 30, rotations_off: X2, rotations_len: 40,
            opacities_off: X3, opacities_len: 10, colors_off: X4, colors_len: 30, sh_coeffs_off: X5, sh_coeffs_len: 90,
            meta_off: X6, dst_off: X7, dst_len: 72, width: 6, height: 4, tile_size: 16, radius_scale: 3.0,
            alpha_cutoff: 1.0 / 255.0, max_splat_steps: 64, transmittance_threshold: 1e-4, max_list_entries: 1024,
        }.into(),
        GaussianSplatRenderBackward {
            positions_off: X0, positions_len: 30, scales_off: X1, scales_len: 30, rotations_off: X2, rotations_len: 40,
            opacities_off: X3, opacities_len: 10, colors_off: X4, colors_len: 30, sh_coeffs_off: X5, sh_coeffs_len: 90,
            meta_off: X6, d_loss_off: X7, d_loss_len: 72, packed_off: X8, packed_len: 250, width: 6, height: 4,
            tile_size: 16, radius_scale: 3.0, alpha_cutoff: 1.0 / 255.0, max_splat_steps: 64,
            transmittance_threshold: 1e-4, max_list_entries: 1024, loss_grad_clip: 1.0, sh_band: 1, max_anisotropy: 10.0,
        }.into(),
        GaussianSplatPrepare {
            positions_off: X0, positions_len: 30, scales_off: X1, scales_len: 30, rotations_off: X2, rotations_len: 40,
            opacities_off: X3, opacities_len: 10, colors_off: X4, colors_len: 30, sh_coeffs_off: X5, sh_coeffs_len: 90,
            meta_off: X6, meta_len: 20, prep_off: X7, prep_len: 160, width: 6, height: 4, tile_size: 16,
            radius_scale: 3.0, alpha_cutoff: 1.0 / 255.0, max_splat_steps: 64, transmittance_threshold: 1e-4,
            max_list_entries: 1024,
        }.into(),
        GaussianSplatRasterize {
            prep_off: X0, prep_len: 160, meta_off: X1, meta_len: 20, dst_off: X2, dst_len: 72, count: 10, width: 6,
            height: 4, tile_size: 16, alpha_cutoff: 1.0 / 255.0, max_splat_steps: 64, transmittance_threshold: 1e-4,
            max_list_entries: 1024,
        }.into(),
        CustomOp { name: "my.op".into(), inputs: custom_in.clone(), output: custom_out.clone(), attrs: vec![1, 2] }.into(),
        CustomGpuOp { name: "my.gpu_op".into(), inputs: custom_in, output: custom_out, attrs: vec![] }.into(),
        SpdHost {
            op: Op::Spd { kind: SpdOp::ReEig, eps: 1e-4 },
            inputs: vec![(X0, 32, Shape::of(&[2, 4, 4], DType::F64))],
            output: (X1, 32, Shape::of(&[2, 4, 4], DType::F64)),
        }.into(),
        ScanHost {
            desc: ScanHostDesc {
                body: Graph::new("body"), num_carry: 1, length: 5, reverse: false,
                operands: vec![(X0, 16, f32s(&[4])), (X1, 80, f32s(&[5, 4]))],
                output: (X2, 80, f32s(&[5, 4])),
            },
        }.into(),
        HostOp {
            desc: HostOpDesc {
                op: Op::Activation { kind: Activation::Exp },
                inputs: vec![(X0, f32s(&[3, 4]))],
                output: (X1, Shape::of(&[3, 4], DType::F16)),
            },
        }.into(),
        RngNormal { dst: X0, len: 10, mean: 0.0, scale: 1.0, key: 42, offset: 0, op_seed: None }.into(),
        RngUniform { dst: X0, len: 10, low: -1.0, high: 1.0, key: 43, offset: 7, op_seed: Some(3.0) }.into(),
        VqAssign { x: X0, cb: W0, out: X1, n: 5, d: 8, k: 16, metric: 0 }.into(),
    ]
}
