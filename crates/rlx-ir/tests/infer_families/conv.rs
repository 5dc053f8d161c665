//! Conv family: conv2d, conv_transpose2d, pool2d, im2col.

use super::*;
use rlx_ir::op::ReduceOp;
use rlx_ir::op::{ConvGeom, Window};

fn conv(stride: usize, pad: usize, dil: usize, groups: usize) -> Op {
    Op::Conv2d {
        geom: ConvGeom {
            stride: [stride; 2],
            padding: [pad; 2],
            dilation: [dil; 2],
            groups,
        },
    }
}

#[test]
fn conv2d_shapes() {
    // (9 + 2 − 2 − 1) / 2 + 1 = 5
    let y = ok(
        &conv(2, 1, 1, 2),
        &[f32s(&[2, 4, 9, 9]), f32s(&[8, 2, 3, 3])],
    );
    assert_eq!(y, f32s(&[2, 8, 5, 5]));
    // dilation 2: span 5 → 10 − 5 + 1 = 6; with bias
    let y = ok(
        &conv(1, 0, 2, 1),
        &[f32s(&[1, 1, 10, 10]), f32s(&[3, 1, 3, 3]), f32s(&[3])],
    );
    assert_eq!(y, f32s(&[1, 3, 6, 6]));
    // asymmetric attributes
    let op = Op::Conv2d {
        geom: ConvGeom {
            stride: [1, 3],
            padding: [0, 2],
            dilation: [1, 1],
            groups: 1,
        },
    };
    let y = ok(&op, &[f32s(&[1, 2, 5, 7]), f32s(&[4, 2, 5, 1])]);
    assert_eq!(y, f32s(&[1, 4, 1, 4]));
}

#[test]
fn conv2d_symbols() {
    let x = shp(&[sym("n"), st(3), sym("h"), sym("w")], DType::F16);
    let w = Shape::of(&[6, 3, 3, 3], DType::F16);
    // "same" convolution keeps the symbols
    let y = ok(&conv(1, 1, 1, 1), &[x.clone(), w.clone()]);
    assert_eq!(y, shp(&[sym("n"), st(6), sym("h"), sym("w")], DType::F16));
    err(&conv(2, 1, 1, 1), &[x.clone(), w], "symbolic size h");
    let x2 = shp(&[st(1), sym("c"), st(8), st(8)], DType::F32);
    err(
        &conv(1, 1, 1, 1),
        &[x2, f32s(&[6, 3, 3, 3])],
        "input channels must be a static",
    );
}

#[test]
fn conv2d_rejections() {
    let x = f32s(&[1, 4, 8, 8]);
    err(
        &conv(1, 0, 1, 3),
        &[x.clone(), f32s(&[3, 1, 3, 3])],
        "not divisible by groups",
    );
    err(
        &conv(1, 0, 1, 2),
        &[x.clone(), f32s(&[4, 4, 3, 3])],
        "must be [c_out, 2, kh, kw]",
    );
    err(
        &conv(1, 0, 1, 2),
        &[x.clone(), f32s(&[3, 2, 3, 3])],
        "multiple of groups 2",
    );
    err(
        &conv(1, 0, 1, 1),
        &[x.clone(), f32s(&[2, 4, 9, 9])],
        "exceeds the padded size",
    );
    err(
        &conv(0, 0, 1, 1),
        &[x.clone(), f32s(&[2, 4, 3, 3])],
        "stride must be >= 1",
    );
    err(
        &conv(1, 0, 0, 1),
        &[x.clone(), f32s(&[2, 4, 3, 3])],
        "dilation must be >= 1",
    );
    err(
        &conv(1, 0, 1, 0),
        &[x.clone(), f32s(&[2, 4, 3, 3])],
        "groups must be >= 1",
    );
    err(
        &conv(1, 0, 1, 1),
        &[x.clone(), f32s(&[2, 4, 3, 3]), f32s(&[3])],
        "bias length",
    );
    err(
        &conv(1, 0, 1, 1),
        std::slice::from_ref(&x),
        "expects 2 to 3 input(s), got 1",
    );
    err(
        &conv(1, 0, 1, 1),
        &[
            Shape::of(&[1, 4, 8, 8], DType::I32),
            Shape::of(&[2, 4, 3, 3], DType::I32),
        ],
        "float dtype",
    );
    err(
        &conv(1, 0, 1, 1),
        &[x.clone(), Shape::of(&[2, 4, 3, 3], DType::F16)],
        "dtypes differ",
    );
    err(
        &conv(1, 0, 1, 1),
        &[f32s(&[4, 8, 8]), f32s(&[2, 4, 3, 3])],
        "rank 4",
    );
}

fn convt(stride: usize, pad: usize, out_pad: usize, groups: usize) -> Op {
    Op::ConvTranspose2d {
        geom: ConvGeom {
            stride: [stride; 2],
            padding: [pad; 2],
            dilation: [1; 2],
            groups,
        },
        output_padding: [out_pad; 2],
    }
}

#[test]
fn conv_transpose2d_shapes() {
    // PyTorch docs example: ConvTranspose2d(16, 33, 3, stride=2) on 50×100 → 101×201.
    let op = convt(2, 0, 0, 1);
    let y = ok(&op, &[f32s(&[20, 16, 50, 100]), f32s(&[16, 33, 3, 3])]);
    assert_eq!(y, f32s(&[20, 33, 101, 201]));
    // (5 − 1)·2 − 2 + 2 + 1 + 1 = 10; groups 2 doubles c_out/g; bias [6]
    let y = ok(
        &convt(2, 1, 1, 2),
        &[f32s(&[1, 4, 5, 5]), f32s(&[4, 3, 3, 3]), f32s(&[6])],
    );
    assert_eq!(y, f32s(&[1, 6, 10, 10]));
    // stride 1, k 3, pad 1 preserves a symbol
    let x = shp(&[st(1), st(2), sym("h"), st(4)], DType::F32);
    let y = ok(&convt(1, 1, 0, 1), &[x, f32s(&[2, 5, 3, 3])]);
    assert_eq!(y.dims[2], sym("h"));
}

#[test]
fn conv_transpose2d_rejections() {
    let x = f32s(&[1, 4, 5, 5]);
    err(
        &convt(2, 0, 2, 1),
        &[x.clone(), f32s(&[4, 3, 3, 3])],
        "output_padding",
    );
    err(
        &convt(1, 0, 0, 1),
        &[x.clone(), f32s(&[3, 3, 3, 3])],
        "c_in = 4",
    );
    err(
        &convt(1, 0, 0, 3),
        &[x.clone(), f32s(&[4, 3, 3, 3])],
        "not divisible by groups",
    );
    err(
        &convt(1, 0, 0, 1),
        &[x.clone(), f32s(&[4, 3, 3, 3]), f32s(&[4])],
        "bias length",
    );
    err(
        &convt(1, 1, 0, 1),
        &[f32s(&[1, 1, 1, 1]), f32s(&[1, 1, 1, 1])],
        "removes the whole output",
    );
    let xs = shp(&[st(1), st(4), sym("h"), st(5)], DType::F32);
    err(
        &convt(2, 0, 0, 1),
        &[xs, f32s(&[4, 3, 3, 3])],
        "symbolic size h",
    );
}

fn pool(kind: ReduceOp, k: usize, s: usize, p: usize) -> Op {
    Op::Pool2d {
        win: Window {
            kernel: [k; 2],
            stride: [s; 2],
            padding: [p; 2],
        },
        kind,
    }
}

#[test]
fn pool2d_shapes_and_rejections() {
    let y = ok(&pool(ReduceOp::Max, 2, 2, 0), &[f32s(&[1, 3, 7, 7])]);
    assert_eq!(y, f32s(&[1, 3, 3, 3]));
    let x = shp(&[sym("n"), sym("c"), sym("h"), st(9)], DType::BF16);
    let y = ok(&pool(ReduceOp::Mean, 3, 1, 1), &[x]);
    assert_eq!(y, shp(&[sym("n"), sym("c"), sym("h"), st(9)], DType::BF16));
    err(
        &pool(ReduceOp::Sum, 2, 2, 0),
        &[f32s(&[1, 3, 7, 7])],
        "max or mean",
    );
    err(
        &pool(ReduceOp::Max, 2, 2, 2),
        &[f32s(&[1, 3, 7, 7])],
        "at most half the kernel",
    );
    err(
        &pool(ReduceOp::Max, 2, 0, 0),
        &[f32s(&[1, 3, 7, 7])],
        "stride must be >= 1",
    );
    err(
        &pool(ReduceOp::Max, 9, 1, 0),
        &[f32s(&[1, 3, 7, 7])],
        "exceeds the padded size",
    );
    err(&pool(ReduceOp::Max, 2, 2, 0), &[f32s(&[3, 7, 7])], "rank 4");
}

#[test]
fn im2col_shapes_and_rejections() {
    let op = Op::Im2Col {
        win: Window {
            kernel: [3, 3],
            stride: [1, 1],
            padding: [0, 0],
        },
        dilation: [1, 1],
    };
    assert_eq!(ok(&op, &[f32s(&[2, 3, 6, 6])]), f32s(&[2, 27, 16]));
    let x = shp(&[st(2), sym("c"), st(6), st(6)], DType::F32);
    err(&op, &[x], "c·kh·kw");
    let same = Op::Im2Col {
        win: Window {
            kernel: [3, 3],
            stride: [1, 1],
            padding: [1, 1],
        },
        dilation: [1, 1],
    };
    let x = shp(&[st(2), st(3), sym("h"), st(1)], DType::F32);
    let y = ok(&same, &[x]);
    assert_eq!(y.dims, vec![st(2), st(27), sym("h")]);
    let x = shp(&[st(2), st(3), sym("h"), sym("w")], DType::F32);
    err(&same, &[x], "h_out·w_out");
}
