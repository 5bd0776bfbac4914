//! How long a subscription waited ready in the worker pool's queue: a small
//! fixed-size histogram, filled by the worker that takes its drain and
//! emptied by each read of the subscription's own stats (a peek, as by a
//! listing of every subscription, leaves it).
//!
//! Bucket `i` counts waits of fewer than `2^i` nanoseconds and at least
//! `2^(i-1)` (bucket 0: zero), so a percentile read from it is the upper
//! edge of its bucket: at most twice the true wait, never below it. The
//! last bucket also holds every longer wait, and reads as its own upper
//! edge. Only the drain's worker records (one drain at a time per
//! subscription), and `take` swaps each bucket to zero, so a wait recorded
//! during a read is in this read or the next one, never lost or counted
//! twice; a read may see a wait in one bucket and not yet the next one's,
//! which only blurs the percentile of that read.

use std::time::Duration;

use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Buckets; the last one's upper edge is `2^(BUCKETS - 1)` ns (about 2.1 s).
const BUCKETS: usize = 32;

/// The waits of one subscription since the last read.
pub(super) struct QueueWaits {
    buckets: [AtomicU32; BUCKETS],
    /// The longest wait counted in takes of other jobs (see `dispatch.rs`).
    max_takes: AtomicU64,
}

/// What a read of [`QueueWaits`] found.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct WaitSummary {
    /// Waits recorded.
    pub(super) count: u64,
    pub(super) p50: Duration,
    pub(super) p99: Duration,
    pub(super) max_takes: u64,
}

impl QueueWaits {
    pub(super) fn new() -> QueueWaits {
        QueueWaits { buckets: std::array::from_fn(|_| AtomicU32::new(0)), max_takes: AtomicU64::new(0) }
    }

    /// Counts one wait. Under loom, nothing: which bucket a wait lands in
    /// depends on wall time, and a model must take the same path every time
    /// it replays a schedule (the histogram is statistics, in no protocol).
    pub(super) fn record(&self, time: Duration, takes: u64) {
        if cfg!(loom) {
            return;
        }
        let ns = u64::try_from(time.as_nanos()).unwrap_or(u64::MAX);
        let bucket = ((u64::BITS - ns.leading_zeros()) as usize).min(BUCKETS - 1);
        // Relaxed: statistics; a read sees the count now or at the next read.
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        // Relaxed: as above.
        self.max_takes.fetch_max(takes, Ordering::Relaxed);
    }

    /// The waits since the last `take`, and starts counting afresh (under
    /// loom, none: see `record`).
    pub(super) fn take(&self) -> WaitSummary {
        self.read(true)
    }

    /// The waits since the last `take`, left as they are.
    pub(super) fn peek(&self) -> WaitSummary {
        self.read(false)
    }

    fn read(&self, reset: bool) -> WaitSummary {
        if cfg!(loom) {
            return WaitSummary::default();
        }
        // Relaxed: statistics; see the module docs for what a race blurs.
        let get = |a: &AtomicU32| if reset { a.swap(0, Ordering::Relaxed) } else { a.load(Ordering::Relaxed) };
        let counts: [u64; BUCKETS] = std::array::from_fn(|i| u64::from(get(&self.buckets[i])));
        let count: u64 = counts.iter().sum();
        // Relaxed: as above.
        let max_takes =
            if reset { self.max_takes.swap(0, Ordering::Relaxed) } else { self.max_takes.load(Ordering::Relaxed) };
        if count == 0 {
            return WaitSummary { max_takes, ..WaitSummary::default() };
        }
        let percentile = |per_cent: u64| {
            // The smallest bucket holding the `ceil(count * per_cent / 100)`th wait.
            let rank = (count * per_cent).div_ceil(100).max(1);
            let mut seen = 0;
            let bucket = counts
                .iter()
                .position(|&n| {
                    seen += n;
                    seen >= rank
                })
                .expect("the counts add up to count");
            if bucket == 0 { Duration::ZERO } else { Duration::from_nanos(1 << bucket) }
        };
        WaitSummary { count, p50: percentile(50), p99: percentile(99), max_takes }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_bucket_edges_and_a_read_resets() {
        let w = QueueWaits::new();
        for _ in 0..99 {
            w.record(Duration::from_nanos(1000), 1);
        }
        w.record(Duration::from_nanos(1_000_000), 9);
        assert_eq!(w.peek().count, 100, "a peek leaves them");
        let s = w.take();
        assert_eq!(s.count, 100);
        // 1000 ns is in [512, 1024): read as 1024.
        assert_eq!(s.p50, Duration::from_nanos(1024));
        assert_eq!(s.p99, Duration::from_nanos(1024));
        assert_eq!(s.max_takes, 9);
        w.record(Duration::from_nanos(1_000_000), 0);
        let s = w.take();
        assert_eq!(s.count, 1);
        assert_eq!(s.p99, Duration::from_nanos(1 << 20));
        let s = w.take();
        assert_eq!((s.count, s.p50, s.p99, s.max_takes), (0, Duration::ZERO, Duration::ZERO, 0));
        w.record(Duration::ZERO, 0);
        w.record(Duration::from_secs(100), 0);
        let s = w.take();
        assert_eq!(s.p50, Duration::ZERO);
        assert_eq!(s.p99, Duration::from_nanos(1 << (BUCKETS - 1)));
    }
}
