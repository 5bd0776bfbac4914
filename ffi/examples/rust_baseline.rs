//! The Rust side of `ffi/bench/run.sh`: the same publish -> one push
//! subscriber work as `ffi/bench/bench_ffi.c`, through the Rust API.
//! Prints "<mode> <msgs/s>" per mode.

use std::time::{Duration, Instant};

use rill::{Ack, Broker, BrokerConfig, Message, Record, SubscriptionOptions, TopicOptions};

fn run(mode: &str, n: u64) {
    let broker = Broker::new(BrokerConfig::default()).expect("broker");
    let options = TopicOptions { retention_bytes: Some(64 << 20), ..TopicOptions::default() };
    broker.create_topic("bench", &options).expect("topic");
    let mut sum = 0u64;
    let sub = broker
        .subscribe("bench", SubscriptionOptions::default(), move |m: &Message<'_>| {
            sum = sum.wrapping_add(m.payload().iter().map(|&b| b as u64).sum::<u64>());
            std::hint::black_box(sum);
            Ack::Success
        })
        .expect("subscribe");
    let publisher = broker.publisher("bench").expect("publisher");
    let payload = [0x5au8; 64];
    let batch = vec![Record::new(&payload); 64];
    let start = Instant::now();
    match mode {
        "publish" => (0..n).for_each(|_| {
            std::hint::black_box(broker.publish("bench", &Record::new(&payload)).expect("publish"));
        }),
        "publisher" => (0..n).for_each(|_| {
            std::hint::black_box(publisher.publish(&Record::new(&payload)).expect("publish"));
        }),
        _ => (0..n.div_ceil(64)).for_each(|_| {
            std::hint::black_box(publisher.publish_batch(&batch).expect("batch"));
        }),
    }
    assert!(sub.wait_idle(Duration::from_secs(60)).expect("wait"));
    println!("{mode} {:.0}", n as f64 / start.elapsed().as_secs_f64());
}

fn main() {
    let n = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(2_000_000);
    for mode in ["publish", "publisher", "batch64"] {
        run(mode, n);
    }
}
