//! Where a segment's bytes live: the seam between the log and its memory.
//!
//! The log only needs a fixed, aligned byte region per segment. Today that is
//! heap memory; a file-backed segment (an `mmap` of a segment file) implements
//! the same trait and nothing above it changes.

use std::alloc::{Layout, alloc_zeroed, dealloc, handle_alloc_error};
use std::fmt;
use std::ptr::NonNull;

/// Alignment of a segment's byte region: a cache line, so record headers are
/// aligned and the first record does not share a line with anything else.
pub(crate) const STORAGE_ALIGN: usize = 64;

/// A segment's byte region.
///
/// # Safety
///
/// An implementation promises that [`SegmentStorage::as_ptr`] returns the same
/// pointer for its whole life, aligned to [`STORAGE_ALIGN`], valid for reads and
/// writes of [`SegmentStorage::capacity`] bytes, and that no one else reads or
/// writes that region while the storage is alive.
pub(crate) unsafe trait SegmentStorage: Send + Sync + fmt::Debug + 'static {
    /// The start of the region.
    fn as_ptr(&self) -> NonNull<u8>;
    /// The region's size in bytes.
    fn capacity(&self) -> usize;
}

/// Zero-initialised heap memory. Large regions come from `mmap` by way of the
/// allocator, so untouched pages cost nothing until written.
pub(crate) struct HeapStorage {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl HeapStorage {
    /// Allocates `capacity` zeroed bytes; `capacity` must be non-zero.
    pub(crate) fn new(capacity: usize) -> Self {
        assert!(capacity > 0, "segment storage cannot be empty");
        let layout = Layout::from_size_align(capacity, STORAGE_ALIGN).expect("segment size overflows a Layout");
        // SAFETY: the layout has a non-zero size (asserted above).
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| handle_alloc_error(layout));
        HeapStorage { ptr, layout }
    }
}

impl Drop for HeapStorage {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed` with this exact layout and is
        // freed only here, once.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl fmt::Debug for HeapStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeapStorage").field("capacity", &self.layout.size()).finish()
    }
}

// SAFETY: HeapStorage owns its region outright; the raw pointer is only a
// handle to memory no one else has, so moving it to another thread is fine.
unsafe impl Send for HeapStorage {}
// SAFETY: `&HeapStorage` only exposes the pointer and capacity; every access to
// the bytes goes through the segment, which enforces the publication protocol.
unsafe impl Sync for HeapStorage {}

// SAFETY: the pointer is fixed at construction, aligned by the layout, valid
// for `layout.size()` bytes until drop, and owned by this value alone.
unsafe impl SegmentStorage for HeapStorage {
    fn as_ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    fn capacity(&self) -> usize {
        self.layout.size()
    }
}
