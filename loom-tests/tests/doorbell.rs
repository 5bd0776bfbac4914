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
use rill::broker::loom_harness::WakeAcross;

#[test]
fn a_publish_in_another_process_wakes_the_doorbell() {
    model(|| {
        let wake = Arc::new(WakeAcross::new());
        let publisher = {
            let wake = wake.clone();
            thread::spawn(move || wake.publish())
        };
        wake.doorbell_until_a_record();
        publisher.join().unwrap();
    });
}
