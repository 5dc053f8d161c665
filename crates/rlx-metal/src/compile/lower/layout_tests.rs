//! Where leaves live: constants in weights segment 0, param `i` in segment
//! `1 + i`, states in the state buffer (outside the planned arena), views in
//! their parent's buffer.

use super::*;
use crate::compile::compile;
use crate::thunk::{buffer_of, is_arena, raw_offset, Buf};

fn f32s(d: &[usize]) -> Shape {
    Shape::of(d, DType::F32)
}

#[test]
#[allow(clippy::single_range_in_vec_init)]
fn params_get_segments_and_states_the_state_buffer() {
    let mut g = Graph::new("t");
    let x = g.add(Op::Input { shape: f32s(&[4]) }, &[], "x").unwrap();
    let w0 = g
        .add(
            Op::Param {
                shape: f32s(&[3, 4]),
            },
            &[],
            "w0",
        )
        .unwrap();
    let s0 = g.add(Op::State { shape: f32s(&[5]) }, &[], "s0").unwrap();
    let w1 = g
        .add(
            Op::Param {
                shape: f32s(&[2, 4]),
            },
            &[],
            "w1",
        )
        .unwrap();
    let s1 = g
        .add(
            Op::State {
                shape: f32s(&[2, 4]),
            },
            &[],
            "s1",
        )
        .unwrap();
    // views: a leading-row narrow of a param, a reshape + narrow of a state
    let row = g
        .add(
            Op::Narrow {
                axis: 0,
                start: 1,
                len: 1,
            },
            &[w1],
            "row",
        )
        .unwrap();
    let flat = g
        .add(
            Op::Reshape {
                dims: vec![Dim::Static(8)],
            },
            &[s1],
            "",
        )
        .unwrap();
    let tail = g
        .add(
            Op::Narrow {
                axis: 0,
                start: 4,
                len: 4,
            },
            &[flat],
            "tail",
        )
        .unwrap();
    let a = g
        .add(
            Op::Binary {
                kind: rlx_ir::op::BinaryOp::Add,
            },
            &[x, tail],
            "",
        )
        .unwrap();
    g.set_outputs(&[a, row, w0, s0]).unwrap();
    let c = compile(&g, &CompileOptions::default()).unwrap();

    assert_eq!(c.segment_bytes.len(), 3);
    assert_eq!(&c.segment_bytes[1..], &[48, 32]);
    assert!(c.segment_bytes[0] >= ZEROS_BYTES);
    assert_eq!(buffer_of(c.offsets[w0]), Buf::Weights(1));
    assert_eq!(buffer_of(c.offsets[w1]), Buf::Weights(2));
    assert_eq!(raw_offset(c.offsets[w0]), 0);
    // the row view stays inside w1's segment
    assert_eq!(c.offsets[row], c.offsets[w1] + 16);
    // states: declaration order, 64-byte aligned, own buffer
    assert_eq!(c.offsets[s0], tag_state(0));
    assert_eq!(c.offsets[s1], tag_state(64));
    assert_eq!(c.state_bytes, 128);
    assert_eq!(c.offsets[tail], tag_state(64 + 16));
    // the arena holds only x and the sum (no state region)
    assert!(is_arena(c.offsets[x]) && is_arena(c.offsets[a]));
    assert_eq!(c.arena_bytes, 128);
    assert_eq!(
        c.params.iter().map(|b| b.offset).collect::<Vec<_>>(),
        [c.offsets[w0], c.offsets[w1]]
    );
    assert_eq!(c.states[1].offset, tag_state(64));
    // the schedule names the buffers
    let text = c.schedule.to_string();
    assert!(text.contains("S@80"), "{text}");
    // the verifier accepts it with per-buffer sizes
    let cx = crate::compile::verify::VerifyContext {
        arena_bytes: c.arena_bytes,
        state_bytes: c.state_bytes,
        segment_bytes: c.segment_bytes.clone(),
        initialized: vec![c.offsets[x]..c.offsets[x] + 16],
        groups: vec![],
    };
    crate::compile::verify::verify_schedule(&c.schedule, &cx).unwrap();
}

#[test]
fn a_post_norm_sum_and_its_readers_stay_off_the_norm_inputs() {
    // Gemma's post-norm: s = h + rms_norm(y); then o = rms_norm(s) @ w and
    // its epilogue o·o. y dies at the post-norm and h at the add, but the
    // Metal decode fusion reads both in the dispatch writing s and o·o
    use rlx_ir::op::BinaryOp;
    let mut g = Graph::new("t");
    let bin = |kind| Op::Binary { kind };
    let h = g
        .add(
            Op::Input {
                shape: f32s(&[1, 8]),
            },
            &[],
            "h",
        )
        .unwrap();
    let gamma = g.add(Op::Param { shape: f32s(&[8]) }, &[], "g").unwrap();
    let w = g
        .add(
            Op::Param {
                shape: f32s(&[8, 8]),
            },
            &[],
            "w",
        )
        .unwrap();
    let y = g.add(bin(BinaryOp::Mul), &[h, h], "y").unwrap();
    let n = g.add(Op::RmsNorm { eps: 1e-6 }, &[y, gamma], "n").unwrap();
    let s = g.add(bin(BinaryOp::Add), &[h, n], "s").unwrap();
    let p = g.add(Op::RmsNorm { eps: 1e-6 }, &[s, gamma], "p").unwrap();
    let o = g.add(Op::MatMul, &[p, w], "o").unwrap();
    let o2 = g.add(bin(BinaryOp::Mul), &[o, o], "o2").unwrap();
    g.set_outputs(&[o2, s]).unwrap();
    let c = lower(&g, &CompileOptions::default()).unwrap();
    let at = |v: NodeId| ByteRange::new(c.offsets[v], 32);
    for (a, b) in [(s, y), (p, h), (o, h), (o2, h), (o2, y)] {
        assert!(!at(a).overlaps(&at(b)), "{a} over {b}");
    }
}
