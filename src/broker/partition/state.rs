//! A subscription's state word: every transition of it, each with the
//! ordering it needs and why.
//!
//! | state     | meaning                                                        |
//! |-----------|----------------------------------------------------------------|
//! | `IDLE`    | no drain is queued or running; the next commit must start one  |
//! | `ACTIVE`  | a drain is queued or running; commits need do nothing          |
//! | `BACKOFF` | the head message waits for a retry; the timer will wake it     |
//! | `CLOSED`  | final                                                          |
//!
//! | transition                   | who                    | method            |
//! |------------------------------|------------------------|-------------------|
//! | `IDLE -> ACTIVE`             | a publisher, `poke`    | [`State::activate`]       |
//! | `ACTIVE -> IDLE`             | the drainer, caught up | [`State::go_idle`]        |
//! | `IDLE -> ACTIVE` (re-check)  | the drainer            | [`State::reactivate`]     |
//! | `ACTIVE -> BACKOFF`          | the drainer, on retry  | [`State::backoff`]        |
//! | `BACKOFF -> ACTIVE`          | the retry timer        | [`State::wake_from_backoff`] |
//! | any `-> CLOSED`              | `close`                | [`State::close`]          |
//!
//! Nothing leaves `CLOSED`: every transition but `close` is a
//! compare-and-swap from a state other than `CLOSED`. The word is read by
//! every publisher to a partition the subscription listens to, so it sits
//! on a cache line of its own. Why the moves into and out of `IDLE` cannot
//! lose a wakeup is the subject of the signal module (`signal.rs`), which
//! issues the fences around them. It lives beside that module, below
//! `subscription/`, because publishers read it through their partition's
//! list of [`Entry`](super::signal::Entry)s.
//!
//! ## What each ordering is for, and which are shown
//!
//! The state word hands over no data of its own: the records reach a
//! drainer through the log's `Release`/`Acquire` on each slot (L1 in
//! `log/segment.rs`), a scheduled drain reaches a pool worker through the
//! pool's queue mutex (or reaches the dedicated thread, which drains only
//! what it reads from the log and from `pending`, itself a
//! `Release`/`Acquire` pair), and every drainer takes the drain mutex, so one
//! drainer's cursors and handler reach the next through it. What the word's
//! orderings are for is the threads that take *no* such lock: those that
//! look at the word and then at what the writer of that state did.
//!
//! * **S1**, the drainer's `Release` going idle, pairs with the `Acquire`
//!   in [`State::get`]: a thread that reads `IDLE` sees the handler calls,
//!   counters and positions before it. `stats` reads the state and then the
//!   counters (`Relaxed`) with no lock the drainer released in between, so a
//!   snapshot that says `Idle` covers everything handled before; `wait_idle`
//!   reads `IDLE` before the positions, which is what lets it load them
//!   `Relaxed`. The loom model `an_idle_snapshot_counts_what_was_handled`
//!   (`loom-tests/tests/signal.rs`) fails with S1 weakened to `Relaxed`: the
//!   handler's plain write is not ordered before the snapshot's reader.
//! * **S3**, `close`'s `Release`, pairs with the same `Acquire`: a thread
//!   that sees `CLOSED` (`is_closed`, `stats`) sees what the closer did
//!   before closing (say, what a handler wrote before closing its own
//!   subscription, for a thread that polls `is_closed`). The loom model
//!   `is_closed_sees_what_the_closer_did_before` (`loom-tests/tests/close.rs`)
//!   fails with it weakened to `Relaxed`. `close` needs no `Acquire`: the
//!   closer reads nothing a drainer wrote except under the drain mutex
//!   (`close_inner` takes it to wait for the round in flight; a close that
//!   does not wait only `try_lock`s it to wind up), and which caller is the
//!   first closer is decided by the swap being one read-modify-write, which
//!   holds at any ordering.
//! * A publisher's `IDLE -> ACTIVE` in [`State::activate`] is `Relaxed`
//!   (it was `AcqRel`, and named S2, until the fence check showed no model
//!   needing it; this is the argument that it cannot matter). Its `Release`
//!   half would publish the publisher's commit to the drain it schedules, but
//!   that drain reads the record through the slot's own `Acquire` (L1), finds
//!   an attached reader through `pending`'s pair, and is handed to a worker
//!   through the pool's mutex. Its `Acquire` half would make the last
//!   drainer's writes visible to the publisher, which reads none of them:
//!   after winning it only schedules (a mutex, or an unpark), and the drain
//!   it schedules takes the drain mutex that the last drainer released.
//!   The state word's only reader that needs a drainer's writes, `get`,
//!   reads `IDLE` (stored with S1) or `CLOSED` (S3), never a publisher's
//!   `ACTIVE`.
//!
//! The orderings of `reactivate`, `backoff` and `wake_from_backoff` are
//! not named: they are read-modify-writes by threads that then take the
//! drain mutex or schedule through the pool, as above, and kept at the
//! strength their comments give. The fences that the protocol's lost-wakeup
//! argument needs are in `signal.rs` (F1 to F4), each shown by a model.

use crossbeam_utils::CachePadded;

use crate::sync::atomic::{AtomicU8, Ordering};
use crate::sync::ordering_or_weakened;

/// No drain queued or running.
const IDLE: u8 = 0;
/// A drain is queued or running.
const ACTIVE: u8 = 1;
/// Waiting for a retry timer.
const BACKOFF: u8 = 2;
/// Closed for good.
const CLOSED: u8 = 3;

/// What the state word says, as read by [`State::get`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Idle,
    Active,
    Backoff,
    Closed,
}

/// The signal-and-drain state word of one subscription.
#[derive(Debug)]
pub(crate) struct State(CachePadded<AtomicU8>);

impl State {
    /// A new subscription is idle: the first commit (or `poke`) starts a drain.
    pub(crate) fn new() -> State {
        State(CachePadded::new(AtomicU8::new(IDLE)))
    }

    /// The current phase.
    #[inline]
    pub(crate) fn get(&self) -> Phase {
        // Acquire: a reader that sees IDLE or CLOSED also sees what the
        // drainer (or closer) did before storing it (positions, counters).
        match self.0.load(Ordering::Acquire) {
            IDLE => Phase::Idle,
            ACTIVE => Phase::Active,
            BACKOFF => Phase::Backoff,
            _ => Phase::Closed,
        }
    }

    #[inline]
    pub(crate) fn is_closed(&self) -> bool {
        self.get() == Phase::Closed
    }

    /// `IDLE -> ACTIVE` by a publisher (or `poke`), called after a
    /// `fence(SeqCst)`. True if this call won the move, in which case the
    /// caller must schedule a drain.
    #[inline]
    pub(crate) fn activate(&self) -> bool {
        self.reads_idle() && self.win_idle()
    }

    /// The first half of [`State::activate`]: whether the word reads `IDLE`.
    /// Called after a `fence(SeqCst)`, like `activate`.
    #[inline]
    pub(crate) fn reads_idle(&self) -> bool {
        // Relaxed: the preceding SeqCst fence orders this load after the
        // commit; a busy subscription costs exactly this one shared read.
        self.0.load(Ordering::Relaxed) == IDLE
    }

    /// The second half of [`State::activate`], after [`State::reads_idle`]
    /// read `IDLE`: the compare-and-swap `IDLE -> ACTIVE`. True if it won.
    #[inline]
    pub(crate) fn win_idle(&self) -> bool {
        // Relaxed on success too: the move hands over no data (see "What
        // each ordering is for" above); the fence before it and the
        // schedule after it do the ordering. Relaxed on failure: someone
        // else is handling it.
        self.0.compare_exchange(IDLE, ACTIVE, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }

    /// The word's address, for a prefetch (a hint: nothing is read through it).
    #[inline]
    pub(crate) fn addr(&self) -> *const u8 {
        std::ptr::from_ref::<AtomicU8>(&self.0).cast()
    }

    /// `ACTIVE -> IDLE` by a drainer that found nothing more to deliver.
    /// False if the subscription was closed meanwhile (the only other way
    /// out of `ACTIVE` while a drainer holds it). The caller must then issue
    /// the idle fence and re-check (`signal::go_idle`).
    #[inline]
    pub(crate) fn go_idle(&self) -> bool {
        // S1, Release on success: publishes the handler calls, positions and
        // counters before it to whoever reads IDLE with `get` (`wait_idle`).
        // Relaxed on failure: it is CLOSED, and the caller only returns.
        self.0.compare_exchange(ACTIVE, IDLE, ordering_or_weakened!("S1", Ordering::Release), Ordering::Relaxed).is_ok()
    }

    /// `IDLE -> ACTIVE` by the drainer whose idle re-check found work. False
    /// if a publisher got there first (and scheduled a drain) or it closed.
    #[inline]
    pub(crate) fn reactivate(&self) -> bool {
        // Acquire on success: we own the drain again, and see what a closer
        // or publisher released before. Relaxed on failure: we only return.
        self.0.compare_exchange(IDLE, ACTIVE, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }

    /// `ACTIVE -> BACKOFF` by a drainer whose head message waits for a retry.
    /// False if it was closed meanwhile (the caller then arms no timer).
    #[inline]
    pub(crate) fn backoff(&self) -> bool {
        // AcqRel on success: releases the drain's positions to the timer's
        // wake, which acquires them; not needed (the drain the timer
        // schedules takes the drain mutex, see the module docs), kept on this
        // rare path. The CAS itself is what rules out leaving CLOSED.
        // Relaxed on failure: it is CLOSED and the caller only returns.
        self.0.compare_exchange(ACTIVE, BACKOFF, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    }

    /// `BACKOFF -> ACTIVE` by the retry timer. True if it won; the caller
    /// then schedules a drain.
    #[inline]
    pub(crate) fn wake_from_backoff(&self) -> bool {
        // AcqRel: pairs with `backoff`'s; like it, not needed and kept on
        // this rare path. Relaxed on failure: closed, nothing to do.
        self.0.compare_exchange(BACKOFF, ACTIVE, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    }

    /// Any state `-> CLOSED`. True for the one call that closed it.
    #[inline]
    pub(crate) fn close(&self) -> bool {
        // S3, Release: publishes what the closer did before to whoever sees
        // CLOSED (the Acquire in `get`). No Acquire: the closer reads the
        // drainer's state only under the drain mutex (see the module docs).
        // Exactly one caller sees the old state: the swap is one RMW.
        self.0.swap(CLOSED, ordering_or_weakened!("S3", Ordering::Release)) != CLOSED
    }
}
