//! Unary activations, casts (`Cast` → `cast_<s>_<d>`, `CastHost` →
//! `cast_host_<s>_<d>`) and the f32 truncation (`CastTruncF32` →
//! `cast_trunc_f32`, elementwise, so `src == dst` is fine) →
//! `elementwise.metal`.

use super::{aliased, elementwise, kernel, suffix, Lowered};
use crate::metal::args::{act_code, CastArgs, UnaryArgs};
use crate::metal::kernels::Family;
use crate::thunk::Thunk;
use rlx_ir::op::Activation;
use rlx_ir::DType;

/// True when `elementwise.metal` has `cast_host_<d>_*` / `cast_host_*_<d>`
/// kernels for `d` (every dtype but bf16, f64 and c64, which Metal lacks;
/// those casts stay host commands).
fn cast_host_kernel(d: DType) -> bool {
    matches!(
        d,
        DType::F32
            | DType::F16
            | DType::I8
            | DType::I16
            | DType::I32
            | DType::I64
            | DType::U8
            | DType::U32
            | DType::Bool
    )
}

/// `unary_*` for activations, `cast_*` for f32 ↔ f16 casts, `copy_*`
/// (shape family) for same-dtype casts, `cast_host_*` for `CastHost`
/// between the dtypes of [`cast_host_kernel`].
pub(super) fn lower(i: usize, t: &Thunk) -> Option<Lowered> {
    let fam = Family::Elementwise;
    let unary = |act: Activation, len: u32, src: usize, dst: usize, dt| {
        let args = UnaryArgs {
            len,
            op: act_code(act),
        };
        let k = kernel(fam, format!("unary_{}", suffix(dt)));
        Lowered::Dispatch(elementwise(i, k, &args, &[src, dst], len))
    };
    Some(match t {
        Thunk::ActivationOut(a) if a.len > 0 => unary(a.act, a.len, a.src, a.dst, a.dt),
        Thunk::ActivationInPlace(a) if a.len > 0 => unary(a.act, a.len, a.data, a.data, a.dt),
        Thunk::GeluApproxOut(a) if a.len > 0 => unary(
            Activation::GeluApprox,
            a.len,
            a.src,
            a.dst,
            crate::thunk::HalfFlag::F32,
        ),
        Thunk::Cast(c) if c.len > 0 && c.src_dt != c.dst_dt && !aliased(t) => {
            let name = format!("cast_{}_{}", suffix(c.src_dt), suffix(c.dst_dt));
            let args = CastArgs { len: c.len };
            Lowered::Dispatch(elementwise(
                i,
                kernel(fam, name),
                &args,
                &[c.src, c.dst],
                c.len,
            ))
        }
        Thunk::CastHost(c)
            if c.len > 0
                && cast_host_kernel(c.src_dt)
                && cast_host_kernel(c.dst_dt)
                && !aliased(t) =>
        {
            let name = format!("cast_host_{}_{}", c.src_dt.name(), c.dst_dt.name());
            let args = CastArgs { len: c.len };
            Lowered::Dispatch(elementwise(
                i,
                kernel(fam, name),
                &args,
                &[c.src, c.dst],
                c.len,
            ))
        }
        Thunk::CastTruncF32(c) if c.len > 0 => {
            let args = CastArgs { len: c.len };
            let k = kernel(fam, "cast_trunc_f32".into());
            Lowered::Dispatch(elementwise(i, k, &args, &[c.src, c.dst], c.len))
        }
        Thunk::ActivationOut(_)
        | Thunk::ActivationInPlace(_)
        | Thunk::GeluApproxOut(_)
        | Thunk::CastTruncF32(_)
            if t.io().writes.is_empty() =>
        {
            Lowered::Skip
        }
        Thunk::Cast(_) | Thunk::CastHost(_) if t.io().writes.is_empty() => Lowered::Skip,
        // a same-dtype cast (e.g. a weight copied into the arena) is a copy
        Thunk::Cast(c) if c.len > 0 && c.src_dt == c.dst_dt && !aliased(t) => {
            let bytes = c.len as u64 * c.src_dt.size() as u64;
            Lowered::Dispatch(super::shape::copy(i, c.src, c.dst, bytes)?)
        }
        _ => return None,
    })
}
