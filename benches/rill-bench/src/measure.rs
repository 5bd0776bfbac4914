//! The measurement machinery every harness shares: the shape of a run, the
//! per-subscriber tally (touch every payload byte, count, sample latency), the
//! producer loop (count, duration, pacing, abort), and the clock that starts
//! and stops a run.
//!
//! Throughput is *delivered* messages: each subscriber counts what it
//! handled; a run ends when every subscriber has seen (or been told it missed)
//! everything published. `msgs/s` is the mean per subscriber, so for a lossless
//! run it is the publish rate, and a lossy one (tokio's `Lagged`, rill's
//! `DropOldest`) gets no credit for what it skipped.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;
use rill::clock::now_ns;
use serde::Serialize;

/// Largest latency the histograms hold (60 s); longer ones are clamped.
pub const MAX_LATENCY_NS: u64 = 60_000_000_000;

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
}

impl Shape {
    /// Total messages the producers intend to publish (`None` in duration mode).
    pub fn planned(&self) -> Option<u64> {
        match self.amount {
            Amount::Messages(n) => Some(n * self.producers as u64),
            Amount::Seconds(_) => None,
        }
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
    expected: AtomicU64,
    /// Set when the run's time cap passes: producers stop.
    abort: AtomicBool,
    /// `now_ns()` when producers were released.
    start_ns: AtomicU64,
    slots: Vec<Slot>,
    hists: Vec<Mutex<Histogram<u64>>>,
    sample_every: u64,
}

impl Run {
    /// State for `shape.subscribers` subscribers.
    pub fn new(shape: &Shape) -> Arc<Run> {
        Arc::new(Run {
            expected: AtomicU64::new(shape.planned().unwrap_or(u64::MAX)),
            abort: AtomicBool::new(false),
            start_ns: AtomicU64::new(0),
            slots: (0..shape.subscribers).map(|_| Slot::default()).collect(),
            hists: (0..shape.subscribers).map(|_| Mutex::new(new_histogram())).collect(),
            sample_every: shape.sample_every.max(1),
        })
    }

    /// True once the time cap has passed.
    #[inline]
    pub fn aborted(&self) -> bool {
        self.abort.load(Ordering::Relaxed)
    }

    /// A tally for subscriber `idx`.
    pub fn tally(self: &Arc<Self>, idx: usize) -> Tally {
        Tally { run: self.clone(), idx, delivered: 0, sum: 0, next_sample: self.sample_every }
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
        let _ = self.slots[idx].finished_ns.compare_exchange(0, now_ns(), Ordering::Relaxed, Ordering::Relaxed);
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

/// What one subscriber does with every message: sum its bytes, count it,
/// sample its latency, and notice when it has seen everything.
#[derive(Debug)]
pub struct Tally {
    run: Arc<Run>,
    idx: usize,
    delivered: u64,
    sum: u64,
    next_sample: u64,
}

/// Reads every byte of a payload (a sum the compiler vectorises).
#[inline]
pub fn touch(payload: &[u8]) -> u64 {
    payload.iter().fold(0u64, |a, &b| a.wrapping_add(b as u64))
}

impl Tally {
    /// Handles one message published at `ts_ns` (on the `rill::clock` clock).
    #[inline]
    pub fn on(&mut self, payload: &[u8], ts_ns: u64) {
        self.sum = self.sum.wrapping_add(touch(payload));
        self.delivered += 1;
        if self.delivered >= self.next_sample {
            self.next_sample += self.run.sample_every;
            self.sample(now_ns().saturating_sub(ts_ns));
        }
        let slot = &self.run.slots[self.idx];
        slot.delivered.store(self.delivered, Ordering::Relaxed);
        if self.delivered + slot.missed.load(Ordering::Relaxed) >= self.run.expected.load(Ordering::Relaxed) {
            slot.sum.store(self.sum, Ordering::Relaxed);
            self.run.finish(self.idx);
        }
    }

    #[cold]
    #[inline(never)]
    fn sample(&self, latency_ns: u64) {
        let mut h = self.run.hists[self.idx].lock().unwrap_or_else(|e| e.into_inner());
        h.saturating_record(latency_ns.clamp(1, MAX_LATENCY_NS));
    }

    /// The system told this subscriber it skipped `n` messages.
    pub fn missed(&mut self, n: u64) {
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
    /// Sum of every payload byte every finished subscriber read (wrapping):
    /// equal across systems that delivered the same messages, so tests can
    /// check that a harness hands over the real bytes.
    pub payload_sum: u64,
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
            payload_sum: 0,
        }
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
                })
                .expect("spawn a producer");
        }
        barrier.wait();
        let start = now_ns();
        run.start_ns.store(start, Ordering::Relaxed);
        let deadline = start + timeout.as_nanos() as u64;
        let mut settled = false;
        loop {
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
            std::thread::sleep(Duration::from_micros(500));
        }
        // The scope joins the producers (they stop on `abort`).
    });
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
    Outcome { status, published, delivered, missed, subscribers, elapsed_ns, latency, payload_sum }
}

/// The bytes one producer publishes: `batch` buffers of `payload` bytes, each
/// stamped with a sequence number so no two messages are alike.
#[derive(Debug)]
pub struct Source {
    bufs: Vec<Vec<u8>>,
    seq: u64,
}

impl Source {
    /// Buffers for `shape`, tagged with the producer's index.
    pub fn new(shape: &Shape, producer: usize) -> Source {
        let bufs = (0..shape.batch.max(1)).map(|_| vec![0x5A; shape.payload]).collect();
        Source { bufs, seq: (producer as u64) << 48 }
    }

    /// The next `n` payloads (`n` at most the batch size).
    #[inline]
    pub fn next(&mut self, n: usize) -> &[Vec<u8>] {
        for b in &mut self.bufs[..n] {
            let tag = self.seq.to_le_bytes();
            let k = b.len().min(8);
            b[..k].copy_from_slice(&tag[..k]);
            self.seq += 1;
        }
        &self.bufs[..n]
    }
}

/// The producer loop every harness uses: publishes this producer's share in
/// steps of up to `shape.batch` messages through `step` (which returns false to
/// stop early), pacing to `shape.rate` if set, until the count or duration is
/// reached or the run is aborted. Returns the messages published.
pub fn drive(shape: &Shape, run: &Run, producer: usize, mut step: impl FnMut(&[Vec<u8>]) -> bool) -> u64 {
    let mut src = Source::new(shape, producer);
    let batch = shape.batch.max(1) as u64;
    let (limit, deadline) = match shape.amount {
        Amount::Messages(n) => (n, u64::MAX),
        Amount::Seconds(s) => (u64::MAX, now_ns() + (s * 1e9) as u64),
    };
    let interval = shape.rate.map(|r| 1e9 * shape.producers as f64 / r.max(1) as f64);
    let start = now_ns();
    let mut sent = 0u64;
    let mut next_check = 0u64;
    while sent < limit {
        if run.aborted() {
            break;
        }
        if let Some(iv) = interval {
            let due = start + (sent as f64 * iv) as u64;
            while now_ns() < due {
                std::hint::spin_loop();
            }
        }
        if sent >= next_check {
            next_check = sent + 256;
            if deadline != u64::MAX && now_ns() >= deadline {
                break;
            }
        }
        let n = batch.min(limit - sent) as usize;
        if !step(src.next(n)) {
            break;
        }
        sent += n as u64;
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
                        t.on(&m, ts);
                    }
                })
            })
            .collect();
        let sh = shape.clone();
        let producer: ProducerFn<'_> = Box::new(move |run| {
            drive(&sh, run, 0, |bufs| {
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
            drive(&sh, run, 0, |bufs| {
                for b in bufs {
                    t.on(b, now_ns());
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
        let mut src = Source::new(&shape, 1);
        let a = src.next(2).to_vec();
        let b = src.next(1).to_vec();
        assert_ne!(a[0], a[1]);
        assert_ne!(a[0], b[0]);
        assert_eq!(a[0].len(), 16);
    }
}
