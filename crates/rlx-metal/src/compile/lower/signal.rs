//! Lowering of the signal family: `Fft` → [`Fft1d`], `LogMel` → [`LogMel`],
//! `WelchPeaks` → [`WelchPeaks`].
//!
//! The thunks compute on f32 spectra (Fft1d also on f16 / f64 and on `c64`
//! rows, which it reads and writes as interleaved `[re, im]` pairs); other
//! float dtypes are converted into f32 scratch and the result cast back.

use super::elementwise::push_cast;
use super::{converted, numel, Ctx};
use crate::compile::error::CompileError;
use crate::thunk::signal::{Fft1d, LogMel, WelchPeaks};
use rlx_ir::{DType, Op};

pub(super) fn lower(ctx: &mut Ctx<'_>, op: &Op) -> Result<(), CompileError> {
    match op {
        Op::Fft { inverse, norm } => fft(ctx, *inverse, norm.tag()),
        Op::LogMel { n_fft } => log_mel(ctx, *n_fft),
        Op::WelchPeaks {
            n_fft,
            n_segments,
            k,
        } => welch(ctx, *n_fft, *n_segments, *k),
        other => Err(ctx.unsupported(format!("{} is not a forward signal op", other.name()))),
    }
}

/// The thunk's result goes to the node's value when it already has `want`'s
/// dtype, otherwise to f32 scratch that [`finish`] casts.
fn target(ctx: &mut Ctx<'_>, want: DType) -> Result<usize, CompileError> {
    let out = ctx.out_shape().dtype;
    if out == want {
        return Ok(ctx.out());
    }
    let n = numel(&ctx.out_dims());
    let bytes = n
        .checked_mul(want.size_bytes())
        .ok_or_else(|| ctx.unsupported("result size overflows"))?;
    Ok(ctx.scratch(bytes))
}

/// Cast `tmp` (dtype `from`) into the node's value when [`target`] used scratch.
fn finish(ctx: &mut Ctx<'_>, tmp: usize, from: DType) -> Result<(), CompileError> {
    let out = ctx.out_shape().dtype;
    if out != from {
        let len = ctx.u32(numel(&ctx.out_dims()), "elements")?;
        push_cast(ctx, tmp, from, ctx.out(), out, len);
    }
    Ok(())
}

fn fft(ctx: &mut Ctx<'_>, inverse: bool, norm_tag: u32) -> Result<(), CompileError> {
    let dims = ctx.in_dims(0);
    let dtype = ctx.in_shape(0).dtype;
    let last = *dims
        .last()
        .ok_or_else(|| ctx.unsupported("input must have rank ≥ 1"))?;
    let outer = ctx.u32(numel(&dims) / last.max(1), "rows")?;
    // the thunk's element type: native for f32 / f16 / f64 / c64, f32 otherwise
    let (thunk_dt, n) = match dtype {
        DType::C64 => (DType::C64, last),
        DType::F32 | DType::F16 | DType::F64 => (dtype, last / 2),
        _ => (DType::F32, last / 2),
    };
    let src = converted(ctx, 0, thunk_dt)?;
    let dst = target(ctx, thunk_dt)?;
    ctx.push(Fft1d {
        src,
        dst,
        outer,
        n_complex: ctx.u32(n, "n")?,
        inverse,
        norm_tag,
        dtype: thunk_dt,
        real_input: false,
    });
    finish(ctx, dst, thunk_dt)
}

fn log_mel(ctx: &mut Ctx<'_>, n_fft: usize) -> Result<(), CompileError> {
    let sd = ctx.in_dims(0);
    let fd = ctx.in_dims(1);
    let spec = converted(ctx, 0, DType::F32)?;
    let filters = converted(ctx, 1, DType::F32)?;
    let dst = target(ctx, DType::F32)?;
    ctx.push(LogMel {
        spec,
        filters,
        dst,
        outer: ctx.u32(sd[0], "rows")?,
        n_fft: ctx.u32(n_fft, "n_fft")?,
        n_bins: ctx.u32(fd[1], "n_bins")?,
        n_mels: ctx.u32(fd[0], "n_mels")?,
    });
    finish(ctx, dst, DType::F32)
}

fn welch(ctx: &mut Ctx<'_>, n_fft: usize, n_segments: usize, k: usize) -> Result<(), CompileError> {
    let sd = ctx.in_dims(0);
    let spec = converted(ctx, 0, DType::F32)?;
    ctx.push(WelchPeaks {
        spec,
        dst: ctx.out(),
        welch_batch: ctx.u32(sd[0] / n_segments.max(1), "batch")?,
        n_fft: ctx.u32(n_fft, "n_fft")?,
        n_segments: ctx.u32(n_segments, "n_segments")?,
        k: ctx.u32(k, "k")?,
    });
    Ok(())
}

#[cfg(test)]
#[path = "signal_tests.rs"]
mod tests;
