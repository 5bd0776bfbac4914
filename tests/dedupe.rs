//! Publishing without duplicates (issue 41): a record id and a per-topic
//! dedupe window, as users retry publishes: at once, from racing threads,
//! after the window, after a restart and after a kill -9.
//!
//! This file is its own test harness (`harness = false` in Cargo.toml), as
//! `persist.rs` is: it re-runs itself with a `child-*` argument to be the
//! process that is killed.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use rill::{
    Ack, Broker, BrokerConfig, ConsumerOptions, Error, Overflow, Position, Published, Record, SubscriptionOptions,
    TopicOptions,
};

/// How long anything that should happen may take before the test fails.
const WAIT: Duration = Duration::from_secs(30);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(role) = args.get(1).filter(|a| a.starts_with("child-")) {
        match role.as_str() {
            "child-publish-then-die" => publish_then_wait_to_die(Path::new(&args[2])),
            other => panic!("unknown role {other}"),
        }
        return;
    }
    let filters: Vec<&String> = args[1..].iter().filter(|a| !a.starts_with('-')).collect();
    let tests: &[(&str, fn())] = &[
        ("a_duplicate_returns_the_first_position_flagged", duplicate_returns_the_first_position),
        ("different_ids_both_append", different_ids_both_append),
        ("an_id_given_as_the_rill_id_attribute_is_the_same_id", id_as_attribute),
        ("racing_publishers_append_each_id_once", racing_publishers_append_each_id_once),
        ("a_racer_waits_for_an_append_in_flight_and_gets_its_position", racer_waits_for_the_append_in_flight),
        ("a_batch_appends_each_id_once", batch_appends_each_id_once),
        ("a_long_batch_answers_each_id_as_one_publish_at_a_time_would", long_batch_answers_as_single_publishes),
        ("an_id_is_appended_again_once_its_window_ends", ids_expire),
        ("a_window_of_0_turns_the_check_off", window_0_turns_it_off),
        ("a_restart_inside_the_window_keeps_it", restart_inside_the_window),
        ("a_kill_between_publish_and_bookkeeping_then_a_retry_leaves_one_record", kill_then_retry),
        ("an_id_too_long_or_given_twice_is_refused_and_publishes_nothing", bad_ids_are_refused),
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

fn broker() -> Broker {
    Broker::new(BrokerConfig::default()).unwrap()
}

fn window(partitions: u32, ms: u64) -> TopicOptions {
    TopicOptions { partitions, dedupe_window_ms: ms, ..TopicOptions::default() }
}

/// A fresh, empty directory under the system's temp dir.
fn temp_dir(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let p = std::env::temp_dir().join(format!("rill-dedupe-{tag}-{}-{nanos}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn open(dir: &Path) -> Broker {
    Broker::new(BrokerConfig { data_dir: Some(dir.to_owned()), ..BrokerConfig::default() }).unwrap()
}

/// Every record of `topic`, as (id attribute, position), read by a consumer.
fn read_all(b: &Broker, topic: &str) -> Vec<(Option<String>, Position)> {
    let expected = b.topic_stats(topic).unwrap().publish_count as usize;
    let mut c = b.consumer("reader", topic, ConsumerOptions::default()).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + WAIT;
    while out.len() < expected {
        assert!(Instant::now() < deadline, "read {} of {expected} records", out.len());
        for m in c.poll(1024, Duration::from_millis(100)).unwrap() {
            let at = Position { partition: m.partition(), offset: m.record().offset() };
            out.push((m.record().attribute("rill.id").map(str::to_owned), at));
        }
    }
    drop(c);
    b.delete_group("reader", topic).unwrap();
    out
}

fn duplicate_returns_the_first_position() {
    let b = broker();
    b.create_topic("orders", &TopicOptions::with_partitions(4)).unwrap();
    let first = b.publish_outcome("orders", &Record::new(b"o-1").with_id("order-1")).unwrap();
    assert!(!first.duplicate);
    // Whichever partition round-robin would pick, and whatever the payload:
    // the same id is the same message.
    for payload in [&b"o-1"[..], b"changed"] {
        let again = b.publish_outcome("orders", &Record::new(payload).with_id("order-1")).unwrap();
        assert_eq!((again.position, again.duplicate), (first.position, true));
        // The plain calls return the first position too.
        assert_eq!(b.publish("orders", &Record::new(payload).with_id("order-1")).unwrap(), first.position);
    }
    let publisher = b.publisher("orders").unwrap();
    let via: Published = publisher.publish_outcome(&Record::new(b"o-1").with_id("order-1")).unwrap();
    assert_eq!((via.position, via.duplicate), (first.position, true));
    assert_eq!(publisher.publish(&Record::new(b"o-1").with_id("order-1")).unwrap(), first.position);
    assert_eq!(b.try_publish("orders", &Record::new(b"o-1").with_id("order-1")).unwrap(), first.position);
    let stats = b.topic_stats("orders").unwrap();
    assert_eq!((stats.publish_count, stats.dedupe_ids, stats.dedupe_duplicates), (1, 1, 7));
    assert_eq!(read_all(&b, "orders"), [(Some("order-1".to_owned()), first.position)]);
}

fn different_ids_both_append() {
    let b = broker();
    b.create_topic("orders", &TopicOptions::default()).unwrap();
    let one = b.publish_outcome("orders", &Record::new(b"x").with_id("a")).unwrap();
    let two = b.publish_outcome("orders", &Record::new(b"x").with_id("b")).unwrap();
    // Records without an id are never duplicates, even with equal payloads.
    let three = b.publish_outcome("orders", &Record::new(b"x")).unwrap();
    let four = b.publish_outcome("orders", &Record::new(b"x").with_attributes(&[("region", "IN")])).unwrap();
    let offsets: Vec<(u64, bool)> = [one, two, three, four].iter().map(|p| (p.position.offset, p.duplicate)).collect();
    assert_eq!(offsets, [(0, false), (1, false), (2, false), (3, false)]);
    let stats = b.topic_stats("orders").unwrap();
    assert_eq!((stats.publish_count, stats.dedupe_ids, stats.dedupe_duplicates), (4, 2, 0));
}

fn id_as_attribute() {
    let b = broker();
    b.create_topic("orders", &TopicOptions::default()).unwrap();
    let first = b.publish_outcome("orders", &Record::new(b"x").with_attributes(&[("rill.id", "a")])).unwrap();
    let again = b.publish_outcome("orders", &Record::new(b"x").with_id("a")).unwrap();
    let third =
        b.publish_outcome("orders", &Record::new(b"x").with_attributes(&[("k", "v"), ("rill.id", "a")])).unwrap();
    assert!(!first.duplicate && again.duplicate && third.duplicate);
    assert_eq!((again.position, third.position), (first.position, first.position));
    assert_eq!(b.topic_stats("orders").unwrap().publish_count, 1);
}

/// 8 threads publish the same ids at once, each through its own calls: per
/// id exactly one record, and every thread gets that record's position.
fn racing_publishers_append_each_id_once() {
    const THREADS: usize = 8;
    let ids: usize = std::env::var("RILL_DEDUPE_RACE_IDS").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000);
    let b = broker();
    b.create_topic("orders", &TopicOptions::with_partitions(4)).unwrap();
    let start = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (b, start) = (b.clone(), start.clone());
            std::thread::spawn(move || {
                let publisher = b.publisher("orders").unwrap();
                start.wait();
                (0..ids)
                    .map(|i| {
                        let id = format!("id-{i}");
                        let record = Record::new(id.as_bytes()).with_id(&id);
                        // Half the threads through the broker, half through a publisher.
                        let p = if t % 2 == 0 {
                            b.publish_outcome("orders", &record).unwrap()
                        } else {
                            publisher.publish_outcome(&record).unwrap()
                        };
                        (id, p)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut by_id: HashMap<String, Vec<Published>> = HashMap::new();
    for h in handles {
        for (id, p) in h.join().unwrap() {
            by_id.entry(id).or_default().push(p);
        }
    }
    let records = read_all(&b, "orders");
    assert_eq!(records.len(), ids, "one record per id");
    let landed: HashMap<String, Position> = records.into_iter().map(|(id, at)| (id.unwrap(), at)).collect();
    assert_eq!(landed.len(), ids, "no id appended twice");
    for (id, outcomes) in &by_id {
        assert_eq!(outcomes.iter().filter(|p| !p.duplicate).count(), 1, "{id}: one append");
        assert!(outcomes.iter().all(|p| p.position == landed[id]), "{id}: {outcomes:?} vs {:?}", landed[id]);
    }
    let stats = b.topic_stats("orders").unwrap();
    assert_eq!((stats.publish_count, stats.dedupe_ids), (ids as u64, ids as u64));
    assert_eq!(stats.dedupe_duplicates, (ids * (THREADS - 1)) as u64);
}

/// Polls `f` until it holds; fails the test, naming `what`, after [`WAIT`].
fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

/// The first publisher of an id is held inside its append (a `Block`
/// subscriber at its limit); a second publisher of the id, arriving then,
/// waits for that append instead of appending (its `try_publish` would fail
/// with `Full` if it tried), and returns the position the first one got.
fn racer_waits_for_the_append_in_flight() {
    let b = broker();
    b.create_topic("orders", &TopicOptions::default()).unwrap();
    let (release, stuck) = std::sync::mpsc::channel::<()>();
    let stuck = std::sync::Mutex::new(stuck);
    let options = SubscriptionOptions { overflow: Overflow::Block, lag_limit: Some(1), ..Default::default() };
    let sub = b
        .subscribe("orders", options, move |_| {
            stuck.lock().unwrap().recv().ok();
            Ack::Success
        })
        .unwrap();
    b.publish("orders", &Record::new(b"filler")).unwrap();
    let first = {
        let b = b.clone();
        std::thread::spawn(move || b.publish_outcome("orders", &Record::new(b"x").with_id("a")).unwrap())
    };
    // The first publisher holds the id (Pending) while it waits for room.
    wait_for("the first publisher's claim", || b.topic_stats("orders").unwrap().dedupe_ids == 1);
    let racer = {
        let b = b.clone();
        std::thread::spawn(move || b.try_publish("orders", &Record::new(b"x").with_id("a")))
    };
    wait_for("the racer to wait for the first append", || b.topic_stats("orders").unwrap().dedupe_waits == 1);
    drop(release);
    let first = first.join().unwrap();
    assert_eq!((first.position.offset, first.duplicate), (1, false));
    assert_eq!(racer.join().unwrap().unwrap(), first.position);
    let stats = b.topic_stats("orders").unwrap();
    assert_eq!((stats.publish_count, stats.dedupe_duplicates, stats.dedupe_waits), (2, 1, 1));
    assert!(sub.wait_idle(WAIT).unwrap());
}

fn batch_appends_each_id_once() {
    let b = broker();
    b.create_topic("orders", &TopicOptions::with_partitions(2)).unwrap();
    b.publish("orders", &Record::new(b"earlier").with_id("b")).unwrap();
    let records = [
        Record::new(b"1").with_id("a"),
        Record::new(b"2").with_id("b"),
        Record::new(b"3"),
        Record::new(b"4").with_id("a"),
        Record::new(b"5").with_id("c"),
    ];
    let done = b.publish_batch_outcome("orders", &records).unwrap();
    assert_eq!(done.iter().map(|p| p.duplicate).collect::<Vec<_>>(), [false, true, false, true, false]);
    assert_eq!(done[3].position, done[0].position);
    let positions = b.publish_batch("orders", &records).unwrap();
    assert_eq!(positions[0], done[0].position);
    assert_eq!(positions[4], done[4].position);
    // 1 earlier, a, 3, c, then only the second batch's unidentified record.
    assert_eq!(b.topic_stats("orders").unwrap().publish_count, 5);
    let publisher = b.publisher("orders").unwrap();
    let again = publisher.publish_batch_outcome(&records).unwrap();
    assert_eq!(again.iter().map(|p| p.duplicate).collect::<Vec<_>>(), [true, true, false, true, true]);
    assert_eq!(publisher.publish_batch(&records).unwrap()[1], b.publish("orders", &records[1]).unwrap());
}

/// A batch longer than the distance the window's table is read ahead
/// (`IDS_AHEAD` in `broker/topic.rs`), with ids repeated within it, ids
/// appended before it and records without ids: each record is answered as
/// when the same records are published one at a time into a second topic
/// (the same duplicates, each answered with its id's first record).
fn long_batch_answers_as_single_publishes() {
    let b = broker();
    for topic in ["batch", "single"] {
        b.create_topic(topic, &window(3, 60_000)).unwrap();
        for i in (0..60).step_by(7) {
            b.publish(topic, &Record::new(b"earlier").with_id(&format!("id-{i}"))).unwrap();
        }
    }
    let ids: Vec<String> = (0..200).map(|i| format!("id-{}", i * 37 % 60)).collect();
    let records: Vec<Record<'_>> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| if i % 9 == 4 { Record::new(b"plain") } else { Record::new(id.as_bytes()).with_id(id) })
        .collect();
    let batch = b.publish_batch_outcome("batch", &records).unwrap();
    let single: Vec<_> = records.iter().map(|r| b.publish_outcome("single", r).unwrap()).collect();
    let flags = |answers: &[Published]| answers.iter().map(|p| p.duplicate).collect::<Vec<_>>();
    assert_eq!(flags(&batch), flags(&single));
    // 60 ids in all, 9 of them appended before the batch.
    let plain = records.iter().filter(|r| r.id().unwrap().is_none()).count();
    assert_eq!(records.len() - plain - batch.iter().filter(|p| p.duplicate).count(), 51);
    for (topic, answers) in [("batch", &batch), ("single", &single)] {
        let all = read_all(&b, topic);
        assert_eq!(all.len(), 9 + 51 + plain, "{topic}");
        for (record, answer) in records.iter().zip(answers) {
            if let Some(id) = record.id().unwrap() {
                let found = all.iter().find(|(_, at)| *at == answer.position).map(|(id, _)| id.as_deref());
                assert_eq!(found, Some(Some(id)), "{topic}: {record:?} answered {answer:?}");
            }
        }
    }
}

/// A short window: a retry after it appends again. The wait polls for that
/// outcome (with a deadline), so no sleep stands in for the window's end.
fn ids_expire() {
    let b = broker();
    b.create_topic("orders", &window(1, 20)).unwrap();
    let first = b.publish_outcome("orders", &Record::new(b"x").with_id("a")).unwrap();
    let deadline = Instant::now() + WAIT;
    let later = loop {
        let p = b.publish_outcome("orders", &Record::new(b"x").with_id("a")).unwrap();
        if !p.duplicate {
            break p;
        }
        assert_eq!(p.position, first.position);
        assert!(Instant::now() < deadline, "the id never expired");
        std::thread::yield_now();
    };
    assert_eq!(later.position.offset, first.position.offset + 1);
    assert_eq!(b.topic_stats("orders").unwrap().publish_count, 2);
    // Expired ids leave the window (and its memory) too.
    let deadline = Instant::now() + WAIT;
    while b.topic_stats("orders").unwrap().dedupe_ids > 0 {
        assert!(Instant::now() < deadline, "the id stayed in the window");
        std::thread::yield_now();
    }
}

fn window_0_turns_it_off() {
    let b = broker();
    b.create_topic("orders", &window(1, 0)).unwrap();
    let one = b.publish_outcome("orders", &Record::new(b"x").with_id("a")).unwrap();
    let two = b.publish_outcome("orders", &Record::new(b"x").with_id("a")).unwrap();
    assert_eq!((one.position.offset, one.duplicate, two.position.offset, two.duplicate), (0, false, 1, false));
    let stats = b.topic_stats("orders").unwrap();
    assert_eq!((stats.publish_count, stats.dedupe_ids, stats.dedupe_duplicates), (2, 0, 0));
    // The id is still stored with the record.
    assert_eq!(read_all(&b, "orders")[1].0.as_deref(), Some("a"));
}

fn restart_inside_the_window() {
    let dir = temp_dir("restart");
    let first = {
        let b = open(&dir);
        b.create_topic("orders", &TopicOptions::with_partitions(3)).unwrap();
        b.create_topic("off", &window(1, 0)).unwrap();
        b.publish("off", &Record::new(b"x").with_id("a")).unwrap();
        for i in 0..10 {
            b.publish("orders", &Record::new(b"filler").with_key(format!("k{i}").as_bytes())).unwrap();
        }
        let mut first = BTreeMap::new();
        for id in ["a", "b", "c"] {
            first.insert(id, b.publish("orders", &Record::new(id.as_bytes()).with_id(id)).unwrap());
        }
        first
    };
    let b = open(&dir);
    assert_eq!(b.topic_stats("orders").unwrap().dedupe_ids, 3, "rebuilt from the log");
    for (id, at) in &first {
        let again = b.publish_outcome("orders", &Record::new(id.as_bytes()).with_id(id)).unwrap();
        assert_eq!((again.position, again.duplicate), (*at, true), "{id}");
    }
    assert_eq!(b.topic_stats("orders").unwrap().publish_count, 13);
    // A window of 0 is stored with the topic: still off after the restart.
    assert!(!b.publish_outcome("off", &Record::new(b"x").with_id("a")).unwrap().duplicate);
    drop(b);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The child: publishes one record with an id, prints its position, and
/// waits to be killed before it could note that the publish succeeded.
fn publish_then_wait_to_die(dir: &Path) {
    let b = open(dir);
    b.create_topic("orders", &TopicOptions::with_partitions(2)).unwrap();
    let at = b.publish("orders", &Record::new(b"order").with_id("order-1")).unwrap();
    println!("{} {}", at.partition, at.offset);
    // Until the parent kills it.
    loop {
        std::thread::park();
    }
}

fn kill_then_retry() {
    let dir = temp_dir("kill");
    let mut c = Command::new(std::env::current_exe().unwrap())
        .arg("child-publish-then-die")
        .arg(&dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(c.stdout.take().unwrap()).read_line(&mut line).unwrap();
    c.kill().unwrap();
    c.wait().unwrap();
    let (partition, offset) = line.trim().split_once(' ').expect("the child printed its position");
    let published = Position { partition: partition.parse().unwrap(), offset: offset.parse().unwrap() };
    // The retry after the restart, as the caller that never saw the outcome would.
    let b = open(&dir);
    let retry = b.publish_outcome("orders", &Record::new(b"order").with_id("order-1")).unwrap();
    assert_eq!((retry.position, retry.duplicate), (published, true));
    assert_eq!(read_all(&b, "orders"), [(Some("order-1".to_owned()), published)]);
    drop(b);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn bad_ids_are_refused() {
    let b = broker();
    b.create_topic("orders", &TopicOptions::default()).unwrap();
    b.create_topic("off", &window(1, 0)).unwrap();
    let long = "i".repeat(129);
    let longest = "i".repeat(128);
    let twice = [("rill.id", "b")];
    let bad = [
        Record::new(b"x").with_id(&long),
        Record::new(b"x").with_id(""),
        Record::new(b"x").with_attributes(&[("rill.id", "")]),
        Record::new(b"x").with_id("a").with_attributes(&twice),
    ];
    for topic in ["orders", "off"] {
        let publisher = b.publisher(topic).unwrap();
        for record in &bad {
            for e in [
                b.publish(topic, record).unwrap_err(),
                b.publish_outcome(topic, record).unwrap_err(),
                publisher.publish(record).unwrap_err(),
                publisher.publish_outcome(record).unwrap_err(),
                b.publish_batch(topic, &[Record::new(b"fine"), *record]).unwrap_err(),
                b.publish_batch_outcome(topic, &[Record::new(b"fine").with_id("ok"), *record]).unwrap_err(),
            ] {
                assert!(matches!(e, Error::InvalidArgument(_)), "{topic} {record:?}: {e:?}");
            }
        }
        let stats = b.topic_stats(topic).unwrap();
        assert_eq!((stats.publish_count, stats.dedupe_ids), (0, 0), "{topic}: nothing published");
        assert!(!b.publish_outcome(topic, &Record::new(b"x").with_id(&longest)).unwrap().duplicate);
    }
    let e = b.publish("orders", &Record::new(b"x").with_id(&long)).unwrap_err();
    assert!(e.to_string().contains("1 to 128 bytes"), "{e}");
}
