//! Native glue for the non-GGUF weight-format matmuls
//! (`dequant_matmul_int8` / `int4` / `fp8` / `nvfp4`) and the scaled ops
//! (`scaled_matmul`, `scaled_quantize`, `scaled_dequantize`,
//! `scaled_quant_scale`) onto [`crate::host::kernels::quant::formats`].
//!
//! The lowering never places an operand of these thunks over its output;
//! an overlapping operand (a hand-built schedule) is an error rather than an
//! aliased slice.

use super::{overlap, NResult};
use crate::host::buffer::{Mem, Plain};
use crate::host::exec::NativeError;
use crate::host::kernels::invalid;
use crate::host::kernels::quant::formats::{self as f, IntWeight, ScaledOperand};
use crate::thunk::Thunk;
use rlx_ir::ScaleLayout;

pub(super) fn handles(t: &Thunk) -> bool {
    matches!(
        t,
        Thunk::DequantMatMulInt8(_)
            | Thunk::DequantMatMulInt4(_)
            | Thunk::DequantMatMulFp8(_)
            | Thunk::DequantMatMulNvfp4(_)
            | Thunk::ScaledMatMul(_)
            | Thunk::ScaledQuantize(_)
            | Thunk::ScaledDequantize(_)
            | Thunk::ScaledQuantScale(_)
    )
}

/// Reads operands that must not overlap the output `[dst, dst + dst_bytes)`.
struct Reader<'a> {
    mem: &'a Mem<'a>,
    kernel: &'static str,
    dst: usize,
    dst_bytes: usize,
}

impl<'a> Reader<'a> {
    fn get<T: Plain>(
        &self,
        what: &'static str,
        off: usize,
        n: usize,
    ) -> Result<&'a [T], NativeError> {
        let bytes = n.saturating_mul(std::mem::size_of::<T>());
        if overlap(off, bytes, self.dst, self.dst_bytes) {
            let msg = format!("operand {what} overlaps the output");
            return Err(invalid(self.kernel, msg).into());
        }
        Ok(self.mem.get::<T>(what, off, n)?)
    }
}

fn scales(layout: ScaleLayout, rows: u32, cols: u32) -> usize {
    f::scale_count(layout, rows as usize, cols as usize)
}

/// The fields both block-int thunks share.
struct IntFields {
    x: usize,
    w_q: usize,
    scale: usize,
    zp: usize,
    dst: usize,
    mkn: (u32, u32, u32),
    block_size: u32,
    asym: bool,
}

/// [`IntFields`] of a `DequantMatMulInt8` / `Int4` (same field names).
macro_rules! int_fields {
    ($d:expr) => {
        IntFields {
            x: $d.x,
            w_q: $d.w_q,
            scale: $d.scale,
            zp: $d.zp,
            dst: $d.dst,
            mkn: ($d.m, $d.k, $d.n),
            block_size: $d.block_size,
            asym: $d.is_asymmetric,
        }
    };
}

fn int_matmul(mem: &Mem, kernel: &'static str, d: IntFields, four_bit: bool) -> NResult {
    let (m, k, n) = (d.mkn.0 as usize, d.mkn.1 as usize, d.mkn.2 as usize);
    let r = Reader {
        mem,
        kernel,
        dst: d.dst,
        dst_bytes: m * n * 4,
    };
    let nb = n * k.div_ceil(d.block_size.max(1) as usize);
    let rb = if four_bit { k.div_ceil(2) } else { k };
    let w = IntWeight {
        codes: r.get::<u8>("w_q", d.w_q, n * rb)?,
        scale: r.get::<f32>("scale", d.scale, nb)?,
        zp: match d.asym {
            true => Some(r.get::<f32>("zp", d.zp, nb)?),
            false => None,
        },
        block_size: d.block_size as usize,
        four_bit,
    };
    let x = r.get::<f32>("x", d.x, m * k)?;
    let out = mem.get_mut::<f32>("dst", d.dst, m * n)?;
    Ok(f::dequant_matmul_int(x, w, out, m, k, n)?)
}

pub(super) fn run(t: &Thunk, mem: &Mem) -> NResult {
    let kernel = t.name();
    let reader = |dst: usize, dst_bytes: usize| Reader {
        mem,
        kernel,
        dst,
        dst_bytes,
    };
    match t {
        Thunk::DequantMatMulInt8(d) => int_matmul(mem, kernel, int_fields!(d), false),
        Thunk::DequantMatMulInt4(d) => int_matmul(mem, kernel, int_fields!(d), true),
        Thunk::DequantMatMulFp8(d) => {
            let (m, k, n) = (d.m as usize, d.k as usize, d.n as usize);
            let r = reader(d.dst, m * n * 4);
            let w = r.get::<u8>("w_q", d.w_q, n * k)?;
            let scale = r.get::<f32>("scale", d.scale, n)?;
            let x = r.get::<f32>("x", d.x, m * k)?;
            let out = mem.get_mut::<f32>("dst", d.dst, m * n)?;
            Ok(f::dequant_matmul_fp8(x, w, scale, out, m, k, n, d.e5m2)?)
        }
        Thunk::DequantMatMulNvfp4(d) => {
            let (m, k, n) = (d.m as usize, d.k as usize, d.n as usize);
            let r = reader(d.dst, m * n * 4);
            let w = r.get::<u8>("w_q", d.w_q, n * k.div_ceil(2))?;
            let bs = r.get::<u8>("scale", d.scale, n * k.div_ceil(16))?;
            let g = r.get::<f32>("global_scale", d.global_scale, 1)?[0];
            let x = r.get::<f32>("x", d.x, m * k)?;
            let out = mem.get_mut::<f32>("dst", d.dst, m * n)?;
            Ok(f::dequant_matmul_nvfp4(x, w, bs, g, out, m, k, n)?)
        }
        Thunk::ScaledMatMul(d) => {
            let (m, k, n) = (d.m as usize, d.k as usize, d.n as usize);
            let r = reader(d.dst, m * n * 4);
            let lhs = ScaledOperand {
                codes: r.get::<u8>("lhs", d.lhs, m * k)?,
                scale: r.get::<f32>("lhs_scale", d.lhs_scale, scales(d.layout, d.m, d.k))?,
                fmt: d.lhs_fmt,
            };
            let rhs = ScaledOperand {
                codes: r.get::<u8>("rhs", d.rhs, n * k)?,
                scale: r.get::<f32>("rhs_scale", d.rhs_scale, scales(d.layout, d.n, d.k))?,
                fmt: d.rhs_fmt,
            };
            let bias = match d.has_bias {
                true => Some(r.get::<f32>("bias", d.bias, n)?),
                false => None,
            };
            let out = mem.get_mut::<f32>("dst", d.dst, m * n)?;
            Ok(f::scaled_matmul(lhs, rhs, bias, d.layout, out, (m, k, n))?)
        }
        Thunk::ScaledQuantize(d) => {
            let len = d.rows as usize * d.cols as usize;
            let r = reader(d.dst, len);
            let x = r.get::<f32>("x", d.x, len)?;
            let s = r.get::<f32>("scale", d.scale, scales(d.layout, d.rows, d.cols))?;
            let out = mem.get_mut::<u8>("dst", d.dst, len)?;
            let rc = (d.rows as usize, d.cols as usize);
            Ok(f::scaled_quantize(x, s, out, rc, d.fmt, d.layout)?)
        }
        Thunk::ScaledDequantize(d) => {
            let len = d.rows as usize * d.cols as usize;
            let r = reader(d.dst, len * 4);
            let codes = r.get::<u8>("codes", d.codes, len)?;
            let s = r.get::<f32>("scale", d.scale, scales(d.layout, d.rows, d.cols))?;
            let out = mem.get_mut::<f32>("dst", d.dst, len)?;
            let rc = (d.rows as usize, d.cols as usize);
            Ok(f::scaled_dequantize(codes, s, out, rc, d.fmt, d.layout)?)
        }
        Thunk::ScaledQuantScale(d) => {
            let len = d.rows as usize * d.cols as usize;
            let ns = scales(d.layout, d.rows, d.cols);
            let r = reader(d.dst, ns * 4);
            let x = r.get::<f32>("x", d.x, len)?;
            let out = mem.get_mut::<f32>("dst", d.dst, ns)?;
            let rc = (d.rows as usize, d.cols as usize);
            Ok(f::scaled_quant_scale(x, out, rc, d.fmt, d.layout)?)
        }
        _ => Ok(()),
    }
}
