//! The hooks of a shared subscription's members into the control plane
//! (see `shared.rs` for the assignment itself): a member's close hands its
//! partitions to the others, a member whose handler call stalls past its
//! `ack_timeout` may be left out, and a partition a member lets go of goes
//! to its new owner from the offset the member reached. Each runs under the
//! control mutex.

use super::{BrokerInner, Control};
use crate::broker::subscription::{Stall, SubCore, attach, deadline};
use crate::sync::Arc;

impl BrokerInner {
    /// A shared member's close: its partitions go to the other members, each
    /// from the offset the member reached (see `shared.rs`).
    pub(super) fn shared_member_closed(&self, control: &mut Control, sub: &SubCore) {
        let Some(group) = control.shared.get_mut(&sub.name) else { return };
        let moves = group.leave(sub.id);
        let empty = group.is_empty();
        for (member, partition) in moves.revoke {
            attach::revoke(&member, partition);
        }
        for (topic, partition, offset) in sub.positions() {
            // A partition handed to it after its close removed its listeners.
            if let Ok(t) = self.topic(&topic)
                && let Some(p) = t.partitions.get(partition as usize)
            {
                p.remove_listener(sub.id);
            }
            self.hand_over(control, &sub.name, &topic, partition, offset);
        }
        if empty {
            control.shared.remove(&sub.name);
            control.live_names.remove(&sub.name);
        }
    }

    /// A shared member's handler call `call` overran its `ack_timeout`: if
    /// another member can take over and the call's message has not come
    /// again after a stall already, the member is left out of the
    /// assignment and every partition it reads goes to the new owners from
    /// its last acked offset (see `subscription/deadline.rs`). Whatever it
    /// decides goes to `report` before any partition moves, so whoever sees
    /// the stuck message at its new owner sees the stall reported too.
    pub(super) fn shared_member_stalled(
        &self,
        control: &mut Control,
        sub: &Arc<SubCore>,
        call: u64,
        report: &dyn Fn(Stall),
    ) -> Stall {
        let stays = |stall: Stall| {
            report(stall);
            stall
        };
        let Some(group) = control.shared.get_mut(&sub.name) else { return stays(Stall::Alone) };
        if !group.others_can_take(sub.id) {
            return stays(Stall::Alone);
        }
        let mut again = false;
        let claimed = deadline::claim_stalled_call(sub, call, |partition, resume| {
            again = group.came_again(partition, resume);
            !again
        });
        let Some((stuck, resume)) = claimed else {
            return stays(if again { Stall::CameAgain } else { Stall::Returned });
        };
        // Reported before the moves below make the stall visible elsewhere.
        report(Stall::Moved);
        group.redelivering(stuck, resume);
        let moves = group.expel(sub.id);
        for (member, partition) in moves.revoke {
            // The stalled member's own partitions are handed over below.
            if member.id != sub.id {
                attach::revoke(&member, partition);
            }
        }
        for (topic, partition, offset) in deadline::surrender(sub, stuck, resume) {
            self.hand_over(control, &sub.name, &topic, partition, offset);
        }
        Stall::Moved
    }

    /// Gives `partition` of shared subscription `name` to the member that
    /// owns it now, reading from `offset`; with no member, keeps `offset` as
    /// the name's saved position.
    pub(crate) fn hand_over(&self, control: &mut Control, name: &str, topic: &str, partition: u32, offset: u64) {
        // A deleted topic has nothing left to hand over.
        let Ok(topic) = self.topic(topic) else { return };
        let Some(p) = topic.partitions.get(partition as usize) else { return };
        match control.shared.get(name).and_then(|g| g.owner(partition)).cloned() {
            Some(owner) => {
                attach::attach_to(&owner, topic.name.clone(), p, p.log.cursor_resuming(offset));
                SubCore::poke(&owner);
            }
            None => {
                control
                    .durable
                    .entry(name.to_string())
                    .or_default()
                    .positions
                    .insert((topic.name.clone(), partition), offset);
            }
        }
    }
}
