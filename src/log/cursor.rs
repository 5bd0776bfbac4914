//! A reader's position in a log, and the batches it reads.
//!
//! Why it is long: over two fifths of it is the docs and examples of the
//! public methods of `Cursor` and `Batch`; the code is one reader's walk
//! along the segments.

use std::fmt;

use super::dir::{Dir, Shared};
use super::record::RecordView;
use super::segment::Segment;
use crate::error::{Error, Result};
use crate::sync::Arc;
use crate::sync::epoch;

/// A cursor fell behind retention: the records it had not read yet were
/// trimmed. It has moved on to the oldest retained record, so the next read
/// continues from there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lagged {
    /// Records that were trimmed before the cursor could read them.
    pub missed: u64,
    /// The offset the cursor continues from.
    pub resumed_at: u64,
}

impl fmt::Display for Lagged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fell behind retention: {} records missed, resuming at offset {}", self.missed, self.resumed_at)
    }
}

impl std::error::Error for Lagged {}

/// One reader's position in a [`Log`](super::Log).
///
/// Reading never blocks: [`Cursor::read`] returns `Ok(None)` when the record
/// at the cursor is not committed yet (not published, or a publisher is still
/// writing it), and the same call succeeds once it is. Records are borrowed in
/// place: a view lives until the next call that moves the cursor.
///
/// The cursor holds a reference to the segment it is reading, so it can take
/// as long as it likes over a record even if retention trims that segment.
pub struct Cursor {
    log: Arc<Shared>,
    /// The segment holding (or about to hold) `offset`, once located.
    seg: Option<Arc<Segment>>,
    /// The segment the first batch of the last `read_batches` came from,
    /// when its second batch came from the next one.
    held: Option<Arc<Segment>>,
    /// The next offset to read.
    offset: u64,
    /// Processes mode: the reservation this cursor has been waiting on, if
    /// it waits on one (see "An abandoned reservation" in `segment.rs`).
    stuck: Option<Stuck>,
    /// Processes mode: set for a cursor that polls lightly (see
    /// [`Cursor::poll_lightly`]), with where and since when it has found
    /// its next record missing.
    light: Option<Light>,
}

/// How often a cursor polling lightly reads the clock while its next
/// record is missing: once in this many polls.
const LIGHT_EVERY: u32 = 64;

/// How long a cursor polling lightly finds its next record missing before
/// it looks at the tail word at all (then once in [`LIGHT_EVERY`] polls):
/// far longer than a publisher takes between its reservation and its
/// commit, and small beside the abandon bound, which starts only then.
const LIGHT_AFTER_NS: u64 = 1_000_000;

/// Where a cursor polling lightly has found its next record missing: the
/// offset, the polls that missed it, and the clock at the first of them
/// that read it (0 until one did).
#[derive(Debug, Clone, Copy)]
struct Light {
    offset: u64,
    misses: u32,
    since_ns: u64,
}

/// A cursor polling lightly, its next record (at `offset`) missing, its
/// slot given up if `abandoned`: true if it should look further (see
/// [`Cursor::poll_lightly`]).
fn time_to_look(light: &mut Light, offset: u64, abandoned: bool) -> bool {
    if abandoned {
        return true;
    }
    if light.offset != offset {
        *light = Light { offset, misses: 0, since_ns: 0 };
    }
    light.misses = light.misses.wrapping_add(1);
    if !light.misses.is_multiple_of(LIGHT_EVERY) {
        return false;
    }
    let now = crate::clock::now_ns();
    if light.since_ns == 0 {
        light.since_ns = now;
        return false;
    }
    now.saturating_sub(light.since_ns) >= LIGHT_AFTER_NS
}

/// Where, and since when, a cursor of a log shared by processes has waited
/// on slots reserved and not committed, or on a seal not made.
#[derive(Debug, Clone, Copy)]
struct Stuck {
    /// The segment's base.
    base: u64,
    /// The first slot waited on.
    from: u64,
    /// Slots reserved (all granted) when the wait began: every slot of
    /// `from..upto` was reserved at least as long ago as `since`. Zero when
    /// the cursor waits on the seal of an over-full segment instead.
    upto: u64,
    /// When the wait began. Under loom, which has no clock, the bound is
    /// over at the cursor's next look.
    #[cfg(not(loom))]
    since: std::time::Instant,
}

impl Cursor {
    pub(super) fn new(log: Arc<Shared>, offset: u64) -> Self {
        Cursor { log, seg: None, held: None, offset, stuck: None, light: None }
    }

    /// The offset of the next record this cursor will read.
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::log::{Log, LogConfig, Record};
    /// # let log = Log::new(&LogConfig::default())?;
    /// log.append(&Record::new(b"a"))?;
    /// let mut cursor = log.cursor_from_first();
    /// assert_eq!(cursor.offset(), 0);
    /// cursor.read().expect("nothing was trimmed");
    /// assert_eq!(cursor.offset(), 1);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Records published but not yet read (including ones still being written).
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::log::{Log, LogConfig, Record};
    /// # let log = Log::new(&LogConfig::default())?;
    /// let mut cursor = log.cursor_from_first();
    /// log.append_batch(&[Record::new(b"a"), Record::new(b"b")], &mut Vec::new())?;
    /// assert_eq!(cursor.lag(), 2);
    /// cursor.read().expect("nothing was trimmed");
    /// assert_eq!(cursor.lag(), 1);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn lag(&self) -> u64 {
        let guard = epoch::pin();
        self.log.dir(&guard).end_offset().saturating_sub(self.offset)
    }

    /// Moves to `offset`. It must be retained: between the oldest retained
    /// offset and the end offset (inclusive), else [`Error::OutOfRange`] and the
    /// cursor stays where it was.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::Error;
    /// # use rill::log::{Log, LogConfig, Record};
    /// # let log = Log::new(&LogConfig::default())?;
    ///
    /// log.append_batch(&[Record::new(b"a"), Record::new(b"b")], &mut Vec::new())?;
    /// let mut cursor = log.cursor_from_first();
    /// cursor.seek(1)?;
    /// assert_eq!(cursor.read().expect("nothing was trimmed").map(|r| r.payload()), Some(&b"b"[..]));
    /// assert!(matches!(cursor.seek(3), Err(Error::OutOfRange { .. })));
    /// assert_eq!(cursor.offset(), 2); // unmoved
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn seek(&mut self, offset: u64) -> Result<()> {
        let guard = epoch::pin();
        let dir = self.log.dir(&guard);
        let (first, end) = (dir.first_offset(), dir.end_offset());
        if offset < first || offset > end {
            return Err(Error::OutOfRange { partition: self.log.partition, offset, first, end });
        }
        self.offset = offset;
        self.seg = Some(dir.find(offset).clone());
        Ok(())
    }

    /// Moves to the oldest retained record.
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::log::{Log, LogConfig, Record};
    /// # let log = Log::new(&LogConfig::default())?;
    /// log.append_batch(&[Record::new(b"a"), Record::new(b"b")], &mut Vec::new())?;
    /// let mut cursor = log.cursor_from_end();
    /// cursor.seek_to_first();
    /// assert_eq!(cursor.read().expect("nothing was trimmed").map(|r| r.payload()), Some(&b"a"[..]));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn seek_to_first(&mut self) {
        let guard = epoch::pin();
        let dir = self.log.dir(&guard);
        self.offset = dir.first_offset();
        self.seg = Some(dir.segs[0].clone());
    }

    /// Moves past every record handed out so far.
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::log::{Log, LogConfig, Record};
    /// # let log = Log::new(&LogConfig::default())?;
    /// log.append_batch(&[Record::new(b"a"), Record::new(b"b")], &mut Vec::new())?;
    /// let mut cursor = log.cursor_from_first();
    /// cursor.seek_to_end();
    /// assert_eq!(cursor.offset(), 2);
    /// assert!(cursor.read().expect("nothing was trimmed").is_none());
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn seek_to_end(&mut self) {
        let guard = epoch::pin();
        let dir = self.log.dir(&guard);
        self.offset = dir.end_offset();
        self.seg = Some(dir.find(self.offset).clone());
    }

    /// Finds the segment for `self.offset` in the current directory. Returns
    /// `Err(Lagged)` (and moves to the oldest record) if retention trimmed it.
    fn locate(&mut self) -> Result<(), Lagged> {
        let guard = epoch::pin();
        let dir: &Dir = self.log.dir(&guard);
        let first = dir.first_offset();
        if self.offset < first {
            let missed = first - self.offset;
            self.offset = first;
            self.seg = Some(dir.segs[0].clone());
            return Err(Lagged { missed, resumed_at: first });
        }
        // Cloning the Arc while pinned is what lets us unpin afterwards: the
        // directory we read it from cannot be freed before the count is taken.
        let seg = dir.find(self.offset);
        if self.seg.as_ref().is_none_or(|s| !Arc::ptr_eq(s, seg)) {
            self.seg = Some(seg.clone());
        }
        Ok(())
    }

    /// Positions the cursor on a segment where `self.offset` is committed;
    /// returns that record's byte position, or `None` if it is not committed.
    #[inline]
    fn ready(&mut self) -> Result<Option<u64>, Lagged> {
        // At most three rounds: locate, step past a sealed end, and find the
        // next segment not installed yet; passing a skip record is progress
        // and starts them again.
        let mut rounds = 0;
        while rounds < 3 {
            rounds += 1;
            let Some(seg) = &self.seg else {
                self.locate()?;
                continue;
            };
            if seg.is_trimmed() {
                // Retention removed our segment: `locate` reports what we missed.
                self.seg = None;
                self.locate()?;
                continue;
            }
            let index = self.offset - seg.base();
            if let Some(pos) = seg.committed(index) {
                // One predictable branch: only a recovered segment has skip
                // records (`record.rs`), which no reader is handed.
                if seg.has_skips() && seg.is_skip(index, pos) {
                    self.offset = seg.base() + seg.past_skip(index);
                    rounds = 0;
                    continue;
                }
                return Ok(Some(pos));
            }
            if !seg.ends_before(index) {
                if self.log.processes {
                    // Before the clone below: a lightly polling cursor's
                    // poll writes nothing a publisher reads (the clone
                    // writes the segment's reference count).
                    if let Some(light) = &mut self.light
                        && !time_to_look(light, self.offset, seg.is_abandoned(index))
                    {
                        return Ok(None);
                    }
                    let seg = seg.clone();
                    if self.unblock(&seg, index) {
                        rounds = 0;
                        continue;
                    }
                }
                return Ok(None);
            }
            // Past the end of a sealed segment: move to the next one, unless it
            // is not installed yet (the directory still ends here).
            let before = seg.clone();
            self.locate()?;
            if self.seg.as_ref().is_some_and(|s| Arc::ptr_eq(s, &before)) {
                // In a log shared by processes the roll may be another
                // process's: install its file if it is there (`dir.rs`, "The
                // roll across processes"); then this is progress.
                #[cfg(not(loom))]
                if self.log.processes && self.follow(&before) {
                    rounds = 0;
                    continue;
                }
                return Ok(None);
            }
        }
        Ok(None)
    }

    /// Makes this cursor (of a log shared by processes) poll lightly: while
    /// its next record is missing, it looks no further than that record's
    /// slot (and so never at the tail word) until it has found it missing
    /// for [`LIGHT_AFTER_NS`], and then once in [`LIGHT_EVERY`] polls; a
    /// slot given up it passes at once. For a reader that polls in a loop
    /// (a subscription's drainer): the tail word is the line every
    /// publisher's fetch-add writes, and a reader that loads it at each
    /// poll takes it out of the publisher's cache before every publish (the
    /// `ipc` scenario's latency run). A reader that looks only when woken
    /// (the doorbell thread) must not poll lightly: it would not find a
    /// reservation nobody commits (see "A reservation nobody commits" in
    /// `broker/doorbell.rs`, which does that for the readers asleep).
    pub(crate) fn poll_lightly(&mut self) {
        self.light = Some(Light { offset: self.offset, misses: 0, since_ns: 0 });
    }

    /// Processes mode, at slot `index` of `seg`, not committed: passes
    /// over it if it was given up, and gives up what has been reserved and
    /// not committed (or elected a sealer and not sealed) for the abandon
    /// bound since this cursor first waited on it (see "An abandoned
    /// reservation" and "A sealer that dies before it seals" in
    /// `segment.rs`). True if the cursor moved or the slot or seal may have
    /// changed (look again); false if it still waits.
    #[cold]
    fn unblock(&mut self, seg: &Arc<Segment>, index: u64) -> bool {
        if seg.passable(index) {
            self.offset += 1;
            return true;
        }
        let over_full = seg.awaits_seal();
        // Relaxed loads inside: slots reserved so far, all of them granted
        // unless the segment is over-full.
        let reserved = if over_full { 0 } else { seg.reserved() };
        if !over_full && (index >= reserved || seg.is_abandoned(index)) {
            // Nobody reserved this slot yet (the cursor is at the end), or it
            // is given up but its segment's end is not known yet: nothing to
            // give up.
            return false;
        }
        let waiting = self.stuck.filter(|w| {
            w.base == seg.base() && if over_full { w.upto == 0 } else { (w.from..w.upto).contains(&index) }
        });
        let Some(wait) = waiting else {
            self.stuck = Some(Stuck {
                base: seg.base(),
                from: index,
                upto: reserved,
                #[cfg(not(loom))]
                since: std::time::Instant::now(),
            });
            return false;
        };
        #[cfg(not(loom))]
        if wait.since.elapsed() < self.log.abandon_after() {
            return false;
        }
        self.stuck = None;
        if over_full {
            let count = seg.take_over_seal();
            ::log::warn!(
                target: "rill::log",
                "partition {}: the segment at offset {} was not sealed within the abandon bound of its \
                 sealer's election; sealed it here at {count} records",
                self.log.partition,
                seg.base()
            );
        } else {
            let claimed = seg.claim_abandoned(index, wait.upto);
            if claimed > 0 {
                ::log::warn!(
                    target: "rill::log",
                    "partition {}: {claimed} offset(s) from {} were reserved and not committed within the \
                     abandon bound; given up (skipped by every reader)",
                    self.log.partition,
                    seg.base() + index
                );
            }
        }
        true
    }

    /// Processes mode: installs the successor of `seg` (sealed, the newest
    /// in this process's directory) from another process's file, if it is
    /// there; true once the directory has it. A reader never makes the file
    /// (publishers take a dead sealer's roll over); a failure to map it is
    /// logged and read as "no record yet", since a cursor reports only lag.
    #[cfg(not(loom))]
    #[cold]
    fn follow(&mut self, seg: &Arc<Segment>) -> bool {
        let guard = epoch::pin();
        self.log.follow(seg, false, &guard).unwrap_or_else(|e| {
            ::log::warn!(target: "rill::log", "partition {}: cannot map the next segment: {e}", self.log.partition);
            false
        })
    }

    /// The next record, if it is committed; `Ok(None)` if the cursor is at the
    /// end or at a record still being written; `Err(Lagged)` if retention
    /// trimmed records it had not read (it has moved on; call again).
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::log::{Log, LogConfig, Record};
    /// # let log = Log::new(&LogConfig::default())?;
    /// let mut cursor = log.cursor_from_first();
    /// assert!(cursor.read().expect("nothing was trimmed").is_none()); // nothing yet
    /// log.append(&Record::new(b"hello"))?;
    /// let record = cursor.read().expect("nothing was trimmed").expect("record 0 is committed");
    /// assert_eq!((record.offset(), record.payload()), (0, &b"hello"[..]));
    /// # Ok::<(), rill::Error>(())
    /// ```
    #[inline]
    pub fn read(&mut self) -> Result<Option<RecordView<'_>>, Lagged> {
        let Some(pos) = self.ready()? else { return Ok(None) };
        let seg = self.seg.as_deref().expect("ready() located a segment");
        let view = seg.view(self.offset - seg.base(), pos);
        self.offset += 1;
        Ok(Some(view))
    }

    /// True if a read would return a record or report a lag (without moving).
    /// Seeing a record committed, it starts fetching the record's first cache
    /// line: a caller polling for work reads that record next, and the line
    /// then travels from the publisher's core while the caller gets ready.
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::log::{Log, LogConfig, Record};
    /// # let log = Log::new(&LogConfig::default())?;
    /// let mut cursor = log.cursor_from_first();
    /// assert!(!cursor.has_next());
    /// log.append(&Record::new(b"a"))?;
    /// assert!(cursor.has_next());
    /// assert_eq!(cursor.offset(), 0); // it did not move
    /// # Ok::<(), rill::Error>(())
    /// ```
    #[inline]
    pub fn has_next(&mut self) -> bool {
        match self.ready() {
            Ok(None) => false,
            Ok(Some(pos)) => {
                if let Some(seg) = &self.seg {
                    seg.prefetch(pos);
                }
                true
            }
            Err(_) => true,
        }
    }

    /// Processes mode: when this cursor, waiting on a slot reserved and not
    /// committed (or a seal not made), may give it up at its next look
    /// (see "An abandoned reservation" in `segment.rs`); `None` when it
    /// waits on nothing. A waiter that is not polling (the doorbell thread)
    /// looks again then, so the records after a dead publisher's
    /// reservation are not held up past the bound when nothing else wakes
    /// anyone.
    ///
    /// Only a wait the cursor is still in counts: its recorded wait stays
    /// after a slow writer commits and the cursor reads on (it is replaced
    /// or cleared only at the next wait or claim), and a deadline from it,
    /// long past, would have the doorbell look again at once, for ever.
    /// So the cursor must be in the wait's segment, at a slot of its range
    /// (or, for a seal not made, in a segment still unsealed).
    #[cfg(not(loom))]
    pub(crate) fn retry_at(&self) -> Option<std::time::Instant> {
        let w = self.stuck?;
        let seg = self.seg.as_ref().filter(|s| s.base() == w.base)?;
        let index = self.offset - w.base;
        let waiting = match seg.sealed_count() {
            // A seal not made: until it is.
            count if w.upto == 0 => count.is_none(),
            // A reserved slot it stands at, before any seal's end.
            count => (w.from..w.upto).contains(&index) && count.is_none_or(|n| index < n),
        };
        waiting.then(|| w.since + self.log.abandon_after())
    }

    /// Under loom the bound is over at the next look: never a timed one.
    #[cfg(loom)]
    pub(crate) fn retry_at(&self) -> Option<std::time::Instant> {
        None
    }

    /// True if the record `n - 1` past the next one (`n >= 1`) is committed
    /// in the cursor's segment, or lies past that segment's end (the run is
    /// there, or the segment closes before it). Looks at one slot only: a
    /// poll for a run of records that does not touch the line a publisher
    /// is writing at the head. `false` when the cursor has no segment yet.
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::log::{Log, LogConfig, Record};
    /// # let log = Log::new(&LogConfig::default())?;
    /// log.append_batch(&[Record::new(b"a"), Record::new(b"b"), Record::new(b"c")], &mut Vec::new())?;
    /// let cursor = log.cursor_from_first();
    /// assert!(cursor.has_run(3)); // records 0, 1 and 2 are there
    /// assert!(!cursor.has_run(4));
    /// # Ok::<(), rill::Error>(())
    /// ```
    #[inline]
    pub fn has_run(&self, n: u64) -> bool {
        let Some(seg) = &self.seg else { return false };
        let index = self.offset - seg.base() + n.max(1) - 1;
        index >= seg.slot_count() || seg.ends_before(index) || seg.committed(index).is_some()
    }

    /// If retention has trimmed records this cursor had not read, moves to
    /// the oldest retained one and says how many were missed (what the next
    /// read would report as `Err(Lagged)`); otherwise does nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::{Log, LogConfig, Record};
    ///
    /// let config = LogConfig { segment_bytes: Some(4096), retention_bytes: Some(8192), ..LogConfig::default() };
    /// let log = Log::new(&config)?;
    /// let mut cursor = log.cursor_from_first();
    /// assert_eq!(cursor.take_lag(), None);
    /// for _ in 0..200 {
    ///     log.append(&Record::new(&[7; 100]))?; // retention trims what the cursor has not read
    /// }
    /// let lag = cursor.take_lag().expect("records were trimmed");
    /// let first = log.first_offset();
    /// assert_eq!((lag.missed, lag.resumed_at, cursor.offset()), (first, first, first));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn take_lag(&mut self) -> Option<Lagged> {
        self.ready().err()
    }

    /// Moves back to `offset`, an offset this cursor has already passed (to
    /// read a record again). Cheap within the current segment; otherwise a
    /// seek, and if `offset` was trimmed meanwhile the next read reports the lag.
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::log::{Log, LogConfig, Record};
    /// # let log = Log::new(&LogConfig::default())?;
    /// log.append_batch(&[Record::new(b"a"), Record::new(b"b")], &mut Vec::new())?;
    /// let mut cursor = log.cursor_from_first();
    /// assert_eq!(cursor.read_batch(10).expect("nothing was trimmed").len(), 2);
    /// cursor.rewind(1); // handling "b" failed: read it again
    /// assert_eq!(cursor.read().expect("nothing was trimmed").map(|r| r.payload()), Some(&b"b"[..]));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn rewind(&mut self, offset: u64) {
        debug_assert!(offset <= self.offset, "rewind only goes back");
        if self.seg.as_ref().is_some_and(|s| s.base() <= offset) {
            self.offset = offset;
        } else if self.seek(offset).is_err() {
            // Trimmed: `locate` will report what was missed from `offset`.
            self.offset = offset;
            self.seg = None;
        }
    }

    /// Up to `max` consecutive committed records, borrowed together. The batch
    /// stops early at an uncommitted record, at a skip record (which no read
    /// hands out; see `recovery.rs`) or at the end of a segment, so it
    /// may be shorter than `max` even when more records follow; it is empty
    /// only when the cursor is at the end or at a record still being written.
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::log::{Log, LogConfig, Record};
    /// # let log = Log::new(&LogConfig::default())?;
    /// log.append_batch(&[Record::new(b"a"), Record::new(b"b"), Record::new(b"c")], &mut Vec::new())?;
    /// let mut cursor = log.cursor_from_first();
    /// let batch = cursor.read_batch(2).expect("nothing was trimmed");
    /// assert_eq!(batch.iter().map(|r| r.payload()).collect::<Vec<_>>(), [b"a", b"b"]);
    /// assert_eq!(cursor.read_batch(2).expect("nothing was trimmed").len(), 1);
    /// assert!(cursor.read_batch(2).expect("nothing was trimmed").is_empty()); // at the end
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn read_batch(&mut self, max: usize) -> Result<Batch<'_>, Lagged> {
        let run = self.next_run(max)?;
        Ok(self.batch_of(run, self.seg.as_deref()))
    }

    /// Up to `max` records as at most two batches: the first as
    /// [`Cursor::read_batch`] reads it, and, when that one stopped short of
    /// `max` at the end of its segment (or at a skip record), a second from
    /// the next record on. A reader that takes `max` records at a time (a
    /// pull consumer's poll) then gets a full batch across a segment
    /// boundary, as it does inside a segment; the second batch is empty
    /// when nothing more is committed. The segment the first batch was read
    /// from is kept alive by the cursor until its next read of this kind.
    ///
    /// If retention trimmed the records after the first batch, the second
    /// is empty and the cursor stays where the first one left it: its next
    /// read reports the lag.
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::log::{Log, LogConfig, Record};
    /// let config = LogConfig { segment_bytes: Some(4096), ..LogConfig::default() };
    /// let log = Log::new(&config)?;
    /// for _ in 0..100 {
    ///     log.append(&Record::new(&[7; 100]))?; // several segments
    /// }
    /// let mut cursor = log.cursor_from_first();
    /// let (a, b) = cursor.read_batches(50).expect("nothing was trimmed");
    /// assert!(a.len() < 50, "the first segment holds fewer"); // read_batch would stop here
    /// assert_eq!(a.len() + b.len(), 50);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn read_batches(&mut self, max: usize) -> Result<(Batch<'_>, Batch<'_>), Lagged> {
        // What the last call lent out is no longer borrowed (`&mut self`).
        self.held = None;
        let first = self.next_run(max)?;
        let mut second = None;
        if let Some(run) = first.filter(|r| r.len < max) {
            // The first batch's segment, kept for its borrow: the look for
            // a second batch may move the cursor to the next segment even
            // when it finds nothing there yet.
            self.held = self.seg.clone();
            let after = self.offset;
            match self.next_run(max - run.len) {
                Ok(next) => second = next,
                // Trimmed past the first batch: back to where it ended, so
                // that the next read finds (and reports) the same lag.
                Err(_) => {
                    self.offset = after;
                    self.seg = self.held.clone();
                }
            }
        }
        let first_seg = if self.held.is_some() { self.held.as_deref() } else { self.seg.as_deref() };
        Ok((self.batch_of(first, first_seg), self.batch_of(second, self.seg.as_deref())))
    }

    /// Reads the run of up to `max` consecutive committed records at the
    /// cursor, in the segment it is left on, and moves past them.
    #[inline]
    fn next_run(&mut self, max: usize) -> Result<Option<Run>, Lagged> {
        let Some(first_pos) = (if max == 0 { None } else { self.ready()? }) else {
            return Ok(None);
        };
        let seg = self.seg.as_deref().expect("ready() located a segment");
        let first_index = self.offset - seg.base();
        // The first record is committed (and not a skip record); count the
        // committed ones after it, up to a skip record if the segment has any.
        let skips = seg.has_skips();
        let mut len = 1;
        while len < max
            && seg
                .committed(first_index + len as u64)
                .is_some_and(|pos| !(skips && seg.is_skip(first_index + len as u64, pos)))
        {
            len += 1;
        }
        self.offset += len as u64;
        Ok(Some(Run { first_index, len, first_pos }))
    }

    /// The batch of `run` (none: an empty one) in `seg`.
    #[inline]
    fn batch_of<'a>(&self, run: Option<Run>, seg: Option<&'a Segment>) -> Batch<'a> {
        match run {
            Some(Run { first_index, len, first_pos }) => Batch { seg, first_index, len, first_pos },
            None => Batch { seg: None, first_index: 0, len: 0, first_pos: 0 },
        }
    }
}

/// Consecutive committed records of the segment a cursor is on.
#[derive(Clone, Copy)]
struct Run {
    first_index: u64,
    len: usize,
    first_pos: u64,
}

impl fmt::Debug for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cursor").field("offset", &self.offset).field("segment", &self.seg).finish()
    }
}

/// Consecutive committed records from one segment, read by
/// [`Cursor::read_batch`].
#[derive(Clone, Copy)]
pub struct Batch<'a> {
    seg: Option<&'a Segment>,
    first_index: u64,
    len: usize,
    first_pos: u64,
}

impl<'a> Batch<'a> {
    /// Number of records.
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::log::{Log, LogConfig, Record};
    /// # let log = Log::new(&LogConfig::default())?;
    /// log.append_batch(&[Record::new(b"a"), Record::new(b"b"), Record::new(b"c")], &mut Vec::new())?;
    /// let mut cursor = log.cursor_from_first();
    /// let batch = cursor.read_batch(10).expect("nothing was trimmed");
    /// assert_eq!(batch.len(), 3);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if there are none.
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::log::{Log, LogConfig, Record};
    /// # let log = Log::new(&LogConfig::default())?;
    /// let mut cursor = log.cursor_from_first();
    /// assert!(cursor.read_batch(10).expect("nothing was trimmed").is_empty());
    /// log.append(&Record::new(b"a"))?;
    /// assert!(!cursor.read_batch(10).expect("nothing was trimmed").is_empty());
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Offset of the first record (meaningless when empty).
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::log::{Log, LogConfig, Record};
    /// # let log = Log::new(&LogConfig::default())?;
    /// log.append_batch(&[Record::new(b"a"), Record::new(b"b"), Record::new(b"c")], &mut Vec::new())?;
    /// let mut cursor = log.cursor_at(1)?;
    /// assert_eq!(cursor.read_batch(10).expect("nothing was trimmed").first_offset(), 1);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn first_offset(&self) -> u64 {
        self.seg.map_or(0, |s| s.base() + self.first_index)
    }

    /// The records, in offset order.
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::log::{Log, LogConfig, Record};
    /// # let log = Log::new(&LogConfig::default())?;
    /// log.append_batch(&[Record::new(b"a"), Record::new(b"b")], &mut Vec::new())?;
    /// let mut cursor = log.cursor_from_first();
    /// let batch = cursor.read_batch(10).expect("nothing was trimmed");
    /// let offsets: Vec<u64> = batch.iter().map(|r| r.offset()).collect();
    /// assert_eq!(offsets, [0, 1]);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn iter(&self) -> BatchIter<'a> {
        BatchIter {
            seg: self.seg,
            index: self.first_index,
            end: self.first_index + self.len as u64,
            pos: self.first_pos,
            // A segment file puts each record's frame (its checksum) before it.
            frame: self.seg.map_or(0, |s| if s.file().is_some() { super::file::FRAME_LEN as u64 } else { 0 }),
        }
    }
}

impl<'a> IntoIterator for Batch<'a> {
    type Item = RecordView<'a>;
    type IntoIter = BatchIter<'a>;

    fn into_iter(self) -> BatchIter<'a> {
        self.iter()
    }
}

impl fmt::Debug for Batch<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch").field("first_offset", &self.first_offset()).field("len", &self.len).finish()
    }
}

/// Iterator over a [`Batch`].
#[derive(Debug, Clone)]
pub struct BatchIter<'a> {
    seg: Option<&'a Segment>,
    index: u64,
    end: u64,
    /// Byte position of record `index`: records are contiguous, so each one
    /// starts where the previous one's padded length (and the next one's
    /// frame, in a segment file) ends.
    pos: u64,
    /// Bytes of frame before each record: 0 in memory.
    frame: u64,
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = RecordView<'a>;

    #[inline]
    fn next(&mut self) -> Option<RecordView<'a>> {
        if self.index >= self.end {
            return None;
        }
        let seg = self.seg?;
        let view = seg.view(self.index, self.pos);
        self.index += 1;
        self.pos += view.encoded_len() as u64 + self.frame;
        Some(view)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = (self.end - self.index) as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for BatchIter<'_> {}
