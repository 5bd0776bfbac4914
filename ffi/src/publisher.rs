//! `rill_publisher`: a handle that publishes to one topic without looking
//! it up each time.

use std::ffi::{c_char, c_void};

use rill::{Publisher, Record};

use crate::broker::rill_broker;
use crate::error::{FfiError, boundary, rill_status};
use crate::publish::{
    plain, publish_records, record_slice, rill_position, rill_record, with_record, with_record_general, write_outcome,
    write_outcomes, write_position, write_positions,
};
use crate::util::{bytes, cstr, optional_bytes, out_ptr, reference, write_out};

/// A handle that publishes to one topic without looking it up each time.
/// Thread-safe. Create with `rill_publisher_new`, free with
/// `rill_publisher_free`.
pub struct rill_publisher {
    publisher: Publisher,
}

impl std::fmt::Debug for rill_publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.publisher.fmt(f)
    }
}

/// A publisher for `topic` (which must exist, unless the broker
/// auto-creates topics).
///
/// # Safety
///
/// `b` is a live broker; `topic` a NUL-terminated string; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_publisher_new(
    b: *mut rill_broker,
    topic: *const c_char,
    out: *mut *mut rill_publisher,
) -> rill_status {
    boundary(|| {
        out_ptr(out, "out")?;
        // SAFETY: the caller's promises, checked for NULL inside.
        let (b, topic) = unsafe { (reference(b, "broker")?, cstr(topic, "topic")?) };
        let publisher = b.broker.publisher(topic)?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, Box::into_raw(Box::new(rill_publisher { publisher }))) };
        Ok(())
    })
}

/// Publishes one message (as `rill_publish`).
///
/// # Safety
///
/// `p` is a live publisher; `r` a valid record; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_publisher_publish(
    p: *const rill_publisher,
    r: *const rill_record,
    out: *mut rill_position,
) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promises, checked for NULL inside.
        let (p, r) = unsafe { (reference(p, "publisher")?, reference(r, "record")?) };
        // `with_record` spelled out: its closure, called from two places,
        // stayed a call of its own; this way the common record's publish
        // inlines here.
        let pos = match plain(r) {
            Some(record) => p.publisher.publish_unboxed(&record)?,
            None => with_record_general(r, |rec| Ok(p.publisher.publish_unboxed(rec)?))?,
        };
        write_position(out, pos);
        Ok(())
    })
}

/// Publishes `n` messages (as `rill_publish_batch`).
///
/// # Safety
///
/// `p` is a live publisher; `rs` points to `n` valid records; `out` NULL or
/// writable for `n` positions.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_publisher_publish_batch(
    p: *const rill_publisher,
    rs: *const rill_record,
    n: usize,
    out: *mut rill_position,
) -> rill_status {
    // SAFETY: forwarded.
    unsafe { publish_many(p, rs, n, Publisher::publish_batch, |positions| write_positions(out, positions)) }
}

/// Publishes one message (as `rill_publish_outcome`): `*flags` (if not
/// NULL) gets `RILL_PUBLISHED_DUPLICATE` if the message's id was a
/// duplicate, `RILL_PUBLISHED_DEAD_LETTERED` if the topic's schema sent it
/// to its dead-letter topic (`*out` is then its position there), else 0.
///
/// # Safety
///
/// `p` is a live publisher; `r` a valid record; `out` and `flags` each NULL
/// or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_publisher_publish_outcome(
    p: *const rill_publisher,
    r: *const rill_record,
    out: *mut rill_position,
    flags: *mut u32,
) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promises, checked for NULL inside.
        let (p, r) = unsafe { (reference(p, "publisher")?, reference(r, "record")?) };
        let done = with_record(r, |rec| Ok(p.publisher.publish_outcome(rec)?))?;
        // SAFETY: the caller promises each is NULL or writable.
        unsafe { write_outcome(done, out, flags) };
        Ok(())
    })
}

/// Publishes `n` messages (as `rill_publish_batch_outcome`).
///
/// # Safety
///
/// `p` is a live publisher; `rs` points to `n` valid records; `out` NULL or
/// writable for `n` positions; `flags` NULL or writable for `n` words.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_publisher_publish_batch_outcome(
    p: *const rill_publisher,
    rs: *const rill_record,
    n: usize,
    out: *mut rill_position,
    flags: *mut u32,
) -> rill_status {
    // SAFETY: forwarded.
    unsafe { publish_many(p, rs, n, Publisher::publish_batch_outcome, |done| write_outcomes(out, flags, done)) }
}

/// Publishes one message given as plain arguments, without building a
/// `rill_record`: for bindings where a struct per message is costly.
/// `key` NULL (with `key_len` 0; with a length it is
/// `RILL_ERR_INVALID_ARGUMENT`) means unkeyed; no attributes. `out` may be
/// NULL.
///
/// # Safety
///
/// `p` is a live publisher; `payload` (and `key`, if not NULL) readable for
/// their lengths; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_publisher_publish_bytes(
    p: *const rill_publisher,
    payload: *const c_void,
    payload_len: usize,
    key: *const c_void,
    key_len: usize,
    out: *mut rill_position,
) -> rill_status {
    // SAFETY: forwarded.
    unsafe {
        publish_plain(p, (payload, payload_len), (key, key_len), |p, record| {
            write_position(out, p.publish_unboxed(record)?);
            Ok(())
        })
    }
}

/// `rill_publisher_publish_bytes`, also writing the outcome's flags
/// (`RILL_PUBLISHED_DUPLICATE`, `RILL_PUBLISHED_DEAD_LETTERED`) to `flags`
/// if it is not NULL: a record to a topic whose schema (set since the
/// publisher was made, by any broker of the data directory) sends invalid
/// records to `$dlq/<topic>` says where it went, at the cost of the plain
/// call when the topic has no schema.
///
/// # Safety
///
/// As `rill_publisher_publish_bytes`; `flags` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_publisher_publish_bytes_outcome(
    p: *const rill_publisher,
    payload: *const c_void,
    payload_len: usize,
    key: *const c_void,
    key_len: usize,
    out: *mut rill_position,
    flags: *mut u32,
) -> rill_status {
    let publish = |p: &Publisher, record: &Record<'_>| {
        let done = p.publish_unboxed_outcome(record)?;
        // SAFETY: the caller promises each is NULL or writable.
        unsafe { write_outcome(done, out, flags) };
        Ok(())
    };
    // SAFETY: forwarded.
    unsafe { publish_plain(p, (payload, payload_len), (key, key_len), publish) }
}

/// The body of the two `_bytes` calls: the record of `payload`, keyed by
/// `key` unless it is NULL, without attributes, handed to `publish`.
///
/// # Safety
///
/// `p` is a live publisher; `payload` (and `key`, if not NULL) NULL or
/// readable for their lengths (NULL only with length 0, as `bytes` says).
unsafe fn publish_plain(
    p: *const rill_publisher,
    (payload, payload_len): (*const c_void, usize),
    (key, key_len): (*const c_void, usize),
    publish: impl FnOnce(&Publisher, &Record<'_>) -> Result<(), FfiError>,
) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promises, checked for NULL inside.
        let p = unsafe { reference(p, "publisher") }?;
        // SAFETY: as above.
        let mut record = Record::new(unsafe { bytes(payload, payload_len, || "payload".into()) }?);
        // SAFETY: as above.
        if let Some(key) = unsafe { optional_bytes(key, key_len, || "key".into()) }? {
            record = record.with_key(key);
        }
        publish(&p.publisher, &record)
    })
}

/// Publishes `n` unkeyed messages without attributes, whose payloads lie
/// back to back in `data` with lengths `lengths[0..n]`: one call and no
/// per-message structs, for bindings that batch. `out` is NULL or has room
/// for `n` positions. Checked first: on error nothing is published.
///
/// # Safety
///
/// `p` is a live publisher; `lengths` readable for `n` entries; `data`
/// readable for their sum; `out` NULL or writable for `n` positions.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_publisher_publish_packed(
    p: *const rill_publisher,
    data: *const c_void,
    lengths: *const usize,
    n: usize,
    out: *mut rill_position,
) -> rill_status {
    // SAFETY: forwarded.
    unsafe {
        publish_packed(p, data, lengths, n, |p, records| {
            write_positions(out, &p.publish_batch(records)?);
            Ok(())
        })
    }
}

/// `rill_publisher_publish_packed`, also writing each message's outcome
/// flags to `flags` (room for `n` words) if it is not NULL, as
/// `rill_publisher_publish_batch_outcome` does: with a schema set since the
/// publisher was made, by any broker of the data directory, the records
/// sent to `$dlq/<topic>` say so.
///
/// # Safety
///
/// As `rill_publisher_publish_packed`; `flags` NULL or writable for `n`
/// words.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_publisher_publish_packed_outcome(
    p: *const rill_publisher,
    data: *const c_void,
    lengths: *const usize,
    n: usize,
    out: *mut rill_position,
    flags: *mut u32,
) -> rill_status {
    // SAFETY: forwarded.
    unsafe {
        publish_packed(p, data, lengths, n, |p, records| {
            write_outcomes(out, flags, &p.publish_batch_outcome(records)?);
            Ok(())
        })
    }
}

/// The body of the two `_packed` calls: the `n` unkeyed payloads back to
/// back in `data`, with lengths `lengths[0..n]`, handed to `publish` as
/// records (nothing is done for `n` = 0).
///
/// # Safety
///
/// `p` is a live publisher; `lengths` NULL or readable for `n` entries;
/// `data` NULL or readable for their sum.
unsafe fn publish_packed(
    p: *const rill_publisher,
    data: *const c_void,
    lengths: *const usize,
    n: usize,
    publish: impl FnOnce(&Publisher, &[Record<'_>]) -> Result<(), FfiError>,
) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promise, checked for NULL.
        let p = unsafe { reference(p, "publisher") }?;
        if n == 0 {
            return Ok(());
        }
        // SAFETY: forwarded from the caller.
        let records = unsafe { packed_records(data, lengths, n) }?;
        publish(&p.publisher, &records)
    })
}

/// The records of the `_packed` calls (`n` > 0); see `publish_packed`.
///
/// # Safety
///
/// As `publish_packed`, for `'a`.
unsafe fn packed_records<'a>(
    data: *const c_void,
    lengths: *const usize,
    n: usize,
) -> Result<Vec<Record<'a>>, FfiError> {
    if lengths.is_null() {
        return Err(FfiError::null("lengths"));
    }
    // SAFETY: non-NULL; the caller promises `n` readable lengths.
    let lengths = unsafe { std::slice::from_raw_parts(lengths, n) };
    let total = lengths
        .iter()
        .try_fold(0usize, |acc, &l| acc.checked_add(l))
        .ok_or_else(|| FfiError::invalid("the lengths add up to more than memory holds"))?;
    // SAFETY: the caller promises `data` holds the payloads back to back.
    let data = unsafe { bytes(data, total, || "data".into()) }?;
    let mut records = Vec::with_capacity(n);
    let mut at = 0;
    for &len in lengths {
        records.push(Record::new(&data[at..at + len]));
        at += len;
    }
    Ok(records)
}

/// The body of the publisher's batch calls: checks the arguments and every
/// record, publishes them with `publish` (one of the publisher's batch
/// methods) and, on success only, hands the results to `write`, which fills
/// the call's out-parameters.
///
/// # Safety
///
/// As for `rill_publisher_publish_batch`.
unsafe fn publish_many<T>(
    p: *const rill_publisher,
    rs: *const rill_record,
    n: usize,
    publish: impl FnOnce(&Publisher, &[Record<'_>]) -> Result<Vec<T>, rill::Error>,
    write: impl FnOnce(&[T]),
) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promises, checked for NULL inside.
        let p = unsafe { reference(p, "publisher")? };
        // SAFETY: as above.
        let records = unsafe { record_slice(rs, n) }?;
        write(&publish_records(records, |recs| Ok(publish(&p.publisher, recs)?))?);
        Ok(())
    })
}

/// Frees a publisher. NULL is a no-op.
///
/// # Safety
///
/// `p` is NULL or a publisher from `rill_publisher_new` not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_publisher_free(p: *mut rill_publisher) {
    crate::error::boundary_value((), || {
        if !p.is_null() {
            // SAFETY: the caller hands back a pointer from `rill_publisher_new`, once.
            drop(unsafe { Box::from_raw(p) });
        }
    })
}
