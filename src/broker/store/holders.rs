//! Who holds what in a data directory shared by processes (issue 39),
//! read without taking anything: for the operator calls
//! (`Broker::named_subscriptions`, `Broker::group_members`).
//!
//! # Read, never try
//!
//! A durable name is held while some process holds `named/<key>.lock`, a
//! group member is live while its process holds its `.member` file, and a
//! partition is owned while a member holds `p<N>.lock` (see `named.rs` and
//! `membership.rs`). Finding out by trying those locks would take them for
//! a moment, and a process that tries to take the name or the partition in
//! that moment would be refused (`Busy`, or a partition left unowned for
//! one look). So a reader asks the kernel instead: Linux lists every
//! `flock` held on the machine in `/proc/locks`, with the pid of the
//! process that took it and the device and inode of its file. A file is
//! held when its device and inode are listed there; the pid is the
//! holder's. The kernel drops a dead process's locks, so a name or a
//! member whose process died reads as not held at once (a member's file
//! stays until a live member's next look removes it; it is not listed).
//!
//! The listing is a snapshot: a lock taken or dropped while it is read may
//! show either way, as any statistic across processes.
//!
//! # A page at a time
//!
//! A lock held all through a read of `/proc/locks` may still be missing
//! from it. The kernel hands the listing out a page per `read` call, and
//! each call walks its lists from the position where the last one
//! stopped, counted in entries: a lock dropped before that position
//! between two calls moves every later entry one place back, and the entry
//! that moves across the page boundary is never handed out. On a busy
//! machine (hundreds of locks, taken and dropped all the time) that hides
//! a held lock in a fraction of a percent of reads, which would read as a
//! live member gone or a held name free. So the table is the union of
//! reads taken one after the other, until two in a row agree or
//! [`LOCK_READS`] have been taken: a lock held all through is missing only
//! if every read missed it. What the union adds is a lock dropped during
//! the reads, which the snapshot may show either way already.

use std::collections::HashMap;
use std::fs;
use std::io::ErrorKind as IoKind;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::membership::{GROUPS_DIR, group_folder, is_member_file, partition_lock};
use super::named::{NAMED_DIR, durable_mark, folder_entries, slot_files};
use super::offsets::read_slots;
use crate::error::{Error, Result};

/// The `flock`s held on the machine: pid by (device, inode).
#[derive(Debug, Default)]
pub(crate) struct LockTable(HashMap<(u32, u32, u64), Held>);

/// A file's `flock` as `/proc/locks` lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    /// The pid of a process holding it (with shared locks, one of them).
    pid: u32,
    /// An exclusive lock (`LOCK_EX`, listed `WRITE`), not shared ones.
    exclusive: bool,
}

/// The most reads of `/proc/locks` one [`LockTable::read`] unites (see "A
/// page at a time"): while locks come and go, two reads in a row seldom
/// agree, and a held lock each read misses independently is missed by
/// all of them far less often than by one.
const LOCK_READS: usize = 4;

impl LockTable {
    /// Reads `/proc/locks` (an empty table where there is none): the union
    /// of reads until two in a row agree (see "A page at a time").
    pub(crate) fn read() -> Result<Self> {
        Self::united(Self::read_once)
    }

    /// The union of the tables `read_once` gives, until two in a row agree
    /// or [`LOCK_READS`] have been taken (an empty table if it gives none).
    fn united(mut read_once: impl FnMut() -> Result<Option<Self>>) -> Result<Self> {
        let Some(mut last) = read_once()? else { return Ok(Self::default()) };
        let mut union = Self(last.0.clone());
        for _ in 1..LOCK_READS {
            let Some(next) = read_once()? else { break };
            let agree = next.0 == last.0;
            for (&file, &held) in &next.0 {
                union.0.entry(file).or_insert(held);
            }
            if agree {
                break;
            }
            last = next;
        }
        Ok(union)
    }

    /// One read of `/proc/locks`: `None` where there is none.
    fn read_once() -> Result<Option<Self>> {
        let path = Path::new("/proc/locks");
        match fs::read_to_string(path) {
            Ok(text) => Ok(Some(Self::parse(&text))),
            Err(e) if e.kind() == IoKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(path, &e)),
        }
    }

    /// Parses the text of `/proc/locks`: lines such as
    /// `2: FLOCK  ADVISORY  WRITE 4711 fe:00:464 0 EOF`, where the device
    /// is `major:minor` in hex and the inode in decimal; a waiter's line
    /// (`2: -> FLOCK ...`) holds nothing and is passed over, and so are
    /// POSIX record locks (rill takes none).
    fn parse(text: &str) -> Self {
        let mut held = HashMap::new();
        for line in text.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [_, "FLOCK", _, kind, pid, file, ..] = fields.as_slice() else { continue };
            let mut parts = file.split(':');
            let (Some(major), Some(minor), Some(inode), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let (Ok(major), Ok(minor), Ok(inode), Ok(pid)) = (
                u32::from_str_radix(major, 16),
                u32::from_str_radix(minor, 16),
                inode.parse::<u64>(),
                pid.parse::<u32>(),
            ) else {
                continue;
            };
            held.insert((major, minor, inode), Held { pid, exclusive: *kind == "WRITE" });
        }
        Self(held)
    }

    /// The pid of the process holding a `flock` on `path`: `None` if no
    /// one does (or the file is gone).
    pub(crate) fn holder(&self, path: &Path) -> Option<u32> {
        self.held(path).map(|h| h.pid)
    }

    /// The pid of the process holding an exclusive `flock` on `path`:
    /// `None` if none does (shared locks only, or none, or the file is
    /// gone).
    pub(crate) fn exclusive_holder(&self, path: &Path) -> Option<u32> {
        self.held(path).filter(|h| h.exclusive).map(|h| h.pid)
    }

    fn held(&self, path: &Path) -> Option<Held> {
        let meta = fs::metadata(path).ok()?;
        let dev = meta.dev();
        self.0.get(&(libc::major(dev), libc::minor(dev), meta.ino())).copied()
    }
}

/// The name a durable name's key stands for: the hex decoded, or, for a
/// long name's key (cut and hashed, see `named::key`), the name its slots
/// hold; `None` if neither can be had.
fn name_of(dir: &Path, key: &str, repair: bool) -> Option<String> {
    if let Some(name) = unhex(key) {
        return Some(name);
    }
    let files = [format!("{key}.0"), format!("{key}.1")];
    let (offsets, ..) = read_slots(dir, &files.each_ref().map(String::as_str), repair).ok()?;
    offsets.durable.into_iter().next().map(|(name, _)| name)
}

/// The text whose UTF-8 bytes `hex` spells, two hex digits a byte; `None`
/// if it spells none (a long name's key, cut and hashed, holds a `-`).
fn unhex(hex: &str) -> Option<String> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> =
        (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok()).collect();
    String::from_utf8(bytes?).ok()
}

/// Every durable name of the directory `root`, with the pid of the process
/// holding it now (`None`: not held), sorted by name: a name whose lock a
/// process holds exclusively, or with the mark of a durable taker or slots
/// of positions (see `named.rs`). A lock file alone is a shared
/// subscription's name (its members hold it shared), or one left by a
/// delete that failed before removing it: neither is a durable name.
pub(super) fn named_holders(root: &Path, repair: bool, locks: &LockTable) -> Result<Vec<(String, Option<u32>)>> {
    let dir = root.join(NAMED_DIR);
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == IoKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(&dir, &e)),
    };
    let mut list = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(&dir, &e))?;
        let file = entry.file_name();
        let Some(key) = file.to_str().and_then(|f| f.strip_suffix(".lock")) else { continue };
        let holder = locks.exclusive_holder(&entry.path());
        let [a, b] = slot_files(key);
        if holder.is_none() && ![durable_mark(key), a, b].iter().any(|f| dir.join(f).exists()) {
            continue;
        }
        let Some(name) = name_of(&dir, key, repair) else { continue };
        list.push((name, holder));
    }
    list.sort();
    Ok(list)
}

/// A live member of a group as its file says, with the partitions the
/// member's process holds for the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemberFile {
    pub(crate) pid: u32,
    pub(crate) id: u64,
    pub(crate) partitions: Vec<u32>,
}

/// The live members of group `group` on topic `topic` of `partitions`
/// partitions in `root` (a member file whose lock nobody holds is a dead
/// member's, not listed), sorted by (pid, id), each with the partitions
/// whose lock its process holds.
pub(super) fn group_holders(
    root: &Path,
    (group, topic): (&str, &str),
    partitions: u32,
    locks: &LockTable,
) -> Result<Vec<MemberFile>> {
    let dir = group_folder(root, group, topic);
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == IoKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(&dir, &e)),
    };
    let owners: Vec<Option<u32>> = (0..partitions).map(|p| locks.holder(&dir.join(partition_lock(p)))).collect();
    let mut members = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(&dir, &e))?;
        if !entry.file_name().to_str().is_some_and(is_member_file) {
            continue;
        }
        let Some((member, pid)) = live_member(&entry.path(), locks)? else { continue };
        let Some(id) = member.field("id") else { continue };
        let partitions = (0..partitions).filter(|&p| owners[p as usize] == Some(pid)).collect();
        members.push(MemberFile { pid, id, partitions });
    }
    members.sort_by_key(|m| (m.pid, m.id));
    Ok(members)
}

/// Every (group, topic, topic's directory number) of `root` with a live
/// member, as its member files say (`membership.rs`; a file from before
/// they named their group is passed over): the groups whose members have
/// not committed yet, which the commits alone do not list.
pub(super) fn member_groups(root: &Path, locks: &LockTable) -> Result<Vec<(String, String, u64)>> {
    let mut found = Vec::new();
    for folder in folder_entries(&root.join(GROUPS_DIR))? {
        for entry in folder_entries(&folder.path())? {
            if !entry.file_name().to_str().is_some_and(is_member_file) {
                continue;
            }
            let Some((member, _)) = live_member(&entry.path(), locks)? else { continue };
            let (Some(topic_dir), Some(names)) = (member.field("dir"), member.text("names").and_then(unhex)) else {
                continue;
            };
            let Some((group, topic)) = names.split_once('\0') else { continue };
            found.push((group.to_owned(), topic.to_owned(), topic_dir));
            break;
        }
    }
    Ok(found)
}

/// A member file's text, read because its lock is held by a live process.
struct Member {
    text: String,
}

impl Member {
    /// The value of the line `<name> <value>`.
    fn text(&self, name: &str) -> Option<&str> {
        self.text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
    }

    /// The value of the line `<name> <number>`.
    fn field(&self, name: &str) -> Option<u64> {
        self.text(name)?.parse().ok()
    }
}

/// The member file at `path`, if a live member holds it: its lock is held
/// (`locks`) and the process its pid names exists or is the holder. A live
/// member's look holds a dead member's file for the moment it takes to
/// remove it (see "Deaths" in `membership.rs`): that member is gone. A
/// holder that differs from a live pid is a member seen from another pid
/// namespace.
fn live_member(path: &Path, locks: &LockTable) -> Result<Option<(Member, u32)>> {
    let Some(holder) = locks.holder(path) else { return Ok(None) };
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        // Its member left meanwhile.
        Err(e) if e.kind() == IoKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, &e)),
    };
    let member = Member { text };
    let Some(pid) = member.field("pid").and_then(|p| u32::try_from(p).ok()) else { return Ok(None) };
    if holder != pid && !alive(pid) {
        return Ok(None);
    }
    Ok(Some((member, pid)))
}

/// True if a process of pid `pid` exists (one this process may not signal
/// included).
fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: signal 0 sends nothing; it only checks that `pid` exists.
    let sent = unsafe { libc::kill(pid, 0) } == 0;
    sent || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_flock_is_found_by_device_and_inode_and_waiters_and_posix_locks_are_not() {
        let table = LockTable::parse(
            "1: POSIX  ADVISORY  WRITE 10 fe:00:7 0 EOF\n\
             2: FLOCK  ADVISORY  WRITE 4711 fe:01:464 0 EOF\n\
             2: -> FLOCK  ADVISORY  WRITE 12 fe:01:465 0 EOF\n\
             3: FLOCK  ADVISORY  READ 13 08:10:99 0 EOF\n",
        );
        assert_eq!(table.0.get(&(0xfe, 1, 464)), Some(&Held { pid: 4711, exclusive: true }));
        assert_eq!(table.0.get(&(8, 16, 99)), Some(&Held { pid: 13, exclusive: false }));
        assert_eq!(table.0.len(), 2, "{table:?}");
    }

    #[test]
    fn a_file_this_process_flocks_reads_as_held_by_it_and_free_once_let_go() {
        use std::os::fd::AsRawFd;
        let path = std::env::temp_dir().join(format!("rill-holders-{}.lock", std::process::id()));
        let file = fs::File::create(&path).unwrap();
        assert_eq!(LockTable::read().unwrap().holder(&path), None);
        // SAFETY: flock on a descriptor we own, with constant flags; it touches no memory.
        assert_eq!(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
        let table = LockTable::read().unwrap();
        assert_eq!(table.holder(&path), Some(std::process::id()));
        assert_eq!(table.exclusive_holder(&path), Some(std::process::id()));
        // SAFETY: as above.
        assert_eq!(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) }, 0);
        let table = LockTable::read().unwrap();
        assert_eq!(table.holder(&path), Some(std::process::id()));
        assert_eq!(table.exclusive_holder(&path), None, "a shared lock is no exclusive holder");
        drop(file);
        assert_eq!(LockTable::read().unwrap().holder(&path), None);
        fs::remove_file(&path).unwrap();
    }

    /// Takes `how` on `file`, without blocking; true if granted.
    fn flock_now(file: &fs::File, how: libc::c_int) -> bool {
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a descriptor the caller owns, with constant flags; it touches no memory.
        unsafe { libc::flock(file.as_raw_fd(), how | libc::LOCK_NB) == 0 }
    }

    /// "A page at a time", on scripted reads: a lock one read missed is in
    /// the table; the reads stop once two in a row agree, and at
    /// [`LOCK_READS`] if none do.
    #[test]
    fn a_table_unites_reads_until_two_agree() {
        let line = |inode: u32| format!("1: FLOCK  ADVISORY  WRITE 7 fe:00:{inode} 0 EOF\n");
        let script = |texts: Vec<String>| {
            let mut texts = texts.into_iter();
            let mut reads = 0;
            let table = LockTable::united(|| {
                reads += 1;
                Ok(texts.next().map(|t| LockTable::parse(&t)))
            })
            .unwrap();
            let mut files: Vec<u64> = table.0.keys().map(|k| k.2).collect();
            files.sort_unstable();
            (files, reads)
        };
        // The first read missed 2, which was held all through.
        assert_eq!(script(vec![line(1), line(1) + &line(2), line(1) + &line(2)]), (vec![1, 2], 3));
        // Two agree at once.
        assert_eq!(script(vec![line(1), line(1), line(3)]), (vec![1], 2));
        // Locks come and go all the while: every one seen is in, and the
        // reads stop at the limit.
        let churn: Vec<String> = (1..=10).map(line).collect();
        let want: Vec<u64> = (1..=LOCK_READS as u64).collect();
        assert_eq!(script(churn), (want, LOCK_READS));
        // No listing at all: an empty table.
        assert_eq!(script(Vec::new()), (Vec::new(), 1));
    }

    /// "A page at a time", on the kernel's listing: with hundreds of locks
    /// held (the listing spans pages) and two threads taking and dropping
    /// fifty more all the while, a lock held all through is in every
    /// table read. One read of `/proc/locks` misses it in a fraction of a
    /// percent of tries. `RILL_LOCK_TABLE_READS` tables (default 300; a
    /// few thousand make a soak).
    #[test]
    fn a_lock_held_all_through_is_in_every_table_while_others_come_and_go() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = std::env::temp_dir().join(format!("rill-holders-churn-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let open = |name: String| fs::File::create(dir.join(name)).unwrap();
        let kept_path = dir.join("kept");
        let kept = open("kept".into());
        assert!(flock_now(&kept, libc::LOCK_EX));
        let held: Vec<fs::File> = (0..200).map(|i| open(format!("held{i}"))).collect();
        assert!(held.iter().all(|f| flock_now(f, libc::LOCK_EX)));
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            for t in 0..2 {
                let files: Vec<fs::File> = (0..50).map(|i| open(format!("churn{t}-{i}"))).collect();
                let stop = &stop;
                s.spawn(move || {
                    // Relaxed: a flag to stop, ordering nothing else.
                    while !stop.load(Ordering::Relaxed) {
                        files.iter().for_each(|f| assert!(flock_now(f, libc::LOCK_EX)));
                        files.iter().for_each(|f| assert!(flock_now(f, libc::LOCK_UN)));
                    }
                });
            }
            let reads = std::env::var("RILL_LOCK_TABLE_READS").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
            let missed = (0..reads).filter(|_| LockTable::read().unwrap().holder(&kept_path).is_none()).count();
            stop.store(true, Ordering::Relaxed);
            assert_eq!(missed, 0, "tables without the lock held all through");
        });
        drop((kept, held));
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A member file held by another process than the one it names, whose
    /// process is gone: a survivor's look holding a dead member's file to
    /// remove it. Not a live member.
    #[test]
    fn a_dead_members_file_held_by_a_prober_is_not_listed() {
        use std::os::fd::AsRawFd;
        let root = std::env::temp_dir().join(format!("rill-holders-probe-{}", std::process::id()));
        let dir = group_folder(&root, "g", "t");
        fs::create_dir_all(&dir).unwrap();
        let mut exited = std::process::Command::new("true").spawn().unwrap();
        let dead = exited.id();
        exited.wait().unwrap();
        let path = dir.join(format!("{dead:010}-1-1.member"));
        fs::write(&path, format!("pid {dead}\nid 1\n")).unwrap();
        assert!(is_member_file(&path.file_name().unwrap().to_string_lossy()));
        let file = fs::File::open(&path).unwrap();
        // SAFETY: flock on a descriptor we own, with constant flags; it touches no memory.
        assert_eq!(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
        let listed = group_holders(&root, ("g", "t"), 1, &LockTable::read().unwrap()).unwrap();
        assert_eq!(listed, [], "the dead member {dead} is listed");
        // Its own pid's file, held here: a live member.
        let me = std::process::id();
        let own = dir.join(format!("{me:010}-1-2.member"));
        fs::write(&own, format!("pid {me}\nid 2\n")).unwrap();
        let own_file = fs::File::open(&own).unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { libc::flock(own_file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
        let listed = group_holders(&root, ("g", "t"), 1, &LockTable::read().unwrap()).unwrap();
        assert_eq!(listed, [MemberFile { pid: me, id: 2, partitions: Vec::new() }]);
        drop((file, own_file));
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_key_decodes_to_its_name() {
        let dir = std::env::temp_dir();
        assert_eq!(name_of(&dir, &super::super::named::key("audit/ü"), false).as_deref(), Some("audit/ü"));
        // A long name's key names nothing without its slots.
        assert_eq!(name_of(&dir, &super::super::named::key(&"x".repeat(300)), false), None);
    }
}
