//! Unit and property tests of the log, single- and multi-threaded.

use proptest::prelude::*;

use super::config::SPARE_SEGMENTS;
use super::segment::{self, Reservation};
use super::*;

/// Small segments so tests cross many boundaries.
fn small(segment_bytes: usize, retention_bytes: Option<u64>) -> Log {
    Log::new(&LogConfig { segment_bytes: Some(segment_bytes), retention_bytes, ..LogConfig::default() }).unwrap()
}

fn payload(i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|k| (i as usize).wrapping_mul(31).wrapping_add(k) as u8).collect()
}

fn read_all(cursor: &mut Cursor) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some(r) = cursor.read().expect("no lag expected") {
        out.push((r.offset(), r.payload().to_vec()));
    }
    out
}

#[test]
fn has_run_sees_a_run_of_committed_records_ahead_without_reading_them() {
    let log = small(4096, None);
    for i in 0..5u64 {
        log.append(&Record::new(&payload(i, 10))).unwrap();
    }
    let mut c = log.cursor_from_first();
    assert!(c.has_next());
    assert!(c.has_run(1) && c.has_run(5));
    assert!(!c.has_run(6), "the sixth record is not there");
    log.append(&Record::new(&payload(5, 10))).unwrap();
    assert!(c.has_run(6));
    assert_eq!(c.offset(), 0, "nothing was read");
    c.read().unwrap().unwrap();
    assert!(c.has_run(5) && !c.has_run(6), "counted from the next record");
    // A run reaching past the segment's end: the segment closes before it.
    assert!(c.has_run(1 << 40));
}

#[test]
fn offsets_are_dense_from_zero_and_records_read_back() {
    let log = Log::new(&LogConfig::default()).unwrap();
    for i in 0..100u64 {
        assert_eq!(log.append(&Record::new(&payload(i, 10))).unwrap(), i);
    }
    let mut c = log.cursor_from_first();
    let got = read_all(&mut c);
    assert_eq!(got.len(), 100);
    for (i, (off, p)) in got.into_iter().enumerate() {
        assert_eq!(off, i as u64);
        assert_eq!(p, payload(i as u64, 10));
    }
    assert_eq!(c.offset(), 100);
    assert_eq!(c.lag(), 0);
}

#[test]
fn a_log_can_start_at_any_offset() {
    let log = Log::starting_at(&LogConfig::default(), 1_000).unwrap();
    assert_eq!(log.append(&Record::new(b"x")).unwrap(), 1_000);
    assert_eq!(log.first_offset(), 1_000);
    assert_eq!(log.cursor_from_first().read().unwrap().unwrap().offset(), 1_000);
}

#[test]
fn reader_waits_at_an_uncommitted_record_and_never_skips_it() {
    let log = Log::new(&LogConfig::default()).unwrap();
    let rec = Record::new(b"slow");
    let len = rec.encoded_len().unwrap();
    let guard = epoch::pin();
    let seg = log.shared.dir(&guard).last().clone();
    // Two publishers reserve offsets 0 and 1; the second finishes first.
    let Reservation::Granted { index: i0, pos: p0 } = seg.reserve(1, len as u64) else { panic!() };
    let Reservation::Granted { index: i1, pos: p1 } = seg.reserve(1, len as u64) else { panic!() };
    // SAFETY: both ranges come from the Granted reservations just above.
    unsafe { seg.write(i1, p1, len, &Record::new(b"fast"), 1) };
    assert!(seg.commit(i1, p1));

    let mut cursor = log.cursor_from_first();
    assert!(cursor.read().unwrap().is_none(), "offset 0 is reserved but not committed");
    assert_eq!(cursor.read_batch(10).unwrap().len(), 0);
    assert_eq!(cursor.offset(), 0);

    // SAFETY: as above.
    unsafe { seg.write(i0, p0, len, &rec, 0) };
    assert!(seg.commit(i0, p0));
    let got: Vec<_> = cursor.read_batch(10).unwrap().iter().map(|r| r.payload().to_vec()).collect();
    assert_eq!(got, vec![b"slow".to_vec(), b"fast".to_vec()]);
}

#[test]
fn records_carry_key_attributes_payload_and_timestamp() {
    let log = Log::new(&LogConfig::default()).unwrap();
    let before = now_ns();
    let attrs = [("region", "IN"), ("tier", "gold")];
    log.append(&Record::new(b"body").with_key(b"user-7").with_attributes(&attrs)).unwrap();
    log.append(&Record::new(b"")).unwrap();
    let after = now_ns();
    let mut c = log.cursor_from_first();
    let r = c.read().unwrap().unwrap();
    assert_eq!(r.key(), Some(&b"user-7"[..]));
    assert_eq!(r.payload(), b"body");
    assert_eq!(r.attribute("tier"), Some("gold"));
    assert_eq!(r.attributes().len(), 2);
    assert!((before..=after).contains(&r.timestamp_ns()));
    let r = c.read().unwrap().unwrap();
    assert_eq!(r.key(), None);
    assert!(r.payload().is_empty());
}

#[test]
fn records_cross_many_segment_boundaries_in_order() {
    let log = small(MIN_SEGMENT_BYTES, None);
    let n = 5_000u64;
    for i in 0..n {
        assert_eq!(log.append(&Record::new(&payload(i, (i % 97) as usize))).unwrap(), i);
    }
    let stats = log.stats();
    assert!(stats.segments > 20, "{stats:?}");
    let got = read_all(&mut log.cursor_from_first());
    assert_eq!(got.len() as u64, n);
    for (i, (off, p)) in got.iter().enumerate() {
        assert_eq!(*off, i as u64);
        assert_eq!(*p, payload(i as u64, i % 97));
    }
}

#[test]
fn seek_lands_on_any_retained_offset() {
    let log = small(MIN_SEGMENT_BYTES, None);
    for i in 0..3_000u64 {
        log.append(&Record::new(&i.to_le_bytes())).unwrap();
    }
    let mut c = log.cursor_from_first();
    for target in [0u64, 1, 57, 1_234, 2_999, 1_500, 3] {
        c.seek(target).unwrap();
        let r = c.read().unwrap().unwrap();
        assert_eq!(r.offset(), target);
        assert_eq!(r.payload(), target.to_le_bytes());
    }
    c.seek(3_000).unwrap();
    assert!(c.read().unwrap().is_none());
    let err = c.seek(3_001).unwrap_err();
    assert!(matches!(err, Error::OutOfRange { offset: 3_001, first: 0, end: 3_000, .. }), "{err}");
    assert_eq!(c.offset(), 3_000, "a failed seek leaves the cursor where it was");
    assert!(log.cursor_at(9_999).is_err());
}

#[test]
fn an_oversized_record_is_refused_and_nothing_is_appended() {
    let log = small(MIN_SEGMENT_BYTES, None);
    log.append(&Record::new(b"before")).unwrap();
    let big = vec![0u8; MIN_SEGMENT_BYTES];
    let err = log.append(&Record::new(&big)).unwrap_err();
    assert!(matches!(err, Error::MessageTooLarge { max, .. } if max == MIN_SEGMENT_BYTES), "{err}");
    let mut offsets = Vec::new();
    let err = log.append_batch(&[Record::new(b"ok"), Record::new(&big)], &mut offsets).unwrap_err();
    assert!(matches!(err, Error::MessageTooLarge { .. }));
    assert!(offsets.is_empty());
    assert_eq!(log.end_offset(), 1, "neither call appended anything");
}

/// A batch measured by a log with a larger size limit is measured again
/// by the log it is appended to, which refuses its oversized record and
/// appends nothing; one measured within the limit is appended as measured.
#[test]
fn a_batch_measured_against_a_larger_limit_is_measured_again() {
    let small_limit = Log::new(&LogConfig { max_record_bytes: Some(1024), ..LogConfig::default() }).unwrap();
    let large_limit = Log::new(&LogConfig::default()).unwrap();
    let big = vec![0u8; 2000];
    let records = [Record::new(b"ok"), Record::new(&big)];
    let mut lens = Vec::new();
    let batch = large_limit.measure(&records, &mut lens).unwrap();
    assert!(small_limit.measure(&records, &mut Vec::new()).is_err(), "the small log refuses the big record");
    let mut offsets = Vec::new();
    let err = small_limit.append_measured_pinned(batch, &mut offsets, &mut epoch::pin()).unwrap_err();
    assert!(matches!(err, Error::MessageTooLarge { max: 1024, .. }), "{err}");
    assert!(offsets.is_empty());
    assert_eq!(small_limit.end_offset(), 0, "nothing appended");
    large_limit.append_measured_pinned(batch, &mut offsets, &mut epoch::pin()).unwrap();
    assert_eq!(offsets, [0, 1]);
    let got = read_all(&mut large_limit.cursor_from_first());
    assert_eq!(got.iter().map(|(_, p)| p.len()).collect::<Vec<_>>(), [2, 2000]);
}

#[test]
fn a_record_exactly_the_segment_size_fits() {
    let log = small(MIN_SEGMENT_BYTES, None);
    let body = vec![7u8; MIN_SEGMENT_BYTES - record::HEADER_LEN];
    for i in 0..3 {
        assert_eq!(log.append(&Record::new(&body)).unwrap(), i);
    }
    let got = read_all(&mut log.cursor_from_first());
    assert_eq!(got.len(), 3);
    assert!(got.iter().all(|(_, p)| *p == body));
}

#[test]
fn batches_get_consecutive_offsets_and_split_at_segment_ends() {
    let log = small(MIN_SEGMENT_BYTES, None);
    let bodies: Vec<Vec<u8>> = (0..1_000u64).map(|i| payload(i, 40)).collect();
    let records: Vec<Record<'_>> = bodies.iter().map(|b| Record::new(b)).collect();
    let mut offsets = Vec::new();
    log.append_batch(&records, &mut offsets).unwrap();
    assert_eq!(offsets, (0..1_000).collect::<Vec<u64>>());
    assert!(log.stats().segments > 5);
    let got = read_all(&mut log.cursor_from_first());
    assert_eq!(got.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>(), bodies);
    log.append_batch(&[], &mut offsets).unwrap();
    assert!(offsets.is_empty());
}

#[test]
fn next_batch_reads_up_to_max_and_stops_at_segment_ends() {
    let log = small(MIN_SEGMENT_BYTES, None);
    for i in 0..2_000u64 {
        log.append(&Record::new(&i.to_le_bytes())).unwrap();
    }
    let mut c = log.cursor_from_first();
    let mut next = 0u64;
    let mut batches = 0;
    loop {
        let batch = c.read_batch(64).unwrap();
        if batch.is_empty() {
            break;
        }
        assert!(batch.len() <= 64);
        assert_eq!(batch.first_offset(), next);
        for r in batch {
            assert_eq!(r.offset(), next);
            assert_eq!(r.payload(), next.to_le_bytes());
            next += 1;
        }
        batches += 1;
    }
    assert_eq!(next, 2_000);
    assert!(batches >= 2_000 / 64);
    assert_eq!(c.read_batch(0).unwrap().len(), 0);
}

#[test]
fn retention_by_bytes_trims_whole_segments_from_the_head() {
    let seg = MIN_SEGMENT_BYTES;
    let log = small(seg, Some(4 * seg as u64));
    let mut early = log.cursor_from_first();
    for i in 0..20_000u64 {
        log.append(&Record::new(&payload(i, 64))).unwrap();
    }
    let stats = log.stats();
    assert!(stats.retained_bytes <= 4 * seg as u64, "{stats:?}");
    assert!(stats.trimmed_segments > 0);
    let first = stats.first_offset;
    assert!(first > 0);

    // A cursor that never read anything learns what it missed, then goes on.
    let lagged = early.read().unwrap_err();
    assert_eq!(lagged, Lagged { missed: first, resumed_at: first });
    let rest = read_all(&mut early);
    assert_eq!(rest.first().unwrap().0, first);
    assert_eq!(rest.last().unwrap().0, 19_999);
    assert_eq!(rest.len() as u64, 20_000 - first);
    assert!(log.cursor_at(first - 1).is_err());
}

#[test]
fn retention_by_count_keeps_at_least_that_many_records() {
    let log = Log::new(&LogConfig {
        segment_bytes: Some(MIN_SEGMENT_BYTES),
        retention_messages: Some(500),
        retention_bytes: None,
        ..LogConfig::default()
    })
    .unwrap();
    for i in 0..10_000u64 {
        log.append(&Record::new(&i.to_le_bytes())).unwrap();
    }
    let stats = log.stats();
    let retained = stats.end_offset - stats.first_offset;
    assert!(retained >= 500, "{stats:?}");
    // Whole segments: at most one segment's worth (plus the active one) beyond the limit.
    let per_segment = (MIN_SEGMENT_BYTES / 32) as u64;
    assert!(retained < 500 + 2 * per_segment, "{stats:?}");
    assert!(stats.trimmed_segments > 0);
}

#[test]
fn a_slow_reader_inside_a_trimmed_segment_stays_safe() {
    let seg = MIN_SEGMENT_BYTES;
    let log = small(seg, Some(2 * seg as u64));
    log.append(&Record::new(b"first record")).unwrap();
    let mut cursor = log.cursor_from_first();
    let view = cursor.read().unwrap().unwrap();
    // While the reader holds the view (a slow callback), the log rolls many
    // times: the segment is trimmed and its buffers would be recycled.
    for i in 0..10_000u64 {
        log.append(&Record::new(&payload(i, 100))).unwrap();
    }
    assert!(log.first_offset() > 0);
    assert_eq!(view.payload(), b"first record");
    assert_eq!(view.offset(), 0);
    // Its next read learns what retention took, and resumes at the oldest record.
    let first = log.first_offset();
    assert_eq!(cursor.read().unwrap_err(), Lagged { missed: first - 1, resumed_at: first });
    assert_eq!(cursor.read().unwrap().unwrap().offset(), first);
}

/// Appends 80-byte records until the log has `segments` segments.
fn fill_to_segments(log: &Log, segments: usize) {
    let mut i = 0;
    while log.stats().segments < segments {
        log.append(&Record::new(&payload(i, 80))).unwrap();
        i += 1;
    }
}

/// A bound on a test's wait for another thread (the prefault thread, an
/// epoch's reclamation): a minute, a hang guard and not a timing, since a
/// wait that is going to end ends in milliseconds. Its panic says what the
/// test waited for and what the prefault thread is doing.
pub(super) struct HangGuard(std::time::Instant);

impl HangGuard {
    pub(super) fn new() -> Self {
        HangGuard(std::time::Instant::now() + std::time::Duration::from_secs(60))
    }

    /// Panics with `why()` once the minute is up.
    pub(super) fn check(&self, why: impl FnOnce() -> String) {
        assert!(std::time::Instant::now() < self.0, "{} ({})", why(), super::prefault::describe());
    }

    /// Yields until `done` holds, checking the bound between tries.
    pub(super) fn wait(&self, mut done: impl FnMut() -> bool, why: impl Fn() -> String) {
        while !done() {
            self.check(&why);
            std::thread::yield_now();
        }
    }
}

/// Waits (see [`HangGuard`]) until `done` holds.
fn eventually(what: &str, done: impl Fn() -> bool) {
    HangGuard::new().wait(done, || format!("timed out waiting until {what}"));
}

#[test]
fn a_growing_memory_log_gets_its_next_segment_faulted_in_ahead_and_stops_asking_once_it_recycles() {
    let seg = config::SMALL_FIRST_FROM;
    let log = small(seg, Some(6 * seg as u64));
    // Out of the small first segment: a log that wrote a kilobyte does not
    // stream, and asks for nothing (idle memory stays as it was).
    fill_to_segments(&log, 2);
    assert!(!log.shared.pool.spare_requested());
    assert_eq!(log.stats().spare_segments, 0);
    // Out of a full-size segment into fresh memory: one spare is made ahead.
    fill_to_segments(&log, 3);
    eventually("the spare is made", || log.stats().spare_segments == 1);
    // The next roll takes it, and asks for the one after.
    fill_to_segments(&log, 4);
    eventually("the next spare is made", || log.stats().spare_segments == 1);
    // Past retention, trimmed segments come back to the pool (once the
    // epoch lets them go) and are recycled: from then on no roll asks.
    for i in 0..20_000u64 {
        log.append(&Record::new(&payload(i, 80))).unwrap();
    }
    // The trimmed segments come back when the epoch lets them go, which a
    // pin elsewhere in the process (another test's reader) can delay past
    // the appends above: until one has, a roll still asks, as it should.
    eventually("a trimmed segment comes back to the pool", || {
        crate::sync::epoch::pin().flush();
        log.shared.pool.is_recycling()
    });
    eventually("the last request is served", || !log.shared.pool.spare_requested());
    let first = log.first_offset();
    let mut i = 0;
    while log.first_offset() < first + 4 * (seg as u64 / 100) {
        log.append(&Record::new(&payload(i, 80))).unwrap();
        assert!(!log.shared.pool.spare_requested(), "a recycling log asked for a spare");
        i += 1;
    }
    assert!(log.stats().segments <= 6);
    assert!(log.stats().spare_segments <= SPARE_SEGMENTS);
}

/// A compaction pass lets go of each old segment once it has rewritten
/// it, not when it ends, so that the segment's buffers reach the pool
/// while the pass still runs (a publisher rolling then finds a warm
/// spare). Fails if the pass holds the segments it has done until its end.
#[test]
fn a_pass_lets_go_of_each_segment_it_has_rewritten_before_it_ends() {
    let seg = config::SMALL_FIRST_FROM;
    let log = small(seg, None);
    let body = payload(0, 80);
    let mut i = 0u64;
    while log.stats().segments < 8 {
        // Four keys: every sealed segment holds superseded records.
        log.append(&Record::new(&body).with_key(&(i % 4).to_le_bytes())).unwrap();
        i += 1;
    }
    let old: Vec<_> = {
        let guard = crate::sync::epoch::pin();
        let dir = log.shared.dir(&guard);
        dir.segs[..dir.segs.len() - 1].iter().map(|s| (s.base(), Arc::downgrade(s))).collect()
    };
    let (first, last) = (old[0].clone(), old[old.len() - 1].0);
    // The pass runs on this thread, and calls the hook on it.
    let checked = std::rc::Rc::new(std::cell::Cell::new(false));
    let seen = checked.clone();
    compact::AFTER_SEGMENT.with(|hook| {
        *hook.borrow_mut() = Some(Box::new(move |base| {
            if base == last {
                // The pass is still running (this is its last segment);
                // the first one it rewrote is gone once the epoch lets the
                // directories that listed it go.
                eventually("the first segment rewritten is let go while the pass runs", || {
                    crate::sync::epoch::pin().flush();
                    first.1.upgrade().is_none()
                });
                seen.set(true);
            }
        }));
    });
    let policy = CompactionPolicy { min_lag_ns: 0, tombstone_ns: u64::MAX, id_lag_ns: 0 };
    assert!(log.compact(&policy, crate::clock::now_ns()).unwrap());
    compact::AFTER_SEGMENT.with(|hook| hook.borrow_mut().take());
    assert!(checked.get(), "the pass rewrote its last sealed segment");
    assert!(log.stats().compacted_records > 0);
}

/// A compaction pass gives back the buffers of the segments it replaces;
/// that is not a trim, and a log with no size limit (a compacted topic's)
/// keeps getting its next segments made ahead afterwards.
#[test]
fn segments_a_pass_replaces_come_back_without_turning_off_spares_made_ahead() {
    let seg = config::SMALL_FIRST_FROM;
    let log = small(seg, None);
    let body = payload(0, 80);
    let mut i = 0u64;
    let mut append = |log: &Log| {
        // Four keys: every sealed segment holds superseded records.
        log.append(&Record::new(&body).with_key(&(i % 4).to_le_bytes())).unwrap();
        i += 1;
    };
    while log.stats().segments < 6 {
        append(&log);
    }
    let policy = CompactionPolicy { min_lag_ns: 0, tombstone_ns: u64::MAX, id_lag_ns: 0 };
    assert!(log.compact(&policy, crate::clock::now_ns()).unwrap());
    // The replaced full-size segments come back to the pool once the epoch
    // lets the old directory go.
    eventually("a replaced segment comes back to the pool", || {
        crate::sync::epoch::pin().flush();
        log.stats().spare_segments == SPARE_SEGMENTS
    });
    assert!(!log.shared.pool.is_recycling(), "a pass's replaced segments counted as a trim");
    // Rolls use the spares up; the one after asks for its next segment to
    // be made ahead, as a growing log does.
    let segments = log.stats().segments;
    while log.stats().segments < segments + SPARE_SEGMENTS + 1 {
        append(&log);
    }
    HangGuard::new().wait(
        || log.stats().spare_segments == 1,
        || {
            format!(
                "no spare was made ahead (asked and not made: {}, recycling: {}, {:?})",
                log.shared.pool.spare_requested(),
                log.shared.pool.is_recycling(),
                log.stats()
            )
        },
    );
}

#[test]
fn memory_stays_bounded_and_buffers_are_recycled() {
    let seg = MIN_SEGMENT_BYTES;
    let log = small(seg, Some(8 * seg as u64));
    for i in 0..50_000u64 {
        log.append(&Record::new(&payload(i, 80))).unwrap();
        // Keep the epoch moving on this thread so retired directories are freed.
    }
    let stats = log.stats();
    assert!(stats.segments <= 8);
    assert!(stats.spare_segments <= SPARE_SEGMENTS);
}

#[test]
fn bad_configs_are_refused_with_reasons() {
    let bad = [
        LogConfig { retention_bytes: Some(10), ..LogConfig::default() },
        LogConfig { retention_messages: Some(0), ..LogConfig::default() },
        LogConfig { segment_bytes: Some(10), ..LogConfig::default() },
        LogConfig { segment_bytes: Some(1 << 31), retention_bytes: None, ..LogConfig::default() },
        LogConfig { segment_bytes: Some(1 << 20), retention_bytes: Some(1 << 20), ..LogConfig::default() },
        LogConfig { max_record_bytes: Some(8), ..LogConfig::default() },
        LogConfig { max_record_bytes: Some(1 << 30), ..LogConfig::default() },
    ];
    for config in bad {
        let err = Log::new(&config).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{config:?}: {err}");
    }
    let tiny = Log::new(&LogConfig { retention_bytes: Some(64 << 10), ..LogConfig::default() }).unwrap();
    assert_eq!(tiny.segment_bytes(), 16 << 10, "a quarter of a small retention");
    assert_eq!(tiny.max_record_bytes(), 16 << 10);
}

#[test]
fn concurrent_publishers_get_unique_dense_offsets() {
    let log = small(MIN_SEGMENT_BYTES, None);
    let threads = 4;
    let per = 5_000u64;
    let mut all: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let log = &log;
                s.spawn(move || {
                    (0..per)
                        .map(|i| log.append(&Record::new(&payload(t * per + i, (i % 50) as usize))).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    all.sort_unstable();
    assert_eq!(all, (0..threads * per).collect::<Vec<_>>());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever the record sizes and segment size, what is read back (one by
    /// one, in batches, and after seeks) is exactly what was written.
    #[test]
    fn read_back_equals_written(
        segment_kib in 4usize..16,
        sizes in proptest::collection::vec(0usize..3_000, 1..400),
        batch in 1usize..40,
        seek_to in any::<proptest::sample::Index>(),
    ) {
        let log = small(segment_kib << 10, None);
        let mut written = Vec::new();
        for (i, &len) in sizes.iter().enumerate() {
            let body = payload(i as u64, len);
            let key = (i % 3 == 0).then(|| i.to_le_bytes());
            let attr_value = format!("v{i}");
            let attrs = [("i", attr_value.as_str())];
            let mut rec = Record::new(&body).with_attributes(&attrs);
            if let Some(k) = &key { rec = rec.with_key(k); }
            prop_assert_eq!(log.append(&rec).unwrap(), i as u64);
            written.push((key.map(|k| k.to_vec()), attr_value, body));
        }
        let mut c = log.cursor_from_first();
        for (i, (key, attr, body)) in written.iter().enumerate() {
            let r = c.read().unwrap().unwrap();
            prop_assert_eq!(r.offset(), i as u64);
            prop_assert_eq!(r.key().map(<[u8]>::to_vec), key.clone());
            prop_assert_eq!(r.attribute("i"), Some(attr.as_str()));
            prop_assert_eq!(r.payload(), &body[..]);
        }
        prop_assert!(c.read().unwrap().is_none());

        let mut c = log.cursor_from_first();
        let mut i = 0;
        loop {
            let b = c.read_batch(batch).unwrap();
            if b.is_empty() { break; }
            for r in b {
                prop_assert_eq!(r.payload(), &written[i].2[..]);
                i += 1;
            }
        }
        prop_assert_eq!(i, written.len());

        let target = seek_to.index(written.len());
        c.seek(target as u64).unwrap();
        prop_assert_eq!(c.read().unwrap().unwrap().payload(), &written[target].2[..]);
    }
}

/// Issue 14 #3: the publisher that must install the next segment cannot map
/// it. It gets a clear error (it used to panic and leave every later publish
/// spinning for ever), and the partition works again once memory is back.
#[test]
fn a_failed_segment_allocation_is_an_error_and_the_partition_recovers() {
    let log = small(MIN_SEGMENT_BYTES, None);
    log.fail_next_segment_allocations(3);
    let mut appended = Vec::new();
    let err = loop {
        match log.append(&Record::new(&payload(appended.len() as u64, 100))) {
            Ok(offset) => appended.push(offset),
            Err(e) => break e,
        }
    };
    assert!(!appended.is_empty(), "the first segment was mapped at creation");
    assert!(matches!(&err, Error::ResourceExhausted(m) if m.contains("out of memory")), "{err}");
    let end = log.end_offset();
    assert_eq!(end, appended.len() as u64, "the end is the sealed count, not the failed reservations");
    // Two more failed attempts: each later publisher retries the roll itself,
    // and none of them reserves in the dead segment again.
    for _ in 0..2 {
        let err = log.append(&Record::new(b"again")).unwrap_err();
        assert!(matches!(err, Error::ResourceExhausted(_)), "{err}");
        assert_eq!(log.end_offset(), end);
    }
    // Memory is back: the next publish installs the segment and succeeds.
    let next = log.append(&Record::new(&payload(end, 100))).unwrap();
    assert_eq!(next, end, "offsets stay dense across the failure");
    appended.push(next);
    let got = read_all(&mut log.cursor_from_first());
    assert_eq!(got.iter().map(|(o, _)| *o).collect::<Vec<_>>(), appended);
    for (offset, p) in got {
        assert_eq!(p, payload(offset, 100));
    }
    assert_eq!(log.stats().segments, 2);
}

/// A failed allocation in the middle of a batch keeps the parts before it
/// (listed in `offsets`) and appends nothing after it.
#[test]
fn a_batch_that_meets_a_failed_allocation_reports_what_it_appended() {
    let log = small(MIN_SEGMENT_BYTES, None);
    log.fail_next_segment_allocations(1);
    let payloads: Vec<Vec<u8>> = (0..200).map(|i| payload(i, 100)).collect();
    let records: Vec<Record<'_>> = payloads.iter().map(|p| Record::new(p)).collect();
    let mut offsets = Vec::new();
    let err = log.append_batch(&records, &mut offsets).unwrap_err();
    assert!(matches!(err, Error::ResourceExhausted(_)), "{err}");
    assert!(!offsets.is_empty() && offsets.len() < records.len());
    assert_eq!(offsets, (0..offsets.len() as u64).collect::<Vec<_>>());
    assert_eq!(log.end_offset(), offsets.len() as u64);
    let mut rest = Vec::new();
    log.append_batch(&records[offsets.len()..], &mut rest).unwrap();
    assert_eq!(rest.first(), Some(&(offsets.len() as u64)));
    let got = read_all(&mut log.cursor_from_first());
    assert_eq!(got.len(), records.len());
    for (offset, p) in got {
        assert_eq!(p, payloads[offset as usize]);
    }
}

/// Publishers waiting at a full segment for a roll that fails get the error
/// rather than waiting for ever; afterwards the partition works.
#[test]
fn publishers_waiting_for_a_failed_roll_get_the_error() {
    let log = small(MIN_SEGMENT_BYTES, None);
    log.fail_next_segment_allocations(usize::MAX);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut ok = 0u64;
                loop {
                    match log.append(&Record::new(&payload(t, 100))) {
                        Ok(_) => ok += 1,
                        Err(Error::ResourceExhausted(_)) => return ok,
                        Err(e) => panic!("unexpected {e}"),
                    }
                }
            })
        })
        .collect();
    let ok: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(log.end_offset(), ok);
    log.fail_next_segment_allocations(0);
    assert_eq!(log.append(&Record::new(b"back")).unwrap(), ok);
}

/// A batch larger than one reservation's cap is cut into parts; all of it
/// still lands in order.
#[test]
fn a_batch_over_the_reservation_cap_is_cut_into_parts() {
    let log = small(1 << 20, None);
    let n = segment::MAX_RESERVATION_RECORDS * 2 + 5;
    let payloads: Vec<Vec<u8>> = (0..n as u64).map(|i| payload(i, 8)).collect();
    let records: Vec<Record<'_>> = payloads.iter().map(|p| Record::new(p)).collect();
    let mut offsets = Vec::new();
    log.append_batch(&records, &mut offsets).unwrap();
    assert_eq!(offsets, (0..n as u64).collect::<Vec<_>>());
}

/// The log names its own partition in range errors (the broker used to patch
/// a `partition: 0` from the log in two places).
#[test]
fn range_errors_name_the_logs_partition() {
    let log = Log::for_partition(&LogConfig::default(), 3).unwrap();
    log.append(&Record::new(b"x")).unwrap();
    let err = log.cursor_at(5).unwrap_err();
    assert_eq!(err, Error::OutOfRange { partition: 3, offset: 5, first: 0, end: 1 });
    let mut c = log.cursor_from_first();
    assert!(matches!(c.seek(9), Err(Error::OutOfRange { partition: 3, offset: 9, .. })));
}

/// Appends 64-byte records to `log` until it has two segments; returns how
/// many it took.
fn fill_first_segment(log: &Log) -> u64 {
    let mut n = 0;
    while log.stats().segments == 1 {
        assert_eq!(log.append(&Record::new(&payload(n, 64))).unwrap(), n);
        n += 1;
    }
    n
}

#[test]
fn a_new_log_starts_with_a_small_segment_then_rolls_to_its_configured_size() {
    let log = Log::new(&LogConfig::default()).unwrap();
    let stats = log.stats();
    assert_eq!((stats.segments, stats.retained_bytes), (1, config::FIRST_SEGMENT_BYTES as u64), "{stats:?}");
    let n = fill_first_segment(&log);
    assert!(n > 5, "a handful of small messages fit the first segment: {n}");
    let stats = log.stats();
    assert_eq!(stats.retained_bytes, (config::FIRST_SEGMENT_BYTES + DEFAULT_SEGMENT_BYTES) as u64, "{stats:?}");
    for i in n..n + 1000 {
        assert_eq!(log.append(&Record::new(&payload(i, 64))).unwrap(), i);
    }
    assert_eq!(log.stats().segments, 2, "the second segment has the configured size");
    let mut c = log.cursor_from_first();
    let all = read_all(&mut c);
    assert_eq!(all.len() as u64, n + 1000);
    assert!(all.iter().enumerate().all(|(i, (o, p))| *o == i as u64 && *p == payload(i as u64, 64)));

    // Small configured segments are not preceded by a smaller one.
    let log = small(4096, None);
    assert_eq!(log.stats().retained_bytes, 4096);
}

#[test]
fn a_record_larger_than_the_small_first_segment_goes_to_the_next_one() {
    let big = payload(7, 4000);
    for batch in [false, true] {
        let log = Log::new(&LogConfig::default()).unwrap();
        if batch {
            let mut offsets = Vec::new();
            let records: Vec<Record<'_>> = [&big[..], b"after"]
                .into_iter()
                .chain(std::iter::repeat_n(&b"more"[..], 50))
                .map(Record::new)
                .collect();
            log.append_batch(&records, &mut offsets).unwrap();
            assert_eq!(offsets, (0..52).collect::<Vec<u64>>());
        } else {
            assert_eq!(log.append(&Record::new(&big)).unwrap(), 0);
            assert_eq!(log.append(&Record::new(b"after")).unwrap(), 1);
        }
        // The small segment was sealed empty; its successor has its base.
        let stats = log.stats();
        assert_eq!((stats.segments, stats.first_offset), (2, 0), "{stats:?}");
        for start in [log.cursor_from_first(), log.cursor_at(0).unwrap()] {
            let mut c = start;
            let all = read_all(&mut c);
            assert_eq!((all[0].0, &all[0].1), (0, &big), "batch: {batch}");
            assert_eq!((all[1].0, &all[1].1[..]), (1, &b"after"[..]), "batch: {batch}");
        }
        assert_eq!(log.cursor_at(1).unwrap().read().unwrap().unwrap().payload(), b"after");
    }
}

#[test]
fn publishers_racing_out_of_the_small_first_segment_lose_nothing() {
    const THREADS: u64 = 4;
    const EACH: u64 = 300;
    let log = Log::new(&LogConfig::default()).unwrap();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let log = &log;
            s.spawn(move || {
                for i in 0..EACH {
                    let mut body = payload(t * EACH + i, 64);
                    body[0] = t as u8;
                    body[1..9].copy_from_slice(&i.to_le_bytes());
                    log.append(&Record::new(&body)).unwrap();
                }
            });
        }
    });
    assert!(log.stats().segments >= 2);
    let mut c = log.cursor_from_first();
    let all = read_all(&mut c);
    assert_eq!(all.len() as u64, THREADS * EACH);
    // Every thread's records, each once and in its order.
    let mut next = [0u64; THREADS as usize];
    for (i, (offset, body)) in all.iter().enumerate() {
        assert_eq!(*offset, i as u64);
        let t = body[0] as usize;
        assert_eq!(u64::from_le_bytes(body[1..9].try_into().unwrap()), next[t]);
        next[t] += 1;
    }
    assert!(next.iter().all(|&n| n == EACH));
}

#[test]
fn read_batches_crosses_one_segment_end() {
    let log = small(MIN_SEGMENT_BYTES, None);
    for i in 0..2_000u64 {
        log.append(&Record::new(&payload(i, 80))).unwrap();
    }
    assert!(log.stats().segments > 2);
    // Fewer than a segment holds, so no batch pair spans more than one end;
    // every read but the last is full, and some cross an end.
    let per_read = 30;
    let (mut c, mut plain) = (log.cursor_from_first(), log.cursor_from_first());
    let (mut next, mut crossed, mut short_plain) = (0, 0, 0);
    while next < 2_000 {
        let (a, b) = c.read_batches(per_read).unwrap();
        crossed += usize::from(!b.is_empty());
        let got: Vec<u64> = a.iter().chain(b.iter()).map(|r| r.offset()).collect();
        assert_eq!(got, (next..(next + per_read as u64).min(2_000)).collect::<Vec<_>>());
        next += got.len() as u64;
        short_plain += usize::from(plain.read_batch(per_read).unwrap().len() < per_read);
    }
    assert!(crossed > 0, "some reads crossed a segment end");
    assert!(short_plain > 1, "read_batch stops at segment ends (what read_batches is for)");
}

/// A first batch that ends its segment, with nothing committed yet in the
/// next one (its first record still being written): the look for a second
/// batch moves the cursor onto the next segment, and the first batch must
/// still be read from its own.
#[test]
fn read_batches_reads_the_first_batch_from_its_segment_when_the_next_has_nothing_yet() {
    let log = small(MIN_SEGMENT_BYTES, None);
    for i in 0..5u64 {
        log.append(&Record::new(&payload(i, 80))).unwrap();
    }
    {
        let guard = epoch::pin();
        let seg = log.shared.dir(&guard).last().clone();
        let segment::Reservation::Sealer { count, end } = seg.reserve(1, seg.capacity() + 1) else { panic!() };
        let current = log.shared.dir_ptr(&guard);
        log.shared.roll(&seg, count, end, current, &guard).unwrap();
    }
    assert_eq!(log.stats().segments, 2);
    let hole = log.leave_hole(100);
    assert_eq!(hole, 5, "the next segment's first offset is being written");
    let mut c = log.cursor_from_first();
    let (a, b) = c.read_batches(64).unwrap();
    let got: Vec<Vec<u8>> = a.iter().map(|r| r.payload().to_vec()).collect();
    assert_eq!(got, (0..5).map(|i| payload(i, 80)).collect::<Vec<_>>());
    assert!(b.is_empty());
    assert_eq!(c.offset(), 5);
}
