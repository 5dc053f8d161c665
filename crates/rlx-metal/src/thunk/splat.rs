//! 3-D Gaussian splatting host thunks: render, its gradient, and the
//! two-stage prepare / rasterize split.
//!
//! Every `*_len` field is an f32 *element* count of the operand at the
//! matching `*_off`. The camera block (`meta_off`) of render and its
//! gradient has no length field: it is [`CAMERA_META_ELEMS`] f32.

use super::io::{nbytes, ThunkIo, F32};
use super::offsets::Off;
use super::ThunkOp;
use serde::{Deserialize, Serialize};
use std::fmt;

/// f32 elements of the camera block (view, projection terms, image size).
pub const CAMERA_META_ELEMS: usize = 20;

/// A [`ThunkIo`] reading the six per-splat parameter tensors of a splat
/// thunk (`positions` .. `sh_coeffs`), in order.
macro_rules! splat_params {
    ($t:expr) => {
        [
            ($t.positions_off, $t.positions_len),
            ($t.scales_off, $t.scales_len),
            ($t.rotations_off, $t.rotations_len),
            ($t.opacities_off, $t.opacities_len),
            ($t.colors_off, $t.colors_len),
            ($t.sh_coeffs_off, $t.sh_coeffs_len),
        ]
        .into_iter()
        .fold(ThunkIo::new(), |io, (off, len)| {
            io.read(off, nbytes(len, F32))
        })
    };
}

/// Splat forward: per-splat parameters and camera → image `dst_len` f32
/// (`[height, width, 3]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GaussianSplatRender {
    /// Positions `[g, 3]`.
    pub positions_off: usize,
    /// Positions elements.
    pub positions_len: usize,
    /// Scales `[g, 3]`.
    pub scales_off: usize,
    /// Scales elements.
    pub scales_len: usize,
    /// Rotations `[g, 4]`.
    pub rotations_off: usize,
    /// Rotations elements.
    pub rotations_len: usize,
    /// Opacities `[g]`.
    pub opacities_off: usize,
    /// Opacities elements.
    pub opacities_len: usize,
    /// Colors `[g, 3]`.
    pub colors_off: usize,
    /// Colors elements.
    pub colors_len: usize,
    /// SH coefficients `[g, k, 3]`.
    pub sh_coeffs_off: usize,
    /// SH coefficient elements.
    pub sh_coeffs_len: usize,
    /// Camera block (20 f32).
    pub meta_off: usize,
    /// Image.
    pub dst_off: usize,
    /// Image elements.
    pub dst_len: usize,
    /// Image width.
    pub width: u32,
    /// Image height.
    pub height: u32,
    /// Tile edge.
    pub tile_size: u32,
    /// Extent in standard deviations.
    pub radius_scale: f32,
    /// Minimum contributing alpha.
    pub alpha_cutoff: f32,
    /// Most splats blended per pixel.
    pub max_splat_steps: u32,
    /// Stop blending below this transmittance.
    pub transmittance_threshold: f32,
    /// Tile-list capacity.
    pub max_list_entries: u32,
}

impl ThunkOp for GaussianSplatRender {
    const NAME: &'static str = "gaussian_splat_render";
    fn io(&self) -> ThunkIo {
        splat_params!(self)
            .read(self.meta_off, nbytes(CAMERA_META_ELEMS, F32))
            .write(self.dst_off, nbytes(self.dst_len, F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}x{} tile={} splats={} pos={} dst={}",
            self.width,
            self.height,
            self.tile_size,
            self.opacities_len,
            Off(self.positions_off),
            Off(self.dst_off)
        )
    }
}

/// Splat gradient: the render's operands plus `d_loss` → packed per-splat
/// gradients (`packed_len` f32).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GaussianSplatRenderBackward {
    /// Positions.
    pub positions_off: usize,
    /// Positions elements.
    pub positions_len: usize,
    /// Scales.
    pub scales_off: usize,
    /// Scales elements.
    pub scales_len: usize,
    /// Rotations.
    pub rotations_off: usize,
    /// Rotations elements.
    pub rotations_len: usize,
    /// Opacities.
    pub opacities_off: usize,
    /// Opacities elements.
    pub opacities_len: usize,
    /// Colors.
    pub colors_off: usize,
    /// Colors elements.
    pub colors_len: usize,
    /// SH coefficients.
    pub sh_coeffs_off: usize,
    /// SH coefficient elements.
    pub sh_coeffs_len: usize,
    /// Camera block (20 f32).
    pub meta_off: usize,
    /// Image gradient `[height, width, 3]`.
    pub d_loss_off: usize,
    /// Image gradient elements.
    pub d_loss_len: usize,
    /// Packed per-splat gradients.
    pub packed_off: usize,
    /// Packed gradient elements.
    pub packed_len: usize,
    /// Image width.
    pub width: u32,
    /// Image height.
    pub height: u32,
    /// Tile edge.
    pub tile_size: u32,
    /// Extent in standard deviations.
    pub radius_scale: f32,
    /// Minimum contributing alpha.
    pub alpha_cutoff: f32,
    /// Most splats blended per pixel.
    pub max_splat_steps: u32,
    /// Stop blending below this transmittance.
    pub transmittance_threshold: f32,
    /// Tile-list capacity.
    pub max_list_entries: u32,
    /// Clip on |d_loss|.
    pub loss_grad_clip: f32,
    /// Spherical-harmonics band used.
    pub sh_band: u32,
    /// Largest allowed scale ratio.
    pub max_anisotropy: f32,
}

impl ThunkOp for GaussianSplatRenderBackward {
    const NAME: &'static str = "gaussian_splat_render_backward";
    fn io(&self) -> ThunkIo {
        splat_params!(self)
            .read(self.meta_off, nbytes(CAMERA_META_ELEMS, F32))
            .read(self.d_loss_off, nbytes(self.d_loss_len, F32))
            .write(self.packed_off, nbytes(self.packed_len, F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}x{} tile={} splats={} sh_band={} d_loss={} packed={}",
            self.width,
            self.height,
            self.tile_size,
            self.opacities_len,
            self.sh_band,
            Off(self.d_loss_off),
            Off(self.packed_off)
        )
    }
}

/// Per-splat screen-space preparation: parameters + `meta_len` f32 of
/// camera → `prep_len` f32 (`[g, 16]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GaussianSplatPrepare {
    /// Positions.
    pub positions_off: usize,
    /// Positions elements.
    pub positions_len: usize,
    /// Scales.
    pub scales_off: usize,
    /// Scales elements.
    pub scales_len: usize,
    /// Rotations.
    pub rotations_off: usize,
    /// Rotations elements.
    pub rotations_len: usize,
    /// Opacities.
    pub opacities_off: usize,
    /// Opacities elements.
    pub opacities_len: usize,
    /// Colors.
    pub colors_off: usize,
    /// Colors elements.
    pub colors_len: usize,
    /// SH coefficients.
    pub sh_coeffs_off: usize,
    /// SH coefficient elements.
    pub sh_coeffs_len: usize,
    /// Camera block.
    pub meta_off: usize,
    /// Camera block elements.
    pub meta_len: usize,
    /// Prepared splats.
    pub prep_off: usize,
    /// Prepared elements.
    pub prep_len: usize,
    /// Image width.
    pub width: u32,
    /// Image height.
    pub height: u32,
    /// Tile edge.
    pub tile_size: u32,
    /// Extent in standard deviations.
    pub radius_scale: f32,
    /// Minimum contributing alpha.
    pub alpha_cutoff: f32,
    /// Most splats blended per pixel.
    pub max_splat_steps: u32,
    /// Stop blending below this transmittance.
    pub transmittance_threshold: f32,
    /// Tile-list capacity.
    pub max_list_entries: u32,
}

impl ThunkOp for GaussianSplatPrepare {
    const NAME: &'static str = "gaussian_splat_prepare";
    fn io(&self) -> ThunkIo {
        splat_params!(self)
            .read(self.meta_off, nbytes(self.meta_len, F32))
            .write(self.prep_off, nbytes(self.prep_len, F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}x{} splats={} pos={} prep={}",
            self.width,
            self.height,
            self.opacities_len,
            Off(self.positions_off),
            Off(self.prep_off)
        )
    }
}

/// Rasterise `count` prepared splats: `prep_len` + `meta_len` f32 →
/// image `dst_len` f32.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GaussianSplatRasterize {
    /// Prepared splats.
    pub prep_off: usize,
    /// Prepared elements.
    pub prep_len: usize,
    /// Camera block.
    pub meta_off: usize,
    /// Camera block elements.
    pub meta_len: usize,
    /// Image.
    pub dst_off: usize,
    /// Image elements.
    pub dst_len: usize,
    /// Splats.
    pub count: usize,
    /// Image width.
    pub width: u32,
    /// Image height.
    pub height: u32,
    /// Tile edge.
    pub tile_size: u32,
    /// Minimum contributing alpha.
    pub alpha_cutoff: f32,
    /// Most splats blended per pixel.
    pub max_splat_steps: u32,
    /// Stop blending below this transmittance.
    pub transmittance_threshold: f32,
    /// Tile-list capacity.
    pub max_list_entries: u32,
}

impl ThunkOp for GaussianSplatRasterize {
    const NAME: &'static str = "gaussian_splat_rasterize";
    fn io(&self) -> ThunkIo {
        ThunkIo::new()
            .read(self.prep_off, nbytes(self.prep_len, F32))
            .read(self.meta_off, nbytes(self.meta_len, F32))
            .write(self.dst_off, nbytes(self.dst_len, F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}x{} splats={} prep={} dst={}",
            self.width,
            self.height,
            self.count,
            Off(self.prep_off),
            Off(self.dst_off)
        )
    }
}
