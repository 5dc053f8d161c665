//! Fused decode-MLP thunks (m = 1): gate/up GEMVs with the gating
//! epilogue, and the down GEMV with the residual add. Passes create them;
//! no IR op lowers to them directly.
//!
//! Weights are `n` packed rows of `k` elements ([`packed_row_bytes`]).

use super::io::{bytes, elem_bytes, nbytes, ThunkIo, F32};
use super::offsets::Off;
use super::quant::packed_row_bytes;
use super::ThunkOp;
use rlx_ir::QuantScheme;
use serde::{Deserialize, Serialize};
use std::fmt;

/// `dst[i] = up(x)[i] · silu(gate(x)[i])` for one row: reads `x [k]`,
/// both packed weights (`n` rows each), writes `dst [n]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusedMlpGateUpSwiGLU {
    /// Input row `[k]` (already normed).
    pub x: usize,
    /// Gate projection, packed `[n, row_bytes]`.
    pub gate_w: usize,
    /// Up projection, packed `[n, row_bytes]`.
    pub up_w: usize,
    /// Result `[n]`.
    pub dst: usize,
    /// Hidden size.
    pub k: u32,
    /// Intermediate size.
    pub n: u32,
    /// Weight format.
    pub scheme: QuantScheme,
    /// `x` is f16.
    pub x_f16: bool,
    /// `dst` is f16.
    pub dst_f16: bool,
}

impl ThunkOp for FusedMlpGateUpSwiGLU {
    const NAME: &'static str = "fused_mlp_gate_up_swiglu";
    fn io(&self) -> ThunkIo {
        let w = nbytes(self.n as usize, packed_row_bytes(self.scheme, self.k));
        ThunkIo::new()
            .read(self.x, bytes(&[self.k], elem_bytes(self.x_f16)))
            .read(self.gate_w, w)
            .read(self.up_w, w)
            .write(self.dst, bytes(&[self.n], elem_bytes(self.dst_f16)))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (x, g, u, d) = (Off(self.x), Off(self.gate_w), Off(self.up_w), Off(self.dst));
        write!(
            f,
            "{} k={} n={} x={x} gate={g} up={u} dst={d}",
            self.scheme, self.k, self.n
        )
    }
}

/// `dst[i] = up(x)[i] · gelu_tanh(gate(x)[i])` for one row, f32.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusedMlpGateUpGelu {
    /// Input row `[k]` f32.
    pub x: usize,
    /// Gate projection, packed.
    pub gate_w: usize,
    /// Up projection, packed.
    pub up_w: usize,
    /// Result `[n]` f32.
    pub dst: usize,
    /// Hidden size.
    pub k: u32,
    /// Intermediate size.
    pub n: u32,
    /// Weight format.
    pub scheme: QuantScheme,
}

impl ThunkOp for FusedMlpGateUpGelu {
    const NAME: &'static str = "fused_mlp_gate_up_gelu";
    fn io(&self) -> ThunkIo {
        let w = nbytes(self.n as usize, packed_row_bytes(self.scheme, self.k));
        ThunkIo::new()
            .read(self.x, bytes(&[self.k], F32))
            .read(self.gate_w, w)
            .read(self.up_w, w)
            .write(self.dst, bytes(&[self.n], F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (x, g, u, d) = (Off(self.x), Off(self.gate_w), Off(self.up_w), Off(self.dst));
        write!(
            f,
            "{} k={} n={} x={x} gate={g} up={u} dst={d}",
            self.scheme, self.k, self.n
        )
    }
}

/// `dst[j] = res[j] + down(x)[j]` for one row: reads `x [k]`, the packed
/// weight (`n` rows), `res [n]`; writes `dst [n]` (may alias `res`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusedMlpDownResidual {
    /// Input row `[k]` (the gated activation).
    pub x: usize,
    /// Down projection, packed `[n, row_bytes]`.
    pub w: usize,
    /// Residual `[n]`.
    pub res: usize,
    /// Result `[n]`.
    pub dst: usize,
    /// Intermediate size.
    pub k: u32,
    /// Hidden size.
    pub n: u32,
    /// Weight format.
    pub scheme: QuantScheme,
    /// `x` is f16.
    pub x_f16: bool,
    /// `dst` is f16.
    pub dst_f16: bool,
    /// `res` is f16.
    pub res_f16: bool,
}

impl ThunkOp for FusedMlpDownResidual {
    const NAME: &'static str = "fused_mlp_down_residual";
    fn io(&self) -> ThunkIo {
        ThunkIo::new()
            .read(self.x, bytes(&[self.k], elem_bytes(self.x_f16)))
            .read(
                self.w,
                nbytes(self.n as usize, packed_row_bytes(self.scheme, self.k)),
            )
            .read(self.res, bytes(&[self.n], elem_bytes(self.res_f16)))
            .write(self.dst, bytes(&[self.n], elem_bytes(self.dst_f16)))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (x, w, r, d) = (Off(self.x), Off(self.w), Off(self.res), Off(self.dst));
        write!(
            f,
            "{} k={} n={} x={x} w={w} res={r} dst={d}",
            self.scheme, self.k, self.n
        )
    }
}
