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
//! Each id is in one of three states, held by the shard its hash picks (16
//! shards, each a mutex over its ids, so publishers of different ids seldom
//! meet on one lock; a shard's ids are an age-ordered ring of entries and a
//! table of where each is in it, see `Ids`):
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
//!   returned): `Pending` becomes `Done` with the position, and every
//!   waiter is woken (waiters count themselves in the shard under its lock,
//!   so an owner that sees none skips the wake-up, a system call, without
//!   missing anyone).
//! * **abandoned** (the owner, when its append failed, or unwound): the id
//!   is removed and waiters are woken; the first to lock claims it and
//!   appends its own record, so a failed publish never hides a later one.
//! * **expired / evicted**: entries leave from the front of the ring (the
//!   oldest claim first) when they are older than the window (looked at
//!   whenever an id is appended into the shard, and by the stats), or when
//!   the shard holds more than its share of [`MAX_DEDUPE_IDS`] (the oldest
//!   goes, counted in `dedupe_evicted`). Memory is bounded by that count
//!   whatever the window.
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
//! the shard's table of places for the claim, then the entry pushed at the
//! back of the shard's ring and its place written into the slot the probe
//! ended on; one probe for the settle, which finds both in cache and the
//! entry by the sequence number the claim gave it, without comparing ids;
//! and a look at the ring's front. An id of up to [`INLINE_ID`] bytes is
//! copied into its entry, so nothing is allocated for it.
//!
//! On a window far larger than the caches (a million ids), a fresh id's
//! publish is bound by memory latency, not by instructions: the probe's
//! first read of the table is a random access. A slot is eight bytes, the
//! id's tag beside its place, so that read is usually the only line the
//! probe and the insert touch (the write after it hits), and the table is
//! a few bytes an id where the entries are about 72; the entries themselves
//! are written and dropped in order, at the ring's two ends. Once the
//! window is full, or its oldest ids expire, each publish also removes the
//! ring's front entry from the table: one more random read, found by its
//! place alone, and asked of the processor when the claim is made, so that
//! it overlaps the append. A hash table of whole entries would take a
//! second random line for the entry's write, and another for each expiry's
//! read of an old entry. The ring's blocks come and go with the ids, and
//! the table halves as they leave, so a window's memory follows the ids it
//! holds. A batch with ids asks the processor for the table line of each
//! id a few records before it claims it ([`Window::prefetch`]), so its
//! random reads overlap one another and the appends between them, where
//! a lone publish waits for its own. `rill-bench --scenario dedupe`
//! measures a publish with an id against the same record on a topic
//! without a window (`--batch N` in batches); `dedupe_window`, an example
//! of rill-bench, a window filled to its cap and kept there.
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

/// One id of a shard, in one of the states of the module docs: `Pending`
/// while `partition` is [`PENDING`], else `Done` at (`partition`,
/// `offset`).
#[derive(Debug)]
struct Entry {
    /// The id's hash, under the window's key: computed once per publish,
    /// it picks the shard and the table slot, and finds the entry's slot
    /// when the entry leaves, so the id is never hashed again.
    hash: u64,
    /// When the id was claimed (or, rebuilt on open, its record's stamp).
    at_ns: u64,
    offset: u64,
    partition: u32,
    /// No longer held: abandoned, or replaced by a newer entry of its id
    /// (claimed or remembered again after it expired). In no slot of the
    /// table; dropped when it reaches the ring's front.
    dead: bool,
    id: IdBytes,
}

impl Entry {
    /// The `Pending` entry of `id`, claimed at `now`.
    fn claimed(hash: u64, id: &str, now: u64) -> Entry {
        Entry { hash, at_ns: now, offset: 0, partition: PENDING, dead: false, id: IdBytes::new(id) }
    }

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

/// Most entries a shard's ring holds, dead ones included: twice what the
/// shard may hold live, so that ids abandoned or replaced in the middle of
/// the ring cannot grow it without bound before they reach its front.
const RING_CAPACITY: usize = 2 * SHARD_CAPACITY;

/// One shard's ids: the entries in the order they came (a ring), and a
/// table of where each held one is in it ([`Places`]).
///
/// Why two structures and not a hash table of entries: the table is what
/// a claim reads at random, and with eight bytes a slot, its tag beside
/// the entry's place, it is a small part of the window's memory and a
/// probe usually reads one line of it, the line an insert then writes; the
/// entries are written at the ring's back and leave from its front, in
/// order, which the caches and the prefetcher serve. An entry is read at
/// random only for a slot whose tag matches (its id's or, rarely, another
/// id's with the same tag), and expiry finds an entry's slot by its place,
/// without reading any other entry. `rill-bench --scenario dedupe` measures it.
#[derive(Debug, Default)]
struct Ids {
    /// Each held id's place in `ring`, as its sequence number (see
    /// `head`), under its hash's tag.
    places: Places,
    /// The entries, oldest first: expiry and eviction take them from the
    /// front.
    ring: Ring,
    /// The sequence number of the ring's front entry: entry `i` of the
    /// ring is number `head + i`, wrapping (a ring holds far fewer than
    /// 2^32 entries, see [`RING_CAPACITY`]).
    head: u32,
    /// Publishers waiting on `settled` for a `Pending` id of this shard: an
    /// owner settling its id wakes them only if there are any (a wake-up is
    /// a system call even with nobody to wake).
    waiting: usize,
}

/// Most entries in one block of a [`Ring`]: a few hundred KiB, so that a
/// ring grows without copying more than a block (a shard's window grows
/// under its lock) and gives memory back as its front advances.
const RING_BLOCK: usize = 4096;

/// A queue of entries in blocks of [`RING_BLOCK`]: pushed at the back,
/// popped at the front, and indexed from the front. Every block but the
/// last is full (the last may have room at its back); the first has had
/// its first `taken` entries popped, so entry `i` from the front is entry
/// `taken + i` of the blocks laid end to end, found with a shift and a
/// mask. A block grows as a `Vec` does until it is full (a shard holding a
/// few ids holds a few entries' memory), and goes once all of it is taken.
#[derive(Debug, Default)]
struct Ring {
    /// Each slot an entry, `None` once popped (no bigger than an entry:
    /// `Entry::dead`'s spare bit patterns hold the `None`).
    blocks: VecDeque<Vec<Option<Entry>>>,
    /// Entries popped from the first block.
    taken: usize,
    len: usize,
}

const _: () =
    assert!(RING_BLOCK.is_power_of_two() && std::mem::size_of::<Option<Entry>>() == std::mem::size_of::<Entry>());

impl Ring {
    fn len(&self) -> usize {
        self.len
    }

    fn front(&self) -> Option<&Entry> {
        self.blocks.front().and_then(|b| b.get(self.taken)).and_then(Option::as_ref)
    }

    fn push_back(&mut self, entry: Entry) {
        match self.blocks.back_mut() {
            Some(last) if last.len() < RING_BLOCK => last.push(Some(entry)),
            Some(_) => {
                // A ring that filled a block is a big one: its next block
                // is allocated whole, not grown by copies.
                let mut block = Vec::with_capacity(RING_BLOCK);
                block.push(Some(entry));
                self.blocks.push_back(block);
            }
            None => self.blocks.push_back(vec![Some(entry)]),
        }
        self.len += 1;
    }

    fn pop_front(&mut self) -> Option<Entry> {
        let first = self.blocks.front_mut()?;
        let entry = first.get_mut(self.taken)?.take()?;
        self.taken += 1;
        if self.taken == first.len() {
            // All of the block taken (if it is the last one too, the ring
            // is empty, and the next push starts a block).
            self.blocks.pop_front();
            self.taken = 0;
        }
        self.len -= 1;
        Some(entry)
    }

    /// (block, index in it) of the `i`-th entry from the front.
    fn locate(&self, i: usize) -> (usize, usize) {
        let at = self.taken + i;
        (at / RING_BLOCK, at % RING_BLOCK)
    }
}

impl std::ops::Index<usize> for Ring {
    type Output = Entry;

    fn index(&self, i: usize) -> &Entry {
        let (block, at) = self.locate(i);
        self.blocks[block][at].as_ref().expect("an entry within the ring's length")
    }
}

impl std::ops::IndexMut<usize> for Ring {
    fn index_mut(&mut self, i: usize) -> &mut Entry {
        let (block, at) = self.locate(i);
        self.blocks[block][at].as_mut().expect("an entry within the ring's length")
    }
}

/// Where the entry numbered `seq` is in a ring whose front is `head`.
fn place(head: u32, seq: u32) -> usize {
    seq.wrapping_sub(head) as usize
}

impl Ids {
    /// The entry of `id`, whose hash is `hash`.
    fn find(&mut self, hash: u64, id: &str) -> Option<&mut Entry> {
        let (_, at) = self.slot_of(hash, id)?;
        Some(&mut self.ring[at])
    }

    /// The slot of `id`, whose hash is `hash`, and where its entry is.
    fn slot_of(&self, hash: u64, id: &str) -> Option<(usize, usize)> {
        let slot = self.places.find(hash, |seq| self.ring[place(self.head, seq)].is(hash, id))?;
        Some((slot, place(self.head, self.places.seq(slot))))
    }

    /// Drops the ring's front entry (it has no slot, or its slot was just
    /// emptied or moved), numbering the next one the front.
    fn pop_front(&mut self) -> Option<Entry> {
        let entry = self.ring.pop_front()?;
        self.head = self.head.wrapping_add(1);
        Some(entry)
    }

    /// Adds `entry`, whose id is not held, at the ring's back; returns its
    /// sequence number.
    fn insert(&mut self, entry: Entry) -> u32 {
        let hash = entry.hash;
        let seq = self.head.wrapping_add(self.ring.len() as u32);
        self.ring.push_back(entry);
        self.places.insert(hash, seq);
        seq
    }

    /// The `Pending` entry of `id` (hash `hash`) that a claim numbered
    /// `seq`. Found by its number, without comparing ids, while it still
    /// has it: a number names one entry of the ring at a time. A prune
    /// that met the entry at the ring's front moved it to the back under a
    /// new number; then its old number has left with the front (and is
    /// not given out again before the numbers wrap), and the entry is
    /// found by its id.
    fn claimed(&mut self, hash: u64, seq: u32, id: &str) -> Option<&mut Entry> {
        let numbered = place(self.head, seq);
        let by_number = self.places.find(hash, |s| s == seq).is_some() && {
            let entry = &self.ring[numbered];
            entry.hash == hash && entry.pending()
        };
        let at = if by_number { numbered } else { self.slot_of(hash, id)?.1 };
        Some(&mut self.ring[at])
    }

    /// Lets `id` go: its slot is emptied and its entry marked dead.
    fn remove(&mut self, hash: u64, id: &str) {
        if let Some((slot, at)) = self.slot_of(hash, id) {
            self.ring[at].dead = true;
            self.places.remove(slot);
        }
    }

    /// If the ring's front entry will leave when this claim is settled
    /// (it is past the window at `now`, or the shard is full), asks the
    /// processor for the table line where its slot is looked for: that
    /// line is a random access, and the caller's append runs between now
    /// and the settle's [`Ids::prune`], so the read overlaps the append
    /// instead of following it.
    fn prefetch_leaving(&self, now: u64, window_ns: u64) {
        if let Some(front) = self.ring.front()
            && !front.dead
            && (now.saturating_sub(front.at_ns) >= window_ns || self.places.len() > SHARD_CAPACITY)
        {
            self.places.prefetch(front.hash);
        }
    }

    /// Drops ids older than the window from the ring's front, and the
    /// oldest beyond the shard's capacity (or the ring's); returns how many
    /// were evicted for room (not for age). A `Pending` entry met there
    /// cannot go (its owner settles it): it moves to the back, at most once
    /// per call for each entry the ring had.
    fn prune(&mut self, now: u64, window_ns: u64) -> u64 {
        let mut evicted = 0;
        let mut moves = self.ring.len();
        while let Some(front) = self.ring.front() {
            let (hash, seq) = (front.hash, self.head);
            if !front.dead {
                let expired = now.saturating_sub(front.at_ns) >= window_ns;
                let full = self.places.len() > SHARD_CAPACITY || self.ring.len() > RING_CAPACITY;
                if !expired && !full {
                    break;
                }
                let pending = front.pending();
                match self.places.find(hash, |s| s == seq) {
                    Some(slot) if pending => {
                        if moves == 0 {
                            break;
                        }
                        moves -= 1;
                        self.places.set_seq(slot, self.head.wrapping_add(self.ring.len() as u32));
                        let entry = self.pop_front().expect("the front");
                        self.ring.push_back(entry);
                        continue;
                    }
                    Some(slot) => {
                        self.places.remove(slot);
                        evicted += u64::from(!expired);
                    }
                    // A live entry always has a slot; were it not, it is
                    // held by nothing, and leaves as a dead one.
                    None => debug_assert!(false, "a live entry of the ring has no slot"),
                }
            }
            self.pop_front();
        }
        evicted
    }
}

/// The places of a shard's held ids: an open-addressing table with linear
/// probing, one `u64` a slot, 0 for an empty one, else the id's *tag* in
/// the high half and its entry's sequence number in the low half.
///
/// The tag is the low 32 bits of the id's hash with the top bit set (so
/// that no held slot is 0); a probe starts at the slot its low bits pick
/// (the shard was picked by bits from 32 up, see [`SHARD_SHIFT`]). The
/// table grows before it is [`MAX_LOAD_EIGHTHS`] full, rebuilt from the
/// tags alone; a removal shifts the slots after it back (no tombstones),
/// so a probe ends at the first empty slot.
#[derive(Debug)]
struct Places {
    slots: Box<[u64]>,
    len: usize,
}

/// The most a [`Places`] table is filled, in eighths: at five eighths a
/// probe for an absent id reads about three slots on average, within one
/// line, and a full shard's table of `SHARD_CAPACITY` ids stays at the
/// power of two above it.
const MAX_LOAD_EIGHTHS: usize = 5;
/// A table's slots at its first id, and the fewest it shrinks to (a power
/// of two).
const FIRST_SLOTS: usize = 16;
const _: () = assert!(FIRST_SLOTS.is_power_of_two() && SHARD_CAPACITY * 8 <= (2 * SHARD_CAPACITY) * MAX_LOAD_EIGHTHS);

impl Default for Places {
    /// No slots until the first id (a shard of a topic that sees few ids
    /// costs nothing more).
    fn default() -> Self {
        Places { slots: Box::default(), len: 0 }
    }
}

impl Places {
    /// Held ids.
    fn len(&self) -> usize {
        self.len
    }

    fn tag(hash: u64) -> u32 {
        hash as u32 | 1 << 31
    }

    /// Where a probe for `tag` starts (the table has slots).
    fn home(&self, tag: u32) -> usize {
        tag as usize & (self.slots.len() - 1)
    }

    /// The sequence number in held slot `slot`.
    fn seq(&self, slot: usize) -> u32 {
        self.slots[slot] as u32
    }

    fn set_seq(&mut self, slot: usize, seq: u32) {
        self.slots[slot] = self.slots[slot] & !u64::from(u32::MAX) | u64::from(seq);
    }

    /// Asks the processor for the line of `hash`'s first slot (where a
    /// probe for it starts); a hint, with no effect on what is found.
    fn prefetch(&self, hash: u64) {
        if self.slots.is_empty() {
            return;
        }
        let first: *const u64 = &self.slots[self.home(Self::tag(hash))];
        #[cfg(target_arch = "x86_64")]
        // SAFETY: SSE, which the intrinsic needs, is part of x86_64's
        // baseline; a prefetch reads nothing into the program and never
        // faults, and `first` points into `slots` anyway.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(first.cast());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = first;
    }

    /// The slot whose tag is `hash`'s and whose sequence number `is` takes.
    fn find(&self, hash: u64, mut is: impl FnMut(u32) -> bool) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let tag = Self::tag(hash);
        let mask = self.slots.len() - 1;
        let mut i = self.home(tag);
        loop {
            let slot = self.slots[i];
            if slot == 0 {
                return None;
            }
            if (slot >> 32) as u32 == tag && is(slot as u32) {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// Files `seq` under `hash`'s tag (the id is not held).
    fn insert(&mut self, hash: u64, seq: u32) {
        if (self.len + 1) * 8 > self.slots.len() * MAX_LOAD_EIGHTHS {
            self.resize((self.slots.len() * 2).max(FIRST_SLOTS));
        }
        self.put(u64::from(Self::tag(hash)) << 32 | u64::from(seq));
        self.len += 1;
    }

    /// Refiles every held slot in a table of `slots` slots.
    fn resize(&mut self, slots: usize) {
        let old = std::mem::replace(&mut self.slots, vec![0; slots].into_boxed_slice());
        for value in old.iter().copied().filter(|&v| v != 0) {
            self.put(value);
        }
    }

    /// Puts a held slot's value in the first empty slot from its home.
    fn put(&mut self, value: u64) {
        let mask = self.slots.len() - 1;
        let mut i = self.home((value >> 32) as u32);
        while self.slots[i] != 0 {
            i = (i + 1) & mask;
        }
        self.slots[i] = value;
    }

    /// Empties held slot `slot`, shifting back every slot after it (up to
    /// an empty one) whose probe would otherwise no longer reach it.
    fn remove(&mut self, mut slot: usize) {
        let mask = self.slots.len() - 1;
        let mut next = slot;
        loop {
            next = (next + 1) & mask;
            let value = self.slots[next];
            if value == 0 {
                break;
            }
            // `value` may stay where it is if its home lies cyclically in
            // (slot, next]: a probe from there reaches `next` without
            // passing the slot being emptied.
            let home = self.home((value >> 32) as u32);
            let stays = if slot <= next { slot < home && home <= next } else { slot < home || home <= next };
            if !stays {
                self.slots[slot] = value;
                slot = next;
            }
        }
        self.slots[slot] = 0;
        self.len -= 1;
        // A window that emptied (its ids expired) gives its table back,
        // halved while an eighth full or less (a quarter after), so a
        // burst of ids does not hold its memory for good.
        if self.slots.len() > FIRST_SLOTS && self.len * 8 <= self.slots.len() {
            self.resize(self.slots.len() / 2);
        }
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
    /// The sequence number the claim gave the id's entry.
    seq: u32,
}

impl Ticket<'_> {
    /// The record was appended at `landed`: the id becomes `Done`.
    pub(crate) fn appended(mut self, landed: Landed) {
        let (hash, id) = self.id.take().expect("a ticket is settled once");
        let mut ids = self.shard.ids.lock();
        // Its `Pending` entry is still there: only its owner (this ticket)
        // removes or settles it; expiry and eviction take `Done` ones only.
        let entry = ids.claimed(hash, self.seq, id).expect("a pending id stays until its owner settles it");
        debug_assert!(entry.pending() && entry.at_ns == self.at_ns);
        (entry.partition, entry.offset) = (landed.partition, landed.offset);
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
            ids.remove(hash, id);
            // As a settle does: its claim pushed an entry, dead now, which
            // must not outlive its turn at the front (publishes that all
            // fail would otherwise grow the ring without bound).
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
                found => {
                    // Expired (not yet pruned): a new entry replaces it, at
                    // the ring's back, where its age puts it.
                    if found.is_some() {
                        ids.remove(hash, id);
                    }
                    let seq = ids.insert(Entry::claimed(hash, id, now));
                    ids.prefetch_leaving(now, self.window_ns);
                    drop(ids);
                    return Claim::Claimed(Ticket { shard, window: self, id: Some((hash, id)), at_ns: now, seq });
                }
            }
        }
    }

    /// Asks the processor for the line of the table where a claim of `id`
    /// starts its probe, and returns at once (a hint: what a claim finds
    /// does not depend on it). A batch calls it for each of its ids before
    /// it claims the first, so that in a window larger than the caches the
    /// batch's random reads of the table overlap, where one claim after
    /// another would wait for each in turn (see "Cost").
    pub(crate) fn prefetch(&self, id: &str) {
        let (hash, shard) = self.shard(id);
        shard.ids.lock().places.prefetch(hash);
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
            // process's, found by a catch-up), which replaces it.
            Some(old) if !old.pending() && now.saturating_sub(old.at_ns) >= self.window_ns => {
                ids.remove(hash, id);
            }
            Some(_) => return,
            None => {}
        }
        ids.insert(Entry { hash, at_ns, offset, partition, dead: false, id: IdBytes::new(id) });
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
            held += ids.places.len() as u64;
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
    lock: crate::log::file::LockFile,
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
        let lock = crate::log::file::open_lock_file(&path)?;
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
        // The first "a", dead in the ring since, did not drop the second.
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
        // It expires by its own age, not by its replaced entries' ages.
        assert_eq!(w.stats(t0 + 219 * MS).ids, 1);
        assert_eq!(claim_and_append(&w, "a", t0 + 220 * MS, 10), None);
    }

    #[test]
    fn a_pending_id_at_the_front_outlives_the_expiry_of_those_behind_it() {
        let w = Window::new(100);
        let t0 = 1_000 * MS;
        // Ids of one shard (the window's hash is seeded afresh each time).
        let mut of_one = (0..).map(|i| format!("id{i}")).filter(|id| std::ptr::eq(w.shard(id).1, w.shard("slow").1));
        let (b, c) = (of_one.next().expect("an id"), of_one.next().expect("an id"));
        let Claim::Claimed(slow) = w.claim("slow", t0) else { panic!("first claim") };
        assert_eq!(claim_and_append(&w, &b, t0 + MS, 1), None);
        // Both are past the window: b goes, "slow" (still being appended)
        // moves behind c and stays held.
        assert_eq!(claim_and_append(&w, &c, t0 + 200 * MS, 2), None);
        assert_eq!(w.stats(t0 + 200 * MS).ids, 2);
        slow.appended(Landed { partition: 0, offset: 3 });
        assert_eq!(claim_and_append(&w, &c, t0 + 201 * MS, 9), Some(Landed { partition: 0, offset: 2 }));
        // Settled, "slow" is as old as its claim: past the window, whatever
        // its place in the ring (it leaves once c has).
        assert_eq!(claim_and_append(&w, "slow", t0 + 201 * MS, 4), None);
        assert_eq!(w.stats(t0 + 300 * MS).ids, 1, "c gone, the second slow not yet");
    }

    #[test]
    fn abandoned_entries_leave_the_ring_when_they_reach_its_front() {
        let w = Window::new(100);
        // An id of "a"'s shard, ahead of "a" in its ring.
        let z = (0..)
            .map(|i| format!("z{i}"))
            .find(|z| std::ptr::eq(w.shard(z).1, w.shard("a").1))
            .expect("some id shares a shard with a");
        assert_eq!(claim_and_append(&w, &z, 0, 0), None);
        for i in 0..10u64 {
            match w.claim("a", i) {
                Claim::Claimed(ticket) => drop(ticket),
                Claim::Duplicate(_) => panic!("an abandoned id is not held"),
            }
        }
        assert_eq!(claim_and_append(&w, "a", 60 * MS, 1), None);
        let ring_len = || w.shard("a").1.ids.lock().ring.len();
        assert_eq!(ring_len(), 12, "the dead entries wait behind z");
        assert_eq!(w.stats(120 * MS).ids, 1);
        assert_eq!(ring_len(), 1, "z expired, and the dead entries behind it are dropped");
        assert_eq!(w.stats(160 * MS).ids, 0);
        assert_eq!(ring_len(), 0);
    }

    #[test]
    fn publishes_that_all_fail_leave_nothing_behind() {
        let w = Window::new(100);
        for i in 0..100_000u64 {
            match w.claim(&format!("f{i}"), i) {
                Claim::Claimed(ticket) => drop(ticket),
                Claim::Duplicate(_) => panic!("an abandoned id is not held"),
            }
        }
        let left: usize = w.shards.get().expect("made").iter().map(|s| s.ids.lock().ring.len()).sum();
        assert_eq!((w.stats(100_000).ids, left), (0, 0));
    }

    /// Heap bytes a window's shards hold for their ids: ring blocks and
    /// tables, by capacity.
    fn window_bytes(w: &Window) -> usize {
        w.shards.get().map_or(0, |shards| {
            shards
                .iter()
                .map(|s| {
                    let ids = s.ids.lock();
                    let ring: usize = ids.ring.blocks.iter().map(Vec::capacity).sum();
                    ring * std::mem::size_of::<Entry>() + ids.places.slots.len() * 8
                })
                .sum()
        })
    }

    #[test]
    fn a_window_holds_memory_for_the_ids_it_holds() {
        let w = Window::new(100);
        for i in 0..32u64 {
            assert_eq!(claim_and_append(&w, &format!("id{i}"), i, i), None);
        }
        // A few entries and slots a shard (however the ids fall in the
        // shards: each shard with one holds a small block and a first
        // table), not a block of RING_BLOCK entries (several hundred KiB).
        let few = window_bytes(&w);
        assert!(few <= 32 << 10, "{few} bytes for 32 ids");
        for i in 32..200_000u64 {
            assert_eq!(claim_and_append(&w, &format!("id{i}"), MS, i), None);
        }
        let many = window_bytes(&w);
        assert!(many > 200_000 * std::mem::size_of::<Entry>(), "{many} bytes for 200,000 ids");
        // All expired: the blocks and most of the tables go back.
        assert_eq!(w.stats(200 * MS).ids, 0);
        assert!(window_bytes(&w) <= SHARDS * FIRST_SLOTS * 8, "{} bytes for no ids", window_bytes(&w));
    }

    /// A small xorshift: the tests below want many operations, not
    /// particular ones.
    fn next(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn places_agree_with_a_plain_list_through_growth_removal_and_shrinking() {
        let mut places = Places::default();
        // (hash, seq) of every held slot. Hashes from a small range, so
        // that tags collide and probes run long and wrap.
        let mut held: Vec<(u64, u32)> = Vec::new();
        let mut state = 0x9e37_79b9_7f4a_7c15;
        let mut seq = u32::MAX - 1_000; // wraps during the test
        for round in 0..200_000u64 {
            let r = next(&mut state);
            // Grows for the first half, mostly shrinks in the second.
            let insert = if round < 100_000 { !r.is_multiple_of(4) } else { r.is_multiple_of(4) };
            if insert || held.is_empty() {
                let hash = (next(&mut state) % 50_000) | ((r & 0xf) << 40);
                places.insert(hash, seq);
                held.push((hash, seq));
                seq = seq.wrapping_add(1);
            } else {
                let (hash, s) = held.swap_remove(r as usize % held.len());
                let slot = places.find(hash, |x| x == s).expect("a held place is found");
                assert_eq!(places.seq(slot), s);
                if r.is_multiple_of(3) {
                    // Moved: found under its new number, not its old.
                    places.set_seq(slot, s ^ 0x8000_0000);
                    assert!(places.find(hash, |x| x == s).is_none());
                    let moved = places.find(hash, |x| x == s ^ 0x8000_0000).expect("moved");
                    places.remove(moved);
                } else {
                    places.remove(slot);
                }
                assert!(places.find(hash, |x| x == s).is_none(), "a removed place is gone");
            }
            assert_eq!(places.len(), held.len());
        }
        for &(hash, s) in &held {
            assert!(places.find(hash, |x| x == s).is_some());
        }
        assert!(places.slots.len() * MAX_LOAD_EIGHTHS >= places.len() * 8);
        while let Some((hash, s)) = held.pop() {
            places.remove(places.find(hash, |x| x == s).expect("held"));
        }
        assert_eq!(places.slots.len(), FIRST_SLOTS, "an emptied table shrinks back");
    }

    #[test]
    fn a_ring_indexes_from_its_front_across_blocks() {
        let mut ring = Ring::default();
        let mut model = VecDeque::new();
        let mut state = 0x2545_f491_4f6c_dd1d;
        let entry = |at_ns| Entry { hash: 0, at_ns, offset: 0, partition: 0, dead: false, id: IdBytes::new("x") };
        for at in 0..(5 * RING_BLOCK as u64) {
            ring.push_back(entry(at));
            model.push_back(at);
            if next(&mut state).is_multiple_of(3) {
                assert_eq!(ring.pop_front().map(|e| e.at_ns), model.pop_front());
            }
            if at.is_multiple_of(997) {
                assert_eq!(ring.len(), model.len());
                for (i, &want) in model.iter().enumerate() {
                    assert_eq!(ring[i].at_ns, want);
                }
            }
        }
        while let Some(want) = model.pop_front() {
            assert_eq!(ring.front().map(|e| e.at_ns), Some(want));
            assert_eq!(ring.pop_front().map(|e| e.at_ns), Some(want));
        }
        assert!(ring.pop_front().is_none() && ring.blocks.is_empty());
    }

    #[test]
    fn claims_answer_as_a_model_window_does_through_settles_abandons_and_expiry() {
        // Few ids and a short window, so ids are claimed again, expire,
        // are abandoned and remembered in every order; each answer is
        // checked against a plain map of what the window promises.
        #[derive(Clone, Copy, Debug, PartialEq)]
        enum Held {
            Pending,
            Done(Landed, u64),
        }
        const IDS: u64 = 40;
        let w = Window::new(100);
        let names: Vec<String> = (0..IDS).map(|i| format!("id{i}")).collect();
        let mut model: std::collections::HashMap<&str, Held> = Default::default();
        let mut tickets: Vec<(&str, Ticket<'_>)> = Vec::new();
        let mut state = 0x853c_49e6_748f_ea9b;
        let (mut now, mut offset) = (1_000 * MS, 0u64);
        let (mut duplicates, mut remembered, mut abandoned) = (0, 0, 0);
        for _ in 0..200_000 {
            let r = next(&mut state);
            let id = names[(r % IDS) as usize].as_str();
            let live = |held: Option<&Held>, now: u64| match held {
                Some(Held::Done(landed, at)) if now - at < 100 * MS => Some(*landed),
                _ => None,
            };
            match (r >> 8) % 8 {
                // A claim (never of an id being appended: it would wait).
                0..=2 if model.get(id) != Some(&Held::Pending) => match w.claim(id, now) {
                    Claim::Duplicate(landed) => {
                        assert_eq!(Some(landed), live(model.get(id), now), "{id}");
                        duplicates += 1;
                    }
                    Claim::Claimed(ticket) => {
                        assert_eq!(live(model.get(id), now), None, "{id} was held");
                        model.insert(id, Held::Pending);
                        tickets.push((id, ticket));
                    }
                },
                3 | 4 if !tickets.is_empty() => {
                    let (id, ticket) = tickets.swap_remove(r as usize % tickets.len());
                    let landed = Landed { partition: (r % 3) as u32, offset };
                    offset += 1;
                    let at = ticket.at_ns;
                    ticket.appended(landed);
                    model.insert(id, Held::Done(landed, at));
                }
                5 if !tickets.is_empty() => {
                    let (id, ticket) = tickets.swap_remove(r as usize % tickets.len());
                    drop(ticket);
                    model.remove(id);
                    abandoned += 1;
                }
                6 if model.get(id) != Some(&Held::Pending) => {
                    // Found in the log, stamped up to a window ago.
                    let at = now - (r >> 20) % (120 * MS);
                    let landed = Landed { partition: 9, offset };
                    offset += 1;
                    w.remember(id, landed, at, now);
                    let fresh = now - at < 100 * MS;
                    if fresh && live(model.get(id), now).is_none() {
                        model.insert(id, Held::Done(landed, at));
                        remembered += 1;
                    }
                }
                _ => now += (r >> 16) % (3 * MS),
            }
        }
        drop(tickets);
        // Each kind of answer was met often, not just the easy ones.
        assert!(
            duplicates > 10_000 && remembered > 1_000 && abandoned > 1_000,
            "{duplicates} {remembered} {abandoned}"
        );
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
