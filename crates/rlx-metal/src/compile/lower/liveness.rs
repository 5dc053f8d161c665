//! Liveness at node granularity for the planner: a value lives from its
//! node to its last consumer (graph outputs to the end), extended where a
//! fused Metal dispatch needs its inputs to outlive their last reader.

use rlx_ir::{Graph, Op};

/// Per node, the last step its value must stay intact: its last consumer,
/// `graph.len()` for an output, or later as [`keep_post_norm_inputs`] says.
pub(super) fn last_uses(graph: &Graph) -> Vec<usize> {
    let n = graph.len();
    let mut last_use: Vec<usize> = (0..n).collect();
    for (i, node) in graph.nodes.iter().enumerate() {
        for &j in &node.inputs {
            last_use[j] = last_use[j].max(i);
        }
    }
    for &o in &graph.outputs {
        last_use[o] = n;
    }
    keep_post_norm_inputs(graph, &mut last_use);
    last_use
}

/// Gemma-style post-norm + residual feeding a pre-norm, `h' = h +
/// rms_norm(y)`, `n = rms_norm(h')`: `y` and `h` stay live until the last
/// node of the short chains that read `n` (the GEMVs and their bias / head
/// norm / RoPE / cache-append or gating epilogues). The planner would
/// otherwise put `h'` over `y` (dead at the post-norm) or the chains'
/// results over `h` (dead at the add). The Metal decode fusion
/// (`metal::fuse`) folds post-norm, add and pre-norm into the prologue of
/// those GEMV dispatches, whose threadgroups all read `y` and `h` while
/// others write `h'` and the results: over `y` or `h` that is a race, and
/// the fold was rejected. Costs at most two more live values of the
/// residual's size (one row per token) during those few steps.
fn keep_post_norm_inputs(graph: &Graph, last_use: &mut [usize]) {
    use rlx_ir::op::BinaryOp;
    let n = graph.len();
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, node) in graph.nodes.iter().enumerate() {
        for &j in &node.inputs {
            match consumers.get_mut(j) {
                Some(c) if c.last() != Some(&i) => c.push(i),
                _ => {}
            }
        }
    }
    // the end of the epilogue chain starting at node `i`
    let chain_end = |mut i: usize| {
        for _ in 0..8 {
            let [next] = consumers[i][..] else { break };
            let epilogue = matches!(
                graph.node(next).op,
                Op::Binary { .. }
                    | Op::Activation { .. }
                    | Op::RmsNorm { .. }
                    | Op::Rope { .. }
                    | Op::Reshape { .. }
                    | Op::ScatterNd
            );
            if !epilogue {
                break;
            }
            i = next;
        }
        i
    };
    for (a, node) in graph.nodes.iter().enumerate() {
        let Op::Binary {
            kind: BinaryOp::Add,
        } = node.op
        else {
            continue;
        };
        let &[l, r] = node.inputs.as_slice() else {
            continue;
        };
        for (norm, h) in [(l, r), (r, l)] {
            let post = graph.node(norm);
            let (Op::RmsNorm { .. }, Some(&y)) = (&post.op, post.inputs.first()) else {
                continue;
            };
            let mut end = a;
            for &p in &consumers[a] {
                if matches!(graph.node(p).op, Op::RmsNorm { .. }) {
                    for &g in &consumers[p] {
                        end = end.max(chain_end(g));
                    }
                }
            }
            for v in [y, h] {
                if let Some(u) = last_use.get_mut(v) {
                    *u = (*u).max(end);
                }
            }
        }
    }
}
