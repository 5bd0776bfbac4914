//! Signal-and-drain: how a publisher wakes a subscription, and how a
//! drainer goes idle without missing a commit. Both halves live here, beside
//! the fences that pair them: the publisher's ([`notify`], fences F1 and F2)
//! and the drainer's ([`go_idle`] with F4, [`ReadySet::take`] with F3).
//!
//! # Signal-and-drain
//!
//! Each subscription has one state word (`state.rs`), read by every
//! publisher to a partition it listens to and written only on transitions:
//!
//! * a **publisher**, after committing a record and a `fence(SeqCst)` (F1),
//!   loads the state; only if it reads `IDLE` does it try `IDLE -> ACTIVE`
//!   with a compare-and-swap, and the one that wins schedules a drain. A busy
//!   subscription costs a publisher one shared load, no write. With several
//!   listeners, once one reads `IDLE` the publisher loads the rest before
//!   it swaps any (`wake_from`), so their lines travel together; each still
//!   gets one load after F1 and, if it read `IDLE`, one swap.
//! * the **timer** moves `BACKOFF -> ACTIVE` with a compare-and-swap and
//!   schedules a drain.
//! * the **drainer** delivers in bounded rounds. When a round used its whole
//!   budget it stays `ACTIVE` and queues itself again behind other work. When
//!   it found nothing more to deliver it moves `ACTIVE -> IDLE`, issues a
//!   `fence(SeqCst)` (F4), and *re-checks every partition it reads*: if a
//!   record is now committed, it tries `IDLE -> ACTIVE` and, if that wins,
//!   carries on draining (if it loses, whoever won has scheduled a drain).
//!   When the head message must wait for a retry it moves `ACTIVE -> BACKOFF`
//!   and sets a timer.
//! * **close** swaps in `CLOSED` from any state; nothing leaves `CLOSED`.
//!
//! ## The race it survives: the lost wakeup
//!
//! A drainer checks offset `o`, finds it not committed, and is about to go
//! idle. A publisher commits `o` and reads the state. Without fences, the
//! publisher can read the stale `ACTIVE` (and skip signalling) while the
//! drainer's re-check reads the stale "not committed" (and goes idle): `o` then
//! sits undelivered until some later publish. The publisher's
//! `commit; fence(SeqCst); load state` (F1) and the drainer's
//! `store IDLE; fence(SeqCst); load slots` (F4) close it: SeqCst fences are
//! totally ordered, so if the publisher's fence comes first the drainer's
//! re-check sees the commit, and if the drainer's fence comes first the
//! publisher's load sees `IDLE` (or a later state, in which case a drain that
//! started after that state was written will run the same re-check and see
//! the commit).
//!
//! The fences are what loom needs, too: loom models SeqCst loads and stores as
//! acquire/release, which would let this race through; `fence(SeqCst)` it
//! models exactly. The loom models in `loom-tests/tests/signal.rs` run this
//! code; `.ci/fence-check` weakens each fence named here in turn and
//! requires some model to fail.
//!
//! ## Ready partitions (wildcard subscriptions)
//!
//! A subscription to a pattern may read thousands of partitions, and the
//! protocol above makes every wake-up look at all of them (a drain round
//! visits each reader, the re-check reads each cursor). So a subscription
//! whose pattern has a wildcard keeps a [`ReadySet`]: each of its readers has
//! a [`Mark`] (`listed`, shared with the partition's listener entry), and the
//! subscription a list of listed readers plus a `nonempty` flag.
//!
//! * a **publisher**, after its commit and `fence(SeqCst)` (F1), loads the
//!   mark; if it is clear it swaps it on, and the one that turns it on pushes
//!   the reader's index on the list (under its lock), sets `nonempty`, and
//!   issues a second `fence(SeqCst)` (F2) before loading the state as above.
//!   A listed reader costs later publishers one load.
//! * the **drainer** starts a round by taking the list (clearing `nonempty`
//!   under the lock), clears the marks of the readers it took, issues a
//!   `fence(SeqCst)` (F3), then visits those readers, the reader of a pending
//!   retry, and readers *carried* from the last round (new ones, and those it
//!   had not finished when the round's budget ran out). Going idle, it stores
//!   `IDLE`, fences (F4) and re-checks `nonempty` (and the carry, and new
//!   readers) instead of every cursor.
//!
//! Why no commit is stranded: say publisher P commits record r to a reader's
//! partition. (a) P turns the mark on: its list entry is ordered before F2,
//! so either the drainer's re-check after F4 sees `nonempty` or P's state
//! load after F2 sees `IDLE` and schedules a drain (the F2/F4 argument is the
//! lost-wakeup one above); the drain that takes the entry acquires it
//! through the list lock, after P's commit. (b) P finds the mark on: the mark
//! was turned on by some Q that lists it as in (a), and the drainer's clear
//! of it comes later in its modification order than P's read (else P would
//! have read the clear). If the drainer's F3 preceded P's F1 in the fences'
//! total order, P's read after F1 would see that clear or later, not the
//! earlier on; so F1 precedes F3, and the drainer's cursor reads after F3
//! see P's commit before F1. The visit after F3 delivers r.
//!
//! ## Attaching a partition
//!
//! A subscription starts reading a partition (a topic created for its
//! pattern, or one of the topics it found when it subscribed) in two steps
//! (`subscription::attach::attach_to`): it hands the reader to the drainer (the
//! `pending` list, merged at a round's start), then adds its entry to the
//! partition's list. Publishers can reach the partition before both: the
//! topic is in the broker's map first. A publisher P that commits r and
//! walks the list before the entry is there signals no one, so r is the
//! attacher's to signal. It does so with the publisher's half of the
//! protocol, after adding the entry: `poke`'s fence in F1's role, the
//! reader's mark as in (a) and (b), then `poke` (its fence in F2's role,
//! then `IDLE -> ACTIVE`). If r is visible to the attacher's fence, it is
//! then to the attacher what its own commit is to a publisher, and (a)
//! and (b) carry over word for word.
//!
//! What that "if" rests on: P's commit and its load of the list, against
//! the attacher's swap of the list and its look at the log, is a
//! store-buffering race, and each side needs a `SeqCst`-strength fence
//! between its store and its load, or both can miss each other (loom finds
//! that run). P pays nothing for it: its fence is the light half of an
//! asymmetric pair (`F0`, in `Partition::notify` before the list's load; a
//! compiler fence once the process registered `membarrier`), and the
//! attacher's is the heavy half (`Partition::add_listener` ends with it),
//! see `broker/barrier.rs`. So either P's load saw the entry (P signals, as
//! in (a) and (b)), or r is visible to the attacher's reads after its
//! barrier, the listing's and the poke's, and the drain those start. The
//! loom models in `loom-tests/tests/attach.rs` run it, with and without a
//! drain woken by another partition meanwhile; with `F0` weakened the
//! first fails.
//! Consumers taking a partition and literal subscriptions add their
//! listener through the same `add_listener`, and look at the log after it.
//!
//! Without it, with a ready set, r could be stranded: a drain running
//! meanwhile (woken by the subscription's other partitions) merges the new
//! reader, carries it, visits it before r and reads nothing; the drain the
//! poke runs visits only listed and carried readers, and a re-check reads
//! only `nonempty` and the carry. Nothing looked at the reader again until
//! the partition's next publish (issue 40). A subscription without a ready
//! set needs only the poke: its rounds and re-checks read every cursor, and
//! the poke's fence pairs with F4 as F1 does (with the same "if").
//!
//! Subscriptions to a literal topic keep the plain protocol: their handful
//! of partitions is cheaper to scan than to list, and their publishers pay no
//! second fence. Loom models the ready set in `loom-tests/tests/signal.rs`
//! (two publishers on two partitions of one wildcard subscription).
//!
//! ## Who listens
//!
//! A partition does not know what listens to it. It holds a list of
//! [`Entry`]s, a type of this module: a subscription's entry carries its
//! state word and its ready mark (both one pointer away, so the walk above
//! is a load per subscription, inlined, with no call), and every entry a
//! [`Listener`], a trait that subscriptions (`subscription/core.rs`) and
//! pull consumers (`consumer.rs`) implement. A publisher calls the trait only when there is
//! something to do: for a subscription, when it won `IDLE -> ACTIVE` and
//! must schedule a drain; for a listener without a state word (a consumer),
//! after every commit (the consumer's wake is two loads, its waiter count
//! and its bell, when no thread of it waits). So the log-and-partition layer below never names the
//! types above it, and a busy subscription still costs one shared load.
//! A publisher that wins several subscriptions in one walk (they had all
//! caught up) collects their drains and queues them on the pool together
//! when the walk ends (`Wakes`): one lock of the pool's queue and at most a
//! notify per sleeping worker, not one each. The state moves and the fences
//! are those above; a drain is queued a few loads later than it was, never
//! skipped (an unwinding walk queues what it collected).

use super::state::State;
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};
use crate::sync::{Arc, Mutex};

/// What a publisher wakes after committing a record to a partition.
pub(crate) trait Listener: Send + Sync + 'static {
    /// For an entry with a state word (a subscription): the publisher won
    /// `IDLE -> ACTIVE`, so a drain must be scheduled. For one without (a
    /// consumer): a record was committed, behind a `fence(SeqCst)` (F1).
    fn wake(&self);

    /// For a listener whose drains go to a queue that takes several at once
    /// (a subscription on the pool): that queue's address. A publisher then
    /// collects it in its [`Wakes`] instead of calling `wake`, and queues
    /// the listeners with the same key together with `wake_batch`.
    fn batch_key(&self) -> Option<usize> {
        None
    }

    /// For a listener without a state word (a consumer): whether it may be
    /// asleep, or about to sleep, waiting for a record, as the doorbell
    /// reads it after X4 (see "Arming only while a listener may sleep" in
    /// `doorbell.rs`). True unless the listener can tell.
    fn may_sleep(&self) -> bool {
        true
    }

    /// Wakes every listener in `batch` (this one among them; all have this
    /// one's `batch_key`) at once.
    fn wake_batch(&self, batch: &[Option<&dyn Listener>]) {
        for l in batch.iter().flatten() {
            l.wake();
        }
    }

    /// The listener itself, for `wake_batch` to find its own type.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// Most listeners a publisher collects before it wakes them.
const WAKES: usize = 8;

/// The listeners a publisher won while walking one partition's list, woken
/// together when the walk ends ([`Wakes::flush`]): for subscriptions on the
/// pool, one lock of the pool's queue and at most one notify per sleeping
/// worker, instead of a lock and possibly a futex call each. Listeners
/// without a `batch_key` are woken at once.
struct Wakes<'a> {
    /// The `batch_key` of every listener in `held[..len]`.
    key: usize,
    held: [Option<&'a dyn Listener>; WAKES],
    len: usize,
}

impl<'a> Wakes<'a> {
    fn new() -> Wakes<'a> {
        Wakes { key: 0, held: [None; WAKES], len: 0 }
    }

    fn add(&mut self, listener: &'a dyn Listener) {
        let Some(key) = listener.batch_key() else {
            return listener.wake();
        };
        if self.len == WAKES || (self.len > 0 && key != self.key) {
            self.flush();
        }
        self.key = key;
        self.held[self.len] = Some(listener);
        self.len += 1;
    }

    fn flush(&mut self) {
        let n = std::mem::take(&mut self.len);
        if let Some(first) = self.held[..n].first().copied().flatten() {
            first.wake_batch(&self.held[..n]);
        }
    }
}

impl Drop for Wakes<'_> {
    /// What was collected is woken even if the walk unwinds: a subscription
    /// among it is `ACTIVE`, and nothing else would schedule its drain.
    fn drop(&mut self) {
        self.flush();
    }
}

/// A listener as a partition's list holds it: what a publisher reads after
/// each commit, one pointer away, and the listener to wake.
#[derive(Clone)]
pub(crate) struct Entry {
    /// The subscription's state word, read by every publisher; `None` for a
    /// listener woken after every commit.
    state: Option<Arc<State>>,
    /// Its ready set and its reader's mark there, for a subscription that
    /// keeps a ready set (a wildcard one).
    ready: Option<(Arc<ReadySet>, Arc<Mark>)>,
    listener: Arc<dyn Listener>,
    /// The listener's id (a subscription's or consumer's), unique in a
    /// partition's list.
    id: u64,
}

impl Entry {
    /// A subscription's entry: publishers move `state` from `IDLE` to
    /// `ACTIVE` and wake `listener` when they win; with a ready set, they
    /// list `mark` in it first.
    pub(crate) fn subscription(
        id: u64,
        state: Arc<State>,
        ready: Option<(Arc<ReadySet>, Arc<Mark>)>,
        listener: Arc<dyn Listener>,
    ) -> Entry {
        Entry { state: Some(state), ready, listener, id }
    }

    /// An entry whose listener is woken after every commit.
    pub(crate) fn always(id: u64, listener: Arc<dyn Listener>) -> Entry {
        Entry { state: None, ready: None, listener, id }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// True if publishers must look at its ready mark.
    pub(crate) fn has_mark(&self) -> bool {
        self.ready.is_some()
    }
}

/// The publisher's half of signal-and-drain, after its commit: F1, the
/// ready marks, F2 if it listed one, then each listener's state.
#[inline]
pub(crate) fn notify(entries: &[Entry], marked: bool) {
    if entries.is_empty() {
        return;
    }
    // F1, SeqCst fence: orders this publisher's commit (a Release store of the
    // slot) before its loads of the listeners' ready marks and states. It
    // pairs with F4, the fence a drainer issues between going idle and
    // re-checking the log (or its ready list), and with F3, the one after it
    // clears marks; together they rule out both sides missing each other.
    crate::sync::fence_or_weakened!("F1", Ordering::SeqCst);
    let mut listed = false;
    if marked {
        for e in entries {
            if let Some((set, mark)) = &e.ready {
                listed |= set.mark(mark);
            }
        }
    }
    if listed {
        // F2, SeqCst fence: orders the ready-list entry just added before the
        // state loads below, pairing with F4 between the drainer going idle
        // and looking at its ready list.
        crate::sync::fence_or_weakened!("F2", Ordering::SeqCst);
    }
    // Most walks find every subscription busy: one load each, nothing to
    // wake, and nothing set up for waking.
    for (i, e) in entries.iter().enumerate() {
        if may_win(e) {
            return wake_from(&entries[i..]);
        }
    }
}

/// True if the publisher may have to wake `e`: it has no state word, or
/// its state reads `IDLE` (the first half of `State::activate`).
#[inline]
fn may_win(e: &Entry) -> bool {
    e.state.as_ref().is_none_or(|state| state.reads_idle())
}

/// True if this publisher must wake `e`, which [`may_win`] said it may: it
/// has no state word, or this publisher moved it from `IDLE` to `ACTIVE`.
#[inline]
fn wins(e: &Entry) -> bool {
    e.state.as_ref().is_none_or(|state| state.win_idle())
}

/// True if a listener among `entries` may sleep: a subscription whose
/// state reads `IDLE` (one a publisher may have to wake, [`may_win`]), or
/// a consumer that says it may ([`Listener::may_sleep`]). For the doorbell's choice to arm, after X4
/// (see "Arming only while a listener may sleep" in `doorbell.rs`).
pub(crate) fn any_may_sleep(entries: &[Entry]) -> bool {
    entries.iter().any(|e| match &e.state {
        Some(state) => state.reads_idle(),
        // A consumer is woken after every commit (`may_win`), but only one
        // waiting in `poll` needs it: it says so itself.
        None => e.listener.may_sleep(),
    })
}

/// Entries looked at together by [`wake_from`]: one bit each in a word.
const WAKE_CHUNK: usize = 64;

/// Wakes, of `entries` (the first of which read `IDLE` or has no state
/// word, in [`notify`]'s walk), every one this publisher wins, queueing the pool's drains
/// together (see `Wakes`).
///
/// In two passes over each [`WAKE_CHUNK`] entries: first one load of each
/// state word, and a prefetch for writing of each that reads `IDLE`; then
/// the compare-and-swap of each of those. Why: a state word that reads
/// `IDLE` was last written by its drainer, on another core, and the
/// compare-and-swap needs its line exclusive. Load and swap in turn, each
/// entry cost two transfers of its line, and the next entry's load waited
/// behind the locked swap, so waking 8 idle subscriptions cost the
/// publisher 16 line transfers in a row. Loads with no locked instruction
/// between them overlap, and so do the prefetches. Each entry still sees
/// one load after F1 and, if it read `IDLE`, one compare-and-swap, as the
/// essay requires; only the order between entries changed.
#[inline(never)]
fn wake_from(entries: &[Entry]) {
    let mut wakes = Wakes::new();
    for (c, chunk) in entries.chunks(WAKE_CHUNK).enumerate() {
        let mut idle = 0u64;
        for (k, e) in chunk.iter().enumerate() {
            // The first entry read `IDLE` in `notify`'s walk: not loaded again.
            if (c == 0 && k == 0) || may_win(e) {
                idle |= 1 << k;
                if let Some(state) = &e.state {
                    crate::sync::prefetch_write(state.addr());
                }
            }
        }
        while idle != 0 {
            let k = idle.trailing_zeros() as usize;
            idle &= idle - 1;
            if wins(&chunk[k]) {
                wakes.add(&*chunk[k].listener);
            }
        }
    }
    wakes.flush();
}

/// `poke`'s fence: the same role as F1 after a commit (what the caller just
/// did, e.g. attach a reader, is ordered before its state load), pairing with
/// the drainer's F4.
#[inline]
pub(crate) fn poke_fence() {
    // SeqCst fence: see above.
    fence(Ordering::SeqCst);
}

/// How going idle ended (see [`go_idle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Idled {
    /// The subscription was closed; the drainer returns.
    Closed,
    /// Idle, nothing left: the drainer returns and tells `wait_idle` callers.
    Idle,
    /// The re-check found work and the drainer took the drain back.
    Resumed,
    /// The re-check found work, but a publisher moved the state first and
    /// scheduled a drain of its own; this drainer returns.
    HandedOver,
}

/// The drainer's half: `ACTIVE -> IDLE`, F4, then the re-check `has_work`
/// (the cursors, or the ready set) and, if it finds work, `IDLE -> ACTIVE`.
#[inline]
pub(crate) fn go_idle(state: &State, has_work: impl FnOnce() -> bool) -> Idled {
    go_idle_then(state, has_work, crate::broker::doorbell::listener_may_sleep)
}

/// [`go_idle`], with what it tells when it stays idle (`may_sleep`: this
/// process's doorbells, see "Arming only while a listener may sleep" in
/// `doorbell.rs`), after F4 and the re-check; the loom models pass their
/// own.
#[inline]
pub(crate) fn go_idle_then(state: &State, has_work: impl FnOnce() -> bool, may_sleep: impl FnOnce()) -> Idled {
    if !state.go_idle() {
        return Idled::Closed;
    }
    // F4, SeqCst fence: orders the IDLE store before the re-check's loads of
    // the slots (or `nonempty`); pairs with the publisher's F1 (and F2).
    crate::sync::fence_or_weakened!("F4", Ordering::SeqCst);
    if !has_work() {
        // Its load is ordered by F4 too: it pairs with X4 as F1 with F4.
        may_sleep();
        return Idled::Idle;
    }
    if state.reactivate() { Idled::Resumed } else { Idled::HandedOver }
}

/// A reader's entry in its subscription's ready list, shared with the
/// listener that publishers of its partition call.
#[derive(Debug)]
pub(crate) struct Mark {
    /// True from the moment a publisher claims the right to list this reader
    /// until the drainer takes it off the list.
    listed: AtomicBool,
    /// The reader's index in the drainer's list of readers.
    index: usize,
}

/// Which partitions of a wildcard subscription publishers have written to
/// since the drainer last looked.
#[derive(Debug)]
pub(crate) struct ReadySet {
    /// Indices of the readers whose mark is set.
    list: Mutex<Vec<usize>>,
    /// `list` is not empty: what the drainer's idle re-check reads.
    nonempty: AtomicBool,
    /// Readers attached so far (the next reader's index); written under the
    /// subscription's `pending` lock, so indices follow the order readers are
    /// merged in.
    attached: AtomicU64,
}

impl ReadySet {
    pub(crate) fn new() -> ReadySet {
        ReadySet { list: Mutex::new(Vec::new()), nonempty: AtomicBool::new(false), attached: AtomicU64::new(0) }
    }

    /// A mark for the next reader attached. Call under the lock that orders
    /// attached readers.
    pub(crate) fn next_mark(&self) -> Arc<Mark> {
        // Relaxed: written under the caller's lock only.
        let index = self.attached.fetch_add(1, Ordering::Relaxed) as usize;
        Arc::new(Mark { listed: AtomicBool::new(false), index })
    }

    /// The publisher's half, after F1: lists the reader of `mark` unless it
    /// is listed already. True if it listed it (the caller must issue F2).
    #[inline]
    pub(crate) fn mark(&self, mark: &Mark) -> bool {
        // Relaxed load, then Relaxed swap: F1 before orders them after the
        // commit; whoever turns the flag on lists the reader, and a reader
        // already listed will be drained past this commit (see the essay).
        if mark.listed.load(Ordering::Relaxed) || mark.listed.swap(true, Ordering::Relaxed) {
            return false;
        }
        self.push_listed(mark);
        true
    }

    /// The attacher's half (see "Attaching a partition" in the essay): after
    /// the reader's entry was added to its partition's list, signals what
    /// publishers committed there before it, which they signalled to no
    /// one. The caller pokes the subscription afterwards (`poke`'s fence is
    /// F2's role, its `IDLE -> ACTIVE` the publisher's).
    pub(crate) fn relist(&self, mark: &Mark) {
        // F1's role: orders the entry's addition before the mark's loads.
        poke_fence();
        self.mark(mark);
    }

    /// Puts the reader of `mark`, whose flag this thread just turned on, on
    /// the list (out of line: once per drain round, not per publish).
    #[cold]
    fn push_listed(&self, mark: &Mark) {
        let mut list = self.list.lock();
        list.push(mark.index);
        // Relaxed: read after F4 by the drainer's re-check, and written back
        // to false only under the list lock, together with taking it.
        self.nonempty.store(true, Ordering::Relaxed);
    }

    /// The drainer's half, at the start of a round: takes the listed
    /// readers' indices.
    pub(crate) fn take(&self) -> Vec<usize> {
        let mut list = self.list.lock();
        // Relaxed: see `mark`.
        self.nonempty.store(false, Ordering::Relaxed);
        std::mem::take(&mut *list)
    }

    /// Clears the marks of the readers just taken, then F3. The caller reads
    /// those readers' cursors only after this returns.
    pub(crate) fn clear<'a>(&self, marks: impl Iterator<Item = &'a Mark>) {
        let mut any = false;
        for mark in marks {
            // Relaxed: F3 below orders the clears before the reads of these
            // readers' cursors.
            mark.listed.store(false, Ordering::Relaxed);
            any = true;
        }
        if any {
            // F3, SeqCst fence: pairs with the publishers' F1 between commit
            // and mark: a publisher that found a mark still set committed
            // before this fence, so the reads after it see its record.
            crate::sync::fence_or_weakened!("F3", Ordering::SeqCst);
        }
    }

    /// The idle re-check's look: is anything listed? Call after F4.
    #[inline]
    pub(crate) fn nonempty(&self) -> bool {
        // Relaxed: the caller's F4 orders this load (see the essay).
        self.nonempty.load(Ordering::Relaxed)
    }
}
