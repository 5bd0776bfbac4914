//! What a publish with an id costs on a data directory shared by processes
//! (`Sharing::Processes`: a turn of the topic's `flock` and a catch-up of
//! the window from the log, see "Across processes" in
//! `src/broker/dedupe.rs`) against the same on a directory one process
//! owns (`Sharing::Exclusive`), and the same records without ids in each
//! mode. One publishing thread, fresh ids, 64-byte payloads, `Fsync::Never`,
//! the directory on `/dev/shm` where there is one. Rounds of the four
//! interleaved, a fresh topic each; the median round is printed.
//!
//!     cargo run --release --example dedupe_processes [-- MESSAGES ROUNDS]

use std::path::{Path, PathBuf};
use std::time::Instant;

use rill::{Broker, BrokerConfig, Fsync, Record, Sharing, TopicOptions};

fn broker(dir: &Path, sharing: Sharing) -> Broker {
    let config = BrokerConfig {
        data_dir: Some(dir.to_owned()),
        sharing,
        fsync: Fsync::Never,
        worker_threads: Some(1),
        ..BrokerConfig::default()
    };
    Broker::new(config).expect("open the data directory")
}

/// Nanoseconds per publish of `n` records to a fresh topic of `broker`,
/// each with a fresh id if `ids`.
fn round(broker: &Broker, topic: &str, n: u64, ids: bool) -> f64 {
    broker.create_topic(topic, &TopicOptions::default()).unwrap();
    let names: Vec<Option<String>> = (0..n).map(|i| ids.then(|| format!("{topic}-{i:012}"))).collect();
    let payload = [7u8; 64];
    let started = Instant::now();
    for name in &names {
        let record = Record::new(&payload);
        let record = match name {
            Some(id) => record.with_id(id),
            None => record,
        };
        broker.publish(topic, &record).unwrap();
    }
    let ns = started.elapsed().as_nanos() as f64 / n as f64;
    broker.delete_topic(topic).unwrap();
    ns
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<u64> = std::env::args().skip(1).map(|a| a.parse().expect("a number")).collect();
    let n = args.first().copied().unwrap_or(200_000);
    let rounds = args.get(1).copied().unwrap_or(5).max(1);
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() { shm.to_owned() } else { std::env::temp_dir() };
    let dirs: [PathBuf; 2] =
        ["exclusive", "processes"].map(|m| base.join(format!("rill-dedupe-cost-{m}-{}", std::process::id())));
    let exclusive = broker(&dirs[0], Sharing::Exclusive);
    let processes = broker(&dirs[1], Sharing::Processes);
    let cases: [(&str, &Broker, bool); 4] = [
        ("exclusive, no id", &exclusive, false),
        ("exclusive, id", &exclusive, true),
        ("processes, no id", &processes, false),
        ("processes, id", &processes, true),
    ];
    let mut results = vec![Vec::new(); cases.len()];
    for r in 0..rounds {
        for (c, (_, broker, ids)) in cases.iter().enumerate() {
            results[c].push(round(broker, &format!("t{r}-{c}"), n, *ids));
        }
    }
    let names: Vec<&str> = cases.iter().map(|(name, _, _)| *name).collect();
    drop((exclusive, processes));
    for dir in &dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
    println!("{n} publishes a round, {rounds} rounds, directory under {}; median ns per publish:", base.display());
    let medians: Vec<f64> = results.into_iter().map(median).collect();
    for (name, ns) in names.iter().zip(&medians) {
        println!("  {name:<18} {ns:>8.0}");
    }
    println!("  id, processes / exclusive: {:.2}x", medians[3] / medians[1]);
}
