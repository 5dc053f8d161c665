//! Native glue for the fused decode-MLP thunks (`fused_mlp_gate_up_swiglu`,
//! `fused_mlp_gate_up_gelu`, `fused_mlp_down_residual`) onto
//! [`crate::host::kernels::quant::gate_up_gemv`] and
//! [`crate::host::kernels::quant::down_residual_gemv`].
//!
//! Operands overlapping the output (the in-place residual `h += down(x)`)
//! are staged first, like every native thunk.

use super::{read_staged, NResult};
use crate::host::buffer::Mem;
use crate::host::exec::{NativeError, Staging};
use crate::host::kernels::quant::{self as q, Act, Gating, Out};
use crate::thunk::quant::packed_row_bytes;
use crate::thunk::Thunk;
use half::f16;
use rlx_ir::QuantScheme;

pub(super) fn handles(t: &Thunk) -> bool {
    match t {
        Thunk::FusedMlpGateUpSwiGLU(f) => matches!(f.scheme, QuantScheme::Gguf(_)),
        Thunk::FusedMlpGateUpGelu(f) => matches!(f.scheme, QuantScheme::Gguf(_)),
        Thunk::FusedMlpDownResidual(f) => matches!(f.scheme, QuantScheme::Gguf(_)),
        _ => false,
    }
}

/// `n` activations at `off` (f16 when `f16`), staged when they overlap
/// `[dst, dst + dst_bytes)`.
#[allow(clippy::too_many_arguments)]
fn act<'a>(
    mem: &'a Mem<'_>,
    stage: &'a mut Vec<u64>,
    what: &'static str,
    off: usize,
    n: usize,
    f16: bool,
    dst: usize,
    dst_bytes: usize,
) -> Result<Act<'a>, NativeError> {
    Ok(if f16 {
        Act::F16(read_staged::<f16>(
            mem, stage, what, off, n, dst, dst_bytes,
        )?)
    } else {
        Act::F32(read_staged::<f32>(
            mem, stage, what, off, n, dst, dst_bytes,
        )?)
    })
}

/// The f32 or f16 output `[n]` at `off`.
fn out<'a>(mem: &'a Mem<'_>, off: usize, n: usize, f16: bool) -> Result<Out<'a>, NativeError> {
    Ok(if f16 {
        Out::F16(mem.get_mut::<f16>("dst", off, n)?)
    } else {
        Out::F32(mem.get_mut::<f32>("dst", off, n)?)
    })
}

/// Bytes of an `[n]` output.
fn out_bytes(n: usize, f16: bool) -> usize {
    n * if f16 { 2 } else { 4 }
}

#[allow(clippy::too_many_arguments)]
fn gate_up(
    mem: &Mem,
    st: &mut Staging,
    (x, gate_w, up_w, dst): (usize, usize, usize, usize),
    (k, n): (u32, u32),
    scheme: QuantScheme,
    (x_f16, dst_f16): (bool, bool),
    gating: Gating,
) -> NResult {
    let QuantScheme::Gguf(ty) = scheme else {
        return Ok(());
    };
    let (ku, nu) = (k as usize, n as usize);
    let wb = nu * packed_row_bytes(scheme, k);
    let g = mem.get::<u8>("gate_w", gate_w, wb)?;
    let u = mem.get::<u8>("up_w", up_w, wb)?;
    let x = act(
        mem,
        &mut st.a,
        "x",
        x,
        ku,
        x_f16,
        dst,
        out_bytes(nu, dst_f16),
    )?;
    let o = out(mem, dst, nu, dst_f16)?;
    Ok(q::gate_up_gemv(ty, x, g, u, o, ku, nu, gating)?)
}

pub(super) fn run(t: &Thunk, mem: &Mem, st: &mut Staging) -> NResult {
    match t {
        Thunk::FusedMlpGateUpSwiGLU(f) => gate_up(
            mem,
            st,
            (f.x, f.gate_w, f.up_w, f.dst),
            (f.k, f.n),
            f.scheme,
            (f.x_f16, f.dst_f16),
            Gating::Silu,
        ),
        Thunk::FusedMlpGateUpGelu(f) => gate_up(
            mem,
            st,
            (f.x, f.gate_w, f.up_w, f.dst),
            (f.k, f.n),
            f.scheme,
            (false, false),
            Gating::GeluTanh,
        ),
        Thunk::FusedMlpDownResidual(f) => {
            let QuantScheme::Gguf(ty) = f.scheme else {
                return Ok(());
            };
            let (k, n) = (f.k as usize, f.n as usize);
            let w = mem.get::<u8>("w", f.w, n * packed_row_bytes(f.scheme, f.k))?;
            let ob = out_bytes(n, f.dst_f16);
            let (sa, sb) = (&mut st.a, &mut st.b);
            let x = act(mem, sa, "x", f.x, k, f.x_f16, f.dst, ob)?;
            let res = act(mem, sb, "res", f.res, n, f.res_f16, f.dst, ob)?;
            let o = out(mem, f.dst, n, f.dst_f16)?;
            Ok(q::down_residual_gemv(ty, x, w, res, o, k, n)?)
        }
        _ => Ok(()),
    }
}
