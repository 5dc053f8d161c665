//! Shape inference for FFT and audio features.
//!
//! Spectra travel in the 2N-real block layout: the last axis of a float
//! tensor holds `[re_0..re_{n−1}, im_0..im_{n−1}]`. `Fft` also accepts `c64`
//! tensors, whose last axis holds the `n` complex values directly.

use super::common::*;
use crate::dtype::DType;
use crate::error::{IrError, Result};
use crate::op::Op;
use crate::shape::{Dim, Shape};

pub(super) fn infer(op: &Op, inputs: &[&Shape]) -> Result<Shape> {
    match op {
        Op::Fft { .. } => fft(op, inputs),
        Op::LogMel { n_fft } => log_mel(op, inputs, *n_fft),
        Op::WelchPeaks {
            n_fft,
            n_segments,
            k,
        } => welch_peaks(op, inputs, *n_fft, *n_segments, *k),
        _ => Err(wrong_family(op, "signal")),
    }
}

fn fft(op: &Op, inputs: &[&Shape]) -> Result<Shape> {
    arity(op, inputs, 1)?;
    let x = inputs[0];
    rank_at_least(op, x, 1, "input")?;
    let last = x.last(op.name())?;
    if x.dtype == DType::C64 {
        if last.as_static() == Some(0) {
            return Err(IrError::shape(
                op.name(),
                format!("empty transform axis in {x}"),
            ));
        }
    } else if x.dtype.is_float() {
        let n = static_dim(op, last, "last dim (2N-real block)")?;
        if n == 0 || n % 2 != 0 {
            return Err(IrError::shape(
                op.name(),
                format!("last dim of a 2N-real block must be even and >= 2, got {x}"),
            ));
        }
    } else {
        return Err(IrError::dtype(
            op.name(),
            format!("input must be a float (2N-real block) or c64, got {x}"),
        ));
    }
    Ok(x.clone())
}

/// Number of one-sided bins of an `n_fft`-point real spectrum, `n_fft/2 + 1`.
fn one_sided_bins(n_fft: usize) -> usize {
    n_fft / 2 + 1
}

/// Check a `[rows, 2·n_fft]` float block spectrum.
fn block_spectrum(op: &Op, spec: &Shape, n_fft: usize) -> Result<()> {
    positive(op, n_fft, "n_fft")?;
    rank_is(op, spec, 2, "spectrum")?;
    float_dtype(op, spec, "spectrum")?;
    let width = checked_mul(op, n_fft, 2, "2·n_fft")?;
    dim_is(op, &spec.dims[1], width, "spectrum last dim (2·n_fft)")
}

/// `LogMel` inference; also used by `LogMelBackward` (with its own `op`).
pub(super) fn log_mel(op: &Op, inputs: &[&Shape], n_fft: usize) -> Result<Shape> {
    arity(op, inputs, 2)?;
    let (spec, filters) = (inputs[0], inputs[1]);
    block_spectrum(op, spec, n_fft)?;
    rank_is(op, filters, 2, "filters")?;
    same_dtype(op, spec, filters)?;
    let n_bins = static_dim(op, &filters.dims[1], "filter bins")?;
    let max_bins = one_sided_bins(n_fft);
    if n_bins == 0 || n_bins > max_bins {
        return Err(IrError::shape(
            op.name(),
            format!(
                "filters {filters} must have 1..={max_bins} bins (one-sided spectrum of n_fft {n_fft})"
            ),
        ));
    }
    Ok(spec.with_dims(vec![spec.dims[0].clone(), filters.dims[0].clone()]))
}

fn welch_peaks(
    op: &Op,
    inputs: &[&Shape],
    n_fft: usize,
    n_segments: usize,
    k: usize,
) -> Result<Shape> {
    arity(op, inputs, 1)?;
    positive(op, n_segments, "n_segments")?;
    positive(op, k, "k")?;
    let spec = inputs[0];
    block_spectrum(op, spec, n_fft)?;
    let bins = one_sided_bins(n_fft);
    if k > bins {
        return Err(IrError::attr(
            op.name(),
            format!("k {k} exceeds the {bins} one-sided bins of n_fft {n_fft}"),
        ));
    }
    let batch = match &spec.dims[0] {
        Dim::Static(rows) => {
            if rows % n_segments != 0 {
                return Err(IrError::shape(
                    op.name(),
                    format!("{rows} spectrum rows are not a multiple of n_segments {n_segments}"),
                ));
            }
            Dim::Static(rows / n_segments)
        }
        d @ Dim::Sym(_) if n_segments == 1 => d.clone(),
        d => {
            return Err(IrError::shape(
                op.name(),
                format!("symbolic row count {d} needs n_segments 1, got {n_segments}"),
            ))
        }
    };
    Ok(Shape::new(vec![batch, Dim::Static(k)], DType::F32))
}
