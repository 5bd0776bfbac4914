//! What a durable topic (`Fsync::Never`, on a data directory) costs a
//! publish and a delivery beyond an in-memory one, both past their first
//! fill: the same 64-byte records published in loops of their own, out of
//! line, first with no subscriber, then with one push subscriber that the
//! loop waits for at the end, so callgrind gives each loop's instructions
//! as one function's inclusive cost (the subscriber's, per thread, with
//! `--separate-threads=yes`):
//!
//! ```text
//! cargo build --release -p rill-bench --example durable_cost
//! valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file=cg.out \
//!     target/release/examples/durable_cost
//! callgrind_annotate --inclusive=yes cg.out-01 | grep -E 'durable_cost::'
//! ```
//!
//! Divided by [`PUBLISHES`], the difference between the `memory` and
//! `durable` functions is what the segment files cost per record (the
//! frame's checksum, the file's page writes). Instruction counts do not
//! depend on the machine's load, which is why this is a callgrind example
//! and not a timed scenario (`rill-bench --suite persist` times it).
//! The data directory goes under `RILL_BENCH_DATA_DIR`, else the system's
//! temp directory.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rill::{Ack, Broker, BrokerConfig, Fsync, Overflow, Publisher, Record, SubscriptionOptions, TopicOptions};

/// Publishes per loop.
const PUBLISHES: u64 = 200_000;
/// Retention of both topics: the warm-up fills past it.
const RETENTION: u64 = 16 << 20;

#[inline(never)]
fn memory_publish(publisher: &Publisher, record: &Record<'_>) {
    publish_loop(publisher, record, 1);
}

#[inline(never)]
fn durable_publish(publisher: &Publisher, record: &Record<'_>) {
    publish_loop(publisher, record, 2);
}

#[inline(never)]
fn memory_delivered(publisher: &Publisher, record: &Record<'_>, seen: &AtomicU64) {
    publish_loop(publisher, record, 3);
    wait_for(seen, PUBLISHES);
}

#[inline(never)]
fn durable_delivered(publisher: &Publisher, record: &Record<'_>, seen: &AtomicU64) {
    publish_loop(publisher, record, 4);
    wait_for(seen, PUBLISHES);
}

/// `tag` differs in each caller, so that the compiler cannot fold the
/// four loop functions into one (they would otherwise be identical, and
/// callgrind would give every loop's cost under one of their names).
#[inline(always)]
fn publish_loop(publisher: &Publisher, record: &Record<'_>, tag: u8) {
    std::hint::black_box(tag);
    for _ in 0..PUBLISHES {
        publisher.publish(record).expect("a publish");
    }
}

fn wait_for(seen: &AtomicU64, n: u64) {
    // Acquire: pairs with the handler's Release increment.
    while seen.load(Ordering::Acquire) < n {
        std::thread::yield_now();
    }
}

/// A broker with one topic, filled past its retention.
fn warm(config: BrokerConfig) -> (Broker, Publisher) {
    let broker = Broker::new(config).expect("a broker");
    let options = TopicOptions { retention_bytes: Some(RETENTION), ..TopicOptions::default() };
    broker.create_topic("t", &options).expect("a topic");
    let publisher = broker.publisher("t").expect("a publisher");
    let body = [1u8; 64];
    for _ in 0..(RETENTION * 3 / 2) / 64 {
        publisher.publish(&Record::new(&body)).expect("a warm-up publish");
    }
    (broker, publisher)
}

/// A subscription from the tail that counts what it is given.
fn counting(broker: &Broker) -> (rill::Subscription, Arc<AtomicU64>) {
    let seen = Arc::new(AtomicU64::new(0));
    let counter = seen.clone();
    // Block: the publisher waits for the subscriber rather than outrunning
    // it past retention (which callgrind's one-thread-at-a-time schedule
    // would otherwise make it do), so every record is delivered.
    let options = SubscriptionOptions {
        start: rill::StartPosition::Latest,
        overflow: Overflow::Block,
        lag_limit: Some(4096),
        ..SubscriptionOptions::default()
    };
    let sub = broker
        .subscribe("t", options, move |_| {
            // Release: pairs with the Acquire in `wait_for`.
            counter.fetch_add(1, Ordering::Release);
            Ack::Success
        })
        .expect("a subscription");
    (sub, seen)
}

fn main() {
    let payload = [7u8; 64];
    let record = Record::new(&payload);
    let root = std::env::var_os("RILL_BENCH_DATA_DIR").map_or_else(std::env::temp_dir, Into::into);
    let dir = root.join(format!("rill-durable-cost-{}", std::process::id()));

    let (memory, mp) = warm(BrokerConfig::default());
    let config = BrokerConfig { data_dir: Some(dir.clone()), fsync: Fsync::Never, ..BrokerConfig::default() };
    let (durable, dp) = warm(config);

    memory_publish(&mp, &record);
    durable_publish(&dp, &record);

    let (msub, mseen) = counting(&memory);
    memory_delivered(&mp, &record, &mseen);
    msub.close();
    let (dsub, dseen) = counting(&durable);
    durable_delivered(&dp, &record, &dseen);
    dsub.close();

    memory.close();
    durable.close();
    let _ = std::fs::remove_dir_all(&dir);
    println!("{PUBLISHES} publishes to each topic, without and with a subscriber");
}
