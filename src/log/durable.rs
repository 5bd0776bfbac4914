//! Durable logs: the fsync policy, the segment files of a partition, and
//! group commit.
//!
//! Why it is long: a third of it is the essay below, and the rest is one
//! mechanism, the sync rounds (group commit, gathering, the completion
//! marker) under one lock and one leader flag.
//!
//! A durable log is the same lock-free log over different storage: its
//! segments are mapped files (`file/`), each record carries a checksum
//! frame, and recovery (`recovery.rs`) rebuilds the log from the files when
//! it is opened. This file holds what happens between the page cache and the
//! disk.
//!
//! # What is on disk when
//!
//! A publisher's record is in the page cache the moment it is committed (the
//! map is shared with the file): a crash of the *process* loses nothing that
//! was committed. What reaches the *disk* is decided by [`Fsync`]:
//!
//! * `Never`: the kernel writes pages back when it likes.
//! * `Interval(d)`: the broker calls [`Log::sync`](super::Log::sync) every `d`;
//!   a machine crash loses the records after the start of the last completed
//!   round: about the last `d` plus one round's write-back, and more when
//!   publishers write faster than the disk (a round then outlasts `d`).
//! * `Always`: `append` and `append_batch` return only once their records are
//!   on disk, through group commit (below).
//!
//! A sync round makes a *prefix* of the log durable: it finds the committed
//! prefix (every offset below it committed), flushes the byte ranges that
//! prefix added since the last round (`msync(MS_SYNC)` of those pages, a data
//! sync of that range of the file), and, for each sealed segment the prefix
//! now covers entirely (and each one sealed after an earlier prefix covered
//! it: see "The completion marker"), writes the segment's *completion*
//! fields into its header and flushes that page (data first, then the
//! marker: a marker on disk means the records it counts are too). Newly
//! created segment files are made to survive a machine crash by an fsync of
//! the directory in the next round, before any record in them is reported
//! durable.
//!
//! Durability is a prefix: a record is durable only once every record before
//! it is. That is what keeps offsets dense after a crash (recovery keeps the
//! records before the first missing one), and it is why an `Always` publisher
//! may wait for a slower one that reserved an earlier offset.
//!
//! # The completion marker
//!
//! A segment file's completion fields (`file/format.rs`) are what make damage in it
//! damage: recovery takes a bad record in a file without them for a torn
//! tail and cuts the partition there, silently (`recovery.rs`). So every
//! sealed segment must get them, under every policy. A segment goes through
//! four states on the way:
//!
//! 1. *Open*: publishers reserve and commit records in it.
//! 2. *Full*: a reservation did not fit; its publisher is the sealer
//!    (`segment.rs`), which has not stored the final count yet.
//! 3. *Sealed*: the sealer wrote the end mark and stored the count
//!    (`Release`), then installed the next segment in the directory.
//! 4. *Marked*: a sync round wrote the completion fields (and flushed them,
//!    after the records they count, unless the policy is `Never`).
//!
//! Publishers move a segment from 1 to 2 and its sealer from 2 to 3; only a
//! sync round moves it from 3 to 4: the leader of an `Always` round,
//! [`Log::sync`](super::Log::sync) (through
//! [`Log::flusher_round`](super::Log::flusher_round), which the broker's
//! flusher runs every interval under `Interval` and `Never`), or the final
//! round of a clean close. Rounds run one at a time (the leader
//! flag), and `marked_below`, kept under the lock, says how far they got:
//! every segment whose base is below it is marked.
//!
//! *Given-up offsets.* In a log shared by processes a slot can be given up
//! (`ABANDONED`, see "An abandoned reservation" in `segment.rs`): a round's
//! walk passes over it as over a committed record with nothing to flush,
//! once it knows the slot lies before the segment's end
//! (`Segment::passable`), and notes it on the segment. Such a segment is
//! counted as marked (`marked_below` moves past it) but gets no completion
//! fields: a complete file must hold every record it counts, and this one
//! has a hole, which recovery fills when it scans it as incomplete.
//!
//! **The rule: a round starts at the oldest segment that may lack its
//! marker, not at the durable watermark.** Its snapshot of the directory
//! begins at `min(watermark, marked_below)`. A sealed segment wholly behind
//! the watermark whose marker is missing gets its end mark flushed and then
//! its marker (its records went to disk in the rounds that moved the
//! watermark past them); from the watermark on, the round flushes and marks
//! as described above.
//!
//! *The race it survives.* The committed prefix may end exactly at the end
//! of a segment in state 2: every record of it committed and covered, its
//! count not stored yet. The round raises the watermark to that segment's
//! end, which is the next segment's base, and cannot mark it (it has no
//! count). A round that started at the watermark then never looked at it
//! again, and it stayed unmarked for good. That was no rare interleaving:
//! a lone `Always` publisher's append is covered by its own round before
//! its next append finds the segment full and seals it, so every segment
//! of an `Always` session ended that way (issue 40, item 2: 21 sealed
//! files, none marked), and an `Interval` round falling in that gap did the
//! same. Starting from `marked_below`, every later round looks at the
//! segment again until it is sealed, and marks it.
//!
//! What each policy guarantees from this:
//!
//! * `Always`: once an append whose records lie in a later segment returns,
//!   every segment before that one is marked. The round that covered the
//!   append found the later segment in a directory it loaded with `Acquire`
//!   (L2 in `dir.rs`), which the sealer published after its seal, so the
//!   round sees the earlier segment sealed; and its snapshot begins at or
//!   before that segment, which is unmarked until some round marks it.
//! * `Interval`: the first round that sees the seal marks the segment: the
//!   flusher's next one, at most one interval (and one round) after the seal.
//! * `Never`: the same, through the flusher's *marking round*: a sync round
//!   that flushes nothing (`Files::flush` is off), run every interval like
//!   `Interval`'s. It finds the committed prefix and writes the markers of
//!   the sealed segments that prefix covers, in the page cache only. A
//!   *process* crash keeps the page cache, so the markers and the records
//!   they count are both in the files recovery reads: damage in a segment
//!   sealed an interval before the kill is `Corrupt`, as under the other
//!   policies. A *machine* crash may have written a marker back and not all
//!   of its records' pages (the kernel writes pages back in any order):
//!   recovery then reports `Corrupt` for what was a crash, and `repair` is
//!   the way on. That is the price of `Never`, which promises nothing after
//!   a machine crash; before the marking round it was silent truncation of
//!   real damage after a mere kill, which is worse (issue 40, item 2).
//!
//! The marking round adds no hand-over of its own: it is a round like
//! `Interval`'s, run by the same flusher thread through the same leader
//! flag and lock, reading the seal as every round does (above). The loom
//! model `the_never_flushers_round_marks_a_segment_sealed_after_the_last_one`
//! runs it against the seal and roll of a publisher.
//!
//! A round's snapshot therefore holds the segments sealed since the last
//! round besides those from the watermark on: one more segment, as a rule.
//! Two loom models in `loom-tests/tests/log.rs` run it on the real code: a
//! flusher round racing the seal and roll
//! (`a_segment_sealed_after_its_round_is_marked_by_the_next`), and the same
//! with an `Always` publisher
//! (`an_always_append_into_a_later_segment_returns_with_the_earlier_ones_marked`).
//! The rule adds no fence: a round reads the seal with `Acquire` and, for a
//! segment it reached through the directory, after L2; the rest is under the
//! lock and the leader flag.
//!
//! # Group commit
//!
//! Concurrent `Always` publishers share fsyncs. The state is a *durable
//! watermark* (every offset below it is on disk), a *leader* flag and the
//! round counter, under one `Mutex` with a `Condvar`:
//!
//! 1. A publisher commits its record(s) as usual (lock-free), then locks the
//!    state. If the watermark is already past its last offset, it returns.
//! 2. If no leader is active, it becomes the leader: sets the flag, may
//!    gather (below), *unlocks*, runs a sync round from the watermark (scan,
//!    flush), locks again, raises the watermark to the round's prefix, clears
//!    the flag, counts the round, *unlocks* and wakes every waiter
//!    (`notify_all`).
//! 3. Otherwise it waits on the condvar; woken, it goes back to 1.
//!
//! The wake-up comes after the unlock so that the woken publishers do not
//! find the lock still held by the leader and go back to sleep on it: on a
//! machine with fewer cores than publishers every such hop is a scheduling
//! round trip between one round and the next.
//!
//! One round covers every record committed before its scan, so the
//! publishers that arrived during the previous round's fsync all ride on the
//! next one: N concurrent publishers cost about two fsyncs, not N.
//!
//! ## Gathering
//!
//! That alone carries fewer publishers per round than there are when the
//! disk is fast. A round releases its publishers all at once; the first to
//! come back with its next record finds no leader and starts the next round
//! at once, before the others (woken from the condvar, on a machine with
//! fewer cores than publishers) have committed theirs. They then wait for the
//! round after: on a quiet, fast disk four `Always` publishers rode about
//! two to a round, and published only about twice what one does (rill-bench
//! `--suite persist`: `persist-always-4` against `persist-always`).
//!
//! So a publisher's leader may first *gather*. The state keeps the
//! publishers waiting for durability (`waiting`: in `wait_durable`, their
//! records not yet covered by a round; each is kept as the end of its
//! records, so that a round's end can tell them apart), and at the end of
//! every round keeps their number as `expected`: each of them is either
//! released by the round, and comes back with its next record if it keeps
//! publishing, or still waits. The round's end then removes from `waiting`
//! those it released, at once: a released publisher that has not run yet
//! must not count as present (if `waiting` were a count each publisher
//! lowered only when it next ran, the round's own leader, back first with
//! its next record, would find `expected` reached by publishers still
//! asleep and start the next round without them: more rounds for the same
//! appends; `durable_tests.rs` prints the rounds its group-commit test made).
//! A leader that finds fewer than `expected` publishers waiting sleeps (on
//! `round_done`, timed) until `waiting` reaches `expected` (the arrival that
//! makes it so ends the wait) or until half the smoothed duration of a
//! syncing round has passed, and then scans. It keeps the leader flag
//! meanwhile, so arrivals wait for its round, which covers them.
//!
//! *The last arrival runs the round.* The arrival that completes the company
//! does not wake the sleeping leader to run the round (a wake-up, a trip
//! through the scheduler, then the sync): it takes the gathering (under the
//! lock: `gather` set to `None`) and runs the round itself, under the leader
//! flag the leader set, which stays set until that round's end. The leader
//! sleeps on until that end wakes it with everybody else, its records covered
//! (they were committed before it came). If its bound passes first, it finds
//! its gathering taken and waits for the round like any other publisher;
//! only if nobody took the gathering by then does it take it back and run
//! the round itself. Each gathering carries a sequence number, so a leader
//! whose wake-up comes late cannot take a later leader's gathering for its
//! own: exactly one publisher runs each round. The rule's limits:
//!
//! * *Never when alone.* One publisher: `expected` is 1 and the leader is
//!   that publisher, so it never waits (its publish latency is one round, as
//!   before).
//! * *Never unbounded.* The wait ends at the deadline whatever happens; a
//!   publisher that stopped publishing (or died) costs at most one such wait,
//!   after which the round's end counts it out of `expected`. Nothing waits
//!   for gathering to be correct: a record is covered by the round whose scan
//!   sees it committed, gathered or not.
//! * *Why half a round.* With rounds of time S carrying k of n publishers,
//!   the rate is k/S; waiting w to carry all n gives n/(S + w), a gain while
//!   w < S (n/k - 1): while w < S for the k that rounds carry without
//!   gathering (`rill-bench` scenario persist-always-4 measures it), and up
//!   to the bound S/2 while k < 2n/3. The wait usually ends
//!   well before the bound, when the last expected publisher arrives; the
//!   bound is what a missing one costs. It also bounds latency: a gathered
//!   publisher is acknowledged at most w + S <= 1.5 S after its leader began
//!   waiting, within the 1.5 fsyncs of issue 11's latency goal, where one
//!   that just missed a round waits up to 2 S without gathering. A delay
//!   bounded in time and skipped below a count of company is what databases
//!   call a commit delay; here the bound and the count both come from what
//!   the last rounds measured.
//! * *A sleep, not a spin.* The leader sleeps on the condvar (a timed wait)
//!   rather than spinning: the publishers it waits for need the CPU, and on
//!   a machine with fewer cores than publishers a spinning leader would take
//!   it from them.
//! * [`Log::sync`](super::Log::sync) (the interval flusher) does not gather:
//!   no publisher waits on it.
//!
//! ## Races survived
//!
//! * *A hole before me.* A leader's prefix stops at the first uncommitted
//!   offset, which may belong to a publisher still copying its record. The
//!   leader's own offset is then not covered; it returns to 1 and waits.
//!   It is woken for sure: the owner of the hole is an `Always` publisher
//!   too, and after its commit it comes through step 1, where it either leads
//!   a round itself (its scan sees both records) or waits for the active one
//!   and then leads. Every round's end changes the state under the lock and
//!   then calls `notify_all`; a waiter checks the watermark, the leader flag
//!   and its gathering under the same lock before it sleeps, and the
//!   condvar releases the lock only once the waiter is registered, so no
//!   round's end can slip between its check and its wait (the lost-wakeup
//!   race).
//! * *A failing fsync.* The publisher that ran the round (the leader, or
//!   the last arrival in its place) gets the error, clears the flag, wakes
//!   everybody and returns the error ([`Error::Io`]) to its publisher. A
//!   waiter whose records are not covered leads the next round and gets its
//!   own error or success: an I/O error reaches the publishers whose records
//!   it concerns, and the watermark never moves past an unsynced record.
//! * *The broker's interval flusher* runs the same rounds through
//!   [`Log::sync`](super::Log::sync), so it never flushes concurrently with
//!   a leader.
//!
//! ## Why a mutex and a condvar
//!
//! This is off the in-memory path: only durable logs come here, and only
//! after their records are committed. Every round costs an fsync, a trip to
//! the disk that outlasts by far the few loads and stores the lock is held
//! for (`rill-bench --suite persist` measures the rounds of each policy
//! beside the disk's own fsync), so the lock is never what limits the rate;
//! what matters is that waiters sleep rather than spin through a disk's
//! round trip, and that the hand-off has the simple, checkable shape above. A lock-free watermark would need its own
//! parking protocol for the same result.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::file::{self, Files};
use super::segment::Segment;
use crate::error::{Error, Result};
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{Arc, Condvar, Mutex, MutexGuard};

/// The retained segments of a log from the one holding a given offset on
/// (a snapshot, taken by the log's directory; see `dir.rs`).
pub(crate) type SegmentsFrom<'a> = &'a dyn Fn(u64) -> Vec<Arc<Segment>>;

/// When a durable log's records reach stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fsync {
    /// The operating system decides: a process crash loses nothing, a machine
    /// crash may lose whatever the kernel had not written back.
    Never,
    /// The owner (the broker) calls [`Log::sync`](super::Log::sync) this often:
    /// a machine crash loses about this much of the newest records, plus
    /// what was written during the last round (more if the disk falls behind).
    Interval(Duration),
    /// `append` returns once the record is on stable storage; concurrent
    /// publishers share one fsync (group commit).
    Always,
}

/// Default sync interval of [`Fsync::Interval`].
pub const DEFAULT_FSYNC_INTERVAL: Duration = Duration::from_millis(100);

impl Default for Fsync {
    fn default() -> Self {
        Fsync::Interval(DEFAULT_FSYNC_INTERVAL)
    }
}

/// Where a durable partition lives and how it is kept: one directory per
/// partition, holding its segment files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurableLog {
    /// The partition's directory (created if absent).
    pub dir: PathBuf,
    /// When records reach stable storage.
    pub fsync: Fsync,
    /// On damage inside a sealed segment, truncate the partition there (and
    /// report it) instead of failing with [`Error::Corrupt`].
    pub repair: bool,
}

impl DurableLog {
    /// A partition in `dir` with the default policy and no repair.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::path::Path;
    /// use rill::log::{DurableLog, Fsync};
    ///
    /// let durable = DurableLog::new("/var/lib/app/orders/0");
    /// assert_eq!(durable.dir, Path::new("/var/lib/app/orders/0"));
    /// assert_eq!((durable.fsync, durable.repair), (Fsync::default(), false));
    /// // Other choices with struct update syntax:
    /// let strict = DurableLog { fsync: Fsync::Always, ..DurableLog::new("/var/lib/app/orders/0") };
    /// assert_eq!(strict.fsync, Fsync::Always);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DurableLog { dir: dir.into(), fsync: Fsync::default(), repair: false }
    }
}

/// Where recovery cut a partition, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The file holding the first record that was not kept.
    pub file: PathBuf,
    /// Byte offset in that file where it starts.
    pub offset: u64,
    /// What was wrong there (a torn record, a checksum mismatch, ...).
    pub reason: String,
}

/// What opening a durable partition found and did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecoveryReport {
    /// Segment files holding the kept records.
    pub segments: usize,
    /// Records kept, the skip records among them included (every offset
    /// from `first_offset` to `end_offset`).
    pub records: u64,
    /// Skip records among `records`: offsets a crash left without a
    /// complete record between complete ones (holes), which readers pass
    /// over. Counts those recovery wrote now and those an earlier recovery
    /// wrote.
    pub skipped: u64,
    /// Compacted-away offsets among `records`: offsets a compaction pass
    /// removed, which a rebuilt segment file says it covers with one
    /// compacted-away record per run (see "Compacted segments" in
    /// `recovery.rs`), and readers pass over. Records readers are handed:
    /// `records - skipped - compacted`.
    pub compacted: u64,
    /// Oldest offset kept (the next one to append if nothing was kept).
    pub first_offset: u64,
    /// One past the newest offset kept: where appends continue.
    pub end_offset: u64,
    /// Intact records dropped because they came after the cut (offsets stay
    /// dense, so nothing after a damaged or missing record is kept): in the
    /// files after it, and in its own file those a scan finds past the
    /// damage (within the reach of a resync past a hole, `recovery.rs`).
    pub truncated_records: u64,
    /// Bytes dropped at and after the cut (torn or damaged data, and the
    /// records counted in `truncated_records`).
    pub truncated_bytes: u64,
    /// Where the partition was cut, if it was: a torn tail of the newest
    /// data, or (with `repaired`) damage in a sealed segment.
    pub truncated_at: Option<Damage>,
    /// The cut was in a sealed segment and made only because `repair` was set.
    pub repaired: bool,
}

/// The group-commit state of a durable log (see the module docs).
#[derive(Debug)]
pub(crate) struct Durability {
    state: Mutex<SyncState>,
    /// Signalled at the end of every round, once its bookkeeping is done and
    /// the lock released. A gathering leader sleeps on it too (timed): the
    /// round the last expected publisher runs in its place ends with it.
    round_done: Condvar,
    /// Sync rounds that wrote something (each one data sync per file it
    /// touched); rounds that found nothing new to sync are not counted.
    pub(crate) rounds: AtomicU64,
    /// Appends that waited for durability (`Always`).
    pub(crate) waits: AtomicU64,
    /// Rounds whose leader waited for publishers before its sync (gathering).
    pub(crate) gathers: AtomicU64,
    /// Of those, the waits that ended at their bound, short of company.
    pub(crate) gather_timeouts: AtomicU64,
    /// Of those, the rounds that the last expected publisher ran itself,
    /// instead of waking the gathering leader (see "Gathering").
    pub(crate) handoffs: AtomicU64,
}

#[derive(Debug)]
struct SyncState {
    /// Every offset below this is on stable storage.
    durable: u64,
    /// A round is running (its leader works without the lock), or its leader
    /// is gathering.
    leader: bool,
    /// Every segment whose base is below this has its completion marker;
    /// a round scans from here if the watermark is further on (see "The
    /// completion marker"). Moved only at the end of a round.
    marked_below: u64,
    /// The ends (one past the last offset) of the records of the publishers
    /// inside `wait_durable` that no round has covered yet, one entry per
    /// publisher (an end is a publisher's own: offsets are not shared). A
    /// round's end removes those it covered, so a publisher it released
    /// stops counting at once, not when it next runs.
    waiting: Vec<u64>,
    /// The publishers waiting when the last round ended (those it released
    /// and those still waiting): the company the next round can expect.
    expected: usize,
    /// While a leader gathers: which gathering, and the `waiting` count that
    /// completes it. Taken (set to `None`) by the arrival that completes it,
    /// which then runs the round, or by the leader when its wait ends.
    gather: Option<Gather>,
    /// Numbers the gatherings, so that a leader whose round was taken tells
    /// its own gathering from a later one.
    gather_seq: u64,
    /// Smoothed duration of a round that synced something, in nanoseconds;
    /// 0 until one has.
    round_ns: u64,
}

impl SyncState {
    /// A round's bookkeeping of its company, once the watermark is raised.
    fn end_round(&mut self) {
        // Everybody waiting now is either released by this round (and comes
        // back with its next record if it keeps publishing) or still waits:
        // the next round's company. Those released stop counting as waiting
        // now, not when they next run.
        self.expected = self.waiting.len();
        let durable = self.durable;
        self.waiting.retain(|&e| e > durable);
    }

    /// Removes the publisher whose records end at `end` from `waiting` (it
    /// leaves with an error, uncovered).
    fn leave(&mut self, end: u64) {
        if let Some(i) = self.waiting.iter().position(|&e| e == end) {
            self.waiting.swap_remove(i);
        }
    }
}

/// A leader's gathering in progress (see "Gathering" in the module docs).
#[derive(Debug, Clone, Copy)]
struct Gather {
    seq: u64,
    /// The `waiting` count that completes the company.
    want: usize,
}

/// A gathering leader waits at most the smoothed round time divided by this
/// (see "Gathering" in the module docs).
const GATHER_FRACTION: u64 = 2;

impl Durability {
    /// The state of a log whose records below `durable` are already
    /// durable and whose sealed segments with a base below `marked_below`
    /// are already marked complete (a reopened log's newest segment may be
    /// a resumed file holding durable records: see "Resuming the last
    /// file" in `recovery.rs`).
    pub(crate) fn new(durable: u64, marked_below: u64) -> Self {
        Durability {
            state: Mutex::new(SyncState {
                durable,
                leader: false,
                marked_below,
                waiting: Vec::new(),
                expected: 0,
                gather: None,
                gather_seq: 0,
                round_ns: 0,
            }),
            round_done: Condvar::new(),
            rounds: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            gathers: AtomicU64::new(0),
            gather_timeouts: AtomicU64::new(0),
            handoffs: AtomicU64::new(0),
        }
    }

    /// Returns once every offset below `end` is durable (group commit, steps
    /// 1 to 3 of the module docs).
    pub(crate) fn wait_durable(&self, files: &Files, segments: SegmentsFrom<'_>, end: u64) -> Result<()> {
        // Relaxed: a statistic.
        self.waits.fetch_add(1, Ordering::Relaxed);
        let mut st = self.state.lock();
        if st.durable >= end {
            return Ok(());
        }
        st.waiting.push(end);
        // This arrival completes a gathering leader's company: it runs that
        // leader's round itself (the leader flag stays set, so nobody else
        // starts one), and the leader, asleep, is woken by the round's end
        // with everybody else. One wake-up less per round.
        let mut run = false;
        if st.gather.is_some_and(|g| st.waiting.len() >= g.want) {
            st.gather = None;
            // Relaxed: a statistic.
            self.handoffs.fetch_add(1, Ordering::Relaxed);
            run = true;
        }
        loop {
            // (With `run`, the watermark is below `end`: checked above, and
            // it moves only at a round's end, which the leader flag holds off.)
            if !run && st.durable >= end {
                // The round that covered us removed us from `waiting`.
                return Ok(());
            }
            if !run {
                if st.leader {
                    st = self.round_done.wait(st);
                    continue;
                }
                st.leader = true;
                let (guard, mine) = self.gather(st);
                st = guard;
                if !mine {
                    // The last expected arrival took the round; its end wakes us.
                    continue;
                }
            }
            run = false;
            let before = st.durable;
            let (mut guard, result) = self.run_round(st, files, segments);
            let covered = result.is_err() || guard.durable >= end;
            if result.is_err() {
                guard.leave(end);
            }
            drop(guard);
            // After the lock is released: woken waiters do not find it held.
            self.round_done.notify_all();
            if covered {
                return result;
            }
            st = self.state.lock();
            if st.durable == before || st.leader {
                // Our records sit behind one still being written: its
                // publisher comes through here after its commit and leads (or
                // wakes us from) the round that covers both.
                st = self.round_done.wait(st);
            }
        }
    }

    /// The base below which every segment is marked complete (see "The
    /// completion marker" in the module docs).
    pub(crate) fn marked_below(&self) -> u64 {
        self.state.lock().marked_below
    }

    /// The durable watermark: every offset below it is on stable storage
    /// (under `Never`: every offset below it was covered by a round).
    pub(crate) fn durable_end(&self) -> u64 {
        self.state.lock().durable
    }

    /// Sets what the last round left behind, as if it had ended with
    /// `publishers` waiting and rounds took `round` (for the gathering tests).
    #[cfg(test)]
    pub(crate) fn expect_company(&self, publishers: usize, round: Duration) {
        let mut st = self.state.lock();
        st.expected = publishers;
        st.round_ns = u64::try_from(round.as_nanos()).unwrap_or(u64::MAX);
    }

    /// Runs one round (waiting for a running one to finish first), for
    /// [`Log::sync`](super::Log::sync). It does not gather: no publisher
    /// waits on it.
    pub(crate) fn sync(&self, files: &Files, segments: SegmentsFrom<'_>) -> Result<()> {
        let mut st = self.state.lock();
        while st.leader {
            st = self.round_done.wait(st);
        }
        st.leader = true;
        let (st, result) = self.run_round(st, files, segments);
        drop(st);
        self.round_done.notify_all();
        result
    }

    /// Runs one round: called with the lock held and the leader flag set by
    /// the caller; returns with the lock held again, the flag cleared and
    /// the round's outcome recorded. The caller wakes the waiters
    /// (`round_done.notify_all()`) once it has released the lock.
    fn run_round<'a>(
        &'a self,
        st: MutexGuard<'a, SyncState>,
        files: &Files,
        segments: SegmentsFrom<'_>,
    ) -> (MutexGuard<'a, SyncState>, Result<()>) {
        debug_assert!(st.leader && st.gather.is_none());
        let (from, marked_below) = (st.durable, st.marked_below);
        drop(st);
        let started = Instant::now();
        let outcome = round(files, segments, from, marked_below);
        let took = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let mut st = self.state.lock();
        st.leader = false;
        let result = match outcome {
            Ok((durable, marked)) => {
                if durable > from || marked > marked_below {
                    // Relaxed: a statistic.
                    self.rounds.fetch_add(1, Ordering::Relaxed);
                    // A round that found nothing to sync says nothing about
                    // the disk; one that did is mostly its data sync.
                    st.round_ns = if st.round_ns == 0 { took } else { st.round_ns - st.round_ns / 8 + took / 8 };
                }
                st.durable = st.durable.max(durable);
                st.marked_below = st.marked_below.max(marked);
                Ok(())
            }
            Err(e) => Err(e),
        };
        st.end_round();
        (st, result)
    }

    /// Gathering (see the module docs): called by a publisher's leader with
    /// the leader flag set; waits until the publishers the last round left
    /// behind are here, or a fraction of a round's time has passed. Returns
    /// whether the caller runs the round (false: the arrival that completed
    /// the company took it, and the leader flag is now that round's).
    fn gather<'a>(&'a self, mut st: MutexGuard<'a, SyncState>) -> (MutexGuard<'a, SyncState>, bool) {
        let want = st.expected;
        if want <= 1 || st.waiting.len() >= want || st.round_ns == 0 {
            // Alone, everybody here already, or no round time to bound a wait by.
            return (st, true);
        }
        // Relaxed: a statistic.
        self.gathers.fetch_add(1, Ordering::Relaxed);
        let deadline = Instant::now() + Duration::from_nanos(st.round_ns / GATHER_FRACTION);
        let seq = st.gather_seq;
        st.gather_seq = seq.wrapping_add(1);
        st.gather = Some(Gather { seq, want });
        // The arrival that completes the company takes the gathering under
        // the lock and runs the round; its end notifies `round_done` after
        // its state change, which the condvar's wait cannot miss (the check
        // below and the sleep are under the same lock). The deadline bounds
        // the wait even if a publisher stopped publishing (or died) after
        // the last round. `seq` tells a later leader's gathering from ours.
        loop {
            if st.gather.is_none_or(|g| g.seq != seq) {
                return (st, false);
            }
            let now = Instant::now();
            if now >= deadline {
                st.gather = None;
                // Relaxed: a statistic.
                self.gather_timeouts.fetch_add(1, Ordering::Relaxed);
                return (st, true);
            }
            st = self.round_done.wait_timeout(st, deadline - now);
        }
    }
}

/// One sync round from the durable watermark `from`: flushes what the
/// committed prefix added since, marks the sealed segments it completed (and
/// those sealed behind the watermark since the last round: see "The
/// completion marker"), and returns the new watermark and marker position.
fn round(files: &Files, segments: SegmentsFrom<'_>, from: u64, mut marked_below: u64) -> Result<(u64, u64)> {
    // From the oldest segment that may still lack its marker, which may lie
    // wholly behind the watermark.
    let segs = segments(from.min(marked_below));
    // New files first: a record is not durable while its file's name is not.
    let flush = files.flush;
    if flush {
        files.sync_dir_if_dirty()?;
    }
    let mut end = from.max(segs.first().map_or(from, |s| s.base()));
    for seg in &segs {
        if end < seg.base() {
            break;
        }
        let file = seg.file().expect("a durable log's segments are files");
        if let Some(count) = seg.sealed_count()
            && seg.base() + count <= from
        {
            // Behind the watermark: its records went to disk in the rounds
            // that moved the watermark past them, but it was sealed only
            // after the last of those (or its marker was not written yet for
            // another reason): only its end mark and marker are due.
            if seg.base() >= marked_below && seg.has_holes() {
                // Abandoned slots: no marker (see `Segment::has_holes`).
                marked_below = seg.base() + 1;
            } else if seg.base() >= marked_below {
                let used = used_bytes(seg, count);
                if flush {
                    file.flush_region(used, (used + file::FRAME_LEN as u64).min(seg.capacity()))?;
                }
                file.mark_complete(count, used, flush)?;
                marked_below = seg.base() + 1;
            }
            continue;
        }
        let mut index = end - seg.base();
        let start = match seg.committed(index) {
            Some(pos) => pos - file::FRAME_LEN as u64,
            None => 0,
        };
        let mut stop = start;
        loop {
            if let Some(pos) = seg.committed(index) {
                stop = seg.record_end(index, pos);
            } else if seg.passable(index) {
                // Given up (a log shared by processes; see "An abandoned
                // reservation" in `segment.rs`): no record to flush, and
                // the prefix goes on past it.
                seg.note_hole();
            } else {
                break;
            }
            index += 1;
        }
        // Read once: the end mark is flushed exactly when the marker is
        // written. A seal that comes after this read is the next round's
        // (the segment is then behind the watermark, above).
        let sealed = seg.sealed_count();
        if flush {
            // A segment the prefix now covers whole ends with its end mark
            // (a recycled file's; see "Recycling" in `file/mod.rs`): flushed with its records.
            let through = match sealed {
                Some(count) if index >= count => (stop + file::FRAME_LEN as u64).min(seg.capacity()),
                _ => stop,
            };
            files.injected_sync_failure(&files.dir.join(file::segment_file_name(seg.base())))?;
            file.flush_region(start, through)?;
        }
        end = seg.base() + index;
        match sealed {
            Some(count) if index >= count => {
                if seg.base() >= marked_below {
                    if !seg.has_holes() {
                        file.mark_complete(count, used_bytes(seg, count), flush)?;
                    }
                    marked_below = seg.base() + 1;
                }
            }
            // The prefix ends inside this segment.
            _ => break,
        }
    }
    Ok((end, marked_below))
}

/// Bytes the first `count` records of a fully committed segment fill.
fn used_bytes(seg: &Segment, count: u64) -> u64 {
    match count.checked_sub(1) {
        None => 0,
        Some(last) => {
            let pos = seg.committed(last).expect("a complete segment's records are committed");
            seg.record_end(last, pos)
        }
    }
}

/// Makes `dir` the directory of a durable partition: creates it if absent;
/// fails with [`Error::Io`] naming it if it cannot be, or is not a directory.
pub(crate) fn prepare_dir(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, &e))?;
    let meta = fs::metadata(dir).map_err(|e| Error::io(dir, &e))?;
    if !meta.is_dir() {
        let e = std::io::Error::from(std::io::ErrorKind::NotADirectory);
        return Err(Error::io(dir, &e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rounds_end_counts_its_company_and_stops_counting_those_it_released() {
        let d = Durability::new(0, 0);
        let mut st = d.state.lock();
        st.waiting.extend([3, 9, 5]);
        st.durable = 5;
        st.end_round();
        // All three are the next round's company; only the one whose records
        // end past the watermark still waits (the others are released, even
        // though they have not run yet).
        assert_eq!(st.expected, 3);
        assert_eq!(st.waiting, vec![9]);
        st.leave(9);
        assert!(st.waiting.is_empty());
    }
}
