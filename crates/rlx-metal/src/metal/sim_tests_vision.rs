//! metal-sim vs host for the NCHW image ops (`vision.metal`, plus the
//! matmul family for the im2col + GEMM convs and `norm_fused.metal` for
//! GroupNorm): one f32 graph on a 7×9 image through a grouped strided conv
//! (direct kernel), a dilated ungrouped conv (im2col + GEMM), a 1×1 conv
//! (GEMM on the input as is), LayerNorm2d, max and mean pooling, nearest
//! 2× upsample, GroupNorm, a grouped transposed conv and im2col, and the
//! same graph in f16. The whole plan must have no host command; outputs
//! within `assert_same`'s tolerance (f32 `1e-5 + 1e-5·|host|`, f16 `2e-3 +
//! 2^-9·|host|`).

use super::tests::{assert_same, compiled, node};
use super::*;
use crate::compile::lower::conv::gemm_plan;
use rlx_ir::op::ReduceOp;
use rlx_ir::op::{ConvGeom, Window};
use rlx_ir::{DType, Graph, NodeId, Op, Shape};

fn param(g: &mut Graph, d: &[usize]) -> NodeId {
    let dt = g.shape(0).dtype;
    node(
        g,
        Op::Param {
            shape: Shape::of(d, dt),
        },
        &[],
    )
}

fn conv(g: &mut Graph, x: NodeId, w: &[usize], s: usize, p: usize, d: usize, gr: usize) -> NodeId {
    let wt = param(g, w);
    let b = param(g, &[w[0]]);
    let op = Op::Conv2d {
        geom: ConvGeom {
            stride: [s, s],
            padding: [p, p],
            dilation: [d, d],
            groups: gr,
        },
    };
    node(g, op, &[x, wt, b])
}

/// The graph in `dt` (the first node, the input, sets every param's dtype).
fn graph(dt: DType) -> Graph {
    let mut g = Graph::new("vision");
    let x = node(
        &mut g,
        Op::Input {
            shape: Shape::of(&[2, 3, 7, 9], dt),
        },
        &[],
    );
    // grouped, stride 2: direct → [2, 6, 4, 5]
    let a = conv(&mut g, x, &[6, 1, 3, 3], 2, 1, 1, 3);
    // ungrouped, dilation 2, K = 54: im2col + GEMM → [2, 32, 4, 5]
    let b = conv(&mut g, a, &[32, 6, 3, 3], 1, 2, 2, 1);
    // 1×1, K = 32: GEMM on the input → [2, 16, 4, 5]
    let c = conv(&mut g, b, &[16, 32, 1, 1], 1, 0, 1, 1);
    let (ga, ba) = (param(&mut g, &[16]), param(&mut g, &[16]));
    let ln = node(&mut g, Op::LayerNorm2d { eps: 1e-6 }, &[c, ga, ba]);
    let pool = |kind| Op::Pool2d {
        win: Window {
            kernel: [3, 3],
            stride: [2, 2],
            padding: [1, 1],
        },
        kind,
    };
    let mx = node(&mut g, pool(ReduceOp::Max), &[ln]); // [2, 16, 2, 3]
    let mean = node(&mut g, pool(ReduceOp::Mean), &[ln]);
    let up = node(&mut g, Op::ResizeNearest2x, &[mx]); // [2, 16, 4, 6]
    let (gg, gb) = (param(&mut g, &[16]), param(&mut g, &[16]));
    let gn = Op::GroupNorm {
        num_groups: 4,
        eps: 1e-5,
    };
    let gn = node(&mut g, gn, &[up, gg, gb]);
    let wt = param(&mut g, &[16, 3, 3, 3]);
    let ct = Op::ConvTranspose2d {
        geom: ConvGeom {
            stride: [2, 2],
            padding: [1, 1],
            dilation: [1, 1],
            groups: 2,
        },
        output_padding: [1, 0],
    };
    let ct = node(&mut g, ct, &[gn, wt]); // [2, 6, 8, 11]
    let cols = Op::Im2Col {
        win: Window {
            kernel: [2, 3],
            stride: [2, 1],
            padding: [1, 1],
        },
        dilation: [2, 2],
    };
    let cols = node(&mut g, cols, &[x]);
    g.set_outputs(&[ct, mean, cols]).unwrap();
    g
}

#[test]
fn vision_graph_runs_without_host_commands() {
    let c = compiled(&graph(DType::F32));
    let names: Vec<&str> = c.schedule.thunks.iter().map(|t| t.name()).collect();
    let count = |n: &str| names.iter().filter(|&&t| t == n).count();
    // one direct conv; the dilated conv and the 1×1 conv are GEMMs, only
    // the dilated one through an im2col (plus the graph's own im2col)
    assert_eq!(count("conv2d"), 1, "{}", c.schedule);
    assert_eq!(count("batched_sgemm"), 2, "{}", c.schedule);
    assert_eq!(count("im2col"), 2, "{}", c.schedule);
    let plan = MetalPlan::build(&c.schedule);
    assert_eq!(plan.stats().host, 0, "{plan}");
    for k in [
        "conv2d_f32",
        "im2col_f32",
        "conv_transpose2d_f32",
        "layer_norm2d_f32",
        "pool2d_max_f32",
        "pool2d_mean_f32",
        "resize_nearest2x_f32",
        "group_norm_f32",
    ] {
        assert!(plan.to_string().contains(k), "{k} missing:\n{plan}");
    }
    assert_same(&c, &plan, DType::F32);
}

/// The f16 graph: convs, pools and im2col compute in f32 between casts
/// (their thunks are f32), LayerNorm2d, the upsample and GroupNorm run
/// their f16 kernels; still no host command.
#[test]
fn f16_vision_graph_runs_without_host_commands() {
    let c = compiled(&graph(DType::F16));
    let plan = MetalPlan::build(&c.schedule);
    assert_eq!(plan.stats().host, 0, "{plan}");
    for k in ["layer_norm2d_f16", "resize_nearest2x_f16", "group_norm_f16"] {
        assert!(plan.to_string().contains(k), "{k} missing:\n{plan}");
    }
    assert_same(&c, &plan, DType::F16);
}

#[test]
fn gemm_rule_picks_direct_for_grouped_and_small_convs() {
    use crate::thunk::conv::Conv2D;
    let conv = |c_in, c_out, k, groups, s| Conv2D {
        src: 0,
        weight: 0,
        dst: 0,
        n: 2,
        c_in,
        h: 9,
        w: 9,
        c_out,
        h_out: (9 - k) / s + 1,
        w_out: (9 - k) / s + 1,
        kh: k,
        kw: k,
        sh: s,
        sw: s,
        ph: 0,
        pw: 0,
        dh: 1,
        dw: 1,
        groups,
    };
    // K = 27, 54: direct below 32; c_out 8 < 16 direct
    assert_eq!(gemm_plan(&conv(3, 64, 3, 1, 1)), None);
    assert_eq!(gemm_plan(&conv(6, 64, 3, 1, 1)), Some(2 * 54 * 49 * 4));
    assert_eq!(gemm_plan(&conv(64, 8, 3, 1, 1)), None);
    assert_eq!(gemm_plan(&conv(64, 64, 3, 2, 1)), None);
    // 1×1 stride 1: no column matrix; 1×1 stride 2 needs one
    assert_eq!(gemm_plan(&conv(64, 64, 1, 1, 1)), Some(0));
    assert_eq!(gemm_plan(&conv(64, 64, 1, 1, 2)), Some(2 * 64 * 25 * 4));
}
