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
//!
//! # The bell: waiting outside the library
//!
//! A waiter that cannot block a thread (an event loop that waits on a file
//! descriptor: `rill_consumer_notify_fd` and `rill_subscription_notify_fd`
//! in the C library) cannot take part in the protocol above: it never sits
//! in [`Waiters::block_until`]. For it a `Waiters` carries a *bell*: one
//! flag, `armed`, and a hook to call when the bell rings (the C library's
//! hook writes its eventfd). Its two states:
//!
//! * **disarmed**: changers pay one relaxed load of `armed` (ordered by
//!   their W1 like the load of `count`) and ring nothing;
//! * **armed**: the next changer to swap `armed` back to false calls the
//!   hook, once; later changers find it disarmed again.
//!
//! Who moves it: the *owner* (the thread polling the consumer, or calling
//! a subscription's `wait_idle`) arms it when it is about to look at the
//! condition and might find nothing ([`Waiters::arm`]: store true, then
//! `fence(SeqCst)` B1, then look), and disarms it when the look found
//! something (it will look again before it waits, so it wants no ring
//! meanwhile). A *changer* disarms it by winning
//! the swap in [`Waiters::notify_after_fence`] and rings. Only a look that
//! found nothing leaves it armed, and then the owner waits for the ring.
//!
//! ## The race it survives
//!
//! The owner arms, fences (B1) and reads the condition; a changer makes the
//! change, fences (W1) and reads `armed`: the store-buffer pattern of the
//! protocol above, closed the same way. By the total order of SeqCst
//! fences either B1 comes first, and the changer's load after W1 sees
//! `armed` (or a later value: then another changer took the ring, after
//! the arming, and rang), or W1 comes first, and the owner's look after B1
//! sees the change and returns it. Both may happen: the ring is then
//! spurious, and the owner's next look finds nothing and arms again. What
//! cannot happen is a look that found nothing with no ring to follow.
//!
//! The C library empties its eventfd just before the owner arms, and the
//! owner waits for the fd to be readable; two facts make that safe. A ring
//! the drain takes was written after its changer's change, and the drain
//! reads it before the look, so the look sees that change. And a ring that
//! answers this arming is never swallowed by the drain before it: the arm
//! is a Release store and the winning swap is AcqRel, so the drain happens
//! before the ring's write, which leaves the fd readable.
//!
//! `loom-tests/tests/waiters.rs`, `a_look_that_found_nothing_is_always_rung`,
//! models it on a bare `Waiters` (no epoch pins to hide a missing fence);
//! `.ci/fence-check` requires it to fail with B1 weakened.

use std::time::{Duration, Instant};

use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use crate::sync::{Backoff, Condvar, Mutex};

/// What a rung bell calls (see "The bell" in the module documentation). It
/// runs on the changer's thread (a publisher's, or whichever thread closes
/// or rebalances), so it must be short and must not block.
pub(crate) type BellHook = Box<dyn Fn() + Send + Sync>;

/// A place to wait for a lock-free condition; see the module documentation.
#[derive(Default)]
pub(crate) struct Waiters {
    count: AtomicUsize,
    lock: Mutex<()>,
    cond: Condvar,
    /// The bell is armed: the next changer rings it.
    armed: AtomicBool,
    /// A hook hangs on the bell (owners that arm only then read it).
    hooked: AtomicBool,
    /// What ringing calls; `None` until an owner hangs one up. Locked only
    /// to ring (once per arming) and to replace it, never on a changer's
    /// path when the bell is disarmed.
    hook: Mutex<Option<BellHook>>,
}

impl std::fmt::Debug for Waiters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiters")
            // Relaxed: a debugging snapshot.
            .field("count", &self.count.load(Ordering::Relaxed))
            .field("armed", &self.armed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
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
        // Relaxed: ordered by the preceding fence like `count` ("The bell").
        if self.armed.load(Ordering::Relaxed) {
            self.ring();
        }
    }

    /// Rings the bell if this changer wins the swap that disarms it.
    #[cold]
    fn ring(&self) {
        // AcqRel: the winner alone rings; Acquire pairs with the Release in
        // `arm`, so what the owner did before arming happens before the hook.
        if self.armed.swap(false, Ordering::AcqRel)
            && let Some(hook) = self.hook.lock().as_ref()
        {
            hook();
        }
    }

    /// Hangs up the hook a rung bell calls (replacing any earlier one).
    pub(crate) fn set_bell(&self, hook: BellHook) {
        *self.hook.lock() = Some(hook);
        // Relaxed: read by the owner that hung the hook (or one it handed
        // the fd to, through a synchronising call); a look that does not
        // see it arms nothing, and that owner has no fd to wait on yet.
        self.hooked.store(true, Ordering::Relaxed);
    }

    /// [`Waiters::arm`] if a hook hangs on the bell; returns whether it armed.
    pub(crate) fn arm_if_hooked(&self) -> bool {
        // Relaxed: see `set_bell`.
        let hooked = self.hooked.load(Ordering::Relaxed);
        if hooked {
            self.arm();
        }
        hooked
    }

    /// Takes the hook down (dropping it once a ring in progress returns);
    /// nothing rings after this.
    pub(crate) fn take_bell(&self) {
        // Relaxed: the hook's lock orders this against a ring.
        self.hooked.store(false, Ordering::Relaxed);
        self.armed.store(false, Ordering::Relaxed);
        drop(self.hook.lock().take());
    }

    /// Arms the bell before a look at the condition that may find nothing;
    /// see "The bell" in the module documentation.
    pub(crate) fn arm(&self) {
        // Release: pairs with the AcqRel swap in `ring` (see the essay).
        self.armed.store(true, Ordering::Release);
        // B1, SeqCst fence: orders the arming before the owner's look at the
        // condition; pairs with W1 (or a changer's own fence) before `ring`.
        crate::sync::fence_or_weakened!("B1", Ordering::SeqCst);
    }

    /// Disarms the bell: the owner's look found something.
    pub(crate) fn disarm(&self) {
        // Relaxed: only saves changers a ring; a ring that wins anyway is
        // spurious, which the owner tolerates.
        self.armed.store(false, Ordering::Relaxed);
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
        Self::spin(&mut ready) || self.block_napping(deadline, MAX_NAP, ready, || {})
    }

    /// [`Waiters::wait_until`] for a waiter whose every condition is
    /// changed by a notifier (in this process, or by the doorbell for
    /// another process's): it sleeps until notified or `deadline`, without
    /// [`MAX_NAP`]'s looks in between, so an idle waiter with a far
    /// deadline (a consumer polling an idle topic) wakes nobody's CPU.
    /// Each time it registers, after W2, it calls `may_sleep`: the
    /// consumer's nudge of its process's disarmed doorbells
    /// (`doorbell::listener_may_sleep`), which arm only while a waiter may
    /// sleep ([`Waiters::may_sleep`]; "Arming only while a listener may
    /// sleep" in `doorbell.rs`).
    pub(crate) fn wait_notified_until(
        &self,
        deadline: Option<Instant>,
        mut ready: impl FnMut() -> bool,
        may_sleep: impl Fn(),
    ) -> bool {
        Self::spin(&mut ready) || self.block_napping(deadline, Duration::MAX, ready, may_sleep)
    }

    /// Whether a waiter may be asleep, or about to sleep: one is
    /// registered, or the bell is armed. The doorbell's question about a
    /// consumer, after its X4 fence: this side stores (registers, or arms)
    /// and fences (W2, or B1) before its nudge loads the doorbell's count,
    /// and the doorbell stores that count and fences (X4) before it loads
    /// these, so one of the two sees the other (see "Arming only while a
    /// listener may sleep" in `doorbell.rs`).
    pub(crate) fn may_sleep(&self) -> bool {
        // Relaxed, both: ordered by the doorbell's X4 before them.
        self.count.load(Ordering::Relaxed) > 0 || self.armed.load(Ordering::Relaxed)
    }

    /// Spins, then yields, while `ready` is false, for a while: true if it
    /// came true. Most waits are short (a subscriber a batch behind), so a
    /// wait does this before it pays for a sleep and a wake-up.
    fn spin(ready: &mut impl FnMut() -> bool) -> bool {
        let mut backoff = Backoff::new();
        while !backoff.is_completed() {
            if ready() {
                return true;
            }
            backoff.snooze();
        }
        false
    }

    /// The blocking half of [`Waiters::wait_until`], for the loom model
    /// `the_wait_notify_protocol_never_loses_a_wakeup`, which runs it
    /// directly (see the essay for why the spin would hide the race from
    /// loom).
    #[cfg(loom)]
    pub(crate) fn block_until(&self, deadline: Option<Instant>, ready: impl FnMut() -> bool) -> bool {
        self.block_napping(deadline, MAX_NAP, ready, || {})
    }

    /// The blocking half of [`Waiters::wait_notified_until`], for the loom
    /// model of a consumer and its doorbell (`loom_harness/doorbell.rs`), which
    /// passes its own `may_sleep`.
    #[cfg(loom)]
    pub(crate) fn block_notified_until(&self, ready: impl FnMut() -> bool, may_sleep: impl Fn()) -> bool {
        self.block_napping(None, Duration::MAX, ready, may_sleep)
    }

    /// The blocking half of the waits, without their spin: the register /
    /// W2 / re-check / wait protocol of the module essay, each sleep at most
    /// `nap`. The spin before it only ever returns early, so this is the
    /// whole protocol.
    fn block_napping(
        &self,
        deadline: Option<Instant>,
        nap: Duration,
        mut ready: impl FnMut() -> bool,
        may_sleep: impl Fn(),
    ) -> bool {
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
            // Ordered after the registration by W2, as the re-check is.
            may_sleep();
            let guard = self.lock.lock();
            if !ready() {
                match left {
                    Some(left) => drop(self.cond.wait_timeout(guard, left.min(nap))),
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
/// (`deadline` of `None`) do not use it: they sleep until notified, and
/// nor do [`Waiters::wait_notified_until`]'s, whose every condition has a
/// notifier.
const MAX_NAP: Duration = Duration::from_millis(100);
