//! Loom models of the segmented log, run on the real `rill::log` code.
//!
//! Under `--cfg loom` rill's sync shim hands the log loom's atomics, cells,
//! `Arc` and mutex, and crossbeam-epoch runs on loom too (`--cfg crossbeam_loom`).
//! Segments are shrunk to 64 bytes: two records of 32 bytes (24 of header and
//! an 8-byte payload holding the record's own tag), so three appends cross a
//! segment boundary. Each slot's bytes sit behind a loom `UnsafeCell`, so loom
//! also reports any read of a record that is not ordered after its write.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use loom_tests::model;
use rill::log::{Cursor, Log, LogConfig, Record};

/// Segment size: room for exactly two records of `RECORD` bytes.
const SEGMENT: usize = 64;

fn log(retention_bytes: Option<u64>) -> Log {
    Log::new(&LogConfig { segment_bytes: Some(SEGMENT), retention_bytes, ..LogConfig::default() }).unwrap()
}

fn append(log: &Log, tag: u64) -> u64 {
    log.append(&Record::new(&tag.to_le_bytes())).unwrap()
}

fn tag(payload: &[u8]) -> u64 {
    u64::from_le_bytes(payload.try_into().expect("8-byte payload"))
}

/// Reads until the cursor reaches `end`, yielding while the next record is not
/// committed. Returns the tags read and the records reported missed.
fn read_until(cursor: &mut Cursor, end: u64) -> (Vec<(u64, u64)>, u64) {
    let mut seen = Vec::new();
    let mut missed = 0;
    while cursor.offset() < end {
        match cursor.read() {
            Ok(Some(r)) => seen.push((r.offset(), tag(r.payload()))),
            Ok(None) => thread::yield_now(),
            Err(lag) => missed += lag.missed,
        }
    }
    (seen, missed)
}

/// Two publishers race three appends across a segment rollover (the 3rd record
/// does not fit the first segment; whoever overflows it first must seal it and
/// install the next). Offsets come out dense, each publisher's own order is
/// kept, and every record reads back intact.
#[test]
fn concurrent_appends_across_a_rollover_are_dense_and_intact() {
    model(|| {
        let log = Arc::new(log(None));
        let l = log.clone();
        let t = thread::spawn(move || (append(&l, 10), append(&l, 11)));
        let c = append(&log, 20);
        let (a, b) = t.join().unwrap();

        let mut offsets = vec![a, b, c];
        assert!(a < b, "one publisher's appends keep their order");
        offsets.sort_unstable();
        assert_eq!(offsets, vec![0, 1, 2]);
        assert_eq!(log.stats().segments, 2, "exactly one rollover");

        let (seen, missed) = read_until(&mut log.cursor_from_first(), 3);
        assert_eq!(missed, 0);
        let mut expect = vec![(a, 10), (b, 11), (c, 20)];
        expect.sort_unstable();
        assert_eq!(seen, expect);
    });
}

/// The early seal of the age limit (`Log::expire`, as if everything had
/// expired) races a publisher appending across a rollover. The seal is made
/// by a reservation that is never granted, so whichever of the two overfills
/// the segment first seals it and rolls; the other waits for that roll.
/// Offsets stay dense, every record reads back intact, and nothing hangs.
#[test]
fn an_early_seal_for_the_age_limit_races_a_publisher() {
    model(|| {
        // An age limit of about 31 years: by the wall clock nothing expires
        // (a model must not depend on it: loom replays executions), while
        // `expire_as_of(u64::MAX)` sees everything expired.
        let config =
            LogConfig { segment_bytes: Some(SEGMENT), retention_ms: Some(1_000_000_000_000), ..LogConfig::default() };
        let log = Arc::new(Log::new(&config).unwrap());
        append(&log, 10);
        let l = log.clone();
        let t = thread::spawn(move || (append(&l, 11), append(&l, 12)));
        log.expire_as_of(u64::MAX).unwrap();
        let (a, b) = t.join().unwrap();
        assert_eq!((a, b), (1, 2), "one publisher: dense offsets after the first");

        let (seen, missed) = read_until(&mut log.cursor_from_first(), 3);
        assert_eq!(missed, 0);
        assert_eq!(seen, vec![(0, 10), (1, 11), (2, 12)]);
    });
}

/// A reader follows two publishers. When the later offset commits first, the
/// reader must wait at the earlier one (never skip it), and it must never see
/// a record's bytes before they are complete.
#[test]
fn a_reader_waits_at_an_uncommitted_slot() {
    model(|| {
        let log = Arc::new(log(None));
        let l = log.clone();
        let p = thread::spawn(move || append(&l, 1));
        let l = log.clone();
        let mut cursor = log.cursor_from_first();
        let r = thread::spawn(move || read_until(&mut cursor, 2));
        let mine = append(&log, 2);
        let theirs = p.join().unwrap();
        let (seen, missed) = r.join().unwrap();
        drop(l);
        assert_eq!(missed, 0);
        let mut expect = vec![(mine, 2), (theirs, 1)];
        expect.sort_unstable();
        assert_eq!(seen, expect, "both records, in offset order, intact");
    });
}

/// Retention trims the head segment while a reader is inside it. The reader
/// keeps a view of record 0 across the trim; its bytes must stay valid and
/// unchanged (the buffers are recycled for the next segment, and loom flags any
/// overlap of that reuse with the reader). Afterwards the reader moves on and
/// accounts for every record: each is either read, in order, or reported missed.
#[test]
fn retention_trims_while_a_reader_is_inside_the_head_segment() {
    model(|| {
        // Two segments retained: the third rollover trims the first.
        let log = Arc::new(log(Some(2 * SEGMENT as u64)));
        append(&log, 100);
        append(&log, 101);
        let mut cursor = log.cursor_from_first();
        let l = log.clone();
        let publisher = thread::spawn(move || {
            for t in 102..105 {
                append(&l, t);
            }
        });
        let reader = thread::spawn(move || {
            let mut seen = Vec::new();
            let mut missed = 0;
            match cursor.read() {
                Ok(Some(first)) => {
                    let (offset, held) = (first.offset(), first.payload());
                    thread::yield_now();
                    // Still intact, whatever retention did meanwhile.
                    assert_eq!((offset, tag(held)), (0, 100));
                    seen.push((offset, tag(held)));
                }
                // The trim came first: record 0 onwards are gone.
                Err(lag) => missed += lag.missed,
                Ok(None) => panic!("records 0 and 1 were committed before the reader started"),
            }
            let (more, more_missed) = read_until(&mut cursor, 5);
            seen.extend(more);
            (seen, missed + more_missed)
        });
        publisher.join().unwrap();
        let (seen, missed) = reader.join().unwrap();
        assert_eq!(log.stats().segments, 2);
        assert_eq!(log.first_offset(), 2);
        for (offset, t) in &seen {
            assert_eq!(*t, 100 + offset, "record {offset} is intact");
        }
        assert!(seen.windows(2).all(|w| w[0].0 < w[1].0), "in offset order");
        assert_eq!(seen.len() as u64 + missed, 5, "every record read or reported missed: {seen:?} {missed}");
    });
}

/// The sealer cannot allocate the next segment (the test seam fails exactly
/// one allocation). It gets an out-of-memory error; the other publisher either
/// was waiting for that roll and gets the error too, or came after the failure
/// and installs the segment itself. Either way nobody waits for ever, and a
/// later publish succeeds with dense offsets and intact records.
#[test]
fn a_failed_roll_fails_its_waiters_and_a_later_publish_recovers() {
    model(|| {
        let log = Arc::new(log(None));
        append(&log, 100);
        append(&log, 101);
        log.fail_next_segment_allocations(1);
        let try_append = |log: &Log, tag: u64| log.append(&Record::new(&tag.to_le_bytes()));
        let l = log.clone();
        let t = thread::spawn(move || try_append(&l, 10));
        let mine = try_append(&log, 20);
        let theirs = t.join().unwrap();

        let results = [(mine, 20), (theirs, 10)];
        let failed = results.iter().filter(|(r, _)| r.is_err()).count();
        assert!(failed >= 1, "the sealer's allocation failed");
        for (r, _) in &results {
            if let Err(e) = r {
                assert!(matches!(e, rill::Error::ResourceExhausted(_)), "{e}");
            }
        }
        let mut expect: Vec<(u64, u64)> = vec![(0, 100), (1, 101)];
        expect.extend(results.iter().filter_map(|(r, t)| r.as_ref().ok().map(|o| (*o, *t))));
        let next = append(&log, 30);
        expect.push((next, 30));
        expect.sort_unstable();
        let offsets: Vec<u64> = expect.iter().map(|(o, _)| *o).collect();
        assert_eq!(offsets, (0..offsets.len() as u64).collect::<Vec<_>>(), "dense offsets");
        let (seen, missed) = read_until(&mut log.cursor_from_first(), offsets.len() as u64);
        assert_eq!(missed, 0);
        assert_eq!(seen, expect);
    });
}

/// A fresh directory for one execution of a durable model (loom runs the
/// closure once per interleaving): in memory (`/dev/shm`) where there is
/// one, so that the `Always` model's data syncs cost no disk wait.
fn durable_dir() -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    // Relaxed: only uniqueness matters.
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let shm = std::path::Path::new("/dev/shm");
    let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    let dir = base.join(format!("rill-loom-sealed-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn durable_log(dir: &std::path::Path, fsync: rill::Fsync) -> Log {
    let config = LogConfig { segment_bytes: Some(SEGMENT), retention_bytes: None, ..LogConfig::default() };
    Log::open(&config, 0, &rill::log::DurableLog { dir: dir.to_owned(), fsync, repair: false }).unwrap().0
}

/// The segment files of `dir` whose completion marker is missing, but for
/// the newest one (the active segment, never sealed). The marker is the
/// header's completion fields, bytes 32..52 of the file (`src/log/file/format.rs`):
/// all zeros until a sync round writes them (their checksum mixes in a
/// constant, so written fields are never all zeros).
fn unmarked_sealed_files(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".seg"))
        .collect();
    names.sort();
    names.pop();
    names.retain(|n| std::fs::read(dir.join(n)).unwrap()[32..52].iter().all(|&b| b == 0));
    names
}

/// Issue 40, item 2 (the completion marker, `src/log/durable.rs`): an
/// `Always` publisher's two appends cross a segment roll (a durable segment
/// of 64 bytes holds one record and its frame) while the interval flusher
/// runs a sync round. However the rounds, the seals and the rolls
/// interleave, once an append into a later segment has returned, every
/// segment before it is marked complete. Before the fix no segment ever was:
/// the round that covered a segment's last record, run before its seal,
/// moved the watermark to the next segment, and no later round looked back.
#[test]
fn an_always_append_into_a_later_segment_returns_with_the_earlier_ones_marked() {
    model(|| {
        let dir = durable_dir();
        let log = Arc::new(durable_log(&dir, rill::Fsync::Always));
        // The first segment full, its one record durable, not sealed.
        append(&log, 0);
        let l = log.clone();
        let flusher = thread::spawn(move || l.sync().unwrap());
        // Seals it, rolls, commits a record in the next one and waits for it.
        append(&log, 1);
        assert!(log.stats().segments >= 2, "the appends cross a roll");
        assert_eq!(unmarked_sealed_files(&dir), Vec::<String>::new());
        flusher.join().unwrap();
        drop(log);
        std::fs::remove_dir_all(&dir).unwrap();
    });
}

/// The same hand-over without `Always`: the interval flusher's round races
/// the publisher that fills and seals a segment (with `Never`, so that no
/// round waits for a disk: the marking is the same). The round after the
/// seal marks the segment even if the one before it covered the segment's
/// last record and moved the watermark past it; before the fix, a flusher
/// round that ran between the segment's last commit and its seal left it
/// unmarked for good.
#[test]
fn a_segment_sealed_after_its_round_is_marked_by_the_next() {
    model(|| {
        let dir = durable_dir();
        let log = Arc::new(durable_log(&dir, rill::Fsync::Never));
        // The first segment full (its one record committed), not sealed.
        append(&log, 0);
        let l = log.clone();
        let flusher = thread::spawn(move || l.sync().unwrap());
        // Seals it, rolls, and commits a record in the next one.
        append(&log, 1);
        flusher.join().unwrap();
        assert!(log.stats().segments >= 2, "the appends cross a roll");
        log.sync().unwrap();
        assert_eq!(unmarked_sealed_files(&dir), Vec::<String>::new());
        drop(log);
        std::fs::remove_dir_all(&dir).unwrap();
    });
}

/// Issue 40, item 2, under `Never`: the broker's flusher runs
/// [`Log::flusher_round`] every interval, and under `Never` that is a
/// marking round (a sync round that flushes nothing). Its round races the
/// publisher that fills, seals and rolls a segment; the next interval's
/// round marks the segment whichever way the race went, and the log's
/// count of unmarked sealed segments agrees with the files at each step.
/// Before the marking round the flusher ran no log round under `Never`
/// (only the clean close did), so the sealed segment stayed unmarked until
/// then, and a kill left damage in it to pass for a torn tail.
#[test]
fn the_never_flushers_round_marks_a_segment_sealed_after_the_last_one() {
    model(|| {
        let dir = durable_dir();
        let log = Arc::new(durable_log(&dir, rill::Fsync::Never));
        // The first segment full (its one record committed), not sealed.
        append(&log, 0);
        let l = log.clone();
        let flusher = thread::spawn(move || l.flusher_round().unwrap());
        // Seals it, rolls, and commits a record in the next one.
        append(&log, 1);
        flusher.join().unwrap();
        assert!(log.stats().segments >= 2, "the appends cross a roll");
        assert_eq!(log.stats().unmarked_segments, unmarked_sealed_files(&dir).len());
        // The flusher's next interval.
        log.flusher_round().unwrap();
        assert_eq!(unmarked_sealed_files(&dir), Vec::<String>::new());
        assert_eq!(log.stats().unmarked_segments, 0);
        drop(log);
        std::fs::remove_dir_all(&dir).unwrap();
    });
}

/// The durable idle trim (issue 44; "A trim nobody publishes for" in
/// `src/log/dir.rs`) against a sealer, the directory's only second writer.
/// A durable log whose newest segment is the empty one an early seal left,
/// behind it an expired sealed segment: one thread applies the age limit
/// (`expire_as_of(u64::MAX)`: everything has expired), which trims without
/// a roll while the newest segment is empty; meanwhile a publisher fills
/// that segment, seals it and rolls. The two exchanges are against the
/// same directory, so one fails: a trim that loses gives up, a roll that
/// loses rebuilds from the trim's copy. Whatever the order, nothing is
/// lost or duplicated: the offsets stay dense, every retained record reads
/// back, the trim is counted once or not at all, the files on disk are the
/// retained segments, and reopening finds the same log. With T1 or T2
/// weakened loom reports the roller reading the trim's directory unordered
/// with its construction; `.ci/fence-check` requires that.
#[test]
fn a_durable_idle_trim_races_a_sealer() {
    model(|| {
        let dir = durable_dir();
        // An age limit of about 31 years: by the wall clock nothing expires
        // (the rolls' trims read it), while `expire_as_of(u64::MAX)` sees
        // everything expired.
        let config =
            LogConfig { segment_bytes: Some(SEGMENT), retention_ms: Some(1_000_000_000_000), ..LogConfig::default() };
        let durable = rill::log::DurableLog { dir: dir.clone(), fsync: rill::Fsync::Never, repair: false };
        let log = Arc::new(Log::open(&config, 0, &durable).unwrap().0);
        // Segment 0 holds record 0 (a durable segment of 64 bytes holds one
        // record and its frame); the early seal seals it and rolls to an
        // empty segment 1, trimming nothing by the wall clock.
        append(&log, 100);
        log.expire_as_of(u64::MAX).unwrap();
        assert_eq!((log.stats().segments, log.first_offset(), log.end_offset()), (2, 0, 1));

        let l = log.clone();
        let trimmer = thread::spawn(move || l.expire_as_of(u64::MAX).unwrap());
        // Fills segment 1, then seals it and rolls to segment 2.
        let a = append(&log, 101);
        let b = append(&log, 102);
        trimmer.join().unwrap();
        assert_eq!((a, b), (1, 2), "dense offsets");

        let stats = log.stats();
        let first = log.first_offset();
        // As of the end of time every sealed segment has expired: the trim
        // takes segment 0, or segments 0 and 1 if it came after the roll
        // and before record 2 was reserved; a trim that lost takes nothing.
        assert!(first <= 2, "only sealed segments go: first offset {first}");
        assert_eq!(stats.trimmed_segments, first, "each trimmed segment counted once");
        assert_eq!(log.end_offset(), 3);
        let (seen, missed) = read_until(&mut log.cursor_from_first(), 3);
        assert_eq!(missed, 0);
        let expect: Vec<(u64, u64)> = (first..3).map(|o| (o, 100 + o)).collect();
        assert_eq!(seen, expect, "every retained record, once, intact");
        drop(log);

        // The files are the retained segments, and an open finds the same log.
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".seg"))
            .collect();
        files.sort();
        assert_eq!(files.len(), stats.segments, "{files:?}");
        let (log, report) = Log::open(&config, 0, &durable).unwrap();
        assert_eq!((report.first_offset, report.end_offset, report.truncated_records), (first, 3, 0));
        drop(log);
        std::fs::remove_dir_all(&dir).unwrap();
    });
}

/// Compaction's swap ("The swap" in `log/compact.rs`): a pass replaces the
/// sealed head segment while a reader is inside it, holding a view of its
/// first record, or starts in the rebuilt one. Keyed records of 40 bytes,
/// two to a segment: segment 0
/// holds a@0 (superseded) and a@1, segment 1 (being written) b@2. Whatever
/// the order: the view held across the swap stays intact; the reader sees
/// offsets in order, every record intact under its own offset, and never
/// misses the newest record of a key; a reader after the pass sees only
/// the newest ones. With C1 weakened to `Relaxed` loom reports the reader
/// using the pass's directory unordered with its construction.
#[test]
fn a_compaction_swap_races_a_reader() {
    use rill::log::CompactionPolicy;
    const KEYED_SEGMENT: usize = 80;
    let keyed = |log: &Log, key: &[u8], tag: u64| log.append(&Record::new(&tag.to_le_bytes()).with_key(key)).unwrap();
    model(move || {
        let log = Arc::new(
            Log::new(&LogConfig { segment_bytes: Some(KEYED_SEGMENT), retention_bytes: None, ..LogConfig::default() })
                .unwrap(),
        );
        keyed(&log, b"a", 100);
        keyed(&log, b"a", 101);
        keyed(&log, b"b", 102);
        let l = log.clone();
        let reader = thread::spawn(move || {
            // Made here, so the reader finds the old head segment or the
            // rebuilt one, and pins for the first time (when crossbeam-epoch
            // collects garbage, which orders it after the pass's retire) at
            // whatever point of the pass this is, not later.
            let mut cursor = l.cursor_from_first();
            let mut seen = Vec::new();
            if let Some(first) = cursor.read().expect("nothing is trimmed") {
                let (offset, held) = (first.offset(), first.payload());
                thread::yield_now();
                // Still intact, whatever the pass did meanwhile.
                assert_eq!(tag(held), 100 + offset);
                seen.push((offset, tag(held)));
            }
            let (more, missed) = read_until(&mut cursor, 3);
            assert_eq!(missed, 0);
            seen.extend(more);
            seen
        });
        let all = CompactionPolicy { min_lag_ns: 0, tombstone_ns: u64::MAX, id_lag_ns: 0 };
        assert!(log.compact(&all, u64::MAX).unwrap());
        let seen = reader.join().unwrap();
        assert!(seen.windows(2).all(|w| w[0].0 < w[1].0), "offset order: {seen:?}");
        assert!(seen.iter().all(|&(offset, t)| t == 100 + offset), "intact, under its own offset: {seen:?}");
        // a@0 was read before the swap, or passed over after it; a@1 and b@2 always.
        assert!(seen == [(0, 100), (1, 101), (2, 102)] || seen == [(1, 101), (2, 102)], "{seen:?}");
        let (after, missed) = read_until(&mut log.cursor_from_first(), 3);
        assert_eq!((after, missed), (vec![(1, 101), (2, 102)], 0));
        assert_eq!(log.stats().compacted_records, 1);
    });
}
