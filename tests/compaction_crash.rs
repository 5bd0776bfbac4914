//! Issue 41's kill -9 loop during compaction on a data directory.
//!
//! Each run re-runs this test binary as a child (the ignored test
//! `compaction_crash_child`, told what to do by `RILL_COMPACTION_CRASH_CHILD`)
//! that opens a durable log in the loop's directory and publishes keyed
//! writes and tombstones on one thread while another runs compaction passes
//! back to back, reporting each acknowledged record (`P`/`T offset i`) and
//! the start and end of each pass (`S`, `E`) on its stdout. The parent kills
//! it with SIGKILL after a random number of acknowledgements, or (one run in
//! three) right as it reports the start of a random pass once it has
//! published a few segments' worth, so that kills land
//! in every step of "The durable swap" (`src/log/file/rebuild.rs`): writing
//! or syncing the temporary file, the rename, the directory sync, the
//! install. Then the parent opens the directory itself (recovery, which
//! fails on any record whose checksum does not check in a complete file)
//! and checks what compaction must keep: the newest record of every key
//! ever acknowledged (tombstones are kept, so a tombstone too), or a newer
//! one of the same key; every record it reads intact, as published, under
//! the offset it was acknowledged at, in offset order; no offset handed out
//! twice across runs; no temporary file left. One run in five publishes
//! under `Fsync::Always`, the others under `Never` (a process crash loses
//! nothing under either).
//!
//! `RILL_CRASH_ITERATIONS` sets the number of runs (default 50, seconds on
//! CI; 200 is the long run) and `RILL_CRASH_SEED` replays one, as for the
//! crash loop of `tests/persist.rs`.

mod common;

use common::Rng;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

use rill::log::{CompactionPolicy, DurableLog, Fsync, Log, LogConfig, MIN_SEGMENT_BYTES, Record};

/// The child's instructions: `dir run always`.
const CHILD_ENV: &str = "RILL_COMPACTION_CRASH_CHILD";
/// Distinct keys: few, so passes remove most records.
const KEYS: u64 = 23;
/// Every this many records is a tombstone.
const TOMBSTONE_EVERY: u64 = 7;
/// Most records a child publishes before it waits to be killed.
const MAX_PUBLISHES: u64 = 1500;
/// Tombstones are kept (the newest record of a key, tombstone or not, is
/// what compaction must keep); superseded records go at once.
const POLICY: CompactionPolicy = CompactionPolicy { min_lag_ns: 0, tombstone_ns: u64::MAX, id_lag_ns: 0 };

fn config() -> LogConfig {
    LogConfig { segment_bytes: Some(4 * MIN_SEGMENT_BYTES), retention_bytes: None, ..LogConfig::default() }
}

fn key_for(i: u64) -> Vec<u8> {
    format!("k{}", i % KEYS).into_bytes()
}

/// Record `i` of run `run`: a tombstone (empty) or a self-describing
/// payload of varying length, so a torn or misplaced record cannot pass.
fn payload(run: u64, i: u64) -> Vec<u8> {
    if i % TOMBSTONE_EVERY == TOMBSTONE_EVERY - 1 {
        return Vec::new();
    }
    let head = format!("r{run}i{i}:");
    head.repeat(1 + ((run * 13 + i * 7) % 20) as usize).into_bytes()
}

/// (run, i) of a payload, if it is exactly one of ours.
fn parse(p: &[u8]) -> Option<(u64, u64)> {
    let s = std::str::from_utf8(p).ok()?;
    let (run, i) = s.split(':').next()?.strip_prefix('r')?.split_once('i')?;
    let (run, i) = (run.parse().ok()?, i.parse().ok()?);
    (payload(run, i) == p).then_some((run, i))
}

fn durable(dir: &Path, always: bool) -> DurableLog {
    DurableLog { fsync: if always { Fsync::Always } else { Fsync::Never }, ..DurableLog::new(dir) }
}

/// The child (see the module docs). Ignored: only the crash loop runs it.
#[test]
#[ignore = "the child of compaction_kill_9_loop"]
fn compaction_crash_child() {
    let Ok(args) = std::env::var(CHILD_ENV) else { return };
    let args: Vec<&str> = args.split(' ').collect();
    let (dir, run, always) = (PathBuf::from(args[0]), args[1].parse::<u64>().unwrap(), args[2] == "always");
    let (log, _) = Log::open(&config(), 0, &durable(&dir, always)).unwrap();
    let done = AtomicBool::new(false);
    let say = |line: String| {
        let mut out = std::io::stdout().lock();
        out.write_all(line.as_bytes()).unwrap();
        out.flush().unwrap();
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut pass = 0u64;
            while !done.load(Ordering::Acquire) {
                say(format!("S {pass}\n"));
                let ran = log.compact(&POLICY, rill::clock::now_ns()).unwrap();
                say(format!("E {pass}\n"));
                pass += 1;
                if !ran {
                    // Nothing newly sealed: let the publisher seal more.
                    std::thread::yield_now();
                }
            }
        });
        for i in 0..MAX_PUBLISHES {
            let p = payload(run, i);
            let offset = log.append(&Record::new(&p).with_key(&key_for(i))).unwrap();
            say(format!("{} {offset} {i}\n", if p.is_empty() { 'T' } else { 'P' }));
        }
        done.store(true, Ordering::Release);
    });
    say("DONE\n".into());
    // Until the parent kills it.
    let _ = std::io::stdin().read_line(&mut String::new());
}

/// What the parent knows of an acknowledged record: its run and index.
type Acked = BTreeMap<u64, (u64, u64)>;

#[test]
fn compaction_kill_9_loop() {
    let iterations: u64 = std::env::var("RILL_CRASH_ITERATIONS").map_or(50, |v| v.parse().unwrap());
    let seed = std::env::var("RILL_CRASH_SEED").map_or_else(
        |_| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1,
        |v| v.parse().unwrap(),
    );
    println!("compaction crash loop: {iterations} iterations, RILL_CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let dir = std::env::temp_dir().join(format!("rill-compaction-crash-{}-{seed}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // Every record acknowledged in any run, by offset.
    let mut acked: Acked = BTreeMap::new();
    let (mut mid_pass, mut passes_seen, mut removed_seen) = (0u64, 0u64, 0u64);
    for run in 0..iterations {
        let always = run % 5 == 4;
        let at_pass = (run % 3 == 2).then(|| rng.below(40));
        let kill_after = rng.below(if always { 60 } else { MAX_PUBLISHES });
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["compaction_crash_child", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, format!("{} {run} {}", dir.display(), if always { "always" } else { "never" }))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut acks, mut in_pass) = (0u64, false);
        let record = |line: &str, acked: &mut Acked, in_pass: &mut bool| -> Option<u64> {
            let f: Vec<&str> = line.split(' ').collect();
            match f[0] {
                "P" | "T" => {
                    let (offset, i): (u64, u64) = (f[1].parse().unwrap(), f[2].parse().unwrap());
                    assert_eq!(f[0] == "T", payload(run, i).is_empty());
                    assert_eq!(acked.insert(offset, (run, i)), None, "run {run}: offset {offset} handed out twice");
                    return Some(offset);
                }
                "S" => {
                    *in_pass = true;
                    return f[1].parse().ok();
                }
                "E" => *in_pass = false,
                // The test harness's own lines, and the child's end.
                _ => {}
            }
            None
        };
        for line in lines.by_ref() {
            let line = line.unwrap();
            let what = record(&line, &mut acked, &mut in_pass);
            if line.starts_with(['P', 'T']) {
                acks += 1;
                if at_pass.is_none() && acks >= kill_after {
                    break;
                }
            }
            // A pass started once the child has sealed segments to rewrite.
            if line.starts_with('S') && acks >= 300 && at_pass.is_some_and(|k| what.is_some_and(|pass| pass >= k)) {
                break;
            }
            if line == "DONE" {
                break;
            }
        }
        child.kill().unwrap();
        let status = child.wait().unwrap();
        for line in lines {
            record(&line.unwrap(), &mut acked, &mut in_pass);
        }
        drop(child.stdin.take());
        assert!(status.code().is_none(), "run {run}: the child ended by itself ({status})");
        mid_pass += u64::from(in_pass);
        let (passes, removed) = check(&dir, run, &acked);
        passes_seen += passes;
        removed_seen += removed;
    }
    println!(
        "  {} records acknowledged, {mid_pass} kills between a pass's start and end, {passes_seen} passes and \
         {removed_seen} records removed by the parent's own passes after reopening",
        acked.len()
    );
    assert!(mid_pass > 0 || iterations < 10, "no kill landed inside a pass");
    std::fs::remove_dir_all(&dir).ok();
}

/// Opens the directory after run `run`'s kill and checks it against
/// `acked` (see the module docs); then runs a pass itself and checks again
/// after reopening. Returns that pass's count and the records it removed.
fn check(dir: &Path, run: u64, acked: &Acked) -> (u64, u64) {
    let leftovers: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| !n.ends_with(".seg"))
        .collect();
    let (log, _) = Log::open(&config(), 0, &durable(dir, false))
        .unwrap_or_else(|e| panic!("run {run}: recovery failed after the kill: {e}"));
    let still: Vec<&String> = leftovers.iter().filter(|n| dir.join(n).exists()).collect();
    assert!(still.is_empty(), "run {run}: recovery left {still:?}");
    let end = acked.keys().next_back().map_or(0, |o| o + 1);
    assert!(log.end_offset() >= end, "run {run}: end {} before the acknowledged {end}", log.end_offset());
    verify(&log, run, acked);
    // A pass of the parent's own over what the kill left, then the log
    // opened again: the same checks hold.
    let before = log.stats().compacted_records;
    log.compact(&POLICY, rill::clock::now_ns()).unwrap();
    let stats = log.stats();
    drop(log);
    let (log, _) = Log::open(&config(), 0, &durable(dir, false)).unwrap();
    verify(&log, run, acked);
    (stats.compaction_passes, stats.compacted_records - before)
}

/// Reads `log` from its first record: offset order, every record intact
/// and as published, acknowledged ones under their offsets, and for every
/// key the newest acknowledged record or a newer one of its key.
fn verify(log: &Log, run: u64, acked: &Acked) {
    let mut cursor = log.cursor_from_first();
    let mut last = None;
    // Key -> newest offset read.
    let mut newest: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    let mut read: BTreeMap<u64, ()> = BTreeMap::new();
    while let Some(r) = cursor.read().unwrap() {
        let offset = r.offset();
        assert!(last.is_none_or(|l| offset > l), "run {run}: offset {offset} after {last:?}");
        last = Some(offset);
        let key = r.key().unwrap_or_else(|| panic!("run {run}: a record without a key at {offset}"));
        let id = if r.payload().is_empty() {
            None
        } else {
            Some(parse(r.payload()).unwrap_or_else(|| panic!("run {run}: a damaged record at offset {offset}")))
        };
        if let Some(&(r_run, i)) = acked.get(&offset) {
            assert_eq!(key, &key_for(i)[..], "run {run}: offset {offset} holds another key");
            assert_eq!(r.payload(), &payload(r_run, i)[..], "run {run}: offset {offset} holds another record");
        } else if let Some((_, i)) = id {
            assert_eq!(key, &key_for(i)[..], "run {run}: offset {offset} holds a record under another key");
        }
        newest.insert(key.to_vec(), offset);
        read.insert(offset, ());
    }
    // What compaction must keep: the newest acknowledged record of each
    // key, unless a newer record of that key (published, not yet reported
    // when the child died) superseded it.
    let mut must: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    for (&offset, &(_, i)) in acked {
        must.insert(key_for(i), offset);
    }
    for (key, offset) in &must {
        let kept = newest.get(key).is_some_and(|&n| n >= *offset);
        assert!(kept, "run {run}: the newest record of {:?} (offset {offset}) is gone", String::from_utf8_lossy(key));
        if newest[key] == *offset {
            assert!(read.contains_key(offset));
        }
    }
}
