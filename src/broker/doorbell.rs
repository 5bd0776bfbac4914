//! The cross-process wake (issue 39): a subscriber idle in one process is
//! woken by a publish in another, without polling and without CPU while
//! it sleeps, and a publish that finds nobody asleep pays no lock and no
//! system call.
//!
//! Inside one process a publisher wakes a partition's listeners itself
//! (`Partition::notify`, `partition/signal.rs`). A publisher in another
//! process cannot: it does not have them. So each broker opened with
//! `Sharing::Processes` runs one *doorbell thread*, which sleeps on a futex
//! word in a file every process maps (`MAP_SHARED`, `FUTEX_WAIT` without
//! `FUTEX_PRIVATE_FLAG`, so the kernel keys the wait by the file's page,
//! not by this process's address space). Woken, it looks at the partitions
//! this process listens to, and for each with a record committed since its
//! last look (a cursor of its own, which follows other processes' rolls)
//! it does what a local publisher would: signals that partition's
//! listeners. It looks for commits, not at the tail: a record reserved but
//! not committed at a look would otherwise count as seen, and the look
//! after its publisher's ring would find nothing new. Two shared words carry the protocol:
//!
//! * the **interest** word of each partition (in `partition.state`, in the
//!   partition's directory): how many brokers have at least one listener on
//!   the partition. A broker raises it when its partition's listener list
//!   stops being empty and lowers it when it empties (under the
//!   partition's list lock, so per broker it moves 0 -> 1 -> 0 in order);
//! * the **bell** word of the directory (in `SHARED`): bit 0, [`ARMED`],
//!   says some doorbell thread may be about to sleep; the other bits are a
//!   sequence number that every ring advances, so a doorbell that armed
//!   before a ring never sleeps on the value it armed.
//!
//! # States, and who moves them
//!
//! The bell is *quiet* (`ARMED` clear) or *armed*.
//!
//! * A **doorbell thread** moves quiet -> armed ([`Bell::arm`]: `fetch_or`)
//!   at the start of every armed round (while a listener of its process
//!   may sleep: see "Arming only while a listener may sleep"), then issues X2 (`fence(SeqCst)`), then
//!   looks at its partitions; only if none has a new commit does it sleep, in
//!   `FUTEX_WAIT` on the exact value it armed (the kernel compares the word
//!   with it under its own lock, and does not sleep if they differ).
//! * A **publisher** in `Processes` mode, after its commit and the local
//!   signal, issues X1 (`fence(SeqCst)`) and loads the partition's
//!   interest. Zero: done (one fence and one load, no system call). Not
//!   zero: it loads the bell; quiet: done. Armed: it moves armed -> quiet
//!   with the sequence advanced (one compare-exchange; a loser finds the
//!   bell changed and is done, someone else rang) and wakes every sleeper
//!   of the word (`FUTEX_WAKE`).
//!
//! Every doorbell of every process sleeps on the one word, so a ring wakes
//! every one asleep armed; each looks at its own partitions and sleeps
//! again if none of them moved.
//!
//! # The race it survives
//!
//! The publisher stores (its commit), then loads (interest, bell); the
//! doorbell stores (`ARMED`), then loads (the slots its cursors are at). That is
//! the store-buffering shape, and it needs a full fence on *both* sides:
//! X1 and X2 are `SeqCst` fences, so one comes first in their total order.
//!
//! * X1 first: the commit precedes X1, so the doorbell's look after X2
//!   finds it committed. It signals the listeners and does not sleep.
//! * X2 first: `ARMED` precedes X2, so the publisher's load after X1 finds
//!   the bell armed (or armed again later, with a newer sequence) and
//!   rings. The doorbell either has not slept yet (the word no longer
//!   holds the value it armed: `FUTEX_WAIT` returns at once) or sleeps and
//!   is woken.
//!
//! The asymmetric fence of `barrier.rs` does not do here: `membarrier`'s
//! private command orders against this process's threads only, and the
//! other side of this race is another process. So X1 is a real fence on
//! every publish to a shared partition, behind the partition's flag
//! (`Partition::cross`), and `Exclusive` publishes keep their path.
//!
//! The same shape, with interest in place of `ARMED`, is the attach: a
//! listener raises interest and then reads the log (its read follows the
//! `fence(SeqCst)` that opens `barrier::heavy`), and a publisher commits,
//! fences (X1) and loads interest, so a record the publisher did not ring
//! for is one the new listener reads itself.
//!
//! `loom-tests/tests/doorbell.rs` runs [`Bell`] and [`Cross::after_commit`]
//! against a real log, with the futex modelled by a mutex and a condition
//! variable (what the kernel does under its hash-bucket lock); with X1 or
//! X2 weakened, `.ci/fence-check` requires it to find the doorbell asleep
//! for ever (a deadlock).
//!
//! # Topics other processes create or delete
//!
//! The directory's topic list (`store/`) is read and written by every
//! process under `topics.lock`. A broker learns that another process
//! changed it through a third shared word, the **change counter**, in the
//! bell's page on a cache line of its own: a creation or deletion bumps it
//! while it still holds `topics.lock` (the change listed), then rings the
//! bell unconditionally ([`Bell::topics_changed`]: `fetch_add` of the
//! counter, then [`Bell::ring_always`], whose `fetch_add` of the bell is
//! X3, a Release, and `FUTEX_WAKE`). Every doorbell thread's look first
//! loads the counter ([`Bell::topic_changes`]); if it moved since the last
//! reread, the doorbell has its broker reread the list (`sync_topics` in
//! `control/topics.rs`), which, under the broker's control lock and
//! `topics.lock`:
//!
//! * joins every listed topic it does not have, as `create_topic` joins one
//!   (its partitions mapped, watched by this doorbell, and every
//!   subscription whose pattern matches it attached, reading it from its
//!   first message: nothing published to it before the join is missed);
//! * lets go of every topic it has that the list no longer names, or names
//!   in another directory (deleted, then created again), as a local delete
//!   does (taken out of the topic map and marked deleted, so its publishers
//!   here get `NoSuchTopic`; subscriptions detached, those that named it
//!   closed; consumers woken), but leaves its files to the deleter.
//!
//! The counter is loaded before the list is read, so a change made during
//! a reread moves it past the value kept and the next round rereads again;
//! a reread that fails (the list could not be read) is logged and waits for
//! the next change rather than spin. A publish by name that misses the
//! topic map rereads the list itself before it reports `NoSuchTopic` (or
//! auto-creates), so a topic another process created is there for it even
//! before this process's doorbell has caught up. Nothing of this touches
//! the publish path of a topic in the map.
//!
//! Why the ring is enough, with no timed fallback: the ring and a
//! doorbell's arm are read-modify-writes of the one bell word, so one of
//! them reads the other. If the arm reads the ring (or a later value), X3
//! and the arm's X2 order the bump before the look, which finds it. If the
//! ring reads the arm, the bell no longer holds the armed value, so the
//! doorbell's `FUTEX_WAIT` returns at once, or the `FUTEX_WAKE` after the
//! ring wakes it, and its next round looks. The counter itself is
//! Relaxed: it orders nothing else (the list is read under `topics.lock`,
//! whose system calls order the files). `loom-tests/tests/doorbell.rs`
//! (`a_topic_change_in_another_process_wakes_the_doorbell`) runs
//! [`Bell::topics_changed`] against [`Bell::round`]; with X3 weakened
//! `.ci/fence-check` requires it to find the doorbell asleep for ever.
//!
//! A deleted topic's files: the deleter renames its directory to a
//! tombstone and removes it (see "Deleting a topic" in `store/mod.rs`)
//! without waiting for the other processes. A process still reading it
//! keeps its segments mapped, and an unlinked file's pages stay valid
//! until the last mapping goes, so its readers finish what they hold and
//! read nothing new; its own threads that make or rename files under the
//! old path (a roll, preparing a segment ahead) find no directory there
//! and fail, as they do against a local delete. One difference from a
//! local delete: until that process's doorbell has reread the list, a
//! publish there to the deleted topic still lands in the mapped segment
//! (read by nobody). One that fails on the missing files (a roll) reports
//! `NoSuchTopic` all the same: an I/O failure of a topic whose directory
//! is gone is its delete (`Topic::publish_failed`).
//!
//! # Members of groups and shared subscriptions
//!
//! The members of a consumer group or shared subscription across processes
//! announce their joins, leaves and releases the same way
//! (`store/membership.rs`, "Announcing changes"): a fourth shared word, the
//! **members' change counter**, on a cache line of its own in the bell's
//! page, is bumped after the change and the bell rung unconditionally
//! ([`Bell::members_changed`]). A doorbell's look loads it
//! ([`Bell::member_changes`]) after the topic list's counter and, if it
//! moved, has its broker ask every local member to look (`MembersWatch`,
//! implemented in `control/groups.rs`); the looks run on the members' own
//! threads. Why the ring is enough is the topic change's argument above;
//! unlike the topic list's counter, this one is a Release bump and an
//! Acquire load, as what it announces is not read under a lock: a look
//! may load the bumped count before its arm read the ring, and must then
//! see the change too. `loom-tests/tests/doorbell.rs`
//! (`a_join_in_another_process_wakes_the_doorbell_and_its_look_sees_it`)
//! runs it, and `.ci/fence-check` requires it to fail with X3 weakened.
//!
//! # Arming only while a listener may sleep
//!
//! A listener that is draining finds a record itself (its idle re-check
//! after F4 reads the log), so a ring for it buys nothing. A doorbell
//! therefore arms only while a listener of a partition it watches *may
//! sleep*: a subscription whose state reads `IDLE`, or a consumer with a
//! thread registered to wait in `poll` or its bell armed
//! (`Waiters::may_sleep`; a consumer has no state word, and is woken after
//! every commit only while it waits). Otherwise it sleeps *disarmed*: on the bell word, with the
//! value it loaded, in `FUTEX_WAIT_BITSET` with its process's nudge bit.
//! A publisher's ring wakes only the doorbells asleep armed (the data bit),
//! so it does not wake it, and a publisher finds `ARMED` clear unless some
//! doorbell armed; a ring of every doorbell (a topic change, a stop: every
//! bit) does wake it, and so does a *nudge*.
//!
//! * The **doorbell**, each round ([`Bell::round_lazy`]): loads the bell
//!   (X5, Relaxed), puts its bell in this process's [`Parking`] list (under
//!   its lock, with the list's length in a count), issues X4
//!   (`fence(SeqCst)`) and loads the states of its listeners. One may
//!   sleep: it takes its bell off the list and runs the armed round above
//!   (arm, X2, look, sleep armed). None: it looks at its stop flag and the
//!   topic list only, then sleeps disarmed on the value X5 loaded, and
//!   takes its bell off the list when it wakes.
//! * A **listener going idle** (`signal::go_idle`): `IDLE`, F4, its
//!   re-check found nothing, then it loads the count. Zero: done (one load).
//!   Not zero: it takes the list (under its lock, the count back to zero)
//!   and nudges each bell on it ([`listener_may_sleep`]): moves the word by
//!   a ring step and wakes the waiters of its process's bit. A listener
//!   *added* to a shared partition does the same, after the fence that
//!   opens `barrier::heavy` (`Partition::add_listener`). A **consumer
//!   about to sleep** does the same once registered and past W2
//!   (`Waiters::wait_notified_until`), and when a poll with its bell armed
//!   (past B1) found nothing (`Consumer::poll`).
//!
//! The race: the listener stores `IDLE` (a consumer: its registration, or
//! its bell's arm) then loads the count; the doorbell
//! stores the count then loads the state. Store buffering again, so F4
//! and X4 are both `SeqCst` fences. If F4 comes first in their order, the
//! doorbell reads `IDLE` and arms, and from its arm on "The race it
//! survives" holds: its look after X2 finds every record committed before
//! it and signals the listener (winning `IDLE -> ACTIVE`), and a publisher
//! of any later one finds the bell armed and rings. If X4 comes first, the
//! listener reads the count and nudges. The nudge comes after the
//! doorbell's X5 load in the word's order (the list's lock orders the
//! disarm, after that load, before the nudger's take), so the word no
//! longer holds the value the doorbell sleeps on: its `FUTEX_WAIT_BITSET`
//! returns at once, or the wake after the move ends it; its next round
//! reads `IDLE` and arms. A nudge keeps `ARMED` as it was, and so that
//! it never hides a ring, a publisher whose exchange failed tries again
//! while the word still reads armed ([`Bell::ring`]).
//!
//! A topic change, and a stop, reach a disarmed doorbell as they reach an
//! armed one. A look after an X5 that read the ring sees the bumped
//! counter (or the stop flag): X5 is `Relaxed`, but X4, the `SeqCst` fence
//! after it, makes it an acquire of what it read (a fence after a load
//! that read a `Release` write synchronizes with that write, as X2 does
//! after the arm), so X3 pairs with X4 here. A ring the load did not read
//! moves the word from the value slept on and wakes every bit.
//!
//! `loom-tests/tests/doorbell.rs` runs it on the real code
//! (`an_idle_listener_arms_its_disarmed_doorbell`: the listener through
//! `signal::go_idle_then`, the doorbell through [`Bell::round_lazy`], a
//! publisher through [`Cross::after_commit`], the futex with its bitsets
//! modelled under a mutex; `an_idle_consumer_arms_its_disarmed_doorbell`,
//! the same with a consumer waiting through `Waiters`;
//! `a_topic_change_wakes_a_disarmed_doorbell`); `.ci/fence-check` requires
//! the first two to find the record stranded with X4 weakened. The second passes with X5 `Relaxed`, as argued above, so
//! X5 has no ordering of its own to check; X4, weakened to `AcqRel`, still
//! acquires, which is all this path asks of it.
//!
//! # A reservation nobody commits
//!
//! A publisher killed between its reservation and its commit leaves a
//! slot that no commit will fill, and the records committed after it wait
//! behind it: a cursor gives such a slot up only at a look made once the
//! abandon bound has passed since it first waited there (see "An
//! abandoned reservation" in `segment.rs`). A listener draining polls
//! itself; one asleep is woken only by its doorbell, whose look walks its
//! own cursor, and which would otherwise sleep until the next publish. So
//! a look at the partitions keeps the earliest moment one of their
//! cursors may give up what it waits on (`Watch::retry_at`), and the armed
//! sleep after it ends then at the latest (`FUTEX_WAIT_BITSET` with an
//! absolute timeout). The next look gives the slot up, finds the records
//! after it and signals the listeners, which pass over it. A timed wake
//! is one more spurious one, which every round already allows for; the
//! disarmed sleep needs none (no listener may sleep there: each polls).
//! Only a wait the cursor still stands in counts (a slow writer that
//! commits late leaves the cursor's recorded wait behind it), and only
//! for a partition with listeners, whose cursor the look walks; the
//! deadline is never sooner than `RETRY_FLOOR` from the look, so a wait
//! the look cannot act on costs a wake now and then, never a spin.
//! `broker::tests::records_after_an_abandoned_reservation_are_delivered_with_nothing_published_after_them`
//! shows it: without the timed sleep the records after the hole wait for
//! the next publish.
//!
//! # What it costs, and what it does not do yet
//!
//! While a listener is draining, a publish in another process costs X1,
//! the interest's load and the bell's, and no system call. A listener that
//! parks while its doorbell is disarmed costs one nudge (a `FUTEX_WAKE`
//! and the doorbell's context switch), and the armed look after it walks
//! the doorbell's cursor over what the listener took meanwhile, signalling
//! it once more (a drain that finds nothing). A process that only
//! publishes never arms, and data rings do not wake its doorbell.
//! `rill-bench --scenario ipc` (its 1 -> 1 and latency runs) measures
//! both; the bell's futex calls are its only ones without
//! `FUTEX_PRIVATE_FLAG`, so counting those and each thread's context
//! switches (`perf` tracepoints `syscalls:sys_enter_futex`,
//! `sched:sched_switch`) attributes them per process and thread.
//!
//! A process whose own subscriber listens to a partition raises its
//! interest too, so its own publishes ring its own doorbell when it is
//! armed: a wasted wake per doorbell round, not per publish (the ring
//! quiets the bell until the doorbell re-arms). Interest is a count, not a
//! set of processes: a broker killed with listeners leaves its count
//! raised until the directory's next first opener resets it (a publisher
//! then loads the bell, and rings only for armed doorbells). Both go with
//! the per-process interest bits and doorbells of the design's process
//! registry (a later step of issue 39).

use std::path::Path;
use std::time::Instant;

#[cfg(not(loom))]
use super::mapped_page::MappedPage;
use crate::error::Result;
#[cfg(loom)]
use crate::sync::Condvar;
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

/// Bit 0 of the bell word: a doorbell thread may be about to sleep.
pub(crate) const ARMED: u32 = 1;
/// What one ring adds to the bell word: the sequence lives above `ARMED`.
const RING_STEP: u32 = 2;

/// First bytes of a shared state file.
#[cfg(not(loom))]
const MAGIC: u64 = u64::from_le_bytes(*b"rillwake");
/// Layout of the shared state files; a process whose rill has another
/// refuses the directory. 2: the bell file's page holds the topic list's
/// change counter too (see "Topics other processes create or delete"); a
/// rill of layout 1 would not bump it, and its topics would stay unseen.
/// 3: and the members' change counter ("Members of groups and shared
/// subscriptions"), which a rill of layout 2 would not bump. 4: every
/// shared partition has a `partition.blockers` file too
/// (`partition/blockers.rs`), which a rill of layout 3 would neither make
/// nor heed.
#[cfg(not(loom))]
const LAYOUT: u32 = 4;
/// Byte offset of the word a file exists for (the bell in `SHARED`, the
/// interest in `partition.state`), on a cache line of its own.
#[cfg(not(loom))]
const WORD_AT: usize = 64;
/// Byte offset, in the bell file, of the topic list's change counter, on a
/// cache line of its own (a ring does not move it, a topic change does).
#[cfg(not(loom))]
const CHANGES_AT: usize = 128;
/// Byte offset, in the bell file, of the members' change counter, on a
/// cache line of its own (see "Members of groups and shared subscriptions").
#[cfg(not(loom))]
const MEMBERS_AT: usize = 192;

/// Name of the directory's bell file (next to `LOCK`).
pub(crate) const BELL_FILE: &str = "SHARED";
/// Name of a partition's state file (in its log's directory).
pub(crate) const PARTITION_STATE_FILE: &str = "partition.state";

/// One page of a file, mapped `MAP_SHARED`: what every process maps of it
/// is the same memory. Under loom, memory of its own (loom has no mapping).
struct Page {
    #[cfg(not(loom))]
    mapped: MappedPage,
    #[cfg(loom)]
    word: AtomicU32,
    #[cfg(loom)]
    changes: AtomicU32,
    #[cfg(loom)]
    members: AtomicU32,
}

impl Page {
    /// Maps `path`. `init` (a first opener, or the creator of a partition:
    /// no other process has it open) makes it afresh, its word 0; otherwise
    /// it must exist with this rill's layout.
    #[cfg(not(loom))]
    fn open(path: &Path, init: bool) -> Result<Page> {
        Ok(Page { mapped: MappedPage::open(path, init, MAGIC, LAYOUT, "shared state file")? })
    }

    #[cfg(loom)]
    fn open(_path: &Path, _init: bool) -> Result<Page> {
        Ok(Page::in_memory())
    }

    /// A page no file backs (loom, and tests of the protocol).
    #[cfg(loom)]
    fn in_memory() -> Page {
        Page { word: AtomicU32::new(0), changes: AtomicU32::new(0), members: AtomicU32::new(0) }
    }

    /// The page's word: the bell or the interest.
    #[inline]
    fn word(&self) -> &AtomicU32 {
        #[cfg(not(loom))]
        {
            self.u32_at(WORD_AT)
        }
        #[cfg(loom)]
        {
            &self.word
        }
    }

    /// The bell file's second word: the topic list's change counter.
    fn changes(&self) -> &AtomicU32 {
        #[cfg(not(loom))]
        {
            self.u32_at(CHANGES_AT)
        }
        #[cfg(loom)]
        {
            &self.changes
        }
    }

    /// The bell file's third word: the members' change counter.
    fn members(&self) -> &AtomicU32 {
        #[cfg(not(loom))]
        {
            self.u32_at(MEMBERS_AT)
        }
        #[cfg(loom)]
        {
            &self.members
        }
    }

    #[cfg(not(loom))]
    #[inline]
    fn u32_at(&self, at: usize) -> &AtomicU32 {
        self.mapped.u32_at(at)
    }
}

/// The directory's bell: the word doorbell threads sleep on (see the
/// module docs). One per broker (each maps the page itself), so its
/// fields outside the page are this broker's.
pub(crate) struct Bell {
    page: Page,
    /// The bit of the futex bitset this process's disarmed doorbells wait
    /// with, and its nudges wake (see "Arming only while a listener may
    /// sleep"): one of bits 1..=31, from the process id, so a nudge seldom
    /// wakes another process's doorbell (and when it does, that doorbell
    /// looks and sleeps again).
    nudge_bit: u32,
    /// This broker's locks on the segment files it maps, one lock file for
    /// the data directory (see `log/file/map_locks.rs`): kept here, beside
    /// the directory's other shared state, for every topic it opens.
    #[cfg(not(loom))]
    maps: crate::sync::Arc<crate::log::file::MapLocks>,
    /// Loom's stand-in for the kernel's futex queue: a wait checks the word
    /// and, if it holds the value, queues its bitset and sleeps under this
    /// lock until a wake whose bitset meets it.
    #[cfg(loom)]
    queue: (Mutex<LoomQueue>, Condvar),
}

/// The waiters of loom's futex: each one's bitset, and whether a wake met it.
#[cfg(loom)]
#[derive(Default)]
struct LoomQueue {
    next: u64,
    waiting: Vec<(u64, u32, bool)>,
}

/// The futex bitset bit a data ring wakes: doorbells asleep armed.
const DATA_BIT: u32 = 1;
/// Every bit: what `FUTEX_WAKE` (a ring of every doorbell) matches.
const ALL_BITS: u32 = u32::MAX;

impl Bell {
    /// Maps the bell of the data directory `root` (`init`: made afresh by
    /// its first opener).
    pub(crate) fn open(root: &Path, init: bool) -> Result<Bell> {
        let page = Page::open(&root.join(BELL_FILE), init)?;
        #[cfg(not(loom))]
        return Ok(Bell::over(page, crate::log::file::MapLocks::open(root)?));
        #[cfg(loom)]
        Ok(Bell::over(page))
    }

    /// This broker's locks on the segment files it maps.
    #[cfg(not(loom))]
    pub(crate) fn maps(&self) -> &crate::sync::Arc<crate::log::file::MapLocks> {
        &self.maps
    }

    /// A bell no file backs, for the loom models.
    #[cfg(loom)]
    pub(crate) fn in_memory() -> Bell {
        Bell::over(Page::in_memory())
    }

    fn over(page: Page, #[cfg(not(loom))] maps: crate::sync::Arc<crate::log::file::MapLocks>) -> Bell {
        Bell {
            page,
            nudge_bit: 2 << (std::process::id() % 31),
            #[cfg(not(loom))]
            maps,
            #[cfg(loom)]
            queue: (Mutex::new(LoomQueue::default()), Condvar::new()),
        }
    }

    /// Quiet -> armed: returns the armed value to sleep on.
    #[inline]
    fn arm(&self) -> u32 {
        // Relaxed: X2, right after, orders it before the doorbell's look.
        self.page.word().fetch_or(ARMED, Ordering::Relaxed) | ARMED
    }

    /// A publisher's half, after X1: rings if a doorbell is armed.
    #[inline]
    fn ring_if_armed(&self) {
        // Relaxed: X1, before it, is what orders this load after the commit.
        let seen = self.page.word().load(Ordering::Relaxed);
        if seen & ARMED != 0 {
            self.ring(seen);
        }
    }

    /// Armed -> quiet with the sequence advanced, then wakes every doorbell
    /// asleep armed.
    #[cold]
    fn ring(&self, mut seen: u32) {
        // Relaxed: the word orders nothing but itself; the wake below is a
        // system call, after it. A failed exchange means the word moved:
        // another ring (which woke the sleepers: the word reads quiet), a
        // re-arm after one (a doorbell that re-armed looks at its partitions
        // after X2 itself), or a nudge, which keeps `ARMED` and wakes no
        // armed doorbell: so while the word still reads armed, try again.
        while let Err(now) = self.page.word().compare_exchange(
            seen,
            (seen & !ARMED).wrapping_add(RING_STEP),
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            if now & ARMED == 0 {
                return;
            }
            seen = now;
        }
        self.wake(DATA_BIT);
    }

    /// Rings whatever the word holds: wakes every doorbell of the
    /// directory, armed or not (a closing broker's own, so that it sees its
    /// stop flag; every broker's, after a topic change).
    pub(crate) fn ring_always(&self) {
        // X3, Release: a doorbell whose arm reads this (or a later value)
        // and then fences (X2), or whose load before a disarmed sleep (X5,
        // then the X4 fence)
        // reads it, sees what the ringer did before, such as
        // `Doorbell::stop`'s flag or a bump of the topic list's change
        // counter (see "Topics other processes create or delete").
        self.page.word().fetch_add(RING_STEP, crate::sync::ordering_or_weakened!("X3", Ordering::Release));
        self.wake(ALL_BITS);
    }

    /// Wakes this process's disarmed doorbells (see "Arming only while a
    /// listener may sleep"): moves the word, so that one between its load
    /// and its `FUTEX_WAIT` does not sleep, then wakes the waiters of this
    /// process's bit.
    fn nudge(&self) {
        // Relaxed: the caller found the doorbell disarmed under `Parking`'s
        // lock, after the doorbell's load of the word (X5): this comes after
        // that load in the word's order, so the word differs from it.
        self.page.word().fetch_add(RING_STEP, Ordering::Relaxed);
        self.wake(self.nudge_bit);
    }

    /// A topic was created or deleted in the directory's list (the caller
    /// holds `topics.lock`): bumps the change counter, then rings every
    /// doorbell of the directory, so that each rereads the list.
    pub(crate) fn topics_changed(&self) {
        // Relaxed: X3, in the ring after it, publishes it to every doorbell
        // that arms after the ring (see "Topics other processes create or
        // delete").
        self.page.changes().fetch_add(1, Ordering::Relaxed);
        self.ring_always();
    }

    /// The topic list's change counter, for a doorbell's look (after its
    /// arm and X2).
    pub(crate) fn topic_changes(&self) -> u32 {
        // Relaxed: X2, before this look, is ordered after the arm that read
        // the ring's X3 (see "Topics other processes create or delete").
        // A load that reads a bump its arm did not read the ring of needs
        // no more: what changed is the list, which the reread reads under
        // `topics.lock`, the `flock` the changer held while it wrote it and
        // bumped (the members' counter, whose change is read without such a
        // lock, is Acquire for that reason).
        self.page.changes().load(Ordering::Relaxed)
    }

    /// A member of a group or shared subscription joined, left, let go of
    /// a partition, or removed a dead member's file (the change made, its
    /// locks let go): bumps the members' change counter, then rings every
    /// doorbell of the directory, so that each has its members look (see
    /// "Members of groups and shared subscriptions").
    pub(crate) fn members_changed(&self) {
        // Release: a look that loads the bumped value (Acquire) sees the
        // change made before it, whether or not its arm read the ring;
        // X3, in the ring after it, makes sure some look loads it.
        self.page.members().fetch_add(1, Ordering::Release);
        self.ring_always();
    }

    /// The members' change counter, for a doorbell's look (after its arm
    /// and X2, or its X5 load and X4).
    pub(crate) fn member_changes(&self) -> u32 {
        // Acquire: pairs with the Release bump in `members_changed`, so a
        // look that sees the count moved sees the change counted (a Relaxed
        // load could read the bump before the doorbell's arm read the
        // ring, and miss the change; the loom model finds that).
        self.page.members().load(Ordering::Acquire)
    }

    /// One doorbell round: arms, fences (X2), and looks (`look` returns
    /// whether anything moved, having signalled whom it concerns); sleeps
    /// only if nothing did, until a ring. Returns whether `look` found
    /// something (false: it slept, and woke for a ring or spuriously).
    pub(crate) fn round(&self, look: impl FnOnce() -> bool, until: impl FnOnce() -> Option<Instant>) -> bool {
        let armed = self.arm();
        // X2, SeqCst fence: orders `ARMED` before the look's loads of the
        // partitions' tails. Pairs with X1 in `Cross::after_commit` (see
        // "The race it survives").
        crate::sync::fence_or_weakened!("X2", Ordering::SeqCst);
        if look() {
            return true;
        }
        self.sleep(armed, DATA_BIT, until());
        false
    }

    /// One round of a doorbell that arms only while a listener of its
    /// process may sleep (see "Arming only while a listener may sleep"):
    /// disarms in `parking`, fences (X4), and asks `may_sleep` whether a
    /// listener may; if one may, an armed [`Bell::round`] with `look(true)`.
    /// Otherwise `look(false)` (the stop flag and the topic list only) and,
    /// if that found nothing, a sleep with the bell as it was, which only
    /// a ring of every doorbell or a nudge ends. Returns what `round` or
    /// `look(false)` returned (false after a disarmed sleep).
    pub(crate) fn round_lazy(
        bell: &crate::sync::Arc<Bell>,
        parking: &Parking,
        may_sleep: impl FnOnce() -> bool,
        look: impl FnOnce(bool) -> bool,
        until: impl FnOnce() -> Option<Instant>,
    ) -> bool {
        // X5, Relaxed: the X4 fence below makes it an acquire of the ring
        // (X3) it read, so a look after it sees what the ringer did before;
        // a ring it did not read moves the word from this value (see
        // "Arming only while a listener may sleep").
        let quiet = bell.page.word().load(Ordering::Relaxed);
        parking.disarm(bell);
        // X4, SeqCst fence: orders the disarm above before the loads of the
        // listeners' states. Pairs with F4 in `signal::go_idle` (and the
        // fence that opens `barrier::heavy` when a listener is added).
        crate::sync::fence_or_weakened!("X4", Ordering::SeqCst);
        if may_sleep() {
            parking.rearm(bell);
            return bell.round(|| look(true), until);
        }
        if look(false) {
            parking.rearm(bell);
            return true;
        }
        bell.sleep(quiet, bell.nudge_bit, None);
        parking.rearm(bell);
        false
    }

    /// The `CLOCK_MONOTONIC` reading at `at` (an `Instant` is one on
    /// Linux), as a futex's absolute timeout.
    #[cfg(not(loom))]
    fn monotonic_at(at: Instant) -> libc::timespec {
        const NANOS: u64 = 1_000_000_000;
        let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: writes the clock's reading into a live timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
        let ahead = at.saturating_duration_since(Instant::now());
        let nanos = now.tv_nsec as u64 + u64::from(ahead.subsec_nanos());
        libc::timespec {
            tv_sec: now.tv_sec + (ahead.as_secs() + nanos / NANOS) as libc::time_t,
            tv_nsec: (nanos % NANOS) as libc::c_long,
        }
    }

    /// `FUTEX_WAIT_BITSET` on the bell while it holds `value`, woken by a
    /// wake whose bitset meets `bits`, or at `until`. A timed wake is one
    /// more spurious one, which every caller's next round already allows
    /// for; loom's model of the queue has no clock and ignores `until`.
    fn sleep(&self, value: u32, bits: u32, until: Option<Instant>) {
        #[cfg(not(loom))]
        {
            let word = self.page.word();
            let deadline = until.map(Self::monotonic_at);
            let timeout = deadline.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
            // SAFETY: FUTEX_WAIT_BITSET (shared: no PRIVATE flag, the word
            // is in a MAP_SHARED file) on an aligned u32 that stays mapped
            // during the call, with no timeout or an absolute
            // CLOCK_MONOTONIC one that lives on this frame, and a non-zero
            // bitset; it reads the word and the timeout and writes nothing.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    word.as_ptr(),
                    libc::FUTEX_WAIT_BITSET,
                    value,
                    timeout,
                    std::ptr::null::<u32>(),
                    bits,
                )
            };
            // Woken, timed out, interrupted, or the word had moved
            // (EAGAIN): the caller's next round looks again in every case.
        }
        #[cfg(loom)]
        let _ = until;
        #[cfg(loom)]
        {
            let (lock, cv) = &self.queue;
            let mut queue = lock.lock();
            // Relaxed: the kernel compares the word under its queue's lock;
            // the mutex is this model's queue lock.
            if self.page.word().load(Ordering::Relaxed) != value {
                return;
            }
            let id = queue.next;
            queue.next += 1;
            queue.waiting.push((id, bits, false));
            loop {
                queue = cv.wait(queue);
                let at = queue.waiting.iter().position(|w| w.0 == id).expect("queued");
                if queue.waiting[at].2 {
                    queue.waiting.remove(at);
                    return;
                }
            }
        }
    }

    /// `FUTEX_WAKE_BITSET` of every waiter whose bitset meets `bits`.
    fn wake(&self, bits: u32) {
        #[cfg(not(loom))]
        {
            let word = self.page.word();
            // SAFETY: FUTEX_WAKE_BITSET (shared) of every waiter on an
            // aligned u32 that stays mapped during the call, with a non-zero
            // bitset; it touches no memory.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    word.as_ptr(),
                    libc::FUTEX_WAKE_BITSET,
                    i32::MAX,
                    std::ptr::null::<libc::timespec>(),
                    std::ptr::null::<u32>(),
                    bits,
                )
            };
        }
        #[cfg(loom)]
        {
            let (lock, cv) = &self.queue;
            let mut queue = lock.lock();
            for w in &mut queue.waiting {
                w.2 |= w.1 & bits != 0;
            }
            cv.notify_all();
        }
    }
}

/// The doorbells of this process that sleep disarmed, for the listeners
/// that go idle to nudge (see "Arming only while a listener may sleep").
/// One per process outside loom ([`parking`]); a model makes its own.
pub(crate) struct Parking {
    /// How many bells `disarmed` holds: what a listener loads after F4.
    count: AtomicUsize,
    /// The bells of the doorbells disarmed now; changed under its lock only.
    disarmed: Mutex<Vec<crate::sync::Arc<Bell>>>,
}

impl Parking {
    pub(crate) fn new() -> Parking {
        Parking { count: AtomicUsize::new(0), disarmed: Mutex::new(Vec::new()) }
    }

    /// The doorbell of `bell` is about to choose between arming and a
    /// disarmed sleep: a listener that goes idle from now on nudges it.
    fn disarm(&self, bell: &crate::sync::Arc<Bell>) {
        let mut list = self.disarmed.lock();
        list.push(bell.clone());
        // Relaxed: X4, after the lock's release, orders it before the
        // doorbell's loads of the states; the lock orders the list.
        self.count.store(list.len(), Ordering::Relaxed);
    }

    /// Takes the doorbell of `bell` out of the disarmed list, if a nudge
    /// has not.
    fn rearm(&self, bell: &crate::sync::Arc<Bell>) {
        let mut list = self.disarmed.lock();
        if let Some(at) = list.iter().position(|b| crate::sync::Arc::ptr_eq(b, bell)) {
            list.swap_remove(at);
            // Relaxed: as in `disarm`.
            self.count.store(list.len(), Ordering::Relaxed);
        }
    }

    /// A listener of this process went idle (after its F4 and a re-check
    /// that found nothing), or was added (after the fence that opens
    /// `barrier::heavy`): nudges every disarmed doorbell, so that it arms
    /// and looks.
    #[inline]
    pub(crate) fn listener_may_sleep(&self) {
        // Relaxed: F4 (or heavy's fence) before it orders it after the
        // listener's IDLE (or its entry); see "Arming only while a listener
        // may sleep".
        if self.count.load(Ordering::Relaxed) != 0 {
            self.nudge_all();
        }
    }

    #[cold]
    fn nudge_all(&self) {
        let bells = {
            let mut list = self.disarmed.lock();
            // Relaxed: under the lock, as in `disarm`.
            self.count.store(0, Ordering::Relaxed);
            std::mem::take(&mut *list)
        };
        for bell in bells {
            bell.nudge();
        }
    }
}

/// This process's [`Parking`], made by the first doorbell that starts
/// (before its broker has listeners); none while no doorbell ever started.
#[cfg(not(loom))]
static PARKING: std::sync::OnceLock<Parking> = std::sync::OnceLock::new();

/// A listener of this process went idle (after F4 and a re-check that
/// found nothing) or was added to a shared partition (after the fence that
/// opens `barrier::heavy`): nudges this process's disarmed doorbells (see
/// "Arming only while a listener may sleep"). A load of a static and of
/// one count when no doorbell is disarmed, and nothing more; under loom,
/// nothing (the models call their own [`Parking`]).
#[inline]
pub(crate) fn listener_may_sleep() {
    #[cfg(not(loom))]
    if let Some(parking) = PARKING.get() {
        parking.listener_may_sleep();
    }
}

/// A partition's part in the cross-process wake: its interest word and
/// its directory's bell. A partition of a `Processes` broker has one
/// (`Partition::cross`); an `Exclusive` one has none.
pub(crate) struct Cross {
    interest: Page,
    bell: crate::sync::Arc<Bell>,
    /// Whether this broker counts in `interest` now; changed under
    /// `edit`, so raises and lowers of one broker alternate.
    raised: Mutex<bool>,
}

impl Cross {
    /// The cross-process state of the partition whose log is in `dir`:
    /// `init` for its first opener or its creator (no other process has
    /// it: its interest starts at 0).
    pub(crate) fn open(dir: &Path, init: bool, bell: crate::sync::Arc<Bell>) -> Result<Cross> {
        Ok(Cross::over(Page::open(&dir.join(PARTITION_STATE_FILE), init)?, bell))
    }

    /// A partition's state no file backs, for the loom models.
    #[cfg(loom)]
    pub(crate) fn in_memory(bell: crate::sync::Arc<Bell>) -> Cross {
        Cross::over(Page::in_memory(), bell)
    }

    fn over(interest: Page, bell: crate::sync::Arc<Bell>) -> Cross {
        Cross { interest, bell, raised: Mutex::new(false) }
    }

    /// A publisher's half, after its commit (see the module docs): X1, the
    /// interest, and a ring if some doorbell is armed.
    #[inline]
    pub(crate) fn after_commit(&self) {
        // X1, SeqCst fence: orders the commit before the loads of the
        // interest and the bell. Pairs with X2 in `Bell::round`, and with
        // the fence that opens `barrier::heavy` after a raise (see "The race
        // it survives"); membarrier does not reach other processes.
        crate::sync::fence_or_weakened!("X1", Ordering::SeqCst);
        // Relaxed: ordered by X1; a count, read only to skip the bell.
        if self.interest.word().load(Ordering::Relaxed) != 0 {
            self.bell.ring_if_armed();
        }
    }

    /// This broker listens to the partition (`true`) or no longer does:
    /// raises or lowers the interest once per change. A raise is followed
    /// by the caller's `fence(SeqCst)` before it reads the log.
    pub(crate) fn set_listening(&self, listening: bool) {
        let mut raised = self.raised.lock();
        if *raised == listening {
            return;
        }
        *raised = listening;
        // Relaxed: the caller's fence orders a raise before its read of the
        // log (see "The race it survives"); a lower only saves publishers
        // the bell's load.
        if listening {
            self.interest.word().fetch_add(1, Ordering::Relaxed);
        } else {
            self.interest.word().fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Cross {
    fn drop(&mut self) {
        // A partition that goes while listened to (its broker closing)
        // takes its count with it.
        if *self.raised.lock() {
            // Relaxed: see `set_listening`.
            self.interest.word().fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// What a doorbell thread looks at: a partition this broker may listen to.
#[cfg_attr(loom, allow(dead_code))]
pub(crate) trait Watch: Send + Sync {
    /// Looks whether the partition moved since the last look, and if it did
    /// signals its local listeners; returns whether it did.
    fn look(&self) -> bool;

    /// Whether a local listener of the partition may sleep: one with no
    /// state word (woken after every commit), or whose state reads `IDLE`.
    /// Called after X4.
    fn may_sleep(&self) -> bool;

    /// When the last look, which found the partition waiting on a record
    /// reserved and not committed, may give it up (`Cursor::retry_at`): the
    /// doorbell sleeps no longer than that (see "A reservation nobody
    /// commits").
    fn retry_at(&self) -> Option<std::time::Instant>;
}

/// What a doorbell thread tells when the directory's topic list changed:
/// its broker, which rereads the list (see "Topics other processes create
/// or delete").
#[cfg_attr(loom, allow(dead_code))]
pub(crate) trait TopicsWatch: Send + Sync {
    /// Brings the broker's topics in line with the directory's list;
    /// false if that failed (the list could not be read), to try again at
    /// the next change.
    fn sync_topics(&self) -> bool;
}

/// What a doorbell thread tells when the members' change counter moved:
/// its broker, which has each of its group and shared-subscription members
/// in `Sharing::Processes` look at the others soon, on their own threads
/// (see "Members of groups and shared subscriptions").
#[cfg_attr(loom, allow(dead_code))]
pub(crate) trait MembersWatch: Send + Sync {
    /// Asks every local member to look at its folder; must not block on a
    /// look itself.
    fn members_changed(&self);
}

/// A broker's doorbell thread and the partitions it watches (see the
/// module docs). Stopped by [`Doorbell::stop`] when the broker closes.
/// Under loom there is none: a `Processes` broker does not open there
/// (`BrokerInner::open_data_dir`); its models run [`Bell::round`] itself.
#[cfg(not(loom))]
pub(crate) struct Doorbell {
    bell: crate::sync::Arc<Bell>,
    /// The partitions of this broker's shared topics; one that has gone is
    /// dropped at the next look.
    watched: Mutex<Vec<std::sync::Weak<dyn Watch>>>,
    /// The broker, told of topic list changes; weak, as the broker holds
    /// the doorbell.
    topics: Mutex<Option<std::sync::Weak<dyn TopicsWatch>>>,
    /// The change counter's value at the last reread of the list that
    /// succeeded; only the doorbell thread uses it.
    seen_changes: crate::sync::atomic::AtomicU32,
    /// The broker, told when the members' change counter moves; weak, as
    /// for `topics`.
    members: Mutex<Option<std::sync::Weak<dyn MembersWatch>>>,
    /// The members' change counter at the last time the broker was told;
    /// only the doorbell thread uses it.
    seen_members: crate::sync::atomic::AtomicU32,
    /// The earliest `Watch::retry_at` of the last look at the partitions:
    /// the armed sleep after it ends then at the latest. Only the doorbell
    /// thread uses it.
    retry: Mutex<Option<Instant>>,
    stop: crate::sync::atomic::AtomicBool,
    thread: Mutex<Option<crate::sync::thread::JoinHandle<()>>>,
}

#[cfg(not(loom))]
impl Doorbell {
    /// Starts the doorbell thread of a broker on the directory whose bell
    /// is `bell`.
    pub(crate) fn start(bell: crate::sync::Arc<Bell>) -> Result<crate::sync::Arc<Doorbell>> {
        // Unequal to the counter: the first look after `watch_topics` rereads.
        let seen = bell.topic_changes().wrapping_sub(1);
        // Equal: a member joins after `watch_members`, and looks when it
        // joins.
        let seen_members = bell.member_changes();
        let doorbell = crate::sync::Arc::new(Doorbell {
            bell,
            watched: Mutex::new(Vec::new()),
            topics: Mutex::new(None),
            seen_changes: crate::sync::atomic::AtomicU32::new(seen),
            members: Mutex::new(None),
            seen_members: crate::sync::atomic::AtomicU32::new(seen_members),
            retry: Mutex::new(None),
            stop: crate::sync::atomic::AtomicBool::new(false),
            thread: Mutex::new(None),
        });
        // Before this broker has listeners: a listener's `listener_may_sleep`
        // finds it (see `PARKING`).
        PARKING.get_or_init(Parking::new);
        let runner = doorbell.clone();
        let handle = crate::sync::spawn_named("rill-doorbell".into(), move || runner.run())?;
        *doorbell.thread.lock() = Some(handle);
        Ok(doorbell)
    }

    /// The bell it sleeps on.
    pub(crate) fn bell(&self) -> &crate::sync::Arc<Bell> {
        &self.bell
    }

    /// Watches `partition` from now on (until it goes).
    pub(crate) fn watch<W: Watch + 'static>(&self, partition: &crate::sync::Arc<W>) {
        let weak: std::sync::Weak<W> = crate::sync::Arc::downgrade(partition);
        let weak: std::sync::Weak<dyn Watch> = weak;
        self.watched.lock().push(weak);
    }

    /// Tells `broker` of every change of the topic list from now on, and
    /// of any since its open read the list.
    pub(crate) fn watch_topics(&self, broker: std::sync::Weak<dyn TopicsWatch>) {
        *self.topics.lock() = Some(broker);
        // The thread's first look rereads the list (`seen_changes` starts
        // unequal to the counter): a change made between the broker's read
        // of the list at its open and now is not lost.
        self.bell.ring_always();
    }

    /// Tells `broker` of every change of the members from now on.
    pub(crate) fn watch_members(&self, broker: std::sync::Weak<dyn MembersWatch>) {
        *self.members.lock() = Some(broker);
    }

    fn run(&self) {
        let parking = PARKING.get_or_init(Parking::new);
        // Acquire: pairs with the Release store in `stop`.
        while !self.stop.load(Ordering::Acquire) {
            Bell::round_lazy(&self.bell, parking, || self.may_sleep(), |all| self.look(all), || *self.retry.lock());
        }
    }

    /// The watched partitions that are still there.
    fn watched(&self) -> Vec<std::sync::Arc<dyn Watch>> {
        let mut list = self.watched.lock();
        list.retain(|w| w.strong_count() > 0);
        list.iter().filter_map(std::sync::Weak::upgrade).collect()
    }

    /// Whether a listener of a watched partition may sleep (after X4).
    fn may_sleep(&self) -> bool {
        self.watched().iter().any(|p| p.may_sleep())
    }

    /// Looks at the stop flag and the topic list and, if `partitions`, at
    /// every watched partition (each signals its own listeners).
    fn look(&self, partitions: bool) -> bool {
        // Acquire: as in `run`; a stopping broker's doorbell does not sleep.
        let mut moved = self.stop.load(Ordering::Acquire);
        // First, so the partitions of topics it joins are looked at below.
        if !moved {
            moved |= self.look_at_topics();
            moved |= self.look_at_members();
        }
        if partitions {
            let mut retry: Option<Instant> = None;
            for p in self.watched() {
                moved |= p.look();
                retry = match (retry, p.retry_at()) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            // Never sooner than `RETRY_FLOOR` from now: a deadline this look
            // could not act on (none should be left) must not turn the
            // sleep into a spin.
            *self.retry.lock() = retry.map(|at| at.max(Instant::now() + RETRY_FLOOR));
        }
        moved
    }

    /// If the topic list's change counter moved since the last reread,
    /// has the broker reread the list; true if it did. The counter is
    /// loaded before the reread, so a change made during it moves the
    /// counter past what is kept here and the next round rereads again.
    /// A reread that failed is not retried until the next change (its
    /// error is logged): retrying at once would spin.
    fn look_at_topics(&self) -> bool {
        let now = self.bell.topic_changes();
        // Relaxed: only this thread reads or writes it.
        if now == self.seen_changes.load(Ordering::Relaxed) {
            return false;
        }
        // Not told yet (the broker is still opening): `watch_topics` rings.
        let Some(broker) = self.topics.lock().as_ref().and_then(std::sync::Weak::upgrade) else { return false };
        // Relaxed: as above.
        self.seen_changes.store(now, Ordering::Relaxed);
        broker.sync_topics()
    }

    /// If the members' change counter moved since the broker was last
    /// told, tells it (its members look on their own threads); true if it
    /// did. Loaded before the telling, so a change made meanwhile moves
    /// the counter past what is kept here and the next round tells again.
    fn look_at_members(&self) -> bool {
        let now = self.bell.member_changes();
        // Relaxed: only this thread reads or writes it.
        if now == self.seen_members.load(Ordering::Relaxed) {
            return false;
        }
        // Relaxed: as above.
        self.seen_members.store(now, Ordering::Relaxed);
        let Some(broker) = self.members.lock().as_ref().and_then(std::sync::Weak::upgrade) else { return false };
        broker.members_changed();
        true
    }

    /// Stops the thread and waits for it.
    pub(crate) fn stop(&self) {
        // Release: pairs with the Acquire loads in `run` and `look`.
        self.stop.store(true, Ordering::Release);
        self.bell.ring_always();
        if let Some(handle) = self.thread.lock().take() {
            let _ = handle.join();
        }
    }
}

/// The shortest timed sleep of a doorbell waiting for a cursor's retry
/// deadline (see "A reservation nobody commits"): a safety floor, far
/// below the abandon bound.
#[cfg(not(loom))]
const RETRY_FLOOR: std::time::Duration = std::time::Duration::from_millis(10);

/// Under loom: never started (see [`Doorbell`]'s docs outside loom), so
/// none of these run; they keep the broker's calls compiling.
#[cfg(loom)]
pub(crate) struct Doorbell(std::convert::Infallible);

#[cfg(loom)]
impl Doorbell {
    pub(crate) fn start(_bell: crate::sync::Arc<Bell>) -> Result<crate::sync::Arc<Doorbell>> {
        Err(crate::error::Error::InvalidArgument("no doorbell thread under loom".into()))
    }

    pub(crate) fn bell(&self) -> &crate::sync::Arc<Bell> {
        match self.0 {}
    }

    pub(crate) fn watch<W: Watch + 'static>(&self, _partition: &crate::sync::Arc<W>) {
        match self.0 {}
    }

    pub(crate) fn stop(&self) {
        match self.0 {}
    }
}
