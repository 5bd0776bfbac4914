//! The topic map: topics by name, changed in place by one writer at a time
//! and read without a lock by any number of publishers.
//!
//! # The shape
//!
//! An open-addressing hash table with linear probing. Each [`Slot`] holds a
//! tag (the name's hash with its low bit set, or [`EMPTY`]), the name, and
//! the value behind an `ArcSwapOption`. The table itself is reached through
//! a crossbeam-epoch pointer, so that a bigger one can be swapped in whole.
//! A lookup is a hash, one epoch pin, the probe's tag loads (one, mostly)
//! and one `ArcSwapOption` load of the value: no reference count is
//! touched, no lock taken, nothing allocated. The value comes back behind
//! an `arc-swap` guard, which keeps it alive without a count of its own.
//!
//! Changes (creating and deleting topics) are serialised by the map's own
//! writer lock; the broker makes them under its control mutex anyway, so
//! that lock is never contended. An insert writes one slot (or, once the
//! table is three quarters full, builds the next table): O(1) amortised,
//! with nothing shared to copy and no other node's count to touch, which
//! is what made the persistent map it replaces cost more per insert as it
//! outgrew the caches (`rill-bench --scenario scale --scale-full`, the
//! `create us/topic` column, measures it).
//!
//! # A slot's life
//!
//! A slot of a table goes EMPTY -> KEYED (its tag and name written, once)
//! and never back: removing a name clears its value and leaves the name in
//! place (a tombstone), and inserting the name again stores a value there.
//! So a slot's name is written once, before any reader can see the slot as
//! keyed, and never while the table is shared; and the slots between a
//! name's home and its slot are keyed for the table's whole life, so a
//! probe that reaches an EMPTY slot has not passed the name. Tombstones
//! (and names that are no longer wanted) go when the table is rebuilt.
//!
//! # What a reader may see
//!
//! * During an insert into the current table: the slot EMPTY (the name is
//!   not there yet), or keyed with the value already stored, since the
//!   value is stored before the tag. The tag is stored with Release (M1)
//!   after the name is written and loaded with Acquire before the name is
//!   read: without M1 a reader could see the tag and read a name being
//!   written (the loom model `loom-tests/tests/topic_map.rs` finds that).
//! * During a removal: the value, or `None`; a lookup that started after
//!   the removal returned sees `None` (the `ArcSwapOption` store and load
//!   are sequentially consistent). The removed value is freed when its last
//!   holder lets go: the map's `store` pays the debts of readers that
//!   borrowed it, so nothing waits for a reclamation scheme.
//! * During a resize: the writer builds the next table (every live name,
//!   and the value being inserted) while nobody can see it, then publishes
//!   it with a Release store of the table pointer (M2), which readers load
//!   with Acquire: without M2 a reader could find the new table's memory
//!   as it was before the table was built (its slots' tags and names are
//!   also ordered by M1, each keyed with Release as in a shared table);
//!   the loom model finds a reader touching the new table's atomics with
//!   nothing ordering their creation before it. A reader that loaded the old table
//!   keeps reading it, unchanged from then on: it finds every name that was
//!   in the map when the table was replaced. The old table is retired to
//!   the epoch collector, with the references to the values it held; a
//!   value removed while an old table still holds it is freed when the
//!   collector frees that table (after every lookup that could read it has
//!   ended), not at once. Resizes are rare (one per doubling, or per
//!   quarter of the table used up by tombstones), so this is the exception.
//!
//! So a lookup finds every name that was in the map for the whole lookup,
//! and never one removed before the lookup started. Walking the map
//! ([`TopicMap::for_each`], [`TopicMap::names`]) gives the same promise per
//! name: every name there for the whole walk is visited once; one inserted
//! or removed during the walk may or may not be. It is not a snapshot: a
//! caller that needs one (subscribing, syncing the topics of a shared data
//! directory) holds the broker's control mutex, which every change takes.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::OnceLock;

use foldhash::SharedSeed;
use foldhash::fast::{FoldHasher, SeedableRandomState};

use arc_swap::{ArcSwapOption, Guard};

use crate::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use crate::sync::epoch::{self, Atomic, Owned};
use crate::sync::{Mutex, Name, UnsafeCell, ordering_or_weakened};

/// A value as the map holds it: std's `Arc`, which is what `arc-swap` swaps.
pub(crate) type Shared<V> = std::sync::Arc<V>;

/// The tag of a slot no name was ever written to. A keyed slot's tag has
/// its low bit set, so it is never this.
const EMPTY: u64 = 0;
/// Set in every keyed slot's tag (see [`EMPTY`]).
const KEYED: u64 = 1;
/// Slots of the smallest table.
const MIN_SLOTS: usize = 16;
/// A table is rebuilt before an insert would key more than this many
/// eighths of its slots: linear probing stays short below three quarters.
const MAX_LOAD_EIGHTHS: usize = 6;

/// Topics (or any `V`) by name; see the module docs.
pub(crate) struct TopicMap<V, S = NameHasher> {
    table: Atomic<Table<V>>,
    /// Serialises changes; holds what only writers read.
    writer: Mutex<Counts>,
    /// Live names, for readers that want a size (a hint while changes run).
    len: AtomicUsize,
    hasher: S,
    /// Slots of the smallest table (a power of two).
    min_slots: usize,
}

/// What the writer keeps of the current table.
#[derive(Debug, Default)]
struct Counts {
    /// Slots keyed (live names and tombstones).
    keyed: usize,
    /// Names with a value.
    live: usize,
}

struct Table<V> {
    slots: Box<[Slot<V>]>,
    /// `slots.len() - 1` (the length is a power of two).
    mask: usize,
}

struct Slot<V> {
    /// [`EMPTY`], or the hash of `name` with [`KEYED`] set.
    tag: AtomicU64,
    /// Written once, by the writer, before `tag` leaves [`EMPTY`] (M1).
    name: UnsafeCell<Option<Name>>,
    value: ArcSwapOption<V>,
}

// SAFETY: `name` is written once, by the writer (under the writer lock),
// while the slot's tag is EMPTY, and read only by a thread that loaded the
// tag keyed with Acquire (M1, pairing with the Release that follows the
// write) or that holds the writer lock; no write follows while the table is
// shared (a slot is never emptied). `tag` is atomic, and `value` is an
// `ArcSwapOption`, which is `Sync` for `V: Send + Sync`.
unsafe impl<V: Send + Sync> Sync for Slot<V> {}
// SAFETY: a slot owns its name (an `Arc<str>`) and the values it holds;
// moving it to another thread moves them, which `V: Send + Sync` allows.
unsafe impl<V: Send + Sync> Send for Slot<V> {}

impl<V> Slot<V> {
    fn new() -> Self {
        Slot { tag: AtomicU64::new(EMPTY), name: UnsafeCell::new(None), value: ArcSwapOption::empty() }
    }

    /// Whether the slot's name is `name`. The caller loaded its tag keyed
    /// with Acquire (M1), or holds the writer lock.
    fn is(&self, name: &str) -> bool {
        // SAFETY: the name was written before the tag the caller saw keyed
        // (M1) and is never written again while the table is shared.
        self.name.with(|n| unsafe { (*n).as_deref() == Some(name) })
    }

    /// The slot's name; as for [`Slot::is`].
    fn name(&self) -> Option<Name> {
        // SAFETY: as in `is`.
        self.name.with(|n| unsafe { (*n).clone() })
    }

    /// Keys an EMPTY slot with `name`: the name first, then the tag with
    /// Release (M1), so a reader that sees the tag reads the whole name.
    /// Only the writer calls this, on a slot it saw EMPTY.
    fn key(&self, name: Name, tag: u64) {
        // SAFETY: the slot is EMPTY, so no reader reads the name (readers
        // read it only after seeing the tag keyed), and the writer lock
        // keeps other writers out.
        self.name.with_mut(|n| unsafe { *n = Some(name) });
        // Release (M1): pairs with the Acquire in `Table::find`.
        self.tag.store(tag, ordering_or_weakened!("M1", Ordering::Release));
    }
}

/// Where a probe ended.
enum Probe<'t, V> {
    /// The slot keyed with the name (its value may be `None`: a tombstone).
    Found(&'t Slot<V>),
    /// The first EMPTY slot of the probe: the name is not in the table.
    Vacant(&'t Slot<V>),
}

impl<V> Table<V> {
    fn new(slots: usize) -> Self {
        debug_assert!(slots.is_power_of_two());
        Table { slots: (0..slots).map(|_| Slot::new()).collect(), mask: slots - 1 }
    }

    /// Probes for `name` (whose tag is `tag`) from its home slot. Ends: the
    /// table always has an EMPTY slot (it is never keyed past
    /// [`MAX_LOAD_EIGHTHS`]).
    fn find(&self, name: &str, tag: u64) -> Probe<'_, V> {
        let mut i = usize::try_from(tag >> 1).unwrap_or(usize::MAX) & self.mask;
        loop {
            let slot = &self.slots[i];
            // Acquire (M1): pairs with the Release in `Slot::key`, so the
            // name read below is the one written before this tag.
            let seen = slot.tag.load(ordering_or_weakened!("M1", Ordering::Acquire));
            if seen == EMPTY {
                return Probe::Vacant(slot);
            }
            if seen == tag && slot.is(name) {
                return Probe::Found(slot);
            }
            i = (i + 1) & self.mask;
        }
    }
}

/// A value found by [`TopicMap::get`]: borrowed through an `arc-swap`
/// guard, so holding it touches no reference count.
pub(crate) struct Found<V>(Guard<Option<Shared<V>>>);

impl<V> std::ops::Deref for Found<V> {
    type Target = Shared<V>;

    #[inline]
    fn deref(&self) -> &Shared<V> {
        match &*self.0 {
            Some(v) => v,
            // `get` returns a `Found` only for a guard holding a value.
            None => unreachable!("a Found holds a value"),
        }
    }
}

/// How the map hashes names: foldhash under secrets drawn for each map (the
/// folds' shared secret once per process, the starting value per map),
/// from the standard library's `RandomState`, which the operating system
/// seeds.
///
/// Why not `RandomState` itself: SipHash's rounds were the largest part of what
/// a publish by name does beyond a publish through a `Publisher` (callgrind
/// of `Broker::publish` against `Publisher::publish` in a loop), where
/// foldhash hashes a short name in a few multiplications. It resists
/// colliding names only from someone who does not know the secrets (its
/// README: "minimally DoS-resistant"), as the log's `KeyHasher` does for
/// keys and ids: no hash or table order is ever shown, the secrets differ
/// per process and per map, and what colliding names would cost is
/// longer probes for those names, never a wrong lookup.
#[derive(Clone)]
pub(crate) struct NameHasher(SeedableRandomState);

impl NameHasher {
    fn new() -> NameHasher {
        static SHARED: OnceLock<SharedSeed> = OnceLock::new();
        // SipHash under a secret key gives unpredictable outputs: one for
        // the process's shared secret, one for this map's start.
        let shared = SHARED.get_or_init(|| SharedSeed::from_u64(RandomState::new().hash_one(0u8)));
        NameHasher(SeedableRandomState::with_seed(RandomState::new().hash_one(1u8), shared))
    }
}

impl BuildHasher for NameHasher {
    type Hasher = FoldHasher<'static>;

    #[inline]
    fn build_hasher(&self) -> FoldHasher<'static> {
        self.0.build_hasher()
    }
}

impl<V> TopicMap<V, NameHasher> {
    /// An empty map, hashing with secrets of its own (names are chosen by
    /// users; see [`NameHasher`]).
    pub(crate) fn new() -> Self {
        Self::with_hasher(NameHasher::new(), MIN_SLOTS)
    }
}

impl<V> Default for TopicMap<V, NameHasher> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V, S: BuildHasher> TopicMap<V, S> {
    /// An empty map hashing with `hasher`, whose smallest table has
    /// `min_slots` slots (rounded up to a power of two, at least 2).
    pub(crate) fn with_hasher(hasher: S, min_slots: usize) -> Self {
        let min_slots = min_slots.max(2).next_power_of_two();
        TopicMap {
            table: Atomic::new(Table::new(min_slots)),
            writer: Mutex::new(Counts::default()),
            len: AtomicUsize::new(0),
            hasher,
            min_slots,
        }
    }

    fn tag(&self, name: &str) -> u64 {
        self.hasher.hash_one(name) | KEYED
    }

    /// The value under `name`, if there is one.
    #[inline]
    pub(crate) fn get(&self, name: &str) -> Option<Found<V>> {
        let tag = self.tag(name);
        let guard = epoch::pin();
        // Acquire (M2): pairs with the Release in `rebuild`, so the slots of
        // a table just swapped in are seen as the writer filled them.
        let table = self.table.load(ordering_or_weakened!("M2", Ordering::Acquire), &guard);
        // SAFETY: the table is retired only after it is unlinked, and freed
        // only after every guard pinned before that is dropped: `guard` is
        // held until the value is loaded.
        let table = unsafe { table.deref() };
        let Probe::Found(slot) = table.find(name, tag) else { return None };
        let value = slot.value.load();
        value.is_some().then(|| Found(value))
    }

    /// Whether `name` has a value.
    pub(crate) fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Live names (a hint while changes run).
    pub(crate) fn len(&self) -> usize {
        // Relaxed: a size for display; it orders nothing.
        self.len.load(Ordering::Relaxed)
    }

    /// Calls `f` with every value; see the module docs for what a walk
    /// during changes sees.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&Shared<V>)) {
        let guard = epoch::pin();
        // Acquire (M2): as in `get`.
        let table = self.table.load(ordering_or_weakened!("M2", Ordering::Acquire), &guard);
        // SAFETY: as in `get`; `guard` is held for the whole walk.
        let table = unsafe { table.deref() };
        for slot in table.slots.iter() {
            if let Some(v) = &*slot.value.load() {
                f(v);
            }
        }
    }

    /// Every value, collected (see [`TopicMap::for_each`]).
    pub(crate) fn values(&self) -> Vec<Shared<V>> {
        let mut out = Vec::with_capacity(self.len());
        self.for_each(|v| out.push(v.clone()));
        out
    }

    /// Every name with a value, unsorted (see [`TopicMap::for_each`]).
    pub(crate) fn names(&self) -> Vec<Name> {
        let guard = epoch::pin();
        // Acquire (M2): as in `get`.
        let table = self.table.load(ordering_or_weakened!("M2", Ordering::Acquire), &guard);
        // SAFETY: as in `for_each`.
        let table = unsafe { table.deref() };
        let mut out = Vec::with_capacity(self.len());
        for slot in table.slots.iter() {
            // Acquire (M1): the name is read only after its tag.
            if slot.tag.load(ordering_or_weakened!("M1", Ordering::Acquire)) != EMPTY
                && slot.value.load().is_some()
                && let Some(name) = slot.name()
            {
                out.push(name);
            }
        }
        out
    }

    /// Inserts `value` under `name`; gives it back if the name has a value.
    pub(crate) fn insert(&self, name: Name, value: Shared<V>) -> Result<(), Shared<V>> {
        let mut counts = self.writer.lock();
        let tag = self.tag(&name);
        let guard = epoch::pin();
        // Relaxed: only writers store the pointer, and they are ordered by
        // the writer lock.
        let current = self.table.load(Ordering::Relaxed, &guard);
        // SAFETY: the current table is only retired by a writer, and this
        // thread is the writer.
        let table = unsafe { current.deref() };
        match table.find(&name, tag) {
            Probe::Found(slot) => {
                if slot.value.load().is_some() {
                    return Err(value);
                }
                // The name's tombstone: its value again.
                slot.value.store(Some(value));
            }
            Probe::Vacant(slot) => {
                if (counts.keyed + 1) * 8 > table.slots.len() * MAX_LOAD_EIGHTHS {
                    self.rebuild(&mut counts, table, current, Some((name, tag, value)), &guard);
                } else {
                    // The value first: a reader that sees the tag finds it.
                    slot.value.store(Some(value));
                    slot.key(name, tag);
                    counts.keyed += 1;
                }
            }
        }
        counts.live += 1;
        // Relaxed: as in `len`.
        self.len.store(counts.live, Ordering::Relaxed);
        Ok(())
    }

    /// Removes the value under `name` if `pred` accepts it, and returns it.
    pub(crate) fn remove_if(&self, name: &str, pred: impl FnOnce(&Shared<V>) -> bool) -> Option<Shared<V>> {
        let mut counts = self.writer.lock();
        let guard = epoch::pin();
        // Relaxed: as in `insert`.
        let table = self.table.load(Ordering::Relaxed, &guard);
        // SAFETY: as in `insert`.
        let table = unsafe { table.deref() };
        let Probe::Found(slot) = table.find(name, self.tag(name)) else { return None };
        if !slot.value.load().as_ref().is_some_and(pred) {
            return None;
        }
        // The name stays, a tombstone, until the next rebuild.
        let removed = slot.value.swap(None);
        counts.live -= 1;
        // Relaxed: as in `len`.
        self.len.store(counts.live, Ordering::Relaxed);
        removed
    }

    /// Removes every value (closing the broker): an empty table in place of
    /// the current one.
    pub(crate) fn clear(&self) {
        let mut counts = self.writer.lock();
        let guard = epoch::pin();
        // Relaxed: as in `insert`.
        let current = self.table.load(Ordering::Relaxed, &guard);
        // SAFETY: as in `insert`.
        let table = unsafe { current.deref() };
        // The values go now, not with the retired table: closing lets go of
        // every topic at once (a lookup meanwhile finds nothing, which is
        // what it finds once the empty table is in).
        for slot in table.slots.iter() {
            slot.value.store(None);
        }
        self.swap_in(Table::new(self.min_slots), current, &guard);
        *counts = Counts::default();
        // Relaxed: as in `len`.
        self.len.store(0, Ordering::Relaxed);
    }

    /// Builds the next table from the live names of `table` (and `extra`,
    /// the name being inserted), sized for twice as many, and swaps it in.
    fn rebuild(
        &self,
        counts: &mut Counts,
        table: &Table<V>,
        current: epoch::Shared<'_, Table<V>>,
        extra: Option<(Name, u64, Shared<V>)>,
        guard: &epoch::Guard,
    ) {
        let live = counts.live + usize::from(extra.is_some());
        let next = Table::new((live * 2).max(self.min_slots).next_power_of_two());
        let mut keyed = 0;
        let mut put = |name: Name, tag: u64, value: Shared<V>| {
            if let Probe::Vacant(slot) = next.find(&name, tag) {
                slot.value.store(Some(value));
                slot.key(name, tag);
                keyed += 1;
            }
        };
        for slot in table.slots.iter() {
            // Relaxed: this thread is the writer, which keyed every slot.
            let tag = slot.tag.load(Ordering::Relaxed);
            if tag == EMPTY {
                continue;
            }
            if let (Some(value), Some(name)) = (slot.value.load_full(), slot.name()) {
                put(name, tag, value);
            }
        }
        if let Some((name, tag, value)) = extra {
            put(name, tag, value);
        }
        counts.keyed = keyed;
        self.swap_in(next, current, guard);
    }

    /// Publishes `next` in place of `current` and retires `current`.
    fn swap_in(&self, next: Table<V>, current: epoch::Shared<'_, Table<V>>, guard: &epoch::Guard) {
        // Release (M2): pairs with the Acquire in `get`: every slot written
        // above is seen by a reader that loads the new table.
        self.table.store(Owned::new(next), ordering_or_weakened!("M2", Ordering::Release));
        // SAFETY: `current` is unlinked (the store above replaced it, and
        // only writers store), so no lookup that starts from now on can
        // reach it; the collector frees it after every guard pinned before
        // now is dropped.
        unsafe { guard.defer_destroy(current) };
        // Hand the old table to the collector now, not when this thread's
        // bag fills.
        guard.flush();
    }
}

impl<V, S> Drop for TopicMap<V, S> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no other thread can reach the map, so no
        // guard can be protecting its table.
        unsafe {
            let guard = epoch::unprotected();
            let table = self.table.load(Ordering::Relaxed, guard);
            drop(table.into_owned());
        }
    }
}

impl<V, S> std::fmt::Debug for TopicMap<V, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Relaxed: as in `len`.
        f.debug_struct("TopicMap").field("len", &self.len.load(Ordering::Relaxed)).finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn name(s: &str) -> Name {
        Name::from(s)
    }

    /// Every name hashes alike: one probe chain, so every lookup reads
    /// every name before its own.
    #[derive(Clone, Copy, Default)]
    struct Colliding;

    impl BuildHasher for Colliding {
        type Hasher = ConstHasher;
        fn build_hasher(&self) -> ConstHasher {
            ConstHasher
        }
    }

    struct ConstHasher;

    impl std::hash::Hasher for ConstHasher {
        fn finish(&self) -> u64 {
            42
        }
        fn write(&mut self, _: &[u8]) {}
    }

    #[test]
    fn insert_get_remove_and_reinsert() {
        let map: TopicMap<u32> = TopicMap::new();
        for i in 0..1000u32 {
            map.insert(name(&format!("t/{i}")), Shared::new(i)).unwrap();
        }
        assert_eq!(map.len(), 1000);
        assert_eq!(map.insert(name("t/5"), Shared::new(0)).map_err(|v| *v), Err(0), "a second insert is refused");
        for i in 0..1000u32 {
            assert_eq!(**map.get(&format!("t/{i}")).unwrap(), i);
        }
        assert!(map.get("t/1000").is_none());
        assert!(map.remove_if("t/7", |v| **v == 8).is_none(), "the predicate decides");
        assert_eq!(map.remove_if("t/7", |v| **v == 7).map(|v| *v), Some(7));
        assert!(map.get("t/7").is_none() && !map.contains_key("t/7"));
        assert!(map.remove_if("t/7", |_| true).is_none());
        map.insert(name("t/7"), Shared::new(70)).unwrap();
        assert_eq!(**map.get("t/7").unwrap(), 70);
        let mut names: Vec<String> = map.names().iter().map(|n| n.to_string()).collect();
        names.sort_unstable();
        assert_eq!(names.len(), 1000);
        let mut sum = 0u64;
        map.for_each(|v| sum += u64::from(**v));
        assert_eq!(sum, (0..1000u64).sum::<u64>() - 7 + 70);
        map.clear();
        assert_eq!(map.len(), 0);
        assert!(map.get("t/1").is_none() && map.names().is_empty());
    }

    #[test]
    fn tombstones_are_dropped_by_rebuilds_and_values_freed_on_removal() {
        let map: TopicMap<u32, Colliding> = TopicMap::with_hasher(Colliding, 4);
        let kept = Shared::new(1);
        map.insert(name("kept"), kept.clone()).unwrap();
        for i in 0..200u32 {
            let n = format!("gone/{i}");
            let v = Shared::new(i);
            map.insert(name(&n), v.clone()).unwrap();
            assert_eq!(**map.get(&n).unwrap(), i);
            assert!(map.remove_if(&n, |_| true).is_some());
            // No reader holds it: the map's reference went with the removal
            // (or with a rebuild's old table, which the collector frees).
            assert!(map.get(&n).is_none());
            assert_eq!(**map.get("kept").unwrap(), 1);
        }
        // Churn of distinct names did not grow the table past its live size.
        let guard = epoch::pin();
        // SAFETY: pinned; the test is the only thread.
        let table = unsafe { map.table.load(Ordering::Acquire, &guard).deref() };
        assert!(table.slots.len() <= 8, "{} slots for one live name", table.slots.len());
        assert_eq!(map.len(), 1);
    }
}
