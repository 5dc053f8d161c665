//! Dense matmuls: plain, batched, bias+activation epilogue, mixture-of-
//! experts grouped, and the scaled low-precision (FP8 / int8) family.
//!
//! Layouts are row-major: `a [m, k] @ b [k, n] -> c [m, n]` unless a struct
//! says otherwise.

use super::io::{bytes, nbytes, ThunkIo, F32, IDX};
use super::offsets::Off;
use super::{HalfFlag, ThunkOp};
use rlx_ir::op::Activation;
use rlx_ir::{ScaleLayout, ScaledFormat};
use serde::{Deserialize, Serialize};
use std::fmt;

/// `c [m, n] = a [m, k] @ b [k, n]`. With `b_f16` the weight is stored as
/// f16 whatever `dt` is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sgemm {
    /// Left operand `[m, k]`.
    pub a: usize,
    /// Right operand `[k, n]` (usually a weight).
    pub b: usize,
    /// Result `[m, n]`.
    pub c: usize,
    /// Rows of `a`.
    pub m: u32,
    /// Reduction length.
    pub k: u32,
    /// Columns of `b`.
    pub n: u32,
    /// Element type of `a`, `c` (and `b` unless `b_f16`).
    pub dt: HalfFlag,
    /// `b` is stored as f16.
    pub b_f16: bool,
}

impl ThunkOp for Sgemm {
    const NAME: &'static str = "sgemm";
    fn io(&self) -> ThunkIo {
        let es = self.dt.size();
        let bs = if self.b_f16 { 2 } else { es };
        ThunkIo::new()
            .read(self.a, bytes(&[self.m, self.k], es))
            .read(self.b, bytes(&[self.k, self.n], bs))
            .write(self.c, bytes(&[self.m, self.n], es))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (a, b, c) = (Off(self.a), Off(self.b), Off(self.c));
        write!(f, "m={} k={} n={} {}", self.m, self.k, self.n, self.dt)?;
        if self.b_f16 {
            f.write_str(" b_f16")?;
        }
        write!(f, " a={a} b={b} c={c}")
    }
}

/// `c[i] = a[i] @ b[i]` for `i < batch`. A broadcast operand
/// (`a_bcast` / `b_bcast`) is a single matrix reused by every batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchedSgemm {
    /// Left operand `[batch | 1, m, k]`.
    pub a: usize,
    /// Right operand `[batch | 1, k, n]`.
    pub b: usize,
    /// Result `[batch, m, n]`.
    pub c: usize,
    /// Batch count.
    pub batch: u32,
    /// Rows.
    pub m: u32,
    /// Reduction length.
    pub k: u32,
    /// Columns.
    pub n: u32,
    /// Element type.
    pub dt: HalfFlag,
    /// `a` has batch 1 and is reused.
    pub a_bcast: bool,
    /// `b` has batch 1 and is reused.
    pub b_bcast: bool,
}

impl ThunkOp for BatchedSgemm {
    const NAME: &'static str = "batched_sgemm";
    fn io(&self) -> ThunkIo {
        let es = self.dt.size();
        let nb = |bc: bool| if bc { 1 } else { self.batch };
        ThunkIo::new()
            .read(self.a, bytes(&[nb(self.a_bcast), self.m, self.k], es))
            .read(self.b, bytes(&[nb(self.b_bcast), self.k, self.n], es))
            .write(self.c, bytes(&[self.batch, self.m, self.n], es))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (a, b, c) = (Off(self.a), Off(self.b), Off(self.c));
        let (m, k, n) = (self.m, self.k, self.n);
        write!(f, "batch={} m={m} k={k} n={n} {}", self.batch, self.dt)?;
        if self.a_bcast {
            f.write_str(" a_bcast")?;
        }
        if self.b_bcast {
            f.write_str(" b_bcast")?;
        }
        write!(f, " a={a} b={b} c={c}")
    }
}

/// `c [m, n] = act(a [m, k] @ w [k, n] + bias [n])`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusedMmBiasAct {
    /// Input `[m, k]`.
    pub a: usize,
    /// Weight `[k, n]`.
    pub w: usize,
    /// Bias `[n]` (always read).
    pub bias: usize,
    /// Result `[m, n]`.
    pub c: usize,
    /// Rows.
    pub m: u32,
    /// Reduction length.
    pub k: u32,
    /// Columns.
    pub n: u32,
    /// Optional activation epilogue.
    pub act: Option<Activation>,
    /// Element type.
    pub dt: HalfFlag,
}

impl ThunkOp for FusedMmBiasAct {
    const NAME: &'static str = "fused_mm_bias_act";
    fn io(&self) -> ThunkIo {
        let es = self.dt.size();
        ThunkIo::new()
            .read(self.a, bytes(&[self.m, self.k], es))
            .read(self.w, bytes(&[self.k, self.n], es))
            .read(self.bias, bytes(&[self.n], es))
            .write(self.c, bytes(&[self.m, self.n], es))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let act = self.act.map_or("none", Activation::name);
        let (a, w, b, c) = (Off(self.a), Off(self.w), Off(self.bias), Off(self.c));
        write!(
            f,
            "m={} k={} n={} act={act} {}",
            self.m, self.k, self.n, self.dt
        )?;
        write!(f, " a={a} w={w} bias={b} c={c}")
    }
}

/// Mixture-of-experts matmul, f32: row `i` of `input [m, k_dim]` times
/// expert `expert_idx[i]` of `weight [num_experts, k_dim, n]`. The whole
/// expert stack is reported read (which experts is a run-time fact).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupedMatMul {
    /// Input `[m, k_dim]`.
    pub input: usize,
    /// Expert weights `[num_experts, k_dim, n]`.
    pub weight: usize,
    /// Expert per row, i32 `[m]`.
    pub expert_idx: usize,
    /// Result `[m, n]`.
    pub dst: usize,
    /// Rows.
    pub m: u32,
    /// Reduction length.
    pub k_dim: u32,
    /// Output columns.
    pub n: u32,
    /// Experts in the stack.
    pub num_experts: u32,
}

impl ThunkOp for GroupedMatMul {
    const NAME: &'static str = "grouped_matmul";
    fn io(&self) -> ThunkIo {
        ThunkIo::new()
            .read(self.input, bytes(&[self.m, self.k_dim], F32))
            .read(
                self.weight,
                bytes(&[self.num_experts, self.k_dim, self.n], F32),
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
            Off(self.weight),
            Off(self.expert_idx),
            Off(self.dst),
        );
        write!(
            f,
            "m={} k={} n={} experts={}",
            self.m, self.k_dim, self.n, self.num_experts
        )?;
        write!(f, " input={x} weight={w} expert_idx={e} dst={d}")
    }
}

/// f32 scale elements for a `[rows, cols]` operand under `layout`.
fn scale_elems(layout: ScaleLayout, rows: u32, cols: u32) -> usize {
    let dims = layout.scale_dims(rows as usize, cols as usize);
    dims.iter().fold(1usize, |a, &d| a.saturating_mul(d))
}

/// Bytes per code of a scaled format (all are one byte).
fn code_bytes(_fmt: ScaledFormat) -> usize {
    1
}

/// Low-precision GEMM, TN: `dst [m, n] = (lhs · s_l) @ (rhs · s_r)ᵀ (+ bias)`.
/// `lhs [m, k]` and `rhs [n, k]` are one-byte codes; scales are f32 with
/// `layout.scale_dims(m, k)` / `(n, k)`; bias `[n]` f32 when `has_bias`;
/// `dst` f32.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScaledMatMul {
    /// Left codes `[m, k]`.
    pub lhs: usize,
    /// Right codes `[n, k]`.
    pub rhs: usize,
    /// Left scales.
    pub lhs_scale: usize,
    /// Right scales.
    pub rhs_scale: usize,
    /// Bias `[n]` (read only when `has_bias`).
    pub bias: usize,
    /// Result `[m, n]` f32.
    pub dst: usize,
    /// Rows.
    pub m: u32,
    /// Reduction length.
    pub k: u32,
    /// Columns.
    pub n: u32,
    /// Format of `lhs`.
    pub lhs_fmt: ScaledFormat,
    /// Format of `rhs`.
    pub rhs_fmt: ScaledFormat,
    /// Scale layout of both operands.
    pub layout: ScaleLayout,
    /// Whether `bias` is present.
    pub has_bias: bool,
}

impl ThunkOp for ScaledMatMul {
    const NAME: &'static str = "scaled_matmul";
    fn io(&self) -> ThunkIo {
        let (m, k, n) = (self.m, self.k, self.n);
        ThunkIo::new()
            .read(self.lhs, bytes(&[m, k], code_bytes(self.lhs_fmt)))
            .read(self.rhs, bytes(&[n, k], code_bytes(self.rhs_fmt)))
            .read(self.lhs_scale, nbytes(scale_elems(self.layout, m, k), F32))
            .read(self.rhs_scale, nbytes(scale_elems(self.layout, n, k), F32))
            .read_if(self.has_bias, self.bias, bytes(&[n], F32))
            .write(self.dst, bytes(&[m, n], F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (l, r, d) = (Off(self.lhs), Off(self.rhs), Off(self.dst));
        write!(
            f,
            "m={} k={} n={} {:?}x{:?} {:?} bias={} lhs={l} rhs={r} dst={d}",
            self.m, self.k, self.n, self.lhs_fmt, self.rhs_fmt, self.layout, self.has_bias
        )
    }
}

/// f32 `x [rows, cols]` → one-byte codes `round(x / scale)`; scales f32
/// with `layout.scale_dims(rows, cols)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScaledQuantize {
    /// Input `[rows, cols]` f32.
    pub x: usize,
    /// Scales f32.
    pub scale: usize,
    /// Codes `[rows, cols]`.
    pub dst: usize,
    /// Rows.
    pub rows: u32,
    /// Columns.
    pub cols: u32,
    /// Code format.
    pub fmt: ScaledFormat,
    /// Scale layout.
    pub layout: ScaleLayout,
}

impl ThunkOp for ScaledQuantize {
    const NAME: &'static str = "scaled_quantize";
    fn io(&self) -> ThunkIo {
        ThunkIo::new()
            .read(self.x, bytes(&[self.rows, self.cols], F32))
            .read(
                self.scale,
                nbytes(scale_elems(self.layout, self.rows, self.cols), F32),
            )
            .write(
                self.dst,
                bytes(&[self.rows, self.cols], code_bytes(self.fmt)),
            )
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (x, s, d) = (Off(self.x), Off(self.scale), Off(self.dst));
        write!(
            f,
            "rows={} cols={} {:?} {:?}",
            self.rows, self.cols, self.fmt, self.layout
        )?;
        write!(f, " x={x} scale={s} dst={d}")
    }
}

/// One-byte codes `[rows, cols]` → f32 `decode(code) · scale`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScaledDequantize {
    /// Codes `[rows, cols]`.
    pub codes: usize,
    /// Scales f32 (`layout.scale_dims(rows, cols)`).
    pub scale: usize,
    /// Result `[rows, cols]` f32.
    pub dst: usize,
    /// Rows.
    pub rows: u32,
    /// Columns.
    pub cols: u32,
    /// Code format.
    pub fmt: ScaledFormat,
    /// Scale layout.
    pub layout: ScaleLayout,
}

impl ThunkOp for ScaledDequantize {
    const NAME: &'static str = "scaled_dequantize";
    fn io(&self) -> ThunkIo {
        ThunkIo::new()
            .read(
                self.codes,
                bytes(&[self.rows, self.cols], code_bytes(self.fmt)),
            )
            .read(
                self.scale,
                nbytes(scale_elems(self.layout, self.rows, self.cols), F32),
            )
            .write(self.dst, bytes(&[self.rows, self.cols], F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (c, s, d) = (Off(self.codes), Off(self.scale), Off(self.dst));
        write!(
            f,
            "rows={} cols={} {:?} {:?}",
            self.rows, self.cols, self.fmt, self.layout
        )?;
        write!(f, " codes={c} scale={s} dst={d}")
    }
}

/// Scales mapping each scale group's `max |x|` onto the format's maximum:
/// f32 `x [rows, cols]` → f32 `layout.scale_dims(rows, cols)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScaledQuantScale {
    /// Input `[rows, cols]` f32.
    pub x: usize,
    /// Scales f32.
    pub dst: usize,
    /// Rows.
    pub rows: u32,
    /// Columns.
    pub cols: u32,
    /// Code format (sets the target maximum).
    pub fmt: ScaledFormat,
    /// Scale layout.
    pub layout: ScaleLayout,
}

impl ThunkOp for ScaledQuantScale {
    const NAME: &'static str = "scaled_quant_scale";
    fn io(&self) -> ThunkIo {
        ThunkIo::new()
            .read(self.x, bytes(&[self.rows, self.cols], F32))
            .write(
                self.dst,
                nbytes(scale_elems(self.layout, self.rows, self.cols), F32),
            )
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rows={} cols={} {:?} {:?}",
            self.rows, self.cols, self.fmt, self.layout
        )?;
        write!(f, " x={} dst={}", Off(self.x), Off(self.dst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_counts() {
        assert_eq!(scale_elems(ScaleLayout::PerTensor, 8, 64), 1);
        assert_eq!(scale_elems(ScaleLayout::PerRow, 8, 64), 8);
        assert_eq!(scale_elems(ScaleLayout::Block { size: 32 }, 8, 65), 24);
    }
}
