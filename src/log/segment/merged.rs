//! Building and reading a merged compacted segment: see "A merged
//! compacted segment" in `segment.rs`.

use super::{Buffers, Recycler, SEALED_BIAS, Segment, Slot, Sparse, pos_of, pos_value};
use crate::error::Result;
use crate::sync::UnsafeCell;
use crate::sync::atomic::{AtomicU32, Ordering};

/// A merged compacted segment being built by a compaction pass (see "A
/// merged compacted segment" in the module docs): records are added in
/// offset order, each under its own offset, from any number of old
/// segments that follow one another; [`Segment::merged`] makes the
/// segment.
#[derive(Debug)]
pub(crate) struct Merged {
    /// The offset of the first old segment's first record.
    base: u64,
    /// The offsets covered so far (every old segment's, whole).
    count: u64,
    /// The region: the compacted-away record, then each kept record,
    /// padded, in offset order.
    region: Vec<u8>,
    /// Each kept record's index (from `base`) and position in `region`.
    kept: Vec<u64>,
    positions: Vec<u64>,
}

impl Merged {
    /// An empty merge starting at offset `base`.
    pub(crate) fn new(base: u64) -> Merged {
        let mut region = vec![0u8; crate::log::record::COMPACTED_LEN];
        crate::log::record::encode_compacted(&mut region, 0);
        Merged { base, count: 0, region, kept: Vec::new(), positions: Vec::new() }
    }

    /// Adds the kept records of `source`, `kept` (`(index, bytes)` in
    /// index order, each record's bytes as [`RecordView::raw_bytes`] gives
    /// them from `source`), after every record added so far. A run of kept
    /// records with consecutive indexes that also lie back to back in
    /// `source` (as a publisher's reservations lay them: the tail word
    /// grants an index and its bytes together) moves in one copy, not one
    /// a record; then each record's padding is zeroed, as `encode_into`
    /// leaves it, whatever `source` held there. `rill-bench --compaction`
    /// measures a pass.
    pub(crate) fn push(&mut self, source: &Segment, kept: &[(u64, &[u8])]) {
        use crate::log::record::align_up;
        let offset = source.base - self.base;
        debug_assert!(offset >= self.count, "segments are added in offset order");
        // Where a kept record starts in `source`'s region: its bytes are a
        // view of that region (`view` slices them from `data`).
        let source_pos = |bytes: &[u8]| {
            let pos = (bytes.as_ptr() as usize).wrapping_sub(source.data.as_ptr() as usize);
            assert!(
                pos as u64 + align_up(bytes.len()) as u64 <= source.capacity,
                "a kept record lies in the segment it is compacted from"
            );
            pos
        };
        self.region.reserve(kept.iter().map(|(_, b)| align_up(b.len())).sum());
        let mut i = 0;
        while i < kept.len() {
            // The run `kept[i..j]`: consecutive indexes, back to back in
            // `source`, `len` bytes from `from`, padding included.
            let from = source_pos(kept[i].1);
            let mut len = align_up(kept[i].1.len());
            let mut j = i + 1;
            while j < kept.len() && kept[j].0 == kept[j - 1].0 + 1 && source_pos(kept[j].1) == from + len {
                len += align_up(kept[j].1.len());
                j += 1;
            }
            // SAFETY: `from..from + len` lies inside `source`'s region
            // (checked by `source_pos` for the run's last record, and the
            // run is contiguous) and holds committed records, never written
            // again while `source` is alive.
            let run = unsafe { std::slice::from_raw_parts(source.data.as_ptr().add(from), len) };
            let mut at = self.region.len();
            self.region.extend_from_slice(run);
            for &(index, bytes) in &kept[i..j] {
                // The padding: zeros, as `encode_into` leaves it.
                self.region[at + bytes.len()..at + align_up(bytes.len())].fill(0);
                self.kept.push(offset + index);
                self.positions.push(at as u64);
                at += align_up(bytes.len());
            }
            i = j;
        }
    }

    /// Closes an old segment of `count` offsets, whose kept records were
    /// all pushed: the merge covers them, and the next old segment's
    /// offsets follow.
    pub(crate) fn cover(&mut self, count: u64) {
        self.count += count;
    }

    /// Stamps the compacted-away record (`stamp`: the newest stamp the old
    /// segments had, so that the age limit sees the same age).
    pub(crate) fn stamp(&mut self, stamp: u64) {
        crate::log::record::encode_compacted(&mut self.region[..crate::log::record::COMPACTED_LEN], stamp);
    }

    /// Where the offsets it covers end.
    pub(crate) fn end(&self) -> u64 {
        self.base + self.count
    }

    /// The offset of its first record.
    pub(crate) fn base(&self) -> u64 {
        self.base
    }

    /// Region bytes so far.
    pub(crate) fn bytes(&self) -> usize {
        self.region.len()
    }
}

impl Segment {
    /// Finishes a merged compacted segment (see "A merged compacted
    /// segment" in the module docs) that `merged` built: one heap block
    /// holding its region, and its sparse index. Fails when the allocator
    /// has no memory for it.
    pub(crate) fn merged(merged: Merged, pool: impl Recycler) -> Result<Segment> {
        let Merged { base, count, region, kept, positions } = merged;
        let mut seg = Segment::new(base, Buffers::small(region.len(), 0)?, pool);
        seg.skips = true;
        // Under loom, the region's bytes are written under the cell of the
        // compacted-away record (the kept ones' cells are made below): no
        // other thread can see any of them before the directory's exchange.
        let away = Slot { state: AtomicU32::new(pos_value(0)), bytes: UnsafeCell::new(()) };
        away.bytes.with_mut(|_| {
            // SAFETY: the block is ours alone (the segment is shared only
            // once installed, through the directory's Release exchange),
            // `region.len()` bytes long, and distinct from `region`.
            unsafe { std::ptr::copy_nonoverlapping(region.as_ptr(), seg.data.as_ptr(), region.len()) };
        });
        let slots =
            positions.iter().map(|&pos| Slot { state: AtomicU32::new(pos_value(pos)), bytes: UnsafeCell::new(()) });
        seg.sparse = Some(Box::new(Sparse { kept: kept.into_boxed_slice(), slots: slots.collect(), away }));
        // Relaxed, both: as in `recovered`, the segment is not shared yet.
        // The tail word holds the bytes alone: a sealed segment's count is
        // its seal's, and a merged one may cover more offsets than the
        // word's record field holds.
        seg.tail().store(region.len() as u64, Ordering::Relaxed);
        seg.sealed().store(count + SEALED_BIAS, Ordering::Relaxed);
        Ok(seg)
    }

    /// The position of record `index` of a merged compacted segment (see
    /// `committed`, which calls it for an index its dense index does not
    /// hold): its own if kept, the compacted-away record's (byte 0) if
    /// removed; `None` past the end, or for any other segment.
    #[inline(never)]
    pub(super) fn committed_sparse(&self, index: u64) -> Option<u64> {
        let sparse = self.sparse.as_deref()?;
        if self.ends_before(index) {
            return None;
        }
        Some(match sparse.kept.binary_search(&index) {
            // Acquire: as in `committed`, though the segment reached this
            // thread through the directory's Acquire load already.
            Ok(i) => pos_of(sparse.slots[i].state.load(Ordering::Acquire)),
            Err(_) => 0,
        })
    }

    /// The cell of record `index` of a merged compacted segment: its own
    /// if kept, the compacted-away record's if removed.
    pub(super) fn sparse_cell(&self, index: u64) -> &UnsafeCell<()> {
        let sparse = self.sparse.as_deref().expect("a record outside the dense index is a merged segment's");
        match sparse.kept.binary_search(&index) {
            Ok(i) => &sparse.slots[i].bytes,
            Err(_) => &sparse.away.bytes,
        }
    }

    /// Where a reader that found a record passed over (a skip or a
    /// compacted-away record) at `index` goes on: `index + 1`, but in a
    /// merged compacted segment past the whole run of removed offsets, to
    /// the next kept record (or the segment's end).
    #[inline]
    pub(crate) fn past_skip(&self, index: u64) -> u64 {
        match self.sparse.as_deref() {
            None => index + 1,
            Some(sparse) => {
                let next = sparse.kept.partition_point(|&k| k <= index);
                sparse
                    .kept
                    .get(next)
                    .copied()
                    .unwrap_or_else(|| self.sealed_count().unwrap_or(index + 1))
                    .max(index + 1)
            }
        }
    }
}
