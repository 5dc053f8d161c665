//! Native glue for the signal thunks (kernels in `host::kernels::signal`):
//! FFT (f32 / f16 / bf16 / f64 rows, block or interleaved `c64`), log-mel
//! and Welch peaks. Lowering gives each result a fresh value, but an
//! in-place FFT (`src == dst`) is legal for the thunk, so the FFT input is
//! staged when it overlaps the output.

use super::{read_staged, NResult};
use crate::host::buffer::{Mem, Plain};
use crate::host::exec::Staging;
use crate::host::kernels::invalid;
use crate::host::kernels::signal::{self as sig, FftDims, FftElem, FftLayout, MelDims, WelchDims};
use crate::thunk::signal::Fft1d;
use crate::thunk::Thunk;
use rlx_ir::DType;

pub(super) fn handles(t: &Thunk) -> bool {
    matches!(t, Thunk::Fft1d(_) | Thunk::LogMel(_) | Thunk::WelchPeaks(_))
}

pub(super) fn run(t: &Thunk, mem: &Mem, st: &mut Staging) -> NResult {
    match t {
        Thunk::Fft1d(x) => match x.dtype {
            DType::F64 => run_fft::<f64>(mem, st, x),
            DType::F16 => run_fft::<half::f16>(mem, st, x),
            DType::BF16 => run_fft::<half::bf16>(mem, st, x),
            _ => run_fft::<f32>(mem, st, x),
        },
        Thunk::LogMel(x) => {
            let d = MelDims {
                outer: x.outer as usize,
                n_fft: x.n_fft as usize,
                n_bins: x.n_bins as usize,
                n_mels: x.n_mels as usize,
            };
            let width = 2 * d.n_fft;
            sig::log_mel(
                mem.get("spec", x.spec, d.outer * width)?,
                mem.get("filters", x.filters, d.n_mels * d.n_bins)?,
                mem.get_mut("dst", x.dst, d.outer * d.n_mels)?,
                d,
            )?;
            Ok(())
        }
        Thunk::WelchPeaks(x) => {
            let d = WelchDims {
                batch: x.welch_batch as usize,
                n_fft: x.n_fft as usize,
                n_segments: x.n_segments as usize,
                k: x.k as usize,
            };
            let n = d.batch * d.n_segments * 2 * d.n_fft;
            sig::welch_peaks(
                mem.get("spec", x.spec, n)?,
                mem.get_mut("dst", x.dst, d.batch * d.k)?,
                d,
            )?;
            Ok(())
        }
        _ => Err(invalid("signal", format!("not a signal thunk: {t}")).into()),
    }
}

fn run_fft<T: Plain + FftElem>(mem: &Mem, st: &mut Staging, x: &Fft1d) -> NResult {
    let layout = if x.dtype == DType::C64 {
        FftLayout::Interleaved
    } else if x.real_input {
        FftLayout::Real
    } else {
        FftLayout::Block
    };
    let d = FftDims {
        outer: x.outer as usize,
        n: x.n_complex as usize,
        inverse: x.inverse,
        norm_tag: x.norm_tag,
        layout,
    };
    let out_n = d.outer * 2 * d.n;
    let in_n = if layout == FftLayout::Real {
        d.outer * d.n
    } else {
        out_n
    };
    let es = std::mem::size_of::<T>();
    let src: &[T] = read_staged(mem, &mut st.a, "src", x.src, in_n, x.dst, out_n * es)?;
    sig::fft(src, mem.get_mut("dst", x.dst, out_n)?, d)?;
    Ok(())
}
