//! The fused decode GEMVs (`m = 1`) on the integer-dot kernels of the
//! parent module: `x` is quantised once, and the driver's
//! [`super::super::driver::gemv_fused`] row split calls [`dots_m1`] on
//! chunks of one or two matrices.

use super::super::driver::{gemv_fused, Epilogue};
use super::{available, gemv_rows, with_qact, zmm, QAct, VFmt, PAR_MIN_BYTES_M1, RESIDUAL};
use super::{VQ2K, VQ3K, VQ4K, VQ4_0, VQ4_1, VQ5K, VQ5_0, VQ5_1, VQ6K, VQ8_0};
use crate::host::kernels::Elem;
use rlx_ir::GgmlType;
use std::sync::atomic::Ordering;

/// [`gemv_rows`] over whole rows of `w` (`w.len() / rb` of them, at least
/// `out.len()`) into f32, for the fused decode GEMVs (`TWO`: `qa` holds
/// two code levels).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn dots_m1<V: VFmt, const TWO: bool>(w: &[u8], rb: usize, qa: &QAct, out: &mut [f32]) {
    let rows = out.len().min(w.len() / rb.max(1));
    // SAFETY: `rows` whole rows are in `w`; `qa` holds one activation row
    // of `k` elements matching `rb` (checked by `try_fused`), the caller
    // checked the features.
    unsafe { gemv_rows::<V, f32, TWO>(w.as_ptr(), rb, rb / V::BB, qa, &mut out[..rows]) }
}

/// The fused decode GEMVs of [`gemv_fused`] on the
/// integer-dot kernels: quantises `x` (one row of `k`) once, then hands the
/// driver a row-dot function over it. Returns `false` (having done
/// nothing) when this CPU or `ty` has no kernel here.
#[allow(clippy::too_many_arguments)]
pub(in crate::host::kernels::quant) fn try_fused<T: Elem>(
    ty: GgmlType,
    x: &[f32],
    mats: &[&[u8]],
    rb: usize,
    out: &mut [T],
    k: usize,
    n: usize,
    epi: &Epilogue<'_, T>,
) -> bool {
    if !available() || !k.is_multiple_of(32) || k == 0 || n == 0 {
        return false;
    }
    // the driver's fused row split over `$dots::<$V, TWO>`
    macro_rules! go {
        ($($dots:ident)::+, $V:ty) => {
            with_qact(|qa| {
                let two = RESIDUAL.load(Ordering::Relaxed);
                qa.fill(x, 1, k, two);
                let qa = &*qa;
                let bytes = mats.len().saturating_mul(n).saturating_mul(rb);
                let tasks = if bytes < PAR_MIN_BYTES_M1 {
                    1
                } else {
                    crate::host::team::threads()
                };
                // SAFETY: `available()` holds; the driver passes whole rows.
                if two {
                    let dots = |w: &[u8], o: &mut [f32]| unsafe { $($dots)::+::<$V, true>(w, rb, qa, o) };
                    gemv_fused(mats, rb, n, out, tasks, &dots, epi);
                } else {
                    let dots = |w: &[u8], o: &mut [f32]| unsafe { $($dots)::+::<$V, false>(w, rb, qa, o) };
                    gemv_fused(mats, rb, n, out, tasks, &dots, epi);
                }
            })
        };
    }
    if super::wide() {
        with_zfmt!(ty, Z => {
            go!(zmm::dots_m1, Z);
            return true;
        }, _ => ());
    }
    with_vfmt!(ty, V => {
        go!(dots_m1, V);
        true
    }, _ => false)
}
