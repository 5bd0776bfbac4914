//! Named (durable) subscriptions in `Sharing::Processes` mode: taking the
//! name when one subscribes, writing its positions to the name's own slots
//! (each drain round under `Fsync::Always`, each flusher interval under
//! `Interval` and `Never`, at the close), letting go of it at the close,
//! and forgetting its positions. Why the name is a lock and its positions
//! files of their own is the essay in `store/named.rs`.

use super::held::Held;
use super::{BrokerInner, Control};
use crate::broker::store::{NameHold, Ticket};
use crate::broker::subscription::SubCore;
use crate::error::{Error, Result};
use crate::log::Fsync;
use crate::sync::Arc;

impl BrokerInner {
    /// Takes durable subscription `name` for a subscriber in this process:
    /// `Busy` if another process (or broker) holds it. Returns the hold,
    /// with the positions it resumes from. Called under the control mutex,
    /// after the check that no subscription of this broker has the name.
    pub(super) fn take_name(&self, name: &str, id: u64) -> Result<Held> {
        let store = self.store().ok_or_else(Error::broker_closed)?;
        let (hold, positions) = store.hold_name(name)?;
        let base = positions.unwrap_or_default().into_iter().map(|(t, p, o)| ((t.into(), p), o)).collect();
        Ok(Held { id, hold: Arc::new(hold), base })
    }

    /// The close hook's part for a held name, once `take_held` took it
    /// out of the control plane (with the control mutex let go): writes the
    /// subscription's final positions, waits for the write, and only then
    /// lets go of the name (see "Letting go" in `store/named.rs`). The
    /// caller then drops the name from `live_names`, so a subscribe in this
    /// process meanwhile is `Busy` as for a live name.
    pub(super) fn release_held(&self, held: Held, sub: &SubCore) {
        // Numbered after any the flusher asked for (it finds the name in
        // `held` no more), so written after them: nothing older lands later.
        let ticket = held.hold.request(held.positions(sub), self.config.fsync == Fsync::Always);
        if let Err(e) = held.hold.wait(ticket) {
            // A close hook cannot fail: the next holder resumes from the
            // positions written before (at least once).
            log::warn!("rill: could not save the positions of subscription {:?}: {e}", sub.name);
        }
        held.hold.release();
    }

    /// Under `Fsync::Always`, at the end of each drain round of a durable
    /// subscription holding its name: its positions, synced before this
    /// returns (the `Processes` side of `persist_acks`).
    pub(crate) fn persist_named(&self, sub: &SubCore) {
        if self.config.fsync != Fsync::Always {
            return;
        }
        let pending = {
            let control = self.control.lock();
            match control.held.get(&sub.name) {
                Some(h) if h.id == sub.id => (h.hold.clone(), h.hold.request(h.positions(sub), true)),
                _ => return,
            }
        };
        wait_all(vec![pending]);
    }

    /// The flusher's part for held names (`Interval` and `Never`): every
    /// live holder's positions, synced if `sync`.
    pub(crate) fn flush_named(&self, sync: bool) {
        let pending: Vec<(Arc<NameHold>, Ticket)> = {
            let control = self.control.lock();
            control
                .held
                .values()
                .filter_map(|h| {
                    let sub = control.subs.get(&h.id)?;
                    Some((h.hold.clone(), h.hold.request(h.positions(sub), sync)))
                })
                .collect()
        };
        wait_all(pending);
    }

    /// `Processes` mode: forgets durable subscription `name`'s positions
    /// (`Busy` while a process holds it). The caller has checked that no
    /// subscription of this broker has it.
    pub(super) fn forget_name(&self, name: &str) -> Result<()> {
        let store = self.store().ok_or_else(Error::broker_closed)?;
        store.forget_name(name)
    }
}

/// Takes `sub`'s held name out of the control plane (the flusher writes
/// it no more), if it holds one; see [`BrokerInner::release_held`].
pub(super) fn take_held(control: &mut Control, sub: &SubCore) -> Option<Held> {
    if control.held.get(&sub.name).is_none_or(|h| h.id != sub.id) {
        return None;
    }
    control.held.remove(&sub.name)
}

/// Waits for each write; failures are logged (the next round or interval
/// tries again).
pub(super) fn wait_all(pending: Vec<(Arc<NameHold>, Ticket)>) {
    for (hold, ticket) in pending {
        if let Err(e) = hold.wait(ticket) {
            log::error!("rill: could not save the positions of a durable subscription: {e}");
        }
    }
}
