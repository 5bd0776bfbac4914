//! One-way latency of one 64-byte message at a time, publisher and
//! subscriber in one process, by how the broker keeps its log: in memory
//! (`mem`), on a data directory for one process (`exclusive`), or on one
//! shared by processes (`processes`). The `ipc` scenario measures rill
//! across processes against a ping-pong; this isolates what the
//! `Sharing::Processes` log itself adds, with no second process and so no
//! doorbell, to find it with `perf` on one process:
//!
//! ```text
//! cargo build --release -p rill-bench --example sharing_latency
//! for m in mem exclusive processes; do target/release/examples/sharing_latency $m; done
//! ```
//!
//! The publisher is paced at 100 k messages a second, spinning on the
//! clock as the `ipc` scenario's does, and stamps each message with
//! `CLOCK_MONOTONIC`; a dedicated subscriber spinning between messages
//! records its arrival. It prints the p50, p90 and p99 of the one-way
//! latency and of the publish call itself. The data directory is on
//! `/dev/shm` and removed afterwards.

use std::sync::mpsc;
use std::time::Duration;

use hdrhistogram::Histogram;
use rill::log::Fsync;
use rill::{Ack, Broker, BrokerConfig, Record, Sharing, SubscriptionOptions, TopicOptions};

/// Messages published (one second at the pace).
const MESSAGES: u64 = 100_000;
/// Nanoseconds between two messages: 100 k a second.
const GAP_NS: u64 = 10_000;

fn mono_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes the clock's reading into a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn quantiles(h: &Histogram<u64>) -> String {
    format!(
        "p50 {} ns, p90 {} ns, p99 {} ns",
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.9),
        h.value_at_quantile(0.99)
    )
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "processes".into());
    let dir = std::path::PathBuf::from(format!("/dev/shm/rill-sharing-latency-{}", std::process::id()));
    let on_disk =
        |sharing| BrokerConfig { data_dir: Some(dir.clone()), fsync: Fsync::Never, sharing, ..BrokerConfig::default() };
    let config = match mode.as_str() {
        "mem" => BrokerConfig::default(),
        "exclusive" => on_disk(Sharing::Exclusive),
        "processes" => on_disk(Sharing::Processes),
        other => panic!("unknown mode {other:?}: mem, exclusive or processes"),
    };
    let broker = Broker::new(config).expect("open the broker");
    broker.create_topic("t", &TopicOptions::default()).expect("create the topic");
    let (tx, rx) = mpsc::channel();
    let mut latency = Histogram::<u64>::new(3).expect("valid");
    let mut got = 0;
    let options = SubscriptionOptions {
        dedicated_thread: true,
        idle_spin: Some(Duration::from_micros(200)),
        ..SubscriptionOptions::default()
    };
    let sub = broker
        .subscribe("t", options, move |m| {
            let stamp = u64::from_le_bytes(m.payload()[..8].try_into().expect("8 bytes"));
            latency.saturating_record(mono_ns().saturating_sub(stamp).max(1));
            got += 1;
            if got == MESSAGES {
                let _ = tx.send(latency.clone());
            }
            Ack::Success
        })
        .expect("subscribe");
    let publisher = broker.publisher("t").expect("publisher");
    let mut calls = Histogram::<u64>::new(3).expect("valid");
    let mut payload = [0u8; 64];
    let start = mono_ns();
    for seq in 0..MESSAGES {
        let due = start + seq * GAP_NS;
        let mut now = mono_ns();
        while now < due {
            std::hint::spin_loop();
            now = mono_ns();
        }
        payload[..8].copy_from_slice(&now.to_le_bytes());
        publisher.publish(&Record::new(&payload)).expect("publish");
        calls.saturating_record(mono_ns() - now);
    }
    let latency = rx.recv_timeout(Duration::from_secs(60)).expect("every message delivered");
    println!("{mode}: one-way {}; publish call {}", quantiles(&latency), quantiles(&calls));
    sub.close();
    broker.close();
    let _ = std::fs::remove_dir_all(&dir);
}
