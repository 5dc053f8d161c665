//! Native glue for the packed-GGUF quantised matmuls
//! (`dequant_matmul_gguf`, `dequant_matmul_gguf_t`,
//! `dequant_grouped_matmul_gguf`) onto
//! [`crate::host::kernels::quant`].

use super::{read_staged, NResult};
use crate::host::buffer::Mem;
use crate::host::exec::Staging;
use crate::host::kernels::quant::{self as q, Act, Out};
use crate::thunk::quant::packed_row_bytes;
use crate::thunk::Thunk;
use half::f16;
use rlx_ir::QuantScheme;

pub(super) fn handles(t: &Thunk) -> bool {
    match t {
        Thunk::DequantMatMulGguf(d) => matches!(d.scheme, QuantScheme::Gguf(_)),
        Thunk::DequantMatMulGgufT(d) => matches!(d.scheme, QuantScheme::Gguf(_)),
        Thunk::DequantGroupedMatMulGguf(d) => matches!(d.scheme, QuantScheme::Gguf(_)),
        _ => false,
    }
}

pub(super) fn run(t: &Thunk, mem: &Mem, st: &mut Staging) -> NResult {
    match t {
        Thunk::DequantMatMulGguf(d) => {
            let QuantScheme::Gguf(ty) = d.scheme else {
                return Ok(());
            };
            let (m, k, n) = (d.m as usize, d.k as usize, d.n as usize);
            let w = mem.get::<u8>("w_q", d.w_q, n * packed_row_bytes(d.scheme, d.k))?;
            let dst_bytes = m * n * if d.dst_f16 { 2 } else { 4 };
            let x = if d.x_f16 {
                Act::F16(read_staged::<f16>(
                    mem,
                    &mut st.a,
                    "x",
                    d.x,
                    m * k,
                    d.dst,
                    dst_bytes,
                )?)
            } else {
                Act::F32(read_staged::<f32>(
                    mem,
                    &mut st.a,
                    "x",
                    d.x,
                    m * k,
                    d.dst,
                    dst_bytes,
                )?)
            };
            let out = if d.dst_f16 {
                Out::F16(mem.get_mut::<f16>("dst", d.dst, m * n)?)
            } else {
                Out::F32(mem.get_mut::<f32>("dst", d.dst, m * n)?)
            };
            Ok(q::dequant_matmul(ty, x, w, out, m, k, n)?)
        }
        Thunk::DequantMatMulGgufT(d) => {
            let QuantScheme::Gguf(ty) = d.scheme else {
                return Ok(());
            };
            let (m, k, n) = (d.m as usize, d.k as usize, d.n as usize);
            let w = mem.get::<u8>("w_q", d.w_q, n * packed_row_bytes(d.scheme, d.k))?;
            let x = read_staged::<f32>(mem, &mut st.a, "x", d.x, m * n, d.dst, m * k * 4)?;
            let out = mem.get_mut::<f32>("dst", d.dst, m * k)?;
            Ok(q::dequant_matmul_t(ty, x, w, out, m, k, n)?)
        }
        Thunk::DequantGroupedMatMulGguf(d) => {
            let QuantScheme::Gguf(ty) = d.scheme else {
                return Ok(());
            };
            let (m, k, n, e) = (
                d.m as usize,
                d.k_dim as usize,
                d.n as usize,
                d.num_experts as usize,
            );
            let rows = e * n;
            let w = mem.get::<u8>("w_q", d.w_q, rows * packed_row_bytes(d.scheme, d.k_dim))?;
            let dst_bytes = m * n * 4;
            let (sa, sb) = (&mut st.a, &mut st.b);
            let x = read_staged::<f32>(mem, sa, "input", d.input, m * k, d.dst, dst_bytes)?;
            let idx = read_staged::<i32>(mem, sb, "expert_idx", d.expert_idx, m, d.dst, dst_bytes)?;
            let out = mem.get_mut::<f32>("dst", d.dst, m * n)?;
            Ok(q::dequant_grouped_matmul(ty, x, w, idx, out, m, k, n, e)?)
        }
        _ => Ok(()),
    }
}
