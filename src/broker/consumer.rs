//! Pull consumers: read a topic at your own pace, commit, seek and replay.
//!
//! A consumer belongs to a *group*. The group's committed offsets live in the
//! broker and outlive the consumer: a new consumer of the same group and
//! topic resumes there, and different groups each read every message. One
//! live consumer per group and topic at a time.
//!
//! `poll` returns messages borrowed from the log, valid until the next call
//! that moves the consumer. Waiting in `poll` parks the thread (see
//! `waiters.rs`): the consumer is a listener of each partition it reads, and a
//! publisher's commit wakes it only if it is waiting.

use std::fmt;
use std::time::{Duration, Instant};

use super::subscription::StartPosition;
use super::subscription::signal::Listener;
use super::topic::Topic;
use super::waiters::Waiters;
use crate::error::{Error, Result};
use crate::log::{Cursor, Lagged, RecordView};
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::{Arc, dyn_arc};

/// What a consumer needs from the broker that made it, as a hook (the way a
/// subscription's close hook works), so this file does not name the broker.
pub(crate) trait GroupHost: Send + Sync {
    /// True once the broker is closed.
    fn is_closed(&self) -> bool;
    /// Stores the group's committed offsets (one per partition).
    fn save_group(&self, core: &ConsumerCore, committed: Vec<Option<u64>>);
    /// The consumer closed: frees its group for another consumer.
    fn release_consumer(&self, core: &ConsumerCore);
}

/// A consumer as a partition's listener: a commit wakes a blocked `poll`.
struct ConsumerListener {
    id: u64,
    waiters: Arc<Waiters>,
}

impl Listener for ConsumerListener {
    fn id(&self) -> u64 {
        self.id
    }

    #[inline]
    fn signal(&self) {
        // The publisher issued its fence (F1) already.
        self.waiters.notify_after_fence();
    }
}

/// How a new consumer group starts reading (a group with committed offsets
/// resumes from them instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerOptions {
    /// Where to start in partitions without a committed offset. Default: the
    /// earliest retained message.
    pub start: ConsumerStart,
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        ConsumerOptions { start: StartPosition::Earliest }
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
    closed: AtomicBool,
    /// Messages returned by `poll`.
    delivered: AtomicU64,
    /// Messages trimmed by retention before they were polled.
    missed: AtomicU64,
}

impl ConsumerCore {
    pub(crate) fn new(id: u64, group: String, topic: Arc<Topic>) -> ConsumerCore {
        ConsumerCore {
            id,
            group,
            topic,
            waiters: Arc::new(Waiters::new()),
            closed: AtomicBool::new(false),
            delivered: AtomicU64::new(0),
            missed: AtomicU64::new(0),
        }
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
}

/// A message returned by [`Consumer::poll`], borrowed from the log. The
/// record's accessors come through `Deref` to [`RecordView`].
#[derive(Clone, Copy)]
pub struct Polled<'a> {
    topic: &'a str,
    partition: u32,
    record: RecordView<'a>,
}

impl<'a> Polled<'a> {
    /// The topic.
    pub fn topic(&self) -> &'a str {
        self.topic
    }
    /// Its partition.
    pub fn partition(&self) -> u32 {
        self.partition
    }
    /// The underlying record view.
    pub fn record(&self) -> RecordView<'a> {
        self.record
    }
}

/// The record's own accessors: `offset()`, `timestamp_ns()`, `key()`,
/// `payload()`, `attributes()`, `attribute(key)`.
impl<'a> std::ops::Deref for Polled<'a> {
    type Target = RecordView<'a>;

    fn deref(&self) -> &RecordView<'a> {
        &self.record
    }
}

impl fmt::Debug for Polled<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Polled")
            .field("topic", &self.topic)
            .field("partition", &self.partition)
            .field("offset", &self.offset())
            .field("payload_len", &self.payload().len())
            .finish()
    }
}

/// Position of a consumer group in one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPartition {
    /// Partition index.
    pub partition: u32,
    /// Next offset the consumer will poll (the committed offset when no
    /// consumer is live).
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

struct Part {
    cursor: Cursor,
    committed: Option<u64>,
}

/// A pull consumer of one topic, for one group. Not shared between threads
/// (it is `Send`); dropping it closes it.
pub struct Consumer {
    core: Arc<ConsumerCore>,
    host: Box<dyn GroupHost>,
    parts: Vec<Part>,
    /// Partition to start the next poll at, for fairness.
    next: usize,
    /// Set once `close` has released the group.
    released: bool,
}

impl Consumer {
    pub(crate) fn new(
        core: Arc<ConsumerCore>,
        host: Box<dyn GroupHost>,
        committed: Vec<Option<u64>>,
        start: ConsumerStart,
    ) -> Result<Consumer> {
        let mut parts = Vec::with_capacity(core.topic.partitions.len());
        for (p, committed) in core.topic.partitions.iter().zip(committed) {
            let cursor = match (committed, start) {
                (Some(offset), _) => p.log.cursor_resuming(offset),
                (None, ConsumerStart::Earliest) => p.log.cursor_from_first(),
                (None, ConsumerStart::Latest) => p.log.cursor_from_end(),
                (None, ConsumerStart::Offset(o)) => p.log.cursor_at(o)?,
                (None, ConsumerStart::Time(t)) => p.log.cursor_resuming(p.log.offset_at_time(t)),
            };
            parts.push(Part { cursor, committed });
        }
        for p in core.topic.partitions.iter() {
            let listener = dyn_arc!(ConsumerListener { id: core.id, waiters: core.waiters.clone() } => dyn Listener);
            p.add_listener(listener, None);
        }
        Ok(Consumer { core, host, parts, next: 0, released: false })
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

    fn part(&mut self, partition: u32) -> Result<&mut Part> {
        let err = self.no_partition(partition);
        self.parts.get_mut(partition as usize).ok_or(err)
    }

    /// The topic it reads.
    pub fn topic(&self) -> &str {
        &self.core.topic.name
    }

    /// The group it belongs to.
    pub fn group(&self) -> &str {
        &self.core.group
    }

    /// Up to `max` messages, waiting up to `timeout` for the first one. An
    /// empty batch means the timeout passed with nothing to read. Messages
    /// come in offset order within each partition; partitions take turns.
    pub fn poll(&mut self, max: usize, timeout: Duration) -> Result<Vec<Polled<'_>>> {
        self.check_open()?;
        if max == 0 {
            return Ok(Vec::new());
        }
        let deadline = Instant::now() + timeout;
        let core = self.core.clone();
        let host = &self.host;
        let parts = &mut self.parts;
        // Parks until a commit (or close) wakes it; see waiters.rs.
        core.waiters.wait_until(Some(deadline), || {
            core.is_closed()
                || host.is_closed()
                || core.topic.is_deleted()
                || parts.iter_mut().any(|p| p.cursor.has_next())
        });
        self.check_open()?;

        let n = self.parts.len();
        let start = self.next % n;
        self.next = start + 1;
        let topic: &str = &self.core.topic.name;
        let mut out = Vec::with_capacity(max.min(1024));
        let mut missed = 0;
        // Each partition is read at most once per poll, so the borrows of the
        // cursors (and of the messages they hand out) stay disjoint.
        let (before, from_start) = self.parts.split_at_mut(start);
        for (part, index) in from_start.iter_mut().zip(start..).chain(before.iter_mut().zip(0..)) {
            if out.len() >= max {
                break;
            }
            let partition = index as u32;
            if let Some(Lagged { missed: m, .. }) = part.cursor.take_lag() {
                missed += m;
            }
            let batch = match part.cursor.read_batch(max - out.len()) {
                Ok(b) => b,
                // Trimmed again since `take_lag`: count it, read it next poll.
                Err(Lagged { missed: m, .. }) => {
                    missed += m;
                    continue;
                }
            };
            out.extend(batch.iter().map(|record| Polled { topic, partition, record }));
        }
        // Relaxed load + store: the consumer is the only writer.
        let add = |c: &AtomicU64, n: u64| c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
        add(&self.core.delivered, out.len() as u64);
        add(&self.core.missed, missed);
        Ok(out)
    }

    /// Commits the current position of every partition (the offset after
    /// the last message polled) for the group.
    pub fn commit(&mut self) -> Result<()> {
        self.check_open()?;
        for p in &mut self.parts {
            p.committed = Some(p.cursor.offset());
        }
        self.save();
        Ok(())
    }

    /// Commits `offset` for one partition (it must not be past the end).
    pub fn commit_offset(&mut self, partition: u32, offset: u64) -> Result<()> {
        self.check_open()?;
        let Some(p) = self.core.topic.partitions.get(partition as usize) else {
            return Err(self.no_partition(partition));
        };
        let (first, end) = (p.log.first_offset(), p.log.end_offset());
        if offset > end {
            return Err(Error::OutOfRange { partition, offset, first, end });
        }
        self.parts[partition as usize].committed = Some(offset);
        self.save();
        Ok(())
    }

    /// Moves one partition's position to `offset`, which must be retained.
    pub fn seek(&mut self, partition: u32, offset: u64) -> Result<()> {
        self.check_open()?;
        self.part(partition)?.cursor.seek(offset)
    }

    /// Moves one partition's position to the first message published at or
    /// after `timestamp_ns` (nanoseconds since the Unix epoch): see
    /// [`Log::offset_at_time`](crate::log::Log::offset_at_time) for what
    /// "first" means when messages were stamped out of order. A time before
    /// every retained message moves to the oldest one, a time after all of
    /// them to the end (never `OutOfRange`). `O(log segments + log records
    /// in one segment)`.
    pub fn seek_to_time(&mut self, partition: u32, timestamp_ns: u64) -> Result<()> {
        self.check_open()?;
        let log = &self.core.topic.partitions.get(partition as usize).ok_or_else(|| self.no_partition(partition))?.log;
        let offset = log.offset_at_time(timestamp_ns);
        let cursor = &mut self.part(partition)?.cursor;
        if cursor.seek(offset).is_err() {
            // Retention trimmed it in the meantime: the oldest retained
            // message is the first one at or after the time now.
            cursor.seek_to_first();
        }
        Ok(())
    }

    /// Moves every partition to its oldest retained message.
    pub fn seek_to_beginning(&mut self) -> Result<()> {
        self.check_open()?;
        self.parts.iter_mut().for_each(|p| p.cursor.seek_to_first());
        Ok(())
    }

    /// Moves every partition past its newest message.
    pub fn seek_to_end(&mut self) -> Result<()> {
        self.check_open()?;
        self.parts.iter_mut().for_each(|p| p.cursor.seek_to_end());
        Ok(())
    }

    /// Moves every partition back to its committed offset (or, where nothing
    /// was committed, leaves it), so uncommitted messages are polled again.
    pub fn rollback(&mut self) -> Result<()> {
        self.check_open()?;
        for (p, part) in self.core.topic.partitions.iter().zip(&mut self.parts) {
            if let Some(offset) = part.committed {
                part.cursor = p.log.cursor_resuming(offset);
            }
        }
        Ok(())
    }

    /// The next offset `poll` will return from `partition`.
    pub fn position(&self, partition: u32) -> Result<u64> {
        self.check_open()?;
        let p = self.parts.get(partition as usize).ok_or_else(|| self.no_partition(partition))?;
        Ok(p.cursor.offset())
    }

    /// The group's committed offset for `partition`, or `NotFound` if nothing
    /// was committed yet.
    pub fn committed(&self, partition: u32) -> Result<u64> {
        self.check_open()?;
        let p = self.parts.get(partition as usize).ok_or_else(|| self.no_partition(partition))?;
        p.committed.ok_or_else(|| {
            Error::NotFound(format!("no committed offset for partition {partition} of group {:?}", self.core.group))
        })
    }

    fn no_partition(&self, partition: u32) -> Error {
        Error::NotFound(format!("partition {partition} of topic {:?} (it has {})", self.topic(), self.parts.len()))
    }

    /// Number of partitions.
    pub fn partitions(&self) -> u32 {
        self.parts.len() as u32
    }

    /// Counters and lag.
    pub fn stats(&self) -> ConsumerStats {
        let partitions: Vec<GroupPartition> = self
            .core
            .topic
            .partitions
            .iter()
            .zip(&self.parts)
            .map(|(p, part)| {
                let end = p.log.end_offset();
                let position = part.cursor.offset();
                GroupPartition {
                    partition: p.index,
                    position,
                    committed: part.committed,
                    end,
                    lag: end.saturating_sub(part.committed.unwrap_or(position)),
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

    /// Closes the consumer and releases the group for another consumer.
    /// Uncommitted positions are not saved. Idempotent.
    pub fn close(&mut self) {
        if std::mem::replace(&mut self.released, true) {
            return;
        }
        self.core.close();
        for p in self.core.topic.partitions.iter() {
            p.remove_listener(self.core.id);
        }
        self.host.release_consumer(&self.core);
    }

    fn save(&self) {
        let committed: Vec<Option<u64>> = self.parts.iter().map(|p| p.committed).collect();
        self.host.save_group(&self.core, committed);
    }
}

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
