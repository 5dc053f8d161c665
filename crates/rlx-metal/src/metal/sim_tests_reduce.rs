//! metal-sim vs host for `reduce.metal`: reductions over the last, a middle
//! and the first axis (f32, f16), arg max / min (exact: the i32 indices
//! must be identical) and cumsums. The host sums in f64, the kernels in
//! f32: f32 sums / cumsums of ≤ 100 terms of magnitude ≤ 2 are checked to
//! `1e-4 + 1e-5·|host|` (a few f32 ulps of Σ|x| ≤ 200); f16 outputs use
//! `assert_same`'s f16 tolerance (one f16 rounding dominates).

use super::tests::{assert_close, assert_same, family_plan, input, node};
use super::*;
use rlx_ir::op::ReduceOp;
use rlx_ir::{DType, Graph, NodeId, Op};

fn reduce(g: &mut Graph, x: NodeId, kind: ReduceOp, axes: &[i64]) -> NodeId {
    let op = Op::Reduce {
        kind,
        axes: axes.to_vec(),
        keep_dims: false,
    };
    node(g, op, &[x])
}

#[test]
fn reductions_match_host() {
    for dt in [DType::F32, DType::F16] {
        let mut g = Graph::new("reduce");
        let x = input(&mut g, &[3, 37], dt);
        let y = input(&mut g, &[2, 5, 7], dt);
        let z = input(&mut g, &[4, 9], dt);
        let s = reduce(&mut g, x, ReduceOp::Sum, &[-1]);
        let m = reduce(&mut g, y, ReduceOp::Mean, &[1]);
        let mx = reduce(&mut g, z, ReduceOp::Max, &[0]);
        let mn = reduce(&mut g, x, ReduceOp::Min, &[1]);
        g.set_outputs(&[s, m, mx, mn]).unwrap();
        let (c, plan) = family_plan(&g, Family::Reduce, &["reduce"]);
        if dt == DType::F32 {
            assert_close(&c, &plan, 1e-4, 1e-5);
        } else {
            assert_same(&c, &plan, dt);
        }
    }
}

#[test]
fn arg_reductions_match_host() {
    let mut g = Graph::new("arg");
    let x = input(&mut g, &[3, 37], DType::F32);
    let y = input(&mut g, &[5, 6], DType::F32);
    let a = node(
        &mut g,
        Op::ArgMax {
            axis: -1,
            keep_dims: false,
        },
        &[x],
    );
    let b = node(
        &mut g,
        Op::ArgMin {
            axis: 0,
            keep_dims: false,
        },
        &[y],
    );
    g.set_outputs(&[a, b]).unwrap();
    let (c, plan) = family_plan(&g, Family::Reduce, &["argreduce"]);
    assert_close(&c, &plan, 0.0, 0.0);
}

#[test]
fn cumsum_matches_host() {
    let mut g = Graph::new("cumsum");
    let x = input(&mut g, &[3, 100], DType::F32);
    let a = node(
        &mut g,
        Op::Cumsum {
            axis: -1,
            exclusive: false,
        },
        &[x],
    );
    let b = node(
        &mut g,
        Op::Cumsum {
            axis: -1,
            exclusive: true,
        },
        &[x],
    );
    g.set_outputs(&[a, b]).unwrap();
    let (c, plan) = family_plan(&g, Family::Reduce, &["cumsum"]);
    assert_close(&c, &plan, 1e-4, 1e-5);
}

#[test]
fn topk_matches_host() {
    let mut g = Graph::new("topk");
    let x = input(&mut g, &[3, 100], DType::F32);
    let t = node(&mut g, Op::TopK { k: 7, axis: -1 }, &[x]);
    g.set_outputs(&[t]).unwrap();
    let (c, plan) = family_plan(&g, Family::Reduce, &["topk"]);
    assert_close(&c, &plan, 0.0, 0.0);
}
