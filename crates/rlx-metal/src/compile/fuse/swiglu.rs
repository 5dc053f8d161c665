//! `ir_fuse_swiglu`: `silu(gate) * up`, where gate and up are the two
//! halves of one tensor's last axis, becomes one `FusedSwiGLU` on that
//! tensor.
//!
//! Pattern (the mul is commutative): `mul(silu(narrow(x, -1, g0, n)),
//! narrow(x, -1, u0, n))` with `{g0, u0} = {0, n}` and `x [.., 2n]` →
//! `fused_swiglu(x, gate_first = (g0 == 0))`.
//!
//! Nodes before → after: 4 → 1 (the narrows are views; thunks 2 → 1).
//!
//! Preconditions:
//! * the silu is read only by the mul and is not a graph output; the
//!   narrows are dropped when nothing else reads them, else kept (they are
//!   free views);
//! * both narrows take exactly one half of `x`'s static, even last axis;
//! * `x` and the result share one dtype, f32 or f16 (the fused thunk reads
//!   and writes one dtype).
//!
//! Gate and up as two separate projections (`silu(x @ wg) * (x @ wu)`) do
//! not match: `FusedSwiGLU` needs them side by side in one buffer, and a
//! concatenation would cost the copy the fusion saves; the region fusion
//! takes that form instead.

use super::{FuseContext, Fusion, Operand, Rewrite};
use rlx_ir::op::{Activation, BinaryOp};
use rlx_ir::{DType, Graph, NodeId, Op};

/// The fusion. See the module docs.
pub struct FuseSwiGlu;

impl Fusion for FuseSwiGlu {
    const NAME: &'static str = "ir_fuse_swiglu";

    fn find(g: &Graph, cx: &FuseContext) -> Vec<Rewrite> {
        (0..g.len()).filter_map(|i| plan(g, cx, i)).collect()
    }
}

/// `(source, start, len)` of a narrow along the last axis.
fn last_axis_narrow(g: &Graph, id: NodeId) -> Option<(NodeId, usize, usize)> {
    let n = g.node(id);
    let Op::Narrow { axis, start, len } = n.op else {
        return None;
    };
    let src = *n.inputs.first()?;
    let rank = g.shape(src).rank() as i64;
    let a = if axis < 0 { axis + rank } else { axis };
    (rank > 0 && a == rank - 1).then_some((src, start, len))
}

/// Matches are disjoint: each is rooted at a mul and absorbs only a silu
/// private to it and narrows private to those two.
fn plan(g: &Graph, cx: &FuseContext, i: NodeId) -> Option<Rewrite> {
    let node = g.node(i);
    if node.op
        != (Op::Binary {
            kind: BinaryOp::Mul,
        })
    {
        return None;
    }
    let [p, q] = node.inputs[..] else {
        return None;
    };
    let silu = Op::Activation {
        kind: Activation::Silu,
    };
    let (act, up) = [(p, q), (q, p)]
        .into_iter()
        .find(|&(a, _)| g.node(a).op == silu && cx.private_to(a, i))?;
    let gate = *g.node(act).inputs.first()?;
    let (x, g0, gn) = last_axis_narrow(g, gate)?;
    let (x2, u0, un) = last_axis_narrow(g, up)?;
    let xs = g.shape(x);
    let full = xs.dims.last()?.as_static()?;
    if x != x2 || gn != un || full != 2 * gn || gn == 0 || g0 + u0 != gn || g0 == u0 {
        return None;
    }
    if !matches!(xs.dtype, DType::F32 | DType::F16) || node.shape.dtype != xs.dtype {
        return None;
    }
    let op = Op::FusedSwiGLU {
        gate_first: g0 == 0,
    };
    if !super::infers_to(&op, &[xs], &node.shape) {
        return None;
    }
    let mut absorbed = vec![act];
    if cx.private_to(gate, act) {
        absorbed.push(gate);
    }
    if cx.private_to(up, i) {
        absorbed.push(up);
    }
    absorbed.sort_unstable();
    Some(Rewrite {
        root: i,
        op,
        inputs: vec![Operand::Node(x)],
        absorbed,
        extra: vec![],
    })
}
