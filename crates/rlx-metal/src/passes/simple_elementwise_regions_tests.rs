//! Kinds before → after for every chain shape of
//! `rewrite_simple_elementwise_regions`, and the cases where it must not
//! fire.

use super::*;
use crate::passes::test_util::{names, run_only};
use crate::passes::{run_passes, PassEntry, PIPELINE};
use crate::thunk::region::ElementwiseRegion;
use crate::thunk::shape::Copy;
use crate::thunk::ThunkSchedule;

const N: u32 = 12;
const B: usize = N as usize * 4;
/// Region inputs 0..4 sit at `k · B`; the destination at `8 · B`.
const DST: usize = 8 * B;

fn word_in(k: u32) -> u32 {
    k
}

fn word_step(s: u32) -> u32 {
    STEP_OPERAND | s
}

fn bin(op: u32, a: u32, b: u32) -> [u32; 4] {
    [2, op, a, b]
}

fn act(code: u32, a: u32) -> [u32; 4] {
    [0, code, a, 0]
}

/// A region over `n_in` inputs at `offs` (bytes) computing `steps`.
fn region_at(offs: &[usize], steps: &[[u32; 4]], dst: usize) -> ElementwiseRegion {
    let mut input_offs = [0u32; 16];
    for (k, &o) in offs.iter().enumerate() {
        input_offs[k] = (o / 4) as u32;
    }
    let mut chain = [0u32; 128];
    for (s, w) in steps.iter().enumerate() {
        chain[s * 4..s * 4 + 4].copy_from_slice(w);
    }
    ElementwiseRegion {
        len: N,
        num_inputs: offs.len() as u32,
        num_steps: steps.len() as u32,
        dst,
        input_offs,
        chain,
        scalar_input_mask: 0,
        input_modulus: [0; 16],
        prologue: 0,
        out_n: 0,
        out_c: 0,
        out_h: 0,
        out_w: 0,
        prologue_input: 0,
    }
}

fn region(n_in: usize, steps: &[[u32; 4]]) -> ElementwiseRegion {
    let offs: Vec<usize> = (0..n_in).map(|k| k * B).collect();
    region_at(&offs, steps, DST)
}

fn only() -> Vec<PassEntry> {
    PIPELINE
        .iter()
        .copied()
        .filter(|p| p.name == RewriteSimpleElementwiseRegions::NAME)
        .collect()
}

/// Run the pass alone over `thunks` with `dst` live out; the kinds after,
/// the matches and the rewritten thunks.
fn rewrite(thunks: Vec<Thunk>) -> (Vec<&'static str>, usize, Vec<Thunk>) {
    let name = RewriteSimpleElementwiseRegions::NAME;
    run_only(name, thunks, &[ByteRange::new(DST, B)])
}

fn one(r: ElementwiseRegion) -> (Vec<&'static str>, usize, Vec<Thunk>) {
    rewrite(vec![Thunk::ElementwiseRegion(r)])
}

const KEPT: &[&str] = &["elementwise_region"];

#[test]
fn binary_becomes_binary_full() {
    let (n, m, t) = one(region(2, &[bin(3, word_in(1), word_in(0))]));
    assert_eq!((n, m), (vec!["binary"], 1));
    let Thunk::BinaryFull(b) = &t[0] else {
        unreachable!()
    };
    assert_eq!((b.lhs, b.rhs, b.dst, b.len), (B, 0, DST, N));
    assert_eq!((b.op, b.dt), (BinaryOp::Div, HalfFlag::F32));
}

#[test]
fn binary_activation_becomes_fused() {
    let (n, m, t) = one(region(
        2,
        &[bin(2, word_in(0), word_in(1)), act(2, word_step(0))],
    ));
    assert_eq!((n, m), (vec!["fused_binary_activation"], 1));
    let Thunk::FusedBinaryActivation(f) = &t[0] else {
        unreachable!()
    };
    assert_eq!((f.op, f.act), (BinaryOp::Mul, Activation::Silu));
}

#[test]
fn activation_code_one_is_the_tanh_gelu() {
    let (_, _, t) = one(region(
        2,
        &[bin(0, word_in(0), word_in(1)), act(1, word_step(0))],
    ));
    let Thunk::FusedBinaryActivation(f) = &t[0] else {
        unreachable!()
    };
    assert_eq!(f.act, Activation::GeluApprox);
}

#[test]
fn two_binaries_and_activation_become_fused_ternary() {
    let (n, m, t) = one(region(
        3,
        &[
            bin(0, word_in(0), word_in(1)),
            bin(2, word_step(0), word_in(2)),
            act(3, word_step(1)),
        ],
    ));
    assert_eq!((n, m), (vec!["fused_ternary_activation"], 1));
    let Thunk::FusedTernaryActivation(f) = &t[0] else {
        unreachable!()
    };
    assert_eq!((f.lhs, f.rhs0, f.rhs1), (0, B, 2 * B));
    assert_eq!(
        (f.op0, f.op1, f.act),
        (BinaryOp::Add, BinaryOp::Mul, Activation::Relu)
    );
}

#[test]
fn two_binaries_become_an_in_place_pair() {
    let (n, m, t) = one(region(
        3,
        &[
            bin(0, word_in(0), word_in(1)),
            bin(1, word_step(0), word_in(2)),
        ],
    ));
    assert_eq!((n, m), (vec!["binary", "binary"], 1));
    let Thunk::BinaryFull(second) = &t[1] else {
        unreachable!()
    };
    assert_eq!((second.lhs, second.rhs, second.dst), (DST, 2 * B, DST));
    assert_eq!(second.op, BinaryOp::Sub);
}

#[test]
fn three_binaries_become_three() {
    let (n, m, _) = one(region(
        4,
        &[
            bin(0, word_in(0), word_in(1)),
            bin(4, word_step(0), word_in(2)),
            bin(5, word_step(1), word_in(3)),
        ],
    ));
    assert_eq!((n, m), (vec!["binary", "binary", "binary"], 1));
}

#[test]
fn identity_cast_then_binary_becomes_binary_full() {
    let (n, m, _) = one(region(2, &[[1, 0, 0, 0], bin(6, word_step(0), word_in(1))]));
    assert_eq!((n, m), (vec!["binary"], 1));
}

#[test]
fn unary_at_dst_runs_in_place_and_apart_writes_out() {
    let (n, m, _) = one(region_at(&[DST], &[act(6, word_in(0))], DST));
    assert_eq!((n, m), (vec!["activation"], 1));
    let (n, m, _) = one(region(1, &[act(6, word_in(0))]));
    assert_eq!((n, m), (vec!["activation_out"], 1));
}

#[test]
fn splits_around_neighbours_keep_their_def_use() {
    // A later reader of dst now sees the last thunk of the split as its
    // sole writer; the thunk before the region is untouched.
    let before = Thunk::Copy(Copy {
        src: 5 * B,
        dst: 0,
        len: N,
        dt: HalfFlag::F32,
    });
    let after = Thunk::Copy(Copy {
        src: DST,
        dst: 6 * B,
        len: N,
        dt: HalfFlag::F32,
    });
    let r = region(
        3,
        &[
            bin(0, word_in(0), word_in(1)),
            bin(2, word_step(0), word_in(2)),
        ],
    );
    let (n, m, t) = rewrite(vec![before, Thunk::ElementwiseRegion(r), after]);
    assert_eq!(m, 1);
    assert_eq!(n, vec!["copy", "binary", "binary", "copy"]);
    let df = Dataflow::new(&t, &[ByteRange::new(6 * B, B)]);
    assert_eq!(df.sole_writer(3, &ByteRange::new(DST, B)), Some(2));
    assert_eq!(df.sole_writer(1, &ByteRange::new(0, B)), Some(0));
}

#[test]
fn slice_run_leaves_splits_alone() {
    let mut thunks = vec![
        Thunk::ElementwiseRegion(region(
            3,
            &[
                bin(0, word_in(0), word_in(1)),
                bin(2, word_step(0), word_in(2)),
            ],
        )),
        Thunk::ElementwiseRegion(region(2, &[bin(0, word_in(0), word_in(1))])),
    ];
    let m = RewriteSimpleElementwiseRegions::run(&mut thunks, &PassContext::default());
    assert_eq!(m, 1);
    assert_eq!(names(&thunks), vec!["elementwise_region", "binary"]);
}

// ---- must not fire -------------------------------------------------------

#[test]
fn refuses_later_input_overlapping_dst() {
    // z partially overlaps dst: the pair would read z after writing dst.
    let steps = [
        bin(0, word_in(0), word_in(1)),
        bin(2, word_step(0), word_in(2)),
    ];
    let (n, m, _) = one(region_at(&[0, B, DST + 8], &steps, DST));
    assert_eq!((n, m), (KEPT.to_vec(), 0));
    // z exactly at dst is as bad for a split
    let (_, m, _) = one(region_at(&[0, B, DST], &steps, DST));
    assert_eq!(m, 0);
    // ... but fine for a one-for-one rewrite
    let (n, m, _) = one(region_at(&[0, DST], &[bin(0, word_in(0), word_in(1))], DST));
    assert_eq!((n, m), (vec!["binary"], 1));
}

#[test]
fn refuses_input_shifted_over_dst() {
    let (n, m, _) = one(region_at(
        &[0, DST - 4],
        &[bin(0, word_in(0), word_in(1))],
        DST,
    ));
    assert_eq!((n, m), (KEPT.to_vec(), 0));
    let (_, m, _) = one(region_at(&[DST + 4], &[act(2, word_in(0))], DST));
    assert_eq!(m, 0);
}

#[test]
fn refuses_broadcast_inputs_of_another_length() {
    let steps = [bin(0, word_in(0), word_in(1))];
    let mut scalar = region(2, &steps);
    scalar.scalar_input_mask = 0b10;
    assert_eq!(one(scalar).1, 0);
    let mut periodic = region(2, &steps);
    periodic.input_modulus[1] = 4;
    assert_eq!(one(periodic).1, 0);
    // an unused declared input that broadcasts still keeps the region
    let mut unused = region(3, &steps);
    unused.input_modulus[2] = 4;
    assert_eq!(one(unused).1, 0);
}

#[test]
fn refuses_rounding_casts() {
    // sub-codes 1..=3 round to f16 / bf16 / truncate: not an identity
    for sub in 1..=3 {
        let (n, m, _) = one(region(
            2,
            &[[1, sub, 0, 0], bin(0, word_step(0), word_in(1))],
        ));
        assert_eq!((n, m), (KEPT.to_vec(), 0), "cast sub-code {sub}");
    }
}

#[test]
fn refuses_other_operand_orders_and_bad_codes() {
    let cases: Vec<Vec<[u32; 4]>> = vec![
        // step result on the right
        vec![
            bin(0, word_in(0), word_in(1)),
            bin(2, word_in(2), word_step(0)),
        ],
        // activation of an input, not of the step
        vec![bin(0, word_in(0), word_in(1)), act(2, word_in(0))],
        // unknown activation / binary codes
        vec![bin(0, word_in(0), word_in(1)), act(17, word_step(0))],
        vec![bin(7, word_in(0), word_in(1))],
        // an input index past num_inputs
        vec![bin(0, word_in(0), word_in(3))],
        // four steps
        vec![
            bin(0, word_in(0), word_in(1)),
            bin(0, word_step(0), word_in(2)),
            bin(0, word_step(1), word_in(2)),
            bin(0, word_step(2), word_in(2)),
        ],
    ];
    for steps in cases {
        let (n, m, _) = one(region(3, &steps));
        assert_eq!((n, m), (KEPT.to_vec(), 0), "{steps:?}");
    }
}

#[test]
fn refuses_prologue_regions() {
    let mut r = region(2, &[bin(0, word_in(0), word_in(1))]);
    r.prologue = 1;
    (r.out_n, r.out_c, r.out_h, r.out_w) = (1, 3, 2, 2);
    assert_eq!(one(r).1, 0);
}

#[test]
fn disabled_by_name() {
    let mut s = ThunkSchedule {
        thunks: vec![Thunk::ElementwiseRegion(region(
            2,
            &[bin(0, word_in(0), word_in(1))],
        ))],
        rng: Default::default(),
    };
    let r = run_passes(
        &mut s,
        &PassContext::default(),
        &only(),
        &[RewriteSimpleElementwiseRegions::NAME.to_string()],
    );
    assert_eq!(names(&s.thunks), KEPT);
    assert!(!r.passes[0].enabled);
}
