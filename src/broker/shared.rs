//! Shared (competing) push subscriptions: several live subscriptions with
//! one name, whose partitions are divided among them.
//!
//! This is the one-process machinery (`Sharing::Exclusive`). In
//! `Sharing::Processes` mode every member, in this process or another, is
//! a member of the name's folder in the data directory instead, and takes
//! and gives up partitions through their locks (`control/shared_procs.rs`,
//! and "Shared subscriptions" in `store/membership.rs`).
//!
//! # Members, and a hand-over under the control mutex
//!
//! Each member is an ordinary subscription (`SubCore`) that reads only the
//! partitions assigned to it, so each partition is delivered by one member,
//! in order, with the member's own drain loop, retries and dead letters. The
//! group (`SharedGroup`) records who owns which partition; it lives in the
//! broker's control plane and changes only under its mutex, when a member
//! joins or closes. The assignment is the sticky one of consumer groups
//! (`group::spread`): a join or a close moves as few partitions as it can.
//!
//! A moved partition is handed over in two steps, and the owner on paper
//! (the group's record) may run ahead of the reader that holds it:
//!
//! 1. The rebalance changes the record and asks the old holder to give the
//!    partition up (`subscription::attach::revoke`). The holder's drainer does so at the
//!    start of its next round, a batch boundary: every message before its
//!    cursor is settled (acked, dead-lettered or dropped), and one waiting
//!    for a retry keeps the partition until it is settled. It stops
//!    listening to the partition and reports the cursor's offset
//!    (`SharedGroup::released`).
//! 2. Under the mutex, the partition goes to whoever owns it on paper *now*
//!    (the record may have changed again meanwhile), whose reader starts at
//!    that offset. With no member left, the offset is kept as the durable
//!    name's saved position, where the next member starts.
//!
//! A closing member hands over everything it still reads the same way, from
//! the close hook, which runs after its last handler call: its positions are
//! final then, and a message waiting for a retry is not behind them (its
//! reader's cursor was rewound to it). So nothing acked is delivered twice, and nothing unacked is
//! lost: the only redelivery is of what a closing member had handled but
//! not yet settled when its last handler call returned, which is none for
//! a handler that returns its ack.
//!
//! A member whose handler call overruns `ack_timeout` is *stalled*: its
//! partitions are handed over at once, from the watch (see
//! `subscription/deadline.rs`), not by its drainer, which is stuck in the
//! call; the stuck partition from the stuck message. A stalled member
//! stays a member but owns nothing until the membership changes: only a
//! join or a leave clears the mark (`refresh`), and only of a member whose
//! drainer has let go of what it read by then; another member's stall
//! does not (unless every member is stalled, so no partition is left
//! without an owner). So work moves away from a stalled member once and
//! does not come back at the next stall elsewhere: with handlers that
//! always overrun, it used to go back and forth between the members.
//!
//! The stuck message comes again once: the group remembers, per
//! partition, where the last stalled call's reader resumed
//! (`redelivered`). A stall of a call that resumes there again is the
//! same message stalling at its second member: nothing moves, and that
//! call's ack counts when it comes, as for a member alone.
//!
//! A lock is right here: a hand-over changes two members at once (one stops
//! reading a partition, another starts at the first one's offset), and a
//! release must find the owner as of the release, not as of the revoke,
//! which a mutex orders for free. It is taken only on join, close and
//! hand-over, never on the publish path: publishers only signal the
//! listeners of a partition, and a member is a listener only of what it
//! reads.

use super::subscription::{SubCore, deadline};
use crate::sync::Arc;

/// A member of a shared subscription.
struct Member {
    core: Arc<SubCore>,
    /// Partitions it owns on paper, ascending.
    partitions: Vec<u32>,
    /// Left out of rebalances until a join or leave (see the module docs).
    stalled: bool,
}

/// A shared subscription's live members, oldest first.
pub(crate) struct SharedGroup {
    /// The one topic its members read.
    pub(crate) topic: String,
    partitions: usize,
    members: Vec<Member>,
    /// Per partition, the resume offset of the last stalled call handed
    /// over from it: its message has come again once already.
    redelivered: Vec<Option<u64>>,
}

/// What a join or leave asks of the members.
pub(crate) struct Moves {
    /// (member, partition) pairs: the member must give the partition up.
    pub(crate) revoke: Vec<(Arc<SubCore>, u32)>,
    /// Partitions owned by nobody before, now the joining member's: it starts
    /// reading them at once.
    pub(crate) take: Vec<u32>,
}

impl SharedGroup {
    pub(crate) fn new(topic: String, partitions: usize) -> SharedGroup {
        SharedGroup { topic, partitions, members: Vec::new(), redelivered: vec![None; partitions] }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Adds a member and rebalances.
    pub(crate) fn join(&mut self, core: Arc<SubCore>) -> Moves {
        let held: Vec<u32> = self.members.iter().flat_map(|m| m.partitions.iter().copied()).collect();
        self.refresh();
        self.members.push(Member { core, partitions: Vec::new(), stalled: false });
        let mut moves = self.rebalance();
        let new = &self.members[self.members.len() - 1];
        moves.take = new.partitions.iter().copied().filter(|p| !held.contains(p)).collect();
        moves
    }

    /// Removes member `id` and rebalances what it owned over the others.
    pub(crate) fn leave(&mut self, id: u64) -> Moves {
        self.members.retain(|m| m.core.id != id);
        self.refresh();
        self.rebalance()
    }

    /// True if a member other than `id` can take partitions over (it is
    /// not stalled itself). A stall elsewhere is no membership change: a
    /// stalled member stays left out (see the module docs).
    pub(crate) fn others_can_take(&self, id: u64) -> bool {
        self.members.iter().any(|m| m.core.id != id && !m.stalled)
    }

    /// True if a stalled call on `partition` resuming at `resume` is of a
    /// message that already came again after a stall: it is not moved twice.
    pub(crate) fn came_again(&self, partition: u32, resume: u64) -> bool {
        self.redelivered.get(partition as usize).is_some_and(|&r| r == Some(resume))
    }

    /// Records that the stalled call on `partition` resuming at `resume` was
    /// handed over: its message is about to come again.
    pub(crate) fn redelivering(&mut self, partition: u32, resume: u64) {
        if let Some(r) = self.redelivered.get_mut(partition as usize) {
            *r = Some(resume);
        }
    }

    /// Takes stalled member `id` out of the assignment and rebalances what
    /// it owned over the others; it stays a member.
    pub(crate) fn expel(&mut self, id: u64) -> Moves {
        for m in self.members.iter_mut().filter(|m| m.core.id == id) {
            m.stalled = true;
        }
        self.rebalance()
    }

    /// At a join or leave: members whose stalled call has returned (and
    /// whose drainer let go) may own partitions again.
    fn refresh(&mut self) {
        for m in &mut self.members {
            m.stalled = deadline::is_stalled(&m.core);
        }
    }

    /// Who owns `partition` on paper.
    pub(crate) fn owner(&self, partition: u32) -> Option<&Arc<SubCore>> {
        self.members.iter().find(|m| m.partitions.contains(&partition)).map(|m| &m.core)
    }

    /// Spreads the partitions (`group::spread`); returns the partitions a
    /// member owned before and not now, which it must give up.
    fn rebalance(&mut self) -> Moves {
        let before: Vec<Vec<u32>> = self.members.iter().map(|m| m.partitions.clone()).collect();
        // Stalled members own nothing, unless all are stalled (then the
        // partitions wait in them rather than in nobody).
        let all_stalled = self.members.iter().all(|m| m.stalled);
        let eligible: Vec<bool> = self.members.iter().map(|m| all_stalled || !m.stalled).collect();
        let mut owned: Vec<Vec<u32>> =
            before.iter().zip(&eligible).filter(|&(_, &e)| e).map(|(parts, _)| parts.clone()).collect();
        if !owned.is_empty() {
            super::group::spread(&mut owned, self.partitions);
        }
        let mut owned = owned.into_iter();
        let mut revoke = Vec::new();
        for ((member, old), e) in self.members.iter_mut().zip(before).zip(eligible) {
            let now = if e { owned.next().unwrap_or_default() } else { Vec::new() };
            revoke.extend(old.iter().filter(|p| !now.contains(p)).map(|&p| (member.core.clone(), p)));
            member.partitions = now;
        }
        Moves { revoke, take: Vec::new() }
    }
}
