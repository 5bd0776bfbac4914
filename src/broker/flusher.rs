//! The flusher: one named thread per broker with a data directory that runs
//! a job (each partition's log round: a sync under `Fsync::Interval`, under
//! `Fsync::Never` a marking round that writes the completion markers of
//! sealed segments and flushes nothing; and write the offsets, including
//! live durable subscriptions' positions and named holders' slots) at most
//! once an interval, and only while something made work for it: an idle
//! broker's flusher sleeps with no timeout (issue 39: idle processes use no
//! CPU). The job is a closure, so this file does not name the broker.
//!
//! A second thread (`rill-prepare`) runs a short job whenever [`Poke::poke`]
//! asks: a durable log pokes it after each roll to a new segment, and the
//! job faults the new segment file's pages in ahead of the publisher (see
//! `Log::prepare_ahead`), so that this work is done there rather than as a
//! page fault per page on the publisher's path. It is a thread of its own
//! because a sync round may take as long as the disk wants (tens of
//! milliseconds and more), while a publisher fills a segment in a few.
//!
//! Stopping wakes both threads at once (they wait on a condition variable,
//! with a timeout or for a poke or a mark, not in a sleep) and joins them;
//! the broker then does its final flush itself, on the closing thread.
//!
//! # Due: waking the flusher only for work
//!
//! Whatever makes work for the periodic job marks the flusher *due*
//! ([`Due::mark`]): a publish to a partition under `Fsync::Interval` (its
//! records wait for a sync; `Partition::notify`), a roll to a new segment
//! (the sealed one waits for its completion marker: the roll hook pokes,
//! and a poke marks), the end of a drain round of a durable subscription
//! (its positions wait to be written), a snapshot of the offsets written
//! unsynced (a group commit, under `Interval`, waits for a synced one), and
//! a round that left work behind (a record reserved but not committed yet,
//! a failed write: the job returns true). One word, [`Shared::due`], holds
//! three states:
//!
//! * [`DIRTY`]: work is due; the flusher runs a round when its interval
//!   since the last one is up (at once if it already is), so rounds stay at
//!   most one an interval, and what was written at `t` is synced by
//!   `t + interval`, as `Fsync::Interval` promises.
//! * [`CLEAN`]: a round is running, or just ran, and nothing was marked
//!   since it began.
//! * [`ASLEEP`]: the flusher waits with no timeout, for a mark or a stop.
//!
//! Who moves it:
//!
//! * the **flusher**, at the start of each round ([`Shared::begin`]):
//!   stores `CLEAN`, then issues D2, then the job reads what it writes out
//!   (the logs' committed records, the positions, the seals). After the
//!   round, under its state lock ([`Shared::idle`]), `CLEAN -> ASLEEP` (one
//!   compare-exchange, which fails if a mark came in: it runs again), then
//!   waits on its condition variable while the word holds `ASLEEP`.
//! * a **marker**, after what it wrote (its commit, its seal, its
//!   positions), issues D1 and loads the word: `DIRTY`, done (one load, the
//!   common case: every publish but the first after a round). Otherwise it
//!   swaps in `DIRTY`; if it took the word from `ASLEEP`, it takes the state
//!   lock and notifies (the flusher checks the word under that lock before
//!   it waits, so the notification cannot fall between its check and its
//!   wait).
//!
//! # The race it survives
//!
//! The marker writes, then loads the word; the flusher writes the word
//! (`CLEAN`), then loads what the marker wrote. The store-buffering shape
//! again (as in `barrier.rs`): without a full fence on both sides, the
//! marker can load the `DIRTY` of the round that is just beginning (and do
//! nothing) while that round reads the logs without its record, and the
//! flusher then finds the word `CLEAN`, sleeps, and the record waits
//! unsynced for the next mark, which may never come. With the fences, take
//! the round whose `CLEAN` store is the first after the marker's load in
//! the word's order (the marker's load read an older value): the fences'
//! order puts the marker's write before that round's reads, so the round
//! finds it. If no such round began yet, the marker's load (or its swap)
//! read the newest value: a `DIRTY` that stays until a round begins after
//! it (the same case), or a `CLEAN` / `ASLEEP` it replaced with `DIRTY`,
//! which the flusher's compare-exchange cannot miss (both are
//! read-modify-writes of the one word), and an `ASLEEP` flusher is woken.
//!
//! D1 and D2 are the two halves of the asymmetric fence of `barrier.rs`:
//! every marker is a thread of this process (a publisher in another
//! process marks its own broker's flusher, whose round syncs the shared
//! file's committed prefix, others' records included), so D1 is
//! `barrier::light` (a compiler fence on the publish path, which
//! `Partition::notify` issues already) and D2 `barrier::heavy`
//! (`membarrier`, once a round: at most one an interval). Under loom both
//! are `fence(SeqCst)`, and `loom-tests/tests/flusher.rs` runs
//! [`Shared::begin`], [`Shared::idle`] and [`Due::mark`] against a real log;
//! with D1 or D2 weakened `.ci/fence-check` requires it to find the flusher
//! asleep for ever (a deadlock).
//!
//! A partition learns its broker's [`Due`] before any publisher can reach
//! it (a topic is given it before it enters the topic map, under the
//! broker's control lock), so no publish escapes the protocol. A roll hook
//! is set lazily (by `prepare_ahead`, on either thread) under the hook's
//! own lock: a roll that found no hook there sealed its segment before the
//! lock's release, and every periodic round takes that lock (setting the
//! hook, or finding it set) before its logs' rounds, so the next round
//! marks it; and a topic's creation pokes, which marks, so that round
//! comes.
//!
//! A round that leaves work behind (a log whose reserved end is past what
//! the round made durable: a record reserved but not committed when it
//! looked, perhaps by another process, or one whose writer died; or a write
//! that failed) marks the flusher due itself, so the next interval looks
//! again, as every interval did before the flusher learned to sleep.

use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use crate::error::Result;
use crate::sync::atomic::{AtomicU32, Ordering};
use crate::sync::thread::JoinHandle;
use crate::sync::{Arc, Condvar, Mutex, MutexGuard};

/// [`Shared::due`]: work is due; a round runs when the interval is up.
const DIRTY: u32 = 0;
/// [`Shared::due`]: nothing marked since the current or last round began.
const CLEAN: u32 = 1;
/// [`Shared::due`]: the flusher waits with no timeout, for a mark.
const ASLEEP: u32 = 2;

/// A periodic job on its own thread.
pub(crate) struct Flusher {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// The flusher's state, and a condition variable per thread to wake it for
/// a change of it (a poke wakes only the thread it is for).
pub(crate) struct Shared {
    state: Mutex<State>,
    /// The periodic thread: stopping, or marked due while asleep.
    wake: Condvar,
    /// The short job's thread: stopping, or poked.
    poked: Condvar,
    /// Told of each round's end and of each sleep (the test seam's waits).
    seen: Condvar,
    /// [`DIRTY`], [`CLEAN`] or [`ASLEEP`] (see "Due" in the module docs).
    /// Padded: every publisher under `Interval` loads it, and it changes
    /// once a round, not with the state lock's traffic.
    due: CachePadded<AtomicU32>,
}

#[derive(Default)]
struct State {
    /// Stopping: the thread returns.
    stopping: bool,
    /// The short job is due.
    poked: bool,
    /// Rounds the periodic job ran (the test seam).
    rounds: u64,
    /// The periodic thread waits with no timeout (the test seam).
    asleep: bool,
}

impl Shared {
    /// A flusher's state, due (its first round comes one interval after
    /// its start, whatever is marked).
    pub(crate) fn new() -> Shared {
        Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            poked: Condvar::new(),
            seen: Condvar::new(),
            due: CachePadded::new(AtomicU32::new(DIRTY)),
        }
    }

    /// The start of a round: `CLEAN`, then D2, before the job reads what it
    /// writes out (see "The race it survives").
    pub(crate) fn begin(&self) {
        // Relaxed: D2, right after, orders it before the round's reads.
        self.due.store(CLEAN, Ordering::Relaxed);
        // D2: pairs with D1 in `Due::mark`; `membarrier` outside loom (every
        // marker is a thread of this process), a SeqCst fence under it.
        #[cfg(not(loom))]
        super::barrier::heavy();
        #[cfg(loom)]
        crate::sync::fence_or_weakened!("D2", Ordering::SeqCst);
    }

    /// After a round: [`Shared::idle`] with the state lock taken and let go
    /// (the loom models' flusher).
    #[cfg(loom)]
    pub(crate) fn sleep_unless_due(&self) {
        drop(self.idle(self.state.lock()));
    }

    /// After a round, with the state lock: `CLEAN -> ASLEEP` unless a mark
    /// came in, and waits while the word holds `ASLEEP`. Returns with the
    /// lock once the flusher is due or stopping.
    fn idle<'a>(&'a self, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        // Relaxed: the word orders nothing but itself here; the round's
        // reads were ordered by D2, and a failed exchange means a mark.
        let _ = self.due.compare_exchange(CLEAN, ASLEEP, Ordering::Relaxed, Ordering::Relaxed);
        // Relaxed: a marker that takes the word from `ASLEEP` notifies under
        // this lock, after its swap; this load is under it, before the wait.
        while !st.stopping && self.due.load(Ordering::Relaxed) == ASLEEP {
            st.asleep = true;
            self.seen.notify_all();
            st = self.wake.wait(st);
        }
        st.asleep = false;
        st
    }
}

/// Marks a flusher due: it runs a round within its interval (see "Due" in
/// the module docs). Marking a stopped flusher does nothing.
#[derive(Clone)]
pub(crate) struct Due(Arc<Shared>);

impl Due {
    /// A handle on `shared` (the loom models' flusher).
    #[cfg(loom)]
    pub(crate) fn of(shared: &Arc<Shared>) -> Due {
        Due(shared.clone())
    }

    /// Marks the flusher due after what the caller wrote: D1, then
    /// [`Due::mark_after_light`].
    #[inline]
    pub(crate) fn mark(&self) {
        // D1: pairs with D2 in `Shared::begin` (see "The race it survives").
        #[cfg(not(loom))]
        super::barrier::light();
        #[cfg(loom)]
        crate::sync::fence_or_weakened!("D1", Ordering::SeqCst);
        self.mark_after_light();
    }

    /// [`Due::mark`] for a caller that has just issued `barrier::light`
    /// after its write (a publisher, in `Partition::notify`): one load when
    /// the flusher is due already.
    #[inline]
    pub(crate) fn mark_after_light(&self) {
        // Relaxed: D1, before it, orders the caller's write before it.
        if self.0.due.load(Ordering::Relaxed) != DIRTY {
            self.set();
        }
    }

    /// `CLEAN` or `ASLEEP` -> `DIRTY`, and a notification if asleep.
    #[cold]
    #[inline(never)]
    fn set(&self) {
        // Relaxed: a read-modify-write of the one word the flusher's
        // compare-exchange also reads; the notification below is under the
        // state lock, which orders the rest.
        if self.0.due.swap(DIRTY, Ordering::Relaxed) == ASLEEP {
            let mut st = self.0.state.lock();
            st.asleep = false;
            self.0.wake.notify_all();
        }
    }
}

/// Asks a flusher's thread to run its short job soon (once, however many
/// pokes arrive before it does), and marks the periodic job due (a roll
/// sealed a segment; a new topic's files want their hooks). Cheap: a lock
/// and, if the thread sleeps, a wake-up. Poking a stopped flusher does
/// nothing.
#[derive(Clone)]
pub(crate) struct Poke(Arc<Shared>);

impl Poke {
    pub(crate) fn poke(&self) {
        Due(self.0.clone()).mark();
        let mut st = self.0.state.lock();
        if !st.poked {
            st.poked = true;
            self.0.poked.notify_all();
        }
    }
}

impl Flusher {
    /// Starts `job` on one thread, run one interval after the start and
    /// then whenever marked due (see "Due" in the module docs), at most
    /// once an interval; `job` returns whether it left work behind (marks
    /// the flusher due again). `short`, run when poked, runs on another
    /// thread (so that a long sync round does not hold it up); both get the
    /// [`Poke`] to hand out.
    pub(crate) fn start(
        interval: Duration,
        mut job: Box<dyn FnMut(&Poke) -> bool + Send>,
        mut short: Box<dyn FnMut(&Poke) + Send>,
    ) -> Result<Flusher> {
        let shared = Arc::new(Shared::new());
        let s = shared.clone();
        let periodic = crate::sync::spawn_named("rill-flusher".into(), move || {
            let poke = Poke(s.clone());
            let mut next = Instant::now() + interval;
            let mut st = s.state.lock();
            loop {
                st = s.idle(st);
                if st.stopping {
                    return;
                }
                let now = Instant::now();
                if now < next {
                    // Due, but the last round was less than an interval ago;
                    // a mark meanwhile needs no wake (the word stays DIRTY).
                    st = s.wake.wait_timeout(st, next - now);
                    continue;
                }
                drop(st);
                s.begin();
                if job(&poke) {
                    Due(s.clone()).mark_after_light();
                }
                next = Instant::now() + interval;
                st = s.state.lock();
                st.rounds += 1;
                s.seen.notify_all();
            }
        })?;
        let s = shared.clone();
        let poked = crate::sync::spawn_named("rill-prepare".into(), move || {
            let poke = Poke(s.clone());
            let mut st = s.state.lock();
            loop {
                if st.stopping {
                    return;
                }
                if !st.poked {
                    st = s.poked.wait(st);
                    continue;
                }
                st.poked = false;
                drop(st);
                short(&poke);
                st = s.state.lock();
            }
        });
        let flusher = Flusher { shared, threads: Mutex::new(vec![periodic]) };
        // On failure, dropping `flusher` would leave the periodic thread
        // running: stop it first.
        match poked {
            Ok(t) => {
                flusher.threads.lock().push(t);
                Ok(flusher)
            }
            Err(e) => {
                flusher.stop();
                Err(e)
            }
        }
    }

    /// A handle that runs the short job soon.
    pub(crate) fn poker(&self) -> Poke {
        Poke(self.shared.clone())
    }

    /// A handle that marks the periodic job due.
    pub(crate) fn due(&self) -> Due {
        Due(self.shared.clone())
    }

    /// The test seam: waits until the periodic thread sleeps with no
    /// timeout and returns how many rounds it ran by then.
    #[cfg(test)]
    pub(crate) fn wait_asleep(&self) -> u64 {
        let mut st = self.shared.state.lock();
        while !st.asleep {
            st = self.shared.seen.wait(st);
        }
        st.rounds
    }

    /// The test seam: waits until more than `n` rounds ran, or `watch` has
    /// passed; returns how many ran.
    #[cfg(test)]
    pub(crate) fn wait_rounds_past(&self, n: u64, watch: Duration) -> u64 {
        let until = Instant::now() + watch;
        let mut st = self.shared.state.lock();
        loop {
            let now = Instant::now();
            if st.rounds > n || now >= until {
                return st.rounds;
            }
            st = self.shared.seen.wait_timeout(st, until - now);
        }
    }

    /// Stops both threads and waits for the jobs in flight to finish.
    /// Idempotent.
    pub(crate) fn stop(&self) {
        {
            let mut st = self.shared.state.lock();
            st.stopping = true;
            self.shared.wake.notify_all();
            self.shared.poked.notify_all();
        }
        let threads = std::mem::take(&mut *self.threads.lock());
        for t in threads {
            let _ = t.join();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A poke runs the short job on its own thread even while the periodic
    /// job is busy (a slow sync round), and `stop` (idempotent) joins both
    /// threads.
    #[test]
    fn a_poke_runs_the_short_job_while_the_periodic_one_is_busy() {
        use std::sync::mpsc;
        let (entered_tx, entered) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let (ran_tx, ran) = mpsc::channel();
        let release_rx = Mutex::new(release_rx);
        let flusher = Flusher::start(
            Duration::from_millis(1),
            Box::new(move |_: &Poke| {
                let _ = entered_tx.send(());
                // Busy until the test lets go (or drops the sender).
                let _ = release_rx.lock().recv();
                false
            }),
            Box::new(move |_: &Poke| {
                let _ = ran_tx.send(());
            }),
        )
        .unwrap();
        let wait = Duration::from_secs(30);
        entered.recv_timeout(wait).expect("the periodic job runs");
        flusher.poker().poke();
        ran.recv_timeout(wait).expect("the short job runs while the periodic one is busy");
        drop(release);
        flusher.stop();
        flusher.stop();
        assert!(flusher.threads.lock().is_empty(), "both threads joined");
    }
}
