//! Misc family: rng fills, vq_assign, spd, splats, custom.

use super::*;
use rlx_ir::op::{SpdOp, SplatConfig, VqMetric};

#[test]
fn rng_fills() {
    let dims = vec![sym("b"), st(3)];
    let normal = |mean: f32, scale: f32| Op::RngNormal {
        dims: dims.clone(),
        mean,
        scale,
        seed: Some(7),
    };
    assert_eq!(ok(&normal(0.0, 1.0), &[]), shp(&dims, DType::F32));
    assert_eq!(ok(&normal(1.0, 0.0), &[]), shp(&dims, DType::F32));
    err(&normal(0.0, -1.0), &[], "scale must be >= 0");
    err(&normal(f32::NAN, 1.0), &[], "mean must be finite");
    err(
        &normal(0.0, 1.0),
        &[f32s(&[1])],
        "expects 0 input(s), got 1",
    );
    let uniform = |low: f32, high: f32| Op::RngUniform {
        dims: vec![st(2), st(2)],
        low,
        high,
        seed: None,
    };
    assert_eq!(ok(&uniform(-1.0, 1.0), &[]), f32s(&[2, 2]));
    err(&uniform(1.0, 1.0), &[], "low 1 must be below high 1");
    err(&uniform(0.0, f32::INFINITY), &[], "high must be finite");
}

#[test]
fn vq_assign() {
    let op = Op::VqAssign {
        metric: VqMetric::Cosine,
    };
    let x = shp(&[sym("n"), st(8)], DType::F32);
    assert_eq!(
        ok(&op, &[x.clone(), f32s(&[32, 8])]),
        shp(&[sym("n")], DType::I32)
    );
    err(&op, &[x.clone(), f32s(&[32, 4])], "x dim vs codebook dim");
    err(&op, &[x, f32s(&[0, 8])], "is empty");
}

fn spd(kind: SpdOp, eps: f32) -> Op {
    Op::Spd { kind, eps }
}

#[test]
fn spd_ops() {
    let x = f32s(&[2, 4, 4]);
    assert_eq!(
        ok(&spd(SpdOp::BiMap, 0.0), &[x.clone(), f32s(&[4, 3])]),
        f32s(&[2, 3, 3])
    );
    err(
        &spd(SpdOp::BiMap, 0.0),
        &[x.clone(), f32s(&[4, 5])],
        "m <= n",
    );
    err(
        &spd(SpdOp::BiMap, 0.0),
        &[x.clone(), f32s(&[3, 2])],
        "w rows vs matrix size",
    );
    assert_eq!(ok(&spd(SpdOp::ReEig, 1e-4), std::slice::from_ref(&x)), x);
    err(
        &spd(SpdOp::ReEig, 0.0),
        std::slice::from_ref(&x),
        "eps must be > 0",
    );
    err(&spd(SpdOp::LogEig, 0.0), &[f32s(&[2, 4, 3])], "square");
    let b = Shape::of(&[5, 3, 3], DType::F64);
    assert_eq!(ok(&spd(SpdOp::LogEig, 0.0), std::slice::from_ref(&b)), b);
    assert_eq!(
        ok(&spd(SpdOp::BatchNorm, 1e-5), &[x.clone(), f32s(&[4, 4])]),
        x
    );
    err(
        &spd(SpdOp::BatchNorm, 1e-5),
        &[x.clone(), f32s(&[4, 3])],
        "bias size",
    );
    err(
        &spd(SpdOp::BatchNorm, 1e-5),
        std::slice::from_ref(&x),
        "expects 2 input(s), got 1",
    );
    assert_eq!(
        ok(&spd(SpdOp::KarcherMean, 1e-6), std::slice::from_ref(&x)),
        f32s(&[4, 4])
    );
    err(&spd(SpdOp::KarcherMean, -1.0), &[x], "eps must be > 0");
}

/// A valid splat configuration: 32 × 24 image.
pub fn cfg() -> SplatConfig {
    SplatConfig {
        width: 32,
        height: 24,
        tile_size: 16,
        radius_scale: 3.0,
        alpha_cutoff: 1.0 / 255.0,
        max_splat_steps: 256,
        transmittance_threshold: 1e-4,
        max_list_entries: 4096,
    }
}

/// The seven render operands for `g` splats with 4 SH coefficients.
pub fn splat_inputs(g: Dim) -> Vec<Shape> {
    let s = |rest: &[usize]| {
        let mut d = vec![g.clone()];
        d.extend(rest.iter().map(|&n| st(n)));
        shp(&d, DType::F32)
    };
    vec![
        s(&[3]),
        s(&[3]),
        s(&[4]),
        s(&[]),
        s(&[3]),
        s(&[4, 3]),
        f32s(&[20]),
    ]
}

#[test]
fn splats() {
    let ins = splat_inputs(sym("g"));
    let render = Op::GaussianSplatRender { cfg: cfg() };
    assert_eq!(ok(&render, &ins), f32s(&[24, 32, 3]));
    let prep = Op::GaussianSplatPrepare { cfg: cfg() };
    let p = ok(&prep, &ins);
    assert_eq!(p, shp(&[sym("g"), st(16)], DType::F32));
    let rast = Op::GaussianSplatRasterize { cfg: cfg() };
    assert_eq!(ok(&rast, &[p, f32s(&[20])]), f32s(&[24, 32, 3]));
    err(
        &rast,
        &[f32s(&[5, 15]), f32s(&[20])],
        "prep dim 1 must be 16",
    );
    let mut bad = ins.clone();
    bad[2] = shp(&[sym("g"), st(3)], DType::F32);
    err(&render, &bad, "rotations dim 1 must be 4");
    let mut bad = ins.clone();
    bad[3] = f32s(&[5]);
    err(&render, &bad, "opacities rows vs splat count");
    let mut bad = ins.clone();
    bad[6] = f32s(&[16]);
    err(&prep, &bad, "camera length must be 20");
    let mut c = cfg();
    c.width = 0;
    err(
        &Op::GaussianSplatRender { cfg: c },
        &ins,
        "width must be >= 1",
    );
    let mut c = cfg();
    c.alpha_cutoff = 1.0;
    err(
        &Op::GaussianSplatRender { cfg: c },
        &ins,
        "alpha_cutoff must lie in [0, 1)",
    );
}

#[test]
fn custom_ops() {
    let out = shp(&[sym("n"), st(2)], DType::BF16);
    let op = Op::Custom {
        name: "my_op".into(),
        attrs: serde_json::json!({"alpha": 0.5}),
        out: out.clone(),
    };
    assert_eq!(ok(&op, &[]), out);
    assert_eq!(ok(&op, &[f32s(&[1]), f32s(&[2, 2])]), out);
    let anon = Op::Custom {
        name: String::new(),
        attrs: serde_json::Value::Null,
        out,
    };
    err(&anon, &[], "registered name");
}
