//! Sequence family: SSM scans, GDN, LSTM/GRU/RNN, generic scan.

use super::*;
use rlx_ir::op::{Recurrent, ScanLoop};
use rlx_ir::Graph;

#[test]
fn selective_scan() {
    let op = Op::SelectiveScan;
    let bs = |last: Dim| shp(&[sym("b"), sym("s"), last], DType::F32);
    let ins = [bs(st(4)), bs(st(4)), f32s(&[4, 8]), bs(st(8)), bs(st(8))];
    assert_eq!(ok(&op, &ins), bs(st(4)));
    let mut bad = ins.clone();
    bad[2] = f32s(&[5, 8]);
    err(&op, &bad, "a rows vs x channels");
    let mut bad = ins.clone();
    bad[4] = bs(st(7));
    err(&op, &bad, "c last dim");
    let mut bad = ins.clone();
    bad[1] = shp(&[sym("b"), sym("t"), st(4)], DType::F32);
    err(&op, &bad, "delta length vs x length");
    let mut bad = ins.clone();
    bad[3] = shp(&[sym("b"), sym("s"), st(8)], DType::F16);
    err(&op, &bad, "must have the dtype of x");
    err(&op, &ins[..4], "expects 5 to 6 input(s), got 4");
    // the optional recurrent state [b, h, n]
    let mut with = ins.to_vec();
    with.push(shp(&[sym("b"), st(4), st(8)], DType::F32));
    assert_eq!(ok(&op, &with), bs(st(4)));
    with[5] = shp(&[sym("b"), st(4), st(7)], DType::F32);
    err(&op, &with, "state dim 2 vs a's state size");
    with[5] = shp(&[sym("b"), st(4), st(8)], DType::F16);
    err(&op, &with, "state must have the dtype of x");
}

#[test]
fn mamba2() {
    let op = Op::Mamba2 {
        heads: 2,
        head_dim: 3,
        state_size: 4,
    };
    let ins = [
        f32s(&[1, 5, 6]),
        f32s(&[1, 5, 2]),
        f32s(&[2]),
        f32s(&[1, 5, 4]),
        f32s(&[1, 5, 4]),
    ];
    assert_eq!(ok(&op, &ins), f32s(&[1, 5, 6]));
    let mut bad = ins.clone();
    bad[0] = f32s(&[1, 5, 8]);
    err(&op, &bad, "heads·head_dim");
    let mut bad = ins.clone();
    bad[2] = f32s(&[3]);
    err(&op, &bad, "a length");
    let zero = Op::Mamba2 {
        heads: 0,
        head_dim: 3,
        state_size: 4,
    };
    err(&zero, &ins, "heads must be >= 1");
    // the optional recurrent state [b, heads, head_dim, n]
    let mut with = ins.to_vec();
    with.push(f32s(&[1, 2, 3, 4]));
    assert_eq!(ok(&op, &with), f32s(&[1, 5, 6]));
    with[5] = f32s(&[1, 2, 4, 3]);
    err(&op, &with, "state dim 2 (head_dim)");
}

#[test]
fn gated_delta_net() {
    let op = Op::GatedDeltaNet {
        heads: 2,
        state_size: 4,
    };
    let qkv = shp(&[st(1), sym("s"), st(8)], DType::F32);
    let gb = shp(&[st(1), sym("s"), st(2)], DType::F32);
    let ins = [
        qkv.clone(),
        qkv.clone(),
        qkv.clone(),
        gb.clone(),
        gb,
        f32s(&[1, 2, 4, 4]),
    ];
    assert_eq!(ok(&op, &ins), qkv);
    let mut bad = ins.clone();
    bad[5] = f32s(&[1, 2, 4, 3]);
    err(&op, &bad, "state dim 3");
    let mut bad = ins.clone();
    bad[4] = shp(&[st(1), sym("s"), st(4)], DType::F32);
    err(&op, &bad, "beta last dim");
}

fn lstm(layers: usize, bidirectional: bool, carry: bool) -> Op {
    Op::Lstm {
        net: Recurrent {
            hidden: 5,
            num_layers: layers,
            bidirectional,
            carry,
        },
    }
}

#[test]
fn lstm_packed_weights() {
    // 2 layers × 2 dirs, input 3 → w_ih columns max(3, 2·5) = 10
    let ins = [
        f32s(&[2, 7, 3]),
        f32s(&[4, 20, 10]),
        f32s(&[4, 20, 5]),
        f32s(&[4, 20]),
        f32s(&[4, 2, 5]),
        f32s(&[4, 2, 5]),
    ];
    // carry: 2 layers × (h, c) = 4 extra rows
    assert_eq!(ok(&lstm(2, true, true), &ins), f32s(&[2, 11, 10]));
    assert_eq!(ok(&lstm(2, true, false), &ins), f32s(&[2, 7, 10]));
    // one layer: w_ih columns are the input size
    let one = [
        shp(&[st(2), sym("s"), st(3)], DType::F32),
        f32s(&[1, 20, 3]),
        f32s(&[1, 20, 5]),
        f32s(&[1, 20]),
        f32s(&[1, 2, 5]),
        f32s(&[1, 2, 5]),
    ];
    assert_eq!(
        ok(&lstm(1, false, false), &one),
        shp(&[st(2), sym("s"), st(5)], DType::F32)
    );
    err(
        &lstm(1, false, true),
        &one,
        "sequence length (carry appends rows)",
    );
    let mut bad = ins.clone();
    bad[1] = f32s(&[4, 20, 3]);
    err(&lstm(2, true, false), &bad, "w_ih must be [4, 20, 10]");
    let mut bad = ins.clone();
    bad[5] = f32s(&[4, 3, 5]);
    err(&lstm(2, true, false), &bad, "c0 batch vs x batch");
    err(
        &lstm(2, true, false),
        &ins[..5],
        "expects 6 input(s), got 5",
    );
}

#[test]
fn gru_and_rnn() {
    let gru = Op::Gru {
        net: Recurrent {
            hidden: 5,
            num_layers: 1,
            bidirectional: false,
            carry: true,
        },
    };
    let ins = [
        f32s(&[2, 7, 3]),
        f32s(&[1, 15, 3]),
        f32s(&[1, 15, 5]),
        f32s(&[1, 15]),
        f32s(&[1, 15]),
        f32s(&[1, 2, 5]),
    ];
    assert_eq!(ok(&gru, &ins), f32s(&[2, 8, 5]));
    let mut bad = ins.clone();
    bad[4] = f32s(&[1, 20]);
    err(&gru, &bad, "b_hh must be [1, 15]");
    let rnn = Op::Rnn {
        net: Recurrent {
            hidden: 4,
            num_layers: 1,
            bidirectional: true,
            carry: false,
        },
        relu: true,
    };
    let ins = [
        f32s(&[3, 6, 2]),
        f32s(&[2, 4, 2]),
        f32s(&[2, 4, 4]),
        f32s(&[2, 4]),
        f32s(&[2, 3, 4]),
    ];
    assert_eq!(ok(&rnn, &ins), f32s(&[3, 6, 8]));
    let mut ints = ins.clone();
    ints[0] = Shape::of(&[3, 6, 2], DType::I32);
    err(&rnn, &ints, "x must be a float dtype");
}

/// Body: carry c [4], slice x [4] → (custom(c, x) : [4], custom(x) : [2]).
fn body(y_dims: &[usize]) -> Graph {
    let mut g = Graph::new("body");
    let leaf = |g: &mut Graph, n: &str| g.add(Op::Input { shape: f32s(&[4]) }, &[], n).unwrap();
    let c = leaf(&mut g, "c");
    let x = leaf(&mut g, "x");
    let custom = |out: &[usize]| Op::Custom {
        name: "step".into(),
        attrs: serde_json::Value::Null,
        out: f32s(out),
    };
    let c2 = g.add(custom(&[4]), &[c, x], "c2").unwrap();
    let y = g.add(custom(y_dims), &[x], "y").unwrap();
    g.set_outputs(&[c2, y]).unwrap();
    g
}

fn scan(body: Graph, num_carry: usize, length: usize) -> Op {
    Op::Scan {
        scan: ScanLoop {
            body: Box::new(body),
            num_carry,
            length,
        },
        reverse: false,
    }
}

#[test]
fn scan_checks_the_body() {
    let op = scan(body(&[2]), 1, 6);
    assert_eq!(ok(&op, &[f32s(&[4]), f32s(&[6, 4])]), f32s(&[6, 2]));
    err(
        &op,
        &[f32s(&[4]), f32s(&[5, 4])],
        "axis 0 (length) must be 6",
    );
    err(
        &op,
        &[f32s(&[3]), f32s(&[6, 4])],
        "carry 0: body input vs carry_init",
    );
    err(
        &op,
        &[f32s(&[4]), f32s(&[6, 3])],
        "scanned operand 0: body input vs slice",
    );
    err(&op, &[f32s(&[4])], "body has 2 Input leaves");
    err(&scan(body(&[2]), 3, 6), &[f32s(&[4])], "at least 3");
    err(
        &scan(body(&[2]), 1, 0),
        &[f32s(&[4]), f32s(&[0, 4])],
        "length must be >= 1",
    );
    // the carry output must match the carry
    let mut b = body(&[2]);
    b.outputs = vec![3, 3];
    err(
        &scan(b, 1, 6),
        &[f32s(&[4]), f32s(&[6, 4])],
        "carry 0: body output vs carry_init",
    );
    let mut b = body(&[2]);
    b.outputs = vec![2];
    err(
        &scan(b, 1, 6),
        &[f32s(&[4]), f32s(&[6, 4])],
        "body must have 1 carry outputs",
    );
    // a corrupt body is rejected through the verifier
    let mut b = body(&[2]);
    b.nodes[2].inputs = vec![0, 3];
    err(
        &scan(b, 1, 6),
        &[f32s(&[4]), f32s(&[6, 4])],
        "body graph is invalid: [verify] node 2",
    );
}
