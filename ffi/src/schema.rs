//! Topic schemas from C: a JSON Schema document, or a validator function
//! with a user pointer (issue 42). See `rill::Broker::set_schema`.

use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

use rill::{OnInvalid, Schema};

use crate::broker::rill_broker;
use crate::error::{FfiError, boundary, rill_status};
use crate::subscription_options::rill_destructor;
use crate::util::{cstr, out_ptr, reference, write_out};

/// `on_invalid`: a publish of an invalid payload fails with
/// `RILL_ERR_SCHEMA` (the reason in `rill_last_error`); nothing is appended.
pub const RILL_ON_INVALID_REJECT: u32 = 0;
/// `on_invalid`: the record goes to the dead-letter topic `$dlq/<topic>`
/// with the reason in its `rill.dlq.reason` attribute; the publish returns
/// its position there (`RILL_PUBLISHED_DEAD_LETTERED` in the `_outcome`
/// flags). Setting it on a topic whose name is longer than 250 bytes
/// (whose `$dlq/<topic>` would be too long for a name) is
/// `RILL_ERR_INVALID_ARGUMENT`.
pub const RILL_ON_INVALID_DEAD_LETTER: u32 = 1;
/// Size of the reason buffer a validator is handed, NUL included.
pub const RILL_SCHEMA_REASON_MAX: usize = 512;

/// A validator: returns 0 if `payload` (`len` bytes; a valid pointer even
/// when `len` is 0) is valid, anything else if not. For an invalid one it
/// may write a NUL-terminated reason (UTF-8) of at most `reason_len` bytes,
/// NUL included, to `reason` (which starts as an empty string); a reason
/// that fills the buffer without a NUL is cut at its end. It may be called
/// on any publishing thread, at once on several, until the schema is
/// replaced or removed or the broker is freed; it must not unwind into
/// rill (C++ exceptions, longjmp). It may publish, and change any topic's
/// schema, its own included: such a change, made from inside a validator
/// call, returns without waiting for the replaced validator's calls in
/// flight (see `rill_topic_remove_schema`).
pub type rill_validator_fn = Option<
    unsafe extern "C" fn(
        user: *mut c_void,
        payload: *const u8,
        len: usize,
        reason: *mut c_char,
        reason_len: usize,
    ) -> c_int,
>;

/// The C validator and its user pointer, as a Rust closure's state.
struct CValidator {
    f: unsafe extern "C" fn(*mut c_void, *const u8, usize, *mut c_char, usize) -> c_int,
    user: *mut c_void,
    /// Called with `user` when this is dropped: the schema was let go by
    /// the last publish checking with it, or by the change that replaced
    /// it, whichever was later (see "A change made from inside a
    /// validator" in rill's `schema.rs`), so no call of `f` is in flight.
    free: rill_destructor,
}

impl Drop for CValidator {
    fn drop(&mut self) {
        if let Some(free) = self.free {
            // SAFETY: the caller of rill_topic_set_validator_with_free
            // promised `free` may be called once with `user`, on any
            // thread; this is the one time, and the closure owning this
            // is gone, so the validator is not running.
            unsafe { free(self.user) };
        }
    }
}

// SAFETY: `rill_topic_set_validator`'s contract makes the caller promise
// the function and its user pointer may be used from any thread, at once
// from several; rill only passes the pointer back.
unsafe impl Send for CValidator {}
// SAFETY: as above.
unsafe impl Sync for CValidator {}

impl CValidator {
    fn check(&self, payload: &[u8]) -> Result<(), String> {
        let mut reason = [0u8; RILL_SCHEMA_REASON_MAX];
        // SAFETY: the caller of rill_topic_set_validator promised `f` is a
        // validator as documented; `payload` is valid for its length and
        // `reason` writable for RILL_SCHEMA_REASON_MAX bytes.
        let verdict = unsafe {
            (self.f)(self.user, payload.as_ptr(), payload.len(), reason.as_mut_ptr().cast(), RILL_SCHEMA_REASON_MAX)
        };
        if verdict == 0 {
            return Ok(());
        }
        // Up to the first NUL, or the whole buffer if it has none.
        let end = reason.iter().position(|&c| c == 0).unwrap_or(reason.len());
        let text = String::from_utf8_lossy(&reason[..end]);
        Err(if text.is_empty() { format!("the validator returned {verdict}") } else { text.into_owned() })
    }
}

fn on_invalid(v: u32) -> Result<OnInvalid, FfiError> {
    match v {
        RILL_ON_INVALID_REJECT => Ok(OnInvalid::Reject),
        RILL_ON_INVALID_DEAD_LETTER => Ok(OnInvalid::DeadLetter),
        other => Err(FfiError::invalid(format!(
            "on_invalid is {other}: use RILL_ON_INVALID_REJECT (0) or RILL_ON_INVALID_DEAD_LETTER (1)"
        ))),
    }
}

/// Sets (or replaces) `topic`'s schema to the JSON Schema (draft 2020-12)
/// document `json`: each later publish checks its payload (which must be
/// JSON the schema accepts), and `on_invalid` (`RILL_ON_INVALID_*`) says
/// what an invalid one does. The schema's version (1 for the topic's
/// first, then one more for each change: `rill_topic_schema_version`) is
/// carried by each appended record (`rill_message_schema_version`). On
/// a durable topic the schema is stored and comes back after a restart.
/// A document that is not JSON or does not compile is
/// `RILL_ERR_INVALID_ARGUMENT` with the compiler's message;
/// `RILL_ERR_NO_SUCH_TOPIC` if the topic does not exist.
///
/// # Safety
///
/// `b` is a live broker; `topic` and `json` NUL-terminated strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_topic_set_schema_json(
    b: *mut rill_broker,
    topic: *const c_char,
    json: *const c_char,
    on_invalid_: u32,
) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promises, checked for NULL inside.
        let (b, topic, json) = unsafe { (reference(b, "broker")?, cstr(topic, "topic")?, cstr(json, "json")?) };
        b.broker.set_schema(topic, Schema::Json(json.to_owned()), on_invalid(on_invalid_)?)?;
        Ok(())
    })
}

/// Sets (or replaces) `topic`'s schema to the function `validator` (see
/// `rill_validator_fn`), called with `user` for each later publish's
/// payload; `on_invalid` as for `rill_topic_set_schema_json`. The schema
/// takes the topic's next version. rill frees nothing of the caller's:
/// `user` must stay valid until the schema is replaced or removed, or the
/// broker is freed. The call that replaces or removes it returns only once
/// no publish is still calling it (it waits for validator calls in flight),
/// so `user` may be freed right after, except when that call is made from
/// inside a validator: then it does not wait (see
/// `rill_topic_remove_schema`), and a validator that may be replaced that
/// way is set with `rill_topic_set_validator_with_free`, which says when
/// `user` may go. A validator lives with this broker only: a durable topic
/// has no schema after a restart, and, with `RILL_SHARING_PROCESSES`, the
/// other processes check nothing (the JSON schema it replaces is gone for
/// them too) but read its version from `rill_topic_schema_version`.
///
/// # Safety
///
/// `b` is a live broker; `topic` a NUL-terminated string; `validator` one
/// as documented, which with `user` may be called from any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_topic_set_validator(
    b: *mut rill_broker,
    topic: *const c_char,
    validator: rill_validator_fn,
    user: *mut c_void,
    on_invalid_: u32,
) -> rill_status {
    // SAFETY: the caller's promises, passed on; no `user_free`.
    unsafe { set_validator(b, topic, validator, user, None, on_invalid_) }
}

/// `rill_topic_set_validator`, with `user_free` (may be NULL) called once
/// with `user` when rill lets go of the validator: once the schema has been
/// replaced or removed (or the broker freed) and no call of `validator` is
/// in flight, on whichever thread let go last (the call that replaced or
/// removed it, the broker's free, or the publish whose validator call
/// ended last). It is also called if this call fails. A schema replaced or
/// removed from inside a validator call is not waited for, so this is how
/// its `user` is freed safely then. `user_free` must not call rill.
///
/// # Safety
///
/// As for `rill_topic_set_validator`; `user_free` NULL or a function that
/// may be called once with `user`, from any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_topic_set_validator_with_free(
    b: *mut rill_broker,
    topic: *const c_char,
    validator: rill_validator_fn,
    user: *mut c_void,
    user_free: rill_destructor,
    on_invalid_: u32,
) -> rill_status {
    // SAFETY: the caller's promises, passed on.
    unsafe { set_validator(b, topic, validator, user, user_free, on_invalid_) }
}

/// The two `rill_topic_set_validator` calls.
///
/// # Safety
///
/// As for `rill_topic_set_validator_with_free`.
unsafe fn set_validator(
    b: *mut rill_broker,
    topic: *const c_char,
    validator: rill_validator_fn,
    user: *mut c_void,
    user_free: rill_destructor,
    on_invalid_: u32,
) -> rill_status {
    // Owns `user` from here on: if anything below fails, dropping the
    // closure (or this, when `validator` is NULL) calls `user_free`.
    let owner = UserFree { user, free: user_free };
    boundary(move || {
        // SAFETY: the caller's promises, checked for NULL inside.
        let (b, topic) = unsafe { (reference(b, "broker")?, cstr(topic, "topic")?) };
        let f = validator.ok_or_else(|| FfiError::null("validator"))?;
        let v = CValidator { f, user, free: owner.take() };
        b.broker.set_schema(topic, Schema::Validator(Arc::new(move |p| v.check(p))), on_invalid(on_invalid_)?)?;
        Ok(())
    })
}

/// `user` and its `user_free` before a `CValidator` owns them: calls it if
/// dropped untaken, so a failure before the validator exists frees `user`.
struct UserFree {
    user: *mut c_void,
    free: rill_destructor,
}

impl UserFree {
    /// Hands `free` over to the validator that now owns `user`.
    fn take(mut self) -> rill_destructor {
        self.free.take()
    }
}

impl Drop for UserFree {
    fn drop(&mut self) {
        if let Some(free) = self.free {
            // SAFETY: the caller promised `free` may be called once with
            // `user`; it was not handed to a validator, so this is the once.
            unsafe { free(self.user) };
        }
    }
}

/// Removes `topic`'s schema (from the disk too, for a durable topic):
/// later publishes are not checked. Nothing happens if it has none.
/// Returns once no validator call of the removed schema is in flight, so
/// its `user` may be freed, except when called from inside a validator
/// call (any topic's, on this thread): then it returns at once, without
/// waiting for the removed validator's calls in flight, since one of them
/// may be its own caller a few frames up, or a validator on another
/// thread removing this thread's schema in turn. No new call of the
/// removed validator starts; the calls in flight finish, and the last to
/// end runs its `user_free` (`rill_topic_set_validator_with_free`).
/// `rill_topic_set_validator` and `rill_topic_set_schema_json` replacing a
/// validator behave the same.
///
/// # Safety
///
/// `b` is a live broker; `topic` a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_topic_remove_schema(b: *mut rill_broker, topic: *const c_char) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promises, checked for NULL inside.
        let (b, topic) = unsafe { (reference(b, "broker")?, cstr(topic, "topic")?) };
        b.broker.remove_schema(topic)?;
        Ok(())
    })
}

/// The version of `topic`'s schema in force into `*out`: 0 if it has none.
/// With `RILL_SHARING_PROCESSES` it is the data directory's: once this
/// broker has seen another process's change, that change's version, a
/// validator's included, though only the broker it was set through calls
/// a validator (this one then checks nothing, and its records carry
/// version 0). A validator's version stays until the next change, even
/// after its broker is freed; a directory opened again by a first
/// process, after every broker let go of it, has none.
///
/// # Safety
///
/// `b` is a live broker; `topic` a NUL-terminated string; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_topic_schema_version(
    b: *mut rill_broker,
    topic: *const c_char,
    out: *mut u64,
) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promises, checked for NULL inside.
        let (b, topic) = unsafe { (reference(b, "broker")?, cstr(topic, "topic")?) };
        out_ptr(out, "out")?;
        let v = b.broker.schema_version(topic)?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, v) };
        Ok(())
    })
}
