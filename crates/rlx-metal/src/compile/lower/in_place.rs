//! `in_place_activation`: an activation whose operand dies at it is planned
//! in place ([`ValueKind::InPlace`]): its result takes the operand's bytes
//! and the lowering emits `ActivationInPlace` (the thunk sees `src == dst`)
//! instead of `ActivationOut` into a fresh buffer.
//!
//! Preconditions, per activation node `i` reading node `j`:
//! * both values live in the arena, `i`'s is planned (not a view) and has
//!   exactly the bytes of `j`'s (same dtype, same element count);
//! * the storage `j` aliases (its root: `j` itself, or the value `j` views
//!   or overwrites in place) is not a run input, whose buffer the caller
//!   fills and may expect to find again;
//! * no value on that storage is read after step `i` (`j` itself is read
//!   last by `i`; graph outputs are read "after the schedule" and never
//!   qualify). Values are visited in index order, which is node order, so a
//!   later alias of the storage would have to be made from an earlier one
//!   read after `i` — the running maximum of ends per storage is enough.
//!
//! Switched off with `RLX_DISABLE_PASS=in_place_activation`; the planner
//! re-checks every in-place value ([`super::super::plan`]).

use super::Loc;
use crate::compile::plan::{Value, ValueKind};
use rlx_ir::{Graph, NodeId, Op};

/// The name `RLX_DISABLE_PASS` knows this planning step by.
pub const NAME: &str = "in_place_activation";

/// Turn the values of eligible activations into in-place values over their
/// operand; `value_node[v]` is the node of value `v`. Returns the number of
/// activations planned in place.
pub(super) fn plan_in_place(
    graph: &Graph,
    locs: &[Loc],
    values: &mut [Value],
    value_node: &[NodeId],
) -> usize {
    let n = values.len();
    let mut root = vec![0usize; n];
    let mut max_end = vec![0usize; n];
    let mut count = 0;
    for v in 0..n {
        if let Some(parent) = candidate(graph, locs, values, value_node, v) {
            let r = root[parent];
            let start = values[v].start;
            let input_root = matches!(graph.node(value_node[r]).op, Op::Input { .. });
            if !input_root && max_end[r] <= start {
                values[v].kind = ValueKind::InPlace { parent };
                count += 1;
            }
        }
        root[v] = match values[v].kind {
            ValueKind::View { parent, .. } | ValueKind::InPlace { parent } => root[parent],
            ValueKind::Planned => v,
        };
        let r = root[v];
        max_end[r] = max_end[r].max(values[v].end);
    }
    count
}

/// The operand value of value `v` when `v` is the planned result of an f32 /
/// f16 activation whose operand is an arena value of the same size.
fn candidate(
    graph: &Graph,
    locs: &[Loc],
    values: &[Value],
    value_node: &[NodeId],
    v: usize,
) -> Option<usize> {
    let node = graph.node(*value_node.get(v)?);
    if !matches!(node.op, Op::Activation { .. }) || values[v].kind != ValueKind::Planned {
        return None;
    }
    let &[j] = node.inputs.as_slice() else {
        return None;
    };
    let Loc::Arena(parent) = locs[j] else {
        return None;
    };
    let (dt_in, dt_out) = (graph.shape(j).dtype, node.shape.dtype);
    let float = matches!(dt_out, rlx_ir::DType::F32 | rlx_ir::DType::F16);
    (float && dt_in == dt_out && values[parent].size == values[v].size && parent < v)
        .then_some(parent)
}
