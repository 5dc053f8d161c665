//! Shape inference for random fills, vector quantisation, SPD-manifold ops,
//! Gaussian splats and user custom ops.
//!
//! * SPD ops follow SPDNet (Huang & Van Gool, "A Riemannian Network for SPD
//!   Matrix Learning", AAAI 2017: BiMap `WᵀXW`, ReEig, LogEig) and Riemannian
//!   batch norm (Brooks et al., NeurIPS 2019: Karcher mean, parallel transport
//!   to a learnt SPD bias).
//! * Splats follow 3-D Gaussian Splatting (Kerbl, Kopanas, Leimkühler &
//!   Drettakis, "3D Gaussian Splatting for Real-Time Radiance Field
//!   Rendering", SIGGRAPH 2023): per-splat mean, scale, rotation quaternion,
//!   opacity, colour and spherical-harmonic coefficients, tile rasterised.

use super::common::*;
use crate::dtype::DType;
use crate::error::{IrError, Result};
use crate::op::{Op, SpdOp, SplatConfig};
use crate::shape::{Dim, Shape};

pub(super) fn infer(op: &Op, inputs: &[&Shape]) -> Result<Shape> {
    match op {
        Op::RngNormal {
            dims, mean, scale, ..
        } => {
            arity(op, inputs, 0)?;
            finite(op, *mean, "mean")?;
            finite(op, *scale, "scale")?;
            if *scale < 0.0 {
                return Err(IrError::attr(
                    op.name(),
                    format!("scale must be >= 0, got {scale}"),
                ));
            }
            Ok(Shape::new(dims.clone(), DType::F32))
        }
        Op::RngUniform {
            dims, low, high, ..
        } => {
            arity(op, inputs, 0)?;
            finite(op, *low, "low")?;
            finite(op, *high, "high")?;
            if low >= high {
                return Err(IrError::attr(
                    op.name(),
                    format!("low {low} must be below high {high}"),
                ));
            }
            Ok(Shape::new(dims.clone(), DType::F32))
        }
        Op::VqAssign { .. } => vq_assign(op, inputs),
        Op::Spd { kind, eps } => spd(op, inputs, *kind, *eps),
        Op::GaussianSplatRender { cfg } => {
            splat_operands(op, inputs, cfg)?;
            Ok(image(cfg, inputs[0].dtype))
        }
        Op::GaussianSplatPrepare { cfg } => {
            splat_operands(op, inputs, cfg)?;
            Ok(inputs[0].with_dims(vec![inputs[0].dims[0].clone(), Dim::Static(16)]))
        }
        Op::GaussianSplatRasterize { cfg } => {
            arity(op, inputs, 2)?;
            splat_config(op, cfg)?;
            let (prep, camera) = (inputs[0], inputs[1]);
            rank_is(op, prep, 2, "prep")?;
            float_dtype(op, prep, "prep")?;
            dim_is(op, &prep.dims[1], 16, "prep dim 1")?;
            camera_shape(op, camera, prep)?;
            Ok(image(cfg, prep.dtype))
        }
        Op::Custom { name, out, .. } => {
            if name.is_empty() {
                return Err(IrError::attr(
                    op.name(),
                    "custom op needs a registered name",
                ));
            }
            Ok(out.clone())
        }
        _ => Err(wrong_family(op, "misc")),
    }
}

fn vq_assign(op: &Op, inputs: &[&Shape]) -> Result<Shape> {
    arity(op, inputs, 2)?;
    let (x, book) = (inputs[0], inputs[1]);
    rank_is(op, x, 2, "x")?;
    float_dtype(op, x, "x")?;
    rank_is(op, book, 2, "codebook")?;
    same_dtype(op, x, book)?;
    if book.dims[0].as_static() == Some(0) {
        return Err(IrError::shape(
            op.name(),
            format!("codebook {book} is empty"),
        ));
    }
    dims_equal(op, &x.dims[1], &book.dims[1], "x dim vs codebook dim")?;
    Ok(Shape::new(vec![x.dims[0].clone()], DType::I32))
}

/// Fail unless the last two dims of `s` are equal; returns that size.
fn square<'s>(op: &Op, s: &'s Shape, what: &str) -> Result<&'s Dim> {
    rank_at_least(op, s, 2, what)?;
    let r = s.rank();
    dims_equal(
        op,
        &s.dims[r - 2],
        &s.dims[r - 1],
        &format!("{what} must be square in its last two dims"),
    )?;
    Ok(&s.dims[r - 1])
}

/// Number of forward operands of an SPD op.
pub(super) fn spd_arity(kind: SpdOp) -> usize {
    match kind {
        SpdOp::BiMap | SpdOp::BatchNorm => 2,
        SpdOp::ReEig | SpdOp::LogEig | SpdOp::KarcherMean => 1,
    }
}

/// `Spd` inference; also used by `SpdBackward` (with its own `op`).
pub(super) fn spd(op: &Op, inputs: &[&Shape], kind: SpdOp, eps: f32) -> Result<Shape> {
    finite(op, eps, "eps")?;
    if matches!(kind, SpdOp::ReEig | SpdOp::KarcherMean) && eps <= 0.0 {
        return Err(IrError::attr(
            op.name(),
            format!("eps must be > 0 for this SPD op, got {eps}"),
        ));
    }
    if eps < 0.0 {
        return Err(IrError::attr(
            op.name(),
            format!("eps must be >= 0, got {eps}"),
        ));
    }
    arity(op, inputs, spd_arity(kind))?;
    let x = inputs[0];
    float_dtype(op, x, "x")?;
    match kind {
        SpdOp::ReEig | SpdOp::LogEig => {
            square(op, x, "x")?;
            Ok(x.clone())
        }
        SpdOp::BiMap => {
            rank_is(op, x, 3, "x")?;
            let n = square(op, x, "x")?;
            let w = inputs[1];
            rank_is(op, w, 2, "w")?;
            same_dtype(op, x, w)?;
            dims_equal(op, &w.dims[0], n, "w rows vs matrix size n")?;
            let m = &w.dims[1];
            if let (Some(n), Some(m)) = (n.as_static(), m.as_static()) {
                if m == 0 || m > n {
                    return Err(IrError::shape(
                        op.name(),
                        format!("w {w} must map n = {n} to 1..={n} columns (Stiefel, m <= n)"),
                    ));
                }
            }
            Ok(x.with_dims(vec![x.dims[0].clone(), m.clone(), m.clone()]))
        }
        SpdOp::BatchNorm => {
            rank_is(op, x, 3, "x")?;
            let n = square(op, x, "x")?;
            let bias = inputs[1];
            rank_is(op, bias, 2, "bias")?;
            same_dtype(op, x, bias)?;
            dims_equal(op, &bias.dims[0], n, "bias size vs matrix size n")?;
            dims_equal(op, &bias.dims[1], n, "bias size vs matrix size n")?;
            Ok(x.clone())
        }
        SpdOp::KarcherMean => {
            rank_is(op, x, 3, "x")?;
            let n = square(op, x, "x")?;
            Ok(x.with_dims(vec![n.clone(), n.clone()]))
        }
    }
}

/// Check the splat configuration: sizes > 0, thresholds in range.
fn splat_config(op: &Op, cfg: &SplatConfig) -> Result<()> {
    for (v, what) in [
        (cfg.width, "width"),
        (cfg.height, "height"),
        (cfg.tile_size, "tile_size"),
        (cfg.max_splat_steps, "max_splat_steps"),
        (cfg.max_list_entries, "max_list_entries"),
    ] {
        positive(op, v as usize, what)?;
    }
    finite(op, cfg.radius_scale, "radius_scale")?;
    if cfg.radius_scale <= 0.0 {
        return Err(IrError::attr(
            op.name(),
            format!("radius_scale must be > 0, got {}", cfg.radius_scale),
        ));
    }
    for (v, what) in [
        (cfg.alpha_cutoff, "alpha_cutoff"),
        (cfg.transmittance_threshold, "transmittance_threshold"),
    ] {
        if !(0.0..1.0).contains(&v) {
            return Err(IrError::attr(
                op.name(),
                format!("{what} must lie in [0, 1), got {v}"),
            ));
        }
    }
    Ok(())
}

/// Fail unless `camera` is a `[20]` float of `like`'s dtype.
fn camera_shape(op: &Op, camera: &Shape, like: &Shape) -> Result<()> {
    rank_is(op, camera, 1, "camera")?;
    same_dtype(op, like, camera)?;
    dim_is(op, &camera.dims[0], 20, "camera length")
}

/// The rendered image `[height, width, 3]`.
fn image(cfg: &SplatConfig, dtype: DType) -> Shape {
    Shape::of(&[cfg.height as usize, cfg.width as usize, 3], dtype)
}

/// Check the seven operands of the render / prepare ops and the config;
/// returns the number of SH coefficients `k` per splat (static).
pub(super) fn splat_operands(op: &Op, inputs: &[&Shape], cfg: &SplatConfig) -> Result<usize> {
    arity(op, inputs, 7)?;
    splat_config(op, cfg)?;
    let pos = inputs[0];
    rank_is(op, pos, 2, "positions")?;
    float_dtype(op, pos, "positions")?;
    let g = &pos.dims[0];
    let per_splat = [
        ("positions", 3usize),
        ("scales", 3),
        ("rotations", 4),
        ("opacities", 0),
        ("colors", 3),
    ];
    for (i, (what, width)) in per_splat.into_iter().enumerate() {
        let s = inputs[i];
        same_dtype(op, pos, s)?;
        let rank = if width == 0 { 1 } else { 2 };
        rank_is(op, s, rank, what)?;
        dims_equal(op, &s.dims[0], g, &format!("{what} rows vs splat count"))?;
        if width > 0 {
            dim_is(op, &s.dims[1], width, &format!("{what} dim 1"))?;
        }
    }
    let sh = inputs[5];
    same_dtype(op, pos, sh)?;
    rank_is(op, sh, 3, "sh")?;
    dims_equal(op, &sh.dims[0], g, "sh rows vs splat count")?;
    let k = static_dim(op, &sh.dims[1], "sh coefficients per splat")?;
    dim_is(op, &sh.dims[2], 3, "sh dim 2")?;
    camera_shape(op, inputs[6], pos)?;
    Ok(k)
}
