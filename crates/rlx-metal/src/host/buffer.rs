//! Byte buffers of a schedule (arena, state, weights segments) and typed
//! access to them.
//!
//! Owned buffers are 64-byte aligned so that every planned offset (a
//! multiple of 64) is aligned for any element type; external weights
//! segments are checked for alignment on access. Thunks address them with
//! offsets from `Thunk::io()`'s world (see [`crate::thunk::offsets`]): plain
//! arena offsets, state offsets tagged with bit 62, weights offsets tagged
//! with bit 63 and a segment index.

use crate::thunk::{buffer_of, is_weight, raw_offset, Buf};

/// Alignment of an [`AlignedBuf`]: every planned offset is a multiple.
const ALIGN: usize = 64;

/// A 64-byte-aligned unit (what an empty buffer's dangling pointer points
/// to; never constructed, only its alignment is used).
#[allow(dead_code)]
#[repr(C, align(64))]
struct Line([u8; ALIGN]);

/// Alignment asked of the system allocator: at most what `calloc`
/// guarantees, so that `alloc_zeroed` is a `calloc` (fresh pages stay
/// untouched, i.e. not resident, until written). Asking for [`ALIGN`]
/// directly makes Rust's allocator `memalign` and then `memset` the whole
/// block, which faults every page in: a KV cache sized for 1024 slots was
/// fully resident before its first token.
const SYS_ALIGN: usize = 16;

/// Bytes from which a buffer gets an anonymous mapping of its own: `calloc`
/// hands out blocks below glibc's dynamic mmap threshold (up to 32 MiB) from
/// recycled heap memory, which it zero-fills, making every page resident — a
/// 23.6 MB f16 KV cache was, before a single row was written. A fresh
/// mapping's pages stay untouched until written.
#[cfg(unix)]
const MMAP_MIN: usize = 1 << 20;

/// `len` bytes of fresh zero pages (an anonymous private mapping), or
/// `None` when the system refuses.
#[cfg(unix)]
fn map_zeroed(len: usize) -> Option<std::ptr::NonNull<u8>> {
    // SAFETY: an anonymous mapping with no address hint touches no existing
    // memory; the result is checked against MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    std::ptr::NonNull::new(p.cast::<u8>())
}

/// A zero-initialised, 64-byte-aligned byte buffer. Allocated zeroed by
/// an anonymous mapping of its own from 1 MiB (`MMAP_MIN`) on Unix, else by
/// the system allocator's `calloc` path (pages untouched until written, so
/// a large state buffer costs resident memory only for the rows written),
/// and fallibly: [`AlignedBuf::try_zeroed`] reports a size the machine
/// cannot provide instead of aborting the process.
pub struct AlignedBuf {
    /// First byte, [`ALIGN`]-aligned (inside the allocation at `raw`).
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    /// The allocation's first byte (what is freed).
    raw: std::ptr::NonNull<u8>,
    /// Bytes allocated (`len` rounded up to [`ALIGN`], plus [`ALIGN`] of
    /// slack for aligning `ptr`); 0 = nothing allocated.
    cap: usize,
    /// The allocation is an anonymous mapping of its own (freed with
    /// `munmap`), not a `calloc` block.
    mapped: bool,
}

// SAFETY: the buffer owns plain bytes; shared access only reads them and
// mutation needs `&mut self`.
unsafe impl Send for AlignedBuf {}
unsafe impl Sync for AlignedBuf {}

/// An allocation the machine cannot provide.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[alloc] cannot allocate {bytes} bytes (out of memory or past the address space)")]
pub struct AllocError {
    /// The bytes asked for.
    pub bytes: usize,
}

impl AlignedBuf {
    /// `len` zero bytes, or an error when they cannot be allocated.
    pub fn try_zeroed(len: usize) -> Result<Self, AllocError> {
        let err = AllocError { bytes: len };
        let rounded = len.checked_next_multiple_of(ALIGN).ok_or(err.clone())?;
        if rounded == 0 {
            let dangling = std::ptr::NonNull::<Line>::dangling().cast();
            return Ok(AlignedBuf {
                ptr: dangling,
                len,
                raw: dangling,
                cap: 0,
                mapped: false,
            });
        }
        let cap = rounded
            .checked_add(ALIGN)
            .filter(|&c| c <= isize::MAX as usize)
            .ok_or(err.clone())?;
        #[cfg(unix)]
        if cap >= MMAP_MIN {
            if let Some(raw) = map_zeroed(cap) {
                // page-aligned, so already ALIGN-aligned
                return Ok(AlignedBuf {
                    ptr: raw,
                    len,
                    raw,
                    cap,
                    mapped: true,
                });
            }
        }
        let layout =
            std::alloc::Layout::from_size_align(cap, SYS_ALIGN).map_err(|_| err.clone())?;
        // SAFETY: `layout` has a non-zero size.
        let raw = std::ptr::NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) }).ok_or(err)?;
        let skip = raw.as_ptr().align_offset(ALIGN);
        // `skip < ALIGN` and `cap >= rounded + ALIGN`, so `ptr .. ptr + len`
        // stays inside the allocation.
        debug_assert!(skip < ALIGN);
        // SAFETY: `raw + skip` is inside the allocation (see above).
        let ptr = unsafe { raw.add(skip) };
        Ok(AlignedBuf {
            ptr,
            len,
            raw,
            cap,
            mapped: false,
        })
    }

    /// `len` zero bytes. Panics when they cannot be allocated (tests and
    /// small internal buffers; user-sized buffers go through
    /// [`AlignedBuf::try_zeroed`]).
    pub fn zeroed(len: usize) -> Self {
        match Self::try_zeroed(len) {
            Ok(b) => b,
            Err(e) => panic!("{e}"),
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
        // SAFETY: `ptr` holds `len` initialised (zeroed or written) bytes,
        // or is a dangling aligned pointer when `len` is 0.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and we hold `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Raw pointer to the first byte.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        #[cfg(unix)]
        if self.mapped {
            // SAFETY: `raw .. raw + cap` is the mapping `map_zeroed` made.
            unsafe { libc::munmap(self.raw.as_ptr().cast(), self.cap) };
            return;
        }
        if self.cap > 0 {
            // SAFETY: allocated in `try_zeroed` with exactly this layout.
            unsafe {
                std::alloc::dealloc(
                    self.raw.as_ptr(),
                    std::alloc::Layout::from_size_align_unchecked(self.cap, SYS_ALIGN),
                )
            }
        }
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

/// One read-only weights segment: a pointer and a length in bytes. The
/// memory belongs to someone else (an [`AlignedBuf`] of the executable, or
/// an external buffer such as a memory-mapped file kept alive by its owner).
#[derive(Clone, Copy, Debug)]
pub struct Segment {
    /// First byte (may be dangling when `len` is 0).
    pub ptr: *const u8,
    /// Length in bytes.
    pub len: usize,
}

// SAFETY: a `Segment` is an address and a length; only `Mem` dereferences
// it, under `Mem::new`'s contract (read-only, owner alive).
unsafe impl Send for Segment {}
unsafe impl Sync for Segment {}

impl Segment {
    /// An empty segment.
    pub const EMPTY: Segment = Segment {
        ptr: std::ptr::null(),
        len: 0,
    };
}

/// Raw view of the buffers of one run: the activation arena, the state
/// buffer and the weights segments. The executor hands out slices for the
/// exact ranges a thunk declares in `io()`; reads that overlap a write of
/// the same thunk are staged into a copy first, so a shared and an
/// exclusive slice never alias. Weights are never written.
pub struct Mem<'s> {
    arena: *mut u8,
    arena_len: usize,
    state: *mut u8,
    state_len: usize,
    segments: &'s [Segment],
}

// SAFETY: `Mem` is a set of raw buffer pointers; the executor uses it from
// one thread at a time and kernels only receive disjoint slices.
unsafe impl Send for Mem<'_> {}
unsafe impl Sync for Mem<'_> {}

/// Errors from carving a slice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemError {
    /// The range leaves its buffer.
    #[error("[mem] {what} bytes {start}..{end} out of the {buf} buffer of {len}")]
    OutOfBounds {
        /// Which operand.
        what: &'static str,
        /// The buffer.
        buf: Buf,
        /// First byte.
        start: usize,
        /// One past the last byte.
        end: usize,
        /// Buffer length.
        len: usize,
    },
    /// A weights offset names a segment the run does not have.
    #[error("[mem] {what} names weights segment {segment}, but there are {count}")]
    UnknownSegment {
        /// Which operand.
        what: &'static str,
        /// The segment named.
        segment: usize,
        /// Segments present.
        count: usize,
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

impl<'s> Mem<'s> {
    /// A view of `arena`, the `state` buffer and the weights `segments`.
    ///
    /// # Safety
    /// Every buffer must stay alive and unmoved while the `Mem` is used, and
    /// nothing else may access the arena and state buffer meanwhile except
    /// through this `Mem` (or callbacks the executor runs between kernels).
    /// Nothing may write the weights segments while the `Mem` is used.
    pub unsafe fn new(
        arena: *mut u8,
        arena_len: usize,
        state: *mut u8,
        state_len: usize,
        segments: &'s [Segment],
    ) -> Self {
        Mem {
            arena,
            arena_len,
            state,
            state_len,
            segments,
        }
    }

    fn locate<T>(&self, what: &'static str, off: usize, n: usize) -> Result<*mut T, MemError> {
        let bytes = n.saturating_mul(std::mem::size_of::<T>());
        let buf = buffer_of(off);
        let (base, len) = match buf {
            Buf::Arena => (self.arena, self.arena_len),
            Buf::State => (self.state, self.state_len),
            Buf::Weights(s) => {
                let seg = self.segments.get(s).ok_or(MemError::UnknownSegment {
                    what,
                    segment: s,
                    count: self.segments.len(),
                })?;
                (seg.ptr as *mut u8, seg.len)
            }
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
        if bytes == 0 {
            // An empty slice needs only a well-aligned non-null pointer.
            return Ok(std::ptr::NonNull::<T>::dangling().as_ptr());
        }
        // SAFETY: raw + bytes <= len, within the buffer.
        let p = unsafe { base.add(raw) };
        if !(p as usize).is_multiple_of(std::mem::align_of::<T>()) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thunk::{tag_segment, tag_state, tag_weight};

    /// From `MMAP_MIN` bytes a buffer is a mapping of its own: zero even
    /// where a freed buffer of the same size was written (a recycled heap
    /// block would have had to be zero-filled, making it resident).
    #[cfg(unix)]
    #[test]
    fn large_buffers_are_fresh_mappings() {
        let mut a = AlignedBuf::try_zeroed(24 << 20).unwrap();
        assert!(a.mapped);
        a.as_mut_slice().fill(0xab);
        drop(a);
        let b = AlignedBuf::try_zeroed(24 << 20).unwrap();
        assert!(b.mapped && b.as_slice().iter().all(|&x| x == 0));
        assert!(!AlignedBuf::try_zeroed(4096).unwrap().mapped);
    }

    #[test]
    fn allocation_is_fallible_and_aligned() {
        let e = AlignedBuf::try_zeroed(usize::MAX - 3).err().unwrap();
        assert_eq!(e.bytes, usize::MAX - 3);
        assert!(AlignedBuf::try_zeroed(1 << 62).is_err());
        let mut b = AlignedBuf::try_zeroed(100).unwrap();
        assert_eq!(b.len(), 100);
        assert!((b.as_mut_ptr() as usize).is_multiple_of(64));
        assert!(b.as_slice().iter().all(|&x| x == 0));
        let mut z = AlignedBuf::try_zeroed(0).unwrap();
        assert!(z.is_empty() && (z.as_mut_ptr() as usize).is_multiple_of(64));
        // every size, including ones the allocator may place off a 64-byte
        // line, comes back aligned, zeroed and writable to its last byte
        for n in [1, 63, 64, 65, 4095, 4096, 1 << 20, (1 << 20) + 17] {
            let mut b = AlignedBuf::try_zeroed(n).unwrap();
            assert!((b.as_mut_ptr() as usize).is_multiple_of(64), "{n}");
            assert!(b.as_slice().iter().all(|&x| x == 0), "{n}");
            b.as_mut_slice()[n - 1] = 7;
            assert_eq!(b.as_slice()[n - 1], 7);
        }
    }

    #[test]
    fn per_buffer_bounds_and_writes() {
        let mut arena = AlignedBuf::zeroed(64);
        let mut state = AlignedBuf::zeroed(32);
        let mut w0 = AlignedBuf::zeroed(16);
        w0.as_mut_slice()[..4].copy_from_slice(&1.5f32.to_le_bytes());
        let w1: Vec<f32> = vec![1.0, 2.0, 3.0];
        let segs = [
            Segment {
                ptr: w0.as_mut_ptr(),
                len: w0.len(),
            },
            Segment {
                ptr: w1.as_ptr().cast(),
                len: 12,
            },
        ];
        // SAFETY: all buffers outlive `mem` and are only touched through it.
        let mem = unsafe {
            Mem::new(
                arena.as_mut_ptr(),
                arena.len(),
                state.as_mut_ptr(),
                state.len(),
                &segs,
            )
        };
        assert_eq!(mem.get::<f32>("x", tag_weight(0), 1).unwrap(), &[1.5]);
        assert_eq!(
            mem.get::<f32>("x", tag_segment(1, 4), 2).unwrap(),
            &[2.0, 3.0]
        );
        // segment 1 has 12 bytes: a fourth element is out of bounds there
        let e = mem.get::<f32>("x", tag_segment(1, 4), 3).unwrap_err();
        assert_eq!(
            e.to_string(),
            "[mem] x bytes 4..16 out of the weights segment 1 buffer of 12"
        );
        assert!(matches!(
            mem.get::<u8>("w", tag_segment(2, 0), 1),
            Err(MemError::UnknownSegment {
                segment: 2,
                count: 2,
                ..
            })
        ));
        assert!(matches!(
            mem.get_mut::<f32>("y", tag_segment(1, 0), 1),
            Err(MemError::WeightsWrite { .. })
        ));
        // the state buffer is writable and separate from the arena
        mem.get_mut::<f32>("s", tag_state(28), 1).unwrap()[0] = 7.0;
        assert_eq!(mem.get::<f32>("a", 28, 1).unwrap(), &[0.0]);
        assert!(mem.get::<f32>("s", tag_state(32), 1).is_err());
        assert!(mem.get::<f32>("a", 60, 1).is_ok());
        assert!(matches!(
            mem.get::<f32>("s", tag_state(2), 1),
            Err(MemError::Misaligned { .. })
        ));
        // empty slices never dereference (even of an empty segment)
        let empty = [Segment::EMPTY];
        // SAFETY: as above; the empty segment is never dereferenced.
        let mem2 = unsafe { Mem::new(arena.as_mut_ptr(), 64, state.as_mut_ptr(), 32, &empty) };
        assert!(mem2.get::<f32>("z", tag_weight(0), 0).unwrap().is_empty());
        assert_eq!(
            f32::from_le_bytes(state.as_slice()[28..32].try_into().unwrap()),
            7.0
        );
    }
}
