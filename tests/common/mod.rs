//! Helpers every integration test file shares: one timeout, one way to wait
//! for a condition, and the few one-line set-ups the tests repeat; and, in
//! [`procs`], the scaffolding of the tests that run several processes;
//! in [`compact_model`], the model the compaction tests check a broker's
//! compacted topics against.
//!
//! Each test file is its own crate and uses a different subset, so unused
//! helpers are expected here.
#![allow(dead_code)]

pub mod compact_model;
pub mod procs;

use std::time::{Duration, Instant};

use rill::{Broker, BrokerConfig, Record, StartPosition, SubscriptionOptions, TopicOptions};

/// How long any test waits for something that should happen. Generous: a busy
/// 2-core CI machine, valgrind or one pinned core can be slow, and a healthy
/// run never gets near it; only a hang does.
pub const WAIT: Duration = Duration::from_secs(30);

/// A broker with the default configuration.
pub fn broker() -> Broker {
    Broker::new(BrokerConfig::default()).unwrap()
}

/// Creates `name` with `partitions` partitions.
pub fn topic(b: &Broker, name: &str, partitions: u32) {
    b.create_topic(name, &TopicOptions::with_partitions(partitions)).unwrap();
}

/// Publishes an unkeyed record.
pub fn publish(b: &Broker, topic: &str, payload: &[u8]) {
    b.publish(topic, &Record::new(payload)).unwrap();
}

/// Subscription options that start at the earliest retained message.
pub fn earliest() -> SubscriptionOptions {
    SubscriptionOptions { start: StartPosition::Earliest, ..Default::default() }
}

/// Polls `f` until it holds; fails the test, naming `what`, after [`WAIT`].
/// For conditions that have no event to wait on (a flag another thread sets).
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A small xorshift for the kill loops: the moments of the kills,
/// reproducible from the seed a test prints.
pub struct Rng(pub u64);

impl Rng {
    /// The next number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
