//! Loom model of how the worker pool wakes a sleeping worker (see "Waking
//! sleeping workers" in `src/broker/dispatch.rs`): a push notifies only
//! workers asleep that no earlier push has woken (`waking`), and a woken
//! worker takes itself off that count when it comes back. If the count ever
//! stayed up after the worker came back, a later push would skip the notify
//! and its job would sit queued with the worker asleep: the wait below would
//! never return, and loom reports that as a deadlock. (Taking the worker off
//! `waking` out of `next_job` makes this model fail; with two workers the
//! model does not finish in CI's time, so it has one.)
#![cfg(loom)]

use rill::broker::loom_harness::PoolProbe;

/// Two drains queued at once while the worker sleeps, handled; then one
/// more once it sleeps again. (The model waits for the worker to be asleep:
/// its spin yields under loom, so without the wait loom would need more
/// preemptions than its bound to put it to sleep before a push.)
#[test]
fn a_worker_woken_once_is_woken_again() {
    let mut builder = loom_tests::builder(2);
    // The worker spins (yielding under loom) before it sleeps, twice.
    builder.max_branches = 20_000;
    builder.check(|| {
        let probe = PoolProbe::new();
        probe.wait_asleep();
        probe.push_many(2);
        probe.wait_done(2);
        probe.wait_asleep();
        probe.push_many(1);
        probe.wait_done(3);
        probe.stop();
    });
}
