//! Loom models of signal-and-drain (see `src/broker/partition/signal.rs`), run on
//! the real publish, scheduling and drain code through `rill`'s loom harness.
//!
//! Each model publishes from two threads at once while the subscription's
//! drainer may be going idle, then waits, on a condition variable, for every
//! record to be delivered. A lost wakeup leaves all threads blocked, which
//! loom reports as a deadlock; a duplicate or reordered delivery fails the
//! assertions.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use loom_tests::model;
use rill::broker::loom_harness::Harness;

fn two_publishers(h: Harness) {
    let h = Arc::new(h);
    let h2 = h.clone();
    let other = thread::spawn(move || h2.publish(1));
    let mine = h.publish(2);
    let theirs = other.join().unwrap();
    let seen = h.wait_for(2);
    // Delivered once each, in offset order.
    let mut expect = vec![(mine, 2), (theirs, 1)];
    expect.sort_unstable();
    assert_eq!(seen, expect.into_iter().map(|(_, tag)| tag).collect::<Vec<_>>());
    Arc::try_unwrap(h).expect("no other handle").shutdown();
}

/// Pool-drained subscription: the worker may be finishing a drain (going idle
/// and re-checking) exactly when either publisher commits.
#[test]
fn no_lost_wakeup_with_the_worker_pool() {
    model(|| two_publishers(Harness::new(false)));
}

/// Dedicated-thread subscription: the same race, with park/unpark as the
/// wakeup and the drainer's idle spin in between.
#[test]
fn no_lost_wakeup_with_a_dedicated_thread() {
    model(|| two_publishers(Harness::new(true)));
}

/// Two subscriptions to one partition on a one-worker pool, and two
/// publishers: each publish walks both entries (loads both state words,
/// then swaps those that read `IDLE`, waking them together), while either
/// drain may be going idle. Each subscription gets each record once.
#[test]
fn no_lost_wakeup_with_two_subscriptions() {
    model(|| {
        let h = Arc::new(Harness::two_subscriptions());
        let h2 = h.clone();
        let other = thread::spawn(move || h2.publish(1));
        h.publish(2);
        other.join().unwrap();
        let mut seen = h.wait_for(4);
        seen.sort_unstable();
        assert_eq!(seen, [1, 2, 11, 12], "each subscription gets each record once");
        Arc::try_unwrap(h).expect("no other handle").shutdown();
    });
}

/// Two publishers on the two partitions of a wildcard subscription, which
/// keeps a ready set: each lists its partition (or finds it listed) while
/// the drainer may be taking the list, clearing marks or going idle.
fn two_partitions(dedicated: bool) {
    let h = Arc::new(Harness::wildcard(dedicated));
    let h2 = h.clone();
    let other = thread::spawn(move || h2.publish_to(1, 1));
    h.publish_to(0, 2);
    other.join().unwrap();
    let mut seen = h.wait_for(2);
    seen.sort_unstable();
    assert_eq!(seen, [1, 2], "each delivered once");
    Arc::try_unwrap(h).expect("no other handle").shutdown();
}

#[test]
fn ready_set_no_lost_wakeup_across_partitions() {
    model(|| two_partitions(false));
}

#[test]
fn ready_set_no_stranded_record_when_the_mark_is_already_set() {
    // The second publisher may find the mark the first set, and must not
    // strand its record.
    model(|| two_publishers(Harness::wildcard(false)));
}

#[test]
fn ready_set_no_lost_wakeup_with_a_dedicated_thread() {
    model(|| two_partitions(true));
}

/// `wait_idle` returns once the drainer has gone idle past the record, and
/// what the handler wrote is then visible to the waiter: the handler writes
/// a plain cell, the waiter reads it after `wait_idle`, and loom reports a
/// read not ordered after the write. (The drainer's `Release` going idle, S1
/// in `broker/partition/state.rs`, is one thing that orders it, but loom cannot
/// single it out here: after its look at the state the waiter reads the log's
/// end under an epoch pin, a `fence(SeqCst)`, which loom lets synchronise
/// with the drainer's F4. The model below shows S1.)
#[test]
fn wait_idle_sees_what_the_handler_wrote() {
    model(|| {
        let h = Harness::new(false);
        h.publish(7);
        assert!(h.wait_idle());
        assert_eq!(h.last_handled(), 7);
        h.shutdown();
    });
}

/// A stats snapshot that says `Idle` covers every message handled before the
/// drainer went idle: its count in `delivered`, and what the handler wrote
/// (a plain cell here). The drainer's `Release` going idle (S1 in
/// `broker/partition/state.rs`) pairs with the snapshot's `Acquire` load of the
/// state, after which it reads the counters `Relaxed` and takes no lock the
/// drainer released. Weakened to `Relaxed`, loom reports the cell read as a
/// causality violation. (The only `IDLE` this thread can read after its own
/// publish moved the state to `ACTIVE` is the one the drainer stores after
/// delivering: nothing else pokes this subscription.)
#[test]
fn an_idle_snapshot_counts_what_was_handled() {
    use rill::broker::SubscriptionState;
    model(|| {
        let h = Harness::new(false);
        h.publish(7);
        loop {
            let st = h.stats();
            if st.state == SubscriptionState::Idle {
                assert_eq!(st.delivered, 1, "an idle snapshot missed a delivery");
                assert_eq!(h.last_handled(), 7);
                break;
            }
            thread::yield_now();
        }
        h.shutdown();
    });
}
