//! Row norms → `norm.metal`.

use super::{kernel, rows, suffix, Lowered};
use crate::metal::args::RowNormArgs;
use crate::metal::kernels::Family;
use crate::thunk::Thunk;

/// `rms_norm_*`, `layer_norm_*` and `residual_rms_norm_*`, one threadgroup
/// per row.
pub(super) fn lower(i: usize, t: &Thunk) -> Option<Lowered> {
    let args = |rows, h, eps, has_bias: bool| RowNormArgs {
        rows,
        h,
        eps,
        has_bias: has_bias as u32,
    };
    Some(match t {
        Thunk::RmsNorm(n) if n.rows > 0 && n.h > 0 => {
            let k = kernel(Family::Norm, format!("rms_norm_{}", suffix(n.dt)));
            let a = args(n.rows, n.h, n.eps, false);
            Lowered::Dispatch(rows(i, k, &a, &[n.src, n.g, n.b, n.dst], n.rows, n.h))
        }
        Thunk::LayerNorm(n) if n.rows > 0 && n.h > 0 => {
            let k = kernel(Family::Norm, format!("layer_norm_{}", suffix(n.dt)));
            let a = args(n.rows, n.h, n.eps, false);
            Lowered::Dispatch(rows(i, k, &a, &[n.src, n.g, n.b, n.dst], n.rows, n.h))
        }
        Thunk::FusedResidualRmsNorm(n) if n.rows > 0 && n.h > 0 => {
            // without a bias the kernel never reads buffer(3), but Metal
            // wants every declared buffer bound: bind gamma there.
            let bias = if n.has_bias { n.bias } else { n.g };
            let offs = [n.x, n.res, bias, n.g, n.b, n.out];
            let k = kernel(Family::Norm, format!("residual_rms_norm_{}", suffix(n.dt)));
            let a = args(n.rows, n.h, n.eps, n.has_bias);
            Lowered::Dispatch(rows(i, k, &a, &offs, n.rows, n.h))
        }
        Thunk::RmsNorm(_) | Thunk::LayerNorm(_) | Thunk::FusedResidualRmsNorm(_)
            if t.io().writes.is_empty() =>
        {
            Lowered::Skip
        }
        _ => return None,
    })
}
