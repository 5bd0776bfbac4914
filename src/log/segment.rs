//! One segment of a partition's log: a contiguous byte region and an offset
//! index, appended to by many publishers at once without locks.
//!
//! Why it is long: the essay below is a fifth of it, and the rest is one
//! mechanism, a segment's tail word, slots and seal and the buffers that
//! hold them (the pool that hands the buffers out is `pool.rs`).
//!
//! # The append protocol
//!
//! ## The tail word
//!
//! Each segment has one 64-bit *tail word* that packs how much of it has been
//! handed out:
//!
//! ```text
//!  63            40 39                         0
//! +----------------+----------------------------+
//! | records (24 b) |        bytes (40 b)        |
//! +----------------+----------------------------+
//! ```
//!
//! A publisher reserves room for `n` records of `b` bytes in total with **one
//! `fetch_add(n << 40 | b)`**. The value it gets back, `(index, pos)`, names its
//! slots `index..index + n` in the offset index and its bytes `pos..pos + b` in
//! the region. Because both fields move in the same atomic step, record `i + 1`
//! always starts where record `i` ends: the region holds the records in offset
//! order with no gaps, and a reader can walk it by length alone.
//!
//! ## The three outcomes of a reservation
//!
//! * **Granted**: `index + n <= slots` and `pos + b <= capacity`. The range is
//!   the caller's alone.
//! * **Sealer**: the reservation did not fit, and the word it replaced still
//!   described a segment that was not over-full (`index <= slots` and
//!   `pos <= capacity`). Exactly one reservation per segment ends like this,
//!   because after it the word is over-full for good: both fields only grow.
//!   Every reservation before it was granted, so `index` is the segment's final
//!   record count. This publisher *seals* the segment and installs the next one.
//! * **Full**: the word was already over-full. Some other publisher is the
//!   sealer; this one waits briefly for the next segment and retries there.
//!   If the sealer cannot allocate the next segment, the waiters get its error
//!   (see "A roll that fails" in `log/dir.rs`).
//!
//! Failed reservations still add to the word, so both fields must be shown
//! never to overflow. A thread fails at most once on a segment: after `Full` it
//! waits until the directory names a newer segment, or (if the roll failed)
//! returns an error, and later appends see the stalled directory and do not
//! reserve in this segment again (see `log/dir.rs`). So the overshoot is at
//! most one reservation per thread, and a reservation is bounded in both
//! fields:
//!
//! * bytes: at most a configured segment (a record is at most a segment, a
//!   batch part is cut to fit one; the early seal of `Log::expire` reserves
//!   one byte more than the segment, so that it is never granted; a log's
//!   small first segment, see `log/dir.rs`, is smaller than the configured
//!   size, so a reservation can exceed it, but not the configured size),
//!   and a segment is at most `MAX_SEGMENT_BYTES` (1 GiB). The
//!   40-bit field holds 1 TiB, so it would take over a thousand threads
//!   failing at once on the same segment to carry into the record field;
//! * records: at most `MAX_RESERVATION_RECORDS` (4096; `append_batch` cuts
//!   larger batches into parts). The 24-bit field holds 16 Mi, the largest
//!   index is `MAX_SEGMENT_RECORDS` (4 Mi), so it would take over three
//!   thousand threads failing at once to wrap it, which `reserved()` would
//!   then misread. Without the cap, four failed batch reservations of 4 Mi
//!   records each could do it.
//!
//! ## The states of a record slot
//!
//! Slot `i` of the offset index is a `u32`:
//!
//! * `0`: **not committed**. Either nobody has reserved offset `base + i` yet, or
//!   a publisher has reserved it and is still writing.
//! * `pos / 8 + 1`: **committed**. The record is complete at byte `pos`.
//!
//! The publisher writes header, key, attributes and payload into its range, then
//! stores the slot with `Release`. A reader loads the slot with `Acquire` (the
//! pair is L1 to `.ci/fence-check`, which weakens both to `Relaxed`); once
//! it sees a committed value, the synchronises-with edge makes every byte of the
//! record visible, and nobody writes those bytes again while the segment lives.
//! A reader that finds slot `i` not committed stops there, even if `i + 1` is
//! committed: offsets are delivered in order, and the publisher holding `i` will
//! signal again when it commits.
//!
//! ## Sealing
//!
//! The sealer stores the final record count into `sealed` (plus one, so
//! that zero means open, as a fresh segment file's zeros read) *before* it
//! makes the next segment visible. A reader at slot `i` that is not committed loads
//! `sealed`: if the segment is sealed at a count `<= i`, the reader is past
//! the end of this segment and moves to the next one. Sealing first closes a
//! race: no record of the next segment can be committed (and signalled)
//! before the seal is visible, so a reader woken by such a record always
//! learns that this segment has ended and never goes idle in front of a slot
//! that will never be filled.
//!
//! In memory the seal needs no ordering of its own, because the count is the
//! whole message: nobody reads, on the strength of having seen the seal,
//! anything else the sealer wrote. (A durable log's one exception: the
//! sealer writes the file's end mark just before the seal, and a sync round
//! that sees the seal flushes the file through that mark, so there the
//! `Release`/`Acquire` pair below orders the mark before the flush; loom
//! cannot model a file, so that case is argued, not modelled.) A reader past the end goes on to load the
//! directory with its own `Acquire` (L2 in `log/dir.rs`), retention and the
//! roll find the count through a directory they loaded that way, the durable
//! flusher reads the records below the count through their slots (L1), and
//! `reserved` reports the number. What makes the seal *visible* where it
//! must be is happens-before through L2: the seal is sequenced before the
//! `Release` exchange that installs the next segment (or publishes a stalled
//! roll), so anyone who reaches that directory, or is woken by a record of
//! the next segment (a chain that starts at the exchange), sees the seal by
//! coherence. It is still stored `Release` and loaded `Acquire`: that costs
//! nothing on x86, and it prunes loom's search (a reader that sees the seal
//! then sees less stale data), which keeps the log models inside CI's time:
//! with both `Relaxed`, `retention_trims_while_a_reader_is_inside_the_head_segment`
//! explores more executions and runs longer. Neither is named for `.ci/fence-check` (once
//! L3): in memory the argument above, not a model, shows them unneeded, and
//! the durable case (the end mark) is one loom cannot run.
//! L1 and L2 are each shown needed: weakened to `Relaxed`, a loom model in
//! `loom-tests/tests/log.rs` fails.
//!
//! ## Races survived
//!
//! * Two publishers racing for the last bytes: the fetch-add orders them; one is
//!   granted, the next becomes the sealer, later ones see `Full`.
//! * A publisher holding an early slot while a later one commits: readers wait
//!   at the early slot (it reads as not committed) and are signalled when it
//!   commits.
//! * A publisher that loaded a stale (already sealed) segment: its fetch-add
//!   sees an over-full word, so it gets `Full`, never a slot in a closed segment.
//! * A reader still inside a segment that retention has unlinked: it holds an
//!   `Arc` to the segment, so the bytes stay valid until it lets go (see
//!   `log/dir.rs` for how the `Arc` is taken safely).
//! * A publisher in another process, appending to the same segment file
//!   through a mapping of its own: the tail word, the seal and the slots are
//!   in the file (see "Where the state lives" at [`Buffers`]), so its
//!   fetch-add and its commits are the same atomic operations on the same
//!   words, and every race above is the same race. Nothing new is ordered:
//!   two mappings of one page are one memory location to the hardware's
//!   coherence, and the Release/Acquire pairs hold between processes as
//!   between threads. (Who creates the file, and how the other finds it
//!   whole, is not this file's: see "The roll across processes" in
//!   `log/dir.rs`.)
//!
//! ## An abandoned reservation (a log shared by processes)
//!
//! A publisher in another process can die between its fetch-add and its
//! commit. Its slot then stays not committed for ever, and every reader
//! would wait at it. So in a segment shared by processes (`shared`, fixed
//! when the segment is built; a log opened for one process keeps the plain
//! store above, unchanged) a slot has a third state, and the commit is a
//! compare-and-swap:
//!
//! * `ABANDONED` (`u32::MAX`, never a committed value): **given up**. The
//!   offset holds no record; every reader passes over it, counting it as
//!   nothing (it is not in `missed`, which counts records retention
//!   trimmed: no record is missed, none was ever there), and the sync
//!   rounds of a durable log pass over it too.
//!
//! Who moves the slot, and when:
//!
//! * **The writer** commits with `compare_exchange(UNCOMMITTED, pos / 8 +
//!   1)`, `Release` on success (A1, the same pairing as L1 with the
//!   readers' `Acquire`). If it fails, the slot was given up first: the
//!   append returns [`Error::Timeout`](crate::Error::Timeout) (the record is
//!   not in the log; its publisher took longer than the bound, and was
//!   never told the record was appended, so nothing acknowledged is lost),
//!   and a batch gives up the rest of its own reservation at once.
//! * **A claimer**, a reader waiting at a slot it has seen reserved and not
//!   committed for the abandon bound (`ABANDON_AFTER` in `dir.rs`, 1 s by
//!   default, set per log by the crate), gives up every slot still not
//!   committed among those reserved when its wait began (all of them
//!   reserved at least the bound ago): one `compare_exchange(UNCOMMITTED,
//!   ABANDONED)` each, `Relaxed`, since a claim publishes nothing: no byte
//!   of the record is written or read by the claimer or by anyone who sees
//!   the claim.
//!
//! What a reader needs to step over the hole is the slot alone. Readers
//! never walk the region by length: each finds its record's bytes through
//! its own slot, so the dead writer's length, position and bytes (which
//! it may never have written) are not needed, and the claimer leaves the
//! bytes as they are (a writer that is only late may still be copying into
//! them; no one else ever reads them). The given-up state is in the file's
//! index, so a process that maps the file later sees it, and recovery reads
//! it (the one value it takes from the index: a record it finds at such an
//! offset becomes a skip record, see "Abandoned reservations" in
//! `recovery.rs`). A durable segment with such a slot gets no completion
//! marker (`durable.rs`), so recovery scans it as an incomplete file, whose
//! holes it fills.
//!
//! Who notices the wait: a reader learns that the slot it waits at was
//! reserved from the tail word, the line every publisher's fetch-add
//! writes, so a reader that loaded it at every poll would take it out of
//! the publishers' caches before each of their publishes. A
//! subscription's cursor, and a pull consumer's, therefore polls lightly
//! (`Cursor::poll_lightly`):
//! it looks at the tail word only once it has found its next record
//! missing for a millisecond, and then once in 64 polls, so that a
//! drainer spinning at a hole still claims it (a little after the bound),
//! while one spinning at the end of the log leaves the line alone. A
//! drainer that goes to sleep at a hole leaves it to its process's
//! doorbell, which looks at every ring and once the bound has passed ("A
//! reservation nobody commits" in `broker/doorbell.rs`; it does so for
//! a consumer whether it sleeps or not). Every other cursor looks at
//! every poll.
//!
//! One rule keeps the offsets agreed: a reader (or a sync round) passes
//! over a given-up slot only once it knows the slot lies before the
//! segment's end: the segment is sealed past it, or a slot after it is
//! committed (`Segment::passable`). A slot past every committed one may lie
//! past the count a taken-over seal ends the segment at (below).
//!
//! Races survived:
//!
//! * **The writer's late commit against the claim**: both are a
//!   compare-and-swap from `UNCOMMITTED` on the same word; exactly one
//!   wins. If the writer wins, the record is committed as ever (readers
//!   see it through A1); if the claim wins, the writer's fails, and no
//!   reader ever sees the record.
//! * **Two claimers** (readers in two processes, or two cursors of one):
//!   the second one's swap fails, or its load sees the slot final first;
//!   both then pass over the same slot.
//! * **A claim against a reader**: a reader sees `UNCOMMITTED` (and waits,
//!   then looks again), `ABANDONED` (passes over it, reading nothing), or
//!   the commit (reads the record through A1); never anything in between.
//!
//! The loom models in `loom-tests/tests/log_abandon.rs` run these races
//! on the real code, on a log in memory whose segments are shared ones
//! (loom's atomics cannot live in a file): the late commit against the
//! claim, two claimers, and the taken-over seal below against the late
//! sealer. A1 is in `.ci/fence-check`: weakened to `Relaxed`, the first
//! model fails (the reader reads the record's bytes unordered with their
//! write). What the models cannot show is the file: that a process mapping
//! it later, or recovery, sees the claim; the tests in `procs_tests.rs`
//! do, with real processes.
//!
//! ## A sealer that dies before it seals
//!
//! The fetch-add that overflows a segment elects its sealer; if that
//! publisher's process dies before the seal, everyone else waits for the
//! seal for ever: publishers told `Full`, and readers at the end of the
//! segment. In a shared segment a waiter that has seen the segment
//! over-full (`Segment::awaits_seal`) and unsealed for the abandon bound
//! seals it itself (`Segment::take_over_seal`): it gives up every slot
//! reserved and not committed (every granted reservation was made before
//! the election, so at least the bound ago), after which every slot below
//! the tail word's count is final; it seals at one past the last committed
//! slot; the slots after it, given up, are past the end. The seal is a
//! compare-and-swap from "open" (`Release`, as the seal's store; `Acquire`
//! on failure, as `sealed_count` loads the winner's), for the elected
//! sealer too, which adopts the count that won if it was only late. The
//! roll then goes on as "The roll across processes" (`dir.rs`) says, its
//! file made by whoever links its name first (a publisher that took the
//! seal over takes the roll over at once).
//!
//! Races survived: **two takers** compute the same count (the slots are
//! final once either has claimed them), and the seal's compare-and-swap
//! keeps one anyway; **a taker against the late elected sealer**: one
//! compare-and-swap wins, the other adopts its count; a granted writer of
//! a slot past the taken-over count finds it given up and fails. A reader
//! never passed over a slot past the last committed one (the rule above),
//! so no reader is past the count the seal takes.
//!
//! # A merged compacted segment
//!
//! A compaction pass over an in-memory log (`compact.rs`) replaces sealed
//! segments that follow one another by one *merged* segment: the offsets
//! of all of them, and only the records the pass kept. A dense index (a
//! slot per offset) would cost four bytes for every offset ever written,
//! kept or not, and one segment per segment ever sealed, so a topic of a
//! few keys updated for ever would grow for ever. A merged segment has no
//! dense index; it has a *sparse* one (`Sparse`): the index of each kept
//! record, ascending, and its slot. Its region holds one compacted-away
//! record at byte 0 (`record.rs`), then the kept records in offset order,
//! back to back, so a run of consecutive kept offsets is read as a batch
//! reads any run.
//!
//! It is sealed before anyone can see it, and never written again: its
//! slots, records and seal are written by the pass alone, before the
//! directory's `Release` exchange (C1 in `compact.rs`) makes it reachable.
//! Reading it: `committed` looks an index up in the dense index first;
//! the index of a merged segment is empty, so the lookup fails on the
//! bounds check every lookup makes anyway, and only then does it search
//! the kept indexes (`committed_sparse`): a kept record's own position, or
//! byte 0 for a removed offset. So a segment that is not merged pays
//! nothing for the kind. A reader at a removed offset finds the
//! compacted-away record, passes over it as over a skip record, and goes
//! straight to the next kept index (`past_skip`): reading from the
//! beginning costs the records kept, not the offsets removed.
//!
//! Its tail word holds its bytes alone: its count is its seal's, and a
//! merge may cover more offsets than the word's record field (24 bits)
//! holds, which nothing reads once a segment is sealed. A durable log's
//! rebuilt segments are files with a dense index, one per old segment
//! (`file/rebuild.rs`).

use std::fmt;
use std::io;
use std::ptr::NonNull;

use crossbeam_utils::CachePadded;

use super::record::{Record, RecordView};
use super::storage::{MappedStorage, Pages, SegmentStorage};
use crate::error::{Error, Result};
use crate::sync::UnsafeCell;
use crate::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

pub(crate) mod merged;

/// Low bits of the tail word: bytes reserved so far.
const BYTES_BITS: u32 = 40;
/// Mask selecting the byte field of the tail word.
const BYTES_MASK: u64 = (1 << BYTES_BITS) - 1;
/// Added to the tail word once per reserved record.
const ONE_RECORD: u64 = 1 << BYTES_BITS;
/// `sealed` value of a segment that is still open; a sealed one holds its
/// final record count plus [`SEALED_BIAS`]. Zero, so that the zeros of a
/// fresh segment file (`file/format.rs`) read as an open segment.
const NOT_SEALED: u64 = 0;
/// Added to the final record count in `sealed`, so that a count of 0 (an
/// early seal of an empty segment) is told from [`NOT_SEALED`].
const SEALED_BIAS: u64 = 1;
/// Slot value of a record that is not committed.
const UNCOMMITTED: u32 = 0;
/// Slot value of an offset given up (see "An abandoned reservation"): no
/// committed value is this large (a position is at most a segment, 1 GiB
/// and a frame, over [`POS_UNIT`]).
pub(crate) const ABANDONED: u32 = u32::MAX;
const _: () = assert!(((MAX_SEGMENT_BYTES + super::file::FRAME_LEN) as u64 / POS_UNIT + 1) < ABANDONED as u64);
const _: () = assert!(UNCOMMITTED == 0 && ABANDONED.wrapping_add(1) == 0);
/// Committed slots store `pos / POS_UNIT + 1`; record positions are multiples of it.
const POS_UNIT: u64 = super::record::RECORD_ALIGN as u64;

/// The slot value of a record committed at byte `pos`.
fn pos_value(pos: u64) -> u32 {
    u32::try_from(pos / POS_UNIT + 1).expect("segment position fits the slot encoding")
}

/// The byte position a committed slot value names.
#[inline(always)]
fn pos_of(value: u32) -> u64 {
    (value as u64 - 1) * POS_UNIT
}
/// How far past its own record a writer asks for the region's next line
/// ahead of time (`Segment::prefetch_ahead`), so that a later append's stores
/// find it in cache rather than waiting for it from memory when the locked
/// instructions of that append drain them. Why this far: ten 96-byte records
/// ahead, a few appends' time for the line to arrive. Nearer than this
/// gained less, farther gained no more; into a ring the caches hold it
/// makes no difference, since the line is there already. Measured by the
/// "minimal log append pinned into 256 MiB" floor of `rill-bench
/// --publish-cost` (against its 4 MiB ring) and by its no-subscriber row
/// past retention, alternating builds with and without the prefetch.
const PREFETCH_AHEAD: u64 = 1024;

/// Largest segment, so the 40-bit byte field cannot carry (see the essay).
pub(crate) const MAX_SEGMENT_BYTES: usize = 1 << 30;
/// Most records one segment indexes.
pub(crate) const MAX_SEGMENT_RECORDS: usize = 1 << 22;
/// Most records one reservation takes, so failed reservations cannot wrap the
/// tail word's record field (see the essay).
pub(crate) const MAX_RESERVATION_RECORDS: usize = 1 << 12;
const _: () = assert!(MAX_SEGMENT_RECORDS < 1 << (64 - BYTES_BITS));

/// One entry of the offset index. `repr(C)` with a zero-sized second field:
/// in a normal build a slot is exactly a `u32`, so a segment file's index
/// (`file/format.rs`) is an array of them.
#[repr(C)]
struct Slot {
    /// `UNCOMMITTED`, or `pos / POS_UNIT + 1` once the record is complete.
    state: AtomicU32,
    /// Zero-sized in normal builds. Under loom it stands for the record's bytes,
    /// so loom checks that every read of a record happens after its write.
    bytes: UnsafeCell<()>,
}

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Slot>() == super::file::SLOT_BYTES && std::mem::align_of::<Slot>() == 4);

/// The reusable memory of a segment: its byte region, its offset index and
/// its reservation state (tail word and seal).
///
/// # Where the state lives
///
/// A segment file keeps the tail word, the seal and the index itself
/// (`file/format.rs`), so every mapping of the file, in any process, reserves and
/// commits through the same words. Anonymous memory has nowhere to keep
/// them, so an in-memory segment keeps them in memory of its own (`own`),
/// but a log's small first segment, whose heap block holds them as a file
/// does (`HeapStorage`, `storage.rs`).
/// Either way the segment reaches them through the pointers in `state`,
/// one code path for both: a pointer load more per reservation than a tail
/// word inside the segment, from a line the append reads anyway. Under loom
/// the state is always `own` (loom's atomics cannot live in a file).
pub(crate) struct Buffers {
    storage: Box<dyn SegmentStorage>,
    /// The state and the index, when the storage does not hold them.
    own: Option<(Box<OwnState>, Slots)>,
    /// Where the state and the index are: in `own`, or in the storage.
    state: State,
    /// Freshly mapped memory, or a new segment file, not faulted in: the
    /// segment built over it has its pages faulted in a bounded distance
    /// ahead of its tail (see "Ahead of the tail" in `prefault.rs`).
    /// Taken by that segment, so buffers it gives back are not fresh.
    #[cfg(not(loom))]
    unfaulted: bool,
}

/// A segment's tail word and seal, in memory of its own.
struct OwnState {
    /// The tail word, written by every publisher: alone on its cache line so
    /// readers polling slots do not slow it down.
    tail: CachePadded<AtomicU64>,
    /// `NOT_SEALED`, or the final record count plus `SEALED_BIAS`.
    sealed: AtomicU64,
}

/// Where a segment's reservation state is: pointers into a [`Buffers`]'
/// `own` or its storage, valid while the buffers live (neither moves when
/// the buffers do: both are behind pointers of their own).
#[derive(Clone, Copy)]
struct State {
    tail: NonNull<AtomicU64>,
    sealed: NonNull<AtomicU64>,
    slots: NonNull<Slot>,
    slot_count: usize,
}

// SAFETY: a `Buffers` owns everything its pointers point into (`own`, or
// the storage, which is Send), like a Box; the atomics behind them are
// shared only through a `Segment`, which follows the protocol above.
unsafe impl Send for Buffers {}

/// The offset index: zeroed mapped memory normally; built slot by slot under
/// loom, whose atomics and cells are not valid when zeroed.
#[cfg(not(loom))]
type Slots = super::storage::ZeroedArray<Slot>;
#[cfg(loom)]
type Slots = Box<[Slot]>;

impl Buffers {
    /// Maps a fresh, zeroed byte region of `capacity` bytes and an offset
    /// index of `slot_count` slots (two anonymous mappings in `pages`; see
    /// `storage.rs`). Fails when either mapping cannot be made.
    pub(super) fn map(capacity: usize, slot_count: usize, pages: Pages) -> io::Result<Self> {
        let storage: Box<dyn SegmentStorage> = Box::new(MappedStorage::new(capacity, pages)?);
        Ok(Self::with_own(storage, new_slots(slot_count, pages)?).unfaulted())
    }

    /// These buffers, marked as not faulted in yet (fresh memory or a new
    /// segment file; see `unfaulted`).
    pub(super) fn unfaulted(self) -> Self {
        #[cfg(not(loom))]
        return Buffers { unfaulted: true, ..self };
        #[cfg(loom)]
        self
    }

    /// Faults the region and the offset index in, writable, now (see
    /// `prefault.rs`); best effort.
    #[cfg(not(loom))]
    pub(super) fn populate(&mut self) {
        super::storage::populate(self.storage.as_ptr(), self.storage.capacity());
        if let Some((_, slots)) = &self.own {
            slots.populate();
        }
        self.unfaulted = false;
    }

    /// Buffers for a log's small first segment (see "A small first
    /// segment" in `log/dir.rs`): one heap block of `capacity` bytes of
    /// region and `slot_count` slots, which holds the tail word and the
    /// seal too. Fails when the allocator has no memory for it.
    pub(crate) fn small(capacity: usize, slot_count: usize) -> Result<Self> {
        let storage = super::storage::HeapStorage::new(capacity, slot_count).map_err(|e| {
            Error::ResourceExhausted(format!("out of memory: cannot allocate a log segment of {capacity} bytes: {e}"))
        })?;
        Self::over(Box::new(storage), slot_count, Pages::Small)
    }

    /// Buffers over `storage` (a segment file, or a small first segment's
    /// heap block): its own tail word, seal and
    /// offset index if it has them (see "Where the state lives"), else
    /// fresh ones of `slot_count` slots, the index mapped in `pages`.
    pub(crate) fn over(storage: Box<dyn SegmentStorage>, slot_count: usize, pages: Pages) -> Result<Self> {
        #[cfg(not(loom))]
        if let Some(shared) = storage.shared_state() {
            let state = State {
                tail: shared.tail.cast(),
                sealed: shared.sealed.cast(),
                slots: shared.slots.cast(),
                slot_count: shared.slot_count.min(MAX_SEGMENT_RECORDS),
            };
            return Ok(Buffers {
                storage,
                own: None,
                state,
                #[cfg(not(loom))]
                unfaulted: false,
            });
        }
        let slots = new_slots(slot_count, pages).map_err(|e| {
            Error::ResourceExhausted(format!("out of memory: cannot map an offset index of {slot_count} slots: {e}"))
        })?;
        Ok(Self::with_own(storage, slots))
    }

    /// Buffers over `storage` with the state in memory of their own and
    /// `slots` as the index.
    fn with_own(storage: Box<dyn SegmentStorage>, slots: Slots) -> Self {
        let own = Box::new(OwnState { tail: CachePadded::new(AtomicU64::new(0)), sealed: AtomicU64::new(NOT_SEALED) });
        let state = State {
            tail: NonNull::from(&*own.tail),
            sealed: NonNull::from(&own.sealed),
            slots: NonNull::from(&slots[..]).cast(),
            slot_count: slots.len(),
        };
        Buffers {
            storage,
            own: Some((own, slots)),
            state,
            #[cfg(not(loom))]
            unfaulted: false,
        }
    }

    /// The byte region's storage.
    pub(super) fn storage(&self) -> &dyn SegmentStorage {
        &*self.storage
    }

    /// Slots of the offset index.
    pub(super) fn slot_count(&self) -> usize {
        self.state.slot_count
    }

    /// The offset index.
    #[inline(always)]
    fn slots(&self) -> &[Slot] {
        // SAFETY: `state.slots` points at `slot_count` slots that live as
        // long as `self` (in `own`, or in the storage, which promises it),
        // valid whatever their bits and only mutated atomically.
        unsafe { std::slice::from_raw_parts(self.state.slots.as_ptr(), self.state.slot_count) }
    }

    /// Makes the buffers those of an empty, open segment again, given that
    /// only the first `used` slots can have been committed: every slot
    /// reads as not committed, the tail word is zero, and the seal open.
    /// Slots past `used` keep their zeroes and, never written, their pages
    /// unfaulted.
    pub(super) fn reset(&self, used: usize) {
        let slots = self.slots();
        for slot in &slots[..used.min(slots.len())] {
            // Relaxed: the caller owns these buffers exclusively; they reach the
            // next segment's readers through the pool's mutex and the Release
            // store that publishes the segment directory.
            slot.state.store(UNCOMMITTED, Ordering::Relaxed);
        }
        // SAFETY: as in `slots`: the words live as long as `self`.
        let (tail, sealed) = unsafe { (self.state.tail.as_ref(), self.state.sealed.as_ref()) };
        // Relaxed: as for the slots above.
        tail.store(0, Ordering::Relaxed);
        sealed.store(NOT_SEALED, Ordering::Relaxed);
    }
}

impl Buffers {
    /// [`Buffers::reset`] for buffers over a file claimed from another use
    /// that this process did not see end (a free file, "Recycling across
    /// processes" in `file/mod.rs`): the slots that can have been committed
    /// are those below the count its seal holds, or all of them if it was
    /// never sealed. The caller has the file to itself.
    #[cfg(not(loom))]
    pub(super) fn reset_claimed(&self) {
        // SAFETY: as in `slots`: the words live as long as `self`.
        let sealed = unsafe { self.state.sealed.as_ref() };
        // Relaxed: the caller owns the file exclusively (its write lock,
        // taken by system calls that order every earlier writer's stores).
        let used = match sealed.load(Ordering::Relaxed) {
            NOT_SEALED => self.slot_count(),
            n => usize::try_from(n - SEALED_BIAS).map_or(self.slot_count(), |n| n.min(self.slot_count())),
        };
        self.reset(used);
    }
}

/// A zeroed offset index: its pages cost nothing until written.
#[cfg(not(loom))]
fn new_slots(n: usize, pages: Pages) -> io::Result<Slots> {
    const _: () = assert!(UNCOMMITTED == 0 && std::mem::size_of::<UnsafeCell<()>>() == 0);
    // SAFETY: a Slot is an AtomicU32, for which all-zero bytes is the valid
    // value 0 (UNCOMMITTED), and a zero-sized UnsafeCell<()>; it needs no drop,
    // is 4-aligned, and is only mutated through its atomic and its cell.
    unsafe { super::storage::ZeroedArray::new(n, pages) }
}

#[cfg(loom)]
fn new_slots(n: usize, _pages: Pages) -> io::Result<Slots> {
    Ok((0..n).map(|_| Slot { state: AtomicU32::new(UNCOMMITTED), bytes: UnsafeCell::new(()) }).collect())
}

impl fmt::Debug for Buffers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffers")
            .field("storage", &self.storage)
            .field("slots", &self.state.slot_count)
            .field("state_in_storage", &self.own.is_none())
            .finish()
    }
}

/// Where a dropped segment's buffers go: the pool of the segment's
/// partition (`pool.rs`). The pool hands out [`Buffers`], so it sits above
/// the segment; the segment holds it through this hook, not by its type.
pub(crate) trait Recycler: Send + Sync + 'static {
    /// The segments built over these buffers are shared by processes
    /// ([`super::Sharing::Processes`]): they commit and seal by
    /// compare-and-swap (see "An abandoned reservation"). Fixed at open.
    fn shared_by_processes(&self) -> bool;
    /// Takes back the buffers of a dropped segment whose records used the
    /// first `used` slots; `trimmed`: retention trimmed it (rather than a
    /// compaction pass replacing it, or its log closing).
    fn give_back(&self, buffers: Buffers, used: usize, trimmed: bool);
}

/// What a reservation got; see the essay at the top of this file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reservation {
    /// Slots `index..` and bytes `pos..` are the caller's.
    Granted { index: u64, pos: u64 },
    /// The caller's reservation closed the segment at `count` records, whose
    /// bytes end at `end`: it must seal.
    Sealer { count: u64, end: u64 },
    /// The segment was already closed by someone else.
    Full,
}

/// A segment: see the module documentation for the protocol.
///
/// Laid out in this order (`repr(C)`): what an append reads (`state`,
/// `data`, `capacity`, `base`, `shared`) first, so that an append to a
/// segment no recent append touched misses on at most two of its lines
/// where the compiler's order spread them over three (`wildcard_breadth`,
/// an example of rill-bench, counts the misses under callgrind).
#[repr(C)]
pub(crate) struct Segment {
    /// The tail word, the seal and the offset index (see "Where the state
    /// lives" at [`Buffers`]): in `buffers`, valid while they are.
    state: State,
    /// Start of the byte region (owned by `buffers`).
    data: NonNull<u8>,
    capacity: u64,
    /// Offset of the segment's first record.
    base: u64,
    /// Shared by processes: commits and seals are compare-and-swaps, and
    /// an abandoned reservation can be claimed (see "An abandoned
    /// reservation"). Fixed when the segment is built, from its pool.
    shared: bool,
    /// True if some of its records are skip records (`record.rs`): only a
    /// segment recovery rebuilt over a hole. Readers look at a record's
    /// flags only in such a segment, so a live one costs them one branch.
    skips: bool,
    /// Built over a segment file another segment (in this process or
    /// another) created and appends to: dropping it leaves the file as it
    /// is (no end mark), since that one may still be appending.
    attached: bool,
    /// This process's sync rounds passed over an abandoned slot here: the
    /// segment is left without its completion marker (see `durable.rs`).
    holes: AtomicBool,
    /// Set once retention has removed this segment from the directory.
    trimmed: AtomicBool,
    /// Over buffers not faulted in yet: how far ahead of the tail the
    /// prefault thread has been asked to fault them in ("Ahead of the
    /// tail" in `prefault.rs`). `None` for recycled or prefaulted buffers
    /// and a small first segment's heap block.
    #[cfg(not(loom))]
    ahead: Option<Box<Ahead>>,
    /// A merged compacted segment's index (see "A merged compacted
    /// segment" in the module docs): `None` for every other segment.
    sparse: Option<Box<Sparse>>,
    /// Where the buffers go when the segment is dropped: its pool.
    pool: Box<dyn Recycler>,
    /// `None` only while being dropped.
    buffers: Option<Buffers>,
}

#[cfg(not(loom))]
/// How far a segment over buffers not faulted in is asked to be, and has
/// been, faulted in (see "Ahead of the tail" in `prefault.rs`). Every field is a hint: a
/// stale value costs a range faulted twice (harmless) or left to its
/// writer, never a wrong byte, so every access is `Relaxed`.
#[derive(Debug, Default)]
pub(crate) struct Ahead {
    /// Region bytes, from the segment's start, asked for.
    pub(super) asked: AtomicU64,
    /// Index slots, from the first, asked for.
    pub(super) asked_slots: AtomicU64,
    /// Region bytes and slots faulted in so far (the prefault thread's).
    pub(super) done: AtomicU64,
    pub(super) done_slots: AtomicU64,
    /// Tests: region bytes and slots whose faulting has returned (a range
    /// is claimed in `done` before it is faulted, so `done` runs ahead of
    /// the pages while the prefault thread works).
    #[cfg(test)]
    pub(super) finished: AtomicU64,
    #[cfg(test)]
    pub(super) finished_slots: AtomicU64,
    /// A job for this segment is in the queue.
    pub(super) queued: AtomicBool,
}

/// The index of a merged compacted segment: its kept records alone.
struct Sparse {
    /// The index (offset from the segment's base) of each kept record,
    /// ascending.
    kept: Box<[u64]>,
    /// Each kept record's slot: its position, and under loom the cell of
    /// its bytes.
    slots: Box<[Slot]>,
    /// The slot of the compacted-away record at byte 0, which every
    /// removed offset names.
    away: Slot,
}

// SAFETY: the raw `data` pointer refers to memory owned by `buffers`, which is
// Send; a segment has no thread-affine state.
unsafe impl Send for Segment {}
// SAFETY: shared access follows the protocol above: disjoint byte ranges are
// handed out by the atomic tail word, and a range is only read after its slot's
// Release/Acquire commit, so no byte is ever written and read concurrently.
unsafe impl Sync for Segment {}

impl Segment {
    /// A new, empty segment whose first record will have offset `base`,
    /// over `buffers` as the pool hands them out: fresh (zeros) or reset,
    /// so their tail word is zero and their seal open.
    pub(crate) fn new(base: u64, buffers: Buffers, pool: impl Recycler) -> Self {
        #[cfg(not(loom))]
        let (ahead, buffers) = (buffers.unfaulted.then(Box::default), Buffers { unfaulted: false, ..buffers });
        let data = buffers.storage.as_ptr();
        let capacity = buffers.storage.capacity() as u64;
        // A durable segment's region holds one frame more than the segment size.
        debug_assert!(capacity as usize <= MAX_SEGMENT_BYTES + super::file::FRAME_LEN);
        debug_assert!(buffers.state.slot_count <= MAX_SEGMENT_RECORDS);
        Segment {
            state: buffers.state,
            trimmed: AtomicBool::new(false),
            base,
            data,
            capacity,
            buffers: Some(buffers),
            shared: pool.shared_by_processes(),
            pool: Box::new(pool),
            skips: false,
            sparse: None,
            attached: false,
            holes: AtomicBool::new(false),
            #[cfg(not(loom))]
            ahead,
        }
    }

    /// How far ahead of the tail this segment's pages are asked to be
    /// faulted in; `None` if they need not be (see `ahead`).
    #[cfg(not(loom))]
    #[inline]
    pub(crate) fn ahead(&self) -> Option<&Ahead> {
        self.ahead.as_deref()
    }

    /// Faults in, writable, the region bytes `bytes` and the index slots
    /// `slots` of this segment (clamped to its size; whole pages around
    /// them), on the caller's thread: the prefault thread's half of "Ahead
    /// of the tail" (`prefault.rs`). Best effort, like `storage::populate`.
    #[cfg(not(loom))]
    pub(crate) fn fault_in(&self, bytes: std::ops::Range<u64>, slots: std::ops::Range<u64>) {
        super::storage::populate_range(self.data, self.capacity as usize, bytes.start as usize, bytes.end as usize);
        let slot = std::mem::size_of::<Slot>();
        super::storage::populate_range(
            self.state.slots.cast(),
            self.state.slot_count * slot,
            slots.start as usize * slot,
            slots.end as usize * slot,
        );
    }

    /// A segment over `buffers` built from a segment file that another
    /// segment created and appends to, at `base` (the file's header says
    /// it): a second mapping of the same tail word, seal and index (see
    /// "Where the state lives" at [`Buffers`]), which reserves, commits and
    /// reads exactly as the first does: a log shared by processes maps
    /// every segment file another process made this way (`dir.rs`).
    #[cfg(not(loom))]
    pub(crate) fn attach(base: u64, buffers: Buffers, pool: impl Recycler) -> Self {
        assert!(buffers.own.is_none(), "a segment file without its state in it cannot be shared");
        let mut seg = Segment::new(base, buffers, pool);
        seg.attached = true;
        seg
    }

    /// This segment, told that some of its records may be skip records
    /// (`skips`): an attached file a compaction rebuilt, whose
    /// compacted-away records no reader is handed (see "The swap across
    /// processes" in `compact.rs`).
    #[cfg(not(loom))]
    pub(crate) fn with_skips(mut self, skips: bool) -> Self {
        self.skips |= skips;
        self
    }

    /// The offset index.
    #[inline(always)]
    fn slots(&self) -> &[Slot] {
        // SAFETY: `state` was copied from `buffers`, whose index lives as
        // long as they do; `buffers` is taken only in `drop`, after the last
        // use of the state (see `Buffers::slots`).
        unsafe { std::slice::from_raw_parts(self.state.slots.as_ptr(), self.state.slot_count) }
    }

    /// The tail word.
    #[inline(always)]
    fn tail(&self) -> &AtomicU64 {
        // SAFETY: as in `slots`: the word lives as long as `buffers`.
        unsafe { self.state.tail.as_ref() }
    }

    /// The seal.
    #[inline(always)]
    fn sealed(&self) -> &AtomicU64 {
        // SAFETY: as in `slots`: the word lives as long as `buffers`.
        unsafe { self.state.sealed.as_ref() }
    }

    /// Offset of the first record.
    #[inline]
    pub(crate) fn base(&self) -> u64 {
        self.base
    }

    /// Bytes of record space.
    #[inline]
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// How many records the index can hold.
    #[inline]
    pub(crate) fn slot_count(&self) -> u64 {
        self.slots().len() as u64
    }

    /// Reserves `records` slots and `bytes` bytes (all records' encoded
    /// lengths together). Both must be non-zero.
    #[inline]
    pub(crate) fn reserve(&self, records: u64, bytes: u64) -> Reservation {
        debug_assert!(records > 0 && bytes > 0 && records <= MAX_RESERVATION_RECORDS as u64);
        // Relaxed: the fetch-add only has to hand out disjoint ranges, which its
        // atomicity guarantees; the bytes written into a range are published by
        // the slot's Release store, and the segment's initial state reached us
        // through the Acquire load of the directory that named it.
        let prev = self.tail().fetch_add(records * ONE_RECORD + bytes, Ordering::Relaxed);
        let index = prev >> BYTES_BITS;
        let pos = prev & BYTES_MASK;
        let slots = self.slot_count();
        if index + records <= slots && pos + bytes <= self.capacity {
            Reservation::Granted { index, pos }
        } else if index <= slots && pos <= self.capacity {
            Reservation::Sealer { count: index, end: pos }
        } else {
            Reservation::Full
        }
    }

    /// Asks the CPU to bring the line [`PREFETCH_AHEAD`] bytes past `pos`
    /// into its cache, if it is in this segment's region (see [`Segment::prefetch`]).
    #[inline(always)]
    fn prefetch_ahead(&self, pos: u64) {
        if pos + PREFETCH_AHEAD < self.capacity {
            self.prefetch(pos + PREFETCH_AHEAD);
        }
    }

    /// Writes `record` into the range a `Granted` reservation gave for slot `index`.
    ///
    /// # Safety
    ///
    /// `index` and `pos..pos + len` must come from one `Granted` reservation of
    /// this segment made by the caller, `len` must be `record.encoded_len()`,
    /// and each slot may be written once.
    #[inline]
    pub(crate) unsafe fn write(&self, index: u64, pos: u64, len: usize, record: &Record<'_>, timestamp_ns: u64) {
        debug_assert!(pos + len as u64 <= self.capacity && pos.is_multiple_of(POS_UNIT));
        self.prefetch_ahead(pos);
        self.slots()[index as usize].bytes.with_mut(|_| {
            // SAFETY: the reservation gave this caller `pos..pos + len` alone (the
            // fetch-add hands out disjoint ranges inside the region), and no reader
            // touches the range before the slot is committed below, so this is the
            // only reference to those bytes.
            let dst = unsafe { std::slice::from_raw_parts_mut(self.data.as_ptr().add(pos as usize), len) };
            record.encode_into(dst, timestamp_ns);
        });
    }

    /// Writes record `index` into its `Granted` range at `pos` (framed, for
    /// a durable log) and commits it. The in-memory case inlines to exactly
    /// `write` and `commit`; the framed one is a call, so the in-memory
    /// append loop does not grow by the checksum code.
    ///
    /// # Safety
    ///
    /// As [`Segment::write`], the range including the record's frame (of
    /// `FRAME_LEN` bytes, before the record) if `framed`.
    #[inline(always)]
    pub(crate) unsafe fn write_and_commit(
        &self,
        index: u64,
        pos: u64,
        len: usize,
        record: &Record<'_>,
        timestamp_ns: u64,
        framed: bool,
    ) -> bool {
        if framed {
            // SAFETY: the caller's contract.
            unsafe { self.write_framed_and_commit(index, pos, len, record, timestamp_ns) }
        } else {
            // SAFETY: the caller's contract.
            unsafe { self.write(index, pos, len, record, timestamp_ns) };
            self.commit(index, pos)
        }
    }

    /// The framed half of [`Segment::write_and_commit`], for a durable
    /// segment: writes the record at `pos + FRAME_LEN`, then its frame
    /// (checksum) at `pos` with one 8-byte store, so the frame is complete
    /// before the slot is committed, then commits the record where it starts.
    ///
    /// # Safety
    ///
    /// As [`Segment::write`], with `len` the record's encoded length and the
    /// range `pos..pos + FRAME_LEN + len`.
    #[inline(never)]
    unsafe fn write_framed_and_commit(
        &self,
        index: u64,
        pos: u64,
        len: usize,
        record: &Record<'_>,
        timestamp_ns: u64,
    ) -> bool {
        let at = pos + super::file::FRAME_LEN as u64;
        // SAFETY: the caller's contract; `at..at + len` lies inside its range.
        unsafe { self.write(index, at, len, record, timestamp_ns) };
        self.slots()[index as usize].bytes.with_mut(|_| {
            // SAFETY: `pos..pos + FRAME_LEN` is the start of the caller's own
            // range (see `write`), 8-aligned (`pos` is a multiple of POS_UNIT
            // in a page-aligned region); the record bytes read back were just
            // written by this thread and nobody else touches them before the
            // commit. The raw length is the record header's first field.
            unsafe {
                let rec = self.data.as_ptr().add(at as usize);
                let raw = u32::from_le(rec.cast::<u32>().read()) as usize;
                let frame = super::file::frame_for(self.base + index, std::slice::from_raw_parts(rec, raw));
                self.data.as_ptr().add(pos as usize).cast::<u64>().write(frame.to_le());
            }
        });
        self.commit(index, at)
    }

    /// The storage's segment file, for a durable segment.
    pub(crate) fn file(&self) -> Option<&dyn super::storage::SegmentFile> {
        self.buffers.as_ref().and_then(|b| b.storage.as_file())
    }

    /// A segment rebuilt by recovery over `buffers` (a segment file) holding
    /// `positions.len()` intact records: record `i` at byte `positions[i]`
    /// (where the record starts, after its frame), the records filling
    /// `used` bytes; `skips` if some of them are skip records. The segment
    /// comes back sealed at that count: appends go to a fresh segment after it.
    pub(crate) fn recovered(
        base: u64,
        buffers: Buffers,
        pool: impl Recycler,
        positions: &[u64],
        used: u64,
        skips: bool,
    ) -> Self {
        let seg = Segment::reopened(base, buffers, pool, positions, used, skips);
        // Relaxed, and not `seal`: the file's seal may be anything a crash
        // left; the segment is not shared yet, as in `reopened`.
        seg.sealed().store(positions.len() as u64 + SEALED_BIAS, Ordering::Relaxed);
        seg
    }

    /// True if `buffers`, a segment file's, say that exactly `count`
    /// records filling `used` bytes were ever reserved in it and that it is
    /// not sealed: its own tail word and seal, which every reservation and
    /// seal writes (see "Where the state lives" at [`Buffers`]). Then no
    /// byte past `used` was ever granted to a publisher, and a reopened log
    /// may go on appending there (see "Resuming the last file" in
    /// `recovery.rs`).
    pub(crate) fn holds_exactly(buffers: &Buffers, count: u64, used: u64) -> bool {
        // SAFETY: `tail` and `sealed` point at words that live as long as
        // `buffers` (in `own`, or in the storage, which promises it).
        let (tail, sealed) = unsafe { (buffers.state.tail.as_ref(), buffers.state.sealed.as_ref()) };
        // Relaxed: the buffers are this thread's alone (a log being opened,
        // whose directory no other process has yet).
        tail.load(Ordering::Relaxed) == count * ONE_RECORD + used && sealed.load(Ordering::Relaxed) == NOT_SEALED
    }

    /// [`Segment::recovered`], not sealed: the newest segment of a reopened
    /// log, which appends go on filling from `used` bytes and
    /// `positions.len()` records (see "Resuming the last file" in
    /// `recovery.rs`). The caller has checked [`Segment::holds_exactly`].
    pub(crate) fn resumed(base: u64, buffers: Buffers, pool: impl Recycler, positions: &[u64], used: u64) -> Self {
        debug_assert!(Segment::holds_exactly(&buffers, positions.len() as u64, used));
        let seg = Segment::reopened(base, buffers, pool, positions, used, false);
        // Relaxed: the segment is not shared yet, as in `reopened`.
        seg.sealed().store(NOT_SEALED, Ordering::Relaxed);
        seg
    }

    /// The index and tail word of [`Segment::recovered`] and
    /// [`Segment::resumed`]; the caller sets the seal.
    fn reopened(base: u64, buffers: Buffers, pool: impl Recycler, positions: &[u64], used: u64, skips: bool) -> Self {
        let mut seg = Segment::new(base, buffers, pool);
        seg.skips = skips;
        debug_assert!(positions.len() <= seg.slot_count() as usize);
        for (i, &pos) in positions.iter().enumerate() {
            let value = u32::try_from(pos / POS_UNIT + 1).expect("segment position fits the slot encoding");
            // Relaxed: the segment is not shared yet (see the tail word's
            // store below); a plain store, since the file's index may hold
            // anything a crash left, which a shared segment's commit (a
            // compare-and-swap from not committed) would refuse.
            seg.slots()[i].state.store(value, Ordering::Relaxed);
        }
        let count = positions.len() as u64;
        // Slots past the kept records may hold what the file's index said
        // before the crash (records recovery did not keep): not committed.
        // Read first, so that the pages of a clean index are not dirtied.
        for slot in &seg.slots()[positions.len()..] {
            // Relaxed: as the tail word's store below.
            if slot.state.load(Ordering::Relaxed) != UNCOMMITTED {
                slot.state.store(UNCOMMITTED, Ordering::Relaxed);
            }
        }
        // Relaxed: the segment is not shared yet; it reaches other threads
        // through the Release store that publishes the log's directory.
        seg.tail().store(count * ONE_RECORD + used, Ordering::Relaxed);
        seg
    }

    /// True if some records of this segment are skip records.
    #[inline]
    pub(crate) fn has_skips(&self) -> bool {
        self.skips
    }

    /// True if the committed record `index` at byte `pos` is a skip record,
    /// which no reader delivers. Reads the record's header: call it only
    /// where [`Segment::has_skips`] says there are any.
    #[inline]
    pub(crate) fn is_skip(&self, index: u64, pos: u64) -> bool {
        self.view(index, pos).is_skip()
    }

    /// Where the committed record `index` ends (after its padding), given
    /// where it starts: the next record's frame starts there.
    pub(crate) fn record_end(&self, index: u64, pos: u64) -> u64 {
        pos + self.view(index, pos).encoded_len() as u64
    }

    /// Publishes the record written for slot `index` at byte `pos`. True
    /// if it is in the log; false only in a shared segment whose slot was
    /// claimed as abandoned first (see "An abandoned reservation"): the
    /// record is then not in the log, and its offset is a skipped one.
    #[inline]
    #[must_use]
    pub(crate) fn commit(&self, index: u64, pos: u64) -> bool {
        let value = pos_value(pos);
        let slot = &self.slots()[index as usize].state;
        if self.shared {
            // Release (A1): as L1 below, for the compare-and-swap that
            // commits in a shared segment. Relaxed on failure: the writer
            // learns only that its slot was claimed, and reads nothing.
            return slot
                .compare_exchange(
                    UNCOMMITTED,
                    value,
                    crate::sync::ordering_or_weakened!("A1", Ordering::Release),
                    Ordering::Relaxed,
                )
                .is_ok();
        }
        // Release: pairs with the Acquire load in `committed`, so a reader that
        // sees this value also sees every byte `write` put in the record.
        slot.store(value, crate::sync::ordering_or_weakened!("L1", Ordering::Release));
        true
    }

    /// True if slot `index` was given up as abandoned (shared segments
    /// only; see "An abandoned reservation").
    pub(crate) fn is_abandoned(&self, index: u64) -> bool {
        // Relaxed: nothing is read on the strength of it; whoever sees it
        // passes over the offset without reading a byte of it.
        self.slots().get(index as usize).is_some_and(|s| s.state.load(Ordering::Relaxed) == ABANDONED)
    }

    /// True if a reader (or a sync round) at slot `index` may pass over it:
    /// it is abandoned, and it lies before the segment's end, known by the
    /// seal or by a committed slot after it (see "An abandoned
    /// reservation": a slot past every committed one of a segment awaiting
    /// its seal may lie past the count a takeover seals at).
    pub(crate) fn passable(&self, index: u64) -> bool {
        if !self.is_abandoned(index) {
            return false;
        }
        if let Some(count) = self.sealed_count() {
            return index < count;
        }
        // Relaxed: a bound for the scan below; the slots are loaded on their own.
        let reserved = (self.tail().load(Ordering::Relaxed) >> BYTES_BITS).min(self.slot_count());
        (index + 1..reserved).any(|i| self.committed(i).is_some())
    }

    /// Claims every slot of `from..to` that is still not committed as
    /// abandoned (shared segments only; see "An abandoned reservation"):
    /// the caller has seen them reserved, and not committed, for the
    /// abandon bound. Returns how many this call claimed.
    #[cold]
    pub(crate) fn claim_abandoned(&self, from: u64, to: u64) -> u64 {
        debug_assert!(self.shared, "only a shared segment's slots are claimed");
        let to = to.min(self.slot_count());
        let mut claimed = 0;
        for slot in self.slots().get(from as usize..to as usize).unwrap_or(&[]) {
            // Relaxed, both ways: the claim publishes nothing (no byte of the
            // slot is written or read, by the claimer or by anyone who sees
            // it), and a claimer that loses learns only that the slot is
            // final; the one word decides between the writer and claimers.
            if slot.state.load(Ordering::Relaxed) == UNCOMMITTED
                && slot.state.compare_exchange(UNCOMMITTED, ABANDONED, Ordering::Relaxed, Ordering::Relaxed).is_ok()
            {
                claimed += 1;
            }
        }
        claimed
    }

    /// True if a reservation overflowed this segment (its sealer was
    /// elected) and it is not sealed yet.
    pub(crate) fn awaits_seal(&self) -> bool {
        if self.sealed_count().is_some() {
            return false;
        }
        // Relaxed: whether the sealer's fetch-add happened; the seal itself
        // is loaded on its own.
        let word = self.tail().load(Ordering::Relaxed);
        (word >> BYTES_BITS) > self.slot_count() || (word & BYTES_MASK) > self.capacity
    }

    /// Seals a segment whose elected sealer has not, for the abandon
    /// bound (see "A sealer that dies before it seals"): claims every slot
    /// reserved and not committed, then seals at one past the last
    /// committed slot, unless another sealer's seal won. Returns the count
    /// the segment is sealed at, whoever sealed it.
    #[cold]
    pub(crate) fn take_over_seal(&self) -> u64 {
        // Relaxed: as in `awaits_seal`. Every granted slot lies below it.
        let limit = (self.tail().load(Ordering::Relaxed) >> BYTES_BITS).min(self.slot_count());
        self.claim_abandoned(0, limit);
        // Every slot below `limit` is final now: committed or abandoned.
        let count = (0..limit).rev().find(|&i| self.committed(i).is_some()).map_or(0, |i| i + 1);
        self.seal(count)
    }

    /// Notes that a sync round passed over an abandoned slot of this
    /// segment (see `has_holes`).
    pub(crate) fn note_hole(&self) {
        // Relaxed: read by a later sync round of this process, which the
        // durability state's mutex orders after this one.
        self.holes.store(true, Ordering::Relaxed);
    }

    /// True if this process's sync rounds passed over an abandoned slot
    /// here: the segment gets no completion marker (a complete file has no
    /// hole, `recovery.rs`), so recovery reads it as an incomplete one.
    pub(crate) fn has_holes(&self) -> bool {
        // Relaxed: see `note_hole`.
        self.holes.load(Ordering::Relaxed)
    }

    /// The byte position of record `index` if it is committed.
    #[inline]
    pub(crate) fn committed(&self, index: u64) -> Option<u64> {
        // A merged compacted segment has no dense index: the branch the
        // bounds check takes anyway, so other segments pay nothing for it.
        let Some(slot) = self.slots().get(index as usize) else { return self.committed_sparse(index) };
        // Acquire: pairs with the Release store in `commit`; see the essay.
        match slot.state.load(crate::sync::ordering_or_weakened!("L1", Ordering::Acquire)) {
            // UNCOMMITTED or ABANDONED, in one comparison: the two values
            // whose successor (wrapping) is at most 1.
            v if v.wrapping_add(1) <= UNCOMMITTED + 1 => None,
            v => Some(pos_of(v)),
        }
    }

    /// The committed record `index` at byte `pos` (as returned by `committed`).
    #[inline]
    pub(crate) fn view(&self, index: u64, pos: u64) -> RecordView<'_> {
        let cell = match self.slots().get(index as usize) {
            Some(slot) => &slot.bytes,
            None => self.sparse_cell(index),
        };
        let bytes = cell.with(|_| {
            // SAFETY: the caller saw slot `index` committed at `pos` with an
            // Acquire load, so the record is complete and visible, and it is never
            // written again while `self` is alive. `pos` is 8-aligned inside a
            // 16-aligned region, so the length word read is aligned; the length it
            // holds was written by `encode_into` and keeps the slice inside the
            // record, never touching bytes other publishers may be writing.
            unsafe {
                let start = self.data.as_ptr().add(pos as usize);
                let len = u32::from_le(start.cast::<u32>().read()) as usize;
                debug_assert!(pos + len as u64 <= self.capacity);
                std::slice::from_raw_parts(start, len)
            }
        });
        RecordView::from_bytes(self.base + index, bytes)
    }

    /// Starts bringing the cache line that holds byte `pos` towards this
    /// core, without waiting for it: for a reader, the start of the record
    /// at `pos` (its header, and on a line of its own the start of its
    /// payload); for a writer, a line ahead of its own (see
    /// `prefetch_ahead`). A reader that has
    /// just seen a commit calls it before the bookkeeping that precedes its
    /// read, so the line travels from the publisher's core while that runs
    /// (the `latency` scenario of rill-bench measures it; the dated study is
    /// "latency: the delivery side of one-way latency" in
    /// `docs/archive/performance-notebook-2026.md`). Only the
    /// first line: a later one may hold the start of the next record, which
    /// a publisher is about to write, and a copy of it here would cost that
    /// write an invalidation.
    #[inline(always)]
    pub(crate) fn prefetch(&self, pos: u64) {
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            // `wrapping_add`: no pointer arithmetic assumption is made about
            // `pos` (a committed record's position is inside the region anyway).
            let p = self.data.as_ptr().wrapping_add(pos as usize);
            // SAFETY: a prefetch is a hint; it reads nothing the program can
            // observe and never faults, whatever the address.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>()) };
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom))))]
        let _ = pos;
    }

    /// Records that the reservation returning `Sealer { count }` closed
    /// this segment; returns the count it is sealed at: `count`, but in a
    /// shared segment whose seal a waiter took over first (see "A sealer
    /// that dies before it seals"), the taker's.
    pub(crate) fn seal(&self, count: u64) -> u64 {
        // Release: in memory not needed (the count is the whole message, and
        // the Release store that makes the next segment visible, sequenced
        // after this, carries it); for a durable log it publishes the end
        // mark written just before to a sync round that flushes through it.
        // Free on x86, and it narrows loom's search. See "Sealing".
        if self.shared {
            // The same Release, on the compare-and-swap two sealers (the
            // elected one and a taker, or two takers) race on; Acquire on
            // failure, as `sealed_count` loads the winner's.
            return match self.sealed().compare_exchange(
                NOT_SEALED,
                count + SEALED_BIAS,
                Ordering::Release,
                Ordering::Acquire,
            ) {
                Ok(_) => count,
                Err(won) => won - SEALED_BIAS,
            };
        }
        let prev = self.sealed().swap(count + SEALED_BIAS, Ordering::Release);
        debug_assert_eq!(prev, NOT_SEALED, "a segment is sealed once");
        count
    }

    /// Marks where the records of this segment, sealed by the caller, end:
    /// at `end`, as its `Sealer` reservation said. A recycled segment file
    /// needs the mark (see "Recycling" in `file/mod.rs`); memory does not.
    pub(crate) fn end_records(&self, end: u64) {
        if let Some(file) = self.file() {
            // SAFETY: every granted reservation of this segment lies before
            // `end` (the sealer's reservation found the byte tail there) and
            // none is granted after it, so bytes from `end` on are no one's.
            unsafe { file.end_records(end) };
        }
    }

    /// The final record count, if sealed.
    #[inline]
    pub(crate) fn sealed_count(&self) -> Option<u64> {
        // Acquire: pairs with `seal` (for a durable log's end mark), see "Sealing".
        match self.sealed().load(Ordering::Acquire) {
            NOT_SEALED => None,
            n => Some(n - SEALED_BIAS),
        }
    }

    /// True if index `index` lies past the end of this (sealed) segment.
    #[inline]
    pub(crate) fn ends_before(&self, index: u64) -> bool {
        self.sealed_count().is_some_and(|n| index >= n)
    }

    /// Marks the segment as trimmed. Called after the directory without it
    /// has been published.
    pub(crate) fn mark_trimmed(&self) {
        // Release: pairs with the Acquire in `is_trimmed`; a reader that sees the
        // flag then loads a directory at least as new as the one without it.
        self.trimmed.store(true, Ordering::Release);
        // A trimmed segment's file becomes a spare now; it goes to the pool,
        // or is deleted, once its last reader lets go ("Recycling", `file/mod.rs`).
        if let Some(file) = self.file() {
            file.retire();
        }
    }

    /// True once retention has trimmed this segment.
    #[inline]
    pub(crate) fn is_trimmed(&self) -> bool {
        // Acquire: pairs with the Release in `mark_trimmed`.
        self.trimmed.load(Ordering::Acquire)
    }

    /// True if the newest of the first `count` records was stamped before
    /// `time` (an empty segment, sealed early at 0 records, holds nothing to
    /// keep). Not yet committed counts as new (it is being written now). The newest record's stamp stands for the segment's:
    /// stamps are taken just before offsets, so an older record can carry a
    /// slightly later stamp, which only keeps the segment a little longer.
    pub(crate) fn newest_before(&self, count: u64, time: u64) -> bool {
        let Some(index) = count.checked_sub(1) else { return true };
        self.committed(index).is_some_and(|pos| self.view(index, pos).timestamp_ns() < time)
    }

    /// Records reserved so far (committed or not), capped at the final count.
    /// The record field never wraps (see the essay), so this never reads low.
    pub(crate) fn reserved(&self) -> u64 {
        if let Some(n) = self.sealed_count() {
            return n;
        }
        // Relaxed: a snapshot for lag and end-offset reporting; nothing is read
        // through it.
        let word = self.tail().load(Ordering::Relaxed);
        (word >> BYTES_BITS).min(self.slot_count())
    }

    /// Bytes of the region in use, for reporting.
    pub(crate) fn used_bytes(&self) -> u64 {
        // Relaxed: a snapshot for reporting only.
        (self.tail().load(Ordering::Relaxed) & BYTES_MASK).min(self.capacity)
    }
}

impl Segment {
    /// Called on the newest segment of a log of one process as it closes
    /// cleanly (`Shared`'s drop, after the final sync): writes its file's
    /// checked prefix (see `file/format.rs`), the records whole from its
    /// first up to the first reservation not committed, so that the next
    /// open judges damage among them as damage, not as a crash's hole or
    /// torn tail. `durable`: flush the header (the records are flushed).
    pub(crate) fn mark_prefix_at_close(&self, durable: bool) {
        let Some(file) = self.file().filter(|f| !f.is_spare()) else { return };
        if self.attached || self.shared || self.is_trimmed() || self.sealed_count().is_some() {
            return;
        }
        let reserved = self.reserved();
        let (mut count, mut used) = (0u64, 0u64);
        while count < reserved {
            let Some(pos) = self.committed(count) else { break };
            used = self.record_end(count, pos);
            count += 1;
        }
        if count == 0 {
            return;
        }
        // SAFETY: a log of one process closing: no handle is left, so no
        // other writer of the prefix (the open wrote it before the log was
        // shared).
        if let Err(e) = unsafe { file.mark_prefix(count, used, durable) } {
            log::warn!("segment {}: could not write its checked prefix at close: {e}", self.base);
        }
    }

    /// Called on the newest segment of a log as it closes (`Shared`'s drop,
    /// in `dir.rs`): gives a recycled file the end mark its records need
    /// (nobody appends any more, and they end at the byte tail). Done there,
    /// not when the segment is dropped: an older directory the epoch
    /// collector frees later may hold the last handle, and by then the
    /// file may have been rewritten or cut (a test damaging it, an
    /// operator), so a dropped segment never looks into its file.
    pub(crate) fn end_file_at_close(&self) {
        if let Some(file) = self.file().filter(|f| !f.is_spare())
            && file.is_recycled()
            && !self.attached
            && !self.is_trimmed()
            && self.sealed_count().is_none()
        {
            self.end_records(self.used_bytes());
        }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.file().is_some_and(|f| !f.is_spare()) {
            // A file that stays the partition's (the pool does not take it
            // back): its tail word and seal are in the file, which a segment
            // dropped late (by the epoch collector, after its log closed)
            // must not touch (see `end_file_at_close`). Shared by processes,
            // the pool lets go of every file off this thread, unread.
            if let Some(buffers) = self.buffers.take().filter(|_| self.pool.shared_by_processes()) {
                self.pool.give_back(buffers, 0, self.is_trimmed());
            }
            return;
        }
        // Every slot ever committed lies below the reserved count: a slot is
        // only written through a Granted reservation, which the count covers.
        // A merged segment's buffers hold no slots (and are no pool's size).
        let used = if self.sparse.is_some() { 0 } else { self.reserved() as usize };
        if let Some(buffers) = self.buffers.take() {
            let trimmed = self.is_trimmed();
            self.pool.give_back(buffers, used, trimmed);
        }
    }
}

impl fmt::Debug for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Segment")
            .field("base", &self.base)
            .field("capacity", &self.capacity)
            .field("reserved", &self.reserved())
            .field("sealed", &self.sealed_count())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::log::pool::Pool;
    use crate::sync::Arc;

    #[test]
    fn the_fields_an_append_reads_come_first_in_a_segment_and_its_log() {
        use std::mem::{offset_of, size_of};

        use crate::log::dir::Shared;
        use crate::log::hot_then_cold;
        type S = Segment;
        let (end, start) = hot_then_cold(
            &[
                (offset_of!(S, state), size_of::<State>()),
                (offset_of!(S, data), 8),
                (offset_of!(S, capacity), 8),
                (offset_of!(S, base), 8),
                (offset_of!(S, shared), 1),
            ],
            &[offset_of!(S, trimmed), offset_of!(S, ahead), offset_of!(S, pool), offset_of!(S, buffers)],
        );
        assert!(end <= start && end <= 64, "an append reads {end} bytes of a segment, the rest from {start}");
        let (end, start) = hot_then_cold(
            &[
                (offset_of!(Shared, dir), 8),
                (offset_of!(Shared, always), 1),
                (offset_of!(Shared, sizes) + offset_of!(super::super::config::Sizes, max_record_bytes), 8),
                (offset_of!(Shared, sizes) + offset_of!(super::super::config::Sizes, frame), 8),
            ],
            &[offset_of!(Shared, pool), offset_of!(Shared, holds), offset_of!(Shared, compaction)],
        );
        assert!(end <= start && end <= 48, "an append reads {end} bytes of a log's shared part, the rest from {start}");
    }

    /// Fills `seg` with copies of `payload` until a reservation seals it;
    /// returns the record count.
    fn fill(seg: &Segment, payload: &[u8], stamp: u64) -> u64 {
        let record = Record::new(payload);
        let len = record.encoded_len().unwrap();
        loop {
            match seg.reserve(1, len as u64) {
                Reservation::Granted { index, pos } => {
                    // SAFETY: a Granted reservation of this segment, made here, for `len` bytes.
                    unsafe { seg.write(index, pos, len, &record, stamp) };
                    assert!(seg.commit(index, pos));
                }
                Reservation::Sealer { count, end } => {
                    seg.seal(count);
                    seg.end_records(end);
                    return count;
                }
                Reservation::Full => unreachable!("one thread seals before it can be refused"),
            }
        }
    }

    #[test]
    fn recycled_buffers_come_back_unindexed_and_usable() {
        let (capacity, slots) = (64 << 10, 2048);
        let pool = Arc::new(Pool::new(capacity, slots, 1));
        let first = Segment::new(0, pool.take(0, Pages::Small).unwrap(), pool.clone());
        let region = first.data;
        let n = fill(&first, &[0xee; 100], 1);
        assert!(n > 100);
        drop(first);
        assert_eq!(pool.spare_count(), 1, "a dropped segment's buffers are kept");

        // The next segment gets the same memory back, not a fresh mapping...
        let next = Segment::new(n, pool.take(n, Pages::Huge).unwrap(), pool.clone());
        assert_eq!(pool.spare_count(), 0);
        assert_eq!(next.data, region, "the spare was reused");
        // ...with every slot of its index reading as not committed (the
        // region's bytes are the old records', which no slot names).
        assert_eq!(next.slot_count(), slots as u64);
        assert!((0..next.slot_count()).all(|i| next.committed(i).is_none()));
        assert_eq!(next.reserved(), 0);
        // Shorter records over the stale bytes read back whole.
        let m = fill(&next, b"abc", 2);
        assert!(m > n, "shorter records, more of them");
        for i in 0..m {
            let view = next.view(i, next.committed(i).expect("committed"));
            assert_eq!(view.payload(), b"abc");
            assert_eq!(view.offset(), n + i);
            assert_eq!(view.timestamp_ns(), 2);
        }
        assert!(next.committed(m).is_none());
        drop(next);

        // Recycled again after the shorter records used more slots: the
        // reset covers every slot they committed.
        let a = Segment::new(0, pool.take(0, Pages::Small).unwrap(), pool.clone());
        assert_eq!(a.data, region);
        assert!((0..a.slot_count()).all(|i| a.committed(i).is_none()));
        // The pool keeps at most `max_spare`: a second one is unmapped.
        let b = Segment::new(1, pool.take(1, Pages::Small).unwrap(), pool.clone());
        drop(a);
        drop(b);
        assert_eq!(pool.spare_count(), 1);
    }

    #[test]
    fn a_segment_in_huge_pages_holds_records_like_any_other() {
        let (capacity, slots) = (4 << 20, 1 << 17);
        let pool = Arc::new(Pool::new(capacity, slots, 0));
        let seg = Segment::new(7, pool.take(7, Pages::Huge).unwrap(), pool.clone());
        let n = fill(&seg, &[0x11; 200], 3);
        for i in [0, n / 2, n - 1] {
            let view = seg.view(i, seg.committed(i).unwrap());
            assert_eq!((view.offset(), view.payload()), (7 + i, &[0x11; 200][..]));
        }
    }
}
