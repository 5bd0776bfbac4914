//! rill side by side with its peers, in the same criterion groups, so one
//! `cargo bench -p rill-bench --features peers --bench peers` gives rill-vs-peer ratios:
//!
//! * `peers_publish_64B/<system>/<producers>`: 1 and 2 producers -> 1 subscriber;
//! * `peers_fan_out_64B/<system>/<subscribers>`: 1 producer -> 1, 4, 16 subscribers;
//! * `peers_poll_64B/<system>/<batch>`: a reader taking pre-published messages in
//!   batches of 1, 64 and 1024 (rill `Consumer::poll`, disruptor
//!   `EventPoller::take`, flume `drain`, and one at a time for the others).
//!
//! The publish and fan-out groups run every system through the harnesses of
//! `rill-bench` itself (`rill_bench::systems::run`): one peer harness for both
//! tools, with its count checks (a sample whose subscribers did not account
//! for every message fails) and the same payloads, `[u8; 64]` by value with
//! one subscriber and `Arc<[u8]>` shared when fanning out. Subscribers do the
//! minimal work of a plain loop (`Work::Minimal`: `black_box` and count).
//! Every system buffers at most 4096 messages per subscriber (rill:
//! `Overflow::Block` with `lag_limit` 4096; retention 64 MiB, no pre-fill).
//! A sample is one fresh run of `iters` messages per producer, timed from the
//! producers' release to the last subscriber's last message.
//!
//! Only delivered messages count: tokio's broadcast skips what a lagging
//! receiver missed (`Lagged`), and the disruptor's busy-spinning processors
//! crawl when they outnumber cores (a run is capped at `CAP`); such samples are
//! scaled to the time delivering everything would take at the rate achieved.
//!
//! For interleaved, paired comparisons on a noisy machine, with the self-check
//! against each peer's plain loop, use
//! `cargo run --release --bin rill-bench --features peers -- --suite report` instead.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rill::{Broker, BrokerConfig, ConsumerOptions, ConsumerStart, Record, TopicOptions};
use rill_bench::measure::{Amount, Status, Work, touch};
use rill_bench::scenarios::base_shape;
use rill_bench::systems::{self, Env, System};

const PAYLOAD: usize = 64;
const CAPACITY: usize = 4096;
/// Longest one sample may run before its producers stop.
const CAP: Duration = Duration::from_secs(5);

/// Every system the publish and fan-out groups compare, in order: rill and
/// every peer but bare-log (the tool's own ceiling).
fn systems() -> impl Iterator<Item = System> {
    std::iter::once(System::Rill).chain(System::PEERS.into_iter().filter(|s| *s != System::BareLog))
}

fn env() -> Env {
    Env { warmup: false, timeout: CAP, ..Env::default() }
}

/// Times `iters` messages per producer through `system` in a fresh run of
/// the shared harness; panics on a run that lost count.
fn sample(system: System, producers: usize, subscribers: usize, iters: u64) -> Duration {
    let shape = rill_bench::measure::Shape {
        producers,
        subscribers,
        payload: PAYLOAD,
        capacity: CAPACITY,
        amount: Amount::Messages(iters.div_ceil(producers as u64).max(1)),
        work: Work::Minimal,
        ..base_shape()
    };
    let out = systems::run(system, &shape, &env());
    match &out.status {
        Status::Ok | Status::Timeout => {}
        other => panic!("{} failed: {other:?}", system.name()),
    }
    let spent = Duration::from_nanos(out.elapsed_ns);
    let wanted = iters * subscribers as u64;
    if out.status == Status::Timeout {
        eprintln!("{}: a sample ran past {CAP:?}; scaled to the rate it reached", system.name());
    }
    if out.delivered < wanted { spent.mul_f64(wanted as f64 / out.delivered.max(1) as f64) } else { spent }
}

fn publish(c: &mut Criterion) {
    let mut g = c.benchmark_group("peers_publish_64B");
    g.throughput(Throughput::Elements(1));
    for producers in [1usize, 2] {
        for system in systems() {
            if system == System::Bus && producers > 1 {
                continue; // single-producer
            }
            g.bench_function(BenchmarkId::new(system.name(), producers), |b| {
                b.iter_custom(|iters| sample(system, producers, 1, iters))
            });
        }
    }
    g.finish();
}

fn fan_out(c: &mut Criterion) {
    let mut g = c.benchmark_group("peers_fan_out_64B");
    g.throughput(Throughput::Elements(1));
    for subscribers in [1usize, 4, 16] {
        for system in systems() {
            g.bench_function(BenchmarkId::new(system.name(), subscribers), |b| {
                b.iter_custom(|iters| sample(system, 1, subscribers, iters))
            });
        }
    }
    g.finish();
}

fn body() -> Vec<u8> {
    vec![0x5A; PAYLOAD]
}

/// A ring slot of the disruptor's poller: a payload buffer filled in place.
struct Slot {
    data: Vec<u8>,
}

fn slot() -> Slot {
    Slot { data: vec![0; PAYLOAD] }
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
            let options = ConsumerOptions { start: ConsumerStart::Latest, ..Default::default() };
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
