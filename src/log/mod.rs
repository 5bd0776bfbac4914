//! The lock-free segmented append log: one per topic partition.
//!
//! A [`Log`] is a chain of segments. Publishers append to the newest one
//! (see `segment.rs` for the reservation protocol); every reader has its own
//! [`Cursor`] and reads at its own pace, borrowing records in place.
//!
//! # The segment directory and reclamation
//!
//! The retained segments are listed, oldest first, in an immutable *directory*
//! (`Dir`): a vector of `Arc<Segment>` published through one
//! `crossbeam_epoch::Atomic`. The directory is what makes seeking
//! `O(log segments)` (a binary search on the segments' base offsets) and what
//! retention edits.
//!
//! * **Writers of the directory.** Only the publisher that sealed the newest
//!   segment replaces the directory: it builds a new one (the old segments plus
//!   the next segment, minus whatever retention trims from the head) and
//!   installs it with a `Release` compare-exchange. Sealers are serialised by
//!   construction: a segment can only be sealed once it is the newest, and it
//!   only becomes the newest when the previous sealer has installed it. So the
//!   directory has one writer at a time without a lock, with the one exception
//!   below.
//! * **A roll that fails.** The sealer may be unable to map the next segment
//!   (out of memory or address space). It cannot hand its reservation back, so
//!   instead it publishes a *stalled* copy of the directory: the same segments
//!   (the newest already sealed, so its final count is known), flagged with
//!   the error. Every publisher checks that flag where it loads the directory,
//!   before it reserves, so:
//!   - publishers waiting for this roll (they got `Full`) see the stalled
//!     directory and return the error instead of waiting for ever;
//!   - later publishers do not reserve in the dead segment (so failed
//!     reservations stay bounded, see `segment.rs`); each one tries the roll
//!     itself: maps the next segment and installs it with a compare-exchange
//!     against the stalled directory. Several may try at once; one exchange
//!     wins, the others drop what they built and retry in the new segment. A
//!     publisher whose own mapping fails returns the error.
//!
//!   So a partition that ran out of memory fails the publishes that need a new
//!   segment, with a clear error, and works again as soon as a mapping succeeds.
//! * **Readers of the directory** (publishers finding the newest segment,
//!   cursors moving to another segment) pin an epoch, load the directory with
//!   `Acquire` (pairing with the swap, so the new segment's initial state is
//!   visible), and use it only while pinned. (This pair is L2 to
//!   `.ci/fence-check`, which weakens both sides to `Relaxed`.)
//! * **Reclamation.** The replaced directory is retired with
//!   `Guard::defer_destroy` and flushed, so it is freed once no thread can still
//!   be reading it. Freeing it drops its `Arc`s; a trimmed segment's memory is
//!   released (to the partition's spare pool, or to the allocator) when its
//!   last `Arc` goes.
//! * **Slow readers.** A cursor does not stay pinned while its user works on a
//!   record: while pinned it *clones the segment's `Arc`* and unpins. The `Arc`
//!   keeps the segment's bytes alive for as long as the cursor is inside it,
//!   whatever retention does meanwhile; pinning only covers the few loads
//!   between reading the directory and incrementing the count. Publishers pin
//!   for the length of one append, which never runs user code.
//! * **Falling behind.** After publishing a directory without them, the sealer
//!   marks the trimmed segments (`Release`). A cursor checks its segment's mark
//!   (`Acquire`) before each read; once it is set, or whenever the cursor leaves
//!   a segment, it looks up its next offset in the current directory. If
//!   retention has trimmed past it, the cursor learns how many records it
//!   missed ([`Lagged`]) and continues from the oldest retained one. Records
//!   older than retention are never delivered after their trim is visible.
//!
//! Memory held by a partition is bounded by its retention, plus the spare pool,
//! plus at most one trimmed segment per cursor that is still inside it.

mod cursor;
pub(crate) mod record;
pub(crate) mod segment;
pub(crate) mod storage;

use std::fmt;

pub use cursor::{Batch, BatchIter, Cursor, Lagged};
pub use record::{Attributes, MAX_ATTRIBUTE_KEY_LEN, MAX_ATTRIBUTES, Record, RecordView};
use segment::{Pool, Reservation, Segment};

use crate::clock::now_ns;
use crate::error::{Error, Result};
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::epoch::{self, Guard, Owned};
use crate::sync::{Arc, Backoff, Mutex};

/// Default retention of a partition: 256 MiB of segments.
pub const DEFAULT_RETENTION_BYTES: u64 = 256 << 20;
/// Default segment size, unless retention is small enough to call for less.
pub const DEFAULT_SEGMENT_BYTES: usize = 4 << 20;
/// Default largest record (encoded, header included).
pub const DEFAULT_MAX_RECORD_BYTES: usize = 1 << 20;
/// Smallest segment the log accepts.
#[cfg(not(loom))]
pub const MIN_SEGMENT_BYTES: usize = 4 << 10;
/// Smallest segment the log accepts (shrunk for loom models).
#[cfg(loom)]
pub const MIN_SEGMENT_BYTES: usize = 32;
/// Average record size the offset index is sized for: one slot per this many bytes.
const BYTES_PER_SLOT: usize = 32;
/// Spare segment buffers a partition keeps for reuse.
const SPARE_SEGMENTS: usize = 2;

/// How a partition's log is sized and how much it retains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Trim the oldest segments once the retained segments hold more than this
    /// many bytes. `None` keeps everything (memory is then unbounded).
    pub retention_bytes: Option<u64>,
    /// Trim the oldest segment whenever the newer ones still hold at least this
    /// many records. `None`: no limit by count.
    pub retention_messages: Option<u64>,
    /// Size of one segment's record region. `None` picks
    /// [`DEFAULT_SEGMENT_BYTES`], or a quarter of `retention_bytes` if smaller.
    pub segment_bytes: Option<usize>,
    /// Largest encoded record accepted. `None` picks
    /// [`DEFAULT_MAX_RECORD_BYTES`], or the segment size if smaller.
    pub max_record_bytes: Option<usize>,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            retention_bytes: Some(DEFAULT_RETENTION_BYTES),
            retention_messages: None,
            segment_bytes: None,
            max_record_bytes: None,
        }
    }
}

/// A `LogConfig` with every choice made and checked.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    segment_bytes: usize,
    slots: usize,
    max_record_bytes: usize,
    retention_bytes: u64,
    retention_messages: u64,
}

impl LogConfig {
    /// Checks the configuration as `Log::new` would, without mapping a
    /// segment (the broker validates its default topic options this way).
    pub(crate) fn validate(&self) -> Result<()> {
        self.resolve().map(drop)
    }

    fn resolve(&self) -> Result<Sizes> {
        let invalid = |what: String| Err(Error::InvalidArgument(what));
        let retention_bytes = self.retention_bytes.unwrap_or(u64::MAX);
        if retention_bytes < 2 * MIN_SEGMENT_BYTES as u64 {
            return invalid(format!("retention_bytes must be at least {} (two segments)", 2 * MIN_SEGMENT_BYTES));
        }
        let retention_messages = self.retention_messages.unwrap_or(u64::MAX);
        if retention_messages == 0 {
            return invalid("retention_messages must be at least 1".into());
        }
        let segment_bytes = match self.segment_bytes {
            Some(n) => {
                if !(MIN_SEGMENT_BYTES..=segment::MAX_SEGMENT_BYTES).contains(&n) {
                    return invalid(format!(
                        "segment_bytes must be between {MIN_SEGMENT_BYTES} and {}",
                        segment::MAX_SEGMENT_BYTES
                    ));
                }
                if (n as u64).saturating_mul(2) > retention_bytes {
                    return invalid(format!(
                        "segment_bytes {n} is more than half of retention_bytes {retention_bytes}"
                    ));
                }
                n
            }
            None => {
                let quarter = usize::try_from(retention_bytes / 4).unwrap_or(usize::MAX);
                DEFAULT_SEGMENT_BYTES.min(quarter).max(MIN_SEGMENT_BYTES)
            }
        };
        let segment_bytes = segment_bytes & !(record::RECORD_ALIGN - 1);
        let max_record_bytes = match self.max_record_bytes {
            Some(n) if n < record::HEADER_LEN || n > segment_bytes => {
                return invalid(format!(
                    "max_record_bytes must be between {} and the segment size {segment_bytes}",
                    record::HEADER_LEN
                ));
            }
            Some(n) => n,
            None => DEFAULT_MAX_RECORD_BYTES.min(segment_bytes),
        };
        let slots = (segment_bytes / BYTES_PER_SLOT).clamp(1, segment::MAX_SEGMENT_RECORDS);
        Ok(Sizes { segment_bytes, slots, max_record_bytes, retention_bytes, retention_messages })
    }
}

/// The retained segments, oldest first; consecutive segments are contiguous
/// in offsets. Never empty; all but the last are sealed.
struct Dir {
    segs: Vec<Arc<Segment>>,
    /// Set when the newest segment is sealed but its successor could not be
    /// allocated: why (see "A roll that fails" above). Beside `segs`, so the
    /// publishers' check costs no extra cache line.
    stalled: Option<String>,
}

impl Dir {
    fn first_offset(&self) -> u64 {
        self.segs[0].base()
    }

    fn last(&self) -> &Arc<Segment> {
        self.segs.last().expect("a directory is never empty")
    }

    /// The segment that holds (or will hold) `offset`, which is at least
    /// `first_offset()`: the last one whose base is not above it.
    fn find(&self, offset: u64) -> &Arc<Segment> {
        let after = self.segs.partition_point(|s| s.base() <= offset);
        &self.segs[after.saturating_sub(1)]
    }

    fn end_offset(&self) -> u64 {
        let last = self.last();
        last.base() + last.reserved()
    }
}

/// What a log shares between its handle and its cursors.
struct Shared {
    sizes: Sizes,
    /// The partition this log belongs to, for errors that name it.
    partition: u32,
    dir: epoch::Atomic<Dir>,
    pool: Arc<Pool>,
    /// Readers that retention must wait for: it never trims a segment holding
    /// an offset at or above any of their positions. Read once per rollover.
    holds: Mutex<Vec<(u64, Arc<AtomicU64>)>>,
    /// Segments trimmed by retention so far.
    trimmed_segments: AtomicU64,
}

impl Shared {
    /// The current directory, valid while `guard` is pinned.
    #[inline]
    fn dir<'g>(&self, guard: &'g Guard) -> &'g Dir {
        // SAFETY: the directory pointer is set at construction and only ever
        // replaced by another valid one; a replaced directory is retired with
        // `defer_destroy`, so it stays alive while `guard` is pinned.
        unsafe { self.dir_ptr(guard).deref() }
    }

    /// The current directory's pointer (for a compare-exchange against it).
    #[inline]
    fn dir_ptr<'g>(&self, guard: &'g Guard) -> epoch::Shared<'g, Dir> {
        // Acquire: pairs with the Release exchanges in `install_next` and
        // `stall`, so the segments it names (and its error text) are fully
        // initialised.
        self.dir.load(crate::sync::ordering_or_weakened!("L2", Ordering::Acquire), guard)
    }

    /// Reserves `records` slots and `bytes` bytes in the newest segment and
    /// hands the range to `write` (segment, first index, first byte). Rolls
    /// over to a new segment, or waits for another publisher's roll, as
    /// needed. Fails only if the next segment cannot be allocated.
    #[inline]
    fn reserve_then<R>(
        &self,
        records: u64,
        bytes: u64,
        guard: &mut Guard,
        write: impl FnOnce(&Segment, u64, u64) -> R,
    ) -> Result<R> {
        let mut write = Some(write);
        loop {
            let current = self.dir_ptr(guard);
            // SAFETY: as in `dir`: a valid directory, alive while `guard` is pinned.
            let dir = unsafe { current.deref() };
            if dir.stalled.is_some() {
                // A roll failed; try it again ourselves (see the module docs).
                self.install_next(current, guard)?;
                continue;
            }
            let seg = dir.last();
            match seg.reserve(records, bytes) {
                Reservation::Granted { index, pos } => {
                    let write = write.take().expect("a reservation is granted once");
                    return Ok(write(seg, index, pos));
                }
                Reservation::Sealer { count } => self.roll(seg, count, current, guard)?,
                Reservation::Full => self.wait_for_roll(seg.base(), guard)?,
            }
        }
    }

    /// Seals `seg` at `count` records and installs the next segment, trimming
    /// the head for retention. Called only by the one publisher whose
    /// reservation got `Sealer`; `current` is the directory it found `seg` in.
    /// If the next segment cannot be allocated, publishes the directory as
    /// stalled and returns the error.
    #[cold]
    fn roll(&self, seg: &Segment, count: u64, current: epoch::Shared<'_, Dir>, guard: &Guard) -> Result<()> {
        // Seal before the next segment becomes visible (see segment.rs), and
        // before trying to allocate it, so a failed roll leaves the final
        // count where anyone retrying the roll can read it.
        seg.seal(count);
        self.install_next(current, guard).inspect_err(|e| self.stall(current, e, guard))
    }

    /// Installs the segment after the newest (sealed) one of `current`. Does
    /// nothing if another publisher replaced `current` first.
    #[cold]
    fn install_next(&self, current: epoch::Shared<'_, Dir>, guard: &Guard) -> Result<()> {
        // SAFETY: as in `dir`: `current` was loaded under `guard`.
        let old = unsafe { current.deref() };
        let last = old.last();
        let count = last.sealed_count().expect("the newest segment is sealed before its successor is installed");
        let next = Arc::new(Segment::new(last.base() + count, self.pool.take()?, self.pool.clone()));

        let mut segs = Vec::with_capacity(old.segs.len() + 1);
        segs.extend(old.segs.iter().cloned());
        segs.push(next);
        let trim = self.trim_count(&segs);
        let trimmed: Vec<Arc<Segment>> = segs.drain(..trim).collect();
        // Release: publishes the new segment's initial state (and the seal) to
        // every Acquire load of the directory. Relaxed on failure: we only drop
        // what we built (another publisher's roll won, after a stall).
        let new = Owned::new(Dir { segs, stalled: None });
        if self
            .dir
            .compare_exchange(
                current,
                new,
                crate::sync::ordering_or_weakened!("L2", Ordering::Release),
                Ordering::Relaxed,
                guard,
            )
            .is_err()
        {
            debug_assert!(old.stalled.is_some(), "only a stalled directory has several writers");
            return Ok(());
        }
        // Only now, with the directory that omits them published, tell cursors
        // inside the trimmed segments to move on (see `Segment::mark_trimmed`).
        for seg in &trimmed {
            seg.mark_trimmed();
        }
        // Relaxed: a statistic.
        self.trimmed_segments.fetch_add(trimmed.len() as u64, Ordering::Relaxed);
        drop(trimmed);
        self.retire(current, guard);
        Ok(())
    }

    /// Replaces `current` (whose roll just failed with `error`) by a stalled
    /// copy, so waiting and later publishers learn of it (see the module docs).
    #[cold]
    fn stall(&self, current: epoch::Shared<'_, Dir>, error: &Error, guard: &Guard) {
        // SAFETY: as in `dir`: `current` was loaded under `guard`.
        let old = unsafe { current.deref() };
        if old.stalled.is_some() {
            return;
        }
        let stalled = Owned::new(Dir { segs: old.segs.clone(), stalled: Some(error.to_string()) });
        // Release: publishes the stalled directory's contents, as in
        // `install_next`. The sealer is the directory's only writer until the
        // stalled flag is visible, so the exchange cannot fail.
        let swapped = self.dir.compare_exchange(
            current,
            stalled,
            crate::sync::ordering_or_weakened!("L2", Ordering::Release),
            Ordering::Relaxed,
            guard,
        );
        debug_assert!(swapped.is_ok(), "the sealer is the directory's one writer");
        if swapped.is_ok() {
            self.retire(current, guard);
        }
    }

    /// Frees a directory that was just replaced, once no reader can hold it.
    fn retire(&self, replaced: epoch::Shared<'_, Dir>, guard: &Guard) {
        // SAFETY: `replaced` is no longer reachable from `self.dir`; threads that
        // loaded it before the exchange are pinned, and the collector runs the
        // destructor only after all of them unpin.
        unsafe { guard.defer_destroy(replaced) };
        // Push the retired directory to the global queue now, so the segments it
        // holds are released promptly rather than when this thread's bag fills.
        guard.flush();
    }

    /// Waits, briefly, until the segment at `base` is no longer the newest.
    /// Fails if its roll failed: the publisher that got `Sealer` could not
    /// allocate the next segment.
    #[cold]
    fn wait_for_roll(&self, base: u64, guard: &mut Guard) -> Result<()> {
        let mut backoff = Backoff::new();
        loop {
            let dir = self.dir(guard);
            if dir.last().base() != base {
                return Ok(());
            }
            if let Some(error) = &dir.stalled {
                return Err(Error::ResourceExhausted(format!(
                    "the partition's next log segment could not be allocated ({error})"
                )));
            }
            backoff.snooze();
            // Re-pin each round so a slow sealer does not also hold back reclamation.
            guard.repin();
        }
    }

    /// How many head segments retention removes from `segs` (whose last
    /// element is the new, empty segment).
    fn trim_count(&self, segs: &[Arc<Segment>]) -> usize {
        let sizes = &self.sizes;
        // The lowest position of any reader retention must wait for. Exact at
        // this moment: positions only grow, so a reader that moves on while we
        // look merely keeps a little more than it needs until the next roll.
        let floor = self
            .holds
            .lock()
            .iter()
            // Acquire: pairs with the reader's Release store of its position.
            .map(|(_, position)| position.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX);
        let mut bytes: u64 = segs.iter().map(|s| s.capacity()).sum();
        let mut records: u64 = segs.iter().map(|s| s.reserved()).sum();
        let mut trim = 0;
        // Never trims the last (active) segment.
        for head in &segs[..segs.len() - 1] {
            let count = head.sealed_count().expect("all but the newest segment are sealed");
            let over_bytes = bytes > sizes.retention_bytes;
            let over_records = records - count >= sizes.retention_messages;
            if !(over_bytes || over_records) || head.base() + count > floor {
                break;
            }
            bytes -= head.capacity();
            records -= count;
            trim += 1;
        }
        trim
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: `&mut self` means no handle or cursor is left, so no thread can
        // load the directory any more; taking it unprotected is exclusive.
        unsafe {
            // Relaxed: `&mut self`, nothing else can touch it.
            let dir = self.dir.load(Ordering::Relaxed, epoch::unprotected());
            drop(dir.into_owned());
        }
    }
}

/// A partition's append-only log. Cheap to clone: clones share the log.
///
/// Appending is lock-free apart from the brief wait at a segment rollover;
/// see the module documentation and `segment.rs`.
#[derive(Clone)]
pub struct Log {
    shared: Arc<Shared>,
}

impl Log {
    /// A new, empty log whose first record gets offset 0. It is partition 0
    /// as far as its errors say ([`Log::for_partition`] names another).
    pub fn new(config: &LogConfig) -> Result<Log> {
        Self::starting_at(config, 0)
    }

    /// A new, empty log for partition `partition` of a topic: errors about
    /// its offsets ([`Error::OutOfRange`]) name that partition.
    pub fn for_partition(config: &LogConfig, partition: u32) -> Result<Log> {
        Self::build(config, partition, 0)
    }

    /// A new, empty log whose first record gets offset `first_offset`.
    pub fn starting_at(config: &LogConfig, first_offset: u64) -> Result<Log> {
        Self::build(config, 0, first_offset)
    }

    fn build(config: &LogConfig, partition: u32, first_offset: u64) -> Result<Log> {
        let sizes = config.resolve()?;
        crate::clock::warm_up();
        let pool = Arc::new(Pool::new(sizes.segment_bytes, sizes.slots, SPARE_SEGMENTS));
        let first = Arc::new(Segment::new(first_offset, pool.take()?, pool.clone()));
        Ok(Log {
            shared: Arc::new(Shared {
                sizes,
                partition,
                dir: epoch::Atomic::new(Dir { segs: vec![first], stalled: None }),
                pool,
                holds: Mutex::new(Vec::new()),
                trimmed_segments: AtomicU64::new(0),
            }),
        })
    }

    /// Largest encoded record this log accepts.
    pub fn max_record_bytes(&self) -> usize {
        self.shared.sizes.max_record_bytes
    }

    /// The size of one segment.
    pub fn segment_bytes(&self) -> usize {
        self.shared.sizes.segment_bytes
    }

    fn check_size(&self, record: &Record<'_>) -> Result<usize> {
        let len = record.encoded_len()?;
        let max = self.shared.sizes.max_record_bytes;
        if len > max {
            return Err(Error::MessageTooLarge { size: len, max });
        }
        Ok(len)
    }

    /// Appends one record and returns its offset.
    ///
    /// Fails, appending nothing, if the record is larger than
    /// [`Log::max_record_bytes`] or cannot be encoded.
    pub fn append(&self, record: &Record<'_>) -> Result<u64> {
        self.append_pinned(record, &mut epoch::pin())
    }

    /// [`Log::append`] under the caller's pin (the broker holds one already
    /// for its listeners), so the publish path pins once and a wait for a
    /// roll really re-pins (re-pinning a nested guard does nothing).
    pub(crate) fn append_pinned(&self, record: &Record<'_>, guard: &mut Guard) -> Result<u64> {
        let len = self.check_size(record)?;
        let timestamp = now_ns();
        self.shared.reserve_then(1, len as u64, guard, |seg, index, pos| {
            // SAFETY: `index` and `pos..pos + len` come from our own Granted
            // reservation, and `len` is the record's encoded length.
            unsafe { seg.write(index, pos, len, record, timestamp) };
            seg.commit(index, pos);
            seg.base() + index
        })
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
        let most = sizes.slots.min(segment::MAX_RESERVATION_RECORDS);
        let timestamp = now_ns();
        let mut done = 0;
        while done < records.len() {
            // The largest prefix of what is left that fits an empty segment.
            let mut n = 0;
            let mut bytes = 0u64;
            while done + n < records.len() && n < most {
                let len = lens[done + n] as u64;
                if bytes + len > sizes.segment_bytes as u64 {
                    break;
                }
                bytes += len;
                n += 1;
            }
            debug_assert!(n > 0, "every record fits an empty segment");
            let part = &records[done..done + n];
            let part_lens = &lens[done..done + n];
            self.shared.reserve_then(n as u64, bytes, guard, |seg, index, mut pos| {
                for (k, (record, &len)) in part.iter().zip(part_lens).enumerate() {
                    // SAFETY: slots `index..index + n` and the bytes from the
                    // reservation's `pos` are ours; each record's range follows
                    // the previous one's and `len` is its encoded length.
                    unsafe { seg.write(index + k as u64, pos, len, record, timestamp) };
                    seg.commit(index + k as u64, pos);
                    offsets.push(seg.base() + index + k as u64);
                    pos += len as u64;
                }
            })?;
            done += n;
            // Let the epoch advance between parts of a long batch.
            guard.repin();
        }
        Ok(())
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
    pub fn cursor_at(&self, offset: u64) -> Result<Cursor> {
        let mut c = Cursor::new(self.shared.clone(), offset);
        c.seek(offset)?;
        Ok(c)
    }

    /// A cursor that continues from `offset`, a position handed out earlier
    /// (for example a durable subscription's). If retention has trimmed it
    /// meanwhile, the first read reports the records missed ([`Lagged`]);
    /// an offset past the end is clamped to the end.
    pub fn cursor_resuming(&self, offset: u64) -> Cursor {
        Cursor::new(self.shared.clone(), offset.min(self.end_offset()))
    }

    /// A cursor at the oldest retained record.
    pub fn cursor_from_first(&self) -> Cursor {
        let mut c = Cursor::new(self.shared.clone(), 0);
        c.seek_to_first();
        c
    }

    /// A cursor at the end: it reads only records appended from now on.
    pub fn cursor_from_end(&self) -> Cursor {
        let mut c = Cursor::new(self.shared.clone(), 0);
        c.seek_to_end();
        c
    }

    /// The oldest retained offset.
    pub fn first_offset(&self) -> u64 {
        let guard = epoch::pin();
        self.shared.dir(&guard).first_offset()
    }

    /// One past the newest offset handed out (some of the newest may still be
    /// uncommitted).
    pub fn end_offset(&self) -> u64 {
        let guard = epoch::pin();
        self.shared.dir(&guard).end_offset()
    }

    /// A snapshot of the log's size.
    pub fn stats(&self) -> LogStats {
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
        }
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
}

#[cfg(all(test, not(loom)))]
mod tests;
