//! The buffer pool: the spare segment buffers of one partition, so that
//! rolling over to a new segment reuses warm memory (or, for a durable
//! partition, a trimmed segment file: "Recycling" in `file/mod.rs`) instead
//! of faulting in fresh pages. Not part of the reservation protocol
//! (`segment.rs`): a segment takes its buffers from here when it is built
//! and gives them back, through [`Recycler`], when it is dropped.

use std::io;

#[cfg(not(loom))]
use super::file::AheadFile;
use super::file::Files;
use super::segment::{Buffers, Recycler};
use super::storage::Pages;
use crate::error::{Error, Result};
use crate::sync::{Arc, Mutex};

/// The region bytes of a file made ahead that the prefault thread faults
/// in when it makes it: the part a roll's first publishers write before
/// the thread, asked by the roll, faults in the next part ahead of them
/// (the rest, "Ahead of the tail" in `prefault.rs`, whose `AHEAD` this is).
/// Faulting in only that much makes the file ready sooner: the thread that
/// makes it also faults ahead of the tails and frees trimmed files, and a
/// roll that finds no file made allocates one on the publisher's path.
#[cfg(not(loom))]
pub(crate) const AHEAD_FILE_FAULTED: usize = 1 << 20;

/// Spare segment buffers of one partition, so rolling over to a new segment
/// reuses warm memory instead of faulting in fresh pages. For a durable
/// partition the spares are trimmed segment files, still mapped (see
/// "Recycling" in `file/mod.rs`).
#[derive(Debug)]
pub(crate) struct Pool {
    spare: Mutex<Vec<Buffers>>,
    /// Most spare buffers kept; beyond this they are freed.
    max_spare: usize,
    capacity: usize,
    slot_count: usize,
    /// Test seam: how many of the next fresh allocations fail as if the
    /// system were out of memory. Compiled only into unit tests and loom
    /// models, so the allocation path of a real build has no check at all.
    #[cfg(any(test, loom))]
    fail_allocations: crate::sync::atomic::AtomicUsize,
    /// For a durable log: where its segment files go.
    files: Option<Files>,
    /// A memory pool has taken back a trimmed segment: its log has filled
    /// its retention and rolls into recycled segments from now on, so it
    /// no longer asks for spares made ahead (`prefault.rs`).
    #[cfg(not(loom))]
    recycling: crate::sync::atomic::AtomicBool,
    /// A spare made ahead is asked for and not yet made (`prefault.rs`).
    #[cfg(not(loom))]
    spare_requested: crate::sync::atomic::AtomicBool,
    /// A durable log's next segment file, made ahead without a name (see
    /// "A spare made ahead" in `prefault.rs`), and the process that made
    /// it: a child forked since shares its descriptor and mapping, and
    /// must not name it too.
    #[cfg(not(loom))]
    ahead_file: Mutex<Option<(u32, AheadFile)>>,
    /// The data directory's filesystem makes no files without a name, or
    /// one made could not be named (no `/proc`): no file is asked for
    /// ahead.
    #[cfg(not(loom))]
    no_ahead_files: crate::sync::atomic::AtomicBool,
    /// Files made ahead that a roll named, for tests.
    #[cfg(all(test, not(loom)))]
    named_ahead: crate::sync::atomic::AtomicU64,
    /// Free files a roll reused, for tests.
    #[cfg(all(test, not(loom)))]
    reused_free: crate::sync::atomic::AtomicU64,
    /// The segments of this pool are shared by processes
    /// ([`super::Sharing::Processes`]): they commit and seal by
    /// compare-and-swap (see "An abandoned reservation" in `segment.rs`).
    /// Fixed at open.
    shared: bool,
    /// Where a file of a log shared by processes goes once trimmed and let
    /// go by this process (kept by no pool, see `give_back`): the prefault
    /// thread ("A trimmed file let go behind" in `prefault.rs`), or, if
    /// none, dropped where it is. Set at open for shared pools only
    /// ([`Pool::letting_go_with`]).
    #[cfg(not(loom))]
    let_go: Option<fn(Buffers)>,
}

impl Pool {
    pub(crate) fn new(capacity: usize, slot_count: usize, max_spare: usize) -> Self {
        Pool {
            spare: Mutex::new(Vec::new()),
            max_spare,
            capacity,
            slot_count,
            #[cfg(any(test, loom))]
            fail_allocations: crate::sync::atomic::AtomicUsize::new(0),
            files: None,
            #[cfg(not(loom))]
            recycling: crate::sync::atomic::AtomicBool::new(false),
            #[cfg(not(loom))]
            spare_requested: crate::sync::atomic::AtomicBool::new(false),
            #[cfg(not(loom))]
            ahead_file: Mutex::new(None),
            #[cfg(not(loom))]
            no_ahead_files: crate::sync::atomic::AtomicBool::new(false),
            #[cfg(all(test, not(loom)))]
            named_ahead: crate::sync::atomic::AtomicU64::new(0),
            #[cfg(all(test, not(loom)))]
            reused_free: crate::sync::atomic::AtomicU64::new(0),
            shared: false,
            #[cfg(not(loom))]
            let_go: None,
        }
    }

    /// This pool, for a log shared by processes: the segments built over
    /// its buffers commit and seal by compare-and-swap (see "An abandoned
    /// reservation" in `segment.rs`). Loom models use it on memory.
    pub(crate) fn shared_by_processes(self) -> Self {
        Pool { shared: true, ..self }
    }

    /// This pool, handing the buffers it keeps no more to `let_go` where it
    /// would drop them (see the field `let_go`).
    #[cfg(not(loom))]
    pub(crate) fn letting_go_with(self, let_go: fn(Buffers)) -> Self {
        Pool { let_go: Some(let_go), ..self }
    }

    /// A pool that makes segment files in `files`' directory, keeping at
    /// most `max_spare` trimmed ones for reuse.
    pub(crate) fn for_files(capacity: usize, slot_count: usize, max_spare: usize, files: Files) -> Self {
        Pool { files: Some(files), ..Pool::new(capacity, slot_count, max_spare) }
    }

    /// Region bytes of the segments this pool hands out (the configured
    /// size; a log's small first segment is not one of them).
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// The durable log's files, if this pool makes them.
    pub(crate) fn files(&self) -> Option<&Files> {
        self.files.as_ref()
    }

    /// Clean buffers for the segment whose first offset is `base`: recycled
    /// if one is spare, else freshly mapped; for a durable log, a spare
    /// segment file reused, else a new one. Fails with
    /// [`Error::ResourceExhausted`] when a mapping cannot be made, and with
    /// [`Error::Io`] when a file cannot. Fresh memory is mapped in `pages`:
    /// small for a log's first segment and for the roll out of a small one,
    /// huge for the segments of a roll out of a full-size one (see
    /// [`Pages`]).
    pub(crate) fn take(&self, base: u64, pages: Pages) -> Result<Buffers> {
        if let Some(files) = &self.files {
            files.injected_failure(base)?;
            let spare = self.spare.lock().pop();
            if let Some(recycled) = spare {
                let file = recycled.storage().as_file().expect("a durable pool's spares are files");
                match file.reuse(base, files.flush) {
                    Ok(()) => {
                        files.created();
                        #[cfg(all(test, not(loom)))]
                        if self.shared {
                            self.reused_free.fetch_add(1, crate::sync::atomic::Ordering::Relaxed);
                        }
                        return Ok(recycled);
                    }
                    Err(e @ Error::Io { kind: io::ErrorKind::AlreadyExists, .. }) => {
                        // Another publisher retrying the same roll made the
                        // file: ours stays a spare.
                        self.spare.lock().push(recycled);
                        return Err(e);
                    }
                    // Dropping the spare deletes it (a free file claimed
                    // across processes stays free); make a fresh file.
                    Err(e) => log::warn!("could not reuse a spare segment file: {e}"),
                }
            }
            // Shared by processes: a file another use trimmed and every
            // process let go of ("Recycling across processes" in
            // `file/mod.rs`).
            #[cfg(not(loom))]
            match self.reuse_free(files, base, pages) {
                Ok(Some(buffers)) => return Ok(buffers),
                Ok(None) => {}
                // Another publisher retrying the same roll made the file;
                // ours stays free (its name unchanged).
                Err(e @ Error::Io { kind: io::ErrorKind::AlreadyExists, .. }) => return Err(e),
                // A file made ahead, or a new one, serves instead.
                Err(e) => log::warn!("could not reuse a free segment file: {e}"),
            }
            #[cfg(not(loom))]
            if let Some(made) = self.take_ahead_file() {
                match files.name_ahead(made, base, self.capacity, self.slot_count) {
                    // Its first part faulted in when it was made, the rest
                    // ahead of the tail, as a new file's.
                    Ok(storage) => {
                        // A new file: no one else can be freeing it.
                        files.hold(&storage)?;
                        #[cfg(test)]
                        self.named_ahead.fetch_add(1, crate::sync::atomic::Ordering::Relaxed);
                        return Buffers::over(Box::new(storage), self.slot_count, pages).map(Buffers::unfaulted);
                    }
                    Err((made, e @ Error::Io { kind: io::ErrorKind::AlreadyExists, .. })) => {
                        // As a spare's above: it serves a later roll.
                        *self.ahead_file.lock() = Some((std::process::id(), made));
                        return Err(e);
                    }
                    // Dropped (the kernel frees it); a file is made now, and
                    // none ahead from now on (a system without /proc, say).
                    Err((_, e)) => {
                        log::warn!("could not name a segment file made ahead ({e}); making them at the roll");
                        // Relaxed: a hint, as in `wants_spare_ahead`.
                        self.no_ahead_files.store(true, crate::sync::atomic::Ordering::Relaxed);
                    }
                }
            }
            let storage = files.create(base, self.capacity, self.slot_count)?;
            files.hold(&storage)?;
            // A new file: its pages are faulted in ahead of the tail
            // ("Ahead of the tail" in `prefault.rs`).
            return Buffers::over(Box::new(storage), self.slot_count, pages).map(Buffers::unfaulted);
        }
        if let Some(recycled) = self.spare.lock().pop() {
            return Ok(recycled);
        }
        self.injected_failure().and_then(|()| Buffers::map(self.capacity, self.slot_count, pages)).map_err(|e| {
            Error::ResourceExhausted(format!("out of memory: cannot map a log segment of {} bytes: {e}", self.capacity))
        })
    }

    /// Makes the next `n` fresh allocations fail (see `fail_allocations`).
    #[cfg(any(test, loom))]
    pub(crate) fn fail_next_allocations(&self, n: usize) {
        // Relaxed: a test knob set before the appends it affects are started.
        self.fail_allocations.store(n, crate::sync::atomic::Ordering::Relaxed);
    }

    #[cfg(any(test, loom))]
    fn injected_failure(&self) -> io::Result<()> {
        use crate::sync::atomic::Ordering::Relaxed;
        // Relaxed: a counter the RMW keeps exact; it guards no other data.
        match self.fail_allocations.fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1)) {
            Ok(_) => Err(io::Error::from(io::ErrorKind::OutOfMemory)),
            Err(_) => Ok(()),
        }
    }

    #[cfg(not(any(test, loom)))]
    #[inline(always)]
    fn injected_failure(&self) -> io::Result<()> {
        Ok(())
    }

    /// A pool whose next roll would be into fresh memory or a new file (see
    /// "A spare made ahead" in `prefault.rs`): it has no spare, and its log
    /// still grows toward its retention (it has recycled nothing yet) or,
    /// shared by processes, keeps no trimmed files (its spare is a free file
    /// claimed for the next roll, when there is one); a durable one of one
    /// process has no file made ahead either, and a filesystem that makes
    /// files without a name.
    #[cfg(not(loom))]
    pub(crate) fn wants_spare_ahead(&self) -> bool {
        use crate::sync::atomic::Ordering::Relaxed;
        // Relaxed, all: a hint; a stale answer costs one spare made in vain
        // (the pool's bound still holds) or one segment faulted, or one
        // file made, by its writer.
        self.grows()
            && self.spare.lock().is_empty()
            && (self.files.is_none()
                // Shared: a free file may be claimed (`claim_spare`).
                || self.shared
                || (!self.no_ahead_files.load(Relaxed) && self.ahead_file.lock().is_none()))
    }

    /// Whether the log's rolls may be into fresh memory or new files: it has
    /// recycled nothing yet, or its files are shared by processes, whose
    /// pool keeps no trimmed files (a roll reuses a free file if there is
    /// one, and makes or takes one made ahead if not).
    #[cfg(not(loom))]
    fn grows(&self) -> bool {
        // Relaxed: a hint, as in `wants_spare_ahead`.
        !self.recycling.load(crate::sync::atomic::Ordering::Relaxed) || (self.shared && self.files.is_some())
    }

    /// The file made ahead, if this process made it (see `ahead_file`).
    #[cfg(not(loom))]
    fn take_ahead_file(&self) -> Option<AheadFile> {
        let (pid, made) = self.ahead_file.lock().take()?;
        (pid == std::process::id()).then_some(made)
    }

    /// Whether a file made ahead waits for the next roll.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn has_ahead_file(&self) -> bool {
        self.ahead_file.lock().is_some()
    }

    /// How many files made ahead rolls have named.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn named_ahead(&self) -> u64 {
        self.named_ahead.load(crate::sync::atomic::Ordering::Relaxed)
    }

    /// How many free files rolls reused.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn reused_free(&self) -> u64 {
        self.reused_free.load(crate::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the filesystem was found to make no files without a name.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn no_ahead_files(&self) -> bool {
        self.no_ahead_files.load(crate::sync::atomic::Ordering::Relaxed)
    }

    /// Records that a spare made ahead is asked for; false if one already is.
    #[cfg(not(loom))]
    pub(crate) fn mark_spare_requested(&self) -> bool {
        // Relaxed: only the flag itself is decided here (one request at a
        // time); the spare reaches the log through the pool's mutex.
        !self.spare_requested.swap(true, crate::sync::atomic::Ordering::Relaxed)
    }

    /// Whether a spare made ahead was asked for and not yet made.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn spare_requested(&self) -> bool {
        self.spare_requested.load(crate::sync::atomic::Ordering::Relaxed)
    }

    /// Whether a dropped segment's buffers have come back to the pool.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn is_recycling(&self) -> bool {
        self.recycling.load(crate::sync::atomic::Ordering::Relaxed)
    }

    /// Clears the request flag (the request was dropped or served).
    #[cfg(not(loom))]
    pub(crate) fn spare_request_done(&self) {
        // Relaxed: as in `mark_spare_requested`.
        self.spare_requested.store(false, crate::sync::atomic::Ordering::Relaxed);
    }

    /// On the prefault thread, if the pool still wants a spare: in memory,
    /// maps one in huge pages (it is for a roll out of a full-size segment),
    /// faults all of it in, and keeps it; on a data directory shared by
    /// processes, claims a free file (`claim_spare`), else, as on one of one
    /// process, makes the next file ahead, its first part faulted in. Best
    /// effort: a failure is left to the roll, which reports it.
    #[cfg(not(loom))]
    pub(crate) fn make_spare_ahead(&self) {
        self.spare_request_done();
        if !self.wants_spare_ahead() {
            return;
        }
        if let Some(files) = &self.files {
            if self.shared {
                // Shared by processes: a free file if there is one, claimed
                // here rather than by the roll; else a file made ahead, if
                // none waits.
                match self.claim_spare(files) {
                    Ok(true) => return,
                    Ok(false) => {}
                    // Left to the roll, which claims or makes its own.
                    Err(e) => log::debug!("could not claim a free segment file in {}: {e}", files.dir.display()),
                }
                if self.ahead_file.lock().is_some() {
                    return;
                }
            }
            // A durable log: its next file, made here, its first part
            // faulted in.
            match AheadFile::make(&files.dir, self.capacity, self.slot_count, AHEAD_FILE_FAULTED) {
                Ok(made) => {
                    let mut slot = self.ahead_file.lock();
                    // Checked again here so a file made while the log began
                    // to recycle is let go, not kept beside its spares.
                    if slot.is_none() && self.grows() {
                        *slot = Some((std::process::id(), made));
                    }
                }
                Err(e) if AheadFile::unsupported(&e) => {
                    log::debug!("no segment files made ahead in {}: {e}", files.dir.display());
                    // Relaxed: a hint, as in `wants_spare_ahead`.
                    self.no_ahead_files.store(true, crate::sync::atomic::Ordering::Relaxed);
                }
                // Left to the roll, which reports it (a full disk).
                Err(e) => log::debug!("could not make a segment file ahead in {}: {e}", files.dir.display()),
            }
            return;
        }
        let Ok(mut buffers) = Buffers::map(self.capacity, self.slot_count, Pages::Huge) else { return };
        buffers.populate();
        let mut spare = self.spare.lock();
        if spare.len() < self.max_spare {
            spare.push(buffers);
        }
    }

    /// For a log shared by processes, at a roll that found no spare: a free
    /// file claimed, reset and reused as the segment file for `base` (see
    /// "Recycling across processes" in `file/mod.rs`), `None` if there is
    /// none. Its pages are the page cache's, not this mapping's yet: they
    /// are faulted in ahead of the tail, as a new file's.
    #[cfg(not(loom))]
    fn reuse_free(&self, files: &Files, base: u64, pages: Pages) -> Result<Option<Buffers>> {
        let Some(storage) = files.claim_free(self.capacity, self.slot_count)? else { return Ok(None) };
        let buffers = Buffers::over(Box::new(storage), self.slot_count, pages)?;
        buffers.reset_claimed();
        buffers.storage().as_file().expect("over a file").reuse(base, files.flush)?;
        files.created();
        #[cfg(test)]
        self.reused_free.fetch_add(1, crate::sync::atomic::Ordering::Relaxed);
        Ok(Some(buffers.unfaulted()))
    }

    /// On the prefault thread, for a log shared by processes: claims a free
    /// file (see "Recycling across processes" in `file/mod.rs`), resets its
    /// state, faults its first part into this process's mapping (its pages
    /// are in the page cache; the rest is faulted ahead of the tail, as a
    /// new file's) and keeps it as the pool's spare, for the next roll to
    /// name. Holding its write lock meanwhile, as the roll would. False if
    /// there is no free file to claim.
    #[cfg(not(loom))]
    fn claim_spare(&self, files: &Files) -> Result<bool> {
        let Some(storage) = files.claim_free(self.capacity, self.slot_count)? else { return Ok(false) };
        let buffers = Buffers::over(Box::new(storage), self.slot_count, Pages::Huge)?;
        buffers.reset_claimed();
        super::storage::populate_range(buffers.storage().as_ptr(), self.capacity, 0, AHEAD_FILE_FAULTED);
        self.spare.lock().push(buffers.unfaulted());
        Ok(true)
    }

    /// Takes back the buffers of a dropped segment whose records used the
    /// first `used` slots; `trimmed`: by retention.
    fn give_back(&self, buffers: Buffers, used: usize, trimmed: bool) {
        #[cfg(not(loom))]
        if let Some(let_go) = self.let_go.filter(|_| buffers.storage().as_file().is_some()) {
            // Shared by processes: kept by no pool, every file is let go
            // behind the roll ("A trimmed file let go behind" in
            // `prefault.rs`), where the last process to let go of a trimmed
            // one frees it for reuse (`FileStorage`'s drop).
            return let_go(buffers);
        }
        if buffers.storage().as_file().is_some_and(|f| !f.is_spare()) {
            // The file of a segment the log still had at close: it stays.
            return;
        }
        if buffers.storage().capacity() != self.capacity || buffers.slot_count() != self.slot_count {
            // A recovered segment's file sized by an earlier configuration:
            // not the shape of a new segment.
            // A spare file dropped here deletes itself, as below.
            return;
        }
        // Relaxed: a hint for `wants_spare_ahead`. Only a trim says the log
        // has filled its retention: a segment a compaction pass replaced
        // comes back once, and the log it came from may grow for ever.
        #[cfg(not(loom))]
        if trimmed && !self.recycling.swap(true, crate::sync::atomic::Ordering::Relaxed) && !self.shared {
            // A durable log of one process rolls into its trimmed files from
            // now on: a file made ahead would only sit beside them.
            drop(self.ahead_file.lock().take());
        }
        #[cfg(loom)]
        let _ = trimmed;
        // A spare file dropped here (the pool is full) deletes itself.
        let mut spare = self.spare.lock();
        if spare.len() < self.max_spare {
            buffers.reset(used);
            spare.push(buffers);
        }
    }

    pub(crate) fn spare_count(&self) -> usize {
        self.spare.lock().len()
    }
}

impl Recycler for Arc<Pool> {
    fn shared_by_processes(&self) -> bool {
        self.shared
    }

    fn give_back(&self, buffers: Buffers, used: usize, trimmed: bool) {
        Pool::give_back(self, buffers, used, trimmed);
    }
}
