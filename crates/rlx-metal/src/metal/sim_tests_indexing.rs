//! metal-sim vs host for `indexing.metal`: embedding gather, axis gather
//! (negative indices), scatter-add with duplicates and the in-place
//! ScatterND KV-cache write. Indices are i32 constants (the harness fills
//! inputs with floats). Moves are exact; scatter-add sums in the host's
//! order (exact); the KV test adds a parameter afterwards in a binary
//! kernel (f16 tolerance of `assert_same`). The converting KV write (f32
//! rows into an f16 cache and back) must match the host bit for bit.

use super::tests::{assert_close, assert_same, family_plan, leaf, node};
use super::*;
use rlx_ir::op::BinaryOp;
use rlx_ir::{DType, Graph, NodeId, Op, Shape};

fn indices(g: &mut Graph, dims: &[usize], v: &[i32]) -> NodeId {
    let op = Op::Constant {
        shape: Shape::of(dims, DType::I32),
        values: v.iter().map(|&x| x as f64).collect(),
    };
    node(g, op, &[])
}

#[test]
fn gathers_match_host() {
    for dt in [DType::F32, DType::F16] {
        let mut g = Graph::new("gather");
        let table = leaf(&mut g, &[11, 37], dt, true);
        let ids = indices(&mut g, &[5], &[3, 0, 10, 3, 7]);
        let emb = node(&mut g, Op::Gather, &[table, ids]);
        let x = leaf(&mut g, &[3, 7, 5], DType::F32, false);
        let sel = indices(&mut g, &[4], &[-1, 0, 6, 2]);
        let ga = node(&mut g, Op::GatherAxis { axis: 1 }, &[x, sel]);
        g.set_outputs(&[emb, ga]).unwrap();
        let (c, plan) = family_plan(&g, Family::Indexing, &["gather", "gather_axis"]);
        assert_close(&c, &plan, 0.0, 0.0);
    }
}

#[test]
fn scatter_add_matches_host() {
    let mut g = Graph::new("scatter_add");
    let upd = leaf(&mut g, &[6, 9], DType::F32, false);
    let ids = indices(&mut g, &[6], &[1, 3, 1, 0, 1, 4]);
    let s = node(&mut g, Op::ScatterAdd { out_dim: 5 }, &[upd, ids]);
    g.set_outputs(&[s]).unwrap();
    let (c, plan) = family_plan(&g, Family::Indexing, &["scatter_add"]);
    assert_close(&c, &plan, 0.0, 0.0);
}

#[test]
fn kv_cache_write_matches_host() {
    // state [8, 12] gets rows 5 and 2 in place; the cache plus a param is
    // the output (the state itself cannot be one)
    for dt in [DType::F32, DType::F16] {
        let mut g = Graph::new("kv");
        let cache = node(
            &mut g,
            Op::State {
                shape: Shape::of(&[8, 12], dt),
            },
            &[],
        );
        let slots = indices(&mut g, &[2, 1], &[5, 2]);
        let new = leaf(&mut g, &[2, 12], dt, false);
        let full = node(&mut g, Op::ScatterNd, &[cache, slots, new]);
        let p = leaf(&mut g, &[8, 12], dt, true);
        let out = node(
            &mut g,
            Op::Binary {
                kind: BinaryOp::Add,
            },
            &[full, p],
        );
        g.set_outputs(&[out]).unwrap();
        let (c, plan) = family_plan(&g, Family::Indexing, &["cpu_indexing"]);
        assert_eq!(plan.stats().host, 0, "{plan}");
        assert_same(&c, &plan, dt);
    }
}

#[test]
fn converting_kv_cache_write_matches_host() {
    // f32 rows into an f16 cache (rounded on write) and f16 rows into an
    // f32 cache, odd row length, a negative slot; the cache is the output
    // through a cast (f16 → f32 is exact), so host and metal-sim must agree
    // bit for bit
    for (cache_dt, new_dt, kernel) in [
        (DType::F16, DType::F32, "scatter_nd_f32_f16"),
        (DType::F32, DType::F16, "scatter_nd_f16_f32"),
    ] {
        let mut g = Graph::new("kv_convert");
        let cache = node(
            &mut g,
            Op::State {
                shape: Shape::of(&[9, 13], cache_dt),
            },
            &[],
        );
        let slots = indices(&mut g, &[3, 1], &[7, 0, -2]);
        let new = leaf(&mut g, &[3, 13], new_dt, false);
        let full = node(&mut g, Op::ScatterNd, &[cache, slots, new]);
        let out = node(
            &mut g,
            Op::Cast {
                to: if cache_dt == DType::F16 {
                    DType::F32
                } else {
                    DType::F16
                },
                trunc: false,
            },
            &[full],
        );
        g.set_outputs(&[out]).unwrap();
        let (c, plan) = family_plan(&g, Family::Indexing, &["cpu_indexing"]);
        assert_eq!(plan.stats().host, 0, "{plan}");
        assert!(
            plan.commands
                .iter()
                .any(|cmd| matches!(cmd, Command::Dispatch(d) if d.kernel.function == kernel)),
            "no {kernel} in\n{plan}"
        );
        assert_close(&c, &plan, 0.0, 0.0);
    }
}
