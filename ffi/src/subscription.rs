//! `rill_subscription`: push subscriptions with a C handler.

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use rill::{Ack, Message, Subscription, SubscriptionOptions};

use crate::broker::rill_broker;
use crate::error::{FfiError, boundary, boundary_value, rill_status};
use crate::lag::{Lag, each_lag, rill_partition_lag_callback};
use crate::message::{MessageContext, c_message, rill_message};
use crate::options;
use crate::subscription_options::{rill_destructor, rill_subscription_options, subscription_options};
use crate::subscription_stats::{SUBSCRIPTION_STATS_FIRST_SIZE, rill_subscription_stats};
use crate::util::{cstr, inherited, out_ptr, reference, this_process, timeout, write_out, write_sized};

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

/// A live subscription. Free it with `rill_subscription_free` (which
/// unsubscribes). `rill_subscription_wait_idle` and `_get_stats` may be
/// called from any thread.
pub struct rill_subscription {
    sub: Subscription,
    /// The process that subscribed (see `rill_subscription_free` after fork).
    pid: u32,
    /// Its eventfd, once `rill_subscription_notify_fd` made one, shared with
    /// the idle hook: a close drops the hook, and this keeps it open until
    /// `rill_subscription_free` (see `notify.rs`). Locked because the
    /// subscription's calls may come from several threads.
    notify: std::sync::Mutex<Option<Arc<OwnedFd>>>,
}

impl std::fmt::Debug for rill_subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.sub.fmt(f)
    }
}

/// The user's `user_data`, released with its destructor when dropped.
/// Shared (an `Arc`) by the handler's trampoline and, when set, the lag and
/// dead-letter callbacks' trampolines: the last of them to go drops it.
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
/// `user_data` is passed to every handler call and to the `on_lagged` and
/// `on_dead_letter` callbacks, on broker threads; it must be safe to use
/// from them. If `o->user_data_free` is set it is called
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
/// to take about 250 µs of handler time (20 µs once a subscription of
/// higher priority has used the pool), so a slow handler does not hold a
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
/// ([`Delivered::topic_name`](rill::Delivered::topic_name), reached through
/// `Message`), a pointer comparison, rather than by its bytes.
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
        let notify = s.notify.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        if let Some(fd) = notify {
            // Emptied before `wait_idle` arms the bell and looks (see
            // `rill_consumer_poll`, and "The bell" in the Rust waiters.rs).
            crate::notify::drain(&fd);
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
/// or close it. It stays open after `rill_subscription_close` (a closed
/// subscription still gives it, and `rill_subscription_wait_idle` then
/// returns `RILL_ERR_CLOSED`); `rill_subscription_free` closes it (take it
/// out of your event loop first).
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
        let raw = match &*notify {
            Some(owned) => owned.as_raw_fd(),
            None => {
                let (made, ring) = crate::notify::eventfd("rill_subscription_notify_fd")?;
                s.sub.set_idle_hook(ring);
                notify.insert(made).as_raw_fd()
            }
        };
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(fd, raw) };
        Ok(())
    })
}

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
/// or the final figures) instead of touching freed memory. Its
/// `rill_subscription_notify_fd` stays open, rung by the close if armed.
/// Free it with `rill_subscription_free` once no other thread can be using
/// it.
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
