//! Layout thunks: narrow, split, copy, concat, transpose / broadcast and
//! reverse.
//!
//! Narrow and split read column windows of `[outer, src_axis]` rows; their
//! reads are reported row by row (merged when the windows cover whole
//! rows), so `io()` never claims bytes between windows.

use super::io::{bytes, nbytes, numel, strided_extent, ThunkIo, F32};
use super::offsets::Off;
use super::{HalfFlag, ThunkOp};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Last-axis slice: `dst [outer, len] = src [outer, src_axis][.., start..start+len]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Narrow {
    /// Source `[outer, src_axis]`.
    pub src: usize,
    /// Destination `[outer, len]`.
    pub dst: usize,
    /// Rows.
    pub outer: u32,
    /// Source row width.
    pub src_axis: u32,
    /// First column.
    pub start: u32,
    /// Columns kept.
    pub len: u32,
    /// Element type.
    pub dt: HalfFlag,
}

impl ThunkOp for Narrow {
    const NAME: &'static str = "narrow";
    fn io(&self) -> ThunkIo {
        let es = self.dt.size();
        let window = (bytes(&[self.start], es), bytes(&[self.len], es));
        ThunkIo::new()
            .read_rows(
                self.src,
                self.outer as usize,
                bytes(&[self.src_axis], es),
                &[window],
            )
            .write(self.dst, bytes(&[self.outer, self.len], es))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "outer={} axis={} [{}..+{}] {} src={} dst={}",
            self.outer,
            self.src_axis,
            self.start,
            self.len,
            self.dt,
            Off(self.src),
            Off(self.dst)
        )
    }
}

/// Many last-axis narrows of one source in one dispatch. Each segment
/// `(dst, start, len)` writes a dense `[outer, len]` at `dst`; the source
/// reads are the union of the segments' column windows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SplitLastAxis {
    /// Source `[outer, src_axis]`.
    pub src: usize,
    /// Rows.
    pub outer: u32,
    /// Source row width.
    pub src_axis: u32,
    /// Element type.
    pub dt: HalfFlag,
    /// `(dst offset, first column, columns)` per output.
    pub segments: Vec<(usize, u32, u32)>,
}

impl ThunkOp for SplitLastAxis {
    const NAME: &'static str = "split_lastax";
    fn io(&self) -> ThunkIo {
        let es = self.dt.size();
        let windows: Vec<(usize, usize)> = self
            .segments
            .iter()
            .map(|&(_, start, len)| (bytes(&[start], es), bytes(&[len], es)))
            .collect();
        let mut io = ThunkIo::new().read_rows(
            self.src,
            self.outer as usize,
            bytes(&[self.src_axis], es),
            &windows,
        );
        for &(dst, _, len) in &self.segments {
            io = io.write(dst, bytes(&[self.outer, len], es));
        }
        io
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "outer={} axis={} {} src={} ->",
            self.outer,
            self.src_axis,
            self.dt,
            Off(self.src)
        )?;
        for &(dst, start, len) in &self.segments {
            write!(f, " [{start}..+{len}]{}", Off(dst))?;
        }
        Ok(())
    }
}

/// Dense copy of `len` elements (reshape / expand materialisation).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Copy {
    /// Source.
    pub src: usize,
    /// Destination.
    pub dst: usize,
    /// Elements.
    pub len: u32,
    /// Element type.
    pub dt: HalfFlag,
}

impl ThunkOp for Copy {
    const NAME: &'static str = "copy";
    fn io(&self) -> ThunkIo {
        let n = bytes(&[self.len], self.dt.size());
        ThunkIo::new().read(self.src, n).write(self.dst, n)
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "len={} {} src={} dst={}",
            self.len,
            self.dt,
            Off(self.src),
            Off(self.dst)
        )
    }
}

/// Concatenation along an axis: `dst [outer, dst_axis, inner]`; input
/// `(src, axis_len)` is a dense `[outer, axis_len, inner]`. The inputs
/// tile the axis, so the whole destination is written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Concat {
    /// Destination.
    pub dst: usize,
    /// Product of the dims before the axis.
    pub outer: u32,
    /// Destination axis length (sum of the inputs').
    pub dst_axis: u32,
    /// Product of the dims after the axis (1 for the last axis).
    pub inner: u32,
    /// Element type.
    pub dt: HalfFlag,
    /// `(src offset, axis length)` per input, in order.
    pub inputs: Vec<(usize, u32)>,
}

impl ThunkOp for Concat {
    const NAME: &'static str = "concat";
    fn io(&self) -> ThunkIo {
        let es = self.dt.size();
        let mut io = ThunkIo::new();
        for &(src, axis) in &self.inputs {
            io = io.read(src, bytes(&[self.outer, axis, self.inner], es));
        }
        io.write(
            self.dst,
            bytes(&[self.outer, self.dst_axis, self.inner], es),
        )
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "outer={} axis={} inner={} {} in=[",
            self.outer, self.dst_axis, self.inner, self.dt
        )?;
        for (i, &(src, axis)) in self.inputs.iter().enumerate() {
            let sep = if i > 0 { "," } else { "" };
            write!(f, "{sep}{}x{axis}", Off(src))?;
        }
        write!(f, "] dst={}", Off(self.dst))
    }
}

/// N-D transpose / broadcast, f32: output element at multi-index `i`
/// (dense over `out_dims`, `total` elements) reads input element
/// `Σ i[d] · in_strides[d]` (stride 0 = broadcast). Strides come from a
/// dense input, so the input span is exactly its size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Transpose {
    /// Source.
    pub src: usize,
    /// Destination (dense over `out_dims`).
    pub dst: usize,
    /// Output elements.
    pub total: u32,
    /// Output dims.
    pub out_dims: Vec<u32>,
    /// Input element stride per output axis.
    pub in_strides: Vec<u32>,
}

impl Transpose {
    /// The seed's active-extent rule: safe iff the leading output axis is
    /// the leading input axis, i.e. `in_strides[0] == Π out_dims[1..]`
    /// (computed in u64 so a large product cannot wrap).
    pub fn leading_axis_kept(&self) -> bool {
        let (Some(&s0), false) = (self.in_strides.first(), self.out_dims.is_empty()) else {
            return false;
        };
        let inner = self.out_dims[1..]
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
        inner == Some(s0 as u64)
    }
}

impl ThunkOp for Transpose {
    const NAME: &'static str = "transpose";
    fn io(&self) -> ThunkIo {
        let span = strided_extent(&self.out_dims, &self.in_strides);
        ThunkIo::new()
            .read(self.src, nbytes(span, F32))
            .write(self.dst, bytes(&[self.total], F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        self.leading_axis_kept()
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "total={} out={:?} strides={:?} src={} dst={}",
            self.total,
            self.out_dims,
            self.in_strides,
            Off(self.src),
            Off(self.dst)
        )
    }
}

/// Flip the axes where `rev_mask` is set; `dims` describe both buffers,
/// elements are `elem_bytes` wide.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reverse {
    /// Source.
    pub src: usize,
    /// Destination.
    pub dst: usize,
    /// Dims.
    pub dims: Vec<u32>,
    /// Per axis: flip it.
    pub rev_mask: Vec<bool>,
    /// Bytes per element.
    pub elem_bytes: u8,
}

impl ThunkOp for Reverse {
    const NAME: &'static str = "reverse";
    fn io(&self) -> ThunkIo {
        let n = nbytes(numel(&self.dims), self.elem_bytes as usize);
        ThunkIo::new().read(self.src, n).write(self.dst, n)
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let axes: Vec<usize> = self
            .rev_mask
            .iter()
            .enumerate()
            .filter(|m| *m.1)
            .map(|m| m.0)
            .collect();
        write!(
            f,
            "dims={:?} axes={axes:?} elem={}B src={} dst={}",
            self.dims,
            self.elem_bytes,
            Off(self.src),
            Off(self.dst)
        )
    }
}
