//! The broker's data directory: its lock, its topic list and its offsets.
//!
//! A broker opened with a `data_dir` keeps everything that must outlive the
//! process there. The messages themselves are the log layer's business (one
//! directory per partition, see `log/`); this file keeps the rest:
//!
//! ```text
//! data_dir/
//!   LOCK                 flock held while a broker has it open: LOCK_EX
//!                        (Exclusive), LOCK_SH (Processes)
//!   INIT                 flock(LOCK_EX) held while a Processes broker opens
//!   topics.lock          flock(LOCK_EX) held by a Processes broker while it
//!                        reads or changes the topic list
//!   SHARED               the doorbell word of Processes brokers (doorbell.rs)
//!   topics.list          the topics: name, options, directory number
//!   topics.journal       topics created and deleted since (see journal.rs)
//!   offsets.0, offsets.1 group commits and durable subscription positions
//!   topics/<n>/<p>/      partition p of the topic with directory number n
//!   topics/<n>.deleted/  a deleted topic's directory, being removed
//! ```
//!
//! Topic directories are numbered, not named after the topic: a topic name is
//! up to 255 bytes of UTF-8 with `/` in it, which no file name can hold.
//!
//! # Never half-written
//!
//! Every metadata file is one *frame*: a magic word, a format version, the
//! body's length, a CRC32C of the body, then the body. A frame that is short,
//! has the wrong magic or fails its CRC is damage, never data.
//!
//! **`topics.list`** is replaced atomically: the new frame goes to
//! `topics.list.tmp`, which is synced, renamed over `topics.list`, and the
//! directory is synced. A
//! crash before the rename leaves the old list (and a stray `.tmp`, ignored
//! and overwritten next time); after it, the new one. It is a snapshot: a
//! creation or deletion is *listed* by a synced entry appended to
//! `topics.journal`, and only every so often by a new snapshot (how the two
//! fit, and survive crashes, is in `journal.rs`). Creating a topic makes
//! its partition directories first and lists it second, so a crash in between
//! leaves an unlisted directory, which the next creation with that number
//! clears before using it. Listing always syncs, whatever the fsync policy.
//!
//! # Deleting a topic
//!
//! Unlisting is the commit point: the topic's removal is listed (as above),
//! and only then does the broker mark the topic deleted
//! and remove its directory, in two steps: rename `topics/<n>` to the
//! tombstone `topics/<n>.deleted`, then delete the tombstone. Publishers
//! that raced the delete, the background thread preparing segments ahead
//! and retention recycling segments into spares all name their files by
//! the old path, so after the rename they find no directory (and their
//! publishes report the deleted topic); nothing can add a file to the tree
//! being deleted. A crash leaves:
//!
//! * before the list is replaced: the old list, the directory whole: the
//!   topic is there;
//! * after it, before the rename: an unlisted `topics/<n>`;
//! * after the rename: a tombstone, perhaps partly deleted.
//!
//! In the last two the topic is gone: opening lists only what the list
//! names, and first removes every tombstone and every unlisted numbered
//! directory below the next directory number (`sweep_deleted`).
//!
//! **Offsets** change with every commit, and under `Never` and `Interval` a
//! commit does not wait for the disk. A file replaced by rename without a sync
//! can, after a *machine* crash, be found empty or partly written even though
//! the rename survived. So offsets alternate between two slots, `offsets.0`
//! and `offsets.1`, each replaced atomically as above, and each frame carries
//! a sequence number. Opening reads both and takes the valid one with the
//! higher number. A write can only damage the slot it is replacing, so the
//! other slot always holds the previous state: at worst a machine crash takes
//! offsets back by the commits of the last unsynced writes, which is what
//! `Interval` and `Never` allow (the page cache holds every write, so a
//! *process* crash loses nothing). Under `Always` each write syncs the file and
//! the directory before the commit returns. Both slots damaged is `Corrupt`
//! (with `repair`: start without offsets, and say so in the log).
//!
//! # Numbered snapshots, written outside the broker's lock (group commit)
//!
//! The offsets file holds the *whole* state, so a newer snapshot includes
//! every change an older one holds. The broker takes a snapshot under its
//! control mutex (so snapshots are numbered in the order of the changes they
//! contain) and hands it to [`Store::request`], which only numbers it and
//! keeps it as the *pending* snapshot, replacing an older pending one: the
//! newest wins. The caller lets go of the control mutex and then
//! [`Store::wait`]s for its number. The first waiter that finds no write in
//! flight becomes the writer: it takes the pending snapshot, writes it (and
//! syncs, if any request it covers asked for that) without holding any lock,
//! then publishes "written up to n" / "synced up to n" and wakes the others.
//! A waiter returns once a snapshot numbered at least its own is written (or
//! synced, if it asked for that). So subscribing, closing and other commits
//! never wait behind an fsync, and commits made while one write is in flight
//! all share the next write and its fsync.
//!
//! Slots alternate per *write*, not per number (numbers of snapshots that a
//! newer one replaced before they were written are never written), so the
//! slot a write replaces is always the older of the two.
//!
//! ## The hand-over, and the steps it needs
//!
//! The state (`Commits`) is behind one mutex and changes only under it; the
//! write itself runs outside it. So there is no memory ordering to get
//! wrong, but there are three steps without which the hand-over from one
//! writer to the next loses something. Each is named, left out by
//! `.ci/fence-check` in turn, and caught by the loom model
//! `group_commit_hands_over_without_losing_a_snapshot`
//! (`loom-tests/tests/store.rs`), which runs this code on a real directory
//! with two committers, one asking for a sync:
//!
//! * **G1, the wake.** A waiter that finds a write in flight sleeps on
//!   `written`. The writer, back under the lock, publishes "written (and
//!   synced) up to n" and then wakes every waiter, still under the lock, so
//!   a waiter either saw the new marks before it slept or was asleep when
//!   the wake came. Without it, a waiter whose snapshot the write covered
//!   (or that must write the next one) sleeps for ever.
//! * **G2, the gather keeps a sync.** A newer snapshot replaces the pending
//!   one and inherits its need to be synced. Without it, a waiter that
//!   asked for a sync finds its snapshot replaced by a newer one written
//!   unsynced, "synced" below its number, and nothing pending to write.
//! * **G3, one writer at a time.** A waiter that finds a write in flight
//!   does not write. Without it, it would: either the snapshot it needs is
//!   already in the other writer's hands and nothing is pending to take,
//!   or it takes a newer one, and since the slot a write replaces is chosen
//!   from the last write's slot when the snapshot is taken, both writers
//!   choose the same slot; if the older snapshot's rename landed last, a
//!   waiter of the newer one would have returned with the older on disk,
//!   its commit lost.
//!
//! # One broker per directory
//!
//! `LOCK` is created if missing and locked with `flock(LOCK_EX | LOCK_NB)`.
//! The lock belongs to the open file description, so a second broker on the
//! same directory fails with `Busy` whether it is in this process or another,
//! and the kernel drops the lock when the process dies, however it dies.
//!
//! # Several processes (issue 39)
//!
//! A broker opened with [`Sharing::Processes`] holds `LOCK` shared
//! (`LOCK_SH | LOCK_NB`), so any number of them hold it at once, and an
//! `Exclusive` opener (or one of them, while an `Exclusive` broker holds it)
//! gets `Busy`. The kernel drops every one of these locks when its process
//! dies, so a crashed process never keeps the directory from anyone.
//!
//! One of them must recover the partitions (cut torn tails, mark segments
//! complete) and the others must only map what it left: recovering under a
//! live publisher would cut its records. So openers take `INIT` exclusively
//! (blocking: an opener waits for the one before it to finish), and under it
//! try `LOCK` exclusively without blocking. Winning means no broker holds
//! the directory in any mode: this one is the *first opener*, recovers as an
//! `Exclusive` broker would (the topic list's journal, the logs, the offsets
//! reset) with `LOCK` still exclusive, and only when it has finished
//! ([`Store::opened`]) turns `LOCK` shared and lets go of `INIT`. Losing, it
//! takes `LOCK` shared (`Busy` if that fails too: an `Exclusive` broker has
//! it) and is a *joiner*: it reads the topic list and joins each partition's
//! files ([`Log::join`](crate::log::Log)) without recovering anything. An
//! `Exclusive` opener takes `INIT` too, without blocking (`Busy` if held), so
//! no one can take `LOCK` in the gap of the first opener's turn from
//! exclusive to shared (`flock` converts by unlocking first).
//!
//! The topic list is then written by several processes. Every reader or
//! writer of it in this mode holds `topics.lock` exclusively and reads the
//! list afresh under it ([`Store::with_topic_list`]): a creation lists its
//! topic (made whole first, as above) while holding it, so a reader sees the
//! topic listed with its files complete, or not at all, and never a journal
//! entry half appended (which it would take for a torn one and cut). What
//! is not shared yet, and so refused in this mode rather than written by two
//! processes at once, is in `core.rs` ("Several processes").

//! # Why this file is long
//!
//! The code is two things that change together: the snapshot protocol above, and the on-disk
//! formats it writes (frames, `topics.list`, the offsets copies, with their
//! readers and the checks recovery relies on); a format change without its
//! writer's and reader's change beside it is how a store loses data. The
//! format half (from `replace` down) is the cut to make if it grows.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind as IoKind, Read};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::atomic_file::{replace, sync_dir};
use super::journal::{COMPACT_MIN_ENTRIES, Change, JOURNAL_FILE, Journal};
use super::topic::TopicOptions;
use crate::error::{Error, Result};
use crate::log::{Fsync, Sharing};
use crate::sync::{Condvar, Mutex};

/// First bytes of every metadata frame.
const MAGIC: &[u8; 8] = b"rill-md\0";
/// Format of the frame and its bodies; a newer one is refused, not guessed at.
const VERSION: u32 = 1;
/// The format of `topics.list`: 2 puts the list's generation before the
/// topics (see `journal.rs`); 1, the topics alone, is still read. 3 appends
/// the options newer than format 2 to each topic (`dedupe_window_ms`,
/// `priority`; see [`encode_topic`]).
const TOPICS_VERSION: u32 = 3;
/// The first `topics.list` format whose topics hold the appended options.
const TOPICS_APPENDED_OPTIONS: u32 = 3;
/// Magic, version, body length (u64), CRC32C of the body (u32).
const FRAME_HEADER: usize = 8 + 4 + 8 + 4;
/// Name of the lock file.
const LOCK_FILE: &str = "LOCK";
/// Name of the file whose lock makes Processes openers take turns (see
/// "Several processes").
const INIT_FILE: &str = "INIT";
/// Name of the file whose lock guards the topic list in Processes mode.
const TOPICS_LOCK_FILE: &str = "topics.lock";
/// Name of the topic list.
const TOPICS_FILE: &str = "topics.list";
/// Names of the two offsets slots.
const OFFSETS_FILES: [&str; 2] = ["offsets.0", "offsets.1"];
/// Folder of the topic directories.
const TOPICS_DIR: &str = "topics";
/// Ends the name of a deleted topic's directory while it is being removed.
const TOMBSTONE_SUFFIX: &str = ".deleted";

/// A topic as the data directory lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TopicMeta {
    pub(crate) name: String,
    /// Its directory is `topics/<dir>`.
    pub(crate) dir: u64,
    pub(crate) options: TopicOptions,
}

/// Everything committed that is not a message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Offsets {
    /// (group, topic, committed offset per partition).
    pub(crate) groups: Vec<(String, String, Vec<Option<u64>>)>,
    /// (subscription name, its positions).
    pub(crate) durable: Vec<(String, Positions)>,
}

/// A durable subscription's positions: (topic, partition, next offset).
pub(crate) type Positions = Vec<(String, u32, u64)>;

/// What `Store::open` found.
#[derive(Debug)]
pub(crate) struct Opened {
    pub(crate) store: Store,
    pub(crate) topics: Vec<TopicMeta>,
    pub(crate) offsets: Offsets,
    /// False for a joiner of a directory other Processes brokers hold:
    /// it must join its partitions' logs, not recover them.
    pub(crate) first: bool,
}

/// An open data directory. Dropping it releases the lock.
#[derive(Debug)]
pub(crate) struct Store {
    root: PathBuf,
    fsync: Fsync,
    /// Holds the flock; closed (and so unlocked) on drop.
    lock: File,
    sharing: Sharing,
    /// Processes mode: `INIT`, held from the open until [`Store::opened`].
    init: Mutex<Option<File>>,
    /// The listed topics, the next directory number and the journal.
    topics: Mutex<TopicList>,
    /// The offsets snapshots: numbered, pending, written (see the module docs).
    commits: Mutex<Commits>,
    /// Wakes the waiters of [`Store::wait`] when a write ends.
    written: Condvar,
    /// Tests hold offsets writes here, to see what can run meanwhile.
    #[cfg(test)]
    pub(crate) gate: test_gate::Gate,
}

/// The topic list, behind `Store::topics`.
#[derive(Debug)]
struct TopicList {
    list: Vec<TopicMeta>,
    next_dir: u64,
    /// The generation of the snapshot in `topics.list`.
    generation: u64,
    /// The journal extending it; `None` if there is none to append to (the
    /// next change compacts).
    journal: Option<Journal>,
    /// How many topics the snapshot holds.
    snapshot_len: usize,
    /// Compact once the journal holds this many entries and more than the
    /// snapshot has topics (`COMPACT_MIN_ENTRIES`; tests lower it).
    compact_min: usize,
    /// Bytes written to list changes since opening (snapshots and entries).
    #[cfg(test)]
    bytes_listed: u64,
}

impl TopicList {
    /// Applies a change read back from the journal or just made.
    fn apply(&mut self, change: Change, path: &Path) -> Result<()> {
        apply_change(&mut self.list, &mut self.next_dir, change, path)
    }
}

/// Applies `change` to a topic list and its next directory number.
fn apply_change(list: &mut Vec<TopicMeta>, next_dir: &mut u64, change: Change, path: &Path) -> Result<()> {
    match change {
        Change::Add(meta) => {
            let mut r = Reader::new(path, &meta);
            let t = decode_topic(&mut r, Appended::IfAny)?;
            r.end()?;
            *next_dir = (*next_dir).max(t.dir + 1);
            list.push(t);
        }
        Change::Remove(name) => list.retain(|t| t.name != name),
    }
    Ok(())
}

/// The state of the offsets snapshots, behind `Store::commits`.
#[derive(Debug)]
struct Commits {
    /// The highest number handed out (the numbers continue those on disk).
    requested: u64,
    /// The newest snapshot not yet written.
    pending: Option<Pending>,
    /// Every snapshot numbered up to this is written (in the page cache).
    written: u64,
    /// Every snapshot numbered up to this is on stable storage.
    synced: u64,
    /// A writer is writing a snapshot (outside the lock).
    writing: bool,
    /// The slot (index in `OFFSETS_FILES`) the last write went to.
    last_slot: usize,
    /// The contents of the last write, and whether it was synced: a snapshot
    /// equal to it is not written again (unless it needs a sync it did not get).
    last: Option<(Offsets, bool)>,
    /// The last failed write: the highest number it covered, and why.
    failed: Option<(u64, Error)>,
    /// Writes made (for tests: how many commits shared one).
    writes: u64,
}

/// A snapshot waiting for its write.
#[derive(Debug)]
struct Pending {
    seq: u64,
    offsets: Offsets,
    /// Some request it covers wants it on stable storage.
    sync: bool,
}

/// A requested snapshot: wait for it with [`Store::wait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a snapshot is durable only once `Store::wait` returns"]
pub(crate) struct Ticket {
    seq: u64,
    sync: bool,
}

impl Store {
    /// Opens (creating if needed) and locks `root`, then reads its metadata.
    #[cfg(any(test, loom))]
    pub(crate) fn open(root: &Path, fsync: Fsync, repair: bool) -> Result<Opened> {
        Self::open_shared(root, fsync, repair, Sharing::Exclusive)
    }

    /// [`Store::open`] in `sharing` mode (see "Several processes").
    pub(crate) fn open_shared(root: &Path, fsync: Fsync, repair: bool, sharing: Sharing) -> Result<Opened> {
        if let Ok(m) = fs::metadata(root)
            && !m.is_dir()
        {
            return Err(Error::Io {
                path: root.to_owned(),
                kind: IoKind::NotADirectory,
                message: "the data directory is not a directory".into(),
            });
        }
        fs::create_dir_all(root.join(TOPICS_DIR)).map_err(|e| Error::io(root, &e))?;
        let (lock, init, first) = lock_dir(root, sharing)?;
        let list = match sharing {
            Sharing::Exclusive => read_topic_list(root)?,
            Sharing::Processes => {
                let _guard = lock_topic_list(root)?;
                read_topic_list(root)?
            }
        };
        let topics = list.list.clone();
        let (offsets, seq, slot) = read_offsets(root, repair)?;
        if first {
            // A joiner leaves them: another process may be creating one.
            sweep_deleted(&root.join(TOPICS_DIR), &topics, list.next_dir);
        }
        let store = Store {
            root: root.to_owned(),
            fsync,
            lock,
            sharing,
            init: Mutex::new(init),
            topics: Mutex::new(list),
            commits: Mutex::new(Commits {
                requested: seq,
                pending: None,
                written: seq,
                synced: seq,
                writing: false,
                last_slot: slot,
                last: Some((offsets.clone(), true)),
                failed: None,
                writes: 0,
            }),
            written: Condvar::new(),
            #[cfg(test)]
            gate: test_gate::Gate::default(),
        };
        Ok(Opened { store, topics, offsets, first })
    }

    /// Ends a Processes broker's open (see "Several processes"): the first
    /// opener, done recovering, turns `LOCK` from exclusive to shared; then
    /// `INIT` goes, letting the next opener in. Nothing in `Exclusive` mode.
    pub(crate) fn opened(&self) -> Result<()> {
        let Some(init) = self.init.lock().take() else { return Ok(()) };
        // Converting a lock this descriptor holds: with INIT held no other
        // opener can take LOCK meanwhile, so this does not fail for that.
        // SAFETY: flock on a descriptor we own, with constant flags; it touches no memory.
        let converted = unsafe { libc::flock(self.lock.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0;
        let e = std::io::Error::last_os_error();
        drop(init);
        if !converted {
            return Err(Error::io(self.root.join(LOCK_FILE), &e));
        }
        Ok(())
    }

    /// How this directory is shared.
    pub(crate) fn sharing(&self) -> Sharing {
        self.sharing
    }

    /// Processes mode: runs `f` holding `topics.lock`, with the topic list
    /// read afresh from the directory (other processes may have changed it
    /// since; see "Several processes"). `f` may list a topic with
    /// [`Store::add_topic`], whose lock of the list it already has.
    pub(crate) fn with_topic_list<T>(&self, f: impl FnOnce(&[TopicMeta]) -> Result<T>) -> Result<T> {
        let _guard = lock_topic_list(&self.root)?;
        let list = {
            let mut topics = self.topics.lock();
            let fresh = read_topic_list(&self.root)?;
            topics.list = fresh.list;
            topics.next_dir = fresh.next_dir;
            topics.generation = fresh.generation;
            topics.journal = fresh.journal;
            topics.snapshot_len = fresh.snapshot_len;
            topics.list.clone()
        };
        // The flock goes with `_guard` when `f` returns.
        f(&list)
    }

    /// The directory of partition `partition` of the topic in `topics/<dir>`.
    pub(crate) fn partition_dir(&self, dir: u64, partition: u32) -> PathBuf {
        self.topic_dir(dir).join(partition.to_string())
    }

    fn topic_dir(&self, dir: u64) -> PathBuf {
        self.root.join(TOPICS_DIR).join(dir.to_string())
    }

    /// Adds a topic: gives it a fresh, empty directory, lets `open` fill it
    /// (the partition logs), then lists it. If `open` fails nothing is listed
    /// and the directory goes again.
    pub(crate) fn add_topic<T>(
        &self,
        name: &str,
        options: &TopicOptions,
        open: impl FnOnce(&dyn Fn(u32) -> PathBuf) -> Result<T>,
    ) -> Result<T> {
        let mut topics = self.topics.lock();
        let dir = topics.next_dir;
        let path = self.topic_dir(dir);
        // A directory left by a creation that crashed before listing it.
        match fs::remove_dir_all(&path) {
            Err(e) if e.kind() != IoKind::NotFound => return Err(Error::io(&path, &e)),
            _ => {}
        }
        fs::create_dir_all(&path).map_err(|e| Error::io(&path, &e))?;
        let opened = open(&|p| self.partition_dir(dir, p));
        let listed = opened.and_then(|t| {
            let meta = TopicMeta { name: name.to_owned(), dir, options: options.clone() };
            let mut w = Writer::default();
            encode_topic(&mut w, &meta);
            self.list_change(&mut topics, Change::Add(w.0))?;
            Ok(t)
        });
        if listed.is_err() {
            let _ = fs::remove_dir_all(&path);
        }
        listed
    }

    /// Replaces (or, with `None`, removes) the small file `file` in the
    /// directory of the listed topic `name` (a topic's schema, see
    /// `schema.rs`), whole: a crash leaves the old file or the new one. A
    /// directory written by a rill without such files reads as having none.
    /// Nothing happens for a topic that is not listed.
    pub(crate) fn save_topic_file(&self, name: &str, file: &str, bytes: Option<&[u8]>) -> Result<()> {
        // Under the list's lock, so a delete of the topic cannot move its
        // directory away meanwhile.
        let topics = self.topics.lock();
        let Some(dir) = topics.list.iter().find(|t| t.name == name).map(|t| t.dir) else { return Ok(()) };
        let path = self.topic_dir(dir);
        let sync = !matches!(self.fsync, Fsync::Never);
        match bytes {
            Some(bytes) => replace(&path, file, bytes, sync),
            None => match fs::remove_file(path.join(file)) {
                Ok(()) if sync => sync_dir(&path),
                Err(e) if e.kind() != IoKind::NotFound => Err(Error::io(path.join(file), &e)),
                _ => Ok(()),
            },
        }
    }

    /// The file `file` of the topic in `topics/<dir>`, if there is one.
    pub(crate) fn read_topic_file(&self, dir: u64, file: &str) -> Result<Option<Vec<u8>>> {
        let path = self.topic_dir(dir).join(file);
        match fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == IoKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(&path, &e)),
        }
    }

    /// Every listed topic's name and options.
    pub(crate) fn topic_options(&self) -> Vec<(String, TopicOptions)> {
        self.topics.lock().list.iter().map(|t| (t.name.clone(), t.options.clone())).collect()
    }

    /// Unlists a topic: the commit point of its deletion (see "Deleting a
    /// topic" in the module docs). Returns its directory number, for
    /// [`Store::remove_topic_dir`]; `None` if it was not listed.
    pub(crate) fn unlist_topic(&self, name: &str) -> Result<Option<u64>> {
        let mut topics = self.topics.lock();
        let Some(dir) = topics.list.iter().find(|t| t.name == name).map(|t| t.dir) else { return Ok(None) };
        self.list_change(&mut topics, Change::Remove(name.to_owned()))?;
        Ok(Some(dir))
    }

    /// Removes the directory of an unlisted topic: renames it to its
    /// tombstone, then deletes the tombstone. Its logs may still be mapped
    /// by readers (the files go when they let go), and late publishers and
    /// the log's own threads may still try to make or rename files under
    /// the old path: after the rename they find no directory there, so
    /// nothing lands in the tree being deleted. Whatever is left after a
    /// failure (or a crash) is a tombstone, which the next open deletes.
    pub(crate) fn remove_topic_dir(&self, dir: u64) -> Result<()> {
        let path = self.topic_dir(dir);
        let tomb = self.root.join(TOPICS_DIR).join(tombstone_name(dir));
        match fs::rename(&path, &tomb) {
            Ok(()) => {}
            // A creation that crashed before listing it, or a repeat.
            Err(e) if e.kind() == IoKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(&path, &e)),
        }
        fs::remove_dir_all(&tomb).map_err(|e| Error::io(&tomb, &e))
    }

    /// Unlists a topic and deletes its directory (see [`Store::unlist_topic`]
    /// and [`Store::remove_topic_dir`]).
    pub(crate) fn remove_topic(&self, name: &str) -> Result<()> {
        match self.unlist_topic(name)? {
            Some(dir) => self.remove_topic_dir(dir),
            None => Ok(()),
        }
    }

    /// Lists `change` durably, then applies it to `topics`: appended to the
    /// journal, or, when the journal is due for compaction (or there is
    /// none), in a new snapshot that includes it (see `journal.rs`). On
    /// failure nothing is listed and `topics` is unchanged.
    fn list_change(&self, topics: &mut TopicList, change: Change) -> Result<()> {
        let path = self.root.join(JOURNAL_FILE);
        let due = topics.journal.as_ref().is_none_or(|j| {
            j.generation() != topics.generation
                || (j.entries() >= topics.compact_min && j.entries() > topics.snapshot_len)
        });
        if !due {
            let journal = topics.journal.as_mut().expect("checked above");
            #[cfg(test)]
            let before = journal.len();
            match journal.append(&change) {
                Ok(()) => {
                    #[cfg(test)]
                    {
                        topics.bytes_listed += journal.len() - before;
                    }
                    return topics.apply(change, &path);
                }
                Err((e, cut)) => {
                    if !cut {
                        // It may end in a partial entry: never append after it.
                        topics.journal = None;
                    }
                    return Err(e);
                }
            }
        }
        let (mut list, mut next_dir) = (topics.list.clone(), topics.next_dir);
        apply_change(&mut list, &mut next_dir, change, &path)?;
        let generation = topics.generation + 1;
        let snapshot = frame_of(TOPICS_VERSION, &encode_topics(generation, &list));
        // The commit point: the new snapshot, replaced and synced.
        replace(&self.root, TOPICS_FILE, &snapshot, true)?;
        #[cfg(test)]
        {
            topics.bytes_listed += snapshot.len() as u64;
        }
        topics.snapshot_len = list.len();
        topics.list = list;
        topics.next_dir = next_dir;
        topics.generation = generation;
        // A journal that cannot be started leaves the old one, of an older
        // generation, which opening ignores; the next change compacts again.
        topics.journal = match Journal::start(&self.root, topics.generation) {
            Ok(j) => Some(j),
            Err(e) => {
                log::warn!("rill: could not start a new topic journal ({e}); the next topic change rewrites the list");
                None
            }
        };
        Ok(())
    }

    /// Writes the offsets into the older slot and returns once they are
    /// written (and synced, if `sync`): [`Store::request`] then [`Store::wait`].
    #[cfg(test)]
    pub(crate) fn save_offsets(&self, offsets: &Offsets, sync: bool) -> Result<()> {
        self.wait(self.request(offsets.clone(), sync))
    }

    /// Numbers `offsets` (the whole state, newer than any snapshot requested
    /// before) and keeps it as the one to write next; cheap, so the broker
    /// calls it under its control mutex. `sync`: its waiter wants it on
    /// stable storage, not only written.
    pub(crate) fn request(&self, offsets: Offsets, sync: bool) -> Ticket {
        let mut c = self.commits.lock();
        c.requested += 1;
        let seq = c.requested;
        // A pending snapshot not yet written is older: this one replaces it
        // (it holds all it holds), and inherits its need to be synced.
        // (G2 in the module docs.)
        let sync_all = sync || (crate::sync::step_kept!("G2") && c.pending.as_ref().is_some_and(|p| p.sync));
        c.pending = Some(Pending { seq, offsets, sync: sync_all });
        Ticket { seq, sync }
    }

    /// Returns once the snapshot of `ticket`, or a newer one, is written
    /// (synced, if it asked for that), writing it itself if no other caller
    /// is writing (see the module docs); the error of the write that covered
    /// it if that failed.
    pub(crate) fn wait(&self, ticket: Ticket) -> Result<()> {
        let mut c = self.commits.lock();
        loop {
            let done = if ticket.sync { c.synced } else { c.written };
            if done >= ticket.seq {
                return Ok(());
            }
            if let Some((seq, e)) = &c.failed
                && *seq >= ticket.seq
            {
                return Err(e.clone());
            }
            // One writer at a time (G3 in the module docs).
            if c.writing && crate::sync::step_kept!("G3") {
                c = self.written.wait(c);
                continue;
            }
            // Not written, no write in flight: the pending snapshot is this
            // ticket's or a newer one (only a write takes it away).
            let p = c.pending.take().expect("an unwritten snapshot is pending");
            let unchanged = c.last.as_ref().is_some_and(|(o, synced)| *o == p.offsets && (*synced || !p.sync));
            let slot = 1 - c.last_slot;
            c.writing = true;
            drop(c);
            let result = if unchanged { Ok(false) } else { self.write_offsets(slot, &p).map(|()| true) };
            c = self.commits.lock();
            c.writing = false;
            match result {
                Ok(wrote) => {
                    c.written = c.written.max(p.seq);
                    if p.sync || c.last.as_ref().is_some_and(|(_, synced)| *synced && unchanged) {
                        c.synced = c.synced.max(p.seq);
                    }
                    if wrote {
                        c.writes += 1;
                        c.last_slot = slot;
                        c.last = Some((p.offsets, p.sync));
                    }
                }
                Err(e) => c.failed = Some((p.seq, e)),
            }
            // Under the lock, after the marks (G1 in the module docs).
            if crate::sync::step_kept!("G1") {
                self.written.notify_all();
            }
        }
    }

    /// Writes snapshot `p` into `slot` (the one not holding the last write).
    fn write_offsets(&self, slot: usize, p: &Pending) -> Result<()> {
        #[cfg(test)]
        self.gate.pass();
        let mut body = Writer::default();
        body.u64(p.seq);
        encode_offsets(&mut body, &p.offsets);
        replace(&self.root, OFFSETS_FILES[slot], &frame(&body.0), p.sync)
    }

    /// How many offsets snapshots were written since the store was opened.
    #[cfg(test)]
    pub(crate) fn offsets_writes(&self) -> u64 {
        self.commits.lock().writes
    }

    /// The sync policy.
    pub(crate) fn fsync(&self) -> Fsync {
        self.fsync
    }

    /// The data directory.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// Whether a commit must reach the disk before it returns.
    pub(crate) fn sync_commits(&self) -> bool {
        self.fsync == Fsync::Always
    }
}

/// Replaces `dir/name` with `bytes` atomically (see the module docs).
/// The name a deleted topic's directory `topics/<dir>` is renamed to
/// before it is removed (see "Deleting a topic" in the module docs).
fn tombstone_name(dir: u64) -> String {
    format!("{dir}{TOMBSTONE_SUFFIX}")
}

/// The topic list as the directory holds it: the snapshot in `topics.list`
/// and the journal's changes since.
fn read_topic_list(root: &Path) -> Result<TopicList> {
    let list_path = root.join(TOPICS_FILE);
    let (generation, topics) = match read_frame(&list_path, TOPICS_VERSION)? {
        Some((version, body)) => decode_topics(&list_path, version, &body)?,
        None => (0, Vec::new()),
    };
    let found = Journal::open(root, generation)?;
    let mut list = TopicList {
        next_dir: topics.iter().map(|t| t.dir + 1).max().unwrap_or(0),
        snapshot_len: topics.len(),
        list: topics,
        generation,
        journal: found.journal,
        compact_min: COMPACT_MIN_ENTRIES,
        #[cfg(test)]
        bytes_listed: 0,
    };
    let journal_path = root.join(JOURNAL_FILE);
    for change in found.changes {
        list.apply(change, &journal_path)?;
    }
    Ok(list)
}

/// Opens (creating if missing) a lock file.
fn open_lock_file(path: &Path) -> Result<File> {
    OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).map_err(|e| Error::io(path, &e))
}

/// `flock(fd, op)`: `Ok(false)` if `LOCK_NB` was asked for and the lock is
/// held elsewhere.
fn flock(file: &File, path: &Path, op: libc::c_int) -> Result<bool> {
    // SAFETY: flock on a descriptor we own, with constant flags; it touches no memory.
    if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.kind() == IoKind::WouldBlock {
        return Ok(false);
    }
    Err(Error::io(path, &e))
}

/// Takes the directory's locks for an opener in `sharing` mode (see "One
/// broker per directory" and "Several processes"): the locked `LOCK`, the
/// held `INIT` of a Processes opener (let go in [`Store::opened`]), and
/// whether this opener is the first.
fn lock_dir(root: &Path, sharing: Sharing) -> Result<(File, Option<File>, bool)> {
    let busy = || Error::Busy(format!("the data directory {root:?} is open in another broker"));
    let (lock_path, init_path) = (root.join(LOCK_FILE), root.join(INIT_FILE));
    let init = open_lock_file(&init_path)?;
    let lock = open_lock_file(&lock_path)?;
    match sharing {
        Sharing::Exclusive => {
            // INIT too, so no one takes LOCK in a first opener's turn from
            // exclusive to shared; let go at once (`init` drops).
            if !flock(&init, &init_path, libc::LOCK_EX | libc::LOCK_NB)? {
                return Err(busy());
            }
            if !flock(&lock, &lock_path, libc::LOCK_EX | libc::LOCK_NB)? {
                return Err(busy());
            }
            Ok((lock, None, true))
        }
        Sharing::Processes => {
            // Blocking: the opener before this one is recovering or joining.
            flock(&init, &init_path, libc::LOCK_EX)?;
            if flock(&lock, &lock_path, libc::LOCK_EX | libc::LOCK_NB)? {
                return Ok((lock, Some(init), true));
            }
            if !flock(&lock, &lock_path, libc::LOCK_SH | libc::LOCK_NB)? {
                return Err(busy());
            }
            Ok((lock, Some(init), false))
        }
    }
}

/// Holds `topics.lock` exclusively while alive (Processes mode).
fn lock_topic_list(root: &Path) -> Result<File> {
    let path = root.join(TOPICS_LOCK_FILE);
    let file = open_lock_file(&path)?;
    flock(&file, &path, libc::LOCK_EX)?;
    Ok(file)
}

/// Removes, under `topics/` (at open, before any topic is opened), what
/// deletions left: every tombstone, and every numbered directory below
/// `next_dir` that no listed topic has (unlisted, its removal cut short).
/// A numbered directory at or above `next_dir` is one a creation left
/// before listing it; the next creation clears it. Failures are logged and
/// left for the next open: nothing reads these directories.
fn sweep_deleted(topics_dir: &Path, listed: &[TopicMeta], next_dir: u64) {
    let Ok(entries) = fs::read_dir(topics_dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let leftover = match name.strip_suffix(TOMBSTONE_SUFFIX) {
            Some(n) => n.parse::<u64>().is_ok(),
            None => name.parse::<u64>().is_ok_and(|n| n < next_dir && !listed.iter().any(|t| t.dir == n)),
        };
        if !leftover {
            continue;
        }
        let path = entry.path();
        match fs::remove_dir_all(&path) {
            Ok(()) => log::info!("rill: removed {} left by a topic deletion", path.display()),
            Err(e) => log::warn!("rill: could not remove {} left by a topic deletion: {e}", path.display()),
        }
    }
}

/// A frame around `body` (see the module docs), of format `VERSION`.
fn frame(body: &[u8]) -> Vec<u8> {
    frame_of(VERSION, body)
}

/// A frame around `body` of format `version`.
fn frame_of(version: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// Reads the frame in `path`: `None` if there is no such file, the version
/// (1 to `newest`) and body if it is whole, `Corrupt` if it is not.
fn read_frame(path: &Path, newest: u32) -> Result<Option<(u32, Vec<u8>)>> {
    let mut bytes = Vec::new();
    match File::open(path).and_then(|mut f| f.read_to_end(&mut bytes)) {
        Ok(_) => {}
        Err(e) if e.kind() == IoKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, &e)),
    }
    let corrupt = |offset: u64, reason: &str| Error::Corrupt { file: path.to_owned(), offset, reason: reason.into() };
    if bytes.len() < FRAME_HEADER {
        return Err(corrupt(0, "shorter than a metadata header"));
    }
    if &bytes[..8] != MAGIC {
        return Err(corrupt(0, "not a rill metadata file"));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if !(1..=newest).contains(&version) {
        return Err(corrupt(8, &format!("metadata format {version}, this rill reads 1 to {newest}")));
    }
    let len = u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(bytes[20..24].try_into().expect("4 bytes"));
    let body = &bytes[FRAME_HEADER..];
    if body.len() as u64 != len {
        return Err(corrupt(FRAME_HEADER as u64, "the body is not as long as its header says"));
    }
    if crc32c::crc32c(body) != crc {
        return Err(corrupt(FRAME_HEADER as u64, "the body fails its CRC"));
    }
    Ok(Some((version, body.to_vec())))
}

/// The newest valid offsets slot: its contents, sequence number and index
/// (with no valid slot, index 0, so the first write goes to slot 1, as the
/// number 1's parity said in the first format's writer).
pub(crate) fn read_offsets(root: &Path, repair: bool) -> Result<(Offsets, u64, usize)> {
    let mut best: Option<(u64, Offsets, usize)> = None;
    let mut damage = Vec::new();
    for (slot, name) in OFFSETS_FILES.into_iter().enumerate() {
        let path = root.join(name);
        let decoded = read_frame(&path, VERSION).and_then(|frame| {
            frame
                .map(|(_, body)| {
                    let mut r = Reader::new(&path, &body);
                    let seq = r.u64()?;
                    Ok((seq, decode_offsets(&mut r)?))
                })
                .transpose()
        });
        match decoded {
            Ok(Some((seq, offsets))) if best.as_ref().is_none_or(|(s, ..)| seq > *s) => {
                best = Some((seq, offsets, slot))
            }
            Ok(_) => {}
            Err(e @ Error::Corrupt { .. }) => damage.push(e),
            Err(e) => return Err(e),
        }
    }
    match (best, damage.len()) {
        (Some((seq, offsets, slot)), n) => {
            if n > 0 {
                // The slot a crash interrupted; the other holds the state before it.
                log::warn!("rill: ignoring a damaged offsets slot ({}); using the other one", damage[0]);
            }
            Ok((offsets, seq, slot))
        }
        (None, 0) => Ok((Offsets::default(), 0, 0)),
        (None, _) if repair => {
            log::warn!("rill: both offsets slots are damaged ({}); repair: starting without offsets", damage[0]);
            Ok((Offsets::default(), 0, 0))
        }
        (None, _) => Err(damage.swap_remove(0)),
    }
}

/// A `topics.list` body of format `TOPICS_VERSION`.
fn encode_topics(generation: u64, list: &[TopicMeta]) -> Vec<u8> {
    let mut w = Writer::default();
    w.u64(generation);
    w.u32(list.len() as u32);
    for t in list {
        encode_topic(&mut w, t);
    }
    w.0
}

/// One topic, as the list and the journal hold it.
fn encode_topic(w: &mut Writer, t: &TopicMeta) {
    encode_topic_before_appended(w, t);
    let o = &t.options;
    // Appended options: read from `topics.list` of format
    // TOPICS_APPENDED_OPTIONS and later, and from journal entries that go on
    // past the fields above; missing, they take their defaults.
    w.u64(o.dedupe_window_ms);
    w.opt(o.priority.map(u64::from));
}

/// One topic's fields of list format 2 (and of journal entries without
/// the appended options).
fn encode_topic_before_appended(w: &mut Writer, t: &TopicMeta) {
    w.str(&t.name);
    w.u64(t.dir);
    let o = &t.options;
    w.u32(o.partitions);
    w.opt(o.retention_bytes);
    w.opt(o.retention_messages);
    w.opt(o.segment_bytes.map(|n| n as u64));
    w.opt(o.max_message_bytes.map(|n| n as u64));
    w.opt(o.retention_ms);
}

/// A `topics.list` body of format `version`: its generation (0 for
/// format 1, which had none) and topics.
fn decode_topics(path: &Path, version: u32, body: &[u8]) -> Result<(u64, Vec<TopicMeta>)> {
    let mut r = Reader::new(path, body);
    let generation = if version >= 2 { r.u64()? } else { 0 };
    let n = r.u32()?;
    let mut list = Vec::new();
    for _ in 0..n {
        list.push(decode_topic(&mut r, version >= TOPICS_APPENDED_OPTIONS)?);
    }
    r.end()?;
    Ok((generation, list))
}

/// Whether a topic's encoding holds the options [`encode_topic`] appends.
#[derive(Debug, Clone, Copy)]
enum Appended {
    /// It does not (`topics.list` before format `TOPICS_APPENDED_OPTIONS`).
    No,
    /// It does (`topics.list` of that format or later).
    Yes,
    /// It does if bytes follow the older fields (a journal entry, one topic
    /// alone, written by a rill with or without them).
    IfAny,
}

impl From<bool> for Appended {
    fn from(yes: bool) -> Appended {
        if yes { Appended::Yes } else { Appended::No }
    }
}

/// Reads what [`encode_topic`] wrote; a journal entry must hold exactly one.
/// Options missing from an older encoding take their defaults.
fn decode_topic(r: &mut Reader<'_>, appended: impl Into<Appended>) -> Result<TopicMeta> {
    let name = r.str()?;
    let dir = r.u64()?;
    let mut options = TopicOptions {
        partitions: r.u32()?,
        retention_bytes: r.opt()?,
        retention_messages: r.opt()?,
        segment_bytes: r.opt()?.map(|n| n as usize),
        max_message_bytes: r.opt()?.map(|n| n as usize),
        retention_ms: r.opt()?,
        // A data directory's topics are not compacted (see `Cleanup`).
        ..TopicOptions::default()
    };
    let appended = match appended.into() {
        Appended::IfAny => r.at < r.bytes.len(),
        Appended::Yes => true,
        Appended::No => false,
    };
    if appended {
        options.dedupe_window_ms = r.u64()?;
        options.priority = match r.opt()? {
            None => None,
            Some(p) if p < u64::from(crate::broker::dispatch::PRIORITIES) => Some(p as u8),
            Some(_) => return Err(r.corrupt("a topic priority out of range")),
        };
    }
    Ok(TopicMeta { name, dir, options })
}

fn encode_offsets(w: &mut Writer, o: &Offsets) {
    w.u32(o.groups.len() as u32);
    for (group, topic, committed) in &o.groups {
        w.str(group);
        w.str(topic);
        w.u32(committed.len() as u32);
        for c in committed {
            w.opt(*c);
        }
    }
    w.u32(o.durable.len() as u32);
    for (name, positions) in &o.durable {
        w.str(name);
        w.u32(positions.len() as u32);
        for (topic, partition, offset) in positions {
            w.str(topic);
            w.u32(*partition);
            w.u64(*offset);
        }
    }
}

fn decode_offsets(r: &mut Reader<'_>) -> Result<Offsets> {
    let mut o = Offsets::default();
    for _ in 0..r.u32()? {
        let (group, topic) = (r.str()?, r.str()?);
        let n = r.u32()?;
        let committed = (0..n).map(|_| r.opt()).collect::<Result<Vec<_>>>()?;
        o.groups.push((group, topic, committed));
    }
    for _ in 0..r.u32()? {
        let name = r.str()?;
        let n = r.u32()?;
        let positions = (0..n).map(|_| Ok((r.str()?, r.u32()?, r.u64()?))).collect::<Result<Vec<_>>>()?;
        o.durable.push((name, positions));
    }
    r.end()?;
    Ok(o)
}

/// Little-endian fields, strings as a u32 length and their bytes.
#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.0.extend_from_slice(s.as_bytes());
    }
    /// A presence byte, then the value if present.
    fn opt(&mut self, v: Option<u64>) {
        self.0.push(v.is_some() as u8);
        if let Some(v) = v {
            self.u64(v);
        }
    }
}

/// Reads what [`Writer`] wrote; running short or a bad value is `Corrupt`
/// (a frame that passed its CRC but does not decode was written by a bug or
/// a different program: refused, not guessed at).
struct Reader<'a> {
    path: &'a Path,
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(path: &'a Path, bytes: &'a [u8]) -> Self {
        Reader { path, bytes, at: 0 }
    }
    fn corrupt(&self, reason: &str) -> Error {
        Error::Corrupt { file: self.path.to_owned(), offset: (FRAME_HEADER + self.at) as u64, reason: reason.into() }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.bytes.len() - self.at < n {
            return Err(self.corrupt("the metadata ends inside a field"));
        }
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn str(&mut self) -> Result<String> {
        let n = self.u32()? as usize;
        let bytes = self.take(n)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| self.corrupt("a name is not UTF-8"))
    }
    fn opt(&mut self) -> Result<Option<u64>> {
        match self.take(1)?[0] {
            0 => Ok(None),
            1 => self.u64().map(Some),
            _ => Err(self.corrupt("a presence byte is neither 0 nor 1")),
        }
    }
    fn end(&self) -> Result<()> {
        if self.at == self.bytes.len() { Ok(()) } else { Err(self.corrupt("trailing bytes after the metadata")) }
    }
}

/// A test seam: holds offsets writes while closed, and counts the writers
/// waiting at it, so a test can wait for "a write is in flight" on a
/// condition rather than a sleep.
#[cfg(test)]
pub(crate) mod test_gate {
    use crate::sync::{Condvar, Mutex};

    #[derive(Debug, Default)]
    pub(crate) struct Gate {
        /// (closed, writers held).
        state: Mutex<(bool, usize)>,
        changed: Condvar,
    }

    impl Gate {
        pub(crate) fn close(&self) {
            self.state.lock().0 = true;
        }

        pub(crate) fn open(&self) {
            self.state.lock().0 = false;
            self.changed.notify_all();
        }

        /// Waits (at most `limit`) until `n` writers are held; true if they are.
        pub(crate) fn wait_held(&self, n: usize, limit: std::time::Duration) -> bool {
            let deadline = std::time::Instant::now() + limit;
            let mut s = self.state.lock();
            while s.1 < n {
                let now = std::time::Instant::now();
                if now >= deadline {
                    return false;
                }
                s = self.changed.wait_timeout(s, deadline - now);
            }
            true
        }

        pub(crate) fn pass(&self) {
            let mut s = self.state.lock();
            if !s.0 {
                return;
            }
            s.1 += 1;
            self.changed.notify_all();
            while s.0 {
                s = self.changed.wait(s);
            }
            s.1 -= 1;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::time::Duration;

    fn temp_dir(tag: &str) -> PathBuf {
        let p =
            std::env::temp_dir().join(format!("rill-store-{tag}-{}-{}", std::process::id(), crate::sync::unique_id()));
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
    /// next open keeps (see "Deleting a topic" in the module docs).
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
        let options = TopicOptions {
            partitions: 3,
            retention_messages: Some(7),
            dedupe_window_ms: 5_000,
            ..TopicOptions::default()
        };
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
        store.gate.close();
        let writer = {
            let store = store.clone();
            std::thread::spawn(move || store.save_offsets(&sample_offsets(1), true))
        };
        assert!(store.gate.wait_held(1, Duration::from_secs(30)), "the first write never started");
        let later: Vec<Ticket> = (2..=4).map(|n| store.request(sample_offsets(n), true)).collect();
        let waiters: Vec<_> = later
            .iter()
            .map(|&t| {
                let store = store.clone();
                std::thread::spawn(move || store.wait(t))
            })
            .collect();
        store.gate.open();
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
}
