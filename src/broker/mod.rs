//! The broker: topics, routing, publishing and push subscriptions.
//!
//! * **Topics** are created explicitly (or on first publish with
//!   `auto_create_topics`), each with one or more partitions, each partition a
//!   [`Log`](crate::log::Log).
//! * **Publishing** looks the topic up in a map read lock-free (see "The
//!   topic map" in `control/mod.rs` and `topic_map.rs`), picks the
//!   partition (key hash, or per-thread round-robin),
//!   appends to its log, then signals the partition's listeners (see
//!   `partition/signal.rs`). A [`Publisher`] skips the lookup.
//! * **Routing** happens when topics and subscriptions are created, not per
//!   message: a subscription is attached to every partition of every topic its
//!   pattern matches, now or later (new topics are matched against an index of
//!   patterns), so a publish only walks its partition's listener list.
//! * **Subscriptions** are drained by a shared worker pool or a dedicated
//!   thread; see [`Subscription`].
//!
//! The control plane (`control/`: creating and deleting topics, subscribing,
//! closing, consumer groups) takes one mutex. A publish takes it only when it
//! creates a topic: its own under `auto_create_topics`, or `$dlq/<topic>`
//! the first time a schema dead-letters a record. Delivery takes it only
//! off the per-message path: at the end of each drain round of a named
//! subscription under `Fsync::Always` (`persist_acks`, to snapshot its
//! acknowledged positions), when a shared member lets go of a partition or
//! its handler overruns `ack_timeout`, when an anonymous subscription's
//! first dead letter creates its dead-letter topic, and in a `Consumer`:
//! in `poll`, at each check for members whose session ran out
//! (`expel_idle`, due when the earliest session could run out) and after a
//! rebalance, and on every commit and nack. Publishing itself (the paths
//! off the common one: schemas, ids, batches) is in `publish.rs`.

mod barrier;
mod consumer;
mod control;
mod dead_letter;
mod dedupe;
mod delivered;
mod dispatch;
mod doorbell;
pub(crate) mod filter;
mod flusher;
mod group;
#[cfg(loom)]
#[doc(hidden)]
pub mod loom_harness;
#[cfg(not(loom))]
mod mapped_page;
pub(crate) mod names;
mod partition;
mod publish;
pub(crate) mod schema;
mod shared;
mod store;
pub(crate) mod subscription;
pub(crate) mod topic;
mod topic_map;
pub(crate) mod waiters;

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

pub use self::control::BrokerConfig;
pub use self::control::directory::DirectoryConsumer;
#[doc(hidden)]
pub use self::control::shared_procs::set_look_fallback as set_shared_look_fallback;
use self::control::{BrokerInner, Control, TopicMap, entry, topic_of};
#[doc(hidden)]
pub use self::store::disable_death_watch;
use consumer::ConsumerCore;
pub use consumer::{
    Consumer, ConsumerOptions, ConsumerStart, ConsumerStats, DEFAULT_SESSION_TIMEOUT, GroupPartition, GroupStats,
    Polled,
};
pub use dedupe::MAX_DEDUPE_IDS;
pub use delivered::Delivered;
pub use dispatch::{DEFAULT_PRIORITY, MAX_PRIORITY, PRIORITY_AGING_TAKES};
use dispatch::{Timer, WorkerPool};
use doorbell::Doorbell;
pub use filter::Filter;
pub use names::{MAX_NAME_LEN, MAX_PATTERN_ANY, MAX_PATTERN_SEGMENTS, MAX_SUBSCRIPTION_NAME_LEN, Pattern};
pub use publish::{Position, Published};
use publish::{publish_batch_outcome_to, publish_batch_to, publish_slow};
pub use schema::{OnInvalid, SCHEMA_ATTRIBUTE, Schema, ValidatorFn};
use subscription::HandlerKind;
pub use subscription::{
    Ack, BatchHandler, DEFAULT_MAX_ATTEMPTS, DeadLetterCallback, DeliveryMode, Handler, LagCallback, Message, Overflow,
    PartitionLag, RetryBackoff, StartPosition, Subscription, SubscriptionOptions, SubscriptionState, SubscriptionStats,
};
pub use topic::{
    Cleanup, DEFAULT_DEDUPE_WINDOW_MS, DEFAULT_DELETE_RETENTION_MS, MAX_PARTITIONS, TopicOptions, partition_for_key,
};
use topic::{Topic, Wait};

use crate::error::{Error, PublishFailure, Result};
use crate::log::{Record, Sharing};
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::thread;
use crate::sync::{Arc, Mutex};

/// Size and progress of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionStats {
    /// Partition index.
    pub partition: u32,
    /// Oldest retained offset.
    pub first_offset: u64,
    /// Next offset to be assigned.
    pub next_offset: u64,
    /// Memory held by retained segments.
    pub retained_bytes: u64,
    /// Subscriptions and consumers reading it.
    pub listeners: usize,
    /// Records that recovery dropped from the damaged or torn tail of this
    /// partition's log when the broker opened its data directory (0 in memory).
    /// It counts the records it could still recognise: whole records in files
    /// after the cut; the bytes after a damaged record in its own file cannot
    /// be split into records, so they count only in the bytes figure (and
    /// only in a file used once: a recycled one holds stale bytes there).
    pub recovered_truncated_records: u64,
    /// Bytes recovery dropped with them.
    pub recovered_truncated_bytes: u64,
    /// True if recovery cut this partition at damage inside an older
    /// (sealed) segment, because the broker was opened with `repair`.
    pub recovered_repaired: bool,
    /// Consumer group commits and durable subscription positions that
    /// pointed past the end recovery left in this partition (a cut below
    /// them), reset to that end when the broker opened its data directory,
    /// so that what is published afterwards is delivered (0 in memory, and
    /// for a clean restart). Each reset is also logged (warning).
    pub recovered_offsets_reset: u64,
    /// Sealed segment files of this partition whose completion marker is not
    /// written yet (0 in memory). The broker's flusher writes it within an
    /// interval under `Interval` and `Never` (`Always` appends write it):
    /// from then on, damage in the file is reported as `Corrupt` by the next
    /// open, even after the process was killed. See `Log::flusher_round`.
    pub unmarked_segments: usize,
    /// Messages compaction removed from this partition (0 unless the topic
    /// is compacted; see [`Cleanup`]).
    pub compacted_messages: u64,
    /// Their bytes, as they took in the log.
    pub compacted_bytes: u64,
    /// Compaction passes run over this partition.
    pub compaction_passes: u64,
    /// Distinct keys with a message kept after the last pass (a tombstone
    /// not yet expired counts).
    pub compaction_keys: u64,
}

/// Size and progress of a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicStats {
    /// Topic name.
    pub name: String,
    /// Per partition.
    pub partitions: Vec<PartitionStats>,
    /// Messages ever published to it.
    pub publish_count: u64,
    /// Sum of the partitions' retained bytes.
    pub retained_bytes: u64,
    /// Publishes answered as duplicates by the dedupe window (nothing
    /// appended; see `TopicOptions::dedupe_window_ms`).
    pub dedupe_duplicates: u64,
    /// Ids in the dedupe window now (at most [`MAX_DEDUPE_IDS`]). On a
    /// directory shared by processes, each process has a window of its
    /// own, which learns the others' ids from the log at its own publishes
    /// with an id: in a process that has published none, 0.
    pub dedupe_ids: u64,
    /// Ids dropped from a full dedupe window before their window ended, the
    /// oldest first: a retry of one of them is appended again.
    pub dedupe_evicted: u64,
    /// Publishes that found their id being appended by another publisher
    /// at that moment, and waited for that append (then returned its
    /// position as a duplicate, or appended their own if it failed).
    pub dedupe_waits: u64,
    /// Messages compaction removed, summed over the partitions.
    pub compacted_messages: u64,
    /// Their bytes.
    pub compacted_bytes: u64,
    /// Compaction passes, summed over the partitions.
    pub compaction_passes: u64,
    /// Distinct keys kept, summed over the partitions (a key lives in one
    /// partition).
    pub compaction_keys: u64,
}

/// A durable (named) subscription of the data directory and the process
/// holding it (see [`Broker::named_subscriptions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NamedSubscription {
    /// Its name.
    pub name: String,
    /// The pid of the process whose subscription holds the name now, this
    /// one's included; `None` if no live process holds it (its positions
    /// wait for the next subscriber of the name).
    pub holder_pid: Option<u32>,
}

/// A live push subscription of the data directory and the process it lives
/// in (see [`Broker::directory_subscriptions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DirectorySubscription {
    /// The pid of the process whose broker has it.
    pub pid: u32,
    /// True if it is this broker's (then `stats` is what
    /// [`Broker::subscriptions`] reports of it).
    pub this_broker: bool,
    /// A durable (named, not shared) subscription.
    pub durable: bool,
    /// A member of a shared subscription.
    pub shared: bool,
    /// Its statistics. Another broker's are read from what that broker
    /// published at the end of the subscription's last drain round: its
    /// name, pattern, dead-letter topic, priority, counters, state and total
    /// `lag` as that round left them (`Idle` if it left it caught up);
    /// `partitions` is empty, `last_error` and `closed_reason` are `None`
    /// and the queue-wait figures are zero (they stay with its own
    /// process's `stats`).
    pub stats: SubscriptionStats,
}

/// A live member of a consumer group on one topic and the process it lives
/// in (see [`Broker::group_members`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupMember {
    /// The pid of the member's process.
    pub pid: u32,
    /// The member's id, unique in its process.
    pub id: u64,
    /// The partitions it owns, ascending. Across processes, ownership is
    /// known per process: when one process has several members of the
    /// group, each lists every partition their process owns.
    pub partitions: Vec<u32>,
}

/// Closes the broker when the last [`Broker`] handle is dropped.
struct Handle {
    inner: Arc<BrokerInner>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.inner.close();
        if self.inner.forked() {
            // A copy inherited across `fork` is leaked by design: dropping
            // its parts would join worker threads that do not exist in this
            // process and close the parent's files (see `BrokerInner::forked`).
            std::mem::forget(self.inner.clone());
        }
    }
}

/// An in-process message broker. Cheap to clone; clones share the broker,
/// which closes when the last clone is dropped (or on [`Broker::close`]).
///
/// # Fork
///
/// A child of `fork` inherits a copy of the broker but none of its threads,
/// and shares its data directory with the parent. The only thing a child
/// may do with an inherited broker is drop it or close it: that marks the
/// copy closed and leaks it, quietly, without joining threads, flushing, or
/// touching the directory or its lock. Leave the subscriptions, consumers
/// and publishers made from it alone there (`std::mem::forget` them, or end
/// the child with `exec` or `_exit`); open a new broker in the child instead.
#[derive(Clone)]
pub struct Broker {
    handle: Arc<Handle>,
}

impl Broker {
    /// Starts a broker: its worker pool and retry timer.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::{Broker, BrokerConfig, Record, TopicOptions};
    ///
    /// # let dir = std::env::temp_dir().join(format!("rill-doctest-broker-new-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// let config = BrokerConfig { data_dir: Some(dir.clone()), ..BrokerConfig::default() };
    /// let broker = Broker::new(config.clone())?;
    /// broker.create_topic("orders", &TopicOptions::default())?;
    /// broker.publish("orders", &Record::new(b"o-1"))?;
    /// drop(broker);
    ///
    /// // Opened again on the same directory, the broker has the topic and its message.
    /// let broker = Broker::new(config)?;
    /// assert_eq!(broker.topic_stats("orders")?.publish_count, 1);
    /// # drop(broker);
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn new(config: BrokerConfig) -> Result<Broker> {
        let workers = match config.worker_threads {
            Some(0) => return Err(Error::InvalidArgument("worker_threads must be at least 1".into())),
            Some(n) if n > 1024 => return Err(Error::InvalidArgument("worker_threads must be at most 1024".into())),
            Some(n) => n,
            None => thread::available_parallelism().map_or(2, |n| n.get()),
        };
        // Validate the default topic options once, up front (without
        // mapping any segment).
        config.default_topic.validate()?;
        crate::clock::warm_up();
        // Before any publisher of this broker exists: from here on a publish
        // needs no fence of its own to meet a listener being added.
        barrier::register();
        let id = crate::sync::unique_id();
        // A thread that cannot be started is ResourceExhausted; whatever was
        // started before it is stopped and joined, so a failed `new` leaves
        // nothing running.
        let pool = Arc::new(WorkerPool::start(workers)?);
        let timer = match Timer::start() {
            Ok(timer) => Arc::new(timer),
            Err(e) => {
                pool.stop();
                return Err(e);
            }
        };
        // The data directory (if any) is opened last of all that can fail
        // cheaply, and its lock goes with `opened` if anything after fails.
        let opened = match BrokerInner::open_data_dir(&config) {
            Ok(opened) => opened,
            Err(e) => {
                pool.stop();
                timer.stop();
                return Err(e);
            }
        };
        let (store, topics, control, bell) = match opened {
            Some((store, topics, control, bell)) => (Some(store), topics, control, bell),
            None => (None, HashMap::new(), Control::default(), None),
        };
        // Processes mode: the registry other processes list this broker's
        // subscriptions from (see `store/registry.rs`).
        let registry = match (&store, config.sharing) {
            (Some(store), Sharing::Processes) => match store.open_registry() {
                Ok(registry) => Some(registry),
                Err(e) => {
                    pool.stop();
                    timer.stop();
                    return Err(e);
                }
            },
            _ => None,
        };
        // Processes mode: the thread that wakes this broker's listeners for
        // other processes' publishes, watching every partition it has.
        let doorbell = match bell {
            Some(bell) => match Doorbell::start(bell) {
                Ok(d) => {
                    for t in topics.values() {
                        BrokerInner::watch(&d, t);
                    }
                    Some(d)
                }
                Err(e) => {
                    pool.stop();
                    timer.stop();
                    return Err(e);
                }
            },
            None => None,
        };
        // With the doorbell: the watch of the other members' processes.
        let deaths = match &doorbell {
            Some(d) => match store::Deaths::new() {
                Ok(deaths) => Some(std::sync::Arc::new(deaths)),
                Err(e) => {
                    d.stop();
                    pool.stop();
                    timer.stop();
                    return Err(e);
                }
            },
            None => None,
        };
        let map = TopicMap::new();
        for (name, topic) in topics {
            // The names of a map's keys are distinct: no insert is refused.
            let _ = map.insert(name, entry(&topic));
        }
        let inner = Arc::new(BrokerInner {
            id,
            pid: std::process::id(),
            config,
            closed: AtomicBool::new(false),
            topics: map,
            control: Mutex::new(control),
            pool,
            timer,
            store: Mutex::new(store),
            flusher: Mutex::new(None),
            flush_poke: Mutex::new(None),
            flush_due: std::sync::OnceLock::new(),
            expiry: Mutex::new(None),
            compactor: Mutex::new(None),
            ack_watch: Mutex::new(None),
            shared_look: Mutex::new(None),
            placeholder: Mutex::new(None),
            doorbell,
            deaths,
            registry,
        });
        let handle = Arc::new(Handle { inner });
        // Processes mode: topics other processes create or delete from now
        // on (and since the open read the list) reach this broker. (Under
        // loom there is no doorbell: see `Doorbell`.)
        #[cfg(not(loom))]
        if let Some(doorbell) = &handle.inner.doorbell {
            let weak: std::sync::Weak<BrokerInner> = Arc::downgrade(&handle.inner);
            doorbell.watch_members(weak.clone());
            doorbell.watch_topics(weak.clone());
        }
        // A member's process that exits is told as an announced change is.
        #[cfg(not(loom))]
        if let Some(deaths) = &handle.inner.deaths {
            let weak: std::sync::Weak<BrokerInner> = Arc::downgrade(&handle.inner);
            deaths.tell_to(std::sync::Arc::new(move || {
                if let Some(broker) = weak.upgrade() {
                    doorbell::MembersWatch::members_changed(&*broker);
                }
            }));
        }
        // On failure the handle's drop closes the broker (and its directory).
        BrokerInner::start_flusher(&handle.inner)?;
        handle.inner.resume_expiry()?;
        Ok(Broker { handle })
    }

    fn inner(&self) -> &Arc<BrokerInner> {
        &self.handle.inner
    }

    /// Creates a topic. Names are `/`-separated non-empty segments, at most
    /// 255 bytes, without NUL or `*`; names starting with `$` are reserved.
    ///
    /// [`Error::TopicExists`] if a topic of that name exists: one this
    /// broker has, or, on a data directory shared by processes
    /// (`Sharing::Processes`), one another process created first (even in
    /// a race, whether its options match these or not). That topic is
    /// joined, with the options it was made with, before the error
    /// returns, so it is usable at once. Of creates racing for one name,
    /// exactly one is `Ok`, and its options are the topic's.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::{Broker, BrokerConfig, Error, TopicOptions};
    ///
    /// let broker = Broker::new(BrokerConfig::default())?;
    /// broker.create_topic("shop/orders", &TopicOptions::with_partitions(4))?;
    /// assert_eq!(broker.topic_stats("shop/orders")?.partitions.len(), 4);
    /// assert!(matches!(broker.create_topic("shop/orders", &TopicOptions::default()), Err(Error::TopicExists(_))));
    /// assert!(matches!(broker.create_topic("shop/*", &TopicOptions::default()), Err(Error::InvalidTopic { .. })));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn create_topic(&self, name: &str, options: &TopicOptions) -> Result<()> {
        names::validate_user_topic(name)?;
        self.inner().create_topic(name, options).map(drop)
    }

    /// The names of all topics, sorted. Taken without a lock while topics
    /// may be created or deleted: every topic that exists for the whole
    /// call is listed, one created or deleted during it may or may not be.
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// broker.create_topic("payments", &TopicOptions::default())?;
    /// broker.create_topic("orders", &TopicOptions::default())?;
    /// assert_eq!(broker.topics(), ["orders", "payments"]);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn topics(&self) -> Vec<String> {
        let mut v: Vec<String> = self.inner().topics.names().iter().map(|k| k.to_string()).collect();
        v.sort_unstable();
        v
    }

    /// Publishes one message and returns where it landed. If a `Block`
    /// subscriber is at its lag limit, waits for room up to the broker's
    /// `publish_timeout`, then fails with `Timeout`.
    ///
    /// From the handler of a `Block` subscriber that is itself the one at its
    /// limit, waiting would wait for that handler (room comes only when it
    /// returns), so the publish fails at once with `Full`, not `Timeout` or a
    /// wait for ever: the same error `try_publish` gives, since the topic is
    /// full and the call did not wait. Waits for other subscribers are
    /// unchanged. Every publish call that waits (`publish_timeout`,
    /// `publish_batch`, [`Publisher`]) does the same.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::{Position, Record};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let first = broker.publish("orders", &Record::new(b"o-1"))?;
    /// let second = broker.publish("orders", &Record::new(b"o-2").with_key(b"customer-7"))?;
    /// assert_eq!(first, Position { partition: 0, offset: 0 });
    /// assert_eq!(second, Position { partition: 0, offset: 1 });
    /// # Ok::<(), rill::Error>(())
    /// ```
    #[inline]
    pub fn publish(&self, topic: &str, record: &Record<'_>) -> Result<Position> {
        self.publish_with(topic, record, self.inner().default_wait())
    }

    /// Like [`Broker::publish`], waiting at most `timeout` for room.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use rill::Record;
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// // No `Block` subscriber is at its limit, so this does not wait.
    /// let at = broker.publish_timeout("orders", &Record::new(b"o-1"), Duration::from_millis(100))?;
    /// assert_eq!(at.offset, 0);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn publish_timeout(&self, topic: &str, record: &Record<'_>, timeout: Duration) -> Result<Position> {
        self.publish_with(topic, record, Wait::For(Some(timeout)))
    }

    /// Like [`Broker::publish`], but fails at once with `Full` instead of
    /// waiting for a `Block` subscriber.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::sync::mpsc;
    /// # use std::time::Duration;
    /// use rill::{Ack, Error, Overflow, Record, SubscriptionOptions};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// // A subscriber that may fall at most one message behind, and is stuck.
    /// let (release, stuck) = mpsc::channel::<()>();
    /// let options = SubscriptionOptions { overflow: Overflow::Block, lag_limit: Some(1), ..Default::default() };
    /// let sub = broker.subscribe("orders", options, move |_| {
    ///     stuck.recv().ok();
    ///     Ack::Success
    /// })?;
    /// broker.try_publish("orders", &Record::new(b"o-1"))?;
    /// assert!(matches!(broker.try_publish("orders", &Record::new(b"o-2")), Err(Error::Full(_))));
    /// release.send(()).ok();
    /// assert!(sub.wait_idle(Duration::from_secs(5))?);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn try_publish(&self, topic: &str, record: &Record<'_>) -> Result<Position> {
        self.publish_with(topic, record, Wait::No)
    }

    #[inline]
    fn publish_with(&self, topic: &str, record: &Record<'_>, wait: Wait) -> Result<Position> {
        let inner = self.inner();
        inner.check_open()?;
        // Borrow the topic from the map without touching its reference count,
        // which concurrent publishers would otherwise contend on.
        let Some(found) = inner.topics.get(topic) else {
            let t = inner.topic_for_publish(topic)?;
            if record.may_have_id() || t.schema.is_set() {
                return Ok(publish_slow(inner, &t, record, wait)?.position);
            }
            let p = t.route(record.key);
            let offset = p.publish(record, wait).map_err(|f| t.publish_failed(f))?;
            return Ok(Position { partition: p.index, offset });
        };
        let t = topic_of(&found);
        // The branches a record without an id pays for the dedupe window
        // and the schema: a field test and a load of the schema's flag.
        if record.may_have_id() || t.schema.is_set() {
            return Ok(publish_slow(inner, t, record, wait)?.position);
        }
        let p = t.route(record.key);
        // The `?` turns a `PublishFailure` into its `Error` out of line; a
        // failure that raced a delete of the topic reports the delete.
        let offset = p.publish(record, wait).map_err(|f| t.publish_failed(f))?;
        Ok(Position { partition: p.index, offset })
    }

    /// Like [`Broker::publish`], also saying whether the record was a
    /// duplicate: it carried an id (`Record::with_id`) that the topic
    /// appended within its `dedupe_window_ms`, so nothing was appended and
    /// the position is the first record's. Publishers racing with one id
    /// append it once: the others wait for that append and get its position.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::Record;
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let first = broker.publish_outcome("orders", &Record::new(b"o-1").with_id("order-1"))?;
    /// let retry = broker.publish_outcome("orders", &Record::new(b"o-1").with_id("order-1"))?;
    /// assert!(!first.duplicate && retry.duplicate);
    /// assert_eq!(retry.position, first.position);
    /// assert_eq!(broker.topic_stats("orders")?.publish_count, 1);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn publish_outcome(&self, topic: &str, record: &Record<'_>) -> Result<Published> {
        self.publish_outcome_with(topic, record, self.inner().default_wait())
    }

    /// Like [`Broker::publish_outcome`], but fails at once with `Full`
    /// instead of waiting for a `Block` subscriber (as [`Broker::try_publish`]).
    /// A publisher of the same id appending at that moment is still waited
    /// for: its append decides whether this one is a duplicate.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::Record;
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// assert!(!broker.try_publish_outcome("orders", &Record::new(b"o-1").with_id("order-1"))?.duplicate);
    /// assert!(broker.try_publish_outcome("orders", &Record::new(b"o-1").with_id("order-1"))?.duplicate);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn try_publish_outcome(&self, topic: &str, record: &Record<'_>) -> Result<Published> {
        self.publish_outcome_with(topic, record, Wait::No)
    }

    fn publish_outcome_with(&self, topic: &str, record: &Record<'_>, wait: Wait) -> Result<Published> {
        let inner = self.inner();
        inner.check_open()?;
        let t = inner.topic_for_publish(topic)?;
        publish_slow(inner, &t, record, wait)
    }

    /// Publishes many messages; returns their positions in input order.
    /// Keyed messages go to their key's partition, unkeyed ones round-robin;
    /// each partition's share is appended with one reservation per segment,
    /// in input order. Every message is checked before any is published.
    /// Waits for `Block` subscribers like [`Broker::publish`].
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::Record;
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let records = [Record::new(b"o-1"), Record::new(b"o-2"), Record::new(b"o-3")];
    /// let positions = broker.publish_batch("orders", &records)?;
    /// let offsets: Vec<u64> = positions.iter().map(|p| p.offset).collect();
    /// assert_eq!(offsets, [0, 1, 2]);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn publish_batch(&self, topic: &str, records: &[Record<'_>]) -> Result<Vec<Position>> {
        let t = self.inner().topic_for_publish(topic)?;
        publish_batch_to(self.inner(), &t, records, self.inner().default_wait())
    }

    /// [`Broker::publish_batch`] with each message's [`Published`]: records
    /// with an id the topic appended within its dedupe window (or earlier in
    /// the same batch) are not appended again.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::Record;
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let records = [Record::new(b"a").with_id("1"), Record::new(b"b").with_id("2"), Record::new(b"a").with_id("1")];
    /// let done = broker.publish_batch_outcome("orders", &records)?;
    /// assert_eq!(done.iter().map(|p| p.duplicate).collect::<Vec<_>>(), [false, false, true]);
    /// assert_eq!(done[2].position, done[0].position);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn publish_batch_outcome(&self, topic: &str, records: &[Record<'_>]) -> Result<Vec<Published>> {
        let t = self.inner().topic_for_publish(topic)?;
        publish_batch_outcome_to(self.inner(), &t, records, self.inner().default_wait())
    }

    /// A handle that publishes to one topic without looking it up each time.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::Record;
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let orders = broker.publisher("orders")?;
    /// for i in 0..3u64 {
    ///     assert_eq!(orders.publish(&Record::new(b"order"))?.offset, i);
    /// }
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn publisher(&self, topic: &str) -> Result<Publisher> {
        let t = self.inner().topic_for_publish(topic)?;
        Ok(Publisher { broker: self.inner().clone(), topic: t })
    }

    /// Subscribes `handler` to every topic matching `pattern` (now and
    /// later). See [`SubscriptionOptions`] for what can be chosen.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use std::time::Duration;
    /// use rill::{Ack, Record, SubscriptionOptions};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("shop/orders", &TopicOptions::default())?;
    ///
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let sink = seen.clone();
    /// let sub = broker.subscribe("shop/*", SubscriptionOptions::default(), move |m| {
    ///     sink.lock().unwrap().push((m.topic().to_owned(), m.payload().to_vec()));
    ///     Ack::Success
    /// })?;
    /// broker.publish("shop/orders", &Record::new(b"o-1"))?;
    /// assert!(sub.wait_idle(Duration::from_secs(5))?);
    /// assert_eq!(*seen.lock().unwrap(), [("shop/orders".to_owned(), b"o-1".to_vec())]);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn subscribe<F>(&self, pattern: &str, options: SubscriptionOptions, handler: F) -> Result<Subscription>
    where
        F: FnMut(&Message<'_>) -> Ack + Send + 'static,
    {
        BrokerInner::subscribe(self.inner(), pattern, options, HandlerKind::One(Box::new(handler)))
    }

    /// Like [`Broker::subscribe`], with a handler that takes runs of
    /// consecutive messages of one partition at once (at most 64; on the
    /// worker pool the first run is one message and later runs are sized to
    /// take about 250 µs of the handler's time, 20 µs once a subscription
    /// of higher priority has used the pool, so a slow handler does not
    /// hold a worker that other subscriptions wait for): it fills
    /// one ack per message (pre-set to `Success`) and returns how many
    /// messages, from the front, it handled; the others come again in the
    /// next call. Cheaper per message when a call has a fixed cost (a
    /// foreign-language callback). Redeliveries, dead letters and filters
    /// work as for [`Broker::subscribe`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use std::time::Duration;
    /// use rill::{Record, SubscriptionOptions};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let offsets = Arc::new(Mutex::new(Vec::new()));
    /// let sink = offsets.clone();
    /// let sub = broker.subscribe_batch("orders", SubscriptionOptions::default(), move |messages, _acks| {
    ///     sink.lock().unwrap().extend(messages.iter().map(|m| m.offset()));
    ///     messages.len() // every message handled; the acks stay `Success`
    /// })?;
    /// broker.publish_batch("orders", &[Record::new(b"o-1"), Record::new(b"o-2")])?;
    /// assert!(sub.wait_idle(Duration::from_secs(5))?);
    /// assert_eq!(*offsets.lock().unwrap(), [0, 1]);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn subscribe_batch<F>(&self, pattern: &str, options: SubscriptionOptions, handler: F) -> Result<Subscription>
    where
        F: FnMut(&[Message<'_>], &mut [Ack]) -> usize + Send + 'static,
    {
        BrokerInner::subscribe(self.inner(), pattern, options, HandlerKind::Many(Box::new(handler)))
    }

    /// A pull consumer of `topic`, a new member of `group`. The group
    /// divides the topic's partitions among its live members (any number);
    /// a partition starts from the group's committed offset, or where
    /// `options` says if it has none. See [`Consumer`]. A group name follows
    /// the topic name rules; without a `dead_letter_topic` in `options` it is
    /// at most [`MAX_SUBSCRIPTION_NAME_LEN`] bytes (250), as a durable
    /// subscription's name is, so that its dead-letter topic `$dlq/<group>`
    /// is a topic name too. `InvalidArgument` otherwise.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use rill::{ConsumerOptions, Record};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// broker.publish("orders", &Record::new(b"o-1"))?;
    /// let mut consumer = broker.consumer("billing", "orders", ConsumerOptions::default())?;
    /// let batch = consumer.poll(10, Duration::from_secs(5))?;
    /// assert_eq!(batch.len(), 1);
    /// assert_eq!(batch[0].payload(), b"o-1");
    /// consumer.commit()?;
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn consumer(&self, group: &str, topic: &str, options: ConsumerOptions) -> Result<Consumer> {
        let inner = self.inner();
        names::validate_group(group)?;
        if options.session_timeout.is_zero() {
            return Err(Error::InvalidArgument("a consumer's session_timeout must be positive".into()));
        }
        if options.max_attempts == 0 {
            return Err(Error::InvalidArgument("max_attempts must be at least 1".into()));
        }
        match &options.dead_letter_topic {
            Some(dlq) => names::validate_dead_letter_topic(dlq)?,
            None => names::validate_group_for_default_dead_letters(group)?,
        }
        let t = inner.topic_or_listed(topic)?;
        let core = Arc::new(ConsumerCore::new(crate::sync::unique_id(), group.to_owned(), t, &options));
        if core.dead_letter_topic() == topic {
            return Err(Error::InvalidArgument(format!(
                "the dead-letter topic {topic:?} is the topic the consumer reads: its dead letters would come back to it"
            )));
        }
        let host: Box<dyn consumer::GroupHost> = match inner.config.sharing {
            Sharing::Exclusive => Box::new(inner.clone()),
            // A group spanning processes (see `store/membership.rs`).
            Sharing::Processes => Box::new(control::groups::ProcessMember::new(inner.clone())),
        };
        let id = core.id;
        let mut consumer = Consumer::new(core, host, options.start)?;
        // Processes mode: listed for other processes, its counters
        // published at the end of each poll (see `store/registry.rs`).
        if let Some(registry) = &inner.registry {
            consumer.list_in(store::Registry::slot(registry, id)?);
        }
        Ok(consumer)
    }

    /// A consumer group's committed offsets and lag on `topic`, whether or
    /// not a consumer of it is live (`NotFound` if the group never consumed it).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use rill::{ConsumerOptions, Record};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// broker.publish_batch("orders", &[Record::new(b"o-1"), Record::new(b"o-2")])?;
    /// let mut consumer = broker.consumer("billing", "orders", ConsumerOptions::default())?;
    /// assert_eq!(consumer.poll(1, Duration::from_secs(5))?.len(), 1);
    /// consumer.commit()?;
    /// consumer.close();
    ///
    /// let stats = broker.group_stats("billing", "orders")?;
    /// assert_eq!(stats.partitions[0].committed, Some(1));
    /// assert_eq!(stats.lag, 1);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn group_stats(&self, group: &str, topic: &str) -> Result<GroupStats> {
        let inner = self.inner();
        let t = inner.topic_or_listed(topic)?;
        let not_found = || Error::NotFound(format!("consumer group {group:?} on topic {topic:?}"));
        // Across processes, the group's commits are in the data directory;
        // a group whose live members have committed nothing yet has none
        // there, and reads as one in a single process does: no commit.
        let n = t.partitions.len() as u32;
        let mut shared = inner.shared_group_committed(group, topic, n)?;
        if shared.is_none()
            && inner.config.sharing == Sharing::Processes
            && !self.group_members(group, topic)?.is_empty()
        {
            shared = Some(vec![None; n as usize]);
        }
        // Another process may have rolled past what this one has seen.
        for p in &t.partitions {
            p.log.follow_rolls()?;
        }
        let control = inner.control.lock();
        let committed = match (shared, inner.config.sharing) {
            (Some(c), _) => c,
            (None, Sharing::Processes) => return Err(not_found()),
            (None, Sharing::Exclusive) => {
                control.groups.get(&(group.to_owned(), t.name.clone())).ok_or_else(not_found)?.committed.clone()
            }
        };
        let partitions: Vec<GroupPartition> = t
            .partitions
            .iter()
            .map(|p| {
                let committed = committed.get(p.index as usize).copied().flatten();
                let end = p.log.end_offset();
                let position = committed.unwrap_or_else(|| p.log.first_offset());
                GroupPartition { partition: p.index, position, committed, end, lag: end.saturating_sub(position) }
            })
            .collect();
        Ok(GroupStats {
            group: group.to_owned(),
            topic: topic.to_owned(),
            lag: partitions.iter().map(|p| p.lag).sum(),
            partitions,
        })
    }

    /// A snapshot of every live subscription of this broker (closed ones
    /// are gone), sorted by name.
    ///
    /// With `Sharing::Processes` too, this broker's only: a
    /// [`SubscriptionStats`] has no place for the process that holds it, so
    /// a list mixing processes could not say which is whose (two processes
    /// may each have a subscription of the same pattern).
    /// [`directory_subscriptions`](Broker::directory_subscriptions) lists
    /// every process's, each with its pid.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::{Ack, SubscriptionOptions};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let options = SubscriptionOptions { name: Some("audit".into()), ..SubscriptionOptions::default() };
    /// let _audit = broker.subscribe("orders", options, |_| Ack::Success)?;
    /// let subs = broker.subscriptions();
    /// assert_eq!(subs.len(), 1);
    /// assert_eq!((subs[0].name.as_str(), subs[0].pattern.as_str()), ("audit", "orders"));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn subscriptions(&self) -> Vec<SubscriptionStats> {
        let subs: Vec<Arc<subscription::SubCore>> = self.inner().control.lock().subs.values().cloned().collect();
        // Stats are taken without the control lock: they lock each
        // subscription's own state.
        // A listing leaves each one's queue-wait figures for its own `stats`.
        let mut v: Vec<SubscriptionStats> = subs.iter().map(|s| subscription::stats(s, false)).collect();
        v.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Every live push subscription of the data directory, in every
    /// process, each with the pid of its process, sorted by (pid, name).
    ///
    /// With `Sharing::Processes`, each broker on the directory publishes its
    /// subscriptions there (names when they come and go, counters at the end
    /// of each drain round: see `store/registry.rs`); this broker's are
    /// listed from memory, as [`subscriptions`](Broker::subscriptions)
    /// lists them, the others' from what their brokers published. A broker
    /// whose process died is left out at once (the kernel let go of its
    /// lock; its files are removed on the way) and so is a closed one. The
    /// listing takes no lock another process waits on. Linux only for other
    /// processes (the holders are read from `/proc/locks`): elsewhere it
    /// lists this broker's. With `Sharing::Exclusive`, this broker's, as
    /// `subscriptions` does.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::{Ack, SubscriptionOptions};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let options = SubscriptionOptions { name: Some("audit".into()), ..SubscriptionOptions::default() };
    /// let _audit = broker.subscribe("orders", options, |_| Ack::Success)?;
    /// let listed = broker.directory_subscriptions()?;
    /// assert_eq!(listed[0].stats.name, "audit");
    /// assert_eq!(listed[0].pid, std::process::id());
    /// assert!(listed[0].this_broker && listed[0].durable);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn directory_subscriptions(&self) -> Result<Vec<DirectorySubscription>> {
        let inner = self.inner();
        inner.check_open()?;
        let subs: Vec<Arc<subscription::SubCore>> = inner.control.lock().subs.values().cloned().collect();
        let mut v: Vec<DirectorySubscription> = subs
            .iter()
            .map(|s| DirectorySubscription {
                pid: inner.pid,
                this_broker: true,
                durable: s.durable && !s.shared,
                shared: s.shared,
                stats: subscription::stats(s, false),
            })
            .collect();
        if let (Some(registry), Some(store)) = (&inner.registry, inner.store()) {
            for other in registry.others(store.root())?.subs {
                let (d, c) = (other.desc, other.counts);
                v.push(DirectorySubscription {
                    pid: other.pid,
                    this_broker: false,
                    durable: d.durable && !d.shared,
                    shared: d.shared,
                    stats: SubscriptionStats {
                        name: d.name,
                        pattern: d.pattern,
                        state: subscription::state_of_count(c.state),
                        delivered: c.delivered,
                        acked: c.acked,
                        filtered: c.filtered,
                        retried: c.retried,
                        dead_lettered: c.dead_lettered,
                        dropped: c.dropped,
                        missed: c.missed,
                        ack_timeouts: c.ack_timeouts,
                        lag: c.lag,
                        partitions: Vec::new(),
                        dead_letter_topic: d.dead_letter_topic,
                        closed_reason: None,
                        last_error: None,
                        priority: d.priority,
                        queue_waits: 0,
                        queue_wait_p50: Duration::ZERO,
                        queue_wait_p99: Duration::ZERO,
                        queue_wait_max_takes: 0,
                    },
                });
            }
        }
        v.sort_by(|a, b| (a.pid, &a.stats.name).cmp(&(b.pid, &b.stats.name)));
        Ok(v)
    }

    /// Every live pull consumer of the data directory, in every process,
    /// each with the pid of its process, its group, topic and counters,
    /// sorted by (pid, id): a member of a consumer group, whoever made it.
    ///
    /// With `Sharing::Processes`, each broker on the directory publishes its
    /// consumers there as it does its subscriptions (see
    /// [`directory_subscriptions`](Broker::directory_subscriptions)): a
    /// consumer's counters at the end of each of its polls. This broker's
    /// are listed from memory, with the counters their last poll left; a
    /// consumer whose process died, or whose broker closed, is left out at
    /// once. With `Sharing::Exclusive`, this broker's consumers.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use rill::{ConsumerOptions, Record};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// broker.publish_batch("orders", &[Record::new(b"o-1"), Record::new(b"o-2")])?;
    /// let mut consumer = broker.consumer("billing", "orders", ConsumerOptions::default())?;
    /// assert_eq!(consumer.poll(1, Duration::from_secs(5))?.len(), 1);
    /// let listed = broker.directory_consumers()?;
    /// assert_eq!((listed[0].group.as_str(), listed[0].topic.as_str()), ("billing", "orders"));
    /// assert_eq!((listed[0].pid, listed[0].this_broker), (std::process::id(), true));
    /// assert_eq!((listed[0].delivered, listed[0].lag), (1, 1));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn directory_consumers(&self) -> Result<Vec<DirectoryConsumer>> {
        self.inner().directory_consumers()
    }

    /// Every durable (named) subscription and the pid of the process that
    /// holds it, sorted by name.
    ///
    /// With `Sharing::Processes`, the whole data directory: every name a
    /// durable subscription of any process has taken since the name was
    /// last deleted ([`Broker::delete_durable`]), held now or not
    /// (`holder_pid: None`: its holder closed it or died; the kernel lets
    /// go of a dead process's name at once). A shared subscription's name
    /// is not listed, as in `Exclusive` mode. It is read without taking anything, so it never makes a
    /// subscriber of the name fail (see `store/holders.rs`; Linux only:
    /// elsewhere no name reads as held). With `Sharing::Exclusive`, this
    /// broker's live ones.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::{Ack, SubscriptionOptions};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let options = SubscriptionOptions { name: Some("audit".into()), ..SubscriptionOptions::default() };
    /// let _audit = broker.subscribe("orders", options, |_| Ack::Success)?;
    /// let names = broker.named_subscriptions()?;
    /// assert_eq!(names[0].name, "audit");
    /// assert_eq!(names[0].holder_pid, Some(std::process::id()));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn named_subscriptions(&self) -> Result<Vec<NamedSubscription>> {
        let inner = self.inner();
        inner.check_open()?;
        if let Some(store) = inner.store().filter(|_| inner.config.sharing == Sharing::Processes) {
            let held = store.named_holders()?;
            return Ok(held.into_iter().map(|(name, holder_pid)| NamedSubscription { name, holder_pid }).collect());
        }
        let pid = Some(std::process::id());
        let mut v: Vec<NamedSubscription> = (inner.control.lock().subs.values())
            .filter(|s| s.durable)
            .map(|s| NamedSubscription { name: s.name.clone(), holder_pid: pid })
            .collect();
        v.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        Ok(v)
    }

    /// The live members of consumer group `group` on `topic`, each with its
    /// process's pid and the partitions it owns, sorted by (pid, id); empty
    /// if none is live (`NoSuchTopic` if there is no such topic).
    ///
    /// With `Sharing::Processes`, the members of every process, read from
    /// the group's member files and partition locks without taking
    /// anything (see `store/holders.rs`; Linux only: elsewhere no member
    /// reads as live). A member whose process died is gone at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::ConsumerOptions;
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::with_partitions(2))?;
    ///
    /// let _billing = broker.consumer("billing", "orders", ConsumerOptions::default())?;
    /// let members = broker.group_members("billing", "orders")?;
    /// assert_eq!(members.len(), 1);
    /// assert_eq!((members[0].pid, members[0].partitions.as_slice()), (std::process::id(), &[0, 1][..]));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn group_members(&self, group: &str, topic: &str) -> Result<Vec<GroupMember>> {
        let inner = self.inner();
        let t = inner.topic_or_listed(topic)?;
        if let Some(store) = inner.store().filter(|_| inner.config.sharing == Sharing::Processes) {
            let held = store.group_holders(group, topic, t.partitions.len() as u32)?;
            return Ok(held
                .into_iter()
                .map(|m| GroupMember { pid: m.pid, id: m.id, partitions: m.partitions })
                .collect());
        }
        let pid = std::process::id();
        let control = inner.control.lock();
        let Some(g) = control.groups.get(&(group.to_owned(), t.name.clone())) else { return Ok(Vec::new()) };
        let mut v: Vec<GroupMember> = (g.members.iter())
            .map(|m| {
                let mut partitions = m.partitions.clone();
                partitions.sort_unstable();
                GroupMember { pid, id: m.core.id, partitions }
            })
            .collect();
        v.sort_unstable_by_key(|m| m.id);
        Ok(v)
    }

    /// Every consumer group's `(group, topic)` pair the broker keeps offsets
    /// for (live consumer or not), or that has a live consumer, sorted.
    /// With [`Sharing::Processes`], every such group of the data directory,
    /// whichever processes its consumers and commits are in.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::ConsumerOptions;
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let _billing = broker.consumer("billing", "orders", ConsumerOptions::default())?;
    /// assert_eq!(broker.groups(), [("billing".to_owned(), "orders".to_owned())]);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn groups(&self) -> Vec<(String, String)> {
        let inner = self.inner();
        let mut v: Vec<(String, String)> =
            inner.control.lock().groups.keys().map(|(g, t)| (g.clone(), t.to_string())).collect();
        // Across processes, those with commits or a live member in the
        // data directory.
        v.extend(inner.shared_group_list());
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Deletes a topic (`NoSuchTopic` if there is none; the broker's own `$`
    /// topics, such as dead-letter topics, may be deleted too):
    ///
    /// * subscriptions naming exactly this topic are closed, with the reason
    ///   "topic deleted" in their stats; wildcard subscriptions stop reading
    ///   it (a batch their handler is on is finished) and go on with their
    ///   other topics;
    /// * [`Publisher`]s and [`Consumer`]s still holding it fail with
    ///   `NoSuchTopic` (a blocked `poll` wakes to say so), and so does a
    ///   publish racing the delete that does not succeed;
    /// * the positions of consumer groups and durable subscriptions in it
    ///   are forgotten;
    /// * its memory is released once the last handle holding it (a
    ///   `Publisher` or `Consumer` of it) is dropped; subscriptions do not
    ///   hold it;
    /// * on a data directory, its files are removed; a crash during the
    ///   delete leaves the topic either whole or gone (see "Deleting a topic" in `store/mod.rs`);
    /// * with [`Sharing::Processes`], the topic goes for every broker on the
    ///   directory: each lets go of it as above when its doorbell thread is
    ///   rung for the change, and a process still reading its files keeps
    ///   them mapped until it lets go (see "Topics other processes create or
    ///   delete" in `broker/doorbell.rs`).
    ///
    /// A topic created again under the name is a new one, from offset 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::{Error, Record};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let orders = broker.publisher("orders")?;
    /// broker.delete_topic("orders")?;
    /// assert!(broker.topics().is_empty());
    /// assert!(matches!(orders.publish(&Record::new(b"late")), Err(Error::NoSuchTopic(_))));
    /// assert!(matches!(broker.delete_topic("orders"), Err(Error::NoSuchTopic(_))));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn delete_topic(&self, name: &str) -> Result<()> {
        self.inner().delete_topic(name)
    }

    /// Sets (or replaces) `topic`'s schema: each later publish checks its
    /// payload, and one that does not fit is refused with
    /// [`Error::Schema`] (`OnInvalid::Reject`, nothing appended) or sent to
    /// `$dlq/<topic>` with the reason in `rill.dlq.reason`
    /// (`OnInvalid::DeadLetter`, the publish returns its position there,
    /// [`Published::dead_lettered`]). Returns the schema's version: each
    /// change of the topic's schema (set, replace, remove) takes the next
    /// number, from 1; each appended record carries the version it was
    /// checked against ([`Delivered::schema_version`]). Records appended
    /// before are not checked again. A replacement while publishers run
    /// checks each record by the old schema or the new one, never by none,
    /// and returns once no call of the old validator is in flight (except
    /// from inside a validator call: see [`Broker::remove_schema`]).
    ///
    /// A JSON schema (draft 2020-12) that does not compile is
    /// `InvalidArgument` with the compiler's message; on a durable topic it
    /// is stored with the topic and comes back after a restart. A
    /// [`Schema::Validator`] lives with this broker only (and replaces a
    /// stored JSON schema, which is then removed from the disk).
    /// `NoSuchTopic` if the topic does not exist; `InvalidArgument` for
    /// `OnInvalid::DeadLetter` on a topic whose name is longer than
    /// [`MAX_SUBSCRIPTION_NAME_LEN`] bytes, whose `$dlq/<topic>` would be
    /// no valid name.
    ///
    /// On a data directory shared by processes (`Sharing::Processes`), the
    /// version is the directory's, and every other process follows the
    /// change once its doorbell has seen it (a validator function is then
    /// run by this broker only; the others check nothing until the next
    /// change, but their [`Broker::schema_version`] reads its version):
    /// see "Several processes" in the README.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::{Error, OnInvalid, Record, Schema};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let schema = r#"{"type":"object","required":["id"],"properties":{"id":{"type":"integer"}}}"#;
    /// assert_eq!(broker.set_schema("orders", Schema::Json(schema.into()), OnInvalid::Reject)?, 1);
    /// broker.publish("orders", &Record::new(br#"{"id":7}"#))?;
    /// let refused = broker.publish("orders", &Record::new(br#"{"id":"seven"}"#));
    /// assert!(matches!(refused, Err(Error::Schema(m)) if m.contains("/id")));
    /// assert_eq!(broker.topic_stats("orders")?.publish_count, 1);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn set_schema(&self, topic: &str, schema: Schema, on_invalid: OnInvalid) -> Result<u64> {
        self.inner().set_schema(topic, schema, on_invalid)
    }

    /// Removes `topic`'s schema (from the disk too, for a durable topic):
    /// later publishes are not checked. The version still advances, so a
    /// later schema gets a new number. Nothing happens if it has none.
    ///
    /// It returns once no call of the removed [`Schema::Validator`] is in
    /// flight, so the function is dropped by then, except when called from
    /// inside a validator call (any topic's, on this thread): then it
    /// returns at once. Waiting there could last for ever: a call in flight
    /// may be its caller a few frames up (topic A's validator publishes to
    /// B, whose validator removes A's schema), or a validator on another
    /// thread removing this thread's schema in turn. No new call of the
    /// removed function starts, and the last call in flight drops it.
    /// [`Broker::set_schema`] replacing a validator waits, or does not, the
    /// same way.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::{OnInvalid, Record, Schema};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// broker.set_schema("orders", Schema::Json(r#"{"type":"object"}"#.into()), OnInvalid::Reject)?;
    /// assert!(broker.publish("orders", &Record::new(b"not json")).is_err());
    /// broker.remove_schema("orders")?;
    /// assert_eq!(broker.schema_version("orders")?, 0);
    /// broker.publish("orders", &Record::new(b"not json"))?;
    /// assert_eq!(broker.set_schema("orders", Schema::Json("true".into()), OnInvalid::Reject)?, 3);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn remove_schema(&self, topic: &str) -> Result<()> {
        self.inner().remove_schema(topic)
    }

    /// The version of `topic`'s schema in force; 0 if it has none.
    ///
    /// On a data directory shared by processes (`Sharing::Processes`) it
    /// is the directory's: once this broker's doorbell has seen another
    /// process's change, it reads that change's version, a validator
    /// function's included, though only the broker it was set through runs
    /// a function (this one then checks nothing, and its records carry
    /// version 0). It reads a function's version until the next change,
    /// even after its broker is closed; a directory opened again by a
    /// first process, after every broker let go of it, has none.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::{OnInvalid, Schema};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// assert_eq!(broker.schema_version("orders")?, 0);
    /// broker.set_schema("orders", Schema::Validator(std::sync::Arc::new(|p| {
    ///     if p.len() <= 16 { Ok(()) } else { Err(format!("{} bytes; at most 16", p.len())) }
    /// })), OnInvalid::Reject)?;
    /// assert_eq!(broker.schema_version("orders")?, 1);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn schema_version(&self, topic: &str) -> Result<u64> {
        Ok(self.inner().topic(topic)?.schema.version())
    }

    /// Forgets a durable subscription's saved position, so the name starts
    /// afresh next time. `Busy` while a subscription of that name is live,
    /// `NotFound` if none saved a position.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::{Ack, Error, SubscriptionOptions};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let options = SubscriptionOptions { name: Some("audit".into()), ..SubscriptionOptions::default() };
    /// let audit = broker.subscribe("orders", options, |_| Ack::Success)?;
    /// assert!(matches!(broker.delete_durable("audit"), Err(Error::Busy(_))));
    /// audit.close();
    /// broker.delete_durable("audit")?;
    /// assert!(matches!(broker.delete_durable("audit"), Err(Error::NotFound(_))));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn delete_durable(&self, name: &str) -> Result<()> {
        self.inner().delete_durable(name)
    }

    /// Forgets a consumer group's committed offsets on `topic`. `Busy` while
    /// the group has a live consumer of it, `NotFound` if it has no offsets
    /// there.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use rill::{ConsumerOptions, Error, Record};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// broker.publish("orders", &Record::new(b"o-1"))?;
    /// let mut consumer = broker.consumer("billing", "orders", ConsumerOptions::default())?;
    /// consumer.poll(10, Duration::from_secs(5))?;
    /// consumer.commit()?;
    /// assert!(matches!(broker.delete_group("billing", "orders"), Err(Error::Busy(_))));
    /// consumer.close();
    /// broker.delete_group("billing", "orders")?;
    /// assert!(matches!(broker.group_stats("billing", "orders"), Err(Error::NotFound(_))));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn delete_group(&self, group: &str, topic: &str) -> Result<()> {
        self.inner().delete_group(group, topic)
    }

    /// Size and progress of a topic.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::{Record, TopicOptions};
    /// # use rill::{Broker, BrokerConfig};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    ///
    /// broker.create_topic("orders", &TopicOptions::with_partitions(2))?;
    /// let at = broker.publish("orders", &Record::new(b"o-1").with_key(b"customer-7"))?;
    /// let stats = broker.topic_stats("orders")?;
    /// assert_eq!(stats.publish_count, 1);
    /// assert_eq!(stats.partitions.len(), 2);
    /// assert_eq!(stats.partitions[at.partition as usize].next_offset, 1);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn topic_stats(&self, topic: &str) -> Result<TopicStats> {
        let t = self.inner().topic(topic)?;
        // Shared by processes: another process may have rolled past what
        // this one has seen; count its records too.
        for p in &t.partitions {
            p.log.follow_rolls()?;
        }
        let partitions: Vec<PartitionStats> = t
            .partitions
            .iter()
            .map(|p| {
                let s = p.log.stats();
                PartitionStats {
                    partition: p.index,
                    first_offset: s.first_offset,
                    next_offset: s.end_offset,
                    retained_bytes: s.retained_bytes,
                    listeners: p.listener_count(),
                    recovered_truncated_records: p.recovery.truncated_records,
                    recovered_truncated_bytes: p.recovery.truncated_bytes,
                    recovered_repaired: p.recovery.repaired,
                    // Relaxed: a statistic, written once before the broker
                    // is handed out.
                    recovered_offsets_reset: p.offsets_reset.load(Ordering::Relaxed),
                    unmarked_segments: s.unmarked_segments,
                    compacted_messages: s.compacted_records,
                    compacted_bytes: s.compacted_bytes,
                    compaction_passes: s.compaction_passes,
                    compaction_keys: s.compaction_keys,
                }
            })
            .collect();
        let window = t.dedupe.as_ref().map(|w| w.stats(crate::clock::now_ns())).unwrap_or_default();
        Ok(TopicStats {
            dedupe_duplicates: window.duplicates,
            dedupe_ids: window.ids,
            dedupe_evicted: window.evicted,
            dedupe_waits: window.waits,
            name: topic.to_owned(),
            publish_count: partitions.iter().map(|p| p.next_offset).sum(),
            retained_bytes: partitions.iter().map(|p| p.retained_bytes).sum(),
            compacted_messages: partitions.iter().map(|p| p.compacted_messages).sum(),
            compacted_bytes: partitions.iter().map(|p| p.compacted_bytes).sum(),
            compaction_passes: partitions.iter().map(|p| p.compaction_passes).sum(),
            compaction_keys: partitions.iter().map(|p| p.compaction_keys).sum(),
            partitions,
        })
    }

    /// Closes the broker: every subscription is closed (waiting for handler
    /// calls in flight, except the caller's own), the worker threads stop, and
    /// any later call through any handle fails with `Closed`. Idempotent.
    /// Called from inside a handler of another broker's subscription, it
    /// waits for none of this broker's handler calls (they end behind it),
    /// so two handlers that close each other's brokers cannot wait for each
    /// other for ever.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::{Error, Record};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let handle = broker.clone();
    /// broker.close();
    /// assert!(matches!(handle.publish("orders", &Record::new(b"late")), Err(Error::Closed(_))));
    /// broker.close(); // idempotent
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn close(&self) {
        self.inner().close();
    }

    /// True once closed.
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::{Broker, BrokerConfig};
    /// let broker = Broker::new(BrokerConfig::default())?;
    /// assert!(!broker.is_closed());
    /// broker.close();
    /// assert!(broker.is_closed());
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn is_closed(&self) -> bool {
        self.inner().is_closed()
    }
}

impl fmt::Debug for Broker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Broker")
            .field("id", &self.inner().id)
            .field("closed", &self.is_closed())
            .field("topics", &self.inner().topics.len())
            .finish()
    }
}

/// Publishes to one topic without a lookup per message.
#[derive(Clone)]
pub struct Publisher {
    broker: Arc<BrokerInner>,
    topic: Arc<Topic>,
}

impl Publisher {
    /// Publishes one message; see [`Broker::publish`].
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::{Position, Record};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let orders = broker.publisher("orders")?;
    /// assert_eq!(orders.publish(&Record::new(b"o-1"))?, Position { partition: 0, offset: 0 });
    /// assert_eq!(orders.publish(&Record::new(b"o-2"))?, Position { partition: 0, offset: 1 });
    /// # Ok::<(), rill::Error>(())
    /// ```
    #[inline]
    pub fn publish(&self, record: &Record<'_>) -> Result<Position> {
        Ok(self.publish_with::<false>(record, self.broker.default_wait())?)
    }

    /// Publishes one message without waiting; see [`Broker::try_publish`].
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::Record;
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let orders = broker.publisher("orders")?;
    /// // No `Block` subscriber is at its limit, so this succeeds at once.
    /// assert_eq!(orders.try_publish(&Record::new(b"o-1"))?.offset, 0);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn try_publish(&self, record: &Record<'_>) -> Result<Position> {
        Ok(self.publish_with::<false>(record, Wait::No)?)
    }

    /// [`Publisher::publish`] with its failure as the publish path passes
    /// it up: a [`PublishFailure`] (one word, so the partition's result
    /// comes back in registers), which `Error::from` turns into the error
    /// `publish` reports, out of line. For the C ABI, whose wrapper this
    /// lets inline the whole publish path and build its status and error
    /// text only on a failure.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::{Error, Record};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let orders = broker.publisher("orders")?;
    /// assert_eq!(orders.publish_unboxed(&Record::new(b"o-1")).map_err(Error::from)?.offset, 0);
    /// broker.close();
    /// let failure = orders.publish_unboxed(&Record::new(b"o-2")).unwrap_err();
    /// assert!(matches!(Error::from(failure), Error::Closed(_)));
    /// # Ok::<(), rill::Error>(())
    /// ```
    #[doc(hidden)]
    #[inline(always)]
    pub fn publish_unboxed(&self, record: &Record<'_>) -> Result<Position, PublishFailure> {
        self.publish_with::<true>(record, self.broker.default_wait())
    }

    /// One publish; `INLINED` takes the partition's publish inlined here
    /// (see `topic::Partition::publish_inlined`), else as LLVM sees fit.
    #[inline(always)]
    fn publish_with<const INLINED: bool>(&self, record: &Record<'_>, wait: Wait) -> Result<Position, PublishFailure> {
        if self.broker.is_closed() {
            return Err(PublishFailure::closed());
        }
        // The branches a record without an id pays for the dedupe window
        // and the schema: a field test and a load of the schema's flag.
        if record.may_have_id() || self.topic.schema.is_set() {
            return self.publish_identified(record, wait).map(|p| p.position);
        }
        self.publish_plain::<INLINED>(record, wait)
    }

    /// The common publish's append: a record without an id to a topic
    /// without a schema.
    #[inline(always)]
    fn publish_plain<const INLINED: bool>(&self, record: &Record<'_>, wait: Wait) -> Result<Position, PublishFailure> {
        let p = self.topic.route(record.key);
        if p.is_deleted() {
            return Err(self.deleted());
        }
        // A failure that raced a delete of the topic reports the delete.
        let offset = if INLINED { p.publish_inlined(record, wait) } else { p.publish(record, wait) }
            .map_err(|f| self.topic.publish_failed(f))?;
        Ok(Position { partition: p.index, offset })
    }

    /// [`Publisher::publish_unboxed`] with its [`Published`] outcome, for the
    /// C ABI's `rill_publisher_publish_bytes_outcome` (the Python binding's
    /// one-call publish): the common publish's path, and the outcome of the
    /// out-of-line one, so a schema set since the publisher was made (in
    /// any process) that dead-letters the record says so.
    #[doc(hidden)]
    #[inline]
    pub fn publish_unboxed_outcome(&self, record: &Record<'_>) -> Result<Published, PublishFailure> {
        if self.broker.is_closed() {
            return Err(PublishFailure::closed());
        }
        let wait = self.broker.default_wait();
        if record.may_have_id() || self.topic.schema.is_set() {
            return self.publish_identified(record, wait);
        }
        self.publish_plain::<true>(record, wait).map(Published::appended)
    }

    /// [`Publisher::publish_with`] for a record that may carry an id, or
    /// to a topic that may have a schema.
    #[cold]
    #[inline(never)]
    fn publish_identified(&self, record: &Record<'_>, wait: Wait) -> Result<Published, PublishFailure> {
        if self.topic.is_deleted() {
            return Err(self.deleted());
        }
        Ok(publish_slow(&self.broker, &self.topic, record, wait)?)
    }

    /// Publishes one message and says whether it was a duplicate; see
    /// [`Broker::publish_outcome`].
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::Record;
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let orders = broker.publisher("orders")?;
    /// assert!(!orders.publish_outcome(&Record::new(b"o-1").with_id("order-1"))?.duplicate);
    /// assert!(orders.publish_outcome(&Record::new(b"o-1").with_id("order-1"))?.duplicate);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn publish_outcome(&self, record: &Record<'_>) -> Result<Published> {
        if self.broker.is_closed() {
            return Err(PublishFailure::closed().into());
        }
        Ok(self.publish_identified(record, self.broker.default_wait())?)
    }

    /// Publishes many messages, saying which were duplicates; see
    /// [`Broker::publish_batch_outcome`].
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::Record;
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let orders = broker.publisher("orders")?;
    /// let done = orders.publish_batch_outcome(&[Record::new(b"a").with_id("1"), Record::new(b"a").with_id("1")])?;
    /// assert_eq!(done.iter().map(|p| p.duplicate).collect::<Vec<_>>(), [false, true]);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn publish_batch_outcome(&self, records: &[Record<'_>]) -> Result<Vec<Published>> {
        self.broker.check_open()?;
        if self.topic.is_deleted() {
            return Err(self.topic.deleted_error());
        }
        publish_batch_outcome_to(&self.broker, &self.topic, records, self.broker.default_wait())
    }

    /// The failure of a publish to a deleted topic, built out of line.
    #[cold]
    #[inline(never)]
    fn deleted(&self) -> PublishFailure {
        PublishFailure::from(self.topic.deleted_error())
    }

    /// Publishes many messages; see [`Broker::publish_batch`].
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::Record;
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let orders = broker.publisher("orders")?;
    /// let positions = orders.publish_batch(&[Record::new(b"o-1"), Record::new(b"o-2")])?;
    /// assert_eq!(positions.iter().map(|p| p.offset).collect::<Vec<_>>(), [0, 1]);
    /// assert!(orders.publish_batch(&[])?.is_empty());
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn publish_batch(&self, records: &[Record<'_>]) -> Result<Vec<Position>> {
        self.broker.check_open()?;
        if self.topic.is_deleted() {
            return Err(self.topic.deleted_error());
        }
        publish_batch_to(&self.broker, &self.topic, records, self.broker.default_wait())
    }

    /// The topic's name.
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    /// let orders = broker.publisher("orders")?;
    /// assert_eq!(orders.topic(), "orders");
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn topic(&self) -> &str {
        &self.topic.name
    }
}

impl fmt::Debug for Publisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Publisher").field("topic", &self.topic.name).finish()
    }
}

/// Waits up to `timeout` for every subscription in `subs` to be idle.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use rill::broker::wait_all_idle;
/// use rill::{Ack, Record, SubscriptionOptions};
/// # use rill::{Broker, BrokerConfig, TopicOptions};
/// # let broker = Broker::new(BrokerConfig::default())?;
/// # broker.create_topic("orders", &TopicOptions::default())?;
///
/// let billing = broker.subscribe("orders", SubscriptionOptions::default(), |_| Ack::Success)?;
/// let audit = broker.subscribe("orders", SubscriptionOptions::default(), |_| Ack::Success)?;
/// broker.publish("orders", &Record::new(b"o-1"))?;
/// assert!(wait_all_idle(&[&billing, &audit], Duration::from_secs(5))?);
/// assert_eq!((billing.stats().acked, audit.stats().acked), (1, 1));
/// # Ok::<(), rill::Error>(())
/// ```
pub fn wait_all_idle(subs: &[&Subscription], timeout: Duration) -> Result<bool> {
    let deadline = std::time::Instant::now() + timeout;
    for s in subs {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if !s.wait_idle(left)? {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(all(test, not(loom)))]
mod tests;
