//! Several processes, one data directory (issue 39): every process's push
//! subscriptions, with the pid of their process and their counters, from
//! `Broker::directory_subscriptions` in any process, and its pull consumers
//! from `Broker::directory_consumers`; a process killed with SIGKILL leaves
//! both lists at once.
//!
//! The other process is this test binary run again with [`procs::ROLE`]
//! set and only the one test selected (see `tests/common/procs.rs`).
//! Parent and child hand over through marker files in the data directory,
//! waited for with a deadline.

mod common;

use std::path::Path;

use common::procs::{self, TempDir, append, check_then_release, child_role, mark, spawn, wait_child_mark};
use common::wait_for;
use std::time::Duration;

use rill::{
    Ack, Broker, ConsumerOptions, DirectoryConsumer, DirectorySubscription, Record, Sharing, SubscriptionOptions,
    SubscriptionState, TopicOptions,
};

const MESSAGES: usize = 10;

/// Lines the child wrote to `file`, one per message its handler took.
fn lines(dir: &Path, file: &str) -> usize {
    std::fs::read_to_string(dir.join(file)).unwrap_or_default().lines().count()
}

fn of_pid(list: &[DirectorySubscription], pid: u32) -> Vec<&DirectorySubscription> {
    list.iter().filter(|s| s.pid == pid).collect()
}

/// Checks that no broker of process `pid` left a file in the registry
/// folder (`subscribers/`) of the data directory `dir`.
fn assert_no_registry_files_of(dir: &Path, pid: u32) {
    let left: Vec<String> = std::fs::read_dir(dir.join("subscribers"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|f| f.starts_with(&format!("{pid}-")))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_child_s_subscriptions_are_listed_with_its_pid_and_counters_until_it_is_killed() {
    const TEST: &str = "a_child_s_subscriptions_are_listed_with_its_pid_and_counters_until_it_is_killed";
    if let Some((role, dir)) = child_role() {
        assert_eq!(role, "subscriber");
        let broker = Broker::new(procs::config(&dir, Sharing::Processes)).unwrap();
        let (d1, d2) = (dir.clone(), dir.clone());
        let _push = broker
            .subscribe("orders", SubscriptionOptions::default(), move |_| {
                append(&d1, "got-push", "m");
                Ack::Success
            })
            .unwrap();
        let durable = SubscriptionOptions { name: Some("audit".into()), ..SubscriptionOptions::default() };
        let _audit = broker
            .subscribe("orders", durable, move |_| {
                append(&d2, "got-audit", "m");
                Ack::Success
            })
            .unwrap();
        mark(&dir, "subscribed");
        // Until the parent kills this process (never made).
        procs::wait_mark(&dir, "never");
        return;
    }
    let dir = TempDir::new("listed");
    let broker = Broker::new(procs::config(&dir.0, Sharing::Processes)).unwrap();
    broker.create_topic("orders", &TopicOptions::default()).unwrap();
    let _mine = broker.subscribe("orders", SubscriptionOptions::default(), |_| Ack::Success).unwrap();
    let mut child = spawn(TEST, "subscriber", &dir.0);
    let pid = child.id();
    let me = std::process::id();
    let subscribed = wait_child_mark(&dir.0, "subscribed", &mut child);
    check_then_release(
        || {
            assert!(subscribed, "the child exited before subscribing");
            let list = broker.directory_subscriptions().unwrap();
            let theirs = of_pid(&list, pid);
            assert_eq!(theirs.len(), 2, "{list:#?}");
            assert!(theirs.iter().all(|s| !s.this_broker && s.stats.pattern == "orders"), "{list:#?}");
            let audit = theirs.iter().find(|s| s.stats.name == "audit").expect("the durable one");
            assert!(audit.durable && !audit.shared);
            let anon = theirs.iter().find(|s| s.stats.name != "audit").expect("the anonymous one");
            assert!(!anon.durable && anon.stats.name.starts_with(&format!("anon-{pid}-")), "{anon:#?}");
            let ours = of_pid(&list, me);
            assert_eq!(ours.len(), 1, "{list:#?}");
            assert!(ours[0].this_broker);
            assert_eq!(ours[0].stats.name, broker.subscriptions()[0].name);

            for _ in 0..MESSAGES {
                broker.publish("orders", &Record::new(b"o")).unwrap();
            }
            wait_for("the child's handlers", || {
                lines(&dir.0, "got-push") == MESSAGES && lines(&dir.0, "got-audit") == MESSAGES
            });
            // Published at the end of each drain round: once both rounds
            // ended, the counts are what the handlers took.
            wait_for("the child's counters", || {
                let list = broker.directory_subscriptions().unwrap();
                let theirs = of_pid(&list, pid);
                theirs.len() == 2 && theirs.iter().all(|s| s.stats.delivered == MESSAGES as u64 && s.stats.lag == 0)
            });
            let list = broker.directory_subscriptions().unwrap();
            for s in of_pid(&list, pid) {
                assert_eq!((s.stats.acked, s.stats.retried, s.stats.dead_lettered), (MESSAGES as u64, 0, 0), "{s:#?}");
                assert_eq!(s.stats.state, SubscriptionState::Idle, "its last round left it caught up: {s:#?}");
            }
            assert_eq!(lines(&dir.0, "got-push"), MESSAGES, "no more than the messages");
            assert_eq!(lines(&dir.0, "got-audit"), MESSAGES);
        },
        || {
            // SIGKILL: no close, the kernel drops the child's locks.
            child.kill().unwrap();
            child.wait().unwrap();
        },
    );
    let list = broker.directory_subscriptions().unwrap();
    assert!(of_pid(&list, pid).is_empty(), "a killed process's subscriptions are gone: {list:#?}");
    assert_eq!(of_pid(&list, me).len(), 1);
    // And the dead broker's files with them.
    assert_no_registry_files_of(&dir.0, pid);
    // The named one is free again: this process can take it.
    let durable = SubscriptionOptions { name: Some("audit".into()), ..SubscriptionOptions::default() };
    let _audit = broker.subscribe("orders", durable, |_| Ack::Success).unwrap();
    let list = broker.directory_subscriptions().unwrap();
    assert_eq!(list.iter().filter(|s| s.stats.name == "audit").map(|s| s.pid).collect::<Vec<_>>(), [me]);
}

#[test]
fn a_closed_broker_s_subscriptions_leave_the_list() {
    let dir = TempDir::new("closed");
    let first = Broker::new(procs::config(&dir.0, Sharing::Processes)).unwrap();
    first.create_topic("orders", &TopicOptions::default()).unwrap();
    let second = Broker::new(procs::config(&dir.0, Sharing::Processes)).unwrap();
    let sub = second.subscribe("orders", SubscriptionOptions::default(), |_| Ack::Success).unwrap();
    let listed = first.directory_subscriptions().unwrap();
    assert_eq!(listed.len(), 1, "{listed:#?}");
    // Another broker of this process: the same pid, not this broker's.
    assert_eq!((listed[0].pid, listed[0].this_broker), (std::process::id(), false));
    assert_eq!(listed[0].stats.name, sub.name());
    sub.close();
    assert!(first.directory_subscriptions().unwrap().is_empty());
    let _again = second.subscribe("orders", SubscriptionOptions::default(), |_| Ack::Success).unwrap();
    assert_eq!(first.directory_subscriptions().unwrap().len(), 1);
    second.close();
    assert!(first.directory_subscriptions().unwrap().is_empty());
}

#[test]
fn exclusive_mode_lists_this_broker_s_subscriptions() {
    let dir = TempDir::new("exclusive");
    let broker = Broker::new(procs::config(&dir.0, Sharing::Exclusive)).unwrap();
    broker.create_topic("orders", &TopicOptions::default()).unwrap();
    let _a = broker.subscribe("orders", SubscriptionOptions::default(), |_| Ack::Success).unwrap();
    let named = SubscriptionOptions { name: Some("audit".into()), ..SubscriptionOptions::default() };
    let _b = broker.subscribe("orders", named, |_| Ack::Success).unwrap();
    let listed = broker.directory_subscriptions().unwrap();
    let stats: Vec<_> = listed.iter().map(|s| s.stats.clone()).collect();
    let mut subs = broker.subscriptions();
    subs.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(stats.iter().map(|s| &s.name).collect::<Vec<_>>(), subs.iter().map(|s| &s.name).collect::<Vec<_>>());
    assert!(listed.iter().all(|s| s.pid == std::process::id() && s.this_broker));
    assert!(!dir.0.join("subscribers").exists(), "no registry in Exclusive mode");
}

fn consumers_of(list: &[DirectoryConsumer], pid: u32) -> Vec<&DirectoryConsumer> {
    list.iter().filter(|c| c.pid == pid).collect()
}

/// Messages the child's consumer polls, of the [`MESSAGES`] published.
const POLLED: usize = 7;

#[test]
fn a_child_s_pull_consumer_is_listed_with_its_pid_and_counters_until_it_is_killed() {
    const TEST: &str = "a_child_s_pull_consumer_is_listed_with_its_pid_and_counters_until_it_is_killed";
    if let Some((role, dir)) = child_role() {
        assert_eq!(role, "consumer");
        let broker = Broker::new(procs::config(&dir, Sharing::Processes)).unwrap();
        let mut consumer = broker.consumer("billing", "orders", ConsumerOptions::default()).unwrap();
        let mut polled = 0;
        while polled < POLLED {
            polled += consumer.poll(POLLED - polled, Duration::from_secs(5)).unwrap().len();
        }
        mark(&dir, "polled");
        // Until the parent kills this process (never made).
        procs::wait_mark(&dir, "never");
        return;
    }
    let dir = TempDir::new("consumers");
    let broker = Broker::new(procs::config(&dir.0, Sharing::Processes)).unwrap();
    broker.create_topic("orders", &TopicOptions::with_partitions(2)).unwrap();
    for _ in 0..MESSAGES {
        broker.publish("orders", &Record::new(b"o")).unwrap();
    }
    let mut mine = broker.consumer("audit", "orders", ConsumerOptions::default()).unwrap();
    assert_eq!(mine.poll(2, Duration::from_secs(5)).unwrap().len(), 2);
    let mut child = spawn(TEST, "consumer", &dir.0);
    let pid = child.id();
    let me = std::process::id();
    let polled = wait_child_mark(&dir.0, "polled", &mut child);
    check_then_release(
        || {
            assert!(polled, "the child exited before polling");
            let list = broker.directory_consumers().unwrap();
            let theirs = consumers_of(&list, pid);
            assert_eq!(theirs.len(), 1, "{list:#?}");
            let c = theirs[0];
            assert!(!c.this_broker && c.group == "billing" && c.topic == "orders", "{c:#?}");
            // Published at the end of each poll: what the child's polls
            // returned, and what its partitions (both) hold past them.
            assert_eq!((c.delivered, c.missed, c.lag), (POLLED as u64, 0, (MESSAGES - POLLED) as u64), "{c:#?}");
            let members = broker.group_members("billing", "orders").unwrap();
            assert_eq!(members.iter().map(|m| (m.pid, m.id)).collect::<Vec<_>>(), [(pid, c.id)], "the member it is");
            let ours = consumers_of(&list, me);
            assert_eq!(ours.len(), 1, "{list:#?}");
            assert!(ours[0].this_broker && ours[0].group == "audit");
            assert_eq!((ours[0].delivered, ours[0].lag), (2, (MESSAGES - 2) as u64));
            // The push listing is not the pull one.
            assert!(broker.directory_subscriptions().unwrap().is_empty());
        },
        || {
            // SIGKILL: no close, the kernel drops the child's locks.
            child.kill().unwrap();
            child.wait().unwrap();
        },
    );
    let list = broker.directory_consumers().unwrap();
    assert!(consumers_of(&list, pid).is_empty(), "a killed process's consumers are gone: {list:#?}");
    assert_eq!(consumers_of(&list, me).len(), 1);
    assert_no_registry_files_of(&dir.0, pid);
    mine.close();
    assert!(broker.directory_consumers().unwrap().is_empty(), "a closed consumer leaves the list");
}

#[test]
fn a_closed_broker_s_consumers_leave_the_list() {
    let dir = TempDir::new("closed-consumers");
    let first = Broker::new(procs::config(&dir.0, Sharing::Processes)).unwrap();
    first.create_topic("orders", &TopicOptions::default()).unwrap();
    first.publish("orders", &Record::new(b"o")).unwrap();
    let second = Broker::new(procs::config(&dir.0, Sharing::Processes)).unwrap();
    let mut consumer = second.consumer("billing", "orders", ConsumerOptions::default()).unwrap();
    // Listed at its join, before any poll, its lag still zero.
    let listed = first.directory_consumers().unwrap();
    assert_eq!(listed.len(), 1, "{listed:#?}");
    assert_eq!((listed[0].pid, listed[0].this_broker, listed[0].delivered), (std::process::id(), false, 0));
    assert_eq!(consumer.poll(10, Duration::from_secs(5)).unwrap().len(), 1);
    let listed = first.directory_consumers().unwrap();
    assert_eq!((listed[0].delivered, listed[0].lag), (1, 0), "{listed:#?}");
    // The counters are as its last poll left them, until the next one.
    first.publish("orders", &Record::new(b"o")).unwrap();
    assert_eq!(first.directory_consumers().unwrap()[0].lag, 0);
    assert_eq!(consumer.poll(10, Duration::from_secs(5)).unwrap().len(), 1);
    let listed = first.directory_consumers().unwrap();
    assert_eq!((listed[0].delivered, listed[0].lag), (2, 0), "{listed:#?}");
    second.close();
    assert!(first.directory_consumers().unwrap().is_empty());
}

#[test]
fn exclusive_mode_lists_this_broker_s_consumers() {
    let dir = TempDir::new("exclusive-consumers");
    let broker = Broker::new(procs::config(&dir.0, Sharing::Exclusive)).unwrap();
    broker.create_topic("orders", &TopicOptions::default()).unwrap();
    broker.publish_batch("orders", &[Record::new(b"a"), Record::new(b"b")]).unwrap();
    let mut consumer = broker.consumer("billing", "orders", ConsumerOptions::default()).unwrap();
    assert_eq!(consumer.poll(1, Duration::from_secs(5)).unwrap().len(), 1);
    let listed = broker.directory_consumers().unwrap();
    assert_eq!(listed.len(), 1, "{listed:#?}");
    let c = &listed[0];
    assert_eq!((c.pid, c.this_broker, c.delivered, c.missed, c.lag), (std::process::id(), true, 1, 0, 1));
    assert_eq!(c.id, broker.group_members("billing", "orders").unwrap()[0].id);
    consumer.close();
    assert!(broker.directory_consumers().unwrap().is_empty());
    assert!(!dir.0.join("subscribers").exists(), "no registry in Exclusive mode");
}
