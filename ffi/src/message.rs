//! `rill_message`: the borrowed view of a delivered or polled message.

use std::ffi::{CStr, c_char, c_void};

use rill::Message;
use rill::log::RecordView;

use crate::error::{FfiError, boundary, boundary_value, rill_status};
use crate::util::{cstr, out_ptr, reference, write_out};

/// A message handed to a handler or returned by `rill_consumer_poll`.
///
/// Everything it points to is borrowed from the broker: valid during the
/// handler call, or until the next poll, seek, rollback or free of the
/// consumer that returned it. Copy what you need to keep. Not thread-safe to
/// share beyond that window.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rill_message {
    /// The topic, NUL-terminated. Unlike the other pointers it outlives the
    /// call: a topic's name keeps one address for as long as the subscription
    /// or consumer that delivered it lives, so it may serve as a cache key.
    pub topic: *const c_char,
    /// Its partition.
    pub partition: u32,
    /// Its offset within the partition.
    pub offset: u64,
    /// Publish time, nanoseconds since the Unix epoch.
    pub timestamp_ns: u64,
    /// The key, or NULL for an unkeyed message (not NUL-terminated).
    pub key: *const u8,
    /// Length of the key.
    pub key_len: usize,
    /// The payload (not NUL-terminated; never NULL, possibly empty).
    pub payload: *const u8,
    /// Length of the payload.
    pub payload_len: usize,
    /// Which delivery this is: 1 the first time, 2 on the first redelivery...
    /// (always 1 for polled messages).
    pub attempt: u32,
    /// Number of attributes (read them with `rill_message_attribute_at`).
    pub attribute_count: usize,
    /// Private to the library: read attributes through the functions below.
    pub internal: *const c_void,
}

/// What `rill_message::internal` points to.
pub(crate) struct MessageContext {
    /// The record, with its lifetime erased: valid for the window documented
    /// on `rill_message`.
    pub(crate) record: RecordView<'static>,
    /// The push message being handled, for `rill_ack_reason` (NULL when polled).
    pub(crate) message: *const Message<'static>,
}

impl MessageContext {
    /// A context for `record`, erasing its lifetime.
    ///
    /// # Safety
    ///
    /// The context (and every `rill_message` pointing at it) must not be used
    /// after the record's borrow ends.
    pub(crate) unsafe fn new(record: RecordView<'_>, message: Option<&Message<'_>>) -> MessageContext {
        // SAFETY: only the lifetime changes; the caller keeps the borrow alive
        // for as long as the context is reachable.
        let record = unsafe { std::mem::transmute::<RecordView<'_>, RecordView<'static>>(record) };
        let message = message.map_or(std::ptr::null(), |m| (m as *const Message<'_>).cast::<Message<'static>>());
        MessageContext { record, message }
    }
}

/// Builds the C view of a record whose context is `ctx`. The record's header
/// is read once for all of its fields ([`RecordView::parts`]).
#[inline]
pub(crate) fn c_message(topic: &CStr, partition: u32, attempt: u32, ctx: &MessageContext) -> rill_message {
    let p = ctx.record.parts();
    let (key, key_len) = p.key.map_or((std::ptr::null(), 0), |k| (k.as_ptr(), k.len()));
    rill_message {
        topic: topic.as_ptr(),
        partition,
        offset: p.offset,
        timestamp_ns: p.timestamp_ns,
        key,
        key_len,
        payload: p.payload.as_ptr(),
        payload_len: p.payload.len(),
        attempt,
        attribute_count: p.attribute_count,
        internal: (ctx as *const MessageContext).cast(),
    }
}

/// # Safety
///
/// `m` is NULL or a message handed out by the library, inside its window.
unsafe fn context<'a>(m: *const rill_message) -> Result<&'a MessageContext, FfiError> {
    // SAFETY: the caller's promise.
    let m = unsafe { reference(m, "message") }?;
    if m.internal.is_null() {
        return Err(FfiError::invalid("this rill_message was not made by the library"));
    }
    // SAFETY: the library sets `internal` to a live MessageContext for the
    // message's validity window, which the caller promises we are in.
    Ok(unsafe { &*m.internal.cast::<MessageContext>() })
}

/// The version of the topic's schema that `m`'s payload was checked
/// against when it was published (`rill_topic_set_schema_json`,
/// `rill_topic_set_validator`); 0 if it was checked by none (the topic had
/// no schema then, or its schema was a validator another process's broker
/// runs), or if `m` is NULL.
///
/// # Safety
///
/// `m` is NULL or a message inside its validity window.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_message_schema_version(m: *const rill_message) -> u64 {
    boundary_value(0, || {
        // SAFETY: forwarded from the caller.
        unsafe { context(m) }
            .ok()
            .and_then(|c| c.record.attribute(rill::broker::SCHEMA_ATTRIBUTE))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    })
}

/// Number of attributes of `m` (0 if `m` is NULL).
///
/// # Safety
///
/// `m` is NULL or a message inside its validity window.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_message_attribute_count(m: *const rill_message) -> usize {
    // SAFETY: forwarded.
    boundary_value(0, || unsafe { context(m) }.map_or(0, |c| c.record.attributes().len()))
}

/// Attribute `i` of `m`: its key and value and their lengths (not
/// NUL-terminated; valid as long as the message). `RILL_ERR_NOT_FOUND` if
/// `i` is out of range. Any of the out-pointers may be NULL.
///
/// # Safety
///
/// `m` is NULL or a message inside its validity window; the out-pointers are
/// NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_message_attribute_at(
    m: *const rill_message,
    i: usize,
    key: *mut *const c_char,
    key_len: *mut usize,
    value: *mut *const c_char,
    value_len: *mut usize,
) -> rill_status {
    boundary(|| {
        // SAFETY: forwarded.
        let ctx = unsafe { context(m) }?;
        let n = ctx.record.attributes().len();
        let (k, v) = ctx.record.attributes().nth(i).ok_or_else(|| {
            FfiError::new(rill_status::RILL_ERR_NOT_FOUND, format!("attribute {i} (the message has {n})"))
        })?;
        // SAFETY: each pointer is NULL (skipped) or writable, as the caller promises.
        unsafe { write_str(key, key_len, k, value, value_len, v) };
        Ok(())
    })
}

/// # Safety
///
/// Each pointer is NULL or writable.
unsafe fn write_str(
    key: *mut *const c_char,
    key_len: *mut usize,
    k: &str,
    value: *mut *const c_char,
    value_len: *mut usize,
    v: &str,
) {
    // SAFETY: the caller promises each is NULL or writable.
    unsafe {
        if !key.is_null() {
            write_out(key, k.as_ptr().cast());
        }
        if !key_len.is_null() {
            write_out(key_len, k.len());
        }
        if !value.is_null() {
            write_out(value, v.as_ptr().cast());
        }
        if !value_len.is_null() {
            write_out(value_len, v.len());
        }
    }
}

/// The value of attribute `key` (the first with that name): pointer and
/// length, not NUL-terminated, valid as long as the message.
/// `RILL_ERR_NOT_FOUND` if the message has no such attribute.
///
/// # Safety
///
/// `m` is NULL or a message inside its validity window; `key` a
/// NUL-terminated string; `value` writable; `value_len` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_message_attribute(
    m: *const rill_message,
    key: *const c_char,
    value: *mut *const c_char,
    value_len: *mut usize,
) -> rill_status {
    boundary(|| {
        out_ptr(value, "value")?;
        // SAFETY: forwarded.
        let (ctx, key) = unsafe { (context(m)?, cstr(key, "attribute key")?) };
        let v = ctx
            .record
            .attribute(key)
            .ok_or_else(|| FfiError::new(rill_status::RILL_ERR_NOT_FOUND, format!("attribute {key:?}")))?;
        // SAFETY: checked / NULL-tolerant, as the caller promises.
        unsafe { write_str(std::ptr::null_mut(), std::ptr::null_mut(), "", value, value_len, v) };
        Ok(())
    })
}

/// Explains a `RILL_ACK_RETRY` or `RILL_ACK_DEAD_LETTER`: call it inside a
/// handler, before returning. The last reason given becomes the
/// `rill.dlq.reason` attribute if the message is dead-lettered. Ignored for
/// polled messages, NULL arguments or text that is not UTF-8 (which is
/// replaced lossily).
///
/// # Safety
///
/// `m` is NULL or the message of the handler call in progress; `reason` NULL
/// or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_ack_reason(m: *const rill_message, reason: *const c_char) {
    boundary_value((), || {
        // SAFETY: forwarded.
        let Ok(ctx) = (unsafe { context(m) }) else { return };
        if ctx.message.is_null() || reason.is_null() {
            return;
        }
        // SAFETY: non-NULL and NUL-terminated, as the caller promises.
        let text = unsafe { CStr::from_ptr(reason) }.to_string_lossy();
        // SAFETY: `message` points to the Message being handled; the caller is
        // inside that handler call, so it is alive.
        unsafe { &*ctx.message }.set_reason(text);
    })
}
