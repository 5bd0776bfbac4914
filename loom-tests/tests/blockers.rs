//! Loom model of a publisher waiting for a `Block` subscriber of another
//! process (`src/broker/partition/blockers.rs`, "The race it survives"):
//! the publisher registers as a waiter and then, after K2, looks at the
//! subscriber's position before it sleeps on the futex word; the
//! subscriber's drainer stores its position and then, after K1, loads the
//! waiters to decide whether to wake. Each side stores and then loads what
//! the other stored, so without a full fence on both the publisher can
//! read the old position while the drainer reads no waiter, and sleep for
//! ever: loom reports that as a deadlock, and `.ci/fence-check` requires
//! it with K1 or K2 weakened. The futex is a mutex and a condition
//! variable here (the kernel's hash-bucket lock), and no sleep runs out
//! under loom (the real one is bounded by `DEATH_BOUND`, for dead
//! subscribers only).
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use loom_tests::model;
use rill::broker::loom_harness::BlockAcross;

/// The subscriber's side on a thread of its own, the publisher's on this one.
fn beside(subscriber: fn(&BlockAcross)) {
    let shared = Arc::new(BlockAcross::new());
    let other = {
        let shared = shared.clone();
        thread::spawn(move || subscriber(&shared))
    };
    shared.publisher_waits();
    other.join().unwrap();
}

#[test]
fn a_publisher_in_another_process_is_woken_when_the_block_subscriber_moves() {
    model(|| beside(BlockAcross::subscriber_moves));
}

#[test]
fn a_publisher_in_another_process_is_woken_when_the_block_subscriber_detaches() {
    model(|| beside(BlockAcross::subscriber_detaches));
}
