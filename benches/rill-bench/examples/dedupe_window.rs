//! A publish with an id through a dedupe window's whole life: one
//! publisher, 64-byte records each with a fresh id, into one topic whose
//! window (an hour) expires nothing during the run, a million publishes at
//! a time. The window grows to its cap (`rill::broker::MAX_DEDUPE_IDS`), after
//! which every publish also evicts the oldest id: the steady state of a
//! window kept full, which `rill-bench --scenario dedupe` (a million ids,
//! then a short timed run) does not reach. Prints ns per publish and the
//! ids held after each million:
//!
//! ```text
//! cargo run --release -p rill-bench --example dedupe_window -- [millions]
//! ```
//!
//! Ids are formatted before each million is timed.

use std::time::Instant;

use rill::{Broker, BrokerConfig, Record, TopicOptions};

/// Millions of publishes when no argument is given: two to fill the window
/// to its cap, two more past it.
const DEFAULT_MILLIONS: u64 = 4;

fn main() -> rill::Result<()> {
    let millions = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(DEFAULT_MILLIONS);
    let broker = Broker::new(BrokerConfig::default())?;
    // Retention by count keeps the log's memory flat.
    let options =
        TopicOptions { dedupe_window_ms: 3_600_000, retention_messages: Some(1 << 20), ..TopicOptions::default() };
    broker.create_topic("t", &options)?;
    let publisher = broker.publisher("t")?;
    let payload = [0x5a; 64];
    for million in 0..millions {
        let ids: Vec<String> =
            (million * 1_000_000..(million + 1) * 1_000_000).map(|i| format!("id-{i:016x}")).collect();
        let started = Instant::now();
        for id in &ids {
            publisher.publish(&Record::new(&payload).with_id(id))?;
        }
        let ns = started.elapsed().as_nanos() as f64 / ids.len() as f64;
        let stats = broker.topic_stats("t")?;
        println!(
            "publishes {}-{}M: {ns:.0} ns a publish; ids held {}, evicted {}",
            million,
            million + 1,
            stats.dedupe_ids,
            stats.dedupe_evicted
        );
    }
    Ok(())
}
