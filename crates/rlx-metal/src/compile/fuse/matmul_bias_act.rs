//! `ir_fuse_matmul_bias_act`: a matmul with its bias add and/or activation
//! becomes one `FusedMatMulBiasAct`.
//!
//! Patterns (the add is commutative):
//! * `act(add(matmul(a, w), bias))` → `fused(a, w, bias, act)`;
//! * `add(matmul(a, w), bias)` → `fused(a, w, bias, none)`;
//! * `act(matmul(a, w))` → `fused(a, w, zeros[n], act)` (a zero bias
//!   constant is added; `x + 0` is exact).
//!
//! Nodes before → after: 3 (2) → 1; thunks likewise (the bias add and the
//! activation become the matmul's epilogue).
//!
//! Preconditions:
//! * the matmul (and the add when an activation follows) is read only by the
//!   next node of the pattern and is not a graph output;
//! * `a`, `w` and `bias` share one dtype, f32 or f16 (the fused thunk's
//!   dtypes; mixed operands would be promoted differently);
//! * `w` is rank 2 and `bias` exactly `[n]` (no other broadcast), and the
//!   fused op infers exactly the root's shape — checked with the IR's own
//!   shape inference;
//! * for the bias-free form, `n` is static (the zero constant needs a size).

use super::{infers_to, FuseContext, Fusion, Operand, Rewrite};
use rlx_ir::op::BinaryOp;
use rlx_ir::{DType, Graph, NodeId, Op, Shape};
use std::collections::HashSet;

/// The fusion. See the module docs.
pub struct FuseMatMulBiasAct;

impl Fusion for FuseMatMulBiasAct {
    const NAME: &'static str = "ir_fuse_matmul_bias_act";

    fn find(g: &Graph, cx: &FuseContext) -> Vec<Rewrite> {
        let mut claimed: HashSet<NodeId> = HashSet::new();
        let mut out = Vec::new();
        // last to first: an activation claims its add before the add is
        // considered as a root of its own
        for i in (0..g.len()).rev() {
            if claimed.contains(&i) {
                continue;
            }
            if let Some(r) = plan(g, cx, i) {
                if r.absorbed.iter().any(|a| claimed.contains(a)) {
                    continue;
                }
                claimed.insert(r.root);
                claimed.extend(r.absorbed.iter().copied());
                out.push(r);
            }
        }
        out.reverse();
        out
    }
}

/// The matmul `m`'s operands when it is a plain rank-2-weight matmul
/// private to `consumer`.
fn private_matmul(g: &Graph, cx: &FuseContext, m: NodeId, consumer: NodeId) -> Option<[NodeId; 2]> {
    let n = g.node(m);
    if n.op != Op::MatMul || !cx.private_to(m, consumer) {
        return None;
    }
    let [a, w] = n.inputs[..] else {
        return None;
    };
    (g.shape(w).rank() == 2).then_some([a, w])
}

/// `(matmul, bias)` when `t` is `add(matmul, bias)` in either order with the
/// matmul private to `t`.
fn bias_add(g: &Graph, cx: &FuseContext, t: NodeId) -> Option<(NodeId, [NodeId; 2], NodeId)> {
    let n = g.node(t);
    if n.op
        != (Op::Binary {
            kind: BinaryOp::Add,
        })
    {
        return None;
    }
    let [x, y] = n.inputs[..] else {
        return None;
    };
    for (m, b) in [(x, y), (y, x)] {
        if let Some(aw) = private_matmul(g, cx, m, t) {
            return Some((m, aw, b));
        }
    }
    None
}

fn float_ok(dts: &[DType]) -> bool {
    matches!(dts[0], DType::F32 | DType::F16) && dts.iter().all(|&d| d == dts[0])
}

fn plan(g: &Graph, cx: &FuseContext, i: NodeId) -> Option<Rewrite> {
    let node = g.node(i);
    let (act, body) = match node.op {
        Op::Activation { kind } => (Some(kind), *node.inputs.first()?),
        _ => (None, i),
    };
    let (absorbed, a, w, bias) = if let Some((m, [a, w], b)) = bias_add(g, cx, body) {
        if act.is_some() && !cx.private_to(body, i) {
            return None;
        }
        let mut absorbed = vec![m];
        if act.is_some() {
            absorbed.push(body);
        }
        (absorbed, a, w, Some(b))
    } else if act.is_some() {
        let [a, w] = private_matmul(g, cx, body, i)?;
        (vec![body], a, w, None)
    } else {
        return None;
    };
    let mut dts = vec![g.shape(a).dtype, g.shape(w).dtype, node.shape.dtype];
    if let Some(b) = bias {
        dts.push(g.shape(b).dtype);
    }
    if !float_ok(&dts) {
        return None;
    }
    let op = Op::FusedMatMulBiasAct { act };
    let (bias_operand, extra, bias_shape) = match bias {
        Some(b) => (Operand::Node(b), vec![], g.shape(b).clone()),
        None => {
            let n = g.shape(w).dim(1).as_static()?;
            let shape = Shape::of(&[n], dts[0]);
            let zeros = Op::Constant {
                shape: shape.clone(),
                values: vec![0.0],
            };
            (Operand::Extra(0), vec![zeros], shape)
        }
    };
    if !infers_to(&op, &[g.shape(a), g.shape(w), &bias_shape], &node.shape) {
        return None;
    }
    let mut absorbed = absorbed;
    absorbed.sort_unstable();
    Some(Rewrite {
        root: i,
        op,
        inputs: vec![Operand::Node(a), Operand::Node(w), bias_operand],
        absorbed,
        extra,
    })
}
