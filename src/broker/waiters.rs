//! Blocking waits for a condition that other threads make true without
//! taking a lock: a publisher waiting for a `Block` subscriber to make room,
//! a pull consumer waiting in `poll` for a message, a caller of `wait_idle`.
//!
//! # The protocol
//!
//! The *condition* is read from atomics (a subscriber's position, a cursor's
//! next slot, a subscription's state). A *changer* updates them without any
//! lock and then calls [`Waiters::notify`]; a *waiter* calls
//! [`Waiters::wait_until`]. `Waiters` holds a count of registered waiters, a
//! mutex and a condition variable.
//!
//! * waiter: check the condition; if false, **register** (`count += 1`),
//!   `fence(SeqCst)` (W2), take the mutex, **re-check** the condition, and only
//!   if it is still false wait on the condition variable (which releases the
//!   mutex atomically). On waking or timing out, unregister and start over.
//! * changer: make the change, `fence(SeqCst)` (W1), load `count`; only if it is
//!   non-zero take the mutex and `notify_all`.
//!
//! A changer that finds no waiter never touches the mutex, so a publisher
//! pays one fence and one shared load per notify when nobody waits.
//!
//! ## The races it survives
//!
//! * *Changer skips the notify.* It read `count == 0` after its fence. The
//!   waiter's fence follows its registration, so by the total order of SeqCst
//!   fences the changer's fence came first, and the waiter's re-check (after
//!   its own fence) sees the change. It does not wait.
//! * *Notify before the wait.* The changer notifies after the waiter's
//!   re-check but before it waits: impossible, because the re-check and the
//!   wait happen under the mutex and the changer notifies under it too. If the
//!   changer takes the mutex first, its change (made before) is visible to the
//!   re-check; if the waiter takes it first, the changer's notify comes after
//!   the wait has begun and wakes it.
//!
//! `loom-tests/tests/waiters.rs` checks this in three models.
//! `the_wait_notify_protocol_never_loses_a_wakeup` runs the protocol alone
//! (the blocking half, [`Waiters::block_until`]) on a relaxed value with no
//! other synchronisation, and is the one `.ci/fence-check` runs: with W1 or
//! W2 weakened to `AcqRel`, loom finds the first race above (the waiter
//! re-checks a stale value, the changer reads a stale `count` of 0 and skips
//! the notify) and reports the waiter sleeping forever as a deadlock. It
//! skips the spin of [`Waiters::wait_until`]: under loom each yield of the
//! spin hands the processor to the changer, which so makes its change
//! during the spin, and a thread that has yielded never again reads a value
//! it saw before the yield once a newer store exists. After the spin the
//! waiter's re-check can no longer be stale, so with the spin the race is
//! out of loom's reach (which is why the model
//! that does spin, `..._after_spinning`, passes without the fences; it checks
//! only that the spin does not break the protocol). The third model runs a
//! publisher blocked on a `Block` subscriber end to end through the real
//! publish and drain code; the epoch pins on both paths fence as well, so it
//! would not notice a missing W1 or W2 either.

use std::time::{Duration, Instant};

use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::{Backoff, Condvar, Mutex};

/// A place to wait for a lock-free condition; see the module documentation.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    count: AtomicUsize,
    lock: Mutex<()>,
    cond: Condvar,
}

impl Waiters {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Wakes every waiter. Call after the change that may satisfy them.
    #[inline]
    pub(crate) fn notify(&self) {
        // W1, SeqCst fence: orders the caller's change before the load of
        // `count`; pairs with W2 in `wait_until` after registering.
        crate::sync::fence_or_weakened!("W1", Ordering::SeqCst);
        self.notify_after_fence();
    }

    /// `notify` for a caller that has just issued a `fence(SeqCst)` itself.
    #[inline]
    pub(crate) fn notify_after_fence(&self) {
        // Relaxed: ordered by the preceding fence (see the module essay).
        if self.count.load(Ordering::Relaxed) > 0 {
            let _g = self.lock.lock();
            self.cond.notify_all();
        }
    }

    /// How many threads are registered to wait: a test's way to act only
    /// once a waiter is past its checks and blocking (or about to block).
    #[cfg(test)]
    pub(crate) fn registered(&self) -> usize {
        // Relaxed: a test polls it until it changes; nothing is read through it.
        self.count.load(Ordering::Relaxed)
    }

    /// Waits until `ready()` is true (returns true) or `deadline` passes
    /// (returns `ready()`). `None` waits without a deadline.
    pub(crate) fn wait_until(&self, deadline: Option<Instant>, mut ready: impl FnMut() -> bool) -> bool {
        // Most waits are short (a subscriber a batch behind): spin, then yield,
        // before paying for a sleep and a wake-up.
        let mut backoff = Backoff::new();
        while !backoff.is_completed() {
            if ready() {
                return true;
            }
            backoff.snooze();
        }
        self.block_until(deadline, ready)
    }

    /// The blocking half of [`Waiters::wait_until`], without its spin: the
    /// register / W2 / re-check / wait protocol of the module essay. The spin
    /// before it only ever returns early, so this is the whole protocol; the
    /// loom model `the_wait_notify_protocol_never_loses_a_wakeup` runs it
    /// directly (see the essay for why the spin would hide the race from loom).
    pub(crate) fn block_until(&self, deadline: Option<Instant>, mut ready: impl FnMut() -> bool) -> bool {
        loop {
            if ready() {
                return true;
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return ready(),
                },
                None => None,
            };
            // Relaxed RMW: registration is ordered by the fence that follows.
            self.count.fetch_add(1, Ordering::Relaxed);
            // W2, SeqCst fence: orders the registration before the re-check
            // below; pairs with W1 in `notify`.
            crate::sync::fence_or_weakened!("W2", Ordering::SeqCst);
            let guard = self.lock.lock();
            if !ready() {
                match left {
                    Some(left) => drop(self.cond.wait_timeout(guard, left.min(MAX_NAP))),
                    None => drop(self.cond.wait(guard)),
                }
            } else {
                drop(guard);
            }
            // Relaxed: unregistering needs no ordering; a changer that still
            // counts us merely notifies once for nothing.
            self.count.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Longest single sleep of a timed wait. The protocol does not rely on it
/// (a notify wakes every registered waiter); it only bounds how long a
/// timed waiter sleeps between looks at its condition. Untimed waits
/// (`deadline` of `None`) do not use it: they sleep until notified.
const MAX_NAP: Duration = Duration::from_millis(100);
