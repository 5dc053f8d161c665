//! metal-sim vs host for the layout moves of `shape.metal`: graphs whose
//! narrow / split / concat / transpose / expand / reverse / copy thunks
//! must become dispatches and give the host's bytes exactly (pure moves:
//! tolerance 0; the copy test's softmax rounds in f16 / f32: 2e-3).

use super::tests::{assert_close, compiled, input, node};
use super::*;
use rlx_ir::{DType, Graph, Op};

/// Compiles `g`, asserts every thunk named in `kinds` is in the schedule
/// and became a `shape.metal` dispatch, then compares with the host.
fn check(g: &Graph, kinds: &[&str]) {
    check_tol(g, kinds, 0.0);
}

/// [`check`] with `atol = rtol = tol` (for graphs that also compute).
fn check_tol(g: &Graph, kinds: &[&str], tol: f32) {
    let c = compiled(g);
    let plan = MetalPlan::build(&c.schedule);
    for kind in kinds {
        let idx: Vec<usize> = (c.schedule.thunks.iter().enumerate())
            .filter(|(_, t)| t.name() == *kind)
            .map(|(i, _)| i)
            .collect();
        assert!(!idx.is_empty(), "no {kind} thunk in\n{}", c.schedule);
        for i in idx {
            let d = plan.commands.iter().any(|cmd| {
                matches!(cmd, Command::Dispatch(d) if d.thunk == i && d.kernel.family == Family::Shape)
            });
            assert!(d, "thunk {i} ({kind}) is not a shape dispatch\n{plan}");
        }
    }
    assert_close(&c, &plan, tol, tol);
}

#[test]
fn narrow_and_concat_match_host() {
    for dt in [DType::F32, DType::F16] {
        let mut g = Graph::new("nc");
        let x = input(&mut g, &[3, 37], dt);
        let a = input(&mut g, &[2, 5, 3], dt);
        let b = input(&mut g, &[2, 1, 3], dt);
        let c = input(&mut g, &[2, 4, 3], dt);
        let n = node(
            &mut g,
            Op::Narrow {
                axis: -1,
                start: 5,
                len: 17,
            },
            &[x],
        );
        let odd = node(
            &mut g,
            Op::Narrow {
                axis: 1,
                start: 3,
                len: 1,
            },
            &[x],
        );
        let cat = node(&mut g, Op::Concat { axis: 1 }, &[a, b, c]);
        let cat2 = node(&mut g, Op::Concat { axis: -1 }, &[n, odd]);
        g.set_outputs(&[n, cat, cat2]).unwrap();
        check(&g, &["narrow", "concat"]);
    }
}

#[test]
fn split_matches_host() {
    // two narrows partitioning the rows of one source fuse into a split
    let mut g = Graph::new("split");
    let x = input(&mut g, &[5, 40], DType::F32);
    let q = node(
        &mut g,
        Op::Narrow {
            axis: -1,
            start: 0,
            len: 7,
        },
        &[x],
    );
    let k = node(
        &mut g,
        Op::Narrow {
            axis: -1,
            start: 7,
            len: 1,
        },
        &[x],
    );
    let v = node(
        &mut g,
        Op::Narrow {
            axis: -1,
            start: 8,
            len: 32,
        },
        &[x],
    );
    g.set_outputs(&[q, k, v]).unwrap();
    check(&g, &["split_lastax"]);
}

#[test]
fn transpose_and_expand_match_host() {
    let mut g = Graph::new("tr");
    let x = input(&mut g, &[3, 5, 7], DType::F32);
    let m = input(&mut g, &[31, 33], DType::F32);
    let r = input(&mut g, &[1, 5], DType::F32);
    let t = node(
        &mut g,
        Op::Transpose {
            perm: vec![2, 0, 1],
        },
        &[x],
    );
    let mt = node(&mut g, Op::Transpose { perm: vec![1, 0] }, &[m]);
    let e = node(
        &mut g,
        Op::Expand {
            dims: vec![4.into(), 5.into()],
        },
        &[r],
    );
    g.set_outputs(&[t, mt, e]).unwrap();
    check(&g, &["transpose"]);
}

#[test]
fn reverse_matches_host() {
    for dt in [DType::F32, DType::F16] {
        let mut g = Graph::new("rev");
        let x = input(&mut g, &[3, 4, 5], dt);
        let r = node(&mut g, Op::Reverse { axes: vec![0, -1] }, &[x]);
        let r2 = node(&mut g, Op::Reverse { axes: vec![1] }, &[x]);
        g.set_outputs(&[r, r2]).unwrap();
        check(&g, &["reverse"]);
    }
}

#[test]
fn copy_matches_host() {
    // an out-of-place softmax copies its input to the output first
    for dt in [DType::F32, DType::F16] {
        let mut g = Graph::new("copy");
        let x = input(&mut g, &[3, 37], dt);
        let s = node(&mut g, Op::Softmax { axis: -1 }, &[x]);
        g.set_outputs(&[s]).unwrap();
        let c = compiled(&g);
        // the copy is exact; the softmax after it rounds like softmax.metal
        check_tol(&g, &["copy"], 2e-3);
        assert!(c.schedule.thunks.iter().any(|t| t.name() == "softmax"));
    }
}
