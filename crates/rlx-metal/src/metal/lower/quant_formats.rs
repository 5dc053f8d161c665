//! Non-GGUF weight-format matmuls (`DequantMatMulInt8` / `Int4` / `Fp8` /
//! `Nvfp4`) and the scaled ops (`ScaledMatMul`, `ScaledQuantize`,
//! `ScaledDequantize`, `ScaledQuantScale`) → `quant_formats.metal`.
//!
//! Matmuls: one simdgroup per output element, four per threadgroup, grid
//! `(ceil(n / 4), m)`. Quantise / dequantise: one thread per element.
//! Scales: one thread per scale group.
//!
//! Stays on the host (`None`):
//! - any read overlapping the write (the kernels read operands while other
//!   threadgroups write the result);
//! - an f32 operand at a byte offset that is not a multiple of 4 (the
//!   kernels read them as `float` arrays);
//! - more than `u32::MAX` elements in an operand (32-bit element indices in
//!   the elementwise kernels).

use super::{aliased, kernel, Lowered, ELEMENTWISE_THREADS};
use crate::metal::args::{KernelArgs, QuantFormatArgs, ScaledArgs};
use crate::metal::kernels::Family;
use crate::metal::plan::{BufferBinding, Dispatch};
use crate::thunk::{raw_offset, Thunk};
use rlx_ir::{ScaleLayout, ScaledFormat};

/// Simdgroups per matmul threadgroup (`QF_SG`).
const SIMDGROUPS: u32 = 4;

fn fmt_code(f: ScaledFormat) -> u32 {
    match f {
        ScaledFormat::Fp8E4m3 => 0,
        ScaledFormat::Fp8E5m2 => 1,
        ScaledFormat::Int8 => 2,
    }
}

/// `(layout code, block)` of a scale layout.
fn layout_code(l: ScaleLayout) -> (u32, u32) {
    match l {
        ScaleLayout::PerTensor => (0, 1),
        ScaleLayout::PerRow => (1, 1),
        ScaleLayout::Block { size } => (2, size.max(1)),
    }
}

fn aligned4(offs: &[usize]) -> bool {
    offs.iter().all(|&o| raw_offset(o).is_multiple_of(4))
}

fn dispatch(
    i: usize,
    name: &str,
    args: &impl KernelArgs,
    offs: &[usize],
    grid: [u32; 3],
    threads: u32,
) -> Lowered {
    Lowered::Dispatch(Dispatch {
        thunk: i,
        kernel: kernel(Family::QuantFormats, name.to_string()),
        args: args.as_bytes().to_vec(),
        bindings: offs.iter().map(|&o| BufferBinding::of(o)).collect(),
        grid,
        threadgroup: [threads, 1, 1],
        threadgroup_memory: Vec::new(),
    })
}

/// A matmul dispatch: `offs` are bound from buffer(1) on.
fn matmul(i: usize, name: &str, args: &impl KernelArgs, offs: &[usize], m: u32, n: u32) -> Lowered {
    let grid = [n.div_ceil(SIMDGROUPS), m, 1];
    dispatch(i, name, args, offs, grid, SIMDGROUPS * 32)
}

pub(super) fn lower(i: usize, t: &Thunk) -> Option<Lowered> {
    let empty = t.io().writes.iter().all(|w| w.len == 0);
    match t {
        Thunk::DequantMatMulInt8(_)
        | Thunk::DequantMatMulInt4(_)
        | Thunk::DequantMatMulFp8(_)
        | Thunk::DequantMatMulNvfp4(_)
        | Thunk::ScaledMatMul(_)
        | Thunk::ScaledQuantize(_)
        | Thunk::ScaledDequantize(_)
        | Thunk::ScaledQuantScale(_) => {}
        _ => return None,
    }
    if empty {
        return Some(Lowered::Skip);
    }
    if aliased(t) {
        return None;
    }
    lower_checked(i, t)
}

fn lower_checked(i: usize, t: &Thunk) -> Option<Lowered> {
    match t {
        Thunk::DequantMatMulInt8(d) => int_matmul(
            i,
            "dqmm_int8",
            [d.x, d.w_q, d.scale, d.zp, d.dst],
            (d.m, d.k, d.n),
            (d.block_size, d.is_asymmetric),
        ),
        Thunk::DequantMatMulInt4(d) => int_matmul(
            i,
            "dqmm_int4",
            [d.x, d.w_q, d.scale, d.zp, d.dst],
            (d.m, d.k, d.n),
            (d.block_size, d.is_asymmetric),
        ),
        Thunk::DequantMatMulFp8(d) => {
            // buffer(4) is unused: bind the scale again
            let offs = [d.x, d.w_q, d.scale, d.scale, d.dst];
            let args = QuantFormatArgs {
                m: d.m,
                k: d.k,
                n: d.n,
                block_size: 1,
                flag: d.e5m2 as u32,
            };
            aligned4(&[d.x, d.scale, d.dst]).then(|| matmul(i, "dqmm_fp8", &args, &offs, d.m, d.n))
        }
        Thunk::DequantMatMulNvfp4(d) => {
            let offs = [d.x, d.w_q, d.scale, d.global_scale, d.dst];
            let args = QuantFormatArgs {
                m: d.m,
                k: d.k,
                n: d.n,
                block_size: 16,
                flag: 0,
            };
            aligned4(&[d.x, d.global_scale, d.dst])
                .then(|| matmul(i, "dqmm_nvfp4", &args, &offs, d.m, d.n))
        }
        Thunk::ScaledMatMul(d) => {
            let (layout, block) = layout_code(d.layout);
            let args = ScaledArgs {
                m: d.m,
                k: d.k,
                n: d.n,
                lhs_fmt: fmt_code(d.lhs_fmt),
                rhs_fmt: fmt_code(d.rhs_fmt),
                layout,
                block,
                has_bias: d.has_bias as u32,
            };
            let bias = if d.has_bias { d.bias } else { d.rhs_scale };
            let offs = [d.lhs, d.rhs, d.lhs_scale, d.rhs_scale, bias, d.dst];
            aligned4(&[d.lhs_scale, d.rhs_scale, bias, d.dst])
                .then(|| matmul(i, "scaled_matmul", &args, &offs, d.m, d.n))
        }
        Thunk::ScaledQuantize(d) => {
            let len = d.rows.checked_mul(d.cols)?;
            let args = elementwise_args(d.rows, d.cols, d.fmt, d.layout);
            let grid = [len.div_ceil(ELEMENTWISE_THREADS), 1, 1];
            aligned4(&[d.x, d.scale]).then(|| {
                let offs = [d.x, d.scale, d.dst];
                dispatch(
                    i,
                    "scaled_quantize",
                    &args,
                    &offs,
                    grid,
                    ELEMENTWISE_THREADS,
                )
            })
        }
        Thunk::ScaledDequantize(d) => {
            let len = d.rows.checked_mul(d.cols)?;
            let args = elementwise_args(d.rows, d.cols, d.fmt, d.layout);
            let grid = [len.div_ceil(ELEMENTWISE_THREADS), 1, 1];
            aligned4(&[d.scale, d.dst]).then(|| {
                let offs = [d.codes, d.scale, d.dst];
                dispatch(
                    i,
                    "scaled_dequantize",
                    &args,
                    &offs,
                    grid,
                    ELEMENTWISE_THREADS,
                )
            })
        }
        Thunk::ScaledQuantScale(d) => {
            d.rows.checked_mul(d.cols)?;
            let args = elementwise_args(d.rows, d.cols, d.fmt, d.layout);
            let groups = match d.layout {
                ScaleLayout::PerTensor => 1,
                ScaleLayout::PerRow => d.rows,
                ScaleLayout::Block { size } => d.rows.checked_mul(d.cols.div_ceil(size.max(1)))?,
            };
            let grid = [groups.div_ceil(ELEMENTWISE_THREADS), 1, 1];
            aligned4(&[d.x, d.dst]).then(|| {
                let offs = [d.x, d.dst];
                dispatch(
                    i,
                    "scaled_quant_scale",
                    &args,
                    &offs,
                    grid,
                    ELEMENTWISE_THREADS,
                )
            })
        }
        _ => None,
    }
}

/// A block-int matmul: `offs` are x, w, scale, zp, dst.
fn int_matmul(
    i: usize,
    name: &str,
    offs: [usize; 5],
    (m, k, n): (u32, u32, u32),
    (block_size, asym): (u32, bool),
) -> Option<Lowered> {
    let args = QuantFormatArgs {
        m,
        k,
        n,
        block_size: block_size.max(1),
        flag: asym as u32,
    };
    let [x, _, scale, zp, dst] = offs;
    aligned4(&[x, scale, zp, dst]).then(|| matmul(i, name, &args, &offs, m, n))
}

/// Args of the elementwise scaled kernels (`m` rows, `k` cols).
fn elementwise_args(rows: u32, cols: u32, fmt: ScaledFormat, layout: ScaleLayout) -> ScaledArgs {
    let (layout, block) = layout_code(layout);
    ScaledArgs {
        m: rows,
        k: cols,
        n: 0,
        lhs_fmt: fmt_code(fmt),
        rhs_fmt: 0,
        layout,
        block,
        has_bias: 0,
    }
}
