//! The broker's data directory: its lock, its topic list and its offsets.
//!
//! A broker opened with a `data_dir` keeps everything that must outlive the
//! process there. The messages themselves are the log layer's business (one
//! directory per partition, see `log/`); this folder keeps the rest:
//!
//! ```text
//! data_dir/
//!   LOCK                 flock held while a broker has it open: LOCK_EX
//!                        (Exclusive), LOCK_SH (Processes)
//!   INIT                 flock(LOCK_EX) held while a Processes broker opens
//!   topics.lock          flock(LOCK_EX) held by a Processes broker while it
//!                        reads or changes the topic list
//!   SHARED               the doorbell word of Processes brokers, and the
//!                        topic list's change counter (doorbell.rs)
//!   maps.lock            OFD locks, a byte per segment file (its inode),
//!                        read-locked by each Processes broker that maps
//!                        the file (log/file/map_locks.rs)
//!   topics.list          the topics: name, options, directory number
//!   topics.journal       topics created and deleted since (see journal.rs)
//!   topics.next          the next directory number, written before each
//!                        snapshot of the list (numbers only grow; see
//!                        `TopicList::next_dir` in topics.rs)
//!   offsets.0, offsets.1 group commits and durable subscription positions
//!                        (Exclusive)
//!   named/<key>.lock     flock(LOCK_EX) held by the one process whose
//!                        durable subscription has that name (Processes)
//!   named/<key>.0, .1    that name's positions (Processes; see named.rs)
//!   groups/<key>/        a consumer group's members, partition locks and
//!                        committed offsets (Processes; see membership.rs)
//!   subscribers/         each live broker's subscriptions and their
//!                        counters (Processes; see registry.rs)
//!   topics/<n>/<p>/      partition p of the topic with directory number n
//!                        (its segment files; `<i>.free`: a trimmed file
//!                        kept for reuse across processes, see
//!                        "Recycling across processes" in log/file/mod.rs)
//!   topics/<n>/schema    its JSON schema, if it has one, and
//!   topics/<n>/schema.version  the version of the last change that left
//!                        it none (see `schema.rs`)
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
//! How a commit of offsets reaches a slot (numbered snapshots, written
//! outside the broker's lock, several commits sharing one write and its
//! fsync) is the essay in `offsets.rs`, with the steps of its hand-over
//! from one writer to the next (G1 to G3).
//!
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
//! files ([`Log::join_with`](crate::log::Log)) without recovering anything. An
//! `Exclusive` opener takes `INIT` too, without blocking (`Busy` if held), so
//! no one can take `LOCK` in the gap of the first opener's turn from
//! exclusive to shared (`flock` converts by unlocking first).
//!
//! The topic list is then written by several processes. Every reader or
//! writer of it in this mode holds `topics.lock` exclusively and reads the
//! list afresh under it ([`Store::with_topic_list`]): a creation lists its
//! topic (made whole first, as above) while holding it, so a reader sees the
//! topic listed with its files complete, or not at all, and never a journal
//! entry half appended (which it would take for a torn one and cut). A
//! deletion unlists its topic the same way, under `topics.lock` with the
//! list read afresh, and only then removes its directory.
//!
//! Each change of the list (a creation or a deletion) bumps a change
//! counter in the directory's shared page (`SHARED`) before `topics.lock`
//! is let go, and rings every broker's doorbell thread; each rereads the
//! list and joins the topics it lacks and lets go of those that are gone
//! (the protocol, and what a process still reading a deleted topic's files
//! sees, are in "Topics other processes create or delete" in
//! `doorbell.rs`). To tell a topic deleted and created again (same name,
//! new directory number) from the one it has, a broker keeps the directory
//! number of every topic it opened (`opened_dirs`).
//!
//! A durable subscription's positions are not in the offsets slots in this
//! mode, which every process would rewrite with its own view: each name has
//! a lock and two slots of its own under `named/`, taken by one process at
//! a time (`Busy` for the others) and written only by it; the essay is in
//! `named.rs`, with how the positions move when a directory changes mode.
//! A consumer group's committed offsets are not in them either: each
//! partition's is in slots of the group's own, written only by the member
//! holding the partition's lock (`membership.rs`), which is also how the
//! members in several processes split the partitions. A shared
//! subscription's members split its topic's partitions the same way, in
//! folders of their own under `shared/` (`membership.rs`, "Shared
//! subscriptions").
//!
//! # The parts
//!
//! * `mod.rs` (this file): the [`Store`] handle, opening, and the topic
//!   operations the broker calls;
//! * `format.rs`: the on-disk encodings (frames, `topics.list`, the
//!   offsets slots, one topic);
//! * `topics.rs`: the topic list's I/O (reading it back, listing a change,
//!   sweeping what deletions left); `journal.rs`: its journal;
//! * `offsets.rs`: the offsets slots and their group commit;
//! * `named.rs`: a durable subscription's name and positions across
//!   processes;
//! * `membership.rs`: a consumer group's members, partitions and commits
//!   across processes;
//! * `holders.rs`: who holds which name, member and partition across
//!   processes, read from the kernel's lock list without taking anything;
//! * `lock.rs`: the directory's `flock`s;
//! * `atomic_file.rs`: replacing a metadata file whole.

mod atomic_file;
mod deaths;
mod format;
mod holders;
mod journal;
mod lock;
mod membership;
mod named;
mod offsets;
mod registry;
mod topics;

use std::fs;
use std::io::ErrorKind as IoKind;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use self::atomic_file::{replace, sync_dir};
pub(crate) use self::deaths::Deaths;
pub use self::deaths::disable_death_watch;
pub(crate) use self::format::{Offsets, Positions, TopicMeta};
use self::format::{UNKNOWN_DIR, Writer, encode_topic};
use self::holders::LockTable;
pub(crate) use self::holders::MemberFile;
use self::journal::Change;
use self::lock::{LOCK_FILE, Locked, lock_dir, lock_topic_list};
pub(crate) use self::membership::{Hooks, Membership};
pub(crate) use self::named::NameHold;
use self::offsets::GroupCommit;
pub(crate) use self::offsets::{Ticket, read_offsets};
pub(crate) use self::registry::{ConsumerCounts, ConsumerDesc, Counts, Registry, Slot, SubDesc};
use self::topics::{TOPICS_DIR, TopicList, read_topic_list, sweep_deleted, tombstone_name};
use super::topic::TopicOptions;
use crate::error::{Error, Result};
use crate::log::{Fsync, Sharing};
use crate::sync::Mutex;

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
    /// Damaged metadata is started without rather than refused (a named
    /// subscription's slots are read when it is taken, after the open).
    repair: bool,
    /// Holds the flock; unlocked on drop.
    lock: Locked,
    sharing: Sharing,
    /// Processes mode: `INIT`, held from the open until [`Store::opened`].
    init: Mutex<Option<Locked>>,
    /// The listed topics, the next directory number and the journal.
    topics: Mutex<TopicList>,
    /// Processes mode: the directory number of each topic this broker
    /// opened, created or joined, by name. The list, read afresh, is
    /// compared with it to tell a topic another process deleted (and
    /// perhaps created again, in another directory) from one this broker
    /// has (see "Several processes").
    /// Shared with every name this broker holds (`named.rs`), which stores
    /// each position with its topic's number.
    opened_dirs: named::OpenedDirs,
    /// The offsets slots and their group commit (see `offsets.rs`).
    pub(crate) offsets: GroupCommit,
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
        let (read, seq, slot) = read_offsets(root, repair)?;
        // Durable positions move to where this mode keeps them (see
        // "Changing modes" in `named.rs`); a joiner finds them moved.
        let mut offsets = read.clone();
        let moved = match (sharing, first) {
            (Sharing::Exclusive, _) => {
                // `|`, not `||`: both moves are made.
                named::fold_in(root, &mut offsets, repair, &topics)?
                    | membership::fold_in(root, &mut offsets, repair, &topics)?
            }
            (Sharing::Processes, true) => {
                named::move_out(root, &mut offsets, repair, &topics)?
                    | membership::move_out(root, &mut offsets, repair, &topics)?
            }
            (Sharing::Processes, false) => false,
        };
        if first {
            // A joiner leaves them: another process may be creating one.
            sweep_deleted(&root.join(TOPICS_DIR), &topics, list.next_dir);
        }
        let store = Store {
            root: root.to_owned(),
            fsync,
            repair,
            lock,
            sharing,
            init: Mutex::new(init),
            opened_dirs: crate::sync::Arc::new(Mutex::new(topics.iter().map(|t| (t.name.clone(), t.dir)).collect())),
            topics: Mutex::new(list),
            offsets: GroupCommit::new(root, seq, slot, &read),
        };
        if moved {
            store.wait(store.request(offsets.clone(), true))?;
            if sharing == Sharing::Exclusive {
                named::remove_named(root)?;
                membership::remove_groups(root)?;
            }
        }
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
        let converted = unsafe { libc::flock(self.lock.file().as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0;
        let e = std::io::Error::last_os_error();
        drop(init);
        if !converted {
            return Err(Error::io(self.root.join(LOCK_FILE), &e));
        }
        Ok(())
    }

    /// Processes mode: takes durable subscription `name`: `Busy` if a
    /// subscription in another broker or process holds it. Returns the
    /// hold and the positions its slots hold (`None` if it has none), less
    /// those of a topic deleted since they were written. See "Taking the
    /// name" in `named.rs`. Call it under the control mutex: it takes
    /// `topics.lock` (the order of `sync_topics_now`).
    pub(crate) fn hold_name(&self, name: &str) -> Result<(NameHold, Option<Positions>)> {
        self.with_topic_list(|list| {
            named::hold_name(&self.root, (self.fsync, self.repair), name, list, self.opened_dirs.clone())
        })
    }

    /// Processes mode: forgets durable subscription `name`'s positions, and
    /// those of the shared subscription of that name: `Busy` while anyone
    /// holds the name (a durable holder or a shared member), `NotFound` if
    /// neither has any (see "Deleting" and "Shared names" in `named.rs`).
    pub(crate) fn forget_name(&self, name: &str) -> Result<()> {
        named::forget_name(
            &self.root,
            (self.fsync, self.repair),
            name,
            || membership::has_shared(&self.root, self.repair, name),
            || membership::forget_shared(&self.root, self.fsync, self.repair, name),
        )
    }

    /// Processes mode: joins consumer group `group` on `topic` (of
    /// `partitions` partitions) as member `id` of this process (see
    /// `membership.rs`).
    pub(crate) fn join_group(&self, group: &str, topic: &str, partitions: u32, id: u64) -> Result<Membership> {
        let dir = self.opened_dir(topic).unwrap_or(UNKNOWN_DIR);
        Membership::join(&self.root, self.fsync, self.repair, (group, topic, dir), partitions, id)
    }

    /// Processes mode: joins shared subscription `name` on `topic` (of
    /// `partitions` partitions) as member `id` of this process: a group's
    /// membership under `shared/` (see "Shared subscriptions" in
    /// `membership.rs`), holding the name shared with the other members:
    /// `Busy` while a durable subscription holds it ("Shared names" in
    /// `named.rs`).
    pub(crate) fn join_shared(&self, name: &str, topic: &str, partitions: u32, id: u64) -> Result<Membership> {
        // The name first (shared with the other members; `Busy` while a
        // durable subscription holds it), then the membership.
        let held = named::share_name(&self.root, self.fsync, name)?;
        let dir = self.opened_dir(topic).unwrap_or(UNKNOWN_DIR);
        let m = Membership::join_in(
            &self.root,
            membership::SHARED_DIR,
            self.fsync,
            self.repair,
            (name, topic, dir),
            partitions,
            id,
        )?;
        Ok(m.holding(held))
    }

    /// Processes mode: group `group`'s committed offsets on `topic` as
    /// its slots hold them; `None` if it never had a member here.
    pub(crate) fn group_committed(
        &self,
        group: &str,
        topic: &str,
        partitions: u32,
    ) -> Result<Option<Vec<Option<u64>>>> {
        let dir = self.opened_dir(topic).unwrap_or(UNKNOWN_DIR);
        membership::group_committed(&self.root, self.repair, (group, topic, dir), partitions)
    }

    /// Processes mode: every (group, topic) with commits here, or a live
    /// member, of the topic the directory's list names now (read afresh),
    /// sorted.
    pub(crate) fn group_list(&self) -> Result<Vec<(String, String)>> {
        let listed = self.with_topic_list(|list| Ok(list.to_vec()))?;
        let mut groups = membership::group_list(&self.root, self.repair, &listed)?;
        // And those with a live member that has not committed yet, of the
        // topic listed now (not a deleted one's of the same name).
        for (group, topic, dir) in holders::member_groups(&self.root, &LockTable::read()?)? {
            if dir == UNKNOWN_DIR || listed.iter().any(|t| t.name == topic && t.dir == dir) {
                groups.push((group, topic));
            }
        }
        groups.sort();
        groups.dedup();
        Ok(groups)
    }

    /// Every durable name of the directory with the pid of its holder
    /// (`None`: not held), sorted (see `holders.rs`).
    pub(crate) fn named_holders(&self) -> Result<Vec<(String, Option<u32>)>> {
        holders::named_holders(&self.root, self.repair, &LockTable::read()?)
    }

    /// Processes mode: this broker's registry of subscriptions, its lock
    /// held (see `registry.rs`).
    pub(crate) fn open_registry(&self) -> Result<crate::sync::Arc<Registry>> {
        Registry::open(&self.root)
    }

    /// The live members of group `group` on `topic` with their pids and
    /// the partitions their processes hold (see `holders.rs`).
    pub(crate) fn group_holders(&self, group: &str, topic: &str, partitions: u32) -> Result<Vec<MemberFile>> {
        holders::group_holders(&self.root, (group, topic), partitions, &LockTable::read()?)
    }

    /// Processes mode: forgets group `group`'s committed offsets on
    /// `topic` (as this broker opened it): `Busy` while it has a live
    /// member, `NotFound` if it has none of that topic.
    pub(crate) fn forget_group(&self, group: &str, topic: &str, partitions: u32) -> Result<()> {
        let dir = self.opened_dir(topic).unwrap_or(UNKNOWN_DIR);
        membership::forget_group(&self.root, self.fsync, self.repair, (group, topic, dir), partitions)
    }

    /// Processes mode: removes what group `group` left on `topic`, a topic
    /// not listed (deleted while a member of the group was live), if no
    /// member is live now; see "Deleting a group" in `membership.rs`.
    pub(crate) fn forget_deleted_group(&self, group: &str, topic: &str) -> Result<()> {
        self.with_topic_list(|list| {
            let listed: Vec<u64> = list.iter().map(|t| t.dir).collect();
            membership::forget_deleted(&self.root, self.fsync, self.repair, (group, topic), &listed)
        })
    }

    /// Processes mode, holding `topics.lock` with topic `topic` just
    /// unlisted from `list` (the list as it was read): drops its positions
    /// from the slots of every name nobody holds (see "Deleting a topic" in
    /// `named.rs`), and the commits of every group on it with no live
    /// member, and of every group whose commits are all of topics deleted
    /// since (`membership.rs`).
    pub(crate) fn drop_topic_from_names(&self, topic: &str, list: &[TopicMeta]) -> Result<()> {
        named::drop_topic(&self.root, self.fsync, self.repair, topic)?;
        // And from the consumer groups' commits ("Deleting a topic" in
        // `membership.rs`).
        let listed: Vec<u64> = list.iter().filter(|t| t.name != topic).map(|t| t.dir).collect();
        membership::drop_topic(&self.root, self.fsync, self.repair, topic, &listed)
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

    /// The directory number of the topic `name` as this broker opened it
    /// (see `opened_dirs`).
    pub(crate) fn opened_dir(&self, name: &str) -> Option<u64> {
        self.opened_dirs.lock().get(name).copied()
    }

    /// Records that this broker opened (joined) the topic `name` listed
    /// in `topics/<dir>`.
    pub(crate) fn note_opened(&self, name: &str, dir: u64) {
        self.opened_dirs.lock().insert(name.to_owned(), dir);
    }

    /// Forgets the topic `name`, deleted (here or by another process).
    pub(crate) fn forget_opened(&self, name: &str) {
        self.opened_dirs.lock().remove(name);
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
            topics.list_change(&self.root, Change::Add(w.0))?;
            self.note_opened(name, dir);
            Ok(t)
        });
        if listed.is_err() {
            let _ = fs::remove_dir_all(&path);
        }
        listed
    }

    /// Runs `f` with the directory number of the listed topic `name`
    /// (`None` if it is not listed), holding the list's lock, so that a
    /// delete of the topic cannot move its directory away meanwhile (its
    /// small files, such as its schema (see `schema.rs`), are written with
    /// [`Store::write_topic_file`]).
    pub(crate) fn with_listed_dir<T>(&self, name: &str, f: impl FnOnce(Option<u64>) -> T) -> T {
        let topics = self.topics.lock();
        f(topics.list.iter().find(|t| t.name == name).map(|t| t.dir))
    }

    /// Replaces (or, with `None`, removes) the small file `file` of the
    /// topic in `topics/<dir>`, whole: a crash, or a reader, finds the old
    /// file or the new one (a rename), never half of one. A directory
    /// written by a rill without such files reads as having none. The
    /// caller keeps the topic's directory from moving (the list's lock,
    /// [`Store::with_listed_dir`], or in `Sharing::Processes` mode
    /// `topics.lock`, which also keeps two processes from writing the
    /// file's `.tmp` at once).
    pub(crate) fn write_topic_file(&self, dir: u64, file: &str, bytes: Option<&[u8]>) -> Result<()> {
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

    /// The small files of the topic in `topics/<dir>` (its schema's, for
    /// `schema.rs`), read and written as the two methods around this one do.
    pub(crate) fn topic_files(&self, dir: u64) -> TopicFiles<'_> {
        TopicFiles { store: self, dir }
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
        topics.list_change(&self.root, Change::Remove(name.to_owned()))?;
        drop(topics);
        self.forget_opened(name);
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

    /// Writes the offsets into the older slot and returns once they are
    /// written (and synced, if `sync`): [`Store::request`] then [`Store::wait`].
    #[cfg(test)]
    pub(crate) fn save_offsets(&self, offsets: &Offsets, sync: bool) -> Result<()> {
        self.wait(self.request(offsets.clone(), sync))
    }

    /// Numbers `offsets` (the whole state, newer than any snapshot requested
    /// before) and keeps it as the one to write next; cheap, so the broker
    /// calls it under its control mutex. `sync`: its waiter wants it on
    /// stable storage, not only written. See `offsets.rs`.
    pub(crate) fn request(&self, offsets: Offsets, sync: bool) -> Ticket {
        self.offsets.request(offsets, sync)
    }

    /// Returns once the snapshot of `ticket`, or a newer one, is written
    /// (synced, if it asked for that), writing it itself if no other caller
    /// is writing (see `offsets.rs`); the error of the write that covered
    /// it if that failed.
    pub(crate) fn wait(&self, ticket: Ticket) -> Result<()> {
        self.offsets.wait(ticket)
    }

    /// How many offsets snapshots were written since the store was opened.
    #[cfg(test)]
    pub(crate) fn offsets_writes(&self) -> u64 {
        self.offsets.writes()
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

#[cfg(all(test, not(loom)))]
mod tests;

/// A topic's small files in its directory (`topics/<dir>`), for
/// `schema.rs`: see [`Store::topic_files`].
pub(crate) struct TopicFiles<'a> {
    store: &'a Store,
    dir: u64,
}

impl crate::broker::schema::Files for TopicFiles<'_> {
    fn read(&self, name: &str) -> Result<Option<Vec<u8>>> {
        self.store.read_topic_file(self.dir, name)
    }

    fn write(&self, name: &str, bytes: Option<&[u8]>) -> Result<()> {
        self.store.write_topic_file(self.dir, name, bytes)
    }
}
