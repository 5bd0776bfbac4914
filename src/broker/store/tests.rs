//! The data directory's tests: reopening, torn and damaged files, the
//! topic journal and its compaction, old formats, and the group commit.

use super::format::{
    FRAME_HEADER, TOPICS_VERSION, VERSION, decode_topics, encode_topic_before_appended, encode_topics, frame_of,
    read_frame,
};
use super::journal::JOURNAL_FILE;
use super::offsets::OFFSETS_FILES;
use super::topics::{TOPICS_FILE, apply_change};
use super::*;
use std::fs::OpenOptions;
use std::time::Duration;

fn temp_dir(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("rill-store-{tag}-{}-{}", std::process::id(), crate::sync::unique_id()));
    let _ = fs::remove_dir_all(&p);
    p
}

fn sample_offsets(n: u64) -> Offsets {
    Offsets {
        groups: vec![("g".into(), "a/b".into(), vec![Some(n), None, Some(0)])],
        durable: vec![("sub".into(), vec![("a/b".into(), 2, n + 1)])],
    }
}

/// What a crash at each step of a topic deletion leaves, and what the
/// next open keeps (see "Deleting a topic" in `mod.rs`).
#[test]
fn opening_removes_what_a_deletion_cut_short_left_and_keeps_the_rest() {
    let root = temp_dir("sweep");
    let topics = root.join(TOPICS_DIR);
    {
        let opened = Store::open(&root, Fsync::Always, false).unwrap();
        let store = &opened.store;
        for name in ["unlisted", "tombstoned", "kept"] {
            store
                .add_topic(name, &TopicOptions::default(), |dir| {
                    fs::create_dir_all(dir(0)).unwrap();
                    fs::write(dir(0).join("00000000000000000000.seg"), b"data").unwrap();
                    Ok(())
                })
                .unwrap();
        }
        // Killed after unlisting, before the rename.
        assert_eq!(store.unlist_topic("unlisted").unwrap(), Some(0));
        // Killed after the rename, before (or during) the removal.
        assert_eq!(store.unlist_topic("tombstoned").unwrap(), Some(1));
        fs::rename(topics.join("1"), topics.join(tombstone_name(1))).unwrap();
        // A creation killed before listing its directory.
        fs::create_dir_all(topics.join("3/0")).unwrap();
    }
    let opened = Store::open(&root, Fsync::Always, false).unwrap();
    assert_eq!(opened.topics.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["kept"]);
    let mut left: Vec<String> =
        fs::read_dir(&topics).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    left.sort();
    // The listed topic, whole, and the unlisted creation, which the next
    // creation (number 3) clears.
    assert_eq!(left, ["2", "3"]);
    assert!(topics.join("2/0/00000000000000000000.seg").exists());
    // A live delete goes through the tombstone and leaves nothing.
    opened.store.remove_topic("kept").unwrap();
    assert!(!topics.join("2").exists() && !topics.join(tombstone_name(2)).exists());
    drop(opened);
    fs::remove_dir_all(&root).unwrap();
}

/// Lists `name` with no partition directories (the store's part only).
fn add(store: &Store, name: &str) {
    store.add_topic(name, &TopicOptions::default(), |_| Ok(())).unwrap();
}

fn names(opened: &Opened) -> Vec<String> {
    let mut n: Vec<String> = opened.topics.iter().map(|t| t.name.clone()).collect();
    n.sort();
    n
}

fn set_compact_min(store: &Store, n: usize) {
    store.topics.lock().compact_min = n;
}

/// Creations and deletions through journal appends and compactions all
/// come back after reopening, and listing costs bytes in proportion to
/// the changes, not to changes times topics (before the journal, each
/// creation rewrote the whole list: 400 creations wrote ~200x one list).
#[test]
fn topic_changes_are_journalled_compacted_and_come_back() {
    const N: usize = 400;
    let root = temp_dir("journal");
    let mut want = Vec::new();
    {
        let opened = Store::open(&root, Fsync::Never, false).unwrap();
        set_compact_min(&opened.store, 16);
        for i in 0..N {
            let name = format!("t/{i:04}");
            add(&opened.store, &name);
            want.push(name);
        }
        for i in (0..N).step_by(3) {
            opened.store.unlist_topic(&format!("t/{i:04}")).unwrap();
        }
        want.retain(|n| n[2..].parse::<usize>().unwrap() % 3 != 0);
        let list = opened.store.topics.lock();
        assert!(list.generation > 3, "compactions happened: generation {}", list.generation);
        // One topic's entry, and one snapshot's worth per topic: a
        // generous linear bound (quadratic would be ~N/2 lists).
        let per_topic = (ENTRY_BYTES_BOUND + 64) as u64;
        assert!(
            list.bytes_listed <= 6 * per_topic * (N + N / 3) as u64,
            "{} bytes written to list {} changes",
            list.bytes_listed,
            N + N / 3
        );
    }
    let opened = Store::open(&root, Fsync::Never, false).unwrap();
    want.sort();
    assert_eq!(names(&opened), want);
    // Directory numbers stay unique and the next one follows the last.
    let mut dirs: Vec<u64> = opened.topics.iter().map(|t| t.dir).collect();
    dirs.sort_unstable();
    dirs.dedup();
    assert_eq!(dirs.len(), want.len());
    assert_eq!(opened.store.topics.lock().next_dir, N as u64);
    drop(opened);
    fs::remove_dir_all(&root).unwrap();
}

/// The bytes an entry takes for a short topic name, at most.
const ENTRY_BYTES_BOUND: usize = 8 + 1 + 4 + 6 + 8 + 4 + 5 * 9;

#[test]
fn a_torn_last_journal_entry_is_dropped_and_the_next_append_survives() {
    let root = temp_dir("torn-journal");
    {
        let opened = Store::open(&root, Fsync::Never, false).unwrap();
        for name in ["a", "b", "c"] {
            add(&opened.store, name);
        }
    }
    let journal = root.join(JOURNAL_FILE);
    let whole = fs::read(&journal).unwrap();
    // An append cut short: a length, a CRC and part of the body.
    let mut torn = whole.clone();
    torn.extend_from_slice(&40u32.to_le_bytes());
    torn.extend_from_slice(&7u32.to_le_bytes());
    torn.extend_from_slice(&[1, 2, 3]);
    fs::write(&journal, &torn).unwrap();
    {
        let opened = Store::open(&root, Fsync::Never, false).unwrap();
        assert_eq!(names(&opened), ["a", "b", "c"]);
        assert_eq!(fs::read(&journal).unwrap(), whole, "the torn entry is cut off");
        add(&opened.store, "d");
    }
    // An append torn to zeros (a file extended before it was written).
    let mut zeros = fs::read(&journal).unwrap();
    zeros.extend_from_slice(&[0; 100]);
    fs::write(&journal, &zeros).unwrap();
    let opened = Store::open(&root, Fsync::Never, false).unwrap();
    assert_eq!(names(&opened), ["a", "b", "c", "d"]);
    drop(opened);
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn damage_inside_the_journal_is_corrupt() {
    let root = temp_dir("damaged-journal");
    {
        let opened = Store::open(&root, Fsync::Never, false).unwrap();
        for name in ["a", "b", "c"] {
            add(&opened.store, name);
        }
    }
    // "a" is in the snapshot (the first change compacts), "b" and "c"
    // in the journal: flip a byte of "b"'s entry, which is not last.
    let journal = root.join(JOURNAL_FILE);
    let mut bytes = fs::read(&journal).unwrap();
    let at = bytes.windows(1).position(|w| w == b"b").unwrap();
    bytes[at] ^= 0x20;
    fs::write(&journal, &bytes).unwrap();
    let e = Store::open(&root, Fsync::Never, false).unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }), "{e}");
    fs::remove_dir_all(&root).unwrap();
}

/// A crash after a compaction's new snapshot, before its new journal,
/// leaves the old journal, whose entries are all in the snapshot.
#[test]
fn a_journal_left_by_a_compaction_cut_short_is_ignored() {
    let root = temp_dir("stale-journal");
    let journal = root.join(JOURNAL_FILE);
    {
        let opened = Store::open(&root, Fsync::Never, false).unwrap();
        set_compact_min(&opened.store, 2);
        // "a" compacts (no journal yet); "b" and "c" are appended.
        for name in ["a", "b", "c"] {
            add(&opened.store, name);
        }
        let old = fs::read(&journal).unwrap();
        // Two entries, more than the snapshot's one topic: "d" compacts.
        add(&opened.store, "d");
        assert_eq!(opened.store.topics.lock().generation, 2);
        fs::write(&journal, &old).unwrap();
    }
    {
        let opened = Store::open(&root, Fsync::Never, false).unwrap();
        assert_eq!(names(&opened), ["a", "b", "c", "d"], "nothing twice, nothing lost");
        add(&opened.store, "e");
    }
    let opened = Store::open(&root, Fsync::Never, false).unwrap();
    assert_eq!(names(&opened), ["a", "b", "c", "d", "e"]);
    drop(opened);
    fs::remove_dir_all(&root).unwrap();
}

/// A directory written before the journal (list format 1) opens, and
/// its list is rewritten in format 2 before any journal exists, so a
/// rill that knows only format 1 refuses it rather than miss entries.
#[test]
fn a_list_of_format_1_is_read_and_rewritten_before_a_journal_starts() {
    let root = temp_dir("old-list");
    fs::create_dir_all(&root).unwrap();
    let old = TopicMeta { name: "old".into(), dir: 0, options: TopicOptions::default() };
    let mut w = Writer::default();
    w.u32(1);
    encode_topic_before_appended(&mut w, &old);
    fs::write(root.join(TOPICS_FILE), frame_of(1, &w.0)).unwrap();
    {
        let opened = Store::open(&root, Fsync::Never, false).unwrap();
        assert_eq!(names(&opened), ["old"]);
        add(&opened.store, "new");
    }
    let (version, _) = read_frame(&root.join(TOPICS_FILE), TOPICS_VERSION).unwrap().unwrap();
    assert_eq!(version, TOPICS_VERSION);
    assert!(read_frame(&root.join(TOPICS_FILE), 1).is_err(), "a format-1 reader refuses it");
    let opened = Store::open(&root, Fsync::Never, false).unwrap();
    assert_eq!(names(&opened), ["new", "old"]);
    assert_eq!(opened.topics.iter().find(|t| t.name == "new").unwrap().dir, 1);
    drop(opened);
    fs::remove_dir_all(&root).unwrap();
}

/// A topic as encoded before the appended options (`topics.list` of
/// format 1 and 2, and the journal entries of those rills).
/// A topic listed or journaled by a rill without `dedupe_window_ms`
/// reads with its default; one journaled with it keeps it.
#[test]
fn options_an_older_encoding_lacks_take_their_defaults() {
    let path = Path::new("topics.list");
    let set = TopicOptions { dedupe_window_ms: 5, ..TopicOptions::default() };
    let meta = TopicMeta { name: "t".into(), dir: 4, options: set.clone() };
    let mut old = Writer::default();
    old.u64(9);
    old.u32(1);
    encode_topic_before_appended(&mut old, &meta);
    let (_, list) = decode_topics(path, 2, &old.0).unwrap();
    assert_eq!(list[0].options.dedupe_window_ms, crate::broker::DEFAULT_DEDUPE_WINDOW_MS);
    let (_, list) = decode_topics(path, TOPICS_VERSION, &encode_topics(9, std::slice::from_ref(&meta))).unwrap();
    assert_eq!(list[0].options, set);
    for (entry, want) in [(&old.0[12..], TopicOptions::default().dedupe_window_ms), (&encode_meta(&meta)[..], 5)] {
        let (mut list, mut next_dir) = (Vec::new(), 0);
        apply_change(&mut list, &mut next_dir, Change::Add(entry.to_vec()), path).unwrap();
        assert_eq!((list[0].options.dedupe_window_ms, next_dir), (want, 5));
    }
}

/// Compaction's options (list format 4) come back from the list and from
/// a journal entry; a list of format 3, or a journal entry that stops after
/// the priority, reads them as their defaults (no compaction).
#[test]
fn compaction_options_come_back_and_older_encodings_read_as_not_compacted() {
    use crate::broker::topic::Cleanup;
    let path = Path::new("topics.list");
    let set = TopicOptions {
        cleanup: Cleanup::CompactAndDelete,
        delete_retention_ms: 7,
        min_compaction_lag_ms: 9,
        dedupe_window_ms: 5,
        ..TopicOptions::default()
    };
    let meta = TopicMeta { name: "t".into(), dir: 4, options: set.clone() };
    let (_, list) = decode_topics(path, TOPICS_VERSION, &encode_topics(9, std::slice::from_ref(&meta))).unwrap();
    assert_eq!(list[0].options, set);
    let (mut list, mut next_dir) = (Vec::new(), 0);
    apply_change(&mut list, &mut next_dir, Change::Add(encode_meta(&meta)), path).unwrap();
    assert_eq!(list[0].options, set);
    // The same topic as a format-3 rill wrote it: compaction's 20 bytes cut.
    let entry = encode_meta(&meta);
    let format3 = &entry[..entry.len() - 20];
    let want = TopicOptions { dedupe_window_ms: 5, ..TopicOptions::default() };
    let (mut list, mut next_dir) = (Vec::new(), 0);
    apply_change(&mut list, &mut next_dir, Change::Add(format3.to_vec()), path).unwrap();
    assert_eq!(list[0].options, want);
    let mut w = Writer::default();
    w.u64(9);
    w.u32(1);
    w.0.extend_from_slice(format3);
    let (_, list) = decode_topics(path, 3, &w.0).unwrap();
    assert_eq!(list[0].options, want);
}

fn encode_meta(meta: &TopicMeta) -> Vec<u8> {
    let mut w = Writer::default();
    encode_topic(&mut w, meta);
    w.0
}

#[test]
fn topics_and_offsets_come_back_after_reopening() {
    let root = temp_dir("roundtrip");
    // Options added later (by newer formats) keep their defaults.
    #[allow(clippy::needless_update)]
    let options =
        TopicOptions { partitions: 3, retention_messages: Some(7), dedupe_window_ms: 5_000, ..TopicOptions::default() };
    {
        let opened = Store::open(&root, Fsync::Always, false).unwrap();
        assert!(opened.topics.is_empty());
        assert_eq!(opened.offsets, Offsets::default());
        let dirs = opened.store.add_topic("a/b", &options, |dir| Ok((0..3).map(dir).collect::<Vec<_>>())).unwrap();
        assert_eq!(dirs[2], root.join("topics/0/2"));
        opened.store.add_topic("c", &TopicOptions::default(), |_| Ok(())).unwrap();
        opened.store.save_offsets(&sample_offsets(1), false).unwrap();
        opened.store.save_offsets(&sample_offsets(2), true).unwrap();
    }
    let opened = Store::open(&root, Fsync::Always, false).unwrap();
    let names: Vec<_> = opened.topics.iter().map(|t| (t.name.as_str(), t.dir)).collect();
    assert_eq!(names, vec![("a/b", 0), ("c", 1)]);
    assert_eq!(opened.topics[0].options, options);
    assert_eq!(opened.offsets, sample_offsets(2));
    opened.store.remove_topic("a/b").unwrap();
    assert!(!root.join("topics/0").exists());
    drop(opened);
    let opened = Store::open(&root, Fsync::Always, false).unwrap();
    assert_eq!(opened.topics.len(), 1);
    // Numbers are not reused while a later topic holds a higher one.
    opened.store.add_topic("d", &TopicOptions::default(), |_| Ok(())).unwrap();
    drop(opened);
    let opened = Store::open(&root, Fsync::Always, false).unwrap();
    assert_eq!(opened.topics.iter().map(|t| t.dir).collect::<Vec<_>>(), vec![1, 2]);
    drop(opened);
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_torn_offsets_slot_falls_back_to_the_other_and_both_torn_is_corrupt() {
    let root = temp_dir("torn");
    {
        let opened = Store::open(&root, Fsync::Never, false).unwrap();
        opened.store.save_offsets(&sample_offsets(1), false).unwrap();
        opened.store.save_offsets(&sample_offsets(2), false).unwrap();
        opened.store.save_offsets(&sample_offsets(3), false).unwrap();
    }
    // Slot 1 holds sequence 3 (the newest); tear it.
    let newest = root.join(OFFSETS_FILES[1]);
    let len = fs::metadata(&newest).unwrap().len();
    OpenOptions::new().write(true).open(&newest).unwrap().set_len(len - 3).unwrap();
    let opened = Store::open(&root, Fsync::Never, false).unwrap();
    assert_eq!(opened.offsets, sample_offsets(2));
    // The next write goes over the torn slot, not the good one.
    opened.store.save_offsets(&sample_offsets(4), false).unwrap();
    drop(opened);
    assert_eq!(Store::open(&root, Fsync::Never, false).unwrap().offsets, sample_offsets(4));
    // Damage both: a flipped bit in each body.
    for name in OFFSETS_FILES {
        let path = root.join(name);
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x10;
        fs::write(&path, bytes).unwrap();
    }
    match Store::open(&root, Fsync::Never, false).unwrap_err() {
        Error::Corrupt { file, offset, .. } => {
            assert!(file.starts_with(&root), "{file:?}");
            assert_eq!(offset, FRAME_HEADER as u64);
        }
        e => panic!("expected Corrupt, got {e:?}"),
    }
    assert_eq!(Store::open(&root, Fsync::Never, true).unwrap().offsets, Offsets::default());
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_second_open_is_busy_until_the_first_closes() {
    let root = temp_dir("lock");
    let first = Store::open(&root, Fsync::Never, false).unwrap();
    assert!(matches!(Store::open(&root, Fsync::Never, false), Err(Error::Busy(_))));
    drop(first);
    Store::open(&root, Fsync::Never, false).unwrap();
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_regular_file_as_data_dir_is_an_io_error_naming_it() {
    let root = temp_dir("file");
    fs::write(&root, b"not a directory").unwrap();
    match Store::open(&root, Fsync::Never, false).unwrap_err() {
        Error::Io { path, kind, .. } => {
            assert_eq!(path, root);
            assert_eq!(kind, IoKind::NotADirectory);
        }
        e => panic!("expected Io, got {e:?}"),
    }
    fs::remove_file(&root).unwrap();
}

#[test]
fn a_failed_topic_open_lists_nothing_and_leaves_no_directory() {
    let root = temp_dir("failed");
    let opened = Store::open(&root, Fsync::Never, false).unwrap();
    let e = opened.store.add_topic("t", &TopicOptions::default(), |_| Err::<(), _>(Error::Timeout)).unwrap_err();
    assert_eq!(e, Error::Timeout);
    assert!(!root.join("topics/0").exists());
    drop(opened);
    assert!(Store::open(&root, Fsync::Never, false).unwrap().topics.is_empty());
    fs::remove_dir_all(&root).unwrap();
}

/// Snapshots requested while none is being written are written once, as
/// the newest of them; every waiter returns after that one write.
#[test]
fn snapshots_requested_together_share_one_write_and_the_newest_wins() {
    let root = temp_dir("group");
    let opened = Store::open(&root, Fsync::Always, false).unwrap();
    let store = &opened.store;
    let tickets: Vec<Ticket> = (1..=5).map(|n| store.request(sample_offsets(n), n % 2 == 0)).collect();
    store.wait(tickets[0]).unwrap();
    assert_eq!(store.offsets_writes(), 1, "one write covers all five");
    for t in &tickets {
        store.wait(*t).unwrap();
    }
    assert_eq!(store.offsets_writes(), 1);
    // An unchanged snapshot is not written again.
    store.save_offsets(&sample_offsets(5), true).unwrap();
    assert_eq!(store.offsets_writes(), 1);
    drop(opened);
    assert_eq!(read_offsets(&root, false).unwrap().0, sample_offsets(5));
    fs::remove_dir_all(&root).unwrap();
}

/// While one write is in flight, requests still go through (nothing
/// waits for the fsync to take a number), and every request made
/// meanwhile is covered by the one next write.
#[test]
fn requests_go_through_while_a_write_is_in_flight_and_share_the_next() {
    let root = temp_dir("inflight");
    let opened = Store::open(&root, Fsync::Always, false).unwrap();
    let store = std::sync::Arc::new(opened.store);
    store.offsets.gate.close();
    let writer = {
        let store = store.clone();
        std::thread::spawn(move || store.save_offsets(&sample_offsets(1), true))
    };
    assert!(store.offsets.gate.wait_held(1, Duration::from_secs(30)), "the first write never started");
    let later: Vec<Ticket> = (2..=4).map(|n| store.request(sample_offsets(n), true)).collect();
    let waiters: Vec<_> = later
        .iter()
        .map(|&t| {
            let store = store.clone();
            std::thread::spawn(move || store.wait(t))
        })
        .collect();
    store.offsets.gate.open();
    writer.join().unwrap().unwrap();
    for w in waiters {
        w.join().unwrap().unwrap();
    }
    assert_eq!(store.offsets_writes(), 2, "the three later requests share the second write");
    assert_eq!(read_offsets(&root, false).unwrap().0, sample_offsets(4));
    // The two writes went to different slots: the older one still holds 1.
    let slots: Vec<u64> = OFFSETS_FILES
        .iter()
        .map(|name| {
            let (_, body) = read_frame(&root.join(name), VERSION).unwrap().unwrap();
            u64::from_le_bytes(body[..8].try_into().unwrap())
        })
        .collect();
    assert_eq!(slots.iter().copied().max(), Some(4));
    assert_eq!(slots.iter().copied().min(), Some(1));
    drop(store);
    fs::remove_dir_all(&root).unwrap();
}

/// A failed write fails every waiter it covered; a later request is
/// written afresh once the directory works again.
#[test]
fn a_failed_write_fails_its_waiters_and_the_next_request_retries() {
    let root = temp_dir("fail");
    let opened = Store::open(&root, Fsync::Always, false).unwrap();
    // A directory where the temporary file goes makes the write fail.
    fs::create_dir(root.join("offsets.1.tmp")).unwrap();
    let t = opened.store.request(sample_offsets(1), true);
    assert!(matches!(opened.store.wait(t), Err(Error::Io { .. })));
    assert!(matches!(opened.store.wait(t), Err(Error::Io { .. })), "the same answer when asked again");
    fs::remove_dir(root.join("offsets.1.tmp")).unwrap();
    opened.store.save_offsets(&sample_offsets(2), true).unwrap();
    drop(opened);
    assert_eq!(read_offsets(&root, false).unwrap().0, sample_offsets(2));
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_closed_directory_opens_again_while_a_forked_copy_of_its_lock_lives() {
    use std::os::fd::AsRawFd;
    let root = temp_dir("lock-copy");
    let opened = Store::open(&root, Fsync::Never, false).unwrap();
    // What a child forked by another thread holds until it execs: a copy
    // of the descriptor, on the same open file description as ours.
    // SAFETY: dup of a descriptor the store owns; the copy is closed below.
    let copy = unsafe { libc::dup(opened.store.lock.file().as_raw_fd()) };
    assert!(copy >= 0, "dup: {}", std::io::Error::last_os_error());
    drop(opened);
    let again = Store::open(&root, Fsync::Never, false);
    // SAFETY: closes the copy made above, which nothing else uses.
    unsafe { libc::close(copy) };
    again.expect("a closed broker's lock is let go even while a copy of its descriptor lives");
    let _ = fs::remove_dir_all(&root);
}

/// A directory number names one topic for good: when the topic with the
/// highest number is deleted and the list then compacts into a snapshot
/// (which lists only the topics left), a fresh read of the list (another
/// process's, or a reopen's) still hands out a number above every one
/// given before. It handed the deleted topic's number out again.
#[test]
fn a_deleted_topics_directory_number_is_never_given_again() {
    let root = temp_dir("next-dir");
    let opened = Store::open(&root, Fsync::Never, false).unwrap();
    set_compact_min(&opened.store, 2);
    add(&opened.store, "kept");
    let mut given = 0;
    // Runs of one to three creates, then their deletes, the highest
    // number first: a compaction at a later delete drops it from the list.
    for i in 0..40 {
        let names: Vec<String> = (0..=i % 3).map(|j| format!("churn/{i}/{j}")).collect();
        for name in &names {
            add(&opened.store, name);
        }
        given = given.max(opened.store.topics.lock().list.iter().map(|t| t.dir).max().unwrap());
        for name in names.iter().rev() {
            opened.store.unlist_topic(name).unwrap();
            let fresh = super::topics::read_topic_list(&root).unwrap();
            assert!(
                fresh.next_dir > given,
                "after deleting {name:?} (top dir {given}), a fresh read gives {}",
                fresh.next_dir
            );
        }
    }
    assert!(opened.store.topics.lock().generation > 3, "the list compacted along the way");
    drop(opened);
    let reopened = Store::open(&root, Fsync::Never, false).unwrap();
    assert!(reopened.store.topics.lock().next_dir > given);
    drop(reopened);
    fs::remove_dir_all(&root).unwrap();
}
