//! Reductions and row-wise ops: softmax (in place), softmax
//! cross-entropy (dense, integer labels, backward), cumsum, reduce, top-k,
//! arg-max/min and sampling.
//!
//! Labels, top-k / arg-reduce indices and sampled tokens are i32.

use super::io::{bytes, ThunkIo, F32, IDX};
use super::offsets::Off;
use super::{HalfFlag, ThunkOp};
use rlx_ir::op::ReduceOp;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Row softmax in place over `data [rows, cols]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Softmax {
    /// Buffer updated in place.
    pub data: usize,
    /// Rows.
    pub rows: u32,
    /// Columns (softmax axis).
    pub cols: u32,
    /// Element type.
    pub dt: HalfFlag,
}

impl ThunkOp for Softmax {
    const NAME: &'static str = "softmax";
    fn io(&self) -> ThunkIo {
        ThunkIo::new().update(self.data, bytes(&[self.rows, self.cols], self.dt.size()))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rows={} cols={} {} data={}",
            self.rows,
            self.cols,
            self.dt,
            Off(self.data)
        )
    }
}

/// Soft-label cross-entropy, f32: `logits [n, c]`, `targets [n, c]` →
/// per-row loss `[n]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SoftmaxCrossEntropyDense {
    /// Logits `[n, c]`.
    pub logits: usize,
    /// Target distribution `[n, c]`.
    pub targets: usize,
    /// Loss `[n]`.
    pub dst: usize,
    /// Rows.
    pub n: u32,
    /// Classes.
    pub c: u32,
}

impl ThunkOp for SoftmaxCrossEntropyDense {
    const NAME: &'static str = "softmax_cross_entropy_dense";
    fn io(&self) -> ThunkIo {
        let nc = bytes(&[self.n, self.c], F32);
        ThunkIo::new()
            .read(self.logits, nc)
            .read(self.targets, nc)
            .write(self.dst, bytes(&[self.n], F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (l, t, d) = (Off(self.logits), Off(self.targets), Off(self.dst));
        write!(
            f,
            "n={} c={} logits={l} targets={t} dst={d}",
            self.n, self.c
        )
    }
}

/// Integer-label cross-entropy, f32: `loss[r] = logsumexp(logits[r]) -
/// logits[r, labels[r]]`; labels i32 `[n]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SoftmaxCrossEntropyWithLogits {
    /// Logits `[n, c]`.
    pub logits: usize,
    /// Labels i32 `[n]`.
    pub labels: usize,
    /// Loss `[n]`.
    pub dst: usize,
    /// Rows.
    pub n: u32,
    /// Classes.
    pub c: u32,
}

impl ThunkOp for SoftmaxCrossEntropyWithLogits {
    const NAME: &'static str = "softmax_cross_entropy_with_logits";
    fn io(&self) -> ThunkIo {
        ThunkIo::new()
            .read(self.logits, bytes(&[self.n, self.c], F32))
            .read(self.labels, bytes(&[self.n], IDX))
            .write(self.dst, bytes(&[self.n], F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (l, y, d) = (Off(self.logits), Off(self.labels), Off(self.dst));
        write!(f, "n={} c={} logits={l} labels={y} dst={d}", self.n, self.c)
    }
}

/// Gradient of [`SoftmaxCrossEntropyWithLogits`], f32:
/// `dlogits[r, k] = (softmax(logits[r])[k] - [k == labels[r]]) · d_loss[r]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SoftmaxCrossEntropyBackward {
    /// Logits `[n, c]`.
    pub logits: usize,
    /// Labels i32 `[n]`.
    pub labels: usize,
    /// Upstream gradient `[n]`.
    pub d_loss: usize,
    /// Result `[n, c]`.
    pub dlogits: usize,
    /// Rows.
    pub n: u32,
    /// Classes.
    pub c: u32,
}

impl ThunkOp for SoftmaxCrossEntropyBackward {
    const NAME: &'static str = "softmax_cross_entropy_backward";
    fn io(&self) -> ThunkIo {
        let nc = bytes(&[self.n, self.c], F32);
        ThunkIo::new()
            .read(self.logits, nc)
            .read(self.labels, bytes(&[self.n], IDX))
            .read(self.d_loss, bytes(&[self.n], F32))
            .write(self.dlogits, nc)
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (l, y, g, d) = (
            Off(self.logits),
            Off(self.labels),
            Off(self.d_loss),
            Off(self.dlogits),
        );
        write!(
            f,
            "n={} c={} logits={l} labels={y} d_loss={g} dlogits={d}",
            self.n, self.c
        )
    }
}

/// Prefix sum along the last axis of `[rows, cols]`, f32.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cumsum {
    /// Input.
    pub src: usize,
    /// Output.
    pub dst: usize,
    /// Rows.
    pub rows: u32,
    /// Columns (scan axis).
    pub cols: u32,
    /// Exclusive scan.
    pub exclusive: bool,
}

impl ThunkOp for Cumsum {
    const NAME: &'static str = "cumsum";
    fn io(&self) -> ThunkIo {
        let n = bytes(&[self.rows, self.cols], F32);
        ThunkIo::new().read(self.src, n).write(self.dst, n)
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ex = if self.exclusive { " exclusive" } else { "" };
        write!(
            f,
            "rows={} cols={}{ex} src={} dst={}",
            self.rows,
            self.cols,
            Off(self.src),
            Off(self.dst)
        )
    }
}

/// Reduce the middle axis of `[outer, reduced, inner]` → `[outer, inner]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reduce {
    /// Input.
    pub src: usize,
    /// Output.
    pub dst: usize,
    /// Product of dims before the reduced range.
    pub outer: u32,
    /// Product of the reduced dims.
    pub reduced: u32,
    /// Product of dims after the reduced range.
    pub inner: u32,
    /// Reduction.
    pub op: ReduceOp,
    /// Element type.
    pub dt: HalfFlag,
}

impl ThunkOp for Reduce {
    const NAME: &'static str = "reduce";
    fn io(&self) -> ThunkIo {
        let es = self.dt.size();
        ThunkIo::new()
            .read(self.src, bytes(&[self.outer, self.reduced, self.inner], es))
            .write(self.dst, bytes(&[self.outer, self.inner], es))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} [{},{},{}] {} src={} dst={}",
            self.op.name(),
            self.outer,
            self.reduced,
            self.inner,
            self.dt,
            Off(self.src),
            Off(self.dst)
        )
    }
}

/// Indices of the `k` largest along the last axis: f32 `[outer, axis_dim]`
/// → i32 `[outer, k]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopK {
    /// Input.
    pub src: usize,
    /// Indices i32.
    pub dst: usize,
    /// Rows.
    pub outer: u32,
    /// Row length.
    pub axis_dim: u32,
    /// Indices kept per row.
    pub k: u32,
}

impl ThunkOp for TopK {
    const NAME: &'static str = "topk";
    fn io(&self) -> ThunkIo {
        ThunkIo::new()
            .read(self.src, bytes(&[self.outer, self.axis_dim], F32))
            .write(self.dst, bytes(&[self.outer, self.k], IDX))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "outer={} axis={} k={} src={} dst={}",
            self.outer,
            self.axis_dim,
            self.k,
            Off(self.src),
            Off(self.dst)
        )
    }
}

/// Arg-max / arg-min of the middle axis: f32 `[outer, reduced, inner]` →
/// 4-byte indices `[outer, inner]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArgReduce {
    /// Input.
    pub src: usize,
    /// Indices.
    pub dst: usize,
    /// Product of dims before the axis.
    pub outer: u32,
    /// Axis length.
    pub reduced: u32,
    /// Product of dims after the axis.
    pub inner: u32,
    /// Arg-max (else arg-min).
    pub is_max: bool,
}

impl ThunkOp for ArgReduce {
    const NAME: &'static str = "argreduce";
    fn io(&self) -> ThunkIo {
        ThunkIo::new()
            .read(
                self.src,
                bytes(&[self.outer, self.reduced, self.inner], F32),
            )
            .write(self.dst, bytes(&[self.outer, self.inner], IDX))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.is_max { "argmax" } else { "argmin" };
        write!(
            f,
            "{kind} [{},{},{}] src={} dst={}",
            self.outer,
            self.reduced,
            self.inner,
            Off(self.src),
            Off(self.dst)
        )
    }
}

/// Draw one token per row: f32 `logits [batch, vocab]` → i32 `[batch]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Logits.
    pub logits: usize,
    /// Tokens i32.
    pub dst: usize,
    /// Rows.
    pub batch: u32,
    /// Vocabulary size.
    pub vocab: u32,
    /// Keep the k most likely (0 = all).
    pub top_k: u32,
    /// Nucleus threshold.
    pub top_p: f32,
    /// Temperature (0 = greedy).
    pub temperature: f32,
    /// Seed of the draw.
    pub seed: u64,
}

impl ThunkOp for Sample {
    const NAME: &'static str = "sample";
    fn io(&self) -> ThunkIo {
        ThunkIo::new()
            .read(self.logits, bytes(&[self.batch, self.vocab], F32))
            .write(self.dst, bytes(&[self.batch], IDX))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "batch={} vocab={} top_k={} top_p={} temp={} seed={} logits={} dst={}",
            self.batch,
            self.vocab,
            self.top_k,
            self.top_p,
            self.temperature,
            self.seed,
            Off(self.logits),
            Off(self.dst)
        )
    }
}
