//! Log compaction: keeping the newest record of every key, offsets unchanged.
//!
//! # What a pass does
//!
//! A compacted topic's log is the ordinary log; a background *pass*
//! ([`Log::compact`], run by the broker's compactor) rewrites its sealed
//! segments. It first reads the sealed segments of the *dirty* part (see
//! "Incremental passes"), oldest first, and notes for each key the offset
//! of its newest record. Then, over every sealed segment, segment by segment,
//! a record is *removed* if a newer record of its key exists (and it is
//! older than the lag, `min_lag_ns`, and, if it carries a message id, than
//! `id_lag_ns`), or if it is a *tombstone* (a key and an empty payload)
//! older than the tombstone retention and the newest of its key. A record
//! with an id stays for the topic's dedupe window because the window is
//! learned from the log: a process that opens the directory, or another
//! process sharing it, finds the ids it must refuse only in the records
//! still there (see "Across processes" in `broker/dedupe.rs`).
//!
//! In memory, the segments a pass rewrites are merged (see "Merging"
//! below): one new sealed segment stands for several old ones that follow
//! one another, holding only the records kept, each under its original
//! offset; every removed offset names one compacted-away record that
//! readers pass over ("A merged compacted segment" in `segment.rs`;
//! "Compacted-away records" in `record.rs`). On a data directory a segment
//! that loses at least one record is rebuilt as a file of its own, with the
//! same base and the same number of offsets.
//! The newest segment, still being written, is never read or rewritten, and
//! a sealed segment with a record still being written (a publisher granted
//! its slot before the seal and not done yet) waits for the next pass.
//!
//! **Tombstones outlive what they delete.** A superseded record may be
//! kept (younger than the lag, or carrying an id younger than the dedupe
//! window) while the tombstone that supersedes it has passed its own
//! retention. Removing the tombstone then would leave the older record as
//! the newest of its key, kept for good: the deleted key would come back.
//! So a tombstone that is the newest of its key stays while a record of
//! its key before it stays: a pass judges records in offset order, notes
//! the keys of the superseded records it keeps, and keeps a tombstone of
//! such a key. The pass that removes the last older record removes the
//! tombstone too, if its retention has passed.
//!
//! So offsets never change: a reader sees the newest record of each key in
//! offset order, with gaps where removed records were. A cursor at a removed
//! offset (after a seek, or a resumed position) passes over it to the next
//! kept one, as over a skip record.
//!
//! # Incremental passes
//!
//! A pass that read every sealed segment each time one seals would do work
//! that grows with the square of the log's length. As Kafka's cleaner does,
//! a log remembers (`Progress::clean` in `compact_state.rs`) where its
//! *clean* prefix ends: a segment base below which the sealed segments hold
//! at most one record of each key. A pass maps only the *dirty* part, the
//! sealed segments from there on (one table, key -> newest offset), and
//! rewrites clean and dirty segments alike: a record whose key is in the
//! map is the newest of its key only at the mapped offset; a record of the
//! clean prefix whose key is not in the map is the only one of its key, so
//! the newest. What a pass keeps is therefore what a pass over everything
//! would keep. Afterwards the clean prefix ends where the pass stopped,
//! unless it kept a superseded record (younger than the lag): the prefix
//! then ends at that record's segment, which the next pass maps again.
//!
//! Newly sealed segments start a pass only once the dirty part holds
//! [`MIN_DIRTY_PERCENT`] of the sealed segments' region bytes, so each
//! pass reads at most about twice what is new since the last one, or once
//! the partition has sealed nothing more for [`QUIET_PASS_NS`], so that a
//! topic that goes quiet is compacted then. A pass
//! also runs, whatever the dirty share, once a record the last one kept
//! becomes removable (`due_ns`: the lag passed, a tombstone expired), and
//! after a pass that left work (a record still being written, a directory
//! that stalled). Until then superseded records of the dirty part stay,
//! as they stay in the segment being written: readers see them in offset
//! order, before the newest record of their key.
//!
//! # The swap
//!
//! A rebuilt segment replaces its old one in the directory (`dir.rs`)
//! with a compare-exchange, as a roll installs its successor: in memory,
//! one exchange for each merged segment as soon as it is made, in place
//! of every old one it covers (see "Merging" below); on a data directory,
//! one for all of a pass's rebuilt segments, after the sync of the
//! directory that holds their renames. The states of one old segment `S`
//! (in memory, of each one a merge covers), and who moves them:
//!
//! 1. **Listed.** `S` is in the current directory. Readers and publishers
//!    find it there, under a pin.
//! 2. **Built.** The compactor (one per log: passes are serialised by the
//!    `progress` mutex) has made `S'`, a private copy of what it keeps: no
//!    other thread can reach it.
//! 3. **Installed.** The compactor's exchange replaced the directory `D` it
//!    loaded by a copy of `D` with `S'` in place of `S`; the newest segment
//!    is the same one. `D` is retired (freed once every pin that may have
//!    loaded it is gone, as after a roll).
//! 4. **Released.** The last `Arc` of `S` (a directory's, a cursor's, the
//!    pass's own) is dropped, and its buffers go back to the partition's
//!    spare pool.
//!
//! The exchange is the only step that other threads can observe, and it is
//! the same exchange, with the same orderings, as the idle trim's in
//! `dir.rs` ("A trim nobody publishes for"): **C1**, a `Release` exchange,
//! so that a reader's `Acquire` load of the directory (L2) that finds `S'`
//! also finds it built (its records and its slots, written by the
//! compactor before the exchange); a roller whose exchange fails against
//! the compactor's directory loads it with `Acquire` (T2) before it builds
//! on it, and finds the same newest segment there, so it rebuilds from it
//! (`Shared::trimmed_under`), as it does after an idle trim. If the
//! compactor's exchange fails (a roll, a stall or a trim came first), it
//! loads the directory again and retries with the old segments still
//! listed there (one trimmed meanwhile is simply not replaced); against a
//! stalled directory it gives up until the next pass, so that it never
//! hides a stall from the publishers.
//!
//! **What a reader sees mid-swap.** A cursor inside `S` holds an `Arc` of
//! it: it finishes `S` as it was, every record it had (the swap never
//! marks `S` trimmed), and at `S`'s sealed end looks the next segment up
//! in the current directory, as at any segment end. A cursor that locates
//! an offset of `S` after the exchange finds `S'` and reads the same
//! records at the same offsets, minus the removed ones. Either way no
//! record is torn (a record's bytes are never written after its slot is
//! committed, in `S` or in `S'`) and none is delivered out of offset order;
//! a reader crossing from `S` to its successor may see superseded values
//! that `S'` no longer has, which is what a reader that started before
//! the pass would have seen anyway.
//!
//! The loom model `a_compaction_swap_races_a_reader`
//! (`loom-tests/tests/log.rs`) runs a pass against a reader that holds a
//! view of a record of the segment being replaced; `.ci/fence-check`
//! requires it to fail with C1 weakened to `Relaxed` (the reader then uses
//! the pass's directory unordered with its construction). A roll racing
//! the pass is not modelled: the roller's side is the failed exchange of
//! T2, rebuilding from a copy with the same newest segment, which
//! `a_durable_idle_trim_races_a_sealer` models against the idle trim's
//! copy; `readers_during_compaction_never_see_a_torn_record`
//! (`tests/compaction.rs`) runs passes against a publisher that rolls.
//!
//! # On a data directory
//!
//! A durable log's rebuilt segment is a segment file, not a heap block: it
//! is written whole under a temporary name, synced, and renamed over the
//! old segment's file before the exchange above installs it; each step, and
//! what a crash at it leaves, is in `file/rebuild.rs` ("The durable swap").
//! The exchange is the same C1; the rename is ordered against a trim of
//! the same segment by the file name's lock, not by an atomic, so the
//! durable swap adds no fence.
//!
//! What a pass has learned lives in memory only: after an open the clean
//! prefix starts at 0 (the whole log is dirty), so the first pass maps
//! every sealed segment once, and keeps what a pass over everything keeps;
//! the figures (records and bytes removed, passes) count from the open,
//! and the keys kept are the last pass's.
//!
//! # The swap across processes
//!
//! A durable log shared by processes (`Sharing::Processes`) is one set of
//! segment files, and each process has its own directory of its own
//! mappings of them ("The roll across processes" in `dir.rs`). Two things
//! are added to the swap above: one process at a time compacts a
//! partition, and every other process replaces its mappings of the files
//! that process rebuilt.
//!
//! **Who compacts.** The partition's directory holds `compact.lock`
//! ([`COMPACT_LOCK_FILE`]), whose first eight bytes are the *swap
//! generation*. A process's compactor tick ([`Log::compact`],
//! `run_shared`) that finds a pass due in its own view of the log (as in
//! one process: newly sealed segments that make the dirty part large
//! enough, or a kept record due) tries an `flock(LOCK_EX | LOCK_NB)` on
//! it; the one that gets it runs the pass, the others skip the pass (and
//! only follow, F below) and try again at their next tick. A tick with
//! no pass due makes no system call, so an idle compacted topic costs
//! none between follows. The kernel drops the lock when its holder dies, however it
//! dies. Two brokers in one process open the file twice and so exclude
//! each other too (`flock` locks belong to an open file, not a process).
//!
//! **Who writes what**, in the order a pass does it:
//!
//! 1. **Follow, under the lock.** The holder reads the generation; if it
//!    is not the one it last followed, it follows (F) before it maps any
//!    key: so it never rebuilds from a stale mapping of a file another
//!    process replaced, and never renames its rebuild over a newer one.
//!    An odd generation means the last holder died during its swap: its
//!    renames (each whole, see below) are followed, the holder makes the
//!    generation even, and its next pass runs whatever the dirty share.
//! 2. **Odd, before the first rename.** The holder writes generation
//!    `g + 1` (odd: a swap is under way).
//! 3. **Each rebuilt file**, as "The durable swap" (`file/rebuild.rs`)
//!    makes it, but with the segment built over it (its offset index, tail
//!    word and seal written through the mapping) *before* its rename: the
//!    file is whole, state included, before its name exists, so a process
//!    that maps it by its name finds a sealed segment. The rename is an
//!    exchange (`renameat2(RENAME_EXCHANGE)`), which fails if the name is
//!    gone: another process's retention may rename it away without this
//!    process's name lock (`CompactAndDelete`), and a plain rename would
//!    bring a trimmed segment's file back. Then the holder's own swap (C1).
//! 4. **Even, after the last rename.** The holder writes `g + 2`.
//!
//! F. **Follow** (`Shared::follow_swaps`, in every process when the
//!    generation moved, read at most once a `FOLLOW_EVERY_NS`; in the
//!    holder, step 1, read under the lock every time). An odd generation
//!    found there also has the process try the lock, pass due or not: a
//!    dead holder's is free, and its swap is closed as in step 1. First
//!    it installs the rolls other processes made that its directory has
//!    not (`Shared::follow_rolls`): its newest segment may be one another
//!    process sealed and then rebuilt, and a process that neither
//!    publishes nor reads the partition would otherwise keep mapping it,
//!    stale, and hand it to its next reader from the beginning (a key the
//!    other process deleted came back there). Then, for each sealed
//!    segment of its directory (never the newest, which is never
//!    rebuilt), the process compares the inode number of the file it maps
//!    with the one its name holds now (`stat`); where they differ it maps
//!    the file by its name (`open_shared_segment`: a rebuilt file is
//!    complete from its birth, so its compacted-away records are passed
//!    over as skip records) and installs the new mappings with one
//!    exchange of its directory: the same exchange, with the same
//!    orderings, as the compactor's own (C1; `Acquire` on failure, and it
//!    never replaces a stalled directory). It notes the generation as
//!    followed only when it is even: under an odd one a swap is under way,
//!    and the next tick looks again. It also notes its newest segment's
//!    base (`Progress::followed_newest`): a later follow under the same
//!    generation looks only at the segments from there on, which its
//!    directory has sealed since, and a holder's pass rebuilds only the
//!    segments before it (one sealed in its view after its follow may
//!    still be a stale mapping: its keys would bring back what the other
//!    pass removed, and its rebuild would replace the other's on disk). A
//!    follow that could not install what it found (its directory stalled)
//!    notes nothing, and a holder then skips its pass.
//!
//! **What a crash leaves.** Before 2: nothing changed. Between 2 and 4
//! (the holder killed mid-pass): some segments' names hold rebuilt files,
//! each whole (state included, by 3), the others the old files; a
//! temporary file the kill left under `<base>.<pid>-<thread>.tmp` is no
//! segment's and is deleted by the next recovery (the first opener of the
//! directory). The generation is odd; the lock is free. Followers map
//! what was renamed; the next holder does too, closes the generation, and
//! compacts again. A machine crash: "The durable swap", per file.
//!
//! **Why no reader ever sees half a segment.** A name holds an old file or
//! a whole rebuilt one (the rename is atomic, and 3 made the file whole
//! first); a process maps only by name. A reader in the middle of an old
//! mapping keeps it: the file, unlinked by the rename, stays mapped until
//! its last mapping goes, and is read as it was, as in "What a reader sees
//! mid-swap" above.
//!
//! **Ordering.** The cross-process steps are ordered by the file system,
//! not by an atomic of ours, as the roll's are: the holder's renames
//! return before its write of the even generation, and a follower's `stat`
//! comes after its read of it, so a follower that sees the generation
//! moved sees every rename before it (one kernel, one page cache: a
//! system call that returned is seen by every later one). A read racing
//! the holder's write may see a torn value: it only makes the follower
//! compare inodes once more than needed. The in-process step is the
//! directory exchange C1 with the compactor's orderings, which
//! `a_compaction_swap_races_a_reader` models; loom cannot put its atomics
//! in a file mapping, and this mode is compiled out under loom. The tests
//! in `tests/processes_compact.rs` and the follow test in
//! `log/procs_tests.rs` run it in real processes and in two logs over one
//! directory.
//!
//! **Who compacts, and what each process knows.** A pass's state (the
//! clean prefix, the due time, the sealed end it last saw, the figures) is
//! per process, and stays true whoever compacts: another process's pass
//! only removes records, so a prefix this process knew clean (at most one
//! record of each key) stays clean, and a due time may come early, which
//! costs a pass with nothing to do. When processes alternate as the
//! holder, each maps the dirty part from its own clean prefix, which may
//! lie before what another process already compacted: it redoes that work
//! and keeps what a pass over everything keeps. The figures (records and
//! bytes removed, passes, keys) count this process's passes only.
//!
//! # Merging
//!
//! In memory, a pass copies the records it keeps, segment after segment,
//! into a *merge* (`segment::Merged`) that starts at the first segment it
//! rewrites; when the next segment's kept records would take the merge
//! past the configured segment size, or it covers `MERGE_MOST_SEGMENTS`
//! already, the merge is made a segment (`Segment::merged`) and installed
//! in place of the old segments it covers, with one exchange
//! (`install_merged`, C1 below), and a new merge starts. A segment that
//! loses nothing and is at least half full stays as it is, and no merge
//! reaches past it; a merge of one segment that lost nothing is dropped.
//! Merged segments are merged again by later passes, a few at a time, so
//! the sealed part comes to hold about one segment per segment size of
//! kept records, whatever the number of offsets written: a topic's memory
//! follows its keys.
//!
//! A merged segment's offsets are the old segments' together, so a cursor
//! that finishes an old one and looks up its next offset finds the merged
//! one, and reads on inside it (`Dir::find` takes the segment whose base is
//! the greatest at or below the offset).
//!
//! # Memory
//!
//! In memory, a merged segment costs its kept records, one compacted-away
//! record and twelve bytes of index per kept record (see "A merged
//! compacted segment" in `segment.rs`). On a data directory a rebuilt file
//! costs four bytes of index per offset it covers, and one file (and
//! mapping) per segment ever sealed: a durable compacted topic still grows
//! with the offsets written, which merging files (a new file format and
//! its recovery) will fix. Under `Cleanup::Compact` nothing is trimmed by
//! size or age; under `CompactAndDelete` the size and age limits trim whole
//! segments as usual. The pass itself holds, while it runs, a map of the
//! dirty part's keys (40 bytes an entry), one bit per dirty record, and the
//! merge under way (at most a segment's size).
//!
//! A pass lets each old segment go as soon as it can, rather than all at
//! its end, so that the memory it frees reaches the partition's spare
//! pool (`pool.rs`) while the pass still runs, and a publisher rolling
//! meanwhile takes warm buffers from there instead of faulting in fresh
//! memory. The key map points into the dirty segments (a key of more than
//! eight bytes is compared with the record's own), so it is dropped once
//! the clean prefix, whose records are looked up in it, is rewritten; the
//! dirty segments are then judged by their bits alone, and each one, once
//! rewritten (in memory: copied into the merge) is no longer held by the
//! pass. Its last holders are then the directory until the merge that
//! covers it is installed, the retired directories, and the readers
//! inside it. `rill-bench --compaction` measures a publisher beside a pass
//! and prints its page faults.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

use foldhash::SharedSeed;
use foldhash::fast::FoldHasher;
use hashbrown::HashTable;
use hashbrown::hash_table::Entry;

use super::dir::Shared;
use super::file;
use super::record::RecordView;
use super::record::align_up;
use super::segment::merged::Merged;
use super::segment::{Buffers, Segment};
use super::storage::Pages;
use crate::error::Result;
use crate::sync::Arc;
use crate::sync::atomic::Ordering;
use crate::sync::epoch;

mod merge;

/// The dirty share (percent of the sealed segments' region bytes) from
/// which newly sealed segments start a pass (see "Incremental passes" in
/// the module docs): Kafka's `min.cleanable.dirty.ratio` default. Lower
/// passes more often over the same clean prefix; higher lets superseded
/// records stay longer. `rill-bench --compaction` measures its effect.
pub(super) const MIN_DIRTY_PERCENT: u64 = 50;

/// How long (ns) a partition that has sealed segments since the last pass,
/// too few to start one by the dirty share, waits before a pass runs
/// anyway: a topic that goes quiet is compacted then, rather than keeping
/// the superseded records sealed since its last pass readable for as long
/// as nobody publishes. Costs one pass per quiet spell after a seal; at
/// least [`QUIET_PASS_SHARE`] times the last pass's own time, so that a
/// large log written in short bursts spends at most about a tenth of a
/// core on such passes (a pass reads every sealed segment).
const QUIET_PASS_NS: u64 = 1_000_000_000;

/// See [`QUIET_PASS_NS`].
const QUIET_PASS_SHARE: u64 = 10;

/// Most bits of a pass's superseded set allocated before the dirty part
/// is read (one per dirty offset, a bound: a merged segment covers more
/// offsets than it holds records, and the set grows as records are
/// numbered).
const MAX_BITS_AHEAD: u64 = 1 << 24;

/// When a compaction pass may remove records (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionPolicy {
    /// A record younger than this (nanoseconds, by its timestamp) is kept,
    /// even if a newer record of its key exists.
    pub min_lag_ns: u64,
    /// A tombstone (a key and an empty payload) that is the newest record
    /// of its key is removed once older than this (nanoseconds, by its
    /// timestamp).
    pub tombstone_ns: u64,
    /// A record carrying a message id (the attribute `rill.id`, `ID_ATTRIBUTE`)
    /// younger than this is kept, as `min_lag_ns` keeps every record: the
    /// topic's dedupe window, so that a window rebuilt from the log (at an
    /// open, or by another process) still finds the id. 0: ids change
    /// nothing.
    pub id_lag_ns: u64,
}

/// One compaction pass over `shared`'s sealed segments, if it has work:
/// [`Log::compact`](super::Log::compact) for an in-memory log.
pub(super) fn run(shared: &Shared, policy: &CompactionPolicy, now_ns: u64) -> Result<bool> {
    let mut progress = shared.compaction.progress.lock();
    pass(shared, &mut progress, policy, now_ns, false, None)
}

/// [`Log::compact`](super::Log::compact) for a durable log shared by
/// processes: follows the swaps other processes made, then, if this
/// process wins the partition's compaction lock, runs a pass (see "The
/// swap across processes" in the module docs). False if it did not get
/// the lock, or the pass had no work.
#[cfg(not(loom))]
pub(super) fn run_shared(shared: &Shared, policy: &CompactionPolicy, now_ns: u64) -> Result<bool> {
    let files = shared.pool.files().expect("a log shared by processes is durable");
    let mut progress = shared.compaction.progress.lock();
    let file = match shared.compaction.across.get() {
        Some(file) => file,
        None => {
            let path = files.dir.join(COMPACT_LOCK_FILE);
            let file = super::file::open_lock_file(&path)?;
            shared.compaction.across.get_or_init(|| file)
        }
    };
    let across = Across { file, path: files.dir.join(COMPACT_LOCK_FILE) };
    // Step F of "The swap across processes": follow what moved, looked at
    // once a `FOLLOW_EVERY_NS` (a read of the file: the compactor comes
    // far more often).
    let mut orphaned = false;
    if now_ns >= progress.next_follow_ns {
        progress.next_follow_ns = now_ns.saturating_add(FOLLOW_EVERY_NS);
        let generation = across.generation()?;
        let followed = follow(shared, &mut progress, generation)?;
        // An odd generation: a pass is swapping (or its process died
        // mid-swap); followed again once it is even. Taking the lock tells
        // which: a dead holder's is free, and this process then closes its
        // swap below.
        orphaned = followed && !generation.is_multiple_of(2);
    }
    // The lock is taken only for a pass that has work (or to close an
    // orphaned swap), so an idle compacted topic costs no system call
    // between the follows.
    let through = progress.through;
    if !orphaned && nothing_due(shared, &mut progress, now_ns) {
        return Ok(false);
    }
    if !across.try_lock()? {
        // Another process compacts now: this one looks again next time,
        // as if it had not seen the newly sealed segments.
        progress.through = through;
        return Ok(false);
    }
    let result = (|| {
        // The holder: no one else swaps now, so what it follows is all
        // there is, including the swaps of a holder that died mid-pass
        // (an odd generation, which it then closes).
        let generation = across.generation()?;
        if !follow(shared, &mut progress, generation)? {
            // Its directory stalled before it could map what was rebuilt:
            // rebuilding from the old mappings would bring back what the
            // other pass removed. The next tick tries again.
            progress.retry = true;
            return Ok(false);
        }
        if !generation.is_multiple_of(2) {
            across.set_generation(generation + 1)?;
            progress.followed = generation + 1;
            // Its pass may have left superseded records that its renames
            // made look clean enough not to start ours: the next pass runs
            // whatever the dirty share.
            progress.retry = true;
        }
        pass(shared, &mut progress, policy, now_ns, true, Some(&across))
    })();
    across.unlock();
    result
}

/// Step F of "The swap across processes": installs the rolls other
/// processes made, then follows the swaps up to `generation` (read from
/// the lock file just now), looking at every
/// sealed segment if the generation moved since the last follow, else at
/// those sealed in this process's view since then (the last follow could
/// not look at its newest segment: see `Progress::followed_newest`).
/// Notes what it followed, the generation only when it is even. False if
/// the follow could not install what it found (the directory stalled).
#[cfg(not(loom))]
fn follow(shared: &Shared, progress: &mut super::compact_state::Progress, generation: u64) -> Result<bool> {
    // First the rolls of other processes this process has not installed:
    // a process that neither publishes nor reads the partition would
    // otherwise keep its newest segment as it mapped it, which may be a
    // file another process sealed and then rebuilt, and hand it, stale,
    // to its next reader from the beginning.
    shared.follow_rolls()?;
    let from = if generation == progress.followed { progress.followed_newest } else { 0 };
    let Some(newest) = shared.follow_swaps(from)? else {
        return Ok(false);
    };
    if generation.is_multiple_of(2) {
        progress.followed = generation;
    }
    progress.followed_newest = newest;
    Ok(true)
}

/// The name of a partition's compaction lock file (see "The swap across
/// processes" in the module docs).
#[cfg(not(loom))]
pub(super) const COMPACT_LOCK_FILE: &str = "compact.lock";

/// How often, at most, a process reads a partition's swap generation to
/// follow the swaps of the process that compacts it: following only
/// frees the old files' mappings sooner and shows new readers the
/// compacted log sooner, so it need not run at the compactor's pace. The
/// process that takes the lock for a pass reads it again under the lock.
#[cfg(not(loom))]
const FOLLOW_EVERY_NS: u64 = 1_000_000_000;

/// True if a pass would find nothing to do: nothing sealed since the last
/// look that makes the dirty part large enough, and no kept record due
/// (see "Incremental passes" in the module docs); also for a stalled
/// directory. Notes the sealed end it saw, as a pass that returns early
/// does.
fn nothing_due(shared: &Shared, progress: &mut super::compact_state::Progress, now_ns: u64) -> bool {
    let guard = epoch::pin();
    let dir = shared.dir(&guard);
    if dir.stalled.is_some() {
        return true;
    }
    let sealed = &dir.segs[..dir.segs.len() - 1];
    // Where the sealed segments end: the newest segment's base.
    let through = sealed.last().map_or(0, |_| dir.last().base());
    if progress.retry || now_ns >= progress.due_ns {
        return false;
    }
    if through == progress.through {
        // Nothing newly sealed: a dirty part too small for the share
        // waits, unless the partition has sealed nothing for a while.
        return now_ns < progress.quiet_ns;
    }
    // Noted, so that the share is summed again only once more is sealed
    // (it changes with nothing else that matters here: a trim only shrinks
    // the clean prefix, and the next seal counts).
    progress.through = through;
    let wait = QUIET_PASS_NS.max(progress.last_pass_ns.saturating_mul(QUIET_PASS_SHARE));
    progress.quiet_ns = now_ns.saturating_add(wait);
    !dirty_enough(sealed, progress.clean)
}

/// A partition's `compact.lock`: an `flock` that elects the process that
/// compacts, over eight bytes holding the swap generation (see "The swap
/// across processes" in the module docs).
#[cfg(not(loom))]
pub(super) struct Across<'a> {
    file: &'a std::fs::File,
    path: std::path::PathBuf,
}

#[cfg(not(loom))]
impl Across<'_> {
    fn io(&self, e: &std::io::Error) -> crate::error::Error {
        crate::error::Error::io(&self.path, e)
    }

    /// The swap generation (0 for a new file). A read racing the holder's
    /// write could see a torn value: it only makes a follower compare its
    /// segments' inodes once more than needed.
    fn generation(&self) -> Result<u64> {
        use std::os::unix::fs::FileExt;
        let mut word = [0u8; 8];
        let mut read = 0;
        while read < word.len() {
            match self.file.read_at(&mut word[read..], read as u64) {
                Ok(0) => break,
                Ok(n) => read += n,
                Err(e) => return Err(self.io(&e)),
            }
        }
        Ok(if read == word.len() { u64::from_le_bytes(word) } else { 0 })
    }

    /// Writes the swap generation (the lock's holder only).
    pub(super) fn set_generation(&self, generation: u64) -> Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.write_all_at(&generation.to_le_bytes(), 0).map_err(|e| self.io(&e))
    }

    /// Takes the lock if no other process (or broker) holds it.
    fn try_lock(&self) -> Result<bool> {
        use std::os::fd::AsRawFd;
        // SAFETY: `flock` on a descriptor we own, open for as long as the call.
        let r = unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) { Ok(false) } else { Err(self.io(&e)) }
    }

    /// Lets the lock go (the kernel does it too if the process dies).
    fn unlock(&self) {
        use std::os::fd::AsRawFd;
        // SAFETY: as in `try_lock`.
        if unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) } != 0 {
            log::warn!("could not unlock {}: {}", self.path.display(), std::io::Error::last_os_error());
        }
    }
}

/// One pass, under `progress` (see the module docs). `across`: in
/// Processes mode, the lock this process holds, whose generation the pass
/// makes odd before its first rename and even again after its swap.
fn pass(
    shared: &Shared,
    progress: &mut super::compact_state::Progress,
    policy: &CompactionPolicy,
    now_ns: u64,
    checked: bool,
    #[cfg(not(loom))] across: Option<&Across<'_>>,
    #[cfg(loom)] across: Option<&()>,
) -> Result<bool> {
    // Decided before a segment is cloned, as the compactor asks often
    // (`checked`: the caller asked already, under the same `progress`).
    if !checked && nothing_due(shared, progress, now_ns) {
        return Ok(false);
    }
    // The pass's own time, for the quiet passes' spacing (`QUIET_PASS_NS`).
    let started = crate::clock::now_ns();
    let (segs, through): (Vec<Arc<Segment>>, u64) = {
        let guard = epoch::pin();
        let dir = shared.dir(&guard);
        if dir.stalled.is_some() {
            return Ok(false);
        }
        let mut sealed = &dir.segs[..dir.segs.len() - 1];
        // Where the sealed segments end: the newest segment's base.
        let mut through = sealed.last().map_or(0, |_| dir.last().base());
        // Processes mode: only the segments the holder's follow has looked
        // at (`Progress::followed_newest`). One sealed in this process's
        // view after the follow may be a mapping of a file another
        // process rebuilt: its keys would bring back records that pass
        // removed, and its rebuild would replace the other's on disk.
        if across.is_some() && through > progress.followed_newest {
            sealed = &sealed[..sealed.partition_point(|seg| seg.base() < progress.followed_newest)];
            through = sealed.last().map_or(0, |_| progress.followed_newest);
        }
        (sealed.to_vec(), through)
    };
    let clean = progress.clean;
    let mut run = Run {
        shared,
        policy,
        now_ns,
        due_ns: u64::MAX,
        // Where the next pass's dirty part starts: the first segment with
        // a record still being written (set below), or the first that
        // keeps a superseded record (younger than the lag), which the next
        // pass must map again to remove it.
        next_clean: through,
        keys: 0,
        rebuilt: 0,
        installed: Vec::new(),
        pending: Vec::new(),
        failed: None,
        superseded: KeptKeys::default(),
        merging: None,
        swapping: false,
        followed: progress.followed,
        across,
    };
    // Relaxed: the last pass's figure, written under `progress`, held here.
    let map = KeyMap::read(&segs, clean, shared.compaction.keys.load(Ordering::Relaxed));
    // The segments this pass rewrites: up to the first with a record still
    // being written (the next pass reads it).
    let stop = map.stop;
    if let Some(seg) = segs.get(stop) {
        run.next_clean = seg.base();
    }
    // The clean prefix, whose records are looked up in the dirty part's
    // key table, which points into the dirty segments.
    let first_dirty = map.first_dirty.min(stop);
    for seg in &segs[..first_dirty] {
        // A key the dirty part does not hold: this record, in the clean
        // prefix, is the only one of its key, so the newest.
        if !run.segment(seg, |_, key| !map.holds(key)) {
            break;
        }
    }
    // The dirty part, whose records' fates are the table's bits: with the
    // table gone, nothing points into a dirty segment but the pass's own
    // `Arc`, which goes as soon as the segment is done.
    let fates = map.into_fates();
    let sealed = segs.len();
    // The clean prefix's old segments go now (those rebuilt are installed).
    let mut segs: Vec<Option<Arc<Segment>>> =
        segs.into_iter().enumerate().map(|(i, seg)| (i >= first_dirty).then_some(seg)).collect();
    if run.failed.is_none() {
        for (i, slot) in segs.iter_mut().enumerate().take(stop).skip(first_dirty) {
            let seg = slot.take().expect("each segment is taken once");
            let start = fates.superseded_in(i).expect("a dirty segment has fates");
            let go_on = run.segment(&seg, |ordinal, _| !fates.is_superseded(start + ordinal));
            #[cfg(test)]
            let base = seg.base();
            drop(seg);
            #[cfg(test)]
            AFTER_SEGMENT.with(|hook| {
                if let Some(hook) = hook.borrow_mut().as_mut() {
                    hook(base);
                }
            });
            if !go_on {
                break;
            }
        }
    }
    drop(fates);
    drop(segs);
    run.merge_done();
    let result = run.finish(progress, clean, through, stop < sealed);
    progress.last_pass_ns = crate::clock::now_ns().saturating_sub(started);
    result
}

/// A hook of the test seam [`AFTER_SEGMENT`]: given a segment's base.
#[cfg(test)]
pub(super) type SegmentHook = Box<dyn FnMut(u64)>;

#[cfg(test)]
thread_local! {
    /// Test seam: called on a pass's thread, with the segment's base, once
    /// the pass is done with a dirty segment and has let go of it.
    pub(super) static AFTER_SEGMENT: std::cell::RefCell<Option<SegmentHook>> =
        const { std::cell::RefCell::new(None) };
}

/// One pass's rewrite, segment after segment, and what it has learned.
struct Run<'p> {
    shared: &'p Shared,
    policy: &'p CompactionPolicy,
    now_ns: u64,
    /// When a record the pass kept becomes removable.
    due_ns: u64,
    /// Where the next pass's dirty part starts (see `pass`).
    next_clean: u64,
    /// Keys kept: records that are the newest of their key.
    keys: u64,
    /// Segments rebuilt (installed or not).
    rebuilt: usize,
    /// Records and bytes removed by each rebuilt segment installed.
    installed: Vec<(u64, u64)>,
    /// Rebuilt segments not installed yet (old, new, records and bytes
    /// removed): a durable log's, until the pass ends.
    pending: Vec<Rebuilt>,
    /// A durable rebuild that failed (a full disk): the pass installs what
    /// it rebuilt before, and reports it.
    failed: Option<crate::error::Error>,
    /// The keys of the superseded records kept so far (see "Tombstones
    /// outlive what they delete").
    superseded: KeptKeys,
    /// An in-memory log's merge under way (see "Merging").
    merging: Option<Merging>,
    /// Processes mode: the generation is odd (this pass renames).
    swapping: bool,
    /// The generation this process followed last.
    followed: u64,
    #[cfg(not(loom))]
    across: Option<&'p Across<'p>>,
    #[cfg(loom)]
    across: Option<&'p ()>,
}

/// Records, and their bytes, a rewrite removes.
#[derive(Debug, Default, Clone, Copy)]
struct Removed {
    records: u64,
    bytes: u64,
}

/// An in-memory log's merge under way: old segments that follow one
/// another, rewritten into one (see "Merging" in the module docs).
struct Merging {
    merged: Merged,
    /// Old segments it covers.
    segments: usize,
    removed: Removed,
    /// The newest stamp they had.
    stamp: u64,
}

/// The records of the sealed segment `seg` (of `count` offsets) that a
/// reader is handed, in offset order, as `(ordinal, index, view)` (the
/// ordinal counts them from 0): skip and compacted-away records are
/// passed over (a merged segment's removed offsets in one step,
/// `Segment::past_skip`). A record still being written ends them with
/// `None`.
fn records(seg: &Segment, count: u64) -> Records<'_> {
    Records { seg, index: 0, count, ordinal: 0 }
}

/// The iterator [`records`] returns.
struct Records<'s> {
    seg: &'s Segment,
    index: u64,
    count: u64,
    /// Records handed out so far.
    ordinal: u64,
}

impl<'s> Iterator for Records<'s> {
    type Item = Option<(u64, u64, RecordView<'s>)>;

    // Always: a pass calls it once a record, from two loops, and a call
    // there costs more than the record's own work (callgrind of
    // `rill-bench --compaction`, collecting in `Log::compact`).
    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        while self.index < self.count {
            let index = self.index;
            let Some(pos) = self.seg.committed(index) else {
                self.index = self.count;
                return Some(None);
            };
            let view = self.seg.view(index, pos);
            if view.is_skip() {
                self.index = self.seg.past_skip(index);
                continue;
            }
            self.index = index + 1;
            self.ordinal += 1;
            return Some(Some((self.ordinal - 1, index, view)));
        }
        None
    }
}

/// A rebuilt segment and the one it replaces, with what it removed.
struct Rebuilt {
    old: Arc<Segment>,
    new: Arc<Segment>,
    records: u64,
    bytes: u64,
}

impl Run<'_> {
    /// Judges every record of `seg` (`newest(index, key)`: whether the
    /// record at `index`, of key `key`, is the newest of its key) and
    /// rebuilds the segment if it loses one. False if the pass stops here:
    /// a durable rebuild failed.
    fn segment(&mut self, seg: &Arc<Segment>, newest: impl Fn(u64, &[u8]) -> bool) -> bool {
        let count = seg.sealed_count().expect("every segment but the newest is sealed");
        let mut kept: Vec<(u64, &[u8])> = Vec::new();
        let (mut removed, mut removed_bytes, mut stamp, mut seg_keys) = (0u64, 0u64, 0u64, 0u64);
        let mut holds_superseded = false;
        for record in records(seg, count) {
            let Some((ordinal, index, view)) = record else {
                // Only a dirty segment can have one, and `KeyMap::read`
                // stopped before it; a clean one was read whole before.
                // Left for the next pass, as a dirty segment; a merge
                // cannot reach past it.
                self.next_clean = self.next_clean.min(seg.base());
                return self.merge_done();
            };
            let timestamp = view.timestamp_ns();
            stamp = stamp.max(timestamp);
            let Some(key) = view.key() else {
                kept.push((index, view.raw_bytes()));
                continue;
            };
            let newest = newest(ordinal, key);
            let tombstone = view.payload().is_empty();
            let mut past_lag = timestamp.saturating_add(self.policy.min_lag_ns);
            if self.policy.id_lag_ns > 0 && view.attribute(super::record::ID_ATTRIBUTE).is_some() {
                past_lag = past_lag.max(timestamp.saturating_add(self.policy.id_lag_ns));
            }
            let removable_at = if !newest {
                Some(past_lag)
            } else if tombstone {
                Some(past_lag.max(timestamp.saturating_add(self.policy.tombstone_ns)))
            } else {
                None
            };
            // A tombstone stays while an older record of its key does (see
            // "Tombstones outlive what they delete"); judged after them, as
            // a pass goes in offset order.
            let outlives = newest && tombstone && self.superseded.holds(key);
            match removable_at {
                Some(at) if at <= self.now_ns && !outlives => {
                    removed += 1;
                    removed_bytes += align_up(view.raw_bytes().len()) as u64;
                }
                other => {
                    // A tombstone held by an older record (its own time has
                    // passed) sets no due time: the older record's is set
                    // already, and the tombstone goes in the pass that
                    // removes that record.
                    if let Some(at) = other.filter(|&at| at > self.now_ns) {
                        self.due_ns = self.due_ns.min(at);
                    }
                    if !newest {
                        self.superseded.insert(key);
                    }
                    holds_superseded |= !newest;
                    seg_keys += u64::from(newest);
                    kept.push((index, view.raw_bytes()));
                }
            }
        }
        self.keys += seg_keys;
        if holds_superseded {
            self.next_clean = self.next_clean.min(seg.base());
        }
        // The compacted-away record carries the newest stamp the segment
        // had, so the age limit (`CompactAndDelete`) sees the same age.
        let stamp = newest_stamp(seg, count).max(stamp);
        let shared = self.shared;
        let new = match shared.pool.files() {
            None => return self.merge(seg, count, &kept, Removed { records: removed, bytes: removed_bytes }, stamp),
            Some(_) if removed == 0 => return true,
            Some(files) => {
                let (across, followed, swapping) = (self.across, self.followed, &mut self.swapping);
                #[cfg(loom)]
                let _ = (across, followed, &swapping);
                match rebuild_file(shared, files, seg, count, &kept, stamp, &mut || {
                    #[cfg(not(loom))]
                    if let Some(across) = across
                        && !*swapping
                    {
                        // Step 2 of "The swap across processes".
                        across.set_generation(followed + 1)?;
                        *swapping = true;
                    }
                    Ok(())
                }) {
                    Ok(Some(new)) => new,
                    // Trimmed first: nothing to replace.
                    Ok(None) => return true,
                    Err(e) => {
                        self.failed = Some(e);
                        return false;
                    }
                }
            }
        };
        drop(kept);
        self.rebuilt += 1;
        // A durable log installs its rebuilt segments all at once, after
        // one sync of the directory that holds their renames.
        self.pending.push(Rebuilt { old: seg.clone(), new: Arc::new(new), records: removed, bytes: removed_bytes });
        true
    }

    /// Installs the pending rebuilt segments (see [`install`]) and lets
    /// them and the old ones go.
    fn install_pending(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        self.installed.extend(install(self.shared, &pending).into_iter().map(|r| (r.records, r.bytes)));
    }

    /// Installs what is pending, and notes what the pass did.
    fn finish(
        mut self,
        progress: &mut super::compact_state::Progress,
        clean: u64,
        through: u64,
        stopped_early: bool,
    ) -> Result<bool> {
        let shared = self.shared;
        if let Some(files) = shared.pool.files()
            && files.flush
            && !self.pending.is_empty()
            && let Err(e) = file::sync_dir(&files.dir)
        {
            // Step 4 of "The durable swap" (`file/rebuild.rs`): a machine
            // crash may bring the old files back, which are whole too.
            log::warn!("compaction: could not sync the directory {}: {e}", files.dir.display());
        }
        self.install_pending();
        #[cfg(not(loom))]
        if let Some(across) = self.across
            && self.swapping
        {
            // Step 4 of "The swap across processes": every rename is done.
            // A failure leaves the generation odd: the next holder closes it.
            if let Err(e) = across.set_generation(self.followed + 2) {
                self.failed.get_or_insert(e);
            } else {
                progress.followed = self.followed + 2;
            }
        }
        // A rebuilt segment not installed (the directory stalled, or
        // retention trimmed the old one): the next call passes again, from
        // the clean prefix as it was (removing records never breaks it).
        let all_installed = self.installed.len() == self.rebuilt;
        for &(removed, bytes) in &self.installed {
            // Relaxed: statistics.
            shared.compaction.records.fetch_add(removed, Ordering::Relaxed);
            shared.compaction.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        // Relaxed: statistics.
        shared.compaction.keys.store(self.keys, Ordering::Relaxed);
        shared.compaction.passes.fetch_add(1, Ordering::Relaxed);
        progress.through = through;
        progress.quiet_ns = u64::MAX;
        let all_done = all_installed && self.failed.is_none();
        progress.clean = if all_done { self.next_clean } else { clean };
        progress.retry = !all_done || stopped_early;
        progress.due_ns = self.due_ns;
        match self.failed {
            Some(e) => Err(e),
            None => Ok(true),
        }
    }
}

/// The rebuilt segment of a durable log: its file written, synced and
/// renamed over `seg`'s (steps 1 to 3 of "The durable swap" in
/// `file/rebuild.rs`), mapped as a sealed segment; `None` if retention
/// trimmed `seg` first. The segment is built over the file (its index,
/// tail word and seal written through the mapping) before the rename, so
/// that a process mapping it by its name finds it whole; `before_rename`
/// runs just before the rename.
fn rebuild_file(
    shared: &Shared,
    files: &file::Files,
    seg: &Segment,
    count: u64,
    kept: &[(u64, &[u8])],
    stamp: u64,
    before_rename: &mut dyn FnMut() -> Result<()>,
) -> Result<Option<Segment>> {
    let file::Rebuilt { storage, temp, positions, used } = file::write_rebuilt(files, seg.base(), count, kept, stamp)?;
    let old = seg.file().expect("a durable log's segments are files");
    // Its name once renamed: the old file's (taken before the rename, as
    // nothing else renames it while the segment is listed and not trimmed).
    storage.rename_to(old.name());
    let discard = |new: Option<Segment>| {
        drop(new);
        if let Err(e) = std::fs::remove_file(&temp) {
            log::warn!("could not delete rebuilt segment file {}: {e}", temp.display());
        }
    };
    // Shared: held as every mapping is (a new file, which no one frees).
    if let Err(e) = files.hold(&storage) {
        discard(None);
        return Err(e);
    }
    let new = match Buffers::over(Box::new(storage), positions.len(), Pages::Small) {
        Ok(buffers) => Segment::recovered(seg.base(), buffers, shared.pool.clone(), &positions, used, true),
        Err(e) => {
            discard(None);
            return Err(e);
        }
    };
    if let Err(e) = before_rename() {
        discard(Some(new));
        return Err(e);
    }
    match old.replace_with(&temp) {
        Ok(Some(_)) => Ok(Some(new)),
        Ok(None) => {
            discard(Some(new));
            Ok(None)
        }
        Err(e) => {
            discard(Some(new));
            Err(e)
        }
    }
}

/// True if the sealed segments from offset `clean` on (the dirty part)
/// hold at least [`MIN_DIRTY_PERCENT`] of the sealed region bytes.
fn dirty_enough(sealed: &[Arc<Segment>], clean: u64) -> bool {
    let (mut dirty, mut all) = (0u64, 0u64);
    for seg in sealed {
        let bytes = seg.used_bytes();
        all += bytes;
        if seg.base() >= clean {
            dirty += bytes;
        }
    }
    dirty > 0 && dirty * 100 >= all * MIN_DIRTY_PERCENT
}

/// The stamp of `seg`'s last record (of `count`), kept or not.
fn newest_stamp(seg: &Segment, count: u64) -> u64 {
    count.checked_sub(1).and_then(|i| seg.committed(i).map(|pos| seg.view(i, pos).timestamp_ns())).unwrap_or(0)
}

/// Replaces each rebuilt segment's old one by it in the current directory
/// (see "The swap" in the module docs); returns the ones installed
/// (those whose old segment retention trimmed meanwhile are not).
fn install<'r>(shared: &Shared, rebuilt: &'r [Rebuilt]) -> Vec<&'r Rebuilt> {
    if rebuilt.is_empty() {
        return Vec::new();
    }
    let guard = epoch::pin();
    let mut current = shared.dir_ptr(&guard);
    loop {
        // SAFETY: as in `Shared::dir`: `current` was loaded under `guard`
        // (or returned, under it, by the failed exchange below).
        let dir = unsafe { current.deref() }.read();
        if dir.stalled.is_some() {
            // Never hide a stall from publishers: the next pass retries.
            return Vec::new();
        }
        let mut installed = Vec::new();
        let new_segs: Vec<Arc<Segment>> = dir
            .segs
            .iter()
            .map(|s| match rebuilt.iter().find(|r| Arc::ptr_eq(&r.old, s)) {
                Some(r) => {
                    installed.push(r);
                    r.new.clone()
                }
                None => s.clone(),
            })
            .collect();
        if installed.is_empty() {
            return installed;
        }
        // C1 (see "The swap" above): `Shared::swap_sealed`.
        match shared.swap_sealed(current, new_segs, &guard) {
            Ok(()) => return installed,
            Err(lost_to) => current = lost_to,
        }
    }
}

/// Compaction's figures: records and bytes removed, passes, keys kept.
pub(super) fn stats(shared: &Shared) -> (u64, u64, u64, u64) {
    let c = &shared.compaction;
    // Relaxed: statistics.
    (
        c.records.load(Ordering::Relaxed),
        c.bytes.load(Ordering::Relaxed),
        c.passes.load(Ordering::Relaxed),
        c.keys.load(Ordering::Relaxed),
    )
}

/// One pass's map of the dirty part's keys, and which of its records a
/// newer record of their key supersedes.
///
/// One table, one hash and one probe per dirty record: as the dirty part
/// is read oldest first, a record whose key the table already holds
/// supersedes the one the entry names, whose bit is set; so the rewrite
/// reads a dirty record's fate from its bit and probes the table only for
/// the clean prefix's records (whose keys are not hashed otherwise). Each
/// entry keeps its key's hash, so the table grows without hashing again,
/// and its key's first eight bytes, so that a probe compares a key of at
/// most eight bytes without reading the record that holds it (a cache miss
/// per probe, in a log larger than the cache).
///
/// Keys come from publishers, and a flood of colliding keys must not turn
/// a pass quadratic, so the hash is keyed with a secret drawn for each
/// pass (see [`KeyHasher`]).
struct KeyMap<'a> {
    hasher: KeyHasher,
    table: HashTable<Key<'a>>,
    /// Index (in the pass's segments) of the first dirty segment.
    first_dirty: usize,
    /// Per dirty segment (from `first_dirty`): the position of its first
    /// record.
    starts: Vec<u64>,
    /// One bit per position: set if a newer record of its key was mapped.
    superseded: Vec<u64>,
    /// Index of the first segment with a record still being written, or
    /// the number of segments: the pass rewrites only those before it.
    stop: usize,
}

impl<'a> KeyMap<'a> {
    /// Maps the keys of `segs` from offset `clean` on; `keys` is how many
    /// the table is sized for at first (the last pass's count: most keys
    /// of a compacted log stay).
    fn read(segs: &'a [Arc<Segment>], clean: u64, keys: u64) -> KeyMap<'a> {
        let hasher = KeyHasher::new();
        let first_dirty = segs.iter().position(|s| s.base() >= clean).unwrap_or(segs.len());
        let counts: Vec<u64> = segs[first_dirty..]
            .iter()
            .map(|s| s.sealed_count().expect("every segment but the newest is sealed"))
            .collect();
        // An estimate (a merged segment covers more offsets than it holds
        // records): the bits grow as records are numbered.
        let offsets: u64 = counts.iter().sum();
        let mut table: HashTable<Key<'a>> = HashTable::with_capacity(keys.min(offsets) as usize);
        let mut superseded = Vec::with_capacity(offsets.min(MAX_BITS_AHEAD).div_ceil(64) as usize);
        let mut starts = Vec::with_capacity(counts.len());
        let mut stop = segs.len();
        let mut start = 0u64;
        'segs: for (i, (seg, &count)) in segs[first_dirty..].iter().zip(&counts).enumerate() {
            starts.push(start);
            for record in records(seg, count) {
                let Some((ordinal, _, view)) = record else {
                    // Keys mapped from this segment point into it, and the
                    // pass keeps what they supersede: only removing less.
                    stop = first_dirty + i;
                    break 'segs;
                };
                let at = start + ordinal;
                if superseded.len() as u64 <= at / 64 {
                    superseded.push(0);
                }
                let Some(key) = view.key() else { continue };
                let hash = hasher.hash(key);
                let head = head(key);
                match table.entry(hash, |e| e.is(head, key), |e| e.hash) {
                    Entry::Occupied(mut e) => {
                        let older = std::mem::replace(&mut e.get_mut().newest, at);
                        superseded[(older / 64) as usize] |= 1 << (older % 64);
                    }
                    Entry::Vacant(e) => {
                        e.insert(Key { hash, head, key, newest: at });
                    }
                }
            }
            start = superseded.len() as u64 * 64;
        }
        KeyMap { hasher, table, first_dirty, starts, superseded, stop }
    }

    /// True if the dirty part holds a record of `key`.
    fn holds(&self, key: &[u8]) -> bool {
        let head = head(key);
        self.table.find(self.hasher.hash(key), |e| e.is(head, key)).is_some()
    }

    /// The dirty records' fates, without the key table (which points into
    /// the dirty segments).
    fn into_fates(self) -> Fates {
        Fates { first_dirty: self.first_dirty, starts: self.starts, superseded: self.superseded }
    }
}

/// Which of the dirty part's records a newer record of their key
/// supersedes: what the rewrite of a dirty segment needs of a [`KeyMap`].
struct Fates {
    /// As in [`KeyMap`].
    first_dirty: usize,
    starts: Vec<u64>,
    superseded: Vec<u64>,
}

impl Fates {
    /// The position of segment `i`'s (of the pass's segments) first record
    /// if it is dirty (mapped), `None` if it is in the clean prefix.
    fn superseded_in(&self, i: usize) -> Option<u64> {
        i.checked_sub(self.first_dirty).and_then(|d| self.starts.get(d).copied())
    }

    /// True if a newer record of its key superseded the record at `at`.
    fn is_superseded(&self, at: u64) -> bool {
        self.superseded[(at / 64) as usize] & (1 << (at % 64)) != 0
    }
}

/// A keyed hash of byte strings that publishers choose: foldhash (the fast
/// variant, hashbrown's default hasher) seeded with secrets drawn from the
/// standard library's `RandomState`, whose keys come from the operating
/// system's random source. A compaction pass draws one for its key table;
/// a topic's dedupe window (`broker/dedupe.rs`) draws one for its ids.
///
/// Why not SipHash (the standard library's `RandomState`): it hashed each
/// key in several compression rounds, the largest share of a pass's
/// instructions (`rill-bench --compaction` measures a pass; callgrind
/// attributes its instructions), and a share of a publish with an id
/// (`rill-bench --scenario dedupe`). foldhash hashes a key of up to 16
/// bytes in a couple of multiplications. It resists colliding keys only
/// from a publisher who does not know the seed (its README: "minimally
/// DoS-resistant"); here the seed is secret, drawn anew for each pass and
/// each window, and no hash, table order or shard is ever shown to a
/// publisher, who could only probe for it through timing: a pass is a
/// background task whose timing a publisher observes only indirectly (and
/// learning one pass's seed would not help against the next), and a
/// window's shard locks are taken by every publisher of the topic alike.
/// foldhash's own default seeding (address-space layout and the clock) is
/// not used.
pub(crate) struct KeyHasher {
    /// The secret that every fold of a hash mixes in.
    shared: SharedSeed,
    /// The hash's starting value, also secret.
    start: u64,
}

impl std::fmt::Debug for KeyHasher {
    /// Without its secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyHasher").finish_non_exhaustive()
    }
}

impl KeyHasher {
    /// A hasher with secrets no earlier one used.
    pub(crate) fn new() -> KeyHasher {
        // Each `RandomState` is keyed anew (per thread from the operating
        // system, then stepped per state), and SipHash's output under a
        // secret key is unpredictable: two outputs, two secrets.
        let random = RandomState::new();
        KeyHasher { shared: SharedSeed::from_u64(random.hash_one(0u8)), start: random.hash_one(1u8) }
    }

    /// `key`'s hash: one `write` of its bytes, no length prefix (`Hash`
    /// for a slice or a `str` writes one, or an end marker, to tell apart
    /// sequences of them; a hash here covers one key or id, and foldhash's
    /// `write` mixes its length in).
    pub(crate) fn hash(&self, key: &[u8]) -> u64 {
        let mut hasher = FoldHasher::with_seed(self.start, &self.shared);
        hasher.write(key);
        hasher.finish()
    }
}

/// A pass's set of keys that have a superseded record it kept, by hash
/// alone: two keys of one hash only keep a tombstone until the next pass
/// that removes what the set was kept for. Empty, and no hasher made,
/// until a superseded record is kept.
#[derive(Default)]
struct KeptKeys(Option<(KeyHasher, std::collections::HashSet<u64>)>);

impl KeptKeys {
    fn insert(&mut self, key: &[u8]) {
        let (hasher, set) = self.0.get_or_insert_with(|| (KeyHasher::new(), std::collections::HashSet::new()));
        set.insert(hasher.hash(key));
    }

    fn holds(&self, key: &[u8]) -> bool {
        self.0.as_ref().is_some_and(|(hasher, set)| set.contains(&hasher.hash(key)))
    }
}

/// One key of a pass's [`KeyMap`].
struct Key<'a> {
    hash: u64,
    /// `key`'s first eight bytes (see [`head`]).
    head: u64,
    key: &'a [u8],
    /// The position of its newest record: a position numbers the dirty
    /// part's records, segment after segment, from 0.
    newest: u64,
}

impl Key<'_> {
    /// True if this is `key`, whose head is `head`: a key of at most eight
    /// bytes is compared by its head and length alone.
    fn is(&self, head: u64, key: &[u8]) -> bool {
        self.head == head && self.key.len() == key.len() && (key.len() <= 8 || self.key == key)
    }
}

/// A key's first eight bytes (zeros after a shorter key's end), as one word.
fn head(key: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    let n = key.len().min(8);
    word[..n].copy_from_slice(&key[..n]);
    u64::from_le_bytes(word)
}
