//! Resources a subscription holds are released when it closes, counted
//! exactly. Its own test binary: it counts the process's threads and
//! mappings, which tests running in parallel would disturb.

use rill::{Ack, Message, SubscriptionOptions};

mod common;
use common::{broker, publish, topic, wait_for};

/// Entries in a `/proc/self` listing or lines of a `/proc/self` file.
#[cfg(target_os = "linux")]
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

#[cfg(target_os = "linux")]
fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps").unwrap().lines().count()
}

/// Messages that fill a partition's small first segment and roll it.
const PAST_THE_FIRST_SEGMENT: usize = 1_000;

#[cfg(target_os = "linux")]
#[test]
fn closing_a_dedicated_subscription_releases_its_thread_and_stack() {
    let b = broker();
    topic(&b, "t", 1);
    let cycle = |i: u32| {
        let options = SubscriptionOptions { dedicated_thread: true, ..Default::default() };
        let s = b.subscribe("t", options, |_: &Message<'_>| Ack::Success).unwrap();
        if i.is_multiple_of(2) {
            publish(&b, "t", b"m");
        }
        s.close();
    };
    // Warm up whatever the allocator and the pool map once, and the
    // process's one prefault thread, started at a partition's first roll
    // into a full-size segment (`src/log/prefault.rs`), which enough
    // messages to fill the small first segment bring about.
    for i in 0..10 {
        cycle(i);
    }
    for _ in 0..PAST_THE_FIRST_SEGMENT {
        publish(&b, "t", b"m");
    }
    let (threads_before, maps_before) = (threads(), mappings());
    for i in 0..200 {
        cycle(i);
        // The thread is joined by `close`. The kernel lets a joiner go (it
        // clears the thread id) a moment before it removes the thread from
        // /proc/self/task, and there is nothing to wait on for that; so wait
        // for the count itself. A thread that is never released fails this.
        wait_for(&format!("cycle {i}: the dedicated thread to be gone after its close"), || {
            threads() == threads_before
        });
    }
    // A kept thread keeps its stack and guard page: two mappings each, 400
    // for 200 cycles. Allow a few for the allocator's own growth.
    let grown = mappings().saturating_sub(maps_before);
    assert!(grown < 20, "200 closed dedicated subscriptions left {grown} more mappings");
}
