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
//!   only, every [`LOOK_EVERY`]: it lists the live members, asks its drainer to
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
use crate::sync::{Arc, Mutex};

/// How often a member looks at the others when nothing is announced: the
/// fallback for a member whose process died (which announces nothing), so
/// a dead member's partitions are taken within about this time (its lock
/// files show the death at once; only the look waits). Joins, leaves and
/// releases are announced and followed at once (see "Announcing changes"
/// in `store/membership.rs`). Tests may make it longer with
/// [`set_look_fallback`].
pub(crate) const LOOK_EVERY: Duration = Duration::from_secs(1);

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
    LOOK_FALLBACK.get().copied().unwrap_or(LOOK_EVERY)
}

/// One member's share of a shared subscription across processes.
pub(crate) struct ProcessShare {
    /// True if the slots written at a round's end or a release are synced
    /// (`Fsync::Always`).
    sync: bool,
    topic: Arc<Topic>,
    start: StartPosition,
    state: Mutex<Option<Membership>>,
}

impl ProcessShare {
    /// A member of `topic`'s shared subscription through `membership`
    /// (joined, owning nothing yet), starting new partitions at `start`.
    pub(super) fn new(membership: Membership, topic: Arc<Topic>, start: StartPosition, sync: bool) -> ProcessShare {
        ProcessShare { sync, topic, start, state: Mutex::new(Some(membership)) }
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
        for p in m.owned() {
            if !target.contains(&p) {
                // Its drainer lets go at a batch boundary, then `release`.
                attach::revoke(sub, p);
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
        SubCore::poke(sub);
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
/// fallback (`every`: it schedules the next one), or one asked for by an
/// announcement (`None`: once).
pub(crate) struct Look {
    share: Arc<ProcessShare>,
    sub: Arc<SubCore>,
    timer: Arc<Timer<Look>>,
    every: Option<Duration>,
}

impl Job for Look {
    fn run(self) {
        if self.share.look(&self.sub)
            && let Some(every) = self.every
        {
            let timer = self.timer.clone();
            timer.schedule(every, self);
        }
    }
}

/// The shared members of a broker across processes: their looks' timer,
/// and the members, so that an announcement has each look at once (see
/// "Announcing changes" in `store/membership.rs`).
pub(crate) struct Looks {
    timer: Arc<Timer<Look>>,
    /// Each member's share and subscription; a closed one is dropped at
    /// the next announcement (its close announces) or when the broker
    /// closes.
    members: Mutex<Vec<(Arc<ProcessShare>, Arc<SubCore>)>>,
}

impl Looks {
    /// Starts the timer's thread.
    pub(super) fn start() -> crate::error::Result<Looks> {
        Ok(Looks { timer: Arc::new(Timer::start_named("rill-shared-look")?), members: Mutex::new(Vec::new()) })
    }

    /// A member that has just joined: its first look now, on this thread
    /// (it takes the free partitions of its target), then the fallback
    /// ones, and one at each announcement. Listed before that first look:
    /// an announcement handled from now on finds it, and one handled
    /// before was of a change made before the look, which sees it.
    pub(super) fn add(&self, share: Arc<ProcessShare>, sub: &Arc<SubCore>) {
        self.members.lock().push((share.clone(), sub.clone()));
        if share.look(sub) {
            let every = Some(look_fallback());
            let timer = self.timer.clone();
            timer.schedule(look_fallback(), Look { share, sub: sub.clone(), timer: self.timer.clone(), every });
        }
    }

    /// An announcement came (the doorbell thread's hook): a look at once,
    /// on the timer's thread, for every member still there.
    pub(crate) fn look_all_now(&self) {
        let mut members = self.members.lock();
        members.retain(|(_, sub)| !sub.is_closed());
        for (share, sub) in members.iter() {
            let job = Look { share: share.clone(), sub: sub.clone(), timer: self.timer.clone(), every: None };
            self.timer.schedule(Duration::ZERO, job);
        }
    }

    /// Stops the timer (the broker is closing).
    pub(super) fn stop(&self) {
        self.timer.stop();
        self.members.lock().clear();
    }
}
