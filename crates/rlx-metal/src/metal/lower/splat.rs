//! Gaussian splats → `splat.metal`: `GaussianSplatPrepare` →
//! `splat_prepare_f32` (one thread per splat), `GaussianSplatRasterize` →
//! `splat_rasterize_f32` (one thread per pixel). The fused render and its
//! gradient stay on the host (the seed runs the render there; the gradient
//! needs a cross-pixel reduction per splat). Operands whose lengths do not
//! match the splat count, and aliased operands, also stay on the host,
//! whose kernels report the error.

use super::{aliased, elementwise, kernel, Lowered};
use crate::metal::args::SplatArgs;
use crate::metal::kernels::Family;
use crate::thunk::Thunk;

/// Tiles across / down, `None` for a zero tile edge.
fn tiles(width: u32, height: u32, ts: u32) -> Option<(u32, u32)> {
    (ts > 0).then(|| (width.div_ceil(ts), height.div_ceil(ts)))
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
            let (tiles_x, tiles_y) = tiles(x.width, x.height, x.tile_size)?;
            let args = SplatArgs {
                count: u32::try_from(g).ok()?,
                sh_coeffs: u32::try_from(k).ok()?,
                width: x.width,
                height: x.height,
                tile_size: x.tile_size,
                tiles_x,
                tiles_y,
                max_splat_steps: x.max_splat_steps,
                max_list_entries: x.max_list_entries,
                radius_scale: x.radius_scale,
                alpha_cutoff: x.alpha_cutoff,
                transmittance_threshold: x.transmittance_threshold,
            };
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
            let (tiles_x, tiles_y) = tiles(x.width, x.height, x.tile_size)?;
            let args = SplatArgs {
                count: u32::try_from(x.count).ok()?,
                sh_coeffs: 0,
                width: x.width,
                height: x.height,
                tile_size: x.tile_size,
                tiles_x,
                tiles_y,
                max_splat_steps: x.max_splat_steps,
                max_list_entries: x.max_list_entries,
                radius_scale: 0.0,
                alpha_cutoff: x.alpha_cutoff,
                transmittance_threshold: x.transmittance_threshold,
            };
            let k = kernel(Family::Splat, "splat_rasterize_f32".into());
            let offs = [x.prep_off, x.dst_off];
            Some(Lowered::Dispatch(elementwise(i, k, &args, &offs, pixels)))
        }
        _ => None,
    }
}
