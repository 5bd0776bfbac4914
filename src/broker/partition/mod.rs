//! Partitions: a log and the listeners a publisher signals after each
//! commit, and the publisher's half of the protocol that wakes them.
//!
//! The bottom of the broker's push path: everything here is what a
//! publisher runs, and nothing here names a subscription or a consumer.
//! The folder's parts import each other one way: `state.rs` (the state
//! word a publisher reads) and `in_handler.rs` (the mark of a thread that
//! runs user code) import no other part; `signal.rs` (signal-and-drain:
//! [`Entry`], [`Listener`], `notify`, the ready set, and the drainer's half,
//! `go_idle`, beside the fences that pair the two) imports `state.rs`;
//! `blockers.rs` (`Block` subscribers seen by the publishers of every
//! process, in `Sharing::Processes` mode) imports no other part; and this
//! file, the [`Partition`], imports those four.
//!
//! Above it, `topic.rs` groups partitions into topics, and
//! `subscription/` and `consumer.rs` implement [`Listener`] and run the
//! drainer's half; they import this folder, never the other way, so a
//! partition knows its listeners only as [`Entry`]s.
//!
//! [`Listener`]: signal::Listener

pub(crate) mod blockers;
pub(crate) mod in_handler;
pub(crate) mod signal;
pub(crate) mod state;

use std::fmt;
use std::time::{Duration, Instant};

use self::blockers::{SharedBlockers, Slot};
use self::in_handler::InHandler;
use self::signal::Entry;
use super::barrier;
use super::doorbell::{Cross, Watch};
use super::flusher::Due;
use super::waiters::Waiters;
use crate::clock::now_ns;
use crate::error::{Error, PublishFailure, Result};
use crate::log::{Cursor, Log, Measured, Record};
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::epoch::{self, Guard, Owned};
use crate::sync::{Arc, Mutex};

/// A subscriber with the `Block` overflow policy: publishers wait while it
/// is `limit` messages behind.
#[derive(Clone)]
pub(crate) struct Blocker {
    pub(crate) id: u64,
    /// Its next offset to handle, published by its drainer.
    pub(crate) position: Arc<AtomicU64>,
    pub(crate) limit: u64,
}

impl Blocker {
    #[inline]
    fn position(&self) -> u64 {
        // Acquire: pairs with the drainer's Release store, so a publisher that
        // sees room also sees the drain that made it (not needed for memory
        // safety; it keeps the lag bound honest).
        self.position.load(Ordering::Acquire)
    }
}

/// The listeners of one partition, replaced as a whole when one joins or leaves.
/// Laid out in this order (`repr(C)`): what every publish reads (`list`,
/// `marked`, whether `blockers` is empty) first, as in [`Partition`].
#[repr(C)]
struct Listeners {
    list: Vec<Entry>,
    /// Some listener has a ready mark (a wildcard subscription), so a
    /// publisher must look at marks; lists without any skip that pass.
    marked: bool,
    blockers: Vec<Blocker>,
    /// A lower bound of `min(position + limit)` over `blockers`: publishing
    /// below it needs no further look at the blockers. Raised by publishers
    /// as blockers advance; it lives in this list, so when blockers come or go
    /// the new list starts from 0 and no stale bound can outlive its list.
    room_until: AtomicU64,
    /// Processes mode: the blockers of this list that hold a slot in the
    /// partition's `SharedBlockers`, as (id, position, slot), for the
    /// drainer to copy positions into (`Partition::room_made`).
    slots: Vec<(u64, Arc<AtomicU64>, Arc<Slot>)>,
}

/// The blockers with a shared slot (see `Listeners::slots`).
type Slots = Vec<(u64, Arc<AtomicU64>, Arc<Slot>)>;

impl Listeners {
    fn new(list: Vec<Entry>, blockers: Vec<Blocker>, slots: Slots) -> Listeners {
        let marked = list.iter().any(Entry::has_mark);
        Listeners { list, blockers, room_until: AtomicU64::new(0), marked, slots }
    }

    /// True if offsets up to `end + n` fit under every blocker's limit.
    #[inline]
    fn has_room(&self, end: u64, n: u64) -> bool {
        if self.blockers.is_empty() {
            return true;
        }
        // Relaxed: a lower bound computed from positions that only grow, so
        // any value read is safe to publish under.
        if end + n <= self.room_until.load(Ordering::Relaxed) {
            return true;
        }
        let room = self.blockers.iter().map(|b| b.position().saturating_add(b.limit)).min().unwrap_or(u64::MAX);
        // Relaxed: see above; fetch_max keeps the bound from going backwards
        // when publishers race to raise it.
        self.room_until.fetch_max(room, Ordering::Relaxed);
        end + n <= room
    }

    /// True if blocker `id` leaves no room for offsets up to `end + n`.
    fn is_blocked_by(&self, id: u64, end: u64, n: u64) -> bool {
        self.blockers.iter().any(|b| b.id == id && b.position().saturating_add(b.limit) < end + n)
    }
}

/// How long a publisher may wait for a `Block` subscriber. A duration, not
/// a deadline, so the clock is read only when a publisher really waits.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wait {
    /// Not at all: fail with `Full`.
    No,
    /// Up to this long (`None`: forever), then fail with `Timeout`.
    For(Option<Duration>),
}

/// What recovery dropped from a partition's log when it was reopened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Recovered {
    pub(crate) truncated_records: u64,
    pub(crate) truncated_bytes: u64,
    /// The cut was damage inside a sealed segment, made because of `repair`.
    pub(crate) repaired: bool,
}

/// One partition: a log and the listeners to signal after a commit.
///
/// Laid out in this order (`repr(C)`): the fields a publish reads come
/// first, from `keyed_only` to `cross`, so that a publish to a partition
/// that no recent publish touched misses on fewer of its lines than it
/// did with the fields spread as the compiler placed them (`wildcard_breadth`,
/// an example of rill-bench, counts the misses under callgrind).
#[repr(C)]
pub(crate) struct Partition {
    /// The topic is compacted: a message without a key is refused (set by
    /// `Topic::new`).
    pub(crate) keyed_only: bool,
    /// Set (once) when its topic is deleted: handles that still hold the
    /// partition (a `Publisher`, a `Consumer`) fail with `NoSuchTopic`, and
    /// subscriptions stop reading it. (A publish already waiting for a
    /// `Block` subscriber is let through when deleting detaches that
    /// subscriber: it was accepted before the delete.)
    deleted: AtomicBool,
    /// Set (once) when its broker closes: a publish waiting for a `Block`
    /// subscriber gives up with `Closed`, whoever's subscriber it waits
    /// for (another broker's, in this process or another, is not closed
    /// with this one, and would otherwise hold it until its timeout).
    closing: AtomicBool,
    pub(crate) index: u32,
    pub(crate) log: Log,
    /// Read by publishers on every publish (pinned); written under `edit`.
    listeners: epoch::Atomic<Listeners>,
    /// Processes mode: the `Block` subscribers of every process (see
    /// `blockers.rs`); `None` otherwise.
    shared_blockers: Option<Arc<SharedBlockers>>,
    /// Under `Fsync::Interval`, marks the broker's flusher due after each
    /// publish (see "Due" in `flusher.rs`); given before the topic enters
    /// the broker's topic map.
    flush_due: std::sync::OnceLock<Due>,
    /// Its part in the cross-process wake, in `Sharing::Processes` mode
    /// (see `doorbell.rs`); `None`, the flag every publish tests, otherwise.
    cross: Option<Cross>,
    /// What recovery dropped when the log was opened from its files.
    pub(crate) recovery: Recovered,
    /// Group commits and durable subscription positions that pointed past
    /// the end recovery left, reset to that end when the broker opened its
    /// data directory (see "Offsets past a recovered end" in `broker/control/data_dir.rs`).
    pub(crate) offsets_reset: AtomicU64,
    /// Serialises writers of `listeners` (subscribe and unsubscribe, never the publish path).
    edit: Mutex<()>,
    /// Where publishers wait for `Block` subscribers to make room (in
    /// Processes mode they wait in `shared_blockers` instead, which the
    /// drainers of every process wake).
    pub(crate) space: Waiters,
    /// Processes mode: the doorbell thread's cursor, just past the last
    /// record its looks saw committed (see `Watch::look` below).
    watched: Option<Mutex<Cursor>>,
}

/// The error for a message without a key published to a compacted topic.
#[cold]
#[inline(never)]
fn keyless(partition: u32) -> Error {
    Error::InvalidArgument(format!(
        "a message published to a compacted topic needs a key (partition {partition}): compaction keeps the \
         newest message of every key"
    ))
}

impl Partition {
    pub(crate) fn new(index: u32, log: Log) -> Self {
        Partition {
            index,
            log,
            recovery: Recovered::default(),
            offsets_reset: AtomicU64::new(0),
            listeners: epoch::Atomic::new(Listeners::new(Vec::new(), Vec::new(), Vec::new())),
            edit: Mutex::new(()),
            space: Waiters::new(),
            deleted: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            cross: None,
            shared_blockers: None,
            watched: None,
            keyed_only: false,
            flush_due: std::sync::OnceLock::new(),
        }
    }

    /// A partition whose log other processes share, woken by their
    /// publishes through `cross` (see `doorbell.rs`), and held back by
    /// their `Block` subscribers through `blockers` (see `blockers.rs`).
    pub(crate) fn shared(index: u32, log: Log, cross: Cross, blockers: Arc<SharedBlockers>) -> Self {
        // From the oldest record: one committed after a listener's first
        // look at the log, but reserved before this cursor was made, must
        // still be seen (the first look walks what is retained, once).
        let watched = Some(Mutex::new(log.cursor_from_first()));
        let mut p = Partition::new(index, log);
        p.cross = Some(cross);
        p.shared_blockers = Some(blockers);
        p.watched = watched;
        p
    }

    /// Marks the partition's topic deleted (see `Broker::delete_topic`).
    pub(crate) fn mark_deleted(&self) {
        // Release: pairs with the Acquire in `is_deleted`, so a handle that
        // sees the mark also sees the topic gone from the broker's map.
        self.deleted.store(true, Ordering::Release);
    }

    /// Its broker is closing: wakes the publishers of this process waiting
    /// for room, which then fail with `Closed` (see `closing`). In
    /// Processes mode the wake reaches the waiters of every process on the
    /// shared page, which look again and wait on.
    pub(crate) fn close_waits(&self) {
        // Release: pairs with the Acquire in `wait_for_room`'s look, which
        // the wakes below make it take again.
        self.closing.store(true, Ordering::Release);
        if let Some(shared) = &self.shared_blockers {
            shared.moved();
        }
        self.space.notify();
    }

    /// True once its topic has been deleted.
    #[inline]
    pub(crate) fn is_deleted(&self) -> bool {
        // Acquire: pairs with the Release in `mark_deleted`.
        self.deleted.load(Ordering::Acquire)
    }

    #[inline]
    fn current<'g>(&self, guard: &'g Guard) -> &'g Listeners {
        // Acquire: pairs with the Release swap in `edit_listeners`, so the
        // listeners it lists are fully constructed.
        let shared = self.listeners.load(Ordering::Acquire, guard);
        // SAFETY: never null (set in `new`, replaced only by valid lists), and a
        // replaced list is retired with `defer_destroy`, so it outlives `guard`.
        unsafe { shared.deref() }
    }

    /// Waits (as `wait` allows) until `n` messages fit under every `Block`
    /// subscriber's lag limit. Concurrent publishers may each see room for
    /// themselves, so a limit can be exceeded by at most one message per
    /// concurrent publisher.
    ///
    /// A publish from the handler of a `Block` subscriber that is itself at
    /// its limit here would wait for its own handler to return: its drainer
    /// is this thread, so its position cannot move. It fails at once with
    /// `Full` instead (looked at on every wake-up of the wait, since others
    /// may fill the room meanwhile). Waiting for other subscribers is
    /// unaffected.
    ///
    /// In Processes mode the `Block` subscribers of other processes count
    /// too, and the wait is in the shared page (see `blockers.rs`).
    #[cold]
    fn wait_for_room(&self, n: u64, wait: Wait) -> Result<()> {
        let own = InHandler::current();
        let mut blocked_by_own = false;
        // Never pinned while blocked: the closure pins only to look.
        let room = || {
            // Acquire: pairs with the Release in `close_waits`.
            if self.closing.load(Ordering::Acquire) {
                return true;
            }
            let guard = epoch::pin();
            let (listeners, end) = (self.current(&guard), self.log.end_offset_pinned(&guard));
            blocked_by_own = own != 0 && listeners.is_blocked_by(own, end, n);
            blocked_by_own || (listeners.has_room(end, n) && self.shared_room(|| end, n))
        };
        let got_room = match (wait, &self.shared_blockers) {
            (Wait::No, _) => {
                return Err(Error::Full("a subscriber with the Block policy is at its lag limit".into()));
            }
            (Wait::For(limit), None) => self.space.wait_until(limit.map(|l| Instant::now() + l), room),
            // Processes mode: the drainers of every process wake it through
            // the shared page (`blockers.rs`), this process's too.
            (Wait::For(limit), Some(shared)) => {
                let end = || self.log.end_offset_pinned(&epoch::pin());
                shared.wait(limit.map(|l| Instant::now() + l), n, end, room)
            }
        };
        // Acquire: as in `room`.
        if self.closing.load(Ordering::Acquire) {
            return Err(Error::Closed(
                "the broker was closed while the publish waited for a Block subscriber to make room".into(),
            ));
        }
        if blocked_by_own {
            return Err(Error::Full(format!(
                "partition {} is at the lag limit of the Block subscription whose handler is publishing: \
                 waiting would wait for that handler itself, so it does not wait (return from the \
                 handler to make room)",
                self.index
            )));
        }
        if got_room { Ok(()) } else { Err(Error::Timeout) }
    }

    /// True unless a `Block` subscriber of some process (Processes mode)
    /// leaves no room for offsets up to `end() + n`. One load when there is
    /// none (see "Why one Relaxed load is enough on the fast path" in
    /// `blockers.rs`), and then `end` is not called: it loads the tail
    /// word, which a publisher should find in its own cache for its
    /// fetch-add, not shared with its last reader (the `ipc` scenario's
    /// latency run).
    #[inline]
    fn shared_room(&self, end: impl FnOnce() -> u64, n: u64) -> bool {
        match &self.shared_blockers {
            None => true,
            Some(shared) => !shared.any() || shared.has_room(end(), n),
        }
    }

    /// Appends one record and signals the listeners; returns its offset.
    /// With `Block` subscribers, first makes sure the record fits under their
    /// limits, waiting as `wait` allows. Its error is one word (see
    /// [`PublishFailure`]), so the result comes back in two registers.
    #[inline]
    pub(crate) fn publish(&self, record: &Record<'_>, wait: Wait) -> Result<u64, PublishFailure> {
        self.publish_inlined(record, wait)
    }

    /// [`Partition::publish`], always inlined into its caller: the C ABI's
    /// one-record publish, an exported function that the C program calls,
    /// takes it so that it is one call deep, as a Rust caller's inlined
    /// `Publisher::publish` is, instead of two (fewer instructions a publish
    /// under callgrind, the C `publisher` mode with no subscriber; see
    /// "Counting instructions" in docs/PERFORMANCE.md).
    #[inline(always)]
    pub(crate) fn publish_inlined(&self, record: &Record<'_>, wait: Wait) -> Result<u64, PublishFailure> {
        if self.keyed_only && record.key.is_none() {
            return Err(PublishFailure::from(keyless(self.index)));
        }
        // The stamp is read before the pin: the pin's locked instruction waits
        // for the previous publish's stores to drain, and a clock read issued
        // after it waits too, while one issued before overlaps that drain
        // (measured by the "pinned into 256 MiB" floor of `rill-bench
        // --publish-cost` and its no-subscriber row past retention, with the
        // read before and after the pin).
        let mut timestamp = now_ns();
        let mut guard = epoch::pin();
        loop {
            let current = self.current(&guard);
            let local = current.blockers.is_empty() || current.has_room(self.log.end_offset_pinned(&guard), 1);
            if local && self.shared_room(|| self.log.end_offset_pinned(&guard), 1) {
                break;
            }
            // Do not stay pinned while waiting.
            drop(guard);
            self.wait_for_room(1, wait)?;
            // Stamped when appended, not when the wait began.
            timestamp = now_ns();
            guard = epoch::pin();
        }
        let offset = self.log.append_pinned(record, timestamp, &mut guard)?;
        self.notify(&guard);
        Ok(offset)
    }

    /// Appends records in order and signals the listeners. With `Block`
    /// subscribers, a batch larger than the room they leave goes in parts.
    /// The batch comes measured (`Log::measure`), so no part has a record
    /// the log refuses for its size.
    pub(crate) fn publish_batch(&self, batch: Measured<'_, '_>, offsets: &mut Vec<u64>, wait: Wait) -> Result<()> {
        offsets.clear();
        let records = batch.records();
        // Checked before any is appended, as the log checks sizes.
        if self.keyed_only && records.iter().any(|r| r.key.is_none()) {
            return Err(keyless(self.index));
        }
        // Room for every offset at once: the usual batch goes in one part,
        // appended straight into `offsets` (below), which then never grows
        // record by record.
        offsets.reserve(records.len());
        let mut part = Vec::new();
        let mut done = 0;
        while done < records.len() {
            let mut guard = epoch::pin();
            let n = loop {
                let current = self.current(&guard);
                let shared_limit = self.shared_blockers.as_ref().filter(|s| s.any()).and_then(|s| s.min_limit());
                let n = match current.blockers.iter().map(|b| b.limit).chain(shared_limit).min() {
                    None => records.len() - done,
                    Some(limit) => (records.len() - done).min(limit as usize).max(1),
                };
                let end = || self.log.end_offset_pinned(&guard);
                // `has_room` is true at once with no blocker, before `end` loads anything.
                if (current.blockers.is_empty() || current.has_room(end(), n as u64)) && self.shared_room(end, n as u64)
                {
                    break n;
                }
                drop(guard);
                self.wait_for_room(n as u64, wait)?;
                guard = epoch::pin();
            };
            let whole = done == 0 && n == records.len();
            let into = if whole { &mut *offsets } else { &mut part };
            let appended = self.log.append_measured_pinned(batch.part(done..done + n), into, &mut guard);
            // A failed segment allocation may leave part of the batch appended:
            // signal for that part too, then report the error.
            if !into.is_empty() {
                self.notify(&guard);
            }
            if !whole {
                offsets.extend_from_slice(&part);
            }
            appended?;
            done += n;
        }
        Ok(())
    }

    /// Signals the listeners after a commit: the publisher's half of
    /// signal-and-drain (`signal::notify`, with fences F1 and F2).
    #[inline]
    pub(crate) fn notify(&self, guard: &Guard) {
        // The publisher's half of the asymmetric fence: the commit before the
        // list's load, against a listener being added (`barrier.rs`).
        barrier::light();
        let current = self.current(guard);
        signal::notify(&current.list, current.marked);
        if let Some(cross) = &self.cross {
            // Brokers in other processes (see `doorbell.rs`).
            cross.after_commit();
        }
        if let Some(due) = self.flush_due.get() {
            // The commit waits for a sync round; `light` above is D1.
            due.mark_after_light();
        }
    }

    /// Has publishes mark `due` from now on (once; later calls do nothing).
    pub(crate) fn set_flush_due(&self, due: &Due) {
        let _ = self.flush_due.set(due.clone());
    }

    /// Adds a listener (no-op if one with its id is there), and its blocker,
    /// whose position retention then waits for.
    ///
    /// On return, every record a publisher committed without seeing the new
    /// listener is visible to this thread's reads of the log (the listener's
    /// half of the asymmetric fence in `barrier.rs`), so the caller's look
    /// at the log after this finds it.
    pub(crate) fn add_listener(&self, listener: Entry, blocker: Option<Blocker>) {
        if let Some(b) = &blocker {
            self.log.hold_retention(b.id, b.position.clone());
        }
        self.edit_listeners(|list, blockers, slots| {
            if !list.iter().any(|l| l.id() == listener.id()) {
                list.push(listener);
            }
            if let (Some(b), Some(shared)) = (&blocker, &self.shared_blockers) {
                // Acquire: pairs with the drainer's Release (`publish_position`).
                match SharedBlockers::claim(shared, b.position.load(Ordering::Acquire), b.limit) {
                    Some(slot) => slots.push((b.id, b.position.clone(), Arc::new(slot))),
                    None => log::warn!(
                        "partition {}: every slot for Block subscribers of other processes is taken; this \
                         one holds back the publishers of its own process only",
                        self.index
                    ),
                }
            }
            blockers.extend(blocker);
        });
        // The raise of this broker's interest (in `edit_listeners`) is
        // ordered before the caller's look at the log by the fence that
        // opens `heavy` (see "The race it survives" in `doorbell.rs`).
        barrier::heavy();
        if self.cross.is_some() {
            // A disarmed doorbell arms for it (heavy's fence in F4's role:
            // see "Arming only while a listener may sleep" in `doorbell.rs`).
            super::doorbell::listener_may_sleep();
        }
    }

    /// Removes the listener (and blocker) with `id`; wakes blocked publishers.
    pub(crate) fn remove_listener(&self, id: u64) {
        let mut gone = Vec::new();
        self.edit_listeners(|list, blockers, slots| {
            list.retain(|l| l.id() != id);
            blockers.retain(|b| b.id != id);
            gone.extend(slots.iter().filter(|s| s.0 == id).map(|s| s.2.clone()));
            slots.retain(|s| s.0 != id);
        });
        // Its shared slot, if it had one, stops holding back the publishers
        // of every process now (and wakes them); a list still pinned may
        // copy a position into it meanwhile, which nobody reads, and the
        // slot is not claimed again before the last such list is gone.
        for slot in gone {
            slot.detach();
        }
        self.log.release_retention(id);
        if let Some(shared) = &self.shared_blockers {
            // Publishers of this process wait there too (`wait_for_room`),
            // also for a blocker that got no slot.
            shared.moved();
        }
        self.space.notify();
    }

    /// A `Block` subscriber's drainer moved its position (published with
    /// `publish_position`): copies this partition's blockers' positions
    /// into their shared slots and wakes the publishers of every process
    /// waiting for them (`blockers.rs`), and this process's (`space`).
    pub(crate) fn room_made(&self) {
        if let Some(shared) = &self.shared_blockers {
            let guard = epoch::pin();
            for (_, position, slot) in &self.current(&guard).slots {
                // Acquire: pairs with the drainer's Release store.
                shared.set_position(slot, position.load(Ordering::Acquire));
            }
            shared.moved();
        }
        self.space.notify();
    }

    fn edit_listeners(&self, edit: impl FnOnce(&mut Vec<Entry>, &mut Vec<Blocker>, &mut Slots)) {
        let _serial = self.edit.lock();
        let guard = epoch::pin();
        let current = self.current(&guard);
        let (mut list, mut blockers, mut slots) =
            (current.list.clone(), current.blockers.clone(), current.slots.clone());
        edit(&mut list, &mut blockers, &mut slots);
        if let Some(cross) = &self.cross {
            // Under `edit`: this broker's raises and lowers alternate.
            cross.set_listening(!list.is_empty());
        }
        // Release: publishes the new list (see `current`).
        let old = self.listeners.swap(Owned::new(Listeners::new(list, blockers, slots)), Ordering::AcqRel, &guard);
        // SAFETY: `old` is unreachable now; publishers that loaded it are pinned
        // and the destructor waits for them.
        unsafe { guard.defer_destroy(old) };
        guard.flush();
    }

    pub(crate) fn listener_count(&self) -> usize {
        let guard = epoch::pin();
        self.current(&guard).list.len()
    }
}

impl Watch for Partition {
    /// The doorbell thread's look (see `doorbell.rs`): if a record was
    /// committed (in any process, following their rolls) since the last
    /// look, signals the listeners as a local publisher would. It looks for
    /// commits, not for the tail: a record reserved but not yet committed
    /// at a look is one whose publisher will find the bell armed after it
    /// commits, and the look after that ring must still find it new.
    fn look(&self) -> bool {
        let Some(watched) = &self.watched else { return false };
        let guard = epoch::pin();
        let current = self.current(&guard);
        if current.list.is_empty() {
            return false;
        }
        let mut cursor = watched.lock();
        if !cursor.has_next() {
            return false;
        }
        // Past every record committed now: the next look reports newer ones.
        while cursor.has_next() {
            // A record, or a lag report (retention went past the cursor,
            // which moved on): either way a step forward.
            let _ = cursor.read();
        }
        signal::notify(&current.list, current.marked);
        true
    }

    fn may_sleep(&self) -> bool {
        if self.watched.is_none() {
            return false;
        }
        let guard = epoch::pin();
        signal::any_may_sleep(&self.current(&guard).list)
    }

    fn retry_at(&self) -> Option<std::time::Instant> {
        let watched = self.watched.as_ref()?;
        // A partition `look` passes over (no listener) asks for no look:
        // its cursor's wait would not be looked at, and a deadline past
        // would wake the doorbell at once, round after round.
        if self.current(&epoch::pin()).list.is_empty() {
            return None;
        }
        watched.lock().retry_at()
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: nobody else can load the list any more.
        unsafe {
            // Relaxed: `&mut self`, nothing else can touch it.
            let list = self.listeners.load(Ordering::Relaxed, epoch::unprotected());
            drop(list.into_owned());
        }
    }
}

impl fmt::Debug for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Partition")
            .field("index", &self.index)
            .field("log", &self.log)
            .field("listeners", &self.listener_count())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::broker::doorbell::Bell;
    use crate::log::LogConfig;

    /// Counts its wakes: a listener woken after every commit.
    struct Wakes(crate::sync::atomic::AtomicU64);

    impl super::signal::Listener for Wakes {
        fn wake(&self) {
            // Relaxed: the test reads it on this thread.
            self.0.fetch_add(1, Ordering::Relaxed);
        }

        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    #[test]
    fn the_doorbell_look_counts_commits_not_reservations() {
        let dir = std::env::temp_dir().join(format!("rill-topic-look-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let bell = Arc::new(Bell::open(&dir, true).unwrap());
        let cross = Cross::open(&dir, true, bell).unwrap();
        let log = Log::new(&LogConfig::default()).unwrap();
        let p = Partition::shared(0, log.clone(), cross, SharedBlockers::open(&dir, true).unwrap());
        let wakes = Arc::new(Wakes(AtomicU64::new(0)));
        let listener: Arc<dyn super::signal::Listener> = wakes.clone();
        p.add_listener(Entry::always(1, listener), None);
        assert!(!p.look(), "nothing published");
        // Reserved and never committed (a publisher still copying): the
        // tail moved, but a look that took it for seen would find nothing
        // new after the publisher's commit and ring.
        log.leave_hole(64);
        assert!(!p.look(), "a reservation is not a commit");
        assert_eq!(wakes.0.load(Ordering::Relaxed), 0);

        let log = Log::new(&LogConfig::default()).unwrap();
        let cross = Cross::open(&dir, true, Arc::new(Bell::open(&dir, true).unwrap())).unwrap();
        let p = Partition::shared(0, log.clone(), cross, SharedBlockers::open(&dir, true).unwrap());
        let listener: Arc<dyn super::signal::Listener> = wakes.clone();
        p.add_listener(Entry::always(1, listener), None);
        log.append(&Record::new(b"x")).unwrap();
        assert!(p.look(), "a commit since the last look");
        assert_eq!(wakes.0.load(Ordering::Relaxed), 1);
        assert!(!p.look(), "nothing newer");
        drop(p);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[cfg(all(test, not(loom)))]
mod layout {
    use std::mem::{offset_of, size_of};

    use super::{Cross, Due, Listeners, Partition};
    use crate::log::hot_then_cold;

    #[test]
    fn the_fields_a_publish_reads_come_first_in_a_partition_and_its_listeners() {
        type P = Partition;
        let (end, start) = hot_then_cold(
            &[
                (offset_of!(P, keyed_only), 1),
                (offset_of!(P, deleted), 1),
                (offset_of!(P, index), 4),
                (offset_of!(P, log), size_of::<crate::log::Log>()),
                (offset_of!(P, listeners), 8),
                (offset_of!(P, shared_blockers), 8),
                (offset_of!(P, flush_due), size_of::<std::sync::OnceLock<Due>>()),
                (offset_of!(P, cross), size_of::<Option<Cross>>()),
            ],
            &[
                offset_of!(P, recovery),
                offset_of!(P, offsets_reset),
                offset_of!(P, edit),
                offset_of!(P, space),
                offset_of!(P, watched),
            ],
        );
        assert!(end <= start && end <= 80, "a publish reads {end} bytes of a partition, the rest from {start}");
        type L = Listeners;
        let (end, start) = hot_then_cold(
            &[(offset_of!(L, list), 24), (offset_of!(L, marked), 1), (offset_of!(L, blockers), 24)],
            &[offset_of!(L, room_until), offset_of!(L, slots)],
        );
        assert!(end <= start && end <= 64, "a publish reads {end} bytes of a listener list, the rest from {start}");
    }
}
