//! A subscription's data: the shared core that publishers, the drainer,
//! the timer and the handle all hold, and the drain state only the drainer
//! touches. How it is woken is in `signal.rs`, how it runs in `drain.rs`,
//! how messages are settled in `settle.rs` and how it ends in `close.rs`.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use super::options::{
    Ack, BatchHandler, DEFAULT_MAX_ATTEMPTS, DeadLetterCallback, DeliveryMode, Handler, LagCallback, Overflow,
    RetryBackoff, SubscriptionOptions,
};
use super::queue_wait::QueueWaits;
use crate::broker::dispatch::{DEFAULT_PRIORITY, Job, PRIORITIES, Timer, Waited, WorkerPool};
use crate::broker::filter::Filter;
use crate::broker::names::Pattern;
use crate::broker::partition::in_handler::InHandler;
use crate::broker::partition::signal::{self, Entry, Listener, Mark, ReadySet};
use crate::broker::partition::state::State;
use crate::broker::partition::{Blocker, Partition};
use crate::broker::topic::Topic;
use crate::broker::waiters::Waiters;
use crate::error::{Error, Result};
use crate::log::Cursor;
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::thread::{JoinHandle, Thread};
use crate::sync::{Arc, Mutex, Name, dyn_arc};

/// Most records read from a cursor in one batch.
pub(super) const BATCH: usize = 64;

/// The broker's hook run when a subscription closes.
pub(crate) type CloseHook = Box<dyn Fn(&SubCore) + Send + Sync>;

/// The broker's hook run when a shared member has let go of a partition it
/// was asked to give up: (member, partition, offset to resume from).
pub(crate) type ReleaseHook = Box<dyn Fn(&SubCore, u32, u64) + Send + Sync>;

/// The broker's hook run when a handler call of this subscription has
/// overrun its `ack_timeout`: (member, the call's number, `report`). It
/// hands a shared member's partitions to the other members if it may, and
/// returns what it did, having called `report` with that before it moved
/// anything (see "Reported before it shows" in `deadline.rs`).
pub(crate) type StallHook = Box<dyn Fn(&Arc<SubCore>, u64, &dyn Fn(Stall)) -> Stall + Send + Sync>;

/// What the broker did about a stalled call (`SubEnv::on_stall`); its reasons are in `deadline.rs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stall {
    /// The member's partitions went to other members; the call's ack is void.
    Moved,
    /// No other member can take them over (none, or all stalled).
    Alone,
    /// The call's message was itself delivered again after a stall: it
    /// comes again once, so it stays; the call's ack counts.
    CameAgain,
    /// The call returned before the broker could claim it.
    Returned,
}

/// A timer job: look at a subscription's handler call in flight against
/// its `ack_timeout` (see `deadline.rs`).
pub(crate) struct AckWatch(pub(super) Arc<SubCore>);

impl Job for AckWatch {
    fn run(self) {
        SubCore::check_ack_deadline(&self.0);
    }
}

/// One of the two kinds of handler.
pub(crate) enum HandlerKind {
    One(Handler),
    Many(BatchHandler),
}

/// A pool job: one drain of a subscription (its state is `ACTIVE`).
pub(crate) struct DrainJob(pub(super) Arc<SubCore>);

impl Job for DrainJob {
    fn run(self) {
        SubCore::run(self.0);
    }

    fn priority(&self) -> u8 {
        self.0.priority
    }

    fn waited(&self, waited: Waited) {
        self.0.queue_waits.record(waited.time, waited.takes);
    }
}

/// A timer job: a subscription's retry backoff is over.
pub(crate) struct BackoffOver(pub(super) Arc<SubCore>);

impl Job for BackoffOver {
    fn run(self) {
        SubCore::wake_from_backoff(&self.0);
    }
}

/// Where a subscription's drains run.
pub(crate) enum Exec {
    Pool(Arc<WorkerPool<DrainJob>>),
    /// The dedicated thread, known once it has been spawned.
    Dedicated(Mutex<Option<Thread>>),
}

/// Makes (or finds) a subscription's dead-letter topic when first needed.
pub(crate) type MakeTopic = Box<dyn Fn() -> Result<Arc<Topic>> + Send + Sync>;

/// Where a subscription's dead letters go: a topic known at subscribe, or
/// one made when the first message is dead-lettered (an anonymous
/// subscription's own `$dlq/anon-N`, which the broker deletes with the
/// subscription if it stayed empty).
pub(crate) enum DeadLetters {
    Known(Arc<Topic>),
    Lazy { name: String, make: MakeTopic, made: Mutex<Option<Arc<Topic>>> },
}

impl DeadLetters {
    /// Dead letters go to topic `name`, which `make` returns, called on
    /// first use.
    pub(crate) fn lazy(name: String, make: MakeTopic) -> DeadLetters {
        DeadLetters::Lazy { name, make, made: Mutex::new(None) }
    }

    /// The topic's name.
    pub(crate) fn name(&self) -> String {
        match self {
            DeadLetters::Known(t) => t.name.to_string(),
            DeadLetters::Lazy { name, .. } => name.clone(),
        }
    }

    /// The topic, made now if it is the first dead letter (only the drainer
    /// calls this, so the lock is uncontended). A known topic that was
    /// deleted is `NoSuchTopic`; a lazily made one is made again.
    pub(super) fn topic(&self) -> Result<Arc<Topic>> {
        match self {
            DeadLetters::Known(t) if t.is_deleted() => Err(t.deleted_error()),
            DeadLetters::Known(t) => Ok(t.clone()),
            DeadLetters::Lazy { make, made, .. } => {
                let mut made = made.lock();
                if let Some(t) = &*made
                    && !t.is_deleted()
                {
                    return Ok(t.clone());
                }
                let t = make()?;
                *made = Some(t.clone());
                Ok(t)
            }
        }
    }

    /// The topic if it was made lazily (and so belongs to the subscription).
    pub(crate) fn made_lazily(&self) -> Option<Arc<Topic>> {
        match self {
            DeadLetters::Known(_) => None,
            DeadLetters::Lazy { made, .. } => made.lock().clone(),
        }
    }
}

/// What a subscription needs from the broker around it.
pub(crate) struct SubEnv {
    pub(crate) exec: Exec,
    pub(crate) timer: Option<Arc<Timer<BackoffOver>>>,
    pub(crate) dead_letters: Option<DeadLetters>,
    /// Called once when the subscription closes (after its last handler call).
    pub(crate) on_close: Option<CloseHook>,
    /// For shared members: hands a given-up partition to its new owner.
    pub(crate) on_release: Option<ReleaseHook>,
    /// Called at the end of every drain round that did not close it, after
    /// the round's positions are published: a durable subscription's acks
    /// are made durable here under `Fsync::Always` (see `broker/core.rs`).
    pub(crate) on_round_end: Option<CloseHook>,
    /// With an `ack_timeout`: the timer that checks handler calls against it.
    pub(crate) ack_watch: Option<Arc<Timer<AckWatch>>>,
    /// With an `ack_timeout`, for shared members: gives the partitions of a
    /// stalled member to the others.
    pub(crate) on_stall: Option<StallHook>,
}

/// Counters, written by the drainer once per batch, read by `stats`.
#[derive(Default)]
pub(super) struct Counters {
    pub(super) delivered: AtomicU64,
    pub(super) acked: AtomicU64,
    pub(super) filtered: AtomicU64,
    pub(super) retried: AtomicU64,
    pub(super) dead_lettered: AtomicU64,
    pub(super) dropped: AtomicU64,
    pub(super) missed: AtomicU64,
    /// Written by the ack-deadline watch (the timer thread), not the drainer.
    pub(super) ack_timeouts: AtomicU64,
}

/// Local tallies of one batch, added to `Counters` in one go.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) delivered: u64,
    pub(super) acked: u64,
    pub(super) filtered: u64,
    pub(super) retried: u64,
    pub(super) dead_lettered: u64,
    pub(super) dropped: u64,
    pub(super) missed: u64,
}

impl Counters {
    pub(super) fn add(&self, t: &Tally) {
        let add = |c: &AtomicU64, n: u64| {
            if n > 0 {
                // Relaxed load + store: the drainer is the only writer, so no
                // read-modify-write is needed; readers only want a snapshot.
                c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
            }
        };
        add(&self.delivered, t.delivered);
        add(&self.acked, t.acked);
        add(&self.filtered, t.filtered);
        add(&self.retried, t.retried);
        add(&self.dead_lettered, t.dead_lettered);
        add(&self.dropped, t.dropped);
        add(&self.missed, t.missed);
    }
}

/// One partition a subscription reads.
pub(crate) struct Reader {
    pub(crate) topic: Name,
    pub(crate) partition: Arc<Partition>,
    pub(crate) cursor: Cursor,
    /// The cursor's offset as of the last batch, for stats and lag checks by
    /// other threads.
    pub(crate) position: Arc<AtomicU64>,
    /// Its ready mark, if the subscription tracks ready partitions.
    pub(super) mark: Option<Arc<Mark>>,
    /// For a pending reader: the index of the freed slot (see "Reusing the
    /// slots of deleted topics" at [`SubCore::apply_detached`]) it takes
    /// when merged; `None` to go at the end.
    pub(super) slot: Option<usize>,
    /// It reads a placeholder: its topic was deleted.
    pub(super) detached: bool,
}

impl Reader {
    pub(crate) fn new(topic: Name, partition: Arc<Partition>, cursor: Cursor) -> Reader {
        let position = Arc::new(AtomicU64::new(cursor.offset()));
        Reader { topic, partition, cursor, position, mark: None, slot: None, detached: false }
    }

    pub(super) fn publish_position(&self) {
        // Release: pairs with the Acquire in `Blocker::position`; for stats
        // readers it is only a snapshot.
        self.position.store(self.cursor.offset(), Ordering::Release);
    }
}

/// A partition a subscription reads and its published position: (topic,
/// partition, position).
pub(super) type Tracked = (Name, Arc<Partition>, Arc<AtomicU64>);

/// A message waiting to be delivered again.
pub(super) struct Retry {
    pub(super) reader: usize,
    pub(super) offset: u64,
    /// The attempt number of the next delivery.
    pub(super) attempt: u32,
    pub(super) reason: Option<String>,
}

/// The handler call in flight, for the ack deadline (see `deadline.rs`).
/// Locked by the drainer at the start and end of each handler call (only
/// with an `ack_timeout`), and by the watch once per check.
#[derive(Default)]
pub(crate) struct Call {
    /// When the call in flight started (`clock::now_ns`); `None` between calls.
    pub(super) since: Option<u64>,
    /// Numbers the calls, so a late look at a call cannot act on a later one.
    pub(super) seq: u64,
    /// The partition the call delivers from, and the offset its reader
    /// resumes at if the call's ack never counts (its first message, or the
    /// one after it at most once).
    pub(super) partition: u32,
    pub(super) resume: u64,
    /// The call was found overdue and reported (counted once per call).
    pub(super) reported: bool,
    /// The call's partitions were handed to other members: its ack is void.
    pub(super) timed_out: bool,
    /// From the hand-over until the drainer has let go of its readers: the
    /// member must get no partitions (rebalances leave it out).
    pub(super) stalled: bool,
    /// A watch job is on the timer.
    pub(super) armed: bool,
}

/// Everything only the drainer touches.
pub(super) struct DrainState {
    /// The user's handler; replaced by a no-op when the subscription is
    /// finalized, so user code is dropped at a known point with no lock held.
    pub(super) handler: HandlerKind,
    /// Reason cells and acks for batch handlers, reused between batches.
    pub(super) reasons: Vec<RefCell<Option<String>>>,
    pub(super) acks: Vec<Ack>,
    pub(super) on_lagged: Option<LagCallback>,
    pub(super) readers: Vec<Reader>,
    /// Reader to start the next round at, for fairness between partitions.
    pub(super) next: usize,
    pub(super) retry: Option<Retry>,
    pub(super) reason: RefCell<Option<String>>,
    /// Most records per batch: `BATCH`, or fewer on the pool while handler
    /// calls are slow (see `drain.rs`).
    pub(super) batch_cap: usize,
    /// With a ready set: readers that may still have messages although no
    /// publisher listed them (new ones, and those a round ended before
    /// finishing). Reused buffers for the round's visiting order.
    pub(super) carry: Vec<usize>,
    pub(super) visit: Vec<usize>,
    pub(super) visiting: Vec<bool>,
    /// Partitions this shared member was asked to give up and still reads
    /// (one waiting for a retry is given up once the retry is settled).
    pub(super) revoking: Vec<u32>,
    /// On the pool: whether this drain lingers before going idle, and when
    /// the subscription last went idle (clock ns; 0: not since the last
    /// drain began). See `LINGER_AGAIN_NS` in `drain.rs`; the linger is
    /// not built under loom.
    #[cfg(not(loom))]
    pub(super) linger: bool,
    #[cfg(not(loom))]
    pub(super) idle_since: u64,
    /// On the pool: whether a linger waits for a run of records (see
    /// `run_wait.rs`).
    #[cfg(not(loom))]
    pub(super) run_wait: super::run_wait::RunWait,
}

/// A subscription's shared core.
pub(crate) struct SubCore {
    pub(crate) id: u64,
    pub(crate) name: String,
    pub(crate) durable: bool,
    pub(crate) pattern: Pattern,
    pub(super) filter: Option<Filter>,
    pub(super) delivery: DeliveryMode,
    pub(super) max_attempts: u32,
    pub(super) backoff: RetryBackoff,
    pub(crate) overflow: Overflow,
    pub(crate) lag_limit: Option<u64>,
    pub(super) idle_spin: Option<Duration>,
    /// The signal-and-drain state, read by publishers: on its own cache line,
    /// which the partitions' listener entries point at directly.
    pub(super) state: Arc<State>,
    pub(super) drain: Mutex<DrainState>,
    /// Readers for topics created after subscribing, merged by the drainer.
    pub(super) pending: Mutex<Vec<Reader>>,
    /// Partitions of deleted topics its readers must let go of, each with
    /// the empty partition to read instead (see `detach_topic`); taken by
    /// the drainer, which is told through `has_pending`.
    pub(super) detached: Mutex<Vec<(Arc<Partition>, Arc<Partition>)>>,
    /// Reader slots of deleted topics, with their ready marks, for the next
    /// attaches to take (see [`SubCore::apply_detached`]); pushed by the
    /// drainer, popped under the `pending` lock.
    pub(super) free_slots: Mutex<Vec<(usize, Option<Arc<Mark>>)>>,
    pub(super) has_pending: AtomicBool,
    /// Partitions a rebalance took from this shared member, for the drainer
    /// to give up at its next round (also flagged by `has_pending`).
    pub(super) revoked: Mutex<Vec<u32>>,
    /// `ack_timeout` in nanoseconds (see `deadline.rs`).
    pub(super) ack_timeout_ns: Option<u64>,
    /// With an `ack_timeout`: the handler call in flight, shared by the
    /// drainer and the watch (see `deadline.rs`).
    pub(super) call: Mutex<Call>,
    /// A shared (competing) member (see `broker/shared.rs`).
    pub(crate) shared: bool,
    /// For wildcard patterns: the partitions publishers have written to, so
    /// a wake-up costs the drainer what changed, not every partition.
    pub(super) ready: Option<Arc<ReadySet>>,
    /// Positions of all readers (including pending ones), for stats.
    pub(super) positions: Mutex<Vec<Tracked>>,
    pub(super) counters: Counters,
    pub(super) env: SubEnv,
    /// Where `wait_idle` callers wait; notified when a drain goes idle.
    pub(super) idle: Waiters,
    pub(super) closed_reason: Mutex<Option<String>>,
    /// The last delivery problem worth reporting (e.g. a failed dead-letter).
    pub(super) last_error: Mutex<Option<String>>,
    /// The `on_dead_letter` callback; taken (and dropped) at the wind-up
    /// with the handler. Locked only when a message is dead-lettered.
    pub(super) on_dead_letter: Mutex<Option<DeadLetterCallback>>,
    /// Set when the wind-up (`finalize`) starts.
    pub(super) finalized: AtomicBool,
    /// Set when the wind-up has completed (handler dropped, `env.on_close`
    /// run); an external `close` waits for it on `idle`.
    pub(super) wound_up: AtomicBool,
    /// The dedicated thread's handle: joined by an external `close` after the
    /// wind-up; otherwise detached when the core is dropped.
    pub(super) join: Mutex<Option<JoinHandle<()>>>,
    /// Its lane in the worker pool's queue (`dispatch.rs`): the option, or
    /// the topic's default, or `DEFAULT_PRIORITY`. Unused on a dedicated thread.
    pub(crate) priority: u8,
    /// How long its drains waited in the pool's queue, since the last stats.
    pub(super) queue_waits: QueueWaits,
}

/// A subscription as a partition's listener: what a publisher calls when
/// it wins `IDLE -> ACTIVE` (see `signal.rs`).
struct SubListener(Arc<SubCore>);

impl Listener for SubListener {
    fn wake(&self) {
        SubCore::schedule(&self.0);
    }

    fn batch_key(&self) -> Option<usize> {
        match &self.0.env.exec {
            Exec::Pool(pool) => Some(Arc::as_ptr(pool) as usize),
            Exec::Dedicated(_) => None,
        }
    }

    fn wake_batch(&self, batch: &[Option<&dyn Listener>]) {
        let Exec::Pool(pool) = &self.0.env.exec else {
            return self.wake();
        };
        // Every listener in the batch has this one's key: a subscription
        // on this pool.
        let cores = batch.iter().flatten().filter_map(|l| l.as_any().downcast_ref::<SubListener>());
        pool.push_many(cores.map(|l| DrainJob(l.0.clone())));
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl SubCore {
    pub(crate) fn new(
        id: u64,
        name: String,
        pattern: Pattern,
        options: &SubscriptionOptions,
        handler: HandlerKind,
        env: SubEnv,
    ) -> Result<SubCore> {
        let filter = options.filter.as_deref().map(Filter::parse).transpose()?;
        let max_attempts = options.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS);
        if max_attempts == 0 {
            return Err(Error::InvalidArgument("max_attempts must be at least 1".into()));
        }
        let b = &options.backoff;
        if !(b.multiplier.is_finite() && b.multiplier >= 1.0) || b.initial > b.max {
            return Err(Error::InvalidArgument(format!(
                "backoff needs initial <= max and a finite multiplier >= 1, got {b:?}"
            )));
        }
        if options.lag_limit == Some(0) {
            return Err(Error::InvalidArgument("lag_limit must be at least 1".into()));
        }
        if options.overflow == Overflow::Block && options.lag_limit.is_none() {
            return Err(Error::InvalidArgument("the Block overflow policy needs a lag_limit".into()));
        }
        let ack_timeout_ns = match options.ack_timeout {
            Some(t) if t.is_zero() => {
                return Err(Error::InvalidArgument(
                    "ack_timeout must be positive (None, or 0 from C, means no deadline)".into(),
                ));
            }
            Some(t) => Some(u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)),
            None => None,
        };
        let priority = options.priority.unwrap_or(DEFAULT_PRIORITY);
        if priority >= PRIORITIES {
            return Err(Error::InvalidArgument(format!(
                "priority must be 0 to {} (higher runs first), got {priority}",
                PRIORITIES - 1
            )));
        }
        let pattern_is_literal = pattern.is_literal();
        Ok(SubCore {
            id,
            durable: options.name.is_some(),
            name,
            pattern,
            filter,
            delivery: options.delivery,
            max_attempts,
            backoff: options.backoff,
            overflow: options.overflow,
            lag_limit: options.lag_limit,
            idle_spin: options.idle_spin,
            state: Arc::new(State::new()),
            drain: Mutex::new(DrainState {
                handler,
                reasons: Vec::new(),
                acks: Vec::new(),
                on_lagged: options.on_lagged.clone(),
                readers: Vec::new(),
                next: 0,
                retry: None,
                reason: RefCell::new(None),
                // On the pool the first batch is one message: its timing sizes
                // the next, so even a very slow handler's first turn is short.
                batch_cap: if matches!(env.exec, Exec::Pool(_)) { 1 } else { BATCH },
                carry: Vec::new(),
                visit: Vec::new(),
                visiting: Vec::new(),
                revoking: Vec::new(),
                #[cfg(not(loom))]
                linger: true,
                #[cfg(not(loom))]
                idle_since: 0,
                #[cfg(not(loom))]
                run_wait: super::run_wait::RunWait::new(options.lag_limit),
            }),
            pending: Mutex::new(Vec::new()),
            detached: Mutex::new(Vec::new()),
            free_slots: Mutex::new(Vec::new()),
            has_pending: AtomicBool::new(false),
            revoked: Mutex::new(Vec::new()),
            ack_timeout_ns,
            call: Mutex::new(Call::default()),
            shared: options.shared,
            ready: (!pattern_is_literal).then(|| Arc::new(ReadySet::new())),
            positions: Mutex::new(Vec::new()),
            counters: Counters::default(),
            env,
            idle: Waiters::new(),
            closed_reason: Mutex::new(None),
            last_error: Mutex::new(None),
            on_dead_letter: Mutex::new(options.on_dead_letter.clone()),
            finalized: AtomicBool::new(false),
            wound_up: AtomicBool::new(false),
            join: Mutex::new(None),
            priority,
            queue_waits: QueueWaits::new(),
        })
    }

    /// Hands the subscription a partition to read; returns the reader's
    /// ready mark if the subscription keeps a ready set. Called with the
    /// `positions` lock held (`tracked`), which orders attaching against
    /// `close_inner` (see [`SubCore::attach_to`]).
    fn attach(&self, tracked: &mut Vec<Tracked>, mut reader: Reader) -> Option<Arc<Mark>> {
        tracked.push((reader.topic.clone(), reader.partition.clone(), reader.position.clone()));
        let mut pending = self.pending.lock();
        // A deleted topic's slot first, with its mark (whose index is the
        // slot's); else a new slot at the end, with the next mark, taken
        // under this lock so that marks and appended readers stay in step.
        let mark = match self.free_slots.lock().pop() {
            Some((slot, mark)) => {
                reader.slot = Some(slot);
                mark
            }
            None => self.ready.as_deref().map(ReadySet::next_mark),
        };
        reader.mark = mark.clone();
        pending.push(reader);
        drop(pending);
        // Release: pairs with the Acquire in `merge_pending`.
        self.has_pending.store(true, Ordering::Release);
        mark
    }

    /// Starts reading `partition` of `topic` at `cursor`: hands the reader to
    /// the drainer, then makes the subscription a listener of the partition
    /// (and, with the `Block` policy, a blocker of its publishers), then
    /// lists the reader in its ready set, if it keeps one, for what was
    /// published before the listener was added. The caller must
    /// [`SubCore::poke`] the subscription afterwards (once for several
    /// attaches): see "Attaching a partition" in `signal.rs`.
    ///
    /// # Attaching while the subscription closes
    ///
    /// The broker attaches a subscription it found under its control lock
    /// (a topic created for its pattern, a shared partition handed over),
    /// and the subscription may be closing meanwhile: `close_inner` stores
    /// `CLOSED`, then removes its listener from every tracked partition,
    /// and only its wind-up (later) takes it out of the broker's pattern
    /// index. A listener added after that removal would never be removed:
    /// the partition would hold the closed subscription, which holds its
    /// readers' partitions, for good (a cycle that outlives the broker), and
    /// each such attach leaked a subscription. So both sides hold the
    /// `positions` lock: the closer across its removals, the attacher from
    /// tracking the partition to adding the listener, which it adds only if
    /// the state is not `CLOSED`. If the attacher goes first, the closer
    /// finds the partition tracked and removes the listener; if the closer
    /// goes first, its `CLOSED` (stored before it took the lock) is seen
    /// and no listener is added. The partition stays tracked either way, so
    /// a closed shared member's close still hands it over.
    pub(crate) fn attach_to(this: &Arc<SubCore>, topic: Name, partition: &Arc<Partition>, cursor: Cursor) {
        SubCore::attach_to_with_gap(this, topic, partition, cursor, || {});
    }

    /// [`SubCore::attach_to`], running `gap` after the reader is handed to
    /// the drainer and before the listener is added: a test holds the
    /// window open there.
    fn attach_to_with_gap(
        this: &Arc<SubCore>,
        topic: Name,
        partition: &Arc<Partition>,
        cursor: Cursor,
        gap: impl FnOnce(),
    ) {
        let reader = Reader::new(topic, partition.clone(), cursor);
        let blocker = match (this.overflow, this.lag_limit) {
            (Overflow::Block, Some(limit)) => Some(Blocker { id: this.id, position: reader.position.clone(), limit }),
            _ => None,
        };
        let mut tracked = this.positions.lock();
        let mark = this.attach(&mut tracked, reader);
        gap();
        if this.state.is_closed() {
            return;
        }
        let ready = this.ready.clone().zip(mark);
        let listener = dyn_arc!(SubListener(this.clone()) => dyn Listener);
        partition.add_listener(Entry::subscription(this.id, this.state.clone(), ready.clone(), listener), blocker);
        drop(tracked);
        // What was published before the listener was added signalled no one:
        // list the reader as a publisher would (see "Attaching a partition"
        // in `signal.rs`); the caller's `poke` does the rest.
        if let Some((set, mark)) = &ready {
            set.relist(mark);
        }
    }

    /// Stops reading the partitions of `topic`, which is being deleted: they
    /// stop signalling it (and stop holding retention or publishers back),
    /// they leave its stats (and a durable subscription's saved positions),
    /// and the drainer swaps each of its readers there for a reader of
    /// `placeholder`, an empty partition nobody publishes to, at its next
    /// round (the subscription is poked to run one) or at its wind-up. So
    /// the deleted topic's memory is not held by the subscription, and no
    /// reader index moves (ready marks and retries name readers by index).
    /// Messages of a batch already being handled are still handled.
    pub(crate) fn detach_topic(this: &Arc<SubCore>, topic: &Topic, placeholder: &Arc<Partition>) {
        let gone = |p: &Arc<Partition>| topic.partitions.iter().any(|q| Arc::ptr_eq(p, q));
        this.positions.lock().retain(|(_, p, _)| !gone(p));
        for p in topic.partitions.iter() {
            p.remove_listener(this.id);
        }
        this.detached.lock().extend(topic.partitions.iter().map(|p| (p.clone(), placeholder.clone())));
        // Release: pairs with the Acquire in `merge_pending`, which then
        // takes `detached`.
        this.has_pending.store(true, Ordering::Release);
        SubCore::poke(this);
    }

    /// Asks this shared member to give up `partition`: its drainer lets go of
    /// it at the start of its next round (at a batch boundary, so everything
    /// before its position is settled) and calls `env.on_release`. Called
    /// under the broker's control mutex.
    pub(crate) fn revoke(this: &Arc<SubCore>, partition: u32) {
        this.revoked.lock().push(partition);
        // Release: pairs with the Acquire in `merge_pending`.
        this.has_pending.store(true, Ordering::Release);
        SubCore::poke(this);
    }

    /// The drainer's half of [`SubCore::detach_topic`]: swaps every reader
    /// (merged or pending) of a detached partition for a reader at the end
    /// of its placeholder, and drops a retry of a message there.
    ///
    /// # Reusing the slots of deleted topics
    ///
    /// A reader's index names it to its ready mark and to a retry, so a
    /// detached reader stays in its slot (reading the placeholder) instead
    /// of being removed. Left there for good, every topic deleted under a
    /// wildcard subscription would cost it a slot, and topics created and
    /// deleted without end would grow it without end. So a merged reader
    /// swapped here frees its slot: `free_slots` gets its index and its mark,
    /// and the next attach takes them (`attach`), and `merge_pending` puts
    /// the new reader in that slot. Nothing still names the slot then: the
    /// retry there was dropped here, and a mark left set or an index left
    /// in the carry only makes the drainer look at the new reader once more.
    /// A shared member frees nothing: giving up a partition (`release_revoked`)
    /// removes its reader and moves the indices after it.
    pub(super) fn apply_detached(&self, st: &mut DrainState) {
        let gone = std::mem::take(&mut *self.detached.lock());
        if gone.is_empty() {
            return;
        }
        let swap = |r: &mut Reader| match gone.iter().find(|(p, _)| Arc::ptr_eq(p, &r.partition)) {
            Some((_, placeholder)) => {
                r.cursor = placeholder.log.cursor_from_end();
                r.partition = placeholder.clone();
                r.detached = true;
                true
            }
            None => false,
        };
        let mut freed = Vec::new();
        for (i, r) in st.readers.iter_mut().enumerate() {
            if swap(r) {
                if st.retry.as_ref().is_some_and(|retry| retry.reader == i) {
                    st.retry = None;
                }
                freed.push((i, r.mark.clone()));
            }
        }
        // A pending reader swapped here is freed when it is merged.
        for r in self.pending.lock().iter_mut() {
            swap(r);
        }
        self.free_reader_slots(freed);
    }

    /// Gives the slots of detached readers to the next attaches (see
    /// "Reusing the slots of deleted topics" above); not for a shared member.
    pub(super) fn free_reader_slots(&self, freed: Vec<(usize, Option<Arc<Mark>>)>) {
        if !self.shared && !freed.is_empty() {
            self.free_slots.lock().extend(freed);
        }
    }

    /// For the dedicated executor: records the thread to unpark.
    pub(crate) fn set_thread(&self, t: Thread) {
        if let Exec::Dedicated(slot) = &self.env.exec {
            *slot.lock() = Some(t);
        }
    }

    /// For the dedicated executor: keeps the thread's handle, to join it when
    /// the subscription is closed (see `close.rs`).
    pub(crate) fn set_join_handle(&self, handle: JoinHandle<()>) {
        self.set_thread(handle.thread().clone());
        *self.join.lock() = Some(handle);
    }

    /// Its dead-letter topic if the subscription made it (see [`DeadLetters`]).
    pub(crate) fn own_dead_letter_topic(&self) -> Option<Arc<Topic>> {
        self.env.dead_letters.as_ref().and_then(DeadLetters::made_lazily)
    }

    /// Joins the dedicated thread, if it has not been joined and is not the
    /// calling thread (which is then detached: its handle is dropped).
    pub(crate) fn join_thread(&self) {
        let Some(handle) = self.join.lock().take() else { return };
        if handle.thread().id() != crate::sync::thread::current().id() {
            // The thread only returns from its loop; a panic there was
            // already caught around user code.
            let _ = handle.join();
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.state.is_closed()
    }

    /// Queues a drain. Call only after winning a move to `ACTIVE`.
    pub(super) fn schedule(this: &Arc<SubCore>) {
        match &this.env.exec {
            Exec::Pool(pool) => pool.push(DrainJob(this.clone())),
            Exec::Dedicated(t) => {
                if let Some(t) = &*t.lock() {
                    t.unpark();
                }
            }
        }
    }

    /// True if a subscription of higher priority waits for a pool worker.
    pub(super) fn outranked(&self) -> bool {
        match &self.env.exec {
            Exec::Pool(pool) => pool.outranked(self.priority),
            Exec::Dedicated(_) => false,
        }
    }

    /// True if other subscriptions wait for a pool worker.
    pub(super) fn others_waiting(&self) -> bool {
        match &self.env.exec {
            Exec::Pool(pool) => pool.has_waiting(),
            Exec::Dedicated(_) => false,
        }
    }

    /// Wakes the subscription so it looks at its partitions again (used after
    /// attaching a partition).
    pub(crate) fn poke(this: &Arc<SubCore>) {
        signal::poke_fence();
        if this.state.activate() {
            SubCore::schedule(this);
        }
    }

    /// The timer's transition: `BACKOFF -> ACTIVE`.
    pub(super) fn wake_from_backoff(this: &Arc<SubCore>) {
        if this.state.wake_from_backoff() {
            SubCore::schedule(this);
        }
    }

    pub(super) fn set_last_error(&self, error: String) {
        *self.last_error.lock() = Some(error);
    }

    /// Runs the `on_round_end` hook, if any.
    pub(super) fn round_ended(&self) {
        if let Some(hook) = &self.env.on_round_end {
            hook(self);
        }
    }

    pub(super) fn notify_idle(&self) {
        self.idle.notify();
    }

    /// True when nothing is in flight and every partition is read to its end.
    fn is_caught_up(&self) -> bool {
        if self.state.get() != crate::broker::partition::state::Phase::Idle {
            return false;
        }
        // Acquire: pairs with the Release in `attach`.
        if self.has_pending.load(Ordering::Acquire) {
            return false;
        }
        self.positions.lock().iter().all(|(_, p, pos)| {
            // Relaxed: published by the drainer before its IDLE store, which the
            // Acquire state load above synchronised with.
            pos.load(Ordering::Relaxed) >= p.log.end_offset()
        })
    }

    /// Waits until the subscription is caught up (true) or `timeout` passes (false).
    /// Fails at once from its own handler, which it would wait for.
    pub(crate) fn wait_idle(&self, timeout: Duration) -> Result<bool> {
        if InHandler::current() == self.id {
            return Err(Error::InvalidArgument(format!(
                "wait_idle on subscription {:?} from its own handler would wait for that handler call \
                 itself: wait from another thread, or return from the handler",
                self.name
            )));
        }
        // Before every look below, so a change they miss rings an idle hook
        // ("The bell" in `waiters.rs`); a look that finds it idle disarms.
        let bell = self.idle.arm_if_hooked();
        // A timeout too long to add to now (`Duration::MAX`) means no limit.
        let deadline = Instant::now().checked_add(timeout);
        let caught_up = self.idle.wait_until(deadline, || self.is_closed() || self.is_caught_up());
        if self.is_closed() {
            return Err(Error::Closed(format!("subscription {:?} is closed", self.name)));
        }
        if caught_up && bell {
            self.idle.disarm();
        }
        Ok(caught_up)
    }

    /// The committed position of every partition read so far.
    pub(crate) fn positions(&self) -> Vec<(Name, u32, u64)> {
        self.positions
            .lock()
            .iter()
            // Relaxed: see `is_caught_up`; callers take it after close.
            .map(|(t, p, pos)| (t.clone(), p.index, pos.load(Ordering::Relaxed)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::SubCore;
    use crate::broker::partition::state::Phase;
    use crate::broker::topic::Wait;
    use crate::broker::{Ack, Broker, BrokerConfig, SubscriptionOptions, TopicOptions};
    use crate::log::Record;
    use crate::sync::atomic::Ordering;

    /// Polls `done` until it holds; panics after a deadline far beyond any
    /// wait this test expects.
    fn wait_until(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting until {what}");
            std::thread::yield_now();
        }
    }

    /// Issue 40: a record published to a brand-new partition after the
    /// drainer's first look at its reader, and before the subscription
    /// listened to it, signalled nobody; the poke after the attach ran a
    /// round that visited only listed and carried readers, not this one.
    /// The record stayed unread until the partition's next publish. Here the
    /// window is held open by `attach_to_with_gap`: inside it a drain runs
    /// (as one does when other topics are busy), merges and visits the new
    /// reader, goes idle, and then a record is published.
    #[test]
    fn a_record_published_while_a_wildcard_subscription_attaches_is_delivered() {
        published_while_attaching("new/**");
    }

    /// The same window with a literal subscription, which keeps no ready
    /// set: its rounds read every cursor, so the poke alone finds the record.
    #[test]
    fn a_record_published_while_a_literal_subscription_attaches_is_delivered() {
        published_while_attaching("new/a");
    }

    fn published_while_attaching(pattern: &str) {
        let b = Broker::new(BrokerConfig { worker_threads: Some(1), ..BrokerConfig::default() }).unwrap();
        // A literal pattern needs its topic.
        b.create_topic("new/a", &TopicOptions::default()).unwrap();
        let sub = b.subscribe(pattern, SubscriptionOptions::default(), |_| Ack::Success).unwrap();
        // A topic outside the pattern stands for the brand-new one: the
        // attach below is the one `create_topic` makes for a match.
        b.create_topic("other/a", &TopicOptions::default()).unwrap();
        let topic = b.inner().topic("other/a").unwrap();
        let p = &topic.partitions[0];
        let core = &sub.core;
        SubCore::attach_to_with_gap(core, topic.name.clone(), p, p.log.cursor_from_first(), || {
            SubCore::poke(core);
            // Acquire: pairs with the drainer's merge having cleared it.
            wait_until("the drainer merged the new reader and went idle", || {
                !core.has_pending.load(Ordering::Acquire) && core.state.get() == Phase::Idle
            });
            p.publish(&Record::new(b"stranded?"), Wait::For(None)).unwrap();
        });
        // What `create_topic` does after attaching.
        SubCore::poke(core);
        assert!(sub.wait_idle(Duration::from_secs(10)).unwrap(), "the record was never delivered");
        assert_eq!(sub.stats().delivered, 1);
    }
}
