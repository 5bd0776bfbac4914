//! The flusher: one named thread per broker with a data directory that runs a
//! job every interval (sync the partitions' logs under `Fsync::Interval`, and
//! write the offsets, including live durable subscriptions' positions), until
//! stopped. The job is a closure, so this file does not name the broker.
//!
//! Stopping wakes the thread at once (it waits on a condition variable with
//! a timeout, not in a sleep) and joins it; the broker then does its final
//! flush itself, on the closing thread.

use std::time::{Duration, Instant};

use crate::error::Result;
use crate::sync::thread::JoinHandle;
use crate::sync::{Arc, Condvar, Mutex};

/// A periodic job on its own thread.
pub(crate) struct Flusher {
    /// `true` once stopping; the condition variable wakes the thread for it.
    shared: Arc<(Mutex<bool>, Condvar)>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Flusher {
    /// Starts `job`, run every `interval` (first after one interval).
    pub(crate) fn start(interval: Duration, mut job: Box<dyn FnMut() + Send>) -> Result<Flusher> {
        let shared = Arc::new((Mutex::new(false), Condvar::new()));
        let s = shared.clone();
        let thread = crate::sync::spawn_named("rill-flusher".into(), move || {
            let (lock, cond) = &*s;
            let mut next = Instant::now() + interval;
            let mut stopping = lock.lock();
            loop {
                if *stopping {
                    return;
                }
                let now = Instant::now();
                if now < next {
                    stopping = cond.wait_timeout(stopping, next - now);
                    continue;
                }
                drop(stopping);
                job();
                next = Instant::now() + interval;
                stopping = lock.lock();
            }
        })?;
        Ok(Flusher { shared, thread: Mutex::new(Some(thread)) })
    }

    /// Stops the thread and waits for a job in flight to finish. Idempotent.
    pub(crate) fn stop(&self) {
        let (lock, cond) = &*self.shared;
        *lock.lock() = true;
        cond.notify_all();
        let thread = self.thread.lock().take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}
