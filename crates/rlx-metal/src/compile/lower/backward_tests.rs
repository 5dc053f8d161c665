//! Lowering of the gradient ops: the thunk sequences around the seed's
//! gradient thunks (GQA, custom masks, transposed cumsum / interleaved
//! RoPE) and the errors for configurations the thunks cannot express.

use crate::compile::lower::{lower, CompileOptions};
use crate::thunk::Thunk;
use rlx_ir::op::ScanLoop;
use rlx_ir::op::{AttnLayout, BinaryOp, MaskKind, RopeKind, Wrt};
use rlx_ir::{DType, Graph, NodeId, Op, Shape};

fn input(g: &mut Graph, d: &[usize]) -> NodeId {
    let op = Op::Input {
        shape: Shape::of(d, DType::F32),
    };
    g.add(op, &[], "").unwrap()
}

fn names(g: &Graph) -> Vec<&'static str> {
    let c = lower(g, &CompileOptions::default()).unwrap();
    c.schedule.thunks.iter().map(|t| t.name()).collect()
}

fn attention(wrt: Wrt, mask: MaskKind) -> Graph {
    let mut g = Graph::new("t");
    let q = input(&mut g, &[1, 5, 12]);
    let k = input(&mut g, &[1, 7, 6]);
    let v = input(&mut g, &[1, 7, 6]);
    let dy = input(&mut g, &[1, 5, 12]);
    let mut ins = vec![q, k, v, dy];
    if mask == MaskKind::Custom {
        ins.push(input(&mut g, &[5, 7]));
    }
    let op = Op::AttentionBackward {
        wrt,
        heads: 4,
        head_dim: 3,
        mask,
        window: 0,
        layout: AttnLayout::Bshd,
    };
    let o = g.add(op, &ins, "o").unwrap();
    g.set_outputs(&[o]).unwrap();
    g
}

#[test]
fn gqa_attention_expands_kv_and_sums_the_groups() {
    // 4 query heads over 2 kv heads: k and v broadcast to 4 heads
    let q = names(&attention(Wrt::Q, MaskKind::Causal));
    assert_eq!(q, ["binary_broadcast", "binary_broadcast", "attention_bwd"]);
    // the k gradient of the 4 heads is summed back per kv head
    let k = names(&attention(Wrt::K, MaskKind::Causal));
    assert_eq!(
        k,
        [
            "binary_broadcast",
            "binary_broadcast",
            "attention_bwd",
            "reduce"
        ]
    );
    // a binary mask becomes the additive bias [b, heads, s, kv] (kind 3)
    let g = attention(Wrt::V, MaskKind::Custom);
    let c = lower(&g, &CompileOptions::default()).unwrap();
    let bwd = c.schedule.thunks.iter().find_map(|t| match t {
        Thunk::AttentionBackward(a) => Some(a.clone()),
        _ => None,
    });
    assert_eq!(bwd.map(|a| a.mask_kind), Some(3));
    assert!(c.schedule.thunks.iter().any(|t| t.name() == "where"));
}

#[test]
fn cumsum_and_interleaved_rope_run_between_transposes() {
    let mut g = Graph::new("t");
    let x = input(&mut g, &[3, 4, 5]);
    let op = Op::CumsumBackward {
        axis: 1,
        exclusive: true,
    };
    let c = g.add(op, &[x], "c").unwrap();
    g.set_outputs(&[c]).unwrap();
    assert_eq!(names(&g), ["transpose", "cumsum_backward", "transpose"]);

    let mut g = Graph::new("t");
    let dy = input(&mut g, &[2, 3, 12]);
    let (cos, sin) = (input(&mut g, &[3, 3]), input(&mut g, &[3, 3]));
    let op = Op::RopeBackward {
        kind: RopeKind::Interleaved,
        head_dim: 6,
        n_rot: 6,
    };
    let r = g.add(op, &[dy, cos, sin], "r").unwrap();
    g.set_outputs(&[r]).unwrap();
    assert_eq!(names(&g), ["transpose", "rope_backward", "transpose"]);
}

#[test]
fn partial_interleaved_rope_is_a_bad_param() {
    let mut g = Graph::new("t");
    let dy = input(&mut g, &[2, 3, 12]);
    let (cos, sin) = (input(&mut g, &[3, 2]), input(&mut g, &[3, 2]));
    let op = Op::RopeBackward {
        kind: RopeKind::Interleaved,
        head_dim: 6,
        n_rot: 4,
    };
    let r = g.add(op, &[dy, cos, sin], "r").unwrap();
    g.set_outputs(&[r]).unwrap();
    let e = lower(&g, &CompileOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("[rope_backward] unsupported kind"), "{e}");
}

#[test]
fn scan_backward_is_a_host_op() {
    let mut body = Graph::new("body");
    let c = input(&mut body, &[4]);
    let x = input(&mut body, &[4]);
    let s = body
        .add(
            Op::Binary {
                kind: BinaryOp::Add,
            },
            &[c, x],
            "s",
        )
        .unwrap();
    body.set_outputs(&[s, s]).unwrap();
    let mut g = Graph::new("t");
    let c0 = input(&mut g, &[4]);
    let xs = input(&mut g, &[3, 4]);
    let dy = input(&mut g, &[3, 4]);
    let op = Op::ScanBackward {
        scan: ScanLoop {
            body: Box::new(body),
            num_carry: 1,
            length: 3,
        },
        wrt_xs: true,
    };
    let o = g.add(op, &[c0, xs, dy], "o").unwrap();
    g.set_outputs(&[o]).unwrap();
    assert_eq!(names(&g), ["host_op"]);
}
