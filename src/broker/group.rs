//! A consumer group on one topic: its committed offsets, its live members
//! and which partitions each one owns.
//!
//! # Assignment and its hand-over, under the control mutex
//!
//! The group's state (members, their partitions, committed offsets) lives in
//! the broker's control plane and changes only under its mutex: when a
//! member joins, leaves (close, free, broker close) or is expelled for not
//! polling, and when a member commits. Nothing on the publish path takes that
//! mutex or reads this state: a publisher only signals the listeners of its
//! partition, and a member is a listener only of the partitions it owns.
//! A lock is right here because a rebalance changes several members at once
//! (one gives a partition up, another takes it) and a commit must be refused
//! atomically with respect to that change: with a lock, "partition 2 is
//! member B's now" and "A's commit of partition 2 is refused" are ordered by
//! the mutex, and no interleaving lets A move B's committed offset. The cost
//! is paid per join, leave and commit, which are rare next to messages.
//!
//! A member learns about a change without the lock: the rebalance bumps the
//! member's *assignment generation* (`ConsumerCore::generation`, a Release
//! store under the mutex) and notifies its waiters, so a member parked in
//! `poll` wakes (the same wait/notify protocol as a publish, `waiters.rs`).
//! Each call of the member compares the generation with the one it last
//! took (an Acquire load) and, only when it moved, takes the mutex to read
//! its new partitions. Between the rebalance and that call the old owner may
//! still read a partition it lost (its cursor is its own); what it reads
//! there it cannot commit, and the new owner starts from the group's
//! committed offset, so the messages are delivered again (at least once),
//! never skipped.
//!
//! # Sticky assignment
//!
//! With `n` partitions and `m` members each member's quota is `n / m`, and
//! the `n % m` members that own the most already (ties to the older member)
//! get one more. Members above their quota give up their highest partitions,
//! members below take the lowest free ones; everything else stays where it
//! is, so a rebalance moves as few partitions as the quotas allow. A join
//! and a leave rebalance; an expulsion does not (below).
//!
//! # Progress whatever the session timeout
//!
//! A member is expelled when it has not polled for its session timeout, by
//! another member's call (a poll looks every quarter of the shortest
//! timeout, a join always). If the timeout is shorter than the time between
//! a member's polls (members polled in turn, slow handling), members expire
//! between their own polls and the group churns on every call. Rebalancing
//! an expelled member's partitions over the survivors by quota then hands
//! them, again and again, to members that are not polling and expire before
//! they do: with 8 members on 3 partitions and a 1 ms timeout, partition 0
//! went from one idle member to the next and was never read, while the
//! partitions that joining members took were.
//!
//! So the partitions of the members a call expels go to the *caller*: the
//! one member known to be alive, since it is inside a call. A poll rejoins
//! first (if it was expelled itself), then expels, then reads; and a poll
//! gives each partition it owns a share of its `max` (`fair_shares` in
//! `consumer.rs`), so what it was just given is read in the same poll. A
//! partition therefore only ever waits for a member that is alive: its owner
//! either polls within its session timeout and reads it, or expires, and the
//! next poll that looks for idle members takes it and reads it. Which member
//! that is depends on timing; that some member reads it does not. The cost
//! is balance: the caller may own more than its quota until the next join
//! or leave rebalances (a member that joins takes its quota from it).

use std::collections::HashMap;
use std::time::Duration;

use super::consumer::ConsumerCore;
use crate::sync::Arc;

/// One live member of a group.
pub(crate) struct Member {
    pub(crate) core: Arc<ConsumerCore>,
    /// Partitions it owns, ascending.
    pub(crate) partitions: Vec<u32>,
}

/// A consumer group's state on one topic.
#[derive(Default)]
pub(crate) struct Group {
    pub(crate) committed: Vec<Option<u64>>,
    /// Live members, oldest first.
    pub(crate) members: Vec<Member>,
    /// Failed attempts (nacks) per (partition, offset), kept by the group so
    /// a message's count survives a move of its partition.
    pub(crate) attempts: HashMap<(u32, u64), u32>,
}

impl Group {
    /// The partitions `id` owns, or `None` if it is not a member (it left or
    /// was expelled).
    pub(crate) fn assignment(&self, id: u64) -> Option<&[u32]> {
        self.members.iter().find(|m| m.core.id == id).map(|m| m.partitions.as_slice())
    }

    /// True if member `id` owns `partition`.
    pub(crate) fn owns(&self, id: u64, partition: u32) -> bool {
        self.assignment(id).is_some_and(|p| p.contains(&partition))
    }

    /// Adds a member and rebalances.
    pub(crate) fn join(&mut self, core: Arc<ConsumerCore>, partitions: u32) {
        self.committed.resize(partitions as usize, None);
        if self.assignment(core.id).is_none() {
            self.members.push(Member { core, partitions: Vec::new() });
        }
        self.rebalance();
    }

    /// Removes member `id` (if it is one) and rebalances its partitions
    /// over the others. Returns true if it was a member.
    pub(crate) fn leave(&mut self, id: u64) -> bool {
        let Some(i) = self.members.iter().position(|m| m.core.id == id) else { return false };
        let gone = self.members.remove(i);
        gone.core.assignment_changed();
        self.rebalance();
        true
    }

    /// Expels every member other than `except` that has not polled for its
    /// session timeout. Their partitions go to `except` if it is a member
    /// (the caller, alive: see "Progress whatever the session timeout" in
    /// the module docs), else they are spread over the others. Returns how
    /// long until the next member could expire (the shortest session
    /// timeout, a quarter of it: how often to look).
    pub(crate) fn expel_idle(&mut self, except: Option<u64>) -> Duration {
        let mut freed = Vec::new();
        self.members.retain(|m| {
            let keep = Some(m.core.id) == except || !m.core.session_expired();
            if !keep {
                freed.extend_from_slice(&m.partitions);
                m.core.assignment_changed();
            }
            keep
        });
        if !freed.is_empty() {
            match self.members.iter_mut().find(|m| Some(m.core.id) == except) {
                Some(caller) => {
                    caller.partitions.extend(freed);
                    caller.partitions.sort_unstable();
                    caller.core.assignment_changed();
                }
                None => self.rebalance(),
            }
        }
        self.members.iter().map(|m| m.core.session_timeout / 4).min().unwrap_or(Duration::MAX)
    }

    /// Spreads the partitions over the members; see the module docs.
    fn rebalance(&mut self) {
        let before: Vec<Vec<u32>> = self.members.iter().map(|m| m.partitions.clone()).collect();
        let mut owned = before.clone();
        spread(&mut owned, self.committed.len());
        for (member, now) in self.members.iter_mut().zip(owned) {
            member.partitions = now;
        }
        for (member, old) in self.members.iter().zip(before) {
            if member.partitions != old {
                member.core.assignment_changed();
            }
        }
    }
}

/// The sticky assignment (see the module docs): `owned[i]` is member `i`'s
/// partitions (members oldest first), rewritten so that the `n` partitions
/// are spread over them, moving as few as the quotas allow. Used by consumer
/// groups and by shared push subscriptions (`shared.rs`).
pub(crate) fn spread(owned: &mut [Vec<u32>], n: usize) {
    let m = owned.len();
    if m == 0 {
        return;
    }
    let (base, extra) = (n / m, n % m);
    // Who gets the extra partitions: the members owning most (stable sort,
    // so ties go to the older member).
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(owned[i].len()));
    let mut quota = vec![base; m];
    for &i in order.iter().take(extra) {
        quota[i] += 1;
    }
    for (parts, &q) in owned.iter_mut().zip(&quota) {
        parts.truncate(q);
    }
    let mut taken = vec![false; n];
    for p in owned.iter().flatten() {
        taken[*p as usize] = true;
    }
    let mut free = (0..n as u32).filter(|&p| !taken[p as usize]);
    for (parts, &q) in owned.iter_mut().zip(&quota) {
        while parts.len() < q {
            parts.push(free.next().expect("the quotas add up to the partitions"));
        }
        parts.sort_unstable();
    }
}
