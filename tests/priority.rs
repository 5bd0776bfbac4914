//! Subscription priorities in the shared worker pool (issue 42): a ready
//! subscription of higher priority is drained first, aging keeps every
//! other one moving, and the option is checked and defaulted as documented.
//!
//! The overload test compares waits measured in one run (orderings, never a
//! time limit) and counts the aging bound in takes. `RILL_PRIORITY_LONG=1`
//! runs it longer (every low-priority subscription handles 50 times more).

mod common;

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::wait_for;
use rill::{
    Ack, Broker, BrokerConfig, DEFAULT_PRIORITY, Error, PRIORITY_AGING_TAKES, Record, StartPosition,
    SubscriptionOptions, TopicOptions,
};

/// A fixed amount of work for a handler: the same for every call.
fn spin(rounds: u64) -> u64 {
    let mut x = 0u64;
    for i in 0..rounds {
        x = x.wrapping_mul(31).wrapping_add(black_box(i));
    }
    black_box(x)
}

/// Per-call work of the busy handlers.
const WORK: u64 = 2_000;
/// Messages each high-priority subscription has queued: more than it can
/// handle before the low ones reach their target.
const HIGH_BACKLOG: usize = 200_000;
/// The high-priority subscriptions: as many as the workers, so without aging
/// they would keep both workers for ever.
const HIGH: usize = 2;
/// The low-priority ones.
const LOW: usize = 6;
const WORKERS: usize = 2;

fn low_target() -> u64 {
    if std::env::var_os("RILL_PRIORITY_LONG").is_some() { 10_000 } else { 200 }
}

fn busy_options(priority: u8) -> SubscriptionOptions {
    SubscriptionOptions { start: StartPosition::Earliest, priority: Some(priority), ..Default::default() }
}

/// Two priority-7 subscriptions with endless work and six priority-0 ones
/// on a pool of two workers. The high ones wait for a worker far less than
/// the low ones (their 99th percentile below every low one's median), and
/// every low one still runs: each makes progress, and none waited more
/// takes than `PRIORITY_AGING_TAKES` plus the subscriptions queued before
/// it, which is the documented bound.
#[test]
fn an_overloaded_pool_runs_high_priority_first_and_starves_nobody() {
    let broker = Broker::new(BrokerConfig { worker_threads: Some(WORKERS), ..Default::default() }).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut subs = Vec::new();
    let mut low_counts = Vec::new();
    for i in 0..HIGH + LOW {
        let topic = format!("busy/{i}");
        broker.create_topic(&topic, &TopicOptions::default()).unwrap();
        let backlog = if i < HIGH { HIGH_BACKLOG } else { low_target() as usize * 2 };
        let records: Vec<Record<'_>> = (0..backlog).map(|_| Record::new(b"work")).collect();
        broker.publish_batch(&topic, &records).unwrap();
        let count = Arc::new(AtomicU64::new(0));
        let (c, s) = (count.clone(), stop.clone());
        let priority = if i < HIGH { 7 } else { 0 };
        subs.push(
            broker
                .subscribe(&topic, busy_options(priority), move |_| {
                    if !s.load(Ordering::Relaxed) {
                        spin(WORK);
                    }
                    c.fetch_add(1, Ordering::Relaxed);
                    Ack::Success
                })
                .unwrap(),
        );
        if i >= HIGH {
            low_counts.push(count);
        }
    }
    let target = low_target();
    wait_for("every low-priority subscription to make progress", || {
        low_counts.iter().all(|c| c.load(Ordering::Relaxed) >= target)
    });
    // One read of each: the waits of the whole run.
    let stats: Vec<_> = subs.iter().map(|s| s.stats()).collect();
    stop.store(true, Ordering::Relaxed);
    let (high, low) = stats.split_at(HIGH);
    for s in high {
        assert_eq!(s.priority, 7);
        assert!(s.queue_waits > 0, "{s:?}");
    }
    for s in low {
        assert_eq!(s.priority, 0);
        assert!(s.queue_waits > 0 && s.delivered >= target, "{s:?}");
        // At most the other subscriptions are queued before it.
        let bound = PRIORITY_AGING_TAKES + (HIGH + LOW - 1) as u64;
        assert!(s.queue_wait_max_takes <= bound, "waited {} takes, bound {bound}: {s:?}", s.queue_wait_max_takes);
    }
    let slowest_high = high.iter().map(|s| s.queue_wait_p99).max().unwrap();
    let fastest_low = low.iter().map(|s| s.queue_wait_p50).min().unwrap();
    let waits = |v: &[rill::SubscriptionStats]| {
        v.iter()
            .map(|s| (s.queue_waits, s.queue_wait_p50, s.queue_wait_p99, s.queue_wait_max_takes))
            .collect::<Vec<_>>()
    };
    assert!(
        slowest_high < fastest_low,
        "high p99 {slowest_high:?} not below low p50 {fastest_low:?}\nhigh: {:?}\nlow: {:?}",
        waits(high),
        waits(low)
    );
    // The highs' backlog outlasted the run: they were ready all along.
    assert!(high.iter().all(|s| s.lag > 0), "{high:?}");
    for s in subs {
        s.close();
    }
}

#[test]
fn a_priority_out_of_range_is_refused() {
    let broker = common::broker();
    common::topic(&broker, "t", 1);
    for bad in [8, 9, u8::MAX] {
        let options = SubscriptionOptions { priority: Some(bad), ..Default::default() };
        let err = broker.subscribe("t", options, |_| Ack::Success).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
        assert!(err.to_string().contains("priority"), "{err}");
        let options = TopicOptions { priority: Some(bad), ..TopicOptions::default() };
        let err = broker.create_topic(&format!("bad{bad}"), &options).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    }
    assert!(!broker.topics().iter().any(|t| t.starts_with("bad")), "{:?}", broker.topics());
    for ok in [0, 7] {
        let options = SubscriptionOptions { priority: Some(ok), ..Default::default() };
        assert_eq!(broker.subscribe("t", options, |_| Ack::Success).unwrap().stats().priority, ok);
    }
}

/// A subscription that sets no priority takes its topic's, if it names one
/// topic; one that sets its own keeps it; a wildcard one takes the default.
#[test]
fn a_topic_priority_is_its_subscriptions_default() {
    let broker = common::broker();
    broker.create_topic("urgent", &TopicOptions { priority: Some(6), ..TopicOptions::default() }).unwrap();
    common::topic(&broker, "plain", 1);
    let sub = |pattern: &str, priority: Option<u8>| {
        let options = SubscriptionOptions { priority, ..Default::default() };
        broker.subscribe(pattern, options, |_| Ack::Success).unwrap().stats().priority
    };
    assert_eq!(sub("urgent", None), 6);
    assert_eq!(sub("urgent", Some(1)), 1);
    assert_eq!(sub("plain", None), DEFAULT_PRIORITY);
    assert_eq!(DEFAULT_PRIORITY, 4);
    assert_eq!(sub("*", None), DEFAULT_PRIORITY);
}

/// A durable topic keeps its priority across a restart, both from the list
/// snapshot (the first change in a new directory writes one) and from the
/// journal entries of the changes after it.
#[test]
fn a_durable_topic_keeps_its_priority() {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let root = std::env::temp_dir().join(format!("rill-priority-{}-{nanos}", std::process::id()));
    let config = || BrokerConfig { data_dir: Some(root.clone()), ..Default::default() };
    {
        let broker = Broker::new(config()).unwrap();
        broker.create_topic("keep", &TopicOptions { priority: Some(2), ..TopicOptions::default() }).unwrap();
        broker.create_topic("none", &TopicOptions::default()).unwrap();
    }
    for _ in 0..2 {
        let broker = Broker::new(config()).unwrap();
        let sub = |t: &str| broker.subscribe(t, SubscriptionOptions::default(), |_| Ack::Success).unwrap();
        assert_eq!(sub("keep").stats().priority, 2);
        assert_eq!(sub("none").stats().priority, DEFAULT_PRIORITY);
        broker.create_topic("another", &TopicOptions { priority: Some(7), ..TopicOptions::default() }).ok();
        assert_eq!(sub("another").stats().priority, 7);
    }
    std::fs::remove_dir_all(&root).unwrap();
}
