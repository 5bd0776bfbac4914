//! The segment file: how a durable segment lies on disk, and how its file
//! lives (made, mapped, completed, trimmed, recycled).
//!
//! A durable partition is a directory of segment files, one per segment,
//! each named by the offset of its first record. A file is a header page and
//! the segment's record region, mapped shared (`MAP_SHARED`): publishers copy
//! records straight into the page cache, exactly as they copy into anonymous
//! memory for an in-memory log.
//!
//! The parts: `format.rs` (the format: the header, the frames, where the
//! reservation state lies, the files' names), `file_storage.rs`
//! ([`FileStorage`]: one file, mapped, made and recycled; not to be taken
//! for `log/storage.rs`, the trait every segment's storage implements and
//! the in-memory storages), `files.rs` ([`Files`]: a partition's files
//! as a whole, and the test seams that fail their creation and syncs) and
//! `rebuild.rs` (a compaction's rebuilt segment file, and how it replaces
//! the old one's, crash by crash).
//! They share one invariant, what bytes a file may hold at each moment of
//! its life, listed under "Recycling" below for every crash state, which
//! recovery (`recovery.rs`) depends on.
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
//! A crash at each step of a recycling leaves: before step 1's rename, the
//! trimmed segment as the oldest one (retention trims it again); after it,
//! or anywhere in steps 2 and 3 before the link, a spare file, deleted by
//! recovery; between the link and the unlink, the new segment file (its new
//! header written first, and on disk first if the policy flushes) and a
//! spare name for the same file, which recovery unlinks. With `Never`, a
//! *machine* crash may persist the link before the header page, as it may
//! persist any metadata before any data with that policy: recovery then
//! finds a header naming another base than the file name, and reports it.

//!
//! # Recycling across processes
//!
//! A partition shared by processes ([`crate::log::Sharing::Processes`])
//! keeps no trimmed file in any process's pool: a trimmed file may still
//! be mapped, and read, by another process, whose retention trims it only
//! when that process rolls too. Its trimmed files are recycled through the
//! directory instead, under the map locks of `map_locks.rs` (every mapping
//! holds its file's read lock; only a file no one maps can be write-locked):
//!
//! 1. **Trim.** As above: the first process to trim the segment renames its
//!    file to `<base>.spare` (the others find its name gone). Readers
//!    inside it, in any process, keep reading through their mappings.
//! 2. **Free.** Every process lets go of its mappings of a trimmed file on
//!    its prefault thread. The one whose last mapping goes, and which then
//!    gets the file's write lock (so no one else maps it), links it under
//!    the first free name not taken (`<i>.free`, [`format::FREE_FILES`] of
//!    them), unlinks the spare name and lets the lock go; with every free
//!    name taken it unlinks the spare name alone, and the file is deleted.
//!    One that cannot get the lock leaves it to the others: the last
//!    mapping to go, in whatever process, finds no one else and frees it.
//! 3. **Reuse.** A roll, in whatever process, first tries the free names:
//!    opens one, takes its write lock without waiting (refused: someone who
//!    opened it by an older name and has not yet looked maps it; the next
//!    free name is tried), checks that the name is still this file's, its
//!    only one, and the file of this partition's shape, maps it, resets
//!    its tail word, seal and the index slots its seal counts, and reuses it
//!    as step 3 above (new header, first frame zeroed, flushed, linked
//!    under `<new base>.seg`, free name unlinked), turning the write lock
//!    into its own mapping's read lock just before the link. The pages are
//!    the page cache's already: the roll maps them instead of allocating,
//!    zeroing and, on a trim, freeing 4 MiB.
//!
//! **Why no one reads a rewritten file.** A file is written for a new use
//! only under its write lock, granted only while no opener holds its read
//! lock, and every mapping takes the read lock before it reads a byte. An
//! opener that opens a segment by name just as it is trimmed, freed and
//! reused (`open_shared_segment` in `log/dir.rs`) either is refused the
//! read lock (the file is being freed or rewritten: to it the segment is
//! trimmed), or gets it once the file is another segment's, whose header
//! names another base while its old name is gone: trimmed too. The free
//! name is never a segment's, so no reader looks for one.
//!
//! **Crash states.** The kernel lets a dead process's locks go. A death
//! before the free step's link leaves the spare name (recovery deletes
//! it; a live partition keeps it until then, as it kept any spare before);
//! between the free link and the unlink of the spare name, both names,
//! which a later claim's check of the link count finds (it unlinks the
//! free name and moves on) and recovery deletes; during a reuse before its
//! link, a free file whose header may be half new, which the next claim
//! rewrites whole; between the link and the unlink, a segment file that is
//! also free by name, which the next claim finds by its link count (and
//! only while no one maps the segment, as its write lock says) and unlinks
//! the free name of. A process that dies while it maps a trimmed file
//! frees nothing, and the others may have let go of it first: its spare
//! name stays, as one a crash left always did. Recovery (at the
//! directory's first open, when no process has it) deletes every spare and
//! free file.
//!
//! **A log closed while its files are let go.** A process's mappings are
//! let go after its log closes (the epoch, then the prefault thread), and
//! a trimmed file let go after the close is deleted, not freed: the
//! directory may be opened again meanwhile, in this process, and
//! recovered. A free step that had begun before the close finishes, so a
//! free file may still appear just after such a recovery: at most
//! [`format::FREE_FILES`] of them, reused by a roll of a shared log, or
//! deleted by the next recovery.

mod file_storage;
mod files;
mod format;
mod lock_file;
#[cfg(not(loom))]
mod map_locks;
mod rebuild;

#[cfg(not(loom))]
pub(crate) use file_storage::AheadFile;
pub(crate) use file_storage::FileStorage;
#[cfg(not(loom))]
pub(crate) use file_storage::inode_at;
pub(crate) use files::{Files, RollHook, sync_dir};
#[cfg(all(test, not(loom)))]
pub(crate) use format::FREE_FILES;
#[cfg(not(loom))]
pub(crate) use format::HEADER_END;
#[cfg(feature = "fuzzing")]
pub(crate) use format::segment_file_bytes;
#[cfg(test)]
pub(crate) use format::spare_file_name;
pub(crate) use format::{
    FRAME_LEN, HEADER_BYTES, Header, HeaderError, SLOT_BYTES, VERSION, VERSION_AT, check_frame, frame_for,
    has_frame_mark, index_at, is_free_file_name, is_spare_file_name, is_temp_file_name, parse_segment_file_name,
    segment_file_name,
};
#[cfg(not(loom))]
pub(crate) use map_locks::MapLocks;
/// Loom models share no directory between processes: no locks to hold.
#[cfg(loom)]
pub(crate) enum MapLocks {}
pub(crate) use lock_file::{LockFile, open_existing_lock_file, open_lock_file};
pub(crate) use rebuild::{Rebuilt, write as write_rebuilt};
