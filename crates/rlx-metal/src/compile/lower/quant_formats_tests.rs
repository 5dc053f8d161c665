//! Lowering of the non-GGUF `dequant_mat_mul` schemes and the `scaled_*`
//! ops: the thunk each lowers to, its fields and exact byte ranges, the
//! conversions inserted for non-f32 operands, and the parameter errors.

use super::*;
use crate::thunk::ThunkOp;
use rlx_ir::{QuantScheme, ScaleLayout, ScaledFormat};

fn leaf(g: &mut Graph, name: &str, d: &[usize], dt: DType, param: bool) -> NodeId {
    let shape = Shape::of(d, dt);
    let op = if param {
        Op::Param { shape }
    } else {
        Op::Input { shape }
    };
    g.add(op, &[], name).unwrap()
}

fn kinds(c: &Compiled) -> Vec<&'static str> {
    c.schedule.thunks.iter().map(|t| t.name()).collect()
}

/// `x [m, k] @ dequant(w)ᵀ` with aux operands `(dims, dtype)`.
fn dqmm(scheme: QuantScheme, m: usize, n: usize, k: usize, aux: &[(&[usize], DType)]) -> Graph {
    let mut g = Graph::new("t");
    let x = leaf(&mut g, "x", &[m, k], DType::F32, false);
    let rb = scheme.row_bytes(k).unwrap();
    let w = leaf(&mut g, "w", &[n, rb], DType::U8, true);
    let mut ins = vec![x, w];
    for (i, (d, dt)) in aux.iter().enumerate() {
        ins.push(leaf(&mut g, &format!("a{i}"), d, *dt, true));
    }
    let y = g
        .add(Op::DequantMatMul { scheme, n, k }, &ins, "y")
        .unwrap();
    g.set_outputs(&[y]).unwrap();
    g
}

fn lowered(g: &Graph) -> Result<Compiled, CompileError> {
    lower(g, &CompileOptions::default())
}

#[test]
fn int8_and_int4_lower_with_exact_ranges() {
    let s8 = QuantScheme::Int8 {
        block_size: 32,
        asymmetric: true,
    };
    let c = lowered(&dqmm(
        s8,
        3,
        6,
        64,
        &[(&[6, 2], DType::F32), (&[12], DType::U8)],
    ))
    .unwrap();
    // the u8 zero points are widened to f32 first
    assert_eq!(kinds(&c), ["cast_host", "dequant_matmul_int8"]);
    let Thunk::DequantMatMulInt8(t) = &c.schedule.thunks[1] else {
        panic!()
    };
    assert_eq!(
        (t.m, t.k, t.n, t.block_size, t.is_asymmetric),
        (3, 64, 6, 32, true)
    );
    let io = t.io();
    let sizes: Vec<usize> = io.reads.iter().map(|r| r.len).collect();
    assert_eq!(sizes, [3 * 64 * 4, 6 * 64, 12 * 4, 12 * 4]);
    assert_eq!(io.writes[0].len, 3 * 6 * 4);

    // per-channel symmetric int8 (one block per row)
    let pc = QuantScheme::Int8 {
        block_size: 64,
        asymmetric: false,
    };
    let c = lowered(&dqmm(pc, 1, 6, 64, &[(&[6], DType::F16)])).unwrap();
    assert_eq!(kinds(&c), ["cast", "dequant_matmul_int8"]);

    for bs in [32u32, 64, 128] {
        let s4 = QuantScheme::Int4 {
            block_size: bs,
            asymmetric: true,
        };
        let nb = 128 / bs as usize;
        let c = lowered(&dqmm(
            s4,
            2,
            4,
            128,
            &[(&[4, nb], DType::F32), (&[4, nb], DType::F32)],
        ))
        .unwrap();
        assert_eq!(kinds(&c), ["dequant_matmul_int4"]);
        let Thunk::DequantMatMulInt4(t) = &c.schedule.thunks[0] else {
            panic!()
        };
        assert_eq!(t.io().reads[1].len, 4 * 64, "packed int4 rows");
        assert_eq!(t.block_size, bs);
    }
}

#[test]
fn fp8_per_tensor_scale_is_broadcast_per_row() {
    let c = lowered(&dqmm(QuantScheme::Fp8E4m3, 2, 5, 16, &[(&[5], DType::F32)])).unwrap();
    assert_eq!(kinds(&c), ["dequant_matmul_fp8"]);
    let c = lowered(&dqmm(QuantScheme::Fp8E5m2, 2, 5, 16, &[(&[1], DType::F32)])).unwrap();
    assert_eq!(kinds(&c), ["binary_broadcast", "dequant_matmul_fp8"]);
    let Thunk::DequantMatMulFp8(t) = &c.schedule.thunks[1] else {
        panic!()
    };
    assert!(t.e5m2);
    assert_eq!(t.io().reads[2].len, 5 * 4);
}

#[test]
fn nvfp4_lowers_and_checks_its_block_scales() {
    let aux: [(&[usize], DType); 2] = [(&[4, 2], DType::U8), (&[1], DType::F32)];
    let c = lowered(&dqmm(QuantScheme::Nvfp4, 2, 4, 32, &aux)).unwrap();
    assert_eq!(kinds(&c), ["dequant_matmul_nvfp4"]);
    let Thunk::DequantMatMulNvfp4(t) = &c.schedule.thunks[0] else {
        panic!()
    };
    let sizes: Vec<usize> = t.io().reads.iter().map(|r| r.len).collect();
    assert_eq!(sizes, [2 * 32 * 4, 4 * 16, 4 * 2, 4]);

    let aux: [(&[usize], DType); 2] = [(&[4, 2], DType::F32), (&[1], DType::F32)];
    let e = lowered(&dqmm(QuantScheme::Nvfp4, 2, 4, 32, &aux)).unwrap_err();
    assert!(matches!(e, CompileError::BadParam { .. }));
    let msg = e.to_string();
    assert!(
        msg.starts_with("[dequant_mat_mul] unsupported block scale") && msg.contains("u8"),
        "{msg}"
    );
}

#[test]
fn odd_int4_group_is_a_parameter_error() {
    let s4 = QuantScheme::Int4 {
        block_size: 3,
        asymmetric: false,
    };
    let e = lowered(&dqmm(s4, 1, 2, 6, &[(&[4], DType::F32)])).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("[dequant_mat_mul] unsupported block_size") && msg.contains("= 3"),
        "{msg}"
    );
}

#[test]
fn scaled_ops_lower_to_their_thunks() {
    let mut g = Graph::new("t");
    let fmt = ScaledFormat::Fp8E4m3;
    let layout = ScaleLayout::Block { size: 4 };
    let x = leaf(&mut g, "x", &[3, 10], DType::F32, false);
    let s = g
        .add(Op::ScaledQuantScale { fmt, layout }, &[x], "s")
        .unwrap();
    let q = g
        .add(Op::ScaledQuantize { fmt, layout }, &[x, s], "q")
        .unwrap();
    let d = g
        .add(Op::ScaledDequantize { fmt, layout }, &[q, s], "d")
        .unwrap();
    let rhs = leaf(&mut g, "rhs", &[5, 10], DType::U8, true);
    let rs = leaf(&mut g, "rs", &[5, 3], DType::F16, true);
    let b = leaf(&mut g, "b", &[5], DType::F32, true);
    let op = Op::ScaledMatMul {
        lhs_fmt: fmt,
        rhs_fmt: ScaledFormat::Int8,
        layout,
    };
    let mm = g.add(op, &[q, rhs, s, rs, b], "mm").unwrap();
    g.set_outputs(&[d, mm]).unwrap();
    let c = lowered(&g).unwrap();
    assert_eq!(
        kinds(&c),
        [
            "scaled_quant_scale",
            "scaled_quantize",
            "scaled_dequantize",
            "cast",
            "scaled_matmul"
        ]
    );
    let Thunk::ScaledMatMul(t) = &c.schedule.thunks[4] else {
        panic!()
    };
    assert_eq!((t.m, t.k, t.n, t.has_bias), (3, 10, 5, true));
    assert_eq!(t.rhs_fmt, ScaledFormat::Int8);
    let sizes: Vec<usize> = t.io().reads.iter().map(|r| r.len).collect();
    assert_eq!(sizes, [30, 50, 9 * 4, 15 * 4, 5 * 4]);
}
