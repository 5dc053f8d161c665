//! Binary and ternary elementwise thunks: fused binary+activation, dense
//! and broadcasting binary ops, bias add, compare, select and fma.
//!
//! All operands are dense buffers of `len` elements unless a struct says
//! otherwise (broadcast strides, `*_scalar` flags). Thunks without a dtype
//! field are f32.

use super::io::{bytes, nbytes, strided_extent, ThunkIo, F32};
use super::offsets::Off;
use super::{HalfFlag, ThunkOp};
use rlx_ir::op::{Activation, BinaryOp, CmpOp};
use serde::{Deserialize, Serialize};
use std::fmt;

/// `dst = act(lhs op rhs)`, all operands `len` elements.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusedBinaryActivation {
    /// Left operand.
    pub lhs: usize,
    /// Right operand.
    pub rhs: usize,
    /// Destination.
    pub dst: usize,
    /// Elements.
    pub len: u32,
    /// Binary op.
    pub op: BinaryOp,
    /// Activation applied to the result.
    pub act: Activation,
    /// Element type.
    pub dt: HalfFlag,
}

impl ThunkOp for FusedBinaryActivation {
    const NAME: &'static str = "fused_binary_activation";
    fn io(&self) -> ThunkIo {
        let n = bytes(&[self.len], self.dt.size());
        ThunkIo::elementwise(&[self.lhs, self.rhs], self.dst, n)
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (op, act) = (self.op.name(), self.act.name());
        let (l, r, d) = (Off(self.lhs), Off(self.rhs), Off(self.dst));
        write!(
            f,
            "{act}({op}) len={} {} lhs={l} rhs={r} dst={d}",
            self.len, self.dt
        )
    }
}

/// `dst = act((lhs op0 rhs0) op1 rhs1)`, all operands `len` elements.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusedTernaryActivation {
    /// First operand.
    pub lhs: usize,
    /// Second operand.
    pub rhs0: usize,
    /// Third operand.
    pub rhs1: usize,
    /// Destination.
    pub dst: usize,
    /// Elements.
    pub len: u32,
    /// Inner op.
    pub op0: BinaryOp,
    /// Outer op.
    pub op1: BinaryOp,
    /// Activation applied to the result.
    pub act: Activation,
    /// Element type.
    pub dt: HalfFlag,
}

impl ThunkOp for FusedTernaryActivation {
    const NAME: &'static str = "fused_ternary_activation";
    fn io(&self) -> ThunkIo {
        let n = bytes(&[self.len], self.dt.size());
        ThunkIo::elementwise(&[self.lhs, self.rhs0, self.rhs1], self.dst, n)
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (o0, o1, act) = (self.op0.name(), self.op1.name(), self.act.name());
        let (l, r0, r1) = (Off(self.lhs), Off(self.rhs0), Off(self.rhs1));
        write!(
            f,
            "{act}({o0},{o1}) len={} {} lhs={l} rhs0={r0} rhs1={r1} dst={}",
            self.len,
            self.dt,
            Off(self.dst)
        )
    }
}

/// `dst = lhs op rhs` on equal-size operands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BinaryFull {
    /// Left operand.
    pub lhs: usize,
    /// Right operand.
    pub rhs: usize,
    /// Destination.
    pub dst: usize,
    /// Elements.
    pub len: u32,
    /// The op.
    pub op: BinaryOp,
    /// Element type.
    pub dt: HalfFlag,
}

impl ThunkOp for BinaryFull {
    const NAME: &'static str = "binary";
    fn io(&self) -> ThunkIo {
        let n = bytes(&[self.len], self.dt.size());
        ThunkIo::elementwise(&[self.lhs, self.rhs], self.dst, n)
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (l, r, d) = (Off(self.lhs), Off(self.rhs), Off(self.dst));
        let op = self.op.name();
        write!(
            f,
            "{op} len={} {} lhs={l} rhs={r} dst={d}",
            self.len, self.dt
        )
    }
}

/// Broadcasting `dst = lhs op rhs` of any rank. The output is dense with
/// `out_dims` (`len` elements); each input is addressed through per-axis
/// element strides (0 = broadcast axis). Strides come from a dense input,
/// so the span `1 + Σ (dim - 1)·stride` is exactly each input's size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BinaryBroadcast {
    /// Left operand.
    pub lhs: usize,
    /// Right operand.
    pub rhs: usize,
    /// Destination (dense, `out_dims`).
    pub dst: usize,
    /// Output elements.
    pub len: u32,
    /// The op.
    pub op: BinaryOp,
    /// Element type.
    pub dt: HalfFlag,
    /// Rank (length of the three vectors).
    pub rank: u32,
    /// Output dims.
    pub out_dims: Vec<u32>,
    /// Left operand's element stride per output axis (0 = broadcast).
    pub lhs_strides: Vec<u32>,
    /// Right operand's element stride per output axis (0 = broadcast).
    pub rhs_strides: Vec<u32>,
}

impl ThunkOp for BinaryBroadcast {
    const NAME: &'static str = "binary_broadcast";
    fn io(&self) -> ThunkIo {
        let es = self.dt.size();
        let l = nbytes(strided_extent(&self.out_dims, &self.lhs_strides), es);
        let r = nbytes(strided_extent(&self.out_dims, &self.rhs_strides), es);
        ThunkIo::new()
            .read(self.lhs, l)
            .read(self.rhs, r)
            .write(self.dst, bytes(&[self.len], es))
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (l, r, d) = (Off(self.lhs), Off(self.rhs), Off(self.dst));
        write!(
            f,
            "{} out={:?} lhs_strides={:?} rhs_strides={:?} {} lhs={l} rhs={r} dst={d}",
            self.op.name(),
            self.out_dims,
            self.lhs_strides,
            self.rhs_strides,
            self.dt
        )
    }
}

/// `dst[m, n] = src[m, n] + bias[n]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BiasAdd {
    /// Source `[m, n]`.
    pub src: usize,
    /// Bias `[n]`.
    pub bias: usize,
    /// Destination `[m, n]`.
    pub dst: usize,
    /// Rows.
    pub m: u32,
    /// Columns.
    pub n: u32,
    /// Element type.
    pub dt: HalfFlag,
}

impl ThunkOp for BiasAdd {
    const NAME: &'static str = "bias_add";
    fn io(&self) -> ThunkIo {
        let es = self.dt.size();
        let mn = bytes(&[self.m, self.n], es);
        ThunkIo::new()
            .read(self.src, mn)
            .read(self.bias, bytes(&[self.n], es))
            .write(self.dst, mn)
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (s, b, d) = (Off(self.src), Off(self.bias), Off(self.dst));
        write!(
            f,
            "m={} n={} {} src={s} bias={b} dst={d}",
            self.m, self.n, self.dt
        )
    }
}

/// `dst = (lhs cmp rhs) ? 1.0 : 0.0`, f32. A `*_scalar` operand is one
/// element broadcast over `len`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Compare {
    /// Left operand (f32).
    pub lhs: usize,
    /// Right operand (f32).
    pub rhs: usize,
    /// Destination (f32 0/1).
    pub dst: usize,
    /// Output elements.
    pub len: u32,
    /// Comparison.
    pub op: CmpOp,
    /// `lhs` is a single element.
    pub lhs_scalar: bool,
    /// `rhs` is a single element.
    pub rhs_scalar: bool,
}

/// Elements an operand reads: one if it is a broadcast scalar, else `len`.
fn operand_len(scalar: bool, len: u32) -> u32 {
    if scalar {
        1.min(len)
    } else {
        len
    }
}

impl ThunkOp for Compare {
    const NAME: &'static str = "compare";
    fn io(&self) -> ThunkIo {
        ThunkIo::new()
            .read(
                self.lhs,
                bytes(&[operand_len(self.lhs_scalar, self.len)], F32),
            )
            .read(
                self.rhs,
                bytes(&[operand_len(self.rhs_scalar, self.len)], F32),
            )
            .write(self.dst, bytes(&[self.len], F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (l, r, d) = (Off(self.lhs), Off(self.rhs), Off(self.dst));
        let sc = |s: bool| if s { "(scalar)" } else { "" };
        write!(
            f,
            "{} len={} lhs={l}{} rhs={r}{} dst={d}",
            self.op.name(),
            self.len,
            sc(self.lhs_scalar),
            sc(self.rhs_scalar)
        )
    }
}

/// `dst = cond != 0 ? on_true : on_false`, f32; `*_scalar` operands are one
/// element broadcast over `len`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Where {
    /// Condition (f32, nonzero = true).
    pub cond: usize,
    /// Value where true.
    pub on_true: usize,
    /// Value where false.
    pub on_false: usize,
    /// Destination.
    pub dst: usize,
    /// Output elements.
    pub len: u32,
    /// `cond` is a single element.
    pub cond_scalar: bool,
    /// `on_true` is a single element.
    pub true_scalar: bool,
    /// `on_false` is a single element.
    pub false_scalar: bool,
}

impl ThunkOp for Where {
    const NAME: &'static str = "where";
    fn io(&self) -> ThunkIo {
        let n = |s| bytes(&[operand_len(s, self.len)], F32);
        ThunkIo::new()
            .read(self.cond, n(self.cond_scalar))
            .read(self.on_true, n(self.true_scalar))
            .read(self.on_false, n(self.false_scalar))
            .write(self.dst, bytes(&[self.len], F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (c, t, e) = (Off(self.cond), Off(self.on_true), Off(self.on_false));
        write!(
            f,
            "len={} cond={c} true={t} false={e} dst={}",
            self.len,
            Off(self.dst)
        )
    }
}

/// `dst = a * b + c`, f32, all `len` elements.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fma {
    /// First factor.
    pub a: usize,
    /// Second factor.
    pub b: usize,
    /// Addend.
    pub c: usize,
    /// Destination.
    pub dst: usize,
    /// Elements.
    pub len: u32,
}

impl ThunkOp for Fma {
    const NAME: &'static str = "fma";
    fn io(&self) -> ThunkIo {
        let n = bytes(&[self.len], F32);
        ThunkIo::elementwise(&[self.a, self.b, self.c], self.dst, n)
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (a, b, c) = (Off(self.a), Off(self.b), Off(self.c));
        write!(
            f,
            "len={} a={a} b={b} c={c} dst={}",
            self.len,
            Off(self.dst)
        )
    }
}
