//! `ir_elementwise_region`: a connected group of f32 elementwise ops whose
//! intermediate values nobody else reads becomes one `ElementwiseRegion`
//! (one pass over the output instead of one kernel and one round trip
//! through memory per op).
//!
//! Pattern: a DAG of `activation`, `binary` (any of the seven kinds, numpy
//! broadcasting included) and `cast` to f32 from another float dtype (a
//! same-dtype cast is a free view and stays one), grown from a root towards its
//! operands. Nodes (and thunks) before → after: k → 1, `2 ≤ k ≤ 32`.
//!
//! Preconditions:
//! * every member computes an f32 value from float operands (the region
//!   thunk computes in f32 and writes f32; an f16 or integer op inside would
//!   round differently), so external inputs may be any float dtype;
//! * every member but the root is read only by other members and is not a
//!   graph output (this also keeps the group convex: no outside node sits
//!   between two members);
//! * at most [`MAX_REGION_STEPS`] members and [`MAX_REGION_INPUTS`]
//!   distinct external inputs; a node that would break a limit stays
//!   outside as an input;
//! * the region infers exactly the root's shape (IR shape inference;
//!   elementwise ops commute with broadcasting, so members of smaller
//!   shape than the root compute the same values broadcast).
//!
//! Growth is greedy and maximal: roots are taken from the last node back,
//! and operands are considered highest id first, so by the time a node is
//! considered every member that reads it has already been decided.

use super::{FuseContext, Fusion, Operand, Rewrite};
use rlx_ir::op::{RegionOperand, RegionStep, MAX_REGION_INPUTS, MAX_REGION_STEPS};
use rlx_ir::{DType, Graph, NodeId, Op};
use std::collections::{BTreeSet, BinaryHeap, HashSet};

/// The fusion. See the module docs.
pub struct FuseElementwiseRegion;

impl Fusion for FuseElementwiseRegion {
    const NAME: &'static str = "ir_elementwise_region";

    fn find(g: &Graph, cx: &FuseContext) -> Vec<Rewrite> {
        let mut taken: HashSet<NodeId> = HashSet::new();
        let mut out = Vec::new();
        for root in (0..g.len()).rev() {
            if taken.contains(&root) || !member_op(g, root) {
                continue;
            }
            let members = grow(g, cx, root, &taken);
            if members.len() < 2 {
                continue;
            }
            if let Some(r) = build(g, root, &members) {
                taken.extend(members.iter().copied());
                out.push(r);
            }
        }
        out.reverse();
        out
    }
}

/// True when node `id` can be a region step: an activation, binary op or
/// cast to f32 computing f32 from float operands.
fn member_op(g: &Graph, id: NodeId) -> bool {
    let n = g.node(id);
    let op_ok = match n.op {
        Op::Activation { .. } => n.inputs.len() == 1,
        Op::Binary { .. } => n.inputs.len() == 2,
        // a cast that keeps the dtype is a free view: not worth a step
        Op::Cast { to, trunc: false } => {
            to == DType::F32 && n.inputs.len() == 1 && g.shape(n.inputs[0]).dtype != to
        }
        _ => false,
    };
    op_ok && n.shape.dtype == DType::F32 && n.inputs.iter().all(|&j| g.shape(j).dtype.is_float())
}

/// External inputs of `members`: operands that are not members, in order
/// of first use by the members taken in id order.
fn externals(g: &Graph, members: &BTreeSet<NodeId>) -> Vec<NodeId> {
    let mut ext = Vec::new();
    for &m in members {
        for &j in &g.node(m).inputs {
            if !members.contains(&j) && !ext.contains(&j) {
                ext.push(j);
            }
        }
    }
    ext
}

/// The maximal member set grown from `root`.
fn grow(g: &Graph, cx: &FuseContext, root: NodeId, taken: &HashSet<NodeId>) -> BTreeSet<NodeId> {
    let mut members = BTreeSet::from([root]);
    let mut heap: BinaryHeap<NodeId> = g.node(root).inputs.iter().copied().collect();
    let mut seen: HashSet<NodeId> = HashSet::new();
    while let Some(o) = heap.pop() {
        if !seen.insert(o) || members.contains(&o) || taken.contains(&o) {
            continue;
        }
        if !member_op(g, o)
            || cx.outputs.contains(&o)
            || !cx.users[o].iter().all(|u| members.contains(u))
            || members.len() >= MAX_REGION_STEPS
        {
            continue;
        }
        members.insert(o);
        if externals(g, &members).len() > MAX_REGION_INPUTS {
            members.remove(&o);
            continue;
        }
        heap.extend(g.node(o).inputs.iter().copied());
    }
    members
}

/// The rewrite for `members` (ascending ids; the last is `root`).
fn build(g: &Graph, root: NodeId, members: &BTreeSet<NodeId>) -> Option<Rewrite> {
    let ext = externals(g, members);
    let order: Vec<NodeId> = members.iter().copied().collect();
    let operand = |j: NodeId| -> Option<RegionOperand> {
        if let Ok(s) = order.binary_search(&j) {
            Some(RegionOperand::Step(s as u32))
        } else {
            ext.iter()
                .position(|&e| e == j)
                .map(|p| RegionOperand::Input(p as u32))
        }
    };
    let mut steps = Vec::with_capacity(order.len());
    for &m in &order {
        let n = g.node(m);
        steps.push(match n.op {
            Op::Activation { kind } => RegionStep::Unary {
                act: kind,
                a: operand(n.inputs[0])?,
            },
            Op::Binary { kind } => RegionStep::Binary {
                kind,
                a: operand(n.inputs[0])?,
                b: operand(n.inputs[1])?,
            },
            Op::Cast { to, .. } => RegionStep::Cast {
                to,
                a: operand(n.inputs[0])?,
            },
            _ => return None,
        });
    }
    let op = Op::ElementwiseRegion { steps };
    let shapes: Vec<_> = ext.iter().map(|&j| g.shape(j)).collect();
    if !super::infers_to(&op, &shapes, &g.node(root).shape) {
        return None;
    }
    Some(Rewrite {
        root,
        op,
        inputs: ext.into_iter().map(Operand::Node).collect(),
        absorbed: order[..order.len() - 1].to_vec(),
        extra: vec![],
    })
}
