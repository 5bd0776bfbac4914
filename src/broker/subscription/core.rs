//! A subscription's data: the shared core that publishers, the drainer,
//! the timer and the handle all hold, and the drain state only the drainer
//! touches. How it is woken is in `partition/signal.rs`, how it runs in `drain.rs`,
//! how messages are settled in `settle.rs` and how it ends in `close.rs`.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use super::options::{
    Ack, BatchHandler, DEFAULT_MAX_ATTEMPTS, DeadLetterCallback, DeliveryMode, Handler, LagCallback, Overflow,
    RetryBackoff, SubscriptionOptions,
};
use super::queue_wait::QueueWaits;
use crate::broker::dispatch::{DEFAULT_PRIORITY, PRIORITIES, Timer, WorkerPool};
use crate::broker::filter::Filter;
use crate::broker::names::Pattern;
use crate::broker::partition::Partition;
use crate::broker::partition::in_handler::InHandler;
use crate::broker::partition::signal::{self, Mark, ReadySet};
use crate::broker::partition::state::State;
use crate::broker::topic::Topic;
use crate::broker::waiters::Waiters;
use crate::error::{Error, Result};
use crate::log::Cursor;
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::thread::{JoinHandle, Thread};
use crate::sync::{Arc, Mutex, Name};

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
/// its `ack_timeout`. Its run is in `deadline.rs`, with what it checks;
/// the type is here because `SubEnv` names the timer that holds it.
pub(crate) struct AckWatch(pub(super) Arc<SubCore>);

/// One of the two kinds of handler.
pub(crate) enum HandlerKind {
    One(Handler),
    Many(BatchHandler),
}

/// A pool job: one drain of a subscription (its state is `ACTIVE`). Its
/// run is in `drain.rs`, with the drain it runs; the type is here because
/// `Exec` names the pool that holds it.
pub(crate) struct DrainJob(pub(super) Arc<SubCore>);

/// A timer job: a subscription's retry backoff is over (its run, in
/// `drain.rs` beside the drain that armed it, moves `BACKOFF -> ACTIVE`).
pub(crate) struct BackoffOver(pub(super) Arc<SubCore>);

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
    /// slots of deleted topics" at `apply_detached` in `attach.rs`) it
    /// takes when merged; `None` to go at the end.
    pub(super) slot: Option<usize>,
    /// It reads a placeholder: its topic was deleted.
    pub(super) detached: bool,
}

impl Reader {
    /// A reader of `partition` from `cursor`. The cursor polls lightly
    /// (`Cursor::poll_lightly`: on a log shared by processes it leaves the
    /// tail word to the publishers while its next record is missing): a
    /// drainer polls in a loop, and once asleep its doorbell looks for it.
    pub(crate) fn new(topic: Name, partition: Arc<Partition>, mut cursor: Cursor) -> Reader {
        cursor.poll_lightly();
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
    /// Which readers this round visits already; all false between rounds
    /// (a round clears what it set), so a round costs what it visits.
    pub(super) visiting: Vec<bool>,
    /// Partitions this shared member was asked to give up and still reads
    /// (one waiting for a retry is given up once the retry is settled).
    pub(super) revoking: Vec<u32>,
    /// On the pool: whether this drain lingers before going idle, and when
    /// the subscription last went idle (clock ns; 0: not since the last
    /// drain began). See `LINGER_AGAIN_NS` in `idle.rs`; the linger is
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
    /// attaches to take (see `apply_detached` in `attach.rs`); pushed by
    /// the drainer, popped under the `pending` lock.
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

    /// True if a subscription of higher priority has ever waited for this
    /// pool's workers (see `WorkerPool::may_be_outranked`).
    pub(super) fn may_be_outranked(&self) -> bool {
        match &self.env.exec {
            Exec::Pool(pool) => pool.may_be_outranked(self.priority),
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

    /// True if some partition has a message (or a lag report) to process.
    pub(super) fn has_work(&self, st: &mut DrainState) -> bool {
        // Acquire: pairs with the Release in `attach`.
        if self.has_pending.load(Ordering::Acquire) {
            return true;
        }
        match &self.ready {
            // After F4 when going idle (see `ReadySet::nonempty`).
            Some(ready) => ready.nonempty() || !st.carry.is_empty(),
            None => st.readers.iter_mut().any(|r| r.cursor.has_next()),
        }
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
