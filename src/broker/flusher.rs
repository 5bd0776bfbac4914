//! The flusher: one named thread per broker with a data directory that runs a
//! job every interval (each partition's log round: a sync under
//! `Fsync::Interval`, under `Fsync::Never` a marking round that writes the
//! completion markers of sealed segments and flushes nothing; and write the
//! offsets, including live durable subscriptions' positions), until stopped. The job is a closure, so this file does not name the broker.
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
//! with a timeout or for a poke, not in a sleep) and joins them; the broker
//! then does its final flush itself, on the closing thread.

use std::time::{Duration, Instant};

use crate::error::Result;
use crate::sync::thread::JoinHandle;
use crate::sync::{Arc, Condvar, Mutex};

/// A periodic job on its own thread.
pub(crate) struct Flusher {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// The flusher's state, and a condition variable per thread to wake it for
/// a change of it (a poke wakes only the thread it is for).
struct Shared {
    state: Mutex<State>,
    /// The periodic thread: stopping.
    wake: Condvar,
    /// The short job's thread: stopping, or poked.
    poked: Condvar,
}

#[derive(Default)]
struct State {
    /// Stopping: the thread returns.
    stopping: bool,
    /// The short job is due.
    poked: bool,
}

/// Asks a flusher's thread to run its short job soon (once, however many
/// pokes arrive before it does). Cheap: a lock and, if the thread sleeps, a
/// wake-up. Poking a stopped flusher does nothing.
#[derive(Clone)]
pub(crate) struct Poke(Arc<Shared>);

impl Poke {
    pub(crate) fn poke(&self) {
        let mut st = self.0.state.lock();
        if !st.poked {
            st.poked = true;
            self.0.poked.notify_all();
        }
    }
}

impl Flusher {
    /// Starts `job`, run every `interval` (first after one interval), on one
    /// thread, and `short`, run when poked, on another (so that a long sync
    /// round does not hold the short job up); both get the [`Poke`] to hand
    /// out.
    pub(crate) fn start(
        interval: Duration,
        mut job: Box<dyn FnMut(&Poke) + Send>,
        mut short: Box<dyn FnMut(&Poke) + Send>,
    ) -> Result<Flusher> {
        let shared =
            Arc::new(Shared { state: Mutex::new(State::default()), wake: Condvar::new(), poked: Condvar::new() });
        let s = shared.clone();
        let periodic = crate::sync::spawn_named("rill-flusher".into(), move || {
            let poke = Poke(s.clone());
            let mut next = Instant::now() + interval;
            let mut st = s.state.lock();
            loop {
                if st.stopping {
                    return;
                }
                let now = Instant::now();
                if now < next {
                    st = s.wake.wait_timeout(st, next - now);
                    continue;
                }
                drop(st);
                job(&poke);
                next = Instant::now() + interval;
                st = s.state.lock();
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
