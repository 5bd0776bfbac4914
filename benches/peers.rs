//! rill side by side with its peers, in the same criterion groups, so one
//! `cargo bench --bench peers` gives rill-vs-peer ratios:
//!
//! * `peers_publish_64B/<system>/<producers>`: 1 and 2 producers -> 1 subscriber;
//! * `peers_fan_out_64B/<system>/<subscribers>`: 1 producer -> 1, 4, 16 subscribers;
//! * `peers_poll_64B/<system>/<batch>`: a reader taking pre-published messages in
//!   batches of 1, 64 and 1024 (rill `Consumer::poll`, disruptor
//!   `EventPoller::take`, flume `drain`, and one at a time for the others).
//!
//! Throughput is messages published per second; a sample ends when every
//! subscriber has seen every message. The harnesses follow `benches/rill-bench`
//! (see its `PEERS.md`): payloads are 64-byte buffers (`Vec<u8>` for the
//! channel peers, one clone per subscriber; pre-allocated ring slots filled in
//! place for the disruptor), every subscriber sums every payload byte, and
//! every system buffers at most `CAPACITY` messages per subscriber (rill:
//! `Overflow::Block` with `lag_limit = CAPACITY`; retention 64 MiB, warmed up
//! by criterion's warm-up phase). Only delivered messages count: tokio's
//! broadcast skips what a lagging receiver missed (`Lagged`; it has no flow
//! control), and such samples are scaled to the time delivering everything
//! would take at the rate achieved. bus is single-producer, so it has no
//! 2-producer entry.
//!
//! The disruptor's processors busy-spin: with 16 of them on a machine with
//! fewer cores they crawl; each of its samples is capped (see `DEADLINE`), and
//! a capped sample is reported at the rate it reached (scaled as above), not
//! hidden.
//!
//! For interleaved, paired comparisons on a noisy machine use
//! `cargo run --release --bin rill-bench -- --suite report` instead.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rill::{
    Ack, Broker, BrokerConfig, ConsumerOptions, ConsumerStart, Message, Overflow, Publisher, Record,
    SubscriptionOptions, TopicOptions,
};

const PAYLOAD: usize = 64;
const CAPACITY: usize = 4096;
/// Longest one disruptor sample may take before it stops publishing.
const DEADLINE: Duration = Duration::from_secs(5);

/// Reads every byte of a payload.
#[inline]
fn touch(payload: &[u8]) -> u64 {
    payload.iter().fold(0u64, |a, &b| a.wrapping_add(b as u64))
}

/// A subscriber's progress, on its own cache line: messages seen (handled
/// or skipped) and, of those, skipped.
#[repr(align(128))]
#[derive(Debug, Default)]
struct Count {
    seen: AtomicU64,
    skipped: AtomicU64,
}

/// What a subscriber does with each message: read it, count it.
#[derive(Debug)]
struct Sink {
    count: Arc<Count>,
    seen: u64,
    sum: u64,
}

impl Sink {
    fn new() -> (Sink, Arc<Count>) {
        let count = Arc::new(Count::default());
        (Sink { count: count.clone(), seen: 0, sum: 0 }, count)
    }

    #[inline]
    fn on(&mut self, payload: &[u8]) {
        self.sum = self.sum.wrapping_add(touch(payload));
        self.seen += 1;
        self.count.seen.store(self.seen, Ordering::Release);
    }

    /// Messages the system skipped for this subscriber (tokio's `Lagged`).
    fn skipped(&mut self, n: u64) {
        self.seen += n;
        self.count.skipped.fetch_add(n, Ordering::Relaxed);
        self.count.seen.store(self.seen, Ordering::Release);
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        black_box(self.sum);
    }
}

/// Waits until every subscriber has seen `target` messages.
fn wait_all(counts: &[Arc<Count>], target: u64) {
    for c in counts {
        while c.seen.load(Ordering::Acquire) < target {
            std::thread::yield_now();
        }
    }
}

/// A system set up with its subscribers running.
trait Fixture {
    /// Publishes `per_producer` messages from each of `producers` threads;
    /// returns how many were published in all.
    fn publish(&mut self, producers: usize, per_producer: u64) -> u64;
    /// The subscribers' progress.
    fn counts(&self) -> &[Arc<Count>];
}

/// Runs `publish` on `producers` threads (released together), or inline for one.
fn on_threads<T: Send>(
    items: &mut [T],
    producers: usize,
    per: u64,
    publish: impl Fn(&mut T, u64) -> u64 + Sync,
) -> u64 {
    if producers == 1 {
        return publish(&mut items[0], per);
    }
    let barrier = Barrier::new(producers);
    std::thread::scope(|s| {
        let handles: Vec<_> = items
            .iter_mut()
            .take(producers)
            .map(|item| {
                let (barrier, publish) = (&barrier, &publish);
                s.spawn(move || {
                    barrier.wait();
                    publish(item, per)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    })
}

fn body() -> Vec<u8> {
    vec![0x5A; PAYLOAD]
}

// ---- rill ----

struct RillFixture {
    broker: Broker,
    publishers: Vec<Publisher>,
    counts: Vec<Arc<Count>>,
    _subs: Vec<rill::Subscription>,
}

impl RillFixture {
    fn new(subscribers: usize, producers: usize) -> Self {
        let broker = Broker::new(BrokerConfig::default()).unwrap();
        let topic = TopicOptions { retention_bytes: Some(64 << 20), ..TopicOptions::default() };
        broker.create_topic("bench", &topic).unwrap();
        let mut counts = Vec::new();
        let subs = (0..subscribers)
            .map(|_| {
                let (mut sink, count) = Sink::new();
                counts.push(count);
                let options = SubscriptionOptions {
                    overflow: Overflow::Block,
                    lag_limit: Some(CAPACITY as u64),
                    ..SubscriptionOptions::default()
                };
                broker
                    .subscribe("bench", options, move |m: &Message<'_>| {
                        sink.on(m.payload());
                        Ack::Success
                    })
                    .unwrap()
            })
            .collect();
        let publishers = (0..producers).map(|_| broker.publisher("bench").unwrap()).collect();
        RillFixture { broker, publishers, counts, _subs: subs }
    }
}

impl Fixture for RillFixture {
    fn publish(&mut self, producers: usize, per: u64) -> u64 {
        on_threads(&mut self.publishers, producers, per, |p, n| {
            let body = body();
            for _ in 0..n {
                black_box(p.publish(&Record::new(&body)).unwrap());
            }
            n
        })
    }
    fn counts(&self) -> &[Arc<Count>] {
        &self.counts
    }
}

impl Drop for RillFixture {
    fn drop(&mut self) {
        self.broker.close();
    }
}

// ---- crossbeam-channel and flume: a bounded channel per subscriber ----

struct ChannelFixture<Tx> {
    /// One clone of every subscriber's sender per producer.
    senders: Vec<Vec<Tx>>,
    counts: Vec<Arc<Count>>,
    threads: Vec<JoinHandle<()>>,
    send: fn(&Tx, Vec<u8>),
}

impl<Tx: Clone + Send + Sync> ChannelFixture<Tx> {
    fn new<Rx: Send + 'static>(
        subscribers: usize,
        producers: usize,
        make: impl Fn() -> (Tx, Rx),
        send: fn(&Tx, Vec<u8>),
        recv: fn(Rx, Sink),
    ) -> Self {
        let mut txs = Vec::new();
        let mut counts = Vec::new();
        let mut threads = Vec::new();
        for _ in 0..subscribers {
            let (tx, rx) = make();
            let (sink, count) = Sink::new();
            txs.push(tx);
            counts.push(count);
            threads.push(std::thread::spawn(move || recv(rx, sink)));
        }
        let senders = (0..producers).map(|_| txs.clone()).collect();
        ChannelFixture { senders, counts, threads, send }
    }
}

impl<Tx: Send + Sync> Fixture for ChannelFixture<Tx> {
    fn publish(&mut self, producers: usize, per: u64) -> u64 {
        let send = self.send;
        on_threads(&mut self.senders, producers, per, |txs, n| {
            let body = body();
            let (last, rest) = txs.split_last().unwrap();
            for _ in 0..n {
                let m = body.clone();
                for tx in rest {
                    send(tx, m.clone());
                }
                send(last, m);
            }
            n
        })
    }
    fn counts(&self) -> &[Arc<Count>] {
        &self.counts
    }
}

impl<Tx> Drop for ChannelFixture<Tx> {
    fn drop(&mut self) {
        self.senders.clear();
        for t in self.threads.drain(..) {
            t.join().unwrap();
        }
    }
}

fn crossbeam_fixture(subscribers: usize, producers: usize) -> ChannelFixture<crossbeam_channel::Sender<Vec<u8>>> {
    ChannelFixture::new(
        subscribers,
        producers,
        || crossbeam_channel::bounded(CAPACITY),
        |tx, m| tx.send(m).unwrap(),
        |rx: crossbeam_channel::Receiver<Vec<u8>>, mut sink| {
            for m in rx {
                sink.on(&m);
            }
        },
    )
}

fn flume_fixture(subscribers: usize, producers: usize) -> ChannelFixture<flume::Sender<Vec<u8>>> {
    ChannelFixture::new(
        subscribers,
        producers,
        || flume::bounded(CAPACITY),
        |tx, m| tx.send(m).unwrap(),
        |rx: flume::Receiver<Vec<u8>>, mut sink| {
            for m in rx {
                sink.on(&m);
            }
        },
    )
}

// ---- tokio::sync::broadcast ----

struct TokioFixture {
    senders: Vec<tokio::sync::broadcast::Sender<Vec<u8>>>,
    counts: Vec<Arc<Count>>,
    threads: Vec<JoinHandle<()>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl TokioFixture {
    /// Receivers as tasks on a multi-thread runtime, or (`blocking`) on OS
    /// threads with `blocking_recv`.
    fn new(subscribers: usize, producers: usize, blocking: bool) -> Self {
        use tokio::sync::broadcast::error::RecvError;
        let (tx, _) = tokio::sync::broadcast::channel::<Vec<u8>>(CAPACITY);
        let runtime = (!blocking).then(|| tokio::runtime::Builder::new_multi_thread().build().unwrap());
        let mut counts = Vec::new();
        let mut threads = Vec::new();
        for _ in 0..subscribers {
            let mut rx = tx.subscribe();
            let (mut sink, count) = Sink::new();
            counts.push(count);
            match &runtime {
                Some(rt) => {
                    rt.spawn(async move {
                        loop {
                            match rx.recv().await {
                                Ok(m) => sink.on(&m),
                                Err(RecvError::Lagged(n)) => sink.skipped(n),
                                Err(RecvError::Closed) => break,
                            }
                        }
                    });
                }
                None => threads.push(std::thread::spawn(move || {
                    loop {
                        match rx.blocking_recv() {
                            Ok(m) => sink.on(&m),
                            Err(RecvError::Lagged(n)) => sink.skipped(n),
                            Err(RecvError::Closed) => break,
                        }
                    }
                })),
            }
        }
        let senders = (0..producers).map(|_| tx.clone()).collect();
        TokioFixture { senders, counts, threads, runtime }
    }
}

impl Fixture for TokioFixture {
    fn publish(&mut self, producers: usize, per: u64) -> u64 {
        on_threads(&mut self.senders, producers, per, |tx, n| {
            let body = body();
            for _ in 0..n {
                let _ = tx.send(body.clone());
            }
            n
        })
    }
    fn counts(&self) -> &[Arc<Count>] {
        &self.counts
    }
}

impl Drop for TokioFixture {
    fn drop(&mut self) {
        self.senders.clear();
        for t in self.threads.drain(..) {
            t.join().unwrap();
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(5));
        }
    }
}

// ---- bus ----

struct BusFixture {
    bus: Option<bus::Bus<Vec<u8>>>,
    counts: Vec<Arc<Count>>,
    threads: Vec<JoinHandle<()>>,
}

impl BusFixture {
    fn new(subscribers: usize) -> Self {
        let mut bus = bus::Bus::<Vec<u8>>::new(CAPACITY);
        let mut counts = Vec::new();
        let threads = (0..subscribers)
            .map(|_| {
                let mut rx = bus.add_rx();
                let (mut sink, count) = Sink::new();
                counts.push(count);
                std::thread::spawn(move || {
                    for m in rx.iter() {
                        sink.on(&m);
                    }
                })
            })
            .collect();
        BusFixture { bus: Some(bus), counts, threads }
    }
}

impl Fixture for BusFixture {
    fn publish(&mut self, producers: usize, per: u64) -> u64 {
        assert_eq!(producers, 1, "bus is single-producer");
        let bus = self.bus.as_mut().unwrap();
        let body = body();
        for _ in 0..per {
            bus.broadcast(body.clone());
        }
        per
    }
    fn counts(&self) -> &[Arc<Count>] {
        &self.counts
    }
}

impl Drop for BusFixture {
    fn drop(&mut self) {
        self.bus = None;
        for t in self.threads.drain(..) {
            t.join().unwrap();
        }
    }
}

// ---- disruptor ----

/// A ring slot: a payload buffer filled in place.
struct Slot {
    data: Vec<u8>,
}

fn slot() -> Slot {
    Slot { data: vec![0; PAYLOAD] }
}

fn slot_handler(mut sink: Sink) -> impl FnMut(&Slot, disruptor::Sequence, bool) + Send + 'static {
    move |e: &Slot, _, _| sink.on(&e.data)
}

struct DisruptorFixture<P> {
    producers: Vec<P>,
    counts: Vec<Arc<Count>>,
    /// Set when a sample ran past `DEADLINE` (reported once).
    capped: Arc<AtomicBool>,
}

fn disruptor_fixture(subscribers: usize, producers: usize) -> Box<dyn Fixture> {
    use disruptor::BusySpin;
    let ring = CAPACITY;
    let mut counts = Vec::new();
    let mut sink = || {
        let (s, c) = Sink::new();
        counts.push(c);
        slot_handler(s)
    };
    let capped = Arc::new(AtomicBool::new(false));
    match (producers, subscribers) {
        (1, 1) => {
            let p = disruptor::build_single_producer(ring, slot, BusySpin).handle_events_with(sink()).build();
            Box::new(DisruptorFixture { producers: vec![p], counts, capped })
        }
        (1, n) => {
            let mut b = disruptor::build_single_producer(ring, slot, BusySpin).with_multi_consumer();
            for _ in 0..n {
                b = b.handle_events_with(sink());
            }
            let p = b.build();
            Box::new(DisruptorFixture { producers: vec![p], counts, capped })
        }
        (k, n) => {
            let mut b = disruptor::build_multi_producer(ring, slot, BusySpin).with_multi_consumer();
            for _ in 0..n {
                b = b.handle_events_with(sink());
            }
            let p = b.build();
            let mut ps: Vec<_> = (1..k).map(|_| p.clone()).collect();
            ps.push(p);
            Box::new(DisruptorFixture { producers: ps, counts, capped })
        }
    }
}

impl<P: disruptor::Producer<Slot> + Send> Fixture for DisruptorFixture<P> {
    fn publish(&mut self, producers: usize, per: u64) -> u64 {
        let deadline = Instant::now() + DEADLINE;
        let capped = &self.capped;
        on_threads(&mut self.producers, producers, per, |p, n| {
            let body = body();
            let mut sent = 0;
            while sent < n {
                match p.try_publish(|e| e.data.copy_from_slice(&body)) {
                    Ok(_) => sent += 1,
                    Err(disruptor::RingBufferFull) => {
                        if Instant::now() > deadline {
                            if !capped.swap(true, Ordering::Relaxed) {
                                eprintln!(
                                    "disruptor: a sample ran past {DEADLINE:?} (busy-spinning processors outnumber cores); capped"
                                );
                            }
                            // Stop here: the sample's time is scaled up
                            // to what publishing everything would take.
                            break;
                        }
                        std::hint::spin_loop();
                    }
                }
            }
            sent
        })
    }
    fn counts(&self) -> &[Arc<Count>] {
        &self.counts
    }
}

// ---- the groups ----

fn skipped(counts: &[Arc<Count>]) -> u64 {
    counts.iter().map(|c| c.skipped.load(Ordering::Relaxed)).sum()
}

/// Times publishing `iters` messages (split over `producers`) until every
/// subscriber has seen them. Only delivered messages count: a sample in which
/// subscribers skipped messages (tokio's `Lagged`), or that stopped publishing
/// early (the disruptor's cap), is scaled to the time it would take to deliver
/// all `iters` to every subscriber at the rate it achieved.
fn run_fixture(b: &mut criterion::Bencher<'_>, f: &mut dyn Fixture, producers: usize) {
    let mut target = 0u64;
    b.iter_custom(|iters| {
        let per = iters.div_ceil(producers as u64).max(1);
        let skipped_before = skipped(f.counts());
        let start = Instant::now();
        let sent = f.publish(producers, per);
        target += sent;
        wait_all(f.counts(), target);
        let spent = start.elapsed();
        let subscribers = f.counts().len() as u64;
        let wanted = iters * subscribers;
        let delivered = (sent * subscribers).saturating_sub(skipped(f.counts()) - skipped_before);
        if delivered < wanted { spent.mul_f64(wanted as f64 / delivered.max(1) as f64) } else { spent }
    });
}

type Make = fn(usize, usize) -> Box<dyn Fixture>;

/// Every system, as (name, constructor(subscribers, producers)).
fn systems() -> Vec<(&'static str, Make)> {
    vec![
        ("rill", |s, p| Box::new(RillFixture::new(s, p))),
        ("crossbeam", |s, p| Box::new(crossbeam_fixture(s, p))),
        ("flume", |s, p| Box::new(flume_fixture(s, p))),
        ("tokio", |s, p| Box::new(TokioFixture::new(s, p, false))),
        ("tokio-blocking", |s, p| Box::new(TokioFixture::new(s, p, true))),
        ("bus", |s, _| Box::new(BusFixture::new(s))),
        ("disruptor", disruptor_fixture),
    ]
}

fn publish(c: &mut Criterion) {
    let mut g = c.benchmark_group("peers_publish_64B");
    g.throughput(Throughput::Elements(1));
    for producers in [1usize, 2] {
        for (name, make) in systems() {
            if name == "bus" && producers > 1 {
                continue; // single-producer
            }
            g.bench_function(BenchmarkId::new(name, producers), |b| {
                let mut f = make(1, producers);
                run_fixture(b, f.as_mut(), producers);
            });
        }
    }
    g.finish();
}

fn fan_out(c: &mut Criterion) {
    let mut g = c.benchmark_group("peers_fan_out_64B");
    g.throughput(Throughput::Elements(1));
    for subscribers in [1usize, 4, 16] {
        for (name, make) in systems() {
            g.bench_function(BenchmarkId::new(name, subscribers), |b| {
                let mut f = make(subscribers, 1);
                run_fixture(b, f.as_mut(), 1);
            });
        }
    }
    g.finish();
}

/// Publishes `n` messages in chunks that fit every system's buffer and times
/// only the reads: `read(chunk)` must consume exactly `chunk` messages.
fn chunked(n: u64, mut publish: impl FnMut(usize), mut read: impl FnMut(usize)) -> Duration {
    let mut left = n;
    let mut spent = Duration::ZERO;
    while left > 0 {
        let chunk = left.min(CAPACITY as u64) as usize;
        publish(chunk);
        let start = Instant::now();
        read(chunk);
        spent += start.elapsed();
        left -= chunk as u64;
    }
    spent
}

fn poll_batches(c: &mut Criterion) {
    let mut g = c.benchmark_group("peers_poll_64B");
    g.throughput(Throughput::Elements(1));
    let body = body();
    for batch in [1usize, 64, 1024] {
        g.bench_function(BenchmarkId::new("rill", batch), |b| {
            let broker = Broker::new(BrokerConfig::default()).unwrap();
            let topic = TopicOptions { retention_bytes: Some(64 << 20), ..TopicOptions::default() };
            broker.create_topic("bench", &topic).unwrap();
            let publisher = broker.publisher("bench").unwrap();
            let options = ConsumerOptions { start: ConsumerStart::Latest };
            let mut consumer = broker.consumer("bench", "bench", options).unwrap();
            let records = vec![Record::new(&body); CAPACITY];
            let mut sum = 0u64;
            b.iter_custom(|iters| {
                chunked(
                    iters,
                    |n| drop(publisher.publish_batch(&records[..n]).unwrap()),
                    |n| {
                        let mut got = 0;
                        while got < n {
                            for m in consumer.poll(batch.min(n - got), Duration::from_secs(10)).unwrap() {
                                sum = sum.wrapping_add(touch(m.payload()));
                                got += 1;
                            }
                        }
                    },
                )
            });
            black_box(sum);
        });
        g.bench_function(BenchmarkId::new("disruptor", batch), |b| {
            let builder = disruptor::build_single_producer(CAPACITY, slot, disruptor::BusySpin);
            let (mut poller, builder) = builder.new_event_poller();
            let mut producer = builder.build();
            let mut sum = 0u64;
            b.iter_custom(|iters| {
                chunked(
                    iters,
                    |n| {
                        use disruptor::Producer;
                        producer.batch_publish(n, |it| {
                            for e in it {
                                e.data.copy_from_slice(&body);
                            }
                        })
                    },
                    |n| {
                        let mut got = 0;
                        while got < n {
                            if let Ok(mut events) = poller.take(batch.min(n - got) as u64) {
                                for e in &mut events {
                                    sum = sum.wrapping_add(touch(&e.data));
                                    got += 1;
                                }
                            }
                        }
                    },
                )
            });
            black_box(sum);
        });
    }
    // The channels have no batch read but flume's `drain`; one entry each.
    g.bench_function(BenchmarkId::new("crossbeam", "recv"), |b| {
        let (tx, rx) = crossbeam_channel::bounded::<Vec<u8>>(CAPACITY);
        let mut sum = 0u64;
        b.iter_custom(|iters| {
            chunked(
                iters,
                |n| (0..n).for_each(|_| tx.send(body.clone()).unwrap()),
                |n| {
                    for m in rx.try_iter().take(n) {
                        sum = sum.wrapping_add(touch(&m));
                    }
                },
            )
        });
        black_box(sum);
    });
    g.bench_function(BenchmarkId::new("flume", "drain"), |b| {
        let (tx, rx) = flume::bounded::<Vec<u8>>(CAPACITY);
        let mut sum = 0u64;
        b.iter_custom(|iters| {
            chunked(
                iters,
                |n| (0..n).for_each(|_| tx.send(body.clone()).unwrap()),
                |_| {
                    for m in rx.drain() {
                        sum = sum.wrapping_add(touch(&m));
                    }
                },
            )
        });
        black_box(sum);
    });
    g.bench_function(BenchmarkId::new("tokio", "try_recv"), |b| {
        let (tx, mut rx) = tokio::sync::broadcast::channel::<Vec<u8>>(CAPACITY);
        let mut sum = 0u64;
        b.iter_custom(|iters| {
            chunked(
                iters,
                |n| (0..n).for_each(|_| drop(tx.send(body.clone()))),
                |n| {
                    for _ in 0..n {
                        sum = sum.wrapping_add(touch(&rx.try_recv().unwrap()));
                    }
                },
            )
        });
        black_box(sum);
    });
    g.bench_function(BenchmarkId::new("bus", "try_recv"), |b| {
        let mut bus = bus::Bus::<Vec<u8>>::new(CAPACITY);
        let mut rx = bus.add_rx();
        let mut sum = 0u64;
        b.iter_custom(|iters| {
            chunked(
                iters,
                |n| (0..n).for_each(|_| bus.broadcast(body.clone())),
                |n| {
                    for _ in 0..n {
                        sum = sum.wrapping_add(touch(&rx.try_recv().unwrap()));
                    }
                },
            )
        });
        black_box(sum);
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_secs(1));
    targets = publish, fan_out, poll_batches
}
criterion_main!(benches);
