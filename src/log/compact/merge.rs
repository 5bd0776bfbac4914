//! An in-memory pass's merges: see "Merging" in `compact.rs`.

use super::super::dir::Shared;
use super::super::record::align_up;
use super::super::segment::Segment;
use super::super::segment::merged::Merged;
use super::{Merging, Removed, Run};
use crate::sync::Arc;
use crate::sync::epoch;

/// Most old segments one merge covers (see "Merging" in the module docs):
/// the old ones stay listed, and so in memory, until the merge is
/// installed, so a merge of many would hold their memory until late in
/// the pass; merged segments merge again in later passes, so a few at a
/// time still bring a partition down to about one segment per segment
/// size of kept records. `a_pass_lets_go_of_each_segment_it_has_rewritten_before_it_ends`
/// (`log/tests.rs`) checks that old segments go while a pass runs.
const MERGE_MOST_SEGMENTS: usize = 4;

impl Run<'_> {
    /// An in-memory log's rewrite of `seg` (of `count` offsets, keeping
    /// `kept`, stamped `stamp`): into the merge under way, or a new one
    /// (see "Merging" in the module docs). False if the pass stops here:
    /// the allocator had no memory for a merged segment.
    pub(super) fn merge(
        &mut self,
        seg: &Segment,
        count: u64,
        kept: &[(u64, &[u8])],
        removed: Removed,
        stamp: u64,
    ) -> bool {
        let bytes: usize = kept.iter().map(|(_, b)| align_up(b.len())).sum();
        let room = self.shared.sizes.segment_bytes;
        if removed.records == 0 && bytes >= room / 2 {
            // Full enough as it is: left alone, and no merge reaches past it.
            return self.merge_done();
        }
        if self.merging.as_ref().is_some_and(|m| m.merged.bytes() + bytes > room || m.segments >= MERGE_MOST_SEGMENTS)
            && !self.merge_done()
        {
            return false;
        }
        let m = self.merging.get_or_insert_with(|| Merging {
            merged: Merged::new(seg.base(), room),
            segments: 0,
            removed: Removed::default(),
            stamp: 0,
        });
        debug_assert_eq!(m.merged.end(), seg.base(), "a merge takes segments that follow one another");
        m.merged.push(seg, kept);
        m.merged.cover(count);
        m.segments += 1;
        m.removed.records += removed.records;
        m.removed.bytes += removed.bytes;
        m.stamp = m.stamp.max(stamp);
        true
    }

    /// Ends the merge under way, if any: builds its segment and installs
    /// it in place of the old ones, if that removes a record or a
    /// segment. False if the allocator had no memory for it (the pass
    /// stops, and reports it).
    pub(super) fn merge_done(&mut self) -> bool {
        let Some(Merging { mut merged, segments, removed, stamp }) = self.merging.take() else { return true };
        if segments < 2 && removed.records == 0 {
            return true;
        }
        merged.stamp(stamp);
        let (base, end) = (merged.base(), merged.end());
        let new = match Segment::merged(merged, self.shared.pool.clone()) {
            Ok(new) => Arc::new(new),
            Err(e) => {
                self.failed = Some(e);
                return false;
            }
        };
        self.rebuilt += 1;
        if install_merged(self.shared, &new, base, end) {
            self.installed.push((removed.records, removed.bytes));
        }
        true
    }
}

/// Replaces, in the current directory, the old segments an in-memory
/// merge covered (those whose bases lie in `base..end`) by `new` (see
/// "Merging" in the module docs). False if it could not: retention
/// trimmed the first of them meanwhile, or the directory stalled.
///
/// The old segments are found by their bases: only a pass (one at a time
/// per log, under `progress`) replaces a sealed segment of an in-memory
/// log, and a trim removes the oldest ones, so a directory whose segment
/// at `base` is still there lists every one the merge covered, unchanged.
fn install_merged(shared: &Shared, new: &Arc<Segment>, base: u64, end: u64) -> bool {
    let guard = epoch::pin();
    let mut current = shared.dir_ptr(&guard);
    loop {
        // SAFETY: as in `install` (`compact.rs`): `current` was loaded
        // under `guard` (or returned, under it, by the failed exchange).
        let dir = unsafe { current.deref() }.read();
        if dir.stalled.is_some() {
            return false;
        }
        let from = dir.segs.partition_point(|s| s.base() < base);
        let to = dir.segs.partition_point(|s| s.base() < end);
        if dir.segs.get(from).is_none_or(|s| s.base() != base) || to >= dir.segs.len() {
            return false;
        }
        let mut segs = Vec::with_capacity(dir.segs.len() - (to - from) + 1);
        segs.extend_from_slice(&dir.segs[..from]);
        segs.push(new.clone());
        segs.extend_from_slice(&dir.segs[to..]);
        // C1 (see "The swap" in `compact.rs`).
        match shared.swap_sealed(current, segs, &guard) {
            Ok(()) => return true,
            Err(lost_to) => current = lost_to,
        }
    }
}
