//! Unit tests of layout and indexing shape inference.

use super::super::common::testutil::{err, ok};
use crate::op::Op;
use crate::shape::Dim;

fn dims(spec: &[&str]) -> Vec<Dim> {
    spec.iter()
        .map(|t| match t.parse::<usize>() {
            Ok(n) => Dim::Static(n),
            Err(_) => Dim::from(*t),
        })
        .collect()
}

#[test]
fn reshape() {
    let r = |d: &[&str]| Op::Reshape { dims: dims(d) };
    ok(&r(&["6", "4"]), &["f32[2, 3, 4]"], "f32[6, 4]");
    ok(&r(&[]), &["f32[1, 1]"], "f32[]");
    ok(&r(&["b", "8"]), &["f32[b, 2, 4]"], "f32[b, 8]");
    ok(&r(&["4", "s", "b"]), &["f32[b, s, 4]"], "f32[4, s, b]");
    ok(&r(&["0", "t"]), &["f32[s, 0]"], "f32[0, t]");
    err(&r(&["5", "4"]), &["f32[2, 3, 4]"], "24 vs 20 elements");
    err(&r(&["t", "8"]), &["f32[s, 8]"], "symbolic dims must match");
    err(
        &r(&["b", "b", "8"]),
        &["f32[b, 8]"],
        "cannot reshape f32[b, 8]",
    );
    err(&r(&["b", "4"]), &["f32[b, 8]"], "static products");
    err(
        &r(&[&usize::MAX.to_string(), "2"]),
        &["f32[2]"],
        "overflows",
    );
    err(&r(&["2"]), &["f32[2]", "f32[2]"], "expects 1");
}

#[test]
fn transpose_expand_narrow() {
    let t = |perm: &[usize]| Op::Transpose {
        perm: perm.to_vec(),
    };
    ok(&t(&[2, 0, 1]), &["f16[b, s, 8]"], "f16[8, b, s]");
    ok(&t(&[]), &["f16[]"], "f16[]");
    err(&t(&[0, 0, 1]), &["f16[b, s, 8]"], "not a permutation");
    err(&t(&[0, 1, 3]), &["f16[b, s, 8]"], "not a permutation");
    err(&t(&[1, 0]), &["f16[b, s, 8]"], "2 entries");

    let e = |d: &[&str]| Op::Expand { dims: dims(d) };
    ok(&e(&["b", "3", "4"]), &["i8[1, 4]"], "i8[b, 3, 4]");
    ok(&e(&["s", "4"]), &["i8[s, 4]"], "i8[s, 4]");
    err(
        &e(&["3", "4"]),
        &["i8[2, 4]"],
        "does not broadcast to [3, 4]",
    );
    err(&e(&["4"]), &["i8[1, 4]"], "does not broadcast");
    err(&e(&["t", "4"]), &["i8[s, 4]"], "does not broadcast");

    let n = |axis, start, len| Op::Narrow { axis, start, len };
    ok(&n(-1, 2, 3), &["f32[s, 8]"], "f32[s, 3]");
    ok(&n(0, 0, 1), &["f32[s, 8]"], "f32[1, 8]");
    ok(&n(1, 5, 3), &["f32[s, 8]"], "f32[s, 3]");
    err(&n(1, 6, 3), &["f32[s, 8]"], "exceeds dim 1");
    err(&n(1, usize::MAX, 3), &["f32[s, 8]"], "exceeds");
    err(
        &n(2, 0, 1),
        &["f32[s, 8]"],
        "axis 2 out of range for rank 2",
    );
    err(&n(-3, 0, 1), &["f32[s, 8]"], "axis -3 out of range");
}

#[test]
fn concat() {
    let c = |axis| Op::Concat { axis };
    ok(&c(1), &["f32[b, 2]", "f32[b, 3]", "f32[b, 0]"], "f32[b, 5]");
    ok(&c(-2), &["f32[2, s]", "f32[3, s]"], "f32[5, s]");
    ok(&c(0), &["f32[s, 4]"], "f32[s, 4]");
    err(&c(0), &["f32[s, 4]", "f32[2, 4]"], "symbolic lengths");
    err(&c(0), &["f32[2, 4]", "f32[2, 5]"], "differ off axis 0");
    err(&c(0), &["f32[2, 4]", "f32[2]"], "differ off axis 0");
    err(&c(0), &["f32[2, 4]", "f16[2, 4]"], "dtypes differ");
    err(&c(2), &["f32[2, 4]", "f32[2, 4]"], "axis 2 out of range");
    err(&c(0), &["f32[]"], "out of range for rank 0");
    err(&c(0), &[], "at least 1");
}

#[test]
fn reverse_and_resize() {
    let r = |axes: &[i64]| Op::Reverse {
        axes: axes.to_vec(),
    };
    ok(&r(&[0, -1]), &["f32[2, s, 4]"], "f32[2, s, 4]");
    ok(&r(&[]), &["f32[2]"], "f32[2]");
    err(&r(&[1, -2]), &["f32[2, s, 4]"], "repeated");
    err(
        &r(&[3]),
        &["f32[2, s, 4]"],
        "axis 3 out of range for rank 3",
    );
    let op = Op::ResizeNearest2x;
    ok(&op, &["f16[n, 3, 5, 7]"], "f16[n, 3, 10, 14]");
    err(&op, &["f16[n, 3, h, 7]"], "height must be a static");
    err(&op, &["f16[3, 5, 7]"], "rank 4");
    err(
        &op,
        &[&format!("f16[1, 1, 1, {}]", usize::MAX)],
        "width overflows",
    );
}

#[test]
fn gathers_and_scatter_add() {
    ok(
        &Op::Gather,
        &["f16[1000, 64]", "i32[b, s]"],
        "f16[b, s, 64]",
    );
    ok(&Op::Gather, &["f16[1000]", "i64[]"], "f16[]");
    err(&Op::Gather, &["f16[1000, 64]", "f32[b, s]"], "integer");
    err(&Op::Gather, &["f16[]", "i32[b]"], "rank >= 1");
    err(&Op::Gather, &["f16[4, 4]"], "expects 2");

    let ga = |axis| Op::GatherAxis { axis };
    ok(&ga(-1), &["f32[2, 3, 9]", "u32[k]"], "f32[2, 3, k]");
    err(&ga(1), &["f32[2, 3]", "i32[2, 2]"], "rank 1");
    err(&ga(2), &["f32[2, 3]", "i32[2]"], "axis 2 out of range");
    err(&ga(0), &["f32[2, 3]", "bool[2]"], "integer");

    let sa = Op::ScatterAdd { out_dim: 10 };
    ok(&sa, &["f32[u, 4]", "i32[u]"], "f32[10, 4]");
    err(&sa, &["f32[u, 4]", "i32[v]"], "idx must be [u]");
    err(&sa, &["f32[u, 4]", "f32[u]"], "integer");
    err(&sa, &["bool[u, 4]", "i32[u]"], "numeric");
    err(&sa, &["f32[]", "i32[u]"], "rank >= 1");
}

#[test]
fn onnx_nd_ops() {
    // ScatterND: updates = indices[:-1] ++ data[k:]
    let op = Op::ScatterNd;
    ok(
        &op,
        &["f32[4, 5, 6]", "i64[2, 3, 2]", "f32[2, 3, 6]"],
        "f32[4, 5, 6]",
    );
    ok(&op, &["f32[4, 5]", "i64[n, 2]", "f32[n]"], "f32[4, 5]");
    err(
        &op,
        &["f32[4, 5, 6]", "i64[2, 2]", "f32[2, 5]"],
        "updates must be [2, 6]",
    );
    err(&op, &["f32[4, 5]", "i64[2, 3]", "f32[2]"], "index depth 3");
    err(&op, &["f32[4, 5]", "i64[2, q]", "f32[2]"], "static");
    err(&op, &["f32[4, 5]", "f32[2, 1]", "f32[2, 5]"], "integer");
    // float updates convert on write between f32 / f16 / bf16
    ok(&op, &["f16[4, 5]", "i32[2, 1]", "f32[2, 5]"], "f16[4, 5]");
    ok(&op, &["f32[4, 5]", "i32[2, 1]", "f16[2, 5]"], "f32[4, 5]");
    ok(&op, &["bf16[4, 5]", "i32[2, 1]", "f32[2, 5]"], "bf16[4, 5]");
    ok(&op, &["f16[4, 5]", "i32[2, 1]", "bf16[2, 5]"], "f16[4, 5]");
    err(
        &op,
        &["f32[4, 5]", "i64[2, 1]", "i32[2, 5]"],
        "updates i32[2, 5] cannot be written into data f32[4, 5]",
    );
    err(&op, &["i32[4, 5]", "i64[2, 1]", "i64[2, 5]"], "must match");
    err(&op, &["f64[4, 5]", "i64[2, 1]", "f32[2, 5]"], "bf16");

    // GatherND with and without batch dims
    let g = |batch_dims| Op::GatherNd { batch_dims };
    ok(&g(0), &["f32[2, 2]", "i64[2, 2]"], "f32[2]");
    ok(&g(0), &["f32[2, 2]", "i64[2, 1]"], "f32[2, 2]");
    ok(&g(0), &["f32[2, 2, 2]", "i64[2, 1, 2]"], "f32[2, 1, 2]");
    ok(&g(1), &["f32[2, 2, 2]", "i64[2, 1]"], "f32[2, 2]");
    ok(&g(1), &["f32[b, 3, 4, 5]", "i32[b, 7, 2]"], "f32[b, 7, 5]");
    err(
        &g(1),
        &["f32[b, 3, 4]", "i32[c, 7, 2]"],
        "batch dims differ",
    );
    err(
        &g(0),
        &["f32[2, 2]", "i64[2, 3]"],
        "index depth must be in 1..=2",
    );
    err(
        &g(1),
        &["f32[2, 2]", "i64[2, 2]"],
        "index depth must be in 1..=1",
    );
    err(&g(2), &["f32[2, 2]", "i64[2, 1]"], "batch_dims 2");
    err(&g(0), &["f32[2, 2]", "i64[]"], "rank >= 1");

    let ge = |axis| Op::GatherElements { axis };
    ok(&ge(1), &["f32[3, 4]", "i64[3, 2]"], "f32[3, 2]");
    ok(&ge(-1), &["f32[b, 4]", "i64[b, 9]"], "f32[b, 9]");
    ok(&ge(0), &["f32[3, 4]", "i64[5, 2]"], "f32[5, 2]");
    err(&ge(1), &["f32[3, 4]", "i64[4, 2]"], "fit in it off axis 1");
    err(&ge(1), &["f32[3, 4]", "i64[3]"], "rank of data");
    err(&ge(2), &["f32[3, 4]", "i64[3, 4]"], "axis 2 out of range");
    err(&ge(0), &["f32[3, 4]", "f32[3, 4]"], "integer");

    let se = |axis| Op::ScatterElements { axis };
    ok(
        &se(0),
        &["f32[3, 4]", "i32[2, 4]", "f32[2, 4]"],
        "f32[3, 4]",
    );
    err(
        &se(0),
        &["f32[3, 4]", "i32[2, 4]", "f32[2, 3]"],
        "updates must be [2, 4]",
    );
    err(
        &se(0),
        &["f32[3, 4]", "i32[2, 5]", "f32[2, 5]"],
        "fit in it",
    );
    err(&se(0), &["f32[3, 4]", "i32[2, 4]"], "expects 3");
}
