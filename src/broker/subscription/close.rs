//! Closing a subscription, and winding it up after its last handler call.
//!
//! # Exclusivity and closing
//!
//! The drain state (cursors, the handler, the pending retry) sits behind a
//! mutex that the drainer holds for a round. The state machine already
//! ensures there is at most one drainer, so the mutex is uncontended; it
//! exists so that `close` can wait for an in-flight handler call by taking it.
//! A handler that closes its own subscription does not wait (it would wait
//! for itself): the drainer sees `CLOSED` after the handler returns. Which
//! subscription's handler a thread is running is kept in a thread-local
//! (`in_handler.rs`), set for the length of each call of user code.
//!
//! # Winding up after a close that did not wait
//!
//! "Winding up" (`finalize`) drops the user's handler and runs the
//! broker's close hook (which frees a durable name); it is idempotent and
//! takes the drain lock, so it cannot run inside a round. A close from
//! another subscription's handler must not wait for this subscription's
//! round (that round's handler may be closing ours, or waiting on it), so
//! after storing CLOSED it cannot simply take the drain and wind up.
//!
//! States: a round holds the drain (it is delivering, or between its last
//! look at the state and releasing the lock), or nobody does. Invariant:
//! after CLOSED is stored, some thread winds up after the last round
//! releases the drain. If `try_lock` succeeds, no round runs and none can
//! start usefully (a new one sees CLOSED at its top and winds up, which is
//! harmless twice); we wind up. If it fails, a round holds the drain and
//! may already be past every look at the state (it saw ACTIVE, went idle
//! and is returning): it will not wind up, so we queue a pool job, which
//! takes the drain after the round and, seeing CLOSED, winds up. A
//! dedicated thread returns to its loop after every round and winds up
//! when it sees CLOSED there (the close unparks it). The race between the
//! round's exit and the close is what `loom-tests/tests/close.rs` models;
//! without the job, or without the dedicated loop's wind-up, loom finds
//! an execution where nobody winds up.
//!
//! # An external close returns after the wind-up
//!
//! A close from outside any handler (the user's `close`, drop or
//! `rill_subscription_free`) may block, and its caller expects the
//! subscription to be gone when it returns: the handler and its user data
//! dropped, a durable name free for the next subscribe. Taking the drain
//! is not enough: the round it waited for may have seen CLOSED first and
//! won `finalize`, and still be dropping the handler. So the wind-up ends
//! by storing `wound_up` (Release) and notifying `idle`, and the external
//! closer waits there (Acquire) after its own `finalize`. The winner never
//! waits on an external closer (it only drops user code and takes the
//! broker's control lock, which no closer holds), so the wait ends. Only
//! external closes wait: one from a handler could be waited on by the very
//! wind-up it would wait for. `loom-tests/tests/close.rs` checks the hook
//! has run when an external close returns, on the pool and on a dedicated
//! thread. Then the closer joins a dedicated thread: unparked, it sees
//! CLOSED at the top of its loop and returns. This holds when the
//! subscription was already closed (by its own handler, another one's, or
//! the lag policy) before the external close: that close still takes the
//! drain, finalizes and waits, so it never relies on a queued wind-up job
//! (which a pool stopped meanwhile would never run).

use super::attach;
use super::core::{DrainJob, Exec, HandlerKind, SubCore};
use super::options::{Ack, Message};
use crate::broker::partition::in_handler::InHandler;
use crate::sync::Arc;
use crate::sync::atomic::{AtomicBool, Ordering};

/// Closes the subscription. Called from no handler, returns only once no
/// handler call of it is in flight. Idempotent.
pub(crate) fn close(this: &Arc<SubCore>) {
    match InHandler::current() {
        0 => close_inner(this, true),
        // From its own handler: the round that called it winds it up.
        id if id == this.id => close_inner(this, false),
        // From another subscription's handler: waiting for this one's
        // round could wait forever (its handler may be closing ours, or
        // waiting for us), so do not wait; see that it winds up anyway.
        _ => {
            close_inner(this, false);
            wind_up_later(this);
        }
    }
}

/// `close` as called from the handler of subscription `other` (loom
/// models: a real handler would need a second subscription around it).
#[cfg(loom)]
pub(crate) fn close_from_handler_of(this: &Arc<SubCore>, other: u64) {
    let _inside = InHandler::enter(other);
    close(this);
}

/// Winding up after a close that did not wait: see the module docs.
fn wind_up_later(this: &Arc<SubCore>) {
    // The guard `try_lock` may return is dropped with the condition,
    // before `finalize` takes the lock itself.
    if this.drain.try_lock().is_some() {
        finalize(this);
    } else if let Exec::Pool(pool) = &this.env.exec {
        pool.push(DrainJob(this.clone()));
    }
}

/// Closes; with `wait`, also waits for an in-flight round (the caller must
/// not be that round).
pub(super) fn close_inner(core: &SubCore, wait: bool) {
    let first = core.state.close();
    if first {
        // Under the `positions` lock: a partition attached concurrently
        // is either tracked here or sees CLOSED (see `attach_to`).
        for (_, partition, _) in core.positions.lock().iter() {
            partition.remove_listener(core.id);
        }
        if let Exec::Dedicated(t) = &core.env.exec
            && let Some(t) = &*t.lock()
        {
            t.unpark();
        }
    } else if !wait {
        return;
    }
    // An external close waits for the wind-up even when the subscription
    // was already closed (by its own handler, another subscription's, or
    // the lag policy): that wind-up may still be queued or running, and the
    // caller may free what the handler uses as soon as this returns.
    // `finalize` is idempotent, so taking the drain and finalizing here
    // never depends on a queued pool job running.
    if wait {
        // Wait for an in-flight round to see CLOSED and release the lock;
        // its positions are final then.
        drop(core.drain.lock());
        finalize(core);
        // The drainer may have won the wind-up and still be running it
        // (dropping the handler runs user code): wait until it is done,
        // so the caller may reuse the name or free what the handler used.
        // Acquire: pairs with the Release store at the end of `finalize`.
        core.idle.wait_until(None, || core.wound_up.load(Ordering::Acquire));
        // A dedicated thread has nothing left to do: it sees CLOSED at the
        // top of its loop (it was unparked above) and returns.
        core.join_thread();
    }
    // Otherwise the caller is (inside) the round, which finalizes when it returns.
    core.notify_idle();
}

/// Runs once, after the last handler call: releases the user's handler
/// and callbacks (their destructors may run user code, so no lock is
/// held), then runs the broker's close hook.
pub(super) fn finalize(core: &SubCore) {
    if !win_once(&core.finalized) {
        return;
    }
    let (handler, on_lagged) = {
        let mut st = core.drain.lock();
        // A topic deleted since the last round is let go of now: a
        // closed subscription's handle may live on.
        attach::apply_detached(core, &mut st);
        let noop = HandlerKind::One(Box::new(|_: &Message<'_>| Ack::Success));
        (std::mem::replace(&mut st.handler, noop), st.on_lagged.take())
    };
    let on_dead_letter = core.on_dead_letter.lock().take();
    drop(handler);
    drop(on_lagged);
    drop(on_dead_letter);
    if let Some(on_close) = &core.env.on_close {
        on_close(core);
    }
    // Release: an external closer that sees it sees the wind-up done.
    core.wound_up.store(true, Ordering::Release);
    core.notify_idle();
}

/// Closes the subscription, recording why (reported in stats).
pub(crate) fn close_with_reason(this: &Arc<SubCore>, reason: String) {
    ::log::info!(target: "rill::subscription", "closing subscription {:?}: {reason}", this.name);
    *this.closed_reason.lock() = Some(reason);
    close(this);
}

/// Sets `flag`; true for the one caller that set it.
fn win_once(flag: &AtomicBool) -> bool {
    // AcqRel: one caller wins; it then sees everything the drainer did.
    !flag.swap(true, Ordering::AcqRel)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::close_inner;
    use crate::broker::{Ack, Broker, BrokerConfig, SubscriptionOptions, TopicOptions};

    /// Issue 40, item 10: a topic created while a wildcard subscription was
    /// closing (`CLOSED` stored and its listeners removed, its wind-up, which
    /// takes it out of the broker's pattern index, not yet run) got the
    /// closed subscription as a listener, which nothing removed: the
    /// partition and the subscription held each other for good. Here the
    /// window is held open: a close that does not wait (as from a handler)
    /// leaves the wind-up to a round that is not running.
    #[test]
    fn a_topic_created_while_a_subscription_closes_does_not_keep_it_as_a_listener() {
        let b = Broker::new(BrokerConfig { worker_threads: Some(1), ..BrokerConfig::default() }).unwrap();
        b.create_topic("soak/a", &TopicOptions::with_partitions(2)).unwrap();
        let sub = b.subscribe("soak/**", SubscriptionOptions::default(), |_| Ack::Success).unwrap();
        assert!(sub.wait_idle(std::time::Duration::from_secs(30)).unwrap());
        close_inner(&sub.core, false);
        assert!(!sub.core.wound_up.load(crate::sync::atomic::Ordering::Acquire), "the window is open");
        b.create_topic("soak/b", &TopicOptions::with_partitions(2)).unwrap();
        for topic in ["soak/a", "soak/b"] {
            for p in b.topic_stats(topic).unwrap().partitions {
                assert_eq!(p.listeners, 0, "{topic}[{}] listens to a closed subscription", p.partition);
            }
        }
        // The wind-up still happens, and still finds the new partitions.
        drop(sub);
        assert!(b.subscriptions().is_empty());
    }
}
