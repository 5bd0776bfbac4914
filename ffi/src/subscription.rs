//! `rill_subscription`: push subscriptions with a C handler.

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::mem::size_of;
use std::sync::Arc;
use std::time::Duration;

use rill::{Ack, DeliveryMode, Message, Overflow, RetryBackoff, StartPosition, Subscription, SubscriptionOptions};

use crate::broker::rill_broker;
use crate::error::{FfiError, boundary, boundary_value, rill_status};
use crate::lag::{Lag, each_lag, rill_partition_lag_callback};
use crate::message::{MessageContext, c_message, rill_message};
use crate::options::{self, OptionStruct};
use crate::priority::{RILL_PRIORITY_UNSET, priority_from_c};
use crate::util::{cstr, inherited, opt_cstr, out_ptr, reference, this_process, timeout, write_out, write_sized};

/// What a handler says about a message: one of the `RILL_ACK_*` constants.
/// Any other value is treated as `RILL_ACK_RETRY`, with a reason saying so.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct rill_ack(pub i32);

/// Handled: move past the message.
pub const RILL_ACK_SUCCESS: rill_ack = rill_ack(0);
/// Failed: deliver it again after a backoff (or dead-letter it once the
/// attempts run out).
pub const RILL_ACK_RETRY: rill_ack = rill_ack(1);
/// Failed for good: publish it to the dead-letter topic and move on.
pub const RILL_ACK_DEAD_LETTER: rill_ack = rill_ack(2);

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

/// A handler: called with each message, one at a time per subscription, on a
/// broker thread (not the subscribing thread). It may call back into the
/// library (publish, subscribe, free its own subscription). It must return:
/// exceptions and `longjmp` must not cross it, nor may it end its thread
/// (`pthread_exit`, cancellation): that is a forced unwind, which the root of
/// every rill thread catches, and glibc then aborts the process. (An embedded
/// interpreter that ends foreign threads at exit must stop deliveries first,
/// as the Python package does with an `atexit` hook.)
pub type rill_handler = Option<unsafe extern "C" fn(user_data: *mut c_void, message: *const rill_message) -> rill_ack>;

/// A batch handler: called with `count` (at least 1) consecutive messages of
/// one partition and an array of `count` acks, all preset to
/// `RILL_ACK_SUCCESS`. It sets an ack per message it handled and returns
/// how many messages, from the front, it handled; the others are delivered
/// again in a later call. Processing stops at the first retry: messages after
/// it come again too. Returning 0 counts as a retry of the first message.
/// Same threading and re-entrancy rules as `rill_handler`.
pub type rill_batch_handler = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        messages: *const rill_message,
        count: usize,
        acks: *mut rill_ack,
    ) -> usize,
>;

/// Releases a subscription's `user_data`: called once, when the
/// subscription has ended and its handler will not be called again.
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
    /// or alone) nothing moves and the late ack counts. Either way the
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
unsafe fn subscription_options(o: &rill_subscription_options) -> Result<SubscriptionOptions, FfiError> {
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

/// A live subscription. Free it with `rill_subscription_free` (which
/// unsubscribes). `rill_subscription_wait_idle` and `_get_stats` may be
/// called from any thread.
pub struct rill_subscription {
    sub: Subscription,
    /// The process that subscribed (see `rill_subscription_free` after fork).
    pid: u32,
    /// Its eventfd, once `rill_subscription_notify_fd` made one (the idle
    /// hook owns it and closes it when the subscription is closed); locked
    /// because the subscription's calls may come from several threads.
    notify: std::sync::Mutex<Option<std::os::fd::RawFd>>,
}

impl std::fmt::Debug for rill_subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.sub.fmt(f)
    }
}

/// The user's `user_data`, released with its destructor when dropped.
struct UserData {
    ptr: *mut c_void,
    free: rill_destructor,
}

// SAFETY: `rill_subscribe`'s contract makes the caller promise that
// `user_data` may be used (and freed) from the broker's threads.
unsafe impl Send for UserData {}
// SAFETY: shared only between a subscription's handler, its lag callback
// and its dead-letter callback, which its drainer calls one at a time (all
// three from the drain round); the pointer itself is never written.
unsafe impl Sync for UserData {}

impl UserData {
    /// The pointer (a method, so closures capture the whole `UserData`).
    fn get(&self) -> *mut c_void {
        self.ptr
    }
}

impl Drop for UserData {
    fn drop(&mut self) {
        if let Some(free) = self.free {
            // SAFETY: the destructor the caller gave for this pointer, called once.
            unsafe { free(self.ptr) };
        }
    }
}

/// Subscribes `handler` to every topic matching `pattern` (`*` matches one
/// segment, `**` any number; topics created later are matched too). A
/// pattern follows the topic name rules (see `rill_topic_create`) and has at
/// most 64 segments, at most 32 of them `**`; a wildcard is a whole segment.
/// `o` may be NULL for the defaults. On success `*out` is the subscription.
/// Called as `rill_subscribe`.
///
/// `user_data` is passed to every handler call, on broker threads; it must
/// be safe to use from them. If `o->user_data_free` is set it is called
/// with `user_data` once the subscription ends, and also if this call fails.
///
/// # Safety
///
/// `b` is a live broker; `pattern` a NUL-terminated string; `o` NULL or valid
/// options; `handler` a function that returns normally; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_subscribe_v1(
    b: *mut rill_broker,
    pattern: *const c_char,
    o: *const rill_subscription_options,
    handler: rill_handler,
    user_data: *mut c_void,
    out: *mut *mut rill_subscription,
) -> rill_status {
    // SAFETY: forwarded from the caller.
    unsafe {
        subscribe_with(b, pattern, o, user_data, out, |broker, pattern, options, user| {
            let handler = handler.ok_or_else(|| FfiError::null("handler"))?;
            Ok(broker.subscribe(pattern, options, trampoline(handler, user))?)
        })
    }
}

/// Like `rill_subscribe`, with a handler that takes runs of consecutive
/// messages (at most 64 at a time) and acknowledges each: one call for many
/// messages, for bindings where a call costs more than the work (Python).
/// On the worker pool the first run is one message and later runs are sized
/// to take about 250 µs of handler time, so a slow handler does not hold a
/// worker that other subscriptions wait for. Called as `rill_subscribe_batch`.
///
/// # Safety
///
/// As for `rill_subscribe`; `handler` writes at most `count` acks and
/// returns normally.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_subscribe_batch_v1(
    b: *mut rill_broker,
    pattern: *const c_char,
    o: *const rill_subscription_options,
    handler: rill_batch_handler,
    user_data: *mut c_void,
    out: *mut *mut rill_subscription,
) -> rill_status {
    // SAFETY: forwarded from the caller.
    unsafe {
        subscribe_with(b, pattern, o, user_data, out, |broker, pattern, options, user| {
            let handler = handler.ok_or_else(|| FfiError::null("handler"))?;
            Ok(broker.subscribe_batch(pattern, options, batch_trampoline(handler, user))?)
        })
    }
}

/// The body shared by the subscribe functions: takes ownership of
/// `user_data` first (so its destructor runs even if anything fails), checks
/// the arguments, and lets `subscribe` make the subscription.
///
/// # Safety
///
/// As for `rill_subscribe`.
unsafe fn subscribe_with(
    b: *mut rill_broker,
    pattern: *const c_char,
    o: *const rill_subscription_options,
    user_data: *mut c_void,
    out: *mut *mut rill_subscription,
    subscribe: impl FnOnce(&rill::Broker, &str, SubscriptionOptions, Arc<UserData>) -> Result<Subscription, FfiError>,
) -> rill_status {
    // Read before anything else can fail, so `user_data_free` is known.
    // (`read` does not panic: it only compares and copies bytes.)
    // SAFETY: the caller promises `o` is NULL or options filled by `_init`.
    let read = unsafe { options::read(o) };
    let free = match &read {
        Ok(o) => o.as_ref().and_then(|o| o.user_data_free),
        // A bad struct_size (a struct cleared instead of filled by _init)
        // still arrives through a _v1 symbol, which only a rill.h with
        // struct_size calls, so the storage is at least the first sized
        // layout, which has user_data_free: its destructor still runs, and
        // user_data does not leak even on this failure.
        // SAFETY: `read` returns Err only for non-NULL `o`, pointing (as just
        // said) to at least FIRST_SIZE bytes, which cover this field.
        Err(_) => unsafe { (&raw const (*o).user_data_free).read_unaligned() },
    };
    // Owns user_data from here on: dropped (freeing it) if anything fails,
    // else once the handler and the lag and dead-letter callbacks are all
    // gone.
    let user = Arc::new(UserData { ptr: user_data, free });
    boundary(move || {
        let o = read?;
        out_ptr(out, "out")?;
        // SAFETY: the caller's promises, checked for NULL inside.
        let (b, pattern) = unsafe { (reference(b, "broker")?, cstr(pattern, "pattern")?) };
        let mut options = match &o {
            // SAFETY: the caller promises the option strings are valid.
            Some(o) => unsafe { subscription_options(o) }?,
            None => SubscriptionOptions::default(),
        };
        if let Some(cb) = o.as_ref().and_then(|o| o.on_lagged) {
            options.on_lagged = Some(lag_trampoline(cb, user.clone()));
        }
        if let Some(cb) = o.as_ref().and_then(|o| o.on_dead_letter) {
            options.on_dead_letter = Some(dead_letter_trampoline(cb, user.clone()));
        }
        let sub = subscribe(&b.broker, pattern, options, user)?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe {
            write_out(
                out,
                Box::into_raw(Box::new(rill_subscription {
                    sub,
                    pid: this_process(),
                    notify: std::sync::Mutex::new(None),
                })),
            )
        };
        Ok(())
    })
}

/// Topic names as C strings, made once per topic and kept for the life of
/// the subscription, so a topic's `rill_message::topic` pointer never changes
/// (bindings use it as a cache key: the Python package does), not even when
/// the topic is deleted and created again.
///
/// Messages of one reader mostly come from one topic, so the last topic is
/// kept aside and recognised by the allocation the broker holds its name in
/// ([`Message::topic_name`]), a pointer comparison, rather than by its bytes.
/// That needs a clone of that name here: while it is held, its address
/// cannot be freed and given to another topic's name, which would then pass
/// for this one. Any other name (a second topic, or the same topic
/// recreated, which the broker names with a new allocation) goes to the map,
/// keyed by the name's text; the C string there shares its allocation with
/// the one kept aside (an `Arc`), because a fresh copy would give the same
/// topic a new address, and a freed one could come back as the address of
/// another topic.
#[derive(Default)]
struct TopicNames {
    names: HashMap<String, Arc<CStr>>,
    last: Option<(Arc<str>, Arc<CStr>)>,
}

impl TopicNames {
    /// The C string of `topic`'s name.
    #[inline]
    fn get(&mut self, topic: &Arc<str>) -> &CStr {
        match &self.last {
            Some((name, _)) if Arc::ptr_eq(name, topic) => {}
            _ => self.switch_to(topic),
        }
        &self.last.as_ref().expect("set by switch_to").1
    }

    /// Makes `topic` the last topic, finding or making its C string.
    #[cold]
    #[inline(never)]
    fn switch_to(&mut self, topic: &Arc<str>) {
        let c = match self.names.get(&**topic) {
            Some(c) => Arc::clone(c),
            None => {
                let c: Arc<CStr> = Arc::from(CString::new(&**topic).expect("topic names have no NUL"));
                self.names.insert(topic.to_string(), Arc::clone(&c));
                c
            }
        };
        self.last = Some((Arc::clone(topic), c));
    }
}

/// The Rust lag callback that calls a C one.
fn lag_trampoline(
    cb: unsafe extern "C" fn(*mut c_void, *const c_char, u32, u64),
    user: Arc<UserData>,
) -> rill::LagCallback {
    Arc::new(move |topic: &str, partition: u32, missed: u64| {
        let name = CString::new(topic).expect("topic names have no NUL");
        // SAFETY: the C callback, called as `rill_lag_callback`'s contract
        // allows; `name` outlives the call.
        unsafe { cb(user.get(), name.as_ptr(), partition, missed) }
    })
}

/// The Rust dead-letter callback that calls a C one.
fn dead_letter_trampoline(
    cb: unsafe extern "C" fn(*mut c_void, *const rill_message, *const c_char),
    user: Arc<UserData>,
) -> rill::DeadLetterCallback {
    Arc::new(move |m: &Message<'_>, reason: &str| {
        let topic = CString::new(m.topic()).expect("topic names have no NUL");
        let reason = crate::text::c_string(reason);
        // SAFETY: the context lives in this frame for the duration of the
        // call, within the borrow of the message.
        let ctx = unsafe { MessageContext::new(m.record(), Some(m)) };
        let msg = c_message(&topic, m.partition(), m.attempt(), &ctx);
        // SAFETY: the C callback, called as `rill_dead_letter_callback`'s
        // contract allows; the message, its context and both strings outlive
        // the call.
        unsafe { cb(user.get(), &msg, reason.as_ptr()) }
    })
}

/// Turns a C ack into a Rust one; a value that is not a `rill_ack` is a retry.
#[inline]
fn ack_from_c(ack: rill_ack, m: &Message<'_>) -> Ack {
    match ack {
        RILL_ACK_SUCCESS => Ack::Success,
        RILL_ACK_RETRY => Ack::Retry,
        RILL_ACK_DEAD_LETTER => Ack::DeadLetter,
        rill_ack(other) => not_an_ack(other, m),
    }
}

/// A handler's return value that is not a `rill_ack`: a retry, with a reason
/// saying so (out of line: the formatting is not for every message).
#[cold]
#[inline(never)]
fn not_an_ack(other: i32, m: &Message<'_>) -> Ack {
    m.set_reason(format!("the handler returned {other}, which is not a rill_ack; retrying"));
    Ack::Retry
}

/// A batch's C views, kept from one call of the batch trampoline to the next
/// so that a call does not allocate them. They are filled for one handler
/// call and emptied before the trampoline returns (and again before they
/// are filled, should a panic ever have skipped that), so a pointer into a
/// batch is never read after its call.
#[derive(Default)]
struct BatchViews {
    contexts: Vec<MessageContext>,
    messages: Vec<rill_message>,
    acks: Vec<rill_ack>,
}

// SAFETY: the views hold raw pointers (to a batch's records and messages,
// and from each `rill_message` to its context) only during a handler call,
// on the draining thread; whatever is left in them when the closure moves to
// another thread is stale and never dereferenced, only cleared.
unsafe impl Send for BatchViews {}

/// The Rust batch handler that calls a C batch handler.
fn batch_trampoline(
    handler: unsafe extern "C" fn(*mut c_void, *const rill_message, usize, *mut rill_ack) -> usize,
    user: Arc<UserData>,
) -> impl FnMut(&[Message<'_>], &mut [Ack]) -> usize + Send + 'static {
    let mut topics = TopicNames::default();
    let mut views = BatchViews::default();
    move |msgs: &[Message<'_>], acks: &mut [Ack]| {
        let topic = topics.get(msgs[0].topic_name());
        let BatchViews { contexts, messages, acks: c_acks } = &mut views;
        contexts.clear();
        messages.clear();
        // SAFETY: the contexts are read only during the handler call below,
        // within the borrow of the messages, and emptied after it.
        contexts.extend(msgs.iter().map(|m| unsafe { MessageContext::new(m.record(), Some(m)) }));
        // `contexts` is not changed again until after the call, so the
        // pointers to its elements stay valid.
        messages
            .extend(msgs.iter().zip(contexts.iter()).map(|(m, ctx)| c_message(topic, m.partition(), m.attempt(), ctx)));
        c_acks.clear();
        c_acks.resize(msgs.len(), RILL_ACK_SUCCESS);
        // SAFETY: the C handler, called as `rill_subscribe_batch`'s contract
        // allows, with `count` messages and `count` writable acks.
        let handled = unsafe { handler(user.get(), messages.as_ptr(), messages.len(), c_acks.as_mut_ptr()) };
        messages.clear();
        contexts.clear();
        let handled = handled.min(msgs.len());
        for k in 0..handled {
            acks[k] = ack_from_c(c_acks[k], &msgs[k]);
        }
        handled
    }
}

/// The Rust handler that calls a C handler.
fn trampoline(
    handler: unsafe extern "C" fn(*mut c_void, *const rill_message) -> rill_ack,
    user: Arc<UserData>,
) -> impl FnMut(&Message<'_>) -> Ack + Send + 'static {
    let mut topics = TopicNames::default();
    move |m: &Message<'_>| {
        let topic = topics.get(m.topic_name());
        // SAFETY: the context and the C message live on this stack frame only,
        // for the duration of the handler call, within the record's borrow.
        let ctx = unsafe { MessageContext::new(m.record(), Some(m)) };
        let c = c_message(topic, m.partition(), m.attempt(), &ctx);
        // SAFETY: the C handler, called as `rill_subscribe`'s contract allows.
        // (A C++ exception may not cross it: the C++ wrapper catches them.)
        ack_from_c(unsafe { handler(user.get(), &c) }, m)
    }
}

/// Waits until the subscription has handled everything published to its
/// partitions so far and no handler call is in flight: `RILL_OK`, or
/// `RILL_ERR_TIMEOUT` after `timeout_ms` (negative: no limit),
/// `RILL_ERR_CLOSED` if it is closed. Called from the subscription's own
/// handler it would wait for that very call: `RILL_ERR_INVALID_ARGUMENT` at
/// once, whatever `timeout_ms`. For a durable (named) subscription of a
/// broker on a data directory with `RILL_FSYNC_ALWAYS`, `RILL_OK` also means
/// every ack it made is on stable storage.
///
/// # Safety
///
/// `s` is a live subscription.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_subscription_wait_idle(s: *mut rill_subscription, timeout_ms: i64) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promise, checked for NULL.
        let s = unsafe { reference(s, "subscription") }?;
        let notify = *s.notify.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(fd) = notify {
            // Emptied before `wait_idle` arms the bell and looks (see
            // `rill_consumer_poll`, and "The bell" in the Rust waiters.rs).
            crate::notify::drain(fd);
        }
        let limit = timeout(timeout_ms).unwrap_or(Duration::from_secs(u64::MAX / 4));
        if s.sub.wait_idle(limit)? {
            Ok(())
        } else {
            Err(FfiError::new(rill_status::RILL_ERR_TIMEOUT, format!("not idle after {timeout_ms} ms")))
        }
    })
}

/// A file descriptor that becomes readable when the subscription may have
/// become idle, for an event loop that must not block in
/// `rill_subscription_wait_idle`. An eventfd made at the first call (later
/// calls give the same one), owned by the subscription: do not read, write
/// or close it; `rill_subscription_free` closes it (take it out of your
/// event loop first).
///
/// Use: call `rill_subscription_wait_idle` with `timeout_ms` 0; on
/// `RILL_ERR_TIMEOUT` wait until the fd is readable, and call it again.
/// Each call empties the fd before it looks, and one that times out arms
/// it: the fd becomes readable at the first change that may have made the
/// subscription idle (its delivery going idle or into a backoff, its
/// close). A call that finds it idle disarms it. A wake may find it still
/// busy (wait again); none is lost. One waiter at a time: a second one's
/// call may empty the fd of the first's wake. `RILL_ERR_IO` if no eventfd
/// can be made.
///
/// # Safety
///
/// `s` is a live subscription; `fd` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_subscription_notify_fd(s: *mut rill_subscription, fd: *mut c_int) -> rill_status {
    boundary(|| {
        out_ptr(fd, "fd")?;
        // SAFETY: the caller's promise, checked for NULL.
        let s = unsafe { reference(s, "subscription") }?;
        let mut notify = s.notify.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let raw = match *notify {
            Some(raw) => raw,
            None => {
                let (made, ring) = crate::notify::eventfd("rill_subscription_notify_fd")?;
                s.sub.set_idle_hook(ring);
                *notify = Some(made);
                made
            }
        };
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(fd, raw) };
        Ok(())
    })
}

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
    fn counters(st: &rill::SubscriptionStats) -> rill_subscription_stats {
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

/// Fills `*out` with the subscription's counters. Works on a closed
/// subscription too (that is how to see its final counts). Call it as
/// `rill_subscription_get_stats(s, out)`, the macro that passes
/// `sizeof(rill_subscription_stats)` as `size`: the library writes that many
/// bytes (fields the program's header does not know are left out; fields
/// the library does not know are zeroed). A `size` smaller than the first
/// layout (72 bytes) or larger than `RILL_STRUCT_SIZE_MAX` is
/// `RILL_ERR_INVALID_ARGUMENT`, and nothing is written.
///
/// # Safety
///
/// `s` is a live subscription; `out` writable for `size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_subscription_get_stats_v1(
    s: *const rill_subscription,
    out: *mut rill_subscription_stats,
    size: usize,
) -> rill_status {
    boundary(|| {
        out_ptr(out, "out")?;
        if size < SUBSCRIPTION_STATS_FIRST_SIZE {
            return Err(FfiError::invalid(format!(
                "rill_subscription_stats of {size} bytes is smaller than its first layout ({} \
                 bytes): call rill_subscription_get_stats, the macro that passes its size",
                SUBSCRIPTION_STATS_FIRST_SIZE
            )));
        }
        options::within_max(size, "rill_subscription_stats")?;
        // SAFETY: the caller's promise, checked for NULL.
        let s = unsafe { reference(s, "subscription") }?;
        let stats = rill_subscription_stats::counters(&s.sub.stats());
        // SAFETY: checked non-NULL; the caller promises `size` writable bytes.
        unsafe { write_sized(out, &stats, size) };
        Ok(())
    })
}

/// Copies the subscription's name (generated for anonymous ones) into
/// `buf` (truncated, NUL-terminated); returns its full length.
///
/// # Safety
///
/// `s` is a live subscription; `buf` NULL or writable for `buf_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_subscription_name(
    s: *const rill_subscription,
    buf: *mut c_char,
    buf_len: usize,
) -> usize {
    // SAFETY: forwarded.
    boundary_value(0, || match unsafe { s.as_ref() } {
        Some(s) => crate::text::copy_str(s.sub.name(), buf, buf_len),
        None => 0,
    })
}

/// Copies a text of the subscription's stats (`field` picks it; none is
/// "") into `buf` as [`crate::text::copy_str`] does; 0 for a NULL `s`.
///
/// # Safety
///
/// `s` is NULL or a live subscription; `buf` NULL or writable for `buf_len` bytes.
unsafe fn copy_stats_text(
    s: *const rill_subscription,
    buf: *mut c_char,
    buf_len: usize,
    field: impl FnOnce(rill::SubscriptionStats) -> Option<String>,
) -> usize {
    // SAFETY: the caller promises `s` is NULL or live.
    boundary_value(0, || match unsafe { s.as_ref() } {
        Some(s) => crate::text::copy_str(field(s.sub.peek_stats()).as_deref().unwrap_or(""), buf, buf_len),
        None => 0,
    })
}

/// Copies why the subscription was closed by the library (the broker
/// closed, or `RILL_OVERFLOW_DISCONNECT` with the lag it reached) into `buf`;
/// returns its full length, 0 if it was not.
///
/// # Safety
///
/// `s` is a live subscription; `buf` NULL or writable for `buf_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_subscription_closed_reason(
    s: *const rill_subscription,
    buf: *mut c_char,
    buf_len: usize,
) -> usize {
    // SAFETY: forwarded.
    unsafe { copy_stats_text(s, buf, buf_len, |st| st.closed_reason) }
}

/// Copies the subscription's last delivery problem (see `last_error` in
/// `rill_subscription_stats`) into `buf` (truncated, NUL-terminated);
/// returns its full length, 0 if there was none.
///
/// # Safety
///
/// `s` is a live subscription; `buf` NULL or writable for `buf_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_subscription_last_error(
    s: *const rill_subscription,
    buf: *mut c_char,
    buf_len: usize,
) -> usize {
    // SAFETY: forwarded.
    unsafe { copy_stats_text(s, buf, buf_len, |st| st.last_error) }
}

/// Forgets a durable subscription's saved position, so the name starts
/// afresh next time: `RILL_ERR_BUSY` while a subscription of that name is
/// live, `RILL_ERR_NOT_FOUND` if none saved a position.
///
/// # Safety
///
/// `b` is a live broker; `name` a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_durable_delete(b: *mut rill_broker, name: *const c_char) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promises, checked for NULL inside.
        let (b, name) = unsafe { (reference(b, "broker")?, cstr(name, "subscription name")?) };
        b.broker.delete_durable(name)?;
        Ok(())
    })
}

/// What `rill_subscription_list` calls with each subscription's stats
/// (borrowed for the call, strings included).
pub type rill_subscription_callback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, stats: *const rill_subscription_stats)>;

/// Calls `each(user_data, stats)` once for every live subscription of the
/// broker, in name order, with its full stats: the strings `name`, `pattern`
/// and `last_error` are set, borrowed for that call only. A snapshot, taken
/// before the first call; the callback may call any rill function
/// (subscribing or freeing included), which the snapshot does not see.
///
/// # Safety
///
/// `b` is a live broker; `each` a function safe to call with `user_data`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_subscription_list(
    b: *mut rill_broker,
    each: rill_subscription_callback,
    user_data: *mut c_void,
) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promise, checked for NULL.
        let b = unsafe { reference(b, "broker") }?;
        let each = crate::util::callback(each, "each")?;
        for st in b.broker.subscriptions() {
            let name = crate::text::c_string(&st.name);
            let pattern = crate::text::c_string(&st.pattern);
            let last_error = st.last_error.as_deref().map(crate::text::c_string);
            let mut c = rill_subscription_stats::counters(&st);
            c.name = name.as_ptr();
            c.pattern = pattern.as_ptr();
            c.last_error = last_error.as_ref().map_or(std::ptr::null(), |e| e.as_ptr());
            // SAFETY: the caller's callback; every pointer in `c` outlives the call.
            unsafe { each(user_data, &c) };
        }
        Ok(())
    })
}

/// Calls `each(user_data, lag)` for every partition the subscription reads
/// (of every topic its pattern matched), with its position and lag; the
/// struct and its `topic` are borrowed for that call only. A snapshot; the
/// callback may call any rill function.
///
/// # Safety
///
/// `s` is a live subscription; `each` a function safe to call with `user_data`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_subscription_partitions(
    s: *const rill_subscription,
    each: rill_partition_lag_callback,
    user_data: *mut c_void,
) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promise, checked for NULL.
        let s = unsafe { reference(s, "subscription") }?;
        let each = crate::util::callback(each, "each")?;
        let st = s.sub.peek_stats();
        each_lag(st.partitions.iter().map(Lag::from), each, user_data);
        Ok(())
    })
}

/// Unsubscribes without freeing: the close `rill_subscription_free` makes
/// (it returns once no handler call of the subscription is in flight,
/// except when called from inside a handler), with the handle left valid,
/// so that a call another thread is making on it meanwhile
/// (`rill_subscription_wait_idle`, its stats) returns (`RILL_ERR_CLOSED`,
/// or the final figures) instead of touching freed memory. Free it with
/// `rill_subscription_free` once no other thread can be using it.
/// Idempotent. NULL is a no-op. In a child of `fork`, on an inherited
/// subscription: does nothing (see `rill_broker`).
///
/// # Safety
///
/// `s` is NULL or a subscription from `rill_subscribe` not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_subscription_close(s: *mut rill_subscription) {
    boundary_value((), || {
        // SAFETY: the caller promises `s` is NULL or live.
        if let Some(s) = unsafe { s.as_ref() }
            && !inherited(s.pid)
        {
            s.sub.close();
        }
    })
}

/// Unsubscribes and frees the subscription. Returns once no handler call of
/// it is in flight, except when called from inside a handler, its own or
/// another subscription's (then at once, so two handlers freeing each other
/// cannot wait for each other; the handler is not called again after a call
/// in flight, and `user_data_free` runs once that call is over). Closes its
/// `rill_subscription_notify_fd` if it made one. NULL is a no-op. In a
/// child of `fork`, on an inherited subscription: leaks it,
/// closing nothing and running no `user_data_free` (see `rill_broker`).
///
/// # Safety
///
/// `s` is NULL or a subscription from `rill_subscribe` not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_subscription_free(s: *mut rill_subscription) {
    boundary_value((), || {
        if !s.is_null() {
            // SAFETY: the caller hands back a pointer from `rill_subscribe`, once.
            let s = unsafe { Box::from_raw(s) };
            if inherited(s.pid) {
                // A copy inherited across fork: leaked, not closed (closing
                // would join its thread, which does not exist here).
                std::mem::forget(s);
                return;
            }
            s.sub.close();
            drop(s);
        }
    })
}
