//! A durable partition's segment files as a whole: [`Files`], where they
//! go and what making them owes (the directory's sync, the roll hook that
//! wakes the broker's preparing thread), with the test seams that fail a
//! creation or a sync as a full or failing disk would.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::file_storage::FileStorage;
use super::format::segment_file_name;
use crate::error::{Error, Result};
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

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
    /// Shared by processes: this opener's locks on the files it maps (see
    /// `map_locks.rs`), which make reuse across processes safe.
    #[cfg(not(loom))]
    maps: Option<crate::sync::Arc<super::map_locks::MapLocks>>,
    /// Shared by processes: the log is open. Its files let go after it
    /// closed (by the epoch, then the prefault thread) are deleted rather
    /// than freed: a directory opened again in this process, or another
    /// way, is recovered meanwhile, and must not get a free file after its
    /// recovery deleted the others.
    #[cfg(not(loom))]
    open: crate::sync::Arc<AtomicBool>,
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
            #[cfg(not(loom))]
            maps: None,
            #[cfg(not(loom))]
            open: crate::sync::Arc::new(AtomicBool::new(true)),
        }
    }

    /// The log closed: its files let go from now on are deleted, not freed
    /// (see `open`).
    #[cfg(not(loom))]
    pub(crate) fn closed(&self) {
        // Release: pairs with the Acquire in `FileStorage`'s drop; orders
        // nothing else, the flag is all it reads.
        self.open.store(false, Ordering::Release);
    }

    /// These files, shared by processes: every mapping of one holds its
    /// read lock in `maps`, and trimmed files are freed for reuse (see
    /// "Recycling across processes" in `file/mod.rs`).
    #[cfg(not(loom))]
    pub(crate) fn shared_with(self, maps: crate::sync::Arc<super::map_locks::MapLocks>) -> Self {
        Files { maps: Some(maps), ..self }
    }

    /// In a directory shared by processes: counts a mapping of `storage`'s
    /// file in its read lock (see [`FileStorage::hold`]); true at once for
    /// files of one process.
    pub(crate) fn hold(&self, storage: &FileStorage) -> Result<bool> {
        #[cfg(not(loom))]
        if let Some(maps) = &self.maps {
            return storage.hold(maps, &self.open);
        }
        let _ = storage;
        Ok(true)
    }

    /// In a directory shared by processes: a free file claimed for reuse
    /// (see [`FileStorage::claim_free`]); `None` if there is none, or none
    /// could be.
    #[cfg(not(loom))]
    pub(crate) fn claim_free(&self, capacity: usize, slots: usize) -> Result<Option<FileStorage>> {
        let Some(maps) = &self.maps else { return Ok(None) };
        FileStorage::claim_free(&self.dir, maps, &self.open, capacity, slots)
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

    /// Names a file made ahead as the segment file for `base` (see
    /// [`FileStorage::name_ahead`]); on failure the file comes back.
    #[cfg(not(loom))]
    pub(crate) fn name_ahead(
        &self,
        ahead: super::file_storage::AheadFile,
        base: u64,
        capacity: usize,
        slots: usize,
    ) -> std::result::Result<FileStorage, (super::file_storage::AheadFile, crate::error::Error)> {
        let storage = FileStorage::name_ahead(&self.dir, ahead, base, capacity, slots)?;
        self.created();
        log::debug!("named a segment file made ahead {}", storage.path().display());
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
