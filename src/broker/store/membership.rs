//! Consumer groups across processes (issue 39): who is a member, who owns
//! which partition, and where each partition's committed offset lives.
//!
//! # Files
//!
//! In `Exclusive` mode a group's committed offsets are part of the
//! directory's offsets slots (`offsets.rs`), written by the one broker, and
//! its assignment is made under the broker's control mutex (`group.rs`). In
//! `Processes` mode members live in several processes, so a group on a topic
//! has a folder of its own, whose stem `<key>` is the group and topic
//! encoded to fit a file name (as a durable name's, `named.rs`):
//!
//! ```text
//! groups/<key>/<member>.member   one per live member, flock(LOCK_EX) held
//!                                by its process; holds its pid, its id, its
//!                                topic's directory number and the group and
//!                                topic names (in hex, NUL between them)
//! groups/<key>/p<N>.lock         flock(LOCK_EX | LOCK_NB) held by the one
//!                                member that owns partition N
//! groups/<key>/p<N>.0, p<N>.1    partition N's committed offset: two slots,
//!                                written as the offsets slots are, only by
//!                                the holder of p<N>.lock
//! ```
//!
//! # Ownership is a lock
//!
//! A member owns partition N while it holds `p<N>.lock`. No two members
//! (in one process or several: a lock belongs to the open file description)
//! hold it at once, so no two ever read a partition for the group or commit
//! it at once. A member that takes the lock reads the slots under it and
//! starts there; it writes the slots on each commit (synced under
//! `Fsync::Always`), and lets go of the lock only after its last write has
//! returned ([`Membership::let_go`] is called with no write in flight: a
//! commit writes and waits under the consumer's own `&mut`). The kernel
//! drops the lock when its process dies, however it dies, so a dead
//! member's partitions are free at once; what it committed is in the slots,
//! and what it polled after its last commit is polled again by the next
//! owner (at least once, nothing committed lost).
//!
//! # Who should own what
//!
//! Nobody sends assignments. Every member lists the live members (the
//! `.member` files, sorted by name) and computes the same target: member
//! `i` of `m` owns the range of partitions `[i*n/m, (i+1)*n/m)`
//! ([`target`]). A member gives up the partitions it holds outside its
//! target and then takes, without blocking, the free partitions in it; one
//! still held by its previous owner (which has not looked yet) is tried
//! again at the next look. A member looks when it joins, whenever another
//! member announces a change (see "Announcing changes"), when its broker
//! sees a member's process exit (see "Deaths"), and every half of its
//! `session_timeout` (the same timer that expels idle members in
//! `Exclusive` mode, see `consumer.rs`), so a dead member's partitions
//! reach the survivors as its process goes, and within that time whatever
//! hides the death, and partitions never have two owners in between (at
//! worst none, for one look).
//!
//! A member file is made whole before it is seen: it is created under a
//! temporary name, locked and written, then renamed to `<member>.member`
//! (the lock is on the file, so it survives the rename). A member whose
//! process died is found by trying its file's lock without blocking: a
//! lock that is granted means nobody holds it, so the member is dead and
//! the finder removes its file (still holding the lock); a temporary file
//! left by a join that died before its rename stays (it is never listed).
//! A member name
//! holds its pid, a clock reading and an id unique in its process, so a
//! reused pid never brings a dead member's name back.
//!
//! # Announcing changes
//!
//! Joins, leaves and releases are events a member's process makes itself,
//! so it announces them rather than have every member poll: a member that
//! joined (its file renamed into place), let go of a partition (its lock
//! dropped: `rebalance` giving one up, `give_up`, `let_go`), left (its file
//! removed, then its partitions' locks dropped, in `Drop`), or removed a
//! dead member's file calls its announcer ([`Membership::announcing`]),
//! which bumps the members' change counter beside the directory's bell and
//! rings every doorbell of the directory (`Bell::members_changed` in
//! `doorbell.rs`). Each process's doorbell thread, finding the counter
//! moved since it last told its broker, has every local member look soon
//! on its own thread (a consumer at its next `sync`, a shared member on
//! the `shared_look` timer), never on the doorbell's: a look can block on
//! the file system. A look announces only what it changed (a release or a
//! removed file), never a take or a look that found nothing, so a round of
//! looks ends once the split is reached.
//!
//! Who writes what, in which order: the announcer changes the folder
//! (rename, unlink, or drops a lock: each a system call that has returned),
//! then bumps the counter (Release), then rings (X3, a Release
//! read-modify-write of the bell). A doorbell arms (or loads the bell
//! before a disarmed sleep), fences (X2, or X4), loads the counter
//! (Acquire), and only then hands the look to the member, whose listing
//! and lock tries are system calls after that. A doorbell that loads the
//! bumped count synchronizes with the bump, so the look it asks for comes
//! after the change. That some round loads it is the topic change's
//! argument ("Topics other processes create or delete" in `doorbell.rs`):
//! the ring and the arm are read-modify-writes of one word (or the load
//! reads the ring or an earlier value), so either the doorbell's fence
//! acquires the ring and its load finds the bump, or the ring moved the
//! bell from the value the doorbell sleeps on, so it does not sleep, and
//! its next round loads the bumped counter. The doorbell loads the counter
//! before it tells its members, so a change announced while they look
//! moves the counter past what it kept and it tells them again. A look
//! already under way when the announcement arrives is followed by another.
//! `loom-tests/tests/doorbell.rs`
//! (`a_join_in_another_process_wakes_the_doorbell_and_its_look_sees_it`)
//! runs [`Membership`]'s half (`Bell::members_changed`) against a doorbell
//! round on the real bell, with the folder a Relaxed flag the counter
//! must publish (with the counter Relaxed it finds the look missing the
//! join); `.ci/fence-check` requires it to fail with X3 weakened.
//!
//! # Deaths
//!
//! Only a death announces nothing: a process killed with -9 drops its
//! locks in the kernel, and its member file stays until a survivor's look
//! tries the lock, finds it free, removes the file and announces that.
//! Each broker watches the processes of the members its members listed
//! at their last look (a pidfd each, in `deaths.rs`), and has its members
//! look when one exits, so a death is followed at once, as an announced
//! change is. The fallback looks find what that watch cannot see (a pid of
//! another namespace, a pid reused; see `deaths.rs`):
//! every half of the `session_timeout` for a group's member, every
//! `LOOK_EVERY_WATCHED` (ten seconds) for a shared subscription's, which
//! has no session timeout, or `LOOK_EVERY` (one second) on a system
//! without pidfds.
//! A rill of the older layout would announce nothing, so the bell file's
//! layout (3) refuses it (`doorbell.rs`).
//!
//! # Deleting a topic
//!
//! The deleter of a topic, holding `topics.lock` once it is unlisted (so no
//! process lists the name again meanwhile), forgets the commits of every
//! group on it with no live member, and the positions of every shared
//! subscription on it with none ([`drop_topic`]), so a topic created
//! again under that name is read from its first message, as in one
//! process. A group with a live member is skipped: what its members
//! committed stays in the slots (a shared member saves its positions at
//! its close, too), and they leave when their process sees the delete. A
//! shared member is closed then; a consumer's handle may stay open (its
//! calls report the deleted topic), so its broker drops its membership
//! itself (`ConsumerCore::topic_deleted`): its file and locks go, and a
//! member of the topic created again under the name is not kept waiting
//! for a handle nobody uses.
//!
//! # Commits and directory numbers
//!
//! So a commit left by a member of a deleted topic must not be resumed in
//! the topic created again under its name, which shares its folder (the
//! key is the names'). Each commit is stored with the directory number of
//! its topic (`topics/<dir>`) as the member's process opened it, and a
//! member checks it when it takes a partition ([`Membership::take`]):
//!
//! * the same number (or none: a slot of format 1, or a member whose
//!   process has no number for its topic): the commit is resumed;
//! * a smaller one: an older topic's of that name, deleted since; the
//!   partition starts afresh (at the start position; a shared member saves
//!   it at once, with its own number);
//! * a larger one: the member's own topic is the older one, deleted while
//!   its process has not seen it yet; it does not take the partition, and
//!   its process closes it when it sees the delete.
//!
//! Directory numbers only grow (`next_dir` in the topic list), so the two
//! cases cannot be mistaken. Only the holder of `p<N>.lock` writes, so a
//! newer topic's commit is never overwritten by a member of an older one.
//! Reading a partition it does not own ([`Membership::committed`],
//! `group_committed`) goes by the same rule. The `Exclusive` opener's fold
//! ([`fold_in`]) leaves out a commit stored with a number its topic is not
//! listed in, since the offsets slots hold commits by name alone.
//!
//! The encoding is format 2 of the slots' frame (`MEMBER_VERSION` in
//! `format.rs`): the number, then the offsets encoding that format 1 is.
//! Format 1 is still read, its commits by name alone; the next commit
//! writes format 2. An older rill reads frames of format 1 only and finds a
//! slot of format 2 `Corrupt` ("metadata format 2"), so it never misreads
//! one: it passes over it for the other slot if that one is of format 1
//! (an older commit, at least once), and with both of format 2 it refuses
//! to take the partition (or to open the directory `Exclusive`), unless
//! `repair`, which starts it afresh.
//!
//! # Deleting a group
//!
//! Deleting a group's offsets (`delete_group`) takes every partition lock
//! without blocking (`Busy` if any is held, or if a member is live) and
//! removes the slots. Then, still holding those locks, it removes the rest
//! of the group's folder ([`tidy`]), so that a folder per group name ever
//! used does not stay behind: each `p<N>.lock` is removed while its lock
//! is held (the rules of "Removing a lock file" in `lock.rs`, which keep a
//! member that opened one just before from owning its partition through a
//! removed file), dead members' files are removed, and then the folder, if
//! nothing is left in it. A member that joins meanwhile keeps the folder:
//! its file (or its join's `.tmp` file) makes that last removal fail, and
//! a join makes the folder again if it went between the join's making it
//! and its first file in it. A topic's deletion ([`drop_topic`]) tidies the
//! folders it forgets in the same way, and every folder without slots (a
//! group that never committed), of any topic, whose members are all gone.
//! A group with a live member when its topic was deleted is skipped then
//! (see "Deleting a topic"), and its member leaves later; so the deletion
//! also removes every folder whose commits are all of topics no longer
//! listed and whose members are gone ([`forget_stale`], which looks again
//! under every partition lock, so a member of a topic created again under
//! the name that committed meanwhile keeps it), and `delete_group` of a
//! topic no longer listed does the same for its group before it answers
//! `NotFound`, as in one process.
//!
//! # Changing modes
//!
//! As for durable names ("Changing modes" in `named.rs`): the first
//! `Processes` opener moves each group of the offsets slots into its own
//! slots ([`move_out`]), and an `Exclusive` opener folds them back
//! ([`fold_in`]) and removes `groups/`. Each move is made with `LOCK` held
//! exclusively, so no member is live.
//!
//! # Shared subscriptions
//!
//! A shared subscription's members in `Processes` mode split its topic's
//! partitions the same way, in a folder of `shared/` (laid out as a
//! group's, the subscription's name in place of the group's;
//! [`Membership::join_in`] with [`SHARED_DIR`]), so they never show among
//! the consumer groups. A push member cannot give a partition up at any
//! moment as a pull consumer can between polls: its drainer may be in a
//! handler call. So it gives up in two steps (`control/shared_procs.rs`):
//! the look asks the drainer to let go (`attach::revoke`), the drainer does
//! so at a batch boundary, everything before its cursor settled, and only
//! then is the cursor written to the slots and the lock let go
//! ([`Membership::give_up`]); and it takes without giving up
//! ([`Membership::take`]). A member saves the positions it reached at the
//! end of each drain round (synced under `Fsync::Always`) and at its
//! close, after its last handler call; a partition it takes with nothing
//! saved starts at the subscription's start position, saved at once so a
//! later owner starts there too. A member looks when it subscribes and
//! then at each announcement and at each death its broker sees (see
//! "Deaths"), so a dead member's partitions are taken as soon as its
//! process has gone. A member killed loses only
//! what it handled after its last save, which its partition's next owner
//! delivers again (at least once).
//!
//! A member holds the subscription's name too, with a shared lock of the
//! durable name's lock file ("Shared names" in `named.rs`), so a durable
//! subscription of that name in any process is `Busy` while a member lives
//! and the other way round. `delete_durable` of the name forgets its
//! positions under `shared/` on every topic ([`forget_shared`], holding the
//! name's lock exclusively), and a topic's deletion forgets them as it
//! forgets a group's commits (see "Deleting a topic", [`drop_topic`]).
//!
//! # What is not shared
//!
//! A shared subscription's positions under `shared/` do not move when the
//! directory changes mode. A shared member whose
//! handler call overruns `ack_timeout` keeps its partitions (its message
//! comes again to it, as to a member alone): the hand-over of a stalled
//! member is `shared.rs`'s, within one process.
//!
//! A failed attempt's count (`nack`) is kept by the member that counted it,
//! so it does not survive a move of its partition to another process. A
//! member that is alive but stops polling keeps its partitions (its lock is
//! held): only a member that closes, or whose process dies, gives them up.

use std::collections::BTreeMap;
use std::fs;
use std::io::{ErrorKind as IoKind, Write};
use std::path::{Path, PathBuf};

use super::atomic_file::sync_dir;
use super::deaths::Deaths;
use super::format::{MemberSlot, Offsets, TopicMeta, UNKNOWN_DIR};
use super::lock::{
    Locked, flock, lock_existing_file_at, lock_file_at, open_existing_lock_file, open_lock_file, remove_locked,
};
use super::named::{folder_entries, key, remove_slots};
use super::offsets::{GroupCommit, read_slots_of};
use crate::error::{Error, Result};
use crate::log::Fsync;

/// How many other members' files a member keeps open between its looks
/// (`Membership::live_members_removing`): each kept one saves an `open`
/// and a `close` per look; past this many, the others are opened and
/// closed at each look, so a large group does not use up the process's
/// descriptors.
const MAX_PROBES: usize = 64;

/// The folder of the groups' own files.
pub(super) const GROUPS_DIR: &str = "groups";

/// The folder of shared subscriptions' own files, laid out as `groups/`
/// (a shared subscription's name in place of the group; see "Shared
/// subscriptions").
pub(super) const SHARED_DIR: &str = "shared";

/// The digits of the pid a member file's name begins with.
const PID_DIGITS: usize = 10;

/// The suffix of a member file.
const MEMBER_SUFFIX: &str = ".member";

/// The key of group `group` on topic `topic` (see [`key`]; a NUL, which
/// neither name may hold, keeps the two apart).
fn group_key(group: &str, topic: &str) -> String {
    key(&format!("{group}\u{0}{topic}"))
}

/// The slot file names of partition `p`.
fn slot_files(p: u32) -> [String; 2] {
    [format!("p{p}.0"), format!("p{p}.1")]
}

/// The partitions member `index` of `members` owns among `n` (see "Who
/// should own what").
pub(crate) fn target(index: usize, members: usize, n: u32) -> Vec<u32> {
    if members == 0 {
        return Vec::new();
    }
    let (n64, m, i) = (u64::from(n), members as u64, index as u64);
    let (from, to) = (i * n64 / m, (i + 1) * n64 / m);
    (from as u32..to as u32).collect()
}

/// A partition this member owns: its lock and its slots' group commit.
#[derive(Debug)]
struct Owned {
    /// Holds the flock while open.
    _lock: Locked,
    commit: GroupCommit<MemberSlot>,
    committed: Option<u64>,
}

/// One member of a group across processes (see the module docs): its
/// member file, held locked, and the partitions it owns. Dropping it
/// removes its member file and lets go of everything.
#[derive(Debug)]
pub(crate) struct Membership {
    dir: PathBuf,
    group: String,
    topic: String,
    partitions: u32,
    /// The directory number of its topic as its process opened it
    /// (`topics/<dir>`, or [`UNKNOWN_DIR`]): written with each commit and
    /// checked when a partition is taken (see "Commits and directory
    /// numbers").
    topic_dir: u64,
    repair: bool,
    /// This member's file name in `dir`.
    name: String,
    /// Holds the member file's flock while open.
    _member: Locked,
    owned: BTreeMap<u32, Owned>,
    /// Descriptors of the other members' files, by name, kept from one
    /// look to the next (at most [`MAX_PROBES`]).
    probes: BTreeMap<String, fs::File>,
    /// A shared subscription's member: its shared lock of the name (see
    /// "Shared subscriptions"), held while it is a member.
    _name: Option<Locked>,
    /// Tells the other members that this one changed the folder (see
    /// "Announcing changes"): set by [`Membership::announcing`].
    announce: Option<Announcer>,
}

/// A member's hooks into its broker ([`Hooks`]), with its id in the
/// broker's [`Deaths`]; no `Debug` of their own.
struct Announcer {
    announce: Announce,
    deaths: std::sync::Arc<Deaths>,
    owner: u64,
}

impl std::fmt::Debug for Announcer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Announcer")
    }
}

/// What a member calls after it changed its folder: the broker's ring of
/// every process's doorbell (see "Announcing changes").
pub(crate) type Announce = std::sync::Arc<dyn Fn() + Send + Sync>;

/// What a member of a broker with a doorbell is given: its announcement,
/// and the broker's watch of the other members' processes, which each
/// look tells whom it found (see "Deaths" and `deaths.rs`).
pub(crate) struct Hooks {
    pub(crate) announce: Announce,
    pub(crate) deaths: std::sync::Arc<Deaths>,
}

/// The folder of group `group` on topic `topic` in `root`, made if missing.
fn group_dir(root: &Path, fsync: Fsync, group: &str, topic: &str) -> Result<PathBuf> {
    folder_in(root, GROUPS_DIR, fsync, group, topic)
}

/// The folder of group (or shared subscription) `group` on topic `topic`
/// in `root`'s folder `top`, made if missing.
fn folder_in(root: &Path, top: &str, fsync: Fsync, group: &str, topic: &str) -> Result<PathBuf> {
    let top = root.join(top);
    for (dir, parent) in [(&top, root), (&top.join(group_key(group, topic)), &top)] {
        match fs::create_dir(dir) {
            Ok(()) if fsync != Fsync::Never => sync_dir(parent)?,
            Err(e) if e.kind() != IoKind::AlreadyExists => return Err(Error::io(dir, &e)),
            _ => {}
        }
    }
    Ok(top.join(group_key(group, topic)))
}

/// The committed offset of partition `p` in the slots `offsets` read from
/// `dir`, checking they are the group's (see [`key`]).
fn committed_of(offsets: &Offsets, dir: &Path, group: &str, topic: &str, p: u32) -> Result<Option<u64>> {
    match offsets.groups.first() {
        None => Ok(None),
        Some((g, t, committed)) if g == group && t == topic => Ok(committed.get(p as usize).copied().flatten()),
        Some((g, t, _)) => Err(Error::Corrupt {
            file: dir.join(format!("p{p}.0")),
            offset: 0,
            reason: format!("the slots of group {group:?} on {topic:?} hold those of {g:?} on {t:?}"),
        }),
    }
}

/// The slots' encoding of partition `p`'s committed offset in the topic
/// of directory number `dir`: the offsets encoding with one group whose
/// only entry is `p`'s, and `dir`.
fn snapshot(group: &str, topic: &str, p: u32, offset: Option<u64>, dir: u64) -> MemberSlot {
    let mut committed = vec![None; p as usize + 1];
    committed[p as usize] = offset;
    let offsets = Offsets { groups: vec![(group.to_owned(), topic.to_owned(), committed)], durable: Vec::new() };
    MemberSlot { offsets, dir }
}

/// What partition `p`'s slot `slot`, read from `dir`, holds for a member of
/// the topic in directory number `mine` (see "Commits and directory
/// numbers"): `Some` committed offset (`Some(None)`: none, or the commit of
/// an older topic of that name), or `None` if the slot is a newer topic's
/// of that name (the member's own topic was deleted: it must not take `p`).
fn committed_for(
    slot: &MemberSlot,
    dir: &Path,
    (group, topic): (&str, &str),
    p: u32,
    mine: u64,
) -> Result<Option<Option<u64>>> {
    let committed = committed_of(&slot.offsets, dir, group, topic, p)?;
    if of_topic(slot, mine) {
        return Ok(Some(committed));
    }
    // Directory numbers only grow: a smaller one is an older topic's.
    Ok((slot.dir < mine).then_some(None))
}

/// Whether `slot` was written by a member of the topic in directory
/// number `mine`: the same number, or either unknown (a slot of format 1,
/// or a process with no number for its topic), whose commits go by name
/// alone (see "Commits and directory numbers").
fn of_topic(slot: &MemberSlot, mine: u64) -> bool {
    slot.dir == UNKNOWN_DIR || mine == UNKNOWN_DIR || slot.dir == mine
}

/// Whether the group folder `dir` holds a commit of the topic in
/// directory number `mine`, of any partition. A folder whose slots all
/// hold another topic's of that name (one deleted while a member was live,
/// see "Deleting a topic") holds none: its group never consumed this topic.
fn has_commits_of(dir: &Path, mine: u64, repair: bool) -> Result<bool> {
    for p in slot_partitions(dir)? {
        let files = slot_files(p);
        let (held, ..) = read_slots_of::<MemberSlot>(dir, &files.each_ref().map(String::as_str), repair)?;
        if of_topic(&held, mine) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Tries the lock of `path` without blocking: `None` if it is held. The
/// lock is on the file the path names (a deleted group's lock files are
/// removed, see "Deleting a group").
fn try_lock(path: &Path) -> Result<Option<Locked>> {
    lock_file_at(path, libc::LOCK_EX | libc::LOCK_NB)
}

/// Tries the lock of the member file `path` without blocking, never making
/// it (a member that left removed it): `None` if it is held or gone.
fn try_member_lock(path: &Path) -> Result<Option<Locked>> {
    let Some(file) = open_existing_lock_file(path)? else { return Ok(None) };
    Ok(flock(&file, path, libc::LOCK_EX | libc::LOCK_NB)?.then(|| Locked::new(file)))
}

/// True if a live member holds the member file `path` (its lock is held
/// and the file is still there); a dead member's file is left in place.
fn member_is_live(path: &Path) -> Result<bool> {
    Ok(try_member_lock(path)?.is_none() && path.exists())
}

impl Membership {
    /// The folder of its group's (or shared subscription's) member files.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Joins group `group` on topic `topic` (of `partitions` partitions) in
    /// the directory `root`, as member `id` of this process: writes and
    /// locks its member file (see "Who should own what"). It owns nothing
    /// until [`Membership::rebalance`].
    pub(super) fn join(
        root: &Path,
        fsync: Fsync,
        repair: bool,
        (group, topic, topic_dir): (&str, &str, u64),
        partitions: u32,
        id: u64,
    ) -> Result<Membership> {
        Membership::join_in(root, GROUPS_DIR, fsync, repair, (group, topic, topic_dir), partitions, id)
    }

    /// [`Membership::join`] in `root`'s folder `top` ([`GROUPS_DIR`] or
    /// [`SHARED_DIR`]).
    pub(super) fn join_in(
        root: &Path,
        top: &str,
        fsync: Fsync,
        repair: bool,
        (group, topic, topic_dir): (&str, &str, u64),
        partitions: u32,
        id: u64,
    ) -> Result<Membership> {
        let pid = std::process::id();
        let clock = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let stem = format!("{pid:0PID_DIGITS$}-{clock:032x}-{id:016x}");
        // A folder left empty by a delete goes (see "Deleting a group"),
        // and may go between its making and the file's: then it is made
        // again. Once the file is in it, it stays (a folder with a file
        // in it is not removed).
        let (dir, tmp, file) = loop {
            let dir = folder_in(root, top, fsync, group, topic)?;
            let tmp = dir.join(format!("{stem}.tmp"));
            match open_lock_file(&tmp) {
                Ok(file) => break (dir, tmp, file),
                Err(Error::Io { kind: IoKind::NotFound, .. }) => continue,
                Err(e) => return Err(e),
            }
        };
        flock(&file, &tmp, libc::LOCK_EX)?;
        // The names and the topic's directory number, so that the operator
        // calls can list a group whose members have not committed yet
        // (`holders::member_groups`): the folder's key cannot always be
        // read back (a long one is cut and hashed).
        let names = format!("{group}\u{0}{topic}").bytes().map(|b| format!("{b:02x}")).collect::<String>();
        let text = format!("pid {pid}\nid {id}\ndir {topic_dir}\nnames {names}\n");
        (&*file).write_all(text.as_bytes()).map_err(|e| Error::io(&tmp, &e))?;
        let name = format!("{stem}{MEMBER_SUFFIX}");
        fs::rename(&tmp, dir.join(&name)).map_err(|e| Error::io(&tmp, &e))?;
        Ok(Membership {
            dir,
            group: group.to_owned(),
            topic: topic.to_owned(),
            partitions,
            topic_dir,
            repair,
            name,
            _member: Locked::new(file),
            owned: BTreeMap::new(),
            probes: BTreeMap::new(),
            _name: None,
            announce: None,
        })
    }

    /// This member holding `name`, a shared subscription's shared lock of
    /// its name (see "Shared subscriptions"), until it is dropped.
    pub(super) fn holding(mut self, name: Locked) -> Membership {
        self._name = Some(name);
        self
    }

    /// This member announcing, through `hooks`, every change it makes
    /// to its folder from now on, and its join now (its file is in place;
    /// see "Announcing changes"), and telling the broker's watch of deaths
    /// whom each look finds.
    pub(crate) fn announcing(mut self, hooks: Hooks) -> Membership {
        (hooks.announce)();
        let owner = hooks.deaths.owner();
        self.announce = Some(Announcer { announce: hooks.announce, deaths: hooks.deaths, owner });
        self
    }

    /// Tells the other members that this one changed the folder.
    fn announce(&self) {
        if let Some(a) = &self.announce {
            (a.announce)();
        }
    }

    /// The live members, sorted by name; removes the files of dead ones
    /// (and announces that it did).
    fn live_members(&mut self) -> Result<Vec<String>> {
        let mut removed = false;
        let live = self.live_members_removing(&mut removed);
        if removed {
            self.announce();
        }
        live
    }

    /// [`Membership::live_members`], setting `removed` if it removed a
    /// dead member's file. Each other member's file is probed with an
    /// `flock` try on a descriptor kept from the last look (see
    /// [`MAX_PROBES`]), so a look that finds everyone alive makes one
    /// system call per member, not three.
    fn live_members_removing(&mut self, removed: &mut bool) -> Result<Vec<String>> {
        let entries = fs::read_dir(&self.dir).map_err(|e| Error::io(&self.dir, &e))?;
        let mut live = Vec::new();
        let mut probes = BTreeMap::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&self.dir, &e))?;
            let Some(file) = entry.file_name().to_str().map(str::to_owned) else { continue };
            // A `.tmp` file is a join in progress (or one that died before
            // its rename, left as it is: removing it could race a live
            // joiner between its create and its lock).
            if !file.ends_with(MEMBER_SUFFIX) {
                continue;
            }
            if file == self.name {
                live.push(file);
                continue;
            }
            let path = self.dir.join(&file);
            // A member's name is never used again (pid, clock, id), so a
            // kept descriptor is of the file the name was listed for.
            let probe = match self.probes.remove(&file) {
                Some(kept) => kept,
                None => match fs::File::open(&path) {
                    Ok(opened) => opened,
                    // Removed meanwhile by its member or another prober.
                    Err(e) if e.kind() == IoKind::NotFound => continue,
                    Err(e) => return Err(Error::io(&path, &e)),
                },
            };
            if flock(&probe, &path, libc::LOCK_EX | libc::LOCK_NB)? {
                // Granted: nobody holds it, its member is dead (or it left
                // and removed it since the listing). Closing the probe lets
                // the lock go.
                match fs::remove_file(&path) {
                    Err(e) if e.kind() != IoKind::NotFound => return Err(Error::io(&path, &e)),
                    Ok(()) => *removed = true,
                    _ => {}
                }
            } else {
                if probes.len() < MAX_PROBES {
                    probes.insert(file.clone(), probe);
                }
                live.push(file);
            }
        }
        // The members not listed now are gone: their descriptors close.
        self.probes = probes;
        if let Some(a) = &self.announce {
            a.deaths.watch(a.owner, live.iter().filter_map(|name| Some((member_pid(name)?, name.clone()))).collect());
        }
        live.sort();
        Ok(live)
    }

    /// The partitions this member should own now (see "Who should own what").
    pub(crate) fn target(&mut self) -> Result<Vec<u32>> {
        let live = self.live_members()?;
        let index = live.iter().position(|m| *m == self.name).expect("its own file is listed");
        Ok(target(index, live.len(), self.partitions))
    }

    /// The partitions it owns, ascending.
    pub(crate) fn owned(&self) -> Vec<u32> {
        self.owned.keys().copied().collect()
    }

    /// True if it owns `p`.
    pub(crate) fn owns(&self, p: u32) -> bool {
        self.owned.contains_key(&p)
    }

    /// The committed offset of `p`: from its own state if it owns `p`,
    /// else read from the slots (written by whoever owns it).
    pub(crate) fn committed(&self, p: u32) -> Result<Option<u64>> {
        match self.owned.get(&p) {
            Some(o) => Ok(o.committed),
            None => read_committed(&self.dir, (&self.group, &self.topic, self.topic_dir), p, self.repair),
        }
    }

    /// Gives up the partitions outside `target` and takes the free ones in
    /// it. True if it now owns exactly `target`.
    pub(crate) fn rebalance(&mut self, target: &[u32]) -> Result<bool> {
        let before = self.owned.len();
        self.owned.retain(|p, _| target.contains(p));
        if self.owned.len() < before {
            // Let go: the members waiting for them take them now.
            self.announce();
        }
        self.take(target)?;
        Ok(self.owned.len() == target.len())
    }

    /// Takes the free partitions in `target` it does not own yet, giving up
    /// none (a shared subscription's member gives a partition up only once
    /// its reader has let go of it: [`Membership::give_up`]). Returns each
    /// partition taken with its committed offset.
    pub(crate) fn take(&mut self, target: &[u32]) -> Result<Vec<(u32, Option<u64>)>> {
        let mut taken = Vec::new();
        for &p in target {
            if self.owned.contains_key(&p) {
                continue;
            }
            let Some(lock) = try_lock(&self.dir.join(format!("p{p}.lock")))? else { continue };
            let files = slot_files(p);
            let (held, seq, slot) =
                read_slots_of::<MemberSlot>(&self.dir, &files.each_ref().map(String::as_str), self.repair)?;
            let names = (self.group.as_str(), self.topic.as_str());
            // A newer topic's: this member's is deleted, its process not
            // told yet; the lock goes at once.
            let Some(committed) = committed_for(&held, &self.dir, names, p, self.topic_dir)? else { continue };
            let commit = GroupCommit::with_files(&self.dir, files, seq, slot, &held);
            self.owned.insert(p, Owned { _lock: lock, commit, committed });
            taken.push((p, committed));
        }
        Ok(taken)
    }

    /// Lets go of partition `p` (its slots stay as last written; the
    /// caller's last commit of it has returned).
    pub(crate) fn give_up(&mut self, p: u32) {
        if self.owned.remove(&p).is_some() {
            self.announce();
        }
    }

    /// Commits `offset` for partition `p`, which it owns (false, and
    /// nothing written, if it does not): returns once it is written (and
    /// synced, if `sync`).
    pub(crate) fn commit(&mut self, p: u32, offset: u64, sync: bool) -> Result<bool> {
        let Some(o) = self.owned.get_mut(&p) else { return Ok(false) };
        if o.committed == Some(offset) {
            // Written (and synced, if that was asked) already.
            return Ok(true);
        }
        let next = snapshot(&self.group, &self.topic, p, Some(offset), self.topic_dir);
        o.commit.wait(o.commit.request(next, sync))?;
        o.committed = Some(offset);
        Ok(true)
    }

    /// Lets go of every partition (their slots stay as last written).
    pub(crate) fn let_go(&mut self) {
        if !self.owned.is_empty() {
            self.owned.clear();
            self.announce();
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        // The file goes first, while it is still locked, so no prober takes
        // a live member for a dead one; then the partitions' locks, and
        // only then the announcement, so a member it wakes finds them free
        // (the member file's lock goes with the fields).
        let _ = fs::remove_file(self.dir.join(&self.name));
        self.owned.clear();
        self.announce();
        if let Some(a) = &self.announce {
            a.deaths.forget(a.owner);
        }
    }
}

/// The pid a member file's name begins with (see [`Membership::join_in`]).
fn member_pid(name: &str) -> Option<u32> {
    name.get(..PID_DIGITS)?.parse().ok()
}

/// Partition `p`'s committed offset as its slots in `dir` hold it for the
/// topic of directory number `mine` (none if they hold another topic's of
/// that name, see [`committed_for`]).
fn read_committed(dir: &Path, (group, topic, mine): (&str, &str, u64), p: u32, repair: bool) -> Result<Option<u64>> {
    let files = slot_files(p);
    let (held, ..) = read_slots_of::<MemberSlot>(dir, &files.each_ref().map(String::as_str), repair)?;
    Ok(committed_for(&held, dir, (group, topic), p, mine)?.flatten())
}

/// The committed offsets of group `group` on `topic` (`partitions` of
/// them, in directory number `topic_dir`) in `root`, as the slots hold
/// them; `None` if the group has no commits of that topic there (its slots,
/// if any, are another topic's of that name).
pub(super) fn group_committed(
    root: &Path,
    repair: bool,
    (group, topic, topic_dir): (&str, &str, u64),
    partitions: u32,
) -> Result<Option<Vec<Option<u64>>>> {
    let dir = root.join(GROUPS_DIR).join(group_key(group, topic));
    if !dir.is_dir() || !has_commits_of(&dir, topic_dir, repair)? {
        return Ok(None);
    }
    (0..partitions)
        .map(|p| read_committed(&dir, (group, topic, topic_dir), p, repair))
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// Forgets group `group`'s committed offsets on `topic` (of `partitions`
/// partitions, in directory number `topic_dir`) in `root` (see the module
/// docs): `NotFound` if it has none of that topic (slots of another topic
/// of the name are removed too when it has), `Busy` while a member holds
/// any partition (or any member is live).
pub(super) fn forget_group(
    root: &Path,
    fsync: Fsync,
    repair: bool,
    (group, topic, topic_dir): (&str, &str, u64),
    partitions: u32,
) -> Result<()> {
    forget_in(root, GROUPS_DIR, fsync, (group, topic), partitions, Some((topic_dir, repair)))
}

/// [`forget_group`] in `root`'s folder `top` ([`GROUPS_DIR`] or
/// [`SHARED_DIR`]). With `of`, the directory number of the topic (and
/// `repair`): `NotFound` unless a slot holds a commit of that topic; without
/// it, the slots go whichever topic of the name wrote them.
fn forget_in(
    root: &Path,
    top: &str,
    fsync: Fsync,
    (group, topic): (&str, &str),
    partitions: u32,
    of: Option<(u64, bool)>,
) -> Result<()> {
    let dir = root.join(top).join(group_key(group, topic));
    let what = if top == SHARED_DIR { "shared subscription" } else { "consumer group" };
    let none = || Error::NotFound(format!("{what} {group:?} has no offsets on topic {topic:?}"));
    // A folder that is not there has no slots: `none()` below.
    let entries = folder_entries(&dir)?;
    let busy = || {
        Error::Busy(format!("{what} {group:?} has live member(s) on {topic:?}: close them before deleting its offsets"))
    };
    let mut slots = Vec::new();
    for entry in entries {
        let file = entry.file_name().to_string_lossy().into_owned();
        if file.ends_with(MEMBER_SUFFIX) {
            // A dead member's file (its lock granted) is removed by `tidy`.
            if member_is_live(&dir.join(&file))? {
                return Err(busy());
            }
        } else if file.ends_with(".0") || file.ends_with(".1") {
            slots.push(file);
        }
    }
    // The folder and the lock files of a group that has nothing left to
    // forget go too, if no member is live.
    let nothing = |dir: &Path| tidy(dir, BTreeMap::new()).and(Err(none()));
    if slots.is_empty() {
        return nothing(&dir);
    }
    if let Some((mine, repair)) = of
        && !has_commits_of(&dir, mine, repair)?
    {
        return Err(none());
    }
    let mut locks = BTreeMap::new();
    for p in 0..partitions {
        let name = partition_lock(p);
        match try_lock(&dir.join(&name)) {
            Ok(Some(lock)) => drop(locks.insert(name, lock)),
            Ok(None) => return Err(busy()),
            // The folder went meanwhile: a delete running beside this one
            // has forgotten the slots.
            Err(Error::Io { kind: IoKind::NotFound, .. }) => return Err(none()),
            Err(e) => return Err(e),
        }
    }
    remove_slots(&dir, &slots, fsync)?;
    tidy(&dir, locks)
}

/// Removes the folder `dir` of a group (or shared subscription) whose
/// slots are gone, with its partitions' lock files and its dead members'
/// files, if no member in it is live (see "Deleting a group"). `held`: the
/// partition locks the caller holds already, by file name. Each other
/// `p<N>.lock` is locked without blocking, and every one is removed while
/// locked; a lock held elsewhere or a live member leaves the folder as it
/// is, and so does a join in progress (its `.tmp` file keeps the folder
/// from being removed).
fn tidy(dir: &Path, mut held: BTreeMap<String, Locked>) -> Result<()> {
    let files: Vec<String> =
        folder_entries(dir)?.iter().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    // The members first: a partition lock tried while a member is live
    // could keep it from taking that partition at its look.
    let mut dead = Vec::new();
    for file in files.iter().filter(|f| f.ends_with(MEMBER_SUFFIX)) {
        let path = dir.join(file);
        match try_member_lock(&path)? {
            Some(lock) => dead.push((path, lock)),
            None if path.exists() => return Ok(()),
            None => {}
        }
    }
    for file in files {
        let path = dir.join(&file);
        if file.starts_with('p') && file.ends_with(".lock") && !held.contains_key(&file) {
            match lock_existing_file_at(&path, libc::LOCK_EX | libc::LOCK_NB)? {
                Some(lock) => drop(held.insert(file, lock)),
                // Removed since the listing (by a tidy beside this one),
                // or held.
                None if !path.exists() => {}
                None => return Ok(()),
            }
        }
    }
    for (file, lock) in &held {
        remove_locked(&dir.join(file), lock)?;
    }
    for (path, _lock) in &dead {
        match fs::remove_file(path) {
            Err(e) if e.kind() != IoKind::NotFound => return Err(Error::io(path, &e)),
            _ => {}
        }
    }
    drop((held, dead));
    // Fails, leaving the folder, if a member has joined since the listing
    // (or a join is in progress); nothing in it is needed any more, so the
    // removal is not synced.
    match fs::remove_dir(dir) {
        Err(e) if !matches!(e.kind(), IoKind::NotFound | IoKind::DirectoryNotEmpty) => Err(Error::io(dir, &e)),
        _ => Ok(()),
    }
}

/// The partitions with slot files in the group folder `dir`, ascending.
fn slot_partitions(dir: &Path) -> Result<Vec<u32>> {
    // A folder removed meanwhile (see "Deleting a group") has none.
    let mut parts = Vec::new();
    for f in folder_entries(dir)? {
        let f = f.file_name().to_string_lossy().into_owned();
        if let Some(p) = f.strip_prefix('p').and_then(|s| s.strip_suffix(".0").or_else(|| s.strip_suffix(".1")))
            && let Ok(p) = p.parse::<u32>()
        {
            parts.push(p);
        }
    }
    parts.sort_unstable();
    parts.dedup();
    Ok(parts)
}

/// The deleter's part of deleting topic `topic` (see "Deleting a topic"):
/// forgets the commits of every group on it, and the positions of every
/// shared subscription on it, that has no live member, so a topic created
/// again under that name is read from its first message. One with a live
/// member is skipped: its members are closed when their process sees the
/// delete, and what they saved stays (see "Deleting a topic").
pub(super) fn drop_topic(root: &Path, fsync: Fsync, repair: bool, topic: &str, listed: &[u64]) -> Result<()> {
    for top in [GROUPS_DIR, SHARED_DIR] {
        for (group, t, partitions) in folders_in(root, top, repair)? {
            if t != topic {
                continue;
            }
            match forget_in(root, top, fsync, (&group, topic), partitions, None) {
                Ok(()) | Err(Error::Busy(_) | Error::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        // Folders without slots hold nothing once their members are gone
        // (which `tidy` checks), whichever topic they were of; nor do those
        // whose commits are all of topics deleted since (a delete skips a
        // group with a live member, which leaves it later).
        for entry in folder_entries(&root.join(top))? {
            let dir = entry.path();
            if slot_partitions(&dir)?.is_empty() {
                tidy(&dir, BTreeMap::new())?;
            } else {
                match forget_stale(&dir, fsync, repair, listed) {
                    // A damaged slot: left for a `repair` opener.
                    Ok(()) | Err(Error::Corrupt { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(())
}

/// [`forget_stale`] for group `group`'s folder on `topic`, a topic no
/// longer listed: a group live when its topic was deleted, left since.
pub(super) fn forget_deleted(
    root: &Path,
    fsync: Fsync,
    repair: bool,
    (group, topic): (&str, &str),
    listed: &[u64],
) -> Result<()> {
    let dir = group_folder(root, group, topic);
    if !dir.is_dir() {
        return Ok(());
    }
    forget_stale(&dir, fsync, repair, listed)
}

/// Removes the folder `dir` of a group (or shared subscription) if every
/// commit in it is of a deleted topic (its directory number is not in
/// `listed`, the numbers of the topics listed now) and no member in it is
/// live (see "Deleting a group"). Looked at again under every partition
/// lock, so a member that took a partition and committed since keeps it.
fn forget_stale(dir: &Path, fsync: Fsync, repair: bool, listed: &[u64]) -> Result<()> {
    let stale = || -> Result<Option<Vec<u32>>> {
        let parts = slot_partitions(dir)?;
        for &p in &parts {
            let files = slot_files(p);
            let (held, ..) = read_slots_of::<MemberSlot>(dir, &files.each_ref().map(String::as_str), repair)?;
            if held.dir == UNKNOWN_DIR || listed.contains(&held.dir) {
                return Ok(None);
            }
        }
        Ok((!parts.is_empty()).then_some(parts))
    };
    let Some(parts) = stale()? else { return Ok(()) };
    let files: Vec<String> =
        folder_entries(dir)?.iter().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    for file in files.iter().filter(|f| f.ends_with(MEMBER_SUFFIX)) {
        if member_is_live(&dir.join(file))? {
            return Ok(());
        }
    }
    let mut held = BTreeMap::new();
    for p in parts {
        let name = partition_lock(p);
        match try_lock(&dir.join(&name)) {
            Ok(Some(lock)) => drop(held.insert(name, lock)),
            Ok(None) | Err(Error::Io { kind: IoKind::NotFound, .. }) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    let Some(parts) = stale()? else { return Ok(()) };
    let slots: Vec<String> = parts.into_iter().flat_map(slot_files).collect();
    remove_slots(dir, &slots, fsync)?;
    tidy(dir, held)
}

/// Every folder with slots in `root`'s folder `top`: its group (or shared
/// subscription), its topic, and the number of partitions its slots cover
/// (the highest with slots, plus one), as the slots of that highest one
/// say.
fn folders_in(root: &Path, top: &str, repair: bool) -> Result<Vec<(String, String, u32)>> {
    let mut found = Vec::new();
    for entry in folder_entries(&root.join(top))? {
        let dir = entry.path();
        let Some(&last) = slot_partitions(&dir)?.last() else { continue };
        let files = slot_files(last);
        let (held, ..) = read_slots_of::<MemberSlot>(&dir, &files.each_ref().map(String::as_str), repair)?;
        found.extend(held.offsets.groups.into_iter().map(|(g, t, _)| (g, t, last + 1)));
    }
    Ok(found)
}

/// Whether shared subscription `name` has positions in `root`, read
/// without any lock (`delete_durable`'s look before it takes the name's
/// lock, see "Deleting" in `named.rs`).
pub(super) fn has_shared(root: &Path, repair: bool, name: &str) -> Result<bool> {
    Ok(folders_in(root, SHARED_DIR, repair)?.iter().any(|(n, ..)| n == name))
}

/// Forgets the positions of shared subscription `name` on every topic in
/// `root` (`delete_durable`'s part for a shared name; the caller holds the
/// name's lock exclusively, so no member can join meanwhile, see
/// `named.rs`): true if it had any, `Busy` if a member is live.
pub(super) fn forget_shared(root: &Path, fsync: Fsync, repair: bool, name: &str) -> Result<bool> {
    let mut any = false;
    for (n, topic, partitions) in folders_in(root, SHARED_DIR, repair)? {
        if n != name {
            continue;
        }
        match forget_in(root, SHARED_DIR, fsync, (name, &topic), partitions, None) {
            Ok(()) => any = true,
            Err(Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(any)
}

/// Every (group, topic) with commits under `groups/` in `root` of the
/// topic as `listed` (the topic list) names it, sorted: a folder whose
/// slots all hold another topic's of that name (deleted, see "Deleting a
/// topic") is not listed, nor one whose topic is not listed (unless its
/// commits go by name alone).
pub(super) fn group_list(root: &Path, repair: bool, listed: &[TopicMeta]) -> Result<Vec<(String, String)>> {
    let mut list = Vec::new();
    for entry in folder_entries(&root.join(GROUPS_DIR))? {
        let dir = entry.path();
        for p in slot_partitions(&dir)? {
            let files = slot_files(p);
            let (held, ..) = read_slots_of::<MemberSlot>(&dir, &files.each_ref().map(String::as_str), repair)?;
            let Some((group, topic, _)) = held.offsets.groups.first() else { continue };
            let mine = listed.iter().find(|m| m.name == *topic).map(|m| m.dir);
            if held.dir == UNKNOWN_DIR || mine == Some(held.dir) {
                list.push((group.clone(), topic.clone()));
                break;
            }
        }
    }
    list.sort();
    list.dedup();
    Ok(list)
}

/// Read-only, for `holders.rs`: the folder of group `group` on topic
/// `topic` in `root` (not made if missing).
pub(super) fn group_folder(root: &Path, group: &str, topic: &str) -> PathBuf {
    root.join(GROUPS_DIR).join(group_key(group, topic))
}

/// Read-only, for `holders.rs`: true for the name of a member file.
pub(super) fn is_member_file(file: &str) -> bool {
    file.ends_with(MEMBER_SUFFIX)
}

/// Read-only, for `holders.rs`: the lock file of partition `p`.
pub(super) fn partition_lock(p: u32) -> String {
    format!("p{p}.lock")
}

/// The first `Processes` opener's move (see "Changing modes"): writes each
/// group of `offsets` into its own slots, synced, each with its topic's
/// directory number in `list` (the topic list), and takes them out of
/// `offsets`. True if there were any.
pub(super) fn move_out(root: &Path, offsets: &mut Offsets, repair: bool, list: &[TopicMeta]) -> Result<bool> {
    if offsets.groups.is_empty() {
        return Ok(false);
    }
    for (group, topic, committed) in std::mem::take(&mut offsets.groups) {
        let dir = group_dir(root, Fsync::Always, &group, &topic)?;
        let topic_dir = list.iter().find(|t| t.name == topic).map_or(UNKNOWN_DIR, |t| t.dir);
        for (p, offset) in committed.iter().enumerate() {
            let p = p as u32;
            let files = slot_files(p);
            let (old, seq, slot) = read_slots_of::<MemberSlot>(&dir, &files.each_ref().map(String::as_str), repair)?;
            let commit = GroupCommit::with_files(&dir, files, seq, slot, &old);
            commit.wait(commit.request(snapshot(&group, &topic, p, *offset, topic_dir), true))?;
        }
    }
    Ok(true)
}

/// An `Exclusive` opener's move (see "Changing modes"): folds every
/// group's own slots into `offsets` (theirs win, partition by partition).
/// True if there were any: the caller writes the offsets, synced, then
/// calls [`remove_groups`]. A commit stored with a directory number its
/// topic is not listed in by `list` (the topic list) is left out: the
/// offsets slots hold commits by topic name alone (see "Commits and
/// directory numbers").
pub(super) fn fold_in(root: &Path, offsets: &mut Offsets, repair: bool, list: &[TopicMeta]) -> Result<bool> {
    let entries = folder_entries(&root.join(GROUPS_DIR))?;
    let any = !entries.is_empty();
    for entry in entries {
        let dir = entry.path();
        for p in slot_partitions(&dir)? {
            let files = slot_files(p);
            let (own, ..) = read_slots_of::<MemberSlot>(&dir, &files.each_ref().map(String::as_str), repair)?;
            let listed = |topic: &str| list.iter().any(|t| t.name == topic && t.dir == own.dir);
            let Some((group, topic, committed)) = own.offsets.groups.first().cloned() else { continue };
            if own.dir != UNKNOWN_DIR && !listed(&topic) {
                continue;
            }
            let Some(offset) = committed.get(p as usize).copied().flatten() else { continue };
            let i = match offsets.groups.iter().position(|(g, t, _)| *g == group && *t == topic) {
                Some(i) => i,
                None => {
                    offsets.groups.push((group, topic, Vec::new()));
                    offsets.groups.len() - 1
                }
            };
            let c = &mut offsets.groups[i].2;
            if c.len() <= p as usize {
                c.resize(p as usize + 1, None);
            }
            c[p as usize] = Some(offset);
        }
    }
    offsets.groups.sort();
    Ok(any)
}

/// Removes `groups/` once [`fold_in`]'s result is written.
pub(super) fn remove_groups(root: &Path) -> Result<()> {
    let dir = root.join(GROUPS_DIR);
    match fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != IoKind::NotFound => Err(Error::io(&dir, &e)),
        _ => sync_dir(root),
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let p =
            std::env::temp_dir().join(format!("rill-groups-{tag}-{}-{}", std::process::id(), crate::sync::unique_id()));
        fs::create_dir_all(&p).unwrap();
        p
    }

    #[test]
    fn the_targets_split_every_partition_once() {
        for n in 0..9u32 {
            for m in 1..7usize {
                let mut all: Vec<u32> = (0..m).flat_map(|i| target(i, m, n)).collect();
                all.sort_unstable();
                assert_eq!(all, (0..n).collect::<Vec<_>>(), "n={n} m={m}");
                let sizes: Vec<usize> = (0..m).map(|i| target(i, m, n).len()).collect();
                assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1, "n={n} m={m}");
            }
        }
    }

    #[test]
    fn two_members_split_a_group_and_a_dead_ones_partitions_go_to_the_survivor() {
        let root = temp_dir("split");
        let (r, f) = (root.as_path(), Fsync::Never);
        let mut a = Membership::join(r, f, false, ("g", "t", 1), 4, 1).unwrap();
        let target = a.target().unwrap();
        assert!(a.rebalance(&target).unwrap());
        assert_eq!(a.owned(), [0, 1, 2, 3]);
        assert!(a.commit(3, 7, false).unwrap());
        let mut b = Membership::join(r, f, false, ("g", "t", 1), 4, 2).unwrap();
        let tb = b.target().unwrap();
        assert_eq!(tb.len(), 2);
        // Its partitions are still a's: nothing taken until a lets go.
        assert!(!b.rebalance(&tb).unwrap());
        assert!(b.owned().is_empty());
        let ta = a.target().unwrap();
        a.rebalance(&ta).unwrap();
        assert!(b.rebalance(&tb).unwrap());
        let mut both: Vec<u32> = a.owned().into_iter().chain(b.owned()).collect();
        both.sort_unstable();
        assert_eq!(both, [0, 1, 2, 3]);
        // What a committed is seen by b, whoever owns it.
        assert_eq!(b.committed(3).unwrap(), Some(7));
        drop(a);
        let target = b.target().unwrap();
        assert!(b.rebalance(&target).unwrap());
        assert_eq!(b.owned(), [0, 1, 2, 3]);
        assert_eq!(b.committed(3).unwrap(), Some(7));
        assert!(matches!(forget_group(r, f, false, ("g", "t", 1), 4), Err(Error::Busy(_))));
        drop(b);
        forget_group(r, f, false, ("g", "t", 1), 4).unwrap();
        assert_eq!(group_committed(r, false, ("g", "t", 1), 4).unwrap(), None);
    }

    #[test]
    fn a_shared_member_takes_without_giving_up_and_gives_up_one_at_a_time() {
        let root = temp_dir("shared");
        let (r, f) = (root.as_path(), Fsync::Never);
        let mut a = Membership::join_in(r, SHARED_DIR, f, false, ("w", "t", 1), 2, 1).unwrap();
        assert_eq!(a.take(&[0, 1]).unwrap(), [(0, None), (1, None)]);
        assert!(a.commit(1, 4, false).unwrap());
        let mut b = Membership::join_in(r, SHARED_DIR, f, false, ("w", "t", 1), 2, 2).unwrap();
        // a's target is one partition now, but `take` gives nothing up.
        assert_eq!(a.target().unwrap().len(), 1);
        let target = a.target().unwrap();
        assert!(a.take(&target).unwrap().is_empty());
        assert_eq!(a.owned(), [0, 1]);
        assert!(b.take(&[1]).unwrap().is_empty(), "still a's");
        a.give_up(1);
        assert_eq!(b.take(&[1]).unwrap(), [(1, Some(4))], "from a's last commit");
        // Kept apart from the consumer groups.
        assert!(group_list(r, false, &topics(&[("t", 1)])).unwrap().is_empty());
    }

    #[test]
    fn a_member_file_left_unlocked_is_a_dead_member() {
        let root = temp_dir("dead");
        let (r, f) = (root.as_path(), Fsync::Never);
        let mut a = Membership::join(r, f, false, ("g", "t", 1), 2, 1).unwrap();
        // A member whose process died: its file is there, nobody locks it.
        fs::write(a.dir.join(format!("0000000001-dead{MEMBER_SUFFIX}")), b"pid 1\n").unwrap();
        assert_eq!(a.target().unwrap(), [0, 1]);
        assert_eq!(a.live_members().unwrap(), std::slice::from_ref(&a.name));
    }

    #[test]
    fn a_deleted_topics_groups_are_forgotten_unless_a_member_is_live() {
        let root = temp_dir("drop");
        let (r, f) = (root.as_path(), Fsync::Never);
        for (group, topic) in [("g", "t"), ("h", "t"), ("g", "u")] {
            let mut m = Membership::join(r, f, false, (group, topic, 1), 2, 1).unwrap();
            let target = m.target().unwrap();
            m.rebalance(&target).unwrap();
            assert!(m.commit(1, 5, false).unwrap());
        }
        let live = Membership::join(r, f, false, ("h", "t", 1), 2, 2).unwrap();
        let all = |v: &[(&str, &str)]| v.iter().map(|(g, t)| (g.to_string(), t.to_string())).collect::<Vec<_>>();
        let listed = topics(&[("t", 1), ("u", 1)]);
        assert_eq!(group_list(r, false, &listed).unwrap(), all(&[("g", "t"), ("g", "u"), ("h", "t")]));
        drop_topic(r, f, false, "t", &[1]).unwrap();
        assert_eq!(group_list(r, false, &listed).unwrap(), all(&[("g", "u"), ("h", "t")]));
        assert_eq!(group_committed(r, false, ("g", "t", 1), 2).unwrap(), None);
        assert_eq!(group_committed(r, false, ("h", "t", 1), 2).unwrap(), Some(vec![None, Some(5)]), "a live member's");
        assert_eq!(group_committed(r, false, ("g", "u", 1), 2).unwrap(), Some(vec![None, Some(5)]), "another topic's");
        drop(live);
    }

    #[test]
    fn a_shared_subscriptions_positions_are_forgotten_by_name_and_by_topic_unless_a_member_is_live() {
        let root = temp_dir("shared-forget");
        let (r, f) = (root.as_path(), Fsync::Never);
        let saved = |name: &str, topic: &str| {
            let dir = r.join(SHARED_DIR).join(group_key(name, topic));
            dir.is_dir() && !slot_partitions(&dir).unwrap().is_empty()
        };
        for (name, topic) in [("w", "t"), ("w", "u"), ("v", "t")] {
            let mut m = Membership::join_in(r, SHARED_DIR, f, false, (name, topic, 1), 2, 1).unwrap();
            m.take(&[0, 1]).unwrap();
            assert!(m.commit(1, 5, false).unwrap());
        }
        // A group of the same name is not a shared subscription's.
        let mut g = Membership::join(r, f, false, ("w", "t", 1), 2, 1).unwrap();
        let target = g.target().unwrap();
        g.rebalance(&target).unwrap();
        assert!(g.commit(0, 3, false).unwrap());
        drop(g);
        let live = Membership::join_in(r, SHARED_DIR, f, false, ("w", "u", 1), 2, 2).unwrap();
        assert!(matches!(forget_shared(r, f, false, "w"), Err(Error::Busy(_))), "a member of w on u is live");
        drop(live);
        assert!(forget_shared(r, f, false, "w").unwrap());
        assert!(!saved("w", "t") && !saved("w", "u") && saved("v", "t"));
        assert!(!forget_shared(r, f, false, "w").unwrap(), "nothing left");
        assert_eq!(group_committed(r, false, ("w", "t", 1), 2).unwrap(), Some(vec![Some(3), None]));
        let live = Membership::join_in(r, SHARED_DIR, f, false, ("v", "t", 1), 2, 2).unwrap();
        drop_topic(r, f, false, "t", &[1]).unwrap();
        assert!(saved("v", "t"), "a live member's");
        drop(live);
        drop_topic(r, f, false, "t", &[1]).unwrap();
        assert!(!saved("v", "t"));
        assert_eq!(group_committed(r, false, ("w", "t", 1), 2).unwrap(), None, "the group's too");
    }

    /// A commit is stored with its topic's directory number: a member of
    /// the topic created again (a larger number) starts afresh, a member of
    /// the deleted one (a smaller number) does not take the partition, and
    /// a slot of format 1 (no number) is read by name alone.
    #[test]
    fn a_commit_of_another_directory_is_not_resumed() {
        let root = temp_dir("dirs");
        let (r, f) = (root.as_path(), Fsync::Never);
        let mut old = Membership::join_in(r, SHARED_DIR, f, false, ("w", "t", 4), 2, 1).unwrap();
        old.take(&[0, 1]).unwrap();
        assert!(old.commit(0, 7, false).unwrap());
        old.let_go();
        // The topic deleted and created again in directory 5, while the old
        // member (its process not told yet) is still a member.
        let mut new = Membership::join_in(r, SHARED_DIR, f, false, ("w", "t", 5), 2, 2).unwrap();
        assert_eq!(new.take(&[0]).unwrap(), [(0, None)], "not the old topic's 7");
        assert!(new.commit(0, 2, false).unwrap());
        new.let_go();
        assert!(old.take(&[0]).unwrap().is_empty(), "the newer topic's partition");
        assert_eq!(old.committed(0).unwrap(), None);
        assert_eq!(new.committed(0).unwrap(), Some(2));
        // The group's read-only view goes by the number too.
        let mut g = Membership::join(r, f, false, ("g", "t", 5), 1, 3).unwrap();
        g.rebalance(&[0]).unwrap();
        assert!(g.commit(0, 9, false).unwrap());
        drop(g);
        assert_eq!(group_committed(r, false, ("g", "t", 5), 1).unwrap(), Some(vec![Some(9)]));
        // A topic of the name created again: the group never consumed it.
        assert_eq!(group_committed(r, false, ("g", "t", 6), 1).unwrap(), None);
        // Format 1 (what rill wrote before): by name alone, in any directory.
        let dir = folder_in(r, GROUPS_DIR, f, "h", "t").unwrap();
        let commit = GroupCommit::<Offsets>::with_files(&dir, slot_files(0), 0, 0, &Offsets::default());
        let v1 = Offsets { groups: vec![("h".into(), "t".into(), vec![Some(3)])], durable: Vec::new() };
        commit.wait(commit.request(v1, false)).unwrap();
        let mut h = Membership::join(r, f, false, ("h", "t", 8), 1, 4).unwrap();
        assert_eq!(h.take(&[0]).unwrap(), [(0, Some(3))]);
        // And the Exclusive opener's fold drops a commit of a directory the
        // topic is not listed in.
        assert!(h.commit(0, 4, false).unwrap());
        drop(h);
        let listed = |dir| [TopicMeta { name: "t".into(), dir, options: Default::default() }];
        let mut offsets = Offsets::default();
        assert!(fold_in(r, &mut offsets, false, &listed(8)).unwrap());
        assert!(offsets.groups.contains(&("h".into(), "t".into(), vec![Some(4)])), "{offsets:?}");
        let mut offsets = Offsets::default();
        fold_in(r, &mut offsets, false, &listed(9)).unwrap();
        assert!(offsets.groups.iter().all(|(g, ..)| g != "h"), "{offsets:?}");
    }

    /// A group whose slots hold only a deleted topic's commits (a member
    /// was live at the delete, so the deleter kept them) is no group of the
    /// topic created again under the name: not listed, no commits,
    /// `NotFound` to delete; once a member of the new topic commits, it is.
    #[test]
    fn a_deleted_topics_commits_are_no_group_of_the_topic_created_again() {
        let root = temp_dir("ghost");
        let (r, f) = (root.as_path(), Fsync::Never);
        let mut old = Membership::join(r, f, false, ("g", "t", 3), 2, 1).unwrap();
        let target = old.target().unwrap();
        old.rebalance(&target).unwrap();
        assert!(old.commit(0, 4, false).unwrap() && old.commit(1, 6, false).unwrap());
        drop_topic(r, f, false, "t", &[1]).unwrap();
        drop(old);
        let (old_list, new_list) = (topics(&[("t", 3)]), topics(&[("t", 4)]));
        let pair = vec![("g".to_owned(), "t".to_owned())];
        assert_eq!(group_list(r, false, &old_list).unwrap(), pair, "the old topic's, read as of its list");
        assert!(group_list(r, false, &new_list).unwrap().is_empty());
        assert!(group_list(r, false, &[]).unwrap().is_empty(), "nor with the name unlisted");
        assert_eq!(group_committed(r, false, ("g", "t", 4), 2).unwrap(), None);
        assert!(matches!(forget_group(r, f, false, ("g", "t", 4), 2), Err(Error::NotFound(_))));
        // A live member of the new topic, before any commit: `Busy`, as in
        // one process.
        let mut new = Membership::join(r, f, false, ("g", "t", 4), 2, 2).unwrap();
        assert!(matches!(forget_group(r, f, false, ("g", "t", 4), 2), Err(Error::Busy(_))));
        let target = new.target().unwrap();
        new.rebalance(&target).unwrap();
        assert!(new.commit(1, 2, false).unwrap());
        drop(new);
        assert_eq!(group_list(r, false, &new_list).unwrap(), pair);
        assert_eq!(group_committed(r, false, ("g", "t", 4), 2).unwrap(), Some(vec![None, Some(2)]));
        forget_group(r, f, false, ("g", "t", 4), 2).unwrap();
        assert_eq!(slot_partitions(&group_folder(r, "g", "t")).unwrap(), [0u32; 0], "the old topic's slots too");
    }

    fn topics(names: &[(&str, u64)]) -> Vec<TopicMeta> {
        names.iter().map(|&(name, dir)| TopicMeta { name: name.into(), dir, options: Default::default() }).collect()
    }

    #[test]
    fn group_offsets_move_out_and_fold_back_in() {
        let root = temp_dir("move");
        let r = root.as_path();
        let mut offsets = Offsets { groups: vec![("g".into(), "t".into(), vec![Some(3), None])], durable: Vec::new() };
        assert!(move_out(r, &mut offsets, false, &[]).unwrap());
        assert!(offsets.groups.is_empty());
        assert_eq!(group_committed(r, false, ("g", "t", 1), 2).unwrap(), Some(vec![Some(3), None]));
        assert!(fold_in(r, &mut offsets, false, &[]).unwrap());
        assert_eq!(offsets.groups, vec![("g".into(), "t".into(), vec![Some(3)])]);
        remove_groups(r).unwrap();
        assert!(!r.join(GROUPS_DIR).exists());
    }
}
