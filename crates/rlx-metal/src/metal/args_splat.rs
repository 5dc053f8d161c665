//! Argument struct of `splat.metal` (mirrored in `kernels/args.h`).

use super::KernelArgs;

/// `SplatArgs`: Gaussian-splat prepare (one thread per splat) and
/// rasterize (one thread per pixel).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SplatArgs {
    /// Splats `g`.
    pub count: u32,
    /// SH coefficients per splat `k`.
    pub sh_coeffs: u32,
    /// Image width.
    pub width: u32,
    /// Image height.
    pub height: u32,
    /// Tile edge.
    pub tile_size: u32,
    /// Tiles across.
    pub tiles_x: u32,
    /// Tiles down.
    pub tiles_y: u32,
    /// Most splats blended per pixel (0 = unlimited).
    pub max_splat_steps: u32,
    /// Entry-list capacity (0 = unlimited).
    pub max_list_entries: u32,
    /// Extent in standard deviations.
    pub radius_scale: f32,
    /// Minimum contributing alpha.
    pub alpha_cutoff: f32,
    /// Stop before the transmittance falls below this.
    pub transmittance_threshold: f32,
}

/// `SplatBwdArgs`: the Gaussian-splat render backward (one thread per splat).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SplatBwdArgs {
    /// The render's sizes and settings (`radius_scale` included).
    pub s: SplatArgs,
    /// Clip on `|d_loss|` (≤ 0: no clip).
    pub loss_grad_clip: f32,
    /// Highest SH band that receives a gradient.
    pub sh_band: u32,
}

kernel_args! {
    SplatArgs = 48,
    SplatBwdArgs = 56,
}
