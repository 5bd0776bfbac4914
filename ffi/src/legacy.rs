//! The rill 0.1 ABI, kept for programs built against rill 0.1's `rill.h`.
//!
//! In 0.1 the option structs had no `struct_size`, and programs called
//! `rill_broker_options_init`, `rill_broker_new`, ... directly. Such a program
//! still links to those symbol names, so they must keep reading and writing
//! the 0.1 layouts for as long as the SONAME is `librill.so.0`: writing a
//! newer, longer struct into the 0.1 program's storage would overrun it.
//! The current `rill.h` maps the same names, as macros, onto the `_v1`
//! entry points, which take sized structs (see [`crate::options`]); so a
//! symbol's name says which layout it was given, and no guess about the
//! caller's bytes is ever needed.
//!
//! Each function here converts the 0.1 struct field by field into the
//! current one and calls the `_v1` function. None is declared in `rill.h`
//! (cbindgen.toml excludes them); `ffi/tests/abi/rill_v0_1.h` is the frozen
//! header that declares them, and `ffi/tests/run.sh` runs a program built
//! against it on the current library.

use std::ffi::{c_char, c_void};
use std::mem::size_of;

use crate::broker::{rill_broker, rill_broker_options};
use crate::consumer::{rill_consumer, rill_consumer_options};
use crate::error::{boundary_value, rill_status};
use crate::options::OptionStruct;
use crate::subscription::{rill_batch_handler, rill_handler, rill_subscription};
use crate::subscription_options::{
    rill_delivery, rill_destructor, rill_lag_callback, rill_overflow, rill_start, rill_subscription_options,
};
use crate::topic::{rill_topic_get_stats_v1, rill_topic_options};

/// `rill_broker_options` of rill 0.1.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rill_broker_options_v0_1 {
    worker_threads: u32,
    auto_create_topics: bool,
    publish_timeout_ms: i64,
}

/// `rill_topic_options` of rill 0.1.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rill_topic_options_v0_1 {
    partitions: u32,
    retention_bytes: u64,
    retention_messages: u64,
    max_message_bytes: u64,
}

/// `rill_consumer_options` of rill 0.1.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rill_consumer_options_v0_1 {
    start: rill_start,
    start_offset: u64,
}

/// `rill_subscription_options` of rill 0.1.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rill_subscription_options_v0_1 {
    name: *const c_char,
    filter: *const c_char,
    start: rill_start,
    start_offset: u64,
    delivery: rill_delivery,
    max_attempts: u32,
    backoff_initial_ms: u64,
    backoff_max_ms: u64,
    backoff_multiplier: f64,
    dead_letter_topic: *const c_char,
    overflow: rill_overflow,
    lag_limit: u64,
    dedicated_thread: bool,
    user_data_free: rill_destructor,
    idle_spin_us: u64,
    on_lagged: rill_lag_callback,
}

/// `rill_topic_stats` of rill 0.1 (and of every header before the recovery
/// figures were appended): its first layout, 24 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rill_topic_stats_v0_1 {
    partitions: u32,
    publish_count: u64,
    retained_bytes: u64,
}

/// The stats getter under its unsuffixed name, which programs built against
/// a header older than `rill_topic_get_stats_v1` call: it writes exactly the
/// first layout, never the appended fields their storage has no room for.
///
/// # Safety
///
/// As `rill_topic_get_stats_v1`, with `out` writable for the first layout.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_topic_get_stats(
    b: *mut rill_broker,
    name: *const c_char,
    out: *mut rill_topic_stats_v0_1,
) -> rill_status {
    // SAFETY: forwarded; the first layout's size is what `out` holds.
    unsafe { rill_topic_get_stats_v1(b, name, out.cast(), size_of::<rill_topic_stats_v0_1>()) }
}

/// `rill_subscription_stats` of rill 0.1: its first layout, 72 bytes (the
/// eight counters, `partitions` and `state`; the three borrowed strings and
/// `ack_timeouts` came later).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rill_subscription_stats_v0_1 {
    delivered: u64,
    acked: u64,
    retried: u64,
    dead_lettered: u64,
    filtered: u64,
    dropped: u64,
    missed: u64,
    lag: u64,
    partitions: u32,
    state: crate::subscription_stats::rill_subscription_state,
}

/// The subscription stats getter under its unsuffixed name, which programs
/// built against a header older than `rill_subscription_get_stats_v1` call:
/// it writes exactly the first layout, never the fields appended since
/// (their storage may have no room for them). A program built against one
/// of the development headers between 0.1 and the sized getter gets its
/// counters; the three string fields after them, documented NULL from this
/// call, are left as the program set them.
///
/// # Safety
///
/// As `rill_subscription_get_stats_v1`, with `out` writable for the first
/// layout.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_subscription_get_stats(
    s: *const crate::subscription::rill_subscription,
    out: *mut rill_subscription_stats_v0_1,
) -> rill_status {
    // SAFETY: forwarded; the first layout's size is what `out` holds.
    unsafe {
        crate::subscription::rill_subscription_get_stats_v1(s, out.cast(), size_of::<rill_subscription_stats_v0_1>())
    }
}

/// The conversions both ways between a 0.1 struct and the current one.
trait Legacy: Copy {
    type Current: OptionStruct;
    fn from_current(c: Self::Current) -> Self;
    fn to_current(self) -> Self::Current;
}

impl Legacy for rill_broker_options_v0_1 {
    type Current = rill_broker_options;
    fn from_current(c: rill_broker_options) -> Self {
        let rill_broker_options { struct_size: _, worker_threads, auto_create_topics, publish_timeout_ms, .. } = c;
        Self { worker_threads, auto_create_topics, publish_timeout_ms }
    }
    fn to_current(self) -> rill_broker_options {
        let Self { worker_threads, auto_create_topics, publish_timeout_ms } = self;
        rill_broker_options {
            worker_threads,
            auto_create_topics,
            publish_timeout_ms,
            ..rill_broker_options::defaults()
        }
    }
}

impl Legacy for rill_topic_options_v0_1 {
    type Current = rill_topic_options;
    fn from_current(c: rill_topic_options) -> Self {
        // rill 0.1 had no age limit or priority: a newer field is simply not seen.
        let rill_topic_options {
            struct_size: _,
            partitions,
            retention_bytes,
            retention_messages,
            max_message_bytes,
            retention_ms: _,
            dedupe_window_ms: _,
            cleanup: _,
            delete_retention_ms: _,
            min_compaction_lag_ms: _,
            priority: _,
            segment_bytes: _,
        } = c;
        Self { partitions, retention_bytes, retention_messages, max_message_bytes }
    }
    fn to_current(self) -> rill_topic_options {
        let Self { partitions, retention_bytes, retention_messages, max_message_bytes } = self;
        rill_topic_options {
            struct_size: size_of::<rill_topic_options>() as u32,
            partitions,
            retention_bytes,
            retention_messages,
            max_message_bytes,
            ..rill_topic_options::defaults()
        }
    }
}

impl Legacy for rill_consumer_options_v0_1 {
    type Current = rill_consumer_options;
    fn from_current(c: rill_consumer_options) -> Self {
        // A 0.1 program has no session timeout to set.
        let rill_consumer_options {
            struct_size: _,
            start,
            start_offset,
            session_timeout_ms: _,
            max_attempts: _,
            dead_letter_topic: _,
        } = c;
        Self { start, start_offset }
    }
    fn to_current(self) -> rill_consumer_options {
        let Self { start, start_offset } = self;
        rill_consumer_options {
            struct_size: size_of::<rill_consumer_options>() as u32,
            start,
            start_offset,
            ..rill_consumer_options::defaults()
        }
    }
}

/// Lists the fields of both subscription option layouts once, so a field
/// added to one and not the other does not compile.
macro_rules! subscription_fields {
    ($from:expr, $to:ident { $($field:ident: $value:expr),* $(,)? }) => {{
        let f = $from;
        $to {
            $($field: $value,)*
            name: f.name,
            filter: f.filter,
            start: f.start,
            start_offset: f.start_offset,
            delivery: f.delivery,
            max_attempts: f.max_attempts,
            backoff_initial_ms: f.backoff_initial_ms,
            backoff_max_ms: f.backoff_max_ms,
            backoff_multiplier: f.backoff_multiplier,
            dead_letter_topic: f.dead_letter_topic,
            overflow: f.overflow,
            lag_limit: f.lag_limit,
            dedicated_thread: f.dedicated_thread,
            user_data_free: f.user_data_free,
            idle_spin_us: f.idle_spin_us,
            on_lagged: f.on_lagged,
        }
    }};
}

impl Legacy for rill_subscription_options_v0_1 {
    type Current = rill_subscription_options;
    fn from_current(c: rill_subscription_options) -> Self {
        subscription_fields!(c, rill_subscription_options_v0_1 {})
    }
    fn to_current(self) -> rill_subscription_options {
        subscription_fields!(
            self,
            rill_subscription_options {
                struct_size: size_of::<rill_subscription_options>() as u32,
                on_dead_letter: None,
                shared: false,
                ack_timeout_ms: 0,
                priority: crate::priority::RILL_PRIORITY_UNSET,
            }
        )
    }
}

/// A 0.1 `_init`: the current defaults in the 0.1 layout.
///
/// # Safety
///
/// `o` is NULL or writable for an `L`.
unsafe fn init<L: Legacy>(o: *mut L) {
    boundary_value((), || {
        if !o.is_null() {
            // SAFETY: non-NULL; the caller promises it is writable.
            unsafe { o.write(L::from_current(L::Current::defaults())) };
        }
    })
}

/// The current options for a 0.1 pointer: NULL stays NULL.
///
/// # Safety
///
/// `o` is NULL or points to a valid `L`.
unsafe fn current<L: Legacy>(o: *const L) -> Option<L::Current> {
    // SAFETY: the caller promises NULL or valid.
    unsafe { o.as_ref() }.map(|o| o.to_current())
}

fn as_ptr<T>(o: &Option<T>) -> *const T {
    o.as_ref().map_or(std::ptr::null(), |o| o as *const T)
}

/// The four 0.1 `_init` exports, each writing its 0.1 layout.
macro_rules! legacy_inits {
    ($($name:ident($ty:ty);)*) => {$(
        #[doc = concat!("rill 0.1's `", stringify!($name), "`.")]
        ///
        /// # Safety
        ///
        /// `o` is NULL or writable for the 0.1 struct.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(o: *mut $ty) {
            // SAFETY: forwarded.
            unsafe { init(o) }
        }
    )*};
}

legacy_inits! {
    rill_broker_options_init(rill_broker_options_v0_1);
    rill_topic_options_init(rill_topic_options_v0_1);
    rill_consumer_options_init(rill_consumer_options_v0_1);
    rill_subscription_options_init(rill_subscription_options_v0_1);
}

/// rill 0.1's `rill_broker_new`.
///
/// # Safety
///
/// As `rill_broker_new_v1`, with `o` NULL or a valid 0.1 struct.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_broker_new(
    o: *const rill_broker_options_v0_1,
    out: *mut *mut rill_broker,
) -> rill_status {
    // SAFETY: forwarded; the converted options live across the call.
    unsafe {
        let o = current(o);
        crate::broker::rill_broker_new_v1(as_ptr(&o), out)
    }
}

/// rill 0.1's `rill_topic_create`.
///
/// # Safety
///
/// As `rill_topic_create_v1`, with `o` NULL or a valid 0.1 struct.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_topic_create(
    b: *mut rill_broker,
    name: *const c_char,
    o: *const rill_topic_options_v0_1,
) -> rill_status {
    // SAFETY: forwarded; the converted options live across the call.
    unsafe {
        let o = current(o);
        crate::topic::rill_topic_create_v1(b, name, as_ptr(&o))
    }
}

/// rill 0.1's `rill_consumer_new`.
///
/// # Safety
///
/// As `rill_consumer_new_v1`, with `o` NULL or a valid 0.1 struct.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_consumer_new(
    b: *mut rill_broker,
    group: *const c_char,
    topic: *const c_char,
    o: *const rill_consumer_options_v0_1,
    out: *mut *mut rill_consumer,
) -> rill_status {
    // SAFETY: forwarded; the converted options live across the call.
    unsafe {
        let o = current(o);
        crate::consumer::rill_consumer_new_v1(b, group, topic, as_ptr(&o), out)
    }
}

/// rill 0.1's `rill_subscribe`.
///
/// # Safety
///
/// As `rill_subscribe_v1`, with `o` NULL or a valid 0.1 struct.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_subscribe(
    b: *mut rill_broker,
    pattern: *const c_char,
    o: *const rill_subscription_options_v0_1,
    handler: rill_handler,
    user_data: *mut c_void,
    out: *mut *mut rill_subscription,
) -> rill_status {
    // SAFETY: forwarded; the converted options live across the call.
    unsafe {
        let o = current(o);
        crate::subscription::rill_subscribe_v1(b, pattern, as_ptr(&o), handler, user_data, out)
    }
}

/// rill 0.1's `rill_subscribe_batch`.
///
/// # Safety
///
/// As `rill_subscribe_batch_v1`, with `o` NULL or a valid 0.1 struct.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_subscribe_batch(
    b: *mut rill_broker,
    pattern: *const c_char,
    o: *const rill_subscription_options_v0_1,
    handler: rill_batch_handler,
    user_data: *mut c_void,
    out: *mut *mut rill_subscription,
) -> rill_status {
    // SAFETY: forwarded; the converted options live across the call.
    unsafe {
        let o = current(o);
        crate::subscription::rill_subscribe_batch_v1(b, pattern, as_ptr(&o), handler, user_data, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 0.1 sizes on x86-64 and aarch64 Linux, as the frozen header lays them out.
    #[test]
    fn legacy_layouts_keep_their_sizes() {
        assert_eq!(size_of::<rill_broker_options_v0_1>(), 16);
        assert_eq!(size_of::<rill_topic_options_v0_1>(), 32);
        assert_eq!(size_of::<rill_consumer_options_v0_1>(), 16);
        assert_eq!(size_of::<rill_subscription_options_v0_1>(), 120);
    }

    /// `FIRST_SIZE` of each sized struct is today's size; appending fields
    /// later must leave it where it is.
    #[test]
    fn first_sizes_are_the_current_sizes() {
        // rill_broker_options grew (data_dir, fsync, fsync_interval_ms,
        // repair; issue 39's 8-byte sharing after the tail padding of the
        // 48-byte layout, so a program built with that one passes 48 and
        // its padding is never read as `sharing`); a program built with the
        // 24-byte layout still works.
        assert_eq!(rill_broker_options::FIRST_SIZE, 24);
        assert_eq!(size_of::<rill_broker_options>(), 56);
        // Issue 13 appended retention_ms to rill_topic_options, and
        // on_dead_letter (13), shared and ack_timeout_ms (12) to
        // rill_subscription_options (ack_timeout_ms fills the tail padding
        // after `shared`, so the size stays 144); their first sized
        // layouts stay 32 and 128 bytes.
        // Issue 42 appended priority to both (8 bytes each with padding).
        assert_eq!(rill_topic_options::FIRST_SIZE, 32);
        // Issue 41 appended dedupe_window_ms, then cleanup (4 bytes, then 4
        // of padding), delete_retention_ms and min_compaction_lag_ms; issue 42
        // priority (4 bytes, then 4 of padding); segment_bytes followed.
        assert_eq!(size_of::<rill_topic_options>(), 88);
        assert_eq!(rill_subscription_options::FIRST_SIZE, 128);
        assert_eq!(size_of::<rill_subscription_options>(), 152);
        // Issue 12 appended session_timeout_ms, max_attempts and
        // dead_letter_topic; the first sized layout stays 16 bytes.
        assert_eq!(rill_consumer_options::FIRST_SIZE, 16);
        assert_eq!(size_of::<rill_consumer_options>(), 32);
        // Issue 11 appended the recovery figures to rill_topic_stats (an
        // out-struct, sized by the getter's size argument); its first layout,
        // the one the unsuffixed rill_topic_get_stats writes, stays 24 bytes.
        assert_eq!(crate::topic::TOPIC_STATS_FIRST_SIZE, 24);
        assert_eq!(size_of::<rill_topic_stats_v0_1>(), 24);
        // Issue 40 appended recovered_offsets_reset after the 4 bytes of
        // tail padding that ended issue 11's 48-byte layout: a program built
        // against that header passes 48 and gets the fields it knows.
        assert_eq!(
            size_of::<crate::topic::rill_topic_stats>(),
            56 + 8 * 8,
            "issue 41's four dedupe and four compaction figures"
        );
        // Issue 12 appended ack_timeouts to rill_subscription_stats (an
        // out-struct, sized by the getter's size argument since); its first
        // layout, the one the unsuffixed rill_subscription_get_stats writes,
        // is rill 0.1's 72 bytes.
        assert_eq!(crate::subscription_stats::SUBSCRIPTION_STATS_FIRST_SIZE, 72);
        assert_eq!(size_of::<rill_subscription_stats_v0_1>(), 72);
        // Issue 42 appended the queue-wait figures and the priority.
        assert_eq!(size_of::<crate::subscription_stats::rill_subscription_stats>(), 144);
    }

    /// A program built before the appended consumer options passes the
    /// first layout: the fields it does not have keep their defaults, even
    /// if the bytes after its struct hold something else.
    #[test]
    fn a_first_layout_consumer_options_gets_the_appended_defaults() {
        let mut o = rill_consumer_options::defaults();
        o.struct_size = rill_consumer_options::FIRST_SIZE as u32;
        o.session_timeout_ms = 777;
        o.max_attempts = 9;
        // SAFETY: a valid struct, readable for its declared size.
        let read = unsafe { crate::options::read(&raw const o) }.unwrap().unwrap();
        assert_eq!((read.session_timeout_ms, read.max_attempts), (0, rill::broker::DEFAULT_MAX_ATTEMPTS));
        assert!(read.dead_letter_topic.is_null());
    }
}
