//! Several processes, one data directory (issues 39 and 41): the dedupe
//! window across processes. An id published by any process within the
//! window is a duplicate in every process; processes racing one id append
//! it once; a publisher killed right after its publish returned, retried
//! by another process, leaves one record; an id older than the window is
//! appended again (see "Across processes" in `src/broker/dedupe.rs`).
//!
//! The other processes are this test binary run again with
//! [`procs::ROLE`] set and only the one test selected (see
//! `tests/common/procs.rs`). Parent and children hand over through marker
//! files in the data directory, waited for with a deadline.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::WAIT;
use common::procs::{self, TempDir, child_role, expect_success, mark, spawn, wait_child_mark};
use rill::{Broker, BrokerConfig, ConsumerOptions, Position, Published, Record, Sharing, TopicOptions};

fn config(dir: &Path) -> BrokerConfig {
    procs::config(dir, Sharing::Processes)
}

fn window(partitions: u32, ms: u64) -> TopicOptions {
    TopicOptions { partitions, dedupe_window_ms: ms, ..TopicOptions::default() }
}

/// The records of every partition of `topic`, as (id, position), read by a
/// consumer in `broker`'s process: all the shared log holds, whichever
/// process appended it.
fn read_all(broker: &Broker, topic: &str) -> Vec<(Option<String>, Position)> {
    let stats = broker.topic_stats(topic).unwrap();
    let expected: u64 = stats.partitions.iter().map(|p| p.next_offset - p.first_offset).sum();
    let mut c = broker.consumer("reader", topic, ConsumerOptions::default()).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + WAIT;
    while (out.len() as u64) < expected {
        assert!(Instant::now() < deadline, "read {} of {expected} records", out.len());
        for m in c.poll(1024, Duration::from_millis(100)).unwrap() {
            let at = Position { partition: m.partition(), offset: m.record().offset() };
            out.push((m.record().attribute("rill.id").map(str::to_owned), at));
        }
    }
    out
}

/// A child's line for one publish of `id`: "<id> <partition> <offset> <duplicate>".
fn line(id: &str, p: &Published) -> String {
    format!("{id} {} {} {}", p.position.partition, p.position.offset, p.duplicate as u8)
}

/// What a child recorded with [`line`] in `file`.
fn outcomes(dir: &Path, file: &str) -> Vec<(String, Position, bool)> {
    std::fs::read_to_string(dir.join(file))
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let position = Position { partition: f[1].parse().unwrap(), offset: f[2].parse().unwrap() };
            (f[0].to_owned(), position, f[3] == "1")
        })
        .collect()
}

const RACERS: u32 = 3;
const RACED_IDS: u32 = 300;

#[test]
fn processes_racing_the_same_ids_append_each_once_and_the_losers_get_the_winner_s_position() {
    if let Some((role, dir)) = child_role() {
        let i: u32 = role.strip_prefix("racer-").unwrap().parse().unwrap();
        let broker = Broker::new(config(&dir)).unwrap();
        mark(&dir, &format!("ready-{i}"));
        procs::wait_mark(&dir, "go");
        let ids: Vec<String> = (0..RACED_IDS).map(|n| format!("order-{n}")).collect();
        let mut lines = Vec::new();
        if i == 0 {
            // One racer publishes batches: one turn of the lock for each.
            for chunk in ids.chunks(10) {
                let records: Vec<Record<'_>> = chunk.iter().map(|id| Record::new(b"o").with_id(id)).collect();
                for (id, p) in chunk.iter().zip(broker.publish_batch_outcome("orders", &records).unwrap()) {
                    lines.push(line(id, &p));
                }
            }
        } else {
            for id in &ids {
                let p = broker.publish_outcome("orders", &Record::new(b"o").with_id(id)).unwrap();
                lines.push(line(id, &p));
            }
        }
        std::fs::write(dir.join(format!("outcomes-{i}")), lines.join("\n") + "\n").unwrap();
        return;
    }
    let dir = TempDir::new("race");
    let broker = Broker::new(config(&dir.0)).unwrap();
    broker.create_topic("orders", &window(3, 120_000)).unwrap();
    let test = "processes_racing_the_same_ids_append_each_once_and_the_losers_get_the_winner_s_position";
    let mut children: Vec<_> = (0..RACERS).map(|i| spawn(test, &format!("racer-{i}"), &dir.0)).collect();
    for (i, child) in children.iter_mut().enumerate() {
        assert!(wait_child_mark(&dir.0, &format!("ready-{i}"), child), "racer {i} exited before it was ready");
    }
    mark(&dir.0, "go");
    for (i, child) in children.into_iter().enumerate() {
        expect_success(child, &format!("racer {i}"));
    }
    let mut by_id: BTreeMap<String, Vec<(Position, bool)>> = BTreeMap::new();
    for i in 0..RACERS {
        for (id, position, duplicate) in outcomes(&dir.0, &format!("outcomes-{i}")) {
            by_id.entry(id).or_default().push((position, duplicate));
        }
    }
    let records = read_all(&broker, "orders");
    assert_eq!(records.len(), RACED_IDS as usize, "each id appended once");
    let stored: BTreeMap<String, Position> = records.into_iter().map(|(id, at)| (id.unwrap(), at)).collect();
    assert_eq!(stored.len(), RACED_IDS as usize, "no id appended twice");
    for (id, got) in &by_id {
        assert_eq!(got.len(), RACERS as usize, "{id}: one outcome per racer");
        assert_eq!(got.iter().filter(|(_, duplicate)| !duplicate).count(), 1, "{id}: one winner, {got:?}");
        assert!(got.iter().all(|(at, _)| *at == stored[id]), "{id}: every racer has the record's position, {got:?}");
    }
    // And this process, which published none of them, sees them all as
    // duplicates at their records' positions.
    for (id, at) in &stored {
        let again = broker.publish_outcome("orders", &Record::new(b"o").with_id(id)).unwrap();
        assert_eq!((again.position, again.duplicate), (*at, true), "{id}");
    }
}

#[test]
fn a_publisher_killed_after_its_publish_returned_then_a_retry_from_another_process_leaves_one_record() {
    if let Some((role, dir)) = child_role() {
        assert_eq!(role, "publish-then-die");
        let broker = Broker::new(config(&dir)).unwrap();
        let p = broker.publish_outcome("orders", &Record::new(b"order").with_id("order-1")).unwrap();
        assert!(!p.duplicate);
        procs::append(&dir, "published", &format!("{} {}", p.position.partition, p.position.offset));
        // Marked apart, once the line is whole: `append` makes the file
        // before it writes the line, so the file alone is no signal.
        procs::mark(&dir, "published.done");
        // The caller's bookkeeping would come here; the kill comes first.
        procs::wait_mark(&dir, "never");
        return;
    }
    let dir = TempDir::new("kill");
    let broker = Broker::new(config(&dir.0)).unwrap();
    broker.create_topic("orders", &window(2, 120_000)).unwrap();
    // This process has taken a turn before the child publishes: the retry
    // finds the child's record by catching up, not by a rebuild on open.
    let other = broker.publish_outcome("orders", &Record::new(b"other").with_id("order-0")).unwrap();
    let mut child = spawn(
        "a_publisher_killed_after_its_publish_returned_then_a_retry_from_another_process_leaves_one_record",
        "publish-then-die",
        &dir.0,
    );
    let published = wait_child_mark(&dir.0, "published.done", &mut child);
    // SIGKILL, right after the publish returned (or, if the child failed,
    // to collect it).
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(published, "the child exited before it published ({status})");
    let published = procs::records(&dir.0, "published");
    let (partition, offset) = published[0];
    let published = Position { partition, offset };
    let retry = broker.publish_outcome("orders", &Record::new(b"order").with_id("order-1")).unwrap();
    assert_eq!((retry.position, retry.duplicate), (published, true));
    // A process opened after the kill finds it too.
    let late = Broker::new(config(&dir.0)).unwrap();
    let retry = late.publish_outcome("orders", &Record::new(b"order").with_id("order-1")).unwrap();
    assert_eq!((retry.position, retry.duplicate), (published, true));
    let mut records = read_all(&broker, "orders");
    records.sort_by_key(|(id, _)| id.clone());
    assert_eq!(records, [(Some("order-0".to_owned()), other.position), (Some("order-1".to_owned()), published)]);
}

#[test]
fn an_id_older_than_the_window_is_appended_again_across_processes() {
    if let Some((role, dir)) = child_role() {
        assert_eq!(role, "publish");
        let broker = Broker::new(config(&dir)).unwrap();
        let p = broker.publish_outcome("orders", &Record::new(b"x").with_id("a")).unwrap();
        assert!(!p.duplicate);
        procs::append(&dir, "published", &format!("{} {}", p.position.partition, p.position.offset));
        return;
    }
    let dir = TempDir::new("expire");
    let broker = Broker::new(config(&dir.0)).unwrap();
    broker.create_topic("orders", &window(1, 20)).unwrap();
    let child = spawn("an_id_older_than_the_window_is_appended_again_across_processes", "publish", &dir.0);
    expect_success(child, "the publishing child");
    let (_, offset) = procs::records(&dir.0, "published")[0];
    // Within the window a retry here is the child's record; after it, the
    // id is appended again, once.
    let deadline = Instant::now() + WAIT;
    let later = loop {
        let p = broker.publish_outcome("orders", &Record::new(b"x").with_id("a")).unwrap();
        if !p.duplicate {
            break p;
        }
        assert_eq!(p.position.offset, offset, "a duplicate of the child's record");
        assert!(Instant::now() < deadline, "the id never expired");
        std::thread::yield_now();
    };
    assert_eq!(later.position.offset, offset + 1);
    let ids: Vec<Option<String>> = read_all(&broker, "orders").into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, [Some("a".to_owned()), Some("a".to_owned())]);
}

#[test]
fn records_without_ids_from_another_process_are_passed_over_by_the_catch_up() {
    // Another process publishes records without ids (which take no lock)
    // between this process's publishes with ids: the catch-up reads past
    // them, and an id of the other process published among them is found.
    if let Some((role, dir)) = child_role() {
        assert_eq!(role, "mixed");
        let broker = Broker::new(config(&dir)).unwrap();
        procs::publish(&broker, "orders", 500);
        let p = broker.publish_outcome("orders", &Record::new(b"x").with_id("among")).unwrap();
        procs::publish(&broker, "orders", 500);
        procs::append(&dir, "published", &format!("{} {}", p.position.partition, p.position.offset));
        return;
    }
    let dir = TempDir::new("mixed");
    let broker = Broker::new(config(&dir.0)).unwrap();
    broker.create_topic("orders", &window(2, 120_000)).unwrap();
    assert!(!broker.publish_outcome("orders", &Record::new(b"x").with_id("first")).unwrap().duplicate);
    let child = spawn("records_without_ids_from_another_process_are_passed_over_by_the_catch_up", "mixed", &dir.0);
    expect_success(child, "the publishing child");
    let (partition, offset) = procs::records(&dir.0, "published")[0];
    let retry = broker.publish_outcome("orders", &Record::new(b"x").with_id("among")).unwrap();
    assert_eq!((retry.position, retry.duplicate), (Position { partition, offset }, true));
    let again = broker.publish_outcome("orders", &Record::new(b"x").with_id("first")).unwrap();
    assert!(again.duplicate);
    let stats = broker.topic_stats("orders").unwrap();
    assert_eq!(stats.partitions.iter().map(|p| p.next_offset).sum::<u64>(), 1002);
}

/// An id in a record that compaction would otherwise remove (a newer
/// record of its key exists) stays in the log for the dedupe window, as
/// the window of another broker on the directory (another process's, or
/// this one's after a restart) is learned from the log: a retry of the id
/// there is a duplicate, not a second record (which, newest of its key,
/// would also bring the superseded value back).
#[test]
fn compaction_keeps_an_id_for_the_window_so_other_brokers_and_a_reopen_still_refuse_it() {
    let dir = TempDir::new("compact-ids");
    let options = TopicOptions {
        cleanup: rill::Cleanup::Compact,
        segment_bytes: Some(rill::log::MIN_SEGMENT_BYTES),
        ..TopicOptions::default()
    };
    let writer = Broker::new(config(&dir.0)).unwrap();
    writer.create_topic("kv", &options).unwrap();
    // Opened before the ids are published: its window learns them from
    // the log when it first publishes one.
    let other = Broker::new(config(&dir.0)).unwrap();
    let first = writer.publish_outcome("kv", &Record::new(b"old").with_key(b"k").with_id("A")).unwrap();
    writer.publish_outcome("kv", &Record::new(b"new").with_key(b"k").with_id("B")).unwrap();
    // Superseded filler (one key, no id) past a few segments: the passes
    // have something to remove whether or not they keep "A".
    let filler = [0u8; 512];
    let compacted = |b: &Broker| b.topic_stats("kv").unwrap().compacted_messages;
    let deadline = Instant::now() + WAIT;
    while compacted(&writer) + compacted(&other) == 0 {
        assert!(Instant::now() < deadline, "no compaction pass removed anything");
        for _ in 0..64 {
            writer.publish("kv", &Record::new(&filler).with_key(b"f")).unwrap();
        }
    }
    let retry = |b: &Broker| b.publish_outcome("kv", &Record::new(b"old").with_key(b"k").with_id("A")).unwrap();
    let again = retry(&other);
    assert!(again.duplicate, "another broker appended id A again, at {:?}", again.position);
    assert_eq!(again.position, first.position);
    drop((writer, other));
    let reopened = Broker::new(config(&dir.0)).unwrap();
    let again = retry(&reopened);
    assert!(again.duplicate, "a reopened broker appended id A again, at {:?}", again.position);
    assert_eq!(again.position, first.position);
}
