//! The consumer groups' side of the control plane: the hooks a pull
//! consumer calls into the broker that made it (`GroupHost`: joining,
//! committing, leaving, expelling idle members; see `group.rs` for why a
//! lock is right there), and deleting a group's committed offsets. In
//! `Sharing::Processes` mode a consumer's hooks are a [`ProcessMember`]
//! instead: its group spans processes, and its state is in the data
//! directory (see `store/membership.rs`).

use std::collections::HashMap;
use std::time::Duration;

use super::BrokerInner;
use super::data_dir::wait_offsets;
use crate::broker::consumer::{Assignment, ConsumerCore, GroupHost};
use crate::broker::doorbell::MembersWatch;
use crate::broker::group::Group;
use crate::broker::names;
use crate::broker::store::{Membership, Store};
use crate::broker::topic::Topic;
use crate::error::{Error, Result};
use crate::log::Sharing;
use crate::sync::{Arc, Mutex, Name};

impl BrokerInner {
    /// The data directory of a `Processes` broker, which groups span.
    fn shared_store(&self) -> Option<Arc<Store>> {
        if self.config.sharing != Sharing::Processes {
            return None;
        }
        self.store()
    }

    /// Processes mode: group `group`'s committed offsets on `topic` (of
    /// `partitions` partitions), as every process sees them; `None` if the
    /// group never had a member. `None` in `Exclusive` mode too (the
    /// control plane has them).
    pub(crate) fn shared_group_committed(
        &self,
        group: &str,
        topic: &str,
        partitions: u32,
    ) -> Result<Option<Vec<Option<u64>>>> {
        match self.shared_store() {
            Some(store) => store.group_committed(group, topic, partitions),
            None => Ok(None),
        }
    }

    /// Processes mode: every (group, topic) with commits in the data
    /// directory (a read failure is logged and lists none); empty in
    /// `Exclusive` mode.
    pub(crate) fn shared_group_list(&self) -> Vec<(String, String)> {
        let Some(store) = self.shared_store() else { return Vec::new() };
        store.group_list().unwrap_or_else(|e| {
            log::warn!("rill: could not list the consumer groups of the data directory: {e}");
            Vec::new()
        })
    }

    /// Forgets consumer group `group`'s committed offsets on `topic`.
    pub(crate) fn delete_group(&self, group: &str, topic: &str) -> Result<()> {
        names::validate_group(group)?;
        names::validate_topic(topic)?;
        if let Some(store) = self.shared_store() {
            let t = match self.topic_or_listed(topic) {
                Ok(t) => t,
                // As in one process, a deleted topic's group has nothing
                // to forget; what a group live at the delete left behind,
                // its members gone since, is removed now.
                Err(Error::NoSuchTopic(_)) => {
                    store.forget_deleted_group(group, topic)?;
                    return Err(Error::NotFound(format!("consumer group {group:?} has no offsets on topic {topic:?}")));
                }
                Err(e) => return Err(e),
            };
            return store.forget_group(group, topic, t.partitions.len() as u32);
        }
        let mut control = self.control.lock();
        self.check_open()?;
        let key = (group.to_owned(), Name::from(topic));
        match control.groups.get(&key) {
            None => Err(Error::NotFound(format!("consumer group {group:?} has no offsets on topic {topic:?}"))),
            Some(g) if !g.members.is_empty() => Err(Error::Busy(format!(
                "consumer group {group:?} has {} live member(s) on {topic:?}: close them before deleting the group",
                g.members.len()
            ))),
            Some(_) => {
                control.groups.remove(&key);
                let snapshot = self.snapshot_offsets(&control);
                drop(control);
                wait_offsets(snapshot)
            }
        }
    }
}

impl BrokerInner {
    /// `Sharing::Processes`: a member of a group or shared subscription's
    /// hooks: what it calls after it changed its folder (bumps the members'
    /// change counter and rings every doorbell of the directory: see
    /// "Announcing changes" in `store/membership.rs`), and the broker's
    /// watch of the other members' processes ("Deaths" there). `None`
    /// without a doorbell.
    pub(crate) fn member_announce(&self) -> Option<crate::broker::store::Hooks> {
        let bell = self.doorbell.as_ref()?.bell().clone();
        Some(crate::broker::store::Hooks {
            announce: std::sync::Arc::new(move || bell.members_changed()),
            deaths: self.deaths.clone()?,
        })
    }
}

/// The doorbell thread's hook when the members' change counter moved:
/// every local member looks soon, on its own thread (a consumer at its
/// next poll, or at once if it is waiting in one; a shared member on the
/// `shared_look` timer), never on the doorbell's, as a look can block on
/// the file system.
impl MembersWatch for BrokerInner {
    fn members_changed(&self) {
        let consumers: Vec<Arc<ConsumerCore>> = self.control.lock().consumers.values().cloned().collect();
        for c in consumers {
            // Its `sync` then follows the group (`ProcessMember::assignment`).
            c.assignment_changed();
        }
        let looks = self.shared_look.lock().clone();
        if let Some(looks) = looks {
            looks.look_all_now();
        }
    }
}

/// A consumer's hooks into the broker that made it; each takes the control
/// mutex (see `group.rs` for why a lock is right there).
impl GroupHost for Arc<BrokerInner> {
    fn is_closed(&self) -> bool {
        BrokerInner::is_closed(self)
    }

    fn join(&self, core: &Arc<ConsumerCore>) -> Result<Assignment> {
        let mut control = self.control.lock();
        // Under the mutex: `close` takes it to collect the consumers it
        // closes, so a consumer that joins after that sees the broker closed.
        self.check_open()?;
        if core.topic.is_deleted() {
            // Its group's key may belong to a new topic of the same name by now.
            return Err(core.topic.deleted_error());
        }
        control.consumers.insert(core.id, core.clone());
        let g = control.groups.entry((core.group.clone(), core.topic.name.clone())).or_default();
        g.join(core.clone(), core.topic.partitions.len() as u32);
        g.expel_idle(Some(core.id));
        Ok(assignment_of(g, core.id).expect("it just joined"))
    }

    fn assignment(&self, core: &ConsumerCore) -> Option<Assignment> {
        let control = self.control.lock();
        assignment_of(control.groups.get(&group_key(core))?, core.id)
    }

    fn expel_idle(&self, core: &ConsumerCore) -> Duration {
        let mut control = self.control.lock();
        control.groups.get_mut(&group_key(core)).map_or(Duration::MAX, |g| g.expel_idle(Some(core.id)))
    }

    fn commit(&self, core: &ConsumerCore, offsets: &[(u32, u64)]) -> Result<Vec<u32>> {
        let mut control = self.control.lock();
        if core.topic.is_deleted() {
            // Its group's key may belong to a new topic of the same name by now.
            return Err(core.topic.deleted_error());
        }
        let Some(g) = control.groups.get_mut(&group_key(core)) else {
            return Ok(offsets.iter().map(|&(p, _)| p).collect());
        };
        let mut refused = Vec::new();
        for &(partition, offset) in offsets {
            if g.owns(core.id, partition) {
                g.committed[partition as usize] = Some(offset);
                // Failed attempts at messages now behind the commit are moot.
                g.attempts.retain(|&(p, o), _| p != partition || o >= offset);
            } else {
                refused.push(partition);
            }
        }
        // The snapshot is numbered under the control mutex, so two commits
        // reach the data directory in the order they were made; it is written
        // (and synced) after the mutex is released, shared with other commits.
        if refused.len() < offsets.len() {
            let snapshot = self.snapshot_offsets(&control);
            drop(control);
            wait_offsets(snapshot)?;
        }
        Ok(refused)
    }

    fn committed(&self, core: &ConsumerCore) -> Vec<Option<u64>> {
        let control = self.control.lock();
        let mut committed = control.groups.get(&group_key(core)).map(|g| g.committed.clone()).unwrap_or_default();
        committed.resize(core.topic.partitions.len(), None);
        committed
    }

    /// Leaves the group; the others take its partitions.
    fn release_consumer(&self, core: &ConsumerCore) {
        let mut control = self.control.lock();
        control.consumers.remove(&core.id);
        if let Some(g) = control.groups.get_mut(&group_key(core)) {
            g.leave(core.id);
        }
    }

    fn nack(&self, core: &ConsumerCore, partition: u32, offset: u64, forget: bool) -> Option<u32> {
        let mut control = self.control.lock();
        let g = control.groups.get_mut(&group_key(core))?;
        if !g.owns(core.id, partition) {
            return None;
        }
        if forget {
            return g.attempts.remove(&(partition, offset));
        }
        let n = g.attempts.entry((partition, offset)).or_default();
        *n += 1;
        Some(*n)
    }

    fn dead_letter_topic(&self, name: &str, source_max: usize) -> Result<Arc<Topic>> {
        self.dead_letter_topic_or_create(name, Some(source_max))
    }
}

fn group_key(core: &ConsumerCore) -> (String, Name) {
    (core.group.clone(), core.topic.name.clone())
}

fn assignment_of(g: &Group, id: u64) -> Option<Assignment> {
    Some(Assignment { partitions: g.assignment(id)?.to_vec(), committed: g.committed.clone() })
}

/// A pull consumer's hooks in `Processes` mode: its membership of a group
/// that spans processes (see `store/membership.rs` for the protocol: a
/// member file per member, a lock per partition, slots per partition
/// written only by the lock's holder). Each consumer has its own, so two
/// consumers of one group in one process are two members, as in two
/// processes.
pub(crate) struct ProcessMember {
    inner: Arc<BrokerInner>,
    /// Shared with its consumer's `on_deleted` hook (a weak reference; a
    /// std `Arc`, as loom's has none, and nothing here is modelled).
    state: std::sync::Arc<Mutex<MemberState>>,
}

#[derive(Default)]
struct MemberState {
    /// `None` before the join and after the release.
    membership: Option<Membership>,
    /// Failed attempts (nacks) per (partition, offset) this member counted.
    attempts: HashMap<(u32, u64), u32>,
}

impl ProcessMember {
    pub(crate) fn new(inner: Arc<BrokerInner>) -> ProcessMember {
        ProcessMember { inner, state: std::sync::Arc::new(Mutex::new(MemberState::default())) }
    }
}

/// What member `m` owns now, with the committed offsets to start its new
/// partitions from.
fn shared_assignment(m: &Membership, partitions: u32) -> Result<Assignment> {
    let committed = (0..partitions).map(|p| m.committed(p)).collect::<Result<Vec<_>>>()?;
    Ok(Assignment { partitions: m.owned(), committed })
}

impl ProcessMember {
    /// Joins (its join announced) unless it is a member already, and
    /// takes its share: its first look.
    fn join_and_look(&self, core: &ConsumerCore, store: &Store) -> Result<Assignment> {
        let partitions = core.topic.partitions.len() as u32;
        let mut state = self.state.lock();
        if state.membership.is_none() {
            let m = store.join_group(&core.group, &core.topic.name, partitions, core.id)?;
            state.membership = Some(match self.inner.member_announce() {
                Some(announce) => m.announcing(announce),
                None => m,
            });
        }
        // Under the state's lock, which the hook takes: a delete that the
        // check in `join` missed marked the topic before its hook ran, so
        // either the hook runs after this (and leaves) or this sees the mark.
        if core.topic.is_deleted() {
            state.membership = None;
            return Err(core.topic.deleted_error());
        }
        let m = state.membership.as_mut().expect("set above");
        let target = m.target()?;
        m.rebalance(&target)?;
        shared_assignment(m, partitions)
    }
}

impl GroupHost for ProcessMember {
    fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }

    fn join(&self, core: &Arc<ConsumerCore>) -> Result<Assignment> {
        self.inner.check_open()?;
        if core.topic.is_deleted() {
            return Err(core.topic.deleted_error());
        }
        let store =
            self.inner.store().ok_or_else(|| Error::InvalidArgument("Sharing::Processes needs a data_dir".into()))?;
        {
            let mut control = self.inner.control.lock();
            // Under the mutex: `close` takes it to collect the consumers it
            // closes, so a consumer that joins after that sees the broker
            // closed. And before its first look (the rebalance below): an
            // announcement its doorbell handles from now on finds it, and
            // one handled before was of a change made before that look,
            // which sees it.
            self.inner.check_open()?;
            control.consumers.insert(core.id, core.clone());
        }
        // Leaves the group when its topic is deleted, whether or not the
        // handle is used again (see "Deleting a topic" in
        // `store/membership.rs`). Weak: the core outlives the handle in
        // the lists of a delete under way.
        let state = std::sync::Arc::downgrade(&self.state);
        core.on_deleted(Box::new(move || {
            if let Some(state) = state.upgrade() {
                // Its file removed and its locks dropped, announced.
                state.lock().membership = None;
            }
        }));
        let joined = self.join_and_look(core, &store).and_then(|assignment| {
            // A close meanwhile closed it: as if it had come after.
            self.inner.check_open().map(|()| assignment)
        });
        if joined.is_err() {
            self.inner.control.lock().consumers.remove(&core.id);
        }
        joined
    }

    fn assignment(&self, core: &ConsumerCore) -> Option<Assignment> {
        let mut state = self.state.lock();
        let m = state.membership.as_mut()?;
        let rebalanced = m.target().and_then(|target| m.rebalance(&target));
        if let Err(e) = rebalanced {
            log::warn!("rill: consumer group {:?}: could not follow its members: {e}", core.group);
        }
        shared_assignment(m, core.topic.partitions.len() as u32).ok()
    }

    fn owned(&self, _core: &ConsumerCore) -> Vec<u32> {
        self.state.lock().membership.as_ref().map(Membership::owned).unwrap_or_default()
    }

    /// The fallback look, for deaths only (joins, leaves and releases are
    /// announced: see "Announcing changes" in `store/membership.rs`):
    /// looks at the members (removing dead ones' files): if this member
    /// owns other partitions than it should, its assignment changes, and
    /// its next `sync` gives up and takes partitions. Every half of its
    /// `session_timeout`, so a dead member's partitions reach the
    /// survivors within it.
    fn expel_idle(&self, core: &ConsumerCore) -> Duration {
        let mut state = self.state.lock();
        if let Some(m) = &mut state.membership
            && m.target().is_ok_and(|target| target != m.owned())
        {
            core.assignment_changed();
        }
        core.session_timeout / 2
    }

    fn commit(&self, core: &ConsumerCore, offsets: &[(u32, u64)]) -> Result<Vec<u32>> {
        if core.topic.is_deleted() {
            return Err(core.topic.deleted_error());
        }
        let sync = self.inner.store().is_some_and(|s| s.sync_commits());
        let mut state = self.state.lock();
        let MemberState { membership, attempts } = &mut *state;
        let Some(m) = membership else { return Ok(offsets.iter().map(|&(p, _)| p).collect()) };
        let mut refused = Vec::new();
        for &(partition, offset) in offsets {
            if m.commit(partition, offset, sync)? {
                // Failed attempts at messages now behind the commit are moot.
                attempts.retain(|&(p, o), _| p != partition || o >= offset);
            } else {
                refused.push(partition);
            }
        }
        Ok(refused)
    }

    fn committed(&self, core: &ConsumerCore) -> Vec<Option<u64>> {
        let partitions = core.topic.partitions.len() as u32;
        let state = self.state.lock();
        let read = match &state.membership {
            Some(m) => (0..partitions).map(|p| m.committed(p)).collect::<Result<Vec<_>>>(),
            None => self
                .inner
                .shared_group_committed(&core.group, &core.topic.name, partitions)
                .map(|c| c.unwrap_or_else(|| vec![None; partitions as usize])),
        };
        read.unwrap_or_else(|e| {
            log::warn!("rill: consumer group {:?}: could not read its commits: {e}", core.group);
            vec![None; partitions as usize]
        })
    }

    /// Leaves the group: its member file goes, then its partition locks
    /// (no commit is in flight: each returns before the next call).
    fn release_consumer(&self, core: &ConsumerCore) {
        self.inner.control.lock().consumers.remove(&core.id);
        let mut state = self.state.lock();
        if let Some(m) = &mut state.membership {
            m.let_go();
        }
        state.membership = None;
    }

    fn nack(&self, _core: &ConsumerCore, partition: u32, offset: u64, forget: bool) -> Option<u32> {
        let mut state = self.state.lock();
        if !state.membership.as_ref()?.owns(partition) {
            return None;
        }
        if forget {
            return state.attempts.remove(&(partition, offset));
        }
        let n = state.attempts.entry((partition, offset)).or_default();
        *n += 1;
        Some(*n)
    }

    fn dead_letter_topic(&self, name: &str, source_max: usize) -> Result<Arc<Topic>> {
        self.inner.dead_letter_topic_or_create(name, Some(source_max))
    }
}
