//! Compacted topics (issue 41): the newest record of every key is kept, in
//! offset order, with gaps where removed records were; tombstones delete
//! their key and expire; keyless publishes are refused; readers seek,
//! poll and commit across gaps, and never see a torn record while a pass
//! replaces the segment they read.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use rill::log::{CompactionPolicy, Cursor, Log, LogConfig, MIN_SEGMENT_BYTES, Record};
use rill::{Broker, Cleanup, ConsumerOptions, Error, TopicOptions};

mod common;
use common::{broker, wait_for};

/// Small segments, so that a few hundred records seal several.
const SMALL_SEGMENT: usize = MIN_SEGMENT_BYTES;
/// Removes every superseded record, keeps tombstones.
const KEEP_TOMBSTONES: CompactionPolicy = CompactionPolicy { min_lag_ns: 0, tombstone_ns: u64::MAX, id_lag_ns: 0 };
/// A nanosecond in an hour.
const HOUR_NS: u64 = 3_600_000_000_000;

fn compacted(cleanup: Cleanup) -> TopicOptions {
    TopicOptions { cleanup, segment_bytes: Some(SMALL_SEGMENT), ..TopicOptions::default() }
}

fn small_log() -> Log {
    Log::new(&LogConfig { segment_bytes: Some(SMALL_SEGMENT), retention_bytes: None, ..LogConfig::default() }).unwrap()
}

/// Every record a cursor from the oldest one reads now: (offset, key, payload).
fn read_all(log: &Log) -> Vec<(u64, Vec<u8>, Vec<u8>)> {
    drain(&mut log.cursor_from_first())
}

fn drain(cursor: &mut Cursor) -> Vec<(u64, Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some(r) = cursor.read().expect("nothing is trimmed") {
        out.push((r.offset(), r.key().expect("keyed").to_vec(), r.payload().to_vec()));
    }
    out
}

/// Every message a new consumer of `topic` reads from the beginning.
fn consume_all(b: &Broker, group: &str, topic: &str) -> Vec<(u64, Vec<u8>, Vec<u8>)> {
    let mut consumer = b.consumer(group, topic, ConsumerOptions::default()).unwrap();
    let mut out = Vec::new();
    loop {
        let batch = consumer.poll(1000, Duration::from_millis(20)).unwrap();
        if batch.is_empty() {
            return out;
        }
        out.extend(batch.iter().map(|m| (m.offset(), m.key().unwrap().to_vec(), m.payload().to_vec())));
    }
}

/// True if `read` holds, for the keys starting with `prefix`, exactly the
/// newest record of each (as `published` lists them, offset -> (key,
/// payload)), in offset order.
fn newest_only(read: &[(u64, Vec<u8>, Vec<u8>)], published: &[(Vec<u8>, Vec<u8>)], prefix: &[u8]) -> bool {
    let mut newest: BTreeMap<u64, (&[u8], &[u8])> = BTreeMap::new();
    let mut last: HashMap<&[u8], u64> = HashMap::new();
    for (offset, (k, v)) in published.iter().enumerate() {
        if k.starts_with(prefix) {
            if let Some(old) = last.insert(k, offset as u64) {
                newest.remove(&old);
            }
            newest.insert(offset as u64, (k, v));
        }
    }
    let got: Vec<(u64, &[u8], &[u8])> =
        read.iter().filter(|(_, k, _)| k.starts_with(prefix)).map(|(o, k, v)| (*o, &k[..], &v[..])).collect();
    let want: Vec<(u64, &[u8], &[u8])> = newest.into_iter().map(|(o, (k, v))| (o, k, v)).collect();
    got == want
}

/// Publishes `n` records over `keys` keys ("k<i>"), then enough filler
/// (one key of its own, "~") that every one of them is in a sealed segment.
fn publish_keyed(b: &Broker, topic: &str, n: u32, keys: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut published = Vec::new();
    for i in 0..n {
        let (k, v) = (format!("k{}", i % keys).into_bytes(), format!("value {i}").into_bytes());
        b.publish(topic, &Record::new(&v).with_key(&k)).unwrap();
        published.push((k, v));
    }
    for _ in 0..(SMALL_SEGMENT / 32) {
        b.publish(topic, &Record::new(b"filler").with_key(b"~")).unwrap();
        published.push((b"~".to_vec(), b"filler".to_vec()));
    }
    published
}

#[test]
fn the_compactor_keeps_the_last_value_of_every_key_in_offset_order() {
    let b = broker();
    b.create_topic("prices", &compacted(Cleanup::Compact)).unwrap();
    let published = publish_keyed(&b, "prices", 2000, 37);
    // The compactor runs on its own thread: wait (with a deadline) until a
    // reader from the beginning sees only the newest value of every key.
    let mut group = 0;
    wait_for("the compactor to remove every superseded record", || {
        group += 1;
        newest_only(&consume_all(&b, &format!("g{group}"), "prices"), &published, b"k")
    });
    let stats = b.topic_stats("prices").unwrap();
    assert!(stats.compaction_passes >= 1, "{stats:?}");
    assert!(stats.compacted_messages >= 2000 - 37, "{stats:?}");
    assert!(stats.compacted_bytes > stats.compacted_messages * 24, "{stats:?}");
    assert!(stats.compaction_keys >= 37, "the 37 keys, and the filler's: {stats:?}");
    // Offsets never change: the next publish continues after the last one.
    let pos = b.publish("prices", &Record::new(b"next").with_key(b"k0")).unwrap();
    assert_eq!(pos.offset, published.len() as u64);
}

#[test]
fn publishing_without_a_key_to_a_compacted_topic_is_refused_and_appends_nothing() {
    let b = broker();
    for (name, cleanup) in [("c", Cleanup::Compact), ("cd", Cleanup::CompactAndDelete)] {
        b.create_topic(name, &compacted(cleanup)).unwrap();
        b.publish(name, &Record::new(b"v").with_key(b"k")).unwrap();
        assert!(matches!(b.publish(name, &Record::new(b"no key")), Err(Error::InvalidArgument(_))));
        let batch = [Record::new(b"a").with_key(b"k"), Record::new(b"no key")];
        assert!(matches!(b.publish_batch(name, &batch), Err(Error::InvalidArgument(_))), "checked before any");
        let publisher = b.publisher(name).unwrap();
        assert!(matches!(publisher.publish(&Record::new(b"no key")), Err(Error::InvalidArgument(_))));
        assert_eq!(b.topic_stats(name).unwrap().partitions[0].next_offset, 1, "nothing appended");
        // An empty key is a key.
        b.publish(name, &Record::new(b"v").with_key(b"")).unwrap();
    }
    // A plain topic takes keyless messages as before.
    b.create_topic("plain", &TopicOptions::default()).unwrap();
    b.publish("plain", &Record::new(b"no key")).unwrap();
}

/// A compacted topic on a data directory shared by processes is created
/// and compacted (`tests/processes_compact.rs` runs it across processes).
#[test]
fn a_compacted_topic_on_a_directory_shared_by_processes_is_compacted() {
    let dir = std::env::temp_dir().join(format!("rill-compaction-shared-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = rill::BrokerConfig {
        data_dir: Some(dir.clone()),
        sharing: rill::Sharing::Processes,
        ..rill::BrokerConfig::default()
    };
    let b = Broker::new(config).unwrap();
    let options = TopicOptions { segment_bytes: Some(MIN_SEGMENT_BYTES), ..compacted(Cleanup::Compact) };
    b.create_topic("t", &options).unwrap();
    assert!(matches!(b.publish("t", &Record::new(b"no key")), Err(Error::InvalidArgument(_))));
    for i in 0..3000u32 {
        b.publish("t", &Record::new(&i.to_le_bytes()).with_key(b"hot")).unwrap();
    }
    wait_for("the compactor to pass", || b.topic_stats("t").unwrap().compacted_messages > 2000);
    b.close();
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn tombstones_delete_their_key_and_expire_after_the_delete_retention() {
    let log = small_log();
    log.append(&Record::new(b"a1").with_key(b"a")).unwrap();
    log.append(&Record::new(b"b1").with_key(b"b")).unwrap();
    log.append(&Record::new(b"").with_key(b"a")).unwrap(); // tombstone of a
    while log.stats().segments < 2 {
        log.append(&Record::new(b"b2").with_key(b"b")).unwrap();
    }
    let now = rill::clock::now_ns();
    let policy = CompactionPolicy { min_lag_ns: 0, tombstone_ns: HOUR_NS, id_lag_ns: 0 };
    assert!(log.compact(&policy, now).unwrap());
    let read = read_all(&log);
    // a's value is gone, its tombstone stays (an hour); b's newest stays.
    assert_eq!(read[0], (2, b"a".to_vec(), Vec::new()));
    assert!(read.iter().all(|(_, k, v)| k != b"a" || v.is_empty()));
    assert_eq!(read.iter().filter(|(o, k, _)| k == b"b" && *o < 3).count(), 0, "b1 was superseded");
    assert_eq!(log.stats().compaction_keys, 2);
    // Nothing new sealed, and nothing due yet: no pass.
    assert!(!log.compact(&policy, now + 1).unwrap());
    // Two hours on (the clock seam: the pass's time), the tombstone expires.
    assert!(log.compact(&policy, now + 2 * HOUR_NS).unwrap());
    let read = read_all(&log);
    assert!(read.iter().all(|(_, k, _)| k == b"b"), "the tombstone is gone");
    assert_eq!(log.stats().compaction_keys, 1);
    assert_eq!(log.first_offset(), 0, "offsets never change");
}

/// A value kept for its id's dedupe window, then deleted by a tombstone
/// whose own retention is 0: the tombstone stays while the value does, so
/// a reader from the beginning never finds the key alive, and both go
/// once the window has passed.
#[test]
fn a_tombstone_stays_while_an_older_record_of_its_key_is_kept() {
    let log = small_log();
    log.append(&Record::new(b"old").with_key(b"k").with_id("req-1")).unwrap();
    log.append(&Record::new(b"").with_key(b"k")).unwrap(); // tombstone of k
    while log.stats().segments < 3 {
        log.append(&Record::new(b"other").with_key(b"other")).unwrap();
    }
    let now = rill::clock::now_ns();
    let policy = CompactionPolicy { min_lag_ns: 0, tombstone_ns: 0, id_lag_ns: HOUR_NS };
    // The state a reader rebuilds from the beginning: k is deleted.
    let k_alive = |log: &Log| {
        let mut alive = false;
        for (_, key, value) in read_all(log) {
            if key == b"k" {
                alive = !value.is_empty();
            }
        }
        alive
    };
    assert!(log.compact(&policy, now).unwrap());
    let ks: Vec<_> = read_all(&log).into_iter().filter(|(_, k, _)| k == b"k").map(|(o, ..)| o).collect();
    assert_eq!(ks, [0, 1], "the value stays for its id's window, and so does its tombstone");
    assert!(!k_alive(&log));
    // Passes within the window change nothing for k.
    log.append(&Record::new(b"other").with_key(b"other")).unwrap();
    assert!(!log.compact(&policy, now + 1).unwrap(), "nothing due before the window ends");
    assert!(!k_alive(&log));
    // Past the window: the value goes, and the tombstone with it.
    assert!(log.compact(&policy, now + 2 * HOUR_NS).unwrap());
    assert!(read_all(&log).iter().all(|(_, k, _)| k != b"k"), "k's records are gone");
    assert!(!log.compact(&policy, now + 3 * HOUR_NS).unwrap(), "and nothing is left due");
}

#[test]
fn a_record_younger_than_the_lag_is_not_compacted() {
    let log = small_log();
    log.append(&Record::new(b"old").with_key(b"k")).unwrap();
    while log.stats().segments < 2 {
        log.append(&Record::new(b"new").with_key(b"k")).unwrap();
    }
    let now = rill::clock::now_ns();
    let policy = CompactionPolicy { min_lag_ns: HOUR_NS, tombstone_ns: 0, id_lag_ns: 0 };
    assert!(log.compact(&policy, now).unwrap());
    assert_eq!(log.stats().compacted_records, 0, "every record is younger than an hour");
    assert!(!log.compact(&policy, now + 1).unwrap(), "not due yet");
    assert!(log.compact(&policy, now + 2 * HOUR_NS).unwrap(), "due once the lag has passed");
    assert!(log.stats().compacted_records > 0);
    assert_eq!(read_all(&log).iter().filter(|(_, _, v)| v == b"old").count(), 0);
}

#[test]
fn a_pass_waits_until_the_dirty_part_is_half_of_the_sealed_log() {
    // Records of one size with keys of their own, so a pass removes
    // nothing and the sealed segments stay alike; but "x" is written once
    // first and once more later, to show what a skipped pass leaves.
    let log = small_log();
    let mut n = 0u32;
    let mut append_until = |log: &Log, segments: usize| {
        while log.stats().segments < segments {
            log.append(&Record::new(&[1; 24]).with_key(format!("d{n:06}").as_bytes())).unwrap();
            n += 1;
        }
    };
    log.append(&Record::new(&[0; 24]).with_key(b"x")).unwrap();
    append_until(&log, 5);
    let now = rill::clock::now_ns();
    assert!(log.compact(&KEEP_TOMBSTONES, now).unwrap(), "the first pass: everything is dirty");
    assert_eq!((log.stats().compaction_passes, log.stats().compacted_records), (1, 0));
    // Four sealed segments clean; one more sealed, holding x's second record.
    log.append(&Record::new(&[2; 24]).with_key(b"x")).unwrap();
    append_until(&log, 6);
    assert!(!log.compact(&KEEP_TOMBSTONES, now).unwrap(), "a fifth of the sealed log is dirty: no pass");
    assert_eq!(log.stats().compaction_passes, 1);
    let xs = |log: &Log| read_all(log).into_iter().filter(|(_, k, _)| k == b"x").count();
    assert_eq!(xs(&log), 2, "x's old record stays until a pass runs");
    // Three dirty of seven: still below half.
    append_until(&log, 8);
    assert!(!log.compact(&KEEP_TOMBSTONES, now).unwrap());
    assert_eq!(log.stats().compaction_passes, 1);
    // Five dirty of nine: past half, a pass runs and removes x's old record.
    append_until(&log, 10);
    assert!(log.compact(&KEEP_TOMBSTONES, now).unwrap());
    assert_eq!((log.stats().compaction_passes, log.stats().compacted_records), (2, 1));
    assert_eq!(xs(&log), 1);
    assert_eq!(read_all(&log)[0].0, 1, "offset 0, x's old record, is gone");
}

#[test]
fn a_partition_that_goes_quiet_is_compacted_whatever_the_dirty_share() {
    let log = small_log();
    let mut n = 0u32;
    let mut append_until = |log: &Log, segments: usize| {
        while log.stats().segments < segments {
            log.append(&Record::new(&[1; 24]).with_key(format!("d{n:06}").as_bytes())).unwrap();
            n += 1;
        }
    };
    log.append(&Record::new(&[0; 24]).with_key(b"x")).unwrap();
    append_until(&log, 5);
    let now = rill::clock::now_ns();
    assert!(log.compact(&KEEP_TOMBSTONES, now).unwrap(), "the first pass: everything is dirty");
    // One segment sealed since, holding x's second record: a fifth of the
    // sealed log, too little to start a pass by the dirty share.
    log.append(&Record::new(&[2; 24]).with_key(b"x")).unwrap();
    append_until(&log, 6);
    assert!(!log.compact(&KEEP_TOMBSTONES, now).unwrap(), "sealed just now: no pass yet");
    let xs = |log: &Log| read_all(log).into_iter().filter(|(_, k, _)| k == b"x").count();
    assert_eq!(xs(&log), 2);
    // Nothing more sealed for a second and more: the pass runs.
    let quiet = now + 2_000_000_000;
    assert!(log.compact(&KEEP_TOMBSTONES, quiet).unwrap(), "a quiet partition is compacted");
    assert_eq!((log.stats().compaction_passes, log.stats().compacted_records), (2, 1));
    assert_eq!(xs(&log), 1);
    // And only once: nothing was sealed since that pass.
    assert!(!log.compact(&KEEP_TOMBSTONES, quiet + 10_000_000_000).unwrap());
    assert_eq!(log.stats().compaction_passes, 2);
}

#[test]
fn seek_poll_and_commit_across_gaps() {
    // In the log: a cursor at a removed offset starts at the next kept one.
    let log = small_log();
    for i in 0..10u8 {
        log.append(&Record::new(&[i]).with_key(b"x")).unwrap();
    }
    log.append(&Record::new(b"y").with_key(b"y")).unwrap(); // offset 10
    while log.stats().segments < 2 {
        log.append(&Record::new(b"z").with_key(b"z")).unwrap();
    }
    assert!(log.compact(&KEEP_TOMBSTONES, rill::clock::now_ns()).unwrap());
    let mut cursor = log.cursor_at(3).unwrap();
    let first = cursor.read().unwrap().unwrap();
    assert_eq!((first.offset(), first.payload()), (9, &[9u8][..]), "offsets 3..9 were removed");
    assert_eq!(cursor.read().unwrap().unwrap().offset(), 10);
    let mut from_zero = log.cursor_at(0).unwrap();
    let batch = from_zero.read_batch(100).unwrap();
    assert_eq!(batch.first_offset(), 9, "a batch starts at the first kept record");
    assert_eq!(batch.iter().map(|r| r.offset()).collect::<Vec<_>>(), [9, 10], "and stops at the next gap");

    // Through a broker's consumer: poll, seek into a gap, commit across it.
    let b = broker();
    b.create_topic("t", &compacted(Cleanup::Compact)).unwrap();
    let published = publish_keyed(&b, "t", 100, 3);
    wait_for("the compactor to remove every superseded record", || {
        newest_only(&consume_all(&b, "probe", "t"), &published, b"k")
    });
    let mut consumer = b.consumer("readers", "t", ConsumerOptions::default()).unwrap();
    let first = consumer.poll(1, Duration::from_secs(5)).unwrap()[0].offset();
    assert_eq!(first, 97, "the first kept record of k0..k2 is the newest of them");
    consumer.commit().unwrap();
    assert_eq!(consumer.committed(0).unwrap(), 98);
    consumer.seek(0, 5).unwrap();
    let offsets: Vec<u64> = consumer.poll(3, Duration::from_secs(5)).unwrap().iter().map(|m| m.offset()).collect();
    assert_eq!(offsets, [97, 98, 99], "a seek to a removed offset starts at the next kept one");
    consumer.commit().unwrap();
    assert_eq!(consumer.committed(0).unwrap(), 100);
}

#[test]
fn a_log_of_a_few_keys_stays_a_few_segments_however_many_values_it_takes() {
    // Each pass merges the segments it rewrites: their index covers the
    // kept records alone, so neither segments nor memory grow with the
    // offsets written, only with the keys.
    let log = small_log();
    const KEYS: u32 = 20;
    const ROUNDS: u32 = 2_000;
    let key = |k: u32| format!("key-{k:02}").into_bytes();
    for k in 0..KEYS {
        log.append(&Record::new(b"first").with_key(&key(k))).unwrap();
    }
    // A reader inside the first segment, which the passes replace.
    let mut early = log.cursor_from_first();
    let before: Vec<u64> = (0..5).map(|_| early.read().unwrap().unwrap().offset()).collect();
    let mut most = 0;
    for round in 0..ROUNDS {
        for k in 0..KEYS {
            log.append(&Record::new(&round.to_le_bytes()).with_key(&key(k))).unwrap();
        }
        log.compact(&KEEP_TOMBSTONES, rill::clock::now_ns()).unwrap();
        most = most.max(log.stats().segments);
    }
    let stats = log.stats();
    assert_eq!(stats.end_offset, u64::from(KEYS * (ROUNDS + 1)));
    // Twenty keys of about 48 bytes fit one segment: the merged ones, the
    // newest, and what sealed since the last pass (at most the clean part
    // again before the dirty share starts one).
    assert!(most <= 6, "{most} segments at most over {ROUNDS} rounds");
    let read = read_all(&log);
    let tail = &read[read.len() - KEYS as usize..];
    assert!(tail.iter().all(|(_, _, value)| value == &(ROUNDS - 1).to_le_bytes()), "every key's newest value");
    let keys: std::collections::HashSet<_> = read.iter().map(|(_, k, _)| k.clone()).collect();
    assert_eq!(keys.len(), KEYS as usize);
    assert!(read.windows(2).all(|w| w[0].0 < w[1].0), "offset order");
    // A seek into a long run of removed offsets lands on the next kept record.
    let mut cursor = log.cursor_at(u64::from(KEYS)).unwrap();
    assert_eq!(cursor.read().unwrap().unwrap().offset(), read.iter().find(|r| r.0 >= u64::from(KEYS)).unwrap().0);
    // The early reader goes on in offset order into the merged segments.
    let after = drain(&mut early);
    assert!(before.windows(2).all(|w| w[0] < w[1]) && after.first().unwrap().0 > before[4]);
    assert!(after.windows(2).all(|w| w[0].0 < w[1].0));
    assert!(after.ends_with(tail), "and reaches every key's newest value");
}

#[test]
fn plain_compaction_deletes_nothing_by_size_and_compact_and_delete_does() {
    let b = broker();
    let limits = |cleanup| TopicOptions { retention_bytes: Some(2 * SMALL_SEGMENT as u64), ..compacted(cleanup) };
    b.create_topic("c", &limits(Cleanup::Compact)).unwrap();
    b.create_topic("cd", &limits(Cleanup::CompactAndDelete)).unwrap();
    for i in 0..2000u32 {
        // Distinct keys: nothing is superseded, so only retention can trim.
        let key = i.to_le_bytes();
        b.publish("c", &Record::new(&[7; 32]).with_key(&key)).unwrap();
        b.publish("cd", &Record::new(&[7; 32]).with_key(&key)).unwrap();
    }
    assert_eq!(b.topic_stats("c").unwrap().partitions[0].first_offset, 0, "Compact trims nothing by size");
    assert!(b.topic_stats("cd").unwrap().partitions[0].first_offset > 0, "CompactAndDelete applies the size limit");
}

#[test]
fn readers_during_compaction_never_see_a_torn_record() {
    const RECORDS: u64 = 20_000;
    const KEYS: u64 = 61;
    let log = small_log();
    let done = Arc::new(AtomicBool::new(false));
    // A record's payload is its sequence number, repeated to a length that
    // depends on it, and its key is derived from it: a torn or misplaced
    // record fails the check.
    let check = |offset: u64, key: &[u8], payload: &[u8]| {
        let seq = u64::from_le_bytes(payload[..8].try_into().unwrap());
        assert_eq!(seq, offset, "a record is under its original offset");
        assert_eq!(key, format!("k{}", seq % KEYS).as_bytes());
        assert_eq!(payload.len(), 8 * (1 + (seq % 7) as usize));
        assert!(payload.chunks(8).all(|c| c == &payload[..8]), "record {offset} is whole");
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            for seq in 0..RECORDS {
                let payload: Vec<u8> = seq.to_le_bytes().repeat(1 + (seq % 7) as usize);
                let key = format!("k{}", seq % KEYS);
                assert_eq!(log.append(&Record::new(&payload).with_key(key.as_bytes())).unwrap(), seq);
            }
            done.store(true, Ordering::Release);
        });
        s.spawn(|| {
            while !done.load(Ordering::Acquire) {
                log.compact(&KEEP_TOMBSTONES, rill::clock::now_ns()).unwrap();
            }
        });
        for _ in 0..2 {
            s.spawn(|| {
                let mut passes = 0;
                while !done.load(Ordering::Acquire) || passes < 2 {
                    passes += 1;
                    // One slow reader that stays inside segments being
                    // replaced, record by record, and one that reads batches.
                    let mut cursor = log.cursor_from_first();
                    let mut last = None;
                    loop {
                        let batch = cursor.read_batch(if passes % 2 == 0 { 1 } else { 64 }).unwrap();
                        if batch.is_empty() {
                            break;
                        }
                        for r in batch.iter() {
                            assert!(last.is_none_or(|l| r.offset() > l), "offset order");
                            last = Some(r.offset());
                            check(r.offset(), r.key().unwrap(), r.payload());
                        }
                    }
                }
            });
        }
    });
    log.compact(&KEEP_TOMBSTONES, rill::clock::now_ns()).unwrap();
    assert!(log.stats().compacted_records > RECORDS / 2, "{:?}", log.stats());
    for (offset, key, payload) in read_all(&log) {
        check(offset, &key, &payload);
    }
}

/// One write of the model test: a key (of a few) and a value, or a tombstone.
#[derive(Debug, Clone)]
enum Op {
    Put(u8, u16),
    Delete(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![4 => (0u8..12, any::<u16>()).prop_map(|(k, v)| Op::Put(k, v)), 1 => (0u8..12).prop_map(Op::Delete)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Against a `BTreeMap` model: after a pass, a reader from the beginning
    /// that applies what it reads (tombstones as deletes) ends with the
    /// model's map; what it reads is in offset order, each record as
    /// published; a superseded record is read only in the uncompacted tail
    /// (the segment being written), and that tail is read whole.
    #[test]
    fn a_compacted_log_reads_as_the_model(ops in proptest::collection::vec(op(), 1..1500), big in 0usize..200) {
        let log = small_log();
        let mut model = BTreeMap::new();
        let mut published = Vec::new();
        for o in &ops {
            let (key, value) = match *o {
                Op::Put(k, v) => (vec![k], format!("{v:0width$}", width = big % 64).into_bytes()),
                Op::Delete(k) => (vec![k], Vec::new()),
            };
            if value.is_empty() { model.remove(&key); } else { model.insert(key.clone(), value.clone()); }
            let offset = log.append(&Record::new(&value).with_key(&key)).unwrap();
            prop_assert_eq!(offset, published.len() as u64);
            published.push((key, value));
        }
        log.compact(&KEEP_TOMBSTONES, rill::clock::now_ns()).unwrap();
        let read = read_all(&log);
        let mut seen = BTreeMap::new();
        for (i, (offset, key, value)) in read.iter().enumerate() {
            prop_assert!(i == 0 || *offset > read[i - 1].0);
            prop_assert_eq!(&published[*offset as usize], &(key.clone(), value.clone()));
            if value.is_empty() { seen.remove(key); } else { seen.insert(key.clone(), value.clone()); }
        }
        prop_assert_eq!(seen, model);
        // Some base `b` of the segment being written splits the log: below
        // it exactly the newest record of each key (among those below it),
        // from it on everything.
        let read_offsets: Vec<u64> = read.iter().map(|r| r.0).collect();
        let n = published.len() as u64;
        let mut suffix = n;
        while suffix > 0 && read_offsets.binary_search(&(suffix - 1)).is_ok() {
            suffix -= 1;
        }
        let split = (suffix..=n).any(|b| {
            let mut newest: HashMap<&[u8], u64> = HashMap::new();
            for (offset, (k, _)) in published[..b as usize].iter().enumerate() {
                newest.insert(k, offset as u64);
            }
            let mut want: Vec<u64> = newest.into_values().collect();
            want.sort_unstable();
            want.extend(b..n);
            want == read_offsets
        });
        prop_assert!(split, "no segment base splits {:?}", read_offsets);
        let stats = log.stats();
        prop_assert_eq!(stats.compacted_records as usize + read.len(), published.len());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Passes at random points (most skipped by the dirty share, some
    /// incremental over a clean prefix) never remove the newest record of
    /// a key, never move one, and count every record removed.
    #[test]
    fn passes_between_writes_remove_only_superseded_records(
        ops in proptest::collection::vec((op(), 0u8..40), 1..1500),
        big in 0usize..200,
    ) {
        let log = small_log();
        let mut published: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut newest: HashMap<Vec<u8>, u64> = HashMap::new();
        for (o, dice) in &ops {
            let (key, value) = match *o {
                Op::Put(k, v) => (vec![k], format!("{v:0width$}", width = big % 64).into_bytes()),
                Op::Delete(k) => (vec![k], Vec::new()),
            };
            let offset = log.append(&Record::new(&value).with_key(&key)).unwrap();
            newest.insert(key.clone(), offset);
            published.push((key, value));
            if *dice == 0 {
                log.compact(&KEEP_TOMBSTONES, rill::clock::now_ns()).unwrap();
            }
        }
        log.compact(&KEEP_TOMBSTONES, rill::clock::now_ns()).unwrap();
        let read = read_all(&log);
        for (i, (offset, key, value)) in read.iter().enumerate() {
            prop_assert!(i == 0 || *offset > read[i - 1].0);
            prop_assert_eq!(&published[*offset as usize], &(key.clone(), value.clone()));
        }
        let read_offsets: std::collections::HashSet<u64> = read.iter().map(|r| r.0).collect();
        for (key, offset) in &newest {
            prop_assert!(read_offsets.contains(offset), "the newest record of {:?} (offset {}) was removed", key, offset);
        }
        prop_assert_eq!(log.stats().compacted_records as usize + read.len(), published.len());
    }
}
