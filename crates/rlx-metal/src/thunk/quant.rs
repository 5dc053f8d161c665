//! Quantised matmuls: GGUF packed blocks (dense and grouped), legacy block
//! int8 / int4, FP8 and NVFP4.
//!
//! Weights are `n` rows of `k` elements along the reduction axis (ggml
//! layout, `x @ dequant(w)ᵀ`); a row occupies [`packed_row_bytes`] bytes.
//! Separate scale / zero-point tensors are f32 unless stated. Activations
//! and results are f32 unless a `*_f16` flag says f16.

use super::io::{bytes, elem_bytes, nbytes, ThunkIo, F32, IDX};
use super::offsets::Off;
use super::ThunkOp;
use rlx_ir::QuantScheme;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Bytes of one packed weight row of `k` elements; a partial final block
/// counts as a whole block (so the size never undercounts).
pub fn packed_row_bytes(scheme: QuantScheme, k: u32) -> usize {
    let block = scheme.block_size().max(1);
    (k as usize)
        .div_ceil(block)
        .saturating_mul(scheme.block_bytes())
}

/// Blocks per row of `k` elements with `block_size` elements per block
/// (a zero block size is treated as one block per row).
fn blocks_per_row(k: u32, block_size: u32) -> usize {
    if block_size == 0 {
        usize::from(k > 0)
    } else {
        (k as usize).div_ceil(block_size as usize)
    }
}

/// `dst [m, n] = x [m, k] @ dequant(w_q)ᵀ`, `w_q` GGUF blocks
/// `n · packed_row_bytes(scheme, k)` bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DequantMatMulGguf {
    /// Activation `[m, k]`.
    pub x: usize,
    /// Packed weight `[n, row_bytes]`.
    pub w_q: usize,
    /// Result `[m, n]`.
    pub dst: usize,
    /// Rows of `x`.
    pub m: u32,
    /// Reduction length.
    pub k: u32,
    /// Output features.
    pub n: u32,
    /// Block format.
    pub scheme: QuantScheme,
    /// `x` is f16.
    pub x_f16: bool,
    /// `dst` is f16.
    pub dst_f16: bool,
}

impl ThunkOp for DequantMatMulGguf {
    const NAME: &'static str = "dequant_matmul_gguf";
    fn io(&self) -> ThunkIo {
        let w = nbytes(self.n as usize, packed_row_bytes(self.scheme, self.k));
        ThunkIo::new()
            .read(self.x, bytes(&[self.m, self.k], elem_bytes(self.x_f16)))
            .read(self.w_q, w)
            .write(self.dst, bytes(&[self.m, self.n], elem_bytes(self.dst_f16)))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (x, w, d) = (Off(self.x), Off(self.w_q), Off(self.dst));
        write!(f, "{} m={} k={} n={}", self.scheme, self.m, self.k, self.n)?;
        if self.x_f16 {
            f.write_str(" x_f16")?;
        }
        if self.dst_f16 {
            f.write_str(" dst_f16")?;
        }
        write!(f, " x={x} w={w} dst={d}")
    }
}

/// `dst [m, k] = x [m, n] @ dequant(w_q)`: the transposed product of
/// [`DequantMatMulGguf`] (the input gradient of a frozen quantised weight),
/// computed from the packed blocks without a dense copy of the matrix.
/// f32 in and out. Not in the seed's thunk set (an rlx extension for
/// training).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DequantMatMulGgufT {
    /// Activation gradient `[m, n]`.
    pub x: usize,
    /// Packed weight `[n, row_bytes]`.
    pub w_q: usize,
    /// Result `[m, k]`.
    pub dst: usize,
    /// Rows of `x`.
    pub m: u32,
    /// Elements per weight row (output features of this product).
    pub k: u32,
    /// Weight rows (reduction length of this product).
    pub n: u32,
    /// Block format.
    pub scheme: QuantScheme,
}

impl ThunkOp for DequantMatMulGgufT {
    const NAME: &'static str = "dequant_matmul_gguf_t";
    fn io(&self) -> ThunkIo {
        let w = nbytes(self.n as usize, packed_row_bytes(self.scheme, self.k));
        ThunkIo::new()
            .read(self.x, bytes(&[self.m, self.n], F32))
            .read(self.w_q, w)
            .write(self.dst, bytes(&[self.m, self.k], F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (x, w, d) = (Off(self.x), Off(self.w_q), Off(self.dst));
        write!(
            f,
            "{} m={} k={} n={} x={x} w={w} dst={d}",
            self.scheme, self.m, self.k, self.n
        )
    }
}

/// Grouped matmul over a packed GGUF expert stack: row `i` of `input
/// [m, k_dim]` against expert `expert_idx[i]` (i32). `w_q` is
/// `num_experts · n` packed rows; the whole stack is reported read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DequantGroupedMatMulGguf {
    /// Input `[m, k_dim]` f32.
    pub input: usize,
    /// Packed experts `[num_experts, n, row_bytes]`.
    pub w_q: usize,
    /// Expert per row, i32 `[m]`.
    pub expert_idx: usize,
    /// Result `[m, n]` f32.
    pub dst: usize,
    /// Rows.
    pub m: u32,
    /// Reduction length.
    pub k_dim: u32,
    /// Output features.
    pub n: u32,
    /// Experts in the stack.
    pub num_experts: u32,
    /// Block format.
    pub scheme: QuantScheme,
}

impl ThunkOp for DequantGroupedMatMulGguf {
    const NAME: &'static str = "dequant_grouped_matmul_gguf";
    fn io(&self) -> ThunkIo {
        let rows = (self.num_experts as usize).saturating_mul(self.n as usize);
        ThunkIo::new()
            .read(self.input, bytes(&[self.m, self.k_dim], F32))
            .read(
                self.w_q,
                nbytes(rows, packed_row_bytes(self.scheme, self.k_dim)),
            )
            .read(self.expert_idx, bytes(&[self.m], IDX))
            .write(self.dst, bytes(&[self.m, self.n], F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (x, w, e, d) = (
            Off(self.input),
            Off(self.w_q),
            Off(self.expert_idx),
            Off(self.dst),
        );
        write!(
            f,
            "{} m={} k={} n={} experts={}",
            self.scheme, self.m, self.k_dim, self.n, self.num_experts
        )?;
        write!(f, " input={x} w={w} expert_idx={e} dst={d}")
    }
}

/// Block int8 matmul: `w_q` int8 `[n, k]`, one f32 scale (and with
/// `is_asymmetric` one f32 zero point) per `block_size` elements of a row:
/// `n · ceil(k / block_size)` each.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DequantMatMulInt8 {
    /// Activation `[m, k]` f32.
    pub x: usize,
    /// Codes `[n, k]` int8.
    pub w_q: usize,
    /// Scales `[n, blocks]` f32.
    pub scale: usize,
    /// Zero points `[n, blocks]` f32 (asymmetric only).
    pub zp: usize,
    /// Result `[m, n]` f32.
    pub dst: usize,
    /// Rows of `x`.
    pub m: u32,
    /// Reduction length.
    pub k: u32,
    /// Output features.
    pub n: u32,
    /// Elements per scale block.
    pub block_size: u32,
    /// Zero points present.
    pub is_asymmetric: bool,
}

impl ThunkOp for DequantMatMulInt8 {
    const NAME: &'static str = "dequant_matmul_int8";
    fn io(&self) -> ThunkIo {
        let blocks = nbytes(self.n as usize, blocks_per_row(self.k, self.block_size));
        ThunkIo::new()
            .read(self.x, bytes(&[self.m, self.k], F32))
            .read(self.w_q, bytes(&[self.n, self.k], 1))
            .read(self.scale, nbytes(blocks, F32))
            .read_if(self.is_asymmetric, self.zp, nbytes(blocks, F32))
            .write(self.dst, bytes(&[self.m, self.n], F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_block(
            f,
            self.m,
            self.k,
            self.n,
            self.block_size,
            self.is_asymmetric,
        )?;
        write!(
            f,
            " x={} w={} dst={}",
            Off(self.x),
            Off(self.w_q),
            Off(self.dst)
        )
    }
}

/// Block int4 matmul: as [`DequantMatMulInt8`] but two codes per byte,
/// a row taking `ceil(k / 2)` bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DequantMatMulInt4 {
    /// Activation `[m, k]` f32.
    pub x: usize,
    /// Codes `[n, ceil(k/2)]` bytes.
    pub w_q: usize,
    /// Scales `[n, blocks]` f32.
    pub scale: usize,
    /// Zero points `[n, blocks]` f32 (asymmetric only).
    pub zp: usize,
    /// Result `[m, n]` f32.
    pub dst: usize,
    /// Rows of `x`.
    pub m: u32,
    /// Reduction length.
    pub k: u32,
    /// Output features.
    pub n: u32,
    /// Elements per scale block.
    pub block_size: u32,
    /// Zero points present.
    pub is_asymmetric: bool,
}

impl ThunkOp for DequantMatMulInt4 {
    const NAME: &'static str = "dequant_matmul_int4";
    fn io(&self) -> ThunkIo {
        let blocks = nbytes(self.n as usize, blocks_per_row(self.k, self.block_size));
        ThunkIo::new()
            .read(self.x, bytes(&[self.m, self.k], F32))
            .read(
                self.w_q,
                nbytes(self.n as usize, (self.k as usize).div_ceil(2)),
            )
            .read(self.scale, nbytes(blocks, F32))
            .read_if(self.is_asymmetric, self.zp, nbytes(blocks, F32))
            .write(self.dst, bytes(&[self.m, self.n], F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_block(
            f,
            self.m,
            self.k,
            self.n,
            self.block_size,
            self.is_asymmetric,
        )?;
        write!(
            f,
            " x={} w={} dst={}",
            Off(self.x),
            Off(self.w_q),
            Off(self.dst)
        )
    }
}

/// Shared description of the block int schemes.
fn fmt_block(
    f: &mut fmt::Formatter<'_>,
    m: u32,
    k: u32,
    n: u32,
    bs: u32,
    asym: bool,
) -> fmt::Result {
    let a = if asym { " asym" } else { "" };
    write!(f, "m={m} k={k} n={n} block={bs}{a}")
}

/// FP8 matmul: codes `[n, k]` one byte each (E4M3, or E5M2 with `e5m2`),
/// one f32 scale per output row (`[n]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DequantMatMulFp8 {
    /// Activation `[m, k]` f32.
    pub x: usize,
    /// Codes `[n, k]`.
    pub w_q: usize,
    /// Scales `[n]` f32.
    pub scale: usize,
    /// Result `[m, n]` f32.
    pub dst: usize,
    /// Rows of `x`.
    pub m: u32,
    /// Reduction length.
    pub k: u32,
    /// Output features.
    pub n: u32,
    /// E5M2 codes (else E4M3).
    pub e5m2: bool,
}

impl ThunkOp for DequantMatMulFp8 {
    const NAME: &'static str = "dequant_matmul_fp8";
    fn io(&self) -> ThunkIo {
        ThunkIo::new()
            .read(self.x, bytes(&[self.m, self.k], F32))
            .read(self.w_q, bytes(&[self.n, self.k], 1))
            .read(self.scale, bytes(&[self.n], F32))
            .write(self.dst, bytes(&[self.m, self.n], F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fmt8 = if self.e5m2 { "e5m2" } else { "e4m3" };
        write!(f, "{fmt8} m={} k={} n={}", self.m, self.k, self.n)?;
        write!(
            f,
            " x={} w={} dst={}",
            Off(self.x),
            Off(self.w_q),
            Off(self.dst)
        )
    }
}

/// NVFP4 matmul: E2M1 codes two per byte (`[n, ceil(k/2)]`), one E4M3
/// scale byte per 16 elements (`[n, ceil(k/16)]`) and one f32 global scale.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DequantMatMulNvfp4 {
    /// Activation `[m, k]` f32.
    pub x: usize,
    /// Codes.
    pub w_q: usize,
    /// Block scales (one byte each).
    pub scale: usize,
    /// Global scale (one f32).
    pub global_scale: usize,
    /// Result `[m, n]` f32.
    pub dst: usize,
    /// Rows of `x`.
    pub m: u32,
    /// Reduction length.
    pub k: u32,
    /// Output features.
    pub n: u32,
}

impl ThunkOp for DequantMatMulNvfp4 {
    const NAME: &'static str = "dequant_matmul_nvfp4";
    fn io(&self) -> ThunkIo {
        let n = self.n as usize;
        ThunkIo::new()
            .read(self.x, bytes(&[self.m, self.k], F32))
            .read(self.w_q, nbytes(n, (self.k as usize).div_ceil(2)))
            .read(self.scale, nbytes(n, blocks_per_row(self.k, 16)))
            .read(self.global_scale, F32)
            .write(self.dst, bytes(&[self.m, self.n], F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "m={} k={} n={}", self.m, self.k, self.n)?;
        write!(
            f,
            " x={} w={} dst={}",
            Off(self.x),
            Off(self.w_q),
            Off(self.dst)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::GgmlType;

    #[test]
    fn row_bytes() {
        let q4k = QuantScheme::Gguf(GgmlType::Q4K);
        assert_eq!(packed_row_bytes(q4k, 512), 288);
        // partial block rounds up rather than undercounting
        assert_eq!(packed_row_bytes(q4k, 576), 3 * 144);
        assert_eq!(
            packed_row_bytes(QuantScheme::Gguf(GgmlType::Q4_1), 576),
            360
        );
        assert_eq!(blocks_per_row(100, 32), 4);
        assert_eq!(blocks_per_row(100, 0), 1);
        assert_eq!(blocks_per_row(0, 0), 0);
    }
}
