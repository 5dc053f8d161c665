//! Gaussian splats → `splat.metal`: `GaussianSplatPrepare` →
//! `splat_prepare_f32` (one thread per splat), `GaussianSplatRasterize` →
//! `splat_rasterize_f32` (one thread per pixel), `GaussianSplatRenderBackward`
//! → `splat_render_backward_f32` (one thread per splat, any splat count).
//! The fused render stays on the host (the seed runs it there). Operands
//! whose lengths do not match the splat count, and aliased operands, also
//! stay on the host, whose kernels report the error.

use super::{aliased, elementwise, kernel, Lowered};
use crate::metal::args::{SplatArgs, SplatBwdArgs};
use crate::metal::kernels::Family;
use crate::thunk::Thunk;

/// The kernel arguments; `None` for a zero tile edge or a count past u32.
#[allow(clippy::too_many_arguments)]
fn args(
    count: usize,
    sh_coeffs: usize,
    (width, height, tile_size): (u32, u32, u32),
    max_splat_steps: u32,
    max_list_entries: u32,
    radius_scale: f32,
    alpha_cutoff: f32,
    transmittance_threshold: f32,
) -> Option<SplatArgs> {
    if tile_size == 0 {
        return None;
    }
    Some(SplatArgs {
        count: u32::try_from(count).ok()?,
        sh_coeffs: u32::try_from(sh_coeffs).ok()?,
        width,
        height,
        tile_size,
        tiles_x: width.div_ceil(tile_size),
        tiles_y: height.div_ceil(tile_size),
        max_splat_steps,
        max_list_entries,
        radius_scale,
        alpha_cutoff,
        transmittance_threshold,
    })
}

/// The dispatch of one splat thunk, `None` for the host.
pub(super) fn lower(i: usize, t: &Thunk) -> Option<Lowered> {
    match t {
        Thunk::GaussianSplatPrepare(x) => {
            let g = x.opacities_len;
            let k = x.sh_coeffs_len.checked_div(g.checked_mul(3)?).unwrap_or(0);
            let lens_ok = [
                (x.positions_len, 3),
                (x.scales_len, 3),
                (x.rotations_len, 4),
                (x.colors_len, 3),
                (x.sh_coeffs_len, 3 * k),
                (x.prep_len, 16),
            ]
            .iter()
            .all(|&(len, w)| g.checked_mul(w) == Some(len));
            if !lens_ok || x.meta_len < 20 || aliased(t) {
                return None;
            }
            if g == 0 {
                return Some(Lowered::Skip);
            }
            let args = args(
                g,
                k,
                (x.width, x.height, x.tile_size),
                x.max_splat_steps,
                x.max_list_entries,
                x.radius_scale,
                x.alpha_cutoff,
                x.transmittance_threshold,
            )?;
            let offs = [
                x.positions_off,
                x.scales_off,
                x.rotations_off,
                x.opacities_off,
                x.colors_off,
                x.sh_coeffs_off,
                x.meta_off,
                x.prep_off,
            ];
            let k = kernel(Family::Splat, "splat_prepare_f32".into());
            Some(Lowered::Dispatch(elementwise(
                i, k, &args, &offs, args.count,
            )))
        }
        Thunk::GaussianSplatRasterize(x) => {
            let pixels = x.width.checked_mul(x.height)?;
            let ok = x.count.checked_mul(16) == Some(x.prep_len)
                && (pixels as usize).checked_mul(3) == Some(x.dst_len);
            if !ok || aliased(t) {
                return None;
            }
            // the rasterizer reads radii from the records
            let args = args(
                x.count,
                0,
                (x.width, x.height, x.tile_size),
                x.max_splat_steps,
                x.max_list_entries,
                0.0,
                x.alpha_cutoff,
                x.transmittance_threshold,
            )?;
            let k = kernel(Family::Splat, "splat_rasterize_f32".into());
            let offs = [x.prep_off, x.dst_off];
            Some(Lowered::Dispatch(elementwise(i, k, &args, &offs, pixels)))
        }
        Thunk::GaussianSplatRenderBackward(x) => {
            let g = x.opacities_len;
            let k = x.sh_coeffs_len.checked_div(g.checked_mul(3)?).unwrap_or(0);
            let pixels = x.width.checked_mul(x.height)?;
            let lens_ok = [
                (x.positions_len, 3),
                (x.scales_len, 3),
                (x.rotations_len, 4),
                (x.colors_len, 3),
                (x.sh_coeffs_len, 3 * k),
                (x.packed_len, 14 + 3 * k),
            ]
            .iter()
            .all(|&(len, w)| g.checked_mul(w) == Some(len))
                && (pixels as usize).checked_mul(3) == Some(x.d_loss_len);
            if !lens_ok || aliased(t) {
                return None;
            }
            if g == 0 {
                return Some(Lowered::Skip);
            }
            let s = args(
                g,
                k,
                (x.width, x.height, x.tile_size),
                x.max_splat_steps,
                x.max_list_entries,
                x.radius_scale,
                x.alpha_cutoff,
                x.transmittance_threshold,
            )?;
            let args = SplatBwdArgs {
                s,
                loss_grad_clip: x.loss_grad_clip,
                sh_band: x.sh_band,
            };
            let offs = [
                x.positions_off,
                x.scales_off,
                x.rotations_off,
                x.opacities_off,
                x.colors_off,
                x.sh_coeffs_off,
                x.meta_off,
                x.d_loss_off,
                x.packed_off,
            ];
            let k = kernel(Family::Splat, "splat_render_backward_f32".into());
            Some(Lowered::Dispatch(elementwise(
                i,
                k,
                &args,
                &offs,
                args.s.count,
            )))
        }
        _ => None,
    }
}
