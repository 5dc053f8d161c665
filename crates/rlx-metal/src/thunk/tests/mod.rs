//! Tests over every thunk variant: names, one-line Display, exact io()
//! byte ranges, the active-extent table, offsets past 4 GiB, malformed
//! thunks and schedules.

mod expected;
mod samples;

use crate::thunk::attention::Attention;
use crate::thunk::indexing::{CpuIndexing, IndexingThunk};
use crate::thunk::matmul::Sgemm;
use crate::thunk::offsets::tag_weight;
use crate::thunk::quant::DequantMatMulGguf;
use crate::thunk::region::{BatchElementwiseRegion, ElementwiseRegion};
use crate::thunk::shape::{Narrow, SplitLastAxis, Transpose};
use crate::thunk::signal::Fft1d;
use crate::thunk::{ByteRange, HalfFlag, Thunk, ThunkIo, ThunkSchedule, THUNK_VARIANTS};
use expected::expect;
use rlx_ir::{DType, GgmlType, QuantScheme, RngOptions};
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
const EXPECTED_NAMES: [&str; 108] = [
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
    assert_eq!(expected.len(), 108);
    assert_eq!(unique, expected);
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
        "sgemm m=1 k=576 n=1536 f32 a=@0 b=W@1024 c=@4096"
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
fn attention_layouts_and_masks() {
    let base = Attention {
        batch: 2,
        seq: 4,
        kv_seq: 10,
        heads: 8,
        kv_heads: 2,
        head_dim: 32,
        dt: HalfFlag::F16,
        ..samples::attention()
    };
    let q = 2 * 4 * 8 * 32 * 2;
    let kv = 2 * 10 * 2 * 32 * 2;
    for bhsd in [0, 1] {
        // no mask / causal / sliding window: mask not read
        for kind in [0, 1, 4] {
            let io = Thunk::Attention(Attention {
                bhsd,
                mask_kind: kind,
                ..base.clone()
            })
            .io();
            assert_eq!(
                io.reads,
                ranges(&[(X0, q), (X1, kv), (X2, kv)]),
                "bhsd={bhsd} kind={kind}"
            );
            assert_eq!(io.writes, ranges(&[(X4, q)]));
        }
        let custom = Thunk::Attention(Attention {
            bhsd,
            mask_kind: 2,
            ..base.clone()
        })
        .io();
        assert_eq!(
            custom.reads,
            ranges(&[(X0, q), (X1, kv), (X2, kv), (X3, 2 * 4 * 10 * 2)])
        );
        let bias = Thunk::Attention(Attention {
            bhsd,
            mask_kind: 3,
            ..base.clone()
        })
        .io();
        assert_eq!(
            bias.reads,
            ranges(&[(X0, q), (X1, kv), (X2, kv), (X3, 2 * 8 * 4 * 10 * 2)])
        );
    }
}

#[test]
fn rope_strided_and_per_token() {
    // Rope reading q out of a fused QKV row of 3 * 576
    let r = crate::thunk::attention::Rope {
        src_row_stride: 3 * 576,
        ..samples::rope()
    };
    let io = Thunk::Rope(r.clone()).io();
    let row = 576 * 4;
    assert_eq!(
        io.reads[..3],
        ranges(&[(X0, row), (X0 + 3 * row, row), (X0 + 6 * row, row)])[..]
    );
    assert_eq!(io.writes, ranges(&[(X1, 3 * row)]));
    // per-token tables: one row per (batch, seq) token
    let p = crate::thunk::attention::Rope {
        batch: 2,
        cos_per_token: true,
        ..samples::rope()
    };
    let io = Thunk::Rope(p).io();
    assert_eq!(
        io.reads,
        ranges(&[(X0, 6 * row), (W0, 6 * 32 * 4), (W1, 6 * 32 * 4)])
    );
}

#[test]
fn gguf_q4_1_with_f16_activations() {
    let t = DequantMatMulGguf {
        x: X0,
        w_q: W0,
        dst: X1,
        m: 2,
        k: 576,
        n: 1536,
        scheme: QuantScheme::Gguf(GgmlType::Q4_1),
        x_f16: true,
        dst_f16: true,
    };
    let io = Thunk::DequantMatMulGguf(t).io();
    // 576 / 32 = 18 blocks of 20 bytes per row
    assert_eq!(io.reads, ranges(&[(X0, 2 * 576 * 2), (W0, 1536 * 18 * 20)]));
    assert_eq!(io.writes, ranges(&[(X1, 2 * 1536 * 2)]));
}

#[test]
fn split_with_gaps_reads_only_the_windows() {
    let s = SplitLastAxis {
        src: X0,
        outer: 2,
        src_axis: 10,
        dt: HalfFlag::F32,
        segments: vec![(X1, 0, 2), (X2, 6, 3)],
    };
    let io = Thunk::SplitLastAxis(s).io();
    assert_eq!(
        io.reads,
        ranges(&[(X0, 8), (X0 + 24, 12), (X0 + 40, 8), (X0 + 64, 12)])
    );
    assert_eq!(io.writes, ranges(&[(X1, 16), (X2, 24)]));
}

#[test]
fn region_prologue_and_strided_slices() {
    let mut offs = [0u32; 16];
    offs[1] = 64;
    let r = ElementwiseRegion {
        len: 48,
        num_inputs: 2,
        num_steps: 1,
        dst: X1,
        input_offs: offs,
        chain: [0; 128],
        scalar_input_mask: 0,
        input_modulus: [0; 16],
        prologue: 1,
        out_n: 1,
        out_c: 2,
        out_h: 4,
        out_w: 6,
        prologue_input: 0,
    };
    // prologue input is the pre-upsample [1, 2, 2, 3]
    assert_eq!(
        Thunk::ElementwiseRegion(r).io().reads,
        ranges(&[(0, 12 * 4), (256, 48 * 4)])
    );
    let mut chain = [0u32; 128];
    chain[..4].copy_from_slice(&[0, 2, 0, 0]); // silu(in0): one input per slice
    let mut offs = [0u32; 64];
    offs[..2].copy_from_slice(&[10, 20]);
    let b = BatchElementwiseRegion {
        slice_len: 6,
        num_batch: 2,
        num_steps: 1,
        base_dst: X4,
        slice_elems: 8,
        batch_input_offs: offs,
        chain,
        scalar_input_mask: 0,
        input_modulus: [0; 16],
    };
    let io = Thunk::BatchElementwiseRegion(b).io();
    assert_eq!(io.reads, ranges(&[(40, 24), (80, 24)]));
    assert_eq!(io.writes, ranges(&[(X4, 24), (X4 + 32, 24)]));
}

#[test]
fn indexing_variants() {
    let io = |t: IndexingThunk| Thunk::CpuIndexing(CpuIndexing { thunk: t }).io();
    let se = io(IndexingThunk::ScatterElements {
        data: X0,
        indices: X1,
        updates: X2,
        dst: X3,
        data_dims: vec![4, 5],
        indices_dims: vec![2, 5],
        axis: 0,
        dtype: DType::I64,
    });
    assert_eq!(
        se.reads,
        ranges(&[(X0, 20 * 8), (X1, 10 * 4), (X2, 10 * 8)])
    );
    assert_eq!(se.writes, ranges(&[(X3, 20 * 8)]));
    // GatherND data [2, 3, 4], indices [2, 1, 1] with 1 batch dim -> out [2, 1, 4]
    let gn = io(IndexingThunk::GatherNd {
        data: X0,
        indices: X1,
        dst: X2,
        data_dims: vec![2, 3, 4],
        indices_dims: vec![2, 1, 1],
        batch_dims: 1,
        dtype: DType::F16,
    });
    assert_eq!(gn.reads, ranges(&[(X0, 24 * 2), (X1, 2 * 4)]));
    assert_eq!(gn.writes, ranges(&[(X2, 8 * 2)]));
    let ge = io(IndexingThunk::GatherElements {
        data: X0,
        indices: X1,
        dst: X2,
        data_dims: vec![3, 3],
        indices_dims: vec![2, 3],
        axis: 1,
        dtype: DType::F32,
    });
    assert_eq!(ge.reads, ranges(&[(X0, 36), (X1, 24)]));
    assert_eq!(ge.writes, ranges(&[(X2, 24)]));
}

#[test]
fn fft_real_input_and_f64() {
    let t = Fft1d {
        src: X0,
        dst: X1,
        outer: 3,
        n_complex: 16,
        inverse: true,
        norm_tag: 1,
        dtype: DType::F64,
        real_input: true,
    };
    let io = Thunk::Fft1d(t).io();
    assert_eq!(io.reads, ranges(&[(X0, 3 * 16 * 8)]));
    assert_eq!(io.writes, ranges(&[(X1, 3 * 32 * 8)]));
}

#[test]
fn malformed_thunks_do_not_panic() {
    let big = u32::MAX;
    let mut odd: Vec<Thunk> = vec![
        Sgemm {
            a: usize::MAX,
            b: usize::MAX,
            c: 0,
            m: big,
            k: big,
            n: big,
            dt: HalfFlag::F32,
            b_f16: false,
        }
        .into(),
        Transpose {
            src: 0,
            dst: 0,
            total: 0,
            out_dims: vec![3, 0],
            in_strides: vec![],
        }
        .into(),
        Narrow {
            src: usize::MAX,
            dst: 0,
            outer: big,
            src_axis: big,
            start: big,
            len: big,
            dt: HalfFlag::F16,
        }
        .into(),
        ElementwiseRegion {
            len: big,
            num_inputs: 99,
            num_steps: 99,
            dst: 0,
            input_offs: [big; 16],
            chain: [big; 128],
            scalar_input_mask: big,
            input_modulus: [big; 16],
            prologue: 1,
            out_n: big,
            out_c: big,
            out_h: big,
            out_w: big,
            prologue_input: 99,
        }
        .into(),
        BatchElementwiseRegion {
            slice_len: big,
            num_batch: big,
            num_steps: big,
            base_dst: usize::MAX,
            slice_elems: 1,
            batch_input_offs: [big; 64],
            chain: [0; 128],
            scalar_input_mask: 0,
            input_modulus: [0; 16],
        }
        .into(),
        crate::thunk::indexing::Gather {
            table: 0,
            idx: 0,
            dst: 0,
            num_idx: big,
            trailing: big,
            dt: HalfFlag::F32,
            table_rows: big,
        }
        .into(),
    ];
    // every sample with its u32 dims pushed to the limit, through serde
    for t in samples() {
        let json = serde_json::to_string(&t).expect("serialize");
        let maxed = regex_free_max_u32(&json);
        if let Ok(m) = serde_json::from_str::<Thunk>(&maxed) {
            odd.push(m);
        }
    }
    assert!(odd.len() > 60, "only {} malformed thunks built", odd.len());
    for t in odd {
        let io = t.io();
        assert!(io.all().count() < 200_000, "{}", t.name());
        let _ = t.to_string();
        let _ = t.safe_for_active_extent();
    }
}

/// Replace every small integer literal in a JSON text by `u32::MAX`
/// (fields that cannot take it make deserialisation fail; those samples
/// are skipped).
fn regex_free_max_u32(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let mut digits = String::new();
    let flush = |digits: &mut String, out: &mut String, next: Option<char>| {
        if !digits.is_empty() {
            let is_int = !matches!(next, Some('.') | Some('e') | Some('E'));
            let small = digits.len() <= 6;
            out.push_str(if is_int && small {
                "4294967295"
            } else {
                digits
            });
            digits.clear();
        }
    };
    let chars: Vec<char> = json.chars().collect();
    let mut prev = ' ';
    for &c in &chars {
        let in_number =
            c.is_ascii_digit() && (!digits.is_empty() || matches!(prev, ':' | '[' | ','));
        if in_number {
            digits.push(c);
        } else {
            flush(&mut digits, &mut out, Some(c));
            out.push(c);
        }
        prev = if in_number { prev } else { c };
    }
    flush(&mut digits, &mut out, None);
    out
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
