//! The broker: topics, routing, publishing and push subscriptions.
//!
//! * **Topics** are created explicitly (or on first publish with
//!   `auto_create_topics`), each with one or more partitions, each partition a
//!   [`Log`](crate::log::Log).
//! * **Publishing** looks the topic up in a map read lock-free through
//!   `arc-swap`, picks the partition (key hash, or per-thread round-robin),
//!   appends to its log, then signals the partition's listeners (see
//!   `subscription/signal.rs`). A [`Publisher`] skips the lookup.
//! * **Routing** happens when topics and subscriptions are created, not per
//!   message: a subscription is attached to every partition of every topic its
//!   pattern matches, now or later (new topics are matched against an index of
//!   patterns), so a publish only walks its partition's listener list.
//! * **Subscriptions** are drained by a shared worker pool or a dedicated
//!   thread; see [`Subscription`].
//!
//! The control plane (creating topics, subscribing, closing) takes one mutex;
//! the publish and delivery paths never do.

mod consumer;
mod dispatch;
pub(crate) mod filter;
#[cfg(loom)]
#[doc(hidden)]
pub mod loom_harness;
pub(crate) mod names;
pub(crate) mod subscription;
pub(crate) mod topic;
pub(crate) mod waiters;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use arc_swap::ArcSwap;

pub use consumer::{Consumer, ConsumerOptions, ConsumerStart, ConsumerStats, GroupPartition, GroupStats, Polled};
use consumer::{ConsumerCore, GroupHost};
use dispatch::{Timer, WorkerPool};
pub use filter::Filter;
pub use names::{MAX_NAME_LEN, Pattern};
pub use subscription::{
    Ack, BatchHandler, DEFAULT_MAX_ATTEMPTS, DeliveryMode, Handler, LagCallback, Message, Overflow, PartitionLag,
    RetryBackoff, StartPosition, Subscription, SubscriptionOptions, SubscriptionState, SubscriptionStats,
};
use subscription::{BackoffOver, DrainJob, Exec, HandlerKind, SubCore, SubEnv};
pub use topic::{MAX_PARTITIONS, TopicOptions, partition_for_key};
use topic::{Topic, Wait};

use crate::error::{Error, Result};
use crate::log::Record;
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::thread::{self, JoinHandle};
use crate::sync::{Arc, Mutex, Name};

/// How a broker runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerConfig {
    /// Threads in the shared pool that drains subscriptions; `None` uses one
    /// per CPU core.
    pub worker_threads: Option<usize>,
    /// Create a topic (with `default_topic` options) on first publish or
    /// literal subscribe instead of failing with `NoSuchTopic`. Off by default.
    pub auto_create_topics: bool,
    /// Options of auto-created topics and dead-letter topics.
    pub default_topic: TopicOptions,
    /// Longest a `publish` waits for a `Block` subscriber to make room
    /// before failing with `Timeout`; `None` waits indefinitely. Default 10 s.
    pub publish_timeout: Option<Duration>,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            worker_threads: None,
            auto_create_topics: false,
            default_topic: TopicOptions::default(),
            publish_timeout: Some(Duration::from_secs(10)),
        }
    }
}

/// Where a published message landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Position {
    /// Partition index.
    pub partition: u32,
    /// Offset in that partition.
    pub offset: u64,
}

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
}

/// A saved position of a durable subscription.
#[derive(Default)]
struct Durable {
    positions: HashMap<(Name, u32), u64>,
}

/// Control-plane state, behind one mutex.
#[derive(Default)]
struct Control {
    /// Patterns of live subscriptions, to attach them to new topics.
    patterns: names::PatternIndex<Arc<SubCore>>,
    /// Live subscriptions by id.
    subs: HashMap<u64, Arc<SubCore>>,
    /// Names of live subscriptions.
    live_names: HashSet<String>,
    /// Positions of durable subscriptions, kept while they are away.
    durable: HashMap<String, Durable>,
    dedicated: Vec<JoinHandle<()>>,
    /// Committed offsets of consumer groups, by (group, topic).
    groups: HashMap<(String, Name), Group>,
    /// Live consumers by id, so closing the broker can close them.
    consumers: HashMap<u64, Arc<ConsumerCore>>,
}

/// A consumer group's state on one topic.
#[derive(Default)]
struct Group {
    committed: Vec<Option<u64>>,
    /// The id of its live consumer, if any.
    live: Option<u64>,
}

pub(crate) struct BrokerInner {
    id: u64,
    config: BrokerConfig,
    closed: AtomicBool,
    topics: ArcSwap<HashMap<Name, Arc<Topic>>>,
    control: Mutex<Control>,
    pool: Arc<WorkerPool<DrainJob>>,
    timer: Arc<Timer<BackoffOver>>,
}

/// Closes the broker when the last [`Broker`] handle is dropped.
struct Handle {
    inner: Arc<BrokerInner>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.inner.close();
    }
}

/// An in-process message broker. Cheap to clone; clones share the broker,
/// which closes when the last clone is dropped (or on [`Broker::close`]).
#[derive(Clone)]
pub struct Broker {
    handle: Arc<Handle>,
}

impl Broker {
    /// Starts a broker: its worker pool and retry timer.
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
        let id = crate::sync::unique_id();
        let spawn_err = |e: std::io::Error| Error::InvalidArgument(format!("cannot start broker threads: {e}"));
        let pool = Arc::new(WorkerPool::start(workers).map_err(spawn_err)?);
        let timer = Arc::new(Timer::start().map_err(spawn_err)?);
        let inner = Arc::new(BrokerInner {
            id,
            config,
            closed: AtomicBool::new(false),
            topics: ArcSwap::from_pointee(HashMap::new()),
            control: Mutex::new(Control::default()),
            pool,
            timer,
        });
        Ok(Broker { handle: Arc::new(Handle { inner }) })
    }

    fn inner(&self) -> &Arc<BrokerInner> {
        &self.handle.inner
    }

    /// Creates a topic. Names are `/`-separated non-empty segments, at most
    /// 255 bytes, without NUL or `*`; names starting with `$` are reserved.
    pub fn create_topic(&self, name: &str, options: &TopicOptions) -> Result<()> {
        names::validate_user_topic(name)?;
        self.inner().create_topic(name, options).map(drop)
    }

    /// The names of all topics, sorted.
    pub fn topics(&self) -> Vec<String> {
        let mut v: Vec<String> = self.inner().topics.load().keys().map(|k| k.to_string()).collect();
        v.sort_unstable();
        v
    }

    /// Publishes one message and returns where it landed. If a `Block`
    /// subscriber is at its lag limit, waits for room up to the broker's
    /// `publish_timeout`, then fails with `Timeout`.
    #[inline]
    pub fn publish(&self, topic: &str, record: &Record<'_>) -> Result<Position> {
        self.publish_with(topic, record, self.inner().default_wait())
    }

    /// Like [`Broker::publish`], waiting at most `timeout` for room.
    pub fn publish_timeout(&self, topic: &str, record: &Record<'_>, timeout: Duration) -> Result<Position> {
        self.publish_with(topic, record, Wait::For(Some(timeout)))
    }

    /// Like [`Broker::publish`], but fails at once with `Full` instead of
    /// waiting for a `Block` subscriber.
    pub fn try_publish(&self, topic: &str, record: &Record<'_>) -> Result<Position> {
        self.publish_with(topic, record, Wait::No)
    }

    #[inline]
    fn publish_with(&self, topic: &str, record: &Record<'_>, wait: Wait) -> Result<Position> {
        let inner = self.inner();
        inner.check_open()?;
        // Borrow the topic from the map without touching its reference count,
        // which concurrent publishers would otherwise contend on.
        let topics = inner.topics.load();
        let p = match topics.get(topic) {
            Some(t) => t.route(record.key),
            None => {
                drop(topics);
                let t = inner.topic_for_publish(topic)?;
                let p = t.route(record.key);
                let offset = p.publish(record, wait)?;
                return Ok(Position { partition: p.index, offset });
            }
        };
        let offset = p.publish(record, wait)?;
        Ok(Position { partition: p.index, offset })
    }

    /// Publishes many messages; returns their positions in input order.
    /// Keyed messages go to their key's partition, unkeyed ones round-robin;
    /// each partition's share is appended with one reservation per segment,
    /// in input order. Every message is checked before any is published.
    /// Waits for `Block` subscribers like [`Broker::publish`].
    pub fn publish_batch(&self, topic: &str, records: &[Record<'_>]) -> Result<Vec<Position>> {
        let t = self.inner().topic_for_publish(topic)?;
        publish_batch_to(&t, records, self.inner().default_wait())
    }

    /// A handle that publishes to one topic without looking it up each time.
    pub fn publisher(&self, topic: &str) -> Result<Publisher> {
        let t = self.inner().topic_for_publish(topic)?;
        Ok(Publisher { broker: self.inner().clone(), topic: t })
    }

    /// Subscribes `handler` to every topic matching `pattern` (now and
    /// later). See [`SubscriptionOptions`] for what can be chosen.
    pub fn subscribe<F>(&self, pattern: &str, options: SubscriptionOptions, handler: F) -> Result<Subscription>
    where
        F: FnMut(&Message<'_>) -> Ack + Send + 'static,
    {
        BrokerInner::subscribe(self.inner(), pattern, options, HandlerKind::One(Box::new(handler)))
    }

    /// Like [`Broker::subscribe`], with a handler that takes runs of
    /// consecutive messages of one partition at once (at most 64; on the
    /// worker pool the first run is one message and later runs are sized to
    /// take about 250 µs of the handler's time, so a slow handler does not
    /// hold a worker that other subscriptions wait for): it fills
    /// one ack per message (pre-set to `Success`) and returns how many
    /// messages, from the front, it handled; the others come again in the
    /// next call. Cheaper per message when a call has a fixed cost (a
    /// foreign-language callback). Redeliveries, dead letters and filters
    /// work as for [`Broker::subscribe`].
    pub fn subscribe_batch<F>(&self, pattern: &str, options: SubscriptionOptions, handler: F) -> Result<Subscription>
    where
        F: FnMut(&[Message<'_>], &mut [Ack]) -> usize + Send + 'static,
    {
        BrokerInner::subscribe(self.inner(), pattern, options, HandlerKind::Many(Box::new(handler)))
    }

    /// A pull consumer of `topic` for `group`. The group resumes from its
    /// committed offsets; partitions without one start as `options` says.
    /// A second live consumer of the same group and topic is `Busy`.
    pub fn consumer(&self, group: &str, topic: &str, options: ConsumerOptions) -> Result<Consumer> {
        let inner = self.inner();
        if group.is_empty() || group.contains('\0') {
            return Err(Error::InvalidArgument(format!(
                "consumer group name {group:?} must be non-empty, without NUL"
            )));
        }
        let t = inner.topic(topic)?;
        let core = Arc::new(ConsumerCore::new(crate::sync::unique_id(), group.to_owned(), t.clone()));
        let committed = {
            let mut control = inner.control.lock();
            inner.check_open()?;
            let g = control.groups.entry((group.to_owned(), t.name.clone())).or_default();
            if g.live.is_some() {
                return Err(Error::Busy(format!("consumer group {group:?} already has a live consumer of {topic:?}")));
            }
            g.committed.resize(t.partitions.len(), None);
            g.live = Some(core.id);
            let committed = g.committed.clone();
            control.consumers.insert(core.id, core.clone());
            committed
        };
        Consumer::new(core.clone(), Box::new(inner.clone()), committed, options.start).inspect_err(|_| {
            inner.release_consumer(&core);
        })
    }

    /// A consumer group's committed offsets and lag on `topic`, whether or
    /// not a consumer of it is live (`NotFound` if the group never consumed it).
    pub fn group_stats(&self, group: &str, topic: &str) -> Result<GroupStats> {
        let inner = self.inner();
        let t = inner.topic(topic)?;
        let control = inner.control.lock();
        let g = control
            .groups
            .get(&(group.to_owned(), t.name.clone()))
            .ok_or_else(|| Error::NotFound(format!("consumer group {group:?} on topic {topic:?}")))?;
        let partitions: Vec<GroupPartition> = t
            .partitions
            .iter()
            .map(|p| {
                let committed = g.committed.get(p.index as usize).copied().flatten();
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

    /// Size and progress of a topic.
    pub fn topic_stats(&self, topic: &str) -> Result<TopicStats> {
        let t = self.inner().topic(topic)?;
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
                }
            })
            .collect();
        Ok(TopicStats {
            name: topic.to_owned(),
            publish_count: partitions.iter().map(|p| p.next_offset).sum(),
            retained_bytes: partitions.iter().map(|p| p.retained_bytes).sum(),
            partitions,
        })
    }

    /// Closes the broker: every subscription is closed (waiting for handler
    /// calls in flight, except the caller's own), the worker threads stop, and
    /// any later call through any handle fails with `Closed`. Idempotent.
    pub fn close(&self) {
        self.inner().close();
    }

    /// True once closed.
    pub fn is_closed(&self) -> bool {
        self.inner().is_closed()
    }
}

impl fmt::Debug for Broker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Broker")
            .field("id", &self.inner().id)
            .field("closed", &self.is_closed())
            .field("topics", &self.inner().topics.load().len())
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
    #[inline]
    pub fn publish(&self, record: &Record<'_>) -> Result<Position> {
        self.publish_with(record, self.broker.default_wait())
    }

    /// Publishes one message without waiting; see [`Broker::try_publish`].
    pub fn try_publish(&self, record: &Record<'_>) -> Result<Position> {
        self.publish_with(record, Wait::No)
    }

    #[inline]
    fn publish_with(&self, record: &Record<'_>, wait: Wait) -> Result<Position> {
        self.broker.check_open()?;
        let p = self.topic.route(record.key);
        let offset = p.publish(record, wait)?;
        Ok(Position { partition: p.index, offset })
    }

    /// Publishes many messages; see [`Broker::publish_batch`].
    pub fn publish_batch(&self, records: &[Record<'_>]) -> Result<Vec<Position>> {
        self.broker.check_open()?;
        publish_batch_to(&self.topic, records, self.broker.default_wait())
    }

    /// The topic's name.
    pub fn topic(&self) -> &str {
        &self.topic.name
    }
}

impl fmt::Debug for Publisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Publisher").field("topic", &self.topic.name).finish()
    }
}

fn publish_batch_to(t: &Topic, records: &[Record<'_>], wait: Wait) -> Result<Vec<Position>> {
    if records.is_empty() {
        return Ok(Vec::new());
    }
    // Check every record first, so an error publishes nothing.
    let max = t.partitions[0].log.max_record_bytes();
    for r in records {
        let size = r.encoded_len()?;
        if size > max {
            return Err(Error::MessageTooLarge { size, max });
        }
    }
    let mut offsets = Vec::with_capacity(records.len());
    if t.partitions.len() == 1 {
        let p = &t.partitions[0];
        p.publish_batch(records, &mut offsets, wait)?;
        return Ok(offsets.into_iter().map(|offset| Position { partition: 0, offset }).collect());
    }
    // Group by partition, keeping input order within each group.
    let targets: Vec<u32> = records.iter().map(|r| t.route(r.key).index).collect();
    let mut positions = vec![Position { partition: 0, offset: 0 }; records.len()];
    let mut group: Vec<Record<'_>> = Vec::new();
    let mut indexes: Vec<usize> = Vec::new();
    for p in t.partitions.iter() {
        group.clear();
        indexes.clear();
        for (i, r) in records.iter().enumerate() {
            if targets[i] == p.index {
                group.push(*r);
                indexes.push(i);
            }
        }
        if group.is_empty() {
            continue;
        }
        p.publish_batch(&group, &mut offsets, wait)?;
        for (&i, &offset) in indexes.iter().zip(&offsets) {
            positions[i] = Position { partition: p.index, offset };
        }
    }
    Ok(positions)
}

impl BrokerInner {
    #[inline]
    fn is_closed(&self) -> bool {
        // Acquire: pairs with the Release swap in `close`.
        self.closed.load(Ordering::Acquire)
    }

    /// How long a plain `publish` waits for `Block` subscribers.
    #[inline]
    fn default_wait(&self) -> Wait {
        Wait::For(self.config.publish_timeout)
    }

    #[inline]
    fn check_open(&self) -> Result<()> {
        if self.is_closed() { Err(Error::Closed("the broker is closed".into())) } else { Ok(()) }
    }

    fn topic(&self, name: &str) -> Result<Arc<Topic>> {
        self.check_open()?;
        match self.topics.load().get(name) {
            Some(t) => Ok(t.clone()),
            None => {
                names::validate_topic(name)?;
                Err(Error::NoSuchTopic(name.to_owned()))
            }
        }
    }

    #[inline]
    fn topic_for_publish(&self, name: &str) -> Result<Arc<Topic>> {
        match self.topic(name) {
            Err(Error::NoSuchTopic(_))
                if self.config.auto_create_topics && !name.starts_with(names::RESERVED_PREFIX) =>
            {
                let options = self.config.default_topic.clone();
                match self.create_topic(name, &options) {
                    Ok(t) => Ok(t),
                    // Another thread created it first.
                    Err(Error::TopicExists(_)) => self.topic(name),
                    Err(e) => Err(e),
                }
            }
            other => other,
        }
    }

    /// Creates a topic (reserved names allowed: the caller validated the name
    /// for users) and attaches every subscription whose pattern matches it.
    fn create_topic(&self, name: &str, options: &TopicOptions) -> Result<Arc<Topic>> {
        names::validate_topic(name)?;
        let control = self.control.lock();
        self.check_open()?;
        if self.topics.load().contains_key(name) {
            return Err(Error::TopicExists(name.to_owned()));
        }
        let topic = Arc::new(Topic::new(name, options)?);
        let mut map = HashMap::clone(&self.topics.load());
        map.insert(topic.name.clone(), topic.clone());
        self.topics.store(std::sync::Arc::new(map));
        for sub in control.patterns.matches(name) {
            // A new topic is read from its start: nothing published to it can
            // be missed, whatever the subscription's start position.
            let saved = saved_positions(&control, &sub);
            for p in topic.partitions.iter() {
                let cursor = match saved.get(&(topic.name.clone(), p.index)) {
                    Some(&offset) => p.log.cursor_resuming(offset),
                    None => p.log.cursor_from_first(),
                };
                SubCore::attach_to(&sub, topic.name.clone(), p, cursor);
            }
            SubCore::poke(&sub);
        }
        Ok(topic)
    }

    fn subscribe(
        this: &Arc<BrokerInner>,
        pattern: &str,
        options: SubscriptionOptions,
        handler: HandlerKind,
    ) -> Result<Subscription> {
        this.check_open()?;
        let pattern = Pattern::parse(pattern)?;
        if pattern.is_literal() && this.topic(pattern.as_str()).is_err() {
            // Naming one topic that does not exist is a mistake, unless topics
            // are created on demand.
            this.topic_for_publish(pattern.as_str())?;
        }
        let id = crate::sync::unique_id();
        let name = match &options.name {
            Some(n) => {
                if n.is_empty() || n.contains('*') || n.contains('\0') {
                    return Err(Error::InvalidArgument(format!(
                        "subscription name {n:?} must be non-empty, without '*' or NUL"
                    )));
                }
                n.clone()
            }
            None => format!("anon-{id}"),
        };
        let dlq_name = options.dead_letter_topic.clone().unwrap_or_else(|| format!("$dlq/{name}"));
        names::validate_topic(&dlq_name)?;
        let dlq = match this.topic(&dlq_name) {
            Ok(t) => t,
            Err(Error::NoSuchTopic(_)) => match this.create_topic(&dlq_name, &this.config.default_topic) {
                Ok(t) => t,
                Err(Error::TopicExists(_)) => this.topic(&dlq_name)?,
                Err(e) => return Err(e),
            },
            Err(e) => return Err(e),
        };
        let broker = this.clone();
        let exec =
            if options.dedicated_thread { Exec::Dedicated(Mutex::new(None)) } else { Exec::Pool(this.pool.clone()) };
        let env = SubEnv {
            exec,
            timer: Some(this.timer.clone()),
            dead_letters: Some(dlq),
            on_close: Some(Box::new(move |sub: &SubCore| broker.on_subscription_closed(sub))),
        };
        let sub = Arc::new(SubCore::new(id, name.clone(), pattern.clone(), &options, handler, env)?);

        let mut control = this.control.lock();
        this.check_open()?;
        if control.live_names.contains(&name) {
            return Err(Error::Busy(format!("a subscription named {name:?} is already live")));
        }
        // Work out every reader first, so a bad start offset attaches nothing.
        let saved = saved_positions(&control, &sub);
        let topics = this.topics.load();
        let mut readers = Vec::new();
        let mut matched: Vec<&Arc<Topic>> = topics.values().filter(|t| pattern.matches(&t.name)).collect();
        matched.sort_by(|a, b| a.name.cmp(&b.name));
        for t in matched {
            for p in t.partitions.iter() {
                let log = &p.log;
                let cursor = match saved.get(&(t.name.clone(), p.index)) {
                    // A durable subscription resumes where it left off; if
                    // retention trimmed that meanwhile, its first read reports
                    // what it missed.
                    Some(&offset) => log.cursor_resuming(offset),
                    None => match options.start {
                        StartPosition::Latest => log.cursor_from_end(),
                        StartPosition::Earliest => log.cursor_from_first(),
                        StartPosition::Offset(o) => log.cursor_at(o).map_err(|e| match e {
                            Error::OutOfRange { offset, first, end, .. } => {
                                Error::OutOfRange { partition: p.index, offset, first, end }
                            }
                            other => other,
                        })?,
                    },
                };
                readers.push((t.name.clone(), p.clone(), cursor));
            }
        }
        if options.dedicated_thread {
            let s = sub.clone();
            let handle = thread::Builder::new()
                .name(format!("rill-sub-{}", sub.name))
                .spawn(move || SubCore::dedicated_loop(s))
                .map_err(|e| Error::InvalidArgument(format!("cannot start a dedicated thread: {e}")))?;
            sub.set_thread(handle.thread().clone());
            control.dedicated.push(handle);
        }
        for (topic, p, cursor) in readers {
            SubCore::attach_to(&sub, topic, &p, cursor);
        }
        control.patterns.insert(&pattern, id, sub.clone());
        control.subs.insert(id, sub.clone());
        control.live_names.insert(name);
        drop(control);
        // Deliver whatever is already there (earliest, or a saved position).
        SubCore::poke(&sub);
        Ok(Subscription { core: sub })
    }

    /// The close hook of every subscription: forget it, and keep a durable
    /// one's positions for its return.
    fn on_subscription_closed(&self, sub: &SubCore) {
        let mut control = self.control.lock();
        control.patterns.remove(&sub.pattern, sub.id);
        control.subs.remove(&sub.id);
        control.live_names.remove(&sub.name);
        if sub.durable {
            let saved = control.durable.entry(sub.name.clone()).or_default();
            for (topic, partition, offset) in sub.positions() {
                saved.positions.insert((topic, partition), offset);
            }
        }
    }

    fn close(&self) {
        // AcqRel: the winner of the swap closes; Release pairs with the
        // Acquire in `is_closed`, so a caller that sees closed sees why.
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let (subs, dedicated, consumers) = {
            let mut control = self.control.lock();
            let subs: Vec<Arc<SubCore>> = control.subs.values().cloned().collect();
            let consumers: Vec<Arc<ConsumerCore>> = control.consumers.values().cloned().collect();
            (subs, std::mem::take(&mut control.dedicated), consumers)
        };
        for c in &consumers {
            c.close();
        }
        for sub in &subs {
            SubCore::close_with_reason(sub, "the broker was closed".into());
        }
        self.pool.stop();
        self.timer.stop();
        let me = thread::current().id();
        for t in dedicated {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
        self.topics.store(std::sync::Arc::new(HashMap::new()));
    }
}

/// A consumer's hooks into the broker that made it.
impl GroupHost for Arc<BrokerInner> {
    fn is_closed(&self) -> bool {
        BrokerInner::is_closed(self)
    }

    /// Stores a group's committed offsets.
    fn save_group(&self, core: &ConsumerCore, committed: Vec<Option<u64>>) {
        let mut control = self.control.lock();
        if let Some(g) = control.groups.get_mut(&(core.group.clone(), core.topic.name.clone())) {
            g.committed = committed;
        }
    }

    /// Frees the group for another consumer.
    fn release_consumer(&self, core: &ConsumerCore) {
        let mut control = self.control.lock();
        control.consumers.remove(&core.id);
        if let Some(g) = control.groups.get_mut(&(core.group.clone(), core.topic.name.clone()))
            && g.live == Some(core.id)
        {
            g.live = None;
        }
    }
}

/// A durable subscription's saved positions (empty for anonymous ones).
fn saved_positions(control: &Control, sub: &SubCore) -> HashMap<(Name, u32), u64> {
    if !sub.durable {
        return HashMap::new();
    }
    control.durable.get(&sub.name).map(|d| d.positions.clone()).unwrap_or_default()
}

/// Waits up to `timeout` for every subscription in `subs` to be idle.
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
