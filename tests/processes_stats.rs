//! Stats and operator calls across processes (issue 39, its eighth step):
//! a durable name held by another process shows that process's pid, a
//! group's members in two processes show both pids and the partitions each
//! owns, a topic's end counts what another process published; once the
//! other process is killed with -9, its name reads as not held and its
//! member is gone, and the survivor owns its partitions within
//! `session_timeout`.
//!
//! The other process is this test binary run again with [`procs::ROLE`]
//! set and only the one test selected (see `tests/common/procs.rs`).

mod common;

use std::time::Duration;

use common::procs::{self, TempDir, child_role, mark, spawn, wait_child_mark};
use common::wait_for;
use rill::{Ack, Broker, ConsumerOptions, Record, Sharing, SubscriptionOptions, TopicOptions};

/// The topic both processes share.
const TOPIC: &str = "orders";
/// Its partitions.
const PARTITIONS: u32 = 2;
/// The child's durable subscription.
const CHILD_NAME: &str = "audit";
/// The parent's durable subscription.
const PARENT_NAME: &str = "billing-audit";
/// The consumer group with a member in each process.
const GROUP: &str = "billing";
/// Messages the child publishes.
const PUBLISHED: u64 = 2;

fn options() -> ConsumerOptions {
    // Short, so members look at the group often (every quarter of it).
    ConsumerOptions { session_timeout: Duration::from_millis(200), ..ConsumerOptions::default() }
}

fn named(name: &str) -> SubscriptionOptions {
    SubscriptionOptions { name: Some(name.into()), ..SubscriptionOptions::default() }
}

/// The child's part: publishes, holds a name and a group member, and polls
/// until it is killed (or told it is done).
fn child(dir: &std::path::Path) {
    let broker = Broker::new(procs::config(dir, Sharing::Processes)).unwrap();
    for _ in 0..PUBLISHED {
        broker.publish(TOPIC, &Record::new(b"from-the-child")).unwrap();
    }
    let _sub = broker.subscribe(TOPIC, named(CHILD_NAME), |_| Ack::Success).unwrap();
    let mut consumer = broker.consumer(GROUP, TOPIC, options()).unwrap();
    mark(dir, "held");
    let deadline = std::time::Instant::now() + common::WAIT;
    while !dir.join("done").exists() {
        assert!(std::time::Instant::now() < deadline, "the parent never said done");
        consumer.poll(16, Duration::from_millis(20)).unwrap();
    }
}

#[test]
fn names_and_members_of_another_process_show_its_pid_until_it_is_killed() {
    if let Some((_, dir)) = child_role() {
        return child(&dir);
    }
    let dir = TempDir::new("holders");
    let broker = Broker::new(procs::config(&dir.0, Sharing::Processes)).unwrap();
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    let _mine = broker.subscribe(TOPIC, named(PARENT_NAME), |_| Ack::Success).unwrap();
    let mut consumer = broker.consumer(GROUP, TOPIC, options()).unwrap();
    let me = std::process::id();

    let mut child = spawn("names_and_members_of_another_process_show_its_pid_until_it_is_killed", "hold", &dir.0);
    let pid = child.id();
    let held = wait_child_mark(&dir.0, "held", &mut child);
    let child = std::cell::RefCell::new(child);
    procs::check_then_release(
        || {
            assert!(held, "the child ended before it held its name: {:?}", child.borrow_mut().try_wait());
            let names = broker.named_subscriptions().unwrap();
            let pairs: Vec<(&str, Option<u32>)> = names.iter().map(|n| (n.name.as_str(), n.holder_pid)).collect();
            assert_eq!(pairs, [(CHILD_NAME, Some(pid)), (PARENT_NAME, Some(me))]);

            // The end offsets are the shared log's: what the child published.
            let stats = broker.topic_stats(TOPIC).unwrap();
            assert_eq!(stats.partitions.iter().map(|p| p.next_offset).sum::<u64>(), PUBLISHED);
            assert_eq!(stats.publish_count, PUBLISHED);

            // One partition each once both members have looked.
            wait_for("a partition owned by each process", || {
                consumer.poll(16, Duration::from_millis(20)).unwrap();
                let members = broker.group_members(GROUP, TOPIC).unwrap();
                let mut seen: Vec<(u32, usize)> = members.iter().map(|m| (m.pid, m.partitions.len())).collect();
                seen.sort_unstable();
                let mut want = vec![(me, 1), (pid, 1)];
                want.sort_unstable();
                seen == want
            });

            child.borrow_mut().kill().unwrap();
            child.borrow_mut().wait().unwrap();
            // The kernel let go of the dead process's locks when it died.
            let names = broker.named_subscriptions().unwrap();
            let pairs: Vec<(&str, Option<u32>)> = names.iter().map(|n| (n.name.as_str(), n.holder_pid)).collect();
            assert_eq!(pairs, [(CHILD_NAME, None), (PARENT_NAME, Some(me))]);
            assert!(broker.group_members(GROUP, TOPIC).unwrap().iter().all(|m| m.pid == me));
            // The survivor takes the dead member's partition.
            wait_for("both partitions owned by the survivor", || {
                consumer.poll(16, Duration::from_millis(20)).unwrap();
                let members = broker.group_members(GROUP, TOPIC).unwrap();
                members.len() == 1 && members[0].partitions == [0, 1]
            });
        },
        || {
            mark(&dir.0, "done");
            let mut child = child.borrow_mut();
            let _ = child.kill();
            let _ = child.wait();
        },
    );
}

#[test]
fn exclusive_mode_lists_this_brokers_names_and_members() {
    let dir = TempDir::new("exclusive");
    let broker = Broker::new(procs::config(&dir.0, Sharing::Exclusive)).unwrap();
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    let _anonymous = broker.subscribe(TOPIC, SubscriptionOptions::default(), |_| Ack::Success).unwrap();
    let _mine = broker.subscribe(TOPIC, named(PARENT_NAME), |_| Ack::Success).unwrap();
    let names = broker.named_subscriptions().unwrap();
    assert_eq!(names.len(), 1);
    assert_eq!((names[0].name.as_str(), names[0].holder_pid), (PARENT_NAME, Some(std::process::id())));
    assert!(broker.group_members(GROUP, TOPIC).unwrap().is_empty());
    let _consumer = broker.consumer(GROUP, TOPIC, options()).unwrap();
    let members = broker.group_members(GROUP, TOPIC).unwrap();
    assert_eq!(members.len(), 1);
    assert_eq!((members[0].pid, members[0].partitions.as_slice()), (std::process::id(), &[0, 1][..]));
}

/// The topic the child fills past several rolls.
const ROLLED_TOPIC: &str = "ticks";
/// Records the child publishes there: many segments' worth.
const ROLLED: u64 = 2_000;

#[test]
fn a_topic_end_counts_what_another_process_published_past_its_own_rolls() {
    if let Some((_, dir)) = child_role() {
        let broker = Broker::new(procs::config(&dir, Sharing::Processes)).unwrap();
        for i in 0..ROLLED {
            broker.publish(ROLLED_TOPIC, &Record::new(&i.to_le_bytes())).unwrap();
        }
        return;
    }
    let dir = TempDir::new("rolled");
    let broker = Broker::new(procs::config(&dir.0, Sharing::Processes)).unwrap();
    // Segments of the smallest size, so the child's records fill dozens and
    // this process, which neither publishes nor reads, has seen none of them.
    let options = TopicOptions { segment_bytes: Some(rill::log::MIN_SEGMENT_BYTES), ..TopicOptions::default() };
    broker.create_topic(ROLLED_TOPIC, &options).unwrap();
    assert_eq!(broker.topic_stats(ROLLED_TOPIC).unwrap().publish_count, 0);
    let child = spawn("a_topic_end_counts_what_another_process_published_past_its_own_rolls", "fill", &dir.0);
    procs::expect_success(child, "the publishing child");
    let stats = broker.topic_stats(ROLLED_TOPIC).unwrap();
    assert_eq!((stats.publish_count, stats.partitions[0].next_offset), (ROLLED, ROLLED));
}
