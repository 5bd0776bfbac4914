//! rill: one topic on an in-memory broker (or, in the `persist-*` scenarios,
//! on a fresh data directory); push subscriptions (worker pool or dedicated
//! threads) or pull consumers (a thread each, `poll` in batches).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rill::{
    Ack, Broker, BrokerConfig, ConsumerOptions, ConsumerStart, DeliveryMode, Fsync, Message, Overflow, Publisher,
    Record, SubscriptionOptions, TopicOptions,
};

use super::env::{Env, RillOverflow};
use crate::measure::{
    Delivery, Outcome, Persist, ProducerFn, Run, Shape, Stamp, Status, SubMode, drive, execute, new_histogram,
};

const TOPIC: &str = "bench";

/// Runs `shape` once on a fresh broker.
pub fn run(shape: &Shape, env: &Env) -> Outcome {
    match try_run(shape, env) {
        Ok(o) => o,
        Err(e) => Outcome::not_run(Status::Failed(e.to_string()), shape.subscribers),
    }
}

/// Encoded size of a record with no key or attributes (24-byte header).
fn record_bytes(payload: usize) -> u64 {
    24 + payload as u64
}

/// Publishes one and a half retentions' worth per partition before anything
/// subscribes, so segments have been trimmed and recycled: the measured run
/// then writes into memory that is already faulted in (steady state).
fn warm_up(publisher: &Publisher, shape: &Shape, retention: u64) -> rill::Result<()> {
    fill_past_retention(publisher, shape.partitions as u64, shape.payload, retention)
}

/// Publishes one and a half retentions' worth of `payload`-byte records into
/// each of a topic's `partitions`, in batches: afterwards its segments have
/// been trimmed and recycled, so further appends write memory that is
/// already faulted in, as a topic's do once it has run for a while.
pub fn fill_past_retention(publisher: &Publisher, partitions: u64, payload: usize, retention: u64) -> rill::Result<()> {
    let body = vec![0u8; payload];
    let records = vec![Record::new(&body); 1024];
    let total = partitions * (retention + retention / 2) / record_bytes(payload) + 1024;
    let mut left = total;
    while left > 0 {
        let n = left.min(records.len() as u64) as usize;
        publisher.publish_batch(&records[..n])?;
        left -= n as u64;
    }
    Ok(())
}

/// Where the `persist-*` scenarios put their data directories: under
/// `RILL_BENCH_DATA_DIR`, else the system's temp directory (which must be on
/// the disk to measure, not a tmpfs).
pub fn data_root() -> std::path::PathBuf {
    std::env::var_os("RILL_BENCH_DATA_DIR").map_or_else(std::env::temp_dir, Into::into)
}

/// A data directory for one run, removed when dropped.
struct DataDir(std::path::PathBuf);

impl DataDir {
    fn new() -> DataDir {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        DataDir(data_root().join(format!("rill-bench-{}-{nanos}", std::process::id())))
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn try_run(shape: &Shape, env: &Env) -> rill::Result<Outcome> {
    rill::clock::warm_up();
    let dir = shape.persist.map(|_| DataDir::new());
    let fsync = match shape.persist {
        None | Some(Persist::Interval) => Fsync::default(),
        Some(Persist::Never) => Fsync::Never,
        Some(Persist::Always) => Fsync::Always,
    };
    let broker = Broker::new(BrokerConfig {
        worker_threads: env.workers,
        data_dir: dir.as_ref().map(|d| d.0.clone()),
        fsync,
        ..BrokerConfig::default()
    })?;
    let retention = env.retention_mib << 20;
    broker.create_topic(
        TOPIC,
        &TopicOptions { partitions: shape.partitions, retention_bytes: Some(retention), ..TopicOptions::default() },
    )?;
    let publisher = broker.publisher(TOPIC)?;
    // A data directory starts empty: pre-filling it would write (and, under
    // Always, sync) a retention and a half before every run.
    if env.warmup && shape.persist.is_none() {
        warm_up(&publisher, shape, retention)?;
    }
    let run = Run::new(shape);
    let mut subs = Vec::new();
    let mut consumers = Vec::new();
    match shape.mode {
        SubMode::Pool | SubMode::Dedicated => {
            for i in 0..shape.subscribers {
                let mut tally = run.tally(i);
                let (r, cost) = (run.clone(), shape.handler);
                let (overflow, lag_limit) = match env.overflow {
                    RillOverflow::Block => (Overflow::Block, Some(shape.capacity.max(1) as u64)),
                    RillOverflow::Drop => (Overflow::DropOldest, None),
                };
                let options = SubscriptionOptions {
                    dedicated_thread: shape.mode == SubMode::Dedicated,
                    idle_spin: (shape.idle_spin_us > 0).then(|| Duration::from_micros(shape.idle_spin_us)),
                    delivery: match shape.delivery {
                        Delivery::AtLeastOnce => DeliveryMode::AtLeastOnce,
                        Delivery::AtMostOnce => DeliveryMode::AtMostOnce,
                    },
                    overflow,
                    lag_limit,
                    on_lagged: Some(Arc::new(move |_: &str, _: u32, n: u64| r.add_missed(i, n))),
                    ..SubscriptionOptions::default()
                };
                subs.push(if env.batch_handler {
                    broker.subscribe_batch(TOPIC, options, move |msgs: &[Message<'_>], _acks: &mut [Ack]| {
                        for m in msgs {
                            cost.pay();
                            tally.on(m.payload(), || m.timestamp_ns());
                        }
                        msgs.len()
                    })?
                } else {
                    broker.subscribe(TOPIC, options, move |m: &Message<'_>| {
                        cost.pay();
                        tally.on(m.payload(), || m.timestamp_ns());
                        Ack::Success
                    })?
                });
            }
        }
        SubMode::Pull => {
            for i in 0..shape.subscribers {
                let mut consumer = broker.consumer(
                    &format!("bench-{i}"),
                    TOPIC,
                    ConsumerOptions { start: ConsumerStart::Latest, ..Default::default() },
                )?;
                let starts =
                    (0..consumer.partitions()).map(|p| consumer.position(p)).collect::<rill::Result<Vec<_>>>()?;
                let mut tally = run.tally(i);
                let (r, shape_cost) = (run.clone(), shape.handler);
                let max = shape.poll_batch.max(1);
                let thread = std::thread::Builder::new().name(format!("bench-consumer-{i}")).spawn(move || {
                    let mut delivered = 0u64;
                    let mut missed = 0u64;
                    while !tally.done() && !r.aborted() {
                        let Ok(batch) = consumer.poll(max, Duration::from_millis(20)) else { break };
                        delivered += batch.len() as u64;
                        for m in batch {
                            shape_cost.pay();
                            tally.on(m.payload(), || m.timestamp_ns());
                        }
                        // What the cursors moved past without handing out was
                        // trimmed by retention: count it as missed.
                        let moved: u64 =
                            starts.iter().enumerate().map(|(p, s)| consumer.position(p as u32).unwrap_or(*s) - s).sum();
                        if moved > delivered + missed {
                            let n = moved - delivered - missed;
                            missed += n;
                            tally.missed(n);
                        }
                    }
                });
                consumers.push(thread.map_err(|e| rill::Error::InvalidArgument(e.to_string()))?);
            }
        }
        SubMode::Shared => {
            // One receiver: the shared subscription. Its members share one
            // tally (a lock per message: small next to the handlers' cost).
            let tally = Arc::new(Mutex::new(run.tally(0)));
            for _ in 0..shape.subscribers {
                let (tally, cost) = (tally.clone(), shape.handler);
                let options = SubscriptionOptions {
                    name: Some("bench-shared".into()),
                    shared: true,
                    dedicated_thread: true,
                    ..SubscriptionOptions::default()
                };
                subs.push(broker.subscribe(TOPIC, options, move |m: &Message<'_>| {
                    cost.pay();
                    tally.lock().unwrap_or_else(|e| e.into_inner()).on(m.payload(), || m.timestamp_ns());
                    Ack::Success
                })?);
            }
            // Before publishing, let each member give up what later ones
            // took (it does so before it is idle), so the run measures
            // members that share the partitions from the first message.
            for s in &subs {
                s.wait_idle(Duration::from_secs(10))?;
            }
        }
        SubMode::Group => {
            // One receiver: the group. Its members share one tally, taken
            // once per batch (a lock per batch, not per message).
            let tally = Arc::new(Mutex::new(run.tally(0)));
            for i in 0..shape.subscribers {
                let mut consumer = broker.consumer(
                    "bench-group",
                    TOPIC,
                    ConsumerOptions { start: ConsumerStart::Latest, ..Default::default() },
                )?;
                let (tally, r, cost) = (tally.clone(), run.clone(), shape.handler);
                let max = shape.poll_batch.max(1);
                let thread = std::thread::Builder::new().name(format!("bench-member-{i}")).spawn(move || {
                    let lock = || tally.lock().unwrap_or_else(|e| e.into_inner());
                    let mut missed = 0u64;
                    while !lock().done() && !r.aborted() {
                        let Ok(batch) = consumer.poll(max, Duration::from_millis(20)) else { break };
                        for _ in &batch {
                            cost.pay();
                        }
                        let mut t = lock();
                        for m in &batch {
                            t.on(m.payload(), || m.timestamp_ns());
                        }
                        drop(batch);
                        let now_missed = consumer.stats().missed;
                        if now_missed > missed {
                            t.missed(now_missed - missed);
                            missed = now_missed;
                        }
                        drop(t);
                        // No member leaves during a run, so nothing is refused.
                        if consumer.commit().is_err() {
                            break;
                        }
                    }
                });
                consumers.push(thread.map_err(|e| rill::Error::InvalidArgument(e.to_string()))?);
            }
        }
    }

    let errors = Mutex::new(Vec::<String>::new());
    let producers: Vec<ProducerFn<'_>> = (0..shape.producers)
        .map(|p| {
            let publisher = publisher.clone();
            let errors = &errors;
            Box::new(move |run: &Run| {
                // Under Always a publish waits for an fdatasync (tens of µs at
                // least): two clock reads around it cost nothing in comparison,
                // and its duration is what the target is about.
                let mut calls = (shape.persist == Some(Persist::Always)).then(new_histogram);
                // Stamp::Never: rill stamps every record in `publish`.
                let sent = drive(shape, run, p, Stamp::Never, |bufs| {
                    let started = calls.as_ref().map(|_| Instant::now());
                    let res = if let [one] = bufs {
                        publisher.publish(&Record::new(one)).map(|_| ())
                    } else {
                        let records: Vec<Record<'_>> = bufs.iter().map(|b| Record::new(b)).collect();
                        publisher.publish_batch(&records).map(|_| ())
                    };
                    if let (Some(h), Some(t)) = (calls.as_mut(), started) {
                        h.saturating_record((t.elapsed().as_nanos() as u64).max(1));
                    }
                    match res {
                        Ok(()) => true,
                        Err(e) => {
                            errors.lock().unwrap_or_else(|e| e.into_inner()).push(e.to_string());
                            false
                        }
                    }
                });
                if let Some(h) = &calls {
                    run.add_publish_latency(h);
                }
                sent
            }) as ProducerFn<'_>
        })
        .collect();
    let mut outcome = execute(&run, env.timeout, producers);
    if let Some(e) = errors.into_inner().unwrap_or_else(|e| e.into_inner()).into_iter().next() {
        outcome.status = Status::Failed(format!("publish failed: {e}"));
    }
    for s in &subs {
        s.close();
    }
    for c in consumers {
        let _ = c.join();
    }
    drop(subs);
    broker.close();
    Ok(outcome)
}
