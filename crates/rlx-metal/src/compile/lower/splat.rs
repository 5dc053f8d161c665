//! Lowering of the Gaussian-splat ops: `GaussianSplatRender` →
//! [`GaussianSplatRender`], `GaussianSplatPrepare` → [`GaussianSplatPrepare`],
//! `GaussianSplatRasterize` → [`GaussianSplatRasterize`] and
//! `GaussianSplatRenderBackward` → [`GaussianSplatRenderBackward`].
//!
//! The thunks compute on f32 operands; other float dtypes are converted into
//! f32 scratch and the result is cast back. Lengths are element counts.

use super::elementwise::push_cast;
use super::{converted, numel, Ctx};
use crate::compile::error::CompileError;
use crate::thunk::splat::{
    GaussianSplatPrepare, GaussianSplatRasterize, GaussianSplatRender, GaussianSplatRenderBackward,
    CAMERA_META_ELEMS,
};
use rlx_ir::op::SplatConfig;
use rlx_ir::{DType, Op};

/// A splat thunk `$T` over the seven f32 operands `$o` with the shared
/// config fields of `$cfg`, plus the variant's own fields.
macro_rules! splat_thunk {
    ($T:ident, $o:expr, $cfg:expr, { $($f:ident: $v:expr),* $(,)? }) => {
        $T {
            positions_off: $o[0].0,
            positions_len: $o[0].1,
            scales_off: $o[1].0,
            scales_len: $o[1].1,
            rotations_off: $o[2].0,
            rotations_len: $o[2].1,
            opacities_off: $o[3].0,
            opacities_len: $o[3].1,
            colors_off: $o[4].0,
            colors_len: $o[4].1,
            sh_coeffs_off: $o[5].0,
            sh_coeffs_len: $o[5].1,
            meta_off: $o[6].0,
            width: $cfg.width,
            height: $cfg.height,
            tile_size: $cfg.tile_size,
            radius_scale: $cfg.radius_scale,
            alpha_cutoff: $cfg.alpha_cutoff,
            max_splat_steps: $cfg.max_splat_steps,
            transmittance_threshold: $cfg.transmittance_threshold,
            max_list_entries: $cfg.max_list_entries,
            $($f: $v),*
        }
    };
}

/// Lower one splat op.
pub(super) fn lower(ctx: &mut Ctx<'_>, op: &Op) -> Result<(), CompileError> {
    match op {
        Op::GaussianSplatRender { cfg } => {
            let o = operands(ctx)?;
            let (dst, n) = target(ctx)?;
            ctx.push(splat_thunk!(GaussianSplatRender, o, cfg, {
                dst_off: dst,
                dst_len: n,
            }));
            finish(ctx, dst)
        }
        Op::GaussianSplatPrepare { cfg } => {
            let o = operands(ctx)?;
            let (dst, n) = target(ctx)?;
            ctx.push(splat_thunk!(GaussianSplatPrepare, o, cfg, {
                meta_len: o[6].1,
                prep_off: dst,
                prep_len: n,
            }));
            finish(ctx, dst)
        }
        Op::GaussianSplatRasterize { cfg } => rasterize(ctx, cfg),
        Op::GaussianSplatRenderBackward {
            cfg,
            loss_grad_clip,
            sh_band,
            max_anisotropy,
        } => {
            let o = operands(ctx)?;
            let d_loss = converted(ctx, 7, DType::F32)?;
            let dl_len = numel(&ctx.in_dims(7));
            let (dst, n) = target(ctx)?;
            ctx.push(splat_thunk!(GaussianSplatRenderBackward, o, cfg, {
                d_loss_off: d_loss,
                d_loss_len: dl_len,
                packed_off: dst,
                packed_len: n,
                loss_grad_clip: *loss_grad_clip,
                sh_band: *sh_band,
                max_anisotropy: *max_anisotropy,
            }));
            finish(ctx, dst)
        }
        other => Err(ctx.unsupported(format!("{} is not a splat op", other.name()))),
    }
}

fn rasterize(ctx: &mut Ctx<'_>, cfg: &SplatConfig) -> Result<(), CompileError> {
    let count = ctx.in_dims(0)[0];
    let prep = converted(ctx, 0, DType::F32)?;
    let prep_len = numel(&ctx.in_dims(0));
    let meta = converted(ctx, 1, DType::F32)?;
    let (dst, dst_len) = target(ctx)?;
    ctx.push(GaussianSplatRasterize {
        prep_off: prep,
        prep_len,
        meta_off: meta,
        meta_len: CAMERA_META_ELEMS,
        dst_off: dst,
        dst_len,
        count,
        width: cfg.width,
        height: cfg.height,
        tile_size: cfg.tile_size,
        alpha_cutoff: cfg.alpha_cutoff,
        max_splat_steps: cfg.max_splat_steps,
        transmittance_threshold: cfg.transmittance_threshold,
        max_list_entries: cfg.max_list_entries,
    });
    finish(ctx, dst)
}

/// `(offset, elements)` of the seven render operands as f32.
fn operands(ctx: &mut Ctx<'_>) -> Result<[(usize, usize); 7], CompileError> {
    let mut out = [(0usize, 0usize); 7];
    for (i, o) in out.iter_mut().enumerate() {
        *o = (converted(ctx, i, DType::F32)?, numel(&ctx.in_dims(i)));
    }
    Ok(out)
}

/// The thunk's f32 result: the node's value, or scratch that [`finish`]
/// casts when the node is not f32. Returns `(offset, elements)`.
fn target(ctx: &mut Ctx<'_>) -> Result<(usize, usize), CompileError> {
    let n = numel(&ctx.out_dims());
    if ctx.out_shape().dtype == DType::F32 {
        return Ok((ctx.out(), n));
    }
    let bytes = n
        .checked_mul(4)
        .ok_or_else(|| ctx.unsupported("result size overflows"))?;
    Ok((ctx.scratch(bytes), n))
}

/// Cast the f32 scratch `tmp` into the node's value when [`target`] used it.
fn finish(ctx: &mut Ctx<'_>, tmp: usize) -> Result<(), CompileError> {
    let out = ctx.out_shape().dtype;
    if out != DType::F32 {
        let len = ctx.u32(numel(&ctx.out_dims()), "elements")?;
        push_cast(ctx, tmp, DType::F32, ctx.out(), out, len);
    }
    Ok(())
}

#[cfg(test)]
#[path = "splat_tests.rs"]
mod tests;
