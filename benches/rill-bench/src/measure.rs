//! The measurement machinery every harness shares: the shape of a run, the
//! per-subscriber tally (the per-message work of `--work`: count, sample
//! latency, and in `touch` mode sum the payload), the producer loop (count,
//! duration, pacing, stamping, abort), and the clock that starts and stops a
//! run.
//!
//! ## Minimal work, and how a run still ends exactly
//!
//! With [`Work::Minimal`] a subscriber does what the plain loop a user writes
//! does: `black_box` the payload and count it in a local. It writes no shared
//! memory per message (its count goes to its slot once per [`FLUSH_EVERY`]
//! messages and when it is done) and reads no clock per message (latency is
//! sampled on 1 in `sample_every` messages; peers' producers stamp only those).
//! What it does read per message is the run's final count, a word nobody
//! writes until the producers stop, so it stays in the subscriber's cache.
//!
//! That word has to be right before the last message arrives, or a subscriber
//! that has everything would never notice. In duration mode each producer that
//! reaches the deadline registers what it sent; the last one to register adds
//! its final step, stores the total as the final count, and only then sends
//! that step. Whatever a subscriber handles last, it handles no earlier than
//! that final step, which it acquired through the system's own Release/Acquire
//! handoff: the final count is visible to it when it handles its last message.
//!
//! Throughput is *delivered* messages: each subscriber counts what it
//! handled; a run ends when every subscriber has seen (or been told it missed)
//! everything published. `msgs/s` is the mean per subscriber, so for a lossless
//! run it is the publish rate, and a lossy one (tokio's `Lagged`, rill's
//! `DropOldest`) gets no credit for what it skipped.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use hdrhistogram::Histogram;
use rill::clock::now_ns;
use serde::Serialize;

/// Largest latency the histograms hold (60 s); longer ones are clamped.
pub const MAX_LATENCY_NS: u64 = 60_000_000_000;

/// A subscriber in minimal mode publishes its count once per this many messages
/// (and when it is done), so a run that hits its time cap still reports roughly
/// what was delivered.
pub const FLUSH_EVERY: u64 = 4096;

/// Messages an unpaced producer sends between two looks at the clock and
/// at the run (`drive`).
pub const CHECK_EVERY: u64 = 256;

/// Bytes of a peer payload that carry the producer's timestamp (0: not
/// stamped), after the 8-byte sequence tag. rill and bare-log carry their own
/// timestamp per record and never use these bytes.
pub const STAMP: std::ops::Range<usize> = 8..16;

/// What every subscriber of every system does with each message (`--work`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Work {
    /// What a plain loop does: `black_box` the payload, count it in a local. No
    /// shared write and no clock read per message: latency is sampled on 1 in
    /// `--sample-every` messages and peers' producers stamp only those.
    Minimal,
    /// The harness before issue 10: sum the payload bytes, store the count in
    /// the subscriber's shared slot per message, and (peers) the producer reads
    /// the clock for every message.
    Touch,
    /// Diagnostic: minimal, plus a producer clock read per message (peers).
    #[value(name = "minimal+stamp")]
    #[serde(rename = "minimal+stamp")]
    MinimalStamp,
    /// Diagnostic: minimal, plus the payload sum.
    #[value(name = "minimal+sum")]
    #[serde(rename = "minimal+sum")]
    MinimalSum,
    /// Diagnostic: minimal, plus a store of the count to the shared slot per message.
    #[value(name = "minimal+store")]
    #[serde(rename = "minimal+store")]
    MinimalStore,
}

impl Work {
    /// Its name on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            Work::Minimal => "minimal",
            Work::Touch => "touch",
            Work::MinimalStamp => "minimal+stamp",
            Work::MinimalSum => "minimal+sum",
            Work::MinimalStore => "minimal+store",
        }
    }

    /// Peers' producers read the clock for every message (else 1 in `sample_every`).
    pub fn stamps_every_message(self) -> bool {
        matches!(self, Work::Touch | Work::MinimalStamp)
    }

    /// Subscribers sum every payload byte.
    pub fn sums(self) -> bool {
        matches!(self, Work::Touch | Work::MinimalSum)
    }

    /// Subscribers store their count in their shared slot per message.
    pub fn stores(self) -> bool {
        matches!(self, Work::Touch | Work::MinimalStore)
    }
}

/// How subscribers are driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum SubMode {
    /// rill push subscriptions on the shared worker pool.
    Pool,
    /// rill push subscriptions, each on a dedicated thread.
    Dedicated,
    /// rill pull consumers, each on a thread calling `poll`.
    Pull,
    /// rill pull consumers, all members of one consumer group (they split
    /// the partitions, so together they see every message once), a thread
    /// each, committing after every batch.
    Group,
    /// rill push subscriptions, all shared members of one name (they split
    /// the partitions like a group), each on a dedicated thread.
    Shared,
}

/// What a handler does with each message besides counting it: the cost of
/// real work, to show how members of a group share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HandlerCost {
    /// Nothing (the [`Work`] mode alone).
    Free,
    /// Sleeps this many microseconds per message: a wait for I/O.
    SleepUs(u64),
    /// Spins on the CPU this many microseconds per message.
    SpinUs(u64),
}

impl HandlerCost {
    /// Pays the cost of one message.
    #[inline]
    pub fn pay(self) {
        match self {
            HandlerCost::Free => {}
            HandlerCost::SleepUs(us) => std::thread::sleep(Duration::from_micros(us)),
            HandlerCost::SpinUs(us) => {
                let until = Instant::now() + Duration::from_micros(us);
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
            }
        }
    }
}

/// rill's delivery mode, as a CLI value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Delivery {
    /// Cursor moves after the handler returns `Success` (rill's default).
    AtLeastOnce,
    /// Cursor moves before the handler runs.
    AtMostOnce,
}

/// How much each producer publishes in one run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Amount {
    /// This many messages per producer.
    Messages(u64),
    /// Publish for this long (seconds), then let the subscribers drain.
    Seconds(f64),
}

/// The shape of one run: the same for rill and every peer.
#[derive(Debug, Clone, Serialize)]
pub struct Shape {
    /// Publishing threads.
    pub producers: usize,
    /// Subscribers (push) or consumers (pull); every one sees every message.
    pub subscribers: usize,
    /// How rill drives its subscribers (peers always use their own way).
    pub mode: SubMode,
    /// rill topic partitions (peers have none).
    pub partitions: u32,
    /// Payload bytes per message.
    pub payload: usize,
    /// Messages per publish call (rill `publish_batch`, disruptor `batch_publish`; others send one by one).
    pub batch: usize,
    /// Most messages a rill pull consumer takes per `poll`.
    pub poll_batch: usize,
    /// How much to publish.
    pub amount: Amount,
    /// Total publish rate (msgs/s over all producers); `None`: as fast as possible.
    pub rate: Option<u64>,
    /// Messages a subscriber may fall behind: channel capacity / ring size,
    /// and rill's `lag_limit` under the `Block` overflow policy.
    pub capacity: usize,
    /// rill delivery mode.
    pub delivery: Delivery,
    /// Latency is sampled on every n-th message of each subscriber.
    pub sample_every: u64,
    /// rill dedicated subscribers: microseconds to keep polling before
    /// parking (`idle_spin`); 0 uses rill's default short spin.
    pub idle_spin_us: u64,
    /// What each subscriber does with each message.
    pub work: Work,
    /// What a handler's work costs per message, on top of `work`.
    pub handler: HandlerCost,
    /// rill on a data directory with this fsync policy; `None`: in memory.
    pub persist: Option<Persist>,
}

/// The fsync policy of a rill broker on a data directory (`persist-*` scenarios).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Persist {
    /// `Fsync::Never`.
    Never,
    /// `Fsync::Interval(100 ms)`, the default.
    Interval,
    /// `Fsync::Always`: every publish waits for its (shared) fdatasync.
    Always,
}

impl Shape {
    /// Total messages the producers intend to publish (`None` in duration mode).
    pub fn planned(&self) -> Option<u64> {
        match self.amount {
            Amount::Messages(n) => Some(n * self.producers as u64),
            Amount::Seconds(_) => None,
        }
    }

    /// Receivers that each see every message: the subscribers, or one for a
    /// consumer group (its members share the messages).
    pub fn receivers(&self) -> usize {
        if matches!(self.mode, SubMode::Group | SubMode::Shared) { 1 } else { self.subscribers }
    }

    /// One line describing the shape, e.g. "1 producer -> 8 subscribers (pool), 64 B".
    pub fn describe(&self) -> String {
        let plural = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let subs = match self.mode {
            SubMode::Pool => plural(self.subscribers, "push subscriber", "push subscribers") + " (worker pool)",
            SubMode::Dedicated => {
                plural(self.subscribers, "push subscriber", "push subscribers") + " (dedicated threads)"
            }
            SubMode::Pull => plural(self.subscribers, "pull consumer", "pull consumers"),
            SubMode::Group => format!("a consumer group of {}", plural(self.subscribers, "member", "members")),
            SubMode::Shared => {
                format!("a shared push subscription of {}", plural(self.subscribers, "member", "members"))
            }
        };
        let mut s =
            format!("{} -> {}, {} B payloads", plural(self.producers, "producer", "producers"), subs, self.payload);
        if self.partitions > 1 {
            s += &format!(", {} partitions", self.partitions);
        }
        if self.batch > 1 {
            s += &format!(", batches of {}", self.batch);
        }
        if let Some(r) = self.rate {
            s += &format!(", paced at {} msgs/s", crate::stats::fmt_count(r as f64));
        }
        s
    }
}

/// A fresh latency histogram (1 ns .. 60 s, 3 significant digits).
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("valid histogram bounds")
}

/// Per-subscriber counters, on a cache line of their own.
#[repr(align(128))]
#[derive(Debug, Default)]
struct Slot {
    /// Messages handled so far (written by the subscriber only).
    delivered: AtomicU64,
    /// Messages the system told the subscriber it skipped.
    missed: AtomicU64,
    /// `now_ns()` when it had seen everything; 0 until then.
    finished_ns: AtomicU64,
    /// The payload byte sum, stored at the end so it cannot be optimised away.
    sum: AtomicU64,
}

/// The state one run shares between its producers, subscribers and driver.
#[derive(Debug)]
pub struct Run {
    /// Messages each subscriber must account for; `u64::MAX` until known.
    /// Read by every subscriber per message, written once: its own line.
    expected: CachePadded<AtomicU64>,
    /// Producers of the run.
    producers: usize,
    /// Producers that reached the deadline, and what they had sent by then.
    stopped: AtomicUsize,
    stopped_sum: AtomicU64,
    /// Set when the run's time cap passes: producers stop.
    abort: AtomicBool,
    /// `now_ns()` when producers were released.
    start_ns: AtomicU64,
    /// The thread waiting in `execute`, woken when a subscriber finishes or a
    /// producer ends (so it does not poll: on a 2-core machine a poller
    /// waking every few hundred microseconds takes time from the run).
    driver: std::sync::OnceLock<std::thread::Thread>,
    slots: Vec<Slot>,
    hists: Vec<Mutex<Histogram<u64>>>,
    /// Durations of publish calls, for harnesses that time them (rill under
    /// `Fsync::Always`, where a publish waits for its fdatasync).
    publish_hist: Mutex<Histogram<u64>>,
    sample_every: u64,
    work: Work,
}

impl Run {
    /// State for `shape.subscribers` subscribers.
    pub fn new(shape: &Shape) -> Arc<Run> {
        Arc::new(Run {
            expected: CachePadded::new(AtomicU64::new(shape.planned().unwrap_or(u64::MAX))),
            producers: shape.producers.max(1),
            stopped: AtomicUsize::new(0),
            stopped_sum: AtomicU64::new(0),
            abort: AtomicBool::new(false),
            start_ns: AtomicU64::new(0),
            driver: std::sync::OnceLock::new(),
            slots: (0..shape.receivers()).map(|_| Slot::default()).collect(),
            hists: (0..shape.receivers()).map(|_| Mutex::new(new_histogram())).collect(),
            publish_hist: Mutex::new(new_histogram()),
            sample_every: shape.sample_every.max(1),
            work: shape.work,
        })
    }

    /// Adds a producer's publish-call durations (ns) to the run's.
    pub fn add_publish_latency(&self, h: &Histogram<u64>) {
        self.publish_hist.lock().unwrap_or_else(|e| e.into_inner()).add(h).expect("same bounds");
    }

    /// A producer reached the deadline having sent `sent`, with a final step
    /// of `last` messages in hand. Returns true if it is the last producer to
    /// stop: it has then fixed the final count and must send that step; the
    /// others stop without sending it (see the module docs).
    fn stop_producer(&self, sent: u64, last: u64) -> bool {
        // AcqRel on both: the last producer's increment of `stopped` acquires
        // every earlier producer's, each of which follows its add to
        // `stopped_sum` in program order, so the load below sees every sum.
        self.stopped_sum.fetch_add(sent, Ordering::AcqRel);
        if self.stopped.fetch_add(1, Ordering::AcqRel) + 1 < self.producers {
            return false;
        }
        let total = self.stopped_sum.load(Ordering::Acquire) + last;
        // SeqCst (Release would do): subscribers read it after acquiring the
        // final step, which is sent after this store.
        self.expected.store(total, Ordering::SeqCst);
        true
    }

    /// True once the time cap has passed.
    #[inline]
    pub fn aborted(&self) -> bool {
        self.abort.load(Ordering::Relaxed)
    }

    /// A tally for subscriber `idx`.
    pub fn tally(self: &Arc<Self>, idx: usize) -> Tally {
        Tally {
            run: self.clone(),
            idx,
            delivered: 0,
            sum: 0,
            next_sample: self.sample_every,
            next_flush: FLUSH_EVERY,
            sums: self.work.sums(),
            stores: self.work.stores(),
        }
    }

    /// Records that subscriber `idx` was told it skipped `n` messages (called
    /// from wherever the system reports it, e.g. rill's `on_lagged`).
    pub fn add_missed(&self, idx: usize, n: u64) {
        let slot = &self.slots[idx];
        let missed = slot.missed.fetch_add(n, Ordering::Relaxed) + n;
        if slot.delivered.load(Ordering::Relaxed) + missed >= self.expected.load(Ordering::Relaxed) {
            self.finish(idx);
        }
    }

    fn finish(&self, idx: usize) {
        let _ = self.slots[idx].finished_ns.compare_exchange(0, now_ns(), Ordering::SeqCst, Ordering::Relaxed);
        self.wake_driver();
    }

    fn wake_driver(&self) {
        if let Some(t) = self.driver.get() {
            t.unpark();
        }
    }

    fn all_finished(&self) -> bool {
        self.slots.iter().all(|s| s.finished_ns.load(Ordering::Relaxed) != 0)
    }

    /// Sets the final count once the producers are done, and finishes the
    /// subscribers that already had everything (they could not know).
    fn settle(&self, published: u64) {
        self.expected.store(published, Ordering::SeqCst);
        for (i, s) in self.slots.iter().enumerate() {
            if s.delivered.load(Ordering::SeqCst) + s.missed.load(Ordering::SeqCst) >= published {
                self.finish(i);
            }
        }
    }
}

/// What one subscriber does with every message ([`Work`]): count it, sample
/// its latency on 1 in `sample_every`, notice when it has seen everything, and
/// in `touch` mode sum its bytes and store its count per message.
#[derive(Debug)]
pub struct Tally {
    run: Arc<Run>,
    idx: usize,
    delivered: u64,
    sum: u64,
    next_sample: u64,
    next_flush: u64,
    sums: bool,
    stores: bool,
}

/// Reads a payload's bytes (a sum the compiler vectorises), all but the
/// [`STAMP`] bytes, which differ from run to run.
#[inline]
pub fn touch(payload: &[u8]) -> u64 {
    let sum = |b: &[u8]| b.iter().fold(0u64, |a, &x| a.wrapping_add(x as u64));
    let head = &payload[..payload.len().min(STAMP.start)];
    sum(head).wrapping_add(payload.get(STAMP.end..).map_or(0, sum))
}

/// The producer's timestamp in a peer payload (0 if it was not stamped).
#[inline]
pub fn stamp_of(payload: &[u8]) -> u64 {
    payload.get(STAMP).map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

impl Tally {
    /// Handles one message; `stamp` gives its publish time on the
    /// `rill::clock` clock (0: not stamped) and is called only for the
    /// messages sampled.
    #[inline]
    pub fn on(&mut self, payload: &[u8], stamp: impl FnOnce() -> u64) {
        if self.sums {
            self.sum = self.sum.wrapping_add(touch(payload));
        } else {
            std::hint::black_box(payload);
        }
        self.delivered += 1;
        if self.delivered >= self.next_sample {
            self.next_sample += self.run.sample_every;
            self.sample(stamp());
        }
        let slot = &self.run.slots[self.idx];
        if self.stores || self.delivered >= self.next_flush {
            self.next_flush = self.delivered + FLUSH_EVERY;
            slot.delivered.store(self.delivered, Ordering::Relaxed);
        }
        if self.delivered + slot.missed.load(Ordering::Relaxed) >= self.run.expected.load(Ordering::Relaxed) {
            self.done_now();
        }
    }

    #[cold]
    #[inline(never)]
    fn done_now(&self) {
        let slot = &self.run.slots[self.idx];
        slot.delivered.store(self.delivered, Ordering::Relaxed);
        slot.sum.store(self.sum, Ordering::Relaxed);
        self.run.finish(self.idx);
    }

    #[cold]
    #[inline(never)]
    fn sample(&self, ts_ns: u64) {
        if ts_ns == 0 {
            return; // not stamped (another producer's message, or no room)
        }
        let latency_ns = now_ns().saturating_sub(ts_ns);
        let mut h = self.run.hists[self.idx].lock().unwrap_or_else(|e| e.into_inner());
        h.saturating_record(latency_ns.clamp(1, MAX_LATENCY_NS));
    }

    /// The system told this subscriber it skipped `n` messages.
    pub fn missed(&mut self, n: u64) {
        // The shared count must be current before the check in `add_missed`.
        self.run.slots[self.idx].delivered.store(self.delivered, Ordering::Relaxed);
        self.run.add_missed(self.idx, n);
    }

    /// True once this subscriber has accounted for everything.
    pub fn done(&self) -> bool {
        self.run.slots[self.idx].finished_ns.load(Ordering::Relaxed) != 0
    }
}

/// Why a run did not produce a normal result.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", content = "detail", rename_all = "kebab-case")]
pub enum Status {
    /// Every subscriber accounted for every message.
    Ok,
    /// The time cap passed first; numbers cover what was delivered by then.
    Timeout,
    /// The system cannot run this shape (e.g. bus has one producer).
    Unsupported(String),
    /// The harness failed.
    Failed(String),
}

/// The result of one run of one system.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// How it ended.
    pub status: Status,
    /// Messages published (all producers).
    pub published: u64,
    /// Messages handled, summed over subscribers.
    pub delivered: u64,
    /// Messages skipped, summed over subscribers.
    pub missed: u64,
    /// Subscribers.
    pub subscribers: usize,
    /// From releasing the producers to the last subscriber finishing.
    pub elapsed_ns: u64,
    /// Sampled publish-to-handler latencies, all subscribers.
    pub latency: Histogram<u64>,
    /// Durations of publish calls, if the harness timed them (empty otherwise).
    pub publish_latency: Histogram<u64>,
    /// Sum of every payload byte every finished subscriber read (wrapping;
    /// only with a [`Work`] that sums, else 0): equal across systems that
    /// delivered the same messages, so tests can check that a harness hands
    /// over the real bytes.
    pub payload_sum: u64,
    /// Voluntary context switches of the whole process during the run: how
    /// often a thread blocked (a bounded channel in its blocking regime makes
    /// several per 1,000 messages; a spinning one almost none).
    pub ctx_switches: u64,
}

impl Outcome {
    /// A run that did not happen.
    pub fn not_run(status: Status, subscribers: usize) -> Outcome {
        Outcome {
            status,
            published: 0,
            delivered: 0,
            missed: 0,
            subscribers,
            elapsed_ns: 0,
            latency: new_histogram(),
            publish_latency: new_histogram(),
            payload_sum: 0,
            ctx_switches: 0,
        }
    }

    /// Voluntary context switches per 1,000 delivered messages.
    pub fn switches_per_1k(&self) -> f64 {
        if self.delivered == 0 { 0.0 } else { self.ctx_switches as f64 * 1000.0 / self.delivered as f64 }
    }

    /// Delivered messages per subscriber per second.
    pub fn msgs_per_sec(&self) -> f64 {
        if self.elapsed_ns == 0 || self.subscribers == 0 {
            return 0.0;
        }
        self.delivered as f64 / self.subscribers as f64 / (self.elapsed_ns as f64 / 1e9)
    }

    /// True if the run produced numbers (finished or timed out).
    pub fn measured(&self) -> bool {
        matches!(self.status, Status::Ok | Status::Timeout)
    }
}

/// Voluntary context switches of every thread of this process so far
/// (including threads that have ended).
pub fn voluntary_switches() -> u64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is a valid, writable `rusage`; getrusage only writes it.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if rc != 0 {
        return 0;
    }
    // SAFETY: zero-initialised above (a valid `rusage`) and filled by getrusage.
    let usage = unsafe { usage.assume_init() };
    usage.ru_nvcsw.max(0) as u64
}

/// A producer: the closure publishes its share (see [`drive`]) and returns how
/// many messages it published.
pub type ProducerFn<'a> = Box<dyn FnOnce(&Run) -> u64 + Send + 'a>;

/// Releases the producers together, waits for every subscriber to finish (or
/// the time cap), and measures. Subscribers must already be running.
pub fn execute(run: &Arc<Run>, timeout: Duration, producers: Vec<ProducerFn<'_>>) -> Outcome {
    let barrier = Barrier::new(producers.len() + 1);
    let done = AtomicU64::new(0);
    let published = AtomicU64::new(0);
    let n = producers.len() as u64;
    let status = std::thread::scope(|s| {
        for p in producers {
            let (barrier, done, published, run) = (&barrier, &done, &published, &**run);
            std::thread::Builder::new()
                .name("bench-producer".into())
                .spawn_scoped(s, move || {
                    barrier.wait();
                    let sent = p(run);
                    published.fetch_add(sent, Ordering::SeqCst);
                    done.fetch_add(1, Ordering::SeqCst);
                    run.wake_driver();
                })
                .expect("spawn a producer");
        }
        let _ = run.driver.set(std::thread::current());
        let switches = voluntary_switches();
        barrier.wait();
        let start = now_ns();
        run.start_ns.store(start, Ordering::Relaxed);
        let deadline = start + timeout.as_nanos() as u64;
        let mut settled = false;
        let status = loop {
            if !settled && done.load(Ordering::SeqCst) == n {
                run.settle(published.load(Ordering::SeqCst));
                settled = true;
            }
            if settled && run.all_finished() {
                break Status::Ok;
            }
            if now_ns() > deadline {
                run.abort.store(true, Ordering::Relaxed);
                break Status::Timeout;
            }
            // Woken by `finish` and by producers ending; the timeout only
            // bounds how late a missed wake-up or the time cap is noticed.
            std::thread::park_timeout(Duration::from_millis(20));
        };
        (status, voluntary_switches().saturating_sub(switches))
        // The scope joins the producers (they stop on `abort`).
    });
    let (status, ctx_switches) = status;
    let published = published.load(Ordering::SeqCst);
    let start = run.start_ns.load(Ordering::Relaxed);
    let end = match status {
        Status::Ok => run.slots.iter().map(|s| s.finished_ns.load(Ordering::Relaxed)).max().unwrap_or(start),
        _ => start + timeout.as_nanos() as u64,
    };
    let mut latency = new_histogram();
    for h in &run.hists {
        let h = h.lock().unwrap_or_else(|e| e.into_inner());
        latency.add(&*h).expect("same bounds");
    }
    let delivered: u64 = run.slots.iter().map(|s| s.delivered.load(Ordering::Relaxed)).sum();
    let missed: u64 = run.slots.iter().map(|s| s.missed.load(Ordering::Relaxed)).sum();
    let payload_sum = run.slots.iter().fold(0u64, |a, s| a.wrapping_add(s.sum.load(Ordering::Relaxed)));
    let subscribers = run.slots.len();
    // Every subscriber must account for every message exactly once.
    let status = match status {
        Status::Ok if delivered + missed != published * subscribers as u64 => Status::Failed(format!(
            "count mismatch: {published} published x {subscribers} subscribers, {delivered} delivered + {missed} missed"
        )),
        s => s,
    };
    let elapsed_ns = end.saturating_sub(start).max(1);
    let publish_latency = run.publish_hist.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Outcome {
        status,
        published,
        delivered,
        missed,
        subscribers,
        elapsed_ns,
        latency,
        publish_latency,
        payload_sum,
        ctx_switches,
    }
}

/// Which messages a producer stamps with the clock, in the [`STAMP`] bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stamp {
    /// None: the system stamps its own records (rill, bare-log).
    Never,
    /// Every message (`Work::Touch`, and the latency scenario's 1 in 1).
    Every,
    /// The producer's every n-th message, the ones a subscriber samples.
    OneIn(u64),
}

impl Stamp {
    /// What a peer's producer stamps under `shape`.
    pub fn for_peer(shape: &Shape) -> Stamp {
        if shape.work.stamps_every_message() || shape.sample_every <= 1 {
            Stamp::Every
        } else {
            Stamp::OneIn(shape.sample_every)
        }
    }
}

/// The bytes one producer publishes: `batch` buffers of `payload` bytes,
/// stamped with the clock as `stamp` says (payloads of 16 bytes or more), and,
/// with a work that reads the payload, each tagged with a sequence number so
/// no two messages are alike (what the payload check needs). With minimal
/// work they are not tagged: like a user's loop, the producer sends bytes it
/// already has (writing 8 bytes and then copying the 64 around them stalls
/// the producer on store forwarding, a cost a user's loop does not have).
///
/// Under `Stamp::OneIn` a buffer's stamp bytes are written only when they
/// change (a stamp, and the zero after it), not with a zero for every
/// message: a peer then copies its message out of a buffer written only in
/// its sampled messages, as a user's loop copies bytes it has. An 8-byte
/// store per message, read back within the 64-byte copy that follows, is a
/// store-forwarding stall per message, and that stall alone took
/// crossbeam's harnessed one-to-one to about half its plain loop.
#[derive(Debug)]
pub struct Source {
    bufs: Vec<Vec<u8>>,
    seq: u64,
    tag: bool,
    /// Messages until the next one stamped under `Stamp::OneIn` (a countdown,
    /// not a division per message).
    until_stamp: u64,
    stamp: Stamp,
}

impl Source {
    /// Buffers for `shape`, tagged with the producer's index.
    pub fn new(shape: &Shape, producer: usize, stamp: Stamp) -> Source {
        let bufs = (0..shape.batch.max(1)).map(|_| vec![0x5A; shape.payload]).collect();
        let stamp = if shape.payload >= STAMP.end { stamp } else { Stamp::Never };
        let until_stamp = if let Stamp::OneIn(k) = stamp { k.max(1) } else { 0 };
        Source { bufs, seq: (producer as u64) << 48, tag: shape.work.sums(), until_stamp, stamp }
    }

    /// The next `n` payloads (`n` at most the batch size).
    #[inline(always)]
    pub fn next(&mut self, n: usize) -> &[Vec<u8>] {
        for b in &mut self.bufs[..n] {
            if self.tag {
                let tag = self.seq.to_le_bytes();
                match b.get_mut(..8) {
                    Some(head) => head.copy_from_slice(&tag),
                    None => {
                        let k = b.len();
                        b.copy_from_slice(&tag[..k]);
                    }
                }
                self.seq += 1;
            }
            let ts = match self.stamp {
                Stamp::Never => continue,
                Stamp::Every => now_ns(),
                Stamp::OneIn(k) => {
                    self.until_stamp -= 1;
                    if self.until_stamp == 0 {
                        self.until_stamp = k.max(1);
                        now_ns()
                    } else {
                        0
                    }
                }
            };
            // Only when they change (see the type's docs); the buffer's
            // first message zeroes its filler bytes.
            if ts != 0 || stamp_of(b) != 0 {
                b[STAMP].copy_from_slice(&ts.to_le_bytes());
            }
        }
        &self.bufs[..n]
    }
}

/// The producer loop every harness uses: publishes this producer's share in
/// steps of up to `shape.batch` messages through `step` (which returns false to
/// stop early), stamped as `stamp` says, pacing to `shape.rate` if set, until
/// the count or duration is reached or the run is aborted. Returns the
/// messages published.
///
/// Unpaced, it looks at the clock and the run once per [`CHECK_EVERY`]
/// messages and runs the steps between as a plain loop does (no load of the
/// run's state and no branch on the deadline per message); paced, before
/// every step, since pacing reads the clock anyway (a paced run used to see
/// its deadline only every 256 messages, up to 256 intervals late).
pub fn drive(shape: &Shape, run: &Run, producer: usize, stamp: Stamp, mut step: impl FnMut(&[Vec<u8>]) -> bool) -> u64 {
    let mut src = Source::new(shape, producer, stamp);
    let batch = shape.batch.max(1) as u64;
    let (limit, deadline) = match shape.amount {
        Amount::Messages(n) => (n, u64::MAX),
        Amount::Seconds(s) => (u64::MAX, now_ns() + (s * 1e9) as u64),
    };
    let interval = shape.rate.map(|r| 1e9 * shape.producers as f64 / r.max(1) as f64);
    let check_every = if interval.is_some() { 1 } else { CHECK_EVERY };
    let start = now_ns();
    let mut sent = 0u64;
    while sent < limit && !run.aborted() {
        let mut last = false;
        if deadline != u64::MAX && now_ns() >= deadline {
            // Only the last producer to stop sends one more step, after
            // fixing the final count (see the module docs).
            if !run.stop_producer(sent, batch.min(limit - sent)) {
                break;
            }
            last = true;
        }
        let until = if last { sent + 1 } else { limit.min(sent.saturating_add(check_every)) };
        while sent < until {
            if let Some(iv) = interval {
                let due = start + (sent as f64 * iv) as u64;
                while now_ns() < due {
                    std::hint::spin_loop();
                }
            }
            let n = batch.min(limit - sent) as usize;
            if !step(src.next(n)) {
                return sent;
            }
            sent += n as u64;
        }
        if last {
            break;
        }
    }
    sent
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(subscribers: usize, amount: Amount) -> Shape {
        Shape {
            producers: 1,
            subscribers,
            mode: SubMode::Pool,
            partitions: 1,
            payload: 16,
            batch: 4,
            poll_batch: 64,
            amount,
            rate: None,
            capacity: 64,
            delivery: Delivery::AtLeastOnce,
            sample_every: 2,
            idle_spin_us: 0,
            work: Work::Touch,
            handler: HandlerCost::Free,
            persist: None,
        }
    }

    #[test]
    fn a_run_over_a_plain_channel_counts_everything() {
        let shape = shape(2, Amount::Messages(1000));
        let run = Run::new(&shape);
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..2).map(|_| std::sync::mpsc::sync_channel::<(u64, Vec<u8>)>(16)).unzip();
        let subs: Vec<_> = rxs
            .into_iter()
            .enumerate()
            .map(|(i, rx)| {
                let mut t = run.tally(i);
                std::thread::spawn(move || {
                    for (ts, m) in rx {
                        t.on(&m, || ts);
                    }
                })
            })
            .collect();
        let sh = shape.clone();
        let producer: ProducerFn<'_> = Box::new(move |run| {
            drive(&sh, run, 0, Stamp::Never, |bufs| {
                for b in bufs {
                    for tx in &txs {
                        tx.send((now_ns(), b.clone())).unwrap();
                    }
                }
                true
            })
        });
        let out = execute(&run, Duration::from_secs(30), vec![producer]);
        for s in subs {
            s.join().unwrap();
        }
        assert_eq!(out.status, Status::Ok);
        assert_eq!(out.published, 1000);
        assert_eq!(out.delivered, 2000);
        assert_eq!(out.missed, 0);
        assert_eq!(out.latency.len(), 1000, "every second message of each subscriber is sampled");
        assert!(out.msgs_per_sec() > 0.0);
    }

    #[test]
    fn duration_mode_settles_subscribers_that_were_already_done() {
        let shape = shape(1, Amount::Seconds(0.01));
        let run = Run::new(&shape);
        let mut t = run.tally(0);
        let sh = shape.clone();
        // The "subscriber" handles each message inside the producer, so it has
        // seen everything before the count is known: settle must finish it.
        let producer: ProducerFn<'_> = Box::new(move |run| {
            drive(&sh, run, 0, Stamp::Never, |bufs| {
                for b in bufs {
                    t.on(b, now_ns);
                }
                true
            })
        });
        let out = execute(&run, Duration::from_secs(30), vec![producer]);
        assert_eq!(out.status, Status::Ok);
        assert!(out.published > 0);
        assert_eq!(out.delivered, out.published);
    }

    #[test]
    fn sources_tag_every_payload() {
        let shape = shape(1, Amount::Messages(8));
        let mut src = Source::new(&shape, 1, Stamp::Never);
        let a = src.next(2).to_vec();
        let b = src.next(1).to_vec();
        assert_ne!(a[0], a[1]);
        assert_ne!(a[0], b[0]);
        assert_eq!(a[0].len(), 16);
        assert_eq!(touch(&a[0]) - touch(&a[0][..8]), 0, "the stamp bytes are not summed");
    }

    #[test]
    fn producers_stamp_one_in_n_or_every_message() {
        let shape = shape(1, Amount::Messages(8));
        let mut one_in_3 = Source::new(&shape, 0, Stamp::OneIn(3));
        let stamped: Vec<bool> = (0..6).map(|_| stamp_of(&one_in_3.next(1)[0]) != 0).collect();
        // Six messages through the one buffer: its stamp bytes are zero
        // before the first stamp and again after each.
        assert_eq!(stamped, [false, false, true, false, false, true]);
        let mut every = Source::new(&shape, 0, Stamp::Every);
        assert!((0..4).all(|_| stamp_of(&every.next(1)[0]) != 0));
        // Too short to hold a stamp: never stamped, never misread.
        let short = Shape { payload: 12, ..shape.clone() };
        let mut s = Source::new(&short, 0, Stamp::Every);
        assert_eq!(stamp_of(&s.next(1)[0]), 0);
        // Touch stamps every message; minimal only the sampled ones.
        let minimal = Shape { work: Work::Minimal, sample_every: 64, ..shape.clone() };
        assert_eq!(Stamp::for_peer(&minimal), Stamp::OneIn(64));
        assert_eq!(Stamp::for_peer(&Shape { sample_every: 1, ..minimal.clone() }), Stamp::Every);
        assert_eq!(Stamp::for_peer(&Shape { work: Work::Touch, ..minimal }), Stamp::Every);
    }

    #[test]
    fn minimal_tallies_write_their_count_only_now_and_then() {
        let shape = Shape { work: Work::Minimal, ..shape(1, Amount::Seconds(1.0)) };
        let run = Run::new(&shape);
        let mut t = run.tally(0);
        for _ in 0..FLUSH_EVERY - 1 {
            t.on(&[0; 16], || 0);
        }
        assert_eq!(run.slots[0].delivered.load(Ordering::Relaxed), 0, "no shared write per message");
        t.on(&[0; 16], || 0);
        assert_eq!(run.slots[0].delivered.load(Ordering::Relaxed), FLUSH_EVERY);
        let touch = Shape { work: Work::Touch, ..shape };
        let run = Run::new(&touch);
        let mut t = run.tally(0);
        t.on(&[0; 16], || 0);
        assert_eq!(run.slots[0].delivered.load(Ordering::Relaxed), 1, "touch stores per message");
    }
}
