//! The data directory's `flock`s: `LOCK` (one broker per directory, or
//! any number of `Processes` brokers), `INIT` (`Processes` openers taking
//! turns) and `topics.lock` (the topic list in `Processes` mode). Why each
//! is there is in `mod.rs`, "One broker per directory" and "Several
//! processes". A durable subscription's name has a lock of its own in
//! `Processes` mode, taken with the helpers here (see `named.rs`).
//!
//! # Removing a lock file
//!
//! The directory's own lock files stay for as long as the directory does.
//! A durable name's lock file and a group's partition lock files
//! (`named.rs`, `membership.rs`) go when what they guard is deleted, or
//! one file a name ever used would stay behind for good. Removing a file
//! that someone may be about to lock needs care: a process that opened it
//! just before it was unlinked can still lock it afterwards, and a lock on
//! a removed file keeps no one out, since whoever opens the path next
//! makes a new file and locks that one. Two rules keep that from happening:
//!
//! 1. only a holder of a file's exclusive lock removes it
//!    ([`remove_locked`]), while still holding the lock, as the last thing
//!    it does under that lock (once the file is gone, a taker may make
//!    the path's next file and lock it, so the remover's hold ends there);
//! 2. a taker, once its lock is granted, checks that the path still names
//!    the file it locked (the same device and inode, [`lock_file_at`]); if
//!    the path names another file, or none, it lets go and starts again
//!    from the open.
//!
//! Why that is enough: once a taker's check passes, it holds a lock on
//! the file that the path named at the check. Under rule 1 nobody removes
//! that file without its lock, which the taker holds (an exclusive lock
//! excludes every other; a shared one excludes the exclusive lock a
//! remover needs). So the path goes on naming the taker's file for as long
//! as the taker holds it, and every other taker who passes its check is on
//! that same file, where the kernel keeps them apart. A taker that locked
//! a file removed before its check finds the path changed and retries, so
//! it never acts on a lock that keeps no one out. The folder a lock file
//! lies in may go too (`membership.rs`, "Deleting a group"): an open in a
//! folder that is gone fails with `NotFound`, which each caller handles.

use std::fs::File;
use std::io::ErrorKind as IoKind;
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::error::{Error, Result};
use crate::log::Sharing;

/// Name of the lock file.
pub(super) const LOCK_FILE: &str = "LOCK";
/// Name of the file whose lock makes Processes openers take turns (see
/// "Several processes").
const INIT_FILE: &str = "INIT";
/// Name of the file whose lock guards the topic list in Processes mode.
const TOPICS_LOCK_FILE: &str = "topics.lock";

/// A file whose `flock` this broker holds, let go explicitly when dropped.
///
/// A `flock` belongs to the open file description, not the descriptor: a
/// child that another thread of this process forks would hold a copy of
/// the description, and closing ours alone would leave the lock held
/// until the child's copy went. A forked child gets files of its own in
/// place of every lock file ("A child of `fork` lets go of them" in
/// `log/file/lock_file.rs`); where that could not be done (the child ran
/// out of descriptors), `LOCK_UN` still lets go of the lock for every
/// copy at once, so this unlocks before the close.
#[derive(Debug)]
pub(crate) struct Locked(LockFile);

impl Locked {
    /// `file`, whose lock the caller has just taken.
    pub(super) fn new(file: LockFile) -> Self {
        Self(file)
    }

    pub(super) fn file(&self) -> &File {
        &self.0
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        // SAFETY: flock on a descriptor we own, with constant flags; it touches no memory.
        // A failure leaves the lock to the close that follows, as before.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

pub(crate) use crate::log::file::LockFile;
/// Opens (creating if missing, never truncating) a lock file; or only one
/// that exists.
pub(super) use crate::log::file::{open_existing_lock_file, open_lock_file};

/// Opens the lock file `path` (made if missing) and takes its `flock`
/// with `op`: `None` if `LOCK_NB` was asked for and the lock is held
/// elsewhere. The lock returned is on the file `path` names (see "Removing
/// a lock file": a file removed between the open and the lock is let go
/// and the path opened again).
pub(super) fn lock_file_at(path: &Path, op: libc::c_int) -> Result<Option<Locked>> {
    loop {
        let file = open_lock_file(path)?;
        if let Some(locked) = lock_opened(file, path, op)? {
            return Ok(locked);
        }
    }
}

/// [`lock_file_at`] for a lock file that exists: `None` if it is held
/// elsewhere or missing (nothing is made), for a caller that found the
/// file listed and must not leave a new one behind if it went since.
pub(super) fn lock_existing_file_at(path: &Path, op: libc::c_int) -> Result<Option<Locked>> {
    loop {
        let Some(file) = open_existing_lock_file(path)? else { return Ok(None) };
        if let Some(locked) = lock_opened(file, path, op)? {
            return Ok(locked);
        }
    }
}

/// Takes the lock of `file`, opened at `path`: `Some(None)` if it is held
/// elsewhere, `Some(Some)` once taken on the file the path names, `None`
/// if the file was removed since the open (the caller opens again).
fn lock_opened(file: LockFile, path: &Path, op: libc::c_int) -> Result<Option<Option<Locked>>> {
    if !flock(&file, path, op)? {
        return Ok(Some(None));
    }
    let locked = Locked::new(file);
    Ok(names_locked(path, &locked)?.then_some(Some(locked)))
}

/// True if `path` names the file `locked` holds the lock of; false if
/// that file has been removed (the path names another file, or none).
pub(super) fn names_locked(path: &Path, locked: &Locked) -> Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let held = locked.file().metadata().map_err(|e| Error::io(path, &e))?;
    match std::fs::metadata(path) {
        Ok(named) => Ok(named.dev() == held.dev() && named.ino() == held.ino()),
        Err(e) if e.kind() == IoKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(path, &e)),
    }
}

/// Removes the lock file `path`, whose exclusive lock `locked` holds
/// (taken with [`lock_file_at`], so the path names it), before that lock
/// is let go (see "Removing a lock file").
pub(super) fn remove_locked(path: &Path, locked: &Locked) -> Result<()> {
    debug_assert!(names_locked(path, locked).unwrap_or(true), "a lock file is removed by the holder of its lock");
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != IoKind::NotFound => Err(Error::io(path, &e)),
        _ => Ok(()),
    }
}

/// `flock(fd, op)`: `Ok(false)` if `LOCK_NB` was asked for and the lock is
/// held elsewhere.
pub(super) fn flock(file: &File, path: &Path, op: libc::c_int) -> Result<bool> {
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
/// held `INIT` of a Processes opener (let go in `Store::opened`), and
/// whether this opener is the first.
pub(super) fn lock_dir(root: &Path, sharing: Sharing) -> Result<(Locked, Option<Locked>, bool)> {
    let busy = |why: &str| Error::Busy(format!("the data directory {root:?} is open in another broker{why}"));
    let (lock_path, init_path) = (root.join(LOCK_FILE), root.join(INIT_FILE));
    let init = open_lock_file(&init_path)?;
    let lock = open_lock_file(&lock_path)?;
    match sharing {
        Sharing::Exclusive => {
            // INIT too, so no one takes LOCK in a first opener's turn from
            // exclusive to shared; let go at once (`init` drops).
            // Whoever holds it opened it exclusively or shared by processes:
            // either way an exclusive opener waits for every one to close.
            let either = " (an exclusive broker needs the directory to itself)";
            if !flock(&init, &init_path, libc::LOCK_EX | libc::LOCK_NB)? {
                return Err(busy(either));
            }
            let _init = Locked::new(init);
            if !flock(&lock, &lock_path, libc::LOCK_EX | libc::LOCK_NB)? {
                return Err(busy(either));
            }
            Ok((Locked::new(lock), None, true))
        }
        Sharing::Processes => {
            // Blocking: the opener before this one is recovering or joining.
            flock(&init, &init_path, libc::LOCK_EX)?;
            let init = Locked::new(init);
            if flock(&lock, &lock_path, libc::LOCK_EX | libc::LOCK_NB)? {
                return Ok((Locked::new(lock), Some(init), true));
            }
            if !flock(&lock, &lock_path, libc::LOCK_SH | libc::LOCK_NB)? {
                // Held exclusively, after the first opener's turn: by a
                // broker that opened it exclusively.
                return Err(busy(
                    " exclusively (Sharing::Exclusive): it cannot be shared by processes until that broker closes",
                ));
            }
            Ok((Locked::new(lock), Some(init), false))
        }
    }
}

/// Holds `topics.lock` exclusively while alive (Processes mode).
pub(super) fn lock_topic_list(root: &Path) -> Result<Locked> {
    let path = root.join(TOPICS_LOCK_FILE);
    let file = open_lock_file(&path)?;
    flock(&file, &path, libc::LOCK_EX)?;
    Ok(Locked::new(file))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn temp_path(tag: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("rill-lock-{tag}-{}-{}.lock", std::process::id(), crate::sync::unique_id()))
    }

    #[test]
    fn a_lock_on_a_removed_file_is_told_from_the_paths_and_not_returned() {
        let path = temp_path("removed");
        const EX: libc::c_int = libc::LOCK_EX | libc::LOCK_NB;
        // A taker opens the file, then a deleter holding its lock removes it.
        let stale = open_lock_file(&path).unwrap();
        let deleter = lock_file_at(&path, EX).unwrap().expect("nobody holds it");
        remove_locked(&path, &deleter).unwrap();
        drop(deleter);
        // The taker's lock is granted, on a file the path no longer names.
        assert!(flock(&stale, &path, EX).unwrap());
        let stale = Locked::new(stale);
        assert!(!names_locked(&path, &stale).unwrap());
        // A taker through the path gets the file it names now, which keeps
        // the next one out.
        let first = lock_file_at(&path, EX).unwrap().expect("the new file is free");
        assert!(names_locked(&path, &first).unwrap());
        assert!(lock_file_at(&path, EX).unwrap().is_none());
        drop((stale, first));
        std::fs::remove_file(&path).unwrap();
    }

    /// Takers racing a deleter that removes the file each time it holds
    /// it: no two ever hold the path at once. Without the check of
    /// [`lock_file_at`], a taker that opened the file just before a removal
    /// holds it while another holds the new file.
    #[test]
    fn takers_racing_removals_never_hold_the_path_together() {
        let path = temp_path("race");
        let held = AtomicBool::new(false);
        let rounds = if cfg!(debug_assertions) { 3_000 } else { 20_000 };
        std::thread::scope(|s| {
            for t in 0..4 {
                let (path, held) = (&path, &held);
                s.spawn(move || {
                    for i in 0..rounds {
                        let Some(lock) = lock_file_at(path, libc::LOCK_EX | libc::LOCK_NB).unwrap() else { continue };
                        assert!(!held.swap(true, Ordering::SeqCst), "two takers hold {path:?}");
                        // The hold ends before the removal, its last act
                        // (a taker of the path's next file may hold it
                        // from then on).
                        held.store(false, Ordering::SeqCst);
                        if (i + t) % 2 == 0 {
                            remove_locked(path, &lock).unwrap();
                        }
                        drop(lock);
                    }
                });
            }
        });
        let _ = std::fs::remove_file(&path);
    }
}
