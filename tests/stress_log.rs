//! Stress test of the log: many publishers, many readers, small segments.
//!
//! Four publisher threads append records tagged with (publisher, sequence)
//! into a log with small segments (so rollovers race constantly) while three
//! reader threads follow it. Every reader must see every record exactly once,
//! in offset order, with each publisher's records in the order published and
//! every payload intact. Every append's offset and its start and end times are
//! kept, and a history check confirms offsets are unique and dense and that a
//! publish that returned before another began got the smaller offset.
//!
//! Size: `RILL_STRESS_RECORDS` records per publisher (default 20 000, so a
//! plain `cargo test` stays quick). The test command runs it with a million
//! in the `stress` profile (release with debug assertions and overflow
//! checks), again pinned to one core, and scaled down under valgrind.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use rill::log::{Log, LogConfig, Record, RecordView};

const PUBLISHERS: usize = 4;
const READERS: usize = 3;

fn records_per_publisher() -> u64 {
    std::env::var("RILL_STRESS_RECORDS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000)
}

/// Payload: publisher (1 byte), sequence (8 bytes), then `len` bytes derived from both.
fn encode(publisher: u8, seq: u64, buf: &mut Vec<u8>) {
    buf.clear();
    buf.push(publisher);
    buf.extend_from_slice(&seq.to_le_bytes());
    let len = (seq.wrapping_mul(2_654_435_761) % 61) as usize;
    buf.extend((0..len).map(|k| filler(publisher, seq, k)));
}

fn filler(publisher: u8, seq: u64, k: usize) -> u8 {
    (seq as u8).wrapping_mul(7).wrapping_add(publisher).wrapping_add(k as u8)
}

/// Checks one payload and returns (publisher, sequence).
fn decode(r: &RecordView<'_>) -> (u8, u64) {
    let p = r.payload();
    let publisher = p[0];
    let seq = u64::from_le_bytes(p[1..9].try_into().unwrap());
    let len = (seq.wrapping_mul(2_654_435_761) % 61) as usize;
    assert_eq!(p.len(), 9 + len, "payload length of offset {}", r.offset());
    for (k, &b) in p[9..].iter().enumerate() {
        assert_eq!(b, filler(publisher, seq, k), "payload byte {k} of offset {}", r.offset());
    }
    let key = r.key().expect("every stress record is keyed");
    assert_eq!(key, &seq.to_le_bytes()[..]);
    (publisher, seq)
}

/// One append as seen by its publisher.
#[derive(Clone, Copy)]
struct Op {
    offset: u64,
    start: Duration,
    end: Duration,
}

#[test]
fn publishers_and_readers_agree_on_one_dense_linearizable_order() {
    let per = records_per_publisher();
    let total = per * PUBLISHERS as u64;
    let log =
        Log::new(&LogConfig { segment_bytes: Some(16 << 10), retention_bytes: None, ..LogConfig::default() }).unwrap();
    let epoch = Instant::now();
    let barrier = Barrier::new(PUBLISHERS + READERS);

    let (histories, reads) = std::thread::scope(|s| {
        let readers: Vec<_> = (0..READERS)
            .map(|reader| {
                let (log, barrier) = (&log, &barrier);
                s.spawn(move || {
                    let mut cursor = log.cursor_from_first();
                    let mut next_seq = [0u64; PUBLISHERS];
                    let mut expected = 0u64;
                    barrier.wait();
                    while expected < total {
                        // Alternate single reads and batches so both paths are exercised.
                        if (expected / 1_000 + reader as u64).is_multiple_of(2) {
                            match cursor.read().expect("unbounded retention never lags") {
                                Some(r) => {
                                    check(&r, expected, &mut next_seq);
                                    expected += 1;
                                }
                                None => std::thread::yield_now(),
                            }
                        } else {
                            let batch = cursor.read_batch(37).expect("unbounded retention never lags");
                            if batch.is_empty() {
                                std::thread::yield_now();
                            }
                            for r in batch {
                                check(&r, expected, &mut next_seq);
                                expected += 1;
                            }
                        }
                    }
                    assert!(cursor.read().unwrap().is_none(), "nothing beyond what was published");
                    next_seq
                })
            })
            .collect();
        let publishers: Vec<_> = (0..PUBLISHERS)
            .map(|p| {
                let (log, barrier) = (&log, &barrier);
                s.spawn(move || {
                    let mut ops = Vec::with_capacity(per as usize);
                    let mut buf = Vec::new();
                    let mut batch_bufs: Vec<Vec<u8>> = Vec::new();
                    let mut offsets = Vec::new();
                    barrier.wait();
                    let mut seq = 0;
                    while seq < per {
                        // Every 10th op is a small batch; the rest are single appends.
                        if seq % 10 == 9 && seq + 4 <= per {
                            batch_bufs.resize_with(4, Vec::new);
                            for (k, b) in batch_bufs.iter_mut().enumerate() {
                                encode(p as u8, seq + k as u64, b);
                            }
                            let keys: Vec<[u8; 8]> = (0..4).map(|k| (seq + k).to_le_bytes()).collect();
                            let recs: Vec<Record<'_>> =
                                batch_bufs.iter().zip(&keys).map(|(b, k)| Record::new(b).with_key(k)).collect();
                            let start = epoch.elapsed();
                            log.append_batch(&recs, &mut offsets).unwrap();
                            let end = epoch.elapsed();
                            assert!(offsets.windows(2).all(|w| w[0] < w[1]), "a batch keeps its order");
                            ops.extend(offsets.iter().map(|&offset| Op { offset, start, end }));
                            seq += 4;
                        } else {
                            encode(p as u8, seq, &mut buf);
                            let key = seq.to_le_bytes();
                            let start = epoch.elapsed();
                            let offset = log.append(&Record::new(&buf).with_key(&key)).unwrap();
                            let end = epoch.elapsed();
                            ops.push(Op { offset, start, end });
                            seq += 1;
                        }
                    }
                    ops
                })
            })
            .collect();
        let histories: Vec<Vec<Op>> = publishers.into_iter().map(|h| h.join().unwrap()).collect();
        let reads: Vec<[u64; PUBLISHERS]> = readers.into_iter().map(|h| h.join().unwrap()).collect();
        (histories, reads)
    });

    for counts in reads {
        assert_eq!(counts, [per; PUBLISHERS], "every reader saw every publisher's records");
    }
    check_history(histories.into_iter().flatten().collect(), total);
    assert_eq!(log.end_offset(), total);
}

fn check(r: &RecordView<'_>, expected_offset: u64, next_seq: &mut [u64; PUBLISHERS]) {
    assert_eq!(r.offset(), expected_offset, "offsets are read in order with no gaps");
    let (p, seq) = decode(r);
    let slot = &mut next_seq[p as usize];
    assert_eq!(seq, *slot, "publisher {p}'s records arrive in publish order, once each");
    *slot += 1;
}

/// Offsets are unique and dense, and real-time order is respected: if append
/// A returned before append B started, A's offset is smaller.
fn check_history(mut ops: Vec<Op>, total: u64) {
    ops.sort_unstable_by_key(|op| op.offset);
    assert_eq!(ops.len() as u64, total);
    for (i, op) in ops.iter().enumerate() {
        assert_eq!(op.offset, i as u64, "offsets are unique and dense");
    }
    // For each op in offset order, the earliest end among all later offsets
    // must not precede its start.
    let mut min_end_after = Duration::MAX;
    for op in ops.iter().rev() {
        assert!(
            min_end_after >= op.start,
            "an append that returned at {min_end_after:?} got a larger offset than {}, which began at {:?}",
            op.offset,
            op.start
        );
        min_end_after = min_end_after.min(op.end);
    }
}
