//! Log compaction: keeping the newest record of every key, offsets unchanged.
//!
//! # What a pass does
//!
//! A compacted topic's log is the ordinary log; a background *pass*
//! ([`Log::compact`], run by the broker's compactor) rewrites its sealed
//! segments. It first reads every sealed segment, oldest first, and notes
//! for each key the offset of its newest record. Then, segment by segment,
//! a record is *removed* if a newer record of its key exists (and it is
//! older than the lag, `min_lag_ns`), or if it is a *tombstone* (a key and
//! an empty payload) older than the tombstone retention and the newest of
//! its key. A segment that loses at least one record is rebuilt: a new
//! sealed segment with the same base and the same number of offsets, whose
//! region holds only the records kept, each under its original offset, and
//! whose other slots all name one compacted-away record that readers pass
//! over (`Segment::compacted`; "Compacted-away records" in `record.rs`).
//! The newest segment, still being written, is never read or rewritten, and
//! a sealed segment with a record still being written (a publisher granted
//! its slot before the seal and not done yet) waits for the next pass.
//!
//! So offsets never change: a reader sees the newest record of each key in
//! offset order, with gaps where removed records were. A cursor at a removed
//! offset (after a seek, or a resumed position) passes over it to the next
//! kept one, as over a skip record.
//!
//! # The swap
//!
//! The rebuilt segments replace the old ones in the directory (`dir.rs`)
//! with one compare-exchange, as a roll installs its successor. The states
//! of one old segment `S`, and who moves them:
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
//! 4. **Released.** The last `Arc` of `S` (a directory's, a cursor's) is
//!    dropped, and its buffers go back to the partition's spare pool.
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
//! # Memory
//!
//! A rebuilt segment costs its kept records, one compacted-away record and
//! four bytes of index per offset it covers. Under `Cleanup::Compact`
//! nothing is trimmed by size or age, so a partition's memory grows with
//! the number of distinct keys (and the offsets' index); under
//! `CompactAndDelete` the size and age limits trim whole segments as usual.
//! The pass itself holds a map of the keys of every sealed segment while it
//! runs.

use std::collections::HashMap;

use super::dir::{Dir, Shared};
use super::record::align_up;
use super::segment::Segment;
use crate::error::Result;
use crate::sync::Arc;
use crate::sync::atomic::Ordering;
use crate::sync::epoch::{self, Owned};

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
}

/// One record a pass looked at.
struct Seen<'a> {
    key: Option<&'a [u8]>,
    timestamp: u64,
    tombstone: bool,
}

/// One compaction pass over `shared`'s sealed segments, if it has work:
/// [`Log::compact`](super::Log::compact) for an in-memory log.
pub(super) fn run(shared: &Shared, policy: &CompactionPolicy, now_ns: u64) -> Result<bool> {
    let mut progress = shared.compaction.progress.lock();
    let (segs, through): (Vec<Arc<Segment>>, u64) = {
        let guard = epoch::pin();
        let dir = shared.dir(&guard);
        if dir.stalled.is_some() {
            return Ok(false);
        }
        let sealed = &dir.segs[..dir.segs.len() - 1];
        // Where the sealed segments end: the newest segment's base.
        let through = sealed.last().map_or(0, |_| dir.last().base());
        // Nothing new: decided before a segment is cloned, as the
        // compactor asks often.
        if through == progress.through && now_ns < progress.due_ns {
            return Ok(false);
        }
        (sealed.to_vec(), through)
    };
    let pass = Pass::read(&segs);
    let mut due_ns = u64::MAX;
    let mut complete = true;
    let mut rebuilt: Vec<(usize, Arc<Segment>, u64, u64)> = Vec::new();
    for (i, seg) in segs.iter().enumerate() {
        let Some(records) = pass.segments[i].as_ref() else {
            // A record still being written: the next pass reads it.
            complete = false;
            continue;
        };
        let mut kept: Vec<(u64, &[u8])> = Vec::with_capacity(records.len());
        let (mut removed, mut removed_bytes, mut stamp) = (0u64, 0u64, 0u64);
        for (index, seen) in records.iter().enumerate() {
            let index = index as u64;
            let Some(seen) = seen else { continue };
            stamp = stamp.max(seen.timestamp);
            let Some(key) = seen.key else {
                kept.push((index, pass.bytes(seg, index)));
                continue;
            };
            let newest = pass.newest[key] == seg.base() + index;
            let past_lag = seen.timestamp.saturating_add(policy.min_lag_ns);
            let removable_at = if !newest {
                Some(past_lag)
            } else if seen.tombstone {
                Some(past_lag.max(seen.timestamp.saturating_add(policy.tombstone_ns)))
            } else {
                None
            };
            match removable_at {
                Some(at) if at <= now_ns => {
                    removed += 1;
                    removed_bytes += align_up(pass.bytes(seg, index).len()) as u64;
                }
                other => {
                    if let Some(at) = other {
                        due_ns = due_ns.min(at);
                    }
                    kept.push((index, pass.bytes(seg, index)));
                }
            }
        }
        if removed == 0 {
            continue;
        }
        let count = seg.sealed_count().expect("every segment but the newest is sealed");
        // The compacted-away record carries the newest stamp the segment
        // had, so the age limit (`CompactAndDelete`) sees the same age.
        let stamp = pass.newest_stamp(seg, count).max(stamp);
        let new = Segment::compacted(seg.base(), count, &kept, stamp, shared.pool.clone())?;
        rebuilt.push((i, Arc::new(new), removed, removed_bytes));
    }
    let keys = pass.kept_keys(policy, now_ns);
    drop(pass);
    let installed = install(shared, &segs, &rebuilt);
    // A rebuilt segment not installed (the directory stalled, or
    // retention trimmed the old one): the next call passes again.
    complete &= installed.len() == rebuilt.len();
    for &(_, _, removed, bytes) in installed {
        // Relaxed: statistics.
        shared.compaction.records.fetch_add(removed, Ordering::Relaxed);
        shared.compaction.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    // Relaxed: statistics.
    shared.compaction.keys.store(keys, Ordering::Relaxed);
    shared.compaction.passes.fetch_add(1, Ordering::Relaxed);
    // An incomplete pass (a record still being written, a directory that
    // stalled) is repeated at the next call.
    progress.through = if complete { through } else { 0 };
    progress.due_ns = due_ns;
    Ok(true)
}

/// Replaces `segs[i]` by each rebuilt segment in the current directory
/// (see "The swap" in the module docs); returns the ones installed
/// (those whose old segment retention trimmed meanwhile are not).
fn install<'r>(
    shared: &Shared,
    segs: &[Arc<Segment>],
    rebuilt: &'r [(usize, Arc<Segment>, u64, u64)],
) -> Vec<&'r (usize, Arc<Segment>, u64, u64)> {
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
            .map(|s| match rebuilt.iter().find(|r| Arc::ptr_eq(&segs[r.0], s)) {
                Some(r) => {
                    installed.push(r);
                    r.1.clone()
                }
                None => s.clone(),
            })
            .collect();
        if installed.is_empty() {
            return installed;
        }
        // Release (C1): publishes the rebuilt segments, written by this
        // thread, to the Acquire loads of the directory (L2) and to a
        // roller whose exchange fails against this one (T2). Acquire on
        // failure: we build again from the directory we lost to.
        match shared.dir.compare_exchange(
            current,
            Owned::new(Dir::new(new_segs, None)),
            crate::sync::ordering_or_weakened!("C1", Ordering::Release),
            Ordering::Acquire,
            &guard,
        ) {
            Ok(_) => {
                shared.retire(current, &guard);
                return installed;
            }
            Err(e) => current = e.current,
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

/// What one pass read from the sealed segments.
struct Pass<'a> {
    /// Per segment, per index: the record, `None` for one readers pass
    /// over; the whole segment `None` if a record is still being written.
    segments: Vec<Option<Vec<Option<Seen<'a>>>>>,
    /// The offset of each key's newest record.
    newest: HashMap<&'a [u8], u64>,
    /// The newest record's tombstone state and stamp, per key.
    newest_seen: HashMap<&'a [u8], (bool, u64)>,
}

impl<'a> Pass<'a> {
    fn read(segs: &'a [Arc<Segment>]) -> Pass<'a> {
        let mut newest = HashMap::new();
        let mut newest_seen = HashMap::new();
        let segments = segs
            .iter()
            .map(|seg| {
                let count = seg.sealed_count().expect("every segment but the newest is sealed");
                let mut records = Vec::with_capacity(count as usize);
                for index in 0..count {
                    let pos = seg.committed(index)?;
                    let view = seg.view(index, pos);
                    if view.is_skip() {
                        records.push(None);
                        continue;
                    }
                    let key = view.key();
                    let tombstone = key.is_some() && view.payload().is_empty();
                    if let Some(k) = key {
                        newest.insert(k, seg.base() + index);
                        newest_seen.insert(k, (tombstone, view.timestamp_ns()));
                    }
                    records.push(Some(Seen { key, timestamp: view.timestamp_ns(), tombstone }));
                }
                Some(records)
            })
            .collect();
        Pass { segments, newest, newest_seen }
    }

    /// The bytes of committed record `index` of `seg`.
    fn bytes(&self, seg: &'a Segment, index: u64) -> &'a [u8] {
        let pos = seg.committed(index).expect("the pass read it committed");
        seg.view(index, pos).raw_bytes()
    }

    /// The stamp of `seg`'s last record (of `count`), kept or not.
    fn newest_stamp(&self, seg: &Segment, count: u64) -> u64 {
        count.checked_sub(1).and_then(|i| seg.committed(i).map(|pos| seg.view(i, pos).timestamp_ns())).unwrap_or(0)
    }

    /// Distinct keys whose newest record stays after this pass (a tombstone
    /// not yet expired counts: its key is still in the log).
    fn kept_keys(&self, policy: &CompactionPolicy, now_ns: u64) -> u64 {
        self.newest_seen
            .values()
            .filter(|&&(tombstone, stamp)| {
                !tombstone
                    || stamp.saturating_add(policy.min_lag_ns).max(stamp.saturating_add(policy.tombstone_ns)) > now_ns
            })
            .count() as u64
    }
}
