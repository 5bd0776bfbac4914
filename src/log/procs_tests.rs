//! Two processes appending into one segment file at once (issue 39, its
//! first step): the tail word, the seal and the offset index live in the
//! file (`file/format.rs`), so a second mapping of it, in another process,
//! reserves, commits and reads through the same words as the first.
//!
//! Then (its second step) several processes appending into one partition
//! across many rolls, each following the others' rolls by the segment
//! files' names (`dir.rs`, "The roll across processes").
//!
//! The other processes are this test binary run again with an environment
//! variable set ([`CHILD_FILE`], [`CHILD_LOG`]) and only the one test
//! selected: the test then plays the child's part.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::file::{self, FRAME_LEN, FileStorage, Files};
use super::pool::Pool;
use super::record::Record;
use super::segment::{Buffers, Reservation, Segment};
use super::storage::Pages;
use super::{DurableLog, Fsync, Log, LogConfig, Sharing};
use crate::sync::{Arc, thread};

/// Set in the child: the segment file to append to.
const CHILD_FILE: &str = "RILL_TEST_SHARED_SEGMENT_FILE";
/// This test's name, for the child's command line.
const TEST_NAME: &str = "log::procs_tests::two_processes_append_into_one_segment_file";
/// The parent's publisher number; the child's is `PARENT + 1`.
const PARENT: u32 = 0;
/// Records each process publishes in strict alternation with the other,
/// each waiting for its turn on the shared tail word: offsets `2k` are the
/// parent's, `2k + 1` the child's, whatever the scheduler does.
const LOCKSTEP: u32 = 200;
/// Records each process then publishes as fast as it can, both at once.
const FREE: u32 = 5_000;
/// Records in the segment when both are done.
const TOTAL: u64 = 2 * (LOCKSTEP + FREE) as u64;
/// The segment size: room for every record of the test (40 bytes each with
/// its frame), so no reservation seals it.
const SEGMENT_BYTES: usize = 1 << 20;
/// How long a wait for the other process may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(60);

/// The log configuration whose durable pool makes the test's segment file,
/// and which reopens it at the end.
fn config() -> LogConfig {
    LogConfig { segment_bytes: Some(SEGMENT_BYTES), retention_bytes: None, ..LogConfig::default() }
}

/// Waits until `done` holds, polling; fails the test after [`PATIENCE`].
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        thread::yield_now();
    }
}

/// Publishes record `seq` of publisher `who` into `seg`, framed as a
/// durable log frames it; returns its index.
fn append(seg: &Segment, who: u32, seq: u32) -> u64 {
    let mut payload = [0u8; 8];
    payload[..4].copy_from_slice(&who.to_le_bytes());
    payload[4..].copy_from_slice(&seq.to_le_bytes());
    let record = Record::new(&payload);
    let len = record.encoded_len().unwrap();
    match seg.reserve(1, (FRAME_LEN + len) as u64) {
        Reservation::Granted { index, pos } => {
            // SAFETY: a Granted reservation of `seg`, made just now, for the
            // record's frame and its `len` bytes.
            unsafe { seg.write_and_commit(index, pos, len, &record, u64::from(seq) + 1, true) };
            index
        }
        other => panic!("the segment has room for every record of the test, got {other:?}"),
    }
}

/// `(publisher, sequence number)` of a record's payload.
fn decode(payload: &[u8]) -> (u32, u32) {
    let word = |at: usize| u32::from_le_bytes(payload[at..at + 4].try_into().unwrap());
    (word(0), word(4))
}

/// One process's part: its lockstep records, each at the offset its turn
/// gives it, then its free-running ones; then, once the other process's
/// are all committed too, a check of every record through its own mapping.
fn publish_and_check(seg: &Segment, who: u32) {
    let other = 1 - who;
    for k in 0..LOCKSTEP {
        let turn = 2 * u64::from(k) + u64::from(who);
        wait_until("my turn", || seg.reserved() == turn);
        assert_eq!(append(seg, who, k), turn, "a lockstep record takes the offset its turn gives it");
    }
    // The child's last lockstep turn comes after the parent's.
    wait_until("the lockstep's end", || seg.reserved() >= 2 * u64::from(LOCKSTEP));
    for k in LOCKSTEP..LOCKSTEP + FREE {
        append(seg, who, k);
    }
    wait_until("every record reserved", || seg.reserved() == TOTAL);
    wait_until("every record committed", || (0..TOTAL).all(|i| seg.committed(i).is_some()));
    let mut next = [0u32; 2];
    for index in 0..TOTAL {
        let view = seg.view(index, seg.committed(index).unwrap());
        assert_eq!(view.offset(), index, "offsets are dense from the segment's base");
        let (from, seq) = decode(view.payload());
        assert!(from == who || from == other, "record {index} names publisher {from}");
        assert_eq!(seq, next[from as usize], "publisher {from}'s records in its order, none lost or doubled");
        next[from as usize] += 1;
        if index < 2 * u64::from(LOCKSTEP) {
            assert_eq!((u64::from(from), u64::from(seq)), (index % 2, index / 2), "the lockstep alternates");
        }
    }
    assert_eq!(next, [LOCKSTEP + FREE; 2]);
    assert!(seg.committed(TOTAL).is_none(), "nothing past the records published");
}

/// The child's part: maps the parent's segment file a second time and
/// appends into it as publisher `PARENT + 1`.
fn child(path: &Path) {
    let name = path.file_name().and_then(|n| n.to_str()).expect("a segment file name");
    let base = file::parse_segment_file_name(name).expect("a segment file name");
    let storage = FileStorage::open_existing(path).unwrap();
    let buffers = Buffers::over(Box::new(storage), 0, Pages::Small).unwrap();
    // A pool that never gets these buffers: the file stays the parent's.
    let pool = Arc::new(Pool::new(1, 1, 0));
    let seg = Segment::attach(base, buffers, pool);
    assert_eq!(seg.slot_count(), (SEGMENT_BYTES / 32) as u64, "the index the parent's file was made with");
    publish_and_check(&seg, PARENT + 1);
}

/// A fresh directory under the system's temp dir, removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn two_processes_append_into_one_segment_file() {
    if let Some(path) = std::env::var_os(CHILD_FILE) {
        child(Path::new(&path));
        return;
    }
    let dir = TempDir(std::env::temp_dir().join(format!("rill-procs-segment-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).unwrap();

    // The segment file a durable log of `config()` would make for its
    // first segment (region and index sizes), made by its pool.
    let sizes = config().resolve().unwrap();
    let region = sizes.segment_bytes + FRAME_LEN;
    let pool = Arc::new(Pool::for_files(region, sizes.slots, 0, Files::new(dir.0.clone(), false)));
    let seg = Segment::new(0, pool.take(0, Pages::Small).unwrap(), pool.clone());
    let path = dir.0.join(file::segment_file_name(0));

    let exe = std::env::current_exe().unwrap();
    let child = Command::new(exe)
        .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_FILE, &path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // If this process fails first, the child gives up at its deadline; the
    // wait below collects it either way.
    let mine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| publish_and_check(&seg, PARENT)));
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the child process failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if let Err(panic) = mine {
        std::panic::resume_unwind(panic);
    }
    drop(seg);
    drop(pool);

    // What both wrote is a segment file recovery reads whole: every record's
    // frame checks for its offset, and the offsets are dense.
    let durable = DurableLog { dir: dir.0.clone(), fsync: Fsync::Never, repair: false };
    let (log, report) = Log::open(&config(), 0, &durable).unwrap();
    assert_eq!((report.records, report.end_offset, report.skipped), (TOTAL, TOTAL, 0), "{report:?}");
    assert!(report.truncated_at.is_none(), "{report:?}");
    let mut cursor = log.cursor_from_first();
    let mut next = [0u32; 2];
    for offset in 0..TOTAL {
        let view = cursor.read().unwrap().expect("every record recovered");
        assert_eq!(view.offset(), offset);
        let (from, seq) = decode(view.payload());
        assert_eq!(seq, next[from as usize]);
        next[from as usize] += 1;
    }
    assert!(cursor.read().unwrap().is_none());
}

/// Set in a child of the rolls test: the partition directory to join.
const CHILD_LOG: &str = "RILL_TEST_SHARED_LOG_DIR";
/// Set in a child of the rolls test: its publisher number.
const CHILD_WHO: &str = "RILL_TEST_SHARED_LOG_PUBLISHER";
/// The rolls test's name, for its children's command line.
const ROLLS_TEST: &str = "log::procs_tests::processes_publish_into_one_partition_across_rolls";
/// Processes publishing into the partition: the parent and its children.
const PROCESSES: u32 = 4;
/// Records each process publishes by default.
const EACH: u32 = 4_000;
/// Set to publish more records per process (children inherit it): the
/// long version of the rolls test, which rolls once per about 400.
const EACH_VAR: &str = "RILL_PROCS_RECORDS";

/// Records each process publishes: [`EACH`], or [`EACH_VAR`]'s value.
fn each() -> u32 {
    std::env::var(EACH_VAR).ok().and_then(|v| v.parse().ok()).unwrap_or(EACH)
}
/// A small segment (of 40-byte framed records), so the partition rolls
/// dozens of times while all processes publish.
const SMALL_SEGMENT: usize = 16 << 10;

/// The rolls test's log configuration: small segments, everything kept.
fn small_config() -> LogConfig {
    LogConfig { segment_bytes: Some(SMALL_SEGMENT), ..LogConfig::default() }
}

/// Appends record `seq` of publisher `who` through the log; its offset.
fn publish(log: &Log, who: u32, seq: u32) -> u64 {
    let mut payload = [0u8; 8];
    payload[..4].copy_from_slice(&who.to_le_bytes());
    payload[4..].copy_from_slice(&seq.to_le_bytes());
    log.append(&Record::new(&payload)).unwrap()
}

/// Reads the whole partition from its first offset until every process's
/// records are there, through this process's view: dense offsets, each
/// publisher's records in its order, none missing, none twice.
fn read_everything(log: &Log) {
    let total = u64::from(PROCESSES * each());
    let mut cursor = log.cursor_from_first();
    let mut next = vec![0u32; PROCESSES as usize];
    let mut offset = 0;
    wait_until("every process's records", || {
        while let Some(view) = cursor.read().expect("nothing is trimmed") {
            assert_eq!(view.offset(), offset, "offsets are dense");
            let (from, seq) = decode(view.payload());
            assert!(from < PROCESSES, "record {offset} names publisher {from}");
            assert_eq!(seq, next[from as usize], "publisher {from}'s records in its order, none lost or doubled");
            next[from as usize] += 1;
            offset += 1;
        }
        offset == total
    });
    assert_eq!(next, vec![each(); PROCESSES as usize]);
    assert!(cursor.read().unwrap().is_none(), "nothing past the records published");
}

/// One process's part: waits for the start signal (so all publish at
/// once), publishes its records, then reads everything back.
fn publish_and_read(log: &Log, dir: &Path, who: u32) {
    wait_until("the start", || dir.join("go").exists());
    let mut last = None;
    for seq in 0..each() {
        let offset = publish(log, who, seq);
        assert!(last.is_none_or(|l| offset > l), "a publisher's offsets grow");
        last = Some(offset);
    }
    read_everything(log);
}

/// Where a child of the rolls test says it has joined.
fn joined_marker(dir: &Path, who: u32) -> PathBuf {
    dir.join(format!("joined-{who}"))
}

/// N publishers in N processes (the parent and three children, this test
/// binary run again) append into one durable partition with small segments,
/// so it rolls many times while all of them publish: each roll is made by
/// whichever process's reservation sealed the segment, and the others find
/// its successor's file by name (`dir.rs`, "The roll across processes").
/// Each process then reads the whole partition back through its own view;
/// and recovery, once all are gone, finds every record in the files.
#[test]
fn processes_publish_into_one_partition_across_rolls() {
    if let (Some(dir), Some(who)) = (std::env::var_os(CHILD_LOG), std::env::var_os(CHILD_WHO)) {
        let dir = PathBuf::from(dir);
        let who: u32 = who.to_str().unwrap().parse().unwrap();
        let durable = DurableLog { dir: dir.clone(), fsync: Fsync::Never, repair: false };
        let log = Log::join(&small_config(), 0, &durable).unwrap();
        // Written after the join: the parent starts everyone once all have.
        std::fs::write(joined_marker(&dir, who), b"").unwrap();
        publish_and_read(&log, &dir, who);
        return;
    }
    let tmp = TempDir(std::env::temp_dir().join(format!("rill-procs-rolls-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&tmp.0);
    let dir = tmp.0.join("partition");
    let durable = DurableLog { dir: dir.clone(), fsync: Fsync::Never, repair: false };
    let (log, _) = Log::open_in(&small_config(), 0, &durable, Sharing::Processes).unwrap();

    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (1..PROCESSES)
        .map(|who| {
            Command::new(&exe)
                .args([ROLLS_TEST, "--exact", "--nocapture", "--test-threads=1"])
                .env(CHILD_LOG, &dir)
                .env(CHILD_WHO, who.to_string())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // The parent's part runs on a thread of its own, so that a publisher
    // stuck waiting for a roll fails the test at the deadline instead of
    // hanging it (the thread is left behind; the children are killed).
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let parent = {
        let (log, dir) = (log.clone(), dir.clone());
        std::thread::spawn(move || {
            let mine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                wait_until("every child joined", || (1..PROCESSES).all(|who| joined_marker(&dir, who).exists()));
                std::fs::write(dir.join("go"), b"").unwrap();
                publish_and_read(&log, &dir, 0);
            }));
            if mine.is_err() {
                // Start the children anyway, so they reach their own deadline.
                let _ = std::fs::write(dir.join("go"), b"");
            }
            let _ = done_tx.send(());
            mine
        })
    };
    let finished = done_rx.recv_timeout(PATIENCE + Duration::from_secs(5)).is_ok();
    let deadline = Instant::now() + PATIENCE;
    for mut child in children {
        while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            thread::yield_now();
        }
        if child.try_wait().unwrap().is_none() {
            let _ = child.kill();
        }
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "a child process failed or was stuck ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(finished, "the parent's publisher or reader was stuck");
    if let Err(panic) = parent.join().unwrap() {
        std::panic::resume_unwind(panic);
    }
    let segments = log.stats().segments;
    drop(log);
    let total = u64::from(PROCESSES * each());
    assert!(segments > 10, "the partition rolled many times ({segments} segments)");

    for who in 1..PROCESSES {
        std::fs::remove_file(joined_marker(&dir, who)).unwrap();
    }
    std::fs::remove_file(dir.join("go")).unwrap();
    let (log, report) = Log::open(&small_config(), 0, &durable).unwrap();
    assert_eq!((report.records, report.end_offset, report.skipped), (total, total, 0), "{report:?}");
    read_everything(&log);
}

/// Set in the child of the takeover test: the partition directory to join.
const CHILD_SEALER: &str = "RILL_TEST_SHARED_LOG_SEALER";
/// The takeover test's name, for its child's command line.
const TAKEOVER_TEST: &str = "log::procs_tests::a_killed_sealers_roll_is_taken_over";
/// Records the parent publishes before the child seals, and after.
const BEFORE_SEAL: u32 = 50;
const AFTER_SEAL: u32 = 500;

/// A sealer killed between the seal and the link (`dir.rs`, "The roll
/// across processes"): the child joins the partition, seals its newest
/// segment as a publisher whose reservation overflowed it would (the end
/// mark and the seal in the file), and is killed (`SIGKILL`) before it
/// makes the successor's file. The parent's next publish finds the segment
/// sealed and no successor; after the roll timeout it makes the file
/// itself, and the partition goes on with dense offsets, in this process
/// and for a process that joins afterwards.
#[test]
fn a_killed_sealers_roll_is_taken_over() {
    if let Some(dir) = std::env::var_os(CHILD_SEALER) {
        let durable = DurableLog { dir: PathBuf::from(dir), fsync: Fsync::Never, repair: false };
        let log = Log::join(&small_config(), 0, &durable).unwrap();
        let guard = crate::sync::epoch::pin();
        let seg = log.shared.dir(&guard).last().clone();
        // One record of more bytes than the segment holds: never granted,
        // so this is the sealer (nobody else publishes now).
        match seg.reserve(1, seg.capacity() + 1) {
            Reservation::Sealer { count, end } => {
                seg.end_records(end);
                seg.seal(count);
            }
            other => panic!("the child alone publishes now, got {other:?}"),
        }
        // Killed before the link, as a crash there would leave it.
        // SAFETY: plain system calls on this process, no pointers.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        unreachable!("SIGKILL is not caught");
    }
    let tmp = TempDir(std::env::temp_dir().join(format!("rill-procs-takeover-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&tmp.0);
    let dir = tmp.0.join("partition");
    let durable = DurableLog { dir: dir.clone(), fsync: Fsync::Never, repair: false };
    let (log, _) = Log::open_in(&small_config(), 0, &durable, Sharing::Processes).unwrap();
    for seq in 0..BEFORE_SEAL {
        assert_eq!(publish(&log, 0, seq), u64::from(seq));
    }

    let out = Command::new(std::env::current_exe().unwrap())
        .args([TAKEOVER_TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_SEALER, &dir)
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGKILL),
        "the child sealed and was killed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let successor = dir.join(file::segment_file_name(u64::from(BEFORE_SEAL)));
    assert!(!successor.exists(), "the killed sealer made no successor");

    // On a thread, so a publish stuck at the dead roll fails the test at
    // the deadline instead of hanging it.
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let publisher = {
        let log = log.clone();
        std::thread::spawn(move || {
            for seq in BEFORE_SEAL..BEFORE_SEAL + AFTER_SEAL {
                assert_eq!(publish(&log, 0, seq), u64::from(seq), "offsets stay dense across the taken-over roll");
            }
            let _ = done_tx.send(());
        })
    };
    assert!(done_rx.recv_timeout(PATIENCE).is_ok(), "the publisher was stuck at the killed sealer's roll");
    publisher.join().unwrap();
    assert!(successor.exists(), "the waiter made the successor's file");

    // This process's view and a new joiner's read the same partition.
    let joined = Log::join(&small_config(), 0, &durable).unwrap();
    for log in [&log, &joined] {
        let mut cursor = log.cursor_from_first();
        for seq in 0..BEFORE_SEAL + AFTER_SEAL {
            let view = cursor.read().unwrap().expect("every record, across the roll");
            assert_eq!((view.offset(), decode(view.payload())), (u64::from(seq), (0, seq)));
        }
        assert!(cursor.read().unwrap().is_none());
    }
}

/// A sealer that was only slow, not dead: another process's view took its
/// roll over and linked the successor first, so the sealer's own link
/// fails with `EEXIST` and it installs a mapping of the winner's file
/// instead (`Shared::make_or_open`), and both views go on in one segment.
/// Two logs over one directory in this process stand for two processes:
/// each has its own directory of its own mappings.
#[test]
fn a_slow_sealer_whose_roll_was_taken_over_opens_the_takers_file() {
    let tmp = TempDir(std::env::temp_dir().join(format!("rill-procs-slow-sealer-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&tmp.0);
    let durable = DurableLog { dir: tmp.0.clone(), fsync: Fsync::Never, repair: false };
    let (slow, _) = Log::open_in(&small_config(), 0, &durable, Sharing::Processes).unwrap();
    let taker = Log::join(&small_config(), 0, &durable).unwrap();
    publish(&slow, 0, 0);

    // The slow view seals its newest segment, and pauses before its roll.
    let guard = crate::sync::epoch::pin();
    let current = slow.shared.dir_ptr(&guard);
    let seg = slow.shared.dir(&guard).last().clone();
    let Reservation::Sealer { count, end } = seg.reserve(1, seg.capacity() + 1) else {
        panic!("nobody else publishes now")
    };
    seg.end_records(end);
    seg.seal(count);
    assert_eq!(count, 1);

    // The other view's publish waits the roll timeout and makes the file.
    assert_eq!(publish(&taker, 1, 0), 1, "the taken-over roll continues the offsets");
    // The slow sealer's roll now finds the name taken, and maps that file.
    slow.shared.install_next(current, &guard).unwrap();
    drop(guard);
    assert_eq!(publish(&slow, 0, 1), 2, "the slow sealer appends into the taker's segment");
    assert_eq!(publish(&taker, 1, 1), 3);
    for log in [&slow, &taker] {
        let mut cursor = log.cursor_from_first();
        let read: Vec<_> =
            std::iter::from_fn(|| cursor.read().unwrap().map(|v| (v.offset(), decode(v.payload())))).collect();
        assert_eq!(read, [(0, (0, 0)), (1, (1, 0)), (2, (0, 1)), (3, (1, 1))]);
    }
    let files = std::fs::read_dir(&tmp.0).unwrap().filter(|e| {
        let name = e.as_ref().unwrap().file_name();
        file::parse_segment_file_name(name.to_str().unwrap()).is_some()
    });
    assert_eq!(files.count(), 2, "one successor file, the taker's");
}

/// A process whose view fell behind another process's retention: the
/// segments after its newest one were trimmed before it reached them. Its
/// reader learns what it missed ([`super::Lagged`]) and resumes at the
/// oldest retained record; its publisher appends after the partition's
/// newest record, never into a segment made again for a trimmed offset
/// (`Shared::skip_trimmed`). Two logs over one directory stand for the
/// processes, as above.
#[test]
fn a_view_behind_another_processs_retention_skips_to_the_oldest_retained_record() {
    let tmp = TempDir(std::env::temp_dir().join(format!("rill-procs-behind-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&tmp.0);
    let config = LogConfig { retention_bytes: Some(2 * SMALL_SEGMENT as u64), ..small_config() };
    let durable = DurableLog { dir: tmp.0.clone(), fsync: Fsync::Never, repair: false };
    let (ahead, _) = Log::open_in(&config, 0, &durable, Sharing::Processes).unwrap();
    let reader = Log::join(&config, 0, &durable).unwrap();
    let writer = Log::join(&config, 0, &durable).unwrap();
    publish(&ahead, 0, 0);
    let mut cursor = reader.cursor_from_first();
    assert_eq!(cursor.read().unwrap().map(|v| v.offset()), Some(0));

    // The other process publishes on, rolling and trimming well past the
    // first segment, which the two behind views still hold.
    // On until a file was reused meanwhile (the files no other view maps
    // are, once the epoch lets their segments go; see "Recycling across
    // processes" in `file/mod.rs`); never the one the reader holds, or it
    // would not read its records below.
    let mut seq = 1;
    let deadline = Instant::now() + PATIENCE;
    while ahead.first_offset() < 2_000 || ahead.shared.pool.reused_free() == 0 {
        assert!(Instant::now() < deadline, "no trimmed file was reused after {seq} records");
        publish(&ahead, 0, seq);
        seq += 1;
        crate::sync::epoch::pin().flush();
    }
    let (first, end) = (ahead.first_offset(), ahead.end_offset());

    // The reader finishes the segment it maps, then is told what it missed.
    let mut offset = 1;
    let lagged = loop {
        match cursor.read() {
            Ok(Some(view)) => {
                assert_eq!((view.offset(), decode(view.payload())), (offset, (0, offset as u32)));
                offset += 1;
            }
            Ok(None) => panic!("the reader stopped at {offset}, before the records retention kept"),
            Err(lagged) => break lagged,
        }
    };
    assert_eq!((lagged.resumed_at, lagged.missed), (first, first - offset));
    for offset in first..end {
        let view = cursor.read().unwrap().expect("every retained record");
        assert_eq!((view.offset(), decode(view.payload())), (offset, (0, offset as u32)));
    }
    assert!(cursor.read().unwrap().is_none());

    // The writer appends after the newest record, not at a trimmed offset.
    assert_eq!(publish(&writer, 1, 0), end, "offsets stay dense and unrepeated");
    assert_eq!(publish(&ahead, 0, seq), end + 1, "and the other process goes on after it");
}

/// A partition shared by processes reuses the files its retention trims
/// once every process has let go of them (see "Recycling across
/// processes" in `file/mod.rs`): here a writer and a reader that keeps up
/// with it, each with locks of its own, as two processes have. The reader
/// reads every record intact and in order through the reuse, and the
/// directory holds no more files than the segments, the free files and a
/// file made ahead.
#[test]
fn trimmed_files_every_process_let_go_of_are_reused_by_later_rolls() {
    let tmp = TempDir(std::env::temp_dir().join(format!("rill-procs-reuse-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&tmp.0);
    let config = LogConfig { retention_bytes: Some(2 * SMALL_SEGMENT as u64), ..small_config() };
    let durable = DurableLog { dir: tmp.0.clone(), fsync: Fsync::Never, repair: false };
    let (writer, _) = Log::open_in(&config, 0, &durable, Sharing::Processes).unwrap();
    let reader = Log::join(&config, 0, &durable).unwrap();
    let mut cursor = reader.cursor_from_first();
    let (mut seq, mut next) = (0u32, 0u64);
    let deadline = Instant::now() + PATIENCE;
    while writer.shared.pool.reused_free() < 20 {
        assert!(Instant::now() < deadline, "{} files reused after {seq} records", writer.shared.pool.reused_free());
        for _ in 0..100 {
            publish(&writer, 0, seq);
            seq += 1;
        }
        while let Some(view) = cursor.read().expect("the reader keeps up: nothing is trimmed under it") {
            assert_eq!((view.offset(), decode(view.payload())), (next, (0, next as u32)), "intact, in order");
            next += 1;
        }
        assert_eq!(next, u64::from(seq), "the reader has every record published");
        // Trimmed segments go once the epoch lets them go.
        crate::sync::epoch::pin().flush();
    }
    // Every trimmed file is let go in the end, and freed (kept for reuse,
    // at most `FREE_FILES`) or deleted: the directory holds the segments.
    let names = || -> Vec<String> {
        std::fs::read_dir(&tmp.0).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect()
    };
    wait_until("every trimmed file let go", || {
        crate::sync::epoch::pin().flush();
        !names().iter().any(|n| file::is_spare_file_name(n))
    });
    let names = names();
    let count = |ext: &str| names.iter().filter(|n| n.ends_with(ext)).count();
    assert!(count(".free") <= file::FREE_FILES as usize, "{names:?}");
    assert!(count(".seg") <= writer.stats().segments + 1, "{names:?}");
}

/// The abandon bound of the crash tests' logs: short, so a test waits on
/// a dead publisher's hole briefly; the tests wait on conditions with
/// [`PATIENCE`], never on this.
const TEST_ABANDON: Duration = Duration::from_millis(100);
/// Set in the child of the crash tests: the partition directory to join.
const CHILD_CRASH_DIR: &str = "RILL_TEST_SHARED_LOG_CRASH_DIR";
/// Set in the child of the crash tests: where it dies (`dir::DIE_GRANTED`
/// or `dir::DIE_SEALER`), or `0` to publish until it is killed.
const CHILD_CRASH_AT: &str = "RILL_TEST_SHARED_LOG_CRASH_AT";
/// Set in the reader child of the hole test: how many records to read.
const CHILD_READ: &str = "RILL_TEST_SHARED_LOG_READ";
/// Records the child of the seam tests publishes before it dies.
const CHILD_RECORDS: u32 = 10;
/// Records the parent publishes before and after the child dies.
const AROUND: u32 = 300;

/// Runs this test binary again as a child playing `test`'s part, in `dir`,
/// with `at` for [`CHILD_CRASH_AT`].
fn crash_child(test: &str, dir: &Path, at: u8) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_CRASH_DIR, dir)
        .env(CHILD_CRASH_AT, at.to_string());
    cmd
}

/// The child's part in the seam tests: joins, publishes [`CHILD_RECORDS`]
/// records as publisher 1, then dies where `at` says (right after the
/// fetch-add of its next append, or of the append that elects it sealer).
fn child_dies_at_the_seam(dir: &Path, at: u8) -> ! {
    let durable = DurableLog { dir: dir.to_path_buf(), fsync: Fsync::Never, repair: false };
    let log = Log::join(&small_config(), 0, &durable).unwrap();
    for seq in 0..CHILD_RECORDS {
        publish(&log, 1, seq);
    }
    super::dir::DIE_AFTER.store(at, std::sync::atomic::Ordering::Relaxed);
    for seq in CHILD_RECORDS.. {
        publish(&log, 1, seq);
    }
    unreachable!("the seam ends the process");
}

/// Reads `log` from its first offset until `want` records were read (skip
/// records and given-up offsets are passed over, never handed out);
/// returns `(offset, (publisher, seq))` of each. Fails the test after
/// [`PATIENCE`].
fn read_n(log: &Log, want: usize) -> Vec<(u64, (u32, u32))> {
    let mut cursor = log.cursor_from_first();
    let mut read = Vec::new();
    wait_until("the records", || {
        while let Some(view) = cursor.read().expect("nothing is trimmed") {
            read.push((view.offset(), decode(view.payload())));
        }
        read.len() >= want
    });
    assert_eq!(read.len(), want, "no record past those published: {read:?}");
    read
}

/// Checks what a seam test read: each publisher's records in its order,
/// none missing or twice; offsets increasing, dense but for `holes` of
/// them, which are the offsets given up.
fn check_read(read: &[(u64, (u32, u32))], counts: [u32; 2], holes: u64) {
    let mut next = [0u32; 2];
    for &(_, (who, seq)) in read {
        assert_eq!(seq, next[who as usize], "publisher {who}'s records in order, none lost or doubled: {read:?}");
        next[who as usize] += 1;
    }
    assert_eq!(next, counts, "every committed record, once");
    assert!(read.windows(2).all(|w| w[0].0 < w[1].0), "offsets grow");
    let span = read.last().unwrap().0 + 1 - read[0].0;
    assert_eq!(span, read.len() as u64 + holes, "offsets dense but for {holes} given up: {read:?}");
}

/// Publishes [`AROUND`] records of publisher 0 from `from` on, on a thread,
/// failing the test if they take longer than [`PATIENCE`] (a publisher
/// stuck at a dead process's reservation or roll).
fn publish_around(log: &Log, from: u32) {
    publish_some(log, from, AROUND);
}

/// Publishes `n` records of publisher 0 from `from` on, as [`publish_around`].
fn publish_some(log: &Log, from: u32, n: u32) {
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let publisher = {
        let log = log.clone();
        std::thread::spawn(move || {
            for seq in from..from + n {
                publish(&log, 0, seq);
            }
            let _ = done_tx.send(());
        })
    };
    assert!(done_rx.recv_timeout(PATIENCE).is_ok(), "the publisher was stuck at the dead process's reservation");
    publisher.join().unwrap();
}

/// Opens the test's partition for processes, with the short abandon bound.
fn open_shared(dir: &Path) -> Log {
    let durable = DurableLog { dir: dir.to_path_buf(), fsync: Fsync::Never, repair: false };
    let (log, _) = Log::open_in(&small_config(), 0, &durable, Sharing::Processes).unwrap();
    log.set_abandon_after(TEST_ABANDON);
    log
}

/// Runs `child` to its end and checks that the seam ended it.
fn died_at_the_seam(mut child: Command) {
    let out = child.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(super::dir::DIED_AT_SEAM),
        "the child died at the seam ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

const HOLE_TEST: &str = "log::procs_tests::a_publisher_killed_between_reserve_and_commit_blocks_no_one";

/// A publisher process killed between its reservation (the fetch-add) and
/// its commit (`segment.rs`, "An abandoned reservation"): the parent keeps
/// publishing around the hole while a reader process (with the default
/// bound) reads, and the parent's reader too, after the (short) abandon
/// bound, gives the offset up and reads on; each reads: every committed record exactly once,
/// offsets dense but for the one given up. A process joining afterwards
/// reads the same from the files' own words, and so does recovery, which
/// finds the offset's slot given up and writes a skip record for it.
#[test]
fn a_publisher_killed_between_reserve_and_commit_blocks_no_one() {
    if let (Some(dir), Some(total)) = (std::env::var_os(CHILD_CRASH_DIR), std::env::var_os(CHILD_READ)) {
        // The reader child: joins while the parent publishes around the
        // hole, and reads everything with the default abandon bound.
        let durable = DurableLog { dir: PathBuf::from(dir), fsync: Fsync::Never, repair: false };
        let log = Log::join(&small_config(), 0, &durable).unwrap();
        let total: usize = total.to_str().unwrap().parse().unwrap();
        check_read(&read_n(&log, total), [2 * AROUND, CHILD_RECORDS], 1);
        return;
    }
    if let (Some(dir), Some(at)) = (std::env::var_os(CHILD_CRASH_DIR), std::env::var_os(CHILD_CRASH_AT)) {
        child_dies_at_the_seam(Path::new(&dir), at.to_str().unwrap().parse().unwrap());
    }
    let tmp = TempDir(std::env::temp_dir().join(format!("rill-procs-hole-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&tmp.0);
    let dir = tmp.0.join("partition");
    let log = open_shared(&dir);
    for seq in 0..AROUND {
        publish(&log, 0, seq);
    }
    died_at_the_seam(crash_child(HOLE_TEST, &dir, super::dir::DIE_GRANTED));
    let hole = u64::from(AROUND + CHILD_RECORDS);
    assert_eq!(log.end_offset(), hole + 1, "the dead child's reservation took offset {hole}");

    // Another process reads while this one publishes around the hole.
    let counts = [2 * AROUND, CHILD_RECORDS];
    let total = (2 * AROUND + CHILD_RECORDS) as usize;
    let mut reader = crash_child(HOLE_TEST, &dir, 0);
    let reader = reader
        .env_remove(CHILD_CRASH_AT)
        .env(CHILD_READ, total.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    publish_around(&log, AROUND);
    let read = read_n(&log, total);
    check_read(&read, counts, 1);
    assert!(read.iter().all(|&(offset, _)| offset != hole), "the given-up offset is never read");
    // The reader child gives up at its own deadline if it is stuck.
    let out = reader.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the reader process failed or was stuck ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // A process that joins later finds the slot given up in the file.
    let durable = DurableLog { dir: dir.clone(), fsync: Fsync::Never, repair: false };
    let joined = Log::join(&small_config(), 0, &durable).unwrap();
    assert_eq!(read_n(&joined, total), read);
    drop(joined);
    drop(log);

    // So does recovery: a skip record in its place, nothing else changed.
    let (log, report) = Log::open(&small_config(), 0, &durable).unwrap();
    assert_eq!((report.records, report.skipped), (total as u64 + 1, 1), "{report:?}");
    assert!(report.truncated_at.is_none(), "{report:?}");
    assert_eq!(read_n(&log, total), read);
}

const SEALER_TEST: &str = "log::procs_tests::a_sealer_killed_before_it_seals_blocks_no_one";

/// A publisher process killed right after the fetch-add that elected it
/// its segment's sealer, before the seal (`segment.rs`, "A sealer that
/// dies before it seals"): the parent's next publish finds the segment
/// over-full and unsealed, seals it in the dead sealer's place after the
/// abandon bound, takes its roll over, and goes on: dense offsets, every
/// record read once, in this process, in one that joins later, and after
/// recovery.
#[test]
fn a_sealer_killed_before_it_seals_blocks_no_one() {
    if let (Some(dir), Some(at)) = (std::env::var_os(CHILD_CRASH_DIR), std::env::var_os(CHILD_CRASH_AT)) {
        child_dies_at_the_seam(Path::new(&dir), at.to_str().unwrap().parse().unwrap());
    }
    let tmp = TempDir(std::env::temp_dir().join(format!("rill-procs-sealer-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&tmp.0);
    let dir = tmp.0.join("partition");
    let log = open_shared(&dir);
    for seq in 0..AROUND {
        publish(&log, 0, seq);
    }
    died_at_the_seam(crash_child(SEALER_TEST, &dir, super::dir::DIE_SEALER));
    // The child published on until its reservation overflowed a segment.
    let child_records = {
        let guard = crate::sync::epoch::pin();
        let seg = log.shared.dir(&guard).last().clone();
        assert!(seg.awaits_seal(), "the dead child was elected sealer and did not seal");
        let granted = (0..seg.slot_count()).take_while(|&i| seg.committed(i).is_some()).count() as u64;
        u32::try_from(seg.base() + granted - u64::from(AROUND)).unwrap()
    };
    assert!(child_records > CHILD_RECORDS);

    publish_around(&log, AROUND);
    assert_eq!(log.end_offset(), u64::from(2 * AROUND + child_records), "no offset lost at the taken-over seal");
    let counts = [2 * AROUND, child_records];
    let total = (2 * AROUND + child_records) as usize;
    let read = read_n(&log, total);
    check_read(&read, counts, 0);

    let durable = DurableLog { dir: dir.clone(), fsync: Fsync::Never, repair: false };
    let joined = Log::join(&small_config(), 0, &durable).unwrap();
    assert_eq!(read_n(&joined, total), read);
    drop(joined);
    drop(log);
    let (log, report) = Log::open(&small_config(), 0, &durable).unwrap();
    assert_eq!((report.records, report.skipped), (total as u64, 0), "{report:?}");
    assert!(report.truncated_at.is_none(), "{report:?}");
    assert_eq!(read_n(&log, total), read);
}

const KILL_TEST: &str = "log::procs_tests::publishers_killed_at_random_moments_lose_nothing_acknowledged";
/// Kill iterations of the kill test by default (a few seconds in all).
const KILL_ITERATIONS: u32 = 50;
/// Set to run more iterations of the kill test: its long version.
const KILL_ITERATIONS_VAR: &str = "RILL_CRASH_ITERATIONS";
/// Most acknowledged records the kill test's child publishes before it
/// is killed (a random number of them, up to this: a few rolls' worth).
const MOST_BEFORE_KILL: u64 = 1_500;
/// Records the kill test's parent publishes after each kill.
const AFTER_KILL: u32 = 20;
/// The kill test's child tells its acknowledged records in runs of this
/// many (and at its death, any it told but had not flushed are lost, which
/// only makes the check weaker, never wrong).
const ACKS_PER_FLUSH: u32 = 16;

/// The kill test's child: joins the partition and publishes as publisher
/// 1 until it is killed, telling the parent each acknowledged record (an
/// append that returned) on its standard output.
fn publish_until_killed(dir: &Path) -> ! {
    use std::io::Write;
    let durable = DurableLog { dir: dir.to_path_buf(), fsync: Fsync::Never, repair: false };
    let log = Log::join(&small_config(), 0, &durable).unwrap();
    let mut out = std::io::stdout().lock();
    for seq in 0.. {
        publish(&log, 1, seq);
        writeln!(out, "ack {seq}").unwrap();
        if seq % ACKS_PER_FLUSH == 0 {
            out.flush().unwrap();
        }
    }
    unreachable!("killed first");
}

/// Every record of `log` from its first offset up to `end` (given-up
/// offsets and skip records are passed over): `(publisher, seq)` of each.
/// Fails the test after [`PATIENCE`].
fn read_to(log: &Log, end: u64) -> Vec<(u32, u32)> {
    let mut cursor = log.cursor_from_first();
    let mut read = Vec::new();
    wait_until("the records", || {
        while let Some(view) = cursor.read().expect("nothing is trimmed") {
            assert_eq!(view.payload().len(), 8, "a whole record, never a torn one");
            read.push(decode(view.payload()));
        }
        cursor.offset() >= end
    });
    read
}

/// A xorshift generator for the kill loops, seeded from the clock so that
/// each run kills at other moments: each call gives a number below its
/// argument.
fn clock_seeded() -> impl FnMut(u64) -> u64 {
    let mut state = crate::clock::now_ns() | 1;
    move |below| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % below
    }
}

/// A kill -9 loop: a publisher process is killed (`SIGKILL`) at a random
/// moment while it publishes, anywhere in an append (between its
/// reservation and its commit included, or between a sealing reservation
/// and its seal). The parent, which has the partition open, then publishes
/// and reads: it moves on within the abandon bound (or a roll takeover),
/// reads no torn record, and finds every record the child was told was
/// appended, in order, once each. Recovery of the files then finds the
/// same records. [`KILL_ITERATIONS`] by default; more with
/// [`KILL_ITERATIONS_VAR`].
#[test]
fn publishers_killed_at_random_moments_lose_nothing_acknowledged() {
    if let Some(dir) = std::env::var_os(CHILD_CRASH_DIR) {
        publish_until_killed(Path::new(&dir));
    }
    use std::io::BufRead;
    let iterations = std::env::var(KILL_ITERATIONS_VAR).ok().and_then(|v| v.parse().ok()).unwrap_or(KILL_ITERATIONS);
    let tmp = TempDir(std::env::temp_dir().join(format!("rill-procs-kill-{}", std::process::id())));
    let mut random = clock_seeded();
    for iteration in 0..iterations {
        let _ = std::fs::remove_dir_all(&tmp.0);
        let dir = tmp.0.join("partition");
        let log = open_shared(&dir);
        publish(&log, 0, 0);
        let mut child = crash_child(KILL_TEST, &dir, 0)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let kill_after = random(MOST_BEFORE_KILL);
        let mut acked = None;
        while acked.map_or(0, |a: u32| u64::from(a) + 1) < kill_after {
            let line = lines.next().expect("the child publishes until killed").unwrap();
            if let Some(seq) = line.strip_prefix("ack ") {
                acked = Some(seq.parse().unwrap());
            }
        }
        // Spin a random moment more, so the kill lands anywhere in an append.
        for _ in 0..random(20_000) {
            std::hint::spin_loop();
        }
        child.kill().unwrap();
        child.wait().unwrap();
        // Acknowledged too: what the child printed before it died.
        for line in lines {
            if let Some(seq) = line.unwrap().strip_prefix("ack ") {
                acked = Some(seq.parse().unwrap());
            }
        }

        // Publishing goes on; reading passes whatever the child left.
        publish_some(&log, 1, AFTER_KILL);
        let end = log.end_offset();
        let read = read_to(&log, end);
        let mine: Vec<u32> = read.iter().filter(|r| r.0 == 0).map(|r| r.1).collect();
        assert_eq!(mine, (0..=AFTER_KILL).collect::<Vec<_>>(), "iteration {iteration}: the parent's records");
        let theirs: Vec<u32> = read.iter().filter(|r| r.0 == 1).map(|r| r.1).collect();
        assert!(
            theirs.iter().enumerate().all(|(i, &seq)| seq == i as u32),
            "iteration {iteration}: the child's records in order, none twice: {theirs:?}"
        );
        let acked_count = acked.map_or(0, |a| a as usize + 1);
        assert!(
            theirs.len() >= acked_count,
            "iteration {iteration}: {} of the child's records, {acked_count} acknowledged",
            theirs.len()
        );
        drop(log);

        // Recovery finds the same records, none torn.
        let durable = DurableLog { dir: dir.clone(), fsync: Fsync::Never, repair: false };
        let (log, report) = Log::open(&small_config(), 0, &durable).unwrap();
        assert_eq!(report.end_offset, end, "iteration {iteration}: {report:?}");
        assert_eq!(read_to(&log, end), read, "iteration {iteration}: recovery reads what the processes read");
    }
}

/// The recycling kill test's log: small segments and a retention of two,
/// so the partition trims a segment, frees its file and reuses one every
/// few hundred records.
fn recycling_config() -> LogConfig {
    LogConfig { retention_bytes: Some(2 * SMALL_SEGMENT as u64), ..small_config() }
}

/// This test's name, for its child's command line.
const RECYCLE_KILL_TEST: &str =
    "log::procs_tests::processes_killed_while_they_free_and_reuse_files_leave_every_reader_whole_records";
/// Most of the child's records the recycling kill test's parent reads
/// before it kills the child (a random number, up to this: a dozen rolls,
/// so the child has trimmed, freed and reused files by then).
const MOST_READ_BEFORE_KILL: u64 = 5_000;
/// Records the recycling kill test's parent publishes after each kill: a
/// few rolls, through free files the child may have left in any state.
const RECYCLING_AFTER_KILL: u32 = 2_000;

/// What a reader of the recycling kill test has seen: the next offset, and
/// each publisher's last record.
struct ReadAlong {
    cursor: super::Cursor,
    next: u64,
    last: [Option<u32>; 2],
}

impl ReadAlong {
    /// Reads what there is: every record whole, at growing offsets, each
    /// publisher's in order, none twice (a lag passes over trimmed ones).
    fn read(&mut self, iteration: u32) {
        loop {
            match self.cursor.read() {
                Ok(Some(view)) => {
                    assert!(view.offset() >= self.next, "iteration {iteration}: offset {} again", view.offset());
                    assert_eq!(view.payload().len(), 8, "iteration {iteration}: a torn record at {}", view.offset());
                    let (who, seq) = decode(view.payload());
                    assert!(who < 2, "iteration {iteration}: record {} names publisher {who}", view.offset());
                    let last = &mut self.last[who as usize];
                    assert!(
                        last.is_none_or(|l| seq > l),
                        "iteration {iteration}: publisher {who}'s record {seq} at {} after {last:?}",
                        view.offset()
                    );
                    *last = Some(seq);
                    self.next = view.offset() + 1;
                }
                Ok(None) => return,
                Err(lagged) => self.next = lagged.resumed_at,
            }
        }
    }
}

/// A kill -9 loop of a process that streams through a partition whose
/// retention trims, frees and reuses files all the time ("Recycling
/// across processes" in `file/mod.rs`), killed at a random moment (in a
/// free step or a claim included, on its prefault thread). The parent,
/// reading along as another opener, reads every record whole and in
/// order, then publishes a few rolls more through the free files the
/// child left (in whatever state) and reads them all back; recovery then
/// reads whole records too. [`KILL_ITERATIONS`] by default; more with
/// [`KILL_ITERATIONS_VAR`].
#[test]
fn processes_killed_while_they_free_and_reuse_files_leave_every_reader_whole_records() {
    if let Some(dir) = std::env::var_os(CHILD_CRASH_DIR) {
        let durable = DurableLog { dir: PathBuf::from(dir), fsync: Fsync::Never, repair: false };
        let log = Log::join(&recycling_config(), 0, &durable).unwrap();
        for seq in 0.. {
            publish(&log, 1, seq);
        }
        unreachable!("killed first");
    }
    let iterations = std::env::var(KILL_ITERATIONS_VAR).ok().and_then(|v| v.parse().ok()).unwrap_or(KILL_ITERATIONS);
    let tmp = TempDir(std::env::temp_dir().join(format!("rill-procs-recycle-kill-{}", std::process::id())));
    let mut random = clock_seeded();
    let mut reused = 0;
    for iteration in 0..iterations {
        let _ = std::fs::remove_dir_all(&tmp.0);
        let dir = tmp.0.join("partition");
        let durable = DurableLog { dir: dir.clone(), fsync: Fsync::Never, repair: false };
        let (log, _) = Log::open_in(&recycling_config(), 0, &durable, Sharing::Processes).unwrap();
        log.set_abandon_after(TEST_ABANDON);
        publish(&log, 0, 0);
        let mut reader = ReadAlong { cursor: log.cursor_from_first(), next: 0, last: [None; 2] };
        let mut child = crash_child(RECYCLE_KILL_TEST, &dir, 0)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let kill_after = random(MOST_READ_BEFORE_KILL);
        wait_until("the child's records", || {
            reader.read(iteration);
            // The parent's epoch moves on, so its trimmed mappings go.
            crate::sync::epoch::pin().flush();
            reader.last[1].is_some_and(|seq| u64::from(seq) >= kill_after)
        });
        // Spin a random moment more, so the kill lands anywhere.
        for _ in 0..random(20_000) {
            std::hint::spin_loop();
        }
        child.kill().unwrap();
        child.wait().unwrap();

        // Publishing goes on through the files the child left, read along.
        for seq in 1..=RECYCLING_AFTER_KILL {
            publish(&log, 0, seq);
            if seq % 100 == 0 {
                reader.read(iteration);
                crate::sync::epoch::pin().flush();
            }
        }
        wait_until("the parent's records", || {
            reader.read(iteration);
            reader.last[0] == Some(RECYCLING_AFTER_KILL)
        });
        reused += log.shared.pool.reused_free();
        let names: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        let free = names.iter().filter(|n| file::is_free_file_name(n)).count();
        assert!(free <= file::FREE_FILES as usize, "iteration {iteration}: {names:?}");
        let end = log.end_offset();
        drop((reader, log));
        // A file whose free step had begun when the log closed is freed
        // still (see "Crash states" in `file/mod.rs`): recovery runs once
        // the prefault thread is done with it, so what it leaves is exact.
        wait_until("the files let go", super::prefault::let_go_drained);

        // Recovery deletes spare and free files and reads whole records.
        let (log, report) = Log::open(&recycling_config(), 0, &durable).unwrap();
        assert_eq!(report.end_offset, end, "iteration {iteration}: {report:?}");
        let mut reader = ReadAlong { cursor: log.cursor_from_first(), next: 0, last: [None; 2] };
        reader.read(iteration);
        assert_eq!(reader.last[0], Some(RECYCLING_AFTER_KILL), "iteration {iteration}");
        let names: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert!(
            !names.iter().any(|n| file::is_free_file_name(n) || file::is_spare_file_name(n)),
            "iteration {iteration}: {names:?}"
        );
    }
    // The parent's own rolls reused files, not only the child's.
    assert!(reused > 0, "the parent never reused a free file");
}

/// A writer that is only late, not dead (`segment.rs`, "An abandoned
/// reservation"): another view's reader gives its slot up after the
/// abandon bound and reads on; the writer then writes its record whole,
/// frame included, and its commit fails, so the append it stands for
/// fails and its record is never read. Recovery finds the record's frame
/// checking, but its slot given up in the file's index, and writes a skip
/// record in its place: the record stays unread after a restart too. Two
/// logs over one directory stand for the processes.
#[test]
fn a_late_writer_loses_its_slot_and_recovery_keeps_it_skipped() {
    let tmp = TempDir(std::env::temp_dir().join(format!("rill-procs-late-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&tmp.0);
    let durable = DurableLog { dir: tmp.0.clone(), fsync: Fsync::Never, repair: false };
    let writer = open_shared(&tmp.0);
    let reader = Log::join(&small_config(), 0, &durable).unwrap();
    reader.set_abandon_after(TEST_ABANDON);
    publish(&writer, 0, 0);

    // The late writer's reservation, then records after it.
    let mut payload = [0u8; 8];
    payload[..4].copy_from_slice(&9u32.to_le_bytes());
    let record = Record::new(&payload);
    let len = record.encoded_len().unwrap();
    let guard = crate::sync::epoch::pin();
    let seg = writer.shared.dir(&guard).last().clone();
    let Reservation::Granted { index, pos } = seg.reserve(1, (FRAME_LEN + len) as u64) else {
        panic!("room for one record")
    };
    assert_eq!(index, 1);
    publish(&writer, 0, 1);
    publish(&writer, 0, 2);

    let read = read_n(&reader, 3);
    assert_eq!(read, [(0, (0, 0)), (2, (0, 1)), (3, (0, 2))], "offset 1 given up, the rest read");
    // SAFETY: the Granted reservation above, for the record's frame and bytes.
    let committed = unsafe { seg.write_and_commit(index, pos, len, &record, 1, true) };
    assert!(!committed, "the late commit finds its slot given up");
    assert_eq!(read_n(&writer, 3), read, "the writer's own view never reads it either");
    drop((guard, seg, writer, reader));

    let (log, report) = Log::open(&small_config(), 0, &durable).unwrap();
    assert_eq!((report.records, report.skipped, report.end_offset), (4, 1, 4), "{report:?}");
    assert!(report.truncated_at.is_none(), "{report:?}");
    assert_eq!(read_n(&log, 3), read, "a whole record in a given-up slot stays unread after recovery");
}

/// What a late writer's caller sees (`segment.rs`, "An abandoned
/// reservation"): an append whose slot was given up before its commit
/// fails with `Timeout`, and a batch whose first slot was gives up the
/// rest of its part at once, so no reader waits the bound again for them
/// (the reader here has a bound far longer than the test's patience). The
/// offsets given up are never read; the appends after them are.
#[test]
fn an_append_whose_slot_was_given_up_fails_with_timeout() {
    let tmp = TempDir(std::env::temp_dir().join(format!("rill-procs-timeout-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&tmp.0);
    let log = open_shared(&tmp.0);
    log.set_abandon_after(Duration::from_secs(3600));
    publish(&log, 0, 0);
    log.shared.claim_next.store(true, std::sync::atomic::Ordering::Relaxed);
    let err = log.append(&Record::new(b"late")).unwrap_err();
    assert!(matches!(err, crate::Error::Timeout), "{err:?}");
    log.shared.claim_next.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut offsets = vec![7];
    let records = [Record::new(b"a"), Record::new(b"b"), Record::new(b"c")];
    let err = log.append_batch(&records, &mut offsets).unwrap_err();
    assert!(matches!(err, crate::Error::Timeout), "{err:?}");
    assert!(offsets.is_empty(), "no record of the batch was appended: {offsets:?}");
    assert_eq!(publish(&log, 0, 1), 5, "offsets 1 to 4 were given up");
    assert_eq!(read_n(&log, 2), [(0, (0, 0)), (5, (0, 1))]);
}

/// A process that does not compact follows another's swap ("The swap
/// across processes" in `compact.rs`); two logs over one directory stand
/// for the processes. While the test holds the partition's compaction
/// lock, neither compacts; then one does, and the other, whose every pass
/// finds the lock taken, maps the rebuilt files at its next call: its
/// reader from the first offset reads what the compactor's reads, and a
/// cursor that was inside an old segment finishes it as it was.
#[test]
fn a_process_that_does_not_compact_follows_the_others_rebuilt_files() {
    use std::os::fd::AsRawFd;
    // Several segments of records of four keys.
    const RECORDS: u32 = 2_000;
    let tmp = TempDir(std::env::temp_dir().join(format!("rill-procs-follow-swap-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&tmp.0);
    let durable = DurableLog { dir: tmp.0.clone(), fsync: Fsync::Never, repair: false };
    let (compactor, _) = Log::open_in(&small_config(), 0, &durable, Sharing::Processes).unwrap();
    let follower = Log::join(&small_config(), 0, &durable).unwrap();
    for i in 0..RECORDS {
        compactor.append(&Record::new(&i.to_le_bytes()).with_key(&[(i % 4) as u8])).unwrap();
    }
    let read = |log: &Log| {
        let mut cursor = log.cursor_from_first();
        std::iter::from_fn(|| cursor.read().unwrap().map(|v| (v.offset(), v.payload().to_vec()))).collect::<Vec<_>>()
    };
    let mut old = follower.cursor_from_first();
    assert_eq!(old.read().unwrap().map(|v| v.offset()), Some(0));
    assert_eq!(read(&follower).len(), RECORDS as usize, "the follower maps every segment");

    let lock_file = tmp.0.join(super::compact::COMPACT_LOCK_FILE);
    let lock = super::file::open_lock_file(&lock_file).unwrap();
    let flock = |op| {
        // SAFETY: `flock` on a descriptor we own, open across the call.
        assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), op) }, 0, "{}", std::io::Error::last_os_error());
    };
    let policy = super::CompactionPolicy { min_lag_ns: 0, tombstone_ns: u64::MAX, id_lag_ns: 0 };
    let now = crate::clock::now_ns();
    flock(libc::LOCK_EX | libc::LOCK_NB);
    assert!(!compactor.compact(&policy, now).unwrap(), "the lock is taken: no pass");
    flock(libc::LOCK_UN);
    assert!(compactor.compact(&policy, now).unwrap(), "a pass");
    let compacted = read(&compactor);
    assert!(compacted.len() < RECORDS as usize / 2, "{} records after the pass", compacted.len());
    assert_eq!(read(&follower).len(), RECORDS as usize, "not followed yet");

    flock(libc::LOCK_EX | libc::LOCK_NB);
    assert!(!follower.compact(&policy, now).unwrap(), "the lock is taken: no pass, but a follow");
    assert_eq!(read(&follower), compacted, "the follower reads the rebuilt files");
    assert_eq!(follower.stats().compaction_passes, 0, "and never compacted");
    // The cursor inside the old first segment finishes it as it was: the
    // record at offset 1 is there, though the pass removed it.
    assert_eq!(old.read().unwrap().map(|v| v.offset()), Some(1));
    assert!(compacted.iter().all(|(offset, _)| *offset != 1));
    flock(libc::LOCK_UN);
}

/// A cursor that waited at a slot reserved and not yet committed, whose
/// writer then committed (slow, not dead), and that read on to the end,
/// waits on nothing: `retry_at` says so, though the wait it recorded is
/// still kept. The doorbell sleeps until that deadline; one long past
/// would wake it at once, for ever.
#[test]
fn a_cursor_past_a_slow_writers_slot_has_no_retry_deadline() {
    let tmp = TempDir(std::env::temp_dir().join(format!("rill-procs-slow-writer-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&tmp.0);
    let log = open_shared(&tmp.0.join("partition"));
    publish(&log, 0, 0);
    let mut cursor = log.cursor_from_first();
    assert!(cursor.read().unwrap().is_some());
    // The slow writer reserves its slot and commits it later.
    let payload = [7u8; 16];
    let record = Record::new(&payload);
    let len = log.check_size(&record).unwrap();
    let guard = crate::sync::epoch::pin();
    let seg = log.shared.dir(&guard).last().clone();
    let Reservation::Granted { index, pos } = seg.reserve(1, len as u64 + FRAME_LEN as u64) else {
        panic!("a fresh segment has room")
    };
    assert!(!cursor.has_next(), "the slot is reserved, not committed");
    assert!(cursor.retry_at().is_some(), "it waits on the reservation");
    // SAFETY: `index` and `pos` are this test's own granted reservation of
    // `len` record bytes after a frame, on a durable (framed) segment.
    assert!(unsafe { seg.write_and_commit(index, pos, len, &record, 1, true) });
    assert!(cursor.read().unwrap().is_some(), "the slow writer's record");
    assert!(!cursor.has_next(), "at the end");
    assert_eq!(cursor.retry_at(), None, "past its wait, it waits on nothing");
}
