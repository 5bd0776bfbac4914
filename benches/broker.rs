//! Broker throughput: one publisher fanning out to 1, 4 and 16 push
//! subscribers, 64-byte payloads, each subscriber reading every payload byte.
//! Throughput is messages published per second; a sample ends when every
//! subscriber has handled every message.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rill::{Ack, Broker, BrokerConfig, Message, Record, SubscriptionOptions, TopicOptions};

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

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    targets = fan_out
}
criterion_main!(benches);
