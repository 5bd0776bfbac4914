//! What a publish by name costs beyond a publish through a `Publisher`:
//! `Broker::publish("orders", ..)` and `Publisher::publish(..)` of the same
//! 64-byte record, each in a loop of its own, out of line, so that
//! callgrind gives each loop's instructions as one function's inclusive
//! cost:
//!
//! ```text
//! cargo build --release -p rill-bench --example by_name_cost
//! valgrind --tool=callgrind --callgrind-out-file=cg.out target/release/examples/by_name_cost
//! callgrind_annotate --inclusive=yes cg.out | grep -E 'by_name_cost::(by_name|by_publisher) \['
//! ```
//!
//! Divided by [`PUBLISHES`], the difference is the name's lookup: its hash
//! (`topic_map::NameHasher`), the map's probe and the guard that borrows
//! the topic. Instruction counts do not depend on the machine's load, which
//! is why this is a callgrind example and not a timed scenario.

use rill::{Broker, BrokerConfig, Publisher, Record, TopicOptions};

/// Publishes per loop.
const PUBLISHES: u64 = 1_000_000;

#[inline(never)]
fn by_name(broker: &Broker, record: &Record<'_>) {
    for _ in 0..PUBLISHES {
        broker.publish("orders", record).expect("a publish by name");
    }
}

#[inline(never)]
fn by_publisher(publisher: &Publisher, record: &Record<'_>) {
    for _ in 0..PUBLISHES {
        publisher.publish(record).expect("a publish");
    }
}

fn main() {
    let broker = Broker::new(BrokerConfig::default()).expect("a broker");
    // A retention the loops fill and roll past, so both run on a warm log.
    let options = TopicOptions { retention_bytes: Some(64 << 20), ..TopicOptions::default() };
    broker.create_topic("orders", &options).expect("a topic");
    let publisher = broker.publisher("orders").expect("a publisher");
    let payload = [7u8; 64];
    let record = Record::new(&payload);
    by_name(&broker, &record);
    by_publisher(&publisher, &record);
    println!("{PUBLISHES} publishes by name, then {PUBLISHES} through a Publisher");
}
