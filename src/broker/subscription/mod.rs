//! Push subscriptions: how a subscription is attached, drained, settled
//! and closed.
//!
//! A subscription is one mechanism in parts, each in its own file:
//!
//! * `core.rs`: the data (the shared core, the drain state, readers,
//!   counters, the types of its pool and timer jobs) and what reads it
//!   without a mechanism of its own: scheduling a drain, `poke`,
//!   `wait_idle`, whether there is work.
//! * `attach.rs`: starting and stopping to read a partition: the reader
//!   handed to the drainer, the listener added to the partition, and the
//!   drainer's half (merging new readers at a round's start, letting
//!   revoked ones go).
//! * `drain.rs`: the drain loop, in rounds and batches (the pool's drain
//!   job and the backoff timer's job run here).
//! * `idle.rs`: the idle policy: what a drain that caught up does before
//!   it goes idle (the pool's linger, a dedicated thread's spin and naps).
//! * `run_wait.rs`: the run-wait policy: how long a drain that keeps
//!   finding the publisher ahead of it waits for a run of records before it
//!   takes them (not built under loom).
//! * `settle.rs`: acknowledgements, retries and dead letters, and calling
//!   user code.
//! * `close.rs`: closing, and winding up after the last handler call.
//! * `deadline.rs`: the ack deadline: the watch on handler calls (its
//!   timer job runs here), and what a shared member does when its handler
//!   stalls.
//! * `options.rs`: the values a subscriber chooses and sees.
//! * `queue_wait.rs`: the histogram of how long the subscription waited in
//!   the worker pool's queue, for the stats.
//!
//! What a publisher runs is below this folder, in `partition/`: the state
//! word (`state.rs`), signal-and-drain with its essay and fences F1 to F4
//! (`signal.rs`, whose drainer's half `drain.rs` calls), and the mark of a
//! thread running user code (`in_handler.rs`). This folder imports it and
//! `topic.rs`; neither imports this folder.
//!
//! This file holds the public face: the statistics (`stats` reads a
//! [`SubscriptionStats`] off a `SubCore`) and the [`Subscription`] handle.
//!
//! `SubCore` keeps its data, its constructor and its plain accessors in
//! `core.rs`, the only `impl SubCore`; each mechanism is free functions in
//! its own file that take the core as their first argument
//! (`close::close(&core)`, `settle::settle(core, ..)`,
//! `deadline::arm_ack_watch(this)`), so every call from one part into
//! another names the part, and the imports show every dependency. The
//! parts import each other in one direction only: `options`, `queue_wait`
//! and `run_wait` import no other part; `core` imports those three;
//! `idle` and `deadline` import `core`; `attach` and `settle` import
//! `core` and `options`; `close` imports `core`, `options` and `attach`
//! (a closed subscription lets go of deleted topics' readers); `drain`
//! imports `core`, `options`, `idle`, `settle`, `attach` (merging new
//! readers at a round's start), `close` (winding up, the lag policy's
//! close) and `deadline` (the watch on handler calls); this file imports
//! `core`, `options` and `close`. `tests/structure.rs` checks that no file
//! imports one that imports it back. `core.rs` calls none of the
//! mechanisms: its job types' runs (`impl Job`) are in `drain.rs` and
//! `deadline.rs`. Outside this folder, the control plane, the shared
//! groups and the loom harness call the mechanisms by the same paths
//! (`attach::attach_to`, `attach::revoke`, `close::close_with_reason`,
//! `deadline::surrender`, `drain::dedicated_loop`).

pub(crate) mod attach;
pub(crate) mod close;
mod core;
pub(crate) mod deadline;
pub(crate) mod drain;
mod idle;
mod options;
mod queue_wait;
#[cfg(not(loom))]
mod run_wait;
mod settle;

use std::fmt;
use std::time::Duration;

pub(crate) use self::core::CloseHook;
pub(crate) use self::core::Stall;
pub(crate) use self::core::{AckWatch, BackoffOver, DeadLetters, DrainJob, Exec, HandlerKind, SubCore, SubEnv};
pub use options::{
    Ack, BatchHandler, DEFAULT_MAX_ATTEMPTS, DeadLetterCallback, DeliveryMode, Handler, LagCallback, Message, Overflow,
    RetryBackoff, StartPosition, SubscriptionOptions,
};

use crate::broker::partition::state::Phase;
use crate::broker::store::Counts;
use crate::error::Result;
use crate::sync::Arc;
use crate::sync::atomic::{AtomicU64, Ordering};

/// The lifecycle state of a subscription, as reported in stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubscriptionState {
    /// Caught up; waiting for messages.
    Idle,
    /// Delivering (or about to).
    Active,
    /// Waiting to redeliver a message that asked for a retry.
    Backoff,
    /// Closed.
    Closed,
}

/// Position and lag of one partition a subscription reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLag {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: u32,
    /// Next offset the subscription will handle.
    pub position: u64,
    /// One past the newest offset published.
    pub end: u64,
    /// `end - position`.
    pub lag: u64,
}

/// A snapshot of a subscription's counters and positions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionStats {
    /// Its name (generated for anonymous subscriptions).
    pub name: String,
    /// The pattern it subscribed with.
    pub pattern: String,
    /// Its state.
    pub state: SubscriptionState,
    /// Handler calls, redeliveries included.
    pub delivered: u64,
    /// `Success` acks.
    pub acked: u64,
    /// Messages skipped by the filter.
    pub filtered: u64,
    /// Redeliveries scheduled (`Retry` acks and panics).
    pub retried: u64,
    /// Messages published to the dead-letter topic.
    pub dead_lettered: u64,
    /// Messages skipped unhandled: by `DropOldest`, or failed at-most-once.
    pub dropped: u64,
    /// Messages trimmed by retention before the subscription read them.
    pub missed: u64,
    /// Handler calls that ran past `ack_timeout` (each counted once; see
    /// [`SubscriptionOptions::ack_timeout`]). A stall is reported in
    /// `last_error` before it is counted here, so a snapshot that counts it
    /// also holds a report of it (or of a problem that came after).
    pub ack_timeouts: u64,
    /// Total lag over all partitions.
    pub lag: u64,
    /// Per partition.
    pub partitions: Vec<PartitionLag>,
    /// The dead-letter topic.
    pub dead_letter_topic: Option<String>,
    /// Why it was closed, if the broker closed it.
    pub closed_reason: Option<String>,
    /// The last delivery problem: the handler's latest failure (a retry, a
    /// panic or a dead letter, with the message's place and the reason), a
    /// dead-letter publish that failed, or a handler call past
    /// `ack_timeout` (and what moved), whichever came last.
    pub last_error: Option<String>,
    /// Its priority in the worker pool (its own, or its topic's default).
    pub priority: u8,
    /// How many times it waited ready in the worker pool's queue since the
    /// last [`Subscription::stats`] (each of which starts the count and the
    /// waits below afresh; [`Subscription::peek_stats`] and
    /// [`Broker::subscriptions`](crate::Broker::subscriptions) leave them).
    /// Zero on a dedicated thread.
    pub queue_waits: u64,
    /// The median of those waits, from the drain being queued to a worker
    /// taking it; read from a histogram of power-of-two buckets, so it is
    /// the upper edge of the wait's bucket (at most twice the wait). Zero
    /// with no waits.
    pub queue_wait_p50: Duration,
    /// Their 99th percentile, likewise.
    pub queue_wait_p99: Duration,
    /// The longest of those waits counted in takes: drains of other
    /// subscriptions the pool's workers took meanwhile. It stays within
    /// [`PRIORITY_AGING_TAKES`](crate::PRIORITY_AGING_TAKES) plus the
    /// subscriptions that were queued before it (see
    /// [`SubscriptionOptions::priority`]).
    pub queue_wait_max_takes: u64,
}

/// A snapshot of `core`'s counters and positions; `fresh`: the queue-wait
/// figures start afresh (the subscription's own read), else they stay.
pub(crate) fn stats(core: &SubCore, fresh: bool) -> SubscriptionStats {
    let partitions: Vec<PartitionLag> = core
        .positions
        .lock()
        .iter()
        .map(|(topic, p, pos)| {
            // Relaxed: a snapshot.
            let position = pos.load(Ordering::Relaxed);
            let end = p.log.end_offset();
            PartitionLag {
                topic: topic.to_string(),
                partition: p.index,
                position,
                end,
                lag: end.saturating_sub(position),
            }
        })
        .collect();
    let waits = if fresh { core.queue_waits.take() } else { core.queue_waits.peek() };
    let c = &core.counters;
    // Relaxed: counters are statistics.
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    SubscriptionStats {
        name: core.name.clone(),
        pattern: core.pattern.to_string(),
        state: match core.state.get() {
            Phase::Idle => SubscriptionState::Idle,
            Phase::Active => SubscriptionState::Active,
            Phase::Backoff => SubscriptionState::Backoff,
            Phase::Closed => SubscriptionState::Closed,
        },
        delivered: get(&c.delivered),
        acked: get(&c.acked),
        filtered: get(&c.filtered),
        retried: get(&c.retried),
        dead_lettered: get(&c.dead_lettered),
        dropped: get(&c.dropped),
        missed: get(&c.missed),
        // Acquire: pairs with the Release in `deadline::report_stall`, so a
        // stall seen counted is seen in `last_error`, read below.
        ack_timeouts: c.ack_timeouts.load(Ordering::Acquire),
        lag: partitions.iter().map(|p| p.lag).sum(),
        partitions,
        dead_letter_topic: core.env.dead_letters.as_ref().map(DeadLetters::name),
        closed_reason: core.closed_reason.lock().clone(),
        last_error: core.last_error.lock().clone(),
        priority: core.priority,
        queue_waits: waits.count,
        queue_wait_p50: waits.p50,
        queue_wait_p99: waits.p99,
        queue_wait_max_takes: waits.max_takes,
    }
}

/// What `store/registry.rs` publishes of a subscription for other
/// processes, at the end of each drain round: its counters, and its lag
/// as that round left it (a walk of its positions, as `wait_idle` makes).
pub(crate) fn registry_counts(core: &SubCore) -> Counts {
    let lag = core
        .positions
        .lock()
        .iter()
        // Relaxed: a snapshot, as in `stats`. Not `end_offset`: this runs
        // at the end of every drain round (see `Log::lag_from`).
        .map(|(_, p, pos)| p.log.lag_from(pos.load(Ordering::Relaxed)))
        .sum();
    let c = &core.counters;
    // Relaxed: counters are statistics.
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    Counts {
        delivered: get(&c.delivered),
        acked: get(&c.acked),
        filtered: get(&c.filtered),
        retried: get(&c.retried),
        dead_lettered: get(&c.dead_lettered),
        dropped: get(&c.dropped),
        missed: get(&c.missed),
        ack_timeouts: get(&c.ack_timeouts),
        lag,
        // A round that left it caught up is followed by its going idle (or
        // by a round for what came meanwhile, which publishes again): what
        // a reader in another process should see until its next round.
        state: match core.state.get() {
            Phase::Idle => 0,
            Phase::Active if lag == 0 => 0,
            Phase::Active => 1,
            Phase::Backoff => 2,
            Phase::Closed => 3,
        },
    }
}

/// The state a registry's count stands for (see `registry_counts`).
pub(crate) fn state_of_count(state: u64) -> SubscriptionState {
    match state {
        0 => SubscriptionState::Idle,
        2 => SubscriptionState::Backoff,
        3 => SubscriptionState::Closed,
        _ => SubscriptionState::Active,
    }
}

/// A live push subscription. Dropping it unsubscribes (see [`Subscription::close`]).
pub struct Subscription {
    pub(crate) core: Arc<SubCore>,
}

impl Subscription {
    /// The subscription's name (generated for anonymous ones).
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
    /// let audit = broker.subscribe("orders", options, |_| Ack::Success)?;
    /// assert_eq!(audit.name(), "audit");
    ///
    /// // An anonymous subscription is given a name of its own.
    /// let anonymous = broker.subscribe("orders", SubscriptionOptions::default(), |_| Ack::Success)?;
    /// assert!(!anonymous.name().is_empty());
    /// assert_ne!(anonymous.name(), audit.name());
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// Waits until the subscription has handled everything published to its
    /// partitions so far and no handler call is in flight (`Ok(true)`), or the
    /// timeout passes (`Ok(false)`). `Err(Closed)` if it is closed.
    /// Called from this subscription's own handler (or `on_lagged`
    /// callback), it would wait for the call it is made from: it fails at
    /// once with `InvalidArgument`, whatever the timeout. For a durable
    /// subscription of a broker on a data directory with `Fsync::Always`,
    /// `Ok(true)` also means every ack it made is on stable storage.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use rill::{Ack, Error, Record, SubscriptionOptions};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let sub = broker.subscribe("orders", SubscriptionOptions::default(), |_| Ack::Success)?;
    /// broker.publish_batch("orders", &[Record::new(b"o-1"), Record::new(b"o-2")])?;
    /// // Returns once both are handled (`Ok(false)` had 5 s passed first).
    /// assert!(sub.wait_idle(Duration::from_secs(5))?);
    /// assert_eq!(sub.stats().acked, 2);
    ///
    /// sub.close();
    /// assert!(matches!(sub.wait_idle(Duration::from_secs(5)), Err(Error::Closed(_))));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn wait_idle(&self, timeout: Duration) -> Result<bool> {
        self.core.wait_idle(timeout)
    }

    /// A snapshot of its counters and positions.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use rill::{Ack, Record, SubscriptionOptions, SubscriptionState};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let filter = Some(r#"attributes.region = "IN""#.to_owned());
    /// let options = SubscriptionOptions { filter, ..SubscriptionOptions::default() };
    /// let sub = broker.subscribe("orders", options, |_| Ack::Success)?;
    /// broker.publish("orders", &Record::new(b"o-1").with_attributes(&[("region", "IN")]))?;
    /// broker.publish("orders", &Record::new(b"o-2").with_attributes(&[("region", "EU")]))?;
    /// assert!(sub.wait_idle(Duration::from_secs(5))?);
    ///
    /// let stats = sub.stats();
    /// assert_eq!((stats.delivered, stats.acked, stats.filtered), (1, 1, 1));
    /// assert_eq!((stats.state, stats.lag), (SubscriptionState::Idle, 0));
    /// assert_eq!(stats.partitions[0].position, 2);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn stats(&self) -> SubscriptionStats {
        stats(&self.core, true)
    }

    /// [`stats`](Subscription::stats) without starting the queue-wait
    /// figures afresh: they stay for the next `stats` (as they do when
    /// [`Broker::subscriptions`](crate::Broker::subscriptions) lists it).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use rill::{Ack, Record, SubscriptionOptions};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let sub = broker.subscribe("orders", SubscriptionOptions::default(), |_| Ack::Success)?;
    /// broker.publish("orders", &Record::new(b"o-1"))?;
    /// assert!(sub.wait_idle(Duration::from_secs(5))?);
    /// let peeked = sub.peek_stats();
    /// assert_eq!(peeked.acked, 1);
    /// // `stats` then sees the same queue waits, and starts them afresh.
    /// assert_eq!(sub.stats().queue_waits, peeked.queue_waits);
    /// assert_eq!(sub.peek_stats().queue_waits, 0);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn peek_stats(&self) -> SubscriptionStats {
        stats(&self.core, false)
    }

    /// True once closed (by `close`, by the broker closing, or by the
    /// `Disconnect` overflow policy).
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::{Ack, SubscriptionOptions};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let sub = broker.subscribe("orders", SubscriptionOptions::default(), |_| Ack::Success)?;
    /// assert!(!sub.is_closed());
    /// broker.close(); // closing the broker closes its subscriptions
    /// assert!(sub.is_closed());
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn is_closed(&self) -> bool {
        self.core.is_closed()
    }

    /// Unsubscribes. Returns once no handler call of this subscription is in
    /// flight, except when called from inside a handler (its own or another
    /// subscription's): then it returns at once, and the handler is not called
    /// again after any call in flight, so two handlers that close each other
    /// cannot wait for each other forever. Idempotent.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::{Ack, SubscriptionOptions};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let sub = broker.subscribe("orders", SubscriptionOptions::default(), |_| Ack::Success)?;
    /// assert_eq!(broker.topic_stats("orders")?.partitions[0].listeners, 1);
    /// sub.close();
    /// assert!(sub.is_closed());
    /// // The topic no longer has it among its listeners, nor the broker among its subscriptions.
    /// assert_eq!(broker.topic_stats("orders")?.partitions[0].listeners, 0);
    /// assert!(broker.subscriptions().is_empty());
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn close(&self) {
        close::close(&self.core);
        // Its close rang an armed idle hook; none rings after this, and the
        // hook (with what it owns) is dropped now.
        self.core.idle.take_bell();
    }

    /// Hangs `hook` on the subscription's idle bell, replacing any earlier
    /// one: for a caller that waits for idleness outside `wait_idle` (an
    /// event loop). After a `wait_idle` that returned `false` (a zero
    /// timeout will do), `hook` is called once at the first change that
    /// may have made it idle (its delivery going idle or into a backoff,
    /// its close); call `wait_idle` with a zero timeout again to know. A
    /// `wait_idle` that finds it idle disarms it. The hook may be called
    /// when it is still not idle (look again, and wait again); it is never
    /// missed. It runs on the delivering thread (or the closing one): keep
    /// it short, non-blocking, and out of this subscription. [`close`]
    /// (and dropping) rings an armed hook, then drops it.
    ///
    /// [`close`]: Subscription::close
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::mpsc;
    /// use std::time::Duration;
    /// use rill::{Ack, Record, SubscriptionOptions};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let (release, held) = mpsc::channel::<()>();
    /// let sub = broker.subscribe("orders", SubscriptionOptions::default(), move |_| {
    ///     held.recv().expect("released"); // the handler holds delivery until released
    ///     Ack::Success
    /// })?;
    /// let (ring, rung) = mpsc::channel();
    /// sub.set_idle_hook(move || {
    ///     let _ = ring.send(()); // an event loop would write an eventfd here
    /// });
    /// broker.publish("orders", &Record::new(b"o-1"))?;
    /// assert!(!sub.wait_idle(Duration::ZERO)?); // not idle: the bell is armed
    /// release.send(()).expect("the handler waits");
    /// rung.recv_timeout(Duration::from_secs(5)).expect("the hook rang");
    /// assert!(sub.wait_idle(Duration::from_secs(5))?);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn set_idle_hook(&self, hook: impl Fn() + Send + Sync + 'static) {
        self.core.idle.set_bell(Box::new(hook));
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.close();
    }
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription").field("name", &self.core.name).field("pattern", &self.core.pattern).finish()
    }
}
