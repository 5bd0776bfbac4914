//! Pull consumers: read a topic at your own pace, commit, seek and replay.
//!
//! A consumer belongs to a *group*. The group's committed offsets live in the
//! broker and outlive the consumer: a new consumer of the same group and
//! topic resumes there, and different groups each read every message.
//!
//! Any number of consumers may be live members of one group on one topic:
//! the group divides the topic's partitions among them (see `group.rs` for
//! the assignment and why it is made under the control mutex) and each polls
//! only its own. A partition that changes owner moves from the group's
//! committed offset, so what the old owner polled but did not commit is
//! polled again by the new one. A member that has not polled for its
//! `session_timeout` is expelled by the others (they look at a quarter of the
//! shortest session timeout, and whenever a member joins), and the member
//! that expelled it takes its partitions (see "Progress whatever the session
//! timeout" in `group.rs`); its next call rejoins.
//!
//! With `Sharing::Processes` a group spans the processes on the data
//! directory: the consumer's hooks are then `control::groups::ProcessMember`,
//! and which member owns a partition is a lock in the directory, not the
//! control plane's state (see `store/membership.rs`). A member then follows
//! the group when another member announces a join, a leave or a release
//! (its doorbell thread bumps the consumer's generation, and its next
//! `sync` gives up and takes partitions as the live members' split says),
//! and at a look every half of its session timeout, the fallback that
//! finds a member whose process died (see "Announcing changes" there).
//!
//! `poll` returns messages borrowed from the log, valid until the next call
//! that moves the consumer. Waiting in `poll` parks the thread (see
//! `waiters.rs`): the consumer is a listener of each partition it reads, and a
//! publisher's commit wakes it only if it is waiting.
//!
//! A caller that must not park a thread (an event loop) waits outside
//! instead: it hangs a hook on the consumer's bell
//! ([`Consumer::set_ready_hook`]), polls without waiting, and when a poll
//! returns nothing waits for the hook. Every poll arms the bell before it
//! looks and disarms it if it found messages, so only a poll that found
//! nothing leaves it armed ("The bell" in `waiters.rs` is the protocol).
//!
//! # Why this file is long
//!
//! Most of it is the public `Consumer` handle's API (poll, commit, nack,
//! seek, rollback, stats), each method short, over one type's state; the
//! group's assignment is in `group.rs`.

use std::fmt;
use std::time::{Duration, Instant};

use super::dead_letter::{self, Failed};
use super::delivered::Delivered;
use super::names::default_dead_letter_topic;
use super::partition::signal::{Entry, Listener};
use super::store::{ConsumerCounts, ConsumerDesc, Slot};
use super::subscription::{DEFAULT_MAX_ATTEMPTS, StartPosition};
use super::topic::Topic;
use super::topic::Wait;
use super::waiters::Waiters;
use crate::error::{Error, Result};
use crate::log::{Cursor, Lagged};
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::{Arc, dyn_arc};

/// What a consumer needs from the broker that made it, as a hook (the way a
/// subscription's close hook works), so this file does not name the broker.
/// Every call but `is_closed` takes the control mutex: none is on the path of
/// a message.
pub(crate) trait GroupHost: Send + Sync {
    /// True once the broker is closed.
    fn is_closed(&self) -> bool;
    /// Makes `core` a member of its group (again) and rebalances; `Closed`
    /// once the broker is closed.
    fn join(&self, core: &Arc<ConsumerCore>) -> Result<Assignment>;
    /// The partitions `core` owns now, or `None` if it is not a member (it
    /// was expelled).
    fn assignment(&self, core: &ConsumerCore) -> Option<Assignment>;
    /// The partitions `core` owns now, changing nothing (`assignment` may
    /// follow the group first, where the group spans processes).
    fn owned(&self, core: &ConsumerCore) -> Vec<u32> {
        self.assignment(core).map(|a| a.partitions).unwrap_or_default()
    }
    /// Expels the members, other than `core`, that have not polled for their
    /// session timeout; returns how long until it is worth looking again.
    fn expel_idle(&self, core: &ConsumerCore) -> Duration;
    /// Commits `offsets` (partition, offset) that `core` owns; returns the
    /// partitions it does not own, whose offsets were left alone. On a broker
    /// with a data directory also writes the group's offsets there (durably
    /// first under `Fsync::Always`), failing with `Io` if that write fails.
    fn commit(&self, core: &ConsumerCore, offsets: &[(u32, u64)]) -> Result<Vec<u32>>;
    /// The group's committed offsets, one per partition.
    fn committed(&self, core: &ConsumerCore) -> Vec<Option<u64>>;
    /// The consumer closed: it leaves its group, whose other members take
    /// its partitions.
    fn release_consumer(&self, core: &ConsumerCore);
    /// Counts a failed attempt at the message at (`partition`, `offset`)
    /// for the group; returns the attempts so far, or `None` if `core` does
    /// not own the partition. `forget` drops the count (it was dead-lettered).
    fn nack(&self, core: &ConsumerCore, partition: u32, offset: u64, forget: bool) -> Option<u32>;
    /// The dead-letter topic `name`, created if absent with room for what
    /// a dead letter adds to a message of up to `source_max` bytes.
    fn dead_letter_topic(&self, name: &str, source_max: usize) -> Result<Arc<Topic>>;
}

/// What a member owns, with the group's committed offsets to start from.
pub(crate) struct Assignment {
    /// Its partitions, ascending.
    pub(crate) partitions: Vec<u32>,
    /// The group's committed offsets, one per partition of the topic.
    pub(crate) committed: Vec<Option<u64>>,
}

/// A consumer as a partition's listener: a commit wakes a blocked `poll`.
struct ConsumerListener {
    waiters: Arc<Waiters>,
}

impl Listener for ConsumerListener {
    #[inline]
    fn wake(&self) {
        // The publisher issued its fence (F1) already.
        self.waiters.notify_after_fence();
    }

    #[inline]
    fn may_sleep(&self) -> bool {
        self.waiters.may_sleep()
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Default [`ConsumerOptions::session_timeout`].
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// How a new consumer group starts reading (a group with committed offsets
/// resumes from them instead), how long a member may go without polling,
/// and what becomes of a message that keeps failing.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use rill::{ConsumerOptions, ConsumerStart, Record};
/// # use rill::{Broker, BrokerConfig, TopicOptions};
/// # let broker = Broker::new(BrokerConfig::default())?;
/// # broker.create_topic("orders", &TopicOptions::default())?;
///
/// broker.publish("orders", &Record::new(b"old"))?;
/// let options = ConsumerOptions { start: ConsumerStart::Latest, max_attempts: 3, ..ConsumerOptions::default() };
/// let mut consumer = broker.consumer("billing", "orders", options)?;
/// broker.publish("orders", &Record::new(b"new"))?;
/// assert_eq!(consumer.poll(10, Duration::from_secs(5))?[0].payload(), b"new");
/// # Ok::<(), rill::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerOptions {
    /// Where to start in partitions without a committed offset. Default: the
    /// earliest retained message.
    pub start: ConsumerStart,
    /// A member that has not called `poll` for this long (and is not inside
    /// one) is expelled from its group, and its partitions go to the member
    /// that expelled it (another one, in a call of its own) from the group's
    /// committed offsets: the visibility timeout of a pull consumer. Its next call rejoins. Must be positive. Default 10 s.
    pub session_timeout: Duration,
    /// After this many [`Consumer::nack`]s of one message the group gives up
    /// on it: it is published to `dead_letter_topic` and skipped. At least 1.
    /// Default [`DEFAULT_MAX_ATTEMPTS`](super::DEFAULT_MAX_ATTEMPTS), 5.
    pub max_attempts: u32,
    /// Where given-up messages go; `None`: `$dlq/<group>`, which holds the
    /// group name to [`MAX_SUBSCRIPTION_NAME_LEN`](super::MAX_SUBSCRIPTION_NAME_LEN)
    /// bytes. It is created (with the broker's default topic options) if absent.
    pub dead_letter_topic: Option<String>,
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        ConsumerOptions {
            start: StartPosition::Earliest,
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            dead_letter_topic: None,
        }
    }
}

/// Where a consumer starts in a partition without a committed offset: the
/// same choice a subscription makes, so the same type. (Its own `default()`
/// is a subscription's, `Latest`; a consumer's default is in
/// [`ConsumerOptions::default`], `Earliest`.)
pub type ConsumerStart = StartPosition;

/// The state a consumer shares with the broker (which closes it).
pub(crate) struct ConsumerCore {
    pub(crate) id: u64,
    pub(crate) group: String,
    pub(crate) topic: Arc<Topic>,
    pub(crate) waiters: Arc<Waiters>,
    pub(crate) session_timeout: Duration,
    /// Nacks of one message before it is dead-lettered.
    max_attempts: u32,
    /// Where dead letters go.
    dead_letter_topic: String,
    /// Bumped (under the control mutex) each time its assignment changes;
    /// see `group.rs`.
    pub(crate) generation: AtomicU64,
    /// When it was made: `alive_ns` counts from here.
    born: Instant,
    /// Nanoseconds after `born` of its last poll's start or end.
    alive_ns: AtomicU64,
    /// True while it is inside `poll` (alive, however long it waits).
    polling: AtomicBool,
    closed: AtomicBool,
    /// Messages returned by `poll`.
    delivered: AtomicU64,
    /// Messages trimmed by retention before they were polled.
    missed: AtomicU64,
    /// What the partitions it owned held past its position in them, at the
    /// end of its last poll (for `Broker::directory_consumers`).
    lag: AtomicU64,
    /// `Sharing::Processes`: what leaves the group's folder once its topic
    /// is deleted (set at its join by `control::groups::ProcessMember`), so
    /// a handle left open does not keep the partitions of a topic created
    /// again under the name.
    on_deleted: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl ConsumerCore {
    pub(crate) fn new(id: u64, group: String, topic: Arc<Topic>, options: &ConsumerOptions) -> ConsumerCore {
        let dead_letter_topic = options.dead_letter_topic.clone().unwrap_or_else(|| default_dead_letter_topic(&group));
        ConsumerCore {
            id,
            group,
            topic,
            waiters: Arc::new(Waiters::new()),
            session_timeout: options.session_timeout,
            max_attempts: options.max_attempts,
            dead_letter_topic,
            generation: AtomicU64::new(0),
            born: Instant::now(),
            alive_ns: AtomicU64::new(0),
            polling: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            delivered: AtomicU64::new(0),
            missed: AtomicU64::new(0),
            lag: AtomicU64::new(0),
            on_deleted: std::sync::OnceLock::new(),
        }
    }

    /// Sets what [`ConsumerCore::topic_deleted`] runs; the first call wins.
    pub(crate) fn on_deleted(&self, hook: Box<dyn Fn() + Send + Sync>) {
        let _ = self.on_deleted.set(hook);
    }

    /// Its topic was deleted (here or in another process): lets go of
    /// what it holds in the group and wakes a blocked `poll`, which then
    /// reports the deletion.
    pub(crate) fn topic_deleted(&self) {
        if let Some(hook) = self.on_deleted.get() {
            hook();
        }
        self.waiters.notify();
    }

    /// Its counters as its last poll left them.
    pub(crate) fn counts(&self) -> ConsumerCounts {
        // Relaxed: statistics, each on its own.
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ConsumerCounts { delivered: load(&self.delivered), missed: load(&self.missed), lag: load(&self.lag) }
    }

    /// Marks it closed and wakes a blocked `poll`.
    pub(crate) fn close(&self) {
        // Release: pairs with the Acquire in `is_closed`.
        self.closed.store(true, Ordering::Release);
        self.waiters.notify();
    }

    fn is_closed(&self) -> bool {
        // Acquire: pairs with the Release in `close`.
        self.closed.load(Ordering::Acquire)
    }

    /// Where its dead letters go.
    pub(crate) fn dead_letter_topic(&self) -> &str {
        &self.dead_letter_topic
    }

    /// Bumps its assignment generation and wakes its `poll` (called under
    /// the control mutex after its partitions changed).
    pub(crate) fn assignment_changed(&self) {
        // Release: pairs with the Acquire load in `Consumer::sync`, which then
        // takes the control mutex; the mutex orders the assignment itself.
        self.generation.fetch_add(1, Ordering::Release);
        self.waiters.notify();
    }

    /// Marks the start (`true`) or end of a poll: either is a sign of life.
    fn set_polling(&self, polling: bool) {
        let now = self.born.elapsed().as_nanos() as u64;
        // Relaxed: a liveness hint read under the control mutex by other
        // members; a stale value delays an expulsion by one look at most.
        self.alive_ns.store(now, Ordering::Relaxed);
        self.polling.store(polling, Ordering::Relaxed);
    }

    /// True if it is not polling and its last poll is older than its session
    /// timeout.
    pub(crate) fn session_expired(&self) -> bool {
        // Relaxed: see `set_polling`.
        let alive = Duration::from_nanos(self.alive_ns.load(Ordering::Relaxed));
        !self.polling.load(Ordering::Relaxed) && self.born.elapsed().saturating_sub(alive) > self.session_timeout
    }
}

/// A message returned by [`Consumer::poll`], borrowed from the log: a
/// [`Delivered`] message, the type a push handler's [`Message`](crate::Message)
/// wraps, under the name it had before the two were made one.
pub type Polled<'a> = Delivered<'a>;

/// Position of a consumer group in one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPartition {
    /// Partition index.
    pub partition: u32,
    /// Next offset the consumer will poll (the committed offset when no
    /// consumer is live, or when another member owns the partition).
    pub position: u64,
    /// Committed offset (`None`: nothing committed yet).
    pub committed: Option<u64>,
    /// One past the newest offset published.
    pub end: u64,
    /// `end` minus the committed offset (or minus the position, if nothing
    /// is committed).
    pub lag: u64,
}

/// A snapshot of a consumer group on one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerStats {
    /// The group.
    pub group: String,
    /// The topic.
    pub topic: String,
    /// Messages returned by `poll` (this consumer's life only).
    pub delivered: u64,
    /// Messages retention trimmed before they were polled.
    pub missed: u64,
    /// Total lag over all partitions.
    pub lag: u64,
    /// Per partition.
    pub partitions: Vec<GroupPartition>,
}

/// A consumer group's committed position on one topic, live consumer or not
/// (see [`Broker::group_stats`](super::Broker::group_stats)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupStats {
    /// The group.
    pub group: String,
    /// The topic.
    pub topic: String,
    /// Total lag over all partitions.
    pub lag: u64,
    /// Per partition.
    pub partitions: Vec<GroupPartition>,
}

/// A partition the member owns.
struct Part {
    cursor: Cursor,
    /// Where this member's reading of it started or last committed: if the
    /// cursor is past it when the partition is taken away, the member polled
    /// messages it can no longer commit.
    base: u64,
    /// Trimmed by retention before it was read, not yet counted in `missed`.
    missed: u64,
}

impl Part {
    fn new(cursor: Cursor, base: u64) -> Part {
        Part { cursor: Part::light(cursor), base, missed: 0 }
    }

    /// `cursor`, polling lightly (`Cursor::poll_lightly`: on a log shared
    /// by processes, a poll that finds nothing new leaves the tail word,
    /// the line each publish's fetch-add writes, to the publishers). Its
    /// doorbell looks for a consumer whether it sleeps in `poll` or not (a
    /// consumer has no state word to say it is draining: "Arming only
    /// while a listener may sleep" in `doorbell.rs`), so a dead
    /// publisher's reservation is given up after the abandon bound however
    /// seldom the caller polls.
    fn light(mut cursor: Cursor) -> Cursor {
        cursor.poll_lightly();
        cursor
    }

    /// True if a read would return a record or report a lag. A lag found
    /// here is kept for the next poll to count (the cursor has moved past
    /// the gap, so a read would not report it again).
    fn ready(&mut self) -> bool {
        if let Some(Lagged { missed, .. }) = self.cursor.take_lag() {
            self.missed += missed;
            return true;
        }
        self.cursor.has_next()
    }
}

/// True if a poll would return at once for something besides a change of
/// assignment: a close (the consumer's or its broker's), its topic's
/// deletion, or a partition it owns with a record to read or a lag to
/// report. What a waiting poll and a newly hung ready hook look at.
fn has_news(core: &ConsumerCore, host: &dyn GroupHost, parts: &mut [Option<Part>]) -> bool {
    core.is_closed() || host.is_closed() || core.topic.is_deleted() || parts.iter_mut().flatten().any(Part::ready)
}

/// A pull consumer of one topic, a member of one group. Not shared between
/// threads (it is `Send`); dropping it closes it.
pub struct Consumer {
    core: Arc<ConsumerCore>,
    host: Box<dyn GroupHost>,
    /// One per partition of the topic: `Some` for those it owns.
    parts: Vec<Option<Part>>,
    /// The assignment generation its `parts` reflect.
    generation: u64,
    /// Partitions taken from it, with messages polled there but not
    /// committed, since its last `commit`: that commit reports them.
    lost: Vec<u32>,
    /// Where partitions without a committed offset start.
    start: ConsumerStart,
    /// When to look for idle members next.
    next_check: Instant,
    /// Partition to start the next poll at, for fairness.
    next: usize,
    /// Set once `close` has released the group.
    released: bool,
    /// `Sharing::Processes`: its slot in its broker's registry, where each
    /// poll publishes its counters for other processes (see
    /// `store/registry.rs`).
    slot: Option<Slot>,
}

impl Consumer {
    /// Joins the group and positions the partitions it is given.
    pub(crate) fn new(core: Arc<ConsumerCore>, host: Box<dyn GroupHost>, start: ConsumerStart) -> Result<Consumer> {
        if let ConsumerStart::Offset(o) = start {
            // Checked on every partition now, so a partition this member
            // takes later (from a group without a commit) can start there.
            for p in core.topic.partitions.iter() {
                p.log.cursor_at(o)?;
            }
        }
        let parts = (0..core.topic.partitions.len()).map(|_| None).collect();
        let mut c = Consumer {
            core,
            host,
            parts,
            generation: 0,
            lost: Vec::new(),
            start,
            next_check: Instant::now(),
            next: 0,
            released: false,
            slot: None,
        };
        c.core.set_polling(false);
        let generation = c.core.generation.load(Ordering::Acquire);
        let assignment = c.host.join(&c.core)?;
        c.apply(generation, assignment, false);
        publish_counts(&c.core, None, c.lag_now());
        Ok(c)
    }

    /// `Sharing::Processes`: lists the consumer in its broker's registry
    /// for other processes, its counters published into `slot` now and at
    /// the end of each poll (see `store/registry.rs`). A failure to list
    /// it is logged: the consumer works all the same.
    pub(crate) fn list_in(&mut self, slot: Slot) {
        slot.publish_consumer(&self.core.counts());
        let topic = self.topic().to_owned();
        let desc = ConsumerDesc { id: self.core.id, group: self.core.group.clone(), topic };
        if let Err(e) = slot.list_consumer(desc) {
            log::warn!("consumer {:?} of {:?}: could not list it in the registry: {e}", self.core.group, self.topic());
        }
        self.slot = Some(slot);
    }

    /// What the partitions it owns hold past its position in them.
    fn lag_now(&self) -> u64 {
        let partitions = self.core.topic.partitions.iter().zip(&self.parts);
        partitions.filter_map(|(p, part)| Some(p.log.end_offset().saturating_sub(part.as_ref()?.cursor.offset()))).sum()
    }

    fn check_open(&self) -> Result<()> {
        if self.core.is_closed() || self.host.is_closed() {
            return Err(Error::Closed(format!("consumer {:?} of {:?} is closed", self.core.group, self.topic())));
        }
        if self.core.topic.is_deleted() {
            return Err(self.core.topic.deleted_error());
        }
        Ok(())
    }

    /// Brings its partitions up to date with the group's assignment, and
    /// rejoins if it was expelled. Cheap when nothing changed.
    fn sync(&mut self) -> Result<()> {
        // Acquire: pairs with the Release bump in `assignment_changed`.
        let generation = self.core.generation.load(Ordering::Acquire);
        if generation == self.generation {
            return Ok(());
        }
        match self.host.assignment(&self.core) {
            Some(a) => self.apply(generation, a, false),
            None => {
                // Expelled: whatever it held is gone, even partitions the
                // rejoin gives back (others may have read them meanwhile).
                let a = self.host.join(&self.core)?;
                self.apply(generation, a, true);
            }
        }
        Ok(())
    }

    /// Drops the partitions it lost (all of them if `expelled`) and opens
    /// the ones it gained at the group's committed offsets.
    fn apply(&mut self, generation: u64, a: Assignment, expelled: bool) {
        self.generation = generation;
        let mut owns = vec![false; self.parts.len()];
        for &p in &a.partitions {
            owns[p as usize] = true;
        }
        let core = self.core.clone();
        for (index, slot) in self.parts.iter_mut().enumerate() {
            let partition = &core.topic.partitions[index];
            if slot.is_some() && (expelled || !owns[index]) {
                let part = slot.take().expect("checked");
                partition.remove_listener(core.id);
                if part.cursor.offset() != part.base && !self.lost.contains(&(index as u32)) {
                    self.lost.push(index as u32);
                }
            }
            if slot.is_none() && owns[index] {
                let log = &partition.log;
                let cursor = match (a.committed[index], self.start) {
                    (Some(offset), _) => log.cursor_resuming(offset),
                    (None, ConsumerStart::Earliest) => log.cursor_from_first(),
                    (None, ConsumerStart::Latest) => log.cursor_from_end(),
                    // Checked retained in `new`; if trimmed since, the first
                    // read reports what was missed.
                    (None, ConsumerStart::Offset(o)) => log.cursor_resuming(o),
                    (None, ConsumerStart::Time(t)) => log.cursor_resuming(log.offset_at_time(t)),
                };
                let base = cursor.offset();
                *slot = Some(Part::new(cursor, base));
                let listener = dyn_arc!(ConsumerListener { waiters: core.waiters.clone() } => dyn Listener);
                partition.add_listener(Entry::always(core.id, listener), None);
            }
        }
    }

    fn no_partition(&self, partition: u32) -> Error {
        Error::NotFound(format!("partition {partition} of topic {:?} (it has {})", self.topic(), self.parts.len()))
    }

    fn not_owned(&self, partition: u32) -> Error {
        Error::Reassigned(format!(
            "partition {partition} of topic {:?} is not assigned to this member of group {:?}",
            self.topic(),
            self.core.group
        ))
    }

    /// The partition's state if it exists and this member owns it.
    fn owned(&self, partition: u32) -> Result<&Part> {
        match self.parts.get(partition as usize) {
            None => Err(self.no_partition(partition)),
            Some(None) => Err(self.not_owned(partition)),
            Some(Some(p)) => Ok(p),
        }
    }

    fn owned_mut(&mut self, partition: u32) -> Result<&mut Part> {
        self.owned(partition)?;
        Ok(self.parts[partition as usize].as_mut().expect("checked by owned"))
    }

    /// The topic it reads.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::ConsumerOptions;
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let consumer = broker.consumer("billing", "orders", ConsumerOptions::default())?;
    /// assert_eq!(consumer.topic(), "orders");
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn topic(&self) -> &str {
        &self.core.topic.name
    }

    /// The group it belongs to.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::ConsumerOptions;
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let consumer = broker.consumer("billing", "orders", ConsumerOptions::default())?;
    /// assert_eq!(consumer.group(), "billing");
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn group(&self) -> &str {
        &self.core.group
    }

    /// The partitions this member owns now, ascending (empty if the group
    /// has more members than partitions, or it was expelled and has not
    /// called since). Asks the group, so it sees a rebalance at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::{ConsumerOptions, TopicOptions};
    /// # use rill::{Broker, BrokerConfig};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    ///
    /// broker.create_topic("orders", &TopicOptions::with_partitions(4))?;
    /// let first = broker.consumer("billing", "orders", ConsumerOptions::default())?;
    /// assert_eq!(first.assignment(), [0, 1, 2, 3]);
    ///
    /// // A second member of the group takes half of the partitions.
    /// let second = broker.consumer("billing", "orders", ConsumerOptions::default())?;
    /// let (a, b) = (first.assignment(), second.assignment());
    /// assert_eq!((a.len(), b.len()), (2, 2));
    /// assert!(a.iter().all(|p| !b.contains(p)));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn assignment(&self) -> Vec<u32> {
        self.host.owned(&self.core)
    }

    /// What this consumer's `poll` waits on, for tests that must act while
    /// a poll is blocked.
    #[cfg(test)]
    pub(crate) fn waiters(&self) -> Arc<super::waiters::Waiters> {
        self.core.waiters.clone()
    }

    /// Hangs `hook` on the consumer's bell, replacing any earlier hook: for
    /// a caller that waits outside `poll` (an event loop, which must not
    /// park its thread). From then on, after a `poll` that returned no
    /// messages (with `max` > 0), `hook` is called once at the first of: a
    /// publish to a partition it owns, a change of its assignment, its
    /// close or its broker's, the deletion of its topic. A poll that
    /// returns messages disarms it: poll until a poll returns nothing,
    /// then wait for the hook. It is armed when hung up, too, and called
    /// at once if the consumer has something already: hanging it after
    /// the poll that found nothing is as good as before. The hook may
    /// also be called when a poll
    /// would still find nothing (the next poll then arms it again); it is
    /// never missed.
    ///
    /// It runs on the thread that made the change, often a publisher's, so
    /// it must be short and must not block or call back into this consumer
    /// (waking a task, writing an eventfd). [`Consumer::close`] (and so
    /// dropping it) rings an armed bell, then drops the hook.
    ///
    /// The wait is outside `poll`, so it does not keep the member alive in
    /// its group: poll within its `session_timeout` (a poll that returns
    /// nothing at once will do) or it is expelled, as between any two polls.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::time::Duration;
    /// use rill::{ConsumerOptions, Record};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let rung = Arc::new(AtomicUsize::new(0));
    /// let mut consumer = broker.consumer("billing", "orders", ConsumerOptions::default())?;
    /// let bell = Arc::clone(&rung);
    /// consumer.set_ready_hook(move || {
    ///     bell.fetch_add(1, Ordering::SeqCst); // an event loop would write an eventfd here
    /// });
    /// assert!(consumer.poll(10, Duration::ZERO)?.is_empty()); // nothing yet: the bell is armed
    /// broker.publish("orders", &Record::new(b"o-1"))?; // rings it, on this thread
    /// assert!(rung.load(Ordering::SeqCst) >= 1);
    /// assert_eq!(consumer.poll(10, Duration::ZERO)?.len(), 1);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn set_ready_hook(&mut self, hook: impl Fn() + Send + Sync + 'static) {
        self.core.waiters.set_bell(Box::new(hook));
        // Armed from the start, as a poll that found nothing leaves it, so a
        // caller that hangs the hook after that poll (an fd asked for
        // lazily) is not left waiting: arm (B1), then look as a poll does
        // (its assignment brought up to date first: a change after the arm
        // rings by itself) and ring now for what is already there. A sync
        // that fails rings too: the next poll reports it.
        self.core.waiters.arm();
        let synced = self.sync().is_ok();
        let core = &self.core;
        let ready = !synced || has_news(core, &*self.host, &mut self.parts);
        if ready {
            core.waiters.notify();
        } else {
            // A disarmed doorbell of this process arms for the bell (see
            // `Waiters::may_sleep`), as after a poll that found nothing.
            crate::broker::doorbell::listener_may_sleep();
        }
    }

    /// Up to `max` messages of the partitions it owns, waiting up to
    /// `timeout` for the first one. An empty batch means the timeout passed
    /// with nothing to read. Messages come in offset order within each
    /// partition; every partition it owns that has messages gets a share of
    /// `max` (those with fewer leave theirs to the others), and partitions
    /// take turns to come first. A rebalance is picked up here. With a
    /// ready hook ([`Consumer::set_ready_hook`]), a poll that returns
    /// nothing leaves the bell armed.
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
    /// broker.publish_batch("orders", &[Record::new(b"o-1"), Record::new(b"o-2"), Record::new(b"o-3")])?;
    /// let mut consumer = broker.consumer("billing", "orders", ConsumerOptions::default())?;
    /// let batch = consumer.poll(2, Duration::from_secs(5))?;
    /// assert_eq!(batch.iter().map(|m| m.payload()).collect::<Vec<_>>(), [b"o-1", b"o-2"]);
    /// let batch = consumer.poll(2, Duration::from_secs(5))?;
    /// assert_eq!(batch.iter().map(|m| m.offset()).collect::<Vec<_>>(), [2]);
    ///
    /// // Nothing more to read: an empty batch once the timeout passes.
    /// assert!(consumer.poll(2, Duration::from_millis(1))?.is_empty());
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn poll(&mut self, max: usize, timeout: Duration) -> Result<Vec<Delivered<'_>>> {
        // Before every look below (`check_open` included), so a change
        // those looks miss rings the bell ("The bell" in `waiters.rs`).
        let bell = max > 0 && self.core.waiters.arm_if_hooked();
        self.check_open()?;
        self.core.set_polling(true);
        let waited = self.wait_ready(max, Instant::now() + timeout);
        self.core.set_polling(false);
        waited?;
        if max == 0 {
            return Ok(Vec::new());
        }
        let n = self.parts.len();
        let start = self.next % n;
        self.next = start + 1;
        let order = (start..n).chain(0..start);
        // What each owned partition holds past its cursor (an estimate: the
        // newest records may still be being written), and its share of `max`.
        // A member owning one partition gives it all of `max` unasked.
        let shared = self.parts.iter().flatten().nth(1).is_some();
        let available: Vec<usize> = order
            .clone()
            .map(|i| match &self.parts[i] {
                Some(part) if shared => {
                    let end = self.core.topic.partitions[i].log.end_offset();
                    usize::try_from(end.saturating_sub(part.cursor.offset())).unwrap_or(usize::MAX)
                }
                Some(_) => usize::MAX,
                None => 0,
            })
            .collect();
        let mut shares = fair_shares(max, &available).into_iter();
        let topic = &self.core.topic.name;
        let mut out = Vec::with_capacity(max.min(1024));
        let mut missed = 0;
        // What the partitions hold past where this poll leaves its cursors.
        let mut lag = 0;
        // What a partition's share did not use (it held fewer records than
        // estimated) passes to the next one.
        let mut carry = 0;
        // Each partition is read at most once per poll, so the borrows of the
        // cursors (and of the messages they hand out) stay disjoint.
        let (before, from_start) = self.parts.split_at_mut(start);
        for (slot, index) in from_start.iter_mut().zip(start..).chain(before.iter_mut().zip(0..)) {
            let share = shares.next().unwrap_or(0);
            let Some(part) = slot else { continue };
            missed += std::mem::take(&mut part.missed);
            if let Some(Lagged { missed: m, .. }) = part.cursor.take_lag() {
                missed += m;
            }
            let want = (share + carry).min(max - out.len());
            let log = &self.core.topic.partitions[index].log;
            let at = part.cursor.offset();
            if want == 0 {
                lag += log.lag_from(at);
                continue;
            }
            let partition = index as u32;
            // Across one segment boundary, so a poll is not cut short where
            // a segment ends (a new topic's small first segment included).
            let (a, b) = match part.cursor.read_batches(want) {
                Ok(batches) => batches,
                // Trimmed again since `take_lag`: count it, read it next poll.
                Err(Lagged { missed: m, .. }) => {
                    missed += m;
                    carry = want;
                    // The cursor is borrowed here: what is left past the
                    // trimmed part.
                    lag += log.end_offset().saturating_sub(at.max(log.first_offset()));
                    continue;
                }
            };
            // Where the cursor is now (it is lent out with the batches).
            let next = [b, a].iter().find(|x| !x.is_empty()).map_or(at, |x| x.first_offset() + x.len() as u64);
            // Not `end_offset`: a consumer that has caught up (every poll
            // of a consumer keeping pace) then reads no tail word, the line
            // each publish's fetch-add writes (`Log::lag_from`).
            lag += log.lag_from(next);
            carry = want - a.len() - b.len();
            out.extend(a.iter().chain(b.iter()).map(|record| Delivered::new(topic, partition, record)));
        }
        // Relaxed load + store: the consumer is the only writer.
        let add = |c: &AtomicU64, n: u64| c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
        add(&self.core.delivered, out.len() as u64);
        add(&self.core.missed, missed);
        publish_counts(&self.core, self.slot.as_ref(), lag);
        if bell {
            if out.is_empty() {
                // The caller waits for the bell: a disarmed doorbell of this
                // process arms for it (see `Waiters::may_sleep`; this load
                // follows the arm's B1, as a waiter's follows W2).
                crate::broker::doorbell::listener_may_sleep();
            } else {
                // It found something: the caller polls again before it waits.
                self.core.waiters.disarm();
            }
        }
        Ok(out)
    }

    /// Waits until a partition it owns has something to read (or to report
    /// as missed) or `deadline` passes, following rebalances and expelling
    /// idle members on the way.
    fn wait_ready(&mut self, max: usize, deadline: Instant) -> Result<()> {
        loop {
            // Rejoins first if it was expelled: the partitions of the members
            // it expels then come to it, and this poll reads them (see
            // "Progress whatever the session timeout" in `group.rs`).
            self.sync()?;
            let now = Instant::now();
            if now >= self.next_check {
                let every = self.host.expel_idle(&self.core).max(MIN_EXPEL_CHECK);
                self.next_check = now.checked_add(every).unwrap_or(deadline);
                self.sync()?;
            }
            if max == 0 {
                return Ok(());
            }
            let generation = self.generation;
            let core = self.core.clone();
            let host = &self.host;
            let parts = &mut self.parts;
            // Parks until a commit, a rebalance (or close) wakes it, or it is
            // time to look for idle members; see waiters.rs. Every condition
            // below has a notifier (a commit here or, through the doorbell,
            // in another process; a rebalance; a close; a delete), so it
            // sleeps without naps: an idle member uses no CPU until then
            // (the idle part of `rill-bench --scenario ipc` measures it).
            let ready = core.waiters.wait_notified_until(
                Some(deadline.min(self.next_check)),
                || {
                    // Acquire: as in `sync`.
                    core.generation.load(Ordering::Acquire) != generation || has_news(&core, &**host, parts)
                },
                crate::broker::doorbell::listener_may_sleep,
            );
            self.check_open()?;
            if core.generation.load(Ordering::Acquire) != generation {
                continue;
            }
            if ready || Instant::now() >= deadline {
                return Ok(());
            }
        }
    }

    /// Commits the current position of every partition it owns (the offset
    /// after the last message polled) for the group. If partitions it had
    /// polled were reassigned since its last commit, their positions are not
    /// committed (the new owner reads them again from the group's committed
    /// offset) and the call fails with `Reassigned` naming them, once; the
    /// other partitions are committed all the same.
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
    /// // The group's next member starts after what was committed.
    /// let mut next = broker.consumer("billing", "orders", ConsumerOptions::default())?;
    /// assert_eq!(next.poll(10, Duration::from_secs(5))?[0].payload(), b"o-2");
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn commit(&mut self) -> Result<()> {
        self.check_open()?;
        self.sync()?;
        let offsets: Vec<(u32, u64)> = self
            .parts
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.as_ref().map(|p| (i as u32, p.cursor.offset())))
            .collect();
        let refused = self.host.commit(&self.core, &offsets)?;
        for &(partition, offset) in &offsets {
            if !refused.contains(&partition) {
                self.parts[partition as usize].as_mut().expect("listed above").base = offset;
            }
        }
        let mut lost = std::mem::take(&mut self.lost);
        lost.extend(refused.into_iter().filter(|p| !lost.contains(p)).collect::<Vec<_>>());
        if lost.is_empty() {
            return Ok(());
        }
        lost.sort_unstable();
        Err(Error::Reassigned(format!(
            "partitions {lost:?} of topic {:?} were reassigned to other members of group {:?}; \
             what this member polled there was not committed (the new owner reads it again); \
             its other partitions were committed",
            self.topic(),
            self.core.group
        )))
    }

    /// Commits `offset` for one partition it owns (not past the end);
    /// `Reassigned` if the group gave the partition to another member.
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
    /// broker.publish_batch("orders", &[Record::new(b"o-1"), Record::new(b"o-2"), Record::new(b"o-3")])?;
    /// let mut consumer = broker.consumer("billing", "orders", ConsumerOptions::default())?;
    /// assert_eq!(consumer.poll(10, Duration::from_secs(5))?.len(), 3);
    /// // Only the first message was handled for good.
    /// consumer.commit_offset(0, 1)?;
    /// assert_eq!(consumer.committed(0)?, 1);
    /// assert_eq!(consumer.position(0)?, 3);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn commit_offset(&mut self, partition: u32, offset: u64) -> Result<()> {
        self.check_open()?;
        self.sync()?;
        let Some(p) = self.core.topic.partitions.get(partition as usize) else {
            return Err(self.no_partition(partition));
        };
        let (first, end) = (p.log.first_offset(), p.log.end_offset());
        if offset > end {
            return Err(Error::OutOfRange { partition, offset, first, end });
        }
        if !self.host.commit(&self.core, &[(partition, offset)])?.is_empty() {
            return Err(self.not_owned(partition));
        }
        if let Some(Some(part)) = self.parts.get_mut(partition as usize) {
            part.base = offset;
        }
        Ok(())
    }

    /// Reports that handling the message at `offset` of `partition` (one it
    /// polled) failed. The group counts the attempt (the count survives a
    /// move of the partition to another member). Below `max_attempts` the
    /// partition goes back to `offset`: the next poll returns that message
    /// again, and those after it, in order; returns `false`. At
    /// `max_attempts` the message is published to the dead-letter topic
    /// with the `rill.dlq.*` attributes a push subscription writes
    /// (`rill.dlq.group` naming the group) and skipped: the partition goes
    /// back to `offset + 1`, so the next poll returns the messages after it
    /// again, in order (like any nack, it ends the polled batch, so the
    /// rest of the batch must come again); returns `true`. `Reassigned` if the partition is not
    /// its own; `OutOfRange` for an offset it has not polled or retention
    /// trimmed. If the dead-letter topic cannot take it (`Full`, `Timeout`),
    /// the error is returned and nothing is skipped: nack it again.
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
    /// let options = ConsumerOptions { max_attempts: 2, ..ConsumerOptions::default() };
    /// let mut consumer = broker.consumer("billing", "orders", options)?;
    /// let wait = Duration::from_secs(5);
    /// assert_eq!(consumer.poll(1, wait)?[0].offset(), 0);
    /// assert!(!consumer.nack(0, 0)?); // the first failure: o-1 comes again
    /// assert_eq!(consumer.poll(1, wait)?[0].offset(), 0);
    /// assert!(consumer.nack(0, 0)?); // the second: o-1 goes to `$dlq/billing`
    /// assert_eq!(consumer.poll(1, wait)?[0].offset(), 1);
    /// assert_eq!(broker.topic_stats("$dlq/billing")?.publish_count, 1);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn nack(&mut self, partition: u32, offset: u64) -> Result<bool> {
        self.check_open()?;
        self.sync()?;
        let (position, log) =
            (self.owned(partition)?.cursor.offset(), &self.core.topic.partitions[partition as usize].log);
        let first = log.first_offset();
        if offset >= position || offset < first {
            return Err(Error::OutOfRange { partition, offset, first, end: position });
        }
        let core = self.core.clone();
        let Some(attempts) = self.host.nack(&core, partition, offset, false) else {
            return Err(self.not_owned(partition));
        };
        if attempts < core.max_attempts {
            self.owned_mut(partition)?.cursor.rewind(offset);
            return Ok(false);
        }
        let source_max = core.topic.partitions[0].log.max_record_bytes();
        let dlq = self.host.dead_letter_topic(&core.dead_letter_topic, source_max)?;
        let mut cursor = core.topic.partitions[partition as usize].log.cursor_at(offset)?;
        let record = match cursor.read() {
            Ok(Some(record)) => record,
            // Trimmed (or not readable) since the check above.
            _ => return Err(Error::OutOfRange { partition, offset, first: log.first_offset(), end: position }),
        };
        let reason = format!("nacked {attempts} times by consumer group {:?}", core.group);
        let failed = Failed {
            topic: &core.topic.name,
            partition,
            record,
            attempts,
            reason: &reason,
            by: ("rill.dlq.group", &core.group),
        };
        // Waits as a publish does (a pull consumer's thread is the caller's).
        dead_letter::publish(&dlq, &failed, Wait::For(Some(DEAD_LETTER_WAIT)))?;
        self.host.nack(&core, partition, offset, true);
        // Only the dead letter is skipped: what was polled after it was not
        // handled (the nack ended the batch) and is polled again.
        self.owned_mut(partition)?.cursor.rewind(offset + 1);
        Ok(true)
    }

    /// Moves one partition's position to `offset`, which must be retained
    /// (`Reassigned` for a partition it does not own).
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
    /// broker.publish_batch("orders", &[Record::new(b"o-1"), Record::new(b"o-2"), Record::new(b"o-3")])?;
    /// let mut consumer = broker.consumer("billing", "orders", ConsumerOptions::default())?;
    /// consumer.seek(0, 2)?;
    /// assert_eq!(consumer.poll(10, Duration::from_secs(5))?[0].payload(), b"o-3");
    /// assert!(matches!(consumer.seek(0, 4), Err(Error::OutOfRange { .. })));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn seek(&mut self, partition: u32, offset: u64) -> Result<()> {
        self.check_open()?;
        self.sync()?;
        self.owned_mut(partition)?.cursor.seek(offset)
    }

    /// Moves one partition's position to the first message published at or
    /// after `timestamp_ns` (nanoseconds since the Unix epoch): see
    /// [`Log::offset_at_time`](crate::log::Log::offset_at_time) for what
    /// "first" means when messages were stamped out of order. A time before
    /// every retained message moves to the oldest one, a time after all of
    /// them to the end (never `OutOfRange`). `O(log segments + log records
    /// in one segment)`.
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
    /// let newest = consumer.poll(10, Duration::from_secs(5))?[1].timestamp_ns();
    /// consumer.seek_to_time(0, newest + 1)?; // after every message: the end
    /// assert_eq!(consumer.position(0)?, 2);
    /// consumer.seek_to_time(0, 0)?; // before every message: the oldest
    /// assert_eq!(consumer.position(0)?, 0);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn seek_to_time(&mut self, partition: u32, timestamp_ns: u64) -> Result<()> {
        self.check_open()?;
        self.sync()?;
        let log = &self.core.topic.partitions.get(partition as usize).ok_or_else(|| self.no_partition(partition))?.log;
        let offset = log.offset_at_time(timestamp_ns);
        let cursor = &mut self.owned_mut(partition)?.cursor;
        if cursor.seek(offset).is_err() {
            // Retention trimmed it in the meantime: the oldest retained
            // message is the first one at or after the time now.
            cursor.seek_to_first();
        }
        Ok(())
    }

    /// Moves every partition it owns to its oldest retained message.
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
    /// assert_eq!(consumer.poll(10, Duration::from_secs(5))?.len(), 2);
    /// consumer.seek_to_beginning()?;
    /// assert_eq!(consumer.position(0)?, 0);
    /// assert_eq!(consumer.poll(10, Duration::from_secs(5))?.len(), 2);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn seek_to_beginning(&mut self) -> Result<()> {
        self.check_open()?;
        self.sync()?;
        self.parts.iter_mut().flatten().for_each(|p| p.cursor.seek_to_first());
        Ok(())
    }

    /// Moves every partition it owns past its newest message.
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
    /// broker.publish_batch("orders", &[Record::new(b"old-1"), Record::new(b"old-2")])?;
    /// let mut consumer = broker.consumer("billing", "orders", ConsumerOptions::default())?;
    /// consumer.seek_to_end()?; // skip the backlog
    /// broker.publish("orders", &Record::new(b"new"))?;
    /// assert_eq!(consumer.poll(10, Duration::from_secs(5))?[0].payload(), b"new");
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn seek_to_end(&mut self) -> Result<()> {
        self.check_open()?;
        self.sync()?;
        self.parts.iter_mut().flatten().for_each(|p| p.cursor.seek_to_end());
        Ok(())
    }

    /// Moves every partition it owns back to the group's committed offset
    /// (or, where nothing was committed, leaves it), so uncommitted messages
    /// are polled again.
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
    /// assert_eq!(consumer.poll(1, Duration::from_secs(5))?[0].payload(), b"o-2");
    /// // Handling o-2 failed: go back to what the group committed.
    /// consumer.rollback()?;
    /// assert_eq!(consumer.position(0)?, 1);
    /// assert_eq!(consumer.poll(1, Duration::from_secs(5))?[0].payload(), b"o-2");
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn rollback(&mut self) -> Result<()> {
        self.check_open()?;
        self.sync()?;
        let committed = self.host.committed(&self.core);
        for ((p, slot), committed) in self.core.topic.partitions.iter().zip(&mut self.parts).zip(committed) {
            if let (Some(part), Some(offset)) = (slot, committed) {
                part.cursor = Part::light(p.log.cursor_resuming(offset));
                part.base = offset;
            }
        }
        Ok(())
    }

    /// The next offset `poll` will return from `partition` (`Reassigned` if
    /// it does not own it, as far as its last call knew).
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
    /// assert_eq!(consumer.position(0)?, 0);
    /// consumer.poll(10, Duration::from_secs(5))?;
    /// assert_eq!(consumer.position(0)?, 2);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn position(&self, partition: u32) -> Result<u64> {
        self.check_open()?;
        Ok(self.owned(partition)?.cursor.offset())
    }

    /// The group's committed offset for `partition`, or `NotFound` if nothing
    /// was committed yet.
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
    /// assert!(matches!(consumer.committed(0), Err(Error::NotFound(_))));
    /// consumer.poll(10, Duration::from_secs(5))?;
    /// consumer.commit()?;
    /// assert_eq!(consumer.committed(0)?, 1);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn committed(&self, partition: u32) -> Result<u64> {
        self.check_open()?;
        if partition as usize >= self.parts.len() {
            return Err(self.no_partition(partition));
        }
        self.host.committed(&self.core)[partition as usize].ok_or_else(|| {
            Error::NotFound(format!("no committed offset for partition {partition} of group {:?}", self.core.group))
        })
    }

    /// Number of partitions of the topic (not only those it owns).
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::{ConsumerOptions, TopicOptions};
    /// # use rill::{Broker, BrokerConfig};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    ///
    /// broker.create_topic("orders", &TopicOptions::with_partitions(3))?;
    /// let consumer = broker.consumer("billing", "orders", ConsumerOptions::default())?;
    /// assert_eq!(consumer.partitions(), 3);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn partitions(&self) -> u32 {
        self.parts.len() as u32
    }

    /// Counters, and the group's lag over all partitions.
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
    /// consumer.poll(1, Duration::from_secs(5))?;
    /// consumer.commit()?;
    /// let stats = consumer.stats();
    /// assert_eq!((stats.group.as_str(), stats.delivered, stats.lag), ("billing", 1, 1));
    /// assert_eq!(stats.partitions[0].committed, Some(1));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn stats(&self) -> ConsumerStats {
        let committed = self.host.committed(&self.core);
        let partitions: Vec<GroupPartition> = self
            .core
            .topic
            .partitions
            .iter()
            .zip(&self.parts)
            .zip(committed)
            .map(|((p, part), committed)| {
                let end = p.log.end_offset();
                let position = match part {
                    Some(part) => part.cursor.offset(),
                    None => committed.unwrap_or_else(|| p.log.first_offset()),
                };
                GroupPartition {
                    partition: p.index,
                    position,
                    committed,
                    end,
                    lag: end.saturating_sub(committed.unwrap_or(position)),
                }
            })
            .collect();
        ConsumerStats {
            group: self.core.group.clone(),
            topic: self.topic().to_owned(),
            // Relaxed: statistics.
            delivered: self.core.delivered.load(Ordering::Relaxed),
            missed: self.core.missed.load(Ordering::Relaxed),
            lag: partitions.iter().map(|p| p.lag).sum(),
            partitions,
        }
    }

    /// Closes the consumer: it leaves its group, whose other members take
    /// its partitions from the group's committed offsets. Uncommitted
    /// positions are not saved. Idempotent.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use rill::{ConsumerOptions, Error, TopicOptions};
    /// # use rill::{Broker, BrokerConfig};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    ///
    /// broker.create_topic("orders", &TopicOptions::with_partitions(2))?;
    /// let mut first = broker.consumer("billing", "orders", ConsumerOptions::default())?;
    /// let second = broker.consumer("billing", "orders", ConsumerOptions::default())?;
    /// assert_eq!(second.assignment().len(), 1);
    /// first.close();
    /// // The other member takes over the partitions the closed one had.
    /// assert_eq!(second.assignment(), [0, 1]);
    /// assert!(matches!(first.poll(10, Duration::from_millis(1)), Err(Error::Closed(_))));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn close(&mut self) {
        if std::mem::replace(&mut self.released, true) {
            return;
        }
        self.core.close();
        // Out of the registry's list (its slot's drop).
        self.slot = None;
        for (p, slot) in self.core.topic.partitions.iter().zip(&mut self.parts) {
            if slot.take().is_some() {
                p.remove_listener(self.core.id);
            }
        }
        self.host.release_consumer(&self.core);
        // Its close has rung (if armed); nothing rings for it after this,
        // and the hook (with what it owns, the C library's eventfd) is
        // dropped now, not when the last listener list naming it is freed.
        self.core.waiters.take_bell();
    }
}

/// Keeps `lag` as `core`'s and publishes its counters into `slot`, if it
/// has one (a consumer in `Sharing::Processes` mode): a few plain stores,
/// no system call.
fn publish_counts(core: &ConsumerCore, slot: Option<&Slot>, lag: u64) {
    // Relaxed: the consumer is the only writer; a statistic.
    core.lag.store(lag, Ordering::Relaxed);
    if let Some(slot) = slot {
        slot.publish_consumer(&core.counts());
    }
}

/// Divides `max` among partitions holding `available[i]` records each: every
/// partition with records gets an equal share (the first ones in the order
/// given get the remainder; with fewer than one each, only the first ones
/// get one), and what a partition cannot use goes to those holding more.
/// So a poll reads every partition it owns, however much one of them holds:
/// one that a rebalance just gave it is read in the same poll.
fn fair_shares(max: usize, available: &[usize]) -> Vec<usize> {
    let mut shares = vec![0; available.len()];
    let mut left = max;
    loop {
        let wanting = available.iter().zip(&shares).filter(|(a, s)| a > s).count();
        if left == 0 || wanting == 0 {
            return shares;
        }
        // At least one each round, so every round gives something away.
        let each = (left / wanting).max(1);
        for (share, &a) in shares.iter_mut().zip(available) {
            let give = each.min(a - *share).min(left);
            *share += give;
            left -= give;
        }
    }
}

/// Longest a nack waits for room in the dead-letter topic (a `Block`
/// subscriber of its own) before failing with `Timeout`.
const DEAD_LETTER_WAIT: Duration = Duration::from_secs(10);

/// The shortest pause between two looks for idle members by one member.
const MIN_EXPEL_CHECK: Duration = Duration::from_millis(1);

impl Drop for Consumer {
    fn drop(&mut self) {
        self.close();
    }
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer").field("group", &self.core.group).field("topic", &self.topic()).finish()
    }
}

// A consumer moves between threads but is used by one at a time.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Consumer>();
};

#[cfg(test)]
mod tests {
    use super::fair_shares;

    #[test]
    fn fair_shares_give_every_partition_with_messages_some_and_waste_nothing() {
        // One partition holding far more than `max` does not crowd out the others.
        assert_eq!(fair_shares(10, &[1000, 1000, 1000]), vec![4, 3, 3]);
        // What a partition cannot use goes to those holding more.
        assert_eq!(fair_shares(10, &[1000, 1, 0]), vec![9, 1, 0]);
        assert_eq!(fair_shares(10, &[2, 1000, 3]), vec![2, 5, 3]);
        // Fewer than one each: the first ones in the order given.
        assert_eq!(fair_shares(2, &[5, 5, 5]), vec![1, 1, 0]);
        // Less available than `max`: all of it.
        assert_eq!(fair_shares(usize::MAX, &[3, 0, 7]), vec![3, 0, 7]);
        assert_eq!(fair_shares(0, &[3, 4]), vec![0, 0]);
        assert!(fair_shares(5, &[]).is_empty());
    }
}
