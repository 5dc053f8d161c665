//! Argument structs of `signal.metal`: FFT rows, log-mel and Welch peaks (mirrored in
//! `kernels/args.h`).

use super::KernelArgs;

/// `FftArgs`: `outer` rows of `n` complex points (`signal.metal`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FftArgs {
    /// Rows.
    pub outer: u32,
    /// Complex points per row.
    pub n: u32,
    /// 1: inverse transform.
    pub inverse: u32,
    /// Row layout: 0 block, 1 real input, 2 interleaved (c64).
    pub layout: u32,
    /// numpy's norm factor for this direction.
    pub scale: f32,
}

/// `LogMelArgs`: spec `[outer, 2·n_fft]`, filters `[n_mels, n_bins]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LogMelArgs {
    /// Rows.
    pub outer: u32,
    /// FFT length.
    pub n_fft: u32,
    /// Bins read.
    pub n_bins: u32,
    /// Mel bands.
    pub n_mels: u32,
}

/// `WelchArgs`: spec `[batch·n_segments, 2·n_fft]` → `[batch, k]` bins.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WelchArgs {
    /// Output rows.
    pub batch: u32,
    /// FFT length.
    pub n_fft: u32,
    /// Spectra averaged per output row.
    pub n_segments: u32,
    /// Peaks kept.
    pub k: u32,
}

kernel_args! {
    FftArgs = 20,
    LogMelArgs = 16,
    WelchArgs = 16,
}
