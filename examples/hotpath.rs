//! A driver for counting instructions on the hot path with callgrind:
//! `cargo build --release --example hotpath`, then
//!
//! ```text
//! valgrind --tool=callgrind target/release/examples/hotpath SCENARIO N
//! ```
//!
//! Callgrind runs one thread at a time, so the counts are deterministic
//! enough to compare builds; run two message counts and take the
//! difference over the difference in messages to drop the setup. The
//! scenarios (all 64-byte payloads, published through a `Publisher`):
//!
//! * `log`: a bare `Log`, one thread appends N records, then a cursor reads
//!   them (the featureless baseline);
//! * `log-never`: the same on a durable `Log` (segment files in a fresh
//!   temporary directory, `Fsync::Never`): the difference to `log` is what a
//!   record's frame and file storage cost;
//! * `none`: publish with no subscriber;
//! * `one`, `one-dedicated`: 1 -> 1 push subscriber on the pool / a thread;
//! * `idle-8`: 8 subscribers on the pool, each caught up before every
//!   publish (the publisher wakes all eight each time);
//! * `fan-8`: 1 -> 8 subscribers on the pool, published back to back.
//!
//! It checks the counts it was promised, so a broken build cannot pass
//! for a fast one.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rill::log::{DurableLog, Fsync, Log, LogConfig};
use rill::{Ack, Broker, BrokerConfig, Message, Record, Subscription, SubscriptionOptions, TopicOptions};

const WAIT: Duration = Duration::from_secs(600);

fn subscribe(broker: &Broker, dedicated: bool, seen: &Arc<AtomicU64>) -> Subscription {
    let seen = seen.clone();
    let options = SubscriptionOptions { dedicated_thread: dedicated, ..Default::default() };
    broker
        .subscribe("t", options, move |m: &Message<'_>| {
            black_box(m.payload());
            // Relaxed: a total read after wait_idle, which orders it.
            seen.fetch_add(1, Ordering::Relaxed);
            Ack::Success
        })
        .expect("subscribe")
}

fn main() {
    let mut args = std::env::args().skip(1);
    let scenario = args.next().unwrap_or_else(|| "none".into());
    let n: u64 = args.next().map_or(100_000, |s| s.parse().expect("a message count"));
    let payload = [7u8; 64];
    rill::clock::warm_up();

    if scenario == "log" || scenario == "log-never" {
        let dir = std::env::temp_dir().join(format!("rill-hotpath-{}", std::process::id()));
        let log = if scenario == "log" {
            Log::new(&LogConfig::default()).expect("log")
        } else {
            // No retention: the cursor below reads every record back.
            let config = LogConfig { retention_bytes: None, ..LogConfig::default() };
            let durable = DurableLog { fsync: Fsync::Never, ..DurableLog::new(&dir) };
            Log::open(&config, 0, &durable).expect("durable log").0
        };
        for _ in 0..n {
            black_box(log.append(&Record::new(&payload)).expect("append"));
        }
        let mut cursor = log.cursor_from_first();
        let mut got = 0u64;
        while let Some(r) = cursor.read().expect("read") {
            black_box(r.payload());
            got += 1;
        }
        assert_eq!(got, n);
        drop(log);
        if scenario == "log-never" {
            std::fs::remove_dir_all(&dir).expect("remove the scratch directory");
        }
        return;
    }

    let broker = Broker::new(BrokerConfig { worker_threads: Some(2), ..Default::default() }).expect("broker");
    broker.create_topic("t", &TopicOptions::default()).expect("topic");
    let seen = Arc::new(AtomicU64::new(0));
    let (subs, dedicated) = match scenario.as_str() {
        "none" => (0, false),
        "one" => (1, false),
        "one-dedicated" => (1, true),
        "idle-8" | "fan-8" => (8, false),
        other => panic!("unknown scenario {other}"),
    };
    let subs: Vec<Subscription> = (0..subs).map(|_| subscribe(&broker, dedicated, &seen)).collect();
    let refs: Vec<&Subscription> = subs.iter().collect();
    let publisher = broker.publisher("t").expect("publisher");
    for _ in 0..n {
        black_box(publisher.publish(&Record::new(&payload)).expect("publish"));
        if scenario == "idle-8" {
            assert!(rill::broker::wait_all_idle(&refs, WAIT).expect("wait"));
        }
    }
    assert!(rill::broker::wait_all_idle(&refs, WAIT).expect("wait"));
    assert_eq!(seen.load(Ordering::Relaxed), n * subs.len() as u64);
}
