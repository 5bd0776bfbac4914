//! Where a delivery through a `**` subscription over many topics reads
//! memory that no recent delivery touched: the `scale` scenario's `**`
//! row (one message at a time to topic `(i * 7919) mod n`, each waited
//! for), as a loop callgrind can count with its cache simulation. Run it
//! at a few topic counts and compare the last-level misses per delivery
//! of the loop (the publisher's side, in the main thread) and of the pool
//! worker that delivers (its own thread's file):
//!
//! ```text
//! cargo build --release -p rill-bench --example wildcard_breadth
//! valgrind --tool=callgrind --cache-sim=yes --LL=4194304,16,64 --separate-threads=yes \
//!     --callgrind-out-file=cg.out target/release/examples/wildcard_breadth 200000
//! callgrind_annotate --inclusive=yes cg.out-01 | grep -E 'wildcard_breadth::deliveries'
//! callgrind_annotate --auto=yes --show=DLmr,DLmw --sort=DLmr cg.out-02
//! ```
//!
//! A last-level cache of 4 MiB stands for a real one smaller than the
//! topics' memory, so that a few hundred thousand topics show what a
//! million show on hardware; what a miss costs (a page walk in 4 KiB
//! pages included) is the timed scenario's subject, not this example's.
//! The first argument is the number of topics (default [`TOPICS`]), the
//! second the number of deliveries (default [`DELIVERIES`]). Run without
//! valgrind, it prints the deliveries' median and 90th percentile times,
//! which on hardware include what callgrind does not model: the lines
//! moving between the publisher's core and the worker's, and in 4 KiB
//! pages a page walk for each line of a page no recent delivery touched.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rill::{Ack, Broker, BrokerConfig, Record, StartPosition, SubscriptionOptions, TopicOptions};
use rill_bench::scale::{name, voluntary_switches};

/// Topics when no argument gives their number.
const TOPICS: usize = 100_000;
/// Deliveries when no second argument gives their number: few enough
/// that each topic is met at most once at the default topic count, so
/// every delivery finds its topic cold.
const DELIVERIES: usize = 2_000;

/// Waits until `seen` reaches `target` (the pool worker counts there).
fn wait_for(seen: &AtomicU64, target: u64) {
    // Acquire: pairs with the handler's Release.
    while seen.load(Ordering::Acquire) < target {
        std::hint::spin_loop();
    }
}

/// The timed loop of the `scale` scenario's `**` row: a publish by name to
/// one topic, then a wait for its delivery. Returns each one's time, in
/// nanoseconds, from before the publish to the end of the wait.
#[inline(never)]
fn deliveries(broker: &Broker, names: &[String], seen: &AtomicU64, body: &[u8], count: usize) -> (Vec<u64>, Vec<u64>) {
    let n = names.len();
    let (mut times, mut publishes) = (Vec::with_capacity(count), Vec::with_capacity(count));
    for i in 0..count {
        let started = Instant::now();
        broker.publish(&names[(i * 7919) % n], &Record::new(body)).expect("a publish");
        publishes.push(started.elapsed().as_nanos() as u64);
        wait_for(seen, i as u64 + 1);
        times.push(started.elapsed().as_nanos() as u64);
    }
    (times, publishes)
}

fn main() {
    let arg = |i: usize, default: usize| std::env::args().nth(i).map_or(default, |a| a.parse().expect("a count"));
    let (topics, count) = (arg(1, TOPICS), arg(2, DELIVERIES));
    let broker = Broker::new(BrokerConfig::default()).expect("a broker");
    let names: Vec<String> = (0..topics).map(name).collect();
    let body = [0x5a; 64];
    for t in &names {
        broker.create_topic(t, &TopicOptions::default()).expect("a topic");
        broker.publish(t, &Record::new(&body)).expect("a publish");
    }
    let seen = Arc::new(AtomicU64::new(0));
    let counter = seen.clone();
    let options = SubscriptionOptions { start: StartPosition::Latest, ..Default::default() };
    let sub = broker
        .subscribe("scale/**", options, move |_| {
            // Release: pairs with the Acquire in `wait_for`.
            counter.fetch_add(1, Ordering::Release);
            Ack::Success
        })
        .expect("a subscription");
    let switches_before = voluntary_switches();
    let (mut times, mut publishes) = deliveries(&broker, &names, &seen, &body, count);
    let switches = voluntary_switches() - switches_before;
    sub.close();
    let at = |t: &mut Vec<u64>, q: f64| {
        t.sort_unstable();
        t[((t.len() - 1) as f64 * q) as usize] as f64 / 1e3
    };
    println!(
        "{count} deliveries through `scale/**` over {topics} topics: p50 {:.2} us, p90 {:.2} us; \
         the publish call alone: p50 {:.2} us, p90 {:.2} us; {:.2} voluntary context switches a delivery",
        at(&mut times, 0.5),
        at(&mut times, 0.9),
        at(&mut publishes, 0.5),
        at(&mut publishes, 0.9),
        switches as f64 / count as f64,
    );
}
