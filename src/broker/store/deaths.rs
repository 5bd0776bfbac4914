//! Members whose process died, seen when it dies (issue 39).
//!
//! A member of a group or shared subscription across processes that dies
//! announces nothing ("Announcing changes" in `membership.rs`): the kernel
//! drops its locks, and its member file stays until a survivor's look tries
//! the lock and finds it free. Looks on a timer would find it, at a cost
//! every idle member pays every period, and with a hand-over that waits up
//! to a period.
//!
//! So each `Sharing::Processes` broker keeps a [`Deaths`]: a pidfd
//! (`pidfd_open`, Linux 5.3) of every other process whose member files its
//! members listed at their last look, in one epoll set, and a thread
//! blocked in `epoll_wait` on it, which uses no CPU until a watched process
//! exits. A pidfd becomes readable once its process has exited, and the
//! kernel has closed its files (dropping their locks) by then: an exiting
//! process closes its files, and runs the closes it deferred, before it
//! signals its exit. The thread then tells its broker as the doorbell does
//! of an announced change (`MembersWatch::members_changed`): each local
//! member looks, finds the dead member's lock free, removes its file and
//! announces that to every process.
//!
//! # What it does not see
//!
//! A member's process whose exit it cannot watch is still found by the
//! fallback looks, which run less often while deaths are watched
//! ([`Deaths::supported`]; `shared_procs.rs`, `consumer.rs`):
//!
//! * a member whose lock outlives its process because a child it forked
//!   kept the lock file's description (a lock belongs to the open file):
//!   a child made by `fork` gets files of its own in place of rill's lock
//!   files ("A child of `fork` lets go of them" in `log/file/lock_file.rs`),
//!   so only a child that got them some other way (a `clone` that runs no
//!   fork handlers and does not `exec`); no look finds it dead before the
//!   child is gone either;
//! * a member in another pid namespace (a container sharing the directory):
//!   its file names a pid that means another process here, or none;
//! * a pid reused between the look's lock try and the pidfd's open (the
//!   pidfd then watches the new process);
//! * more processes than [`MAX_WATCHED`], and a system without pidfds
//!   (then every fallback look runs at its short period).
//!
//! A pid whose process is gone before its pidfd opens (`ESRCH`) tells at
//! once. A pid that has told is not watched again while the same member
//! names list it, so a lock held on by such a child does not make its
//! members look over and over; a new member name with that pid (the pid
//! reused by a new member's process) is watched again.

// Under loom no doorbell starts (`doorbell.rs`), so nothing makes one.
#![cfg_attr(loom, allow(dead_code))]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, OnceLock};

use crate::error::{Error, Result};
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicBool, Ordering};

/// The most processes one broker watches; the members of any more are
/// found by the fallback looks alone. Each watched process holds a
/// descriptor, and a process's default soft limit is 1024 of them.
pub(crate) const MAX_WATCHED: usize = 256;

/// The epoll token of the wake-up eventfd (a pidfd's token is its count
/// from 0, never this).
const WAKE: u64 = u64::MAX;

/// What the watcher calls when a watched process died: the broker's
/// `members_changed`, which must not block on a look.
pub(crate) type Tell = Arc<dyn Fn() + Send + Sync>;

/// A broker's watch of the processes holding its members' peers (see the
/// module docs). Its thread starts with the first process watched and
/// stops with [`Deaths::stop`].
pub(crate) struct Deaths {
    inner: Arc<Inner>,
    thread: Mutex<Option<crate::sync::thread::JoinHandle<()>>>,
}

struct Inner {
    epoll: OwnedFd,
    /// An eventfd in the epoll set, written to stop the thread.
    wake: OwnedFd,
    state: Mutex<State>,
    /// Set (Release) by `stop` before it writes `wake`.
    stop: AtomicBool,
    /// Whom to tell; set once the broker is built.
    tell: Mutex<Option<Tell>>,
}

#[derive(Default)]
struct State {
    /// Each watching member's listing of the other members at its last
    /// look: pid and member name.
    owners: HashMap<u64, Vec<(u32, String)>>,
    next_owner: u64,
    next_token: u64,
    pids: BTreeMap<u32, Watched>,
    /// A process was gone before its pidfd opened: the thread tells
    /// (never the look that found it, which may hold a lock the telling
    /// takes).
    tell_pending: bool,
}

/// One watched process.
struct Watched {
    /// Its pidfd and epoll token; `None` once it told (or if it could not
    /// be opened).
    fd: Option<(OwnedFd, u64)>,
    /// The member names that listed it when it was last opened or told.
    names: BTreeSet<String>,
}

/// Set by [`disable_death_watch`]: no broker of this process watches
/// deaths.
static OFF: OnceLock<()> = OnceLock::new();

/// For tests: turns the watch of deaths off in this process (before its
/// first broker opens), so a test can show what the fallback looks find
/// alone.
#[doc(hidden)]
pub fn disable_death_watch() {
    let _ = OFF.set(());
}

impl Deaths {
    /// True if deaths are watched: this system has pidfds (checked once,
    /// on this process's own) and no test turned it off.
    pub(crate) fn supported() -> bool {
        static SUPPORTED: OnceLock<bool> = OnceLock::new();
        OFF.get().is_none() && *SUPPORTED.get_or_init(|| pidfd_open(std::process::id()).is_ok())
    }

    /// A watch of no process yet, its thread not started.
    pub(crate) fn new() -> Result<Deaths> {
        // SAFETY: plain system calls; each descriptor returned is checked
        // and owned at once.
        let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epoll < 0 {
            return Err(os_error("epoll_create1"));
        }
        // SAFETY: `epoll` is a descriptor this call just opened.
        let epoll = unsafe { OwnedFd::from_raw_fd(epoll) };
        // SAFETY: as above.
        let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if wake < 0 {
            return Err(os_error("eventfd"));
        }
        // SAFETY: `wake` is a descriptor this call just opened.
        let wake = unsafe { OwnedFd::from_raw_fd(wake) };
        add(&epoll, &wake, WAKE)?;
        let inner = Inner {
            epoll,
            wake,
            state: Mutex::new(State::default()),
            stop: AtomicBool::new(false),
            tell: Mutex::new(None),
        };
        Ok(Deaths { inner: Arc::new(inner), thread: Mutex::new(None) })
    }

    /// Tells `tell` of every death from now on.
    pub(crate) fn tell_to(&self, tell: Tell) {
        *self.inner.tell.lock() = Some(tell);
    }

    /// A new watcher's id (a member), for [`Deaths::watch`].
    pub(crate) fn owner(&self) -> u64 {
        let mut state = self.inner.state.lock();
        state.next_owner += 1;
        state.next_owner
    }

    /// Watcher `owner` listed `others` (pid, member name) at its look:
    /// from now on those processes are watched for it, and those it no
    /// longer lists are not. Never fails: a process it cannot watch is
    /// left to the fallback looks (see the module docs).
    pub(crate) fn watch(&self, owner: u64, others: Vec<(u32, String)>) {
        if !Deaths::supported() {
            return;
        }
        let me = std::process::id();
        let others = others.into_iter().filter(|(pid, _)| *pid != me).collect();
        let mut state = self.inner.state.lock();
        state.owners.insert(owner, others);
        self.settle(state);
    }

    /// Watcher `owner` is gone: its listing no longer counts.
    pub(crate) fn forget(&self, owner: u64) {
        let mut state = self.inner.state.lock();
        if state.owners.remove(&owner).is_some() {
            self.settle(state);
        }
    }

    /// [`Deaths::update`], then has the thread tell of a process found
    /// gone.
    fn settle(&self, mut state: crate::sync::MutexGuard<'_, State>) {
        if self.update(&mut state) {
            state.tell_pending = true;
            drop(state);
            self.start();
            self.inner.wake();
        }
    }

    /// Brings the watched processes in line with every owner's listing;
    /// true if one was gone already (to tell at once, on the thread).
    fn update(&self, state: &mut State) -> bool {
        let mut wanted: BTreeMap<u32, BTreeSet<String>> = BTreeMap::new();
        for (pid, name) in state.owners.values().flatten() {
            wanted.entry(*pid).or_default().insert(name.clone());
        }
        // Not listed by anyone: its pidfd closes (and so leaves the set).
        state.pids.retain(|pid, _| wanted.contains_key(pid));
        let mut told = false;
        let mut started = false;
        for (pid, names) in wanted {
            if let Some(w) = state.pids.get_mut(&pid) {
                // Watched, or told with no new name since: as it is.
                if w.fd.is_some() || names.is_subset(&w.names) {
                    w.names = names;
                    continue;
                }
            }
            if state.pids.len() >= MAX_WATCHED && !state.pids.contains_key(&pid) {
                continue;
            }
            let fd = match pidfd_open(pid) {
                Ok(fd) => {
                    let token = state.next_token;
                    state.next_token += 1;
                    match add(&self.inner.epoll, &fd, token) {
                        Ok(()) => {
                            started = true;
                            Some((fd, token))
                        }
                        Err(e) => {
                            log::debug!("rill: cannot watch process {pid}: {e}");
                            None
                        }
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                    told = true;
                    None
                }
                Err(e) => {
                    log::debug!("rill: cannot watch process {pid}: {e}");
                    None
                }
            };
            state.pids.insert(pid, Watched { fd, names });
        }
        if started {
            self.start();
        }
        told
    }

    /// Starts the thread, unless it runs (or could not start: then the
    /// fallback looks find deaths).
    fn start(&self) {
        let mut thread = self.thread.lock();
        if thread.is_some() {
            return;
        }
        let inner = self.inner.clone();
        match crate::sync::spawn_named("rill-deaths".into(), move || inner.run()) {
            Ok(handle) => *thread = Some(handle),
            Err(e) => log::warn!("rill: members' deaths are found by the fallback looks alone: {e}"),
        }
    }

    /// Stops the thread and waits for it (the broker is closing). Called
    /// without the broker's control mutex: the thread's `tell` takes it.
    pub(crate) fn stop(&self) {
        // Release: pairs with the Acquire load after the thread's wait.
        self.inner.stop.store(true, Ordering::Release);
        self.inner.wake();
        if let Some(handle) = self.thread.lock().take() {
            let _ = handle.join();
        }
        *self.inner.tell.lock() = None;
    }

    /// The processes watched now (for tests).
    #[cfg(test)]
    fn watched(&self) -> usize {
        self.inner.state.lock().pids.values().filter(|w| w.fd.is_some()).count()
    }
}

impl Inner {
    /// The thread: waits for a watched process to exit, marks it told and
    /// tells; ends at `stop`.
    fn run(&self) {
        const EVENTS: usize = 16;
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; EVENTS];
        loop {
            // SAFETY: `events` is a live array of `EVENTS` entries the call
            // fills; the epoll descriptor is owned by `self`.
            let n = unsafe { libc::epoll_wait(self.epoll.as_raw_fd(), events.as_mut_ptr(), EVENTS as i32, -1) };
            // Acquire: pairs with the Release store in `Deaths::stop`.
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                log::warn!("rill: members' deaths are found by the fallback looks alone: epoll_wait: {e}");
                return;
            }
            let mut died = false;
            {
                let mut state = self.state.lock();
                died |= std::mem::take(&mut state.tell_pending);
                for event in &events[..n as usize] {
                    let token = event.u64;
                    if token == WAKE {
                        let mut count = 0u64;
                        // SAFETY: reads 8 bytes into a live u64 from the
                        // eventfd `self` owns (non-blocking), which resets
                        // it, so the level-triggered wait does not return
                        // for it again.
                        unsafe { libc::read(self.wake.as_raw_fd(), (&raw mut count).cast(), 8) };
                        continue;
                    }
                    // Told: its pidfd closes, so it fires no more. A token
                    // no entry holds is of a pidfd closed since the wait
                    // returned.
                    if let Some(w) = state.pids.values_mut().find(|w| w.fd.as_ref().is_some_and(|(_, t)| *t == token)) {
                        w.fd = None;
                        died = true;
                    }
                }
            }
            if died {
                self.tell();
            }
        }
    }

    /// Wakes the thread (to stop, or to tell what a look found gone).
    fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to the eventfd `self`
        // owns. A failure (the counter full) leaves it readable all the
        // same.
        unsafe { libc::write(self.wake.as_raw_fd(), (&raw const one).cast(), 8) };
    }

    fn tell(&self) {
        let tell = self.tell.lock().clone();
        if let Some(tell) = tell {
            tell();
        }
    }
}

/// A pidfd of process `pid`.
fn pidfd_open(pid: u32) -> std::io::Result<OwnedFd> {
    // SAFETY: a plain system call; its result is checked.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a descriptor this call just opened (and fits an i32:
    // descriptors do).
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Adds `fd` to `epoll`, readable, with `token`.
fn add(epoll: &OwnedFd, fd: &OwnedFd, token: u64) -> Result<()> {
    let mut event = libc::epoll_event { events: libc::EPOLLIN as u32, u64: token };
    // SAFETY: both descriptors are live; `event` is a live struct the call
    // reads.
    let r = unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd.as_raw_fd(), &mut event) };
    if r < 0 {
        return Err(os_error("epoll_ctl"));
    }
    Ok(())
}

fn os_error(call: &str) -> Error {
    Error::ResourceExhausted(format!("{call}: {}", std::io::Error::last_os_error()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Long enough for any machine; a test fails, never hangs.
    const DEADLINE: Duration = Duration::from_secs(60);

    fn watch_with_channel() -> (Deaths, mpsc::Receiver<()>) {
        let deaths = Deaths::new().unwrap();
        let (tx, rx) = mpsc::channel();
        deaths.tell_to(Arc::new(move || {
            let _ = tx.send(());
        }));
        (deaths, rx)
    }

    fn sleeper() -> std::process::Child {
        std::process::Command::new("sleep").arg("3600").spawn().unwrap()
    }

    #[test]
    fn a_watched_process_that_is_killed_tells_once() {
        if !Deaths::supported() {
            return;
        }
        let (deaths, rx) = watch_with_channel();
        let mut child = sleeper();
        let owner = deaths.owner();
        deaths.watch(owner, vec![(child.id(), "a.member".into())]);
        assert_eq!(deaths.watched(), 1);
        assert!(rx.try_recv().is_err(), "nothing told while it lives");
        child.kill().unwrap();
        rx.recv_timeout(DEADLINE).expect("its death is told");
        child.wait().unwrap();
        // Listed again by the same names (its file not yet removed): not
        // watched again, nothing told again.
        deaths.watch(owner, vec![(child.id(), "a.member".into())]);
        assert_eq!(deaths.watched(), 0);
        assert!(rx.try_recv().is_err(), "told once");
        deaths.stop();
    }

    #[test]
    fn a_process_gone_before_it_is_watched_tells_at_once_and_the_listing_decides_what_is_watched() {
        if !Deaths::supported() {
            return;
        }
        let (deaths, rx) = watch_with_channel();
        let mut gone = sleeper();
        gone.kill().unwrap();
        gone.wait().unwrap();
        let (mut a, mut b) = (sleeper(), sleeper());
        let (one, two) = (deaths.owner(), deaths.owner());
        deaths.watch(one, vec![(a.id(), "a.member".into()), (gone.id(), "gone.member".into())]);
        rx.recv_timeout(DEADLINE).expect("a process already gone is told");
        deaths.watch(two, vec![(a.id(), "a2.member".into()), (b.id(), "b.member".into())]);
        assert_eq!(deaths.watched(), 2);
        // Its own process is never watched.
        deaths.watch(two, vec![(std::process::id(), "me.member".into()), (b.id(), "b.member".into())]);
        assert_eq!(deaths.watched(), 2, "a is still listed by the first");
        deaths.forget(one);
        assert_eq!(deaths.watched(), 1, "only b is listed now");
        a.kill().unwrap();
        a.wait().unwrap();
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err(), "an unwatched process's death is not told");
        b.kill().unwrap();
        b.wait().unwrap();
        rx.recv_timeout(DEADLINE).expect("b's death is told");
        deaths.stop();
    }
}
