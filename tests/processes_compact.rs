//! Several processes, one data directory (issues 39 and 41): compacted
//! topics. Processes publish keyed records and tombstones to one compacted
//! durable topic; one process at a time compacts a partition (the holder
//! of its `compact.lock`), and every process follows the rebuilt files, so
//! a reader from the beginning in any process sees the newest record of
//! each key, in offset order. A compacting process killed with -9 at random
//! moments loses no record compaction keeps, leaves no torn record, and its
//! lock goes with it (see "The swap across processes" in
//! `src/log/compact.rs`).
//!
//! The other processes are this test binary run again with
//! [`procs::ROLE`] set and only the one test selected (see
//! `tests/common/procs.rs`). Parent and children hand over through marker
//! files in the data directory, waited for with a deadline.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::Rng;
use common::compact_model::{self, Partition};
use common::procs::{self, TempDir, child_role, expect_success, mark, spawn, wait_child_mark};
use rill::log::{MIN_SEGMENT_BYTES, Record};
use rill::{Broker, BrokerConfig, Cleanup, Sharing, TopicOptions};

fn config(dir: &Path) -> BrokerConfig {
    procs::config(dir, Sharing::Processes)
}

/// A compacted topic of small segments, one partition; tombstones kept
/// (so the newest record of every key stays). A short lag: a pass that
/// keeps a superseded record for it is due again once it passes, so the
/// passes go on until every sealed superseded record is gone, whatever
/// the dirty share ("Incremental passes" in `src/log/compact.rs`), and a
/// reader's view converges to the newest record of each key.
fn compacted() -> TopicOptions {
    TopicOptions {
        cleanup: Cleanup::Compact,
        segment_bytes: Some(MIN_SEGMENT_BYTES),
        min_compaction_lag_ms: 50,
        delete_retention_ms: 24 * 3_600_000,
        ..TopicOptions::default()
    }
}

/// The model keys a writer uses.
const KEYS: u64 = 16;

/// Publishes `n` records of writer `who` (round `round`): values of keys
/// `k0..k15`, every seventh a tombstone; returns them as (offset, key,
/// payload) for the model.
fn write(broker: &Broker, who: &str, round: u64, n: u64) -> Vec<(u64, Vec<u8>, Vec<u8>)> {
    (0..n)
        .map(|j| {
            let key = compact_model::key((j % KEYS) as u8);
            let value = if j % 7 == 3 { Vec::new() } else { format!("{who}-{round}-{j}").into_bytes() };
            let at = broker.publish("kv", &Record::new(&value).with_key(&key)).unwrap();
            (at.offset, key, value)
        })
        .collect()
}

/// The newest record of each key among `written`, in offset order.
fn newest(written: &[(u64, Vec<u8>, Vec<u8>)]) -> Partition {
    let mut last: BTreeMap<Vec<u8>, (u64, Vec<u8>)> = BTreeMap::new();
    for (offset, key, value) in written {
        if last.get(key).is_none_or(|(at, _)| at < offset) {
            last.insert(key.clone(), (*offset, value.clone()));
        }
    }
    let mut out: Partition = last.into_iter().map(|(key, (offset, value))| (offset, key, value)).collect();
    out.sort();
    out
}

/// What `written` says, one "<offset> <key hex> <payload hex>" line each.
fn lines(written: &[(u64, Vec<u8>, Vec<u8>)]) -> String {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    written.iter().map(|(o, k, v)| format!("{o} {} {}\n", hex(k), hex(v))).collect()
}

/// The records a child wrote with [`lines`] to `file`.
fn read_lines(dir: &Path, file: &str) -> Vec<(u64, Vec<u8>, Vec<u8>)> {
    let unhex = |s: &str| (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect();
    std::fs::read_to_string(dir.join(file))
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[0].parse().unwrap(), unhex(f[1]), unhex(f[2]))
        })
        .collect()
}

/// Waits until a reader from the beginning in `broker`'s process sees
/// exactly `want` (the model keys' records): a new consumer group each
/// look, so each reads from the first offset through this process's own
/// directory of mappings.
fn wait_to_read(broker: &Broker, what: &str, want: &Partition) {
    let deadline = std::time::Instant::now() + common::WAIT;
    for n in 0.. {
        let last = compact_model::read_model_keys(broker, &format!("{what}-{n}"), "kv", 1).remove(0);
        if &last == want {
            return;
        }
        if std::time::Instant::now() > deadline {
            let stats = broker.topic_stats("kv").unwrap();
            panic!(
                "{what}: a reader from the beginning read {} records, not the {} newest of their keys:\n{last:?}\n\
                 wanted {want:?}\n{stats:?}",
                last.len(),
                want.len()
            );
        }
    }
}

#[test]
fn two_processes_publish_to_a_compacted_topic_and_each_reads_the_newest_value_of_each_key() {
    const TEST: &str = "two_processes_publish_to_a_compacted_topic_and_each_reads_the_newest_value_of_each_key";
    if let Some((role, dir)) = child_role() {
        assert_eq!(role, "writer");
        let broker = Broker::new(config(&dir)).unwrap();
        procs::wait_mark(&dir, "go");
        let written = write(&broker, "child", 0, 600);
        std::fs::write(dir.join("written"), lines(&written)).unwrap();
        mark(&dir, "written.done");
        // The parent's model, when it has it: this process's reader must
        // see the compacted log too, whoever compacted.
        procs::wait_mark(&dir, "model.done");
        let want = read_lines(&dir, "model");
        wait_to_read(&broker, "child-reader", &want);
        let stats = broker.topic_stats("kv").unwrap();
        std::fs::write(dir.join("child-passes"), stats.compaction_passes.to_string()).unwrap();
        return;
    }
    let dir = TempDir::new("two");
    let broker = Broker::new(config(&dir.0)).unwrap();
    broker.create_topic("kv", &compacted()).unwrap();
    let mut child = spawn(TEST, "writer", &dir.0);
    mark(&dir.0, "go");
    let mut written = write(&broker, "parent", 0, 600);
    assert!(wait_child_mark(&dir.0, "written.done", &mut child), "the writer exited before it wrote");
    written.extend(read_lines(&dir.0, "written"));
    // Every model record sealed, so every pass may remove what it supersedes.
    compact_model::seal(&broker, "kv", 1);
    let want = newest(&written);
    std::fs::write(dir.0.join("model"), lines(&want)).unwrap();
    mark(&dir.0, "model.done");
    wait_to_read(&broker, "parent-reader", &want);
    expect_success(child, "the writer");
    let parent_passes = broker.topic_stats("kv").unwrap().compaction_passes;
    let child_passes: u64 = std::fs::read_to_string(dir.0.join("child-passes")).unwrap().parse().unwrap();
    println!("passes: parent {parent_passes}, child {child_passes}");
    assert!(parent_passes + child_passes > 0, "someone compacted");
    // A process that joins now maps the rebuilt files as they are.
    let late = Broker::new(config(&dir.0)).unwrap();
    wait_to_read(&late, "late-reader", &want);
    late.close();
    broker.close();
    // And the directory opened again (recovery) reads the same.
    let again = Broker::new(config(&dir.0)).unwrap();
    wait_to_read(&again, "reopened-reader", &want);
    again.close();
}

/// The newest record of each key among `written` that is not a
/// tombstone, in offset order: what a compacted topic whose tombstones
/// have gone holds.
fn live_keys(written: &[(u64, Vec<u8>, Vec<u8>)]) -> Partition {
    let mut want = newest(written);
    want.retain(|(_, _, value)| !value.is_empty());
    want
}

/// Every model-keyed record a new subscription from the beginning of
/// `kv` reads in `broker`'s process, once it has caught up.
fn subscribed_model_keys(broker: &Broker) -> Partition {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let into = seen.clone();
    let sub = broker
        .subscribe("kv", common::earliest(), move |m| {
            if m.key().is_some_and(|k| k.first() == Some(&b'k')) {
                into.lock().unwrap().push((m.offset(), m.key().unwrap().to_vec(), m.payload().to_vec()));
            }
            rill::Ack::Success
        })
        .unwrap();
    assert!(sub.wait_idle(common::WAIT).unwrap(), "the subscription caught up");
    sub.close();
    std::mem::take(&mut *seen.lock().unwrap())
}

/// A broker that created a compacted topic and then left it alone (it
/// neither publishes nor reads) still reads the compacted log once
/// another broker on the directory wrote and compacted it: a key the other
/// deleted stays deleted. The idle broker's newest segment was the first,
/// as it mapped it at the creation; the writer sealed and rebuilt that
/// file, so the idle broker's follow must first install the writer's
/// rolls, then map the rebuilt file. It once kept its old mapping for good
/// (its follow never looked at its newest segment), and a reader from the
/// beginning read every value the writer had compacted away, the deleted
/// key's included. Two brokers in one process stand in for two processes
/// (each has its own mappings and its own `compact.lock` descriptor).
#[test]
fn an_idle_broker_reads_the_log_another_compacted_and_a_deleted_key_stays_deleted() {
    let dir = TempDir::new("idle");
    let idle = Broker::new(config(&dir.0)).unwrap();
    // Segments large enough that the first holds every value of the key
    // deleted later; passes due until every superseded record is gone.
    let options = TopicOptions { segment_bytes: Some(256 << 10), delete_retention_ms: 0, ..compacted() };
    idle.create_topic("kv", &options).unwrap();
    let writer = Broker::new(config(&dir.0)).unwrap();
    let pad = vec![b'p'; 1000];
    let mut written = Vec::new();
    let mut put = |key: &[u8], value: Vec<u8>| {
        let at = writer.publish("kv", &Record::new(&value).with_key(key)).unwrap();
        written.push((at.offset, key.to_vec(), value));
    };
    // The first segment: values of the key the writer deletes later.
    for round in 0..200 {
        put(b"kdoomed", [format!("{round}-").as_bytes(), &pad].concat());
    }
    for round in 0..600u32 {
        put(format!("k{}", round % 20).as_bytes(), [format!("{round}-").as_bytes(), &pad].concat());
        if round == 300 {
            put(b"kdoomed", Vec::new());
        }
    }
    // Every model record sealed: a segment's worth of records of keys the
    // model ignores.
    for n in 0..300 {
        writer.publish("kv", &Record::new(&pad).with_key(format!("~{n}").as_bytes())).unwrap();
    }
    let want = live_keys(&written);
    assert!(!want.iter().any(|(_, key, _)| key == b"kdoomed"), "the key ends deleted");
    wait_to_read(&writer, "writer-reader", &want);
    // A subscription from the beginning, as a process rebuilding a cache
    // from the topic makes one: the idle broker's follow may come a
    // compactor tick later.
    common::wait_for("the idle broker to read the compacted log", || subscribed_model_keys(&idle) == want);
    writer.close();
    idle.close();
}

/// Kills in the loop (more with `RILL_CRASH_ITERATIONS`).
const KILLS: u32 = 20;

/// Records each killed child publishes before the kill window opens.
const PER_ROUND: u64 = 400;

/// Checks what a reader from the beginning in `broker`'s process reads
/// (the model keys' records): every record in `want` (the newest of each
/// key) is there, and every record read is one of `written`, whole, in
/// offset order. Superseded records may stay (a pass starts on the dirty
/// share, "Incremental passes" in `src/log/compact.rs`). The number read.
fn expect_kept(broker: &Broker, what: &str, written: &[(u64, Vec<u8>, Vec<u8>)], want: &Partition) -> usize {
    let read = compact_model::read_model_keys(broker, what, "kv", 1).remove(0);
    assert!(read.windows(2).all(|w| w[0].0 < w[1].0), "{what}: offset order");
    let written: BTreeMap<u64, (&[u8], &[u8])> =
        written.iter().map(|(o, k, v)| (*o, (k.as_slice(), v.as_slice()))).collect();
    for (offset, key, value) in &read {
        assert_eq!(written.get(offset), Some(&(key.as_slice(), value.as_slice())), "{what}: a record as written");
    }
    let offsets: std::collections::BTreeSet<u64> = read.iter().map(|r| r.0).collect();
    for kept in want {
        assert!(offsets.contains(&kept.0), "{what}: the newest record of its key, {kept:?}, is kept");
    }
    read.len()
}

#[test]
fn a_compacting_process_killed_at_random_moments_loses_no_kept_record_and_frees_its_lock() {
    const TEST: &str = "a_compacting_process_killed_at_random_moments_loses_no_kept_record_and_frees_its_lock";
    if let Some((role, dir)) = child_role() {
        let round: u64 = role.strip_prefix("compactor-").unwrap().parse().unwrap();
        let broker = Broker::new(config(&dir)).unwrap();
        let written = write(&broker, "child", round, PER_ROUND);
        compact_model::seal(&broker, "kv", 1);
        std::fs::write(dir.join(format!("written-{round}")), lines(&written)).unwrap();
        mark(&dir, &format!("written-{round}.done"));
        // Compacts (or follows) until killed.
        procs::wait_mark(&dir, "never");
        return;
    }
    let kills = procs::env_or("RILL_CRASH_ITERATIONS", KILLS);
    let seed = procs::seed("RILL_COMPACT_SEED");
    let mut rng = Rng(seed);
    let dir = TempDir::new("kills");
    let survivor = Broker::new(config(&dir.0)).unwrap();
    survivor.create_topic("kv", &compacted()).unwrap();
    let mut written = Vec::new();
    for round in 0..u64::from(kills) {
        let mut child = spawn(TEST, &format!("compactor-{round}"), &dir.0);
        let done = format!("written-{round}.done");
        assert!(wait_child_mark(&dir.0, &done, &mut child), "compactor {round} exited before it wrote");
        written.extend(read_lines(&dir.0, &format!("written-{round}")));
        // A random moment of the passes its writes started (the compactor
        // looks every 20 ms): the kill's timing, not a synchronisation.
        std::thread::sleep(Duration::from_micros(rng.below(40_000)));
        child.kill().unwrap();
        child.wait().unwrap();
        // The survivor (which compacts once the kill freed the lock, or
        // follows what the child did) reads every kept record, whole.
        let want = newest(&written);
        expect_kept(&survivor, &format!("survivor-{round}"), &written, &want);
        if round % 5 == 4 {
            // A process started now joins the files as the kill left them.
            let joined = Broker::new(config(&dir.0)).unwrap();
            expect_kept(&joined, &format!("joined-{round}"), &written, &want);
            joined.close();
        }
    }
    // The last kill freed the lock: the survivor compacts what it writes
    // now, and its reader from the beginning then sees exactly the newest
    // record of each key (seed printed above).
    let passes = survivor.topic_stats("kv").unwrap().compaction_passes;
    written.extend(write(&survivor, "survivor", 0, 20 * PER_ROUND));
    compact_model::seal(&survivor, "kv", 1);
    let want = newest(&written);
    wait_to_read(&survivor, "survivor-last", &want);
    assert!(survivor.topic_stats("kv").unwrap().compaction_passes > passes, "the survivor compacted");
    survivor.close();
    // The directory opened again: recovery (temporary files of a killed
    // pass included) finds every kept record.
    let restarted = Broker::new(config(&dir.0)).unwrap();
    wait_to_read(&restarted, "restarted", &want);
    restarted.close();
}
