//! A bare subscription on one partition (or two, behind a wildcard), for the
//! loom models in `loom-tests/tests/signal.rs`, `waiters.rs`, `close.rs` and
//! `attach.rs`; the data directory's offsets store ([`OffsetsStore`]),
//! for `store/offsets.rs`; and, in `doorbell.rs` beside it, the
//! cross-process wake's models' parts.
//! Only built under `--cfg loom`.
//!
//! Everything it drives is the real code: `Partition::publish` (append, the
//! publisher's fence, `try_activate`, scheduling), the worker pool or the
//! dedicated thread, and `SubCore`'s drain rounds with their idle re-check.
//! It only leaves out the broker around them (topic map, timer, dead letters).

mod doorbell;

pub use doorbell::{DisarmedTopicChanges, LazyConsumer, LazyDoorbell, MemberChanges, TopicChanges, WakeAcross};

use super::dispatch::WorkerPool;
use super::names::Pattern;
use super::subscription::{
    Ack, CloseHook, DrainJob, Exec, Handler, HandlerKind, Overflow, SubCore, SubEnv, SubscriptionOptions, attach,
    close, drain,
};
use super::topic::{Partition, Wait};
use super::waiters::Waiters;
use crate::log::{Log, LogConfig, Record};
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::thread::{self, JoinHandle};
use crate::sync::{Arc, Condvar, Mutex, UnsafeCell};

/// A partition with one subscription that records the tags it receives
/// (or two subscriptions, for `two_subscriptions`).
pub struct Harness {
    /// Its partitions: one, or two (topics `t/a` and `t/b`) for `wildcard`.
    partitions: Vec<Arc<Partition>>,
    sub: Arc<SubCore>,
    /// A second subscription to the same partition, for
    /// `two_subscriptions`: it records `10 + tag` for each tag.
    second: Option<Arc<SubCore>>,
    pool: Option<Arc<WorkerPool<DrainJob>>>,
    dedicated: Option<JoinHandle<()>>,
    seen: Arc<(Mutex<Vec<u64>>, Condvar)>,
    /// How many times the subscription was wound up (its close hook ran).
    wound_up: Arc<(Mutex<u32>, Condvar)>,
    /// The last tag the handler saw, in a plain cell: what a user's handler
    /// writes without synchronisation of its own.
    last: Arc<LastTag>,
}

/// A cell the handler writes with no lock or atomic around it, so that loom
/// checks that whoever reads it afterwards is ordered after the write.
#[derive(Debug)]
struct LastTag(UnsafeCell<u64>);

// SAFETY: the handler is its only writer (one drainer at a time, under the
// drain lock), and `Harness::last_handled` reads it only after `wait_idle`
// says every handler call is over; loom's checked cell reports a read that
// is not ordered after the write, which is what the model looks for.
unsafe impl Sync for LastTag {}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Harness")
    }
}

impl Harness {
    /// A partition with 64-byte segments (two 8-byte-payload records each)
    /// and a subscription from its start, drained by a one-worker pool or,
    /// with `dedicated`, by a thread of its own.
    pub fn new(dedicated: bool) -> Harness {
        Self::with_block(dedicated, None)
    }

    /// Like `new`, with the `Block` overflow policy at `lag_limit` if given:
    /// publishers then wait for the subscription to make room.
    pub fn with_block(dedicated: bool, lag_limit: Option<u64>) -> Harness {
        Self::build(dedicated, lag_limit, false, false)
    }

    /// A `t/*` subscription reading two partitions (of topics `t/a` and
    /// `t/b`): a wildcard subscription, which keeps a ready set.
    pub fn wildcard(dedicated: bool) -> Harness {
        Self::build(dedicated, None, true, false)
    }

    /// Two subscriptions to one partition, drained by a one-worker pool:
    /// every publish walks two entries, and may find both idle and wake
    /// both. The second records `10 + tag` for each tag it handles.
    pub fn two_subscriptions() -> Harness {
        Self::build(false, None, false, true)
    }

    fn build(dedicated: bool, lag_limit: Option<u64>, wildcard: bool, two: bool) -> Harness {
        let topics: &[&str] = if wildcard { &["t/a", "t/b"] } else { &["t"] };
        let partitions: Vec<Arc<Partition>> = topics
            .iter()
            .map(|_| {
                let log =
                    Log::new(&LogConfig { segment_bytes: Some(64), retention_bytes: None, ..LogConfig::default() })
                        .expect("a valid loom log config");
                Arc::new(Partition::new(0, log))
            })
            .collect();
        let seen: Arc<(Mutex<Vec<u64>>, Condvar)> = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let s = seen.clone();
        let last = Arc::new(LastTag(UnsafeCell::new(0)));
        let l = last.clone();
        let handler: Handler = Box::new(move |m| {
            let tag = u64::from_le_bytes(m.payload().try_into().expect("8-byte payload"));
            s.0.lock().push(tag);
            s.1.notify_all();
            // Last, after the lock above: loom orders every lock and unlock
            // with every other (its mutexes are sequentially consistent), so a
            // write before one would reach any thread that locks anything later.
            // SAFETY: see `LastTag`: handler calls do not overlap.
            l.0.with_mut(|p| unsafe { *p = tag });
            Ack::Success
        });
        let pool = (!dedicated).then(|| Arc::new(WorkerPool::start(1).expect("loom spawns threads")));
        let exec = match &pool {
            Some(p) => Exec::Pool(p.clone()),
            None => Exec::Dedicated(Mutex::new(None)),
        };
        let wound_up: Arc<(Mutex<u32>, Condvar)> = Arc::new((Mutex::new(0), Condvar::new()));
        let w = wound_up.clone();
        let on_close: CloseHook = Box::new(move |_: &SubCore| {
            *w.0.lock() += 1;
            w.1.notify_all();
        });
        let env = SubEnv {
            exec,
            timer: None,
            dead_letters: None,
            on_close: Some(on_close),
            on_release: None,
            on_round_end: None,
            ack_watch: None,
            on_stall: None,
        };
        let options = match lag_limit {
            Some(limit) => {
                SubscriptionOptions { overflow: Overflow::Block, lag_limit: Some(limit), ..Default::default() }
            }
            None => SubscriptionOptions::default(),
        };
        let pattern = Pattern::parse(if wildcard { "t/*" } else { "t" }).expect("a valid pattern");
        let second = two.then(|| {
            let s = seen.clone();
            let handler: Handler = Box::new(move |m| {
                let tag = u64::from_le_bytes(m.payload().try_into().expect("8-byte payload"));
                s.0.lock().push(10 + tag);
                s.1.notify_all();
                Ack::Success
            });
            let env = SubEnv {
                exec: Exec::Pool(pool.clone().expect("two subscriptions share the pool")),
                timer: None,
                dead_letters: None,
                on_close: None,
                on_release: None,
                on_round_end: None,
                ack_watch: None,
                on_stall: None,
            };
            let pattern = Pattern::parse("t").expect("a valid pattern");
            Arc::new(
                SubCore::new(2, "second".into(), pattern, &options, HandlerKind::One(handler), env).expect("valid"),
            )
        });
        let sub = Arc::new(
            SubCore::new(1, "model".into(), pattern, &options, HandlerKind::One(handler), env).expect("valid options"),
        );
        let dedicated = dedicated.then(|| {
            let s = sub.clone();
            let handle = thread::spawn(move || drain::dedicated_loop(s));
            sub.set_thread(handle.thread().clone());
            handle
        });
        for (topic, partition) in topics.iter().zip(&partitions) {
            attach::attach_to(&sub, (*topic).into(), partition, partition.log.cursor_from_first());
            if let Some(second) = &second {
                attach::attach_to(second, (*topic).into(), partition, partition.log.cursor_from_first());
            }
        }
        Harness { partitions, sub, second, pool, dedicated, seen, wound_up, last }
    }

    /// Publishes a record carrying `tag`, through the real publish path,
    /// waiting without a deadline for room if the subscription blocks.
    pub fn publish(&self, tag: u64) -> u64 {
        self.publish_to(0, tag)
    }

    /// Publishes a record carrying `tag` to partition `p` (0 or, for a
    /// wildcard harness, 1).
    pub fn publish_to(&self, p: usize, tag: u64) -> u64 {
        self.partitions[p].publish(&Record::new(&tag.to_le_bytes()), Wait::For(None)).expect("publish")
    }

    /// Blocks until the handler has seen `n` records; returns their tags in
    /// delivery order. A lost wakeup leaves every thread blocked, which loom
    /// reports as a deadlock.
    pub fn wait_for(&self, n: usize) -> Vec<u64> {
        let (lock_, cond) = &*self.seen;
        let mut seen = lock_.lock();
        while seen.len() < n {
            seen = cond.wait(seen);
        }
        seen.clone()
    }

    /// `Subscription::wait_idle` without a deadline: true once every record
    /// published so far is handled and no handler call is in flight.
    pub fn wait_idle(&self) -> bool {
        self.sub.wait_idle(std::time::Duration::MAX).expect("open, and not called from its handler")
    }

    /// The tag of the last record handled, read from the handler's plain
    /// cell. Call only after [`Harness::wait_idle`]: loom reports a read
    /// that is not ordered after the handler's write (a causality violation).
    pub fn last_handled(&self) -> u64 {
        // SAFETY: see `LastTag`; loom checks the claim.
        self.last.0.with(|p| unsafe { *p })
    }

    /// `Subscription::stats`.
    pub fn stats(&self) -> super::subscription::SubscriptionStats {
        super::subscription::stats(&self.sub, true)
    }

    /// True once the subscription is closed (`Subscription::is_closed`).
    pub fn is_closed(&self) -> bool {
        self.sub.is_closed()
    }

    /// Closes the subscription as if from another subscription's handler:
    /// without waiting for a drain in flight.
    pub fn close_from_another_handler(&self) {
        close::close_from_handler_of(&self.sub, 2);
    }

    /// Blocks until the subscription has been wound up (its close hook ran);
    /// returns how many times that happened. Never wound up: every thread
    /// ends blocked, which loom reports as a deadlock.
    pub fn wait_wound_up(&self) -> u32 {
        let (lock_, cond) = &*self.wound_up;
        let mut n = lock_.lock();
        while *n == 0 {
            n = cond.wait(n);
        }
        *n
    }

    /// Closes the subscription as a caller outside any handler does: waiting
    /// for the drain in flight and for the wind-up.
    pub fn close(&self) {
        close::close(&self.sub);
    }

    /// How many times the subscription has been wound up so far (its close
    /// hook ran), without waiting.
    pub fn times_wound_up(&self) -> u32 {
        *self.wound_up.0.lock()
    }

    /// A partition of a topic created after the subscription was made, not
    /// yet read by it (for `Harness::attach`).
    pub fn new_partition() -> NewPartition {
        let log = Log::new(&LogConfig { segment_bytes: Some(64), retention_bytes: None, ..LogConfig::default() })
            .expect("a valid loom log config");
        NewPartition(Arc::new(Partition::new(0, log)))
    }

    /// Attaches the subscription to `p` as the broker does when it creates
    /// a topic the subscription's pattern matches (`create_topic`, which
    /// found the subscription in its pattern index: it may be closing).
    pub fn attach(&self, p: &NewPartition) {
        attach::attach_to(&self.sub, "t/new".into(), &p.0, p.0.log.cursor_from_first());
    }

    /// Attaches the subscription to `p` and pokes it, as `create_topic` does
    /// for a subscription whose pattern matches a topic it creates.
    pub fn attach_as_created(&self, p: &NewPartition) {
        self.attach(p);
        SubCore::poke(&self.sub);
    }

    /// Closes the subscription and stops its threads.
    pub fn shutdown(mut self) {
        close::close(&self.sub);
        if let Some(second) = &self.second {
            close::close(second);
        }
        if let Some(p) = self.pool.take() {
            p.stop();
        }
        if let Some(t) = self.dedicated.take() {
            t.join().expect("the dedicated thread exits cleanly");
        }
    }
}

/// A partition made by [`Harness::new_partition`].
#[derive(Debug)]
pub struct NewPartition(Arc<Partition>);

impl NewPartition {
    /// Listeners its publishers would signal.
    pub fn listeners(&self) -> usize {
        self.0.listener_count()
    }

    /// Publishes a record carrying `tag` through the real publish path, as
    /// a thread that found the new topic in the broker's map does.
    pub fn publish(&self, tag: u64) -> u64 {
        self.0.publish(&Record::new(&tag.to_le_bytes()), Wait::For(None)).expect("publish")
    }
}

/// A bare [`Waiters`] guarding one atomic value: the wait/notify protocol on
/// its own, with no other synchronisation around it (the end-to-end models
/// also pin epochs, whose fences would hide a missing one here).
#[derive(Debug, Default)]
pub struct Gate {
    waiters: Waiters,
    value: AtomicU64,
}

impl Gate {
    /// A gate at 0.
    pub fn new() -> Gate {
        Gate::default()
    }

    /// Raises the value (a relaxed store, ordered only by `notify`'s fence)
    /// and wakes waiters.
    pub fn raise(&self, to: u64) {
        self.value.store(to, Ordering::Relaxed);
        self.waiters.notify();
    }

    /// Waits, without a deadline, until the value is at least `at_least`.
    pub fn wait(&self, at_least: u64) {
        // Relaxed: on purpose, so the model checks that Waiters' own fences
        // order the value against the wait.
        self.waiters.wait_until(None, || self.value.load(Ordering::Relaxed) >= at_least);
    }

    /// Hangs `hook` on the gate's bell ("The bell" in `waiters.rs`).
    pub fn hang_bell(&self, hook: impl Fn() + Send + Sync + 'static) {
        self.waiters.set_bell(Box::new(hook));
    }

    /// What a consumer's poll does with a ready hook: arms the bell, then
    /// looks (once, no waiting) for a value of at least `at_least`; true if
    /// it found one (and disarmed), false if it left the bell armed.
    pub fn arm_and_look(&self, at_least: u64) -> bool {
        self.waiters.arm();
        // Relaxed: as in `wait`, only the bell's own fences order it.
        let found = self.value.load(Ordering::Relaxed) >= at_least;
        if found {
            self.waiters.disarm();
        }
        found
    }

    /// [`Gate::wait`] without the spin that precedes blocking: straight to
    /// registering, W2 and the re-check. Under loom the spin yields, and a
    /// thread that has yielded never again reads a value it saw before, so
    /// with the spin the waiter can no longer read a stale value and the race
    /// the fences W1 and W2 close is out of loom's reach.
    pub fn wait_without_spinning(&self, at_least: u64) {
        // Relaxed: as in `wait`.
        self.waiters.block_until(None, || self.value.load(Ordering::Relaxed) >= at_least);
    }
}

/// A worker pool on its own, for the model of how pushes wake sleeping
/// workers (`dispatch.rs`, "Waking sleeping workers"): each job counts
/// itself done and raises a gate.
pub struct PoolProbe {
    pool: WorkerPool<CountJob>,
    done: Arc<Gate>,
    count: Arc<AtomicU64>,
    /// The priorities of the jobs run, in the order they ran.
    ran: Arc<Mutex<Vec<u8>>>,
}

struct CountJob(Arc<Gate>, Arc<AtomicU64>, u8, Arc<Mutex<Vec<u8>>>);

impl super::dispatch::Job for CountJob {
    fn run(self) {
        self.3.lock().push(self.2);
        // Relaxed: jobs run one at a time on the one worker, and the gate's
        // raise (with its fence) is what a waiter relies on.
        let n = self.1.fetch_add(1, Ordering::Relaxed) + 1;
        self.0.raise(n);
    }

    fn priority(&self) -> u8 {
        self.2
    }
}

impl std::fmt::Debug for PoolProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PoolProbe")
    }
}

impl Default for PoolProbe {
    fn default() -> PoolProbe {
        PoolProbe::new()
    }
}

impl PoolProbe {
    /// A pool of one worker, nothing queued.
    pub fn new() -> PoolProbe {
        PoolProbe {
            pool: WorkerPool::start(1).expect("loom spawns threads"),
            done: Arc::new(Gate::new()),
            count: Arc::new(AtomicU64::new(0)),
            ran: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Queues `n` jobs of the default priority with one `push_many`, as a
    /// publisher that won `n` subscriptions in one walk does.
    pub fn push_many(&self, n: usize) {
        self.push_priorities(&vec![super::dispatch::DEFAULT_PRIORITY; n]);
    }

    /// Queues one job per entry of `priorities`, of that priority, with one
    /// `push_many`.
    pub fn push_priorities(&self, priorities: &[u8]) {
        let job = |&p: &u8| CountJob(self.done.clone(), self.count.clone(), p, self.ran.clone());
        self.pool.push_many(priorities.iter().map(job));
    }

    /// The priorities of the jobs run so far, in the order they ran.
    pub fn ran(&self) -> Vec<u8> {
        self.ran.lock().clone()
    }

    /// Waits until the worker is asleep in `wait` (yielding meanwhile).
    pub fn wait_asleep(&self) {
        while self.pool.sleeping() == 0 {
            thread::yield_now();
        }
    }

    /// Waits, without a deadline, until `n` jobs have run in all.
    pub fn wait_done(&self, n: u64) {
        self.done.wait(n);
    }

    /// Stops and joins the worker.
    pub fn stop(self) {
        self.pool.stop();
    }
}

/// The data directory's offsets store (`store/offsets.rs`) on a real directory, for
/// the group-commit model in `loom-tests/tests/store.rs`: the real
/// `Store::request` and `Store::wait`, with snapshots that hold one
/// group's committed offset, the number a test chooses.
pub struct OffsetsStore {
    store: super::store::Store,
    root: std::path::PathBuf,
}

/// A requested snapshot (`Store::request`'s ticket).
#[derive(Debug, Clone, Copy)]
pub struct StoreTicket(super::store::Ticket);

impl std::fmt::Debug for OffsetsStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OffsetsStore").field("root", &self.root).finish()
    }
}

impl OffsetsStore {
    /// Opens (creating it) the data directory `root`, under `Fsync::Never`
    /// (whether a snapshot is synced is each request's choice).
    pub fn open(root: &std::path::Path) -> OffsetsStore {
        let opened = super::store::Store::open(root, crate::log::Fsync::Never, false).expect("a fresh data directory");
        OffsetsStore { store: opened.store, root: root.to_owned() }
    }

    /// Numbers a snapshot whose one group has committed offset `n`, as the
    /// broker does under its control mutex; `sync`: its waiter wants it on
    /// stable storage.
    pub fn request(&self, n: u64, sync: bool) -> StoreTicket {
        StoreTicket(self.store.request(Self::snapshot(n), sync))
    }

    /// Waits for the snapshot of `ticket` (or a newer one) to be written,
    /// writing it if no one else is (`Store::wait`).
    pub fn wait(&self, ticket: StoreTicket) -> crate::error::Result<()> {
        self.store.wait(ticket.0)
    }

    /// The committed offset held by the newest valid snapshot on disk (what
    /// an open would find), or `None` if there is none.
    pub fn on_disk(&self) -> Option<u64> {
        let (offsets, _, _) = super::store::read_offsets(&self.root, false).expect("offsets readable");
        offsets.groups.first().and_then(|(_, _, partitions)| partitions[0])
    }

    fn snapshot(n: u64) -> super::store::Offsets {
        super::store::Offsets { groups: vec![("g".into(), "t".into(), vec![Some(n)])], durable: Vec::new() }
    }
}

/// The flusher's due word of `flusher.rs` ("Due: waking the flusher only
/// for work"), for `loom-tests/tests/flusher.rs`: a real log and a
/// flusher's state, due (as at its start). A publisher appends and marks
/// the flusher due ([`Due::mark`]); the flusher begins rounds
/// ([`Shared::begin`]), each of which looks at the log, and between them
/// sleeps unless marked ([`Shared::sleep_unless_due`]), as its thread does.
///
/// [`Due::mark`]: super::flusher::Due
/// [`Shared::begin`]: super::flusher::Shared
/// [`Shared::sleep_unless_due`]: super::flusher::Shared
pub struct FlushDue {
    log: Log,
    shared: Arc<super::flusher::Shared>,
    due: super::flusher::Due,
    /// The round's look at the log: what a sync round finds to sync.
    cursor: Mutex<crate::log::Cursor>,
}

impl std::fmt::Debug for FlushDue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FlushDue")
    }
}

impl FlushDue {
    /// An empty log and a flusher that is due.
    pub fn new() -> FlushDue {
        let shared = Arc::new(super::flusher::Shared::new());
        let due = super::flusher::Due::of(&shared);
        let config = LogConfig { segment_bytes: Some(crate::log::MIN_SEGMENT_BYTES), ..LogConfig::default() };
        let log = Log::new(&config).expect("a log");
        let mut cursor = log.cursor_from_first();
        // Located now, before the model starts (see `WakeAcross::new`: a
        // pin inside the look would stand in for D2).
        assert!(!cursor.has_next());
        FlushDue { log, shared, due, cursor: Mutex::new(cursor) }
    }

    /// A publisher: appends a record, then marks the flusher due.
    pub fn publish(&self) {
        self.log.append(&Record::new(b"x")).expect("room for one record");
        self.due.mark();
    }

    /// The flusher thread: rounds until one finds the record (sleeping
    /// between them, unless marked, as the real thread does).
    pub fn flusher_until_a_record(&self) {
        loop {
            self.shared.begin();
            if self.cursor.lock().has_next() {
                return;
            }
            self.shared.sleep_unless_due();
        }
    }
}

impl Default for FlushDue {
    fn default() -> Self {
        FlushDue::new()
    }
}

/// The topic map (`topic_map.rs`) with numbers for topics, for
/// `loom-tests/tests/topic_map.rs`: every name hashes alike, so a lookup
/// reads every name keyed before its own, and the smallest table has
/// `min_slots` slots, so a model can make an insert rebuild it.
pub struct NameMap(super::topic_map::TopicMap<u64, Colliding>);

/// A hasher under which every name collides (see [`NameMap`]).
#[derive(Debug, Clone, Copy)]
pub struct Colliding;

impl std::hash::BuildHasher for Colliding {
    type Hasher = Colliding;
    fn build_hasher(&self) -> Colliding {
        Colliding
    }
}

impl std::hash::Hasher for Colliding {
    fn finish(&self) -> u64 {
        // Any constant: every name's home is the same slot.
        0x5a5a
    }
    fn write(&mut self, _: &[u8]) {}
}

impl std::fmt::Debug for NameMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl NameMap {
    /// An empty map whose smallest table has `min_slots` slots: with 2, the
    /// second name rebuilds it (to 4 slots), and the third goes in place.
    pub fn new(min_slots: usize) -> Self {
        NameMap(super::topic_map::TopicMap::with_hasher(Colliding, min_slots))
    }

    /// Inserts `value` under `name`; false if the name has a value.
    pub fn insert(&self, name: &str, value: u64) -> bool {
        self.0.insert(name.into(), std::sync::Arc::new(value)).is_ok()
    }

    /// Removes `name`'s value; false if it had none.
    pub fn remove(&self, name: &str) -> bool {
        self.0.remove_if(name, |_| true).is_some()
    }

    /// The value under `name`.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.0.get(name).map(|v| **v)
    }
}

/// A partition's `Block` subscribers across processes
/// (`partition/blockers.rs`), for `loom-tests/tests/blockers.rs`: one
/// subscriber (in some process) holds a slot at position 0 with lag limit
/// 1, and one record is published, so a publisher (in another) of the
/// next one waits until the subscriber moves or detaches.
pub struct BlockAcross {
    shared: Arc<super::partition::blockers::SharedBlockers>,
    slot: super::partition::blockers::Slot,
}

impl std::fmt::Debug for BlockAcross {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BlockAcross")
    }
}

impl BlockAcross {
    /// The slot claimed and the record published, before the model's
    /// threads start.
    pub fn new() -> BlockAcross {
        let shared = super::partition::blockers::SharedBlockers::in_memory();
        let slot = super::partition::blockers::SharedBlockers::claim(&shared, 0, 1).expect("a free slot");
        BlockAcross { shared, slot }
    }

    /// The publisher of offset 1: waits, with no deadline, for room under
    /// the subscriber's limit (`SharedBlockers::wait`: its registration,
    /// K2, the sequence, the look, the futex).
    pub fn publisher_waits(&self) {
        assert!(self.shared.wait(None, 1, || 1, || self.shared.has_room(1, 1)), "no deadline");
    }

    /// The subscriber's drainer, after handling offset 0: stores its
    /// position, then K1 and the wake (`Partition::room_made`).
    pub fn subscriber_moves(&self) {
        self.shared.set_position(&self.slot, 1);
        self.shared.moved();
    }

    /// The subscriber detaches instead (closed, or its topic deleted).
    pub fn subscriber_detaches(&self) {
        self.slot.detach();
    }
}

impl Default for BlockAcross {
    fn default() -> Self {
        BlockAcross::new()
    }
}
