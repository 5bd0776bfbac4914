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

/// Jobs of three priorities queued while the worker sleeps, in two pushes
/// (the second may race the worker's wake-up and first take): all run, and
/// the two of the first push run highest first. A push to a lane that took
/// the job out of sight of `take`, or a wake-up lost because the job sat in
/// another lane than the one the worker looked at, leaves `wait_done`
/// waiting for ever: loom reports a deadlock. (Checked by making `take`
/// look only at the default lane: the model deadlocks.)
#[test]
fn jobs_of_every_lane_are_taken_highest_first() {
    let mut builder = loom_tests::builder(2);
    builder.max_branches = 20_000;
    builder.check(|| {
        let probe = PoolProbe::new();
        probe.wait_asleep();
        probe.push_priorities(&[0, 7]);
        probe.push_priorities(&[4]);
        probe.wait_done(3);
        let ran = probe.ran();
        assert_eq!(ran.len(), 3);
        let first_push: Vec<u8> = ran.iter().copied().filter(|&p| p != 4).collect();
        assert_eq!(first_push, [7, 0], "ran {ran:?}");
        probe.stop();
    });
}
