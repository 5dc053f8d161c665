//! `fuse_decode_mlp_combined_gate_up` on hand-built schedules.

use super::*;
use crate::passes::decode_mlp::tests::{act, bin, copy, mm, out, w, K, N, X};
use crate::passes::test_util::run_only;
use crate::thunk::shape::Narrow;
use rlx_ir::op::{Activation, BinaryOp};

const C: usize = 1024;
const A: usize = 3072;
const P: usize = 4096;
const D: usize = 5120;
const H: usize = 6144;
const HALF: usize = N as usize * 4;

fn fuse(thunks: Vec<Thunk>, live_out: &[ByteRange]) -> (Vec<&'static str>, usize, Vec<Thunk>) {
    run_only(FuseDecodeMlpCombinedGateUp::NAME, thunks, live_out)
}

/// The packed block with the halves taken as views of `c`: gate half
/// `gh` (0 or 1), up the other.
fn view_block(gh: usize, a: Activation) -> Vec<Thunk> {
    let (g, u) = (C + gh * HALF, C + (1 - gh) * HALF);
    vec![
        mm(X, 0, C, K, 2 * N),
        act(g, A, a, N),
        bin(BinaryOp::Mul, A, u, P, N),
        mm(P, 2, D, N, K),
        bin(BinaryOp::Add, H, D, H, K),
    ]
}

fn narrow(start: u32, dst: usize) -> Thunk {
    Thunk::Narrow(Narrow {
        src: C,
        dst,
        outer: 1,
        src_axis: 2 * N,
        start,
        len: N,
        dt: HalfFlag::F32,
    })
}

fn half_bytes() -> usize {
    N as usize * packed_row_bytes(crate::passes::decode_mlp::tests::SCHEME, K)
}

#[test]
fn view_halves_fuse_with_the_tail() {
    for gh in [0, 1] {
        let (n, m, t) = fuse(view_block(gh, Activation::Silu), &[out(H, K)]);
        assert_eq!(m, 1);
        assert_eq!(n, ["fused_mlp_gate_up_swiglu", "fused_mlp_down_residual"]);
        let Thunk::FusedMlpGateUpSwiGLU(f) = &t[0] else {
            panic!("{n:?}")
        };
        assert_eq!(f.gate_w, w(0) + gh * half_bytes());
        assert_eq!(f.up_w, w(0) + (1 - gh) * half_bytes());
        assert_eq!((f.k, f.n, f.dst), (K, N, P));
    }
}

#[test]
fn narrow_thunks_and_copies() {
    let b = vec![
        mm(X, 0, C, K, 2 * N),
        narrow(0, 7168),
        narrow(N, 8192),
        copy(8192, 9216, N),
        act(7168, A, Activation::GeluApprox, N),
        bin(BinaryOp::Mul, 9216, A, P, N),
    ];
    let (n, m, _) = fuse(b, &[out(P, N)]);
    assert_eq!(m, 1);
    assert_eq!(n, ["fused_mlp_gate_up_gelu"]);
}

#[test]
fn refuses_packed_output_read_later() {
    let mut b = view_block(0, Activation::Silu);
    b.push(copy(C, 7168, 2 * N));
    let (_, m, _) = fuse(b, &[out(H, K), out(7168, 2 * N)]);
    assert_eq!(m, 0);
    let (_, m, _) = fuse(view_block(0, Activation::Silu), &[out(H, K), out(C, 2 * N)]);
    assert_eq!(m, 0);
}

#[test]
fn refuses_same_half_or_wrong_width() {
    // gate and up the same half
    let mut b = view_block(0, Activation::Silu);
    b[2] = bin(BinaryOp::Mul, A, C, P, N);
    assert_eq!(fuse(b, &[out(H, K)]).1, 0);
    // the GEMV is 3n wide
    let mut b = view_block(0, Activation::Silu);
    b[0] = mm(X, 0, C, K, 3 * N);
    assert_eq!(fuse(b, &[out(H, K)]).1, 0);
    // a narrow from the middle of the row
    let b = vec![
        mm(X, 0, C, K, 2 * N),
        narrow(N / 2, 7168),
        narrow(N, 8192),
        act(7168, A, Activation::Silu, N),
        bin(BinaryOp::Mul, 8192, A, P, N),
    ];
    assert_eq!(fuse(b, &[out(P, N)]).1, 0);
}

#[test]
fn separate_gemvs_are_left_to_fuse_decode_mlp() {
    let b = crate::passes::decode_mlp::tests::block(Activation::Silu);
    assert_eq!(fuse(b, &[out(H, K)]).1, 0);
}

#[test]
fn refuses_x_clobbered() {
    let mut b = view_block(1, Activation::Silu);
    b.insert(1, copy(7168, X, K));
    assert_eq!(fuse(b, &[out(H, K), out(X, K)]).1, 0);
}
