//! Signal kernels: 1-D FFT on the 2N-real-block layout (any length, via the
//! `rustfft` crate: mixed radix for smooth lengths, Rader / Bluestein for
//! large primes), log-mel features and Welch peak picking.
//!
//! Block layout: a complex row of `n` points is `[re_0..re_{n−1},
//! im_0..im_{n−1}]`. Interleaved rows (`c64` tensors) are `[re_0, im_0,
//! re_1, im_1, ..]`.

use super::{check_len, invalid, numel, rows_per_task, Elem, Result};
use rayon::prelude::*;
use rustfft::num_complex::Complex;
use rustfft::{FftNum, FftPlanner};

/// How the complex rows of an FFT are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FftLayout {
    /// `[re.., im..]` blocks of `2n` reals.
    Block,
    /// `n` reals (imaginary part zero); input only.
    Real,
    /// `[re, im]` pairs (`c64`).
    Interleaved,
}

/// Shape and options of one batched FFT.
#[derive(Debug, Clone, Copy)]
pub struct FftDims {
    /// Rows.
    pub outer: usize,
    /// Complex points per row.
    pub n: usize,
    /// Inverse transform (`e^{+2πi jk/n}`).
    pub inverse: bool,
    /// numpy's norm: 0 backward, 1 ortho, 2 forward.
    pub norm_tag: u32,
    /// Input layout (the output is `Block`, or `Interleaved` when the input is).
    pub layout: FftLayout,
}

/// The scale numpy applies for `norm_tag` in the given direction.
pub fn fft_scale(n: usize, inverse: bool, norm_tag: u32) -> f64 {
    let n = n as f64;
    match (norm_tag, inverse) {
        (1, _) => 1.0 / n.sqrt(),
        (0, true) | (2, false) => 1.0 / n,
        _ => 1.0,
    }
}

/// A float the FFT computes in (`f32` for f32 / f16 / bf16 rows, `f64` for f64).
pub trait FftElem: Copy + Send + Sync + 'static {
    /// Compute type.
    type C: FftNum;
    /// Widen.
    fn load(self) -> Self::C;
    /// Narrow.
    fn store(v: Self::C) -> Self;
    /// `f64` into the compute type.
    fn scale(v: f64) -> Self::C;
}

macro_rules! fft_elem_via_f32 {
    ($($t:ty),*) => {$(
        impl FftElem for $t {
            type C = f32;
            fn load(self) -> f32 {
                Elem::to_f32(self)
            }
            fn store(v: f32) -> Self {
                <$t as Elem>::from_f32(v)
            }
            fn scale(v: f64) -> f32 {
                v as f32
            }
        }
    )*};
}
fft_elem_via_f32!(f32, half::f16, half::bf16);

impl FftElem for f64 {
    type C = f64;
    fn load(self) -> f64 {
        self
    }
    fn store(v: f64) -> Self {
        v
    }
    fn scale(v: f64) -> f64 {
        v
    }
}

/// Batched 1-D FFT: `src` holds `outer` rows in `d.layout`, `dst` receives
/// `outer` rows of `2n` reals (block layout, or interleaved pairs when the
/// input is interleaved). Needs `src.len() ≥ outer·n` (`Real`) or
/// `outer·2n`, `dst.len() ≥ outer·2n`.
pub fn fft<T: FftElem>(src: &[T], dst: &mut [T], d: FftDims) -> Result<()> {
    const K: &str = "fft";
    if d.n == 0 {
        return Err(invalid(K, "n (points per row) must be at least 1"));
    }
    let width =
        d.n.checked_mul(2)
            .ok_or_else(|| invalid(K, "2·n overflows"))?;
    let in_w = if d.layout == FftLayout::Real {
        d.n
    } else {
        width
    };
    check_len(K, "src", src.len(), numel(K, &[d.outer, in_w])?)?;
    check_len(K, "dst", dst.len(), numel(K, &[d.outer, width])?)?;
    let plan = {
        let mut planner = FftPlanner::<T::C>::new();
        if d.inverse {
            planner.plan_fft_inverse(d.n)
        } else {
            planner.plan_fft_forward(d.n)
        }
    };
    let scale = T::scale(fft_scale(d.n, d.inverse, d.norm_tag));
    let chunk = rows_per_task(d.outer, width);
    let zero = T::scale(0.0);
    dst[..d.outer * width]
        .par_chunks_mut(chunk * width)
        .enumerate()
        .for_each(|(ci, out)| {
            let rows = out.len() / width;
            let mut buf = vec![Complex::new(zero, zero); rows * d.n];
            let mut scratch = vec![Complex::new(zero, zero); plan.get_inplace_scratch_len()];
            for r in 0..rows {
                let row = &src[(ci * chunk + r) * in_w..][..in_w];
                let b = &mut buf[r * d.n..][..d.n];
                for (j, c) in b.iter_mut().enumerate() {
                    *c = match d.layout {
                        FftLayout::Block => Complex::new(row[j].load(), row[d.n + j].load()),
                        FftLayout::Real => Complex::new(row[j].load(), zero),
                        FftLayout::Interleaved => {
                            Complex::new(row[2 * j].load(), row[2 * j + 1].load())
                        }
                    };
                }
            }
            plan.process_with_scratch(&mut buf, &mut scratch);
            for r in 0..rows {
                let b = &buf[r * d.n..][..d.n];
                let o = &mut out[r * width..][..width];
                for (j, c) in b.iter().enumerate() {
                    let (re, im) = (T::store(c.re * scale), T::store(c.im * scale));
                    if d.layout == FftLayout::Interleaved {
                        o[2 * j] = re;
                        o[2 * j + 1] = im;
                    } else {
                        o[j] = re;
                        o[d.n + j] = im;
                    }
                }
            }
        });
    Ok(())
}

/// Dims of a log-mel.
#[derive(Debug, Clone, Copy)]
pub struct MelDims {
    /// Spectrum rows.
    pub outer: usize,
    /// FFT length (a spectrum row is `2·n_fft` reals).
    pub n_fft: usize,
    /// Bins read (`≤ n_fft/2 + 1`).
    pub n_bins: usize,
    /// Mel bands.
    pub n_mels: usize,
}

/// Additive floor inside the log of [`log_mel`].
pub const LOG_MEL_EPS: f64 = 1e-10;

fn check_mel(k: &'static str, spec: usize, filters: usize, d: MelDims) -> Result<()> {
    if d.n_fft == 0 || d.n_bins == 0 || d.n_bins > d.n_fft / 2 + 1 {
        return Err(invalid(
            k,
            format!(
                "n_bins {} must be in 1..={} for n_fft {}",
                d.n_bins,
                d.n_fft / 2 + 1,
                d.n_fft
            ),
        ));
    }
    let width = numel(k, &[2, d.n_fft])?;
    check_len(k, "spec", spec, numel(k, &[d.outer, width])?)?;
    check_len(k, "filters", filters, numel(k, &[d.n_mels, d.n_bins])?)
}

/// `dst[o, m] = ln(Σ_k filters[m, k]·|spec[o, k]|² + 1e-10)`; power in f32,
/// the filter sum accumulated in f64. `dst.len() ≥ outer·n_mels`.
pub fn log_mel(spec: &[f32], filters: &[f32], dst: &mut [f32], d: MelDims) -> Result<()> {
    const K: &str = "log_mel";
    check_mel(K, spec.len(), filters.len(), d)?;
    check_len(K, "dst", dst.len(), numel(K, &[d.outer, d.n_mels])?)?;
    if d.n_mels == 0 {
        return Ok(());
    }
    let width = 2 * d.n_fft;
    let chunk = rows_per_task(d.outer, d.n_mels * d.n_bins);
    dst[..d.outer * d.n_mels]
        .par_chunks_mut(chunk * d.n_mels)
        .enumerate()
        .for_each(|(ci, out)| {
            let mut power = vec![0f64; d.n_bins];
            for (r, orow) in out.chunks_mut(d.n_mels).enumerate() {
                let row = &spec[(ci * chunk + r) * width..][..width];
                for (k, p) in power.iter_mut().enumerate() {
                    let (re, im) = (row[k], row[d.n_fft + k]);
                    *p = f64::from(re * re + im * im);
                }
                for (m, o) in orow.iter_mut().enumerate() {
                    let f = &filters[m * d.n_bins..][..d.n_bins];
                    let s: f64 = f.iter().zip(&power).map(|(&w, &p)| f64::from(w) * p).sum();
                    *o = (s + LOG_MEL_EPS).ln() as f32;
                }
            }
        });
    Ok(())
}

/// Dims of a Welch peak pick.
#[derive(Debug, Clone, Copy)]
pub struct WelchDims {
    /// Output rows.
    pub batch: usize,
    /// FFT length.
    pub n_fft: usize,
    /// Consecutive spectrum rows averaged per output row.
    pub n_segments: usize,
    /// Peaks kept.
    pub k: usize,
}

/// Per batch row, the indices (as f32) of the `k` largest one-sided bins
/// (`0..=n_fft/2`) of the power `|X|²` averaged over `n_segments`
/// consecutive spectrum rows, largest first, ties to the lower bin; `k`
/// past the bin count pads with −1.
pub fn welch_peaks(spec: &[f32], dst: &mut [f32], d: WelchDims) -> Result<()> {
    const K: &str = "welch_peaks";
    if d.n_fft == 0 || d.n_segments == 0 {
        return Err(invalid(K, "n_fft and n_segments must be at least 1"));
    }
    let width = numel(K, &[2, d.n_fft])?;
    check_len(
        K,
        "spec",
        spec.len(),
        numel(K, &[d.batch, d.n_segments, width])?,
    )?;
    check_len(K, "dst", dst.len(), numel(K, &[d.batch, d.k])?)?;
    if d.k == 0 {
        return Ok(());
    }
    let nb = d.n_fft / 2 + 1;
    dst[..d.batch * d.k]
        .par_chunks_mut(d.k)
        .enumerate()
        .for_each(|(b, out)| {
            let mut power = vec![0f64; nb];
            for s in 0..d.n_segments {
                let row = &spec[(b * d.n_segments + s) * width..][..width];
                for (k, p) in power.iter_mut().enumerate() {
                    let (re, im) = (f64::from(row[k]), f64::from(row[d.n_fft + k]));
                    *p += re * re + im * im;
                }
            }
            let inv = 1.0 / d.n_segments as f64;
            power.iter_mut().for_each(|p| *p *= inv);
            let mut idx: Vec<usize> = (0..nb).collect();
            // stable sort by descending power keeps ties in bin order
            idx.sort_by(|&a, &b| power[b].total_cmp(&power[a]));
            for (i, o) in out.iter_mut().enumerate() {
                *o = idx.get(i).map_or(-1.0, |&x| x as f32);
            }
        });
    Ok(())
}

#[cfg(test)]
#[path = "signal_tests.rs"]
mod tests;
