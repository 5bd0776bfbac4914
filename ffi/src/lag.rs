//! `rill_partition_lag`: one partition's position and lag, handed to a
//! callback by `rill_subscription_partitions` and `rill_group_partitions`.

use std::ffi::{c_char, c_void};

/// Position and lag of one partition a subscription or a consumer group
/// reads, handed to a callback.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rill_partition_lag {
    /// The topic's name, borrowed for the callback only.
    pub topic: *const c_char,
    /// Partition index.
    pub partition: u32,
    /// Next offset to handle: a subscription's position, or a group's
    /// committed offset (the oldest retained one while it has committed none).
    pub position: u64,
    /// One past the newest offset published.
    pub end: u64,
    /// `end - position`.
    pub lag: u64,
}

/// What `rill_subscription_partitions` and `rill_group_partitions` call with
/// each partition's lag (borrowed for the call, `topic` included).
pub type rill_partition_lag_callback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, lag: *const rill_partition_lag)>;

/// One partition's position and lag, for a `rill_partition_lag` callback:
/// a subscription's ([`rill::broker::PartitionLag`]) or a consumer group's
/// ([`rill::broker::GroupPartition`], whose topic is the group's).
pub(crate) struct Lag<'a> {
    topic: &'a str,
    partition: u32,
    position: u64,
    end: u64,
    lag: u64,
}

impl<'a> From<&'a rill::broker::PartitionLag> for Lag<'a> {
    fn from(p: &'a rill::broker::PartitionLag) -> Lag<'a> {
        Lag { topic: &p.topic, partition: p.partition, position: p.position, end: p.end, lag: p.lag }
    }
}

impl<'a> Lag<'a> {
    /// A consumer group's partition of `topic`.
    pub(crate) fn of_group(topic: &'a str, p: &rill::broker::GroupPartition) -> Lag<'a> {
        Lag { topic, partition: p.partition, position: p.position, end: p.end, lag: p.lag }
    }
}

/// Calls `each(user_data, lag)` for every partition in `lags`, each built
/// as a `rill_partition_lag` whose `topic` lives for that call only.
pub(crate) fn each_lag<'a>(
    lags: impl Iterator<Item = Lag<'a>>,
    each: unsafe extern "C" fn(*mut c_void, *const rill_partition_lag),
    user_data: *mut c_void,
) {
    for l in lags {
        let topic = crate::text::c_string(l.topic);
        let c = rill_partition_lag {
            topic: topic.as_ptr(),
            partition: l.partition,
            position: l.position,
            end: l.end,
            lag: l.lag,
        };
        // SAFETY: the exported caller's callback, safe to call with
        // `user_data` by its promise; `topic` outlives the call.
        unsafe { each(user_data, &c) };
    }
}
