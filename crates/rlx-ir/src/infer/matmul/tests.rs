//! Unit tests of matmul-family shape inference.

use super::super::common::testutil::{err, ok};
use crate::op::{Activation, Op};
use crate::quant::{GgmlType, QuantScheme, ScaleLayout, ScaledFormat};

#[test]
fn matmul_numpy_semantics() {
    let op = Op::MatMul;
    ok(&op, &["f32[2, 3]", "f32[3, 5]"], "f32[2, 5]");
    ok(&op, &["f32[7, 1, 2, 3]", "f16[4, 3, 5]"], "f32[7, 4, 2, 5]");
    ok(&op, &["f32[b, s, 8]", "f32[8, 16]"], "f32[b, s, 16]");
    ok(&op, &["f32[b, s, k]", "f32[b, k, n]"], "f32[b, s, n]");
    // rank-1 rhs: trailing 1 dropped; rank-1 lhs: leading 1 dropped
    ok(&op, &["f32[4, 2, 3]", "f32[3]"], "f32[4, 2]");
    ok(&op, &["f32[3]", "f32[4, 3, 5]"], "f32[4, 5]");
    ok(&op, &["f32[3]", "f32[3]"], "f32[]");
    let e = err(&op, &["f32[2, 3]", "f32[4, 5]"], "inner dims differ");
    assert_eq!(
        e.to_string(),
        "[mat_mul] inner dims differ: f32[2, 3] @ f32[4, 5]"
    );
    err(&op, &["f32[2, 3]", "f32[4]"], "f32[4]");
    err(&op, &["f32[2, k]", "f32[j, 5]"], "inner dims differ");
    err(&op, &["f32[2, 2, 3]", "f32[5, 3, 4]"], "batch dims");
    err(&op, &["f32[]", "f32[3]"], "rank");
    err(&op, &["f32[2, 3]"], "expects 2");
}

#[test]
fn fused_matmul_bias_act() {
    let op = Op::FusedMatMulBiasAct {
        act: Some(Activation::Gelu),
    };
    ok(
        &op,
        &["f16[b, s, 8]", "f16[8, 4]", "f16[4]"],
        "f16[b, s, 4]",
    );
    err(
        &op,
        &["f16[b, s, 8]", "f16[6, 4]", "f16[4]"],
        "inner dims differ",
    );
    err(
        &op,
        &["f16[2, 8]", "f16[8, 4]", "f16[5]"],
        "bias must be [4]",
    );
    err(&op, &["i32[2, 8]", "i32[8, 4]", "i32[4]"], "gelu epilogue");
    let relu = Op::FusedMatMulBiasAct {
        act: Some(Activation::Relu),
    };
    ok(&relu, &["i32[2, 8]", "i32[8, 4]", "i32[4]"], "i32[2, 4]");
    err(
        &relu,
        &["f32[2, 8]", "f32[8, 4, 1]", "f32[4]"],
        "w must have rank 2",
    );
    err(&relu, &["f32[2, 8]", "f32[8, 4]"], "expects 3");
}

#[test]
fn dequant_matmul_gguf_and_aux() {
    let q4k = Op::DequantMatMul {
        scheme: QuantScheme::Gguf(GgmlType::Q4K),
        n: 32,
        k: 512,
    };
    // Q4_K: 256 per block, 144 bytes → 2 blocks = 288 bytes a row
    ok(
        &q4k,
        &["f32[1, seq, 512]", "u8[32, 288]"],
        "f32[1, seq, 32]",
    );
    ok(&q4k, &["f16[512]", "u8[32, 288]"], "f32[32]");
    err(&q4k, &["f32[seq, 256]", "u8[32, 288]"], "k = 512");
    err(
        &q4k,
        &["f32[seq, 512]", "u8[32, 287]"],
        "w_q must be [32, 288]",
    );
    err(&q4k, &["f32[seq, 512]", "i8[32, 288]"], "w_q must be u8");
    err(&q4k, &["i32[seq, 512]", "u8[32, 288]"], "float");
    err(
        &q4k,
        &["f32[seq, 512]", "u8[32, 288]", "f32[1]"],
        "expects 2",
    );
    let bad_k = Op::DequantMatMul {
        scheme: QuantScheme::Gguf(GgmlType::Q4K),
        n: 32,
        k: 576,
    };
    err(&bad_k, &["f32[576]", "u8[32, 324]"], "not a multiple");
    let huge = Op::DequantMatMul {
        scheme: QuantScheme::Gguf(GgmlType::F32),
        n: 1,
        k: usize::MAX / 2,
    };
    err(&huge, &["f32[1]", "u8[1, 1]"], "overflows");

    let int4 = Op::DequantMatMul {
        scheme: QuantScheme::Int4 {
            block_size: 32,
            asymmetric: true,
        },
        n: 8,
        k: 64,
    };
    // 64 int4 per row = 32 bytes; 8 rows × 2 blocks = 16 scales / zero points
    ok(
        &int4,
        &["f32[3, 64]", "u8[8, 32]", "f32[8, 2]", "u8[16]"],
        "f32[3, 8]",
    );
    err(
        &int4,
        &["f32[3, 64]", "u8[8, 32]", "f32[8, 3]", "u8[16]"],
        "scale must hold 16",
    );
    err(
        &int4,
        &["f32[3, 64]", "u8[8, 32]", "f32[8, 2]"],
        "expects 4",
    );
    let nvfp4 = Op::DequantMatMul {
        scheme: QuantScheme::Nvfp4,
        n: 4,
        k: 32,
    };
    ok(
        &nvfp4,
        &["f32[2, 32]", "u8[4, 16]", "u8[4, 2]", "f32[1]"],
        "f32[2, 4]",
    );
    err(
        &nvfp4,
        &["f32[2, 32]", "u8[4, 16]", "u8[4, 2]", "c64[1]"],
        "global scale must be numeric",
    );
    let fp8 = Op::DequantMatMul {
        scheme: QuantScheme::Fp8E5m2,
        n: 4,
        k: 8,
    };
    // one scale per output row, or one for the whole tensor
    ok(&fp8, &["f32[2, 8]", "u8[4, 8]", "f32[4]"], "f32[2, 4]");
    ok(&fp8, &["f32[2, 8]", "u8[4, 8]", "f32[1]"], "f32[2, 4]");
    err(
        &fp8,
        &["f32[2, 8]", "u8[4, 8]", "f32[2]"],
        "scale must hold 4",
    );
}

#[test]
fn grouped_matmuls() {
    let op = Op::GroupedMatMul;
    ok(&op, &["f16[m, 8]", "f16[4, 8, 16]", "i32[m]"], "f16[m, 16]");
    err(&op, &["f16[m, 8]", "f16[4, 7, 16]", "i32[m]"], "inner dims");
    err(&op, &["f16[m, 8]", "f16[4, 8, 16]", "f32[m]"], "integer");
    err(&op, &["f16[m, 8]", "f16[4, 8, 16]", "i32[n]"], "expert_idx");
    err(
        &op,
        &["f16[8]", "f16[4, 8, 16]", "i32[1]"],
        "x must have rank 2",
    );

    let op = Op::DequantGroupedMatMul {
        scheme: QuantScheme::Gguf(GgmlType::Q8_0),
        num_experts: 4,
        n: 16,
        k: 64,
    };
    // Q8_0: 32 per block, 34 bytes → 68 bytes a row
    ok(
        &op,
        &["f32[m, 64]", "u8[4, 16, 68]", "i64[m]"],
        "f32[m, 16]",
    );
    err(
        &op,
        &["f32[m, 64]", "u8[3, 16, 68]", "i64[m]"],
        "w_q must be",
    );
    err(&op, &["f32[m, 32]", "u8[4, 16, 68]", "i64[m]"], "equal k");
    err(&op, &["f32[m, 64]", "u8[4, 16, 68]", "f32[m]"], "integer");
    let op = Op::DequantGroupedMatMul {
        scheme: QuantScheme::Fp8E4m3,
        num_experts: 4,
        n: 16,
        k: 64,
    };
    err(&op, &["f32[m, 64]", "u8[4, 16, 64]", "i64[m]"], "GGUF");
}

#[test]
fn scaled_ops() {
    let fmt = ScaledFormat::Fp8E4m3;
    let block = ScaleLayout::Block { size: 32 };
    let op = Op::ScaledMatMul {
        lhs_fmt: fmt,
        rhs_fmt: fmt,
        layout: block,
    };
    // k = 70 → ceil(70/32) = 3 scale columns
    ok(
        &op,
        &["u8[m, 70]", "u8[16, 70]", "f32[m, 3]", "f32[16, 3]"],
        "f32[m, 16]",
    );
    ok(
        &op,
        &[
            "u8[5, 70]",
            "u8[16, 70]",
            "f32[5, 3]",
            "f32[16, 3]",
            "f32[16]",
        ],
        "f32[5, 16]",
    );
    err(
        &op,
        &["u8[5, 70]", "u8[16, 64]", "f32[5, 3]", "f32[16, 2]"],
        "inner dims differ",
    );
    err(
        &op,
        &["u8[5, 70]", "u8[16, 70]", "f32[5, 2]", "f32[16, 3]"],
        "lhs_scale must be [5, 3]",
    );
    err(
        &op,
        &[
            "u8[5, 70]",
            "u8[16, 70]",
            "f32[5, 3]",
            "f32[16, 3]",
            "f32[15]",
        ],
        "bias",
    );
    err(
        &op,
        &["f32[5, 70]", "u8[16, 70]", "f32[5, 3]", "f32[16, 3]"],
        "lhs must be u8",
    );
    err(&op, &["u8[5, 70]", "u8[16, 70]", "f32[5, 3]"], "4 to 5");
    err(
        &op,
        &["u8[5, k]", "u8[16, k]", "f32[5, 3]", "f32[16, 3]"],
        "static",
    );
    let per_row = Op::ScaledMatMul {
        lhs_fmt: fmt,
        rhs_fmt: ScaledFormat::Int8,
        layout: ScaleLayout::PerRow,
    };
    ok(
        &per_row,
        &["u8[m, k]", "u8[16, k]", "f32[m]", "f32[16]"],
        "f32[m, 16]",
    );

    let q = Op::ScaledQuantize {
        fmt,
        layout: ScaleLayout::PerTensor,
    };
    ok(&q, &["f32[r, 8]", "f32[1]"], "u8[r, 8]");
    err(&q, &["f32[r, 8]", "f32[r]"], "scale must be [1]");
    err(&q, &["u8[r, 8]", "f32[1]"], "float");
    let dq = Op::ScaledDequantize {
        fmt,
        layout: ScaleLayout::PerRow,
    };
    ok(&dq, &["u8[4, 8]", "f32[4]"], "f32[4, 8]");
    err(&dq, &["u8[4, 8]", "f32[8]"], "scale must be [4]");
    err(&dq, &["u8[4, 8, 1]", "f32[4]"], "rank 2");
    let qs = Op::ScaledQuantScale { fmt, layout: block };
    ok(&qs, &["f16[4, 65]"], "f32[4, 3]");
    err(&qs, &["f16[4, 65]", "f32[1]"], "expects 1");
    let zero = Op::ScaledQuantScale {
        fmt,
        layout: ScaleLayout::Block { size: 0 },
    };
    err(&zero, &["f16[4, 65]"], "block size");
}
