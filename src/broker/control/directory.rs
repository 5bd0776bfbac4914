//! The directory-wide listing of pull consumers
//! (`Broker::directory_consumers`): this broker's from memory, every other
//! broker's on the data directory from its registry (see
//! `store/registry.rs`), each with the pid of its process.

use crate::broker::consumer::ConsumerCore;
use crate::error::Result;
use crate::sync::Arc;

use super::BrokerInner;

/// A live pull consumer (a member of a consumer group) of the data
/// directory and the process it lives in (see
/// [`Broker::directory_consumers`](crate::Broker::directory_consumers)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DirectoryConsumer {
    /// The pid of the process whose broker has it.
    pub pid: u32,
    /// True if it is this broker's.
    pub this_broker: bool,
    /// Its id, unique in its process: the [`GroupMember::id`](crate::GroupMember::id) of the member
    /// it is.
    pub id: u64,
    /// Its consumer group.
    pub group: String,
    /// The topic it reads.
    pub topic: String,
    /// Messages its polls returned ([`ConsumerStats::delivered`](crate::ConsumerStats::delivered)).
    pub delivered: u64,
    /// Messages retention trimmed before it polled them
    /// ([`ConsumerStats::missed`](crate::ConsumerStats::missed)).
    pub missed: u64,
    /// What the partitions it owned held past its position in them, at the
    /// end of its last poll (not the group's lag from its commits, which
    /// [`Broker::group_stats`](crate::Broker::group_stats) gives). Where its
    /// next record was still being written, 0 for that partition: what lies
    /// past a record reserved and not yet committed counts once it is
    /// committed, or given up (a publisher that died before its commit;
    /// see `Log::lag_from`).
    pub lag: u64,
}

impl BrokerInner {
    /// See `Broker::directory_consumers`.
    pub(crate) fn directory_consumers(&self) -> Result<Vec<DirectoryConsumer>> {
        self.check_open()?;
        let consumers: Vec<Arc<ConsumerCore>> = self.control.lock().consumers.values().cloned().collect();
        let mut v: Vec<DirectoryConsumer> = consumers
            .iter()
            .map(|c| {
                let counts = c.counts();
                DirectoryConsumer {
                    pid: self.pid,
                    this_broker: true,
                    id: c.id,
                    group: c.group.clone(),
                    topic: c.topic.name.to_string(),
                    delivered: counts.delivered,
                    missed: counts.missed,
                    lag: counts.lag,
                }
            })
            .collect();
        if let (Some(registry), Some(store)) = (&self.registry, self.store()) {
            for other in registry.others(store.root())?.consumers {
                let (d, c) = (other.desc, other.counts);
                v.push(DirectoryConsumer {
                    pid: other.pid,
                    this_broker: false,
                    id: d.id,
                    group: d.group,
                    topic: d.topic,
                    delivered: c.delivered,
                    missed: c.missed,
                    lag: c.lag,
                });
            }
        }
        v.sort_by_key(|c| (c.pid, c.id));
        Ok(v)
    }
}
