//! Fused row norms → `norm_fused.metal`: `FusedResidualLN` and
//! `FusedRmsNormMulSilu`, and the DiT `AdaLayerNorm` / `GatedResidual`
//! (modulation rows broadcast over x's lead dims). Lead packs the host
//! would reject (a modulation dim neither 1 nor x's, too few modulation
//! rows) stay on the host, as do GroupNorms with channels not divisible
//! into the groups.

use super::{elementwise, kernel, rows, suffix, Lowered};
use crate::metal::args::{GroupNormArgs, ModNormArgs, RowNormArgs};
use crate::metal::kernels::Family;
use crate::thunk::Thunk;

/// The modulation-row map of a `[lead_rank, x_lead[8], mod_lead[8]]` lead
/// pack as [`ModNormArgs`] fields, or `None` when a modulation row would
/// fall outside `[mod_rows, h]` (a host error).
fn mod_map(pack: &[u32; 17], rows: u32, h: u32, eps: f32) -> Option<ModNormArgs> {
    let r = (pack[0] as usize).min(8);
    let (x, m) = (&pack[1..1 + r], &pack[9..9 + r]);
    let mod_rows = m.iter().try_fold(1u64, |a, &d| a.checked_mul(d as u64))?;
    let mut args = ModNormArgs {
        rows,
        h,
        eps,
        rank: r as u32,
        ..Default::default()
    };
    if x == m {
        // identity map: every row needs its own modulation row
        args.same = 1;
        return (rows as u64 <= mod_rows).then_some(args);
    }
    let mut acc = 1u64;
    for i in (0..r).rev() {
        if m[i] != 1 {
            if m[i] != x[i] {
                return None;
            }
            args.mod_stride[i] = u32::try_from(acc).ok()?;
        }
        acc *= m[i] as u64;
    }
    args.x_lead[..r].copy_from_slice(x);
    Some(args)
}

/// `residual_layer_norm_*`, `rms_norm_mul_silu_*`, `ada_layer_norm_*`
/// (one threadgroup per row), `gated_residual_*` (elementwise) and
/// `group_norm_*` (one threadgroup per sample and group).
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
        Thunk::AdaLayerNorm(n) if n.rows > 0 && n.h > 0 && !super::aliased(t) => {
            let mut a = mod_map(&n.lead_pack, n.rows, n.h, n.eps)?;
            a.layer_norm = n.layer_norm as u32;
            let offs = [n.x, n.scale, n.shift, n.out];
            let k = kernel(
                Family::NormFused,
                format!("ada_layer_norm_{}", suffix(n.dt)),
            );
            Lowered::Dispatch(rows(i, k, &a, &offs, n.rows, n.h))
        }
        Thunk::GatedResidual(n) if n.rows > 0 && n.h > 0 => {
            let a = mod_map(&n.lead_pack, n.rows, n.h, 0.0)?;
            let total = u32::try_from(n.rows as u64 * n.h as u64).ok()?;
            let offs = [n.x, n.y, n.gate, n.out];
            let k = kernel(
                Family::NormFused,
                format!("gated_residual_{}", suffix(n.dt)),
            );
            Lowered::Dispatch(elementwise(i, k, &a, &offs, total))
        }
        Thunk::GroupNorm(n)
            if n.num_groups > 0 && n.c.is_multiple_of(n.num_groups) && n.n > 0 && n.c > 0 =>
        {
            let hw = u32::try_from(n.h as u64 * n.w as u64).ok()?;
            let a = GroupNormArgs {
                count: u32::try_from(n.n as u64 * n.num_groups as u64).ok()?,
                groups: n.num_groups,
                cg: n.c / n.num_groups,
                hw,
                eps: n.eps,
            };
            let glen = u32::try_from(a.cg as u64 * hw as u64).ok()?;
            if glen == 0 {
                return Some(Lowered::Skip);
            }
            let offs = [n.src, n.g, n.b, n.dst];
            let k = kernel(Family::NormFused, format!("group_norm_{}", suffix(n.dt)));
            Lowered::Dispatch(rows(i, k, &a, &offs, a.count, glen))
        }
        Thunk::FusedResidualLN(_)
        | Thunk::FusedRmsNormMulSilu(_)
        | Thunk::GroupNorm(_)
        | Thunk::AdaLayerNorm(_)
        | Thunk::GatedResidual(_)
            if t.io().writes.is_empty() =>
        {
            Lowered::Skip
        }
        _ => return None,
    })
}
