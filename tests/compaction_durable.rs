//! Compaction on a data directory (issue 41): a durable log's passes
//! rebuild segment files (`src/log/file/rebuild.rs`), and what a reader
//! sees after a pass is what it sees after the log is opened again; the
//! model test of `tests/compaction.rs` run against a durable log and
//! reopened; readers during passes on files; a broker's durable compacted
//! topic across a restart. The kill -9 loop is `tests/compaction_crash.rs`;
//! compaction on a directory shared by processes is
//! `tests/processes_compact.rs`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use rill::log::{CompactionPolicy, DurableLog, Fsync, Log, LogConfig, MIN_SEGMENT_BYTES, Record};
use rill::{Broker, BrokerConfig, Cleanup, ConsumerOptions, Error, Sharing, TopicOptions};

mod common;
use common::compact_model::{self, Op, op};
use common::wait_for;

/// Removes every superseded record, keeps tombstones.
const KEEP_TOMBSTONES: CompactionPolicy = CompactionPolicy { min_lag_ns: 0, tombstone_ns: u64::MAX, id_lag_ns: 0 };

/// A fresh, empty directory for one test (or one proptest case).
fn fresh_dir(name: &str) -> PathBuf {
    static CASE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = CASE.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("rill-compaction-durable-{}-{name}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn config() -> LogConfig {
    LogConfig { segment_bytes: Some(MIN_SEGMENT_BYTES), retention_bytes: None, ..LogConfig::default() }
}

fn open(dir: &Path, fsync: Fsync) -> Log {
    let (log, report) = Log::open(&config(), 0, &DurableLog { fsync, ..DurableLog::new(dir) }).unwrap();
    assert_eq!(report.truncated_at, None, "a clean close or a pass leaves nothing to cut");
    log
}

fn read_all(log: &Log) -> Vec<(u64, Vec<u8>, Vec<u8>)> {
    let mut cursor = log.cursor_from_first();
    let mut out = Vec::new();
    while let Some(r) = cursor.read().expect("nothing is trimmed") {
        out.push((r.offset(), r.key().expect("keyed").to_vec(), r.payload().to_vec()));
    }
    out
}

/// Names in `dir` that are neither segment files nor the lock.
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| !n.ends_with(".seg"))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, max_shrink_iters: 64, ..ProptestConfig::default() })]

    /// As `a_compacted_log_reads_as_the_model` in `tests/compaction.rs`, on
    /// segment files, with passes at random points: a reader that applies
    /// what it reads ends with the model's map, every record as published
    /// under its offset, no newest record removed; and the log opened again
    /// (recovery reading the rebuilt files) reads exactly the same.
    #[test]
    fn a_compacted_durable_log_reads_as_the_model_and_the_same_once_reopened(
        ops in proptest::collection::vec((op(12, 4), 0u8..60), 1..1200),
        big in 0usize..200,
        never in any::<bool>(),
    ) {
        let dir = fresh_dir("model");
        let fsync = if never { Fsync::Never } else { Fsync::Interval(Duration::from_millis(50)) };
        let log = open(&dir, fsync);
        let mut model = BTreeMap::new();
        let mut published = Vec::new();
        let mut newest: HashMap<Vec<u8>, u64> = HashMap::new();
        for (o, dice) in &ops {
            let (key, value) = match *o {
                Op::Put(k, v) => (vec![k], format!("{v:0width$}", width = big % 64).into_bytes()),
                Op::Delete(k) => (vec![k], Vec::new()),
            };
            if value.is_empty() { model.remove(&key); } else { model.insert(key.clone(), value.clone()); }
            let offset = log.append(&Record::new(&value).with_key(&key)).unwrap();
            prop_assert_eq!(offset, published.len() as u64);
            newest.insert(key.clone(), offset);
            published.push((key, value));
            if *dice == 0 {
                log.compact(&KEEP_TOMBSTONES, rill::clock::now_ns()).unwrap();
            }
        }
        log.compact(&KEEP_TOMBSTONES, rill::clock::now_ns()).unwrap();
        let read = read_all(&log);
        let mut seen = BTreeMap::new();
        for (i, (offset, key, value)) in read.iter().enumerate() {
            prop_assert!(i == 0 || *offset > read[i - 1].0);
            prop_assert_eq!(&published[*offset as usize], &(key.clone(), value.clone()));
            if value.is_empty() { seen.remove(key); } else { seen.insert(key.clone(), value.clone()); }
        }
        prop_assert_eq!(&seen, &model);
        let offsets: std::collections::HashSet<u64> = read.iter().map(|r| r.0).collect();
        for (key, offset) in &newest {
            prop_assert!(offsets.contains(offset), "the newest record of {:?} (offset {}) was removed", key, offset);
        }
        let stats = log.stats();
        prop_assert_eq!(stats.compacted_records as usize + read.len(), published.len());
        drop(log);
        prop_assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
        let log = open(&dir, fsync);
        prop_assert_eq!(read_all(&log), read);
        prop_assert_eq!(log.end_offset(), published.len() as u64);
        // Compacting again after the reopen (the whole log is dirty once
        // more: the clean boundary is recomputed) removes nothing new but
        // what the reopened log's sealed tail segment adds.
        log.compact(&KEEP_TOMBSTONES, rill::clock::now_ns()).unwrap();
        let again = read_all(&log);
        let mut seen = BTreeMap::new();
        for (_, key, value) in &again {
            if value.is_empty() { seen.remove(key); } else { seen.insert(key.clone(), value.clone()); }
        }
        prop_assert_eq!(seen, model);
        drop(log);
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// Readers inside segments a pass replaces (one record by record, one in
/// batches) read every record whole, under its offset, in offset order,
/// while a publisher rolls segment files and passes run back to back.
#[test]
fn readers_during_durable_compaction_never_see_a_torn_record() {
    const RECORDS: u64 = 6_000;
    const KEYS: u64 = 61;
    let dir = fresh_dir("readers");
    let log = open(&dir, Fsync::Never);
    let done = AtomicBool::new(false);
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
        for slow in [true, false] {
            let (log, done) = (&log, &done);
            s.spawn(move || {
                let mut passes = 0;
                while !done.load(Ordering::Acquire) || passes < 2 {
                    passes += 1;
                    let mut cursor = log.cursor_from_first();
                    let mut last = None;
                    loop {
                        let batch = cursor.read_batch(if slow { 1 } else { 64 }).unwrap();
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
    let stats = log.stats();
    assert!(stats.compacted_records > RECORDS / 2 && stats.compaction_passes > 0, "{stats:?}");
    let before = read_all(&log);
    for (offset, key, payload) in &before {
        check(*offset, key, payload);
    }
    drop(log);
    let log = open(&dir, Fsync::Never);
    assert_eq!(read_all(&log), before, "the rebuilt files read back as they were read");
    drop(log);
    std::fs::remove_dir_all(&dir).ok();
}

/// A temporary file a crash left in the middle of a pass (step 1 of "The
/// durable swap") is no part of the partition: recovery deletes it and
/// reads the segment it was to replace.
#[test]
fn a_rebuilt_file_left_under_its_temporary_name_is_deleted_by_recovery() {
    let dir = fresh_dir("temp");
    let log = open(&dir, Fsync::Never);
    for i in 0..400u32 {
        log.append(&Record::new(&i.to_le_bytes()).with_key(&[(i % 3) as u8])).unwrap();
    }
    let before = read_all(&log);
    drop(log);
    let temp = dir.join(format!("{:020}.4242-7.tmp", 0));
    std::fs::write(&temp, vec![0x5a; 5000]).unwrap();
    let log = open(&dir, Fsync::Never);
    assert!(!temp.exists());
    assert_eq!(read_all(&log), before);
    drop(log);
    std::fs::remove_dir_all(&dir).ok();
}

fn durable_broker(dir: &Path, sharing: Sharing) -> Broker {
    Broker::new(BrokerConfig {
        data_dir: Some(dir.to_path_buf()),
        sharing,
        fsync: Fsync::Never,
        ..BrokerConfig::default()
    })
    .unwrap()
}

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

/// A broker's durable compacted topic: keyless publishes refused, the
/// compactor passes over its files, the stats count it, and after a
/// restart the topic holds the newest value of each key, refuses keyless
/// publishes still, and its compactor runs again.
#[test]
fn a_durable_compacted_topic_keeps_the_newest_value_of_each_key_across_a_restart() {
    let dir = fresh_dir("broker");
    let options = TopicOptions {
        cleanup: Cleanup::Compact,
        segment_bytes: Some(MIN_SEGMENT_BYTES),
        delete_retention_ms: 0,
        ..TopicOptions::default()
    };
    let b = durable_broker(&dir, Sharing::Exclusive);
    b.create_topic("prices", &options).unwrap();
    assert!(matches!(b.publish("prices", &Record::new(b"no key")), Err(Error::InvalidArgument(_))));
    let mut newest = BTreeMap::new();
    for i in 0..3000u32 {
        let key = format!("k{}", i % 40);
        let value = format!("v{i}");
        b.publish("prices", &Record::new(value.as_bytes()).with_key(key.as_bytes())).unwrap();
        newest.insert(key.into_bytes(), value.into_bytes());
    }
    wait_for("the compactor to pass over the files", || b.topic_stats("prices").unwrap().compacted_messages > 2000);
    let stats = b.topic_stats("prices").unwrap();
    assert!(stats.compacted_bytes > 0 && stats.compaction_passes > 0 && stats.compaction_keys > 0, "{stats:?}");
    b.close();

    let b = durable_broker(&dir, Sharing::Exclusive);
    assert!(matches!(b.publish("prices", &Record::new(b"no key")), Err(Error::InvalidArgument(_))));
    let read = consume_all(&b, "after-restart", "prices");
    assert!(read.windows(2).all(|w| w[0].0 < w[1].0), "offset order");
    let mut seen = BTreeMap::new();
    for (_, key, value) in &read {
        seen.insert(key.clone(), value.clone());
    }
    assert_eq!(seen, newest);
    assert!(read.len() < 1000, "{} messages: compaction's removals survived the restart", read.len());
    // The compactor runs for the reopened topic: a key rewritten past a
    // segment's worth loses its old values again.
    for i in 0..3000u32 {
        b.publish("prices", &Record::new(format!("w{i}").as_bytes()).with_key(b"hot")).unwrap();
    }
    wait_for("the compactor to pass after the restart", || b.topic_stats("prices").unwrap().compacted_messages > 2000);
    b.close();
    std::fs::remove_dir_all(&dir).ok();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, max_shrink_iters: 32, ..ProptestConfig::default() })]

    /// `tests/compaction_model.rs`'s model test on a durable topic: after
    /// the broker's compactor has passed, a reader from the beginning sees
    /// exactly the last record of each key (tombstones kept), in offset
    /// order; and a broker opened again on the directory reads the same.
    #[test]
    fn a_durable_compacted_topic_reads_as_the_model_before_and_after_a_restart(
        ops in proptest::collection::vec(op(12, 4), 1..300),
        partitions in 1u32..=2,
    ) {
        let dir = fresh_dir("broker-model");
        let options = TopicOptions {
            partitions,
            cleanup: Cleanup::Compact,
            segment_bytes: Some(MIN_SEGMENT_BYTES),
            delete_retention_ms: 24 * 3_600_000,
            ..TopicOptions::default()
        };
        let b = durable_broker(&dir, Sharing::Exclusive);
        b.create_topic("t", &options).unwrap();
        let want = compact_model::publish(&b, "t", &ops, partitions, 0, true);
        compact_model::seal(&b, "t", partitions);
        wait_for("the compactor to pass over every sealed segment", || {
            b.topic_stats("t").unwrap().compacted_messages >= want.removed
        });
        prop_assert_eq!(b.topic_stats("t").unwrap().compacted_messages, want.removed);
        prop_assert_eq!(&compact_model::read_model_keys(&b, "before", "t", partitions), &want.partitions);
        b.close();
        let b = durable_broker(&dir, Sharing::Exclusive);
        prop_assert_eq!(&compact_model::read_model_keys(&b, "after", "t", partitions), &want.partitions);
        b.close();
        drop(b);
        std::fs::remove_dir_all(&dir).ok();
    }
}
