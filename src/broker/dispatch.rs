//! Who runs subscription drains: a shared worker pool, a dedicated thread per
//! subscription, and the timer that wakes subscriptions waiting to retry.
//!
//! The pool's run queue is a mutex-protected deque with a condition variable.
//! It is touched only when a subscription goes from idle to active (or yields
//! after a bounded batch), never per message, so its lock is not on the hot
//! path. Workers spin briefly on an atomic count of queued jobs before they
//! sleep, so a burst of wakeups does not pay a futex call each.
//!
//! Everything here uses the sync shim, so the loom models can run it.

use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

use super::subscription::SubCore;
use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::thread::{self, JoinHandle};
use crate::sync::{Arc, Backoff, Condvar, Mutex};

struct Queue {
    jobs: VecDeque<Arc<SubCore>>,
    /// Workers blocked in `wait`.
    sleeping: usize,
    stopping: bool,
}

struct PoolShared {
    queue: Mutex<Queue>,
    work: Condvar,
    /// Mirror of `jobs.len()` for spinning workers to poll without the lock.
    queued: AtomicUsize,
}

/// The shared worker pool that drains subscriptions.
pub(crate) struct Pool {
    shared: Arc<PoolShared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Pool {
    /// Starts `size` workers. If one cannot be started, stops and joins the
    /// ones that were before returning the error.
    pub(crate) fn start(size: usize) -> crate::Result<Pool> {
        let shared = Arc::new(PoolShared {
            queue: Mutex::new(Queue { jobs: VecDeque::new(), sleeping: 0, stopping: false }),
            work: Condvar::new(),
            queued: AtomicUsize::new(0),
        });
        let pool = Pool { shared, threads: Mutex::new(Vec::new()) };
        for i in 0..size {
            let shared = pool.shared.clone();
            let started = crate::sync::spawn_named(format!("rill-worker-{i}"), move || {
                while let Some(job) = shared.next_job() {
                    SubCore::run(job);
                }
            });
            match started {
                Ok(handle) => pool.threads.lock().unwrap_or_else(|e| e.into_inner()).push(handle),
                Err(e) => {
                    pool.stop();
                    return Err(e);
                }
            }
        }
        Ok(pool)
    }

    /// Queues a drain of `sub`. Dropped silently once the pool is stopping.
    pub(crate) fn push(&self, sub: Arc<SubCore>) {
        let wake = {
            let mut q = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            if q.stopping {
                return;
            }
            q.jobs.push_back(sub);
            // Relaxed: a hint for spinning workers; the job itself is handed
            // over under the lock.
            self.shared.queued.fetch_add(1, Ordering::Relaxed);
            q.sleeping > 0
        };
        if wake {
            self.shared.work.notify_one();
        }
    }

    /// True if jobs are queued (a hint: read without the lock).
    pub(crate) fn has_waiting(&self) -> bool {
        // Relaxed: a scheduling hint; a job queued just after still runs soon.
        self.shared.queued.load(Ordering::Relaxed) > 0
    }

    /// Stops the workers after the job each is running, and joins them (all
    /// but the calling thread, if it is one of them). Queued jobs are dropped.
    pub(crate) fn stop(&self) {
        let dropped: Vec<Arc<SubCore>> = {
            let mut q = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.stopping = true;
            q.jobs.drain(..).collect()
        };
        self.shared.work.notify_all();
        drop(dropped);
        let threads: Vec<JoinHandle<()>> = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
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

impl PoolShared {
    /// The next job, or `None` when the pool stops. Spins briefly, then sleeps.
    fn next_job(&self) -> Option<Arc<SubCore>> {
        let mut backoff = Backoff::new();
        loop {
            // Relaxed: only a hint of whether taking the lock is worth it.
            if self.queued.load(Ordering::Relaxed) > 0 {
                let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
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
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(job) = self.take(&mut q) {
                return Some(job);
            }
            if q.stopping {
                return None;
            }
            q.sleeping += 1;
            q = self.work.wait(q).unwrap_or_else(|e| e.into_inner());
            q.sleeping -= 1;
        }
    }

    fn take(&self, q: &mut Queue) -> Option<Arc<SubCore>> {
        let job = q.jobs.pop_front()?;
        // Relaxed: see `push`.
        self.queued.fetch_sub(1, Ordering::Relaxed);
        Some(job)
    }
}

/// One pending wakeup: at `due`, re-signal the subscription.
struct Alarm {
    due: Instant,
    seq: u64,
    sub: Arc<SubCore>,
}

impl PartialEq for Alarm {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}
impl Eq for Alarm {}
impl PartialOrd for Alarm {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Alarm {
    /// Reversed, so the max-heap pops the earliest alarm.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.due, other.seq).cmp(&(self.due, self.seq))
    }
}

struct Alarms {
    heap: BinaryHeap<Alarm>,
    next_seq: u64,
    stopping: bool,
}

/// One thread per broker that wakes subscriptions when their retry backoff
/// has passed, so no worker ever sleeps through a backoff.
pub(crate) struct Timer {
    shared: Arc<(Mutex<Alarms>, Condvar)>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Timer {
    pub(crate) fn start() -> crate::Result<Timer> {
        let shared =
            Arc::new((Mutex::new(Alarms { heap: BinaryHeap::new(), next_seq: 0, stopping: false }), Condvar::new()));
        let s = shared.clone();
        let handle = crate::sync::spawn_named("rill-timer".into(), move || Self::run(&s))?;
        Ok(Timer { shared, thread: Mutex::new(Some(handle)) })
    }

    fn run(shared: &(Mutex<Alarms>, Condvar)) {
        let (lock, cond) = shared;
        let mut alarms = lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if alarms.stopping {
                return;
            }
            let now = Instant::now();
            match alarms.heap.peek() {
                Some(a) if a.due <= now => {
                    let alarm = alarms.heap.pop().expect("peeked");
                    drop(alarms);
                    SubCore::wake_from_backoff(&alarm.sub);
                    alarms = lock.lock().unwrap_or_else(|e| e.into_inner());
                }
                Some(a) => {
                    let wait = a.due - now;
                    alarms = cond.wait_timeout(alarms, wait).unwrap_or_else(|e| e.into_inner()).0;
                }
                None => alarms = cond.wait(alarms).unwrap_or_else(|e| e.into_inner()),
            }
        }
    }

    /// Wakes `sub` after `delay`.
    pub(crate) fn schedule(&self, delay: Duration, sub: &Arc<SubCore>) {
        let (lock, cond) = &*self.shared;
        let mut alarms = lock.lock().unwrap_or_else(|e| e.into_inner());
        if alarms.stopping {
            return;
        }
        let seq = alarms.next_seq;
        alarms.next_seq += 1;
        alarms.heap.push(Alarm { due: Instant::now() + delay, seq, sub: sub.clone() });
        drop(alarms);
        cond.notify_one();
    }

    pub(crate) fn stop(&self) {
        let (lock, cond) = &*self.shared;
        {
            let mut alarms = lock.lock().unwrap_or_else(|e| e.into_inner());
            alarms.stopping = true;
            alarms.heap.clear();
        }
        cond.notify_all();
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take()
            && t.thread().id() != thread::current().id()
        {
            let _ = t.join();
        }
    }
}
