//! The control plane on a data directory: opening it (topics reopened,
//! offsets loaded, and those past a recovered end reset), the flusher's
//! work, and the snapshots of group commits and durable positions taken
//! for the store (`store/offsets.rs` writes them).
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

use std::collections::HashMap;
use std::time::Duration;

use super::{BrokerConfig, BrokerInner, Control};
use crate::broker::doorbell::Bell;
use crate::broker::flusher::{Flusher, Poke};
use crate::broker::group::Group;
use crate::broker::store::{Offsets, Positions, Store, Ticket};
use crate::broker::subscription::SubCore;
use crate::broker::topic::{Opening, Topic};
use crate::error::{Error, Result};
use crate::log::file::RollHook;
use crate::log::{Fsync, Sharing};
use crate::sync::atomic::Ordering;
use crate::sync::{Arc, Name};

impl BrokerInner {
    /// Opens the data directory in `config` (nothing without one): takes its
    /// lock, reopens its topics (recovering their logs) and loads the
    /// offsets into a fresh control plane.
    pub(crate) fn open_data_dir(config: &BrokerConfig) -> Result<Option<OpenedDir>> {
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
            topic.schema.restore(&store.topic_files(meta.dir), opening != Opening::Join)?;
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
    pub(crate) fn start_flusher(this: &Arc<BrokerInner>) -> Result<()> {
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
            Box::new(move |poke: &Poke| match inner.store() {
                Some(store) => {
                    inner.prepare_ahead(poke);
                    inner.flush(&store, sync)
                }
                None => false,
            }),
            Box::new(move |poke: &Poke| short.prepare_ahead(poke)),
        )?;
        let poke = flusher.poker();
        {
            // Under the control lock, as `create_topic` gives a new topic's
            // partitions the handle (before the topic map has them): every
            // topic is given it, here or there (see "Due" in `flusher.rs`).
            let _control = this.control.lock();
            let due = this.flush_due.get_or_init(|| flusher.due());
            if this.config.fsync != Fsync::Never {
                for t in this.topics.values() {
                    for p in t.partitions.iter() {
                        p.set_flush_due(due);
                    }
                }
            }
        }
        // The topics the directory brought: prepared and hooked right away.
        poke.poke();
        *this.flush_poke.lock() = Some(poke);
        *this.flusher.lock() = Some(flusher);
        Ok(())
    }

    /// Under `Fsync::Interval`, the handle a new partition's publishes mark
    /// the flusher due with (see "Due" in `flusher.rs`); called under the
    /// control lock, before the partition's topic enters the topic map.
    pub(crate) fn give_flush_due(&self, topic: &Topic) {
        if self.config.fsync == Fsync::Never {
            return;
        }
        if let Some(due) = self.flush_due.get() {
            for p in topic.partitions.iter() {
                p.set_flush_due(due);
            }
        }
    }

    /// Marks the flusher due (see "Due" in `flusher.rs`), if there is one:
    /// something it writes out changed (a durable subscription's positions,
    /// an offsets snapshot written unsynced).
    pub(crate) fn mark_flush_due(&self) {
        if let Some(due) = self.flush_due.get() {
            due.mark();
        }
    }

    /// Faults in the pages of every durable partition's active segment file
    /// ahead of its publishers, once per segment (see `Log::prepare_ahead`),
    /// on the flusher's thread; and has each partition's log `poke` the
    /// flusher after its every roll (a partition gets its hook here, at the
    /// first run after its topic was created or opened), so that each new
    /// file is prepared as soon as it is in use, not at the next interval.
    pub(super) fn prepare_ahead(&self, poke: &Poke) {
        // Collected first: preparing faults pages in, which no epoch pin
        // should span.
        for t in self.topics.values() {
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
    /// again. Returns whether it left work behind (a failure, or a log with
    /// offsets handed out past what its round made durable): the flusher
    /// then runs again an interval later, marked or not (see "Due" in
    /// `flusher.rs`).
    pub(super) fn flush(&self, store: &Store, sync: bool) -> bool {
        let mut behind = false;
        if store.fsync() != Fsync::Always {
            // Collected first, as in `prepare_ahead`: a round syncs.
            for t in self.topics.values() {
                for p in t.partitions.iter() {
                    if let Err(e) = p.log.flusher_round() {
                        log::error!("rill: could not sync partition {} of {:?}: {e}", p.index, t.name);
                        behind = true;
                    }
                    behind |= p.log.behind_durable();
                }
            }
        }
        let ticket = store.request(offsets_snapshot(&self.control.lock()), sync);
        if let Err(e) = store.wait(ticket) {
            log::error!("rill: could not save offsets: {e}");
            behind = true;
        }
        // Processes mode: each held name's positions, in its own slots.
        self.flush_named(sync);
        behind
    }

    /// Takes a snapshot of the group commits and durable positions for the
    /// data directory, if there is one (to be synced under `Fsync::Always`).
    /// Called under the control mutex, so snapshots are numbered in the order
    /// of the changes they hold; wait for it with [`wait_offsets`] after
    /// releasing the mutex.
    pub(super) fn snapshot_offsets(&self, control: &Control) -> Option<(Arc<Store>, Ticket)> {
        let store = self.store()?;
        let ticket = store.request(offsets_snapshot(control), store.sync_commits());
        if !store.sync_commits() {
            // Written unsynced: under `Interval`, the flusher's next round
            // syncs it (and it writes whatever moved since).
            self.mark_flush_due();
        }
        Some((store, ticket))
    }

    /// Under `Fsync::Always`, makes the acks of durable subscription `sub`
    /// durable: its positions (published by its drainer before this) go into
    /// a snapshot that is synced before this returns. The drain calls it at
    /// the end of every round, so a round's acks share one write and fsync
    /// (with any other commits made meanwhile). A failure is logged and kept
    /// as the subscription's last error; the next round tries again.
    pub(crate) fn persist_acks(&self, sub: &SubCore) {
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
}

/// A data directory just opened: its store, its topics, its control plane.
pub(crate) type OpenedDir = (Arc<Store>, HashMap<Name, Arc<Topic>>, Control, Option<Arc<Bell>>);

/// How often the flusher of a broker under `Never` (whose logs flush
/// nothing) runs the logs' marking rounds and saves the positions of its
/// live durable subscriptions: the bound on how long a sealed segment stays
/// without its completion marker.
const DEFAULT_POSITIONS_INTERVAL: Duration = Duration::from_millis(100);

/// Waits for a snapshot taken by `BrokerInner::snapshot_offsets` (nothing
/// without a data directory).
pub(super) fn wait_offsets(snapshot: Option<(Arc<Store>, Ticket)>) -> Result<()> {
    match snapshot {
        Some((store, ticket)) => store.wait(ticket),
        None => Ok(()),
    }
}

/// Everything the data directory keeps besides messages: group commits, and
/// the positions of durable subscriptions, away (saved at their close) or
/// live (read now).
pub(super) fn offsets_snapshot(control: &Control) -> Offsets {
    let mut groups: Vec<_> =
        control.groups.iter().map(|((g, t), group)| (g.clone(), t.to_string(), group.committed.clone())).collect();
    groups.sort();
    let mut durable: HashMap<&str, HashMap<(Name, u32), u64>> =
        control.durable.iter().map(|(name, d)| (name.as_str(), d.positions.clone())).collect();
    // A name held in Processes mode keeps its positions in its own slots.
    for sub in control.subs.values().filter(|s| s.durable && !control.held.contains_key(&s.name)) {
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
