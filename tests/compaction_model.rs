//! Issue 41's model test of compacted topics: for a random sequence of
//! keyed writes and tombstones published to a memory topic, a reader from
//! the beginning after the broker's compactor has passed sees exactly the
//! last record of each key (a tombstone only while tombstones are kept), in
//! offset order, checked against a `BTreeMap` model.
//!
//! `tests/compaction.rs` holds the same kind of property for one log and a
//! pass run by hand (`Log::compact`); this one goes through the broker: key
//! routing over partitions, the compactor's own thread and policy
//! (`delete_retention_ms`), and a consumer's polls across the gaps.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use rill::log::{MIN_SEGMENT_BYTES, Record};
use rill::{Broker, Cleanup, ConsumerOptions, TopicOptions};

mod common;
use common::{broker, wait_for};

/// Keys of the model (filler keys are outside this range: see `seal`).
const KEYS: u8 = 10;
/// Filler payload: with its key and header, well over 32 bytes, so that
/// `MIN_SEGMENT_BYTES / 32` filler records overflow any segment.
const FILLER: &[u8] = &[0xf1; 16];

/// One write: a key's value, or its tombstone (an empty payload).
#[derive(Debug, Clone)]
enum Op {
    Put(u8, u16),
    Delete(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![3 => (0..KEYS, any::<u16>()).prop_map(|(k, v)| Op::Put(k, v)), 1 => (0..KEYS).prop_map(Op::Delete)]
}

/// A model key's bytes; filler keys start with `~` and never collide.
fn key(k: u8) -> Vec<u8> {
    vec![b'k', k]
}

/// Publishes filler records, each with a key of its own (so compaction
/// removes none of them), until every partition has received more than a
/// segment's worth after the model's writes: every model record is then in
/// a sealed segment, which the compactor reads.
fn seal(b: &Broker, topic: &str, partitions: u32) {
    let per_partition = MIN_SEGMENT_BYTES / 32 + 1;
    let mut received = vec![0usize; partitions as usize];
    let mut n = 0u64;
    while received.iter().any(|&r| r < per_partition) {
        let key = format!("~{n}");
        n += 1;
        let pos = b.publish(topic, &Record::new(FILLER).with_key(key.as_bytes())).unwrap();
        received[pos.partition as usize] += 1;
    }
}

/// One partition's messages: (offset, key, payload), in the order read.
type Partition = Vec<(u64, Vec<u8>, Vec<u8>)>;

/// Every model-keyed message a new consumer reads from the beginning, per
/// partition.
fn read_model_keys(b: &Broker, topic: &str, partitions: u32) -> Vec<Partition> {
    let mut consumer = b.consumer("model-reader", topic, ConsumerOptions::default()).unwrap();
    let mut out = vec![Vec::new(); partitions as usize];
    loop {
        let batch = consumer.poll(1000, Duration::from_millis(20)).unwrap();
        if batch.is_empty() {
            return out;
        }
        for m in batch.iter() {
            let key = m.key().expect("a compacted topic holds keyed messages only");
            if key.first() == Some(&b'k') {
                out[m.partition() as usize].push((m.offset(), key.to_vec(), m.payload().to_vec()));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, max_shrink_iters: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_reader_after_compaction_sees_the_last_record_of_each_key(
        ops in proptest::collection::vec(op(), 1..400),
        partitions in 1u32..=3,
        keep_tombstones in any::<bool>(),
        width in 0usize..48,
    ) {
        let b = broker();
        let options = TopicOptions {
            partitions,
            cleanup: Cleanup::Compact,
            segment_bytes: Some(MIN_SEGMENT_BYTES),
            // 0: a tombstone that is the newest of its key goes in the pass
            // that finds it; a day: every such tombstone is still there.
            delete_retention_ms: if keep_tombstones { 24 * 3_600_000 } else { 0 },
            min_compaction_lag_ms: 0,
            ..TopicOptions::default()
        };
        b.create_topic("t", &options).unwrap();
        // The model: each key's last write, and where it landed.
        let mut last: BTreeMap<Vec<u8>, (u32, u64, Vec<u8>)> = BTreeMap::new();
        for o in &ops {
            let (k, value) = match *o {
                Op::Put(k, v) => (key(k), format!("{v:0width$}").into_bytes()),
                Op::Delete(k) => (key(k), Vec::new()),
            };
            let pos = b.publish("t", &Record::new(&value).with_key(&k)).unwrap();
            last.insert(k, (pos.partition, pos.offset, value));
        }
        let mut want = vec![BTreeMap::new(); partitions as usize];
        for (k, (partition, offset, value)) in &last {
            if keep_tombstones || !value.is_empty() {
                want[*partition as usize].insert(*offset, (k.clone(), value.clone()));
            }
        }
        let want: Vec<Partition> =
            want.into_iter().map(|p| p.into_iter().map(|(o, (k, v))| (o, k, v)).collect()).collect();
        // Every model record is removed but the ones `want` keeps; filler
        // records all have keys of their own, so the topic's count of
        // removed messages reaches exactly this once the compactor has
        // passed over everything sealed.
        let removed = (ops.len() - want.iter().map(Vec::len).sum::<usize>()) as u64;
        seal(&b, "t", partitions);
        wait_for("the compactor to pass over every sealed segment", || {
            b.topic_stats("t").unwrap().compacted_messages >= removed
        });
        prop_assert_eq!(b.topic_stats("t").unwrap().compacted_messages, removed, "nothing more is removed");
        let read = read_model_keys(&b, "t", partitions);
        prop_assert_eq!(read, want);
        b.close();
    }
}
