//! Faulting a log's fresh segments in ahead of its publishers.
//!
//! A segment of fresh anonymous memory costs its first writer a page fault
//! per page (or per huge page): a trap, a page zeroed by the kernel and a
//! page table entry, all on the publisher's thread; a new segment file
//! costs the same per page of the page cache, its offset index included.
//! Once a log has filled its retention, rolls reuse the segments retention
//! trims (the pool's spares, `pool.rs`; a durable log's spare files,
//! "Recycling" in `file/mod.rs`) and fault nothing; until then, a new
//! topic's publishers would pay for every page of their first fill. Aeron
//! pre-touches its term buffers and Chronicle Queue runs a pretoucher for
//! the same reason. Two mechanisms move that work to this module's
//! thread, each bounded:
//!
//! # Ahead of the tail
//!
//! A segment built over buffers not faulted in (fresh memory from
//! `Buffers::map`, or a new segment file from the pool, made at the roll
//! or ahead of it; not a recycled spare, not a memory spare made ahead,
//! not a small first segment's heap block) carries an [`Ahead`]. When it
//! is installed, the roller asks for its first [`AHEAD`] bytes; after
//! that, a publisher whose reservation crosses a multiple of [`STEP`]
//! bytes asks for the pages up to `AHEAD` past its end, and for the index
//! slots records of the segment's average size would fill that far. The
//! check is one comparison per append (`dir.rs`, `reserve_then`); the ask,
//! once per `STEP`, is a load on a segment that needs nothing. The thread
//! faults the asked range in with `madvise(MADV_POPULATE_WRITE)` over the
//! region and over the index, in chunks (`storage::populate`: a thread
//! that maps or unmaps waits for one chunk at most).
//!
//! * Bounded: a segment is faulted at most `AHEAD` bytes (rounded to
//!   whole pages, or the huge page it falls in) past the furthest a
//!   reservation reached, and its index as far as those bytes would take.
//!   A topic that stops publishing keeps at most that beyond what it wrote.
//! * Nothing for an idle topic: one holding a few messages is still in its
//!   small first segment (a heap block, never faulted ahead). A durable
//!   topic's first file is faulted only once a reservation crosses `STEP`.
//! * No protocol: every field of `Ahead` is a hint, so all are `Relaxed`.
//!   Faulting a page in changes no byte of it, and races with no reader or
//!   writer; a stale or lost ask leaves a range to be faulted by its
//!   writer, as before, and the next crossing asks again.
//! * A publisher that outruns the thread (the thread is not scheduled in
//!   time, on a machine with fewer cores than busy threads) faults what it
//!   reaches first, as it did without this.
//!
//! # A spare made ahead
//!
//! A memory log that streams asks for its next segment to be made ahead:
//! mapped in huge pages and faulted in whole, put in the pool, where the
//! next roll finds it (and, faulted already, it carries no `Ahead`). It
//! asks when it rolls out of a full-size segment into fresh memory, and
//! when a reservation in its first full-size segment comes within `AHEAD`
//! of that segment's end (a log that has written that far streams), so its
//! second full-size segment comes faulted in too.
//!
//! * A log holds at most one segment more than it would anyway, and only
//!   while it grows toward its retention: the first trim marks the pool as
//!   recycling, and a recycling pool never asks again. The spare is one of
//!   the pool's `max_spare`.
//! * A durable log asks the same way for its next *file*: made here
//!   without a name (`O_TMPFILE`) in the partition's directory, allocated,
//!   its first `AHEAD` bytes faulted in (the rest is faulted ahead of its
//!   tail once it is a segment, as any new file's: so it is ready sooner,
//!   see `pool::AHEAD_FILE_FAULTED`), and kept beside the pool's spares
//!   (`file_storage::AheadFile`). The roll writes its header and links it
//!   under the segment's name, where it would otherwise create, allocate
//!   and link a file on the publisher's path (on tmpfs the allocation
//!   zeroes every page). A file without a name is freed by the kernel with
//!   its last descriptor, so a crash or a log dropped first leaves nothing
//!   for recovery. A log shared by processes keeps no trimmed files in its
//!   pool (they are reused through the directory once every process has
//!   let go of them: "Recycling across processes" in `file/mod.rs`), so
//!   the process that rolls a partition asks at every roll: the thread
//!   claims a free file if there is one, and makes a file ahead if none
//!   waits, for the rolls that find no free file (that process holds one
//!   file more than the partition's retention). The request is made in the process that
//!   made the file only: a child forked since shares its descriptor, and
//!   leaves it alone. A filesystem without files without a name is found
//!   at the first attempt, and asked no more.
//! * An idle topic, or one that never fills most of a full-size segment,
//!   never asks: idle memory is unchanged.
//!
//! # A trimmed file let go behind
//!
//! A log shared by processes keeps no trimmed files in its pool: a mapping
//! of a segment file it no longer reads is let go, and the last process to
//! let go of a trimmed one frees it for reuse, or deletes it (on tmpfs that
//! frees its pages then, in `munmap`, page by page; see "Recycling across
//! processes" in `file/mod.rs`). Where a log of one process would hand the
//! file back to its pool, the roll's thread (a publisher, through the
//! epoch's deferred drop) would pay for those system calls at every roll.
//! So the pool hands every file it lets go to this thread, which drops it:
//! its lock, the free step if it is the last, then its mapping. Bounded: at most [`MAX_LET_GO_QUEUED`] files wait for the
//! thread, so memory and disk wait at most that many segments for their
//! freeing; a trim past the bound, or in a process without the thread (a
//! forked child), drops its file where it is, as before. A file that waits
//! is one nobody reads through this process's mapping (the epoch has let
//! it go) and another process's reader keeps its own mapping, so dropping
//! it later changes only when its memory comes back.
//!
//! # The thread
//!
//! * One thread per process, started at the first request and never
//!   stopped (it sleeps on a condition variable with nothing to do). It
//!   holds pools and segments only weakly: a log or segment dropped
//!   meanwhile is skipped. It serves the segments being written before
//!   the spares, which are for a later roll.
//! * A forked child does not have the thread (fork copies only the calling
//!   thread), and may have inherited the queue's lock held: requests made in
//!   a process other than the one that started the thread are dropped, so a
//!   child's logs fault as they did before, and never wait for a thread
//!   that is not there.
//!
//! Measured by `rill-bench --scenario fresh` (a new topic's first fill
//! against a warm topic, in memory and durable, with the publishers' page
//! faults), `--publish-cost` ("new topic" against "past its retention")
//! and `--schema-cost` (whose topic is new in every pair); see "Known
//! performance cliffs" in docs/PERFORMANCE.md.

use std::sync::{OnceLock, Weak};

use super::pool::Pool;
use super::segment::{Buffers, Segment};
use crate::sync::atomic::AtomicUsize;
use crate::sync::atomic::Ordering::Relaxed;
use crate::sync::{Arc, Condvar, Mutex};

/// A publisher whose reservation crosses a multiple of this many bytes of
/// a segment not faulted in asks for more ahead (see "Ahead of the tail").
pub(super) const STEP: u64 = 32 << 10;

/// How far ahead of the tail, in region bytes, a segment not faulted in is
/// asked to be faulted in (see "Ahead of the tail").
pub(super) const AHEAD: u64 = 1 << 20;
const _: () = assert!(super::pool::AHEAD_FILE_FAULTED as u64 == AHEAD);

/// At most this many trimmed files wait for the thread to let them go (see
/// "A trimmed file let go behind"); a trim past it lets its file go itself.
pub(super) const MAX_LET_GO_QUEUED: usize = 2;

/// The process's prefault thread and its queue of requests.
struct Prefaulter {
    /// The process that started the thread (see "A forked child").
    pid: u32,
    queue: Mutex<Vec<Job>>,
    wake: Condvar,
    /// The [`Job::LetGo`]s queued and not yet dropped. Relaxed: a bound on
    /// memory held, not an ordering (the queue's mutex carries the buffers).
    letting_go: AtomicUsize,
    /// The [`Job::LetGo`]s done, for tests.
    #[cfg(test)]
    let_go_done: AtomicUsize,
    /// For a test that waits for the thread in vain ([`describe`]): the
    /// job it is on and since when, and whether it still runs (true from
    /// its start).
    #[cfg(test)]
    busy: Mutex<Option<(&'static str, std::time::Instant)>>,
    #[cfg(test)]
    running: crate::sync::atomic::AtomicBool,
}

/// A request to the prefault thread.
enum Job {
    /// Make a spare segment of this pool, faulted in.
    Spare(Weak<Pool>),
    /// Fault this segment in as far as its `Ahead` asks.
    Ahead(Weak<Segment>),
    /// Drop these buffers, a trimmed segment's file nothing reads any more.
    LetGo(Buffers),
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
    p.queue.lock().push(Job::Spare(Arc::downgrade(pool)));
    p.wake.notify_one();
}

/// A publisher's reservation in `seg`, a segment of `pool`, ended at
/// region byte `end` and slot `slots` (the caller checks that it crossed a
/// multiple of [`STEP`]): if the segment is over buffers not faulted in,
/// asks for its pages up to [`AHEAD`] bytes past `end` (and as many index
/// slots as records that long would take, at the segment's average so
/// far); and if that reaches the end of a full-size segment, asks for the
/// next segment to be made ahead as a spare. Cheap when the segment needs
/// nothing: a load.
#[cold]
pub(super) fn crossed(pool: &Arc<Pool>, seg: &Arc<Segment>, end: u64, slots: u64) {
    if seg.ahead().is_none() {
        return;
    }
    ask(seg, end + AHEAD, slots, end);
    if end + AHEAD >= seg.capacity() && seg.capacity() == pool.capacity() as u64 {
        ahead(pool);
    }
}

/// A segment just installed after `last` (sealed at `count` records
/// ending at byte `end`): if it is over buffers not faulted in, asks for
/// its first [`AHEAD`] bytes, and index slots at `last`'s average record
/// size.
pub(super) fn installed(seg: &Arc<Segment>, count: u64, end: u64) {
    if seg.ahead().is_some() {
        ask(seg, AHEAD, count, end);
    }
}

/// Asks for `seg`'s region up to byte `to` (clamped to the segment) and
/// its index up to the slot records of `per_bytes / per_slots` bytes each
/// would reach there, unless that much was asked already.
fn ask(seg: &Arc<Segment>, to: u64, per_slots: u64, per_bytes: u64) {
    let Some(a) = seg.ahead() else { return };
    let to = to.min(seg.capacity());
    // Relaxed: see `Ahead`.
    if a.asked.fetch_max(to, Relaxed) >= to {
        return;
    }
    let slots = match per_bytes {
        0 => 0,
        _ => (u128::from(per_slots) * u128::from(to)).div_ceil(u128::from(per_bytes)) as u64,
    };
    a.asked_slots.fetch_max(slots.min(seg.slot_count()), Relaxed);
    if a.queued.swap(true, Relaxed) {
        return;
    }
    let Some(p) = prefaulter() else {
        a.queued.store(false, Relaxed);
        return;
    };
    p.queue.lock().push(Job::Ahead(Arc::downgrade(seg)));
    p.wake.notify_one();
}

/// Lets go of `buffers`, the file of a segment a log shared by processes
/// trimmed and nothing in this process reads any more, on the prefault
/// thread (see "A trimmed file let go behind"); here if the thread has
/// [`MAX_LET_GO_QUEUED`] waiting already, or there is no thread.
pub(super) fn let_go(buffers: Buffers) {
    let Some(p) = prefaulter() else { return drop(buffers) };
    // Relaxed: see `Prefaulter::letting_go`.
    if p.letting_go.fetch_add(1, Relaxed) >= MAX_LET_GO_QUEUED {
        p.letting_go.fetch_sub(1, Relaxed);
        return drop(buffers);
    }
    p.queue.lock().push(Job::LetGo(buffers));
    p.wake.notify_one();
}

/// On the prefault thread: faults `seg` in from where it was last faulted
/// to where it is asked now.
fn fault_ahead(seg: &Segment) {
    let Some(a) = seg.ahead() else { return };
    // Relaxed, all: see `Ahead`. Cleared before the loads, so an ask that
    // raises them after finds no job queued and queues one.
    a.queued.store(false, Relaxed);
    let (to, to_slots) = (a.asked.load(Relaxed), a.asked_slots.load(Relaxed));
    let (from, from_slots) = (a.done.swap(to, Relaxed), a.done_slots.swap(to_slots, Relaxed));
    if to > from || to_slots > from_slots {
        seg.fault_in(from..to, from_slots..to_slots);
    }
    #[cfg(test)]
    {
        a.finished.fetch_max(to, Relaxed);
        a.finished_slots.fetch_max(to_slots, Relaxed);
    }
}

/// The thread of this process, started if there is none yet; `None` if it
/// could not be started or was started by the parent of a forked process.
fn prefaulter() -> Option<&'static Prefaulter> {
    let p = PREFAULTER.get_or_init(|| {
        let p = Arc::new(Prefaulter {
            pid: std::process::id(),
            queue: Mutex::new(Vec::new()),
            wake: Condvar::new(),
            letting_go: AtomicUsize::new(0),
            #[cfg(test)]
            let_go_done: AtomicUsize::new(0),
            #[cfg(test)]
            busy: Mutex::new(None),
            #[cfg(test)]
            running: crate::sync::atomic::AtomicBool::new(true),
        });
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

/// The thread: serves the requests, for ever.
fn run(p: &Prefaulter) {
    #[cfg(test)]
    let _running = Running(p);
    loop {
        let mut jobs = {
            let mut queue = p.queue.lock();
            while queue.is_empty() {
                queue = p.wake.wait(queue);
            }
            std::mem::take(&mut *queue)
        };
        // The segments being written first, then the spares, which the next
        // roll takes, and the files let go last: their freeing can wait
        // (a bounded number of them), a roll that finds no spare made
        // makes its own.
        jobs.sort_by_key(|j| match j {
            Job::Ahead(_) => 0,
            Job::Spare(_) => 1,
            Job::LetGo(_) => 2,
        });
        for job in jobs {
            #[cfg(test)]
            {
                let kind = match &job {
                    Job::Ahead(_) => "faulting a segment ahead",
                    Job::Spare(_) => "making a spare",
                    Job::LetGo(_) => "letting a file go",
                };
                *p.busy.lock() = Some((kind, std::time::Instant::now()));
            }
            match job {
                Job::LetGo(buffers) => {
                    drop(buffers);
                    // Relaxed: see `Prefaulter::letting_go`.
                    p.letting_go.fetch_sub(1, Relaxed);
                    #[cfg(test)]
                    p.let_go_done.fetch_add(1, Relaxed);
                }
                Job::Spare(pool) => {
                    if let Some(pool) = pool.upgrade() {
                        pool.make_spare_ahead();
                    }
                }
                Job::Ahead(seg) => {
                    if let Some(seg) = seg.upgrade() {
                        fault_ahead(&seg);
                    }
                }
            }
            #[cfg(test)]
            {
                *p.busy.lock() = None;
            }
        }
    }
}

/// Clears `Prefaulter::running` (for [`describe`]) when `run` ends, which
/// it does only by a panic.
#[cfg(test)]
struct Running<'a>(&'a Prefaulter);

#[cfg(test)]
impl Drop for Running<'_> {
    fn drop(&mut self) {
        // Relaxed: a test's report, ordered with nothing.
        self.0.running.store(false, Relaxed);
    }
}

/// Whether the prefault thread has let go of every file handed to it (and
/// so finished each one's free step), for tests.
#[cfg(test)]
pub(super) fn let_go_drained() -> bool {
    // Relaxed: a test's poll; the count moves after each drop is done.
    prefaulter().is_none_or(|p| p.letting_go.load(Relaxed) == 0)
}

/// What the prefault thread is doing, for the message of a test that
/// waited for it in vain.
#[cfg(test)]
pub(super) fn describe() -> String {
    match PREFAULTER.get() {
        None => "no prefault thread was asked for yet".into(),
        Some(None) => "the prefault thread could not be started".into(),
        Some(Some(p)) => {
            let queued = p.queue.lock().len();
            let busy = match *p.busy.lock() {
                Some((kind, since)) => format!("{kind} for {:?}", since.elapsed()),
                None => "idle".into(),
            };
            // Relaxed: as in `Running::drop`.
            let running = if p.running.load(Relaxed) { "running" } else { "ended (a job panicked)" };
            format!("the prefault thread: {running}, {busy}, {queued} jobs queued")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::tests::HangGuard;
    use crate::log::{DurableLog, Log, LogConfig, Record};
    use crate::sync::atomic::Ordering::Relaxed;

    /// Minor page faults of the calling thread so far.
    fn thread_faults() -> u64 {
        // SAFETY: getrusage writes the `rusage` we pass and reads nothing.
        unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            assert_eq!(libc::getrusage(libc::RUSAGE_THREAD, &mut usage), 0);
            usage.ru_minflt as u64
        }
    }

    /// The newest segment of `log`.
    fn newest(log: &Log) -> Arc<Segment> {
        let guard = crate::sync::epoch::pin();
        log.shared.dir(&guard).last().clone()
    }

    /// Waits (up to a minute: a hang guard, not a timing) until the prefault
    /// thread has done what `seg` asks.
    fn served(seg: &Segment) {
        let a = seg.ahead().expect("a segment over fresh buffers");
        // `finished`, not `done`: `done` is claimed before the faulting.
        HangGuard::new().wait(
            || {
                a.finished.load(Relaxed) >= a.asked.load(Relaxed)
                    && a.finished_slots.load(Relaxed) >= a.asked_slots.load(Relaxed)
            },
            || "the prefault thread did not serve the segment".into(),
        );
    }

    const RECORD: usize = 64;

    fn config() -> LogConfig {
        LogConfig { segment_bytes: Some(4 << 20), retention_bytes: Some(16 << 20), ..LogConfig::default() }
    }

    #[test]
    fn a_fresh_segment_is_faulted_in_a_bounded_distance_ahead_of_its_publisher() {
        let log = Log::new(&config()).unwrap();
        let body = [7u8; RECORD];
        let record = Record::new(&body);
        // One message: the small first segment, a heap block that nothing
        // faults ahead (an idle topic's memory is what it was).
        log.append(&record).unwrap();
        assert!(newest(&log).ahead().is_none());
        // Into the first full-size segment, fresh memory: faulted ahead,
        // never more than AHEAD past its tail.
        while log.stats().segments < 2 || newest(&log).used_bytes() < 4 * STEP {
            log.append(&record).unwrap();
        }
        let seg = newest(&log);
        let a = seg.ahead().expect("fresh memory is faulted ahead");
        let used = seg.used_bytes();
        let asked = a.asked.load(Relaxed);
        assert!(asked <= used + AHEAD, "asked {asked} bytes with the tail at {used}");
        assert!(asked + STEP + RECORD as u64 * 2 > used + AHEAD, "asked {asked} bytes with the tail at {used}");
        let slots = a.asked_slots.load(Relaxed);
        assert!(slots > seg.reserved() && slots < seg.slot_count(), "{slots} slots asked");
        served(&seg);
        // Writing what was faulted in takes no fault of the publisher's
        // (the appends before it would have taken one per 4 KiB page, and
        // one per 1,024 slots of the index).
        let before = thread_faults();
        while seg.used_bytes() < used + AHEAD / 2 {
            log.append(&record).unwrap();
        }
        let faults = thread_faults() - before;
        assert!(faults <= 2, "{faults} faults writing {} KiB faulted in ahead", AHEAD / 2 / 1024);
    }

    #[test]
    fn the_first_full_size_segment_asks_for_the_next_one_made_ahead() {
        let log = Log::new(&config()).unwrap();
        let body = [7u8; RECORD];
        let record = Record::new(&body);
        while log.stats().segments < 2 {
            log.append(&record).unwrap();
        }
        // Small pages, fresh: until its end is within AHEAD, no spare.
        let seg = newest(&log);
        while seg.used_bytes() + AHEAD + STEP < seg.capacity() {
            log.append(&record).unwrap();
            assert_eq!(log.stats().spare_segments, 0);
        }
        while seg.used_bytes() + AHEAD < seg.capacity() {
            log.append(&record).unwrap();
        }
        HangGuard::new().wait(|| log.stats().spare_segments > 0, || "no spare was made ahead".into());
        // The roll takes it: the second full-size segment comes faulted in.
        while log.stats().segments < 3 {
            log.append(&record).unwrap();
        }
        assert!(newest(&log).ahead().is_none(), "the spare made ahead was not used");
    }

    /// The temporary files in `dir` (a file made ahead has no name until
    /// its roll, where a file made at the roll has a temporary one first).
    fn other_names(dir: &std::path::Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| crate::log::file::is_temp_file_name(n))
            .collect()
    }

    /// A log shared by processes hands the files retention trims to the
    /// prefault thread, which lets them go (their spare names and their
    /// memory), never more than `MAX_LET_GO_QUEUED` waiting; once the log
    /// stops, every spare name is gone.
    #[test]
    fn a_shared_log_lets_its_trimmed_files_go_on_the_prefault_thread() {
        let dir = std::env::temp_dir().join(format!("rill-prefault-let-go-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let durable = DurableLog::new(&dir);
        let (log, _) = Log::open_in(&config(), 0, &durable, crate::log::Sharing::Processes).unwrap();
        let body = [7u8; RECORD];
        let record = Record::new(&body);
        let p = prefaulter().expect("the test process has the thread");
        let done = p.let_go_done.load(Relaxed);
        let guard = HangGuard::new();
        // Well past the retention, so rolls trim: each trimmed file comes
        // to the thread once this thread's epoch lets its segment go.
        while log.stats().trimmed_segments < 8 || p.let_go_done.load(Relaxed) == done {
            for _ in 0..1000 {
                log.append(&record).unwrap();
            }
            assert!(p.letting_go.load(Relaxed) <= MAX_LET_GO_QUEUED);
            guard.check(|| "no trimmed file came to the prefault thread".into());
        }
        drop(log);
        let spares = || {
            std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| crate::log::file::is_spare_file_name(n))
                .collect::<Vec<_>>()
        };
        // The last trimmed files go once the epoch and then the thread let
        // them go: this thread's pins move the epoch on.
        guard.wait(
            || {
                crate::sync::epoch::pin().flush();
                spares().is_empty()
            },
            || format!("spare names left behind: {:?}", spares()),
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A durable log, for one process (`open`) or shared by processes
    /// (`join`), that rolls has its next segment file made ahead on the
    /// prefault thread, without a name, and the roll names it (counted by
    /// the pool); nothing of it is ever in the
    /// directory under another name, and a log dropped with one made
    /// leaves nothing behind.
    #[test]
    fn a_durable_log_that_rolls_gets_its_next_file_made_ahead_without_a_name() {
        for shared in [false, true] {
            let dir = std::env::temp_dir().join(format!("rill-prefault-ahead-{}-{shared}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let durable = DurableLog::new(&dir);
            let sharing = if shared { crate::log::Sharing::Processes } else { crate::log::Sharing::Exclusive };
            let (log, _) = Log::open_in(&config(), 0, &durable, sharing).unwrap();
            let body = [7u8; RECORD];
            let record = Record::new(&body);
            let guard = HangGuard::new();
            let mut named = 0;
            while named < 3 {
                let base = newest(&log).base();
                while newest(&log).base() == base {
                    log.append(&record).unwrap();
                }
                named = log.shared.pool.named_ahead();
                assert_eq!(other_names(&dir), Vec::<String>::new(), "shared: {shared}");
                if log.shared.pool.no_ahead_files() {
                    eprintln!("{}: no files without a name here; checked that rolls still make files", dir.display());
                    break;
                }
                guard.check(|| format!("shared: {shared}: no roll named a file made ahead"));
                if named >= 3 {
                    // Done; an exclusive log may have begun to recycle, and
                    // then asks for no more.
                    break;
                }
                // Each roll asks for the next: wait for it, so that the
                // roll after it finds it.
                guard.wait(
                    || log.shared.pool.has_ahead_file() || log.shared.pool.no_ahead_files(),
                    || {
                        format!(
                            "shared: {shared}: no file was made ahead ({named} named, recycling {}, {:?})",
                            log.shared.pool.is_recycling(),
                            log.stats()
                        )
                    },
                );
            }
            assert_eq!(other_names(&dir), Vec::<String>::new());
            let segments = log.stats().segments;
            drop(log);
            let files = std::fs::read_dir(&dir)
                .unwrap()
                .filter(|e| e.as_ref().unwrap().file_name().to_str().unwrap().ends_with(".seg"))
                .count();
            assert!(files <= segments, "shared: {shared}: {files} segment files for {segments} segments");
            assert_eq!(other_names(&dir), Vec::<String>::new());
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    #[test]
    fn a_new_segment_file_is_faulted_in_ahead_of_its_publisher() {
        let dir = std::env::temp_dir().join(format!("rill-prefault-file-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (log, _) = Log::open(&config(), 0, &DurableLog::new(&dir)).unwrap();
        let body = [7u8; RECORD];
        let record = Record::new(&body);
        while newest(&log).used_bytes() < 2 * STEP {
            log.append(&record).unwrap();
        }
        let seg = newest(&log);
        let asked = seg.ahead().expect("a new file is faulted ahead").asked.load(Relaxed);
        assert!(asked > seg.used_bytes() && asked <= seg.used_bytes() + AHEAD);
        served(&seg);
        drop((seg, log));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
