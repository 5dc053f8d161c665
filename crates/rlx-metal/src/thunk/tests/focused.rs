//! Focused io() cases beyond the one-sample-per-variant table: attention
//! layouts and masks, strided RoPE, GGUF Q4_1, split windows, region
//! prologue and strided slices, indexing ops, FFT, malformed thunks.

use super::*;
use crate::thunk::attention::{Attention, Rope};
use crate::thunk::indexing::{CpuIndexing, Gather, IndexingThunk};
use crate::thunk::matmul::Sgemm;
use crate::thunk::quant::DequantMatMulGguf;
use crate::thunk::region::{BatchElementwiseRegion, ElementwiseRegion};
use crate::thunk::shape::{Narrow, SplitLastAxis, Transpose};
use crate::thunk::signal::Fft1d;
use crate::thunk::{HalfFlag, Thunk};
use rlx_ir::{DType, GgmlType, QuantScheme};

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
    let r = Rope {
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
    let p = Rope {
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
    // in place (data == dst, a KV-cache write): data is not read
    let kv = io(IndexingThunk::ScatterNd {
        data: X0,
        indices: X1,
        updates: X2,
        dst: X0,
        data_dims: vec![16, 8],
        indices_dims: vec![2, 1],
        dtype: DType::F32,
        upd_dtype: DType::F32,
    });
    assert_eq!(kv.reads, ranges(&[(X1, 2 * 4), (X2, 2 * 8 * 4)]));
    assert_eq!(kv.writes, ranges(&[(X0, 16 * 8 * 4)]));
    // converting: 3 f32 rows of 7 into an f16 cache of 5 rows (and the reverse)
    let cv = |dtype, upd_dtype| {
        io(IndexingThunk::ScatterNd {
            data: X0,
            indices: X1,
            updates: X2,
            dst: X0,
            data_dims: vec![5, 7],
            indices_dims: vec![3, 1],
            dtype,
            upd_dtype,
        })
    };
    let f16_cache = cv(DType::F16, DType::F32);
    assert_eq!(f16_cache.reads, ranges(&[(X1, 3 * 4), (X2, 3 * 7 * 4)]));
    assert_eq!(f16_cache.writes, ranges(&[(X0, 5 * 7 * 2)]));
    let f32_cache = cv(DType::F32, DType::F16);
    assert_eq!(f32_cache.reads, ranges(&[(X1, 3 * 4), (X2, 3 * 7 * 2)]));
    assert_eq!(f32_cache.writes, ranges(&[(X0, 5 * 7 * 4)]));
}

#[test]
fn attention_reads_its_runtime_kv_len() {
    let t = Attention {
        kv_len: Some(X3),
        kv_len_per_batch: false,
        ..samples::attention()
    };
    let io = Thunk::Attention(t).io();
    let (q, kv) = (7 * 9 * 64 * 4, 7 * 3 * 64 * 4);
    assert_eq!(io.reads, ranges(&[(X0, q), (X1, kv), (X2, kv), (X3, 4)]));
}

#[test]
fn attention_half_kv_reads_two_bytes_per_key_element() {
    let t = Attention {
        kv_dt: Some(HalfFlag::F16),
        ..samples::attention()
    };
    let io = Thunk::Attention(t).io();
    let (q, kv) = (7 * 9 * 64 * 4, 7 * 3 * 64 * 2);
    assert_eq!(io.reads, ranges(&[(X0, q), (X1, kv), (X2, kv)]));
    assert_eq!(io.writes, ranges(&[(X4, q)]));
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
        Gather {
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
