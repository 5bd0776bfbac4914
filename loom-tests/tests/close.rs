//! Loom models of closing a subscription from another subscription's
//! handler (see `close` and `wind_up_later` in
//! `src/broker/subscription/close.rs`), on the real close, drain and pool code.
//!
//! Such a close must not wait for the subscription's drain (the two handlers
//! could be closing each other), so it cannot wind the subscription up
//! itself while a drain is in flight. The protocol: the closer stores CLOSED,
//! then tries the drain lock; if it is free it winds up at once; if a round
//! holds it, a pool job is queued (a dedicated thread winds up when it sees
//! CLOSED), which takes the lock after that round and winds up. The race it
//! must survive: the round has already passed its last look at the state
//! and is about to release the lock when CLOSED lands. Winding up twice is
//! harmless (it is idempotent); never winding up leaks the handler and keeps
//! a durable name taken. Each model waits for the close hook: a missed wind-up
//! leaves every thread blocked, which loom reports as a deadlock.
//!
//! A close from outside any handler waits instead: for the round in flight,
//! then for the wind-up, whichever thread won it (the drainer may have seen
//! CLOSED first and still be running the close hook). The last two models
//! check that the hook has run when such a close returns.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use loom_tests::model;
use rill::broker::loom_harness::Harness;

fn close_during_a_drain(dedicated: bool) {
    let h = Arc::new(Harness::new(dedicated));
    // Schedules a drain, which may be anywhere in its round (or done) when
    // the close lands.
    h.publish(1);
    let h2 = h.clone();
    let closer = thread::spawn(move || h2.close_from_another_handler());
    closer.join().unwrap();
    assert_eq!(h.wait_wound_up(), 1, "wound up exactly once");
    Arc::try_unwrap(h).expect("no other handle").shutdown();
}

/// Pool-drained: the close may find the worker's round holding the drain.
#[test]
fn a_close_from_another_handler_always_winds_up_on_the_pool() {
    model(|| close_during_a_drain(false));
}

/// Dedicated thread: the same, with park/unpark as the wakeup.
#[test]
fn a_close_from_another_handler_always_winds_up_on_a_dedicated_thread() {
    model(|| close_during_a_drain(true));
}

fn external_close_during_a_drain(dedicated: bool) {
    let h = Harness::new(dedicated);
    // Schedules a drain that may see CLOSED and win the wind-up.
    h.publish(1);
    h.close();
    assert_eq!(h.times_wound_up(), 1, "an external close returns only after the wind-up");
    h.shutdown();
}

/// Pool-drained: the worker may be the one winding up when the close lands.
#[test]
fn an_external_close_returns_after_the_wind_up_on_the_pool() {
    model(|| external_close_during_a_drain(false));
}

/// Dedicated thread: the thread may be the one winding up.
#[test]
fn an_external_close_returns_after_the_wind_up_on_a_dedicated_thread() {
    model(|| external_close_during_a_drain(true));
}

/// A thread that sees the subscription closed sees what the closer did
/// before closing: `close`'s `Release` (S3 in `broker/partition/state.rs`)
/// pairs with the `Acquire` load behind `is_closed`. (A handler that closes
/// its own subscription after recording why, and a thread polling
/// `is_closed` and then reading that record, rely on it.) The closer writes
/// a relaxed flag first; without S3 the poller may see `CLOSED` and then
/// the flag's old value.
#[test]
fn is_closed_sees_what_the_closer_did_before() {
    use loom::sync::atomic::{AtomicBool, Ordering};
    model(|| {
        let h = Arc::new(Harness::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let (h2, d2) = (h.clone(), done.clone());
        let closer = thread::spawn(move || {
            // Relaxed: on purpose, so only the close orders it.
            d2.store(true, Ordering::Relaxed);
            h2.close();
        });
        while !h.is_closed() {
            thread::yield_now();
        }
        // Relaxed: as above.
        assert!(done.load(Ordering::Relaxed), "saw CLOSED but not what the closer did before");
        closer.join().unwrap();
        Arc::try_unwrap(h).expect("no other handle").shutdown();
    });
}
