//! Topics: `rill_topic_options` (with its `rill_cleanup` values),
//! `rill_topic_stats`, and the `rill_topic_*` calls that create, list,
//! delete and describe topics. A topic is a name, not a handle: every call
//! takes the broker and the name.

use std::ffi::{c_char, c_void};
use std::mem::size_of;

use rill::{Cleanup, TopicOptions};

use crate::broker::rill_broker;
use crate::error::{FfiError, boundary, rill_status};
use crate::options::{self, OptionStruct};
use crate::util::{cstr, out_ptr, reference, write_sized};

/// What keeps a topic's partitions from growing without end
/// (`rill_topic_options.cleanup`): one of the `RILL_CLEANUP_*` constants.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct rill_cleanup(pub i32);

/// The size and age limits trim whole segments (the default).
pub const RILL_CLEANUP_DELETE: rill_cleanup = rill_cleanup(0);
/// Log compaction keeps the newest message of every key; no size or age limit.
pub const RILL_CLEANUP_COMPACT: rill_cleanup = rill_cleanup(1);
/// Log compaction, and the size and age limits too.
pub const RILL_CLEANUP_COMPACT_DELETE: rill_cleanup = rill_cleanup(2);

/// How a topic is laid out. Fill it with `rill_topic_options_init`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rill_topic_options {
    /// Set by `rill_topic_options_init`; do not change (see "Option structs").
    pub struct_size: u32,
    /// Number of partitions, at least 1 (default 1). Order is kept per partition.
    pub partitions: u32,
    /// Retention per partition in bytes of log segments; 0 keeps everything
    /// (memory is then unbounded). Default 268435456 (256 MiB).
    pub retention_bytes: u64,
    /// Retention per partition by message count; 0: no count limit (default).
    pub retention_messages: u64,
    /// Largest encoded message (24-byte header, key, attributes, payload); 0
    /// picks the default (1 MiB, or less with a small retention).
    pub max_message_bytes: u64,
    /// Retention by age in milliseconds: a segment is trimmed once its newest
    /// message is older (whole segments; with the byte and count limits,
    /// whichever trims most), also while nobody publishes. 0: no age limit
    /// (default).
    pub retention_ms: u64,
    /// How long, in milliseconds, the topic remembers the id of a message
    /// published with one (the attribute `RILL_ATTR_ID`): a second message
    /// with the same id within this time is not appended, and its publish
    /// returns the first one's position (`rill_publish_outcome` and the
    /// other `_outcome` calls also set `RILL_PUBLISHED_DUPLICATE`). Per
    /// topic, across its partitions; kept with a topic on a data directory
    /// and rebuilt from its log on open. Default 120000 (two minutes); 0
    /// turns the check off. Messages without an id are never checked.
    pub dedupe_window_ms: u64,
    /// `RILL_CLEANUP_DELETE` (default: the limits above), `_COMPACT` or
    /// `_COMPACT_DELETE`. A compacted topic keeps the newest message of
    /// every key, as Kafka's `cleanup.policy=compact`: a message published
    /// to it without a key is `RILL_ERR_INVALID_ARGUMENT`; a keyed message
    /// with an empty payload is a tombstone that deletes its key and is
    /// removed itself after `delete_retention_ms`. Compaction runs on a
    /// background thread over sealed segments (never the one being
    /// written); offsets never change, so a reader from the beginning sees
    /// the newest message of each key in offset order, with gaps, and a seek
    /// to a removed offset starts at the next kept one. Under `_COMPACT`
    /// the size and age limits are not applied: in memory, compaction
    /// merges the segments it rewrites, so memory grows with the number of
    /// distinct keys only; with a `data_dir` each segment sealed stays a
    /// file (and a mapping), rebuilt with what it keeps and four bytes of
    /// index per offset it covers (segment files are not merged yet).
    /// `_COMPACT_DELETE` applies the limits too. On a
    /// broker with a `data_dir` compaction rewrites segment files so that a
    /// crash at any moment loses no message it keeps; with
    /// `RILL_SHARING_PROCESSES`, one process at a time compacts a partition
    /// and the others map the rebuilt files.
    pub cleanup: rill_cleanup,
    /// Under compaction: how long a tombstone stays once it is the newest
    /// message of its key, in milliseconds by its timestamp (longer while
    /// an older message of its key is kept). A reader that reaches the
    /// tombstone's offset only after it was removed may see the key's older
    /// value and miss the delete: keep this longer than a reader from the
    /// beginning takes to catch up. Default 86400000 (24 h).
    pub delete_retention_ms: u64,
    /// Under compaction: how long a message stays uncompacted, in
    /// milliseconds by its timestamp, even when a newer one of its key
    /// exists. Default 0.
    pub min_compaction_lag_ms: u64,
    /// The default priority of the topic's subscriptions that set none and
    /// name this one topic: 0 to 7, or `RILL_PRIORITY_UNSET` (-1, what
    /// `rill_topic_options_init` writes: they get `RILL_PRIORITY_DEFAULT`).
    /// Kept with a durable topic. Any other value: `RILL_ERR_INVALID_ARGUMENT`.
    pub priority: i32,
    /// Size of a partition's log segments in bytes; 0 (default) picks 4 MiB,
    /// or a quarter of `retention_bytes` if that is smaller. Retention trims
    /// whole segments. With a `data_dir`, each partition's segment files are
    /// allocated whole at this size (plus an offset index), so a topic that
    /// stays small costs less disk (memory, on tmpfs) with smaller segments.
    /// Below 4096, above 1 GiB, or more than half of `retention_bytes`:
    /// `RILL_ERR_INVALID_ARGUMENT`.
    pub segment_bytes: u64,
}

// SAFETY: repr(C), leading u32 struct_size, integer fields.
unsafe impl OptionStruct for rill_topic_options {
    const INIT: &'static str = "rill_topic_options_init";
    const FIRST_SIZE: usize = 32;
    fn defaults() -> Self {
        let d = TopicOptions::default();
        rill_topic_options {
            struct_size: size_of::<Self>() as u32,
            partitions: d.partitions,
            retention_bytes: d.retention_bytes.unwrap_or(0),
            retention_messages: d.retention_messages.unwrap_or(0),
            max_message_bytes: 0,
            retention_ms: 0,
            dedupe_window_ms: d.dedupe_window_ms,
            cleanup: RILL_CLEANUP_DELETE,
            delete_retention_ms: d.delete_retention_ms,
            min_compaction_lag_ms: d.min_compaction_lag_ms,
            priority: crate::priority::RILL_PRIORITY_UNSET,
            segment_bytes: 0,
        }
    }
}

/// Fills `o` with the defaults; `size` is the caller's
/// `sizeof(rill_topic_options)`. Call it as `rill_topic_options_init(o)`,
/// the macro that passes the size. NULL is a no-op.
///
/// # Safety
///
/// `o` is NULL or points to `size` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_topic_options_init_v1(o: *mut rill_topic_options, size: usize) {
    // SAFETY: forwarded from the caller.
    crate::error::boundary_value((), || unsafe { options::init(o, size) })
}

pub(crate) fn topic_options(o: Option<&rill_topic_options>) -> Result<TopicOptions, FfiError> {
    let mut t = TopicOptions::default();
    if let Some(o) = o {
        t.partitions = o.partitions;
        t.retention_bytes = (o.retention_bytes > 0).then_some(o.retention_bytes);
        t.retention_messages = (o.retention_messages > 0).then_some(o.retention_messages);
        t.max_message_bytes = match o.max_message_bytes {
            0 => None,
            n => Some(usize::try_from(n).map_err(|_| FfiError::invalid("max_message_bytes is too large"))?),
        };
        t.retention_ms = (o.retention_ms > 0).then_some(o.retention_ms);
        t.dedupe_window_ms = o.dedupe_window_ms;
        t.cleanup = match o.cleanup {
            RILL_CLEANUP_DELETE => Cleanup::Delete,
            RILL_CLEANUP_COMPACT => Cleanup::Compact,
            RILL_CLEANUP_COMPACT_DELETE => Cleanup::CompactAndDelete,
            rill_cleanup(other) => {
                return Err(FfiError::invalid(format!("cleanup {other} is not a RILL_CLEANUP_* value")));
            }
        };
        t.delete_retention_ms = o.delete_retention_ms;
        t.min_compaction_lag_ms = o.min_compaction_lag_ms;
        t.priority = crate::priority::priority_from_c(o.priority, "a topic's priority")?;
        t.segment_bytes = match o.segment_bytes {
            0 => None,
            n => Some(usize::try_from(n).map_err(|_| FfiError::invalid("segment_bytes is too large"))?),
        };
    }
    Ok(t)
}

/// Creates a topic. Names are `/`-separated non-empty segments of UTF-8, at
/// most 255 bytes, without NUL or `*`; names starting with `$` are reserved.
/// `o` may be NULL for the defaults. Called as `rill_topic_create`.
/// `RILL_ERR_TOPIC_EXISTS` if a topic of that name exists: one this broker
/// has, or, on a data directory shared by processes, one another process
/// created first (even in a race, with the same options or not), which
/// this broker has joined, with the options it was made with, by the time
/// the call returns, so the topic is usable. Exactly one caller of racing
/// creates gets `RILL_OK`, and its options are the topic's.
///
/// # Safety
///
/// `b` is a live broker; `name` a NUL-terminated string; `o` NULL or
/// filled by `rill_topic_options_init`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_topic_create_v1(
    b: *mut rill_broker,
    name: *const c_char,
    o: *const rill_topic_options,
) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promises, checked for NULL inside.
        let (b, name) = unsafe { (reference(b, "broker")?, cstr(name, "topic name")?) };
        // SAFETY: the caller promises `o` is NULL or valid.
        let options = topic_options(unsafe { options::read(o) }?.as_ref())?;
        b.broker.create_topic(name, &options)?;
        Ok(())
    })
}

/// What `rill_topic_list` calls with each topic's name (borrowed for the call).
pub type rill_topic_callback = Option<unsafe extern "C" fn(user_data: *mut c_void, name: *const c_char)>;

/// Calls `each(user_data, name)` for every topic, in name order (the
/// broker's own `$` topics, such as dead-letter topics, included); each name
/// is borrowed for that call only. A snapshot, taken before the first call;
/// the callback may call any rill function (creating topics included), which
/// the snapshot does not see. `RILL_ERR_CLOSED` once the broker is closed.
///
/// # Safety
///
/// `b` is a live broker; `each` a function safe to call with `user_data`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_topic_list(
    b: *mut rill_broker,
    each: rill_topic_callback,
    user_data: *mut c_void,
) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promise, checked for NULL.
        let b = unsafe { reference(b, "broker") }?;
        let each = crate::util::callback(each, "each")?;
        for name in b.open()?.topics() {
            let name = crate::text::c_string(&name);
            // SAFETY: the caller's callback; `name` outlives the call.
            unsafe { each(user_data, name.as_ptr()) };
        }
        Ok(())
    })
}

/// Deletes a topic: `RILL_ERR_NO_SUCH_TOPIC` if there is none. Subscriptions
/// naming exactly this topic are closed (`rill_subscription_closed_reason`
/// says "topic deleted"); wildcard subscriptions stop reading it and go on
/// with their other topics; publishers and consumers of it still alive fail
/// with `RILL_ERR_NO_SUCH_TOPIC` (a blocked `rill_consumer_poll` wakes to
/// say so); consumer groups' and durable subscriptions' positions in it are
/// forgotten. Its memory is released once the last `rill_publisher` or
/// `rill_consumer` of it is freed. A topic created again under the name
/// starts at offset 0.
///
/// # Safety
///
/// `b` is a live broker; `name` a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_topic_delete(b: *mut rill_broker, name: *const c_char) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promises, checked for NULL inside.
        let (b, name) = unsafe { (reference(b, "broker")?, cstr(name, "topic name")?) };
        b.broker.delete_topic(name)?;
        Ok(())
    })
}

/// Statistics of one topic.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct rill_topic_stats {
    /// Number of partitions.
    pub partitions: u32,
    /// Messages ever published to it.
    pub publish_count: u64,
    /// Memory held by its retained log segments.
    pub retained_bytes: u64,
    /// Records that recovery dropped from the torn or damaged ends of this
    /// topic's partitions when the broker opened its data directory, summed
    /// over the partitions (0 in memory, and for a clean restart). Only the
    /// records it could still recognise (whole ones in files after the cut);
    /// what follows a damaged record in its own file counts in the bytes
    /// (in a file used once; a recycled one holds stale bytes there).
    pub recovered_truncated_records: u64,
    /// Bytes recovery dropped with them.
    pub recovered_truncated_bytes: u64,
    /// Partitions that recovery cut at damage inside an older (sealed)
    /// segment because the broker was opened with `repair`.
    pub recovered_repaired_partitions: u32,
    /// Consumer group commits and durable subscription positions on this
    /// topic that pointed past the end recovery left in their partition (it
    /// cut below them), reset to that end when the broker opened its data
    /// directory, so that messages published afterwards are delivered, not
    /// skipped (0 in memory, and for a clean restart). Each reset is also
    /// logged as a warning.
    pub recovered_offsets_reset: u64,
    /// Publishes answered as duplicates by the dedupe window (nothing
    /// appended; see `rill_topic_options.dedupe_window_ms`).
    pub dedupe_duplicates: u64,
    /// Ids in the dedupe window now. A window holds at most 2097152 ids; when
    /// full, the oldest leaves first (counted in `dedupe_evicted`). With
    /// `RILL_SHARING_PROCESSES` each process has a window of its own, which
    /// learns the others' ids from the log at its own publishes with an id:
    /// in a process that has published none, 0.
    pub dedupe_ids: u64,
    /// Ids dropped from a full dedupe window before their window ended: a
    /// retry of one of them is appended again.
    pub dedupe_evicted: u64,
    /// Publishes that found their id being appended by another publisher at
    /// that moment and waited for that append.
    pub dedupe_waits: u64,
    /// Messages compaction removed, summed over the partitions (0 unless
    /// the topic's `cleanup` compacts).
    pub compacted_messages: u64,
    /// Their bytes, as they took in the log.
    pub compacted_bytes: u64,
    /// Compaction passes run, summed over the partitions.
    pub compaction_passes: u64,
    /// Distinct keys with a message kept after the last pass, summed over
    /// the partitions (a tombstone not yet expired counts).
    pub compaction_keys: u64,
}

/// The size of `rill_topic_stats`' first layout (rill 0.1, and every header
/// before the recovery figures were appended): `partitions`,
/// `publish_count`, `retained_bytes`.
pub(crate) const TOPIC_STATS_FIRST_SIZE: usize = 24;

/// Fills `*out` with the topic's statistics. Call it as
/// `rill_topic_get_stats(b, name, out)`, the macro that passes
/// `sizeof(rill_topic_stats)` as `size`: the library writes that many bytes
/// of its statistics (fields the program's header does not know are left
/// out; fields the library does not know are zeroed). A `size` smaller than
/// the first layout (24 bytes) or larger than `RILL_STRUCT_SIZE_MAX` is
/// `RILL_ERR_INVALID_ARGUMENT`, and nothing is written.
///
/// # Safety
///
/// `b` is a live broker; `name` a NUL-terminated string; `out` writable for
/// `size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_topic_get_stats_v1(
    b: *mut rill_broker,
    name: *const c_char,
    out: *mut rill_topic_stats,
    size: usize,
) -> rill_status {
    boundary(|| {
        out_ptr(out, "out")?;
        if size < TOPIC_STATS_FIRST_SIZE {
            return Err(FfiError::invalid(format!(
                "rill_topic_stats of {size} bytes is smaller than its first layout ({} bytes): \
                 call rill_topic_get_stats, the macro that passes its size",
                TOPIC_STATS_FIRST_SIZE
            )));
        }
        options::within_max(size, "rill_topic_stats")?;
        // SAFETY: the caller's promises, checked for NULL inside.
        let (b, name) = unsafe { (reference(b, "broker")?, cstr(name, "topic name")?) };
        let stats = topic_stats(&b.broker.topic_stats(name)?);
        // SAFETY: checked non-NULL; the caller promises `size` writable bytes.
        unsafe { write_sized(out, &stats, size) };
        Ok(())
    })
}

/// The C statistics of a topic.
pub(crate) fn topic_stats(s: &rill::TopicStats) -> rill_topic_stats {
    rill_topic_stats {
        partitions: s.partitions.len() as u32,
        publish_count: s.publish_count,
        retained_bytes: s.retained_bytes,
        recovered_truncated_records: s.partitions.iter().map(|p| p.recovered_truncated_records).sum(),
        recovered_truncated_bytes: s.partitions.iter().map(|p| p.recovered_truncated_bytes).sum(),
        recovered_repaired_partitions: s.partitions.iter().filter(|p| p.recovered_repaired).count() as u32,
        recovered_offsets_reset: s.partitions.iter().map(|p| p.recovered_offsets_reset).sum(),
        dedupe_duplicates: s.dedupe_duplicates,
        dedupe_ids: s.dedupe_ids,
        dedupe_evicted: s.dedupe_evicted,
        dedupe_waits: s.dedupe_waits,
        compacted_messages: s.compacted_messages,
        compacted_bytes: s.compacted_bytes,
        compaction_passes: s.compaction_passes,
        compaction_keys: s.compaction_keys,
    }
}
