//! `rill_broker`: creating, closing and freeing a broker, its options, and
//! the calls on what the broker keeps of subscriptions without a handle
//! (`rill_durable_delete`, `rill_subscription_list`).

use std::ffi::{c_char, c_void};
use std::mem::size_of;
use std::time::Duration;

use rill::{Broker, BrokerConfig, Fsync, Sharing};

use crate::error::{FfiError, boundary, rill_status};
use crate::options::{self, OptionStruct};
use crate::subscription_stats::{rill_subscription_callback, rill_subscription_stats};
use crate::util::{cstr, out_ptr, reference, write_out};

/// A broker. Create it with `rill_broker_new`, free it with
/// `rill_broker_free`. Every function taking a `rill_broker *` may be called
/// from any thread, concurrently.
///
/// After `fork()`, the child inherits a copy of every broker (and of the
/// subscriptions, consumers and publishers made from it) but none of their
/// threads, and none of their locks: at the fork, the child's copy of each
/// lock file the library holds (the data directory's lock, durable names,
/// group partitions, `Block` slots) is replaced by a file of its own, so a
/// child that outlives its parent holds nothing of the parent's, and the
/// parent's names and partitions go to other processes when it dies. The
/// only calls a child may make on what it inherited are the `_free`
/// functions and `rill_broker_close`: they leak the copy by design (a
/// broker is marked closed), quietly, without joining threads, flushing,
/// or touching the directory, which stays the parent's. Any other call on
/// an inherited handle is undefined; call `exec`, or open a new broker in
/// the child.
pub struct rill_broker {
    pub(crate) broker: Broker,
}

impl rill_broker {
    /// The broker, or `RILL_ERR_CLOSED` once it is closed: for the C calls
    /// whose Rust call does not fail on a closed broker (the listings
    /// `topics`, `subscriptions` and `groups` give what it still holds), so
    /// that they fail as every other call on it does, as `rill_broker_close`
    /// says.
    pub(crate) fn open(&self) -> Result<&Broker, FfiError> {
        if self.broker.is_closed() {
            return Err(rill::Error::Closed("the broker is closed".into()).into());
        }
        Ok(&self.broker)
    }
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
/// push subscriptions of all. Needs a `data_dir`. A named (durable)
/// subscription's name is held by one process at a time (`RILL_ERR_BUSY`
/// elsewhere until it closes or its process dies); consumer groups and
/// shared subscriptions split partitions across processes, and
/// `rill_named_subscription_list` and `rill_group_member_list` say which
/// process holds what (and `rill_directory_subscription_list` and
/// `rill_directory_consumer_list` list every process's subscriptions and
/// consumers); see "Several processes" in the README.
pub const RILL_SHARING_PROCESSES: rill_sharing = rill_sharing(1);

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
/// Waits for handler calls in flight (except the calling handler's own;
/// called from a handler of another broker's subscription, for none: they
/// end behind it, so two handlers that close each other's brokers cannot
/// wait for each other for ever). Idempotent; NULL is a no-op. In a child of `fork`, on an inherited
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

/// Calls `each(user_data, stats)` once for every live subscription of the
/// broker, in name order, with its full stats: the strings `name`, `pattern`
/// and `last_error` are set, borrowed for that call only. A snapshot, taken
/// before the first call; the callback may call any rill function
/// (subscribing or freeing included), which the snapshot does not see.
/// `RILL_ERR_CLOSED` once the broker is closed.
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
        for st in b.open()?.subscriptions() {
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
