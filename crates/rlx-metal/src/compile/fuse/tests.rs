//! Graph-fusion tests: op kinds before → after for each fusion, and the
//! cases where it must not fire (intermediate read elsewhere or a graph
//! output, dtype mismatch, shapes the fused op does not take).

use super::*;
use rlx_ir::op::{Activation, AttnLayout, BinaryOp, MaskKind, RopeKind};
use rlx_ir::{DType, Dim};

fn shape(d: &[usize], dt: DType) -> Shape {
    Shape::of(d, dt)
}

fn leaf(g: &mut Graph, name: &str, d: &[usize], dt: DType) -> NodeId {
    g.add(
        Op::Input {
            shape: shape(d, dt),
        },
        &[],
        name,
    )
    .unwrap()
}

fn x32(g: &mut Graph, name: &str, d: &[usize]) -> NodeId {
    leaf(g, name, d, DType::F32)
}

fn bin(g: &mut Graph, kind: BinaryOp, a: NodeId, b: NodeId) -> NodeId {
    g.add(Op::Binary { kind }, &[a, b], "").unwrap()
}

fn act(g: &mut Graph, kind: Activation, a: NodeId) -> NodeId {
    g.add(Op::Activation { kind }, &[a], "").unwrap()
}

fn add(g: &mut Graph, a: NodeId, b: NodeId) -> NodeId {
    bin(g, BinaryOp::Add, a, b)
}

/// Run one fusion; return the rewritten graph and its match count.
fn run<F: Fusion>(g: &Graph) -> (Graph, usize) {
    run_with::<F>(g, &HashMap::new())
}

fn run_with<F: Fusion>(g: &Graph, dims: &HashMap<String, usize>) -> (Graph, usize) {
    let cx = FuseContext::new(g, dims);
    let rw = F::find(g, &cx);
    let out = apply(g, &rw, F::NAME).unwrap();
    rlx_ir::verify::verify(&out).unwrap();
    (out, rw.len())
}

/// Op names of the non-leaf nodes.
fn kinds(g: &Graph) -> Vec<&'static str> {
    g.nodes
        .iter()
        .filter(|n| !n.inputs.is_empty())
        .map(|n| n.op.name())
        .collect()
}

// ------------------------------------------------------------------ matmul

fn mm_graph(bias_dims: &[usize], bias_dt: DType) -> (Graph, NodeId, NodeId, NodeId) {
    let mut g = Graph::new("mm");
    let a = x32(&mut g, "a", &[3, 4]);
    let w = x32(&mut g, "w", &[4, 5]);
    let b = leaf(&mut g, "b", bias_dims, bias_dt);
    let m = g.add(Op::MatMul, &[a, w], "m").unwrap();
    let t = add(&mut g, b, m);
    let y = act(&mut g, Activation::Gelu, t);
    g.set_outputs(&[y]).unwrap();
    (g, m, t, y)
}

#[test]
fn matmul_bias_act_fires() {
    let (g, _, _, y) = mm_graph(&[5], DType::F32);
    let (out, n) = run::<matmul_bias_act::FuseMatMulBiasAct>(&g);
    assert_eq!(n, 1);
    assert_eq!(kinds(&out), ["fused_mat_mul_bias_act"]);
    let root = out.outputs[0];
    assert_eq!(
        out.nodes[root].name, g.nodes[y].name,
        "the root's name is kept"
    );
    assert_eq!(
        out.nodes[root].op,
        Op::FusedMatMulBiasAct {
            act: Some(Activation::Gelu)
        }
    );
    // operands: a, w, bias in that order
    let names: Vec<&str> = out.nodes[root]
        .inputs
        .iter()
        .map(|&i| out.nodes[i].name.as_str())
        .collect();
    assert_eq!(names, ["a", "w", "b"]);
}

#[test]
fn matmul_bias_without_act_and_act_without_bias() {
    let mut g = Graph::new("mm");
    let a = x32(&mut g, "a", &[2, 3, 4]);
    let w = x32(&mut g, "w", &[4, 6]);
    let b = x32(&mut g, "b", &[6]);
    let m1 = g.add(Op::MatMul, &[a, w], "").unwrap();
    let y1 = add(&mut g, m1, b);
    let m2 = g.add(Op::MatMul, &[a, w], "").unwrap();
    let y2 = act(&mut g, Activation::Relu, m2);
    g.set_outputs(&[y1, y2]).unwrap();
    let (out, n) = run::<matmul_bias_act::FuseMatMulBiasAct>(&g);
    assert_eq!(n, 2);
    assert_eq!(
        kinds(&out),
        ["fused_mat_mul_bias_act", "fused_mat_mul_bias_act"]
    );
    // the bias-free form got a zero constant bias [6]
    let consts: Vec<_> = out
        .nodes
        .iter()
        .filter(|n| matches!(n.op, Op::Constant { .. }))
        .collect();
    assert_eq!(consts.len(), 1);
    assert_eq!(consts[0].shape, shape(&[6], DType::F32));
}

#[test]
fn matmul_must_not_fire() {
    // matmul read elsewhere
    let (mut g, m, _, y) = mm_graph(&[5], DType::F32);
    let extra = act(&mut g, Activation::Neg, m);
    g.set_outputs(&[y, extra]).unwrap();
    assert_eq!(run::<matmul_bias_act::FuseMatMulBiasAct>(&g).1, 0);
    // the bias add is an output: the add alone fuses, the activation stays
    let (mut g, _, t, y) = mm_graph(&[5], DType::F32);
    g.set_outputs(&[y, t]).unwrap();
    let (out, n) = run::<matmul_bias_act::FuseMatMulBiasAct>(&g);
    assert_eq!(n, 1);
    assert_eq!(kinds(&out), ["fused_mat_mul_bias_act", "activation"]);
    assert_eq!(
        out.nodes[out.outputs[1]].op,
        Op::FusedMatMulBiasAct { act: None }
    );
    // dtype mismatch: f16 bias on an f32 matmul
    let (g, ..) = mm_graph(&[5], DType::F16);
    assert_eq!(run::<matmul_bias_act::FuseMatMulBiasAct>(&g).1, 0);
    // bias that is not [n]: [1, 5] and [3, 5]
    for d in [&[1usize, 5][..], &[3, 5]] {
        let (g, ..) = mm_graph(d, DType::F32);
        assert_eq!(run::<matmul_bias_act::FuseMatMulBiasAct>(&g).1, 0, "{d:?}");
    }
    // batched weight
    let mut g = Graph::new("bmm");
    let a = x32(&mut g, "a", &[2, 3, 4]);
    let w = x32(&mut g, "w", &[2, 4, 5]);
    let b = x32(&mut g, "b", &[5]);
    let m = g.add(Op::MatMul, &[a, w], "").unwrap();
    let y = add(&mut g, m, b);
    g.set_outputs(&[y]).unwrap();
    assert_eq!(run::<matmul_bias_act::FuseMatMulBiasAct>(&g).1, 0);
    // integer matmul
    let mut g = Graph::new("imm");
    let a = leaf(&mut g, "a", &[3, 4], DType::I32);
    let w = leaf(&mut g, "w", &[4, 5], DType::I32);
    let b = leaf(&mut g, "b", &[5], DType::I32);
    let m = g.add(Op::MatMul, &[a, w], "").unwrap();
    let y = add(&mut g, m, b);
    g.set_outputs(&[y]).unwrap();
    assert_eq!(run::<matmul_bias_act::FuseMatMulBiasAct>(&g).1, 0);
}

// -------------------------------------------------------------- residual

fn res_graph(layer: bool, res_dims: &[usize], dt: DType) -> (Graph, NodeId) {
    let mut g = Graph::new("res");
    let x = leaf(&mut g, "x", &[4, 8], dt);
    let r = leaf(&mut g, "r", res_dims, dt);
    let gamma = x32(&mut g, "gamma", &[8]);
    let beta = x32(&mut g, "beta", &[8]);
    let s = add(&mut g, x, r);
    let n = if layer {
        g.add(Op::LayerNorm { eps: 1e-5 }, &[s, gamma, beta], "n")
    } else {
        g.add(Op::RmsNorm { eps: 1e-6 }, &[s, gamma], "n")
    }
    .unwrap();
    g.set_outputs(&[n]).unwrap();
    (g, s)
}

#[test]
fn residual_norms_fire() {
    let (g, _) = res_graph(true, &[4, 8], DType::F32);
    let (out, n) = run::<residual_norm::FuseResidualLayerNorm>(&g);
    assert_eq!((n, kinds(&out)), (1, vec!["fused_residual_ln"]));
    // the LN fusion leaves RMSNorm alone and vice versa
    assert_eq!(run::<residual_norm::FuseResidualRmsNormIr>(&g).1, 0);
    let (g, _) = res_graph(false, &[4, 8], DType::F16);
    let (out, n) = run::<residual_norm::FuseResidualRmsNormIr>(&g);
    assert_eq!((n, kinds(&out)), (1, vec!["fused_residual_rms_norm"]));
    assert_eq!(
        out.nodes[out.outputs[0]].op,
        Op::FusedResidualRmsNorm {
            eps: 1e-6,
            has_bias: false
        }
    );
}

#[test]
fn residual_with_bias() {
    let mut g = Graph::new("resb");
    let x = x32(&mut g, "x", &[4, 8]);
    let r = x32(&mut g, "r", &[4, 8]);
    let b = x32(&mut g, "b", &[8]);
    let gamma = x32(&mut g, "gamma", &[8]);
    let beta = x32(&mut g, "beta", &[8]);
    let xb = add(&mut g, b, x);
    let s = add(&mut g, r, xb);
    let n = g
        .add(Op::LayerNorm { eps: 1e-5 }, &[s, gamma, beta], "n")
        .unwrap();
    g.set_outputs(&[n]).unwrap();
    let (out, m) = run::<residual_norm::FuseResidualLayerNorm>(&g);
    assert_eq!((m, kinds(&out)), (1, vec!["fused_residual_ln"]));
    let root = &out.nodes[out.outputs[0]];
    let names: Vec<&str> = root
        .inputs
        .iter()
        .map(|&i| out.nodes[i].name.as_str())
        .collect();
    assert_eq!(names, ["x", "r", "b", "gamma", "beta"]);
}

#[test]
fn residual_must_not_fire() {
    type Ln = residual_norm::FuseResidualLayerNorm;
    // the sum is read again (pre-norm transformer: h + mlp(norm(h)))
    let (mut g, s) = res_graph(true, &[4, 8], DType::F32);
    let n = g.outputs[0];
    let h2 = add(&mut g, s, n);
    g.set_outputs(&[h2]).unwrap();
    assert_eq!(run::<Ln>(&g).1, 0);
    // the sum is a graph output
    let (mut g, s) = res_graph(true, &[4, 8], DType::F32);
    let n = g.outputs[0];
    g.set_outputs(&[n, s]).unwrap();
    assert_eq!(run::<Ln>(&g).1, 0);
    // broadcast residual: the fused op needs res == x
    let (g, _) = res_graph(true, &[1, 8], DType::F32);
    assert_eq!(run::<Ln>(&g).1, 0);
    // integer sum cast up? no: a bf16 residual stream is not a fused dtype
    let (g, _) = res_graph(true, &[4, 8], DType::BF16);
    assert_eq!(run::<Ln>(&g).1, 0);
    // mixed dtypes: f16 + f32 residual
    let mut g = Graph::new("mixed");
    let x = leaf(&mut g, "x", &[4, 8], DType::F16);
    let r = x32(&mut g, "r", &[4, 8]);
    let gamma = x32(&mut g, "gamma", &[8]);
    let s = add(&mut g, x, r);
    let n = g.add(Op::RmsNorm { eps: 1e-6 }, &[s, gamma], "").unwrap();
    g.set_outputs(&[n]).unwrap();
    assert_eq!(run::<residual_norm::FuseResidualRmsNormIr>(&g).1, 0);
}

// ---------------------------------------------------------------- swiglu

fn swiglu_graph(starts: (usize, usize), len: usize, dt: DType) -> (Graph, NodeId) {
    let mut g = Graph::new("swiglu");
    let x = leaf(&mut g, "x", &[3, 16], dt);
    let gate = g
        .add(
            Op::Narrow {
                axis: -1,
                start: starts.0,
                len,
            },
            &[x],
            "",
        )
        .unwrap();
    let up = g
        .add(
            Op::Narrow {
                axis: 1,
                start: starts.1,
                len,
            },
            &[x],
            "",
        )
        .unwrap();
    let s = act(&mut g, Activation::Silu, gate);
    let y = bin(&mut g, BinaryOp::Mul, up, s);
    g.set_outputs(&[y]).unwrap();
    (g, s)
}

#[test]
fn swiglu_fires() {
    for (starts, gate_first) in [((0, 8), true), ((8, 0), false)] {
        let (g, _) = swiglu_graph(starts, 8, DType::F32);
        let (out, n) = run::<swiglu::FuseSwiGlu>(&g);
        assert_eq!((n, kinds(&out)), (1, vec!["fused_swiglu"]));
        assert_eq!(out.nodes[out.outputs[0]].op, Op::FusedSwiGLU { gate_first });
    }
}

#[test]
fn swiglu_must_not_fire() {
    // silu read elsewhere
    let (mut g, s) = swiglu_graph((0, 8), 8, DType::F32);
    let y = g.outputs[0];
    g.set_outputs(&[y, s]).unwrap();
    assert_eq!(run::<swiglu::FuseSwiGlu>(&g).1, 0);
    // not the two halves
    let (g, _) = swiglu_graph((0, 4), 4, DType::F32);
    assert_eq!(run::<swiglu::FuseSwiGlu>(&g).1, 0);
    let (g, _) = swiglu_graph((0, 0), 8, DType::F32);
    assert_eq!(run::<swiglu::FuseSwiGlu>(&g).1, 0);
    // bf16 is not a fused_swiglu dtype
    let (g, _) = swiglu_graph((0, 8), 8, DType::BF16);
    assert_eq!(run::<swiglu::FuseSwiGlu>(&g).1, 0);
    // separate gate and up tensors
    let mut g = Graph::new("sep");
    let a = x32(&mut g, "a", &[3, 8]);
    let b = x32(&mut g, "b", &[3, 8]);
    let s = act(&mut g, Activation::Silu, a);
    let y = bin(&mut g, BinaryOp::Mul, s, b);
    g.set_outputs(&[y]).unwrap();
    assert_eq!(run::<swiglu::FuseSwiGlu>(&g).1, 0);
}

// ---------------------------------------------------------------- region

fn region_steps(g: &Graph, id: NodeId) -> usize {
    match &g.nodes[id].op {
        Op::ElementwiseRegion { steps } => steps.len(),
        other => panic!("not a region: {}", other.name()),
    }
}

#[test]
fn region_fuses_a_dag() {
    // y = exp(a * b) + tanh(a * b) - c[8]   (a*b read twice, inside)
    let mut g = Graph::new("dag");
    let a = x32(&mut g, "a", &[4, 8]);
    let b = x32(&mut g, "b", &[4, 8]);
    let c = x32(&mut g, "c", &[8]);
    let ab = bin(&mut g, BinaryOp::Mul, a, b);
    let e = act(&mut g, Activation::Exp, ab);
    let t = act(&mut g, Activation::Tanh, ab);
    let s = add(&mut g, e, t);
    let y = bin(&mut g, BinaryOp::Sub, s, c);
    g.set_outputs(&[y]).unwrap();
    let (out, n) = run::<region::FuseElementwiseRegion>(&g);
    assert_eq!((n, kinds(&out)), (1, vec!["elementwise_region"]));
    assert_eq!(region_steps(&out, out.outputs[0]), 5);
    assert_eq!(out.nodes[out.outputs[0]].inputs.len(), 3);
}

#[test]
fn region_respects_outside_uses_and_dtypes() {
    // m = a * b is also an output: two regions would need m twice, so m
    // stays a region root of its own... but a single op is no region
    let mut g = Graph::new("uses");
    let a = x32(&mut g, "a", &[4, 8]);
    let b = x32(&mut g, "b", &[4, 8]);
    let m = bin(&mut g, BinaryOp::Mul, a, b);
    let e = act(&mut g, Activation::Exp, m);
    let y = act(&mut g, Activation::Neg, e);
    g.set_outputs(&[y, m]).unwrap();
    let (out, n) = run::<region::FuseElementwiseRegion>(&g);
    assert_eq!(n, 1);
    assert_eq!(kinds(&out), ["binary", "elementwise_region"]);
    assert_eq!(region_steps(&out, out.outputs[0]), 2);
    // intermediate read by a non-elementwise op
    let mut g = Graph::new("reduce");
    let a = x32(&mut g, "a", &[4, 8]);
    let e = act(&mut g, Activation::Exp, a);
    let y = act(&mut g, Activation::Neg, e);
    let r = g
        .add(
            Op::Reduce {
                kind: rlx_ir::op::ReduceOp::Sum,
                axes: vec![1],
                keep_dims: false,
            },
            &[e],
            "",
        )
        .unwrap();
    g.set_outputs(&[y, r]).unwrap();
    assert_eq!(run::<region::FuseElementwiseRegion>(&g).1, 0);
    // f16 chain: not fused (the region computes in f32)
    let mut g = Graph::new("f16");
    let a = leaf(&mut g, "a", &[4, 8], DType::F16);
    let e = act(&mut g, Activation::Exp, a);
    let y = act(&mut g, Activation::Neg, e);
    g.set_outputs(&[y]).unwrap();
    assert_eq!(run::<region::FuseElementwiseRegion>(&g).1, 0);
    // ... but an f16 input cast up into an f32 chain is fine
    let mut g = Graph::new("cast");
    let a = leaf(&mut g, "a", &[4, 8], DType::F16);
    let c = g
        .add(
            Op::Cast {
                to: DType::F32,
                trunc: false,
            },
            &[a],
            "",
        )
        .unwrap();
    let e = act(&mut g, Activation::Exp, c);
    g.set_outputs(&[e]).unwrap();
    assert_eq!(run::<region::FuseElementwiseRegion>(&g).1, 1);
    // a same-dtype cast is a free view, not a step
    let mut g = Graph::new("view");
    let a = x32(&mut g, "a", &[4, 8]);
    let c = g
        .add(
            Op::Cast {
                to: DType::F32,
                trunc: false,
            },
            &[a],
            "",
        )
        .unwrap();
    let e = act(&mut g, Activation::Exp, c);
    g.set_outputs(&[e]).unwrap();
    assert_eq!(run::<region::FuseElementwiseRegion>(&g).1, 0);
    // integer ops stay out
    let mut g = Graph::new("int");
    let a = leaf(&mut g, "a", &[4], DType::I32);
    let n1 = act(&mut g, Activation::Neg, a);
    let n2 = act(&mut g, Activation::Abs, n1);
    g.set_outputs(&[n2]).unwrap();
    assert_eq!(run::<region::FuseElementwiseRegion>(&g).1, 0);
}

#[test]
fn region_limits() {
    // a 70-op chain splits into regions of at most 32 steps
    let mut g = Graph::new("long");
    let mut v = x32(&mut g, "a", &[5]);
    for i in 0..70 {
        v = act(
            &mut g,
            if i % 2 == 0 {
                Activation::Neg
            } else {
                Activation::Abs
            },
            v,
        );
    }
    g.set_outputs(&[v]).unwrap();
    let (out, n) = run::<region::FuseElementwiseRegion>(&g);
    assert_eq!(n, 3);
    let steps: Vec<usize> = (0..out.len())
        .filter(|&i| matches!(out.nodes[i].op, Op::ElementwiseRegion { .. }))
        .map(|i| region_steps(&out, i))
        .collect();
    assert_eq!(steps.iter().sum::<usize>(), 70);
    assert!(steps.iter().all(|&s| s <= MAX_STEPS), "{steps:?}");
    // a sum of 20 inputs: no region reads more than 16
    let mut g = Graph::new("wide");
    let xs: Vec<NodeId> = (0..20)
        .map(|i| x32(&mut g, &format!("x{i}"), &[3]))
        .collect();
    let mut acc = xs[0];
    for &x in &xs[1..] {
        acc = add(&mut g, acc, x);
    }
    g.set_outputs(&[acc]).unwrap();
    let (out, _) = run::<region::FuseElementwiseRegion>(&g);
    for n in &out.nodes {
        if let Op::ElementwiseRegion { .. } = n.op {
            assert!(n.inputs.len() <= MAX_INPUTS, "{} inputs", n.inputs.len());
        }
    }
    assert!(kinds(&out).len() < 19, "{:?}", kinds(&out));
}

const MAX_STEPS: usize = rlx_ir::op::MAX_REGION_STEPS;
const MAX_INPUTS: usize = rlx_ir::op::MAX_REGION_INPUTS;

// ------------------------------------------------------- attention block

struct AttnCfg {
    seq: Dim,
    kv_heads: usize,
    rope: bool,
    same_tables: bool,
}

fn attn_graph(c: &AttnCfg) -> Graph {
    let (heads, d, hidden) = (2usize, 4usize, 6usize);
    let inner = heads * d;
    let mut g = Graph::new("attn");
    let x = g
        .add(
            Op::Input {
                shape: Shape::new(
                    vec![Dim::Static(1), c.seq.clone(), Dim::Static(hidden)],
                    DType::F32,
                ),
            },
            &[],
            "x",
        )
        .unwrap();
    let wqkv = x32(&mut g, "w_qkv", &[hidden, 3 * inner]);
    let wout = x32(&mut g, "w_out", &[inner, hidden]);
    let table = |g: &mut Graph, name: &str| {
        g.add(
            Op::Input {
                shape: Shape::new(vec![c.seq.clone(), Dim::Static(d / 2)], DType::F32),
            },
            &[],
            name,
        )
        .unwrap()
    };
    let cos = table(&mut g, "cos");
    let sin = table(&mut g, "sin");
    let sin2 = table(&mut g, "sin2");
    let qkv = g.add(Op::MatMul, &[x, wqkv], "qkv").unwrap();
    let narrow = |g: &mut Graph, start: usize, len: usize| {
        g.add(
            Op::Narrow {
                axis: -1,
                start,
                len,
            },
            &[qkv],
            "",
        )
        .unwrap()
    };
    let kv_inner = c.kv_heads * d;
    let mut q = narrow(&mut g, 0, inner);
    let mut k = narrow(&mut g, inner, kv_inner);
    let v = narrow(&mut g, inner + kv_inner, kv_inner);
    if c.rope {
        let r = Op::Rope {
            kind: RopeKind::Neox,
            head_dim: d,
            n_rot: d,
            per_token: false,
        };
        q = g.add(r.clone(), &[q, cos, sin], "").unwrap();
        let s = if c.same_tables { sin } else { sin2 };
        k = g.add(r, &[k, cos, s], "").unwrap();
    }
    let a = g
        .add(
            Op::Attention {
                heads,
                kv_heads: c.kv_heads,
                head_dim: d,
                mask: MaskKind::Causal,
                window: 0,
                layout: AttnLayout::Bshd,
                score_scale: None,
                softcap: None,
                dynamic_kv_len: false,
            },
            &[q, k, v],
            "",
        )
        .unwrap();
    let y = g.add(Op::MatMul, &[a, wout], "y").unwrap();
    g.set_outputs(&[y]).unwrap();
    g
}

#[test]
fn attention_block_fires_for_short_sequences() {
    for rope in [false, true] {
        let g = attn_graph(&AttnCfg {
            seq: Dim::Sym("seq".into()),
            kv_heads: 2,
            rope,
            same_tables: true,
        });
        let dims = HashMap::from([("seq".to_string(), 7usize)]);
        let (out, n) = run_with::<attention_block::FuseAttentionBlock>(&g, &dims);
        assert_eq!((n, kinds(&out)), (1, vec!["fused_attention_block"]));
        let root = &out.nodes[out.outputs[0]];
        assert_eq!(root.name, "y");
        assert_eq!(root.inputs.len(), if rope { 5 } else { 3 });
        // too long for the score tile
        let dims = HashMap::from([("seq".to_string(), attention_block::MAX_SEQ + 1)]);
        assert_eq!(
            run_with::<attention_block::FuseAttentionBlock>(&g, &dims).1,
            0
        );
    }
}

#[test]
fn attention_block_must_not_fire() {
    let base = |kv_heads, rope, same_tables| AttnCfg {
        seq: Dim::Static(5),
        kv_heads,
        rope,
        same_tables,
    };
    // GQA (kv_heads < heads): the fused core has one head count
    let g = attn_graph(&base(1, false, true));
    assert_eq!(run::<attention_block::FuseAttentionBlock>(&g).1, 0);
    // q and k roped with different tables
    let g = attn_graph(&base(2, true, false));
    assert_eq!(run::<attention_block::FuseAttentionBlock>(&g).1, 0);
    // the qkv projection is also an output
    let mut g = attn_graph(&base(2, false, true));
    let y = g.outputs[0];
    let qkv = g.nodes.iter().position(|n| n.name == "qkv").unwrap();
    g.set_outputs(&[y, qkv]).unwrap();
    assert_eq!(run::<attention_block::FuseAttentionBlock>(&g).1, 0);
}

// ----------------------------------------------------------- the manager

#[test]
fn run_fusions_reports_and_disables() {
    let (g, ..) = mm_graph(&[5], DType::F32);
    let (out, stats) = run_fusions(&g, &HashMap::new(), &[]).unwrap();
    assert_eq!(stats.len(), FUSIONS.len());
    let mm = stats
        .iter()
        .find(|s| s.name == "ir_fuse_matmul_bias_act")
        .unwrap();
    assert_eq!((mm.matches, mm.thunks_before, mm.thunks_after), (1, 6, 4));
    assert_eq!(kinds(&out), ["fused_mat_mul_bias_act"]);
    let off = vec!["ir_fuse_matmul_bias_act".to_string()];
    let (out, stats) = run_fusions(&g, &HashMap::new(), &off).unwrap();
    assert!(!stats[1].enabled);
    // with the matmul fusion off, the bias add + gelu become a region
    assert_eq!(kinds(&out), ["mat_mul", "elementwise_region"]);
    let all: Vec<String> = fusion_names().iter().map(|s| s.to_string()).collect();
    let (out, _) = run_fusions(&g, &HashMap::new(), &all).unwrap();
    assert_eq!(out, g);
}

#[test]
fn run_fusions_maps_nodes_to_the_fused_graph() {
    // a, w, b, m = a @ w, t = b + m, y = gelu(t) → one fused node: the
    // leaves keep their values, m and t are absorbed, y is the fused root
    let (g, m, t, y) = mm_graph(&[5], DType::F32);
    let (out, _, map) = run_fusions_mapped(&g, &HashMap::new(), &[]).unwrap();
    assert_eq!(map.len(), g.len());
    assert_eq!((map[m], map[t]), (None, None));
    assert_eq!(map[y], Some(out.outputs[0]));
    for (leaf, m) in map.iter().enumerate().take(3) {
        assert_eq!(out.nodes[m.unwrap()].name, g.nodes[leaf].name);
    }
}

#[test]
fn matches_reading_a_state_are_dropped() {
    // a region over a state could read it after an in-place update
    let mut g = Graph::new("state");
    let s = g
        .add(
            Op::State {
                shape: shape(&[4], DType::F32),
            },
            &[],
            "s",
        )
        .unwrap();
    let r = g
        .add(
            Op::Reshape {
                dims: vec![Dim::Static(2), Dim::Static(2)],
            },
            &[s],
            "",
        )
        .unwrap();
    let e = act(&mut g, Activation::Exp, r);
    let y = act(&mut g, Activation::Neg, e);
    g.set_outputs(&[y]).unwrap();
    let (out, stats) = run_fusions(&g, &HashMap::new(), &[]).unwrap();
    assert!(stats.iter().all(|s| s.matches == 0), "{stats:?}");
    assert_eq!(out, g);
}

#[test]
fn apply_rejects_overlapping_matches() {
    let (g, m, t, y) = mm_graph(&[5], DType::F32);
    let r = Rewrite {
        root: y,
        op: Op::FusedMatMulBiasAct { act: None },
        inputs: vec![Operand::Node(0), Operand::Node(1), Operand::Node(2)],
        absorbed: vec![m, t],
        extra: vec![],
    };
    let err = apply(&g, &[r.clone(), r], "t").unwrap_err();
    assert!(err.to_string().starts_with("[t]"), "{err}");
}
