//! Byte offsets as thunks carry them.
//!
//! A thunk addresses two buffers with one `usize`: the activation arena and
//! the weights buffer. Bit 63 says which: clear means an arena offset, set
//! means "weights buffer, offset = the remaining 63 bits". Keeping weights
//! out of the arena lets the arena be liveness-planned and reused while the
//! weights stay an mmap of the model file.
//!
//! Offsets are `usize` everywhere and may exceed 4 GiB; nothing here narrows
//! them to 32 bits. The one exception lives in the elementwise-region thunks
//! (see [`super::region`]), whose input operands are `u32` *element* indices
//! as in the seed.

use std::fmt;

/// The bit that marks an offset into the weights buffer.
pub const WEIGHT_TAG: usize = 1usize << 63;

/// Largest raw (untagged) offset: everything below the tag bit.
pub const RAW_MAX: usize = WEIGHT_TAG - 1;

/// Tag a raw weights-buffer offset. An offset that already carries the tag
/// stays as it is (tagging is idempotent rather than a panic).
#[inline]
pub fn tag_weight(raw: usize) -> usize {
    raw | WEIGHT_TAG
}

/// True when `off` points into the weights buffer.
#[inline]
pub fn is_weight(off: usize) -> bool {
    off & WEIGHT_TAG != 0
}

/// The offset within its buffer (tag removed).
#[inline]
pub fn raw_offset(off: usize) -> usize {
    off & RAW_MAX
}

/// `off + delta` in the same buffer: the tag is kept and the raw part
/// saturates below the tag bit instead of spilling into it.
#[inline]
pub fn offset_add(off: usize, delta: usize) -> usize {
    let raw = raw_offset(off).saturating_add(delta).min(RAW_MAX);
    raw | (off & WEIGHT_TAG)
}

/// Display adapter for an offset: `@4096` in the arena, `W@1024` in the
/// weights buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Off(pub usize);

impl fmt::Display for Off {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if is_weight(self.0) {
            write!(f, "W@{}", raw_offset(self.0))
        } else {
            write!(f, "@{}", self.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_round_trip() {
        for raw in [0usize, 1, 4096, (1 << 32) + 12, RAW_MAX] {
            let t = tag_weight(raw);
            assert!(is_weight(t));
            assert_eq!(raw_offset(t), raw);
            assert!(!is_weight(raw));
            assert_eq!(raw_offset(raw), raw);
            assert_eq!(tag_weight(t), t);
        }
    }

    #[test]
    fn add_keeps_buffer() {
        let w = tag_weight(100);
        assert_eq!(offset_add(w, 28), tag_weight(128));
        assert_eq!(offset_add(RAW_MAX - 1, 10), RAW_MAX);
        assert!(!is_weight(offset_add(RAW_MAX, usize::MAX)));
        assert_eq!(offset_add(tag_weight(RAW_MAX), 5), tag_weight(RAW_MAX));
    }

    #[test]
    fn display() {
        assert_eq!(Off(4096).to_string(), "@4096");
        assert_eq!(Off(tag_weight(1024)).to_string(), "W@1024");
        assert_eq!(Off(5 << 32).to_string(), "@21474836480");
    }
}
