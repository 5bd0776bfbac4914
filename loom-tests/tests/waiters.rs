//! Loom model of the blocked-publisher wakeup (see `src/broker/waiters.rs`),
//! run on the real publish and drain code through `rill`'s loom harness.
//!
//! A subscription with the `Block` policy and a lag limit of 1 means every
//! publish after the first must wait until the subscription has handled the
//! previous message. The publisher waits without a deadline; if the drainer's
//! wakeup were ever lost, every thread would block and loom would report a
//! deadlock.
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;
use rill::broker::loom_harness::{Gate, Harness};

/// The protocol alone: a waiter registers and re-checks while a changer
/// raises the value (a relaxed store) and notifies, with no other
/// synchronisation between them. The waiter goes straight to blocking
/// (`Waiters::block_until`): the spin in front of it yields, and loom never
/// lets a thread that has yielded read a value it saw before again, which
/// hides the stale reads a lost wakeup is made of. Without W1 or W2 (or
/// either weakened to `AcqRel`), loom finds the waiter re-checking a stale 0
/// while the changer reads a stale `count` of 0 and skips the notify: the
/// waiter sleeps forever, a deadlock. `.ci/fence-check` requires that.
#[test]
fn the_wait_notify_protocol_never_loses_a_wakeup() {
    wait_for_a_raise(Gate::wait_without_spinning);
}

/// The same with the spin in front (`Waiters::wait_until`, as callers use
/// it): the spin must not break the protocol. (It cannot show W1 or W2
/// needed; see the model above.)
#[test]
fn the_wait_notify_protocol_never_loses_a_wakeup_after_spinning() {
    wait_for_a_raise(Gate::wait);
}

/// A changer thread raises a gate to 1 while this thread waits for it with
/// `wait`; loom reports a lost wakeup as a deadlock.
fn wait_for_a_raise(wait: fn(&Gate, u64)) {
    loom_tests::builder(3).check(move || {
        let gate = Arc::new(Gate::new());
        let g = gate.clone();
        let changer = thread::spawn(move || g.raise(1));
        wait(&gate, 1);
        changer.join().unwrap();
    });
}

/// The bell ("The bell" in `waiters.rs`): an owner arms it and looks once
/// while a changer raises the value and notifies. A look that found nothing
/// must be answered by exactly one ring; a ring is allowed after a look that
/// found the value (spurious), never two. With B1 weakened to `AcqRel` the
/// owner's look can read a stale 0 while the changer reads `armed` stale
/// false: nothing rings, which the assertion catches (`.ci/fence-check`).
#[test]
fn a_look_that_found_nothing_is_always_rung() {
    loom_tests::builder(3).check(|| {
        let gate = Arc::new(Gate::new());
        let rings = Arc::new(AtomicUsize::new(0));
        let r = rings.clone();
        gate.hang_bell(move || {
            r.fetch_add(1, Ordering::SeqCst);
        });
        let g = gate.clone();
        let changer = thread::spawn(move || g.raise(1));
        let found = gate.arm_and_look(1);
        changer.join().unwrap();
        let rung = rings.load(Ordering::SeqCst);
        assert!(rung <= 1, "one ring per arming, not {rung}");
        assert!(found || rung == 1, "the look found nothing and the bell never rang");
    });
}

#[test]
fn a_blocked_publisher_is_always_woken() {
    let mut builder = loom_tests::builder(2);
    // Each publish pins an epoch and may wait; the worker spins before it
    // sleeps: more scheduling points than loom's default allows for.
    builder.max_branches = 20_000;
    builder.check(|| {
        let h = Harness::with_block(false, Some(1));
        // The second publish must wait for the first to be handled.
        let offsets: Vec<u64> = (0..2).map(|tag| h.publish(tag)).collect();
        assert_eq!(offsets, vec![0, 1]);
        assert_eq!(h.wait_for(2), vec![0, 1]);
        h.shutdown();
    });
}
