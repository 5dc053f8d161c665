//! metal-sim vs host for `conv.metal`: the transpose → depthwise conv2d →
//! transpose (→ SiLU) chain on `[1, seq, C]` that the pass fuses into
//! FusedDepthwiseConv1dBsc (f32), with `assert_same`'s f32 tolerance.

use super::tests::{assert_same, compiled, node};
use super::*;
use rlx_ir::op::ConvGeom;
use rlx_ir::op::{Activation, BinaryOp};
use rlx_ir::{DType, Graph, Op, Shape};

fn graph(w: usize, c: usize, k: usize) -> Graph {
    let s = w - k + 1;
    let mut g = Graph::new("conv1d");
    let f32s = |d: &[usize]| Shape::of(d, DType::F32);
    let x = node(
        &mut g,
        Op::Input {
            shape: f32s(&[1, w, c]),
        },
        &[],
    );
    let wt = node(
        &mut g,
        Op::Param {
            shape: f32s(&[c, 1, 1, k]),
        },
        &[],
    );
    let t = node(
        &mut g,
        Op::Transpose {
            perm: vec![0, 2, 1],
        },
        &[x],
    );
    let dims = |d: &[usize]| d.iter().map(|&v| v.into()).collect();
    let bcw = node(
        &mut g,
        Op::Reshape {
            dims: dims(&[1, c, 1, w]),
        },
        &[t],
    );
    let conv = Op::Conv2d {
        geom: ConvGeom {
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: c,
        },
    };
    let y = node(&mut g, conv, &[bcw, wt]);
    let y = node(
        &mut g,
        Op::Reshape {
            dims: dims(&[1, c, s]),
        },
        &[y],
    );
    let bsc = node(
        &mut g,
        Op::Transpose {
            perm: vec![0, 2, 1],
        },
        &[y],
    );
    let out = node(
        &mut g,
        Op::Activation {
            kind: Activation::Silu,
        },
        &[bsc],
    );
    // x read again afterwards: the output cannot take x's slot
    let x2 = node(
        &mut g,
        Op::Binary {
            kind: BinaryOp::Add,
        },
        &[x, x],
    );
    g.set_outputs(&[out, x2]).unwrap();
    g
}

#[test]
fn depthwise_conv1d_bsc_matches_host() {
    for (w, c, k) in [(7, 33, 4), (12, 8, 3)] {
        let g = graph(w, c, k);
        let c2 = compiled(&g);
        let plan = MetalPlan::build(&c2.schedule);
        let i = c2
            .schedule
            .thunks
            .iter()
            .position(|t| t.name() == "fused_depthwise_conv1d_bsc")
            .unwrap_or_else(|| panic!("not fused:\n{}", c2.schedule));
        let d = plan.commands.iter().any(|cmd| {
            matches!(cmd, Command::Dispatch(d) if d.thunk == i && d.kernel.family == Family::Conv)
        });
        assert!(d, "{plan}");
        assert_same(&c2, &plan, DType::F32);
    }
}
