//! Building and reading a merged compacted segment: see "A merged
//! compacted segment" in `segment.rs`.

use super::{Buffers, Recycler, SEALED_BIAS, Segment, Slot, Sparse, pos_of, pos_value};
use crate::error::Result;
use crate::log::record::{COMPACTED_LEN, encode_compacted};
use crate::log::storage::{Pages, WORD_BYTES, WordStorage};
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
    /// The block the merged segment will read (`WordStorage`): a word of
    /// state (zeros), then the region: the compacted-away record, then
    /// each kept record, padded, in offset order.
    words: Vec<u128>,
    /// Region bytes so far.
    len: usize,
    /// Each kept record's index (from `base`) and position in the region.
    kept: Vec<u64>,
    positions: Vec<u64>,
}

impl Merged {
    /// An empty merge starting at offset `base`, of about `room` bytes at
    /// most (reserved, not touched: so the block is not moved as it
    /// grows, and is fitted to the region once done).
    pub(crate) fn new(base: u64, room: usize) -> Merged {
        let mut words = Vec::with_capacity(1 + (room + COMPACTED_LEN).div_ceil(WORD_BYTES));
        words.push(0);
        let mut merged = Merged { base, count: 0, words, len: COMPACTED_LEN, kept: Vec::new(), positions: Vec::new() };
        encode_compacted(&mut merged.region_up_to(COMPACTED_LEN)[..COMPACTED_LEN], 0);
        merged
    }

    /// The region's bytes, grown (with zeros) to hold at least `end`.
    fn region_up_to(&mut self, end: usize) -> &mut [u8] {
        let words = 1 + end.div_ceil(WORD_BYTES);
        if self.words.len() < words {
            self.words.resize(words, 0);
        }
        let bytes = (self.words.len() - 1) * WORD_BYTES;
        // SAFETY: the words after the first, as bytes: a `u128` has no
        // padding and any bytes are one, a byte needs no alignment, and the
        // slice borrows `self.words` mutably for as long as it lives.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().add(1).cast::<u8>(), bytes) }
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
            let mut at = self.len;
            let region = self.region_up_to(at + len);
            region[at..at + len].copy_from_slice(run);
            for &(_, bytes) in &kept[i..j] {
                // The padding: zeros, as `encode_into` leaves it.
                region[at + bytes.len()..at + align_up(bytes.len())].fill(0);
                at += align_up(bytes.len());
            }
            let mut at = self.len;
            for &(index, bytes) in &kept[i..j] {
                self.kept.push(offset + index);
                self.positions.push(at as u64);
                at += align_up(bytes.len());
            }
            self.len = at;
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
        encode_compacted(&mut self.region_up_to(COMPACTED_LEN)[..COMPACTED_LEN], stamp);
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
        self.len
    }
}

impl Segment {
    /// Finishes a merged compacted segment (see "A merged compacted
    /// segment" in the module docs) that `merged` built: the block it
    /// wrote, fitted to its region, and its sparse index. Fails when the
    /// allocator has no memory for the index.
    pub(crate) fn merged(merged: Merged, pool: impl Recycler) -> Result<Segment> {
        let Merged { base, count, mut words, len, kept, positions } = merged;
        words.truncate(1 + len.div_ceil(WORD_BYTES));
        let storage = WordStorage::new(words.into_boxed_slice(), len);
        let mut seg = Segment::new(base, Buffers::over(Box::new(storage), 0, Pages::Small)?, pool);
        seg.skips = true;
        // Under loom, the region's bytes stand written under the cell of
        // the compacted-away record (the kept ones' cells are made below):
        // the pass wrote them, and no other thread can see any of them
        // before the directory's exchange.
        let away = Slot { state: AtomicU32::new(pos_value(0)), bytes: UnsafeCell::new(()) };
        away.bytes.with_mut(|_| ());
        let slots =
            positions.iter().map(|&pos| Slot { state: AtomicU32::new(pos_value(pos)), bytes: UnsafeCell::new(()) });
        seg.sparse = Some(Box::new(Sparse { kept: kept.into_boxed_slice(), slots: slots.collect(), away }));
        // Relaxed, both: as in `recovered`, the segment is not shared yet.
        // The tail word holds the bytes alone: a sealed segment's count is
        // its seal's, and a merged one may cover more offsets than the
        // word's record field holds.
        seg.tail().store(len as u64, Ordering::Relaxed);
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
    #[inline(never)]
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
