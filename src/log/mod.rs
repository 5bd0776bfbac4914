//! The lock-free segmented append log: one per topic partition.
//!
//! A [`Log`] is a chain of segments. Publishers append to the newest one
//! (see `segment.rs` for the reservation protocol); every reader has its own
//! [`Cursor`] and reads at its own pace, borrowing records in place.
//!
//!
//! The parts: `config.rs` (sizes and retention), `segment.rs` (one segment
//! and its reservation protocol), `dir.rs` (the directory of segments, its
//! rollover and reclamation: the essay on how the log stays lock-free across
//! segments), `cursor.rs` (readers), `record.rs` (the byte layout) and
//! `storage.rs` (the memory behind a segment).
//!
//! A durable log ([`Log::open`]) keeps its segments in files: `file.rs` (the
//! file format and its checksums), `recovery.rs` (rebuilding a partition
//! from its files: what a crash leaves and what is kept) and `durable.rs`
//! (the fsync policy and group commit).

mod compact;
mod compact_state;
mod config;
mod cursor;
mod dir;
mod durable;
pub(crate) mod file;
#[cfg(not(loom))]
mod prefault;
pub(crate) mod record;
pub(crate) mod recovery;
mod resync;
pub(crate) mod segment;
pub(crate) mod storage;

use std::fmt;

pub use compact::CompactionPolicy;
use config::SPARE_SEGMENTS;
pub use config::{
    DEFAULT_MAX_RECORD_BYTES, DEFAULT_RETENTION_BYTES, DEFAULT_SEGMENT_BYTES, LogConfig, MIN_SEGMENT_BYTES,
};
pub use cursor::{Batch, BatchIter, Cursor, Lagged};
use dir::{Dir, Shared};
use durable::Durability;
pub use durable::{DEFAULT_FSYNC_INTERVAL, Damage, DurableLog, Fsync, RecoveryReport};
use file::Files;
pub use record::{
    Attributes, ID_ATTRIBUTE, MAX_ATTRIBUTE_KEY_LEN, MAX_ATTRIBUTES, MAX_ID_LEN, Record, RecordParts, RecordView,
};
use segment::{Pool, Segment};
use storage::Pages;

use crate::clock::now_ns;
use crate::error::{Error, PublishFailure, Result};
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::epoch::{self, Guard};
use crate::sync::{Arc, Mutex};

/// Who may open a data directory at once (issue 39): the broker's
/// [`BrokerConfig::sharing`](crate::BrokerConfig::sharing), and how a
/// durable log maps its segment files.
///
/// # Examples
///
/// ```
/// use rill::{Broker, BrokerConfig, Error, Sharing};
///
/// assert_eq!(BrokerConfig::default().sharing, Sharing::Exclusive);
/// // Several processes share a directory, so `Processes` needs one.
/// let config = BrokerConfig { sharing: Sharing::Processes, ..BrokerConfig::default() };
/// assert!(matches!(Broker::new(config), Err(Error::InvalidArgument(_))));
/// # Ok::<(), rill::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Sharing {
    /// One broker in one process holds the data directory; any other
    /// opener gets [`Error::Busy`]. The default, and an in-memory broker's.
    #[default]
    Exclusive,
    /// Any number of brokers, in this process or others, open the same
    /// data directory at once and share its topics' logs through the
    /// segment files each maps (see "The roll across processes" in
    /// `log/dir.rs` and "Several processes" in the README). A directory
    /// held `Exclusive` refuses them with [`Error::Busy`], and the other
    /// way round.
    Processes,
}

/// A partition's append-only log. Cheap to clone: clones share the log.
///
/// Appending is lock-free apart from the brief wait at a segment rollover;
/// see the module documentation and `segment.rs`.
#[derive(Clone)]
pub struct Log {
    shared: Arc<Shared>,
}

/// The error of an append whose reservation was claimed as abandoned
/// before it committed (a log shared by processes; see "An abandoned
/// reservation" in `segment.rs`): [`Error::Timeout`], since the publisher
/// took longer than the abandon bound between its reservation and its
/// commit. The record is not in the log (its offset is a skipped one), and
/// it was never acknowledged, so nothing acknowledged is lost.
#[cold]
#[inline(never)]
fn abandoned(offset: u64) -> Error {
    ::log::warn!(
        target: "rill::log",
        "an append reserved offset {offset} and did not commit it within the abandon bound: \
         another process gave the offset up, and the append fails"
    );
    Error::Timeout
}

/// Loom models only: a reservation made by [`Log::reserve_for_loom`].
#[cfg(loom)]
#[doc(hidden)]
#[derive(Debug)]
pub struct LoomReservation {
    seg: Arc<Segment>,
    index: u64,
    pos: u64,
    len: usize,
}

#[cfg(loom)]
impl LoomReservation {
    /// Writes `record` (the one reserved for) and commits it; false if its
    /// slot was given up first.
    pub fn write_and_commit(self, record: &Record<'_>) -> bool {
        assert_eq!(record.encoded_len().unwrap(), self.len);
        // SAFETY: a Granted reservation of `seg` for `len` bytes, made by
        // `reserve_for_loom` and written once, here.
        unsafe { self.seg.write_and_commit(self.index, self.pos, self.len, record, 0, false) }
    }
}

/// Loom models only: an election made by [`Log::elect_sealer_for_loom`].
#[cfg(loom)]
#[doc(hidden)]
#[derive(Debug)]
pub struct LoomSealer {
    log: Log,
    seg: Arc<Segment>,
    count: u64,
    end: u64,
}

#[cfg(loom)]
impl LoomSealer {
    /// Seals the segment (or adopts the seal a taker made first) and
    /// installs its successor, as `Shared::roll` does for a sealer.
    pub fn seal_and_roll(self) {
        let guard = epoch::pin();
        let current = self.log.shared.dir_ptr(&guard);
        self.log.shared.roll(&self.seg, self.count, self.end, current, &guard).unwrap();
    }
}

/// The error for a record of `size` bytes in a log that takes at most `max`.
#[cold]
#[inline(never)]
fn too_large(size: usize, max: usize) -> Error {
    Error::MessageTooLarge { size, max }
}

impl Log {
    /// Test seam: reserves room for one record of `bytes` (encoded, frame
    /// included) in the active segment and never writes it, as a publisher
    /// killed while copying its record would; the offset it took is a hole
    /// after a crash (see "Holes" in `recovery.rs`).
    #[cfg(test)]
    pub(crate) fn leave_hole(&self, bytes: u64) -> u64 {
        let guard = epoch::pin();
        let seg = self.shared.dir(&guard).last().clone();
        match seg.reserve(1, bytes) {
            segment::Reservation::Granted { index, .. } => seg.base() + index,
            other => panic!("no room for a hole of {bytes} bytes: {other:?}"),
        }
    }

    /// A new, empty log whose first record gets offset 0. It is partition 0
    /// as far as its errors say ([`Log::for_partition`] names another).
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::{Log, LogConfig, Record};
    ///
    /// let log = Log::new(&LogConfig::default())?;
    /// assert_eq!(log.append(&Record::new(b"first"))?, 0);
    /// assert_eq!((log.first_offset(), log.end_offset()), (0, 1));
    /// assert!(!log.is_durable());
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn new(config: &LogConfig) -> Result<Log> {
        Self::starting_at(config, 0)
    }

    /// A new, empty log for partition `partition` of a topic: errors about
    /// its offsets ([`Error::OutOfRange`]) name that partition.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::Error;
    /// use rill::log::{Log, LogConfig};
    ///
    /// let log = Log::for_partition(&LogConfig::default(), 3)?;
    /// assert!(matches!(log.cursor_at(5), Err(Error::OutOfRange { partition: 3, offset: 5, .. })));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn for_partition(config: &LogConfig, partition: u32) -> Result<Log> {
        Self::build(config, partition, 0)
    }

    /// A new, empty log whose first record gets offset `first_offset`.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::{Log, LogConfig, Record};
    ///
    /// let log = Log::starting_at(&LogConfig::default(), 1000)?;
    /// assert_eq!(log.first_offset(), 1000);
    /// assert_eq!(log.append(&Record::new(b"x"))?, 1000);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn starting_at(config: &LogConfig, first_offset: u64) -> Result<Log> {
        Self::build(config, 0, first_offset)
    }

    /// Loom models only: an in-memory log whose segments commit, claim
    /// and seal as those of a log shared by processes do (see "An abandoned
    /// reservation" in `segment.rs`); its cursors give up what stays
    /// reserved and not committed at their second look (loom has no clock).
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn shared_for_loom(config: &LogConfig) -> Result<Log> {
        let sizes = config.resolve()?;
        let pool = Arc::new(Pool::new(sizes.region_bytes(), sizes.slots, 0).shared_by_processes());
        let first = Arc::new(Segment::new(0, pool.take(0, Pages::Small)?, pool.clone()));
        Ok(Self::assemble(sizes, 0, vec![first], pool, None, true))
    }

    /// Loom models only: reserves room for `record` in the newest segment
    /// (which must have it) and leaves writing and committing it to the
    /// handle, as a publisher between its fetch-add and its commit.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn reserve_for_loom(&self, record: &Record<'_>) -> LoomReservation {
        let len = record.encoded_len().unwrap();
        let guard = epoch::pin();
        let seg = self.shared.dir(&guard).last().clone();
        match seg.reserve(1, len as u64) {
            segment::Reservation::Granted { index, pos } => LoomReservation { seg, index, pos, len },
            other => panic!("the model's segment has room: {other:?}"),
        }
    }

    /// Loom models only: reserves more than the newest segment holds, so
    /// that this caller is its elected sealer, and leaves the seal and the
    /// roll to the handle, as a sealer between its election and its seal.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn elect_sealer_for_loom(&self) -> LoomSealer {
        let guard = epoch::pin();
        let seg = self.shared.dir(&guard).last().clone();
        match seg.reserve(1, seg.capacity() + 1) {
            segment::Reservation::Sealer { count, end } => LoomSealer { log: self.clone(), seg, count, end },
            other => panic!("the model's segment is open: {other:?}"),
        }
    }

    fn build(config: &LogConfig, partition: u32, first_offset: u64) -> Result<Log> {
        let sizes = config.resolve()?;
        crate::clock::warm_up();
        let pool = Arc::new(Pool::new(sizes.region_bytes(), sizes.slots, SPARE_SEGMENTS));
        // A small first segment where the configured one is large (see "A
        // small first segment" in `dir.rs`).
        let buffers = match sizes.small_first() {
            Some((bytes, slots)) => segment::Buffers::small(bytes, slots)?,
            None => pool.take(first_offset, Pages::Small)?,
        };
        let first = Arc::new(Segment::new(first_offset, buffers, pool.clone()));
        Ok(Self::assemble(sizes, partition, vec![first], pool, None, false))
    }

    fn assemble(
        sizes: config::Sizes,
        partition: u32,
        segs: Vec<Arc<Segment>>,
        pool: Arc<Pool>,
        durability: Option<(Durability, Fsync)>,
        processes: bool,
    ) -> Log {
        let always = matches!(durability, Some((_, Fsync::Always)));
        Log {
            shared: Arc::new(Shared {
                sizes,
                partition,
                dir: epoch::Atomic::new(Dir::new(segs, None)),
                pool,
                holds: Mutex::new(Vec::new()),
                trimmed_segments: AtomicU64::new(0),
                compaction: compact_state::Compaction::default(),
                durability: durability.map(|(d, _)| d),
                always,
                processes,
                abandon_after_ns: AtomicU64::new(dir::ABANDON_AFTER.as_nanos() as u64),
                #[cfg(all(test, not(loom)))]
                claim_next: crate::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// Opens (creating if absent) the durable partition `partition` whose
    /// segment files live in `durable.dir`, recovering what is there.
    ///
    /// Recovery keeps every record before the first missing or damaged one
    /// (offsets stay dense) and reports what it dropped; damage in a sealed
    /// segment fails with [`Error::Corrupt`] unless `durable.repair` (see
    /// `recovery.rs`). Appends continue at [`RecoveryReport::end_offset`], in
    /// a new segment file. Fails with [`Error::Io`] if the directory cannot
    /// be created or read, or is not a directory.
    ///
    /// The caller makes sure no one else opens the same directory meanwhile
    /// (the broker locks its data directory).
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::{DurableLog, Fsync, Log, LogConfig, Record};
    ///
    /// # let dir = std::env::temp_dir().join(format!("rill-doctest-log-open-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// let durable = DurableLog { fsync: Fsync::Never, ..DurableLog::new(&dir) };
    /// let (log, report) = Log::open(&LogConfig::default(), 0, &durable)?;
    /// assert_eq!(report.records, 0);
    /// log.append(&Record::new(b"kept"))?;
    /// drop(log);
    ///
    /// // Opened again, the partition has its record and appends after it.
    /// let (log, report) = Log::open(&LogConfig::default(), 0, &durable)?;
    /// assert_eq!((report.records, report.end_offset, report.truncated_at), (1, 1, None));
    /// assert_eq!(log.append(&Record::new(b"next"))?, 1);
    /// # drop(log);
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn open(config: &LogConfig, partition: u32, durable: &DurableLog) -> Result<(Log, RecoveryReport)> {
        Self::open_in(config, partition, durable, Sharing::Exclusive)
    }

    /// [`Log::open`], for a partition this process holds alone
    /// (`Exclusive`) or the first opener of one shared by processes
    /// (`Processes`: recovered here, then joined by others with
    /// [`Log::join`]; see "The roll across processes" in `dir.rs`).
    pub(crate) fn open_in(
        config: &LogConfig,
        partition: u32,
        durable: &DurableLog,
        sharing: Sharing,
    ) -> Result<(Log, RecoveryReport)> {
        let processes = sharing == Sharing::Processes;
        let mut sizes = config.resolve()?;
        sizes.frame = file::FRAME_LEN as u64;
        crate::clock::warm_up();
        durable::prepare_dir(&durable.dir)?;
        let recovered = recovery::recover(&durable.dir, durable.repair)?;
        let flush = durable.fsync != Fsync::Never;
        let files = Files::new(durable.dir.clone(), flush);
        // No spare files when shared: a trimmed file may still be mapped by
        // another process, so it is never reused (see `dir.rs`).
        let spares = if processes { 0 } else { SPARE_SEGMENTS };
        let pool = Pool::for_files(sizes.region_bytes(), sizes.slots, spares, files);
        let pool = Arc::new(if processes { pool.shared_by_processes() } else { pool });
        let mut segs = Vec::with_capacity(recovered.kept.len() + 1);
        for kept in recovered.kept {
            // Make the cut permanent and every kept segment checkable: data,
            // then the completion marker (see `file.rs`).
            if !kept.was_complete {
                let storage = &kept.storage;
                if flush {
                    storage.flush_region(0, kept.used)?;
                }
                storage.mark_complete(kept.positions.len() as u64, kept.used, flush)?;
            }
            let buffers = segment::Buffers::over(Box::new(kept.storage), kept.positions.len(), Pages::Small)?;
            segs.push(Arc::new(Segment::recovered(
                kept.base,
                buffers,
                pool.clone(),
                &kept.positions,
                kept.used,
                kept.skips,
            )));
        }
        let end = recovered.end_offset;
        segs.push(Arc::new(Segment::new(end, pool.take(end, Pages::Small)?, pool.clone())));
        if flush {
            file::sync_dir(&durable.dir)?;
        }
        let report = recovered.report;
        if report.truncated_at.is_some() || report.truncated_records > 0 {
            log::warn!(
                "partition {partition} in {}: recovered {} records ({}..{}), truncated {} records and {} bytes{}",
                durable.dir.display(),
                report.records,
                report.first_offset,
                report.end_offset,
                report.truncated_records,
                report.truncated_bytes,
                if report.repaired { " (repair)" } else { "" },
            );
        } else {
            log::info!(
                "partition {partition} in {}: recovered {} records ({}..{})",
                durable.dir.display(),
                report.records,
                report.first_offset,
                report.end_offset
            );
        }
        let durability = Durability::new(end);
        Ok((Self::assemble(sizes, partition, segs, pool, Some((durability, durable.fsync)), processes), report))
    }

    /// Joins the durable partition in `durable.dir` that another process
    /// opened with [`Sharing::Processes`] and may be appending to: maps its
    /// segment files as they are, recovering nothing (the first opener
    /// did), and appends and reads through the same tail words, seals and
    /// indexes as every other process (see "The roll across processes" in
    /// `dir.rs`). Keeps the newest run of contiguous segments it finds (an
    /// older one may be trimmed while it looks). Fails with
    /// [`Error::InvalidArgument`] if the directory holds no segment file,
    /// and with [`Error::Io`] or [`Error::Corrupt`] if one cannot be mapped.
    ///
    /// The caller makes sure the first opener has finished opening (the
    /// broker: under its data directory's `INIT` and `topics.lock` locks,
    /// see "Several processes" in `broker/store.rs`).
    #[cfg(not(loom))]
    pub(crate) fn join(config: &LogConfig, partition: u32, durable: &DurableLog) -> Result<Log> {
        let mut sizes = config.resolve()?;
        sizes.frame = file::FRAME_LEN as u64;
        crate::clock::warm_up();
        let files = Files::new(durable.dir.clone(), durable.fsync != Fsync::Never);
        let pool = Arc::new(Pool::for_files(sizes.region_bytes(), sizes.slots, 0, files).shared_by_processes());
        let segs = dir::list_shared_segments(&pool)?;
        if segs.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "{}: no segment file to join (the partition's first opener makes one)",
                durable.dir.display()
            )));
        }
        let durability = Durability::new(segs[0].base());
        Ok(Self::assemble(sizes, partition, segs, pool, Some((durability, durable.fsync)), true))
    }

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
    #[doc(hidden)]
    pub fn fail_next_syncs(&self, n: usize) {
        if let Some(files) = self.shared.pool.files() {
            files.fail_next_syncs(n);
        }
    }

    /// Waits until every offset below `end` is durable, if this log's
    /// appends must (`Fsync::Always`); unpins meanwhile.
    #[inline]
    fn after_append(&self, end: u64, guard: &mut Guard) -> Result<()> {
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

    /// Largest encoded record this log accepts.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::Error;
    /// use rill::log::{Log, LogConfig, Record};
    ///
    /// let log = Log::new(&LogConfig { max_record_bytes: Some(1024), ..LogConfig::default() })?;
    /// assert_eq!(log.max_record_bytes(), 1024);
    /// let big = vec![0u8; 2000];
    /// assert!(matches!(log.append(&Record::new(&big)), Err(Error::MessageTooLarge { max: 1024, .. })));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn max_record_bytes(&self) -> usize {
        self.shared.sizes.max_record_bytes
    }

    /// The size of one segment.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::{DEFAULT_SEGMENT_BYTES, Log, LogConfig};
    ///
    /// assert_eq!(Log::new(&LogConfig::default())?.segment_bytes(), DEFAULT_SEGMENT_BYTES);
    /// let small = Log::new(&LogConfig { segment_bytes: Some(64 << 10), ..LogConfig::default() })?;
    /// assert_eq!(small.segment_bytes(), 64 << 10);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn segment_bytes(&self) -> usize {
        self.shared.sizes.segment_bytes
    }

    /// Inlined into the single-record append, its error made out of line
    /// (not inlined, it was a call returning its 80-byte `Result` through
    /// memory, dozens of instructions a publish; callgrind on
    /// `examples/hotpath.rs` counts them).
    #[inline]
    fn check_size(&self, record: &Record<'_>) -> Result<usize> {
        let len = record.encoded_len()?;
        let max = self.shared.sizes.max_record_bytes;
        if len > max {
            return Err(too_large(len, max));
        }
        Ok(len)
    }

    /// Appends one record and returns its offset.
    ///
    /// Fails, appending nothing, if the record is larger than
    /// [`Log::max_record_bytes`] or cannot be encoded.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::{Log, LogConfig, Record};
    ///
    /// let log = Log::new(&LogConfig::default())?;
    /// let attrs = [("region", "IN")];
    /// assert_eq!(log.append(&Record::new(b"o-1").with_key(b"customer-7").with_attributes(&attrs))?, 0);
    /// assert_eq!(log.append(&Record::new(b"o-2"))?, 1);
    ///
    /// let mut cursor = log.cursor_from_first();
    /// let record = cursor.read().expect("nothing was trimmed").expect("record 0 is committed");
    /// assert_eq!((record.key(), record.attribute("region")), (Some(&b"customer-7"[..]), Some("IN")));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn append(&self, record: &Record<'_>) -> Result<u64> {
        // Stamped before the pin, as the broker's publish does (see there).
        let timestamp = now_ns();
        Ok(self.append_pinned(record, timestamp, &mut epoch::pin())?)
    }

    /// [`Log::append`] under the caller's pin (the broker holds one already
    /// for its listeners), so the publish path pins once and a wait for a
    /// roll really re-pins (re-pinning a nested guard does nothing). Its
    /// error is the publish path's [`PublishFailure`] (see there why).
    #[inline]
    /// `timestamp` is the record's stamp, read from [`now_ns`] by the
    /// caller before it pinned.
    pub(crate) fn append_pinned(
        &self,
        record: &Record<'_>,
        timestamp: u64,
        guard: &mut Guard,
    ) -> Result<u64, PublishFailure> {
        let len = self.check_size(record)?;
        let frame = self.shared.sizes.frame;
        let offset = self
            .shared
            .reserve_then(1, len as u64 + frame, guard, |seg, index, pos| {
                // SAFETY: `index` and `pos..pos + frame + len` come from our own
                // Granted reservation, and `len` is the record's encoded length.
                if unsafe { seg.write_and_commit(index, pos, len, record, timestamp, frame != 0) } {
                    Ok(seg.base() + index)
                } else {
                    Err(seg.base() + index)
                }
            })?
            .map_err(abandoned)?;
        self.after_append(offset + 1, guard)?;
        Ok(offset)
    }

    /// Appends `records` in order, writing each one's offset into `offsets`
    /// (cleared first). A batch is reserved in parts, each at most
    /// 4096 records that fit one segment; other
    /// publishers' records may come between parts, and within a part the
    /// offsets are consecutive.
    ///
    /// Every record is checked before any is appended: on such an error
    /// nothing is. If a new segment cannot be allocated
    /// ([`Error::ResourceExhausted`]), the parts before it stay appended:
    /// `offsets` then lists exactly the records that were.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::{Log, LogConfig, Record};
    ///
    /// let log = Log::new(&LogConfig::default())?;
    /// let mut offsets = Vec::new();
    /// log.append_batch(&[Record::new(b"a"), Record::new(b"b"), Record::new(b"c")], &mut offsets)?;
    /// assert_eq!(offsets, [0, 1, 2]);
    /// log.append_batch(&[Record::new(b"d")], &mut offsets)?;
    /// assert_eq!(offsets, [3]); // cleared first
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn append_batch(&self, records: &[Record<'_>], offsets: &mut Vec<u64>) -> Result<()> {
        self.append_batch_pinned(records, offsets, &mut epoch::pin())
    }

    /// [`Log::append_batch`] under the caller's pin, as [`Log::append_pinned`].
    pub(crate) fn append_batch_pinned(
        &self,
        records: &[Record<'_>],
        offsets: &mut Vec<u64>,
        guard: &mut Guard,
    ) -> Result<()> {
        offsets.clear();
        let mut lens = Vec::with_capacity(records.len());
        for r in records {
            lens.push(self.check_size(r)?);
        }
        let sizes = self.shared.sizes;
        let frame = sizes.frame;
        let most = sizes.slots.min(segment::MAX_RESERVATION_RECORDS);
        let timestamp = now_ns();
        let mut done = 0;
        while done < records.len() {
            // The largest prefix of what is left that fits an empty segment.
            let mut n = 0;
            let mut bytes = 0u64;
            while done + n < records.len() && n < most {
                let len = lens[done + n] as u64 + frame;
                if bytes + len > sizes.region_bytes() as u64 {
                    break;
                }
                bytes += len;
                n += 1;
            }
            debug_assert!(n > 0, "every record fits an empty segment");
            let part = &records[done..done + n];
            let part_lens = &lens[done..done + n];
            self.shared
                .reserve_then(n as u64, bytes, guard, |seg, index, mut pos| {
                    for (k, (record, &len)) in part.iter().zip(part_lens).enumerate() {
                        let i = index + k as u64;
                        // SAFETY: slots `index..index + n` and the bytes from the
                        // reservation's `pos` are ours; each record's range (its
                        // frame, if any, and its encoded length `len`) follows the
                        // previous one's.
                        if !unsafe { seg.write_and_commit(i, pos, len, record, timestamp, frame != 0) } {
                            // Claimed as abandoned (shared logs only): give up
                            // the rest of the part too, so no reader waits the
                            // bound again for slots nobody will commit.
                            seg.claim_abandoned(i + 1, index + n as u64);
                            return Err(seg.base() + i);
                        }
                        offsets.push(seg.base() + i);
                        pos += len as u64 + frame;
                    }
                    Ok(())
                })?
                .map_err(abandoned)?;
            done += n;
            // Let the epoch advance between parts of a long batch.
            guard.repin();
        }
        if let Some(&last) = offsets.last() {
            self.after_append(last + 1, guard)?;
        }
        Ok(())
    }

    /// Sets how long this process waits on an uncommitted reservation, or
    /// an elected sealer that has not sealed, before giving it up, in a log
    /// shared by processes (the crate-internal part of its configuration;
    /// [`dir::ABANDON_AFTER`] by default; see "An abandoned reservation" in
    /// `segment.rs`). Tests shorten it.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn set_abandon_after(&self, bound: std::time::Duration) {
        // Relaxed: a setting read on the cold paths; nothing is published with it.
        self.shared.abandon_after_ns.store(bound.as_nanos().min(u128::from(u64::MAX)) as u64, Ordering::Relaxed);
    }

    /// Makes the next `n` fresh segment allocations of this log fail as if
    /// the system were out of memory. A seam for tests of the failure path;
    /// it exists only in unit tests and loom models.
    #[cfg(any(test, loom))]
    #[doc(hidden)]
    pub fn fail_next_segment_allocations(&self, n: usize) {
        self.shared.pool.fail_next_allocations(n);
    }

    /// A cursor positioned at `offset`, which must be retained:
    /// `first_offset() <= offset <= end_offset()`.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::Error;
    /// use rill::log::{Log, LogConfig, Record};
    ///
    /// let log = Log::new(&LogConfig::default())?;
    /// log.append_batch(&[Record::new(b"a"), Record::new(b"b")], &mut Vec::new())?;
    /// let mut cursor = log.cursor_at(1)?;
    /// assert_eq!(cursor.read().expect("nothing was trimmed").map(|r| r.payload()), Some(&b"b"[..]));
    /// assert!(matches!(log.cursor_at(3), Err(Error::OutOfRange { first: 0, end: 2, .. })));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn cursor_at(&self, offset: u64) -> Result<Cursor> {
        let mut c = Cursor::new(self.shared.clone(), offset);
        c.seek(offset)?;
        Ok(c)
    }

    /// A cursor that continues from `offset`, a position handed out earlier
    /// (for example a durable subscription's). If retention has trimmed it
    /// meanwhile, the first read reports the records missed ([`Lagged`]);
    /// an offset past the end is clamped to the end.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::{Lagged, Log, LogConfig, Record};
    ///
    /// // Two small segments retained: older records are trimmed.
    /// let config = LogConfig { segment_bytes: Some(4096), retention_bytes: Some(8192), ..LogConfig::default() };
    /// let log = Log::new(&config)?;
    /// for _ in 0..200 {
    ///     log.append(&Record::new(&[7; 100]))?;
    /// }
    /// let first = log.first_offset();
    /// let mut cursor = log.cursor_resuming(0); // a position saved before the trim
    /// assert_eq!(cursor.read().err(), Some(Lagged { missed: first, resumed_at: first }));
    /// assert_eq!(log.cursor_resuming(500).offset(), 200); // clamped to the end
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn cursor_resuming(&self, offset: u64) -> Cursor {
        Cursor::new(self.shared.clone(), offset.min(self.end_offset()))
    }

    /// A cursor at the oldest retained record.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::{Log, LogConfig, Record};
    ///
    /// let log = Log::starting_at(&LogConfig::default(), 10)?;
    /// log.append(&Record::new(b"a"))?;
    /// let mut cursor = log.cursor_from_first();
    /// assert_eq!(cursor.offset(), 10);
    /// assert_eq!(cursor.read().expect("nothing was trimmed").map(|r| r.payload()), Some(&b"a"[..]));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn cursor_from_first(&self) -> Cursor {
        let mut c = Cursor::new(self.shared.clone(), 0);
        c.seek_to_first();
        c
    }

    /// A cursor at the end: it reads only records appended from now on.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::{Log, LogConfig, Record};
    ///
    /// let log = Log::new(&LogConfig::default())?;
    /// log.append(&Record::new(b"old"))?;
    /// let mut cursor = log.cursor_from_end();
    /// log.append(&Record::new(b"new"))?;
    /// assert_eq!(cursor.read().expect("nothing was trimmed").map(|r| r.payload()), Some(&b"new"[..]));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn cursor_from_end(&self) -> Cursor {
        let mut c = Cursor::new(self.shared.clone(), 0);
        c.seek_to_end();
        c
    }

    /// The first retained offset whose record was stamped at or after
    /// `timestamp_ns` (nanoseconds since the Unix epoch), or the end offset
    /// if every retained record is older; the oldest retained offset if the
    /// time is before them all.
    ///
    /// It costs two binary searches, `O(log segments + log records in one
    /// segment)`: over the segments by the timestamp of their first record,
    /// then inside the one segment where the time falls.
    ///
    /// # When timestamps are out of order
    ///
    /// A publisher stamps a record just before it reserves its offset, so
    /// records published at once from several threads can be stamped out of
    /// offset order by the time between the two (publishing from one thread,
    /// they are in order). The search treats timestamps as sorted, and what
    /// it finds is then defined as: an offset `o` where the record before
    /// `o` (if any is retained) was stamped before `timestamp_ns` and the
    /// record at `o` (if any) at or after it. With ordered timestamps that is
    /// the first such record; with a few out of order, it is one of the
    /// places where the stamps cross the time, within the disorder around
    /// it: a record stamped a little before the time may follow it, and one
    /// stamped a little after it may precede it. A record still being
    /// written (reserved, not committed) counts as at or after the time (it
    /// is as new as anything in the log), so the search never moves past it.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::{Log, LogConfig, Record};
    ///
    /// let log = Log::new(&LogConfig::default())?;
    /// log.append_batch(&[Record::new(b"a"), Record::new(b"b")], &mut Vec::new())?;
    /// let mut cursor = log.cursor_from_first();
    /// let first = cursor.read().expect("nothing was trimmed").expect("committed").timestamp_ns();
    /// assert_eq!(log.offset_at_time(0), 0); // before every record: the oldest
    /// assert_eq!(log.offset_at_time(first), 0);
    /// assert_eq!(log.offset_at_time(u64::MAX), 2); // after every record: the end
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn offset_at_time(&self, timestamp_ns: u64) -> u64 {
        let guard = epoch::pin();
        let dir = self.shared.dir(&guard);
        // Record `index` of `seg` counts as at or after the time.
        let at_or_after = |seg: &Segment, index: u64| match seg.committed(index) {
            Some(pos) => seg.view(index, pos).timestamp_ns() >= timestamp_ns,
            None => true,
        };
        // Segments whose first record is older than the time form a prefix;
        // the time falls in the last of them (or before them all). A segment
        // without records (sealed early, or the newest, still empty) goes
        // with the next one that has some, which keeps the prefix a prefix;
        // so the last segment of the prefix has records.
        let segs = &dir.segs;
        let older_from = |i: usize| segs[i..].iter().find(|s| s.reserved() > 0).is_some_and(|seg| !at_or_after(seg, 0));
        let (mut lo, mut hi) = (0, segs.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if older_from(mid) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let older = lo;
        let Some(seg) = older.checked_sub(1).map(|i| &segs[i]) else {
            return dir.first_offset();
        };
        // Inside it, record 0 is older; find the first of the rest that is not.
        let count = seg.reserved();
        let (mut lo, mut hi) = (1, count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if at_or_after(seg, mid) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        // `lo - 1` is committed, so `lo` is at most the segment's true count
        // (a reservation that overfilled it is never committed): either a
        // record here or the next segment's first offset (or the end).
        seg.base() + lo
    }

    /// Applies the age limit (`retention_ms`) now: if the oldest segment's
    /// records have all expired (and no reader retention waits for holds
    /// them), seals the newest segment early so that its roll trims them,
    /// as a publish that filled it would. For partitions nobody publishes
    /// to, where no roll would come; the broker calls it from a timer. Does
    /// nothing without an age limit. Fails only if the next segment cannot
    /// be allocated.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use rill::log::{Log, LogConfig, Record};
    ///
    /// let log = Log::new(&LogConfig { retention_ms: Some(1), ..LogConfig::default() })?;
    /// log.append(&Record::new(b"short-lived"))?;
    /// // Nobody publishes again: only `expire` trims the record, once 1 ms old.
    /// let deadline = Instant::now() + Duration::from_secs(5);
    /// while log.first_offset() == 0 && Instant::now() < deadline {
    ///     log.expire()?;
    /// }
    /// assert_eq!((log.first_offset(), log.end_offset()), (1, 1));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn expire(&self) -> Result<()> {
        self.shared.expire(self.shared.expired_before())
    }

    /// [`Log::expire`] as if the time were `now_ns`, for models and tests that
    /// cannot wait for a clock (a loom model races the early seal against
    /// publishers with `u64::MAX`: everything has expired). Only the decision
    /// to seal uses `now_ns`; the roll's trim reads the clock as usual.
    #[cfg(any(test, loom))]
    #[doc(hidden)]
    pub fn expire_as_of(&self, now_ns: u64) -> Result<()> {
        let expired_before =
            (self.shared.sizes.retention_ns != u64::MAX).then(|| now_ns.saturating_sub(self.shared.sizes.retention_ns));
        self.shared.expire(expired_before)
    }

    /// The oldest retained offset.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::{Log, LogConfig, Record};
    ///
    /// let config = LogConfig { segment_bytes: Some(4096), retention_messages: Some(10), ..LogConfig::default() };
    /// let log = Log::new(&config)?;
    /// assert_eq!(log.first_offset(), 0);
    /// for _ in 0..200 {
    ///     log.append(&Record::new(&[7; 100]))?;
    /// }
    /// // Whole segments were trimmed; at least the newest 10 records are kept.
    /// assert!(log.first_offset() > 0 && log.first_offset() <= 190);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn first_offset(&self) -> u64 {
        let guard = epoch::pin();
        self.shared.dir(&guard).first_offset()
    }

    /// One past the newest offset handed out (some of the newest may still be
    /// uncommitted).
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::{Log, LogConfig, Record};
    ///
    /// let log = Log::starting_at(&LogConfig::default(), 5)?;
    /// assert_eq!(log.end_offset(), 5);
    /// log.append(&Record::new(b"a"))?;
    /// assert_eq!(log.end_offset(), 6);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn end_offset(&self) -> u64 {
        let guard = epoch::pin();
        self.shared.dir(&guard).end_offset()
    }

    /// A snapshot of the log's size.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::{Log, LogConfig, Record};
    ///
    /// let log = Log::new(&LogConfig::default())?;
    /// log.append_batch(&[Record::new(b"a"), Record::new(b"b")], &mut Vec::new())?;
    /// let stats = log.stats();
    /// assert_eq!((stats.first_offset, stats.end_offset, stats.segments), (0, 2, 1));
    /// assert_eq!(stats.used_bytes, 2 * Record::new(b"a").encoded_len()? as u64);
    /// assert_eq!((stats.trimmed_segments, stats.sync_rounds), (0, 0));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn stats(&self) -> LogStats {
        let (compacted_records, compacted_bytes, compaction_passes, compaction_keys) = compact::stats(&self.shared);
        let guard = epoch::pin();
        let dir = self.shared.dir(&guard);
        LogStats {
            first_offset: dir.first_offset(),
            end_offset: dir.end_offset(),
            segments: dir.segs.len(),
            retained_bytes: dir.segs.iter().map(|s| s.capacity()).sum(),
            used_bytes: dir.segs.iter().map(|s| s.used_bytes()).sum(),
            // Relaxed: statistics.
            trimmed_segments: self.shared.trimmed_segments.load(Ordering::Relaxed),
            spare_segments: self.shared.pool.spare_count(),
            // Relaxed: statistics.
            sync_rounds: self.shared.durability.as_ref().map_or(0, |d| d.rounds.load(Ordering::Relaxed)),
            durable_waits: self.shared.durability.as_ref().map_or(0, |d| d.waits.load(Ordering::Relaxed)),
            unmarked_segments: self.shared.durability.as_ref().map_or(0, |d| {
                // Every segment below this base is marked; of those from it
                // on, the sealed ones are not yet.
                let marked_below = d.marked_below();
                dir.segs.iter().filter(|s| s.base() >= marked_below && s.sealed_count().is_some()).count()
            }),
            compacted_records,
            compacted_bytes,
            compaction_passes,
            compaction_keys,
        }
    }

    /// Runs one compaction pass over this log's sealed segments if it has
    /// work: the segments sealed since the last pass are half the sealed log,
    /// or a kept record has become removable by `now_ns` (see `compact.rs`).
    /// Returns whether a pass ran. Publishers never wait for it; readers
    /// see either the old or the rebuilt segment, whole.
    ///
    /// Fails with [`Error::InvalidArgument`] for a durable log (compaction
    /// of segment files is not implemented), and with
    /// [`Error::ResourceExhausted`] if a rebuilt segment cannot be
    /// allocated (nothing is replaced then).
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::{CompactionPolicy, Log, LogConfig, Record};
    ///
    /// let log = Log::new(&LogConfig { segment_bytes: Some(4096), ..LogConfig::default() })?;
    /// for i in 0..200u32 {
    ///     log.append(&Record::new(&i.to_le_bytes()).with_key(if i % 2 == 0 { b"even" } else { b"odd" }))?;
    /// }
    /// let policy = CompactionPolicy { min_lag_ns: 0, tombstone_ns: u64::MAX };
    /// assert!(log.compact(&policy, rill::clock::now_ns())?);
    /// let stats = log.stats();
    /// assert!(stats.compacted_records > 0 && stats.compaction_keys == 2);
    /// // Offsets are unchanged; the removed ones are gaps a reader passes over.
    /// let mut cursor = log.cursor_from_first();
    /// let mut read = 0;
    /// while let Some(record) = cursor.read().expect("nothing was trimmed") {
    ///     assert_eq!(record.payload(), (record.offset() as u32).to_le_bytes());
    ///     read += 1;
    /// }
    /// assert_eq!(read + stats.compacted_records, 200);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn compact(&self, policy: &CompactionPolicy, now_ns: u64) -> Result<bool> {
        if self.is_durable() {
            return Err(Error::InvalidArgument(
                "compaction of a durable log (segment files) is not implemented".into(),
            ));
        }
        compact::run(&self.shared, policy, now_ns)
    }

    /// Keeps retention from trimming any segment holding an offset at or above
    /// `position` (read at each rollover), until `release_retention(id)`. For
    /// readers that must not lose messages.
    pub(crate) fn hold_retention(&self, id: u64, position: Arc<AtomicU64>) {
        self.shared.holds.lock().push((id, position));
    }

    /// Ends the hold `id` placed with [`Log::hold_retention`].
    pub(crate) fn release_retention(&self, id: u64) {
        self.shared.holds.lock().retain(|(i, _)| *i != id);
    }

    /// Like [`Log::end_offset`], for a caller already pinned.
    #[inline]
    pub(crate) fn end_offset_pinned(&self, guard: &Guard) -> u64 {
        self.shared.dir(guard).end_offset()
    }
}

impl fmt::Debug for Log {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Log").field("sizes", &self.shared.sizes).field("stats", &self.stats()).finish()
    }
}

/// A snapshot of a log's size and retention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogStats {
    /// Oldest retained offset.
    pub first_offset: u64,
    /// One past the newest offset handed out.
    pub end_offset: u64,
    /// Retained segments.
    pub segments: usize,
    /// Memory of the retained segments' record regions.
    pub retained_bytes: u64,
    /// Bytes of those regions filled with records.
    pub used_bytes: u64,
    /// Segments trimmed by retention since the log was created.
    pub trimmed_segments: u64,
    /// Segment buffers kept for reuse.
    pub spare_segments: usize,
    /// Sync rounds of a durable log that made something durable (each one
    /// data sync per segment file it touched): by [`Log::sync`], by `Always`
    /// appends and at close.
    pub sync_rounds: u64,
    /// Appends that waited for durability (`Always`). With group commit,
    /// concurrent publishers make this larger than `sync_rounds`.
    pub durable_waits: u64,
    /// Sealed segments of a durable log whose completion marker is not
    /// written yet (0 in memory): the next sync round writes it (see
    /// [`Log::flusher_round`]; an `Always` append into a later segment
    /// returns only once it is written). Damage in a segment that has its
    /// marker is [`Error::Corrupt`] at the next open; in one that has not,
    /// it may pass for a torn tail.
    pub unmarked_segments: usize,
    /// Records compaction removed ([`Log::compact`]).
    pub compacted_records: u64,
    /// Their bytes, as they took in their segments.
    pub compacted_bytes: u64,
    /// Compaction passes run.
    pub compaction_passes: u64,
    /// Distinct keys of the sealed segments with a record kept after the
    /// last compaction pass (a tombstone not yet expired counts; keys only
    /// in the segment being written do not).
    pub compaction_keys: u64,
}

#[cfg(all(test, not(loom)))]
mod durable_tests;
#[cfg(all(test, not(loom)))]
mod procs_tests;
#[cfg(all(test, not(loom)))]
mod tests;
