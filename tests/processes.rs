//! Several processes, one data directory (issue 39, its third step): the
//! `Sharing` option, its directory locks, and push subscriptions in one
//! process delivered what other processes publish, woken without polling.
//!
//! The other processes are this test binary run again with
//! [`procs::ROLE`] set and only the one test selected (see
//! `tests/common/procs.rs`): the test then plays the child's part (a
//! publisher or a subscriber) and exits.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Child;
use std::sync::{Arc, Mutex};

use common::procs::{self, TempDir, child_role, config, expect_success, spawn};
use common::{WAIT, wait_for};
use rill::{Ack, Broker, BrokerConfig, Error, Record, Sharing, StartPosition, SubscriptionOptions, TopicOptions};

// A child's role ([`procs::ROLE`]): `publish:<who>`, `subscribe:<who>` or `one`.
/// The file the parent makes when the children may close.
const DONE: &str = "done";
/// The topic every process shares.
const TOPIC: &str = "orders";
/// Publisher processes in the N -> M test.
const PUBLISHERS: u32 = 3;
/// Subscriber processes in the N -> M test.
const SUBSCRIBERS: u32 = 2;
/// Messages each publisher process publishes, unless
/// `RILL_PROCESSES_MESSAGES` says more (the long version).
const MESSAGES: u32 = 2_000;

fn messages() -> u32 {
    procs::env_or("RILL_PROCESSES_MESSAGES", MESSAGES)
}

/// Small segments, so the processes roll them while the test runs.
fn topic_options() -> TopicOptions {
    TopicOptions { segment_bytes: Some(16 << 10), retention_bytes: None, ..TopicOptions::default() }
}

/// `(publisher, sequence number)` in a payload.
fn payload(who: u32, seq: u32) -> [u8; 8] {
    let mut p = [0u8; 8];
    p[..4].copy_from_slice(&who.to_le_bytes());
    p[4..].copy_from_slice(&seq.to_le_bytes());
    p
}

fn decode(p: &[u8]) -> (u32, u32) {
    (u32::from_le_bytes(p[..4].try_into().unwrap()), u32::from_le_bytes(p[4..8].try_into().unwrap()))
}

/// What a subscriber saw: `(offset, publisher, sequence)` in delivery order.
type Seen = Arc<Mutex<Vec<(u64, u32, u32)>>>;

/// Subscribes to [`TOPIC`] from its start, recording what it gets.
fn subscribe(broker: &Broker) -> (rill::Subscription, Seen) {
    let seen: Seen = Arc::default();
    let sink = seen.clone();
    let options = SubscriptionOptions { start: StartPosition::Earliest, ..SubscriptionOptions::default() };
    let sub = broker
        .subscribe(TOPIC, options, move |m| {
            let (who, seq) = decode(m.record().payload());
            sink.lock().unwrap().push((m.record().offset(), who, seq));
            Ack::Success
        })
        .unwrap();
    (sub, seen)
}

/// Creates [`TOPIC`], or joins it where another process made it: a
/// topic on disk when a broker opens is already its own (`TopicExists`),
/// one made since is joined by `create_topic`.
fn ensure_topic(broker: &Broker, options: &TopicOptions) {
    match broker.create_topic(TOPIC, options) {
        Ok(()) | Err(Error::TopicExists(_)) => {}
        Err(e) => panic!("{e}"),
    }
}

/// Every message of every publisher exactly once, each publisher's in its
/// order, at dense offsets from 0.
fn check_all(seen: &[(u64, u32, u32)], publishers: u32, each: u32) {
    assert_eq!(seen.len() as u64, u64::from(publishers * each), "every message, once");
    let mut next: HashMap<u32, u32> = HashMap::new();
    let mut offsets: Vec<u64> = Vec::with_capacity(seen.len());
    for &(offset, who, seq) in seen {
        let n = next.entry(who).or_insert(0);
        assert_eq!(seq, *n, "publisher {who}'s messages in its order, none lost or doubled");
        *n += 1;
        offsets.push(offset);
    }
    assert!(next.keys().all(|&w| w < publishers) && next.values().all(|&n| n == each), "{next:?}");
    offsets.sort_unstable();
    assert!(offsets.iter().enumerate().all(|(i, &o)| o == i as u64), "offsets dense from 0");
}

#[test]
fn processes_mode_needs_a_data_dir() {
    let config = BrokerConfig { sharing: Sharing::Processes, ..BrokerConfig::default() };
    match Broker::new(config) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("data_dir"), "{m}"),
        other => panic!("expected InvalidArgument, got {:?}", other.map(drop)),
    }
    assert_eq!(BrokerConfig::default().sharing, Sharing::Exclusive);
}

#[test]
fn a_directory_open_one_way_refuses_the_other_and_shares_with_its_own() {
    let dir = TempDir::new("modes");
    let exclusive = Broker::new(config(&dir.0, Sharing::Exclusive)).unwrap();
    // The refusal says why: the other broker holds it exclusively.
    match Broker::new(config(&dir.0, Sharing::Processes)) {
        Err(Error::Busy(why)) => assert!(why.contains("exclusively"), "{why}"),
        other => panic!("expected Busy, got {:?}", other.map(drop)),
    }
    assert!(matches!(Broker::new(config(&dir.0, Sharing::Exclusive)), Err(Error::Busy(_))));
    drop(exclusive);

    let first = Broker::new(config(&dir.0, Sharing::Processes)).unwrap();
    let second = Broker::new(config(&dir.0, Sharing::Processes)).unwrap();
    let third = Broker::new(config(&dir.0, Sharing::Processes)).unwrap();
    assert!(matches!(Broker::new(config(&dir.0, Sharing::Exclusive)), Err(Error::Busy(_))));
    drop((first, second));
    assert!(matches!(Broker::new(config(&dir.0, Sharing::Exclusive)), Err(Error::Busy(_))), "one is still open");
    drop(third);
    Broker::new(config(&dir.0, Sharing::Exclusive)).unwrap();
}

#[test]
fn an_anonymous_subscriptions_name_holds_its_pid() {
    let dir = TempDir::new("anon");
    let broker = Broker::new(config(&dir.0, Sharing::Processes)).unwrap();
    broker.create_topic(TOPIC, &TopicOptions::default()).unwrap();
    // Consumer groups are shared (processes_groups.rs), and shared
    // subscriptions (processes_shared.rs). An anonymous subscription's name
    // (and so its dead-letter topic's, in the shared directory) holds the
    // pid: subscription ids are per process.
    let (sub, seen) = subscribe(&broker);
    assert!(sub.name().starts_with(&format!("anon-{}-", std::process::id())), "{}", sub.name());
    broker.publish(TOPIC, &Record::new(&payload(0, 0))).unwrap();
    wait_for("the message", || seen.lock().unwrap().len() == 1);
}

#[test]
fn two_brokers_of_one_process_share_a_topic_both_ways() {
    let dir = TempDir::new("two-brokers");
    let a = Broker::new(config(&dir.0, Sharing::Processes)).unwrap();
    a.create_topic(TOPIC, &topic_options()).unwrap();
    let b = Broker::new(config(&dir.0, Sharing::Processes)).unwrap();
    assert_eq!(b.topics(), [TOPIC], "a topic on disk when the broker opens is there");
    let (sub_a, seen_a) = subscribe(&a);
    let (sub_b, seen_b) = subscribe(&b);
    for seq in 0..500 {
        a.publish(TOPIC, &Record::new(&payload(0, seq))).unwrap();
        b.publish(TOPIC, &Record::new(&payload(1, seq))).unwrap();
    }
    wait_for("every message at both", || seen_a.lock().unwrap().len() == 1000 && seen_b.lock().unwrap().len() == 1000);
    check_all(&seen_a.lock().unwrap(), 2, 500);
    check_all(&seen_b.lock().unwrap(), 2, 500);
    drop((sub_a, sub_b));
}

/// A child's part in [`publishers_and_subscribers_in_separate_processes`].
fn n_to_m_child(role: &str, dir: &Path) {
    let broker = Broker::new(config(dir, Sharing::Processes)).unwrap();
    // The topic the parent made was on disk when this broker opened.
    ensure_topic(&broker, &topic_options());
    let each = messages();
    match role.split_once(':') {
        Some(("publish", who)) => {
            let who: u32 = who.parse().unwrap();
            for seq in 0..each {
                broker.publish(TOPIC, &Record::new(&payload(who, seq))).unwrap();
            }
            // Open until every subscriber is done: a broker's close wakes the
            // directory's doorbells, so closing sooner could deliver for a
            // missing wake.
            wait_for("the parent's go-ahead", || dir.join(DONE).exists());
        }
        Some(("subscribe", who)) => {
            let (sub, seen) = subscribe(&broker);
            procs::mark(dir, &format!("ready-{who}"));
            let total = (PUBLISHERS * each) as usize;
            wait_for("every message", || seen.lock().unwrap().len() >= total);
            drop(sub);
            check_all(&seen.lock().unwrap(), PUBLISHERS, each);
        }
        _ => panic!("unknown role {role}"),
    }
}

#[test]
fn publishers_and_subscribers_in_separate_processes() {
    const TEST: &str = "publishers_and_subscribers_in_separate_processes";
    if let Some((role, dir)) = child_role() {
        n_to_m_child(&role, &dir);
        return;
    }
    let dir = TempDir::new("n-to-m");
    let broker = Broker::new(config(&dir.0, Sharing::Processes)).unwrap();
    broker.create_topic(TOPIC, &topic_options()).unwrap();
    let (sub, seen) = subscribe(&broker);
    let subscribers: Vec<Child> = (0..SUBSCRIBERS).map(|i| spawn(TEST, &format!("subscribe:{i}"), &dir.0)).collect();
    // Subscribed (and so idle, waiting) before anything is published.
    wait_for("the subscribers", || (0..SUBSCRIBERS).all(|i| dir.0.join(format!("ready-{i}")).exists()));
    let publishers: Vec<Child> = (0..PUBLISHERS).map(|i| spawn(TEST, &format!("publish:{i}"), &dir.0)).collect();
    // The subscribers finish while every publisher is still open (see the
    // publisher's part), so only the wakes of their publishes deliver.
    procs::check_then_release(
        || {
            for (i, s) in subscribers.into_iter().enumerate() {
                expect_success(s, &format!("subscriber {i}"));
            }
        },
        || {
            procs::mark(&dir.0, DONE);
            for (i, p) in publishers.into_iter().enumerate() {
                expect_success(p, &format!("publisher {i}"));
            }
        },
    );
    // The parent listened too, from before the first publish.
    let total = (PUBLISHERS * messages()) as usize;
    wait_for("every message in the parent", || seen.lock().unwrap().len() >= total);
    drop(sub);
    check_all(&seen.lock().unwrap(), PUBLISHERS, messages());
}

#[test]
fn an_idle_subscriber_is_woken_by_one_publish_in_another_process() {
    const TEST: &str = "an_idle_subscriber_is_woken_by_one_publish_in_another_process";
    if let Some((_, dir)) = child_role() {
        let broker = Broker::new(config(&dir, Sharing::Processes)).unwrap();
        ensure_topic(&broker, &TopicOptions::default());
        broker.publish(TOPIC, &Record::new(&payload(7, 0))).unwrap();
        // Open until the parent has the message: a broker's close wakes the
        // directory's doorbells, which would deliver it without the
        // publish's own wake.
        wait_for("the parent's go-ahead", || dir.join(DONE).exists());
        return;
    }
    let dir = TempDir::new("one");
    let broker = Broker::new(config(&dir.0, Sharing::Processes)).unwrap();
    broker.create_topic(TOPIC, &TopicOptions::default()).unwrap();
    let (sub, seen) = subscribe(&broker);
    assert!(sub.wait_idle(WAIT).unwrap(), "idle before the publish");
    let child = spawn(TEST, "one", &dir.0);
    // Nothing is published after the child's one message, and the child
    // stays open meanwhile: only the publish's wake can deliver it.
    procs::check_then_release(
        || wait_for("the idle subscriber to be woken", || !seen.lock().unwrap().is_empty()),
        || {
            procs::mark(&dir.0, DONE);
            expect_success(child, "the publisher");
        },
    );
    assert_eq!(*seen.lock().unwrap(), [(0, 7, 0)]);
}

/// A streaming topic's trimmed segment files are reused across processes
/// ("Recycling across processes" in `src/log/file/mod.rs`): a publisher
/// in another process streams through a topic whose retention holds four
/// segments, a `Block` subscriber here keeps it close (so it misses
/// nothing), and over about a hundred rolls most segments are files used
/// before: their header's generation (`src/log/file/format.rs`), which a
/// reuse counts up, is not 0. Every message arrives once, in order.
#[test]
fn a_streaming_topics_trimmed_files_are_reused_by_the_processes() {
    const TEST: &str = "a_streaming_topics_trimmed_files_are_reused_by_the_processes";
    /// About a hundred segments of 16 KiB (8-byte payloads, framed).
    const STREAMED: u32 = 40_000;
    /// Where a segment file's header keeps its generation (little-endian).
    const GENERATION_AT: usize = 52;
    if let Some((role, dir)) = child_role() {
        assert_eq!(role, "stream");
        let broker = Broker::new(config(&dir, Sharing::Processes)).unwrap();
        for seq in 0..STREAMED {
            broker.publish(TOPIC, &Record::new(&payload(0, seq))).unwrap();
        }
        wait_for("the parent's go-ahead", || dir.join(DONE).exists());
        return;
    }
    let dir = TempDir::new("recycle");
    let broker = Broker::new(config(&dir.0, Sharing::Processes)).unwrap();
    let options =
        TopicOptions { segment_bytes: Some(16 << 10), retention_bytes: Some(64 << 10), ..TopicOptions::default() };
    broker.create_topic(TOPIC, &options).unwrap();
    // The topic's one partition: topics/<its number>/0.
    let topics = dir.0.join("topics");
    let number = std::fs::read_dir(&topics).unwrap().next().expect("the topic's directory").unwrap().file_name();
    let partition = topics.join(number).join("0");
    // Each segment file seen, by name: its header's generation. The
    // handler looks every `LOOK` messages: a segment lives for four
    // segments' worth of publishing at least (its retention), and the
    // publisher is at most `lag_limit` messages ahead of the handler, so a
    // look that often sees every one.
    const LOOK: usize = 100;
    let segments: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let seen: Seen = Arc::default();
    let block = SubscriptionOptions {
        start: StartPosition::Earliest,
        overflow: rill::Overflow::Block,
        lag_limit: Some(500),
        ..SubscriptionOptions::default()
    };
    let (sink, found, look) = (seen.clone(), segments.clone(), partition.clone());
    let sub = broker
        .subscribe(TOPIC, block, move |m| {
            let (who, seq) = decode(m.record().payload());
            let mut seen = sink.lock().unwrap();
            seen.push((m.record().offset(), who, seq));
            if seen.len() % LOOK == 1 {
                let mut found = found.lock().unwrap();
                for entry in std::fs::read_dir(&look).unwrap() {
                    let name = entry.unwrap().file_name().into_string().unwrap();
                    let mut header = [0u8; GENERATION_AT + 8];
                    // Trimmed meanwhile: gone; a look before or after saw it.
                    if name.ends_with(".seg")
                        && let Ok(mut file) = std::fs::File::open(look.join(&name))
                        && std::io::Read::read_exact(&mut file, &mut header).is_ok()
                    {
                        let generation = u64::from_le_bytes(header[GENERATION_AT..].try_into().unwrap());
                        found.insert(name, generation);
                    }
                }
            }
            Ack::Success
        })
        .unwrap();
    let child = spawn(TEST, "stream", &dir.0);
    wait_for("every message", || seen.lock().unwrap().len() >= STREAMED as usize);
    procs::mark(&dir.0, DONE);
    expect_success(child, "the publisher");
    drop(sub);
    check_all(&seen.lock().unwrap(), 1, STREAMED);
    let segments = segments.lock().unwrap();
    assert!(segments.len() >= 50, "{} segments seen: the topic did not roll as it should", segments.len());
    let reused = segments.values().filter(|&&g| g > 0).count();
    // Without reuse no file has a generation past 0.
    assert!(reused * 2 >= segments.len(), "{reused} of {} segments in reused files", segments.len());
}
