//! Making a [`Log`]: in memory, for loom models, opened from a data
//! directory (recovering what a crash left: `recovery.rs`), and joined by a
//! process that shares the directory with others (`dir.rs`, "The roll
//! across processes").

use super::config::{self, LogConfig, SPARE_SEGMENTS};
use super::dir::{self, Dir, Shared};
use super::durable::{self, Durability, DurableLog, Fsync, RecoveryReport};
use super::file::{self, Files, MapLocks};
use super::pool::Pool;
use super::segment::{self, Segment};
use super::storage::{Pages, SegmentStorage};
use super::{Log, Sharing, compact_state, recovery};
#[cfg(not(loom))]
use crate::error::Error;
use crate::error::Result;
use crate::sync::atomic::AtomicU64;
use crate::sync::epoch;
use crate::sync::{Arc, Mutex};

impl Log {
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
                files_closed: crate::sync::atomic::AtomicBool::new(false),
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
    /// [`Log::join_with`]; see "The roll across processes" in `dir.rs`).
    pub(crate) fn open_in(
        config: &LogConfig,
        partition: u32,
        durable: &DurableLog,
        sharing: Sharing,
    ) -> Result<(Log, RecoveryReport)> {
        Self::open_with(config, partition, durable, sharing, None)
    }

    /// [`Log::open_in`]; shared by processes, its mappings locked in `maps`
    /// (a broker's, one per data directory), or, if `None`, in a lock file
    /// of the partition's own (see `file/map_locks.rs`).
    pub(crate) fn open_with(
        config: &LogConfig,
        partition: u32,
        durable: &DurableLog,
        sharing: Sharing,
        maps: Option<&Arc<MapLocks>>,
    ) -> Result<(Log, RecoveryReport)> {
        let processes = sharing == Sharing::Processes;
        let mut sizes = config.resolve()?;
        sizes.frame = file::FRAME_LEN as u64;
        crate::clock::warm_up();
        durable::prepare_dir(&durable.dir)?;
        let recovered = recovery::recover(&durable.dir, durable.repair)?;
        let flush = durable.fsync != Fsync::Never;
        let files = Files::new(durable.dir.clone(), flush);
        #[cfg(not(loom))]
        let files = if processes { files.shared_with(map_locks(durable, maps)?) } else { files };
        #[cfg(loom)]
        let _ = maps;
        // No trimmed file kept by the pool when shared: it may still be
        // mapped by another process, so it is freed for reuse by the last
        // process to let go of it, in the directory, and the pool's one
        // spare is a free file claimed for the next roll (see "Recycling
        // across processes" in `file/mod.rs`).
        let spares = if processes { 0 } else { SPARE_SEGMENTS };
        let pool = Pool::for_files(sizes.region_bytes(), sizes.slots, spares, files);
        let pool = Arc::new(if processes { shared_files(pool) } else { pool });
        let mut segs = Vec::with_capacity(recovered.kept.len() + 1);
        // Nothing cut anywhere: the last file may be resumed (see "Resuming
        // the last file" in `recovery.rs`).
        let report = &recovered.report;
        let uncut = report.truncated_at.is_none() && report.truncated_records == 0 && report.truncated_bytes == 0;
        let last = recovered.kept.len().checked_sub(1);
        let mut resumed = false;
        for (i, kept) in recovered.kept.into_iter().enumerate() {
            let count = kept.positions.len() as u64;
            // Shared: held as every mapping is (no other process has the
            // directory yet, so no one is freeing it).
            if let Some(files) = pool.files() {
                files.hold(&kept.storage)?;
            }
            if flush && !kept.was_complete {
                kept.storage.flush_region(0, kept.used)?;
            }
            let storage: Box<dyn SegmentStorage> = Box::new(kept.storage);
            let buffers = segment::Buffers::over(storage, kept.positions.len(), Pages::Small)?;
            if Some(i) == last
                && uncut
                && !kept.was_complete
                && !kept.skips
                && count > 0
                && Segment::holds_exactly(&buffers, count, kept.used)
            {
                // Its records are whole (and flushed, above): damage among
                // them is damage at the next open, never a crash's hole.
                let file = buffers.storage().as_file().expect("a recovered segment is a file");
                // SAFETY: the log is not shared yet; nothing else writes the prefix.
                unsafe { file.mark_prefix(count, kept.used, flush)? };
                // Its pages past the records are faulted in ahead of its
                // tail, as a new file's ("Ahead of the tail" in `prefault.rs`).
                let buffers = buffers.unfaulted();
                segs.push(Arc::new(Segment::resumed(kept.base, buffers, pool.clone(), &kept.positions, kept.used)));
                resumed = true;
                continue;
            }
            // Make the cut permanent and every kept segment checkable: data,
            // then the completion marker (see `file/format.rs`).
            if !kept.was_complete {
                let file = buffers.storage().as_file().expect("a recovered segment is a file");
                file.mark_complete(count, kept.used, flush)?;
            }
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
        if !resumed {
            segs.push(Arc::new(Segment::new(end, pool.take(end, Pages::Small)?, pool.clone())));
        }
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
        let newest = segs.last().expect("a log has a newest segment").base();
        let durability = Durability::new(end, newest);
        Ok((Self::assemble(sizes, partition, segs, pool, Some((durability, durable.fsync)), processes), report))
    }

    /// [`Log::join_with`], its mappings locked in a lock file of the
    /// partition's own: each join in one process stands in for another
    /// process (see `file/map_locks.rs`).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn join(config: &LogConfig, partition: u32, durable: &DurableLog) -> Result<Log> {
        Self::join_with(config, partition, durable, None)
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
    /// see "Several processes" in `broker/store/mod.rs`).
    ///
    /// Its mappings are locked in `maps` (a broker's), or in a lock file of
    /// the partition's own if `None` (see [`Log::open_with`]).
    #[cfg(not(loom))]
    pub(crate) fn join_with(
        config: &LogConfig,
        partition: u32,
        durable: &DurableLog,
        maps: Option<&Arc<MapLocks>>,
    ) -> Result<Log> {
        let mut sizes = config.resolve()?;
        sizes.frame = file::FRAME_LEN as u64;
        crate::clock::warm_up();
        let files =
            Files::new(durable.dir.clone(), durable.fsync != Fsync::Never).shared_with(map_locks(durable, maps)?);
        let pool = Arc::new(shared_files(Pool::for_files(sizes.region_bytes(), sizes.slots, 0, files)));
        let segs = dir::list_shared_segments(&pool)?;
        if segs.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "{}: no segment file to join (the partition's first opener makes one)",
                durable.dir.display()
            )));
        }
        let durability = Durability::new(segs[0].base(), segs[0].base());
        Ok(Self::assemble(sizes, partition, segs, pool, Some((durability, durable.fsync)), true))
    }
}

/// The locks of a log shared by processes: `maps`, or the partition's own.
#[cfg(not(loom))]
fn map_locks(durable: &DurableLog, maps: Option<&Arc<MapLocks>>) -> Result<Arc<MapLocks>> {
    match maps {
        Some(maps) => Ok(maps.clone()),
        None => MapLocks::open(&durable.dir),
    }
}

/// `pool`, a pool of segment files, for a log shared by processes: its
/// trimmed files, which it keeps for no reuse, are let go on the prefault
/// thread ("A trimmed file let go behind" in `prefault.rs`).
fn shared_files(pool: Pool) -> Pool {
    #[cfg(not(loom))]
    return pool.shared_by_processes().letting_go_with(super::prefault::let_go);
    // Loom models have no prefault thread: the file is dropped where it is.
    #[cfg(loom)]
    pool.shared_by_processes()
}
