//! Byte offsets as thunks carry them.
//!
//! A thunk addresses three kinds of buffer with one `usize`:
//!
//! * **weights** (bit 63 set): bits 40..=62 name a weights *segment* and
//!   bits 0..=39 are the byte offset within it. Segment 0 holds the
//!   compiler's own constants; segment `1 + i` is param `i`, so each weight
//!   can be a separate (possibly memory-mapped, never copied) buffer.
//! * **state** (bit 62 set, bit 63 clear): an offset into the persistent
//!   state buffer (KV caches, recurrent state), which executables may share.
//! * **arena** (both clear): an offset into the liveness-planned activation
//!   arena.
//!
//! Plain `+` on a tagged offset stays in its buffer as long as the result
//! stays below the buffer's raw limit (1 TiB within a segment, 4 EiB in the
//! arena and state buffer); [`offset_add`] saturates instead of spilling into
//! the tag bits. Offsets may exceed 4 GiB; nothing here narrows them to 32
//! bits. The one exception lives in the elementwise-region thunks (see
//! [`super::region`]), whose input operands are `u32` arena *element*
//! indices as in the seed.

use std::fmt;

/// The bit that marks an offset into a weights segment.
pub const WEIGHT_TAG: usize = 1usize << 63;

/// The bit that marks an offset into the state buffer (when bit 63 is clear).
pub const STATE_TAG: usize = 1usize << 62;

/// First bit of a weights offset's segment index.
pub const SEGMENT_SHIFT: u32 = 40;

/// Largest byte offset within a weights segment.
pub const SEGMENT_OFFSET_MAX: usize = (1usize << SEGMENT_SHIFT) - 1;

/// Largest weights segment index (23 bits: 40..=62).
pub const SEGMENT_MAX: usize = (1usize << (63 - SEGMENT_SHIFT)) - 1;

/// Largest raw offset into the arena or the state buffer (below bit 62).
pub const RAW_MAX: usize = STATE_TAG - 1;

/// The buffer an offset points into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Buf {
    /// The activation arena.
    Arena,
    /// The persistent state buffer.
    State,
    /// Weights segment `n`.
    Weights(usize),
}

impl fmt::Display for Buf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Buf::Arena => f.write_str("arena"),
            Buf::State => f.write_str("state"),
            Buf::Weights(s) => write!(f, "weights segment {s}"),
        }
    }
}

/// Tag `raw` as an offset into weights segment `segment`. Both parts are
/// masked to their fields (a segment beyond [`SEGMENT_MAX`] or an offset
/// beyond [`SEGMENT_OFFSET_MAX`] wraps rather than panics; compiled graphs
/// never get near either).
#[inline]
pub fn tag_segment(segment: usize, raw: usize) -> usize {
    WEIGHT_TAG | ((segment & SEGMENT_MAX) << SEGMENT_SHIFT) | (raw & SEGMENT_OFFSET_MAX)
}

/// Tag a raw offset into weights segment 0 (the compiler's constants). An
/// offset that already carries a weights tag stays as it is.
#[inline]
pub fn tag_weight(raw: usize) -> usize {
    if is_weight(raw) {
        raw
    } else {
        tag_segment(0, raw)
    }
}

/// Tag a raw state-buffer offset (idempotent).
#[inline]
pub fn tag_state(raw: usize) -> usize {
    (raw & RAW_MAX) | STATE_TAG
}

/// True when `off` points into a weights segment.
#[inline]
pub fn is_weight(off: usize) -> bool {
    off & WEIGHT_TAG != 0
}

/// True when `off` points into the state buffer.
#[inline]
pub fn is_state(off: usize) -> bool {
    off & (WEIGHT_TAG | STATE_TAG) == STATE_TAG
}

/// True when `off` points into the arena.
#[inline]
pub fn is_arena(off: usize) -> bool {
    off & (WEIGHT_TAG | STATE_TAG) == 0
}

/// The buffer `off` points into.
#[inline]
pub fn buffer_of(off: usize) -> Buf {
    if is_weight(off) {
        Buf::Weights(segment(off))
    } else if is_state(off) {
        Buf::State
    } else {
        Buf::Arena
    }
}

/// The weights segment of `off` (0 for arena and state offsets).
#[inline]
pub fn segment(off: usize) -> usize {
    if is_weight(off) {
        (off >> SEGMENT_SHIFT) & SEGMENT_MAX
    } else {
        0
    }
}

/// Largest raw offset in `off`'s buffer.
#[inline]
fn raw_max(off: usize) -> usize {
    if is_weight(off) {
        SEGMENT_OFFSET_MAX
    } else {
        RAW_MAX
    }
}

/// The offset within its buffer (tags and segment removed).
#[inline]
pub fn raw_offset(off: usize) -> usize {
    off & raw_max(off)
}

/// `off + delta` in the same buffer: the tag (and segment) is kept and the
/// raw part saturates at its buffer's limit instead of spilling into them.
#[inline]
pub fn offset_add(off: usize, delta: usize) -> usize {
    let max = raw_max(off);
    let raw = (off & max).saturating_add(delta).min(max);
    raw | (off & !max)
}

/// Display adapter for an offset: `@4096` in the arena, `S@64` in the
/// state buffer, `W3@128` in weights segment 3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Off(pub usize);

impl fmt::Display for Off {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let raw = raw_offset(self.0);
        match buffer_of(self.0) {
            Buf::Weights(s) => write!(f, "W{s}@{raw}"),
            Buf::State => write!(f, "S@{raw}"),
            Buf::Arena => write!(f, "@{raw}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_round_trip() {
        for raw in [0usize, 1, 4096, (1 << 32) + 12, SEGMENT_OFFSET_MAX] {
            for seg in [0usize, 1, 7, 1 << 20, SEGMENT_MAX] {
                let t = tag_segment(seg, raw);
                assert!(is_weight(t) && !is_state(t) && !is_arena(t));
                assert_eq!(segment(t), seg);
                assert_eq!(raw_offset(t), raw);
                assert_eq!(buffer_of(t), Buf::Weights(seg));
                assert_eq!(tag_weight(t), t);
            }
            assert_eq!(tag_weight(raw), tag_segment(0, raw));
            assert!(is_arena(raw) && !is_weight(raw) && !is_state(raw));
            assert_eq!(raw_offset(raw), raw);
            let s = tag_state(raw);
            assert!(is_state(s) && !is_weight(s) && !is_arena(s));
            assert_eq!(raw_offset(s), raw);
            assert_eq!(buffer_of(s), Buf::State);
            assert_eq!(tag_state(s), s);
        }
        // arena and state keep 62 bits of offset
        assert_eq!(raw_offset(RAW_MAX), RAW_MAX);
        assert_eq!(raw_offset(tag_state(RAW_MAX)), RAW_MAX);
    }

    #[test]
    fn distinct_buffers_never_collide() {
        let offs = [
            100usize,
            tag_state(100),
            tag_weight(100),
            tag_segment(1, 100),
            tag_segment(2, 100),
        ];
        for (i, a) in offs.iter().enumerate() {
            for b in &offs[i + 1..] {
                assert_ne!(buffer_of(*a), buffer_of(*b));
                assert_eq!(raw_offset(*a), raw_offset(*b));
            }
        }
    }

    #[test]
    fn add_keeps_buffer() {
        let w = tag_segment(3, 100);
        assert_eq!(offset_add(w, 28), tag_segment(3, 128));
        // plain + agrees with offset_add well inside a segment
        assert_eq!(w + 28, offset_add(w, 28));
        assert_eq!(
            offset_add(tag_segment(3, SEGMENT_OFFSET_MAX - 1), 10),
            tag_segment(3, SEGMENT_OFFSET_MAX)
        );
        assert_eq!(offset_add(tag_state(64), 64), tag_state(128));
        assert_eq!(offset_add(tag_state(RAW_MAX), 5), tag_state(RAW_MAX));
        assert_eq!(offset_add(RAW_MAX - 1, 10), RAW_MAX);
        assert!(is_arena(offset_add(RAW_MAX, usize::MAX)));
        assert_eq!(
            offset_add(tag_weight(RAW_MAX), 5),
            tag_weight(SEGMENT_OFFSET_MAX)
        );
    }

    #[test]
    fn display() {
        assert_eq!(Off(4096).to_string(), "@4096");
        assert_eq!(Off(tag_weight(1024)).to_string(), "W0@1024");
        assert_eq!(Off(tag_segment(3, 128)).to_string(), "W3@128");
        assert_eq!(Off(tag_state(64)).to_string(), "S@64");
        assert_eq!(Off(5 << 32).to_string(), "@21474836480");
        assert_eq!(Buf::Weights(2).to_string(), "weights segment 2");
    }
}
