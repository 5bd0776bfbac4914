//! The drainer's idle policy: what a drain that caught up does before it
//! goes idle, and whether it waits for a run of records before it takes
//! what it found.
//!
//! A pool drain may *linger* ([`linger_for_work`]): look again with growing
//! pauses for a moment, if its subscription's last idle spell was short
//! and no other subscription waits for a worker. A dedicated drain thread
//! spins, then yields ([`spin_for_work`]), or, while the awake dedicated
//! drainers crowd the cores, naps ([`nap_for_work`]); between its drains it
//! parks. Either may wait for a run of records once it found some, while
//! most of its first looks find work (`run_wait.rs`).
//!
//! None of it changes the protocol: every wait here is in the `ACTIVE`
//! state, during which publishers read `ACTIVE` and schedule nothing, and
//! going idle afterwards is `signal::go_idle` with its re-check (F4). The
//! drain loop (`drain.rs`) calls these between rounds; they take the
//! subscription and its drain state as arguments and deliver nothing.

#[cfg(not(loom))]
use std::time::Duration;
use std::time::Instant;

use super::core::{DrainState, SubCore};
#[cfg(not(loom))]
use crate::sync::thread;
use crate::sync::{Backoff, HintCount};

/// One nap of a dedicated drainer that found no work while dedicated
/// drainers crowd the cores ([`nap_for_work`]).
#[cfg(not(loom))]
const NAP: Duration = Duration::from_micros(50);
/// Naps in a row that found no work before such a drainer goes idle.
#[cfg(not(loom))]
const NAPS: u32 = 2;

#[cfg(not(loom))]
thread_local! {
    /// How many naps this dedicated drain thread takes the next time it
    /// waits for work: [`NAPS`], or none after its last park outlasted the
    /// naps (see [`naps_after_park`]). Per thread, so per subscription.
    static NAPS_NEXT: std::cell::Cell<u32> = const { std::cell::Cell::new(NAPS) };
}

/// Sets the naps of this dedicated drain thread's next wait for work from
/// how long it just stayed parked: a park that lasted longer than the naps
/// would have (`NAPS` times `NAP`) means the messages come further apart
/// than napping can bridge, so naps there would only cost timer wake-ups
/// (two per message at 1,000 msgs/s); a shorter one means they would have
/// caught the next message. One burst after a long pause thus costs one
/// extra wake-up before the naps come back.
#[cfg(not(loom))]
pub(super) fn naps_after_park(parked: Duration) {
    let bridged = parked <= NAP * NAPS;
    NAPS_NEXT.with(|n| n.set(if bridged { NAPS } else { 0 }));
}

/// How long a pool drainer that caught up keeps looking for more before it
/// goes idle ([`linger_for_work`]), if no other subscription is
/// waiting for a worker.
///
/// Why: one subscriber on the publisher's heels finds a message or two per
/// round. Going idle at once costs both sides: the drainer's `go_idle`
/// (a CAS and F4) and, when the publisher is slower than the drain, a
/// wake-up per message (the publisher's CAS of the state word, a pool
/// push, often a futex call; the worker's park). And a drainer that
/// re-polls the head at once reads the index line the publisher is about to
/// write, so every commit moves that line between the cores. Waiting a
/// little, with growing pauses between looks, lets the publisher write a
/// run of records meanwhile, which the next round takes as one batch.
///
/// Why this long: lingering is spin-then-block, and spinning for about what
/// blocking costs (the futex wait and wake, the context switches) bounds
/// what the spin can waste, when nothing comes, at the cost of the block
/// it might have saved. It is bounded by time rather than by pauses, since
/// the time a `pause` takes differs several times over across x86
/// processors.
#[cfg(not(loom))]
const LINGER_NS: u64 = 2_000;
/// The most `spin_loop` hints between two looks while lingering.
#[cfg(not(loom))]
const LINGER_MAX_SPINS: u32 = 64;

/// The waits of a drain that looks again before it goes idle or takes what
/// it found (`linger_for_work`, `wait_for_run`): pauses of 1, 2, 4, ... up
/// to [`LINGER_MAX_SPINS`] `spin_loop` hints between looks, for at most
/// [`LINGER_NS`] from the first time it asks whether that has passed (the
/// clock is read then: a wait whose first look ends it reads no clock).
#[cfg(not(loom))]
struct GrowingWait {
    /// The clock at the first `expired`, or 0 before it.
    start: u64,
    /// The next pause, in hints.
    spins: u32,
}

#[cfg(not(loom))]
impl GrowingWait {
    fn new() -> Self {
        GrowingWait { start: 0, spins: 1 }
    }

    /// The pause before the next look; each is twice the last, to the cap.
    fn pause(&mut self) {
        for _ in 0..self.spins {
            crate::sync::spin_loop();
        }
        self.spins = (self.spins * 2).min(LINGER_MAX_SPINS);
    }

    /// Whether [`LINGER_NS`] have passed since the first call.
    fn expired(&mut self) -> bool {
        let now = crate::clock::now_ns();
        if self.start == 0 {
            self.start = now;
            return false;
        }
        now.saturating_sub(self.start) >= LINGER_NS
    }
}
/// A pool drain lingers only if its subscription's last idle spell, from
/// going idle to this drain's start, lasted at most this long.
///
/// Why: where messages come further apart than a linger, each linger is
/// spent in vain: it adds process CPU per message at rates where messages
/// come further apart than a linger (`examples/fanthreads.rs ... pool`
/// measures it). Worse, with 8 idle subscriptions woken by each publish
/// (the "8 idle" case of `rill-bench --publish-cost`), lingering after
/// every drain made each publish slower and far less predictable; the
/// likely reason (inferred, not traced) is that on cores the workers share
/// with the publishers, a woken worker that lingers holds the core of the
/// publisher it waits for.
/// So a subscription woken long after it went idle drains without
/// lingering. The spell measured includes the wake-up itself (the
/// publisher's push, the worker's turn), so the bound is two lingers:
/// with one, a drain woken right behind a publisher that keeps publishing
/// seldom lingered again, and one-to-one lost most of its gain; with five,
/// the idle-8 publish above still lingered.
#[cfg(not(loom))]
const LINGER_AGAIN_NS: u64 = 2 * LINGER_NS;

/// At the start of a pool drain (clock `now`): whether it lingers, from
/// how long the subscription's last idle spell lasted, if it went idle
/// (at `idle_since`, which this takes) since the last drain began (see
/// [`LINGER_AGAIN_NS`]).
#[cfg(not(loom))]
pub(super) fn lingers_after_wake(linger: &mut bool, idle_since: &mut u64, now: u64) {
    if *idle_since != 0 {
        let spell = now.saturating_sub(std::mem::take(idle_since));
        *linger = spell <= LINGER_AGAIN_NS;
    }
}

/// The dedicated drainers that are awake (not parked), in the process: a
/// hint to the idle policy (a stale count only picks the other policy for
/// one wait).
static AWAKE: HintCount = HintCount::new();

/// A dedicated drain thread's place in [`AWAKE`]: counted from `new` until
/// dropped, except while inside `asleep`.
pub(super) struct Awake;

impl Awake {
    pub(super) fn new() -> Awake {
        AWAKE.add();
        Awake
    }

    /// Runs `park` uncounted.
    pub(super) fn asleep(&self, park: impl FnOnce()) {
        AWAKE.sub();
        park();
        AWAKE.add();
    }

    /// True if the awake dedicated drainers are at least as many as the
    /// cores: with any publisher besides, threads outnumber cores.
    #[cfg(not(loom))]
    fn crowded() -> bool {
        static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let cores = *CORES.get_or_init(|| thread::available_parallelism().map_or(2, |n| n.get()));
        AWAKE.get() >= cores
    }
}

impl Drop for Awake {
    fn drop(&mut self) {
        AWAKE.sub();
    }
}

/// A dedicated drainer's short wait for more work before going idle:
/// spin, then yield, polling the log; give up after `Backoff` completes.
/// Without an `idle_spin` budget, when the awake dedicated drainers are
/// at least as many as the cores, it naps instead (see [`nap_for_work`]).
/// Without a budget, while most of its first looks find work, it waits
/// for a run of records once it found some (`run_wait.rs`).
pub(super) fn spin_for_work(sub: &SubCore, st: &mut DrainState) -> bool {
    #[cfg(not(loom))]
    if sub.idle_spin.is_none() && Awake::crowded() {
        return nap_for_work(sub, st);
    }
    if let Some(budget) = sub.idle_spin {
        // A time budget: poll the cursors, checking the clock now and then.
        let start = Instant::now();
        let mut polls = 0u32;
        loop {
            for _ in 0..64 {
                if sub.has_work(st) {
                    return true;
                }
                // Poll flat out at first (a message is often a few hundred
                // nanoseconds away), then with a pause between polls.
                polls = polls.saturating_add(1);
                if polls > 4096 {
                    crate::sync::spin_loop();
                }
            }
            if sub.state.is_closed() || start.elapsed() >= budget {
                return false;
            }
        }
    }
    let mut backoff = Backoff::new();
    // Looks made: the run-wait's sample is whether one of the first two
    // found work, the second one pause after the first, as a lingering
    // pool drain's first look is (the first one, made at once, finds
    // work too rarely to tell a publisher ahead from one that is not).
    #[cfg(not(loom))]
    let mut looks = 0u32;
    while !backoff.is_completed() {
        if sub.state.is_closed() {
            return false;
        }
        let work = sub.has_work(st);
        #[cfg(not(loom))]
        {
            if looks < 2 && (work || looks == 1) {
                st.run_wait.first_look(work);
            }
            looks += 1;
        }
        if work {
            #[cfg(not(loom))]
            if st.run_wait.waits() {
                wait_for_run(sub, st);
            }
            return true;
        }
        backoff.snooze();
    }
    false
}

/// A dedicated drainer that found work, while most of its first looks
/// do: waits for a run of records (`run_wait.rs`) with growing pauses
/// between looks, for at most [`LINGER_NS`] or until the subscription
/// closes, as a lingering pool drain does.
#[cfg(not(loom))]
fn wait_for_run(sub: &SubCore, st: &mut DrainState) {
    let mut wait = GrowingWait::new();
    while !has_run(sub, st, st.run_wait.run()) && !sub.state.is_closed() {
        if wait.expired() {
            if starved(sub, st) {
                st.run_wait.wait_expired();
            }
            return;
        }
        wait.pause();
    }
}

/// A pool drainer's short wait for more work before it goes idle: look
/// again after 1, 2, 4, ... up to [`LINGER_MAX_SPINS`] pauses, for at
/// most [`LINGER_NS`]; give up at once when the subscription closes or
/// another subscription waits for a worker (its turn comes first).
/// Taken only by a drain whose subscription's last idle spell was short
/// ([`LINGER_AGAIN_NS`]). While most lingers' first looks find work,
/// a look that finds some waits on, the same way and up to the same
/// limit, for a run of records (`run_wait.rs`), and the linger ends
/// with whether there is work.
///
/// No protocol changes: like the dedicated thread's spin, this is a
/// wait in the `ACTIVE` state, during which publishers read `ACTIVE` and
/// do not schedule a drain. `has_work` here is a hint read without F4: a
/// stale `false` only ends the linger (`has_run`, a run's last slot read
/// the same way, only makes it wait longer), and going idle afterwards is
/// `signal::go_idle` with its re-check; a `true` is acted on by a round
/// that reads the log as every round does. Not built under loom: it
/// adds polls to every schedule of the models and nothing to check
/// (the dedicated drainer's spin is the same wait, modelled).
#[cfg(not(loom))]
pub(super) fn linger_for_work(sub: &SubCore, st: &mut DrainState) -> bool {
    let mut wait = GrowingWait::new();
    let mut first = true;
    loop {
        // Before every look: a drainer that finds work whenever it looks
        // would otherwise keep the worker from queued subscriptions for
        // good (its rounds end caught up, never out of budget). A drain
        // that found work and waits for more gives up the wait the same
        // way: then `go_idle`'s re-check finds that work, and it goes on.
        if sub.state.is_closed() || sub.others_waiting() {
            return false;
        }
        wait.pause();
        let work = sub.has_work(st);
        if std::mem::take(&mut first) {
            st.run_wait.first_look(work);
        }
        if work && (!st.run_wait.waits() || has_run(sub, st, st.run_wait.run())) {
            return true;
        }
        if wait.expired() {
            if work && st.run_wait.waits() && starved(sub, st) {
                st.run_wait.wait_expired();
            }
            return work;
        }
    }
}

/// After a wait for a run that lasted the whole linger: whether fewer
/// than `RunWait::least` records wait in all its partitions together
/// (`run_wait.rs`, `STARVED_WAIT`). Looks at one slot per partition
/// first, as `has_run` does; only when no partition alone holds that
/// many does it read their end offsets (lines the publishers write),
/// once a linger at most.
#[cfg(not(loom))]
fn starved(sub: &SubCore, st: &DrainState) -> bool {
    let least = st.run_wait.least();
    if has_run(sub, st, least) {
        return false;
    }
    let mut waiting = 0u64;
    !st.readers.iter().any(|r| {
        waiting += r.cursor.lag();
        waiting >= least
    })
}

/// Whether a run of `run` records (`run_wait.rs`) waits in some
/// partition. A subscription with a ready set (wildcard) does not wait
/// for runs: its work is spread over partitions whose publishers list
/// them.
#[cfg(not(loom))]
fn has_run(sub: &SubCore, st: &DrainState, run: u64) -> bool {
    sub.ready.is_some() || st.readers.iter().any(|r| r.cursor.has_run(run))
}

/// The idle policy of a dedicated drainer (with no `idle_spin` budget)
/// when dedicated drainers crowd the cores: instead of polling, it
/// sleeps [`NAP`] at a time, still `ACTIVE`, and looks for work after
/// each nap; after [`NAPS`] naps in a row that found none it gives up
/// (then it goes idle and parks as usual). A drainer whose last park
/// lasted longer than those naps takes none (see [`naps_after_park`]):
/// at low rates the naps would all be wasted.
///
/// Why: with more threads than cores, a drainer that polls or yields
/// stays runnable, and the scheduler gives it its share of a core, taken
/// from the publisher that all the drainers wait for. A parked drainer
/// gives the core back, but then the publisher pays a wake-up (a futex
/// call) for it at its next publish, and a drainer that runs as soon as
/// it is woken finds a message or two and parks again: a wake-up per
/// message per drainer. A nap gives the core back *and* costs the
/// publisher nothing (it reads `ACTIVE` and moves on), and the drainer
/// wakes to a batch of what was published meanwhile.
///
/// No protocol changes: the nap is a wait in the `ACTIVE` state, like
/// the polling it replaces; going idle afterwards is `signal::go_idle`
/// with its re-check (F4). A close unparks the thread, which ends a nap
/// early (`park_timeout`); a stale unpark token only shortens one nap.
/// A message published during a nap waits for the nap's end (about
/// `NAP` plus the timer's slack): the price of giving the cores back,
/// paid only when drainers outnumber cores and only with the default
/// policy (an `idle_spin` budget polls as before).
#[cfg(not(loom))]
fn nap_for_work(sub: &SubCore, st: &mut DrainState) -> bool {
    for _ in 0..NAPS_NEXT.with(std::cell::Cell::get) {
        if sub.state.is_closed() {
            return false;
        }
        thread::park_timeout(NAP);
        if sub.has_work(st) {
            return true;
        }
    }
    false
}

#[cfg(all(test, not(loom)))]
mod tests {
    #[test]
    fn a_long_idle_spell_drops_the_linger_and_a_short_one_brings_it_back() {
        use super::{LINGER_AGAIN_NS, lingers_after_wake};
        let (mut linger, mut idle_since) = (true, 0);
        lingers_after_wake(&mut linger, &mut idle_since, 1_000);
        assert!(linger, "not idle since the last drain: unchanged");
        idle_since = 1_000;
        lingers_after_wake(&mut linger, &mut idle_since, 1_000 + LINGER_AGAIN_NS + 1);
        assert!(!linger, "woken long after going idle: no linger");
        assert_eq!(idle_since, 0, "the spell is taken");
        lingers_after_wake(&mut linger, &mut idle_since, 9_000_000);
        assert!(!linger, "no new spell: unchanged");
        idle_since = 5_000;
        lingers_after_wake(&mut linger, &mut idle_since, 5_000 + LINGER_AGAIN_NS);
        assert!(linger, "woken right behind the publisher: lingers again");
    }

    #[test]
    fn a_park_longer_than_the_naps_drops_them_and_a_short_one_brings_them_back() {
        use super::{NAP, NAPS, NAPS_NEXT, naps_after_park};
        use std::cell::Cell;
        use std::time::Duration;
        let naps = || NAPS_NEXT.with(Cell::get);
        assert_eq!(naps(), NAPS, "a new thread naps");
        naps_after_park(NAP * NAPS + Duration::from_micros(1));
        assert_eq!(naps(), 0, "messages further apart than the naps: none");
        naps_after_park(NAP * NAPS);
        assert_eq!(naps(), NAPS, "a park the naps would have bridged");
        naps_after_park(Duration::from_secs(3));
        naps_after_park(Duration::from_micros(5));
        assert_eq!(naps(), NAPS);
    }
}
