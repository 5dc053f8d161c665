//! Graph-level fusions: rewrites of the IR graph, run by [`super::compile`]
//! before lowering, that turn plain op patterns into the fused ops the
//! lowering already consumes (`FusedMatMulBiasAct`, `FusedResidualLN` /
//! `FusedResidualRmsNorm`, `FusedSwiGLU`, `FusedAttentionBlock`,
//! `ElementwiseRegion`).
//!
//! They live here, in rlx-metal, rather than in rlx-ir because their
//! preconditions are the lowering's: which dtypes a fused thunk computes in
//! (regions and the attention block are f32-only, the fused matmul and
//! SwiGLU f32/f16), and the bound sizes of a compile (the attention block
//! fires only for sequences short enough for its score tile, which needs the
//! value of a symbolic `seq` that only [`super::CompileOptions`] knows). The
//! rewrites only read and build `rlx_ir::Graph`s; rlx-ir stays unaware.
//!
//! Every fusion is one file with a [`Fusion::NAME`], a doc comment giving its
//! pattern and preconditions, and reports its matches. A fusion only finds
//! matches ([`Fusion::find`]); [`apply`] rebuilds the graph from them (the
//! graph is append-only, so a rewrite is a fresh graph with node ids
//! renumbered). The fused node takes the place and the name of the pattern's
//! root, so outputs and bindings keep their names; leaves keep their order.

pub mod attention_block;
pub mod matmul_bias_act;
pub mod region;
pub mod residual_norm;
pub mod swiglu;

#[cfg(test)]
mod tests;

use super::error::CompileError;
use crate::passes::PassStat;
use rlx_ir::infer::infer_shape;
use rlx_ir::{Graph, NodeId, Op, Shape};
use std::collections::{HashMap, HashSet};

/// What a fusion sees besides the graph: use lists, outputs and the
/// compile's symbol values.
pub struct FuseContext<'a> {
    /// `users[i]`: the nodes that read node `i` (once per reading node).
    pub users: Vec<Vec<NodeId>>,
    /// Graph outputs.
    pub outputs: HashSet<NodeId>,
    /// Values of symbolic dims for this compile.
    pub dims: &'a HashMap<String, usize>,
    /// `state_backed[i]`: node `i` is a `State` leaf or may alias one (a
    /// view-like op of such a node). Ops may update states in place, so a
    /// fused node, which reads its operands at the root's position rather
    /// than at the absorbed nodes', must not read one ([`run_fusions`]
    /// drops such matches).
    pub state_backed: Vec<bool>,
}

impl<'a> FuseContext<'a> {
    /// Use lists and outputs of `g`.
    pub fn new(g: &Graph, dims: &'a HashMap<String, usize>) -> Self {
        let mut users = vec![Vec::new(); g.len()];
        for (i, n) in g.nodes.iter().enumerate() {
            for &j in &n.inputs {
                if j < users.len() && !users[j].contains(&i) {
                    users[j].push(i);
                }
            }
        }
        let mut state_backed = vec![false; g.len()];
        for (i, n) in g.nodes.iter().enumerate() {
            let aliasing = matches!(
                n.op,
                Op::Reshape { .. }
                    | Op::Narrow { .. }
                    | Op::Cast { .. }
                    | Op::Expand { .. }
                    | Op::Transpose { .. }
                    | Op::ScatterNd
            );
            state_backed[i] = matches!(n.op, Op::State { .. })
                || (aliasing
                    && n.inputs
                        .first()
                        .is_some_and(|&j| state_backed.get(j).copied().unwrap_or(false)));
        }
        FuseContext {
            users,
            outputs: g.outputs.iter().copied().collect(),
            dims,
            state_backed,
        }
    }

    /// True when `r` reads no state-backed node (see
    /// [`FuseContext::state_backed`]).
    pub fn reads_no_state(&self, r: &Rewrite) -> bool {
        r.inputs.iter().all(|o| match o {
            Operand::Node(j) => !self.state_backed.get(*j).copied().unwrap_or(true),
            Operand::Extra(_) => true,
        })
    }

    /// True when node `id` is an intermediate only `consumer` reads: it is
    /// not a graph output and has no other user. A fused op computes such a
    /// value internally, so it may disappear.
    pub fn private_to(&self, id: NodeId, consumer: NodeId) -> bool {
        !self.outputs.contains(&id) && self.users[id] == [consumer]
    }

    /// The value of a dim under this compile's symbol bindings.
    pub fn bound(&self, d: &rlx_ir::Dim) -> Option<usize> {
        match d {
            rlx_ir::Dim::Static(x) => Some(*x),
            rlx_ir::Dim::Sym(s) => self.dims.get(s).copied(),
        }
    }
}

/// An operand of a fused node.
#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    /// An existing node.
    Node(NodeId),
    /// A node created for the rewrite (an index into [`Rewrite::extra`]).
    Extra(usize),
}

/// One match: the node `root` is replaced by `op` applied to `inputs`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rewrite {
    /// The pattern's last node; the fused node takes its place and name.
    pub root: NodeId,
    /// The fused op.
    pub op: Op,
    /// Its operands.
    pub inputs: Vec<Operand>,
    /// Nodes the fused op computes internally: dropped from the graph (the
    /// fusion has checked that nothing outside the pattern reads them).
    pub absorbed: Vec<NodeId>,
    /// Operand-free nodes (constants) created just before the fused node.
    pub extra: Vec<Op>,
}

/// A graph-level fusion.
pub trait Fusion {
    /// Name used by `RLX_DISABLE_PASS` and the report.
    const NAME: &'static str;
    /// Disjoint matches in `g` (no node is the root or absorbed node of two).
    fn find(g: &Graph, cx: &FuseContext) -> Vec<Rewrite>;
}

/// A fusion as the manager stores it.
#[derive(Clone, Copy)]
pub struct FusionEntry {
    /// The fusion's name.
    pub name: &'static str,
    /// Its match finder.
    pub find: fn(&Graph, &FuseContext) -> Vec<Rewrite>,
}

const fn entry<F: Fusion>() -> FusionEntry {
    FusionEntry {
        name: F::NAME,
        find: F::find,
    }
}

/// The fusions, in the order they run: the attention block first (it
/// consumes plain matmuls), matmul epilogues before the residual norms (so a
/// projection's bias add goes to the matmul), regions last (they take what
/// the specific fusions left).
pub const FUSIONS: &[FusionEntry] = &[
    entry::<attention_block::FuseAttentionBlock>(),
    entry::<matmul_bias_act::FuseMatMulBiasAct>(),
    entry::<residual_norm::FuseResidualLayerNorm>(),
    entry::<residual_norm::FuseResidualRmsNormIr>(),
    entry::<swiglu::FuseSwiGlu>(),
    entry::<region::FuseElementwiseRegion>(),
];

/// The names of every graph fusion, in order.
pub fn fusion_names() -> Vec<&'static str> {
    FUSIONS.iter().map(|f| f.name).collect()
}

/// True when `op` applied to operands of `shapes` infers exactly `want`
/// (dims and dtype): the fused op supports the pattern's shapes.
pub fn infers_to(op: &Op, shapes: &[&Shape], want: &Shape) -> bool {
    matches!(infer_shape(op, shapes), Ok(s) if s == *want)
}

/// Rebuild `g` with `rewrites` applied (see [`Rewrite`]). Fails, naming the
/// fusion, if the matches overlap or a dropped node is still read — a bug
/// in the fusion, reported rather than miscompiled.
pub fn apply(g: &Graph, rewrites: &[Rewrite], fusion: &str) -> Result<Graph, CompileError> {
    apply_mapped(g, rewrites, fusion).map(|(out, _)| out)
}

/// [`apply`], also returning for every node of `g` its node in the rebuilt
/// graph (`None` for an absorbed node; a match's root maps to the fused node).
fn apply_mapped(
    g: &Graph,
    rewrites: &[Rewrite],
    fusion: &str,
) -> Result<(Graph, NodeMap), CompileError> {
    let bug = |msg: String| CompileError::Fusion {
        pass: fusion.to_string(),
        msg,
    };
    let mut at_root: HashMap<NodeId, &Rewrite> = HashMap::new();
    let mut dropped: HashSet<NodeId> = HashSet::new();
    for r in rewrites {
        if at_root.insert(r.root, r).is_some() || dropped.contains(&r.root) {
            return Err(bug(format!("node {} is matched twice", r.root)));
        }
        for &a in &r.absorbed {
            if a >= r.root || !dropped.insert(a) || at_root.contains_key(&a) {
                return Err(bug(format!("node {a} is absorbed twice or after its root")));
            }
        }
    }
    if let Some(r) = at_root.keys().find(|r| dropped.contains(r)) {
        return Err(bug(format!("node {r} is both a root and absorbed")));
    }
    let mut out = Graph::new(g.name.clone());
    let mut map: Vec<Option<NodeId>> = vec![None; g.len()];
    let get = |map: &[Option<NodeId>], id: NodeId| {
        map.get(id)
            .copied()
            .flatten()
            .ok_or_else(|| bug(format!("node {id} is read after being fused away")))
    };
    for (i, n) in g.nodes.iter().enumerate() {
        if dropped.contains(&i) {
            continue;
        }
        if let Some(r) = at_root.get(&i) {
            let mut extra = Vec::with_capacity(r.extra.len());
            for (k, op) in r.extra.iter().enumerate() {
                extra.push(out.add(op.clone(), &[], &format!("{}.fuse{k}", n.name))?);
            }
            let mut ins = Vec::with_capacity(r.inputs.len());
            for o in &r.inputs {
                ins.push(match o {
                    Operand::Node(j) => get(&map, *j)?,
                    Operand::Extra(k) => *extra
                        .get(*k)
                        .ok_or_else(|| bug(format!("extra operand {k} does not exist")))?,
                });
            }
            let id = out.add(r.op.clone(), &ins, &n.name)?;
            if out.nodes[id].shape != n.shape {
                return Err(bug(format!(
                    "fused {} infers {} where node {i} '{}' had {}",
                    r.op.name(),
                    out.nodes[id].shape,
                    n.name,
                    n.shape
                )));
            }
            map[i] = Some(id);
        } else {
            let ins = n
                .inputs
                .iter()
                .map(|&j| get(&map, j))
                .collect::<Result<Vec<_>, _>>()?;
            // keep the node as it was (shape included): re-inference would
            // give the same answer, and custom ops carry their own shape
            out.nodes.push(rlx_ir::Node {
                op: n.op.clone(),
                inputs: ins,
                shape: n.shape.clone(),
                name: n.name.clone(),
            });
            map[i] = Some(out.nodes.len() - 1);
        }
    }
    let outs = g
        .outputs
        .iter()
        .map(|&o| get(&map, o))
        .collect::<Result<Vec<_>, _>>()?;
    out.set_outputs(&outs)?;
    Ok((out, map))
}

/// Run every fusion of [`FUSIONS`] not named in `disabled`, in order, and
/// return the rewritten graph with one [`PassStat`] per fusion (node counts
/// in `thunks_before` / `thunks_after`).
pub fn run_fusions(
    graph: &Graph,
    dims: &HashMap<String, usize>,
    disabled: &[String],
) -> Result<(Graph, Vec<PassStat>), CompileError> {
    run_fusions_mapped(graph, dims, disabled).map(|(g, stats, _)| (g, stats))
}

/// Per node of a graph, the node of the rewritten graph that holds its
/// value (`None` for a node absorbed into a fused node).
pub type NodeMap = Vec<Option<NodeId>>;

/// [`run_fusions`], also returning the [`NodeMap`] of `graph` into the
/// rewritten graph.
pub fn run_fusions_mapped(
    graph: &Graph,
    dims: &HashMap<String, usize>,
    disabled: &[String],
) -> Result<(Graph, Vec<PassStat>, NodeMap), CompileError> {
    let mut g = graph.clone();
    let mut node_map: NodeMap = (0..graph.len()).map(Some).collect();
    let mut stats = Vec::with_capacity(FUSIONS.len());
    for f in FUSIONS {
        let before = g.len();
        let enabled = !disabled.iter().any(|d| d == f.name);
        let mut matches = 0;
        if enabled {
            let cx = FuseContext::new(&g, dims);
            let mut rewrites = (f.find)(&g, &cx);
            rewrites.retain(|r| cx.reads_no_state(r));
            matches = rewrites.len();
            if matches > 0 {
                let (next, map) = apply_mapped(&g, &rewrites, f.name)?;
                g = next;
                for m in node_map.iter_mut() {
                    *m = m.and_then(|j| map.get(j).copied().flatten());
                }
            }
        }
        stats.push(PassStat {
            name: f.name.to_string(),
            enabled,
            matches,
            thunks_before: before,
            thunks_after: g.len(),
        });
    }
    Ok((g, stats, node_map))
}
