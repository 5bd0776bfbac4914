//! Wildcard subscriptions under churn (issue 40, items 7 and 10, and the
//! record published to a brand-new topic while it is attached): the
//! reproductions as the issue gave them, sized to run in about a second.
//! Both races are timing-dependent here; the unit tests beside the fixes
//! hold each window open and fail every time without them
//! (`subscription/drain.rs`, `a_wildcard_drain_that_waits_for_runs_...`;
//! `subscription/close.rs`, `a_topic_created_while_a_subscription_closes_...`;
//! `subscription/core.rs`, `a_record_published_while_a_wildcard_...`).
//! `RILL_CHURN_ROUNDS=20000` makes these a soak.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use rill::{Ack, Broker, BrokerConfig, Record, SubscriptionOptions};

use common::{WAIT, earliest};

/// Rounds of churn: `RILL_CHURN_ROUNDS`, or a short default.
fn rounds() -> usize {
    std::env::var("RILL_CHURN_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(1000)
}

fn auto_broker() -> Broker {
    Broker::new(BrokerConfig { auto_create_topics: true, worker_threads: Some(2), ..BrokerConfig::default() }).unwrap()
}

/// Item 7: a long-lived `c/**` subscription, three publishers on 200
/// auto-created topics, topics created one by one with a message each, and
/// `c/**` and `c/*` subscriptions opened and closed in a loop: the long-lived
/// one must catch up. It used to stall on some partitions, with lag that
/// only a later publish there would drain.
#[test]
fn a_wildcard_subscription_reads_topics_created_while_siblings_close() {
    let rounds = rounds();
    let b = Arc::new(auto_broker());
    let long = b.subscribe("c/**", earliest(), |_| Ack::Success).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for t in 0..3 {
        let (b, stop) = (b.clone(), stop.clone());
        handles.push(thread::spawn(move || {
            let mut i = t;
            while !stop.load(Ordering::Relaxed) {
                b.publish(&format!("c/{}", i % 200), &Record::new(b"x")).unwrap();
                i += 3;
            }
        }));
    }
    {
        let (b, stop) = (b.clone(), stop.clone());
        handles.push(thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let s1 = b.subscribe("c/**", SubscriptionOptions::default(), |_| Ack::Success).unwrap();
                let s2 = b.subscribe("c/*", SubscriptionOptions::default(), |_| Ack::Success).unwrap();
                drop(s1);
                drop(s2);
            }
        }));
    }
    for i in 0..rounds {
        let name = format!("c/made/{i}");
        b.create_topic(&name, &rill::TopicOptions::default()).unwrap();
        b.publish(&name, &Record::new(b"m")).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    let caught_up = long.wait_idle(WAIT).unwrap();
    let stats = long.stats();
    assert!(caught_up, "the long-lived c/** subscription stalled: {stats:?}");
}

/// Item 10: named `soak/**` subscriptions churned from two threads, each
/// creating its own topics, publishing and deleting every 7th round: once
/// every subscription is closed, no partition may still list one.
#[test]
fn named_wildcard_subscriptions_churned_from_two_threads_leave_no_listener_behind() {
    let rounds = rounds();
    let b = Arc::new(rill::Broker::new(BrokerConfig::default()).unwrap());
    let options = rill::TopicOptions { retention_bytes: Some(64 << 10), ..rill::TopicOptions::with_partitions(2) };
    let threads: Vec<_> = (0..2)
        .map(|id| {
            let (b, options) = (b.clone(), options.clone());
            thread::spawn(move || {
                for i in 0..rounds {
                    let topic = format!("soak/{id}/{}", i % 4);
                    match b.create_topic(&topic, &options) {
                        Ok(()) | Err(rill::Error::TopicExists(_)) => {}
                        Err(e) => panic!("{e}"),
                    }
                    let opts = SubscriptionOptions { name: Some(format!("d{id}-{}", i % 3)), ..earliest() };
                    let sub = b.subscribe_batch("soak/**", opts, |m, _| m.len()).unwrap();
                    for _ in 0..20 {
                        b.publish(&topic, &Record::new(&[0u8; 100])).unwrap();
                    }
                    if i % 7 == 6 {
                        b.delete_topic(&topic).unwrap();
                    }
                    drop(sub);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(b.subscriptions().is_empty());
    for topic in b.topics() {
        let stats = b.topic_stats(&topic).unwrap();
        for p in &stats.partitions {
            assert_eq!(p.listeners, 0, "{topic}[{}] still has a listener after every subscription closed", p.partition);
        }
    }
}

/// A record published to a brand-new topic while the broker attaches a
/// `**` subscription to it (the topic is in the map before the
/// subscription listens to it) used to wait for the partition's next
/// publish, if a drain woken by another topic had looked at the new reader
/// first. Here three threads publish to each new topic at once (whichever
/// comes first auto-creates it) while a fourth keeps the drain busy on
/// another topic: every message is delivered and the subscription catches up.
#[test]
fn records_published_to_topics_as_they_are_auto_created_are_all_delivered() {
    const PUBLISHERS: usize = 3;
    let rounds = rounds();
    let b = Arc::new(auto_broker());
    let delivered = Arc::new(AtomicU64::new(0));
    let d = delivered.clone();
    let sub = b
        .subscribe("**", earliest(), move |_| {
            d.fetch_add(1, Ordering::Relaxed);
            Ack::Success
        })
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let busy = {
        let (b, stop) = (b.clone(), stop.clone());
        thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                b.publish("busy", &Record::new(b"b")).unwrap();
                n += 1;
            }
            n
        })
    };
    let start = Arc::new(Barrier::new(PUBLISHERS));
    let publishers: Vec<_> = (0..PUBLISHERS)
        .map(|_| {
            let (b, start) = (b.clone(), start.clone());
            thread::spawn(move || {
                for r in 0..rounds {
                    start.wait();
                    b.publish(&format!("fresh/{r}"), &Record::new(b"f")).unwrap();
                }
            })
        })
        .collect();
    for p in publishers {
        p.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let busy = busy.join().unwrap();
    let published = busy + (rounds * PUBLISHERS) as u64;
    let caught_up = sub.wait_idle(WAIT).unwrap();
    let stats = sub.stats();
    assert!(caught_up, "the ** subscription stalled: {stats:?}");
    assert_eq!(delivered.load(Ordering::Relaxed), published, "{stats:?}");
}
