//! Who runs subscription drains: a shared worker pool and the timer that
//! wakes subscriptions waiting to retry. (A subscription with a thread of its
//! own runs its drain loop there; see `subscription/drain.rs`.)
//!
//! Both run [`Job`]s and know nothing else about what they run: the
//! subscription layer above hands them a drain, or the end of a backoff.
//!
//! The pool's run queue is a mutex-protected deque with a condition variable.
//! It is touched only when a subscription goes from idle to active (or yields
//! after a bounded batch), never per message, so its lock is not on the hot
//! path. Workers spin briefly on an atomic count of queued jobs before they
//! sleep, so a burst of wakeups does not pay a futex call each.
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
//! takes the job. Workers not asleep look at the queue before they sleep. No
//! atomic ordering is involved: `queued` stays a hint. The loom models of
//! `loom-tests/tests/signal.rs` run this pool under the signal protocol, and
//! `loom-tests/tests/pool.rs` checks that a worker woken once is woken again
//! (it deadlocks if a worker that came back stays counted in `waking`).
//!
//! Everything here uses the sync shim, so the loom models can run it.

use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::thread::{self, JoinHandle};
use crate::sync::{Arc, Backoff, Condvar, Mutex};

/// Work the pool or the timer runs.
pub(crate) trait Job: Send + 'static {
    /// Runs it, on a worker (or the timer's thread).
    fn run(self);
}

struct Queue<J> {
    jobs: VecDeque<J>,
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
    /// Mirror of `jobs.len()` for spinning workers to poll without the lock.
    queued: AtomicUsize,
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
            queue: Mutex::new(Queue { jobs: VecDeque::new(), sleeping: 0, waking: 0, stopping: false }),
            work: Condvar::new(),
            queued: AtomicUsize::new(0),
        });
        let pool = WorkerPool { shared, threads: Mutex::new(Vec::new()) };
        for i in 0..size {
            let shared = pool.shared.clone();
            let started = crate::sync::spawn_named(format!("rill-worker-{i}"), move || {
                while let Some(job) = PoolShared::<J>::next_job(&shared) {
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

    /// Queues `jobs` in order under one lock, waking at most one sleeping
    /// worker per job, and none already woken (see the module docs). Dropped
    /// silently once the pool is stopping.
    pub(crate) fn push_many(&self, jobs: impl IntoIterator<Item = J>) {
        let mut q = self.shared.queue.lock();
        if q.stopping {
            return;
        }
        let mut added = 0;
        for job in jobs {
            q.jobs.push_back(job);
            added += 1;
        }
        // Relaxed: a hint for spinning workers; the jobs themselves are
        // handed over under the lock.
        self.shared.queued.fetch_add(added, Ordering::Relaxed);
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

    /// True if jobs are queued (a hint: read without the lock).
    pub(crate) fn has_waiting(&self) -> bool {
        // Relaxed: a scheduling hint; a job queued just after still runs soon.
        self.shared.queued.load(Ordering::Relaxed) > 0
    }

    /// Stops the workers after the job each is running, and joins them (all
    /// but the calling thread, if it is one of them). Queued jobs are dropped.
    pub(crate) fn stop(&self) {
        let dropped: Vec<J> = {
            let mut q = self.shared.queue.lock();
            q.stopping = true;
            q.jobs.drain(..).collect()
        };
        self.shared.work.notify_all();
        drop(dropped);
        let threads: Vec<JoinHandle<()>> = std::mem::take(&mut *self.threads.lock());
        let me = thread::current().id();
        for t in threads {
            if t.thread().id() != me {
                // A worker that panicked outside a handler has nothing left to
                // report here; the panic already printed.
                let _ = t.join();
            }
        }
    }
}

impl<J> PoolShared<J> {
    /// The next job, or `None` when the pool stops. Spins briefly, then sleeps.
    fn next_job(&self) -> Option<J> {
        let mut backoff = Backoff::new();
        loop {
            // Relaxed: only a hint of whether taking the lock is worth it.
            if self.queued.load(Ordering::Relaxed) > 0 {
                let mut q = self.queue.lock();
                if let Some(job) = self.take(&mut q) {
                    return Some(job);
                }
                if q.stopping {
                    return None;
                }
            }
            if backoff.is_completed() {
                break;
            }
            backoff.snooze();
        }
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

    fn take(&self, q: &mut Queue<J>) -> Option<J> {
        let job = q.jobs.pop_front()?;
        // Relaxed: see `push`.
        self.queued.fetch_sub(1, Ordering::Relaxed);
        Some(job)
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
