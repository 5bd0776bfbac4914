//! The broker's control plane: the state behind every handle (the topic
//! map, and the subscriptions, consumer groups and durable positions behind
//! one mutex), the worker pool and the timers, and the operations that
//! change them (creating and deleting topics, subscribing, closing). The
//! public handles in `broker/mod.rs` hold an `Arc<BrokerInner>`.
//!
//! With a data directory, the control plane also keeps `store/` up to date:
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
//! `store/offsets.rs`), so nothing waits for an fsync while holding the mutex.
//!
//! # The topic map
//!
//! Every publish by name looks its topic up, so the map is read without a
//! lock: [`TopicMap`] (`broker/topic_map.rs`, whose essay says what a
//! reader sees during each change) is an open-addressing table changed in
//! place, whose lookups take an epoch pin, a hash and a probe, and borrow
//! the topic through an `arc-swap` guard (no reference count touched, no
//! lock, no allocation). A change (creating or deleting a topic) is made
//! under the control mutex and writes one slot, or rebuilds the table once
//! it is three quarters full: O(1) amortised, whatever the number of
//! topics (`rill-bench --scenario scale --scale-full`, the `create
//! us/topic` column). A persistent map (a hash trie shared between
//! versions) made every create copy the path to its key and touch the
//! counts of every child of each copied node, a cost that grew as the map
//! outgrew the caches; a `HashMap` copied whole made it O(n).
//!
//! The map is not a snapshot: a walk (the flusher's rounds, `topics()`)
//! sees every topic there for its whole length, and a topic created or
//! deleted meanwhile or not. Callers that need a consistent set hold the
//! control mutex while they walk, since every change takes it: subscribing
//! (which topics a new subscription attaches to) and syncing with a shared
//! data directory's list. The flusher does not need one: a topic created
//! during its round is prepared at the poke its creation sends, after the
//! insert. A deleted topic leaves memory with the last reference to it, at
//! once, unless a resize retired a table that still holds it: then it goes
//! when the epoch collector frees that table.
//!
//! A concurrent hash map (`papaya`, `scc`, `dashmap`) would also make
//! creation cheap, but `dashmap`'s reads take a shard lock, and the
//! lock-free ones free every deleted topic only when their deferred
//! reclamation gets round to it (with its mapped segments, whose files a
//! deleted topic on a data directory still holds).
//!
//! # The parts
//!
//! Every change made under the control mutex is in this folder
//! (`broker/mod.rs` only takes it to read snapshots), so that the lock's
//! invariants (which topics, subscriptions, groups and durable positions
//! exist, and what the store holds about them) are kept in one place, one
//! job per file:
//!
//! * `mod.rs` (this file): the state ([`BrokerInner`], [`Control`], the
//!   topic map) and what every part reads of it;
//! * `config.rs`: [`BrokerConfig`];
//! * `topics.rs`: creating and deleting topics;
//! * `timers.rs`: the timer jobs a topic may have (its age limit, its
//!   compaction);
//! * `subscribe.rs`: subscribing, a subscription's close hook, forgetting a
//!   durable subscription;
//! * `members.rs`: the hooks of shared subscriptions' members (leaving,
//!   stalling, handing a partition over);
//! * `named.rs`: durable subscriptions' names and positions in
//!   `Sharing::Processes` mode (`held.rs`: a name as the state keeps it);
//! * `groups.rs`: the consumer groups' side (`GroupHost`, deleting a group);
//! * `data_dir.rs`: opening a data directory, the flusher's work, and the
//!   snapshots of offsets taken for the store;
//! * `directory.rs`: the directory-wide listing of pull consumers;
//! * `close.rs`: closing the broker.

mod close;
mod config;
mod data_dir;
pub(crate) mod directory;
pub(crate) mod groups;
mod held;
mod members;
mod named;
pub(crate) mod shared_procs;
mod subscribe;
mod timers;
mod topics;

use std::collections::{HashMap, HashSet};

pub use self::config::BrokerConfig;
use self::shared_procs::Looks;
use self::timers::{Compact, Expire};
use super::consumer::ConsumerCore;
use super::dispatch::{Timer, WorkerPool};
use super::doorbell::Doorbell;
use super::flusher::{Due, Flusher, Poke};
use super::group::Group;
use super::names;
use super::shared::SharedGroup;
use super::store::{Registry, Store};
use super::subscription::{AckWatch, BackoffOver, DrainJob, SubCore};
use super::topic::{Partition, Topic, Wait};
use super::topic_map::{self, Shared};
use crate::error::{Error, Result};
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{Arc, Mutex, Name};

/// A saved position of a durable subscription.
#[derive(Default)]
pub(crate) struct Durable {
    pub(crate) positions: HashMap<(Name, u32), u64>,
}

/// What the topic map holds for a topic: the topic's own `Arc`, so a
/// lookup borrows it. Under loom, whose `Arc` is not std's (which is what
/// `arc-swap` swaps), the topic's `Arc` inside a std one: the broker's map
/// is only built there, never run.
#[cfg(not(loom))]
pub(crate) type Entry = Topic;
#[cfg(loom)]
pub(crate) type Entry = Arc<Topic>;

/// The topic map (see "The topic map" in the module docs).
pub(crate) type TopicMap = topic_map::TopicMap<Entry>;

/// The map's entry for `topic`.
pub(crate) fn entry(topic: &Arc<Topic>) -> Shared<Entry> {
    #[cfg(not(loom))]
    let entry = topic.clone();
    #[cfg(loom)]
    let entry = Shared::new(topic.clone());
    entry
}

/// The topic of one of the map's entries.
#[inline]
pub(crate) fn topic_of(entry: &Shared<Entry>) -> &Arc<Topic> {
    entry
}

/// Control-plane state, behind one mutex.
#[derive(Default)]
pub(crate) struct Control {
    /// Patterns of live subscriptions, to attach them to new topics.
    pub(crate) patterns: names::PatternIndex<Arc<SubCore>>,
    /// Live subscriptions by id.
    pub(crate) subs: HashMap<u64, Arc<SubCore>>,
    /// Names of live subscriptions.
    pub(crate) live_names: HashSet<String>,
    /// Positions of durable subscriptions, kept while they are away.
    pub(crate) durable: HashMap<String, Durable>,
    /// `Sharing::Processes`: the names of this process's live durable
    /// subscriptions, held with the positions they write (see `named.rs`).
    pub(crate) held: HashMap<String, held::Held>,
    /// Consumer groups (committed offsets and live members), by (group, topic).
    pub(crate) groups: HashMap<(String, Name), Group>,
    /// Shared push subscriptions with live members, by name.
    pub(crate) shared: HashMap<String, SharedGroup>,
    /// Live consumers by id, so closing the broker can close them.
    pub(crate) consumers: HashMap<u64, Arc<ConsumerCore>>,
}

pub(crate) struct BrokerInner {
    pub(crate) id: u64,
    /// The process that started the broker. In any other process (a child
    /// of `fork`) the broker is an inherited copy: see `forked`.
    pub(crate) pid: u32,
    pub(crate) config: BrokerConfig,
    pub(crate) closed: AtomicBool,
    pub(crate) topics: TopicMap,
    pub(crate) control: Mutex<Control>,
    pub(crate) pool: Arc<WorkerPool<DrainJob>>,
    pub(crate) timer: Arc<Timer<BackoffOver>>,
    /// The data directory, while the broker is open on one.
    pub(crate) store: Mutex<Option<Arc<Store>>>,
    /// Syncs and saves offsets every interval (with a data directory).
    pub(crate) flusher: Mutex<Option<Flusher>>,
    /// Wakes the flusher's short job (see `prepare_ahead`) without the
    /// `flusher` lock, which `close` holds while it joins the thread.
    pub(crate) flush_poke: Mutex<Option<Poke>>,
    /// Marks the flusher due (see "Due" in `flusher.rs`): set once, when it
    /// starts; read without a lock at the end of a durable subscription's
    /// drain rounds.
    pub(crate) flush_due: std::sync::OnceLock<Due>,
    /// The timer that applies topics' age limits, started with the first
    /// topic that has one (most brokers never need its thread).
    pub(crate) expiry: Mutex<Option<Arc<Timer<Expire>>>>,
    /// The compactor: a thread that runs compaction passes over compacted
    /// topics, started with the first one (see `Compact`).
    pub(crate) compactor: Mutex<Option<Arc<Timer<Compact>>>>,
    /// The timer that checks handler calls against their `ack_timeout`,
    /// started with the first subscription that has one.
    pub(crate) ack_watch: Mutex<Option<Arc<Timer<AckWatch>>>>,
    /// `Sharing::Processes`: the timer of shared members' looks at each
    /// other (`shared_procs.rs`), started with the first member.
    pub(crate) shared_look: Mutex<Option<Arc<Looks>>>,
    /// What detached readers of deleted topics read instead (see
    /// `delete_topic`): one empty partition for the broker's life, made at
    /// the first delete, so deletions do not each leave one behind.
    pub(crate) placeholder: Mutex<Option<Arc<Partition>>>,
    /// `Sharing::Processes`: the doorbell thread (see `doorbell.rs`).
    pub(crate) doorbell: Option<Arc<Doorbell>>,
    /// `Sharing::Processes`: the watch of the other members' processes
    /// (see "Deaths" in `store/membership.rs`); with the doorbell.
    pub(crate) deaths: Option<std::sync::Arc<crate::broker::store::Deaths>>,
    /// `Sharing::Processes`: this broker's subscriptions and their
    /// counters, for other processes to list (see `store/registry.rs`).
    pub(crate) registry: Option<Arc<Registry>>,
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
    pub(crate) fn forked(&self) -> bool {
        std::process::id() != self.pid
    }

    #[inline]
    pub(crate) fn is_closed(&self) -> bool {
        // Acquire: pairs with the Release swap in `close`.
        self.closed.load(Ordering::Acquire)
    }

    /// How long a plain `publish` waits for `Block` subscribers.
    #[inline]
    pub(crate) fn default_wait(&self) -> Wait {
        Wait::For(self.config.publish_timeout)
    }

    #[inline]
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.is_closed() { Err(Error::broker_closed()) } else { Ok(()) }
    }

    pub(crate) fn topic(&self, name: &str) -> Result<Arc<Topic>> {
        self.check_open()?;
        match self.topics.get(name) {
            Some(t) => Ok(topic_of(&t).clone()),
            None => {
                names::validate_topic(name)?;
                Err(Error::NoSuchTopic(name.to_owned()))
            }
        }
    }

    /// Has `doorbell` watch every partition of `topic`.
    pub(crate) fn watch(doorbell: &Doorbell, topic: &Topic) {
        for p in topic.partitions.iter() {
            doorbell.watch(p);
        }
    }

    /// The data directory, if the broker is open on one.
    pub(crate) fn store(&self) -> Option<Arc<Store>> {
        self.store.lock().clone()
    }
}

/// A durable subscription's saved positions (empty for anonymous ones).
pub(super) fn saved_positions(control: &Control, sub: &SubCore) -> HashMap<(Name, u32), u64> {
    if !sub.durable {
        return HashMap::new();
    }
    control.durable.get(&sub.name).map(|d| d.positions.clone()).unwrap_or_default()
}
