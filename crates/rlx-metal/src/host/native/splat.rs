//! Native glue for the Gaussian-splat thunks onto
//! [`crate::host::kernels::splat`] and [`crate::host::kernels::splat_backward`].
//!
//! The thunks carry element counts; the splat count `g` is the opacities'
//! length and `k` follows from the SH length. Every result is computed into
//! a private buffer and copied out after the reads, so an output that
//! overlapped an operand could never alias it.

use super::NResult;
use crate::host::buffer::Mem;
use crate::host::kernels::splat::{self as k, SplatDims, SplatParams, CAMERA_LEN, PREP_WIDTH};
use crate::host::kernels::splat_backward::{self as kb, BackwardOpts};
use crate::host::kernels::{invalid, KernelError};
use crate::thunk::Thunk;

pub(super) fn handles(t: &Thunk) -> bool {
    matches!(
        t,
        Thunk::GaussianSplatRender(_)
            | Thunk::GaussianSplatRenderBackward(_)
            | Thunk::GaussianSplatPrepare(_)
            | Thunk::GaussianSplatRasterize(_)
    )
}

/// The shared config fields of every splat thunk.
struct Cfg {
    width: u32,
    height: u32,
    tile_size: u32,
    radius_scale: f32,
    alpha_cutoff: f32,
    max_splat_steps: u32,
    transmittance_threshold: f32,
    max_list_entries: u32,
}

impl Cfg {
    fn dims(&self, splats: usize, sh_coeffs: usize) -> SplatDims {
        SplatDims {
            splats,
            sh_coeffs,
            width: self.width as usize,
            height: self.height as usize,
            tile_size: self.tile_size as usize,
            radius_scale: self.radius_scale,
            alpha_cutoff: self.alpha_cutoff,
            max_splat_steps: self.max_splat_steps as usize,
            transmittance_threshold: self.transmittance_threshold,
            max_list_entries: self.max_list_entries as usize,
        }
    }
}

macro_rules! cfg_of {
    ($x:expr) => {
        cfg_of!($x, $x.radius_scale)
    };
    ($x:expr, $radius:expr) => {
        Cfg {
            width: $x.width,
            height: $x.height,
            tile_size: $x.tile_size,
            radius_scale: $radius,
            alpha_cutoff: $x.alpha_cutoff,
            max_splat_steps: $x.max_splat_steps,
            transmittance_threshold: $x.transmittance_threshold,
            max_list_entries: $x.max_list_entries,
        }
    };
}

/// `(off, len)` of the six parameter operands in order.
type Operands = [(usize, usize); 6];

macro_rules! operands_of {
    ($x:expr) => {
        [
            ($x.positions_off, $x.positions_len),
            ($x.scales_off, $x.scales_len),
            ($x.rotations_off, $x.rotations_len),
            ($x.opacities_off, $x.opacities_len),
            ($x.colors_off, $x.colors_len),
            ($x.sh_coeffs_off, $x.sh_coeffs_len),
        ]
    };
}

/// The splat count and SH coefficients per splat, checked against every length.
fn counts(kernel: &'static str, ops: &Operands) -> Result<(usize, usize), KernelError> {
    let g = ops[3].1;
    for (i, (what, w)) in [
        ("positions", 3),
        ("scales", 3),
        ("rotations", 4),
        ("colors", 3),
    ]
    .into_iter()
    .enumerate()
    {
        let len = ops[if i == 3 { 4 } else { i }].1;
        if Some(len) != g.checked_mul(w) {
            return Err(invalid(
                kernel,
                format!("{what} has {len} elements, expected {w} per splat for {g} splats"),
            ));
        }
    }
    let sh = ops[5].1;
    let per = g.checked_mul(3).unwrap_or(0);
    if g == 0 {
        return Ok((0, 0));
    }
    if per == 0 || !sh.is_multiple_of(per) {
        return Err(invalid(
            kernel,
            format!("sh has {sh} elements, not a multiple of 3 per splat for {g} splats"),
        ));
    }
    Ok((g, sh / per))
}

fn params<'a>(
    mem: &'a Mem,
    ops: &Operands,
) -> Result<SplatParams<'a>, crate::host::buffer::MemError> {
    Ok(SplatParams {
        positions: mem.get("positions", ops[0].0, ops[0].1)?,
        scales: mem.get("scales", ops[1].0, ops[1].1)?,
        rotations: mem.get("rotations", ops[2].0, ops[2].1)?,
        opacities: mem.get("opacities", ops[3].0, ops[3].1)?,
        colors: mem.get("colors", ops[4].0, ops[4].1)?,
        sh: mem.get("sh", ops[5].0, ops[5].1)?,
    })
}

/// Copy `out` into the arena at `off`.
fn store(mem: &Mem, what: &'static str, off: usize, out: &[f32]) -> NResult {
    mem.get_mut::<f32>(what, off, out.len())?
        .copy_from_slice(out);
    Ok(())
}

pub(super) fn run(t: &Thunk, mem: &Mem) -> NResult {
    match t {
        Thunk::GaussianSplatRender(x) => {
            let ops = operands_of!(x);
            let (g, kc) = counts("gaussian_splat_render", &ops)?;
            let d = cfg_of!(x).dims(g, kc);
            let mut out = vec![0.0f32; x.dst_len];
            let meta = mem.get::<f32>("camera", x.meta_off, CAMERA_LEN)?;
            k::render(&params(mem, &ops)?, meta, &d, &mut out)?;
            store(mem, "dst", x.dst_off, &out)
        }
        Thunk::GaussianSplatPrepare(x) => {
            let ops = operands_of!(x);
            let (g, kc) = counts("gaussian_splat_prepare", &ops)?;
            let d = cfg_of!(x).dims(g, kc);
            let mut out = vec![0.0f32; x.prep_len];
            let meta = mem.get::<f32>("camera", x.meta_off, x.meta_len)?;
            k::prepare(&params(mem, &ops)?, meta, &d, &mut out)?;
            store(mem, "prep", x.prep_off, &out)
        }
        Thunk::GaussianSplatRasterize(x) => {
            let need = x.count.checked_mul(PREP_WIDTH);
            if need != Some(x.prep_len) {
                return Err(invalid(
                    "gaussian_splat_rasterize",
                    format!(
                        "prep has {} elements, expected {} × 16",
                        x.prep_len, x.count
                    ),
                )
                .into());
            }
            // the rasterizer reads radii from the records
            let d = cfg_of!(x, 1.0).dims(x.count, 0);
            let mut out = vec![0.0f32; x.dst_len];
            k::rasterize(mem.get("prep", x.prep_off, x.prep_len)?, &d, &mut out)?;
            store(mem, "dst", x.dst_off, &out)
        }
        Thunk::GaussianSplatRenderBackward(x) => {
            let ops = operands_of!(x);
            let (g, kc) = counts("gaussian_splat_render_backward", &ops)?;
            let d = cfg_of!(x).dims(g, kc);
            let mut out = vec![0.0f32; x.packed_len];
            let meta = mem.get::<f32>("camera", x.meta_off, CAMERA_LEN)?;
            let opts = BackwardOpts {
                loss_grad_clip: x.loss_grad_clip,
                sh_band: x.sh_band,
            };
            let dl = mem.get::<f32>("d_loss", x.d_loss_off, x.d_loss_len)?;
            kb::render_backward(&params(mem, &ops)?, meta, dl, &d, opts, &mut out)?;
            store(mem, "packed", x.packed_off, &out)
        }
        _ => Err(invalid("splat", format!("not a splat thunk: {t}")).into()),
    }
}
