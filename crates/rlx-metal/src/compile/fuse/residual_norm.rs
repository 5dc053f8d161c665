//! `ir_fuse_residual_layer_norm` and `ir_fuse_residual_rms_norm`: a
//! residual add feeding a LayerNorm / RMSNorm becomes one
//! `FusedResidualLN` / `FusedResidualRmsNorm`. The two share this file
//! because their pattern is the same; each has its own name so either can
//! be switched off.
//!
//! Patterns (adds are commutative):
//! * `norm(add(x, res), gamma, beta?)` → `fused(x, res, gamma, beta?)`;
//! * `norm(add(add(x, bias), res), ..)` → `fused(x, res, bias, gamma, ..)`
//!   with `has_bias` (the fused op adds `bias [h]` to the sum).
//!
//! Nodes (and thunks) before → after: 2 (3) → 1.
//!
//! Preconditions:
//! * the sum (and the inner bias add) is read only by the next node of the
//!   pattern and is not a graph output: the fused op defines one result, the
//!   normalised value, and never materialises the sum — the pre-norm
//!   transformer pattern `h = x + a; n = norm(h); h + mlp(n)` keeps `h` live
//!   and is left alone;
//! * `x` and `res` have the sum's exact dims (no broadcasting) and, with the
//!   sum and a bias, one dtype, f32 or f16; `bias` is `[h]`;
//! * the fused op infers exactly the norm's shape (IR shape inference).

use super::{infers_to, FuseContext, Fusion, Operand, Rewrite};
use rlx_ir::op::BinaryOp;
use rlx_ir::{DType, Graph, NodeId, Op};

/// The LayerNorm fusion. See the module docs.
pub struct FuseResidualLayerNorm;

impl Fusion for FuseResidualLayerNorm {
    const NAME: &'static str = "ir_fuse_residual_layer_norm";

    fn find(g: &Graph, cx: &FuseContext) -> Vec<Rewrite> {
        (0..g.len()).filter_map(|i| plan(g, cx, i, true)).collect()
    }
}

/// The RMSNorm fusion. See the module docs.
pub struct FuseResidualRmsNormIr;

impl Fusion for FuseResidualRmsNormIr {
    const NAME: &'static str = "ir_fuse_residual_rms_norm";

    fn find(g: &Graph, cx: &FuseContext) -> Vec<Rewrite> {
        (0..g.len()).filter_map(|i| plan(g, cx, i, false)).collect()
    }
}

const ADD: Op = Op::Binary {
    kind: BinaryOp::Add,
};

/// The operands of `id` when it is an add private to `consumer`.
fn private_add(g: &Graph, cx: &FuseContext, id: NodeId, consumer: NodeId) -> Option<[NodeId; 2]> {
    let n = g.node(id);
    if n.op != ADD || !cx.private_to(id, consumer) {
        return None;
    }
    let [a, b] = n.inputs[..] else {
        return None;
    };
    Some([a, b])
}

/// Matches are disjoint without bookkeeping: each is rooted at a norm and
/// absorbs only adds that the norm alone (transitively) reads.
fn plan(g: &Graph, cx: &FuseContext, i: NodeId, layer: bool) -> Option<Rewrite> {
    let node = g.node(i);
    let eps = match (&node.op, layer) {
        (Op::LayerNorm { eps }, true) | (Op::RmsNorm { eps }, false) => *eps,
        _ => return None,
    };
    let (&s, params) = node.inputs.split_first()?;
    let [p, q] = private_add(g, cx, s, i)?;
    let sum = g.shape(s);
    if !matches!(sum.dtype, DType::F32 | DType::F16) {
        return None;
    }
    let full = |id: NodeId| *g.shape(id) == *sum;
    // the bias form: one side is `add(x, bias)` private to the sum
    let mut found = None;
    for (inner, res) in [(p, q), (q, p)] {
        if !full(res) {
            continue;
        }
        if let Some([a, b]) = private_add(g, cx, inner, s) {
            for (x, bias) in [(a, b), (b, a)] {
                if full(x) && g.shape(bias).dtype == sum.dtype && g.shape(bias).rank() == 1 {
                    found = Some((x, res, Some((inner, bias))));
                    break;
                }
            }
        }
        if found.is_some() {
            break;
        }
    }
    if found.is_none() && full(p) && full(q) {
        found = Some((p, q, None));
    }
    let (x, res, bias) = found?;
    let has_bias = bias.is_some();
    let op = if layer {
        Op::FusedResidualLN { eps, has_bias }
    } else {
        Op::FusedResidualRmsNorm { eps, has_bias }
    };
    let mut inputs = vec![x, res];
    let mut absorbed = vec![s];
    if let Some((inner, b)) = bias {
        inputs.push(b);
        absorbed.push(inner);
    }
    inputs.extend_from_slice(params);
    let shapes: Vec<_> = inputs.iter().map(|&j| g.shape(j)).collect();
    if !infers_to(&op, &shapes, &node.shape) {
        return None;
    }
    absorbed.sort_unstable();
    Some(Rewrite {
        root: i,
        op,
        inputs: inputs.into_iter().map(Operand::Node).collect(),
        absorbed,
        extra: vec![],
    })
}
