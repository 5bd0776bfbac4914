//! `Block` subscribers seen by the publishers of every process
//! (`Sharing::Processes`, issue 39): each such subscriber's position and
//! lag limit in a slot of a small file every process maps, and the futex
//! word a publisher waits on for one of them to make room.
//!
//! In one process a publisher finds the `Block` subscribers of a partition
//! in its listener list ([`super::Blocker`]) and waits for them in the
//! partition's `space` (`waiters.rs`). A publisher in another process has
//! neither. So a partition of a `Processes` broker maps one page of
//! `partition.blockers`, beside its log: a header (a count of claimed
//! slots, the highest slot ever claimed, the wake sequence and a count of
//! waiting publishers) and [`SLOTS`] slots, each `(owner, limit, position)`.
//!
//! # Who writes what
//!
//! * A **subscriber** with the `Block` policy, when it attaches to the
//!   partition ([`SharedBlockers::claim`]): takes the slot's lock (an
//!   open-file-description lock on one byte of the file, which the kernel
//!   drops when the process dies, however it dies), writes its position
//!   and limit, then its pid as the slot's owner (Release), then raises the
//!   count. The caller's `barrier::heavy` follows (`Partition::add_listener`).
//! * The **subscriber's drainer**, after each batch (`Partition::room_made`):
//!   stores its position in its slot (Release), issues K1
//!   (`fence(SeqCst)`), loads the count of waiting publishers, and only if
//!   it is not zero advances the sequence and wakes every waiter of the
//!   word (`FUTEX_WAKE`, shared: the word is in a `MAP_SHARED` file).
//! * A **publisher**, before each append: loads the count (Relaxed). Zero:
//!   it appends (the one load of the fast path). Not zero: it reads the
//!   claimed slots, and appends if each leaves room. Otherwise it waits
//!   ([`SharedBlockers::wait`]): raises the count of waiters, issues K2
//!   (`fence(SeqCst)`), loads the sequence, looks at the slots again, and
//!   only if there is still no room sleeps in `FUTEX_WAIT` on the sequence
//!   it loaded.
//! * A subscriber that **detaches** (closes, its topic deleted, its broker
//!   closed) clears its slot's owner, lowers the count, wakes as its
//!   drainer does, then lets go of the lock.
//!
//! # The race it survives: a lost wake-up
//!
//! The publisher stores (its registration as a waiter) and then loads (the
//! positions); the drainer stores (its position) and then loads (the
//! waiters). That is the store-buffering shape, closed by a `SeqCst` fence
//! on each side: K1 and K2 are totally ordered. If K1 comes first, the
//! publisher's look after K2 sees the new position and does not sleep. If
//! K2 comes first, the drainer's load after K1 sees the waiter and advances
//! the sequence; the publisher loaded the sequence either before that, and
//! its `FUTEX_WAIT` returns at once or is woken, or after it: the advance is
//! a Release and the load an Acquire, so the look that follows sees the
//! position stored before it. `loom-tests/tests/blockers.rs` runs this
//! code with the futex modelled as a mutex and a condition variable (the
//! kernel's hash-bucket lock); with K1 or K2 weakened `.ci/fence-check`
//! requires it to find the publisher asleep for ever.
//!
//! # Why one Relaxed load is enough on the fast path
//!
//! A publisher that reads a count of 0 appends without looking at slots.
//! The count is raised before the subscriber's `barrier::heavy` (a
//! `fence(SeqCst)`), and every publish in `Processes` mode ends with X1
//! (`fence(SeqCst)`, `doorbell.rs`). If the subscriber's fence precedes a
//! publisher's X1, that publisher's next count load sees the raise; if not,
//! that publisher's record was committed before the subscriber's fence,
//! and so before the subscriber reads where it starts. So a publisher
//! misses a new subscriber by at most the one record it has in flight, the
//! bound one process already has ("a limit can be exceeded by at most one
//! message per concurrent publisher", `Partition::wait_for_room`).
//!
//! # A subscriber that dies
//!
//! Its slot still names an owner, but no one holds the slot's lock. A
//! waiting publisher's sleep is bounded by [`DEATH_BOUND`], the fallback
//! that needs no one to wake it: when a sleep runs out, the publisher tries
//! the lock of each slot that holds it back; a lock it gets is a dead
//! owner's, and it clears the slot, lowers the count and wakes the other
//! waiters, as the subscriber would have detaching. So a dead subscriber
//! holds back publishers for at most `DEATH_BOUND` after it died (or after
//! they began to wait), never for good. A claim or a detach holds the lock
//! while it changes the slot, so a publisher never clears a live one.
//!
//! # Limits
//!
//! At most [`SLOTS`] `Block` subscribers of one partition hold slots at
//! once across the processes; one more is logged and holds back only the
//! publishers of its own process, as before. The slots are read by
//! scanning up to the highest ever claimed, which is cheap for the few
//! `Block` subscribers a partition has.

#[cfg(not(loom))]
use std::os::fd::AsRawFd;
use std::path::Path;
#[cfg(not(loom))]
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[cfg(not(loom))]
use crate::broker::mapped_page::{MappedPage, PAGE};
use crate::error::Result;
use crate::sync::Arc;
use crate::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Name of a partition's file of `Block` subscribers (in its log's directory).
#[cfg_attr(loom, allow(dead_code))]
pub(crate) const BLOCKERS_FILE: &str = "partition.blockers";

/// The longest a publisher sleeps before it looks for a dead subscriber
/// holding it back (see "A subscriber that dies"): the bound on how long a
/// subscriber killed while blocking holds back the publishers of other
/// processes. Wakes for a position that moved come by the futex, not by it.
pub(crate) const DEATH_BOUND: Duration = Duration::from_millis(50);

/// Slots of one partition's file.
#[cfg(not(loom))]
pub(crate) const SLOTS: usize = 120;
/// Slots under loom: the models claim one or two.
#[cfg(loom)]
pub(crate) const SLOTS: usize = 2;

#[cfg(not(loom))]
const MAGIC: u64 = u64::from_le_bytes(*b"rillblok");
/// Layout of the file; a process whose rill has another refuses it.
#[cfg(not(loom))]
const LAYOUT: u32 = 1;
/// Claimed slots: what every publisher loads.
#[cfg(not(loom))]
const COUNT_AT: usize = 64;
/// One past the highest slot ever claimed (only grows).
#[cfg(not(loom))]
const HIGH_AT: usize = 68;
/// The wake sequence, the futex word (a cache line of its own).
#[cfg(not(loom))]
const SEQ_AT: usize = 128;
/// Publishers waiting (a cache line of its own).
#[cfg(not(loom))]
const WAITERS_AT: usize = 192;
/// The first slot; each is `SLOT_SIZE` bytes: owner (u32) at 0, limit (u64)
/// at 8, position (u64) at 16.
#[cfg(not(loom))]
const SLOTS_AT: usize = 256;
#[cfg(not(loom))]
const SLOT_SIZE: usize = 32;
/// Where in the file the byte locks of the slots start (locks need no data
/// there; past the page keeps them apart from anything mapped).
#[cfg(not(loom))]
const LOCKS_AT: i64 = 1 << 20;

#[cfg(not(loom))]
const _: () = assert!(SLOTS_AT + SLOTS * SLOT_SIZE <= PAGE);

/// The mapped page (under loom, memory of its own).
struct Page {
    #[cfg(not(loom))]
    mapped: MappedPage,
    #[cfg(loom)]
    words: LoomPage,
}

#[cfg(loom)]
struct LoomPage {
    count: AtomicU32,
    high: AtomicU32,
    seq: AtomicU32,
    waiters: AtomicU32,
    owner: Vec<AtomicU32>,
    limit: Vec<AtomicU64>,
    position: Vec<AtomicU64>,
}

impl Page {
    #[cfg(not(loom))]
    fn open(path: &Path, init: bool) -> Result<Page> {
        Ok(Page { mapped: MappedPage::open(path, init, MAGIC, LAYOUT, "blockers file")? })
    }

    #[cfg(loom)]
    fn in_memory() -> Page {
        let many = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect();
        Page {
            words: LoomPage {
                count: AtomicU32::new(0),
                high: AtomicU32::new(0),
                seq: AtomicU32::new(0),
                waiters: AtomicU32::new(0),
                owner: (0..SLOTS).map(|_| AtomicU32::new(0)).collect(),
                limit: many(SLOTS),
                position: many(SLOTS),
            },
        }
    }

    #[cfg(not(loom))]
    fn u32_at(&self, at: usize) -> &AtomicU32 {
        self.mapped.u32_at(at)
    }

    #[cfg(not(loom))]
    fn u64_at(&self, at: usize) -> &AtomicU64 {
        self.mapped.u64_at(at)
    }

    #[inline]
    fn count(&self) -> &AtomicU32 {
        #[cfg(not(loom))]
        return self.u32_at(COUNT_AT);
        #[cfg(loom)]
        return &self.words.count;
    }

    fn high(&self) -> &AtomicU32 {
        #[cfg(not(loom))]
        return self.u32_at(HIGH_AT);
        #[cfg(loom)]
        return &self.words.high;
    }

    fn seq(&self) -> &AtomicU32 {
        #[cfg(not(loom))]
        return self.u32_at(SEQ_AT);
        #[cfg(loom)]
        return &self.words.seq;
    }

    fn waiters(&self) -> &AtomicU32 {
        #[cfg(not(loom))]
        return self.u32_at(WAITERS_AT);
        #[cfg(loom)]
        return &self.words.waiters;
    }

    fn owner(&self, slot: usize) -> &AtomicU32 {
        #[cfg(not(loom))]
        return self.u32_at(SLOTS_AT + slot * SLOT_SIZE);
        #[cfg(loom)]
        return &self.words.owner[slot];
    }

    fn limit(&self, slot: usize) -> &AtomicU64 {
        #[cfg(not(loom))]
        return self.u64_at(SLOTS_AT + slot * SLOT_SIZE + 8);
        #[cfg(loom)]
        return &self.words.limit[slot];
    }

    fn position(&self, slot: usize) -> &AtomicU64 {
        #[cfg(not(loom))]
        return self.u64_at(SLOTS_AT + slot * SLOT_SIZE + 16);
        #[cfg(loom)]
        return &self.words.position[slot];
    }
}

/// The lock of one slot, held while this process owns it (or changes it):
/// an open-file-description lock on one byte, on a descriptor of its own,
/// so it conflicts with every other holder, in this process or another,
/// and the kernel drops it when the process dies.
struct SlotLock {
    #[cfg(not(loom))]
    _file: crate::log::file::LockFile,
}

impl SlotLock {
    /// Takes the lock of `slot` if no one holds it.
    #[cfg(not(loom))]
    fn try_take(path: &Path, slot: usize) -> Option<SlotLock> {
        let file = crate::log::file::LockFile::open(std::fs::OpenOptions::new().read(true).write(true), path).ok()?;
        // SAFETY: an all-zero `flock` is a valid value of the plain C struct.
        let mut lock: libc::flock = unsafe { std::mem::zeroed() };
        lock.l_type = libc::F_WRLCK as libc::c_short;
        lock.l_whence = libc::SEEK_SET as libc::c_short;
        lock.l_start = LOCKS_AT + slot as i64;
        lock.l_len = 1;
        // SAFETY: F_OFD_SETLK on a descriptor we own, with a valid `flock`
        // that the call only reads (l_pid 0, as OFD locks require).
        let taken = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &raw const lock) } == 0;
        taken.then_some(SlotLock { _file: file })
    }

    /// Under loom slots are never held by a dead process.
    #[cfg(loom)]
    fn try_take(_path: &Path, _slot: usize) -> Option<SlotLock> {
        Some(SlotLock {})
    }
}

/// A partition's `Block` subscribers across processes; see the module docs.
pub(crate) struct SharedBlockers {
    page: Page,
    /// The file, for the slots' locks.
    #[cfg(not(loom))]
    path: PathBuf,
    /// Loom's stand-in for the kernel's futex queue.
    #[cfg(loom)]
    queue: (crate::sync::Mutex<()>, crate::sync::Condvar),
}

impl std::fmt::Debug for SharedBlockers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Relaxed: a debugging snapshot.
        f.debug_struct("SharedBlockers").field("count", &self.page.count().load(Ordering::Relaxed)).finish()
    }
}

/// A slot this process owns, for one `Block` subscriber; dropping it
/// detaches the subscriber from the file (see "Who writes what").
pub(crate) struct Slot {
    blockers: Arc<SharedBlockers>,
    index: usize,
    /// Cleared already ([`Slot::detach`]); its lock is still held until
    /// the drop, so that no one claims it while a late position may land.
    detached: AtomicBool,
    _lock: SlotLock,
}

impl SharedBlockers {
    /// Maps the blockers file of the partition whose log is in `dir`;
    /// `init` for its first opener or its creator (no slot claimed yet).
    #[cfg(not(loom))]
    pub(crate) fn open(dir: &Path, init: bool) -> Result<Arc<SharedBlockers>> {
        let path = dir.join(BLOCKERS_FILE);
        Ok(Arc::new(SharedBlockers { page: Page::open(&path, init)?, path }))
    }

    /// Under loom: memory of its own (loom maps no files).
    #[cfg(loom)]
    pub(crate) fn open(_dir: &Path, _init: bool) -> Result<Arc<SharedBlockers>> {
        Ok(SharedBlockers::in_memory())
    }

    /// Blockers no file backs, for the loom models.
    #[cfg(loom)]
    pub(crate) fn in_memory() -> Arc<SharedBlockers> {
        Arc::new(SharedBlockers {
            page: Page::in_memory(),
            queue: (crate::sync::Mutex::new(()), crate::sync::Condvar::new()),
        })
    }

    fn lock_slot(&self, slot: usize) -> Option<SlotLock> {
        #[cfg(not(loom))]
        return SlotLock::try_take(&self.path, slot);
        #[cfg(loom)]
        return SlotLock::try_take(Path::new(""), slot);
    }

    /// True if some process has a `Block` subscriber here: the publisher's
    /// fast path (see "Why one Relaxed load is enough on the fast path").
    #[inline]
    pub(crate) fn any(&self) -> bool {
        // Relaxed: see the module docs' section named above.
        self.page.count().load(Ordering::Relaxed) != 0
    }

    /// Claims a free slot for a subscriber at `position` with lag limit
    /// `limit`; `None` if every slot is taken.
    pub(crate) fn claim(this: &Arc<Self>, position: u64, limit: u64) -> Option<Slot> {
        let owner = std::process::id().max(1);
        for index in 0..SLOTS {
            // Relaxed: a hint; the check that counts is under the lock.
            if this.page.owner(index).load(Ordering::Relaxed) != 0 {
                continue;
            }
            let Some(lock) = this.lock_slot(index) else { continue };
            // Acquire: pairs with the Release clear of a detach or a reap,
            // whose lock we now hold after them.
            if this.page.owner(index).load(Ordering::Acquire) != 0 {
                // A dead owner's, not yet reaped: a waiting publisher will.
                continue;
            }
            // Relaxed: published by the owner's Release store below.
            this.page.limit(index).store(limit, Ordering::Relaxed);
            this.page.position(index).store(position, Ordering::Relaxed);
            // Release: a publisher that reads the owner (Acquire) reads the
            // limit and the position stored before it.
            this.page.owner(index).store(owner, Ordering::Release);
            // Relaxed: `high` only bounds the scan, read after `count`; a
            // scan that misses the slot is the fast path's one record.
            this.page.high().fetch_max(index as u32 + 1, Ordering::Relaxed);
            // Relaxed: the caller's `barrier::heavy` orders it (see the
            // module docs).
            this.page.count().fetch_add(1, Ordering::Relaxed);
            return Some(Slot { blockers: this.clone(), index, detached: AtomicBool::new(false), _lock: lock });
        }
        None
    }

    /// Calls `each(slot, position, limit)` for every claimed slot.
    fn for_each_claimed(&self, mut each: impl FnMut(usize, u64, u64)) {
        // Relaxed: see `claim`.
        let high = (self.page.high().load(Ordering::Relaxed) as usize).min(SLOTS);
        for slot in 0..high {
            // Acquire: pairs with the Release in `claim`.
            if self.page.owner(slot).load(Ordering::Acquire) == 0 {
                continue;
            }
            // Acquire: pairs with the drainer's Release in `set_position`,
            // so a publisher that sees room sees the drain that made it.
            let position = self.page.position(slot).load(Ordering::Acquire);
            // Relaxed: written before the owner, read after it (Acquire).
            let limit = self.page.limit(slot).load(Ordering::Relaxed);
            each(slot, position, limit);
        }
    }

    /// True if offsets up to `end + n` fit under every claimed slot's limit.
    pub(crate) fn has_room(&self, end: u64, n: u64) -> bool {
        let mut room = true;
        self.for_each_claimed(|_, position, limit| room &= end + n <= position.saturating_add(limit));
        room
    }

    /// The smallest lag limit of a claimed slot, if any.
    pub(crate) fn min_limit(&self) -> Option<u64> {
        let mut min = None;
        self.for_each_claimed(|_, _, limit| min = Some(min.map_or(limit, |m: u64| m.min(limit))));
        min
    }

    /// The drainer's store of its position (see "Who writes what").
    #[inline]
    pub(crate) fn set_position(&self, slot: &Slot, position: u64) {
        // Release: pairs with the Acquire in `for_each_claimed`.
        self.page.position(slot.index).store(position, Ordering::Release);
    }

    /// After positions moved (or a slot was cleared): K1, then wakes the
    /// publishers waiting, if any.
    #[inline]
    pub(crate) fn moved(&self) {
        // K1, SeqCst fence: orders the position's store before the load of
        // the waiters; pairs with K2 in `wait` (see "The race it survives").
        crate::sync::fence_or_weakened!("K1", Ordering::SeqCst);
        // Relaxed: K1 orders it; a count, read only to skip the wake.
        if self.page.waiters().load(Ordering::Relaxed) != 0 {
            self.wake();
        }
    }

    #[cold]
    fn wake(&self) {
        // Release: a publisher that loads this value (Acquire) before its
        // look sees the position stored before K1.
        self.page.seq().fetch_add(1, Ordering::Release);
        #[cfg(not(loom))]
        // SAFETY: FUTEX_WAKE (shared: the word is in a MAP_SHARED file) of
        // every waiter on an aligned u32 that stays mapped during the call;
        // it touches no memory.
        unsafe {
            libc::syscall(libc::SYS_futex, self.page.seq().as_ptr(), libc::FUTEX_WAKE, i32::MAX);
        }
        #[cfg(loom)]
        {
            let _queue = self.queue.0.lock();
            self.queue.1.notify_all();
        }
    }

    /// Sleeps while the sequence holds `seen`, at most `nap` (`None`: until
    /// woken); false if the nap ran out.
    fn sleep(&self, seen: u32, nap: Option<Duration>) -> bool {
        #[cfg(not(loom))]
        {
            let timeout = nap.map(|d| libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: libc::c_long::from(d.subsec_nanos() as i32),
            });
            let at = timeout.as_ref().map_or(std::ptr::null(), std::ptr::from_ref);
            // SAFETY: FUTEX_WAIT (shared) on an aligned u32 that stays mapped
            // during the call, with a relative timeout or none; it reads the
            // word and writes nothing.
            let r = unsafe { libc::syscall(libc::SYS_futex, self.page.seq().as_ptr(), libc::FUTEX_WAIT, seen, at) };
            !(r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT))
        }
        #[cfg(loom)]
        {
            // Under loom no nap runs out: a lost wake-up is a deadlock.
            let _ = nap;
            let queue = self.queue.0.lock();
            // Relaxed: compared under the queue's lock, as the kernel does.
            if self.page.seq().load(Ordering::Relaxed) == seen {
                drop(self.queue.1.wait(queue));
            }
            true
        }
    }

    /// Waits until `room` (which looks at these slots, among others) is
    /// true or `deadline` passes; false if it passed. Every sleep is at
    /// most [`DEATH_BOUND`], after which dead owners of the slots that
    /// leave no room for offsets up to `end() + n` are cleared.
    pub(crate) fn wait(
        &self,
        deadline: Option<Instant>,
        n: u64,
        mut end: impl FnMut() -> u64,
        mut room: impl FnMut() -> bool,
    ) -> bool {
        loop {
            if room() {
                return true;
            }
            // Relaxed: K2 orders it before the look below.
            self.page.waiters().fetch_add(1, Ordering::Relaxed);
            // K2, SeqCst fence: orders the registration before the look at
            // the positions; pairs with K1 in `moved`.
            crate::sync::fence_or_weakened!("K2", Ordering::SeqCst);
            // Acquire: pairs with the Release advance in `wake`.
            let seen = self.page.seq().load(Ordering::Acquire);
            let ready = room();
            let mut ran_out = false;
            let mut late = false;
            if !ready {
                let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                if left == Some(Duration::ZERO) {
                    late = true;
                } else {
                    let nap = if cfg!(loom) { left } else { Some(left.map_or(DEATH_BOUND, |l| l.min(DEATH_BOUND))) };
                    ran_out = !self.sleep(seen, nap);
                }
            }
            // Relaxed: only skips wakes; a stale count costs a spare wake.
            self.page.waiters().fetch_sub(1, Ordering::Relaxed);
            if ready {
                return true;
            }
            if late {
                return false;
            }
            if ran_out {
                self.reap(end(), n);
            }
        }
    }

    /// Clears the slots that leave no room for offsets up to `end + n` and
    /// whose lock no one holds: their owners died (see "A subscriber that
    /// dies"). Wakes the waiters if it cleared one.
    fn reap(&self, end: u64, n: u64) {
        let mut blocking = Vec::new();
        self.for_each_claimed(|slot, position, limit| {
            if end + n > position.saturating_add(limit) {
                blocking.push(slot);
            }
        });
        let mut cleared = false;
        for slot in blocking {
            // Held until the end of this iteration: the clear is made
            // under the slot's lock, as a detach makes it.
            let Some(_lock) = self.lock_slot(slot) else { continue };
            // Acquire: a detach that cleared it released the lock after.
            if self.page.owner(slot).load(Ordering::Acquire) != 0 {
                self.clear(slot);
                cleared = true;
            }
        }
        if cleared {
            log::warn!("a Block subscriber of another process died holding back publishers; its slot was cleared");
            self.moved();
        }
    }

    /// Clears `slot` (its lock held) and lowers the count.
    fn clear(&self, slot: usize) {
        // Release: a claimer that takes the lock next reads it free.
        self.page.owner(slot).store(0, Ordering::Release);
        // Relaxed: a count only; publishers read slots through owners.
        self.page.count().fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
impl Slot {
    /// Lets go of the lock and leaves the slot claimed, as the death of
    /// its process does.
    fn abandon(self) {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: each field is read once out of a value that is never
        // dropped, and dropped once here.
        unsafe {
            drop(std::ptr::read(&this._lock));
            drop(std::ptr::read(&this.blockers));
        }
    }
}

impl Slot {
    /// Detaches the subscriber: clears the slot and wakes the waiting
    /// publishers (once; the drop does it if no one did). The lock stays
    /// held until the drop, so no one reaps or claims the slot meanwhile.
    pub(crate) fn detach(&self) {
        // Relaxed: only this process's callers race here, for the one clear.
        if !self.detached.swap(true, Ordering::Relaxed) {
            self.blockers.clear(self.index);
            self.blockers.moved();
        }
    }
}

impl Drop for Slot {
    /// Detaches (if not yet), then lets go of the lock: after the clear,
    /// so no one reaps it twice.
    fn drop(&mut self) {
        self.detach();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn dir(what: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("rill-blockers-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_claimed_slot_bounds_the_room_and_a_dropped_one_frees_it() {
        let dir = dir("claim");
        let b = SharedBlockers::open(&dir, true).unwrap();
        let other = SharedBlockers::open(&dir, false).unwrap();
        assert!(!other.any());
        let slot = SharedBlockers::claim(&b, 10, 2).unwrap();
        assert!(other.any());
        assert!(other.has_room(11, 1));
        assert!(!other.has_room(12, 1), "12 is two past position 10");
        assert_eq!(other.min_limit(), Some(2));
        b.set_position(&slot, 11);
        assert!(other.has_room(12, 1));
        // A second claim takes another slot; its lock is held.
        let second = SharedBlockers::claim(&other, 0, 5).unwrap();
        assert_ne!(second.index, slot.index);
        assert!(b.lock_slot(slot.index).is_none(), "a live owner's lock is held");
        drop(slot);
        drop(second);
        assert!(!other.any());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_slot_whose_lock_nobody_holds_is_reaped_by_a_waiter() {
        let dir = dir("reap");
        let b = SharedBlockers::open(&dir, true).unwrap();
        let slot = SharedBlockers::claim(&b, 0, 1).unwrap();
        let index = slot.index;
        // As a process's death does: the lock goes, the slot stays.
        slot.abandon();
        assert!(b.any(), "the slot still names its owner");
        let waited = b.wait(None, 1, || 5, || b.has_room(5, 1));
        assert!(waited, "the dead owner's slot was cleared");
        assert!(!b.any());
        assert_eq!(b.page.owner(index).load(Ordering::Relaxed), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
