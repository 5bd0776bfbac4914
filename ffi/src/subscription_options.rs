//! `rill_subscription_options`: how a subscription behaves, with the
//! enum-like values and callback types its fields hold. `rill_start` and
//! its values serve `rill_consumer_options` too.

use std::ffi::{c_char, c_void};
use std::mem::size_of;
use std::time::Duration;

use rill::{DeliveryMode, Overflow, RetryBackoff, StartPosition, SubscriptionOptions};

use crate::error::{FfiError, boundary_value};
use crate::message::rill_message;
use crate::options::{self, OptionStruct};
use crate::priority::{RILL_PRIORITY_UNSET, priority_from_c};
use crate::util::opt_cstr;

/// Where a subscription starts: one of the `RILL_START_*` constants.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct rill_start(pub i32);

/// Only messages published after subscribing (the default).
pub const RILL_START_LATEST: rill_start = rill_start(0);
/// The oldest retained message.
pub const RILL_START_EARLIEST: rill_start = rill_start(1);
/// `start_offset`, in every partition (must be retained).
pub const RILL_START_OFFSET: rill_start = rill_start(2);
/// In every partition, the first message published at or after the time in
/// `start_offset`, read as nanoseconds since the Unix epoch (see
/// `rill_consumer_seek_time`); a time after every message is the end.
pub const RILL_START_TIME: rill_start = rill_start(3);

/// The start a C program chose, checked.
pub(crate) fn start_position(start: rill_start, start_offset: u64) -> Result<StartPosition, FfiError> {
    Ok(match start {
        RILL_START_LATEST => StartPosition::Latest,
        RILL_START_EARLIEST => StartPosition::Earliest,
        RILL_START_OFFSET => StartPosition::Offset(start_offset),
        RILL_START_TIME => StartPosition::Time(start_offset),
        rill_start(other) => return Err(FfiError::invalid(format!("start {other} is not a RILL_START_* value"))),
    })
}

/// When a message counts as handled: one of the `RILL_DELIVERY_*` constants.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct rill_delivery(pub i32);

/// Move past a message only after `RILL_ACK_SUCCESS` (or dead-lettering).
pub const RILL_DELIVERY_AT_LEAST_ONCE: rill_delivery = rill_delivery(0);
/// Move past a message before the handler runs; never redeliver.
pub const RILL_DELIVERY_AT_MOST_ONCE: rill_delivery = rill_delivery(1);

/// What happens at `lag_limit`: one of the `RILL_OVERFLOW_*` constants.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct rill_overflow(pub i32);

/// Skip ahead to stay at most `lag_limit` behind, counting what was skipped.
pub const RILL_OVERFLOW_DROP_OLDEST: rill_overflow = rill_overflow(0);
/// Make publishers wait (`rill_try_publish` fails with `RILL_ERR_FULL`).
pub const RILL_OVERFLOW_BLOCK: rill_overflow = rill_overflow(1);
/// Close the subscription, recording why.
pub const RILL_OVERFLOW_DISCONNECT: rill_overflow = rill_overflow(2);

/// Releases a subscription's `user_data`: called once, when the
/// subscription has ended and none of the functions given `user_data` (its
/// handler, `on_lagged`, `on_dead_letter`) will be called again. Also a
/// validator's `user_free` (`rill_topic_set_validator_with_free`): called
/// once no call of the validator is in flight or will be made.
pub type rill_destructor = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

/// Told that retention trimmed `missed` messages of `topic` (NUL-terminated,
/// valid during the call) partition `partition` before the subscription read
/// them; they are counted in `missed` of the stats as well. Called on the
/// draining thread, between handler calls, with the subscription's
/// `user_data`; same re-entrancy rules as `rill_handler`.
pub type rill_lag_callback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, topic: *const c_char, partition: u32, missed: u64)>;

/// Told that `message` was dead-lettered (published to the dead-letter
/// topic, or dropped if even that failed; the stats' last error then says
/// why), and why (`reason`, NUL-terminated): the alert that a message failed
/// for good. Called once per dead letter on the draining thread, with the
/// subscription's `user_data`; `message` (its bytes, attributes and topic)
/// and `reason` are valid during the call only. Same re-entrancy rules as
/// `rill_handler`.
pub type rill_dead_letter_callback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, message: *const rill_message, reason: *const c_char)>;

/// How a subscription behaves. Fill it with `rill_subscription_options_init`.
/// Strings are copied during `rill_subscribe`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rill_subscription_options {
    /// Set by `rill_subscription_options_init`; do not change (see "Option structs").
    pub struct_size: u32,
    /// A durable name (NULL: anonymous). A durable subscription's position is
    /// kept while it is away and used when it subscribes again. A name
    /// follows the topic name rules (`/`-separated non-empty segments of
    /// UTF-8, no NUL or `*`) and is at most 250 bytes, so that its default
    /// dead-letter topic `$dlq/<name>` is a valid topic name; otherwise
    /// `rill_subscribe` fails with `RILL_ERR_INVALID_ARGUMENT` and an error
    /// text that starts "subscription name".
    pub name: *const c_char,
    /// An attribute filter in Pub/Sub syntax (NULL: deliver everything).
    pub filter: *const c_char,
    /// `RILL_START_LATEST` (default), `RILL_START_EARLIEST`,
    /// `RILL_START_OFFSET` or `RILL_START_TIME`.
    pub start: rill_start,
    /// The offset for `RILL_START_OFFSET`; the time in nanoseconds since the
    /// Unix epoch for `RILL_START_TIME`.
    pub start_offset: u64,
    /// `RILL_DELIVERY_AT_LEAST_ONCE` (default) or `RILL_DELIVERY_AT_MOST_ONCE`.
    pub delivery: rill_delivery,
    /// Deliveries of one message before it is dead-lettered (default 5).
    pub max_attempts: u32,
    /// Wait before the first redelivery, in milliseconds (default 10).
    pub backoff_initial_ms: u64,
    /// Longest wait between redeliveries, in milliseconds (default 10000).
    pub backoff_max_ms: u64,
    /// Growth of the wait per attempt, at least 1.0 (default 2.0).
    pub backoff_multiplier: f64,
    /// Dead-letter topic (NULL: `$dlq/<name>`); created at subscribe if
    /// missing (for an anonymous subscription's default one: when its first
    /// message is dead-lettered, and deleted with it if empty). A topic
    /// name (see `rill_topic_create`; `$` names are allowed here); otherwise
    /// `RILL_ERR_INVALID_ARGUMENT` with an error text naming
    /// `dead_letter_topic`. It must not match the subscription's own pattern
    /// (its dead letters would loop back to it): `RILL_ERR_INVALID_ARGUMENT`
    /// naming the topic and the pattern. (`$` topics are matched only by
    /// patterns that spell out the `$` segment, such as `$dlq/<name>`.)
    pub dead_letter_topic: *const c_char,
    /// `RILL_OVERFLOW_DROP_OLDEST` (default), `_BLOCK` or `_DISCONNECT`.
    pub overflow: rill_overflow,
    /// Lag that triggers `overflow`; 0: none (retention alone bounds it).
    pub lag_limit: u64,
    /// Run the handler on a thread of its own instead of the shared pool.
    pub dedicated_thread: bool,
    /// Called with `user_data` once the subscription has ended (NULL: none).
    /// Also called if `rill_subscribe` fails, so `user_data` never leaks.
    pub user_data_free: rill_destructor,
    /// With `dedicated_thread`: microseconds the thread keeps polling for
    /// new messages before it parks (0, the default: spin briefly, yield,
    /// park; or, while the awake dedicated threads are at least as many as
    /// the cores, sleep in naps of about 50 µs and park after two that
    /// found nothing, or at once if the last park outlasted two naps). For the lowest latency, more than the gap between
    /// messages.
    pub idle_spin_us: u64,
    /// Called when retention overtook the subscription (NULL: none; the
    /// `missed` count in the stats is kept either way).
    pub on_lagged: rill_lag_callback,
    /// Called when a message is dead-lettered, with the message and the
    /// reason: the alert that something failed for good (NULL: none).
    pub on_dead_letter: rill_dead_letter_callback,
    /// A shared (competing) member (default false): live subscriptions with
    /// the same `name`, all shared and on the same topic (a pattern without
    /// wildcards), divide the topic's partitions among them; each partition
    /// is delivered by one member, in order. A member closing hands its
    /// partitions to the others from the position it reached. A shared and a
    /// non-shared subscription with one name: `RILL_ERR_BUSY`. Without a
    /// `name`, or with a wildcard pattern: `RILL_ERR_INVALID_ARGUMENT`.
    pub shared: bool,
    /// The ack deadline in milliseconds (0, the default: none). A handler
    /// call that runs longer is a stall: a `shared` member then gives its
    /// partitions to the other live members, which deliver again from the
    /// last acked offset (so the stuck message comes again, once, to
    /// another member); the late call's ack is discarded, and the member
    /// holds no partitions until a later join or leave of the subscription
    /// gives it some back. With no other member to take over (not shared,
    /// alone, or a member on a `RILL_SHARING_PROCESSES` directory, whose
    /// members split the partitions there) nothing moves and the late ack
    /// counts. Either way the
    /// stall counts in `ack_timeouts` of the stats, is logged (warning) and
    /// becomes the last error; `rill_subscription_free` still waits for the
    /// handler call to return. A batch handler's call is one call: the
    /// deadline covers its whole batch.
    pub ack_timeout_ms: u32,
    /// Its priority in the shared worker pool: `RILL_PRIORITY_MIN` (0) to
    /// `RILL_PRIORITY_MAX` (7), higher runs first. `RILL_PRIORITY_UNSET`
    /// (-1, what `rill_subscription_options_init` writes): the topic's
    /// `priority` if the pattern names one topic that has one, else
    /// `RILL_PRIORITY_DEFAULT` (4). Any other value:
    /// `RILL_ERR_INVALID_ARGUMENT`. When more subscriptions are ready than
    /// the pool has workers, higher ones are drained first, with aging: a
    /// ready subscription waits at most `RILL_PRIORITY_AGING_TAKES` (32)
    /// turns of other subscriptions more than it would with no priorities;
    /// a lower one running ends its turn at its next batch while a higher
    /// one waits. A `dedicated_thread` subscription and consumers have threads of
    /// their own and ignore it.
    pub priority: i32,
}

// SAFETY: repr(C), leading u32 struct_size; pointers, integers, a double,
// `Option<fn>` (NULL is None) and a bool (0 or 1 per the C contract); the
// enum-like fields are checked when read.
unsafe impl OptionStruct for rill_subscription_options {
    const INIT: &'static str = "rill_subscription_options_init";
    const FIRST_SIZE: usize = 128;
    fn defaults() -> Self {
        let backoff = RetryBackoff::default();
        rill_subscription_options {
            struct_size: size_of::<Self>() as u32,
            name: std::ptr::null(),
            filter: std::ptr::null(),
            start: RILL_START_LATEST,
            start_offset: 0,
            delivery: RILL_DELIVERY_AT_LEAST_ONCE,
            max_attempts: rill::broker::DEFAULT_MAX_ATTEMPTS,
            backoff_initial_ms: backoff.initial.as_millis() as u64,
            backoff_max_ms: backoff.max.as_millis() as u64,
            backoff_multiplier: backoff.multiplier,
            dead_letter_topic: std::ptr::null(),
            overflow: RILL_OVERFLOW_DROP_OLDEST,
            lag_limit: 0,
            dedicated_thread: false,
            user_data_free: None,
            idle_spin_us: 0,
            on_lagged: None,
            on_dead_letter: None,
            shared: false,
            ack_timeout_ms: 0,
            priority: RILL_PRIORITY_UNSET,
        }
    }
}

/// Fills `o` with the defaults; `size` is the caller's
/// `sizeof(rill_subscription_options)`. Call it as
/// `rill_subscription_options_init(o)`, the macro that passes the size.
/// NULL is a no-op.
///
/// # Safety
///
/// `o` is NULL or points to `size` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_subscription_options_init_v1(o: *mut rill_subscription_options, size: usize) {
    // SAFETY: forwarded from the caller.
    boundary_value((), || unsafe { options::init(o, size) })
}

/// # Safety
///
/// The strings in `o` are NULL or NUL-terminated.
pub(crate) unsafe fn subscription_options(o: &rill_subscription_options) -> Result<SubscriptionOptions, FfiError> {
    // SAFETY: forwarded.
    let (name, filter, dlq) = unsafe {
        (opt_cstr(o.name, "name")?, opt_cstr(o.filter, "filter")?, opt_cstr(o.dead_letter_topic, "dead_letter_topic")?)
    };
    let start = start_position(o.start, o.start_offset)?;
    let delivery = match o.delivery {
        RILL_DELIVERY_AT_LEAST_ONCE => DeliveryMode::AtLeastOnce,
        RILL_DELIVERY_AT_MOST_ONCE => DeliveryMode::AtMostOnce,
        rill_delivery(other) => {
            return Err(FfiError::invalid(format!("delivery {other} is not a RILL_DELIVERY_* value")));
        }
    };
    let overflow = match o.overflow {
        RILL_OVERFLOW_DROP_OLDEST => Overflow::DropOldest,
        RILL_OVERFLOW_BLOCK => Overflow::Block,
        RILL_OVERFLOW_DISCONNECT => Overflow::Disconnect,
        rill_overflow(other) => {
            return Err(FfiError::invalid(format!("overflow {other} is not a RILL_OVERFLOW_* value")));
        }
    };
    Ok(SubscriptionOptions {
        name: name.map(str::to_owned),
        filter: filter.map(str::to_owned),
        start,
        delivery,
        max_attempts: Some(o.max_attempts),
        backoff: RetryBackoff {
            initial: Duration::from_millis(o.backoff_initial_ms),
            max: Duration::from_millis(o.backoff_max_ms),
            multiplier: o.backoff_multiplier,
        },
        dead_letter_topic: dlq.map(str::to_owned),
        overflow,
        lag_limit: (o.lag_limit > 0).then_some(o.lag_limit),
        dedicated_thread: o.dedicated_thread,
        idle_spin: (o.idle_spin_us > 0).then(|| Duration::from_micros(o.idle_spin_us)),
        on_lagged: None,
        on_dead_letter: None,
        shared: o.shared,
        ack_timeout: (o.ack_timeout_ms > 0).then(|| Duration::from_millis(o.ack_timeout_ms.into())),
        priority: priority_from_c(o.priority, "priority")?,
    })
}
