//! A durable subscription's name held by this process in
//! `Sharing::Processes` mode, as the control plane keeps it
//! (`Control::held`); what is done with it is `named.rs`'s.

use std::collections::HashMap;

use crate::broker::store::{NameHold, Positions};
use crate::broker::subscription::SubCore;
use crate::sync::{Arc, Name};

/// A durable subscription's name, held by this process while the
/// subscription is live (in `Control::held`).
pub(crate) struct Held {
    /// The id of the subscription holding it.
    pub(crate) id: u64,
    pub(crate) hold: Arc<NameHold>,
    /// The positions its slots held when it was taken: kept for the
    /// partitions the subscription does not read now (a topic its pattern
    /// matched before, absent meanwhile), as `Control::durable` keeps them
    /// in `Exclusive` mode.
    pub(crate) base: HashMap<(Name, u32), u64>,
}

impl Held {
    /// `base` with `sub`'s positions over it, as the slots hold them.
    pub(super) fn positions(&self, sub: &SubCore) -> Positions {
        let mut all = self.base.clone();
        for (topic, partition, offset) in sub.positions() {
            all.insert((topic, partition), offset);
        }
        let mut v: Positions = all.into_iter().map(|((t, p), o)| (t.to_string(), p, o)).collect();
        v.sort();
        v
    }
}
