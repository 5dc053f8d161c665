//! The graph: an append-only list of nodes in topological order, built
//! through [`Graph::add`], which infers and checks every node's shape.

use crate::error::{IrError, Result};
use crate::infer::infer_shape;
use crate::op::Op;
use crate::shape::Shape;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Index of a node in its graph.
pub type NodeId = usize;

/// One node: an op applied to earlier nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// The operation.
    pub op: Op,
    /// Operand node ids (all smaller than this node's id).
    pub inputs: Vec<NodeId>,
    /// Result shape (inferred when the node was added).
    pub shape: Shape,
    /// A readable name (`blk.3.attn_q`); unique names are not required.
    pub name: String,
}

/// A computation graph.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Graph {
    /// Graph name.
    pub name: String,
    /// Nodes in insertion (= topological) order.
    pub nodes: Vec<Node>,
    /// Nodes whose values the caller wants back.
    pub outputs: Vec<NodeId>,
}

impl Graph {
    /// An empty graph.
    pub fn new(name: impl Into<String>) -> Self {
        Graph {
            name: name.into(),
            nodes: Vec::new(),
            outputs: Vec::new(),
        }
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node `id`, or an error naming `op`.
    pub fn node_checked(&self, op: &str, id: NodeId) -> Result<&Node> {
        self.nodes.get(id).ok_or_else(|| IrError::UnknownNode {
            op: op.to_string(),
            id,
            len: self.nodes.len(),
        })
    }

    /// The node `id` (panics if absent: use with ids this graph returned).
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id]
    }

    /// The shape of node `id`.
    pub fn shape(&self, id: NodeId) -> &Shape {
        &self.nodes[id].shape
    }

    /// Append `op` applied to `inputs`, inferring and checking its shape.
    /// An empty `name` gets `<op>_<id>`.
    pub fn add(&mut self, op: Op, inputs: &[NodeId], name: &str) -> Result<NodeId> {
        let op_name = op.name();
        let mut shapes = Vec::with_capacity(inputs.len());
        for &i in inputs {
            shapes.push(&self.node_checked(op_name, i)?.shape);
        }
        let shape = infer_shape(&op, &shapes)?;
        let id = self.nodes.len();
        let name = if name.is_empty() {
            format!("{op_name}_{id}")
        } else {
            name.to_string()
        };
        shape.check_bytes(op_name, &format!("'{name}'"), &|_| None)?;
        if op.is_leaf() && !matches!(op, Op::Constant { .. }) {
            if let Some(other) = self.nodes.iter().find(|n| {
                n.name == name && std::mem::discriminant(&n.op) == std::mem::discriminant(&op)
            }) {
                return Err(IrError::attr(
                    op_name,
                    format!(
                        "duplicate {op_name} name '{name}' (already {}): every {op_name} \
                         needs its own name, it is how values are fed and bound",
                        other.shape
                    ),
                ));
            }
        }
        self.nodes.push(Node {
            op,
            inputs: inputs.to_vec(),
            shape,
            name,
        });
        Ok(id)
    }

    /// Declare the graph's outputs (replacing any earlier declaration).
    pub fn set_outputs(&mut self, ids: &[NodeId]) -> Result<()> {
        for &i in ids {
            self.node_checked("outputs", i)?;
        }
        self.outputs = ids.to_vec();
        Ok(())
    }

    /// Serialise to JSON.
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string(self).map_err(|e| IrError::Serde(e.to_string()))
    }

    /// Deserialise from JSON and verify.
    pub fn from_json(s: &str) -> Result<Graph> {
        let g: Graph = serde_json::from_str(s).map_err(|e| IrError::Serde(e.to_string()))?;
        crate::verify::verify(&g)?;
        Ok(g)
    }
}

impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "graph {} ({} nodes)", self.name, self.nodes.len())?;
        for (i, n) in self.nodes.iter().enumerate() {
            let args: Vec<String> = n.inputs.iter().map(|j| format!("%{j}")).collect();
            let mark = if self.outputs.contains(&i) {
                " -> out"
            } else {
                ""
            };
            writeln!(
                f,
                "  %{i} = {}({}) : {}  # {}{mark}",
                n.op.name(),
                args.join(", "),
                n.shape,
                n.name
            )?;
        }
        Ok(())
    }
}
