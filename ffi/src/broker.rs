//! `rill_broker`: creating and freeing a broker, topics, and publishing.

use std::ffi::{c_char, c_void};
use std::mem::size_of;
use std::time::Duration;

use rill::{Broker, BrokerConfig, Cleanup, Fsync, Position, Published, Publisher, Record, Sharing, TopicOptions};

use crate::error::{FfiError, boundary, rill_status};
use crate::options::{self, OptionStruct};
use crate::util::{bytes, cstr, out_ptr, reference, write_out, write_sized};

/// A broker. Create it with `rill_broker_new`, free it with
/// `rill_broker_free`. Every function taking a `rill_broker *` may be called
/// from any thread, concurrently.
///
/// After `fork()`, the child inherits a copy of every broker (and of the
/// subscriptions, consumers and publishers made from it) but none of their
/// threads, and shares the broker's data directory (and the directory's
/// lock) with the parent. The only calls a child may make on what it
/// inherited are the `_free` functions and `rill_broker_close`: they leak
/// the copy by design (a broker is marked closed), quietly, without joining
/// threads, flushing, or touching the directory or its lock, which stay the
/// parent's. Any other call on an inherited handle is undefined; call `exec`,
/// or open a new broker in the child (on another directory).
pub struct rill_broker {
    pub(crate) broker: Broker,
}

impl std::fmt::Debug for rill_broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.broker.fmt(f)
    }
}

/// When a broker with a `data_dir` forces writes to stable storage: one of
/// the `RILL_FSYNC_*` constants.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct rill_fsync(pub i32);

/// Never by rill: the OS writes back when it decides.
pub const RILL_FSYNC_NEVER: rill_fsync = rill_fsync(0);
/// Every `fsync_interval_ms`, by a background thread (the default).
pub const RILL_FSYNC_INTERVAL: rill_fsync = rill_fsync(1);
/// Before each publish and commit returns (concurrent publishers share one sync).
pub const RILL_FSYNC_ALWAYS: rill_fsync = rill_fsync(2);

/// Who else may open a broker's `data_dir` meanwhile: one of the
/// `RILL_SHARING_*` constants. Eight bytes wide so that appending it grew
/// `rill_broker_options` past its old tail padding (see "Option structs").
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct rill_sharing(pub u64);

/// No one: this broker alone holds the directory; any other opener, in this
/// process or another, gets `RILL_ERR_BUSY` (the default).
pub const RILL_SHARING_EXCLUSIVE: rill_sharing = rill_sharing(0);
/// Any number of brokers opened with it, in this process and others, share
/// the directory's topics: a message published by one is delivered to
/// push subscriptions of all. Needs a `data_dir`. Named (durable) and shared
/// subscriptions, consumers and deleting topics are not yet supported
/// this way (`RILL_ERR_INVALID_ARGUMENT`); see "Several processes" in the
/// README.
pub const RILL_SHARING_PROCESSES: rill_sharing = rill_sharing(1);
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

/// How a broker runs. Fill it with `rill_broker_options_init`, then change
/// what you need.
///
/// With `data_dir` set, the broker keeps its topics, messages, consumer group
/// commits and durable subscription positions in that directory across
/// restarts. What survives a crash depends on `fsync`:
///
/// | `fsync`               | process crash               | machine crash (power loss)                 |
/// |-----------------------|-----------------------------|--------------------------------------------|
/// | `RILL_FSYNC_ALWAYS`   | nothing acknowledged lost   | nothing acknowledged lost: `rill_publish` and a commit return only once on stable storage; a durable subscription's acks are before it delivers more (below) |
/// | `RILL_FSYNC_INTERVAL` | nothing acknowledged lost   | what came after the last completed sync round began: about the last `fsync_interval_ms` plus one round's write-back, more if publishers outrun the disk |
/// | `RILL_FSYNC_NEVER`    | nothing acknowledged lost   | whatever the OS had not yet written back   |
///
/// After any crash, recovery never delivers a damaged or partial record,
/// offsets stay dense, and every record before the first damaged one in a
/// partition is kept; `rill_topic_stats.recovered_*` say what it cut. A
/// group commit or durable subscription position that the cut left past
/// the partition's end is reset to that end at the open (and counted in
/// `recovered_offsets_reset`), so messages published afterwards are not
/// skipped.
///
/// A durable subscription's "commit" under `RILL_FSYNC_ALWAYS`: the acks a
/// handler returns in one drain round (at most 256 messages) are written and
/// synced together at the end of that round, before the subscription
/// delivers anything more, backs off or goes idle: once
/// `rill_subscription_wait_idle` returns `RILL_OK`, every ack is on stable
/// storage; a machine crash mid-round redelivers at most that round. Under
/// `INTERVAL` and `NEVER`, positions of *live* durable subscriptions are
/// saved every interval (every 100 ms under `NEVER`) and at their close, so
/// after a crash a subscription may see again what it acked in the last
/// interval (at-least-once).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rill_broker_options {
    /// Set by `rill_broker_options_init`; do not change (see "Option structs").
    pub struct_size: u32,
    /// Threads in the pool that runs subscription handlers; 0 means one per
    /// CPU core (the default).
    pub worker_threads: u32,
    /// Create unknown topics on first publish instead of failing with
    /// `RILL_ERR_NO_SUCH_TOPIC` (default false).
    pub auto_create_topics: bool,
    /// Longest `rill_publish` waits for a `Block` subscriber to make room, in
    /// milliseconds, before failing with `RILL_ERR_TIMEOUT`; negative waits
    /// indefinitely. Default 10000.
    pub publish_timeout_ms: i64,
    /// The data directory (created if missing; NULL, the default: in memory
    /// only). Opened by one broker at a time unless `sharing` is
    /// `RILL_SHARING_PROCESSES`: another, in this process or another, gets
    /// `RILL_ERR_BUSY`; a path that is not a directory is `RILL_ERR_IO`.
    /// Copied: it need not outlive `rill_broker_new`.
    pub data_dir: *const c_char,
    /// `RILL_FSYNC_INTERVAL` (default), `_ALWAYS` or `_NEVER`; see above.
    pub fsync: rill_fsync,
    /// The interval of `RILL_FSYNC_INTERVAL`, in milliseconds, at least 1.
    /// Default 100.
    pub fsync_interval_ms: u32,
    /// On opening `data_dir`: truncate a partition at damage inside an older
    /// segment (and report it) instead of failing with `RILL_ERR_CORRUPT`.
    /// Default false.
    pub repair: bool,
    /// `RILL_SHARING_EXCLUSIVE` (default) or `RILL_SHARING_PROCESSES`, which
    /// needs a `data_dir` (else `RILL_ERR_INVALID_ARGUMENT`). A directory
    /// open one way refuses an opener of the other with `RILL_ERR_BUSY`.
    pub sharing: rill_sharing,
}

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
    /// the size and age limits are not applied, so memory grows with the
    /// number of distinct keys; `_COMPACT_DELETE` applies them too. In
    /// memory only for now: on a broker with a `data_dir`, creating a
    /// compacted topic is `RILL_ERR_INVALID_ARGUMENT`.
    pub cleanup: rill_cleanup,
    /// Under compaction: how long a tombstone stays once it is the newest
    /// message of its key, in milliseconds by its timestamp. Default
    /// 86400000 (24 h).
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
}

/// The attribute holding a message's id (see
/// `rill_topic_options.dedupe_window_ms`): 1 to `RILL_ID_MAX_LEN` bytes,
/// else `RILL_ERR_INVALID_ARGUMENT`; at most one per message.
pub const RILL_ATTR_ID: &str = "rill.id";
const _: () = assert!(const_str_eq(RILL_ATTR_ID, rill::log::ID_ATTRIBUTE));

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
    /// Length of the key (a non-NULL key of length 0 is an empty key).
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

// SAFETY: repr(C), leading u32 struct_size, fields any C value may fill
// (the bools as 0 or 1, per the C contract; `fsync` is checked when read).
unsafe impl OptionStruct for rill_broker_options {
    const INIT: &'static str = "rill_broker_options_init";
    const FIRST_SIZE: usize = 24;
    fn defaults() -> Self {
        let d = BrokerConfig::default();
        rill_broker_options {
            struct_size: size_of::<Self>() as u32,
            worker_threads: 0,
            auto_create_topics: d.auto_create_topics,
            publish_timeout_ms: d.publish_timeout.map_or(-1, |t| t.as_millis() as i64),
            data_dir: std::ptr::null(),
            fsync: RILL_FSYNC_INTERVAL,
            fsync_interval_ms: DEFAULT_FSYNC_INTERVAL_MS,
            repair: d.repair,
            sharing: RILL_SHARING_EXCLUSIVE,
        }
    }
}

/// Default of `rill_broker_options.fsync_interval_ms`.
const DEFAULT_FSYNC_INTERVAL_MS: u32 = 100;

/// Fills `o` with the defaults; `size` is the caller's
/// `sizeof(rill_broker_options)`. Call it as `rill_broker_options_init(o)`,
/// the macro that passes the size. NULL is a no-op.
///
/// # Safety
///
/// `o` is NULL or points to `size` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_broker_options_init_v1(o: *mut rill_broker_options, size: usize) {
    // SAFETY: forwarded from the caller.
    crate::error::boundary_value((), || unsafe { options::init(o, size) })
}

/// # Safety
///
/// `o.data_dir` is NULL or a NUL-terminated string.
unsafe fn broker_config(o: Option<&rill_broker_options>) -> Result<BrokerConfig, FfiError> {
    let mut config = BrokerConfig::default();
    if let Some(o) = o {
        config.worker_threads = (o.worker_threads > 0).then_some(o.worker_threads as usize);
        config.auto_create_topics = o.auto_create_topics;
        config.publish_timeout = u64::try_from(o.publish_timeout_ms).ok().map(Duration::from_millis);
        if !o.data_dir.is_null() {
            use std::os::unix::ffi::OsStrExt;
            // SAFETY: non-NULL, and the caller promises a NUL-terminated string.
            let bytes = unsafe { std::ffi::CStr::from_ptr(o.data_dir) }.to_bytes();
            if bytes.is_empty() {
                return Err(FfiError::invalid("data_dir is empty: pass NULL for a broker in memory"));
            }
            config.data_dir = Some(std::ffi::OsStr::from_bytes(bytes).into());
        }
        config.fsync = match o.fsync {
            RILL_FSYNC_NEVER => Fsync::Never,
            RILL_FSYNC_ALWAYS => Fsync::Always,
            RILL_FSYNC_INTERVAL if o.fsync_interval_ms == 0 => {
                return Err(FfiError::invalid("fsync_interval_ms must be at least 1"));
            }
            RILL_FSYNC_INTERVAL => Fsync::Interval(Duration::from_millis(o.fsync_interval_ms.into())),
            rill_fsync(other) => return Err(FfiError::invalid(format!("fsync {other} is not a RILL_FSYNC_* value"))),
        };
        config.repair = o.repair;
        config.sharing = match o.sharing {
            RILL_SHARING_EXCLUSIVE => Sharing::Exclusive,
            RILL_SHARING_PROCESSES => Sharing::Processes,
            rill_sharing(other) => {
                return Err(FfiError::invalid(format!("sharing {other} is not a RILL_SHARING_* value")));
            }
        };
    }
    Ok(config)
}

/// Starts a broker (its worker pool and retry timer). `o` may be NULL for
/// the defaults. On success `*out` is the new broker; free it with
/// `rill_broker_free`. Called as `rill_broker_new`.
///
/// # Safety
///
/// `o` is NULL or points to options filled by `rill_broker_options_init`;
/// `out` points to writable storage.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_broker_new_v1(o: *const rill_broker_options, out: *mut *mut rill_broker) -> rill_status {
    boundary(|| {
        out_ptr(out, "out")?;
        // SAFETY: the caller promises `o` is NULL or valid.
        let o = unsafe { options::read(o) }?;
        // SAFETY: the caller promises options filled by `_init`, whose
        // `data_dir` is NULL or a string.
        let broker = Broker::new(unsafe { broker_config(o.as_ref()) }?)?;
        // SAFETY: checked non-NULL above; the caller promises it is writable.
        unsafe { write_out(out, Box::into_raw(Box::new(rill_broker { broker }))) };
        Ok(())
    })
}

/// Closes the broker without freeing it: every subscription and consumer
/// is closed, its threads stop, and later calls fail with `RILL_ERR_CLOSED`.
/// Waits for handler calls in flight (except the calling handler's own).
/// Idempotent; NULL is a no-op. In a child of `fork`, on an inherited
/// broker: only marks it closed (see `rill_broker`).
///
/// # Safety
///
/// `b` is NULL or a live broker.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_broker_close(b: *mut rill_broker) {
    crate::error::boundary_value((), || {
        // SAFETY: the caller promises `b` is NULL or live.
        if let Some(b) = unsafe { b.as_ref() } {
            b.broker.close();
        }
    })
}

/// Closes (as `rill_broker_close`) and frees the broker. Subscriptions and
/// consumers still alive are closed; their handles stay valid and must
/// still be freed. NULL is a no-op. May be called from a handler. In a child
/// of `fork`, on an inherited broker: frees nothing and leaves the parent's
/// data directory alone (see `rill_broker`).
///
/// # Safety
///
/// `b` is NULL or a broker from `rill_broker_new` not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_broker_free(b: *mut rill_broker) {
    crate::error::boundary_value((), || {
        if !b.is_null() {
            // SAFETY: the caller hands back a pointer from `rill_broker_new`,
            // freed exactly once.
            let b = unsafe { Box::from_raw(b) };
            b.broker.close();
            drop(b);
        }
    })
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
    }
    Ok(t)
}

/// Creates a topic. Names are `/`-separated non-empty segments of UTF-8, at
/// most 255 bytes, without NUL or `*`; names starting with `$` are reserved.
/// `o` may be NULL for the defaults. Called as `rill_topic_create`.
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
/// the snapshot does not see.
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
        for name in b.broker.topics() {
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
    /// full, the oldest leaves first (counted in `dedupe_evicted`).
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

/// The attributes of one record, borrowed from C.
pub(crate) fn attributes<'a>(r: &rill_record) -> Result<Vec<(&'a str, &'a str)>, FfiError> {
    if r.attribute_count == 0 {
        return Ok(Vec::new());
    }
    if r.attributes.is_null() {
        return Err(FfiError::null("record attributes (with a non-zero attribute_count)"));
    }
    // SAFETY: non-NULL; the caller promises `attribute_count` readable entries.
    let attrs = unsafe { std::slice::from_raw_parts(r.attributes, r.attribute_count) };
    attrs
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let at = |mut e: FfiError| {
                e.text = format!("{} (attribute {i})", e.text);
                e
            };
            // SAFETY: the caller promises NUL-terminated strings (NULL is checked).
            let k = unsafe { cstr(a.key, "attribute key") }.map_err(at)?;
            // SAFETY: as above.
            let v = unsafe { cstr(a.value, "attribute value") }.map_err(at)?;
            Ok((k, v))
        })
        .collect()
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
    if !r.key.is_null() {
        // SAFETY: as above.
        record = record.with_key(unsafe { bytes(r.key, r.key_len, || name("key")) }?);
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
fn with_record_general<T>(r: &rill_record, f: impl FnOnce(&Record<'_>) -> Result<T, FfiError>) -> Result<T, FfiError> {
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
    }
    Some(record)
}

#[derive(Clone, Copy)]
enum Mode {
    Wait,
    Try,
}

/// Shared body of `rill_publish` and `rill_try_publish`.
///
/// # Safety
///
/// As for `rill_publish`.
unsafe fn publish(
    b: *mut rill_broker,
    topic: *const c_char,
    r: *const rill_record,
    out: *mut rill_position,
    mode: Mode,
) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promises, checked for NULL inside.
        let (b, topic, r) = unsafe { (reference(b, "broker")?, cstr(topic, "topic")?, reference(r, "record")?) };
        let pos = with_record(r, |rec| {
            Ok(match mode {
                Mode::Wait => b.broker.publish(topic, rec)?,
                Mode::Try => b.broker.try_publish(topic, rec)?,
            })
        })?;
        if !out.is_null() {
            // SAFETY: non-NULL; the caller promises it is writable.
            unsafe { write_out(out, pos.into()) };
        }
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
    // SAFETY: forwarded.
    unsafe { publish(b, topic, r, out, Mode::Wait) }
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
    // SAFETY: forwarded.
    unsafe { publish(b, topic, r, out, Mode::Try) }
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
    boundary(|| {
        // SAFETY: the caller's promises, checked for NULL inside.
        let (b, topic) = unsafe { (reference(b, "broker")?, cstr(topic, "topic")?) };
        // SAFETY: as above.
        let records = unsafe { record_slice(rs, n) }?;
        let positions = publish_records(records, |recs| Ok(b.broker.publish_batch(topic, recs)?))?;
        write_positions(out, &positions);
        Ok(())
    })
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
    boundary(|| {
        // SAFETY: the caller's promises, checked for NULL inside.
        let (b, topic, r) = unsafe { (reference(b, "broker")?, cstr(topic, "topic")?, reference(r, "record")?) };
        let done = with_record(r, |rec| Ok(b.broker.publish_outcome(topic, rec)?))?;
        // SAFETY: the caller promises each is NULL or writable.
        unsafe { write_outcome(done, out, flags) };
        Ok(())
    })
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
    boundary(|| {
        // SAFETY: the caller's promises, checked for NULL inside.
        let (b, topic, r) = unsafe { (reference(b, "broker")?, cstr(topic, "topic")?, reference(r, "record")?) };
        let done = with_record(r, |rec| Ok(b.broker.try_publish_outcome(topic, rec)?))?;
        // SAFETY: the caller promises each is NULL or writable.
        unsafe { write_outcome(done, out, flags) };
        Ok(())
    })
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
    boundary(|| {
        // SAFETY: the caller's promises, checked for NULL inside.
        let (b, topic) = unsafe { (reference(b, "broker")?, cstr(topic, "topic")?) };
        // SAFETY: as above.
        let records = unsafe { record_slice(rs, n) }?;
        let done = publish_records(records, |recs| Ok(b.broker.publish_batch_outcome(topic, recs)?))?;
        write_outcomes(out, flags, &done);
        Ok(())
    })
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
unsafe fn write_outcome(p: Published, out: *mut rill_position, flags: *mut u32) {
    if !out.is_null() {
        // SAFETY: non-NULL; the caller promises it is writable.
        unsafe { write_out(out, p.position.into()) };
    }
    if !flags.is_null() {
        // SAFETY: as above.
        unsafe { write_out(flags, outcome_flags(&p)) };
    }
}

/// Writes a batch's outcomes into the arrays that are not NULL.
pub(crate) fn write_outcomes(out: *mut rill_position, flags: *mut u32, done: &[Published]) {
    let positions: Vec<Position> = done.iter().map(|p| p.position).collect();
    write_positions(out, &positions);
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

/// Batches up to this many records are converted on the stack.
const STACK_BATCH: usize = 64;

/// Converts C records and publishes them with `publish`.
///
/// Records without attributes whose ranges are valid (the common batch) are
/// turned into `Record`s directly: on the stack for up to [`STACK_BATCH`]
/// records, else into one `Vec`. A batch with any other record (attributes,
/// or a range to refuse) takes the general path, which checks the same
/// things and names the record and the part that is wrong.
#[inline]
pub(crate) fn publish_records<T>(
    records: &[rill_record],
    publish: impl FnOnce(&[Record<'_>]) -> Result<Vec<T>, FfiError>,
) -> Result<Vec<T>, FfiError> {
    if records.len() <= STACK_BATCH {
        let mut buf = [Record::default(); STACK_BATCH];
        let mut n = 0;
        for r in records {
            match plain(r) {
                Some(rec) => buf[n] = rec,
                None => break,
            }
            n += 1;
        }
        if n == records.len() {
            return publish(&buf[..n]);
        }
    } else if let Some(recs) = records.iter().map(plain).collect::<Option<Vec<_>>>() {
        return publish(&recs);
    }
    publish_records_general(records, publish)
}

/// The `Record` of a C record without attributes and with valid ranges.
#[inline(always)]
fn plain<'a>(r: &rill_record) -> Option<Record<'a>> {
    if r.attribute_count == 0 { plain_record(r) } else { None }
}

/// [`publish_records`] for any batch: every record converted through the
/// checked path, each error naming the record by its index.
#[inline(never)]
fn publish_records_general<T>(
    records: &[rill_record],
    publish: impl FnOnce(&[Record<'_>]) -> Result<Vec<T>, FfiError>,
) -> Result<Vec<T>, FfiError> {
    let attrs: Vec<Vec<(&str, &str)>> = records.iter().map(attributes).collect::<Result<_, _>>()?;
    let recs = records
        .iter()
        .zip(&attrs)
        .enumerate()
        .map(|(i, (r, a))| to_record(r, a, Some(i)))
        .collect::<Result<Vec<_>, _>>()?;
    publish(&recs)
}

pub(crate) fn write_positions(out: *mut rill_position, positions: &[Position]) {
    if out.is_null() {
        return;
    }
    for (i, p) in positions.iter().enumerate() {
        // SAFETY: the caller promises `out` has room for one position per record.
        unsafe { out.add(i).write((*p).into()) };
    }
}

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
        if !out.is_null() {
            // SAFETY: non-NULL; the caller promises it is writable.
            unsafe { write_out(out, pos.into()) };
        }
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
    boundary(|| {
        // SAFETY: the caller's promises, checked for NULL inside.
        let p = unsafe { reference(p, "publisher")? };
        // SAFETY: as above.
        let records = unsafe { record_slice(rs, n) }?;
        let positions = publish_records(records, |recs| Ok(p.publisher.publish_batch(recs)?))?;
        write_positions(out, &positions);
        Ok(())
    })
}

/// Publishes one message (as `rill_publish_outcome`): `*flags` (if not
/// NULL) gets `RILL_PUBLISHED_DUPLICATE` if the message's id was a
/// duplicate, else 0.
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
    boundary(|| {
        // SAFETY: the caller's promises, checked for NULL inside.
        let p = unsafe { reference(p, "publisher")? };
        // SAFETY: as above.
        let records = unsafe { record_slice(rs, n) }?;
        let done = publish_records(records, |recs| Ok(p.publisher.publish_batch_outcome(recs)?))?;
        write_outcomes(out, flags, &done);
        Ok(())
    })
}

/// Publishes one message given as plain arguments, without building a
/// `rill_record`: for bindings where a struct per message is costly.
/// `key` NULL means unkeyed; no attributes. `out` may be NULL.
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
    boundary(|| {
        // SAFETY: the caller's promises, checked for NULL inside.
        let p = unsafe { reference(p, "publisher") }?;
        // SAFETY: as above.
        let mut record = Record::new(unsafe { bytes(payload, payload_len, || "payload".into()) }?);
        if !key.is_null() {
            // SAFETY: as above.
            record = record.with_key(unsafe { bytes(key, key_len, || "key".into()) }?);
        }
        let pos = p.publisher.publish_unboxed(&record)?;
        if !out.is_null() {
            // SAFETY: non-NULL; the caller promises it is writable.
            unsafe { write_out(out, pos.into()) };
        }
        Ok(())
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
    boundary(|| {
        // SAFETY: the caller's promise, checked for NULL.
        let p = unsafe { reference(p, "publisher") }?;
        if n == 0 {
            return Ok(());
        }
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
        let positions = p.publisher.publish_batch(&records)?;
        write_positions(out, &positions);
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

#[cfg(test)]
mod tests {
    /// `RILL_ATTR_ID`, which cbindgen does not write (a string constant), is
    /// spelled in `cbindgen.toml`: the header must say what the library does.
    #[test]
    fn the_id_attribute_macro_in_the_header_is_the_librarys() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../include/rill.h");
        let header = std::fs::read_to_string(path).unwrap();
        let define = format!("#define RILL_ATTR_ID \"{}\"\n", super::RILL_ATTR_ID);
        assert!(header.contains(&define), "include/rill.h lacks {define:?}");
    }
}
