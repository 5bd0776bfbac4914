//! The consumer groups' side of the control plane: the hooks a pull
//! consumer calls into the broker that made it (`GroupHost`: joining,
//! committing, leaving, expelling idle members; see `group.rs` for why a
//! lock is right there), and deleting a group's committed offsets.

use std::time::Duration;

use super::BrokerInner;
use super::data_dir::wait_offsets;
use crate::broker::consumer::{Assignment, ConsumerCore, GroupHost};
use crate::broker::group::Group;
use crate::broker::names;
use crate::broker::topic::Topic;
use crate::error::{Error, Result};
use crate::sync::{Arc, Name};

impl BrokerInner {
    /// Forgets consumer group `group`'s committed offsets on `topic`.
    pub(crate) fn delete_group(&self, group: &str, topic: &str) -> Result<()> {
        names::validate_group(group)?;
        names::validate_topic(topic)?;
        self.refuse_when_shared("a consumer group")?;
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

    fn dead_letter_topic(&self, name: &str) -> Result<Arc<Topic>> {
        self.topic_or_create(name)
    }
}

fn group_key(core: &ConsumerCore) -> (String, Name) {
    (core.group.clone(), core.topic.name.clone())
}

fn assignment_of(g: &Group, id: u64) -> Option<Assignment> {
    Some(Assignment { partitions: g.assignment(id)?.to_vec(), committed: g.committed.clone() })
}
