//! What a thunk touches: [`ByteRange`]s read and written.
//!
//! Ranges carry tagged offsets (see [`super::offsets`]); ranges in different
//! buffers (arena, state, weights segments) never overlap, whatever their
//! raw numbers. Size arithmetic
//! here saturates, so a malformed thunk yields a (huge) range rather than a
//! panic; the schedule verifier rejects it as out of bounds.

use super::offsets::{buffer_of, is_weight, offset_add, raw_offset, Buf};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A contiguous span of one buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ByteRange {
    /// Tagged start offset (see [`super::offsets`]).
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
}

impl ByteRange {
    /// A range of `len` bytes at (tagged) `offset`.
    pub fn new(offset: usize, len: usize) -> Self {
        ByteRange { offset, len }
    }

    /// True when the range lies in a weights segment.
    pub fn is_weight(&self) -> bool {
        is_weight(self.offset)
    }

    /// The buffer the range lies in.
    pub fn buffer(&self) -> Buf {
        buffer_of(self.offset)
    }

    /// Raw start within its buffer.
    pub fn start(&self) -> usize {
        raw_offset(self.offset)
    }

    /// Raw one-past-the-end within its buffer (saturating).
    pub fn end(&self) -> usize {
        self.start().saturating_add(self.len)
    }

    /// True when both ranges are in the same buffer and share at least one
    /// byte. Empty ranges overlap nothing.
    pub fn overlaps(&self, other: &ByteRange) -> bool {
        self.buffer() == other.buffer()
            && self.len > 0
            && other.len > 0
            && self.start() < other.end()
            && other.start() < self.end()
    }
}

impl fmt::Display for ByteRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.buffer() {
            Buf::Arena => write!(f, "[{}..{})", self.start(), self.end()),
            Buf::State => write!(f, "S[{}..{})", self.start(), self.end()),
            Buf::Weights(s) => write!(f, "W{s}[{}..{})", self.start(), self.end()),
        }
    }
}

/// The byte ranges one thunk reads and writes.
///
/// Ranges appear in operand order (the order of the thunk's fields); empty
/// ranges are left out. A range updated in place is listed in both lists.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThunkIo {
    /// Ranges read.
    pub reads: Vec<ByteRange>,
    /// Ranges written.
    pub writes: Vec<ByteRange>,
}

impl ThunkIo {
    /// Nothing read, nothing written.
    pub fn new() -> Self {
        ThunkIo::default()
    }

    /// Add a read of `len` bytes at `offset` (skipped when empty).
    pub fn read(mut self, offset: usize, len: usize) -> Self {
        if len > 0 {
            self.reads.push(ByteRange::new(offset, len));
        }
        self
    }

    /// Add a write of `len` bytes at `offset` (skipped when empty).
    pub fn write(mut self, offset: usize, len: usize) -> Self {
        if len > 0 {
            self.writes.push(ByteRange::new(offset, len));
        }
        self
    }

    /// Add an in-place update: the range is both read and written.
    pub fn update(self, offset: usize, len: usize) -> Self {
        self.read(offset, len).write(offset, len)
    }

    /// An elementwise op's io: each of `srcs` read and `dst` written, all
    /// `len` bytes.
    pub fn elementwise(srcs: &[usize], dst: usize, len: usize) -> Self {
        srcs.iter()
            .fold(ThunkIo::new(), |io, &s| io.read(s, len))
            .write(dst, len)
    }

    /// Add a read when `cond` holds (an optional operand).
    pub fn read_if(self, cond: bool, offset: usize, len: usize) -> Self {
        if cond {
            self.read(offset, len)
        } else {
            self
        }
    }

    /// Add the reads of a strided access: `rows` rows `row_stride` bytes
    /// apart starting at `base`, reading the byte intervals `cols`
    /// (`(start, len)` within a row) of each. Touching ranges are merged, so
    /// whole rows read back to back become one range.
    ///
    /// Past [`MAX_ROW_RANGES`] rows the read is reported as one covering
    /// range (first byte read to last byte read): a superset, which is
    /// safe for hazards and keeps `io()` bounded in time and memory.
    pub fn read_rows(
        mut self,
        base: usize,
        rows: usize,
        row_stride: usize,
        cols: &[(usize, usize)],
    ) -> Self {
        let cols = merge_intervals(cols);
        let (Some(&(start, _)), Some(&(last_start, last_len))) = (cols.first(), cols.last()) else {
            return self;
        };
        if rows > MAX_ROW_RANGES {
            let end = (rows - 1)
                .saturating_mul(row_stride)
                .saturating_add(last_start.saturating_add(last_len));
            return self.read(offset_add(base, start), end - start);
        }
        let mut pending: Option<ByteRange> = None;
        for r in 0..rows {
            let row = offset_add(base, r.saturating_mul(row_stride));
            for &(start, len) in &cols {
                let next = ByteRange::new(offset_add(row, start), len);
                pending = match pending {
                    Some(p) if p.offset.saturating_add(p.len) == next.offset => {
                        Some(ByteRange::new(p.offset, p.len.saturating_add(len)))
                    }
                    Some(p) => {
                        self.reads.push(p);
                        Some(next)
                    }
                    None => Some(next),
                };
            }
        }
        if let Some(p) = pending {
            self.reads.push(p);
        }
        self
    }

    /// All ranges, reads first.
    pub fn all(&self) -> impl Iterator<Item = &ByteRange> {
        self.reads.iter().chain(self.writes.iter())
    }
}

/// Sort `(start, len)` intervals and merge the overlapping or touching
/// ones; empty intervals are dropped.
fn merge_intervals(cols: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let mut v: Vec<(usize, usize)> = cols.iter().copied().filter(|c| c.1 > 0).collect();
    v.sort_unstable();
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(v.len());
    for (s, l) in v {
        match out.last_mut() {
            Some((ps, pl)) if s <= ps.saturating_add(*pl) => {
                let end = s.saturating_add(l).max(ps.saturating_add(*pl));
                *pl = end - *ps;
            }
            _ => out.push((s, l)),
        }
    }
    out
}

/// Element count of a `u32` dims list (saturating product).
pub(crate) fn numel(dims: &[u32]) -> usize {
    dims.iter()
        .fold(1usize, |acc, &d| acc.saturating_mul(d as usize))
}

/// Bytes of a dense buffer with `dims` and `elem` bytes per element.
pub(crate) fn bytes(dims: &[u32], elem: usize) -> usize {
    numel(dims).saturating_mul(elem)
}

/// Bytes per element of an operand that is f16 when `f16`, else f32.
pub(crate) fn elem_bytes(f16: bool) -> usize {
    if f16 {
        2
    } else {
        F32
    }
}

/// Bytes of a dense buffer with a `usize` element count.
pub(crate) fn nbytes(n: usize, elem: usize) -> usize {
    n.saturating_mul(elem)
}

/// Elements spanned by a strided view: `1 + Σ (dim - 1) · stride`, or 0
/// when any dim is 0. For strides taken from a dense buffer (permuted or
/// with zero strides for broadcast axes) this is exactly the buffer's size.
pub(crate) fn strided_extent(dims: &[u32], strides: &[u32]) -> usize {
    if dims.contains(&0) {
        return 0;
    }
    dims.iter().zip(strides).fold(1usize, |acc, (&d, &s)| {
        acc.saturating_add((d as usize - 1).saturating_mul(s as usize))
    })
}

/// Rows beyond which [`ThunkIo::read_rows`] reports a covering range.
pub const MAX_ROW_RANGES: usize = 1 << 16;

/// Bytes of an f32 element.
pub const F32: usize = 4;
/// Bytes of an index / label / token element (i32).
pub const IDX: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thunk::offsets::{tag_segment, tag_state, tag_weight};

    #[test]
    fn overlap_rules() {
        // same raw bytes in different buffers / segments never overlap
        let s = ByteRange::new(tag_state(0), 16);
        assert!(!s.overlaps(&ByteRange::new(0, 16)));
        assert!(s.overlaps(&ByteRange::new(tag_state(8), 16)));
        let w1 = ByteRange::new(tag_segment(1, 0), 16);
        assert!(!w1.overlaps(&ByteRange::new(tag_segment(2, 0), 16)));
        assert!(!w1.overlaps(&ByteRange::new(tag_weight(0), 16)));
        assert_eq!(w1.to_string(), "W1[0..16)");
        assert_eq!(s.to_string(), "S[0..16)");
        let a = ByteRange::new(0, 16);
        assert!(a.overlaps(&ByteRange::new(15, 1)));
        assert!(!a.overlaps(&ByteRange::new(16, 4)));
        assert!(!a.overlaps(&ByteRange::new(tag_weight(0), 16)));
        assert!(ByteRange::new(tag_weight(8), 8).overlaps(&ByteRange::new(tag_weight(0), 9)));
        assert!(!a.overlaps(&ByteRange::new(4, 0)));
        let big = ByteRange::new(5 << 32, 8);
        assert!(big.overlaps(&ByteRange::new((5 << 32) + 7, 100)));
        assert!(!big.overlaps(&ByteRange::new(7, 100)));
    }

    #[test]
    fn rows_merge() {
        // full rows back to back: one range
        let io = ThunkIo::new().read_rows(100, 3, 8, &[(0, 4), (4, 4)]);
        assert_eq!(io.reads, vec![ByteRange::new(100, 24)]);
        // a column window: one range per row
        let io = ThunkIo::new().read_rows(0, 2, 16, &[(4, 8)]);
        assert_eq!(io.reads, vec![ByteRange::new(4, 8), ByteRange::new(20, 8)]);
        assert_eq!(
            merge_intervals(&[(8, 4), (0, 4), (2, 3), (20, 0)]),
            vec![(0, 5), (8, 4)]
        );
        // very many strided rows: one covering range
        let rows = MAX_ROW_RANGES + 1;
        let io = ThunkIo::new().read_rows(0, rows, 16, &[(4, 8)]);
        assert_eq!(io.reads, vec![ByteRange::new(4, (rows - 1) * 16 + 8)]);
    }

    #[test]
    fn extent() {
        assert_eq!(strided_extent(&[2, 3], &[3, 1]), 6);
        assert_eq!(strided_extent(&[3, 2], &[1, 3]), 6);
        assert_eq!(strided_extent(&[4, 3], &[0, 1]), 3);
        assert_eq!(strided_extent(&[4, 0], &[1, 1]), 0);
        assert_eq!(strided_extent(&[], &[]), 1);
    }
}
