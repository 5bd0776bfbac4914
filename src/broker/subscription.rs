//! Push subscriptions: how a subscription is woken, drained and closed.
//!
//! # Signal-and-drain
//!
//! Each subscription has one state word, read by every publisher to a
//! partition it listens to and written only on transitions:
//!
//! | state     | meaning                                                        |
//! |-----------|----------------------------------------------------------------|
//! | `IDLE`    | no drain is queued or running; the next commit must start one  |
//! | `ACTIVE`  | a drain is queued or running; commits need do nothing          |
//! | `BACKOFF` | the head message waits for a retry; the timer will wake it     |
//! | `CLOSED`  | final                                                          |
//!
//! Transitions:
//!
//! * a **publisher**, after committing a record and a `fence(SeqCst)`, loads
//!   the state; only if it reads `IDLE` does it try `IDLE -> ACTIVE` with a
//!   compare-and-swap, and the one that wins schedules a drain. A busy
//!   subscription costs a publisher one shared load, no write.
//! * the **timer** moves `BACKOFF -> ACTIVE` with a compare-and-swap and
//!   schedules a drain.
//! * the **drainer** delivers in bounded rounds. When a round used its whole
//!   budget it stays `ACTIVE` and queues itself again behind other work. When
//!   it found nothing more to deliver it moves `ACTIVE -> IDLE`, issues a
//!   `fence(SeqCst)`, and *re-checks every partition it reads*: if a record is
//!   now committed, it tries `IDLE -> ACTIVE` and, if that wins, carries on
//!   draining (if it loses, whoever won has scheduled a drain). When the head
//!   message must wait for a retry it moves `ACTIVE -> BACKOFF` and sets a timer.
//! * **close** swaps in `CLOSED` from any state; nothing leaves `CLOSED`.
//!
//! ## The race it survives: the lost wakeup
//!
//! A drainer checks offset `o`, finds it not committed, and is about to go
//! idle. A publisher commits `o` and reads the state. Without fences, the
//! publisher can read the stale `ACTIVE` (and skip signalling) while the
//! drainer's re-check reads the stale "not committed" (and goes idle): `o` then
//! sits undelivered until some later publish. The publisher's
//! `commit; fence(SeqCst); load state` and the drainer's
//! `store IDLE; fence(SeqCst); load slots` close it: SeqCst fences are totally
//! ordered, so if the publisher's fence comes first the drainer's re-check sees
//! the commit, and if the drainer's fence comes first the publisher's load sees
//! `IDLE` (or a later state, in which case a drain that started after that
//! state was written will run the same re-check and see the commit).
//!
//! The fences are what loom needs, too: loom models SeqCst loads and stores as
//! acquire/release, which would let this race through; `fence(SeqCst)` it
//! models exactly. The loom models in `loom-tests/tests/signal.rs` run this
//! code, and fail when either fence is weakened.
//!
//! ## Ready partitions (wildcard subscriptions)
//!
//! A subscription to a pattern may read thousands of partitions, and the
//! protocol above makes every wake-up look at all of them (a drain round
//! visits each reader, the re-check reads each cursor). So a subscription
//! whose pattern has a wildcard keeps a *ready set*: each of its readers has
//! a mark (`listed`, shared with the partition's listener entry), and the
//! subscription a list of listed readers plus a `nonempty` flag.
//!
//! * a **publisher**, after its commit and `fence(SeqCst)` (F1), loads the
//!   mark; if it is clear it swaps it on, and the one that turns it on pushes
//!   the reader's index on the list (under its lock), sets `nonempty`, and
//!   issues a second `fence(SeqCst)` (F2) before loading the state as above.
//!   A listed reader costs later publishers one load.
//! * the **drainer** starts a round by taking the list (clearing `nonempty`
//!   under the lock), clears the marks of the readers it took, issues a
//!   `fence(SeqCst)` (F3), then visits those readers, the reader of a pending
//!   retry, and readers *carried* from the last round (new ones, and those it
//!   had not finished when the round's budget ran out). Going idle, it stores
//!   `IDLE`, fences (F4) and re-checks `nonempty` (and the carry, and new
//!   readers) instead of every cursor.
//!
//! Why no commit is stranded: say publisher P commits record r to a reader's
//! partition. (a) P turns the mark on: its list entry is ordered before F2,
//! so either the drainer's re-check after F4 sees `nonempty` or P's state
//! load after F2 sees `IDLE` and schedules a drain (the F2/F4 argument is the
//! lost-wakeup one above); the drain that takes the entry acquires it
//! through the list lock, after P's commit. (b) P finds the mark on: the mark
//! was turned on by some Q that lists it as in (a), and the drainer's clear
//! of it comes later in its modification order than P's read (else P would
//! have read the clear). If the drainer's F3 preceded P's F1 in the fences'
//! total order, P's read after F1 would see that clear or later, not the
//! earlier on; so F1 precedes F3, and the drainer's cursor reads after F3
//! see P's commit before F1. The visit after F3 delivers r.
//!
//! Subscriptions to a literal topic keep the plain protocol: their handful
//! of partitions is cheaper to scan than to list, and their publishers pay no
//! second fence. Loom models the ready set in `loom-tests/tests/signal.rs`
//! (two publishers on two partitions of one wildcard subscription).
//!
//! ## Exclusivity and closing
//!
//! The drain state (cursors, the handler, the pending retry) sits behind a
//! mutex that the drainer holds for a round. The state machine already
//! ensures there is at most one drainer, so the mutex is uncontended; it
//! exists so that `close` can wait for an in-flight handler call by taking it.
//! A handler that closes its own subscription does not wait (it would wait
//! for itself): the drainer sees `CLOSED` after the handler returns.

use std::cell::RefCell;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use super::dispatch::{Pool, Timer};
use super::filter::Filter;
use super::names::Pattern;
use super::topic::{Blocker, Listener, Partition, Topic, Wait};
use super::waiters::Waiters;
use crate::error::{Error, Result};
use crate::log::{Cursor, Lagged, Record, RecordView};
use crate::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering, fence};
use crate::sync::thread::{self, Thread};
use crate::sync::{Arc, Backoff, Mutex, MutexGuard, Name};

/// No drain queued or running.
const IDLE: u8 = 0;
/// A drain is queued or running.
const ACTIVE: u8 = 1;
/// Waiting for a retry timer.
const BACKOFF: u8 = 2;
/// Closed for good.
const CLOSED: u8 = 3;

/// Most messages one drain round delivers before it yields the worker.
const ROUND_BUDGET: usize = 256;
/// Most records read from a cursor in one batch.
const BATCH: usize = 64;
/// On the pool, a drain round also ends after this long (at the next batch
/// boundary), so a slow handler holds a worker that others wait for for
/// about this long, not for `ROUND_BUDGET` calls.
const ROUND_SLICE_NS: u64 = 1_000_000;
/// What a pool batch aims to take at most: the batch size shrinks to fit
/// it when handlers are slow (down to one message) and grows back when fast.
const BATCH_SLICE_NS: u64 = ROUND_SLICE_NS / 4;

/// What a handler says about a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    /// Done: the subscription moves past the message.
    Success,
    /// Failed: deliver it again after a backoff (or dead-letter it once the
    /// attempts run out).
    Retry,
    /// Failed for good: publish it to the dead-letter topic and move on.
    DeadLetter,
}

/// Where a subscription starts reading each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartPosition {
    /// Only messages published after subscribing.
    #[default]
    Latest,
    /// The oldest retained message.
    Earliest,
    /// This offset in every partition (must be retained).
    Offset(u64),
}

/// When a message counts as handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeliveryMode {
    /// The position moves past a message only after `Success` (or after it
    /// was dead-lettered): a message is delivered at least once.
    #[default]
    AtLeastOnce,
    /// The position moves past a message before the handler runs: a message
    /// is delivered at most once, and failures are not retried.
    AtMostOnce,
}

/// What a subscription does when its lag reaches `lag_limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overflow {
    /// Skip ahead to keep at most `lag_limit` messages behind, counting what
    /// was skipped.
    #[default]
    DropOldest,
    /// Make publishers to the topic wait (and keep retention from trimming
    /// what this subscription has not read).
    Block,
    /// Close the subscription, recording why.
    Disconnect,
}

/// Exponential backoff between redeliveries of a message.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryBackoff {
    /// Wait before the second attempt.
    pub initial: Duration,
    /// Longest wait.
    pub max: Duration,
    /// Growth factor per attempt (at least 1).
    pub multiplier: f64,
}

impl Default for RetryBackoff {
    fn default() -> Self {
        RetryBackoff { initial: Duration::from_millis(10), max: Duration::from_secs(10), multiplier: 2.0 }
    }
}

impl RetryBackoff {
    /// The wait after delivery attempt `attempt` (1-based) failed.
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = self.multiplier.max(1.0).powi(attempt.saturating_sub(1).min(64) as i32);
        let secs = (self.initial.as_secs_f64() * factor).min(self.max.as_secs_f64());
        Duration::from_secs_f64(secs.max(0.0)).max(self.initial.min(self.max))
    }
}

/// How a subscription behaves. `Default` gives an anonymous, at-least-once
/// subscription from the latest message.
#[derive(Clone, Default)]
pub struct SubscriptionOptions {
    /// A durable name; `None` for an anonymous subscription.
    pub name: Option<String>,
    /// An attribute filter (Pub/Sub syntax); `None` delivers everything.
    pub filter: Option<String>,
    /// Where to start in each partition.
    pub start: StartPosition,
    /// At-least-once (default) or at-most-once.
    pub delivery: DeliveryMode,
    /// Deliveries of one message before it is dead-lettered (default 5).
    pub max_attempts: Option<u32>,
    /// Backoff between redeliveries (default 10 ms doubling to 10 s).
    pub backoff: RetryBackoff,
    /// Dead-letter topic (default `$dlq/<name>`).
    pub dead_letter_topic: Option<String>,
    /// What happens at `lag_limit`.
    pub overflow: Overflow,
    /// Lag (messages published but not handled, per partition) that triggers
    /// `overflow`; `None`: only retention bounds the lag.
    pub lag_limit: Option<u64>,
    /// Drain on a thread of its own instead of the shared pool.
    pub dedicated_thread: bool,
    /// With `dedicated_thread`: how long the thread keeps polling for new
    /// messages, spinning, before it parks. `None` (the default) spins
    /// briefly, then yields, then parks, which suits more threads than cores.
    /// For the lowest latency give it a core and a budget longer than the
    /// gap between messages (e.g. 100 µs at 100 k msgs/s): a parked
    /// subscriber costs each message a wake-up of several microseconds.
    pub idle_spin: Option<Duration>,
    /// Called (on the draining thread) when retention trimmed messages this
    /// subscription had not read: topic, partition, and how many were missed.
    pub on_lagged: Option<LagCallback>,
}

impl fmt::Debug for SubscriptionOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubscriptionOptions")
            .field("name", &self.name)
            .field("filter", &self.filter)
            .field("start", &self.start)
            .field("delivery", &self.delivery)
            .field("max_attempts", &self.max_attempts)
            .field("backoff", &self.backoff)
            .field("dead_letter_topic", &self.dead_letter_topic)
            .field("overflow", &self.overflow)
            .field("lag_limit", &self.lag_limit)
            .field("dedicated_thread", &self.dedicated_thread)
            .field("idle_spin", &self.idle_spin)
            .field("on_lagged", &self.on_lagged.is_some())
            .finish()
    }
}

/// A callback told how many messages retention trimmed before a subscription
/// read them: `(topic, partition, missed)`.
pub type LagCallback = Arc<dyn Fn(&str, u32, u64) + Send + Sync>;

/// The broker's hook run when a subscription closes.
pub(crate) type CloseHook = Box<dyn Fn(&SubCore) + Send + Sync>;

/// Default `max_attempts`.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;

/// A message as a handler sees it: borrowed from the log, valid for the call.
/// The record's accessors (`payload()`, `key()`, `offset()`, ...) come
/// through `Deref` to [`RecordView`].
pub struct Message<'a> {
    topic: &'a str,
    partition: u32,
    record: RecordView<'a>,
    attempt: u32,
    reason: &'a RefCell<Option<String>>,
}

impl<'a> Message<'a> {
    /// The topic it was published to.
    pub fn topic(&self) -> &'a str {
        self.topic
    }
    /// Its partition.
    pub fn partition(&self) -> u32 {
        self.partition
    }
    /// Which delivery this is: 1 the first time, 2 on the first redelivery, ...
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
    /// Explains a `Retry` or `DeadLetter` ack; the last reason given becomes the
    /// `rill.dlq.reason` attribute if the message is dead-lettered.
    pub fn set_reason(&self, reason: impl Into<String>) {
        *self.reason.borrow_mut() = Some(reason.into());
    }
    /// The underlying record view.
    pub fn record(&self) -> RecordView<'a> {
        self.record
    }
}

/// The record's own accessors: `offset()`, `timestamp_ns()`, `key()`,
/// `payload()`, `attributes()`, `attribute(key)`.
impl<'a> std::ops::Deref for Message<'a> {
    type Target = RecordView<'a>;

    fn deref(&self) -> &RecordView<'a> {
        &self.record
    }
}

impl fmt::Debug for Message<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Message")
            .field("topic", &self.topic)
            .field("partition", &self.partition)
            .field("offset", &self.offset())
            .field("attempt", &self.attempt)
            .field("key", &self.key())
            .field("attributes", &self.attributes())
            .field("payload_len", &self.payload().len())
            .finish()
    }
}

/// The handler a subscription calls, one message at a time.
pub type Handler = Box<dyn FnMut(&Message<'_>) -> Ack + Send>;

/// A handler that takes consecutive messages of one partition at once. It
/// fills `acks[k]` for message `k` (pre-set to `Success`) and returns how
/// many messages, from the front, it handled; the rest are delivered again
/// in a later call. Processing stops at the first `Retry`: handled messages
/// after it are delivered again too (at least once).
pub type BatchHandler = Box<dyn FnMut(&[Message<'_>], &mut [Ack]) -> usize + Send>;

/// One of the two kinds of handler.
pub(crate) enum HandlerKind {
    One(Handler),
    Many(BatchHandler),
}

/// Where a subscription's drains run.
pub(crate) enum Exec {
    Pool(Arc<Pool>),
    /// The dedicated thread, known once it has been spawned.
    Dedicated(Mutex<Option<Thread>>),
}

/// What a subscription needs from the broker around it.
pub(crate) struct SubEnv {
    pub(crate) exec: Exec,
    pub(crate) timer: Option<Arc<Timer>>,
    pub(crate) dead_letters: Option<Arc<Topic>>,
    /// Called once when the subscription closes (after its last handler call).
    pub(crate) on_close: Option<CloseHook>,
}

/// Counters, written by the drainer once per batch, read by `stats`.
#[derive(Default)]
struct Counters {
    delivered: AtomicU64,
    acked: AtomicU64,
    filtered: AtomicU64,
    retried: AtomicU64,
    dead_lettered: AtomicU64,
    dropped: AtomicU64,
    missed: AtomicU64,
}

/// Local tallies of one batch, added to `Counters` in one go.
#[derive(Default)]
struct Tally {
    delivered: u64,
    acked: u64,
    filtered: u64,
    retried: u64,
    dead_lettered: u64,
    dropped: u64,
    missed: u64,
}

impl Counters {
    fn add(&self, t: &Tally) {
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
    mark: Option<Arc<Mark>>,
}

impl Reader {
    pub(crate) fn new(topic: Name, partition: Arc<Partition>, cursor: Cursor) -> Reader {
        let position = Arc::new(AtomicU64::new(cursor.offset()));
        Reader { topic, partition, cursor, position, mark: None }
    }

    fn publish_position(&self) {
        // Release: pairs with the Acquire in `Blocker::position`; for stats
        // readers it is only a snapshot.
        self.position.store(self.cursor.offset(), Ordering::Release);
    }
}

/// A reader's entry in its subscription's ready list, shared with the
/// listener that publishers of its partition call (see "Ready partitions"
/// at the top of this file).
pub(crate) struct Mark {
    /// True from the moment a publisher claims the right to list this reader
    /// until the drainer takes it off the list.
    listed: AtomicBool,
    /// The reader's index in the drainer's `readers`.
    index: usize,
}

/// Which partitions of a wildcard subscription publishers have written to
/// since the drainer last looked.
struct ReadySet {
    /// Indices of the readers whose mark is set.
    list: Mutex<Vec<usize>>,
    /// `list` is not empty: what the drainer's idle re-check reads.
    nonempty: AtomicBool,
    /// Readers attached so far (the next reader's index); written under the
    /// `pending` lock, so indices follow the order readers are merged in.
    attached: AtomicU64,
}

/// A partition a subscription reads and its published position: (topic,
/// partition, position).
type Tracked = (Name, Arc<Partition>, Arc<AtomicU64>);

/// A message waiting to be delivered again.
struct Retry {
    reader: usize,
    offset: u64,
    /// The attempt number of the next delivery.
    attempt: u32,
    reason: Option<String>,
}

/// Times a pool drain round, batch by batch (one clock read per batch).
struct RoundClock {
    start: u64,
    last: u64,
}

impl RoundClock {
    fn start() -> RoundClock {
        let now = RoundClock::now();
        RoundClock { start: now, last: now }
    }

    /// The clock. Under loom, a constant: a model must take the same path
    /// every time it replays a schedule, and wall time would let a round end
    /// at different points (batches are then sized by message count alone).
    #[inline]
    fn now() -> u64 {
        #[cfg(loom)]
        return 0;
        #[cfg(not(loom))]
        crate::clock::now_ns()
    }

    /// After a batch of `n` messages: fits `cap` so the next batch takes
    /// about `BATCH_SLICE_NS`, and ends the round (a zero `budget`) once it
    /// has run `ROUND_SLICE_NS`.
    fn after_batch(&mut self, n: usize, cap: &mut usize, budget: &mut usize) {
        let now = RoundClock::now();
        let took = now.saturating_sub(self.last).max(1);
        self.last = now;
        if n > 0 {
            let fits = (BATCH_SLICE_NS as u128 * n as u128 / took as u128).min(BATCH as u128) as usize;
            *cap = fits.max(1);
        }
        if now.saturating_sub(self.start) >= ROUND_SLICE_NS {
            *budget = 0;
        }
    }
}

/// Everything only the drainer touches.
struct DrainState {
    /// The user's handler; replaced by a no-op when the subscription is
    /// finalized, so user code is dropped at a known point with no lock held.
    handler: HandlerKind,
    /// Reason cells and acks for batch handlers, reused between batches.
    reasons: Vec<RefCell<Option<String>>>,
    acks: Vec<Ack>,
    on_lagged: Option<LagCallback>,
    readers: Vec<Reader>,
    /// Reader to start the next round at, for fairness between partitions.
    next: usize,
    retry: Option<Retry>,
    reason: RefCell<Option<String>>,
    /// Most records per batch: `BATCH`, or fewer on the pool while handler
    /// calls are slow (see `BATCH_SLICE_NS`).
    batch_cap: usize,
    /// With a ready set: readers that may still have messages although no
    /// publisher listed them (new ones, and those a round ended before
    /// finishing). Reused buffers for the round's visiting order.
    carry: Vec<usize>,
    visit: Vec<usize>,
    visiting: Vec<bool>,
}

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
    /// Total lag over all partitions.
    pub lag: u64,
    /// Per partition.
    pub partitions: Vec<PartitionLag>,
    /// The dead-letter topic.
    pub dead_letter_topic: Option<String>,
    /// Why it was closed, if the broker closed it.
    pub closed_reason: Option<String>,
    /// The last delivery problem (such as a dead-letter that failed).
    pub last_error: Option<String>,
}

thread::thread_local! {
    /// The subscription whose handler this thread is running (0: none).
    // Not `const { .. }`: loom's `thread_local!` does not accept it.
    #[allow(clippy::missing_const_for_thread_local)]
    static IN_HANDLER: std::cell::Cell<u64> = std::cell::Cell::new(0);
}

/// A subscription's shared core.
pub(crate) struct SubCore {
    pub(crate) id: u64,
    pub(crate) name: String,
    pub(crate) durable: bool,
    pub(crate) pattern: Pattern,
    filter: Option<Filter>,
    delivery: DeliveryMode,
    max_attempts: u32,
    backoff: RetryBackoff,
    pub(crate) overflow: Overflow,
    pub(crate) lag_limit: Option<u64>,
    idle_spin: Option<Duration>,
    /// The signal-and-drain state, read by publishers: on its own cache line.
    state: CachePadded<AtomicU8>,
    drain: Mutex<DrainState>,
    /// Readers for topics created after subscribing, merged by the drainer.
    pending: Mutex<Vec<Reader>>,
    has_pending: AtomicBool,
    /// For wildcard patterns: the partitions publishers have written to, so
    /// a wake-up costs the drainer what changed, not every partition.
    ready: Option<ReadySet>,
    /// Positions of all readers (including pending ones), for stats.
    positions: Mutex<Vec<Tracked>>,
    counters: Counters,
    env: SubEnv,
    /// Where `wait_idle` callers wait; notified when a drain goes idle.
    idle: Waiters,
    closed_reason: Mutex<Option<String>>,
    /// The last delivery problem worth reporting (e.g. a failed dead-letter).
    last_error: Mutex<Option<String>>,
    /// Set once `env.on_close` has run.
    finalized: AtomicBool,
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
            state: CachePadded::new(AtomicU8::new(IDLE)),
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
            }),
            pending: Mutex::new(Vec::new()),
            has_pending: AtomicBool::new(false),
            ready: (!pattern_is_literal).then(|| ReadySet {
                list: Mutex::new(Vec::new()),
                nonempty: AtomicBool::new(false),
                attached: AtomicU64::new(0),
            }),
            positions: Mutex::new(Vec::new()),
            counters: Counters::default(),
            env,
            idle: Waiters::new(),
            closed_reason: Mutex::new(None),
            last_error: Mutex::new(None),
            finalized: AtomicBool::new(false),
        })
    }

    /// Hands the subscription a partition to read; returns the reader's
    /// ready mark if the subscription keeps a ready set. The caller then adds
    /// the subscription as a listener of that partition.
    pub(crate) fn attach(&self, mut reader: Reader) -> Option<Arc<Mark>> {
        lock(&self.positions).push((reader.topic.clone(), reader.partition.clone(), reader.position.clone()));
        let mut pending = lock(&self.pending);
        let mark = self.ready.as_ref().map(|ready| {
            // Relaxed: written under the `pending` lock only.
            let index = ready.attached.fetch_add(1, Ordering::Relaxed) as usize;
            Arc::new(Mark { listed: AtomicBool::new(false), index })
        });
        reader.mark = mark.clone();
        pending.push(reader);
        drop(pending);
        // Release: pairs with the Acquire in `merge_pending`.
        self.has_pending.store(true, Ordering::Release);
        mark
    }

    /// The publisher's half of the ready set, called after its commit and a
    /// `fence(SeqCst)`: lists the reader of `mark` unless it is listed
    /// already. Returns true if it listed it, in which case the caller must
    /// issue another `fence(SeqCst)` before loading the state (`try_activate`).
    #[inline]
    pub(crate) fn mark_ready(&self, mark: &Mark) -> bool {
        let Some(ready) = &self.ready else { return false };
        // Relaxed load, then Relaxed swap: the fence before orders them after
        // the commit; whoever turns the flag on lists the reader, and a reader
        // already listed will be drained past this commit (see the essay).
        if mark.listed.load(Ordering::Relaxed) || mark.listed.swap(true, Ordering::Relaxed) {
            return false;
        }
        let mut list = lock(&ready.list);
        list.push(mark.index);
        // Relaxed: read after a fence by the drainer's re-check, and written
        // back to false only under the list lock, together with taking it.
        ready.nonempty.store(true, Ordering::Relaxed);
        true
    }

    /// Starts reading `partition` of `topic` at `cursor`: hands the reader to
    /// the drainer, then makes the subscription a listener of the partition
    /// (and, with the `Block` policy, a blocker of its publishers).
    pub(crate) fn attach_to(this: &Arc<SubCore>, topic: Name, partition: &Arc<Partition>, cursor: Cursor) {
        let reader = Reader::new(topic, partition.clone(), cursor);
        let blocker = match (this.overflow, this.lag_limit) {
            (Overflow::Block, Some(limit)) => Some(Blocker { id: this.id, position: reader.position.clone(), limit }),
            _ => None,
        };
        let mark = this.attach(reader);
        partition.add_listener(Listener::Subscription(this.clone(), mark), blocker);
    }

    /// For the dedicated executor: records the thread to unpark.
    pub(crate) fn set_thread(&self, t: Thread) {
        if let Exec::Dedicated(slot) = &self.env.exec {
            *lock(slot) = Some(t);
        }
    }

    #[inline]
    fn state(&self) -> u8 {
        // Acquire: a reader that sees IDLE or CLOSED also sees what the
        // drainer did before storing it (positions, counters).
        self.state.load(Ordering::Acquire)
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.state() == CLOSED
    }

    /// The publisher's half: called after a commit and a `fence(SeqCst)`.
    /// Returns true if this call moved the subscription from idle to active,
    /// in which case the caller must `schedule` it.
    #[inline]
    pub(crate) fn try_activate(&self) -> bool {
        // Relaxed: the preceding SeqCst fence orders this load after the
        // commit; a busy subscription costs exactly this one shared read.
        self.state.load(Ordering::Relaxed) == IDLE
            // AcqRel on success: acquires the last drainer's writes (it released
            // them with its IDLE store) and releases our commit to the drain we
            // schedule. Relaxed on failure: someone else is handling it.
            && self.state.compare_exchange(IDLE, ACTIVE, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    }

    /// Queues a drain. Call only after winning a move to `ACTIVE`.
    pub(crate) fn schedule(this: &Arc<SubCore>) {
        match &this.env.exec {
            Exec::Pool(pool) => pool.push(this.clone()),
            Exec::Dedicated(t) => {
                if let Some(t) = &*lock(t) {
                    t.unpark();
                }
            }
        }
    }

    /// True if other subscriptions wait for a pool worker.
    fn others_waiting(&self) -> bool {
        match &self.env.exec {
            Exec::Pool(pool) => pool.has_waiting(),
            Exec::Dedicated(_) => false,
        }
    }

    /// Wakes the subscription so it looks at its partitions again (used after
    /// attaching a partition, and by the timer).
    pub(crate) fn poke(this: &Arc<SubCore>) {
        // SeqCst fence: the same role as a publisher's fence after a commit
        // (what the caller just did, e.g. attach a reader, is ordered before
        // the state load), pairing with the drainer's fence before its re-check.
        fence(Ordering::SeqCst);
        if this.try_activate() {
            SubCore::schedule(this);
        }
    }

    /// The timer's transition: `BACKOFF -> ACTIVE`.
    pub(crate) fn wake_from_backoff(this: &Arc<SubCore>) {
        // AcqRel: as in `try_activate`.
        if this.state.compare_exchange(BACKOFF, ACTIVE, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            SubCore::schedule(this);
        }
    }

    /// Runs one drain: the body of a pool job. The state is `ACTIVE`.
    pub(crate) fn run(this: Arc<SubCore>) {
        SubCore::drain_rounds(&this, false);
    }

    /// The loop of a dedicated drain thread.
    pub(crate) fn dedicated_loop(this: Arc<SubCore>) {
        loop {
            match this.state() {
                // Wind up here too: a close from another subscription's
                // handler does not wait for this thread (idempotent).
                CLOSED => {
                    this.finalize();
                    return;
                }
                ACTIVE => SubCore::drain_rounds(&this, true),
                // IDLE or BACKOFF: a publisher or the timer will unpark us.
                _ => thread::park(),
            }
        }
    }

    /// Delivers until caught up, closed, backing off, or (on the pool) out of
    /// budget.
    fn drain_rounds(this: &Arc<SubCore>, dedicated: bool) {
        let mut st = lock(&this.drain);
        loop {
            if this.state() == CLOSED {
                drop(st);
                this.finalize();
                return;
            }
            this.merge_pending(&mut st);
            match this.deliver_round(&mut st, !dedicated) {
                Round::Closed => {
                    drop(st);
                    this.finalize();
                    return;
                }
                Round::Backoff(delay) => {
                    // Relaxed load is enough: CLOSED is checked by the CAS.
                    if this.state.compare_exchange(ACTIVE, BACKOFF, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                        match &this.env.timer {
                            Some(timer) => timer.schedule(delay, this),
                            // No timer (a bare subscription in tests): retry now.
                            None => SubCore::wake_from_backoff(this),
                        }
                    }
                    this.notify_idle();
                    return;
                }
                Round::OutOfBudget if !dedicated && this.others_waiting() => {
                    // Stay ACTIVE and go to the back of the queue, so the
                    // subscriptions waiting for a worker get their turn.
                    drop(st);
                    SubCore::schedule(this);
                    return;
                }
                // Nobody is waiting (or the thread is ours): keep going here,
                // rather than hand the drain to another worker and its cache.
                Round::OutOfBudget => continue,
                Round::CaughtUp => {}
            }
            if dedicated && this.spin_for_work(&mut st) {
                continue;
            }
            // Go idle, then re-check: see the essay at the top of this file.
            // Release on success: publishes positions and counters to whoever
            // acquires IDLE next. Fails only if closed.
            if this.state.compare_exchange(ACTIVE, IDLE, Ordering::Release, Ordering::Relaxed).is_err() {
                return;
            }
            // SeqCst fence: orders the IDLE store before the re-check's slot
            // loads; pairs with the publisher's fence in `Partition::notify`.
            fence(Ordering::SeqCst);
            if !this.has_work(&mut st) {
                drop(st);
                this.notify_idle();
                return;
            }
            // Acquire on success: we own the drain again.
            if this.state.compare_exchange(IDLE, ACTIVE, Ordering::Acquire, Ordering::Relaxed).is_err() {
                // A publisher got there first and scheduled a drain; let it run.
                return;
            }
        }
    }

    /// A dedicated drainer's short wait for more work before going idle:
    /// spin, then yield, polling the log; give up after `Backoff` completes.
    fn spin_for_work(&self, st: &mut DrainState) -> bool {
        if let Some(budget) = self.idle_spin {
            // A time budget: poll the cursors, checking the clock now and then.
            let start = Instant::now();
            let mut polls = 0u32;
            loop {
                for _ in 0..64 {
                    if self.has_work(st) {
                        return true;
                    }
                    // Poll flat out at first (a message is often a few hundred
                    // nanoseconds away), then with a pause between polls.
                    polls = polls.saturating_add(1);
                    if polls > 4096 {
                        crate::sync::spin_loop();
                    }
                }
                if self.state() == CLOSED || start.elapsed() >= budget {
                    return false;
                }
            }
        }
        let mut backoff = Backoff::new();
        while !backoff.is_completed() {
            if self.state() == CLOSED {
                return false;
            }
            if self.has_work(st) {
                return true;
            }
            backoff.snooze();
        }
        false
    }

    fn merge_pending(&self, st: &mut DrainState) {
        // Acquire: pairs with the Release in `attach`.
        if self.has_pending.load(Ordering::Acquire) {
            self.has_pending.store(false, Ordering::Relaxed);
            let from = st.readers.len();
            st.readers.append(&mut lock(&self.pending));
            if self.ready.is_some() {
                // New readers start with whatever their cursor has to read.
                st.carry.extend(from..st.readers.len());
            }
        }
    }

    /// True if some partition has a message (or a lag report) to process.
    fn has_work(&self, st: &mut DrainState) -> bool {
        // Acquire: pairs with the Release in `attach`.
        if self.has_pending.load(Ordering::Acquire) {
            return true;
        }
        match &self.ready {
            // Relaxed: the caller's fence orders this load (see the essay).
            Some(ready) => ready.nonempty.load(Ordering::Relaxed) || !st.carry.is_empty(),
            None => st.readers.iter_mut().any(|r| r.cursor.has_next()),
        }
    }

    /// One round: up to `ROUND_BUDGET` messages over all partitions.
    /// `timed` (on the pool): also end the round after `ROUND_SLICE_NS`.
    fn deliver_round(&self, st: &mut DrainState, timed: bool) -> Round {
        if let Some(ready) = &self.ready {
            return self.deliver_ready_round(st, ready, timed);
        }
        let n = st.readers.len();
        if n == 0 {
            return Round::CaughtUp;
        }
        let mut budget = ROUND_BUDGET;
        let mut clock = timed.then(RoundClock::start);
        let start = st.next % n;
        // A pending retry goes first: nothing behind it may overtake it. (No
        // allocation: a round is on every message's path when traffic is light.)
        let first = st.retry.as_ref().map(|r| r.reader);
        let rest = (0..n).map(|k| (start + k) % n).filter(move |&i| Some(i) != first);
        st.next = start + 1;
        for i in first.into_iter().chain(rest) {
            let outcome = self.deliver_partition(st, i, &mut budget, clock.as_mut());
            st.readers[i].publish_position();
            match outcome {
                Step::Continue => {}
                Step::Stop(round) => return round,
            }
            if budget == 0 {
                return Round::OutOfBudget;
            }
        }
        Round::CaughtUp
    }

    /// A round of a subscription with a ready set: visits the retry's reader,
    /// the carried-over readers and the readers publishers listed, each once,
    /// instead of every partition.
    fn deliver_ready_round(&self, st: &mut DrainState, ready: &ReadySet, timed: bool) -> Round {
        let taken = {
            let mut list = lock(&ready.list);
            // Relaxed: see `mark_ready`.
            ready.nonempty.store(false, Ordering::Relaxed);
            std::mem::take(&mut *list)
        };
        // A listed reader may have been attached after this drain last merged.
        self.merge_pending(st);
        for &i in &taken {
            // Relaxed: the fence below orders the clears before the reads of
            // these readers' cursors.
            st.readers[i].mark.as_ref().expect("listed readers have marks").listed.store(false, Ordering::Relaxed);
        }
        if !taken.is_empty() {
            // SeqCst fence: pairs with the publishers' fence between commit and
            // mark: a publisher that found a mark still set committed before
            // this fence, so the reads below see its record (see the essay).
            fence(Ordering::SeqCst);
        }
        let mut visit = std::mem::take(&mut st.visit);
        let mut visiting = std::mem::take(&mut st.visiting);
        visit.clear();
        visiting.clear();
        visiting.resize(st.readers.len(), false);
        let retry = st.retry.as_ref().map(|r| r.reader);
        for i in retry.into_iter().chain(st.carry.drain(..)).chain(taken) {
            if !std::mem::replace(&mut visiting[i], true) {
                visit.push(i);
            }
        }
        let mut budget = ROUND_BUDGET;
        let mut clock = timed.then(RoundClock::start);
        let mut round = Round::CaughtUp;
        for (k, &i) in visit.iter().enumerate() {
            let outcome = self.deliver_partition(st, i, &mut budget, clock.as_mut());
            st.readers[i].publish_position();
            let stop = match outcome {
                Step::Stop(r) => Some(r),
                Step::Continue if budget == 0 => Some(Round::OutOfBudget),
                Step::Continue => None,
            };
            if let Some(r) = stop {
                // This reader and the ones not reached yet may have more.
                st.carry.extend_from_slice(&visit[k..]);
                round = r;
                break;
            }
        }
        st.visit = visit;
        st.visiting = visiting;
        round
    }

    /// Delivers from reader `i` until it is caught up or `budget` runs out.
    /// With `clock` (on the pool), each batch is timed: the batch size is
    /// fitted to `BATCH_SLICE_NS` and the round ends past `ROUND_SLICE_NS`.
    fn deliver_partition(
        &self,
        st: &mut DrainState,
        i: usize,
        budget: &mut usize,
        mut clock: Option<&mut RoundClock>,
    ) -> Step {
        loop {
            if *budget == 0 {
                return Step::Continue;
            }
            // Checked before every batch, so the limit holds even while a slow
            // handler lets a large backlog build up within one round.
            if let Some(stop) = self.enforce_lag_limit(st, i) {
                return stop;
            }
            let mut tally = Tally::default();
            let before = *budget;
            let outcome = self.deliver_batch(st, i, budget, &mut tally);
            self.counters.add(&tally);
            if let Some(clock) = clock.as_deref_mut() {
                clock.after_batch(before - *budget, &mut st.batch_cap, budget);
            }
            if self.overflow == Overflow::Block {
                // Publishers may be waiting for exactly this room: publish the
                // position per batch, not per round, and wake them.
                let r = &st.readers[i];
                r.publish_position();
                r.partition.space.notify();
            }
            match outcome {
                Batch::More => continue,
                Batch::Empty => return Step::Continue,
                Batch::Stop(round) => return Step::Stop(round),
            }
        }
    }

    /// Applies the `DropOldest` and `Disconnect` policies to reader `i`
    /// (`Block` is enforced by publishers).
    fn enforce_lag_limit(&self, st: &mut DrainState, i: usize) -> Option<Step> {
        let limit = self.lag_limit?;
        if self.overflow == Overflow::Block {
            return None;
        }
        let r = &mut st.readers[i];
        let lag = r.cursor.lag();
        if lag <= limit {
            return None;
        }
        match self.overflow {
            Overflow::Disconnect => {
                let reason = format!(
                    "disconnected: lag {lag} on {}[{}] exceeded the lag limit {limit}",
                    r.topic, r.partition.index
                );
                *lock(&self.closed_reason) = Some(reason);
                // The drainer holds the drain lock: close without waiting for it;
                // the round sees CLOSED and finalizes.
                self.close_inner(false);
                Some(Step::Stop(Round::Closed))
            }
            _ => {
                let before = r.cursor.offset();
                if r.cursor.seek(before + (lag - limit)).is_err() {
                    // The backlog start was trimmed meanwhile: the next read
                    // reports that as missed; skip to the oldest retained.
                    r.cursor.seek_to_first();
                }
                let skipped = r.cursor.offset().saturating_sub(before);
                if st.retry.as_ref().is_some_and(|rt| rt.reader == i) {
                    st.retry = None;
                }
                self.counters.add(&Tally { dropped: skipped, ..Tally::default() });
                None
            }
        }
    }

    /// Reads one batch from reader `i` and hands its messages to the handler.
    fn deliver_batch(&self, st: &mut DrainState, i: usize, budget: &mut usize, tally: &mut Tally) -> Batch {
        let DrainState { handler, on_lagged, readers, retry, reason, reasons, acks, batch_cap, .. } = st;
        let reader = &mut readers[i];
        let topic: &str = &reader.topic;
        let partition = reader.partition.index;
        let want = (*budget).min(*batch_cap);
        let batch = match reader.cursor.read_batch(want) {
            Ok(b) => b,
            Err(Lagged { missed, .. }) => {
                tally.missed += missed;
                if retry.as_ref().is_some_and(|r| r.reader == i) {
                    *retry = None;
                }
                if let Some(cb) = on_lagged {
                    invoke_lagged(self.id, cb, topic, partition, missed);
                    if self.state() == CLOSED {
                        // The callback closed the subscription.
                        return Batch::Stop(Round::Closed);
                    }
                }
                return Batch::More;
            }
        };
        if batch.is_empty() {
            return Batch::Empty;
        }
        // Where to put the cursor back if messages must be delivered again.
        let mut rewind_to: Option<u64> = None;
        let mut stop: Option<Round> = None;
        match handler {
            HandlerKind::One(h) => {
                for record in batch {
                    *budget -= 1;
                    if self.filter.as_ref().is_some_and(|f| !f.matches(record.attributes())) {
                        tally.filtered += 1;
                        continue;
                    }
                    let (attempt, last_reason) = attempt_of(retry, i, record.offset());
                    *reason.borrow_mut() = last_reason;
                    let msg = Message { topic, partition, record, attempt, reason: &*reason };
                    let ack = invoke(self.id, h, &msg);
                    tally.delivered += 1;
                    if self.state() == CLOSED {
                        rewind_to = Some(self.unacked_resume(record.offset()));
                        stop = Some(Round::Closed);
                        break;
                    }
                    if let Settled::Stop { rewind, round } = self.settle(ack, &msg, i, retry, tally) {
                        (rewind_to, stop) = (Some(rewind), Some(round));
                        break;
                    }
                }
            }
            HandlerKind::Many(h) => {
                let records: Vec<RecordView<'_>> = batch.into_iter().collect();
                *budget -= records.len();
                let mut filtered: Vec<u64> = Vec::new();
                let passing: Vec<RecordView<'_>> = records
                    .into_iter()
                    .filter(|r| {
                        let keep = self.filter.as_ref().is_none_or(|f| f.matches(r.attributes()));
                        if !keep {
                            filtered.push(r.offset());
                        }
                        keep
                    })
                    .collect();
                if reasons.len() < passing.len() {
                    reasons.resize_with(passing.len(), RefCell::default);
                }
                let msgs: Vec<Message<'_>> = passing
                    .iter()
                    .zip(reasons.iter())
                    .map(|(&record, cell)| {
                        let (attempt, last_reason) = attempt_of(retry, i, record.offset());
                        *cell.borrow_mut() = last_reason;
                        Message { topic, partition, record, attempt, reason: cell }
                    })
                    .collect();
                if !msgs.is_empty() {
                    acks.clear();
                    acks.resize(msgs.len(), Ack::Success);
                    let handled = invoke_many(self.id, h, &msgs, acks);
                    tally.delivered += handled as u64;
                    if self.state() == CLOSED {
                        rewind_to = Some(self.unacked_resume(msgs[0].offset()));
                        stop = Some(Round::Closed);
                    } else {
                        for (msg, &ack) in msgs[..handled].iter().zip(acks.iter()) {
                            if let Settled::Stop { rewind, round } = self.settle(ack, msg, i, retry, tally) {
                                (rewind_to, stop) = (Some(rewind), Some(round));
                                break;
                            }
                        }
                        if stop.is_none() && handled < msgs.len() {
                            // The handler stopped early: the rest come again next.
                            rewind_to = Some(msgs[handled].offset());
                        }
                    }
                }
                // Filtered messages before the rewind point are done with.
                tally.filtered += filtered.iter().filter(|&&o| rewind_to.is_none_or(|r| o < r)).count() as u64;
            }
        }
        if let Some(offset) = rewind_to {
            reader.cursor.rewind(offset);
        }
        match stop {
            Some(round) => Batch::Stop(round),
            None => Batch::More,
        }
    }

    /// Where a subscription closed while its handler ran resumes: at the
    /// unacknowledged message (at least once), or after it (at most once).
    fn unacked_resume(&self, offset: u64) -> u64 {
        match self.delivery {
            DeliveryMode::AtLeastOnce => offset,
            DeliveryMode::AtMostOnce => offset + 1,
        }
    }

    /// Applies one acknowledgement: counts it, schedules a redelivery or
    /// dead-letters the message. `Stop` means the drain must stop and put
    /// the cursor back at `rewind`.
    fn settle(&self, ack: Ack, msg: &Message<'_>, i: usize, retry: &mut Option<Retry>, tally: &mut Tally) -> Settled {
        let (offset, attempt) = (msg.offset(), msg.attempt());
        let ack = match (self.delivery, ack) {
            (DeliveryMode::AtMostOnce, Ack::Success) => {
                tally.acked += 1;
                return Settled::Next;
            }
            (DeliveryMode::AtMostOnce, Ack::Retry) => {
                tally.dropped += 1;
                return Settled::Next;
            }
            (_, ack) => ack,
        };
        let backoff = |retry: &mut Option<Retry>, reason: Option<String>| {
            *retry = Some(Retry { reader: i, offset, attempt: attempt + 1, reason });
            Settled::Stop { rewind: offset, round: Round::Backoff(self.backoff.delay(attempt)) }
        };
        match ack {
            Ack::Success => {
                tally.acked += 1;
                *retry = None;
                Settled::Next
            }
            Ack::Retry if attempt < self.max_attempts => {
                tally.retried += 1;
                backoff(retry, msg.reason.take())
            }
            Ack::Retry | Ack::DeadLetter => {
                let why = msg.reason.take().unwrap_or_else(|| {
                    if ack == Ack::Retry {
                        format!("gave up after {attempt} attempts")
                    } else {
                        "dead-lettered by the handler".into()
                    }
                });
                match self.dead_letter(msg, &why) {
                    Ok(()) => tally.dead_lettered += 1,
                    Err(e @ (Error::Full | Error::Timeout)) if self.delivery == DeliveryMode::AtLeastOnce => {
                        // The dead-letter topic cannot take it now (a Block
                        // subscriber of its own): keep the message at the head
                        // and try again after a backoff; nothing is lost.
                        self.set_last_error(format!("dead-lettering offset {offset} deferred: {e}"));
                        return backoff(retry, Some(why));
                    }
                    Err(e) => {
                        self.set_last_error(format!("dead-lettering offset {offset} failed: {e}"));
                        tally.dropped += 1;
                    }
                }
                *retry = None;
                Settled::Next
            }
        }
    }

    /// Publishes a failed message to the dead-letter topic, with its key,
    /// payload and attributes plus `rill.dlq.*`.
    fn dead_letter(&self, msg: &Message<'_>, reason: &str) -> Result<()> {
        let Some(dlq) = &self.env.dead_letters else { return Ok(()) };
        let (partition, offset, attempts) =
            (msg.partition().to_string(), msg.offset().to_string(), msg.attempt().to_string());
        let mut attrs: Vec<(&str, &str)> = msg.attributes().filter(|(k, _)| !k.starts_with("rill.dlq.")).collect();
        attrs.extend([
            ("rill.dlq.reason", reason),
            ("rill.dlq.topic", msg.topic()),
            ("rill.dlq.partition", partition.as_str()),
            ("rill.dlq.offset", offset.as_str()),
            ("rill.dlq.attempts", attempts.as_str()),
            ("rill.dlq.subscription", self.name.as_str()),
        ]);
        let mut record = Record::new(msg.payload()).with_attributes(&attrs);
        if let Some(k) = msg.key() {
            record = record.with_key(k);
        }
        // Never wait here: a drainer must not block on another topic's subscribers.
        dlq.route(msg.key()).publish(&record, Wait::No).map(drop)
    }

    fn set_last_error(&self, error: String) {
        *lock(&self.last_error) = Some(error);
    }

    fn notify_idle(&self) {
        self.idle.notify();
    }

    /// True when nothing is in flight and every partition is read to its end.
    fn is_caught_up(&self) -> bool {
        if self.state() != IDLE {
            return false;
        }
        // Acquire: pairs with the Release in `attach`.
        if self.has_pending.load(Ordering::Acquire) {
            return false;
        }
        lock(&self.positions).iter().all(|(_, p, pos)| {
            // Relaxed: published by the drainer before its IDLE store, which the
            // Acquire state load above synchronised with.
            pos.load(Ordering::Relaxed) >= p.log.end_offset()
        })
    }

    /// Waits until the subscription is caught up (true) or `timeout` passes (false).
    pub(crate) fn wait_idle(&self, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        let caught_up = self.idle.wait_until(Some(deadline), || self.is_closed() || self.is_caught_up());
        if self.is_closed() {
            return Err(Error::Closed(format!("subscription {:?} is closed", self.name)));
        }
        Ok(caught_up)
    }

    /// Closes the subscription. Called from no handler, returns only once no
    /// handler call of it is in flight. Idempotent.
    pub(crate) fn close(this: &Arc<SubCore>) {
        match IN_HANDLER.with(|h| h.get()) {
            0 => this.close_inner(true),
            // From its own handler: the round that called it winds it up.
            id if id == this.id => this.close_inner(false),
            // From another subscription's handler: waiting for this one's
            // round could wait forever (its handler may be closing ours, or
            // waiting for us), so do not wait; see that it winds up anyway.
            _ => {
                this.close_inner(false);
                SubCore::wind_up_later(this);
            }
        }
    }

    /// `close` as called from the handler of subscription `other` (loom
    /// models: a real handler would need a second subscription around it).
    #[cfg(loom)]
    pub(crate) fn close_from_handler_of(this: &Arc<SubCore>, other: u64) {
        let previous = IN_HANDLER.with(|h| h.replace(other));
        SubCore::close(this);
        IN_HANDLER.with(|h| h.set(previous));
    }

    // Winding up after a close that did not wait.
    //
    // "Winding up" (`finalize`) drops the user's handler and runs the
    // broker's close hook (which frees a durable name); it is idempotent and
    // takes the drain lock, so it cannot run inside a round. A close from
    // another subscription's handler must not wait for this subscription's
    // round (that round's handler may be closing ours, or waiting on it), so
    // after storing CLOSED it cannot simply take the drain and wind up.
    //
    // States: a round holds the drain (it is delivering, or between its last
    // look at the state and releasing the lock), or nobody does. Invariant:
    // after CLOSED is stored, some thread winds up after the last round
    // releases the drain. If `try_lock` succeeds, no round runs and none can
    // start usefully (a new one sees CLOSED at its top and winds up, which is
    // harmless twice); we wind up. If it fails, a round holds the drain and
    // may already be past every look at the state (it saw ACTIVE, went idle
    // and is returning): it will not wind up, so we queue a pool job, which
    // takes the drain after the round and, seeing CLOSED, winds up. A
    // dedicated thread returns to its loop after every round and winds up
    // when it sees CLOSED there (the close unparks it). The race between the
    // round's exit and the close is what `loom-tests/tests/close.rs` models;
    // without the job, or without the dedicated loop's wind-up, loom finds
    // an execution where nobody winds up.
    fn wind_up_later(this: &Arc<SubCore>) {
        // The guard `try_lock` may return is dropped with the condition,
        // before `finalize` takes the lock itself (poisoning is ignored).
        if !matches!(this.drain.try_lock(), Err(std::sync::TryLockError::WouldBlock)) {
            this.finalize();
        } else if let Exec::Pool(pool) = &this.env.exec {
            pool.push(this.clone());
        }
    }

    /// Closes; with `wait`, also waits for an in-flight round (the caller must
    /// not be that round).
    fn close_inner(&self, wait: bool) {
        // AcqRel: Release publishes what the closer did before to whoever
        // sees CLOSED (Acquire in `state`); Acquire makes the last drainer's
        // writes visible to the closer. Exactly one caller sees the old state.
        if self.state.swap(CLOSED, Ordering::AcqRel) == CLOSED {
            return;
        }
        for (_, partition, _) in lock(&self.positions).iter() {
            partition.remove_listener(self.id);
        }
        if let Exec::Dedicated(t) = &self.env.exec
            && let Some(t) = &*lock(t)
        {
            t.unpark();
        }
        if wait {
            // Wait for an in-flight round to see CLOSED and release the lock;
            // its positions are final then.
            drop(lock(&self.drain));
            self.finalize();
        }
        // Otherwise the caller is (inside) the round, which finalizes when it returns.
        self.notify_idle();
    }

    /// Runs once, after the last handler call: releases the user's handler
    /// and callbacks (their destructors may run user code, so no lock is
    /// held), then runs the broker's close hook.
    fn finalize(&self) {
        // AcqRel: one caller wins; it then sees everything the drainer did.
        if self.finalized.swap(true, Ordering::AcqRel) {
            return;
        }
        let (handler, on_lagged) = {
            let mut st = lock(&self.drain);
            let noop = HandlerKind::One(Box::new(|_: &Message<'_>| Ack::Success));
            (std::mem::replace(&mut st.handler, noop), st.on_lagged.take())
        };
        drop(handler);
        drop(on_lagged);
        if let Some(on_close) = &self.env.on_close {
            on_close(self);
        }
    }

    /// Closes the subscription, recording why (reported in stats).
    pub(crate) fn close_with_reason(this: &Arc<SubCore>, reason: String) {
        *lock(&this.closed_reason) = Some(reason);
        SubCore::close(this);
    }

    /// The committed position of every partition read so far.
    pub(crate) fn positions(&self) -> Vec<(Name, u32, u64)> {
        lock(&self.positions)
            .iter()
            // Relaxed: see `is_caught_up`; callers take it after close.
            .map(|(t, p, pos)| (t.clone(), p.index, pos.load(Ordering::Relaxed)))
            .collect()
    }

    pub(crate) fn stats(&self) -> SubscriptionStats {
        let partitions: Vec<PartitionLag> = lock(&self.positions)
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
        let c = &self.counters;
        // Relaxed: counters are statistics.
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SubscriptionStats {
            name: self.name.clone(),
            pattern: self.pattern.to_string(),
            state: match self.state() {
                IDLE => SubscriptionState::Idle,
                ACTIVE => SubscriptionState::Active,
                BACKOFF => SubscriptionState::Backoff,
                _ => SubscriptionState::Closed,
            },
            delivered: get(&c.delivered),
            acked: get(&c.acked),
            filtered: get(&c.filtered),
            retried: get(&c.retried),
            dead_lettered: get(&c.dead_lettered),
            dropped: get(&c.dropped),
            missed: get(&c.missed),
            lag: partitions.iter().map(|p| p.lag).sum(),
            partitions,
            dead_letter_topic: self.env.dead_letters.as_ref().map(|t| t.name.to_string()),
            closed_reason: lock(&self.closed_reason).clone(),
            last_error: lock(&self.last_error).clone(),
        }
    }
}

/// How a round ended.
enum Round {
    CaughtUp,
    OutOfBudget,
    Backoff(Duration),
    Closed,
}

enum Step {
    Continue,
    Stop(Round),
}

enum Batch {
    More,
    Empty,
    Stop(Round),
}

/// What one acknowledgement means for the rest of a batch.
enum Settled {
    Next,
    Stop { rewind: u64, round: Round },
}

/// Calls the handler, turning a panic into `Retry` with the panic's message
/// as the reason.
fn invoke(sub_id: u64, handler: &mut Handler, msg: &Message<'_>) -> Ack {
    let previous = IN_HANDLER.with(|h| h.replace(sub_id));
    let result = catch_unwind(AssertUnwindSafe(|| handler(msg)));
    IN_HANDLER.with(|h| h.set(previous));
    match result {
        Ok(ack) => ack,
        Err(panic) => {
            msg.set_reason(format!("handler panicked: {}", crate::panic_message(&*panic)));
            Ack::Retry
        }
    }
}

/// Calls a subscription's `on_lagged` callback the way handlers are called:
/// marked as inside subscription `sub_id` (so it may close it, or another
/// one, without waiting on the drain it runs in), and with a panic caught,
/// so user code cannot take down the thread that drains (the panic is
/// dropped: there is no message to retry, and the miss is counted anyway).
fn invoke_lagged(sub_id: u64, cb: &LagCallback, topic: &str, partition: u32, missed: u64) {
    let previous = IN_HANDLER.with(|h| h.replace(sub_id));
    let _ = catch_unwind(AssertUnwindSafe(|| cb(topic, partition, missed)));
    IN_HANDLER.with(|h| h.set(previous));
}

/// A redelivery carries the attempt number and the reason given last time;
/// other messages are on their first attempt.
fn attempt_of(retry: &mut Option<Retry>, reader: usize, offset: u64) -> (u32, Option<String>) {
    match retry {
        Some(r) if r.reader == reader && r.offset == offset => (r.attempt, r.reason.take()),
        _ => (1, None),
    }
}

/// Calls a batch handler; a panic counts as `Retry` of the first message
/// (with the panic's message as its reason), and a handler that claims to
/// have handled nothing is taken to retry the first message, so a drain
/// always makes progress or backs off.
fn invoke_many(sub_id: u64, handler: &mut BatchHandler, msgs: &[Message<'_>], acks: &mut [Ack]) -> usize {
    let previous = IN_HANDLER.with(|h| h.replace(sub_id));
    let result = catch_unwind(AssertUnwindSafe(|| handler(msgs, acks)));
    IN_HANDLER.with(|h| h.set(previous));
    match result {
        Ok(0) => {
            msgs[0].set_reason("the batch handler handled no message");
            acks[0] = Ack::Retry;
            1
        }
        Ok(n) => n.min(msgs.len()),
        Err(panic) => {
            msgs[0].set_reason(format!("handler panicked: {}", crate::panic_message(&*panic)));
            acks[0] = Ack::Retry;
            1
        }
    }
}

/// Locks a mutex, ignoring poisoning: a panic in a handler is caught before
/// it could poison anything, and the data behind these locks stays valid.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A live push subscription. Dropping it unsubscribes (see [`Subscription::close`]).
pub struct Subscription {
    pub(crate) core: Arc<SubCore>,
}

impl Subscription {
    /// The subscription's name (generated for anonymous ones).
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// Waits until the subscription has handled everything published to its
    /// partitions so far and no handler call is in flight (`Ok(true)`), or the
    /// timeout passes (`Ok(false)`). `Err(Closed)` if it is closed.
    pub fn wait_idle(&self, timeout: Duration) -> Result<bool> {
        self.core.wait_idle(timeout)
    }

    /// A snapshot of its counters and positions.
    pub fn stats(&self) -> SubscriptionStats {
        self.core.stats()
    }

    /// True once closed (by `close`, by the broker closing, or by the
    /// `Disconnect` overflow policy).
    pub fn is_closed(&self) -> bool {
        self.core.is_closed()
    }

    /// Unsubscribes. Returns once no handler call of this subscription is in
    /// flight, except when called from inside a handler (its own or another
    /// subscription's): then it returns at once, and the handler is not called
    /// again after any call in flight, so two handlers that close each other
    /// cannot wait for each other forever. Idempotent.
    pub fn close(&self) {
        SubCore::close(&self.core);
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        SubCore::close(&self.core);
    }
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription").field("name", &self.core.name).field("pattern", &self.core.pattern).finish()
    }
}
