//! `fuse_decode_mlp` on hand-built schedules: thunk kinds before → after,
//! and every refusal the module docs list.

use super::*;
pub(crate) use crate::passes::test_util::run_only;
use crate::thunk::binary::BinaryFull;
use crate::thunk::elementwise::{ActivationInPlace, ActivationOut};
use crate::thunk::norm::RmsNorm;
use crate::thunk::shape::Copy;
use crate::thunk::tag_weight;
use rlx_ir::GgmlType;

/// Hidden size and intermediate size (whole Q4_1 blocks).
pub(crate) const K: u32 = 64;
pub(crate) const N: u32 = 96;
/// Arena slots, far enough apart for the largest value (`N` f32).
pub(crate) const X: usize = 0;
pub(crate) const G: usize = 1024;
pub(crate) const U: usize = 2048;
pub(crate) const A: usize = 3072;
pub(crate) const P: usize = 4096;
pub(crate) const D: usize = 5120;
pub(crate) const H: usize = 6144;
pub(crate) const SCHEME: QuantScheme = QuantScheme::Gguf(GgmlType::Q4_1);

pub(crate) fn w(i: usize) -> usize {
    tag_weight(i * 65536)
}

pub(crate) fn mm(x: usize, wi: usize, dst: usize, k: u32, n: u32) -> Thunk {
    Thunk::DequantMatMulGguf(DequantMatMulGguf {
        x,
        w_q: w(wi),
        dst,
        m: 1,
        k,
        n,
        scheme: SCHEME,
        x_f16: false,
        dst_f16: false,
    })
}

pub(crate) fn act(src: usize, dst: usize, a: Activation, len: u32) -> Thunk {
    Thunk::ActivationOut(ActivationOut {
        src,
        dst,
        len,
        act: a,
        dt: HalfFlag::F32,
    })
}

pub(crate) fn bin(op: BinaryOp, lhs: usize, rhs: usize, dst: usize, len: u32) -> Thunk {
    Thunk::BinaryFull(BinaryFull {
        lhs,
        rhs,
        dst,
        len,
        op,
        dt: HalfFlag::F32,
    })
}

pub(crate) fn copy(src: usize, dst: usize, len: u32) -> Thunk {
    Thunk::Copy(Copy {
        src,
        dst,
        len,
        dt: HalfFlag::F32,
    })
}

fn rms(src: usize, dst: usize, h: u32) -> Thunk {
    Thunk::RmsNorm(RmsNorm {
        src,
        g: w(9),
        b: w(10),
        dst,
        rows: 1,
        h,
        eps: 1e-6,
        dt: HalfFlag::F32,
    })
}

/// `h = h + down(act(gate(x)) · up(x))` in place, with the activation `a`.
pub(crate) fn block(a: Activation) -> Vec<Thunk> {
    vec![
        mm(X, 0, G, K, N),
        mm(X, 1, U, K, N),
        act(G, A, a, N),
        bin(BinaryOp::Mul, A, U, P, N),
        mm(P, 2, D, N, K),
        bin(BinaryOp::Add, H, D, H, K),
    ]
}

pub(crate) fn out(off: usize, elems: u32) -> ByteRange {
    ByteRange::new(off, elems as usize * 4)
}

fn fuse(thunks: Vec<Thunk>, live_out: &[ByteRange]) -> (Vec<&'static str>, usize, Vec<Thunk>) {
    run_only(FuseDecodeMlp::NAME, thunks, live_out)
}

const SWIGLU_TAIL: [&str; 2] = ["fused_mlp_gate_up_swiglu", "fused_mlp_down_residual"];

#[test]
fn swiglu_block_fuses_to_two() {
    let (n, m, t) = fuse(block(Activation::Silu), &[out(H, K)]);
    assert_eq!(m, 1);
    assert_eq!(n, SWIGLU_TAIL);
    let Thunk::FusedMlpGateUpSwiGLU(f) = &t[0] else {
        panic!("{n:?}")
    };
    assert_eq!(
        (f.x, f.gate_w, f.up_w, f.dst, f.k, f.n),
        (X, w(0), w(1), P, K, N)
    );
    let Thunk::FusedMlpDownResidual(d) = &t[1] else {
        panic!("{n:?}")
    };
    assert_eq!((d.x, d.w, d.res, d.dst, d.k, d.n), (P, w(2), H, H, N, K));
}

#[test]
fn gelu_block_and_swapped_operands() {
    let mut b = block(Activation::GeluApprox);
    b[3] = bin(BinaryOp::Mul, U, A, P, N);
    b[5] = bin(BinaryOp::Add, D, H, H, K);
    let (n, m, _) = fuse(b, &[out(H, K)]);
    assert_eq!(m, 1);
    assert_eq!(n, ["fused_mlp_gate_up_gelu", "fused_mlp_down_residual"]);
}

#[test]
fn up_before_gate_and_in_place_activation() {
    let b = vec![
        mm(X, 1, U, K, N),
        mm(X, 0, G, K, N),
        Thunk::ActivationInPlace(ActivationInPlace {
            data: G,
            len: N,
            act: Activation::Silu,
            dt: HalfFlag::F32,
        }),
        bin(BinaryOp::Mul, G, U, P, N),
        mm(P, 2, D, N, K),
        bin(BinaryOp::Add, H, D, H, K),
    ];
    let (n, m, t) = fuse(b, &[out(H, K)]);
    assert_eq!(m, 1);
    assert_eq!(n, SWIGLU_TAIL);
    let Thunk::FusedMlpGateUpSwiGLU(f) = &t[0] else {
        panic!("{n:?}")
    };
    assert_eq!((f.gate_w, f.up_w), (w(0), w(1)));
}

#[test]
fn through_copies() {
    let b = vec![
        mm(X, 0, G, K, N),
        copy(G, 7168, N),
        mm(X, 1, U, K, N),
        act(7168, A, Activation::Silu, N),
        copy(U, 8192, N),
        bin(BinaryOp::Mul, A, 8192, P, N),
    ];
    let (n, m, _) = fuse(b, &[out(P, N)]);
    assert_eq!(m, 1);
    assert_eq!(n, ["fused_mlp_gate_up_swiglu"]);
}

#[test]
fn post_ffn_norm_keeps_the_tail() {
    // Gemma 3: down → rms_norm → add; gate/up still fuse.
    let mut b = block(Activation::GeluApprox);
    b.insert(5, rms(D, 7168, K));
    b[6] = bin(BinaryOp::Add, H, 7168, H, K);
    let (n, m, _) = fuse(b, &[out(H, K)]);
    assert_eq!(m, 1);
    assert_eq!(
        n,
        [
            "fused_mlp_gate_up_gelu",
            "dequant_matmul_gguf",
            "rms_norm",
            "binary"
        ]
    );
}

#[test]
fn every_layer_of_a_stack() {
    let mut t = Vec::new();
    for _ in 0..30 {
        t.extend(block(Activation::Silu));
    }
    let (n, m, _) = fuse(t, &[out(H, K)]);
    assert_eq!(m, 30);
    assert_eq!(n.len(), 60);
    assert!(n.chunks(2).all(|c| c == SWIGLU_TAIL));
}

#[test]
fn refuses_gate_read_later() {
    let mut b = block(Activation::Silu);
    b.push(copy(G, 7168, N));
    let (n, m, _) = fuse(b, &[out(H, K), out(7168, N)]);
    assert_eq!(m, 0);
    assert_eq!(n.len(), 7);
}

#[test]
fn refuses_up_or_activation_as_output() {
    for o in [U, A, G] {
        let (_, m, _) = fuse(block(Activation::Silu), &[out(H, K), out(o, N)]);
        assert_eq!(m, 0, "output at {o}");
    }
}

#[test]
fn tail_refused_when_down_is_an_output_or_read_again() {
    let (n, m, _) = fuse(block(Activation::Silu), &[out(H, K), out(D, K)]);
    assert_eq!(m, 1);
    assert_eq!(n[1..], ["dequant_matmul_gguf", "binary"]);
    let mut b = block(Activation::Silu);
    b.push(copy(D, 7168, K));
    let (n, _, _) = fuse(b, &[out(H, K), out(7168, K)]);
    assert_eq!(n[1..3], ["dequant_matmul_gguf", "binary"]);
}

#[test]
fn refuses_x_clobbered_before_the_product() {
    let mut b = block(Activation::Silu);
    b.insert(2, copy(7168, X, K));
    let (_, m, _) = fuse(b, &[out(H, K), out(X, K)]);
    assert_eq!(m, 0);
}

#[test]
fn product_over_the_dead_x_fuses() {
    // the planner's Qwen2.5 layout: p placed over x once gate / up read it
    let mut b = block(Activation::Silu);
    b[3] = bin(BinaryOp::Mul, A, U, X, N);
    b[4] = mm(X, 2, D, N, K);
    let (n, m, _) = fuse(b, &[out(H, K)]);
    assert_eq!(m, 1);
    assert_eq!(n, SWIGLU_TAIL);
}

#[test]
fn x_read_after_the_block_still_fuses() {
    // x is an input of the group, not an intermediate: later reads are fine
    let mut b = block(Activation::Silu);
    b.push(copy(X, 7168, K));
    let (n, m, _) = fuse(b, &[out(H, K), out(7168, K)]);
    assert_eq!(m, 1);
    assert_eq!(n[..2], SWIGLU_TAIL);
}

#[test]
fn tail_refuses_shifted_residual_overlap() {
    let mut b = block(Activation::Silu);
    b[5] = bin(BinaryOp::Add, H, D, H + 8, K);
    let (n, m, _) = fuse(b, &[out(H + 8, K)]);
    assert_eq!(m, 1);
    assert_eq!(n[1..], ["dequant_matmul_gguf", "binary"]);
}

#[test]
fn refuses_mismatched_gemvs_and_other_gatings() {
    // different x
    let mut b = block(Activation::Silu);
    b[1] = mm(7168, 1, U, K, N);
    assert_eq!(fuse(b, &[out(H, K)]).1, 0);
    // relu is not a gating
    assert_eq!(fuse(block(Activation::Relu), &[out(H, K)]).1, 0);
    // prefill (m = 2)
    let mut b = block(Activation::Silu);
    for t in &mut b[..2] {
        if let Thunk::DequantMatMulGguf(d) = t {
            d.m = 2;
        }
    }
    assert_eq!(fuse(b, &[out(H, K)]).1, 0);
    // mul of the gate with itself
    let mut b = block(Activation::Silu);
    b[3] = bin(BinaryOp::Mul, A, G, P, N);
    assert_eq!(fuse(b, &[out(H, K)]).1, 0);
}

#[test]
fn refuses_f16_gelu_but_fuses_f16_swiglu() {
    let half = |mut b: Vec<Thunk>| {
        for t in &mut b {
            match t {
                Thunk::DequantMatMulGguf(d) => (d.x_f16, d.dst_f16) = (true, true),
                Thunk::ActivationOut(a) => a.dt = HalfFlag::F16,
                Thunk::BinaryFull(m) => m.dt = HalfFlag::F16,
                _ => {}
            }
        }
        b
    };
    let (_, m, _) = fuse(half(block(Activation::GeluApprox)), &[out(H, K)]);
    assert_eq!(m, 0);
    let (n, m, t) = fuse(half(block(Activation::Silu)), &[out(H, K)]);
    assert_eq!(m, 1);
    assert_eq!(n, SWIGLU_TAIL);
    let Thunk::FusedMlpDownResidual(d) = &t[1] else {
        panic!("{n:?}")
    };
    assert!(d.x_f16 && d.dst_f16 && d.res_f16);
    // mixed: f32 product of f16 GEMV outputs
    let mut b = half(block(Activation::Silu));
    b[3] = bin(BinaryOp::Mul, A, U, P, N);
    assert_eq!(fuse(b, &[out(H, K)]).1, 0);
}

/// The fused gate/up and down-tail thunks of a fused block.
fn fused_pair(t: &[Thunk]) -> (&FusedMlpGateUpSwiGLU, &FusedMlpDownResidual) {
    match (&t[0], &t[1]) {
        (Thunk::FusedMlpGateUpSwiGLU(f), Thunk::FusedMlpDownResidual(d)) => (f, d),
        _ => panic!("{:?}", t.iter().map(|t| t.name()).collect::<Vec<_>>()),
    }
}

#[test]
fn tail_fuses_with_the_sum_over_the_product() {
    // the planner's Qwen2.5 / Granite layout: h' = h + d placed over the
    // dead p; the product moves to the gate GEMV's dead bytes so that the
    // tail does not read its x where it writes (a kernel cannot)
    let mut b = block(Activation::Silu);
    b[5] = bin(BinaryOp::Add, H, D, P, K);
    let (n, m, t) = fuse(b, &[out(P, K)]);
    assert_eq!(m, 1);
    assert_eq!(n, SWIGLU_TAIL);
    let (f, d) = fused_pair(&t);
    assert_eq!((f.x, f.dst), (X, G));
    assert_eq!((d.x, d.res, d.dst), (G, H, P));
}

#[test]
fn product_over_x_moves_to_a_dead_gemv_output() {
    // Granite's decode layout: p over x, d over the dead gate output,
    // the sum over p: the product lands in the up GEMV's bytes
    let mut b = block(Activation::Silu);
    b[3] = bin(BinaryOp::Mul, A, U, X, N);
    b[4] = mm(X, 2, G, N, K);
    b[5] = bin(BinaryOp::Add, H, G, X, K);
    let (n, m, t) = fuse(b, &[out(X, K)]);
    assert_eq!(m, 1);
    assert_eq!(n, SWIGLU_TAIL);
    let (f, d) = fused_pair(&t);
    assert_eq!((f.x, f.dst), (X, U));
    assert_eq!((d.x, d.res, d.dst), (U, H, X));
    // without a tail (a scaled residual): the down GEMV reads the new home
    let mut b = block(Activation::Silu);
    b[3] = bin(BinaryOp::Mul, A, U, X, N);
    b[4] = mm(X, 2, D, N, K);
    b[5] = bin(BinaryOp::Mul, H, D, H, K);
    let (n, m, t) = fuse(b, &[out(H, K)]);
    assert_eq!(
        (m, &n[..2]),
        (1, &["fused_mlp_gate_up_swiglu", "dequant_matmul_gguf"][..])
    );
    let (Thunk::FusedMlpGateUpSwiGLU(f), Thunk::DequantMatMulGguf(dm)) = (&t[0], &t[1]) else {
        panic!("{n:?}")
    };
    assert_eq!((f.x, f.dst, dm.x, dm.dst), (X, G, G, D));
}

#[test]
fn product_stays_when_no_dead_bytes_are_free() {
    // gate, up and activation bytes all rewritten before the down GEMV: the
    // product keeps its place over x (the host runs it, Metal leaves it on
    // the host)
    let mut b = block(Activation::Silu);
    b[3] = bin(BinaryOp::Mul, A, U, X, N);
    b[4] = mm(X, 2, D, N, K);
    for (at, dst) in [(4, G), (5, U), (6, A)] {
        b.insert(at, copy(7168, dst, N));
    }
    let (_, m, t) = fuse(b, &[out(H, K), out(G, N), out(U, N), out(A, N)]);
    assert_eq!(m, 1);
    let Thunk::FusedMlpGateUpSwiGLU(f) = &t[0] else {
        panic!()
    };
    assert_eq!((f.x, f.dst), (X, X));
    // a product read twice is not moved either
    let mut b = block(Activation::Silu);
    b[3] = bin(BinaryOp::Mul, A, U, X, N);
    b[4] = mm(X, 2, D, N, K);
    b.push(copy(X, 7168, N));
    let (_, m, t) = fuse(b, &[out(H, K), out(7168, N)]);
    assert_eq!(m, 1);
    let Thunk::FusedMlpGateUpSwiGLU(f) = &t[0] else {
        panic!()
    };
    assert_eq!(f.dst, X);
}
