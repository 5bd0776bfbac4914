//! Publishing: what a publish takes and gives back (`rill_record` with its
//! `rill_attribute`s, `rill_position`, the message id attribute and the
//! `RILL_PUBLISHED_*` outcome flags), their conversion to and from the Rust
//! API, which `rill_publisher` (publisher.rs) shares, and the calls that
//! publish through the broker by topic name (`rill_publish` and its kin,
//! named for the verb).

use std::ffi::{c_char, c_void};
use std::mem::MaybeUninit;

use rill::{Broker, Position, Published, Record};

use crate::broker::rill_broker;
use crate::error::{FfiError, boundary, rill_status};
use crate::util::{bytes, cstr, optional_bytes, reference, write_out};

/// The attribute holding a message's id (see
/// `rill_topic_options.dedupe_window_ms`): 1 to `RILL_ID_MAX_LEN` bytes,
/// else `RILL_ERR_INVALID_ARGUMENT`; at most one per message.
pub const RILL_ATTR_ID: &str = "rill.id";
const _: () = assert!(const_str_eq(RILL_ATTR_ID, rill::log::ID_ATTRIBUTE));

/// The attribute holding the version of the schema a message was checked
/// against (see `rill_message_schema_version`): set by the broker on each
/// message appended to a topic with a schema; a publisher's own is dropped.
pub const RILL_ATTR_SCHEMA: &str = "rill.schema";
const _: () = assert!(const_str_eq(RILL_ATTR_SCHEMA, rill::broker::SCHEMA_ATTRIBUTE));

/// The longest message id (`RILL_ATTR_ID`), in bytes.
pub const RILL_ID_MAX_LEN: u32 = 128;
const _: () = assert!(RILL_ID_MAX_LEN as usize == rill::log::MAX_ID_LEN);

/// True if `a` and `b` are the same string (in a const context, where `==` is not).
const fn const_str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Set in the flags of an `_outcome` publish: the message's id was
/// published to the topic within its dedupe window, so nothing was
/// appended, and the position given is the first message's.
pub const RILL_PUBLISHED_DUPLICATE: u32 = 1;
/// Set in the flags of an `_outcome` publish: the payload did not fit the
/// topic's schema, whose `on_invalid` is `RILL_ON_INVALID_DEAD_LETTER`, so
/// the message went to `$dlq/<topic>` and the position given is there.
pub const RILL_PUBLISHED_DEAD_LETTERED: u32 = 2;

/// One attribute of a message to publish: NUL-terminated UTF-8 strings.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rill_attribute {
    /// The attribute's name.
    pub key: *const c_char,
    /// Its value.
    pub value: *const c_char,
}

/// A message to publish. The library copies everything it points to before
/// the publishing call returns.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rill_record {
    /// The key, or NULL for an unkeyed message (keyed messages always go to
    /// the same partition; unkeyed ones are spread round-robin).
    pub key: *const c_void,
    /// Length of the key (a non-NULL key of length 0 is an empty key; a
    /// NULL key with a length is `RILL_ERR_INVALID_ARGUMENT`).
    pub key_len: usize,
    /// The payload (may be NULL when `payload_len` is 0).
    pub payload: *const c_void,
    /// Length of the payload.
    pub payload_len: usize,
    /// The attributes (may be NULL when `attribute_count` is 0).
    pub attributes: *const rill_attribute,
    /// Number of attributes.
    pub attribute_count: usize,
}

/// Where a published message landed.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct rill_position {
    /// Partition index.
    pub partition: u32,
    /// Offset within the partition.
    pub offset: u64,
}

impl From<Position> for rill_position {
    fn from(p: Position) -> Self {
        rill_position { partition: p.partition, offset: p.offset }
    }
}

/// The attributes of one record, borrowed from C.
pub(crate) fn attributes<'a>(r: &rill_record) -> Result<Vec<(&'a str, &'a str)>, FfiError> {
    let mut out = Vec::new();
    push_attributes(r, &mut out)?;
    Ok(out)
}

/// Appends the attributes of one record, borrowed from C, to `out`; an
/// error names the attribute by its index in the record.
fn push_attributes<'a>(r: &rill_record, out: &mut Vec<(&'a str, &'a str)>) -> Result<(), FfiError> {
    if r.attribute_count == 0 {
        return Ok(());
    }
    if r.attributes.is_null() {
        return Err(FfiError::null("record attributes (with a non-zero attribute_count)"));
    }
    // SAFETY: non-NULL; the caller promises `attribute_count` readable entries.
    let attrs = unsafe { std::slice::from_raw_parts(r.attributes, r.attribute_count) };
    out.reserve(attrs.len());
    for (i, a) in attrs.iter().enumerate() {
        let at = |mut e: FfiError| {
            e.text = format!("{} (attribute {i})", e.text);
            e
        };
        // SAFETY: the caller promises NUL-terminated strings (NULL is checked).
        let k = unsafe { cstr(a.key, "attribute key") }.map_err(at)?;
        // SAFETY: as above.
        let v = unsafe { cstr(a.value, "attribute value") }.map_err(at)?;
        out.push((k, v));
    }
    Ok(())
}

/// The `Record` view of a C record whose attributes are `attrs`; `index`
/// (its place in a batch) names it in errors.
fn to_record<'a>(
    r: &rill_record,
    attrs: &'a [(&'a str, &'a str)],
    index: Option<usize>,
) -> Result<Record<'a>, FfiError> {
    let name = |part: &str| match index {
        Some(i) => format!("record {i} {part}"),
        None => format!("record {part}"),
    };
    // SAFETY: the caller of the exported function promises the ranges are readable.
    let payload = unsafe { bytes(r.payload, r.payload_len, || name("payload")) }?;
    let mut record = Record::new(payload).with_attributes(attrs);
    // SAFETY: as above.
    if let Some(key) = unsafe { optional_bytes(r.key, r.key_len, || name("key")) }? {
        record = record.with_key(key);
    }
    Ok(record)
}

/// Runs `f` with the `Record` view of a C record.
#[inline(always)]
pub(crate) fn with_record<T>(
    r: &rill_record,
    f: impl FnOnce(&Record<'_>) -> Result<T, FfiError>,
) -> Result<T, FfiError> {
    // The common record (no attributes, valid ranges) without building an
    // attribute list or any error text; every other record, and every error,
    // goes the general way, which checks the same things and says what is wrong.
    if let Some(record) = plain(r) {
        return f(&record);
    }
    with_record_general(r, f)
}

/// [`with_record`] for any record: attributes, or a range to refuse.
#[inline(never)]
pub(crate) fn with_record_general<T>(
    r: &rill_record,
    f: impl FnOnce(&Record<'_>) -> Result<T, FfiError>,
) -> Result<T, FfiError> {
    let attrs = attributes(r)?;
    f(&to_record(r, &attrs, None)?)
}

/// The `Record` of a C record without attributes, or `None` if its key or
/// payload is not a valid range (NULL with a non-zero length, or a length no
/// slice can have): the checks of [`to_record`], without its messages.
#[inline(always)]
fn plain_record<'a>(r: &rill_record) -> Option<Record<'a>> {
    /// `bytes` without its error.
    #[inline(always)]
    fn range<'a>(p: *const c_void, len: usize) -> Option<&'a [u8]> {
        if len > isize::MAX as usize {
            return None;
        }
        if p.is_null() {
            return (len == 0).then_some(&[]);
        }
        // SAFETY: non-NULL, the length fits a slice, and the caller of the
        // exported function promises the range is readable until it returns.
        Some(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
    }
    let mut record = Record::new(range(r.payload, r.payload_len)?);
    if !r.key.is_null() {
        record.key = Some(range(r.key, r.key_len)?);
    } else if r.key_len != 0 {
        // The general way says what is wrong.
        return None;
    }
    Some(record)
}

/// The body of the one-message publish calls: checks the arguments, makes
/// the record's `Record` view, publishes it with `publish` (one of the
/// broker's publish methods) and, on success only, hands the result to
/// `write`, which fills the call's out-parameters.
///
/// # Safety
///
/// As for `rill_publish`.
unsafe fn publish_one<T>(
    b: *mut rill_broker,
    topic: *const c_char,
    r: *const rill_record,
    publish: impl FnOnce(&Broker, &str, &Record<'_>) -> Result<T, rill::Error>,
    write: impl FnOnce(T),
) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promises, checked for NULL inside.
        let (b, topic, r) = unsafe { (reference(b, "broker")?, cstr(topic, "topic")?, reference(r, "record")?) };
        write(with_record(r, |rec| Ok(publish(&b.broker, topic, rec)?))?);
        Ok(())
    })
}

/// The body of the batch publish calls, as [`publish_one`] for `n` records:
/// every record is checked before `publish` sees any.
///
/// # Safety
///
/// As for `rill_publish_batch`.
unsafe fn publish_many<T>(
    b: *mut rill_broker,
    topic: *const c_char,
    rs: *const rill_record,
    n: usize,
    publish: impl FnOnce(&Broker, &str, &[Record<'_>]) -> Result<Vec<T>, rill::Error>,
    write: impl FnOnce(&[T]),
) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promises, checked for NULL inside.
        let (b, topic) = unsafe { (reference(b, "broker")?, cstr(topic, "topic")?) };
        // SAFETY: as above.
        let records = unsafe { record_slice(rs, n) }?;
        write(&publish_records(records, |recs| Ok(publish(&b.broker, topic, recs)?))?);
        Ok(())
    })
}

/// Publishes one message to `topic`; `*out` (if not NULL) gets its position.
/// If a `Block` subscriber is at its lag limit, waits up to the broker's
/// `publish_timeout_ms` (then `RILL_ERR_TIMEOUT`). Called from a `Block`
/// subscriber's own handler while that subscriber is the one at its limit,
/// it would wait for its own handler: it fails at once with `RILL_ERR_FULL`
/// (the error text says why) instead; waits for other subscribers are as
/// usual. The same holds for every publish call that waits. On error nothing is
/// published. Each call checks and looks up the name; in a hot loop a
/// `rill_publisher` (see `rill_publisher_new`) skips that.
///
/// # Safety
///
/// `b` is a live broker; `topic` a NUL-terminated string; `r` a valid record
/// whose pointers are readable for their lengths; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_publish(
    b: *mut rill_broker,
    topic: *const c_char,
    r: *const rill_record,
    out: *mut rill_position,
) -> rill_status {
    // SAFETY: forwarded; the caller promises `out` is NULL or writable.
    unsafe { publish_one(b, topic, r, Broker::publish, |pos| write_position(out, pos)) }
}

/// Like `rill_publish`, but fails at once with `RILL_ERR_FULL` instead of
/// waiting for a `Block` subscriber.
///
/// # Safety
///
/// As for `rill_publish`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_try_publish(
    b: *mut rill_broker,
    topic: *const c_char,
    r: *const rill_record,
    out: *mut rill_position,
) -> rill_status {
    // SAFETY: forwarded; the caller promises `out` is NULL or writable.
    unsafe { publish_one(b, topic, r, Broker::try_publish, |pos| write_position(out, pos)) }
}

/// Publishes `n` messages in order (cheaper per message than `rill_publish`).
/// `out` is NULL or has room for `n` positions, written in input order. Every
/// record is checked before any is published: on error none is.
///
/// # Safety
///
/// `b` is a live broker; `topic` a NUL-terminated string; `rs` points to `n`
/// valid records (may be NULL if `n` is 0); `out` NULL or writable for `n`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_publish_batch(
    b: *mut rill_broker,
    topic: *const c_char,
    rs: *const rill_record,
    n: usize,
    out: *mut rill_position,
) -> rill_status {
    // SAFETY: forwarded.
    unsafe { publish_many(b, topic, rs, n, Broker::publish_batch, |positions| write_positions(out, positions)) }
}

/// Publishes one message to `topic`, as `rill_publish`, and says what the
/// publish did: `*flags` (if not NULL) gets `RILL_PUBLISHED_DUPLICATE` when
/// the message carried an id (`RILL_ATTR_ID`) that the topic had appended
/// within its dedupe window, so nothing was appended and `*out` (if not
/// NULL) is the first message's position; `RILL_PUBLISHED_DEAD_LETTERED`
/// when the payload did not fit the topic's schema and went to
/// `$dlq/<topic>` (`*out` is its position there); else 0. Other flags may
/// be added later: test the bit. Publishers racing with one id append it once (the
/// others wait for that append and get its position). Both outputs are
/// written only on `RILL_OK`.
///
/// # Safety
///
/// As for `rill_publish`; `flags` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_publish_outcome(
    b: *mut rill_broker,
    topic: *const c_char,
    r: *const rill_record,
    out: *mut rill_position,
    flags: *mut u32,
) -> rill_status {
    // SAFETY: forwarded; the caller promises `out` and `flags` are each
    // NULL or writable.
    unsafe { publish_one(b, topic, r, Broker::publish_outcome, |done| write_outcome(done, out, flags)) }
}

/// Like `rill_publish_outcome`, but fails at once with `RILL_ERR_FULL`
/// instead of waiting for a `Block` subscriber (as `rill_try_publish`). A
/// publisher of the same id appending at that moment is still waited for:
/// its append decides whether this one is a duplicate.
///
/// # Safety
///
/// As for `rill_publish_outcome`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_try_publish_outcome(
    b: *mut rill_broker,
    topic: *const c_char,
    r: *const rill_record,
    out: *mut rill_position,
    flags: *mut u32,
) -> rill_status {
    // SAFETY: forwarded; the caller promises `out` and `flags` are each
    // NULL or writable.
    unsafe { publish_one(b, topic, r, Broker::try_publish_outcome, |done| write_outcome(done, out, flags)) }
}

/// Publishes `n` messages in order, as `rill_publish_batch`, and says what
/// each publish did: `flags` is NULL or has room for `n` words, written in
/// input order as `rill_publish_outcome` writes one (a message whose id
/// came earlier in the same batch is a duplicate too). Every record is
/// checked before any is published: on error none is.
///
/// # Safety
///
/// As for `rill_publish_batch`; `flags` NULL or writable for `n` words.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_publish_batch_outcome(
    b: *mut rill_broker,
    topic: *const c_char,
    rs: *const rill_record,
    n: usize,
    out: *mut rill_position,
    flags: *mut u32,
) -> rill_status {
    // SAFETY: forwarded.
    unsafe { publish_many(b, topic, rs, n, Broker::publish_batch_outcome, |done| write_outcomes(out, flags, done)) }
}

/// The flags word of a publish outcome.
fn outcome_flags(p: &Published) -> u32 {
    let duplicate = if p.duplicate { RILL_PUBLISHED_DUPLICATE } else { 0 };
    duplicate | if p.dead_lettered { RILL_PUBLISHED_DEAD_LETTERED } else { 0 }
}

/// Writes one outcome into the outputs that are not NULL.
///
/// # Safety
///
/// `out` and `flags` are each NULL or writable.
pub(crate) unsafe fn write_outcome(p: Published, out: *mut rill_position, flags: *mut u32) {
    if !out.is_null() {
        // SAFETY: non-NULL; the caller promises it is writable.
        unsafe { write_out(out, p.position.into()) };
    }
    if !flags.is_null() {
        // SAFETY: as above.
        unsafe { write_out(flags, outcome_flags(&p)) };
    }
}

/// Writes a batch's outcomes into the arrays that are not NULL (straight
/// from `done`: no positions `Vec` in between, which cost an allocation a
/// batch even when `out` is NULL; the Python binding's `publish_batch`
/// comes this way).
pub(crate) fn write_outcomes(out: *mut rill_position, flags: *mut u32, done: &[Published]) {
    if !out.is_null() {
        for (i, p) in done.iter().enumerate() {
            // SAFETY: the caller promises `out` has room for one position per record.
            unsafe { out.add(i).write(p.position.into()) };
        }
    }
    if !flags.is_null() {
        for (i, p) in done.iter().enumerate() {
            // SAFETY: the caller promises `flags` has room for one word per record.
            unsafe { flags.add(i).write(outcome_flags(p)) };
        }
    }
}

/// # Safety
///
/// `rs` is NULL (with `n == 0`) or points to `n` readable records.
pub(crate) unsafe fn record_slice<'a>(rs: *const rill_record, n: usize) -> Result<&'a [rill_record], FfiError> {
    if n == 0 {
        return Ok(&[]);
    }
    if rs.is_null() {
        return Err(FfiError::null("records"));
    }
    // SAFETY: non-NULL; the caller promises `n` readable records.
    Ok(unsafe { std::slice::from_raw_parts(rs, n) })
}

/// Batches up to this many records are converted on the stack: 64 `Record`s
/// are 4 KiB, little beside a C thread's stack (128 KiB by default on musl,
/// 8 MiB on glibc). A larger batch converts into one `Vec`: one allocation
/// for more than 64 messages, beside the result `Vec`s the broker allocates
/// for every batch anyway, so a thread-local buffer would not make the path
/// allocation-free.
const STACK_BATCH: usize = 64;

/// Converts C records and publishes them with `publish`.
///
/// Records without attributes whose ranges are valid (the common batch) are
/// turned into `Record`s directly: on the stack for up to [`STACK_BATCH`]
/// records, else into one `Vec`. A batch of up to [`STACK_BATCH`] records
/// some of which carry attributes is converted on the stack too
/// ([`publish_records_attributed`]). Any other batch (more records with
/// attributes, or anything to refuse) takes the general path, which checks
/// the same things and names the record and the part that is wrong.
///
/// The stack buffer is left uninitialised and only the batch's own slots
/// are written: filling all 64 with `Record::default()` first wrote 4 KiB
/// a call whatever the batch's size, work the Rust API's caller never does
/// (`bash ffi/bench/run.sh`, modes `batch64` and `batch64/nosub`, measures
/// this path against the Rust API's `publish_batch`; callgrind on
/// `bench_ffi` counts its instructions, see "Counting instructions" in
/// docs/PERFORMANCE.md).
#[inline]
pub(crate) fn publish_records<T>(
    records: &[rill_record],
    publish: impl FnOnce(&[Record<'_>]) -> Result<Vec<T>, FfiError>,
) -> Result<Vec<T>, FfiError> {
    if records.len() <= STACK_BATCH {
        let mut buf = [const { MaybeUninit::<Record<'_>>::uninit() }; STACK_BATCH];
        let mut n = 0;
        for r in records {
            match plain(r) {
                Some(record) => buf[n].write(record),
                None => break,
            };
            n += 1;
        }
        if n == records.len() {
            // SAFETY: the loop wrote the first `n` slots;
            // `MaybeUninit<Record>` has `Record`'s layout.
            let recs = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<Record<'_>>(), n) };
            return publish(recs);
        }
        return publish_records_attributed(records, publish);
    } else if let Some(recs) = records.iter().map(plain).collect::<Option<Vec<_>>>() {
        return publish(&recs);
    }
    publish_records_general(records, publish)
}

/// Attribute pairs [`publish_records_attributed`] converts on the stack:
/// two a record for a full [`STACK_BATCH`] (4 KiB, as much as the batch's
/// `Record`s). A batch needing more, its records' arrays counted once each
/// run of records sharing one, goes the general way.
const STACK_PAIRS: usize = 2 * STACK_BATCH;

/// [`publish_records`] for a batch of up to [`STACK_BATCH`] records, some
/// with attributes: converted on the stack in one pass that builds no error
/// ([`convert_attributed`]), or, for a batch with anything to refuse or
/// more attributes than [`STACK_PAIRS`], the general way, which checks the
/// same things and says what is wrong.
#[inline(never)]
fn publish_records_attributed<T>(
    records: &[rill_record],
    publish: impl FnOnce(&[Record<'_>]) -> Result<Vec<T>, FfiError>,
) -> Result<Vec<T>, FfiError> {
    let mut buf = [const { MaybeUninit::<Record<'_>>::uninit() }; STACK_BATCH];
    let mut pairs = [const { MaybeUninit::<(&str, &str)>::uninit() }; STACK_PAIRS];
    match convert_attributed(records, &mut buf, &mut pairs) {
        Some(recs) => publish(recs),
        None => publish_records_general(records, publish),
    }
}

/// The `Record`s of up to [`STACK_BATCH`] C records, written into `buf`,
/// their attributes into `pairs`, in one pass over the batch; `None` if
/// any record has something to refuse (a NULL array or string, a string
/// that is not UTF-8, a range as [`plain_record`] refuses it) or the
/// attributes need more than `pairs`.
///
/// The same checks as the general path's, made cheaper for the strings a
/// C caller hands over (`batch_cost own`, an example of rill-ffi, counts
/// them under callgrind against the Rust batch, whose `&str`s need none):
/// each string is measured by the C library's `strlen`, which reads it a
/// word or a vector at a time where a byte loop took several instructions
/// a byte, and then checked for ASCII from its known length in a few
/// overlapping loads ([`ascii`]), the full UTF-8 check only for a string
/// that is not. No attribute list is allocated and the batch is walked
/// once, not once for the attributes and again for the records. A record
/// pointing to the array of the record before it shares that record's
/// converted run, as on the general path (see there why that holds).
#[inline(always)]
fn convert_attributed<'b>(
    records: &[rill_record],
    buf: &'b mut [MaybeUninit<Record<'b>>; STACK_BATCH],
    pairs: &'b mut [MaybeUninit<(&'b str, &'b str)>; STACK_PAIRS],
) -> Option<&'b [Record<'b>]> {
    if records.len() > STACK_BATCH {
        return None;
    }
    // Written through this pointer only, one pair at a time, each once;
    // the runs handed out are shared views of pairs already written, which
    // no later write touches (each write is past every run so far).
    let base = pairs.as_mut_ptr().cast::<(&'b str, &'b str)>();
    let mut used = 0;
    let mut run: &'b [(&'b str, &'b str)] = &[];
    for (i, r) in records.iter().enumerate() {
        let count = r.attribute_count;
        if count == 0 {
            run = &[];
        } else if !shares_attributes(records, i) {
            if count > STACK_PAIRS - used || r.attributes.is_null() {
                return None;
            }
            // SAFETY: non-NULL; the caller of the exported function promises
            // `attribute_count` readable entries.
            let attrs = unsafe { std::slice::from_raw_parts(r.attributes, count) };
            for (j, a) in attrs.iter().enumerate() {
                // SAFETY: the caller promises NUL-terminated strings that stay
                // as they are until the call returns (NULL is checked).
                let pair = unsafe { (c_str(a.key)?, c_str(a.value)?) };
                // SAFETY: `used + j < used + count <= STACK_PAIRS`: inside
                // `pairs`, and past every run handed out so far.
                unsafe { base.add(used + j).write(pair) };
            }
            // SAFETY: the `count` pairs from `used` were written just above;
            // `MaybeUninit<T>` has `T`'s layout.
            run = unsafe { std::slice::from_raw_parts(base.add(used), count) };
            used += count;
        }
        buf[i].write(plain_record(r)?.with_attributes(run));
    }
    // SAFETY: the loop wrote the first `records.len()` slots (it returns on
    // any fault); `MaybeUninit<Record>` has `Record`'s layout.
    Some(unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<Record<'b>>(), records.len()) })
}

/// A C string as a `&str`, or `None` if it is NULL or not UTF-8: `cstr`
/// (util.rs) without its error, measured by `strlen` (see
/// [`convert_attributed`]).
///
/// # Safety
///
/// `p` is NULL or points to a NUL-terminated string that stays valid and
/// unchanged for `'a`.
#[inline(always)]
unsafe fn c_str<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL; the caller promises a NUL-terminated string that
    // stays as it is for 'a.
    let bytes = unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes();
    if ascii(bytes) {
        // SAFETY: every byte is ASCII, which is valid UTF-8.
        return Some(unsafe { std::str::from_utf8_unchecked(bytes) });
    }
    std::str::from_utf8(bytes).ok()
}

/// True if every byte of `s` is ASCII: the lengths attribute strings
/// usually have (up to 16 bytes) tested in two overlapping loads, as
/// `copy_short` in the log's record.rs copies them, without a loop.
#[inline(always)]
fn ascii(s: &[u8]) -> bool {
    let n = s.len();
    match n {
        0 => true,
        1..4 => (s[0] | s[n / 2] | s[n - 1]) < 0x80,
        4..8 => {
            let head = u32::from_ne_bytes(s[..4].try_into().expect("4 bytes"));
            let tail = u32::from_ne_bytes(s[n - 4..].try_into().expect("4 bytes"));
            (head | tail) & 0x8080_8080 == 0
        }
        8..=16 => {
            let head = u64::from_ne_bytes(s[..8].try_into().expect("8 bytes"));
            let tail = u64::from_ne_bytes(s[n - 8..].try_into().expect("8 bytes"));
            (head | tail) & 0x8080_8080_8080_8080 == 0
        }
        _ => s.is_ascii(),
    }
}

/// The `Record` of a C record without attributes and with valid ranges.
#[inline(always)]
pub(crate) fn plain<'a>(r: &rill_record) -> Option<Record<'a>> {
    if r.attribute_count == 0 { plain_record(r) } else { None }
}

/// [`publish_records`] for any batch: every record converted through the
/// checked path, each error naming the record by its index. Batches of
/// more than [`STACK_BATCH`] records with attributes come here, and every
/// batch with something to refuse, for its error.
///
/// The attributes of every record go into one list, each record's a run of
/// it: one allocation for the batch's attributes, where a `Vec` per record
/// cost an allocation and a free per message to a batch whose records carry
/// attributes (the Rust API's caller hands its attributes over as slices it
/// already has; `batch_cost attrs`, an example of rill-ffi, counts the
/// two under callgrind).
#[inline(never)]
fn publish_records_general<T>(
    records: &[rill_record],
    publish: impl FnOnce(&[Record<'_>]) -> Result<Vec<T>, FfiError>,
) -> Result<Vec<T>, FfiError> {
    // Every record's attributes are checked before any range, as when each
    // record had a list of its own: a batch with both kinds of fault reports
    // the same one. When the list lacks room for a record's attributes, it
    // makes room for as many again for every record left (a batch's records
    // mostly carry alike; no pass over the batch to add up its counts first,
    // which cost a batch whose records share one array more than its one
    // conversion), within a bound: a count is the caller's word until its
    // array is read.
    //
    // A record whose attributes are the very array the record before it
    // pointed to (the same pointer and count) shares that record's run: the
    // caller promises the array and its strings stay as they are until the
    // call returns, so they read the same, and a batch of records tagged
    // alike (one `rill_attribute` array for the batch) reads and checks its
    // strings once, not once a record, as a Rust caller's records share one
    // slice of `&str`s (`batch_cost attrs` counts this under callgrind;
    // `batch_cost own`, each record an array of its own, the unshared cost).
    let mut attrs: Vec<(&str, &str)> = Vec::new();
    for (i, r) in records.iter().enumerate() {
        if !shares_attributes(records, i) {
            if attrs.capacity() - attrs.len() < r.attribute_count {
                let rest = r.attribute_count.saturating_mul(records.len() - i);
                attrs.reserve(rest.min(RESERVE_MAX));
            }
            push_attributes(r, &mut attrs)?;
        }
    }
    // Each record's run is its `attribute_count` entries, in order, or the
    // run of the record before it if it shares that one's (the same test as
    // above). A record's ranges are checked without building its error
    // messages, which only a record to refuse goes on to build (through
    // `to_record`).
    let (mut start, mut next) = (0, 0);
    let mut record = |(i, r): (usize, &rill_record)| {
        if !shares_attributes(records, i) {
            start = next;
            next += r.attribute_count;
        }
        let run = &attrs[start..start + r.attribute_count];
        match plain_record(r) {
            Some(record) => Ok(record.with_attributes(run)),
            None => to_record(r, run, Some(i)),
        }
    };
    if records.len() <= STACK_BATCH {
        let mut buf = [const { MaybeUninit::<Record<'_>>::uninit() }; STACK_BATCH];
        for (slot, r) in buf.iter_mut().zip(records.iter().enumerate()) {
            slot.write(record(r)?);
        }
        // SAFETY: the loop wrote the first `records.len()` slots (it returns
        // on any error); `MaybeUninit<Record>` has `Record`'s layout.
        let recs = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<Record<'_>>(), records.len()) };
        return publish(recs);
    }
    let recs = records.iter().enumerate().map(record).collect::<Result<Vec<_>, _>>()?;
    publish(&recs)
}

/// True if record `i` of `records` has attributes, and they are the array
/// the record before it pointed to, with the same count: it then shares
/// that record's converted run (see [`publish_records_general`]).
#[inline(always)]
fn shares_attributes(records: &[rill_record], i: usize) -> bool {
    let r = &records[i];
    r.attribute_count != 0
        && i > 0
        && records[i - 1].attributes == r.attributes
        && records[i - 1].attribute_count == r.attribute_count
}

/// The most attribute entries [`publish_records_general`] reserves room for
/// before reading them (4 096 entries, 64 KiB); a larger batch's list grows.
const RESERVE_MAX: usize = 4096;

/// Writes a position into `out` unless it is NULL.
pub(crate) fn write_position(out: *mut rill_position, p: Position) {
    if !out.is_null() {
        // SAFETY: non-NULL; the caller promises it is writable.
        unsafe { write_out(out, p.into()) };
    }
}

/// Writes a batch's positions into `out` unless it is NULL.
pub(crate) fn write_positions(out: *mut rill_position, positions: &[Position]) {
    if out.is_null() {
        return;
    }
    for (i, p) in positions.iter().enumerate() {
        // SAFETY: the caller promises `out` has room for one position per record.
        unsafe { out.add(i).write((*p).into()) };
    }
}

#[cfg(test)]
mod tests {
    /// `RILL_ATTR_ID` and `RILL_ATTR_SCHEMA`, which cbindgen does not write
    /// (string constants), are spelled in `cbindgen.toml`: the header must
    /// say what the library does.
    #[test]
    fn the_attribute_macros_in_the_header_are_the_librarys() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../include/rill.h");
        let header = std::fs::read_to_string(path).unwrap();
        for (name, value) in [("RILL_ATTR_ID", super::RILL_ATTR_ID), ("RILL_ATTR_SCHEMA", super::RILL_ATTR_SCHEMA)] {
            let define = format!("#define {name} \"{value}\"\n");
            assert!(header.contains(&define), "include/rill.h lacks {define:?}");
        }
    }

    use super::{publish_records, rill_attribute, rill_record};

    /// A record of `payload` whose attributes are `attrs` (`count` of them).
    fn c_record(payload: &[u8], attrs: *const rill_attribute, count: usize) -> rill_record {
        rill_record {
            key: std::ptr::null(),
            key_len: 0,
            payload: payload.as_ptr().cast(),
            payload_len: payload.len(),
            attributes: attrs,
            attribute_count: count,
        }
    }

    /// Each record's attributes as the batch conversion hands them on.
    fn converted(records: &[rill_record]) -> Result<Vec<Vec<(String, String)>>, String> {
        let got = publish_records(records, |recs| {
            Ok(recs
                .iter()
                .map(|r| r.attributes.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
                .collect())
        });
        got.map_err(|e| e.text.clone())
    }

    /// Records that point to the array of the record before them share its
    /// conversion; every record still gets exactly its own attributes, in
    /// batches on the stack and past it, whatever mix of shared, unshared
    /// and attribute-less records they are.
    #[test]
    fn records_sharing_an_attribute_array_each_get_its_attributes() {
        let a = [rill_attribute { key: c"k".as_ptr(), value: c"a".as_ptr() }];
        let b = [
            rill_attribute { key: c"k".as_ptr(), value: c"b".as_ptr() },
            rill_attribute { key: c"l".as_ptr(), value: c"b2".as_ptr() },
        ];
        let none = std::ptr::null();
        let kinds = [(a.as_ptr(), 1), (b.as_ptr(), 2), (none, 0), (b.as_ptr(), 1)];
        let want_of = |k: usize| -> Vec<(String, String)> {
            let pairs: &[(&str, &str)] = match k {
                0 => &[("k", "a")],
                1 => &[("k", "b"), ("l", "b2")],
                2 => &[],
                _ => &[("k", "b")],
            };
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        for len in [1, 7, 64, 65, 200] {
            // Runs of each kind, of changing lengths, so records share with
            // the one before them and then stop sharing.
            let pick: Vec<usize> = (0..len).map(|i| (i / (1 + i % 3)) % kinds.len()).collect();
            let records: Vec<rill_record> = pick.iter().map(|&k| c_record(b"p", kinds[k].0, kinds[k].1)).collect();
            let want: Vec<_> = pick.iter().map(|&k| want_of(k)).collect();
            assert_eq!(converted(&records).unwrap(), want, "{len} records");
        }
    }

    /// The ASCII test of the batch conversion agrees with the standard
    /// library's at every length around its cases, wherever the one high
    /// byte is.
    #[test]
    fn the_ascii_test_agrees_with_the_standard_librarys() {
        for len in 0..=40 {
            let clean = vec![b'a'; len];
            assert!(super::ascii(&clean), "{len} ASCII bytes");
            for at in 0..len {
                let mut high = clean.clone();
                high[at] = 0x80;
                assert!(!super::ascii(&high), "{len} bytes, a high one at {at}");
            }
        }
    }

    /// Records each with an array of its own, with strings of every length
    /// class (empty, short, long, not ASCII but UTF-8), get their own
    /// attributes, whether the batch's attributes fit the stack (the fast
    /// conversion) or not (the general one), on the stack or past it.
    #[test]
    fn records_each_with_an_array_of_their_own_get_their_attributes() {
        let strings = [c"", c"k", c"kind", c"sensor-17", c"a-longer-value-of-33-bytes-......", c"d\xc3\xa9j\xc3\xa0"];
        let arrays: Vec<[rill_attribute; 3]> = (0..200)
            .map(|i| {
                std::array::from_fn(|j| rill_attribute {
                    key: strings[(i + j) % strings.len()].as_ptr(),
                    value: strings[(i * 7 + j) % strings.len()].as_ptr(),
                })
            })
            .collect();
        // SAFETY: every pointer is one of `strings`, NUL-terminated and alive.
        let text = |p: *const std::ffi::c_char| unsafe { std::ffi::CStr::from_ptr(p) }.to_str().unwrap().to_string();
        for (len, count) in [(1, 1), (64, 2), (64, 3), (65, 2), (200, 3)] {
            let records: Vec<rill_record> = arrays[..len].iter().map(|a| c_record(b"p", a.as_ptr(), count)).collect();
            let want: Vec<Vec<(String, String)>> = arrays[..len]
                .iter()
                .map(|a| a[..count].iter().map(|x| (text(x.key), text(x.value))).collect())
                .collect();
            assert_eq!(converted(&records).unwrap(), want, "{len} records of {count}");
        }
    }

    /// A NULL string, a NULL array and a string that is not UTF-8, each in a
    /// record of its own array, are refused with the general path's error,
    /// which names the attribute.
    #[test]
    fn a_bad_attribute_in_an_array_of_its_own_is_refused_with_its_error() {
        let good = [rill_attribute { key: c"k".as_ptr(), value: c"v".as_ptr() }];
        let null = [rill_attribute { key: c"k".as_ptr(), value: std::ptr::null() }];
        let bad = [rill_attribute { key: c"k".as_ptr(), value: c"\xff".as_ptr() }];
        for (fault, want) in [
            (c_record(b"p", null.as_ptr(), 1), "attribute value"),
            (c_record(b"p", std::ptr::null(), 1), "record attributes"),
            (c_record(b"p", bad.as_ptr(), 1), "not valid UTF-8"),
        ] {
            let records = [c_record(b"p", good.as_ptr(), 1), fault];
            let err = converted(&records).unwrap_err();
            assert!(err.contains(want), "{err}");
        }
    }

    /// An attribute that is not UTF-8 in an array records share is refused,
    /// as in one they do not.
    #[test]
    fn a_bad_attribute_in_a_shared_array_is_refused() {
        let bad = [rill_attribute { key: c"k".as_ptr(), value: c"\xff".as_ptr() }];
        let good = [rill_attribute { key: c"k".as_ptr(), value: c"v".as_ptr() }];
        let records =
            [c_record(b"p", good.as_ptr(), 1), c_record(b"p", bad.as_ptr(), 1), c_record(b"p", bad.as_ptr(), 1)];
        let err = converted(&records).unwrap_err();
        assert!(err.contains("not valid UTF-8"), "{err}");
        let err = converted(&records[1..]).unwrap_err();
        assert!(err.contains("not valid UTF-8"), "{err}");
    }
}
