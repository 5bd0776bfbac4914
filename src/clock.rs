//! The publish-timestamp clock.
//!
//! Reading the wall clock costs more than the rest of an append on the VMs
//! rill is measured on. rill instead reads the CPU's time-stamp counter
//! through `quanta`, a fraction of that (it falls back to the OS monotonic
//! clock where the counter is not invariant; the "clock read" floor of
//! `rill-bench --publish-cost` measures it), and adds the elapsed time to a wall-clock
//! reading taken once, when the clock is first used. Timestamps are therefore
//! nanoseconds since the Unix epoch that never go backwards within a process;
//! they drift from an NTP-adjusted wall clock only by the counter's frequency
//! error (parts per million).
//!
//! Under loom (where quanta does not build) the wall clock is read directly.

use std::time::{SystemTime, UNIX_EPOCH};

fn wall_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(not(loom))]
struct Clock {
    counter: quanta::Clock,
    /// Counter value at the anchor.
    anchor_raw: u64,
    /// Wall-clock nanoseconds at the anchor.
    anchor_ns: u64,
}

#[cfg(not(loom))]
static CLOCK: std::sync::OnceLock<Clock> = std::sync::OnceLock::new();

#[cfg(not(loom))]
fn clock() -> &'static Clock {
    CLOCK.get_or_init(|| {
        let counter = quanta::Clock::new();
        let anchor_raw = counter.raw();
        Clock { counter, anchor_raw, anchor_ns: wall_ns() }
    })
}

/// Calibrates the clock now, so the first publish does not pay for it.
///
/// # Examples
///
/// ```
/// rill::clock::warm_up(); // at start-up, before the first publish
/// assert!(rill::clock::now_ns() > 0);
/// # Ok::<(), rill::Error>(())
/// ```
pub fn warm_up() {
    #[cfg(not(loom))]
    clock();
}

/// Nanoseconds since the Unix epoch, from the clock rill stamps every
/// message with: compare a message's `timestamp_ns()` with this to measure
/// publish-to-handler latency on the same clock.
///
/// # Examples
///
/// ```
/// use rill::clock::now_ns;
///
/// let (first, second) = (now_ns(), now_ns());
/// assert!(first <= second); // never backwards within a process
/// // Nanoseconds since the Unix epoch, as a message's `timestamp_ns()`: after 2020.
/// assert!(second > 1_577_836_800 * 1_000_000_000);
/// # Ok::<(), rill::Error>(())
/// ```
#[inline]
pub fn now_ns() -> u64 {
    #[cfg(not(loom))]
    {
        let c = clock();
        c.anchor_ns + c.counter.delta_as_nanos(c.anchor_raw, c.counter.raw())
    }
    #[cfg(loom)]
    wall_ns()
}
