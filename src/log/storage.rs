//! Where a segment's bytes live: the seam between the log and its memory.
//!
//! The log only needs a fixed, aligned, zeroed byte region per segment: an
//! anonymous memory mapping for an in-memory log, a mapped segment file for a
//! durable one (`file.rs`). Nothing above this trait tells them apart, except
//! the durable log's frames and syncs (`durable.rs`).

use std::fmt;
use std::io;
use std::ptr::NonNull;

use memmap2::MmapMut;

/// Alignment of a segment's byte region: a page, since it is mapped.
pub(crate) const STORAGE_ALIGN: usize = 4096;

/// A segment's byte region.
///
/// # Safety
///
/// An implementation promises that [`SegmentStorage::as_ptr`] returns the same
/// pointer for its whole life, aligned to at least 16 bytes, valid for reads
/// and writes of [`SegmentStorage::capacity`] bytes, and that no one else in
/// the process reads or writes that region while the storage is alive. The
/// bytes need not be zeros: the segment reads only the bytes of records it
/// committed (reused buffers and recycled segment files hold a previous
/// segment's; a recovered segment file holds the records the segment built
/// over it marks committed).
pub(crate) unsafe trait SegmentStorage: Send + Sync + fmt::Debug + 'static {
    /// The start of the region.
    fn as_ptr(&self) -> NonNull<u8>;
    /// The region's size in bytes.
    fn capacity(&self) -> usize;
    /// The segment file behind the region, for a durable segment.
    fn as_file(&self) -> Option<&dyn SegmentFile> {
        None
    }
}

/// What a durable log does with a segment's file beyond mapping it
/// (implemented in `file.rs`).
pub(crate) trait SegmentFile {
    /// Flushes bytes `from..to` of the record region to stable storage.
    fn flush_region(&self, from: u64, to: u64) -> crate::error::Result<()>;
    /// Writes the completion marker (`count` records filling `used` bytes),
    /// flushing it if `durable`.
    fn mark_complete(&self, count: u64, used: u64, durable: bool) -> crate::error::Result<()>;
    /// Takes the file of a segment retention trimmed out of the partition
    /// (renames it to a spare, or deletes it).
    fn retire(&self);
    /// True once the file is a spare: trimmed, and not yet reused.
    fn is_spare(&self) -> bool;
    /// Makes this spare the file of the segment at `base` (see `file.rs`).
    fn reuse(&self, base: u64, flush: bool) -> crate::error::Result<()>;
    /// Marks the end of the segment's records at byte `end` of the region
    /// (a zero frame, if the file was recycled).
    ///
    /// # Safety
    ///
    /// No one may write or read bytes `end..end + 8` of the region
    /// concurrently: they lie past every record the segment will ever hold.
    unsafe fn end_records(&self, end: u64);
    /// Faults the region's pages from byte `from` on in writable, once per
    /// use of the file, off the writers' path (see `file.rs`); whether it
    /// did anything.
    fn prepare(&self, from: u64) -> bool;
}

/// An anonymous memory mapping: zeroed pages that cost nothing until
/// written, and that go back to the operating system when the segment is
/// freed. (A heap allocation would not guarantee either: once a large block
/// has been freed, glibc serves the next ones from its heap and zeroes them
/// eagerly, faulting in every page of a segment that may never be written.)
pub(crate) struct MappedStorage {
    map: MmapMut,
}

impl MappedStorage {
    /// Maps `capacity` zeroed bytes; `capacity` must be non-zero. Fails with
    /// the operating system's error when the mapping cannot be made (out of
    /// memory or address space): the log reports it to the publisher that
    /// needed the segment rather than giving up on the partition.
    pub(crate) fn new(capacity: usize) -> io::Result<Self> {
        assert!(capacity > 0, "segment storage cannot be empty");
        let map = MmapMut::map_anon(capacity)?;
        debug_assert_eq!(map.as_ptr() as usize % STORAGE_ALIGN, 0);
        Ok(MappedStorage { map })
    }

    /// The mapping's bytes as a pointer (mutable access goes through the
    /// segment's protocol, never through a `&mut` to the whole region).
    fn ptr(&self) -> NonNull<u8> {
        NonNull::new(self.map.as_ptr().cast_mut()).expect("a mapping is never at address 0")
    }
}

impl fmt::Debug for MappedStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MappedStorage").field("capacity", &self.map.len()).finish()
    }
}

// SAFETY: the mapping is fixed at construction (MmapMut never moves it),
// page-aligned, `map.len()` bytes long, zero-filled by the kernel, and owned
// by this value alone until it is unmapped on drop.
unsafe impl SegmentStorage for MappedStorage {
    fn as_ptr(&self) -> NonNull<u8> {
        self.ptr()
    }

    fn capacity(&self) -> usize {
        self.map.len()
    }
}

/// An array of `T` in its own anonymous mapping, zero-initialised.
///
/// Used for a segment's offset index, for the same reasons as
/// [`MappedStorage`]. Only for types whose all-zero bit pattern is a valid
/// value and that are only mutated through interior mutability.
#[cfg(not(loom))]
pub(crate) struct ZeroedArray<T> {
    map: MmapMut,
    len: usize,
    _marker: std::marker::PhantomData<T>,
}

#[cfg(not(loom))]
impl<T> ZeroedArray<T> {
    /// # Safety
    ///
    /// All-zero bytes must be a valid `T`, `T` must need no drop, its
    /// alignment must be at most a page, and it must only be mutated through
    /// interior mutability (the array hands out shared references only).
    ///
    /// Fails, like [`MappedStorage::new`], when the mapping cannot be made.
    pub(crate) unsafe fn new(len: usize) -> io::Result<Self> {
        const { assert!(!std::mem::needs_drop::<T>() && std::mem::align_of::<T>() <= STORAGE_ALIGN) };
        let bytes = (len * std::mem::size_of::<T>()).max(1);
        let map = MmapMut::map_anon(bytes)?;
        Ok(ZeroedArray { map, len, _marker: std::marker::PhantomData })
    }
}

#[cfg(not(loom))]
impl<T> std::ops::Deref for ZeroedArray<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: the mapping holds `len` values of `T` (the constructor's
        // contract makes zeroed bytes valid ones), is page-aligned, lives as
        // long as `self`, and is only ever mutated through `T`'s interior
        // mutability, so shared references to it are sound.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().cast::<T>(), self.len) }
    }
}

// SAFETY: ZeroedArray<T> behaves like a Box<[T]> (it owns its values), so it
// is Send when T is.
#[cfg(not(loom))]
unsafe impl<T: Send> Send for ZeroedArray<T> {}
// SAFETY: shared access hands out only `&T`, so it is Sync when T is.
#[cfg(not(loom))]
unsafe impl<T: Sync> Sync for ZeroedArray<T> {}
