//! Named (durable) subscriptions held across processes (issue 39): a
//! name's `flock`, and the two slots of its own that hold its positions.
//!
//! # One holder, one writer
//!
//! In `Exclusive` mode a durable subscription's positions are part of the
//! directory's offsets slots (`offsets.rs`), written by the one broker. In
//! `Processes` mode those slots would be written by every process at once,
//! each with its own view, and the last rename would win. So each name has
//! files of its own under `named/`, whose stem `<key>` is the name encoded
//! to fit a file name ([`key`]):
//!
//! ```text
//! named/<key>.lock         flock(LOCK_EX | LOCK_NB) held by the process
//!                          whose subscription has the name, while it is live
//! named/<key>.0, <key>.1   its positions: two slots, written as the
//!                          offsets slots are (numbered, atomic, CRC'd)
//! named/<key>.durable      empty: a durable subscription has taken the
//!                          name since its last delete
//! ```
//!
//! The mark is for the listing alone (`holders.rs`): a lock file stays
//! from the name's first taker until a delete (see "Deleting"), and a
//! shared subscription's members lock the same file (see "Shared names"),
//! so neither a lock file nor its holder says that a durable subscription
//! has the name. The taker makes
//! the mark holding the lock; a delete removes it with the slots. It is
//! not synced: a mark a machine crash loses unlists a name with no
//! positions (one with positions is listed for its slots), and the name's
//! next taker makes it again.
//!
//! **Taking the name** ([`hold_name`]) locks `<key>.lock` without
//! blocking: held elsewhere (another process, or another descriptor in this
//! one) is `Busy`. The lock belongs to the open file description, so the
//! kernel drops it when the holder's process dies, however it dies, and the
//! next opener gets the name. Holding the lock, the taker reads the slots
//! (the newest valid one; a slot torn by a crash is passed over for the
//! other, as in `offsets.rs`) and resumes from them.
//!
//! **Only the holder writes the slots**, through a [`GroupCommit`] of its
//! own over them: positions at the end of each drain round under
//! `Fsync::Always`, each flusher interval under `Interval` and `Never`, and
//! at the close, with the same sync policy as the directory's offsets. No
//! two processes ever write them at once, because no two hold the lock.
//!
//! **Letting go** ([`NameHold::release`]) comes after the holder's last
//! write has returned: the close hook requests the final positions, waits
//! for that write (the group commit writes one snapshot at a time, in
//! number order, so nothing older can land after it), and only then
//! unlocks. A process that dies holding the name leaves the slots as its
//! last write left them: the next holder resumes from the last positions
//! written, which are at or before what was acked (at-least-once: what was
//! acked after the last write is delivered again, nothing is skipped).
//!
//! **Deleting** a name's positions ([`forget_name`]) takes the lock
//! the same way (`Busy` while anyone holds it), removes the slots and the
//! mark while holding it, and then the lock file itself, still holding
//! it, so a name used once leaves nothing behind. A process may be about
//! to lock the file it opened just before the removal; the rules of
//! "Removing a lock file" in `lock.rs` (a taker checks, once locked, that
//! the path still names its file, and opens again if not) keep it from
//! holding the name through a removed file, which would guard nothing. A
//! delete opens the lock file without creating it: a name with no lock
//! file, no slots and no shared subscription's positions was never taken
//! (or was deleted), and its delete is `NotFound` with nothing made. One
//! with positions but no lock file yet (moved there by a change of modes)
//! is locked as a taker would.
//!
//! **Shared names.** A shared subscription's members keep their
//! positions under `shared/` (`membership.rs`), but its name is the same
//! lock file's: each member holds `<key>.lock` with a *shared* lock
//! (`flock(LOCK_SH | LOCK_NB)`, [`share_name`]) while it is a member, so
//! members in any number of processes hold it at once, while a durable
//! subscription of that name (an exclusive lock) is `Busy` as long as one
//! member lives, and a member is `Busy` while a durable holder lives, as
//! the two are kept apart in one process. `delete_durable` takes the lock
//! exclusively and, holding it, forgets the shared subscription's
//! positions too (as an `Exclusive` broker forgets both, which keeps them
//! under one name); so a name deleted and taken again, durable or shared,
//! starts afresh.
//!
//! **Deleting a topic** must take its positions out of every name, as an
//! `Exclusive` delete takes them out of the offsets slots: a topic created
//! again under the same name is a new log, read from its first message,
//! and a name resuming it at the old topic's offset would skip what was
//! published to it first. Two parties do it:
//!
//! * the deleter, holding `topics.lock` once the topic is unlisted (so no
//!   process lists the name again meanwhile), goes through every name with
//!   slots ([`drop_topic`]): it takes the name's lock without blocking,
//!   rewrites the slots without the topic (synced unless `Fsync::Never`)
//!   and lets go; a name held (by another process, or by another
//!   descriptor in this one, its own subscriptions' included) is skipped;
//! * every process holding a name, the deleter included, drops the topic
//!   when it lets go of it (`let_go_locked` in `control/topics.rs`: for
//!   another process's delete, when its doorbell thread rereads the list):
//!   from the positions it kept since taking the name and from its
//!   readers', under the control mutex, then writes the slots without it.
//!   A re-created topic of that name is joined and attached only after,
//!   under the same lock, from its first message.
//!
//! # Positions and directory numbers
//!
//! Those two can both miss: a holder that dies (or closes the
//! subscription) after the deleter skipped its name but before its own
//! doorbell reread saw the delete leaves the old topic's positions in the
//! slots (its last periodic write, or its close, wrote them), and a slot
//! write the machine lost (under `Fsync::Never`) can bring them back. So
//! the slots store each position with the directory number of the topic
//! it is in (`topics/<dir>`; a topic created again under the same name
//! gets a new one), and the name's next taker checks them:
//!
//! * **writing**, the holder stores with each position its topic's number
//!   as its process opened it (the store's `opened_dirs`), or, for a topic
//!   its process does not have open, the number the slots held when it took
//!   the name;
//! * **taking the name** ([`hold_name`]), under `topics.lock` with the list
//!   read afresh (so no delete or creation is half done), the taker drops
//!   every position whose topic the list does not name, or names in another
//!   directory: a re-created topic is read as a new one. The `Exclusive`
//!   opener's fold ([`fold_in`]) drops them the same way, since the offsets
//!   slots hold positions by name alone.
//!
//! The encoding is format 2 of the slots' frame (`NAMED_VERSION` in
//! `format.rs`); format 1, the offsets encoding without numbers, is still
//! read, its positions checked by topic name alone (the next write gives
//! them the listed topic's number). An older rill reads frames of format 1
//! only: it finds a slot of format 2 `Corrupt` ("metadata format 2"), so it
//! does not misread one. Like any damaged slot, it passes over it for the
//! other slot if that one is of format 1 (positions older than the newest,
//! by name: at least once, with the old gap), and with both slots of
//! format 2 it refuses to take the name (or to open the directory in
//! `Exclusive` mode), unless `repair`, which starts the name afresh.
//!
//! What is left: a holder whose process has not joined a topic yet keeps
//! that topic's position from the slots and resumes from it when it joins;
//! if the topic was deleted and created again meanwhile, in between two
//! rereads of its doorbell, it resumes the new topic at the old offset.
//! (Consumer groups' and shared subscriptions' commits, in
//! `membership.rs`, carry their topic's number the same way: "Commits and
//! directory numbers" there.)
//!
//! Unlike the positions in the offsets slots, a name's own are not reset
//! when they point past the end recovery left ("Offsets past a recovered
//! end" in `control/data_dir.rs`): the first opener moves them before it
//! recovers the logs, and later a process's view of a partition's end may
//! lag another's, so "past the end" cannot be told. After a machine crash
//! that cut a log's tail under `Interval` or `Never`, the next holder may
//! resume past the new end (the reset an `Exclusive` open makes is the
//! remedy).
//!
//! # Changing modes
//!
//! A directory can be opened in one mode, then the other. The positions
//! move with it, each move made by an opener that has `LOCK` exclusively
//! (an `Exclusive` broker, or the first `Processes` opener while it
//! recovers), so no holder is writing:
//!
//! * the first `Processes` opener moves every durable entry of the offsets
//!   slots into its name's own slots (synced), then rewrites the offsets
//!   slots without them (synced);
//! * an `Exclusive` opener folds every name's own slots into the offsets
//!   (they are newer: a `Processes` broker wrote them after any `Exclusive`
//!   one), writes the offsets (synced), then removes `named/`.
//!
//! A crash between the two writes of either move leaves both copies, equal,
//! and the next opener makes the move again.

use std::fs;
use std::io::ErrorKind as IoKind;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use std::collections::HashMap;

use super::atomic_file::sync_dir;
use super::format::{DirPositions, NamedSlot, Offsets, Positions, TopicMeta, UNKNOWN_DIR};
use super::lock::{
    Locked, flock, lock_existing_file_at, lock_file_at, names_locked, open_existing_lock_file, open_lock_file,
    remove_locked,
};
use super::offsets::{GroupCommit, Ticket, read_slots_of};
use crate::error::{Error, Result};
use crate::log::Fsync;
use crate::sync::{Arc, Mutex};

/// The directory number of each topic this process has open, by name: the
/// store's `opened_dirs`, shared with every [`NameHold`].
pub(super) type OpenedDirs = Arc<Mutex<HashMap<String, u64>>>;

/// The folder of the names' own files.
pub(super) const NAMED_DIR: &str = "named";

/// Names up to this many bytes are their key in hex; longer ones are cut
/// and given a hash (see [`key`]).
const PLAIN_KEY_BYTES: usize = 100;

/// The stem of a name's files: its bytes in hex (a name may hold any
/// character but NUL, and file names cannot), or, for a name too long for
/// that to fit a file name, the hex of its first [`PLAIN_KEY_BYTES`] bytes,
/// `-` and two 64-bit FNV-1a hashes of all of it. The slots hold the name
/// itself, checked when read, so a collision is an error, never a mix-up.
pub(super) fn key(name: &str) -> String {
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let bytes = name.as_bytes();
    if bytes.len() <= PLAIN_KEY_BYTES {
        return hex(bytes);
    }
    let fnv = |basis: u64| bytes.iter().fold(basis, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
    format!("{}-{:016x}{:016x}", hex(&bytes[..PLAIN_KEY_BYTES]), fnv(0xcbf2_9ce4_8422_2325), fnv(0x6c62_272e_07bb_0142))
}

/// The slot file names of the key `key`.
pub(super) fn slot_files(key: &str) -> [String; 2] {
    [format!("{key}.0"), format!("{key}.1")]
}

/// The file name of the key `key`'s mark of a durable subscription (see
/// the module docs).
pub(super) fn durable_mark(key: &str) -> String {
    format!("{key}.durable")
}

/// A name taken by this process (see the module docs): its lock, and the
/// group commit of its slots. Dropping it lets go of the lock too.
#[derive(Debug)]
pub(crate) struct NameHold {
    name: String,
    /// Holds the flock while open.
    lock: Locked,
    commit: GroupCommit<NamedSlot>,
    /// The directory numbers of the topics this process has open (the
    /// store's `opened_dirs`): each position is written with its topic's.
    opened: OpenedDirs,
    /// The directory numbers the slots held when the name was taken, for
    /// positions kept for a topic this process does not have open.
    taken: HashMap<String, u64>,
}

impl NameHold {
    /// Numbers `positions` as the name's next snapshot (cheap: call it
    /// under the control mutex, so snapshots are numbered in the order
    /// they were read) and returns its ticket for [`NameHold::wait`]. Each
    /// position is stored with the directory number of its topic as this
    /// process opened it, else as the slots held it when the name was taken.
    pub(crate) fn request(&self, positions: Positions, sync: bool) -> Ticket {
        let positions = {
            let opened = self.opened.lock();
            positions
                .into_iter()
                .map(|(t, p, o)| {
                    let dir = opened.get(&t).or_else(|| self.taken.get(&t)).copied().unwrap_or(UNKNOWN_DIR);
                    (t, p, o, dir)
                })
                .collect()
        };
        self.commit.request(snapshot(&self.name, positions), sync)
    }

    /// Returns once the snapshot of `ticket`, or a newer one, is written
    /// (synced, if it asked for that); see `offsets.rs`.
    pub(crate) fn wait(&self, ticket: Ticket) -> Result<()> {
        self.commit.wait(ticket)
    }

    /// Lets go of the name: call it only once the last write has returned
    /// (see "Letting go" in the module docs).
    pub(crate) fn release(&self) {
        // SAFETY: flock on a descriptor we own, with constant flags; it touches no memory.
        unsafe { libc::flock(self.lock.file().as_raw_fd(), libc::LOCK_UN) };
    }
}

/// A name's positions as its slots hold them: one durable entry, holding
/// the name itself (see [`key`]).
fn snapshot(name: &str, positions: DirPositions) -> NamedSlot {
    NamedSlot { durable: vec![(name.to_owned(), positions)] }
}

/// The positions in `slot` read from a name's slots in `dir`, checking
/// they are the name's (see [`key`]).
fn positions_of(name: &str, dir: &Path, slot: NamedSlot) -> Result<Option<DirPositions>> {
    match slot.durable.into_iter().next() {
        None => Ok(None),
        Some((n, positions)) if n == name => Ok(Some(positions)),
        Some((n, _)) => Err(Error::Corrupt {
            file: dir.join(key(name)),
            offset: 0,
            reason: format!("the slots of subscription {name:?} hold those of {n:?}"),
        }),
    }
}

/// Whether a position in topic `topic`, stored with directory number
/// `dir`, is in a topic `list` lists (see "Positions and directory
/// numbers"): the topic is listed, in that directory (or, for a position
/// read from a slot of format 1, which held no number, by its name alone).
fn still_listed(list: &[TopicMeta], topic: &str, dir: u64) -> bool {
    list.iter().any(|t| t.name == topic && (dir == UNKNOWN_DIR || t.dir == dir))
}

/// The directory number of the topic `topic` in `list`, or [`UNKNOWN_DIR`].
fn listed_dir(list: &[TopicMeta], topic: &str) -> u64 {
    list.iter().find(|t| t.name == topic).map_or(UNKNOWN_DIR, |t| t.dir)
}

/// Opens and locks (without blocking) the lock file of `key` in `dir`:
/// `None` if it is held elsewhere.
fn try_lock(dir: &Path, key: &str) -> Result<Option<Locked>> {
    lock_file_at(&dir.join(format!("{key}.lock")), libc::LOCK_EX | libc::LOCK_NB)
}

/// The folder of the names' own files in `root`, made if missing (and,
/// unless `fsync` is `Never`, made durable in the directory).
fn named_dir(root: &Path, fsync: Fsync) -> Result<PathBuf> {
    let dir = root.join(NAMED_DIR);
    match fs::create_dir(&dir) {
        Ok(()) if fsync != Fsync::Never => sync_dir(root)?,
        Err(e) if e.kind() != IoKind::AlreadyExists => return Err(Error::io(&dir, &e)),
        _ => {}
    }
    Ok(dir)
}

/// Takes durable subscription `name` in the directory `root` (see "Taking
/// the name"): `Busy` if a subscription in another broker or process holds
/// it. Returns the hold and the positions its slots hold (`None` if it has
/// none), less those whose topic `list` (the topic list, read afresh under
/// `topics.lock`) no longer lists in the directory they were stored with
/// (see "Positions and directory numbers"). `opened`: this process's
/// directory numbers (the store's `opened_dirs`). `Store::hold_name` calls it.
pub(super) fn hold_name(
    root: &Path,
    (fsync, repair): (Fsync, bool),
    name: &str,
    list: &[TopicMeta],
    opened: OpenedDirs,
) -> Result<(NameHold, Option<Positions>)> {
    let dir = named_dir(root, fsync)?;
    let key = key(name);
    let Some(lock) = try_lock(&dir, &key)? else {
        return Err(Error::Busy(format!(
            "durable subscription {name:?} is held by another process (or another broker on {root:?}), or is \
             the name of a shared subscription live there"
        )));
    };
    let files = slot_files(&key);
    let (slot_held, seq, slot) = read_slots_of::<NamedSlot>(&dir, &files.each_ref().map(String::as_str), repair)?;
    let stored = positions_of(name, &dir, slot_held.clone())?;
    let kept: Option<DirPositions> =
        stored.map(|p| p.into_iter().filter(|(t, _, _, d)| still_listed(list, t, *d)).collect());
    // Written with the dirs as listed: a position from a slot of format 1
    // takes its listed topic's number at the next write.
    let taken = kept
        .iter()
        .flatten()
        .map(|(t, _, _, d)| (t.clone(), if *d == UNKNOWN_DIR { listed_dir(list, t) } else { *d }))
        .collect();
    let positions = kept.map(|p| p.into_iter().map(|(t, p, o, _)| (t, p, o)).collect());
    let mark = dir.join(durable_mark(&key));
    fs::OpenOptions::new().create(true).append(true).open(&mark).map_err(|e| Error::io(&mark, &e))?;
    let commit = GroupCommit::with_files(&dir, files, seq, slot, &slot_held);
    Ok((NameHold { name: name.to_owned(), lock, commit, opened, taken }, positions))
}

/// Takes the name `name` for a member of the shared subscription of that
/// name (see "Shared names"): a shared lock of its lock file, taken without
/// blocking, held by every member in every process at once; `Busy` while a
/// durable subscription (or a `delete_durable`) holds it exclusively.
pub(super) fn share_name(root: &Path, fsync: Fsync, name: &str) -> Result<Locked> {
    let dir = named_dir(root, fsync)?;
    let path = dir.join(format!("{}.lock", key(name)));
    lock_file_at(&path, libc::LOCK_SH | libc::LOCK_NB)?.ok_or_else(|| {
        Error::Busy(format!(
            "a durable subscription named {name:?} is held by another process (or another broker on {root:?}): a \
             shared subscription cannot have its name"
        ))
    })
}

/// Forgets durable subscription `name`'s positions in the directory `root`
/// (see "Deleting"), and, holding its lock, whatever `shared` forgets (the
/// positions of the shared subscription of that name, true if it had
/// any): `Busy` while anyone holds the name, `NotFound` if neither had
/// any. `has_shared` says, without the lock, whether the shared
/// subscription has positions: a name without a lock file is locked (its
/// file made) only if it or the name's own slots do, so a name never taken
/// is `NotFound` with nothing written. `Store::forget_name` calls it.
pub(super) fn forget_name(
    root: &Path,
    (fsync, repair): (Fsync, bool),
    name: &str,
    mut has_shared: impl FnMut() -> Result<bool>,
    shared: impl FnOnce() -> Result<bool>,
) -> Result<()> {
    let not_found = || Error::NotFound(format!("no durable subscription {name:?} has a saved position"));
    let key = key(name);
    let files = slot_files(&key);
    let lock_path = root.join(NAMED_DIR).join(format!("{key}.lock"));
    // No lock file: no process has taken the name in this mode. It has
    // positions only if an opener moved them here ("Changing modes") or a
    // shared subscription kept them under `shared/`; without either there
    // is nothing to forget, and a lock file made for nothing would stay
    // (only a delete removes one). A taker that makes the
    // file meanwhile either wrote positions before the look below, which
    // then takes the lock as usual, or did not, and this delete is before
    // its take.
    let lock = loop {
        let file = match open_existing_lock_file(&lock_path)? {
            Some(file) => file,
            None => {
                let moved = files.iter().any(|f| root.join(NAMED_DIR).join(f).exists());
                if !moved && !has_shared()? {
                    return Err(not_found());
                }
                named_dir(root, fsync)?;
                open_lock_file(&lock_path)?
            }
        };
        if !flock(&file, &lock_path, libc::LOCK_EX | libc::LOCK_NB)? {
            return Err(Error::Busy(format!(
                "subscription {name:?} is live in another process (durable, or a shared one's member): close it \
                 before deleting its saved position"
            )));
        }
        let locked = Locked::new(file);
        // Removed by a delete beside this one since the open: look again.
        if names_locked(&lock_path, &locked)? {
            break locked;
        }
    };
    let dir = root.join(NAMED_DIR);
    let (slot_held, ..) = read_slots_of::<NamedSlot>(&dir, &files.each_ref().map(String::as_str), repair)?;
    let durable = positions_of(name, &dir, slot_held)?.is_some();
    if !shared()? && !durable {
        return Err(not_found());
    }
    let [a, b] = files;
    remove_slots(&dir, &[a, b, durable_mark(&key)], fsync)?;
    // Then the lock file, still locked (see "Deleting"); the lock goes
    // with `lock`.
    remove_locked(&lock_path, &lock)
}

/// Removes the slot files `files` of `dir` (those missing already too),
/// and makes that durable unless `fsync` is `Never`: forgetting a name's
/// positions here, a group's or shared subscription's in `membership.rs`.
pub(super) fn remove_slots(dir: &Path, files: &[String], fsync: Fsync) -> Result<()> {
    for f in files {
        match fs::remove_file(dir.join(f)) {
            Err(e) if e.kind() != IoKind::NotFound => return Err(Error::io(dir.join(f), &e)),
            _ => {}
        }
    }
    if fsync != Fsync::Never {
        sync_dir(dir)?;
    }
    Ok(())
}

/// The first `Processes` opener's move (see "Changing modes"): writes each
/// durable entry of `offsets` into its name's own slots, synced, and takes
/// them out of `offsets`. True if there were any (the caller rewrites the
/// offsets slots without them). Each position is stored with its topic's
/// directory number in `list`, the topic list.
pub(super) fn move_out(root: &Path, offsets: &mut Offsets, repair: bool, list: &[TopicMeta]) -> Result<bool> {
    if offsets.durable.is_empty() {
        return Ok(false);
    }
    let dir = root.join(NAMED_DIR);
    match fs::create_dir(&dir) {
        Ok(()) => sync_dir(root)?,
        Err(e) if e.kind() != IoKind::AlreadyExists => return Err(Error::io(&dir, &e)),
        _ => {}
    }
    for (name, positions) in std::mem::take(&mut offsets.durable) {
        let files = slot_files(&key(&name));
        let (old, seq, slot) = read_slots_of::<NamedSlot>(&dir, &files.each_ref().map(String::as_str), repair)?;
        let positions = positions.into_iter().map(|(t, p, o)| {
            let d = listed_dir(list, &t);
            (t, p, o, d)
        });
        let commit = GroupCommit::with_files(&dir, files, seq, slot, &old);
        commit.wait(commit.request(snapshot(&name, positions.collect()), true))?;
    }
    Ok(true)
}

/// An `Exclusive` opener's move (see "Changing modes"): folds every name's
/// own slots into `offsets` (theirs win). True if there were any: the
/// caller writes the offsets, synced, then calls [`remove_named`]. A
/// position whose topic `list` (the topic list) no longer lists in the
/// directory it was stored with is left out (see "Positions and directory
/// numbers"): the offsets slots hold positions by name alone.
pub(super) fn fold_in(root: &Path, offsets: &mut Offsets, repair: bool, list: &[TopicMeta]) -> Result<bool> {
    let dir = root.join(NAMED_DIR);
    let entries = folder_entries(&dir)?;
    let mut any = !entries.is_empty();
    let keys = slot_keys(&entries);
    for key in keys {
        let files = slot_files(&key);
        let (own, ..) = read_slots_of::<NamedSlot>(&dir, &files.each_ref().map(String::as_str), repair)?;
        for (name, positions) in own.durable {
            let positions = positions
                .into_iter()
                .filter(|(t, _, _, d)| still_listed(list, t, *d))
                .map(|(t, p, o, _)| (t, p, o))
                .collect();
            offsets.durable.retain(|(n, _)| *n != name);
            offsets.durable.push((name, positions));
            any = true;
        }
    }
    offsets.durable.sort();
    Ok(any)
}

/// The keys of the names that have slots among `entries`, those of
/// `named/` (by their slots, not their locks: a name `move_out` moved has
/// slots and no lock until a process takes it), sorted.
fn slot_keys(entries: &[fs::DirEntry]) -> Vec<String> {
    let mut keys = Vec::new();
    for entry in entries {
        let file = entry.file_name();
        if let Some(stem) = file.to_str().and_then(|f| f.strip_suffix(".0").or_else(|| f.strip_suffix(".1"))) {
            keys.push(stem.to_owned());
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

/// The entries of the folder `dir`, none if it does not exist (yet, or
/// any more): the walk over `named/` here and over `groups/`, `shared/`
/// and a group's folder in `membership.rs`, when a topic or a name is
/// dropped, a mode changes, or the slots are listed.
pub(super) fn folder_entries(dir: &Path) -> Result<Vec<fs::DirEntry>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == IoKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(dir, &e)),
    };
    entries.map(|entry| entry.map_err(|e| Error::io(dir, &e))).collect()
}

/// The deleter's part of "Deleting a topic" (see the module docs): drops
/// `topic`'s positions from the slots of every name nobody holds, each
/// under its lock, taken without blocking; a name held (by another
/// process, or another descriptor in this one) is skipped: its holder
/// drops them. Called holding `topics.lock`, once the topic is unlisted.
/// `Store::drop_topic_from_names` calls it.
pub(super) fn drop_topic(root: &Path, fsync: Fsync, repair: bool, topic: &str) -> Result<()> {
    let dir = root.join(NAMED_DIR);
    for key in slot_keys(&folder_entries(&dir)?) {
        // A name deleted since the listing has no lock file to make.
        let Some(_lock) = lock_existing_file_at(&dir.join(format!("{key}.lock")), libc::LOCK_EX | libc::LOCK_NB)?
        else {
            continue;
        };
        let files = slot_files(&key);
        let (offsets, seq, slot) = read_slots_of::<NamedSlot>(&dir, &files.each_ref().map(String::as_str), repair)?;
        let mut dropped = offsets.clone();
        for (_, positions) in &mut dropped.durable {
            positions.retain(|(t, ..)| t != topic);
        }
        if dropped == offsets {
            continue;
        }
        let commit = GroupCommit::with_files(&dir, files, seq, slot, &offsets);
        commit.wait(commit.request(dropped, fsync != Fsync::Never))?;
        // The lock goes with `_lock`, after the write.
    }
    Ok(())
}

/// Removes `named/` once [`fold_in`]'s result is written.
pub(super) fn remove_named(root: &Path) -> Result<()> {
    let dir = root.join(NAMED_DIR);
    match fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != IoKind::NotFound => Err(Error::io(&dir, &e)),
        _ => sync_dir(root),
    }
}

#[cfg(test)]
mod tests {
    use super::super::format::{NAMED_VERSION, VERSION, read_frame};
    use super::*;
    use crate::broker::topic::TopicOptions;

    fn temp_dir(tag: &str) -> PathBuf {
        let p =
            std::env::temp_dir().join(format!("rill-named-{tag}-{}-{}", std::process::id(), crate::sync::unique_id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        p
    }

    fn listed(name: &str, dir: u64) -> TopicMeta {
        TopicMeta { name: name.into(), dir, options: TopicOptions::default() }
    }

    fn opened(dirs: &[(&str, u64)]) -> OpenedDirs {
        Arc::new(Mutex::new(dirs.iter().map(|(n, d)| ((*n).to_owned(), *d)).collect()))
    }

    /// Takes `name` in `root` with the topic list `list`, writes
    /// `positions` (this process having `dirs` open) and lets go.
    fn hold_and_write(root: &Path, list: &[TopicMeta], dirs: &[(&str, u64)], positions: Positions) {
        let (hold, _) = hold_name(root, (Fsync::Never, false), "n", list, opened(dirs)).unwrap();
        hold.wait(hold.request(positions, false)).unwrap();
        hold.release();
    }

    fn take(root: &Path, list: &[TopicMeta]) -> Option<Positions> {
        let (hold, positions) = hold_name(root, (Fsync::Never, false), "n", list, opened(&[])).unwrap();
        hold.release();
        positions
    }

    /// A position stored with its topic's directory number is dropped when
    /// the name is taken with the topic listed in another directory (deleted
    /// and created again) or not listed; kept when listed in the same one.
    #[test]
    fn taking_a_name_drops_positions_of_a_topic_no_longer_listed_in_their_directory() {
        let root = temp_dir("dirs");
        let list = [listed("a", 1), listed("b", 2), listed("c", 3)];
        let positions = vec![("a".into(), 0, 5), ("b".into(), 0, 6), ("c".into(), 1, 7)];
        hold_and_write(&root, &list, &[("a", 1), ("b", 2), ("c", 3)], positions);
        // `a` as it was, `b` created again in directory 9, `c` deleted.
        let now = [listed("a", 1), listed("b", 9)];
        assert_eq!(take(&root, &now), Some(vec![("a".into(), 0, 5)]));
        // Folded into the offsets slots by an `Exclusive` opener the same way.
        let mut offsets = Offsets::default();
        assert!(fold_in(&root, &mut offsets, false, &now).unwrap());
        assert_eq!(offsets.durable, vec![("n".to_owned(), vec![("a".to_owned(), 0, 5)])]);
        fs::remove_dir_all(&root).unwrap();
    }

    /// A position for a topic the holder's process does not have open is
    /// written with the number the slots held when the name was taken.
    #[test]
    fn a_position_kept_for_a_topic_not_open_keeps_its_directory_number() {
        let root = temp_dir("kept");
        let list = [listed("a", 4)];
        hold_and_write(&root, &list, &[("a", 4)], vec![("a".into(), 0, 5)]);
        // Taken by a process that has not joined `a`: it writes its number 4.
        hold_and_write(&root, &list, &[], vec![("a".into(), 0, 6)]);
        assert_eq!(take(&root, &list), Some(vec![("a".into(), 0, 6)]));
        assert_eq!(take(&root, &[listed("a", 5)]), Some(Vec::new()));
        fs::remove_dir_all(&root).unwrap();
    }

    /// Slots of format 1 (positions by name, as rill wrote them before) are
    /// still read, checked by name alone; the slots written now are of format
    /// 2, which a reader of format 1 refuses as `Corrupt`.
    #[test]
    fn slots_of_format_1_are_read_and_format_2_is_refused_by_an_older_reader() {
        let root = temp_dir("formats");
        let dir = named_dir(&root, Fsync::Never).unwrap();
        let old = Offsets {
            groups: Vec::new(),
            durable: vec![("n".into(), vec![("a".into(), 0, 3), ("gone".into(), 0, 4)])],
        };
        let commit = GroupCommit::with_files(&dir, slot_files(&key("n")), 0, 0, &Offsets::default());
        commit.wait(commit.request(old, false)).unwrap();
        let list = [listed("a", 7)];
        assert_eq!(take(&root, &list), Some(vec![("a".into(), 0, 3)]));
        hold_and_write(&root, &list, &[("a", 7)], vec![("a".into(), 0, 8)]);
        let newest = slot_files(&key("n"))
            .into_iter()
            .map(|f| dir.join(f))
            .find(|p| read_frame(p, NAMED_VERSION).unwrap().is_some_and(|(v, _)| v == NAMED_VERSION))
            .expect("a slot of format 2");
        match read_frame(&newest, VERSION) {
            Err(Error::Corrupt { reason, .. }) => assert!(reason.contains("metadata format 2"), "{reason}"),
            r => panic!("a format-1 reader read a slot of format 2: {r:?}"),
        }
        fs::remove_dir_all(&root).unwrap();
    }
}
