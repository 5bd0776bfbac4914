//! Lock files: files that hold no bytes, only the `flock`s and byte locks
//! taken on them (a data directory's `LOCK`, a partition's `maps.lock`, a
//! topic's `dedupe.lock`, a compaction's lock, a group's membership, a
//! registry's lock, a `Block` slot's lock).
//!
//! # A child of `fork` lets go of them
//!
//! Every lock rill takes belongs to an open file description (`flock`, and
//! `F_OFD_SETLK` byte locks), and a child made by `fork` shares its
//! parent's descriptions: while any process has one open, the lock stays
//! held. So a child that lives on after its parent dies (a worker forked
//! without `exec`, which may not use what it inherited: see the header's
//! note on `fork`) would hold its dead parent's names, partitions and
//! `Block` slots for as long as it lives, and a child that dropped an
//! inherited lock (`flock(LOCK_UN)` acts on the shared description) would
//! let go of its live parent's.
//!
//! So every lock file is a [`LockFile`], whose descriptor is listed here
//! while it is open, and a `pthread_atfork` handler gives the child, in
//! place of each listed descriptor, a new empty file of its own
//! (`memfd_create`, duplicated onto the same number with `dup3`, so the
//! number stays open and whatever the child does with it, closing or
//! unlocking, touches nothing of its parent's). The parent keeps its
//! descriptions, now held by it alone. The list and the descriptors are
//! changed only under one mutex, which the handler takes before the fork
//! and lets go of after it in both processes, so a fork never sees a
//! descriptor open and unlisted (a lock taken on it later would be held by
//! the child too), nor listed and closed (its number might be another
//! file's by then). The child's handler makes only system calls.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind as IoKind;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;

use crate::error::{Error, Result};
use crate::sync::StaticCell;

/// An open lock file, listed for the `fork` handler (see the module docs)
/// until dropped; dereferences to its [`File`].
#[derive(Debug)]
pub(crate) struct LockFile {
    /// `None` only inside `drop`, which closes it under the list's mutex.
    file: Option<File>,
}

impl LockFile {
    /// Opens `path` with `options` and lists its descriptor, in one step
    /// under the list's mutex.
    pub(crate) fn open(options: &OpenOptions, path: &Path) -> Result<LockFile> {
        with_listed(|fds| {
            let file = options.open(path).map_err(|e| Error::io(path, &e))?;
            fds.push(file.as_raw_fd());
            Ok(LockFile { file: Some(file) })
        })
    }
}

impl std::ops::Deref for LockFile {
    type Target = File;

    fn deref(&self) -> &File {
        self.file.as_ref().expect("open until dropped")
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        let Some(file) = self.file.take() else { return };
        with_listed(|fds| {
            let fd = file.as_raw_fd();
            if let Some(at) = fds.iter().position(|&f| f == fd) {
                fds.swap_remove(at);
            }
            // Closed under the mutex: a fork never sees it listed and closed.
            drop(file);
        });
    }
}

/// Opens a lock file read-write, creating it if missing and never
/// truncating it, so every opener, in any process, shares it as found.
pub(crate) fn open_lock_file(path: &Path) -> Result<LockFile> {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    LockFile::open(&options, path)
}

/// The listed descriptors and the mutex over them (a `pthread` mutex, as
/// the `fork` handlers lock it in one callback and unlock it in another).
/// In [`StaticCell`]s: a plain mutex around a list, with no ordering of
/// its own for loom to check.
struct Listed {
    mutex: StaticCell<libc::pthread_mutex_t>,
    fds: StaticCell<Vec<RawFd>>,
}

// SAFETY: `fds` is only touched with `mutex` held (`with_listed`, and the
// fork handlers between their lock and unlock); the mutex is a pthread
// mutex, made to be shared between threads.
unsafe impl Sync for Listed {}

static LISTED: Listed =
    Listed { mutex: StaticCell::new(libc::PTHREAD_MUTEX_INITIALIZER), fds: StaticCell::new(Vec::new()) };

/// Runs `f` on the list with its mutex held, the fork handlers registered.
fn with_listed<T>(f: impl FnOnce(&mut Vec<RawFd>) -> T) -> T {
    static HANDLERS: std::sync::Once = std::sync::Once::new();
    HANDLERS.call_once(|| {
        // SAFETY: registers three `extern "C"` functions that live for the
        // whole program; registration fails only for lack of memory, and
        // then forks keep the descriptions shared, as before this module.
        unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork_in_parent), Some(after_fork_in_child)) };
    });
    // SAFETY: a valid, statically initialised mutex; not held by this
    // thread (nothing in `f` forks or comes back here).
    unsafe { libc::pthread_mutex_lock(LISTED.mutex.get()) };
    /// Unlocks on the way out, unwinding included.
    struct Unlock;
    impl Drop for Unlock {
        fn drop(&mut self) {
            // SAFETY: locked above by this thread.
            unsafe { libc::pthread_mutex_unlock(LISTED.mutex.get()) };
        }
    }
    let _unlock = Unlock;
    // SAFETY: the mutex is held, so no other thread touches the list.
    f(unsafe { &mut *LISTED.fds.get() })
}

/// Before a fork, in the forking thread: holds the mutex across it.
extern "C" fn before_fork() {
    // SAFETY: as in `with_listed`; unlocked by one of the two handlers below.
    unsafe { libc::pthread_mutex_lock(LISTED.mutex.get()) };
}

extern "C" fn after_fork_in_parent() {
    // SAFETY: locked by `before_fork` in this thread.
    unsafe { libc::pthread_mutex_unlock(LISTED.mutex.get()) };
}

/// In the child, its only thread: each listed number gets a file of its
/// own, so the child shares no lock's description with its parent.
extern "C" fn after_fork_in_child() {
    // SAFETY: the mutex is held (by `before_fork`, in this very thread), so
    // the list is as the parent's threads left it between two changes; it
    // is only read.
    let fds = unsafe { &*LISTED.fds.get() };
    for &fd in fds {
        replace_in_child(fd);
    }
    // SAFETY: locked by `before_fork` in the thread this child copied.
    unsafe { libc::pthread_mutex_unlock(LISTED.mutex.get()) };
}

/// Puts an empty file of the child's own on `fd`, close-on-exec as the
/// original was. System calls only (the child of a threaded parent may
/// not allocate). If one fails, `fd` keeps the shared description.
fn replace_in_child(fd: RawFd) {
    #[cfg(target_os = "linux")]
    // SAFETY: a constant NUL-terminated name and flags; returns a new
    // descriptor or -1.
    let own = unsafe { libc::memfd_create(c"rill-inherited-lock".as_ptr(), libc::MFD_CLOEXEC) };
    #[cfg(not(target_os = "linux"))]
    // SAFETY: a constant NUL-terminated path and flags.
    let own = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if own < 0 {
        return;
    }
    // SAFETY: both are descriptors of this process; `dup3` closes the
    // description `fd` named (in this process only) and reuses the number.
    #[cfg(target_os = "linux")]
    unsafe {
        libc::dup3(own, fd, libc::O_CLOEXEC)
    };
    #[cfg(not(target_os = "linux"))]
    // SAFETY: as above; `dup2` then close-on-exec, as `dup3` does at once.
    unsafe {
        libc::dup2(own, fd);
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
    }
    // SAFETY: `own` is ours, and no longer needed.
    unsafe { libc::close(own) };
}

/// Opens a lock file read-write as [`open_lock_file`] does, but only if it
/// exists: `None` if it is missing (nothing is created), for a caller that
/// must leave no file behind when there is nothing to lock.
pub(crate) fn open_existing_lock_file(path: &Path) -> Result<Option<LockFile>> {
    match LockFile::open(OpenOptions::new().read(true).write(true), path) {
        Ok(file) => Ok(Some(file)),
        Err(Error::Io { kind: IoKind::NotFound, .. }) => Ok(None),
        Err(e) => Err(e),
    }
}
