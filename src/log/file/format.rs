//! The segment file format: how a durable segment lies on disk.
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
//! After the fixed fields, and apart from them, the *checked prefix*: a
//! record count (u64), the bytes they fill (u64) and a CRC32C of those and
//! the base (u32, with a seed of its own), at `PREFIX_COUNT_AT`. An
//! incomplete file may carry it: its first `count` records were all whole
//! when its log last opened (a resumed file, "Resuming the last file" in
//! `recovery.rs`) or closed cleanly, so damage among them is damage, as
//! in a complete file, never a crash's hole or torn tail; what follows them
//! is judged as in any incomplete file. Written by the open (before the log
//! is shared) and by a clean close of a log of one process (when no handle
//! is left); absent (zeros, or not checking: a recycling rewrites the base)
//! otherwise. A build that does not know it reads the file as before.
//!
//! Every record is preceded by an 8-byte *frame*: the CRC32C of the record's
//! offset (u64, little-endian) followed by its bytes (header and body,
//! padding excluded), and `FRAME_MARK`. Mixing in the offset means a record
//! found at the wrong place (a stale page, a recycled file) never checks. The
//! publisher writes the record, then the frame with one aligned 8-byte store,
//! then commits the slot: a frame of zeros is "nothing here", and in a
//! process crash the frame is either all there or not at all.
//!
//! This file holds the format alone: the layout's constants, the header's
//! encoding and checks, the frame's checksum and the files' names. Mapping
//! a file is `file_storage.rs`'s; a partition's files are `files.rs`'s.

use crate::sync::thread;

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
pub(super) const BASE_AT: usize = 16;
/// `u64` size of the record region.
const CAPACITY_AT: usize = 24;
/// `u64` records in the complete segment (completion field).
pub(super) const COUNT_AT: usize = 32;
/// `u64` bytes those records fill, frames included (completion field).
const USED_AT: usize = 40;
/// `u32` CRC32C of base, count and used bytes (completion field).
const COMPLETE_CRC_AT: usize = 48;
/// End of the completion fields.
pub(super) const COMPLETE_END: usize = 52;
/// `u64` times the file has been recycled (fixed field).
const GENERATION_AT: usize = 52;
/// `u64` slots of the offset index after the record region (fixed field).
const SLOTS_AT: usize = 60;
/// End of the fixed and completion fields; the page holds nothing else but
/// the tail word and the seal.
pub(crate) const HEADER_END: usize = 68;
/// `u64` records of the checked prefix (see the module docs).
pub(super) const PREFIX_COUNT_AT: usize = 72;
/// `u64` bytes those records fill, frames included.
const PREFIX_USED_AT: usize = 80;
/// `u32` CRC32C of base, count and used bytes, seeded apart from the
/// completion fields' ([`prefix_crc`]).
const PREFIX_CRC_AT: usize = 88;
/// End of the checked prefix's fields.
pub(crate) const PREFIX_END: usize = 92;
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
const _: () = assert!(PREFIX_COUNT_AT >= HEADER_END && PREFIX_USED_AT == PREFIX_COUNT_AT + 8);
const _: () = assert!(PREFIX_CRC_AT == PREFIX_USED_AT + 8 && PREFIX_END == PREFIX_CRC_AT + 4 && PREFIX_END <= TAIL_AT);

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
/// Extension of a free file ([`free_file_name`]).
const FREE_EXT: &str = "free";

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

/// How many trimmed segment files a partition shared by processes keeps
/// for reuse, free, under names of their own ([`free_file_name`]; see
/// "Recycling across processes" in `file/mod.rs`): two, as a partition of
/// one process keeps two spares (`SPARE_SEGMENTS`), so that a roll finds
/// one while the next is still being let go of.
#[cfg(not(loom))]
pub(crate) const FREE_FILES: u64 = 2;

/// The name of the `i`-th free file of a partition shared by processes:
/// `<i>.free`, never a segment's or a spare's.
#[cfg(not(loom))]
pub(crate) fn free_file_name(i: u64) -> String {
    format!("{i:020}.{FREE_EXT}")
}

/// True if `name` is a free file's ([`free_file_name`]): a trimmed file
/// kept for reuse, which is no part of the partition (recovery deletes it).
pub(crate) fn is_free_file_name(name: &str) -> bool {
    parse_numbered(name, FREE_EXT).is_some()
}

/// The name under which this thread makes the segment file for `base`
/// before it links it under its own name ([`FileStorage::create`]):
/// `<base>.<pid>-<thread>.tmp`, so publishers racing to make the same
/// segment (a stalled roll's retries) never share one. A thread makes one
/// file at a time, and recovery deletes what a crash left before the next
/// process (which may reuse the pid) makes any.
pub(super) fn temp_file_name(base: u64) -> String {
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
    parse_spare_file_name(name).is_some()
}

/// The base offset of the segment a spare file's name was trimmed from.
pub(crate) fn parse_spare_file_name(name: &str) -> Option<u64> {
    parse_numbered(name, SPARE_EXT)
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

pub(super) fn le_u64(b: &[u8], at: usize) -> u64 {
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
    pub(super) fn encode_fixed(&self, page: &mut [u8]) {
        page[..VERSION_AT].copy_from_slice(&MAGIC);
        page[VERSION_AT..VERSION_AT + 4].copy_from_slice(&VERSION.to_le_bytes());
        page[BASE_AT..BASE_AT + 8].copy_from_slice(&self.base.to_le_bytes());
        page[CAPACITY_AT..CAPACITY_AT + 8].copy_from_slice(&self.capacity.to_le_bytes());
        page[GENERATION_AT..GENERATION_AT + 8].copy_from_slice(&self.generation.to_le_bytes());
        page[SLOTS_AT..SLOTS_AT + 8].copy_from_slice(&self.slots.to_le_bytes());
        let crc = fixed_crc(page);
        page[HEADER_CRC_AT..HEADER_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    }

    /// Writes the header page of a file made whole at once (a compaction's
    /// rebuilt segment, `rebuild.rs`): the fixed fields and, since the
    /// file holds all its records from the start, the completion fields
    /// (`count` records filling `used` bytes).
    pub(super) fn encode_complete(&self, page: &mut [u8], count: u64, used: u64) {
        self.encode_fixed(page);
        page[COUNT_AT..COUNT_AT + 8].copy_from_slice(&count.to_le_bytes());
        page[USED_AT..USED_AT + 8].copy_from_slice(&used.to_le_bytes());
        page[COMPLETE_CRC_AT..COMPLETE_END].copy_from_slice(&complete_crc(self.base, count, used).to_le_bytes());
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

    /// The checked prefix of the file whose header page is `page` (this
    /// header's), if it carries one for this base: `(records, used bytes)`
    /// (see the module docs).
    pub(crate) fn checked_prefix(&self, page: &[u8]) -> Option<(u64, u64)> {
        if page.len() < PREFIX_END {
            return None;
        }
        let (count, used) = (le_u64(page, PREFIX_COUNT_AT), le_u64(page, PREFIX_USED_AT));
        (le_u32(page, PREFIX_CRC_AT) == prefix_crc(self.base, count, used) && used <= self.capacity)
            .then_some((count, used))
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
pub(super) fn complete_crc(base: u64, count: u64, used: u64) -> u32 {
    let mut b = [0u8; 24];
    b[..8].copy_from_slice(&base.to_le_bytes());
    b[8..16].copy_from_slice(&count.to_le_bytes());
    b[16..].copy_from_slice(&used.to_le_bytes());
    // A constant seed so an all-zero completion of base 0 does not check either.
    crc32c::crc32c_append(0x5EA1_ED00, &b)
}

/// The checked prefix's fields for `base`: `count` records filling `used`
/// bytes, and their CRC (see the module docs).
pub(super) fn prefix_fields(base: u64, count: u64, used: u64) -> [u8; PREFIX_END - PREFIX_COUNT_AT] {
    let mut fields = [0u8; PREFIX_END - PREFIX_COUNT_AT];
    fields[..8].copy_from_slice(&count.to_le_bytes());
    fields[8..16].copy_from_slice(&used.to_le_bytes());
    fields[16..].copy_from_slice(&prefix_crc(base, count, used).to_le_bytes());
    fields
}

/// CRC32C of the checked prefix's fields: as [`complete_crc`], from a seed
/// of its own, so a completion's fields never check as a prefix.
fn prefix_crc(base: u64, count: u64, used: u64) -> u32 {
    let mut b = [0u8; 24];
    b[..8].copy_from_slice(&base.to_le_bytes());
    b[8..16].copy_from_slice(&count.to_le_bytes());
    b[16..].copy_from_slice(&used.to_le_bytes());
    crc32c::crc32c_append(0x9E7C_4EC0, &b)
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
}
