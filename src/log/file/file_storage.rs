//! One segment file, mapped: [`FileStorage`], the storage of a durable
//! segment (the file-backed `SegmentStorage`; the trait and the in-memory
//! storages are `log/storage.rs`). It makes, maps, completes, retires and
//! reuses the file whose format `format.rs` defines.
//!
//! The file is preallocated (`posix_fallocate`) to its full size when it is
//! created, so running out of disk is an error at segment creation (`Io` to
//! the publisher that rolled), never a `SIGBUS` on a page fault of the map.
//! It is made under a temporary name (`<base>.<pid>-<thread>.tmp`) and
//! linked under its segment's name once its header is written: the link
//! fails if that name exists, and a file found by its segment's name, by
//! any process, is whole. A crash before the link leaves the temporary
//! file, which recovery deletes. A file made ahead of its roll
//! ([`AheadFile`], on the process's prefault thread) has no name at all
//! until the roll writes its header and links it: the same rule, with
//! nothing left by a crash.
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
//! none ever do. Crash states are those listed under "Recycling" in
//! `file/mod.rs`, unchanged.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use memmap2::{MmapMut, MmapOptions};

use super::format::{
    BASE_AT, COMPLETE_END, COUNT_AT, FRAME_LEN, HEADER_BYTES, HEADER_END, Header, PREFIX_COUNT_AT, PREFIX_END,
    complete_crc, file_len, le_u64, parse_segment_file_name, prefix_fields, segment_file_name, spare_file_name,
    temp_file_name,
};
#[cfg(not(loom))]
use super::format::{SEALED_AT, TAIL_AT, index_at};
use crate::error::{Error, Result};
#[cfg(not(loom))]
use crate::log::storage::SharedState;
use crate::log::storage::{SegmentFile, SegmentStorage};
#[cfg(not(loom))]
use crate::sync::Arc;
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicBool, Ordering};

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
    /// The file's inode number, read when it was mapped: how a process
    /// sharing the partition tells that the name now holds another file
    /// (another process's compaction, "The swap across processes" in
    /// `log/compact.rs`). Processes mode only, which loom compiles out.
    #[cfg_attr(loom, allow(dead_code))]
    inode: u64,
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
    /// A compaction renamed a rebuilt file over this one's name
    /// ([`FileStorage::replace_with`]): `path` names that file now, not
    /// this one (which is unlinked, and still mapped by its readers).
    replaced: bool,
    /// In a directory shared by processes: this mapping's share of the
    /// file's read lock (see `map_locks.rs`), taken before anything of the
    /// file is read. Its drop is where a trimmed file is freed for reuse
    /// ("Recycling across processes" in `file/mod.rs`).
    #[cfg(not(loom))]
    hold: Option<(super::map_locks::MapHold, Arc<AtomicBool>)>,
    /// A free file claimed for reuse: its opener's write lock, turned into
    /// `hold` by [`FileStorage::reuse`] before the file gets its name.
    #[cfg(not(loom))]
    exclusive: Option<(Arc<super::map_locks::MapLocks>, Arc<AtomicBool>)>,
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
            Ok(map) => Ok(FileStorage::named(map, path, inode_of(&file))),
            Err(e) => Err(Error::io(path, &e)),
        }
    }

    /// Names `ahead`, a file made ahead for this partition, as the segment
    /// file for `base`: writes its header, then links it under the
    /// segment's name, so that, as with [`FileStorage::create`], a file
    /// found by that name is whole. On failure `ahead` comes back beside
    /// the error, still unnamed: `AlreadyExists` if the segment's file
    /// exists (another publisher retrying the same roll made it), when it
    /// may serve a later roll (its header is written again then).
    #[cfg(not(loom))]
    pub(crate) fn name_ahead(
        dir: &Path,
        mut ahead: AheadFile,
        base: u64,
        capacity: usize,
        slots: usize,
    ) -> std::result::Result<FileStorage, (AheadFile, Error)> {
        use std::os::fd::AsRawFd;
        use std::os::unix::ffi::OsStrExt;
        let path = dir.join(segment_file_name(base));
        debug_assert_eq!(ahead.map.len(), file_len(capacity as u64, slots as u64) as usize);
        Header { base, capacity: capacity as u64, complete: None, generation: 0, slots: slots as u64 }
            .encode_fixed(&mut ahead.map[..HEADER_BYTES]);
        // A file without a name is linked through its descriptor's entry
        // in /proc (`AT_EMPTY_PATH` would need a capability).
        let linked = (|| -> io::Result<()> {
            let from = std::ffi::CString::new(format!("/proc/self/fd/{}", ahead.file.as_raw_fd()))?;
            let to = std::ffi::CString::new(path.as_os_str().as_bytes())?;
            // SAFETY: two NUL-terminated paths that live across the call;
            // the system call reads them and keeps no pointer.
            let rc = unsafe {
                libc::linkat(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::AT_SYMLINK_FOLLOW)
            };
            if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
        })();
        match linked {
            Ok(()) => {
                let inode = inode_of(&ahead.file);
                Ok(FileStorage::named(ahead.map, path, inode))
            }
            Err(e) => Err((ahead, Error::io(path, &e))),
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
        Ok(FileStorage::named(map, path.to_path_buf(), inode_of(&file)))
    }

    fn named(map: MmapMut, path: PathBuf, inode: u64) -> FileStorage {
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
            name: Mutex::new(FileName {
                path,
                spare: false,
                generation,
                replaced: false,
                #[cfg(not(loom))]
                hold: None,
                #[cfg(not(loom))]
                exclusive: None,
            }),
            inode,
        }
    }

    /// In a directory shared by processes: counts this mapping in the
    /// file's read lock of `locks` (see `map_locks.rs`), unless it is
    /// counted already. False if the file is being freed or rewritten for
    /// reuse by another opener (it holds the write lock): the caller must
    /// not read it, and takes it for trimmed. `open`: its log's (see
    /// `Files::open`).
    #[cfg(not(loom))]
    pub(crate) fn hold(&self, locks: &Arc<super::map_locks::MapLocks>, open: &Arc<AtomicBool>) -> Result<bool> {
        let mut name = self.name.lock();
        if name.hold.is_some() {
            return Ok(true);
        }
        match locks.hold(self.inode)? {
            Some(hold) => {
                name.hold = Some((hold, open.clone()));
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Claims a free file of `dir` for reuse across processes (see
    /// "Recycling across processes" in `file/mod.rs`): the first of the
    /// free names whose file no opener maps, taken under its write lock in
    /// `locks`, if it is the shape of this partition's segments (`capacity`
    /// region bytes, `slots` index slots) and that name is its only one. It
    /// comes as a spare, for [`FileStorage::reuse`], which makes it a
    /// segment's. A free file of another shape, or one that is also a
    /// segment's (a crash between a reuse's link and its unlink), loses
    /// its free name here.
    #[cfg(not(loom))]
    pub(crate) fn claim_free(
        dir: &Path,
        locks: &Arc<super::map_locks::MapLocks>,
        open: &Arc<AtomicBool>,
        capacity: usize,
        slots: usize,
    ) -> Result<Option<FileStorage>> {
        use std::os::unix::fs::MetadataExt;
        let total = file_len(capacity as u64, slots as u64);
        for i in 0..super::format::FREE_FILES {
            let path = dir.join(super::format::free_file_name(i));
            let file = match OpenOptions::new().read(true).write(true).open(&path) {
                Ok(file) => file,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io(&path, &e)),
            };
            let meta = file.metadata().map_err(|e| Error::io(&path, &e))?;
            if !locks.try_exclusive(meta.ino())? {
                // Mapped: an opener that opened it by an older name and
                // has not yet seen it is not that segment's any more.
                continue;
            }
            // Under the write lock, looked at again: no one renames a free
            // file but its claimer, which holds this lock.
            let now = file.metadata().map_err(|e| Error::io(&path, &e))?;
            let named = inode_at(&path).map_err(|e| Error::io(&path, &e))? == Some(now.ino());
            let storage = if named && now.nlink() == 1 && now.len() == total {
                // SAFETY: as in `open_existing`; no other opener maps the
                // file (we hold its write lock) and it has no other name.
                let map = unsafe { MmapOptions::new().len(total as usize).map_mut(&file) }
                    .map_err(|e| Error::io(&path, &e))?;
                Some(FileStorage::named(map, path.clone(), now.ino()))
                    .filter(|s| s.capacity == capacity && s.slots == slots)
            } else {
                None
            };
            let Some(storage) = storage else {
                if named && let Err(e) = fs::remove_file(&path) {
                    log::warn!("could not unlink free segment file {}: {e}", path.display());
                }
                locks.unlock_exclusive(now.ino());
                continue;
            };
            {
                let mut name = storage.name.lock();
                name.spare = true;
                name.exclusive = Some((locks.clone(), open.clone()));
            }
            return Ok(Some(storage));
        }
        Ok(None)
    }

    /// The mapped file's inode number (0 if it could not be read).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn inode(&self) -> u64 {
        self.inode
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
    /// `madvise(MADV_POPULATE_WRITE)` from the flusher's thread, in chunks
    /// (`storage::populate`), instead of a page fault per page taken by the
    /// publisher that first writes there. Those faults are dear for a file mapping: a fresh page is
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
        // In chunks, as every prefault is (`storage::populate`): a roll
        // that maps the next file meanwhile waits for one chunk at most.
        // `start` is a page boundary inside our mapping (the map's start is
        // one), and `end` its region's end.
        #[cfg(not(loom))]
        {
            let at = self.map.as_ptr().wrapping_add(start as usize).cast_mut();
            let Some(at) = std::ptr::NonNull::new(at) else { return false };
            crate::log::storage::populate(at, (end - start) as usize)
        }
        #[cfg(loom)]
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
        // SAFETY: the completion fields are written only here, in `create`
        // and in `reuse` (both before the storage is shared; `mark_prefix`
        // writes other bytes of the page), and `mark_complete` has
        // one caller at a time: a sync round, which runs without the
        // partition's sync lock but only while it holds the `leader` flag
        // (one round at a time, `durable.rs`), or the open, which runs before
        // the log is shared. So no two writers meet; the record region, which
        // publishers write concurrently, starts a page later.
        unsafe { self.write_header(COUNT_AT, &fields, durable) }
    }

    /// Writes the checked prefix: the first `count` records, filling `used`
    /// bytes, are whole (see `format.rs`); flushes the header if `durable`.
    ///
    /// # Safety
    ///
    /// No one else writes the prefix's fields meanwhile (see
    /// [`SegmentFile::mark_prefix`]).
    pub(crate) unsafe fn mark_prefix(&self, count: u64, used: u64, durable: bool) -> Result<()> {
        let fields = prefix_fields(le_u64(&self.map, BASE_AT), count, used);
        // SAFETY: the prefix's bytes lie in the header page, apart from the
        // fixed and completion fields and from the tail word's and the
        // seal's lines; the caller promises no other writer, and readers
        // of the header (recovery, the next open) run in another life of
        // the log. The record region starts a page later.
        unsafe { self.write_header(PREFIX_COUNT_AT, &fields, durable) }
    }

    /// Writes `fields` at byte `at` of the header page, then flushes the
    /// page if `durable`.
    ///
    /// # Safety
    ///
    /// `at + fields.len()` lies within the header's fields, and no one else
    /// writes those bytes meanwhile (the callers' comments say why).
    unsafe fn write_header(&self, at: usize, fields: &[u8], durable: bool) -> Result<()> {
        debug_assert!(at + fields.len() <= PREFIX_END);
        // SAFETY: inside the mapped header page (the caller's bound), which
        // is ours to write at those bytes (the caller's promise).
        unsafe {
            let dst = self.map.as_ptr().cast_mut().add(at);
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
        if name.replaced {
            // Its name is a rebuilt file's that a compaction made to replace
            // it and could not install (this segment was trimmed first):
            // that file goes, as this one would have (see "Trimmed
            // meanwhile" in `rebuild.rs`). Never a spare: this file is
            // unlinked, so it cannot be linked under a new name again.
            match fs::remove_file(&name.path) {
                Ok(()) => log::debug!("trimmed segment {}: deleted its rebuilt file", name.path.display()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => log::warn!("could not delete trimmed segment file {}: {e}", name.path.display()),
            }
            return;
        }
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

    /// Renames the rebuilt file at `rebuilt` over this file's name, unless
    /// this file was trimmed first (it is a spare then, or, in a partition
    /// shared by processes, its name is gone: `Ok(None)`, and `rebuilt` is
    /// left as it is); returns the name, which the rebuilt file's storage
    /// takes ([`FileStorage::rename_to`]). Under the name's lock, so that a
    /// trim's [`FileStorage::retire`] in this process comes wholly before
    /// (and this gives up) or wholly after (and deletes the rebuilt file,
    /// which is never installed then). See "The durable swap" in
    /// `rebuild.rs`.
    ///
    /// The rename is an exchange (`renameat2(RENAME_EXCHANGE)`), which
    /// fails if the name is gone: a trim in another process renames the
    /// name away without this process's lock, and a plain rename would then
    /// bring a trimmed segment's file back. The old file, under the
    /// temporary name after the exchange, is unlinked (a crash first leaves
    /// it to recovery, as any temporary file). On a file system without
    /// the exchange it is a plain rename.
    pub(crate) fn replace_with(&self, rebuilt: &Path) -> Result<Option<PathBuf>> {
        let mut name = self.name.lock();
        if name.spare {
            return Ok(None);
        }
        match exchange(rebuilt, &name.path) {
            Ok(()) => {
                if let Err(e) = fs::remove_file(rebuilt) {
                    log::warn!("could not unlink replaced segment file {}: {e}", rebuilt.display());
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) => {
                fs::rename(rebuilt, &name.path).map_err(|e| Error::io(&name.path, &e))?;
            }
            Err(e) => return Err(Error::io(&name.path, &e)),
        }
        name.replaced = true;
        Ok(Some(name.path.clone()))
    }

    /// Notes that the file was renamed to `path` (by
    /// [`FileStorage::replace_with`] on the storage it replaced), before
    /// the storage is shared.
    pub(crate) fn rename_to(&self, path: PathBuf) {
        self.name.lock().path = path;
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
        // Through the checked prefix's fields: zeros, none for the new base.
        let mut page = [0u8; PREFIX_END];
        header.encode_fixed(&mut page[..HEADER_END]);
        // SAFETY: a spare is owned by the pool alone (no segment, no reader
        // maps it through us); we write the header page's used fields and
        // the first frame of the region (a file holds at least a header and
        // one frame: `FRAME_LEN` is part of every region), which nothing
        // else reads or writes meanwhile. The zero frame says "no records
        // yet" until the first publisher writes there.
        unsafe {
            let start = self.map.as_ptr().cast_mut();
            std::ptr::copy_nonoverlapping(page.as_ptr(), start, PREFIX_END);
            start.add(HEADER_BYTES).cast::<u64>().write(0);
        }
        if flush {
            self.map.flush_range(0, HEADER_BYTES + FRAME_LEN).map_err(|e| Error::io(&name.path, &e))?;
        }
        let path = name.path.with_file_name(segment_file_name(base));
        // A free file claimed across processes: readable by every opener
        // from now on, and by name once linked.
        #[cfg(not(loom))]
        if let Some((locks, open)) = name.exclusive.take() {
            name.hold = Some((locks.downgrade(self.inode)?, open));
        }
        fs::hard_link(&name.path, &path).map_err(|e| Error::io(&path, &e))?;
        if let Err(e) = fs::remove_file(&name.path) {
            // The file is the segment's now; a leftover spare name is
            // unlinked by the next recovery.
            log::warn!("could not unlink spare name {}: {e}", name.path.display());
        }
        name.path = path;
        name.spare = false;
        name.generation = header.generation;
        name.replaced = false;
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
        #[cfg_attr(loom, allow(unused_mut))]
        let mut name = self.name.lock();
        #[cfg(not(loom))]
        if let Some((locks, _)) = name.exclusive.take() {
            // A free file claimed and not reused: it stays free, by name.
            locks.unlock_exclusive(self.inode);
            return;
        }
        #[cfg(not(loom))]
        if let Some((mut hold, open)) = name.hold.take() {
            // Shared by processes: names are the last mapper's to change.
            // Acquire: pairs with the Release in `Files::closed`.
            let open = open.load(Ordering::Acquire);
            // Its base by its name, not its header: a dropped file is never
            // read (someone may have cut it short). A free name (a claimed
            // file whose reuse failed) is no trimmed segment's.
            let base = name.path.file_name().and_then(|n| n.to_str()).and_then(|n| {
                super::format::parse_segment_file_name(n).or_else(|| super::format::parse_spare_file_name(n))
            });
            if hold.release()
                && let Some(base) = base
            {
                free_if_last(&name.path, base, self.inode, hold.locks(), open);
            }
            return;
        }
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

    unsafe fn mark_prefix(&self, count: u64, used: u64, durable: bool) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { FileStorage::mark_prefix(self, count, used, durable) }
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

    fn replace_with(&self, rebuilt: &Path) -> Result<Option<PathBuf>> {
        FileStorage::replace_with(self, rebuilt)
    }

    fn inode(&self) -> u64 {
        FileStorage::inode(self)
    }

    fn name(&self) -> PathBuf {
        self.name.lock().path.clone()
    }

    unsafe fn end_records(&self, end: u64) {
        // SAFETY: the caller's contract is this one's.
        unsafe { FileStorage::end_records(self, end) }
    }

    fn prepare(&self, from: u64) -> bool {
        FileStorage::prepare(self, from)
    }
}

/// `file`'s inode number (0 if it cannot be read: a process sharing the
/// partition then takes the name for another file once, harmlessly).
fn inode_of(file: &File) -> u64 {
    use std::os::unix::fs::MetadataExt;
    file.metadata().map_or(0, |m| m.ino())
}

/// In a directory shared by processes, once the opener of `locks` let go
/// of its last mapping of the file `inode` of the segment at `base` (whose
/// name was, or is, `path`): if the segment was trimmed (its spare name is
/// this file's) and no other opener maps the file, frees it: links it
/// under the first free name not taken, or deletes it if all are (see
/// "Recycling across processes" in `file/mod.rs`). If its log is no longer
/// `open`, deletes it (unlinks the spare name) whoever maps it: see
/// `Files::open`. Best effort: a failure leaves the spare name to the next
/// opener's recovery.
#[cfg(not(loom))]
fn free_if_last(path: &Path, base: u64, inode: u64, locks: &Arc<super::map_locks::MapLocks>, open: bool) {
    let spare = path.with_file_name(spare_file_name(base));
    if !matches!(inode_at(&spare), Ok(Some(i)) if i == inode) {
        // Not trimmed (a log closing, a follower's extra mapping), or its
        // name went to another file (compaction's): not ours to free.
        return;
    }
    if !open {
        // A mapping keeps the file for whoever reads it; no one frees it.
        if let Err(e) = fs::remove_file(&spare)
            && e.kind() != io::ErrorKind::NotFound
        {
            log::warn!("could not delete spare segment file {}: {e}", spare.display());
        }
        return;
    }
    match locks.try_exclusive(inode) {
        Ok(true) => {}
        // Another opener maps it: its last mapping frees it.
        Ok(false) => return,
        Err(e) => return log::warn!("could not lock trimmed segment file {}: {e}", spare.display()),
    }
    let mut freed = false;
    for i in 0..super::format::FREE_FILES {
        let free = path.with_file_name(super::format::free_file_name(i));
        match fs::hard_link(&spare, &free) {
            Ok(()) => {
                freed = true;
                log::debug!("trimmed segment file {} freed as {}", spare.display(), free.display());
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            // Its spare name is gone: a recovery of the directory, opened
            // again after this log closed, deleted it.
            Err(e) if e.kind() == io::ErrorKind::NotFound => break,
            Err(e) => {
                log::warn!("could not free trimmed segment file {} as {}: {e}", spare.display(), free.display());
                break;
            }
        }
    }
    match fs::remove_file(&spare) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => log::warn!("could not unlink spare segment file {}: {e}", spare.display()),
        Ok(()) if !freed => log::debug!("deleted spare segment file {} (no free name left)", spare.display()),
        Ok(()) => {}
    }
    locks.unlock_exclusive(inode);
}

/// A segment file made ahead of the roll that will use it (see "A spare
/// made ahead" in `prefault.rs`): made without a name (`O_TMPFILE`) in the
/// partition's directory, allocated and its first part faulted in off the
/// publishers' path, and named by [`FileStorage::name_ahead`] once a roll
/// writes its header. A crash, or a log dropped before it is used, leaves
/// nothing behind: the kernel frees a file without a name when its last
/// descriptor and mapping go, so recovery never sees one.
#[cfg(not(loom))]
pub(crate) struct AheadFile {
    file: File,
    map: MmapMut,
}

#[cfg(not(loom))]
impl std::fmt::Debug for AheadFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AheadFile").field("len", &self.map.len()).finish()
    }
}

#[cfg(not(loom))]
impl AheadFile {
    /// Makes one in `dir`, for segments of `capacity` region bytes and
    /// `slots` index slots, and faults in its header and the first
    /// `faulted` bytes of its region (the rest is faulted ahead of its
    /// writers once a segment is over it). `Unsupported` (or the `open`
    /// error of an older kernel) where the filesystem makes no files
    /// without a name.
    pub(crate) fn make(dir: &Path, capacity: usize, slots: usize, faulted: usize) -> io::Result<AheadFile> {
        use std::os::unix::fs::OpenOptionsExt;
        let total = file_len(capacity as u64, slots as u64) as usize;
        let file = OpenOptions::new().read(true).write(true).custom_flags(libc::O_TMPFILE).mode(0o666).open(dir)?;
        allocate(&file, total as u64)?;
        // SAFETY: the file has no name, so no one else can open it, let
        // alone truncate it; it is sized `total`.
        let map = unsafe { MmapOptions::new().len(total).map_mut(&file)? };
        let ahead = AheadFile { file, map };
        if let Some(ptr) = NonNull::new(ahead.map.as_ptr().cast_mut()) {
            crate::log::storage::populate(ptr, (HEADER_BYTES + faulted).min(total));
        }
        Ok(ahead)
    }

    /// Whether `e`, from [`AheadFile::make`], says the filesystem cannot
    /// make a file without a name (so asking again is pointless).
    pub(crate) fn unsupported(e: &io::Error) -> bool {
        matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL))
    }
}

/// The inode number of the file named `path` now; `None` if no file has
/// that name.
#[cfg(not(loom))]
pub(crate) fn inode_at(path: &Path) -> io::Result<Option<u64>> {
    use std::os::unix::fs::MetadataExt;
    match fs::metadata(path) {
        Ok(m) => Ok(Some(m.ino())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Swaps the files named `a` and `b` atomically (`renameat2` with
/// `RENAME_EXCHANGE`): `NotFound` if either name is gone, `EINVAL` where
/// the file system cannot.
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput));
    let (a, b) = (c(a)?, c(b)?);
    // SAFETY: two NUL-terminated paths that live across the call; the
    // system call reads them and keeps no pointer.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Reserves `len` bytes of disk for `file`, so writes through the map never
/// find the disk full.
pub(super) fn allocate(file: &File, len: u64) -> io::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
