//! Loom model of the cross-process wake (`src/broker/doorbell.rs`, "The
//! race it survives"): a publisher commits and then, after X1, loads the
//! partition's interest and the directory's bell; the listening process's
//! doorbell arms the bell and then, after X2, looks at the partition's
//! end before it sleeps. Each side stores and then loads what the other
//! stored, so without a full fence on both, the publisher can find the
//! bell quiet while the doorbell finds the log empty and sleeps for ever.
//! Loom reports that as a deadlock; `.ci/fence-check` requires it with X1
//! or X2 weakened. The futex is a mutex and a condition variable here,
//! which is what the kernel does under its hash bucket's lock.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use loom_tests::model;
use rill::broker::loom_harness::{
    DisarmedTopicChanges, LazyConsumer, LazyDoorbell, MemberChanges, TopicChanges, WakeAcross,
};

/// The other process's side, `there`, on a thread of its own, while the
/// doorbell's side, `here`, runs on this one; then joins it.
fn beside<T: Send + Sync + 'static>(shared: T, there: fn(&T), here: fn(&T)) {
    let shared = Arc::new(shared);
    let other = {
        let shared = shared.clone();
        thread::spawn(move || there(&shared))
    };
    here(&shared);
    other.join().unwrap();
}

#[test]
fn a_publish_in_another_process_wakes_the_doorbell() {
    model(|| {
        beside(WakeAcross::new(), WakeAcross::publish, WakeAcross::doorbell_until_a_record);
    });
}

/// The topic list's change counter (`src/broker/doorbell.rs`, "Topics
/// other processes create or delete"): a process bumps it and then rings
/// (X3, the ring's Release); another's doorbell arms and then, after X2,
/// loads it before it sleeps. The ring and the arm are read-modify-writes
/// of one word, so one reads the other: if the arm reads the ring, X3 and
/// X2 make the bump visible to the look; without X3 the look can miss the
/// bump while the arm hides the ring, and the doorbell sleeps for ever,
/// which `.ci/fence-check` requires loom to find with X3 weakened.
#[test]
fn a_topic_change_in_another_process_wakes_the_doorbell() {
    model(|| {
        beside(TopicChanges::new(), TopicChanges::change, TopicChanges::doorbell_until_a_change);
    });
}

/// The doorbell that arms only while a listener of its process may sleep
/// (`src/broker/doorbell.rs`, "Arming only while a listener may sleep"): a
/// subscription goes idle (IDLE, F4, its re-check, then a load of the
/// disarmed count) while its process's doorbell disarms, fences (X4) and
/// loads the state, and a publisher in another process commits and rings
/// only an armed bell. Each of the two local sides stores and then loads
/// what the other stored, so without F4 and X4 the listener can miss the
/// disarm while the doorbell reads the stale `ACTIVE` and sleeps disarmed:
/// the record then reaches no one, which loom reports as a deadlock and
/// `.ci/fence-check` requires with X4 weakened.
#[test]
fn an_idle_listener_arms_its_disarmed_doorbell() {
    model(|| {
        let wake = Arc::new(LazyDoorbell::new());
        let listener = {
            let wake = wake.clone();
            thread::spawn(move || wake.listener())
        };
        let doorbell = {
            let wake = wake.clone();
            thread::spawn(move || wake.doorbell())
        };
        wake.publish();
        wake.until_delivered_then_stop();
        listener.join().unwrap();
        doorbell.join().unwrap();
    });
}

/// The same with a pull consumer for the listener (`Waiters::may_sleep`
/// and the consumer's nudge after W2): the consumer registers to wait
/// while its process's doorbell disarms, and a publisher in another
/// process commits and rings only an armed bell. Without W2 and X4 the
/// consumer can miss the disarm while the doorbell reads no waiter and
/// sleeps disarmed: the consumer then waits for ever, which loom reports
/// as a deadlock and `.ci/fence-check` requires with X4 or W2 weakened.
#[test]
fn an_idle_consumer_arms_its_disarmed_doorbell() {
    model(|| {
        let wake = Arc::new(LazyConsumer::new());
        let consumer = {
            let wake = wake.clone();
            thread::spawn(move || wake.consumer_until_a_record())
        };
        let doorbell = {
            let wake = wake.clone();
            thread::spawn(move || wake.doorbell())
        };
        wake.publish();
        consumer.join().unwrap();
        wake.stop();
        doorbell.join().unwrap();
    });
}

/// A topic change reaches a doorbell that sleeps disarmed: its load of
/// the bell before the sleep (X5, Relaxed, then the X4 fence) reads the
/// ring (X3, Release) and then sees the bumped counter, or reads an
/// earlier value and the ring's move of the word ends the sleep.
#[test]
fn a_topic_change_wakes_a_disarmed_doorbell() {
    model(|| {
        beside(
            DisarmedTopicChanges::new(),
            DisarmedTopicChanges::change,
            DisarmedTopicChanges::doorbell_until_a_change,
        );
    });
}

/// The members' change counter (`src/broker/doorbell.rs`, "Members of
/// groups and shared subscriptions"): a member joins (its file, then a
/// bump of the counter and a ring, X3); another process's doorbell arms,
/// fences (X2) and loads the counter, and once it has moved, its member's
/// look finds the joiner's file. Without X3 the look can miss the bump
/// while the arm hides the ring, and the doorbell sleeps for ever, which
/// `.ci/fence-check` requires loom to find with X3 weakened.
#[test]
fn a_join_in_another_process_wakes_the_doorbell_and_its_look_sees_it() {
    model(|| {
        beside(MemberChanges::new(), MemberChanges::join, |changes| {
            assert!(changes.doorbell_until_a_change_then_look(), "the look missed the join it was woken for");
        });
    });
}
