//! The offsets slots' group commit: numbered snapshots, written outside the
//! broker's lock. (The two slots, and why there are two, are in `mod.rs`,
//! "Never half-written"; their encoding is `format.rs`'s.)
//!
//! # Numbered snapshots
//!
//! The offsets file holds the *whole* state, so a newer snapshot includes
//! every change an older one holds. The broker takes a snapshot under its
//! control mutex (so snapshots are numbered in the order of the changes they
//! contain) and hands it to [`GroupCommit::request`], which only numbers it and
//! keeps it as the *pending* snapshot, replacing an older pending one: the
//! newest wins. The caller lets go of the control mutex and then
//! [`GroupCommit::wait`]s for its number. The first waiter that finds no write in
//! flight becomes the writer: it takes the pending snapshot, writes it (and
//! syncs, if any request it covers asked for that) without holding any lock,
//! then publishes "written up to n" / "synced up to n" and wakes the others.
//! A waiter returns once a snapshot numbered at least its own is written (or
//! synced, if it asked for that). So subscribing, closing and other commits
//! never wait behind an fsync, and commits made while one write is in flight
//! all share the next write and its fsync.
//!
//! Slots alternate per *write*, not per number (numbers of snapshots that a
//! newer one replaced before they were written are never written), so the
//! slot a write replaces is always the older of the two.
//!
//! ## The hand-over, and the steps it needs
//!
//! The state (`Commits`) is behind one mutex and changes only under it; the
//! write itself runs outside it. So there is no memory ordering to get
//! wrong, but there are three steps without which the hand-over from one
//! writer to the next loses something. Each is named, left out by
//! `.ci/fence-check` in turn, and caught by the loom model
//! `group_commit_hands_over_without_losing_a_snapshot`
//! (`loom-tests/tests/store.rs`), which runs this code on a real directory
//! with two committers, one asking for a sync:
//!
//! * **G1, the wake.** A waiter that finds a write in flight sleeps on
//!   `written`. The writer, back under the lock, publishes "written (and
//!   synced) up to n" and then wakes every waiter, still under the lock, so
//!   a waiter either saw the new marks before it slept or was asleep when
//!   the wake came. Without it, a waiter whose snapshot the write covered
//!   (or that must write the next one) sleeps for ever.
//! * **G2, the gather keeps a sync.** A newer snapshot replaces the pending
//!   one and inherits its need to be synced. Without it, a waiter that
//!   asked for a sync finds its snapshot replaced by a newer one written
//!   unsynced, "synced" below its number, and nothing pending to write.
//! * **G3, one writer at a time.** A waiter that finds a write in flight
//!   does not write. Without it, it would: either the snapshot it needs is
//!   already in the other writer's hands and nothing is pending to take,
//!   or it takes a newer one, and since the slot a write replaces is chosen
//!   from the last write's slot when the snapshot is taken, both writers
//!   choose the same slot; if the older snapshot's rename landed last, a
//!   waiter of the newer one would have returned with the older on disk,
//!   its commit lost.

use std::path::{Path, PathBuf};

use super::atomic_file::replace;
use super::format::{Offsets, Reader, SlotBody, Writer, frame_of, read_frame};
use crate::error::{Error, Result};
use crate::sync::{Condvar, Mutex};

/// Names of the two offsets slots.
pub(super) const OFFSETS_FILES: [&str; 2] = ["offsets.0", "offsets.1"];

/// The offsets slots of one data directory and their group commit (see
/// the module docs).
#[derive(Debug)]
pub(crate) struct GroupCommit<S: SlotBody = Offsets> {
    root: PathBuf,
    /// The names of its two slots in `root`: [`OFFSETS_FILES`], or a named
    /// subscription's own (`named.rs`).
    files: [String; 2],
    /// The offsets snapshots: numbered, pending, written (see the module docs).
    commits: Mutex<Commits<S>>,
    /// Wakes the waiters of [`GroupCommit::wait`] when a write ends.
    written: Condvar,
    /// Tests hold offsets writes here, to see what can run meanwhile.
    #[cfg(test)]
    pub(crate) gate: test_gate::Gate,
}

/// The state of the offsets snapshots, behind `GroupCommit::commits`.
#[derive(Debug)]
struct Commits<S> {
    /// The highest number handed out (the numbers continue those on disk).
    requested: u64,
    /// The newest snapshot not yet written.
    pending: Option<Pending<S>>,
    /// Every snapshot numbered up to this is written (in the page cache).
    written: u64,
    /// Every snapshot numbered up to this is on stable storage.
    synced: u64,
    /// A writer is writing a snapshot (outside the lock).
    writing: bool,
    /// The slot (index in `OFFSETS_FILES`) the last write went to.
    last_slot: usize,
    /// The contents of the last write, and whether it was synced: a snapshot
    /// equal to it is not written again (unless it needs a sync it did not get).
    last: Option<(S, bool)>,
    /// The last failed write: the highest number it covered, and why.
    failed: Option<(u64, Error)>,
    /// Writes made (for tests: how many commits shared one).
    writes: u64,
}

/// A snapshot waiting for its write.
#[derive(Debug)]
struct Pending<S> {
    seq: u64,
    offsets: S,
    /// Some request it covers wants it on stable storage.
    sync: bool,
}

/// A requested snapshot: wait for it with [`GroupCommit::wait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a snapshot is durable only once `wait` returns"]
pub(crate) struct Ticket {
    seq: u64,
    sync: bool,
}

impl GroupCommit {
    /// The group commit of the slots in `root`, whose newest valid slot
    /// (`read_offsets`) is `slot`, holding `offsets` numbered `seq`.
    pub(super) fn new(root: &Path, seq: u64, slot: usize, offsets: &Offsets) -> GroupCommit {
        Self::with_files(root, OFFSETS_FILES.map(String::from), seq, slot, offsets)
    }
}

impl<S: SlotBody> GroupCommit<S> {
    /// The group commit of the two slots `files` in `root` (a named
    /// subscription's, see `named.rs`), as [`GroupCommit::new`].
    pub(super) fn with_files(root: &Path, files: [String; 2], seq: u64, slot: usize, offsets: &S) -> GroupCommit<S> {
        GroupCommit {
            root: root.to_owned(),
            files,
            commits: Mutex::new(Commits {
                requested: seq,
                pending: None,
                written: seq,
                synced: seq,
                writing: false,
                last_slot: slot,
                last: Some((offsets.clone(), true)),
                failed: None,
                writes: 0,
            }),
            written: Condvar::new(),
            #[cfg(test)]
            gate: test_gate::Gate::default(),
        }
    }

    /// Numbers `offsets` (the whole state, newer than any snapshot requested
    /// before) and keeps it as the one to write next; cheap, so the broker
    /// calls it under its control mutex. `sync`: its waiter wants it on
    /// stable storage, not only written.
    pub(crate) fn request(&self, offsets: S, sync: bool) -> Ticket {
        let mut c = self.commits.lock();
        c.requested += 1;
        let seq = c.requested;
        // A pending snapshot not yet written is older: this one replaces it
        // (it holds all it holds), and inherits its need to be synced.
        // (G2 in the module docs.)
        let sync_all = sync || (crate::sync::step_kept!("G2") && c.pending.as_ref().is_some_and(|p| p.sync));
        c.pending = Some(Pending { seq, offsets, sync: sync_all });
        Ticket { seq, sync }
    }

    /// Returns once the snapshot of `ticket`, or a newer one, is written
    /// (synced, if it asked for that), writing it itself if no other caller
    /// is writing (see the module docs); the error of the write that covered
    /// it if that failed.
    pub(crate) fn wait(&self, ticket: Ticket) -> Result<()> {
        let mut c = self.commits.lock();
        loop {
            let done = if ticket.sync { c.synced } else { c.written };
            if done >= ticket.seq {
                return Ok(());
            }
            if let Some((seq, e)) = &c.failed
                && *seq >= ticket.seq
            {
                return Err(e.clone());
            }
            // One writer at a time (G3 in the module docs).
            if c.writing && crate::sync::step_kept!("G3") {
                c = self.written.wait(c);
                continue;
            }
            // Not written, no write in flight: the pending snapshot is this
            // ticket's or a newer one (only a write takes it away).
            let p = c.pending.take().expect("an unwritten snapshot is pending");
            let unchanged = c.last.as_ref().is_some_and(|(o, synced)| *o == p.offsets && (*synced || !p.sync));
            let slot = 1 - c.last_slot;
            c.writing = true;
            drop(c);
            let result = if unchanged { Ok(false) } else { self.write_offsets(slot, &p).map(|()| true) };
            c = self.commits.lock();
            c.writing = false;
            match result {
                Ok(wrote) => {
                    c.written = c.written.max(p.seq);
                    if p.sync || c.last.as_ref().is_some_and(|(_, synced)| *synced && unchanged) {
                        c.synced = c.synced.max(p.seq);
                    }
                    if wrote {
                        c.writes += 1;
                        c.last_slot = slot;
                        c.last = Some((p.offsets, p.sync));
                    }
                }
                Err(e) => c.failed = Some((p.seq, e)),
            }
            // Under the lock, after the marks (G1 in the module docs).
            if crate::sync::step_kept!("G1") {
                self.written.notify_all();
            }
        }
    }

    /// Writes snapshot `p` into `slot` (the one not holding the last write).
    fn write_offsets(&self, slot: usize, p: &Pending<S>) -> Result<()> {
        #[cfg(test)]
        self.gate.pass();
        let mut body = Writer::default();
        body.u64(p.seq);
        p.offsets.encode(&mut body);
        replace(&self.root, &self.files[slot], &frame_of(S::VERSION, &body.0), p.sync)
    }

    /// How many offsets snapshots were written since the store was opened.
    #[cfg(test)]
    pub(super) fn writes(&self) -> u64 {
        self.commits.lock().writes
    }
}

/// The newest valid offsets slot: its contents, sequence number and index
/// (with no valid slot, index 0, so the first write goes to slot 1, as the
/// number 1's parity said in the first format's writer).
pub(crate) fn read_offsets(root: &Path, repair: bool) -> Result<(Offsets, u64, usize)> {
    read_slots(root, &OFFSETS_FILES, repair)
}

/// [`read_offsets`] of the two slots `files` in `root` (a named
/// subscription's own, see `named.rs`).
pub(super) fn read_slots(root: &Path, files: &[&str; 2], repair: bool) -> Result<(Offsets, u64, usize)> {
    read_slots_of(root, files, repair)
}

/// [`read_slots`] of slots holding `S` (a named subscription's
/// [`super::format::NamedSlot`]), of any format `S` reads.
pub(super) fn read_slots_of<S: SlotBody>(root: &Path, files: &[&str; 2], repair: bool) -> Result<(S, u64, usize)> {
    let mut best: Option<(u64, S, usize)> = None;
    let mut damage = Vec::new();
    for (slot, name) in files.iter().enumerate() {
        let path = root.join(name);
        let decoded = read_frame(&path, S::VERSION).and_then(|frame| {
            frame
                .map(|(version, body)| {
                    let mut r = Reader::new(&path, &body);
                    let seq = r.u64()?;
                    Ok((seq, S::decode(&mut r, version)?))
                })
                .transpose()
        });
        match decoded {
            Ok(Some((seq, offsets))) if best.as_ref().is_none_or(|(s, ..)| seq > *s) => {
                best = Some((seq, offsets, slot))
            }
            Ok(_) => {}
            Err(e @ Error::Corrupt { .. }) => damage.push(e),
            Err(e) => return Err(e),
        }
    }
    match (best, damage.len()) {
        (Some((seq, offsets, slot)), n) => {
            if n > 0 {
                // The slot a crash interrupted; the other holds the state before it.
                log::warn!("rill: ignoring a damaged offsets slot ({}); using the other one", damage[0]);
            }
            Ok((offsets, seq, slot))
        }
        (None, 0) => Ok((S::default(), 0, 0)),
        (None, _) if repair => {
            log::warn!("rill: both offsets slots are damaged ({}); repair: starting without offsets", damage[0]);
            Ok((S::default(), 0, 0))
        }
        (None, _) => Err(damage.swap_remove(0)),
    }
}

/// A test seam: holds offsets writes while closed, and counts the writers
/// waiting at it, so a test can wait for "a write is in flight" on a
/// condition rather than a sleep.
#[cfg(test)]
pub(crate) mod test_gate {
    use crate::sync::{Condvar, Mutex};

    #[derive(Debug, Default)]
    pub(crate) struct Gate {
        /// (closed, writers held).
        state: Mutex<(bool, usize)>,
        changed: Condvar,
    }

    impl Gate {
        pub(crate) fn close(&self) {
            self.state.lock().0 = true;
        }

        pub(crate) fn open(&self) {
            self.state.lock().0 = false;
            self.changed.notify_all();
        }

        /// Waits (at most `limit`) until `n` writers are held; true if they are.
        pub(crate) fn wait_held(&self, n: usize, limit: std::time::Duration) -> bool {
            let deadline = std::time::Instant::now() + limit;
            let mut s = self.state.lock();
            while s.1 < n {
                let now = std::time::Instant::now();
                if now >= deadline {
                    return false;
                }
                s = self.changed.wait_timeout(s, deadline - now);
            }
            true
        }

        pub(crate) fn pass(&self) {
            let mut s = self.state.lock();
            if !s.0 {
                return;
            }
            s.1 += 1;
            self.changed.notify_all();
            while s.0 {
                s = self.changed.wait(s);
            }
            s.1 -= 1;
        }
    }
}
