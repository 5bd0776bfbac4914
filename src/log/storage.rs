//! Where a segment's bytes live: the seam between the log and its memory.
//!
//! The log only needs a fixed, aligned, zeroed byte region per segment: an
//! anonymous memory mapping for an in-memory log (or a heap block, for its
//! small first segment), a mapped segment file for a durable one
//! (`file/`). Nothing above this trait tells them apart, except
//! the durable log's frames and syncs (`durable.rs`).

use std::fmt;
use std::io;
use std::ptr::NonNull;

/// Alignment of a segment's byte region: a page, since it is mapped.
pub(crate) const STORAGE_ALIGN: usize = 4096;

/// A segment's byte region.
///
/// # Safety
///
/// An implementation promises that [`SegmentStorage::as_ptr`] returns the same
/// pointer for its whole life, aligned to at least 16 bytes, valid for reads
/// and writes of [`SegmentStorage::capacity`] bytes, and that no one else in
/// the process reads or writes that region while the storage is alive (but
/// a segment built over another mapping of the same file, see
/// [`SegmentStorage::shared_state`]). The
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
    /// Where the storage keeps the segment's reservation state itself (a
    /// segment file does, `file/format.rs`), if it does; else the segment keeps it
    /// in memory of its own. Every pointer it returns is valid for the
    /// storage's whole life, aligned for its type, holds a valid value of
    /// it whatever its bytes, and is only ever accessed atomically (by any
    /// process that maps it). Not under loom, whose atomics cannot live in
    /// a file: a segment then keeps its state in memory of its own.
    #[cfg(not(loom))]
    fn shared_state(&self) -> Option<SharedState> {
        None
    }
}

/// A segment's reservation state inside its storage: the tail word, the
/// seal and the offset index, as raw words (`segment.rs` gives them their
/// atomic types). See [`SegmentStorage::shared_state`] for what they promise.
#[cfg(not(loom))]
#[derive(Debug, Clone, Copy)]
pub(crate) struct SharedState {
    /// The tail word.
    pub(crate) tail: NonNull<u64>,
    /// The seal.
    pub(crate) sealed: NonNull<u64>,
    /// The first slot of the offset index.
    pub(crate) slots: NonNull<u32>,
    /// Slots in the index.
    pub(crate) slot_count: usize,
}

/// What a durable log does with a segment's file beyond mapping it
/// (implemented in `file/file_storage.rs`).
pub(crate) trait SegmentFile {
    /// Flushes bytes `from..to` of the record region to stable storage.
    fn flush_region(&self, from: u64, to: u64) -> crate::error::Result<()>;
    /// Writes the completion marker (`count` records filling `used` bytes),
    /// flushing it if `durable`.
    fn mark_complete(&self, count: u64, used: u64, durable: bool) -> crate::error::Result<()>;
    /// Writes the checked prefix (the first `count` records, filling
    /// `used` bytes, are whole; see `file/format.rs`), flushing it if
    /// `durable`.
    ///
    /// # Safety
    ///
    /// No one else writes the prefix's fields concurrently: the caller is
    /// the log's open, before the log is shared, or its close, when no
    /// handle is left, in a log of one process.
    unsafe fn mark_prefix(&self, count: u64, used: u64, durable: bool) -> crate::error::Result<()>;
    /// Takes the file of a segment retention trimmed out of the partition
    /// (renames it to a spare, or deletes it).
    fn retire(&self);
    /// True once the file is a spare: trimmed, and not yet reused.
    fn is_spare(&self) -> bool;
    /// True if the file was recycled: bytes of a previous use may follow
    /// its records, so they end with an end mark (see "Recycling" in
    /// `file/mod.rs`).
    fn is_recycled(&self) -> bool;
    /// Makes this spare the file of the segment at `base` (see "Recycling"
    /// in `file/mod.rs`).
    fn reuse(&self, base: u64, flush: bool) -> crate::error::Result<()>;
    /// Renames a compaction's rebuilt file over this one's name, unless
    /// this one was trimmed first; the name, if it did (see
    /// `file/rebuild.rs`).
    fn replace_with(&self, rebuilt: &std::path::Path) -> crate::error::Result<Option<std::path::PathBuf>>;
    /// The mapped file's inode number (see "The swap across processes" in
    /// `log/compact.rs`). Processes mode only, which loom compiles out.
    #[cfg_attr(loom, allow(dead_code))]
    fn inode(&self) -> u64;
    /// The file's current name.
    fn name(&self) -> std::path::PathBuf;
    /// Marks the end of the segment's records at byte `end` of the region
    /// (a zero frame, if the file was recycled).
    ///
    /// # Safety
    ///
    /// No one may write or read bytes `end..end + 8` of the region
    /// concurrently: they lie past every record the segment will ever hold.
    unsafe fn end_records(&self, end: u64);
    /// Faults the region's pages from byte `from` on in writable, once per
    /// use of the file, off the writers' path (see `file/file_storage.rs`);
    /// whether it did anything.
    fn prepare(&self, from: u64) -> bool;
}

/// An anonymous memory mapping: zeroed pages that cost nothing until
/// written, and that go back to the operating system when the segment is
/// freed. (A heap allocation would not guarantee either: once a large block
/// has been freed, glibc serves the next ones from its heap and zeroes them
/// eagerly, faulting in every page of a segment that may never be written.)
///
/// A segment of a log that has already filled one ([`Pages::Huge`]) asks for
/// transparent huge pages; see [`AnonMap`].
pub(crate) struct MappedStorage {
    map: AnonMap,
}

impl MappedStorage {
    /// Maps `capacity` zeroed bytes; `capacity` must be non-zero. Fails with
    /// the operating system's error when the mapping cannot be made (out of
    /// memory or address space): the log reports it to the publisher that
    /// needed the segment rather than giving up on the partition.
    pub(crate) fn new(capacity: usize, pages: Pages) -> io::Result<Self> {
        assert!(capacity > 0, "segment storage cannot be empty");
        let map = AnonMap::new(capacity, pages)?;
        debug_assert_eq!(map.ptr.as_ptr() as usize % STORAGE_ALIGN, 0);
        Ok(MappedStorage { map })
    }
}

impl fmt::Debug for MappedStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MappedStorage").field("capacity", &self.map.len).finish()
    }
}

// SAFETY: the mapping is fixed at construction (AnonMap never moves it),
// page-aligned, `map.len` bytes long, zero-filled by the kernel, and owned by
// this value alone until it is unmapped on drop.
unsafe impl SegmentStorage for MappedStorage {
    fn as_ptr(&self) -> NonNull<u8> {
        self.map.ptr
    }

    fn capacity(&self) -> usize {
        self.map.len
    }
}

/// Alignment of a [`HeapStorage`] block: a cache line, so that its tail
/// word starts one.
const HEAP_ALIGN: usize = 64;
/// Bytes at the start of a [`HeapStorage`] block before its offset index:
/// the tail word, then the seal (a `u64` each).
const HEAP_STATE_BYTES: usize = 16;
/// Where a [`HeapStorage`] block keeps the seal (under loom the segment
/// keeps its state itself).
#[cfg(not(loom))]
const HEAP_SEALED_AT: usize = 8;
/// Bytes of one slot of the offset index: a `u32` (`segment.rs` asserts its
/// `Slot` is one).
const HEAP_SLOT_BYTES: usize = std::mem::size_of::<u32>();

/// A small segment in one zeroed heap block: its tail word, its seal, its
/// offset index and its region, in that order (the index and region each
/// aligned as a record needs).
///
/// For a log's small first segment (see "A small first segment" in
/// `log/dir.rs`): a topic that holds a message or two then costs one block
/// of about a kilobyte, shared with its neighbours' pages, where a mapping
/// of its own would touch a whole page of region and another of index. The
/// price is the tail word's own cache line: here it shares one with the
/// first slots, so the first segment's few reservations and commits contend
/// for it; only the full-size segments after it keep the tail word alone.
///
/// The block keeps the segment's state itself ([`SegmentStorage::shared_state`]),
/// as a segment file does, so the segment needs no memory of its own (but
/// under loom, whose atomics cannot live in plain memory: there the segment
/// keeps its state apart and this block's first bytes go unused).
pub(crate) struct HeapStorage {
    block: NonNull<u8>,
    layout: std::alloc::Layout,
    /// Where the region starts in the block.
    data_at: usize,
    capacity: usize,
    slot_count: usize,
}

impl HeapStorage {
    /// A zeroed block for a region of `capacity` bytes (`capacity > 0`)
    /// and an index of `slot_count` slots. Fails when the allocator has no
    /// memory for it.
    pub(crate) fn new(capacity: usize, slot_count: usize) -> io::Result<Self> {
        assert!(capacity > 0, "segment storage cannot be empty");
        let too_large = || io::Error::from(io::ErrorKind::OutOfMemory);
        let index_bytes = slot_count.checked_mul(HEAP_SLOT_BYTES).ok_or_else(too_large)?;
        let data_at = (HEAP_STATE_BYTES + index_bytes).next_multiple_of(HEAP_ALIGN);
        let size = data_at.checked_add(capacity).ok_or_else(too_large)?;
        let layout = std::alloc::Layout::from_size_align(size, HEAP_ALIGN).map_err(|_| too_large())?;
        // SAFETY: the layout's size is non-zero (it holds `capacity > 0`).
        let block = unsafe { std::alloc::alloc_zeroed(layout) };
        let block = NonNull::new(block).ok_or_else(too_large)?;
        Ok(HeapStorage { block, layout, data_at, capacity, slot_count })
    }
}

impl Drop for HeapStorage {
    fn drop(&mut self) {
        // SAFETY: `block` was allocated in `new` with `layout` and is owned
        // by this value alone; its users are gone (the storage is dropped).
        unsafe { std::alloc::dealloc(self.block.as_ptr(), self.layout) };
    }
}

impl fmt::Debug for HeapStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeapStorage").field("capacity", &self.capacity).field("slots", &self.slot_count).finish()
    }
}

// SAFETY: a HeapStorage owns its block like a Box owns its allocation: the
// pointer is not tied to a thread, and who may access the bytes is up to
// the segment over it, as with MappedStorage.
unsafe impl Send for HeapStorage {}
// SAFETY: as above; `&HeapStorage` itself gives access to nothing but the
// pointers and sizes.
unsafe impl Sync for HeapStorage {}

// SAFETY: the block is fixed at construction and freed only on drop; the
// region starts `data_at` bytes into a 64-aligned block, at a multiple of
// 64, so it is 16-aligned, and the block holds `data_at + capacity` bytes.
// Nobody else touches the region: the block is this value's alone.
unsafe impl SegmentStorage for HeapStorage {
    fn as_ptr(&self) -> NonNull<u8> {
        // SAFETY: `data_at < size of the block`, so the result is inside it.
        unsafe { self.block.add(self.data_at) }
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    #[cfg(not(loom))]
    fn shared_state(&self) -> Option<SharedState> {
        // The tail word at 0 (64-aligned), the seal at 8 (8-aligned), the
        // index at 16 (4-aligned), all inside the block before `data_at`,
        // zeroed at allocation (an open, empty segment: tail 0, seal
        // `NOT_SEALED`, every slot `UNCOMMITTED`) and any bits a valid
        // integer. The segment accesses them only atomically.
        // SAFETY: each offset lies inside the block (see above).
        let (sealed, slots) = unsafe { (self.block.add(HEAP_SEALED_AT), self.block.add(HEAP_STATE_BYTES)) };
        Some(SharedState {
            tail: self.block.cast(),
            sealed: sealed.cast(),
            slots: slots.cast(),
            slot_count: self.slot_count,
        })
    }
}

/// A merged compacted segment's block (see "A merged compacted segment" in
/// `segment.rs`): built by the compaction pass as a vector of 16-byte
/// words, the first holding the tail word and the seal (zeros: open), the
/// others the region, then kept as it was built, so the kept records are
/// copied once, from their old segments straight into the block the
/// merged segment reads. No index: a merged segment's is sparse, its own.
pub(crate) struct WordStorage {
    /// `Box::into_raw` of the words, given back to a `Box` on drop.
    words: NonNull<[u128]>,
    /// Region bytes, from the second word on.
    capacity: usize,
}

impl WordStorage {
    /// The block `words`, whose region (from the second word) holds
    /// `capacity` bytes; its first word must be zeros.
    pub(crate) fn new(words: Box<[u128]>, capacity: usize) -> WordStorage {
        assert!(capacity <= (words.len().saturating_sub(1)) * WORD_BYTES, "the region lies inside the words");
        assert_eq!(words.first().copied(), Some(0), "an open segment's state");
        WordStorage { words: NonNull::from(Box::leak(words)), capacity }
    }
}

/// Bytes of one word of a [`WordStorage`]; the region starts one word in.
pub(crate) const WORD_BYTES: usize = std::mem::size_of::<u128>();

impl Drop for WordStorage {
    fn drop(&mut self) {
        // SAFETY: `words` came from `Box::leak` in `new`, and the segment
        // over this storage is gone (the storage is dropped).
        drop(unsafe { Box::from_raw(self.words.as_ptr()) });
    }
}

impl fmt::Debug for WordStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WordStorage").field("capacity", &self.capacity).finish()
    }
}

// SAFETY: a WordStorage owns its words like the Box it was made from.
unsafe impl Send for WordStorage {}
// SAFETY: as above; `&WordStorage` gives access to nothing but pointers.
unsafe impl Sync for WordStorage {}

// SAFETY: the words are fixed from `new` until drop; the region starts one
// 16-byte word into a block of `u128`s, so it is 16-aligned, and `new`
// checked that the block holds `capacity` bytes after it. The block is
// this value's alone (leaked from its Box), with write provenance.
unsafe impl SegmentStorage for WordStorage {
    fn as_ptr(&self) -> NonNull<u8> {
        // SAFETY: the block holds at least one word (`new` checked it).
        unsafe { self.words.cast::<u128>().add(1).cast() }
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    #[cfg(not(loom))]
    fn shared_state(&self) -> Option<SharedState> {
        // The tail word at byte 0 and the seal at byte 8 of the first word
        // (16-aligned), zeros from `new` (tail 0, seal `NOT_SEALED`), any
        // bits a valid integer; no index (a pointer past the state, for an
        // empty slice). The segment accesses them only atomically.
        let state = self.words.cast::<u64>();
        // SAFETY: both offsets lie inside the first word.
        let sealed = unsafe { state.add(1) };
        Some(SharedState { tail: state, sealed, slots: self.as_ptr().cast(), slot_count: 0 })
    }
}

/// Which pages a new anonymous mapping asks for.
///
/// # Huge pages, and why not for every segment
///
/// Writing a fresh segment faults in its pages one by one: 1,024 faults for
/// a 4 MiB segment in 4 KiB pages, each a trap, a zeroed page and a page
/// table entry, on the publisher's thread: most of a publish's time on a
/// new topic, when it was measured (`rill-bench --publish-cost`,
/// "new topic" against "past its retention"; the dated study is "recycle"
/// in `docs/archive/performance-notebook-2026.md`). With transparent huge
/// pages the same segment is two faults of 2 MiB each (the kernel zeroes
/// 2 MiB at a time, which costs far less than 512 separate faults), and the
/// readers behind the publisher miss the TLB less.
///
/// The price is memory granularity: a huge page is resident as a whole once
/// any byte of it is written. A partition that holds one small record would
/// keep 2 MiB resident instead of 4 KiB, and a broker with thousands of quiet
/// partitions would pay that thousands of times. So a log's first segment
/// takes small pages (or, in memory, is a small heap block, see
/// [`HeapStorage`]), and only the segments a roll out of a full-size
/// segment makes ask for huge ones: such a log has written a whole segment
/// already, so its memory is at least a segment, and huge pages add at most
/// a part of a huge page (the unwritten rest of the one under the
/// publisher) to it. The roll out of a small first segment takes small
/// pages: that log has written a kilobyte, not a segment. Retention still
/// bounds what a partition holds: segments are trimmed and unmapped (or kept
/// as one of the pool's spares) exactly as before.
///
/// Segments smaller than a huge page get nothing from it (the advice is not
/// given); a segment that is not a multiple of one gets huge pages for its
/// aligned part and small pages for the rest.
///
/// The advice is only advice: with THP disabled (`never`), compiled out, or
/// when the kernel finds no free 2 MiB block, the mapping works the same in
/// 4 KiB pages. With THP's `defrag` set to `madvise` (the usual default) or
/// `always`, a fault in an advised region may compact memory first when
/// none is free: a rarer, longer stall in exchange for the 511 faults saved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pages {
    /// Base pages only.
    Small,
    /// Transparent huge pages where the mapping has room for them.
    Huge,
}

/// The size of a transparent huge page, if the kernel has them; `None` on
/// other systems or when THP is compiled out, and then no mapping asks.
fn huge_page_bytes() -> Option<usize> {
    static SIZE: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *SIZE.get_or_init(|| {
        if !cfg!(target_os = "linux") {
            return None;
        }
        let text = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size").ok()?;
        let size: usize = text.trim().parse().ok()?;
        // Sane sizes only: a power of two, larger than a page (2 MiB on
        // x86-64, 2 MiB to 512 MiB on arm64 depending on its page size).
        (size.is_power_of_two() && size > page_bytes()).then_some(size)
    })
}

/// The system's page size.
fn page_bytes() -> usize {
    // SAFETY: sysconf reads a constant of the system; it has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).ok().filter(|s| s.is_power_of_two()).unwrap_or(STORAGE_ALIGN)
}

/// How an anonymous mapping asks for huge pages over its first `len` bytes
/// (a multiple of the huge page size, from a huge-page-aligned `ptr`).
type Advise = fn(ptr: NonNull<u8>, len: usize) -> io::Result<()>;

/// `madvise(MADV_HUGEPAGE)`.
fn advise_huge_pages(ptr: NonNull<u8>, len: usize) -> io::Result<()> {
    // SAFETY: `ptr..ptr + len` lies inside a mapping this process owns
    // (AnonMap::map_with passes its own); MADV_HUGEPAGE changes only how the
    // kernel backs those pages, never their contents or their validity.
    let rc = unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_HUGEPAGE) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Bytes one `madvise(MADV_POPULATE_WRITE)` of [`populate`] faults in:
/// the kernel holds the process's memory-map lock for reading through each
/// call, and a thread that maps or unmaps meanwhile (a publisher rolling
/// into fresh memory, a compaction pass) waits for the call to end, and so
/// does every page fault queued behind that writer. In chunks of 2 MiB (one
/// huge page on x86-64) such a wait is one chunk faulted in, not a whole
/// segment, however long the prefault thread is kept off a core in the
/// middle.
#[cfg(all(not(loom), target_os = "linux"))]
const POPULATE_CHUNK: usize = 2 << 20;

/// Faults the `len` bytes from `ptr` (a page boundary of a mapping this
/// process owns: private anonymous, or a segment file's) in, writable,
/// with `madvise(MADV_POPULATE_WRITE)` over [`POPULATE_CHUNK`] bytes at a
/// time, so that their first writer takes no page fault (see
/// `prefault.rs`). Returns whether it did. Best effort: on a kernel without
/// it (before 5.14) or out of memory, the writer faults as it would have.
#[cfg(not(loom))]
pub(crate) fn populate(ptr: NonNull<u8>, len: usize) -> bool {
    #[cfg(target_os = "linux")]
    {
        let mut at = 0;
        while at < len {
            let n = POPULATE_CHUNK.min(len - at);
            // SAFETY: the caller passes a range of a mapping of its own
            // (anonymous, or a segment file's, whose pages are allocated on
            // disk), from a page boundary, and `at` is a multiple of the
            // chunk, itself a multiple of any page size; MADV_POPULATE_WRITE
            // faults pages in without changing their contents, so it races
            // with no reader or writer.
            let rc = unsafe { libc::madvise(ptr.as_ptr().add(at).cast(), n, libc::MADV_POPULATE_WRITE) };
            if rc != 0 {
                log::debug!("could not prefault a log segment: {}", io::Error::last_os_error());
                return false;
            }
            at += n;
        }
        true
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (ptr, len);
        false
    }
}

/// Faults in, writable, the bytes `from..to` of the `len` bytes at `ptr`
/// (clamped to `len`), which lie in a mapping this process owns that
/// starts at a page boundary: the pages around them, from the one that
/// holds `from` to the one that holds `to - 1`. What `populate` does, for
/// a part of a segment (see "Ahead of the tail" in `prefault.rs`).
#[cfg(not(loom))]
pub(crate) fn populate_range(ptr: NonNull<u8>, len: usize, from: usize, to: usize) -> bool {
    let to = to.min(len);
    if from >= to {
        return false;
    }
    let page = page_bytes();
    let start = (ptr.as_ptr() as usize + from) & !(page - 1);
    let end = (ptr.as_ptr() as usize + to).next_multiple_of(page);
    // The start is a page boundary inside the mapping that holds `ptr`
    // (it starts at one), and the end is the end of the page that holds
    // the last byte asked for, so inside the same mapping too.
    let Some(start) = NonNull::new(start as *mut u8) else { return false };
    populate(start, end - start.as_ptr() as usize)
}

/// A private anonymous mapping of `len` zeroed bytes, page-aligned, and
/// aligned to a huge page when it asks for huge pages and is large enough
/// to hold one; unmapped on drop.
struct AnonMap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: an AnonMap owns its mapping like a Box owns its allocation: the
// pointer is not tied to a thread, and who may access the bytes is up to its
// owner (MappedStorage, ZeroedArray), as with a Box<[u8]>.
unsafe impl Send for AnonMap {}
// SAFETY: as above; `&AnonMap` itself gives access to nothing but the
// pointer and length.
unsafe impl Sync for AnonMap {}

impl AnonMap {
    /// Maps `len` bytes (`len > 0`) with the pages `pages` asks for.
    fn new(len: usize, pages: Pages) -> io::Result<Self> {
        match (pages, huge_page_bytes()) {
            (Pages::Huge, Some(huge)) if len >= huge => Self::map_with(len, huge, advise_huge_pages),
            _ => Self::map(len),
        }
    }

    /// A plain mapping of `len` bytes (`len > 0`).
    fn map(len: usize) -> io::Result<Self> {
        debug_assert!(len > 0);
        // SAFETY: an anonymous private mapping at an address of the kernel's
        // choosing touches no existing memory; the result is checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).expect("mmap never maps address 0 without MAP_FIXED");
        Ok(AnonMap { ptr, len })
    }

    /// A mapping of `len >= huge` bytes aligned to `huge` (a power of two),
    /// its whole huge pages advised with `advise`. A failed advice is not an
    /// error: the mapping is as good, in small pages.
    fn map_with(len: usize, huge: usize, advise: Advise) -> io::Result<Self> {
        debug_assert!(huge.is_power_of_two() && len >= huge);
        // The kernel does not align an anonymous mapping for us: on this
        // project's 6.18 test machine a 4 MiB one lands 32 KiB past a 2 MiB
        // boundary (so only one of its two huge pages would fit), and the
        // kernels that did align them did so only for some sizes. So map
        // more and trim, three calls per segment, against the 1,024 faults
        // saved.
        let map = Self::map_aligned(len, huge)?;
        let whole = len / huge * huge;
        if let Err(e) = advise(map.ptr, whole) {
            log::debug!("huge pages not available for a {len}-byte log segment ({e}); using small pages");
        }
        Ok(map)
    }

    /// Maps `len + huge - page` bytes and unmaps what lies before the first
    /// `huge` boundary and after `len` bytes from it.
    fn map_aligned(len: usize, huge: usize) -> io::Result<Self> {
        let page = page_bytes();
        let span = len.div_ceil(page) * page;
        let over = Self::map(span + huge - page)?;
        let (start, total) = (over.ptr.as_ptr() as usize, over.len);
        std::mem::forget(over);
        let aligned = start.next_multiple_of(huge);
        let head = aligned - start;
        let tail = total - head - span;
        // SAFETY: `start..start + total` is the mapping just made and
        // forgotten (so nothing else unmaps it); `head` and `tail` are
        // multiples of the page size (start, huge and span are) and the two
        // ranges lie at its ends, outside `aligned..aligned + span`, which
        // is all that is kept. munmap of a valid range only fails for lack
        // of memory to split the mapping; the bytes then stay mapped and
        // unused (a leak of address space, not of memory: they are never
        // written), which is logged.
        unsafe {
            if head > 0 && libc::munmap(start as *mut libc::c_void, head) != 0 {
                log::warn!("could not trim a segment mapping: {}", io::Error::last_os_error());
            }
            if tail > 0 && libc::munmap((aligned + span) as *mut libc::c_void, tail) != 0 {
                log::warn!("could not trim a segment mapping: {}", io::Error::last_os_error());
            }
        }
        let ptr = NonNull::new(aligned as *mut u8).expect("inside a mapping, so not 0");
        Ok(AnonMap { ptr, len })
    }
}

impl Drop for AnonMap {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `map` (or trimmed to these bounds
        // by `map_aligned`) and is owned by this value alone; its owner's
        // users are gone (the storage or array is being dropped).
        let rc = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        if rc != 0 {
            log::warn!("could not unmap a log segment: {}", io::Error::last_os_error());
        }
    }
}

/// An array of `T` in its own anonymous mapping, zero-initialised.
///
/// Used for a segment's offset index, for the same reasons as
/// [`MappedStorage`] (and with the same choice of pages, though only an
/// index of 2 MiB or more, a segment of 16 MiB or more, is large enough for
/// a huge page). Only for types whose all-zero bit pattern is a valid value
/// and that are only mutated through interior mutability.
#[cfg(not(loom))]
pub(crate) struct ZeroedArray<T> {
    map: AnonMap,
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
    pub(crate) unsafe fn new(len: usize, pages: Pages) -> io::Result<Self> {
        const { assert!(!std::mem::needs_drop::<T>() && std::mem::align_of::<T>() <= STORAGE_ALIGN) };
        let bytes = (len * std::mem::size_of::<T>()).max(1);
        let map = AnonMap::new(bytes, pages)?;
        Ok(ZeroedArray { map, len, _marker: std::marker::PhantomData })
    }
}

#[cfg(not(loom))]
impl<T> ZeroedArray<T> {
    /// Faults the whole array in, writable (see [`populate`]).
    pub(crate) fn populate(&self) -> bool {
        populate(self.map.ptr, self.map.len)
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
        unsafe { std::slice::from_raw_parts(self.map.ptr.as_ptr().cast::<T>(), self.len) }
    }
}

// SAFETY: ZeroedArray<T> behaves like a Box<[T]> (it owns its values), so it
// is Send when T is.
#[cfg(not(loom))]
unsafe impl<T: Send> Send for ZeroedArray<T> {}
// SAFETY: shared access hands out only `&T`, so it is Sync when T is.
#[cfg(not(loom))]
unsafe impl<T: Sync> Sync for ZeroedArray<T> {}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const HUGE: usize = 2 << 20;

    /// Writes a byte into every page of `map` after checking it reads zero.
    fn check_zeroed_and_writable(map: &AnonMap) {
        let page = page_bytes();
        for at in (0..map.len).step_by(page).chain([map.len - 1]) {
            // SAFETY: `at < map.len`, inside the mapping this test owns alone.
            unsafe {
                let byte = map.ptr.as_ptr().add(at);
                assert_eq!(byte.read(), 0, "byte {at} of a fresh mapping");
                byte.write(0xa5);
                assert_eq!(byte.read(), 0xa5);
            }
        }
    }

    fn refuse(_: NonNull<u8>, _: usize) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EINVAL))
    }

    #[test]
    fn a_mapping_works_when_the_huge_page_advice_fails() {
        for len in [HUGE, 4 << 20, (4 << 20) + 4096, (3 << 20) + 100] {
            let map = AnonMap::map_with(len, HUGE, refuse).unwrap();
            assert_eq!(map.len, len);
            assert_eq!(map.ptr.as_ptr() as usize % HUGE, 0, "aligned even so");
            check_zeroed_and_writable(&map);
        }
    }

    #[test]
    fn huge_page_mappings_are_aligned_zeroed_and_writable() {
        // Whether the kernel backs them with huge pages depends on the
        // machine (THP mode, free memory); what the code promises does not.
        for len in [HUGE, 4 << 20, (4 << 20) + 4096, (3 << 20) + 100] {
            let map = AnonMap::map_with(len, HUGE, advise_huge_pages).unwrap();
            assert_eq!(map.ptr.as_ptr() as usize % HUGE, 0);
            check_zeroed_and_writable(&map);
        }
    }

    #[test]
    fn advice_covers_only_whole_huge_pages() {
        fn must_be_whole(ptr: NonNull<u8>, len: usize) -> io::Result<()> {
            assert_eq!(ptr.as_ptr() as usize % HUGE, 0);
            assert_eq!(len % HUGE, 0);
            assert!(len > 0);
            Ok(())
        }
        for len in [HUGE, (3 << 20) + 100, (4 << 20) + 4096] {
            AnonMap::map_with(len, HUGE, must_be_whole).unwrap();
        }
    }

    #[test]
    fn a_heap_block_holds_its_state_and_index_before_an_aligned_zeroed_region() {
        for (capacity, slots) in [(1024, 32), (1000, 1), (4096, 200)] {
            let heap = HeapStorage::new(capacity, slots).unwrap();
            let region = heap.as_ptr().as_ptr() as usize;
            assert_eq!((heap.capacity(), region % 16), (capacity, 0));
            let state = heap.shared_state().expect("the block keeps the state");
            let (tail, sealed, first) =
                (state.tail.as_ptr() as usize, state.sealed.as_ptr() as usize, state.slots.as_ptr() as usize);
            assert_eq!((tail % 8, sealed % 8, first % 4, state.slot_count), (0, 0, 0, slots));
            assert!(tail + 8 <= sealed && sealed + 8 <= first, "disjoint words");
            assert!(first + slots * HEAP_SLOT_BYTES <= region, "the index ends before the region");
            // SAFETY: the block is this test's alone; every address read
            // lies in it (the checks above).
            unsafe {
                assert_eq!((state.tail.read(), state.sealed.read()), (0, 0));
                assert!((0..slots).all(|i| state.slots.add(i).read() == 0));
                assert!((0..capacity).all(|i| heap.as_ptr().add(i).read() == 0));
            }
        }
    }

    #[test]
    fn storage_and_arrays_work_in_either_kind_of_pages() {
        for pages in [Pages::Small, Pages::Huge] {
            for capacity in [4096, 1 << 20, 4 << 20, (2 << 20) + 8] {
                let storage = MappedStorage::new(capacity, pages).unwrap();
                assert_eq!(storage.capacity(), capacity);
                assert_eq!(storage.as_ptr().as_ptr() as usize % STORAGE_ALIGN, 0);
                check_zeroed_and_writable(&storage.map);
            }
            // SAFETY: all-zero bytes are a valid AtomicU32 (0), which needs no
            // drop, is 4-aligned and is only mutated through its own methods.
            let array = unsafe { ZeroedArray::<crate::sync::atomic::AtomicU32>::new(1 << 20, pages) }.unwrap();
            assert_eq!(array.len(), 1 << 20);
            assert!(array.iter().all(|a| a.load(crate::sync::atomic::Ordering::Relaxed) == 0));
            array[(1 << 20) - 1].store(7, crate::sync::atomic::Ordering::Relaxed);
            assert_eq!(array[(1 << 20) - 1].load(crate::sync::atomic::Ordering::Relaxed), 7);
        }
    }
}
