//! Argument structs of `quant_formats.metal`: the non-GGUF dequantising
//! matmuls (`dqmm_*`) and the `scaled_*` kernels (mirrored in
//! `kernels/args.h`).

use super::KernelArgs;

/// `QuantFormatArgs`: the `dqmm_*` kernels of `quant_formats.metal`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QuantFormatArgs {
    /// Rows of `x`.
    pub m: u32,
    /// Reduction length.
    pub k: u32,
    /// Output features.
    pub n: u32,
    /// Elements per scale block (int8 / int4).
    pub block_size: u32,
    /// Int: zero points present; FP8: E5M2 codes.
    pub flag: u32,
}

/// `ScaledArgs`: the `scaled_*` kernels of `quant_formats.metal`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ScaledArgs {
    /// Rows (of `lhs`, or of the elementwise operand).
    pub m: u32,
    /// Reduction length (or columns).
    pub k: u32,
    /// Columns of the matmul result.
    pub n: u32,
    /// Format code of `lhs` / the operand (0 E4M3, 1 E5M2, 2 int8).
    pub lhs_fmt: u32,
    /// Format code of `rhs`.
    pub rhs_fmt: u32,
    /// 0 per tensor, 1 per row, 2 blocks.
    pub layout: u32,
    /// Columns per scale block (layout 2).
    pub block: u32,
    /// 1 when a bias is bound.
    pub has_bias: u32,
}

kernel_args! {
    QuantFormatArgs = 20,
    ScaledArgs = 32,
}
