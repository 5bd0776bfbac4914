//! `rill_subscription_stats`: a snapshot of a subscription's counters, with
//! its `rill_subscription_state` values. Filled by the subscription's own
//! `rill_subscription_get_stats` (subscription.rs) and for every live
//! subscription by the broker's `rill_subscription_list` (broker.rs).

use std::ffi::{c_char, c_void};

/// A subscription's lifecycle state: one of the `RILL_SUBSCRIPTION_*` constants.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct rill_subscription_state(pub i32);

/// Caught up, waiting for messages.
pub const RILL_SUBSCRIPTION_IDLE: rill_subscription_state = rill_subscription_state(0);
/// Delivering.
pub const RILL_SUBSCRIPTION_ACTIVE: rill_subscription_state = rill_subscription_state(1);
/// Waiting to redeliver a message that asked for a retry.
pub const RILL_SUBSCRIPTION_BACKOFF: rill_subscription_state = rill_subscription_state(2);
/// Closed (by `rill_subscription_free`, the broker, or `RILL_OVERFLOW_DISCONNECT`).
pub const RILL_SUBSCRIPTION_CLOSED: rill_subscription_state = rill_subscription_state(3);

/// A snapshot of a subscription's counters.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rill_subscription_stats {
    /// Handler calls, redeliveries included.
    pub delivered: u64,
    /// `RILL_ACK_SUCCESS` acks.
    pub acked: u64,
    /// Redeliveries scheduled (retry acks).
    pub retried: u64,
    /// Messages published to the dead-letter topic.
    pub dead_lettered: u64,
    /// Messages skipped by the filter.
    pub filtered: u64,
    /// Messages skipped unhandled (`RILL_OVERFLOW_DROP_OLDEST`, or failed at most once).
    pub dropped: u64,
    /// Messages trimmed by retention before the subscription read them.
    pub missed: u64,
    /// Messages published but not yet handled, over all partitions.
    pub lag: u64,
    /// Partitions it reads.
    pub partitions: u32,
    /// Its state.
    pub state: rill_subscription_state,
    /// Its name (generated for anonymous subscriptions). Set by
    /// `rill_subscription_list`, borrowed for the callback only (copy it to
    /// keep it); NULL from `rill_subscription_get_stats` (use
    /// `rill_subscription_name`).
    pub name: *const c_char,
    /// The pattern it subscribed with. Borrowed like `name`; NULL from
    /// `rill_subscription_get_stats`.
    pub pattern: *const c_char,
    /// The last delivery problem: the handler's latest failure (retry,
    /// dead letter, or a crash of a Rust or Python handler, with the
    /// message's topic, partition, offset and the reason), or a dead letter
    /// that could not be published; NULL if there was none. Borrowed like
    /// `name`; NULL from `rill_subscription_get_stats` (use
    /// `rill_subscription_last_error`, which copies it into your buffer: the
    /// text can change at any moment, so a pointer into it could not stay
    /// valid after the call).
    pub last_error: *const c_char,
    /// Handler calls that ran past `ack_timeout_ms` (each counted once).
    pub ack_timeouts: u64,
    /// Times it waited ready in the worker pool's queue since the last
    /// `rill_subscription_get_stats` (each of which starts these queue
    /// figures afresh; `rill_subscription_list` leaves them). 0 on a
    /// dedicated thread.
    pub queue_waits: u64,
    /// The median of those waits (queued to taken by a worker), in
    /// nanoseconds: the upper edge of a power-of-two bucket, so at most
    /// twice the wait. 0 with no waits.
    pub queue_wait_p50_ns: u64,
    /// Their 99th percentile, likewise.
    pub queue_wait_p99_ns: u64,
    /// The longest of those waits in turns of other subscriptions (at most
    /// `RILL_PRIORITY_AGING_TAKES` plus the subscriptions queued before it).
    pub queue_wait_max_takes: u64,
    /// Its priority (its own or its topic's default), 0 to 7.
    pub priority: u32,
}

impl rill_subscription_stats {
    /// The counters of `st`, with the three strings NULL.
    pub(crate) fn counters(st: &rill::SubscriptionStats) -> rill_subscription_stats {
        rill_subscription_stats {
            delivered: st.delivered,
            acked: st.acked,
            retried: st.retried,
            dead_lettered: st.dead_lettered,
            filtered: st.filtered,
            dropped: st.dropped,
            missed: st.missed,
            lag: st.lag,
            partitions: st.partitions.len() as u32,
            state: match st.state {
                rill::SubscriptionState::Idle => RILL_SUBSCRIPTION_IDLE,
                rill::SubscriptionState::Active => RILL_SUBSCRIPTION_ACTIVE,
                rill::SubscriptionState::Backoff => RILL_SUBSCRIPTION_BACKOFF,
                rill::SubscriptionState::Closed => RILL_SUBSCRIPTION_CLOSED,
            },
            name: std::ptr::null(),
            pattern: std::ptr::null(),
            last_error: std::ptr::null(),
            ack_timeouts: st.ack_timeouts,
            queue_waits: st.queue_waits,
            queue_wait_p50_ns: u64::try_from(st.queue_wait_p50.as_nanos()).unwrap_or(u64::MAX),
            queue_wait_p99_ns: u64::try_from(st.queue_wait_p99.as_nanos()).unwrap_or(u64::MAX),
            queue_wait_max_takes: st.queue_wait_max_takes,
            priority: st.priority.into(),
        }
    }
}

/// Size of `rill_subscription_stats` in its first layout (rill 0.1: the
/// eight counters, `partitions` and `state`), the least a caller may pass.
pub(crate) const SUBSCRIPTION_STATS_FIRST_SIZE: usize = 72;

/// What `rill_subscription_list` calls with each subscription's stats
/// (borrowed for the call, strings included).
pub type rill_subscription_callback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, stats: *const rill_subscription_stats)>;
