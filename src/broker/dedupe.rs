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
//! Each id is in one of three states, in the map of the shard its hash picks
//! (16 shards, each a mutex over a map and an age queue, so publishers of
//! different ids seldom meet on one lock):
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
//! # Time
//!
//! An id's age is measured from the broker clock's reading when it was
//! claimed (a moment before the record's own timestamp); a reopened data
//! directory rebuilds the window from the records' timestamps
//! (`Topic::open`). Every function here takes `now` as an argument, so the
//! unit tests below drive the clock themselves.

use std::borrow::Borrow;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher, RandomState};

use crossbeam_utils::CachePadded;

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
/// An id's shard is its hash's bits from here (see [`Key`]).
const SHARD_SHIFT: u32 = 32;

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

/// An id with its hash: the window's keyed SipHash, computed once per
/// publish. Its bits 32..36 pick the shard (the map's own index uses the low
/// bits and its tags the top ones, so within a shard those stay spread), and
/// the shard's map takes it as the hash, so the id is not hashed again for
/// the lookup, the insert and the settle.
#[derive(Debug)]
struct Key {
    hash: u64,
    id: Box<str>,
}

/// What a shard's map looks ids up by: an owned [`Key`], or a [`Probe`]
/// borrowing a publisher's id (the std map needs one borrowed form of both).
trait KeyLike {
    fn hash(&self) -> u64;
    fn id(&self) -> &str;
}

impl KeyLike for Key {
    fn hash(&self) -> u64 {
        self.hash
    }
    fn id(&self) -> &str {
        &self.id
    }
}

/// A borrowed id and its hash, to look up without copying the id.
struct Probe<'a> {
    hash: u64,
    id: &'a str,
}

impl KeyLike for Probe<'_> {
    fn hash(&self) -> u64 {
        self.hash
    }
    fn id(&self) -> &str {
        self.id
    }
}

impl<'a> Borrow<dyn KeyLike + 'a> for Key {
    fn borrow(&self) -> &(dyn KeyLike + 'a) {
        self
    }
}

impl Hash for dyn KeyLike + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(KeyLike::hash(self));
    }
}

impl PartialEq for dyn KeyLike + '_ {
    fn eq(&self, other: &Self) -> bool {
        KeyLike::hash(self) == KeyLike::hash(other) && self.id() == other.id()
    }
}

impl Eq for dyn KeyLike + '_ {}

// As `dyn KeyLike`'s, so the owned and the borrowed form agree.
impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.id == other.id
    }
}

impl Eq for Key {}

/// The shard maps' hasher: a key's hash is already computed ([`Key`]).
#[derive(Debug, Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
    // Keys write one u64 (above); any other bytes are folded in all the same.
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// The state of one id (see the module docs).
#[derive(Debug, Clone, Copy)]
enum Slot {
    /// A publisher is appending it.
    Pending,
    /// Appended at `landed`, claimed at `at_ns`.
    Done { landed: Landed, at_ns: u64 },
}

/// One shard's ids.
#[derive(Debug, Default)]
struct Ids {
    slots: HashMap<Key, Slot, BuildHasherDefault<Prehashed>>,
    /// `Done` ids in the order they were stored, with the time each was
    /// claimed. An entry whose id was since claimed again (after it expired)
    /// is stale: its time no longer matches the slot's, and it is skipped.
    order: VecDeque<(u64, Key)>,
    /// Publishers waiting on `settled` for a `Pending` id of this shard: an
    /// owner settling its id wakes them only if there are any (a wake-up is
    /// a system call even with nobody to wake).
    waiting: usize,
}

impl Ids {
    /// Drops ids older than the window from the front of the age queue, and
    /// the oldest beyond the shard's capacity; returns how many were evicted
    /// for room (not for age).
    fn prune(&mut self, now: u64, window_ns: u64) -> u64 {
        let mut evicted = 0;
        while let Some((at, id)) = self.order.front() {
            let (at, expired) = (*at, now.saturating_sub(*at) >= window_ns);
            let full = self.slots.len() > SHARD_CAPACITY;
            if !expired && !full {
                break;
            }
            if let Some(Slot::Done { at_ns, .. }) = self.slots.get(id)
                && *at_ns == at
            {
                self.slots.remove(id);
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
    hasher: RandomState,
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
    id: Option<Key>,
    at_ns: u64,
}

impl Ticket<'_> {
    /// The record was appended at `landed`: the id becomes `Done`.
    pub(crate) fn appended(mut self, landed: Landed) {
        let id = self.id.take().expect("a ticket is settled once");
        let mut ids = self.shard.ids.lock();
        // Its `Pending` slot is still there: only its owner (this ticket)
        // removes or replaces it. Updated in place, so the map's copy of
        // the id is kept and the ticket's moves to the age queue.
        let done = Slot::Done { landed, at_ns: self.at_ns };
        match ids.slots.get_mut(&id) {
            Some(slot) => *slot = done,
            None => {
                ids.slots.insert(Key { hash: id.hash, id: id.id.clone() }, done);
            }
        }
        ids.order.push_back((self.at_ns, id));
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
        if let Some(id) = self.id.take() {
            let mut ids = self.shard.ids.lock();
            ids.slots.remove(&id);
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
            hasher: RandomState::new(),
            shards: std::sync::OnceLock::new(),
            duplicates: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            waits: AtomicU64::new(0),
        }
    }

    /// `id` with its hash, and the shard that holds it.
    fn probe<'a>(&self, id: &'a str) -> (Probe<'a>, &Shard) {
        let hash = self.hasher.hash_one(id);
        let shards = self.shards.get_or_init(|| (0..SHARDS).map(|_| CachePadded::new(Shard::default())).collect());
        (Probe { hash, id }, &shards[(hash >> SHARD_SHIFT) as usize & (SHARDS - 1)])
    }

    /// Claims `id` at time `now`, waiting while another publisher appends it.
    pub(crate) fn claim(&self, id: &str, now: u64) -> Claim<'_> {
        let (probe, shard) = self.probe(id);
        let mut ids = shard.ids.lock();
        let mut waited = false;
        loop {
            match ids.slots.get(&probe as &dyn KeyLike) {
                Some(Slot::Pending) => {
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
                Some(Slot::Done { landed, at_ns }) if now.saturating_sub(*at_ns) < self.window_ns => {
                    // Relaxed: a statistic.
                    self.duplicates.fetch_add(1, Ordering::Relaxed);
                    return Claim::Duplicate(*landed);
                }
                _ => return Claim::Claimed(self.pending(shard, ids, &probe, now)),
            }
        }
    }

    fn pending<'w>(&'w self, shard: &'w Shard, mut ids: MutexGuard<'_, Ids>, id: &Probe<'_>, now: u64) -> Ticket<'w> {
        ids.slots.insert(Key { hash: id.hash, id: id.id.into() }, Slot::Pending);
        Ticket { shard, window: self, id: Some(Key { hash: id.hash, id: id.id.into() }), at_ns: now }
    }

    /// Remembers an id found in the log when the topic was opened, appended
    /// at `landed` at `at_ns`; call in order of `at_ns`. An id already
    /// remembered keeps its first position.
    pub(crate) fn remember(&self, id: &str, landed: Landed, at_ns: u64, now: u64) {
        if now.saturating_sub(at_ns) >= self.window_ns {
            return;
        }
        let (probe, shard) = self.probe(id);
        let mut ids = shard.ids.lock();
        if ids.slots.contains_key(&probe as &dyn KeyLike) {
            return;
        }
        ids.slots.insert(Key { hash: probe.hash, id: id.into() }, Slot::Done { landed, at_ns });
        ids.order.push_back((at_ns, Key { hash: probe.hash, id: id.into() }));
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
            held += ids.slots.len() as u64;
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
        let shard = |id: &str| std::ptr::from_ref(w.probe(id).1);
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
