//! `rill_consumer`: pull consumers.

use std::ffi::{CString, c_char, c_int, c_void};
use std::mem::size_of;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use rill::{Consumer, ConsumerOptions, DEFAULT_SESSION_TIMEOUT};

use crate::broker::rill_broker;
use crate::error::{boundary, boundary_value, rill_status};
use crate::lag::{Lag, each_lag, rill_partition_lag_callback};
use crate::message::{MessageContext, c_message, rill_message};
use crate::options::{self, OptionStruct};
use crate::subscription_options::{RILL_START_EARLIEST, rill_start, start_position};
use crate::util::{cstr, inherited, out_ptr, reference, reference_mut, this_process, timeout, write_out};

/// Where a new consumer group starts. Fill it with `rill_consumer_options_init`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rill_consumer_options {
    /// Set by `rill_consumer_options_init`; do not change (see "Option structs").
    pub struct_size: u32,
    /// For partitions the group has no committed offset for:
    /// `RILL_START_EARLIEST` (the default), `RILL_START_LATEST`,
    /// `RILL_START_OFFSET` or `RILL_START_TIME`.
    pub start: rill_start,
    /// The offset for `RILL_START_OFFSET`; the time in nanoseconds since the
    /// Unix epoch for `RILL_START_TIME`.
    pub start_offset: u64,
    /// A member that has not polled for this many milliseconds (and is not
    /// inside `rill_consumer_poll`) is expelled from its group; the other
    /// members take its partitions from the group's committed offsets, and
    /// its next call rejoins. 0 means the default, 10000.
    pub session_timeout_ms: u32,
    /// After this many `rill_consumer_nack`s of one message the group gives
    /// up on it: it is published to `dead_letter_topic` and skipped. At
    /// least 1; default 5.
    pub max_attempts: u32,
    /// Where given-up messages go (NULL, the default: `$dlq/<group>`);
    /// created if absent. Read during `rill_consumer_new` only.
    pub dead_letter_topic: *const c_char,
}

/// A pull consumer of one topic for one group. Use it from one thread at a
/// time. Free it with `rill_consumer_free`.
pub struct rill_consumer {
    consumer: Consumer,
    topic: CString,
    /// The last poll's messages; their contexts are in `contexts`.
    messages: Vec<rill_message>,
    /// Not modified between a poll and the next clear, so the `internal`
    /// pointers in `messages` stay put.
    contexts: Vec<MessageContext>,
    /// The process that made it (see `rill_consumer_free` after fork).
    pid: u32,
    /// Its eventfd, once `rill_consumer_notify_fd` made one, shared with the
    /// consumer's ready hook (see `notify.rs`): open until both this handle
    /// and the hook are gone; drained before each poll.
    notify: Option<Arc<OwnedFd>>,
}

impl std::fmt::Debug for rill_consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.consumer.fmt(f)
    }
}

// SAFETY: repr(C), leading u32 struct_size, integer fields (`start` is
// checked when read) and a pointer (any value; checked when read).
unsafe impl OptionStruct for rill_consumer_options {
    const INIT: &'static str = "rill_consumer_options_init";
    const FIRST_SIZE: usize = 16;
    fn defaults() -> Self {
        rill_consumer_options {
            struct_size: size_of::<Self>() as u32,
            start: RILL_START_EARLIEST,
            start_offset: 0,
            session_timeout_ms: 0,
            max_attempts: rill::broker::DEFAULT_MAX_ATTEMPTS,
            dead_letter_topic: std::ptr::null(),
        }
    }
}

/// Fills `o` with the defaults; `size` is the caller's
/// `sizeof(rill_consumer_options)`. Call it as
/// `rill_consumer_options_init(o)`, the macro that passes the size. NULL is
/// a no-op.
///
/// # Safety
///
/// `o` is NULL or points to `size` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_consumer_options_init_v1(o: *mut rill_consumer_options, size: usize) {
    // SAFETY: forwarded from the caller.
    boundary_value((), || unsafe { options::init(o, size) })
}

/// A consumer of `topic`, a new member of `group`. The group divides the
/// topic's partitions among its live members (any number; see
/// `rill_consumer_assignment`); a partition resumes from the group's
/// committed offset, or starts as `o` says (NULL: earliest). A group name
/// follows the topic name rules (`/`-separated non-empty segments of UTF-8,
/// at most 255 bytes, no NUL or `*`) and, without a `dead_letter_topic` in
/// `o`, is at most 250 bytes, so that its default dead-letter topic
/// `$dlq/<group>` is a valid topic name; otherwise `RILL_ERR_INVALID_ARGUMENT`
/// with an error text naming the consumer group.
/// Called as `rill_consumer_new`.
///
/// # Safety
///
/// `b` is a live broker; `group` and `topic` NUL-terminated strings; `o` NULL
/// or filled by `rill_consumer_options_init`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_consumer_new_v1(
    b: *mut rill_broker,
    group: *const c_char,
    topic: *const c_char,
    o: *const rill_consumer_options,
    out: *mut *mut rill_consumer,
) -> rill_status {
    boundary(|| {
        out_ptr(out, "out")?;
        // SAFETY: the caller's promises, checked for NULL inside.
        let (b, group, topic) = unsafe { (reference(b, "broker")?, cstr(group, "group")?, cstr(topic, "topic")?) };
        // SAFETY: the caller promises `o` is NULL or valid.
        let o = unsafe { options::read(o) }?.unwrap_or_else(rill_consumer_options::defaults);
        let session_timeout = match o.session_timeout_ms {
            0 => DEFAULT_SESSION_TIMEOUT,
            ms => Duration::from_millis(ms.into()),
        };
        let start = start_position(o.start, o.start_offset)?;
        let dead_letter_topic = if o.dead_letter_topic.is_null() {
            None
        } else {
            // SAFETY: the caller promises a NUL-terminated string.
            Some(unsafe { cstr(o.dead_letter_topic, "dead_letter_topic") }?.to_owned())
        };
        let options = ConsumerOptions { start, session_timeout, max_attempts: o.max_attempts, dead_letter_topic };
        let consumer = b.broker.consumer(group, topic, options)?;
        let topic = CString::new(topic).expect("checked by cstr: no interior NUL");
        let c = rill_consumer {
            consumer,
            topic,
            messages: Vec::new(),
            contexts: Vec::new(),
            pid: this_process(),
            notify: None,
        };
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, Box::into_raw(Box::new(c))) };
        Ok(())
    })
}

/// Reads up to `max` messages, waiting up to `timeout_ms` (negative: no
/// limit) for the first. `*messages` is an array of `*count` messages, valid
/// until the next poll, seek, rollback or free of this consumer. A timeout
/// with nothing to read is `RILL_OK` with `*count == 0`.
///
/// # Safety
///
/// `c` is a live consumer; `messages` and `count` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_consumer_poll(
    c: *mut rill_consumer,
    max: usize,
    timeout_ms: i64,
    messages: *mut *const rill_message,
    count: *mut usize,
) -> rill_status {
    boundary(|| {
        out_ptr(messages, "messages")?;
        out_ptr(count, "count")?;
        // SAFETY: the caller's promise, checked for NULL.
        let c = unsafe { reference_mut(c, "consumer") }?;
        // The previous batch's views end here, as documented.
        c.messages.clear();
        c.contexts.clear();
        if let Some(fd) = &c.notify {
            // Emptied before the poll arms the bell and looks: a ring this
            // read takes answered a change the look below sees; a later one
            // leaves the fd readable ("The bell" in the Rust waiters.rs).
            crate::notify::drain(fd);
        }
        let wait = timeout(timeout_ms).unwrap_or(Duration::from_secs(u64::MAX / 4));
        let polled = c.consumer.poll(max, wait)?;
        let mut partitions = Vec::with_capacity(polled.len());
        c.contexts.reserve(polled.len());
        for m in &polled {
            // SAFETY: the record stays valid while the consumer's cursor holds
            // its segment: until the next poll, seek, rollback or free, which
            // all clear these contexts first.
            c.contexts.push(unsafe { MessageContext::new(m.record(), None) });
            partitions.push(m.partition());
        }
        drop(polled);
        // `contexts` is not touched again until the next clear, so the
        // pointers the messages hold into it stay valid.
        c.messages = c.contexts.iter().zip(partitions).map(|(ctx, p)| c_message(&c.topic, p, 1, ctx)).collect();
        // SAFETY: checked non-NULL; the caller promises they are writable.
        unsafe {
            write_out(messages, c.messages.as_ptr());
            write_out(count, c.messages.len());
        }
        Ok(())
    })
}

/// A file descriptor that becomes readable when `rill_consumer_poll` has
/// something to return, for an event loop (`poll(2)`, `epoll`, Python's
/// `loop.add_reader`) that must not block in `rill_consumer_poll`. An
/// eventfd made at the first call (later calls give the same one), owned
/// by the consumer: do not read, write or close it; `rill_consumer_free`
/// closes it (take it out of your event loop first).
///
/// Use: call `rill_consumer_poll` with `timeout_ms` 0 until it returns no
/// messages; then wait until the fd is readable; repeat. The fd is armed
/// when made, as after a poll that returned none (readable at once if
/// the consumer has something already), so it may be asked for after
/// that poll. Each poll empties
/// the fd before it looks, and a poll that returns no messages (with a
/// non-zero `max`) arms it: the fd becomes readable at the first of a
/// publish to a partition the consumer owns, a change of its assignment,
/// the close of its broker, the deletion of its topic. A poll that returns
/// messages disarms it, so poll again before waiting. A wake may find nothing
/// (poll, and wait again); none is lost: a publish after the poll that
/// emptied the fd is either returned by that poll or makes the fd readable.
///
/// Waiting on the fd is not being inside a poll: poll within the session
/// timeout (a poll with `timeout_ms` 0 will do) to stay a member of the
/// group; such a poll also expels idle members, as any poll does.
/// `RILL_ERR_IO` if no eventfd can be made (the text says why).
///
/// # Safety
///
/// `c` is a live consumer; `fd` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_consumer_notify_fd(c: *mut rill_consumer, fd: *mut c_int) -> rill_status {
    boundary(|| {
        out_ptr(fd, "fd")?;
        // SAFETY: the caller's promise, checked for NULL.
        let c = unsafe { reference_mut(c, "consumer") }?;
        let raw = match &c.notify {
            Some(owned) => owned.as_raw_fd(),
            None => {
                let (made, ring) = crate::notify::eventfd("rill_consumer_notify_fd")?;
                c.consumer.set_ready_hook(ring);
                c.notify.insert(made).as_raw_fd()
            }
        };
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(fd, raw) };
        Ok(())
    })
}

/// Commits the current position of every partition it owns for the group.
/// `RILL_ERR_REASSIGNED` if partitions it polled were given to another
/// member since its last commit (a rebalance, or its session timeout passed
/// without a poll): their positions are not committed, the new owner reads
/// those messages again; its other partitions are committed all the same.
///
/// # Safety
///
/// `c` is a live consumer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_consumer_commit(c: *mut rill_consumer) -> rill_status {
    // SAFETY: the caller's promise, checked for NULL.
    boundary(|| Ok(unsafe { reference_mut(c, "consumer") }?.consumer.commit()?))
}

/// Commits `offset` (not past the end) for one partition;
/// `RILL_ERR_REASSIGNED` if the group gave it to another member.
///
/// # Safety
///
/// `c` is a live consumer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_consumer_commit_offset(
    c: *mut rill_consumer,
    partition: u32,
    offset: u64,
) -> rill_status {
    // SAFETY: the caller's promise, checked for NULL.
    boundary(|| Ok(unsafe { reference_mut(c, "consumer") }?.consumer.commit_offset(partition, offset)?))
}

/// # Safety
///
/// `c` is NULL or a live consumer.
unsafe fn moving(c: *mut rill_consumer, f: impl FnOnce(&mut Consumer) -> rill::Result<()>) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promise, checked for NULL.
        let c = unsafe { reference_mut(c, "consumer") }?;
        // Moving the cursors ends the last poll's views.
        c.messages.clear();
        c.contexts.clear();
        Ok(f(&mut c.consumer)?)
    })
}

/// Reports that handling the message at `offset` of `partition` (one this
/// member polled) failed. The group counts the attempt. Below
/// `max_attempts` the partition goes back to `offset`: the next poll returns
/// that message again, and those after it, in order; `*dead_lettered` (if
/// not NULL) is set to false. At `max_attempts` the message is published to
/// the dead-letter topic with the `rill.dlq.*` attributes a push
/// subscription writes (`rill.dlq.group` naming the group) and skipped: the
/// partition goes back to `offset + 1`, so the next poll returns those after
/// it again, in order; `*dead_lettered` is set to true.
/// `RILL_ERR_NOT_FOUND` for a partition the topic does not have,
/// `RILL_ERR_REASSIGNED` for one it does not own,
/// `RILL_ERR_OUT_OF_RANGE` for an offset it has not polled or retention
/// trimmed; `RILL_ERR_FULL`/`RILL_ERR_TIMEOUT` if the dead-letter topic could
/// not take it (nothing skipped: nack again). Like a seek, it ends the last
/// poll's messages.
///
/// # Safety
///
/// `c` is a live consumer; `dead_lettered` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_consumer_nack(
    c: *mut rill_consumer,
    partition: u32,
    offset: u64,
    dead_lettered: *mut bool,
) -> rill_status {
    let mut given_up = false;
    // SAFETY: forwarded.
    let status = unsafe {
        moving(c, |c| {
            given_up = c.nack(partition, offset)?;
            Ok(())
        })
    };
    if status == rill_status::RILL_OK && !dead_lettered.is_null() {
        // SAFETY: non-NULL; the caller promises it is writable.
        unsafe { write_out(dead_lettered, given_up) };
    }
    status
}

/// Moves one partition to `offset`, which must be retained
/// (`RILL_ERR_OUT_OF_RANGE` otherwise; `RILL_ERR_NOT_FOUND` for a partition
/// that does not exist).
///
/// # Safety
///
/// `c` is a live consumer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_consumer_seek(c: *mut rill_consumer, partition: u32, offset: u64) -> rill_status {
    // SAFETY: forwarded.
    unsafe { moving(c, |c| c.seek(partition, offset)) }
}

/// Moves one partition to the first message published at or after
/// `timestamp_ns` (nanoseconds since the Unix epoch; a negative time is
/// before every message). A time before every retained message moves to the
/// oldest one, a time after all of them to the end: never
/// `RILL_ERR_OUT_OF_RANGE` (`RILL_ERR_NOT_FOUND` for a partition that does
/// not exist). Two binary searches, over segments then records, not a scan.
/// Publishers on several threads stamp messages just before they take their
/// offsets, so neighbouring messages can be stamped out of order; the seek
/// then lands where the stamps cross the time, within that disorder (see
/// `Log::offset_at_time` in the Rust documentation).
///
/// # Safety
///
/// `c` is a live consumer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_consumer_seek_time(
    c: *mut rill_consumer,
    partition: u32,
    timestamp_ns: i64,
) -> rill_status {
    let t = u64::try_from(timestamp_ns).unwrap_or(0);
    // SAFETY: forwarded.
    unsafe { moving(c, |c| c.seek_to_time(partition, t)) }
}

/// Moves every partition to its oldest retained message.
///
/// # Safety
///
/// `c` is a live consumer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_consumer_seek_to_beginning(c: *mut rill_consumer) -> rill_status {
    // SAFETY: forwarded.
    unsafe { moving(c, Consumer::seek_to_beginning) }
}

/// Moves every partition past its newest message.
///
/// # Safety
///
/// `c` is a live consumer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_consumer_seek_to_end(c: *mut rill_consumer) -> rill_status {
    // SAFETY: forwarded.
    unsafe { moving(c, Consumer::seek_to_end) }
}

/// Moves every partition back to its committed offset, so uncommitted
/// messages are polled again.
///
/// # Safety
///
/// `c` is a live consumer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_consumer_rollback(c: *mut rill_consumer) -> rill_status {
    // SAFETY: forwarded.
    unsafe { moving(c, Consumer::rollback) }
}

/// The next offset a poll returns from `partition`.
///
/// # Safety
///
/// `c` is a live consumer; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_consumer_position(c: *const rill_consumer, partition: u32, out: *mut u64) -> rill_status {
    boundary(|| {
        out_ptr(out, "out")?;
        // SAFETY: the caller's promise, checked for NULL.
        let p = unsafe { reference(c, "consumer") }?.consumer.position(partition)?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, p) };
        Ok(())
    })
}

/// The partitions this member of its group owns now, ascending: up to `cap`
/// of them into `partitions`, and how many it owns into `*count` (which may
/// exceed `cap`: call again with a larger array). `partitions` may be NULL
/// when `cap` is 0. It reads the group's state, so it sees a rebalance at
/// once; an expelled member owns none until its next poll rejoins.
///
/// # Safety
///
/// `c` is a live consumer; `partitions` writable for `cap` values; `count`
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_consumer_assignment(
    c: *const rill_consumer,
    partitions: *mut u32,
    cap: usize,
    count: *mut usize,
) -> rill_status {
    boundary(|| {
        out_ptr(count, "count")?;
        if cap > 0 {
            out_ptr(partitions, "partitions")?;
        }
        // SAFETY: the caller's promise, checked for NULL.
        let owned = unsafe { reference(c, "consumer") }?.consumer.assignment();
        for (i, &p) in owned.iter().take(cap).enumerate() {
            // SAFETY: checked non-NULL; i < cap, and the caller promises `cap`
            // writable values.
            unsafe { partitions.add(i).write(p) };
        }
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(count, owned.len()) };
        Ok(())
    })
}

/// The group's committed offset for `partition` (`RILL_ERR_NOT_FOUND` if
/// nothing was committed yet).
///
/// # Safety
///
/// `c` is a live consumer; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_consumer_committed(
    c: *const rill_consumer,
    partition: u32,
    out: *mut u64,
) -> rill_status {
    boundary(|| {
        out_ptr(out, "out")?;
        // SAFETY: the caller's promise, checked for NULL.
        let p = unsafe { reference(c, "consumer") }?.consumer.committed(partition)?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, p) };
        Ok(())
    })
}

/// A consumer group's counters on its topic, as this consumer sees them.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct rill_consumer_stats {
    /// Messages returned by polls of this consumer.
    pub delivered: u64,
    /// Messages retention trimmed before they were polled.
    pub missed: u64,
    /// Messages published but not committed by the group, over all partitions
    /// (from the position where nothing is committed yet).
    pub lag: u64,
    /// Partitions of the topic.
    pub partitions: u32,
}

/// Fills `*out` with the consumer's counters and its group's lag.
///
/// # Safety
///
/// `c` is a live consumer; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_consumer_get_stats(
    c: *const rill_consumer,
    out: *mut rill_consumer_stats,
) -> rill_status {
    boundary(|| {
        out_ptr(out, "out")?;
        // SAFETY: the caller's promise, checked for NULL.
        let s = unsafe { reference(c, "consumer") }?.consumer.stats();
        let stats = rill_consumer_stats {
            delivered: s.delivered,
            missed: s.missed,
            lag: s.lag,
            partitions: s.partitions.len() as u32,
        };
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, stats) };
        Ok(())
    })
}

/// Fills `*out` with a consumer group's committed position on `topic`,
/// whether or not a consumer of it is live: `lag` and `partitions` (the
/// counters of a consumer's own life, `delivered` and `missed`, are 0).
/// `RILL_ERR_NOT_FOUND` if the group never consumed the topic,
/// `RILL_ERR_NO_SUCH_TOPIC` if there is no such topic.
///
/// # Safety
///
/// `b` is a live broker; `group` and `topic` NUL-terminated strings; `out`
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_group_get_stats(
    b: *mut rill_broker,
    group: *const c_char,
    topic: *const c_char,
    out: *mut rill_consumer_stats,
) -> rill_status {
    boundary(|| {
        out_ptr(out, "out")?;
        // SAFETY: the caller's promises, checked for NULL inside.
        let (b, group, topic) = unsafe { (reference(b, "broker")?, cstr(group, "group")?, cstr(topic, "topic")?) };
        let s = b.broker.group_stats(group, topic)?;
        let stats = rill_consumer_stats { delivered: 0, missed: 0, lag: s.lag, partitions: s.partitions.len() as u32 };
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, stats) };
        Ok(())
    })
}

/// Calls `each(user_data, lag)` for every partition of `topic` with the
/// group's committed position and lag there; the struct and its `topic`
/// are borrowed for that call only. Errors as `rill_group_get_stats`.
///
/// # Safety
///
/// `b` is a live broker; `group` and `topic` NUL-terminated strings; `each`
/// a function safe to call with `user_data`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_group_partitions(
    b: *mut rill_broker,
    group: *const c_char,
    topic: *const c_char,
    each: rill_partition_lag_callback,
    user_data: *mut c_void,
) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promises, checked for NULL inside.
        let (b, group, topic) = unsafe { (reference(b, "broker")?, cstr(group, "group")?, cstr(topic, "topic")?) };
        let each = crate::util::callback(each, "each")?;
        let s = b.broker.group_stats(group, topic)?;
        each_lag(s.partitions.iter().map(|p| Lag::of_group(&s.topic, p)), each, user_data);
        Ok(())
    })
}

/// Forgets consumer group `group`'s committed offsets on `topic`:
/// `RILL_ERR_BUSY` while the group has a live consumer of it,
/// `RILL_ERR_NOT_FOUND` if it has no offsets there.
///
/// # Safety
///
/// `b` is a live broker; `group` and `topic` NUL-terminated strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_group_delete(
    b: *mut rill_broker,
    group: *const c_char,
    topic: *const c_char,
) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promises, checked for NULL inside.
        let (b, group, topic) = unsafe { (reference(b, "broker")?, cstr(group, "group")?, cstr(topic, "topic")?) };
        b.broker.delete_group(group, topic)?;
        Ok(())
    })
}

/// What `rill_group_list` calls with each group and topic (borrowed for the call).
pub type rill_group_callback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, group: *const c_char, topic: *const c_char)>;

/// Calls `each(user_data, group, topic)` for every consumer group and topic
/// the broker keeps committed offsets for (live consumer or not), sorted;
/// the strings are borrowed for that call only. A snapshot; the callback
/// may call any rill function. `RILL_ERR_CLOSED` once the broker is closed.
///
/// # Safety
///
/// `b` is a live broker; `each` a function safe to call with `user_data`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_group_list(
    b: *mut rill_broker,
    each: rill_group_callback,
    user_data: *mut c_void,
) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promise, checked for NULL.
        let b = unsafe { reference(b, "broker") }?;
        let each = crate::util::callback(each, "each")?;
        for (group, topic) in b.open()?.groups() {
            let (group, topic) = (crate::text::c_string(&group), crate::text::c_string(&topic));
            // SAFETY: the caller's callback; both strings outlive the call.
            unsafe { each(user_data, group.as_ptr(), topic.as_ptr()) };
        }
        Ok(())
    })
}

/// Number of partitions of the consumer's topic (0 if `c` is NULL).
///
/// # Safety
///
/// `c` is NULL or a live consumer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_consumer_partition_count(c: *const rill_consumer) -> u32 {
    // SAFETY: the caller's promise.
    boundary_value(0, || unsafe { c.as_ref() }.map_or(0, |c| c.consumer.partitions()))
}

/// Closes and frees the consumer, releasing its group for another consumer
/// (uncommitted positions are not kept), and closes its
/// `rill_consumer_notify_fd` if it made one. NULL is a no-op. In a child of
/// `fork`, on an inherited consumer: leaks it, closing nothing (see
/// `rill_broker`).
///
/// # Safety
///
/// `c` is NULL or a consumer from `rill_consumer_new` not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_consumer_free(c: *mut rill_consumer) {
    boundary_value((), || {
        if !c.is_null() {
            // SAFETY: the caller hands back a pointer from `rill_consumer_new`, once.
            let mut c = unsafe { Box::from_raw(c) };
            if inherited(c.pid) {
                // A copy inherited across fork: leaked, not closed (closing
                // would hand its partitions over in the parent's group state,
                // under locks a thread that does not exist here may hold).
                std::mem::forget(c);
                return;
            }
            // Drop the views before the cursors they borrow from.
            c.messages.clear();
            c.contexts.clear();
            c.consumer.close();
            drop(c);
        }
    })
}
