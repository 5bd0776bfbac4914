//! Loom model of attaching a wildcard subscription to a new topic's
//! partition while the subscription closes (see "Attaching while the
//! subscription closes" at `SubCore::attach_to` in
//! `src/broker/subscription/core.rs`), on the real attach, close and pool
//! code.
//!
//! The broker attaches the subscriptions it finds in its pattern index
//! when it creates a topic, and a closing subscription stays there until
//! its wind-up, after `close` has removed its listeners. An attach in that
//! window must not leave a listener behind: the partition would hold the
//! closed subscription, and the subscription its readers' partitions, for
//! good (issue 40, item 10). Both sides take the subscription's
//! `positions` lock: the closer after storing CLOSED, across its removals;
//! the attacher from tracking the partition to adding the listener, which
//! it skips once CLOSED. With the listener added outside that lock and
//! without the check, as before, loom finds the interleaving where the
//! closer's removals run between the attacher's tracking and its adding,
//! and the model's assertion fails.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use loom_tests::model;
use rill::broker::loom_harness::Harness;

/// A close (from another subscription's handler, so it does not wait for
/// a drain, as a close from the lag policy or the subscription's own
/// handler does not) racing an attach: once both are done, the new
/// partition has no listener.
#[test]
fn a_partition_attached_while_its_subscription_closes_keeps_no_listener() {
    model(|| {
        let h = Arc::new(Harness::wildcard(false));
        let p = Arc::new(Harness::new_partition());
        let (h2, p2) = (h.clone(), p.clone());
        let attacher = thread::spawn(move || h2.attach(&p2));
        h.close_from_another_handler();
        attacher.join().unwrap();
        assert_eq!(p.listeners(), 0, "the closed subscription still listens to the new partition");
        Arc::try_unwrap(h).expect("no other handle").shutdown();
    });
}
