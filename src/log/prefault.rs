//! Faulting a streaming in-memory log's next segment in ahead of its
//! publisher.
//!
//! A segment of fresh anonymous memory costs its first writer a page fault
//! per page (or per huge page): a trap, a page zeroed by the kernel and a
//! page table entry, all on the publisher's thread. Once a log has filled
//! its retention, rolls reuse the segments retention trims (the pool's
//! spares, `segment.rs`) and fault nothing; until then, every roll of a new
//! topic pays for a whole segment of faults. Aeron pre-touches its term
//! buffers and Chronicle Queue runs a pretoucher for the same reason.
//!
//! So a memory log that rolls out of a full-size segment while it still
//! grows (it has not yet recycled a trimmed segment, and its pool has no
//! spare) asks for one spare to be made ahead: a segment mapped and faulted
//! in with `madvise(MADV_POPULATE_WRITE)` on this module's thread, put in the
//! pool, where the next roll finds it. What it costs and bounds:
//!
//! * A log holds at most one segment more than it would anyway, and only
//!   while it grows toward its retention: the first trim marks the pool as
//!   recycling, and a recycling pool never asks again. The spare is one of
//!   the pool's `max_spare`.
//! * An idle topic, or one that never fills a full-size segment, never asks
//!   (its first segment is small, and the roll out of it is not counted):
//!   idle memory is unchanged.
//! * The first full-size segment and the one after it still fault on the
//!   publisher's path (the log cannot know it streams until it has filled
//!   one); every later one until retention is reached comes faulted in.
//! * One thread per process, started at the first request and never
//!   stopped (it sleeps on a condition variable with nothing to do). It
//!   holds pools only weakly: a log dropped meanwhile is skipped.
//! * A forked child does not have the thread (fork copies only the calling
//!   thread), and may have inherited the queue's lock held: requests made in
//!   a process other than the one that started the thread are dropped, so a
//!   child's logs fault as they did before, and never wait for a thread
//!   that is not there.
//!
//! Measured by `rill-bench --publish-cost` ("new topic" against "past its
//! retention") and by `--scenario one-to-one` with and without
//! `--no-warmup` (see "Known performance cliffs" in docs/PERFORMANCE.md).

use std::sync::{OnceLock, Weak};

use super::pool::Pool;
use crate::sync::{Arc, Condvar, Mutex};

/// The process's prefault thread and its queue of requests.
struct Prefaulter {
    /// The process that started the thread (see "A forked child").
    pid: u32,
    queue: Mutex<Vec<Weak<Pool>>>,
    wake: Condvar,
}

static PREFAULTER: OnceLock<Option<Arc<Prefaulter>>> = OnceLock::new();

/// Asks for a spare segment of `pool` to be made and faulted in on the
/// prefault thread, if the pool wants one (see the module docs) and has
/// not asked already. Cheap when it does not: two loads.
pub(super) fn ahead(pool: &Arc<Pool>) {
    if !pool.wants_spare_ahead() || !pool.mark_spare_requested() {
        return;
    }
    let Some(p) = prefaulter() else {
        pool.spare_request_done();
        return;
    };
    p.queue.lock().push(Arc::downgrade(pool));
    p.wake.notify_one();
}

/// The thread of this process, started if there is none yet; `None` if it
/// could not be started or was started by the parent of a forked process.
fn prefaulter() -> Option<&'static Prefaulter> {
    let p = PREFAULTER.get_or_init(|| {
        let p = Arc::new(Prefaulter { pid: std::process::id(), queue: Mutex::new(Vec::new()), wake: Condvar::new() });
        let worker = p.clone();
        match crate::sync::spawn_named("rill-prefault".into(), move || run(&worker)) {
            Ok(_detached) => Some(p),
            Err(e) => {
                log::debug!("no prefault thread ({e}): new segments fault on the publisher's path");
                None
            }
        }
    });
    p.as_deref().filter(|p| p.pid == std::process::id())
}

/// The thread: makes a spare for each pool asked for, for ever.
fn run(p: &Prefaulter) {
    loop {
        let jobs = {
            let mut queue = p.queue.lock();
            while queue.is_empty() {
                queue = p.wake.wait(queue);
            }
            std::mem::take(&mut *queue)
        };
        for pool in jobs.iter().filter_map(Weak::upgrade) {
            pool.make_spare_ahead();
        }
    }
}
