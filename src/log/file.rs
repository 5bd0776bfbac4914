//! The segment file: how a durable segment lies on disk.
//!
//! A durable partition is a directory of segment files, one per segment,
//! each named by the offset of its first record (`00000000000000004096.seg`:
//! twenty digits, so names sort like offsets). A file is a header page and
//! the segment's record region, mapped shared (`MAP_SHARED`): publishers copy
//! records straight into the page cache, exactly as they copy into anonymous
//! memory for an in-memory log.
//!
//! ```text
//! file byte 0      HEADER_BYTES (one page)                 index_at (a page boundary)
//! +----------------+------------------------------------------+-----+----------------+
//! | header |  tail | frame | record | frame | record | zeros  | pad | offset index   |
//! | fields |  seal |                                          |     | u32 per slot   |
//! +----------------+------------------------------------------+-----+----------------+
//!                   <-------------- capacity --------------->        <- slots * 4 ->
//! ```
//!
//! Since version 2 the file holds the segment's whole reservation state, not
//! only its records: the *tail word* and the *seal* (`segment.rs`) live in
//! the header page, each on a cache line of its own (`TAIL_AT`, `SEALED_AT`),
//! and the offset index (one slot per record) in the pages after the record
//! region. So two mappings of one file, in two processes, reserve with one
//! fetch-add on the same tail word and commit into the same slots: the
//! append protocol of `segment.rs` runs unchanged on them. Those three are
//! live state in native byte order, never trusted after a crash: recovery
//! rebuilds the index from the records' frames and rewrites the tail and the
//! seal (`recovery.rs`), with one exception: a slot holding `ABANDONED`, an
//! offset a live process gave up (see "An abandoned reservation" in
//! `segment.rs`), which recovery keeps as a skip record whatever its bytes.
//!
//! The header (little-endian): `MAGIC` (8 bytes), `VERSION` (u32), the CRC32C
//! of the fixed fields (u32), the base offset (u64), the record region's
//! capacity (u64); then the *completion* fields, written by a sync round
//! (or by recovery, for the files it keeps) once every record of the sealed
//! segment is committed (and, unless the fsync policy is `Never`, on disk;
//! every sealed segment gets them, see "The completion marker" in
//! `durable.rs`; under `Never` the broker's flusher writes them without a
//! flush, so after a *machine* crash the header may be on disk before
//! records it counts, which recovery reports as `Corrupt`, see
//! `recovery.rs`): the record count (u64), the bytes they fill (u64) and a
//! CRC32C of those two fields and the base (u32); then the file's
//! *generation* (u64, a fixed field): 0 for a file created for its segment,
//! one more each time it is recycled; then the number of slots of the offset
//! index (u64, a fixed field). A file whose completion fields are
//! absent (zeros) or do not check is *incomplete*: recovery may find a torn
//! tail in it. A complete file must hold exactly its count of intact
//! records, or it is damaged.
//!
//! Every record is preceded by an 8-byte *frame*: the CRC32C of the record's
//! offset (u64, little-endian) followed by its bytes (header and body,
//! padding excluded), and `FRAME_MARK`. Mixing in the offset means a record
//! found at the wrong place (a stale page, a recycled file) never checks. The
//! publisher writes the record, then the frame with one aligned 8-byte store,
//! then commits the slot: a frame of zeros is "nothing here", and in a
//! process crash the frame is either all there or not at all.
//!
//! The file is preallocated (`posix_fallocate`) to its full size when it is
//! created, so running out of disk is an error at segment creation (`Io` to
//! the publisher that rolled), never a `SIGBUS` on a page fault of the map.
//! It is made under a temporary name (`<base>.<pid>-<thread>.tmp`) and
//! linked under its segment's name once its header is written: the link
//! fails if that name exists, and a file found by its segment's name, by
//! any process, is whole. A crash before the link leaves the temporary
//! file, which recovery deletes.
//!
//! # Why this file is long
//!
//! It holds the file format (header, frame, end mark, where the
//! reservation state lies), the mapping, the preallocation and the
//! recycling of files, the test seams that fail creates and syncs, and
//! their tests. They share one invariant (what
//! bytes a file may hold at each moment of its life, listed under
//! "Recycling" for every crash state) that recovery depends on, so they are
//! kept in the file that states it.
//!
//! # Recycling
//!
//! Filling a fresh file costs the kernel more than the copy of the records:
//! every page of it is allocated, zeroed, inserted in the page cache and
//! faulted into the map, and its preallocated (unwritten) extents are
//! converted as they are written. A durable partition therefore reuses the
//! files retention trims, as an in-memory one reuses its segment buffers:
//!
//! 1. **Trim.** When retention drops a segment, its file is renamed from
//!    `<base>.seg` to `<base>.spare` (readers still inside it keep reading
//!    through their mapping). Recovery deletes every spare file it finds:
//!    from this step on, the file is not part of the partition.
//! 2. **Spare.** When the last reader lets go of the segment, its file, still
//!    mapped, and its offset index go to the partition's pool (at most
//!    `SPARE_SEGMENTS`; a spare beyond that is deleted).
//! 3. **Reuse.** A roll that finds a spare rewrites its header for the new
//!    base (next generation, no completion fields) and zeroes its first
//!    frame (no records yet), flushes those pages if the
//!    fsync policy flushes anything, links the file under `<new base>.seg`
//!    (failing, like a creation, if that name exists) and unlinks the spare
//!    name.
//!
//! The records of the file's previous use stay in it, behind the new ones.
//! They are never taken for new records: a frame's checksum covers the
//! record's offset, and every new offset is larger than every old one, so a
//! stale record checks only by a checksum collision (one in 2^32 a frame
//! and offset tried; the resync past a hole tries many, and asks for a
//! second check, see "Holes" in `recovery.rs`). What they change is the
//! end of a file's records, which is no longer a frame of zeros; so the
//! records of a recycled file end with one written on purpose:
//!
//! * the publisher that seals a segment writes a zero frame right after its
//!   last record (no one else can write there any more), before the next
//!   segment's file exists, and a sync round flushes it with the records;
//! * closing the log writes one after the active segment's records.
//!
//! A crash leaves the active segment without it: recovery then finds the
//! previous use's bytes (or a torn record of ours; it cannot tell them
//! apart) after the last intact record, and cuts there as at any torn tail
//! (see `recovery.rs`).
//!
//! # Preparing the pages ahead of the writer
//!
//! A publisher's first write to a page of a segment file faults: the page
//! is allocated, zeroed and inserted in the page cache (a fresh file), or,
//! in a recycled file whose pages a sync round (or the kernel) wrote back
//! and so write-protected, the filesystem's `page_mkwrite` runs to dirty it
//! again. That is a fault per 4 KiB, on the publisher's path (about 40
//! records of 64 bytes). So each file, once per use, gets its pages from
//! the writer's position to its end faulted in writable by one
//! `madvise(MADV_POPULATE_WRITE)` ([`FileStorage::prepare`]), on the broker's
//! `rill-prepare` thread, which a roll wakes (see `broker/flusher.rs`).
//! It changes no byte: a page it dirties ahead of the records holds what it
//! held (zeros, or a previous use's records, which the checksums already
//! keep from being read as new), is flushed by a sync round only once
//! records fill it, and is written back at most once more by the kernel if
//! none ever do. Crash states are those listed below, unchanged.
//!
//! A crash at each step of a recycling leaves: before step 1's rename, the
//! trimmed segment as the oldest one (retention trims it again); after it,
//! or anywhere in steps 2 and 3 before the link, a spare file, deleted by
//! recovery; between the link and the unlink, the new segment file (its new
//! header written first, and on disk first if the policy flushes) and a
//! spare name for the same file, which recovery unlinks. With `Never`, a
//! *machine* crash may persist the link before the header page, as it may
//! persist any metadata before any data with that policy: recovery then
//! finds a header naming another base than the file name, and reports it.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use memmap2::{MmapMut, MmapOptions};

#[cfg(not(loom))]
use super::storage::SharedState;
use super::storage::{SegmentFile, SegmentStorage};
use crate::error::{Error, Result};
use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use crate::sync::{Mutex, thread};

/// Size of the header in front of the record region: a page, so the record
/// region is page-aligned and flushing a range of it never touches the header.
pub(crate) const HEADER_BYTES: usize = 4096;
/// First bytes of every segment file.
const MAGIC: [u8; 8] = *b"RILLSEG\0";
/// Format version this build writes and reads. Version 1 had no tail word,
/// seal or offset index in the file; a file of another version is refused
/// with an error that says so, never read as this one (`recovery.rs`).
pub(crate) const VERSION: u32 = 2;
/// `u32` format version.
pub(crate) const VERSION_AT: usize = 8;
/// `u32` CRC32C of the fixed fields (magic, version, base, capacity).
const HEADER_CRC_AT: usize = 12;
/// `u64` offset of the segment's first record.
const BASE_AT: usize = 16;
/// `u64` size of the record region.
const CAPACITY_AT: usize = 24;
/// `u64` records in the complete segment (completion field).
const COUNT_AT: usize = 32;
/// `u64` bytes those records fill, frames included (completion field).
const USED_AT: usize = 40;
/// `u32` CRC32C of base, count and used bytes (completion field).
const COMPLETE_CRC_AT: usize = 48;
/// End of the completion fields.
const COMPLETE_END: usize = 52;
/// `u64` times the file has been recycled (fixed field).
const GENERATION_AT: usize = 52;
/// `u64` slots of the offset index after the record region (fixed field).
const SLOTS_AT: usize = 60;
/// End of the fixed and completion fields; the page holds nothing else but
/// the tail word and the seal.
pub(crate) const HEADER_END: usize = 68;
/// The segment's tail word (`u64`, native byte order), on a cache line of
/// its own (128 bytes apart: adjacent lines are fetched in pairs), so the
/// publishers' fetch-adds do not slow down readers of the fields above.
pub(crate) const TAIL_AT: usize = 128;
/// The segment's seal (`u64`, native byte order: the final record count, or
/// all ones while open), on a line apart from the tail word's.
pub(crate) const SEALED_AT: usize = 256;
/// Bytes of one offset index slot in the file.
pub(crate) const SLOT_BYTES: usize = 4;
const _: () = assert!(VERSION_AT == MAGIC.len() && HEADER_CRC_AT == VERSION_AT + 4 && BASE_AT == HEADER_CRC_AT + 4);
const _: () = assert!(CAPACITY_AT == BASE_AT + 8 && COUNT_AT == CAPACITY_AT + 8 && USED_AT == COUNT_AT + 8);
const _: () = assert!(COMPLETE_CRC_AT == USED_AT + 8 && COMPLETE_END == COMPLETE_CRC_AT + 4);
const _: () = assert!(GENERATION_AT == COMPLETE_END && SLOTS_AT == GENERATION_AT + 8 && HEADER_END == SLOTS_AT + 8);
const _: () = assert!(HEADER_END <= TAIL_AT && TAIL_AT + 128 <= SEALED_AT && SEALED_AT + 8 <= HEADER_BYTES);

/// Where the offset index of a file whose record region holds `capacity`
/// bytes starts: the first page boundary after the region.
pub(crate) fn index_at(capacity: u64) -> u64 {
    HEADER_BYTES as u64 + capacity.next_multiple_of(HEADER_BYTES as u64)
}

/// The whole length of a segment file with a region of `capacity` bytes and
/// an index of `slots` slots.
pub(crate) fn file_len(capacity: u64, slots: u64) -> u64 {
    index_at(capacity) + slots * SLOT_BYTES as u64
}

/// Bytes of the frame in front of each record of a durable segment.
pub(crate) const FRAME_LEN: usize = 8;
/// High half of every frame: tells a frame from stray bytes before the CRC is
/// even computed, and keeps a valid frame non-zero whatever the CRC.
const FRAME_MARK: u32 = 0x4C4C_4952; // "RILL" little-endian
/// Extension of segment files.
pub(crate) const SEGMENT_EXT: &str = "seg";
/// Extension of spare files: trimmed segment files kept for reuse, which are
/// no part of the partition (recovery deletes them).
pub(crate) const SPARE_EXT: &str = "spare";
/// Extension of a segment file being made, before it is linked under its
/// segment's name (recovery deletes one a crash left).
const TEMP_EXT: &str = "tmp";

/// The frame word stored in front of the record at `offset` whose bytes
/// (padding excluded) are `record`.
#[inline]
pub(crate) fn frame_for(offset: u64, record: &[u8]) -> u64 {
    (u64::from(FRAME_MARK) << 32) | u64::from(frame_crc(offset, record))
}

/// Records shorter than this are checksummed by [`frame_crc_sse42`]'s own
/// loop; longer ones by the `crc32c` crate, which from 768 bytes on runs
/// three interleaved streams (below that it runs the same serial loop, after
/// a dispatch and an alignment split that cost more than the loop for a
/// small record).
#[cfg(target_arch = "x86_64")]
const CRATE_CRC_FROM: usize = 768;

/// CRC32C of `offset` (little-endian) followed by `record`: the same value
/// as `crc32c_append(crc32c(&offset.to_le_bytes()), record)`, computed for
/// small records without the crate's two dispatches (on the hot path of a
/// durable append, once per record; and in recovery, once per record kept).
#[inline]
fn frame_crc(offset: u64, record: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE4.2, checked just above.
        return unsafe { frame_crc_sse42(offset, record) };
    }
    frame_crc_portable(offset, record)
}

/// [`frame_crc`] through the `crc32c` crate alone (any CPU).
fn frame_crc_portable(offset: u64, record: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&offset.to_le_bytes()), record)
}

/// [`frame_crc`] with the SSE4.2 CRC32C instructions. The register holds the
/// CRC before its final inversion (it starts from all ones), as the
/// instructions want it: the offset is one 8-byte step, the record whole
/// 8-byte words (records start 8-aligned) and then its last few bytes.
///
/// # Safety
///
/// The CPU must support SSE4.2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn frame_crc_sse42(offset: u64, record: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u8, _mm_crc32_u64};
    let mut state = _mm_crc32_u64(u64::from(u32::MAX), offset);
    if record.len() >= CRATE_CRC_FROM {
        // The crate takes and returns the inverted (finished) form.
        return crc32c::crc32c_append(!(state as u32), record);
    }
    let mut words = record.chunks_exact(8);
    for word in &mut words {
        state = _mm_crc32_u64(state, u64::from_le_bytes(word.try_into().expect("an 8-byte chunk")));
    }
    let mut state = state as u32;
    for &byte in words.remainder() {
        state = _mm_crc32_u8(state, byte);
    }
    !state
}

/// True if `frame` carries the frame mark: a frame word of some record
/// (checked or not), not zeros or stray bytes, most likely.
pub(crate) fn has_frame_mark(frame: u64) -> bool {
    (frame >> 32) as u32 == FRAME_MARK
}

/// Why a frame word does not belong to `record` at `offset`, if it does not.
pub(crate) fn check_frame(frame: u64, offset: u64, record: &[u8]) -> std::result::Result<(), &'static str> {
    if (frame >> 32) as u32 != FRAME_MARK {
        return Err("record frame has no frame mark");
    }
    if frame != frame_for(offset, record) {
        return Err("record checksum mismatch");
    }
    Ok(())
}

/// The file name of the segment whose first offset is `base`.
pub(crate) fn segment_file_name(base: u64) -> String {
    format!("{base:020}.{SEGMENT_EXT}")
}

/// The name of the spare file a trimmed segment at `base` becomes.
pub(crate) fn spare_file_name(base: u64) -> String {
    format!("{base:020}.{SPARE_EXT}")
}

/// The name under which this thread makes the segment file for `base`
/// before it links it under its own name ([`FileStorage::create`]):
/// `<base>.<pid>-<thread>.tmp`, so publishers racing to make the same
/// segment (a stalled roll's retries) never share one. A thread makes one
/// file at a time, and recovery deletes what a crash left before the next
/// process (which may reuse the pid) makes any.
fn temp_file_name(base: u64) -> String {
    let thread: String = format!("{:?}", thread::current().id()).chars().filter(char::is_ascii_digit).collect();
    format!("{base:020}.{}-{thread}.{TEMP_EXT}", std::process::id())
}

/// True if `name` is a temporary segment file's ([`temp_file_name`]): one
/// a crash left before it was linked under its segment's name, which is no
/// part of the partition (recovery deletes it).
pub(crate) fn is_temp_file_name(name: &str) -> bool {
    let Some(rest) = name.strip_suffix(TEMP_EXT).and_then(|r| r.strip_suffix('.')) else { return false };
    let Some((digits, tag)) = rest.split_once('.') else { return false };
    digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()) && !tag.is_empty()
}

/// The base offset a segment file name stands for, if it is one.
pub(crate) fn parse_segment_file_name(name: &str) -> Option<u64> {
    parse_numbered(name, SEGMENT_EXT)
}

/// True if `name` is a spare file's.
pub(crate) fn is_spare_file_name(name: &str) -> bool {
    parse_numbered(name, SPARE_EXT).is_some()
}

fn parse_numbered(name: &str, ext: &str) -> Option<u64> {
    let digits = name.strip_suffix(ext)?.strip_suffix('.')?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("a 4-byte field"))
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("an 8-byte field"))
}

/// What a segment file's header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) base: u64,
    pub(crate) capacity: u64,
    /// `(records, used bytes)` once the file is complete.
    pub(crate) complete: Option<(u64, u64)>,
    /// Times the file was recycled: 0 for a fresh one, whose bytes after
    /// its records are zeros; more, and they may be a previous use's.
    pub(crate) generation: u64,
    /// Slots of the offset index after the record region.
    pub(crate) slots: u64,
}

/// Why a header page does not describe a segment file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HeaderError {
    /// The page is all zeros: a file created but never written (a crash
    /// right after its creation).
    Blank,
    /// A segment file of another format version than this build's
    /// [`VERSION`] (the one it has): not damage, and never read as ours.
    Version(u32),
    /// Anything else: the text says what.
    Damaged(&'static str),
}

impl Header {
    fn encode_fixed(&self, page: &mut [u8]) {
        page[..VERSION_AT].copy_from_slice(&MAGIC);
        page[VERSION_AT..VERSION_AT + 4].copy_from_slice(&VERSION.to_le_bytes());
        page[BASE_AT..BASE_AT + 8].copy_from_slice(&self.base.to_le_bytes());
        page[CAPACITY_AT..CAPACITY_AT + 8].copy_from_slice(&self.capacity.to_le_bytes());
        page[GENERATION_AT..GENERATION_AT + 8].copy_from_slice(&self.generation.to_le_bytes());
        page[SLOTS_AT..SLOTS_AT + 8].copy_from_slice(&self.slots.to_le_bytes());
        let crc = fixed_crc(page);
        page[HEADER_CRC_AT..HEADER_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    }

    /// Reads a header page (at least `HEADER_END` bytes).
    pub(crate) fn decode(page: &[u8]) -> std::result::Result<Header, HeaderError> {
        if page.len() < HEADER_END {
            return Err(HeaderError::Damaged("file shorter than a segment header"));
        }
        if page[..HEADER_END].iter().all(|&b| b == 0) {
            return Err(HeaderError::Blank);
        }
        if page[..VERSION_AT] != MAGIC {
            return Err(HeaderError::Damaged("not a rill segment file (bad magic)"));
        }
        if le_u32(page, VERSION_AT) != VERSION {
            return Err(HeaderError::Version(le_u32(page, VERSION_AT)));
        }
        if le_u32(page, HEADER_CRC_AT) != fixed_crc(page) {
            return Err(HeaderError::Damaged("segment header checksum mismatch"));
        }
        let base = le_u64(page, BASE_AT);
        let capacity = le_u64(page, CAPACITY_AT);
        let slots = le_u64(page, SLOTS_AT);
        let count = le_u64(page, COUNT_AT);
        let used = le_u64(page, USED_AT);
        let complete = (le_u32(page, COMPLETE_CRC_AT) == complete_crc(base, count, used) && used <= capacity)
            .then_some((count, used));
        Ok(Header { base, capacity, complete, generation: le_u64(page, GENERATION_AT), slots })
    }

    /// The version of the segment file whose first bytes are `start`, if
    /// they carry the magic and a version other than this build's: such a
    /// file is refused before anything else is judged (`recovery.rs`).
    pub(crate) fn foreign_version(start: &[u8]) -> Option<u32> {
        let version = start.get(VERSION_AT..VERSION_AT + 4)?;
        let version = u32::from_le_bytes(version.try_into().expect("a 4-byte field"));
        (start[..VERSION_AT] == MAGIC && version != VERSION).then_some(version)
    }

    /// The whole length of the file this header describes, unless it is
    /// beyond what a file can be (a damaged header's sizes).
    pub(crate) fn file_len(&self) -> Option<u64> {
        let index_at =
            (HEADER_BYTES as u64).checked_add(self.capacity.checked_next_multiple_of(HEADER_BYTES as u64)?)?;
        index_at.checked_add(self.slots.checked_mul(SLOT_BYTES as u64)?)
    }
}

/// CRC32C of the fixed header fields (the CRC field itself excluded).
fn fixed_crc(page: &[u8]) -> u32 {
    let crc = crc32c::crc32c_append(crc32c::crc32c(&page[..HEADER_CRC_AT]), &page[BASE_AT..COUNT_AT]);
    crc32c::crc32c_append(crc, &page[GENERATION_AT..HEADER_END])
}

/// CRC32C of the completion fields. Never zero for a real segment: the base
/// is mixed in, and a blank completion (all zeros) must not check.
fn complete_crc(base: u64, count: u64, used: u64) -> u32 {
    let mut b = [0u8; 24];
    b[..8].copy_from_slice(&base.to_le_bytes());
    b[8..16].copy_from_slice(&count.to_le_bytes());
    b[16..].copy_from_slice(&used.to_le_bytes());
    // A constant seed so an all-zero completion of base 0 does not check either.
    crc32c::crc32c_append(0x5EA1_ED00, &b)
}

/// A segment file, mapped: the storage of one durable segment.
pub(crate) struct FileStorage {
    map: MmapMut,
    /// Bytes of the record region (from `HEADER_BYTES` on), as the header says.
    capacity: usize,
    /// Slots of the offset index the file holds after its region (at
    /// [`index_at`]), if the header is one of ours and the file is long
    /// enough for it; `0` if not (a damaged file, which recovery does not
    /// keep, or one it extends and maps again first).
    slots: usize,
    /// The record region's pages ahead of the writer were faulted in
    /// writable since the file last got a new use (see [`Self::prepare`]).
    /// Set by the flusher, cleared when the file becomes a spare.
    prepared: AtomicBool,
    /// Its current name. Changed (and read, but for error messages) only on
    /// the cold paths of a roll and a trim, hence a lock.
    name: Mutex<FileName>,
}

/// Where a segment file is, and what it is now.
#[derive(Debug)]
struct FileName {
    path: PathBuf,
    /// Trimmed: the file is a spare (named by [`spare_file_name`]), deleted
    /// when this storage is dropped unless it was reused.
    spare: bool,
    /// The header's generation.
    generation: u64,
}

impl FileStorage {
    /// Creates the file for the segment at `base` in `dir`, with a record
    /// region of `capacity` bytes and an offset index of `slots` slots,
    /// preallocates it and writes its header (the tail word, the seal and
    /// the index are zeros; the segment built over it sets the first two).
    /// Fails with [`Error::Io`] (naming the file) when the disk is full or
    /// the directory is not writable; leaves no file behind then.
    ///
    /// The file is made whole under a temporary name of its own (see
    /// [`temp_file_name`]) and only then linked under the segment's name
    /// (`link(2)`, which fails if that name exists), so a segment file
    /// never exists without its header: whoever opens it by name, in any
    /// process, finds it complete. Errors name the segment file.
    pub(crate) fn create(dir: &Path, base: u64, capacity: usize, slots: usize) -> Result<FileStorage> {
        let path = dir.join(segment_file_name(base));
        let temp = dir.join(temp_file_name(base));
        let total = file_len(capacity as u64, slots as u64) as usize;
        // `create_new`: a file of that name (a leftover of a crash, which
        // recovery deletes) is never opened, let alone removed below.
        let file =
            OpenOptions::new().read(true).write(true).create_new(true).open(&temp).map_err(|e| Error::io(&path, &e))?;
        let made = (|| -> io::Result<MmapMut> {
            allocate(&file, total as u64)?;
            // SAFETY: the file is ours (just created with `create_new` under
            // a name no one else uses) and sized `total`; nothing else
            // truncates it while we live (the data directory is locked by
            // its broker). Changes by another process would be a broken
            // lock, not something we can defend here.
            let mut map = unsafe { MmapOptions::new().len(total).map_mut(&file)? };
            Header { base, capacity: capacity as u64, complete: None, generation: 0, slots: slots as u64 }
                .encode_fixed(&mut map[..HEADER_BYTES]);
            // `AlreadyExists` if the segment's file exists (another
            // publisher retrying the same roll made it): ours is dropped.
            fs::hard_link(&temp, &path)?;
            Ok(map)
        })();
        // Named as a segment now, or not at all: the temporary name goes
        // either way (a crash before this leaves it to recovery).
        if let Err(e) = fs::remove_file(&temp) {
            log::warn!("could not unlink temporary segment file {}: {e}", temp.display());
        }
        match made {
            Ok(map) => Ok(FileStorage::named(map, path)),
            Err(e) => Err(Error::io(path, &e)),
        }
    }

    /// Maps an existing segment file (whole), for recovery.
    pub(crate) fn open_existing(path: &Path) -> Result<FileStorage> {
        let io_err = |e: io::Error| Error::io(path, &e);
        let file = OpenOptions::new().read(true).write(true).open(path).map_err(io_err)?;
        let len = file.metadata().map_err(io_err)?.len();
        if len < HEADER_BYTES as u64 {
            return Err(Error::Corrupt {
                file: path.to_path_buf(),
                offset: len,
                reason: "file shorter than a segment header".into(),
            });
        }
        let len = usize::try_from(len).map_err(|_| Error::Corrupt {
            file: path.to_path_buf(),
            offset: 0,
            reason: "file larger than the address space".into(),
        })?;
        // SAFETY: as in `create`: the locked data directory's file, mapped
        // at its current length, which nobody changes while we hold it.
        let map = unsafe { MmapOptions::new().len(len).map_mut(&file) }.map_err(io_err)?;
        Ok(FileStorage::named(map, path.to_path_buf()))
    }

    fn named(map: MmapMut, path: PathBuf) -> FileStorage {
        // The fields only, not the tail word and the seal after them, which
        // another mapping of the file may be changing.
        let header = Header::decode(&map[..HEADER_END]).ok();
        let generation = header.map_or(0, |h| h.generation);
        let (capacity, slots) = match header {
            Some(h) if h.slots > 0 && h.file_len().is_some_and(|len| len <= map.len() as u64) => {
                (h.capacity as usize, h.slots as usize)
            }
            _ => (map.len() - HEADER_BYTES, 0),
        };
        FileStorage {
            map,
            capacity,
            slots,
            prepared: AtomicBool::new(false),
            name: Mutex::new(FileName { path, spare: false, generation }),
        }
    }

    /// The whole file: header page, record region, offset index.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// True if the file holds the offset index its header asks for (a file
    /// cut short by damage may not; recovery then extends it).
    pub(crate) fn has_index(&self) -> bool {
        self.slots > 0
    }

    /// The record region, for recovery to write skip records into before
    /// the file is shared (`recovery.rs`).
    pub(crate) fn region_mut(&mut self) -> &mut [u8] {
        &mut self.map[HEADER_BYTES..HEADER_BYTES + self.capacity]
    }

    /// Gives the file at `path`, whose header says it is `header`, its
    /// whole length again (zeros where it was cut short), so that it holds
    /// its offset index; for recovery, which keeps the records of a file
    /// damage shortened. The file must not be mapped meanwhile.
    pub(crate) fn restore_length(path: &Path, header: &Header) -> Result<()> {
        let len = header.file_len().ok_or_else(|| Error::Corrupt {
            file: path.to_path_buf(),
            offset: 0,
            reason: "segment header's sizes are out of range".into(),
        })?;
        let file = OpenOptions::new().write(true).open(path).map_err(|e| Error::io(path, &e))?;
        allocate(&file, len).map_err(|e| Error::io(path, &e))
    }

    /// The file's current name.
    pub(crate) fn path(&self) -> PathBuf {
        self.name.lock().path.clone()
    }

    fn io_error(&self, e: &io::Error) -> Error {
        Error::io(self.path(), e)
    }

    /// Flushes bytes `from..to` of the record region to stable storage
    /// (`msync(MS_SYNC)` of the pages holding them: on Linux a data sync of
    /// that range of the file).
    pub(crate) fn flush_region(&self, from: u64, to: u64) -> Result<()> {
        if to <= from {
            return Ok(());
        }
        let start = HEADER_BYTES + from as usize;
        let len = (to - from) as usize;
        self.map.flush_range(start, len).map_err(|e| self.io_error(&e))
    }

    /// Faults the record region's pages from byte `from` (rounded up to a
    /// page) to its end into the map, writable, once per use of the file:
    /// one `madvise(MADV_POPULATE_WRITE)` from the flusher's thread instead
    /// of a page fault per page taken by the publisher that first writes
    /// there. Those faults are dear for a file mapping: a fresh page is
    /// allocated, zeroed and put in the page cache, and a page written
    /// back (every page of a recycled file, after a sync round or the
    /// kernel's writeback) is write-protected, so its next write goes
    /// through the filesystem's `page_mkwrite`. Returns whether it did
    /// anything.
    ///
    /// It never changes a byte (the pages are only faulted in, not
    /// written), so it may run while the publisher writes the same pages.
    /// Pages at or past `from` that hold no record yet become dirty: they
    /// are written back with the records later put in them (a sync round
    /// flushes only the ranges records fill), or, with nothing put in them,
    /// at most once by the kernel. `from` must lie past the page of the
    /// last record already flushed (the caller passes the writer's byte
    /// tail), so no flushed page is dirtied and written twice.
    ///
    /// Best effort: on a kernel without `MADV_POPULATE_WRITE` (before
    /// 5.14), or on a failure (out of memory), the writer faults as before.
    pub(crate) fn prepare(&self, from: u64) -> bool {
        // Relaxed: a hint; at worst a region is populated twice (harmless)
        // or its faults are left to the writer.
        if self.prepared.swap(true, Ordering::Relaxed) {
            return false;
        }
        let page = HEADER_BYTES as u64;
        let start = HEADER_BYTES as u64 + from.div_ceil(page) * page;
        // The record region's pages only: the index's are written slot by
        // slot as records are committed, and faulting them all would make
        // every one dirty.
        let end = (HEADER_BYTES + self.capacity) as u64;
        if start >= end {
            return false;
        }
        #[cfg(target_os = "linux")]
        {
            // SAFETY: `start..end` lies inside our mapping (`start` is a
            // page boundary, as the map's start is); MADV_POPULATE_WRITE
            // faults pages in without changing their contents, so it races
            // with nothing (the publishers' writes keep their bytes).
            let rc = unsafe {
                libc::madvise(
                    self.map.as_ptr().add(start as usize).cast_mut().cast(),
                    (end - start) as usize,
                    libc::MADV_POPULATE_WRITE,
                )
            };
            if rc != 0 {
                // EINVAL from a kernel without it (one failed call per use
                // of a file), or out of memory: the writer faults as before.
                let e = io::Error::last_os_error();
                log::debug!("could not prefault segment file {}: {e}", self.path().display());
                return false;
            }
            true
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (start, end);
            false
        }
    }

    /// Writes the completion fields (`count` records filling `used` bytes)
    /// and, if `durable`, flushes the header page.
    pub(crate) fn mark_complete(&self, count: u64, used: u64, durable: bool) -> Result<()> {
        let base = le_u64(&self.map, BASE_AT);
        let mut fields = [0u8; COMPLETE_END - COUNT_AT];
        fields[..8].copy_from_slice(&count.to_le_bytes());
        fields[8..16].copy_from_slice(&used.to_le_bytes());
        fields[16..].copy_from_slice(&complete_crc(base, count, used).to_le_bytes());
        // SAFETY: the header page is written only here, in `create` and in
        // `reuse` (both before the storage is shared), and `mark_complete` has
        // one caller at a time: a sync round, which runs without the
        // partition's sync lock but only while it holds the `leader` flag
        // (one round at a time, `durable.rs`), or the open, which runs before
        // the log is shared. So no two writers meet; the record region, which
        // publishers write concurrently, starts a page later.
        unsafe {
            let dst = self.map.as_ptr().cast_mut().add(COUNT_AT);
            std::ptr::copy_nonoverlapping(fields.as_ptr(), dst, fields.len());
        }
        if durable {
            self.map.flush_range(0, HEADER_BYTES).map_err(|e| self.io_error(&e))?;
        }
        Ok(())
    }

    /// Takes the file of a segment retention has trimmed out of the
    /// partition: renames it to a spare (step 1 of recycling, in the module
    /// docs), or deletes it if it cannot be renamed. Readers still inside it
    /// keep reading through the mapping. Doing it now rather than when the
    /// last reader lets go keeps the directory exact (that waits for the
    /// epoch collector), and recovery never sees a trimmed segment.
    pub(crate) fn retire(&self) {
        let mut name = self.name.lock();
        let Some(base) = name.path.file_name().and_then(|n| n.to_str()).and_then(parse_segment_file_name) else {
            return;
        };
        let spare = name.path.with_file_name(spare_file_name(base));
        match fs::rename(&name.path, &spare) {
            Ok(()) => {
                log::debug!("trimmed segment file {} kept as {}", name.path.display(), spare.display());
                name.path = spare;
                name.spare = true;
                // Relaxed: a hint for the flusher (see `prepare`); nothing is
                // read through it. Its next use is prepared anew.
                self.prepared.store(false, Ordering::Relaxed);
            }
            // Gone with its directory (its topic was deleted): nothing to keep.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                log::debug!("trimmed segment file {} is gone already: {e}", name.path.display());
            }
            Err(e) => {
                log::warn!("could not rename trimmed segment file {}: {e}; deleting it", name.path.display());
                if let Err(e) = fs::remove_file(&name.path) {
                    log::warn!("could not delete trimmed segment file {}: {e}", name.path.display());
                }
            }
        }
    }

    /// True once the file is a spare (trimmed, renamed, not yet reused).
    pub(crate) fn is_spare(&self) -> bool {
        self.name.lock().spare
    }

    /// Makes this spare the segment file of the segment at `base` (step 3
    /// of recycling, in the module docs), flushing the new header first if
    /// `flush`. Fails with [`Error::Io`] (`AlreadyExists` if the segment's
    /// file exists) and leaves the file a spare then.
    pub(crate) fn reuse(&self, base: u64, flush: bool) -> Result<()> {
        let mut name = self.name.lock();
        debug_assert!(name.spare, "only a spare is reused");
        let old = Header::decode(&self.map[..HEADER_END]).map_err(|_| Error::Corrupt {
            file: name.path.clone(),
            offset: 0,
            reason: "spare segment file lost its header".into(),
        })?;
        let header =
            Header { base, capacity: old.capacity, complete: None, generation: old.generation + 1, slots: old.slots };
        let mut page = [0u8; HEADER_END];
        header.encode_fixed(&mut page);
        // SAFETY: a spare is owned by the pool alone (no segment, no reader
        // maps it through us); we write the header page's used fields and
        // the first frame of the region (a file holds at least a header and
        // one frame: `FRAME_LEN` is part of every region), which nothing
        // else reads or writes meanwhile. The zero frame says "no records
        // yet" until the first publisher writes there.
        unsafe {
            let start = self.map.as_ptr().cast_mut();
            std::ptr::copy_nonoverlapping(page.as_ptr(), start, HEADER_END);
            start.add(HEADER_BYTES).cast::<u64>().write(0);
        }
        if flush {
            self.map.flush_range(0, HEADER_BYTES + FRAME_LEN).map_err(|e| Error::io(&name.path, &e))?;
        }
        let path = name.path.with_file_name(segment_file_name(base));
        fs::hard_link(&name.path, &path).map_err(|e| Error::io(&path, &e))?;
        if let Err(e) = fs::remove_file(&name.path) {
            // The file is the segment's now; a leftover spare name is
            // unlinked by the next recovery.
            log::warn!("could not unlink spare name {}: {e}", name.path.display());
        }
        *name = FileName { path, spare: false, generation: header.generation };
        Ok(())
    }

    /// Writes a zero frame at byte `end` of the record region, where the
    /// segment's records end, if the file was recycled (a fresh file is
    /// zeros there already) and there is room.
    ///
    /// # Safety
    ///
    /// No one may write or read bytes `end..end + FRAME_LEN` of the region
    /// concurrently: they lie past every record the segment will ever hold.
    pub(crate) unsafe fn end_records(&self, end: u64) {
        let Ok(end) = usize::try_from(end) else { return };
        if self.name.lock().generation == 0 || end.saturating_add(FRAME_LEN) > self.capacity {
            return;
        }
        // SAFETY: in the region (checked just above), 8-aligned (records
        // start on 8-byte boundaries of a page-aligned region), and nobody
        // else's, by the caller's contract.
        unsafe { self.map.as_ptr().cast_mut().add(HEADER_BYTES + end).cast::<u64>().write(0) };
    }
}

impl Drop for FileStorage {
    fn drop(&mut self) {
        let name = self.name.lock();
        if name.spare {
            match fs::remove_file(&name.path) {
                Ok(()) => log::debug!("deleted spare segment file {}", name.path.display()),
                // Gone with its directory (its topic was deleted).
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    log::debug!("spare segment file {} is gone already", name.path.display())
                }
                Err(e) => log::warn!("could not delete spare segment file {}: {e}", name.path.display()),
            }
        }
    }
}

impl std::fmt::Debug for FileStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileStorage").field("name", &self.name).field("len", &self.map.len()).finish()
    }
}

// SAFETY: the record region starts a page into the fixed mapping (so it is
// page-aligned), and is `capacity` bytes long (the header's, when the file
// is long enough for it, else the rest of the mapping); its bytes are zeros
// (`create`: a preallocated file reads as zeros), recovered records that the
// recovering segment marks committed, or a recycled file's previous records,
// which no segment reads. Only the segment writes it, through its protocol
// (and `end_records`, past its last record); the header page before it and
// the offset index after it are not part of the region. `shared_state`'s
// words are in the header page and the index, inside the mapping when
// `slots` is non-zero (`named` checked the length), at aligned offsets of a
// page-aligned mapping; a segment over another mapping of the same file
// writes the same region, through the same protocol, its ranges handed out
// by the same tail word.
unsafe impl SegmentStorage for FileStorage {
    fn as_ptr(&self) -> NonNull<u8> {
        let start = self.map.as_ptr().wrapping_add(HEADER_BYTES).cast_mut();
        NonNull::new(start).expect("a mapping is never at address 0")
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn as_file(&self) -> Option<&dyn SegmentFile> {
        Some(self)
    }

    #[cfg(not(loom))]
    fn shared_state(&self) -> Option<SharedState> {
        if self.slots == 0 {
            return None;
        }
        let start = self.map.as_ptr().cast_mut();
        // The header page and the index lie inside the mapping (`named`
        // checked the file's length against the header), page-aligned
        // themselves, so the words at these offsets are aligned for their
        // types; any bits are a valid u64 or u32.
        let at = |offset: usize| NonNull::new(start.wrapping_add(offset)).expect("inside a mapping, so not 0");
        Some(SharedState {
            tail: at(TAIL_AT).cast(),
            sealed: at(SEALED_AT).cast(),
            slots: at(index_at(self.capacity as u64) as usize).cast(),
            slot_count: self.slots,
        })
    }
}

impl SegmentFile for FileStorage {
    fn flush_region(&self, from: u64, to: u64) -> Result<()> {
        FileStorage::flush_region(self, from, to)
    }

    fn mark_complete(&self, count: u64, used: u64, durable: bool) -> Result<()> {
        FileStorage::mark_complete(self, count, used, durable)
    }

    fn retire(&self) {
        FileStorage::retire(self)
    }

    fn is_spare(&self) -> bool {
        FileStorage::is_spare(self)
    }

    fn is_recycled(&self) -> bool {
        self.name.lock().generation > 0
    }

    fn reuse(&self, base: u64, flush: bool) -> Result<()> {
        FileStorage::reuse(self, base, flush)
    }

    unsafe fn end_records(&self, end: u64) {
        // SAFETY: the caller's contract is this one's.
        unsafe { FileStorage::end_records(self, end) }
    }

    fn prepare(&self, from: u64) -> bool {
        FileStorage::prepare(self, from)
    }
}

/// The bytes of a whole segment file: the header for `base` (with its
/// completion fields if `complete`) and `region` as its record region. For
/// the fuzz target, which writes arbitrary regions as segment files.
#[cfg(feature = "fuzzing")]
pub(crate) fn segment_file_bytes(base: u64, region: &[u8], complete: Option<(u64, u64)>, generation: u64) -> Vec<u8> {
    // A slot per frame's worth of bytes: the index never limits what the
    // region's records can be.
    let slots = (region.len() / FRAME_LEN).max(1) as u64;
    let capacity = region.len() as u64;
    let mut bytes = vec![0u8; file_len(capacity, slots) as usize];
    Header { base, capacity, complete: None, generation, slots }.encode_fixed(&mut bytes[..HEADER_BYTES]);
    if let Some((count, used)) = complete {
        bytes[COUNT_AT..COUNT_AT + 8].copy_from_slice(&count.to_le_bytes());
        bytes[USED_AT..USED_AT + 8].copy_from_slice(&used.to_le_bytes());
        bytes[COMPLETE_CRC_AT..COMPLETE_END].copy_from_slice(&complete_crc(base, count, used).to_le_bytes());
    }
    bytes[HEADER_BYTES..HEADER_BYTES + region.len()].copy_from_slice(region);
    bytes
}

/// Reserves `len` bytes of disk for `file`, so writes through the map never
/// find the disk full.
fn allocate(file: &File, len: u64) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        let len = libc::off_t::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: a plain syscall on a file descriptor we own, no pointers.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
        match rc {
            0 => Ok(()),
            // Filesystems without fallocate: fall back to sizing the file
            // (sparse; a full disk may then show at write time).
            libc::EOPNOTSUPP | libc::EINVAL => file.set_len(len as u64),
            errno => Err(io::Error::from_raw_os_error(errno)),
        }
    }
    #[cfg(not(unix))]
    {
        file.set_len(len)
    }
}

/// Fsyncs a directory, so the files created or removed in it are there
/// (or gone) after a machine crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| Error::io(dir, &e))
}

/// A durable log's segment files: where they go and what creating them owes.
#[derive(Debug)]
pub(crate) struct Files {
    pub(crate) dir: PathBuf,
    /// Sync rounds flush (every policy but `Fsync::Never`).
    pub(crate) flush: bool,
    /// A segment file was created since the directory was last synced.
    dir_dirty: AtomicBool,
    /// Test seam: how many of the next file creations fail as if the disk
    /// were full. Checked only when a segment file is created (a rollover),
    /// never on the append path.
    fail_creates: AtomicUsize,
    /// Test seam: how many of the next data syncs of a sync round fail as
    /// if `fdatasync` had returned `EIO`. Checked only by a round's leader,
    /// just before it flushes a file.
    fail_syncs: AtomicUsize,
    /// Called after each roll to a new segment: the broker's flusher then
    /// prepares the new file's pages (see [`FileStorage::prepare`]). A
    /// lock, not an atomic: set once by the flusher, read once per roll.
    roll_hook: Mutex<Option<RollHook>>,
}

/// What a durable log calls after it rolled to a new segment.
pub(crate) struct RollHook(pub(crate) Box<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for RollHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RollHook")
    }
}

impl Files {
    pub(crate) fn new(dir: PathBuf, flush: bool) -> Self {
        Files {
            dir,
            flush,
            dir_dirty: AtomicBool::new(false),
            fail_creates: AtomicUsize::new(0),
            fail_syncs: AtomicUsize::new(0),
            roll_hook: Mutex::new(None),
        }
    }

    /// Sets the hook [`Files::rolled`] calls, unless one is set; whether it
    /// was set now.
    pub(crate) fn set_roll_hook(&self, hook: impl FnOnce() -> RollHook) -> bool {
        let mut slot = self.roll_hook.lock();
        if slot.is_some() {
            return false;
        }
        *slot = Some(hook());
        true
    }

    /// A new segment was installed as the log's active one (on the roll's
    /// path, once per segment): calls the roll hook, if any.
    pub(crate) fn rolled(&self) {
        if let Some(hook) = &*self.roll_hook.lock() {
            (hook.0)();
        }
    }

    /// The test seam's failure for the segment file at `base`, if one is
    /// due (see `fail_creates`): checked before a file is made or reused.
    pub(crate) fn injected_failure(&self, base: u64) -> Result<()> {
        // Relaxed: a counter the RMW keeps exact; it guards no other data.
        if self.fail_creates.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok() {
            let e = std::io::Error::from_raw_os_error(libc::ENOSPC);
            return Err(Error::io(self.dir.join(segment_file_name(base)), &e));
        }
        Ok(())
    }

    /// Creates the segment file for `base` (see [`FileStorage::create`]).
    pub(crate) fn create(&self, base: u64, capacity: usize, slots: usize) -> Result<FileStorage> {
        let storage = FileStorage::create(&self.dir, base, capacity, slots)?;
        self.created();
        log::debug!("created segment file {}", storage.path().display());
        Ok(storage)
    }

    /// Notes that a segment file got its name in the directory (created,
    /// or a spare reused), for the next sync round.
    pub(crate) fn created(&self) {
        // Relaxed: read by the next sync round, which also reads the file's
        // segment through the directory's Acquire load.
        self.dir_dirty.store(true, Ordering::Relaxed);
    }

    pub(crate) fn fail_next_creates(&self, n: usize) {
        // Relaxed: a test knob set before the appends it affects.
        self.fail_creates.store(n, Ordering::Relaxed);
    }

    /// The test seam's failure for the data sync of `file`, if one is due
    /// (see `fail_syncs`): an `EIO`, as from a failing `fdatasync`.
    pub(crate) fn injected_sync_failure(&self, file: &Path) -> Result<()> {
        // Relaxed: a counter the RMW keeps exact; it guards no other data.
        if self.fail_syncs.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok() {
            return Err(Error::io(file, &std::io::Error::from_raw_os_error(libc::EIO)));
        }
        Ok(())
    }

    pub(crate) fn fail_next_syncs(&self, n: usize) {
        // Relaxed: a test knob set before the appends it affects.
        self.fail_syncs.store(n, Ordering::Relaxed);
    }

    /// Syncs the directory if files were created in it since the last time.
    pub(crate) fn sync_dir_if_dirty(&self) -> Result<()> {
        // Relaxed: see `create`.
        if self.dir_dirty.swap(false, Ordering::Relaxed)
            && let Err(e) = sync_dir(&self.dir)
        {
            self.dir_dirty.store(true, Ordering::Relaxed);
            return Err(e);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The frame checksum is the on-disk format: the fast path must give
    /// exactly the crate's value, for every length around the word size and
    /// the hand-over to the crate, and any offset.
    #[test]
    fn the_frame_checksum_matches_the_crates_for_every_length() {
        let bytes: Vec<u8> = (0..2000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for offset in [0u64, 1, 4095, 1 << 32, u64::MAX - 3] {
            for len in (0..=80).chain([87, 88, 767, 768, 769, 1024, 2000]) {
                for start in [0usize, 8, 3] {
                    let record = &bytes[start..start + len.min(bytes.len() - start)];
                    let want = frame_crc_portable(offset, record);
                    assert_eq!(frame_crc(offset, record), want, "offset {offset}, {} bytes at {start}", record.len());
                    assert_eq!(frame_for(offset, record), (u64::from(FRAME_MARK) << 32) | u64::from(want));
                }
            }
        }
        // And the value is the crate's CRC32C of the offset and the bytes as one run.
        let mut run = 42u64.to_le_bytes().to_vec();
        run.extend_from_slice(&bytes[..100]);
        assert_eq!(frame_crc(42, &bytes[..100]), crc32c::crc32c(&run));
    }

    /// Which of the file's pages are mapped in this process (the "present"
    /// bit of `/proc/self/pagemap`): the ones a write would not fault on
    /// first.
    #[cfg(target_os = "linux")]
    fn mapped_pages(storage: &FileStorage) -> Vec<bool> {
        use std::io::{Read, Seek, SeekFrom};
        let page = HEADER_BYTES;
        let first = storage.map.as_ptr() as usize / page;
        let pages = storage.map.len().div_ceil(page);
        let mut f = File::open("/proc/self/pagemap").unwrap();
        f.seek(SeekFrom::Start(first as u64 * 8)).unwrap();
        let mut raw = vec![0u8; pages * 8];
        f.read_exact(&mut raw).unwrap();
        raw.chunks_exact(8).map(|e| u64::from_le_bytes(e.try_into().unwrap()) >> 63 == 1).collect()
    }

    /// `prepare` maps the region's pages from the writer's position on (the
    /// publisher then takes no fault on them),
    /// leaves the pages before it alone, changes no byte, runs once per use
    /// of the file, and again once the file is a spare.
    #[test]
    #[cfg(target_os = "linux")]
    fn prepare_populates_the_pages_ahead_once_per_use_and_writes_nothing() {
        let dir = std::env::temp_dir().join(format!("rill-file-prepare-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let storage = FileStorage::create(&dir, 4096, 8 * HEADER_BYTES, 1024).unwrap();
        // The header page was written by `create`; the region is untouched.
        assert_eq!(mapped_pages(&storage)[1..9], [false; 8]);
        // The writer is 5000 bytes in: the region's first two pages are its.
        assert!(storage.prepare(5000));
        assert_eq!(
            mapped_pages(&storage)[1..],
            [false, false, true, true, true, true, true, true, false],
            "the index's page is left alone"
        );
        assert!(storage.bytes()[HEADER_BYTES..].iter().all(|&b| b == 0), "nothing written");
        assert!(!storage.prepare(0), "once per use");
        storage.retire();
        assert!(storage.is_spare());
        assert!(storage.prepare(0), "a spare's next use is prepared anew");
        assert_eq!(mapped_pages(&storage)[1..9], [true; 8]);
        assert!(storage.bytes()[HEADER_BYTES..].iter().all(|&b| b == 0), "nothing written");
        assert!(!storage.prepare(HEADER_BYTES as u64 * 8), "nothing left past the end");
        drop(storage);
        let _ = fs::remove_dir_all(&dir);
    }
}
