//! `--priority`: issue 42's speed line. The one-way delivery latency of a
//! priority-7 push subscription on a pool of 2 workers, in three
//! conditions run in interleaved rounds: the pool otherwise idle; beside 8
//! busy subscriptions of priority 0 (each with more queued messages than
//! the run drains and a handler that spins a fixed time per message); and
//! the same 8 with every subscription at the default priority (what the
//! pool did before priorities). The probe publishes one 8-byte message (its
//! publish time) every `PROBE_GAP`, sleeping between them, and its handler
//! records `now - publish time` in a histogram.
//!
//! Beside the latency, each round reports the probe's own queue-wait p99
//! (`SubscriptionStats::queue_wait_p99`: from its drain being queued to a
//! worker taking it) and the most takes it waited: the pool's share of the
//! latency, apart from the thread wakeups and the scheduling of a busy
//! machine, which weigh on the idle pool too.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rill::{Ack, Broker, BrokerConfig, Record, StartPosition, SubscriptionOptions, TopicOptions};
use serde::Serialize;

use crate::stats::{Percentiles, fmt_ns, percentiles};

/// Busy subscriptions beside the probe.
const BUSY: usize = 8;
/// Pool workers.
const WORKERS: usize = 2;
/// Each busy handler's spin per message.
const BUSY_SPIN: Duration = Duration::from_micros(20);
/// Between two probe publishes.
const PROBE_GAP: Duration = Duration::from_micros(200);

/// One of the three conditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Condition {
    /// The probe alone on the pool.
    Idle,
    /// The probe at priority 7 beside 8 busy ones at priority 0.
    Prioritized,
    /// The probe and the 8 busy ones all at the default priority.
    Flat,
}

/// What `--priority` measured: the probe's latency in each condition, over
/// every round.
#[derive(Debug, Clone, Serialize)]
pub struct PriorityBench {
    /// Probe messages per condition per round.
    pub messages: u64,
    /// Rounds (each runs the three conditions once).
    pub rounds: usize,
    pub idle: Percentiles,
    pub prioritized: Percentiles,
    pub flat: Percentiles,
    /// The p99 of each round, per condition: (idle, prioritized, flat).
    pub round_p99: Vec<(u64, u64, u64)>,
    /// The probe's queue wait in each round, per condition: (idle,
    /// prioritized, flat).
    pub round_queue: Vec<(QueueWait, QueueWait, QueueWait)>,
}

/// The probe's waits in the pool's queue over one run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct QueueWait {
    /// Their p99 in nanoseconds (the upper edge of a power-of-two bucket).
    pub p99_ns: u64,
    /// The most takes of other drains one of them waited.
    pub max_takes: u64,
}

fn spin(d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

/// One run of `condition`: the probe's latencies and queue waits.
fn run(condition: Condition, messages: u64) -> rill::Result<(Histogram<u64>, QueueWait)> {
    let broker = Broker::new(BrokerConfig { worker_threads: Some(WORKERS), ..Default::default() })?;
    let base = Instant::now();
    let mut busy_subs = Vec::new();
    if condition != Condition::Idle {
        // More than the workers drain in the run: every busy one is ready all along.
        let run_time = PROBE_GAP * messages as u32;
        let backlog = (2 * WORKERS as u128 * run_time.as_nanos() / BUSY_SPIN.as_nanos()) as usize + 1000;
        let records: Vec<Record<'_>> = (0..backlog).map(|_| Record::new(b"busy")).collect();
        for i in 0..BUSY {
            let topic = format!("busy/{i}");
            broker.create_topic(&topic, &TopicOptions::default())?;
            broker.publish_batch(&topic, &records)?;
            let priority = (condition == Condition::Prioritized).then_some(0);
            let options = SubscriptionOptions { start: StartPosition::Earliest, priority, ..Default::default() };
            busy_subs.push(broker.subscribe(&topic, options, |_| {
                spin(BUSY_SPIN);
                Ack::Success
            })?);
        }
    }
    broker.create_topic("probe", &TopicOptions::default())?;
    let seen = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(histogram()));
    let (s, l) = (seen.clone(), latencies.clone());
    let priority = (condition != Condition::Flat).then_some(7);
    let probe = broker.subscribe("probe", SubscriptionOptions { priority, ..Default::default() }, move |m| {
        let now = base.elapsed().as_nanos() as u64;
        let sent = u64::from_le_bytes(m.payload().try_into().expect("8-byte probe"));
        l.lock().expect("not poisoned").saturating_record(now.saturating_sub(sent).max(1));
        s.fetch_add(1, Ordering::Relaxed);
        Ack::Success
    })?;
    for _ in 0..messages {
        std::thread::sleep(PROBE_GAP);
        let sent = base.elapsed().as_nanos() as u64;
        broker.publish("probe", &Record::new(&sent.to_le_bytes()))?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.load(Ordering::Relaxed) < messages {
        if Instant::now() > deadline {
            // The probe fell behind for a minute: no latency to report.
            return Err(rill::Error::Timeout);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let stats = probe.stats();
    let queue = QueueWait { p99_ns: stats.queue_wait_p99.as_nanos() as u64, max_takes: stats.queue_wait_max_takes };
    probe.close();
    for s in busy_subs {
        s.close();
    }
    broker.close();
    let h = latencies.lock().expect("not poisoned").clone();
    Ok((h, queue))
}

/// Runs the three conditions `rounds` times, interleaved.
pub fn measure(rounds: usize, messages: u64) -> rill::Result<PriorityBench> {
    let (mut idle, mut prioritized, mut flat) = (histogram(), histogram(), histogram());
    let (mut round_p99, mut round_queue) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (i, iq) = run(Condition::Idle, messages)?;
        let (p, pq) = run(Condition::Prioritized, messages)?;
        let (f, fq) = run(Condition::Flat, messages)?;
        round_queue.push((iq, pq, fq));
        round_p99.push((i.value_at_quantile(0.99), p.value_at_quantile(0.99), f.value_at_quantile(0.99)));
        idle.add(&i).expect("same bounds");
        prioritized.add(&p).expect("same bounds");
        flat.add(&f).expect("same bounds");
    }
    Ok(PriorityBench {
        messages,
        rounds,
        idle: percentiles(&idle),
        prioritized: percentiles(&prioritized),
        flat: percentiles(&flat),
        round_p99,
        round_queue,
    })
}

impl PriorityBench {
    /// The report's lines.
    pub fn describe(&self) -> String {
        let line = |what: &str, p: &Percentiles| {
            format!(
                "  {what:<44} p50 {:>9}  p99 {:>9}  max {:>9}  ({:.2}x the idle p99)\n",
                fmt_ns(p.p50),
                fmt_ns(p.p99),
                fmt_ns(p.max),
                p.p99 as f64 / self.idle.p99.max(1) as f64
            )
        };
        let mut out = format!(
            "priority: a priority-7 subscription's delivery latency on {WORKERS} workers, {} probes per run every \
             {} µs, {} interleaved rounds\n",
            self.messages,
            PROBE_GAP.as_micros(),
            self.rounds
        );
        out += &line("pool idle", &self.idle);
        out +=
            &line(&format!("beside {BUSY} busy at priority 0 ({} µs/msg)", BUSY_SPIN.as_micros()), &self.prioritized);
        out += &line("beside the same, every one at the default", &self.flat);
        out += "  p99 per round (idle / prioritized / flat):";
        for (i, p, f) in &self.round_p99 {
            out += &format!(" {}/{}/{}", fmt_ns(*i), fmt_ns(*p), fmt_ns(*f));
        }
        out += "\n  probe queue-wait p99 (most takes) per round (idle / prioritized / flat):";
        for (i, p, f) in &self.round_queue {
            out += &format!(
                " {} ({})/{} ({})/{} ({})",
                fmt_ns(i.p99_ns),
                i.max_takes,
                fmt_ns(p.p99_ns),
                p.max_takes,
                fmt_ns(f.p99_ns),
                f.max_takes
            );
        }
        out
    }
}
