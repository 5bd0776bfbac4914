//! The segment directory, how publishers roll it over, and reclamation.
//!
//! Why it is long: the essay below is a fifth of it, and the rest is one
//! protocol on one pointer: the roll, the trims (by retention, and the
//! idle trim) and the roll across processes all exchange the directory
//! (L2, T1, T2), and reclamation frees what the exchanges unlinked.
//!
//! # The segment directory and reclamation
//!
//! The retained segments are listed, oldest first, in an immutable *directory*
//! (`Dir`): a vector of `Arc<Segment>` published through one
//! `crossbeam_epoch::Atomic`. The directory is what makes seeking
//! `O(log segments)` (a binary search on the segments' base offsets) and what
//! retention edits.
//!
//! * **Writers of the directory.** Only the publisher that sealed the newest
//!   segment replaces the directory: it builds a new one (the old segments plus
//!   the next segment, minus whatever retention trims from the head) and
//!   installs it with a `Release` compare-exchange. Sealers are serialised by
//!   construction: a segment can only be sealed once it is the newest, and it
//!   only becomes the newest when the previous sealer has installed it. So the
//!   directory has one writer at a time without a lock, with the one exception
//!   below.
//! * **A roll nobody publishes for.** The age limit (`retention_ms`) must
//!   trim a partition nobody publishes to, where no roll comes. `expire`
//!   makes one without a second writer: it reserves one record of more bytes
//!   than the segment holds, which is never granted, so it is either the
//!   sealer (and rolls, trimming as any sealer does) or finds the segment
//!   already over-full (another publisher is the sealer). Either way the
//!   directory keeps one writer. Sealing an empty newest segment this way
//!   leaves a segment of 0 records whose successor has the same base: so
//!   publishers waiting for a roll wait for a different newest segment (not
//!   a different base), and searches by offset take the last segment whose
//!   base is not above it (the non-empty one).
//! * **A trim nobody publishes for, on a durable log.** A durable segment's
//!   file is named by its base offset, so an *empty* newest segment cannot be
//!   sealed that way (its successor's file would have the same name). When
//!   the newest segment is empty and older segments have expired, `expire`
//!   instead installs a copy of the directory without them (the same newest
//!   segment, nothing sealed), with the same `Release` compare-exchange. This
//!   is the one second writer: a publisher may meanwhile fill that newest
//!   segment, seal it and roll. The two exchanges are against the same
//!   directory, so one fails. If the trim's fails, it gives up (the roll
//!   trims as well, and the next tick tries again). If the roll's (or a
//!   stall's) fails, the directory it finds still ends with the segment it
//!   sealed (a trim never changes the newest segment, and nothing else can
//!   replace a directory whose newest segment is sealed but has no
//!   successor): it rebuilds its directory from that one and tries again. A
//!   trim only replaces a directory whose newest segment it saw empty and
//!   that lost segments to age, so this retry happens at most once per
//!   segment trimmed.
//!
//!   Two orderings carry the trim's directory, which is new memory (its
//!   vector of segments) written by the trimming thread, to whoever
//!   dereferences it. **T1**: the trim installs it with a `Release`
//!   exchange, like a roll, so that readers' `Acquire` loads (L2's reader
//!   side) and a roller's failed exchange see it built. **T2**: the roll's
//!   and the stall's exchanges fail with `Acquire`, not `Relaxed`, since on
//!   failure they build their next directory from the one they found,
//!   which may be the trim's; `Acquire` pairs with T1. (A failed exchange
//!   that found another roller's directory only drops what it built.) The
//!   segments themselves need nothing new: every one of them was published
//!   by the roll that installed it. The loom model
//!   `a_durable_idle_trim_races_a_sealer` (`loom-tests/tests/log.rs`) races
//!   the trim against a publisher that fills, seals and rolls the newest
//!   segment; `.ci/fence-check` requires it to fail with T1 or T2 weakened
//!   to `Relaxed` (loom then reports the roller reading the trim's
//!   directory unordered with its construction).
//! * **A compaction pass** (`compact.rs`, compacted topics only) is a
//!   writer of the same kind as the idle trim: it installs a copy of the
//!   directory in which rebuilt segments stand in for sealed ones, with the
//!   same newest segment and nothing stalled, by a `Release` exchange (C1,
//!   which plays T1's part). A roller or staller whose exchange fails
//!   against it finds its sealed segment still the newest (T2's `Acquire`
//!   makes the copy seen built) and builds again from it, as after an idle
//!   trim; an idle trim that loses to it gives up until the next tick; a
//!   pass that loses reloads and tries again, and never replaces a stalled
//!   directory. See "The swap" in `compact.rs`. In a log shared by
//!   processes, a process that maps the files another process's pass
//!   rebuilt (`Shared::follow_swaps`) installs them with the same exchange
//!   and the same rules ("The swap across processes" there).
//! * **A roll that fails.** The sealer may be unable to map the next segment
//!   (out of memory or address space). It cannot hand its reservation back, so
//!   instead it publishes a *stalled* copy of the directory: the same segments
//!   (the newest already sealed, so its final count is known), flagged with
//!   the error. Every publisher checks that flag where it loads the directory,
//!   before it reserves, so:
//!   - publishers waiting for this roll (they got `Full`) see the stalled
//!     directory and return the error instead of waiting for ever;
//!   - later publishers do not reserve in the dead segment (so failed
//!     reservations stay bounded, see `segment.rs`); each one tries the roll
//!     itself: maps the next segment and installs it with a compare-exchange
//!     against the stalled directory. Several may try at once; one exchange
//!     wins, the others drop what they built and retry in the new segment. A
//!     publisher whose own mapping fails returns the error.
//!
//!   So a partition that ran out of memory fails the publishes that need a new
//!   segment, with a clear error, and works again as soon as a mapping succeeds.
//! * **A small first segment.** Most of what an idle topic costs would be
//!   its first segment: a mapping of the configured size (4 MiB by
//!   default) of which one message touches a page, and an offset index in a
//!   mapping of its own, another page. So an in-memory log whose configured
//!   segments are large (`SMALL_FIRST_FROM`, `config.rs`) starts instead
//!   with a first segment of `FIRST_SEGMENT_BYTES` in one heap block that
//!   also holds its tail word, seal and index (`HeapStorage`,
//!   `storage.rs`): about a kilobyte, sharing pages with other topics'.
//!   Nothing in the protocol changes: the reservation that does not fit it
//!   is its sealer, as in any segment, and its roll installs a segment of
//!   the configured size, as every roll does (so a log has at most one
//!   small segment, its first). A record or batch part too large for the
//!   small segment, reserved while it is still empty, seals it at 0
//!   records, as the early seal of `expire` can: the successor has the same
//!   base, and publishers and searches already tell the two apart (see
//!   above). A reservation's bytes stay at most a configured segment, so the
//!   tail word's bounds (`segment.rs`) hold. The roll out of the small
//!   segment maps the next one in small pages, not huge ones: only a log
//!   that has filled a full-size segment has earned huge pages (see `Pages`
//!   in `storage.rs`). Retention counts the small segment by its own
//!   capacity, as it counts every segment, and the spare pool does not
//!   keep it (it is not the shape of the segments the pool hands out): it
//!   is freed once trimmed and let go. A durable log does not start small:
//!   its segment files are named by their base offsets, which an empty
//!   sealed first segment would share with its successor.
//! * **Readers of the directory** (publishers finding the newest segment,
//!   cursors moving to another segment) pin an epoch, load the directory with
//!   `Acquire` (pairing with the swap, so the new segment's initial state is
//!   visible), and use it only while pinned. (This pair is L2 to
//!   `.ci/fence-check`, which weakens both sides to `Relaxed`.)
//! * **Reclamation.** The replaced directory is retired with
//!   `Guard::defer_destroy` and flushed, so it is freed once no thread can still
//!   be reading it. Freeing it drops its `Arc`s; a trimmed segment's memory is
//!   released (to the partition's spare pool, or to the allocator) when its
//!   last `Arc` goes.
//! * **Slow readers.** A cursor does not stay pinned while its user works on a
//!   record: while pinned it *clones the segment's `Arc`* and unpins. The `Arc`
//!   keeps the segment's bytes alive for as long as the cursor is inside it,
//!   whatever retention does meanwhile; pinning only covers the few loads
//!   between reading the directory and incrementing the count. Publishers pin
//!   for the length of one append, which never runs user code.
//! * **Falling behind.** After publishing a directory without them, the sealer
//!   marks the trimmed segments (`Release`). A cursor checks its segment's mark
//!   (`Acquire`) before each read; once it is set, or whenever the cursor leaves
//!   a segment, it looks up its next offset in the current directory. If
//!   retention has trimmed past it, the cursor learns how many records it
//!   missed ([`Lagged`]) and continues from the oldest retained one. Records
//!   older than retention are never delivered after their trim is visible.
//!
//! Memory held by a partition is bounded by its retention, plus the spare pool,
//! plus at most one trimmed segment per cursor that is still inside it.
//!
//! # The roll across processes (issue 39)
//!
//! A durable log opened for several processes ([`super::Sharing::Processes`],
//! crate-internal for now) is one set of segment files that every process
//! maps; each process has its own directory of its own mappings. The
//! segment's tail word and seal are in its file (`file/format.rs`), so the
//! fetch-add still elects exactly one sealer per segment across all
//! processes. What differs is how the *other* processes learn of the roll,
//! since the sealer's exchange only changes its own process's directory:
//!
//! * **States of a roll**, as every process sees them on disk: (1) the
//!   segment open; (2) sealed (the seal in the file holds its final count,
//!   the end mark is written), the successor's name absent; (3) the
//!   successor's file linked under `<base + count>.seg`, whole (made under a
//!   temporary name first, see `FileStorage::create`). A process's own
//!   directory then moves on independently: (4) the successor installed in
//!   it, with today's `Release` exchange.
//! * **Who moves them.** The sealer, in whatever process, moves (1) to (2)
//!   and (2) to (3), then installs (4) in its process. Any other thread that
//!   reaches the sealed end (a publisher told `Full`: `wait_for_roll`; a
//!   cursor past the end: `Cursor::ready`) and finds no successor in its own
//!   directory reads the count from the seal, opens `<base + count>.seg`
//!   ([`Shared::follow`]) and, once it exists, installs a mapping of it in
//!   its own directory. On `NotFound` a publisher backs off and tries again;
//!   a cursor reports no record yet.
//! * **Several writers of one process's directory.** In this mode the
//!   sealer and every follower of its process may try to install the same
//!   successor, each over its own mapping of the file: they race with the
//!   same compare-exchange against the directory that ends with the sealed
//!   segment; one wins, the others find a directory that no longer ends with
//!   it and drop what they built (its mapping only: the file is the
//!   partition's). A directory is still replaced only when its newest
//!   segment is sealed, so the exchanges of the roll and of an idle trim
//!   keep the rules above.
//! * **The race it survives: a sealer that dies between the seal and the
//!   link.** The name is the compare-and-swap: `link(2)` fails with
//!   `EEXIST` when the name exists. A publisher that has waited
//!   [`ROLL_TAKEOVER`] for a sealed segment's successor makes the file
//!   itself, as the sealer would; a sealer that was only slow, or several
//!   waiters taking over at once, lose the link and open the winner's file.
//!   No one ever opens a half-made file: it is whole before its name exists,
//!   and the link and the open are system calls on one directory, which
//!   order the creator's writes before the opener's mapping.
//! * **A sealer that dies before it seals**, right after the fetch-add
//!   that elected it: no seal, so no one learns the count, and publishers
//!   told `Full` (and readers at the segment's end) would wait for ever. A
//!   waiter that has seen the segment over-full and unsealed for the
//!   abandon bound ([`ABANDON_AFTER`]) seals it itself, by a
//!   compare-and-swap on the seal word that a late sealer loses too (see
//!   "A sealer that dies before it seals" in `segment.rs`), and then takes
//!   the roll over at once, as above: the sealer is dead or late.
//! * **What a process cannot learn from another's directory**: retention.
//!   The roll's installer (sealer or follower) trims its own directory as
//!   any roll does; a trimmed file is renamed to a spare and, once every
//!   process has let go of it, freed for a later roll to reuse, never while
//!   another process maps it (see "Recycling across processes" in
//!   `file/mod.rs`; the process that rolls also has its next file made
//!   ahead, for a roll that finds no free file, see "A spare made ahead" in
//!   `prefault.rs`). A process still
//!   reading a segment another process trimmed keeps its own mapping, which
//!   stays valid. A process whose directory ends before a successor that
//!   was made *and trimmed* meanwhile finds no file by that name but older
//!   ones gone too ([`Shared::skip_trimmed`]): it replaces its directory by
//!   the files there are now, marking its own segments trimmed, so its
//!   cursors are told what they missed (`Lagged`) and its publishers append
//!   after the newest record. It never takes such a roll over: that would
//!   make a file for offsets already used.
//!
//! Only the cold paths (a `Full` reservation, a cursor past a sealed end,
//! the roll) look at the mode; the append and the read are the same code
//! for both.
//!
//! No loom model covers the cross-process steps: loom cannot put its
//! atomics in a file mapping (under loom a segment file's state is in
//! memory of its own, and this mode is compiled out), and what orders them
//! is the file system (`link` before `open`), not an ordering of ours. The
//! in-process step, several installers racing one exchange, uses the
//! exchange of a stalled roll's retries with its orderings (`Release`;
//! `Acquire` on failure, since the loser looks into the directory it lost
//! to); the model `a_failed_roll_fails_its_waiters_and_a_later_publish_recovers`
//! runs that exchange against a stalled directory, not two installers of
//! one successor. The tests in `procs_tests.rs` run the whole roll in real
//! processes.

use super::config::Sizes;
use super::durable::Durability;
use super::pool::Pool;
use super::segment::{Reservation, Segment};
use super::storage::Pages;
use crate::error::{Error, Result};
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::epoch::{self, Guard, Owned};
use crate::sync::{Arc, Backoff, Mutex};

/// How long a publisher waits for the successor of a segment another
/// process sealed before it makes the successor's file itself (see "The
/// roll across processes"): long enough that a live sealer, which makes
/// the file right after the seal, is never raced in normal operation.
#[cfg(not(loom))]
pub(super) const ROLL_TAKEOVER: std::time::Duration = std::time::Duration::from_secs(1);

/// How long, by default, a reservation in a log shared by processes may
/// stay uncommitted, and an elected sealer may leave its segment unsealed,
/// before a process waiting on it gives it up (see "An abandoned
/// reservation" and "A sealer that dies before it seals" in `segment.rs`):
/// far longer than a live publisher takes between its fetch-add and its
/// commit (a copy of at most a segment), short enough that a dead one
/// blocks readers and publishers for a moment only.
pub(crate) const ABANDON_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Test seam: what a process does right after its fetch-add on a tail
/// word (see [`die_after_reserving`]): [`LIVE`], or one of the two deaths.
#[cfg(all(test, not(loom)))]
pub(super) static DIE_AFTER: crate::sync::atomic::AtomicU8 = crate::sync::atomic::AtomicU8::new(LIVE);
/// [`DIE_AFTER`]: go on as usual.
#[cfg(all(test, not(loom)))]
pub(super) const LIVE: u8 = 0;
/// [`DIE_AFTER`]: exit at once after a granted reservation, before writing
/// or committing it (a publisher killed between reserve and commit).
#[cfg(all(test, not(loom)))]
pub(super) const DIE_GRANTED: u8 = 1;
/// [`DIE_AFTER`]: exit at once after the reservation that elected this
/// publisher its segment's sealer, before the seal.
#[cfg(all(test, not(loom)))]
pub(super) const DIE_SEALER: u8 = 2;
/// The exit status of a process the seam ended.
#[cfg(all(test, not(loom)))]
pub(super) const DIED_AT_SEAM: i32 = 86;

/// Test seam: exits the process with `_exit` (no unwinding, no
/// destructors, nothing flushed: as a kill leaves it) if [`DIE_AFTER`] asks
/// for it after `reservation`. Compiled into unit tests only.
#[cfg(all(test, not(loom)))]
fn die_after_reserving(reservation: Reservation) {
    // Relaxed: set by the test before it appends.
    let die = match DIE_AFTER.load(Ordering::Relaxed) {
        DIE_GRANTED => matches!(reservation, Reservation::Granted { .. }),
        DIE_SEALER => matches!(reservation, Reservation::Sealer { .. }),
        _ => false,
    };
    if die {
        // SAFETY: `_exit` ends the process; it takes no pointers.
        unsafe { libc::_exit(DIED_AT_SEAM) };
    }
}

/// The retained segments, oldest first; consecutive segments are contiguous
/// in offsets. Never empty; all but the last are sealed.
pub(super) struct Dir {
    pub(super) segs: Vec<Arc<Segment>>,
    /// The newest segment, `segs`' last, held here too: every append reads
    /// it, and from here that costs no line beyond the directory's own
    /// (from `segs` it was a load of the vector's buffer too, a line no
    /// recent append touched when the log is one of many; see the `Shared`
    /// layout).
    newest: Arc<Segment>,
    /// Set when the newest segment is sealed but its successor could not be
    /// allocated: why (see "A roll that fails" above). Beside `segs` and
    /// `newest`, so the publishers' check costs no extra cache line.
    pub(super) stalled: Option<Box<Error>>,
    /// Under loom only: a cell standing for the directory's own memory (the
    /// vector and the error, plain memory loom cannot see), created with
    /// it and read by [`Dir::read`] wherever a thread dereferences a
    /// directory it loaded, so that loom reports a directory read by a
    /// thread that its installer's exchange did not synchronise with.
    #[cfg(loom)]
    built: crate::sync::UnsafeCell<()>,
}

// SAFETY: under loom the cell above holds `()` and is never written after
// `Dir::new` (before the directory is shared); it is only read, through
// loom's checked `with`. The rest of `Dir` is `Send + Sync` on its own.
#[cfg(loom)]
unsafe impl Sync for Dir {}

impl Dir {
    pub(super) fn new(segs: Vec<Arc<Segment>>, stalled: Option<Box<Error>>) -> Dir {
        let newest = segs.last().expect("a directory is never empty").clone();
        Dir {
            segs,
            newest,
            stalled,
            #[cfg(loom)]
            built: crate::sync::UnsafeCell::new(()),
        }
    }

    /// This directory, for a thread that has just dereferenced a pointer to
    /// it. Under loom, records the read (see `built`); otherwise nothing.
    #[inline]
    pub(super) fn read(&self) -> &Dir {
        #[cfg(loom)]
        self.built.with(|_| ());
        self
    }

    pub(super) fn first_offset(&self) -> u64 {
        self.segs[0].base()
    }

    pub(super) fn last(&self) -> &Arc<Segment> {
        &self.newest
    }

    /// The segment that holds (or will hold) `offset`, which is at least
    /// `first_offset()`: the last one whose base is not above it.
    pub(super) fn find(&self, offset: u64) -> &Arc<Segment> {
        let after = self.segs.partition_point(|s| s.base() <= offset);
        &self.segs[after.saturating_sub(1)]
    }

    pub(super) fn end_offset(&self) -> u64 {
        let last = self.last();
        last.base() + last.reserved()
    }
}

/// What a log shares between its handle and its cursors.
///
/// Laid out in this order (`repr(C)`): what every append reads (`dir`,
/// `always`, `sizes`, whose own hot fields come first) at the front, so
/// that an append to a log no recent append touched misses on one line of
/// it (two, as the heap block falls) where the compiler's order spread
/// them over three (`wildcard_breadth`, an example of rill-bench, counts
/// the misses under callgrind).
#[repr(C)]
pub(super) struct Shared {
    pub(super) dir: epoch::Atomic<Dir>,
    /// `append` waits for durability (`Fsync::Always`).
    pub(super) always: bool,
    /// The segment files are shared with other processes (see "The roll
    /// across processes"): looked at on the cold paths only.
    pub(super) processes: bool,
    /// The partition this log belongs to, for errors that name it.
    pub(super) partition: u32,
    pub(super) sizes: Sizes,
    pub(super) pool: Arc<Pool>,
    /// Processes mode: how long a reservation may stay uncommitted, or an
    /// elected sealer not seal, before a waiter gives it up (see "An
    /// abandoned reservation" in `segment.rs`), in nanoseconds:
    /// [`ABANDON_AFTER`] unless the crate sets another
    /// ([`super::Log::set_abandon_after`], the crate-internal knob).
    pub(super) abandon_after_ns: AtomicU64,
    /// A durable log's group-commit state (`durable.rs`); `None` in memory.
    pub(super) durability: Option<Durability>,
    /// Readers that retention must wait for: it never trims a segment holding
    /// an offset at or above any of their positions. Read once per rollover.
    pub(super) holds: Mutex<Vec<(u64, Arc<AtomicU64>)>>,
    /// Segments trimmed by retention so far.
    pub(super) trimmed_segments: AtomicU64,
    /// Compaction's figures and progress (`compact.rs`).
    pub(super) compaction: super::compact_state::Compaction,
    /// The log's last writes to its newest file (the end mark, the checked
    /// prefix) were made by [`super::Log::close_files`], at its broker's
    /// close: its drop, perhaps much later, writes nothing more there.
    pub(super) files_closed: crate::sync::atomic::AtomicBool,
    /// Test seam: the next granted reservation's first slot is given up
    /// before its writer commits (as a claimer would after the bound), so
    /// its append fails as a late writer's does.
    #[cfg(all(test, not(loom)))]
    pub(super) claim_next: crate::sync::atomic::AtomicBool,
}

impl Shared {
    /// Processes mode: how long a waiter waits before it gives an
    /// uncommitted reservation or an unmade seal up ([`ABANDON_AFTER`] by
    /// default).
    #[cfg(not(loom))]
    pub(super) fn abandon_after(&self) -> std::time::Duration {
        // Relaxed: see `Log::set_abandon_after`.
        std::time::Duration::from_nanos(self.abandon_after_ns.load(Ordering::Relaxed))
    }

    /// The current directory, valid while `guard` is pinned.
    #[inline]
    pub(super) fn dir<'g>(&self, guard: &'g Guard) -> &'g Dir {
        // SAFETY: the directory pointer is set at construction and only ever
        // replaced by another valid one; a replaced directory is retired with
        // `defer_destroy`, so it stays alive while `guard` is pinned.
        unsafe { self.dir_ptr(guard).deref() }.read()
    }

    /// The current directory's pointer (for a compare-exchange against it).
    #[inline]
    pub(super) fn dir_ptr<'g>(&self, guard: &'g Guard) -> epoch::Shared<'g, Dir> {
        // Acquire: pairs with the Release exchanges in `install_next` and
        // `stall`, so the segments it names (and its error text) are fully
        // initialised.
        self.dir.load(crate::sync::ordering_or_weakened!("L2", Ordering::Acquire), guard)
    }

    /// Reserves `records` slots and `bytes` bytes in the newest segment and
    /// hands the range to `write` (segment, first index, first byte). Rolls
    /// over to a new segment, or waits for another publisher's roll, as
    /// needed. Fails only if the next segment cannot be allocated.
    #[inline]
    pub(super) fn reserve_then<R>(
        &self,
        records: u64,
        bytes: u64,
        guard: &mut Guard,
        write: impl FnOnce(&Segment, u64, u64) -> R,
    ) -> Result<R> {
        let mut write = Some(write);
        loop {
            let current = self.dir_ptr(guard);
            // SAFETY: as in `dir`: a valid directory, alive while `guard` is pinned.
            let dir = unsafe { current.deref() }.read();
            if dir.stalled.is_some() {
                // A roll failed; try it again ourselves (see the module docs).
                self.install_next(current, guard)?;
                continue;
            }
            let seg = dir.last();
            let reservation = seg.reserve(records, bytes);
            #[cfg(all(test, not(loom)))]
            die_after_reserving(reservation);
            match reservation {
                Reservation::Granted { index, pos } => {
                    // Relaxed: a test knob set before the append.
                    #[cfg(all(test, not(loom)))]
                    if self.claim_next.swap(false, Ordering::Relaxed) {
                        seg.claim_abandoned(index, index + 1);
                    }
                    // One comparison per append: a reservation that crosses
                    // a multiple of `STEP` keeps a segment not yet faulted
                    // in faulted ahead of it ("Ahead of the tail" in
                    // `prefault.rs`).
                    #[cfg(not(loom))]
                    if (pos ^ (pos + bytes)) >= super::prefault::STEP {
                        super::prefault::crossed(&self.pool, seg, pos + bytes, index + records);
                    }
                    let write = write.take().expect("a reservation is granted once");
                    return Ok(write(seg, index, pos));
                }
                Reservation::Sealer { count, end } => self.roll(seg, count, end, current, guard)?,
                Reservation::Full => {
                    // Held across the wait (which re-pins): the roll is seen
                    // as a different newest segment, not a different base,
                    // since an early seal can leave a segment of 0 records
                    // whose successor has the same base.
                    let seg = seg.clone();
                    self.wait_for_roll(&seg, guard)?;
                }
            }
        }
    }

    /// Seals `seg` at `count` records ending at byte `end` and installs the next segment, trimming
    /// the head for retention. Called only by the one publisher whose
    /// reservation got `Sealer`; `current` is the directory it found `seg` in.
    /// If the next segment cannot be allocated, publishes the directory as
    /// stalled and returns the error.
    #[cold]
    pub(super) fn roll(
        &self,
        seg: &Segment,
        count: u64,
        end: u64,
        current: epoch::Shared<'_, Dir>,
        guard: &Guard,
    ) -> Result<()> {
        // The end mark first: it goes before the next segment's file exists
        // (see "Recycling" in `file/mod.rs`), and before the seal, whose Release store then
        // publishes it to a sync round that sees the seal and flushes the
        // segment through its end mark (`durable.rs`). Then seal, before the
        // next segment becomes visible (see segment.rs) and before trying to
        // allocate it, so a failed roll leaves the final count where anyone
        // retrying the roll can read it.
        seg.end_records(end);
        seg.seal(count);
        self.install_next(current, guard).inspect_err(|e| {
            ::log::error!(target: "rill::log", "partition {}: the next log segment could not be allocated: {e}", self.partition);
            self.stall(current, e, guard);
        })
    }

    /// Installs the segment after the newest (sealed) one of `current`. Does
    /// nothing if another publisher replaced `current` first.
    #[cold]
    pub(super) fn install_next(&self, current: epoch::Shared<'_, Dir>, guard: &Guard) -> Result<()> {
        // SAFETY: as in `dir`: `current` was loaded under `guard`.
        let old = unsafe { current.deref() }.read();
        let last = old.last();
        let count = last.sealed_count().expect("the newest segment is sealed before its successor is installed");
        let base = last.base() + count;
        #[cfg(not(loom))]
        if self.processes {
            // Made by us, or by whoever linked its name first.
            let next = self.make_or_open(base)?;
            return self.install(current, next, guard);
        }
        // Huge pages once a full-size segment was filled, not after a small
        // first segment (see `Pages` in `storage.rs`).
        let pages = if last.capacity() < self.pool.capacity() as u64 { Pages::Small } else { Pages::Huge };
        let buffers = match self.pool.take(base, pages) {
            Ok(buffers) => buffers,
            // Several publishers retrying a stalled roll of a durable log
            // race to create the same segment file: one creates it, and will
            // install it (nothing can fail between the two); the others wait
            // for that and retry in the new segment.
            Err(Error::Io { kind: std::io::ErrorKind::AlreadyExists, .. }) if old.stalled.is_some() => {
                let mut backoff = Backoff::new();
                while self.dir_ptr(guard) == current {
                    backoff.snooze();
                }
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        // A growing memory log that filled a full-size segment streams:
        // have its next segment made ahead ("A spare made ahead" in
        // `prefault.rs`).
        #[cfg(not(loom))]
        if pages == Pages::Huge {
            super::prefault::ahead(&self.pool);
        }
        let next = Arc::new(Segment::new(base, buffers, self.pool.clone()));
        // A segment over fresh memory (or a new file): its first pages are
        // faulted in ahead of its publishers ("Ahead of the tail").
        #[cfg(not(loom))]
        super::prefault::installed(&next, count, last.used_bytes());
        self.install(current, next, guard)
    }

    /// Installs `next`, the successor of the newest (sealed) segment of
    /// `current`, trimming the head for retention. Does nothing if the
    /// directory no longer ends with that segment (another roller of a
    /// stalled roll, or in Processes mode another installer of the same
    /// file, was first).
    #[cold]
    fn install(&self, current: epoch::Shared<'_, Dir>, next: Arc<Segment>, guard: &Guard) -> Result<()> {
        // SAFETY: as in `dir`: `current` was loaded under `guard`.
        let old = unsafe { current.deref() }.read();
        let last = old.last();
        let count = last.sealed_count().expect("the newest segment is sealed before its successor is installed");
        let base = next.base();
        let mut current = current;
        let trimmed = loop {
            // SAFETY: as in `dir`: `current` was loaded under `guard` (or
            // returned, under it, by the failed exchange below).
            let from = unsafe { current.deref() }.read();
            let mut segs = Vec::with_capacity(from.segs.len() + 1);
            segs.extend(from.segs.iter().cloned());
            segs.push(next.clone());
            let trim = self.trim_count(&segs, self.expired_before());
            let trimmed: Vec<Arc<Segment>> = segs.drain(..trim).collect();
            // Release: publishes the new segment's initial state (and the seal) to
            // every Acquire load of the directory. Acquire on failure (T2): if an
            // idle trim replaced the directory, we build again from its copy,
            // which must be seen built (pairs with T1 in `trim_idle`); if
            // another publisher's roll won, after a stall, we only drop what we
            // built.
            let new = Owned::new(Dir::new(segs, None));
            match self.dir.compare_exchange(
                current,
                new,
                crate::sync::ordering_or_weakened!("L2", Ordering::Release),
                crate::sync::ordering_or_weakened!("T2", Ordering::Acquire),
                guard,
            ) {
                Ok(_) => break trimmed,
                Err(e) => match self.trimmed_under(last, e.current, guard) {
                    // An idle trim replaced the directory: again from that one.
                    Some(now) if old.stalled.is_none() => current = now,
                    _ => {
                        debug_assert!(
                            old.stalled.is_some() || self.processes,
                            "only a stalled directory, or a shared log's, has several installers"
                        );
                        return Ok(());
                    }
                },
            }
        };
        if let Some(files) = self.pool.files() {
            // The new segment is the directory's newest now: the flusher's
            // preparation of its file (see `Log::prepare_ahead`) finds it.
            files.rolled();
        }
        // Only now, with the directory that omits them published, tell cursors
        // inside the trimmed segments to move on (see `Segment::mark_trimmed`).
        for seg in &trimmed {
            seg.mark_trimmed();
        }
        if self.durability.is_some() {
            log::debug!(
                "partition {}: rolled to a segment at offset {base}, trimmed {}",
                self.partition,
                trimmed.len()
            );
        }
        // Relaxed: a statistic.
        self.trimmed_segments.fetch_add(trimmed.len() as u64, Ordering::Relaxed);
        // Once per segment, never per record.
        ::log::debug!(
            target: "rill::log",
            "partition {}: rolled over to a new segment at offset {}",
            self.partition,
            last.base() + count
        );
        if let (Some(first), Some(end)) = (trimmed.first(), trimmed.last()) {
            ::log::debug!(
                target: "rill::log",
                "partition {}: retention trimmed {} segment(s), offsets {}..{}",
                self.partition,
                trimmed.len(),
                first.base(),
                end.base() + end.sealed_count().unwrap_or(0)
            );
        }
        drop(trimmed);
        self.retire(current, guard);
        Ok(())
    }

    /// `now` (the directory a failed exchange found) if it is an idle trim's
    /// or a compaction pass's (or a follow of another process's pass) copy
    /// of a directory whose newest segment was
    /// `last` (not stalled): the roll or stall of `last` must then be made
    /// from it.
    fn trimmed_under<'g>(
        &self,
        last: &Arc<Segment>,
        now: epoch::Shared<'g, Dir>,
        _guard: &'g Guard,
    ) -> Option<epoch::Shared<'g, Dir>> {
        // SAFETY: as in `dir`: `now` was loaded under `_guard` by the exchange.
        let dir = unsafe { now.deref() }.read();
        (dir.stalled.is_none() && Arc::ptr_eq(dir.last(), last)).then_some(now)
    }

    /// Replaces `current` (whose roll just failed with `error`) by a stalled
    /// copy, so waiting and later publishers learn of it (see the module docs).
    #[cold]
    pub(super) fn stall(&self, current: epoch::Shared<'_, Dir>, error: &Error, guard: &Guard) {
        // SAFETY: as in `dir`: `current` was loaded under `guard`.
        let old = unsafe { current.deref() }.read();
        if old.stalled.is_some() {
            return;
        }
        let last = old.last().clone();
        let mut current = current;
        loop {
            // SAFETY: as in `dir`: `current` was loaded under `guard` (or
            // returned, under it, by the failed exchange below).
            let from = unsafe { current.deref() }.read();
            let stalled = Owned::new(Dir::new(from.segs.clone(), Some(Box::new(error.clone()))));
            // Release: publishes the stalled directory's contents, as in
            // `install_next`. Besides the sealer only an idle trim writes the
            // directory (see the module docs): then again from its copy, hence
            // Acquire on failure (T2, as in `install_next`).
            match self.dir.compare_exchange(
                current,
                stalled,
                crate::sync::ordering_or_weakened!("L2", Ordering::Release),
                crate::sync::ordering_or_weakened!("T2", Ordering::Acquire),
                guard,
            ) {
                Ok(_) => {
                    self.retire(current, guard);
                    return;
                }
                Err(e) => match self.trimmed_under(&last, e.current, guard) {
                    Some(now) => current = now,
                    None => {
                        debug_assert!(false, "the sealer, idle trims and compaction are the directory's only writers");
                        return;
                    }
                },
            }
        }
    }

    /// The retained segments from the one holding `offset` on (all of them
    /// if it was trimmed): a snapshot for a sync round.
    pub(super) fn segments_from(&self, offset: u64) -> Vec<Arc<Segment>> {
        let guard = epoch::pin();
        let dir = self.dir(&guard);
        let start = dir.segs.partition_point(|s| s.base() <= offset).saturating_sub(1);
        dir.segs[start..].to_vec()
    }

    /// Frees a directory that was just replaced, once no reader can hold it.
    pub(super) fn retire(&self, replaced: epoch::Shared<'_, Dir>, guard: &Guard) {
        // SAFETY: `replaced` is no longer reachable from `self.dir`; threads that
        // loaded it before the exchange are pinned, and the collector runs the
        // destructor only after all of them unpin.
        unsafe { guard.defer_destroy(replaced) };
        // Push the retired directory to the global queue now, so the segments it
        // holds are released promptly rather than when this thread's bag fills.
        guard.flush();
    }

    /// Replaces the directory `current` (loaded under `guard`) by one of
    /// `segs`, which holds the same newest segment and rebuilt sealed ones:
    /// the exchange of a compaction's swap and of a follow (C1, see "The
    /// swap" in `compact.rs`), which retires `current` if it wins. `Err`
    /// with the directory it lost to, to build again from.
    pub(super) fn swap_sealed<'g>(
        &self,
        current: epoch::Shared<'g, Dir>,
        segs: Vec<Arc<Segment>>,
        guard: &'g Guard,
    ) -> std::result::Result<(), epoch::Shared<'g, Dir>> {
        // Release (C1): publishes the rebuilt segments, written by this
        // thread, to the Acquire loads of the directory (L2) and to a
        // roller whose exchange fails against this one (T2). Acquire on
        // failure: the caller builds again from the directory it lost to.
        match self.dir.compare_exchange(
            current,
            Owned::new(Dir::new(segs, None)),
            crate::sync::ordering_or_weakened!("C1", Ordering::Release),
            Ordering::Acquire,
            guard,
        ) {
            Ok(_) => {
                self.retire(current, guard);
                Ok(())
            }
            Err(e) => Err(e.current),
        }
    }

    /// Waits, briefly, until `seg` is no longer the newest segment.
    /// Fails if its roll failed: the publisher that got `Sealer` could not
    /// allocate the next segment.
    #[cold]
    pub(super) fn wait_for_roll(&self, seg: &Arc<Segment>, guard: &mut Guard) -> Result<()> {
        let mut backoff = Backoff::new();
        // Processes mode: when this waiter may make the successor's file
        // itself (see "The roll across processes"); counted from when it
        // first saw the seal, not from the `Full`, which may come first.
        #[cfg(not(loom))]
        let mut take_over_at = None;
        // Processes mode: when this waiter may seal the segment itself, if
        // its elected sealer has not (counted from the first look).
        #[cfg(not(loom))]
        let mut seal_at = None;
        loop {
            let dir = self.dir(guard);
            if !Arc::ptr_eq(dir.last(), seg) {
                return Ok(());
            }
            match dir.stalled.as_deref() {
                // A segment file could not be made: the waiters get the same
                // I/O error (naming the file), as the roller did.
                Some(error @ Error::Io { .. }) => return Err(error.clone()),
                Some(error) => {
                    return Err(Error::ResourceExhausted(format!(
                        "the partition's next log segment could not be allocated ({error})"
                    )));
                }
                None => {}
            }
            #[cfg(not(loom))]
            if self.processes && seg.sealed_count().is_none() && seg.awaits_seal() {
                // The elected sealer, maybe in another process, has not
                // sealed: after the abandon bound, seal in its place (see
                // "A sealer that dies before it seals" in `segment.rs`),
                // and take its roll over at once, since it is dead or late.
                let now = std::time::Instant::now();
                if now >= *seal_at.get_or_insert(now + self.abandon_after()) {
                    let count = seg.take_over_seal();
                    ::log::warn!(
                        target: "rill::log",
                        "partition {}: the segment at offset {} was not sealed within the abandon bound of \
                         its sealer's election; sealed it here at {count} records",
                        self.partition,
                        seg.base()
                    );
                    take_over_at = Some(now);
                }
            }
            #[cfg(not(loom))]
            if self.processes && seg.sealed_count().is_some() {
                // The sealer may be in another process: its exchange never
                // changes our directory, so we follow its roll ourselves.
                let now = std::time::Instant::now();
                let take_over = now >= *take_over_at.get_or_insert(now + ROLL_TAKEOVER);
                if self.follow(seg, take_over, guard)? {
                    return Ok(());
                }
            }
            backoff.snooze();
            // Re-pin each round so a slow sealer does not also hold back reclamation.
            guard.repin();
        }
    }

    /// Processes mode: installs in this process's directory the successor
    /// of `seg`, a sealed segment, from the file another process (or
    /// another thread of ours) linked under its name, if it is there yet;
    /// with `take_over`, makes that file first if no one has (see "The roll
    /// across processes"). True once the directory no longer ends with
    /// `seg` (installed by us or by another thread); false if `seg` is not
    /// sealed yet or its successor's file does not exist yet.
    #[cfg(not(loom))]
    #[cold]
    pub(super) fn follow(&self, seg: &Arc<Segment>, take_over: bool, guard: &Guard) -> Result<bool> {
        let current = self.dir_ptr(guard);
        // SAFETY: as in `dir`: a valid directory, alive while `guard` is pinned.
        let dir = unsafe { current.deref() }.read();
        if !Arc::ptr_eq(dir.last(), seg) {
            return Ok(true);
        }
        let Some(count) = seg.sealed_count() else { return Ok(false) };
        let base = seg.base() + count;
        let next = match open_shared_segment(&self.pool, base)? {
            Some(next) => next,
            // Not made yet, or made and trimmed since: never made again then.
            None if self.skip_trimmed(current, base, guard)? => return Ok(true),
            None if take_over => {
                let next = self.make_or_open(base)?;
                ::log::warn!(
                    target: "rill::log",
                    "partition {}: the segment at offset {base} was not made {ROLL_TAKEOVER:?} after its \
                     predecessor's seal; made or opened it here",
                    self.partition
                );
                next
            }
            None => return Ok(false),
        };
        self.install(current, next, guard)?;
        Ok(true)
    }

    /// Processes mode: if the segment files from `base` on are gone, trimmed
    /// by another process's retention while this one's directory, `current`,
    /// still ended before `base` (it published and read nothing meanwhile),
    /// replaces that directory by the files the partition has now, whose
    /// oldest lies past `base`, and returns true. Its segments are marked
    /// trimmed, so a cursor inside one learns what it missed ([`Lagged`])
    /// and moves on to the oldest retained record, as after a trim of ours;
    /// and no one makes a file for `base` again (a taken-over roll would,
    /// repeating offsets that were trimmed). False if a file at or below
    /// `base` still exists: the roll is not made yet.
    ///
    /// [`Lagged`]: super::Lagged
    #[cfg(not(loom))]
    #[cold]
    fn skip_trimmed(&self, current: epoch::Shared<'_, Dir>, base: u64, guard: &Guard) -> Result<bool> {
        // Names first (cheap, once per poll of a roll not made yet); the
        // files are mapped only once the successor is known to be gone.
        if shared_segment_bases(&self.pool)?.first().is_none_or(|&oldest| oldest <= base) {
            return Ok(false);
        }
        let segs = list_shared_segments(&self.pool)?;
        if segs.first().is_none_or(|oldest| oldest.base() <= base) {
            return Ok(false);
        }
        // SAFETY: as in `dir`: `current` was loaded under `guard`.
        let old = unsafe { current.deref() }.read();
        let last = old.last().clone();
        // Release: publishes the new directory's segments, as in `install`;
        // Acquire on failure (T2, as there): we look into what we lost to.
        match self.dir.compare_exchange(
            current,
            Owned::new(Dir::new(segs, None)),
            crate::sync::ordering_or_weakened!("L2", Ordering::Release),
            crate::sync::ordering_or_weakened!("T2", Ordering::Acquire),
            guard,
        ) {
            Ok(_) => {}
            // Another thread of ours moved the directory on, or an idle trim
            // copied it (then the caller polls again).
            Err(e) => return Ok(self.trimmed_under(&last, e.current, guard).is_none()),
        }
        for seg in &old.segs {
            seg.mark_trimmed();
        }
        // Relaxed: a statistic.
        self.trimmed_segments.fetch_add(old.segs.len() as u64, Ordering::Relaxed);
        ::log::info!(
            target: "rill::log",
            "partition {}: offsets from {} were trimmed by another process before this one reached them",
            self.partition,
            old.first_offset()
        );
        self.retire(current, guard);
        Ok(true)
    }

    /// Processes mode: the segment at `base`, over a segment file this
    /// process makes and links under its name, or, if another process (or
    /// thread) linked that name first, over a mapping of that one.
    #[cfg(not(loom))]
    #[cold]
    fn make_or_open(&self, base: u64) -> Result<Arc<Segment>> {
        let taken = self.pool.take(base, Pages::Huge);
        // This process rolls this partition: have its next file made ahead
        // ("A spare made ahead" in `prefault.rs`: a free file claimed, or,
        // for a roll that finds none, a file made ahead).
        super::prefault::ahead(&self.pool);
        match taken {
            Ok(buffers) => Ok(Arc::new(Segment::new(base, buffers, self.pool.clone()))),
            Err(exists @ Error::Io { kind: std::io::ErrorKind::AlreadyExists, .. }) => {
                // The link lost: someone else's file is whole under the
                // name. Gone again only if retention already trimmed it.
                open_shared_segment(&self.pool, base)?.ok_or(exists)
            }
            Err(e) => Err(e),
        }
    }

    /// With an age limit: the time before which records have expired.
    pub(super) fn expired_before(&self) -> Option<u64> {
        (self.sizes.retention_ns != u64::MAX).then(|| crate::clock::now_ns().saturating_sub(self.sizes.retention_ns))
    }

    /// The lowest position of a reader retention must wait for (`u64::MAX`
    /// if none). Exact at this moment: positions only grow, so a reader
    /// that moves on while we look merely keeps a little more than it needs
    /// until the next roll.
    fn hold_floor(&self) -> u64 {
        self.holds
            .lock()
            .iter()
            // Acquire: pairs with the reader's Release store of its position.
            .map(|(_, position)| position.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Seals the newest segment early, as a publisher that overfilled it
    /// would, so that its roll trims what has expired, if the oldest
    /// segment has expired and no reader holds it (else a roll would trim
    /// nothing, and a quiet partition would gain a segment at every check).
    /// The roll is the ordinary one: its sealer is the directory's one
    /// writer, whoever it is (see "Writers of the directory" above).
    #[cold]
    pub(super) fn expire(&self, expired_before: Option<u64>) -> Result<()> {
        let Some(expired_before) = expired_before else { return Ok(()) };
        let guard = epoch::pin();
        let current = self.dir_ptr(&guard);
        // SAFETY: as in `dir`: a valid directory, alive while `guard` is pinned.
        let dir = unsafe { current.deref() }.read();
        if dir.stalled.is_some() {
            return Ok(());
        }
        let head = &dir.segs[0];
        let count = head.reserved();
        if count == 0 || !head.newest_before(count, expired_before) || head.base() + count > self.hold_floor() {
            return Ok(());
        }
        let last = dir.last();
        if self.durability.is_some() && last.reserved() == 0 {
            // A durable segment's file is named by its base offset, and an
            // empty newest segment's successor would have the same base: the
            // roll could not create its file, and would stall the partition.
            // So trim without a roll (see "A trim nobody publishes for").
            // (Reservations only grow: if one is granted after this check,
            // the seal below counts it, and the successor's base differs.)
            return self.trim_idle(current, expired_before, &guard);
        }
        // One record of more bytes than the segment holds is never granted:
        // the reservation is the sealer, or finds another publisher sealing.
        match last.reserve(1, last.capacity() + 1) {
            Reservation::Sealer { count, end } => {
                ::log::debug!(
                    target: "rill::log",
                    "partition {}: the age limit expired offsets from {}; sealing the newest segment early",
                    self.partition,
                    head.base()
                );
                self.roll(last, count, end, current, &guard)
            }
            Reservation::Full => Ok(()),
            Reservation::Granted { .. } => unreachable!("a reservation larger than the segment is never granted"),
        }
    }

    /// Installs a copy of `current` (whose newest segment was empty) without
    /// the head segments retention removes now; see "A trim nobody publishes
    /// for" in the module docs. Gives up if the directory changed meanwhile.
    /// `expired_before`: as in `expire` (the clock, or a test's time).
    fn trim_idle(&self, current: epoch::Shared<'_, Dir>, expired_before: u64, guard: &Guard) -> Result<()> {
        // SAFETY: as in `dir`: `current` was loaded under `guard`.
        let old = unsafe { current.deref() }.read();
        let trim = self.trim_count(&old.segs, Some(expired_before));
        if trim == 0 {
            return Ok(());
        }
        let new = Owned::new(Dir::new(old.segs[trim..].to_vec(), None));
        // Release (T1): the copy is new memory, published to the Acquire
        // loads in `dir_ptr` and to a roller whose exchange fails against it
        // (T2). Relaxed on failure: a publisher's roll won, and it trims
        // too; we only drop our copy.
        if self
            .dir
            .compare_exchange(
                current,
                new,
                crate::sync::ordering_or_weakened!("T1", Ordering::Release),
                Ordering::Relaxed,
                guard,
            )
            .is_err()
        {
            return Ok(());
        }
        let trimmed = &old.segs[..trim];
        for seg in trimmed {
            seg.mark_trimmed();
        }
        // Relaxed: a statistic.
        self.trimmed_segments.fetch_add(trim as u64, Ordering::Relaxed);
        ::log::debug!(
            target: "rill::log",
            "partition {}: the age limit trimmed {trim} segment(s) of an idle log, offsets {}..{}",
            self.partition,
            trimmed[0].base(),
            old.last().base()
        );
        self.retire(current, guard);
        Ok(())
    }

    /// How many head segments retention removes from `segs` (whose last
    /// element is the new, empty segment), with the age limit applied to
    /// records older than `expired_before` (ns; `None`: no age limit).
    pub(super) fn trim_count(&self, segs: &[Arc<Segment>], expired_before: Option<u64>) -> usize {
        let sizes = &self.sizes;
        let floor = self.hold_floor();
        // A durable segment's region has room for one more frame than its
        // configured size (see `Sizes::region_bytes`); retention counts the
        // configured size, so a durable log retains as many segments.
        let size = |s: &Segment| s.capacity().saturating_sub(sizes.frame);
        let mut bytes: u64 = segs.iter().map(|s| size(s)).sum();
        let mut records: u64 = segs.iter().map(|s| s.reserved()).sum();
        let mut trim = 0;
        // Never trims the last (active) segment.
        for head in &segs[..segs.len() - 1] {
            let count = head.sealed_count().expect("all but the newest segment are sealed");
            let over_bytes = bytes > sizes.retention_bytes;
            let over_records = records - count >= sizes.retention_messages;
            let over_age = expired_before.is_some_and(|t| head.newest_before(count, t));
            if !(over_bytes || over_records || over_age) || head.base() + count > floor {
                break;
            }
            bytes -= size(head);
            records -= count;
            trim += 1;
        }
        trim
    }
}

/// Processes mode: the segment at `base` over this process's own mapping
/// of its segment file in `pool`'s directory, made and linked by another
/// process or thread, held (see `file/map_locks.rs`); `None` if no file
/// has that name (not made yet, or trimmed), or the file is being freed or
/// reused, or was reused since the open (trimmed too, see "Recycling
/// across processes" in `file/mod.rs`). Fails if the file is not a whole
/// segment file for `base` with its reservation state in it.
#[cfg(not(loom))]
pub(super) fn open_shared_segment(pool: &Arc<Pool>, base: u64) -> Result<Option<Arc<Segment>>> {
    use super::file::{self, FileStorage, HEADER_END, Header};
    use super::segment::Buffers;
    let files = pool.files().expect("a log shared by processes is durable");
    let path = files.dir.join(file::segment_file_name(base));
    let storage = match FileStorage::open_existing(&path) {
        Ok(storage) => storage,
        Err(Error::Io { kind: std::io::ErrorKind::NotFound, .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    // Held before anything of it is read (see "Recycling across processes"
    // in `file/mod.rs`): refused, the file is being freed or reused, so it
    // is no longer this segment's; granted, no one rewrites it while we map
    // it. A file reused between our open and our hold is another
    // segment's: its name is gone (or another file's), as a trimmed one's.
    if !files.hold(&storage)? {
        return Ok(None);
    }
    let renamed = || file::inode_at(&path).map_or(true, |now| now != Some(storage.inode()));
    // The fixed fields only: they are written before the file is linked and
    // never after (the tail word and the seal further on may be changing).
    let header = Header::decode(&storage.bytes()[..HEADER_END]).ok();
    if header.is_some_and(|h| h.base != base) && renamed() {
        return Ok(None);
    }
    if header.is_none_or(|h| h.base != base) || !storage.has_index() {
        return Err(Error::Corrupt {
            file: path,
            offset: 0,
            reason: "not a whole segment file for its name (header, base or offset index)".into(),
        });
    }
    // Complete from its birth: perhaps a compaction's rebuilt file, whose
    // compacted-away records readers pass over (see "The swap across
    // processes" in `compact.rs`); a file a sync round completed is only
    // read a little more carefully.
    let skips = header.is_some_and(|h| h.complete.is_some());
    let buffers = Buffers::over(Box::new(storage), 0, Pages::Small)?;
    Ok(Some(Arc::new(Segment::attach(base, buffers, pool.clone()).with_skips(skips))))
}

/// Processes mode: the base offsets of the segment files in `pool`'s
/// directory, in order.
#[cfg(not(loom))]
fn shared_segment_bases(pool: &Pool) -> Result<Vec<u64>> {
    let files = pool.files().expect("a log shared by processes is durable");
    let io = |e: std::io::Error| Error::io(&files.dir, &e);
    let mut bases = Vec::new();
    for entry in std::fs::read_dir(&files.dir).map_err(io)? {
        let name = entry.map_err(io)?.file_name();
        if let Some(base) = name.to_str().and_then(super::file::parse_segment_file_name) {
            bases.push(base);
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

/// Processes mode: the newest run of contiguous segments whose files are in
/// `pool`'s directory, each over a mapping of this process's own (empty if
/// there is none). An older file may be trimmed while we look: it is
/// skipped, and so is everything before it.
#[cfg(not(loom))]
pub(super) fn list_shared_segments(pool: &Arc<Pool>) -> Result<Vec<Arc<Segment>>> {
    let bases = shared_segment_bases(pool)?;
    let mut segs: Vec<Arc<Segment>> = Vec::with_capacity(bases.len());
    for base in bases {
        // Gone since the listing: trimmed by retention in another process.
        let Some(seg) = open_shared_segment(pool, base)? else { continue };
        // Every segment but the newest is sealed before its successor's
        // file exists; one that does not end where this one starts was
        // trimmed (or its files are not one partition's): start again.
        if segs.last().is_some_and(|prev| prev.sealed_count().map(|n| prev.base() + n) != Some(base)) {
            segs.clear();
        }
        segs.push(seg);
    }
    Ok(segs)
}

impl Shared {
    /// Processes mode: installs in this process's directory the segments
    /// other processes rolled to since it last looked (see
    /// [`Log::follow_rolls`](super::Log::follow_rolls)).
    #[cfg(not(loom))]
    pub(super) fn follow_rolls(&self) -> Result<()> {
        let mut guard = epoch::pin();
        loop {
            let last = self.dir(&guard).last().clone();
            // Each turn installs one successor (ours or another thread's),
            // or ends: the newest segment unsealed, or its successor's file
            // not made yet.
            if last.sealed_count().is_none() || !self.follow(&last, false, &guard)? {
                return Ok(());
            }
            guard.repin();
        }
    }

    /// Processes mode: installs, in this process's directory, a mapping of
    /// each rebuilt file that another process's compaction renamed over a
    /// sealed segment's file this directory still maps (its name's inode is
    /// not its mapping's), in place of the old mapping; never the newest
    /// segment. Looks at the sealed segments from base `from` on (0: all;
    /// the caller's last follow looked at those before it, and no swap
    /// came since). See "The swap across processes" in `compact.rs`.
    ///
    /// The base of the newest segment of the directory it looked at, which
    /// the next follow starts from: once this process's directory rolls
    /// past it, that segment is sealed here too and may be a mapping of a
    /// file another process rebuilt while it was this process's newest.
    /// `None` if it could not install what it found (the directory
    /// stalled): the next follow must look again.
    #[cfg(not(loom))]
    pub(super) fn follow_swaps(&self, from: u64) -> Result<Option<u64>> {
        let guard = epoch::pin();
        let (stale, newest_base): (Vec<Arc<Segment>>, u64) = {
            let dir = self.dir(&guard);
            let mut stale = Vec::new();
            let sealed = &dir.segs[..dir.segs.len() - 1];
            // Segments are in offset order: those from `from` on are last.
            let first = sealed.partition_point(|seg| seg.base() < from);
            for seg in &sealed[first..] {
                let Some(file) = seg.file() else { continue };
                let path = file.name();
                let now = super::file::inode_at(&path).map_err(|e| Error::io(&path, &e))?;
                // Gone: trimmed (by us or another process); ours stays
                // until our own retention trims it.
                if now.is_some_and(|ino| ino != file.inode()) {
                    stale.push(seg.clone());
                }
            }
            (stale, dir.last().base())
        };
        if stale.is_empty() {
            return Ok(Some(newest_base));
        }
        let mut fresh = Vec::with_capacity(stale.len());
        for old in stale {
            let Some(new) = open_shared_segment(&self.pool, old.base())? else { continue };
            // A rebuilt file covers the same offsets, sealed before its name
            // existed; anything else under the name is not one.
            if new.sealed_count() != old.sealed_count() {
                return Err(Error::Corrupt {
                    file: new.file().map(|f| f.name()).unwrap_or_default(),
                    offset: 0,
                    reason: "a segment file replaced by another of different offsets".into(),
                });
            }
            fresh.push((old, new));
        }
        let mut current = self.dir_ptr(&guard);
        loop {
            // SAFETY: as in `dir`: `current` was loaded under `guard` (or
            // returned, under it, by the failed exchange below).
            let dir = unsafe { current.deref() }.read();
            if dir.stalled.is_some() {
                // Never hide a stall from publishers: the next tick retries.
                return Ok(None);
            }
            let newest = dir.segs.len() - 1;
            let mut replaced = 0;
            let segs: Vec<Arc<Segment>> = dir
                .segs
                .iter()
                .enumerate()
                .map(|(i, s)| match fresh.iter().find(|(old, _)| i < newest && Arc::ptr_eq(old, s)) {
                    Some((_, new)) => {
                        replaced += 1;
                        new.clone()
                    }
                    None => s.clone(),
                })
                .collect();
            if replaced == 0 {
                // What was stale left the directory meanwhile (trimmed).
                return Ok(Some(newest_base));
            }
            // C1, as a compaction's own swap.
            match self.swap_sealed(current, segs, &guard) {
                Ok(()) => return Ok(Some(newest_base)),
                Err(lost_to) => current = lost_to,
            }
        }
    }
}

impl Shared {
    /// The last writes into the newest segment's file, once (see
    /// `files_closed`): a recycled file's end mark, and, in a log of one
    /// process, the checked prefix (`file/format.rs`).
    pub(super) fn close_newest_file(&self) {
        // Relaxed: whoever wins the swap writes; the writes are its own.
        if self.files_closed.swap(true, Ordering::Relaxed) {
            return;
        }
        let guard = epoch::pin();
        let newest = self.dir(&guard).last().clone();
        drop(guard);
        newest.end_file_at_close();
        if let Some(files) = self.pool.files().filter(|_| !self.processes) {
            newest.mark_prefix_at_close(files.flush);
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Shared by processes: what is let go from now on is deleted, not
        // freed (see `Files::open`).
        #[cfg(not(loom))]
        if let Some(files) = self.pool.files() {
            files.closed();
        }
        if let (Some(durability), Some(files)) = (&self.durability, self.pool.files()) {
            // A clean close: everything on disk (unless `Never`) and every
            // sealed segment marked complete, so the next open checks them.
            if let Err(e) = durability.sync(files, &|from| self.segments_from(from)) {
                log::warn!("partition {}: final sync at close failed: {e}", self.partition);
            }
        }
        // SAFETY: `&mut self` means no handle or cursor is left, so no thread can
        // load the directory any more; taking it unprotected is exclusive.
        unsafe {
            // Relaxed: `&mut self`, nothing else can touch it.
            let dir = self.dir.load(Ordering::Relaxed, epoch::unprotected());
            // Relaxed: `&mut self`, as above.
            if let Some(d) = dir.as_ref().filter(|_| !self.files_closed.load(Ordering::Relaxed)) {
                d.last().end_file_at_close();
                if let Some(files) = self.pool.files().filter(|_| !self.processes) {
                    d.last().mark_prefix_at_close(files.flush);
                }
            }
            drop(dir.into_owned());
        }
    }
}
