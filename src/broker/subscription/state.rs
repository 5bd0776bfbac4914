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
//! issues the fences around them.
//!
//! ## What the orderings are shown to do
//!
//! Three orderings here carry names for the fence check (`.ci/fence-check`):
//! S1, the drainer's `Release` going idle; S2, the `AcqRel` of a publisher's
//! `IDLE -> ACTIVE`; S3, the `AcqRel` of `close`. Weakened to `Relaxed`
//! one at a time, no loom model fails (`bash .ci/fence-check S1 S2 S3`), so
//! they are *not shown* necessary, and the check does not require them: what
//! they release is also ordered by the drain mutex every drainer takes, by
//! the log's own `Release`/`Acquire` on each slot, and by the pool's queue
//! mutex that hands a drain to a worker. They stay as the word's stated
//! contract (a reader of `IDLE` or `CLOSED` sees the writes before it), which
//! `wait_idle` and `stats` rely on without a model of their own. What the
//! models do show necessary are the fences in `signal.rs` (F1 to F4).

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
        // Relaxed: the preceding SeqCst fence orders this load after the
        // commit; a busy subscription costs exactly this one shared read.
        self.0.load(Ordering::Relaxed) == IDLE
            // S2, AcqRel on success: acquires the last drainer's writes (it released
            // them with its IDLE store) and releases our commit to the drain we
            // schedule. Relaxed on failure: someone else is handling it.
            && self
                .0
                .compare_exchange(IDLE, ACTIVE, ordering_or_weakened!("S2", Ordering::AcqRel), Ordering::Relaxed)
                .is_ok()
    }

    /// `ACTIVE -> IDLE` by a drainer that found nothing more to deliver.
    /// False if the subscription was closed meanwhile (the only other way
    /// out of `ACTIVE` while a drainer holds it). The caller must then issue
    /// the idle fence and re-check (`signal::go_idle`).
    #[inline]
    pub(crate) fn go_idle(&self) -> bool {
        // S1, Release on success: publishes positions and counters to whoever
        // acquires IDLE next. Relaxed on failure: it is CLOSED, and the
        // caller only returns.
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
        // wake (which acquires them) and pairs with `close`'s swap; the CAS
        // itself is what rules out leaving CLOSED. Relaxed on failure: it is
        // CLOSED and the caller only returns.
        self.0.compare_exchange(ACTIVE, BACKOFF, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    }

    /// `BACKOFF -> ACTIVE` by the retry timer. True if it won; the caller
    /// then schedules a drain.
    #[inline]
    pub(crate) fn wake_from_backoff(&self) -> bool {
        // AcqRel: as in `activate`. Relaxed on failure: closed, nothing to do.
        self.0.compare_exchange(BACKOFF, ACTIVE, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    }

    /// Any state `-> CLOSED`. True for the one call that closed it.
    #[inline]
    pub(crate) fn close(&self) -> bool {
        // S3, AcqRel: Release publishes what the closer did before to whoever
        // sees CLOSED (Acquire in `get`); Acquire makes the last drainer's
        // writes visible to the closer. Exactly one caller sees the old state.
        self.0.swap(CLOSED, ordering_or_weakened!("S3", Ordering::AcqRel)) != CLOSED
    }
}
