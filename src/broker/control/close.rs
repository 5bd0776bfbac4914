//! Closing the broker: every subscription and consumer closed, every
//! thread stopped and joined, and, with a data directory, a last flush
//! before its lock goes.

use super::BrokerInner;
use crate::broker::consumer::ConsumerCore;
use crate::broker::partition::in_handler::InHandler;
use crate::broker::subscription::{SubCore, close};
use crate::sync::Arc;
use crate::sync::atomic::Ordering;

impl BrokerInner {
    pub(crate) fn close(&self) {
        // AcqRel: the winner of the swap closes; Release pairs with the
        // Acquire in `is_closed`, so a caller that sees closed sees why.
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        if self.forked() {
            // An inherited copy (see `forked`): closed, and nothing else.
            return;
        }
        // Publishes waiting for a `Block` subscriber give up now, also one
        // waiting for another broker's, which this close leaves open.
        for t in self.topics.values() {
            for p in t.partitions.iter() {
                p.close_waits();
            }
        }
        let (subs, consumers) = {
            let control = self.control.lock();
            let subs: Vec<Arc<SubCore>> = control.subs.values().cloned().collect();
            let consumers: Vec<Arc<ConsumerCore>> = control.consumers.values().cloned().collect();
            (subs, consumers)
        };
        // A close from inside a handler of another broker's subscription
        // waits for none of this broker's threads: one of them may be in a
        // handler that closes the caller's broker, which waits for the
        // caller (two handlers closing each other's brokers would wait for
        // each other for good). They end by themselves after the calls in
        // flight, as a subscription closed from a handler winds up behind
        // its close. From this broker's own handler (or outside any), it
        // joins them all but the caller, as documented.
        let caller = InHandler::current();
        let joins = caller == 0 || subs.iter().any(|s| s.id == caller);
        for c in &consumers {
            c.close();
        }
        for sub in &subs {
            close::close_with_reason(sub, "the broker was closed".into());
        }
        self.pool.stop_and(joins);
        self.timer.stop();
        let expiry = self.expiry.lock().take();
        if let Some(t) = expiry {
            t.stop();
        }
        let ack_watch = self.ack_watch.lock().take();
        if let Some(t) = ack_watch {
            t.stop();
        }
        let shared_look = self.shared_look.lock().take();
        if let Some(t) = shared_look {
            t.stop();
        }
        let compactor = self.compactor.lock().take();
        if let Some(t) = compactor {
            t.stop();
        }
        // A close from a handler did not wait: join the dedicated threads
        // (all but the caller's own) here, as an external close does.
        if joins {
            for sub in &subs {
                sub.join_thread();
            }
        }
        if let Some(flusher) = self.flusher.lock().take() {
            flusher.stop();
        }
        if let Some(doorbell) = &self.doorbell {
            doorbell.stop();
        }
        // Not under the control mutex: its thread's telling takes it.
        if let Some(deaths) = &self.deaths {
            deaths.stop();
        }
        // A clean close flushes everything, whatever the policy, then lets go
        // of the directory (handles still held read nothing new: publishing
        // to a closed broker fails).
        if let Some(store) = self.store.lock().take() {
            self.flush(&store, true);
            // Before the directory's lock goes with `store`: a handle held
            // past the close keeps its log, whose drop must not write into
            // a file a broker opened next goes on appending to.
            for t in self.topics.values() {
                for p in t.partitions.iter() {
                    p.log.close_files();
                }
            }
        }
        // Its subscriptions are closed: other processes list none of them.
        if let Some(registry) = &self.registry {
            registry.close();
        }
        self.topics.clear();
    }
}
