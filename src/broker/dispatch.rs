//! Who runs subscription drains: a shared worker pool and the timer that
//! wakes subscriptions waiting to retry. (A subscription with a thread of its
//! own runs its drain loop there; see `subscription/drain.rs`.)
//!
//! Both run [`Job`]s and know nothing else about what they run: the
//! subscription layer above hands them a drain, or the end of a backoff.
//!
//! The pool's run queue is a mutex-protected set of FIFO lanes, one per
//! priority, with a condition variable. It is touched only when a
//! subscription goes from idle to active (or yields after a bounded batch),
//! never per message, so its lock is not on the hot path and stays a lock
//! (the lanes add a few word operations inside the same critical section; no
//! new atomic, no new ordering). Workers spin briefly on an atomic count of
//! queued jobs before they sleep, so a burst of wakeups does not pay a futex
//! call each; a worker whose last sleep ended soon after its spin spins on
//! for a bounded time more, so jobs that come a little further apart than
//! the short spin do not pay a wake-up each ([`Bridge`]).
//!
//! # Priorities, and the aging that keeps them from starving anyone
//!
//! A job has a priority, `0..PRIORITIES` ([`Job::priority`]), and waits in
//! that priority's lane; `occupied` has bit `p` set while lane `p` holds a
//! job. A worker takes the head of the highest occupied lane, unless a head
//! is *overdue*: [`PRIORITY_AGING_TAKES`] or more *bypasses* happened since
//! it was pushed. A bypass is a take that passes over an older job: it takes
//! a job while one pushed before it stays queued (in a lower lane). The
//! queue counts its takes and its bypasses, and stamps each job with both
//! counts and a push sequence number when it is pushed. Then the oldest
//! overdue head (lowest sequence) goes first, whatever its lane.
//!
//! Why bypasses and not takes: a take of the oldest job is what the plain
//! FIFO would have done, so it is no priority-induced wait. Counting it
//! made a low lane's heads overdue from the low drains' own turns (eight
//! busy subscriptions of one priority on two workers wait some takes each
//! for one another), and each overdue low head then went ahead of a
//! high-priority job that had just been queued, which waited for a whole
//! low batch more (`rill-bench --priority` shows the probe's queue wait).
//!
//! The bound this gives. Say job `J` is pushed with `Q` jobs queued before it
//! (any lane). Each take while `J` waits is a bypass or takes the oldest job
//! queued, which is `J` or one of the `Q` pushed before it. After
//! `PRIORITY_AGING_TAKES` bypasses its lane's head, which is `J` or older,
//! is overdue; from then on every take serves the oldest overdue head, which
//! is `J` or a job pushed before `J`. At most `Q` jobs pushed before `J` are
//! taken in all, so `J` waits at most `PRIORITY_AGING_TAKES + Q` takes, under
//! any load and any mix of priorities: priority reorders the queue but costs
//! a job at most `PRIORITY_AGING_TAKES` takes more than the plain FIFO
//! would. The pool holds at most one drain per subscription, so `Q` is below
//! the number of subscriptions on the pool. In time that is
//! `PRIORITY_AGING_TAKES + Q` turns of the other subscriptions' handlers
//! (each a bounded batch) spread over the workers.
//!
//! With every job at one priority only that lane is used: no head is ever
//! overdue before the FIFO would have served it, and a take looks at no
//! other lane (the scan below the top lane runs only when a lower lane is
//! occupied), so the order is the old FIFO's.
//!
//! A drain already running is not interrupted, but it ends its turn early:
//! after each batch it reads `occupied`'s mirror (a hint, without the lock)
//! and stops if a higher lane holds a job ([`WorkerPool::outranked`]), then
//! queues itself again. So a high-priority job waits for the batch in hand,
//! not a turn. Batches are fitted to a time slice (`drain.rs`): a quarter of
//! a turn while the pool has only ever seen lanes at or below the drain's
//! own, and a much shorter slice once a higher lane has been used
//! ([`WorkerPool::may_be_outranked`], a sticky mirror of the lanes used), so
//! the wait is about one short batch, or one call of a handler slower than
//! it. A pool with one priority in use batches as it did before priorities.
//!
//! The pool measures each job's wait (time and takes, from push to take) and
//! hands it to the job ([`Job::waited`]) before running it: a subscription
//! keeps it for its stats.
//!
//! # Waking sleeping workers
//!
//! A push wakes a sleeping worker only if one is asleep that nobody has
//! woken yet: the queue counts `sleeping` workers and, of them, `waking`, those
//! a push has notified that have not come back from `wait` yet. Without
//! `waking`, every push between a notify and the woken worker taking the lock
//! again saw `sleeping > 0` and paid another futex call that woke nobody (a
//! publisher that finds 8 subscriptions idle queued 8 drains and made up to 8
//! calls for a pool of 2). A publisher that wakes several subscriptions at once
//! queues them with one [`WorkerPool::push_many`]: one lock, and at most one
//! notify per job up to the workers asleep and not yet woken.
//!
//! Why no job is left queued with every worker asleep. `sleeping`, `waking`
//! and the jobs are read and written under the queue's lock; a push that
//! counted a worker in `waking` notifies once, after releasing the lock (so
//! the woken worker does not find it still held). Call a waiter *doomed* if
//! it will come back from `wait` without another notify (a notify reached it,
//! or it wakes spuriously), and *pending* a notify counted but not yet
//! issued. The invariant is `waking <= doomed + pending`:
//!
//! * a push raises `waking` and `pending` together;
//! * a notify, when issued, lowers `pending` and dooms a waiter that was not:
//!   every worker counted in `sleeping` read the condition variable's state
//!   under the lock before releasing it, so a notify reaches one of them
//!   unless all are doomed already, and then `doomed = sleeping >= waking`;
//! * a doomed waiter that comes back lowers both sides by one (`waking` only
//!   if above zero); one that comes back spuriously lowers only `waking`, an
//!   undercount that costs at most a notify that wakes nobody.
//!
//! So when a push finds `sleeping <= waking` and queues a job without a
//! notify, the sleeping workers not doomed are at most the notifies pending.
//! No worker goes to sleep while the job is queued (a worker takes a queued
//! job, under the lock, before it would sleep), so those notifies reach the
//! workers already asleep, each of them comes back, and the first to do so
//! takes a job (the highest or an overdue one: which lane a job sits in
//! changes which job a worker takes, never whether it takes one, because
//! `take` fails only when `occupied` is 0, that is when every lane is empty). Workers not asleep look at the queue before they sleep. No
//! atomic ordering is involved: `queued` stays a hint. The loom models of
//! `loom-tests/tests/signal.rs` run this pool under the signal protocol, and
//! `loom-tests/tests/pool.rs` checks that a worker woken once is woken again
//! (it deadlocks if a worker that came back stays counted in `waking`), and
//! that jobs pushed to several lanes while the worker sleeps all run, the
//! highest first (it deadlocks if a lane's job is lost or a push to a lane
//! other than the default one wakes nobody).
//!
//! Everything here uses the sync shim, so the loom models can run it.

use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

use crate::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use crate::sync::thread::{self, JoinHandle};
use crate::sync::{Arc, Backoff, Condvar, Mutex};

/// Number of priorities, so of lanes in the pool's queue: `0..PRIORITIES`,
/// higher runs first.
pub const PRIORITIES: u8 = 8;

/// The highest priority.
pub const MAX_PRIORITY: u8 = PRIORITIES - 1;

/// The priority of a job (a subscription) that chose none.
pub const DEFAULT_PRIORITY: u8 = 4;

/// How long a worker that went to sleep and was woken soon after spins on
/// the next time, past its short spin (`Backoff`), before it sleeps again
/// (see [`Bridge`]).
///
/// Why this long: a sleeping worker costs the job that wakes it a futex
/// call in the publish that queued it and the wake-up's latency before
/// the worker runs, which under virtualization is many times the short
/// spin; a wait shorter than this is cheaper spun through than slept
/// through, and the spin is bounded by it when nothing comes.
/// `wildcard_breadth` (an example of rill-bench) prints the voluntary
/// context switches a delivery beside its time: one a delivery, and the
/// wake-up's latency in every delivery, when publishes come just further
/// apart than the short spin.
#[cfg(not(loom))]
const BRIDGE: Duration = Duration::from_micros(20);
/// The most `spin_loop` hints between two looks while bridging; past it,
/// each look is followed by a yield, so that a bridging worker leaves its
/// core to a runnable publisher (it is waiting for one).
#[cfg(not(loom))]
const BRIDGE_MAX_SPINS: u32 = 64;

/// A worker's choice of spinning on past its short spin before it sleeps:
/// on when its last wait for a job, counted from the end of the short
/// spin, lasted at most [`BRIDGE`] (a bridge would have caught the
/// job), off once a bridge ran out with nothing queued. So jobs that come
/// a little further apart than the short spin (a publisher slowed by
/// memory no recent publish touched, as a publish to one of a million
/// topics is) find the worker awake, while jobs that come further apart
/// than the bridge cost it one bridge, after which it sleeps after its
/// short spin as before: an idle pool spins for at most one bridge after
/// its last job.
///
/// No protocol change: a bridging worker is not counted as sleeping, as a
/// worker in its short spin is not, and it takes a job only through the
/// queue's lock (the protocol in the module docs). Under loom a bridge
/// does nothing, as the drainer's linger is not built there
/// (`subscription/idle.rs`): it would add looks to every schedule and
/// nothing to check.
#[derive(Debug)]
struct Bridge {
    /// Spin on for up to [`BRIDGE`] before sleeping.
    #[cfg(not(loom))]
    on: bool,
    /// When this wait's short spin ended (set by `spin`, which every
    /// wait calls before it sleeps).
    #[cfg(not(loom))]
    since: Instant,
}

impl Bridge {
    fn new() -> Bridge {
        Bridge {
            #[cfg(not(loom))]
            on: false,
            #[cfg(not(loom))]
            since: Instant::now(),
        }
    }
}

#[cfg(not(loom))]
impl Bridge {
    /// After the short spin found nothing: if on, looks with `look` until
    /// it finds something or [`BRIDGE`] have passed (then turns off).
    fn spin<T>(&mut self, mut look: impl FnMut() -> Option<T>) -> Option<T> {
        let since = Instant::now();
        self.since = since;
        if !self.on {
            return None;
        }
        let mut spins = 1;
        loop {
            if let Some(found) = look() {
                return Some(found);
            }
            if since.elapsed() >= BRIDGE {
                self.on = false;
                return None;
            }
            if spins <= BRIDGE_MAX_SPINS {
                for _ in 0..spins {
                    crate::sync::spin_loop();
                }
                spins *= 2;
            } else {
                thread::yield_now();
            }
        }
    }

    /// After a sleep that ended with a job pushed at `pushed_at`: on if
    /// the job was queued within [`BRIDGE`] of the end of the short spin
    /// (the wake-up's own latency, which the bridge would save, is not
    /// counted).
    fn after_sleep(&mut self, pushed_at: Instant) {
        self.on = pushed_at.saturating_duration_since(self.since) <= BRIDGE;
    }
}

/// Under loom, no bridge: the short spin, then sleep.
#[cfg(loom)]
impl Bridge {
    fn spin<T>(&mut self, _look: impl FnMut() -> Option<T>) -> Option<T> {
        None
    }

    fn after_sleep(&mut self, _pushed_at: Instant) {}
}

/// Bypasses (takes of a job while an older one stays queued) after which a
/// queued job's lane head is overdue and is served before higher lanes: a
/// job waits at most this many takes more than a plain FIFO would make it
/// wait (see the module docs).
pub const PRIORITY_AGING_TAKES: u64 = 32;

/// How long a job waited in the pool's queue, from its push to its take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Waited {
    /// In time.
    pub(crate) time: Duration,
    /// In takes of other jobs by the pool's workers.
    pub(crate) takes: u64,
}

/// Work the pool or the timer runs.
pub(crate) trait Job: Send + 'static {
    /// Runs it, on a worker (or the timer's thread).
    fn run(self);

    /// Its lane in the pool's queue, below [`PRIORITIES`] (a larger value
    /// is taken as the highest). The timer ignores it.
    fn priority(&self) -> u8 {
        DEFAULT_PRIORITY
    }

    /// Told how long it waited in the pool's queue, just before it runs on
    /// a worker. The timer does not call it.
    fn waited(&self, _waited: Waited) {}
}

/// A queued job and when it was pushed.
struct Entry<J> {
    job: J,
    /// The queue's push count when it was pushed: the oldest has the lowest.
    seq: u64,
    /// The queue's take count when it was pushed.
    take_stamp: u64,
    /// The queue's bypass count when it was pushed.
    bypass_stamp: u64,
    pushed_at: Instant,
}

struct Queue<J> {
    /// One FIFO per priority.
    lanes: [VecDeque<Entry<J>>; PRIORITIES as usize],
    /// Bit `p` set: lane `p` holds a job.
    occupied: u8,
    /// Jobs pushed so far (the next entry's `seq`).
    pushes: u64,
    /// Jobs taken so far.
    takes: u64,
    /// Of the `takes`, those that passed over an older queued job.
    bypasses: u64,
    /// Workers blocked in `wait`.
    sleeping: usize,
    /// Of the `sleeping`, how many a push has notified that have not come
    /// back from `wait` yet (see the module docs).
    waking: usize,
    stopping: bool,
}

struct PoolShared<J> {
    queue: Mutex<Queue<J>>,
    work: Condvar,
    /// Mirror of the jobs in all lanes for spinning workers to poll without
    /// the lock.
    queued: AtomicUsize,
    /// Mirror of `Queue::occupied`, for a running drain to see without the
    /// lock that a job of higher priority waits (see `outranked`).
    occupied: AtomicU8,
    /// The lanes that have ever held a job, one bit each (only ever set):
    /// a drain below the highest of them may be outranked, and fits its
    /// batches to a shorter slice (see `may_be_outranked`).
    used: AtomicU8,
}

/// The shared worker pool that drains subscriptions.
pub(crate) struct WorkerPool<J: Job> {
    shared: Arc<PoolShared<J>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl<J: Job> WorkerPool<J> {
    /// Starts `size` workers. If one cannot be started, stops and joins the
    /// ones that were before returning the error.
    pub(crate) fn start(size: usize) -> crate::error::Result<WorkerPool<J>> {
        let shared = Arc::new(PoolShared {
            queue: Mutex::new(Queue {
                lanes: std::array::from_fn(|_| VecDeque::new()),
                occupied: 0,
                pushes: 0,
                takes: 0,
                bypasses: 0,
                sleeping: 0,
                waking: 0,
                stopping: false,
            }),
            work: Condvar::new(),
            queued: AtomicUsize::new(0),
            occupied: AtomicU8::new(0),
            used: AtomicU8::new(0),
        });
        let pool = WorkerPool { shared, threads: Mutex::new(Vec::new()) };
        for i in 0..size {
            let shared = pool.shared.clone();
            let started = crate::sync::spawn_named(format!("rill-worker-{i}"), move || {
                let mut bridge = Bridge::new();
                while let Some(entry) = PoolShared::<J>::next_job(&shared, &mut bridge) {
                    let (job, waited) = entry;
                    job.waited(waited);
                    job.run();
                }
            });
            match started {
                Ok(handle) => pool.threads.lock().push(handle),
                Err(e) => {
                    pool.stop();
                    return Err(e);
                }
            }
        }
        Ok(pool)
    }

    /// Queues `job`. Dropped silently once the pool is stopping.
    pub(crate) fn push(&self, job: J) {
        self.push_many(std::iter::once(job));
    }

    /// Queues `jobs` in order (each in its priority's lane) under one lock,
    /// waking at most one sleeping worker per job, and none already woken
    /// (see the module docs). Dropped silently once the pool is stopping.
    pub(crate) fn push_many(&self, jobs: impl IntoIterator<Item = J>) {
        // Read before the lock, to keep the clock out of the critical section.
        let pushed_at = Instant::now();
        let mut q = self.shared.queue.lock();
        if q.stopping {
            return;
        }
        let mut added = 0;
        for job in jobs {
            let lane = job.priority().min(PRIORITIES - 1);
            let (seq, take_stamp, bypass_stamp) = (q.pushes, q.takes, q.bypasses);
            q.pushes += 1;
            q.lanes[lane as usize].push_back(Entry { job, seq, take_stamp, bypass_stamp, pushed_at });
            q.occupied |= 1 << lane;
            added += 1;
        }
        // Relaxed: a hint for spinning workers; the jobs themselves are
        // handed over under the lock.
        self.shared.queued.fetch_add(added, Ordering::Relaxed);
        // Relaxed: a hint for running drains (see `outranked`).
        self.shared.occupied.store(q.occupied, Ordering::Relaxed);
        // Relaxed: a hint for running drains (see `may_be_outranked`); the
        // load first, so that once every lane in use has been seen the
        // push writes nothing (no line bounced between workers).
        if self.shared.used.load(Ordering::Relaxed) & q.occupied != q.occupied {
            self.shared.used.fetch_or(q.occupied, Ordering::Relaxed);
        }
        let wake = added.min(q.sleeping - q.waking);
        q.waking += wake;
        drop(q);
        for _ in 0..wake {
            self.shared.work.notify_one();
        }
    }

    /// Workers asleep in `wait` now (for the loom model of waking them).
    #[cfg(loom)]
    pub(crate) fn sleeping(&self) -> usize {
        self.shared.queue.lock().sleeping
    }

    /// True if a job of priority above `priority` is queued (a hint: read
    /// without the lock). A drain on a worker looks after each batch and
    /// ends its turn early if so, so a higher job waits for a batch, not a
    /// whole turn.
    pub(crate) fn outranked(&self, priority: u8) -> bool {
        // Relaxed: a hint; a stale value ends a turn one batch early or late.
        let occupied = self.shared.occupied.load(Ordering::Relaxed);
        u32::from(occupied) >> (u32::from(priority) + 1) != 0
    }

    /// True if a job of priority above `priority` has ever been queued on
    /// this pool (a hint: read without the lock). A drain that may be
    /// outranked fits its batches to a shorter slice, so that the higher
    /// job waits at most about one short batch for a worker; a pool whose
    /// subscriptions all share one priority keeps the longer batches.
    pub(crate) fn may_be_outranked(&self, priority: u8) -> bool {
        // Relaxed: a hint; a stale value sizes a batch or two the old way.
        let used = self.shared.used.load(Ordering::Relaxed);
        u32::from(used) >> (u32::from(priority) + 1) != 0
    }

    /// True if jobs are queued (a hint: read without the lock).
    pub(crate) fn has_waiting(&self) -> bool {
        // Relaxed: a scheduling hint; a job queued just after still runs soon.
        self.shared.queued.load(Ordering::Relaxed) > 0
    }

    /// Stops the workers after the job each is running, and joins them (all
    /// but the calling thread, if it is one of them). Queued jobs are dropped.
    pub(crate) fn stop(&self) {
        self.stop_and(true);
    }

    /// [`stop`](WorkerPool::stop), joining the workers only if `join`:
    /// otherwise each ends by itself after the job it is running.
    pub(crate) fn stop_and(&self, join: bool) {
        let dropped: Vec<Entry<J>> = {
            let mut q = self.shared.queue.lock();
            q.stopping = true;
            q.occupied = 0;
            q.lanes.iter_mut().flat_map(|lane| lane.drain(..)).collect()
        };
        self.shared.work.notify_all();
        drop(dropped);
        let threads: Vec<JoinHandle<()>> = std::mem::take(&mut *self.threads.lock());
        let me = thread::current().id();
        for t in threads {
            // Not joined: dropping the handle detaches the thread.
            if join && t.thread().id() != me {
                // A worker that panicked outside a handler has nothing left to
                // report here; the panic already printed.
                let _ = t.join();
            }
        }
    }
}

impl<J> PoolShared<J> {
    /// The next job and how long it waited, or `None` when the pool stops.
    /// Spins briefly, longer if `bridge` says so, then sleeps.
    fn next_job(&self, bridge: &mut Bridge) -> Option<(J, Waited)> {
        let (entry, takes) = self.next_entry(bridge)?;
        // Read after the lock is released, as in `push_many`.
        let waited = Waited { time: entry.pushed_at.elapsed(), takes };
        Some((entry.job, waited))
    }

    /// The next entry and the takes it waited (see `next_job`).
    fn next_entry(&self, bridge: &mut Bridge) -> Option<(Entry<J>, u64)> {
        let mut backoff = Backoff::new();
        loop {
            if let Some(found) = self.look() {
                return found;
            }
            if backoff.is_completed() {
                break;
            }
            backoff.snooze();
        }
        if let Some(found) = bridge.spin(|| self.look()) {
            return found;
        }
        let found = self.sleep_for_job();
        if let Some((entry, _)) = &found {
            bridge.after_sleep(entry.pushed_at);
        }
        found
    }

    /// A look at the queue between spins: `Some(found)` if a job is queued
    /// (`Some(None)`: the pool is stopping), `None` if the look found none.
    #[inline]
    fn look(&self) -> Option<Option<(Entry<J>, u64)>> {
        // Relaxed: only a hint of whether taking the lock is worth it.
        if self.queued.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut q = self.queue.lock();
        if let Some(job) = self.take(&mut q) {
            return Some(Some(job));
        }
        q.stopping.then_some(None)
    }

    /// Sleeps until a job is queued, then takes it (`None` once the pool
    /// stops).
    fn sleep_for_job(&self) -> Option<(Entry<J>, u64)> {
        let mut q = self.queue.lock();
        loop {
            if let Some(job) = self.take(&mut q) {
                return Some(job);
            }
            if q.stopping {
                return None;
            }
            q.sleeping += 1;
            q = self.work.wait(q);
            q.sleeping -= 1;
            // Notified, or a spurious return (then an undercount; see the
            // module docs). `waking <= sleeping` holds either way.
            q.waking = q.waking.saturating_sub(1);
        }
    }

    /// Takes the head of the highest occupied lane, or the oldest overdue
    /// head (see "Priorities" in the module docs), with the takes it waited.
    fn take(&self, q: &mut Queue<J>) -> Option<(Entry<J>, u64)> {
        let (entry, takes) = q.take_entry()?;
        // Relaxed: see `push_many`.
        self.queued.fetch_sub(1, Ordering::Relaxed);
        // Relaxed: see `push_many`.
        self.occupied.store(q.occupied, Ordering::Relaxed);
        Some((entry, takes))
    }
}

impl<J> Queue<J> {
    /// Takes the entry `next_lane` names and counts the take (and the
    /// bypass, if it is one), with the takes it waited.
    fn take_entry(&mut self) -> Option<(Entry<J>, u64)> {
        let (lane, bypass) = self.next_lane()?;
        let entry = self.lanes[lane].pop_front().expect("an occupied lane holds a job");
        if self.lanes[lane].is_empty() {
            self.occupied &= !(1 << lane);
        }
        let takes = self.takes - entry.take_stamp;
        self.takes += 1;
        self.bypasses += u64::from(bypass);
        Some((entry, takes))
    }

    /// The lane `take` serves next and whether that take is a bypass (an
    /// older job stays queued), `None` if every lane is empty.
    fn next_lane(&self) -> Option<(usize, bool)> {
        if self.occupied == 0 {
            return None;
        }
        let top = (u8::BITS - 1 - self.occupied.leading_zeros()) as usize;
        if self.occupied & !(1 << top) == 0 {
            // One lane in use (every job at one priority): its head is the
            // oldest job, the FIFO's choice.
            return Some((top, false));
        }
        // The oldest head of all; ties cannot happen (sequence numbers are
        // unique).
        let (mut oldest, mut oldest_lane) = (u64::MAX, top);
        for lane in 0..=top {
            if self.occupied & (1 << lane) != 0 {
                let head = self.lanes[lane].front().expect("an occupied lane holds a job");
                if head.seq < oldest {
                    (oldest, oldest_lane) = (head.seq, lane);
                }
            }
        }
        let head = self.lanes[oldest_lane].front().expect("an occupied lane holds a job");
        // The oldest head is the first to be overdue: if it is not, none is.
        if self.bypasses - head.bypass_stamp >= PRIORITY_AGING_TAKES || oldest_lane == top {
            Some((oldest_lane, false))
        } else {
            Some((top, true))
        }
    }
}

/// One pending wakeup: at `due`, run `job`.
struct Alarm<J> {
    due: Instant,
    seq: u64,
    job: J,
}

impl<J> PartialEq for Alarm<J> {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}
impl<J> Eq for Alarm<J> {}
impl<J> PartialOrd for Alarm<J> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<J> Ord for Alarm<J> {
    /// Reversed, so the max-heap pops the earliest alarm.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.due, other.seq).cmp(&(self.due, self.seq))
    }
}

struct Alarms<J> {
    heap: BinaryHeap<Alarm<J>>,
    next_seq: u64,
    stopping: bool,
}

/// One thread per broker that wakes subscriptions when their retry backoff
/// has passed, so no worker ever sleeps through a backoff.
pub(crate) struct Timer<J: Job> {
    shared: Arc<(Mutex<Alarms<J>>, Condvar)>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl<J: Job> Timer<J> {
    pub(crate) fn start() -> crate::error::Result<Timer<J>> {
        Self::start_named("rill-timer")
    }

    /// [`Timer::start`], its thread named `name`.
    pub(crate) fn start_named(name: &str) -> crate::error::Result<Timer<J>> {
        let shared =
            Arc::new((Mutex::new(Alarms { heap: BinaryHeap::new(), next_seq: 0, stopping: false }), Condvar::new()));
        let s = shared.clone();
        let handle = crate::sync::spawn_named(name.into(), move || Self::run(&s))?;
        Ok(Timer { shared, thread: Mutex::new(Some(handle)) })
    }

    fn run(shared: &(Mutex<Alarms<J>>, Condvar)) {
        let (lock, cond) = shared;
        let mut alarms = lock.lock();
        loop {
            if alarms.stopping {
                return;
            }
            let now = Instant::now();
            match alarms.heap.peek() {
                Some(a) if a.due <= now => {
                    let alarm = alarms.heap.pop().expect("peeked");
                    drop(alarms);
                    alarm.job.run();
                    alarms = lock.lock();
                }
                Some(a) => {
                    let wait = a.due - now;
                    alarms = cond.wait_timeout(alarms, wait);
                }
                None => alarms = cond.wait(alarms),
            }
        }
    }

    /// Runs `job` after `delay`. Dropped silently once the timer is stopping.
    pub(crate) fn schedule(&self, delay: Duration, job: J) {
        let (lock, cond) = &*self.shared;
        let mut alarms = lock.lock();
        if alarms.stopping {
            return;
        }
        let seq = alarms.next_seq;
        alarms.next_seq += 1;
        alarms.heap.push(Alarm { due: Instant::now() + delay, seq, job });
        drop(alarms);
        cond.notify_one();
    }

    pub(crate) fn stop(&self) {
        let (lock, cond) = &*self.shared;
        {
            let mut alarms = lock.lock();
            alarms.stopping = true;
            alarms.heap.clear();
        }
        cond.notify_all();
        let thread = self.thread.lock().take();
        if let Some(t) = thread
            && t.thread().id() != thread::current().id()
        {
            let _ = t.join();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn queue() -> Queue<u32> {
        Queue {
            lanes: std::array::from_fn(|_| VecDeque::new()),
            occupied: 0,
            pushes: 0,
            takes: 0,
            bypasses: 0,
            sleeping: 0,
            waking: 0,
            stopping: false,
        }
    }

    fn push(q: &mut Queue<u32>, job: u32, lane: u8) {
        let (seq, take_stamp, bypass_stamp) = (q.pushes, q.takes, q.bypasses);
        q.pushes += 1;
        q.lanes[lane as usize].push_back(Entry { job, seq, take_stamp, bypass_stamp, pushed_at: Instant::now() });
        q.occupied |= 1 << lane;
    }

    /// `PoolShared::take` without the pool: (job, takes waited).
    fn take(q: &mut Queue<u32>) -> Option<(u32, u64)> {
        q.take_entry().map(|(entry, waited)| (entry.job, waited))
    }

    struct Nothing(u8);
    impl Job for Nothing {
        fn run(self) {}
        fn priority(&self) -> u8 {
            self.0
        }
    }

    /// A running drain of priority `p` is outranked while a job of a higher
    /// priority is queued, and only then.
    #[test]
    fn a_queued_higher_job_outranks_a_running_one() {
        // No workers: what is pushed stays queued.
        let pool = WorkerPool::<Nothing>::start(0).unwrap();
        assert!(!pool.outranked(0));
        pool.push_many([Nothing(DEFAULT_PRIORITY), Nothing(0)]);
        assert!(!pool.outranked(DEFAULT_PRIORITY) && !pool.outranked(MAX_PRIORITY));
        assert!(pool.outranked(0) && pool.outranked(DEFAULT_PRIORITY - 1));
        pool.push(Nothing(MAX_PRIORITY));
        assert!(pool.outranked(MAX_PRIORITY - 1) && !pool.outranked(MAX_PRIORITY));
        // Taken: no longer waiting.
        let mut q = pool.shared.queue.lock();
        let (entry, _) = pool.shared.take(&mut q).unwrap();
        drop(q);
        assert_eq!(entry.job.0, MAX_PRIORITY);
        assert!(!pool.outranked(DEFAULT_PRIORITY));
        pool.stop();
    }

    /// A drain may be outranked (and takes the short batch slice) once a
    /// job above its priority has been queued, even after that job ran;
    /// on a pool with one priority in use, never.
    #[test]
    fn a_higher_lane_once_used_keeps_lower_drains_on_short_batches() {
        let pool = WorkerPool::<Nothing>::start(0).unwrap();
        pool.push_many([Nothing(DEFAULT_PRIORITY), Nothing(DEFAULT_PRIORITY)]);
        assert!(!pool.may_be_outranked(DEFAULT_PRIORITY) && !pool.may_be_outranked(MAX_PRIORITY));
        pool.push(Nothing(MAX_PRIORITY));
        let mut q = pool.shared.queue.lock();
        while pool.shared.take(&mut q).is_some() {}
        drop(q);
        assert!(!pool.outranked(DEFAULT_PRIORITY), "nothing is queued now");
        assert!(pool.may_be_outranked(DEFAULT_PRIORITY) && pool.may_be_outranked(0));
        assert!(!pool.may_be_outranked(MAX_PRIORITY));
        pool.stop();
    }

    #[test]
    fn one_priority_is_a_fifo() {
        let mut q = queue();
        for job in 0..100 {
            push(&mut q, job, DEFAULT_PRIORITY);
        }
        let order: Vec<u32> = std::iter::from_fn(|| take(&mut q).map(|(j, _)| j)).collect();
        assert_eq!(order, (0..100).collect::<Vec<_>>());
        assert_eq!(q.occupied, 0);
    }

    #[test]
    fn higher_lanes_go_first_until_a_head_is_overdue() {
        let mut q = queue();
        push(&mut q, 0, 0);
        push(&mut q, 1, 7);
        push(&mut q, 2, 4);
        assert_eq!(take(&mut q), Some((1, 0)));
        assert_eq!(take(&mut q), Some((2, 1)));
        assert_eq!(take(&mut q), Some((0, 2)));
        assert_eq!(take(&mut q), None);
    }

    /// Busy subscriptions of one low priority taking turns (each pushed
    /// again once taken, more of them than the aging bound) never make
    /// their lane's head overdue by those turns alone: a job pushed at a
    /// higher priority is taken next, whenever it comes. Aging counts the
    /// takes that passed over an older job, not the FIFO's own.
    #[test]
    fn a_low_lanes_own_turns_do_not_hold_back_a_higher_job() {
        let mut q = queue();
        let low = PRIORITY_AGING_TAKES as u32 + 8;
        for job in 0..low {
            push(&mut q, job, 0);
        }
        for round in 0..4 {
            // Many turns of the low ones, in FIFO order.
            for _ in 0..3 * PRIORITY_AGING_TAKES {
                let (job, _) = take(&mut q).unwrap();
                push(&mut q, job, 0);
            }
            push(&mut q, 1000 + round, MAX_PRIORITY);
            assert_eq!(take(&mut q).unwrap().0, 1000 + round, "round {round}");
        }
        // The high jobs were bypasses: within as many more as the bound, the
        // low lane's head is overdue and goes before a high job.
        let mut highs = 0;
        loop {
            push(&mut q, 2000 + highs, MAX_PRIORITY);
            let (job, _) = take(&mut q).unwrap();
            if job < low {
                break;
            }
            assert_eq!(job, 2000 + highs);
            highs += 1;
            assert!(highs <= PRIORITY_AGING_TAKES as u32, "the low lane waited {highs} bypasses");
        }
    }

    /// A job pushed at priority 0 behind a priority-7 job that is pushed
    /// again after every take (a busy high subscription, and as many more as
    /// a pool could hold) is taken within `PRIORITY_AGING_TAKES` + the jobs queued
    /// before it, and so is every job of every lane, round after round.
    #[test]
    fn no_job_waits_more_than_the_aging_bound() {
        let mut q = queue();
        // Jobs 0..8 at priorities 0..8; each goes back in its lane once taken.
        for job in 0..8 {
            push(&mut q, job, job as u8);
        }
        let mut served = [0u64; 8];
        for _ in 0..10_000 {
            let queued_before = (q.occupied.count_ones() as u64).max(1) - 1;
            let (job, waited) = take(&mut q).unwrap();
            // At most 7 others are queued before any job here.
            assert!(waited <= PRIORITY_AGING_TAKES + 7, "job {job} waited {waited} takes ({queued_before} queued)");
            served[job as usize] += 1;
            push(&mut q, job, job as u8);
        }
        assert!(served.iter().all(|&n| n > 0), "{served:?}");
        // Higher lanes are served more often.
        assert!(served[7] > served[0], "{served:?}");
    }
}
