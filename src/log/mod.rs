//! The lock-free segmented append log: one per topic partition.
//!
//! A [`Log`] is a chain of segments. Publishers append to the newest one
//! (see `segment.rs` for the reservation protocol); every reader has its own
//! [`Cursor`] and reads at its own pace, borrowing records in place.
//!
//! The parts: `config.rs` (sizes and retention), `segment.rs` (one segment
//! and its reservation protocol), `pool.rs` (the spare buffers segments are
//! built over), `dir.rs` (the directory of segments, its rollover and
//! reclamation: the essay on how the log stays lock-free across segments),
//! `prefault.rs` (a fresh segment faulted in ahead of its publishers, and a
//! streaming memory log's next segment made ahead),
//! `cursor.rs` (readers), `record.rs` (the byte layout), `storage.rs` (the
//! memory behind a segment) and `compact.rs` with `compact_state.rs`
//! (compaction). The `Log` handle is this file (appends, retention, stats)
//! with `open.rs` (making a log), `read.rs` (where a cursor starts) and
//! `flush.rs` (a durable log's syncs).
//!
//! A durable log ([`Log::open`]) keeps its segments in files: `file/` (the
//! file format and its checksums, and the files' life), `recovery.rs`
//! (rebuilding a partition from its files: what a crash leaves and what is
//! kept), `resync.rs` (finding the next record past a hole) and
//! `durable.rs` (the fsync policy and group commit).

mod compact;
mod compact_state;
mod config;
mod cursor;
mod dir;
mod durable;
pub(crate) mod file;
mod flush;
mod open;
mod pool;
#[cfg(not(loom))]
mod prefault;
mod read;
pub(crate) mod record;
pub(crate) mod recovery;
mod resync;
pub(crate) mod segment;
pub(crate) mod storage;

use std::fmt;

pub use compact::CompactionPolicy;
pub(crate) use compact::KeyHasher;
pub use config::{
    DEFAULT_MAX_RECORD_BYTES, DEFAULT_RETENTION_BYTES, DEFAULT_SEGMENT_BYTES, LogConfig, MIN_SEGMENT_BYTES,
};
pub use cursor::{Batch, BatchIter, Cursor, Lagged};
use dir::Shared;
pub use durable::{DEFAULT_FSYNC_INTERVAL, Damage, DurableLog, Fsync, RecoveryReport};
pub(crate) use record::Measured;
pub use record::{
    Attributes, ID_ATTRIBUTE, MAX_ATTRIBUTE_KEY_LEN, MAX_ATTRIBUTES, MAX_ID_LEN, Record, RecordParts, RecordView,
};
#[cfg(loom)]
use segment::Segment;

use crate::clock::now_ns;
use crate::error::{Error, PublishFailure, Result};
use crate::sync::Arc;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::epoch::{self, Guard};

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

#[cfg(loom)]
impl Log {
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
        let mut lens = Vec::new();
        let batch = self.measure(records, &mut lens)?;
        self.append_measured_pinned(batch, offsets, guard)
    }

    /// Measures every record of `records` as an append does (its encoded
    /// length, refused if it cannot be encoded or is larger than
    /// [`Log::max_record_bytes`]), each length kept in `lens` (cleared
    /// first), for [`Log::append_measured_pinned`]: a caller that must
    /// check a whole batch before appending any of it (the broker's) then
    /// has it appended without a second measure.
    pub(crate) fn measure<'r, 'a>(
        &self,
        records: &'r [Record<'a>],
        lens: &'r mut Vec<usize>,
    ) -> Result<Measured<'r, 'a>> {
        lens.clear();
        lens.reserve(records.len());
        for r in records {
            lens.push(self.check_size(r)?);
        }
        Ok(Measured { records, lens, max: self.shared.sizes.max_record_bytes })
    }

    /// [`Log::append_batch_pinned`] for a batch already measured
    /// ([`Log::measure`]), by this log or one whose size limit is at most
    /// this one's; a batch measured against a larger limit is measured
    /// again, so nothing larger than this log's limit is ever appended.
    pub(crate) fn append_measured_pinned(
        &self,
        batch: Measured<'_, '_>,
        offsets: &mut Vec<u64>,
        guard: &mut Guard,
    ) -> Result<()> {
        if batch.max > self.shared.sizes.max_record_bytes {
            return self.append_batch_pinned(batch.records, offsets, guard);
        }
        offsets.clear();
        let (records, lens) = (batch.records, batch.lens);
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

    /// The records a reader at `offset` has yet to read, for a report made
    /// at the end of every drain round: [`Log::end_offset`] less `offset`,
    /// except that a reader whose next record is not committed yet (it has
    /// caught up) is at 0 without a load of the tail word. That word is
    /// the one every publisher's fetch-add writes: a reader loading it each
    /// round takes it out of the publisher's cache each time, and the next
    /// publish waits for it (the `ipc` scenario's latency run, where every
    /// round is one message). A record reserved and not committed yet
    /// counts once it is committed.
    pub(crate) fn lag_from(&self, offset: u64) -> u64 {
        let guard = epoch::pin();
        let dir = self.shared.dir(&guard);
        let last = dir.last();
        if let Some(index) = offset.checked_sub(last.base()).filter(|&i| i < last.slot_count()) {
            // The slot's state is on the line the reader polls anyway.
            if last.committed(index).is_none() && !last.is_abandoned(index) {
                return 0;
            }
        }
        dir.end_offset().saturating_sub(offset)
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

    /// A log shared by processes: installs in this process's directory the
    /// segments other processes rolled to since it last looked, so that
    /// [`Log::stats`] counts their records (a process that neither publishes
    /// nor reads a partition otherwise sees its end as of its own last roll).
    /// What a reader at the sealed end would do (see "The roll across
    /// processes" in `dir.rs`), never making a file. Nothing for a log of
    /// one process, whose rolls its own threads install.
    pub(crate) fn follow_rolls(&self) -> Result<()> {
        #[cfg(not(loom))]
        if self.shared.processes {
            self.shared.follow_rolls()?;
        }
        Ok(())
    }

    /// Runs one compaction pass over this log's sealed segments if it has
    /// work: the segments sealed since the last pass are half the sealed log,
    /// or a kept record has become removable by `now_ns` (see `compact.rs`).
    /// Returns whether a pass ran. Publishers never wait for it; readers
    /// see either the old or the rebuilt segment, whole.
    ///
    /// On a durable log each rebuilt segment is a new segment file that
    /// replaces the old one by a rename, so a crash at any moment leaves
    /// one of the two whole (see `file/rebuild.rs`). On a durable log
    /// shared by processes, it first follows the swaps other processes
    /// made, and runs a pass only if this process wins the partition's
    /// compaction lock (see "The swap across processes" in `compact.rs`).
    /// Fails with [`Error::ResourceExhausted`] if a rebuilt segment cannot be
    /// allocated, and with [`Error::Io`] if its file cannot be written
    /// (the segments rebuilt before are installed, the others are left as
    /// they were).
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
    /// let policy = CompactionPolicy { min_lag_ns: 0, tombstone_ns: u64::MAX, id_lag_ns: 0 };
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
        #[cfg(not(loom))]
        if self.shared.processes {
            return compact::run_shared(&self.shared, policy, now_ns);
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

/// For the layout tests of structs whose fields are ordered for the
/// publish path (`repr(C)`, the fields an append reads first): the end of
/// the `hot` fields (offset, size) and the start of the `cold` ones.
#[cfg(all(test, not(loom)))]
pub(crate) fn hot_then_cold(hot: &[(usize, usize)], cold: &[usize]) -> (usize, usize) {
    let end = hot.iter().map(|(at, len)| at + len).max().unwrap_or(0);
    (end, cold.iter().copied().min().unwrap_or(usize::MAX))
}
