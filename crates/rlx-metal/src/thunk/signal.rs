//! Signal thunks: 1-D FFT on the 2N-real-block layout, log-mel features
//! (and gradient) and Welch peak picking.
//!
//! A complex row of `n` points is stored as `[re_0..re_{n-1},
//! im_0..im_{n-1}]`. Log-mel uses bins `0..n_bins` of each spectrum row,
//! i.e. the windows `[0, n_bins)` and `[n_fft, n_fft + n_bins)`; only
//! those are reported read (one range per row unless they cover it).

use super::io::{bytes, ThunkIo, F32};
use super::offsets::Off;
use super::ThunkOp;
use rlx_ir::DType;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Bytes of one real component for an FFT of `dtype` (C64 parts are f32).
pub fn fft_real_bytes(dtype: DType) -> usize {
    match dtype {
        DType::F64 => 8,
        DType::F16 | DType::BF16 => 2,
        _ => 4,
    }
}

/// 1-D complex FFT of `outer` rows of `n_complex` points. Reads `[outer,
/// 2·n_complex]` (or `[outer, n_complex]` real samples with `real_input`),
/// writes `[outer, 2·n_complex]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fft1d {
    /// Input.
    pub src: usize,
    /// Output.
    pub dst: usize,
    /// Rows.
    pub outer: u32,
    /// Points per row.
    pub n_complex: u32,
    /// Inverse transform.
    pub inverse: bool,
    /// Normalisation (0 backward, 1 ortho, 2 forward).
    pub norm_tag: u32,
    /// Element type of the real components.
    pub dtype: DType,
    /// Input is a real signal of `n_complex` samples (imaginary part 0).
    pub real_input: bool,
}

impl ThunkOp for Fft1d {
    const NAME: &'static str = "fft1d";
    fn io(&self) -> ThunkIo {
        let es = fft_real_bytes(self.dtype);
        let out = bytes(&[self.outer, 2, self.n_complex], es);
        let inp = if self.real_input {
            bytes(&[self.outer, self.n_complex], es)
        } else {
            out
        };
        ThunkIo::new().read(self.src, inp).write(self.dst, out)
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dir = if self.inverse { "inverse" } else { "forward" };
        let real = if self.real_input { " real" } else { "" };
        write!(
            f,
            "{dir} outer={} n={} norm={} {}{real} src={} dst={}",
            self.outer,
            self.n_complex,
            self.norm_tag,
            self.dtype,
            Off(self.src),
            Off(self.dst)
        )
    }
}

/// The spectrum bins a log-mel reads, as byte windows of one f32 row.
fn mel_windows(n_fft: u32, n_bins: u32) -> [(usize, usize); 2] {
    let bins = bytes(&[n_bins], F32);
    [(0, bins), (bytes(&[n_fft], F32), bins)]
}

/// `dst [outer, n_mels] = log(filters @ |spec[:n_bins]|² + 1e-10)`, f32;
/// spec `[outer, 2·n_fft]`, filters `[n_mels, n_bins]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogMel {
    /// Spectrum.
    pub spec: usize,
    /// Mel filter bank.
    pub filters: usize,
    /// Output.
    pub dst: usize,
    /// Rows.
    pub outer: u32,
    /// FFT length.
    pub n_fft: u32,
    /// Bins used.
    pub n_bins: u32,
    /// Mel bands.
    pub n_mels: u32,
}

impl ThunkOp for LogMel {
    const NAME: &'static str = "log_mel";
    fn io(&self) -> ThunkIo {
        let row = bytes(&[2, self.n_fft], F32);
        ThunkIo::new()
            .read_rows(
                self.spec,
                self.outer as usize,
                row,
                &mel_windows(self.n_fft, self.n_bins),
            )
            .read(self.filters, bytes(&[self.n_mels, self.n_bins], F32))
            .write(self.dst, bytes(&[self.outer, self.n_mels], F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "outer={} n_fft={} bins={} mels={} spec={} filters={} dst={}",
            self.outer,
            self.n_fft,
            self.n_bins,
            self.n_mels,
            Off(self.spec),
            Off(self.filters),
            Off(self.dst)
        )
    }
}

/// Gradient of [`LogMel`] w.r.t. the spectrum: reads spec (same bins),
/// filters and `dy [outer, n_mels]`; writes the whole `[outer, 2·n_fft]`
/// (zeros outside the used bins).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogMelBackward {
    /// Spectrum.
    pub spec: usize,
    /// Mel filter bank.
    pub filters: usize,
    /// Upstream gradient.
    pub dy: usize,
    /// Gradient of the spectrum.
    pub dst: usize,
    /// Rows.
    pub outer: u32,
    /// FFT length.
    pub n_fft: u32,
    /// Bins used.
    pub n_bins: u32,
    /// Mel bands.
    pub n_mels: u32,
}

impl ThunkOp for LogMelBackward {
    const NAME: &'static str = "log_mel_backward";
    fn io(&self) -> ThunkIo {
        let row = bytes(&[2, self.n_fft], F32);
        ThunkIo::new()
            .read_rows(
                self.spec,
                self.outer as usize,
                row,
                &mel_windows(self.n_fft, self.n_bins),
            )
            .read(self.filters, bytes(&[self.n_mels, self.n_bins], F32))
            .read(self.dy, bytes(&[self.outer, self.n_mels], F32))
            .write(self.dst, row.saturating_mul(self.outer as usize))
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "outer={} n_fft={} bins={} mels={} spec={} dy={} dst={}",
            self.outer,
            self.n_fft,
            self.n_bins,
            self.n_mels,
            Off(self.spec),
            Off(self.dy),
            Off(self.dst)
        )
    }
}

/// Welch peaks, f32: mean power over `n_segments` spectra per batch row
/// (spec `[welch_batch · n_segments, 2·n_fft]`), then the `k` largest
/// bins → `[welch_batch, k]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WelchPeaks {
    /// Spectra.
    pub spec: usize,
    /// Output.
    pub dst: usize,
    /// Batch rows.
    pub welch_batch: u32,
    /// FFT length.
    pub n_fft: u32,
    /// Segments averaged per row.
    pub n_segments: u32,
    /// Peaks kept.
    pub k: u32,
}

impl ThunkOp for WelchPeaks {
    const NAME: &'static str = "welch_peaks";
    fn io(&self) -> ThunkIo {
        ThunkIo::new()
            .read(
                self.spec,
                bytes(&[self.welch_batch, self.n_segments, 2, self.n_fft], F32),
            )
            .write(self.dst, bytes(&[self.welch_batch, self.k], F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "batch={} segments={} n_fft={} k={} spec={} dst={}",
            self.welch_batch,
            self.n_segments,
            self.n_fft,
            self.k,
            Off(self.spec),
            Off(self.dst)
        )
    }
}
