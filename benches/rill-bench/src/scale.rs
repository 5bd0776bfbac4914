//! `--scenario scale` (issue 43): how rill's costs grow with the number of
//! topics, of subscriptions on one topic and of topics under one wildcard,
//! swept by powers of ten and printed as two tables (and drawn with `--plot`).
//!
//! Topics: one broker grows decade by decade (1, 10, ..., up to 10^5, or
//! 10^6 with `--scale-full`), single-partition topics with the default
//! options. At each decade the sweep measures
//!
//! * the time per `create_topic` of the topics that decade added, and the
//!   CPU time per create, of the creating thread and of the whole process:
//!   on a loaded machine the wall time also counts the time the thread
//!   waited for a core, which grows with the decade's length and the
//!   other load, not with what a create does; the thread's CPU time does
//!   not (it still counts the cache and TLB misses of a bigger working
//!   set), and the process's beside it shows any other thread of the
//!   broker working meanwhile;
//! * the resident memory per idle topic holding one message: the growth of
//!   the process's resident set (`/proc/self/statm`) over creating the
//!   decade's topics and publishing one message of `--payload` bytes to each,
//!   over the topics added (at the small decades this is mostly noise: a
//!   page or two of anything else lands in it);
//! * the cost of a publish by name (`Broker::publish`, the map lookup
//!   included) to one topic among all of them, repeated, on that topic
//!   filled past its retention first (so a first fill's page faults are
//!   not counted as the lookup's);
//! * the time from a publish to one topic to its delivery to a `**`
//!   subscription attached to every topic (the subscription is made, and
//!   closed, outside the timing; its handler bumps a counter the publisher
//!   waits on, so the times are one message in flight at a time), with
//!   the process's voluntary context switches per delivery beside it
//!   (about one when the pool's worker slept before each delivery, so
//!   that each includes a wake-up).
//!
//! Subscriptions: a fresh broker, one topic, 10, 100, ..., 10 000
//! subscriptions on it (the pool drains them); each step publishes enough
//! messages for about two million deliveries and reports the time from the
//! first publish to the last delivery per delivery.
//!
//! The figures are medians of one run on a shared machine: read the ratios
//! between rows of one run, not the absolute figures.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rill::{Ack, Broker, BrokerConfig, Record, StartPosition, SubscriptionOptions, TopicOptions};
use serde::Serialize;

use crate::plot::Series;
use crate::stats::median;

/// Most topics without `--scale-full`.
pub const QUICK_TOPICS: usize = 100_000;
/// Most topics with `--scale-full`.
pub const FULL_TOPICS: usize = 1_000_000;
/// Most subscriptions on one topic.
pub const MAX_SUBSCRIPTIONS: usize = 10_000;
/// Publishes by name timed at each decade.
const PUBLISHES: usize = 200_000;
/// Messages timed through the `**` subscription at each decade.
const WILDCARD_MESSAGES: usize = 2_000;
/// Deliveries each step of the subscription sweep aims at.
const DELIVERIES: usize = 2_000_000;
/// Longest the sweep waits for a delivery before it gives up on a step.
const WAIT: Duration = Duration::from_secs(60);

/// One decade of the topic sweep.
#[derive(Debug, Clone, Serialize)]
pub struct TopicRow {
    /// Topics in the broker.
    pub topics: usize,
    /// Microseconds per `create_topic`, over the topics this decade added.
    pub create_us: f64,
    /// The creating thread's CPU microseconds (user and system) per
    /// `create_topic`, over the same creates.
    pub create_cpu_us: f64,
    /// The whole process's CPU microseconds per `create_topic` over the same
    /// creates (above `create_cpu_us` when another thread worked meanwhile).
    pub create_process_cpu_us: f64,
    /// Resident bytes per topic added, each holding one message.
    pub rss_per_topic: f64,
    /// Nanoseconds per publish by name to one of the topics.
    pub publish_ns: f64,
    /// Median microseconds from a publish to its delivery to a `**`
    /// subscription over every topic.
    pub wildcard_us: f64,
    /// The process's voluntary context switches per such delivery: about
    /// one when the pool's worker slept before each (then every delivery
    /// includes a wake-up), about none when it was awake.
    pub wildcard_switches: f64,
}

/// One step of the subscription sweep.
#[derive(Debug, Clone, Serialize)]
pub struct SubscriptionRow {
    /// Subscriptions on the topic.
    pub subscriptions: usize,
    /// Messages published.
    pub messages: usize,
    /// Deliveries counted (messages x subscriptions when none was lost).
    pub delivered: u64,
    /// Nanoseconds from the first publish to the last delivery, per delivery.
    pub ns_per_delivery: f64,
}

/// What the scale scenario measured.
#[derive(Debug, Clone, Serialize)]
pub struct Scale {
    /// Payload bytes of every message.
    pub payload: usize,
    /// The topic sweep, by decade.
    pub topics: Vec<TopicRow>,
    /// The subscription sweep, by decade.
    pub subscriptions: Vec<SubscriptionRow>,
}

/// The name of topic `i` of the sweep.
pub fn name(i: usize) -> String {
    format!("scale/{}/{i}", i % 1000)
}

/// The process's resident set, in bytes (Linux; 0 elsewhere).
fn resident_bytes() -> u64 {
    let Ok(statm) = std::fs::read_to_string("/proc/self/statm") else { return 0 };
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}

/// CPU time (user and system) of the calling thread (`who` =
/// `RUSAGE_THREAD`) or the whole process (`RUSAGE_SELF`), in seconds.
fn cpu_seconds(who: libc::c_int) -> f64 {
    let Some(usage) = usage(who) else { return 0.0 };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// The process's voluntary context switches so far: a pool worker that
/// sleeps between deliveries makes one a delivery.
pub fn voluntary_switches() -> i64 {
    usage(libc::RUSAGE_SELF).map_or(0, |u| u.ru_nvcsw)
}

/// `getrusage(who)`: `RUSAGE_THREAD` or `RUSAGE_SELF`.
fn usage(who: libc::c_int) -> Option<libc::rusage> {
    // SAFETY: an all-zero `rusage` is a valid value of the plain C struct
    // that `getrusage` fills in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable `rusage`; `who` is one of the two
    // constants above.
    (unsafe { libc::getrusage(who, &mut usage) } == 0).then_some(usage)
}

/// Waits until `counter` reaches `target`, spinning then yielding; false
/// after [`WAIT`].
fn wait_for(counter: &AtomicU64, target: u64) -> bool {
    let deadline = Instant::now() + WAIT;
    let mut spins = 0u32;
    // Acquire: pairs with the handler's Release increment (the count is all
    // that is read, but a delivery counted is a delivery finished).
    while counter.load(Ordering::Acquire) < target {
        if spins < 1 << 10 {
            spins += 1;
            std::hint::spin_loop();
        } else if Instant::now() > deadline {
            return false;
        } else {
            std::thread::yield_now();
        }
    }
    true
}

/// Runs both sweeps: topics up to `max_topics`, subscriptions up to
/// `max_subscriptions`. `progress` is told each step as it starts.
pub fn run(
    max_topics: usize,
    max_subscriptions: usize,
    payload: usize,
    progress: &mut dyn FnMut(&str),
) -> rill::Result<Scale> {
    let topics = topic_sweep(max_topics, payload, progress)?;
    let subscriptions = subscription_sweep(max_subscriptions, payload, progress)?;
    Ok(Scale { payload, topics, subscriptions })
}

fn topic_sweep(max_topics: usize, payload: usize, progress: &mut dyn FnMut(&str)) -> rill::Result<Vec<TopicRow>> {
    let broker = Broker::new(BrokerConfig::default())?;
    let options = TopicOptions::default();
    let body = vec![0x5a; payload];
    let mut rows = Vec::new();
    let mut created = 0;
    let mut n = 1;
    while n <= max_topics {
        progress(&format!("scale: {n} topics"));
        let names: Vec<String> = (created..n).map(name).collect();
        let rss_before = resident_bytes();
        let (thread_before, process_before) = (cpu_seconds(libc::RUSAGE_THREAD), cpu_seconds(libc::RUSAGE_SELF));
        let started = Instant::now();
        for t in &names {
            broker.create_topic(t, &options)?;
        }
        let per_create = 1e6 / names.len() as f64;
        let create_us = started.elapsed().as_secs_f64() * per_create;
        let create_cpu_us = (cpu_seconds(libc::RUSAGE_THREAD) - thread_before) * per_create;
        let create_process_cpu_us = (cpu_seconds(libc::RUSAGE_SELF) - process_before) * per_create;
        for t in &names {
            broker.publish(t, &Record::new(&body))?;
        }
        let rss_per_topic = resident_bytes().saturating_sub(rss_before) as f64 / names.len() as f64;
        created = n;

        // Publish by name, the lookup included, to one topic of them all.
        // The topic is first filled past its retention, so that what is
        // timed is the lookup and a warm publish at every decade, not the
        // first fill of a new topic's memory (the `fresh` scenario's
        // subject), and then warmed up by name, so the first decade pays
        // no first-use costs.
        let target = name(n / 2);
        let retention = options.retention_bytes.unwrap_or(rill::log::DEFAULT_RETENTION_BYTES);
        crate::systems::rill_sys::fill_past_retention(&broker.publisher(&target)?, 1, payload, retention)?;
        for _ in 0..PUBLISHES / 10 {
            broker.publish(&target, &Record::new(&body))?;
        }
        let started = Instant::now();
        for _ in 0..PUBLISHES {
            broker.publish(&target, &Record::new(&body))?;
        }
        let publish_ns = started.elapsed().as_secs_f64() * 1e9 / PUBLISHES as f64;

        // One message at a time through a `**` subscription over them all.
        let delivered = Arc::new(AtomicU64::new(0));
        let counter = delivered.clone();
        let options = SubscriptionOptions { start: StartPosition::Latest, ..Default::default() };
        let sub = broker.subscribe("scale/**", options, move |_| {
            // Release: pairs with the Acquire in `wait_for`.
            counter.fetch_add(1, Ordering::Release);
            Ack::Success
        })?;
        let mut times = Vec::with_capacity(WILDCARD_MESSAGES);
        let switches = voluntary_switches();
        for i in 0..WILDCARD_MESSAGES {
            // Spread over the topics, the same ones at every decade they exist.
            let t = name((i * 7919) % n);
            let started = Instant::now();
            broker.publish(&t, &Record::new(&body))?;
            if !wait_for(&delivered, i as u64 + 1) {
                return Err(rill::Error::Timeout);
            }
            times.push(started.elapsed().as_secs_f64() * 1e6);
        }
        let switches = (voluntary_switches() - switches) as f64 / WILDCARD_MESSAGES as f64;
        sub.close();
        rows.push(TopicRow {
            topics: n,
            create_us,
            create_cpu_us,
            create_process_cpu_us,
            rss_per_topic,
            publish_ns,
            wildcard_us: median(&times),
            wildcard_switches: switches,
        });
        n *= 10;
    }
    broker.close();
    Ok(rows)
}

fn subscription_sweep(
    max_subscriptions: usize,
    payload: usize,
    progress: &mut dyn FnMut(&str),
) -> rill::Result<Vec<SubscriptionRow>> {
    let broker = Broker::new(BrokerConfig::default())?;
    broker.create_topic("scale/subs", &TopicOptions::default())?;
    let body = vec![0x5a; payload];
    let delivered = Arc::new(AtomicU64::new(0));
    let mut subs = Vec::new();
    let mut rows = Vec::new();
    let mut s = 10;
    while s <= max_subscriptions {
        progress(&format!("scale: {s} subscriptions on one topic"));
        while subs.len() < s {
            let counter = delivered.clone();
            let options = SubscriptionOptions { start: StartPosition::Latest, ..Default::default() };
            subs.push(broker.subscribe("scale/subs", options, move |_| {
                // Release: pairs with the Acquire in `wait_for`.
                counter.fetch_add(1, Ordering::Release);
                Ack::Success
            })?);
        }
        let messages = (DELIVERIES / s).max(100);
        // Acquire: every delivery of the previous step is counted.
        let before = delivered.load(Ordering::Acquire);
        let target = before + (messages * s) as u64;
        let started = Instant::now();
        for _ in 0..messages {
            broker.publish("scale/subs", &Record::new(&body))?;
        }
        wait_for(&delivered, target);
        let elapsed = started.elapsed();
        // Acquire: as above.
        let count = delivered.load(Ordering::Acquire) - before;
        rows.push(SubscriptionRow {
            subscriptions: s,
            messages,
            delivered: count,
            ns_per_delivery: elapsed.as_secs_f64() * 1e9 / count.max(1) as f64,
        });
        s *= 10;
    }
    for sub in &subs {
        sub.close();
    }
    broker.close();
    Ok(rows)
}

impl Scale {
    /// The two tables, with each row's ratio to the first.
    pub fn table(&self) -> String {
        let mut o = String::new();
        o.push_str(&format!(
            "Topics (single-partition, default options; {} B payloads; ratios to the first row):\n\n",
            self.payload
        ));
        o.push_str(&format!(
            "{:>9}  {:>16}  {:>23}  {:>16}  {:>20}  {:>20}  {:>22}  {:>10}\n",
            "topics",
            "create us/topic",
            "create CPU us (thread)",
            "(process)",
            "RSS B/idle topic",
            "publish by name ns",
            "** delivery us (p50)",
            "csw/deliv"
        ));
        let first = self.topics.first();
        let ratio = |v: f64, base: Option<f64>| match base {
            Some(b) if b > 0.0 => format!("{:.2}x", v / b),
            _ => "-".into(),
        };
        for r in &self.topics {
            o.push_str(&format!(
                "{:>9}  {:>8.2} {:>7}  {:>15.2} {:>7}  {:>16.2}  {:>20.0}  {:>11.1} {:>8}  {:>13.1} {:>8}  {:>10.2}\n",
                r.topics,
                r.create_us,
                ratio(r.create_us, first.map(|f| f.create_us)),
                r.create_cpu_us,
                ratio(r.create_cpu_us, first.map(|f| f.create_cpu_us)),
                r.create_process_cpu_us,
                r.rss_per_topic,
                r.publish_ns,
                ratio(r.publish_ns, first.map(|f| f.publish_ns)),
                r.wildcard_us,
                ratio(r.wildcard_us, first.map(|f| f.wildcard_us)),
                r.wildcard_switches,
            ));
        }
        if let Some(line) = self.creation_growth() {
            o.push_str(&line);
        }
        o.push_str(&format!("\nSubscriptions on one topic ({} B payloads):\n\n", self.payload));
        o.push_str(&format!(
            "{:>13}  {:>9}  {:>11}  {:>16}  {:>8}\n",
            "subscriptions", "messages", "delivered", "ns per delivery", "ratio"
        ));
        let first = self.subscriptions.first().map(|f| f.ns_per_delivery);
        for r in &self.subscriptions {
            o.push_str(&format!(
                "{:>13}  {:>9}  {:>11}  {:>16.1}  {:>8}\n",
                r.subscriptions,
                r.messages,
                r.delivered,
                r.ns_per_delivery,
                ratio(r.ns_per_delivery, first)
            ));
        }
        o
    }

    /// The time to create all the topics against the time to create the
    /// first tenth of them (issue 43's "creating the n-th topic costs
    /// O(log n) or better": at most 12x from 10^5 to 10^6), by wall clock
    /// and by the creating thread's CPU time; `None` below two decades.
    pub fn creation_growth(&self) -> Option<String> {
        let [.., before, last] = self.topics.as_slice() else { return None };
        // Seconds to create the first `upto` topics, decade by decade.
        let total = |upto: usize, per: &dyn Fn(&TopicRow) -> f64| {
            let mut made = 0;
            let mut secs = 0.0;
            for r in self.topics.iter().take_while(|r| r.topics <= upto) {
                secs += per(r) * 1e-6 * (r.topics - made) as f64;
                made = r.topics;
            }
            secs
        };
        let (wall, cpu) = (|r: &TopicRow| r.create_us, |r: &TopicRow| r.create_cpu_us);
        let ratio = |a: f64, b: f64| if b > 0.0 { format!("{:.2}x", a / b) } else { "-".into() };
        Some(format!(
            "\nCreating {} topics: {:.2} s wall, {:.2} s CPU (thread); {} and {} the time of the first {}\n",
            last.topics,
            total(last.topics, &wall),
            total(last.topics, &cpu),
            ratio(total(last.topics, &wall), total(before.topics, &wall)),
            ratio(total(last.topics, &cpu), total(before.topics, &cpu)),
            before.topics,
        ))
    }

    /// The topic sweep's curves, for `--plot`: each cost in nanoseconds
    /// against the number of topics.
    pub fn series(&self) -> Vec<Series> {
        let curve = |name: &str, f: &dyn Fn(&TopicRow) -> f64| Series {
            name: name.into(),
            points: self.topics.iter().map(|r| (r.topics, f(r))).collect(),
        };
        vec![
            curve("create_topic", &|r| r.create_us * 1e3),
            curve("publish by name", &|r| r.publish_ns),
            curve("** delivery (p50)", &|r| r.wildcard_us * 1e3),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_sweep_fills_every_row() {
        let mut steps = Vec::new();
        let scale = run(100, 100, 16, &mut |s| steps.push(s.to_owned())).unwrap();
        assert_eq!(scale.topics.iter().map(|r| r.topics).collect::<Vec<_>>(), [1, 10, 100]);
        assert_eq!(scale.subscriptions.iter().map(|r| r.subscriptions).collect::<Vec<_>>(), [10, 100]);
        for r in &scale.subscriptions {
            assert_eq!(r.delivered, (r.messages * r.subscriptions) as u64, "nothing lost: {r:?}");
        }
        assert!(scale.topics.iter().all(|r| r.create_us > 0.0 && r.publish_ns > 0.0 && r.wildcard_us > 0.0));
        // CPU time is counted in clock ticks: a short decade may show none.
        assert!(scale.topics.iter().all(|r| r.create_cpu_us >= 0.0 && r.create_process_cpu_us >= 0.0));
        let growth = scale.creation_growth().expect("three decades");
        assert!(growth.contains("Creating 100 topics") && growth.contains("the first 10"), "{growth}");
        assert_eq!(steps.len(), 5);
        let table = scale.table();
        assert!(table.contains("publish by name ns") && table.contains("create CPU us"), "{table}");
        assert!(table.contains(&growth), "{table}");
        assert_eq!(scale.series().len(), 3);
        assert!(scale.series().iter().all(|s| s.points.len() == 3));
    }
}
