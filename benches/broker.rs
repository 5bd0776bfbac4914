//! Broker throughput, 64-byte payloads, every payload byte read:
//! * one publisher fanning out to 1, 4 and 16 push subscribers (messages
//!   published per second; a sample ends when every subscriber is done);
//! * at-least-once against at-most-once delivery;
//! * pull consumer `poll` with batches of 1, 64 and 1024;
//! * a `**` subscriber over 1, 100 and 1,000 topics, woken for each message
//!   published to one of them (publish, then wait until it is handled): what
//!   a wake-up costs a wildcard subscription as its topic count grows.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rill::{
    Ack, Broker, BrokerConfig, ConsumerOptions, DeliveryMode, Message, Record, SubscriptionOptions, TopicOptions,
};

const PAYLOAD: [u8; 64] = [0x5A; 64];

fn fan_out(c: &mut Criterion) {
    let mut g = c.benchmark_group("broker_fan_out_64B");
    g.throughput(Throughput::Elements(1));
    for subscribers in [1usize, 4, 16] {
        g.bench_with_input(BenchmarkId::new("publish", subscribers), &subscribers, |b, &n| {
            let broker = Broker::new(BrokerConfig::default()).unwrap();
            broker.create_topic("bench", &TopicOptions::default()).unwrap();
            let sum = Arc::new(AtomicU64::new(0));
            let subs: Vec<_> = (0..n)
                .map(|_| {
                    let sum = sum.clone();
                    let mut local = 0u64;
                    broker
                        .subscribe("bench", SubscriptionOptions::default(), move |m: &Message<'_>| {
                            local = local.wrapping_add(m.payload().iter().map(|&x| x as u64).sum::<u64>());
                            if m.offset() % 4096 == 0 {
                                sum.store(local, Ordering::Relaxed);
                            }
                            Ack::Success
                        })
                        .unwrap()
                })
                .collect();
            let publisher = broker.publisher("bench").unwrap();
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(publisher.publish(&Record::new(&PAYLOAD)).unwrap());
                }
                for s in &subs {
                    assert!(s.wait_idle(Duration::from_secs(60)).unwrap());
                }
                start.elapsed()
            });
            black_box(sum.load(Ordering::Relaxed));
        });
    }
    g.finish();
}

/// The cost of at-least-once acking (the cursor moves only after Success)
/// against at-most-once (it moves before the handler), one subscriber.
fn delivery_modes(c: &mut Criterion) {
    let mut g = c.benchmark_group("broker_delivery_64B");
    g.throughput(Throughput::Elements(1));
    for (label, mode) in [("at_least_once", DeliveryMode::AtLeastOnce), ("at_most_once", DeliveryMode::AtMostOnce)] {
        g.bench_function(label, |b| {
            let broker = Broker::new(BrokerConfig::default()).unwrap();
            broker.create_topic("bench", &TopicOptions::default()).unwrap();
            let mut local = 0u64;
            let sub = broker
                .subscribe(
                    "bench",
                    SubscriptionOptions { delivery: mode, ..Default::default() },
                    move |m: &Message<'_>| {
                        local = local.wrapping_add(m.payload().iter().map(|&x| x as u64).sum::<u64>());
                        black_box(local);
                        Ack::Success
                    },
                )
                .unwrap();
            let publisher = broker.publisher("bench").unwrap();
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    publisher.publish(&Record::new(&PAYLOAD)).unwrap();
                }
                assert!(sub.wait_idle(Duration::from_secs(60)).unwrap());
                start.elapsed()
            });
        });
    }
    g.finish();
}

/// Pull consumer throughput by poll batch size: messages are published
/// first, then read back (every payload byte touched) with `poll(batch)`.
fn poll_batches(c: &mut Criterion) {
    let mut g = c.benchmark_group("consumer_poll_64B");
    g.throughput(Throughput::Elements(1));
    for batch in [1usize, 64, 1024] {
        g.bench_with_input(BenchmarkId::new("batch", batch), &batch, |b, &batch| {
            let broker = Broker::new(BrokerConfig::default()).unwrap();
            broker.create_topic("bench", &TopicOptions::default()).unwrap();
            let publisher = broker.publisher("bench").unwrap();
            let mut consumer = broker.consumer("bench", "bench", ConsumerOptions::default()).unwrap();
            b.iter_custom(|iters| {
                let records = vec![Record::new(&PAYLOAD); 1024];
                let mut left = iters as usize;
                while left > 0 {
                    let n = left.min(records.len());
                    publisher.publish_batch(&records[..n]).unwrap();
                    left -= n;
                }
                let end = broker.topic_stats("bench").unwrap().publish_count;
                let start = Instant::now();
                let mut sum = 0u64;
                // Until the end: long runs outgrow retention, and what it
                // trimmed is skipped (and counted as missed), not polled.
                while consumer.position(0).unwrap() < end {
                    for m in consumer.poll(batch, Duration::from_secs(10)).unwrap() {
                        sum = sum.wrapping_add(m.payload().iter().map(|&x| x as u64).sum::<u64>());
                    }
                }
                black_box(sum);
                start.elapsed()
            });
        });
    }
    g.finish();
}

fn wildcard_wake_ups(c: &mut Criterion) {
    let mut g = c.benchmark_group("broker_wildcard_wake_up_64B");
    g.throughput(Throughput::Elements(1));
    for topics in [1usize, 100, 1000] {
        g.bench_with_input(BenchmarkId::new("publish_and_handle", topics), &topics, |b, &n| {
            let broker = Broker::new(BrokerConfig::default()).unwrap();
            for t in 0..n {
                broker.create_topic(&format!("w/{t}"), &TopicOptions::default()).unwrap();
            }
            let handled = Arc::new(AtomicU64::new(0));
            let h = handled.clone();
            let mut local = 0u64;
            let _sub = broker
                .subscribe("w/**", SubscriptionOptions::default(), move |m: &Message<'_>| {
                    local = local.wrapping_add(m.payload().iter().map(|&x| x as u64).sum::<u64>());
                    black_box(local);
                    h.fetch_add(1, Ordering::Release);
                    Ack::Success
                })
                .unwrap();
            let publisher = broker.publisher("w/0").unwrap();
            let mut sent = 0u64;
            b.iter(|| {
                black_box(publisher.publish(&Record::new(&PAYLOAD)).unwrap());
                sent += 1;
                // Wait for this message to be handled (not `wait_idle`, which
                // itself looks at every partition).
                while handled.load(Ordering::Acquire) < sent {
                    std::hint::spin_loop();
                }
            });
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    targets = fan_out, delivery_modes, poll_batches, wildcard_wake_ups
}
criterion_main!(benches);
