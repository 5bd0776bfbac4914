//! The data directory's `flock`s: `LOCK` (one broker per directory, or
//! any number of `Processes` brokers), `INIT` (`Processes` openers taking
//! turns) and `topics.lock` (the topic list in `Processes` mode). Why each
//! is there is in `mod.rs`, "One broker per directory" and "Several
//! processes". A durable subscription's name has a lock of its own in
//! `Processes` mode, taken with the helpers here (see `named.rs`).

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
            let _init = Locked::new(init);
            if !flock(&lock, &lock_path, libc::LOCK_EX | libc::LOCK_NB)? {
                return Err(busy());
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
                return Err(busy());
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
