//! The graph verifier: re-checks a whole graph, typically one read from JSON
//! or built by hand rather than through [`Graph::add`].
//!
//! For every node, in order:
//! * every input names a strictly earlier node, so insertion order is a
//!   topological order and no cycle can exist (a cycle needs a forward edge);
//! * leaves have no inputs;
//! * shape inference re-run on the inputs' stored shapes succeeds and gives
//!   exactly the stored (declared) shape; for `Scan` / `ScanBackward` this
//!   verifies the body graph recursively (see `infer::sequence`);
//! * op-specific structural rules that shapes alone cannot express (the
//!   state operand of `GatedDeltaNet`, and the optional 6th state operand of
//!   `SelectiveScan` / `Mamba2`, must be a `State` leaf, since the op
//!   updates it in place).
//!
//! Then every declared output must name a node. An empty output list is
//! allowed by [`verify`] (scratch graphs, bodies under construction);
//! [`verify_strict`] additionally requires at least one output.
//!
//! Errors are [`IrError::Verify`] naming the offending node's index and op.

use crate::error::{IrError, Result};
use crate::graph::Graph;
use crate::infer::infer_shape;
use crate::op::Op;

/// Check a graph; the first problem found is returned.
pub fn verify(g: &Graph) -> Result<()> {
    for (i, node) in g.nodes.iter().enumerate() {
        let fail = |msg: String| IrError::Verify {
            node: i,
            op: node.op.name().to_string(),
            msg,
        };
        if node.op.is_leaf() && !node.inputs.is_empty() {
            return Err(fail(format!(
                "leaf has {} input(s); leaves take none",
                node.inputs.len()
            )));
        }
        let mut shapes = Vec::with_capacity(node.inputs.len());
        for &j in &node.inputs {
            if j >= i {
                let kind = if j == i {
                    "itself (a self-loop)"
                } else if j < g.nodes.len() {
                    "a later node (forward edge: cycle or bad order)"
                } else {
                    "no node (out of range)"
                };
                return Err(fail(format!("input %{j} refers to {kind}")));
            }
            shapes.push(&g.nodes[j].shape);
        }
        let inferred = infer_shape(&node.op, &shapes)
            .map_err(|e| fail(format!("shape inference failed: {e}")))?;
        if inferred != node.shape {
            return Err(fail(format!(
                "declared shape {} but inference gives {inferred}",
                node.shape
            )));
        }
        node.shape
            .check_bytes(node.op.name(), &format!("'{}'", node.name), &|_| None)
            .map_err(|e| fail(e.to_string()))?;
        if node.op.is_leaf() && !matches!(node.op, Op::Constant { .. }) {
            let kind = std::mem::discriminant(&node.op);
            if g.nodes[..i]
                .iter()
                .any(|n| n.name == node.name && std::mem::discriminant(&n.op) == kind)
            {
                return Err(fail(format!(
                    "duplicate {} name '{}'",
                    node.op.name(),
                    node.name
                )));
            }
        }
        let in_place_state = match node.op {
            Op::GatedDeltaNet { .. } => true,
            Op::SelectiveScan | Op::Mamba2 { .. } => node.inputs.len() == 6,
            _ => false,
        };
        if in_place_state {
            let state = node.inputs.last().and_then(|&j| g.nodes.get(j));
            if !matches!(state.map(|n| &n.op), Some(Op::State { .. })) {
                return Err(fail(
                    "the state operand (last) must be a State leaf: it is updated in place".into(),
                ));
            }
        }
    }
    for &o in &g.outputs {
        if o >= g.nodes.len() {
            return Err(IrError::Verify {
                node: o,
                op: "output".into(),
                msg: format!("output %{o} out of range ({} nodes)", g.nodes.len()),
            });
        }
    }
    Ok(())
}

/// [`verify`], and the graph must declare at least one output (what a
/// compiled graph needs: otherwise nothing it computes is observable).
pub fn verify_strict(g: &Graph) -> Result<()> {
    verify(g)?;
    if g.outputs.is_empty() {
        return Err(IrError::Verify {
            node: g.nodes.len().saturating_sub(1),
            op: "output".into(),
            msg: "graph declares no outputs".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::op::{Op, ReduceOp, Window};
    use crate::shape::Shape;

    #[test]
    fn duplicate_leaf_names_are_refused() {
        let f = Shape::of(&[4], DType::F32);
        let mut g = Graph::new("d");
        g.add(Op::Input { shape: f.clone() }, &[], "a").unwrap();
        // another kind may reuse the name (inputs and params are fed apart)
        g.add(Op::Param { shape: f.clone() }, &[], "a").unwrap();
        let e = g
            .add(Op::Input { shape: f.clone() }, &[], "a")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("[input] duplicate input name 'a'"), "{e}");
        // a deserialised graph is checked by the verifier
        let mut bad = g.clone();
        bad.nodes.push(bad.nodes[1].clone());
        let e = verify(&bad).unwrap_err().to_string();
        assert!(e.contains("duplicate param name 'a'"), "{e}");
    }

    /// x [1, 2, 8, 8] → pool → pool, output the last.
    fn sample() -> Graph {
        let mut g = Graph::new("t");
        let x = g
            .add(
                Op::Input {
                    shape: Shape::of(&[1, 2, 8, 8], DType::F32),
                },
                &[],
                "x",
            )
            .unwrap();
        let pool = Op::Pool2d {
            win: Window {
                kernel: [2, 2],
                stride: [2, 2],
                padding: [0, 0],
            },
            kind: ReduceOp::Max,
        };
        let a = g.add(pool.clone(), &[x], "a").unwrap();
        let b = g.add(pool, &[a], "b").unwrap();
        g.set_outputs(&[b]).unwrap();
        g
    }

    fn rejected(g: &Graph, node: usize, needle: &str) {
        let e = verify(g).expect_err("corrupt graph accepted").to_string();
        assert!(e.starts_with("[verify]"), "{e}");
        assert!(e.contains(&format!("node {node} ")), "{e}");
        assert!(e.contains(needle), "{e}");
    }

    #[test]
    fn valid_graph_passes_and_round_trips() {
        let g = sample();
        verify(&g).unwrap();
        verify_strict(&g).unwrap();
        assert_eq!(g.shape(2), &Shape::of(&[1, 2, 2, 2], DType::F32));
        let back = Graph::from_json(&g.to_json().unwrap()).unwrap();
        assert_eq!(back, g);
    }

    #[test]
    fn forward_reference_rejected() {
        let mut g = sample();
        g.nodes[1].inputs = vec![2];
        rejected(&g, 1, "later node");
    }

    #[test]
    fn self_loop_and_out_of_range_input_rejected() {
        let mut g = sample();
        g.nodes[1].inputs = vec![1];
        rejected(&g, 1, "self-loop");
        let mut g = sample();
        g.nodes[2].inputs = vec![9];
        rejected(&g, 2, "out of range");
    }

    #[test]
    fn cycle_via_forward_edge_rejected() {
        // 1 reads 2 and 2 reads 1: the edge 1 → 2 points forward.
        let mut g = sample();
        g.nodes[1].inputs = vec![2];
        g.nodes[2].inputs = vec![1];
        rejected(&g, 1, "forward edge");
    }

    #[test]
    fn wrong_stored_shape_rejected() {
        let mut g = sample();
        g.nodes[2].shape = Shape::of(&[1, 2, 3, 3], DType::F32);
        rejected(&g, 2, "declared shape f32[1, 2, 3, 3]");
        let mut g = sample();
        g.nodes[1].shape = Shape::of(&[1, 2, 4, 4], DType::F16);
        // Node 2 infers from node 1's (wrong) stored shape, but node 1 is
        // reported first.
        rejected(&g, 1, "inference gives f32[1, 2, 4, 4]");
    }

    #[test]
    fn bad_arity_rejected() {
        let mut g = sample();
        g.nodes[2].inputs = vec![0, 1];
        rejected(&g, 2, "[pool2d] expects 1 input(s), got 2");
        let mut g = sample();
        g.nodes[0].inputs = vec![0];
        rejected(&g, 0, "leaf has 1 input");
    }

    #[test]
    fn output_out_of_range_rejected() {
        let mut g = sample();
        g.outputs = vec![2, 7];
        rejected(&g, 7, "output %7 out of range");
        let mut g = sample();
        g.outputs.clear();
        verify(&g).unwrap();
        let e = verify_strict(&g).unwrap_err().to_string();
        assert!(e.starts_with("[verify]") && e.contains("no outputs"), "{e}");
    }

    #[test]
    fn from_json_rejects_corruption() {
        let mut g = sample();
        g.nodes[1].inputs = vec![2];
        let e = Graph::from_json(&g.to_json().unwrap()).unwrap_err();
        assert!(matches!(e, IrError::Verify { node: 1, .. }), "{e}");
    }

    #[test]
    fn scan_state_must_be_a_state_leaf() {
        let f = |d: &[usize]| Shape::of(d, DType::F32);
        for state_leaf in [true, false] {
            let mut g = Graph::new("ss");
            let mut ins = Vec::new();
            for (name, d) in [
                ("x", [1, 3, 4].as_slice()),
                ("dt", &[1, 3, 4]),
                ("a", &[4, 2]),
                ("b", &[1, 3, 2]),
                ("c", &[1, 3, 2]),
            ] {
                ins.push(g.add(Op::Input { shape: f(d) }, &[], name).unwrap());
            }
            let st = if state_leaf {
                Op::State {
                    shape: f(&[1, 4, 2]),
                }
            } else {
                Op::Input {
                    shape: f(&[1, 4, 2]),
                }
            };
            ins.push(g.add(st, &[], "h").unwrap());
            let y = g.add(Op::SelectiveScan, &ins, "y").unwrap();
            g.set_outputs(&[y]).unwrap();
            if state_leaf {
                verify(&g).unwrap();
            } else {
                rejected(&g, y, "must be a State leaf");
            }
            // without the state operand no State leaf is needed
            let mut g2 = Graph::new("ss0");
            let ids: Vec<usize> = (0..5)
                .map(|i| {
                    g2.add(g.nodes[i].op.clone(), &[], &format!("v{i}"))
                        .unwrap()
                })
                .collect();
            let y = g2.add(Op::SelectiveScan, &ids, "y").unwrap();
            g2.set_outputs(&[y]).unwrap();
            verify(&g2).unwrap();
        }
    }
}
