//! Tests over every thunk variant: names, one-line Display, exact io()
//! byte ranges, the active-extent table, offsets past 4 GiB, malformed
//! thunks and schedules.

mod expected;
mod focused;
mod samples;

use crate::thunk::matmul::Sgemm;
use crate::thunk::offsets::tag_weight;
use crate::thunk::shape::{Narrow, Transpose};
use crate::thunk::{
    ByteRange, HalfFlag, Thunk, ThunkIo, ThunkSchedule, THUNK_KINDS, THUNK_VARIANTS,
};
use expected::expect;
use rlx_ir::{DType, RngOptions};
use samples::samples;
use std::collections::HashSet;

/// Arena offsets used by the samples (1 MiB apart).
pub(super) const X0: usize = 0;
pub(super) const X1: usize = 1 << 20;
pub(super) const X2: usize = 2 << 20;
pub(super) const X3: usize = 3 << 20;
pub(super) const X4: usize = 4 << 20;
pub(super) const X5: usize = 5 << 20;
pub(super) const X6: usize = 6 << 20;
pub(super) const X7: usize = 7 << 20;
pub(super) const X8: usize = 8 << 20;
/// Weights-buffer offsets used by the samples (16 MiB apart, tagged).
pub(super) const W0: usize = tag_weight_const(0);
pub(super) const W1: usize = tag_weight_const(16 << 20);
pub(super) const W2: usize = tag_weight_const(32 << 20);
pub(super) const W3: usize = tag_weight_const(48 << 20);

const fn tag_weight_const(raw: usize) -> usize {
    raw | crate::thunk::offsets::WEIGHT_TAG
}

/// The seed's name strings, in the seed's order.
const EXPECTED_NAMES: [&str; 109] = [
    "nop",
    "cast",
    "cast_host",
    "cast_trunc_f32",
    "scaled_matmul",
    "scaled_quantize",
    "scaled_dequantize",
    "scaled_quant_scale",
    "sgemm",
    "batched_sgemm",
    "fused_mm_bias_act",
    "fused_binary_activation",
    "fused_ternary_activation",
    "activation",
    "activation_out",
    "gelu_approx_out",
    "gelu_approx_host",
    "layer_norm",
    "group_norm",
    "layer_norm2d",
    "conv_transpose2d",
    "rms_norm",
    "resize_nearest_2x",
    "binary",
    "binary_broadcast",
    "bias_add",
    "fused_residual_ln",
    "fused_residual_rms_norm",
    "ada_layer_norm",
    "gated_residual",
    "ada_layer_norm_backward",
    "gated_residual_backward",
    "fused_rms_norm_mul_silu",
    "fused_depthwise_conv1d_bsc",
    "gather",
    "narrow",
    "split_lastax",
    "copy",
    "attention",
    "fused_attn",
    "attention_bwd",
    "rms_norm_backward_input",
    "rms_norm_backward_gamma",
    "rms_norm_backward_beta",
    "rope_backward",
    "cumsum_backward",
    "gather_backward",
    "maxpool2d_backward",
    "conv2d_backward_input",
    "conv2d_backward_weight",
    "rope",
    "softmax",
    "softmax_cross_entropy_dense",
    "softmax_cross_entropy_with_logits",
    "softmax_cross_entropy_backward",
    "cumsum",
    "fused_swiglu",
    "concat",
    "compare",
    "reduce",
    "topk",
    "grouped_matmul",
    "scatter_add",
    "transpose",
    "gather_axis",
    "pool2d",
    "conv2d",
    "where",
    "fma",
    "elementwise_region",
    "batch_elementwise_region",
    "custom_op",
    "custom_gpu_op",
    "spd_host",
    "gaussian_splat_render",
    "gaussian_splat_render_backward",
    "gaussian_splat_prepare",
    "gaussian_splat_rasterize",
    "axial_rope2d_host",
    "im2col",
    "fft1d",
    "vq_assign",
    "scan_host",
    "host_op",
    "cpu_indexing",
    "log_mel",
    "log_mel_backward",
    "welch_peaks",
    "rng_normal",
    "rng_uniform",
    "gated_delta_net",
    "selective_scan",
    "sample",
    "reverse",
    "argreduce",
    "lstm",
    "gru",
    "rnn",
    "mamba2",
    "dequant_matmul_gguf",
    // rlx extension (not in the seed): the transposed product for training
    "dequant_matmul_gguf_t",
    "dequant_grouped_matmul_gguf",
    "dequant_matmul_int8",
    "dequant_matmul_int4",
    "dequant_matmul_fp8",
    "dequant_matmul_nvfp4",
    "fused_mlp_gate_up_swiglu",
    "fused_mlp_gate_up_gelu",
    "fused_mlp_down_residual",
];

fn ranges(v: &[(usize, usize)]) -> Vec<ByteRange> {
    v.iter().map(|&(o, l)| ByteRange::new(o, l)).collect()
}

#[test]
fn every_variant_has_one_sample_and_the_seed_name() {
    let s = samples();
    let names: Vec<&str> = s.iter().map(Thunk::name).collect();
    let unique: HashSet<&str> = names.iter().copied().collect();
    assert_eq!(names.len(), THUNK_VARIANTS, "one sample per variant");
    assert_eq!(
        unique.len(),
        THUNK_VARIANTS,
        "duplicate sample or name: {names:?}"
    );
    let expected: HashSet<&str> = EXPECTED_NAMES.iter().copied().collect();
    assert_eq!(expected.len(), 109);
    assert_eq!(unique, expected);
}

#[test]
fn thunk_kinds_list_every_variant_once_with_its_name() {
    // the sample of each variant has the name THUNK_KINDS gives its variant
    let s = samples();
    let kinds: HashSet<&str> = THUNK_KINDS.iter().map(|k| k.1).collect();
    assert_eq!(kinds.len(), THUNK_VARIANTS);
    for t in &s {
        let dbg = format!("{t:?}");
        let ident = dbg.split(['(', ' ']).next().unwrap_or("");
        let kind = THUNK_KINDS.iter().find(|k| k.0 == ident);
        assert_eq!(kind.map(|k| k.1), Some(t.name()), "{ident}");
    }
}

#[test]
fn display_is_one_line_starting_with_the_name() {
    for t in samples() {
        let d = t.to_string();
        assert!(!d.is_empty());
        assert!(!d.contains('\n'), "{d}");
        assert!(d.starts_with(t.name()), "{d}");
        let rest = &d[t.name().len()..];
        assert!(rest.is_empty() || rest.starts_with(' '), "{d}");
        if !matches!(t, Thunk::Nop) {
            assert!(d.contains('@'), "no offsets in {d}");
        }
    }
}

#[test]
fn sgemm_display_example() {
    let t = Thunk::Sgemm(Sgemm {
        a: 0,
        b: tag_weight(1024),
        c: 4096,
        m: 1,
        k: 576,
        n: 1536,
        dt: HalfFlag::F32,
        b_f16: false,
    });
    assert_eq!(
        t.to_string(),
        "sgemm m=1 k=576 n=1536 f32 a=@0 b=W0@1024 c=@4096"
    );
}

#[test]
fn io_matches_hand_computed_ranges() {
    let mut failures = Vec::new();
    for t in samples() {
        let want = expect(&t);
        let got = t.io();
        let want_io = ThunkIo {
            reads: ranges(&want.reads),
            writes: ranges(&want.writes),
        };
        if got != want_io {
            failures.push(format!(
                "{}:\n  got  {:?}\n  want {:?}",
                t.name(),
                got,
                want_io
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn active_extent_table_matches_seed() {
    let wrong: Vec<&str> = samples()
        .iter()
        .filter(|t| t.safe_for_active_extent() != expect(t).safe)
        .map(Thunk::name)
        .collect();
    assert!(wrong.is_empty(), "{wrong:?}");
}

#[test]
fn transpose_active_extent_predicate() {
    // perm (2, 0, 1): the leading output axis is not the leading input axis
    assert!(!Thunk::Transpose(samples::transpose_permuting()).safe_for_active_extent());
    // perm (0, 2, 1) of [2, 3, 4]: out [2, 4, 3], strides [12, 1, 4]
    let keep = Transpose {
        src: X0,
        dst: X1,
        total: 24,
        out_dims: vec![2, 4, 3],
        in_strides: vec![12, 1, 4],
    };
    assert!(keep.leading_axis_kept());
    assert!(Thunk::Transpose(keep.clone()).safe_for_active_extent());
    // broadcast of the leading axis (stride 0): unsafe
    let bcast = Transpose {
        in_strides: vec![0, 1, 4],
        ..keep.clone()
    };
    assert!(!Thunk::Transpose(bcast).safe_for_active_extent());
    // rank 1: inner product is 1, so stride 1 is safe
    let r1 = Transpose {
        out_dims: vec![5],
        in_strides: vec![1],
        total: 5,
        ..keep.clone()
    };
    assert!(r1.leading_axis_kept());
    // empty dims or strides: unsafe
    assert!(!Transpose {
        out_dims: vec![],
        ..keep.clone()
    }
    .leading_axis_kept());
    assert!(!Transpose {
        in_strides: vec![],
        ..keep
    }
    .leading_axis_kept());
}

#[test]
fn offsets_past_4gib_and_weight_tags_survive_io() {
    let a = 5usize << 32;
    let b = tag_weight((6usize << 32) + 8);
    let c = (7usize << 32) + 4;
    let io = Thunk::Sgemm(Sgemm {
        a,
        b,
        c,
        m: 2,
        k: 3,
        n: 4,
        dt: HalfFlag::F32,
        b_f16: true,
    })
    .io();
    assert_eq!(io.reads, ranges(&[(a, 24), (b, 24)]));
    assert_eq!(io.writes, ranges(&[(c, 32)]));
    assert!(io.reads[1].is_weight() && !io.reads[0].is_weight());
    assert_eq!(io.reads[1].start(), (6usize << 32) + 8);
    // an arena range and a weights range with the same raw offset never overlap
    let same_raw = ByteRange::new((6usize << 32) + 8, 24);
    assert!(!same_raw.overlaps(&io.reads[1]));
    // strided reads keep high offsets too
    let n = Narrow {
        src: a,
        dst: c,
        outer: 2,
        src_axis: 8,
        start: 2,
        len: 2,
        dt: HalfFlag::F16,
    };
    assert_eq!(
        Thunk::Narrow(n).io().reads,
        ranges(&[(a + 4, 4), (a + 20, 4)])
    );
}

#[test]
fn serde_round_trip() {
    for t in samples() {
        let json = serde_json::to_string(&t).expect("serialize");
        let back: Thunk = serde_json::from_str(&json).expect(&json);
        assert_eq!(back, t);
    }
}

#[test]
fn schedule_display_lists_thunks_by_index() {
    let sched = ThunkSchedule {
        thunks: samples().into_iter().take(12).collect(),
        rng: RngOptions {
            seed: 1,
            counter: 0,
        },
    };
    let text = sched.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 12);
    assert!(lines[0].starts_with(" 0 nop"), "{}", lines[0]);
    assert!(lines[11].starts_with("11 "), "{}", lines[11]);
    for (line, t) in lines.iter().zip(&sched.thunks) {
        assert!(line.contains(&t.to_string()));
    }
}

#[test]
fn half_flag() {
    assert_eq!(HalfFlag::from(DType::F16), HalfFlag::F16);
    assert_eq!(HalfFlag::from(DType::BF16), HalfFlag::F32);
    assert_eq!(HalfFlag::from(DType::I32), HalfFlag::F32);
    assert_eq!((HalfFlag::F16.size(), HalfFlag::F32.size()), (2, 4));
}
