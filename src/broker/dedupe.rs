//! The dedupe window: the record ids a topic appended recently, so that a
//! publish retried after a timeout, a crash or a reconnect is not appended
//! a second time.
//!
//! # What it promises
//!
//! On a topic whose `dedupe_window_ms` is not 0, a record carrying an id
//! (`Record::with_id`, or the attribute `rill.id`) that the topic appended
//! less than the window ago is not appended again: its publish returns the
//! first record's (partition, offset), flagged as a duplicate. The window is
//! per topic, across its partitions: an id is a topic-wide identity, and a
//! record is routed as any other (by key, else round-robin), so a retried
//! publish of an unkeyed record is caught whichever partition it would go to.
//! Records without an id never come here: the publish path's one test is
//! `Record::may_have_id` (an id or any attribute), and a topic whose window
//! is 0 has no `Window` at all.
//!
//! # States of an id
//!
//! Each id is in one of three states, in the table of the shard its hash
//! picks (16 shards, each a mutex over a hash table and an age queue, so
//! publishers of different ids seldom meet on one lock):
//!
//! ```text
//!   absent --claim--> Pending --appended--> Done { partition, offset, at }
//!     ^                  |                      |
//!     +----abandoned-----+                      +--expired or evicted--> absent
//! ```
//!
//! * **claim** (a publisher, under the shard lock): an id absent, or `Done`
//!   but older than the window, becomes `Pending`; this publisher owns the
//!   append. `Done` within the window is a duplicate: its position is
//!   returned. `Pending` means another publisher is appending it right now:
//!   this one waits on the shard's condition variable until it is not.
//! * **appended** (the owner, under the lock again, after the append
//!   returned): `Pending` becomes `Done` with the position, the id joins the
//!   shard's age queue, and every waiter is woken (waiters count
//!   themselves in the shard under its lock, so an owner that sees none
//!   skips the wake-up, a system call, without missing anyone).
//! * **abandoned** (the owner, when its append failed, or unwound): the id
//!   is removed and waiters are woken; the first to lock claims it and
//!   appends its own record, so a failed publish never hides a later one.
//! * **expired / evicted**: entries leave from the front of the age queue
//!   when they are older than the window (looked at whenever an id is
//!   appended into the shard, and by the stats), or when the shard holds
//!   more than its share of [`MAX_DEDUPE_IDS`] (the oldest goes, counted in
//!   `dedupe_evicted`). Memory is bounded by that count whatever the window.
//!
//! # The race it survives
//!
//! Two publishers of one id: whichever locks the shard first claims it; the
//! other finds `Pending` and waits, never appending and never returning a
//! position that does not yet hold the record: it returns only once the
//! owner has stored the offset its append returned, which is after the
//! record is committed. If the owner's append fails, the waiter is woken by
//! the abandonment and claims the id itself. Nobody holds a shard lock while
//! appending, so a slow append (a `Block` subscriber at its limit) delays
//! only publishers of the same id. The protocol is a mutex and a condition
//! variable; it has no lock-free part to model.
//!
//! # Cost
//!
//! Over the same record published to a topic without a window, a publish
//! with an id pays: one keyed hash of the id (`log::KeyHasher`, foldhash
//! under a secret seed drawn for the window, as a compaction pass hashes
//! keys: a publisher choosing ids cannot make one shard's chains long); two
//! uncontended locks of its shard (the claim, and the settle); a probe of
//! the shard's table for the claim and the write of the new entry, and one
//! probe for the settle, which finds the same entry in cache; and a push on
//! the age queue with a look at its front. An id of up to [`INLINE_ID`]
//! bytes is copied into its entry, so nothing is allocated for it; the age
//! queue holds only (time, hash), and expiry finds the entry by them.
//!
//! On a window far larger than the caches (a million ids), a fresh id's
//! claim is dominated by memory latency, not by instructions: the probe's
//! first read of the table is a random access (a cache and, with 4 KiB
//! pages, a TLB miss), and the entry's write must reach its line before the
//! unlock's locked instruction completes. A table whose probe and entry
//! share one line, with the ids in an arrival-ordered arena, would halve
//! those misses; this one is a plain hash table. `rill-bench --scenario
//! dedupe` measures a publish with an id against the same record on a
//! topic without a window.
//!
//! # Across processes
//!
//! On a data directory shared by processes (`Sharing::Processes`) every
//! process has a window of its own, in its own memory, and the log is the
//! only thing they share: there is no table in shared memory to repair
//! after a crash. What keeps the windows in agreement is that a publish
//! with an id is serialized across the processes: each topic with a window
//! has a lock file (`dedupe.lock`, in the topic's directory), and a publish
//! with an id (a batch with ids: once for the whole batch) runs under an
//! exclusive `flock` of it, taken after an in-process mutex ([`Across`];
//! a `flock` belongs to the open file, which this process's threads share,
//! so it alone would not keep them apart). Under the two locks a turn
//! (`Topic::publish_identified`):
//!
//! 1. *catches up*: for each partition, reads the log from where this
//!    process's last turn stopped (on its first turn, from the record
//!    stamped a window ago, as the rebuild on open does) up to the end
//!    offset read now, and remembers every id found
//!    ([`Window::remember`]); an offset whose record is not committed
//!    (one without an id still being written by a publisher, which takes
//!    no lock, or a reservation whose publisher died) is passed over, not
//!    waited for;
//! 2. claims the id, appends the record and settles the id, as in one
//!    process (the states above);
//! 3. unlocks.
//!
//! Why the catch-up cannot miss a record with an id: every such record was
//! appended under the lock, and its append returned, so the record was
//! committed, before its publisher let the lock go (and the kernel orders
//! an unlock before the next lock of the same file, in any process). So
//! when a turn begins, every record with an id that another turn appended
//! has its offset below the end offset this turn reads (its publisher's
//! reservation moved the shared tail first), and is committed: reading
//! every offset up to that end finds it. An offset not committed when the
//! turn looks holds no such record: a record with an id is committed
//! before its turn ends, or never (its publisher died between reservation
//! and commit), so passing over it loses nothing, and a turn never waits
//! on another publisher (a hole at the tail, which a reader cannot pass
//! until a record after it is committed, would otherwise stop every
//! publish with an id). The protocol is locks only (the commit is in the
//! log's own ordering, and an unlock and the next lock are ordered by the
//! kernel): it has no lock-free part to model.
//!
//! What a crash of the lock's holder leaves, at each step (the kernel lets
//! the `flock` go with the process, however it dies):
//!
//! * before its append reserved an offset: nothing; the next turn claims
//!   the id and appends it;
//! * between the reservation and the commit: a hole, which the next turn's
//!   catch-up passes over (readers give it up after the abandon bound; it
//!   is never delivered); the record was never acknowledged, and the next
//!   publisher of the id appends it;
//! * after the commit (before the settle, the unlock, or the caller's own
//!   bookkeeping): the record is in the log, so the next turn's catch-up
//!   finds it and a retry of the id is answered with its position, flagged
//!   a duplicate.
//!
//! An id's age in a process that learned it from the log is counted from
//! its record's stamp (the processes' clocks are the wall clock's, see
//! `clock.rs`). Ids in records that retention removes before a process has
//! caught up over them are not learned by that process: a window longer
//! than the topic's retention is as long as the retention across
//! processes. Exclusive mode, records without ids and topics without a
//! window never take the lock: their cost is as in one process. What the
//! turn costs (a publish with an id, Processes against Exclusive) is
//! measured by `examples/dedupe_processes.rs`.
//!
//! # Time
//!
//! An id's age is measured from the broker clock's reading when it was
//! claimed (a moment before the record's own timestamp); a reopened data
//! directory rebuilds the window from the records' timestamps
//! (`Topic::open`). Every function here takes `now` as an argument, so the
//! unit tests below drive the clock themselves.

use std::collections::VecDeque;

use crossbeam_utils::CachePadded;
use hashbrown::HashTable;

use crate::error::{Error, Result};
use crate::log::{Cursor, KeyHasher};
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{Condvar, Mutex, MutexGuard};

/// Most ids one topic's window holds. When a shard holds its share of this
/// (`MAX_DEDUPE_IDS / SHARDS`), appending a new id evicts the shard's oldest,
/// which is counted in `TopicStats::dedupe_evicted`: a retry of an evicted
/// id inside the window is appended again.
pub const MAX_DEDUPE_IDS: usize = 1 << 21;
/// Shards of a window; a power of two, so an id's shard is its hash's low bits.
const SHARDS: usize = 16;
const _: () = assert!(SHARDS.is_power_of_two() && MAX_DEDUPE_IDS.is_multiple_of(SHARDS));
/// Most ids one shard holds.
const SHARD_CAPACITY: usize = MAX_DEDUPE_IDS / SHARDS;
/// An id's shard is its hash's bits from here: the table's own index uses
/// the low bits and its tags the top ones, so within a shard those stay
/// spread.
const SHARD_SHIFT: u32 = 32;
/// Longest id held inside its entry; a longer one (up to `MAX_ID_LEN`) is
/// put on the heap. 38 keeps a UUID's 36 characters inline in a 72-byte
/// entry.
const INLINE_ID: usize = 38;
/// `Entry::partition` of an id being appended (`Pending`): no partition
/// has this index (`MAX_PARTITIONS` is far below it).
const PENDING: u32 = u32::MAX;

/// Where a record with an id landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Landed {
    pub(crate) partition: u32,
    pub(crate) offset: u64,
}

/// A window's figures (see `TopicStats`' `dedupe_*` fields).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WindowStats {
    /// Ids held (`Pending` or `Done` within the window).
    pub(crate) ids: u64,
    pub(crate) duplicates: u64,
    pub(crate) evicted: u64,
    pub(crate) waits: u64,
}

/// An id's bytes as its entry holds them: inline when short (so claiming
/// the common id allocates nothing), else boxed.
#[derive(Debug)]
enum IdBytes {
    Inline(u8, [u8; INLINE_ID]),
    Boxed(Box<str>),
}

impl IdBytes {
    fn new(id: &str) -> IdBytes {
        match u8::try_from(id.len()) {
            Ok(len) if id.len() <= INLINE_ID => {
                let mut bytes = [0; INLINE_ID];
                bytes[..id.len()].copy_from_slice(id.as_bytes());
                IdBytes::Inline(len, bytes)
            }
            _ => IdBytes::Boxed(id.into()),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            IdBytes::Inline(len, bytes) => &bytes[..*len as usize],
            IdBytes::Boxed(id) => id.as_bytes(),
        }
    }
}

/// One id in a shard's table, in one of the states of the module docs:
/// `Pending` while `partition` is [`PENDING`], else `Done` at (`partition`,
/// `offset`).
#[derive(Debug)]
struct Entry {
    /// The id's hash, under the window's key: computed once per publish,
    /// it picks the shard and the table slot, and re-slots the entry when
    /// the table grows, so the id is never hashed again.
    hash: u64,
    /// When the id was claimed (or, rebuilt on open, its record's stamp).
    at_ns: u64,
    offset: u64,
    partition: u32,
    id: IdBytes,
}

impl Entry {
    fn is(&self, hash: u64, id: &str) -> bool {
        self.hash == hash && self.id.as_bytes() == id.as_bytes()
    }

    fn pending(&self) -> bool {
        self.partition == PENDING
    }

    fn landed(&self) -> Landed {
        Landed { partition: self.partition, offset: self.offset }
    }
}

/// One shard's ids.
#[derive(Debug, Default)]
struct Ids {
    table: HashTable<Entry>,
    /// `Done` ids in the order they were stored, as (the time each was
    /// claimed, its hash): the entry is the `Done` one with that hash and
    /// that time. An entry whose id was since claimed again (after it
    /// expired) is stale: no `Done` entry matches it any more, and it is
    /// skipped. Two ids with one hash and one time would match either
    /// entry, but they are equally old, so either may leave first.
    order: VecDeque<(u64, u64)>,
    /// Publishers waiting on `settled` for a `Pending` id of this shard: an
    /// owner settling its id wakes them only if there are any (a wake-up is
    /// a system call even with nobody to wake).
    waiting: usize,
}

impl Ids {
    /// The entry of `id`, whose hash is `hash`.
    fn find(&mut self, hash: u64, id: &str) -> Option<&mut Entry> {
        self.table.find_mut(hash, |e| e.is(hash, id))
    }

    fn insert(&mut self, entry: Entry) {
        self.table.insert_unique(entry.hash, entry, |e| e.hash);
    }

    /// Drops ids older than the window from the front of the age queue, and
    /// the oldest beyond the shard's capacity; returns how many were evicted
    /// for room (not for age).
    fn prune(&mut self, now: u64, window_ns: u64) -> u64 {
        let mut evicted = 0;
        while let Some(&(at, hash)) = self.order.front() {
            let expired = now.saturating_sub(at) >= window_ns;
            let full = self.table.len() > SHARD_CAPACITY;
            if !expired && !full {
                break;
            }
            if let Ok(entry) = self.table.find_entry(hash, |e| e.hash == hash && !e.pending() && e.at_ns == at) {
                entry.remove();
                evicted += (!expired) as u64;
            }
            self.order.pop_front();
        }
        evicted
    }
}

#[derive(Debug, Default)]
struct Shard {
    ids: Mutex<Ids>,
    /// Woken when a `Pending` id becomes `Done` or is abandoned.
    settled: Condvar,
}

/// A topic's dedupe window (see the module docs).
#[derive(Debug)]
pub(crate) struct Window {
    window_ns: u64,
    /// Keys the ids' hashes (see `KeyHasher` for why not SipHash).
    hasher: KeyHasher,
    /// Made at the first id: a topic whose publishers never give one (most
    /// topics) pays no memory for its shards (see `tests/idle_memory.rs`).
    shards: std::sync::OnceLock<Box<[CachePadded<Shard>]>>,
    /// Publishes answered as duplicates.
    duplicates: AtomicU64,
    /// Ids dropped for room before their window ended.
    evicted: AtomicU64,
    /// Publishes that found their id `Pending` and waited for that append.
    waits: AtomicU64,
}

/// What [`Window::claim`] found.
pub(crate) enum Claim<'w> {
    /// The id was appended within the window, there.
    Duplicate(Landed),
    /// The caller appends the record, then calls [`Ticket::appended`].
    Claimed(Ticket<'w>),
}

/// The right to append the record of one id. Dropped without
/// [`Ticket::appended`] (the append failed, or unwound), it abandons the id.
pub(crate) struct Ticket<'w> {
    shard: &'w Shard,
    window: &'w Window,
    /// The id (borrowed from the publisher's record) and its hash; `None`
    /// once settled.
    id: Option<(u64, &'w str)>,
    at_ns: u64,
}

impl Ticket<'_> {
    /// The record was appended at `landed`: the id becomes `Done`.
    pub(crate) fn appended(mut self, landed: Landed) {
        let (hash, id) = self.id.take().expect("a ticket is settled once");
        let mut ids = self.shard.ids.lock();
        // Its `Pending` entry is still there: only its owner (this ticket)
        // removes or settles it; expiry and eviction take `Done` ones only.
        let entry = ids.find(hash, id).expect("a pending id stays until its owner settles it");
        debug_assert!(entry.pending() && entry.at_ns == self.at_ns);
        (entry.partition, entry.offset) = (landed.partition, landed.offset);
        ids.order.push_back((self.at_ns, hash));
        let evicted = ids.prune(self.at_ns, self.window.window_ns);
        let wake = ids.waiting > 0;
        drop(ids);
        if evicted > 0 {
            // Relaxed: a statistic.
            self.window.evicted.fetch_add(evicted, Ordering::Relaxed);
        }
        if wake {
            self.shard.settled.notify_all();
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if let Some((hash, id)) = self.id.take() {
            let mut ids = self.shard.ids.lock();
            if let Ok(entry) = ids.table.find_entry(hash, |e| e.is(hash, id)) {
                entry.remove();
            }
            let wake = ids.waiting > 0;
            drop(ids);
            if wake {
                self.shard.settled.notify_all();
            }
        }
    }
}

impl Window {
    /// A window of `window_ms` milliseconds (not 0).
    pub(crate) fn new(window_ms: u64) -> Window {
        Window {
            window_ns: window_ms.saturating_mul(1_000_000),
            hasher: KeyHasher::new(),
            shards: std::sync::OnceLock::new(),
            duplicates: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            waits: AtomicU64::new(0),
        }
    }

    /// `id`'s hash, and the shard that holds it.
    fn shard(&self, id: &str) -> (u64, &Shard) {
        let hash = self.hasher.hash(id.as_bytes());
        let shards = self.shards.get_or_init(|| (0..SHARDS).map(|_| CachePadded::new(Shard::default())).collect());
        (hash, &shards[(hash >> SHARD_SHIFT) as usize & (SHARDS - 1)])
    }

    /// Claims `id` at time `now`, waiting while another publisher appends it.
    pub(crate) fn claim<'w>(&'w self, id: &'w str, now: u64) -> Claim<'w> {
        let (hash, shard) = self.shard(id);
        let mut ids = shard.ids.lock();
        let mut waited = false;
        loop {
            match ids.find(hash, id) {
                Some(entry) if entry.pending() => {
                    if !waited {
                        waited = true;
                        // Relaxed: a statistic (tests wait on it to know a
                        // racer is here).
                        self.waits.fetch_add(1, Ordering::Relaxed);
                    }
                    // Counted under the lock the owner settles under, so an
                    // owner that sees 0 has no waiter to miss: a waiter
                    // counts itself before `wait` releases the lock.
                    ids.waiting += 1;
                    ids = shard.settled.wait(ids);
                    ids.waiting -= 1;
                }
                Some(entry) if now.saturating_sub(entry.at_ns) < self.window_ns => {
                    let landed = entry.landed();
                    // Relaxed: a statistic.
                    self.duplicates.fetch_add(1, Ordering::Relaxed);
                    return Claim::Duplicate(landed);
                }
                Some(expired) => {
                    // Claimed again in place; its old age-queue entry is
                    // now stale (see `Ids::order`).
                    (expired.partition, expired.at_ns) = (PENDING, now);
                    return Claim::Claimed(self.ticket(shard, ids, hash, id, now));
                }
                None => {
                    ids.insert(Entry { hash, at_ns: now, offset: 0, partition: PENDING, id: IdBytes::new(id) });
                    return Claim::Claimed(self.ticket(shard, ids, hash, id, now));
                }
            }
        }
    }

    /// The ticket of `id`, made `Pending` under `ids` (released here).
    fn ticket<'w>(
        &'w self,
        shard: &'w Shard,
        ids: MutexGuard<'_, Ids>,
        hash: u64,
        id: &'w str,
        now: u64,
    ) -> Ticket<'w> {
        drop(ids);
        Ticket { shard, window: self, id: Some((hash, id)), at_ns: now }
    }

    /// Remembers an id found in the log (when the topic was opened, or by a
    /// catch-up across processes), appended at `landed` at `at_ns`; call in
    /// order of `at_ns` for one partition. An id already remembered keeps
    /// its first position, unless that one has expired by `now`.
    pub(crate) fn remember(&self, id: &str, landed: Landed, at_ns: u64, now: u64) {
        if now.saturating_sub(at_ns) >= self.window_ns {
            return;
        }
        let (hash, shard) = self.shard(id);
        let mut ids = shard.ids.lock();
        let Landed { partition, offset } = landed;
        match ids.find(hash, id) {
            // Expired: the record found is the id's appending since (another
            // process's, found by a catch-up). Its old age-queue entry is now
            // stale (see `Ids::order`).
            Some(old) if !old.pending() && now.saturating_sub(old.at_ns) >= self.window_ns => {
                (old.partition, old.offset, old.at_ns) = (partition, offset, at_ns);
            }
            Some(_) => return,
            None => ids.insert(Entry { hash, at_ns, offset, partition, id: IdBytes::new(id) }),
        }
        ids.order.push_back((at_ns, hash));
        let evicted = ids.prune(now, self.window_ns);
        // Relaxed: a statistic.
        self.evicted.fetch_add(evicted, Ordering::Relaxed);
    }

    /// The window's length in nanoseconds.
    pub(crate) fn window_ns(&self) -> u64 {
        self.window_ns
    }

    /// The window's figures at `now`.
    pub(crate) fn stats(&self, now: u64) -> WindowStats {
        let mut held = 0;
        let mut evicted = 0;
        for shard in self.shards.get().into_iter().flat_map(|s| s.iter()) {
            let mut ids = shard.ids.lock();
            evicted += ids.prune(now, self.window_ns);
            held += ids.table.len() as u64;
        }
        // Relaxed: statistics.
        let evicted = self.evicted.fetch_add(evicted, Ordering::Relaxed) + evicted;
        WindowStats {
            ids: held,
            duplicates: self.duplicates.load(Ordering::Relaxed),
            evicted,
            waits: self.waits.load(Ordering::Relaxed),
        }
    }
}

/// Processes mode: what serializes a topic's publishes with ids across the
/// processes sharing its data directory, and how far this process has read
/// its partitions for ids (see "Across processes" in the module docs).
#[derive(Debug)]
pub(crate) struct Across {
    /// The topic's `dedupe.lock`, `flock`ed exclusively for a turn.
    lock: std::fs::File,
    path: std::path::PathBuf,
    /// Per partition, the catch-up's cursor: the next offset to look at
    /// for ids; `None` until the first turn. The mutex keeps this process's
    /// threads apart, which the `flock` does not.
    seen: Mutex<Vec<Option<Cursor>>>,
}

/// A turn of [`Across`]: both locks held; the `flock` is let go on drop,
/// before the mutex.
pub(crate) struct Turn<'a> {
    across: &'a Across,
    /// Per partition, the catch-up's cursor (see [`Across::seen`]).
    pub(crate) seen: MutexGuard<'a, Vec<Option<Cursor>>>,
}

impl Across {
    /// Opens (creating if missing) the lock file `path` of a topic with
    /// `partitions` partitions.
    pub(crate) fn open(path: std::path::PathBuf, partitions: usize) -> Result<Across> {
        let lock = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(&path, &e))?;
        Ok(Across { lock, path, seen: Mutex::new((0..partitions).map(|_| None).collect()) })
    }

    /// Takes the turn: the mutex, then the `flock`, waiting for both.
    pub(crate) fn turn(&self) -> Result<Turn<'_>> {
        use std::os::fd::AsRawFd;
        let seen = self.seen.lock();
        loop {
            // SAFETY: flock on a descriptor this struct owns, with constant flags; it touches no memory.
            if unsafe { libc::flock(self.lock.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(Turn { across: self, seen });
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(Error::io(&self.path, &e));
            }
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a descriptor `Across` owns, with constant flags; it touches no memory.
        // It cannot fail on a descriptor we hold locked; were it to, the lock
        // would stay until the process closes the file or exits, and other
        // processes' turns would wait: an unlock that fails is not retried
        // since nothing it could report would differ.
        unsafe { libc::flock(self.across.lock.as_raw_fd(), libc::LOCK_UN) };
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn claim_and_append(w: &Window, id: &str, now: u64, offset: u64) -> Option<Landed> {
        match w.claim(id, now) {
            Claim::Duplicate(landed) => Some(landed),
            Claim::Claimed(ticket) => {
                ticket.appended(Landed { partition: 0, offset });
                None
            }
        }
    }

    #[test]
    fn an_id_is_a_duplicate_within_the_window_and_new_after_it() {
        let w = Window::new(100);
        let t0 = 1_000 * MS;
        assert_eq!(claim_and_append(&w, "a", t0, 7), None);
        let first = Some(Landed { partition: 0, offset: 7 });
        assert_eq!(claim_and_append(&w, "a", t0 + 99 * MS, 8), first);
        assert_eq!(claim_and_append(&w, "b", t0 + 99 * MS, 9), None);
        assert_eq!(w.stats(t0 + 99 * MS), WindowStats { ids: 2, duplicates: 1, evicted: 0, waits: 0 });
        // At exactly the window's length, "a" has expired; "b" has not.
        assert_eq!(claim_and_append(&w, "a", t0 + 100 * MS, 10), None);
        assert_eq!(claim_and_append(&w, "a", t0 + 150 * MS, 11), Some(Landed { partition: 0, offset: 10 }));
        // The stale queue entry of the first "a" did not drop the second.
        assert_eq!(w.stats(t0 + 150 * MS).ids, 2);
        assert_eq!(w.stats(t0 + 199 * MS).ids, 1, "b expired, the second a not yet");
        assert_eq!(w.stats(t0 + 200 * MS).ids, 0);
    }

    #[test]
    fn an_abandoned_claim_lets_the_next_publisher_append() {
        let w = Window::new(1_000);
        match w.claim("a", 0) {
            Claim::Claimed(ticket) => drop(ticket),
            Claim::Duplicate(_) => panic!("first claim"),
        }
        assert_eq!(w.stats(0).ids, 0);
        assert_eq!(claim_and_append(&w, "a", 0, 3), None);
        assert_eq!(claim_and_append(&w, "a", 0, 4), Some(Landed { partition: 0, offset: 3 }));
    }

    #[test]
    fn a_full_shard_evicts_its_oldest_id_and_counts_it() {
        let w = Window::new(u64::MAX / MS);
        // Ids that all land on one shard, one more than it holds.
        let shard = |id: &str| std::ptr::from_ref(w.shard(id).1);
        let target = shard("x0");
        let ids: Vec<String> =
            (0..).map(|i| format!("x{i}")).filter(|id| shard(id) == target).take(SHARD_CAPACITY + 1).collect();
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(claim_and_append(&w, id, i as u64, i as u64), None);
        }
        let stats = w.stats(ids.len() as u64);
        assert_eq!((stats.ids, stats.evicted), (SHARD_CAPACITY as u64, 1));
        // The oldest is gone (appended again), the newest still there.
        assert_eq!(claim_and_append(&w, ids.last().unwrap(), 0, 0).map(|l| l.offset), Some(SHARD_CAPACITY as u64));
        assert_eq!(claim_and_append(&w, &ids[0], ids.len() as u64, 99), None);
    }

    #[test]
    fn remembered_ids_keep_their_first_position_and_skip_expired_ones() {
        let w = Window::new(100);
        let now = 1_000 * MS;
        w.remember("old", Landed { partition: 1, offset: 1 }, now - 100 * MS, now);
        w.remember("a", Landed { partition: 1, offset: 2 }, now - 50 * MS, now);
        w.remember("a", Landed { partition: 0, offset: 9 }, now - 40 * MS, now);
        assert_eq!(claim_and_append(&w, "a", now, 0), Some(Landed { partition: 1, offset: 2 }));
        assert_eq!(claim_and_append(&w, "old", now, 5), None);
    }

    #[test]
    fn a_remembered_id_replaces_an_expired_one_and_not_a_live_one() {
        // A catch-up across processes finds, after an id expired here,
        // another process's appending of it: that one is the id's now.
        let w = Window::new(100);
        let t0 = 1_000 * MS;
        assert_eq!(claim_and_append(&w, "a", t0, 1), None);
        w.remember("a", Landed { partition: 1, offset: 7 }, t0 + 50 * MS, t0 + 60 * MS);
        assert_eq!(claim_and_append(&w, "a", t0 + 60 * MS, 0), Some(Landed { partition: 0, offset: 1 }));
        w.remember("a", Landed { partition: 1, offset: 9 }, t0 + 120 * MS, t0 + 130 * MS);
        assert_eq!(claim_and_append(&w, "a", t0 + 130 * MS, 0), Some(Landed { partition: 1, offset: 9 }));
        // It expires by its own age, whatever its stale queue entry says.
        assert_eq!(w.stats(t0 + 219 * MS).ids, 1);
        assert_eq!(claim_and_append(&w, "a", t0 + 220 * MS, 10), None);
    }

    #[test]
    fn a_racer_waits_for_the_pending_append_and_gets_its_position() {
        let w = crate::sync::Arc::new(Window::new(1_000));
        let Claim::Claimed(ticket) = w.claim("a", 0) else { panic!("first claim") };
        let racer = {
            let w = w.clone();
            crate::sync::thread::spawn(move || match w.claim("a", 0) {
                Claim::Duplicate(landed) => landed,
                Claim::Claimed(_) => panic!("a second append of one id"),
            })
        };
        // The racer either waits on the Pending slot or has not looked yet;
        // either way it must end with the owner's position.
        ticket.appended(Landed { partition: 2, offset: 5 });
        assert_eq!(racer.join().unwrap(), Landed { partition: 2, offset: 5 });
    }
}
