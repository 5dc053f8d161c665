//! Lowering of the sequence family: thunk kinds, fields and exact io ranges,
//! the optional SSM state, views as operands, dtype errors.

use super::*;
use crate::thunk::io::ByteRange;
use crate::thunk::sequence::recurrent_sizes;
use rlx_ir::op::{Recurrent, ScanLoop};

fn sh(d: &[usize], dt: DType) -> Shape {
    Shape::of(d, dt)
}

fn leaf(g: &mut Graph, name: &str, d: &[usize], dt: DType) -> NodeId {
    g.add(Op::Input { shape: sh(d, dt) }, &[], name).unwrap()
}

fn state(g: &mut Graph, name: &str, d: &[usize], dt: DType) -> NodeId {
    g.add(Op::State { shape: sh(d, dt) }, &[], name).unwrap()
}

fn lower1(g: &Graph) -> Compiled {
    lower(g, &CompileOptions::default()).unwrap()
}

/// Byte range of node `id` in `c` with its full static size.
fn range(c: &Compiled, id: NodeId) -> ByteRange {
    ByteRange::new(c.offsets[id], c.shapes[id].size_bytes().unwrap())
}

#[test]
fn selective_scan_with_and_without_state() {
    for with_state in [false, true] {
        let mut g = Graph::new("ss");
        let (b, s, h, n) = (2, 7, 3, 5);
        let f = DType::F32;
        let x = leaf(&mut g, "x", &[b, s, h], f);
        let dt = leaf(&mut g, "dt", &[b, s, h], f);
        let a = leaf(&mut g, "a", &[h, n], f);
        let bb = leaf(&mut g, "b", &[b, s, n], f);
        let cc = leaf(&mut g, "c", &[b, s, n], f);
        let mut ins = vec![x, dt, a, bb, cc];
        if with_state {
            ins.push(state(&mut g, "h", &[b, h, n], f));
        }
        let y = g.add(Op::SelectiveScan, &ins, "y").unwrap();
        g.set_outputs(&[y]).unwrap();
        let c = lower1(&g);
        assert_eq!(c.schedule.thunks.len(), 1);
        let Thunk::SelectiveScan(t) = &c.schedule.thunks[0] else {
            panic!("{:?}", c.schedule.thunks[0]);
        };
        assert_eq!((t.batch, t.seq, t.hidden, t.state_size), (2, 7, 3, 5));
        assert_eq!(t.state.is_some(), with_state);
        let io = c.schedule.thunks[0].io();
        let reads: Vec<ByteRange> = ins.iter().map(|&i| range(&c, i)).collect();
        assert_eq!(io.reads, reads);
        let mut writes = vec![range(&c, y)];
        if with_state {
            assert!(crate::thunk::is_state(t.state.unwrap()));
            writes.insert(0, range(&c, ins[5]));
        }
        assert_eq!(io.writes, writes);
    }
}

#[test]
fn mamba2_and_gdn_fields() {
    let mut g = Graph::new("m2");
    let f = DType::F32;
    let (b, s, hd, p, n) = (1, 4, 3, 2, 5);
    let x = leaf(&mut g, "x", &[b, s, hd * p], f);
    let dt = leaf(&mut g, "dt", &[b, s, hd], f);
    let a = leaf(&mut g, "a", &[hd], f);
    let bb = leaf(&mut g, "b", &[b, s, n], f);
    let cc = leaf(&mut g, "c", &[b, s, n], f);
    let st = state(&mut g, "h", &[b, hd, p, n], f);
    let op = Op::Mamba2 {
        heads: hd,
        head_dim: p,
        state_size: n,
    };
    let y = g.add(op, &[x, dt, a, bb, cc, st], "y").unwrap();
    // GDN in f16
    let h = DType::F16;
    let q = leaf(&mut g, "q", &[b, s, hd * n], h);
    let gg = leaf(&mut g, "g", &[b, s, hd], h);
    let s16 = state(&mut g, "S", &[b, hd, n, n], h);
    let o = g
        .add(
            Op::GatedDeltaNet {
                heads: hd,
                state_size: n,
            },
            &[q, q, q, gg, gg, s16],
            "o",
        )
        .unwrap();
    g.set_outputs(&[y, o]).unwrap();
    let c = lower1(&g);
    let names: Vec<_> = c.schedule.thunks.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["mamba2", "gated_delta_net"]);
    let Thunk::Mamba2(m) = &c.schedule.thunks[0] else {
        unreachable!()
    };
    assert_eq!((m.heads, m.head_dim, m.state_size, m.seq), (3, 2, 5, 4));
    assert_eq!(m.state, Some(c.offsets[st]));
    let io = c.schedule.thunks[0].io();
    assert_eq!(io.writes, vec![range(&c, st), range(&c, y)]);
    let Thunk::GatedDeltaNet(t) = &c.schedule.thunks[1] else {
        unreachable!()
    };
    assert!(t.f16);
    assert_eq!(
        (t.q, t.state, t.dst),
        (c.offsets[q], c.offsets[s16], c.offsets[o])
    );
    let io = c.schedule.thunks[1].io();
    assert_eq!(io.writes, vec![range(&c, s16), range(&c, o)]);
}

#[test]
fn recurrent_nets_read_the_ir_layout() {
    // 2 layers, bidirectional, carry: the thunk's io covers exactly the IR
    // operands (padded w_ih, L carry rows per state)
    let f = DType::F32;
    let (b, s, nin, hid, l) = (2, 5, 3, 4, 2);
    let slots = 4;
    let in_w = nin.max(2 * hid);
    let mut g = Graph::new("rnns");
    let x = leaf(&mut g, "x", &[b, s, nin], f);
    let mut outs = Vec::new();
    let mut operands = Vec::new();
    for (gates, name) in [(4, "lstm"), (3, "gru"), (1, "rnn")] {
        let w_ih = leaf(
            &mut g,
            &format!("w_ih_{name}"),
            &[slots, gates * hid, in_w],
            f,
        );
        let w_hh = leaf(
            &mut g,
            &format!("w_hh_{name}"),
            &[slots, gates * hid, hid],
            f,
        );
        let b1 = leaf(&mut g, &format!("b1_{name}"), &[slots, gates * hid], f);
        let b2 = leaf(&mut g, &format!("b2_{name}"), &[slots, gates * hid], f);
        let h0 = leaf(&mut g, &format!("h0_{name}"), &[slots, b, hid], f);
        let (op, ins) = match name {
            "lstm" => (
                Op::Lstm {
                    net: Recurrent {
                        hidden: hid,
                        num_layers: l,
                        bidirectional: true,
                        carry: true,
                    },
                },
                {
                    let c0 = leaf(&mut g, &format!("c0_{name}"), &[slots, b, hid], f);
                    vec![x, w_ih, w_hh, b1, h0, c0]
                },
            ),
            "gru" => (
                Op::Gru {
                    net: Recurrent {
                        hidden: hid,
                        num_layers: l,
                        bidirectional: true,
                        carry: true,
                    },
                },
                vec![x, w_ih, w_hh, b1, b2, h0],
            ),
            _ => (
                Op::Rnn {
                    net: Recurrent {
                        hidden: hid,
                        num_layers: l,
                        bidirectional: true,
                        carry: true,
                    },
                    relu: false,
                },
                vec![x, w_ih, w_hh, b1, h0],
            ),
        };
        outs.push(g.add(op, &ins, name).unwrap());
        operands.push((gates, ins));
    }
    g.set_outputs(&outs).unwrap();
    let c = lower1(&g);
    for (k, (gates, ins)) in operands.iter().enumerate() {
        let t = &c.schedule.thunks[k];
        let io = t.io();
        let want: Vec<ByteRange> = ins.iter().map(|&i| range(&c, i)).collect();
        assert_eq!(io.reads, want, "{}", t.name());
        assert_eq!(io.writes, vec![range(&c, outs[k])], "{}", t.name());
        let rows = if *gates == 4 { 2 } else { 1 };
        let z = recurrent_sizes(*gates, 2, 5, 3, 4, 2, true, true, rows);
        assert_eq!(z.rows, s + rows * l);
        assert_eq!(c.shapes[outs[k]].dims[1], rlx_ir::Dim::Static(z.rows));
    }
}

#[test]
fn scan_lowers_to_scan_host_with_the_body() {
    let f = DType::F32;
    let mut body = Graph::new("body");
    let carry = leaf(&mut body, "c", &[4], f);
    let xt = leaf(&mut body, "x", &[4], f);
    let add = body
        .add(
            Op::Binary {
                kind: rlx_ir::op::BinaryOp::Add,
            },
            &[carry, xt],
            "n",
        )
        .unwrap();
    body.set_outputs(&[add, add]).unwrap();
    let mut g = Graph::new("g");
    let c0 = leaf(&mut g, "c0", &[4], f);
    let xs = leaf(&mut g, "xs", &[6, 4], f);
    let op = Op::Scan {
        scan: ScanLoop {
            body: Box::new(body.clone()),
            num_carry: 1,
            length: 6,
        },
        reverse: true,
    };
    let y = g.add(op, &[c0, xs], "y").unwrap();
    g.set_outputs(&[y]).unwrap();
    let c = lower1(&g);
    let Thunk::ScanHost(t) = &c.schedule.thunks[0] else {
        panic!()
    };
    assert_eq!(t.desc.body, body);
    assert!(t.desc.reverse && t.desc.length == 6 && t.desc.num_carry == 1);
    assert_eq!(
        c.schedule.thunks[0].io().reads,
        vec![range(&c, c0), range(&c, xs)]
    );
    assert_eq!(t.desc.output, (c.offsets[y], 96, sh(&[6, 4], f)));
}

#[test]
fn views_and_constants_are_read_in_place() {
    // x is a narrow view of a bigger input; a is a constant
    let f = DType::F32;
    let mut g = Graph::new("v");
    let big = leaf(&mut g, "big", &[1, 9, 3], f);
    let x = g
        .add(
            Op::Narrow {
                axis: 1,
                start: 2,
                len: 4,
            },
            &[big],
            "x",
        )
        .unwrap();
    let a = g
        .add(
            Op::Constant {
                values: vec![-0.5],
                shape: sh(&[3, 2], f),
            },
            &[],
            "a",
        )
        .unwrap();
    let bb = leaf(&mut g, "b", &[1, 4, 2], f);
    let y = g.add(Op::SelectiveScan, &[x, x, a, bb, bb], "y").unwrap();
    g.set_outputs(&[y]).unwrap();
    let c = lower1(&g);
    assert_eq!(c.schedule.thunks.len(), 1, "the view needs no copy");
    let Thunk::SelectiveScan(t) = &c.schedule.thunks[0] else {
        panic!()
    };
    assert_eq!(t.x, c.offsets[big] + 2 * 3 * 4);
    assert_eq!(t.a, c.offsets[a]);
}

#[test]
fn half_operands_are_refused_by_name() {
    let h = DType::F16;
    let mut g = Graph::new("h");
    let x = leaf(&mut g, "x", &[1, 3, 2], h);
    let a = leaf(&mut g, "a", &[2, 4], h);
    let bb = leaf(&mut g, "b", &[1, 3, 4], h);
    let y = g.add(Op::SelectiveScan, &[x, x, a, bb, bb], "y").unwrap();
    g.set_outputs(&[y]).unwrap();
    let e = lower(&g, &CompileOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("selective_scan") && e.contains("f16"), "{e}");
    let mut g = Graph::new("bf");
    let bf = DType::BF16;
    let q = leaf(&mut g, "q", &[1, 3, 4], bf);
    let gg = leaf(&mut g, "g", &[1, 3, 2], bf);
    let st = state(&mut g, "S", &[1, 2, 2, 2], bf);
    let op = Op::GatedDeltaNet {
        heads: 2,
        state_size: 2,
    };
    let o = g.add(op, &[q, q, q, gg, gg, st], "o").unwrap();
    g.set_outputs(&[o]).unwrap();
    let e = lower(&g, &CompileOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("gated_delta_net") && e.contains("bf16"), "{e}");
}
