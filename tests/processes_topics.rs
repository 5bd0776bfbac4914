//! Several processes, one data directory (issue 39, its fifth step):
//! topics that one process creates or deletes exist or vanish for every
//! process; a wildcard subscription in one process picks up a topic another
//! process created and gets every message published to it.
//!
//! The other processes are this test binary run again with [`procs::ROLE`]
//! set and only the one test selected, as in `tests/processes.rs` (see
//! `tests/common/procs.rs`). Parent and child hand over through files in
//! the data directory, waited for with a deadline.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::procs::{self, TempDir, child_role, expect_success, mark, spawn, wait_child_mark, wait_mark};
use common::wait_for;
use rill::{Ack, Broker, BrokerConfig, Error, Record, Sharing, StartPosition, SubscriptionOptions, TopicOptions};

/// Messages the creating process publishes, unless
/// `RILL_PROCESSES_MESSAGES` says more (the long version).
const MESSAGES: u32 = 2_000;

fn messages() -> u32 {
    procs::env_or("RILL_PROCESSES_MESSAGES", MESSAGES)
}

fn config(dir: &Path) -> BrokerConfig {
    procs::config(dir, Sharing::Processes)
}

/// What a subscription saw: `(topic, offset, payload)` in delivery order.
type Seen = Arc<Mutex<Vec<(String, u64, u32)>>>;

/// Subscribes to `pattern` (from its latest message), recording what it gets.
fn subscribe(broker: &Broker, pattern: &str) -> (rill::Subscription, Seen) {
    subscribe_from(broker, pattern, StartPosition::Latest)
}

fn subscribe_from(broker: &Broker, pattern: &str, start: StartPosition) -> (rill::Subscription, Seen) {
    let seen: Seen = Arc::default();
    let sink = seen.clone();
    let options = SubscriptionOptions { start, ..SubscriptionOptions::default() };
    let sub = broker
        .subscribe(pattern, options, move |m| {
            let n = u32::from_le_bytes(m.record().payload()[..4].try_into().unwrap());
            sink.lock().unwrap().push((m.topic().to_owned(), m.record().offset(), n));
            Ack::Success
        })
        .unwrap();
    (sub, seen)
}

#[test]
fn a_wildcard_in_one_process_gets_every_message_of_a_topic_another_creates() {
    if let Some((role, dir)) = child_role() {
        assert_eq!(role, "create");
        let broker = Broker::new(config(&dir)).unwrap();
        broker.create_topic("orders/eu", &TopicOptions::default()).unwrap();
        // Published at once: the other process has not joined the topic
        // yet, and must still get every one of these.
        for n in 0..messages() {
            broker.publish("orders/eu", &Record::new(&n.to_le_bytes())).unwrap();
        }
        return;
    }
    let dir = TempDir::new("wildcard");
    let broker = Broker::new(config(&dir.0)).unwrap();
    // Started at the latest message: a topic it picks up is read from its start anyway.
    let (sub, seen) = subscribe(&broker, "orders/*");
    let child = spawn("a_wildcard_in_one_process_gets_every_message_of_a_topic_another_creates", "create", &dir.0);
    let n = messages();
    wait_for("every message of the new topic", || seen.lock().unwrap().len() >= n as usize);
    expect_success(child, "the creating process");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), n as usize, "every message, once");
    for (i, (topic, offset, payload)) in seen.iter().enumerate() {
        assert_eq!((topic.as_str(), *offset, *payload), ("orders/eu", i as u64, i as u32), "in order, none missed");
    }
    assert_eq!(broker.topics(), ["orders/eu"], "the topic exists here too");
    drop(sub);
}

#[test]
fn publishing_by_name_to_a_topic_another_process_created_needs_no_create() {
    if let Some((role, dir)) = child_role() {
        assert_eq!(role, "create");
        let broker = Broker::new(config(&dir)).unwrap();
        broker.create_topic("prices", &TopicOptions::with_partitions(3)).unwrap();
        broker.publish("prices", &Record::new(&7u32.to_le_bytes())).unwrap();
        return;
    }
    let dir = TempDir::new("by-name");
    // Opened before the topic exists, with no auto-creation: a publish
    // by name can only work by joining what the other process listed.
    let broker = Broker::new(config(&dir.0)).unwrap();
    assert!(!BrokerConfig::default().auto_create_topics);
    assert!(matches!(broker.publish("prices", &Record::new(&0u32.to_le_bytes())), Err(Error::NoSuchTopic(_))));
    let child = spawn("publishing_by_name_to_a_topic_another_process_created_needs_no_create", "create", &dir.0);
    expect_success(child, "the creating process");
    broker.publish("prices", &Record::new(&8u32.to_le_bytes())).unwrap();
    let stats = broker.topic_stats("prices").unwrap();
    assert_eq!(stats.partitions.len(), 3, "joined with the options it was created with");
    let (_sub, seen) = subscribe_from(&broker, "prices", StartPosition::Earliest);
    wait_for("both messages", || seen.lock().unwrap().len() == 2);
    let mut payloads: Vec<u32> = seen.lock().unwrap().iter().map(|s| s.2).collect();
    payloads.sort_unstable();
    assert_eq!(payloads, [7, 8]);
}

#[test]
fn a_topic_deleted_in_one_process_vanishes_in_another() {
    if let Some((role, dir)) = child_role() {
        assert_eq!(role, "watch");
        let broker = Broker::new(config(&dir)).unwrap();
        assert_eq!(broker.topics(), ["old"], "on disk when this broker opened");
        let (literal, _) = subscribe(&broker, "old");
        let (wildcard, _) = subscribe(&broker, "*");
        mark(&dir, "subscribed");
        // The other process deletes it: the literal subscription is closed
        // as by a local delete, the wildcard one stays, and the topic is gone.
        wait_for("the literal subscription closed", || literal.is_closed());
        assert!(!wildcard.is_closed());
        assert!(broker.topics().is_empty());
        assert!(matches!(broker.publish("old", &Record::new(&0u32.to_le_bytes())), Err(Error::NoSuchTopic(_))));
        // Created again there: a new topic, from offset 0, which the
        // wildcard picks up.
        mark(&dir, "deleted-seen");
        wait_mark(&dir, "recreated");
        wait_for("the topic made again", || broker.topics() == ["old"]);
        let offset = broker.publish("old", &Record::new(&1u32.to_le_bytes())).unwrap();
        assert_eq!(offset.offset, 0, "a new topic, with none of the old one's messages");
        return;
    }
    let dir = TempDir::new("delete");
    let broker = Broker::new(config(&dir.0)).unwrap();
    broker.create_topic("old", &TopicOptions::default()).unwrap();
    for n in 0..10u32 {
        broker.publish("old", &Record::new(&n.to_le_bytes())).unwrap();
    }
    let mut child = spawn("a_topic_deleted_in_one_process_vanishes_in_another", "watch", &dir.0);
    if !wait_child_mark(&dir.0, "subscribed", &mut child) {
        expect_success(child, "the watching process");
        panic!("the watching process exited before it subscribed");
    }
    broker.delete_topic("old").unwrap();
    assert!(broker.topics().is_empty());
    if !wait_child_mark(&dir.0, "deleted-seen", &mut child) {
        expect_success(child, "the watching process");
        panic!("the watching process exited before it saw the deletion");
    }
    broker.create_topic("old", &TopicOptions::default()).unwrap();
    mark(&dir.0, "recreated");
    expect_success(child, "the watching process");
    let names: Vec<_> = std::fs::read_dir(dir.0.join("topics")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 1, "the deleted topic's files are gone, the new one's are there: {names:?}");
}

// Two brokers of one process on one data directory stand in for two
// processes below: each has its own topic map, and meets the other only
// through the directory's topic list, as processes do.

#[test]
fn creating_a_topic_another_process_created_is_topic_exists_and_joins_it() {
    let dir = TempDir::new("create-exists");
    let first = Broker::new(config(&dir.0)).unwrap();
    let second = Broker::new(config(&dir.0)).unwrap();
    first.create_topic("orders", &TopicOptions::with_partitions(3)).unwrap();
    // Other options, as another process's caller might ask for: not used,
    // and said so.
    match second.create_topic("orders", &TopicOptions::with_partitions(1)) {
        Err(Error::TopicExists(name)) => assert_eq!(name, "orders"),
        other => panic!("expected TopicExists, got {other:?}"),
    }
    // Joined all the same: usable at once, with the creator's options.
    assert_eq!(second.topic_stats("orders").unwrap().partitions.len(), 3);
    second.publish("orders", &Record::new(b"x")).unwrap();
    // The same options are no different.
    assert!(matches!(second.create_topic("orders", &TopicOptions::with_partitions(3)), Err(Error::TopicExists(_))));
}

#[test]
fn processes_racing_to_create_a_topic_have_one_creator_each() {
    const BROKERS: u32 = 3;
    const NAMES: u32 = 20;
    let dir = TempDir::new("create-race");
    let brokers: Vec<Broker> = (0..BROKERS).map(|_| Broker::new(config(&dir.0)).unwrap()).collect();
    let go = Arc::new(std::sync::Barrier::new(BROKERS as usize));
    let outcomes: Vec<Vec<bool>> = std::thread::scope(|s| {
        let racers: Vec<_> = brokers
            .iter()
            .zip(1..)
            .map(|(broker, partitions)| {
                let go = go.clone();
                s.spawn(move || {
                    go.wait();
                    (0..NAMES)
                        .map(|n| {
                            let name = format!("x{n}");
                            match broker.create_topic(&name, &TopicOptions::with_partitions(partitions)) {
                                Ok(()) => {
                                    assert_eq!(
                                        broker.topic_stats(&name).unwrap().partitions.len(),
                                        partitions as usize
                                    );
                                    true
                                }
                                Err(Error::TopicExists(_)) => {
                                    broker.topic_stats(&name).expect("joined before TopicExists");
                                    false
                                }
                                Err(e) => panic!("create {name}: {e}"),
                            }
                        })
                        .collect()
                })
            })
            .collect();
        racers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    for n in 0..NAMES as usize {
        let creators = outcomes.iter().filter(|o| o[n]).count();
        assert_eq!(creators, 1, "topic x{n}: {creators} creators got Ok");
    }
}

/// A publisher whose topic another process deletes gets `NoSuchTopic`,
/// also from a publish that rolls to a new segment before its process has
/// seen the delete and finds the topic's files gone (it got an I/O error).
/// Every publish rolls often here (16 KB messages, 64 KiB segments) while
/// the other broker deletes the topic and creates it again, over and over.
#[test]
fn a_publisher_rolling_as_another_process_deletes_its_topic_gets_no_such_topic() {
    const CYCLES: u32 = 200;
    let dir = TempDir::new("delete-roll");
    let (deleter, publisher) = (Broker::new(config(&dir.0)).unwrap(), Broker::new(config(&dir.0)).unwrap());
    let options = TopicOptions { segment_bytes: Some(64 << 10), ..TopicOptions::default() };
    deleter.create_topic("t", &options).unwrap();
    let payload = vec![7u8; 16_000];
    let published = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    /// Ends the publishing thread however the deleting loop ends.
    struct Stop<'a>(&'a AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let others = std::thread::scope(|s| {
        let publishing = s.spawn(|| {
            let mut others = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match publisher.publish("t", &Record::new(&payload)) {
                    Ok(_) => {
                        published.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(Error::NoSuchTopic(_)) => {}
                    Err(e) => others.push(e.to_string()),
                }
            }
            others
        });
        let _stop = Stop(&stop);
        for _ in 0..CYCLES {
            // A few rolls into each topic before it goes.
            let from = published.load(Ordering::Relaxed);
            wait_for("publishes to the topic", || published.load(Ordering::Relaxed) >= from + 8);
            deleter.delete_topic("t").unwrap();
            deleter.create_topic("t", &options).unwrap();
        }
        drop(_stop);
        publishing.join().unwrap()
    });
    assert!(
        others.is_empty(),
        "{} publishes failed with another error than NoSuchTopic, the first: {}",
        others.len(),
        others[0]
    );
}
