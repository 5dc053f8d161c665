//! FFT and log-mel → `signal.metal`.
//!
//! `Fft1d` on f32 (block or real-input rows) and c64 (interleaved rows):
//! power-of-two lengths up to [`STOCKHAM_MAX_N`] run the Stockham kernel in
//! threadgroup memory (one threadgroup per row); any other length up to
//! [`DFT_MAX_N`] runs the direct DFT kernel (one thread per bin). f16 /
//! f64 rows, longer rows and a DFT whose output overlaps its input stay on
//! the host. `LogMel` is one thread per (row, mel). `WelchPeaks` is one
//! threadgroup per batch row (mean power in threadgroup memory, then `k`
//! rounds of a threadgroup arg max) for up to [`WELCH_MAX_BINS`] bins.

use super::{aliased, elementwise, kernel, Lowered};
use crate::host::kernels::signal::fft_scale;
use crate::metal::args::{FftArgs, LogMelArgs, WelchArgs};
use crate::metal::kernels::Family;
use crate::metal::plan::{BufferBinding, Dispatch};
use crate::thunk::Thunk;
use rlx_ir::DType;

/// Longest power-of-two row of the Stockham kernel: two `float2` rows of
/// threadgroup memory, 16·n bytes ≤ 32 KiB.
pub const STOCKHAM_MAX_N: u32 = 2048;

/// Longest row of the O(n²) direct DFT kernel.
pub const DFT_MAX_N: u32 = 16384;

/// Threads per threadgroup of the FFT kernels (at most).
const FFT_THREADS: u32 = 256;

/// Most one-sided bins (`n_fft/2 + 1`) of the Welch kernel: 5 bytes of
/// threadgroup memory per bin plus 8 per thread stay under 32 KiB.
pub const WELCH_MAX_BINS: u32 = 4097;

pub(super) fn lower(i: usize, t: &Thunk) -> Option<Lowered> {
    match t {
        Thunk::Fft1d(f) => {
            if !matches!(f.dtype, DType::F32 | DType::C64) {
                return None;
            }
            if t.io().writes.is_empty() {
                return Some(Lowered::Skip);
            }
            let layout = match (f.dtype, f.real_input) {
                (DType::C64, _) => 2,
                (_, true) => 1,
                _ => 0,
            };
            let args = FftArgs {
                outer: f.outer,
                n: f.n_complex,
                inverse: f.inverse as u32,
                layout,
                scale: fft_scale(f.n_complex as usize, f.inverse, f.norm_tag) as f32,
            };
            let n = f.n_complex;
            let bindings = vec![BufferBinding::of(f.src), BufferBinding::of(f.dst)];
            if n.is_power_of_two() && n <= STOCKHAM_MAX_N {
                // reads the whole row before writing: exact in-place is fine
                return Some(Lowered::Dispatch(Dispatch {
                    thunk: i,
                    kernel: kernel(Family::Signal, "fft_stockham_f32".into()),
                    args: bytes_of(&args),
                    bindings,
                    grid: [f.outer, 1, 1],
                    threadgroup: [(n / 2).clamp(1, FFT_THREADS), 1, 1],
                    threadgroup_memory: vec![16 * n as usize],
                }));
            }
            if n > DFT_MAX_N || aliased(t) {
                return None;
            }
            let threads = n.clamp(1, FFT_THREADS);
            Some(Lowered::Dispatch(Dispatch {
                thunk: i,
                kernel: kernel(Family::Signal, "fft_dft_f32".into()),
                args: bytes_of(&args),
                bindings,
                grid: [n.div_ceil(threads), f.outer, 1],
                threadgroup: [threads, 1, 1],
                threadgroup_memory: Vec::new(),
            }))
        }
        Thunk::LogMel(m) => {
            if t.io().writes.is_empty() {
                return Some(Lowered::Skip);
            }
            if aliased(t) {
                return None;
            }
            let args = LogMelArgs {
                outer: m.outer,
                n_fft: m.n_fft,
                n_bins: m.n_bins,
                n_mels: m.n_mels,
            };
            let total = m.outer.checked_mul(m.n_mels)?;
            let k = kernel(Family::Signal, "log_mel_f32".into());
            let offs = [m.spec, m.filters, m.dst];
            Some(Lowered::Dispatch(elementwise(i, k, &args, &offs, total)))
        }
        Thunk::WelchPeaks(w) => {
            if t.io().writes.iter().all(|x| x.len == 0) {
                return Some(Lowered::Skip);
            }
            let nb = w.n_fft / 2 + 1;
            if w.n_fft == 0 || w.n_segments == 0 || nb > WELCH_MAX_BINS || aliased(t) {
                return None;
            }
            let args = WelchArgs {
                batch: w.welch_batch,
                n_fft: w.n_fft,
                n_segments: w.n_segments,
                k: w.k,
            };
            let threads = nb.clamp(1, FFT_THREADS);
            let pad16 = |b: u32| (b as usize).div_ceil(16) * 16;
            Some(Lowered::Dispatch(Dispatch {
                thunk: i,
                kernel: kernel(Family::Signal, "welch_peaks_f32".into()),
                args: bytes_of(&args),
                bindings: vec![BufferBinding::of(w.spec), BufferBinding::of(w.dst)],
                grid: [w.welch_batch, 1, 1],
                threadgroup: [threads, 1, 1],
                threadgroup_memory: vec![pad16(4 * nb), pad16(8 * threads), pad16(nb)],
            }))
        }
        _ => None,
    }
}

fn bytes_of(a: &impl crate::metal::args::KernelArgs) -> Vec<u8> {
    a.as_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thunk::signal::{Fft1d, LogMel, WelchPeaks};

    fn fft(n: u32, dtype: DType, src: usize) -> Thunk {
        Fft1d {
            src,
            dst: 1 << 20,
            outer: 3,
            n_complex: n,
            inverse: true,
            norm_tag: 1,
            dtype,
            real_input: false,
        }
        .into()
    }

    fn kernel_of(t: &Thunk) -> Option<(String, Dispatch)> {
        match lower(0, t)? {
            Lowered::Dispatch(d) => Some((d.kernel.function.clone(), d)),
            _ => None,
        }
    }

    #[test]
    fn fft_paths_by_length_dtype_and_aliasing() {
        let (k, d) = kernel_of(&fft(1024, DType::F32, 0)).unwrap();
        assert_eq!(k, "fft_stockham_f32");
        assert_eq!((d.grid, d.threadgroup), ([3, 1, 1], [256, 1, 1]));
        assert_eq!(d.threadgroup_memory, vec![16 * 1024]);
        assert_eq!(d.args.len(), std::mem::size_of::<FftArgs>());
        // in place is fine for the Stockham kernel (row read whole first)
        let (k, _) = kernel_of(&fft(64, DType::C64, 1 << 20)).unwrap();
        assert_eq!(k, "fft_stockham_f32");
        let (k, d) = kernel_of(&fft(400, DType::F32, 0)).unwrap();
        assert_eq!(k, "fft_dft_f32");
        assert_eq!((d.grid, d.threadgroup), ([2, 3, 1], [256, 1, 1]));
        assert!(kernel_of(&fft(400, DType::F32, 1 << 20)).is_none());
        assert!(kernel_of(&fft(4096, DType::F32, 0)).is_some());
        assert!(kernel_of(&fft(DFT_MAX_N + 1, DType::F32, 0)).is_none());
        assert!(kernel_of(&fft(64, DType::F64, 0)).is_none());
        assert!(kernel_of(&fft(64, DType::F16, 0)).is_none());
    }

    #[test]
    fn log_mel_and_welch_are_kernels() {
        let m: Thunk = LogMel {
            spec: 0,
            filters: crate::thunk::tag_segment(1, 0),
            dst: 1 << 20,
            outer: 10,
            n_fft: 400,
            n_bins: 201,
            n_mels: 80,
        }
        .into();
        let (k, d) = kernel_of(&m).unwrap();
        assert_eq!(k, "log_mel_f32");
        assert_eq!(d.grid[0], (10 * 80u32).div_ceil(256));
        let w: Thunk = WelchPeaks {
            spec: 0,
            dst: 1 << 20,
            welch_batch: 1,
            n_fft: 8,
            n_segments: 2,
            k: 3,
        }
        .into();
        let (k, d) = kernel_of(&w).unwrap();
        assert_eq!(k, "welch_peaks_f32");
        assert_eq!((d.grid, d.threadgroup), ([1, 1, 1], [5, 1, 1]));
        assert_eq!(d.threadgroup_memory, vec![32, 48, 16]);
        let wide: Thunk = WelchPeaks {
            spec: 0,
            dst: 1 << 20,
            welch_batch: 1,
            n_fft: 2 * WELCH_MAX_BINS,
            n_segments: 1,
            k: 3,
        }
        .into();
        assert!(lower(0, &wide).is_none());
    }
}
