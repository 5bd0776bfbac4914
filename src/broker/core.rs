//! The broker's shared state behind every handle: the topic map, the
//! control plane (subscriptions, consumer groups, durable positions, behind
//! one mutex), the worker pool and the timer, and the operations that change
//! them (creating topics, subscribing, closing). The public handles in
//! `mod.rs` hold an `Arc<BrokerInner>`.
//!
//! With a data directory, the control plane also keeps `store.rs` up to date:
//! a topic is listed when it is created, group commits are written when they
//! are made (synced first under `Fsync::Always`), a durable subscription's
//! positions when it closes and, under `Always`, at the end of every drain
//! round (before it delivers more, backs off or goes idle), and the flusher
//! (`flusher.rs`) runs each log's round (`Log::flusher_round`: a sync round
//! under `Interval`, a marking round that flushes nothing under `Never`) and
//! writes every live durable subscription's positions each interval under
//! `Interval` and `Never`. Offsets are written
//! as numbered snapshots: taken under the control mutex, written (and
//! synced) after it is released, several commits sharing one write (see
//! `store.rs`), so nothing waits for an fsync while holding the mutex.
//!
//! # Offsets past a recovered end
//!
//! A group commit or a durable subscription's saved position is an offset
//! in a partition, and the offsets file and the partition's log are written
//! separately. Opening a data directory can therefore find an offset above
//! the end that recovery left: the log lost its tail (a torn tail after a
//! machine crash under `Interval` or `Never`, whose offsets file had been
//! written past it) or was cut at damage (`repair`). Left alone, such an
//! offset is a trap: new messages are numbered from the recovered end, so a
//! reader resuming at the old offset would skip every one of them below it
//! (a member that joins after they are published starts past them).
//!
//! So `open_data_dir` resets every such offset to the recovered end, once,
//! before the broker is handed out, that is before anything new can be
//! published: the reader resumes with the first message published after the
//! recovery. This is Kafka's `OffsetOutOfRange` answered with its "latest"
//! reset, made at the only moment it is unambiguous (later, "past the end"
//! cannot be told from "past records since published"). Each reset is
//! logged (warning) and counted in the partition's stats
//! (`recovered_offsets_reset`), and if any was made the offsets file is
//! rewritten and synced before the open returns, so a crash right after the
//! open cannot bring the old offset back against a log that has grown since.
//!
//! # The topic map
//!
//! Every publish by name looks its topic up, so the map is read without a
//! lock: an `ArcSwap` holds the current map, a publisher loads it (no
//! reference count touched, no lock, no allocation) and a change (creating
//! or deleting a topic, under the control mutex) builds the next map and
//! swaps it in. Readers that loaded the old one keep a consistent snapshot
//! (a subscribe or a flush walks one set of topics), and a topic leaves
//! memory with the last reference to it, at once: nothing is deferred to a
//! reclamation scheme.
//!
//! The map is persistent (`rpds`'s hash array mapped trie, [`TopicMap`]):
//! the next map shares every node with the current one but those on the
//! path to the changed key, so a change copies O(log n) nodes, not the
//! whole map (a `HashMap` copied on every create made creating n topics
//! cost O(n^2)). A lookup hashes the name once and descends about
//! log64(n) levels of 64-way nodes, each step one bitmap test and a
//! popcount: one level more per 64-fold growth, four for a million topics. A concurrent hash map
//! (`papaya`, `scc`, `dashmap`) would also make creation cheap, but
//! `dashmap`'s reads take a shard lock, and the lock-free ones free a
//! deleted topic only when their deferred reclamation gets round to it
//! (with its mapped segments, whose files a deleted topic on a data
//! directory still holds) and iterate without a snapshot.
//!
//! # Why this file is long
//!
//! Every change made under the control mutex is here (`mod.rs` only takes
//! it to read snapshots), so that the lock's invariants (which topics,
//! subscriptions, groups and durable positions exist, and what the store
//! holds about them) are kept in one file; the consumer groups' side of it
//! is the `GroupHost` implementation at the end.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use arc_swap::ArcSwap;

use super::consumer::{Assignment, ConsumerCore, GroupHost};
use super::dispatch::{Job, Timer, WorkerPool};
use super::doorbell::{Bell, Doorbell};
use super::flusher::{Flusher, Poke};
use super::group::Group;
use super::names::{self, Pattern};
use super::shared::SharedGroup;
use super::store::{Offsets, Positions, Store, Ticket};
use super::subscription::{
    AckWatch, BackoffOver, DeadLetters, DrainJob, Exec, HandlerKind, Stall, StartPosition, SubCore, SubEnv,
    Subscription, SubscriptionOptions,
};
use super::topic::{Opening, Partition, Topic, TopicOptions, Wait};
use crate::error::{Error, Result};
use crate::log::file::RollHook;
use crate::log::{Fsync, Log, LogConfig, MIN_SEGMENT_BYTES, Sharing};
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{Arc, Mutex, Name};

/// How a broker runs.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use rill::{Broker, BrokerConfig, Record};
///
/// let config = BrokerConfig {
///     worker_threads: Some(2),
///     auto_create_topics: true,
///     publish_timeout: Some(Duration::from_secs(1)),
///     ..BrokerConfig::default()
/// };
/// let broker = Broker::new(config)?;
/// broker.publish("orders", &Record::new(b"o-1"))?; // created on first publish
/// assert_eq!(broker.topics(), ["orders"]);
/// # Ok::<(), rill::Error>(())
/// ```
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
    /// Where the broker keeps its topics, messages, group commits and durable
    /// subscription positions across restarts (created if missing; one broker
    /// at a time, others get `Busy`, unless `sharing` says otherwise). `None`,
    /// the default: in memory only.
    pub data_dir: Option<PathBuf>,
    /// Who else may open `data_dir` meanwhile: no one (`Exclusive`, the
    /// default), or any number of brokers in this and other processes
    /// opened with `Processes` (which needs a `data_dir`; see "Several
    /// processes" in the README for what they share so far).
    pub sharing: Sharing,
    /// When messages and offsets reach stable storage (with a `data_dir`).
    /// Default: every 100 ms. See the promises table in the README.
    pub fsync: Fsync,
    /// On opening a `data_dir`: truncate a partition at damage found inside
    /// an older (sealed) segment, and report it, instead of failing the open
    /// with `Corrupt`. Off by default.
    pub repair: bool,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            worker_threads: None,
            auto_create_topics: false,
            default_topic: TopicOptions::default(),
            publish_timeout: Some(Duration::from_secs(10)),
            data_dir: None,
            sharing: Sharing::Exclusive,
            fsync: Fsync::default(),
            repair: false,
        }
    }
}

/// A saved position of a durable subscription.
#[derive(Default)]
pub(super) struct Durable {
    pub(super) positions: HashMap<(Name, u32), u64>,
}

/// The topic map: persistent, so each change copies O(log n) nodes (see
/// "The topic map" in the module docs).
pub(super) type TopicMap = rpds::HashTrieMapSync<Name, Arc<Topic>>;

/// Control-plane state, behind one mutex.
#[derive(Default)]
pub(super) struct Control {
    /// Patterns of live subscriptions, to attach them to new topics.
    pub(super) patterns: names::PatternIndex<Arc<SubCore>>,
    /// Live subscriptions by id.
    pub(super) subs: HashMap<u64, Arc<SubCore>>,
    /// Names of live subscriptions.
    pub(super) live_names: HashSet<String>,
    /// Positions of durable subscriptions, kept while they are away.
    pub(super) durable: HashMap<String, Durable>,
    /// Consumer groups (committed offsets and live members), by (group, topic).
    pub(super) groups: HashMap<(String, Name), Group>,
    /// Shared push subscriptions with live members, by name.
    pub(super) shared: HashMap<String, SharedGroup>,
    /// Live consumers by id, so closing the broker can close them.
    pub(super) consumers: HashMap<u64, Arc<ConsumerCore>>,
}

pub(crate) struct BrokerInner {
    pub(super) id: u64,
    /// The process that started the broker. In any other process (a child
    /// of `fork`) the broker is an inherited copy: see `forked`.
    pub(super) pid: u32,
    pub(super) config: BrokerConfig,
    pub(super) closed: AtomicBool,
    pub(super) topics: ArcSwap<TopicMap>,
    pub(super) control: Mutex<Control>,
    pub(super) pool: Arc<WorkerPool<DrainJob>>,
    pub(super) timer: Arc<Timer<BackoffOver>>,
    /// The data directory, while the broker is open on one.
    pub(super) store: Mutex<Option<Arc<Store>>>,
    /// Syncs and saves offsets every interval (with a data directory).
    pub(super) flusher: Mutex<Option<Flusher>>,
    /// Wakes the flusher's short job (see `prepare_ahead`) without the
    /// `flusher` lock, which `close` holds while it joins the thread.
    pub(super) flush_poke: Mutex<Option<Poke>>,
    /// The timer that applies topics' age limits, started with the first
    /// topic that has one (most brokers never need its thread).
    pub(super) expiry: Mutex<Option<Arc<Timer<Expire>>>>,
    /// The compactor: a thread that runs compaction passes over compacted
    /// topics, started with the first one (see `Compact`).
    pub(super) compactor: Mutex<Option<Arc<Timer<Compact>>>>,
    /// The timer that checks handler calls against their `ack_timeout`,
    /// started with the first subscription that has one.
    pub(super) ack_watch: Mutex<Option<Arc<Timer<AckWatch>>>>,
    /// What detached readers of deleted topics read instead (see
    /// `delete_topic`): one empty partition for the broker's life, made at
    /// the first delete, so deletions do not each leave one behind.
    pub(super) placeholder: Mutex<Option<Arc<Partition>>>,
    /// `Sharing::Processes`: the doorbell thread (see `doorbell.rs`).
    pub(super) doorbell: Option<Arc<Doorbell>>,
}

/// A timer job: applies a topic's age limit (`retention_ms`) to its
/// partitions, then comes back after `every`, until the topic is deleted or
/// the broker closes (which stops the timer and drops the job).
pub(super) struct Expire {
    topic: Arc<Topic>,
    every: Duration,
    timer: Arc<Timer<Expire>>,
}

impl Job for Expire {
    fn run(self) {
        if self.topic.is_deleted() {
            return;
        }
        for p in self.topic.partitions.iter() {
            // A segment that cannot be mapped now (out of memory) leaves the
            // partition as it is; the next round tries again.
            let _ = p.log.expire();
        }
        let (timer, every) = (self.timer.clone(), self.every);
        timer.schedule(every, self);
    }
}

/// A compactor job: looks at a compacted topic's partitions and runs a
/// compaction pass on each that has work (`Log::compact`: segments sealed
/// since its last pass, or a kept record that has become removable), then
/// comes back after `COMPACTION_CHECK`, until the topic is deleted or the
/// broker closes. All compacted topics share the compactor's one thread, so
/// publishers never run a pass and never wait for one.
pub(super) struct Compact {
    topic: Arc<Topic>,
    timer: Arc<Timer<Compact>>,
}

/// How often the compactor looks at a compacted topic. A look with nothing
/// to do loads each partition's directory and compares two numbers.
const COMPACTION_CHECK: Duration = Duration::from_millis(20);

impl Job for Compact {
    fn run(self) {
        if self.topic.is_deleted() {
            return;
        }
        let policy = self.topic.compaction.expect("only compacted topics get a compactor job");
        for p in self.topic.partitions.iter() {
            if let Err(e) = p.log.compact(&policy, crate::clock::now_ns()) {
                // Out of memory for a rebuilt segment: nothing was replaced;
                // the next look tries again.
                log::warn!("rill: compaction of topic {:?} partition {} failed: {e}", &*self.topic.name, p.index);
            }
        }
        let timer = self.timer.clone();
        timer.schedule(COMPACTION_CHECK, self);
    }
}

/// How often a topic's age limit is applied: a quarter of the limit (so a
/// message outlives it by at most a quarter more plus a segment's worth),
/// at least every millisecond and at most every second.
fn expiry_period(retention_ms: u64) -> Duration {
    Duration::from_millis((retention_ms / 4).clamp(1, 1000))
}

impl BrokerInner {
    /// True in a child of `fork` that inherited this broker from the process
    /// that started it. `fork` copies only the calling thread: the copy's
    /// worker, timer and flusher threads do not exist here, its mutexes may
    /// be held by threads that do not exist, and its data directory, its
    /// mapped segments and its lock (an flock, shared by both processes'
    /// descriptors) are the parent's, still in use there. The copy can
    /// only be abandoned: `close` marks it closed and touches nothing else,
    /// and the last handle's drop leaks it (see `Handle`'s drop) rather than
    /// join threads that are not there or let go of files the parent uses.
    pub(super) fn forked(&self) -> bool {
        std::process::id() != self.pid
    }

    #[inline]
    pub(super) fn is_closed(&self) -> bool {
        // Acquire: pairs with the Release swap in `close`.
        self.closed.load(Ordering::Acquire)
    }

    /// How long a plain `publish` waits for `Block` subscribers.
    #[inline]
    pub(super) fn default_wait(&self) -> Wait {
        Wait::For(self.config.publish_timeout)
    }

    #[inline]
    pub(super) fn check_open(&self) -> Result<()> {
        if self.is_closed() { Err(Error::broker_closed()) } else { Ok(()) }
    }

    pub(super) fn topic(&self, name: &str) -> Result<Arc<Topic>> {
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
    pub(super) fn topic_for_publish(&self, name: &str) -> Result<Arc<Topic>> {
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
    pub(super) fn create_topic(&self, name: &str, options: &TopicOptions) -> Result<Arc<Topic>> {
        names::validate_topic(name)?;
        let control = self.control.lock();
        self.check_open()?;
        if self.topics.load().contains_key(name) {
            return Err(Error::TopicExists(name.to_owned()));
        }
        if options.cleanup.compacts() && self.store().is_some() {
            return Err(Error::InvalidArgument(format!(
                "topic {name:?}: compaction ({:?}) is for in-memory topics; compacting a topic on a data directory \
                 is not implemented yet",
                options.cleanup
            )));
        }
        // The age limit's timer first: failing to start it creates nothing.
        let expiry = match options.effective_retention_ms() {
            Some(ms) => Some((self.expiry_timer()?, expiry_period(ms))),
            None => None,
        };
        let (fsync, repair) = (self.config.fsync, self.config.repair);
        // So is the compactor's.
        let compactor = if options.cleanup.compacts() { Some(self.compactor()?) } else { None };
        let topic = Arc::new(match self.store() {
            None => Topic::new(name, options)?,
            Some(store) if store.sharing() == Sharing::Processes => {
                let bell = self.doorbell.as_ref().map(|d| d.bell());
                store.with_topic_list(|list| {
                    match list.iter().find(|t| t.name == name) {
                        // Listed by another process: joined, with the options
                        // it was made with (see "Several processes").
                        Some(meta) => {
                            let dir = |p| store.partition_dir(meta.dir, p);
                            Topic::open(name, &meta.options, &dir, fsync, repair, Opening::Join, bell)
                        }
                        None => store.add_topic(name, options, |dir| {
                            Topic::open(name, options, dir, fsync, repair, Opening::First, bell)
                        }),
                    }
                })?
            }
            Some(store) => store
                .add_topic(name, options, |dir| Topic::open(name, options, dir, fsync, repair, Opening::Alone, None))?,
        });
        if let Some(doorbell) = &self.doorbell {
            Self::watch(doorbell, &topic);
        }
        if let Some((timer, every)) = expiry {
            timer.schedule(every, Expire { topic: topic.clone(), every, timer: timer.clone() });
        }
        if let Some(timer) = compactor {
            timer.schedule(COMPACTION_CHECK, Compact { topic: topic.clone(), timer: timer.clone() });
        }
        // Shares all but O(log n) nodes with the current map (see "The
        // topic map" in the module docs).
        let mut map = TopicMap::clone(&self.topics.load());
        map.insert_mut(topic.name.clone(), topic.clone());
        self.topics.store(std::sync::Arc::new(map));
        if let Some(poke) = &*self.flush_poke.lock() {
            // Its partitions' files are prepared and hooked now, not at the
            // next interval (see `prepare_ahead`).
            poke.poke();
        }
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

    /// The age-limit timer, started now if this is the first topic with one.
    /// Starts the age-limit jobs of the topics a data directory brought
    /// back (a topic created afterwards starts its own in `create_topic`).
    pub(super) fn resume_expiry(&self) -> Result<()> {
        let Some(store) = self.store() else { return Ok(()) };
        let topics = self.topics.load();
        for (name, options) in store.topic_options() {
            if let (Some(ms), Some(topic)) = (options.retention_ms.filter(|&ms| ms > 0), topics.get(name.as_str())) {
                let timer = self.expiry_timer()?;
                let every = expiry_period(ms);
                timer.schedule(every, Expire { topic: topic.clone(), every, timer: timer.clone() });
            }
        }
        Ok(())
    }

    fn ack_watch_timer(&self) -> Result<Arc<Timer<AckWatch>>> {
        let mut slot = self.ack_watch.lock();
        if let Some(t) = &*slot {
            return Ok(t.clone());
        }
        let timer = Arc::new(Timer::start()?);
        *slot = Some(timer.clone());
        Ok(timer)
    }

    /// The compactor's thread, started now if this is the first compacted topic.
    fn compactor(&self) -> Result<Arc<Timer<Compact>>> {
        let mut slot = self.compactor.lock();
        if let Some(t) = &*slot {
            return Ok(t.clone());
        }
        let timer = Arc::new(Timer::start_named("rill-compactor")?);
        *slot = Some(timer.clone());
        Ok(timer)
    }

    fn expiry_timer(&self) -> Result<Arc<Timer<Expire>>> {
        let mut slot = self.expiry.lock();
        if let Some(t) = &*slot {
            return Ok(t.clone());
        }
        let timer = Arc::new(Timer::start()?);
        *slot = Some(timer.clone());
        Ok(timer)
    }

    /// The topic `name`, created with the default options if absent.
    pub(super) fn topic_or_create(&self, name: &str) -> Result<Arc<Topic>> {
        match self.topic(name) {
            Err(Error::NoSuchTopic(_)) => match self.create_topic(name, &self.config.default_topic) {
                // Another thread created it first.
                Err(Error::TopicExists(_)) => self.topic(name),
                other => other,
            },
            other => other,
        }
    }

    /// Removes `topic` from the topic map (if it is still the one under its
    /// name). Readers that hold it (wildcard subscriptions that matched it)
    /// keep their reference and read nothing new: nobody can publish to it
    /// any more. Its memory goes with the last reference.
    fn remove_topic(&self, _control: &Control, topic: &Arc<Topic>) {
        let current = self.topics.load();
        if !current.get(&topic.name).is_some_and(|t| Arc::ptr_eq(t, topic)) {
            return;
        }
        let mut map = TopicMap::clone(&current);
        map.remove_mut(&topic.name);
        self.topics.store(std::sync::Arc::new(map));
        // Nothing publishes to it any more; this also ends its expiry job.
        // Before its files go, so a publish that raced this and fails on
        // them reports the deleted topic.
        topic.mark_deleted();
        if let Some(store) = self.store()
            && let Err(e) = store.remove_topic(&topic.name)
        {
            // Nothing waits on this (a subscription is closing): the topic
            // stays listed, and comes back, empty, after a restart, or is
            // unlisted and its leftover directory goes at the next open.
            log::warn!("rill: could not remove the empty topic {:?} from the data directory: {e}", topic.name);
        }
    }

    /// Fails with `InvalidArgument` in `Sharing::Processes` mode: `what` is
    /// not shared between processes yet (see "Several processes" in the
    /// module docs).
    pub(super) fn refuse_when_shared(&self, what: &str) -> Result<()> {
        if self.config.sharing == Sharing::Processes {
            return Err(Error::InvalidArgument(format!(
                "{what} is not yet supported with Sharing::Processes (issue 39: its state would be \
                 written by several processes at once)"
            )));
        }
        Ok(())
    }

    /// Deletes topic `name` (see [`Broker::delete_topic`](super::Broker::delete_topic)).
    pub(super) fn delete_topic(&self, name: &str) -> Result<()> {
        names::validate_topic(name)?;
        self.refuse_when_shared("deleting a topic")?;
        // What detached wildcard readers read instead: an empty partition
        // of the smallest segment, shared by all of them and by every
        // delete. Made at the first delete, before anything is deleted, so
        // a failure to map it deletes nothing.
        let placeholder = {
            let mut slot = self.placeholder.lock();
            match &*slot {
                Some(p) => p.clone(),
                None => {
                    let tiny = LogConfig { segment_bytes: Some(MIN_SEGMENT_BYTES), ..LogConfig::default() };
                    slot.insert(Arc::new(Partition::new(0, Log::new(&tiny)?))).clone()
                }
            }
        };
        let (topic, dir, subs, consumers, snapshot) = {
            let mut control = self.control.lock();
            self.check_open()?;
            let Some(topic) = self.topics.load().get(name).cloned() else {
                return Err(Error::NoSuchTopic(name.to_owned()));
            };
            // On a data directory, unlisting it there is the commit point:
            // if that fails, nothing is deleted. Its directory goes below,
            // after publishers are told (see "Deleting a topic" in `store.rs`).
            let dir = match self.store() {
                Some(store) => store.unlist_topic(name)?,
                None => None,
            };
            // Under the control lock, so no subscription or consumer can
            // attach to it after this, and a name re-created later is a new
            // topic (from offset 0) with nothing of this one's state.
            self.remove_topic(&control, &topic);
            let mut subs = control.patterns.matches(name);
            // Shared members are not in the pattern index (see `shared.rs`).
            subs.extend(control.subs.values().filter(|s| s.shared && s.pattern.as_str() == name).cloned());
            let consumers: Vec<Arc<ConsumerCore>> =
                control.consumers.values().filter(|c| Arc::ptr_eq(&c.topic, &topic)).cloned().collect();
            // Offsets into a log that is gone mean nothing to its successor.
            control.groups.retain(|(_, t), _| **t != *name);
            for d in control.durable.values_mut() {
                d.positions.retain(|(t, _), _| **t != *name);
            }
            (topic, dir, subs, consumers, self.snapshot_offsets(&control))
        };
        // Outside the control lock: deleting many files can take a while. A
        // re-creation of the name meanwhile gets a directory of its own.
        if let (Some(store), Some(dir)) = (self.store(), dir)
            && let Err(e) = store.remove_topic_dir(dir)
        {
            // The deletion is committed; what is left goes at the next open.
            ::log::warn!(target: "rill::broker", "deleted topic {name:?}, but removing its files failed: {e}");
        }
        if let Err(e) = wait_offsets(snapshot) {
            // The topic is gone already; offsets of a topic that does not
            // exist are inert after a restart, and the next save drops them.
            ::log::warn!(target: "rill::broker", "deleted topic {name:?}, but saving offsets failed: {e}");
        }
        // Outside the control lock: closing runs the close hook, which takes it.
        for sub in &subs {
            SubCore::detach_topic(sub, &topic, &placeholder);
            if sub.pattern.is_literal() {
                SubCore::close_with_reason(sub, "topic deleted".into());
            }
        }
        for c in &consumers {
            // A blocked poll wakes and reports the deletion.
            c.waiters.notify();
        }
        ::log::info!(
            target: "rill::broker",
            "deleted topic {name:?} ({} subscription(s) and {} consumer(s) let go of it)",
            subs.len(),
            consumers.len()
        );
        Ok(())
    }

    /// Forgets durable subscription `name`'s saved positions.
    pub(super) fn delete_durable(&self, name: &str) -> Result<()> {
        names::validate_subscription_name(name)?;
        self.refuse_when_shared("a named (durable) subscription")?;
        let mut control = self.control.lock();
        self.check_open()?;
        if control.subs.values().any(|s| s.durable && s.name == name) {
            return Err(Error::Busy(format!(
                "durable subscription {name:?} is live: close it before deleting its saved position"
            )));
        }
        match control.durable.remove(name) {
            Some(_) => {
                let snapshot = self.snapshot_offsets(&control);
                drop(control);
                wait_offsets(snapshot)
            }
            None => Err(Error::NotFound(format!("no durable subscription {name:?} has a saved position"))),
        }
    }

    /// Takes a snapshot of the group commits and durable positions for the
    /// data directory, if there is one (to be synced under `Fsync::Always`).
    /// Called under the control mutex, so snapshots are numbered in the order
    /// of the changes they hold; wait for it with [`wait_offsets`] after
    /// releasing the mutex.
    fn snapshot_offsets(&self, control: &Control) -> Option<(Arc<Store>, Ticket)> {
        let store = self.store()?;
        let ticket = store.request(offsets_snapshot(control), store.sync_commits());
        Some((store, ticket))
    }

    /// Under `Fsync::Always`, makes the acks of durable subscription `sub`
    /// durable: its positions (published by its drainer before this) go into
    /// a snapshot that is synced before this returns. The drain calls it at
    /// the end of every round, so a round's acks share one write and fsync
    /// (with any other commits made meanwhile). A failure is logged and kept
    /// as the subscription's last error; the next round tries again.
    pub(super) fn persist_acks(&self, sub: &SubCore) {
        let Some(store) = self.store() else { return };
        if !store.sync_commits() {
            return;
        }
        let ticket = {
            let control = self.control.lock();
            store.request(offsets_snapshot(&control), true)
        };
        if let Err(e) = store.wait(ticket) {
            log::error!("rill: could not save the positions of subscription {:?}: {e}", sub.name);
        }
    }

    /// Forgets consumer group `group`'s committed offsets on `topic`.
    pub(super) fn delete_group(&self, group: &str, topic: &str) -> Result<()> {
        names::validate_group(group)?;
        names::validate_topic(topic)?;
        self.refuse_when_shared("a consumer group")?;
        let mut control = self.control.lock();
        self.check_open()?;
        let key = (group.to_owned(), Name::from(topic));
        match control.groups.get(&key) {
            None => Err(Error::NotFound(format!("consumer group {group:?} has no offsets on topic {topic:?}"))),
            Some(g) if !g.members.is_empty() => Err(Error::Busy(format!(
                "consumer group {group:?} has {} live member(s) on {topic:?}: close them before deleting the group",
                g.members.len()
            ))),
            Some(_) => {
                control.groups.remove(&key);
                let snapshot = self.snapshot_offsets(&control);
                drop(control);
                wait_offsets(snapshot)
            }
        }
    }

    pub(super) fn subscribe(
        this: &Arc<BrokerInner>,
        pattern: &str,
        mut options: SubscriptionOptions,
        handler: HandlerKind,
    ) -> Result<Subscription> {
        this.check_open()?;
        let pattern = Pattern::parse(pattern)?;
        // Every name is checked before anything is looked up or created, so
        // the error names the argument that is wrong.
        if let Some(name) = &options.name {
            names::validate_subscription_name(name)?;
        }
        if let Some(topic) = &options.dead_letter_topic {
            names::validate_dead_letter_topic(topic)?;
        }
        if options.shared && (options.name.is_none() || !pattern.is_literal()) {
            return Err(Error::InvalidArgument(format!(
                "a shared subscription needs a name and a pattern naming one topic (no wildcards), got \
                 name {:?} and pattern {:?}",
                options.name,
                pattern.as_str()
            )));
        }
        if options.shared {
            this.refuse_when_shared("a shared subscription")?;
        } else if options.name.is_some() {
            this.refuse_when_shared("a named (durable) subscription")?;
        }
        if pattern.is_literal() && this.topic(pattern.as_str()).is_err() {
            // Naming one topic that does not exist is a mistake, unless topics
            // are created on demand.
            this.topic_for_publish(pattern.as_str())?;
        }
        if options.priority.is_none() && pattern.is_literal() {
            // The one topic it names gives its default priority.
            options.priority = this.topic(pattern.as_str()).ok().and_then(|t| t.priority);
        }
        let id = crate::sync::unique_id();
        let name = options.name.clone().unwrap_or_else(|| match this.config.sharing {
            Sharing::Exclusive => format!("anon-{id}"),
            // Ids are per process: the pid keeps two processes' anonymous
            // subscriptions (and their dead-letter topics, which live in the
            // shared directory) apart.
            Sharing::Processes => format!("anon-{}-{id}", std::process::id()),
        });
        let dlq_name = options.dead_letter_topic.clone().unwrap_or_else(|| names::default_dead_letter_topic(&name));
        if pattern.matches(&dlq_name) {
            // Its dead letters would come back to it, fail again and loop.
            return Err(Error::InvalidArgument(format!(
                "the dead-letter topic {dlq_name:?} matches the subscription's own pattern {:?}: \
                 its dead letters would be delivered to it again; choose a dead_letter_topic outside it",
                pattern.as_str()
            )));
        }
        let dead_letters = if options.name.is_none() && options.dead_letter_topic.is_none() {
            // An anonymous subscription's own dead-letter topic is made when
            // its first message is dead-lettered: most never need one.
            let (broker, name) = (this.clone(), dlq_name.clone());
            DeadLetters::lazy(dlq_name, Box::new(move || broker.topic_or_create(&name)))
        } else {
            DeadLetters::Known(this.topic_or_create(&dlq_name)?)
        };
        let broker = this.clone();
        let releaser = this.clone();
        let persister = this.clone();
        let persist = options.name.is_some() && this.store().is_some_and(|s| s.sync_commits());
        let ack_watch = match options.ack_timeout {
            Some(_) => Some(this.ack_watch_timer()?),
            None => None,
        };
        let on_stall = (options.shared && options.ack_timeout.is_some()).then(|| {
            let broker = this.clone();
            Box::new(move |sub: &Arc<SubCore>, call: u64, report: &dyn Fn(Stall)| {
                let mut control = broker.control.lock();
                broker.shared_member_stalled(&mut control, sub, call, report)
            }) as _
        });
        let exec =
            if options.dedicated_thread { Exec::Dedicated(Mutex::new(None)) } else { Exec::Pool(this.pool.clone()) };
        let env = SubEnv {
            exec,
            timer: Some(this.timer.clone()),
            dead_letters: Some(dead_letters),
            on_close: Some(Box::new(move |sub: &SubCore| broker.on_subscription_closed(sub))),
            on_release: options.shared.then(|| {
                Box::new(move |sub: &SubCore, partition: u32, offset: u64| {
                    let mut control = releaser.control.lock();
                    releaser.hand_over(&mut control, &sub.name, sub.pattern.as_str(), partition, offset);
                }) as _
            }),
            on_round_end: persist.then(|| Box::new(move |sub: &SubCore| persister.persist_acks(sub)) as _),
            ack_watch,
            on_stall,
        };
        let sub = Arc::new(SubCore::new(id, name.clone(), pattern.clone(), &options, handler, env)?);

        let mut control = this.control.lock();
        this.check_open()?;
        if control.live_names.contains(&name)
            && !(options.shared && control.shared.get(&name).is_some_and(|g| g.topic == pattern.as_str()))
        {
            return Err(Error::Busy(format!(
                "a subscription named {name:?} is already live (only shared subscriptions on the same topic \
                 may share a name)"
            )));
        }
        // Work out every reader first, so a bad start offset attaches nothing.
        let saved = saved_positions(&control, &sub);
        let topics = this.topics.load();
        let mut readers = Vec::new();
        // A literal pattern names its one topic: looked up, not matched
        // against every topic.
        let mut matched: Vec<&Arc<Topic>> = if pattern.is_literal() {
            topics.get(pattern.as_str()).into_iter().collect()
        } else {
            topics.values().filter(|t| pattern.matches(&t.name)).collect()
        };
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
                        StartPosition::Offset(o) => log.cursor_at(o)?,
                        // Resuming: retention may trim the found offset
                        // before the cursor is made; the first read then
                        // reports what it missed.
                        StartPosition::Time(t) => log.cursor_resuming(log.offset_at_time(t)),
                    },
                };
                readers.push((t.name.clone(), p.clone(), cursor));
            }
        }
        if options.dedicated_thread {
            let s = sub.clone();
            let handle =
                crate::sync::spawn_named(format!("rill-sub-{}", sub.name), move || SubCore::dedicated_loop(s))?;
            // Joined when the subscription is closed (or detached when its
            // last reference goes), not kept here for the broker's lifetime.
            sub.set_join_handle(handle);
        }
        if options.shared {
            // A member reads only the partitions nobody held; the ones taken
            // from other members come when they let go (see `shared.rs`).
            let group = control
                .shared
                .entry(name.clone())
                .or_insert_with(|| SharedGroup::new(pattern.as_str().to_string(), readers.len()));
            let moves = group.join(sub.clone());
            readers.retain(|(_, p, _)| moves.take.contains(&p.index));
            for (member, partition) in moves.revoke {
                SubCore::revoke(&member, partition);
            }
        }
        for (topic, p, cursor) in readers {
            SubCore::attach_to(&sub, topic, &p, cursor);
        }
        if !options.shared {
            // Shared members take partitions by assignment only, never all
            // of a re-created topic's.
            control.patterns.insert(&pattern, id, sub.clone());
        }
        control.subs.insert(id, sub.clone());
        control.live_names.insert(name);
        drop(control);
        // Deliver whatever is already there (earliest, or a saved position).
        SubCore::poke(&sub);
        Ok(Subscription { core: sub })
    }

    /// The close hook of every subscription: forget it, and keep a durable
    /// one's positions for its return.
    pub(super) fn on_subscription_closed(&self, sub: &SubCore) {
        let mut control = self.control.lock();
        control.patterns.remove(&sub.pattern, sub.id);
        control.subs.remove(&sub.id);
        if sub.shared {
            self.shared_member_closed(&mut control, sub);
            return;
        }
        control.live_names.remove(&sub.name);
        // An anonymous subscription's own dead-letter topic goes with it
        // unless it holds dead letters (nothing can publish to it after the
        // last handler call, which came before this hook).
        if let Some(dlq) = sub.own_dead_letter_topic()
            && self.config.sharing == Sharing::Exclusive
            && dlq.partitions.iter().all(|p| p.log.end_offset() == 0)
        {
            self.remove_topic(&control, &dlq);
        }
        if sub.durable {
            let saved = control.durable.entry(sub.name.clone()).or_default();
            for (topic, partition, offset) in sub.positions() {
                saved.positions.insert((topic, partition), offset);
            }
            let snapshot = self.snapshot_offsets(&control);
            drop(control);
            if let Err(e) = wait_offsets(snapshot) {
                // A close hook cannot fail: after a crash now, the
                // subscription resumes from the positions saved before.
                log::warn!("rill: could not save the positions of subscription {:?}: {e}", sub.name);
            }
        }
    }

    /// A shared member's close: its partitions go to the other members, each
    /// from the offset the member reached (see `shared.rs`).
    fn shared_member_closed(&self, control: &mut Control, sub: &SubCore) {
        let Some(group) = control.shared.get_mut(&sub.name) else { return };
        let moves = group.leave(sub.id);
        let empty = group.is_empty();
        for (member, partition) in moves.revoke {
            SubCore::revoke(&member, partition);
        }
        for (topic, partition, offset) in sub.positions() {
            // A partition handed to it after its close removed its listeners.
            if let Ok(t) = self.topic(&topic)
                && let Some(p) = t.partitions.get(partition as usize)
            {
                p.remove_listener(sub.id);
            }
            self.hand_over(control, &sub.name, &topic, partition, offset);
        }
        if empty {
            control.shared.remove(&sub.name);
            control.live_names.remove(&sub.name);
        }
    }

    /// A shared member's handler call `call` overran its `ack_timeout`: if
    /// another member can take over and the call's message has not come
    /// again after a stall already, the member is left out of the
    /// assignment and every partition it reads goes to the new owners from
    /// its last acked offset (see `subscription/deadline.rs`). Whatever it
    /// decides goes to `report` before any partition moves, so whoever sees
    /// the stuck message at its new owner sees the stall reported too.
    fn shared_member_stalled(
        &self,
        control: &mut Control,
        sub: &Arc<SubCore>,
        call: u64,
        report: &dyn Fn(Stall),
    ) -> Stall {
        let stays = |stall: Stall| {
            report(stall);
            stall
        };
        let Some(group) = control.shared.get_mut(&sub.name) else { return stays(Stall::Alone) };
        if !group.others_can_take(sub.id) {
            return stays(Stall::Alone);
        }
        let mut again = false;
        let claimed = sub.claim_stalled_call(call, |partition, resume| {
            again = group.came_again(partition, resume);
            !again
        });
        let Some((stuck, resume)) = claimed else {
            return stays(if again { Stall::CameAgain } else { Stall::Returned });
        };
        // Reported before the moves below make the stall visible elsewhere.
        report(Stall::Moved);
        group.redelivering(stuck, resume);
        let moves = group.expel(sub.id);
        for (member, partition) in moves.revoke {
            // The stalled member's own partitions are handed over below.
            if member.id != sub.id {
                SubCore::revoke(&member, partition);
            }
        }
        for (topic, partition, offset) in sub.surrender(stuck, resume) {
            self.hand_over(control, &sub.name, &topic, partition, offset);
        }
        Stall::Moved
    }

    /// Gives `partition` of shared subscription `name` to the member that
    /// owns it now, reading from `offset`; with no member, keeps `offset` as
    /// the name's saved position.
    pub(super) fn hand_over(&self, control: &mut Control, name: &str, topic: &str, partition: u32, offset: u64) {
        // A deleted topic has nothing left to hand over.
        let Ok(topic) = self.topic(topic) else { return };
        let Some(p) = topic.partitions.get(partition as usize) else { return };
        match control.shared.get(name).and_then(|g| g.owner(partition)).cloned() {
            Some(owner) => {
                SubCore::attach_to(&owner, topic.name.clone(), p, p.log.cursor_resuming(offset));
                SubCore::poke(&owner);
            }
            None => {
                control
                    .durable
                    .entry(name.to_string())
                    .or_default()
                    .positions
                    .insert((topic.name.clone(), partition), offset);
            }
        }
    }

    pub(super) fn close(&self) {
        // AcqRel: the winner of the swap closes; Release pairs with the
        // Acquire in `is_closed`, so a caller that sees closed sees why.
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        if self.forked() {
            // An inherited copy (see `forked`): closed, and nothing else.
            return;
        }
        let (subs, consumers) = {
            let control = self.control.lock();
            let subs: Vec<Arc<SubCore>> = control.subs.values().cloned().collect();
            let consumers: Vec<Arc<ConsumerCore>> = control.consumers.values().cloned().collect();
            (subs, consumers)
        };
        for c in &consumers {
            c.close();
        }
        for sub in &subs {
            SubCore::close_with_reason(sub, "the broker was closed".into());
        }
        self.pool.stop();
        self.timer.stop();
        let expiry = self.expiry.lock().take();
        if let Some(t) = expiry {
            t.stop();
        }
        let ack_watch = self.ack_watch.lock().take();
        if let Some(t) = ack_watch {
            t.stop();
        }
        let compactor = self.compactor.lock().take();
        if let Some(t) = compactor {
            t.stop();
        }
        // A close from a handler did not wait: join the dedicated threads
        // (all but the caller's own) here, as an external close does.
        for sub in &subs {
            sub.join_thread();
        }
        if let Some(flusher) = self.flusher.lock().take() {
            flusher.stop();
        }
        if let Some(doorbell) = &self.doorbell {
            doorbell.stop();
        }
        // A clean close flushes everything, whatever the policy, then lets go
        // of the directory (handles still held read nothing new: publishing
        // to a closed broker fails).
        if let Some(store) = self.store.lock().take() {
            self.flush(&store, true);
        }
        self.topics.store(std::sync::Arc::new(TopicMap::new_sync()));
    }

    /// Has `doorbell` watch every partition of `topic`.
    pub(super) fn watch(doorbell: &Doorbell, topic: &Topic) {
        for p in topic.partitions.iter() {
            doorbell.watch(p);
        }
    }

    /// The data directory, if the broker is open on one.
    pub(super) fn store(&self) -> Option<Arc<Store>> {
        self.store.lock().clone()
    }

    /// Opens the data directory in `config` (nothing without one): takes its
    /// lock, reopens its topics (recovering their logs) and loads the
    /// offsets into a fresh control plane.
    pub(super) fn open_data_dir(config: &BrokerConfig) -> Result<Option<OpenedDir>> {
        let Some(root) = &config.data_dir else {
            if config.sharing == Sharing::Processes {
                return Err(Error::InvalidArgument(
                    "sharing a broker between processes (Sharing::Processes) needs a data_dir".into(),
                ));
            }
            return Ok(None);
        };
        if let Fsync::Interval(d) = config.fsync
            && d.is_zero()
        {
            return Err(Error::InvalidArgument("the fsync interval must be more than 0".into()));
        }
        // Loom has no file mapping to share (see `doorbell.rs`).
        #[cfg(loom)]
        if config.sharing == Sharing::Processes {
            return Err(Error::InvalidArgument("Sharing::Processes is not modelled under loom".into()));
        }
        let opened = Store::open_shared(root, config.fsync, config.repair, config.sharing)?;
        let store = Arc::new(opened.store);
        let opening = match (config.sharing, opened.first) {
            (Sharing::Exclusive, _) => Opening::Alone,
            (Sharing::Processes, true) => Opening::First,
            (Sharing::Processes, false) => Opening::Join,
        };
        // Processes mode: the directory's doorbell word (see `doorbell.rs`).
        let bell = match opening {
            Opening::Alone => None,
            _ => Some(Arc::new(Bell::open(root, opening == Opening::First)?)),
        };
        let mut topics = HashMap::new();
        for meta in &opened.topics {
            let dir = |p| store.partition_dir(meta.dir, p);
            let topic =
                Topic::open(&meta.name, &meta.options, &dir, config.fsync, config.repair, opening, bell.as_ref())?;
            if let Some(bytes) = store.read_topic_file(meta.dir, super::schema::SCHEMA_FILE)? {
                topic.schema.restore(&bytes)?;
            }
            topics.insert(topic.name.clone(), Arc::new(topic));
        }
        let mut control = Control::default();
        for (group, topic, committed) in opened.offsets.groups {
            // A group of a topic that is gone (an emptied dead-letter topic)
            // is kept as it was: it still answers `group_stats` if the topic returns.
            let topic: Name = topic.into();
            control.groups.insert((group, topic), Group { committed, ..Group::default() });
        }
        for (name, positions) in opened.offsets.durable {
            let d = control.durable.entry(name).or_default();
            for (topic, partition, offset) in positions {
                d.positions.insert((topic.into(), partition), offset);
            }
        }
        // See "Offsets past a recovered end" in the module docs; a joiner
        // recovered nothing, and its first opener made the resets.
        if opening != Opening::Join && reset_offsets_past_end(&topics, &mut control) {
            store.wait(store.request(offsets_snapshot(&control), true))?;
        }
        store.opened()?;
        log::info!("rill: opened data directory {:?}: {} topics", store.root(), topics.len());
        Ok(Some((store, topics, control, bell)))
    }

    /// Starts the flusher of a broker opened on a data directory.
    pub(super) fn start_flusher(this: &Arc<BrokerInner>) -> Result<()> {
        if this.store().is_none() {
            return Ok(());
        }
        let (interval, sync) = match this.config.fsync {
            Fsync::Interval(d) => (d, true),
            // The logs' marking rounds (which flush nothing) and the positions
            // of live durable subscriptions (commits need nothing): as often
            // as the default interval.
            Fsync::Never => (DEFAULT_POSITIONS_INTERVAL, false),
            // Nothing to do: every publish, commit and drain round of a
            // durable subscription is synced when it happens.
            Fsync::Always => return Ok(()),
        };
        // A strong reference: the cycle it makes (broker -> flusher -> job ->
        // broker) ends at `close`, which every broker gets (the last handle's
        // drop calls it) and which stops the flusher, dropping the job.
        let inner = this.clone();
        let short = this.clone();
        let flusher = Flusher::start(
            interval,
            Box::new(move |poke: &Poke| {
                if let Some(store) = inner.store() {
                    inner.prepare_ahead(poke);
                    inner.flush(&store, sync);
                }
            }),
            Box::new(move |poke: &Poke| short.prepare_ahead(poke)),
        )?;
        let poke = flusher.poker();
        // The topics the directory brought: prepared and hooked right away.
        poke.poke();
        *this.flush_poke.lock() = Some(poke);
        *this.flusher.lock() = Some(flusher);
        Ok(())
    }

    /// Faults in the pages of every durable partition's active segment file
    /// ahead of its publishers, once per segment (see `Log::prepare_ahead`),
    /// on the flusher's thread; and has each partition's log `poke` the
    /// flusher after its every roll (a partition gets its hook here, at the
    /// first run after its topic was created or opened), so that each new
    /// file is prepared as soon as it is in use, not at the next interval.
    fn prepare_ahead(&self, poke: &Poke) {
        for t in self.topics.load().values() {
            for p in t.partitions.iter() {
                p.log.set_roll_hook(|| {
                    let poke = poke.clone();
                    RollHook(Box::new(move || poke.poke()))
                });
                p.log.prepare_ahead();
            }
        }
    }

    /// Runs every partition's log round (`Log::flusher_round`: a sync
    /// round under `Interval`, a marking round under `Never`, which marks
    /// the segments sealed since the last one complete so that damage in
    /// them is `Corrupt` after a kill; nothing under `Always`) and writes the
    /// offsets (synced if `sync`). Failures are logged: the next flush tries
    /// again.
    fn flush(&self, store: &Store, sync: bool) {
        if store.fsync() != Fsync::Always {
            for t in self.topics.load().values() {
                for p in t.partitions.iter() {
                    if let Err(e) = p.log.flusher_round() {
                        log::error!("rill: could not sync partition {} of {:?}: {e}", p.index, t.name);
                    }
                }
            }
        }
        let ticket = store.request(offsets_snapshot(&self.control.lock()), sync);
        if let Err(e) = store.wait(ticket) {
            log::error!("rill: could not save offsets: {e}");
        }
    }
}

/// A consumer's hooks into the broker that made it; each takes the control
/// mutex (see `group.rs` for why a lock is right there).
impl GroupHost for Arc<BrokerInner> {
    fn is_closed(&self) -> bool {
        BrokerInner::is_closed(self)
    }

    fn join(&self, core: &Arc<ConsumerCore>) -> Result<Assignment> {
        let mut control = self.control.lock();
        // Under the mutex: `close` takes it to collect the consumers it
        // closes, so a consumer that joins after that sees the broker closed.
        self.check_open()?;
        if core.topic.is_deleted() {
            // Its group's key may belong to a new topic of the same name by now.
            return Err(core.topic.deleted_error());
        }
        control.consumers.insert(core.id, core.clone());
        let g = control.groups.entry((core.group.clone(), core.topic.name.clone())).or_default();
        g.join(core.clone(), core.topic.partitions.len() as u32);
        g.expel_idle(Some(core.id));
        Ok(assignment_of(g, core.id).expect("it just joined"))
    }

    fn assignment(&self, core: &ConsumerCore) -> Option<Assignment> {
        let control = self.control.lock();
        assignment_of(control.groups.get(&group_key(core))?, core.id)
    }

    fn expel_idle(&self, core: &ConsumerCore) -> Duration {
        let mut control = self.control.lock();
        control.groups.get_mut(&group_key(core)).map_or(Duration::MAX, |g| g.expel_idle(Some(core.id)))
    }

    fn commit(&self, core: &ConsumerCore, offsets: &[(u32, u64)]) -> Result<Vec<u32>> {
        let mut control = self.control.lock();
        if core.topic.is_deleted() {
            // Its group's key may belong to a new topic of the same name by now.
            return Err(core.topic.deleted_error());
        }
        let Some(g) = control.groups.get_mut(&group_key(core)) else {
            return Ok(offsets.iter().map(|&(p, _)| p).collect());
        };
        let mut refused = Vec::new();
        for &(partition, offset) in offsets {
            if g.owns(core.id, partition) {
                g.committed[partition as usize] = Some(offset);
                // Failed attempts at messages now behind the commit are moot.
                g.attempts.retain(|&(p, o), _| p != partition || o >= offset);
            } else {
                refused.push(partition);
            }
        }
        // The snapshot is numbered under the control mutex, so two commits
        // reach the data directory in the order they were made; it is written
        // (and synced) after the mutex is released, shared with other commits.
        if refused.len() < offsets.len() {
            let snapshot = self.snapshot_offsets(&control);
            drop(control);
            wait_offsets(snapshot)?;
        }
        Ok(refused)
    }

    fn committed(&self, core: &ConsumerCore) -> Vec<Option<u64>> {
        let control = self.control.lock();
        let mut committed = control.groups.get(&group_key(core)).map(|g| g.committed.clone()).unwrap_or_default();
        committed.resize(core.topic.partitions.len(), None);
        committed
    }

    /// Leaves the group; the others take its partitions.
    fn release_consumer(&self, core: &ConsumerCore) {
        let mut control = self.control.lock();
        control.consumers.remove(&core.id);
        if let Some(g) = control.groups.get_mut(&group_key(core)) {
            g.leave(core.id);
        }
    }

    fn nack(&self, core: &ConsumerCore, partition: u32, offset: u64, forget: bool) -> Option<u32> {
        let mut control = self.control.lock();
        let g = control.groups.get_mut(&group_key(core))?;
        if !g.owns(core.id, partition) {
            return None;
        }
        if forget {
            return g.attempts.remove(&(partition, offset));
        }
        let n = g.attempts.entry((partition, offset)).or_default();
        *n += 1;
        Some(*n)
    }

    fn dead_letter_topic(&self, name: &str) -> Result<Arc<Topic>> {
        self.topic_or_create(name)
    }
}

fn group_key(core: &ConsumerCore) -> (String, Name) {
    (core.group.clone(), core.topic.name.clone())
}

fn assignment_of(g: &Group, id: u64) -> Option<Assignment> {
    Some(Assignment { partitions: g.assignment(id)?.to_vec(), committed: g.committed.clone() })
}

/// A data directory just opened: its store, its topics, its control plane.
pub(super) type OpenedDir = (Arc<Store>, HashMap<Name, Arc<Topic>>, Control, Option<Arc<Bell>>);

/// How often the flusher of a broker under `Never` (whose logs flush
/// nothing) runs the logs' marking rounds and saves the positions of its
/// live durable subscriptions: the bound on how long a sealed segment stays
/// without its completion marker.
const DEFAULT_POSITIONS_INTERVAL: Duration = Duration::from_millis(100);

/// Waits for a snapshot taken by `BrokerInner::snapshot_offsets` (nothing
/// without a data directory).
fn wait_offsets(snapshot: Option<(Arc<Store>, Ticket)>) -> Result<()> {
    match snapshot {
        Some((store, ticket)) => store.wait(ticket),
        None => Ok(()),
    }
}

/// Everything the data directory keeps besides messages: group commits, and
/// the positions of durable subscriptions, away (saved at their close) or
/// live (read now).
fn offsets_snapshot(control: &Control) -> Offsets {
    let mut groups: Vec<_> =
        control.groups.iter().map(|((g, t), group)| (g.clone(), t.to_string(), group.committed.clone())).collect();
    groups.sort();
    let mut durable: HashMap<&str, HashMap<(Name, u32), u64>> =
        control.durable.iter().map(|(name, d)| (name.as_str(), d.positions.clone())).collect();
    for sub in control.subs.values().filter(|s| s.durable) {
        let saved = durable.entry(sub.name.as_str()).or_default();
        for (topic, partition, offset) in sub.positions() {
            saved.insert((topic, partition), offset);
        }
    }
    let mut durable: Vec<(String, Positions)> = durable
        .into_iter()
        .map(|(name, positions)| {
            let mut positions: Vec<_> = positions.into_iter().map(|((t, p), o)| (t.to_string(), p, o)).collect();
            positions.sort();
            (name.to_owned(), positions)
        })
        .collect();
    durable.sort();
    Offsets { groups, durable }
}

/// Resets every group commit and durable subscription position that points
/// past the end of its partition (as recovery left it) to that end, logging
/// and counting each; true if it reset any. See "Offsets past a recovered
/// end" in the module docs.
fn reset_offsets_past_end(topics: &HashMap<Name, Arc<Topic>>, control: &mut Control) -> bool {
    let mut any = false;
    let mut reset = |topic: &Topic, partition: u32, offset: &mut u64, whose: &dyn Fn() -> String| {
        let Some(p) = topic.partitions.get(partition as usize) else { return };
        let end = p.log.end_offset();
        if *offset <= end {
            return;
        }
        log::warn!(
            "rill: {} on partition {partition} of topic {:?} was offset {offset}, past the end of the \
             partition as recovery left it ({end}): reset to {end}, so messages published from now on \
             are delivered",
            whose(),
            topic.name
        );
        *offset = end;
        // Relaxed: a statistic, written before the broker is handed out
        // (the handle's publication orders it for every reader).
        p.offsets_reset.fetch_add(1, Ordering::Relaxed);
        any = true;
    };
    for ((group, topic), g) in &mut control.groups {
        // A group of a topic that is gone has nothing to compare with.
        let Some(t) = topics.get(topic) else { continue };
        for (partition, committed) in g.committed.iter_mut().enumerate() {
            if let Some(offset) = committed {
                reset(t, partition as u32, offset, &|| format!("the commit of consumer group {group:?}"));
            }
        }
    }
    for (name, d) in &mut control.durable {
        for ((topic, partition), offset) in &mut d.positions {
            let Some(t) = topics.get(topic) else { continue };
            reset(t, *partition, offset, &|| format!("the saved position of durable subscription {name:?}"));
        }
    }
    any
}

/// A durable subscription's saved positions (empty for anonymous ones).
fn saved_positions(control: &Control, sub: &SubCore) -> HashMap<(Name, u32), u64> {
    if !sub.durable {
        return HashMap::new();
    }
    control.durable.get(&sub.name).map(|d| d.positions.clone()).unwrap_or_default()
}
