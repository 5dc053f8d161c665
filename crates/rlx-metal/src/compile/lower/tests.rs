//! Lowering tests (no fusions: `lower` alone): thunk kinds a graph lowers to, views, errors.

use super::*;
use rlx_ir::op::{Activation, BinaryOp};

fn f32s(d: &[usize]) -> Shape {
    Shape::of(d, DType::F32)
}

fn kinds(c: &Compiled) -> Vec<&'static str> {
    c.schedule.thunks.iter().map(|t| t.name()).collect()
}

fn input(g: &mut Graph, name: &str, d: &[usize]) -> NodeId {
    g.add(Op::Input { shape: f32s(d) }, &[], name).unwrap()
}

fn bin(g: &mut Graph, kind: BinaryOp, a: NodeId, b: NodeId) -> NodeId {
    g.add(Op::Binary { kind }, &[a, b], "").unwrap()
}

#[test]
fn placements_are_the_planner_intervals() {
    // x, a = tanh(x), b = exp(a), r = reshape(b), flat = reshape(a) (views),
    // c = flat * r: a is last read by its view, which holds its bytes until c
    let mut g = Graph::new("t");
    let x = input(&mut g, "x", &[4, 8]);
    let act = |g: &mut Graph, kind, i| g.add(Op::Activation { kind }, &[i], "").unwrap();
    let a = act(&mut g, Activation::Tanh, x);
    let b = act(&mut g, Activation::Exp, a);
    let dims = vec![Dim::Static(32)];
    let r = g.add(Op::Reshape { dims }, &[b], "").unwrap();
    let flat = g
        .add(
            Op::Reshape {
                dims: vec![Dim::Static(32)],
            },
            &[a],
            "",
        )
        .unwrap();
    let c = bin(&mut g, BinaryOp::Mul, flat, r);
    g.set_outputs(&[c]).unwrap();
    let out = lower(&g, &CompileOptions::default()).unwrap();
    let p = |i: NodeId| out.placements[i].unwrap();
    assert_eq!(out.node_map, (0..g.len()).map(Some).collect::<Vec<_>>());
    assert_eq!((p(x).start, p(x).end), (0, a));
    assert_eq!((p(a).start, p(a).end, p(a).held_until), (a, flat, c));
    assert_eq!((p(b).start, p(b).end, p(b).held_until), (b, r, c));
    assert_eq!((p(r).alias_of, p(r).offset), (Some(b), p(b).offset));
    assert_eq!((p(c).end, p(c).size), (g.len(), 32 * 4));
    // a and b are held at the same steps: their bytes do not overlap
    assert!(p(a).offset + p(a).size <= p(b).offset || p(b).offset + p(b).size <= p(a).offset);
}

#[test]
fn binary_forms() {
    let mut g = Graph::new("t");
    let x = input(&mut g, "x", &[4, 8]);
    let y = input(&mut g, "y", &[4, 8]);
    let b = input(&mut g, "b", &[8]);
    let c = input(&mut g, "c", &[4, 1]);
    let full = bin(&mut g, BinaryOp::Mul, x, y);
    let bias = bin(&mut g, BinaryOp::Add, full, b);
    let bias2 = bin(&mut g, BinaryOp::Add, b, bias);
    let bc = bin(&mut g, BinaryOp::Sub, bias2, c);
    g.set_outputs(&[bc]).unwrap();
    let out = lower(&g, &CompileOptions::default()).unwrap();
    assert_eq!(
        kinds(&out),
        ["binary", "bias_add", "bias_add", "binary_broadcast"]
    );
}

#[test]
fn matmul_forms() {
    let mut g = Graph::new("t");
    let a = input(&mut g, "a", &[2, 3, 5]);
    let w = input(&mut g, "w", &[5, 7]);
    let bw = input(&mut g, "bw", &[2, 5, 7]);
    let pw = input(&mut g, "pw", &[3, 1, 5, 7]);
    let m1 = g.add(Op::MatMul, &[a, w], "").unwrap();
    let m2 = g.add(Op::MatMul, &[a, bw], "").unwrap();
    let m3 = g.add(Op::MatMul, &[a, pw], "").unwrap(); // [3,2,3,7]: both need materialising
    g.set_outputs(&[m1, m2, m3]).unwrap();
    let out = lower(&g, &CompileOptions::default()).unwrap();
    let k = kinds(&out);
    assert_eq!(&k[..2], ["sgemm", "batched_sgemm"]);
    assert_eq!(k.last(), Some(&"batched_sgemm"));
    assert!(
        k.len() > 3,
        "partial batch broadcast materialises operands: {k:?}"
    );
    match &out.schedule.thunks[0] {
        Thunk::Sgemm(s) => assert_eq!((s.m, s.k, s.n), (6, 5, 7)),
        t => panic!("{t}"),
    }
}

#[test]
fn views_need_no_thunks_and_plan_reuses_memory() {
    let mut g = Graph::new("t");
    let x = input(&mut g, "x", &[16, 64]);
    let mut h = x;
    for _ in 0..6 {
        h = g
            .add(
                Op::Activation {
                    kind: Activation::Silu,
                },
                &[h],
                "",
            )
            .unwrap();
    }
    let r = g
        .add(
            Op::Reshape {
                dims: vec![Dim::Static(1024)],
            },
            &[h],
            "r",
        )
        .unwrap();
    g.set_outputs(&[r]).unwrap();
    let out = lower(&g, &CompileOptions::default()).unwrap();
    // the input stays (a run input is never overwritten); every later silu
    // runs in place on the one before it
    let mut want = vec!["activation"; 6];
    want[0] = "activation_out";
    assert_eq!(kinds(&out), want);
    assert_eq!(out.offsets[r], out.offsets[h]);
    assert!(
        out.arena_bytes < out.naive_bytes,
        "{} vs {}",
        out.arena_bytes,
        out.naive_bytes
    );
    // input + one buffer; a plain chain alternates two buffers anyway, so
    // the arena is the same with the in-place planning off
    assert_eq!(out.arena_bytes, 2 * 4096);
    let (off, n) = lower_with(&g, &CompileOptions::default(), false).unwrap();
    assert_eq!((n, kinds(&off)), (0, vec!["activation_out"; 6]));
    assert_eq!(off.arena_bytes, 2 * 4096);
}

#[test]
fn unbound_dims_and_unsupported_ops_are_named() {
    let mut g = Graph::new("t");
    let x = g
        .add(
            Op::Input {
                shape: Shape::new(vec![Dim::from("seq"), Dim::Static(4)], DType::F32),
            },
            &[],
            "x",
        )
        .unwrap();
    let y = g
        .add(
            Op::Activation {
                kind: Activation::Exp,
            },
            &[x],
            "",
        )
        .unwrap();
    g.set_outputs(&[y]).unwrap();
    let e = lower(&g, &CompileOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("dim 'seq'"), "{e}");
    let mut dims = HashMap::new();
    dims.insert("seq".to_string(), 3);
    let c = lower(
        &g,
        &CompileOptions {
            dims,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(c.inputs[0].shape, f32s(&[3, 4]));

    let mut g = Graph::new("t");
    let x = g
        .add(
            Op::Input {
                shape: Shape::of(&[3, 8], DType::F16),
            },
            &[],
            "x",
        )
        .unwrap();
    let f = g
        .add(
            Op::Cumsum {
                axis: -1,
                exclusive: false,
            },
            &[x],
            "f",
        )
        .unwrap();
    g.set_outputs(&[f]).unwrap();
    let e = lower(&g, &CompileOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("[cumsum] cannot be compiled yet"), "{e}");
}

#[test]
fn region_weight_inputs_get_their_own_scratch() {
    // A region copies a weight operand into f32 scratch. The measuring pass
    // must see that the operand is a weight, or the emitted copy lands on
    // an unplanned offset (here: over the live matmul result).
    use rlx_ir::op::{RegionOperand, RegionStep};
    let mut g = Graph::new("t");
    let a = input(&mut g, "a", &[3, 1]);
    let w = g
        .add(
            Op::Param {
                shape: f32s(&[1, 5]),
            },
            &[],
            "w",
        )
        .unwrap();
    let b = g.add(Op::Param { shape: f32s(&[5]) }, &[], "b").unwrap();
    let m = g.add(Op::MatMul, &[a, w], "m").unwrap();
    let steps = vec![
        RegionStep::Binary {
            kind: BinaryOp::Add,
            a: RegionOperand::Input(0),
            b: RegionOperand::Input(1),
        },
        RegionStep::Unary {
            act: Activation::Abs,
            a: RegionOperand::Step(0),
        },
    ];
    let r = g
        .add(Op::ElementwiseRegion { steps }, &[b, m], "r")
        .unwrap();
    g.set_outputs(&[r]).unwrap();
    let out = lower(&g, &CompileOptions::default()).unwrap();
    let c = out
        .schedule
        .thunks
        .iter()
        .find_map(|t| match t {
            Thunk::Sgemm(s) => Some(s.c),
            _ => None,
        })
        .unwrap();
    let copy = out
        .schedule
        .thunks
        .iter()
        .find_map(|t| match t {
            Thunk::Cast(x) => Some(x.dst),
            _ => None,
        })
        .unwrap();
    assert!(
        copy >= c + 15 * 4 || copy + 5 * 4 <= c,
        "copy {copy} over matmul result {c}"
    );
}
