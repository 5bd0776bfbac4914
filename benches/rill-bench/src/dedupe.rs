//! The cost of a publish with an id (issue 41's "Speed" line): a publisher
//! appending records with fresh ids into a topic whose dedupe window already
//! holds [`WINDOW_IDS`] ids, against the same publisher appending records
//! without ids, interleaved in pairs on fresh brokers. Run with
//! `--scenario dedupe`; `--messages` sets the publishes timed per run and
//! `--payload` their size. The target is a ratio of at most 1.3.
//!
//! Ids are built before the clock starts, so the timed loop measures the
//! publish (the window's hash, lock and insert, and the id's bytes in the
//! record), not the formatting of ids.

use std::time::Instant;

use rill::{Broker, BrokerConfig, Record, TopicOptions};

/// Ids in the window before the timed publishes start.
pub const WINDOW_IDS: u64 = 1_000_000;

/// A window long enough that nothing expires during a run.
const WINDOW_MS: u64 = 3_600_000;

/// Each run's timed publishes when `--messages` is not given.
pub const DEFAULT_MESSAGES: u64 = 200_000;

/// One interleaved pair: ns per publish without and with an id.
#[derive(Debug, Clone, Copy)]
pub struct Pair {
    pub plain_ns: f64,
    pub with_id_ns: f64,
}

fn topic(broker: &Broker) -> rill::Result<rill::Publisher> {
    // Retention by count keeps memory flat whatever the run length.
    let options =
        TopicOptions { dedupe_window_ms: WINDOW_MS, retention_messages: Some(1 << 20), ..TopicOptions::default() };
    broker.create_topic("t", &options)?;
    broker.publisher("t")
}

/// ns per publish of `messages` records without ids.
fn plain(messages: u64, payload: &[u8]) -> rill::Result<f64> {
    let broker = Broker::new(BrokerConfig::default())?;
    let publisher = topic(&broker)?;
    let record = Record::new(payload);
    let started = Instant::now();
    for _ in 0..messages {
        publisher.publish(&record)?;
    }
    Ok(started.elapsed().as_nanos() as f64 / messages as f64)
}

/// ns per publish of `messages` records with fresh ids, the window holding
/// [`WINDOW_IDS`] ids first.
fn with_id(messages: u64, payload: &[u8]) -> rill::Result<f64> {
    let broker = Broker::new(BrokerConfig::default())?;
    let publisher = topic(&broker)?;
    for i in 0..WINDOW_IDS {
        publisher.publish(&Record::new(payload).with_id(&format!("fill-{i:016x}")))?;
    }
    let ids: Vec<String> = (0..messages).map(|i| format!("id-{i:016x}")).collect();
    let started = Instant::now();
    for id in &ids {
        publisher.publish(&Record::new(payload).with_id(id))?;
    }
    let ns = started.elapsed().as_nanos() as f64 / messages as f64;
    let held = broker.topic_stats("t")?.dedupe_ids;
    assert_eq!(held, WINDOW_IDS + messages, "every id stayed in the window");
    Ok(ns)
}

/// `pairs` interleaved pairs of runs.
pub fn run(messages: u64, payload: usize, pairs: usize) -> rill::Result<Vec<Pair>> {
    let payload = vec![0x5a; payload];
    (0..pairs.max(1))
        .map(|_| Ok(Pair { plain_ns: plain(messages, &payload)?, with_id_ns: with_id(messages, &payload)? }))
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A table of the pairs and their medians.
pub fn table(pairs: &[Pair]) -> String {
    let mut out = String::from(
        "| run | no id (ns/publish) | with id, 1M ids in the window (ns/publish) | ratio |\n|---|---|---|---|\n",
    );
    for (i, p) in pairs.iter().enumerate() {
        out += &format!("| {} | {:.1} | {:.1} | {:.2} |\n", i + 1, p.plain_ns, p.with_id_ns, p.with_id_ns / p.plain_ns);
    }
    let ratio = median(pairs.iter().map(|p| p.with_id_ns / p.plain_ns).collect());
    out += &format!(
        "| median | {:.1} | {:.1} | {ratio:.2} (target <= 1.30) |\n",
        median(pairs.iter().map(|p| p.plain_ns).collect()),
        median(pairs.iter().map(|p| p.with_id_ns).collect())
    );
    out
}
