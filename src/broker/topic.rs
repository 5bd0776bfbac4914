//! Topics: a name, its options and its partitions.
//!
//! A topic is a name and one or more partitions; a partition (`partition/`)
//! is a [`Log`] plus the list of *listeners* (subscriptions and consumers
//! reading it) that a publisher signals after each commit. This file holds
//! what is per topic: the options, routing a record to its partition, the
//! dedupe window, and opening the partitions' logs.

use std::fmt;
use std::path::PathBuf;

use super::dedupe::{Across, Claim, Landed, Turn, Window};
use super::dispatch::PRIORITIES;
use super::doorbell::{Bell, Cross};
use super::partition::Recovered;
use super::partition::blockers::SharedBlockers;
use super::schema::Slot;
// Re-exported: the broker reaches a topic's partitions, and says how long
// a publish may wait, through its topics.
pub(crate) use super::partition::{Partition, Wait};
use crate::clock::now_ns;
use crate::error::{Error, PublishFailure, Result};
use crate::log::{CompactionPolicy, DurableLog, Fsync, ID_ATTRIBUTE, Log, LogConfig, Record, Sharing};
use crate::sync::{Arc, Name};

/// How a topic is laid out and how much each partition retains.
///
/// # Examples
///
/// ```
/// use rill::{Broker, BrokerConfig, TopicOptions};
///
/// let broker = Broker::new(BrokerConfig::default())?;
/// let options = TopicOptions { partitions: 8, retention_messages: Some(100_000), ..TopicOptions::default() };
/// broker.create_topic("orders", &options)?;
/// assert_eq!(broker.topic_stats("orders")?.partitions.len(), 8);
/// # Ok::<(), rill::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicOptions {
    /// Number of partitions (at least 1). Order is kept per partition.
    pub partitions: u32,
    /// Retention per partition, in bytes of segments; `None` keeps everything.
    /// Default: 256 MiB.
    pub retention_bytes: Option<u64>,
    /// Retention per partition by message count; `None`: no count limit.
    pub retention_messages: Option<u64>,
    /// Segment size; `None` picks 4 MiB or a quarter of `retention_bytes`.
    pub segment_bytes: Option<usize>,
    /// Largest encoded message (24-byte header, key, attributes and payload);
    /// `None` picks 1 MiB or the segment size if smaller.
    pub max_message_bytes: Option<usize>,
    /// Retention by age, in milliseconds: a segment is trimmed once its
    /// newest message is older (whole segments, as for the other limits,
    /// whichever trims most). `None` or 0: no age limit. Applied at each
    /// segment roll and by the broker's timer, so quiet topics age out too.
    pub retention_ms: Option<u64>,
    /// How long, in milliseconds, the topic remembers the id of a record
    /// published with one (`Record::with_id`): a second record with the
    /// same id within this time is not appended, and its publish returns
    /// the first one's position, flagged as a duplicate
    /// ([`Broker::publish_outcome`](crate::Broker::publish_outcome)).
    /// Default 120 000 (two minutes); 0 turns the check off. The window is
    /// per topic, across its partitions (records are routed as usual: an
    /// id does not pick the partition); it holds at most
    /// [`MAX_DEDUPE_IDS`](crate::broker::MAX_DEDUPE_IDS) ids, the oldest
    /// leaving first when full. On a data directory it is rebuilt from the
    /// log when the broker opens; on one shared by processes
    /// ([`Sharing::Processes`](crate::Sharing)) it holds every process's
    /// ids, read from the log at each publish with an id. Records without
    /// an id cost nothing extra.
    pub dedupe_window_ms: u64,
    /// What keeps the partitions' size in check: the size and age limits
    /// above (`Delete`, the default), log compaction (`Compact`: the newest
    /// record of every key), or both. See [`Cleanup`].
    pub cleanup: Cleanup,
    /// Under compaction, how long a tombstone (a keyed message with an
    /// empty payload) stays once it is the newest of its key, in
    /// milliseconds by its timestamp, so that readers see the delete (it
    /// stays longer while an older message of its key is kept). A reader
    /// that reaches the tombstone's offset only after it was removed may
    /// see the key's older value and miss the delete: keep this longer
    /// than a reader from the beginning takes to catch up. Default
    /// 86 400 000 (24 h).
    pub delete_retention_ms: u64,
    /// Under compaction, how long a message stays uncompacted, in
    /// milliseconds by its timestamp, even when a newer one of its key
    /// exists. Default 0. A message carrying an id stays for the
    /// `dedupe_window_ms` too, as the window is rebuilt from the log (at
    /// an open, and by other processes sharing the directory).
    pub min_compaction_lag_ms: u64,
    /// The priority (0 to 7, higher runs first) of the topic's push
    /// subscriptions that set none themselves and name this one topic (a
    /// wildcard subscription takes no topic's default). `None`: the
    /// subscription default, 4. Kept with a durable topic's options.
    pub priority: Option<u8>,
}

/// How a topic's partitions are kept from growing without end
/// ([`TopicOptions::cleanup`]).
///
/// # Compaction
///
/// A compacted topic keeps the newest message of every key, as Kafka's
/// `cleanup.policy=compact`: publishing a message without a key to it is
/// [`Error::InvalidArgument`]; a message with a key and an empty payload is
/// a *tombstone*, which deletes its key and is itself removed once older
/// than [`TopicOptions::delete_retention_ms`]. Compaction runs in the
/// background (a thread per broker; publishers never wait for it) over
/// sealed segments only: the segment being written, and messages younger
/// than [`TopicOptions::min_compaction_lag_ms`], are never compacted.
/// Offsets never change: a reader from the beginning sees the newest message
/// of each key in offset order, with gaps where removed messages were; a
/// seek to a removed offset starts at the next kept one.
///
/// Under `Compact` nothing is trimmed by size or age. In memory, a pass
/// merges the segments it rewrites (an index of the kept messages only),
/// so a partition's memory grows with the number of distinct keys, not
/// with the messages ever published. On a data directory each segment it
/// seals stays a file (and a mapping), rebuilt with what it keeps and four
/// bytes of index per offset it covers: segment files are not merged yet.
/// `CompactAndDelete` also applies the size and age limits. On a data directory compaction rewrites
/// segment files so that a crash at any moment loses no message it keeps.
/// On a data directory shared by processes
/// ([`Sharing::Processes`](crate::Sharing)) one process at a time compacts
/// a partition (the one holding its compaction lock), and every other
/// process follows the rebuilt files (see "The swap across processes" in
/// `log/compact.rs`).
///
/// # Examples
///
/// ```
/// use rill::{Broker, BrokerConfig, Cleanup, Error, Record, TopicOptions};
///
/// let broker = Broker::new(BrokerConfig::default())?;
/// broker.create_topic("prices", &TopicOptions { cleanup: Cleanup::Compact, ..TopicOptions::default() })?;
/// broker.publish("prices", &Record::new(b"101").with_key(b"ACME"))?;
/// assert!(matches!(broker.publish("prices", &Record::new(b"no key")), Err(Error::InvalidArgument(_))));
/// # Ok::<(), rill::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Cleanup {
    /// The size and age limits trim whole segments (the default).
    #[default]
    Delete,
    /// Compaction keeps the newest message of every key; no size or age limit.
    Compact,
    /// Compaction, and the size and age limits too.
    CompactAndDelete,
}

impl Cleanup {
    /// True if the topic is compacted.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::Cleanup;
    ///
    /// assert!(!Cleanup::Delete.compacts());
    /// assert!(Cleanup::Compact.compacts());
    /// assert!(Cleanup::CompactAndDelete.compacts());
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn compacts(self) -> bool {
        self != Cleanup::Delete
    }
}

/// Default [`TopicOptions::delete_retention_ms`]: 24 hours.
pub const DEFAULT_DELETE_RETENTION_MS: u64 = 24 * 60 * 60 * 1000;

/// The default [`TopicOptions::dedupe_window_ms`]: two minutes, as JetStream's.
pub const DEFAULT_DEDUPE_WINDOW_MS: u64 = 120_000;

impl Default for TopicOptions {
    fn default() -> Self {
        let log = LogConfig::default();
        TopicOptions {
            partitions: 1,
            retention_bytes: log.retention_bytes,
            retention_messages: log.retention_messages,
            segment_bytes: log.segment_bytes,
            max_message_bytes: log.max_record_bytes,
            retention_ms: log.retention_ms,
            dedupe_window_ms: DEFAULT_DEDUPE_WINDOW_MS,
            cleanup: Cleanup::Delete,
            delete_retention_ms: DEFAULT_DELETE_RETENTION_MS,
            min_compaction_lag_ms: 0,
            priority: None,
        }
    }
}

impl TopicOptions {
    /// The default options with `n` partitions.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::TopicOptions;
    ///
    /// let options = TopicOptions::with_partitions(4);
    /// assert_eq!(options, TopicOptions { partitions: 4, ..TopicOptions::default() });
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn with_partitions(n: u32) -> Self {
        TopicOptions { partitions: n, ..TopicOptions::default() }
    }

    /// Checks the options as `Topic::new` would, without creating a log.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.partitions == 0 || self.partitions > MAX_PARTITIONS {
            return Err(Error::InvalidArgument(format!(
                "a topic has between 1 and {MAX_PARTITIONS} partitions, not {}",
                self.partitions
            )));
        }
        if let Some(p) = self.priority.filter(|&p| p >= PRIORITIES) {
            return Err(Error::InvalidArgument(format!(
                "a topic's priority is 0 to {} (higher runs first), not {p}",
                PRIORITIES - 1
            )));
        }
        // The log's limits are the topic's under the same names, but for
        // the record size, which a topic calls `max_message_bytes`: an
        // error names the option the caller set.
        self.log_config().validate().map_err(|e| match e {
            Error::InvalidArgument(text) => {
                Error::InvalidArgument(text.replace("max_record_bytes", "max_message_bytes"))
            }
            e => e,
        })
    }

    fn log_config(&self) -> LogConfig {
        // Plain compaction deletes nothing by size or age.
        let limits = self.cleanup != Cleanup::Compact;
        LogConfig {
            retention_bytes: self.retention_bytes.filter(|_| limits),
            retention_messages: self.retention_messages.filter(|_| limits),
            segment_bytes: self.segment_bytes,
            max_record_bytes: self.max_message_bytes,
            retention_ms: self.retention_ms.filter(|_| limits),
        }
    }

    /// The age limit that applies (none under plain `Compact`).
    pub(crate) fn effective_retention_ms(&self) -> Option<u64> {
        self.retention_ms.filter(|&ms| ms > 0 && self.cleanup != Cleanup::Compact)
    }

    /// When a compaction pass may remove records, if the topic is compacted.
    pub(crate) fn compaction_policy(&self) -> Option<CompactionPolicy> {
        const NS_PER_MS: u64 = 1_000_000;
        self.cleanup.compacts().then(|| CompactionPolicy {
            min_lag_ns: self.min_compaction_lag_ms.saturating_mul(NS_PER_MS),
            tombstone_ns: self.delete_retention_ms.saturating_mul(NS_PER_MS),
            // The dedupe window is learned from the log (see "Across
            // processes" in `dedupe.rs`): an id stays there that long.
            id_lag_ns: self.dedupe_window_ms.saturating_mul(NS_PER_MS),
        })
    }
}

/// Most partitions a topic may have.
pub const MAX_PARTITIONS: u32 = 4096;

/// How [`Topic::open`] opens its partitions' logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opening {
    /// Recovers them, for this process alone (`Sharing::Exclusive`).
    Alone,
    /// Recovers them, shared: the first opener in `Sharing::Processes`.
    First,
    /// Joins them as another process left them (`Sharing::Processes`).
    Join,
}

/// A topic: a name and its partitions.
pub(crate) struct Topic {
    pub(crate) name: Name,
    pub(crate) partitions: Box<[Arc<Partition>]>,
    /// The ids it appended recently; `None` when `dedupe_window_ms` is 0.
    pub(crate) dedupe: Option<Window>,
    /// Processes mode, with a window: the lock that serializes publishes
    /// with ids across processes (see "Across processes" in `dedupe.rs`).
    across: Option<Across>,
    /// When the compactor may remove records, if the topic is compacted.
    pub(crate) compaction: Option<CompactionPolicy>,
    /// `TopicOptions::priority`: the default of its subscriptions.
    pub(crate) priority: Option<u8>,
    /// Its schema, if any (see `schema.rs`).
    pub(crate) schema: Slot,
    /// Processes mode: its directory (`topics/<n>`), which a delete by any
    /// process renames away (see [`Topic::publish_failed`]).
    dir: Option<PathBuf>,
}

/// Where a publish through [`Topic::publish_identified`] landed:
/// (partition, offset, duplicate).
pub(crate) type Outcome = (u32, u64, bool);

impl Topic {
    pub(crate) fn new(name: &str, options: &TopicOptions) -> Result<Topic> {
        options.validate()?;
        let config = options.log_config();
        let partitions = (0..options.partitions)
            .map(|i| {
                Log::for_partition(&config, i).map(|log| {
                    let mut p = Partition::new(i, log);
                    p.keyed_only = options.cleanup.compacts();
                    Arc::new(p)
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Topic {
            name: name.into(),
            partitions: partitions.into(),
            dedupe: window(options),
            across: None,
            compaction: options.compaction_policy(),
            priority: options.priority,
            schema: Slot::default(),
            dir: None,
        })
    }

    /// Publishes a record that may carry an id (`Record::may_have_id`): the
    /// publish paths send such records here, out of line, so a record with
    /// neither an id nor attributes pays only that test. Without an id, or
    /// on a topic without a window, it is published as any record. In
    /// Processes mode a record with an id is published in a turn of the
    /// topic's lock (see "Across processes" in `dedupe.rs`).
    #[cold]
    #[inline(never)]
    pub(crate) fn publish_identified(&self, record: &Record<'_>, wait: Wait) -> Result<Outcome> {
        let id = record.id()?;
        let (Some(id), Some(window)) = (id, &self.dedupe) else {
            let p = self.route(record.key);
            let offset = p.publish(record, wait).map_err(|f| self.publish_failed(f))?;
            return Ok((p.index, offset, false));
        };
        let Some(across) = &self.across else {
            return self.publish_claimed(window, id, record, wait, None);
        };
        let mut turn = self.turn(across, window)?;
        self.publish_claimed(window, id, record, wait, Some(&mut turn))
    }

    /// A checked batch on a topic with a window, some of whose records carry
    /// ids: one record at a time, in input order, each through the window
    /// (so an id repeated within the batch is appended once); in Processes
    /// mode all in one turn of the topic's lock. The window's table is
    /// asked for [`IDS_AHEAD`] records ahead of the one being claimed (see
    /// `Window::prefetch`).
    #[cold]
    pub(crate) fn publish_identified_batch(&self, records: &[Record<'_>], wait: Wait) -> Result<Vec<Outcome>> {
        let Some(window) = &self.dedupe else {
            return records.iter().map(|r| self.publish_identified(r, wait)).collect();
        };
        let prefetch = |record: &Record<'_>| {
            if let Ok(Some(id)) = record.id() {
                window.prefetch(id);
            }
        };
        records.iter().take(IDS_AHEAD).for_each(prefetch);
        let mut turn = match &self.across {
            Some(across) => Some(self.turn(across, window)?),
            None => None,
        };
        let mut out = Vec::with_capacity(records.len());
        for (i, record) in records.iter().enumerate() {
            records.get(i + IDS_AHEAD).map(prefetch);
            out.push(match record.id()? {
                Some(id) => self.publish_claimed(window, id, record, wait, turn.as_mut())?,
                None => {
                    let p = self.route(record.key);
                    let offset = p.publish(record, wait).map_err(|f| self.publish_failed(f))?;
                    (p.index, offset, false)
                }
            });
        }
        Ok(out)
    }

    /// Publishes `record`, whose id is `id`, through `window`: claims the
    /// id, appends the record, settles the id. In a `turn` (Processes mode),
    /// an append right where the turn's catch-up stopped moves the catch-up
    /// past it: the window has its id already.
    fn publish_claimed(
        &self,
        window: &Window,
        id: &str,
        record: &Record<'_>,
        wait: Wait,
        turn: Option<&mut Turn<'_>>,
    ) -> Result<Outcome> {
        match window.claim(id, now_ns()) {
            Claim::Duplicate(landed) => Ok((landed.partition, landed.offset, true)),
            Claim::Claimed(ticket) => {
                let p = self.route(record.key);
                // On failure the ticket is dropped, which abandons the id.
                let offset = p.publish(record, wait).map_err(|f| self.publish_failed(f))?;
                ticket.appended(Landed { partition: p.index, offset });
                if let Some(cursor) = turn.and_then(|t| t.seen[p.index as usize].as_mut())
                    && cursor.offset() == offset
                {
                    // Within the segment the cursor holds, or the seek
                    // finds the next; a failure leaves the record to be
                    // read again, which is only slower.
                    let _ = cursor.seek(offset + 1);
                }
                Ok((p.index, offset, false))
            }
        }
    }

    /// Takes a turn of `across` and catches `window` up with the records
    /// with ids that other processes appended since this process's last
    /// turn (see "Across processes" in `dedupe.rs`): for each partition,
    /// every offset from where the last turn stopped (on the first, from
    /// the record stamped a window ago) up to the end offset read now.
    #[cold]
    fn turn<'a>(&self, across: &'a Across, window: &Window) -> Result<Turn<'a>> {
        let mut turn = across.turn()?;
        let now = now_ns();
        for (p, seen) in self.partitions.iter().zip(turn.seen.iter_mut()) {
            p.log.follow_rolls().map_err(|e| self.batch_failed(e))?;
            // After the lock: every record with an id appended in an
            // earlier turn lies below it, committed.
            let end = p.log.end_offset();
            let cursor = match seen {
                Some(cursor) => cursor,
                None => {
                    let since = now.saturating_sub(window.window_ns());
                    seen.insert(p.log.cursor_resuming(p.log.offset_at_time(since)))
                }
            };
            while cursor.offset() < end {
                match cursor.read() {
                    Ok(Some(record)) => {
                        if let Some(id) = record.attribute(ID_ATTRIBUTE) {
                            let landed = Landed { partition: p.index, offset: record.offset() };
                            window.remember(id, landed, record.timestamp_ns(), now);
                        }
                    }
                    // Not committed: a record without an id still being
                    // written, or a reservation whose publisher died (a
                    // turn's record is committed before its turn ends, or
                    // never). Passed over, not waited for.
                    Ok(None) => {
                        let next = cursor.offset() + 1;
                        if cursor.seek(next).is_err() {
                            *cursor = p.log.cursor_resuming(next);
                        }
                    }
                    // Retention removed records before this process looked
                    // at them: their ids are not learned (see `dedupe.rs`).
                    Err(_lagged) => {}
                }
            }
        }
        Ok(turn)
    }

    /// Fills the dedupe window from the records of the last window in the
    /// logs (on opening a data directory), oldest first, so a publisher that
    /// crashed after publishing and retries after the restart is answered
    /// with the record it had published.
    fn rebuild_window(&self) {
        let Some(window) = &self.dedupe else { return };
        let now = now_ns();
        let since = now.saturating_sub(window.window_ns());
        let mut found: Vec<(u64, String, Landed)> = Vec::new();
        for p in self.partitions.iter() {
            let Ok(mut cursor) = p.log.cursor_at(p.log.offset_at_time(since)) else { continue };
            while let Ok(Some(record)) = cursor.read() {
                if let Some(id) = record.attribute(ID_ATTRIBUTE) {
                    let landed = Landed { partition: p.index, offset: record.offset() };
                    found.push((record.timestamp_ns(), id.to_owned(), landed));
                }
            }
        }
        found.sort_by_key(|(at, _, landed)| (*at, landed.partition, landed.offset));
        for (at, id, landed) in found {
            window.remember(&id, landed, at, now);
        }
    }

    /// Opens (or creates) a topic whose partitions keep their logs in files:
    /// partition `i` in `dir(i)`. A torn tail found by recovery is reported
    /// in each partition's stats and through the `log` crate. With
    /// `Opening::Join`, joins logs other processes have open instead of
    /// recovering them (see "Several processes" in `store/mod.rs`).
    pub(crate) fn open(
        name: &str,
        options: &TopicOptions,
        dir: &dyn Fn(u32) -> PathBuf,
        fsync: Fsync,
        repair: bool,
        opening: Opening,
        bell: Option<&Arc<Bell>>,
    ) -> Result<Topic> {
        options.validate()?;
        let config = options.log_config();
        let partitions = (0..options.partitions)
            .map(|i| {
                let durable = DurableLog { dir: dir(i), fsync, repair };
                let (log, report) = match opening {
                    Opening::Alone => Log::open(&config, i, &durable)?,
                    #[cfg(not(loom))]
                    Opening::First => Log::open_with(&config, i, &durable, Sharing::Processes, bell.map(|b| b.maps()))?,
                    #[cfg(loom)]
                    Opening::First => Log::open_in(&config, i, &durable, Sharing::Processes)?,
                    #[cfg(not(loom))]
                    Opening::Join => {
                        (Log::join_with(&config, i, &durable, bell.map(|b| b.maps()))?, Default::default())
                    }
                    // Never reached: a Processes broker does not open under
                    // loom (see `BrokerInner::open_data_dir`).
                    #[cfg(loom)]
                    Opening::Join => return Err(Error::InvalidArgument("no shared logs under loom".into())),
                };
                let recovery = Recovered {
                    truncated_records: report.truncated_records,
                    truncated_bytes: report.truncated_bytes,
                    repaired: report.repaired,
                };
                if recovery != Recovered::default() {
                    log::warn!(
                        "rill: recovery of partition {i} of topic {name:?} dropped {} damaged or partial records \
                         ({} bytes) at the end of its log",
                        recovery.truncated_records,
                        recovery.truncated_bytes
                    );
                }
                let mut p = match (opening, bell) {
                    (Opening::Alone, _) | (_, None) => Partition::new(i, log),
                    (_, Some(bell)) => {
                        let cross = Cross::open(&dir(i), opening == Opening::First, bell.clone())?;
                        let blockers = SharedBlockers::open(&dir(i), opening == Opening::First)?;
                        Partition::shared(i, log, cross, blockers)
                    }
                };
                p.recovery = recovery;
                p.keyed_only = options.cleanup.compacts();
                Ok(Arc::new(p))
            })
            .collect::<Result<Vec<_>>>()?;
        let topic_dir = match opening {
            Opening::Alone => None,
            Opening::First | Opening::Join => Some(dir(0).parent().map(PathBuf::from).unwrap_or_default()),
        };
        // Processes mode: the window is filled by the first turn's catch-up
        // instead of here, and kept up by every turn's.
        let across = match (&topic_dir, options.dedupe_window_ms) {
            (None, _) | (_, 0) => None,
            (Some(topic_dir), _) => Some(Across::open(topic_dir.join(DEDUPE_LOCK_FILE), partitions.len())?),
        };
        let topic = Topic {
            name: name.into(),
            partitions: partitions.into(),
            dedupe: window(options),
            across,
            compaction: options.compaction_policy(),
            priority: options.priority,
            schema: Slot::default(),
            dir: topic_dir,
        };
        if topic.across.is_none() {
            topic.rebuild_window();
        }
        Ok(topic)
    }

    /// Marks every partition deleted (see [`Partition::mark_deleted`]).
    pub(crate) fn mark_deleted(&self) {
        for p in self.partitions.iter() {
            p.mark_deleted();
        }
    }

    /// True once the topic has been deleted.
    #[inline]
    pub(crate) fn is_deleted(&self) -> bool {
        self.partitions[0].is_deleted()
    }

    /// What a publish to this topic that failed with `f` reports: if the
    /// topic was deleted meanwhile, the deletion (its files may have gone
    /// under the append, see "Deleting a topic" in `store/mod.rs`), else `f`.
    /// Deleted by another process sharing the directory, the topic is
    /// marked here only once this broker has reread the topic list, but an
    /// I/O failure (a roll finding no directory) is its delete as soon as
    /// its directory is gone ([`Topic::gone_from_disk`]).
    #[cold]
    #[inline(never)]
    pub(crate) fn publish_failed(&self, f: PublishFailure) -> PublishFailure {
        if self.is_deleted() || self.gone_from_disk(f.error()) { PublishFailure::from(self.deleted_error()) } else { f }
    }

    /// [`Topic::publish_failed`] for the batch paths' `Error`.
    #[cold]
    #[inline(never)]
    pub(crate) fn batch_failed(&self, e: Error) -> Error {
        if self.is_deleted() || self.gone_from_disk(&e) { self.deleted_error() } else { e }
    }

    /// Processes mode: whether `e`, an I/O failure, met the topic deleted
    /// by another process: its directory `topics/<n>` is not there. A
    /// delete renames it away only once the topic is unlisted (see
    /// "Deleting a topic" in `store/mod.rs`), so a missing directory is a
    /// deleted topic; with the directory there, the failure is reported as
    /// it is.
    fn gone_from_disk(&self, e: &Error) -> bool {
        let Some(dir) = &self.dir else { return false };
        matches!(e, Error::Io { .. })
            && matches!(std::fs::symlink_metadata(dir), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
    }

    /// The error a handle to a deleted topic reports.
    #[cold]
    pub(crate) fn deleted_error(&self) -> Error {
        Error::NoSuchTopic(self.name.to_string())
    }

    /// The partition a record goes to: `partition_for_key` for keyed records,
    /// else the next of this thread's round-robin.
    #[inline]
    pub(crate) fn route(&self, key: Option<&[u8]>) -> &Arc<Partition> {
        let n = self.partitions.len();
        if n == 1 {
            return &self.partitions[0];
        }
        let i = match key {
            Some(k) => partition_for_key(k, n as u32) as usize,
            None => next_round_robin() % n,
        };
        &self.partitions[i]
    }
}

impl fmt::Debug for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Topic").field("name", &self.name).field("partitions", &self.partitions.len()).finish()
    }
}

/// How many records ahead of the one it claims a batch with ids asks for
/// the window's table line (`Window::prefetch`): enough reads in flight to
/// cover a read from memory while a claim and an append run, few enough
/// that the lines are still in the nearer caches when their claims come.
/// `rill-bench --scenario dedupe --batch 64` measures it (8 against none
/// and 32 was the choice there).
const IDS_AHEAD: usize = 8;

/// A topic's lock file for publishes with ids across processes, in its
/// directory beside the partitions' (see "Across processes" in `dedupe.rs`).
const DEDUPE_LOCK_FILE: &str = "dedupe.lock";

/// The dedupe window `options` ask for.
fn window(options: &TopicOptions) -> Option<Window> {
    (options.dedupe_window_ms > 0).then(|| Window::new(options.dedupe_window_ms))
}

/// The partition of a keyed message: FNV-1a (64-bit) over the key bytes,
/// finished with MurmurHash3's 64-bit mixer, modulo the partition count.
///
/// The function is fixed: the same key lands on the same partition in every
/// run, on every platform and in every language binding, as long as the
/// partition count stays the same.
///
/// # Examples
///
/// ```
/// use rill::broker::partition_for_key;
/// use rill::{Broker, BrokerConfig, Record, TopicOptions};
///
/// // Fixed values: the same in every run, on every platform and in every binding.
/// assert_eq!(partition_for_key(b"user-1", 16), 5);
/// assert_eq!(partition_for_key(b"order-42", 16), 6);
///
/// // A keyed message lands on its key's partition.
/// let broker = Broker::new(BrokerConfig::default())?;
/// broker.create_topic("orders", &TopicOptions::with_partitions(16))?;
/// assert_eq!(broker.publish("orders", &Record::new(b"o-1").with_key(b"user-1"))?.partition, 5);
/// # Ok::<(), rill::Error>(())
/// ```
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = FNV_OFFSET;
    for &b in key {
        h ^= b as u64;
        h = h.wrapping_mul(FNV_PRIME);
    }
    // fmix64: spreads FNV's weak low bits over the whole word.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    (h % partitions.max(1) as u64) as u32
}

/// This thread's next round-robin index. Per thread, so concurrent
/// publishers do not contend on a shared counter.
fn next_round_robin() -> usize {
    crate::sync::thread::thread_local! {
        // Not `const { .. }`: loom's `thread_local!` does not accept it.
        #[allow(clippy::missing_const_for_thread_local)]
        static NEXT: std::cell::Cell<usize> = std::cell::Cell::new(usize::MAX);
    }
    NEXT.with(|n| {
        let mut v = n.get();
        if v == usize::MAX {
            // Start threads at different places so a burst of new threads
            // does not pile onto partition 0.
            use std::hash::BuildHasher;
            v = std::hash::RandomState::new().hash_one(crate::sync::thread::current().id()) as usize >> 1;
        }
        n.set(v.wrapping_add(1));
        v
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn key_partitioning_is_pinned_to_known_values() {
        // These values are part of the contract: changing the function would
        // move keys between partitions for existing users. They were computed
        // independently of this code, with a Python transcription of the
        // documented function (FNV-1a 64, then fmix64, then modulo).
        let got: Vec<u32> = [&b"user-1"[..], b"user-2", b"order-42", b"", b"\x00\xff"]
            .iter()
            .map(|k| partition_for_key(k, 16))
            .collect();
        assert_eq!(got, vec![5, 11, 6, 6, 8]);
        assert_eq!(partition_for_key(b"anything", 1), 0);
    }

    #[test]
    fn options_are_validated_without_creating_a_topic_and_as_creating_one_would() {
        let bad = [
            TopicOptions::with_partitions(0),
            TopicOptions::with_partitions(MAX_PARTITIONS + 1),
            TopicOptions { retention_messages: Some(0), ..TopicOptions::default() },
            TopicOptions { segment_bytes: Some(1), ..TopicOptions::default() },
        ];
        for options in bad {
            let checked = options.validate().expect_err("invalid options");
            let built = Topic::new("t", &options).expect_err("invalid options");
            assert!(matches!(checked, Error::InvalidArgument(_)), "{checked:?}");
            assert_eq!(checked.to_string(), built.to_string());
        }
        assert!(TopicOptions::default().validate().is_ok());
        assert!(TopicOptions::with_partitions(MAX_PARTITIONS).validate().is_ok());
        // A broker checks its default topic options up front, the same way.
        let config = crate::BrokerConfig { default_topic: TopicOptions::with_partitions(0), ..Default::default() };
        assert!(matches!(crate::Broker::new(config), Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn keys_spread_over_partitions() {
        let mut counts = [0u32; 8];
        for i in 0..8_000u32 {
            counts[partition_for_key(format!("key-{i}").as_bytes(), 8) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| (800..1200).contains(&c)), "{counts:?}");
    }

    #[test]
    fn a_catch_up_passes_a_hole_left_by_a_dead_publisher_and_finds_the_ids_after_it() {
        // Two brokers on one directory shared by processes (each could be a
        // process): a reservation nobody commits (a publisher killed while
        // copying its record) is at the tail when `a` takes its first turn,
        // and below a record with an id when `b` takes its next: both
        // catch-ups pass over it, without waiting for the abandon bound, and
        // `b` finds the id past it.
        use crate::{Broker, BrokerConfig, Sharing};
        let dir =
            std::env::temp_dir().join(format!("rill-topic-hole-{}-{}", std::process::id(), crate::sync::unique_id()));
        let config =
            BrokerConfig { data_dir: Some(dir.clone()), sharing: Sharing::Processes, ..BrokerConfig::default() };
        let (a, b) = (Broker::new(config.clone()).unwrap(), Broker::new(config).unwrap());
        a.create_topic("t", &TopicOptions::default()).unwrap();
        // `b` takes its first turn (its catch-up starts) before the hole.
        assert!(!b.publish_outcome("t", &Record::new(b"x").with_id("first")).unwrap().duplicate);
        let hole = a.inner().topic_for_publish("t").unwrap().partitions[0].log.leave_hole(64);
        let after = a.publish_outcome("t", &Record::new(b"x").with_id("after")).unwrap();
        assert_eq!((hole, after.position.offset, after.duplicate), (1, 2, false));
        let retry = b.publish_outcome("t", &Record::new(b"x").with_id("after")).unwrap();
        assert_eq!((retry.position, retry.duplicate), (after.position, true));
        assert_eq!(b.topic_stats("t").unwrap().publish_count, 3, "nothing appended for the retry");
        drop((a, b));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unkeyed_messages_cycle_through_partitions() {
        let topic = Topic::new("t", &TopicOptions::with_partitions(4)).unwrap();
        let mut seen: Vec<u32> = (0..8).map(|_| topic.route(None).index).collect();
        let first = seen[0];
        assert_eq!(seen[..4].iter().map(|p| (p + 4 - first) % 4).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        seen.sort_unstable();
        assert_eq!(seen, vec![0, 0, 1, 1, 2, 2, 3, 3]);
    }
}
