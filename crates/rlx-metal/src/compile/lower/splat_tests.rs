//! Lowering of the Gaussian-splat ops: thunk fields, exact io ranges, the
//! f32 conversions around f16 operands, and the two-stage split.

use super::super::{lower, CompileOptions, Compiled};
use crate::thunk::io::ByteRange;
use crate::thunk::Thunk;
use rlx_ir::op::SplatConfig;
use rlx_ir::{DType, Graph, NodeId, Op, Shape};

fn leaf(g: &mut Graph, name: &str, d: &[usize], dt: DType) -> NodeId {
    g.add(
        Op::Input {
            shape: Shape::of(d, dt),
        },
        &[],
        name,
    )
    .unwrap()
}

fn cfg() -> SplatConfig {
    SplatConfig {
        width: 13,
        height: 7,
        tile_size: 4,
        radius_scale: 3.0,
        alpha_cutoff: 1.0 / 255.0,
        max_splat_steps: 64,
        transmittance_threshold: 1e-4,
        max_list_entries: 4096,
    }
}

/// The seven render operands for `g` splats with `k` SH coefficients.
fn operands(gr: &mut Graph, g: usize, k: usize, dt: DType) -> Vec<NodeId> {
    vec![
        leaf(gr, "pos", &[g, 3], dt),
        leaf(gr, "scale", &[g, 3], dt),
        leaf(gr, "rot", &[g, 4], dt),
        leaf(gr, "opacity", &[g], dt),
        leaf(gr, "color", &[g, 3], dt),
        leaf(gr, "sh", &[g, k, 3], dt),
        leaf(gr, "camera", &[20], dt),
    ]
}

fn lower1(g: &Graph) -> Compiled {
    lower(g, &CompileOptions::default()).unwrap()
}

fn range(c: &Compiled, id: NodeId) -> ByteRange {
    ByteRange::new(c.offsets[id], c.shapes[id].size_bytes().unwrap())
}

#[test]
fn render_lowers_with_element_counts() {
    let mut g = Graph::new("splat");
    let ins = operands(&mut g, 5, 4, DType::F32);
    let y = g
        .add(Op::GaussianSplatRender { cfg: cfg() }, &ins, "img")
        .unwrap();
    g.set_outputs(&[y]).unwrap();
    let c = lower1(&g);
    assert_eq!(c.schedule.thunks.len(), 1);
    let Thunk::GaussianSplatRender(t) = &c.schedule.thunks[0] else {
        panic!("{:?}", c.schedule.thunks[0]);
    };
    assert_eq!(
        (
            t.positions_len,
            t.rotations_len,
            t.opacities_len,
            t.sh_coeffs_len
        ),
        (15, 20, 5, 60)
    );
    assert_eq!(
        (t.width, t.height, t.tile_size, t.dst_len),
        (13, 7, 4, 13 * 7 * 3)
    );
    let io = c.schedule.thunks[0].io();
    let want: Vec<ByteRange> = ins.iter().map(|&i| range(&c, i)).collect();
    assert_eq!(io.reads, want);
    assert_eq!(io.writes, vec![range(&c, y)]);
}

#[test]
fn prepare_then_rasterize() {
    let mut g = Graph::new("splat2");
    let ins = operands(&mut g, 3, 1, DType::F32);
    let prep = g
        .add(Op::GaussianSplatPrepare { cfg: cfg() }, &ins, "prep")
        .unwrap();
    let y = g
        .add(
            Op::GaussianSplatRasterize { cfg: cfg() },
            &[prep, ins[6]],
            "img",
        )
        .unwrap();
    g.set_outputs(&[y]).unwrap();
    let c = lower1(&g);
    let names: Vec<&str> = c.schedule.thunks.iter().map(|t| t.name()).collect();
    assert_eq!(
        names,
        ["gaussian_splat_prepare", "gaussian_splat_rasterize"]
    );
    let Thunk::GaussianSplatRasterize(r) = &c.schedule.thunks[1] else {
        unreachable!()
    };
    assert_eq!((r.count, r.prep_len, r.meta_len), (3, 48, 20));
    let io = c.schedule.thunks[1].io();
    assert_eq!(io.reads, vec![range(&c, prep), range(&c, ins[6])]);
    assert_eq!(io.writes, vec![range(&c, y)]);
}

#[test]
fn f16_operands_go_through_f32() {
    let mut g = Graph::new("splat16");
    let mut ins = operands(&mut g, 2, 1, DType::F16);
    ins.push(leaf(&mut g, "dl", &[7, 13, 3], DType::F16));
    let op = Op::GaussianSplatRenderBackward {
        cfg: cfg(),
        loss_grad_clip: 10.0,
        sh_band: 0,
        max_anisotropy: 100.0,
    };
    let y = g.add(op, &ins, "grad").unwrap();
    g.set_outputs(&[y]).unwrap();
    let c = lower1(&g);
    let names: Vec<&str> = c.schedule.thunks.iter().map(|t| t.name()).collect();
    // 8 operand casts, the thunk, the cast of the result
    assert_eq!(names.len(), 10, "{names:?}");
    assert_eq!(names[8], "gaussian_splat_render_backward");
    let Thunk::GaussianSplatRenderBackward(t) = &c.schedule.thunks[8] else {
        unreachable!()
    };
    assert_eq!(
        (t.packed_len, t.d_loss_len, t.sh_band),
        (2 * 17, 7 * 13 * 3, 0)
    );
    assert_eq!(c.schedule.thunks[9].io().writes, vec![range(&c, y)]);
}
