//! Byte buffers of a schedule (arena, weights) and typed access to them.
//!
//! Buffers are 64-byte aligned so that every planned offset (a multiple of
//! 64) is aligned for any element type. Thunks address them with offsets
//! from `Thunk::io()`'s world: plain arena offsets, or weights offsets
//! tagged with bit 63.

use crate::thunk::{is_weight, raw_offset};

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A zero-initialised, 64-byte-aligned byte buffer.
pub struct AlignedBuf {
    lines: Vec<Line>,
    len: usize,
}

impl AlignedBuf {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Self {
        AlignedBuf {
            lines: vec![Line([0; 64]); len.div_ceil(64)],
            len,
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `lines` holds at least `len` initialised bytes.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<u8>(), self.len) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and we hold `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<u8>(), self.len) }
    }

    /// Raw pointer to the first byte.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.lines.as_mut_ptr().cast::<u8>()
    }
}

/// Element types kernels read and write through [`Mem`].
pub trait Plain: Copy + 'static {}
impl Plain for f32 {}
impl Plain for f64 {}
impl Plain for half::f16 {}
impl Plain for half::bf16 {}
impl Plain for i32 {}
impl Plain for i64 {}
impl Plain for u8 {}
impl Plain for u16 {}
impl Plain for u32 {}
impl Plain for i8 {}
impl Plain for i16 {}

/// Raw view of the arena and weights buffer during one run. The executor
/// hands out slices for the exact ranges a thunk declares in `io()`; reads
/// that overlap a write of the same thunk are staged into a copy first, so
/// a shared and an exclusive slice never alias.
pub struct Mem {
    arena: *mut u8,
    arena_len: usize,
    weights: *const u8,
    weights_len: usize,
}

// SAFETY: `Mem` is a pair of raw buffer pointers; the executor uses it from
// one thread at a time and kernels only receive disjoint slices.
unsafe impl Send for Mem {}
unsafe impl Sync for Mem {}

/// Errors from carving a slice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemError {
    /// The range leaves its buffer.
    #[error("[mem] {what} bytes {start}..{end} out of the {buf} buffer of {len}")]
    OutOfBounds {
        /// Which operand.
        what: &'static str,
        /// Buffer name.
        buf: &'static str,
        /// First byte.
        start: usize,
        /// One past the last byte.
        end: usize,
        /// Buffer length.
        len: usize,
    },
    /// The offset is not aligned for the element type.
    #[error("[mem] {what} at offset {off} is not aligned to {align} bytes")]
    Misaligned {
        /// Which operand.
        what: &'static str,
        /// The offset.
        off: usize,
        /// Required alignment.
        align: usize,
    },
    /// A write into the weights buffer.
    #[error("[mem] {what} writes the read-only weights buffer")]
    WeightsWrite {
        /// Which operand.
        what: &'static str,
    },
}

impl Mem {
    /// A view of `arena` and `weights`.
    ///
    /// # Safety
    /// Both buffers must stay alive and unmoved while the `Mem` is used,
    /// and nothing else may access them meanwhile except through this `Mem`
    /// (or callbacks the executor runs between kernels).
    pub unsafe fn new(
        arena: *mut u8,
        arena_len: usize,
        weights: *const u8,
        weights_len: usize,
    ) -> Self {
        Mem {
            arena,
            arena_len,
            weights,
            weights_len,
        }
    }

    fn locate<T>(&self, what: &'static str, off: usize, n: usize) -> Result<*mut T, MemError> {
        let bytes = n.saturating_mul(std::mem::size_of::<T>());
        let (base, len, buf) = if is_weight(off) {
            (self.weights as *mut u8, self.weights_len, "weights")
        } else {
            (self.arena, self.arena_len, "arena")
        };
        let raw = raw_offset(off);
        let end = raw.saturating_add(bytes);
        if end > len {
            return Err(MemError::OutOfBounds {
                what,
                buf,
                start: raw,
                end,
                len,
            });
        }
        // SAFETY: raw + bytes <= len, within the buffer.
        let p = unsafe { base.add(raw) };
        if (p as usize) % std::mem::align_of::<T>() != 0 {
            return Err(MemError::Misaligned {
                what,
                off: raw,
                align: std::mem::align_of::<T>(),
            });
        }
        Ok(p.cast::<T>())
    }

    /// `n` elements of `T` at `off`, shared.
    pub fn get<T: Plain>(
        &self,
        what: &'static str,
        off: usize,
        n: usize,
    ) -> Result<&[T], MemError> {
        let p = self.locate::<T>(what, off, n)?;
        // SAFETY: in bounds and aligned (checked); the executor guarantees no
        // exclusive slice of this thunk overlaps it.
        Ok(unsafe { std::slice::from_raw_parts(p, n) })
    }

    /// `n` elements of `T` at `off`, exclusive.
    #[allow(clippy::mut_from_ref)]
    pub fn get_mut<T: Plain>(
        &self,
        what: &'static str,
        off: usize,
        n: usize,
    ) -> Result<&mut [T], MemError> {
        if is_weight(off) {
            return Err(MemError::WeightsWrite { what });
        }
        let p = self.locate::<T>(what, off, n)?;
        // SAFETY: in bounds and aligned; the executor stages any read of the
        // same thunk that overlaps this range, so the slice is unaliased.
        Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
    }
}
impl Plain for crate::host::kernels::elementwise::Bool {}
impl Plain for u64 {}
