//! Shared subscriptions in `Sharing::Processes` mode: each member holds a
//! membership of the name's folder under `shared/` (the protocol of
//! consumer groups across processes, see "Shared subscriptions" in
//! `store/membership.rs`) and reads only the partitions whose lock it holds.
//!
//! A member's hooks, made when it subscribes ([`ProcessShare`]):
//!
//! * a look, on the broker's `shared_look` timer, when it joins, whenever
//!   the doorbell thread finds the members' change counter moved (a join,
//!   a leave, a release or a dead member's file removed, in any process:
//!   see "Announcing changes" in `store/membership.rs`), and, for deaths
//!   only, when its broker sees a member's process exit and every
//!   [`LOOK_EVERY_WATCHED`] (one member of each name per process: see
//!   [`Looks`]): it lists the live members, asks its drainer to
//!   give up the partitions outside its target (`attach::revoke`), and
//!   takes the free ones in it, attaching a reader at the position saved in
//!   the partition's slots (at the subscription's start position, saved at
//!   once, if the slots hold none);
//! * the end of each drain round: the positions it reached, written to the
//!   slots of the partitions it holds (synced under `Fsync::Always`);
//! * a release (the drainer let go of a revoked partition at a batch
//!   boundary, everything before its cursor settled): that cursor written
//!   to the slots, and only then the partition's lock let go;
//! * the close, after its last handler call: every position written, then
//!   every lock let go and the member file removed.
//!
//! The broker's own shared-subscription machinery (`shared.rs`: a
//! hand-over under the control mutex) is not used: every member, in this
//! process or another, is a member of the name's folder. So `ack_timeout`
//! redelivery is a lone member's (a stalled call's message comes again to
//! the same member), and a stalled member keeps its partitions.

use std::time::Duration;

use crate::broker::dispatch::{Job, Timer};
use crate::broker::store::Membership;
use crate::broker::subscription::{StartPosition, SubCore, attach};
use crate::broker::topic::Topic;
use crate::log::{Cursor, Log};
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{Arc, Mutex};

/// How often a member looks at the others when nothing is announced, on a
/// system without pidfds: the fallback for a member whose process died
/// (which announces nothing), so a dead member's partitions are taken
/// within about this time (its lock files show the death at once; only
/// the look waits). Joins, leaves and releases are announced and followed
/// at once (see "Announcing changes" in `store/membership.rs`). Tests may
/// make it longer with [`set_look_fallback`].
pub(crate) const LOOK_EVERY: Duration = Duration::from_secs(1);

/// [`LOOK_EVERY`] where the broker watches the other members' processes
/// (see "Deaths" in `store/membership.rs`): a death is then followed when
/// it happens, and the fallback is left only the deaths that watch cannot
/// see (a lock a forked child holds on, a pid of another namespace), so it
/// runs less often, which is most of what an idle member costs
/// (`rill-bench --scenario ipc`'s idle line).
pub(crate) const LOOK_EVERY_WATCHED: Duration = Duration::from_secs(10);

/// The fallback period set by [`set_look_fallback`], if any.
static LOOK_FALLBACK: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();

/// For tests: sets, once per process, the fallback look period of this
/// process's shared members across processes (see [`LOOK_EVERY`]), so a
/// test can show a hand-over that only an announcement explains. Called
/// before the first member joins; a second call changes nothing.
#[doc(hidden)]
pub fn set_look_fallback(every: Duration) {
    let _ = LOOK_FALLBACK.set(every);
}

/// The fallback look period (see [`set_look_fallback`]).
fn look_fallback() -> Duration {
    let period = if crate::broker::store::Deaths::supported() { LOOK_EVERY_WATCHED } else { LOOK_EVERY };
    LOOK_FALLBACK.get().copied().unwrap_or(period)
}

/// One member's share of a shared subscription across processes.
pub(crate) struct ProcessShare {
    /// True if the slots written at a round's end or a release are synced
    /// (`Fsync::Always`).
    sync: bool,
    topic: Arc<Topic>,
    start: StartPosition,
    /// The name's folder under `shared/`: this process's members of one
    /// name share one fallback look (see [`Looks`]).
    folder: std::path::PathBuf,
    /// An announced look is scheduled and has not started: a further
    /// announcement needs no look of its own (see [`Looks::look_all_now`]).
    look_pending: AtomicBool,
    state: Mutex<Option<Membership>>,
}

impl ProcessShare {
    /// A member of `topic`'s shared subscription through `membership`
    /// (joined, owning nothing yet), starting new partitions at `start`.
    pub(super) fn new(membership: Membership, topic: Arc<Topic>, start: StartPosition, sync: bool) -> ProcessShare {
        let folder = membership.dir().to_path_buf();
        ProcessShare {
            sync,
            topic,
            start,
            folder,
            look_pending: AtomicBool::new(false),
            state: Mutex::new(Some(membership)),
        }
    }

    /// The look (see the module docs): gives up what is outside the target
    /// (through the drainer) and takes the free partitions in it. False
    /// once the member is closed or its topic deleted (no more looks).
    pub(super) fn look(&self, sub: &Arc<SubCore>) -> bool {
        if sub.is_closed() || self.topic.is_deleted() {
            return false;
        }
        let mut state = self.state.lock();
        let Some(m) = state.as_mut() else { return false };
        let target = match m.target() {
            Ok(target) => target,
            Err(e) => {
                log::warn!("rill: shared subscription {:?}: could not list its members: {e}", sub.name);
                return true;
            }
        };
        let mut changed = false;
        for p in m.owned() {
            if !target.contains(&p) {
                // Its drainer lets go at a batch boundary, then `release`.
                attach::revoke(sub, p);
                changed = true;
            }
        }
        let taken = match m.take(&target) {
            Ok(taken) => taken,
            Err(e) => {
                log::warn!("rill: shared subscription {:?}: could not take its partitions: {e}", sub.name);
                return true;
            }
        };
        let sync = self.sync;
        changed |= !taken.is_empty();
        for (p, saved) in taken {
            let Some(partition) = self.topic.partitions.get(p as usize) else { continue };
            let cursor = match saved {
                Some(offset) => partition.log.cursor_resuming(offset),
                None => {
                    // Saved at once: a member that takes it after this one
                    // died starts here too, not at its own start position.
                    let cursor = start_cursor(&partition.log, self.start);
                    if let Err(e) = m.commit(p, cursor.offset(), sync) {
                        log::warn!("rill: shared subscription {:?}: could not save a position: {e}", sub.name);
                    }
                    cursor
                }
            };
            attach::attach_to(sub, self.topic.name.clone(), partition, cursor);
        }
        drop(state);
        // The drainer has something to do only if a partition came or is
        // to go: a look that found the split as it was (most fallback
        // looks) wakes nobody.
        if changed {
            SubCore::poke(sub);
        }
        true
    }

    /// The end of a drain round: the positions reached, written to the
    /// slots of the partitions it holds.
    pub(super) fn save(&self, sub: &SubCore) {
        let sync = self.sync;
        let mut state = self.state.lock();
        let Some(m) = state.as_mut() else { return };
        for (_, p, offset) in sub.positions() {
            if let Err(e) = m.commit(p, offset, sync) {
                // The next round tries again; a death meanwhile redelivers
                // from the position saved before (at least once).
                log::warn!("rill: shared subscription {:?}: could not save a position: {e}", sub.name);
            }
        }
    }

    /// The drainer let go of `partition` at `offset` (everything before it
    /// settled): saved, then the lock let go.
    pub(super) fn release(&self, sub: &SubCore, partition: u32, offset: u64) {
        let sync = self.sync;
        let mut state = self.state.lock();
        let Some(m) = state.as_mut() else { return };
        if let Err(e) = m.commit(partition, offset, sync) {
            log::warn!("rill: shared subscription {:?}: could not save a position: {e}", sub.name);
        }
        m.give_up(partition);
    }

    /// The close, after the last handler call: every position saved, then
    /// the member leaves (its locks and member file go).
    pub(super) fn close(&self, sub: &SubCore) {
        self.save(sub);
        if let Some(mut m) = self.state.lock().take() {
            m.let_go();
        }
    }
}

/// A new partition's first cursor, at the subscription's start position.
fn start_cursor(log: &Log, start: StartPosition) -> Cursor {
    match start {
        StartPosition::Latest => log.cursor_from_end(),
        StartPosition::Earliest => log.cursor_from_first(),
        StartPosition::Offset(o) => log.cursor_resuming(o),
        StartPosition::Time(t) => log.cursor_resuming(log.offset_at_time(t)),
    }
}

/// A member's next look, on the broker's `shared_look` timer: the
/// fallback of its name's folder in this process (`every`: it schedules
/// the next one, or hands the fallback to another member of the folder
/// once its own has closed), or one asked for by an announcement (`None`:
/// once).
pub(crate) struct Look {
    share: Arc<ProcessShare>,
    sub: Arc<SubCore>,
    timer: Arc<Timer<Look>>,
    every: Option<Duration>,
    /// The broker's members, for the hand-over of a fallback.
    members: Arc<Mutex<Members>>,
}

impl Job for Look {
    fn run(self) {
        if self.every.is_none() {
            // Started: an announcement from now on schedules another look.
            // AcqRel: acquires the announcing swap in `look_all_now` (which
            // follows the doorbell's Acquire of the members' counter), so
            // this look's listing comes after the change announced.
            self.share.look_pending.swap(false, Ordering::AcqRel);
        }
        let alive = self.share.look(&self.sub);
        let Some(every) = self.every else { return };
        if alive {
            let timer = self.timer.clone();
            timer.schedule(every, self);
        } else {
            hand_over_fallback(&self.timer, &self.members, &self.share.folder, every);
        }
    }
}

/// The shared members of a broker across processes: their looks' timer,
/// and the members, so that an announcement has each look at once (see
/// "Announcing changes" in `store/membership.rs`).
///
/// The fallback look (for deaths, which announce nothing) is one per
/// name's folder in this process, not one per member: a look lists and
/// probes every member file of the folder, and one that finds a dead
/// member removes its file and announces it, so every member, here and in
/// other processes, then looks. So one chain of fallback looks runs per
/// folder, on one of its members; when that member closes, the chain
/// passes to another member of the folder, or ends with the last one. A
/// process with several members of one name probes the folder once per
/// period, whatever their number (the idle part of `rill-bench --scenario
/// ipc` counts the CPU this saves).
pub(crate) struct Looks {
    timer: Arc<Timer<Look>>,
    /// Each member's share and subscription, and the folders with a
    /// fallback chain running; a closed member is dropped at the next
    /// announcement (its close announces), at a hand-over, or when the
    /// broker closes. One lock, so that a member joining while the chain
    /// of its folder ends either is found by the hand-over or finds the
    /// chain ended and starts one.
    members: Arc<Mutex<Members>>,
}

#[derive(Default)]
pub(crate) struct Members {
    list: Vec<(Arc<ProcessShare>, Arc<SubCore>)>,
    chains: std::collections::HashSet<std::path::PathBuf>,
}

impl Looks {
    /// Starts the timer's thread.
    pub(super) fn start() -> crate::error::Result<Looks> {
        let members = Arc::new(Mutex::new(Members::default()));
        Ok(Looks { timer: Arc::new(Timer::start_named("rill-shared-look")?), members })
    }

    /// A member that has just joined: its first look now, on this thread
    /// (it takes the free partitions of its target), then one at each
    /// announcement, and the fallback ones of its folder if no other
    /// member of the folder in this process runs them. Listed before that
    /// first look: an announcement handled from now on finds it, and one
    /// handled before was of a change made before the look, which sees it.
    pub(super) fn add(&self, share: Arc<ProcessShare>, sub: &Arc<SubCore>) {
        let starts_chain = {
            let mut members = self.members.lock();
            members.list.push((share.clone(), sub.clone()));
            members.chains.insert(share.folder.clone())
        };
        let alive = share.look(sub);
        if starts_chain {
            let every = look_fallback();
            if alive {
                let job = self.look(share, sub.clone(), Some(every));
                self.timer.schedule(every, job);
            } else {
                hand_over_fallback(&self.timer, &self.members, &share.folder, every);
            }
        }
    }

    /// A look job for a member.
    fn look(&self, share: Arc<ProcessShare>, sub: Arc<SubCore>, every: Option<Duration>) -> Look {
        Look { share, sub, timer: self.timer.clone(), every, members: self.members.clone() }
    }

    /// An announcement came (the doorbell thread's hook): a look at once,
    /// on the timer's thread, for every member still there, unless one
    /// announced before has not started yet (it will see this change too:
    /// it lists the folder after it starts). Joins in several processes
    /// announce in bursts, and each look that takes or gives up a
    /// partition announces again; without this, every announcement of a
    /// burst queued one look per member.
    pub(crate) fn look_all_now(&self) {
        let mut members = self.members.lock();
        members.list.retain(|(_, sub)| !sub.is_closed());
        for (share, sub) in members.list.iter() {
            // AcqRel: releases what this thread acquired (the announced
            // change) to the look's swap in `Look::run`.
            if share.look_pending.swap(true, Ordering::AcqRel) {
                continue;
            }
            let job = self.look(share.clone(), sub.clone(), None);
            self.timer.schedule(Duration::ZERO, job);
        }
    }

    /// Stops the timer (the broker is closing).
    pub(super) fn stop(&self) {
        self.timer.stop();
        let mut members = self.members.lock();
        members.list.clear();
        members.chains.clear();
    }
}

/// The member running `folder`'s fallback chain has closed: the chain
/// passes to another live member of the folder (its next look in
/// `every`), or ends.
fn hand_over_fallback(
    timer: &Arc<Timer<Look>>,
    members: &Arc<Mutex<Members>>,
    folder: &std::path::Path,
    every: Duration,
) {
    let mut list = members.lock();
    list.list.retain(|(_, sub)| !sub.is_closed());
    let next = list.list.iter().find(|(share, _)| share.folder == folder).cloned();
    match next {
        Some((share, sub)) => {
            let job = Look { share, sub, timer: timer.clone(), every: Some(every), members: members.clone() };
            timer.schedule(every, job);
        }
        None => {
            list.chains.remove(folder);
        }
    }
}
