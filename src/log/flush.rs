//! A durable [`Log`]'s calls to the disk: the syncs its owner runs, the
//! preparation of the next pages, the test seams that fail files and
//! syncs, and the wait of an append under `Fsync::Always` (the rounds
//! themselves are `durable.rs`'s).

use super::Log;
use super::file;
use crate::error::Result;
use crate::sync::epoch::{self, Guard};

impl Log {
    /// Makes everything appended so far durable: flushes what the committed
    /// prefix of the log added since the last sync (a data sync of those
    /// ranges of the segment files) and the directory if files were created.
    /// A broker with [`Fsync::Interval`] calls it on its timer; with
    /// [`Fsync::Always`] appends already return only once durable. Records
    /// still being written by a publisher (and those after them) wait for the
    /// next call. An in-memory log has nothing to sync: `Ok`.
    ///
    /// With [`Fsync::Never`] it still writes the segments' completion
    /// markers, but flushes nothing.
    ///
    /// [`Fsync::Always`]: super::Fsync::Always
    /// [`Fsync::Interval`]: super::Fsync::Interval
    /// [`Fsync::Never`]: super::Fsync::Never
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use rill::log::{DurableLog, Fsync, Log, LogConfig, Record};
    ///
    /// # let dir = std::env::temp_dir().join(format!("rill-doctest-log-sync-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// let durable = DurableLog { fsync: Fsync::Interval(Duration::from_secs(60)), ..DurableLog::new(&dir) };
    /// let (log, _) = Log::open(&LogConfig::default(), 0, &durable)?;
    /// log.append(&Record::new(b"o-1"))?;
    /// log.sync()?; // o-1 is on stable storage now
    /// assert_eq!(log.stats().sync_rounds, 1);
    /// # drop(log);
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn sync(&self) -> Result<()> {
        match (&self.shared.durability, self.shared.pool.files()) {
            (Some(d), Some(files)) => d.sync(files, &|from| self.shared.segments_from(from)),
            _ => Ok(()),
        }
    }

    /// The round its owner's periodic flusher runs on this log (the broker's,
    /// every interval): under [`Fsync::Interval`] and [`Fsync::Never`] a
    /// sync round, which under `Never` flushes nothing but still writes the
    /// completion markers of the segments sealed since the last round (the
    /// *marking round*, see "The completion marker" in `durable.rs`), so
    /// that damage in them is [`Error::Corrupt`] after a process crash too;
    /// nothing under [`Fsync::Always`], whose appends run the rounds. An
    /// in-memory log has nothing to do: `Ok`.
    ///
    /// [`Error::Corrupt`]: crate::Error::Corrupt
    /// [`Fsync::Always`]: super::Fsync::Always
    /// [`Fsync::Interval`]: super::Fsync::Interval
    /// [`Fsync::Never`]: super::Fsync::Never
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::{DurableLog, Fsync, Log, LogConfig, MIN_SEGMENT_BYTES, Record};
    ///
    /// # let dir = std::env::temp_dir().join(format!("rill-doctest-log-flusher-round-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// let config = LogConfig { segment_bytes: Some(MIN_SEGMENT_BYTES), ..LogConfig::default() };
    /// let durable = DurableLog { fsync: Fsync::Never, ..DurableLog::new(&dir) };
    /// let (log, _) = Log::open(&config, 0, &durable)?;
    /// while log.stats().segments < 2 {
    ///     log.append(&Record::new(&[7; 100]))?;
    /// }
    /// assert_eq!(log.stats().unmarked_segments, 1); // the segment just sealed
    /// log.flusher_round()?;
    /// assert_eq!(log.stats().unmarked_segments, 0);
    /// # drop(log);
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn flusher_round(&self) -> Result<()> {
        if self.shared.always {
            return Ok(());
        }
        self.sync()
    }

    /// At its broker's close, after the last sync: makes the last writes
    /// into the newest segment's file (a recycled file's end mark; in a log
    /// of one process, the checked prefix that makes damage among its
    /// records `Corrupt` at the next open, as in a sealed file), which the
    /// log's drop makes otherwise. Done here because the drop may come
    /// after the directory's lock is let go (a handle held past the close),
    /// when another broker may have opened the directory and be appending
    /// to that file ("Resuming the last file" in `recovery.rs`). Nothing in
    /// memory: does nothing.
    pub(crate) fn close_files(&self) {
        self.shared.close_newest_file();
    }

    /// Whether offsets were handed out past what the sync rounds made
    /// durable (a record appended since the last round, or reserved and not
    /// committed when it looked): the broker's flusher then looks again an
    /// interval later, rather than sleep. False for an in-memory log.
    pub(crate) fn behind_durable(&self) -> bool {
        match &self.shared.durability {
            Some(d) => d.durable_end() < self.end_offset(),
            None => false,
        }
    }

    /// Faults the active segment file's pages ahead of the writer into the
    /// map, writable, once per segment (see `FileStorage::prepare`): the
    /// broker's flusher calls it each interval, so that the publisher
    /// finds those pages mapped instead of taking a page fault on each.
    /// Returns whether it did anything; nothing for an in-memory log.
    pub(crate) fn prepare_ahead(&self) -> bool {
        if self.shared.durability.is_none() {
            return false;
        }
        let last = {
            let guard = epoch::pin();
            self.shared.dir(&guard).last().clone()
        };
        match last.file() {
            Some(file) if last.sealed_count().is_none() => file.prepare(last.used_bytes()),
            _ => false,
        }
    }

    /// Has `hook` called after every roll to a new segment of this durable
    /// log, unless a hook is set already (the broker's flusher sets one, to
    /// run [`Log::prepare_ahead`] on its own thread). Nothing for an
    /// in-memory log.
    pub(crate) fn set_roll_hook(&self, hook: impl FnOnce() -> file::RollHook) {
        if let Some(files) = self.shared.pool.files() {
            files.set_roll_hook(hook);
        }
    }

    /// True for a log opened with [`Log::open`].
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::{DurableLog, Log, LogConfig};
    ///
    /// # let dir = std::env::temp_dir().join(format!("rill-doctest-log-is-durable-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// assert!(!Log::new(&LogConfig::default())?.is_durable());
    /// let (log, _) = Log::open(&LogConfig::default(), 0, &DurableLog::new(&dir))?;
    /// assert!(log.is_durable());
    /// # drop(log);
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn is_durable(&self) -> bool {
        self.shared.durability.is_some()
    }

    /// Makes the next `n` segment-file creations of this durable log fail
    /// as if the disk were full (`ENOSPC`, reported as [`Error::Io`]). A seam
    /// for tests of the disk-full path; the check runs only at a segment
    /// rollover. Does nothing for an in-memory log.
    ///
    /// [`Error::Io`]: crate::Error::Io
    #[doc(hidden)]
    pub fn fail_next_segment_files(&self, n: usize) {
        if let Some(files) = self.shared.pool.files() {
            files.fail_next_creates(n);
        }
    }

    /// Makes the next `n` data syncs of this durable log's sync rounds fail
    /// as a failing `fdatasync` does (`EIO`, reported as [`Error::Io`]),
    /// without syncing. A seam for tests of the failed-sync path. Does
    /// nothing for an in-memory log.
    ///
    /// [`Error::Io`]: crate::Error::Io
    #[doc(hidden)]
    pub fn fail_next_syncs(&self, n: usize) {
        if let Some(files) = self.shared.pool.files() {
            files.fail_next_syncs(n);
        }
    }

    /// Waits until every offset below `end` is durable, if this log's
    /// appends must (`Fsync::Always`); unpins meanwhile.
    #[inline]
    pub(super) fn after_append(&self, end: u64, guard: &mut Guard) -> Result<()> {
        if !self.shared.always {
            return Ok(());
        }
        self.wait_durable(end, guard)
    }

    #[cold]
    fn wait_durable(&self, end: u64, guard: &mut Guard) -> Result<()> {
        let durability = self.shared.durability.as_ref().expect("an Always log is durable");
        let files = self.shared.pool.files().expect("a durable log makes files");
        // Not pinned while waiting for the disk: a pin held through an fsync
        // would hold back reclamation for every log in the process.
        guard.repin_after(|| durability.wait_durable(files, &|from| self.shared.segments_from(from), end))
    }
}
