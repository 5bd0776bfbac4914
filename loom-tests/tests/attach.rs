//! Loom models of attaching a wildcard subscription to a new topic's
//! partition, on the real attach, publish, drain, close and pool code.
//!
//! First, while the subscription closes (see "Attaching while the
//! subscription closes" at `attach_to` in
//! `src/broker/subscription/attach.rs`).
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
//!
//! Second, while a publisher writes to the new partition (see "Attaching a
//! partition" in `src/broker/partition/signal.rs`). The topic is in the
//! broker's map before the subscription listens to it, so a publisher can
//! commit there and signal no one; meanwhile a drain woken by another
//! partition can merge the new reader, visit it before that commit and go
//! idle. The attacher lists the reader after adding the listener
//! (`ReadySet::relist`) for such a commit. That the commit is visible to
//! the listing rests on the asymmetric fence of `src/broker/barrier.rs`
//! (both halves are `fence(SeqCst)` under loom): the publisher's `F0`
//! between its commit and its load of the listener list, the attacher's
//! at the end of `Partition::add_listener`. With `F0` weakened, loom finds
//! a run of the smaller model (the race alone) where the record is never
//! delivered and every thread ends blocked (reported as a deadlock);
//! `.ci/fence-check` requires that. Both models run with one preemption
//! (see each).
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

/// The race alone: a publish to a partition while a subscription adds its
/// listener there, with nothing else running. Either the publisher sees
/// the listener and signals, or the attacher's look at the log (its
/// listing and poke) sees the record: it is delivered either way. The
/// fence check weakens `F0` here.
#[test]
fn a_record_published_while_a_listener_is_added_is_delivered() {
    // One preemption, whatever LOOM_MAX_PREEMPTIONS says: the race needs
    // none (the memory model alone lets both sides read stale values), and
    // with the pool's worker, the drains and the epochs' teardown two
    // preemptions take minutes, one takes seconds.
    // The branch bound is raised as in the model below: one run through the
    // pool's worker, its priority lanes and the epochs' teardown takes more
    // than loom's default of 1 000 branch points, without any spinning.
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(1);
    builder.max_branches = 20_000;
    builder.check(|| {
        let h = Arc::new(Harness::wildcard(false));
        let p = Arc::new(Harness::new_partition());
        let (h2, p2) = (h.clone(), p.clone());
        let attacher = thread::spawn(move || h2.attach_as_created(&p2));
        p.publish(2);
        attacher.join().unwrap();
        assert_eq!(h.wait_for(1), [2]);
        assert!(h.wait_idle());
        Arc::try_unwrap(h).expect("no other handle").shutdown();
    });
}

/// A publish to a partition being attached, while a publish to another
/// partition wakes a drain that may merge the new reader before the
/// attacher adds its listener: both records are delivered, and the
/// subscription then reads idle.
#[test]
fn a_record_published_while_its_partition_is_attached_is_delivered() {
    // One preemption, as above: with two this model ran for over ten
    // minutes without finishing.
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(1);
    // Three partitions, two publishes, an attach and a poke, the worker's
    // spin before it sleeps, and the epochs' teardown: more scheduling
    // points than loom's default allows for.
    builder.max_branches = 20_000;
    builder.check(|| {
        let h = Arc::new(Harness::wildcard(false));
        let p = Arc::new(Harness::new_partition());
        let (h2, p2) = (h.clone(), p.clone());
        let attacher = thread::spawn(move || h2.attach_as_created(&p2));
        h.publish_to(0, 1);
        p.publish(2);
        attacher.join().unwrap();
        let mut seen = h.wait_for(2);
        seen.sort_unstable();
        assert_eq!(seen, [1, 2]);
        assert!(h.wait_idle());
        Arc::try_unwrap(h).expect("no other handle").shutdown();
    });
}
