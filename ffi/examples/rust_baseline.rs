//! The Rust side of `ffi/bench/run.sh`: the same work as
//! `ffi/bench/bench_ffi.c`, through the Rust API. Prints "<mode> <msgs/s>".
//!
//! usage: rust_baseline [messages] [mode]; the modes are bench_ffi.c's
//! (`publish`, `publisher`, `batch64`, each also with `/nosub`), all of them
//! in turn if none is given.

use std::time::{Duration, Instant};

use rill::{Ack, Broker, BrokerConfig, Message, Record, SubscriptionOptions, TopicOptions};

const MODES: [&str; 6] = ["publish", "publisher", "batch64", "publish/nosub", "publisher/nosub", "batch64/nosub"];

fn run(mode: &str, n: u64) {
    let (kind, with_sub) = match mode.split_once('/') {
        None => (mode, true),
        Some((kind, "nosub")) => (kind, false),
        Some(_) => panic!("unknown mode {mode}"),
    };
    assert!(["publish", "publisher", "batch64"].contains(&kind), "unknown mode {mode}");
    let broker = Broker::new(BrokerConfig::default()).expect("broker");
    let options = TopicOptions { retention_bytes: Some(64 << 20), ..TopicOptions::default() };
    broker.create_topic("bench", &options).expect("topic");
    let mut sum = 0u64;
    let sub = with_sub.then(|| {
        broker
            .subscribe("bench", SubscriptionOptions::default(), move |m: &Message<'_>| {
                sum = sum.wrapping_add(m.payload().iter().map(|&b| b as u64).sum::<u64>());
                std::hint::black_box(sum);
                Ack::Success
            })
            .expect("subscribe")
    });
    let publisher = broker.publisher("bench").expect("publisher");
    let payload = [0x5au8; 64];
    let batch = vec![Record::new(&payload); 64];
    // The record, the batch and the topic name go through `black_box`: the C
    // library cannot see what a C program passes it, and a Rust program
    // publishing real data does not know it at compile time either. Without
    // it the compiler folds the record's constant parts (no key, 64 bytes,
    // no attributes) into the inlined publish and measures a program no one
    // writes (fewer instructions a publish than any real one; callgrind shows
    // it, see "Counting instructions" in docs/PERFORMANCE.md).
    let record = Record::new(&payload);
    let topic = "bench";
    // Two rounds, the first untimed, as in bench_ffi.c: the timed one reuses
    // the segments the first filled.
    let mut start = Instant::now();
    for round in 0..2 {
        if round == 1 {
            start = Instant::now();
        }
        match kind {
            "publish" => (0..n).for_each(|_| {
                let topic = std::hint::black_box(topic);
                std::hint::black_box(broker.publish(topic, std::hint::black_box(&record)).expect("publish"));
            }),
            "publisher" => (0..n).for_each(|_| {
                std::hint::black_box(publisher.publish(std::hint::black_box(&record)).expect("publish"));
            }),
            _ => (0..n.div_ceil(64)).for_each(|_| {
                std::hint::black_box(publisher.publish_batch(std::hint::black_box(&batch)).expect("batch"));
            }),
        }
        if let Some(sub) = &sub {
            assert!(sub.wait_idle(Duration::from_secs(60)).expect("wait"));
        }
    }
    println!("{mode} {:.0}", n as f64 / start.elapsed().as_secs_f64());
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n = args.next().and_then(|a| a.parse().ok()).unwrap_or(2_000_000);
    match args.next() {
        Some(mode) => run(&mode, n),
        None => MODES.iter().for_each(|mode| run(mode, n)),
    }
}
