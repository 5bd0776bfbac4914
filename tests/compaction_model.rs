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

use proptest::prelude::*;
use rill::log::MIN_SEGMENT_BYTES;
use rill::{Cleanup, TopicOptions};

mod common;
use common::compact_model::{op, publish, read_model_keys, seal};
use common::{broker, wait_for};

/// Keys of the model (filler keys are outside this range: see `seal`).
const KEYS: u8 = 10;

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, max_shrink_iters: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_reader_after_compaction_sees_the_last_record_of_each_key(
        ops in proptest::collection::vec(op(KEYS, 3), 1..400),
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
        let want = publish(&b, "t", &ops, partitions, width, keep_tombstones);
        seal(&b, "t", partitions);
        wait_for("the compactor to pass over every sealed segment", || {
            b.topic_stats("t").unwrap().compacted_messages >= want.removed
        });
        prop_assert_eq!(b.topic_stats("t").unwrap().compacted_messages, want.removed, "nothing more is removed");
        let read = read_model_keys(&b, "model-reader", "t", partitions);
        prop_assert_eq!(read, want.partitions);
        b.close();
    }
}
