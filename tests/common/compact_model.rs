//! The model of a compacted topic that `tests/compaction_model.rs` (memory
//! topics) and `tests/compaction_durable.rs` (topics on a data directory)
//! check a broker against: random keyed writes and tombstones, the last
//! record of each key they leave, filler that seals every model record, and
//! a reader from the beginning.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use rill::log::{MIN_SEGMENT_BYTES, Record};
use rill::{Broker, ConsumerOptions};

/// One write: a key's value, or its tombstone (an empty payload).
#[derive(Debug, Clone)]
pub enum Op {
    Put(u8, u16),
    Delete(u8),
}

/// Writes to keys `0..keys`, `puts` of them a value for each tombstone.
pub fn op(keys: u8, puts: u32) -> impl Strategy<Value = Op> {
    prop_oneof![puts => (0..keys, any::<u16>()).prop_map(|(k, v)| Op::Put(k, v)), 1 => (0..keys).prop_map(Op::Delete)]
}

/// A model key's bytes; filler keys start with `~` and never collide.
pub fn key(k: u8) -> Vec<u8> {
    vec![b'k', k]
}

/// One partition's model-keyed messages: (offset, key, payload), in offset
/// order.
pub type Partition = Vec<(u64, Vec<u8>, Vec<u8>)>;

/// What publishing the model's writes leaves to read after compaction.
pub struct Expected {
    /// Per partition, the last record of each key (a tombstone only if
    /// tombstones are kept).
    pub partitions: Vec<Partition>,
    /// How many of the model's records compaction removes: all but those.
    pub removed: u64,
}

/// Publishes `ops` to `topic` (a value `v` as `v` zero-padded to `width`
/// digits) and returns what a reader should see once the compactor has
/// passed over all of them.
pub fn publish(b: &Broker, topic: &str, ops: &[Op], partitions: u32, width: usize, keep_tombstones: bool) -> Expected {
    // The model: each key's last write, and where it landed.
    let mut last: BTreeMap<Vec<u8>, (u32, u64, Vec<u8>)> = BTreeMap::new();
    for o in ops {
        let (k, value) = match *o {
            Op::Put(k, v) => (key(k), format!("{v:0width$}").into_bytes()),
            Op::Delete(k) => (key(k), Vec::new()),
        };
        let pos = b.publish(topic, &Record::new(&value).with_key(&k)).unwrap();
        last.insert(k, (pos.partition, pos.offset, value));
    }
    let mut want = vec![BTreeMap::new(); partitions as usize];
    for (k, (partition, offset, value)) in &last {
        if keep_tombstones || !value.is_empty() {
            want[*partition as usize].insert(*offset, (k.clone(), value.clone()));
        }
    }
    let partitions: Vec<Partition> =
        want.into_iter().map(|p| p.into_iter().map(|(o, (k, v))| (o, k, v)).collect()).collect();
    // Filler records (see `seal`) all have keys of their own, so the topic's
    // count of removed messages reaches exactly this once the compactor has
    // passed over everything sealed.
    let removed = (ops.len() - partitions.iter().map(Vec::len).sum::<usize>()) as u64;
    Expected { partitions, removed }
}

/// Publishes filler records, each with a key of its own (so compaction
/// removes none of them), until every partition has received more than a
/// segment's worth after the model's writes: every model record is then in
/// a sealed segment, which the compactor reads. A filler record, its key
/// and header are well over 32 bytes, so `MIN_SEGMENT_BYTES / 32` of them
/// overflow any segment.
pub fn seal(b: &Broker, topic: &str, partitions: u32) {
    let per_partition = MIN_SEGMENT_BYTES / 32 + 1;
    let mut received = vec![0usize; partitions as usize];
    let mut n = 0u64;
    while received.iter().any(|&r| r < per_partition) {
        let key = format!("~{n}");
        n += 1;
        let pos = b.publish(topic, &Record::new(&[0xf1; 16]).with_key(key.as_bytes())).unwrap();
        received[pos.partition as usize] += 1;
    }
}

/// Every model-keyed message (keys starting with `k`) a new consumer in
/// `group` reads from the beginning of `topic`, per partition.
pub fn read_model_keys(b: &Broker, group: &str, topic: &str, partitions: u32) -> Vec<Partition> {
    let mut consumer = b.consumer(group, topic, ConsumerOptions::default()).unwrap();
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
