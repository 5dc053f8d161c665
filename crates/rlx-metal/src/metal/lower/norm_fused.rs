//! Fused row norms → `norm_fused.metal`: `FusedResidualLN` and
//! `FusedRmsNormMulSilu`. AdaLayerNorm, GatedResidual and GroupNorm have
//! no kernel yet (host).

use super::{kernel, rows, suffix, Lowered};
use crate::metal::args::RowNormArgs;
use crate::metal::kernels::Family;
use crate::thunk::Thunk;

/// `residual_layer_norm_*`, `rms_norm_mul_silu_*`, one threadgroup per row.
pub(super) fn lower(i: usize, t: &Thunk) -> Option<Lowered> {
    let args = |rows, h, eps, has_bias: bool| RowNormArgs {
        rows,
        h,
        eps,
        has_bias: has_bias as u32,
    };
    Some(match t {
        Thunk::FusedResidualLN(n) if n.rows > 0 && n.h > 0 => {
            // without a bias the kernel never reads buffer(3): bind gamma
            let bias = if n.has_bias { n.bias } else { n.g };
            let offs = [n.x, n.res, bias, n.g, n.b, n.out];
            let k = kernel(
                Family::NormFused,
                format!("residual_layer_norm_{}", suffix(n.dt)),
            );
            let a = args(n.rows, n.h, n.eps, n.has_bias);
            Lowered::Dispatch(rows(i, k, &a, &offs, n.rows, n.h))
        }
        Thunk::FusedRmsNormMulSilu(n) if n.rows > 0 && n.h > 0 => {
            let offs = [n.x, n.g, n.b, n.z, n.out];
            let k = kernel(
                Family::NormFused,
                format!("rms_norm_mul_silu_{}", suffix(n.dt)),
            );
            let a = args(n.rows, n.h, n.eps, false);
            Lowered::Dispatch(rows(i, k, &a, &offs, n.rows, n.h))
        }
        Thunk::FusedResidualLN(_) | Thunk::FusedRmsNormMulSilu(_) if t.io().writes.is_empty() => {
            Lowered::Skip
        }
        _ => return None,
    })
}
