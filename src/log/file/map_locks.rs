//! Who maps a segment file of a data directory shared by processes:
//! [`MapLocks`], what lets a trimmed file be reused across processes
//! ("Recycling across processes" in `file/mod.rs`) without ever writing a
//! file that another process still reads.
//!
//! # The locks
//!
//! One lock file per data directory (`maps.lock`; per partition directory
//! for a log opened without a broker), and on it one byte per segment file:
//! the byte at the file's **inode number**, which stays the same through
//! every rename a file goes through in its life (segment, spare, free,
//! segment again). Every opener of the directory (a broker; each has its
//! own open file description of the lock file) holds an open-file-
//! description read lock (`F_OFD_SETLK`, `F_RDLCK`) on a file's byte for
//! as long as it maps the file, taken *before* it reads anything of it.
//! Rewriting a file for a new use takes the write lock on its byte, without
//! waiting: granted only when no other opener maps the file. The kernel
//! drops an opener's locks when its process dies, however it dies, so a
//! crash never leaves a file locked.
//!
//! The locks cost one descriptor per opener, not per file (a descriptor per
//! mapped segment would reach the default limit of 1,024 at a few hundred
//! partitions), and a lock call per mapping made or let go (the roll, the
//! trim), none on the append or the read.
//!
//! # Counting inside an opener
//!
//! All of one opener's locks belong to one open file description, so they
//! do not stack: a second read lock on a byte is the same lock, and one
//! unlock lets it go. An opener may map a file more than once at a time
//! (threads of one process following the same roll each map the successor;
//! the losers drop theirs), so each opener counts its mappings of each
//! inode: the lock is taken at 0 -> 1 and let go at 1 -> 0, under the
//! count's mutex, so the count and the lock move together. An inode whose
//! write lock this opener holds counts no mappings: a read of it by this
//! opener meanwhile is refused as another opener's would be (a read lock
//! asked by the write lock's own holder would quietly turn it into a read
//! lock).
//!
//! Two brokers of one process on one directory have two descriptions, so
//! they keep each other's files as two processes would; a log test that
//! joins a partition a second time (with a lock file of its own) stands in
//! for a second process.

use std::collections::HashMap;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::error::{Error, Result};
use crate::sync::{Arc, Mutex};

/// The lock file's name, in a data directory (or a partition's directory).
pub(crate) const MAPS_FILE: &str = "maps.lock";

/// One opener's locks on the segment files of a directory shared by
/// processes (see the module docs).
#[derive(Debug)]
pub(crate) struct MapLocks {
    file: super::lock_file::LockFile,
    /// Per inode: how many of this opener's mappings hold its read lock,
    /// or that this opener holds its write lock.
    held: Mutex<HashMap<u64, Held>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    Read(usize),
    Write,
}

/// One mapping's share of its file's read lock: let go when dropped (see
/// "Counting inside an opener").
#[derive(Debug)]
pub(crate) struct MapHold {
    locks: Arc<MapLocks>,
    inode: u64,
    /// Already let go by [`MapHold::release`].
    released: bool,
}

impl MapLocks {
    /// This opener's locks on the files of `dir`'s lock file (made if
    /// absent).
    pub(crate) fn open(dir: &Path) -> Result<Arc<MapLocks>> {
        let path = dir.join(MAPS_FILE);
        let file = super::lock_file::open_lock_file(&path)?;
        Ok(Arc::new(MapLocks { file, held: Mutex::new(HashMap::new()) }))
    }

    /// Counts a mapping of the file `inode`, taking its read lock at the
    /// first. `None` if another opener holds its write lock, or this one
    /// does: the file is being freed or rewritten, and the caller must not
    /// read it (to it the file is trimmed).
    pub(crate) fn hold(self: &Arc<Self>, inode: u64) -> Result<Option<MapHold>> {
        let mut held = self.held.lock();
        match held.get(&inode).copied() {
            Some(Held::Read(n)) => {
                held.insert(inode, Held::Read(n + 1));
            }
            Some(Held::Write) => return Ok(None),
            None => {
                if !self.set(inode, libc::F_RDLCK)? {
                    return Ok(None);
                }
                held.insert(inode, Held::Read(1));
            }
        }
        Ok(Some(MapHold { locks: self.clone(), inode, released: false }))
    }

    /// Takes the write lock of the file `inode` if no opener maps it, this
    /// one included; true if taken. Never waits.
    pub(crate) fn try_exclusive(&self, inode: u64) -> Result<bool> {
        let mut held = self.held.lock();
        if held.contains_key(&inode) || !self.set(inode, libc::F_WRLCK)? {
            return Ok(false);
        }
        held.insert(inode, Held::Write);
        Ok(true)
    }

    /// Turns this opener's write lock of `inode` into a read lock held by
    /// one mapping, the caller's (the kernel converts it in place: no other
    /// opener can take the write lock in between).
    pub(crate) fn downgrade(self: &Arc<Self>, inode: u64) -> Result<MapHold> {
        let mut held = self.held.lock();
        debug_assert_eq!(held.get(&inode), Some(&Held::Write));
        // A conversion to a weaker lock is always granted.
        self.set(inode, libc::F_RDLCK)?;
        held.insert(inode, Held::Read(1));
        Ok(MapHold { locks: self.clone(), inode, released: false })
    }

    /// Lets go of this opener's write lock of `inode`.
    pub(crate) fn unlock_exclusive(&self, inode: u64) {
        let mut held = self.held.lock();
        if held.get(&inode) == Some(&Held::Write) {
            held.remove(&inode);
            self.unlock(inode);
        }
    }

    /// Whether this opener holds a lock of `inode` (a read lock, counted,
    /// or the write lock), for tests.
    #[cfg(test)]
    pub(crate) fn holds(&self, inode: u64) -> bool {
        self.held.lock().contains_key(&inode)
    }

    /// One less mapping of `inode`; true if it was this opener's last (the
    /// read lock is let go then).
    fn release(&self, inode: u64) -> bool {
        let mut held = self.held.lock();
        match held.get(&inode).copied() {
            Some(Held::Read(n)) if n > 1 => {
                held.insert(inode, Held::Read(n - 1));
                false
            }
            Some(Held::Read(_)) => {
                held.remove(&inode);
                self.unlock(inode);
                true
            }
            // Not held (a broken count, never expected): nothing to let go.
            _ => false,
        }
    }

    fn unlock(&self, inode: u64) {
        if let Err(e) = self.set(inode, libc::F_UNLCK) {
            // An unlock of a byte we hold fails only on a bad descriptor:
            // the lock goes with the process then.
            log::warn!("could not let go of the map lock of inode {inode}: {e}");
        }
    }

    /// `F_OFD_SETLK` of `kind` on byte `inode`: false if another opener's
    /// lock conflicts.
    fn set(&self, inode: u64, kind: libc::c_int) -> Result<bool> {
        let start = i64::try_from(inode)
            .map_err(|_| Error::InvalidArgument(format!("inode number {inode} past the range of a file lock")))?;
        // SAFETY: an all-zero `flock` is a valid value of the plain C
        // struct; `l_pid` must be 0 for an OFD lock.
        let mut lock: libc::flock = unsafe { std::mem::zeroed() };
        lock.l_type = kind as libc::c_short;
        lock.l_whence = libc::SEEK_SET as libc::c_short;
        lock.l_start = start;
        lock.l_len = 1;
        // SAFETY: our open descriptor and a `flock` that lives across the
        // call, which reads it and keeps no pointer.
        let rc = unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_OFD_SETLK, &lock) };
        if rc == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN | libc::EACCES) => Ok(false),
            _ => Err(Error::io(Path::new(MAPS_FILE), &e)),
        }
    }
}

impl MapHold {
    /// Lets go of this mapping's share now; true if it was its opener's
    /// last mapping of the file (the read lock is gone then).
    pub(crate) fn release(&mut self) -> bool {
        if std::mem::replace(&mut self.released, true) {
            return false;
        }
        self.locks.release(self.inode)
    }

    /// The opener whose lock this is.
    pub(crate) fn locks(&self) -> &Arc<MapLocks> {
        &self.locks
    }
}

impl Drop for MapHold {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("rill-map-locks-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_mapped_file_cannot_be_taken_by_another_opener_until_every_mapping_lets_go() {
        let dir = dir("held");
        let (a, b) = (MapLocks::open(&dir).unwrap(), MapLocks::open(&dir).unwrap());
        let first = a.hold(7).unwrap().expect("nobody writes it");
        let second = a.hold(7).unwrap().expect("a second mapping of the same opener");
        assert!(!b.try_exclusive(7).unwrap(), "taken while mapped");
        assert!(!a.try_exclusive(7).unwrap(), "taken by an opener that maps it");
        drop(first);
        assert!(!b.try_exclusive(7).unwrap(), "taken while one mapping is left");
        // Other bytes are other files.
        assert!(b.try_exclusive(8).unwrap());
        drop(second);
        assert!(!a.holds(7));
        assert!(b.try_exclusive(7).unwrap(), "not taken once nobody maps it");
        // Taken: nobody may map it, its holder included.
        assert!(a.hold(7).unwrap().is_none());
        assert!(b.hold(7).unwrap().is_none());
        // Rewritten, then shared again: readable by all, taken by none.
        let mut held = b.downgrade(7).unwrap();
        let other = a.hold(7).unwrap().expect("readable after the downgrade");
        assert!(!a.try_exclusive(7).unwrap());
        assert!(held.release(), "b's only mapping");
        assert!(!held.release(), "let go once");
        drop(other);
        assert!(a.try_exclusive(7).unwrap());
        a.unlock_exclusive(7);
        assert!(b.try_exclusive(7).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_opener_that_goes_leaves_no_lock() {
        // A process that dies closes its descriptors, as dropping an opener
        // does here: the kernel drops an OFD lock with the last descriptor
        // of it.
        let dir = dir("gone");
        let (a, b) = (MapLocks::open(&dir).unwrap(), MapLocks::open(&dir).unwrap());
        // A mapping's lock, taken without its count, which is dropped with the opener.
        assert!(b.set(9, libc::F_RDLCK).unwrap());
        assert!(!a.try_exclusive(9).unwrap());
        drop(b);
        assert!(a.try_exclusive(9).unwrap(), "the gone opener's lock stayed");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
