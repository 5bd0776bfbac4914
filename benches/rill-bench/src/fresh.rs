//! `--scenario fresh`: the first fill of a topic against the same run on a
//! warm one (issue 43's "fresh topic" goal). Each round runs, on a broker
//! of its own and in alternating order, the same publishes once into a
//! topic created just before the run ("fresh": its retention is filled for
//! the first time while the clock runs, so its memory, or its segment
//! files, are new) and once into a topic filled past its retention before
//! the clock starts ("warm": its segments are recycled ones). Both kinds
//! of topic: in memory, and on a data directory (`Fsync::Never`, so the
//! disk's flushes do not blur what is measured: the first touch of a new
//! segment file's pages). Both shapes of the goal: one publisher to one
//! pool subscriber, and four publishers to one.
//!
//! Beside each rate the table gives the quantities that do not depend on
//! the machine's load: the publisher threads' minor page faults during the
//! run (`getrusage(RUSAGE_THREAD)`, summed over the publishers) and the
//! whole process's (which include whatever faults memory in off the
//! publishers' path), per million messages. A fresh topic whose publishers
//! fault no more than a warm one's has moved its first-touch cost off
//! their path; what remains of the ratio is that work's share of the CPUs.
//!
//! `--messages` sets the messages per run (all publishers together;
//! default [`DEFAULT_MESSAGES`], a few retentions of `--retention-mib`, so
//! a fresh run crosses the first fill and then recycles), `--payload` their
//! size and `--pairs` the rounds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rill::{Ack, Broker, BrokerConfig, Fsync, Message, Overflow, Record, SubscriptionOptions, TopicOptions};

use crate::stats::{fmt_count, median};
use crate::systems::rill_sys::{data_root, fill_past_retention};

/// Messages per run when `--messages` is not given (all publishers together).
pub const DEFAULT_MESSAGES: u64 = 2_000_000;

/// How far a subscriber may fall behind before the publishers wait (the
/// harness's default `--capacity`).
const LAG_LIMIT: u64 = 4096;

/// Where a run's topic keeps its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Memory,
    Durable,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Memory => "memory",
            Kind::Durable => "durable (Fsync::Never)",
        }
    }
}

/// What one run measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct Run {
    /// Delivered messages per second (the subscriber's, from releasing the
    /// publishers to the last delivery).
    pub msgs_per_s: f64,
    /// Minor page faults of the publisher threads while they published.
    pub publisher_faults: u64,
    /// Minor page faults of the whole process over the run.
    pub process_faults: u64,
}

/// One interleaved round of one case: the fresh run and the warm run.
#[derive(Debug, Clone, Copy)]
pub struct Pair {
    pub fresh: Run,
    pub warm: Run,
}

/// One case (kind of topic and number of publishers) and its rounds.
#[derive(Debug, Clone)]
pub struct Case {
    pub kind: Kind,
    pub producers: usize,
    pub pairs: Vec<Pair>,
}

/// Minor page faults so far of the calling thread (`who` =
/// `RUSAGE_THREAD`) or of the process (`RUSAGE_SELF`); 0 where
/// `getrusage` cannot say.
pub fn minor_faults(who: libc::c_int) -> u64 {
    // SAFETY: getrusage writes a `rusage` into the zeroed one we pass, and
    // reads nothing else; `who` is one of the two values the callers pass.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(who, &mut usage) != 0 {
            return 0;
        }
        usage.ru_minflt as u64
    }
}

/// Minor page faults of the calling thread so far.
pub fn thread_faults() -> u64 {
    #[cfg(target_os = "linux")]
    {
        minor_faults(libc::RUSAGE_THREAD)
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}

/// A data directory for one run, removed when dropped.
struct DataDir(std::path::PathBuf);

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One run: `messages` records of `payload` bytes from `producers` threads
/// into one topic with one pool subscriber (`Overflow::Block`, as the
/// harness's default), warmed past its retention first if `warm`.
fn run_once(
    kind: Kind,
    producers: usize,
    warm: bool,
    messages: u64,
    payload: usize,
    retention: u64,
) -> rill::Result<Run> {
    rill::clock::warm_up();
    let dir = (kind == Kind::Durable).then(|| {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        DataDir(data_root().join(format!("rill-bench-fresh-{}-{nanos}", std::process::id())))
    });
    let broker = Broker::new(BrokerConfig {
        data_dir: dir.as_ref().map(|d| d.0.clone()),
        fsync: Fsync::Never,
        ..BrokerConfig::default()
    })?;
    broker.create_topic("fresh", &TopicOptions { retention_bytes: Some(retention), ..TopicOptions::default() })?;
    if warm {
        fill_past_retention(&broker.publisher("fresh")?, 1, payload, retention)?;
    }
    let per_producer = (messages / producers as u64).max(1);
    let total = per_producer * producers as u64;
    let delivered = Arc::new(AtomicU64::new(0));
    let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(1);
    let counted = delivered.clone();
    let _sub = broker.subscribe(
        "fresh",
        SubscriptionOptions { overflow: Overflow::Block, lag_limit: Some(LAG_LIMIT), ..SubscriptionOptions::default() },
        move |m: &Message<'_>| {
            std::hint::black_box(m.payload());
            // Relaxed: a count only this handler writes (one delivery at a
            // time); the channel carries the end to the main thread.
            if counted.fetch_add(1, Ordering::Relaxed) + 1 == total {
                let _ = done_tx.try_send(());
            }
            Ack::Success
        },
    )?;
    let publishers = (0..producers).map(|_| broker.publisher("fresh")).collect::<rill::Result<Vec<_>>>()?;
    let start = Arc::new(std::sync::Barrier::new(producers + 1));
    let body = vec![0u8; payload];
    let threads: Vec<_> = publishers
        .into_iter()
        .map(|publisher| {
            let (start, body) = (start.clone(), body.clone());
            std::thread::spawn(move || -> rill::Result<u64> {
                let record = Record::new(&body);
                start.wait();
                let before = thread_faults();
                for _ in 0..per_producer {
                    publisher.publish(&record)?;
                }
                Ok(thread_faults() - before)
            })
        })
        .collect();
    let process_before = minor_faults(libc::RUSAGE_SELF);
    start.wait();
    let started = Instant::now();
    let mut publisher_faults = 0;
    for t in threads {
        publisher_faults += t.join().expect("a publisher thread")?;
    }
    if done_rx.recv_timeout(Duration::from_secs(60)).is_err() {
        return Err(rill::Error::InvalidArgument(format!(
            "the subscriber received {} of {total} messages in a minute",
            delivered.load(Ordering::Relaxed)
        )));
    }
    let elapsed = started.elapsed().as_secs_f64();
    let process_faults = minor_faults(libc::RUSAGE_SELF) - process_before;
    Ok(Run { msgs_per_s: total as f64 / elapsed, publisher_faults, process_faults })
}

/// `pairs` rounds of each case (memory and durable, one and four
/// publishers), fresh and warm alternating which runs first.
pub fn run(messages: u64, payload: usize, retention_mib: u64, pairs: usize) -> rill::Result<Vec<Case>> {
    let retention = retention_mib.max(1) << 20;
    let mut cases = Vec::new();
    for kind in [Kind::Memory, Kind::Durable] {
        for producers in [1, 4] {
            let mut rounds = Vec::new();
            for i in 0..pairs {
                let mut fresh = Run::default();
                let mut warm = Run::default();
                for first_fresh in [i % 2 == 0, i % 2 != 0] {
                    let r = run_once(kind, producers, !first_fresh, messages, payload, retention)?;
                    if first_fresh { fresh = r } else { warm = r }
                }
                rounds.push(Pair { fresh, warm });
            }
            cases.push(Case { kind, producers, pairs: rounds });
        }
    }
    Ok(cases)
}

/// The cases as tables: each round's rates and faults (per million
/// messages), then the median and worst fresh / warm ratio.
pub fn table(cases: &[Case], messages: u64, payload: usize, retention_mib: u64) -> String {
    let per_m = |faults: u64| faults as f64 * 1e6 / messages.max(1) as f64;
    let mut out = format!(
        "Fresh topic against warm: {messages} messages of {payload} B per run, retention {retention_mib} MiB, \
         one pool subscriber (Overflow::Block, lag limit {LAG_LIMIT}); faults are minor page faults per \
         million messages (publishers' own, and the whole process's)\n"
    );
    for case in cases {
        out += &format!(
            "\n{} topic, {} -> 1\n| round | fresh msgs/s | warm msgs/s | fresh/warm | fresh pub faults | warm pub faults | fresh proc faults | warm proc faults |\n|---|---|---|---|---|---|---|---|\n",
            case.kind.name(),
            case.producers
        );
        let mut ratios = Vec::new();
        for (i, p) in case.pairs.iter().enumerate() {
            let ratio = p.fresh.msgs_per_s / p.warm.msgs_per_s;
            ratios.push(ratio);
            out += &format!(
                "| {} | {} | {} | {ratio:.2}x | {:.0} | {:.0} | {:.0} | {:.0} |\n",
                i + 1,
                fmt_count(p.fresh.msgs_per_s),
                fmt_count(p.warm.msgs_per_s),
                per_m(p.fresh.publisher_faults),
                per_m(p.warm.publisher_faults),
                per_m(p.fresh.process_faults),
                per_m(p.warm.process_faults),
            );
        }
        let worst = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        out += &format!("fresh / warm: median {:.2}x, worst {worst:.2}x\n", median(&ratios));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_of_each_case_delivers_every_message() {
        let cases = run(20_000, 64, 1, 1).unwrap();
        assert_eq!(cases.len(), 4);
        for c in &cases {
            let p = c.pairs[0];
            assert!(p.fresh.msgs_per_s > 0.0 && p.warm.msgs_per_s > 0.0, "{c:?}");
        }
        assert!(table(&cases, 20_000, 64, 1).contains("fresh / warm: median"));
    }

    #[test]
    fn a_thread_that_touches_new_pages_counts_their_faults() {
        if !cfg!(target_os = "linux") {
            return;
        }
        let before = thread_faults();
        let mut pages = vec![0u8; 64 << 20];
        for p in pages.chunks_mut(4096) {
            p[0] = 1;
        }
        std::hint::black_box(&pages);
        assert!(thread_faults() > before);
    }
}
