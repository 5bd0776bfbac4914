//! Two processes appending into one segment file at once (issue 39, its
//! first step): the tail word, the seal and the offset index live in the
//! file (`file.rs`), so a second mapping of it, in another process,
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
use super::record::Record;
use super::segment::{Buffers, Pool, Reservation, Segment};
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
    let mut seq = 1;
    while ahead.first_offset() < 2_000 {
        publish(&ahead, 0, seq);
        seq += 1;
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
