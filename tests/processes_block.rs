//! `Block` subscribers across processes (issue 39): a subscriber with the
//! `Block` overflow policy in one process holds back the publishers of
//! every process at its lag limit, as it does in one process, and lets
//! them go when it moves on, closes, or dies (see
//! `src/broker/partition/blockers.rs`).
//!
//! The other processes are this test binary run again as a child
//! (`common/procs.rs`); they hand over through marker files, never sleeps.

mod common;

use std::path::Path;
use std::time::Duration;

use common::WAIT;
use common::procs::{self, TempDir};
use rill::{Ack, Broker, Error, Overflow, Record, Sharing, SubscriptionOptions, TopicOptions};

/// The topic every process shares: one partition, so every record counts
/// against the one limit.
const TOPIC: &str = "orders";

fn processes(dir: &Path) -> Broker {
    Broker::new(procs::config(dir, Sharing::Processes)).unwrap()
}

/// A `Block` subscription with lag limit `limit` whose handler waits for
/// the marker file `go` before its first message, then counts each
/// message it handles in the file `handled` (one line each).
fn blocking_child(dir: &Path, limit: u64) -> (Broker, rill::Subscription) {
    let broker = processes(dir);
    let options = SubscriptionOptions { overflow: Overflow::Block, lag_limit: Some(limit), ..Default::default() };
    let d = dir.to_owned();
    let sub = broker
        .subscribe(TOPIC, options, move |m| {
            procs::mark(&d, "handling");
            procs::wait_mark(&d, "go");
            procs::append(&d, "handled", &format!("0 {}", m.record().offset()));
            Ack::Success
        })
        .unwrap();
    (broker, sub)
}

/// Publishes until the first `Full`; returns how many went in.
fn publish_until_full(broker: &Broker) -> u64 {
    let mut n = 0;
    loop {
        match broker.try_publish(TOPIC, &Record::new(b"o")) {
            Ok(_) => n += 1,
            Err(Error::Full(_)) => return n,
            Err(e) => panic!("publish {n}: {e}"),
        }
        assert!(n < 1000, "a Block subscriber of another process never held the publisher back");
    }
}

#[test]
fn a_block_subscriber_in_another_process_holds_back_publishers_until_it_moves() {
    const TEST: &str = "a_block_subscriber_in_another_process_holds_back_publishers_until_it_moves";
    const LIMIT: u64 = 3;
    if let Some((_, dir)) = procs::child_role() {
        let (_broker, sub) = blocking_child(&dir, LIMIT);
        procs::mark(&dir, "subscribed");
        procs::wait_mark(&dir, "end");
        sub.close();
        return;
    }
    let dir = TempDir::new("hold");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(1)).unwrap();
    // In a cell: the checks wait on it, the release collects it.
    let child = std::cell::RefCell::new(Some(procs::spawn(TEST, "subscriber", &dir.0)));
    let on_child = |mark: &str| procs::wait_child_mark(&dir.0, mark, child.borrow_mut().as_mut().unwrap());
    let checks = || {
        assert!(on_child("subscribed"), "the child subscribed");
        // The child's handler holds its first message, so its position
        // stays at 0: exactly LIMIT records fit.
        assert_eq!(publish_until_full(&broker), LIMIT, "the publisher stops at the other process's limit");
        // A publish that may wait gets the same condition as a timeout.
        let timed = broker.publish_timeout(TOPIC, &Record::new(b"late"), Duration::from_millis(20));
        assert!(matches!(timed, Err(Error::Timeout)), "{timed:?}");
        std::thread::scope(|s| {
            // A publish that waits as long as it takes, let go when the
            // child's handler is.
            let waiting = s.spawn(|| broker.publish_timeout(TOPIC, &Record::new(b"waited"), WAIT));
            assert!(on_child("handling"), "the child got the first message");
            procs::mark(&dir.0, "go");
            let at = waiting.join().unwrap().expect("the waiting publish went in once the subscriber moved");
            assert_eq!(at.offset, LIMIT, "it went in after the records that fit");
        });
        // Everything, the waited-for record included, reaches the child.
        common::wait_for("the child to handle every record", || {
            procs::records(&dir.0, "handled").len() as u64 == LIMIT + 1
        });
        // And the subscriber, caught up, leaves room again (its position
        // may reach the file a little after its last handler call).
        broker.publish_timeout(TOPIC, &Record::new(b"again"), WAIT).expect("room once the subscriber caught up");
    };
    let release = || {
        procs::mark(&dir.0, "go");
        procs::mark(&dir.0, "end");
        procs::expect_success(child.borrow_mut().take().unwrap(), "the subscriber");
    };
    procs::check_then_release(checks, release);
    // The child closed its subscription: nothing holds publishers back.
    for _ in 0..4 * LIMIT {
        broker.try_publish(TOPIC, &Record::new(b"free")).expect("no Block subscriber is left");
    }
}

#[test]
fn a_block_subscriber_killed_while_blocking_lets_the_publishers_go() {
    const TEST: &str = "a_block_subscriber_killed_while_blocking_lets_the_publishers_go";
    const LIMIT: u64 = 2;
    if let Some((_, dir)) = procs::child_role() {
        let (_broker, _sub) = blocking_child(&dir, LIMIT);
        procs::mark(&dir, "subscribed");
        // Killed before it is let go: `go` never comes.
        procs::wait_mark(&dir, "end");
        return;
    }
    let dir = TempDir::new("killed");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(1)).unwrap();
    let mut child = procs::spawn(TEST, "subscriber", &dir.0);
    assert!(procs::wait_child_mark(&dir.0, "subscribed", &mut child), "the child subscribed");
    assert_eq!(publish_until_full(&broker), LIMIT, "the publisher stops at the other process's limit");
    std::thread::scope(|s| {
        let waiting = s.spawn(|| broker.publish_timeout(TOPIC, &Record::new(b"waited"), WAIT));
        assert!(procs::wait_child_mark(&dir.0, "handling", &mut child), "the child got the first message");
        // SIGKILL, mid-handler, while the publisher waits.
        child.kill().unwrap();
        child.wait().unwrap();
        let at = waiting.join().unwrap().expect("a dead subscriber holds no publisher back");
        assert_eq!(at.offset, LIMIT);
    });
    for _ in 0..4 * LIMIT {
        broker.try_publish(TOPIC, &Record::new(b"free")).expect("the dead subscriber's slot was cleared");
    }
}

#[test]
fn a_block_subscriber_here_is_woken_for_by_a_publisher_in_another_process() {
    const TEST: &str = "a_block_subscriber_here_is_woken_for_by_a_publisher_in_another_process";
    const LIMIT: u64 = 2;
    const N: u64 = 40;
    if let Some((_, dir)) = procs::child_role() {
        // The publisher: N records, each waiting for the parent's
        // subscriber as long as it takes.
        let broker = processes(&dir);
        for i in 0..N {
            broker.publish_timeout(TOPIC, &Record::new(b"o"), WAIT).unwrap_or_else(|e| panic!("publish {i}: {e}"));
        }
        procs::mark(&dir, "published");
        return;
    }
    let dir = TempDir::new("across");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(1)).unwrap();
    let options = SubscriptionOptions { overflow: Overflow::Block, lag_limit: Some(LIMIT), ..Default::default() };
    let (tx, rx) = std::sync::mpsc::channel::<u64>();
    let tx = std::sync::Mutex::new(tx);
    let sub = broker
        .subscribe(TOPIC, options, move |m| {
            tx.lock().unwrap().send(m.record().offset()).unwrap();
            Ack::Success
        })
        .unwrap();
    let child = procs::spawn(TEST, "publisher", &dir.0);
    // Each record handled here lets the next one in over there: the child
    // only finishes if every move of this subscriber woke it.
    let got: Vec<u64> = (0..N).map(|_| rx.recv_timeout(WAIT).expect("the next record")).collect();
    assert_eq!(got, (0..N).collect::<Vec<_>>());
    procs::expect_success(child, "the publisher");
    sub.close();
}
