//! A broker on a data directory, as users restart and crash it: in separate
//! processes, since a restart inside one process would not show what only
//! the disk carried over.
//!
//! This file is its own test harness (`harness = false` in Cargo.toml): the
//! test binary runs its tests, and re-runs itself with a `child-*` argument to
//! be the other process (a writer, a reader, a lock holder, a publisher to
//! kill).
//!
//! The crash loop runs `RILL_CRASH_ITERATIONS` iterations per fsync policy
//! (default 50; the long run in `.ci/test` documents 200), and so does its
//! contended mode (`crash_loop_contended_*`: many publisher threads on one
//! partition, where a kill leaves holes). Every `RILL_CRASH_DAMAGE_EVERY`-th
//! run of the crash loop (default 5) also flips a byte inside a sealed
//! segment of a copy of the directory (issue 40, item 2): after the reopen,
//! and also as the kill left it (under `Interval` and `Never` once the child
//! saw the flusher mark its sealed segments; `sealed_segments_are_marked_*`
//! do that on a fresh directory, with several segments sealed).

mod common;

use common::Rng;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Lines, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rill::{
    Ack, Broker, BrokerConfig, ConsumerOptions, Error, Fsync, Record, StartPosition, SubscriptionOptions, TopicOptions,
};

/// How long anything that should happen may take before the test fails.
const WAIT: Duration = Duration::from_secs(30);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(role) = args.get(1).filter(|a| a.starts_with("child-")) {
        let dir = PathBuf::from(&args[2]);
        match role.as_str() {
            "child-restart-write" => restart_writer(&dir),
            "child-restart-read" => restart_reader(&dir),
            "child-hold" => hold_lock(&dir),
            "child-acks" => acks_child(&dir, args[3].parse().unwrap()),
            "child-crash" => crash_child(
                &dir,
                policy(&args[3]),
                args[4].parse().unwrap(),
                args[5].parse().unwrap(),
                args[6] == "wait-marked",
            ),
            "child-contended" => contended_child(&dir, policy(&args[3]), args[4].parse().unwrap()),
            "child-delete" => delete_child(&dir),
            other => panic!("unknown role {other}"),
        }
        return;
    }
    let filters: Vec<&String> = args[1..].iter().filter(|a| !a.starts_with('-')).collect();
    let tests: &[(&str, fn())] = &[
        ("restart_in_two_processes_keeps_everything", restart_in_two_processes_keeps_everything),
        ("deletes_and_age_limits_on_a_data_directory_survive_a_restart", operations_survive_a_restart),
        ("an_idle_topics_age_limit_leaves_no_spare_files_beyond_the_pools", idle_trim_deletes_spares),
        ("a_second_broker_on_a_directory_is_busy_in_this_process_and_another", second_broker_is_busy),
        ("a_regular_file_as_data_dir_is_io_with_its_path", regular_file_is_io),
        ("a_damaged_tail_is_dropped_and_reported_in_the_partition_stats", damaged_tail_is_reported),
        ("always_durable_acks_survive_a_kill_once_the_subscription_is_idle", acks_survive_a_kill),
        ("offsets_past_a_damaged_tail_are_reset_to_the_recovered_end", offsets_past_the_end_are_reset),
        ("deleting_a_durable_topic_under_publishers_succeeds_and_frees_the_name", delete_under_publishers),
        ("a_kill_during_a_topic_delete_leaves_the_topic_whole_or_gone", kill_during_delete),
        ("sealed_segments_are_marked_before_a_kill_under_never", || marked_before_a_kill(Fsync::Never)),
        ("sealed_segments_are_marked_before_a_kill_under_interval", || marked_before_a_kill(Fsync::default())),
        ("crash_loop_always", || crash_loop(Fsync::Always)),
        ("crash_loop_interval", || crash_loop(Fsync::default())),
        ("crash_loop_never", || crash_loop(Fsync::Never)),
        ("crash_loop_contended_always", || crash_loop_contended(Fsync::Always)),
        ("crash_loop_contended_interval", || crash_loop_contended(Fsync::default())),
        ("crash_loop_contended_never", || crash_loop_contended(Fsync::Never)),
    ];
    let mut ran = 0;
    for (name, test) in tests {
        if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let started = Instant::now();
        println!("test {name} ...");
        test();
        println!("test {name} ... ok ({:.1?})", started.elapsed());
        ran += 1;
    }
    println!("test result: ok. {ran} passed");
}

fn policy(s: &str) -> Fsync {
    match s {
        "always" => Fsync::Always,
        "never" => Fsync::Never,
        "interval" => Fsync::default(),
        other => panic!("unknown policy {other}"),
    }
}

fn policy_name(f: Fsync) -> &'static str {
    match f {
        Fsync::Always => "always",
        Fsync::Never => "never",
        Fsync::Interval(_) => "interval",
    }
}

/// A fresh, empty directory under the system's temp dir.
fn temp_dir(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let p = std::env::temp_dir().join(format!("rill-persist-{tag}-{}-{nanos}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn open(dir: &Path, fsync: Fsync) -> Broker {
    Broker::new(BrokerConfig { data_dir: Some(dir.to_owned()), fsync, ..BrokerConfig::default() }).unwrap()
}

/// This test binary, running as `role` with `args`.
fn child(role: &str, args: &[&str]) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.arg(role).args(args);
    c
}

fn run_child(role: &str, args: &[&str]) {
    let status = child(role, args).status().unwrap();
    assert!(status.success(), "{role} failed: {status}");
}

// ---------------------------------------------------------------- restart

const ORDERS: &str = "orders/eu";
const MESSAGES: u64 = 200;
/// The durable subscription handles this many before it is closed.
const ACKED_BEFORE_CLOSE: usize = 120;
/// The group commits after polling this many.
const COMMITTED: usize = 50;

fn restart_in_two_processes_keeps_everything() {
    let root = temp_dir("restart");
    let data = root.join("data");
    let d = data.to_str().unwrap();
    run_child("child-restart-write", &[d]);
    run_child("child-restart-read", &[d]);
    std::fs::remove_dir_all(&root).unwrap();
}

/// One message as a line: everything a reader can see of it.
fn describe(partition: u32, r: &rill::log::RecordView<'_>) -> String {
    let attrs: Vec<(String, String)> = r.attributes().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
    format!(
        "{partition}|{}|{}|{:?}|{:?}|{attrs:?}",
        r.offset(),
        r.timestamp_ns(),
        r.key(),
        String::from_utf8_lossy(r.payload())
    )
}

/// Every message of `topic`, described, via a consumer of `group` that does
/// not commit.
fn read_all(b: &Broker, group: &str, topic: &str) -> Vec<String> {
    let mut c = b
        .consumer(group, topic, ConsumerOptions { start: StartPosition::Earliest, ..ConsumerOptions::default() })
        .unwrap();
    let end: u64 = b.topic_stats(topic).unwrap().publish_count;
    let mut out = Vec::new();
    let deadline = Instant::now() + WAIT;
    while (out.len() as u64) < end {
        assert!(Instant::now() < deadline, "read {} of {end}", out.len());
        for m in c.poll(1000, Duration::from_millis(100)).unwrap() {
            out.push(describe(m.partition(), &m.record()));
        }
    }
    out.sort();
    out
}

fn restart_writer(data: &Path) {
    let b = open(data, Fsync::default());
    let options = TopicOptions {
        partitions: 3,
        retention_bytes: Some(1 << 20),
        segment_bytes: Some(16 << 10),
        ..TopicOptions::default()
    };
    b.create_topic(ORDERS, &options).unwrap();
    b.create_topic("logs", &TopicOptions::default()).unwrap();
    let (tx, rx) = mpsc::channel();
    let audit = b
        .subscribe(
            "orders/*",
            SubscriptionOptions { name: Some("audit".into()), start: StartPosition::Earliest, ..Default::default() },
            move |m| {
                let _ = tx.send((m.partition(), m.offset()));
                Ack::Success
            },
        )
        .unwrap();
    for i in 0..MESSAGES {
        let (key, n) = (format!("customer-{}", i % 7), i.to_string());
        let attrs = [("n", n.as_str()), ("kind", "order")];
        let payload = format!("order {i}: {}", "x".repeat((i % 50) as usize));
        b.publish(ORDERS, &Record::new(payload.as_bytes()).with_key(key.as_bytes()).with_attributes(&attrs)).unwrap();
        if i + 1 == ACKED_BEFORE_CLOSE as u64 {
            // Let the durable subscription handle exactly these, then close it.
            for _ in 0..ACKED_BEFORE_CLOSE {
                rx.recv_timeout(WAIT).unwrap();
            }
            // The handler reports before it returns, the ack follows: wait
            // for the last ack, or it would be delivered again (at-least-once).
            assert!(audit.wait_idle(WAIT).unwrap());
            audit.close();
        }
    }
    b.publish("logs", &Record::new(b"a log line")).unwrap();
    let mut billing = b.consumer("billing", ORDERS, ConsumerOptions::default()).unwrap();
    let mut polled = 0;
    while polled < COMMITTED {
        polled += billing.poll(COMMITTED - polled, WAIT).unwrap().len();
    }
    billing.commit().unwrap();
    let committed = b.group_stats("billing", ORDERS).unwrap();
    drop(billing);
    let mut expected = read_all(&b, "snapshot", ORDERS);
    expected.extend(read_all(&b, "snapshot", "logs"));
    let mut lines = expected.join("\n");
    lines.push_str(&format!("\ncommitted {:?}", committed.partitions));
    std::fs::write(data.with_extension("expected"), lines).unwrap();
    b.close();
}

fn restart_reader(data: &Path) {
    let b = open(data, Fsync::default());
    let mut topics = b.topics();
    topics.retain(|t| !t.starts_with('$'));
    assert_eq!(topics, vec!["logs".to_owned(), ORDERS.to_owned()]);
    assert_eq!(b.topic_stats(ORDERS).unwrap().partitions.len(), 3);
    // Options came back: a message over the segment size is still refused.
    let too_big = vec![0u8; 17 << 10];
    assert!(matches!(b.publish(ORDERS, &Record::new(&too_big)), Err(Error::MessageTooLarge { .. })));

    let expected = std::fs::read_to_string(data.with_extension("expected")).unwrap();
    let mut got = read_all(&b, "snapshot", ORDERS);
    got.extend(read_all(&b, "snapshot", "logs"));
    let committed = b.group_stats("billing", ORDERS).unwrap();
    got.push(format!("committed {:?}", committed.partitions));
    let expected: Vec<&str> = expected.lines().collect();
    assert_eq!(got.len(), expected.len(), "messages (and the commit line) after the restart");
    for (g, e) in got.iter().zip(&expected) {
        assert_eq!(g, e, "a message or the commit differs after the restart");
    }
    assert_eq!(committed.partitions.iter().filter_map(|p| p.committed).sum::<u64>(), COMMITTED as u64);

    // The group resumes after its commit.
    let mut billing = b.consumer("billing", ORDERS, ConsumerOptions::default()).unwrap();
    let mut rest = 0;
    while rest < MESSAGES as usize - COMMITTED {
        rest += billing.poll(1000, WAIT).unwrap().len();
    }
    drop(billing);

    // The named subscription resumes after its last ack: it gets exactly
    // the messages published after it closed.
    let (tx, rx) = mpsc::channel();
    let audit = b
        .subscribe(
            "orders/*",
            SubscriptionOptions { name: Some("audit".into()), start: StartPosition::Latest, ..Default::default() },
            move |m| {
                let _ = tx.send(m.attribute("n").map(str::to_owned));
                Ack::Success
            },
        )
        .unwrap();
    assert!(audit.wait_idle(WAIT).unwrap());
    audit.close();
    let mut resumed: Vec<u64> =
        rx.try_iter().map(|n| n.expect("only the writer's messages").parse().unwrap()).collect();
    resumed.sort_unstable();
    assert_eq!(resumed, (ACKED_BEFORE_CLOSE as u64..MESSAGES).collect::<Vec<_>>());

    // New publishes continue the offsets.
    let before = b.topic_stats(ORDERS).unwrap();
    for p in &before.partitions {
        let pos = b.publish(ORDERS, &Record::new(b"after restart").with_key(key_for(p.partition).as_bytes())).unwrap();
        assert_eq!((pos.partition, pos.offset), (p.partition, p.next_offset));
    }
    b.close();
}

/// A key that lands on `partition` of the 3-partition topic.
/// Polls `cond` until it holds; fails the test after `WAIT`.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

/// The operator's calls (issue 13) on a durable broker: a deleted topic, its
/// files and its group's offsets stay gone after a restart (and the name
/// starts again at offset 0); a deleted group's offsets stay gone; a topic's
/// age limit is stored with its options and applied again after a restart
/// by the broker's timer, without any publish.
fn operations_survive_a_restart() {
    let dir = temp_dir("operate");
    let topic_dirs = || std::fs::read_dir(dir.join("topics")).unwrap().count();
    {
        let b = open(&dir, Fsync::Always);
        b.create_topic("keep", &TopicOptions::default()).unwrap();
        b.create_topic("gone", &TopicOptions::default()).unwrap();
        // 4 KiB segments, an age limit of an hour: nothing expires yet.
        let aged = TopicOptions { segment_bytes: Some(4096), retention_ms: Some(3_600_000), ..TopicOptions::default() };
        b.create_topic("aged", &aged).unwrap();
        for i in 0..10 {
            let m = format!("m{i}");
            b.publish("keep", &Record::new(m.as_bytes())).unwrap();
            b.publish("gone", &Record::new(m.as_bytes())).unwrap();
        }
        let payload = vec![7u8; 500];
        for _ in 0..100 {
            b.publish("aged", &Record::new(&payload)).unwrap();
        }
        for (group, topic) in [("g", "keep"), ("h", "keep"), ("g", "gone")] {
            let mut c = b.consumer(group, topic, ConsumerOptions::default()).unwrap();
            assert_eq!(c.poll(100, Duration::ZERO).unwrap().len(), 10);
            c.commit().unwrap();
        }
        assert_eq!(topic_dirs(), 3);
        b.delete_topic("gone").unwrap();
        assert_eq!(topic_dirs(), 2, "the deleted topic's directory is removed");
        b.delete_group("h", "keep").unwrap();
        b.close();
    }
    {
        let b = open(&dir, Fsync::Always);
        assert_eq!(b.topics(), vec!["aged".to_owned(), "keep".to_owned()]);
        assert!(matches!(b.group_stats("h", "keep"), Err(Error::NotFound(_))), "a deleted group stays deleted");
        assert_eq!(b.group_stats("g", "keep").unwrap().partitions[0].committed, Some(10));
        b.create_topic("gone", &TopicOptions::default()).unwrap();
        assert_eq!(b.publish("gone", &Record::new(b"m0")).unwrap().offset, 0, "a re-created topic starts at offset 0");
        assert!(
            matches!(b.group_stats("g", "gone"), Err(Error::NotFound(_))),
            "the deleted topic's group offsets do not come back with its name"
        );
        assert_eq!(b.topic_stats("aged").unwrap().partitions[0].first_offset, 0);
        b.close();
    }
    // A topic with a 1 ms age limit, then a restart: the restored timer
    // must trim it although nothing publishes to it any more.
    {
        let b = open(&dir, Fsync::Always);
        let short = TopicOptions { segment_bytes: Some(4096), retention_ms: Some(1), ..TopicOptions::default() };
        b.create_topic("short", &short).unwrap();
        let payload = vec![7u8; 500];
        for _ in 0..100 {
            b.publish("short", &Record::new(&payload)).unwrap();
        }
        b.close();
    }
    let b = open(&dir, Fsync::Always);
    // Nothing publishes to "short" after the restart: only the restored
    // age-limit job can trim it.
    wait_until("the restored age limit to trim a quiet topic", || {
        b.topic_stats("short").unwrap().partitions[0].first_offset > 0
    });
    assert_eq!(b.topic_stats("aged").unwrap().partitions[0].first_offset, 0, "an hour has not passed");
    b.close();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A topic nobody publishes to or reads, trimmed by its age limit alone:
/// the trimmed files wait under spare names until their last handles go,
/// then all but the pool's few are deleted. Nothing but the age limit's
/// timer runs for the topic, once a second here, so that takes minutes
/// unless the timer has the handles collected.
fn idle_trim_deletes_spares() {
    let dir = temp_dir("idle-spares");
    let b = open(&dir, Fsync::Never);
    let options = TopicOptions { segment_bytes: Some(4096), retention_ms: Some(4_000), ..TopicOptions::default() };
    b.create_topic("quiet", &options).unwrap();
    let payload = vec![7u8; 500];
    for _ in 0..200 {
        b.publish("quiet", &Record::new(&payload)).unwrap();
    }
    let spares = || files_under(&dir).iter().filter(|f| f.extension().is_some_and(|e| e == "spare")).count();
    wait_until("the age limit to trim the quiet topic", || {
        b.topic_stats("quiet").unwrap().partitions[0].first_offset > 0
    });
    // The pool keeps a couple of spare files for the next rolls.
    wait_until("the trimmed files beyond the pool's to be deleted", || spares() <= 2);
    b.close();
    let _ = std::fs::remove_dir_all(&dir);
}

fn key_for(partition: u32) -> String {
    (0..).map(|i| format!("k{i}")).find(|k| rill::broker::partition_for_key(k.as_bytes(), 3) == partition).unwrap()
}

// ---------------------------------------------------------------- lock and bad paths

fn second_broker_is_busy() {
    let root = temp_dir("busy");
    let first = open(&root, Fsync::Never);
    let config = || BrokerConfig { data_dir: Some(root.clone()), ..BrokerConfig::default() };
    assert!(matches!(Broker::new(config()), Err(Error::Busy(_))));
    first.close();
    // Closing lets go of the directory, even with the handle still alive.
    let second = Broker::new(config()).unwrap();
    drop(second);
    drop(first);

    // Another process holding it.
    let mut holder =
        child("child-hold", &[root.to_str().unwrap()]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "holding");
    assert!(matches!(Broker::new(config()), Err(Error::Busy(_))));
    // The lock goes with the process, however it ends.
    holder.kill().unwrap();
    holder.wait().unwrap();
    Broker::new(config()).unwrap().close();
    std::fs::remove_dir_all(&root).unwrap();
}

fn hold_lock(dir: &Path) {
    let _b = open(dir, Fsync::Never);
    println!("holding");
    // Until the parent kills it.
    let _ = std::io::stdin().read(&mut [0u8; 1]);
}

fn regular_file_is_io() {
    let root = temp_dir("file");
    let file = root.join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    match Broker::new(BrokerConfig { data_dir: Some(file.clone()), ..BrokerConfig::default() }) {
        Err(Error::Io { path, .. }) => assert_eq!(path, file),
        other => panic!("expected Io, got {other:?}"),
    }
    std::fs::remove_dir_all(&root).unwrap();
}

// ------------------------------------------------- durable acks and kill -9

/// Rounds of the acks test: each publishes a batch, waits for the durable
/// subscription to be idle, and is then killed.
const ACK_ROUNDS: u64 = 5;

/// Issue 11, `Always`: a durable subscription's acks are on stable storage
/// (so, a fortiori, in the page cache a kill -9 leaves) once it is idle. A
/// child acks a batch, reports the subscription idle, and is killed at once:
/// the next process's subscription of that name resumes exactly after the
/// batch, with nothing delivered twice. Before, live positions were saved
/// every 100 ms, so a kill right after idle redelivered the batch.
fn acks_survive_a_kill() {
    let root = temp_dir("acks");
    let data = root.join("data");
    let d = data.to_str().unwrap();
    for round in 0..ACK_ROUNDS {
        let mut c =
            child("child-acks", &[d, &round.to_string()]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let mut out = BufReader::new(c.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        // Killed the moment it says so: no clean close saves anything.
        c.kill().unwrap();
        c.wait().unwrap();
        assert_eq!(line.trim(), format!("idle {round}"), "round {round}");
    }
    std::fs::remove_dir_all(&root).unwrap();
}

/// Round `round` of `acks_survive_a_kill`: checks that the previous rounds'
/// acks came back (nothing is delivered again), acks one more batch, says
/// `idle <round>` and waits to be killed.
fn acks_child(dir: &Path, round: u64) {
    const BATCH: u64 = 40;
    let b = open(dir, Fsync::Always);
    if round == 0 {
        b.create_topic("acks", &TopicOptions { partitions: 2, ..TopicOptions::default() }).unwrap();
    }
    let (tx, rx) = mpsc::channel();
    let options = SubscriptionOptions {
        name: Some("acker".into()),
        start: StartPosition::Earliest,
        ..SubscriptionOptions::default()
    };
    let sub = b
        .subscribe("acks", options, move |m| {
            let _ = tx.send(m.attribute("round").map(str::to_owned));
            Ack::Success
        })
        .unwrap();
    // Everything earlier rounds published was acked: nothing comes again.
    assert!(sub.wait_idle(WAIT).unwrap());
    let again: Vec<_> = rx.try_iter().collect();
    assert!(again.is_empty(), "round {round}: delivered again after the kill: {again:?}");
    let r = round.to_string();
    for i in 0..BATCH {
        let key = i.to_string();
        b.publish("acks", &Record::new(b"m").with_key(key.as_bytes()).with_attributes(&[("round", r.as_str())]))
            .unwrap();
    }
    let mut got = 0;
    while got < BATCH {
        assert_eq!(rx.recv_timeout(WAIT).unwrap().as_deref(), Some(r.as_str()));
        got += 1;
    }
    assert!(sub.wait_idle(WAIT).unwrap());
    println!("idle {round}");
    // Until the parent kills it.
    let _ = std::io::stdin().read(&mut [0u8; 1]);
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() { out.extend(files_under(&path)) } else { out.push(path) }
    }
    out
}

fn damaged_tail_is_reported() {
    let root = temp_dir("damaged");
    let b = open(&root, Fsync::Always);
    b.create_topic("t", &TopicOptions::default()).unwrap();
    for i in 0..9 {
        b.publish("t", &Record::new(format!("record {i}").as_bytes())).unwrap();
    }
    b.publish("t", &Record::new(b"the last record, to be damaged")).unwrap();
    b.close();
    drop(b);
    // Flip a byte of the last record's payload in its segment file, and
    // clear the file's checked prefix (header bytes 72 to 92, see
    // `src/log/file/format.rs`), which a clean close writes and a killed
    // process does not: the damage is then what a crash leaves, a torn
    // tail. (After a clean close it is `Corrupt`: `durable_tests.rs`.)
    let needle = b"the last record, to be damaged";
    let mut damaged = 0;
    for file in files_under(&root.join("topics")) {
        let mut bytes = std::fs::read(&file).unwrap();
        if let Some(at) = bytes.windows(needle.len()).position(|w| w == needle) {
            bytes[72..92].fill(0);
            bytes[at + 4] ^= 0x20;
            std::fs::write(&file, bytes).unwrap();
            damaged += 1;
        }
    }
    assert_eq!(damaged, 1, "the record is in exactly one segment file");
    let b = open(&root, Fsync::Always);
    let stats = b.topic_stats("t").unwrap();
    let p = &stats.partitions[0];
    assert_eq!(p.next_offset, 9, "the damaged record is dropped, the nine before it kept");
    assert_eq!(p.recovered_truncated_records, 0, "no intact record came after the damaged one");
    assert!(p.recovered_truncated_bytes >= needle.len() as u64, "{p:?}");
    let got = read_all(&b, "check", "t");
    assert_eq!(got.len(), 9);
    // Publishing continues the offsets after the kept records.
    assert_eq!(b.publish("t", &Record::new(b"next")).unwrap().offset, 9);
    b.close();
    std::fs::remove_dir_all(&root).unwrap();
}

/// Issue 40 item 5: a group commit and a durable subscription's position at
/// 100, a tail cut at 71 by recovery: both are reset to 71 at the open
/// (counted in the partition's stats), so the 50 messages published after
/// the recovery are delivered to the member that joins after them, and to
/// the durable subscription, instead of being skipped.
fn offsets_past_the_end_are_reset() {
    const WRITTEN: u64 = 100;
    const CUT_AT: u64 = 71;
    const AFTER: u64 = 50;
    let root = temp_dir("reset");
    let b = open(&root, Fsync::Never);
    b.create_topic("t", &TopicOptions::default()).unwrap();
    for i in 0..WRITTEN {
        b.publish("t", &Record::new(format!("record number {i:04}").as_bytes())).unwrap();
    }
    assert_eq!(read_all(&b, "billing", "t").len() as u64, WRITTEN, "the group polls everything");
    let mut c = b.consumer("billing", "t", ConsumerOptions::default()).unwrap();
    c.commit_offset(0, WRITTEN).unwrap();
    drop(c);
    let audit =
        || SubscriptionOptions { name: Some("audit".into()), start: StartPosition::Earliest, ..Default::default() };
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let s = b
        .subscribe("t", audit(), move |m: &rill::Message<'_>| {
            log.lock().unwrap().push(m.offset());
            Ack::Success
        })
        .unwrap();
    assert!(s.wait_idle(WAIT).unwrap());
    s.close();
    assert_eq!(seen.lock().unwrap().len() as u64, WRITTEN);
    b.close();
    drop(b);

    let needle = format!("record number {CUT_AT:04}");
    let mut damaged = 0;
    for file in files_under(&root.join("topics")) {
        let mut bytes = std::fs::read(&file).unwrap();
        if let Some(at) = bytes.windows(needle.len()).position(|w| w == needle.as_bytes()) {
            // What a machine crash before writeback leaves: the record (its
            // 8-byte frame and 24-byte header precede the payload) and all
            // after it never reached the disk. (A damaged record with intact
            // ones after it would be a hole, recovered as a skip record.)
            // The checked prefix (header bytes 72 to 92) is cleared too: a
            // crash leaves none, a clean close does.
            bytes[72..92].fill(0);
            bytes[at - 32..].fill(0);
            std::fs::write(&file, bytes).unwrap();
            damaged += 1;
        }
    }
    assert_eq!(damaged, 1, "the record is in exactly one segment file");

    let b = open(&root, Fsync::Never);
    let p = b.topic_stats("t").unwrap().partitions[0].clone();
    assert_eq!(p.next_offset, CUT_AT, "recovery cut the tail at the damaged record");
    assert_eq!(p.recovered_offsets_reset, 2, "the group's commit and the durable position: {p:?}");
    assert_eq!(b.group_stats("billing", "t").unwrap().partitions[0].committed, Some(CUT_AT));
    for i in CUT_AT..CUT_AT + AFTER {
        assert_eq!(b.publish("t", &Record::new(format!("after {i}").as_bytes())).unwrap().offset, i);
    }
    // The member joins after the 50 were published: it receives them all.
    let mut c = b.consumer("billing", "t", ConsumerOptions::default()).unwrap();
    let got: Vec<u64> = c.poll(1000, Duration::ZERO).unwrap().iter().map(|m| m.offset()).collect();
    assert_eq!(got, (CUT_AT..CUT_AT + AFTER).collect::<Vec<_>>());
    c.commit().unwrap();
    drop(c);
    seen.lock().unwrap().clear();
    let log = seen.clone();
    let s = b
        .subscribe("t", audit(), move |m: &rill::Message<'_>| {
            log.lock().unwrap().push(m.offset());
            Ack::Success
        })
        .unwrap();
    assert!(s.wait_idle(WAIT).unwrap());
    s.close();
    assert_eq!(*seen.lock().unwrap(), (CUT_AT..CUT_AT + AFTER).collect::<Vec<_>>());
    b.close();
    drop(b);

    // A clean reopen: nothing to reset, nothing delivered again.
    let b = open(&root, Fsync::Never);
    assert_eq!(b.topic_stats("t").unwrap().partitions[0].recovered_offsets_reset, 0);
    let mut c = b.consumer("billing", "t", ConsumerOptions::default()).unwrap();
    assert!(c.poll(1000, Duration::ZERO).unwrap().is_empty());
    drop(c);
    b.close();
    std::fs::remove_dir_all(&root).unwrap();
}

// ---------------------------------------------------------------- crash loop

const CRASH_TOPIC: &str = "crash";
const CRASH_PARTITIONS: u32 = 2;
/// Most messages one child publishes before it waits to be killed.
const CRASH_MAX_PUBLISHES: u64 = 200;
/// The child commits its group every this many publishes.
const COMMIT_EVERY: u64 = 16;

/// The payload of message `i` of run `run`: self-describing, so a damaged
/// or mixed-up record cannot pass for a good one, and of varying length.
fn crash_payload(run: u64, i: u64) -> Vec<u8> {
    let head = format!("run{run}-i{i}:");
    let mut p = head.clone().into_bytes();
    while p.len() < 24 + ((run * 31 + i * 17) % 300) as usize {
        p.extend_from_slice(head.as_bytes());
    }
    p
}

/// Parses and checks a payload; `None` if it is not exactly one of ours.
fn parse_crash_payload(p: &[u8]) -> Option<(u64, u64)> {
    let s = std::str::from_utf8(p).ok()?;
    let head = s.split(':').next()?;
    let (run, i) = head.strip_prefix("run")?.split_once("-i")?;
    let (run, i) = (run.parse().ok()?, i.parse().ok()?);
    (crash_payload(run, i) == p).then_some((run, i))
}

/// The child: publishes, printing `P run i partition offset` after each
/// publish returns and `C partition offset` after each commit returns.
/// With `wait_marked`, once it has published `max` it waits until the
/// partitions' stats say every sealed segment is marked complete (the
/// flusher's round, within an interval under `Interval` and `Never`; at
/// once under `Always`) before it prints `DONE` and waits to be killed.
fn crash_child(dir: &Path, fsync: Fsync, run: u64, max: u64, wait_marked: bool) {
    let b = open(dir, fsync);
    let options = TopicOptions {
        partitions: CRASH_PARTITIONS,
        retention_bytes: None,
        segment_bytes: Some(16 << 10),
        ..TopicOptions::default()
    };
    match b.create_topic(CRASH_TOPIC, &options) {
        Ok(()) | Err(Error::TopicExists(_)) => {}
        Err(e) => panic!("{e}"),
    }
    let mut group = b.consumer("g", CRASH_TOPIC, ConsumerOptions::default()).unwrap();
    let out = std::io::stdout();
    let mut out = out.lock();
    for i in 0..max {
        let payload = crash_payload(run, i);
        let key = format!("key{}", i % 5);
        let pos = b.publish(CRASH_TOPIC, &Record::new(&payload).with_key(key.as_bytes())).unwrap();
        writeln!(out, "P {run} {i} {} {}", pos.partition, pos.offset).unwrap();
        out.flush().unwrap();
        if i % COMMIT_EVERY == COMMIT_EVERY - 1 {
            while !group.poll(1000, Duration::ZERO).unwrap().is_empty() {}
            group.commit().unwrap();
            for p in 0..CRASH_PARTITIONS {
                if let Ok(c) = group.committed(p) {
                    writeln!(out, "C {p} {c}").unwrap();
                }
            }
            out.flush().unwrap();
        }
    }
    if wait_marked {
        wait_until("the flusher to mark every sealed segment", || {
            b.topic_stats(CRASH_TOPIC).unwrap().partitions.iter().all(|p| p.unmarked_segments == 0)
        });
    }
    writeln!(out, "DONE").unwrap();
    out.flush().unwrap();
    drop(out);
    // Until the parent kills it.
    let _ = std::io::stdin().read(&mut [0u8; 1]);
}

/// How many runs a crash loop makes (`RILL_CRASH_ITERATIONS`, default 50)
/// and the seed of its kill points (`RILL_CRASH_SEED` replays a run).
fn crash_loop_runs() -> (u64, u64) {
    let iterations: u64 = std::env::var("RILL_CRASH_ITERATIONS").map_or(50, |v| v.parse().unwrap());
    let seed = std::env::var("RILL_CRASH_SEED").map_or_else(
        |_| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1,
        |v| v.parse().unwrap(),
    );
    (iterations, seed)
}

/// Kills the child of run `run` (at its kill point: the caller read its
/// lines up to there), hands `record` every line it printed before it
/// died (acknowledged too), and checks that the kill is what ended it.
fn kill_and_drain(c: &mut Child, lines: Lines<BufReader<ChildStdout>>, run: u64, mut record: impl FnMut(&str)) {
    c.kill().unwrap();
    let status = c.wait().unwrap();
    for line in lines {
        record(&line.unwrap());
    }
    drop(c.stdin.take());
    assert!(status.code().is_none(), "the child ended by itself ({status}) in run {run}");
}

fn crash_loop(fsync: Fsync) {
    let (iterations, seed) = crash_loop_runs();
    let name = policy_name(fsync);
    println!("  crash loop {name}: {iterations} iterations, RILL_CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let root = temp_dir(&format!("crash-{name}"));
    let dir = root.to_str().unwrap().to_owned();
    // (partition, offset) -> (run, i) of every acknowledged message so far.
    let mut acked: BTreeMap<(u32, u64), (u64, u64)> = BTreeMap::new();
    let mut committed = vec![0u64; CRASH_PARTITIONS as usize];
    let mut lost_unsynced = 0u64;
    // Issue 40, item 2: every this many runs, damage a copy (see `sealed_damage_is_corrupt`).
    let damage_every: u64 = std::env::var("RILL_CRASH_DAMAGE_EVERY").map_or(5, |v| v.parse().unwrap()).max(1);
    let mut damaged_sealed = 0u64;
    for run in 0..iterations {
        let kill_after = rng.below(CRASH_MAX_PUBLISHES + 1);
        // Issue 40, item 2: in a damage run under `Interval` and `Never`, the
        // child publishes up to the kill point and waits there until the
        // flusher has marked its sealed segments (see `crash_child`); the
        // kill comes after its `DONE`. Under `Always` the kill comes at the
        // kill point as in any run: its appends return with them marked.
        let damage_now = run % damage_every == damage_every - 1;
        let wait_marked = damage_now && fsync != Fsync::Always;
        let (max, mode) = if wait_marked { (kill_after, "wait-marked") } else { (CRASH_MAX_PUBLISHES, "-") };
        let mut c: Child = child("child-crash", &[&dir, name, &run.to_string(), &max.to_string(), mode])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(c.stdout.take().unwrap()).lines();
        let mut seen = 0;
        let mut reported_commits = vec![None; CRASH_PARTITIONS as usize];
        let mut record = |line: &str, acked: &mut BTreeMap<(u32, u64), (u64, u64)>| {
            let f: Vec<&str> = line.split(' ').collect();
            match f[0] {
                "P" => {
                    let (r, i, p, o) =
                        (f[1].parse().unwrap(), f[2].parse().unwrap(), f[3].parse().unwrap(), f[4].parse().unwrap());
                    assert_eq!(acked.insert((p, o), (r, i)), None, "offset {p}/{o} handed out twice");
                }
                "C" => reported_commits[f[1].parse::<usize>().unwrap()] = Some(f[2].parse::<u64>().unwrap()),
                "DONE" => {}
                other => panic!("unexpected line {other:?}"),
            }
        };
        let mut done = false;
        while seen < kill_after || (wait_marked && !done) {
            let Some(line) = lines.next() else { break };
            let line = line.unwrap();
            if line.starts_with('P') {
                seen += 1;
            }
            done = line == "DONE";
            record(&line, &mut acked);
            if done {
                break;
            }
        }
        kill_and_drain(&mut c, lines, run, |line| record(line, &mut acked));
        // Issue 40, item 2: the killed child's sealed segments are marked:
        // under `Always`, those before its last acknowledged record's; under
        // `Interval` and `Never`, all of them once the child saw the flusher
        // mark them (every file but the newest, as after a clean close).
        assert!(!wait_marked || done, "run {run}: the child did not report its segments marked");
        for p in (0..CRASH_PARTITIONS).filter(|_| damage_now) {
            let known: BTreeMap<u64, (u64, u64)> =
                acked.range((p, 0)..(p + 1, 0)).map(|(&(_, o), &id)| (o, id)).collect();
            let eligible_below = match fsync {
                Fsync::Always => known.keys().next_back().copied().unwrap_or(0),
                _ => u64::MAX,
            };
            damaged_sealed +=
                u64::from(sealed_damage_is_corrupt(&root, fsync, &format!("{run}-kill"), p, eligible_below, &known));
        }

        let b = open(&root, fsync);
        let stats = match b.topic_stats(CRASH_TOPIC) {
            Ok(stats) => stats,
            // Killed before it created the topic (a kill point of 0 in the
            // first run): nothing was acknowledged, so nothing can be lost,
            // and the next run creates the topic.
            Err(Error::NoSuchTopic(_)) if acked.is_empty() => continue,
            Err(e) => panic!("run {run}: the topic is gone after the kill: {e}"),
        };
        let mut present: BTreeMap<(u32, u64), (u64, u64)> = BTreeMap::new();
        let mut reader = b.consumer("verify", CRASH_TOPIC, ConsumerOptions::default()).unwrap();
        let ends: Vec<u64> = stats.partitions.iter().map(|p| p.next_offset).collect();
        let mut next = vec![0u64; CRASH_PARTITIONS as usize];
        let deadline = Instant::now() + WAIT;
        // Read until every position is at its end: skip records (holes a
        // kill left, see the contended loop) are passed over, not delivered.
        while (0..CRASH_PARTITIONS).any(|p| reader.position(p).map_or(true, |at| at < ends[p as usize])) {
            assert!(Instant::now() < deadline, "run {run}: read {} of {ends:?}", present.len());
            for m in reader.poll(1000, Duration::from_millis(100)).unwrap() {
                let p = m.partition();
                assert!(m.offset() >= next[p as usize], "run {run}: offsets of partition {p} go back");
                next[p as usize] = m.offset() + 1;
                let id = parse_crash_payload(m.payload())
                    .unwrap_or_else(|| panic!("run {run}: a damaged record was delivered at {p}/{}", m.offset()));
                present.insert((p, m.offset()), id);
            }
        }
        drop(reader);
        for (pos, id) in &acked {
            match present.get(pos) {
                Some(got) => assert_eq!(got, id, "run {run}: {pos:?} holds another message"),
                // Only a machine crash may lose acknowledged messages, and
                // only under Interval and Never: this is a process crash.
                None => panic!("run {run} ({name}): acknowledged message {id:?} at {pos:?} is gone"),
            }
        }
        // Records past the acknowledged ones (published, not yet reported)
        // may or may not be there; the acknowledged set is what they extend.
        lost_unsynced += present.len() as u64 - acked.len() as u64;
        for (pos, id) in &present {
            acked.entry(*pos).or_insert(*id);
        }
        // A child killed before its first commit leaves no group behind:
        // then nothing may have been committed before either.
        let partitions = match b.group_stats("g", CRASH_TOPIC) {
            Ok(group) => group.partitions,
            Err(Error::NotFound(_)) => {
                assert!(
                    committed.iter().all(|&c| c == 0) && reported_commits.iter().all(Option::is_none),
                    "run {run}: the group's commits are gone"
                );
                Vec::new()
            }
            Err(e) => panic!("run {run}: group_stats: {e}"),
        };
        for gp in &partitions {
            let now = gp.committed.unwrap_or(0);
            let p = gp.partition as usize;
            assert!(now >= committed[p], "run {run}: committed offset of {p} went back from {} to {now}", committed[p]);
            if let Some(reported) = reported_commits[p] {
                assert!(now >= reported, "run {run}: commit {reported} of {p} acknowledged, {now} found");
            }
            assert!(now <= gp.end);
            committed[p] = now;
        }
        b.close();
        drop(b);
        // Issue 40, item 2: damage in a sealed segment of the recovered directory.
        if damage_now {
            let p = (run / damage_every % u64::from(CRASH_PARTITIONS)) as u32;
            let known: BTreeMap<u64, (u64, u64)> =
                present.range((p, 0)..(p + 1, 0)).map(|(&(_, o), &id)| (o, id)).collect();
            damaged_sealed += u64::from(sealed_damage_is_corrupt(&root, fsync, &run.to_string(), p, u64::MAX, &known));
        }
    }
    println!("  {} messages, {lost_unsynced} published but unreported at a kill", acked.len());
    println!("  {damaged_sealed} damaged copies with a sealed segment: Corrupt, and repaired to the records before it");
    std::fs::remove_dir_all(&root).unwrap();
}

// ------------------------------------- sealed segments marked before a kill

/// Records the marking test's child publishes: several 16 KiB segments per
/// partition.
const MARKED_PUBLISHES: u64 = 1000;

/// Issue 40, item 2, under `Interval` and `Never`: a child publishes enough
/// to seal several segments per partition on a fresh directory and waits
/// until the partitions' stats say the flusher marked them complete; then
/// it is killed (no clean close, so no final round). On the directory as
/// the kill left it, a byte flipped inside the newest sealed segment of
/// each partition is `Corrupt` without `repair`, and `repair` keeps exactly
/// the records before it. Before the flusher's marking round, under `Never`
/// no segment got its marker before a clean close: the child waited in vain
/// (and the damage, had it been killed anyway, read as a torn tail).
fn marked_before_a_kill(fsync: Fsync) {
    let name = policy_name(fsync);
    let root = temp_dir(&format!("marked-{name}"));
    let dir = root.to_str().unwrap().to_owned();
    let mut c = child("child-crash", &[&dir, name, "0", &MARKED_PUBLISHES.to_string(), "wait-marked"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut acked: BTreeMap<(u32, u64), (u64, u64)> = BTreeMap::new();
    let mut done = false;
    for line in BufReader::new(c.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let f: Vec<&str> = line.split(' ').collect();
        match f[0] {
            "P" => {
                let id = (f[1].parse().unwrap(), f[2].parse().unwrap());
                acked.insert((f[3].parse().unwrap(), f[4].parse().unwrap()), id);
            }
            "C" => {}
            "DONE" => {
                done = true;
                break;
            }
            other => panic!("unexpected line {other:?}"),
        }
    }
    c.kill().unwrap();
    let status = c.wait().unwrap();
    drop(c.stdin.take());
    assert!(done && status.code().is_none(), "{name}: the child did not see its segments marked ({status})");
    assert_eq!(acked.len() as u64, MARKED_PUBLISHES);
    let mut damaged = 0;
    for p in 0..CRASH_PARTITIONS {
        let known: BTreeMap<u64, (u64, u64)> = acked.range((p, 0)..(p + 1, 0)).map(|(&(_, o), &id)| (o, id)).collect();
        if known.len() as u64 >= MARKED_PUBLISHES / 5 {
            // One key's share or more: over 16 KiB, a sealed segment.
            assert!(sealed_damage_is_corrupt(&root, fsync, &format!("marked-{name}-{p}"), p, u64::MAX, &known));
            damaged += 1;
        }
    }
    assert!(damaged >= 1, "{name}: no partition sealed a segment");
    std::fs::remove_dir_all(&root).unwrap();
}

// ------------------------------------------------------ contended crash loop
//
// Many publisher threads on one partition: a publish returns once its own
// record is committed, while another thread may still be copying an earlier
// offset, so a kill leaves holes (unwritten records with acknowledged ones
// after them). Recovery must keep every acknowledged record at its offset,
// deliver no skip record and no damaged one, and never hand an offset out
// again to another record.

const CONTENDED_TOPIC: &str = "contended";
/// Publisher threads in the child.
const CONTENDED_THREADS: u64 = 8;
/// Records each thread publishes at most before it waits to be killed.
const CONTENDED_PER_THREAD: u64 = 40;
/// Bytes of every record's payload.
const CONTENDED_RECORD: usize = 4096;
/// Segment size: small, so holes also fall at the end of segment files.
const CONTENDED_SEGMENT: usize = 128 << 10;
/// The directory starts afresh every this many runs, so reading it all back
/// after each kill stays quick.
const CONTENDED_RUNS_PER_DIR: u64 = 10;

/// The payload of record `i` of thread `t` in run `run`: self-describing,
/// `CONTENDED_RECORD` bytes.
fn contended_payload(run: u64, t: u64, i: u64) -> Vec<u8> {
    let head = format!("run{run}-t{t}-i{i}:");
    head.bytes().cycle().take(CONTENDED_RECORD).collect()
}

/// Parses and checks a payload; `None` if it is not exactly one of ours.
fn parse_contended_payload(p: &[u8]) -> Option<(u64, u64, u64)> {
    let s = std::str::from_utf8(p.get(..40)?).ok()?;
    let head = s.split(':').next()?;
    let (run, rest) = head.strip_prefix("run")?.split_once("-t")?;
    let (t, i) = rest.split_once("-i")?;
    let id = (run.parse().ok()?, t.parse().ok()?, i.parse().ok()?);
    (contended_payload(id.0, id.1, id.2) == p).then_some(id)
}

/// The child: `CONTENDED_THREADS` threads publish to the one partition,
/// singly and in batches of two to four, each printing `P run t i offset`
/// once a publish has returned.
fn contended_child(dir: &Path, fsync: Fsync, run: u64) {
    let b = open(dir, fsync);
    let options = TopicOptions {
        partitions: 1,
        retention_bytes: None,
        segment_bytes: Some(CONTENDED_SEGMENT),
        ..TopicOptions::default()
    };
    match b.create_topic(CONTENDED_TOPIC, &options) {
        Ok(()) | Err(Error::TopicExists(_)) => {}
        Err(e) => panic!("{e}"),
    }
    let report = |t: u64, i: u64, offset: u64| {
        let mut out = std::io::stdout().lock();
        writeln!(out, "P {run} {t} {i} {offset}").unwrap();
        out.flush().unwrap();
    };
    std::thread::scope(|s| {
        for t in 0..CONTENDED_THREADS {
            let b = &b;
            s.spawn(move || {
                let mut i = 0;
                while i < CONTENDED_PER_THREAD {
                    // Every third publish a batch of two to four.
                    let n = if (i + t) % 3 == 0 { (2 + (i + t) % 3).min(CONTENDED_PER_THREAD - i) } else { 1 };
                    let payloads: Vec<Vec<u8>> = (i..i + n).map(|k| contended_payload(run, t, k)).collect();
                    if n == 1 {
                        let pos = b.publish(CONTENDED_TOPIC, &Record::new(&payloads[0])).unwrap();
                        report(t, i, pos.offset);
                    } else {
                        let records: Vec<Record<'_>> = payloads.iter().map(|p| Record::new(p)).collect();
                        let positions = b.publish_batch(CONTENDED_TOPIC, &records).unwrap();
                        for (k, pos) in positions.iter().enumerate() {
                            report(t, i + k as u64, pos.offset);
                        }
                    }
                    i += n;
                }
            });
        }
    });
    let mut out = std::io::stdout().lock();
    writeln!(out, "DONE").unwrap();
    out.flush().unwrap();
    drop(out);
    // Until the parent kills it.
    let _ = std::io::stdin().read(&mut [0u8; 1]);
}

/// Every record a reader of partition 0 of `CONTENDED_TOPIC` is handed, by
/// offset, checked as it comes: offsets rising, each payload one of ours.
fn read_contended(b: &Broker, run: u64) -> BTreeMap<u64, (u64, u64, u64)> {
    let end = b.topic_stats(CONTENDED_TOPIC).unwrap().partitions[0].next_offset;
    let mut reader = b.consumer("verify", CONTENDED_TOPIC, ConsumerOptions::default()).unwrap();
    let mut present = BTreeMap::new();
    let mut last: Option<u64> = None;
    let deadline = Instant::now() + WAIT;
    // The position passes skip records too: reading is done when it is at
    // the end, whatever the holes.
    while reader.position(0).map_or(true, |p| p < end) {
        assert!(Instant::now() < deadline, "run {run}: read up to {:?} of {end}", reader.position(0));
        for m in reader.poll(256, Duration::from_millis(100)).unwrap() {
            assert!(last.is_none_or(|l| m.offset() > l), "run {run}: offset {} delivered out of order", m.offset());
            last = Some(m.offset());
            let id = parse_contended_payload(m.payload())
                .unwrap_or_else(|| panic!("run {run}: a damaged or skip record was delivered at {}", m.offset()));
            present.insert(m.offset(), id);
        }
    }
    present
}

fn crash_loop_contended(fsync: Fsync) {
    let (iterations, seed) = crash_loop_runs();
    let name = policy_name(fsync);
    println!("  contended crash loop {name}: {iterations} iterations, RILL_CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let max = CONTENDED_THREADS * CONTENDED_PER_THREAD;
    let (mut holes, mut total_acked) = (0u64, 0u64);
    let mut root = temp_dir(&format!("contended-{name}"));
    // offset -> (run, thread, i) of every acknowledged record in `root`.
    let mut acked: BTreeMap<u64, (u64, u64, u64)> = BTreeMap::new();
    for run in 0..iterations {
        if run > 0 && run % CONTENDED_RUNS_PER_DIR == 0 {
            std::fs::remove_dir_all(&root).unwrap();
            root = temp_dir(&format!("contended-{name}"));
            acked.clear();
        }
        let dir = root.to_str().unwrap().to_owned();
        // Kill while the threads are all publishing: after 1 to max/2 acks.
        let kill_after = 1 + rng.below(max / 2);
        let mut c: Child = child("child-contended", &[&dir, name, &run.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(c.stdout.take().unwrap()).lines();
        let record = |line: &str, acked: &mut BTreeMap<u64, (u64, u64, u64)>| {
            let f: Vec<&str> = line.split(' ').collect();
            match f[0] {
                "P" => {
                    let id = (f[1].parse().unwrap(), f[2].parse().unwrap(), f[3].parse().unwrap());
                    let offset = f[4].parse().unwrap();
                    if let Some(before) = acked.insert(offset, id) {
                        panic!("run {run} ({name}): offset {offset} handed out twice: {before:?}, then {id:?}");
                    }
                }
                "DONE" => {}
                other => panic!("unexpected line {other:?}"),
            }
        };
        let mut seen = 0;
        while seen < kill_after {
            let Some(line) = lines.next() else { break };
            let line = line.unwrap();
            seen += u64::from(line.starts_with('P'));
            let done = line == "DONE";
            record(&line, &mut acked);
            if done {
                break;
            }
        }
        kill_and_drain(&mut c, lines, run, |line| record(line, &mut acked));

        let b = open(&root, fsync);
        let present = read_contended(&b, run);
        for (offset, id) in &acked {
            match present.get(offset) {
                Some(got) => assert_eq!(got, id, "run {run} ({name}): offset {offset} holds another record"),
                None => panic!("run {run} ({name}): acknowledged record {id:?} at offset {offset} is gone"),
            }
        }
        let end = b.topic_stats(CONTENDED_TOPIC).unwrap().partitions[0].next_offset;
        let first = present.keys().next().copied().unwrap_or(end);
        holes += (end - first) - present.len() as u64;
        total_acked += acked.len() as u64;
        // Records published but not reported before the kill extend the
        // acknowledged set: the next run must not hand their offsets out.
        for (offset, id) in present {
            acked.entry(offset).or_insert(id);
        }
        b.close();
    }
    println!("  {total_acked} acknowledged records checked, {holes} skipped offsets (holes) seen");
    std::fs::remove_dir_all(&root).unwrap();
}
// ------------------------------------------------------- delete under load

/// Publishing threads racing a delete of a durable topic (issue 40, item 6).
const DELETE_PUBLISHERS: usize = 3;
/// Each publisher publishes this many before the delete: segments roll, are
/// prepared ahead and recycled by retention meanwhile.
const BEFORE_DELETE: u64 = 1500;

fn delete_topic_options() -> TopicOptions {
    TopicOptions { partitions: 3, retention_bytes: Some(64 * 1024), ..TopicOptions::default() }
}

/// A durable topic deleted while three threads publish to it, 10 times
/// (100 with `RILL_LONG_TESTS`): the delete succeeds, the racing publishes
/// fail only with `NoSuchTopic`, the name is free at once, and the
/// directory reopens with nothing left of the deleted ones. Before the fix
/// the delete failed with ENOTEMPTY within a few rounds, and racing
/// publishes failed with ENOENT.
fn delete_under_publishers() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let dir = temp_dir("delete");
    let rounds = if std::env::var_os("RILL_LONG_TESTS").is_some() { 100 } else { 10 };
    {
        let b = open(&dir, Fsync::Never);
        b.create_topic("jobs", &delete_topic_options()).unwrap();
        for round in 0..rounds {
            let published: Vec<AtomicU64> = (0..DELETE_PUBLISHERS).map(|_| AtomicU64::new(0)).collect();
            let stop = AtomicBool::new(false);
            let errors = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..DELETE_PUBLISHERS)
                    .map(|i| {
                        let (b, published, stop) = (&b, &published[i], &stop);
                        scope.spawn(move || {
                            let payload = [b'x'; 200];
                            let publisher = b.publisher("jobs").unwrap();
                            for n in 0u64.. {
                                let key = format!("{i}-{n}");
                                let record = Record::new(&payload).with_key(key.as_bytes());
                                // One thread through a publisher, the others by name.
                                let r = if i == 0 { publisher.publish(&record) } else { b.publish("jobs", &record) };
                                match r {
                                    // Relaxed: a progress count; the join orders the last read.
                                    Ok(_) => published.fetch_add(1, Ordering::Relaxed),
                                    Err(Error::NoSuchTopic(_)) => return None,
                                    Err(e) => return Some(e),
                                };
                                // Relaxed: a stop flag, polled.
                                if stop.load(Ordering::Relaxed) {
                                    return None;
                                }
                            }
                            None
                        })
                    })
                    .collect();
                // Relaxed: progress counts, polled.
                wait_until("the publishers under way", || {
                    published.iter().all(|p| p.load(Ordering::Relaxed) >= BEFORE_DELETE)
                        || handles.iter().any(|h| h.is_finished())
                });
                let deleted = b.delete_topic("jobs");
                if deleted.is_err() {
                    // Relaxed: see above; the join waits for them.
                    stop.store(true, Ordering::Relaxed);
                }
                let errors: Vec<Error> = handles.into_iter().filter_map(|h| h.join().unwrap()).collect();
                deleted.unwrap_or_else(|e| panic!("round {round}: the delete failed: {e}"));
                errors
            });
            assert!(errors.is_empty(), "round {round}: racing publishes failed otherwise than NoSuchTopic: {errors:?}");
            assert!(b.topics().iter().all(|t| t != "jobs"), "round {round}: still listed");
            b.create_topic("jobs", &delete_topic_options()).unwrap();
            assert_eq!(b.publish("jobs", &Record::new(b"fresh")).unwrap().offset, 0);
        }
    }
    let b = open(&dir, Fsync::Never);
    assert_eq!(b.topics(), vec!["jobs".to_string()]);
    assert_eq!(read_all(&b, "check", "jobs").len(), 1);
    drop(b);
    let left: Vec<_> = std::fs::read_dir(dir.join("topics")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), 1, "only the last topic's directory is left: {left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Kills a process in the middle of deleting a durable topic, at a
/// different moment each time: the directory opens again, with the topic
/// either whole (every message of the round that was being deleted) or
/// gone (not listed, no directory left, the name free). Before the fix a
/// kill during the removal left a partial, unlisted directory for ever.
fn kill_during_delete() {
    const KILLS: u64 = 8;
    for kill in 0..KILLS {
        let root = temp_dir("delete-kill");
        let data = root.join("data");
        let d = data.to_str().unwrap();
        let mut c = child("child-delete", &[d]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let mut out = BufReader::new(c.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "deleting", "kill {kill}");
        // A different moment each time: from at once to well into the
        // delete (spins, not a wait for anything).
        for _ in 0..kill * 200_000 {
            std::hint::spin_loop();
        }
        c.kill().unwrap();
        c.wait().unwrap();
        let b = open(&data, Fsync::Never);
        let listed = b.topics().iter().any(|t| t == "jobs");
        if listed {
            assert_eq!(read_all(&b, "check", "jobs").len() as u64, DELETE_CHILD_MESSAGES, "kill {kill}: whole");
        } else {
            b.create_topic("jobs", &delete_topic_options()).unwrap();
        }
        assert_eq!(b.topics().len(), 2, "kill {kill}");
        drop(b);
        // Nothing of a deleted "jobs" is left beside the two listed topics.
        let left: Vec<_> = std::fs::read_dir(data.join("topics")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 2, "kill {kill}: a directory per listed topic (listed: {listed}): {left:?}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}

/// Messages `delete_child` publishes before its delete.
const DELETE_CHILD_MESSAGES: u64 = 6000;

/// `kill_during_delete`'s child: makes a topic of many segment files, says
/// `deleting`, deletes it and waits to be killed.
fn delete_child(dir: &Path) {
    let b = open(dir, Fsync::Never);
    let options = TopicOptions { partitions: 3, segment_bytes: Some(16 * 1024), ..TopicOptions::default() };
    b.create_topic("jobs", &options).unwrap();
    // A topic listed after it, so the deleted one's directory number is not
    // the next one a creation would clear and reuse.
    b.create_topic("keep", &TopicOptions::default()).unwrap();
    let payload = [b'x'; 200];
    for i in 0..DELETE_CHILD_MESSAGES {
        b.publish("jobs", &Record::new(&payload).with_key(&i.to_be_bytes())).unwrap();
    }
    println!("deleting");
    std::io::stdout().flush().unwrap();
    b.delete_topic("jobs").unwrap();
    // Until the parent kills it.
    let _ = std::io::stdin().read(&mut [0u8; 1]);
}

// ------------------------------------------- crash loop: damage in a sealed segment

/// Issue 40, item 2, in the crash loop: a byte flipped inside a sealed
/// segment of partition `p` of a copy of `src` (the loop goes on with `src`
/// itself) makes the reopen fail with `Corrupt` without `repair`; with it,
/// the partition keeps exactly its records before the damaged one. Only
/// files before the one holding offset `eligible_below` are damaged: every
/// segment file but the newest after a clean close, and after a kill under
/// `Always` those before the last acknowledged record's, which its append
/// returned only once they were marked complete; under `Interval` and
/// `Never`, every file but the newest once the killed child saw the
/// flusher mark every sealed segment. `records` are the offsets
/// of partition `p` known to hold `(run, i)`. Returns whether it found a
/// file to damage.
fn sealed_damage_is_corrupt(
    src: &Path,
    fsync: Fsync,
    tag: &str,
    p: u32,
    eligible_below: u64,
    records: &BTreeMap<u64, (u64, u64)>,
) -> bool {
    let copy = temp_dir(&format!("sealed-{tag}"));
    for file in files_under(src) {
        let to = copy.join(file.strip_prefix(src).unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&file, &to).unwrap();
    }
    // topics/<topic dir>/<partition>/<base>.seg
    let mut files: Vec<(u64, PathBuf)> = files_under(&copy)
        .into_iter()
        .filter(|f| f.parent().and_then(Path::file_name).is_some_and(|n| n == p.to_string().as_str()))
        .filter_map(|f| {
            let name = f.file_name()?.to_str()?;
            Some((name.strip_suffix(".seg")?.parse().ok()?, f))
        })
        .collect();
    files.sort();
    // The file, its records (offsets from its base to the next file's), and
    // one in the middle of them to damage.
    let victim = files
        .windows(2)
        .filter(|w| w[1].0 <= eligible_below)
        .map(|w| (w[0].1.clone(), records.range(w[0].0..w[1].0).collect::<Vec<_>>()))
        .rfind(|(_, in_file)| !in_file.is_empty());
    let Some((path, in_file)) = victim else {
        std::fs::remove_dir_all(&copy).unwrap();
        return false;
    };
    let (&offset, &(run, i)) = in_file[in_file.len() / 2];
    let payload = crash_payload(run, i);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.windows(payload.len()).position(|w| w == payload).expect("the record is in its file");
    bytes[at + payload.len() / 2] ^= 0x04;
    std::fs::write(&path, &bytes).unwrap();

    let config = |repair| BrokerConfig { data_dir: Some(copy.clone()), fsync, repair, ..BrokerConfig::default() };
    match Broker::new(config(false)) {
        Err(Error::Corrupt { file, .. }) => assert_eq!(file.file_name(), path.file_name(), "{tag}"),
        Err(e) => panic!("{tag}: damage at {p}/{offset} in {path:?}: {e}"),
        Ok(_) => panic!("{tag}: damage at {p}/{offset} in sealed {path:?} was not Corrupt without repair"),
    }
    let b = Broker::new(config(true)).unwrap();
    let stats = b.topic_stats(CRASH_TOPIC).unwrap();
    let ps = &stats.partitions[p as usize];
    assert_eq!(ps.next_offset, offset, "{tag}: repair keeps exactly the records before {p}/{offset}: {ps:?}");
    assert!(ps.recovered_repaired, "{tag}: {ps:?}");
    let after = records.range(offset + 1..).count() as u64;
    assert!(
        ps.recovered_truncated_records >= after,
        "{tag}: the {after} records known after {p}/{offset}, in its file and later ones, are counted as cut: {ps:?}"
    );
    let mut reader = b.consumer("sealed-check", CRASH_TOPIC, ConsumerOptions::default()).unwrap();
    let mut got = BTreeMap::new();
    let deadline = Instant::now() + WAIT;
    while (got.len() as u64) < offset {
        assert!(Instant::now() < deadline, "{tag}: read {} of {offset}", got.len());
        for m in reader.poll(1000, Duration::from_millis(100)).unwrap() {
            if m.partition() == p {
                got.insert(m.offset(), parse_crash_payload(m.payload()).expect("an intact record"));
            }
        }
    }
    let want: BTreeMap<u64, (u64, u64)> = records.range(..offset).map(|(o, id)| (*o, *id)).collect();
    assert_eq!(got, want, "{tag}");
    drop(reader);
    b.close();
    drop(b);
    std::fs::remove_dir_all(&copy).unwrap();
    true
}
